"""Change streams and the oplog of `thermocline store --replSet`, driven by
pymongo's watch() helpers: event order and shapes, fullDocument modes, $match,
awaitData, postBatchResumeToken, resuming across restarts (SIGTERM and kill -9)
exactly once, history lost (286) on a tiny oplog, the driver's automatic resume,
database and cluster streams, invalidation, operationTime, and durability of
majority writes."""

import threading
import time

import pytest
from bson import Timestamp
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure, PyMongoError

from conftest import StoreProcess, wait_until, wire_command

REPLICA_SET = ["--replSet", "rs0"]


def open_client(store, **options):
    settings = dict(serverSelectionTimeoutMS=10000, connectTimeoutMS=5000, socketTimeoutMS=20000)
    settings.update(options)
    return MongoClient(store.uri, **settings)


@pytest.fixture
def rs_client(replica_store):
    client = open_client(replica_store)
    yield client
    client.close()


def next_events(stream, count, timeout=10.0):
    """count events from stream, failing if they do not come within timeout."""
    events = []
    deadline = time.monotonic() + timeout
    while len(events) < count:
        assert time.monotonic() < deadline, "only %d of %d events arrived: %r" % (len(events), count, events)
        event = stream.try_next()
        if event is not None:
            events.append(event)
    return events


def assert_no_more_events(stream, wait=0.5):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        event = stream.try_next()
        assert event is None, "unexpected event %r" % (event,)


# ---------------------------------------------------------------------------
# Events on one collection.
# ---------------------------------------------------------------------------

