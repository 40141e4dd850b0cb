"""Multi-document transactions through `thermocline proxy`, with two replica-set
stores as tiers: a transaction whose every command the fast tier answers
completely runs there (and the feeder replays its commit to the archive); the
first command that is not (a read the planner cannot prove inside the horizon,
a namespace without a policy) gets OperationNotSupportedInTransaction naming the
namespace, without TransientTransactionError, and the transaction is aborted on
the fast tier."""
import datetime

import pytest
from pymongo.errors import OperationFailure

from conftest import wait_until
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, start_proxy, wait_feeder
from tier_support import utc_now


def recent():
    """A filter the planner proves inside the one-hour window."""
    return {"createdAt": {"$gte": utc_now() - datetime.timedelta(minutes=5)}}


def has_time_index(store):
    with client_for(store) as client:
        return any(next(iter(spec["key"])) == "createdAt" for spec in client.shop.orders.list_indexes())


def transactions_of(store):
    with client_for(store) as client:
        return client.admin.command("serverStatus")["transactions"]


@pytest.fixture
def proxy(replicated_tiers, tmp_path):
    archive, fast = replicated_tiers
    process = start_proxy(tmp_path / "proxy", archive, fast, max_age="1h", coverage="complete")
    yield process
    process.stop()


def test_transaction_on_the_fast_tier_commits_and_reaches_the_archive(proxy, replicated_tiers):
    archive, fast = replicated_tiers
    with client_for(proxy) as client, client_for(proxy) as other:
        orders = client.shop.orders
        orders.insert_one({"_id": 0, "createdAt": utc_now(), "n": 0})
        # The index sync gives the fast tier's new collection its time-field index:
        # a DDL, which an open transaction would hold back and a transaction's
        # first write could meet (LockTimeout, retried), so the callback below
        # runs exactly once only after it.
        assert wait_until(lambda: has_time_index(fast), timeout=30)
        seen_by_other = []

        def work(session):
            orders.insert_one({"_id": 1, "createdAt": utc_now(), "n": 1}, session=session)
            orders.update_one(dict(recent(), _id=0), {"$inc": {"n": 10}}, session=session)
            inside = sorted((d["_id"], d["n"]) for d in orders.find(recent(), session=session))
            assert inside == [(0, 10), (1, 1)]
            assert orders.count_documents(recent(), session=session) == 2
            seen_by_other.append(sorted((d["_id"], d["n"]) for d in other.shop.orders.find(recent())))

        with client.start_session() as session:
            session.with_transaction(work)
        assert seen_by_other == [[(0, 0)]]
        assert sorted((d["_id"], d["n"]) for d in orders.find(recent())) == [(0, 10), (1, 1)]
    assert transactions_of(fast)["totalCommitted"] == 1
    assert transactions_of(archive)["totalStarted"] == 0
    # The feeder saw the commit's events and replayed them.
    wait_feeder(proxy)
    with client_for(archive) as client:
        assert sorted((d["_id"], d["n"]) for d in client.shop.orders.find()) == [(0, 10), (1, 1)]


def test_unprovable_read_is_refused_and_the_transaction_aborted(proxy, replicated_tiers):
    archive, fast = replicated_tiers
    with client_for(proxy) as client:
        orders = client.shop.orders
        with client.start_session() as session:
            session.start_transaction()
            orders.insert_one({"_id": "t", "createdAt": utc_now()}, session=session)
            with pytest.raises(OperationFailure) as raised:
                orders.find_one({"n": 5}, session=session)  # no bound on createdAt: only the archive can answer
            assert raised.value.code == 263
            assert raised.value.details["codeName"] == "OperationNotSupportedInTransaction"
            assert "shop.orders" in str(raised.value)
            assert not raised.value.has_error_label("TransientTransactionError")
            # The fast tier aborted it before the client heard of the refusal.
            assert transactions_of(fast)["totalAborted"] == 1
            with pytest.raises(OperationFailure) as raised:
                session.commit_transaction()
            assert raised.value.code == 251
        assert orders.count_documents(recent()) == 0

        # A namespace without a policy lives only in the archive.
        with client.start_session() as session:
            session.start_transaction()
            with pytest.raises(OperationFailure) as raised:
                client.shop.customers.insert_one({"_id": 1}, session=session)
            assert raised.value.code == 263
            assert "shop.customers" in str(raised.value)
            assert not raised.value.has_error_label("TransientTransactionError")
            session.abort_transaction()
    assert transactions_of(archive)["totalStarted"] == 0


def test_abort_through_the_proxy_discards_the_writes(proxy, replicated_tiers):
    archive, fast = replicated_tiers
    with client_for(proxy) as client:
        orders = client.shop.orders
        with client.start_session() as session:
            session.start_transaction()
            orders.insert_many([{"_id": i, "createdAt": utc_now()} for i in range(5)], session=session)
            session.abort_transaction()
        assert orders.count_documents(recent()) == 0
    status = transactions_of(fast)
    assert (status["totalStarted"], status["totalAborted"], status["currentOpen"]) == (1, 1, 0)


def test_fault_in_only_in_the_command_that_starts_the_transaction(proxy, replicated_tiers):
    """A write that must first copy archive documents may start a transaction (the
    copy lands before its snapshot); later in the transaction it is refused, as
    the snapshot would not show the copy."""
    archive, fast = replicated_tiers
    old = utc_now() - datetime.timedelta(days=3)
    with client_for(archive) as client:
        client.shop.orders.insert_many([{"_id": "old1", "createdAt": old}, {"_id": "old2", "createdAt": old}])
    with client_for(proxy) as client:
        orders = client.shop.orders
        with client.start_session() as session:
            session.start_transaction()
            result = orders.update_one({"_id": "old1"}, {"$set": {"x": 1}}, session=session)
            assert result.matched_count == 1
            with pytest.raises(OperationFailure) as raised:
                orders.update_one({"_id": "old2"}, {"$set": {"x": 2}}, session=session)
            assert raised.value.code == 263
            assert "shop.orders" in str(raised.value)
            session.abort_transaction()
        with client.start_session() as session:
            with session.start_transaction():
                assert orders.update_one({"_id": "old2"}, {"$set": {"x": 2}}, session=session).modified_count == 1
    with client_for(fast) as client:
        assert client.shop.orders.find_one({"_id": "old2"})["x"] == 2
        assert "x" not in (client.shop.orders.find_one({"_id": "old1"}) or {})
