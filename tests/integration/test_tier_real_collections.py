"""An application's collection through the tiers (issue 13): documents without a
date in the time field, and unique secondary keys across tiers, with the feeder,
evictor and warmer running and maxAge of seconds. Every answer through the proxy
is compared with what one MongoDB holding everything gives (an oracle store that
receives the same operations)."""
import time

import pymongo
import pytest

from conftest import StoreProcess, wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, namespace_status, raw_documents, start_proxy, track, wait_feeder
from tier_support import utc_now, ago


def ids_in(process):
    with client_for(process) as client:
        return sorted(document["_id"] for document in client.shop.orders.find({}, {"_id": 1}))


# --- documents outside every window ---------------------------------------------------

def test_documents_without_a_date_reach_the_archive_and_leave_the_fast_tier(replicated_tiers, tmp_path):
    """A document without the time field, with a string or a number there, or an
    array holding no recent date, is outside every window: once the archive holds
    it, the evictor removes it from the fast tier, and reads through the proxy still
    find it. An array that holds a recent date is inside the window and stays."""
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="3s", coverage="complete")
    outside = [
        {"_id": "draft", "status": "draft"},
        {"_id": "string", "createdAt": "2026-11-30T10:00:00Z"},
        {"_id": "number", "createdAt": 1796137805},
        {"_id": "null", "createdAt": None},
        {"_id": "old-array", "createdAt": [ago(7200), "later"]},
        {"_id": "old", "createdAt": ago(7200)},
    ]
    inside = [
        {"_id": "recent", "createdAt": ago(-600)},
        {"_id": "mixed-array", "createdAt": [ago(7200), ago(-600)]},
    ]
    with client_for(proxy) as client:
        client.shop.orders.insert_many(outside + inside)
    assert wait_until(lambda: ids_in(fast) == sorted(d["_id"] for d in inside), 20, 0.2), ids_in(fast)
    wait_feeder(proxy)
    assert ids_in(archive) == sorted(d["_id"] for d in outside + inside)
    with client_for(proxy) as client:
        for document in outside + inside:
            assert client.shop.orders.find_one({"_id": document["_id"]}) == document
        # The window's range read (sent to the fast tier) holds what MongoDB returns.
        window = sorted(d["_id"] for d in client.shop.orders.find({"createdAt": {"$gte": ago(60)}}))
        assert window == ["mixed-array", "recent"]
        # A write to an evicted draft faults it back in and lands in both tiers.
        client.shop.orders.update_one({"_id": "draft"}, {"$set": {"status": "placed"}})
        assert client.shop.orders.find_one({"_id": "draft"})["status"] == "placed"
    assert namespace_status(proxy)["evictor"]["evicted"] >= len(outside)
    wait_feeder(proxy)
    with client_for(archive) as client:
        assert client.shop.orders.find_one({"_id": "draft"})["status"] == "placed"
    proxy.stop()


# --- unique keys across tiers (I7 beyond _id) ----------------------------------------

def outcome(action):
    """What a write gave: its result, or its error as MongoDB reports it."""
    try:
        result = action()
        return ("ok", getattr(result, "raw_result", None) or getattr(result, "bulk_api_result", None) or
                getattr(result, "inserted_id", None) or getattr(result, "inserted_ids", None) or result)
    except pymongo.errors.BulkWriteError as error:
        details = dict(error.details)
        details.pop("upserted", None)
        return ("bulk-error", details)
    except pymongo.errors.OperationFailure as error:
        details = {key: value for key, value in (error.details or {}).items()
                   if key not in ("$clusterTime", "operationTime")}
        return ("error", error.code, details)


def order(number, now, **fields):
    """A new order with its own (shop, orderNumber), so that only the key a write
    aims at can collide."""
    return dict({"_id": number, "shop": "s%d" % number, "orderNumber": number, "createdAt": now}, **fields)


