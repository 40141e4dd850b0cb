"""Sparse, partial and hidden indexes in `thermocline store`, driven by pymongo
and checked against what mongod 6.0 answers. Where an expectation comes from
MongoDB's documentation, the comment says which page:

- [sparse]  https://www.mongodb.com/docs/v6.0/core/index-sparse/
- [partial] https://www.mongodb.com/docs/v6.0/core/index-partial/
- [hidden]  https://www.mongodb.com/docs/v6.0/core/index-hidden/
- [read-ops] mongod's jstests/core/index_partial_read_ops.js (the server's own
  test of which queries use a partial index)."""

import pytest
from bson import SON
from pymongo import ASCENDING, MongoClient
from pymongo.errors import DuplicateKeyError, OperationFailure

DB_NAME = "index_options"


@pytest.fixture
def db(client):
    return client[DB_NAME]


def winning_stage(collection, query, sort=None, hint=None):
    """The access stage of the winning plan: COLLSCAN, IXSCAN (with its index
    name), IDHACK, or OR."""
    command = SON([("find", collection.name), ("filter", query)])
    if sort is not None:
        command["sort"] = sort
    if hint is not None:
        command["hint"] = hint
    plan = collection.database.command({"explain": command})["queryPlanner"]["winningPlan"]
    while plan["stage"] not in ("COLLSCAN", "IXSCAN", "IDHACK", "OR") and "inputStage" in plan:
        plan = plan["inputStage"]
    return plan


def index_specs(collection):
    return {spec["name"]: spec for spec in collection.list_indexes()}


# ---------------------------------------------------------------------------
# sparse
# ---------------------------------------------------------------------------
def test_unique_sparse_index_over_documents_without_the_field(db):
    # [sparse] "An index that is both sparse and unique prevents collection from
    # having documents with duplicate values for a field but allows multiple
    # documents that omit the key."
    orders = db.orders
    orders.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3, "orderNumber": 7}])
    assert orders.create_index([("orderNumber", ASCENDING)], unique=True, sparse=True) == "orderNumber_1"
    orders.insert_one({"_id": 4})  # a fourth document without the field
    with pytest.raises(DuplicateKeyError) as raised:
        orders.insert_one({"_id": 5, "orderNumber": 7})
    assert raised.value.code == 11000
    assert raised.value.details["keyValue"] == {"orderNumber": 7}
    # null values ARE indexed by a sparse index: two explicit nulls conflict.
    orders.insert_one({"_id": 6, "orderNumber": None})
    with pytest.raises(DuplicateKeyError):
        orders.insert_one({"_id": 7, "orderNumber": None})
    # An update that removes the field takes the document out of the index.
    orders.update_one({"_id": 3}, {"$unset": {"orderNumber": ""}})
    orders.insert_one({"_id": 8, "orderNumber": 7})
    assert orders.count_documents({}) == 6


def test_non_sparse_unique_index_treats_missing_as_null(db):
    # [sparse] without sparse, a unique index holds one document without the field.
    db.plain.insert_many([{"_id": 1}, {"_id": 2}])
    with pytest.raises(OperationFailure) as raised:
        db.plain.create_index("orderNumber", unique=True)
    assert raised.value.code == 11000


def test_compound_sparse_index_holds_documents_with_any_field(db):
    # [sparse] "sparse compound indexes that only contain ascending/descending
    # index keys will index a document as long as the document contains at least
    # one of the keys."
    things = db.things
    things.create_index([("a", ASCENDING), ("b", ASCENDING)], unique=True, sparse=True)
    things.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3, "b": 1}])
    with pytest.raises(DuplicateKeyError):
        things.insert_one({"_id": 4, "b": 1})  # {a: null, b: 1} twice
    things.insert_one({"_id": 5, "c": 1})


