"""Live reload (issue 17): SIGHUP and thermoclineReload read the proxy's config
file again and apply it without closing a client connection, all or nothing: a
bad file, or a setting that cannot change while the proxy runs, is refused whole
(FILE:LINE for a bad file) and the running config stays. Each test keeps one
pymongo connection open across the reloads and checks, with the proxy's own
connection counter, that no connection was opened or closed meanwhile."""
import datetime
import json
import os
import re
import shutil
import signal
import socket
import threading

import pytest
from pymongo import MongoClient, monitoring
from pymongo.errors import OperationFailure

from conftest import ProxyProcess, ensure_time_field_indexes, wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import NS, client_for, start_proxy, tier_config, track, wait_feeder, wait_warm
from tls_support import certificates  # noqa: F401 (a fixture)

OTHER = "shop.events"


def now():
    moment = datetime.datetime.utcnow()
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


class PoolEvents(monitoring.ConnectionPoolListener, monitoring.ServerHeartbeatListener):
    """The client's own view: connections its pool opened and closed, and failed
    heartbeats of its monitor."""

    def __init__(self):
        self.created, self.closed, self.heartbeats_failed = 0, [], []

    def connection_created(self, event):
        self.created += 1

    def connection_closed(self, event):
        self.closed.append(event.reason)

    def heartbeat_failed(self, event):
        self.heartbeats_failed.append(str(event.reply))

    def started(self, event):
        pass

    def succeeded(self, event):
        pass

    def failed(self, event):
        self.heartbeat_failed(event)

    def pool_created(self, event):
        pass

    def pool_cleared(self, event):
        self.closed.append("pool cleared")

    def pool_closed(self, event):
        pass

    def connection_ready(self, event):
        pass

    def connection_check_out_started(self, event):
        pass

    def connection_check_out_failed(self, event):
        self.closed.append("check out failed: %s" % event.reason)

    def connection_checked_out(self, event):
        pass

    def connection_checked_in(self, event):
        pass


def one_connection(proxy):
    """A client that keeps exactly one connection to the proxy, and its events."""
    events = PoolEvents()
    client = MongoClient(proxy.uri, maxPoolSize=1, minPoolSize=1, serverSelectionTimeoutMS=10000,
                         socketTimeoutMS=30000, event_listeners=[events])
    client.admin.command("ping")
    return client, events


def assert_kept(events):
    assert events.created == 1 and events.closed == [] and events.heartbeats_failed == [], vars(events)


def rewrite(proxy, text):
    proxy.config_path.write_text(text.replace("{port}", str(proxy.port)))


def reload(client):
    return client.admin.command("thermoclineReload")


def explain_tier(client, ns, since):
    database, collection = ns.split(".", 1)
    reply = client[database].command("explain", {"find": collection, "filter": {"createdAt": {"$gte": since}}})
    return reply["thermocline"]["tier"]