def unique_key_writes(collection, now):
    """Each kind of write that sets a unique key another document (held only by the
    archive, through the proxy) already has."""
    from pymongo import InsertOne, UpdateOne
    return [
        ("insert", lambda: collection.insert_one(order(2, now, email="old@shop"))),
        ("update $set", lambda: collection.update_one({"_id": 3}, {"$set": {"email": "old@shop"}})),
        ("update $set by a filter", lambda: collection.update_many({"customer": "c3"},
                                                                   {"$set": {"email": "old@shop"}})),
        ("upsert", lambda: collection.update_one({"_id": 4}, {"$set": {"email": "old@shop", "createdAt": now,
                                                                      "shop": "s4", "orderNumber": 4}},
                                                 upsert=True)),
        ("upsert by the key", lambda: collection.update_one(
            {"email": "old@shop", "createdAt": {"$gte": now}},
            {"$set": {"n": 1}, "$setOnInsert": {"shop": "s12", "orderNumber": 12}}, upsert=True)),
        ("replace", lambda: collection.replace_one({"_id": 3}, order(3, now, email="old@shop"))),
        ("findAndModify", lambda: collection.find_one_and_update({"_id": 3}, {"$set": {"email": "old@shop"}})),
        ("compound key", lambda: collection.insert_one(dict(order(5, now, email="five@shop"), shop="s1",
                                                            orderNumber=17))),
        ("compound key by $set", lambda: collection.update_one({"_id": 3}, {"$set": {"shop": "s1",
                                                                                    "orderNumber": 17}})),
        ("bulk unordered", lambda: collection.bulk_write([
            InsertOne(order(6, now, email="six@shop")),
            UpdateOne({"_id": 3}, {"$set": {"email": "old@shop"}}),
            InsertOne(dict(order(7, now, email="seven@shop"), shop="s1", orderNumber=17)),
            InsertOne(order(8, now, email="eight@shop"))], ordered=False)),
        ("insert many ordered", lambda: collection.insert_many([
            order(9, now, email="nine@shop"), order(10, now, email="old@shop"), order(11, now, email="x@shop")])),
    ]


def test_a_unique_key_held_only_by_the_archive_is_refused_as_mongodb_refuses_it(replicated_tiers, tmp_path):
    """A new value of a unique secondary key that only an old archive document holds:
    insert, update, upsert, replace, findAndModify and bulk writes each get exactly
    the answer one MongoDB holding everything gives (E11000 with its keyValue), the
    duplicate is written nowhere, and the feed goes on."""
    archive, fast = replicated_tiers
    oracle = track(StoreProcess(tmp_path / "oracle", replica_set="rs9").start())
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    now = utc_now()
    old = {"_id": 1, "email": "old@shop", "shop": "s1", "orderNumber": 17, "customer": "c1",
           "createdAt": ago(7200)}
    with client_for(proxy) as through, client_for(oracle) as alone, client_for(archive) as direct:
        for client in (through, alone):
            client.shop.orders.create_index("email", unique=True)
            client.shop.orders.create_index([("shop", 1), ("orderNumber", 1)], unique=True, name="shop_order")
        # The old order lives only in the archive (outside the window), as after eviction.
        direct.shop.orders.insert_one(old)
        alone.shop.orders.insert_one(old)
        for client in (through, alone):
            client.shop.orders.insert_one(order(3, now, email="three@shop", customer="c3"))
        for (name, proxied), (_, expected) in zip(unique_key_writes(through.shop.orders, now),
                                                  unique_key_writes(alone.shop.orders, now)):
            got, want = outcome(proxied), outcome(expected)
            assert got == want, "%s: through the proxy %r, MongoDB alone %r" % (name, got, want)
            assert got[0] != "ok" or name.startswith("bulk"), "%s was acknowledged: no duplicate set" % name
        assert sorted(through.shop.orders.find(), key=lambda d: d["_id"]) == \
            sorted(alone.shop.orders.find(), key=lambda d: d["_id"])
    wait_feeder(proxy)
    for process in (archive, fast):
        with client_for(process) as client:
            assert client.shop.orders.count_documents({"email": "old@shop"}) <= 1
            assert client.shop.orders.count_documents({"shop": "s1", "orderNumber": 17}) <= 1
    assert raw_documents(archive) == raw_documents(oracle)
    feeder = namespace_status(proxy)["feeder"]
    assert not feeder.get("stopped"), feeder
    proxy.stop()


