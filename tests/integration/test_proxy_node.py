"""The Node.js driver's CRUD session (tests/node/crud.mjs) and the mongosh
sessions of the store's tests, run unchanged through `thermocline proxy` in front
of two stores: namespaces without a tiering policy pass to the archive, so every
check must pass as it does against one store."""
import pytest

from conftest import ProxyProcess, StoreProcess, proxy_config
from test_store_mongosh import test_mongosh_eval_round_trip, test_mongosh_scripted_session  # noqa: F401
from test_store_node import test_node_driver_crud_session  # noqa: F401


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers, one of its
    namespaces tiered (shop.orders, which these sessions do not use)."""
    archive = StoreProcess(tmp_path / "archive").start()
    fast = StoreProcess(tmp_path / "fast").start()
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(archive, fast, [("shop.orders", "createdAt", "30d", True)]))
    proxy.start()
    yield proxy
    proxy.stop()
    fast.stop()
    archive.stop()
