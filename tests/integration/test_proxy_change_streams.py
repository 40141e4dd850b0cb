"""Change streams through `thermocline proxy` (issue 15): a stream on a tiered
namespace opens on the fast tier, and the proxy leaves out the workers' writes
(the warmer's copies, the proxy's own fault-in copies, the evictor's deletes),
so a client sees every application write exactly once, in order, and nothing
else (I9). The oracle is one plain store given the same documents and the same
operations: its stream is what MongoDB alone would report."""
import json
import signal
import subprocess
import time

import bson
import pytest
from bson import Timestamp, json_util
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import NODE_DIR, StoreProcess, wait_until
from test_store_mongosh import run_mongosh
from test_store_libmongoc_watch import WatchClient, watch_client_binary  # noqa: F401 (a fixture)
from test_store_node import node_or_skip
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import WorkerProcess, client_for, namespace_status, start_proxy, tier_config, track, wait_feeder
from tier_support import wait_warm
from tier_support import utc_now, ago


@pytest.fixture
def stores(tmp_path):
    """The archive, the fast tier and the oracle, each a one-member replica set."""
    started = [track(StoreProcess(tmp_path / name, replica_set=name).start()) for name in ("rs0", "rs1", "oracle")]
    yield started
    for process in started:
        if process.is_alive():
            process.stop()


def cluster_time(process):
    with MongoClient(process.uri, serverSelectionTimeoutMS=10000) as client:
        return client.admin.command("ping")["operationTime"]


def shape(event):
    """What the oracle and the proxy's stream must agree on, event by event."""
    kept = {"operationType": event["operationType"], "documentKey": event.get("documentKey")}
    if "fullDocument" in event:
        # The two runs write at different times: createdAt is the clock's, not the stream's.
        kept["fullDocument"] = {k: v for k, v in event["fullDocument"].items() if k != "createdAt"}
    if "updateDescription" in event:
        kept["updateDescription"] = event["updateDescription"]
    kept["inTransaction"] = "txnNumber" in event and "lsid" in event
    return kept


def read_until(stream, last_id, timeout=60):
    """The stream's events up to and including the insert of _id last_id."""
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = stream.try_next()
        if event is None:
            continue
        events.append(event)
        if event["operationType"] == "insert" and event["documentKey"]["_id"] == last_id:
            return events
    pytest.fail("the stream did not reach %r in %d s: %r" % (last_id, timeout, [shape(e) for e in events]))


def application_writes(client, evicted_wait):
    """Bursts on one document and on several, an update of a document only the
    archive holds (it faults in), a transaction, and time for the evictor to
    delete what was written (evicted_wait()); ends with the insert of "end"."""
    orders = client.shop.orders
    # One document, every kind of write in quick succession.
    orders.insert_one({"_id": "burst", "createdAt": utc_now(), "n": 0})
    orders.update_one({"_id": "burst"}, {"$inc": {"n": 1}, "$set": {"tag": "x"}})
    orders.replace_one({"_id": "burst"}, {"createdAt": utc_now(), "replaced": True})
    orders.delete_one({"_id": "burst"})
    orders.insert_one({"_id": "burst", "createdAt": utc_now(), "again": True})
    # Several documents, interleaved.
    orders.insert_many([{"_id": i, "createdAt": utc_now(), "n": i} for i in range(10)])
    for i in range(10):
        orders.update_one({"_id": i}, {"$set": {"seen": i}})
        if i % 3 == 0:
            orders.delete_one({"_id": i})
        elif i % 3 == 1:
            orders.replace_one({"_id": i}, {"createdAt": utc_now(), "r": i})
    # Documents only the archive holds: the write faults them in first.
    orders.update_one({"_id": "old-1"}, {"$set": {"touched": True}})
    orders.update_many({"_id": {"$in": ["old-2", "old-3"]}}, {"$inc": {"n": 5}})
    orders.delete_one({"_id": "old-4"})
    # A transaction: its events carry lsid and txnNumber.
    with client.start_session() as session:
        with session.start_transaction():
            # (its first statement only may fault in: the proxy refuses the others)
            orders.insert_many([{"_id": "txn-a", "createdAt": utc_now()}, {"_id": "txn-b", "createdAt": utc_now()}],
                               session=session)
    orders.update_one({"_id": "txn-a"}, {"$set": {"committed": True}})
    evicted_wait()
    # After the evictor deleted them: more writes to the same documents fault in.
    orders.update_one({"_id": 2}, {"$set": {"after": "eviction"}})
    orders.delete_one({"_id": "txn-b"})
    orders.insert_one({"_id": "end", "createdAt": utc_now()})


