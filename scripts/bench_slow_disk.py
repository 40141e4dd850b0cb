"""The slow-disk benchmark (not a test): random _id reads on a collection ten
times larger than the WiredTiger cache, once on an uncapped disk and once with
--read-iops, printing reads/s and what serverStatus says the cache and the
emulated volume did. Run through scripts/bench-slow-disk.sh.

One load, two runs: the collection is loaded once, then the store is restarted
on the same dbpath without and with the cap, so both runs start with a cold
WiredTiger cache and read the same files."""

import argparse
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import struct
import time

import bson
from pymongo import MongoClient

SIZE_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
OP_MSG = 2013
DOCUMENT_REPLY_MIN_BYTES = 500  # a reply holding one document of the collection


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
                    raise SystemExit("store did not start; see %s" % self.log.name)
                time.sleep(0.2)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)
        self.log.close()


def load(uri, documents, document_bytes):
    client = MongoClient(uri)
    collection = client.bench.orders
    batch = []
    for i in range(documents):
        batch.append({"_id": i, "payload": os.urandom(document_bytes)})
        if len(batch) == 1000:
            collection.insert_many(batch)
            batch = []
    if batch:
        collection.insert_many(batch)
    client.admin.command("fsync")
    client.close()


def reader(port, documents, seed, stop_at):
    """Random _id point reads (find with limit 1) until stop_at (time.time()).
    Frames OP_MSG by hand on one socket: a driver's per-call overhead would
    make the client, not the store, the bottleneck on a small machine."""
    chooser = random.Random(seed)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        request_id = 0
        while time.time() < stop_at:
            request_id += 1
            body = b"\x00\x00\x00\x00\x00" + bson.encode({
                "find": "orders", "filter": {"_id": chooser.randrange(documents)}, "limit": 1,
                "singleBatch": True, "$db": "bench"})
            sock.sendall(struct.pack("<iiii", 16 + len(body), request_id, 0, OP_MSG) + body)
            header = receive(sock, 16)
            (length,) = struct.unpack_from("<i", header)
            reply = receive(sock, length - 16)
            if len(reply) < DOCUMENT_REPLY_MIN_BYTES:
                raise SystemExit("a read found nothing: %r" % bson.decode(reply[5:]))


def receive(sock, count):
    chunks = []
    while count > 0:
        chunk = sock.recv(count)
        if not chunk:
            raise SystemExit("the store closed the connection")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


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


def run(uri, port, pid, documents, clients, warmup, duration):
    """Warm-up, then a measured window; returns per-second rates from
    serverStatus deltas over the window."""
    client = MongoClient(uri)
    start = time.time()
    stop_at = start + warmup + duration
    workers = [multiprocessing.Process(target=reader, args=(port, documents, seed, stop_at))
               for seed in range(clients)]
    for worker in workers:
        worker.start()
    time.sleep(warmup)
    before, measured_from, cpu_before = figures(client), time.monotonic(), cpu_seconds(pid)
    time.sleep(duration)
    after, elapsed, cpu_after = figures(client), time.monotonic() - measured_from, cpu_seconds(pid)
    for worker in workers:
        worker.join()
    client.close()
    moved = {key: after[key] - before[key] for key in after}
    return {
        "reads/s": moved["reads"] / elapsed,
        "pages read into cache/s": moved["pages read"] / elapsed,
        "MB read into cache/s": moved["bytes read"] / elapsed / (1 << 20),
        "data-file reads/s": moved["disk reads"] / elapsed,
        "throttled reads/s": moved["throttled"] / elapsed,
        "mean read latency ms": moved["read micros"] / max(moved["read ops"], 1) / 1000,
        "cache MB": after["cache bytes"] / (1 << 20),
        "store CPU ms per read": (cpu_after - cpu_before) * 1000 / max(moved["reads"], 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--cache-size", default="16MB")
    parser.add_argument("--ratio", type=float, default=10, help="collection size / cache size")
    parser.add_argument("--document-bytes", type=int, default=1000)
    parser.add_argument("--read-iops", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=8, help="reader processes")
    parser.add_argument("--warmup", type=float, default=5, help="seconds before measuring")
    parser.add_argument("--duration", type=float, default=15, help="measured seconds")
    parser.add_argument("--keep", action="store_true", help="keep the dbpath")
    arguments = parser.parse_args()

    cache_bytes = parse_size(arguments.cache_size)
    documents = int(cache_bytes * arguments.ratio / (arguments.document_bytes + 40))
    work = tempfile.mkdtemp(prefix="thermocline-bench-slow-disk.")
    dbpath = os.path.join(work, "db")
    print("collection: %d documents of %d random bytes (%.0f MB, %.0fx a %s cache)"
          % (documents, arguments.document_bytes, documents * (arguments.document_bytes + 40) / (1 << 20),
             arguments.ratio, arguments.cache_size), flush=True)
    try:
        store = Store(arguments.binary, dbpath, ["--cache-size", arguments.cache_size])
        started = time.monotonic()
        load(store.uri, documents, arguments.document_bytes)
        store.stop()
        print("loaded in %.0f s; %d reader processes, %.0f s warm-up, %.0f s measured"
              % (time.monotonic() - started, arguments.clients, arguments.warmup, arguments.duration),
              flush=True)
        results = {}
        for label, extra in (("uncapped", []), ("--read-iops %d" % arguments.read_iops,
                                                ["--read-iops", str(arguments.read_iops)])):
            store = Store(arguments.binary, dbpath, ["--cache-size", arguments.cache_size] + extra)
            results[label] = run(store.uri, store.port, store.process.pid, documents,
                                 arguments.clients, arguments.warmup, arguments.duration)
            store.stop()
        labels = list(results)
        print("\n%-26s %14s %18s" % ("", labels[0], labels[1]))
        for key in results[labels[0]]:
            print("%-26s %14.2f %18.2f" % (key, results[labels[0]][key], results[labels[1]][key]))
        capped = results[labels[1]]
        verdict = "OK" if capped["data-file reads/s"] <= arguments.read_iops * 1.02 else "ABOVE THE CAP"
        print("\ncapped data-file reads/s: %.0f for a cap of %d (%.0f%%): %s"
              % (capped["data-file reads/s"], arguments.read_iops,
                 100 * capped["data-file reads/s"] / arguments.read_iops, verdict))
        return 0 if verdict == "OK" else 1
    finally:
        if not arguments.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
