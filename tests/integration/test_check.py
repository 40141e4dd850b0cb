"""`thermocline check --config FILE`, the preflight before traffic is switched
(issue 17): it passes on a pair fit for tiering and reports each deliberately
broken setup with one line saying what to do. Both tiers are `thermocline
store` processes here; the check asks them only what it would ask mongod
(hello, buildInfo, connectionStatus with showPrivileges, listCollections,
listIndexes, count, collStats, serverStatus with its oplog section)."""

import datetime
import subprocess
import time

import pytest
from bson.timestamp import Timestamp
from pymongo import MongoClient

from conftest import StoreProcess, find_free_port, thermocline_binary
from tier_support import track, stop_leftovers  # noqa: F401 (autouse fixture)

ROOT_PASSWORD = "root-pw"


def start_store(work_dir, replica_set="rs0", extra_args=()):
    return track(StoreProcess(work_dir, replica_set=replica_set, extra_args=extra_args)).start()


def direct(store, user=None):
    credentials = "%s:%s@" % user if user else ""
    return MongoClient("mongodb://%s127.0.0.1:%d/?directConnection=true" % (credentials, store.port),
                       serverSelectionTimeoutMS=10000)


def tier_uri(store, replica_set, user=None):
    credentials = "%s:%s@" % user if user else ""
    query = "?replicaSet=%s" % replica_set if replica_set else ""
    return "mongodb://%s127.0.0.1:%d/%s" % (credentials, store.port, query)


def write_config(tmp_path, archive_uri, fast_uri, max_age="1h", namespace_keys=None):
    lines = ["listen: 127.0.0.1:%d" % find_free_port(),
             "archive: %s" % archive_uri,
             "fast: %s" % fast_uri,
             "namespaces:",
             "  - ns: shop.orders",
             "    timeField: createdAt",
             "    maxAge: %s" % max_age]
    for key, value in (namespace_keys or {}).items():
        lines.append("    %s: %s" % (key, value))
    path = tmp_path / "check.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_check(config_path, *extra):
    result = subprocess.run([str(thermocline_binary()), "check", "--config", str(config_path)] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    stdout = result.stdout.decode()
    assert "Sanitizer" not in result.stderr.decode(), result.stderr.decode()  # ASan, LeakSanitizer
    assert "runtime error:" not in result.stderr.decode(), result.stderr.decode()
    return result.returncode, stdout.splitlines()


def findings(lines, severity):
    return [line for line in lines if line.startswith(severity + ": ")]


def single_error(config_path):
    """Runs the check, which must refuse the pair with exactly one error: that
    line, and every line printed."""
    status, lines = run_check(config_path)
    assert status == 1, lines
    errors = findings(lines, "error")
    assert len(errors) == 1, lines
    return errors[0], lines


def load_orders(store, recent=200, pad=100, time_index=True, undated=()):
    """shop.orders in store: `recent` documents of the last half hour, each with
    `pad` bytes of padding, and the undated documents given."""
    now = datetime.datetime.now(datetime.timezone.utc)
    with direct(store) as client:
        orders = client.shop.orders
        if time_index:
            orders.create_index("createdAt", name="createdAt_1")
        orders.insert_many([{"createdAt": now - datetime.timedelta(seconds=i % 1800), "pad": "x" * pad}
                            for i in range(recent)])
        if undated:
            orders.insert_many(list(undated))


@pytest.fixture
def pair(tmp_path):
    archive = start_store(tmp_path / "archive", "rs0")
    fast = start_store(tmp_path / "fast", "rs1")
    yield archive, fast
    fast.stop()
    archive.stop()


def test_check_passes_on_a_ready_pair(tmp_path, pair):
    archive, fast = pair
    load_orders(archive, recent=300)
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    status, lines = run_check(config)
    assert status == 0, lines
    assert lines == ["thermocline check: ready (0 warning(s))"]
    # --verbose shows what was measured: the window counted from the archive.
    status, lines = run_check(config, "--verbose")
    assert status == 0, lines
    assert any("shop.orders: 300 documents newer than maxAge" in line for line in findings(lines, "note")), lines
    assert any("both tiers run MongoDB 6.0" in line for line in lines), lines


def test_check_reports_a_missing_time_index(tmp_path, pair):
    archive, fast = pair
    load_orders(archive, time_index=False)
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    error, lines = single_error(config)
    assert "shop.orders has no index whose first key is its timeField createdAt" in error
    assert 'createIndexes: "orders", indexes: [{key: {createdAt: 1}, name: "createdAt_1"}]' in error
    assert lines[-1] == "thermocline check: not ready: 1 error(s), 0 warning(s)"
    # requireTimeFieldIndex: false makes it a warning, as at the proxy's start.
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"),
                          namespace_keys={"requireTimeFieldIndex": "false"})
    status, lines = run_check(config)
    assert status == 0, lines
    assert any("has no index whose first key" in line for line in findings(lines, "warning")), lines


