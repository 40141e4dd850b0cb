"""Views through `thermocline proxy`: the store's view tests again on namespaces
without a policy, so the archive answers and every reply must be the store's."""
import pytest

from conftest import proxy_over_two_stores
from test_store_views import *  # noqa: F401,F403 - the same tests, through the proxy
from test_store_views import test_view_ddl_in_a_change_stream_with_expanded_events, test_views_survive_a_restart

# A store's own restart and oplog, with no proxy in them.
del test_views_survive_a_restart, test_view_ddl_in_a_change_stream_with_expanded_events


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)
