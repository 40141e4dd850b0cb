"""Several proxies over one configuration (issue 16): each worker runs in exactly
one of them, the holder of its lease in the fast tier; the others stand by and
take over within leaseTimeout when the holder is killed -9 or paused past it, and
a paused holder that resumes stops its workers; a clean stop hands the leases on
at once. A write acknowledged through one proxy is seen by a read any other sends
to the archive, and a document deleted through one is never faulted back in by
another. A write through one proxy races an eviction in another without losing
anything (fast-tier pins against eviction intents, tier/pins.h), and a killed
process's pins and intents expire. Real processes: two replica-set stores and
two or three proxies."""
import os
import random
import signal
import threading
import time

from bson import ObjectId
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, PyMongoError
import pytest

from conftest import StoreProcess, wait_until
from test_tier_differential import MAX_AGE_SECONDS, SLACK_SECONDS, Workload, assert_converged, diagnose, run, \
    run_against_oracle, seed_data, seeds
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, documents_by_id, namespace_status, start_proxy, status, track, wait_feeder
from tier_support import ago, utc_now

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


def test_a_delete_through_one_proxy_holds_while_the_feeder_is_paused(replicated_tiers, tmp_path):
    """A point read or a write by _id through another proxy looks in the archive
    for what the fast tier lacks only once the feeder applied the deletes acknowledged
    through any proxy (thermocline.deletes): with the feeder's holder paused, the
    archive still holds the deleted documents, and neither may come back."""
    archive, fast = replicated_tiers
    proxies = start_three(tmp_path, archive, fast)
    assert wait_until(lambda: one_holder_each(proxies), 15, 0.2), holders(proxies)
    assert wait_until(lambda: all(status(proxy)["proxiesAlive"] == 3 for proxy in proxies), 15, 0.2)
    insert_through(proxies[0], range(20))
    wait_feeder(proxies[0])
    assert archived_ids(archive) == set(range(20))
    paused = holders(proxies)["feeder"][0]
    writer, reader = [proxy for proxy in proxies if proxy is not paused]
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        with client_for(writer) as writing, client_for(reader) as reading:
            for i in range(0, 20, 2):
                assert writing.shop.orders.delete_one({"_id": i}).deleted_count == 1
                assert reading.shop.orders.find_one({"_id": i}) is None, "document %d read back" % i
                result = reading.shop.orders.update_one({"_id": i + 1 if i % 4 else i}, {"$set": {"back": True}})
                assert result.matched_count == (1 if i % 4 else 0), "document %d came back" % i
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    wait_feeder(writer)
    assert archived_ids(archive) == {i for i in range(20) if i % 2}
    with client_for(fast) as client:
        published = client.thermocline.deletes.find_one({"_id": "shop.orders"})
    assert published is not None and published["time"].time > 0, published


# --- fault-ins against an evictor in another proxy (tier/pins.h) -----------------

PIN_TOP = {"leaseTimeout": "%ds" % LEASE_TIMEOUT_SECONDS}


def start_evictor_then_writer(tmp_path, archive, fast, top, max_age):
    """Proxy A, started first, holds every lease (the evictor runs there); proxy
    B, started once A does, runs no worker: its writes race A's evictions."""
    evicting = start_proxy(tmp_path / "evicting", archive, fast, max_age=max_age, slack="300ms",
                           evictor_period="100ms", top=top)
    assert wait_until(lambda: held_here(evicting) == set(WORKERS), 15, 0.1), held_here(evicting)
    writing = start_proxy(tmp_path / "writing", archive, fast, max_age=max_age, slack="300ms",
                          evictor_period="100ms", top=top)
    assert wait_until(lambda: all(status(proxy)["proxiesAlive"] == 2 for proxy in (evicting, writing)), 15, 0.1)
    assert held_here(writing) == set()
    return evicting, writing


def evictor_counts(proxy):
    return namespace_status(proxy)["evictor"]


def live_pins(fast):
    with client_for(fast) as client:
        return list(client.thermocline.pins.find({}))


