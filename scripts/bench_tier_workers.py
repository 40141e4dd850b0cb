"""The tier workers' benchmark (not a test): feeder throughput (change events
applied to the archive per second) and warmer throughput (documents copied into
the fast tier per second), against two `thermocline store --replSet` processes
on this machine. Run by hand and report the figures:

    python3 scripts/bench_tier_workers.py [--binary build/thermocline] [--events 50000] [--documents 50000]

Feeder: the proxy records the feeder's start point, then N events are written
straight into the fast tier (three workloads: inserts of new documents; updates
spread over 10,000 documents; updates of 100 hot documents, which coalesce), and
`thermocline feeder` is started alone; the figure is N over the time until its
checkpoint passes the last write. Warmer: the archive holds M documents inside
the window; `thermocline proxy` starts with every worker; the figure is M over the
time until the first pass completes, with an index on the time field as the lab
has (the warmer gives the archive half its time, ARCHIVE_SHARE in src/tier/warmer.c)."""

import argparse
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pymongo import InsertOne, MongoClient, UpdateOne

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Process:
    def __init__(self, arguments, log_path):
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(arguments, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def start_store(binary, work, name, replica_set):
    port = free_port()
    dbpath = os.path.join(work, name)
    os.makedirs(dbpath)
    process = Process([binary, "store", "--port", str(port), "--dbpath", dbpath, "--replSet", replica_set],
                      os.path.join(work, name + ".log"))
    uri = "mongodb://127.0.0.1:%d/?directConnection=true" % port
    deadline = time.monotonic() + 20
    while True:
        try:
            with MongoClient(uri, serverSelectionTimeoutMS=500) as client:
                client.admin.command("ping")
            return process, uri
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def write_config(work, archive_uri, fast_uri, **top):
    port = free_port()
    lines = ["listen: 127.0.0.1:%d" % port, "archive: %s" % archive_uri, "fast: %s" % fast_uri]
    lines += ["%s: %s" % (key, value) for key, value in top.items()]
    lines += ["namespaces:", "  - ns: bench.events", "    timeField: createdAt", "    maxAge: 1d",
              "    safetySlack: 1h", "    warmerPeriod: 1s", "    evictorPeriod: 10s"]
    path = os.path.join(work, "proxy-%d.yaml" % port)
    with open(path, "w") as config:
        config.write("\n".join(lines) + "\n")
    return path, "mongodb://127.0.0.1:%d/" % port


def wait_proxy(uri):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with MongoClient(uri, serverSelectionTimeoutMS=500) as client:
                return client.admin.command("thermoclineStatus")
        except Exception:
            time.sleep(0.1)
    raise RuntimeError("the proxy did not start")


def feeder_run(binary, work, events, workload):
    archive, archive_uri = start_store(binary, work, "archive-" + workload, "rs0")
    fast, fast_uri = start_store(binary, work, "fast-" + workload, "rs1")
    processes = [archive, fast]
    try:
        config, proxy_uri = write_config(work, archive_uri, fast_uri, feederEnabled="false",
                                         evictorEnabled="false", warmerEnabled="false")
        proxy = Process([binary, "proxy", "--config", config], os.path.join(work, "proxy-%s.log" % workload))
        processes.append(proxy)
        wait_proxy(proxy_uri)  # the feeder's start point is recorded now
        now = datetime.datetime.utcnow()
        with MongoClient(fast_uri) as client:
            collection = client.bench.events
            batch = []
            if workload != "inserts":
                spread = 10000 if workload == "updates" else 100
                collection.insert_many([{"_id": i, "createdAt": now, "n": 0, "s": "x" * 100}
                                        for i in range(spread)])
            for i in range(events):
                if workload == "inserts":
                    batch.append(InsertOne({"_id": i, "createdAt": now, "n": i, "s": "x" * 100}))
                else:
                    batch.append(UpdateOne({"_id": i % spread}, {"$inc": {"n": 1}, "$set": {"last": i}}))
                if len(batch) == 1000:
                    collection.bulk_write(batch, ordered=False)
                    batch = []
            if batch:
                collection.bulk_write(batch, ordered=False)
            last_write = client.admin.command("ping")["operationTime"]
            total = events + (0 if workload == "inserts" else spread)
        started = time.monotonic()
        feeder = Process([binary, "feeder", "--config", config], os.path.join(work, "feeder-%s.log" % workload))
        processes.append(feeder)
        with MongoClient(fast_uri) as client:
            while True:
                checkpoint = client.thermocline.feeder.find_one({"_id": "stream"}) or {}
                applied = checkpoint.get("appliedTime")
                if applied is not None and applied >= last_write and "resumeToken" in checkpoint:
                    break
                if time.monotonic() - started > 600:
                    raise RuntimeError("the feeder did not catch up in 10 minutes")
                time.sleep(0.02)
        seconds = time.monotonic() - started
        with MongoClient(archive_uri) as archive_client, MongoClient(fast_uri) as fast_client:
            same = (list(archive_client.bench.events.find().sort("_id", 1)) ==
                    list(fast_client.bench.events.find().sort("_id", 1)))
        return total, seconds, same
    finally:
        for process in reversed(processes):
            process.stop()


def warmer_run(binary, work, documents):
    archive, archive_uri = start_store(binary, work, "archive-warm", "rs0")
    fast, fast_uri = start_store(binary, work, "fast-warm", "rs1")
    processes = [archive, fast]
    try:
        now = datetime.datetime.utcnow()
        with MongoClient(archive_uri) as client:
            client.bench.events.create_index("createdAt")  # as an operator tiering by createdAt has it
            for start in range(0, documents, 5000):
                client.bench.events.insert_many(
                    [{"_id": i, "createdAt": now - datetime.timedelta(seconds=i), "n": i, "s": "x" * 200}
                     for i in range(start, min(documents, start + 5000))])
        config, proxy_uri = write_config(work, archive_uri, fast_uri, evictorEnabled="false")
        started = time.monotonic()
        proxy = Process([binary, "proxy", "--config", config], os.path.join(work, "proxy-warm.log"))
        processes.append(proxy)
        while True:
            status = wait_proxy(proxy_uri)["namespaces"]["bench.events"]
            if status["coverageHorizon"] is not None:
                break
            if time.monotonic() - started > 600:
                raise RuntimeError("the warmer did not finish in 10 minutes")
            time.sleep(0.05)
        return status["warmer"]["copied"], time.monotonic() - started
    finally:
        for process in reversed(processes):
            process.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=os.path.join(REPO, "build", "thermocline"))
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument("--documents", type=int, default=50000)
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-tier-")
    try:
        for workload in ("inserts", "updates", "hot-updates"):
            total, seconds, same = feeder_run(options.binary, work, options.events, workload)
            print("feeder %-12s %7d events in %6.2f s: %8.0f events/s%s" % (
                workload, total, seconds, total / seconds, "" if same else "  (ARCHIVE DIFFERS)"))
        copied, seconds = warmer_run(options.binary, work, options.documents)
        print("warmer              %7d documents in %6.2f s: %8.0f documents/s" % (copied, seconds, copied / seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