def seed(process, count_recent):
    """Documents the application wrote before: four older than the window (the
    archive only), and count_recent inside it (the warmer copies them)."""
    with MongoClient(process.uri, serverSelectionTimeoutMS=10000) as client:
        orders = client.shop.orders
        orders.create_index("createdAt")
        orders.insert_many([{"_id": "old-%d" % i, "createdAt": ago(3600), "n": i} for i in range(1, 5)])
        orders.insert_many([{"_id": "recent-%d" % i, "createdAt": utc_now(), "n": i} for i in range(count_recent)])


def test_stream_shows_each_application_write_once_and_no_worker_write(stores, tmp_path):
    archive, fast, oracle = stores
    for process in (archive, oracle):
        seed(process, 200)
    start = cluster_time(fast)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="3s", slack="300ms")
    with client_for(proxy) as client, MongoClient(oracle.uri) as oracle_client:
        # Opened from before the proxy started: the warmer's first copies are in its range.
        stream = client.shop.orders.watch(start_at_operation_time=start, max_await_time_ms=200)
        oracle_stream = oracle_client.shop.orders.watch(max_await_time_ms=200)
        wait_warm(proxy)
        application_writes(client, lambda: wait_evicted(fast))
        application_writes(oracle_client, lambda: None)
        events = read_until(stream, "end")
        expected = read_until(oracle_stream, "end")
        stream.close()
        oracle_stream.close()
    assert [shape(e) for e in events] == [shape(e) for e in expected]
    # The workers did write in the stream's range: copies, fault-ins and deletes.
    item = namespace_status(proxy)
    assert item["faultedIn"] >= 4, item
    assert item["warmer"]["copied"] >= 200, item
    assert item["evictor"]["evicted"] >= 10, item
    tokens = [e["_id"]["_data"] for e in events]
    assert tokens == sorted(tokens)
    proxy.stop()


def wait_evicted(fast):
    """Until the evictor has deleted what the writes so far left in the fast tier
    (but the last three, which a fault-in may just have copied in)."""
    assert wait_until(lambda: fast_count(fast) <= 3, 30, 0.2), "the evictor did not delete the documents"


def fast_count(fast):
    with MongoClient(fast.uri, serverSelectionTimeoutMS=10000) as client:
        return client.shop.orders.count_documents({})


def test_update_lookup_finds_documents_evicted_since_in_the_archive(stores, tmp_path):
    """fullDocument: "updateLookup" gives the document's current version, as
    MongoDB alone would, also once the evictor removed it from the fast tier (the
    archive holds it, I2); null for one a client deleted since."""
    archive, fast, _ = stores
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="2s", slack="200ms", coverage="complete")
    with client_for(proxy) as client:
        orders = client.shop.orders
        stream = orders.watch(full_document="updateLookup", max_await_time_ms=200)
        orders.insert_many([{"_id": "kept", "createdAt": utc_now()}, {"_id": "gone", "createdAt": utc_now()}])
        orders.update_one({"_id": "kept"}, {"$set": {"a": 1}})
        orders.update_one({"_id": "kept"}, {"$set": {"b": 2}})
        orders.update_one({"_id": "gone"}, {"$set": {"a": 1}})
        assert wait_until(lambda: fast_count(fast) == 0, 30, 0.2), "the evictor did not delete the documents"
        orders.delete_one({"_id": "gone"})  # faults it in, then deletes it
        events = []
        assert wait_until(lambda: events.extend(filter(None, [stream.try_next()])) or len(events) >= 6, 30, 0), events
        stream.close()
    updates = [(e["documentKey"]["_id"], e["fullDocument"]) for e in events if e["operationType"] == "update"]
    current = {k: v for k, v in updates[0][1].items() if k != "createdAt"} if updates[0][1] else None
    assert current == {"_id": "kept", "a": 1, "b": 2}, updates
    assert updates[1][1] == updates[0][1]
    assert updates[2] == ("gone", None)
    assert [e["operationType"] for e in events] == ["insert", "insert", "update", "update", "update", "delete"]
    proxy.stop()


