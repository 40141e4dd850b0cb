"""$out and $merge as a pymongo application meets them against `thermocline
store`: aggregate([..., {"$out": ...}]) replacing a collection whole (its indexes
kept), $merge's modes into the same or another database, and MongoDB 6.0's
errors (DuplicateKey, a missing unique index on `on`, a stage not last)."""

import json

import pytest
from bson import SON
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import StoreProcess

DB_NAME = "outmerge"


@pytest.fixture
def db(client):
    return client[DB_NAME]


@pytest.fixture
def sales(db):
    collection = db["sales"]
    collection.insert_many([
        {"_id": 1, "item": "pen", "qty": 5, "region": "north"},
        {"_id": 2, "item": "pad", "qty": 2, "region": "north"},
        {"_id": 3, "item": "pen", "qty": 7, "region": "south"},
        {"_id": 4, "item": "ink", "qty": 1, "region": "south"},
    ])
    return collection


def failure(database, command):
    with pytest.raises(OperationFailure) as raised:
        database.command(command)
    return raised.value


def by_id(collection):
    return list(collection.find().sort("_id", 1))


def test_out_writes_the_results_and_replies_with_an_empty_cursor(db, sales):
    reply = db.command(SON([("aggregate", "sales"),
                            ("pipeline", [{"$group": {"_id": "$item", "total": {"$sum": "$qty"}}},
                                          {"$out": "totals"}]),
                            ("cursor", {})]))
    assert reply["cursor"]["firstBatch"] == [] and reply["cursor"]["id"] == 0
    assert by_id(db["totals"]) == [{"_id": "ink", "total": 1}, {"_id": "pad", "total": 2},
                                   {"_id": "pen", "total": 12}]
    assert "tmp.agg_out" not in " ".join(db.list_collection_names())


def test_out_replaces_the_target_and_keeps_its_indexes(db, sales):
    target = db["report"]
    target.insert_many([{"_id": "old", "n": 1}, {"_id": "older", "n": 2}])
    target.create_index("region", name="by_region")
    list(sales.aggregate([{"$match": {"region": "south"}}, {"$out": "report"}]))
    assert [d["_id"] for d in by_id(target)] == [3, 4]
    assert "by_region" in target.index_information()
    # A pipeline may read the collection it replaces.
    list(target.aggregate([{"$match": {"_id": 3}}, {"$out": "report"}]))
    assert [d["_id"] for d in by_id(target)] == [3]


def test_explain_of_out_writes_nothing(db, sales):
    explained = db.command(SON([("explain", SON([("aggregate", "sales"),
                                                 ("pipeline", [{"$match": {"qty": {"$gt": 1}}}, {"$out": "never"}]),
                                                 ("cursor", {})]))]))
    assert explained["stages"][-1] == {"$out": "never"}
    assert "never" not in db.list_collection_names()


def test_out_to_another_database(client, db, sales):
    list(sales.aggregate([{"$project": {"item": 1}}, {"$out": {"db": "outmerge_other", "coll": "copy"}}]))
    assert [d["_id"] for d in by_id(client["outmerge_other"]["copy"])] == [1, 2, 3, 4]
    client.drop_database("outmerge_other")


def test_out_failing_on_a_duplicate_leaves_the_target_unchanged(db, sales):
    db["kept"].insert_one({"_id": "pen", "qty": 0})
    error = failure(db, SON([("aggregate", "sales"),
                             ("pipeline", [{"$project": {"_id": "$item"}}, {"$out": "kept"}]), ("cursor", {})]))
    assert (error.code, error.details["codeName"]) == (11000, "DuplicateKey")
    assert by_id(db["kept"]) == [{"_id": "pen", "qty": 0}]
    assert not [name for name in db.list_collection_names() if name.startswith("tmp.agg_out")]


def test_out_and_merge_must_be_the_last_stage(db, sales):
    for stage in ({"$out": "x"}, {"$merge": {"into": "x"}}):
        error = failure(db, SON([("aggregate", "sales"), ("pipeline", [stage, {"$match": {}}]), ("cursor", {})]))
        assert error.code == 40601
    error = failure(db, SON([("aggregate", "sales"), ("pipeline", [{"$out": "system.x"}]), ("cursor", {})]))
    assert error.code == 17385


