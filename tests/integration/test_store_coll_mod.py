"""collMod on `thermocline store` and the change-stream images it switches on
(issue 21's second item), driven by pymongo: changeStreamPreAndPostImages
through create and collMod (listCollections shows it while enabled), pre- and
post-images for insert, update, replace and delete with fullDocument and
fullDocumentBeforeChange "whenAvailable" and "required" (NoMatchingDocument 47
when a required image is missing), an index hidden and unhidden, and what the
store refuses rather than pretend to honour (a $jsonSchema keyword it lacks,
a collection-level TTL...); validators themselves are test_store_validation.py's."""

import time

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import StoreProcess


@pytest.fixture
def rs_client(replica_store):
    client = MongoClient(replica_store.uri, serverSelectionTimeoutMS=10000, socketTimeoutMS=20000)
    yield client
    client.close()


def collection_options(db, name):
    return next(db.list_collections(filter={"name": name}))["options"]


def open_stream(db, collection, **options):
    """A change stream aggregate (pymongo 3.11's watch() lacks fullDocumentBeforeChange);
    returns (cursor id, first batch)."""
    reply = db.command({"aggregate": collection, "cursor": {}, "pipeline": [{"$changeStream": options}]})
    return reply["cursor"]["id"], reply["cursor"]["firstBatch"]


def read_events(db, collection, count, **options):
    """count events of a stream opened with options, reading on with getMore."""
    cursor_id, events = open_stream(db, collection, **options)
    deadline = time.monotonic() + 10
    while len(events) < count:
        assert time.monotonic() < deadline, "only %d of %d events: %r" % (len(events), count, events)
        reply = db.command({"getMore": cursor_id, "collection": collection, "maxTimeMS": 200})
        events += reply["cursor"]["nextBatch"]
    db.command({"killCursors": collection, "cursors": [cursor_id]})
    return events


def failure_of(db, collection, **options):
    """The error a stream opened with options fails with at its first events."""
    with pytest.raises(OperationFailure) as raised:
        read_events(db, collection, 1, **options)
    return raised.value


def test_images_round_trip_for_insert_update_replace_and_delete(rs_client):
    db = rs_client.shop
    db.create_collection("orders")
    assert "changeStreamPreAndPostImages" not in collection_options(db, "orders")
    db.orders.insert_one({"_id": 0, "v": "before collMod"})
    with db.orders.watch(max_await_time_ms=200) as stream:
        db.orders.update_one({"_id": 0}, {"$set": {"v": "no image kept"}})
        early_update_time = stream.next()["clusterTime"]
    reply = db.command("collMod", "orders", changeStreamPreAndPostImages={"enabled": True})
    assert reply["ok"] == 1.0 and "hidden_new" not in reply
    assert collection_options(db, "orders") == {"changeStreamPreAndPostImages": {"enabled": True}}
    start = db.command("ping")["operationTime"]
    db.orders.insert_one({"_id": 1, "v": 1})
    db.orders.update_one({"_id": 1}, {"$inc": {"v": 1}})
    db.orders.replace_one({"_id": 1}, {"w": "replaced"})
    db.orders.delete_one({"_id": 1})

    events = read_events(db, "orders", 4, startAtOperationTime=start, fullDocument="required",
                         fullDocumentBeforeChange="required")
    insert, update, replace, delete = events
    assert [e["operationType"] for e in events] == ["insert", "update", "replace", "delete"]
    assert insert["fullDocument"] == {"_id": 1, "v": 1} and "fullDocumentBeforeChange" not in insert
    assert update["fullDocument"] == {"_id": 1, "v": 2}
    assert update["fullDocumentBeforeChange"] == {"_id": 1, "v": 1}
    assert replace["fullDocument"] == {"_id": 1, "w": "replaced"}
    assert replace["fullDocumentBeforeChange"] == {"_id": 1, "v": 2}
    assert delete["fullDocumentBeforeChange"] == {"_id": 1, "w": "replaced"} and "fullDocument" not in delete
    # mongod's field order: the pre-image last.
    assert list(update)[-1] == "fullDocumentBeforeChange"

    # The update made before collMod kept no image: null when available, 47 when required.
    earlier = read_events(db, "orders", 1, startAtOperationTime=early_update_time,
                          fullDocument="whenAvailable", fullDocumentBeforeChange="whenAvailable")
    assert earlier[0]["operationType"] == "update"
    assert earlier[0]["fullDocument"] is None and earlier[0]["fullDocumentBeforeChange"] is None
    for option in ("fullDocument", "fullDocumentBeforeChange"):
        failure = failure_of(db, "orders", startAtOperationTime=early_update_time, **{option: "required"})
        assert failure.code == 47 and failure.details["codeName"] == "NoMatchingDocument", failure.details
        assert "image" in str(failure) and "orders" in str(failure)

    # Switched off again: listCollections no longer shows it, and new writes keep no images.
    db.command("collMod", "orders", changeStreamPreAndPostImages={"enabled": False})
    assert "changeStreamPreAndPostImages" not in collection_options(db, "orders")
    after_off = db.command("ping")["operationTime"]
    db.orders.insert_one({"_id": 2})
    db.orders.delete_one({"_id": 2})
    failure = failure_of(db, "orders", startAtOperationTime=after_off, fullDocumentBeforeChange="required")
    assert failure.code == 47