def test_check_reports_a_tier_that_is_not_a_replica_set(tmp_path):
    archive = start_store(tmp_path / "archive", replica_set=None)
    fast = start_store(tmp_path / "fast", "rs1")
    load_orders(archive)
    config = write_config(tmp_path, tier_uri(archive, None), tier_uri(fast, "rs1"))
    error, lines = single_error(config)
    assert error.startswith("error: archive: ") and "is not a replica set member" in error, lines
    assert "--replSet" in error
    fast.stop()
    archive.stop()


def test_check_reports_an_unreachable_tier(tmp_path, pair):
    archive, fast = pair
    load_orders(archive)
    down = find_free_port()
    config = write_config(tmp_path, tier_uri(archive, "rs0"), "mongodb://127.0.0.1:%d/?replicaSet=rs1" % down)
    error, lines = single_error(config)
    assert error.startswith("error: fast: cannot reach mongodb://127.0.0.1:%d/" % down), lines
    # The archive is still checked: its collection passes.
    assert lines[-1] == "thermocline check: not ready: 1 error(s), 0 warning(s)"


def auth_store(work_dir, replica_set):
    """A store with --auth, its root user created through the localhost exception."""
    store = start_store(work_dir, replica_set, extra_args=["--auth"])
    with direct(store) as client:
        client.admin.command("createUser", "root", pwd=ROOT_PASSWORD, roles=["root"])
    return store


def test_check_reports_missing_privileges(tmp_path, pair):
    archive, _ = pair
    load_orders(archive)
    fast = auth_store(tmp_path / "fast-auth", "rs2")
    with direct(fast, ("root", ROOT_PASSWORD)) as root:
        root.admin.command("createUser", "clerk", pwd="clerk-pw", roles=[{"role": "readWrite", "db": "shop"}])
        root.admin.command("createUser", "proxy", pwd="proxy-pw",
                           roles=[{"role": "readWrite", "db": "shop"}, {"role": "dbAdmin", "db": "shop"},
                                  {"role": "readWrite", "db": "thermocline"},
                                  {"role": "readAnyDatabase", "db": "admin"},
                                  {"role": "clusterMonitor", "db": "admin"}])
    # A user with readWrite on shop only: short of what the workers do.
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs2", ("clerk", "clerk-pw")))
    status, lines = run_check(config)
    assert status == 1, lines
    errors = findings(lines, "error")
    assert len(errors) == 3, lines
    assert any("clerk@admin lacks bypassDocumentValidation, collMod on shop.orders" in line for line in errors)
    assert any("lacks find, insert, update, remove, createIndex on the collections of the thermocline database" in line
               for line in errors), lines
    assert any("lacks find, changeStream on every database" in line and "readAnyDatabase" in line
               for line in errors), lines
    assert any("serverStatus refused (not authorized" in line for line in findings(lines, "warning")), lines
    # The roles the README names hold all of it.
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs2", ("proxy", "proxy-pw")))
    status, lines = run_check(config)
    assert status == 0, lines
    assert lines == ["thermocline check: ready (0 warning(s))"]
    # No user at all, against a tier that enforces access control.
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs2"))
    status, lines = run_check(config)
    assert status == 1, lines
    assert any("enforces access control and its URI names no user" in line for line in findings(lines, "error"))
    fast.stop()


def test_check_reports_a_window_larger_than_the_fast_cache(tmp_path):
    archive = start_store(tmp_path / "archive", "rs0")
    fast = start_store(tmp_path / "fast", "rs1", extra_args=["--cache-size", "1MB"])
    load_orders(archive, recent=1500, pad=2000)  # ~3 MB of recent documents
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    error, lines = single_error(config)
    assert "shop.orders 1500 documents" in error
    assert "more than the fast tier's WiredTiger cache of 1.0 MB" in error, lines
    # A maxAge that leaves most of them out of the window fits.
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"), max_age="10s")
    status, lines = run_check(config)
    assert status == 0, lines
    fast.stop()
    archive.stop()


def test_check_warns_of_documents_without_a_date(tmp_path, pair):
    archive, fast = pair
    load_orders(archive, undated=[{"status": "draft"}, {"createdAt": "2024-05-01"}, {"createdAt": None}])
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    status, lines = run_check(config)
    assert status == 0, lines  # a warning: those documents stay in the archive, which answers their reads
    warnings = findings(lines, "warning")
    assert len(warnings) == 1, lines
    assert "shop.orders: 3 documents have no date in createdAt" in warnings[0]


