"""Collations through `thermocline proxy`: the store's collation tests again on
namespaces without a policy (the archive answers them, so every reply, error
and index spec must be the store's own)."""
import pytest

from conftest import proxy_over_two_stores
from test_store_collation import *  # noqa: F401,F403 - the same tests, through the proxy
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)
