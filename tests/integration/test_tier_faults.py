"""The tier workers under faults, with real processes: kill -9 of the proxy
(feeder included) between the archive's acknowledgement and the checkpoint and
at random moments under load, of the fast tier and of the archive; a write the
archive rejects (a unique key only the archive holds, I7); and the workers run
as their own processes (`thermocline feeder|evictor|warmer`)."""
import datetime
import os
import random
import signal
import subprocess
import threading
import time

import pymongo
import pytest

from conftest import ProxyProcess, StoreProcess, wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import (NS, WorkerProcess, client_for, namespace_status, raw_documents, start_proxy, status,
                          tier_config, track, wait_equal, wait_feeder, wait_warm)


def utc_now():
    now = datetime.datetime.utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def ago(seconds):
    return utc_now() - datetime.timedelta(seconds=seconds)


class Writer(threading.Thread):
    """Inserts and increments through the proxy until stopped, remembering what
    was acknowledged; errors (the proxy being killed) are expected and retried."""

    def __init__(self, uri, first_id=0):
        super().__init__(daemon=True)
        self.uri = uri
        self.next_id = first_id
        self.acknowledged = set()
        self.stop_event = threading.Event()
        self.failures = 0

    def run(self):
        rng = random.Random(self.next_id)
        client = pymongo.MongoClient(self.uri, serverSelectionTimeoutMS=2000, socketTimeoutMS=5000,
                                     retryWrites=False)
        try:
            while not self.stop_event.is_set():
                inserting = not self.acknowledged or rng.random() < 0.5
                try:
                    if inserting:
                        client.shop.orders.insert_one({"_id": self.next_id, "createdAt": utc_now(), "n": 0})
                        self.acknowledged.add(self.next_id)
                        self.next_id += 1
                    else:
                        identifier = rng.choice(sorted(self.acknowledged))
                        client.shop.orders.update_one({"_id": identifier}, {"$inc": {"n": 1}})
                except pymongo.errors.PyMongoError:
                    self.failures += 1
                    if inserting:
                        self.next_id += 1  # it may or may not have happened: never reuse the id
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self):
        self.stop_event.set()
        self.join(20)


def assert_converged(proxy, archive, fast, acknowledged=()):
    """I1 after quiescence: the archive holds exactly what the fast tier holds."""
    wait_feeder(proxy, timeout=40)
    fast_documents, archived = wait_equal(fast, archive, timeout=20)
    assert archived == fast_documents, "the archive differs from the fast tier: %d vs %d documents" % (
        len(archived), len(fast_documents))
    with client_for(archive) as client:
        present = {document["_id"] for document in client.shop.orders.find({}, {"_id": 1})}
    lost = set(acknowledged) - present
    assert not lost, "acknowledged inserts lost: %r" % sorted(lost)[:10]


def test_kill_between_archive_ack_and_checkpoint(replicated_tiers, tmp_path, monkeypatch):
    """The feeder kills its process right after the archive acknowledged a batch,
    before the checkpoint: the restart replays that batch, idempotently."""
    archive, fast = replicated_tiers
    config = tier_config(archive, fast, max_age="1h", coverage="complete")
    proxy = track(ProxyProcess(tmp_path / "proxy", config))
    monkeypatch.setenv("THERMOCLINE_TEST_KILL_AFTER_APPLY", "3")
    proxy.start()
    monkeypatch.delenv("THERMOCLINE_TEST_KILL_AFTER_APPLY")
    client = pymongo.MongoClient(proxy.uri, serverSelectionTimeoutMS=2000, retryWrites=False)
    acknowledged = set()
    for i in range(200):
        try:
            client.shop.orders.insert_one({"_id": i, "createdAt": utc_now(), "n": 0})
            client.shop.orders.update_one({"_id": i}, {"$inc": {"n": 5}, "$push": {"log": i}})
            acknowledged.add(i)
        except pymongo.errors.PyMongoError:
            break
        if not proxy.is_alive():
            break
    client.close()
    assert wait_until(lambda: not proxy.is_alive(), 10), "the test hook did not fire"
    assert proxy.process.returncode == -signal.SIGKILL
    with client_for(fast) as fast_client:
        checkpoint = fast_client.thermocline.feeder.find_one({"_id": "stream"})
    with client_for(archive) as archive_client:
        applied = archive_client.shop.orders.count_documents({})
    assert applied > 0
    proxy.restart()
    assert_converged(proxy, archive, fast, acknowledged)
    with client_for(fast) as fast_client:
        assert fast_client.thermocline.feeder.find_one({"_id": "stream"})["appliedTime"] > checkpoint["appliedTime"]
    with client_for(archive) as archive_client:  # nothing applied twice: $push would show it
        assert all(len(document["log"]) == 1 and document["n"] == 5
                   for document in archive_client.shop.orders.find({"log": {"$exists": True}}))
    proxy.stop()


