"""Reads with a $readPreference go to the chosen tier's secondaries through
`thermocline proxy`, as a mongos sends them. The tiers are scripted replica sets
(fake_tier.FakeReplicaSet: a store cannot be a secondary) whose documents name the
member that served them: the archive rs0 is a primary and two secondaries tagged
dc east and west (its primary answers hello slowly: outside nearest's latency
window), the fast tier rs1 a primary and one secondary. The clients do not retry
(retryReads=false): what succeeds after a failure, the proxy retried. Last, a real
store with --auth plays a replica set through relays serving TLS
(fake_tier.MemberRelay): the member pools use the tier URI's credentials and CA."""
import datetime
import ssl
import time

import pytest
from bson.timestamp import Timestamp
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from pymongo.read_preferences import Nearest, Primary, PrimaryPreferred, Secondary, SecondaryPreferred

from conftest import ProxyProcess, StoreProcess, proxy_config, wait_until, wire_command
from fake_tier import FakeReplicaSet, FakeTier, MemberRelay
from tls_support import certificates  # noqa: F401 (a fixture)

NOW = datetime.datetime.utcnow().replace(microsecond=0)
QUIET = "feederEnabled: false\nevictorEnabled: false\nwarmerEnabled: false\n"
ARCHIVE_SECONDS = 1700000000
FAST_SECONDS = 1800000000


def start(tmp_path, archive_secondaries):
    archive = FakeReplicaSet("rs0", 1, archive_secondaries, primary_hello_delay=0.3, seconds=ARCHIVE_SECONDS)
    fast = FakeReplicaSet("rs1", 2, [{"tags": {"dc": "east"}}], seconds=FAST_SECONDS)
    # The feeder, of another process, has applied everything (read-your-writes waits on it).
    fast.primary.collections["feeder"] = [{"_id": "stream", "appliedTime": Timestamp(FAST_SECONDS + 100000, 0)}]
    fast.primary.collections["warmer"] = []
    # No evictor holds an intent (a write through a proxy without the evictor reads them).
    fast.primary.collections["evictions"] = []
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30d", True)], QUIET)).start()
    client = MongoClient(proxy.uri, retryReads=False)
    return archive, fast, proxy, client


@pytest.fixture
def deployment(tmp_path):
    archive, fast, proxy, client = start(tmp_path, [{"tags": {"dc": "east"}}, {"tags": {"dc": "west"}}])
    yield archive, fast, proxy, client
    client.close()
    proxy.stop()
    archive.close()
    fast.close()


@pytest.fixture
def stale_deployment(tmp_path):
    archive, fast, proxy, client = start(
        tmp_path, [{"tags": {"dc": "east"}, "lag_seconds": 200}, {"tags": {"dc": "west"}}])
    yield archive, fast, proxy, client
    client.close()
    proxy.stop()
    archive.close()
    fast.close()


def served_by(collection, **find):
    """The member named by every document of a find, which must be one."""
    members = {document["member"] for document in collection.find({}, **find)}
    assert len(members) == 1, members
    return members.pop()


def members_status(client, tier):
    status = client.admin.command("thermoclineStatus")
    return {member["address"]: member for member in status["backends"][tier]["members"]}


def test_secondary_reads_stay_on_their_member_for_getmore_and_killcursors(deployment):
    archive, _, _, client = deployment
    for preference in (Secondary(), SecondaryPreferred(), Nearest()):
        plain = client.shop.get_collection("plain", read_preference=preference)
        for _ in range(4):
            member = served_by(plain, batch_size=2)  # 5 documents: find, then two getMores
            assert member in ("secondary0", "secondary1"), (preference, member)
    assert "primary" not in archive.served("find")
    getmores = {name: len(archive.names[name].received("getMore")) for name in archive.names}
    finds = {name: len(archive.names[name].received("find")) for name in archive.names}
    assert getmores == {name: 2 * count for name, count in finds.items()}  # each on its find's member

    cursor = client.shop.get_collection("plain", read_preference=Secondary()).find({}, batch_size=2)
    member = archive.names[next(cursor)["member"]]
    assert member.cursors != {}
    cursor.close()
    deadline = time.monotonic() + 10  # the proxy does not wait for the member's answer
    while member.cursors and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(member.received("killCursors")) == 1 and member.cursors == {}
    assert archive.served("killCursors") == [next(name for name, each in archive.names.items() if each is member)]