def test_stages_after_change_stream_behave_as_on_mongodb(stores, tmp_path):
    """$match, $project, $addFields, $replaceRoot... after $changeStream give what
    MongoDB alone gives (the oracle), with the workers' events still left out: the
    proxy applies the stages from the first that may reshape an event on (a
    $project may drop what tells a worker's event apart); a stage that changes the
    resume token is ChangeStreamFatalError (280), one a change stream does not
    allow is refused as MongoDB refuses it; an untiered namespace's stream is the
    archive's, as before."""
    archive, fast, oracle = stores
    for process in (archive, oracle):
        seed(process, 50)
    start, oracle_start = cluster_time(fast), cluster_time(oracle)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="3s", slack="300ms")
    pipelines = [
        [{"$match": {"operationType": {"$in": ["insert", "update", "delete"]}}}],
        [{"$project": {"operationType": 1, "documentKey": 1, "updateDescription": 1}}],
        [{"$match": {"operationType": {"$ne": "replace"}}},
         {"$addFields": {"key": "$documentKey._id", "fullDocument.extra": 1}},
         {"$match": {"key": {"$type": "string"}}}, {"$unset": ["clusterTime", "wallTime", "ns"]}],
        [{"$replaceRoot": {"newRoot": {"_id": "$_id", "op": "$operationType", "key": "$documentKey"}}}],
    ]
    with client_for(proxy) as client, MongoClient(oracle.uri) as oracle_client:
        streams = [client.shop.orders.watch(p, start_at_operation_time=start, max_await_time_ms=200)
                   for p in pipelines]
        oracle_streams = [oracle_client.shop.orders.watch(p, max_await_time_ms=200) for p in pipelines]
        with pytest.raises(OperationFailure) as raised:
            client.shop.orders.watch([{"$group": {"_id": None}}])
        with pytest.raises(OperationFailure) as expected:
            oracle_client.shop.orders.watch([{"$group": {"_id": None}}])
        assert (raised.value.code, raised.value.details["errmsg"]) == (expected.value.code, expected.value.details["errmsg"])
        wait_warm(proxy)
        for writer in (client, oracle_client):
            orders = writer.shop.orders
            orders.insert_one({"_id": "a", "createdAt": utc_now(), "n": 1})
            orders.update_one({"_id": "a"}, {"$set": {"n": 2}})
            orders.replace_one({"_id": "a"}, {"createdAt": utc_now(), "n": 3})
            orders.update_one({"_id": "old-1"}, {"$set": {"touched": True}})  # faults in
            orders.delete_one({"_id": "a"})
            orders.insert_one({"_id": "end", "createdAt": utc_now()})
        # Each pipeline's count of events: the replace left out by the first and third.
        for stream, oracle_stream, count in zip(streams, oracle_streams, (5, 6, 5, 6)):
            got, expected = read_until_count(stream, count), read_until_count(oracle_stream, count)
            assert [scrub(e) for e in got] == [scrub(e) for e in expected]
            stream.close()
            oracle_stream.close()
        for through, since in ((client, start), (oracle_client, oracle_start)):
            with pytest.raises(OperationFailure) as raised:
                through.shop.orders.watch([{"$project": {"_id": 0}}], start_at_operation_time=since).try_next()
            assert raised.value.code == 280 and "resume token" in str(raised.value)
        customers = client.shop.customers.watch(max_await_time_ms=200)
        client.shop.customers.insert_one({"_id": "c"})
        seen = []
        assert wait_until(lambda: seen.extend(filter(None, [customers.try_next()])) or seen, 10, 0)
        assert (seen[0]["operationType"], seen[0]["documentKey"]) == ("insert", {"_id": "c"})
        customers.close()
    proxy.stop()