# --- unique keys an update computes, checked at write time (issue 13) ----------------

CASES = 14


def computed_key_documents(now):
    """For each case i, an archive-only order old-i holding the keys that the fast
    order f-i's update computes: seq (numeric), email, tags (multikey), code (old-3,
    the $unset case, alone lacks it: its key is null)."""
    archive_only, fast = [], []
    for i in range(CASES):
        old = {"_id": "old-%d" % i, "email": "old-%d@shop" % i, "seq": 1000 + 10 * i, "tags": ["vip-%d" % i],
               "code": -1 - i, "createdAt": ago(7200)}
        if i == 3:
            del old["code"]
        archive_only.append(old)
        fast.append({"_id": "f-%d" % i, "email": "f-%d@shop" % i, "alias": "old-%d@shop" % i, "local": "old-%d" % i,
                     "seq": 1000 + 10 * i - 1, "tags": ["t-%d" % i], "code": i, "group": "g%d" % i,
                     "createdAt": now})
    fast.append({"_id": "f-7b", "email": "f-7b@shop", "seq": 2000, "tags": ["t-7b"], "code": 70, "group": "g7",
                 "createdAt": now})
    fast.append({"_id": "f-ok", "email": "f-ok@shop", "local": "fresh", "seq": 5000, "tags": ["t-ok"], "code": 99,
                 "createdAt": now})
    return archive_only, fast


def computed_key_writes(collection, now):
    """Each kind of update whose new unique key comes from the stored document, each
    colliding with its archive-only order; then updates whose computed keys collide
    with nothing."""
    from pymongo import InsertOne, ReturnDocument, UpdateOne
    return [
        ("$inc", lambda: collection.update_one({"_id": "f-0"}, {"$inc": {"seq": 1}})),
        ("$rename to the key", lambda: collection.update_one({"_id": "f-1"}, {"$rename": {"alias": "email"}})),
        ("$push on a multikey key", lambda: collection.update_one({"_id": "f-2"}, {"$push": {"tags": "vip-2"}})),
        ("$unset: a null key", lambda: collection.update_one({"_id": "f-3"}, {"$unset": {"code": ""}})),
        ("pipeline", lambda: collection.update_one(
            {"_id": "f-4"}, [{"$set": {"email": {"$concat": ["$local", "@shop"]}}}])),
        ("findAndModify $inc", lambda: collection.find_one_and_update({"_id": "f-5"}, {"$inc": {"seq": 1}})),
        ("upsert $inc that inserts", lambda: collection.update_one(
            {"_id": "new-6", "createdAt": now},
            {"$inc": {"seq": 1060}, "$set": {"email": "new-6@shop", "code": 600, "tags": ["n-6"]}}, upsert=True)),
        ("multi $inc", lambda: collection.update_many({"group": "g7"}, {"$inc": {"seq": 1}})),
        ("bulk ordered", lambda: collection.bulk_write([
            UpdateOne({"_id": "f-8"}, {"$set": {"n": 1}}),
            UpdateOne({"_id": "f-8"}, {"$push": {"tags": "vip-8"}}),
            UpdateOne({"_id": "f-8"}, {"$inc": {"seq": 1}})])),
        ("bulk unordered", lambda: collection.bulk_write([
            UpdateOne({"_id": "f-9"}, {"$inc": {"seq": 1}}),
            InsertOne({"_id": "new-9", "email": "new-9@shop", "code": 900, "createdAt": now}),
            UpdateOne({"_id": "f-9"}, {"$set": {"n": 2}}),
            UpdateOne({"_id": "f-1"}, {"$rename": {"alias": "email"}})], ordered=False)),
        ("positional $[]", lambda: collection.update_one({"_id": "f-10"}, {"$set": {"tags.$[]": "vip-10"}})),
        ("$max", lambda: collection.update_one({"_id": "f-11"}, {"$max": {"seq": 1110}})),
        ("positional $", lambda: collection.update_one({"_id": "f-12", "tags": "t-12"},
                                                       {"$set": {"tags.$": "vip-12"}})),
        ("arrayFilters", lambda: collection.update_one({"_id": "f-13"}, {"$set": {"tags.$[t]": "vip-13"}},
                                                       array_filters=[{"t": "t-13"}])),
        # Computed keys that collide with nothing: acknowledged as MongoDB acknowledges them.
        ("no collision: $inc", lambda: collection.update_one({"_id": "f-ok"}, {"$inc": {"seq": 1}})),
        ("no collision: $push", lambda: collection.update_one({"_id": "f-ok"}, {"$push": {"tags": "fresh"}})),
        ("no collision: pipeline", lambda: collection.update_one(
            {"_id": "f-ok"}, [{"$set": {"email": {"$concat": ["$local", "@elsewhere"]}}}])),
        ("no collision: findAndModify", lambda: collection.find_one_and_update(
            {"_id": "f-ok"}, {"$inc": {"seq": 1}}, return_document=ReturnDocument.AFTER)),
    ]


