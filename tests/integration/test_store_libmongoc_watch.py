"""libmongoc's own watch() helper against `thermocline store --replSet`: the C client
tests/integration/clients/watch_client.c (compiled here with cc and pkg-config, as a
user would build it) prints every event mongoc_change_stream_next() returns. Checks
the events' shapes, that the one client process resumes by itself across a server
restart (SIGTERM and kill -9) and sees every event exactly once, and that a resume
token fallen off the oplog ends the stream with 286 ChangeStreamHistoryLost, both
when given to watch() and when libmongoc's own automatic resume meets it."""

import os
import queue
import signal
import subprocess
import threading
import time

import pytest
from bson import json_util
from pymongo import MongoClient

from conftest import REPO_ROOT, SANITIZER_MARKERS, StoreProcess, build_c_client
from test_store_change_streams import roll_oplog_past

CLIENT_SOURCE = REPO_ROOT / "tests" / "integration" / "clients" / "watch_client.c"
REPLICA_SET = ["--replSet", "rs0"]
WATCH_OPTIONS = {"maxAwaitTimeMS": 200}
LINE_TIMEOUT_SECONDS = 15


@pytest.fixture(scope="session")
def watch_client_binary(tmp_path_factory):
    return build_c_client(tmp_path_factory, CLIENT_SOURCE)