def read_until_count(stream, count, timeout=30):
    events = []
    assert wait_until(lambda: events.extend(filter(None, [stream.try_next()])) or len(events) >= count,
                      timeout, 0), events
    return events


def scrub(event):
    """An event without what differs between two clusters: its token, times, and
    the clock's createdAt."""
    kept = {k: v for k, v in event.items() if k not in ("_id", "clusterTime", "wallTime")}
    for key in ("fullDocument",):
        if isinstance(kept.get(key), dict):
            kept[key] = {k: v for k, v in kept[key].items() if k != "createdAt"}
    return kept


def node_shape(event):
    """The oracle's event as proxy_change_stream.mjs prints one."""
    full = event.get("fullDocument")
    return json.loads(json.dumps({
        "op": event["operationType"],
        "id": event["documentKey"]["_id"],
        "txn": "txnNumber" in event and "lsid" in event,
        "full": {k: v for k, v in full.items() if k != "createdAt"} if full is not None else None,
        "update": event.get("updateDescription"),
    }))


def test_node_driver_stream_through_a_proxy_killed_and_restarted(stores, tmp_path):
    """The Node.js driver's watch() through the proxy, which is killed -9 and
    restarted in the middle of the writes: the driver resumes with its last
    token (the fast tier's) and shows every application write once, in order,
    and no worker write, as the oracle's stream does."""
    node = node_or_skip()
    archive, fast, oracle = stores
    for process in (archive, oracle):
        seed(process, 100)
    start = cluster_time(fast)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="3s", slack="300ms")
    watcher = subprocess.Popen([node, str(NODE_DIR / "proxy_change_stream.mjs"), proxy.uri, str(start.time),
                                str(start.inc)], cwd=str(NODE_DIR), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        lines = []
        for line in watcher.stdout:
            lines.append(line.decode("utf-8", "replace").rstrip())
            if lines[-1] in ("ready", "not ok"):
                break
        assert lines[-1] == "ready", "\n".join(lines)
        wait_warm(proxy)

        def evicted_then_crash():
            wait_evicted(fast)
            proxy.kill9()
            time.sleep(1)  # the watcher's getMores fail meanwhile
            proxy.restart()

        with client_for(proxy) as client:
            application_writes(client, evicted_then_crash)
        output, _ = watcher.communicate(timeout=100)
        lines += output.decode("utf-8", "replace").splitlines()
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert lines[-1] == "done", "\n".join(lines[-30:])
    seen = [json.loads(line) for line in lines if line.startswith("{")]
    with MongoClient(oracle.uri) as oracle_client:
        oracle_stream = oracle_client.shop.orders.watch(max_await_time_ms=200)
        application_writes(oracle_client, lambda: None)
        expected = [node_shape(e) for e in read_until(oracle_stream, "end")]
        oracle_stream.close()
    assert seen == expected
    proxy.stop()


def test_resume_points_and_history_lost_through_the_proxy(stores, tmp_path):
    """resumeAfter, startAfter and startAtOperationTime take the fast tier's
    tokens and times through the proxy (and through a second proxy of the same
    configuration); a token older than the fast tier's history is
    ChangeStreamHistoryLost (286), as on MongoDB."""
    archive, fast, _ = stores
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    other = start_proxy(tmp_path / "other", archive, fast, max_age="1h", coverage="complete",
                        top={"feederEnabled": "false", "evictorEnabled": "false", "warmerEnabled": "false"})
    with client_for(proxy) as client, client_for(other) as other_client:
        orders = client.shop.orders
        orders.insert_many([{"_id": i, "createdAt": utc_now()} for i in range(4)])  # before: never shown
        stream = orders.watch(max_await_time_ms=200)
        events = []
        orders.insert_one({"_id": "a", "createdAt": utc_now()})
        assert wait_until(lambda: events.extend(filter(None, [stream.try_next()])) or events, 10, 0)
        token, time_of_first = events[0]["_id"], events[0]["clusterTime"]
        stream.close()
        for i in ("b", "c"):
            orders.insert_one({"_id": i, "createdAt": utc_now()})
        for options in ({"resume_after": token}, {"start_after": token},
                        {"start_at_operation_time": time_of_first}):
            for through in (client, other_client):
                resumed = through.shop.orders.watch(max_await_time_ms=200, **options)
                ids = []
                assert wait_until(lambda: ids.extend(e["documentKey"]["_id"] for e in filter(None, [resumed.try_next()]))
                                  or len(ids) >= (3 if "start_at_operation_time" in options else 2), 10, 0), ids
                resumed.close()
                expected = ["a", "b", "c"] if "start_at_operation_time" in options else ["b", "c"]
                assert ids == expected, (options, ids)
        with pytest.raises(OperationFailure) as raised:
            orders.watch(resume_after={"_data": "82000000010000000101"}).try_next()
        assert raised.value.code == 286 and raised.value.details["codeName"] == "ChangeStreamHistoryLost"
    other.stop()
    proxy.stop()


def test_database_and_cluster_streams(stores, tmp_path):
    """A database with no tiered namespace is watched on the archive, which holds
    all of it; a database holding one, and the whole cluster, are refused with
    IllegalOperation naming the limitation (no silent loss)."""
    archive, fast, _ = stores
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    with client_for(proxy) as client:
        for watch, where in ((client.shop.watch, "shop"), (client.watch, "the whole cluster")):
            with pytest.raises(OperationFailure) as raised:
                watch()
            assert raised.value.code == 20 and where in str(raised.value) and "shop.orders" in str(raised.value)
        stream = client.plain.watch(max_await_time_ms=200)
        client.plain.things.insert_one({"_id": 1})
        client.plain.more.insert_one({"_id": 2})
        seen = []
        assert wait_until(lambda: seen.extend(filter(None, [stream.try_next()])) or len(seen) >= 2, 10, 0), seen
        assert [(e["ns"]["coll"], e["documentKey"]["_id"]) for e in seen] == [("things", 1), ("more", 2)]
        stream.close()
    proxy.stop()


class ProxyAddress:
    """What WatchClient reads of a process: a URI with a query part."""

    def __init__(self, proxy):
        self.uri = proxy.uri + "?appname=watch_client"


def test_libmongoc_watch_through_the_proxy(stores, tmp_path, watch_client_binary):
    """libmongoc's mongoc_collection_watch() through the proxy, from a cluster
    time before the warmer copied anything: the same events as the oracle's
    stream, nothing of the workers'."""
    archive, fast, oracle = stores
    for process in (archive, oracle):
        seed(process, 100)
    with MongoClient(oracle.uri) as oracle_client:
        oracle_stream = oracle_client.shop.orders.watch(max_await_time_ms=200)
        application_writes(oracle_client, lambda: None)
        expected = [shape(e) for e in read_until(oracle_stream, "end")]
        oracle_stream.close()
    start = cluster_time(fast)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="3s", slack="300ms")
    watcher = WatchClient(watch_client_binary, ProxyAddress(proxy), "orders", count=len(expected),
                          options={"startAtOperationTime": Timestamp(start.time, start.inc)})
    try:
        watcher.wait_for(lambda line: line == "ready", "ready")
        wait_warm(proxy)
        with client_for(proxy) as client:
            application_writes(client, lambda: wait_evicted(fast))
        watcher.wait_for_events(len(expected))
        assert watcher.finish() == 0, watcher.output()
    finally:
        watcher.stop()
    assert [shape(e) for e in watcher.events()] == expected
    watcher.assert_no_sanitizer_report()
    proxy.stop()


