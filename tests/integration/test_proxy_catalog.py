"""Catalog commands through `thermocline proxy` on tiered namespaces: create, drop,
createIndexes, dropIndexes, collMod and dropDatabase change both tiers (the
archive first: its refusal is the answer and the fast tier stays untouched; a
fast-tier failure after it is an error naming both tiers' states); renameCollection
of or onto a tiered namespace is refused, and so is an aggregation's $out or
$merge into one; endSessions reaches the fast tier, where transactions run. Each
store is checked directly. Most tests share one deployment of two replica-set
stores with the tier workers, emptied before each test; the last ones script the
tiers (fake_tier.py) to fail chosen commands."""
import shutil

import pymongo
import pytest
from pymongo import MongoClient

from conftest import ProxyProcess, StoreProcess, proxy_config
from fake_tier import FakeTier
from tier_support import NS, client_for, start_proxy, status, tier_config, wait_feeder
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import utc_now, ago

EVENTS = "shop.events"
ITEMS = "logs.items"
ILLEGAL_OPERATION = 20
QUIET = "feederEnabled: false\nevictorEnabled: false\nwarmerEnabled: false\n"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Two replica-set stores and a proxy tiering shop.orders, shop.events and
    logs.items (window 1h, complete from the start), for the module."""
    base = tmp_path_factory.mktemp("catalog")
    archive = StoreProcess(base / "archive", replica_set="rs0").start()
    fast = StoreProcess(base / "fast", replica_set="rs1").start()
    proxy = ProxyProcess(base / "proxy", tier_config(archive, fast, max_age="1h", coverage="complete",
                                                      extra_namespaces=(EVENTS, ITEMS))).start()
    yield archive, fast, proxy
    for process in (proxy, fast, archive):
        process.stop()
    for store in (fast, archive):
        shutil.rmtree(store.dbpath, ignore_errors=True)


@pytest.fixture
def deployment(shared):
    """The shared deployment emptied (once the feeder has replayed what earlier
    tests wrote), and a client of the proxy."""
    archive, fast, proxy = shared
    for ns in (NS, EVENTS, ITEMS):
        wait_feeder(proxy, ns)
    for store in (archive, fast):
        with client_for(store) as direct:
            direct.drop_database("shop")
            direct.drop_database("logs")
    client = client_for(proxy)
    yield archive, fast, proxy, client
    client.close()


def indexes(process, ns=NS):
    database, collection = ns.split(".", 1)
    with client_for(process) as client:
        return client[database][collection].index_information()


def collections(process, database="shop"):
    with client_for(process) as client:
        return set(client[database].list_collection_names())


def ids(process, ns=NS):
    database, collection = ns.split(".", 1)
    with client_for(process) as client:
        return sorted(document["_id"] for document in client[database][collection].find())


def stages(plan):
    """Every stage of an explain plan, depth first."""
    found = [plan]
    for key in ("inputStage", "inputStages"):
        children = plan.get(key, [])
        for child in children if isinstance(children, list) else [children]:
            found += stages(child)
    return found


def test_create_indexes_reach_both_tiers(deployment):
    archive, fast, proxy, client = deployment
    orders = client.shop.orders
    orders.insert_many([{"_id": i, "createdAt": utc_now(), "sku": "s%d" % i, "n": i} for i in range(20)])
    assert orders.create_index([("n", 1)]) == "n_1"
    assert orders.create_index([("sku", 1)], unique=True) == "sku_1"
    for store in (archive, fast):
        held = indexes(store)
        assert held["n_1"]["key"] == [("n", 1)], store.log_path
        assert held["sku_1"]["unique"] is True, store.log_path

    # The fast tier's reads use the index the proxy created there.
    explain = orders.find({"createdAt": {"$gte": ago(600)}, "n": 5}).explain()
    assert explain["thermocline"]["tier"] == "fast"
    assert explain["serverInfo"]["port"] == fast.port
    assert "n_1" in [stage.get("indexName") for stage in stages(explain["queryPlanner"]["winningPlan"])]

    # The unique index holds where writes land.
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        orders.insert_one({"_id": 100, "createdAt": utc_now(), "sku": "s3"})

    # listIndexes comes from the archive, unchanged.
    assert orders.index_information() == indexes(archive)


def test_the_archive_refusing_an_index_leaves_the_fast_tier_untouched(deployment):
    """Old documents only the archive holds break a unique index: the archive's
    DuplicateKey is the answer, and the fast tier (which alone would accept it)
    builds nothing."""
    archive, fast, _, client = deployment
    with client_for(archive) as direct:
        direct.shop.orders.insert_many([{"_id": i, "createdAt": ago(86400 * 10), "code": "same"} for i in range(2)])
    client.shop.orders.insert_one({"_id": 10, "createdAt": utc_now(), "code": "other"})
    with client_for(archive) as direct:
        expected = None
        try:
            direct.shop.scratch.insert_many([{"_id": i, "code": "same"} for i in range(2)])
            direct.shop.scratch.create_index([("code", 1)], unique=True)
        except pymongo.errors.OperationFailure as failure:
            expected = failure.code
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.orders.create_index([("code", 1)], unique=True)
    assert raised.value.code == expected == 11000
    assert "code_1" not in indexes(archive) and "code_1" not in indexes(fast)


def test_drop_indexes_reach_both_tiers_and_converge(deployment):
    archive, fast, _, client = deployment
    orders = client.shop.orders
    orders.insert_one({"_id": 1, "createdAt": utc_now(), "n": 1, "m": 1})
    orders.create_index([("n", 1)])
    orders.drop_index("n_1")
    for store in (archive, fast):
        assert "n_1" not in indexes(store)

    # An index only the fast tier has (a partial failure earlier): the archive has
    # nothing to drop, the fast tier drops it, and the client sees it dropped.
    with client_for(fast) as direct:
        direct.shop.orders.create_index([("m", 1)])
    reply = client.shop.command("dropIndexes", "orders", index="m_1")
    assert reply["ok"] == 1.0
    assert "m_1" not in indexes(fast)

    # Neither has it: the archive's own error.
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        orders.drop_index("m_1")
    assert raised.value.code == 27  # IndexNotFound


def test_drop_empties_both_tiers_and_the_feeder_goes_on(deployment):
    archive, fast, proxy, client = deployment
    orders, events = client.shop.orders, client.shop.events
    orders.insert_many([{"_id": i, "createdAt": utc_now(), "n": i} for i in range(2000)])
    orders.update_many({}, {"$inc": {"n": 1}})
    events.insert_one({"_id": "before", "createdAt": utc_now()})
    # At once, with the feeder most likely still replaying those writes: the drop
    # waits for it, so no replay brings the collection back in the archive.
    reply = client.shop.command("drop", "orders")
    assert reply["ok"] == 1.0 and reply["ns"] == NS
    for store in (archive, fast):
        assert "orders" not in collections(store)

    # The feeder goes on: for another namespace, and for the same one recreated.
    events.insert_one({"_id": "after", "createdAt": utc_now()})
    orders.insert_one({"_id": "again", "createdAt": utc_now()})
    wait_feeder(proxy)
    wait_feeder(proxy, EVENTS)
    assert ids(archive) == ids(fast) == ["again"]
    assert ids(archive, EVENTS) == ["after", "before"]
    assert status(proxy)["workers"]["feeder"]["archiveReachable"] is True


def test_drop_of_a_collection_only_the_archive_holds(deployment):
    """Nothing recent was written: the fast tier has no such collection, which is
    what a drop asks, so the archive's reply stands."""
    archive, fast, _, client = deployment
    with client_for(archive) as direct:
        direct.shop.orders.insert_one({"_id": 1, "createdAt": ago(86400 * 10)})
    assert "orders" not in collections(fast)
    reply = client.shop.command("drop", "orders")
    assert reply["ok"] == 1.0 and reply["ns"] == NS
    assert "orders" not in collections(archive)
    # A drop of a collection neither holds: the archive's NamespaceNotFound, as mongod 6.0.
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.command("drop", "orders")
    assert raised.value.code == 26


