"""explain through `thermocline proxy`: the tier's own explain, plus a top-level
`thermocline` field naming the tier the planner chose (fast, archive, or both for
a point read) and its reason. Each explain's serverInfo.port shows which store
really answered; the stores' contents show that an explained write wrote nothing.

One proxy and two stores serve the whole module (explain changes nothing)."""
import datetime

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import ProxyProcess, StoreProcess, proxy_config

NOW = datetime.datetime.utcnow().replace(microsecond=0)
OLD = NOW - datetime.timedelta(days=200)
RECENT_FILTER = {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}
OLD_FILTER = {"createdAt": {"$gte": OLD - datetime.timedelta(days=1), "$lt": NOW - datetime.timedelta(days=100)}}


def order(number, created):
    return {"_id": number, "customer": "c%d" % (number % 5), "total": number % 97, "createdAt": created}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The archive holds 40 old and 30 recent orders, the fast tier the recent ones."""
    base = tmp_path_factory.mktemp("explain")
    archive = StoreProcess(base / "archive").start()
    fast = StoreProcess(base / "fast").start()
    old = [order(i, OLD + datetime.timedelta(minutes=i)) for i in range(40)]
    recent = [order(1000 + i, NOW - datetime.timedelta(minutes=i)) for i in range(30)]
    with MongoClient(archive.uri) as client:
        client.shop.orders.insert_many(old + recent)
        client.shop.plain.insert_one({"_id": 1})
    with MongoClient(fast.uri) as client:
        client.shop.orders.insert_many(recent)
    proxy = ProxyProcess(base / "proxy", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30d", True)])).start()
    client = MongoClient(proxy.uri)
    yield archive, fast, proxy, client
    client.close()
    proxy.stop()
    fast.stop()
    archive.stop()


def answered_by(explain, store_process):
    return explain["serverInfo"]["port"] == store_process.port


def test_find_explain_names_the_tier_and_the_reason(deployment):
    archive, fast, _, client = deployment
    orders = client.shop.orders

    recent = orders.find(RECENT_FILTER).explain()
    assert recent["thermocline"]["tier"] == "fast"
    assert recent["thermocline"]["reasonName"] == "inside-horizon"
    assert "inside the horizon" in recent["thermocline"]["reason"]
    assert "queryPlanner" in recent and answered_by(recent, fast)

    old = orders.find(OLD_FILTER).explain()
    assert old["thermocline"]["tier"] == "archive"
    assert old["thermocline"]["reasonName"] == "before-horizon"
    assert answered_by(old, archive)

    unprovable = orders.find({"total": 3}).explain()
    assert unprovable["thermocline"]["reasonName"] == "filter-unprovable"
    assert answered_by(unprovable, archive)

    untiered = client.shop.plain.find({}).explain()
    assert untiered["thermocline"] == {"tier": "archive", "reason": "explain: namespace has no tiering policy",
                                       "reasonName": "no-policy"}
    assert answered_by(untiered, archive)


def test_point_read_explain_runs_on_both_tiers(deployment):
    archive, fast, _, client = deployment
    explain = client.shop.orders.find({"_id": {"$in": [7, 1003]}}).explain()
    thermocline = explain["thermocline"]
    assert thermocline["tier"] == "both"
    assert thermocline["reasonName"] == "point-read"
    assert "then the archive" in thermocline["reason"]
    assert answered_by(explain, fast)
    assert answered_by(thermocline["archive"], archive)
    assert "queryPlanner" in thermocline["archive"] and "ok" not in thermocline["archive"]
    # The explain command too, with a verbosity.
    explain = client.shop.command({"explain": {"find": "orders", "filter": {"_id": 7}},
                                   "verbosity": "queryPlanner"})
    assert explain["thermocline"]["tier"] == "both" and "executionStats" not in explain


def test_aggregate_count_and_distinct_explain(deployment):
    archive, fast, _, client = deployment
    db = client.shop
    aggregate = db.command("aggregate", "orders", pipeline=[{"$match": RECENT_FILTER}], explain=True)
    assert aggregate["thermocline"]["tier"] == "fast" and answered_by(aggregate, fast)

    explained = db.command({"explain": {"aggregate": "orders", "pipeline": [{"$match": OLD_FILTER}],
                                        "cursor": {}}})
    assert explained["thermocline"]["tier"] == "archive" and answered_by(explained, archive)

    count = db.command({"explain": {"count": "orders", "query": RECENT_FILTER}})
    assert count["thermocline"]["tier"] == "fast" and answered_by(count, fast)
    assert count["thermocline"]["reason"].startswith("explain: count.query")

    distinct = db.command({"explain": {"distinct": "orders", "key": "customer", "query": OLD_FILTER}})
    assert distinct["thermocline"]["tier"] == "archive" and answered_by(distinct, archive)


def test_write_explain_runs_on_the_fast_tier_and_writes_nothing(deployment):
    archive, fast, proxy, client = deployment
    db = client.shop
    # Order 7 is held only by the archive: a real update would fault it in first.
    update = db.command({"explain": {"update": "orders",
                                     "updates": [{"q": {"_id": 7}, "u": {"$set": {"total": -1}}}]}})
    assert update["thermocline"]["tier"] == "fast"
    assert update["thermocline"]["reasonName"] == "write"
    assert update["queryPlanner"]["winningPlan"]["stage"] == "UPDATE"
    assert answered_by(update, fast)

    delete = db.command({"explain": {"delete": "orders", "deletes": [{"q": RECENT_FILTER, "limit": 0}]}},
                        )
    assert delete["thermocline"]["tier"] == "fast"
    assert delete["queryPlanner"]["winningPlan"]["stage"] == "DELETE"

    status = client.admin.command("thermoclineStatus")["namespaces"]["shop.orders"]
    assert status["faultedIn"] == 0
    with MongoClient(fast.uri) as direct:
        assert direct.shop.orders.find_one({"_id": 7}) is None
        assert direct.shop.orders.count_documents({}) == 30
    with MongoClient(archive.uri) as direct:
        assert direct.shop.orders.find_one({"_id": 7})["total"] == 7


def test_an_explain_error_is_the_tiers_own(deployment):
    _, _, _, client = deployment
    with pytest.raises(OperationFailure) as raised:
        client.shop.command({"explain": {"update": "orders", "updates": [
            {"q": {"_id": 1}, "u": {"$set": {"a": 1}}}, {"q": {"_id": 2}, "u": {"$set": {"a": 1}}}]}})
    assert raised.value.code == 16
    assert "thermocline" not in raised.value.details
