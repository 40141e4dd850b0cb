"""The CRUD session a pymongo application runs against `thermocline store`,
checked against MongoDB 6.0's documented answers: results, counts, error
codes and the shape of command replies."""

import datetime
import re
import uuid

import pytest
from bson import SON, Binary, Decimal128, Int64, ObjectId, Regex, Timestamp
from bson.binary import STANDARD
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import ASCENDING, DESCENDING, MongoClient, ReturnDocument, monitoring
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

from conftest import wait_until, wire_command

DB_NAME = "crud"


@pytest.fixture
def db(client):
    return client[DB_NAME]


@pytest.fixture
def items(db):
    """20 documents: _id and n 0..19, group n % 3, name item00..item19,
    tags a list, nested address.city."""
    collection = db["items"]
    collection.insert_many([
        {
            "_id": n,
            "n": n,
            "group": n % 3,
            "name": "item%02d" % n,
            "tags": ["even" if n % 2 == 0 else "odd"] + (["five"] if n % 5 == 0 else []),
            "address": {"city": "Oslo" if n < 10 else "Lima"},
        }
        for n in range(20)
    ])
    return collection


def command_error(database, command):
    """Runs command and returns the OperationFailure it must raise."""
    with pytest.raises(OperationFailure) as raised:
        database.command(command)
    return raised.value


def winning_plan_stages(explain_output):
    """Every stage document under queryPlanner.winningPlan (classic plans nest
    inputStage/inputStages; SBE plans put them under queryPlan)."""
    stages = []
    pending = [explain_output["queryPlanner"]["winningPlan"]]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if "stage" in node:
                stages.append(node)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return stages


# ---------------------------------------------------------------------------
# Handshake
# ---------------------------------------------------------------------------

def test_ping_hello_and_build_info(client):
    assert client.admin.command("ping")["ok"] == 1
    hello = client.admin.command("hello")
    assert hello["isWritablePrimary"] is True
    assert hello["maxBsonObjectSize"] == 16 * 1024 * 1024
    assert hello["maxMessageSizeBytes"] == 48000000
    assert hello["maxWriteBatchSize"] == 100000
    assert hello["minWireVersion"] == 0
    assert hello["maxWireVersion"] == 17  # MongoDB 6.0
    assert isinstance(hello["localTime"], datetime.datetime)
    assert hello["readOnly"] is False
    legacy = client.admin.command("isMaster")
    assert legacy["ismaster"] is True
    build_info = client.admin.command("buildInfo")
    assert build_info["version"].startswith("6.0.")
    assert build_info["versionArray"][:2] == [6, 0]


# ---------------------------------------------------------------------------
# Insert
# ---------------------------------------------------------------------------

def test_insert_one_generates_object_id_and_round_trips_types(db):
    document = {
        "int32": 7,
        "int64": Int64(1 << 40),
        "double": 2.5,
        "decimal": Decimal128("1.10"),
        "string": "h\u00e9llo",
        "bool": True,
        "null": None,
        "date": datetime.datetime(2024, 2, 29, 12, 30, 45, 123000),
        "binary": b"\x00\x01\x02",  # subtype 0; Python 3 decodes it as bytes
        "binary_user": Binary(b"\xff", 0x80),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "regex": Regex("^ab", "i"),
        "nested": {"a": [1, {"b": [2, 3]}], "empty": {}},
        "empty_list": [],
    }
    field_order = list(document.keys())
    # STANDARD: UUIDs travel as BSON binary subtype 4 both ways.
    types = db.get_collection("types", codec_options=CodecOptions(uuid_representation=STANDARD))
    result = types.insert_one(document)
    assert result.acknowledged
    assert isinstance(result.inserted_id, ObjectId)
    stored = types.find_one({"_id": result.inserted_id})
    assert stored == document
    assert isinstance(stored["int64"], Int64)
    assert isinstance(stored["decimal"], Decimal128)
    raw = db.get_collection("types", codec_options=CodecOptions(document_class=RawBSONDocument))
    # Binary element "uuid": 16 bytes of subtype 4, exactly as sent.
    assert b"\x05uuid\x00\x10\x00\x00\x00\x04" + document["uuid"].bytes in raw.find_one().raw
    # The field order is kept; pymongo puts the generated _id first.
    assert list(stored.keys()) == ["_id"] + field_order


def test_insert_many_assigns_ids_in_order(db):
    result = db.many.insert_many([{"k": k} for k in range(50)])
    assert len(result.inserted_ids) == 50
    assert db.many.count_documents({}) == 50
    stored = list(db.many.find({}, sort=[("k", ASCENDING)]))
    assert [d["_id"] for d in stored] == result.inserted_ids


def test_insert_many_ordered_stops_at_duplicate(db):
    db.dups.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError) as raised:
        db.dups.insert_many([{"_id": 2}, {"_id": 1}, {"_id": 3}], ordered=True)
    details = raised.value.details
    assert details["nInserted"] == 1
    assert len(details["writeErrors"]) == 1
    error = details["writeErrors"][0]
    assert error["index"] == 1
    assert error["code"] == 11000
    assert error["keyPattern"] == {"_id": 1}
    assert error["keyValue"] == {"_id": 1}
    assert error["errmsg"] == (
        "E11000 duplicate key error collection: crud.dups index: _id_ dup key: { _id: 1 }")
    assert sorted(d["_id"] for d in db.dups.find()) == [1, 2]


def test_insert_many_unordered_continues_past_duplicates(db):
    db.dups.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError) as raised:
        db.dups.insert_many([{"_id": 2}, {"_id": 1}, {"_id": 3}, {"_id": 2}], ordered=False)
    details = raised.value.details
    assert details["nInserted"] == 2
    assert [e["index"] for e in details["writeErrors"]] == [1, 3]
    assert all(e["code"] == 11000 for e in details["writeErrors"])
    assert sorted(d["_id"] for d in db.dups.find()) == [1, 2, 3]


def test_insert_one_duplicate_raises_duplicate_key_error(db):
    db.dups.insert_one({"_id": "x"})
    with pytest.raises(DuplicateKeyError) as raised:
        db.dups.insert_one({"_id": "x", "other": 1})
    assert raised.value.code == 11000
    assert db.dups.find_one({"_id": "x"}) == {"_id": "x"}


def test_insert_command_reply_shape(db):
    reply = db.command(SON([("insert", "raw"), ("documents", [{"_id": 1}, {"_id": 2}])]))
    assert reply["ok"] == 1
    assert reply["n"] == 2
    assert "writeErrors" not in reply


# ---------------------------------------------------------------------------
# Find
# ---------------------------------------------------------------------------

def test_find_with_filter_and_sort(items):
    found = items.find({"group": 1}, sort=[("n", DESCENDING)])
    assert [d["n"] for d in found] == [19, 16, 13, 10, 7, 4, 1]


def test_find_comparison_and_logical_operators(items):
    assert [d["_id"] for d in items.find({"n": {"$gte": 5, "$lt": 8}}, sort=[("_id", 1)])] \
        == [5, 6, 7]
    assert sorted(d["_id"] for d in items.find({"n": {"$in": [3, 30, 17]}})) == [3, 17]
    assert sorted(d["_id"] for d in items.find({"$or": [{"n": 0}, {"name": "item11"}]})) \
        == [0, 11]
    assert items.count_documents({"n": {"$nin": [1, 2]}, "group": {"$ne": 0}}) == 11
    assert sorted(d["_id"] for d in items.find({"$and": [{"n": {"$gt": 15}},
                                                         {"tags": "odd"}]})) == [17, 19]


def test_find_nested_path_array_element_and_regex(items):
    assert items.count_documents({"address.city": "Lima"}) == 10
    assert sorted(d["_id"] for d in items.find({"tags": "five"})) == [0, 5, 10, 15]
    assert sorted(d["_id"] for d in items.find({"name": {"$regex": "^item1[2-4]$"}})) \
        == [12, 13, 14]
    assert items.count_documents({"tags": {"$size": 2}}) == 4
    assert items.count_documents({"tags": {"$all": ["odd", "five"]}}) == 2


