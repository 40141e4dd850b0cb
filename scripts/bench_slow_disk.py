"""The slow-disk benchmark (not a test): random _id reads on a collection ten
times larger than the WiredTiger cache, once on an uncapped disk and once with
--read-iops, printing reads/s, their latency, and what serverStatus says the
cache and the emulated volume did. Run through scripts/bench-slow-disk.sh.

The load generator is `thermocline bench` (YCSB-style documents, workloads
`load` then `pointread`); the rates of the store are serverStatus deltas over
the measured window. One load, two runs: the store is restarted on the same
dbpath without and then with the cap, so both runs start with a cold WiredTiger
cache and read the same files."""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pymongo import MongoClient

SIZE_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
RECORD_BYTES = 1170  # a YCSB document of thermocline bench, as BSON


def parse_size(text):
    for unit, factor in SIZE_UNITS.items():
        if text.upper().endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Store:
    """A `thermocline store` child process on dbpath; stopped with SIGTERM."""

    def __init__(self, binary, dbpath, extra_args):
        self.port = free_port()
        self.log = open(os.path.join(os.path.dirname(dbpath), "store-%d.log" % self.port), "wb")
        self.process = subprocess.Popen(
            [binary, "store", "--port", str(self.port), "--dbpath", dbpath] + extra_args,
            stdout=self.log, stderr=subprocess.STDOUT)
        self.uri = "mongodb://127.0.0.1:%d/?directConnection=true" % self.port
        deadline = time.monotonic() + 30
        while True:
            try:
                MongoClient(self.uri, serverSelectionTimeoutMS=500).admin.command("ping")
                return
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    with open(self.log.name, "rb") as log:
                        tail = log.read()[-2000:].decode("utf-8", "replace")
                    raise SystemExit("store did not start; its log ends:\n%s" % tail)
                time.sleep(0.2)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
        self.log.close()


def bench(binary, uri, arguments):
    """Starts `thermocline bench --uri uri ARGUMENTS`; returns the process."""
    return subprocess.Popen([binary, "bench", "--uri", uri] + arguments, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def finish(process, what):
    output = process.communicate()[0].decode("utf-8", "replace")
    if process.returncode != 0:
        raise SystemExit("thermocline bench (%s) failed:\n%s" % (what, output))
    return output


def figures(client):
    status = client.admin.command("serverStatus")
    cache = status["wiredTiger"]["cache"]
    volume = status["thermocline"]["readIops"]
    return {
        "reads": status["opcounters"]["query"],
        "pages read": cache["pages read into cache"],
        "bytes read": cache["bytes read into cache"],
        "disk reads": volume["reads"],
        "throttled": volume["throttledReads"],
        "read micros": status["opLatencies"]["reads"]["latency"],
        "read ops": status["opLatencies"]["reads"]["ops"],
        "cache bytes": cache["bytes currently in the cache"],
    }


def cpu_seconds(pid):
    """User + system CPU time of process pid so far."""
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(binary, store, records, threads, warmup, duration, work):
    """pointread for warmup + duration; returns the generator's figures and the
    store's per-second rates from serverStatus over the measured window."""
    client = MongoClient(store.uri)
    report_path = os.path.join(work, "pointread-%d.json" % store.port)
    process = bench(binary, store.uri, ["--workload", "pointread", "--records", str(records),
                                        "--threads", str(threads), "--warmup", "%gs" % warmup,
                                        "--duration", "%gs" % duration, "--json", report_path])
    time.sleep(warmup)
    before, measured_from, cpu_before = figures(client), time.monotonic(), cpu_seconds(store.process.pid)
    time.sleep(duration)
    after, elapsed = figures(client), time.monotonic() - measured_from
    cpu_after = cpu_seconds(store.process.pid)
    finish(process, "pointread")
    client.close()
    with open(report_path) as report_file:
        read = json.load(report_file)["operations"]["read"]
    if read["errors"] or read["not_found"]:
        raise SystemExit("pointread had %d errors and %d documents not found"
                         % (read["errors"], read["not_found"]))
    moved = {key: after[key] - before[key] for key in after}
    latency = read["latency_us"]
    return {
        "reads/s (thermocline bench)": read["ops_per_second"],
        "read p50 ms": latency["p50"] / 1000,
        "read p95 ms": latency["p95"] / 1000,
        "read p99 ms": latency["p99"] / 1000,
        "reads/s (serverStatus)": moved["reads"] / elapsed,
        "pages read into cache/s": moved["pages read"] / elapsed,
        "MB read into cache/s": moved["bytes read"] / elapsed / (1 << 20),
        "data-file reads/s": moved["disk reads"] / elapsed,
        "throttled reads/s": moved["throttled"] / elapsed,
        "store mean read latency ms": moved["read micros"] / max(moved["read ops"], 1) / 1000,
        "cache MB": after["cache bytes"] / (1 << 20),
        "store CPU ms per read": (cpu_after - cpu_before) * 1000 / max(moved["reads"], 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--cache-size", default="16MB")
    parser.add_argument("--ratio", type=float, default=10, help="collection size / cache size")
    parser.add_argument("--read-iops", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=16, help="client threads of thermocline bench")
    parser.add_argument("--warmup", type=float, default=5, help="seconds before measuring")
    parser.add_argument("--duration", type=float, default=15, help="measured seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    arguments = parser.parse_args()

    records = int(parse_size(arguments.cache_size) * arguments.ratio / RECORD_BYTES)
    work = tempfile.mkdtemp(prefix="thermocline-bench-slow-disk.")
    dbpath = os.path.join(work, "db")
    cache = ["--cache-size", arguments.cache_size]
    store = None
    try:
        store = Store(arguments.binary, dbpath, cache)
        started = time.monotonic()
        finish(bench(arguments.binary, store.uri, ["--workload", "load", "--records", str(records),
                                                   "--threads", "4"]), "load")
        client = MongoClient(store.uri)
        client.admin.command("fsync")
        stats = client.ycsb.command("collStats", "usertable")
        client.close()
        store.stop()
        print("collection: %d YCSB documents, %.0f MB of BSON, %.0f MB on disk (%.1fx a %s cache); "
              "loaded in %.0f s" % (records, stats["size"] / (1 << 20), stats["storageSize"] / (1 << 20),
                                   stats["size"] / parse_size(arguments.cache_size), arguments.cache_size,
                                   time.monotonic() - started))
        print("pointread: %d threads, %g s warm-up, %g s measured" % (arguments.threads, arguments.warmup,
                                                                    arguments.duration), flush=True)
        results = {}
        for label, extra in (("uncapped", []),
                             ("--read-iops %d" % arguments.read_iops, ["--read-iops", str(arguments.read_iops)])):
            store = Store(arguments.binary, dbpath, cache + extra)
            results[label] = run(arguments.binary, store, records, arguments.threads, arguments.warmup,
                                 arguments.duration, work)
            store.stop()
        uncapped, capped = results.values()
        print("\n%-30s %12s %18s" % ("", *results))
        for key in uncapped:
            print("%-30s %12.2f %18.2f" % (key, uncapped[key], capped[key]))
        verdict = "OK" if capped["data-file reads/s"] <= arguments.read_iops * 1.02 else "ABOVE THE CAP"
        print("\ncapped data-file reads/s: %.0f for a cap of %d (%.0f%%): %s"
              % (capped["data-file reads/s"], arguments.read_iops,
                 100 * capped["data-file reads/s"] / arguments.read_iops, verdict))
        return 0 if verdict == "OK" else 1
    finally:
        if store is not None:
            store.stop()
        if not arguments.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
