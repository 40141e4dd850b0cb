"""Several proxies over one configuration (issue 16): each worker runs in exactly
one of them, the holder of its lease in the fast tier; the others stand by and
take over within leaseTimeout when the holder is killed -9 or paused past it, and
a paused holder that resumes stops its workers; a clean stop hands the leases on
at once. A write acknowledged through one proxy is seen by a read any other sends
to the archive, and a document deleted through one is never faulted back in by
another. Real processes: two replica-set stores and two or three proxies."""
import os
import signal
import time

from conftest import wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, status, wait_feeder
from tier_support import utc_now

WORKERS = ("feeder", "evictor", "warmer")
LEASE_TIMEOUT_SECONDS = 2


def held_here(proxy):
    """The workers whose lease this proxy holds, or None when it does not answer."""
    try:
        workers = status(proxy)["workers"]
    except Exception:  # noqa: BLE001 - a paused or dead proxy
        return None
    return {name for name in WORKERS if workers[name].get("lease", {}).get("heldHere")}


def holders(proxies):
    """worker -> the proxies that say they hold its lease."""
    found = {name: [] for name in WORKERS}
    for proxy in proxies:
        for name in held_here(proxy) or ():
            found[name].append(proxy)
    return found


def one_holder_each(proxies):
    return all(len(found) == 1 for found in holders(proxies).values())


def insert_through(proxy, ids):
    with client_for(proxy) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": utc_now(), "n": i} for i in ids])


def archived_ids(archive):
    with client_for(archive) as client:
        return {document["_id"] for document in client.shop.orders.find({}, {"_id": 1})}


def start_three(tmp_path, archive, fast):
    top = {"leaseTimeout": "%ds" % LEASE_TIMEOUT_SECONDS}
    return [start_proxy(tmp_path / ("proxy%d" % i), archive, fast, max_age="1h", top=top) for i in range(3)]


def test_each_worker_runs_in_one_proxy_and_moves_when_its_holder_dies(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxies = start_three(tmp_path, archive, fast)
    assert wait_until(lambda: one_holder_each(proxies), 15, 0.2), holders(proxies)
    feeder_holder = holders(proxies)["feeder"][0]
    others = [proxy for proxy in proxies if proxy is not feeder_holder]
    # A write through a proxy that does not run the feeder reaches the archive.
    insert_through(others[0], range(0, 50))
    wait_feeder(others[0])
    assert set(range(50)) <= archived_ids(archive)

    feeder_holder.kill9()
    killed_at = time.monotonic()
    assert wait_until(lambda: one_holder_each(others), 20, 0.1), holders(others)
    took = time.monotonic() - killed_at
    # leaseTimeout as a standby counts it, plus one of its reads (a quarter of it).
    assert took < LEASE_TIMEOUT_SECONDS * 3, "the leases took %.1f s to move" % took
    insert_through(others[1], range(50, 100))
    wait_feeder(others[1])
    assert set(range(100)) <= archived_ids(archive)
    statuses = [status(proxy)["workers"]["feeder"]["lease"] for proxy in others]
    assert len({lease["term"] for lease in statuses}) == 1 and statuses[0]["term"] >= 2, statuses
    for proxy in others:
        proxy.stop()


def test_a_paused_holder_loses_its_leases_and_stops_its_workers(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxies = start_three(tmp_path, archive, fast)
    assert wait_until(lambda: one_holder_each(proxies), 15, 0.2), holders(proxies)
    paused = holders(proxies)["feeder"][0]
    others = [proxy for proxy in proxies if proxy is not paused]
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: len(holders(others)["feeder"]) == 1, 20, 0.1), holders(others)
        insert_through(others[0], range(0, 30))
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    # Resumed, it finds its leases gone: it runs none of the workers it held.
    assert wait_until(lambda: held_here(paused) == set(), 10, 0.1), held_here(paused)
    assert "lost the feeder's lease" in paused.log_text()
    applied_before = status(paused)["workers"]["feeder"]["eventsApplied"]
    insert_through(paused, range(30, 60))
    wait_feeder(paused)
    assert set(range(60)) <= archived_ids(archive)
    assert status(paused)["workers"]["feeder"]["eventsApplied"] == applied_before
    assert one_holder_each(proxies), holders(proxies)
    for proxy in proxies:
        proxy.stop()


def test_a_clean_stop_hands_the_leases_on_at_once(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    top = {"leaseTimeout": "30s"}  # a takeover by timeout would fail the test's 10 s
    proxies = [start_proxy(tmp_path / ("proxy%d" % i), archive, fast, max_age="1h", top=top) for i in range(2)]
    assert wait_until(lambda: one_holder_each(proxies), 15, 0.2), holders(proxies)
    holder = holders(proxies)["feeder"][0]
    other = proxies[1] if holder is proxies[0] else proxies[0]
    holder.stop()
    assert wait_until(lambda: held_here(other) == set(WORKERS), 10, 0.1), held_here(other)
    # A proxy restarted on its host and port takes back at once what it held.
    other.kill9()
    other.restart()
    assert wait_until(lambda: held_here(other) == set(WORKERS), 10, 0.1), held_here(other)
    other.stop()


def test_read_your_writes_and_deletes_hold_across_proxies(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxies = start_three(tmp_path, archive, fast)[:2]
    assert wait_until(lambda: all(status(proxy)["proxiesAlive"] == 3 for proxy in proxies), 15, 0.2), \
        [status(proxy).get("proxiesAlive") for proxy in proxies]
    writer, reader = proxies
    with client_for(writer) as writing, client_for(reader) as reading:
        for i in range(60):
            writing.shop.orders.insert_one({"_id": i, "createdAt": utc_now(), "n": i})
            # No time bound: the archive answers, after the feeder passed the write.
            assert reading.shop.orders.find_one({"n": i})["_id"] == i, "write %d not seen through the other" % i
        for i in range(0, 60, 3):
            writing.shop.orders.delete_one({"_id": i})
            # A write by _id through the other proxy: a deleted document stays deleted.
            result = reading.shop.orders.update_one({"_id": i}, {"$set": {"back": True}})
            assert result.matched_count == 0, "document %d came back through the other proxy" % i
    wait_feeder(writer)
    assert archived_ids(archive) == {i for i in range(60) if i % 3}
