"""Clients that hold resources without using them, against the store's limits
(--receive-timeout, --send-timeout, --idle-timeout, --max-queued-replies): a
slowloris sending a byte at a time, a client that never reads its replies,
thousands of idle connections. Each time a good client keeps working, the
server's memory stays bounded, and the bad clients are closed and logged."""

import socket
import time

import pytest

from conftest import StoreProcess, op_msg, read_reply
from hostile_support import MIB, GoodClientProbe, Slowloris, closed_by_server, good_client


@pytest.fixture
def start_store(tmp_path, request):
    """start_store(*flags): a store with those limit flags, stopped (and its log
    shown on failure) after the test."""
    started = []

    def start(*flags):
        process = StoreProcess(tmp_path / ("store%d" % len(started)), extra_args=list(flags))
        started.append(process)
        return process.start()

    yield start
    call_report = getattr(request.node, "report_call", None)
    for process in started:
        if call_report is not None and call_report.failed:
            print("---- store log tail (%s) ----\n%s" % (process.log_path, process.log_tail()))
        process.stop()


def server_status(store):
    client = good_client(store)
    try:
        return client.admin.command("serverStatus")
    finally:
        client.close()


def test_slowloris_is_closed_while_a_good_client_works(start_store):
    limited_store = start_store("--receive-timeout", "2s")
    probe = GoodClientProbe(limited_store)
    baseline = limited_store.rss_kib()
    grown = 0

    def check_memory():
        nonlocal grown
        grown = limited_store.rss_kib() - baseline
        assert grown < 100 * 1024, "RSS grew by %d KiB with 20 slow clients" % grown

    # Twenty clients each send a byte every half second.
    slow = Slowloris(lambda: socket.create_connection(("127.0.0.1", limited_store.port), timeout=5), 20, 8)
    elapsed, _ = slow.drip(0.5, after_each_round=check_memory)
    print("slowloris: RSS grew by at most %d KiB" % grown)
    for sock in slow.sockets:
        assert closed_by_server(sock, 5)
        sock.close()
    assert elapsed < 10, "slow clients were still open after %.1f s" % elapsed
    probe.finish()
    log = limited_store.log_text()
    assert "message not completed within 2000 ms (receive timeout" in log
    assert server_status(limited_store)["thermocline"]["network"]["timedOut"] >= 20


def test_client_that_never_reads_is_closed(start_store):
    limited_store = start_store("--send-timeout", "2s")
    setup = good_client(limited_store)
    blob = "x" * MIB
    setup.big.docs.insert_many([{"_id": i, "blob": blob} for i in range(6)])
    setup.close()
    probe = GoodClientProbe(limited_store)
    baseline = limited_store.rss_kib()
    # Each asks for 6 MB and reads nothing; a small receive buffer makes the
    # server's writes stall at once.
    stalled = []
    for _ in range(4):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", limited_store.port))
        for request_id in range(1, 4):  # pipelined: only one runs while the reply waits
            sock.sendall(op_msg({"find": "docs", "batchSize": 100, "$db": "big"}, request_id))
        stalled.append(sock)
    time.sleep(1)
    during = limited_store.rss_kib() - baseline
    print("never-reading clients: RSS grew by %d KiB" % during)
    assert during < 200 * 1024, "RSS grew by %d KiB with 4 stalled readers" % during
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        network = server_status(limited_store)["thermocline"]["network"]
        if network["timedOut"] >= 4:
            break
        time.sleep(0.5)
    assert network["timedOut"] >= 4, network
    assert network["queuedReplyBytes"] == 0
    for sock in stalled:
        sock.close()
    probe.finish()
    assert "it read none of its reply in 2000 ms (send timeout" in limited_store.log_text()


def test_queued_replies_are_bounded_server_wide(start_store):
    limited_store = start_store("--max-queued-replies", "16MB", "--send-timeout", "30s")
    setup = good_client(limited_store)
    blob = "y" * MIB
    setup.big.docs.insert_many([{"_id": i, "blob": blob} for i in range(6)])
    setup.close()
    probe = GoodClientProbe(limited_store)
    stalled = []
    for _ in range(8):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", limited_store.port))
        sock.sendall(op_msg({"find": "docs", "batchSize": 100, "$db": "big"}))
        stalled.append(sock)
        time.sleep(0.2)
    # About 6 MB each, 16 MB allowed: the third and later do not fit and are
    # closed now, not 30 s later.
    closed = sum(1 for sock in stalled if closed_by_server(sock, 3))
    assert closed >= 5, "only %d of 8 non-reading clients were closed" % closed
    network = server_status(limited_store)["thermocline"]["network"]
    assert network["queuedReplyBytes"] <= 16 * MIB
    for sock in stalled:
        sock.close()
    probe.finish()
    assert "replies waiting for slow clients would take" in limited_store.log_text()


def test_two_thousand_idle_connections(start_store):
    limited_store = start_store()
    probe = GoodClientProbe(limited_store)
    baseline = limited_store.rss_kib()
    idle = []
    for index in range(2000):
        sock = socket.create_connection(("127.0.0.1", limited_store.port), timeout=10)
        if index % 2 == 0:
            # Half of them did a handshake first, then went quiet.
            sock.sendall(op_msg({"hello": 1, "$db": "admin"}))
        idle.append(sock)
    time.sleep(1)
    status = server_status(limited_store)
    assert status["connections"]["current"] >= 2000
    grown = limited_store.rss_kib() - baseline
    print("2000 idle connections: RSS grew by %d KiB; slowest good round trip %.3f s" % (grown, probe.slowest))
    assert grown < 150 * 1024, "2000 idle connections took %d KiB" % grown
    for sock in idle:
        sock.close()
    probe.finish()
    deadline = time.monotonic() + 10
    while server_status(limited_store)["connections"]["current"] > 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server_status(limited_store)["connections"]["current"] <= 10  # only the status clients' own


def test_idle_timeout_closes_silent_connections(start_store):
    limited_store = start_store("--idle-timeout", "1s")
    silent = [socket.create_connection(("127.0.0.1", limited_store.port), timeout=5) for _ in range(200)]
    started = time.monotonic()
    for sock in silent:
        assert closed_by_server(sock, 5)
        sock.close()
    assert time.monotonic() - started < 5
    # A client that talks more often than the timeout stays.
    talkative = socket.create_connection(("127.0.0.1", limited_store.port), timeout=5)
    for request_id in range(1, 6):
        talkative.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id))
        reply = read_reply(talkative)
        assert reply is not None and reply.document["ok"] == 1
        time.sleep(0.5)
    talkative.close()
    assert "idle for 1000 ms (idle timeout)" in limited_store.log_text()


def test_limit_flags_are_checked(tmp_path):
    import subprocess
    binary = StoreProcess(tmp_path).binary
    for arguments, message in ((["--idle-timeout", "10"], "--idle-timeout"),
                               (["--receive-timeout", "0s"], "--receive-timeout must be at least 1ms"),
                               (["--send-timeout", "soon"], "--send-timeout"),
                               (["--max-queued-replies", "1KB"], "--max-queued-replies must be at least 1MB")):
        completed = subprocess.run([str(binary), "store", "--dbpath", str(tmp_path / "db")] + arguments,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        assert completed.returncode == 2, (arguments, completed.stderr)
        assert message in completed.stderr.decode(), (arguments, completed.stderr)
