"""What a change stream through the proxy adds to an event's latency (issue 15),
a benchmark, not a test. Run by hand and report the figures:

    python3 scripts/bench_change_stream_latency.py [--binary build/thermocline] [--writes 400]

Two `thermocline store --replSet` processes (archive, fast tier) and a proxy
tiering bench.events with its workers running. One writer does, one at a time,
an insert then an update of a new document (a write waits for its event before
the next, so nothing queues); a watcher thread reads the stream (maxAwaitTimeMS
1000, so an idle getMore is waiting on the tier when the write lands). The
latency of an event is the time from the write's acknowledgement (the writer's
clock after insert_one / update_one returned) to the watcher seeing it. Measured
directly on the fast tier (collection.watch() on the store) and through the proxy
(the same writes through the proxy, watched through the proxy). The store's
awaitData polls its oplog every CHANGE_STREAM_POLL_MS (src/store/change_stream.c),
which dominates this figure on both paths.

Fetch time, to see the proxy's own share: a write, a pause (its event is in the
fast tier's history by then), then the time of the one getMore that returns it
(stream.try_next()), directly and through the proxy. Inserts cost the proxy one
more read of the fast tier (their marks in thermocline.workerWrites); updates
none."""

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from pymongo import MongoClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tier_workers import REPO, Process, start_store, wait_proxy, write_config  # noqa: E402


def measure(watch_uri, write_uri, writes, label):
    seen = {}
    ready = threading.Event()
    stop = threading.Event()

    def watcher():
        with MongoClient(watch_uri) as client:
            with client.bench.events.watch(max_await_time_ms=1000) as stream:
                ready.set()
                while not stop.is_set():
                    event = stream.try_next()
                    if event is not None:
                        seen[(event["operationType"], event["documentKey"]["_id"])] = time.monotonic()

    thread = threading.Thread(target=watcher)
    thread.start()
    ready.wait(20)
    latencies = {"insert": [], "update": []}
    with MongoClient(write_uri) as client:
        events = client.bench.events
        for i in range(writes):
            key = "%s-%d" % (label, i)
            for kind in ("insert", "update"):
                if kind == "insert":
                    events.insert_one({"_id": key, "createdAt": datetime.datetime.utcnow(), "n": i})
                else:
                    events.update_one({"_id": key}, {"$set": {"seen": True}})
                acknowledged = time.monotonic()
                deadline = acknowledged + 10
                while (kind, key) not in seen and time.monotonic() < deadline:
                    time.sleep(0.0002)
                if (kind, key) not in seen:
                    raise RuntimeError("%s: no %s event for %s in 10 s" % (label, kind, key))
                latencies[kind].append((seen[(kind, key)] - acknowledged) * 1000)
    stop.set()
    thread.join()
    return latencies


def fetch_times(uri, writes, label):
    times = {"insert": [], "update": []}
    with MongoClient(uri) as client:
        events = client.bench.events
        with events.watch(max_await_time_ms=1000) as stream:
            for i in range(writes):
                key = "%s-fetch-%d" % (label, i)
                for kind in ("insert", "update"):
                    if kind == "insert":
                        events.insert_one({"_id": key, "createdAt": datetime.datetime.utcnow(), "n": i})
                    else:
                        events.update_one({"_id": key}, {"$set": {"seen": True}})
                    time.sleep(0.05)
                    started = time.monotonic()
                    event = stream.try_next()
                    elapsed = (time.monotonic() - started) * 1000
                    if event is None or event["documentKey"]["_id"] != key:
                        raise RuntimeError("%s: the getMore did not return the %s of %s" % (label, kind, key))
                    times[kind].append(elapsed)
    return times


def summary(values):
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return "p50 %.2f ms, p95 %.2f ms, p99 %.2f ms, mean %.2f ms (%d events)" % (
        pick(0.5), pick(0.95), pick(0.99), statistics.mean(ordered), len(ordered))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(REPO, "build", "thermocline"))
    parser.add_argument("--writes", type=int, default=400)
    arguments = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-stream-latency.")
    processes = []
    try:
        archive, archive_uri = start_store(arguments.binary, work, "archive", "rs0")
        fast, fast_uri = start_store(arguments.binary, work, "fast", "rs1")
        processes += [archive, fast]
        config, proxy_uri = write_config(work, archive_uri, fast_uri)
        processes.append(Process([arguments.binary, "proxy", "--config", config], os.path.join(work, "proxy.log")))
        wait_proxy(proxy_uri)
        direct = measure(fast_uri, fast_uri, arguments.writes, "direct")
        through = measure(proxy_uri, proxy_uri, arguments.writes, "proxy")
        direct_fetch = fetch_times(fast_uri, arguments.writes, "direct")
        through_fetch = fetch_times(proxy_uri, arguments.writes, "proxy")
        for kind in ("insert", "update"):
            print("event latency, %-6s directly on the fast tier: %s" % (kind, summary(direct[kind])))
            print("event latency, %-6s through the proxy:         %s" % (kind, summary(through[kind])))
        for kind in ("insert", "update"):
            print("getMore time,  %-6s directly on the fast tier: %s" % (kind, summary(direct_fetch[kind])))
            print("getMore time,  %-6s through the proxy:         %s" % (kind, summary(through_fetch[kind])))
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
