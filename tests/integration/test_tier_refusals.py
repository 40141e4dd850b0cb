"""I8: one write the archive refuses degrades one document, never a namespace.
The conflict is a unique key only the archive holds, reached by a bulk write
whose second statement computes the key from what its first one set: the proxy
checks at write time the keys a write sets or computes (test_tier_real_collections.py),
but computes each statement's from the document as it was before the write (a
limit, src/proxy/README.md), so the fast tier takes the write and the archive
refuses the feeder's replay. Then the
feeder records it (thermocline.refusals), queues that document's later writes
behind it, keeps feeding and evicting every other document, shows it (log,
thermoclineStatus), never evicts the held document, and after the operator fixes
the cause, thermoclineRetryRefusals brings the archive to what one MongoDB would
hold (an oracle store that got the same operations). A kill -9 of the proxy while
a refusal stands loses nothing."""

import pymongo

from conftest import StoreProcess, wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, documents_by_id, namespace_status, start_proxy, track
from tier_support import utc_now, ago


def refusals(proxy):
    return namespace_status(proxy)["feeder"]["refusals"]


def ids_in(process):
    with client_for(process) as client:
        return {document["_id"] for document in client.shop.orders.find({}, {"_id": 1})}


def start(replicated_tiers, tmp_path):
    """The tiers prepared (below), an oracle store and a proxy with every worker and
    maxAge 4 s: (archive, fast, oracle, proxy)."""
    archive, fast = replicated_tiers
    oracle = track(StoreProcess(tmp_path / "oracle")).start()
    prepare(archive, fast, oracle)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="4s", slack="500ms", coverage="complete")
    return archive, fast, oracle, proxy


def prepare(archive, fast, oracle):
    """A unique key on seq in both tiers (and the oracle), and an old archive
    document holding seq 1 that only the archive has."""
    for process in (archive, fast, oracle):
        with client_for(process) as client:
            client.shop.orders.create_index("seq", unique=True, sparse=True)
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": "old", "seq": 1, "createdAt": ago(7200)})


def refused_increment(proxy, archive, client, truth, **fields):
    """Document 1 with seq 0, replayed; then one bulk write sets base 1 and seq to
    base (0 before the write, so the proxy finds no conflict to fault in): seq 1,
    the archive's old key. The fast tier takes it, the archive refuses its replay."""
    both(client, truth, "insert_one", dict({"_id": 1, "seq": 0, "createdAt": utc_now()}, **fields))
    with client_for(archive) as archive_client:
        assert wait_until(lambda: archive_client.shop.orders.find_one({"_id": 1}) is not None, 15, 0.1)
    both(client, truth, "bulk_write", [
        pymongo.UpdateOne({"_id": 1}, {"$set": {"base": 1}}),
        pymongo.UpdateOne({"_id": 1}, [{"$set": {"seq": {"$ifNull": ["$base", 0]}}}])])


def both(proxy_client, oracle_client, operation, *arguments):
    """The same operation through the proxy and on the oracle."""
    getattr(proxy_client.shop.orders, operation)(*arguments)
    getattr(oracle_client.shop.orders, operation)(*arguments)


def fix_and_retry(archive, oracle, proxy):
    """The operator's way out: the archive's conflicting document gets another
    key (the oracle holds it so), then thermoclineRetryRefusals."""
    with client_for(archive) as client:
        client.shop.orders.update_one({"_id": "old"}, {"$set": {"seq": 100}})
    with client_for(oracle) as client:
        with client_for(archive) as archive_client:
            client.shop.orders.insert_one(archive_client.shop.orders.find_one({"_id": "old"}))
    with client_for(proxy) as client:
        reply = client.admin.command("thermoclineRetryRefusals")
        assert reply["ok"] == 1.0


