"""Slow operations in the proxy's log, as mongod logs them: a command slower than
slowOpThresholdMs gets one line with its shape (values left out), its namespace,
route and reason, and the phases its time went to. A tier is slowed on purpose by
pausing its process (SIGSTOP, then SIGCONT), so the test knows which phase the
time must be in."""
import datetime
import os
import re
import signal
import threading
import time

from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, wait_feeder
from tier_support import utc_now


def pause(process, seconds):
    """Stops process now and lets it go on after seconds, from a thread."""
    os.kill(process.pid, signal.SIGSTOP)
    timer = threading.Timer(seconds, os.kill, (process.pid, signal.SIGCONT))
    timer.start()
    return timer


def slow_lines(proxy):
    return [line for line in proxy.log_text().splitlines() if "Slow query:" in line]


def phase_ms(line, phase):
    match = re.search(re.escape(phase) + r" (\d+) ms", line)
    return int(match.group(1)) if match else 0


def test_a_slowed_tier_shows_in_the_phase_that_waited(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"slowOpThresholdMs": 200})
    with client_for(proxy) as client:
        orders = client.shop.orders
        orders.insert_one({"_id": 1, "createdAt": utc_now(), "customer": "c1"})
        wait_feeder(proxy)
        orders.find_one({"_id": 1})
        client.admin.command("ping")
        assert slow_lines(proxy) == [], "fast commands were logged as slow"

        # The archive answers a read it alone can answer only after 0.6 s.
        timer = pause(archive, 0.6)
        assert orders.find_one({"customer": "c1"})["_id"] == 1  # no time bound: the archive answers
        timer.join()
        lines = slow_lines(proxy)
        assert len(lines) == 1, lines
        line = lines[0]
        assert "find on shop.orders" in line and "route archive (filter-unprovable)" in line, line
        assert phase_ms(line, "forwarding") >= 400, line
        assert 'command {find: "orders", filter: {customer: ?}' in line and "c1" not in line, line

        # A write the feeder cannot apply while the archive is paused (an update the
        # fast tier alone runs: its filter proves the document inside the window), then
        # a read of the archive, which waits for the feeder (read-your-writes).
        timer = pause(archive, 0.8)
        orders.update_one({"_id": 1, "createdAt": {"$gte": utc_now() - datetime.timedelta(minutes=1)}},
                          {"$set": {"customer": "c2"}})
        assert orders.find_one({"customer": "c2"})["_id"] == 1
        timer.join()
        lines = slow_lines(proxy)[1:]
        waited = [line for line in lines if "find on shop.orders" in line]
        assert waited and phase_ms(waited[0], "waiting for the feeder") >= 300, lines
    proxy.stop()