class WatchClient:
    """One watch_client process; a thread collects its output lines so the test can
    wait for them without blocking on a pipe."""

    def __init__(self, binary, store, collection, count, options=None):
        # serverSelectionTryOnce=false: while the store restarts, the resume's server
        # selection keeps trying (a single-threaded client tries once by default).
        uri = store.uri + "&serverSelectionTryOnce=false&serverSelectionTimeoutMS=30000"
        options = dict(WATCH_OPTIONS, **(options or {}))
        environment = dict(os.environ, MONGOC_DISABLE_SHM="1")
        self.process = subprocess.Popen(
            [str(binary), uri, "shop", collection, str(count), json_util.dumps(options)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment)
        self.lines = []
        self._pending = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.process.stdout:
            self._pending.put(raw.decode("utf-8", "replace").rstrip("\n"))
        self._pending.put(None)

    def wait_for(self, predicate, what, timeout=LINE_TIMEOUT_SECONDS):
        """Reads lines until predicate(line) holds; returns that line."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "watch_client never printed %s; output:\n%s" % (what, self.output())
            try:
                line = self._pending.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, "watch_client exited before %s; output:\n%s" % (what, self.output())
            self.lines.append(line)
            if predicate(line):
                return line

    def wait_for_events(self, count):
        while len(self.events()) < count:
            self.wait_for(lambda line: line.startswith(("event ", "error ")),
                          "event %d" % (len(self.events()) + 1))

    def finish(self, timeout=LINE_TIMEOUT_SECONDS):
        """Waits for the process to exit and for its last lines; returns its status."""
        status = self.process.wait(timeout)
        self._reader.join(timeout)
        while not self._pending.empty():
            line = self._pending.get_nowait()
            if line is not None:
                self.lines.append(line)
        return status

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process.stdout.close()

    def tagged(self, tag):
        prefix = tag + " "
        return [json_util.loads(line[len(prefix):]) for line in self.lines if line.startswith(prefix)]

    def events(self):
        return self.tagged("event")

    def output(self):
        return "\n".join(self.lines)

    def assert_no_sanitizer_report(self):
        for marker in SANITIZER_MARKERS:
            assert marker not in self.output(), self.output()


def open_client(store):
    return MongoClient(store.uri, serverSelectionTimeoutMS=10000, connectTimeoutMS=5000,
                       socketTimeoutMS=20000)


def token_of(event):
    return event["_id"]["_data"]


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_libmongoc_watch_resumes_by_itself_after_a_restart(watch_client_binary, replica_store, how):
    watcher = WatchClient(watch_client_binary, replica_store, "orders", count=10)
    try:
        watcher.wait_for(lambda line: line == "ready", "ready")
        writer = open_client(replica_store)
        orders = writer.shop.orders
        orders.insert_one({"_id": 1, "a": 1, "tags": ["x", "y", "z"]})
        orders.update_one({"_id": 1}, {"$set": {"b.c": 2}, "$unset": {"a": ""}, "$pop": {"tags": 1}})
        orders.replace_one({"_id": 1}, {"x": "replaced"})
        orders.delete_one({"_id": 1})
        watcher.wait_for_events(4)
        # Two more, made just before the restart: libmongoc may read them from the
        # old cursor or from the resumed one, but only once.
        orders.insert_many([{"_id": 10}, {"_id": 11}])
        writer.close()
        if how == "sigterm":
            replica_store.stop()
        else:
            replica_store.kill9()
        replica_store.restart()
        writer = open_client(replica_store)
        for i in range(12, 16):
            writer.shop.orders.insert_one({"_id": i})
        writer.close()
        status = watcher.finish()
    finally:
        watcher.stop()
    print(watcher.output())
    assert status == 0, watcher.output()
    watcher.assert_no_sanitizer_report()

    events = watcher.events()
    assert [e["operationType"] for e in events] == ["insert", "update", "replace", "delete"] + ["insert"] * 6
    assert [e["documentKey"]["_id"] for e in events] == [1, 1, 1, 1, 10, 11, 12, 13, 14, 15]
    insert, update, replace, delete = events[:4]
    assert insert["fullDocument"] == {"_id": 1, "a": 1, "tags": ["x", "y", "z"]}
    assert insert["ns"] == {"db": "shop", "coll": "orders"}
    assert update["updateDescription"] == {"updatedFields": {"b": {"c": 2}, "tags": ["x", "y"]},
                                           "removedFields": ["a"], "truncatedArrays": []}
    assert "fullDocument" not in update
    assert replace["fullDocument"] == {"_id": 1, "x": "replaced"}
    assert "fullDocument" not in delete
    tokens = [token_of(e) for e in events]
    assert tokens == sorted(set(tokens)), "resume tokens repeat or go backwards: %r" % tokens
    clusters = [e["clusterTime"] for e in events]
    assert clusters == sorted(clusters)

    # The same process resumed: a second aggregate, asking for what follows the
    # last token it had (an event's or a postBatchResumeToken), never before it.
    stages = watcher.tagged("aggregate")
    assert len(stages) >= 2, watcher.output()
    assert stages[0] == {"$changeStream": {}}
    last_token = None
    for line in watcher.lines:
        if line.startswith("event "):
            last_token = token_of(json_util.loads(line[len("event "):]))
        elif line.startswith("aggregate ") and last_token is not None:
            resume = json_util.loads(line[len("aggregate "):])["$changeStream"]
            assert list(resume) == ["resumeAfter"], line
            assert resume["resumeAfter"]["_data"] >= last_token, (line, last_token)


def test_libmongoc_watch_gets_history_lost_for_a_token_off_the_oplog(watch_client_binary, tmp_path):
    store = StoreProcess(tmp_path, extra_args=REPLICA_SET + ["--oplog-size", "1"])
    store.start()
    stalled = WatchClient(watch_client_binary, store, "big", count=1000)
    refused = None
    try:
        stalled.wait_for(lambda line: line == "ready", "ready")
        writer = open_client(store)
        big = writer.shop.big
        big.insert_one({"_id": "first"})
        stalled.wait_for_events(1)
        token = stalled.events()[0]["_id"]
        # Stopped, the client keeps its cached token while the oplog rolls past it.
        stalled.process.send_signal(signal.SIGSTOP)
        assert roll_oplog_past(big, token).code == 286
        writer.close()

        # watch() given the lost token: the aggregate fails, the stream reports it.
        refused = WatchClient(watch_client_binary, store, "big", count=1,
                              options={"resumeAfter": token})
        assert refused.finish() == 1, refused.output()
        assert "ready" not in refused.lines
        errors = refused.tagged("error")
        assert len(errors) == 1, refused.output()
        assert errors[0]["code"] == 286
        assert errors[0]["reply"]["code"] == 286
        assert errors[0]["reply"]["codeName"] == "ChangeStreamHistoryLost"
        refused.assert_no_sanitizer_report()

        # The stalled client's automatic resume after a restart meets the same
        # history loss: libmongoc must report it rather than retry or skip ahead.
        store.stop()
        store.restart()
        stalled.process.send_signal(signal.SIGCONT)
        assert stalled.finish() == 1, stalled.output()
    finally:
        if stalled.process.poll() is None:
            stalled.process.send_signal(signal.SIGCONT)
        stalled.stop()
        if refused is not None:
            refused.stop()
        if store.is_alive():
            store.stop()
    print(stalled.output())
    stalled.assert_no_sanitizer_report()
    resumes = [stage["$changeStream"] for stage in stalled.tagged("aggregate")[1:]]
    assert len(resumes) == 1, stalled.output()
    assert resumes[0]["resumeAfter"]["_data"] >= token["_data"]
    errors = stalled.tagged("error")
    assert len(errors) == 1, stalled.output()
    assert errors[0]["code"] == 286
    assert errors[0]["reply"]["codeName"] == "ChangeStreamHistoryLost"
    # Whatever the stalled client read before the restart follows "first", in order.
    keys = [e["documentKey"]["_id"] for e in stalled.events()]
    assert keys == ["first"] + list(range(len(keys) - 1)), keys


def test_libmongoc_watch_round_trips_pre_and_post_images(watch_client_binary, replica_store):
    """collMod's changeStreamPreAndPostImages, then libmongoc's watch() with
    fullDocument and fullDocumentBeforeChange "required": every image comes back."""
    writer = open_client(replica_store)
    writer.shop.create_collection("imaged")
    writer.shop.command("collMod", "imaged", changeStreamPreAndPostImages={"enabled": True})
    watcher = WatchClient(watch_client_binary, replica_store, "imaged", count=4,
                          options={"fullDocument": "required", "fullDocumentBeforeChange": "required"})
    try:
        watcher.wait_for(lambda line: line == "ready", "ready")
        imaged = writer.shop.imaged
        imaged.insert_one({"_id": 1, "v": 1})
        imaged.update_one({"_id": 1}, {"$inc": {"v": 1}})
        imaged.replace_one({"_id": 1}, {"w": "replaced"})
        imaged.delete_one({"_id": 1})
        status = watcher.finish()
    finally:
        watcher.stop()
        writer.close()
    print(watcher.output())
    assert status == 0, watcher.output()
    watcher.assert_no_sanitizer_report()
    assert watcher.tagged("aggregate")[0] == {"$changeStream": {"fullDocument": "required",
                                                                "fullDocumentBeforeChange": "required"}}
    insert, update, replace, delete = watcher.events()
    assert insert["fullDocument"] == {"_id": 1, "v": 1} and "fullDocumentBeforeChange" not in insert
    assert (update["fullDocumentBeforeChange"], update["fullDocument"]) == ({"_id": 1, "v": 1}, {"_id": 1, "v": 2})
    assert (replace["fullDocumentBeforeChange"], replace["fullDocument"]) == (
        {"_id": 1, "v": 2}, {"_id": 1, "w": "replaced"})
    assert delete["fullDocumentBeforeChange"] == {"_id": 1, "w": "replaced"} and "fullDocument" not in delete
