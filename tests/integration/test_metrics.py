"""GET /metrics (issue 17): `thermocline store --metrics-listen` and the proxy's
`metricsListen` serve Prometheus' text format. Each scrape is parsed with
prometheus_client's own parser while traffic runs, and the counters must move
with that traffic under the names and labels the README documents; bad HTTP gets
404, 405, 400 or 431, and a client that sends nothing holds no scrape back."""

import datetime
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymongo import MongoClient
from pymongo.errors import DuplicateKeyError

from conftest import StoreProcess, find_free_port, wait_until
from tier_support import (NS, WorkerProcess, client_for, namespace_status, start_proxy,  # noqa: F401
                          stop_leftovers, tier_config, track, wait_feeder, wait_warm)


def scrape(port):
    """{(sample name, sorted labels): value} and {family name: type} of one scrape."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def http_status(port, method="GET", path="/metrics"):
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def raw_exchange(port, payload):
    """What the server answers to payload, sent whole; b'' when it just closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def check_bad_requests(port):
    assert http_status(port, path="/other") == 404
    assert http_status(port, path="/metrics?x=1") == 200
    assert http_status(port, method="POST") == 405
    assert http_status(port, method="HEAD") == 200
    assert raw_exchange(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw_exchange(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000).startswith(b"HTTP/1.1 431 ")
    # Clients that connect and send nothing, or half a request, hold no scrape back,
    # and are closed after the deadline (5 s).
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    silent[0].sendall(b"GET /metr")
    started = time.monotonic()
    scrape(port)
    assert time.monotonic() - started < 1.0
    for sock in silent:
        sock.settimeout(10)
        assert sock.recv(1) == b""  # closed by the server
        sock.close()


@pytest.fixture
def metrics_store(tmp_path):
    port = find_free_port()
    process = StoreProcess(tmp_path / "store", extra_args=["--metrics-listen", "127.0.0.1:%d" % port]).start()
    yield process, port
    if process.is_alive():
        process.stop()


def test_store_metrics_follow_traffic(metrics_store):
    process, port = metrics_store
    before, types = scrape(port)
    assert types["mongodb_ss_opcounters"] == "counter"
    assert types["mongodb_ss_connections"] == "gauge"
    assert value(before, "mongodb_ss_wt_cache_maximum_bytes_configured") == 256 * 1024 * 1024
    with MongoClient(process.uri) as client:
        collection = client.test.items
        collection.insert_many([{"_id": i, "pad": "x" * 100} for i in range(50)])
        for i in range(30):
            collection.insert_one({"_id": 1000 + i})
            assert collection.find_one({"_id": i}) is not None
        during, _ = scrape(port)
        assert value(during, "mongodb_ss_connections", conn_type="current") >= 1
    assert value(during, "mongodb_ss_opcounters_total", legacy_op_type="insert") - \
        value(before, "mongodb_ss_opcounters_total", legacy_op_type="insert") == 80
    assert value(during, "mongodb_ss_opcounters_total", legacy_op_type="query") - \
        value(before, "mongodb_ss_opcounters_total", legacy_op_type="query") == 30
    assert value(during, "mongodb_ss_connections", conn_type="totalCreated") > \
        value(before, "mongodb_ss_connections", conn_type="totalCreated")
    assert value(during, "mongodb_ss_wt_cache_bytes_currently_in_the_cache") > 0
    assert value(during, "mongodb_ss_opLatencies_ops_total", op_type="reads") - \
        value(before, "mongodb_ss_opLatencies_ops_total", op_type="reads") == 30
    assert value(during, "mongodb_ss_opLatencies_ops_total", op_type="writes") - \
        value(before, "mongodb_ss_opLatencies_ops_total", op_type="writes") == 31  # insert_many is one command
    assert value(during, "mongodb_ss_opLatencies_latency_total", op_type="writes") > \
        value(before, "mongodb_ss_opLatencies_latency_total", op_type="writes")
    assert value(during, "thermocline_store_read_iops_cap") == 0
    check_bad_requests(port)


def test_store_metrics_flag_is_checked(tmp_path):
    for bad in ("9216", "127.0.0.1:", "127.0.0.1:70000", "::1:9216"):
        process = StoreProcess(tmp_path / ("bad-%d" % len(bad)), extra_args=["--metrics-listen", bad])
        completed = __import__("subprocess").run(process.command_line(), capture_output=True, timeout=20)
        assert completed.returncode == 2, bad
        assert b"--metrics-listen" in completed.stderr


PROXY_COUNTERS = [
    "thermocline_proxy_requests_total", "thermocline_proxy_errors_total",
    "thermocline_proxy_client_connections_created_total", "thermocline_proxy_requests_failed_total",
    "thermocline_proxy_requests_retried_total", "thermocline_feeder_events_applied_total",
    "thermocline_feeder_archive_writes_total", "thermocline_fault_ins_total", "thermocline_point_reads_from_archive_total",
    "thermocline_warmer_copied_documents_total", "thermocline_evictor_evicted_documents_total",
    "thermocline_pool_requests_total", "thermocline_pool_waits_total", "thermocline_pool_network_errors_total",
]
PROXY_GAUGES = [
    "thermocline_proxy_client_connections", "thermocline_feeder_lag_seconds", "thermocline_feeder_coalescing_ratio",
    "thermocline_coverage_valid", "thermocline_coverage_horizon_seconds", "thermocline_pool_connections",
    "thermocline_pool_queued_requests", "thermocline_pool_in_flight_limit", "thermocline_feeder_lag_events",
]


def test_proxy_metrics_follow_traffic(tmp_path, replicated_tiers):
    archive, fast = replicated_tiers
    port = find_free_port()
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", slack="1s",
                        top={"metricsListen": "127.0.0.1:%d" % port})
    wait_warm(proxy)
    before, types = scrape(port)
    for name in PROXY_COUNTERS:
        assert types.get(name[:-len("_total")]) == "counter", name
    for name in PROXY_GAUGES:
        assert types.get(name) == "gauge", name
    assert types["thermocline_proxy_request_duration_seconds"] == "histogram"

    # A client loop runs while the proxy is scraped.
    stop = threading.Event()
    done = {"writes": 0, "reads": 0}

    def traffic():
        with client_for(proxy) as client:
            orders = client.shop.orders
            while not stop.is_set():
                now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
                key = done["writes"]
                orders.insert_one({"_id": key, "createdAt": now})
                done["writes"] += 1
                list(orders.find({"createdAt": {"$gte": now - datetime.timedelta(minutes=5)}}).limit(2))
                orders.find_one({"_id": key})
                done["reads"] += 2

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        assert wait_until(lambda: done["writes"] >= 50, 30, 0.1)
        during, _ = scrape(port)
    finally:
        stop.set()
        thread.join()
    with client_for(proxy) as client:
        with pytest.raises(DuplicateKeyError):
            client.shop.orders.insert_one({"_id": 0, "createdAt": datetime.datetime.utcnow()})
    wait_feeder(proxy)
    after, _ = scrape(port)

    def moved(name, **labels):
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    writes = done["writes"] + 1
    assert moved("thermocline_proxy_requests_total", namespace=NS, route="fast", reason="write") == writes
    assert moved("thermocline_proxy_requests_total", namespace=NS, route="fast", reason="inside-horizon") >= \
        done["writes"]
    assert moved("thermocline_proxy_requests_total", namespace=NS, route="fast-then-archive",
                 reason="point-read") >= done["writes"]
    assert moved("thermocline_point_reads_from_archive_total", namespace=NS) == 0  # each read its own insert
    assert moved("thermocline_proxy_request_duration_seconds_count", namespace=NS, route="fast") >= 2 * done["writes"]
    buckets = sorted((float(dict(labels)["le"]), number) for (name, labels), number in after.items()
                     if name == "thermocline_proxy_request_duration_seconds_bucket"
                     and dict(labels).get("route") == "fast" and dict(labels).get("namespace") == NS)
    assert [number for _, number in buckets] == sorted(number for _, number in buckets)  # cumulative
    assert buckets[-1] == (float("inf"), value(after, "thermocline_proxy_request_duration_seconds_count",
                                               namespace=NS, route="fast"))
    assert moved("thermocline_proxy_errors_total", code="11000") == 1
    assert moved("thermocline_feeder_events_applied_total") >= done["writes"]  # the duplicate wrote nothing
    assert moved("thermocline_pool_requests_total", tier="fast", member="primary") >= 3 * done["writes"]
    assert value(during, "thermocline_proxy_client_connections") >= 1
    assert value(after, "thermocline_coverage_valid", namespace=NS) == 1
    horizon = value(after, "thermocline_coverage_horizon_seconds", namespace=NS)
    assert abs(horizon - (time.time() - 3600 + 1)) < 30
    assert value(after, "thermocline_feeder_coalescing_ratio") >= 1
    assert value(after, "thermocline_feeder_lag_events", namespace=NS) == 0  # after wait_feeder
    assert value(after, "thermocline_pool_reachable", tier="archive", member="primary") == 1
    check_bad_requests(port)


