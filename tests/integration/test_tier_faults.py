"""The tier workers under faults, with real processes: kill -9 of the proxy
(feeder included) between the archive's acknowledgement and the checkpoint and
at random moments under load, of the fast tier and of the archive; a write the
archive refuses (a unique key only the archive holds, I7, I8); and the workers run
as their own processes (`thermocline feeder|evictor|warmer`)."""
import datetime
import os
import random
import re
import signal
import threading
import time

import bson
import pymongo
import pytest

from conftest import ProxyProcess, wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import (NS, WorkerProcess, client_for, documents_by_id, namespace_status, raw_documents,
                          start_proxy, status, tier_config, track, wait_equal, wait_feeder, wait_warm)
from tier_support import utc_now, ago, evict_mark


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
    # The restarted feeder replays the batch the kill left unrecorded and records it.
    # (No write went through the restarted proxy, so its wait_feeder does not wait
    # for that: the archive already held the batch.)
    with client_for(fast) as fast_client:
        def checkpointed():
            return fast_client.thermocline.feeder.find_one({"_id": "stream"})["appliedTime"]
        assert wait_until(lambda: checkpointed() > checkpoint["appliedTime"], 20, 0.1), \
            (checkpointed(), checkpoint["appliedTime"])
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


def test_archive_away_what_needs_it_fails_within_failover_wait(replicated_tiers, tmp_path):
    """With the archive killed, writes to documents the fast tier holds and window
    reads go on; what needs the archive (an update of an archive-only document, a
    read the planner sends there) fails with a retryable HostUnreachable once
    failoverWait is spent, not after readYourWritesWait; after the archive returns
    the same update succeeds and the archive has every write."""
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": "old", "createdAt": ago(2 * 86400), "n": 0})
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"failoverWait": "1s", "readYourWritesWait": "60s"})
    with client_for(proxy) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": utc_now(), "n": 0} for i in range(10)])
    wait_feeder(proxy)
    archive.kill9()
    with pymongo.MongoClient(proxy.uri, serverSelectionTimeoutMS=10000, retryWrites=False,
                             retryReads=False) as client:
        orders = client.shop.orders
        assert orders.delete_one({"_id": 9}).deleted_count == 1  # the feeder is now behind on a delete
        assert orders.update_one({"_id": 1}, {"$inc": {"n": 1}}).modified_count == 1
        assert len(list(orders.find({"createdAt": {"$gte": ago(600)}}))) == 9
        for attempt in (lambda: orders.update_one({"_id": "old"}, {"$inc": {"n": 1}}),
                        lambda: list(orders.find({"n": {"$gte": 0}}))):
            started = time.monotonic()
            with pytest.raises(pymongo.errors.OperationFailure) as raised:
                attempt()
            elapsed = time.monotonic() - started
            assert raised.value.code == 6, raised.value.details
            assert "archive is unreachable" in str(raised.value) or "unreachable" in str(raised.value)
            assert elapsed < 30, "waited %.1f s: readYourWritesWait (60 s), not failoverWait (1 s)" % elapsed
    archive.restart()
    with client_for(proxy) as client:
        assert client.shop.orders.update_one({"_id": "old"}, {"$inc": {"n": 1}}).modified_count == 1
    wait_feeder(proxy, timeout=40)
    with client_for(archive) as client:  # "old" may have been evicted again since: only the archive is sure
        expected = {i: 0 for i in range(9)}
        expected.update({1: 1, "old": 1})
        assert {d["_id"]: d["n"] for d in client.shop.orders.find()} == expected
    proxy.stop()


