"""Access control in the store (--auth), driven as mongod would be: pymongo with
SCRAM-SHA-1 and SCRAM-SHA-256 (and its default, speculative authentication),
the Node.js driver, mongosh, and raw OP_MSG for the SASL conversation itself.
Checks what an unauthenticated client may run, the localhost exception, roles
enforced per command and database, and that no secret is stored, shown or
logged."""

import base64
import hashlib
import hmac
import os
import shutil
import socket
import subprocess

import bson
import pytest
from bson.binary import Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import NODE_DIR, StoreProcess, op_msg, read_reply, wire_command

ROOT_PASSWORD = "root-Pa55word!"
MONGOSH = NODE_DIR / "node_modules" / ".bin" / "mongosh"
AUTH_SCRIPT = NODE_DIR / "auth.mjs"


@pytest.fixture
def auth_store(tmp_path, request):
    process = StoreProcess(tmp_path, extra_args=["--auth"])
    process.start()
    yield process
    call_report = getattr(request.node, "report_call", None)
    if call_report is not None and call_report.failed:
        print("---- store log tail (%s) ----\n%s" % (process.log_path, process.log_tail()))
    process.stop()


def connect(store, username=None, password=None, source="admin", mechanism=None, database=""):
    options = dict(serverSelectionTimeoutMS=10000, connectTimeoutMS=5000, socketTimeoutMS=30000)
    if username is not None:
        options.update(username=username, password=password, authSource=source)
    if mechanism is not None:
        options["authMechanism"] = mechanism
    return MongoClient("mongodb://127.0.0.1:%d/%s?directConnection=true" % (store.port, database), **options)


def create_root(store):
    """The first user, through the localhost exception."""
    reply = wire_command(store.port, {"createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"],
                                      "$db": "admin"})
    assert reply["ok"] == 1, reply
    return connect(store, "root", ROOT_PASSWORD)


