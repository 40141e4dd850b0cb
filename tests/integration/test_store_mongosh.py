"""mongosh 2.x, as a person would use it, against the store: a --eval one-liner
and the scripted session tests/node/session.js, whose JSON result line is
checked here."""

import json
import os
import subprocess

import pytest

from conftest import NODE_DIR

MONGOSH = NODE_DIR / "node_modules" / ".bin" / "mongosh"
SESSION_SCRIPT = NODE_DIR / "session.js"
RESULT_PREFIX = "SESSION_RESULT "


def run_mongosh(arguments, home, timeout=50):
    if not MONGOSH.exists():
        pytest.skip("mongosh is missing: run `npm install` in tests/node "
                    "(scripts/install-deps.sh does)")
    # mongosh keeps its history and logs under $HOME: keep them in the test's
    # directory; and a test run sends no telemetry.
    environment = dict(os.environ, HOME=str(home), CI="true",
                       MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING="1")
    completed = subprocess.run([str(MONGOSH)] + arguments, env=environment,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=timeout)
    return (completed.returncode, completed.stdout.decode("utf-8", "replace"),
            completed.stderr.decode("utf-8", "replace"))


def test_mongosh_eval_round_trip(store, tmp_path):
    script = ("const r = db.evaltest.insertOne({_id: 1, word: 'hello'});"
              "const found = db.evaltest.findOne({_id: 1});"
              "print(JSON.stringify({ok: db.runCommand({ping: 1}).ok, "
              "acknowledged: r.acknowledged, word: found.word}));")
    code, stdout, stderr = run_mongosh([store.uri_for("shell"), "--quiet", "--eval", script],
                                       tmp_path)
    assert code == 0, "mongosh exited %d\nstdout:\n%s\nstderr:\n%s" % (code, stdout, stderr)
    last_line = stdout.strip().splitlines()[-1]
    assert json.loads(last_line) == {"ok": 1, "acknowledged": True, "word": "hello"}


def test_mongosh_scripted_session(store, tmp_path):
    code, stdout, stderr = run_mongosh([store.uri_for("shell"), "--quiet", str(SESSION_SCRIPT)],
                                       tmp_path)
    assert code == 0, "mongosh exited %d\nstdout:\n%s\nstderr:\n%s" % (code, stdout, stderr)
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert len(lines) == 1, "no %r line in:\n%s" % (RESULT_PREFIX, stdout)
    result = json.loads(lines[0][len(RESULT_PREFIX):])

    assert result["insertedCount"] == 30
    assert result["count"] == 30
    assert result["groupOne"] == [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]
    assert result["page"] == [{"name": "item10"}, {"name": "item11"}, {"name": "item12"}]
    assert result["updateMany"] == {"matched": 10, "modified": 10}
    assert result["afterUpdate"] == [101, 104, 107]
    assert result["upsertedId"] == "shell-upsert"
    assert result["deleted"] == 10
    assert result["remaining"] == 21
    assert result["aggregate"] == [
        {"_id": 1, "total": 1145, "count": 10},
        {"_id": 2, "total": 155, "count": 10},
    ]
    assert result["manyInOrder"] is True
    assert result["getMores"] >= 19  # 1,000 documents in batches of 50
    assert result["distinctTags"] == ["t0", "t1", "t2", "t3"]
    assert result["indexName"] == "n_1"
    assert result["indexes"] == ["_id_", "n_1"]
    assert result["duplicateCode"] == 11000
    assert result["explainUsesIndex"] == "n_1"
    assert result["schemaRefusal"] == {"code": 121, "rule": "maxLength"}
    assert result["schemaFiltered"] == 10  # group 1, moved past 100 by updateMany
    assert result["collections"] == ["items"]
    assert result["unknownCommandCode"] == 59
