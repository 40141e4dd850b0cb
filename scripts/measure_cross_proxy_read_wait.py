"""What an archive-routed read through a proxy that does not run the feeder waits
for (issue 16), a measurement, not a test. Run by hand and report:

    python3 scripts/measure_cross_proxy_read_wait.py [--binary build/thermocline] [--rounds 200]

Two `thermocline store --replSet` processes and two proxies over one config. Each
round writes one document through the proxy without the feeder's lease, then
reads through it a range of old documents, which only the archive answers: the
read holds until that proxy learns the feeder (in the other proxy) applied the
write (read-your-writes across proxies). Prints the read's median, p90 and max."""
import argparse
import datetime
import statistics
import time

from measure_support import holds_feeder, start_tiers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--rounds", type=int, default=200)
    options = parser.parse_args()
    base, archive, fast = start_tiers(options.binary)
    from conftest import wait_until
    from tier_support import client_for, start_proxy
    old = datetime.datetime(2020, 1, 1)
    with client_for(archive) as client:
        client.shop.orders.create_index("createdAt")
        client.shop.orders.insert_many([{"_id": "old-%d" % i, "createdAt": old} for i in range(100)])
    proxies = [start_proxy("%s/proxy-%d" % (base, i), archive, fast, max_age="1h") for i in range(2)]
    assert wait_until(lambda: any(holds_feeder(proxy) for proxy in proxies), 20, 0.1)
    other = next(proxy for proxy in proxies if not holds_feeder(proxy))
    waits = []
    with client_for(other) as client:
        orders = client.shop.orders
        for i in range(options.rounds):
            orders.insert_one({"_id": i, "createdAt": datetime.datetime.utcnow()})
            started = time.perf_counter()
            assert len(list(orders.find({"createdAt": {"$lt": datetime.datetime(2021, 1, 1)}}).limit(5))) == 5
            waits.append((time.perf_counter() - started) * 1000)
    waits.sort()
    print("archive-routed read after a write, through the proxy without the feeder (%d rounds): "
          "median %.1f ms, p90 %.1f ms, max %.1f ms" % (len(waits), statistics.median(waits),
                                                         waits[int(len(waits) * 0.9)], waits[-1]))
    for proxy in proxies:
        proxy.stop()
    fast.stop()
    archive.stop()


if __name__ == "__main__":
    main()