def test_a_target_that_names_no_collection_is_refused(db, sales):
    """(The proxy refuses these itself, with IllegalOperation 20: it must name the
    target to route the write, so test_proxy_out_merge leaves this test out.)"""
    error = failure(db, SON([("aggregate", "sales"), ("pipeline", [{"$out": 3}]), ("cursor", {})]))
    assert error.code == 16990
    error = failure(db, SON([("aggregate", "sales"), ("pipeline", [{"$merge": {"whenMatched": "merge"}}]),
                             ("cursor", {})]))
    assert error.code == 40414


def test_out_to_a_view_is_refused(db, sales):
    db.command("create", "a_view", viewOn="sales", pipeline=[])
    error = failure(db, SON([("aggregate", "sales"), ("pipeline", [{"$out": "a_view"}]), ("cursor", {})]))
    assert (error.code, error.details["codeName"]) == (166, "CommandNotSupportedOnView")


def test_merge_defaults_merge_into_matches_and_insert_the_rest(db, sales):
    target = db["stock"]
    target.insert_many([{"_id": 1, "qty": 0, "note": "kept"}, {"_id": 9, "qty": 9}])
    reply = db.command(SON([("aggregate", "sales"), ("pipeline", [{"$merge": "stock"}]), ("cursor", {})]))
    assert reply["cursor"]["firstBatch"] == []
    documents = by_id(target)
    assert [d["_id"] for d in documents] == [1, 2, 3, 4, 9]
    assert documents[0] == {"_id": 1, "qty": 5, "note": "kept", "item": "pen", "region": "north"}


def test_merge_of_results_without_id_inserts_them_with_one(db, sales):
    list(sales.aggregate([{"$project": {"_id": 0, "item": 1}}, {"$merge": "no_ids"}]))
    documents = list(db["no_ids"].find())
    assert sorted(d["item"] for d in documents) == ["ink", "pad", "pen", "pen"]
    assert len({d["_id"] for d in documents}) == 4
    list(sales.aggregate([{"$project": {"_id": 0, "item": 1}}, {"$out": "no_ids_out"}]))
    assert db["no_ids_out"].count_documents({}) == 4


def test_merge_when_matched_modes(db, sales):
    def reset():
        db["t"].drop()
        db["t"].insert_one({"_id": 1, "qty": 0, "note": "old"})

    reset()
    list(sales.aggregate([{"$match": {"_id": {"$in": [1, 2]}}},
                          {"$merge": {"into": "t", "whenMatched": "replace"}}]))
    assert by_id(db["t"])[0] == {"_id": 1, "item": "pen", "qty": 5, "region": "north"}
    reset()
    list(sales.aggregate([{"$match": {"_id": {"$in": [1, 2]}}},
                          {"$merge": {"into": "t", "whenMatched": "keepExisting"}}]))
    assert by_id(db["t"]) == [{"_id": 1, "qty": 0, "note": "old"},
                              {"_id": 2, "item": "pad", "qty": 2, "region": "north"}]
    reset()
    list(sales.aggregate([{"$match": {"_id": {"$in": [1, 2]}}},
                          {"$merge": {"into": "t", "whenMatched": [{"$set": {"qty": {"$add": ["$qty", "$$new.qty"]}}}]}}]))
    assert by_id(db["t"]) == [{"_id": 1, "qty": 5, "note": "old"},
                              {"_id": 2, "item": "pad", "qty": 2, "region": "north"}]
    reset()
    list(sales.aggregate([{"$match": {"_id": 1}},
                          {"$merge": {"into": "t", "let": {"extra": {"$multiply": ["$qty", 10]}},
                                      "whenMatched": [{"$set": {"qty": "$$extra"}}]}}]))
    assert by_id(db["t"]) == [{"_id": 1, "qty": 50, "note": "old"}]
    reset()
    error = failure(db, SON([("aggregate", "sales"),
                             ("pipeline", [{"$merge": {"into": "t", "whenMatched": "fail"}}]), ("cursor", {})]))
    assert (error.code, error.details["codeName"]) == (11000, "DuplicateKey")


