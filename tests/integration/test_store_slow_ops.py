"""Slow operations in the store's log, as mongod logs them (--slowms): a command
slower than the threshold gets one line with its shape (values left out), its
outcome, and where its time went. The store is slowed on purpose, so the test
knows which part must hold the time: an emulated disk capped at a few reads per
second (--read-iops) under a cold cache, and one worker thread kept busy while
another command queues for it."""
import json
import re
import subprocess
import threading

import pymongo

from conftest import StoreProcess


def slow_lines(store):
    return [line for line in store.log_path.read_text(errors="replace").splitlines() if "Slow query:" in line]


def number(line, pattern):
    match = re.search(pattern, line)
    assert match, "%r not in %s" % (pattern, line)
    return int(match.group(1))


def test_a_slow_disk_and_a_busy_worker_show_where_the_time_went(tmp_path):
    store = StoreProcess(tmp_path / "store", extra_args=["--slowms", "150", "--workers", "1",
                                                         "--cache-size", "1MB"])
    store.start()
    try:
        with pymongo.MongoClient(store.uri) as client:
            documents = client.shop.documents
            documents.insert_many([{"_id": i, "tag": "t%d" % i, "pad": "x" * 2000} for i in range(1500)])
            client.admin.command("ping")
            documents.find_one({"_id": 3})
            fast = [line for line in slow_lines(store) if "ping" in line or "find on" in line]
            assert fast == [], "fast commands were logged as slow"
    finally:
        store.stop()
    # Cold cache, and every data-file read waits for one of 25 slots a second.
    store.extra_args += ["--read-iops", "25"]
    store.start()
    try:
        with pymongo.MongoClient(store.uri) as scanner, pymongo.MongoClient(store.uri) as pinger:
            pinger.admin.command("ping")  # connected before the worker is taken
            scanner.admin.command("ping")
            scan = threading.Thread(target=lambda: scanner.shop.documents.count_documents({"tag": "none"}))
            scan.start()
            threading.Event().wait(0.3)  # the scan holds the one worker
            pinger.admin.command("ping")
            scan.join()
            try:
                pinger.shop.command({"find": "documents", "filter": {"$bad": 1}})
            except pymongo.errors.OperationFailure:
                pass
        lines = slow_lines(store)
        aggregate = [line for line in lines if "Slow query: aggregate on shop" in line]
        assert len(aggregate) == 1, lines
        assert number(aggregate[0], r"data-file reads (\d+)") > 0, aggregate[0]
        assert number(aggregate[0], r"waiting for the emulated disk \(--read-iops\) (\d+) ms") >= 150, aggregate[0]
        assert "WiredTiger: " in aggregate[0] and "% used" in aggregate[0], aggregate[0]
        assert 'command {aggregate: "documents", pipeline: [' in aggregate[0] and "none" not in aggregate[0]
        ping = [line for line in lines if "Slow query: ping on admin" in line]
        assert len(ping) == 1, lines
        assert number(ping[0], r"queued for a worker (\d+) ms") >= 150, ping[0]
        assert number(ping[0], r"running (\d+) ms") < 150, ping[0]
        assert not any("$bad" in line for line in lines), "a fast failure was logged as slow"
    finally:
        store.stop()


def test_slowms_zero_logs_every_command_with_its_outcome(tmp_path):
    store = StoreProcess(tmp_path / "store", extra_args=["--slowms", "0"])
    store.start()
    try:
        with pymongo.MongoClient(store.uri) as client:
            client.shop.command("ping")
            try:
                client.shop.command({"find": "documents", "filter": {"$bad": 1}})
            except pymongo.errors.OperationFailure as failure:
                assert failure.code == 2
        lines = slow_lines(store)
        assert any("Slow query: ping on shop" in line for line in lines), lines
        failed = [line for line in lines if "Slow query: find on shop" in line]
        assert failed and "failed with BadValue (2)" in failed[-1], lines
        assert 'command {find: "documents", filter: {$bad: ?}' in failed[-1], failed[-1]
    finally:
        store.stop()