def test_sparse_index_used_only_when_the_filter_needs_the_field(db):
    # [sparse] "If a sparse index would result in an incomplete result set for
    # queries and sort operations, MongoDB will not use that index unless a
    # hint() explicitly specifies the index. For example, the query
    # { x: { $exists: false } } will not use a sparse index on the x field
    # unless explicitly hinted."
    scores = db.scores
    scores.insert_many([{"_id": 1, "userid": "newbie"}, {"_id": 2, "userid": "abby", "score": 82},
                        {"_id": 3, "userid": "nina", "score": 90}])
    scores.create_index("score", sparse=True)
    assert winning_stage(scores, {"score": {"$lt": 90}})["stage"] == "IXSCAN"
    assert winning_stage(scores, {"score": 82})["indexName"] == "score_1"
    assert winning_stage(scores, {"score": {"$exists": True}})["stage"] in ("IXSCAN", "COLLSCAN")
    for query in ({"score": None}, {"score": {"$exists": False}}, {"userid": "abby"}):
        assert winning_stage(scores, query)["stage"] == "COLLSCAN", query
    # [sparse] "db.scores.find().sort( { score: -1 } )": the sort does not use the
    # sparse index and returns all three documents ...
    assert winning_stage(scores, {}, sort={"score": -1})["stage"] == "COLLSCAN"
    assert [d["_id"] for d in scores.find().sort("score", -1)] == [3, 2, 1]
    # ... while the hinted sparse index returns only the documents it holds.
    assert [d["_id"] for d in scores.find().sort("score", -1).hint("score_1")] == [3, 2]
    assert scores.count_documents({"score": None}) == 1


def test_sparse_explain_flags(db):
    db.flags.create_index("x", sparse=True, unique=True)
    stage = winning_stage(db.flags, {"x": 5})
    assert (stage["isSparse"], stage["isUnique"], stage["isPartial"]) == (True, True, False)


# ---------------------------------------------------------------------------
# partialFilterExpression
# ---------------------------------------------------------------------------
def test_partial_unique_index_holds_uniqueness_among_matching_documents(db):
    # [partial] "the uniqueness constraint only applies to the documents that
    # meet the filter expression": users with the same username but no age.
    users = db.users
    users.create_index("username", unique=True, partialFilterExpression={"age": {"$gte": 21}})
    users.insert_many([{"username": "david", "age": 29}, {"username": "amanda", "age": 35},
                       {"username": "rajiv", "age": 57}])
    with pytest.raises(DuplicateKeyError) as raised:
        users.insert_one({"username": "david", "age": 27})
    assert "index: username_1 dup key: { username: \"david\" }" in str(raised.value)
    users.insert_one({"username": "david", "age": 20})
    users.insert_one({"username": "amanda"})
    users.insert_one({"username": "rajiv", "age": None})
    assert users.count_documents({}) == 6


def test_documents_move_in_and_out_of_a_partial_index_by_update(db):
    orders = db.orders
    orders.create_index("orderNumber", unique=True, partialFilterExpression={"status": "active"})
    orders.insert_many([{"_id": 1, "orderNumber": 10, "status": "active"},
                        {"_id": 2, "orderNumber": 10, "status": "draft"}])
    # Moving _id 2 into the index collides with _id 1: refused, nothing changes.
    with pytest.raises(DuplicateKeyError):
        orders.update_one({"_id": 2}, {"$set": {"status": "active"}})
    assert orders.find_one({"_id": 2})["status"] == "draft"
    # _id 1 leaves the index; then _id 2 may enter it.
    orders.update_one({"_id": 1}, {"$set": {"status": "closed"}})
    orders.update_one({"_id": 2}, {"$set": {"status": "active"}})
    assert orders.find_one({"orderNumber": 10, "status": "active"})["_id"] == 2
    # Back in: _id 1 now collides with _id 2 (a replacement, this time).
    with pytest.raises(DuplicateKeyError):
        orders.replace_one({"_id": 1}, {"orderNumber": 10, "status": "active"})
    # A delete removes _id 2's entry: _id 1 can enter.
    orders.delete_one({"_id": 2})
    orders.update_one({"_id": 1}, {"$set": {"status": "active"}})
    hinted = list(orders.find({"status": "active"}).hint("orderNumber_1"))
    assert [d["_id"] for d in hinted] == [1]


