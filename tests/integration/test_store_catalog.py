"""The catalog commands of `thermocline store` (src/store/cmd_catalog.c) driven
by pymongo: listDatabases, listCollections, create, drop, dropDatabase,
createIndexes, listIndexes, dropIndexes, collStats, dbStats and
renameCollection, checked against the reply shapes, error codes and messages
of MongoDB 6.0."""

import uuid

import bson
import pytest
from bson import Int64
from pymongo.errors import OperationFailure

DB_NAME = "catalog"


@pytest.fixture
def db(client):
    return client[DB_NAME]


def command_error(database, command):
    """Runs command and returns the OperationFailure it must raise."""
    with pytest.raises(OperationFailure) as raised:
        database.command(command)
    return raised.value


def index_names(collection):
    return [spec["name"] for spec in collection.list_indexes()]


# ---------------------------------------------------------------------------
# create / listCollections
# ---------------------------------------------------------------------------

def test_list_collections_reply_shape(db):
    db.command({"create": "plain"})
    db.command({"create": "packed",
                "storageEngine": {"wiredTiger": {"configString": "block_compressor=zlib"}}})
    reply = db.command({"listCollections": 1})
    cursor = reply["cursor"]
    assert cursor["id"] == 0
    assert cursor["ns"] == DB_NAME + ".$cmd.listCollections"
    entries = {entry["name"]: entry for entry in cursor["firstBatch"]}
    assert sorted(entries) == ["packed", "plain"]
    plain = entries["plain"]
    assert list(plain) == ["name", "type", "options", "info", "idIndex"]
    assert plain["type"] == "collection"
    assert plain["options"] == {}
    assert plain["info"]["readOnly"] is False
    assert isinstance(plain["info"]["uuid"], uuid.UUID)
    assert plain["idIndex"] == {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    # Options are kept as given.
    assert entries["packed"]["options"] == {
        "storageEngine": {"wiredTiger": {"configString": "block_compressor=zlib"}}}
    assert entries["packed"]["info"]["uuid"] != plain["info"]["uuid"]


def test_list_collections_filter_and_name_only(db):
    for name in ("apples", "apricots", "bananas"):
        db.create_collection(name)
    reply = db.command({"listCollections": 1, "nameOnly": True,
                        "filter": {"name": {"$regex": "^ap"}}})
    assert reply["cursor"]["firstBatch"] == [
        {"name": "apples", "type": "collection"},
        {"name": "apricots", "type": "collection"},
    ]
    # The filter sees the whole entry, options and info included.
    reply = db.command({"listCollections": 1, "filter": {"info.readOnly": False, "name": "bananas"}})
    assert [entry["name"] for entry in reply["cursor"]["firstBatch"]] == ["bananas"]
    assert sorted(db.list_collection_names()) == ["apples", "apricots", "bananas"]
    # Collections of another database are not listed.
    db.client[DB_NAME + "_other"].other.insert_one({})
    assert sorted(db.list_collection_names()) == ["apples", "apricots", "bananas"]
    error = command_error(db, {"listCollections": 1, "filter": {"$bogus": 1}})
    assert error.code == 2


def test_list_collections_batch_size_then_get_more(db):
    for name in ("c1", "c2", "c3"):
        db.create_collection(name)
    reply = db.command({"listCollections": 1, "nameOnly": True, "cursor": {"batchSize": 2}})
    cursor = reply["cursor"]
    assert [entry["name"] for entry in cursor["firstBatch"]] == ["c1", "c2"]
    assert cursor["id"] != 0
    more = db.command({"getMore": Int64(cursor["id"]), "collection": "$cmd.listCollections"})
    assert [entry["name"] for entry in more["cursor"]["nextBatch"]] == ["c3"]
    assert more["cursor"]["id"] == 0


def test_create_errors(db):
    db.command({"create": "taken"})
    error = command_error(db, {"create": "taken"})
    assert (error.code, error.details["codeName"]) == (48, "NamespaceExists")
    assert error.details["errmsg"] == "Collection %s.taken already exists." % DB_NAME
    error = command_error(db, {"create": "c", "capped": True, "size": 4096})
    assert error.code == 115
    assert "capped" in error.details["errmsg"]
    for refused in ({"timeseries": {"timeField": "t"}}, {"validator": {"$jsonSchema": {"properties": {"a": {"encrypt": {}}}}}}):
        command = {"create": "refused"}
        command.update(refused)
        assert command_error(db, command).code == 115, refused
    error = command_error(db, {"create": "c", "bogus": 1})
    assert error.code == 40415
    assert error.details["errmsg"] == "BSON field 'create.bogus' is an unknown field."
    # An unknown compressor in the configString is refused: the option is read.
    error = command_error(db, {"create": "c", "storageEngine": {
        "wiredTiger": {"configString": "block_compressor=bogus"}}})
    assert error.code == 2
    assert "refused" not in db.list_collection_names()
    assert "c" not in db.list_collection_names()
    # capped: false is an ordinary collection, and not kept among the options.
    db.command({"create": "uncapped", "capped": False})
    entry = next(db.list_collections(filter={"name": "uncapped"}))
    assert entry["options"] == {}


def test_options_survive_restart(store, client):
    database = client[DB_NAME]
    database.command({"create": "kept",
                      "storageEngine": {"wiredTiger": {"configString": "block_compressor=zlib"}}})
    database.kept.create_index("a", unique=True)
    before = next(database.list_collections(filter={"name": "kept"}))
    client.close()
    store.stop()
    store.restart()
    from pymongo import MongoClient
    with MongoClient(store.uri, serverSelectionTimeoutMS=10000) as again:
        after = next(again[DB_NAME].list_collections(filter={"name": "kept"}))
        assert after == before
        assert index_names(again[DB_NAME].kept) == ["_id_", "a_1"]


# ---------------------------------------------------------------------------
# drop / dropDatabase / listDatabases
# ---------------------------------------------------------------------------

def test_drop(db):
    db.gone.insert_one({"a": 1})
    db.gone.create_index("a")
    reply = db.command({"drop": "gone"})
    assert reply["nIndexesWas"] == 2
    assert reply["ns"] == DB_NAME + ".gone"
    assert "gone" not in db.list_collection_names()
    assert db.gone.find_one() is None
    error = command_error(db, {"drop": "gone"})
    assert (error.code, error.details["errmsg"]) == (26, "ns not found")
    db.drop_collection("gone")  # pymongo ignores "ns not found"
    # A dropped name can be created again, empty.
    db.gone.insert_one({"b": 2})
    assert list(db.gone.find({}, {"_id": 0})) == [{"b": 2}]


def test_drop_database_and_list_databases(client):
    admin = client.admin
    client.db_one.a.insert_one({"x": 1})
    client.db_one.b.insert_one({"x": 2})
    client.db_two.a.insert_one({"x": 3})

    reply = admin.command("listDatabases")
    names = [entry["name"] for entry in reply["databases"]]
    assert names == sorted(names)
    assert {"db_one", "db_two"} <= set(names)
    # admin, local and config hold no collections here: not listed.
    assert not {"admin", "local", "config"} & set(names)
    for entry in reply["databases"]:
        assert list(entry) == ["name", "sizeOnDisk", "empty"]
        assert isinstance(entry["sizeOnDisk"], int) and entry["sizeOnDisk"] > 0
        assert entry["empty"] is False
    assert reply["totalSize"] == sum(entry["sizeOnDisk"] for entry in reply["databases"])
    assert reply["totalSizeMb"] == reply["totalSize"] // (1024 * 1024)

    reply = admin.command({"listDatabases": 1, "nameOnly": True})
    assert all(list(entry) == ["name"] for entry in reply["databases"])
    assert "totalSize" not in reply
    reply = admin.command({"listDatabases": 1, "filter": {"name": "db_two"}})
    assert [entry["name"] for entry in reply["databases"]] == ["db_two"]
    assert reply["totalSize"] == reply["databases"][0]["sizeOnDisk"]
    assert sorted(client.list_database_names()) == sorted(names)

    error = command_error(client.db_one, {"listDatabases": 1})
    assert error.code == 13
    assert error.details["errmsg"] == "listDatabases may only be run against the admin database."

    reply = client.db_one.command({"dropDatabase": 1})
    assert reply["dropped"] == "db_one"
    assert "db_one" not in client.list_database_names()
    assert client.db_one.list_collection_names() == []
    assert client.db_two.a.count_documents({}) == 1
    # Dropping a database that does not exist is not an error.
    assert client.db_one.command({"dropDatabase": 1})["ok"] == 1


# ---------------------------------------------------------------------------
# createIndexes / listIndexes / dropIndexes
# ---------------------------------------------------------------------------

def test_create_indexes_replies(db):
    reply = db.command({"createIndexes": "fresh", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
    assert reply["numIndexesBefore"] == 1
    assert reply["numIndexesAfter"] == 2
    assert reply["createdCollectionAutomatically"] is True
    assert "fresh" in db.list_collection_names()

    reply = db.command({"createIndexes": "fresh", "indexes": [
        {"key": {"b": -1}, "name": "b_-1"}, {"key": {"c": 1, "d": 1}, "name": "cd", "unique": True}]})
    assert (reply["numIndexesBefore"], reply["numIndexesAfter"]) == (2, 4)
    assert reply["createdCollectionAutomatically"] is False

    reply = db.command({"createIndexes": "fresh", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
    assert (reply["numIndexesBefore"], reply["numIndexesAfter"]) == (4, 4)
    assert reply["note"] == "all indexes already exist"

    assert db.fresh.create_index([("e", 1)]) == "e_1"
    specs = list(db.fresh.list_indexes())
    assert [spec["name"] for spec in specs] == ["_id_", "a_1", "b_-1", "cd", "e_1"]
    assert specs[3] == {"v": 2, "key": {"c": 1, "d": 1}, "name": "cd", "unique": True}
    assert db.fresh.index_information()["b_-1"]["key"] == [("b", -1)]


def test_create_indexes_errors_leave_nothing_behind(db):
    db.items.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 1}])
    error = command_error(db, {"createIndexes": "items"})
    assert error.code == 40414
    assert error.details["errmsg"] == "BSON field 'createIndexes.indexes' is missing but a required field"
    error = command_error(db, {"createIndexes": "items", "indexes": []})
    assert (error.code, error.details["errmsg"]) == (2, "Must specify at least one index to create")
    # A unique index the data violates is not built.
    error = command_error(db, {"createIndexes": "items", "indexes": [
        {"key": {"a": 1}, "name": "a_1", "unique": True}]})
    assert error.code == 11000
    assert index_names(db.items) == ["_id_"]
    # A bad spec after a good one builds neither and creates no collection.
    error = command_error(db, {"createIndexes": "brand_new", "indexes": [
        {"key": {"a": 1}, "name": "a_1"}, {"key": {"z": 1, "y": 1}, "name": "a_1"}]})
    assert error.code in (85, 86)
    assert "brand_new" not in db.list_collection_names()
    error = command_error(db, {"createIndexes": "items", "indexes": [
        {"key": {"b": 1}, "name": "b_1"}, {"key": {"c": 1}}]})
    assert error.code == 9
    assert index_names(db.items) == ["_id_"]
    error = command_error(db, {"createIndexes": "items", "indexes": [{"key": {"b": 1}, "name": "*"}]})
    assert error.code == 2


def test_list_indexes(db):
    db.things.insert_one({"a": 1})
    db.things.create_index([("a", 1), ("b", -1)], name="ab")
    reply = db.command({"listIndexes": "things"})
    assert reply["cursor"]["ns"] == DB_NAME + ".things"
    assert reply["cursor"]["id"] == 0
    assert reply["cursor"]["firstBatch"] == [
        {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        {"v": 2, "key": {"a": 1, "b": -1}, "name": "ab"},
    ]
    reply = db.command({"listIndexes": "things", "cursor": {"batchSize": 1}})
    assert len(reply["cursor"]["firstBatch"]) == 1
    more = db.command({"getMore": Int64(reply["cursor"]["id"]), "collection": "things"})
    assert [spec["name"] for spec in more["cursor"]["nextBatch"]] == ["ab"]
    error = command_error(db, {"listIndexes": "missing"})
    assert error.code == 26
    assert error.details["errmsg"] == "ns does not exist: %s.missing" % DB_NAME


def test_drop_indexes(db):
    db.c.insert_one({"a": 1, "b": 1, "t": 1})
    for field in ("a", "b", "t", "u"):
        db.c.create_index(field)
    reply = db.command({"dropIndexes": "c", "index": "a_1"})
    assert reply["nIndexesWas"] == 5
    assert "msg" not in reply
    reply = db.command({"dropIndexes": "c", "index": {"b": 1.0}})  # key patterns compare as numbers
    assert reply["nIndexesWas"] == 4
    assert index_names(db.c) == ["_id_", "t_1", "u_1"]

    for command, code, message in [
        ({"dropIndexes": "c", "index": "_id_"}, 72, "cannot drop _id index"),
        ({"dropIndexes": "c", "index": {"_id": 1}}, 72, "cannot drop _id index"),
        ({"dropIndexes": "c", "index": ["t_1", "_id_"]}, 72, "cannot drop _id index"),
        ({"dropIndexes": "c", "index": "nope"}, 27, "index not found with name [nope]"),
        ({"dropIndexes": "c", "index": ["t_1", "nope"]}, 27, "index not found with name [nope]"),
        ({"dropIndexes": "c", "index": {"zz": 1}}, 27, "can't find index with key: { zz: 1 }"),
        ({"dropIndexes": "c"}, 40414, "BSON field 'dropIndexes.index' is missing but a required field"),
        ({"dropIndexes": "nosuch", "index": "*"}, 26, "ns not found %s.nosuch" % DB_NAME),
    ]:
        error = command_error(db, command)
        assert (error.code, error.details["errmsg"]) == (code, message), command
    # The refused lists dropped nothing.
    assert index_names(db.c) == ["_id_", "t_1", "u_1"]

    db.c.create_index("v")
    reply = db.command({"dropIndexes": "c", "index": ["t_1", "u_1"]})
    assert reply["nIndexesWas"] == 4
    assert index_names(db.c) == ["_id_", "v_1"]
    reply = db.command({"dropIndexes": "c", "index": "*"})
    assert reply["nIndexesWas"] == 2
    assert reply["msg"] == "non-_id indexes dropped for collection"
    assert index_names(db.c) == ["_id_"]
    db.c.create_index("w")
    db.c.drop_indexes()
    assert index_names(db.c) == ["_id_"]
    # The documents are untouched.
    assert db.c.count_documents({}) == 1


# ---------------------------------------------------------------------------
# collStats / dbStats
# ---------------------------------------------------------------------------

def test_coll_stats(db):
    documents = [{"_id": n, "text": "x" * (n * 10)} for n in range(50)]
    db.stats.insert_many(documents)
    db.stats.create_index("text")
    expected_size = sum(len(bson.encode(document)) for document in documents)

    stats = db.command("collstats", "stats")
    assert stats["ns"] == DB_NAME + ".stats"
    assert stats["count"] == 50
    assert stats["size"] == expected_size
    assert stats["avgObjSize"] == expected_size // 50
    assert stats["nindexes"] == 2
    assert sorted(stats["indexSizes"]) == ["_id_", "text_1"]
    assert stats["totalIndexSize"] == sum(stats["indexSizes"].values())
    assert stats["totalSize"] == stats["storageSize"] + stats["totalIndexSize"]
    assert stats["storageSize"] > 0
    assert stats["scaleFactor"] == 1
    assert stats["capped"] is False

    scaled = db.command({"collStats": "stats", "scale": 1024})
    assert scaled["scaleFactor"] == 1024
    assert scaled["size"] == expected_size // 1024
    assert scaled["count"] == 50

    error = command_error(db, {"collStats": "stats", "scale": 0})
    assert (error.code, error.details["errmsg"]) == (2, "scale has to be >= 1")

    # A collection that does not exist: ok, with zeros (mongod >= 4.2).
    missing = db.command({"collStats": "missing"})
    assert missing["ns"] == DB_NAME + ".missing"
    assert (missing["count"], missing["size"], missing["nindexes"]) == (0, 0, 0)
    assert missing["indexSizes"] == {}
    assert "missing" not in db.list_collection_names()


def test_db_stats(client):
    database = client.statsdb
    database.one.insert_many([{"n": n} for n in range(10)])
    database.two.insert_many([{"n": n, "pad": "y" * 100} for n in range(5)])
    database.two.create_index("n")
    expected = sum(len(bson.encode(document)) for document in database.one.find()) + \
        sum(len(bson.encode(document)) for document in database.two.find())

    stats = database.command("dbstats")
    assert stats["db"] == "statsdb"
    assert (stats["collections"], stats["views"], stats["objects"]) == (2, 0, 15)
    assert stats["dataSize"] == expected
    assert stats["avgObjSize"] == pytest.approx(expected / 15)
    assert stats["indexes"] == 3
    assert stats["totalSize"] == stats["storageSize"] + stats["indexSize"]
    assert stats["fsTotalSize"] >= stats["fsUsedSize"] > 0
    assert database.command({"dbStats": 1, "scale": 1024})["dataSize"] == expected // 1024
    error = command_error(database, {"dbStats": 1, "scale": -1})
    assert (error.code, error.details["errmsg"]) == (2, "scale has to be > 0")

    empty = client.nothing_here.command("dbstats")
    assert (empty["collections"], empty["objects"], empty["dataSize"]) == (0, 0, 0)


# ---------------------------------------------------------------------------
# renameCollection
# ---------------------------------------------------------------------------

def test_rename_collection(client, db):
    admin = client.admin
    db.old.insert_many([{"_id": n, "a": n} for n in range(1500)])
    db.old.create_index("a", unique=True)
    reply = admin.command({"renameCollection": DB_NAME + ".old", "to": DB_NAME + ".new"})
    assert reply == {"ok": 1.0}
    assert "old" not in db.list_collection_names()
    assert db.new.count_documents({}) == 1500
    assert db.new.find_one({"a": 1499}) == {"_id": 1499, "a": 1499}
    assert index_names(db.new) == ["_id_", "a_1"]
    with pytest.raises(OperationFailure) as raised:
        db.new.insert_one({"a": 7})
    assert raised.value.code == 11000  # the unique index came along

    db.other.insert_one({"_id": "other"})
    for command, code, message in [
        ({"renameCollection": DB_NAME + ".new", "to": DB_NAME + ".other"}, 48, "target namespace exists"),
        ({"renameCollection": DB_NAME + ".new", "to": DB_NAME + ".new"}, 20,
         "Can't rename a collection to itself"),
        ({"renameCollection": DB_NAME + ".absent", "to": DB_NAME + ".x"}, 26,
         "Source collection %s.absent does not exist" % DB_NAME),
        ({"renameCollection": "nodot", "to": DB_NAME + ".x"}, 73, "Invalid source namespace: nodot"),
    ]:
        error = command_error(admin, command)
        assert (error.code, error.details["errmsg"]) == (code, message), command
    error = command_error(db, {"renameCollection": DB_NAME + ".new", "to": DB_NAME + ".x"})
    assert error.code == 13

    admin.command({"renameCollection": DB_NAME + ".new", "to": DB_NAME + ".other", "dropTarget": True})
    assert db.other.count_documents({}) == 1500
    assert db.other.find_one({"_id": "other"}) is None
    db.other.rename("renamed")  # pymongo's helper sends the same command
    assert db.renamed.count_documents({}) == 1500
    # Across databases.
    admin.command({"renameCollection": DB_NAME + ".renamed", "to": "elsewhere.moved"})
    assert client.elsewhere.moved.count_documents({}) == 1500
    assert "renamed" not in db.list_collection_names()
