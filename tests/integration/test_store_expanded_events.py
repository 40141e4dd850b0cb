"""showExpandedEvents on `thermocline store --replSet` (issue 21's third item),
driven by pymongo with the $changeStream aggregate (pymongo 3.11's watch() has
no show_expanded_events): the create, createIndexes, dropIndexes and modify
(collMod) events with mongod 6.0's operationDescription and stateBeforeChange,
collectionUUID on every event that names a collection, the expanded rename,
drop and dropDatabase, and none of it without the option."""

import time

import pytest
from pymongo import MongoClient


@pytest.fixture
def rs_client(replica_store):
    client = MongoClient(replica_store.uri, serverSelectionTimeoutMS=10000, socketTimeoutMS=20000)
    yield client
    client.close()


class Stream:
    """A change stream opened with a raw aggregate, read with getMore."""

    def __init__(self, db, target, **options):
        self.db = db
        self.collection = target if isinstance(target, str) else "$cmd.aggregate"
        reply = db.command({"aggregate": target, "cursor": {}, "pipeline": [{"$changeStream": options}]})
        self.cursor_id = reply["cursor"]["id"]
        self.pending = list(reply["cursor"]["firstBatch"])

    def next(self, count, timeout=10):
        deadline = time.monotonic() + timeout
        while len(self.pending) < count and self.cursor_id != 0:
            assert time.monotonic() < deadline, "only %d of %d events: %r" % (len(self.pending), count, self.pending)
            reply = self.db.command({"getMore": self.cursor_id, "collection": self.collection, "maxTimeMS": 200})
            self.cursor_id = reply["cursor"]["id"]
            self.pending += reply["cursor"]["nextBatch"]
        taken, self.pending = self.pending[:count], self.pending[count:]
        return taken

    def assert_drained(self):
        if self.cursor_id != 0:
            reply = self.db.command({"getMore": self.cursor_id, "collection": self.collection, "maxTimeMS": 300})
            self.pending += reply["cursor"]["nextBatch"]
        assert self.pending == [], self.pending


def uuid_of(db, name):
    return next(db.list_collections(filter={"name": name}))["info"]["uuid"]


def test_expanded_events_for_ddl_on_a_collection(rs_client):
    db = rs_client.shop
    stream = Stream(db, "ddl", showExpandedEvents=True)
    plain = Stream(db, "ddl")
    db.create_collection("ddl")
    db.ddl.insert_one({"_id": 1, "a": 1})
    db.ddl.create_index("a")
    db.command("collMod", "ddl", index={"keyPattern": {"a": 1}, "hidden": True})
    db.command("collMod", "ddl", changeStreamPreAndPostImages={"enabled": True})
    db.ddl.drop_index("a_1")
    uuid = uuid_of(db, "ddl")
    rs_client.admin.command("renameCollection", "shop.ddl", to="shop.renamed")
    events = stream.next(8)
    assert [e["operationType"] for e in events] == [
        "create", "insert", "createIndexes", "modify", "modify", "dropIndexes", "rename", "invalidate"]
    create, insert, created_index, hidden, imaged, dropped_index, rename, invalidate = events
    for event in events[:-1]:
        assert event["collectionUUID"] == uuid, event
        assert list(event)[:5] == ["_id", "operationType", "clusterTime", "collectionUUID", "wallTime"], event
        assert event["ns"] == {"db": "shop", "coll": "ddl"}
    assert "collectionUUID" not in invalidate
    assert create["operationDescription"] == {"idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
    assert list(create) == ["_id", "operationType", "clusterTime", "collectionUUID", "wallTime", "ns",
                            "operationDescription"]
    assert insert["fullDocument"] == {"_id": 1, "a": 1} and "operationDescription" not in insert
    assert created_index["operationDescription"] == {"indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1"}]}
    # collMod's index is named in the entry even when given by key pattern, as mongod logs it.
    assert hidden["operationDescription"] == {"index": {"name": "a_1", "hidden": True}}
    assert hidden["stateBeforeChange"] == {"collectionOptions": {"uuid": uuid}, "indexOptions": {"hidden": False}}
    assert list(hidden)[-2:] == ["operationDescription", "stateBeforeChange"]
    assert imaged["operationDescription"] == {"changeStreamPreAndPostImages": {"enabled": True}}
    assert imaged["stateBeforeChange"] == {"collectionOptions": {"uuid": uuid}}
    assert dropped_index["operationDescription"] == {
        "indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1", "hidden": True}]}
    assert rename["to"] == {"db": "shop", "coll": "renamed"}
    assert rename["operationDescription"] == {"to": {"db": "shop", "coll": "renamed"}}
    # Without the option: the same writes show only what mongod 6.0 shows by default.
    default_events = plain.next(3)
    assert [e["operationType"] for e in default_events] == ["insert", "rename", "invalidate"]
    assert all("collectionUUID" not in e and "operationDescription" not in e for e in default_events)


def test_expanded_drop_and_drop_database_on_a_database_stream(rs_client):
    db = rs_client.scratch
    db.one.insert_one({"_id": 1})
    uuid = uuid_of(db, "one")
    stream = Stream(db, 1, showExpandedEvents=True)
    db.one.drop()
    db.two.insert_one({"_id": 2})  # creates scratch.two first: a create event
    rs_client.drop_database("scratch")
    events = stream.next(6)
    assert [e["operationType"] for e in events] == ["drop", "create", "insert", "drop", "dropDatabase",
                                                   "invalidate"]
    drop, create, insert, second_drop, drop_database, _ = events
    assert drop["collectionUUID"] == uuid and drop["ns"] == {"db": "scratch", "coll": "one"}
    assert "operationDescription" not in drop
    assert create["ns"] == {"db": "scratch", "coll": "two"}
    assert create["collectionUUID"] == insert["collectionUUID"] == second_drop["collectionUUID"]
    assert "collectionUUID" not in drop_database and drop_database["ns"] == {"db": "scratch"}


def test_show_expanded_events_must_be_a_bool(rs_client):
    from pymongo.errors import OperationFailure
    with pytest.raises(OperationFailure) as raised:
        Stream(rs_client.shop, "x", showExpandedEvents="yes")
    assert raised.value.code == 14
    assert "showExpandedEvents" in str(raised.value)
