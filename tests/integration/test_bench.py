"""Integration tests for `thermocline bench`: a load and a short `store` run
against a real `thermocline store` (the `store` fixture of conftest.py), the
JSON report's fields, the documents left in the collection, and bad usage
(exit status 2 with one line on stderr)."""

import datetime
import json
import os
import signal
import subprocess
import time

import pymongo
import pytest

from conftest import find_free_port, thermocline_binary
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, status, wait_feeder

BENCH_TIMEOUT_SECONDS = 40


def run_bench(*arguments):
    return subprocess.run([str(thermocline_binary()), "bench", *arguments],
                          capture_output=True, text=True, timeout=BENCH_TIMEOUT_SECONDS)


def assert_latency_shape(operation):
    latency = operation["latency_us"]
    assert set(latency) == {"min", "mean", "p50", "p95", "p99", "p99.9", "max"}
    assert 0 <= latency["min"] <= latency["p50"] <= latency["p95"] <= latency["p99"] \
        <= latency["p99.9"] <= latency["max"]
    assert latency["min"] <= latency["mean"] <= latency["max"]


def test_load_then_store_workload(store, client, tmp_path):
    load_report_path = tmp_path / "load.json"
    before_load = datetime.datetime.utcnow()
    result = run_bench("--uri", store.uri, "--workload", "load", "--records", "2000",
                       "--threads", "4", "--seed", "1", "--json", str(load_report_path))
    assert result.returncode == 0, result.stderr
    assert "insert_many" in result.stdout and "generator CPU" in result.stdout
    assert "100%" in result.stderr  # the progress bar reached the end

    usertable = client.ycsb.usertable
    assert usertable.count_documents({}) == 2000
    assert sorted(usertable.distinct("_id")) == list(range(2000))
    oldest, newest = usertable.find_one({"_id": 0}), usertable.find_one({"_id": 1999})
    for document in (oldest, newest):
        assert isinstance(document["_id"], int)
        assert sorted(key for key in document if key.startswith("field")) == \
            ["field%d" % index for index in range(10)]
        assert all(len(document["field%d" % index]) == 100 for index in range(10))
    # createdAt: over the year before the load, in _id order, newest last.
    year = datetime.timedelta(days=365)
    assert before_load - year - datetime.timedelta(seconds=5) <= oldest["createdAt"] < newest["createdAt"]
    assert newest["createdAt"] <= datetime.datetime.utcnow()
    assert newest["createdAt"] - oldest["createdAt"] > year - datetime.timedelta(days=1)

    load_report = json.loads(load_report_path.read_text())
    assert load_report["workload"] == "load"
    assert load_report["documents_loaded"] == 2000
    assert load_report["documents_failed"] == 0
    assert load_report["operations"]["insert_many"]["count"] == 2  # batches of 1,000
    assert load_report["operations"]["insert_many"]["errors"] == 0
    assert sum(row["documents"] for row in load_report["time_series"]) == 2000
    assert load_report["generator"]["cpu_us_per_op"] > 0

    report_path = tmp_path / "store.json"
    result = run_bench("--uri", store.uri, "--workload", "store", "--threads", "4",
                       "--duration", "2s", "--seed", "2", "--json", str(report_path))
    assert result.returncode == 0, result.stderr
    for row in ("read", "update", "insert", "total", "generator CPU"):
        assert row in result.stdout

    report = json.loads(report_path.read_text())
    assert report["workload"] == "store"
    assert report["threads"] == 4
    assert report["duration_seconds"] == 2.0
    assert report["seed"] == 2
    assert report["target_ops_per_second"] is None
    assert 1.9 <= report["measured_seconds"] <= 2.5
    assert report["records_at_start"] == 2000
    operations = report["operations"]
    assert set(operations) == {"read", "update", "insert"}
    for name, operation in operations.items():
        assert operation["count"] > 0, name
        assert operation["errors"] == 0, (name, operation.get("first_error"))
        assert operation["ops_per_second"] > 0
        assert_latency_shape(operation)
    assert operations["read"]["not_found"] == 0
    assert operations["update"]["not_found"] == 0
    total = report["total"]
    assert total["count"] == sum(operation["count"] for operation in operations.values())
    assert 0.75 < operations["read"]["count"] / total["count"] < 0.95
    assert report["generator"]["cpu_seconds"] > 0
    assert report["generator"]["cpu_us_per_op"] > 0

    # One host, the URI's: it carried every operation.
    assert report["hosts"] == [{"address": "127.0.0.1:%d" % store.port, "clients": 4,
                                "operations": total["count"], "errors": 0}]
    assert "1 host: 127.0.0.1:%d" % store.port in result.stdout

    series = report["time_series"]
    assert [row["second"] for row in series] == [1, 2]
    assert sum(row["read"] + row["update"] + row["insert"] for row in series) == total["count"]
    assert all(row["errors"] == 0 and row["read_p99_us"] > 0 for row in series)

    # Every loaded document is still there, plus one per insert.
    inserted = operations["insert"]["count"]
    assert report["records_at_end"] == 2000 + inserted
    assert usertable.count_documents({}) == 2000 + inserted
    assert usertable.count_documents({"_id": {"$lt": 2000}}) == 2000
    assert usertable.find_one({"_id": 2000})["createdAt"] > newest["createdAt"]