def test_a_slow_line_counts_what_the_command_returned_or_wrote(tmp_path):
    """As mongod's slow-query line: nreturned, ninserted, nMatched, nModified,
    nUpserted (not counted in nMatched) and ndeleted."""
    store = StoreProcess(tmp_path / "store", extra_args=["--slowms", "0"])
    store.start()
    try:
        with pymongo.MongoClient(store.uri) as client:
            documents = client.shop.documents
            documents.insert_many([{"_id": i, "n": i % 2} for i in range(7)])
            assert len(list(documents.find({"n": 1}, batch_size=2))) == 3
            documents.bulk_write([pymongo.UpdateMany({"n": 0}, {"$set": {"n": 0}}),
                                  pymongo.UpdateOne({"n": 1}, {"$set": {"n": 5}}),
                                  pymongo.UpdateOne({"_id": 99}, {"$set": {"n": 9}}, upsert=True)])
            assert documents.delete_many({"n": 0}).deleted_count == 4
        lines = slow_lines(store)

        def counts(command):
            found = [line for line in lines if "Slow query: %s on shop" % command in line]
            assert found, lines
            return [line.split("; command ")[0].split(";")[-1].strip() for line in found]
        assert counts("insert") == ["ninserted 7"]
        assert counts("find")[-1] == "nreturned 2" and counts("getMore")[-1] == "nreturned 1"
        assert counts("update") == ["nMatched 5, nModified 1, nUpserted 1"]
        assert counts("delete") == ["ndeleted 4"]
    finally:
        store.stop()


def test_a_slow_line_carries_its_facts_as_attributes_in_json(tmp_path):
    """Under --log-format json the line is mongod's shape: the message as written,
    each fact a typed attribute a log pipeline can filter on."""
    store = StoreProcess(tmp_path / "store", extra_args=["--slowms", "0", "--log-format", "json"])
    store.start()
    try:
        with pymongo.MongoClient(store.uri) as client:
            client.shop.documents.insert_one({"_id": 1})
            client.shop.documents.find_one({"_id": 1})
        records = [json.loads(line) for line in store.log_path.read_text().splitlines() if line.startswith("{")]
        finds = [r for r in records if r["msg"].startswith("Slow query: {command}") and r["attr"]["command"] == "find"]
        assert finds, [r["msg"] for r in records]
        attr = finds[-1]["attr"]
        assert attr["ns"] == "shop" and isinstance(attr["durationMillis"], int) and attr["slowms"] == 0
        assert {"queuedMillis", "runningMillis", "dataFileReads", "dataFileBytes", "dataFileMillis"} <= set(attr)
        assert attr["shape"].startswith('{find: "documents", filter: {_id: ?}'), attr["shape"]
    finally:
        store.stop()


def test_a_durable_write_counts_its_wait_for_the_journal(tmp_path):
    """As mongod's durationMillis and opLatencies include the wait for write
    concern (waitForWriteConcernDurationMillis): with every sync 150 ms slower, a
    write with j: true is slow by that wait alone, though it ran in a moment, and
    serverStatus counts the wait in its latency; a write without j waits for no
    sync and its line, if any, names none."""
    store = StoreProcess(tmp_path / "store", extra_args=["--slowms", "100", "--sync-delay", "150ms",
                                                         "--log-format", "json"])
    store.start()
    try:
        with pymongo.MongoClient(store.uri) as client:
            client.shop.create_collection("durable")
            client.shop.plain.insert_one({"_id": 0})
            before = client.admin.command("serverStatus")["opLatencies"]["writes"]
            durable = client.shop.get_collection("durable", write_concern=pymongo.WriteConcern(j=True))
            durable.insert_one({"_id": 1})
            after = client.admin.command("serverStatus")["opLatencies"]["writes"]
        assert after["ops"] - before["ops"] == 1
        assert after["latency"] - before["latency"] >= 150000, (before, after)
        records = [json.loads(line) for line in store.log_path.read_text().splitlines() if line.startswith("{")]
        inserts = [r for r in records if r["msg"].startswith("Slow query: {command}") and
                   r["attr"]["command"] == "insert"]
        durable_lines = [r for r in inserts if r["attr"]["shape"].startswith('{insert: "durable"')]
        assert len(durable_lines) == 1, [r["attr"] for r in inserts]
        attr = durable_lines[0]["attr"]
        assert "waiting for the journal {waitForWriteConcernDurationMillis} ms" in durable_lines[0]["msg"]
        assert attr["waitForWriteConcernDurationMillis"] >= 150, attr
        assert attr["runningMillis"] < 100 and attr["durationMillis"] >= attr["waitForWriteConcernDurationMillis"]
        assert "ninserted 1" in attr["details"], attr
        plain_lines = [r for r in inserts if r["attr"]["shape"].startswith('{insert: "plain"')]
        assert all("waitForWriteConcernDurationMillis" not in r["attr"] for r in plain_lines), plain_lines
    finally:
        store.stop()


def test_slowms_takes_a_whole_number(tmp_path):
    store = StoreProcess(tmp_path / "store", extra_args=["--slowms", "soon"])
    result = subprocess.run(store.command_line(), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "--slowms takes a whole number" in result.stderr