def test_partial_index_build_over_existing_documents(db):
    things = db.things
    things.insert_many([{"_id": i, "k": i % 2, "v": i // 2} for i in range(6)])
    # v repeats across k; unique among k == 1 only.
    things.create_index("v", unique=True, partialFilterExpression={"k": 1})
    with pytest.raises(OperationFailure) as raised:
        things.create_index("v", name="v_all", unique=True)
    assert raised.value.code == 11000
    stage = winning_stage(things, {"v": 1, "k": 1})
    assert (stage["stage"], stage["isPartial"]) == ("IXSCAN", True)
    assert [d["_id"] for d in things.find({"v": {"$gte": 1}, "k": 1}).sort("v", 1)] == [3, 5]


def test_partial_index_used_only_when_the_query_implies_the_filter(db):
    # [read-ops] index {x: 1} with partialFilterExpression {a: {$lte: 1.5}}.
    coll = db.read_ops
    coll.create_index("x", partialFilterExpression={"a": {"$lte": 1.5}})
    coll.insert_many([{"x": 5, "a": 2}, {"x": 6, "a": 1}])
    for query in ({"x": 6, "a": 1}, {"x": {"$gt": 1}, "a": 1}, {"x": 6, "a": {"$lte": 1}}):
        assert winning_stage(coll, query)["stage"] == "IXSCAN", query
        assert coll.count_documents(query) == 1
    for query in ({"x": 6, "a": {"$lt": 1.6}}, {"x": 6}):
        assert winning_stage(coll, query)["stage"] == "COLLSCAN", query
        assert coll.count_documents(query) == 1
    # [partial] restaurants {cuisine: 1} filtered on {rating: {$gt: 5}}: a query
    # on rating >= 8 uses it, rating < 8 does not, and neither does a query
    # without the rating condition.
    rest = db.restaurants
    rest.create_index("cuisine", partialFilterExpression={"rating": {"$gt": 5}})
    assert winning_stage(rest, {"cuisine": "Italian", "rating": {"$gte": 8}})["stage"] == "IXSCAN"
    assert winning_stage(rest, {"cuisine": "Italian", "rating": {"$lt": 8}})["stage"] == "COLLSCAN"
    assert winning_stage(rest, {"cuisine": "Italian"})["stage"] == "COLLSCAN"
    # $exists: true in the filter is implied by an equality or a range on the field.
    db.e.create_index("c", partialFilterExpression={"d": {"$exists": True}})
    assert winning_stage(db.e, {"c": 1, "d": 5})["stage"] == "IXSCAN"
    assert winning_stage(db.e, {"c": 1, "d": {"$gt": 0}})["stage"] == "IXSCAN"
    assert winning_stage(db.e, {"c": 1, "d": None})["stage"] == "COLLSCAN"
    # A sort alone never uses a partial index: it would miss documents.
    assert winning_stage(rest, {}, sort={"cuisine": 1})["stage"] == "COLLSCAN"


def test_several_partial_indexes_on_one_key_pattern(db):
    # [read-ops] three partial indexes on {a: 1} with filters a >= 0, 10, 100.
    coll = db.overlap
    for name, bound in (("index1", 0), ("index2", 10), ("index3", 100)):
        coll.create_index("a", name=name, partialFilterExpression={"a": {"$gte": bound}})
    coll.insert_many([{"a": v} for v in (1, 2, 3, 11, 12, 13, 101, 102, 103)])
    assert winning_stage(coll, {"a": {"$gt": 100, "$lt": 1000}})["stage"] == "IXSCAN"
    assert sorted(d["a"] for d in coll.find({"a": {"$gt": 10, "$lt": 100}})) == [11, 12, 13]
    assert winning_stage(coll, {"a": {"$lt": 0}})["stage"] == "COLLSCAN"


def test_partial_filter_with_or_and_in(db):
    # 6.0 accepts $or and $in in a partial filter ([partial], 6.0 and later).
    coll = db.logic
    coll.create_index("k", unique=True, partialFilterExpression={"$or": [{"s": "a"}, {"s": {"$in": ["b", "c"]}}]})
    coll.insert_many([{"k": 1, "s": "a"}, {"k": 1, "s": "z"}])
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"k": 1, "s": "c"})
    assert winning_stage(coll, {"k": 1, "s": "b"})["stage"] == "IXSCAN"


def test_bad_partial_filters_are_refused_as_mongod_refuses_them(db):
    # [partial] "partialFilterExpression option accepts a document that specifies
    # the filter condition using: equality, $exists: true, $gt/$gte/$lt/$lte,
    # $type, $and, $or, $in"; anything else is CannotCreateIndex (67) with
    # "Expression not supported in partial index: ..." (a $ne and an
    # $exists: false are both negations: "$not").
    for expression, tree in (({"a": {"$ne": 1}}, "$not\n    a $eq 1\n"),
                             ({"a": {"$exists": False}}, "$not\n    a exists\n")):
        with pytest.raises(OperationFailure) as raised:
            db.bad.create_index("k", partialFilterExpression=expression)
        assert raised.value.code == 67
        assert raised.value.details["codeName"] == "CannotCreateIndex"
        # mongod prints the spec as the driver sent it, with the v it adds last.
        assert raised.value.details["errmsg"].startswith("Error in specification { ")
        assert raised.value.details["errmsg"].endswith(
            ", v: 2 } :: caused by :: Expression not supported in partial index: " + tree)
    for expression in ({"a": {"$regex": "x"}}, {"$nor": [{"a": 1}]}, {"a": {"$size": 2}}):
        with pytest.raises(OperationFailure) as raised:
            db.bad.create_index("k", partialFilterExpression=expression)
        assert raised.value.code == 67, expression
    # The matcher's special features are refused by the parser first, as QueryFeatureNotAllowed.
    for expression in ({"$expr": {"$eq": ["$a", 1]}}, {"$jsonSchema": {"required": ["a"]}}):
        with pytest.raises(OperationFailure) as raised:
            db.bad.create_index("k", partialFilterExpression=expression)
        assert raised.value.code == 224, expression
        assert raised.value.details["errmsg"].endswith(":: caused by :: %s is not allowed in this context"
                                                       % next(iter(expression)))
    with pytest.raises(OperationFailure) as raised:
        db.bad.create_index("k", partialFilterExpression=5)
    assert raised.value.code == 14  # TypeMismatch
    # [partial] "You cannot specify both the partialFilterExpression option and
    # the sparse option."
    with pytest.raises(OperationFailure) as raised:
        db.bad.create_index("k", sparse=True, partialFilterExpression={"a": 1})
    assert raised.value.code == 67
    assert "cannot mix \"partialFilterExpression\" and \"sparse\" options" in raised.value.details["errmsg"]
    assert "bad" not in db.list_collection_names()  # none of the refused specs created it


def test_hint_of_a_partial_index_the_query_cannot_use_is_refused(db):
    db.h.create_index("x", partialFilterExpression={"a": {"$gt": 5}})
    db.h.insert_one({"x": 1, "a": 1})
    with pytest.raises(OperationFailure) as raised:
        list(db.h.find({"x": 1}).hint("x_1"))
    assert raised.value.code == 2
    assert list(db.h.find({"x": 1, "a": {"$gt": 6}}).hint("x_1")) == []


# ---------------------------------------------------------------------------
# hidden
# ---------------------------------------------------------------------------
def test_hidden_index_is_maintained_but_never_planned(db):
    # [hidden] "Hidden indexes are not visible to the query planner and cannot
    # be used to support a query." "If a hidden index is a unique index, the
    # index still applies its unique constraint to the documents."
    coll = db.hidden
    coll.create_index("email", unique=True, hidden=True)
    coll.insert_one({"_id": 1, "email": "a@x"})
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"_id": 2, "email": "a@x"})
    assert winning_stage(coll, {"email": "a@x"})["stage"] == "COLLSCAN"
    assert winning_stage(coll, {}, sort={"email": 1})["stage"] == "COLLSCAN"
    # A hint naming it is refused like one naming no index (BadValue 2).
    for hint in ("email_1", [("email", 1)]):
        with pytest.raises(OperationFailure) as raised:
            list(coll.find({"email": "a@x"}).hint(hint))
        assert raised.value.code == 2
        assert "hint provided does not correspond to an existing index" in raised.value.details["errmsg"]
    # [hidden] db.collection.getIndexes() shows hidden: true.
    assert index_specs(coll)["email_1"] == {"v": 2, "key": {"email": 1}, "name": "email_1",
                                            "unique": True, "hidden": True}