def test_find_null_matches_missing_and_exists(db):
    db.nulls.insert_many([{"_id": 1, "x": None}, {"_id": 2}, {"_id": 3, "x": 0}])
    assert sorted(d["_id"] for d in db.nulls.find({"x": None})) == [1, 2]
    assert sorted(d["_id"] for d in db.nulls.find({"x": {"$exists": False}})) == [2]
    assert sorted(d["_id"] for d in db.nulls.find({"x": {"$exists": True}})) == [1, 3]
    assert sorted(d["_id"] for d in db.nulls.find({"x": {"$type": "null"}})) == [1]


def test_find_numeric_types_compare_by_value(db):
    db.numbers.insert_many([
        {"_id": "int", "v": 5},
        {"_id": "long", "v": Int64(5)},
        {"_id": "double", "v": 5.0},
        {"_id": "decimal", "v": Decimal128("5")},
        {"_id": "string", "v": "5"},
    ])
    assert sorted(d["_id"] for d in db.numbers.find({"v": 5})) == \
        ["decimal", "double", "int", "long"]
    assert sorted(d["_id"] for d in db.numbers.find({"v": {"$gt": 4.5}})) == \
        ["decimal", "double", "int", "long"]


def test_find_projection_inclusion_and_exclusion(items):
    included = items.find_one({"_id": 3}, {"name": 1})
    assert included == {"_id": 3, "name": "item03"}
    without_id = items.find_one({"_id": 3}, {"name": 1, "_id": 0})
    assert without_id == {"name": "item03"}
    excluded = items.find_one({"_id": 3}, {"tags": 0, "address": 0, "group": 0})
    assert excluded == {"_id": 3, "n": 3, "name": "item03"}
    nested = items.find_one({"_id": 12}, {"address.city": 1, "_id": 0})
    assert nested == {"address": {"city": "Lima"}}


def test_find_mixed_projection_is_rejected(items):
    with pytest.raises(OperationFailure) as raised:
        items.find_one({}, {"name": 1, "tags": 0})
    assert raised.value.code == 31254  # "Cannot do exclusion on field tags in inclusion projection"


def test_find_skip_and_limit(items):
    page = items.find({}, sort=[("n", ASCENDING)], skip=5, limit=4)
    assert [d["n"] for d in page] == [5, 6, 7, 8]
    assert list(items.find({}, sort=[("n", 1)], skip=25)) == []
    assert len(list(items.find({}, limit=0))) == 20  # limit 0: no limit


def test_find_compound_sort(items):
    found = items.find({"n": {"$lt": 7}}, {"_id": 1}, sort=[("group", ASCENDING),
                                                         ("n", DESCENDING)])
    assert [d["_id"] for d in found] == [6, 3, 0, 4, 1, 5, 2]


def test_find_sort_orders_mixed_types_by_bson_type_order(db):
    db.mixed.insert_many([
        {"_id": 1, "v": "a"},
        {"_id": 2, "v": 10},
        {"_id": 3, "v": None},
        {"_id": 4, "v": {"x": 1}},
        {"_id": 5, "v": 2.5},
        {"_id": 6},
        {"_id": 7, "v": True},
    ])
    # null and missing sort first, then numbers, strings, objects, booleans.
    order = [d["_id"] for d in db.mixed.find({}, sort=[("v", 1), ("_id", 1)])]
    assert order == [3, 6, 5, 2, 1, 4, 7]


def test_find_on_missing_collection_is_empty(db):
    assert list(db.does_not_exist.find({})) == []
    assert db.does_not_exist.find_one() is None


def test_cursor_iterates_many_get_more_batches(store):
    """5,000 documents read with batch_size 101: every _id exactly once, in
    sort order, through 49 getMore round trips."""
    class Recorder(monitoring.CommandListener):
        def __init__(self):
            self.get_more_replies = []

        def started(self, event):
            pass

        def succeeded(self, event):
            if event.command_name == "getMore":
                self.get_more_replies.append(event.reply)

        def failed(self, event):
            pass

    recorder = Recorder()
    monitored = MongoClient(store.uri, serverSelectionTimeoutMS=10000,
                            socketTimeoutMS=30000, event_listeners=[recorder])
    try:
        collection = monitored[DB_NAME]["big"]
        # Inserted in shuffled order so the sort has work to do.
        ids = [(i * 7919) % 5000 for i in range(5000)]
        collection.insert_many([{"_id": i, "payload": "x" * 20} for i in ids])
        seen = [d["_id"] for d in collection.find({}, sort=[("_id", 1)], batch_size=101)]
        assert seen == list(range(5000))
        assert len(recorder.get_more_replies) == 49
        for reply in recorder.get_more_replies:
            assert len(reply["cursor"]["nextBatch"]) <= 101
        assert recorder.get_more_replies[-1]["cursor"]["id"] == 0
        assert len(recorder.get_more_replies[-1]["cursor"]["nextBatch"]) == 51
    finally:
        monitored.close()


def test_find_min_max_scan_the_hinted_index(db):
    """min (inclusive) and max (exclusive) bound a scan of the hinted index in
    its key order, and the filter still applies (mongod's cursor.min/max)."""
    grid = db["grid"]
    grid.insert_many([{"_id": i, "a": i % 10, "b": i} for i in range(100)])
    grid.create_index([("a", ASCENDING), ("b", DESCENDING)])
    hint = [("a", 1), ("b", -1)]
    # In index order b runs downwards within each a.
    found = grid.find().min([("a", 3), ("b", 60)]).max([("a", 4), ("b", 80)]).hint(hint)
    assert [d["_id"] for d in found] == [53, 43, 33, 23, 13, 3, 94, 84]
    assert [d["_id"] for d in grid.find({"b": {"$lt": 20}}).min([("a", 8), ("b", 50)]).hint(hint)] == [18, 8, 19, 9]
    assert [d["_id"] for d in grid.find().max([("a", 0), ("b", 50)]).hint("a_1_b_-1")] == [90, 80, 70, 60]
    backwards = grid.find().min([("a", 3), ("b", 60)]).max([("a", 4), ("b", 80)]).hint(hint).sort([("a", -1), ("b", 1)])
    assert [d["_id"] for d in backwards] == [84, 94, 3, 13, 23, 33, 43, 53]
    explained = grid.find().min([("a", 3), ("b", 60)]).max([("a", 3), ("b", 0)]).hint(hint).explain()
    (scan,) = [s for s in winning_plan_stages(explained) if s["stage"] == "IXSCAN"]
    assert (scan["indexName"], scan["keyPattern"], scan["direction"]) == ("a_1_b_-1", {"a": 1, "b": -1}, "forward")
    # mongod's bounds of a min/max scan are a simple range, which has no per-field
    # intervals: its explain appends them anyway, as an empty indexBounds.
    assert scan["indexBounds"] == {}
    assert explained["executionStats"]["nReturned"] == 6


def test_find_min_max_errors(db):
    grid = db["grid"]
    grid.insert_many([{"_id": i, "a": i} for i in range(5)])
    grid.create_index([("a", ASCENDING)])
    cases = [
        ({"min": {"a": 1}}, 51173),                                          # no hint
        ({"min": {"a": 1}, "hint": {"$natural": 1}}, 291),                   # not an index
        ({"max": {"b": 1}, "hint": {"a": 1}}, 51174),                        # not the index's fields
        ({"min": {"a": 1, "b": 1}, "hint": {"a": 1}}, 51174),
        ({"min": {"a": 1}, "max": {"b": 1}, "hint": {"a": 1}}, 51176),       # different fields
        ({"min": {"a": 3}, "max": {"a": 3}, "hint": {"a": 1}}, 51175),       # min not before max
        ({"min": 3, "hint": {"a": 1}}, 14),
    ]
    for options, code in cases:
        error = command_error(db, SON([("find", "grid")] + list(options.items())))
        assert error.code == code, (options, error.details)
        names = {14: "TypeMismatch", 291: "NoQueryExecutionPlans"}
        assert error.details["codeName"] == names.get(code, "Location%d" % code)


def test_single_batch_closes_the_cursor(items):
    reply = items.database.command(SON([("find", "items"), ("batchSize", 5), ("singleBatch", True)]))
    assert len(reply["cursor"]["firstBatch"]) == 5 and reply["cursor"]["id"] == 0


