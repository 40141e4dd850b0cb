"""Long cursors through `thermocline proxy`: 1,000 documents read in batches of 7 to
9 (over a hundred getMores per cursor) from pymongo, the Node.js driver (dozens of
cursors at once, tests/node/long_cursors.mjs) and mongosh, on a tiered namespace
whose documents are all older than maxAge (the archive answers), a range read
inside the window (the fast tier answers) and an untiered namespace, while the
feeder, the evictor and the warmer work on another tiered namespace that a writer
keeps busy. Every document must come back exactly once, as the archive alone
holds them (the oracle), and no cursor may be lost.

The cursor loss of issue 12: the Node.js driver (and mongosh, built on it) decodes
the tiers' $clusterTime keyId, Long(0), as a number and sends it back as an int32,
four bytes shorter than the tier's own. The proxy, unable to put the tier's time in
its place, rebuilt the message from the client's command, which still named the
proxy's cursor id instead of the tier's: every getMore so sent failed with
CursorNotFound. pymongo keeps an Int64, so it never saw it;
test_getmore_with_a_shorter_cluster_time reproduces it byte for byte."""
import collections
import datetime
import json
import socket
import subprocess
import threading
import time

import bson
import pytest
from bson import json_util
from bson.int64 import Int64
from pymongo import MongoClient, monitoring

from conftest import NODE_DIR, ProxyProcess, StoreProcess, op_msg, read_reply, wait_until
from test_store_mongosh import run_mongosh
from test_store_node import node_or_skip
from tier_support import client_for, namespace_status, tier_config, wait_feeder, wait_warm

ARCHIVED = "shop.archived"  # tiered, every document older than maxAge: the archive answers
RECENT = "shop.orders"      # tiered, a range read inside the window: the fast tier answers
PLAIN = "shop.plain"        # no policy: the archive answers
CHURN = "shop.churn"        # tiered, written during every read so that the workers work
MAX_AGE_SECONDS = 4
DOCUMENTS = 1000
NODE_SCRIPT = NODE_DIR / "long_cursors.mjs"
RESULT_PREFIX = "LONG_CURSORS "
START = datetime.datetime.utcnow().replace(microsecond=0)
# Later than any horizon while the module runs, earlier than every window document.
WINDOW_FILTER = {"createdAt": {"$gte": START + datetime.timedelta(minutes=30)}}
# (namespace, filter, batch size): 112 to 143 getMores each.
READS = ((ARCHIVED, {}, 9), (RECENT, WINDOW_FILTER, 8), (PLAIN, {}, 7))


def collection_of(client, ns):
    database, collection = ns.split(".", 1)
    return client[database][collection]


def order(number, created):
    return {"_id": bson.ObjectId(), "n": number, "customer": "c%d" % (number % 17), "createdAt": created}


def seed(proxy, fast):
    """Writes everything through the proxy (the fast tier, then the feeder to the
    archive) and waits until the workers are done with it: the archived documents
    evicted from the fast tier, the window warm."""
    old = START - datetime.timedelta(hours=1)
    with client_for(proxy) as client:
        collection_of(client, ARCHIVED).insert_many(
            [order(i, old - datetime.timedelta(seconds=i)) for i in range(DOCUMENTS)])
        # The window's documents, and older ones the range read must leave out.
        collection_of(client, RECENT).insert_many(
            [order(i, START + datetime.timedelta(hours=1, seconds=i)) for i in range(DOCUMENTS)] +
            [order(DOCUMENTS + i, old - datetime.timedelta(seconds=i)) for i in range(300)])
        collection_of(client, PLAIN).insert_many([order(i, old) for i in range(DOCUMENTS)])
        collection_of(client, CHURN).insert_one(order(0, START))
    for ns in (ARCHIVED, RECENT, CHURN):
        wait_feeder(proxy, ns)
        wait_warm(proxy, ns)
    with client_for(fast) as client:
        assert wait_until(lambda: collection_of(client, ARCHIVED).count_documents({}) == 0, 20, 0.1), \
            "the evictor left archived documents in the fast tier"


def oracle(archive):
    """What the archive alone holds for each read: `_id:n` of every document, sorted."""
    with client_for(archive) as client:
        return {ns: sorted("%s:%s" % (document["_id"], document["n"])
                           for document in collection_of(client, ns).find(filter_))
                for ns, filter_, _ in READS}


Deployment = collections.namedtuple("Deployment", "archive fast proxy expected")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    base = tmp_path_factory.mktemp("long_cursors")
    started = []
    try:
        archive = StoreProcess(base / "archive", replica_set="rs0")
        started.append(archive.start())
        fast = StoreProcess(base / "fast", replica_set="rs1")
        started.append(fast.start())
        proxy = ProxyProcess(base / "proxy", tier_config(
            archive, fast, ns=ARCHIVED, max_age="%ds" % MAX_AGE_SECONDS, extra_namespaces=(RECENT, CHURN)))
        started.append(proxy.start())
        seed(proxy, fast)
        expected = oracle(archive)
        assert [len(expected[ns]) for ns, _, _ in READS] == [DOCUMENTS] * 3
        yield Deployment(archive, fast, proxy, expected)
    finally:
        # stop() fails on a crash, a non-zero exit or a sanitizer report: every
        # process is stopped before the first such failure is raised.
        problems = []
        for process in reversed(started):
            try:
                process.stop()
            except BaseException as problem:  # pytest.fail's exception is a BaseException
                problems.append(problem)
        if problems:
            raise problems[0]


