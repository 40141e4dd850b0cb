"""Views through `thermocline proxy`: the store's view tests again on namespaces
without a policy, so the archive answers and every reply must be the store's."""
import pytest

from conftest import proxy_over_two_stores
from test_store_views import *  # noqa: F401,F403 - the same tests, through the proxy
from test_store_views import test_views_survive_a_restart

del test_views_survive_a_restart  # a store's own restart, with no proxy in it


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)
