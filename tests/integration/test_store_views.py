"""Views as a pymongo application meets them against `thermocline store`:
create_collection(viewOn=...), listCollections, find, count, distinct and
aggregate through the view, views on views, collMod and drop, and MongoDB 6.0's
errors (writes and indexes refused on a view, cycles, a taken name)."""

import pytest
from bson import SON
from pymongo.errors import OperationFailure

from conftest import StoreProcess
from pymongo import MongoClient

DB_NAME = "views"


@pytest.fixture
def db(client):
    return client[DB_NAME]


@pytest.fixture
def orders(db):
    collection = db["orders"]
    collection.insert_many([
        {"_id": 1, "customer": "ann", "status": "open", "total": 30, "tags": ["a", "b"]},
        {"_id": 2, "customer": "bob", "status": "shipped", "total": 70, "tags": ["b"]},
        {"_id": 3, "customer": "ann", "status": "open", "total": 120, "tags": []},
        {"_id": 4, "customer": "cy", "status": "cancelled", "total": 5},
        {"_id": 5, "customer": "bob", "status": "open", "total": 55, "tags": ["c"]},
    ])
    return collection


@pytest.fixture
def open_orders(db, orders):
    """A view of the open orders without their tags."""
    db.create_collection("open_orders", viewOn="orders",
                         pipeline=[{"$match": {"status": "open"}}, {"$project": {"tags": 0}}])
    return db["open_orders"]


def ids(documents):
    return [document["_id"] for document in documents]


def failure(database, command):
    with pytest.raises(OperationFailure) as raised:
        database.command(command)
    return raised.value


def assert_code(error, code, name):
    assert (error.code, error.details["codeName"]) == (code, name), error.details


def test_list_collections_shows_the_view_and_its_definition(db, open_orders):
    entries = {entry["name"]: entry for entry in db.list_collections()}
    view = entries["open_orders"]
    assert view["type"] == "view"
    assert view["options"] == {"viewOn": "orders",
                               "pipeline": [{"$match": {"status": "open"}}, {"$project": {"tags": 0}}]}
    assert view["info"] == {"readOnly": True}
    assert "idIndex" not in view
    assert entries["orders"]["type"] == "collection"
    named = list(db.list_collections(filter={"type": "view"}, nameOnly=True))
    assert named == [{"name": "open_orders", "type": "view"}]
    assert db.command("dbStats")["views"] == 1


def test_find_on_a_view_runs_its_pipeline_then_the_query(open_orders):
    assert sorted(ids(open_orders.find())) == [1, 3, 5]
    assert "tags" not in open_orders.find_one({"_id": 1})
    assert ids(open_orders.find({"customer": "ann"}).sort("total", -1)) == [3, 1]
    assert ids(open_orders.find().sort("_id", 1).skip(1).limit(1)) == [3]
    assert list(open_orders.find({"_id": 5}, {"total": 1, "_id": 0})) == [{"total": 55}]
    assert open_orders.find_one({"customer": "nobody"}) is None
    # A small batch leaves a cursor open on the view; getMore goes on from it.
    cursor = open_orders.find().sort("_id", 1).batch_size(1)
    assert ids(cursor) == [1, 3, 5]


def test_find_reply_names_the_view(db, open_orders):
    reply = db.command(SON([("find", "open_orders"), ("filter", {"total": {"$gt": 40}}), ("batchSize", 1)]))
    assert reply["cursor"]["ns"] == "views.open_orders"
    assert len(reply["cursor"]["firstBatch"]) == 1
    more = db.command(SON([("getMore", reply["cursor"]["id"]), ("collection", "open_orders")]))
    assert more["cursor"]["ns"] == "views.open_orders"
    assert sorted(ids(reply["cursor"]["firstBatch"] + more["cursor"]["nextBatch"])) == [3, 5]


def test_count_distinct_and_aggregate_on_a_view(open_orders):
    assert open_orders.count_documents({}) == 3
    assert open_orders.count_documents({"customer": "bob"}) == 1
    assert open_orders.count_documents({}, skip=1, limit=1) == 1
    assert open_orders.estimated_document_count() == 3
    assert sorted(open_orders.distinct("customer")) == ["ann", "bob"]
    assert open_orders.distinct("customer", {"total": {"$gt": 100}}) == ["ann"]
    assert open_orders.distinct("nothing") == []
    totals = list(open_orders.aggregate([{"$group": {"_id": "$customer", "sum": {"$sum": "$total"}}},
                                         {"$sort": {"_id": 1}}]))
    assert totals == [{"_id": "ann", "sum": 150}, {"_id": "bob", "sum": 55}]


