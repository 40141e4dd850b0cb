"""What checking a unique key an update computes costs (issue 13), a measurement,
not a test. Run by hand and report:

    python3 scripts/measure_unique_computed.py [--binary build/thermocline] [--updates 2000]

Two `thermocline store --replSet` processes and a proxy (maxAge 1h, every worker
running), a tiered shop.orders with a unique index on seq and 1,000 recent orders
the fast tier holds. One client updates random orders by _id, one at a time:
$inc of n (no unique key: forwarded as before), $set of seq to a new value (a key
the planner names: checked against the archive as before), and $inc of seq (a
computed key: read in the fast tier, applied in the proxy, then checked against
the archive). For each: updates per second, p50 and p99 latency, and archive
queries per update (serverStatus opcounters)."""
import argparse
import random
import statistics
import time

from measure_support import start_tiers

ORDERS = 1000


def archive_queries(client):
    return client.admin.command("serverStatus")["opcounters"]["query"]


def measure(orders, archive_client, updates, update_for):
    latencies = []
    before = archive_queries(archive_client)
    started = time.monotonic()
    for step in range(updates):
        identifier = random.randrange(ORDERS)
        begun = time.perf_counter()
        orders.update_one({"_id": identifier}, update_for(identifier, step))
        latencies.append((time.perf_counter() - begun) * 1000)
    elapsed = time.monotonic() - started
    latencies.sort()
    asked = archive_queries(archive_client) - before
    return (updates / elapsed, statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1],
            asked / updates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--updates", type=int, default=2000)
    options = parser.parse_args()
    base, archive, fast = start_tiers(options.binary)
    from tier_support import client_for, start_proxy, utc_now, wait_feeder
    proxy = start_proxy(base + "/proxy", archive, fast, max_age="1h", coverage="complete")
    cases = [
        ("$inc of n (no unique key)", lambda identifier, step: {"$inc": {"n": 1}}),
        ("$set of seq (a key the planner names)",
         lambda identifier, step: {"$set": {"seq": 10 * ORDERS * (step + 1) + identifier}}),
        ("$inc of seq (a computed key)", lambda identifier, step: {"$inc": {"seq": ORDERS}}),
    ]
    with client_for(proxy) as client, client_for(archive) as archive_client:
        orders = client.shop.orders
        orders.create_index("seq", unique=True)
        orders.insert_many([{"_id": i, "seq": i, "n": 0, "createdAt": utc_now()} for i in range(ORDERS)])
        wait_feeder(proxy)
        for name, update_for in cases:
            rate, p50, p99, asked = measure(orders, archive_client, options.updates, update_for)
            print("%-40s %7.0f updates/s  p50 %.2f ms  p99 %.2f ms  archive queries/update %.2f"
                  % (name, rate, p50, p99, asked))
    proxy.stop()
    fast.stop()
    archive.stop()


if __name__ == "__main__":
    main()