def test_create_reaches_both_tiers(deployment):
    archive, fast, _, client = deployment
    client.shop.create_collection("orders")
    assert "orders" in collections(archive) and "orders" in collections(fast)
    # Untiered: the archive alone.
    client.shop.create_collection("plain")
    assert "plain" in collections(archive) and "plain" not in collections(fast)


def test_coll_mod_answers_with_the_archive(deployment):
    """The archive is asked first: its answer (a store refuses $jsonSchema's
    encrypt) is the client's, and the fast tier is not asked."""
    archive, _, _, client = deployment
    client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()})
    validator = {"$jsonSchema": {"properties": {"n": {"encrypt": {}}}}}
    with client_for(archive) as direct:
        with pytest.raises(pymongo.errors.OperationFailure) as direct_failure:
            direct.shop.command("collMod", "orders", validator=validator)
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.command("collMod", "orders", validator=validator)
    assert raised.value.code == direct_failure.value.code
    assert raised.value.details["codeName"] == direct_failure.value.details["codeName"]


def test_rename_of_or_onto_a_tiered_namespace_is_refused(deployment):
    archive, fast, _, client = deployment
    client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()})
    client.shop.plain.insert_one({"_id": 1})
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.admin.command("renameCollection", NS, to="shop.renamed")
    assert raised.value.code == ILLEGAL_OPERATION
    assert raised.value.details["codeName"] == "IllegalOperation"
    assert "cannot rename shop.orders" in str(raised.value) and "tiered" in str(raised.value)
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.admin.command("renameCollection", "shop.plain", to=EVENTS, dropTarget=True)
    assert raised.value.code == ILLEGAL_OPERATION and "shop.events is tiered" in str(raised.value)
    assert "orders" in collections(fast) and "plain" in collections(archive)

    # Between untiered namespaces: the archive renames, as before.
    client.admin.command("renameCollection", "shop.plain", to="shop.plain2")
    assert "plain2" in collections(archive) and "plain" not in collections(archive)


