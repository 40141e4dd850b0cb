"""Collations as a pymongo application meets them against `thermocline store`:
find, count, distinct, update, delete, findAndModify and aggregate under
{locale, strength, numericOrdering...}, collated indexes (a unique one refusing
a case variant), a collection's default collation, explain's index choice, and
MongoDB 6.0's errors for a bad collation document."""

import pytest
from bson import SON
from pymongo import ASCENDING
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError

from test_store_expr import failure, ids

DB_NAME = "collation"
CASE_INSENSITIVE = Collation(locale="en", strength=2)


@pytest.fixture
def db(client):
    return client[DB_NAME]


@pytest.fixture
def people(db):
    collection = db["people"]
    collection.insert_many([
        {"_id": 1, "name": "Alice", "city": "Paris", "tags": ["Red", "blue"]},
        {"_id": 2, "name": "alice", "city": "paris", "tags": ["red"]},
        {"_id": 3, "name": "ALICE", "city": "Lyon", "tags": []},
        {"_id": 4, "name": "Bob", "city": "Orléans", "tags": ["Blue"]},
        {"_id": 5, "name": "bob", "city": "Orleans", "tags": ["green"]},
        {"_id": 6, "name": "Émile", "city": "Nice", "tags": ["RED"]},
        {"_id": 7, "name": 10, "city": "Nice", "tags": []},
    ])
    return collection


def test_find_compares_strings_by_the_collation(people):
    assert ids(people.find({"name": "alice"})) == [2]
    assert ids(people.find({"name": "alice"}, collation=CASE_INSENSITIVE)) == [1, 2, 3]
    # Strength 1 ignores accents too; strength 2 does not.
    assert ids(people.find({"city": "orleans"}, collation=CASE_INSENSITIVE)) == [5]
    assert ids(people.find({"city": "orleans"}, collation=Collation(locale="fr", strength=1))) == [4, 5]
    # $in, ranges and array elements follow it; a number stays a number.
    assert ids(people.find({"name": {"$in": ["BOB", 10]}}, collation=CASE_INSENSITIVE)) == [4, 5, 7]
    assert ids(people.find({"name": {"$gte": "b", "$lt": "c"}}, collation=CASE_INSENSITIVE)) == [4, 5]
    assert ids(people.find({"tags": "red"}, collation=CASE_INSENSITIVE)) == [1, 2, 6]
    # $regex stays binary, as in MongoDB.
    assert ids(people.find({"name": {"$regex": "^a"}}, collation=CASE_INSENSITIVE)) == [2]
    # {locale: "simple"} is the binary comparison.
    assert ids(people.find({"name": "alice"}, collation=Collation(locale="simple"))) == [2]


def test_sort_orders_by_the_collation(db):
    collection = db["numbers"]
    collection.insert_many([{"_id": i, "n": text} for i, text in enumerate(["10", "9", "b", "A", "a", "B"])])
    binary = [document["n"] for document in collection.find({}, sort=[("n", ASCENDING)])]
    assert binary == ["10", "9", "A", "B", "a", "b"]
    numeric = Collation(locale="en", numericOrdering=True)
    ordered = [document["n"] for document in collection.find({}, sort=[("n", ASCENDING)], collation=numeric)]
    assert ordered == ["9", "10", "a", "A", "b", "B"]
    upper_first = Collation(locale="en", caseFirst="upper")
    ordered = [document["n"] for document in collection.find({"n": {"$gt": "9"}}, sort=[("n", ASCENDING)],
                                                             collation=upper_first)]
    assert ordered == ["A", "a", "B", "b"]


def test_count_distinct_update_delete_and_find_and_modify(people):
    assert people.count_documents({"name": "ALICE"}, collation=CASE_INSENSITIVE) == 3
    assert sorted(people.distinct("city", collation=CASE_INSENSITIVE), key=str.lower) in (
        ["Lyon", "Nice", "Orleans", "Orléans", "Paris"], ["Lyon", "Nice", "Orléans", "Orleans", "Paris"])
    assert len(people.distinct("city", collation=Collation(locale="fr", strength=1))) == 4
    result = people.update_many({"name": "BOB"}, {"$set": {"seen": True}}, collation=CASE_INSENSITIVE)
    assert (result.matched_count, result.modified_count) == (2, 2)
    found = people.find_one_and_update({"name": "émile"}, {"$set": {"seen": True}},
                                       collation=Collation(locale="fr", strength=1))
    assert found["_id"] == 6
    assert people.delete_many({"city": "PARIS"}, collation=CASE_INSENSITIVE).deleted_count == 2
    assert ids(people.find({})) == [3, 4, 5, 6, 7]


