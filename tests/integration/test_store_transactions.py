"""Multi-document transactions on `thermocline store --replSet`, driven by
pymongo's start_transaction / with_transaction and by raw commands where the
exact reply matters: commit and abort, snapshot isolation, write conflicts with
their TransientTransactionError label, retried commits, mongod's error codes
(NoSuchTransaction, TransactionCommitted, TransactionTooOld,
OperationNotSupportedInTransaction, IllegalOperation on a standalone store), the
lifetime limit, DDL waiting for the transactions that use its collection (and
LockTimeout for new ones meanwhile), the Node.js driver's withTransaction (tests/node/transaction.mjs),
change streams showing a transaction's operations with its lsid
and txnNumber, cursors bound to their transaction, and durability across
kill -9 (all of a committed transaction, nothing of an open one)."""

import shutil
import subprocess
import threading
import uuid

import pytest
from bson import Binary, Int64
from bson.binary import UUID_SUBTYPE
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import NODE_DIR, StoreProcess, wait_until, wire_command
from test_store_node import node_or_skip

REPLICA_SET = ["--replSet", "rs0"]


def open_client(store):
    return MongoClient(store.uri, serverSelectionTimeoutMS=10000, connectTimeoutMS=5000, socketTimeoutMS=20000)


@pytest.fixture(scope="module")
def replica_store(tmp_path_factory):
    """One replica-set store for the module's tests (each uses its own
    collections): starting a sanitized store per test would cost more than the
    tests themselves."""
    process = StoreProcess(tmp_path_factory.mktemp("txn"), extra_args=REPLICA_SET)
    process.start()
    yield process
    process.stop()
    shutil.rmtree(process.dbpath, ignore_errors=True)


@pytest.fixture
def rs_client(replica_store):
    client = open_client(replica_store)
    yield client
    client.close()


class RawSession:
    """A logical session driven by hand over the wire, for the replies drivers
    hide: every command goes out with this lsid."""

    def __init__(self, port):
        self.port = port
        self.lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}

    def run(self, database, command, txn_number=None, start=False, autocommit=False):
        document = dict(command)
        document["lsid"] = self.lsid
        if txn_number is not None:
            document["txnNumber"] = Int64(txn_number)
        if autocommit is not None and txn_number is not None:
            document["autocommit"] = autocommit
        if start:
            document["startTransaction"] = True
        document["$db"] = database
        return wire_command(self.port, document)

    def commit(self, txn_number, **fields):
        return self.run("admin", dict({"commitTransaction": 1}, **fields), txn_number)

    def abort(self, txn_number):
        return self.run("admin", {"abortTransaction": 1}, txn_number)


def assert_error(reply, code, code_name, labels=None):
    assert reply["ok"] == 0, reply
    assert reply["code"] == code, reply
    assert reply["codeName"] == code_name, reply
    assert reply.get("errorLabels") == labels, reply


def uuid_bytes(value):
    """A UUID's 16 bytes, whether pymongo decoded it as uuid.UUID or Binary."""
    return value.bytes if isinstance(value, uuid.UUID) else bytes(value)


def transactions_status(client):
    return client.admin.command("serverStatus")["transactions"]


# ---------------------------------------------------------------------------
# Commit, abort, isolation.
# ---------------------------------------------------------------------------

def test_commit_makes_every_write_visible_at_once(rs_client, replica_store):
    db = rs_client.txn_commit
    other = open_client(replica_store).txn_commit  # another client, on its own connections
    db.accounts.insert_many([{"_id": "alice", "balance": 100}, {"_id": "bob", "balance": 0}])
    seen_outside = []
    before = transactions_status(rs_client)

    def transfer(session):
        db.accounts.update_one({"_id": "alice"}, {"$inc": {"balance": -30}}, session=session)
        db.accounts.update_one({"_id": "bob"}, {"$inc": {"balance": 30}}, session=session)
        db.ledger.insert_one({"_id": 1, "amount": 30}, session=session)
        # The transaction reads its own writes; nobody else sees them yet.
        assert db.accounts.find_one({"_id": "alice"}, session=session)["balance"] == 70
        assert db.ledger.count_documents({}, session=session) == 1
        seen_outside.append(sorted((d["_id"], d["balance"]) for d in other.accounts.find()))
        seen_outside.append(other.ledger.count_documents({}))

    with rs_client.start_session() as session:
        session.with_transaction(transfer)

    assert seen_outside == [[("alice", 100), ("bob", 0)], 0]
    other.client.close()
    assert sorted((d["_id"], d["balance"]) for d in db.accounts.find()) == [("alice", 70), ("bob", 30)]
    assert db.ledger.find_one({"_id": 1}) == {"_id": 1, "amount": 30}
    after = transactions_status(rs_client)
    assert after["totalStarted"] == before["totalStarted"] + 1
    assert after["totalCommitted"] == before["totalCommitted"] + 1
    assert after["currentOpen"] == 0