def test_drop_database_reaches_both_tiers(deployment):
    archive, fast, proxy, client = deployment
    client.logs.items.insert_many([{"_id": i, "createdAt": utc_now()} for i in range(1000)])
    client.logs.plain.insert_one({"_id": 1})
    client.drop_database("logs")
    for store in (archive, fast):
        assert collections(store, "logs") == set()
    client.logs.items.insert_one({"_id": "again", "createdAt": utc_now()})
    wait_feeder(proxy, ITEMS)
    assert ids(archive, ITEMS) == ids(fast, ITEMS) == ["again"]


def test_out_and_merge_into_a_tiered_namespace_are_refused(deployment):
    archive, fast, _, client = deployment
    client.shop.plain.insert_one({"_id": 1, "createdAt": utc_now()})
    refused = [
        ("plain", [{"$out": "orders"}], NS),
        ("plain", [{"$out": {"db": "shop", "coll": "events"}}], EVENTS),
        ("orders", [{"$merge": "orders"}], NS),
        ("plain", [{"$merge": {"into": {"db": "logs", "coll": "items"}, "whenMatched": "replace"}}], ITEMS),
    ]
    for source, pipeline, target in refused:
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.command("aggregate", source, pipeline=pipeline, cursor={})
        assert raised.value.code == ILLEGAL_OPERATION, pipeline
        assert "writes %s, which is tiered" % target in str(raised.value), str(raised.value)
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.command("mapReduce", "plain", map="function() { emit(this._id, 1); }",
                            reduce="function(k, v) { return 1; }", out={"replace": "events"})
    assert raised.value.code == ILLEGAL_OPERATION and "shop.events" in str(raised.value)
    # An output the proxy cannot name might be tiered: refused too.
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.command("aggregate", "plain", pipeline=[{"$out": {"db": "shop"}}], cursor={})
    assert raised.value.code == ILLEGAL_OPERATION
    assert collections(fast) == set() and collections(archive) == {"plain"}


def test_out_from_a_tiered_source_waits_for_the_feeder(replicated_tiers, tmp_path):
    """$out into an untiered collection reads its tiered source in the archive,
    which holds it whole only once the feeder has applied the writes acknowledged
    before: without a feeder it is never run (read-your-writes fails instead)."""
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete",
                        top={"feederEnabled": "false", "readYourWritesWait": "300ms"})
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()})
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.command("aggregate", "orders", pipeline=[{"$out": "report"}], cursor={})
        assert raised.value.code == 262 and "read-your-writes" in str(raised.value)
    assert "report" not in collections(archive)
    proxy.stop()