class Connection:
    """One raw connection, for commands that must share it (a SASL conversation)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.request_id = 0

    def command(self, document):
        self.request_id += 1
        self.sock.sendall(op_msg(document, self.request_id))
        reply = read_reply(self.sock)
        assert reply is not None, "server closed the connection"
        return reply.document

    def close(self):
        self.sock.close()


class ScramClient:
    """A SCRAM-SHA-256 client written from RFC 5802/7677, independent of the
    drivers, to drive the conversation step by step."""

    def __init__(self, user, password):
        self.user = user
        self.password = password
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.first_bare = "n=%s,r=%s" % (user, self.nonce)

    def first(self):
        return ("n,," + self.first_bare).encode()

    def final(self, server_first):
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        assert fields["r"].startswith(self.nonce)
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = "c=biws,r=" + fields["r"]
        auth_message = ",".join([self.first_bare, server_first.decode(), without_proof]).encode()
        signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        self.expected_server_signature = base64.b64encode(
            hmac.new(server_key, auth_message, hashlib.sha256).digest()).decode()
        return (without_proof + ",p=" + base64.b64encode(proof).decode()).encode()


# --------------------------------------------------------------------------------------

def test_handshake_commands_run_unauthenticated_and_others_are_refused(auth_store):
    create_root(auth_store)
    for command in ({"hello": 1}, {"isMaster": 1}, {"buildInfo": 1}, {"ping": 1},
                    {"connectionStatus": 1}):
        reply = wire_command(auth_store.port, dict(command, **{"$db": "admin"}))
        assert reply["ok"] == 1, (command, reply)
    for name, command in (("find", {"find": "c"}), ("insert", {"insert": "c", "documents": [{}]}),
                          ("listDatabases", {"listDatabases": 1}), ("serverStatus", {"serverStatus": 1}),
                          ("usersInfo", {"usersInfo": 1}), ("dropDatabase", {"dropDatabase": 1})):
        reply = wire_command(auth_store.port, dict(command, **{"$db": "test"}))
        assert reply["ok"] == 0 and reply["code"] == 13, (name, reply)
        assert reply["codeName"] == "Unauthorized"
        assert reply["errmsg"] == "command %s requires authentication" % name
    # An unknown command is unknown before it is unauthorized, as in mongod.
    reply = wire_command(auth_store.port, {"noSuchThing": 1, "$db": "test"})
    assert reply["code"] == 59


def test_localhost_exception_creates_only_the_first_user(auth_store):
    reply = wire_command(auth_store.port, {"find": "c", "$db": "test"})
    assert reply["code"] == 13
    assert reply["errmsg"].startswith('not authorized on test to execute command { find: "c"')
    # Only on admin, and only roles of admin.
    reply = wire_command(auth_store.port, {"createUser": "u", "pwd": "p", "roles": ["readWrite"],
                                           "$db": "test"})
    assert reply["code"] == 13, reply
    reply = wire_command(auth_store.port, {"createUser": "u", "pwd": "p",
                                           "roles": [{"role": "readWrite", "db": "test"}],
                                           "$db": "admin"})
    assert reply["code"] == 13, reply
    client = create_root(auth_store)
    # The exception closed with the first user.
    reply = wire_command(auth_store.port, {"createUser": "second", "pwd": "p", "roles": [],
                                           "$db": "admin"})
    assert reply["code"] == 13
    assert reply["errmsg"] == "command createUser requires authentication"
    assert client.admin.command("usersInfo", 1)["users"][0]["user"] == "root"
    client.close()
    assert "created user root@admin" in auth_store.log_text()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "SCRAM-SHA-256", None])
def test_pymongo_right_password_accepted_wrong_refused(auth_store, mechanism):
    create_root(auth_store).close()
    good = connect(auth_store, "root", ROOT_PASSWORD, mechanism=mechanism)
    good.shop.orders.insert_one({"_id": 1, "total": 5})
    assert good.shop.orders.find_one({"_id": 1})["total"] == 5
    status = good.admin.command("connectionStatus")["authInfo"]
    assert status["authenticatedUsers"] == [{"user": "root", "db": "admin"}]
    assert status["authenticatedUserRoles"] == [{"role": "root", "db": "admin"}]
    good.close()
    for password in ("wrong", ROOT_PASSWORD[:-1], ""):
        if password == "":
            continue  # pymongo refuses an empty password itself
        bad = connect(auth_store, "root", password, mechanism=mechanism)
        with pytest.raises(OperationFailure) as caught:
            bad.shop.orders.find_one()
        assert caught.value.code == 18
        assert "Authentication failed." in str(caught.value)
        bad.close()
    # An unknown user fails the same way: nothing tells it from a wrong password.
    ghost = connect(auth_store, "ghost", "x", mechanism=mechanism)
    with pytest.raises(OperationFailure) as caught:
        ghost.shop.orders.find_one()
    assert caught.value.code == 18
    ghost.close()
    log = auth_store.log_text()
    assert "Authentication failed" in log and "Authentication succeeded" in log
    assert ROOT_PASSWORD not in log


def test_default_mechanism_is_speculative_scram_sha_256(auth_store):
    create_root(auth_store).close()
    client = connect(auth_store, "root", ROOT_PASSWORD)
    client.admin.command("ping")
    client.test.c.find_one()
    client.close()
    log = auth_store.log_text()
    assert "Authentication succeeded: mechanism SCRAM-SHA-256, speculative true" in log


def test_read_write_user_cannot_drop_a_database(auth_store):
    root = create_root(auth_store)
    root.shop.command("createUser", "clerk", pwd="clerk-pw", roles=["readWrite"])
    root.shop.command("createUser", "viewer", pwd="viewer-pw", roles=[{"role": "read", "db": "shop"}])
    clerk = connect(auth_store, "clerk", "clerk-pw", source="shop")
    clerk.shop.orders.insert_many([{"_id": i} for i in range(5)])
    assert clerk.shop.orders.count_documents({}) == 5
    clerk.shop.scratch.insert_one({})
    clerk.shop.scratch.drop()  # readWrite may drop a collection...
    with pytest.raises(OperationFailure) as caught:
        clerk.drop_database("shop")  # ...but not the database
    assert caught.value.code == 13
    assert caught.value.details["errmsg"].startswith(
        "not authorized on shop to execute command { dropDatabase: 1")
    assert caught.value.details["codeName"] == "Unauthorized"
    with pytest.raises(OperationFailure) as caught:
        clerk.other.things.insert_one({})  # another database
    assert caught.value.code == 13
    with pytest.raises(OperationFailure) as caught:
        clerk.shop.command("createUser", "mallory", pwd="x", roles=["dbOwner"])
    assert caught.value.code == 13
    assert "xxx" in caught.value.details["errmsg"] and "pwd: \"x\"" not in caught.value.details["errmsg"]
    with pytest.raises(OperationFailure) as caught:
        clerk.shop.command("collMod", "orders", changeStreamPreAndPostImages={"enabled": True})
    assert caught.value.code == 13  # readWrite has no collMod action; dbAdmin has
    root.shop.command("createUser", "schema", pwd="schema-pw", roles=["dbAdmin"])
    schema = connect(auth_store, "schema", "schema-pw", source="shop")
    assert schema.shop.command("collMod", "orders", changeStreamPreAndPostImages={"enabled": True})["ok"] == 1.0
    viewer = connect(auth_store, "viewer", "viewer-pw", source="shop")
    assert viewer.shop.orders.count_documents({}) == 5
    with pytest.raises(OperationFailure) as caught:
        viewer.shop.orders.insert_one({})
    assert caught.value.code == 13
    # listDatabases shows a user only the databases it has privileges on.
    root.other.things.insert_one({})
    assert clerk.list_database_names() == ["shop"]
    assert {"admin", "other", "shop"} <= set(root.list_database_names())
    with pytest.raises(OperationFailure):
        clerk.admin.command("serverStatus")
    assert root.shop.command("dropDatabase")["ok"] == 1
    for client in (root, clerk, viewer):
        client.close()


def test_bypass_document_validation_needs_its_own_action(auth_store):
    root = create_root(auth_store)
    root.shop.create_collection("orders", validator={"total": {"$gte": 0}})
    root.shop.command("createUser", "clerk", pwd="clerk-pw", roles=["readWrite"])
    root.shop.command("createUser", "restorer", pwd="restorer-pw", roles=["readWrite", "dbAdmin"])
    clerk = connect(auth_store, "clerk", "clerk-pw", source="shop")
    restorer = connect(auth_store, "restorer", "restorer-pw", source="shop")
    clerk.shop.orders.insert_one({"_id": 1, "total": 1})
    with pytest.raises(OperationFailure) as caught:
        clerk.shop.orders.insert_one({"_id": 2, "total": -1}, bypass_document_validation=True)
    assert (caught.value.code, caught.value.details["codeName"]) == (13, "Unauthorized")
    with pytest.raises(OperationFailure) as caught:
        clerk.shop.orders.update_one({"_id": 1}, {"$set": {"total": -1}}, bypass_document_validation=True)
    assert caught.value.code == 13
    restorer.shop.orders.insert_one({"_id": 2, "total": -1}, bypass_document_validation=True)
    assert root.shop.orders.find_one({"_id": 2}) == {"_id": 2, "total": -1}
    for client in (root, clerk, restorer):
        client.close()


def test_users_info_and_storage_hold_no_secret(auth_store):
    root = create_root(auth_store)
    secret = "correct horse battery staple"
    root.app.command("createUser", "svc", pwd=secret, roles=["readWrite", {"role": "read", "db": "other"}],
                     customData={"team": "orders"})
    info = root.app.command("usersInfo", "svc")["users"]
    assert len(info) == 1
    user = info[0]
    assert user["_id"] == "app.svc" and user["user"] == "svc" and user["db"] == "app"
    assert user["roles"] == [{"role": "readWrite", "db": "app"}, {"role": "read", "db": "other"}]
    assert user["mechanisms"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert user["customData"] == {"team": "orders"}
    assert "credentials" not in user and "pwd" not in user
    assert isinstance(user["userId"], (bson.binary.Binary, type(user["userId"])))
    # All forms of usersInfo.
    assert [u["user"] for u in root.app.command("usersInfo", 1)["users"]] == ["svc"]
    assert [u["user"] for u in root.admin.command("usersInfo", {"user": "svc", "db": "app"})["users"]] == ["svc"]
    every = root.admin.command("usersInfo", {"forAllDBs": True})["users"]
    assert [u["_id"] for u in every] == ["admin.root", "app.svc"]
    assert root.app.command("usersInfo", "nobody")["users"] == []
    # What is stored: salted keys per mechanism, never the password.
    stored = root.admin["system.users"].find_one({"_id": "app.svc"})
    assert set(stored["credentials"]) == {"SCRAM-SHA-1", "SCRAM-SHA-256"}
    sha256 = stored["credentials"]["SCRAM-SHA-256"]
    assert sha256["iterationCount"] == 15000
    assert len(base64.b64decode(sha256["salt"])) == 28
    assert len(base64.b64decode(sha256["storedKey"])) == 32
    assert stored["credentials"]["SCRAM-SHA-1"]["iterationCount"] == 10000
    assert secret.encode() not in bson.encode(stored)
    # showCredentials is mongod's way to see the keys (never the password).
    shown = root.app.command("usersInfo", "svc", showCredentials=True)["users"][0]
    assert shown["credentials"]["SCRAM-SHA-256"]["storedKey"] == sha256["storedKey"]
    svc = connect(auth_store, "svc", secret, source="app")
    svc.app.c.insert_one({"x": 1})
    # A user sees itself without viewUser, and nobody else.
    assert svc.app.command("usersInfo", "svc")["users"][0]["user"] == "svc"
    with pytest.raises(OperationFailure) as caught:
        svc.admin.command("usersInfo", "root")
    assert caught.value.code == 13
    root.admin.command("fsync")  # a checkpoint: the data files hold the users too
    svc.close()
    root.close()
    # Not in the log, not in any data or journal file.
    assert secret not in auth_store.log_text()
    for path in auth_store.dbpath.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_user_management_errors(auth_store):
    root = create_root(auth_store)
    with pytest.raises(OperationFailure) as caught:
        root.app.command("createUser", "a", pwd="p", roles=["nosuchrole"])
    assert caught.value.code == 31 and caught.value.details["errmsg"] == "Could not find role: nosuchrole@app"
    with pytest.raises(OperationFailure) as caught:
        root.app.command("createUser", "a", pwd="p", roles=[{"role": "root", "db": "app"}])
    assert caught.value.code == 31  # root exists only in admin
    with pytest.raises(OperationFailure) as caught:
        root.app.command("createUser", "a", pwd="p")
    assert caught.value.code == 40414
    with pytest.raises(OperationFailure) as caught:
        root.app.command("createUser", "a", pwd="", roles=[])
    assert caught.value.code == 2
    with pytest.raises(OperationFailure) as caught:
        root.app.command("createUser", "a", pwd="p", roles=[], mechanisms=["PLAIN"])
    assert caught.value.code == 2
    root.app.command("createUser", "a", pwd="p", roles=[])
    with pytest.raises(OperationFailure) as caught:
        root.app.command("createUser", "a", pwd="p", roles=[])
    assert caught.value.code == 51003
    assert caught.value.details["errmsg"] == 'User "a@app" already exists'
    with pytest.raises(OperationFailure) as caught:
        root.app.command("dropUser", "nobody")
    assert caught.value.code == 11 and caught.value.details["codeName"] == "UserNotFound"
    with pytest.raises(OperationFailure) as caught:
        root.app.command("updateUser", "nobody", pwd="x")
    assert caught.value.code == 11
    with pytest.raises(OperationFailure) as caught:
        root.app.command("updateUser", "a")
    assert caught.value.code == 2
    with pytest.raises(OperationFailure) as caught:
        root.local.command("createUser", "l", pwd="p", roles=[])
    assert caught.value.code == 2
    root.close()


def test_update_drop_and_roles_take_effect_on_open_connections(auth_store):
    root = create_root(auth_store)
    root.app.command("createUser", "dev", pwd="old-pw", roles=["read"])
    dev = connect(auth_store, "dev", "old-pw", source="app")
    dev.app.c.find_one()
    with pytest.raises(OperationFailure):
        dev.app.c.insert_one({})
    root.app.command("grantRolesToUser", "dev", roles=["readWrite"])
    dev.app.c.insert_one({})  # the open connection sees its new role
    root.app.command("revokeRolesFromUser", "dev", roles=["readWrite"])
    with pytest.raises(OperationFailure):
        dev.app.c.insert_one({})
    root.app.command("updateUser", "dev", pwd="new-pw")
    old = connect(auth_store, "dev", "old-pw", source="app")
    with pytest.raises(OperationFailure) as caught:
        old.app.c.find_one()
    assert caught.value.code == 18
    new = connect(auth_store, "dev", "new-pw", source="app")
    new.app.c.find_one()
    assert root.app.command("usersInfo", "dev")["users"][0]["roles"] == [{"role": "read", "db": "app"}]
    root.app.command("dropUser", "dev")
    with pytest.raises(OperationFailure) as caught:
        new.app.c.find_one()
    assert caught.value.code == 13
    assert root.app.command("dropAllUsersFromDatabase", 1)["n"] == 0
    for client in (root, dev, old, new):
        client.close()


def test_scram_sha_1_only_user_and_sasl_supported_mechs(auth_store):
    root = create_root(auth_store)
    root.app.command("createUser", "legacy", pwd="legacy-pw", roles=["read"], mechanisms=["SCRAM-SHA-1"])
    hello = wire_command(auth_store.port, {"hello": 1, "saslSupportedMechs": "app.legacy", "$db": "admin"})
    assert hello["saslSupportedMechs"] == ["SCRAM-SHA-1"]
    hello = wire_command(auth_store.port, {"hello": 1, "saslSupportedMechs": "admin.root", "$db": "admin"})
    assert hello["saslSupportedMechs"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    hello = wire_command(auth_store.port, {"hello": 1, "saslSupportedMechs": "app.nobody", "$db": "admin"})
    assert "saslSupportedMechs" not in hello
    sha1 = connect(auth_store, "legacy", "legacy-pw", source="app", mechanism="SCRAM-SHA-1")
    sha1.app.c.find_one()
    sha256 = connect(auth_store, "legacy", "legacy-pw", source="app", mechanism="SCRAM-SHA-256")
    with pytest.raises(OperationFailure) as caught:
        sha256.app.c.find_one()
    assert caught.value.code == 18
    default = connect(auth_store, "legacy", "legacy-pw", source="app")
    default.app.c.find_one()  # the driver picks SCRAM-SHA-1 from saslSupportedMechs
    for client in (root, sha1, sha256, default):
        client.close()


def test_saslprep_applies_to_scram_sha_256_passwords(auth_store):
    root = create_root(auth_store)
    # U+00AD (soft hyphen) is mapped to nothing, U+00A0 to a space.
    root.app.command("createUser", "intl", pwd="I\u00adX pass\u00a0word", roles=["read"],
                     mechanisms=["SCRAM-SHA-256"])
    client = connect(auth_store, "intl", "IX pass word", source="app", mechanism="SCRAM-SHA-256")
    client.app.c.find_one()
    client.close()
    root.close()


def test_sasl_conversation_over_the_wire(auth_store):
    create_root(auth_store).close()
    # Without skipEmptyExchange: three steps, authenticated after the empty one.
    connection = Connection(auth_store.port)
    scram = ScramClient("root", ROOT_PASSWORD)
    reply = connection.command({"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(scram.first()),
                                "autoAuthorize": 1, "$db": "admin"})
    assert reply["ok"] == 1 and reply["conversationId"] == 1 and reply["done"] is False
    reply = connection.command({"saslContinue": 1, "conversationId": 1,
                                "payload": Binary(scram.final(reply["payload"])), "$db": "admin"})
    assert reply["done"] is False
    assert reply["payload"].decode() == "v=" + scram.expected_server_signature
    assert connection.command({"find": "c", "$db": "test"})["code"] == 13  # not yet
    reply = connection.command({"saslContinue": 1, "conversationId": 1, "payload": Binary(b""), "$db": "admin"})
    assert reply["done"] is True and reply["payload"] == b""
    assert connection.command({"find": "c", "$db": "test"})["ok"] == 1
    status = connection.command({"connectionStatus": 1, "$db": "admin"})
    assert status["authInfo"]["authenticatedUsers"] == [{"user": "root", "db": "admin"}]
    assert connection.command({"logout": 1, "$db": "admin"})["ok"] == 1
    assert connection.command({"find": "c", "$db": "test"})["code"] == 13
    connection.close()

    # Speculative, in hello, with skipEmptyExchange: two round trips in all.
    connection = Connection(auth_store.port)
    scram = ScramClient("root", ROOT_PASSWORD)
    hello = connection.command({"hello": 1, "$db": "admin", "speculativeAuthenticate": {
        "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(scram.first()),
        "options": {"skipEmptyExchange": True}, "db": "admin"}})
    speculative = hello["speculativeAuthenticate"]
    assert speculative["conversationId"] == 1 and speculative["done"] is False
    reply = connection.command({"saslContinue": 1, "conversationId": 1,
                                "payload": Binary(scram.final(speculative["payload"])), "$db": "admin"})
    assert reply["done"] is True
    assert reply["payload"].decode() == "v=" + scram.expected_server_signature
    assert connection.command({"find": "c", "$db": "test"})["ok"] == 1
    connection.close()

    # A wrong proof, a bad conversation id, a step without a conversation.
    connection = Connection(auth_store.port)
    scram = ScramClient("root", "not the password")
    reply = connection.command({"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(scram.first()),
                                "$db": "admin"})
    bad = connection.command({"saslContinue": 1, "conversationId": 2, "payload": Binary(b"x"), "$db": "admin"})
    assert bad["code"] == 17
    reply = connection.command({"saslContinue": 1, "conversationId": 1,
                                "payload": Binary(scram.final(reply["payload"])), "$db": "admin"})
    assert reply["ok"] == 0 and reply["code"] == 18 and reply["errmsg"] == "Authentication failed."
    reply = connection.command({"saslContinue": 1, "conversationId": 1, "payload": Binary(b""), "$db": "admin"})
    assert reply["code"] == 17
    reply = connection.command({"saslStart": 1, "mechanism": "PLAIN", "payload": Binary(b"\0a\0b"),
                                "$db": "admin"})
    assert reply["code"] == 334 and reply["codeName"] == "MechanismUnavailable"
    hello = connection.command({"hello": 1, "$db": "admin", "speculativeAuthenticate": {
        "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(b"garbage"), "db": "admin"}})
    assert hello["ok"] == 1 and "speculativeAuthenticate" not in hello
    connection.close()


def test_one_user_per_connection(auth_store):
    root = create_root(auth_store)
    root.admin.command("createUser", "other", pwd="other-pw", roles=[])
    root.close()
    connection = Connection(auth_store.port)

    def authenticate(user, password):
        scram = ScramClient(user, password)
        reply = connection.command({"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(scram.first()),
                                    "options": {"skipEmptyExchange": True}, "$db": "admin"})
        return connection.command({"saslContinue": 1, "conversationId": 1,
                                   "payload": Binary(scram.final(reply["payload"])), "$db": "admin"})

    assert authenticate("root", ROOT_PASSWORD)["ok"] == 1
    assert authenticate("root", ROOT_PASSWORD)["ok"] == 1  # the same user again is accepted
    reply = authenticate("other", "other-pw")
    assert reply["code"] == 5626701
    assert reply["errmsg"].startswith("Each client connection may only be authenticated once")
    connection.close()


def test_without_auth_everything_runs_and_users_still_work(store):
    # No --auth: no check at all, but users can be made and used, as in mongod.
    assert wire_command(store.port, {"createUser": "u", "pwd": "pw", "roles": ["read"],
                                     "$db": "app"})["ok"] == 1
    client = connect(store, "u", "pw", source="app")
    client.app.c.insert_one({})  # read only, but nothing is enforced without --auth
    assert client.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [
        {"user": "u", "db": "app"}]
    client.close()


def node_or_skip():
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "mongodb" / "package.json").exists():
        pytest.skip("node or tests/node/node_modules missing (scripts/install-deps.sh installs them)")
    return node


def test_node_driver_authenticates(auth_store):
    node = node_or_skip()
    create_root(auth_store).close()
    base = "mongodb://%s@127.0.0.1:%d/shop?authSource=admin&directConnection=true"
    completed = subprocess.run(
        [node, str(AUTH_SCRIPT), base % ("root:" + ROOT_PASSWORD, auth_store.port),
         base % ("root:wrong", auth_store.port)],
        cwd=str(NODE_DIR), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=50)
    output = completed.stdout.decode("utf-8", "replace")
    assert completed.returncode == 0, output
    assert "ok authenticated" in output and "ok refused 18" in output


def run_mongosh(arguments, home):
    if not MONGOSH.exists():
        pytest.skip("mongosh is missing: run `npm install` in tests/node")
    environment = dict(os.environ, HOME=str(home), CI="true", MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING="1")
    completed = subprocess.run([str(MONGOSH)] + arguments, env=environment, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=50)
    return completed.returncode, completed.stdout.decode("utf-8", "replace") + completed.stderr.decode(
        "utf-8", "replace")


def test_mongosh_authenticates(auth_store, tmp_path):
    create_root(auth_store).close()
    uri = "mongodb://127.0.0.1:%d/shell?directConnection=true" % auth_store.port
    script = ("db.t.insertOne({_id: 1}); print(JSON.stringify({n: db.t.countDocuments({}), "
              "user: db.runCommand({connectionStatus: 1}).authInfo.authenticatedUsers[0].user}))")
    code, output = run_mongosh([uri, "--quiet", "-u", "root", "-p", ROOT_PASSWORD,
                                "--authenticationDatabase", "admin", "--eval", script], tmp_path)
    assert code == 0, output
    assert '{"n":1,"user":"root"}' in output
    code, output = run_mongosh([uri, "--quiet", "-u", "root", "-p", "wrong",
                                "--authenticationDatabase", "admin", "--eval", "db.t.findOne()"], tmp_path)
    assert code != 0
    assert "Authentication failed" in output


def test_direct_writes_to_system_users_take_effect(auth_store):
    root = create_root(auth_store)
    root.app.command("createUser", "temp", pwd="temp-pw", roles=["readWrite"])
    temp = connect(auth_store, "temp", "temp-pw", source="app")
    temp.app.c.insert_one({})
    # A root may edit admin.system.users as a collection, as in mongod.
    root.admin["system.users"].update_one({"_id": "app.temp"}, {"$set": {"roles": [{"role": "read", "db": "app"}]}})
    with pytest.raises(OperationFailure) as caught:
        temp.app.c.insert_one({})
    assert caught.value.code == 13
    assert temp.app.c.count_documents({}) == 1
    root.admin["system.users"].delete_one({"_id": "app.temp"})
    with pytest.raises(OperationFailure) as caught:
        temp.app.c.find_one()
    assert caught.value.code == 13
    assert caught.value.details["errmsg"] == "command find requires authentication"
    # readAnyDatabase reads every database, not the users collection.
    root.app.command("createUser", "reader", pwd="reader-pw", roles=[{"role": "readAnyDatabase", "db": "admin"}])
    reader = connect(auth_store, "reader", "reader-pw", source="app")
    assert reader.app.c.count_documents({}) == 1
    with pytest.raises(OperationFailure) as caught:
        reader.admin["system.users"].find_one()
    assert caught.value.code == 13
    for client in (root, temp, reader):
        client.close()