def test_warmer_first_pass_progress(tmp_path, replicated_tiers):
    """Issue 17's Progress: the warmer's first pass shows documents copied, its pace
    and the time left in thermoclineStatus, in /metrics and in the log."""
    archive, fast = replicated_tiers
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    with MongoClient(archive.uri) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": now - datetime.timedelta(seconds=i / 2)}
                                        for i in range(4000)])
    port = find_free_port()
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", slack="1m",
                        top={"metricsListen": "127.0.0.1:%d" % port, "warmerRateLimit": 400})
    # The pace is measured over 5 s; at 400 documents per second the pass lasts about 10 s.
    assert wait_until(lambda: "docsPerSecond" in namespace_warmer(proxy), 20, 0.2), namespace_warmer(proxy)
    warmer = namespace_warmer(proxy)
    samples, _ = scrape(port)
    assert warmer["state"] == "warming"
    assert 50 <= warmer["docsPerSecond"] <= 600, warmer
    assert warmer["etaSeconds"] == pytest.approx(warmer["remainingEstimate"] / warmer["docsPerSecond"], abs=1)
    assert 0 < value(samples, "thermocline_warmer_docs_per_second", namespace=NS) <= 600
    assert value(samples, "thermocline_warmer_eta_seconds", namespace=NS) > 0
    assert value(samples, "thermocline_warmer_remaining_documents", namespace=NS) > 0
    assert value(samples, "thermocline_coverage_valid", namespace=NS) == 0
    assert value(samples, "thermocline_coverage_horizon_seconds", namespace=NS) is None
    wait_warm(proxy, timeout=40)
    warmer = namespace_warmer(proxy)
    assert "docsPerSecond" not in warmer and "etaSeconds" not in warmer, warmer
    samples, _ = scrape(port)
    assert value(samples, "thermocline_warmer_docs_per_second", namespace=NS) is None
    assert value(samples, "thermocline_coverage_valid", namespace=NS) == 1
    lines = [line for line in proxy.log_text().splitlines() if "documents of the window (" in line]
    assert any(re.search(r"copied \d+ of about \d+ documents of the window \(\d+/s; .*\(etaSeconds: \d+\)$", line)
               for line in lines), lines
    proxy.stop()