def test_watch_sees_insert_update_replace_delete_in_order(rs_client):
    coll = rs_client.shop.orders
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1, "a": 1, "tags": ["x", "y", "z"]})
        coll.update_one({"_id": 1}, {"$set": {"b.c": 2}, "$unset": {"a": ""}, "$pop": {"tags": 1}})
        coll.replace_one({"_id": 1}, {"x": "replaced"})
        coll.delete_one({"_id": 1})
        coll.insert_one({"_id": 2})
        events = next_events(stream, 5)
    assert [e["operationType"] for e in events] == ["insert", "update", "replace", "delete", "insert"]
    insert, update, replace, delete, _ = events
    assert list(insert) == ["_id", "operationType", "clusterTime", "wallTime", "fullDocument", "ns",
                            "documentKey"]
    assert insert["fullDocument"] == {"_id": 1, "a": 1, "tags": ["x", "y", "z"]}
    assert insert["ns"] == {"db": "shop", "coll": "orders"}
    assert insert["documentKey"] == {"_id": 1}
    assert "fullDocument" not in update
    assert update["documentKey"] == {"_id": 1}
    description = update["updateDescription"]
    assert description["updatedFields"] == {"b": {"c": 2}, "tags": ["x", "y"]}
    assert description["removedFields"] == ["a"]
    assert description["truncatedArrays"] == []
    assert replace["fullDocument"] == {"_id": 1, "x": "replaced"}
    assert delete["documentKey"] == {"_id": 1} and "fullDocument" not in delete
    times = [e["clusterTime"] for e in events]
    assert all(isinstance(t, Timestamp) for t in times)
    assert times == sorted(times) and len(set(times)) == len(times)
    tokens = [e["_id"]["_data"] for e in events]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_truncated_arrays_and_appended_elements_as_mongod_reports_them(rs_client):
    """A pipeline update that shortens an array reports {field, newSize} in
    truncatedArrays and leaves the kept prefix out of updatedFields (the
    change-streams specification's "Test array truncation"); an operator
    $set gives the array whole, as mongod's oplog does; $push gives the
    appended elements by index."""
    coll = rs_client.shop.arrays
    coll.insert_one({"_id": 1, "a": 1, "array": ["foo", {"a": "bar"}, 1, 2, 3],
                     "list": ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"]})
    with coll.watch(max_await_time_ms=200) as stream:
        coll.update_one({"_id": 1}, [{"$set": {"array": ["foo", {"a": "bar"}]}}])
        coll.update_one({"_id": 1}, [{"$set": {"list": ["aaaaaaaaaa", "x"]}}])
        coll.update_one({"_id": 1}, {"$push": {"array": {"$each": [7, 8]}}})
        coll.update_one({"_id": 1}, {"$set": {"array": ["foo"]}})
        truncated, changed_and_truncated, pushed, operator_set = [
            e["updateDescription"] for e in next_events(stream, 4)]
    assert truncated == {"updatedFields": {}, "removedFields": [],
                         "truncatedArrays": [{"field": "array", "newSize": 2}]}
    assert changed_and_truncated == {"updatedFields": {"list.1": "x"}, "removedFields": [],
                                     "truncatedArrays": [{"field": "list", "newSize": 2}]}
    assert pushed == {"updatedFields": {"array.2": 7, "array.3": 8}, "removedFields": [],
                      "truncatedArrays": []}
    assert operator_set == {"updatedFields": {"array": ["foo"]}, "removedFields": [],
                            "truncatedArrays": []}
    assert coll.find_one({"_id": 1})["list"] == ["aaaaaaaaaa", "x"]


def test_a_new_stream_sees_nothing_from_before_it_was_opened(rs_client):
    """A stream opened without a resume point starts now, as mongod's: the drop,
    create and writes acknowledged just before watch() never appear in it (they
    did while the stream started at the journaled time, which lags by up to a
    journal flush). Fifty rounds in a row, as issue 21 asks: a stale event is
    always the stream's first, so a short wait for more is enough."""
    coll = rs_client.shop.fresh
    for round_number in range(50):
        coll.insert_one({"_id": "before", "round": round_number})
        coll.drop()
        rs_client.shop.create_collection("fresh")  # DDL, the last write before watch()
        with coll.watch(max_await_time_ms=100) as stream:
            coll.insert_one({"_id": "after", "round": round_number})
            event = next_events(stream, 1)[0]
            assert (event["operationType"], event.get("documentKey")) == ("insert", {"_id": "after"}), event
            assert_no_more_events(stream, wait=0.1)
        coll.drop()


def test_full_document_update_lookup_reads_the_current_version(rs_client):
    coll = rs_client.shop.items
    coll.insert_one({"_id": 7, "n": 0})
    with coll.watch(full_document="updateLookup", max_await_time_ms=200) as stream:
        coll.update_one({"_id": 7}, {"$inc": {"n": 1}})
        coll.update_one({"_id": 7}, {"$inc": {"n": 1}})
        first, second = next_events(stream, 2)
        # Looked up when read: both see the latest version, as on mongod.
        assert first["fullDocument"] == {"_id": 7, "n": 2}
        assert second["fullDocument"] == {"_id": 7, "n": 2}
        assert list(first)[:5] == ["_id", "operationType", "clusterTime", "wallTime", "fullDocument"]
        coll.update_one({"_id": 7}, {"$set": {"gone": True}})
        coll.delete_one({"_id": 7})
        update, delete = next_events(stream, 2)
        assert update["operationType"] == "update"
        assert update["fullDocument"] is None  # deleted since
        assert delete["operationType"] == "delete"


def test_stored_post_images_with_change_stream_pre_and_post_images(rs_client):
    db = rs_client.shop
    db.create_collection("imaged", changeStreamPreAndPostImages={"enabled": True})
    db.create_collection("plain")
    db.imaged.insert_one({"_id": 1, "v": 1})
    db.plain.insert_one({"_id": 1, "v": 1})
    with db.watch(max_await_time_ms=200, full_document="whenAvailable") as stream:
        db.imaged.update_one({"_id": 1}, {"$set": {"v": 2}})
        db.plain.update_one({"_id": 1}, {"$set": {"v": 2}})
        imaged, plain = next_events(stream, 2)
    assert imaged["fullDocument"] == {"_id": 1, "v": 2}
    assert plain["fullDocument"] is None
    # fullDocumentBeforeChange (not in pymongo 3.11's watch()): the stored pre-image.
    opened = db.command({"aggregate": 1, "cursor": {}, "pipeline": [{"$changeStream": {
        "startAtOperationTime": imaged["clusterTime"], "fullDocumentBeforeChange": "whenAvailable"}}]})
    before = opened["cursor"]["firstBatch"]
    assert [e["fullDocumentBeforeChange"] for e in before] == [{"_id": 1, "v": 1}, None]
    with pytest.raises(OperationFailure) as raised:
        with db.plain.watch(full_document="required", max_await_time_ms=200,
                            start_at_operation_time=plain["clusterTime"]) as stream:
            next_events(stream, 1, timeout=5)
    assert raised.value.code == 47  # NoMatchingDocument


def test_match_and_project_run_on_events(rs_client):
    coll = rs_client.shop.filtered
    pipeline = [{"$match": {"operationType": "insert"}},
                {"$project": {"operationType": 1, "fullDocument.n": 1}}]
    with coll.watch(pipeline, max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1, "n": 1, "hidden": True})
        coll.update_one({"_id": 1}, {"$set": {"n": 2}})
        coll.delete_one({"_id": 1})
        coll.insert_one({"_id": 2, "n": 3})
        events = next_events(stream, 2)
        assert_no_more_events(stream)
    assert [e["fullDocument"] for e in events] == [{"n": 1}, {"n": 3}]
    assert all(set(e) == {"_id", "operationType", "fullDocument"} for e in events)
    # Removing the resume token is refused when the event is produced.
    with pytest.raises(OperationFailure) as raised:
        with coll.watch([{"$project": {"_id": 0}}], max_await_time_ms=200) as stream:
            coll.insert_one({"_id": 3})
            next_events(stream, 1)
    assert raised.value.code == 280
    # As mongod labels it, so drivers do not resume a stream that cannot go on.
    assert raised.value.details["errorLabels"] == ["NonResumableChangeStreamError"]


def test_concurrent_writers_events_arrive_once_in_cluster_time_order(replica_store, rs_client):
    """Transactions take their times before committing and commit in any order:
    the stream must neither skip a time still in flight nor deliver one twice.
    w: 1 writes also exercise the background journal sync."""
    threads_count, per_thread = 4, 150

    def writer(index):
        client = open_client(replica_store)
        coll = client.shop.get_collection("concurrent", write_concern=WriteConcern(w=1))
        for sequence in range(per_thread):
            coll.insert_one({"_id": "%d-%d" % (index, sequence)})
        client.close()

    coll = rs_client.shop.concurrent
    with coll.watch(max_await_time_ms=100) as stream:
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(threads_count)]
        for thread in threads:
            thread.start()
        events = next_events(stream, threads_count * per_thread, timeout=25)
        for thread in threads:
            thread.join()
        assert_no_more_events(stream, 0.3)
    keys = [e["documentKey"]["_id"] for e in events]
    assert len(set(keys)) == len(keys) == threads_count * per_thread
    times = [e["clusterTime"] for e in events]
    assert all(earlier < later for earlier, later in zip(times, times[1:]))
    for index in range(threads_count):  # each writer's own inserts in its order
        mine = [k for k in keys if k.startswith("%d-" % index)]
        assert mine == ["%d-%d" % (index, n) for n in range(per_thread)]