def test_kill9_of_the_proxy_under_load(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    writer = Writer(proxy.uri)
    writer.start()
    rng = random.Random(3)
    for _ in range(3):
        time.sleep(rng.uniform(0.5, 2.0))
        proxy.kill9()
        time.sleep(rng.uniform(0.1, 0.5))
        proxy.restart()
    time.sleep(1)
    writer.stop()
    assert len(writer.acknowledged) > 30
    assert_converged(proxy, archive, fast, writer.acknowledged)
    proxy.stop()


def test_kill9_of_the_fast_tier_under_load(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"readYourWritesWait": "10s"})
    writer = Writer(proxy.uri)
    writer.start()
    time.sleep(1.5)
    fast.kill9()
    time.sleep(1.0)
    fast.restart()
    time.sleep(1.5)
    writer.stop()
    assert writer.failures > 0 and len(writer.acknowledged) > 20
    assert_converged(proxy, archive, fast, writer.acknowledged)
    proxy.stop()


def test_archive_down_then_back(replicated_tiers, tmp_path):
    """The feeder waits and retries with backoff; writes the fast tier can take
    alone keep landing; lag is visible; nothing is lost when the archive returns."""
    archive, fast = replicated_tiers
    # failoverWait: the insert's error comes once the proxy's one retry gave up.
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"failoverWait": "1s"})
    since = ago(60)
    with client_for(proxy) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": utc_now(), "n": 0} for i in range(50)])
    wait_feeder(proxy)
    archive.kill9()
    with client_for(proxy) as client:
        for _ in range(20):  # inside the horizon: nothing to fault in, no archive needed
            result = client.shop.orders.update_many({"createdAt": {"$gte": since}}, {"$inc": {"n": 1}})
            assert result.modified_count == 50
        with pytest.raises(pymongo.errors.OperationFailure) as raised:  # the archive must vouch for new ids (I7)
            client.shop.orders.insert_one({"_id": 999, "createdAt": utc_now()})
        assert raised.value.code == 6
    time.sleep(3)
    feeder = status(proxy)["workers"]["feeder"]
    assert feeder["archiveReachable"] is False
    assert feeder["lagMillis"] >= 2000
    assert feeder["retries"] >= 2
    assert "archive" in feeder.get("lastError", "")
    assert "unreachable" in proxy.log_text() or "busy" in proxy.log_text()
    archive.restart()
    assert_converged(proxy, archive, fast)
    with client_for(archive) as client:
        assert client.shop.orders.find_one({"_id": 7})["n"] == 20
    assert status(proxy)["workers"]["feeder"]["lagMillis"] == 0
    proxy.stop()


def test_unique_key_only_the_archive_holds_stops_the_feed_loudly(replicated_tiers, tmp_path):
    """What I7 can guarantee for a unique secondary key: the fast tier cannot see an
    archive-only document, so it accepts the insert; the archive then rejects its
    replay. That write is never dropped: the namespace's feed stops with a specific
    error (status, log), reads that need the archive fail instead of answering stale
    data, and after the conflict is resolved a restart applies it."""
    archive, fast = replicated_tiers
    for process in (archive, fast):
        with client_for(process) as client:
            client.shop.orders.create_index("email", unique=True)
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": 1, "email": "a@example.com", "createdAt": ago(7200)})
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": 2, "email": "a@example.com", "createdAt": utc_now()})
        client.shop.orders.insert_one({"_id": 3, "email": "b@example.com", "createdAt": utc_now()})
    assert wait_until(lambda: namespace_status(proxy)["feeder"]["state"] == "stopped", 15, 0.1)
    error = namespace_status(proxy)["feeder"]["error"]
    assert "rejected" in error and "shop.orders" in error and "11000" in error
    assert "rejected the replay" in proxy.log_text()
    with client_for(proxy) as client:
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.orders.count_documents({"email": "b@example.com"})
        assert raised.value.code == 96 and "feeder stopped" in str(raised.value)
        # Reads the fast tier answers still work.
        assert client.shop.orders.count_documents({"createdAt": {"$gte": ago(60)}}) == 2
    with client_for(fast) as client:
        assert client.thermocline.feeder.find_one({"_id": "stopped:shop.orders"}) is not None
    proxy.stop()
    # The operator resolves the conflict in the archive, then restarts.
    with client_for(archive) as client:
        client.shop.orders.update_one({"_id": 1}, {"$set": {"email": "old@example.com"}})
    proxy.restart()
    assert wait_until(lambda: namespace_status(proxy)["feeder"]["state"] == "running", 15, 0.1)
    # A restarted proxy has seen no write of its own to wait for: watch the archive.
    with client_for(archive) as client:
        emails = lambda: {document["_id"]: document["email"] for document in client.shop.orders.find()}  # noqa: E731
        assert wait_until(lambda: emails() == {1: "old@example.com", 2: "a@example.com", 3: "b@example.com"}, 15,
                          0.1), emails()
    with client_for(fast) as client:
        assert wait_until(lambda: client.thermocline.feeder.find_one({"_id": "stopped:shop.orders"}) is None, 10)
    proxy.stop()


