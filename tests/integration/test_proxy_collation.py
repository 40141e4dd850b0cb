"""Collations through `thermocline proxy`: the store's collation tests again on
namespaces without a policy (the archive answers them, so every reply, error
and index spec must be the store's own), then a tiered namespace whose unique
index has a collation, compared with one MongoDB holding everything."""
import datetime

import pymongo
import pytest

from conftest import StoreProcess, proxy_over_two_stores
from test_store_collation import *  # noqa: F401,F403 - the same tests, through the proxy
from test_store_collation import CASE_INSENSITIVE
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, raw_documents, start_proxy, track, wait_feeder
from tier_support import utc_now


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)


# --- a tiered namespace: a collated unique key held only by the archive (issue 13) ---

def outcome(action):
    """A write's result, or its error as MongoDB reports it (without cluster times)."""
    try:
        result = action()
        return ("ok", getattr(result, "raw_result", None) or getattr(result, "inserted_id", None))
    except pymongo.errors.OperationFailure as error:
        details = {key: value for key, value in (error.details or {}).items()
                   if key not in ("$clusterTime", "operationTime")}
        return ("error", error.code, details)


def test_a_case_variant_of_a_collated_unique_key_only_the_archive_holds_is_refused(replicated_tiers, tmp_path):
    """A unique index under {locale: "en", strength: 2}: an insert or an update that
    sets a case variant of a key only an old archive document holds gets the E11000
    one MongoDB holding everything gives (the fault-in reads the archive under the
    index's collation), the variant is written nowhere, and a collated read of the
    window through the proxy answers as MongoDB does."""
    archive, fast = replicated_tiers
    oracle = track(StoreProcess(tmp_path / "oracle", replica_set="rs9").start())
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    now = utc_now()
    old = {"_id": 1, "email": "Old@Shop", "createdAt": now - datetime.timedelta(hours=2)}
    with client_for(proxy) as through, client_for(oracle) as alone, client_for(archive) as direct:
        for client in (through, alone):
            client.shop.orders.create_index("email", unique=True, collation=CASE_INSENSITIVE)
        direct.shop.orders.insert_one(old)  # only in the archive, as after eviction
        alone.shop.orders.insert_one(old)
        for client in (through, alone):
            client.shop.orders.insert_one({"_id": 2, "email": "new@shop", "createdAt": now})
        writes = [
            ("insert", lambda orders: orders.insert_one({"_id": 3, "email": "old@SHOP", "createdAt": now})),
            ("update", lambda orders: orders.update_one({"_id": 2}, {"$set": {"email": "OLD@shop"}})),
            ("another key", lambda orders: orders.insert_one({"_id": 4, "email": "four@shop", "createdAt": now})),
        ]
        for name, write in writes:
            got, want = outcome(lambda: write(through.shop.orders)), outcome(lambda: write(alone.shop.orders))
            assert got == want, "%s: through the proxy %r, MongoDB alone %r" % (name, got, want)
        window = {"createdAt": {"$gte": now - datetime.timedelta(minutes=5)}, "email": "NEW@SHOP"}
        assert list(through.shop.orders.find(window, collation=CASE_INSENSITIVE)) == \
            list(alone.shop.orders.find(window, collation=CASE_INSENSITIVE))
        assert sorted(through.shop.orders.find(), key=lambda d: d["_id"]) == \
            sorted(alone.shop.orders.find(), key=lambda d: d["_id"])
    wait_feeder(proxy)
    assert raw_documents(archive) == raw_documents(oracle)
    proxy.stop()