def test_writes_through_one_proxy_race_evictions_in_another_and_lose_nothing(replicated_tiers, tmp_path):
    """Documents at the edge of a 3 s window, updated through B while A evicts
    them (and B faults them back in): mostly updates that change nothing (a
    status set to what it is: the document's version stays, so the evictor's
    exact-version delete goes through while B's write is under way), and $inc's.
    Every update matched its one document (the oracle: MongoDB alone, where the
    document always exists), no upsert inserted a second one, every acknowledged
    $inc is in the archive, and the archive refused nothing."""
    archive, fast = replicated_tiers
    evicting, writing = start_evictor_then_writer(tmp_path, archive, fast, PIN_TOP, "3s")
    ids = list(range(16))
    with client_for(writing) as client:
        # Aged in 1 s; no update changes createdAt, so they stay candidates.
        client.shop.orders.insert_many([{"_id": i, "createdAt": ago(2), "n": 0, "status": "open"} for i in ids])
    evicted_before = evictor_counts(evicting)["evicted"]
    sent = {i: 0 for i in ids}
    anomalies, errors = [], []

    def hammer(own, seed):
        chance = random.Random(seed)
        with client_for(writing) as client:
            orders = client.shop.orders
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for i in own:
                    increment = chance.random() < 0.2
                    change = {"$inc": {"n": 1}} if increment else {"$set": {"status": "open"}}
                    try:
                        result = orders.update_one({"_id": i}, change, upsert=chance.random() < 0.3)
                    except PyMongoError as error:  # counted, never expected
                        errors.append("%d: %s" % (i, error))
                        continue
                    sent[i] += increment
                    if result.matched_count != 1 or result.upserted_id is not None:
                        anomalies.append((i, result.raw_result))

    # One writer per document, back to back: its window between the fast-tier
    # check and the write is then open most of the time.
    threads = [threading.Thread(target=hammer, args=([i], i)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], errors[:5]
    evicted = evictor_counts(evicting)["evicted"] - evicted_before
    assert evicted >= 20, "too few evictions raced the writes (%d): the test proves nothing" % evicted
    wait_feeder(writing)
    wait_feeder(evicting)
    archived = documents_by_id(archive)
    lost = {i: (sent[i], archived.get(i, {}).get("n")) for i in ids if archived.get(i, {}).get("n") != sent[i]}
    assert anomalies == [] and lost == {}, "writes lost to %d evictions: %d replies matched no document or " \
        "upserted, archive counts differ for %r (sent, archived)" % (evicted, len(anomalies), lost)
    assert set(archived) == set(ids)
    assert namespace_status(evicting)["feeder"]["refusals"]["count"] == 0
    assert evictor_counts(evicting)["keptPinned"] > 0  # the evictor met B's pins
    # Each write removed its pins once answered.
    assert wait_until(lambda: live_pins(fast) == [], 5, 0.1), live_pins(fast)[:3]
    for proxy in (writing, evicting):
        proxy.stop()


def plant_eviction_intent(fast, ids, lifetime_ms):
    """An intent as an evictor killed -9 mid-batch leaves it (tier/pins.h)."""
    with client_for(fast) as client:
        client.thermocline.evictions.update_one(
            {"_id": ObjectId()},
            {"$set": {"ns": "shop.orders", "ids": ids, "term": 99, "holder": "a dead evictor",
                      "lifetimeMillis": lifetime_ms},
             "$currentDate": {"at": True}}, upsert=True)


def test_concurrent_writes_share_their_pin_rounds_and_leave_no_pin(replicated_tiers, tmp_path):
    """With the evictor elsewhere, every write that faults in pins its documents in
    the fast tier; the writes that ask while an upsert of pins is in flight go in
    the next one together, and the pins of finished writes are all removed."""
    archive, fast = replicated_tiers
    evicting, writing = start_evictor_then_writer(tmp_path, archive, fast, PIN_TOP, "1h")
    threads, failures = 8, []

    def insert_some(first):
        try:
            with client_for(writing) as client:
                for i in range(first, first + 40):
                    client.shop.orders.insert_one({"_id": i, "createdAt": utc_now(), "n": i})
        except PyMongoError as error:  # pragma: no cover - reported below
            failures.append(error)

    workers = [threading.Thread(target=insert_some, args=(1000 * t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    pins = status(writing)["fastTierPins"]
    assert pins["writes"] == threads * 40, pins  # an insert checks its _id: it faults in
    assert 0 < pins["rounds"] < pins["writes"], pins
    assert wait_until(lambda: live_pins(fast) == [], 10, 0.1), live_pins(fast)
    with client_for(writing) as client:
        assert client.shop.orders.count_documents({}) == threads * 40
    for proxy in (evicting, writing):
        proxy.stop()


def test_pins_and_intents_of_killed_processes_expire(replicated_tiers, tmp_path):
    """B, killed -9 while its write waits for an eviction intent (one a dead
    evictor left), leaves its pin: A's evictor keeps the pinned document until the
    pin expires (2 x (leaseTimeout + readYourWritesWait + failoverWait) + 5 s =
    12 s here), then evicts it; a write through A waits for the dead intent only
    until it expires (leaseTimeout)."""
    archive, fast = replicated_tiers
    top = dict(PIN_TOP, readYourWritesWait="1s", failoverWait="500ms")
    evicting, writing = start_evictor_then_writer(tmp_path, archive, fast, top, "4s")
    with client_for(evicting) as client:
        client.shop.orders.insert_many([{"_id": "z", "createdAt": ago(0.5), "n": 0},
                                        {"_id": "y", "createdAt": utc_now(), "n": 0}])
    wait_feeder(evicting)
    plant_eviction_intent(fast, ["z", "y"], 2500)
    planted = time.monotonic()

    def stuck_write():
        try:
            with MongoClient(writing.uri, retryWrites=False, serverSelectionTimeoutMS=2000) as client:
                client.shop.orders.update_one({"_id": "z"}, {"$inc": {"n": 1}})
        except PyMongoError:
            pass  # its proxy is killed under it

    thread = threading.Thread(target=stuck_write)
    thread.start()
    assert wait_until(lambda: any("z" in pin.get("ids", []) for pin in live_pins(fast)), 2, 0.02), live_pins(fast)
    writing.kill9()
    pinned_at = time.monotonic()

    # A write through A waits for the dead evictor's intent, then runs.
    with client_for(evicting) as client:
        assert client.shop.orders.update_one({"_id": "y"}, {"$inc": {"n": 1}}).matched_count == 1
    assert time.monotonic() - planted < 2.5 + 2
    thread.join()

    # z aged 3.5 s after its insert: A's evictor looks at it every 100 ms and keeps it.
    time.sleep(max(0, pinned_at + 7 - time.monotonic()))
    with client_for(fast) as client:
        assert client.shop.orders.find_one({"_id": "z"}) is not None, "evicted under a live pin"
    assert evictor_counts(evicting)["keptPinned"] >= 1
    # Past the pin's lifetime it goes, and the archive holds it as written.
    with client_for(fast) as client:
        assert wait_until(lambda: client.shop.orders.find_one({"_id": "z"}) is None, 13, 0.1), \
            "the pin of a killed proxy still holds eviction %.1f s later" % (time.monotonic() - pinned_at)
    assert time.monotonic() - pinned_at > 12 - 3
    assert documents_by_id(archive)["z"]["n"] == 0
    evicting.stop()


# --- the differential test through three proxies, disturbed at seeded moments ----

def feeder_holder(proxies):
    """The one proxy among these (alive, not paused) that holds the feeder's
    lease, once there is one."""
    found = []

    def one_holder():
        found[:] = holders(proxies)["feeder"]
        return len(found) == 1
    assert wait_until(one_holder, 20, 0.1), found
    return found[0]


def run_reconnecting(collection, kind, arguments):
    """run(), once more after a connection error: the test kills a proxy only
    between operations, so an operation that met its closed connection never ran
    (the driver itself retries the retryable ones; update_many and delete_many are
    not)."""
    try:
        return run(collection, kind, arguments)
    except AutoReconnect:
        return run(collection, kind, arguments)


def wait_feeder_past(proxies, fast):
    """The feeder (wherever it runs) has applied every write the fast tier had
    acknowledged now, whichever proxy took it, a killed one's included."""
    with client_for(fast) as client:
        written = client.admin.command("ping")["operationTime"]
    assert wait_until(lambda: any(namespace_status(proxy)["feeder"]["appliedTime"] >= written
                                  for proxy in proxies), 30, 0.1), [namespace_status(proxy) for proxy in proxies]


@pytest.mark.parametrize("shape", ["lab", "application"])
def test_random_operations_through_three_proxies_match_one_server(replicated_tiers, tmp_path, shape):
    """test_tier_differential's workload through one client whose URI lists three
    proxies (the driver spreads the operations over them), every worker running in
    the holder of its lease, on the lab's collection and on an application's
    (secondary and unique indexes, documents without the time field). At moments
    drawn from the seed the feeder's holder is killed -9, then restarted, and the
    next holder is paused past leaseTimeout and resumed. Every reply equals one
    MongoDB's, the resumed proxy runs no worker, and the tiers converge to the
    oracle. TIER_PROXIES_SEEDS, TIER_PROXIES_APP_SEEDS and TIER_PROXIES_OPS by hand,
    as for the differential test."""
    archive, fast = replicated_tiers
    oracle = track(StoreProcess(tmp_path / "oracle")).start()
    operations = int(os.environ.get("TIER_PROXIES_OPS", "400"))
    application = shape == "application"
    first_new_id = seed_data(archive, oracle, utc_now(), application)
    top = {"leaseTimeout": "%ds" % LEASE_TIMEOUT_SECONDS, "readYourWritesWait": "20s"}
    proxies = [start_proxy(tmp_path / ("proxy%d" % i), archive, fast, max_age="%ds" % MAX_AGE_SECONDS,
                           slack="%dms" % int(SLACK_SECONDS * 1000), top=top) for i in range(3)]
    assert wait_until(lambda: one_holder_each(proxies), 15, 0.2), holders(proxies)
    for seed in seeds("TIER_PROXIES_APP_SEEDS" if application else "TIER_PROXIES_SEEDS", "21"):
        chance = random.Random(seed)
        moments = sorted(chance.sample(range(operations // 5, operations * 4 // 5), 3))
        disturbances = dict(zip(moments, ("kill", "restart", "pause")))
        answering = list(proxies)  # neither killed nor paused
        killed, paused, resumes = [], [], []

        def disturb(index):
            action = disturbances.get(index)
            if action == "kill":
                killed.append(feeder_holder(answering))
                killed[-1].kill9()
                answering.remove(killed[-1])
            elif action == "restart":
                killed[-1].restart()
                answering.append(killed[-1])
            elif action == "pause":
                paused.append(feeder_holder(answering))
                answering.remove(paused[-1])
                os.kill(paused[-1].pid, signal.SIGSTOP)
                resumes.append(threading.Timer(LEASE_TIMEOUT_SECONDS + 1.5, os.kill,
                                               (paused[-1].pid, signal.SIGCONT)))
                resumes[-1].start()

        uri = "mongodb://%s/?localThresholdMS=1000&heartbeatFrequencyMS=500" % ",".join(
            "127.0.0.1:%d" % proxy.port for proxy in proxies)
        with MongoClient(uri, serverSelectionTimeoutMS=20000, socketTimeoutMS=30000) as tiered_client, \
                client_for(oracle) as oracle_client:
            counts = run_against_oracle(tiered_client.shop.orders, oracle_client.shop.orders,
                                        Workload(seed, first_new_id, application), operations, seed,
                                        lambda: diagnose(archive, fast, oracle), disturb, run_reconnecting)
            first_new_id += operations  # the next seed's new ids stay new
        for timer in resumes:
            timer.join()
        # Resumed past its lease, the paused holder found it taken: it runs no worker.
        assert wait_until(lambda: held_here(paused[0]) == set(), 10, 0.1), held_here(paused[0])
        assert "lost the feeder's lease" in paused[0].log_text(), paused[0].log_tail()
        assert one_holder_each(proxies), holders(proxies)
        # The driver spread the operations: each proxy routed some since its (re)start.
        routed = [sum(namespace_status(proxy)["routes"].values()) for proxy in proxies]
        assert all(count > 0 for count in routed), routed
        wait_feeder_past(proxies, fast)
        assert_converged(feeder_holder(proxies), archive, fast, oracle, seed)
        if application:  # the mix must have made unique keys collide, or it proves nothing
            assert counts.get("duplicate key", 0) >= 3, counts
        print("%s seed %d: %r, disturbed at %r, routed by each proxy %r" % (shape, seed, counts, disturbances,
                                                                            routed))
    for proxy in proxies:
        proxy.stop()
    oracle.stop()
