"""Document validation through `thermocline proxy`: the store's tests again on
namespaces without a policy (the archive answers, so every reply, errInfo
included, must be the store's), then a $jsonSchema filter on a tiered
namespace with the workers running."""
import datetime

import pytest
from bson import SON
from pymongo import MongoClient

from conftest import proxy_over_two_stores
from test_store_validation import *  # noqa: F401,F403 - the same tests, through the proxy
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, utc_now, wait_warm


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)


# The warning is the archive's log line, not the proxy's: the store's test covers it.
del test_validation_action_warn_logs_what_it_accepted  # noqa: F821


def test_json_schema_filter_on_a_tiered_namespace_answers_as_the_archive_alone(replicated_tiers, tmp_path):
    """A window read with $jsonSchema goes to the fast tier (the schema cannot
    widen the time bound) and returns what the archive alone returns."""
    archive, fast = replicated_tiers
    now = utc_now()
    recent = [{"_id": i, "createdAt": now - datetime.timedelta(minutes=i), "tags": ["t%d" % n for n in range(i % 4)]}
              for i in range(12)]
    with MongoClient(archive.uri) as client:
        client.shop.orders.insert_many(recent + [{"_id": 100, "createdAt": now - datetime.timedelta(days=90),
                                                  "tags": ["a", "b"]}])
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    wait_warm(proxy)
    schema = {"$jsonSchema": {"properties": {"tags": {"minItems": 2, "items": {"type": "string"}}}}}
    window = dict(schema, createdAt={"$gte": now - datetime.timedelta(minutes=30)})
    with client_for(proxy) as client, MongoClient(archive.uri) as alone:
        explained = client.shop.command(SON([("explain", SON([("find", "orders"), ("filter", window)]))]))
        assert explained["thermocline"]["tier"] == "fast", explained["thermocline"]
        for query in (window, schema):
            expected = sorted(d["_id"] for d in alone.shop.orders.find(query))
            assert sorted(d["_id"] for d in client.shop.orders.find(query)) == expected
        assert expected == [2, 3, 6, 7, 10, 11, 100]
    proxy.stop()