def test_primary_reads_and_writes_stay_on_the_primary(deployment):
    archive, fast, _, client = deployment
    for preference in (Primary(), PrimaryPreferred()):
        assert served_by(client.shop.get_collection("plain", read_preference=preference), batch_size=2) == "primary"
    plain = client.shop.get_collection("plain", read_preference=Secondary())
    plain.insert_one({"_id": 9})
    plain.delete_one({"_id": 9})
    orders = client.shop.get_collection("orders", read_preference=SecondaryPreferred())
    orders.insert_one({"_id": 10, "createdAt": NOW})
    assert archive.served("find") == ["primary"]
    assert archive.served("insert") == ["primary"] and archive.served("delete") == ["primary"]
    assert fast.served("insert") == ["primary"]


def test_tags_choose_the_member(deployment):
    archive, _, _, client = deployment
    for _ in range(3):
        west = client.shop.get_collection("plain", read_preference=Secondary(tag_sets=[{"dc": "west"}]))
        assert served_by(west) == "secondary1"
        east = client.shop.get_collection("plain", read_preference=Nearest(tag_sets=[{"dc": "east"}]))
        assert served_by(east) == "secondary0"
        first_match = Secondary(tag_sets=[{"dc": "tokyo"}, {"dc": "west"}])
        assert served_by(client.shop.get_collection("plain", read_preference=first_match)) == "secondary1"
        primary = SecondaryPreferred(tag_sets=[{"role": "primary"}])  # no secondary carries it: the primary
        assert served_by(client.shop.get_collection("plain", read_preference=primary)) == "primary"
    nowhere = client.shop.get_collection("plain", read_preference=Secondary(tag_sets=[{"dc": "tokyo"}]))
    with pytest.raises(OperationFailure) as raised:
        nowhere.find_one({})
    assert raised.value.code == 133
    assert raised.value.details["errmsg"] == (
        "Encountered non-retryable error during query :: caused by :: Could not find host matching read "
        "preference { mode: \"secondary\", tags: [ { dc: \"tokyo\" } ] } for set rs0")


def test_max_staleness_excludes_a_stale_secondary(stale_deployment):
    archive, _, _, client = stale_deployment
    fresh = client.shop.get_collection("plain", read_preference=Secondary(max_staleness=120))
    for _ in range(6):
        assert served_by(fresh) == "secondary1"  # secondary0 is 200 s behind
    stale_only = SecondaryPreferred(tag_sets=[{"dc": "east"}], max_staleness=120)
    assert served_by(client.shop.get_collection("plain", read_preference=stale_only)) == "primary"
    east = client.shop.get_collection("plain", read_preference=Secondary(tag_sets=[{"dc": "east"}]))
    assert served_by(east) == "secondary0"  # without maxStalenessSeconds it may answer
    assert archive.served("find") == ["primary", "secondary0", "secondary1"]


def test_a_failed_read_runs_again_on_another_secondary_and_a_dead_one_is_avoided(deployment):
    archive, _, _, client = deployment
    east_first = client.shop.get_collection("plain", read_preference=Secondary(tag_sets=[{"dc": "east"}, {}]))
    assert served_by(east_first) == "secondary0"
    retried = client.admin.command("thermoclineStatus")["requestsRetried"]
    # secondary0 drops the connection instead of answering: the proxy marks it
    # unknown and sends the read once more, to the member chosen again.
    east = archive.names["secondary0"]
    east.hang_ups["find"] = 1
    assert served_by(east_first) == "secondary1"
    assert client.admin.command("thermoclineStatus")["requestsRetried"] == retried + 1
    assert len(east.received("find")) == 2
    # Dead for good: the hello the failure asks at once, or the read, finds it so,
    # and reads keep away from it.
    east.close()
    for _ in range(4):
        assert served_by(east_first) == "secondary1"
    assert client.admin.command("thermoclineStatus")["requestsRetried"] <= retried + 2
    status = members_status(client, "archive")
    assert status[east.address]["state"] == "UNKNOWN"
    assert status[archive.names["secondary1"].address]["state"] == "SECONDARY"
    assert status[archive.primary.address]["state"] == "PRIMARY"


def test_fast_tier_secondaries_and_read_your_writes(deployment):
    archive, fast, _, client = deployment
    recent = {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}
    orders = client.shop.get_collection("orders", read_preference=SecondaryPreferred())
    assert {document["member"] for document in orders.find(recent)} == {"secondary0"}  # the fast tier's
    assert fast.served("find", "orders") == ["secondary0"]
    # An archive read of a tiered namespace, before any write through the proxy: a secondary.
    assert served_by(orders) in ("secondary0", "secondary1")
    assert "primary" not in archive.served("find")
    # After a write, the archive's secondaries may lack what the feeder applied: the
    # archive's primary answers (read-your-writes across tiers).
    orders.insert_one({"_id": 20, "createdAt": NOW})
    assert served_by(orders) == "primary"
    client_reads = [find for find in archive.primary.received("find") if "$readPreference" in find]
    assert len(client_reads) == 1  # the insert's own find there checked that _id 20 is new (I7)
    # The fast tier's own reads still go to its secondary.
    assert {document["member"] for document in orders.find(recent)} == {"secondary0"}