def test_a_view_on_a_view_applies_both_pipelines_in_order(db, open_orders):
    db.create_collection("big_open_orders", viewOn="open_orders",
                         pipeline=[{"$match": {"total": {"$gte": 50}}}, {"$sort": {"total": -1}}])
    big = db["big_open_orders"]
    assert ids(big.find()) == [3, 5]
    assert big.count_documents({"customer": "bob"}) == 1
    # The inner view removed the tags: the outer one never sees them.
    assert all("tags" not in document for document in big.find())


def test_a_view_on_a_missing_collection_is_empty(db):
    db.command("create", "ghost_view", viewOn="no_such_collection", pipeline=[])
    assert list(db["ghost_view"].find()) == []
    assert db["ghost_view"].count_documents({}) == 0
    assert db["ghost_view"].distinct("a") == []


def test_writes_and_indexes_on_a_view_are_refused(db, open_orders):
    expected = "Namespace views.open_orders is a view, not a collection"
    for command in (SON([("insert", "open_orders"), ("documents", [{"_id": 9}])]),
                    SON([("update", "open_orders"), ("updates", [{"q": {}, "u": {"$set": {"a": 1}}}])]),
                    SON([("delete", "open_orders"), ("deletes", [{"q": {}, "limit": 0}])]),
                    SON([("findAndModify", "open_orders"), ("query", {}), ("remove", True)]),
                    SON([("listIndexes", "open_orders")]),
                    SON([("collStats", "open_orders")])):
        error = failure(db, command)
        assert_code(error, 166, "CommandNotSupportedOnView")
        assert error.details["errmsg"] == expected
    error = failure(db, SON([("createIndexes", "open_orders"), ("indexes", [{"key": {"a": 1}, "name": "a_1"}])]))
    assert_code(error, 166, "CommandNotSupportedOnView")
    with pytest.raises(OperationFailure) as raised:
        open_orders.insert_one({"_id": 10})
    assert raised.value.code == 166
    assert db["orders"].count_documents({}) == 5


def test_create_of_a_taken_name_is_namespace_exists(db, open_orders):
    assert_code(failure(db, SON([("create", "open_orders"), ("viewOn", "orders"), ("pipeline", [])])),
                48, "NamespaceExists")
    assert_code(failure(db, SON([("create", "open_orders")])), 48, "NamespaceExists")
    assert_code(failure(db, SON([("create", "orders"), ("viewOn", "open_orders"), ("pipeline", [])])),
                48, "NamespaceExists")


def test_bad_definitions_are_refused(db, orders):
    assert_code(failure(db, SON([("create", "v"), ("viewOn", 3)])), 14, "TypeMismatch")
    assert_code(failure(db, SON([("create", "v"), ("viewOn", "orders"), ("pipeline", {"$match": {}})])),
                14, "TypeMismatch")
    assert_code(failure(db, SON([("create", "v"), ("pipeline", [])])), 2, "BadValue")
    assert_code(failure(db, SON([("create", "v"), ("viewOn", "orders"), ("capped", True), ("size", 100)])),
                72, "InvalidOptions")
    # A view's collation is not the store's yet: refused, never ignored.
    assert_code(failure(db, SON([("create", "v"), ("viewOn", "orders"), ("collation", {"locale": "en"})])),
                115, "CommandNotSupported")
    assert_code(failure(db, SON([("create", "v"), ("viewOn", "orders"), ("pipeline", [{"$nope": {}}])])),
                40324, "Location40324")
    assert_code(failure(db, SON([("create", "v"), ("viewOn", "orders"), ("pipeline", [{"$out": "x"}])])),
                167, "OptionNotSupportedOnView")
    assert_code(failure(db, SON([("create", "v"), ("viewOn", "v"), ("pipeline", [])])),
                5, "GraphContainsCycle")
    assert "v" not in db.list_collection_names()


def test_coll_mod_changes_a_view_and_refuses_a_cycle(db, open_orders):
    db.create_collection("top", viewOn="open_orders", pipeline=[{"$sort": {"total": -1}}, {"$limit": 1}])
    assert ids(db["top"].find()) == [3]
    db.command("collMod", "open_orders", viewOn="orders", pipeline=[{"$match": {"status": "shipped"}}])
    assert ids(db["top"].find()) == [2]
    options = {e["name"]: e for e in db.list_collections()}["open_orders"]["options"]
    assert options == {"viewOn": "orders", "pipeline": [{"$match": {"status": "shipped"}}]}
    # open_orders on top, which reads open_orders: a cycle, and nothing changes.
    error = failure(db, SON([("collMod", "open_orders"), ("viewOn", "top"), ("pipeline", [])]))
    assert_code(error, 5, "GraphContainsCycle")
    assert ids(db["top"].find()) == [2]
    assert_code(failure(db, SON([("collMod", "open_orders"), ("validator", {"a": 1})])), 72, "InvalidOptions")
    assert_code(failure(db, SON([("collMod", "orders"), ("viewOn", "top")])), 72, "InvalidOptions")


