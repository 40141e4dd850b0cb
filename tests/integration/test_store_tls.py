"""TLS on the store (--tlsMode, --tlsCertificateKeyFile, --tlsCAFile,
--tlsAllowConnectionsWithoutCertificates, as mongod's): the tests make their own
CA and certificates with the openssl command, then connect with pymongo
(tls=true&tlsCAFile=...), the Node.js driver and raw sockets. A plaintext
client to a requireTLS port is closed after its first bytes, and logged."""

import shutil
import socket
import ssl
import subprocess
import time

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from conftest import NODE_DIR, StoreProcess, op_msg, read_reply, wire_command
from tls_support import certificates  # noqa: F401 (a fixture)

AUTH_SCRIPT = NODE_DIR / "auth.mjs"


def start_tls_store(tmp_path, certificates, mode, extra=(), ca=True, allow_without_certificates=True):
    arguments = ["--tlsMode", mode, "--tlsCertificateKeyFile", str(certificates.server)]
    if ca:
        arguments += ["--tlsCAFile", str(certificates.ca)]
    if allow_without_certificates:
        arguments.append("--tlsAllowConnectionsWithoutCertificates")
    context = certificates.client_context(None if allow_without_certificates else certificates.client)
    process = StoreProcess(tmp_path, extra_args=arguments + list(extra),
                           ssl_context=context if mode == "requireTLS" else None)
    return process.start()


@pytest.fixture
def stores():
    started = []
    yield started
    for process in started:
        if process.is_alive():
            process.stop()


def closed_by_server(sock):
    """Reads (and drops: a TLS alert may come first) until the server closes;
    False if it is still open when the socket's timeout ends."""
    try:
        while True:
            if sock.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def tls_client(store, certificates, certificate=None, **options):
    query = "tls=true&tlsCAFile=%s" % certificates.ca
    if certificate is not None:
        query += "&tlsCertificateKeyFile=%s" % certificate
    return MongoClient("mongodb://localhost:%d/?directConnection=true&%s" % (store.port, query),
                       serverSelectionTimeoutMS=5000, connectTimeoutMS=5000, **options)


def test_pymongo_over_tls_and_plaintext_refused(tmp_path, certificates, stores):
    store = start_tls_store(tmp_path, certificates, "requireTLS")
    stores.append(store)
    client = tls_client(store, certificates)
    client.shop.orders.insert_many([{"_id": i, "blob": "x" * 50000} for i in range(40)])
    assert client.shop.orders.count_documents({}) == 40
    assert sum(len(d["blob"]) for d in client.shop.orders.find()) == 40 * 50000  # records across many reads
    status = client.admin.command("serverStatus")
    assert status["connections"]["current"] >= 1
    # Plaintext to a requireTLS port: closed after the first bytes, no reply.
    with socket.create_connection(("127.0.0.1", store.port), timeout=5) as sock:
        sock.sendall(op_msg({"hello": 1, "$db": "admin"}))
        assert read_reply(sock) is None
    assert "The server is configured to only allow SSL connections" in store.log_text()
    plain = MongoClient("mongodb://127.0.0.1:%d/?directConnection=true" % store.port,
                        serverSelectionTimeoutMS=1500)
    with pytest.raises(ServerSelectionTimeoutError):
        plain.admin.command("ping")
    plain.close()
    # The TLS client never noticed.
    assert client.shop.orders.find_one({"_id": 3})["_id"] == 3
    client.close()
    assert "TLS connection from" in store.log_text()


def test_prefer_tls_accepts_both(tmp_path, certificates, stores):
    store = start_tls_store(tmp_path, certificates, "preferTLS")
    stores.append(store)
    secure = tls_client(store, certificates)
    secure.app.c.insert_one({"via": "tls"})
    plain = MongoClient("mongodb://127.0.0.1:%d/?directConnection=true" % store.port,
                        serverSelectionTimeoutMS=5000)
    plain.app.c.insert_one({"via": "plain"})
    assert sorted(d["via"] for d in secure.app.c.find()) == ["plain", "tls"]
    # A first message whose length starts with 0x16 is still plaintext.
    document = {"ping": 1, "$db": "admin", "pad": ""}
    while len(op_msg(document)) % 256 != 0x16:
        document["pad"] += "x"
    with socket.create_connection(("127.0.0.1", store.port), timeout=5) as sock:
        sock.sendall(op_msg(document))
        reply = read_reply(sock)
        assert reply is not None and reply.document["ok"] == 1
    secure.close()
    plain.close()