def test_abort_discards_every_write(rs_client):
    db = rs_client.txn_abort
    db.items.insert_one({"_id": 1, "n": 1})
    before = transactions_status(rs_client)
    with rs_client.start_session() as session:
        session.start_transaction()
        db.items.insert_one({"_id": 2}, session=session)
        db.items.update_one({"_id": 1}, {"$set": {"n": 99}}, session=session)
        db.items.delete_one({"_id": 1}, session=session)
        db.other.insert_one({"_id": "x"}, session=session)
        assert transactions_status(rs_client)["currentOpen"] == before["currentOpen"] + 1
        session.abort_transaction()
    assert list(db.items.find()) == [{"_id": 1, "n": 1}]
    assert db.other.count_documents({}) == 0
    after = transactions_status(rs_client)
    assert after["totalAborted"] == before["totalAborted"] + 1
    assert after["currentOpen"] == before["currentOpen"]


def test_transaction_reads_one_snapshot(rs_client):
    """Snapshot isolation: writes committed by others after the transaction's
    first read stay invisible to it."""
    db = rs_client.txn_snapshot
    db.c.insert_many([{"_id": i} for i in range(3)])
    with rs_client.start_session() as session:
        session.start_transaction()
        assert db.c.count_documents({}, session=session) == 3
        db.c.insert_one({"_id": 100})
        db.c.delete_one({"_id": 0})
        assert sorted(d["_id"] for d in db.c.find({}, session=session)) == [0, 1, 2]
        session.commit_transaction()
    assert sorted(d["_id"] for d in db.c.find()) == [1, 2, 100]


def test_cursor_of_a_transaction_reads_its_snapshot_and_dies_with_it(rs_client, replica_store):
    db = rs_client.txn_cursor
    db.c.insert_many([{"_id": i} for i in range(10)])
    with rs_client.start_session() as session:
        session.start_transaction()
        db.c.insert_one({"_id": 10}, session=session)
        cursor = db.c.find({}, session=session, batch_size=3).sort("_id", 1)
        ids = [doc["_id"] for doc in cursor]  # first batch, then getMores in the transaction
        assert ids == list(range(11))
        reply = db.command("find", "c", batchSize=2, session=session)
        cursor_id = reply["cursor"]["id"]
        assert cursor_id != 0
        session.commit_transaction()
    # The commit killed it.
    reply = wire_command(replica_store.port, {"getMore": Int64(cursor_id), "collection": "c", "$db": "txn_cursor"})
    assert_error(reply, 43, "CursorNotFound")


# ---------------------------------------------------------------------------
# Conflicts.
# ---------------------------------------------------------------------------

def test_write_conflict_between_two_transactions(rs_client):
    db = rs_client.txn_conflict
    db.c.insert_one({"_id": 1, "n": 0})
    first = rs_client.start_session()
    second = rs_client.start_session()
    try:
        first.start_transaction()
        second.start_transaction()
        db.c.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=first)
        with pytest.raises(OperationFailure) as raised:
            db.c.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=second)
        assert raised.value.code == 112
        assert raised.value.has_error_label("TransientTransactionError")
        first.commit_transaction()
        # The conflict aborted the second transaction.
        with pytest.raises(OperationFailure) as raised:
            second.commit_transaction()
        assert raised.value.code == 251
        assert raised.value.has_error_label("TransientTransactionError")
    finally:
        first.end_session()
        second.end_session()
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "n": 1}


def test_with_transaction_retries_after_a_conflict(rs_client):
    """with_transaction retries on TransientTransactionError until the holder
    commits: both increments land."""
    db = rs_client.txn_retry
    db.c.insert_one({"_id": 1, "n": 0})
    holder = rs_client.start_session()
    holder.start_transaction()
    db.c.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=holder)
    attempts = []

    def increment(session):
        attempts.append(1)
        if len(attempts) == 2:
            holder.commit_transaction()  # the first attempt conflicted; now let it through
        db.c.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=session)

    with rs_client.start_session() as session:
        session.with_transaction(increment)
    holder.end_session()
    assert len(attempts) >= 2
    assert db.c.find_one({"_id": 1})["n"] == 11