MONGOSH_WATCH = """
const stream = db.getSiblingDB('shop').orders.watch([], {startAtOperationTime: Timestamp({t: %d, i: %d}),
                                                         maxAwaitTimeMS: 200});
const deadline = Date.now() + 60000;
while (Date.now() < deadline) {
  const event = stream.tryNext();
  if (event === null) continue;
  print('EVENT ' + EJSON.stringify(event, {relaxed: false}));
  if (event.operationType === 'insert' && event.documentKey._id === 'end') break;
}
print('DONE');
"""


def test_mongosh_watch_through_the_proxy(stores, tmp_path):
    """mongosh's watch() through the proxy, resuming from a cluster time before
    the proxy started once every write is done: the history in between holds the
    warmer's copies, the fault-ins and the evictor's deletes, none of which it
    shows; the application's events are the oracle's."""
    archive, fast, oracle = stores
    for process in (archive, oracle):
        seed(process, 100)
    start = cluster_time(fast)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="3s", slack="300ms")
    wait_warm(proxy)
    with client_for(proxy) as client, MongoClient(oracle.uri) as oracle_client:
        oracle_stream = oracle_client.shop.orders.watch(max_await_time_ms=200)
        application_writes(client, lambda: wait_evicted(fast))
        application_writes(oracle_client, lambda: None)
        expected = [shape(e) for e in read_until(oracle_stream, "end")]
        oracle_stream.close()
    code, stdout, stderr = run_mongosh([proxy.uri, "--quiet", "--eval", MONGOSH_WATCH % (start.time, start.inc)],
                                       tmp_path, timeout=90)
    assert code == 0 and stdout.strip().endswith("DONE"), (code, stdout[-2000:], stderr[-2000:])
    events = [json_util.loads(line[len("EVENT "):]) for line in stdout.splitlines() if line.startswith("EVENT ")]
    assert [shape(e) for e in events] == expected
    proxy.stop()


