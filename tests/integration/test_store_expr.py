"""$expr in filters, `let` variables, $getField/$setField and hints by index name,
as a pymongo application meets them against `thermocline store`, with MongoDB
6.0's answers: results, error codes and codeNames."""

import pytest
from bson import SON
from pymongo.errors import OperationFailure

DB_NAME = "expr"


@pytest.fixture
def db(client):
    return client[DB_NAME]


@pytest.fixture
def budgets(db):
    """Departments with a budget and what they spent; some spent more."""
    collection = db["budgets"]
    collection.insert_many([
        {"_id": 1, "dept": "sales", "budget": 100, "spent": 120, "status": "open"},
        {"_id": 2, "dept": "ops", "budget": 200, "spent": 150, "status": "open"},
        {"_id": 3, "dept": "hr", "budget": 50, "spent": 50, "status": "closed"},
        {"_id": 4, "dept": "it", "budget": 300, "spent": 301, "status": "closed"},
    ])
    # A field name with a dot (MongoDB 5.0+ stores it; pymongo 3.11's insert_one
    # refuses it, the raw command does not).
    db.command(SON([("insert", "budgets"), ("documents", [
        {"_id": 5, "dept": "legal", "budget": 0, "spent": 10, "status": "open", "price.usd": 7}])]))
    return collection


def ids(documents):
    return sorted(document["_id"] for document in documents)


def failure(database, command):
    with pytest.raises(OperationFailure) as raised:
        database.command(command)
    return raised.value


def test_expr_compares_two_fields_of_one_document(budgets):
    assert ids(budgets.find({"$expr": {"$gt": ["$spent", "$budget"]}})) == [1, 4, 5]
    assert ids(budgets.find({"status": "open", "$expr": {"$gt": ["$spent", "$budget"]}})) == [1, 5]
    assert ids(budgets.find({"$or": [{"$expr": {"$eq": ["$spent", "$budget"]}}, {"dept": "ops"}]})) == [2, 3]
    assert budgets.count_documents({"$expr": {"$lt": ["$spent", "$budget"]}}) == 1
    assert sorted(budgets.distinct("dept", {"$expr": {"$gte": ["$spent", "$budget"]}})) == ["hr", "it", "legal", "sales"]
    # Truthiness as $cond reads it: 0, null and missing are false.
    assert ids(budgets.find({"$expr": "$budget"})) == [1, 2, 3, 4]
    assert ids(budgets.aggregate([{"$match": {"$expr": {"$gt": ["$spent", "$budget"]}}}])) == [1, 4, 5]


def test_let_variables_in_find_aggregate_and_the_writes(db, budgets):
    reply = db.command(SON([("find", "budgets"), ("filter", {"$expr": {"$eq": ["$status", "$$wanted"]}}),
                            ("let", {"wanted": "closed"})]))
    assert ids(reply["cursor"]["firstBatch"]) == [3, 4]
    # A later variable may read an earlier one; $$NOW is one date for the command.
    reply = db.command(SON([("aggregate", "budgets"),
                            ("pipeline", [{"$match": {"$expr": {"$gt": ["$spent", "$$limit"]}}},
                                          {"$project": {"over": {"$subtract": ["$spent", "$$limit"]},
                                                        "label": "$$label", "now": "$$NOW"}},
                                          {"$sort": {"_id": 1}}]),
                            ("let", SON([("limit", 100), ("label", {"$concat": ["over ", {"$toString": "$$limit"}]})])),
                            ("cursor", {})]))
    batch = reply["cursor"]["firstBatch"]
    assert [(d["_id"], d["over"], d["label"]) for d in batch] == [(1, 20, "over 100"), (2, 50, "over 100"),
                                                                   (4, 201, "over 100")]
    assert len({d["now"] for d in batch}) == 1
    reply = db.command(SON([("update", "budgets"),
                            ("updates", [{"q": {"$expr": {"$eq": ["$dept", "$$who"]}}, "u": {"$set": {"flag": True}}}]),
                            ("let", {"who": "hr"})]))
    assert (reply["n"], reply["nModified"]) == (1, 1)
    assert budgets.find_one({"_id": 3})["flag"] is True
    reply = db.command(SON([("findAndModify", "budgets"), ("query", {"$expr": {"$eq": ["$_id", "$$id"]}}),
                            ("update", {"$inc": {"spent": 1}}), ("new", True), ("let", {"id": 2})]))
    assert reply["value"]["spent"] == 151
    # A pipeline-style update reads the variables too.
    reply = db.command(SON([("update", "budgets"),
                            ("updates", [{"q": {"_id": 1}, "u": [{"$set": {"level": "$$lvl", "at": "$$NOW"}}]}]),
                            ("let", {"lvl": 3})]))
    assert reply["nModified"] == 1 and budgets.find_one({"_id": 1})["level"] == 3
    reply = db.command(SON([("delete", "budgets"),
                            ("deletes", [{"q": {"$expr": {"$gt": ["$spent", "$$cap"]}}, "limit": 0}]),
                            ("let", {"cap": 200})]))
    assert reply["n"] == 1
    assert ids(budgets.find()) == [1, 2, 3, 5]


