"""Read preferences through `thermocline proxy`, as a mongos applies them to the
tier that answers: both tiers here are one-member replica sets (rs0 the archive,
rs1 the fast tier), so primaryPreferred, secondaryPreferred and nearest are served
by the tier's primary, and `secondary` fails with FailedToSatisfyReadPreference
(133) naming the set of the tier the read was routed to."""
import datetime

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from pymongo.read_preferences import Nearest, Primary, PrimaryPreferred, Secondary, SecondaryPreferred

from conftest import ProxyProcess, proxy_config

NOW = datetime.datetime.utcnow().replace(microsecond=0)
RECENT = {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}
QUIET = "feederEnabled: false\nevictorEnabled: false\nwarmerEnabled: false\n"


@pytest.fixture
def deployment(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    documents = [{"_id": i, "createdAt": NOW - datetime.timedelta(minutes=i)} for i in range(10)]
    with MongoClient(archive.uri) as client:
        client.shop.orders.insert_many(documents)
        client.shop.plain.insert_many([{"_id": i} for i in range(3)])
    with MongoClient(fast.uri) as client:
        client.shop.orders.insert_many(documents)
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30d", True)], QUIET)).start()
    client = MongoClient(proxy.uri)
    yield client
    client.close()
    proxy.stop()


def test_modes_the_primary_can_serve(deployment):
    for preference in (Primary(), PrimaryPreferred(), SecondaryPreferred(), Nearest(),
                       SecondaryPreferred(tag_sets=[{"dc": "tokyo"}]), PrimaryPreferred(tag_sets=[{"dc": "x"}]),
                       SecondaryPreferred(max_staleness=120), Nearest(max_staleness=90)):
        orders = deployment.shop.get_collection("orders", read_preference=preference)
        assert orders.count_documents(RECENT) == 10, preference          # the fast tier
        assert orders.count_documents({}) == 10, preference              # the archive
        assert orders.find_one({"_id": 3})["_id"] == 3, preference       # both
        plain = deployment.shop.get_collection("plain", read_preference=preference)
        assert sorted(plain.distinct("_id")) == [0, 1, 2], preference    # no policy: the archive


def test_secondary_fails_as_on_a_mongos(deployment):
    orders = deployment.shop.get_collection("orders", read_preference=Secondary())
    with pytest.raises(OperationFailure) as raised:
        orders.find_one({"customer": "x"})  # the archive, rs0
    assert raised.value.code == 133
    assert raised.value.details["codeName"] == "FailedToSatisfyReadPreference"
    assert raised.value.details["errmsg"] == (
        "Encountered non-retryable error during query :: caused by :: "
        "Could not find host matching read preference { mode: \"secondary\" } for set rs0")
    with pytest.raises(OperationFailure) as raised:
        orders.count_documents(RECENT)  # the fast tier, rs1: an aggregate
    assert raised.value.details["errmsg"] == (
        "Could not find host matching read preference { mode: \"secondary\" } for set rs1")
    # Tags no member carries: nearest cannot be met either.
    nearest = deployment.shop.get_collection("plain", read_preference=Nearest(tag_sets=[{"dc": "tokyo"}]))
    with pytest.raises(OperationFailure) as raised:
        nearest.find_one({})
    assert raised.value.code == 133
    assert ("{ mode: \"nearest\", tags: [ { dc: \"tokyo\" } ], hedge: { enabled: true } } for set rs0"
            in raised.value.details["errmsg"])


def test_bad_read_preferences_get_mongos_errors(deployment):
    db = deployment.shop
    cases = [
        ({"mode": "bogus"}, 2, "Could not parse $readPreference mode 'bogus'."),
        ({"mode": "secondaryPreferred", "maxStalenessSeconds": 30}, 160,
         "maxStalenessSeconds value can not be less than 90"),
        ({"mode": "primary", "tags": [{"dc": "ny"}]}, 2, "Only empty tags are allowed with primary read preference"),
        ({}, 4, "Missing expected field \"mode\""),
    ]
    for document, code, message in cases:
        with pytest.raises(OperationFailure) as raised:
            db.command({"find": "orders", "filter": {}, "$readPreference": document})
        assert raised.value.code == code, document
        assert raised.value.details["errmsg"].startswith(message), raised.value.details
