"""Structured logs (issue 17): `--log-format json` on the store, the proxy and a
tier worker alone, and `logFormat: json` in the proxy's YAML, write mongod 4.4+'s
format: every line of a run's log is one JSON object with t.$date, s, c, id, ctx
and msg, and the facts in attr (a connection's remote address, a slow query's
duration and namespace). Text stays the default."""

import datetime
import json
import re
import time

from conftest import StoreProcess
from tier_support import NS, WorkerProcess, client_for, start_proxy, stop_leftovers, tier_config, track  # noqa: F401

SEVERITIES = {"I", "W", "E", "D1"}
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [IWED] \S+\s+\[[^\]]+\] ")


def json_records(process):
    """Every line of process's log, each parsed and checked against mongod's shape."""
    records = []
    for line in process.log_text().splitlines():
        record = json.loads(line)
        assert list(record)[:6] == ["t", "s", "c", "id", "ctx", "msg"], line
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$", record["t"]["$date"]), line
        assert record["s"] in SEVERITIES, line
        assert isinstance(record["c"], str) and record["c"], line
        assert isinstance(record["id"], int) and record["id"] > 0, line
        assert isinstance(record["ctx"], str) and record["ctx"], line
        assert isinstance(record["msg"], str), line
        assert isinstance(record.get("attr", {}), dict), line
        records.append(record)
    assert records, "empty log"
    return records


def accepted(records):
    return [record for record in records if record["msg"].startswith("connection accepted from")]


def test_store_writes_json_lines(tmp_path):
    store = StoreProcess(tmp_path / "store", replica_set="rs0", extra_args=["--log-format", "json"]).start()
    with client_for(store) as client:
        client.test.items.insert_many([{"_id": i} for i in range(10)])
        assert client.test.items.count_documents({}) == 10
    store.stop()
    records = json_records(store)
    connections = accepted(records)
    assert connections, "no connection was logged"
    first = connections[0]
    assert first["c"] == "NETWORK" and first["ctx"] == "conn%d" % first["attr"]["connectionId"]
    assert re.match(r"^127\.0\.0\.1:\d+$", first["attr"]["remote"])
    assert isinstance(first["attr"]["connectionCount"], int)
    # One call site, one id, every time.
    assert len({record["id"] for record in connections}) == 1
    listening = [record for record in records if record["msg"].startswith("waiting for connections")]
    assert listening[0]["attr"] == {"address": "127.0.0.1", "port": store.port}


def test_text_stays_the_default(tmp_path):
    store = StoreProcess(tmp_path / "store").start()
    with client_for(store) as client:
        client.admin.command("ping")
    store.stop()
    lines = store.log_text().splitlines()
    assert lines and all(TEXT_LINE.match(line) for line in lines), lines[:3]
    assert any(re.search(r"connection accepted from 127\.0\.0\.1:\d+ #\d+ \(\d+ now open\)", line) for line in lines)


def test_proxy_writes_json_lines_with_slow_query_facts(tmp_path):
    archive = track(StoreProcess(tmp_path / "archive", replica_set="rs0", extra_args=["--log-format", "json"])).start()
    fast = track(StoreProcess(tmp_path / "fast", replica_set="rs1", extra_args=["--log-format", "json"])).start()
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h",
                        top={"logFormat": "json", "slowOpThresholdMs": 1})
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    with client_for(proxy) as client:
        client.shop.orders.insert_many([{"createdAt": now, "customer": "c%d" % i} for i in range(3000)])
        # No time bound, no index on customer: the archive scans, past 1 ms.
        assert client.shop.orders.count_documents({"customer": "c7"}) == 1
    time.sleep(0.5)
    proxy.stop()
    fast.stop()
    archive.stop()
    records = json_records(proxy)
    assert accepted(records), "the proxy logged no connection"
    slow = [record for record in records if record["msg"].startswith("Slow query:")]
    assert slow, "no slow query was logged"
    # count_documents is an aggregate, sent to the archive (its filter has no time bound).
    count = [record for record in slow if record["attr"]["command"] == "aggregate"]
    assert count, slow
    attr = count[0]["attr"]
    assert attr["ns"] == NS and attr["route"] == "archive" and attr["reason"] == "filter-unprovable"
    assert isinstance(attr["durationMillis"], int) and attr["durationMillis"] >= 1
    assert attr["slowOpThresholdMs"] == 1
    assert "{durationMillis}" in count[0]["msg"]  # as mongod: the message names its attributes
    start = [record for record in records if record["msg"].startswith("thermocline proxy on")]
    assert start and start[0]["attr"]["port"] == proxy.port and start[0]["attr"]["namespaces"] == 1, start
    workers = [record for record in records if record["msg"].startswith("tier workers running here")]
    assert workers and workers[0]["attr"] == {"feeder": True, "evictor": True, "warmer": True}, workers
    warming = [record for record in records if record["msg"].startswith("{ns}: warming the window")]
    assert warming and warming[0]["c"] == "WARMER" and warming[0]["ctx"] == "tc-warmer", warming
    assert warming[0]["attr"]["ns"] == NS and isinstance(warming[0]["attr"]["totalEstimate"], int)
    for tier in (archive, fast):
        json_records(tier)


def test_worker_alone_takes_the_flag(tmp_path, replicated_tiers):
    archive, fast = replicated_tiers
    worker = WorkerProcess(tmp_path / "feeder", tier_config(archive, fast), "feeder")
    worker.command_line = lambda: [str(worker.binary), "--log-format", "json", "feeder", "--config",
                                   str(worker.config_path)]
    track(worker).start()
    time.sleep(1.0)
    worker.stop()
    records = json_records(worker)
    assert "tc-feeder" in {record["ctx"] for record in records}


class LogLines:
    """json_records' view of a text that is not a process's log."""

    def __init__(self, text):
        self.text = text

    def log_text(self):
        return self.text


def test_bench_progress_is_json(store):
    """bench's report stays on stdout; what it writes on stderr (the load's progress,
    every 10% when stderr is not a terminal; the mix's every 10 s) becomes records
    under --log-format json."""
    import subprocess
    from conftest import thermocline_binary
    found = {}
    for arguments in (["--workload", "load", "--records", "300"],
                      ["--workload", "store", "--threads", "2", "--duration", "1s"]):
        result = subprocess.run([str(thermocline_binary()), "bench", "--uri", store.uri, "--log-format", "json",
                                 *arguments], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "ops/s" in result.stdout  # the report
        records = json_records(LogLines(result.stderr)) if result.stderr else []
        assert all(record["c"] == "BENCH" for record in records), records
        found[arguments[1]] = records
    loading = [record["attr"] for record in found["load"] if record["msg"].startswith("loading:")]
    assert loading and loading[-1]["documents"] == loading[-1]["total"] == 300, found["load"]
