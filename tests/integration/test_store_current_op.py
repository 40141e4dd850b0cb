"""What the store is doing, as mongod 6.0 reports it: the $currentOp stage of
{aggregate: 1} on admin (its options allUsers, idleConnections, idleCursors,
idleSessions, localOps, and the rest of the pipeline applied to its documents),
the currentOp command (its filter, $ownOps, $all, the 1000-byte truncation of
`command`), killOp of a long scan (the scan stops with Interrupted 11601),
$listLocalSessions (every lsid the store has seen, its lastUse and uid), the
errors mongod gives for each misuse, access control (a user sees its own
operations; allUsers needs inprog, another's sessions listSessions), and where
the proxy sends $currentOp."""

import hashlib
import threading
import time
import uuid
from datetime import timezone

import pytest
from bson import SON
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure

from conftest import StoreProcess, proxy_over_two_stores, wait_until, wire_command

SCAN_DOCUMENTS = 40000
SCAN_TERMS = 1000
EMPTY_UID = hashlib.sha256(b"").digest()


def decoded_id(session):
    """The session's lsid.id as pymongo decodes the store's replies (a UUID),
    where the session itself holds the Binary it sends."""
    return uuid.UUID(bytes=bytes(session.session_id["id"]))


def connect(store, **options):
    return MongoClient(store.uri, serverSelectionTimeoutMS=10000, connectTimeoutMS=5000, socketTimeoutMS=60000,
                       **options)


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store for the module's tests without access control (each uses its
    own collections or its own comment): a sanitized store per test costs more
    than the tests."""
    process = StoreProcess(tmp_path_factory.mktemp("current_op"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def big_collection(shared_store):
    """SCAN_DOCUMENTS documents {v: i}, what slow_filter scans."""
    with connect(shared_store) as client:
        collection = client.test.big
        if collection.estimated_document_count() == 0:
            for start in range(0, SCAN_DOCUMENTS, 5000):
                collection.insert_many([{"v": i} for i in range(start, start + 5000)])
    return "test.big"


def slow_filter():
    """A filter no document passes, each document costing SCAN_TERMS
    comparisons: a scan of big_collection that takes seconds (no `sleep` in the
    store), and a command larger than the currentOp command's 1000 bytes."""
    terms = [{"$ne": ["$v", -1 - i]} for i in range(SCAN_TERMS)] + [{"$lt": ["$v", 0]}]
    return {"$expr": {"$and": terms}}


def current_ops(client, options=None, match=None):
    pipeline = [{"$currentOp": options or {}}]
    if match is not None:
        pipeline.append({"$match": match})
    return list(client.admin.aggregate(pipeline))


class SlowFind:
    """The slow scan, run on its own client and thread (a find, or the command
    kind asks for: an aggregate, a count); outcome is the OperationFailure it
    ended with, or "finished"."""

    def __init__(self, store, comment, app_name="slow-app", kind="find"):
        self.client = connect(store, appname=app_name)
        self.comment = comment
        self.kind = kind
        self.outcome = None
        self.thread = threading.Thread(target=self.run)

    def run(self):
        collection = self.client.test.big
        try:
            if self.kind == "find":
                list(collection.find(slow_filter(), comment=self.comment))
            elif self.kind == "aggregate":
                list(collection.aggregate([{"$match": slow_filter()}, {"$group": {"_id": None, "n": {"$sum": 1}}}],
                                          comment=self.comment))
            elif self.kind == "count":
                self.client.test.command(SON([("count", "big"), ("query", slow_filter()), ("comment", self.comment)]))
            else:
                self.client.test.command(SON([("update", "big"), ("updates", [{"q": slow_filter(), "u": {
                    "$set": {"touched": True}}, "multi": True}]), ("comment", self.comment)]))
            self.outcome = "finished"
        except OperationFailure as failure:
            self.outcome = failure

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.thread.join(60)
        self.client.close()


def wait_for_operation(client, comment):
    """The running operation whose command carries comment, once it shows."""
    found = []

    def running():
        found[:] = current_ops(client, match={"command.comment": comment})
        return len(found) == 1
    assert wait_until(running, timeout=20), "the slow find never showed in $currentOp"
    return found[0]