def test_unique_key_only_the_archive_holds_holds_only_that_document_loudly(replicated_tiers, tmp_path):
    """What I7 can guarantee for a unique key the proxy does not check at write time
    (here one a bulk write's second statement computes from what its first one set:
    the proxy computes keys from the document before the write) that only the
    archive holds: the archive
    refuses the replay. That write is never dropped, and it holds only its document
    (I8): it is recorded in thermocline.refusals, shows in the status and the log,
    the namespace's feed goes on (reads that need the archive still work), and after
    the conflict is resolved a restart (every feeder start retries) applies it.
    test_tier_refusals.py has the rest."""
    archive, fast = replicated_tiers
    for process in (archive, fast):
        with client_for(process) as client:
            client.shop.orders.create_index("seq", unique=True)
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": 1, "seq": 1, "createdAt": ago(7200)})
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": 2, "seq": 0, "createdAt": utc_now()})
        with client_for(archive) as archive_client:
            assert wait_until(lambda: archive_client.shop.orders.find_one({"_id": 2}) is not None, 15, 0.1)
        client.shop.orders.bulk_write([
            pymongo.UpdateOne({"_id": 2}, {"$set": {"base": 1}}),
            pymongo.UpdateOne({"_id": 2}, [{"$set": {"seq": {"$ifNull": ["$base", 0]}}}])])
        client.shop.orders.insert_one({"_id": 3, "seq": 3, "createdAt": utc_now()})
    assert wait_until(lambda: namespace_status(proxy)["feeder"]["refusals"]["count"] == 1, 15, 0.1)
    feeder = namespace_status(proxy)["feeder"]
    assert feeder["state"] == "running"
    assert feeder["refusals"]["sample"][0]["_id"] == 2 and feeder["refusals"]["sample"][0]["code"] == 11000
    assert "refused the replay" in proxy.log_text()
    with client_for(proxy) as client:
        # The feed goes on: a read the archive answers sees document 3.
        assert client.shop.orders.count_documents({"seq": 3}) == 1
        assert client.shop.orders.count_documents({"createdAt": {"$gte": ago(60)}}) == 2
    with client_for(fast) as client:
        assert client.thermocline.refusals.find_one({"id": 2, "code": 11000}) is not None
        assert client.thermocline.feeder.find_one({"_id": "stopped:shop.orders"}) is None
    proxy.stop()
    # The operator resolves the conflict in the archive, then restarts.
    with client_for(archive) as client:
        client.shop.orders.update_one({"_id": 1}, {"$set": {"seq": 100}})
    proxy.restart()
    # A restarted proxy has seen no write of its own to wait for: watch the archive.
    with client_for(archive) as client:
        keys = lambda: {document["_id"]: document["seq"] for document in client.shop.orders.find()}  # noqa: E731
        assert wait_until(lambda: keys() == {1: 100, 2: 1, 3: 3}, 15, 0.1), keys()
    with client_for(fast) as client:
        assert wait_until(lambda: client.thermocline.refusals.count_documents({}) == 0, 10)
    assert namespace_status(proxy)["feeder"]["refusals"]["count"] == 0
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
    # Progress in thermoclineStatus: copied and the estimate of what remains.
    warmer = namespace_status(proxy)["warmer"]
    assert warmer["remainingEstimate"] == 6000 - warmer["copied"], warmer
    proxy.kill9()
    with client_for(fast) as client:
        position = client.thermocline.warmer.find_one({"_id": NS})
        held = {document["_id"] for document in client.shop.orders.find({}, {"_id": 1})}
    assert position["complete"] is False and position["copied"] >= 800
    assert held == set(range(len(held))), "not copied newest first"  # _id i is i/10 s old
    proxy.restart()
    wait_warm(proxy, timeout=40)
    warmer = namespace_status(proxy)["warmer"]
    # Resumed, not started over: the interrupted batch is copied again at most once
    # (its copies that landed before the kill count as duplicates, not copies).
    assert 6000 - 1000 <= warmer["copied"] <= 6000 + 1000, warmer
    assert warmer["remainingEstimate"] == 0
    with client_for(fast) as client:
        assert client.shop.orders.count_documents({}) == 6000
    # Progress lines in the log: the start of the pass, then copied of the estimate.
    assert "shop.orders: warming the window (about 6000 documents), newest first" in proxy.log_text(0)
    assert re.search(r"shop\.orders: copied \d+ of about 6000 documents of the window \(\d+/s",
                     proxy.log_text()), proxy.log_tail()
    proxy.stop()