def test_find_command_reply_shape(items):
    reply = items.database.command(SON([("find", "items"), ("filter", {"group": 0}),
                                        ("sort", {"_id": 1}), ("batchSize", 3)]))
    assert reply["ok"] == 1
    cursor = reply["cursor"]
    assert cursor["ns"] == "crud.items"
    assert [d["_id"] for d in cursor["firstBatch"]] == [0, 3, 6]
    assert isinstance(cursor["id"], Int64) and cursor["id"] != 0
    rest = items.database.command(SON([("getMore", cursor["id"]), ("collection", "items")]))
    assert [d["_id"] for d in rest["cursor"]["nextBatch"]] == [9, 12, 15, 18]
    assert rest["cursor"]["id"] == 0
    assert rest["cursor"]["ns"] == "crud.items"


# ---------------------------------------------------------------------------
# Update and replace
# ---------------------------------------------------------------------------

def test_update_one_set_and_inc(items):
    result = items.update_one({"_id": 4}, {"$set": {"name": "four"}, "$inc": {"n": 10}})
    assert result.matched_count == 1
    assert result.modified_count == 1
    assert result.upserted_id is None
    assert items.find_one({"_id": 4}, {"name": 1, "n": 1}) == {"_id": 4, "name": "four", "n": 14}


def test_update_one_without_match(items):
    result = items.update_one({"_id": 404}, {"$set": {"x": 1}})
    assert result.matched_count == 0
    assert result.modified_count == 0
    assert items.count_documents({}) == 20


def test_update_that_changes_nothing_is_not_counted_as_modified(items):
    result = items.update_one({"_id": 2}, {"$set": {"name": "item02"}})
    assert result.matched_count == 1
    assert result.modified_count == 0


def test_update_many_inc(items):
    result = items.update_many({"group": 2}, {"$inc": {"n": 100}})
    assert result.matched_count == 6
    assert result.modified_count == 6
    assert sorted(d["n"] for d in items.find({"group": 2})) == [102, 105, 108, 111, 114, 117]


def test_update_array_operators(db):
    db.arrays.insert_one({"_id": 1, "list": [1, 2], "set": ["a"]})
    db.arrays.update_one({"_id": 1}, {"$push": {"list": 3}})
    db.arrays.update_one({"_id": 1}, {"$push": {"list": {"$each": [4, 5]}}})
    db.arrays.update_one({"_id": 1}, {"$addToSet": {"set": {"$each": ["a", "b"]}}})
    db.arrays.update_one({"_id": 1}, {"$pull": {"list": {"$gte": 4}}})
    db.arrays.update_one({"_id": 1}, {"$pop": {"list": -1}})
    assert db.arrays.find_one({"_id": 1}) == {"_id": 1, "list": [2, 3], "set": ["a", "b"]}


def test_update_unset_rename_mul_min_max(db):
    db.ops.insert_one({"_id": 1, "a": 1, "b": 2, "c": 3, "lo": 5, "hi": 5, "m": 4})
    db.ops.update_one({"_id": 1}, {"$unset": {"a": ""}, "$rename": {"b": "bee"},
                                   "$mul": {"m": 2.5}, "$min": {"lo": 1},
                                   "$max": {"hi": 9}})
    assert db.ops.find_one({"_id": 1}) == {"_id": 1, "c": 3, "lo": 1, "hi": 9, "m": 10.0,
                                            "bee": 2}


def test_update_creates_nested_fields(db):
    db.nested.insert_one({"_id": 1})
    db.nested.update_one({"_id": 1}, {"$set": {"a.b.c": 1}, "$inc": {"counter": 1}})
    assert db.nested.find_one({"_id": 1}) == {"_id": 1, "a": {"b": {"c": 1}}, "counter": 1}


def test_update_positional_operator(db):
    db.grades.insert_one({"_id": 1, "grades": [80, 85, 90]})
    db.grades.update_one({"_id": 1, "grades": 85}, {"$set": {"grades.$": 86}})
    assert db.grades.find_one({"_id": 1})["grades"] == [80, 86, 90]


def test_update_with_pipeline(db):
    db.pipe.insert_one({"_id": 1, "a": 2, "b": 3})
    db.pipe.update_one({"_id": 1}, [{"$set": {"sum": {"$add": ["$a", "$b"]}}}])
    assert db.pipe.find_one({"_id": 1}) == {"_id": 1, "a": 2, "b": 3, "sum": 5}


def test_update_of_immutable_id_is_rejected(items):
    with pytest.raises(WriteError) as raised:
        items.update_one({"_id": 1}, {"$set": {"_id": 99}})
    assert raised.value.code == 66  # ImmutableField
    assert items.find_one({"_id": 1}) is not None


def test_inc_on_non_numeric_is_type_mismatch(items):
    with pytest.raises(WriteError) as raised:
        items.update_one({"_id": 1}, {"$inc": {"name": 1}})
    assert raised.value.code == 14  # TypeMismatch
    assert "Cannot apply $inc to a value of non-numeric type" in str(raised.value)


def test_conflicting_update_operators(items):
    with pytest.raises(WriteError) as raised:
        items.update_one({"_id": 1}, {"$set": {"n": 1}, "$inc": {"n": 1}})
    assert raised.value.code == 40  # ConflictingUpdateOperators


def test_unknown_update_operator_is_failed_to_parse(items):
    with pytest.raises(WriteError) as raised:
        items.update_one({"_id": 1}, {"$frobnicate": {"n": 1}})
    assert raised.value.code == 9  # FailedToParse


def test_replace_one_keeps_id_and_drops_other_fields(items):
    result = items.replace_one({"_id": 7}, {"only": "this"})
    assert result.matched_count == 1 and result.modified_count == 1
    assert items.find_one({"_id": 7}) == {"_id": 7, "only": "this"}


def test_upsert_with_update_operators_returns_new_id(db):
    result = db.upserts.update_one({"k": "new"}, {"$set": {"v": 1}}, upsert=True)
    assert result.matched_count == 0
    assert result.modified_count == 0
    assert isinstance(result.upserted_id, ObjectId)
    assert db.upserts.find_one({"_id": result.upserted_id}) == \
        {"_id": result.upserted_id, "k": "new", "v": 1}
    again = db.upserts.update_one({"k": "new"}, {"$set": {"v": 2}}, upsert=True)
    assert again.matched_count == 1 and again.upserted_id is None
    assert db.upserts.count_documents({}) == 1


def test_upsert_with_replacement_takes_id_from_filter(db):
    result = db.upserts.replace_one({"_id": "fixed"}, {"v": 1}, upsert=True)
    assert result.upserted_id == "fixed"
    assert db.upserts.find_one({"_id": "fixed"}) == {"_id": "fixed", "v": 1}


def test_upsert_with_set_on_insert(db):
    db.upserts.update_one({"_id": 1}, {"$setOnInsert": {"created": True}, "$inc": {"hits": 1}},
                          upsert=True)
    db.upserts.update_one({"_id": 1}, {"$setOnInsert": {"created": False}, "$inc": {"hits": 1}},
                          upsert=True)
    assert db.upserts.find_one({"_id": 1}) == {"_id": 1, "created": True, "hits": 2}


# ---------------------------------------------------------------------------
# Delete and count
# ---------------------------------------------------------------------------

def test_delete_one_and_delete_many(items):
    assert items.delete_one({"group": 0}).deleted_count == 1
    assert items.delete_one({"_id": 404}).deleted_count == 0
    assert items.delete_many({"group": 1}).deleted_count == 7
    assert items.count_documents({}) == 12
    assert items.delete_many({}).deleted_count == 12
    assert items.count_documents({}) == 0


def test_count_documents_and_estimated_count(items):
    assert items.count_documents({}) == 20
    assert items.count_documents({"group": 0}) == 7
    assert items.count_documents({}, skip=15) == 5
    assert items.count_documents({}, limit=3) == 3
    assert items.count_documents({"n": {"$gt": 100}}) == 0
    assert items.estimated_document_count() == 20
    assert items.database.does_not_exist.estimated_document_count() == 0


def test_count_command(items):
    reply = items.database.command(SON([("count", "items"), ("query", {"group": 2})]))
    assert reply["n"] == 6 and reply["ok"] == 1


def test_distinct(items):
    assert sorted(items.distinct("group")) == [0, 1, 2]
    assert sorted(items.distinct("address.city")) == ["Lima", "Oslo"]
    # Array fields are unwound: each element is a distinct value.
    assert sorted(items.distinct("tags")) == ["even", "five", "odd"]
    assert sorted(items.distinct("n", {"group": 1, "n": {"$lt": 8}})) == [1, 4, 7]
    assert items.distinct("no_such_field") == []