def test_create_validates_change_stream_pre_and_post_images(rs_client):
    db = rs_client.shop
    db.create_collection("off", changeStreamPreAndPostImages={"enabled": False})
    assert "changeStreamPreAndPostImages" not in collection_options(db, "off")
    cases = [
        ({"enabled": 1}, 14, "BSON field 'create.changeStreamPreAndPostImages.enabled' is the wrong type 'int', "
                             "expected type 'bool'"),
        ({}, 40414, "BSON field 'create.changeStreamPreAndPostImages.enabled' is missing but a required field"),
        ({"enabled": True, "other": 1}, 40415, "BSON field 'create.changeStreamPreAndPostImages.other' is an "
                                                "unknown field."),
        (True, 14, "BSON field 'create.changeStreamPreAndPostImages' is the wrong type 'bool', expected type "
                   "'object'"),
    ]
    for value, code, message in cases:
        for command, target in (("create", "fresh"), ("collMod", "off")):
            with pytest.raises(OperationFailure) as raised:
                db.command(command, target, changeStreamPreAndPostImages=value)
            assert raised.value.code == code, (command, value, raised.value.details)
            assert raised.value.details["errmsg"] == message.replace("create.", command + "."), raised.value.details
    assert [c["name"] for c in db.list_collections()] == ["off"]


def test_coll_mod_hides_and_unhides_an_index(rs_client):
    db = rs_client.shop
    db.items.insert_many([{"_id": i, "a": i, "at": i} for i in range(20)])
    db.items.create_index("a")
    db.items.create_index("at", expireAfterSeconds=3600)
    reply = db.command("collMod", "items", index={"name": "a_1", "hidden": True})
    assert reply["hidden_old"] is False and reply["hidden_new"] is True
    indexes = {i["name"]: i for i in db.items.list_indexes()}
    assert indexes["a_1"]["hidden"] is True
    plan = db.items.find({"a": 3}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" not in str(plan), plan  # a hidden index is never chosen
    reply = db.command("collMod", "items", index={"keyPattern": {"a": 1}, "hidden": False})
    assert reply["hidden_old"] is True and reply["hidden_new"] is False
    assert "hidden" not in {i["name"]: i for i in db.items.list_indexes()}["a_1"]
    assert "IXSCAN" in str(db.items.find({"a": 3}).explain()["queryPlanner"]["winningPlan"])
    # A TTL changed (test_store_ttl.py shows the monitor applying it).
    reply = db.command("collMod", "items", index={"name": "at_1", "expireAfterSeconds": 60})
    assert (reply["expireAfterSeconds_old"], reply["expireAfterSeconds_new"]) == (3600, 60), reply
    assert {i["name"]: i for i in db.items.list_indexes()}["at_1"]["expireAfterSeconds"] == 60
    # Errors as mongod's.
    cases = [
        ({"name": "nope", "hidden": True}, 27),
        ({"keyPattern": {"zz": 1}, "hidden": True}, 27),
        ({"name": "a_1", "keyPattern": {"a": 1}, "hidden": True}, 72),
        ({"hidden": True}, 72),
        ({"name": "a_1"}, 72),
        ({"name": "_id_", "hidden": True}, 2),
        ({"name": "a_1", "unique": True}, 115),
    ]
    for index, code in cases:
        with pytest.raises(OperationFailure) as raised:
            db.command("collMod", "items", index=index)
        assert raised.value.code == code, (index, raised.value.details)


def test_coll_mod_refuses_what_the_store_cannot_honour(rs_client):
    db = rs_client.shop
    db.create_collection("strict")
    for option, value in [("expireAfterSeconds", 10), ("cappedSize", 1024), ("recordPreImages", True)]:
        with pytest.raises(OperationFailure) as raised:
            db.command("collMod", "strict", **{option: value})
        assert raised.value.code == 115, (option, raised.value.details)
        assert raised.value.details["codeName"] == "CommandNotSupported"
        assert "changed nothing" in str(raised.value)
    with pytest.raises(OperationFailure) as raised:
        db.command("collMod", "strict", validator={"$jsonSchema": {"properties": {"a": {"encrypt": {}}}}})
    assert raised.value.code == 115 and "encrypt" in str(raised.value)
    assert collection_options(db, "strict") == {}
    # A view's definition on a collection (views are collMod's in test_store_views).
    with pytest.raises(OperationFailure) as raised:
        db.command("collMod", "strict", viewOn="other")
    assert raised.value.code == 72 and raised.value.details["codeName"] == "InvalidOptions"
    with pytest.raises(OperationFailure) as raised:
        db.command("collMod", "strict", noSuchOption=1)
    assert raised.value.code == 40415
    with pytest.raises(OperationFailure) as raised:
        db.command("collMod", "missing", changeStreamPreAndPostImages={"enabled": True})
    assert raised.value.code == 26 and raised.value.details["codeName"] == "NamespaceNotFound"
    with pytest.raises(OperationFailure) as raised:
        db.command("collMod", "strict", validationLevel="sometimes")
    assert raised.value.code == 2
    # What it records, as create records it.
    db.command("collMod", "strict", validationLevel="moderate", validationAction="warn")
    assert collection_options(db, "strict") == {"validationLevel": "moderate", "validationAction": "warn"}
    assert db.command("collMod", "strict")["ok"] == 1.0  # nothing to change is no error


def test_coll_mod_survives_a_restart(tmp_path):
    store = StoreProcess(tmp_path, extra_args=["--replSet", "rs0"])
    store.start()
    try:
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        client.shop.kept.create_index("a")
        client.shop.command("collMod", "kept", changeStreamPreAndPostImages={"enabled": True},
                            index={"name": "a_1", "hidden": True})
        client.close()
        store.stop()
        store.restart()
        client = MongoClient(store.uri, serverSelectionTimeoutMS=10000)
        assert collection_options(client.shop, "kept") == {"changeStreamPreAndPostImages": {"enabled": True}}
        assert {i["name"]: i for i in client.shop.kept.list_indexes()}["a_1"].get("hidden") is True
        client.close()
    finally:
        store.stop()
