"""The feeder keeps a share of a saturated archive (issue 20, proxy/archive_share.h).
The archive's data-file reads are capped (--read-iops) under a cache far smaller
than its documents; clients reading old documents of an untiered collection
(shop.history: no read of it waits for the feeder) through the proxy saturate it
while others update recent orders, so the feeder, one connection beside the
proxy's pool, falls behind. The proxy that runs it then sends fewer requests to the archive
at once (backends.archive.inFlightLimit; its log says so), widens back to its whole
pool once the feeder is current, and every acknowledged update reaches the archive.
A second proxy over the same configuration, which does not run the feeder, does
the same from the lag the feeder's holder renews in its lease, when the clients
are its own."""
import datetime
import random
import threading
import time

from pymongo import MongoClient
import pytest

from conftest import StoreProcess, wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, status, track

OLD, RECENT = 20000, 4000
POOL_SIZE = 64
# ~80 updates a second: far more than the feeder's 65th of the archive's reads, few
# enough that the backlog left when the limit narrows is replayed in seconds.
UPDATE_PAUSE = 0.05


def fill(archive):
    """OLD documents in shop.history, RECENT in the tiered shop.orders (ids from OLD)."""
    old = datetime.datetime(2020, 1, 1)
    now = datetime.datetime.utcnow()
    padding = "x" * 1000
    with client_for(archive) as client:
        client.shop.orders.create_index("createdAt")
        for first in range(0, OLD + RECENT, 2000):
            collection = client.shop.history if first < OLD else client.shop.orders
            collection.insert_many([{"_id": i, "createdAt": old if i < OLD else now, "n": 0, "pad": padding}
                                    for i in range(first, first + 2000)])


def holds_feeder(proxy):
    return status(proxy)["workers"]["feeder"].get("lease", {}).get("heldHere", False)


@pytest.mark.parametrize("through", ["the feeder's proxy", "another proxy"])
def test_a_lagging_feeder_narrows_the_archive_and_catches_up(tmp_path, through):
    archive = track(StoreProcess(tmp_path / "archive", replica_set="rs0",
                                 extra_args=["--read-iops", "150", "--cache-size", "2MB"])).start()
    fast = track(StoreProcess(tmp_path / "fast", replica_set="rs1")).start()
    fill(archive)
    count = 1 if through == "the feeder's proxy" else 2
    proxies = [start_proxy(tmp_path / ("proxy%d" % i), archive, fast, max_age="30d", coverage="complete")
               for i in range(count)]
    assert wait_until(lambda: any(holds_feeder(proxy) for proxy in proxies), 20, 0.1)
    # The clients' proxy: the feeder's own, or the one that only follows its lease.
    proxy = next(proxy for proxy in proxies if holds_feeder(proxy) == (count == 1))
    with client_for(archive) as source, client_for(fast) as client:  # as the warmer leaves them
        client.shop.orders.insert_many(source.shop.orders.find())
    stopping = threading.Event()
    increments = [0] * 4
    failures = []

    def read_old(seed):
        chance = random.Random(seed)
        try:
            with MongoClient(proxy.uri) as client:
                while not stopping.is_set():
                    client.shop.history.find_one({"_id": chance.randrange(OLD)})
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)

    def update_recent(slot):
        chance = random.Random(100 + slot)
        try:
            with MongoClient(proxy.uri) as client:
                while not stopping.is_set():
                    client.shop.orders.update_one({"_id": OLD + chance.randrange(RECENT)}, {"$inc": {"n": 1}})
                    increments[slot] += 1
                    time.sleep(UPDATE_PAUSE)
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=read_old, args=(seed,), daemon=True) for seed in range(16)]
    threads += [threading.Thread(target=update_recent, args=(slot,), daemon=True) for slot in range(4)]
    for thread in threads:
        thread.start()
    try:
        limits = []

        def narrowed():
            backends = status(proxy)["backends"]
            limits.append(backends["archive"]["inFlightLimit"])
            assert backends["fast"]["inFlightLimit"] == POOL_SIZE
            return limits[-1] < POOL_SIZE
        assert wait_until(narrowed, 40, 0.2), (limits[-5:], status(proxy)["workers"]["feeder"])
    finally:
        stopping.set()
        for thread in threads:
            thread.join(30)
    assert not failures, failures
    assert "so that its replay keeps a share of the archive" in proxy.log_text()
    # Caught up, the proxy has its whole pool again, and the archive every update.
    assert wait_until(lambda: status(proxy)["backends"]["archive"]["inFlightLimit"] == POOL_SIZE, 60, 0.2), \
        (status(proxy)["backends"]["archive"], status(proxy)["workers"]["feeder"])
    with client_for(archive) as client:
        applied = lambda: sum(document["n"] for document in client.shop.orders.find({"_id": {"$gte": OLD}}, {"n": 1}))  # noqa: E731
        assert wait_until(lambda: applied() == sum(increments), 30, 0.5), (applied(), sum(increments))
    for each in proxies:
        each.stop()
