"""Document validation through `thermocline proxy`: the store's tests again on
namespaces without a policy (the archive answers, so every reply, errInfo
included, must be the store's)."""

import pytest

from conftest import proxy_over_two_stores
from test_store_validation import *  # noqa: F401,F403 - the same tests, through the proxy


@pytest.fixture
def store(tmp_path):
    """Overrides conftest's store: the proxy in front of two tiers."""
    yield from proxy_over_two_stores(tmp_path)


# The warning is the archive's log line, not the proxy's: the store's test covers it.
del test_validation_action_warn_logs_what_it_accepted  # noqa: F821