def test_a_member_the_primary_no_longer_lists_is_dropped(deployment):
    archive, _, _, client = deployment
    west = client.shop.get_collection("plain", read_preference=Secondary(tag_sets=[{"dc": "west"}]))
    cursor = west.find({}, batch_size=2)
    assert next(cursor)["member"] == "secondary1"
    gone = archive.names["secondary1"]
    archive.primary.hosts = [archive.primary.address, archive.names["secondary0"].address]
    # The monitor's next hello to the primary (5 s after discovery began, then every
    # 10 s) finds the member gone.
    deadline = time.monotonic() + 20
    while gone.address in members_status(client, "archive") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(members_status(client, "archive")) == sorted([archive.primary.address,
                                                                archive.names["secondary0"].address])
    with pytest.raises(OperationFailure) as raised:
        west.find_one({})
    assert raised.value.code == 133
    # Its cursor cannot go on anywhere else.
    with pytest.raises(OperationFailure) as raised:
        list(cursor)
    assert raised.value.code == 6 and "left its replica set" in raised.value.details["errmsg"]
    assert gone.received("getMore") == []


def test_direct_connection_reaches_no_other_member(tmp_path):
    archive = FakeReplicaSet("rs0", 1, [{"tags": {"dc": "east"}}])
    fast = FakeTier(key_id=2, set_name="rs1")
    config = "listen: 127.0.0.1:{port}\narchive: %s&directConnection=true\nfast: %s\nnamespaces: []\n%s" % (
        archive.uri, fast.uri, QUIET)
    proxy = ProxyProcess(tmp_path / "proxy", config).start()
    try:
        with MongoClient(proxy.uri) as client:
            nearby = client.shop.get_collection("plain", read_preference=SecondaryPreferred())
            assert served_by(nearby) == "primary"
            with pytest.raises(OperationFailure) as raised:
                client.shop.get_collection("plain", read_preference=Secondary()).find_one({})
            assert raised.value.code == 133
        assert archive.secondaries[0].names() == []
    finally:
        proxy.stop()
        archive.close()
        fast.close()

def test_member_pools_authenticate_and_check_certificates_as_the_primary(tmp_path, certificates):
    """The archive URI names only the primary relay, with credentials and tlsCAFile;
    one secondary relay presents the CA's certificate, the other a rogue CA's."""
    password = "proxy-Pa55word!"
    store = StoreProcess(tmp_path / "store", extra_args=["--auth"], replica_set="rs0").start()
    fast = FakeTier(key_id=2, set_name="rs1")
    relays, proxy = [], None
    try:
        reply = wire_command(store.port, {"createUser": "proxy", "pwd": password, "roles": ["root"], "$db": "admin"})
        assert reply["ok"] == 1, reply
        with MongoClient("mongodb://proxy:%s@127.0.0.1:%d/?directConnection=true&authSource=admin"
                         % (password, store.port)) as direct:
            direct.shop.plain.insert_many([{"_id": i} for i in range(3)])
        rogue = certificates.issue("rogue-server", "/CN=localhost", "DNS:localhost,IP:127.0.0.1", ca="rogue")
        for secondary, certificate in ((False, certificates.server), (True, certificates.server), (True, rogue)):
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(certificate))
            relays.append(MemberRelay(store.port, "rs0", secondary, context))
        primary, trusted, untrusted = relays
        for relay in relays:
            relay.hosts = [each.address for each in relays]
            relay.primary_address = primary.address
        archive_uri = "mongodb://proxy:%s@127.0.0.1:%d/?replicaSet=rs0&authSource=admin&tls=true&tlsCAFile=%s" % (
            password, primary.port, certificates.ca)
        config = "listen: 127.0.0.1:{port}\narchive: %s\nfast: %s\nnamespaces: []\n%s" % (archive_uri, fast.uri, QUIET)
        proxy = ProxyProcess(tmp_path / "proxy", config).start()
        with MongoClient(proxy.uri, retryReads=False) as client:
            plain = client.shop.get_collection("plain", read_preference=Secondary())
            for _ in range(4):
                assert sorted(document["_id"] for document in plain.find()) == [0, 1, 2]
            status = members_status(client, "archive")
        assert trusted.names().count("find") == 4 and "saslStart" in trusted.names()
        assert "find" not in primary.names()
        assert untrusted.names() == []  # its TLS handshake failed: nothing was sent
        assert status[trusted.address]["state"] == "SECONDARY"
        assert status[untrusted.address]["state"] == "UNKNOWN"
        assert "certificate verify failed" in status[untrusted.address]["lastError"]
    finally:
        if proxy is not None:
            proxy.stop()
        for relay in relays:
            relay.close()
        fast.close()
        store.stop()


