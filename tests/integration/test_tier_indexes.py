"""Index parity and the collection's definition in the fast tier (issue 13, items
1, 2 and 6): the archive's indexes copied before coverage is valid and kept in
step, TTL indexes applied by the evictor, the time-field index required at start,
the validator copied, and collections that cannot be tiered refused at start.
Real processes: two replica-set stores, a proxy with every worker and maxAge of
seconds."""
import datetime
import subprocess
import time

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import ProxyProcess, find_free_port, thermocline_binary, wait_until
from fake_tier import FakeTier
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import (client_for, documents_by_id, namespace_status, tier_config, track, wait_feeder,
                          wait_warm)
from tier_support import utc_now, ago


ORDERS_INDEXES = [
    {"key": {"createdAt": 1}, "name": "createdAt_1"},
    {"key": {"customer": 1}, "name": "customer_1"},
    {"key": {"customer": 1, "createdAt": -1}, "name": "customer_createdAt"},
    {"key": {"orderNumber": 1}, "name": "orderNumber_1", "unique": True},
    {"key": {"status": 1}, "name": "status_open", "partialFilterExpression": {"status": "open"}},
    {"key": {"coupon": 1}, "name": "coupon_1", "sparse": True},
    {"key": {"expiresAt": 1}, "name": "expiresAt_ttl", "expireAfterSeconds": 3600},
]


def indexes_of(process, ns="shop.orders"):
    database, collection = ns.split(".", 1)
    with client_for(process) as client:
        if collection not in client[database].list_collection_names():
            return {}
        return {spec["name"]: spec for spec in client[database][collection].list_indexes()}


def load_orders(archive, count=200):
    with client_for(archive) as client:
        client.shop.command({"createIndexes": "orders", "indexes": ORDERS_INDEXES})
        client.shop.orders.insert_many([{"_id": i, "createdAt": ago(i % 5), "customer": "c%d" % (i % 20),
                                         "orderNumber": i, "status": "open" if i % 3 else "closed"}
                                        for i in range(count)])


def start(tmp_path, archive, fast, name="proxy", time_indexes=True, **config):
    config.setdefault("max_age", "30s")
    return track(ProxyProcess(tmp_path / name, tier_config(archive, fast, **config),
                              time_indexes=time_indexes)).start()


def plan_stages(plan):
    """Every stage name of an explain's winning plan, depth first."""
    stages = [plan.get("stage")]
    for child in [plan.get("inputStage")] + list(plan.get("inputStages", [])):
        if child:
            stages += plan_stages(child)
    return stages


