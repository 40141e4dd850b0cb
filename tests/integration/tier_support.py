"""Helpers for the tier workers' tests (test_tier_*.py): a proxy config with
short periods so documents cross tiers within seconds, thermoclineStatus
accessors, and waits for the feeder and the warmer."""

import datetime
import time

import bson
import pytest
from pymongo import MongoClient

from conftest import ProxyProcess, wait_until

NS = "shop.orders"


def utc_now():
    """Now, to the millisecond, as a BSON date keeps it."""
    now = datetime.datetime.utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def ago(seconds):
    return utc_now() - datetime.timedelta(seconds=seconds)


def tier_config(archive, fast, ns=NS, max_age="4s", slack="500ms", evictor_period="200ms",
                warmer_period="200ms", coverage=None, top=None, extra_namespaces=(), namespace_keys=None):
    """A proxy config with one tiered namespace; top: extra top-level keys;
    namespace_keys: extra keys of each namespace (indexSyncPeriod...)."""
    lines = ["listen: 127.0.0.1:{port}",
             "archive: %s" % archive.uri,
             "fast: %s" % fast.uri]
    for key, value in (top or {}).items():
        lines.append("%s: %s" % (key, value))
    lines.append("namespaces:")
    for name in (ns,) + tuple(extra_namespaces):
        lines += ["  - ns: %s" % name,
                  "    timeField: createdAt",
                  "    maxAge: %s" % max_age,
                  "    safetySlack: %s" % slack,
                  "    evictorPeriod: %s" % evictor_period,
                  "    warmerPeriod: %s" % warmer_period]
        if coverage:
            lines.append("    coverage: %s" % coverage)
        for key, value in (namespace_keys or {}).items():
            lines.append("    %s: %s" % (key, value))
    return "\n".join(lines) + "\n"


STARTED = []


def track(process):
    """Remembers a process a test started, so that a failing test cannot leave it
    running (see stop_leftovers)."""
    STARTED.append(process)
    return process


@pytest.fixture(autouse=True)
def stop_leftovers():
    """Autouse in the modules that import it: kills what a failed test left."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.is_alive():
            process.kill9()


class WorkerProcess(ProxyProcess):
    """`thermocline feeder|evictor|warmer --config FILE`, alone."""

    def __init__(self, work_dir, config_text, worker):
        super().__init__(work_dir, config_text)
        self.worker = worker

    def command_line(self):
        return [str(self.binary), self.worker, "--config", str(self.config_path)]

    def wait_ready(self, timeout=10):
        time.sleep(0.3)
        if self.process.poll() is not None:
            pytest.fail("%s exited at once: %s" % (self.worker, self.log_tail()), pytrace=False)


def start_proxy(work_dir, archive, fast, **config):
    return track(ProxyProcess(work_dir, tier_config(archive, fast, **config))).start()


def client_for(process):
    return MongoClient(process.uri, serverSelectionTimeoutMS=10000, socketTimeoutMS=30000)


def status(proxy):
    with client_for(proxy) as client:
        return client.admin.command("thermoclineStatus")


def namespace_status(proxy, ns=NS):
    return status(proxy)["namespaces"][ns]


def feeder_caught_up(proxy, ns=NS):
    """The feeder has applied every write the proxy saw acknowledged."""
    item = namespace_status(proxy, ns)
    return item["feeder"]["appliedTime"] >= item["lastFastWriteTime"]


def wait_feeder(proxy, ns=NS, timeout=30):
    assert wait_until(lambda: feeder_caught_up(proxy, ns), timeout, 0.1), \
        "the feeder did not catch up: %r" % (namespace_status(proxy, ns),)


def wait_warm(proxy, ns=NS, timeout=30):
    assert wait_until(lambda: namespace_status(proxy, ns)["coverageHorizon"] is not None, timeout, 0.1), \
        "the warmer did not finish: %r" % (namespace_status(proxy, ns),)


def evict_mark(identifier, state, since, ns=NS, **fields):
    """An evictor's mark on one document, as thermocline.workerWrites holds it
    (worker_writes.h): planted by tests to stand for an eviction another process
    left unsettled (committed) or unfinished (pending)."""
    return {"_id": {"ns": ns, "id": identifier, "op": "evict"}, "state": state, "since": since, **fields}


def raw_documents(process, ns=NS):
    """Every document of ns as exact BSON bytes (field order included), by _id."""
    database, collection = ns.split(".", 1)
    with client_for(process) as client:
        return [bson.encode(document) for document in client[database][collection].find().sort("_id", 1)]


def documents_by_id(process, ns=NS):
    database, collection = ns.split(".", 1)
    with client_for(process) as client:
        return {document["_id"]: document for document in client[database][collection].find()}


def wait_equal(left, right, ns=NS, timeout=20):
    """Polls until both processes hold exactly the same documents of ns."""
    deadline = time.monotonic() + timeout
    while True:
        left_documents, right_documents = raw_documents(left, ns), raw_documents(right, ns)
        if left_documents == right_documents or time.monotonic() > deadline:
            return left_documents, right_documents
        time.sleep(0.2)