def test_plain_write_conflicts_with_a_transaction(rs_client):
    db = rs_client.txn_plain
    db.c.insert_one({"_id": 1, "n": 0})
    with rs_client.start_session() as session:
        session.start_transaction()
        assert db.c.find_one({"_id": 1}, session=session)["n"] == 0
        db.c.update_one({"_id": 1}, {"$set": {"n": 5}})  # committed after the snapshot
        with pytest.raises(OperationFailure) as raised:
            db.c.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
        assert raised.value.code == 112
        assert raised.value.has_error_label("TransientTransactionError")
        session.abort_transaction()

    # The other way round: a plain write waits for the transaction holding the document.
    done = threading.Event()
    with rs_client.start_session() as session:
        session.start_transaction()
        db.c.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
        writer = threading.Thread(target=lambda: (db.c.update_one({"_id": 1}, {"$inc": {"n": 100}}), done.set()))
        writer.start()
        assert not done.wait(0.3)
        session.commit_transaction()
        writer.join(20)
    assert done.is_set()
    assert db.c.find_one({"_id": 1})["n"] == 106


def test_kill_sessions_aborts_a_transaction_its_client_left_open(replica_store, rs_client):
    """A client that died inside a transaction leaves it open, holding its
    documents until transactionLifetimeLimitSeconds; killSessions naming its
    session aborts it at once (how thermocline's evictor ends a crashed
    predecessor's): a plain write waiting on the document goes through, the
    transaction's writes are gone and its commit fails as mongod's. An empty list
    (every session of the user, on mongod) is refused."""
    db = rs_client.txn_kill
    db.c.insert_one({"_id": 1, "n": 0})
    raw = RawSession(replica_store.port)
    assert raw.run("txn_kill", {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"n": 5}}}]},
                   1, start=True)["ok"] == 1
    assert raw.run("txn_kill", {"insert": "c", "documents": [{"_id": 2}]}, 1)["ok"] == 1
    done = threading.Event()
    writer = threading.Thread(target=lambda: (db.c.update_one({"_id": 1}, {"$inc": {"n": 100}}), done.set()))
    writer.start()
    assert not done.wait(0.3), "the plain write did not wait for the transaction"
    assert wire_command(replica_store.port, {"killSessions": [raw.lsid], "$db": "admin"})["ok"] == 1
    writer.join(20)
    assert done.is_set()
    assert list(db.c.find().sort("_id", 1)) == [{"_id": 1, "n": 100}]
    assert_error(raw.commit(1), 251, "NoSuchTransaction", ["TransientTransactionError"])
    assert_error(wire_command(replica_store.port, {"killSessions": [], "$db": "admin"}), 115, "CommandNotSupported")


# ---------------------------------------------------------------------------
# Commit and abort replies, errors.
# ---------------------------------------------------------------------------

def test_retried_commit_answers_ok_and_committed_transaction_refuses_more(replica_store, rs_client):
    raw = RawSession(replica_store.port)
    reply = raw.run("txn_raw", {"insert": "c", "documents": [{"_id": 1}]}, 0, start=True)
    assert reply["ok"] == 1 and reply["n"] == 1, reply
    first = raw.commit(0, writeConcern={"w": "majority"})
    assert first["ok"] == 1, first
    again = raw.commit(0)
    assert again["ok"] == 1, again
    assert again["operationTime"] >= first["operationTime"]
    assert_error(raw.abort(0), 256, "TransactionCommitted")
    assert_error(raw.run("txn_raw", {"find": "c"}, 0), 256, "TransactionCommitted")
    assert rs_client.txn_raw.c.count_documents({}) == 1
    # An older number is too old; an unknown newer one has no transaction.
    assert_error(raw.run("txn_raw", {"find": "c"}, 0, start=True), 117, "ConflictingOperationInProgress")
    reply = raw.run("txn_raw", {"find": "c"}, 3)
    assert_error(reply, 251, "NoSuchTransaction", ["TransientTransactionError"])
    assert "does not match any in-progress transactions" in reply["errmsg"]
    assert raw.run("txn_raw", {"find": "c"}, 5, start=True)["ok"] == 1
    assert_error(raw.run("txn_raw", {"find": "c"}, 4, start=True), 225, "TransactionTooOld")
    assert raw.abort(5)["ok"] == 1
    assert_error(raw.abort(5), 251, "NoSuchTransaction", ["TransientTransactionError"])
    assert_error(raw.commit(5), 251, "NoSuchTransaction", ["TransientTransactionError"])


