"""Helpers for the tests of clients that misbehave (test_store_limits.py
against the store, test_proxy_hostile.py against the proxy): a well-behaved
client that keeps working in a thread and must never fail, a wait for the
server to close a socket, a watch on a process's resident memory, slowloris
clients, and the malformed frames hostile clients send."""

import socket
import struct
import threading
import time

import bson
from pymongo import MongoClient

MIB = 1024 * 1024


def good_client(process):
    return MongoClient(process.uri, serverSelectionTimeoutMS=10000, socketTimeoutMS=20000)


class GoodClientProbe:
    """A well-behaved client that keeps writing and reading in a thread and
    records its slowest round trip. Subclasses change round_trip()."""

    def __init__(self, process, slowest_allowed=2.0):
        self.client = good_client(process)
        self.slowest_allowed = slowest_allowed
        self.prepare()
        self.stop = threading.Event()
        self.operations = 0
        self.slowest = 0.0
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        # Its connections open before any attack starts: a flood that reached
        # maxConnections first would refuse them, which is the limit working.
        deadline = time.monotonic() + 30
        while self.operations == 0 and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def prepare(self):
        self.client.probe.c.drop()

    def round_trip(self, number):
        self.client.probe.c.insert_one({"n": number})
        assert self.client.probe.c.find_one({"n": number}) is not None

    def run(self):
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                self.round_trip(self.operations)
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.operations += 1
                time.sleep(0.02)
        except Exception as error:  # reported by finish()
            self.error = error

    def finish(self):
        self.stop.set()
        self.thread.join(20)
        self.client.close()
        assert self.error is None, "the good client failed: %r" % (self.error,)
        assert self.operations > 10, "the good client did only %d operations" % self.operations
        assert self.slowest < self.slowest_allowed, \
            "the good client waited %.2f s for one round trip" % self.slowest


def closed_by_server(sock, timeout):
    """True once the server closed sock (EOF or reset) within timeout seconds;
    whatever it sent before is read and dropped."""
    sock.settimeout(timeout)
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class RssWatch:
    """Samples a process's resident memory (StoreProcess.rss_kib, from /proc)
    in a thread until stopped; peak_growth_kib is the largest rise over the
    figure at start."""

    def __init__(self, process, interval=0.1):
        self.process = process
        self.baseline_kib = process.rss_kib()
        self.peak_kib = self.baseline_kib
        self.interval = interval
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_event.wait(self.interval):
            try:
                self.peak_kib = max(self.peak_kib, self.process.rss_kib())
            except (OSError, RuntimeError):
                return  # the process is gone: the test's own checks say why

    def stop(self):
        self.stop_event.set()
        self.thread.join(5)
        return self.peak_growth_kib

    @property
    def peak_growth_kib(self):
        return self.peak_kib - self.baseline_kib


def frame_header(length, opcode=2013, request_id=1):
    return struct.pack("<iiii", length, request_id, 0, opcode)


class Slowloris:
    """count clients (each from connect()) that announce a 40 MB message, an
    OP_MSG insert, and send its first first_bytes bytes; drip() then sends the
    rest a byte at a time. They would pin count x 40 MB if a server's buffers
    followed the announced size."""

    BODY = struct.pack("<I", 0) + b"\x00" + bson.encode({"insert": "c", "$db": "slow"})

    def __init__(self, connect, count, first_bytes):
        self.sockets = []
        for _ in range(count):
            sock = connect()
            sock.sendall(frame_header(40 * MIB) + self.BODY[:first_bytes])
            self.sockets.append(sock)
        self.sent = first_bytes

    def drip(self, interval, limit=15, after_each_round=None):
        """Every interval seconds, sends each client's next byte (an "x" past the
        message's end) and then runs after_each_round(), until the server has
        closed every client or limit seconds have passed. Returns the seconds
        that took and the clients still open."""
        started = time.monotonic()
        open_ones = list(self.sockets)
        while open_ones and time.monotonic() - started < limit:
            time.sleep(interval)
            for sock in list(open_ones):
                try:
                    sock.sendall(self.BODY[self.sent:self.sent + 1] or b"x")
                except (BrokenPipeError, ConnectionResetError):
                    open_ones.remove(sock)
            self.sent += 1
            if after_each_round is not None:
                after_each_round()
        return time.monotonic() - started, open_ones


def malformed_frames():
    """(name, bytes, closes) for frames a server must survive; closes: the
    framing alone is bad, so the connection must be closed rather than answered."""
    body = struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    return [
        ("random bytes", bytes(range(256)) * 16, True),
        ("length below the header", frame_header(8) + b"\x00" * 64, True),
        ("negative length", frame_header(-5) + b"\x00" * 64, True),
        ("length past 48 MB", frame_header(48_000_001) + body, True),
        ("length 2 GiB", frame_header(0x7FFFFFFF) + body, True),
        ("unknown opcode", frame_header(16 + len(body), opcode=9999) + body, False),
        ("bad BSON in OP_MSG", frame_header(16 + 5 + 12) + struct.pack("<I", 0) + b"\x00" +
         struct.pack("<i", 12) + b"\x02x\x00\xff\xff\xff\x7f\x00", False),
        ("OP_MSG section of an unknown kind", frame_header(16 + 5 + 4) + struct.pack("<I", 0) + b"\x07abcd", False),
        ("OP_QUERY cut inside its name", frame_header(16 + 8, opcode=2004) + b"\x00\x00\x00\x00adm\x00", False),
    ]