# ---------------------------------------------------------------------------
# The cursor: awaitData and postBatchResumeToken.
# ---------------------------------------------------------------------------

def test_get_more_waits_for_events_and_returns_post_batch_resume_token(replica_store, rs_client):
    db = rs_client.shop
    opened = db.command({"aggregate": "waits", "pipeline": [{"$changeStream": {}}], "cursor": {}})
    cursor = opened["cursor"]
    assert cursor["firstBatch"] == []
    assert cursor["ns"] == "shop.waits"
    first_token = cursor["postBatchResumeToken"]["_data"]
    assert isinstance(first_token, str) and first_token.startswith("82")

    started = time.monotonic()
    empty = db.command({"getMore": cursor["id"], "collection": "waits", "maxTimeMS": 400})
    waited = time.monotonic() - started
    assert empty["cursor"]["nextBatch"] == []
    assert empty["cursor"]["id"] == cursor["id"]
    assert "postBatchResumeToken" in empty["cursor"]
    assert 0.35 <= waited < 3.0, waited

    def insert_later():
        time.sleep(0.3)
        writer = open_client(replica_store)
        writer.shop.waits.insert_one({"_id": "late"})
        writer.close()

    thread = threading.Thread(target=insert_later)
    thread.start()
    started = time.monotonic()
    woken = db.command({"getMore": cursor["id"], "collection": "waits", "maxTimeMS": 5000})
    waited = time.monotonic() - started
    thread.join()
    assert [e["documentKey"] for e in woken["cursor"]["nextBatch"]] == [{"_id": "late"}]
    assert waited < 2.0, "the event should end the wait, not maxTimeMS: %.2fs" % waited
    token = woken["cursor"]["postBatchResumeToken"]["_data"]
    assert token > first_token
    assert token >= woken["cursor"]["nextBatch"][0]["_id"]["_data"]

    # Waiting getMores do not hold workers: with more of them waiting than there
    # are workers, other commands still run at once.
    other = open_client(replica_store)
    streams = [other.shop.command({"aggregate": "waits%d" % i, "pipeline": [{"$changeStream": {}}],
                                   "cursor": {}})["cursor"]["id"] for i in range(12)]

    def wait_on(cursor_id, collection):
        waiter = open_client(replica_store)
        waiter.shop.command({"getMore": cursor_id, "collection": collection, "maxTimeMS": 1500})
        waiter.close()

    waiters = [threading.Thread(target=wait_on, args=(cursor_id, "waits%d" % i))
               for i, cursor_id in enumerate(streams)]
    for thread in waiters:
        thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert other.shop.command("ping")["ok"] == 1
    other.shop.quick.insert_one({"x": 1})
    assert time.monotonic() - started < 1.0  # not queued behind 1.5 s waits
    for thread in waiters:
        thread.join()
    other.close()