def test_client_certificate_required_with_ca_file(tmp_path, certificates, stores):
    store = start_tls_store(tmp_path, certificates, "requireTLS", allow_without_certificates=False)
    stores.append(store)
    with_certificate = tls_client(store, certificates, certificate=certificates.client)
    with_certificate.app.c.insert_one({})
    with_certificate.close()
    without = tls_client(store, certificates)
    with pytest.raises(ServerSelectionTimeoutError):
        without.admin.command("ping")
    without.close()
    rogue = tls_client(store, certificates, certificate=certificates.mallory)
    with pytest.raises(ServerSelectionTimeoutError):
        rogue.admin.command("ping")
    rogue.close()
    log = store.log_text()
    assert "SSLHandshakeFailed" in log
    assert "CN=test-client" in log


def test_server_certificate_is_checked_by_clients(tmp_path, certificates, stores):
    store = start_tls_store(tmp_path, certificates, "requireTLS")
    stores.append(store)
    untrusting = ssl.create_default_context(cafile=str(certificates.rogue_ca))
    with socket.create_connection(("127.0.0.1", store.port), timeout=5) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusting.wrap_socket(sock, server_hostname="localhost")
    # The server keeps serving.
    reply = wire_command(store.port, {"ping": 1, "$db": "admin"}, ssl_context=certificates.client_context())
    assert reply["ok"] == 1


def test_tls_garbage_and_stalled_handshakes_close_only_themselves(tmp_path, certificates, stores):
    store = start_tls_store(tmp_path, certificates, "requireTLS", extra=["--receive-timeout", "1s"])
    stores.append(store)
    good = tls_client(store, certificates)
    good.admin.command("ping")
    # A TLS record header followed by garbage.
    with socket.create_connection(("127.0.0.1", store.port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x30\x01" + b"\xff" * 200)
        assert closed_by_server(sock)
    # A handshake that starts and never finishes: closed by the receive timeout.
    sock = socket.create_connection(("127.0.0.1", store.port), timeout=5)
    sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    started = time.monotonic()
    assert closed_by_server(sock)
    assert time.monotonic() - started < 4
    sock.close()
    good.admin.command("ping")
    good.close()
    assert "TLS handshake not completed within 1000 ms" in store.log_text()


def test_tls_with_authentication_and_the_node_driver(tmp_path, certificates, stores):
    store = start_tls_store(tmp_path, certificates, "requireTLS", extra=["--auth"])
    stores.append(store)
    reply = wire_command(store.port, {"createUser": "root", "pwd": "tls-root-pw", "roles": ["root"],
                                      "$db": "admin"}, ssl_context=certificates.client_context())
    assert reply["ok"] == 1
    client = tls_client(store, certificates, username="root", password="tls-root-pw")
    client.shop.c.insert_one({})
    client.close()
    bad = tls_client(store, certificates, username="root", password="nope")
    with pytest.raises(OperationFailure) as caught:
        bad.shop.c.find_one()
    assert caught.value.code == 18
    bad.close()
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "mongodb" / "package.json").exists():
        pytest.skip("node or tests/node/node_modules missing")
    uri = ("mongodb://root:%s@localhost:%d/shop?authSource=admin&directConnection=true&tls=true&tlsCAFile="
           + str(certificates.ca))
    completed = subprocess.run([node, str(AUTH_SCRIPT), uri % ("tls-root-pw", store.port),
                                uri % ("wrong", store.port)], cwd=str(NODE_DIR), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=50)
    output = completed.stdout.decode("utf-8", "replace")
    assert completed.returncode == 0, output
    assert "ok authenticated" in output and "ok refused 18" in output


def test_bad_tls_flags_are_refused(tmp_path, certificates):
    binary = StoreProcess(tmp_path).binary
    cases = [
        (["--tlsMode", "sometimes"], 2, "--tlsMode takes disabled, allowTLS, preferTLS or requireTLS"),
        (["--tlsMode", "requireTLS"], 2, "need tlsCertificateKeyFile"),
        (["--tlsMode", "requireTLS", "--tlsCertificateKeyFile", str(tmp_path / "missing.pem")], 1,
         "cannot read the certificate"),
        (["--tlsMode", "requireTLS", "--tlsCertificateKeyFile", str(certificates.server), "--tlsCAFile",
          str(tmp_path / "missing.pem")], 1, "cannot read tlsCAFile"),
    ]
    for arguments, status, message in cases:
        completed = subprocess.run([str(binary), "store", "--port", "0", "--dbpath", str(tmp_path / "db")]
                                   + arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        assert completed.returncode == status, (arguments, completed.stderr)
        assert message in completed.stderr.decode(), (arguments, completed.stderr)
