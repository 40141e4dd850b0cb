"""Durability: a write acknowledged with {j: true} survives kill -9. Several
threads insert while the server is killed mid-stream; after a restart on the
same dbpath every acknowledged _id is there, and the indexes still work. Writers
asking for j: true at once share their journal syncs (group commit)."""

import threading
import time

import pytest
from pymongo import ASCENDING, MongoClient, WriteConcern
from pymongo.errors import DuplicateKeyError, PyMongoError

from conftest import StoreProcess, checked_store

THREADS = 4
MIN_ACKNOWLEDGED_BEFORE_KILL = 2000
MAX_SECONDS_BEFORE_KILL = 15
SYNC_DELAY_MS = 20
GROUP_WRITERS = 16  # against one worker thread
GROUP_WRITES_EACH = 8


def open_client(store):
    return MongoClient(store.uri, serverSelectionTimeoutMS=3000, connectTimeoutMS=2000,
                       socketTimeoutMS=5000, retryWrites=False)


def indexed_stages(collection, filter):
    explained = collection.find(filter).explain()
    stages = []
    pending = [explained["queryPlanner"]["winningPlan"]]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if "stage" in node:
                stages.append(node)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return [s.get("indexName") for s in stages if s["stage"] == "IXSCAN"]


class Writer(threading.Thread):
    """Inserts {_id, seq, writer} one at a time (and some in batches of 5) with
    j: true until told to stop or the server goes away; records each _id only
    once the server has acknowledged it."""

    def __init__(self, store, index, stop_event):
        super().__init__(name="writer-%d" % index, daemon=True)
        self.store = store
        self.index = index
        self.stop_event = stop_event
        self.acknowledged = []
        self.error = None

    def run(self):
        client = open_client(self.store)
        collection = client["durable"].get_collection("events",
                                                       write_concern=WriteConcern(j=True))
        sequence = 0
        try:
            while not self.stop_event.is_set():
                if sequence % 10 == 9:
                    batch = [self.make(sequence + k) for k in range(5)]
                    collection.insert_many(batch, ordered=True)
                    self.acknowledged.extend(d["_id"] for d in batch)
                    sequence += 5
                else:
                    document = self.make(sequence)
                    collection.insert_one(document)
                    self.acknowledged.append(document["_id"])
                    sequence += 1
        except PyMongoError as error:
            self.error = error  # expected once the server is killed
        finally:
            client.close()

    def make(self, sequence):
        return {"_id": "w%d-%06d" % (self.index, sequence),
                "seq": self.index * 1_000_000 + sequence,
                "writer": self.index, "payload": "p" * 64}


def test_acknowledged_journaled_writes_survive_kill9(store):
    setup = open_client(store)
    events = setup["durable"]["events"]
    events.create_index([("seq", ASCENDING)], unique=True)
    events.create_index([("writer", ASCENDING)])
    setup.close()

    stop_event = threading.Event()
    writers = [Writer(store, index, stop_event) for index in range(THREADS)]
    for writer in writers:
        writer.start()
    deadline = time.monotonic() + MAX_SECONDS_BEFORE_KILL
    while time.monotonic() < deadline:
        if sum(len(w.acknowledged) for w in writers) >= MIN_ACKNOWLEDGED_BEFORE_KILL:
            break
        if not any(w.is_alive() for w in writers):
            break
        time.sleep(0.05)

    store.kill9()  # mid-stream: the writers are still sending
    for writer in writers:
        writer.join(15)
    stop_event.set()
    assert not any(w.is_alive() for w in writers), "a writer hung after the kill"
    acknowledged = [i for w in writers for i in w.acknowledged]
    assert len(acknowledged) > 0, "no write was acknowledged before the kill; errors: %r" % (
        [w.error for w in writers],)

    store.restart()
    client = open_client(store)
    try:
        events = client["durable"]["events"]
        present = {d["_id"] for d in events.find({}, {"_id": 1})}
        missing = sorted(set(acknowledged) - present)
        assert not missing, "%d of %d acknowledged writes lost after kill -9, e.g. %s" % (
            len(missing), len(acknowledged), missing[:5])
        # Nothing is duplicated and the count agrees with the documents.
        assert events.count_documents({}) == len(present)
        assert events.estimated_document_count() == len(present)

        # The indexes came back and still answer.
        assert {i["name"] for i in events.list_indexes()} == {"_id_", "seq_1", "writer_1"}
        assert indexed_stages(events, {"seq": {"$gte": 1_000_000, "$lt": 2_000_000}}) == ["seq_1"]
        from_index = events.count_documents({"writer": 1})
        assert from_index == sum(1 for i in present if i.startswith("w1-"))
        first = events.find_one({"seq": 0})
        if first is not None:
            with pytest.raises(DuplicateKeyError):
                events.insert_one({"_id": "again", "seq": 0})
        assert events.insert_one({"_id": "after-restart", "seq": -1}).acknowledged
        assert events.find_one({"seq": -1})["_id"] == "after-restart"
    finally:
        client.close()