# ---------------------------------------------------------------------------
# Aggregate
# ---------------------------------------------------------------------------

def test_aggregate_match_group_sort(items):
    result = list(items.aggregate([
        {"$match": {"n": {"$lt": 10}}},
        {"$group": {"_id": "$group", "total": {"$sum": "$n"}, "count": {"$sum": 1},
                    "biggest": {"$max": "$n"}, "names": {"$push": "$name"}}},
        {"$sort": {"_id": 1}},
    ]))
    assert [(r["_id"], r["total"], r["count"], r["biggest"]) for r in result] == \
        [(0, 18, 4, 9), (1, 12, 3, 7), (2, 15, 3, 8)]
    assert result[1]["names"] == ["item01", "item04", "item07"]


def test_aggregate_group_avg_and_null_id(items):
    result = list(items.aggregate([{"$group": {"_id": None, "avg": {"$avg": "$n"},
                                               "min": {"$min": "$n"}}}]))
    assert result == [{"_id": None, "avg": 9.5, "min": 0}]


def test_aggregate_project_computed_fields(items):
    result = list(items.aggregate([
        {"$match": {"_id": {"$in": [2, 3]}}},
        {"$sort": {"_id": 1}},
        {"$project": {"_id": 0, "name": 1, "double": {"$multiply": ["$n", 2]},
                      "city": "$address.city"}},
    ]))
    assert result == [{"name": "item02", "double": 4, "city": "Oslo"},
                      {"name": "item03", "double": 6, "city": "Oslo"}]


def test_aggregate_unwind_and_count(items):
    unwound = list(items.aggregate([{"$match": {"_id": {"$in": [0, 1]}}},
                                    {"$unwind": "$tags"}, {"$sort": {"_id": 1, "tags": 1}},
                                    {"$project": {"tags": 1}}]))
    assert unwound == [{"_id": 0, "tags": "even"}, {"_id": 0, "tags": "five"},
                       {"_id": 1, "tags": "odd"}]
    counted = list(items.aggregate([{"$unwind": "$tags"}, {"$count": "total"}]))
    assert counted == [{"total": 24}]


def test_aggregate_skip_limit_and_empty_result(items):
    page = list(items.aggregate([{"$sort": {"n": -1}}, {"$skip": 2}, {"$limit": 3},
                                 {"$project": {"_id": 1}}]))
    assert page == [{"_id": 17}, {"_id": 16}, {"_id": 15}]
    assert list(items.aggregate([{"$match": {"n": -1}}, {"$count": "total"}])) == []


def test_aggregate_cursor_spans_batches(db):
    db.agg_big.insert_many([{"_id": i} for i in range(1000)])
    result = list(db.agg_big.aggregate([{"$sort": {"_id": -1}}], batchSize=50))
    assert [d["_id"] for d in result] == list(range(999, -1, -1))


def test_aggregate_unknown_stage_is_rejected(items):
    with pytest.raises(OperationFailure) as raised:
        list(items.aggregate([{"$noSuchStage": {}}]))
    assert raised.value.code == 40324  # Unrecognized pipeline stage name


# ---------------------------------------------------------------------------
# Indexes and explain
# ---------------------------------------------------------------------------

def test_create_list_and_drop_index(items):
    assert items.create_index([("n", ASCENDING)]) == "n_1"
    assert items.create_index([("group", ASCENDING), ("n", DESCENDING)]) == "group_1_n_-1"
    indexes = {index["name"]: index for index in items.list_indexes()}
    assert set(indexes) == {"_id_", "n_1", "group_1_n_-1"}
    assert indexes["_id_"]["key"] == {"_id": 1}
    assert indexes["n_1"]["key"] == {"n": 1}
    assert list(indexes["group_1_n_-1"]["key"].items()) == [("group", 1), ("n", -1)]
    assert indexes["n_1"]["v"] == 2
    items.drop_index("n_1")
    assert {index["name"] for index in items.list_indexes()} == {"_id_", "group_1_n_-1"}
    # Queries still answer correctly after the index changes.
    assert items.count_documents({"n": {"$gte": 10}}) == 10


def test_create_index_again_is_a_no_op(items):
    items.create_index([("n", ASCENDING)])
    reply = items.database.command(SON([("createIndexes", "items"),
                                        ("indexes", [{"key": {"n": 1}, "name": "n_1"}])]))
    assert reply["ok"] == 1
    assert reply["numIndexesBefore"] == reply["numIndexesAfter"] == 2


def test_create_indexes_reply_counts(items):
    reply = items.database.command(SON([("createIndexes", "items"),
                                        ("indexes", [{"key": {"name": 1}, "name": "name_1"}])]))
    assert reply["ok"] == 1
    assert reply["numIndexesBefore"] == 1
    assert reply["numIndexesAfter"] == 2
    assert reply["createdCollectionAutomatically"] is False


def test_create_index_creates_missing_collection(db):
    reply = db.command(SON([("createIndexes", "fresh"),
                            ("indexes", [{"key": {"a": 1}, "name": "a_1"}])]))
    assert reply["createdCollectionAutomatically"] is True
    assert "fresh" in db.list_collection_names()


def test_same_name_different_key_is_rejected(items):
    items.create_index([("n", ASCENDING)], name="my_index")
    with pytest.raises(OperationFailure) as raised:
        items.create_index([("group", ASCENDING)], name="my_index")
    assert raised.value.code == 86  # IndexKeySpecsConflict


def test_unique_index_rejects_duplicates(db):
    db.users.insert_many([{"email": "a@x"}, {"email": "b@x"}])
    assert db.users.create_index([("email", ASCENDING)], unique=True) == "email_1"
    unique = [i for i in db.users.list_indexes() if i["name"] == "email_1"][0]
    assert unique["unique"] is True
    with pytest.raises(DuplicateKeyError) as raised:
        db.users.insert_one({"email": "a@x"})
    assert raised.value.code == 11000
    assert raised.value.details["keyPattern"] == {"email": 1}
    assert raised.value.details["keyValue"] == {"email": "a@x"}
    assert "index: email_1 dup key: { email: \"a@x\" }" in raised.value.details["errmsg"]
    with pytest.raises(DuplicateKeyError):
        db.users.update_one({"email": "b@x"}, {"$set": {"email": "a@x"}})
    assert db.users.count_documents({"email": "a@x"}) == 1
    assert db.users.count_documents({"email": "b@x"}) == 1


def test_unique_index_build_fails_on_existing_duplicates(db):
    db.users.insert_many([{"email": "a@x"}, {"email": "a@x"}])
    with pytest.raises(OperationFailure) as raised:
        db.users.create_index([("email", ASCENDING)], unique=True)
    assert raised.value.code == 11000
    assert {i["name"] for i in db.users.list_indexes()} == {"_id_"}


def test_unique_index_treats_missing_as_null(db):
    db.sparse.create_index([("k", ASCENDING)], unique=True)
    db.sparse.insert_one({"_id": 1})
    with pytest.raises(DuplicateKeyError):
        db.sparse.insert_one({"_id": 2})  # a second document without k: null again


def test_drop_unknown_index_is_index_not_found(items):
    with pytest.raises(OperationFailure) as raised:
        items.drop_index("no_such_index")
    assert raised.value.code == 27  # IndexNotFound


def test_drop_id_index_is_refused(items):
    with pytest.raises(OperationFailure) as raised:
        items.drop_index("_id_")
    assert raised.value.code == 72  # InvalidOptions: cannot drop _id index


def test_explain_indexed_find_uses_ixscan(items):
    items.create_index([("n", ASCENDING)])
    explained = items.find({"n": {"$gte": 15}}).explain()
    stages = winning_plan_stages(explained)
    ixscans = [s for s in stages if s["stage"] == "IXSCAN"]
    assert ixscans, "no IXSCAN in winning plan: %r" % explained["queryPlanner"]["winningPlan"]
    assert ixscans[0]["indexName"] == "n_1"
    assert ixscans[0]["keyPattern"] == {"n": 1}
    assert explained["queryPlanner"]["namespace"] == "crud.items"
    assert explained["executionStats"]["nReturned"] == 5
    assert explained["ok"] == 1