# ---------------------------------------------------------------------------
# listIndexes, conflicts, persistence
# ---------------------------------------------------------------------------
def test_list_indexes_shows_options_in_mongods_order(db):
    db.command(SON([("createIndexes", "shown"), ("indexes", [
        SON([("key", {"a": 1}), ("name", "a_1"), ("unique", True), ("sparse", True)]),
        SON([("key", {"b": 1}), ("name", "b_1"), ("partialFilterExpression", {"s": {"$gt": 1}})]),
    ])]))
    raw = db.command({"listIndexes": "shown"})["cursor"]["firstBatch"]
    assert [list(spec) for spec in raw[1:]] == [["v", "key", "name", "unique", "sparse"],
                                               ["v", "key", "name", "partialFilterExpression"]]
    assert raw[2]["partialFilterExpression"] == {"s": {"$gt": 1}}


def test_same_spec_again_is_a_no_op_and_different_options_conflict(db):
    coll = db.conflicts
    coll.create_index("o", unique=True, sparse=True)
    again = db.command({"createIndexes": "conflicts",
                        "indexes": [{"key": {"o": 1}, "name": "o_1", "unique": True, "sparse": True}]})
    assert again["note"] == "all indexes already exist"
    assert again["numIndexesBefore"] == again["numIndexesAfter"] == 2
    # The same name and key with other options: IndexOptionsConflict (85).
    with pytest.raises(OperationFailure) as raised:
        coll.create_index("o", unique=True)
    assert raised.value.code == 85
    assert raised.value.details["codeName"] == "IndexOptionsConflict"
    assert raised.value.details["errmsg"].startswith(
        "An equivalent index already exists with the same name but different options. Requested index: "
        "{ v: 2, key: { o: 1 }, name: \"o_1\", unique: true }, existing index: "
        "{ v: 2, key: { o: 1 }, name: \"o_1\", unique: true, sparse: true }")
    # The same name with another partial filter: IndexKeySpecsConflict (86).
    with pytest.raises(OperationFailure) as raised:
        coll.create_index("o", partialFilterExpression={"o": {"$gt": 1}})
    assert raised.value.code == 86
    assert raised.value.details["codeName"] == "IndexKeySpecsConflict"
    # Another name, the same key and filter: IndexOptionsConflict (85).
    with pytest.raises(OperationFailure) as raised:
        coll.create_index("o", name="other", unique=True, sparse=True)
    assert raised.value.code == 85
    assert raised.value.details["errmsg"] == "Index already exists with a different name: o_1"
    with pytest.raises(OperationFailure) as raised:
        coll.create_index("o", name="other")
    assert raised.value.code == 85
    # Another name and another partial filter on the same key: a second index.
    coll.create_index("o", name="o_partial", partialFilterExpression={"o": {"$gt": 1}})
    assert sorted(index_specs(coll)) == ["_id_", "o_1", "o_partial"]


def test_index_options_survive_a_restart(store, db):
    db.keep.create_index("s", unique=True, sparse=True)
    db.keep.create_index("p", unique=True, partialFilterExpression={"live": True})
    db.keep.create_index("h", hidden=True)
    db.keep.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3, "p": 1, "live": True}])
    before = index_specs(db.keep)
    db.client.close()
    store.stop()
    store.restart()
    client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
    try:
        keep = client[DB_NAME].keep
        assert index_specs(keep) == before
        assert index_specs(keep)["h_1"]["hidden"] is True
        keep.insert_one({"_id": 4})  # sparse: still no conflict on missing s
        keep.insert_one({"_id": 5, "p": 1, "live": False})  # outside the partial filter
        with pytest.raises(DuplicateKeyError):
            keep.insert_one({"_id": 6, "p": 1, "live": True})
        assert winning_stage(keep, {"h": 1})["stage"] == "COLLSCAN"
        assert winning_stage(keep, {"p": 1, "live": True})["stage"] == "IXSCAN"
    finally:
        client.close()