@pytest.fixture(autouse=True)
def proxy_log_on_failure(request, deployment):
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        print("---- proxy log tail ----\n%s" % deployment.proxy.log_tail(120))


UPDATE_EVERY = 8


class Churn:
    """Writes CHURN while a client reads, so that every worker has work: documents a
    second older than maxAge (the feeder replays them, the evictor deletes them) and
    a second younger (they leave the window while the reads run), and, every
    UPDATE_EVERY inserts, an update of an eighth of the documents older than now,
    in turn (it faults evicted documents back in). The fast tier's cluster time so
    runs ahead of the archive's, whose getMores get the archive's. An update of
    every document every 20 ms would leave the evictor none to take: it deletes a
    document only if it is unchanged since the feeder replayed it, as it must."""

    def __init__(self, proxy):
        self.proxy = proxy
        self.writes = 0
        self.failure = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        try:
            with client_for(self.proxy) as client:
                churn = collection_of(client, CHURN)
                while not self.stopping.is_set():
                    now = datetime.datetime.utcnow().replace(microsecond=0)
                    age = MAX_AGE_SECONDS + (1 if self.writes % 4 == 0 else -1)
                    churn.insert_one(order(self.writes, now - datetime.timedelta(seconds=age)))
                    self.writes += 1
                    if self.writes % UPDATE_EVERY == 0:
                        # An eighth of the documents each time, in turn.
                        turn = self.writes // UPDATE_EVERY % 8
                        churn.update_many({"createdAt": {"$lt": now}, "_id": {"$mod": [8, turn]}},
                                          {"$inc": {"touched": 1}})
                        self.writes += 1
                    time.sleep(0.02)
        except Exception as error:  # reported by the test, not lost in the thread
            self.failure = error

    def __enter__(self):
        """Returns once the evictor has deleted some of the writer's documents: the
        reads start with every worker busy."""
        evicted = namespace_status(self.proxy, CHURN)["evictor"]["evicted"]
        self.thread.start()
        assert wait_until(lambda: self.failure is not None or
                          namespace_status(self.proxy, CHURN)["evictor"]["evicted"] > evicted, 20, 0.05), \
            "the evictor deleted none of the writer's documents: %r" % (namespace_status(self.proxy, CHURN),)
        return self

    def __exit__(self, *exc_info):
        self.stopping.set()
        self.thread.join(10)
        assert self.failure is None, "the writer failed: %r" % (self.failure,)


def routes(proxy):
    return {ns: dict(namespace_status(proxy, ns)["routes"]) for ns in (ARCHIVED, RECENT)}


def assert_routed(before, after, cursors):
    """Each tiered read opened its cursors on the tier it is meant for."""
    assert after[ARCHIVED]["archive"] - before[ARCHIVED]["archive"] == cursors, (before, after)
    assert after[RECENT]["fast"] - before[RECENT]["fast"] == cursors, (before, after)


def assert_exactly_once(ns, documents, expected, getmores, batch_size):
    counts = collections.Counter(documents)
    duplicated = sorted(key for key, count in counts.items() if count > 1)
    missing = sorted(set(expected) - set(counts))
    extra = sorted(set(counts) - set(expected))
    assert (missing, extra, duplicated) == ([], [], []), \
        "%s: %d documents, %d missing, %d not in the archive, %d more than once" % (
            ns, len(documents), len(missing), len(extra), len(duplicated))
    # Iterated in small batches, as asked: the proof that the getMores happened.
    assert getmores >= len(expected) // batch_size - 1, (ns, getmores, batch_size)


def run_node(proxy, reads, copies):
    node = node_or_skip()
    spec = json_util.dumps([{"ns": ns, "filter": filter_, "batchSize": batch_size, "copies": copies}
                            for ns, filter_, batch_size in reads], json_options=json_util.CANONICAL_JSON_OPTIONS)
    completed = subprocess.run([node, str(NODE_SCRIPT), proxy.uri, spec], cwd=str(NODE_DIR),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=45)
    return completed.returncode, completed.stdout.decode("utf-8", "replace")


def result_line(output):
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    assert len(lines) == 1, "no %r line in:\n%s" % (RESULT_PREFIX, output[-4000:])
    return json.loads(lines[0][len(RESULT_PREFIX):])


def check_cursors(deployment, results, copies):
    assert [result["ns"] for result in results] == [ns for ns, _, _ in READS]
    for (ns, _, batch_size), result in zip(READS, results):
        assert len(result["cursors"]) == copies
        errors = [cursor["error"] for cursor in result["cursors"] if cursor["error"] is not None]
        assert errors == [], "%s: %d of %d cursors failed: %s" % (ns, len(errors), copies, errors[:3])
        for cursor in result["cursors"]:
            assert_exactly_once(ns, cursor["documents"], deployment.expected[ns], cursor["getMores"], batch_size)


