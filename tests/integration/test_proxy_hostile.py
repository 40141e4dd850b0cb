"""Hostile clients against the proxy while a good pymongo client runs a steady
CRUD workload through it on a tiered namespace (issue 7's load test): garbage,
truncated frames, oversized length headers, slowloris, clients that never read
their replies, and 10,000 connections with more refused past maxConnections.
Each time the good client's every operation succeeds, the proxy's resident
memory stays bounded, the bad clients are closed, and the proxy exits cleanly
at the end (no crash, no sanitizer report). The figures are printed (pytest -s)
for the README."""

import datetime
import os
import resource
import shutil
import socket
import struct
import time

import bson
import pytest

from conftest import ProxyProcess, StoreProcess, op_msg, read_reply, wait_until
from hostile_support import (MIB, GoodClientProbe, RssWatch, Slowloris, closed_by_server, good_client,
                             malformed_frames)
from tier_support import tier_config

CONNECTIONS = 10_000
FD_HEADROOM = 500  # the test's own files, the proxy's tier connections, the good client
RECEIVE_TIMEOUT_S = 2
SEND_TIMEOUT_S = 2


def raise_open_file_limit(wanted):
    """Raises this process's soft limit on open files (the proxy, started after,
    inherits it) and returns how many client connections fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted + FD_HEADROOM))
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    usable = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return min(wanted, usable - FD_HEADROOM)


@pytest.fixture(scope="module")
def tiers(tmp_path_factory):
    """Replica-set tiers for the module; the archive holds 6 MB of documents in
    an untiered namespace, for the clients that never read their replies."""
    directory = tmp_path_factory.mktemp("hostile-tiers")
    started = []
    try:
        archive = StoreProcess(directory / "archive", replica_set="rs0").start()
        started.append(archive)
        fast = StoreProcess(directory / "fast", replica_set="rs1").start()
        started.append(fast)
        with good_client(archive) as client:
            client.big.docs.insert_many([{"_id": i, "blob": "x" * MIB} for i in range(6)])
        yield archive, fast
    finally:
        for process in reversed(started):
            if process.is_alive():
                process.stop()
                shutil.rmtree(process.dbpath, ignore_errors=True)  # only once it stopped cleanly


@pytest.fixture
def deployment(tiers, tmp_path, request):
    """A fresh proxy per test (so each memory figure starts from a clean heap)
    with a tiered namespace, maxConnections at the connection count, and
    timeouts short enough for a test; stopped and checked after it (a crash or
    a sanitizer report fails the test)."""
    connections = raise_open_file_limit(CONNECTIONS)
    config = tier_config(*tiers, coverage="complete", max_age="1h",
                         top={"maxConnections": connections, "receiveTimeout": "%ds" % RECEIVE_TIMEOUT_S,
                              "sendTimeout": "%ds" % SEND_TIMEOUT_S})
    # AddressSanitizer holds freed memory in a quarantine of up to 256 MB, which
    # would swamp the figures; a small one keeps them about the proxy (every
    # check stays on).
    asan_options = os.environ.get("ASAN_OPTIONS")
    os.environ["ASAN_OPTIONS"] = (asan_options + ":" if asan_options else "") + "quarantine_size_mb=16"
    try:
        proxy = ProxyProcess(tmp_path / "proxy", config).start()
    finally:
        if asan_options is None:
            del os.environ["ASAN_OPTIONS"]
        else:
            os.environ["ASAN_OPTIONS"] = asan_options
    yield proxy, connections
    call_report = getattr(request.node, "report_call", None)
    if call_report is not None and call_report.failed:
        print("---- proxy log tail ----\n%s" % proxy.log_tail())
    proxy.stop()


def connection_status(proxy):
    with good_client(proxy) as client:
        return client.admin.command("thermoclineStatus")["connections"]


class TieredProbe(GoodClientProbe):
    """The good client's CRUD on the tiered namespace: insert, read back from
    the recent window (the fast tier), update, and now and then delete."""

    def prepare(self):
        self.orders = self.client.shop.orders

    def round_trip(self, number):
        now = datetime.datetime.utcnow()
        key = "probe-%d-%d" % (id(self), number)
        self.orders.insert_one({"_id": key, "createdAt": now, "n": number})
        recent = {"_id": key, "createdAt": {"$gte": now - datetime.timedelta(minutes=5)}}
        assert self.orders.find_one(recent)["n"] == number
        assert self.orders.update_one({"_id": key}, {"$inc": {"n": 1}}).modified_count == 1
        if number % 5 == 0:
            assert self.orders.delete_one({"_id": key}).deleted_count == 1


def probe(proxy):
    # A round trip is four operations; the bound only catches a proxy that
    # stalls its good clients behind the bad ones.
    return TieredProbe(proxy, slowest_allowed=5.0)


def connect(proxy, receive_buffer=None):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", proxy.port))
    return sock


def test_garbage_truncated_and_oversized_frames(deployment):
    proxy, _ = deployment
    good = probe(proxy)
    memory = RssWatch(proxy)
    frames = malformed_frames()
    outcomes = {"closed": 0, "answered": 0}
    for round_number in range(20):
        for name, frame, closes in frames:
            with connect(proxy) as sock:
                sock.sendall(frame)
                if closes:
                    assert closed_by_server(sock, 5), "%s: the connection stayed open" % name
                    outcomes["closed"] += 1
                else:
                    sock.settimeout(5)
                    reply = read_reply(sock)  # an error reply, or closed; raises if it hangs
                    outcomes["answered" if reply is not None else "closed"] += 1
                    if reply is not None and reply.document is not None:
                        assert reply.document.get("ok") == 0, (name, reply)
    # Frames cut short: the client goes away mid-message, or stays and stalls.
    body = struct.pack("<I", 0) + b"\x00" + bson.encode({"insert": "c", "documents": [{"x": "y" * 900}],
                                                          "$db": "cut"})
    frame = struct.pack("<iiii", 16 + len(body), 7, 0, 2013) + body
    for cut in range(1, len(frame), len(frame) // 50):
        with connect(proxy) as sock:
            sock.sendall(frame[:cut])
    stalled = []
    for cut in (3, 16, 40, len(frame) - 1):
        for _ in range(10):
            sock = connect(proxy)
            sock.sendall(frame[:cut])
            stalled.append(sock)
    started = time.monotonic()
    for sock in stalled:
        assert closed_by_server(sock, RECEIVE_TIMEOUT_S + 5)
        sock.close()
    waited = time.monotonic() - started
    good.finish()
    growth = memory.stop()
    print("garbage: %d frames closed, %d answered with an error; 40 stalled frames closed after %.1f s; "
          "RSS +%d KiB; good client %d round trips, slowest %.3f s"
          % (outcomes["closed"], outcomes["answered"], waited, growth, good.operations, good.slowest))
    assert growth < 100 * 1024, "RSS grew by %d KiB" % growth
    assert proxy.is_alive()
    assert "message not completed within %d ms (receive timeout" % (RECEIVE_TIMEOUT_S * 1000) in proxy.log_text()


def test_slowloris_and_clients_that_never_read(deployment):
    proxy, _ = deployment
    good = probe(proxy)
    memory = RssWatch(proxy)
    # Slowloris: each announces a 40 MB message, then sends a byte a second.
    slow = Slowloris(lambda: connect(proxy), 20, 4)
    # Never-readers: three pipelined 6 MB finds each, behind a 4 KiB receive buffer.
    stalled = []
    for _ in range(4):
        sock = connect(proxy, receive_buffer=4096)
        for request_id in range(1, 4):
            sock.sendall(op_msg({"find": "docs", "batchSize": 100, "$db": "big"}, request_id))
        stalled.append(sock)
    slow_closed, open_ones = slow.drip(1)
    for sock in slow.sockets + stalled:
        assert closed_by_server(sock, SEND_TIMEOUT_S + 10)
        sock.close()
    good.finish()
    growth = memory.stop()
    print("slowloris and never-readers: 20 slow clients closed after %.1f s, 4 never-readers closed; "
          "RSS +%d KiB at most; good client %d round trips, slowest %.3f s"
          % (slow_closed, growth, good.operations, good.slowest))
    assert not open_ones and slow_closed < RECEIVE_TIMEOUT_S + 8
    assert growth < 200 * 1024, "RSS grew by %d KiB" % growth
    log = proxy.log_text()
    assert "message not completed within %d ms (receive timeout" % (RECEIVE_TIMEOUT_S * 1000) in log
    assert "it read none of its reply in %d ms (send timeout" % (SEND_TIMEOUT_S * 1000) in log
    status = connection_status(proxy)
    assert status["timedOut"] >= 24 and status["queuedReplyBytes"] == 0, status


def test_ten_thousand_connections_and_more_refused(deployment):
    proxy, connections = deployment
    print("connections: %d (maxConnections), open-file limit %d" % (connections,
                                                                    resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    good = probe(proxy)
    memory = RssWatch(proxy)
    started = time.monotonic()
    flood = []
    for index in range(connections):
        sock = connect(proxy)
        if index % 4 == 0:
            sock.sendall(op_msg({"hello": 1, "$db": "admin"}))  # a handshake, then silence
        flood.append(sock)
    opened = time.monotonic() - started
    # The good client holds connections too, so the flood itself reaches
    # maxConnections; these are past it and must be closed at once.
    extra = [connect(proxy) for _ in range(200)]
    refused = sum(1 for sock in extra if closed_by_server(sock, 5))
    time.sleep(1)
    during = memory.peak_growth_kib
    # Of the flood, only as many as the good client's connections went past the limit.
    closed_in_flood = 0
    for sock in flood:
        sock.setblocking(False)
        try:
            data = sock.recv(65536)
            closed_in_flood += data == b""
        except BlockingIOError:
            pass
        except ConnectionResetError:
            closed_in_flood += 1
    for sock in flood + extra:
        sock.close()
    # The proxy lets them all go: the good client's and the status client's remain.
    with good_client(proxy) as status_client:
        def current():
            return status_client.admin.command("thermoclineStatus")["connections"]["current"]
        assert wait_until(lambda: current() <= 6, 10, 0.2), current()
    good.finish()
    growth = memory.stop()
    print("flood: %d connections opened in %.1f s (%d closed at the limit), %d of 200 past maxConnections "
          "refused; RSS +%d KiB with them open, +%d KiB at most; good client %d round trips, slowest %.3f s"
          % (connections, opened, closed_in_flood, refused, during, growth, good.operations, good.slowest))
    assert refused == 200
    assert closed_in_flood <= 10
    # Per connection open: about 1 KiB in a release build, 3 KiB under ASan.
    # As they all close at once, each first gets a 64 KiB read buffer (for the
    # read that returns EOF): untouched in a release build (+30 MB at most for
    # the 10,000), filled and shadowed by ASan (up to 20 KiB each).
    assert during < connections * 8, "RSS grew by %d KiB with %d connections open" % (during, connections)
    assert growth < connections * 32, "RSS grew by %d KiB at most" % growth
    assert "connection refused because too many open connections" in proxy.log_text()
    # Once they are gone, new clients are served again.
    after = TieredProbe(proxy)
    time.sleep(0.5)
    after.finish()
