"""Two driver generations run one CRUD session each, against the store and
through the proxy, and check every answer themselves ("N passed, N failed"):
the MongoDB Java driver 3.6 (Debian's libmongodb-java: the generation of YCSB
0.17 and Spring Data 2.0, whose handshake still speaks OP_QUERY) runs
tests/java/CrudSession.java, and libmongoc 1.23 runs
tests/integration/clients/crud_client.c. Both cover CRUD, a cursor of 143
batches, duplicate _id and unique-key errors, bulk writes, count, aggregate and
distinct; the Java session also a $jsonSchema validator and filter. Through the proxy the collection is tiered, with the feeder, evictor
and warmer running, and the reads of the window are served by the fast tier."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, build_c_client
from tier_support import namespace_status, start_proxy, stop_leftovers, wait_feeder, wait_warm  # noqa: F401

JAVA_SESSION = REPO_ROOT / "tests" / "java" / "CrudSession.java"
JAVA_DRIVER_JAR = Path("/usr/share/java/mongo-java-driver.jar")
C_SESSION = REPO_ROOT / "tests" / "integration" / "clients" / "crud_client.c"
NS = "drivers.orders"


@pytest.fixture(scope="session")
def crud_client_binary(tmp_path_factory):
    return build_c_client(tmp_path_factory, C_SESSION)


def java_command():
    """java's source launcher on the session; fails (not skips) when the JDK or the
    driver is missing: scripts/install-deps.sh installs both."""
    java = shutil.which("java")
    assert java is not None, "java is missing: scripts/install-deps.sh installs default-jdk-headless"
    assert JAVA_DRIVER_JAR.exists(), "%s is missing: scripts/install-deps.sh installs libmongodb-java" % JAVA_DRIVER_JAR
    return [java, "-cp", str(JAVA_DRIVER_JAR), str(JAVA_SESSION)]


def run_session(command, uri, checks):
    database, collection = NS.split(".")
    completed = subprocess.run(command + [uri, database, collection], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=50,
                               env=dict(os.environ, MONGOC_DISABLE_SHM="1"))
    output = completed.stdout.decode("utf-8", "replace")
    print(output)
    assert completed.returncode == 0 and "not ok" not in output, output[-4000:]
    assert "%d passed, 0 failed" % checks in output, output[-4000:]


CHECKS = {"java": 20, "libmongoc": 20}  # each session's number of checks


def session_command(driver, crud_client_binary):
    return java_command() if driver == "java" else [str(crud_client_binary)]


@pytest.mark.parametrize("driver", sorted(CHECKS))
def test_driver_session_against_the_store(driver, store, crud_client_binary):
    run_session(session_command(driver, crud_client_binary), store.uri, CHECKS[driver])


@pytest.mark.parametrize("driver", sorted(CHECKS))
def test_driver_session_through_the_proxy(driver, replicated_tiers, crud_client_binary, tmp_path):
    """The driver connects (the Java driver's OP_QUERY buildinfo answered in
    OP_REPLY), its reads of the window are served by the fast tier, and the
    proxy closes none of its connections."""
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, ns=NS, max_age="1h", slack="1s",
                        evictor_period="500ms", warmer_period="500ms")
    try:
        wait_warm(proxy, NS)
        run_session(session_command(driver, crud_client_binary), proxy.uri, CHECKS[driver])
        routes = namespace_status(proxy, NS)["routes"]
        assert routes.get("fast", 0) > 0, routes
        wait_feeder(proxy, NS)
        assert "closing connection" not in proxy.log_text()
    finally:
        proxy.stop()