def test_sighup_adds_a_namespace_that_then_routes_to_the_fast_tier(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    with client_for(archive) as direct:
        direct.shop.events.insert_many([{"_id": i, "createdAt": now()} for i in range(50)])
    client, events = one_connection(proxy)
    with client:
        since = now() - datetime.timedelta(minutes=5)
        assert explain_tier(client, OTHER, since) == "archive"
        assert OTHER not in client.admin.command("thermoclineStatus")["namespaces"]

        text = tier_config(archive, fast, max_age="1h", extra_namespaces=(OTHER,))
        ensure_time_field_indexes(text)
        rewrite(proxy, text)
        os.kill(proxy.pid, signal.SIGHUP)
        assert wait_until(lambda: "config reloaded" in proxy.log_text(), 20, 0.1), proxy.log_tail()
        assert "namespace shop.events added" in proxy.log_text()

        # The client's one connection keeps working while the warmer copies the window.
        assert wait_until(lambda: OTHER in client.admin.command("thermoclineStatus")["namespaces"], 10, 0.1)
        assert wait_until(lambda: client.admin.command("thermoclineStatus")["namespaces"][OTHER]
                          ["coverageHorizon"] is not None, 30, 0.2)
        assert explain_tier(client, OTHER, since) == "fast"
        assert sorted(d["_id"] for d in client.shop.events.find({"createdAt": {"$gte": since}})) == list(range(50))
        # The namespace that stayed kept its counters and its coverage.
        assert client.admin.command("thermoclineStatus")["namespaces"][NS]["routes"]["archive"] >= 0
        assert_kept(events)
    proxy.stop()


def paused_read(archive, client):
    """A read only the archive answers, with the archive paused 0.4 s meanwhile."""
    os.kill(archive.pid, signal.SIGSTOP)
    timer = threading.Timer(0.4, os.kill, (archive.pid, signal.SIGCONT))
    timer.start()
    client.shop.orders.find_one({"customer": "c1"})
    timer.join()


def test_reload_changes_settings_and_says_what_changed(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", slack="1m",
                        top={"slowOpThresholdMs": 5000})
    wait_warm(proxy)
    client, events = one_connection(proxy)
    with client:
        client.shop.orders.insert_one({"_id": 1, "createdAt": now(), "customer": "c1"})
        wait_feeder(proxy)
        paused_read(archive, client)
        assert "Slow query:" not in proxy.log_text()
        text = tier_config(archive, fast, max_age="30m", slack="1m", top={"slowOpThresholdMs": 200})
        with pytest.raises(OperationFailure) as refused:  # the archive's collection exists now: preflight
            rewrite(proxy, text)
            reload(client)
        assert "no index whose first key is its timeField" in str(refused.value)
        ensure_time_field_indexes(text)
        reply = reload(client)
        assert reply["ok"] == 1 and reply["workersRestarted"] is True
        assert "shop.orders maxAge (ms): 3600000 -> 1800000" in reply["changed"], reply
        assert "slowOpThresholdMs: 5000 -> 200" in reply["changed"], reply
        item = client.admin.command("thermoclineStatus")["namespaces"][NS]
        assert item["maxAgeMillis"] == 30 * 60 * 1000
        assert "config reloaded" in proxy.log_text() and "slowOpThresholdMs: 5000 -> 200" in proxy.log_text()
        # The new threshold applies: the same slowed read is now logged.
        paused_read(archive, client)
        assert wait_until(lambda: "Slow query: find on shop.orders" in proxy.log_text(), 5, 0.1)
        # The workers run again on the new config, the coverage comes back.
        assert wait_until(lambda: client.admin.command("thermoclineStatus")["namespaces"][NS]
                          ["coverageHorizon"] is not None, 20, 0.1)
        # The same file again changes nothing.
        assert reload(client)["changed"] == []
        assert client.shop.orders.find_one({"_id": 1})["_id"] == 1
        assert_kept(events)
    proxy.stop()


def test_removing_a_namespace_routes_it_to_the_archive(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", extra_namespaces=(OTHER,))
    wait_warm(proxy, OTHER)
    since = now() - datetime.timedelta(minutes=5)
    client, events = one_connection(proxy)
    with client:
        client.shop.events.insert_one({"_id": "written on the fast tier", "createdAt": now()})
        assert explain_tier(client, OTHER, since) == "fast"
        rewrite(proxy, tier_config(archive, fast, max_age="1h"))
        reply = reload(client)
        assert "namespace shop.events removed (routed to the archive)" in reply["changed"], reply
        assert OTHER not in client.admin.command("thermoclineStatus")["namespaces"]
        assert explain_tier(client, OTHER, since) == "archive"
        # The feeder applied the namespace's write before it was let go.
        assert client.shop.events.find_one({"_id": "written on the fast tier"}) is not None
        with client_for(archive) as direct:
            assert direct.shop.events.find_one({"_id": "written on the fast tier"}) is not None
        assert_kept(events)
    proxy.stop()


@pytest.mark.parametrize("bad, line, code", [
    ("maxConnections: [\n", None, 9),        # YAML syntax: where the parser finds it
    ("slowOpThresholdMs: -5\n", 4, 2),       # a bad value
])
def test_a_bad_file_is_refused_whole(replicated_tiers, tmp_path, bad, line, code):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    client, events = one_connection(proxy)
    with client:
        lines = tier_config(archive, fast, max_age="30m").splitlines(True)
        rewrite(proxy, "".join(lines[:3] + [bad] + lines[3:]))
        with pytest.raises(OperationFailure) as refused:
            reload(client)
        where = re.search(re.escape(str(proxy.config_path)) + r":(\d+): ", str(refused.value))
        assert refused.value.code == code and where, refused.value.details
        assert line is None or int(where.group(1)) == line, refused.value.details
        where = where.group(0)
        assert "config reload refused" in proxy.log_text() and where in proxy.log_text()
        # Nothing of the file applied (its maxAge neither), and the client goes on.
        assert client.admin.command("thermoclineStatus")["namespaces"][NS]["maxAgeMillis"] == 3600 * 1000
        client.shop.orders.insert_one({"_id": 1, "createdAt": now()})
        assert client.shop.orders.find_one({"_id": 1})["_id"] == 1
        os.kill(proxy.pid, signal.SIGHUP)  # the same file by signal: refused, logged, the proxy runs on
        assert wait_until(lambda: proxy.log_text().count("config reload refused") == 2, 10, 0.1)
        assert client.admin.command("ping")["ok"] == 1
        assert_kept(events)
    proxy.stop()


def test_settings_that_cannot_change_live_are_refused_and_kept(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    client, events = one_connection(proxy)
    with client:
        text = tier_config(archive, fast, max_age="30m")
        moved = text.replace("archive: %s" % archive.uri, "archive: mongodb://127.0.0.1:1/?replicaSet=rs0")
        moved = moved.replace("listen: 127.0.0.1:{port}", "listen: 127.0.0.1:1")
        rewrite(proxy, moved)
        with pytest.raises(OperationFailure) as refused:
            reload(client)
        message = str(refused.value)
        assert refused.value.code == 20, refused.value.details
        assert "cannot change while the proxy runs" in message
        assert "listen: 127.0.0.1:%d -> 127.0.0.1:1" % proxy.port in message and "archive:" in message
        # All or nothing: the maxAge change in the same file did not apply either.
        assert client.admin.command("thermoclineStatus")["namespaces"][NS]["maxAgeMillis"] == 3600 * 1000
        client.shop.orders.insert_one({"_id": 1, "createdAt": now()})
        assert client.shop.orders.find_one({"_id": 1})["_id"] == 1
        assert_kept(events)
        # Growing the window is refused: the warmer copied only the old one.
        rewrite(proxy, tier_config(archive, fast, max_age="2h"))
        with pytest.raises(OperationFailure) as refused:
            reload(client)
        assert "maxAge - safetySlack grows" in str(refused.value)
    proxy.stop()


def test_requests_in_flight_across_many_reloads(replicated_tiers, tmp_path):
    """Requests that arrived before a swap hold the replaced namespace table: under
    ASan, traffic on both namespaces while the second one is added and removed
    again and again shows no use after free and no leak, and loses no write."""
    archive, fast = replicated_tiers
    with_both = tier_config(archive, fast, max_age="1h", extra_namespaces=(OTHER,))
    alone = tier_config(archive, fast, max_age="1h")
    with client_for(archive) as direct:
        direct.shop.events.insert_one({"_id": "seed", "createdAt": now()})
        direct.shop.orders.insert_one({"_id": "seed", "createdAt": now()})
    ensure_time_field_indexes(with_both)
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    stop, failures, written = threading.Event(), [], []

    def traffic(ns):
        database, collection = ns.split(".", 1)
        with client_for(proxy) as client:
            target, number = client[database][collection], 0
            while not stop.is_set():
                try:
                    target.insert_one({"_id": number, "createdAt": now()})
                    written.append((ns, number))
                    target.find_one({"_id": number})
                    list(target.find({"createdAt": {"$gte": now() - datetime.timedelta(minutes=1)}}).limit(5))
                except Exception as error:  # noqa: BLE001 (collected, asserted below)
                    failures.append(repr(error))
                number += 1

    threads = [threading.Thread(target=traffic, args=(ns,)) for ns in (NS, OTHER)]
    for thread in threads:
        thread.start()
    try:
        client, events = one_connection(proxy)
        with client:
            for round_number in range(4):
                rewrite(proxy, with_both)
                assert "namespace shop.events added" in " ".join(reload(client)["changed"])
                rewrite(proxy, alone)
                assert "namespace shop.events removed (routed to the archive)" in reload(client)["changed"]
            assert_kept(events)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    with client_for(archive) as direct:
        for ns, number in written:
            database, collection = ns.split(".", 1)
            if ns == NS:
                continue  # still tiered: the feeder may not have applied the last ones yet
            assert direct[database][collection].find_one({"_id": number}) is not None, (ns, number)
    proxy.stop()


def served_certificate(proxy, certificates):
    """The serial number of the certificate a new TLS connection to the proxy gets."""
    context = certificates.client_context()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert()["serialNumber"]


def test_a_renewed_certificate_serves_new_connections(replicated_tiers, tmp_path, certificates):
    """The PEM files are read again on every reload: a certificate renewed under the
    same file name serves the next handshake; an open TLS connection goes on."""
    archive, fast = replicated_tiers
    served = tmp_path / "proxy-server.pem"
    shutil.copy(str(certificates.server), str(served))
    text = tier_config(archive, fast, max_age="1h", top={"tlsMode": "requireTLS", "tlsCertificateKeyFile": served})
    proxy = track(ProxyProcess(tmp_path / "proxy", text, ssl_context=certificates.client_context())).start()
    before = served_certificate(proxy, certificates)
    events = PoolEvents()
    uri = "mongodb://localhost:%d/?tls=true&tlsCAFile=%s" % (proxy.port, certificates.ca)
    with MongoClient(uri, maxPoolSize=1, minPoolSize=1, serverSelectionTimeoutMS=10000,
                     event_listeners=[events]) as client:
        client.admin.command("ping")
        renewed = certificates.issue("renewed", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
        shutil.copy(str(renewed), str(served))
        assert served_certificate(proxy, certificates) == before  # read at start, not per handshake
        reply = reload(client)
        assert reply["changed"] == [], reply  # the same settings; the file read again
        after = served_certificate(proxy, certificates)
        assert after != before
        client.shop.orders.insert_one({"_id": 1, "createdAt": now()})
        assert client.shop.orders.find_one({"_id": 1})["_id"] == 1
        # A file that no longer holds a key is refused, and the renewed one stays.
        served.write_text("not a certificate\n")
        with pytest.raises(OperationFailure):
            reload(client)
        assert served_certificate(proxy, certificates) == after
        assert_kept(events)
    proxy.stop()


def test_log_format_changes_live(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h")
    client, events = one_connection(proxy)
    with client:
        rewrite(proxy, tier_config(archive, fast, max_age="1h", top={"logFormat": "json"}))
        assert reload(client)["changed"] == ["logFormat: text -> json"]
        client.admin.command("thermoclineReload")  # one more line, written as a record
        lines = proxy.log_text().splitlines()
        assert not lines[0].startswith("{")  # the start was text
        first = next(i for i, line in enumerate(lines) if "logFormat: text -> json" in line)
        records = [json.loads(line) for line in lines[first:]]  # every line since is a record
        reloaded = [r for r in records if r["c"] == "CONTROL" and r["msg"].startswith("config reloaded")]
        assert len(reloaded) == 2 and reloaded[-1]["attr"]["changed"] == {}, reloaded
        assert_kept(events)
    proxy.stop()