def test_aggregate_match_sort_and_group_by_the_collation(people):
    pipeline = [{"$match": {"name": {"$in": ["alice", "bob"]}}},
                {"$group": {"_id": "$name", "count": {"$sum": 1}}},
                {"$sort": {"_id": 1}}]
    groups = list(people.aggregate(pipeline, collation=CASE_INSENSITIVE))
    assert [(group["_id"].lower(), group["count"]) for group in groups] == [("alice", 3), ("bob", 2)]
    groups = list(people.aggregate(pipeline))
    assert [(group["_id"], group["count"]) for group in groups] == [("alice", 1), ("bob", 1)]
    # Expression comparisons follow it too, in $expr and in stages.
    assert ids(people.find({"$expr": {"$eq": ["$name", "BOB"]}}, collation=CASE_INSENSITIVE)) == [4, 5]
    flags = people.aggregate([{"$match": {"_id": {"$lte": 2}}}, {"$sort": {"_id": 1}},
                              {"$project": {"same": {"$eq": ["$name", "ALICE"]},
                                            "listed": {"$in": ["$city", ["PARIS"]]}}}],
                             collation=CASE_INSENSITIVE)
    assert [(flag["same"], flag["listed"]) for flag in flags] == [(True, True), (True, True)]


def test_collated_unique_index_refuses_a_case_variant(db):
    users = db["users"]
    users.create_index([("email", ASCENDING)], unique=True, collation=CASE_INSENSITIVE)
    users.insert_one({"_id": 1, "email": "Ann@Example.com"})
    with pytest.raises(DuplicateKeyError) as raised:
        users.insert_one({"_id": 2, "email": "ann@example.COM"})
    assert raised.value.code == 11000
    assert ids(users.find({})) == [1]
    # Another value is fine, and so is a binary unique index beside it.
    users.insert_one({"_id": 3, "email": "bob@example.com"})
    index = [spec for spec in users.list_indexes() if spec["name"] == "email_1"][0]
    collation = index["collation"]
    assert (collation["locale"], collation["strength"], collation["caseLevel"], collation["caseFirst"],
            collation["numericOrdering"], collation["alternate"], collation["maxVariable"],
            collation["normalization"], collation["backwards"]) == (
                "en", 2, False, "off", False, "non-ignorable", "punct", False, False)
    assert isinstance(collation["version"], str) and collation["version"]


def test_a_query_uses_a_collated_index_only_under_its_collation(db):
    users = db["indexed"]
    users.create_index([("email", ASCENDING)], collation=CASE_INSENSITIVE)
    users.insert_many([{"_id": i, "email": email} for i, email in enumerate(["a@x", "A@X", "b@x"])])

    def stage(cursor):
        plan = cursor.explain()["queryPlanner"]["winningPlan"]
        while "inputStage" in plan:
            plan = plan["inputStage"]
        return plan["stage"]

    assert stage(users.find({"email": "a@x"}, collation=CASE_INSENSITIVE)) == "IXSCAN"
    assert ids(users.find({"email": "a@x"}, collation=CASE_INSENSITIVE)) == [0, 1]
    # Operators bound the scan by the index's collation keys too (ranges and
    # lists of points were bounded by binary strings, and found nothing).
    for operand in ({"$in": ["A@X"]}, {"$in": ["A@X", "zz"]}, {"$eq": "A@X"}, {"$gte": "A@X", "$lte": "a@x"},
                    {"$gt": "A@", "$lt": "B"}, {"$not": {"$eq": "zz"}, "$gte": "A@X", "$lte": "a@x"}):
        assert stage(users.find({"email": operand}, collation=CASE_INSENSITIVE)) == "IXSCAN"
        assert ids(users.find({"email": operand}, collation=CASE_INSENSITIVE)) == [0, 1], operand
    assert stage(users.find({"email": "a@x"})) == "COLLSCAN"
    assert ids(users.find({"email": "a@x"})) == [0]
    # A hinted index under another collation is read whole: the answer stays right.
    assert ids(users.find({"email": "A@X"}).hint("email_1")) == [1]


def test_collection_default_collation(db):
    db.create_collection("cities", collation=CASE_INSENSITIVE)
    cities = db["cities"]
    cities.insert_many([{"_id": 1, "name": "Paris", "code": "p1"}, {"_id": 2, "name": "paris", "code": "p2"},
                        {"_id": 3, "name": "Lyon", "code": "ly"}])
    assert ids(cities.find({"name": "PARIS"})) == [1, 2]
    # The command's own collation wins; "simple" is binary.
    assert ids(cities.find({"name": "PARIS"}, collation=Collation(locale="simple"))) == []
    options = [entry for entry in db.list_collections() if entry["name"] == "cities"][0]["options"]
    assert options["collation"]["locale"] == "en" and options["collation"]["strength"] == 2
    indexes = {spec["name"]: spec for spec in cities.list_indexes()}
    assert indexes["_id_"]["collation"] == options["collation"]
    # An index created without a collation inherits the default; "simple" opts out.
    with pytest.raises(DuplicateKeyError):
        cities.create_index([("name", ASCENDING)], unique=True)  # Paris and paris are one key
    cities.create_index([("name", -1)], unique=True, collation=Collation(locale="simple"))
    cities.create_index([("code", ASCENDING)], unique=True)
    indexes = {spec["name"]: spec for spec in cities.list_indexes()}
    assert indexes["code_1"]["collation"] == options["collation"]
    assert "collation" not in indexes["name_-1"]
    cities.insert_one({"_id": 4, "name": "Rome", "code": "rm"})
    with pytest.raises(DuplicateKeyError):
        cities.insert_one({"_id": 5, "name": "Roma", "code": "RM"})
    # The _id index is collated too: "A" and "a" are one _id here, as on mongod.
    cities.insert_one({"_id": "key", "code": "k1"})
    with pytest.raises(DuplicateKeyError):
        cities.insert_one({"_id": "KEY", "code": "k2"})
    assert cities.find_one({"_id": "KEY"})["_id"] == "key"
    assert cities.find_one({"_id": "KEY"}, collation=Collation(locale="simple")) is None
    assert cities.delete_one({"_id": "Key"}).deleted_count == 1