def test_batch_size_splits_events_even_inside_one_entry(rs_client):
    coll = rs_client.shop.batches
    opened = rs_client.shop.command({"aggregate": "batches", "pipeline": [{"$changeStream": {}}],
                                     "cursor": {}})["cursor"]
    coll.insert_many([{"_id": i} for i in range(7)])
    seen = []
    tokens = []
    while len(seen) < 7:
        batch = rs_client.shop.command({"getMore": opened["id"], "collection": "batches", "batchSize": 3,
                                        "maxTimeMS": 200})["cursor"]
        assert len(batch["nextBatch"]) <= 3
        seen.extend(e["documentKey"]["_id"] for e in batch["nextBatch"])
        tokens.append(batch["postBatchResumeToken"]["_data"])
    assert seen == list(range(7))
    assert tokens == sorted(tokens)
    # One drop entry gives two events; a batch of one splits them.
    coll.drop()
    batch = rs_client.shop.command({"getMore": opened["id"], "collection": "batches", "batchSize": 1,
                                    "maxTimeMS": 1000})["cursor"]
    assert [e["operationType"] for e in batch["nextBatch"]] == ["drop"]
    assert batch["id"] == opened["id"]
    assert batch["postBatchResumeToken"] == batch["nextBatch"][0]["_id"]
    last = rs_client.shop.command({"getMore": opened["id"], "collection": "batches", "batchSize": 1,
                                   "maxTimeMS": 1000})["cursor"]
    assert [e["operationType"] for e in last["nextBatch"]] == ["invalidate"]
    assert last["id"] == 0
    assert last["postBatchResumeToken"] == last["nextBatch"][0]["_id"]


# ---------------------------------------------------------------------------
# Resuming.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_resume_after_restart_delivers_every_event_exactly_once(tmp_path, how):
    store = StoreProcess(tmp_path, extra_args=REPLICA_SET)
    store.start()
    try:
        client = open_client(store)
        coll = client.shop.events
        with coll.watch(max_await_time_ms=200) as stream:
            coll.insert_many([{"_id": i} for i in range(10)])
            events = next_events(stream, 4)
            token = events[-1]["_id"]
        for i in range(10, 20):
            coll.insert_one({"_id": i})  # default write concern: majority, journaled
        client.close()
        if how == "sigterm":
            store.stop()
        else:
            store.kill9()
        store.restart()
        client = open_client(store)
        coll = client.shop.events
        with coll.watch(resume_after=token, max_await_time_ms=200) as stream:
            resumed = next_events(stream, 16)
            coll.insert_one({"_id": 20})
            resumed += next_events(stream, 1)
            assert_no_more_events(stream)
        assert [e["documentKey"]["_id"] for e in resumed] == list(range(4, 21))
        # startAfter from the same token gives the same events.
        with coll.watch(start_after=token, max_await_time_ms=200) as stream:
            again = next_events(stream, 17)
        assert [e["_id"] for e in again] == [e["_id"] for e in resumed]
        client.close()
    finally:
        store.stop()


