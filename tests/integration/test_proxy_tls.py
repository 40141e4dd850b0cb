"""TLS through the proxy: its front door (tlsMode, tlsCertificateKeyFile,
tlsCAFile in its YAML) and its connections to both tiers (tls=true, tlsCAFile,
tlsCertificateKeyFile... in the tier URIs, for the proxy's own pool and the
tier workers' libmongoc clients alike). The tests make their own CA
(tls_support.py); the stores run with --tlsMode requireTLS and ask for client
certificates. pymongo, the Node.js driver and mongosh connect over TLS; a
plaintext client is refused; a tier whose certificate fails the check gives the
client a retryable error and says why in the log and thermoclineStatus."""

import datetime
import json
import os
import shutil
import socket
import subprocess
import time
import types

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from conftest import (NODE_DIR, ProxyProcess, StoreProcess, find_free_port, op_msg, read_reply, wait_until,
                      wire_command)
from tier_support import tier_config
from tls_support import certificates  # noqa: F401 (a fixture)

NS = "shop.orders"
MONGOSH = NODE_DIR / "node_modules" / ".bin" / "mongosh"


def tls_store(work_dir, certificates, replica_set=None, certificate=None):
    """A requireTLS store that wants a client certificate signed by the CA."""
    arguments = ["--tlsMode", "requireTLS", "--tlsCertificateKeyFile", str(certificate or certificates.server),
                 "--tlsCAFile", str(certificates.ca)]
    context = certificates.client_context(certificates.client)
    context.check_hostname = False  # the readiness ping; what is checked here is the proxy's check
    return StoreProcess(work_dir, extra_args=arguments, replica_set=replica_set, ssl_context=context).start()


def tier_uri(store, certificates, host="127.0.0.1", **options):
    query = {"tls": "true", "tlsCAFile": certificates.ca, "tlsCertificateKeyFile": certificates.client}
    query.update(options)
    return "mongodb://%s:%d/?%s" % (host, store.port, "&".join("%s=%s" % item for item in query.items()))


def front_door(certificates):
    return {"tlsMode": "requireTLS", "tlsCertificateKeyFile": certificates.server, "tlsCAFile": certificates.ca,
            "tlsAllowConnectionsWithoutCertificates": "true"}


def start_proxy(work_dir, certificates, archive_uri, fast_uri, top=None):
    """A proxy for NS; top: more top-level keys (a TLS front door with front_door())."""
    top = top or {}
    text = tier_config(types.SimpleNamespace(uri=archive_uri), types.SimpleNamespace(uri=fast_uri),
                       coverage="complete", max_age="1h", top=top)
    context = certificates.client_context() if top.get("tlsMode") == "requireTLS" else None
    return ProxyProcess(work_dir, text, ssl_context=context).start()


def proxy_client(proxy, certificates, certificate=None, **options):
    uri = "mongodb://localhost:%d/?tls=true&tlsCAFile=%s" % (proxy.port, certificates.ca)
    if certificate is not None:
        uri += "&tlsCertificateKeyFile=%s" % certificate
    settings = dict(serverSelectionTimeoutMS=5000, connectTimeoutMS=5000, socketTimeoutMS=30000)
    settings.update(options)
    return MongoClient(uri, **settings)


def stop_all(processes):
    """Stops and checks each process; a store's data goes once it stopped cleanly."""
    for process in reversed(processes):
        if process.is_alive():
            process.stop()
            shutil.rmtree(process.dbpath, ignore_errors=True)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, certificates):
    """Two requireTLS replica-set tiers and a requireTLS proxy with its workers,
    the archive named by IP address and the fast tier by host name."""
    directory = tmp_path_factory.mktemp("tls-deployment")
    started = []
    try:
        archive = tls_store(directory / "archive", certificates, replica_set="rs0")
        started.append(archive)
        fast = tls_store(directory / "fast", certificates, replica_set="rs1")
        started.append(fast)
        proxy = start_proxy(directory / "proxy", certificates, tier_uri(archive, certificates),
                            tier_uri(fast, certificates, host="localhost"), top=front_door(certificates))
        started.append(proxy)
        yield types.SimpleNamespace(archive=archive, fast=fast, proxy=proxy)
    finally:
        stop_all(started)


def feeder_caught_up(client):
    item = client.admin.command("thermoclineStatus")["namespaces"][NS]
    return item["feeder"]["appliedTime"] >= item["lastFastWriteTime"]


