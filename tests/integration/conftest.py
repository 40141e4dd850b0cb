"""Fixtures for thermocline's integration tests: each test gets its own
`thermocline store` on a free loopback port and a fresh dbpath, driven by real
MongoDB clients; a server that crashes, exits non-zero or trips a sanitizer
fails the test that ran it.

Also holds the small raw-wire helpers (OP_MSG framing by hand) that the tests
import with `from conftest import ...`.
"""

import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import bson
import pytest
from pymongo import MongoClient

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = REPO_ROOT / "tests" / "node"

START_TIMEOUT_SECONDS = 20
STOP_TIMEOUT_SECONDS = 10
TEST_TIMEOUT_SECONDS = 60

# Markers that AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer
# print; any of them in the server's log fails the test.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer")

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013


def thermocline_binary():
    """The server under test: $THERMOCLINE_BIN (relative paths taken from the
    repository root) or the sanitized build."""
    configured = os.environ.get("THERMOCLINE_BIN", "build/asan/thermocline")
    path = Path(configured)
    if not path.is_absolute():
        path = REPO_ROOT / path
    return path


def find_free_port():
    """A loopback port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout, interval=0.05):
    """Polls predicate until it is truthy; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def build_c_client(tmp_path_factory, source):
    """Compiles a libmongoc client of tests/integration/clients/ with cc and
    pkg-config, as a user would build it, with the project's warnings and
    sanitizers; returns the binary. A missing compiler or libmongoc-dev fails the
    test (`make deps` installs both)."""
    compiler = os.environ.get("CC", "cc")
    for tool in (compiler, "pkg-config"):
        if shutil.which(tool) is None:
            pytest.fail("%s not found: run `make deps`" % tool, pytrace=False)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libmongoc-1.0"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if flags.returncode != 0:
        pytest.fail("pkg-config libmongoc-1.0: %s" % flags.stdout.decode(), pytrace=False)
    binary = tmp_path_factory.mktemp(source.stem) / source.stem
    command = ([compiler, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-Wshadow",
                "-Wstrict-prototypes", "-g", "-O1", "-fno-omit-frame-pointer",
                "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                "-o", str(binary), str(source)] + flags.stdout.decode().split())
    built = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if built.returncode != 0:
        pytest.fail("building %s failed:\n%s" % (source.name, built.stdout.decode()), pytrace=False)
    return binary


# ---------------------------------------------------------------------------
# Raw wire protocol: enough to build frames by hand and read one reply.
# ---------------------------------------------------------------------------

def message_header(length, request_id, response_to, opcode):
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def op_msg(document, request_id=1, flags=0):
    """One OP_MSG frame with a single kind-0 section holding document."""
    body = struct.pack("<I", flags) + b"\x00" + bson.encode(document)
    return message_header(16 + len(body), request_id, 0, OP_MSG) + body


def op_msg_raw(payload, request_id=1, flags=0):
    """An OP_MSG frame around arbitrary section bytes (for malformed input)."""
    body = struct.pack("<I", flags) + payload
    return message_header(16 + len(body), request_id, 0, OP_MSG) + body


def recv_exactly(sock, count):
    """count bytes, or fewer if the peer closed first."""
    chunks = []
    remaining = count
    while remaining > 0:
        chunk = sock.recv(min(remaining, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class WireReply:
    """One reply frame as received."""

    def __init__(self, request_id, response_to, opcode, document, raw):
        self.request_id = request_id
        self.response_to = response_to
        self.opcode = opcode
        self.document = document
        self.raw = raw

    def __repr__(self):
        return "WireReply(opcode=%d, response_to=%d, document=%r)" % (
            self.opcode, self.response_to, self.document)


def read_reply(sock):
    """Reads one reply frame. Returns None if the server closed the connection
    (EOF or reset) before a whole frame arrived; raises socket.timeout if it
    neither answered nor closed in time."""
    try:
        header = recv_exactly(sock, 16)
        if len(header) < 16:
            return None
        length, request_id, response_to, opcode = struct.unpack("<iiii", header)
        if length < 16 or length > 48_000_000:
            raise AssertionError("server sent a frame with length %d" % length)
        rest = recv_exactly(sock, length - 16)
        if len(rest) < length - 16:
            return None
    except (ConnectionResetError, BrokenPipeError):
        return None
    document = None
    if opcode == OP_MSG:
        assert rest[4] == 0, "reply's first section is not a kind-0 body"
        (doc_length,) = struct.unpack_from("<i", rest, 5)
        document = bson.decode(rest[5:5 + doc_length])
    elif opcode == OP_REPLY:
        # responseFlags, cursorID, startingFrom, numberReturned, then documents.
        (doc_length,) = struct.unpack_from("<i", rest, 20)
        document = bson.decode(rest[20:20 + doc_length])
    return WireReply(request_id, response_to, opcode, document, header + rest)


def wire_command(port, document, timeout=10.0, request_id=1, ssl_context=None):
    """Sends one OP_MSG command on a new connection (over TLS with ssl_context,
    an ssl.SSLContext) and returns the reply document (raises if the server
    closed without answering)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as plain:
        sock = ssl_context.wrap_socket(plain, server_hostname="localhost") if ssl_context else plain
        sock.sendall(op_msg(document, request_id))
        reply = read_reply(sock)
    if reply is None:
        raise ConnectionError("server closed the connection without a reply")
    return reply.document


# ---------------------------------------------------------------------------
# The server process.
# ---------------------------------------------------------------------------

class StoreProcess:
    """One `thermocline store`: started on a free port with its own dbpath,
    stderr captured to a file per run, stoppable with SIGTERM (checked) or
    killable with SIGKILL and restartable on the same dbpath and port. With
    replica_set, a one-member replica set (--replSet): an oplog, change streams,
    operationTime in replies."""

    def __init__(self, work_dir, port=None, extra_args=(), binary=None, replica_set=None,
                 ssl_context=None):
        """ssl_context: an ssl.SSLContext to check readiness with, for a store
        started with --tlsMode requireTLS."""
        self.work_dir = Path(work_dir)
        self.ssl_context = ssl_context
        self.dbpath = self.work_dir / "db"
        self.dbpath.mkdir(parents=True, exist_ok=True)
        self.binary = Path(binary) if binary else thermocline_binary()
        self.port = port or find_free_port()
        self.extra_args = list(extra_args)
        if replica_set:
            self.extra_args += ["--replSet", replica_set]
        self.process = None
        self.run_count = 0
        self.log_paths = []
        self._log_file = None

    # -- addresses ---------------------------------------------------------
    @property
    def uri(self):
        return "mongodb://127.0.0.1:%d/?directConnection=true" % self.port

    def uri_for(self, database):
        return "mongodb://127.0.0.1:%d/%s?directConnection=true" % (self.port, database)

    @property
    def pid(self):
        return self.process.pid if self.process else None

    @property
    def log_path(self):
        return self.log_paths[-1] if self.log_paths else None

    # -- lifecycle ---------------------------------------------------------
    def command_line(self):
        return [str(self.binary), "store", "--port", str(self.port),
                "--dbpath", str(self.dbpath), "--bind", "127.0.0.1"] + self.extra_args

    def start(self, timeout=START_TIMEOUT_SECONDS):
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("store already running")
        if not self.binary.exists():
            pytest.fail("thermocline binary not found at %s: build it (make SANITIZE=1 "
                        "BUILD=build/asan build/asan/thermocline) or set THERMOCLINE_BIN"
                        % self.binary, pytrace=False)
        self.run_count += 1
        log_path = self.work_dir / ("store-%d.log" % self.run_count)
        self.log_paths.append(log_path)
        self._log_file = open(log_path, "wb")
        self.process = subprocess.Popen(self.command_line(), stdin=subprocess.DEVNULL,
                                        stdout=self._log_file, stderr=subprocess.STDOUT,
                                        cwd=str(self.work_dir))
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=START_TIMEOUT_SECONDS):
        """Waits until the port accepts and `ping` answers ok: 1."""
        deadline = time.monotonic() + timeout
        last_problem = "port never accepted"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._close_log()
                pytest.fail("store exited with status %s during startup; log tail:\n%s"
                            % (self.process.returncode, self.log_tail()), pytrace=False)
            try:
                reply = wire_command(self.port, {"ping": 1, "$db": "admin"}, timeout=2.0,
                                     ssl_context=self.ssl_context)
                if reply.get("ok") == 1:
                    return
                last_problem = "ping answered %r" % (reply,)
            except (OSError, AssertionError, bson.errors.BSONError) as error:
                last_problem = "%s: %s" % (type(error).__name__, error)
            time.sleep(0.1)
        self.kill9()
        pytest.fail("store did not answer ping within %ss (%s); log tail:\n%s"
                    % (timeout, last_problem, self.log_tail()), pytrace=False)

    def stop(self, timeout=STOP_TIMEOUT_SECONDS):
        """SIGTERM, then SIGKILL after timeout. Fails the test unless the server
        exited 0 and no run's log has a sanitizer report."""
        problems = []
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
                problems.append("did not exit within %ss of SIGTERM; killed" % timeout)
            if self.process.returncode != 0 and not problems:
                problems.append("exited with status %d after SIGTERM" % self.process.returncode)
        elif self.process is not None and self.process.returncode not in (None, -signal.SIGKILL):
            # It died on its own (a crash) before we asked it to stop.
            problems.append("had already exited with status %d" % self.process.returncode)
        self._close_log()
        problems.extend(self.sanitizer_reports())
        if problems:
            pytest.fail("store: %s; log tail:\n%s" % ("; ".join(problems), self.log_tail()),
                        pytrace=False)

    def kill9(self):
        """SIGKILL, as a crash or power loss would; no exit-status check."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._close_log()

    def restart(self, timeout=START_TIMEOUT_SECONDS):
        """Starts again on the same dbpath and port (after stop() or kill9())."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("stop or kill the store before restarting it")
        return self.start(timeout)

    def is_alive(self):
        return self.process is not None and self.process.poll() is None

    # -- observation -------------------------------------------------------
    def rss_kib(self):
        """Resident set size in KiB, from /proc/PID/status."""
        with open("/proc/%d/status" % self.pid) as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS for pid %d" % self.pid)

    def log_text(self, run=None):
        path = self.log_paths[run] if run is not None else self.log_path
        if path is None or not path.exists():
            return ""
        return path.read_bytes().decode("utf-8", "replace")

    def log_tail(self, lines=60):
        text = self.log_text()
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def sanitizer_reports(self):
        found = []
        for path in self.log_paths:
            text = path.read_bytes().decode("utf-8", "replace") if path.exists() else ""
            for marker in SANITIZER_MARKERS:
                if marker in text:
                    found.append("%s in %s" % (marker, path.name))
        return found

    def _close_log(self):
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


# ---------------------------------------------------------------------------
# Fixtures and hooks.
# ---------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the item so fixtures can tell whether the
    test failed (and then print the server's log)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "report_" + report.when, report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Removes a passing test's tmp_path once its fixtures have stopped their
    servers. A run starts over a thousand stores, each with a 16 MB journal
    file: kept, they fill a small disk half-way through the suite (and every
    later store then fails to start). A failed test keeps its files."""
    work_dir = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    outcome = yield
    passed = all(getattr(item, "report_" + phase, None) is not None
                 and getattr(item, "report_" + phase).passed for phase in ("setup", "call"))
    if work_dir is not None and passed and outcome.excinfo is None:
        shutil.rmtree(work_dir, ignore_errors=True)


class TestTimeout(Exception):
    """A test ran past TEST_TIMEOUT_SECONDS."""


@pytest.fixture(autouse=True)
def time_limit(request):
    """No test runs longer than TEST_TIMEOUT_SECONDS, or its module's
    TEST_TIME_LIMIT_SECONDS (pytest-timeout is not installed; SIGALRM interrupts
    the main thread's blocking calls)."""
    limit = getattr(request.module, "TEST_TIME_LIMIT_SECONDS", TEST_TIMEOUT_SECONDS)

    def on_alarm(signum, frame):
        raise TestTimeout("test exceeded %d s" % limit)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def checked_store(process, request):
    """Starts process for a fixture and yields it; after the test, prints its log
    tail if the test failed, stops and checks it (pytest_runtest_teardown then
    removes a passing test's files)."""
    process.start()
    yield process
    call_report = getattr(request.node, "report_call", None)
    failed = call_report is not None and call_report.failed
    if failed:
        print("---- store log tail (%s) ----\n%s" % (process.log_path, process.log_tail()))
    process.stop()


@pytest.fixture
def store(tmp_path, request):
    """A running `thermocline store` with a fresh dbpath, stopped and checked
    after the test."""
    yield from checked_store(StoreProcess(tmp_path), request)


@pytest.fixture
def replica_store(tmp_path, request):
    """The same as a one-member replica set (--replSet rs0): an oplog, change
    streams, operationTime in replies."""
    yield from checked_store(StoreProcess(tmp_path, replica_set="rs0"), request)


@pytest.fixture
def store_uri(store):
    return store.uri


@pytest.fixture
def client(store):
    """A pymongo client for the store, closed before the store stops."""
    mongo_client = MongoClient(store.uri, serverSelectionTimeoutMS=10000,
                               connectTimeoutMS=5000, socketTimeoutMS=30000)
    yield mongo_client
    mongo_client.close()


# ---------------------------------------------------------------------------
# The proxy process: `thermocline proxy --config FILE` in front of two stores.
# ---------------------------------------------------------------------------

def ensure_time_field_indexes(config_text):
    """What an operator does before tiering a collection (the proxy refuses to
    start without it, see tier_preflight): for each namespace of config_text
    whose collection exists in the archive without an index starting with its
    timeField, creates {timeField: 1}. Best effort: an archive that is down, a
    scripted fake or one that needs credentials is left as it is."""
    archive, namespaces, ns = None, [], None
    for line in config_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("archive:"):
            archive = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("- ns:"):
            ns = stripped.split(":", 1)[1].strip().strip('"')
        elif stripped.startswith("timeField:") and ns:
            namespaces.append((ns, stripped.split(":", 1)[1].strip().strip('"')))
            ns = None
    if not archive or not namespaces:
        return
    try:
        with MongoClient(archive, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000) as client:
            for name, time_field in namespaces:
                database, collection = name.split(".", 1)
                if collection not in client[database].list_collection_names():
                    continue
                keys = [list(spec["key"])[0] for spec in client[database][collection].list_indexes()]
                if time_field not in keys:
                    client[database][collection].create_index([(time_field, 1)], name=time_field + "_1")
    except Exception:  # noqa: BLE001 (best effort, see above)
        pass


class ProxyProcess(StoreProcess):
    """One `thermocline proxy`, with its YAML config written from config_text
    (where {port} is replaced by the proxy's own port); ssl_context as for a
    store, for a proxy with tlsMode requireTLS. Before it starts, the archive's
    tiered collections get their time-field index (ensure_time_field_indexes)
    unless time_indexes is False."""

    def __init__(self, work_dir, config_text, extra_args=(), binary=None, ssl_context=None, time_indexes=True):
        super().__init__(work_dir, extra_args=extra_args, binary=binary, ssl_context=ssl_context)
        self.config_path = self.work_dir / "proxy.yaml"
        self.config_path.write_text(config_text.replace("{port}", str(self.port)))
        self.time_indexes = time_indexes

    def start(self, timeout=START_TIMEOUT_SECONDS):
        if self.time_indexes:
            ensure_time_field_indexes(self.config_path.read_text())
        return super().start(timeout)

    @property
    def uri(self):
        return "mongodb://127.0.0.1:%d/" % self.port

    def command_line(self):
        return [str(self.binary), "proxy", "--config", str(self.config_path)] + self.extra_args


def proxy_over_two_stores(tmp_path):
    """A generator for a `store` fixture override: the proxy in front of two
    fresh stores, one namespace tiered (shop.orders, createdAt, 30 days, the
    coverage declared complete), yielding the proxy; stops all three after."""
    archive = StoreProcess(tmp_path / "archive").start()
    fast = StoreProcess(tmp_path / "fast").start()
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(archive, fast, [("shop.orders", "createdAt", "30d", True)]))
    proxy.start()
    yield proxy
    proxy.stop()
    fast.stop()
    archive.stop()


def proxy_config(archive, fast, namespaces=(), extra=""):
    """A proxy config for two StoreProcess tiers. namespaces: (ns, timeField,
    maxAge, declared) tuples."""
    lines = ["listen: 127.0.0.1:{port}",
             "archive: %s" % archive.uri,
             "fast: %s" % fast.uri,
             "namespaces:"]
    for ns, time_field, max_age, declared in namespaces:
        lines += ["  - ns: %s" % ns, "    timeField: %s" % time_field, "    maxAge: %s" % max_age]
        if declared:
            lines.append("    coverage: complete")
    if not namespaces:
        lines[-1] = "namespaces: []"
    return "\n".join(lines) + "\n" + extra


@pytest.fixture
def tiers(tmp_path):
    """An archive store and a fast-tier store, stopped and checked after the test."""
    archive = StoreProcess(tmp_path / "archive").start()
    fast = StoreProcess(tmp_path / "fast").start()
    yield archive, fast
    for store_process in (fast, archive):
        if store_process.is_alive():
            store_process.stop()


@pytest.fixture
def replicated_tiers(tmp_path):
    """The same two tiers as one-member replica sets (rs0 the archive, rs1 the
    fast tier): what the tier workers need (the fast tier's change stream)."""
    archive = StoreProcess(tmp_path / "archive", replica_set="rs0").start()
    fast = StoreProcess(tmp_path / "fast", replica_set="rs1").start()
    yield archive, fast
    for store_process in (fast, archive):
        if store_process.is_alive():
            store_process.stop()