def test_merge_when_not_matched_modes(db, sales):
    db["u"].insert_one({"_id": 1, "qty": 0})
    list(sales.aggregate([{"$merge": {"into": "u", "whenMatched": "merge", "whenNotMatched": "discard"}}]))
    assert by_id(db["u"]) == [{"_id": 1, "qty": 5, "item": "pen", "region": "north"}]
    error = failure(db, SON([("aggregate", "sales"),
                             ("pipeline", [{"$merge": {"into": "u", "whenMatched": "replace",
                                                       "whenNotMatched": "fail"}}]), ("cursor", {})]))
    assert error.code == 13113
    error = failure(db, SON([("aggregate", "sales"),
                             ("pipeline", [{"$merge": {"into": "u", "whenMatched": "fail",
                                                       "whenNotMatched": "discard"}}]), ("cursor", {})]))
    assert error.code == 51181


def test_merge_on_other_fields_needs_a_unique_index(client, db, sales):
    db["by_item"].insert_one({"_id": "x", "item": "pen", "seen": True})
    pipeline = [{"$group": {"_id": "$item", "qty": {"$sum": "$qty"}}}, {"$project": {"_id": 0, "item": "$_id", "qty": 1}},
                {"$merge": {"into": "by_item", "on": "item"}}]
    error = failure(db, SON([("aggregate", "sales"), ("pipeline", pipeline), ("cursor", {})]))
    assert error.code == 51183
    db["by_item"].create_index("item", unique=True)
    list(sales.aggregate(pipeline))
    documents = {d["item"]: d for d in db["by_item"].find()}
    assert documents["pen"] == {"_id": "x", "item": "pen", "seen": True, "qty": 12}
    assert documents["ink"]["qty"] == 1
    # Into another database, which does not exist yet (on _id needs no index).
    list(sales.aggregate([{"$merge": {"into": {"db": "outmerge_far", "coll": "copy"}}}]))
    assert client["outmerge_far"]["copy"].count_documents({}) == 4
    client.drop_database("outmerge_far")


def test_merge_on_a_missing_value_is_refused(db, sales):
    db["keyed"].create_index("code", unique=True)
    error = failure(db, SON([("aggregate", "sales"),
                             ("pipeline", [{"$merge": {"into": "keyed", "on": "code"}}]), ("cursor", {})]))
    assert error.code == 51132


def test_merge_parse_errors(db, sales):
    for spec, code in (({"into": "x", "whenMatched": "sometimes"}, 2), ({"into": "x", "bogus": 1}, 40415),
                       ({"into": "x", "let": {"a": 1}}, 51199)):
        error = failure(db, SON([("aggregate", "sales"), ("pipeline", [{"$merge": spec}]), ("cursor", {})]))
        assert error.code == code, (spec, error.details)


def test_out_from_a_view(db, sales):
    db.command("create", "north", viewOn="sales", pipeline=[{"$match": {"region": "north"}}])
    list(db["north"].aggregate([{"$project": {"qty": 1}}, {"$out": "north_copy"}]))
    assert by_id(db["north_copy"]) == [{"_id": 1, "qty": 5}, {"_id": 2, "qty": 2}]


def test_out_and_merge_are_refused_in_a_transaction(tmp_path):
    store = StoreProcess(tmp_path / "rs", replica_set="rs0")
    store.start()
    try:
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        client.txn.source.insert_one({"_id": 1})
        for stage in ({"$out": "copy"}, {"$merge": "copy"}):
            with client.start_session() as session:
                with pytest.raises(OperationFailure) as raised:
                    with session.start_transaction():
                        list(client.txn.source.aggregate([stage], session=session))
            assert raised.value.code == 263, raised.value.details
        assert "copy" not in client.txn.list_collection_names()
        client.close()
    finally:
        store.stop()