def test_end_sessions_reaches_the_fast_tier(deployment):
    """Transactions run on the fast tier: ending their session there aborts them."""
    _, fast, _, client = deployment

    def open_transactions():
        with client_for(fast) as direct:
            return direct.admin.command("serverStatus")["transactions"]["currentOpen"]

    with client.start_session() as session:
        session.start_transaction()
        client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()}, session=session)
        assert open_transactions() == 1
        client.admin.command("endSessions", [session.session_id])
        assert open_transactions() == 0
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            session.commit_transaction()
        assert raised.value.code == 251  # NoSuchTransaction


# --- scripted tiers: the failures a store cannot be made to give ---------------------------

@pytest.fixture
def scripted(tmp_path):
    archive, fast = FakeTier(key_id=1, set_name="rs0"), FakeTier(key_id=2, set_name="rs1")
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(
        archive, fast, [(NS, "createdAt", "30d", True)], QUIET)).start()
    client = MongoClient(proxy.uri, retryWrites=False)
    yield archive, fast, client
    client.close()
    proxy.stop()
    archive.close()
    fast.close()


def test_the_archive_first_then_the_fast_tier(scripted):
    archive, fast, client = scripted
    # The archive refuses: its error, and the fast tier never hears of it.
    archive.failures["createIndexes"] = [11000]
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.orders.create_index([("a", 1)], unique=True)
    assert raised.value.code == 11000 and "scripted failure" in str(raised.value)
    assert fast.received("createIndexes") == []

    # The fast tier refuses after the archive built it: an error naming both states.
    fast.failures["createIndexes"] = [85]
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.orders.create_index([("b", 1)])
    assert raised.value.code == 85 and raised.value.details["codeName"] == "IndexOptionsConflict"
    message = str(raised.value)
    assert "createIndexes on shop.orders was applied to the archive, but the fast tier failed" in message
    assert "scripted failure" in message and "the archive has the change and the fast tier does not" in message
    assert len(archive.received("createIndexes")) == 2 and len(fast.received("createIndexes")) == 1

    # Both succeed: the archive's reply.
    assert client.shop.orders.create_index([("c", 1)]) == "c_1"
    assert fast.received("createIndexes")[-1]["indexes"][0]["key"] == {"c": 1}


def test_out_runs_in_the_archive(scripted):
    """A pipeline writing an untiered collection runs where its tiered source is
    whole, the archive; its explain (which writes nothing) is not refused."""
    archive, fast, client = scripted
    client.shop.command("aggregate", "orders", pipeline=[{"$match": {"createdAt": {"$gte": utc_now()}}},
                                                         {"$out": "report"}], cursor={})
    assert [command["pipeline"][-1] for command in archive.received("aggregate")] == [{"$out": "report"}]
    explain = client.shop.command("aggregate", "plain", pipeline=[{"$out": "orders"}], explain=True)
    assert explain["thermocline"]["tier"] == "archive"
    assert fast.received("aggregate") == []


def test_coll_mod_creates_the_fast_collection_first(scripted):
    """No write has created the collection in the fast tier yet: it is created
    there, so that what collMod sets applies to the writes that land there."""
    archive, fast, client = scripted
    fast.failures["collMod"] = [26]
    reply = client.shop.command("collMod", "orders", validator={"n": {"$type": "int"}})
    assert reply["ok"] == 1.0
    assert [name for name in fast.names() if name in ("collMod", "create")] == ["collMod", "create", "collMod"]
    assert fast.received("create")[0]["create"] == "orders"
    assert fast.received("collMod")[-1]["validator"] == {"n": {"$type": "int"}}
    assert len(archive.received("collMod")) == 1


def test_drop_converges_and_names_an_unreachable_fast_tier(scripted):
    archive, fast, client = scripted
    # The archive has nothing (an earlier drop failed half-way): the fast tier drops.
    archive.failures["drop"] = [26]
    assert client.shop.command("drop", "orders")["ok"] == 1.0
    assert len(fast.received("drop")) == 1
    # The fast tier has nothing: the archive's reply stands.
    fast.failures["drop"] = [26]
    assert client.shop.command("drop", "orders")["ok"] == 1.0
    # Untiered: the archive alone.
    client.shop.command("drop", "plain")
    assert [command["drop"] for command in fast.received("drop")] == ["orders", "orders"]

    fast.close()
    with pytest.raises(pymongo.errors.OperationFailure) as raised:
        client.shop.command("drop", "orders")
    assert "drop on shop.orders was applied to the archive, but the fast tier failed" in str(raised.value)
    assert raised.value.code == 6  # HostUnreachable