def roll_oplog_past(coll, token):
    """Writes about 3 MB into coll through the 1 MB oplog of a store started with
    --oplog-size 1, until resuming after token fails; returns that failure."""
    payload = "x" * 20000
    for i in range(150):
        coll.insert_one({"_id": i, "payload": payload})

    def lost():
        try:
            with coll.watch(resume_after=token, max_await_time_ms=100) as stream:
                stream.try_next()
            return None
        except OperationFailure as failure:
            return failure

    failure = wait_until(lost, timeout=10)
    assert failure is not None, "the oplog was never trimmed past the token"
    return failure


def test_token_older_than_the_oplog_gives_history_lost(tmp_path):
    store = StoreProcess(tmp_path, extra_args=REPLICA_SET + ["--oplog-size", "1"])
    store.start()
    try:
        client = open_client(store)
        coll = client.shop.big
        with coll.watch(max_await_time_ms=200) as stream:
            coll.insert_one({"_id": "first"})
            token = next_events(stream, 1)[0]["_id"]
        start_time = client.admin.command("ping")["operationTime"]
        failure = roll_oplog_past(coll, token)
        assert failure.code == 286
        assert failure.details["codeName"] == "ChangeStreamHistoryLost"
        assert failure.details["errorLabels"] == ["NonResumableChangeStreamError"]
        with pytest.raises(OperationFailure) as raised:
            with coll.watch(start_at_operation_time=start_time, max_await_time_ms=100) as stream:
                stream.try_next()
        assert raised.value.code == 286
        # A fresh stream still works, and the newest entries are still there.
        with coll.watch(max_await_time_ms=200) as stream:
            coll.insert_one({"_id": "after"})
            assert next_events(stream, 1)[0]["documentKey"] == {"_id": "after"}
        client.close()
    finally:
        store.stop()


def test_driver_resumes_automatically_after_the_server_restarts(tmp_path):
    store = StoreProcess(tmp_path, extra_args=REPLICA_SET)
    store.start()
    try:
        client = open_client(store, socketTimeoutMS=5000)
        coll = client.shop.auto
        stream = coll.watch(max_await_time_ms=300)
        coll.insert_many([{"_id": i} for i in range(3)])
        seen = [e["documentKey"]["_id"] for e in next_events(stream, 3)]
        for i in range(3, 6):
            coll.insert_one({"_id": i})
        seen += [next_events(stream, 1)[0]["documentKey"]["_id"]]  # 3: the rest stay unread
        store.kill9()
        store.restart()
        writer = open_client(store)
        for i in range(6, 9):
            writer.shop.auto.insert_one({"_id": i})
        deadline = time.monotonic() + 20
        while len(seen) < 9 and time.monotonic() < deadline:
            try:
                event = stream.try_next()
            except PyMongoError:
                continue  # the first attempt may still find the server starting
            if event is not None:
                seen.append(event["documentKey"]["_id"])
        assert seen == list(range(9))
        stream.close()
        writer.close()
        client.close()
    finally:
        store.stop()