def test_expr_and_let_errors_as_mongod_gives_them(db, budgets):
    undefined = failure(db, {"find": "budgets", "filter": {"$expr": {"$eq": ["$status", "$$nope"]}}})
    assert (undefined.code, undefined.details["codeName"]) == (17276, "Location17276")
    assert "Use of undefined variable: nope" in str(undefined)
    # Undefined even where no document is read: the check is at parse time.
    empty = failure(db, {"find": "nothing", "filter": {"$expr": "$$nope"}})
    assert empty.code == 17276
    divide = failure(db, {"find": "budgets", "filter": {"$expr": {"$gt": [{"$divide": ["$spent", "$budget"]}, 1]}}})
    assert divide.code == 2 and "can't $divide by zero" in str(divide)
    inside = failure(db, {"find": "budgets", "filter": {"tags": {"$elemMatch": {"$expr": {"$eq": [1, 1]}}}}})
    assert inside.code == 2 and "$expr can only be applied to the top-level document" in str(inside)
    bad_name = failure(db, SON([("find", "budgets"), ("filter", {}), ("let", {"Upper": 1})]))
    assert bad_name.code == 16870 and "starts with an invalid character for a user variable name" in str(bad_name)
    bad_let = failure(db, SON([("find", "budgets"), ("filter", {}), ("let", 5)]))
    assert bad_let.code == 14
    write = db.command(SON([("update", "budgets"),
                            ("updates", [{"q": {"$expr": {"$divide": [1, "$budget"]}}, "u": {"$set": {"x": 1}},
                                          "multi": True}])]))
    assert write["writeErrors"][0]["code"] == 2


def test_get_field_and_set_field_reach_names_with_dots_and_dollars(db, budgets):
    reply = db.command(SON([("aggregate", "budgets"),
                            ("pipeline", [{"$match": {"_id": 5}},
                                          {"$project": {
                                              "usd": {"$getField": "price.usd"},
                                              "odd": {"$getField": {
                                                  "field": {"$literal": "$odd"},
                                                  "input": {"$setField": {"field": {"$literal": "$odd"},
                                                                          "input": "$$ROOT", "value": "yes"}}}},
                                              "none": {"$getField": {"field": "absent", "input": None}},
                                              "set": {"$setField": {"field": "a.b", "input": {"x": 1}, "value": 2}},
                                              "removed": {"$setField": {"field": "price.usd", "input": "$$ROOT",
                                                                        "value": "$$REMOVE"}}}}]),
                            ("cursor", {})]))
    document = reply["cursor"]["firstBatch"][0]
    assert document["usd"] == 7 and document["odd"] == "yes" and document["none"] is None
    assert document["set"] == {"x": 1, "a.b": 2}
    assert "price.usd" not in document["removed"] and document["removed"]["dept"] == "legal"
    matched = ids(budgets.find({"$expr": {"$gt": [{"$getField": "price.usd"}, 5]}}))
    assert matched == [5]
    not_constant = failure(db, {"aggregate": "budgets", "pipeline": [{"$project": {"x": {"$getField": "$dept"}}}],
                                "cursor": {}})
    assert not_constant.code == 5654602
    not_object = failure(db, {"aggregate": "budgets",
                              "pipeline": [{"$project": {"x": {"$getField": {"field": "a", "input": 5}}}}],
                              "cursor": {}})
    assert not_object.code == 3041705
    missing = failure(db, {"aggregate": "budgets",
                           "pipeline": [{"$project": {"x": {"$setField": {"field": "a", "input": {}}}}}],
                           "cursor": {}})
    assert missing.code == 4161104


def test_writes_take_a_hint_by_index_name(db, budgets):
    budgets.create_index("dept", name="by_dept")
    assert budgets.update_one({"dept": "ops"}, {"$set": {"hinted": 1}}, hint="by_dept").modified_count == 1
    assert budgets.update_many({"status": "open"}, {"$set": {"hinted": 2}}, hint=[("dept", 1)]).modified_count == 3
    assert budgets.delete_one({"dept": "hr"}, hint="by_dept").deleted_count == 1
    reply = db.command(SON([("findAndModify", "budgets"), ("query", {"dept": "it"}), ("update", {"$set": {"h": 1}}),
                            ("hint", "by_dept"), ("new", True)]))
    assert reply["value"]["h"] == 1
    unknown = db.command({"update": "budgets", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "hint": "nope"}]})
    assert unknown["writeErrors"][0]["code"] == 2
    assert "hint provided does not correspond to an existing index" in unknown["writeErrors"][0]["errmsg"]
    assert budgets.count_documents({}) == 4