def namespace_warmer(proxy):
    return namespace_status(proxy)["warmer"]


def test_feeder_lag_in_events(tmp_path, replicated_tiers):
    """thermocline_feeder_lag_events counts the documents written through the proxy
    that the feeder has not applied: exactly what was written while no feeder runs,
    and 0 once one (here alone, in its own process) has caught up."""
    archive, fast = replicated_tiers
    port = find_free_port()
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"metricsListen": "127.0.0.1:%d" % port, "feederEnabled": "false"})
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    with client_for(proxy) as client:
        orders = client.shop.orders
        orders.insert_many([{"_id": i, "createdAt": now, "n": 0} for i in range(7)])
        assert orders.update_many({"_id": {"$lt": 3}}, {"$set": {"n": 1}}).modified_count == 3
        assert orders.update_many({"_id": {"$lt": 3}}, {"$set": {"n": 1}}).modified_count == 0  # no change, no event
        orders.update_one({"_id": 100}, {"$set": {"createdAt": now}}, upsert=True)
        assert orders.delete_many({"_id": {"$in": [5, 6]}}).deleted_count == 2
    samples, _ = scrape(port)
    assert value(samples, "thermocline_feeder_lag_events", namespace=NS) == 7 + 3 + 1 + 2
    feeder = track(WorkerProcess(tmp_path / "feeder", tier_config(archive, fast, max_age="1h"), "feeder")).start()
    assert wait_until(lambda: value(scrape(port)[0], "thermocline_feeder_lag_events", namespace=NS) == 0, 30, 0.2)
    feeder.stop()
    proxy.stop()
