"""How long the tier workers stay unowned when the proxy holding their leases
goes away (issue 16), a measurement, not a test. Run by hand and report:

    python3 scripts/measure_lease_takeover.py [--binary build/thermocline] [--kills 3]

Two `thermocline store --replSet` processes and three proxies over one config,
for leaseTimeout 2s and then 10s (the default): the feeder's holder is killed -9
(and restarted) --kills times, then stopped cleanly once; each time, the seconds
until another proxy's thermoclineStatus says it holds the feeder's lease."""
import argparse
import time

from measure_support import holds_feeder, start_tiers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--kills", type=int, default=3)
    options = parser.parse_args()
    base, archive, fast = start_tiers(options.binary)
    from conftest import wait_until
    from tier_support import start_proxy

    def takeover_seconds(proxies, leave):
        holder = next(proxy for proxy in proxies if holds_feeder(proxy))
        others = [proxy for proxy in proxies if proxy is not holder]
        started = time.monotonic()
        leave(holder)
        assert wait_until(lambda: any(holds_feeder(proxy) for proxy in others), 60, 0.05)
        return holder, time.monotonic() - started

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