def comparable(result):
    """An outcome without what differs between any two servers (their clocks)."""
    if result[0] == "ok" and isinstance(result[1], dict):
        return ("ok", {key: value for key, value in result[1].items()
                       if key not in ("$clusterTime", "operationTime", "electionId", "opTime")})
    return result


def test_unique_keys_an_update_computes_are_checked_against_the_archive(replicated_tiers, tmp_path):
    """$inc, $rename, $push, $unset, a pipeline, findAndModify, an upsert that
    inserts, a multi update, $[], $, arrayFilters, $max and bulk writes mixing them: each
    new key held only by an archive order gets exactly MongoDB's E11000 (code,
    keyValue), nothing is written on either tier, and the feeder refuses nothing;
    computed keys that collide with nothing are acknowledged."""
    archive, fast = replicated_tiers
    oracle = track(StoreProcess(tmp_path / "oracle", replica_set="rs9").start())
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    now = utc_now()
    archive_only, recent = computed_key_documents(now)
    with client_for(proxy) as through, client_for(oracle) as alone, client_for(archive) as direct:
        for client in (through, alone):
            client.shop.orders.create_index("email", unique=True)
            client.shop.orders.create_index("code", unique=True)
            client.shop.orders.create_index("seq", unique=True, sparse=True)
            client.shop.orders.create_index("tags", unique=True, sparse=True)
        direct.shop.orders.insert_many(archive_only)  # outside the window, as after eviction
        alone.shop.orders.insert_many(archive_only)
        for client in (through, alone):
            client.shop.orders.insert_many(recent)
        for (name, proxied), (_, expected) in zip(computed_key_writes(through.shop.orders, now),
                                                  computed_key_writes(alone.shop.orders, now)):
            got, want = comparable(outcome(proxied)), comparable(outcome(expected))
            assert got == want, "%s: through the proxy %r, MongoDB alone %r" % (name, got, want)
            if name.startswith("no collision"):
                assert got[0] == "ok", name
            elif not name.startswith("bulk"):
                assert got[0] == "error" and got[1] == 11000 and "keyValue" in got[2], (name, got)
            else:
                assert all(error["code"] == 11000 for error in got[1]["writeErrors"]), (name, got)
        assert sorted(through.shop.orders.find(), key=lambda d: d["_id"]) == \
            sorted(alone.shop.orders.find(), key=lambda d: d["_id"])
    wait_feeder(proxy)
    for process in (archive, fast):
        with client_for(process) as client:
            orders = client.shop.orders
            for i in range(CASES):
                assert orders.count_documents({"email": "old-%d@shop" % i}) <= 1
                assert orders.count_documents({"seq": 1000 + 10 * i}) <= 1
                assert orders.count_documents({"tags": "vip-%d" % i}) <= 1
            assert orders.count_documents({"code": None}) <= 1
    assert raw_documents(archive) == raw_documents(oracle)
    feeder = namespace_status(proxy)["feeder"]
    assert feeder["refusals"]["count"] == 0, feeder
    assert not feeder.get("stopped"), feeder
    proxy.stop()


# --- writes read the archive only when they must (issue 19) --------------------------

def archive_queries(archive):
    with client_for(archive) as client:
        return client.admin.command("serverStatus")["opcounters"]["query"]