def test_views_deeper_than_twenty_are_refused(db, orders):
    previous = "orders"
    for level in range(20):
        db.command("create", "level%d" % level, viewOn=previous, pipeline=[])
        previous = "level%d" % level
    assert db["level19"].count_documents({}) == 5
    assert_code(failure(db, SON([("create", "level20"), ("viewOn", "level19"), ("pipeline", [])])),
                165, "ViewDepthLimitExceeded")


def test_drop_of_a_view_leaves_its_collection(db, open_orders):
    reply = db.command("drop", "open_orders")
    assert reply["ns"] == "views.open_orders" and "nIndexesWas" not in reply
    assert "open_orders" not in db.list_collection_names()
    assert db["orders"].count_documents({}) == 5
    # The name is free again, for a collection this time.
    db["open_orders"].insert_one({"_id": 1})
    assert db["open_orders"].count_documents({}) == 1


def test_drop_database_drops_its_views(client, db, open_orders):
    client.drop_database(DB_NAME)
    assert db.list_collection_names() == []


def test_a_database_of_views_only_is_listed(client, db, open_orders):
    db["orders"].drop()
    assert db.list_collection_names() == ["open_orders"]
    assert DB_NAME in client.list_database_names()


def test_explain_of_a_read_on_a_view_explains_its_aggregate(db, orders, open_orders):
    orders.create_index("customer")
    explained = db.command(SON([("explain", SON([("find", "open_orders"), ("filter", {"customer": "ann"})]))]))
    assert explained["queryPlanner"]["namespace"] == "views.orders"
    assert explained["stages"][0] == {"$match": {"status": "open"}}
    assert {"$match": {"customer": "ann"}} in explained["stages"]
    explained = db.command(SON([("explain", SON([("count", "open_orders")]))]))
    assert explained["stages"][-1] == {"$count": "count"}


def test_find_options_without_an_aggregate_counterpart_are_refused(db, open_orders):
    error = failure(db, SON([("find", "open_orders"), ("showRecordId", True)]))
    assert_code(error, 168, "InvalidPipelineOperator")
    error = failure(db, SON([("find", "open_orders"), ("singleBatch", True), ("limit", 2)]))
    assert_code(error, 168, "InvalidPipelineOperator")


def test_views_survive_a_restart(tmp_path):
    store = StoreProcess(tmp_path / "restart")
    store.start()
    try:
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        client.kept.base.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}])
        client.kept.create_collection("two", viewOn="base", pipeline=[{"$match": {"a": 2}}])
        client.close()
        store.stop()
        store.restart()
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        assert [d["_id"] for d in client.kept.two.find()] == [2]
        entry = {e["name"]: e for e in client.kept.list_collections()}["two"]
        assert entry["type"] == "view"
        client.close()
    finally:
        store.stop()


def test_view_ddl_in_a_change_stream_with_expanded_events(tmp_path):
    """mongod 6.0's expanded events for a view: create and modify with
    operationDescription {viewOn, pipeline}, then drop."""
    store = StoreProcess(tmp_path / "stream", replica_set="rs0")
    store.start()
    try:
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        db = client.streamed
        db.base.insert_one({"_id": 1})
        reply = db.command(SON([("aggregate", 1), ("pipeline", [{"$changeStream": {"showExpandedEvents": True}}]),
                                ("cursor", {})]))
        db.create_collection("v", viewOn="base", pipeline=[{"$match": {"_id": 1}}])
        db.command("collMod", "v", pipeline=[])
        db.drop_collection("v")
        events = []
        for _ in range(20):
            more = db.command(SON([("getMore", reply["cursor"]["id"]), ("collection", "$cmd.aggregate"),
                                   ("maxTimeMS", 500)]))
            events += more["cursor"]["nextBatch"]
            if len(events) >= 3:
                break
        assert [(e["operationType"], e["ns"]["coll"]) for e in events] == [("create", "v"), ("modify", "v"),
                                                                           ("drop", "v")]
        assert events[0]["operationDescription"] == {"viewOn": "base", "pipeline": [{"$match": {"_id": 1}}]}
        assert events[1]["operationDescription"] == {"viewOn": "base", "pipeline": []}
        db.create_collection("w", viewOn="base", pipeline=[])
        with pytest.raises(OperationFailure) as raised:
            db["w"].watch()
        assert raised.value.code == 166
        client.close()
    finally:
        store.stop()
