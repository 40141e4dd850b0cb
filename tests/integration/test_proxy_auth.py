"""Authentication and authorization through `thermocline proxy`: both tiers run
--auth, the proxy reaches them with the credentials in its URIs (its own SCRAM
client; the tier workers with libmongoc), and with `authorization: enabled`
clients authenticate against the archive's users and every command is checked
against their roles, whichever tier serves it. One deployment serves the whole
module (starting three sanitized processes is most of the cost)."""

import datetime
import shutil
import subprocess

import pytest
from bson.binary import Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import NODE_DIR, ProxyProcess, StoreProcess, wait_until, wire_command
from test_store_auth import Connection, ScramClient, run_mongosh

PROXY_PASSWORD = "proxy-Pa55word!"
WRONG_TIER_PASSWORD = "not-the-proxy-Pa55word"
APP_PASSWORD = "app-Pa55word!"
READER_PASSWORD = "reader-Pa55word!"
NS_DATABASE, NS_COLLECTION = "shop", "orders"
NODE_SCRIPT = NODE_DIR / "proxy_auth.mjs"


def tier_uri(store, user="proxy", password=PROXY_PASSWORD, mechanism=None):
    uri = "mongodb://%s:%s@127.0.0.1:%d/?directConnection=true&authSource=admin" % (user, password, store.port)
    return uri + ("&authMechanism=" + mechanism if mechanism else "")


def config_text(archive, fast, archive_password=PROXY_PASSWORD, workers=True):
    lines = ["listen: 127.0.0.1:{port}",
             # The archive negotiates the mechanism (SCRAM-SHA-256); the fast tier is told SCRAM-SHA-1.
             "archive: %s" % tier_uri(archive, password=archive_password),
             "fast: %s" % tier_uri(fast, mechanism="SCRAM-SHA-1"),
             "authorization: enabled",
             "namespaces:",
             "  - ns: %s.%s" % (NS_DATABASE, NS_COLLECTION),
             "    timeField: createdAt",
             "    maxAge: 30d",
             "    coverage: complete"]
    if not workers:
        lines += ["feederEnabled: false", "evictorEnabled: false", "warmerEnabled: false"]
    return "\n".join(lines) + "\n"


def connect(process, user=None, password=None, source="admin", mechanism=None):
    options = dict(serverSelectionTimeoutMS=10000, connectTimeoutMS=5000, socketTimeoutMS=30000)
    if user is not None:
        options.update(username=user, password=password, authSource=source)
    if mechanism is not None:
        options["authMechanism"] = mechanism
    return MongoClient("mongodb://127.0.0.1:%d/" % process.port, **options)


class Deployment:
    def __init__(self, archive, fast, proxy):
        self.archive, self.fast, self.proxy = archive, fast, proxy


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    work = tmp_path_factory.mktemp("proxy_auth")
    started = []
    try:
        archive = StoreProcess(work / "archive", extra_args=["--auth"], replica_set="rs0").start()
        started.append(archive)
        fast = StoreProcess(work / "fast", extra_args=["--auth"], replica_set="rs1").start()
        started.append(fast)
        for store in (archive, fast):
            # The proxy's own user, through each store's localhost exception.
            reply = wire_command(store.port, {"createUser": "proxy", "pwd": PROXY_PASSWORD, "roles": ["root"],
                                              "$db": "admin"})
            assert reply["ok"] == 1, reply
        proxy = ProxyProcess(work / "proxy", config_text(archive, fast)).start()
        started.append(proxy)
        # Users are made through the proxy, which sends them to the archive.
        with connect(proxy, "proxy", PROXY_PASSWORD) as root:
            root.shop.command("createUser", "app", pwd=APP_PASSWORD, roles=["readWrite"])
            root.shop.command("createUser", "reader", pwd=READER_PASSWORD, roles=["read"])
        yield Deployment(archive, fast, proxy)
    finally:
        # Every process is stopped and checked, even after one of them failed.
        problems = []
        for process in reversed(started):
            try:
                process.stop()
            except BaseException as error:  # pytest.fail's exception is not an Exception
                problems.append(str(error))
        shutil.rmtree(work, ignore_errors=True)
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def status(deployment):
    with connect(deployment.proxy, "proxy", PROXY_PASSWORD) as root:
        return root.admin.command("thermoclineStatus")


# --------------------------------------------------------------------------------------