def test_commands_outside_the_allowed_set_fail_without_aborting(replica_store, rs_client):
    raw = RawSession(replica_store.port)
    assert raw.run("txn_allowed", {"insert": "c", "documents": [{"_id": 1}]}, 1, start=True)["ok"] == 1
    for command in ({"count": "c"}, {"create": "d"}, {"listCollections": 1}, {"drop": "c"}):
        reply = raw.run("txn_allowed", command, 1)
        assert_error(reply, 263, "OperationNotSupportedInTransaction")
        assert reply["errmsg"] == "Cannot run '%s' in a multi-document transaction." % next(iter(command))
    reply = raw.run("txn_allowed", {"insert": "c", "documents": [{"_id": 2}], "writeConcern": {"w": 1}}, 1)
    assert_error(reply, 72, "InvalidOptions")
    reply = raw.run("txn_allowed", {"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}}, 1)
    assert_error(reply, 263, "OperationNotSupportedInTransaction")
    assert_error(raw.run("txn_allowed", {"commitTransaction": 1}, 1), 13, "Unauthorized")
    # None of those touched the transaction: it commits its insert.
    assert raw.commit(1)["ok"] == 1
    assert rs_client.txn_allowed.c.count_documents({}) == 1
    # Field combinations mongod refuses before looking at any transaction.
    assert_error(raw.run("txn_allowed", {"find": "c"}, 2, start=True, autocommit=True), 72, "InvalidOptions")
    assert_error(wire_command(replica_store.port, {"find": "c", "autocommit": False, "$db": "txn_allowed"}), 72,
                 "InvalidOptions")
    assert_error(raw.run("admin", {"commitTransaction": 1}, 3, start=True), 263,
                 "OperationNotSupportedInTransaction")


def test_failed_write_aborts_the_transaction(rs_client):
    db = rs_client.txn_failed
    db.c.insert_one({"_id": 1})
    with rs_client.start_session() as session:
        session.start_transaction()
        db.c.insert_one({"_id": 2}, session=session)
        with pytest.raises(OperationFailure) as raised:
            db.c.insert_one({"_id": 1}, session=session)
        assert raised.value.code == 11000
        assert not raised.value.has_error_label("TransientTransactionError")
        with pytest.raises(OperationFailure) as raised:
            db.c.insert_one({"_id": 3}, session=session)
        assert raised.value.code == 251
        assert "has been aborted" in str(raised.value)
        session.abort_transaction()
    assert sorted(d["_id"] for d in db.c.find()) == [1]


def test_empty_insert_in_a_transaction_creates_no_collection(replica_store, rs_client):
    """An insert of no documents is refused (InvalidLength) before anything
    happens: the collection a transaction's insert would create is not created."""
    raw = RawSession(replica_store.port)
    reply = raw.run("txn_empty", {"insert": "never", "documents": []}, 1, start=True)
    assert_error(reply, 16, "InvalidLength")
    raw.abort(1)
    assert "never" not in rs_client.txn_empty.list_collection_names()


def wait_for_ddl_to_queue(replica_store, database, collection):
    """Polls with new transactions until one's first use of the collection fails:
    a DDL is then waiting for the collection (mongod's queued exclusive lock).
    Returns that failed reply."""
    replies = []

    def probe():
        raw = RawSession(replica_store.port)
        reply = raw.run(database, {"find": collection, "filter": {}}, 1, start=True)
        replies.append(reply)
        if reply["ok"] == 1:
            raw.abort(1)
        return reply["ok"] == 0

    assert wait_until(probe, timeout=20), replies[-1]
    return replies[-1]


def start_thread(function):
    """Runs function on a thread; returns it and the list its result lands in."""
    results = []
    thread = threading.Thread(target=lambda: results.append(function()), daemon=True)
    thread.start()
    return thread, results


def test_index_build_waits_for_the_transaction_writing_its_collection(replica_store, rs_client):
    """As behind mongod's collection lock: createIndexes on a collection an open
    transaction has written waits until the transaction commits, and then indexes
    the transaction's document too; meanwhile a new transaction's first use of the
    collection fails with LockTimeout, a TransientTransactionError. (The store
    aborted the open transaction instead, which made a proxy's index sync abort
    its clients' transactions.)"""
    rs_client.txn_index.c.insert_one({"_id": 1, "x": 1})
    raw = RawSession(replica_store.port)
    assert raw.run("txn_index", {"insert": "c", "documents": [{"_id": 2, "x": 2}]}, 1, start=True)["ok"] == 1

    def build():
        with open_client(replica_store) as client:
            return client.txn_index.command("createIndexes", "c", indexes=[{"key": {"x": 1}, "name": "x_1"}])

    builder, built = start_thread(build)
    refused = wait_for_ddl_to_queue(replica_store, "txn_index", "c")
    assert_error(refused, 24, "LockTimeout", ["TransientTransactionError"])
    assert "txn_index.c" in refused["errmsg"]
    assert builder.is_alive()  # behind the open transaction, which it must not undercut

    assert raw.commit(1)["ok"] == 1
    builder.join(timeout=30)
    assert built and built[0]["ok"] == 1
    found = list(rs_client.txn_index.c.find({"x": 2}).hint("x_1"))
    assert found == [{"_id": 2, "x": 2}]


@pytest.mark.parametrize("command", ["drop", "dropDatabase"])
def test_dropping_waits_for_the_transaction_using_the_collection(replica_store, rs_client, command):
    database = rs_client["txn_" + command]
    database.c.insert_one({"_id": 1})
    raw = RawSession(replica_store.port)
    assert raw.run(database.name, {"find": "c", "filter": {}}, 1, start=True)["ok"] == 1

    def drop():
        with open_client(replica_store) as client:
            return client[database.name].command(command, "c") if command == "drop" \
                else client[database.name].command("dropDatabase")

    dropper, dropped = start_thread(drop)
    assert_error(wait_for_ddl_to_queue(replica_store, database.name, "c"), 24, "LockTimeout",
                 ["TransientTransactionError"])
    assert dropper.is_alive()
    assert raw.commit(1)["ok"] == 1
    dropper.join(timeout=30)
    assert dropped and dropped[0]["ok"] == 1
    assert "c" not in database.list_collection_names()


def test_ddl_behind_a_transaction_that_never_ends_waits_for_its_lifetime(replica_store, rs_client):
    """A transaction left open holds the DDL until the reaper aborts it at
    transactionLifetimeLimitSeconds, as on mongod; its commit then fails."""
    rs_client.txn_lifetime_ddl.c.insert_one({"_id": 1})
    rs_client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
    try:
        raw = RawSession(replica_store.port)
        assert raw.run("txn_lifetime_ddl", {"insert": "c", "documents": [{"_id": 2}]}, 1, start=True)["ok"] == 1
        rs_client.txn_lifetime_ddl.c.drop()
        assert_error(raw.commit(1), 251, "NoSuchTransaction", ["TransientTransactionError"])
    finally:
        rs_client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
    assert "c" not in rs_client.txn_lifetime_ddl.list_collection_names()


def test_transaction_past_its_lifetime_is_aborted(rs_client):
    db = rs_client.txn_lifetime
    assert rs_client.admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)[
        "transactionLifetimeLimitSeconds"] == 60
    rs_client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
    try:
        with rs_client.start_session() as session:
            session.start_transaction()
            db.c.insert_one({"_id": 1}, session=session)
            assert wait_until(lambda: transactions_status(rs_client)["currentOpen"] == 0, timeout=10)
            with pytest.raises(OperationFailure) as raised:
                session.commit_transaction()
            assert raised.value.code == 251
    finally:
        rs_client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
    assert db.c.count_documents({}) == 0


def test_standalone_store_refuses_transactions(store):
    raw = RawSession(store.port)
    reply = raw.run("db", {"insert": "c", "documents": [{"_id": 1}]}, 0, start=True)
    assert_error(reply, 20, "IllegalOperation")
    assert reply["errmsg"] == "Transaction numbers are only allowed on a replica set member or mongos"


# ---------------------------------------------------------------------------
# Change streams and the oplog.
# ---------------------------------------------------------------------------

def test_change_stream_shows_each_operation_with_lsid_and_txn_number(rs_client):
    db = rs_client.txn_stream
    db.c.insert_one({"_id": 0})
    with db.watch(max_await_time_ms=200) as stream:
        with rs_client.start_session() as session:
            with session.start_transaction():
                db.c.insert_one({"_id": 1}, session=session)
                db.c.update_one({"_id": 0}, {"$set": {"x": 1}}, session=session)
                db.d.insert_one({"_id": 2}, session=session)
                db.c.delete_one({"_id": 1}, session=session)
            session_id = session.session_id
        db.c.insert_one({"_id": 3})
        events = []
        assert wait_until(lambda: events.append(stream.try_next()) or len([e for e in events if e]) >= 5, 10)
    events = [e for e in events if e]
    assert [(e["operationType"], e["ns"]["coll"], e["documentKey"]["_id"]) for e in events] == [
        ("insert", "c", 1), ("update", "c", 0), ("insert", "d", 2), ("delete", "c", 1), ("insert", "c", 3)]
    in_transaction = events[:4]
    assert len({e["clusterTime"] for e in in_transaction}) == 1
    assert events[4]["clusterTime"] > in_transaction[0]["clusterTime"]
    for event in in_transaction:
        assert uuid_bytes(event["lsid"]["id"]) == uuid_bytes(session_id["id"])
        assert event["txnNumber"] == 1
    assert "lsid" not in events[4] and "txnNumber" not in events[4]
    tokens = [e["_id"]["_data"] for e in events]
    assert tokens == sorted(tokens) and len(set(tokens)) == 5

    # Resuming between two operations of the transaction gives the rest of it.
    with db.watch(resume_after=events[1]["_id"], max_await_time_ms=200) as stream:
        resumed = []
        assert wait_until(lambda: resumed.append(stream.try_next()) or len([e for e in resumed if e]) >= 3, 10)
    assert [e["_id"] for e in resumed if e] == [e["_id"] for e in events[2:]]


def test_read_only_transaction_writes_no_oplog_entry(rs_client):
    db = rs_client.txn_readonly
    db.c.insert_one({"_id": 1})
    with db.watch(max_await_time_ms=100) as stream:
        with rs_client.start_session() as session:
            with session.start_transaction():
                assert db.c.find_one({"_id": 1}, session=session) == {"_id": 1}
        db.c.insert_one({"_id": 2})
        events = []
        assert wait_until(lambda: events.append(stream.try_next()) or any(events), 10)
    assert [e["documentKey"]["_id"] for e in events if e] == [2]


def test_kill9_keeps_a_committed_transaction_and_loses_an_open_one(tmp_path):
    store = StoreProcess(tmp_path, extra_args=REPLICA_SET).start()
    try:
        client = open_client(store)
        db = client.durable
        before = db.command("ping")["operationTime"]
        with client.start_session() as session:
            with session.start_transaction():  # committed with the default writeConcern: majority, journaled
                db.c.insert_many([{"_id": i, "committed": True} for i in range(50)], session=session)
                db.d.insert_one({"_id": "committed"}, session=session)
        open_session = client.start_session()
        open_session.start_transaction()
        db.c.insert_many([{"_id": 100 + i} for i in range(50)], session=open_session)
        db.c.update_many({}, {"$set": {"touched": True}}, session=open_session)
        db.d.insert_one({"_id": "open"}, session=open_session)
        store.kill9()
        client.close()
        store.restart()
        client = open_client(store)
        db = client.durable
        assert db.c.count_documents({}) == 50
        assert db.c.count_documents({"committed": True, "touched": {"$exists": False}}) == 50
        assert [d["_id"] for d in db.d.find()] == ["committed"]
        # The committed transaction's oplog entry survived with it: a stream from
        # before it replays its 51 operations.
        with db.watch(start_at_operation_time=before, max_await_time_ms=100) as stream:
            events = []
            assert wait_until(lambda: events.append(stream.try_next()) or len([e for e in events if e]) >= 51, 10)
        assert len([e for e in events if e and "lsid" in e]) == 51
        client.close()
    finally:
        store.stop()
    shutil.rmtree(store.dbpath, ignore_errors=True)



def test_node_driver_with_transaction(replica_store):
    node = node_or_skip()
    completed = subprocess.run([node, str(NODE_DIR / "transaction.mjs"), replica_store.uri], cwd=str(NODE_DIR),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=40)
    output = completed.stdout.decode("utf-8", "replace")
    print(output)
    assert completed.returncode == 0, "transaction.mjs exited %d:\n%s" % (completed.returncode, output[-4000:])
    assert ", 0 failed" in output
