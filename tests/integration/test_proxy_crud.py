"""The store's whole CRUD suite again, through `thermocline proxy`: a namespace
without a tiering policy passes straight to the archive, so every reply must be
exactly what the store alone gives (the proxy rewrites only cursor ids and
answers the handshake as a mongos)."""
import pytest

from conftest import proxy_over_two_stores
from test_store_crud import *  # noqa: F401,F403 - the same tests, through the proxy

# Checks of the server's own identity, which the proxy answers as a mongos.
PROXY_ANSWERS_ITSELF = {"test_ping_hello_and_build_info"}


@pytest.fixture
def store(tmp_path, request):
    """Overrides conftest's store: the proxy in front of two tiers. Tests that
    speak the wire protocol to `store.port` talk to the proxy."""
    if request.node.originalname in PROXY_ANSWERS_ITSELF:
        pytest.skip("the proxy answers hello as a mongos (tested in test_proxy.py)")
    yield from proxy_over_two_stores(tmp_path)