def test_explain_covered_query_reads_no_documents(items):
    """A filter and projection the index holds, _id excluded: PROJECTION_COVERED
    over IXSCAN, no FETCH; executionStats counts keys, not documents."""
    items.create_index([("group", ASCENDING), ("n", ASCENDING)])
    covered = items.find({"group": 1, "n": {"$gt": 5}}, {"_id": 0, "group": 1, "n": 1}).explain()
    stages = [s["stage"] for s in winning_plan_stages(covered)]
    assert stages[0] == "PROJECTION_COVERED" and "IXSCAN" in stages and "FETCH" not in stages, stages
    stats = covered["executionStats"]
    assert stats["nReturned"] == 5  # n 7, 10, 13, 16, 19
    assert stats["totalDocsExamined"] == 0
    assert stats["totalKeysExamined"] >= 5
    fetched = items.find({"group": 1, "n": {"$gt": 5}}, {"group": 1, "n": 1}).explain()
    stages = [s["stage"] for s in winning_plan_stages(fetched)]
    assert "FETCH" in stages and "PROJECTION_COVERED" not in stages, stages
    assert fetched["executionStats"]["totalDocsExamined"] == 5


def test_a_long_in_list_is_one_index_seek_per_value(db):
    """{_id: {$in: [...]}} of hundreds of values (the feeder reads its batches'
    marks so) seeks each value, as mongod does, instead of scanning the
    collection; duplicates count once and the answer is the collection scan's."""
    marks = db.long_in
    marks.insert_many([{"_id": {"ns": "a.b", "id": i, "op": "warm"}, "n": i} for i in range(3000)])
    wanted = [{"ns": "a.b", "id": i, "op": "warm"} for i in range(0, 3000, 7)]  # 429 values
    asked = wanted + wanted[:30] + [{"ns": "a.b", "id": -1, "op": "warm"}]
    explained = marks.find({"_id": {"$in": asked}}).explain()
    stats = explained["executionStats"]
    assert [s["stage"] for s in winning_plan_stages(explained)][-1] == "IXSCAN"
    assert stats["nReturned"] == len(wanted)
    assert stats["totalDocsExamined"] == len(wanted)
    assert stats["totalKeysExamined"] <= 2 * (len(wanted) + 1)
    found = sorted(d["n"] for d in marks.find({"_id": {"$in": asked}}))
    assert found == sorted(d["n"] for d in marks.find({"_id": {"$in": asked}}).hint([("$natural", 1)]))
    assert found == list(range(0, 3000, 7))
    marks.create_index([("n", DESCENDING)])
    values = list(range(2999, 0, -11))
    assert [d["n"] for d in marks.find({"n": {"$in": values}}).sort("n", DESCENDING)] == values


def test_the_index_bounding_more_fields_wins(db):
    """{state: "done", to: {$lte: t}}: {state: 1, to: 1} bounds both fields and is
    chosen over {state: 1, since: 1}, which bounds only the first (the feeder's
    clean of its marks); a Timestamp range stays among Timestamps, so documents
    without the field (null keys) are not examined."""
    marks = db.bounded
    marks.insert_many([{"_id": i, "state": "done", "to": Timestamp(1000 + i, 1)} for i in range(500)]
                      + [{"_id": 1000 + i, "state": "done"} for i in range(200)])
    marks.create_index([("state", ASCENDING), ("since", ASCENDING)])
    marks.create_index([("state", ASCENDING), ("to", ASCENDING)])
    for query, expected in (({"state": "done", "to": {"$lte": Timestamp(1009, 0)}}, 9),
                            ({"state": "done", "to": {"$gt": Timestamp(1490, 0)}}, 10)):
        explained = marks.find(query).explain()
        scan = winning_plan_stages(explained)[-1]
        assert scan["stage"] == "IXSCAN" and scan["indexName"] == "state_1_to_1", scan
        stats = explained["executionStats"]
        assert stats["nReturned"] == expected and stats["totalDocsExamined"] == expected
        assert len(list(marks.find(query))) == len(list(marks.find(query).hint([("$natural", 1)])))


