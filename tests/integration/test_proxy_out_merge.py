"""$out and $merge through `thermocline proxy`: the store's tests again on
namespaces without a policy, so the archive answers and every reply must be
the store's."""
import pytest

from conftest import proxy_over_two_stores
from test_store_out_merge import *  # noqa: F401,F403 - the same tests, through the proxy
from test_store_out_merge import test_a_target_that_names_no_collection_is_refused
from test_store_out_merge import test_out_and_merge_are_refused_in_a_transaction

# The proxy answers a $out or $merge it cannot name with IllegalOperation 20
# before any store sees it (src/proxy's planner).
del test_a_target_that_names_no_collection_is_refused
del test_out_and_merge_are_refused_in_a_transaction  # a replica-set store's own, with no proxy in it


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)