def test_listings_wait_for_the_feeder(replicated_tiers, tmp_path):
    """listDatabases and listCollections, which the archive answers, wait for the
    feeder to apply the writes acknowledged before them, as reads do (I5): past
    readYourWritesWait they fail with a retryable error instead of leaving out the
    database or collection the client has just created through the proxy."""
    archive, fast = replicated_tiers
    top = {"feederEnabled": "false", "readYourWritesWait": "1s"}
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete", top=top)
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()})
        for listing in (client.list_database_names, client.shop.list_collection_names):
            with pytest.raises(pymongo.errors.OperationFailure) as raised:
                listing()
            assert raised.value.code == 262 and "read-your-writes" in str(raised.value)
        # A database without tiered namespaces lives in the archive alone: no wait.
        client.other.things.insert_one({})
        assert client.other.list_collection_names() == ["things"]
    feeder = track(WorkerProcess(tmp_path / "feeder", tier_config(archive, fast, max_age="1h"), "feeder")).start()
    try:
        with client_for(proxy) as client:
            def listed():
                try:
                    return "shop" in client.list_database_names() and "orders" in client.shop.list_collection_names()
                except pymongo.errors.OperationFailure:
                    return False
            assert wait_until(listed, 20, 0.2)
    finally:
        feeder.stop()
        proxy.stop()


def test_workers_as_their_own_processes(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": ago(i % 20), "n": 0} for i in range(200)])
    top = {"feederEnabled": "false", "evictorEnabled": "false", "warmerEnabled": "false",
           "readYourWritesWait": "10s"}
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="10s", slack="1s", top=top)
    workers = [track(WorkerProcess(tmp_path / name, tier_config(archive, fast, max_age="10s", slack="1s"), name)).start()
               for name in ("feeder", "evictor", "warmer")]
    try:
        wait_warm(proxy)  # the warmer's progress, polled from the fast tier
        with client_for(proxy) as client:
            for i in range(20):
                client.shop.orders.update_one({"_id": i}, {"$inc": {"n": 1}})
                assert client.shop.orders.count_documents({"n": {"$gte": 1}}) == i + 1  # read-your-writes
        item = namespace_status(proxy)
        assert item["readsFailedWaitingForFeeder"] == 0
        assert status(proxy)["workers"]["feeder"]["runningHere"] is False
        with client_for(fast) as client:  # the evictor keeps the window
            assert wait_until(lambda: client.shop.orders.count_documents({"createdAt": {"$lt": ago(12)}}) == 0,
                              15, 0.2)
        assert len(raw_documents(archive)) == 200
    finally:
        for worker in workers:
            worker.stop()  # SIGTERM: exit status 0, no sanitizer report
        proxy.stop()


def test_kill9_during_the_warm_resumes_where_it_stopped(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": ago(i * 0.1), "n": i, "pad": "p" * 200}
                                        for i in range(6000)])
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", slack="1m")
    assert wait_until(lambda: namespace_status(proxy)["warmer"]["copied"] >= 800, 30, 0.05)
    proxy.kill9()
    with client_for(fast) as client:
        position = client.thermocline.warmer.find_one({"_id": NS})
    assert position["complete"] is False and position["copied"] >= 800
    proxy.restart()
    wait_warm(proxy, timeout=40)
    copied = namespace_status(proxy)["warmer"]["copied"]
    assert 6000 <= copied <= 6000 + 1000  # resumed: at most the interrupted batch again
    with client_for(fast) as client:
        assert client.shop.orders.count_documents({}) == 6000
    proxy.stop()