@pytest.mark.parametrize("archive_first", [False, True], ids=["copy-read-again", "delete-fed-first"])
def test_warm_batch_killed_after_its_copies_landed_is_checked_again(replicated_tiers, tmp_path, monkeypatch,
                                                                     archive_first):
    """I6 across a warmer crash: a client deletes a document the archive still holds
    (the feeder lags), the warmer copies it back from the archive and is killed
    before it finished the copy's mark and checked the deletes. The feeder must not
    replay the copy into the archive after the delete, and the restarted warmer
    must remove the copy: whether its retried batch reads the document again (the
    feeder still behind: the insert is refused as a duplicate, yet the deletes since
    the first attempt are checked) or no longer (delete-fed-first: the feeder applied
    the delete before the warmer came back)."""
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_many([{"_id": "x", "createdAt": ago(-60), "n": 0},
                                        {"_id": "y", "createdAt": ago(-30), "n": 0}])
    config = tier_config(archive, fast, max_age="1h", slack="1m")
    feeder = track(WorkerProcess(tmp_path / "feeder", config, "feeder")).start()
    with client_for(fast) as client:
        assert wait_until(lambda: (client.thermocline.feeder.find_one({"_id": "stream"}) or {}).get("appliedTime"),
                          30, 0.1)
    feeder.process.send_signal(signal.SIGSTOP)  # the archive does not learn of the delete yet
    top = {"feederEnabled": "false", "evictorEnabled": "false", "warmerEnabled": "false"}
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", slack="1m", top=top)
    try:
        with client_for(proxy) as client:
            assert client.shop.orders.delete_one({"_id": "x"}).deleted_count == 1
        monkeypatch.setenv("THERMOCLINE_TEST_KILL_AFTER_COPY", "1")
        warmer = track(WorkerProcess(tmp_path / "warmer", config, "warmer"))
        warmer.wait_ready = lambda timeout=None: None  # it may kill itself at once
        warmer.start()
        monkeypatch.delenv("THERMOCLINE_TEST_KILL_AFTER_COPY")
        assert wait_until(lambda: not warmer.is_alive(), 20, 0.1), "the test hook did not fire"
        assert warmer.process.returncode == -signal.SIGKILL
        with client_for(fast) as client:  # the copy landed after the delete
            assert client.shop.orders.find_one({"_id": "x"}) is not None
        feeder.process.send_signal(signal.SIGCONT)
        if archive_first:
            with client_for(archive) as client:
                assert wait_until(lambda: client.shop.orders.find_one({"_id": "x"}) is None, 30, 0.1)
        warmer.restart()
        with client_for(fast) as client:
            assert wait_until(lambda: (client.thermocline.warmer.find_one({"_id": NS}) or {}).get("complete"),
                              30, 0.1), "the warm did not complete"
        with client_for(proxy) as client:  # a later write: once it is in the archive, the feeder is past the copy
            client.shop.orders.insert_one({"_id": "z", "createdAt": utc_now(), "n": 0})
        with client_for(archive) as client:
            assert wait_until(lambda: client.shop.orders.find_one({"_id": "z"}) is not None, 30, 0.1)
        assert "x" not in documents_by_id(archive), "the feeder replayed the copy after the delete"
        assert "x" not in documents_by_id(fast), "the copy of a deleted document stayed in the fast tier"
        assert set(documents_by_id(fast)) == {"y", "z"}
        warmer.stop()
    finally:
        if feeder.is_alive():
            feeder.process.send_signal(signal.SIGCONT)
            feeder.stop()
        proxy.stop()