def test_clean_restart_keeps_data_and_indexes(store):
    client = open_client(store)
    collection = client["kept"]["things"]
    collection.insert_many([{"_id": i, "k": i % 7, "name": "n%d" % i} for i in range(500)])
    collection.create_index([("name", ASCENDING)], unique=True)
    collection.update_many({"k": 0}, {"$set": {"zero": True}})
    collection.delete_many({"k": 6})
    client.close()

    store.stop()  # SIGTERM: checked to exit 0
    store.restart()

    client = open_client(store)
    try:
        collection = client["kept"]["things"]
        assert collection.count_documents({}) == 500 - len([i for i in range(500) if i % 7 == 6])
        assert collection.count_documents({"zero": True}) == len(
            [i for i in range(500) if i % 7 == 0])
        assert {i["name"] for i in collection.list_indexes()} == {"_id_", "name_1"}
        assert indexed_stages(collection, {"name": "n10"}) == ["name_1"]
        with pytest.raises(DuplicateKeyError):
            collection.insert_one({"name": "n10"})
        assert "kept" in client.list_database_names()
    finally:
        client.close()


def test_kill9_twice_in_a_row(store):
    client = open_client(store)
    journaled = client["twice"].get_collection("c", write_concern=WriteConcern(j=True))
    journaled.insert_many([{"_id": i} for i in range(100)])
    client.close()

    store.kill9()
    store.restart()
    client = open_client(store)
    journaled = client["twice"].get_collection("c", write_concern=WriteConcern(j=True))
    journaled.insert_many([{"_id": i} for i in range(100, 200)])
    client.close()

    store.kill9()
    store.restart()
    client = open_client(store)
    try:
        assert sorted(d["_id"] for d in client["twice"]["c"].find()) == list(range(200))
    finally:
        client.close()


@pytest.fixture
def slow_sync_store(tmp_path, request):
    """Each sync 20 ms longer (an emulated slow disk), and one worker thread."""
    process = StoreProcess(tmp_path, extra_args=["--sync-delay", "%dms" % SYNC_DELAY_MS, "--workers", "1"])
    yield from checked_store(process, request)


def journal_syncs(client):
    return client.admin.command("serverStatus")["wiredTiger"]["log"]["log sync operations"]


def test_concurrent_journaled_writes_share_their_syncs(slow_sync_store):
    """Writers that ask for j: true at once wait for one sync together, as on
    mongod (its journal flusher), and none holds the worker while it waits: the
    one worker runs the other writers' inserts during a sync, and the next sync
    covers them all. Before, each write synced in turn on its worker (128 syncs
    for 128 writes, 73 with four workers). The count is WiredTiger's own; the
    journal thread's periodic syncs are in it too."""
    store = slow_sync_store
    client = open_client(store)
    status = client.admin.command("serverStatus")["thermocline"]["syncs"]
    assert status["delayMillis"] == SYNC_DELAY_MS
    client["grouped"]["events"].insert_one({"_id": "first"})
    syncs_before = journal_syncs(client)
    start = threading.Barrier(GROUP_WRITERS)
    acknowledged, errors = [], []

    def write(writer):
        own = open_client(store)
        try:
            events = own["grouped"].get_collection("events", write_concern=WriteConcern(j=True))
            start.wait()
            for sequence in range(GROUP_WRITES_EACH):
                document = {"_id": "w%d-%d" % (writer, sequence), "writer": writer}
                events.insert_one(document)
                acknowledged.append(document["_id"])
        except PyMongoError as error:
            errors.append(error)
        finally:
            own.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(GROUP_WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and len(acknowledged) == GROUP_WRITERS * GROUP_WRITES_EACH
    syncs = journal_syncs(client) - syncs_before
    assert 1 <= syncs <= len(acknowledged) // 4, (
        "%d journal syncs for %d concurrent journaled writes" % (syncs, len(acknowledged)))
    assert client.admin.command("serverStatus")["thermocline"]["syncs"]["count"] >= syncs
    client.close()

    store.kill9()
    store.restart()
    client = open_client(store)
    try:
        present = {d["_id"] for d in client["grouped"]["events"].find({}, {"_id": 1})}
        assert set(acknowledged) <= present
    finally:
        client.close()