def test_out_and_merge_write_under_the_aggregate_write_concern(tmp_path):
    """As mongod's: the aggregate's writeConcern covers what $out and $merge write.
    Under --replSet the default (majority) is journaled, so the reply waits for
    the journal's sync, and w: 1 does not; with every sync 150 ms slower, each
    aggregate's slow line (--slowms 0) says whether it waited."""
    store = StoreProcess(tmp_path / "rs", replica_set="rs0",
                         extra_args=["--slowms", "0", "--sync-delay", "150ms", "--log-format", "json"])
    store.start()
    try:
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        client.wc.sales.insert_many([{"_id": i, "qty": i} for i in range(3)])
        cases = [({"$out": "out_default"}, None, True), ({"$merge": {"into": "merge_default"}}, None, True),
                 ({"$out": "out_w1"}, {"w": 1}, False), ({"$merge": {"into": "merge_w1"}}, {"w": 1}, False)]
        for stage, concern, _ in cases:
            command = SON([("aggregate", "sales"), ("pipeline", [stage]), ("cursor", {})])
            if concern is not None:
                command["writeConcern"] = concern
            client.wc.command(command)
        for name in ("out_default", "merge_default", "out_w1", "merge_w1"):
            assert client.wc[name].count_documents({}) == 3, name
        client.close()
        records = [json.loads(line) for line in store.log_path.read_text().splitlines() if line.startswith("{")]
        lines = [r["attr"] for r in records if r["msg"].startswith("Slow query: {command}") and
                 r["attr"]["command"] == "aggregate" and r["attr"]["shape"].startswith('{aggregate: "sales"')]
        assert len(lines) == len(cases), lines
        for (stage, concern, waits), attr in zip(cases, lines):
            if waits:
                assert attr.get("waitForWriteConcernDurationMillis", 0) >= 150, (stage, attr)
            else:
                assert "waitForWriteConcernDurationMillis" not in attr, (stage, attr)
    finally:
        store.stop()


# --- database-level aggregate ------------------------------------------------------


def aggregate_on_database(db, pipeline, **options):
    command = SON([("aggregate", 1), ("pipeline", pipeline), ("cursor", options)])
    return db.command(command)


def test_documents_feeds_a_database_level_aggregate(db):
    reply = aggregate_on_database(db, [{"$documents": [{"x": 1}, {"x": 2}, {"x": 3}]},
                                       {"$match": {"x": {"$gte": 2}}}, {"$set": {"y": {"$multiply": ["$x", 10]}}}])
    assert reply["cursor"]["ns"] == DB_NAME + ".$cmd.aggregate"
    assert reply["cursor"]["firstBatch"] == [{"x": 2, "y": 20}, {"x": 3, "y": 30}]
    # An expression that evaluates to the array, and a cursor continued by getMore.
    reply = aggregate_on_database(db, [{"$documents": {"$cond": [True, [{"n": i} for i in range(5)], []]}}],
                                  batchSize=2)
    assert [d["n"] for d in reply["cursor"]["firstBatch"]] == [0, 1]
    more = db.command(SON([("getMore", reply["cursor"]["id"]), ("collection", "$cmd.aggregate")]))
    assert [d["n"] for d in more["cursor"]["nextBatch"]] == [2, 3, 4]
    assert more["cursor"]["id"] == 0


def test_documents_with_let_and_into_merge(db):
    reply = db.command(SON([("aggregate", 1), ("pipeline", [{"$documents": [{"_id": 1, "v": "$$value"}]},
                                                           {"$set": {"w": "$$value"}}]),
                            ("let", {"value": 7}), ("cursor", {})]))
    assert reply["cursor"]["firstBatch"] == [{"_id": 1, "v": 7, "w": 7}]
    aggregate_on_database(db, [{"$documents": [{"_id": 1, "a": 1}, {"_id": 2, "a": 2}]}, {"$merge": "seeded"}])
    assert by_id(db["seeded"]) == [{"_id": 1, "a": 1}, {"_id": 2, "a": 2}]


def test_database_level_aggregate_errors(db, sales):
    def code(pipeline, aggregate=1):
        return failure(db, SON([("aggregate", aggregate), ("pipeline", pipeline), ("cursor", {})])).code
    assert code([{"$match": {}}]) == 73
    assert code([]) == 73
    assert code([{"$documents": 5}]) == 5858203
    assert code([{"$documents": [1]}]) == 5858204
    assert code([{"$documents": [{"a": 1}]}], aggregate="sales") == 73
    assert code([{"$currentOp": {}}]) == 73
    assert code([{"$listLocalSessions": {}}]) == 73
    assert code([{"$match": {}}], aggregate=2.5) == 9