def failure_of(client, command):
    with pytest.raises(OperationFailure) as raised:
        client.admin.command(command)
    return raised.value


def aggregate_failure(database, pipeline, aggregate=1):
    with pytest.raises(OperationFailure) as raised:
        database.command(SON([("aggregate", aggregate), ("pipeline", pipeline), ("cursor", {})]))
    return raised.value


def test_running_find_is_reported_and_killed(shared_store, big_collection):
    with connect(shared_store) as client, SlowFind(shared_store, "slow-scan-1") as slow:
        operation = wait_for_operation(client, "slow-scan-1")
        assert operation["type"] == "op"
        assert operation["active"] is True
        assert operation["op"] == "query"
        assert operation["ns"] == big_collection
        assert operation["appName"] == "slow-app"
        assert operation["clientMetadata"]["application"]["name"] == "slow-app"
        assert operation["client"].startswith("127.0.0.1:")
        assert operation["desc"] == "conn%d" % operation["connectionId"]
        assert operation["host"].endswith(":%d" % shared_store.port)
        assert operation["secs_running"] >= 0 and operation["microsecs_running"] >= 0
        # $currentOp shows the command whole, even past 1000 bytes.
        assert operation["command"]["find"] == "big"
        assert operation["command"]["filter"] == slow_filter()
        assert operation["lsid"]["uid"] == EMPTY_UID

        # The currentOp command: the same operation, filtered, its command truncated.
        reply = client.admin.command(SON([("currentOp", 1), ("command.comment", "slow-scan-1")]))
        assert [op["opid"] for op in reply["inprog"]] == [operation["opid"]]
        truncated = reply["inprog"][0]["command"]
        assert set(truncated) == {"$truncated", "comment"}
        assert truncated["comment"] == "slow-scan-1"
        assert len(truncated["$truncated"]) == 1000 and truncated["$truncated"].endswith("...")

        assert client.admin.command("killOp", op=operation["opid"]) == {"info": "attempting to kill op", "ok": 1.0}
        slow.thread.join(30)
        assert isinstance(slow.outcome, OperationFailure), slow.outcome
        assert slow.outcome.code == 11601
        assert slow.outcome.details["codeName"] == "Interrupted"
        assert slow.outcome.details["errmsg"] == "operation was interrupted"
        assert current_ops(client, match={"command.comment": "slow-scan-1"}) == []
        # The connection goes on: its next command is not killed.
        assert slow.client.test.big.find_one({"v": 7}, {"_id": 0}) == {"v": 7}


@pytest.mark.parametrize("kind,op", [("aggregate", "command"), ("count", "command"), ("update", "update")])
def test_aggregate_count_and_update_are_killed_too(shared_store, big_collection, kind, op):
    """An interruption fails the whole command, a write's too (mongod rethrows
    it rather than reporting a writeError)."""
    comment = "slow-%s" % kind
    with connect(shared_store) as client, SlowFind(shared_store, comment, kind=kind) as slow:
        operation = wait_for_operation(client, comment)
        assert (operation["op"], operation["ns"]) == (op, big_collection)
        client.admin.command("killOp", op=operation["opid"])
        slow.thread.join(30)
        assert isinstance(slow.outcome, OperationFailure), slow.outcome
        assert (slow.outcome.code, slow.outcome.details["codeName"]) == (11601, "Interrupted")


def test_kill_op_of_no_operation_and_its_errors(shared_store):
    with connect(shared_store) as client:
        assert client.admin.command("killOp", op=987654321) == {"info": "attempting to kill op", "ok": 1.0}
        failure = failure_of(client, {"killOp": 1})
        assert (failure.code, failure.details["codeName"]) == (4, "NoSuchKey")
        failure = failure_of(client, SON([("killOp", 1), ("op", "x")]))
        assert (failure.code, failure.details["codeName"]) == (14, "TypeMismatch")
        failure = failure_of(client, SON([("killOp", 1), ("op", 1.5)]))
        assert (failure.code, failure.details["codeName"]) == (2, "BadValue")
        with pytest.raises(OperationFailure) as raised:
            client.test.command(SON([("killOp", 1), ("op", 1)]))
        assert (raised.value.code, raised.value.details["codeName"]) == (13, "Unauthorized")