def eviction_mark(fast, identifier):
    with client_for(fast) as client:
        return client.thermocline.workerWrites.find_one({"_id": {"ns": "shop.orders", "id": identifier, "op": "evict"}})


def evict_with_a_worker(work_dir, config, fast):
    """One `thermocline evictor` until the fast tier holds no document."""
    evictor = track(WorkerProcess(work_dir, config, "evictor")).start()
    try:
        assert wait_until(lambda: fast_count(fast) == 0, 20, 0.1), "the evictor did not evict"
    finally:
        evictor.stop()


@pytest.mark.parametrize("how", ["a pin keeps it", "its evictor dies"])
def test_an_eviction_that_deletes_nothing_keeps_the_earlier_evictions_range(stores, tmp_path, monkeypatch, how):
    """A document evicted once, faulted back in by a client's update, then marked for
    eviction again by an evictor that deletes nothing: a pin (another proxy's write)
    keeps it, or the evictor's process dies before its delete and the next one
    settles the mark. The mark goes back to the first eviction's range, so a stream
    through the proxy resumed from before that eviction still leaves its delete
    out. Removing the mark instead (as the evictor did) showed that delete as a
    client's: a clean-clone CI's mongosh watch saw one."""
    archive, fast, _ = stores
    start = cluster_time(fast)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="2s", coverage="complete",
                        top={"evictorEnabled": "false", "leaseTimeout": "2s", "readYourWritesWait": "10s"})
    config = tier_config(archive, fast, max_age="2s", coverage="complete", top={"leaseTimeout": "2s"})
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": "d", "createdAt": ago(10), "n": 0})
        wait_feeder(proxy)
        evict_with_a_worker(tmp_path / "first", config, fast)
        first_range = eviction_mark(fast, "d")["history"]
        client.shop.orders.update_one({"_id": "d"}, {"$set": {"n": 1}})  # faulted in, then updated
        wait_feeder(proxy)
    assert fast_count(fast) == 1
    if how == "a pin keeps it":
        with client_for(fast) as client:  # as a proxy writing to it records it (tier/pins.h)
            client.thermocline.pins.insert_one({"ns": "shop.orders", "ids": ["d"], "whole": False, "holder": "test",
                                                "lifetimeMillis": 60000, "at": utc_now()})
        second = track(WorkerProcess(tmp_path / "second", config, "evictor")).start()
        seen = []  # the mark once a pass settled it: gone, or done without the pass's holder

        def settled():
            seen[:] = [eviction_mark(fast, "d")]
            return seen[0] is None or (seen[0]["state"] == "done" and "holder" not in seen[0])
        assert wait_until(settled, 20, 0.05), "the evictor did not mark the pinned document"
        second.stop()
        assert seen[0] is not None and seen[0]["history"] == first_range, seen[0]
        assert (seen[0]["from"], seen[0]["to"]) == (first_range[-1]["from"], first_range[-1]["to"])
        assert fast_count(fast) == 1, "the evictor took a pinned document"
        with client_for(fast) as client:
            client.thermocline.pins.delete_many({"holder": "test"})
    else:
        monkeypatch.setenv("THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE", "1")
        second = track(WorkerProcess(tmp_path / "second", config, "evictor")).start()
        monkeypatch.delenv("THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE")
        assert wait_until(lambda: not second.is_alive(), 20, 0.1), "the test hook did not fire"
        assert second.process.returncode == -signal.SIGKILL
        assert eviction_mark(fast, "d")["state"] == "pending"
    evict_with_a_worker(tmp_path / "last", config, fast)
    assert eviction_mark(fast, "d")["history"][0] == first_range[0], "the first eviction's range was lost"
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": "end", "createdAt": utc_now()})
        with client.shop.orders.watch(start_at_operation_time=start, max_await_time_ms=200) as stream:
            events = [(event["operationType"], event["documentKey"]["_id"]) for event in read_until(stream, "end")]
    assert events == [("insert", "d"), ("update", "d"), ("insert", "end")]


