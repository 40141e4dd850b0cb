"""`thermocline proxy` in front of two `thermocline store` tiers, driven by pymongo.

The tiers are filled directly, as the warmer and the feeder would leave them:
the archive holds every document, the fast tier the recent ones. Each test then
checks where the proxy sent a command (thermoclineStatus and each store's own
log of the operations it ran) and that the client saw what one MongoDB would
have answered."""
import datetime
import re
import time

import subprocess

import pymongo
import pytest
from bson.int64 import Int64
from pymongo import MongoClient

from conftest import ProxyProcess, StoreProcess, proxy_config, wire_command

NOW = datetime.datetime.utcnow().replace(microsecond=0)
OLD = NOW - datetime.timedelta(days=200)


def order(number, created):
    return {"_id": number, "customer": "c%d" % (number % 5), "total": number % 97, "createdAt": created}


@pytest.fixture
def tiers(tmp_path):
    """The two tiers log every operation (--slowms 0), so a test can count the
    finds a client's command caused on each: the proxy's own reads of its
    progress and of the other proxies run on a timer beside them."""
    archive = StoreProcess(tmp_path / "archive", extra_args=["--slowms", "0"]).start()
    fast = StoreProcess(tmp_path / "fast", extra_args=["--slowms", "0"]).start()
    yield archive, fast
    for store_process in (fast, archive):
        if store_process.is_alive():
            store_process.stop()