def test_a_negated_range_scans_the_index_outside_it(db):
    """{createdAt: {$not: {$gte: cutoff}}} (the evictor's candidates) scans
    [MinKey, cutoff) and (the last date, MaxKey] of {createdAt: 1}, as mongod
    bounds a negated range, instead of the whole collection: documents without
    the field, with null, a number, a string, a Timestamp or an old date are
    found, recent dates are not examined; the answers are the collection
    scan's, for a descending, a compound, a multikey and a sparse index too."""
    cutoff = datetime.datetime(2026, 6, 1)
    day = datetime.timedelta(days=1)
    recent = [{"_id": i, "state": "a", "createdAt": cutoff + day * (i % 100)} for i in range(1000)]
    odd = [{"_id": 1000, "state": "a"}, {"_id": 1001, "state": "a", "createdAt": None},
           {"_id": 1002, "state": "a", "createdAt": 7}, {"_id": 1003, "state": "a", "createdAt": "old"},
           {"_id": 1004, "state": "a", "createdAt": Timestamp(5, 1)},
           {"_id": 1005, "state": "b", "createdAt": cutoff - day}, {"_id": 1006, "state": "a", "createdAt": cutoff - day}]
    documents = db.negated_range
    documents.insert_many(recent + odd)
    documents.create_index([("createdAt", ASCENDING)])
    query = {"createdAt": {"$not": {"$gte": cutoff}}}
    explained = documents.find(query).explain()
    scan = winning_plan_stages(explained)[-1]
    millis = int(cutoff.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
    assert scan["stage"] == "IXSCAN" and scan["indexName"] == "createdAt_1", scan
    assert scan["indexBounds"] == {"createdAt": ["[MinKey, new Date(%d))" % millis,
                                                 "(new Date(9223372036854775807), MaxKey]"]}, scan
    stats = explained["executionStats"]
    assert stats["nReturned"] == stats["totalDocsExamined"] == len(odd), stats

    def answers(query, **options):
        return sorted(d["_id"] for d in documents.find(query, **options))

    def scanned(query):
        return sorted(d["_id"] for d in documents.find(query).hint([("$natural", 1)]))

    negated_window = {"createdAt": {"$not": {"$gte": cutoff + day * 10, "$lt": cutoff + day * 90}}}
    assert answers(query) == scanned(query) == [d["_id"] for d in odd]
    assert answers(negated_window) == scanned(negated_window) and len(answers(negated_window)) == len(odd) + 200
    sorted_ids = [d["_id"] for d in documents.find(query).sort("createdAt", DESCENDING)]
    assert sorted_ids[0] == 1004 and sorted(sorted_ids) == scanned(query)  # a Timestamp sorts after dates
    documents.drop_index("createdAt_1")
    documents.create_index([("createdAt", DESCENDING)])
    assert answers(query, batch_size=2) == scanned(query)
    documents.drop_index("createdAt_-1")
    documents.create_index([("state", ASCENDING), ("createdAt", ASCENDING)])
    in_state = {"state": "a", "createdAt": {"$not": {"$gte": cutoff}}}
    stats = documents.find(in_state).explain()["executionStats"]
    assert stats["totalDocsExamined"] == stats["nReturned"] == len(odd) - 1, stats
    assert answers(in_state) == scanned(in_state)
    documents.drop_index("state_1_createdAt_1")
    documents.create_index([("createdAt", ASCENDING)], sparse=True)  # lacks _id 1000: not eligible
    assert winning_plan_stages(documents.find(query).explain())[-1]["stage"] == "COLLSCAN"
    assert answers(query) == scanned(query)
    documents.insert_many([{"_id": 2000, "createdAt": [cutoff - day, cutoff + day]},
                           {"_id": 2001, "createdAt": [cutoff - day * 2, "old"]}, {"_id": 2002, "createdAt": []}])
    documents.drop_index("createdAt_1")
    documents.create_index([("createdAt", ASCENDING)])  # multikey: a document comes back once
    got = [d["_id"] for d in documents.find(query)]
    assert sorted(got) == scanned(query) and len(got) == len(set(got)) and 2001 in got and 2000 not in got
    assert winning_plan_stages(documents.find(query).explain())[-1]["stage"] == "IXSCAN"


def test_a_negated_range_keeps_nan_null_and_each_document_once(db):
    """The review's cases: NaN matches no comparison, so {$not: {$lt: 5}} holds
    it (numbers' complement starts below -Infinity, where NaN sorts); a NaN
    operand and an empty range are not complemented (two overlapping intervals
    would return a document twice, and an update would change it twice); a
    covered projection of a negated field reads the documents, since the null
    key of a missing field is not a null value."""
    numbers = db.negated_numbers
    numbers.insert_many([{"_id": 1, "a": float("nan")}, {"_id": 2, "a": Decimal128("NaN")}, {"_id": 3, "a": 5},
                         {"_id": 4, "a": float("inf")}, {"_id": 5, "a": -float("inf")}, {"_id": 6}, {"_id": 7, "a": 9}])
    numbers.create_index([("a", ASCENDING)])
    for operand in ({"$lt": 5}, {"$lte": float("inf")}, {"$gte": float("nan")}, {"$gt": 5, "$lt": 5},
                    {"$gte": 10, "$lt": 5}, {"$gte": 5, "$lte": 5}, {"$gt": -float("inf")}):
        query = {"a": {"$not": operand}}
        got = [d["_id"] for d in numbers.find(query)]
        expected = sorted(d["_id"] for d in numbers.find(query).hint([("$natural", 1)]))
        assert sorted(got) == expected and len(got) == len(set(got)), (operand, got, expected)
        assert numbers.count_documents(query) == len(expected), operand
    assert sorted(d["_id"] for d in numbers.find({"a": {"$not": {"$lt": 5}}})) == [1, 2, 3, 4, 6, 7]
    result = numbers.update_many({"a": {"$not": {"$gt": 5, "$lt": 5}}}, {"$inc": {"n": 1}})
    assert result.matched_count == result.modified_count == 7
    assert numbers.count_documents({"n": 1}) == 7
    projected = list(numbers.find({"a": {"$not": {"$gte": 0}}}, {"_id": 0, "a": 1}))
    assert sorted(map(str, projected)) == sorted(map(str, numbers.find({"a": {"$not": {"$gte": 0}}}, {"_id": 0, "a": 1})
                                                            .hint([("$natural", 1)])))
    assert {} in projected


def test_equality_on_a_unique_key_beats_a_wider_index(db):
    """{_id: k, state: "done"} (the evictor's upsert of its mark) reads one document
    through _id_, as mongod does, not every done mark through {state: 1, to: 1},
    which also bounds the query by equality and has more fields; the same for a
    unique secondary index and for an $in of _ids. Found through the faithful lab:
    each of the evictor's 100-mark upserts scanned every done mark (3 s each)."""
    marks = db.unique_wins
    marks.insert_many([{"_id": {"ns": "a.b", "id": i, "op": "warm"}, "state": "done", "to": Timestamp(1000 + i, 1),
                        "email": "e%d" % i} for i in range(2000)])
    marks.create_index([("state", ASCENDING), ("to", ASCENDING)])
    marks.create_index([("state", ASCENDING), ("email", ASCENDING), ("to", ASCENDING)])
    marks.create_index([("email", ASCENDING)], unique=True)
    cases = (({"_id": {"ns": "a.b", "id": 7, "op": "warm"}, "state": "done"}, "_id_", 1),
             ({"_id": {"$in": [{"ns": "a.b", "id": 7, "op": "warm"}, {"ns": "a.b", "id": 9, "op": "warm"}]},
               "state": "done"}, "_id_", 2),
             ({"email": "e12", "state": "done"}, "email_1", 1))
    for query, index, found in cases:
        explained = marks.find(query).explain()
        scan = winning_plan_stages(explained)[-1]
        assert scan["stage"] == "IXSCAN" and scan["indexName"] == index, (query, scan)
        stats = explained["executionStats"]
        assert stats["nReturned"] == found and stats["totalDocsExamined"] == found, (query, stats)
    updated = db.command("explain", {"update": "unique_wins", "updates": [
        {"q": {"_id": {"ns": "a.b", "id": 7, "op": "evict"}, "state": "done"}, "u": {"$set": {"state": "pending"}},
         "upsert": True}]}, verbosity="executionStats")
    assert updated["executionStats"]["totalDocsExamined"] == 0, updated["executionStats"]
    assert updated["executionStats"]["totalKeysExamined"] <= 1, updated["executionStats"]


def test_a_whole_unique_key_is_found_by_an_exact_search(db):
    """Points on every field of a unique index examine only the keys they find: a
    missing key none, even among thousands of deleted entries (the feeder's reads
    of its marks after their clean, where seeking the nearest live key walked every
    deleted entry on the way: 0.2-2.4 s a read); the answers are the collection
    scan's, in both directions and across getMore batches."""
    marks = db.exact_seeks
    marks.insert_many([{"_id": i, "email": "e%05d" % i, "n": i} for i in range(5000)])
    marks.create_index([("email", ASCENDING)], unique=True)
    marks.delete_many({"n": {"$gte": 1000, "$lt": 4000}})
    live, missing = [0, 10, 999, 4000, 4999], [1000, 2500, 3999, -5, 7000]
    for field, key_of in (("_id", lambda n: n), ("email", lambda n: "e%05d" % n)):
        asked = [key_of(n) for n in live + missing]
        stats = marks.find({field: {"$in": asked}}).explain()["executionStats"]
        assert (stats["nReturned"], stats["totalKeysExamined"]) == (len(live), len(live)), (field, stats)
        one = marks.find({field: key_of(2500)}).explain()["executionStats"]
        assert (one["nReturned"], one["totalKeysExamined"]) == (0, 0), (field, one)
        for direction in (ASCENDING, DESCENDING):
            found = [d["n"] for d in marks.find({field: {"$in": asked}}).sort(field, direction).batch_size(2)]
            assert found == sorted(live, reverse=direction == DESCENDING), (field, direction, found)
        scanned = sorted(d["n"] for d in marks.find({field: {"$in": asked}}).hint([("$natural", 1)]))
        assert scanned == live
    assert marks.find_one({"_id": 4999})["email"] == "e04999"
    assert marks.find_one({"email": {"$gte": "e00999", "$lte": "e04000"}}, sort=[("email", DESCENDING)])["n"] == 4000


def test_explain_unindexed_find_uses_collscan(items):
    explained = items.find({"name": "item05"}).explain()
    stages = [s["stage"] for s in winning_plan_stages(explained)]
    assert "COLLSCAN" in stages
    assert "IXSCAN" not in stages
    assert explained["executionStats"]["nReturned"] == 1
    assert explained["executionStats"]["totalDocsExamined"] == 20


def test_or_whose_clauses_are_indexed_is_a_union_of_index_scans(db):
    """mongod's OR stage: each clause scans its own index, a record that matches
    several clauses comes back once, and the answer is the collection scan's."""
    orders = db["or_union"]
    orders.insert_many([{"_id": i, "a": i % 50, "b": i % 7, "tags": [i % 3, i % 11], "c": i}
                        for i in range(2000)])
    orders.create_index([("a", ASCENDING)])
    orders.create_index([("b", DESCENDING), ("c", ASCENDING)])
    orders.create_index([("tags", ASCENDING)])  # multikey
    filters = [
        {"$or": [{"a": 3}, {"b": 2, "c": {"$lt": 300}}]},
        {"$or": [{"a": {"$in": [1, 2]}}, {"tags": 10}, {"_id": {"$gte": 1990}}], "c": {"$mod": [2, 0]}},
        {"$or": [{"a": 5}, {"a": 5}, {"b": {"$gt": 5}}]},  # overlapping clauses
    ]
    for query in filters:
        expected = sorted(document["_id"] for document in orders.find(query).hint([("$natural", 1)]))
        assert expected, query
        got = [document["_id"] for document in orders.find(query, batch_size=7)]
        assert sorted(got) == expected and len(got) == len(set(got)), query
        assert orders.count_documents(query) == len(expected)
        ordered = [document["_id"] for document in orders.find(query).sort("c", DESCENDING).skip(3).limit(25)]
        assert ordered == sorted(expected, reverse=True)[3:28], query
        explained = orders.find(query).explain()
        stages = winning_plan_stages(explained)
        union = [stage for stage in stages if stage["stage"] == "OR"]
        assert union and len(union[0]["inputStages"]) == len(query["$or"]), explained["queryPlanner"]
        assert all(stage["stage"] == "IXSCAN" for stage in union[0]["inputStages"])
        assert "COLLSCAN" not in [stage["stage"] for stage in stages]
        assert explained["executionStats"]["totalDocsExamined"] < 2000
    # One clause no index bounds: the whole query scans the collection, as mongod's.
    stages = [stage["stage"] for stage in winning_plan_stages(orders.find({"$or": [{"a": 1}, {"c": 5}]}).explain())]
    assert "COLLSCAN" in stages and "OR" not in stages
    # Writes plan the same way: each matching document is changed once.
    result = orders.update_many({"$or": [{"a": 4}, {"b": 4}]}, {"$inc": {"hits": 1}})
    matched = orders.count_documents({"$or": [{"a": 4}, {"b": 4}]})
    assert result.matched_count == result.modified_count == matched
    assert orders.count_documents({"hits": {"$gt": 1}}) == 0
    assert orders.delete_many({"$or": [{"a": 6}, {"tags": 6}]}).deleted_count == \
        len([i for i in range(2000) if i % 50 == 6 or 6 in (i % 3, i % 11)])


def test_explain_id_lookup_uses_the_id_index(items):
    explained = items.database.command(SON([
        ("explain", SON([("find", "items"), ("filter", {"_id": 3})])),
        ("verbosity", "queryPlanner"),
    ]))
    stages = [s["stage"] for s in winning_plan_stages(explained)]
    assert "IDHACK" in stages or "IXSCAN" in stages
    assert "executionStats" not in explained


# ---------------------------------------------------------------------------
# findAndModify
# ---------------------------------------------------------------------------

def test_find_one_and_update_returns_before_or_after(items):
    before = items.find_one_and_update({"_id": 1}, {"$inc": {"n": 5}})
    assert before["n"] == 1
    after = items.find_one_and_update({"_id": 1}, {"$inc": {"n": 5}},
                                      return_document=ReturnDocument.AFTER)
    assert after["n"] == 11
    assert items.find_one({"_id": 1})["n"] == 11


def test_find_one_and_update_sort_projection_and_no_match(items):
    first = items.find_one_and_update({"group": 2}, {"$set": {"picked": True}},
                                      sort=[("n", DESCENDING)], projection={"n": 1, "_id": 0},
                                      return_document=ReturnDocument.AFTER)
    assert first == {"n": 17}
    assert items.find_one({"picked": True})["_id"] == 17
    assert items.find_one_and_update({"_id": 404}, {"$set": {"x": 1}}) is None


def test_find_one_and_update_upsert(db):
    created = db.fam.find_one_and_update({"_id": "counter"}, {"$inc": {"seq": 1}}, upsert=True,
                                         return_document=ReturnDocument.AFTER)
    assert created == {"_id": "counter", "seq": 1}
    assert db.fam.find_one_and_update({"_id": "other"}, {"$inc": {"seq": 1}},
                                      upsert=True) is None  # BEFORE of an upsert: nothing


def test_find_one_and_replace(items):
    old = items.find_one_and_replace({"_id": 9}, {"replaced": True})
    assert old["name"] == "item09"
    assert items.find_one({"_id": 9}) == {"_id": 9, "replaced": True}


def test_find_one_and_delete(items):
    deleted = items.find_one_and_delete({"group": 1}, sort=[("n", DESCENDING)])
    assert deleted["_id"] == 19
    assert items.find_one({"_id": 19}) is None
    assert items.count_documents({}) == 19
    assert items.find_one_and_delete({"_id": 404}) is None


def test_find_and_modify_reply_shape(items):
    reply = items.database.command(SON([("findAndModify", "items"), ("query", {"_id": 2}),
                                        ("update", {"$set": {"x": 1}}), ("new", True)]))
    assert reply["ok"] == 1
    assert reply["value"]["x"] == 1
    assert reply["lastErrorObject"]["n"] == 1
    assert reply["lastErrorObject"]["updatedExisting"] is True


# ---------------------------------------------------------------------------
# Collections and databases
# ---------------------------------------------------------------------------

def test_list_collection_names_create_and_drop(db):
    db.create_collection("alpha")
    db.beta.insert_one({"x": 1})
    assert sorted(db.list_collection_names()) == ["alpha", "beta"]
    listed = {c["name"]: c for c in db.list_collections()}
    assert listed["alpha"]["type"] == "collection"
    db.drop_collection("alpha")
    assert db.list_collection_names() == ["beta"]
    db.beta.drop()
    assert db.list_collection_names() == []
    assert db.beta.find_one() is None


def test_create_existing_collection_with_other_options_is_namespace_exists(db):
    # Identical options became a no-op in later versions (SERVER-60064);
    # different options are NamespaceExists in every version.
    db.command("create", "gamma")
    error = command_error(db, SON([("create", "gamma"), ("capped", True), ("size", 4096)]))
    assert error.code == 48  # NamespaceExists


def test_drop_collection_drops_its_indexes(db):
    db.coll.create_index([("a", 1)])
    db.coll.insert_one({"a": 1})
    db.coll.drop()
    db.coll.insert_one({"a": 1})
    assert [i["name"] for i in db.coll.list_indexes()] == ["_id_"]


def test_list_database_names_and_drop_database(client):
    client["first_db"]["c"].insert_one({"x": 1})
    client["second_db"]["c"].insert_one({"x": 1})
    names = client.list_database_names()
    assert "first_db" in names and "second_db" in names
    full = client.admin.command("listDatabases")
    by_name = {d["name"]: d for d in full["databases"]}
    assert by_name["first_db"]["empty"] is False
    assert by_name["first_db"]["sizeOnDisk"] >= 0
    assert "totalSize" in full
    client.drop_database("first_db")
    names = client.list_database_names()
    assert "first_db" not in names and "second_db" in names
    assert client["first_db"].list_collection_names() == []


def test_database_without_collections_is_not_listed(client):
    client["ghost_db"].list_collection_names()
    assert "ghost_db" not in client.list_database_names()


def test_coll_stats_fields(items):
    items.create_index([("n", ASCENDING)])
    stats = items.database.command("collStats", "items")
    assert stats["ok"] == 1
    assert stats["ns"] == "crud.items"
    assert stats["count"] == 20
    assert stats["size"] > 20 * 40  # each document is well over 40 bytes of BSON
    assert stats["avgObjSize"] == stats["size"] // 20
    assert stats["nindexes"] == 2
    assert set(stats["indexSizes"]) == {"_id_", "n_1"}
    assert stats["totalIndexSize"] == sum(stats["indexSizes"].values())
    assert stats["storageSize"] >= 0
    assert stats["totalSize"] == stats["storageSize"] + stats["totalIndexSize"]
    assert stats["capped"] is False
    assert stats["scaleFactor"] == 1


def test_coll_stats_scale(items):
    plain = items.database.command("collStats", "items")
    scaled = items.database.command("collStats", "items", scale=1024)
    assert scaled["scaleFactor"] == 1024
    assert scaled["size"] == plain["size"] // 1024


def test_coll_stats_on_missing_collection_is_all_zero(db):
    # Since MongoDB 4.2 (SERVER-29678): ok: 1 with zero sizes, not an error.
    stats = db.command("collStats", "missing")
    assert stats["ok"] == 1
    assert stats["ns"] == "crud.missing"
    assert stats["count"] == 0
    assert stats["size"] == 0
    assert stats["storageSize"] == 0
    assert stats["nindexes"] == 0
    assert stats["totalIndexSize"] == 0
    assert stats["indexSizes"] == {}


def test_db_stats_fields(items):
    items.database.other.insert_one({"x": 1})
    stats = items.database.command("dbStats")
    assert stats["ok"] == 1
    assert stats["db"] == "crud"
    assert stats["collections"] == 2
    assert stats["views"] == 0
    assert stats["objects"] == 21
    assert stats["dataSize"] > 0
    assert stats["avgObjSize"] == pytest.approx(stats["dataSize"] / 21, rel=0.01)
    assert stats["indexes"] == 2
    assert stats["indexSize"] >= 0 and stats["storageSize"] >= 0
    assert stats["totalSize"] == stats["storageSize"] + stats["indexSize"]
    assert stats["scaleFactor"] == 1
    assert 0 < stats["fsUsedSize"] <= stats["fsTotalSize"]


# ---------------------------------------------------------------------------
# Command errors
# ---------------------------------------------------------------------------

def test_unknown_command_is_command_not_found(db):
    error = command_error(db, SON([("thisCommandDoesNotExist", 1)]))
    assert error.code == 59
    assert error.details["codeName"] == "CommandNotFound"
    assert error.details["errmsg"] == "no such command: 'thisCommandDoesNotExist'"
    assert error.details["ok"] == 0


def test_get_more_on_unknown_cursor_is_cursor_not_found(items):
    error = command_error(items.database, SON([("getMore", Int64(123456789)),
                                               ("collection", "items")]))
    assert error.code == 43
    assert error.details["codeName"] == "CursorNotFound"
    assert error.details["errmsg"] == "cursor id 123456789 not found"


def test_get_more_with_int32_cursor_id_is_type_mismatch(items):
    error = command_error(items.database, SON([("getMore", 5), ("collection", "items")]))
    assert error.code == 14
    assert error.details["errmsg"] == \
        "BSON field 'getMore.getMore' is the wrong type 'int', expected type 'long'"


def test_kill_cursors_unknown_id_is_reported_not_found(items):
    reply = items.database.command(SON([("killCursors", "items"),
                                        ("cursors", [Int64(987654321)])]))
    assert reply["ok"] == 1
    assert reply["cursorsNotFound"] == [987654321]
    assert reply["cursorsKilled"] == []
    assert reply["cursorsAlive"] == []
    assert reply["cursorsUnknown"] == []


def test_kill_cursors_then_get_more_is_cursor_not_found(items):
    opened = items.database.command(SON([("find", "items"), ("batchSize", 2)]))
    cursor_id = opened["cursor"]["id"]
    assert cursor_id != 0
    reply = items.database.command(SON([("killCursors", "items"), ("cursors", [cursor_id])]))
    assert reply["cursorsKilled"] == [cursor_id]
    assert reply["cursorsNotFound"] == []
    error = command_error(items.database, SON([("getMore", cursor_id), ("collection", "items")]))
    assert error.code == 43


def test_idle_cursor_times_out_after_cursor_timeout_millis(client, items):
    """cursorTimeoutMillis (10 minutes, as mongod) is set at runtime; an idle
    cursor past it is reaped (getMore: CursorNotFound), a noCursorTimeout one is not."""
    assert client.admin.command("getParameter", 1, cursorTimeoutMillis=1)["cursorTimeoutMillis"] == 600000
    database = items.database
    database.many.insert_many([{"_id": i} for i in range(1000)])
    kept = database.command(SON([("find", "items"), ("batchSize", 1), ("noCursorTimeout", True)]))["cursor"]["id"]
    assert client.admin.command("setParameter", 1, cursorTimeoutMillis=1)["was"] == 600000
    reaped = database.command(SON([("find", "many"), ("batchSize", 1)]))["cursor"]["id"]

    def reaped_cursor_is_gone():
        # A getMore that still succeeds takes one document of 999 (the cursor
        # cannot run out first); the reaper runs every second.
        try:
            reply = database.command(SON([("getMore", reaped), ("collection", "many"), ("batchSize", 1)]))
        except OperationFailure as error:
            assert error.code == 43 and error.details["codeName"] == "CursorNotFound"
            return True
        assert reply["cursor"]["id"] == reaped
        return False

    assert wait_until(reaped_cursor_is_gone, timeout=15, interval=0.5)
    # The pass that reaped one cursor found the other idle as long: still there.
    rest = database.command(SON([("getMore", kept), ("collection", "items")]))
    assert len(rest["cursor"]["nextBatch"]) == 19
    assert client.admin.command("getParameter", 1, cursorTimeoutMillis=1)["cursorTimeoutMillis"] == 1
    error = command_error(client.admin, SON([("setParameter", 1), ("cursorTimeoutMillis", "soon")]))
    assert error.code == 2


def test_batches_stop_short_of_the_16_mib_reply_limit(db):
    """Five 5 MB documents: three fit under maxBsonObjectSize in the first batch
    (as mongod, whatever batchSize says), the other two come with getMore."""
    big = db["big_documents"]
    for i in range(5):
        big.insert_one({"_id": i, "payload": "x" * 5_000_000})
    reply = db.command(SON([("find", "big_documents"), ("sort", {"_id": 1}), ("batchSize", 100)]))
    assert [d["_id"] for d in reply["cursor"]["firstBatch"]] == [0, 1, 2]
    rest = db.command(SON([("getMore", reply["cursor"]["id"]), ("collection", "big_documents")]))
    assert [d["_id"] for d in rest["cursor"]["nextBatch"]] == [3, 4] and rest["cursor"]["id"] == 0


def test_write_batch_past_max_write_batch_size_is_invalid_length(store, db):
    """maxWriteBatchSize is 100,000: one more operation is refused whole, with
    mongod's InvalidLength (16), and nothing is written."""
    reply = wire_command(store.port, SON([("insert", "batch"), ("documents", [{"_id": i} for i in range(100_001)]),
                                          ("$db", DB_NAME)]), timeout=60)
    assert reply["ok"] == 0 and reply["code"] == 16 and reply["codeName"] == "InvalidLength", reply
    assert reply["errmsg"] == "Write batch sizes must be between 1 and 100000. Got 100001 operations."
    assert db.batch.estimated_document_count() == 0


def test_empty_write_batch_is_invalid_length(store, db):
    """A write batch of no operations is refused as mongod refuses it, with the
    same InvalidLength (16) as one too many, and the insert creates nothing.
    (shop.orders is a tiered namespace when test_proxy_crud runs this.)"""
    for database in (DB_NAME, "shop"):
        for name, field in (("insert", "documents"), ("update", "updates"), ("delete", "deletes")):
            reply = wire_command(store.port, SON([(name, "orders"), (field, []), ("$db", database)]))
            assert reply["ok"] == 0 and reply["code"] == 16 and reply["codeName"] == "InvalidLength", reply
            assert reply["errmsg"] == "Write batch sizes must be between 1 and 100000. Got 0 operations."
        assert "orders" not in db.client[database].list_collection_names()


def test_exhausted_cursor_is_closed(items):
    opened = items.database.command(SON([("find", "items"), ("batchSize", 2)]))
    cursor_id = last_id = opened["cursor"]["id"]
    assert cursor_id != 0
    while cursor_id != 0:
        reply = items.database.command(SON([("getMore", cursor_id), ("collection", "items"),
                                            ("batchSize", 7)]))
        assert len(reply["cursor"]["nextBatch"]) <= 7
        last_id, cursor_id = cursor_id, reply["cursor"]["id"]
    error = command_error(items.database, SON([("getMore", last_id), ("collection", "items")]))
    assert error.code == 43


def test_find_with_string_filter_is_type_mismatch(items):
    error = command_error(items.database, SON([("find", "items"), ("filter", "not a document")]))
    assert error.code == 14
    assert error.details["codeName"] == "TypeMismatch"
    assert re.search(r"BSON field '\w+\.filter' is the wrong type 'string', "
                     r"expected type 'object'", error.details["errmsg"])


def test_find_with_string_sort_is_type_mismatch(items):
    error = command_error(items.database, SON([("find", "items"), ("sort", "n")]))
    assert error.code == 14


def test_insert_with_non_array_documents_is_type_mismatch(store):
    # Sent by hand: pymongo always moves "documents" into an OP_MSG document
    # sequence, which cannot carry a non-array.
    reply = wire_command(store.port, SON([("insert", "c"), ("documents", {"_id": 1}),
                                          ("$db", DB_NAME)]))
    assert reply["ok"] == 0
    assert reply["code"] == 14
    assert reply["codeName"] == "TypeMismatch"
    assert reply["errmsg"] == \
        "BSON field 'insert.documents' is the wrong type 'object', expected type 'array'"


def test_unknown_field_in_find_is_rejected(items):
    error = command_error(items.database, SON([("find", "items"), ("noSuchOption", 1)]))
    assert error.code == 40415  # UnrecognizedCommandField
    assert error.details["errmsg"] == \
        "BSON field 'FindCommandRequest.noSuchOption' is an unknown field."


def test_unknown_query_operator_is_bad_value(items):
    with pytest.raises(OperationFailure) as raised:
        items.find_one({"n": {"$frobnicate": 1}})
    assert raised.value.code == 2  # BadValue: unknown operator: $frobnicate
    assert raised.value.details["errmsg"] == "unknown operator: $frobnicate"


def test_negative_limit_in_find_command_is_rejected(items):
    error = command_error(items.database, SON([("find", "items"), ("limit", -1)]))
    assert error.code == 51024