# --- the loss itself, byte for byte -----------------------------------------------------

def call(sock, document, request_id):
    sock.sendall(op_msg(document, request_id))
    reply = read_reply(sock)
    assert reply is not None, "the proxy closed the connection"
    return reply.document


def test_getmore_with_a_shorter_cluster_time(deployment):
    """A getMore whose $clusterTime has keyId as an int32 (what the Node.js driver
    sends back) reaches the tier's cursor, for each tier and an untiered namespace,
    as one with the tier's own Int64 does."""
    for ns, filter_, _ in READS:
        database, collection = ns.split(".", 1)
        for key_id in (Int64(0), 0):
            with socket.create_connection(("127.0.0.1", deployment.proxy.port), timeout=20) as sock:
                first = call(sock, {"find": collection, "filter": filter_, "batchSize": 9, "$db": database}, 1)
                assert first["ok"] == 1, first
                gossip = first["$clusterTime"]
                gossip["signature"]["keyId"] = key_id
                more = call(sock, {"getMore": first["cursor"]["id"], "collection": collection, "batchSize": 9,
                                   "$db": database, "$clusterTime": gossip}, 2)
                assert more.get("ok") == 1, (ns, type(key_id).__name__, more)
                assert more["cursor"]["id"] == first["cursor"]["id"]  # the proxy's id, not the tier's
                batches = first["cursor"]["firstBatch"] + more["cursor"]["nextBatch"]
                assert len({document["_id"] for document in batches}) == 18
                killed = call(sock, {"killCursors": collection, "cursors": [first["cursor"]["id"]],
                                     "$db": database}, 3)
                assert killed["cursorsKilled"] == [first["cursor"]["id"]], killed


# --- three clients --------------------------------------------------------------------

class GetMores(monitoring.CommandListener):
    def __init__(self):
        self.count = 0

    def started(self, event):
        if event.command_name == "getMore":
            self.count += 1

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass


def test_pymongo_long_cursors(deployment):
    getmores = GetMores()
    before = routes(deployment.proxy)
    with Churn(deployment.proxy), MongoClient(deployment.proxy.uri, event_listeners=[getmores],
                                              serverSelectionTimeoutMS=10000, socketTimeoutMS=30000) as client:
        for ns, filter_, batch_size in READS:
            getmores.count = 0
            documents = ["%s:%s" % (document["_id"], document["n"])
                         for document in collection_of(client, ns).find(filter_).batch_size(batch_size)]
            assert_exactly_once(ns, documents, deployment.expected[ns], getmores.count, batch_size)
    assert_routed(before, routes(deployment.proxy), 1)


def test_node_driver_long_cursors(deployment):
    """Twelve cursors of each read at once: 36 open in the proxy together (past the
    32 its cursor table holds before it grows), their getMores interleaved."""
    copies = 12
    before = routes(deployment.proxy)
    with Churn(deployment.proxy):
        code, output = run_node(deployment.proxy, READS, copies)
    results = result_line(output)
    check_cursors(deployment, results, copies)
    assert code == 0, output[-4000:]
    assert_routed(before, routes(deployment.proxy), copies)


MONGOSH_SCRIPT = """
const reads = EJSON.parse(%s);
const key = (id) => typeof id.toHexString === 'function' ? id.toHexString() : String(id);
const results = reads.map((read) => {
  const [database, ...rest] = read.ns.split('.');
  const cursor = db.getSiblingDB(database).getCollection(rest.join('.')).find(read.filter).batchSize(read.batchSize);
  const documents = [];
  let fetches = 0;
  let error = null;
  try {
    for (;;) {
      // With its batch used up, hasNext() asked the server (the find, then getMores).
      const usedUp = cursor.objsLeftInBatch() === 0;
      if (!cursor.hasNext()) break;
      if (usedUp) fetches++;
      const document = cursor.next();
      documents.push(key(document._id) + ':' + document.n);
    }
  } catch (failure) {
    error = {code: failure.code ?? null, message: String(failure.message)};
  }
  return {ns: read.ns, cursors: [{documents, getMores: fetches - 1, error}]};
});
print('%s' + JSON.stringify(results));
"""


def test_mongosh_long_cursors(deployment, tmp_path):
    spec = json_util.dumps([{"ns": ns, "filter": filter_, "batchSize": batch_size}
                            for ns, filter_, batch_size in READS], json_options=json_util.CANONICAL_JSON_OPTIONS)
    before = routes(deployment.proxy)
    with Churn(deployment.proxy):
        code, stdout, stderr = run_mongosh(
            [deployment.proxy.uri, "--quiet", "--eval", MONGOSH_SCRIPT % (json.dumps(spec), RESULT_PREFIX)],
            tmp_path, timeout=45)
    assert code == 0, "mongosh exited %d\nstdout:\n%s\nstderr:\n%s" % (code, stdout[-4000:], stderr[-4000:])
    check_cursors(deployment, result_line(stdout), 1)
    assert_routed(before, routes(deployment.proxy), 1)