def test_current_op_sees_itself_and_applies_the_pipeline(shared_store):
    with connect(shared_store, appname="self-app") as client:
        mine = current_ops(client, match={"appName": "self-app"})
        assert len(mine) == 1
        assert mine[0]["op"] == "command"
        assert mine[0]["ns"] == "admin.$cmd.aggregate"
        assert mine[0]["command"]["aggregate"] == 1
        assert mine[0]["command"]["pipeline"][0] == {"$currentOp": {}}
        shaped = list(client.admin.aggregate([{"$currentOp": {"localOps": True}}, {"$match": {"appName": "self-app"}},
                                              {"$project": {"_id": 0, "op": 1, "active": 1}}]))
        assert shaped == [{"op": "command", "active": True}]
        # The currentOp command reports itself too.
        reply = client.admin.command(SON([("currentOp", 1), ("appName", "self-app")]))
        assert [op["command"].get("currentOp") for op in reply["inprog"]] == [1]
        assert client.admin.command(SON([("currentOp", 1), ("appName", "no-such-app")]))["inprog"] == []


def test_idle_connections(shared_store):
    with connect(shared_store) as client, connect(shared_store, appname="idle-app") as idle:
        idle.admin.command("ping")
        assert current_ops(client, match={"appName": "idle-app"}) == []
        listed = current_ops(client, {"idleConnections": True}, match={"appName": "idle-app"})
        assert len(listed) >= 1
        assert all(op["active"] is False and "opid" not in op for op in listed)
        assert all(op["type"] == "op" and op["desc"].startswith("conn") for op in listed)
        # The currentOp command lists them with $all.
        reply = client.admin.command(SON([("currentOp", 1), ("$all", True), ("appName", "idle-app")]))
        assert len(reply["inprog"]) == len(listed)
        assert client.admin.command(SON([("currentOp", 1), ("appName", "idle-app")]))["inprog"] == []


def test_idle_cursors(shared_store):
    with connect(shared_store) as client:
        client.test.cursors.insert_many([{"_id": i} for i in range(10)])
        reply = client.test.command(SON([("find", "cursors"), ("batchSize", 2), ("comment", "idle-cursor")]))
        cursor_id = reply["cursor"]["id"]
        assert cursor_id != 0
        assert current_ops(client, match={"type": "idleCursor", "cursor.cursorId": cursor_id}) == []
        listed = current_ops(client, {"idleCursors": True}, match={"cursor.cursorId": cursor_id})
        assert len(listed) == 1
        assert listed[0]["type"] == "idleCursor"
        assert listed[0]["ns"] == "test.cursors"
        assert listed[0]["cursor"]["originatingCommand"]["comment"] == "idle-cursor"
        assert listed[0]["cursor"]["noCursorTimeout"] is False
        assert (listed[0]["cursor"]["nDocsReturned"], listed[0]["cursor"]["nBatchesReturned"]) == (2, 1)
        client.test.command(SON([("getMore", cursor_id), ("collection", "cursors"), ("batchSize", 3)]))
        listed = current_ops(client, {"idleCursors": True}, match={"cursor.cursorId": cursor_id})
        assert (listed[0]["cursor"]["nDocsReturned"], listed[0]["cursor"]["nBatchesReturned"]) == (5, 2)
        assert listed[0]["cursor"]["lastAccessDate"] >= listed[0]["cursor"]["createdDate"]
        client.test.command(SON([("killCursors", "cursors"), ("cursors", [cursor_id])]))
        assert current_ops(client, {"idleCursors": True}, match={"cursor.cursorId": cursor_id}) == []