@pytest.fixture
def proxy(tiers, tmp_path):
    archive, fast = tiers
    # failoverWait: a dead tier's error comes after the proxy's one retry gave up.
    process = ProxyProcess(tmp_path / "proxy", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30d", True)], "failoverWait: 1s\n")).start()
    yield process
    process.stop()


@pytest.fixture
def filled(tiers):
    """400 old orders (archive only) and 300 recent ones (both tiers)."""
    archive, fast = tiers
    old = [order(i, OLD + datetime.timedelta(minutes=i)) for i in range(400)]
    recent = [order(1000 + i, NOW - datetime.timedelta(minutes=i)) for i in range(300)]
    with MongoClient(archive.uri) as client:
        client.shop.orders.insert_many(old + recent)
    with MongoClient(fast.uri) as client:
        client.shop.orders.insert_many(recent)
    return archive, fast


def operations_on_orders(store_process, command, shape):
    """How many `command`s on shop.orders whose logged shape contains `shape`
    (values are logged as ?) the store ran."""
    line = re.compile(r"Slow query: %s on shop .*\{%s: \"orders\".*%s" % (command, command, re.escape(shape)))
    return sum(1 for text in store_process.log_text().splitlines() if line.search(text))


def status(proxy_process):
    with MongoClient(proxy_process.uri) as client:
        return client.admin.command("thermoclineStatus")


def test_hello_presents_a_mongos(proxy):
    reply = wire_command(proxy.port, {"hello": 1, "$db": "admin"})
    assert reply["ok"] == 1
    assert reply["msg"] == "isdbgrid"
    assert reply["isWritablePrimary"] is True
    assert reply["maxWireVersion"] == 17
    assert "topologyVersion" in reply
    with MongoClient(proxy.uri) as client:
        client.admin.command("ping")
        servers = client._topology.description.server_descriptions().values()
        assert [server.server_type_name for server in servers] == ["Mongos"]


def test_recent_reads_go_to_the_fast_tier_and_old_ones_to_the_archive(proxy, filled):
    archive, fast = filled
    with MongoClient(proxy.uri) as client:
        orders = client.shop.orders
        recent = list(orders.find({"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}))
        assert len(recent) == 300
        old = list(orders.find({"createdAt": {"$lt": NOW - datetime.timedelta(days=100)}}))
        assert len(old) == 400
        everything = orders.count_documents({})
        assert everything == 700
    recent_range, old_range = "filter: {createdAt: {$gte: ?}}", "filter: {createdAt: {$lt: ?}}"
    assert operations_on_orders(fast, "find", recent_range) == 1
    assert operations_on_orders(archive, "find", recent_range) == 0
    assert operations_on_orders(archive, "find", old_range) == 1
    assert operations_on_orders(fast, "find", old_range) == 0
    assert operations_on_orders(archive, "aggregate", "pipeline") == 1
    assert operations_on_orders(fast, "aggregate", "pipeline") == 0
    routes = status(proxy)["namespaces"]["shop.orders"]["routes"]
    assert routes["fast"] == 1
    assert routes["archive"] == 2  # the old range and the count


def test_point_reads_count_those_the_archive_answered(proxy, filled):
    """pointReadsFromArchive (and its metric): the finds by _id that went on to
    the archive because the fast tier lacked an id, which bound the tiered read
    latency when the reads reach past the recent window."""
    archive, fast = filled

    def point_reads():
        item = status(proxy)["namespaces"]["shop.orders"]
        return item["routes"]["fast-then-archive"], item["pointReadsFromArchive"]

    with MongoClient(proxy.uri) as client:
        orders = client.shop.orders
        assert point_reads() == (0, 0)
        assert orders.find_one({"_id": 1005})["createdAt"] == NOW - datetime.timedelta(minutes=5)
        assert point_reads() == (1, 0)
        assert orders.find_one({"_id": 7})["_id"] == 7
        assert point_reads() == (2, 1)
        assert sorted(doc["_id"] for doc in orders.find({"_id": {"$in": [8, 9, 1006]}})) == [8, 9, 1006]
        assert point_reads() == (3, 2)
        assert orders.find_one({"_id": 123456}) is None  # in neither tier: the archive has the last word
        assert point_reads() == (4, 3)
    assert operations_on_orders(archive, "find", "filter: {_id: {$in: [") == 3


def test_cursors_from_both_tiers_span_many_batches(proxy, filled):
    with MongoClient(proxy.uri) as client:
        orders = client.shop.orders
        fast_cursor = orders.find({"createdAt": {"$gte": NOW - datetime.timedelta(days=2)}}).sort("_id", 1).batch_size(7)
        archive_cursor = orders.find({"total": {"$gte": 0}}).sort("_id", 1).batch_size(11)
        fast_ids, archive_ids = [], []
        for fast_document, archive_document in zip(fast_cursor, archive_cursor):
            fast_ids.append(fast_document["_id"])
            archive_ids.append(archive_document["_id"])
        fast_ids += [document["_id"] for document in fast_cursor]
        archive_ids += [document["_id"] for document in archive_cursor]
        assert fast_ids == list(range(1000, 1300))
        assert archive_ids == list(range(400)) + list(range(1000, 1300))
        assert client.admin.command("thermoclineStatus")["cursors"] == 0


def test_killed_cursor_and_unknown_cursor(proxy, filled):
    with MongoClient(proxy.uri) as client:
        cursor = client.shop.orders.find({}).batch_size(5)
        next(cursor)
        assert client.admin.command("thermoclineStatus")["cursors"] == 1
        cursor.close()
        assert client.admin.command("thermoclineStatus")["cursors"] == 0
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.command({"getMore": Int64(12345), "collection": "orders"})
        assert raised.value.code == 43


def test_writes_run_on_the_fast_tier_after_faulting_in(proxy, filled):
    archive, fast = filled
    with MongoClient(proxy.uri) as client:
        orders = client.shop.orders
        # Document 7 exists only in the archive: the proxy copies it in first.
        result = orders.update_one({"_id": 7}, {"$set": {"total": -1}})
        assert result.matched_count == 1 and result.modified_count == 1
        # An insert whose _id only the archive holds is a duplicate (I7).
        with pytest.raises(pymongo.errors.DuplicateKeyError):
            orders.insert_one(order(8, NOW))
        orders.insert_one(order(5000, NOW))
    with MongoClient(fast.uri) as client:
        assert client.shop.orders.find_one({"_id": 7})["total"] == -1
        assert client.shop.orders.find_one({"_id": 5000}) is not None
    with MongoClient(archive.uri) as client:
        assert client.shop.orders.find_one({"_id": 7})["total"] == 7  # the feeder's job, not the proxy's
    assert status(proxy)["namespaces"]["shop.orders"]["faultedIn"] >= 2


def test_compressed_clients(proxy, filled):
    for compressor in ("zlib", "snappy"):
        with MongoClient(proxy.uri, compressors=compressor) as client:
            assert client.shop.orders.count_documents({"total": {"$lt": 10}}) > 0


def test_a_dead_tier_gives_a_retryable_error_not_a_hang(proxy, filled):
    archive, fast = filled
    archive.kill9()
    started = time.monotonic()
    with MongoClient(proxy.uri, serverSelectionTimeoutMS=5000) as client:
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.orders.find_one({"total": 3})
        assert raised.value.code == 6  # HostUnreachable: drivers retry it
        # The fast tier still serves what it can answer.
        assert client.shop.orders.count_documents(
            {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}) == 300
    assert time.monotonic() - started < 20
    archive.restart()


def test_bad_config_is_refused_with_file_and_line(tmp_path, tiers):
    archive, fast = tiers
    process = ProxyProcess(tmp_path / "bad", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30 days", True)]))
    completed = subprocess.run(process.command_line(), capture_output=True, text=True, timeout=20)
    assert completed.returncode == 1
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "proxy.yaml:" in lines[0]