def test_an_eviction_whose_range_was_not_recorded_is_settled_by_the_feeder(replicated_tiers, tmp_path, monkeypatch):
    """The evictor deleted a document but could not record the delete's range (the
    fast tier lost at that moment: a test hook fails that write). The mark says
    "committed", written in the delete's own transaction: the feeder waits a moment
    for the range, then takes the first delete after the mark's since for the
    eviction and writes the range itself, so the document's next delete is a
    client's again. The batch's other marks, left pending, are removed before the
    next batch (their documents were never deleted). The eviction never reaches the
    archive (I3), the client's later delete does (I1)."""
    archive, fast = replicated_tiers
    monkeypatch.setenv("THERMOCLINE_TEST_FAIL_EVICT_MARK", "1")
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="2s", coverage="complete",
                        top={"readYourWritesWait": "8s"})
    monkeypatch.delenv("THERMOCLINE_TEST_FAIL_EVICT_MARK")
    with client_for(proxy) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": ago(1.5), "n": i} for i in range(50)])
    with client_for(fast) as client:
        assert wait_until(lambda: client.shop.orders.count_documents({}) == 0, 20, 0.1), "the eviction stalled"
    assert "THERMOCLINE_TEST_FAIL_EVICT_MARK" in proxy.log_text()
    assert "left unfinished" in proxy.log_text()
    with client_for(fast) as client:
        marks = client.thermocline.workerWrites
        assert wait_until(lambda: marks.count_documents({"_id.op": "evict", "state": {"$ne": "done"}}) == 0, 10, 0.1), \
            list(marks.find({"_id.op": "evict", "state": {"$ne": "done"}}))
    assert "the range is written now" in proxy.log_text()
    # Reads sent to the archive wait for the feeder (no driver retry: one wait of 8 s).
    with pymongo.MongoClient(proxy.uri, serverSelectionTimeoutMS=10000, retryReads=False) as client:
        client.shop.orders.update_one({"_id": 7}, {"$set": {"seen": True}})  # faulted in, then updated
        assert client.shop.orders.count_documents({"seen": True}) == 1
        assert client.shop.orders.count_documents({}) == 50
        assert client.shop.orders.delete_many({"_id": {"$lt": 5}}).deleted_count == 5  # faulted in, deleted
    wait_feeder(proxy)
    with client_for(archive) as client:
        assert client.shop.orders.count_documents({}) == 45
    proxy.stop()


KILL_HOOKS = {"before its transaction": "THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE",
              "inside its transaction": "THERMOCLINE_TEST_KILL_IN_EVICT_TRANSACTION"}


@pytest.mark.parametrize("moment", list(KILL_HOOKS))
def test_an_eviction_killed_before_its_commit_never_takes_a_clients_delete_for_its_own(replicated_tiers, tmp_path,
                                                                                      monkeypatch, moment):
    """The evictor's process dies after marking a document for eviction and before
    its delete committed: before its transaction began, or inside it, the delete
    sent (the transaction left open holds the document). A client deletes that
    document through the proxy; the next evictor finds it gone. That delete is the
    client's: the feeder replays it and the archive loses the document (I1), where
    taking "gone" for "evicted" let the feeder skip it (a clean-clone CI's kill -9
    of the fast tier once brought an acknowledged delete back this way). A
    transaction left open is aborted by the next evictor (killSessions), not left
    to hold the document for transactionLifetimeLimitSeconds."""
    archive, fast = replicated_tiers
    top = {"evictorEnabled": "false", "leaseTimeout": "2s", "readYourWritesWait": "10s"}
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="2s", coverage="complete", top=top)
    with client_for(proxy) as client:
        client.shop.orders.insert_many([{"_id": i, "createdAt": ago(10), "n": i} for i in range(3)])  # one batch
    wait_feeder(proxy)
    evictor_config = tier_config(archive, fast, max_age="2s", coverage="complete", top={"leaseTimeout": "2s"})
    monkeypatch.setenv(KILL_HOOKS[moment], "1")
    evictor = track(WorkerProcess(tmp_path / "evictor", evictor_config, "evictor")).start()
    monkeypatch.delenv(KILL_HOOKS[moment])
    assert wait_until(lambda: not evictor.is_alive(), 20, 0.1), "the test hook did not fire"
    assert evictor.process.returncode == -signal.SIGKILL
    with client_for(fast) as client:
        pending = [mark["_id"]["id"] for mark in client.thermocline.workerWrites.find(
            {"_id.op": "evict", "state": "pending"})]
        assert sorted(pending) == [0, 1, 2], "the evictor died before marking its batch"
        assert client.shop.orders.count_documents({}) == 3, "a delete committed before the hook"
    successor = None
    try:
        if moment == "inside its transaction":  # the open transaction holds the document until aborted
            successor = track(WorkerProcess(tmp_path / "successor", evictor_config, "evictor")).start()
        with client_for(proxy) as client:  # waits out the dead evictor's intent
            assert client.shop.orders.delete_one({"_id": 1}).deleted_count == 1
        if successor is None:
            successor = track(WorkerProcess(tmp_path / "successor", evictor_config, "evictor")).start()
        with client_for(fast) as client:
            assert wait_until(lambda: client.shop.orders.count_documents({}) == 0, 20, 0.1), \
                "the next evictor did not evict the rest"
        with client_for(proxy) as client:  # a write, for the feeder to be waited for past the delete
            client.shop.orders.insert_one({"_id": "last", "createdAt": utc_now(), "n": 0})
        wait_feeder(proxy)
        assert set(documents_by_id(archive)) == {0, 2, "last"}, \
            "the client's acknowledged delete did not reach the archive"
    finally:
        if successor is not None:
            successor.stop()
        proxy.stop()