def test_resume_token_errors(rs_client):
    coll = rs_client.shop.errors
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1})
        event = next_events(stream, 1)[0]
        time.sleep(1.1)  # the next write's time is in a later second: a gap in between
        coll.insert_one({"_id": 2})
        next_events(stream, 1)
    in_gap = "82%08X%08X01" % (event["clusterTime"].time, event["clusterTime"].inc + 50)
    older = "82%08X%08X01" % (event["clusterTime"].time - 3600, 1)
    cases = [
        ({"resumeAfter": {"_data": in_gap}}, 280),  # a time the oplog covers but has no entry at
        ({"resumeAfter": {"_data": older}}, 286),  # before the oplog's first entry
        ({"resumeAfter": {"_data": "not hex"}}, 9),
        ({"resumeAfter": {"data": "x"}}, 40647),
        ({"resumeAfter": event["_id"], "startAfter": event["_id"]}, 50865),
        ({"resumeAfter": event["_id"], "startAtOperationTime": event["clusterTime"]}, 40674),
        ({"fullDocument": "sometimes"}, 2),
        ({"noSuchOption": 1}, 40415),
    ]
    for options, code in cases:
        with pytest.raises(OperationFailure) as raised:
            rs_client.shop.command({"aggregate": "errors", "pipeline": [{"$changeStream": options}],
                                    "cursor": {}})
        assert raised.value.code == code, (options, raised.value.details)
        # Only the fatal ones (280, 286) carry the label; the others are no change stream's failure.
        labels = ["NonResumableChangeStreamError"] if code in (280, 286) else None
        assert raised.value.details.get("errorLabels") == labels, (options, raised.value.details)
    with pytest.raises(OperationFailure) as raised:
        rs_client.shop.command({"aggregate": "errors", "pipeline": [{"$changeStream": {}}, {"$group": {"_id": 1}}],
                                "cursor": {}})
    assert raised.value.code == 20
    assert "$group is not permitted in a $changeStream pipeline" in str(raised.value)
    with pytest.raises(OperationFailure) as raised:
        rs_client.shop.command({"aggregate": "errors", "pipeline": [{"$match": {}}, {"$changeStream": {}}],
                                "cursor": {}})
    assert raised.value.code == 40602
    with pytest.raises(OperationFailure) as raised:
        rs_client.admin.command({"aggregate": 1, "pipeline": [{"$changeStream": {}}], "cursor": {}})
    assert raised.value.code == 73
    with pytest.raises(OperationFailure) as raised:
        rs_client.shop.command({"aggregate": 1, "pipeline": [{"$changeStream": {"allChangesForCluster": True}}],
                                "cursor": {}})
    assert raised.value.code == 72


# ---------------------------------------------------------------------------
# Database and cluster streams, invalidation.
# ---------------------------------------------------------------------------

def test_database_and_cluster_streams(rs_client):
    shop, other = rs_client.shop, rs_client.other
    with shop.watch(max_await_time_ms=200) as db_stream, \
            rs_client.watch(max_await_time_ms=200) as cluster_stream:
        shop.a.insert_one({"_id": 1})
        other.b.insert_one({"_id": 2})
        shop.c.insert_one({"_id": 3})
        rs_client.admin.hidden.insert_one({"_id": 4})
        db_events = next_events(db_stream, 2)
        cluster_events = next_events(cluster_stream, 3)
        assert_no_more_events(db_stream, 0.3)
        assert_no_more_events(cluster_stream, 0.3)
    assert [(e["ns"]["coll"], e["documentKey"]["_id"]) for e in db_events] == [("a", 1), ("c", 3)]
    assert [(e["ns"]["db"], e["documentKey"]["_id"]) for e in cluster_events] == [
        ("shop", 1), ("other", 2), ("shop", 3)]
    opened = shop.command({"aggregate": 1, "pipeline": [{"$changeStream": {}}], "cursor": {}})
    assert opened["cursor"]["ns"] == "shop.$cmd.aggregate"


def test_drop_and_rename_invalidate_collection_streams(rs_client):
    db = rs_client.shop
    db.doomed.insert_one({"_id": 1})
    db.moving.insert_one({"_id": 1})
    with db.doomed.watch(max_await_time_ms=200) as doomed, db.moving.watch(max_await_time_ms=200) as moving, \
            db.watch(max_await_time_ms=200) as whole:
        db.doomed.drop()
        rs_client.admin.command({"renameCollection": "shop.moving", "to": "shop.moved"})
        drop, invalidate = next_events(doomed, 2)
        assert drop["operationType"] == "drop" and drop["ns"] == {"db": "shop", "coll": "doomed"}
        assert invalidate["operationType"] == "invalidate"
        assert not doomed.alive
        rename, invalidate2 = next_events(moving, 2)
        assert rename["operationType"] == "rename"
        assert rename["ns"] == {"db": "shop", "coll": "moving"}
        assert rename["to"] == {"db": "shop", "coll": "moved"}
        assert invalidate2["operationType"] == "invalidate"
        whole_events = next_events(whole, 2)
        assert [e["operationType"] for e in whole_events] == ["drop", "rename"]
    # startAfter an invalidate opens a new stream after it; resumeAfter refuses it.
    with db.doomed.watch(start_after=invalidate["_id"], max_await_time_ms=200) as reborn:
        db.doomed.insert_one({"_id": "new"})
        assert next_events(reborn, 1)[0]["documentKey"] == {"_id": "new"}
    with pytest.raises(OperationFailure) as raised:
        db.doomed.watch(resume_after=invalidate["_id"])
    assert raised.value.code == 260
    with db.watch(max_await_time_ms=200) as whole:
        rs_client.drop_database("shop")
        events = next_events(whole, 4)
        assert not whole.alive
    assert [e["operationType"] for e in events] == ["drop", "drop", "dropDatabase", "invalidate"]
    assert sorted(e["ns"]["coll"] for e in events[:2]) == ["doomed", "moved"]
    assert events[2]["ns"] == {"db": "shop"}