def test_primary_preferred_leaves_a_failed_primary_for_a_secondary(deployment):
    archive, fast, _, client = deployment
    plain = client.shop.get_collection("plain", read_preference=PrimaryPreferred())
    assert served_by(plain) == "primary"
    retried = client.admin.command("thermoclineStatus")["requestsRetried"]
    # The primary drops the connection: the read runs once more at once on a
    # secondary, as a driver selects a server again, not on the primary when it
    # is found again (it still answers ping).
    archive.primary.hang_ups["find"] = 1
    assert served_by(plain) in ("secondary0", "secondary1")
    assert len(archive.primary.received("find")) == 2
    assert client.admin.command("thermoclineStatus")["requestsRetried"] == retried + 1
    # It answers "not primary" (stepped down): the same. Once its hello says it is
    # the primary again, it answers again.
    assert wait_until(lambda: served_by(plain) == "primary", 10, 0.1)
    archive.primary.failures["find"] = [10107]
    assert served_by(plain) in ("secondary0", "secondary1")
    assert wait_until(lambda: served_by(plain) == "primary", 10, 0.1)
    # A read that must see the feeder's writes stays on the archive's primary
    # (read-your-writes across tiers): it waits for it, as before.
    orders = client.shop.get_collection("orders", read_preference=PrimaryPreferred())
    orders.insert_one({"_id": 30, "createdAt": NOW})
    archive.primary.hang_ups["find"] = 1
    assert served_by(orders) == "primary"
    # The fast tier's primary is gone for good: its range reads go to its secondary
    # instead of failing after failoverWait.
    recent = {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}
    assert {document["member"] for document in orders.find(recent)} == {"primary"}
    fast.primary.close()
    for _ in range(3):
        assert {document["member"] for document in orders.find(recent)} == {"secondary0"}


def test_secondary_preferred_falls_back_to_the_primary_when_its_secondary_fails(deployment):
    _, fast, _, client = deployment
    recent = {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}
    orders = client.shop.get_collection("orders", read_preference=SecondaryPreferred())
    assert {document["member"] for document in orders.find(recent)} == {"secondary0"}  # the fast tier's only one
    fast.names["secondary0"].hang_ups["find"] = 1
    assert {document["member"] for document in orders.find(recent)} == {"primary"}
    assert len(fast.names["secondary0"].received("find")) == 2


def test_fast_tier_secondaries_behind_the_warmer_s_last_copy_are_not_read(deployment):
    """The warmer publishes the fast tier's cluster time of its last copy (here its
    state document, as a warmer of another process leaves it): until a secondary's
    hello says it applied that time, the fast tier's reads go to its primary."""
    _, fast, proxy, client = deployment
    secondary = fast.names["secondary0"]
    secondary.applied_time = Timestamp(FAST_SECONDS, 1)
    copied_at = Timestamp(FAST_SECONDS + 50, 0)
    fast.primary.collections["warmer"] = [{"_id": "shop.orders", "complete": True, "copied": 5,
                                           "lastCopyTime": copied_at}]

    def published():
        status = client.admin.command("thermoclineStatus")["namespaces"]["shop.orders"]["warmer"]
        return status.get("lastCopyTime") == copied_at
    assert wait_until(published, 10)
    recent = {"createdAt": {"$gte": NOW - datetime.timedelta(days=1)}}
    orders = client.shop.get_collection("orders", read_preference=SecondaryPreferred())
    for _ in range(3):
        assert {document["member"] for document in orders.find(recent)} == {"primary"}
    assert fast.served("find", "orders") == ["primary"]
    # Caught up: its next hello (every 10 s) says so, and it serves reads again.
    secondary.applied_time = Timestamp(FAST_SECONDS + 60, 0)
    assert wait_until(lambda: {document["member"] for document in orders.find(recent)} == {"secondary0"}, 30, 0.5)
