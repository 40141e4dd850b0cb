"""The Node.js driver (7.x) runs a full CRUD session against the store:
tests/node/crud.mjs does the checking with node:assert and exits non-zero on
the first run with any failed check."""

import shutil
import subprocess

import pytest

from conftest import NODE_DIR

CRUD_SCRIPT = NODE_DIR / "crud.mjs"


def node_or_skip():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/install-deps.sh installs it)")
    if not (NODE_DIR / "node_modules" / "mongodb" / "package.json").exists():
        pytest.skip("tests/node/node_modules is missing: run `npm install` in tests/node "
                    "(scripts/install-deps.sh does)")
    return node


def test_node_driver_crud_session(store):
    node = node_or_skip()
    completed = subprocess.run([node, str(CRUD_SCRIPT), store.uri], cwd=str(NODE_DIR),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=50)
    output = completed.stdout.decode("utf-8", "replace")
    print(output)
    failures = [line for line in output.splitlines() if line.startswith("not ok")]
    assert completed.returncode == 0, "crud.mjs exited %d; failed checks: %s\n%s" % (
        completed.returncode, failures, output[-4000:])
    assert "not ok" not in output
    assert ", 0 failed" in output
