"""How long the tier workers stay unowned when the proxy holding their leases
goes away (issue 16), a measurement, not a test. Run by hand and report:

    python3 scripts/measure_lease_takeover.py [--binary build/thermocline] [--kills 3]

Two `thermocline store --replSet` processes and three proxies over one config,
for leaseTimeout 2s and then 10s (the default): the feeder's holder is killed -9
(and restarted) --kills times, then stopped cleanly once; each time, the seconds
until another proxy's thermoclineStatus says it holds the feeder's lease."""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--kills", type=int, default=3)
    options = parser.parse_args()
    os.environ["THERMOCLINE_BIN"] = os.path.abspath(options.binary)
    from conftest import StoreProcess, wait_until
    from tier_support import start_proxy, status

    def holds_feeder(proxy):
        try:
            return status(proxy)["workers"]["feeder"].get("lease", {}).get("heldHere", False)
        except Exception:  # noqa: BLE001 - a dead proxy holds nothing
            return False

    def takeover_seconds(proxies, leave):
        holder = next(proxy for proxy in proxies if holds_feeder(proxy))
        others = [proxy for proxy in proxies if proxy is not holder]
        started = time.monotonic()
        leave(holder)
        assert wait_until(lambda: any(holds_feeder(proxy) for proxy in others), 60, 0.05)
        return holder, time.monotonic() - started

    base = tempfile.mkdtemp()
    archive = StoreProcess(base + "/archive", replica_set="rs0").start()
    fast = StoreProcess(base + "/fast", replica_set="rs1").start()
    for timeout in (2, 10):
        proxies = [start_proxy("%s/proxy-%d-%d" % (base, timeout, i), archive, fast, max_age="1h",
                               top={"leaseTimeout": "%ds" % timeout}) for i in range(3)]
        assert wait_until(lambda: any(holds_feeder(proxy) for proxy in proxies), 20, 0.1)
        for _ in range(options.kills):
            holder, seconds = takeover_seconds(proxies, lambda proxy: proxy.kill9())
            print("leaseTimeout %ds, kill -9: the feeder runs elsewhere after %.2f s" % (timeout, seconds))
            holder.restart()
        holder, seconds = takeover_seconds(proxies, lambda proxy: proxy.stop())
        print("leaseTimeout %ds, clean stop: the feeder runs elsewhere after %.2f s" % (timeout, seconds))
        for proxy in proxies:
            if proxy is not holder:
                proxy.stop()
    fast.stop()
    archive.stop()


if __name__ == "__main__":
    main()