def listed_while_waiting_for_the_journal(observer, write):
    """Runs write in a thread; returns what $currentOp and the currentOp command
    list on shop.durable while it waits (running longer than its handler could,
    which takes milliseconds), and what $currentOp lists once it is back."""
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=write()))
    thread.start()

    def both_views_list_it_waiting():
        listed = current_ops(observer, match={"ns": "shop.durable"})
        inprog = observer.admin.command(SON([("currentOp", 1), ("ns", "shop.durable")]))["inprog"]
        if all(op["microsecs_running"] >= 200000 for op in listed + inprog) and listed and inprog:
            return listed, inprog
        return None

    waiting, inprog = wait_until(both_views_list_it_waiting, 10) or ([], [])
    thread.join(30)
    after = current_ops(observer, match={"ns": "shop.durable"})
    assert "result" in outcome, outcome
    assert len(waiting) == 1 and [op["opid"] for op in inprog] == [waiting[0]["opid"]], (waiting, inprog)
    assert waiting[0]["active"] and waiting[0]["op"] == "insert", waiting
    assert after == [], after
    return waiting[0]["command"], inprog[0]["command"], outcome["result"]


def test_a_durable_write_is_in_current_op_until_the_journal_has_it(tmp_path):
    """As on mongod, a write with j: true is in progress until its reply, its
    wait for write concern included: with every journal sync 600 ms slower, both
    $currentOp and the currentOp command list the insert while it waits (long
    after its handler ended), with the command it was sent with, and neither
    lists it once the reply is back. As on mongod, `command` is the OP_MSG body:
    insert_one's document travels as a document sequence and is not shown; a
    200 KB document inside the body is (whole in $currentOp, $truncated by the
    currentOp command), so a document that moved while the write waits would show."""
    store = StoreProcess(tmp_path / "store", extra_args=["--sync-delay", "600ms"])
    store.start(timeout=60)  # each of the start's syncs is slower too
    try:
        with connect(store) as writer, connect(store) as observer:
            writer.shop.create_collection("durable")
            durable = writer.shop.get_collection("durable", write_concern=WriteConcern(j=True))
            payload = "x" * 200000
            command, truncated, result = listed_while_waiting_for_the_journal(
                observer, lambda: durable.insert_one({"_id": 1, "payload": payload}))
            assert result.acknowledged and result.inserted_id == 1
            assert command["insert"] == "durable" and command["$db"] == "shop", command
            assert command["writeConcern"]["j"] is True and "documents" not in command, command
            assert truncated == command, truncated  # small without its documents

            # pymongo sends any command's documents as a sequence: the raw wire keeps them in the body.
            command, truncated, result = listed_while_waiting_for_the_journal(observer, lambda: wire_command(
                store.port, SON([("insert", "durable"), ("documents", [{"_id": 2, "payload": payload}]),
                                 ("writeConcern", {"j": True}), ("$db", "shop")]), timeout=30))
            assert result["n"] == 1, result
            assert [document["_id"] for document in command["documents"]] == [2], command
            assert command["documents"][0]["payload"] == payload
            assert "$truncated" in truncated, truncated  # the currentOp command's 1000-byte limit
            assert [document["payload"] for document in durable.find(sort=[("_id", 1)])] == [payload, payload]
    finally:
        store.stop()


def test_current_op_errors(shared_store):
    with connect(shared_store) as client:
        failure = aggregate_failure(client.test, [{"$currentOp": {}}])
        assert (failure.code, failure.details["codeName"]) == (73, "InvalidNamespace")
        failure = aggregate_failure(client.admin, [{"$currentOp": {}}], aggregate="some")
        assert (failure.code, failure.details["codeName"]) == (73, "InvalidNamespace")
        failure = aggregate_failure(client.admin, [{"$match": {}}, {"$currentOp": {}}])
        assert failure.code == 73  # {aggregate: 1} must start with a source
        failure = aggregate_failure(client.admin, [{"$currentOp": {}}, {"$currentOp": {}}])
        assert (failure.code, failure.details["codeName"]) == (40602, "Location40602")
        assert failure.details["errmsg"] == "$currentOp is only valid as the first stage in a pipeline."
        failure = aggregate_failure(client.admin, [{"$currentOp": {"noSuchOption": True}}])
        assert (failure.code, failure.details["codeName"]) == (9, "FailedToParse")
        assert failure.details["errmsg"] == "Unrecognized option 'noSuchOption' in $currentOp stage."
        failure = aggregate_failure(client.admin, [{"$currentOp": {"allUsers": 1}}])
        assert (failure.code, failure.details["codeName"]) == (9, "FailedToParse")
        failure = aggregate_failure(client.admin, [{"$currentOp": 5}])
        assert (failure.code, failure.details["codeName"]) == (9, "FailedToParse")
        with pytest.raises(OperationFailure) as raised:
            client.test.command("currentOp")
        assert (raised.value.code, raised.value.details["codeName"]) == (13, "Unauthorized")


