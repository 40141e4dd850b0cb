"""Change streams through the Node.js driver (7.x): tests/node/change_stream.mjs
does the checking with node:assert against a store started with --replSet, and
its "resume" mode waits for events while this test restarts the server."""

import subprocess
import time

import pytest
from pymongo import MongoClient

from conftest import NODE_DIR, StoreProcess
from test_store_node import node_or_skip

SCRIPT = NODE_DIR / "change_stream.mjs"


@pytest.fixture
def replica_store(tmp_path):
    process = StoreProcess(tmp_path, extra_args=["--replSet", "rs0"])
    process.start()
    yield process
    process.stop()


def test_node_driver_change_streams(replica_store):
    node = node_or_skip()
    completed = subprocess.run([node, str(SCRIPT), replica_store.uri], cwd=str(NODE_DIR),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=28)
    output = completed.stdout.decode("utf-8", "replace")
    print(output)
    failures = [line for line in output.splitlines() if line.startswith("not ok")]
    assert completed.returncode == 0, "change_stream.mjs exited %d; failed: %s\n%s" % (
        completed.returncode, failures, output[-4000:])
    assert ", 0 failed" in output


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_node_driver_resumes_after_the_server_restarts(replica_store, how):
    node = node_or_skip()
    watcher = subprocess.Popen([node, str(SCRIPT), replica_store.uri, "resume"], cwd=str(NODE_DIR),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    try:
        for line in watcher.stdout:
            lines.append(line.decode("utf-8", "replace").rstrip())
            if lines[-1] == "ready":
                break
        assert lines and lines[-1] == "ready", "\n".join(lines)
        writer = MongoClient(replica_store.uri, serverSelectionTimeoutMS=10000)
        for i in range(4):
            writer.node_cs.resume.insert_one({"_id": i})
        writer.close()
        time.sleep(0.5)  # the watcher reads some of them before the restart
        if how == "sigterm":
            replica_store.stop()
        else:
            replica_store.kill9()
        replica_store.restart()
        writer = MongoClient(replica_store.uri, serverSelectionTimeoutMS=10000)
        for i in range(4, 10):
            writer.node_cs.resume.insert_one({"_id": i})
        writer.close()
        output, _ = watcher.communicate(timeout=25)
        lines.extend(output.decode("utf-8", "replace").splitlines())
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    print("\n".join(lines))
    assert watcher.returncode == 0, "\n".join(lines)
    assert "resumed ok" in lines