def test_crud_through_a_tls_proxy_to_tls_tiers(deployment, certificates):
    client = proxy_client(deployment.proxy, certificates)
    orders = client.shop.orders
    now = datetime.datetime.utcnow().replace(microsecond=0)
    orders.insert_many([{"_id": i, "createdAt": now - datetime.timedelta(minutes=i), "total": i}
                        for i in range(20)])
    orders.update_one({"_id": 4}, {"$set": {"total": 400}})
    orders.delete_one({"_id": 5})
    assert orders.count_documents({}) == 19
    assert orders.find_one({"_id": 4})["total"] == 400
    assert [d["_id"] for d in orders.find({"total": {"$gte": 18}}).sort("_id", 1)] == [4, 18, 19]
    # The feeder (libmongoc, over TLS with a client certificate) copies the
    # writes to the archive.
    assert wait_until(lambda: feeder_caught_up(client), 20, 0.1), client.admin.command("thermoclineStatus")
    with MongoClient(tier_uri(deployment.archive, certificates), serverSelectionTimeoutMS=5000) as archive:
        copied = {d["_id"]: d["total"] for d in archive.shop.orders.find()}
    assert len(copied) == 19 and copied[4] == 400 and 5 not in copied
    backends = client.admin.command("thermoclineStatus")["backends"]
    for tier in ("archive", "fast"):
        assert backends[tier]["tls"] is True and backends[tier]["reachable"] is True, backends
        assert "lastError" not in backends[tier], backends
    client.close()
    assert "tlsMode requireTLS" in deployment.proxy.log_text()


def test_plaintext_and_untrusted_clients_are_refused(deployment, certificates):
    proxy = deployment.proxy
    good = proxy_client(proxy, certificates)
    good.admin.command("ping")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(op_msg({"hello": 1, "$db": "admin"}))
        assert read_reply(sock) is None
    assert "The server is configured to only allow SSL connections" in proxy.log_text()
    plain = MongoClient("mongodb://127.0.0.1:%d/" % proxy.port, serverSelectionTimeoutMS=1500)
    with pytest.raises(ServerSelectionTimeoutError):
        plain.admin.command("ping")
    plain.close()
    # tlsCAFile: a certificate the proxy's CA did not sign is refused.
    rogue = proxy_client(proxy, certificates, certificate=certificates.mallory, serverSelectionTimeoutMS=1500)
    with pytest.raises(ServerSelectionTimeoutError):
        rogue.admin.command("ping")
    rogue.close()
    signed = proxy_client(proxy, certificates, certificate=certificates.client)
    signed.admin.command("ping")
    signed.close()
    # The TLS client never noticed.
    assert good.admin.command("ping")["ok"] == 1
    good.close()
    log = proxy.log_text()
    assert "SSLHandshakeFailed" in log and "CN=test-client" in log


def test_node_driver_and_mongosh_over_tls(deployment, certificates, tmp_path):
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "mongodb" / "package.json").exists() \
            or not MONGOSH.exists():
        pytest.skip("node, the driver or mongosh is missing (scripts/install-deps.sh installs them)")
    uri = "mongodb://localhost:%d/?tls=true&tlsCAFile=%s" % (deployment.proxy.port, certificates.ca)
    completed = subprocess.run([node, str(NODE_DIR / "roundtrip.mjs"), uri, "orders"], cwd=str(NODE_DIR),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=40)
    output = completed.stdout.decode("utf-8", "replace")
    assert completed.returncode == 0, output
    assert json.loads(output.strip().splitlines()[-1]) == {"documents": [[1, 1], [2, 20]], "msg": "isdbgrid"}

    environment = dict(os.environ, HOME=str(tmp_path), CI="true", MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING="1")
    script = ("db.shell.insertOne({_id: 1, word: 'tls'});"
              "print(JSON.stringify({word: db.shell.findOne({_id: 1}).word, "
              "ok: db.adminCommand({ping: 1}).ok}));")
    completed = subprocess.run([str(MONGOSH), "mongodb://localhost:%d/mongosh_tls" % deployment.proxy.port,
                                "--tls", "--tlsCAFile", str(certificates.ca), "--quiet", "--eval", script],
                               env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=50)
    stdout = completed.stdout.decode("utf-8", "replace")
    assert completed.returncode == 0, stdout + completed.stderr.decode("utf-8", "replace")
    assert json.loads(stdout.strip().splitlines()[-1]) == {"word": "tls", "ok": 1}


