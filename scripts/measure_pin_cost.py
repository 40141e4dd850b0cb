"""What the fast-tier pins cost a write (issue 16), a measurement, not a test.
Run by hand and report:

    python3 scripts/measure_pin_cost.py --baseline OLD_BINARY [--binary build/thermocline]

Two `thermocline store --replSet` processes (from --binary), --records documents
of `thermocline bench` loaded in the archive, and ycsb.usertable tiered (maxAge
33d). Then `thermocline bench --workload store` (85% reads, 10% updates, 5%
inserts; every write faults in, so every write pins) through:
  - one proxy, which runs the evictor and sees no other (its pins stay in memory),
    with the baseline binary and with --binary, in the order before, after, after,
    before;
  - the second of two proxies, which runs no worker (its pins go to the fast tier
    with --binary, stay in memory with the baseline: the race it lets through).
Each line: ops/s, and the updates' and inserts' p50 and p99 in ms."""
import argparse
import json
import os
import subprocess
import time

from measure_support import start_tiers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--baseline", required=True, help="a build without fast-tier pins")
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--duration", default="15s")
    options = parser.parse_args()
    binary = os.path.abspath(options.binary)
    baseline = os.path.abspath(options.baseline)
    base, archive, fast = start_tiers(binary)
    from conftest import ProxyProcess, wait_until
    from pymongo import MongoClient
    from tier_support import status, tier_config
    subprocess.run([binary, "bench", "--uri", archive.uri, "--workload", "load", "--records",
                    str(options.records), "--threads", "8"], check=True, capture_output=True)
    with MongoClient(archive.uri) as client:
        client.ycsb.usertable.create_index("createdAt")
    config = tier_config(archive, fast, ns="ycsb.usertable", max_age="33d", slack="1h", evictor_period="10s",
                         warmer_period="1s", top={"leaseTimeout": "2s"})

    def bench(proxy, label):
        report = os.path.join(base, "bench-%s-%d.json" % (label.replace(" ", "-"), time.monotonic_ns()))
        subprocess.run([binary, "bench", "--uri", proxy.uri, "--workload", "store", "--threads",
                        str(options.threads), "--duration", options.duration, "--warmup", "3s", "--seed", "7",
                        "--json", report], check=True, capture_output=True)
        with open(report) as source:
            figures = json.load(source)
        operations = figures["operations"]
        line = "%-42s %8.0f ops/s" % (label, figures["total"]["ops_per_second"])
        for name in ("update", "insert"):
            latency = operations[name]["latency_us"]
            line += "  %s p50 %.2f p99 %.2f ms" % (name, latency["p50"] / 1000.0, latency["p99"] / 1000.0)
        print(line, flush=True)

    def start(name, proxy_binary):
        return ProxyProcess(os.path.join(base, name), config, binary=proxy_binary).start()

    def holds_evictor(proxy):
        return status(proxy)["workers"]["evictor"].get("lease", {}).get("heldHere", False)

    for round_number, (label, proxy_binary) in enumerate(
            [("before", baseline), ("after", binary), ("after", binary), ("before", baseline)]):
        proxy = start("alone-%d" % round_number, proxy_binary)
        assert wait_until(lambda: holds_evictor(proxy), 20, 0.1)
        bench(proxy, "one proxy, %s" % label)
        proxy.stop()
    for label, proxy_binary in (("before", baseline), ("after", binary)):
        evicting = start("evicting-" + label, proxy_binary)
        assert wait_until(lambda: holds_evictor(evicting), 20, 0.1)
        writing = start("writing-" + label, proxy_binary)
        assert wait_until(lambda: status(writing)["proxiesAlive"] == 2, 20, 0.1)
        bench(writing, "two proxies, through the standby, %s" % label)
        writing.stop()
        evicting.stop()
    fast.stop()
    archive.stop()


if __name__ == "__main__":
    main()
