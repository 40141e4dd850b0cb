"""The store's TTL monitor, as mongod's: a TTL index's expired documents are
deleted by a pass every ttlMonitorSleepSecs (set to 1 here), through the delete
path, so change streams see them; what mongod leaves (a value that is not a date,
a document without the field, a partial index's outsiders, a compound index's
TTL) stays; collMod changes an expiry or makes a one-field index a TTL index;
ttlMonitorEnabled pauses it; serverStatus counts passes and deletions."""
import datetime

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import StoreProcess, wait_until


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def ago(seconds):
    return now() - datetime.timedelta(seconds=seconds)


@pytest.fixture
def client(replica_store):
    with MongoClient(replica_store.uri, serverSelectionTimeoutMS=10000) as client:
        client.admin.command("setParameter", 1, ttlMonitorSleepSecs=1)
        yield client
        client.admin.command("setParameter", 1, ttlMonitorSleepSecs=60, ttlMonitorEnabled=True)


def ids(collection):
    return sorted(d["_id"] for d in collection.find({}, {"_id": 1}))


def test_expired_documents_are_deleted_as_mongod_deletes_them(client):
    events = client.shop.events
    events.create_index("at", expireAfterSeconds=5)
    events.create_index([("at2", 1), ("b", 1)], expireAfterSeconds=0)  # compound: no TTL on mongod
    events.insert_many([
        {"_id": "old", "at": ago(60)},
        {"_id": "recent", "at": ago(1)},
        {"_id": "future", "at": ago(-3600)},
        {"_id": "text", "at": "2001-01-01"},            # not a date: never expires
        {"_id": "none"},                                  # no field: never expires
        {"_id": "array", "at": [ago(-3600), ago(60)]},    # the earliest date counts
        {"_id": "compound", "at2": ago(3600), "b": 1},
    ])
    with client.shop.events.watch() as stream:
        assert wait_until(lambda: "old" not in ids(events) and "array" not in ids(events), 10, 0.2), ids(events)
        deleted = set()
        while len(deleted) < 2:
            change = stream.try_next()
            if change is not None:
                assert change["operationType"] == "delete", change
                deleted.add(change["documentKey"]["_id"])
        assert deleted == {"old", "array"}
    assert ids(events) == ["compound", "future", "none", "recent", "text"]
    assert wait_until(lambda: "recent" not in ids(events), 10, 0.2), "the 5 s TTL did not come for 'recent'"
    ttl = client.admin.command("serverStatus")["metrics"]["ttl"]
    assert ttl["deletedDocuments"] >= 3 and ttl["passes"] >= 2, ttl


def test_a_partial_ttl_index_expires_only_its_documents(client):
    sessions = client.shop.sessions
    sessions.create_index("at", expireAfterSeconds=0, partialFilterExpression={"kind": "guest"})
    sessions.insert_many([{"_id": 1, "at": ago(60), "kind": "guest"}, {"_id": 2, "at": ago(60), "kind": "user"}])
    assert wait_until(lambda: ids(sessions) == [2], 10, 0.2), ids(sessions)


def test_coll_mod_changes_an_expiry_and_makes_a_ttl_index(client):
    items = client.shop.items
    items.create_index("at", expireAfterSeconds=3600)
    items.create_index("seen")
    items.create_index([("a", 1), ("b", 1)])
    items.insert_many([{"_id": 1, "at": ago(120)}, {"_id": 2, "seen": ago(120)}, {"_id": 3, "at": ago(10)}])
    assert ids(items) == [1, 2, 3]
    reply = client.shop.command("collMod", "items", index={"keyPattern": {"at": 1}, "expireAfterSeconds": 60})
    assert (reply["expireAfterSeconds_old"], reply["expireAfterSeconds_new"]) == (3600, 60), reply
    reply = client.shop.command("collMod", "items", index={"name": "seen_1", "expireAfterSeconds": 30})
    assert "expireAfterSeconds_old" not in reply and reply["expireAfterSeconds_new"] == 30, reply
    specs = {spec["name"]: spec for spec in items.list_indexes()}
    assert specs["at_1"]["expireAfterSeconds"] == 60 and specs["seen_1"]["expireAfterSeconds"] == 30
    assert wait_until(lambda: ids(items) == [3], 10, 0.2), ids(items)
    for index, code in [({"name": "a_1_b_1", "expireAfterSeconds": 10}, 72),
                        ({"name": "_id_", "expireAfterSeconds": 10}, 72),
                        ({"name": "at_1", "expireAfterSeconds": -1}, 72),
                        ({"name": "at_1", "expireAfterSeconds": 2 ** 31}, 72),
                        ({"name": "at_1", "expireAfterSeconds": "soon"}, 40415)]:
        with pytest.raises(OperationFailure) as raised:
            client.shop.command("collMod", "items", index=index)
        assert raised.value.code == code, (index, raised.value.details)


def test_ttl_monitor_enabled_false_pauses_it(client):
    paused = client.shop.paused
    assert client.admin.command("getParameter", 1, ttlMonitorSleepSecs=1)["ttlMonitorSleepSecs"] == 1
    reply = client.admin.command("setParameter", 1, ttlMonitorEnabled=False)
    assert reply["was"] is True
    paused.create_index("at", expireAfterSeconds=0)
    paused.insert_one({"_id": 1, "at": ago(60)})
    passes = client.admin.command("serverStatus")["metrics"]["ttl"]["passes"]
    assert not wait_until(lambda: ids(paused) == [], 2.5, 0.2)
    assert client.admin.command("serverStatus")["metrics"]["ttl"]["passes"] == passes
    client.admin.command("setParameter", 1, ttlMonitorEnabled=True)
    assert wait_until(lambda: ids(paused) == [], 10, 0.2)
    with pytest.raises(OperationFailure) as raised:
        client.admin.command("setParameter", 1, ttlMonitorSleepSecs=0)
    assert raised.value.code == 2


def test_the_monitor_deletes_under_access_control(tmp_path):
    store = StoreProcess(tmp_path / "auth", extra_args=["--auth"])
    store.start()
    try:
        with MongoClient(store.uri) as local:  # the localhost exception creates the first user
            local.admin.command("createUser", "root", pwd="pw", roles=["root"])
        with MongoClient(store.uri, username="root", password="pw") as client:
            client.admin.command("setParameter", 1, ttlMonitorSleepSecs=1)
            client.shop.logs.create_index("at", expireAfterSeconds=0)
            client.shop.logs.insert_many([{"_id": 1, "at": ago(60)}, {"_id": 2, "at": ago(-3600)}])
            assert wait_until(lambda: ids(client.shop.logs) == [2], 10, 0.2), ids(client.shop.logs)
    finally:
        store.stop()