def test_writes_to_documents_the_fast_tier_holds_read_nothing_from_the_archive(replicated_tiers, tmp_path):
    """A document the fast tier holds is its newest version: an update, a replace,
    a findAndModify or a delete of it by _id asks the archive nothing (its
    opcounters show no query), while a write to a document only the archive holds
    still copies it in first, and every answer is MongoDB's."""
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": "old", "n": 0, "createdAt": ago(7200)})
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"warmerEnabled": "false"})  # the warmer would read the archive on its own
    with client_for(proxy) as client:
        orders = client.shop.orders
        orders.insert_many([{"_id": i, "n": 0, "createdAt": utc_now()} for i in range(20)])
        wait_feeder(proxy)
        before = archive_queries(archive)
        for i in range(20):
            assert orders.update_one({"_id": i}, {"$inc": {"n": 1}}).modified_count == 1
        assert orders.replace_one({"_id": 3}, {"n": 30, "createdAt": utc_now()}).modified_count == 1
        assert orders.find_one_and_update({"_id": 4}, {"$inc": {"n": 1}})["n"] == 1
        assert orders.delete_one({"_id": 5}).deleted_count == 1
        assert orders.update_one({"_id": 99}, {"$set": {"n": 1}}).matched_count == 0  # in no tier
        asked = archive_queries(archive) - before
        # Only the id in no tier needed the archive (one fault-in find); nothing else.
        assert asked == 1, "the archive was queried %d times" % asked
        # A document only the archive holds is copied in first, as before.
        assert orders.update_one({"_id": "old"}, {"$inc": {"n": 1}}).modified_count == 1
        assert archive_queries(archive) - before == 2
        assert orders.find_one({"_id": "old"})["n"] == 1
    wait_feeder(proxy)
    with client_for(archive) as client:
        assert [d["n"] for d in client.shop.orders.find({"_id": {"$in": [0, 3, 4, 19, "old"]}}).sort("_id", 1)] \
            == [1, 30, 2, 1, 1]
        assert client.shop.orders.find_one({"_id": 5}) is None
    proxy.stop()


def test_with_the_archive_away_the_fast_tier_keeps_serving(replicated_tiers, tmp_path):
    """The archive killed: reads the planner proves on the fast tier, and writes by
    _id of documents the fast tier holds, succeed at once; a write that needs the
    archive fails within failoverWait with a retryable error; once the archive is
    back, the feeder converges it to what one MongoDB would hold."""
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"warmerEnabled": "false", "failoverWait": "2s", "readYourWritesWait": "2s"})
    recent = ago(60)
    with client_for(proxy) as client:
        orders = client.shop.orders
        orders.insert_many([{"_id": i, "n": 0, "createdAt": utc_now()} for i in range(10)])
        wait_feeder(proxy)
        archive.kill9()
        started = time.monotonic()
        assert orders.count_documents({"createdAt": {"$gte": recent}}) == 10
        assert orders.update_one({"_id": 1}, {"$inc": {"n": 1}}).modified_count == 1
        assert orders.delete_one({"_id": 2}).deleted_count == 1
        assert orders.find_one({"_id": 1})["n"] == 1
        assert time.monotonic() - started < 2, "writes the fast tier alone answers waited for the archive"
        started = time.monotonic()
        with pytest.raises(pymongo.errors.PyMongoError) as raised:
            orders.insert_one({"_id": 100, "n": 0, "createdAt": utc_now()})  # is 100 in the archive?
        waited = time.monotonic() - started
        assert waited < 8, "a write that needs the archive waited %.1f s" % waited
        error = raised.value
        labels = getattr(error, "_error_labels", set()) or set()
        assert isinstance(error, pymongo.errors.ConnectionFailure) or "RetryableWriteError" in labels or \
            getattr(error, "code", None) in (6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436), error
    archive.restart()
    wait_feeder(proxy, timeout=30)
    with client_for(archive) as client:
        assert client.shop.orders.find_one({"_id": 1})["n"] == 1
        assert client.shop.orders.find_one({"_id": 2}) is None
        assert client.shop.orders.count_documents({}) == 9
    proxy.stop()