def test_users_live_in_the_archive(deployment):
    with connect(deployment.archive, "proxy", PROXY_PASSWORD) as archive:
        names = {user["user"] for user in archive.shop.command("usersInfo", 1)["users"]}
        assert names == {"app", "reader"}
    with connect(deployment.fast, "proxy", PROXY_PASSWORD) as fast:
        assert fast.shop.command("usersInfo", 1)["users"] == []
    # Both tiers run --auth: the proxy's pools reach them only because they authenticate.
    backends = status(deployment)["backends"]
    assert backends["archive"]["reachable"] and backends["fast"]["reachable"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_wrong_password_refused_right_accepted(deployment, mechanism):
    good = connect(deployment.proxy, "app", APP_PASSWORD, source="shop", mechanism=mechanism)
    assert good.shop.command("ping")["ok"] == 1
    status_reply = good.admin.command("connectionStatus")["authInfo"]
    # The proxy answers for the client's connection, not for its own one to the archive.
    assert status_reply["authenticatedUsers"] == [{"user": "app", "db": "shop"}]
    assert status_reply["authenticatedUserRoles"] == [{"role": "readWrite", "db": "shop"}]
    good.close()
    for user, password in (("app", "wrong"), ("ghost", APP_PASSWORD)):
        bad = connect(deployment.proxy, user, password, source="shop", mechanism=mechanism)
        with pytest.raises(OperationFailure) as caught:
            bad.shop.orders.find_one()
        assert caught.value.code == 18
        assert "Authentication failed." in str(caught.value)
        bad.close()
    log = deployment.proxy.log_text()
    assert "Authentication failed" in log and APP_PASSWORD not in log and PROXY_PASSWORD not in log


def test_unauthenticated_commands_get_13(deployment):
    port = deployment.proxy.port
    for command in ({"hello": 1}, {"isMaster": 1}, {"ping": 1}, {"buildInfo": 1}, {"connectionStatus": 1}):
        assert wire_command(port, dict(command, **{"$db": "admin"}))["ok"] == 1, command
    for name, command in (("find", {"find": NS_COLLECTION}), ("insert", {"insert": "c", "documents": [{}]}),
                          ("listDatabases", {"listDatabases": 1}), ("usersInfo", {"usersInfo": 1}),
                          ("thermoclineStatus", {"thermoclineStatus": 1})):
        reply = wire_command(port, dict(command, **{"$db": NS_DATABASE}))
        assert reply["ok"] == 0 and reply["code"] == 13, (name, reply)
        assert reply["codeName"] == "Unauthorized"
        assert reply["errmsg"] == "command %s requires authentication" % name


def test_read_write_user_on_a_tiered_namespace(deployment):
    before = status(deployment)["namespaces"]["shop.orders"]["routes"]["fast"]
    app = connect(deployment.proxy, "app", APP_PASSWORD, source="shop")
    now = datetime.datetime.utcnow().replace(microsecond=0)
    app.shop.orders.insert_one({"_id": "rw-1", "createdAt": now, "total": 7})
    found = app.shop.orders.find_one({"_id": "rw-1", "createdAt": {"$gte": now - datetime.timedelta(days=1)}})
    assert found["total"] == 7
    # Both went to the fast tier, checked against app's roles first.
    assert status(deployment)["namespaces"]["shop.orders"]["routes"]["fast"] >= before + 2
    with pytest.raises(OperationFailure) as caught:
        app.drop_database("shop")
    assert caught.value.code == 13
    assert caught.value.details["codeName"] == "Unauthorized"
    assert caught.value.details["errmsg"].startswith("not authorized on shop to execute command { dropDatabase: 1")
    with pytest.raises(OperationFailure) as caught:
        app.other.things.insert_one({})
    assert caught.value.code == 13
    with pytest.raises(OperationFailure) as caught:
        app.admin.command("thermoclineStatus")
    assert caught.value.code == 13
    # listDatabases is trimmed to what app's roles reach.
    assert app.list_database_names() == ["shop"]
    app.close()


def test_read_user_cannot_insert(deployment):
    reader = connect(deployment.proxy, "reader", READER_PASSWORD, source="shop")
    reader.shop.orders.count_documents({})
    with pytest.raises(OperationFailure) as caught:
        reader.shop.orders.insert_one({"_id": "nope", "createdAt": datetime.datetime.utcnow()})
    assert caught.value.code == 13
    assert "not authorized on shop to execute command { insert: \"orders\"" in caught.value.details["errmsg"]
    reader.close()


def test_speculative_authentication(deployment):
    # pymongo starts the conversation in its handshake (OP_QUERY isMaster).
    client = connect(deployment.proxy, "reader", READER_PASSWORD, source="shop")
    client.shop.orders.find_one()
    client.close()
    assert ("Authentication succeeded: mechanism SCRAM-SHA-256, speculative true, principalName \"reader\""
            in deployment.proxy.log_text())
    # The same over OP_MSG hello, by hand: hello answers server-first, saslContinue ends it.
    connection = Connection(deployment.proxy.port)
    scram = ScramClient("app", APP_PASSWORD)
    hello = connection.command({"hello": 1, "saslSupportedMechs": "shop.app", "$db": "admin",
                                "speculativeAuthenticate": {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                                            "payload": Binary(scram.first()), "db": "shop",
                                                            "options": {"skipEmptyExchange": True}}})
    assert hello["ok"] == 1 and hello["msg"] == "isdbgrid"
    assert hello["saslSupportedMechs"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    step = hello["speculativeAuthenticate"]
    assert step["conversationId"] == 1 and step["done"] is False
    final = connection.command({"saslContinue": 1, "conversationId": 1, "payload": Binary(scram.final(step["payload"])),
                                "$db": "shop"})
    assert final["ok"] == 1 and final["done"] is True
    assert final["payload"].decode() == "v=" + scram.expected_server_signature
    assert connection.command({"count": NS_COLLECTION, "$db": NS_DATABASE})["ok"] == 1
    assert connection.command({"logout": 1, "$db": "shop"})["ok"] == 1
    assert connection.command({"count": NS_COLLECTION, "$db": NS_DATABASE})["code"] == 13
    connection.close()


def test_user_changes_through_the_proxy_take_effect(deployment):
    with connect(deployment.proxy, "proxy", PROXY_PASSWORD) as root:
        root.shop.command("createUser", "temp", pwd="temp-pw", roles=["readWrite"])
        temp = connect(deployment.proxy, "temp", "temp-pw", source="shop")
        temp.shop.scratch.insert_one({})
        root.shop.command("revokeRolesFromUser", "temp", roles=["readWrite"])
        root.shop.command("grantRolesToUser", "temp", roles=["read"])
        with pytest.raises(OperationFailure) as caught:
            temp.shop.scratch.insert_one({})  # the cache was invalidated: read again
        assert caught.value.code == 13
        assert temp.shop.scratch.count_documents({}) == 1
        root.shop.command("dropUser", "temp")
        with pytest.raises(OperationFailure) as caught:
            temp.shop.scratch.find_one()
        assert caught.value.details["errmsg"] == "command find requires authentication"
        temp.close()
        root.shop.scratch.drop()


def test_workers_feed_the_archive_with_authenticated_uris(deployment):
    app = connect(deployment.proxy, "app", APP_PASSWORD, source="shop")
    now = datetime.datetime.utcnow()
    app.shop.orders.insert_one({"_id": "fed-1", "createdAt": now, "total": 3})
    app.close()
    with connect(deployment.archive, "proxy", PROXY_PASSWORD) as archive:
        assert wait_until(lambda: archive.shop.orders.find_one({"_id": "fed-1"}), timeout=20), \
            "the feeder did not copy the write to the archive"
    workers = status(deployment)["workers"]
    assert workers, "no tier worker reported"


def test_a_wrong_tier_password_fails_requests_not_the_proxy(deployment, tmp_path):
    proxy = ProxyProcess(tmp_path / "proxy", config_text(deployment.archive, deployment.fast,
                                                         archive_password=WRONG_TIER_PASSWORD, workers=False)).start()
    try:
        # Clients authenticate against the archive: with the proxy refused there, nobody can.
        client = connect(proxy, "app", APP_PASSWORD, source="shop")
        with pytest.raises(OperationFailure) as caught:
            client.shop.orders.find_one()
        assert caught.value.code == 6  # HostUnreachable: retryable, as a network error is
        client.close()
        assert "cannot authenticate as proxy@admin: Authentication failed." in proxy.log_text()
        assert WRONG_TIER_PASSWORD not in proxy.log_text()
    finally:
        proxy.stop()


# --------------------------------------------------------------------------------------
# Node.js driver and mongosh


def test_node_driver_through_the_proxy(deployment):
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "mongodb" / "package.json").exists():
        pytest.skip("node or tests/node/node_modules missing (scripts/install-deps.sh installs them)")
    base = "mongodb://%s@127.0.0.1:%d/shop?authSource=shop"
    completed = subprocess.run(
        [node, str(NODE_SCRIPT), base % ("app:" + APP_PASSWORD, deployment.proxy.port),
         base % ("app:wrong", deployment.proxy.port)],
        cwd=str(NODE_DIR), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=50)
    output = completed.stdout.decode("utf-8", "replace")
    assert completed.returncode == 0, output
    assert "ok authenticated as app" in output and "ok refused 18" in output
    assert "ok dropDatabase refused 13" in output


def test_mongosh_through_the_proxy(deployment, tmp_path):
    uri = "mongodb://127.0.0.1:%d/shop" % deployment.proxy.port
    script = ("db.orders.insertOne({_id: 'sh-1', createdAt: new Date()}); "
              "print(JSON.stringify({n: db.orders.countDocuments({_id: 'sh-1'}), "
              "user: db.runCommand({connectionStatus: 1}).authInfo.authenticatedUsers[0].user}))")
    code, output = run_mongosh([uri, "--quiet", "-u", "app", "-p", APP_PASSWORD, "--authenticationDatabase", "shop",
                                "--eval", script], tmp_path)
    assert code == 0, output
    assert '{"n":1,"user":"app"}' in output
    code, output = run_mongosh([uri, "--quiet", "-u", "app", "-p", "wrong", "--authenticationDatabase", "shop",
                                "--eval", "db.orders.findOne()"], tmp_path)
    assert code != 0
    assert "Authentication failed" in output


def test_the_reload_command_needs_set_parameter(deployment):
    """thermoclineReload changes the proxy's settings: setParameter's privilege on the
    cluster, which readWrite lacks and root has."""
    with connect(deployment.proxy, "app", APP_PASSWORD, "shop") as app:
        with pytest.raises(OperationFailure) as refused:
            app.admin.command("thermoclineReload")
        assert refused.value.code == 13
    with connect(deployment.proxy, "proxy", PROXY_PASSWORD) as root:
        assert root.admin.command("thermoclineReload")["changed"] == []