# ---------------------------------------------------------------------------
# Replica set replies and durability.
# ---------------------------------------------------------------------------

def test_replies_carry_operation_time_and_cluster_time(replica_store, rs_client):
    hello = wire_command(replica_store.port, {"hello": 1, "$db": "admin"})
    assert isinstance(hello["operationTime"], Timestamp)
    assert hello["$clusterTime"]["signature"] == {"hash": b"\x00" * 20, "keyId": 0}
    last_write = hello["lastWrite"]
    assert set(last_write) == {"opTime", "lastWriteDate", "majorityOpTime", "majorityWriteDate"}
    inserted = wire_command(replica_store.port, {"insert": "t", "documents": [{"_id": 1}], "$db": "shop"})
    assert inserted["ok"] == 1
    assert inserted["operationTime"] > last_write["opTime"]["ts"]
    assert inserted["$clusterTime"]["clusterTime"] >= inserted["operationTime"]
    found = wire_command(replica_store.port, {"find": "t", "$db": "shop"})
    assert found["operationTime"] >= inserted["operationTime"]
    failed = wire_command(replica_store.port, {"noSuchCommand": 1, "$db": "shop"})
    assert failed["ok"] == 0 and "operationTime" in failed
    after = wire_command(replica_store.port, {"hello": 1, "$db": "admin"})["lastWrite"]
    assert after["majorityOpTime"]["ts"] >= inserted["operationTime"]  # majority = journaled, at once


def test_standalone_has_no_oplog_and_refuses_change_streams(store, client):
    reply = wire_command(store.port, {"ping": 1, "$db": "admin"})
    assert "operationTime" not in reply and "$clusterTime" not in reply
    assert "lastWrite" not in client.admin.command("hello")
    with pytest.raises(OperationFailure) as raised:
        client.shop.items.watch()
    assert raised.value.code == 40573


def test_kill9_never_loses_an_acknowledged_majority_write(tmp_path):
    store = StoreProcess(tmp_path, extra_args=REPLICA_SET)
    store.start()
    start_time = wire_command(store.port, {"ping": 1, "$db": "admin"})["operationTime"]
    acknowledged = []
    failures = []
    stop = threading.Event()

    def writer(index):
        client = open_client(store, serverSelectionTimeoutMS=2000, socketTimeoutMS=3000, retryWrites=False)
        coll = client.shop.get_collection("durable", write_concern=WriteConcern(w="majority"))
        sequence = 0
        try:
            while not stop.is_set():
                document_id = "%d-%d" % (index, sequence)
                coll.insert_one({"_id": document_id})
                acknowledged.append(document_id)
                sequence += 1
        except PyMongoError as error:
            failures.append(error)
        finally:
            client.close()

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(acknowledged) >= 300, timeout=15)
    store.kill9()
    stop.set()
    for thread in threads:
        thread.join(10)
    assert len(acknowledged) >= 300
    store.restart()
    try:
        client = open_client(store)
        stored = {d["_id"] for d in client.shop.durable.find({}, {"_id": 1})}
        missing = [i for i in acknowledged if i not in stored]
        assert not missing, "%d acknowledged writes lost, e.g. %s" % (len(missing), missing[:5])
        # The oplog has them too: a stream from before the writes sees each once.
        with client.shop.durable.watch(start_at_operation_time=start_time, max_await_time_ms=200) as stream:
            keys = [e["documentKey"]["_id"] for e in next_events(stream, len(stored), timeout=20)]
        assert len(keys) == len(set(keys))
        assert set(keys) == stored
        client.close()
    finally:
        store.stop()