def test_list_local_sessions(shared_store):
    with connect(shared_store) as client:
        ids, sessions = [], []
        for _ in range(3):
            session = client.start_session()
            client.test.sessions.find_one({}, session=session)
            ids.append(decoded_id(session))
            sessions.append(session)
        before = time.time()
        client.test.sessions.find_one({}, session=session)  # the last one used again
        listed = {entry["_id"]["id"]: entry for entry in client.admin.aggregate([{"$listLocalSessions": {}}])}
        for session_id in ids:
            assert session_id in listed
            assert listed[session_id]["_id"]["uid"] == EMPTY_UID
            assert "user" not in listed[session_id]
        assert listed[ids[-1]]["lastUse"].replace(tzinfo=timezone.utc).timestamp() >= before - 1
        every = [entry["_id"]["id"] for entry in client.admin.aggregate([{"$listLocalSessions": {"allUsers": True}}])]
        assert set(ids) <= set(every)
        of_nobody = list(client.admin.aggregate([{"$listLocalSessions": {"users": [{"user": "x", "db": "admin"}]}}]))
        assert of_nobody == []
        counted = list(client.admin.aggregate([{"$listLocalSessions": {}},
                                               {"$match": {"_id.id": sessions[0].session_id["id"]}},
                                               {"$count": "n"}]))
        assert counted == [{"n": 1}]


def test_list_local_sessions_errors(shared_store):
    with connect(shared_store) as client:
        failure = aggregate_failure(client.test, [{"$listLocalSessions": {}}])
        assert (failure.code, failure.details["codeName"]) == (73, "InvalidNamespace")
        failure = aggregate_failure(client.admin, [{"$listLocalSessions": {"bogus": 1}}])
        assert (failure.code, failure.details["codeName"]) == (40415, "Location40415")
        failure = aggregate_failure(client.admin, [{"$listLocalSessions": {"allUsers": "yes"}}])
        assert (failure.code, failure.details["codeName"]) == (14, "TypeMismatch")
        failure = aggregate_failure(client.admin, [{"$listLocalSessions": {
            "allUsers": True, "users": [{"user": "x", "db": "admin"}]}}])
        assert (failure.code, failure.details["codeName"]) == (12, "UnsupportedFormat")
        failure = aggregate_failure(client.admin, [{"$match": {}}, {"$listLocalSessions": {}}], aggregate="c")
        assert (failure.code, failure.details["codeName"]) == (40602, "Location40602")


def test_idle_sessions_of_open_transactions(replica_store):
    with connect(replica_store) as client:
        client.test.txn.insert_one({"_id": 0})
        session = client.start_session()
        session.start_transaction()
        client.test.txn.insert_one({"_id": 1}, session=session)
        session_id = session.session_id["id"]
        listed = current_ops(client, match={"type": "idleSession", "lsid.id": session_id})
        assert len(listed) == 1
        assert listed[0]["desc"] == "inactive transaction"
        assert listed[0]["active"] is False
        assert listed[0]["transaction"]["parameters"]["autocommit"] is False
        assert current_ops(client, {"idleSessions": False}, match={"type": "idleSession"}) == []
        session.abort_transaction()
        session.end_session()
        assert current_ops(client, match={"type": "idleSession", "lsid.id": session_id}) == []


def test_kill_op_under_the_localhost_exception(tmp_path):
    """With --auth and no user yet, an unauthenticated loopback client may ask
    (it owns no operation): ok, nothing killed, the store goes on."""
    process = StoreProcess(tmp_path, extra_args=["--auth"])
    process.start()
    try:
        reply = wire_command(process.port, {"killOp": 1, "op": 1, "$db": "admin"})
        assert (reply["ok"], reply["info"]) == (1.0, "attempting to kill op")
        assert wire_command(process.port, {"ping": 1, "$db": "admin"})["ok"] == 1.0
    finally:
        process.stop()