def test_refused_replay_holds_one_document_and_the_rest_flows(replicated_tiers, tmp_path):
    archive, fast, oracle, proxy = start(replicated_tiers, tmp_path)
    try:
        with client_for(proxy) as client, client_for(oracle) as truth:
            # The oracle would refuse this write while "old" holds seq 1: it gets it as
            # one MongoDB would after the operator's fix (fix_and_retry).
            refused_increment(proxy, archive, client, truth, n=0)
            assert wait_until(lambda: refusals(proxy)["count"] >= 1, 15, 0.1), refusals(proxy)
            # Later writes to the held document queue behind its refused insert, in order.
            both(client, truth, "update_one", {"_id": 1}, {"$inc": {"n": 1}})
            both(client, truth, "update_one", {"_id": 1}, {"$set": {"status": "paid"}, "$inc": {"n": 10}})
            # Every other document keeps flowing, before and after.
            for i in range(10, 30):
                both(client, truth, "insert_one", {"_id": i, "seq": 1000 + i, "createdAt": utc_now()})
            both(client, truth, "update_many", {"_id": {"$gte": 10, "$lt": 20}}, {"$set": {"status": "shipped"}})
        assert wait_until(lambda: refusals(proxy)["count"] == 3, 15, 0.1), refusals(proxy)
        shown = refusals(proxy)
        assert shown["documents"] == 1 and "oldest" in shown
        assert shown["sample"][0]["_id"] == 1 and shown["sample"][0]["code"] == 11000
        assert "duplicate key" in shown["sample"][0]["message"] or "E11000" in shown["sample"][0]["message"]
        assert namespace_status(proxy)["feeder"]["state"] == "running"
        log = proxy.log_text()
        assert "refused the replay of a" in log and "thermoclineRetryRefusals" in log
        assert "queued behind a refused write" in log
        with client_for(fast) as client:
            records = list(client.thermocline.refusals.find().sort("_id", 1))
            assert [(r["id"], r["queued"]) for r in records] == [(1, False), (1, True), (1, True)]
            assert records[0]["code"] == 11000 and records[0]["ns"] == "shop.orders"
        # The others reach the archive, then leave the fast tier; the held one stays.
        with client_for(archive) as client:
            assert wait_until(lambda: client.shop.orders.count_documents({"_id": {"$gte": 10}}) == 20, 15, 0.1)
            assert client.shop.orders.count_documents({"status": "shipped"}) == 10
            held = client.shop.orders.find_one({"_id": 1})  # its seq before the refused write
            assert (held["seq"], held["n"]) == (0, 0), held
        assert wait_until(lambda: ids_in(fast) == {1}, 20, 0.2), ids_in(fast)
        assert wait_until(lambda: namespace_status(proxy)["evictor"]["evicted"] >= 20, 5, 0.1)
        # Held, it is counted each pass although the passes leave it out of their reads.
        assert wait_until(lambda: namespace_status(proxy)["evictor"]["keptRefused"] >= 2, 10, 0.1)
        # Still refused: a retry before the fix keeps everything, in order.
        with client_for(proxy) as client:
            client.admin.command("thermoclineRetryRefusals")
        assert wait_until(lambda: "still refuses a write of" in proxy.log_text(), 10, 0.1)
        assert refusals(proxy)["count"] == 3 and ids_in(fast) == {1}

        fix_and_retry(archive, oracle, proxy)
        assert wait_until(lambda: refusals(proxy)["count"] == 0, 15, 0.1), refusals(proxy)
        assert wait_until(lambda: documents_by_id(archive) == documents_by_id(oracle), 15, 0.1), \
            (documents_by_id(archive), documents_by_id(oracle))
        with client_for(archive) as client:
            assert client.shop.orders.find_one({"_id": 1})["n"] == 11
        # No longer held: it ages out of the fast tier like any other.
        assert wait_until(lambda: ids_in(fast) == set(), 20, 0.2), ids_in(fast)
        with client_for(fast) as client:
            assert client.thermocline.refusals.count_documents({}) == 0
    finally:
        proxy.stop()
        oracle.stop()


def test_kill_9_while_a_refusal_stands_loses_nothing(replicated_tiers, tmp_path):
    archive, fast, oracle, proxy = start(replicated_tiers, tmp_path)
    try:
        with client_for(proxy) as client, client_for(oracle) as truth:
            refused_increment(proxy, archive, client, truth, n=0)
            assert wait_until(lambda: refusals(proxy)["count"] == 1, 15, 0.1), refusals(proxy)
            both(client, truth, "update_one", {"_id": 1}, {"$inc": {"n": 5}})
            assert wait_until(lambda: refusals(proxy)["count"] == 2, 15, 0.1), refusals(proxy)
        proxy.kill9()
        with client_for(fast) as client:
            assert client.thermocline.refusals.count_documents({}) == 2
        proxy.restart()
        # The queue is read back at start (and retried: still refused).
        assert wait_until(lambda: refusals(proxy)["count"] == 2, 15, 0.1), refusals(proxy)
        with client_for(proxy) as client, client_for(oracle) as truth:
            both(client, truth, "update_one", {"_id": 1}, {"$inc": {"n": 1}})
            for i in range(10, 20):
                both(client, truth, "insert_one", {"_id": i, "seq": 1000 + i, "createdAt": utc_now()})
        assert wait_until(lambda: refusals(proxy)["count"] == 3, 15, 0.1), refusals(proxy)
        # Still held after the restart, while the others age out.
        assert wait_until(lambda: ids_in(fast) == {1}, 20, 0.2), ids_in(fast)
        proxy.kill9()
        proxy.restart()
        assert wait_until(lambda: refusals(proxy)["count"] == 3, 15, 0.1), refusals(proxy)
        fix_and_retry(archive, oracle, proxy)
        assert wait_until(lambda: refusals(proxy)["count"] == 0, 15, 0.1), refusals(proxy)
        assert wait_until(lambda: documents_by_id(archive) == documents_by_id(oracle), 15, 0.1), \
            (documents_by_id(archive), documents_by_id(oracle))
        assert wait_until(lambda: ids_in(fast) == set(), 20, 0.2), ids_in(fast)
    finally:
        proxy.stop()
        oracle.stop()