def test_indexes_copied_before_coverage_is_valid(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    load_orders(archive)
    proxy = start(tmp_path, archive, fast)
    wait_warm(proxy)
    held = indexes_of(fast)
    for spec in ORDERS_INDEXES:
        copy = held[spec["name"]]
        assert copy["key"] == spec["key"]
        for option in ("unique", "sparse", "partialFilterExpression"):
            assert copy.get(option) == spec.get(option), (spec["name"], option, copy)
    # A TTL index is kept without its expiry: the evictor applies the archive's rule.
    assert "expireAfterSeconds" not in held["expiresAt_ttl"]
    assert "shop.orders: created index customer_1 on the fast tier" in proxy.log_text()
    # A secondary-field read inside the window goes to the fast tier and uses an index there.
    with client_for(proxy) as client:
        explain = client.shop.command({"explain": {"find": "orders", "filter": {
            "customer": "c3", "createdAt": {"$gte": ago(2)}}}, "verbosity": "queryPlanner"})
    assert explain["serverInfo"]["port"] == fast.port, explain
    stages = plan_stages(explain["queryPlanner"]["winningPlan"])
    assert "IXSCAN" in stages and "COLLSCAN" not in stages, explain["queryPlanner"]


def test_archive_index_changes_reach_the_fast_tier(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    load_orders(archive, count=20)
    proxy = start(tmp_path, archive, fast, namespace_keys={"indexSyncPeriod": "500ms"})
    wait_warm(proxy)
    with client_for(archive) as client:
        client.shop.orders.create_index([("region", 1)], name="region_1")
    with client_for(fast) as client:
        client.shop.orders.create_index([("stray", 1)], name="stray_1")  # the archive has no such index
    assert wait_until(lambda: "region_1" in indexes_of(fast) and "stray_1" not in indexes_of(fast), 10, 0.2), \
        indexes_of(fast)
    with client_for(archive) as client:
        client.shop.orders.drop_index("region_1")
    assert wait_until(lambda: "region_1" not in indexes_of(fast), 10, 0.2), indexes_of(fast)
    log = proxy.log_text()
    assert "created index region_1 on the fast tier" in log
    assert "dropped index region_1 from the fast tier" in log
    assert "dropped index stray_1 from the fast tier" in log
    # What thermocline needs stays: _id_ and the time-field index.
    assert {"_id_", "createdAt_1"} <= set(indexes_of(fast))


def test_a_ttl_never_reaches_the_fast_tier(replicated_tiers, tmp_path):
    """createIndexes through the proxy gives both tiers the index but the fast tier
    no expireAfterSeconds (its TTL monitor would delete on its own clock, and the
    feeder would replay those deletes); one made on the fast tier directly is
    rebuilt without it by the index sync; the evictor gets the archive's rule."""
    archive, fast = replicated_tiers
    load_orders(archive, count=20)
    proxy = start(tmp_path, archive, fast, namespace_keys={"indexSyncPeriod": "500ms"})
    wait_warm(proxy)
    with client_for(proxy) as client:
        reply = client.shop.command({"createIndexes": "orders", "indexes": [
            {"key": {"shippedAt": 1}, "name": "shippedAt_ttl", "expireAfterSeconds": 60},
            {"key": {"region": 1}, "name": "region_1"}]})
        assert reply["ok"] == 1.0
    assert indexes_of(archive)["shippedAt_ttl"]["expireAfterSeconds"] == 60
    held = indexes_of(fast)
    assert "expireAfterSeconds" not in held["shippedAt_ttl"] and "region_1" in held
    with client_for(fast) as client:
        client.shop.orders.drop_index("region_1")
        client.shop.orders.create_index([("region", 1)], name="region_1", expireAfterSeconds=5)
    assert wait_until(lambda: "region_1" in indexes_of(fast) and
                      "expireAfterSeconds" not in indexes_of(fast)["region_1"], 10, 0.2), indexes_of(fast)
    with client_for(fast) as client:
        rules = list(client.thermocline.indexes.find())
    assert any("shippedAt" in str(rule) and "60" in str(rule) for rule in rules), rules


def test_fast_tier_gets_a_time_field_index_of_its_own(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()})
    proxy = start(tmp_path, archive, fast, time_indexes=False, namespace_keys={"requireTimeFieldIndex": "false"})
    wait_warm(proxy)
    assert "createdAt_1" in indexes_of(fast)
    assert "createdAt_1" not in indexes_of(archive)
    assert "requireTimeFieldIndex: false: starting anyway" in proxy.log_text()


def test_ttl_expired_copies_leave_the_fast_tier_not_the_archive(replicated_tiers, tmp_path):
    """The fast tier keeps no TTL monitor of its own: the evictor removes a copy
    whose TTL date has expired under the archive's index, once the archive holds
    its version, and that delete is never replayed: the archive's own TTL decides
    there, as it would without thermocline."""
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.command({"createIndexes": "orders", "indexes": [
            {"key": {"createdAt": 1}, "name": "createdAt_1"},
            {"key": {"expiresAt": 1}, "name": "expiresAt_ttl", "expireAfterSeconds": 2}]})
    proxy = start(tmp_path, archive, fast, max_age="1h", slack="1s")
    wait_warm(proxy)
    with client_for(proxy) as client:
        client.shop.orders.insert_many([
            {"_id": "expiring", "createdAt": utc_now(), "expiresAt": utc_now()},
            {"_id": "kept", "createdAt": utc_now(), "expiresAt": utc_now() + datetime.timedelta(hours=1)},
            {"_id": "no-date", "createdAt": utc_now(), "expiresAt": "tomorrow"}])
    wait_feeder(proxy)
    assert wait_until(lambda: "expiring" not in documents_by_id(fast), 15, 0.2), documents_by_id(fast)
    time.sleep(1)
    assert set(documents_by_id(fast)) == {"kept", "no-date"}
    assert set(documents_by_id(archive)) == {"expiring", "kept", "no-date"}  # I3: not replayed
    assert namespace_status(proxy)["feeder"].get("stopped") in (None, False)


def test_update_of_a_document_the_archive_expired_is_not_lost(replicated_tiers, tmp_path):
    """I1 against the archive's TTL: it reads the archive's older version, so it
    may delete a document whose fast-tier version a client has just moved on; the
    feeder's replay of that update writes the current version back."""
    archive, fast = replicated_tiers
    proxy = start(tmp_path, archive, fast, max_age="1h", slack="1s", top={"evictorEnabled": "false"})
    wait_warm(proxy)
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": 7, "createdAt": utc_now(), "expiresAt": ago(10), "n": 1})
        wait_feeder(proxy)
        with client_for(archive) as archive_client:  # the archive's TTL monitor, at the worst moment
            archive_client.shop.orders.delete_one({"_id": 7})
        client.shop.orders.update_one({"_id": 7}, {"$set": {"expiresAt": utc_now(), "n": 2}})
    wait_feeder(proxy)
    assert wait_until(lambda: documents_by_id(archive).get(7) == documents_by_id(fast).get(7), 10, 0.2)
    assert documents_by_id(archive)[7]["n"] == 2
    assert "written back" in proxy.log_text()


def run_to_exit(arguments, timeout=30):
    finished = subprocess.run([str(thermocline_binary())] + arguments, capture_output=True, text=True,
                              timeout=timeout)
    return finished.returncode, finished.stderr


def test_start_refused_without_a_time_field_index(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now()})
    config = tmp_path / "proxy.yaml"
    config.write_text(tier_config(archive, fast).replace("{port}", str(find_free_port())))
    for subcommand in ("proxy", "warmer", "feeder"):
        status, stderr = run_to_exit([subcommand, "--config", str(config)])
        assert status == 1, (subcommand, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and "shop.orders has no index whose first key is its timeField createdAt" in lines[0]
        assert ('db.getSiblingDB("shop").runCommand({createIndexes: "orders", indexes: '
                '[{key: {createdAt: 1}, name: "createdAt_1"}]})') in lines[0]
        assert "requireTimeFieldIndex: false" in lines[0]
    # Allowed with the config key, loudly.
    proxy = track(ProxyProcess(tmp_path / "allowed", tier_config(
        archive, fast, namespace_keys={"requireTimeFieldIndex": "false"}), time_indexes=False)).start()
    assert "requireTimeFieldIndex: false: starting anyway" in proxy.log_text()


class DefinitionArchive(FakeTier):
    """An archive whose listCollections shows one collection of a given kind."""

    def __init__(self, entry):
        super().__init__(key_id=7)
        self.entry = entry

    def _success(self, name, command):
        if name == "listCollections":
            return {"cursor": {"firstBatch": [self.entry], "id": 0, "ns": "shop.$cmd.listCollections"}, "ok": 1.0}
        if name == "listIndexes":
            return {"cursor": {"firstBatch": [{"v": 2, "key": {"_id": 1}, "name": "_id_"},
                                              {"v": 2, "key": {"createdAt": 1}, "name": "createdAt_1"}],
                               "id": 0, "ns": "shop.orders"}, "ok": 1.0}
        return super()._success(name, command)


@pytest.mark.parametrize("entry,reason", [
    ({"name": "orders", "type": "collection", "options": {"capped": True, "size": 4096}}, "it is a capped collection"),
    ({"name": "orders", "type": "timeseries", "options": {"timeseries": {"timeField": "createdAt"}}},
     "it is a time-series collection"),
    ({"name": "orders", "type": "collection", "options": {"clusteredIndex": {"key": {"_id": 1}, "unique": True}}},
     "it is a clustered collection"),
])
def test_untierable_collections_refused_at_start(tmp_path, entry, reason):
    archive = DefinitionArchive(entry)
    try:
        config = tmp_path / "proxy.yaml"
        config.write_text("listen: 127.0.0.1:%d\narchive: %s\nfast: mongodb://127.0.0.1:1/\nnamespaces:\n"
                          "  - ns: shop.orders\n    timeField: createdAt\n    maxAge: 30s\n" % (find_free_port(), archive.uri))
        status, stderr = run_to_exit(["proxy", "--config", str(config)])
        assert status == 1, stderr
        assert stderr.startswith("thermocline proxy: shop.orders cannot be tiered: " + reason), stderr
        assert len(stderr.strip().splitlines()) == 1
    finally:
        archive.close()


ORDER_RULES = {"status": {"$in": ["open", "closed"]}}


def collection_options(process, ns="shop.orders"):
    database, collection = ns.split(".", 1)
    with client_for(process) as client:
        return next(client[database].list_collections(filter={"name": collection}))["options"]


def test_validator_copied_to_the_fast_tier(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    now = utc_now()
    with client_for(archive) as client:
        client.shop.command({"create": "orders", "validator": ORDER_RULES, "validationLevel": "moderate"})
        client.shop.orders.create_index([("createdAt", 1)], name="createdAt_1")
        client.shop.orders.insert_many([{"_id": i, "createdAt": now, "status": "open"} for i in range(5)])
        # A legacy document the validator came after: the warmer must still copy it.
        client.shop.orders.insert_one({"_id": "legacy", "createdAt": now, "status": "lost"},
                                      bypass_document_validation=True)
    proxy = start(tmp_path, archive, fast, namespace_keys={"indexSyncPeriod": "500ms"})
    wait_warm(proxy)
    options = collection_options(fast)
    assert (options.get("validator"), options.get("validationLevel")) == (ORDER_RULES, "moderate")
    assert documents_by_id(fast)["legacy"]["status"] == "lost"
    with client_for(proxy) as client:
        # The fast tier holds the archive's validator: refused at once, with the archive's errInfo.
        with pytest.raises(OperationFailure) as refused:
            client.shop.orders.insert_one({"_id": 10, "createdAt": utc_now(), "status": "bogus"})
        assert refused.value.code == 121
        assert refused.value.details["errInfo"]["failingDocumentId"] == 10
        with pytest.raises(OperationFailure) as refused:
            client.shop.orders.update_one({"_id": 1}, {"$set": {"status": "bogus"}})
        assert refused.value.code == 121
        # moderate: the legacy document may still be updated; valid writes flow to the archive.
        client.shop.orders.update_one({"_id": "legacy"}, {"$set": {"note": "kept"}})
        client.shop.orders.insert_one({"_id": 11, "createdAt": utc_now(), "status": "closed"})
    wait_feeder(proxy)
    archived = documents_by_id(archive)
    assert 10 not in archived and archived[11]["status"] == "closed" and archived["legacy"]["note"] == "kept"
    assert archived[1]["status"] == "open"
    # A validator changed on the archive directly reaches the fast tier with the index sync.
    stricter = {"status": {"$in": ["open"]}}
    with client_for(archive) as client:
        client.shop.command({"collMod": "orders", "validator": stricter, "validationLevel": "strict"})
    assert wait_until(lambda: collection_options(fast).get("validator") == stricter, 10, 0.2), \
        collection_options(fast)
    assert collection_options(fast).get("validationLevel") == "strict"
    with client_for(proxy) as client:
        with pytest.raises(OperationFailure) as refused:
            client.shop.orders.insert_one({"_id": 12, "createdAt": utc_now(), "status": "closed"})
        assert refused.value.code == 121
    # Logged when copied at start and when it changed.
    assert proxy.log_text().count("the fast tier's collection has the archive's options now") >= 2


CASE_INSENSITIVE = {"locale": "en", "strength": 2}


def test_a_default_collation_reaches_the_fast_tier(replicated_tiers, tmp_path):
    """A collection created with a default collation: the fast tier's copy is
    created with it, so a query with no collation of its own matches strings as
    the archive matches them (the archive alone is the oracle)."""
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.command({"create": "orders", "collation": CASE_INSENSITIVE})
        client.shop.orders.create_index([("createdAt", 1)], name="createdAt_1")
        client.shop.orders.insert_many([{"_id": i, "createdAt": utc_now(), "name": name}
                                        for i, name in enumerate(["Ann", "ann", "ANN", "Bob", "bob"])])
        expected = sorted(d["_id"] for d in client.shop.orders.find({"name": "aNN"}))
        assert expected == [0, 1, 2]
    proxy = start(tmp_path, archive, fast, namespace_keys={"indexSyncPeriod": "500ms"})
    wait_warm(proxy)
    held = collection_options(fast).get("collation", {})
    assert (held.get("locale"), held.get("strength")) == ("en", 2), collection_options(fast)
    with client_for(proxy) as client:
        client.shop.orders.insert_one({"_id": 5, "createdAt": utc_now(), "name": "ANn"})
        found = sorted(d["_id"] for d in client.shop.orders.find({"name": "aNN", "createdAt": {"$gte": ago(20)}}))
        assert found == expected + [5]
        explained = client.shop.command("explain", {"find": "orders", "filter": {"name": "aNN", "createdAt": {
            "$gte": ago(20)}}}, verbosity="queryPlanner")
        assert explained["thermocline"]["tier"] == "fast", explained["thermocline"]
    assert "another default collation" not in proxy.log_text()
    proxy.stop()


def test_a_fast_collection_without_the_archives_default_collation_is_an_error(replicated_tiers, tmp_path):
    """No command changes a collection's default collation: a fast tier whose
    collection was created without it is logged once as an error naming the way
    out, and `thermocline check` reports it unfit."""
    archive, fast = replicated_tiers
    with client_for(archive) as client:
        client.shop.command({"create": "orders", "collation": CASE_INSENSITIVE})
        client.shop.orders.create_index([("createdAt", 1)], name="createdAt_1")
        client.shop.orders.insert_one({"_id": 1, "createdAt": utc_now(), "name": "Ann"})
    with client_for(fast) as client:
        client.shop.command({"create": "orders"})
    config = tmp_path / "check.yaml"
    config.write_text(tier_config(archive, fast, max_age="30s").replace("{port}", str(find_free_port())))
    checked = subprocess.run([thermocline_binary(), "check", "--config", str(config)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "has another default collation than the archive's collection" in checked.stdout, checked.stdout
    proxy = start(tmp_path, archive, fast, namespace_keys={"indexSyncPeriod": "500ms"})
    assert wait_until(lambda: "another default collation than the archive's" in proxy.log_text(), 20, 0.2), \
        proxy.log_tail()
    time.sleep(1.2)  # two more syncs: still one line
    assert proxy.log_text().count("another default collation than the archive's") == 1
    proxy.stop()

class CollatedArchive(DefinitionArchive):
    """A mongod-like archive (a script: the store states its own ICU version)
    whose collated unique index carries mongod's collation version, 57.1."""

    def _success(self, name, command):
        if name == "listIndexes":
            return {"cursor": {"firstBatch": [
                {"v": 2, "key": {"_id": 1}, "name": "_id_"},
                {"v": 2, "key": {"createdAt": 1}, "name": "createdAt_1"},
                {"v": 2, "key": {"email": 1}, "name": "email_ci", "unique": True,
                 "collation": {"locale": "en", "caseLevel": False, "caseFirst": "off", "strength": 2,
                               "numericOrdering": False, "alternate": "non-ignorable", "maxVariable": "punct",
                               "normalization": False, "backwards": False, "version": "57.1"}}],
                "id": 0, "ns": "shop.orders"}, "ok": 1.0}
        return super()._success(name, command)


def test_a_collated_index_reaches_the_fast_tier_with_the_fast_tiers_own_icu_version(replicated_tiers, tmp_path):
    """mongod states its vendored ICU's version (57.1), the store its own (72.1 on
    Debian 12), and each refuses the other's: the sync copies the collation
    without its version, as it leaves out v, and the copy still refuses a case
    variant of a key."""
    _, fast = replicated_tiers
    archive = CollatedArchive({"name": "orders", "type": "collection", "options": {}})
    try:
        proxy = start(tmp_path, archive, fast, namespace_keys={"indexSyncPeriod": "500ms"})
        assert wait_until(lambda: "email_ci" in indexes_of(fast), 20, 0.2), (indexes_of(fast), proxy.log_tail())
        held = indexes_of(fast)["email_ci"]
        assert held["collation"]["locale"] == "en" and held["collation"]["strength"] == 2, held
        assert held["collation"]["version"] != "57.1", held
        with client_for(fast) as client:
            client.shop.orders.insert_one({"_id": "ann-1", "email": "Ann@example.com"})
            with pytest.raises(Exception) as raised:
                client.shop.orders.insert_one({"_id": "ann-2", "email": "ann@EXAMPLE.com"})
            assert "E11000" in str(raised.value)
        proxy.stop()
    finally:
        archive.close()