def copy_digest(document):
    """worker_writes_digest (tier/worker_writes.h): FNV-1a over the document's
    exact BSON bytes, as a signed 64-bit integer."""
    value = 14695981039346656037
    for byte in bson.encode(document):
        value = ((value ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def test_a_copy_whose_copier_died_stays_out_of_streams_after_its_mark_is_settled(stores, tmp_path):
    """A warmer or a proxy died between its copy into the fast tier and the copy's
    outcome: the mark stays pending, the copy landed. A minute on, the feeder
    settles the mark (done in (since, applied time], bound to the copy's digest)
    instead of removing it, so a stream resumed from before the copy still leaves
    it out, as it did while the mark was pending. The state such a crash leaves
    is planted: the copy, then (once the feeder is past it, so that its clean
    cannot settle the mark before the copy) the mark, two minutes old."""
    archive, fast, _ = stores
    copy = {"_id": "c", "createdAt": ago(5), "n": 1}
    with client_for(archive) as client:
        client.shop.orders.insert_one(dict(copy))
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h",
                        top={"warmerEnabled": "false", "evictorEnabled": "false"})
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": "before", "createdAt": utc_now()})
    wait_feeder(proxy)
    start = cluster_time(fast)
    start = Timestamp(start.time, start.inc + 1)  # after "before"
    with client_for(fast) as client:
        client.shop.orders.insert_one(dict(copy))
        with client.shop.orders.watch(start_at_operation_time=start, max_await_time_ms=200) as stream:
            copied_at = read_until(stream, "c")[-1]["clusterTime"]
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": "mid", "createdAt": utc_now()})
    wait_feeder(proxy)
    since = Timestamp(copied_at.time - 120, 1)
    key = {"ns": "shop.orders", "id": "c", "op": "warm"}
    with client_for(fast) as client:
        marks = client.thermocline.workerWrites
        marks.insert_one({"_id": key, "state": "pending", "since": since, "copy": copy_digest(copy)})
        assert wait_until(lambda: marks.find_one({"_id": key, "state": "done"}), 30, 0.1), marks.find_one({"_id": key})
        mark = marks.find_one({"_id": key}, {"_id": 0})
    settled = {"from": since, "to": mark["to"], "digest": copy_digest(copy)}
    assert mark == dict(settled, state="done", history=[settled]) and copied_at <= mark["to"], mark
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": "end", "createdAt": utc_now()})
        with client.shop.orders.watch(start_at_operation_time=start, max_await_time_ms=200) as stream:
            events = [(event["operationType"], event["documentKey"]["_id"]) for event in read_until(stream, "end")]
    assert events == [("insert", "mid"), ("insert", "end")], "the copy showed as a client's insert"
    assert "had no recorded outcome a minute on" in proxy.log_text()
    proxy.stop()