@pytest.mark.parametrize("collation, code, message", [
    ({"locale": "xx_nope"}, 2, "Field 'locale' is invalid in: { locale: \"xx_nope\" }"),
    ({"locale": "en", "strength": 6}, 51024, "BSON field 'strength' value must be <= 5, actual value '6'"),
    ({"locale": "en", "strength": 0}, 2, "Enumeration value '0' for field 'collation.strength' is not a valid value."),
    ({"locale": "en", "colour": 1}, 40415, "BSON field 'collation.colour' is an unknown field."),
    ({"strength": 2}, 40414, "BSON field 'collation.locale' is missing but a required field"),
    ({"locale": 5}, 14, "BSON field 'collation.locale' is the wrong type 'int', expected type 'string'"),
    ({"locale": "en", "caseFirst": "sideways"}, 2,
     "Enumeration value 'sideways' for field 'collation.caseFirst' is not a valid value."),
    ({"locale": "en", "strength": 1, "backwards": True}, 2,
     "'backwards' is invalid with 'strength' of 1 in: { locale: \"en\", strength: 1, backwards: true }"),
])
def test_a_bad_collation_is_refused_as_mongod_refuses_it(db, people, collation, code, message):
    for command in (SON([("find", "people"), ("filter", {}), ("collation", collation)]),
                    SON([("aggregate", "people"), ("pipeline", []), ("cursor", {}), ("collation", collation)]),
                    SON([("count", "people"), ("collation", collation)])):
        error = failure(db, command)
        assert (error.code, str(error.details["errmsg"])) == (code, message)
    error = failure(db, SON([("createIndexes", "people"),
                             ("indexes", [{"key": {"a": 1}, "name": "a_1"},
                                          {"key": {"b": 1}, "name": "b_1", "collation": collation}])]))
    assert error.code == code
    assert "a_1" not in {spec["name"] for spec in db["people"].list_indexes()}
    # A write statement's collation fails that statement, as a writeError.
    reply = db.command(SON([("update", "people"),
                            ("updates", [{"q": {}, "u": {"$set": {"x": 1}}, "collation": collation}])]))
    assert (reply["n"], reply["writeErrors"][0]["code"], reply["writeErrors"][0]["errmsg"]) == (0, code, message)


def test_collation_must_be_a_document(db, people):
    error = failure(db, SON([("find", "people"), ("collation", "en")]))
    assert (error.code, error.details["codeName"]) == (14, "TypeMismatch")
    assert error.details["errmsg"] == "BSON field 'find.collation' is the wrong type 'string', expected type 'object'"


@pytest.mark.parametrize("command", ["insert", "update", "delete"])
def test_a_write_takes_its_collation_per_statement_only(db, people, command):
    body = {"insert": ("documents", [{"_id": 99}]),
            "update": ("updates", [{"q": {}, "u": {"$set": {"x": 1}}}]),
            "delete": ("deletes", [{"q": {"_id": 99}, "limit": 1}])}[command]
    error = failure(db, SON([(command, "people"), body, ("collation", {"locale": "en"})]))
    assert (error.code, error.details["codeName"]) == (40415, "Location40415")
    assert error.details["errmsg"] == "BSON field '%s.collation' is an unknown field." % command
    assert people.count_documents({"_id": 99}) == 0


def test_collations_survive_a_restart(store, client):
    """The catalog keeps collations expanded; a restart compiles them again."""
    db = client[DB_NAME]
    db.create_collection("kept", collation=CASE_INSENSITIVE)
    db["kept"].create_index([("code", ASCENDING)], unique=True, collation=Collation(locale="fr", strength=1))
    db["kept"].insert_one({"_id": "Key", "code": "côte"})
    before = {spec["name"]: spec for spec in db["kept"].list_indexes()}
    client.close()
    store.stop()
    store.restart()
    from pymongo import MongoClient
    with MongoClient(store.uri) as again:
        kept = again[DB_NAME]["kept"]
        assert {spec["name"]: spec for spec in kept.list_indexes()} == before
        assert kept.find_one({"_id": "KEY"})["_id"] == "Key"
        with pytest.raises(DuplicateKeyError):
            kept.insert_one({"_id": 2, "code": "COTE"})