def test_an_eviction_intent_names_only_the_documents_its_batch_may_delete(replicated_tiers, tmp_path, monkeypatch):
    """Documents whose last eviction is unsettled (its mark still committed) are
    refused their new mark and never deleted by the batch, so they stay out of its
    intent: a client's write to one does not wait for that batch. The evictor dies
    before its first delete, its intent written, for the intent to be read."""
    archive, fast = replicated_tiers
    since = bson.Timestamp(int(time.time()) - 5, 1)
    with client_for(fast) as client:
        client.thermocline.workerWrites.insert_many(
            [evict_mark(i, "committed", since, history=[]) for i in range(3)])
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="2s", coverage="complete",
                        top={"evictorEnabled": "false"})
    try:
        with client_for(proxy) as client:
            client.shop.orders.insert_many([{"_id": i, "createdAt": ago(10), "n": i} for i in range(6)])  # one batch
        wait_feeder(proxy)
        monkeypatch.setenv("THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE", "1")
        evictor = track(WorkerProcess(tmp_path / "evictor", tier_config(archive, fast, max_age="2s",
                                                                         coverage="complete"), "evictor"))
        evictor.wait_ready = lambda timeout=None: None  # it may kill itself at once
        evictor.start()
        monkeypatch.delenv("THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE")
        assert wait_until(lambda: not evictor.is_alive(), 20, 0.1), "the test hook did not fire"
        assert evictor.process.returncode == -signal.SIGKILL
        with client_for(fast) as client:
            intents = [sorted(intent["ids"]) for intent in client.thermocline.evictions.find()]
            assert intents == [[3, 4, 5]], intents
            assert client.shop.orders.count_documents({}) == 6
        with client_for(proxy) as client:
            assert client.shop.orders.update_one({"_id": 0}, {"$set": {"n": -1}}).modified_count == 1
        with client_for(fast) as client:  # the write did not wait for the dead evictor's intent to lapse
            alive = {"$expr": {"$gt": [{"$add": ["$at", "$lifetimeMillis"]}, "$$NOW"]}}
            assert client.thermocline.evictions.count_documents(alive) == 1
    finally:
        proxy.stop()


class ChurnWriter(threading.Thread):
    """Inserts (a third of them older than maxAge, evicted at once), increments,
    refreshes the time field of and deletes documents through the proxy, the
    seeded ones included, until stopped. Only what was acknowledged is asserted:
    an operation that failed may or may not have happened, so its document's
    count of increments gets a range, and a document whose insert or delete
    failed is left out of the checks."""

    def __init__(self, uri, seed, seeded_ids, first_id, max_age):
        super().__init__(daemon=True)
        self.uri = uri
        self.rng = random.Random(seed)
        self.max_age = max_age
        self.next_id = first_id
        self.live = list(seeded_ids)          # ids the writer may touch
        self.inserted = set()                 # acknowledged inserts
        self.deleted = set()                  # acknowledged deletes
        self.uncertain = set()                # an insert or a delete that failed
        self.increments = {}                  # id -> [acknowledged, failed]
        self.counts = {}
        self.anomalies = []                   # acknowledged replies that contradict what was acknowledged
        self.stop_event = threading.Event()

    def step(self, orders):
        roll = self.rng.random()
        if roll < 0.35 or not self.live:
            identifier = self.next_id
            self.next_id += 1
            try:
                orders.insert_one({"_id": identifier, "createdAt": ago(self.rng.uniform(0, self.max_age * 1.5)),
                                   "n": 0})
            except pymongo.errors.PyMongoError:
                self.uncertain.add(identifier)
                raise
            self.inserted.add(identifier)
            self.live.append(identifier)
            return "insert"
        position = self.rng.randrange(len(self.live))
        identifier = self.live[position]
        if roll < 0.65:
            tally = self.increments.setdefault(identifier, [0, 0])
            try:
                matched = orders.update_one({"_id": identifier}, {"$inc": {"n": 1}}).matched_count
            except pymongo.errors.PyMongoError:
                tally[1] += 1
                raise
            if matched != 1:
                self.anomalies.append(("increment matched %d" % matched, identifier))
            tally[0] += 1
            return "increment"
        if roll < 0.75:  # back into the window (a fault-in when it was evicted)
            orders.update_one({"_id": identifier}, {"$set": {"createdAt": utc_now()}})
            return "refresh"
        self.live[position] = self.live[-1]
        self.live.pop()
        try:
            deleted = orders.delete_one({"_id": identifier}).deleted_count
        except pymongo.errors.PyMongoError:
            self.uncertain.add(identifier)
            raise
        if deleted != 1:
            self.anomalies.append(("delete removed %d" % deleted, identifier))
        self.deleted.add(identifier)
        return "delete"

    def run(self):
        client = pymongo.MongoClient(self.uri, serverSelectionTimeoutMS=2000, socketTimeoutMS=5000,
                                     retryWrites=False)
        try:
            while not self.stop_event.is_set():
                try:
                    kind = self.step(client.shop.orders)
                except pymongo.errors.PyMongoError:
                    kind = "failed"
                    time.sleep(0.05)
                self.counts[kind] = self.counts.get(kind, 0) + 1
        finally:
            client.close()

    def stop(self):
        self.stop_event.set()
        self.join(20)
        assert not self.is_alive(), "the writer did not stop"


