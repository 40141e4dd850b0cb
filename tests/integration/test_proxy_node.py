"""The Node.js driver's CRUD session (tests/node/crud.mjs) and the mongosh
sessions of the store's tests, run unchanged through `thermocline proxy` in front
of two stores: namespaces without a tiering policy pass to the archive, so every
check must pass as it does against one store."""
import pytest

from conftest import proxy_over_two_stores
from test_store_mongosh import test_mongosh_eval_round_trip, test_mongosh_scripted_session  # noqa: F401
from test_store_node import test_node_driver_crud_session  # noqa: F401


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers, one of its
    namespaces tiered (shop.orders, which these sessions do not use)."""
    yield from proxy_over_two_stores(tmp_path)