def test_check_warns_of_what_the_index_sync_would_change(tmp_path, pair):
    archive, fast = pair
    load_orders(archive)
    with direct(archive) as client:
        client.shop.orders.create_index("customer", name="customer_1")
    with direct(fast) as client:
        client.shop.orders.create_index("note", name="note_1")
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    status, lines = run_check(config)
    assert status == 0, lines
    warnings = findings(lines, "warning")
    assert len(warnings) == 1, lines
    assert "will drop [note_1], create [createdAt_1, customer_1]" in warnings[0], lines


def test_check_reports_a_feeder_checkpoint_older_than_the_oplog(tmp_path, pair):
    archive, fast = pair
    load_orders(archive)
    with direct(fast) as client:
        # A feeder that stopped long before the fast tier's oldest oplog entry.
        client.thermocline.feeder.insert_one({"_id": "stream", "appliedTime": Timestamp(1000000000, 1)})
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    error, lines = single_error(config)
    assert "the feeder's checkpoint" in error and "older than the fast tier's oldest oplog entry" in error


def test_check_warns_of_a_feeder_behind_by_half_the_oplog_window(tmp_path, pair):
    archive, fast = pair
    load_orders(archive)
    with direct(fast) as client:
        earliest = client.admin.command("serverStatus", oplog=1)["oplog"]["earliestOptime"]
        time.sleep(2.2)
        client.shop.other.insert_one({"moves": "the newest oplog entry on"})
        # A checkpoint at the oldest entry still held: resumable, but a whole window behind.
        client.thermocline.feeder.insert_one({"_id": "stream", "appliedTime": earliest})
    config = write_config(tmp_path, tier_uri(archive, "rs0"), tier_uri(fast, "rs1"))
    status, lines = run_check(config)
    assert status == 0, lines
    warnings = findings(lines, "warning")
    assert len(warnings) == 1, lines
    assert "the feeder is" in warnings[0] and "s behind and the fast tier's oplog holds" in warnings[0], lines


def test_check_bad_usage(tmp_path):
    binary = str(thermocline_binary())
    for arguments in ([], ["--config"], ["--nope"], ["--config", "x.yaml", "extra"]):
        result = subprocess.run([binary, "check"] + arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                timeout=30)
        assert result.returncode == 2, arguments
        assert result.stderr.decode().startswith("thermocline check: "), result.stderr
    result = subprocess.run([binary, "check", "--help"], stdout=subprocess.PIPE, timeout=30)
    assert result.returncode == 0 and b"warning (exit 0)" in result.stdout
    result = subprocess.run([binary, "check", "--config", str(tmp_path / "missing.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert result.returncode == 1 and b"missing.yaml" in result.stderr


def test_store_answers_the_check_as_mongod(tmp_path):
    """What the check reads, in mongod's shapes: serverStatus's oplog section only
    when asked for, and connectionStatus's privileges only with showPrivileges."""
    store = auth_store(tmp_path / "store", "rs0")
    with direct(store, ("root", ROOT_PASSWORD)) as root:
        root.admin.command("createUser", "clerk", pwd="clerk-pw",
                           roles=[{"role": "readWrite", "db": "shop"}, {"role": "read", "db": "other"}])
        status = root.admin.command("serverStatus")
        assert "oplog" not in status
        oplog = root.admin.command("serverStatus", oplog=1)["oplog"]
        assert isinstance(oplog["earliestOptime"], Timestamp) and isinstance(oplog["latestOptime"], Timestamp)
        assert oplog["earliestOptime"] <= oplog["latestOptime"]
    with direct(store, ("clerk", "clerk-pw")) as clerk:
        info = clerk.admin.command("connectionStatus")["authInfo"]
        assert "authenticatedUserPrivileges" not in info
        info = clerk.admin.command("connectionStatus", showPrivileges=True)["authInfo"]
        privileges = {(p["resource"].get("db"), p["resource"].get("collection")): p["actions"]
                      for p in info["authenticatedUserPrivileges"]}
        assert "insert" in privileges[("shop", "")] and "find" in privileges[("shop", "")]
        assert "find" in privileges[("other", "")] and "insert" not in privileges[("other", "")]
        assert "bypassDocumentValidation" not in privileges[("shop", "")]
    with direct(store) as nobody:
        info = nobody.admin.command("connectionStatus", showPrivileges=True)["authInfo"]
        assert info["authenticatedUserPrivileges"] == []
    store.stop()