def insert_until_acknowledged(proxy, document, timeout=30):
    """A write after the faults, for the feeder to be waited for (retried: the
    tier that was killed may still be coming back)."""
    errors = []
    with client_for(proxy) as client:
        def inserted():
            try:
                client.shop.orders.insert_one(dict(document))
                return True
            except pymongo.errors.DuplicateKeyError:
                return True  # an attempt that failed did land
            except pymongo.errors.PyMongoError as error:
                errors.append(str(error))
                return False
        assert wait_until(inserted, timeout, 0.2), "no write went through after the faults: %s\n%s" % (
            errors[-1:], proxy.log_tail(30))


FAULT_MAX_AGE_SECONDS = 3
FAULT_SLACK_SECONDS = 0.5
PIN_LIFETIME_SECONDS = 2 * (10 + 10 + 1) + 5


def pins_left(fast):
    with client_for(fast) as client:
        return list(client.thermocline.pins.find({}, {"_id": 1, "holder": 1, "at": 1, "lifetimeMillis": 1}))


@pytest.mark.parametrize("victim", ["proxy", "fast", "archive"])
def test_kill9_at_random_moments_with_every_worker_running(replicated_tiers, tmp_path, victim):
    """kill -9 of one process (the proxy with its workers, the fast tier or the
    archive) at random moments while a writer inserts, updates and deletes, the
    warmer copies a window seeded in the archive and the evictor removes what
    crosses maxAge (3 s): after a restart and quiescence, every acknowledged
    insert is in the archive with its acknowledged increments, no acknowledged
    delete is in either tier, the fast tier holds exactly the window, each
    document in the archive's version, and the archive nothing more than the
    fast tier plus what was evicted (I1, I2, I3, I6)."""
    archive, fast = replicated_tiers
    # TIER_FAULT_SEED=N shifts the kill moments and the writer's choices (by hand: many seeds).
    seed = {"proxy": 21, "fast": 22, "archive": 23}[victim] + 100 * int(os.environ.get("TIER_FAULT_SEED", "0"))
    rng = random.Random(seed)
    # A window the warmer copies while the faults happen (future times: it stays in
    # the window for the whole test), and old documents it must leave alone.
    seeded = [{"_id": i, "createdAt": ago(-rng.uniform(60, 120)), "n": 0} for i in range(600)]
    seeded += [{"_id": 600 + i, "createdAt": ago(rng.uniform(3600, 7200)), "n": 0} for i in range(400)]
    with client_for(archive) as client:
        client.shop.orders.create_index("createdAt")
        client.shop.orders.insert_many(seeded)
    top = {"readYourWritesWait": "10s", "failoverWait": "1s", "warmerRateLimit": 200}
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="%ds" % FAULT_MAX_AGE_SECONDS,
                        slack="%dms" % (FAULT_SLACK_SECONDS * 1000), evictor_period="200ms", top=top)
    process = {"proxy": proxy, "fast": fast, "archive": archive}[victim]
    writer = ChurnWriter(proxy.uri, seed, [document["_id"] for document in seeded], 10000, FAULT_MAX_AGE_SECONDS)
    writer.start()
    try:
        for _ in range(2):
            time.sleep(rng.uniform(0.3, 2.0))
            process.process.kill()
            assert process.process.wait(10) == -signal.SIGKILL
            process.kill9()
            time.sleep(rng.uniform(0.2, 1.5))
            process.restart()
        time.sleep(1.5)
    finally:
        writer.stop()
    assert not writer.anomalies, "replies contradict earlier acknowledgements: %r" % writer.anomalies[:10]
    assert writer.counts.get("insert", 0) > 10 and writer.counts.get("delete", 0) > 5, writer.counts

    # Quiescence: a last write, the feeder past it, the warm finished, the evictor done.
    insert_until_acknowledged(proxy, {"_id": "last", "createdAt": utc_now(), "n": 0})
    writer.inserted.add("last")
    wait_feeder(proxy, timeout=40)
    wait_warm(proxy, timeout=40)

    def fast_holds_nothing_too_old():
        limit = ago(FAULT_MAX_AGE_SECONDS + 1.5)
        with client_for(fast) as client:
            return client.shop.orders.count_documents({"createdAt": {"$lt": limit}}) == 0
    # A killed proxy's pins (a fault-in or a write by filter in flight) hold eviction
    # until they expire: 2 x (leaseTimeout 10 s + readYourWritesWait 10 s +
    # failoverWait 1 s) + 5 s (tier/pins.h), on top of the evictor's own catching up.
    evict_wait = 20 + (PIN_LIFETIME_SECONDS if victim == "proxy" else 0)
    assert wait_until(fast_holds_nothing_too_old, evict_wait, 0.2), \
        ("the evictor did not catch up", status(proxy)["workers"]["evictor"], pins_left(fast))
    wait_feeder(proxy, timeout=20)

    now = utc_now()
    with client_for(fast) as client:
        held = {document["_id"]: document for document in client.shop.orders.find()}
    archived = documents_by_id(archive)
    context = "%s killed; writer %r" % (victim, writer.counts)

    lost = sorted(writer.inserted - writer.deleted - writer.uncertain - set(archived), key=repr)
    assert not lost, "%s: acknowledged inserts lost: %r" % (context, lost[:10])
    back = sorted(writer.deleted & (set(archived) | set(held)), key=repr)
    assert not back, "%s: acknowledged deletes came back: %r" % (context, back[:10])
    wrong = [(identifier, archived[identifier]["n"], tally) for identifier, tally in writer.increments.items()
             if identifier in archived and not tally[0] <= archived[identifier]["n"] <= tally[0] + tally[1]]
    assert not wrong, "%s: increments lost or applied twice (id, n, [acknowledged, failed]): %r" % (
        context, wrong[:10])
    # The fast tier: a subset of the archive, each document in the archive's version...
    stale = [identifier for identifier, document in held.items()
             if bson.encode(archived.get(identifier, {})) != bson.encode(document)]
    assert not stale, "%s: the fast tier holds deleted or old versions: %r" % (context, stale[:10])
    # ...holding the whole window, and nothing older than it (the rest: evicted).
    horizon = now - datetime.timedelta(seconds=FAULT_MAX_AGE_SECONDS - FAULT_SLACK_SECONDS)
    missing = sorted((identifier for identifier, document in archived.items()
                      if document["createdAt"] >= horizon and identifier not in held), key=repr)
    assert not missing, "%s: window documents missing from the fast tier: %r" % (context, missing[:10])
    too_old = now - datetime.timedelta(seconds=FAULT_MAX_AGE_SECONDS + 1.5)
    lingering = sorted((identifier for identifier, document in held.items() if document["createdAt"] < too_old),
                       key=repr)
    assert not lingering, "%s: documents older than the window not evicted: %r" % (context, lingering[:10])
    evicted = [identifier for identifier in writer.inserted - writer.deleted - writer.uncertain
               if identifier not in held]
    assert evicted, "%s: nothing crossed the window during the test" % context
    proxy.stop()
