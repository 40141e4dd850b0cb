"""$expr, `let`, $getField/$setField and hints by index name through `thermocline
proxy`: the store's tests again on a namespace without a policy (the archive
answers, so every reply must be the store's), then on a tiered namespace with the
workers running, where the planner sends a window read with $expr to the fast
tier and a write with $expr and let lands in the archive through the feeder."""
import datetime

import pytest
from bson import SON
from pymongo import MongoClient

from conftest import proxy_over_two_stores
from test_store_expr import *  # noqa: F401,F403 - the same tests, through the proxy
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, wait_feeder, wait_warm
from tier_support import utc_now


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)


def test_expr_on_a_tiered_namespace_routes_and_writes_as_any_filter(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    now = utc_now()
    recent = [{"_id": i, "createdAt": now - datetime.timedelta(minutes=i), "budget": 10, "spent": 5 + i}
              for i in range(10)]
    with MongoClient(archive.uri) as client:
        client.shop.orders.insert_many(recent + [{"_id": 100, "createdAt": now - datetime.timedelta(days=90),
                                                  "budget": 1, "spent": 2}])
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    wait_warm(proxy)
    since = now - datetime.timedelta(minutes=30)
    over_budget = {"$expr": {"$gt": ["$spent", "$budget"]}}
    with client_for(proxy) as client:
        window = dict(over_budget, createdAt={"$gte": since})
        explained = client.shop.command(SON([("explain", SON([("find", "orders"), ("filter", window)]))]))
        assert explained["thermocline"]["tier"] == "fast", explained["thermocline"]
        assert sorted(d["_id"] for d in client.shop.orders.find(window)) == [6, 7, 8, 9]
        assert sorted(d["_id"] for d in client.shop.orders.find(over_budget)) == [6, 7, 8, 9, 100]
        reply = client.shop.command(SON([
            ("update", "orders"),
            ("updates", [{"q": {"createdAt": {"$gte": since}, "$expr": {"$gt": ["$spent", "$$cap"]}},
                          "u": {"$set": {"flagged": True}}, "multi": True}]),
            ("let", {"cap": 12})]))
        assert reply["nModified"] == 2
    wait_feeder(proxy)
    with MongoClient(archive.uri) as client:
        assert sorted(d["_id"] for d in client.shop.orders.find({"flagged": True})) == [8, 9]
    proxy.stop()