@pytest.fixture
def auth_store(tmp_path):
    process = StoreProcess(tmp_path, extra_args=["--auth"])
    process.start()
    reply = wire_command(process.port, {"createUser": "root", "pwd": "root-pw", "roles": ["root"], "$db": "admin"})
    assert reply["ok"] == 1, reply
    yield process
    process.stop()


def test_access_control(auth_store):
    options = dict(authSource="admin", serverSelectionTimeoutMS=10000)
    with MongoClient(auth_store.uri, username="root", password="root-pw", appname="root-app", **options) as root:
        root.admin.command("createUser", "plain", pwd="plain-pw", roles=[{"role": "readWrite", "db": "test"}])
        root.admin.command("createUser", "watcher", pwd="watcher-pw", roles=["clusterMonitor"])
        root.admin.command("ping")
        with MongoClient(auth_store.uri, username="plain", password="plain-pw", appname="plain-app",
                         **options) as plain:
            own = current_ops(plain, {"idleConnections": True})
            assert own and all(op.get("appName") == "plain-app" for op in own)
            assert all(op["effectiveUsers"] == [{"user": "plain", "db": "admin"}] for op in own)
            failure = aggregate_failure(plain.admin, [{"$currentOp": {"allUsers": True}}])
            assert failure.code == 13
            failure = failure_of(plain, {"currentOp": 1})
            assert failure.code == 13
            reply = plain.admin.command(SON([("currentOp", 1), ("$ownOps", True)]))
            assert [op["appName"] for op in reply["inprog"]] == ["plain-app"]
            # killOp needs no privilege to ask; another's operation is left running.
            assert plain.admin.command("killOp", op=123456) == {"info": "attempting to kill op", "ok": 1.0}
            session = plain.start_session()
            plain.test.c.find_one({}, session=session)
            mine = list(plain.admin.aggregate([{"$listLocalSessions": {}}]))
            assert decoded_id(session) in [entry["_id"]["id"] for entry in mine]
            assert all(entry["user"] == {"name": "plain@admin"} for entry in mine)
            assert all(entry["_id"]["uid"] == hashlib.sha256(b"plain@admin").digest() for entry in mine)
            failure = aggregate_failure(plain.admin, [{"$listLocalSessions": {"allUsers": True}}])
            assert failure.code == 13
            everyone = list(root.admin.aggregate([{"$currentOp": {"allUsers": True, "idleConnections": True}}]))
            assert {"plain-app", "root-app"} <= {op.get("appName") for op in everyone}
        with MongoClient(auth_store.uri, username="watcher", password="watcher-pw", **options) as watcher:
            everyone = list(watcher.admin.aggregate([{"$currentOp": {"allUsers": True, "idleConnections": True}}]))
            assert "root-app" in {op.get("appName") for op in everyone}
            sessions = list(watcher.admin.aggregate([{"$listLocalSessions": {"allUsers": True}}]))
            assert "plain@admin" in {entry.get("user", {}).get("name") for entry in sessions}


@pytest.fixture
def proxied(tmp_path):
    yield from proxy_over_two_stores(tmp_path)


def test_proxy_sends_current_op_to_the_archive(proxied):
    """The proxy routes {aggregate: 1} on admin, currentOp and killOp to the
    archive (a namespace without a policy): $currentOp through it lists the
    archive's operations, the one it forwarded among them."""
    with MongoClient(proxied.uri, serverSelectionTimeoutMS=10000, appname="through-proxy") as client:
        listed = list(client.admin.aggregate([{"$currentOp": {}}, {"$match": {"command.comment": "via-proxy"}}],
                                             comment="via-proxy"))
        assert len(listed) == 1
        assert listed[0]["ns"] == "admin.$cmd.aggregate"
        archive_port = int(proxied.config_path.read_text().split("archive: mongodb://127.0.0.1:")[1].split("/")[0])
        assert listed[0]["host"].endswith(":%d" % archive_port)
        reply = client.admin.command("currentOp")
        assert all(op["host"].endswith(":%d" % archive_port) for op in reply["inprog"])
