"""$clusterTime gossip through `thermocline proxy`, with pymongo's causally
consistent sessions. The two tiers are replica sets of their own: each signs its
cluster time with its own key and refuses a time the other signed, and refuses an
afterClusterTime beyond its own clock, as mongod does. They are scripted tiers
(fake_tier.py) whose clocks are far apart (the fast tier's ahead), so the test can
see which time went where: clients get the highest time either tier sent, each
tier only its own."""
import datetime

import pytest
from bson.timestamp import Timestamp
from pymongo import MongoClient, monitoring

from conftest import ProxyProcess, proxy_config
from fake_tier import FakeTier

NOW = datetime.datetime.utcnow().replace(microsecond=0)
ARCHIVE_SECONDS = 1700000000
FAST_SECONDS = 1800000000
QUIET = "feederEnabled: false\nevictorEnabled: false\nwarmerEnabled: false\n"


class Replies(monitoring.CommandListener):
    def __init__(self):
        self.replies = []

    def started(self, event):
        pass

    def succeeded(self, event):
        self.replies.append((event.command_name, event.reply))

    def failed(self, event):
        self.replies.append((event.command_name, event.failure))


@pytest.fixture
def gossip(tmp_path):
    archive = FakeTier(key_id=1, set_name="rs0", seconds=ARCHIVE_SECONDS)
    fast = FakeTier(key_id=2, set_name="rs1", seconds=FAST_SECONDS)
    archive.documents = []
    fast.documents = []
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30d", True)], QUIET)).start()
    yield archive, fast, proxy
    proxy.stop()
    archive.close()
    fast.close()


def key_ids(tier):
    return {command["$clusterTime"]["signature"]["keyId"] for _, command in tier.commands
            if "$clusterTime" in command}


def test_causal_sessions_across_tiered_and_untiered_namespaces(gossip):
    archive, fast, proxy = gossip
    listener = Replies()
    with MongoClient(proxy.uri, event_listeners=[listener]) as client:
        with client.start_session(causal_consistency=True) as session:
            orders, plain = client.shop.orders, client.shop.plain
            plain.insert_one({"_id": 1}, session=session)                            # untiered: the archive
            orders.insert_one({"_id": 2, "createdAt": NOW}, session=session)          # a write: the fast tier
            list(plain.find({}, session=session))                                     # the archive again
            list(orders.find({"createdAt": {"$gte": NOW}}, session=session))          # the fast tier
            orders.find_one({"_id": 7}, session=session)                              # both: the fast
                                                                                      # tier, then the archive
            plain.count_documents({}, session=session)

    # Every command worked: neither tier saw a time it did not sign, nor one ahead of its clock.
    failures = [(name, reply) for name, reply in listener.replies if not isinstance(reply, dict)]
    assert failures == []
    assert archive.refused == [] and fast.refused == []
    assert key_ids(archive) == {1} and key_ids(fast) == {2}

    # The client was answered with the highest time seen: the fast tier's, once it had one.
    names = [name for name, _ in listener.replies]
    first_fast = names.index("insert", names.index("insert") + 1)
    for name, reply in listener.replies[first_fast:]:
        assert reply["$clusterTime"]["signature"]["keyId"] == 2, (name, reply)
        assert reply["$clusterTime"]["clusterTime"].time == FAST_SECONDS
    assert all("operationTime" in reply for _, reply in listener.replies[first_fast:])

    # Causal reads after the fast tier's write reached the archive with an
    # afterClusterTime the archive's clock can meet.
    archive_reads = [command for command in archive.received("find") + archive.received("aggregate")
                     if "afterClusterTime" in command.get("readConcern", {})]
    assert len(archive_reads) >= 3  # plain's find and count, the point read's half
    assert all(command["readConcern"]["afterClusterTime"] <= Timestamp(ARCHIVE_SECONDS, 1000)
               for command in archive_reads)
    fast_reads = [command for command in fast.received("find")
                  if "afterClusterTime" in command.get("readConcern", {})]
    assert fast_reads and all(command["readConcern"]["afterClusterTime"].time == FAST_SECONDS
                              for command in fast_reads)
