"""`thermocline proxy` retries once what MongoDB's retryable-reads and
retryable-writes specifications allow (reads; writes carrying a txnNumber and
touching one document each), after a network error or a "not primary" reply, once
its pool has found the tier's primary again (failoverWait). The clients here do
not retry themselves (retryReads=false), or a command listener shows they sent the
command once: what succeeds, the proxy retried."""
import datetime
import threading
import time

import pymongo
import pytest
from pymongo import MongoClient, monitoring

from conftest import ProxyProcess, StoreProcess, proxy_config
from fake_tier import FakeTier

NOW = datetime.datetime.utcnow().replace(microsecond=0)
# Generous: a store restarting under AddressSanitizer on a loaded machine.
RETRY_CONFIG = "failoverWait: 30s\nfeederEnabled: false\nevictorEnabled: false\nwarmerEnabled: false\n"


class StartedCommands(monitoring.CommandListener):
    def __init__(self):
        self.names = []

    def started(self, event):
        self.names.append(event.command_name)

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass


@pytest.fixture
def deployment(tiers, tmp_path):
    archive, fast = tiers
    with MongoClient(archive.uri) as client:
        client.shop.plain.insert_many([{"_id": i} for i in range(5)])
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(
        archive, fast, [("shop.orders", "createdAt", "30d", True)], RETRY_CONFIG)).start()
    yield archive, fast, proxy
    proxy.stop()


def restart_soon(store_process):
    """Starts store_process again in a thread, half a second from now."""
    def restart():
        time.sleep(0.5)
        store_process.restart()
    thread = threading.Thread(target=restart)
    thread.start()
    return thread


def retried(proxy):
    with MongoClient(proxy.uri) as client:
        return client.admin.command("thermoclineStatus")["requestsRetried"]


def test_a_read_survives_a_tier_restart(deployment):
    archive, _, proxy = deployment
    listener = StartedCommands()
    with MongoClient(proxy.uri, retryReads=False, event_listeners=[listener]) as client:
        assert client.shop.plain.find_one({"_id": 1}) == {"_id": 1}
        archive.stop()
        restarting = restart_soon(archive)
        try:
            assert client.shop.plain.find_one({"_id": 2}) == {"_id": 2}
            assert client.shop.plain.count_documents({}) == 5
        finally:
            restarting.join()
    assert listener.names.count("find") == 2
    assert retried(proxy) >= 1


def test_a_retryable_write_survives_a_tier_restart(deployment):
    _, fast, proxy = deployment
    listener = StartedCommands()
    with MongoClient(proxy.uri, retryWrites=True, event_listeners=[listener]) as client:
        client.shop.orders.insert_one({"_id": 1, "createdAt": NOW})
        fast.stop()
        restarting = restart_soon(fast)
        try:
            client.shop.orders.insert_one({"_id": 2, "createdAt": NOW})
        finally:
            restarting.join()
    assert listener.names.count("insert") == 2  # the client did not retry
    with MongoClient(fast.uri) as direct:
        assert sorted(document["_id"] for document in direct.shop.orders.find()) == [1, 2]
    assert retried(proxy) >= 1


def test_a_write_that_is_not_retryable_gets_the_error(deployment):
    archive, fast, proxy = deployment
    with MongoClient(proxy.uri, retryWrites=True) as client:
        client.shop.plain.update_many({}, {"$set": {"seen": True}})
        archive.stop()
        started = time.monotonic()
        # A multi-document update is never retried, by the proxy nor by the driver.
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.plain.update_many({}, {"$set": {"seen": False}})
        assert raised.value.code == 6  # HostUnreachable
        assert time.monotonic() - started < 10  # no wait for the primary
    with MongoClient(proxy.uri, retryWrites=False) as client:
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.plain.insert_one({"_id": 99})  # no txnNumber
        assert raised.value.code == 6
    assert retried(proxy) == 0
    archive.restart()


@pytest.fixture
def fake_archive(tmp_path):
    """A scripted archive (fake_tier.py) and a real fast tier behind the proxy."""
    archive = FakeTier(key_id=1)
    fast = StoreProcess(tmp_path / "fast").start()
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(archive, fast, (), RETRY_CONFIG)).start()
    yield archive, proxy
    proxy.stop()
    fast.stop()
    archive.close()


def test_not_primary_replies_are_retried_on_a_new_handshake(fake_archive):
    archive, proxy = fake_archive
    listener = StartedCommands()
    with MongoClient(proxy.uri, retryReads=False, retryWrites=True, event_listeners=[listener]) as client:
        client.admin.command("ping")
        hellos = len(archive.received("hello"))
        for code in (10107, 13435, 13436, 189, 11602, 91):
            archive.failures["find"] = [code]
            assert client.shop.plain.find_one({}) == {"_id": 1, "from": "rs0"}
        assert len(archive.received("find")) == 12
        # Each "not primary" cleared the pool: the retry went through a new hello.
        assert len(archive.received("hello")) >= hellos + 6

        archive.failures["insert"] = [10107]
        client.shop.plain.insert_one({"_id": 5})  # retryWrites: a txnNumber
        assert len(archive.received("insert")) == 2
        assert listener.names.count("insert") == 1

        archive.failures["update"] = [189]
        with pytest.raises(pymongo.errors.NotMasterError) as raised:  # pymongo's class for these codes
            client.shop.plain.update_many({}, {"$set": {"a": 1}})
        assert raised.value.details["code"] == 189
        assert len(archive.received("update")) == 1
    with MongoClient(proxy.uri, retryReads=False, retryWrites=False) as client:
        # A code outside the specifications' list is never retried.
        archive.failures["find"] = [11601]
        with pytest.raises(pymongo.errors.OperationFailure) as raised:
            client.shop.plain.find_one({})
        assert raised.value.code == 11601
        # Last: after a "not primary" error pymongo waits to rediscover its server.
        archive.failures["insert"] = [10107]
        with pytest.raises(pymongo.errors.NotMasterError) as raised:
            client.shop.plain.insert_one({"_id": 6})
        assert raised.value.details["code"] == 10107
    assert len(archive.received("insert")) == 3