def expect_unreachable(call, reason):
    """call fails at once with HostUnreachable, retryable, naming reason."""
    started = time.monotonic()
    with pytest.raises(OperationFailure) as caught:
        call()
    assert caught.value.code == 6, caught.value.details
    assert reason in str(caught.value), caught.value.details
    assert time.monotonic() - started < 10
    return caught.value


def test_tier_certificates_are_checked(tmp_path, certificates):
    """A tier signed by a CA the URI does not trust, and one whose certificate
    names another host: the client gets HostUnreachable (retryable) and the
    reason, never a hang; tlsAllowInvalidCertificates and
    tlsAllowInvalidHostnames let them through."""
    elsewhere = certificates.issue("elsewhere", "/CN=db.example.com", "DNS:db.example.com")
    started = []
    try:
        archive = tls_store(tmp_path / "archive", certificates)
        started.append(archive)
        fast = tls_store(tmp_path / "fast", certificates, certificate=elsewhere)
        started.append(fast)
        # failoverWait short: a tier that fails its certificate check is retried until it.
        workers_off = {"feederEnabled": "false", "evictorEnabled": "false", "warmerEnabled": "false",
                       "failoverWait": "1s"}
        proxy = start_proxy(tmp_path / "strict", certificates,
                            tier_uri(archive, certificates, tlsCAFile=certificates.rogue_ca),
                            tier_uri(fast, certificates, host="localhost"), top=dict(workers_off))
        started.append(proxy)
        client = MongoClient(proxy.uri, serverSelectionTimeoutMS=5000)
        # Untiered namespaces go to the archive, recent reads of a tiered one to the fast tier.
        failed_write = expect_unreachable(lambda: client.other.c.insert_one({}), "certificate verify failed")
        assert failed_write.has_error_label("RetryableWriteError")
        recent = {"createdAt": {"$gte": datetime.datetime.utcnow() - datetime.timedelta(minutes=1)}}
        expect_unreachable(lambda: client.shop.orders.find_one(recent), "hostname mismatch")
        reply = wire_command(proxy.port, {"find": "c", "$db": "other"})
        assert reply["ok"] == 0 and reply["codeName"] == "HostUnreachable", reply
        backends = client.admin.command("thermoclineStatus")["backends"]
        assert "certificate verify failed" in backends["archive"]["lastError"], backends
        assert "hostname mismatch" in backends["fast"]["lastError"], backends
        assert backends["archive"]["reachable"] is False
        client.close()
        proxy.stop()
        log = proxy.log_text()
        assert "archive tier 127.0.0.1:%d unreachable: SSL handshake failed: certificate verify failed" \
            % archive.port in log, log[-3000:]
        assert "fast tier localhost:%d unreachable: SSL handshake failed" % fast.port in log

        proxy = start_proxy(tmp_path / "lenient", certificates,
                            tier_uri(archive, certificates, tlsCAFile=certificates.rogue_ca,
                                     tlsAllowInvalidCertificates="true"),
                            tier_uri(fast, certificates, host="localhost", tlsAllowInvalidHostnames="true"),
                            top=dict(workers_off))
        started.append(proxy)
        with MongoClient(proxy.uri, serverSelectionTimeoutMS=5000) as client:
            client.other.c.insert_one({"_id": 1})
            assert client.other.c.find_one()["_id"] == 1
            client.shop.orders.insert_one({"_id": 1, "createdAt": datetime.datetime.utcnow()})
            assert client.shop.orders.find_one(recent)["_id"] == 1
            backends = client.admin.command("thermoclineStatus")["backends"]
        assert backends["archive"]["reachable"] and backends["fast"]["reachable"], backends
    finally:
        stop_all(started)


def test_bad_tier_tls_files_stop_the_proxy_at_start(tmp_path, certificates):
    binary = StoreProcess(tmp_path).binary
    missing = tmp_path / "missing.pem"
    cases = [("tlsCAFile", missing, "archive tier URI: cannot read tlsCAFile %s" % missing),
             ("tlsCertificateKeyFile", certificates.ca,
              "archive tier URI: cannot read the private key in tlsCertificateKeyFile %s" % certificates.ca)]
    for key, value, message in cases:
        config = tmp_path / "proxy.yaml"
        config.write_text("listen: 127.0.0.1:%d\narchive: mongodb://127.0.0.1:1/?tls=true&%s=%s\n"
                          "fast: mongodb://127.0.0.1:2/\n" % (find_free_port(), key, value))
        completed = subprocess.run([str(binary), "proxy", "--config", str(config)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=30)
        assert completed.returncode == 1, completed.stderr
        assert message in completed.stderr.decode(), completed.stderr