def test_fixed_offered_load(store, client, tmp_path):
    assert run_bench("--uri", store.uri, "--workload", "load", "--records", "500",
                     "--threads", "2").returncode == 0
    report_path = tmp_path / "paced.json"
    result = run_bench("--uri", store.uri, "--workload", "concentrated", "--threads", "4",
                       "--duration", "1s", "--warmup", "200ms", "--target-ops", "400",
                       "--json", str(report_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(report_path.read_text())
    assert report["target_ops_per_second"] == 400
    assert report["warmup_seconds"] == 0.2
    # The schedule offers 400 per second: no more, and a sanitized store keeps up.
    assert 300 <= report["total"]["count"] <= 404
    assert set(report["operations"]) == {"read", "update"}


def test_short_runs_end(store, client, tmp_path):
    """The run ends once the last client has stopped, whether the clients or the
    clock see the end first (the clock once spun forever when the clients did);
    each client sends a driver's lsid, and the sessions are ended at the end."""
    assert run_bench("--uri", store.uri, "--workload", "load", "--records", "500",
                     "--threads", "2").returncode == 0
    for attempt in range(5):
        report_path = tmp_path / ("short-%d.json" % attempt)
        result = run_bench("--uri", store.uri, "--workload", "pointread", "--threads", "16",
                           "--duration", "300ms", "--json", str(report_path))
        assert result.returncode == 0, result.stderr
        report = json.loads(report_path.read_text())
        assert report["measured_seconds"] == 0.3
        assert report["total"]["count"] > 0 and report["total"]["errors"] == 0


def test_a_server_that_stops_answering_is_given_up_on(store, client, tmp_path):
    """Operations a stopped server never answers are failed --reply-timeout (30 s
    unless told) after the end, and bench exits instead of waiting for ever (a
    server stopped before the clients' first pings were answered fails the run the
    same way)."""
    assert run_bench("--uri", store.uri, "--workload", "load", "--records", "500",
                     "--threads", "2").returncode == 0
    bench = subprocess.Popen([str(thermocline_binary()), "bench", "--uri", store.uri, "--workload", "pointread",
                              "--threads", "8", "--duration", "3s", "--reply-timeout", "2500ms"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    os.kill(store.pid, signal.SIGSTOP)
    try:
        stdout, stderr = bench.communicate(timeout=30)
    finally:
        os.kill(store.pid, signal.SIGCONT)
    assert "clients still wait for a reply after 2.5 s; giving up" in stderr, stderr
    assert bench.returncode in (0, 1)


def test_write_errors_are_counted(store, client, tmp_path):
    """Inserts told that only one document exists collide with the loaded ids:
    every one fails with the server's duplicate-key error, and a run in which
    nothing succeeded is a failure (1), with its report still written."""
    assert run_bench("--uri", store.uri, "--workload", "load", "--records", "300",
                     "--threads", "2").returncode == 0
    report_path = tmp_path / "collide.json"
    result = run_bench("--uri", store.uri, "--workload", "insert", "--records", "1",
                       "--threads", "2", "--duration", "1s", "--target-ops", "50",
                       "--json", str(report_path))
    assert result.returncode == 1, result.stderr
    assert "E11000" in result.stderr and "no operation succeeded" in result.stderr
    insert = json.loads(report_path.read_text())["operations"]["insert"]
    assert insert["count"] == 0
    assert 40 <= insert["errors"] <= 50
    assert "E11000" in insert["first_error"]
    assert client.ycsb.usertable.count_documents({}) == 300


def run_inserts(uri, workload, threads, report_path):
    """A 1 s run of an insert workload that must succeed without an error; its
    insert figures."""
    result = run_bench("--uri", uri, "--workload", workload, "--threads", str(threads),
                       "--duration", "1s", "--json", str(report_path))
    assert result.returncode == 0, result.stderr
    insert = json.loads(report_path.read_text())["operations"]["insert"]
    assert insert["count"] > 0 and insert["errors"] == 0, insert.get("first_error")
    return insert


def test_insert_with_a_unique_secondary_key(store, client, tmp_path):
    """insertunique creates {createdAt: 1} and a unique {email: 1} on an empty
    namespace, then inserts documents whose email is distinct per _id, without an
    error; insertemail, its baseline, wants {email: 1} not unique and says what to
    drop when the unique one is there, then runs once it is gone."""
    insert = run_inserts(store.uri, "insertunique", 4, tmp_path / "unique.json")

    usertable = client.ycsb.usertable
    indexes = {index["name"]: index for index in usertable.list_indexes()}
    assert dict(indexes["createdAt_1"]["key"]) == {"createdAt": 1}
    assert dict(indexes["email_1"]["key"]) == {"email": 1} and indexes["email_1"]["unique"] is True
    assert usertable.count_documents({}) == insert["count"]
    assert len(usertable.distinct("email")) == insert["count"]
    assert usertable.find_one({"_id": 5})["email"] == "user5@example.com"
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        usertable.insert_one({"_id": -1, "email": "user5@example.com"})

    result = run_bench("--uri", store.uri, "--workload", "insertemail", "--threads", "2", "--duration", "1s")
    assert result.returncode == 1
    assert "drop it first" in result.stderr and "email_1" in result.stderr, result.stderr
    usertable.drop_index("email_1")
    baseline = run_inserts(store.uri, "insertemail", 2, tmp_path / "baseline.json")
    assert "unique" not in {index["name"]: index for index in usertable.list_indexes()}["email_1"]
    assert usertable.count_documents({}) == insert["count"] + baseline["count"]


def test_insertunique_through_a_tiering_proxy(replicated_tiers, tmp_path):
    """Through a proxy tiering ycsb.usertable (which does not exist yet, so the
    proxy starts without its time-field index), insertunique's createIndexes
    reaches both tiers; every insert, each checked against the archive for its
    email, succeeds, and the feeder brings them all to the archive."""
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, ns="ycsb.usertable", max_age="1d",
                        coverage="complete")
    insert = run_inserts(proxy.uri, "insertunique", 4, tmp_path / "proxied.json")
    wait_feeder(proxy, "ycsb.usertable")
    for tier in (archive, fast):
        with client_for(tier) as client:
            usertable = client.ycsb.usertable
            indexes = {index["name"]: index for index in usertable.list_indexes()}
            assert indexes["email_1"]["unique"] is True, (tier, indexes)
            assert dict(indexes["createdAt_1"]["key"]) == {"createdAt": 1}
            assert usertable.count_documents({}) == insert["count"]


def test_clients_spread_over_the_hosts_of_the_uri(replicated_tiers, tmp_path):
    """A URI naming two proxies (mongos, as drivers see them) and no replica set:
    the load goes through libmongoc's handling of the seed list, and the timed
    mix's clients are spread over both, each proxy carrying half of them; what
    bench counts per host adds up to its total, and each proxy saw at least the
    requests bench counts for it."""
    archive, fast = replicated_tiers
    proxies = [start_proxy(tmp_path / ("proxy%d" % index), archive, fast, ns="ycsb.usertable", max_age="400d",
                           coverage="complete") for index in range(2)]
    uri = "mongodb://%s/" % ",".join("127.0.0.1:%d" % proxy.port for proxy in proxies)
    load = run_bench("--uri", uri, "--workload", "load", "--records", "300", "--threads", "2")
    assert load.returncode == 0, load.stderr
    requests_before = [status(proxy)["requests"] for proxy in proxies]

    report_path = tmp_path / "spread.json"
    result = run_bench("--uri", uri, "--workload", "store", "--threads", "4", "--duration", "1s",
                       "--json", str(report_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(report_path.read_text())
    hosts = report["hosts"]
    assert [host["address"] for host in hosts] == ["127.0.0.1:%d" % proxy.port for proxy in proxies]
    assert [host["clients"] for host in hosts] == [2, 2]
    assert all(host["operations"] > 0 and host["errors"] == 0 for host in hosts), hosts
    assert sum(host["operations"] for host in hosts) == report["total"]["count"]
    assert report["total"]["errors"] == 0
    for proxy, before, host in zip(proxies, requests_before, hosts):
        assert status(proxy)["requests"] - before >= host["operations"], (proxy.port, host)
    assert "2 hosts, the clients spread over them round-robin" in result.stdout


@pytest.mark.parametrize("arguments", [
    [],
    ["--workload", "store"],
    ["--uri", "mongodb://127.0.0.1:1"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "nosuch"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--threads", "0"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--threads", "many"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--duration", "10"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--duration", "0s"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--warmup", "soon"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--target-ops", "-5"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "load", "--records", "0"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "load", "--target-ops", "100"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--seed", "x"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--reply-timeout", "0s"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--nosuchflag"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "extra"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--threads"],
    ["--uri", "not-a-uri", "--workload", "store"],
    ["--uri", "mongodb://127.0.0.1:1", "--workload", "store", "--json", "/nonexistent/dir/r.json"],
])
def test_bad_usage_exits_2_with_one_line(arguments):
    result = run_bench(*arguments)
    assert result.returncode == 2, (arguments, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("thermocline bench: "), result.stderr


def test_help_and_unreachable_server(tmp_path):
    result = run_bench("--help")
    assert result.returncode == 0
    assert "--workload" in result.stdout and "concentrated" in result.stdout
    assert "insertunique" in result.stdout and "insertemail" in result.stdout

    # Nothing listens: a failure (1), said in one line, and no JSON left behind.
    report_path = tmp_path / "never.json"
    uri = "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=300" % find_free_port()
    result = run_bench("--uri", uri, "--workload", "pointread", "--duration", "1s",
                       "--json", str(report_path))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "cannot reach" in lines[0], result.stderr
    assert not report_path.exists()
