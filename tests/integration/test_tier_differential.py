"""The differential test of the tier workers (design brief, "The strongest test"):
one seeded random sequence of operations goes through the proxy, with the
feeder, the evictor and the warmer running and maxAge of 4 s so documents cross
tiers during the test, and to one plain store holding everything (the oracle).
Every reply must be identical (I4, I5, I7); after quiescence the archive equals
the oracle document for document, field order included (I1), and the fast tier
holds exactly the window, each document in its newest version (I2, I6).

CI runs TIER_DIFF_SEEDS (default "11,12") with TIER_DIFF_OPS operations each
(default 700); by hand: TIER_DIFF_SEEDS=1-50 TIER_DIFF_OPS=3000 pytest ... (each
seed must fit the 60 s test limit: about 3,000 operations on the sanitized build).

The same runs on a collection shaped like an application's (TIER_DIFF_APP_SEEDS,
default "13"): a sparse unique index on email whose values the operations make
collide (inserts, $set, replacements, upserts: E11000 through the proxy exactly
when one MongoDB gives it, including against documents only the archive holds),
a secondary index on customer, a partial index on status, and drafts without
createdAt or with a string there (outside every window).
"""
import datetime
import os
import random
import time

import bson
import pymongo
import pytest
from pymongo import MongoClient

from conftest import StoreProcess
from tier_support import stop_leftovers  # noqa: F401 (an autouse fixture)
from tier_support import client_for, namespace_status, start_proxy, track, wait_feeder, wait_warm

MAX_AGE_SECONDS = 4
SLACK_SECONDS = 0.5


def seeds(variable="TIER_DIFF_SEEDS", default="11,12"):
    text = os.environ.get(variable, default)
    result = []
    for part in text.split(","):
        if "-" in part:
            first, last = part.split("-")
            result += list(range(int(first), int(last) + 1))
        else:
            result.append(int(part))
    return result


def in_window(value, horizon):
    """Whether a createdAt value is inside the window from horizon on, as
    {createdAt: {$gte: horizon}} matches it: a date, or an array holding one."""
    values = value if isinstance(value, list) else [value]
    return any(isinstance(item, datetime.datetime) and item >= horizon for item in values)


def utc_now():
    now = datetime.datetime.utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)  # BSON dates hold milliseconds


def encode_all(documents):
    return [bson.encode(document) for document in documents]


class Workload:
    """Random operations over a small _id space, so that they collide: updates of
    documents only the archive holds, inserts of ids that exist, deletes of
    documents being warmed or evicted. application: the application's shape
    (below) with unique emails from a small pool, so that they collide too."""

    def __init__(self, seed, first_new_id, application=False):
        self.application = application
        self.random = random.Random(seed)
        self.next_id = first_new_id
        self.known_ids = list(range(first_new_id))

    def any_id(self):
        if self.random.random() < 0.05:
            return self.next_id + 7  # one that does not exist
        return self.random.choice(self.known_ids)

    def created_at(self, now):
        # A third lands older than maxAge: evicted at once, still in the archive.
        return now - datetime.timedelta(milliseconds=self.random.randint(0, 6000))

    def document(self, identifier, now):
        document = {"_id": identifier, "createdAt": self.created_at(now), "a": self.random.randint(0, 40),
                    "n": 0, "tags": ["t%d" % self.random.randint(0, 5)], "s": "x" * self.random.randint(0, 20)}
        if self.application:
            roll = self.random.random()
            if roll < 0.1:
                del document["createdAt"]  # a draft
            elif roll < 0.13:
                document["createdAt"] = "2026-11-30"  # not a date: outside every window
            document["customer"] = "c%d" % self.random.randint(0, 9)
            document["status"] = self.random.choice(["new", "paid", "shipped"])
            if self.random.random() < 0.8:
                document["email"] = self.email()
        return document

    def email(self):
        return "e%d@shop" % self.random.randint(0, 150)  # a small pool: collisions

    def next_operation(self, now):
        """(kind, arguments): the same for the proxy and the oracle."""
        roll = self.random.random()
        if roll < 0.18:
            identifier = self.next_id
            self.next_id += 1
            self.known_ids.append(identifier)
            return "insert", self.document(identifier, now)
        if roll < 0.21:
            return "insert", self.document(self.any_id(), now)  # often a duplicate key
        if roll < 0.42:
            updates = [{"$set": {"a": self.random.randint(0, 40)}}, {"$inc": {"n": 1}},
                       {"$push": {"tags": "p%d" % self.random.randint(0, 9)}}, {"$unset": {"s": ""}},
                       {"$set": {"createdAt": self.created_at(now)}}, {"$pop": {"tags": 1}},
                       {"$set": {"sub": {"k": self.random.randint(0, 3)}, "z": True}},
                       {"$inc": {"n": 2}, "$set": {"a": self.random.randint(0, 40)}}]
            if self.application:
                updates += [{"$set": {"email": self.email()}}, {"$set": {"status": "paid", "email": self.email()}},
                            {"$unset": {"email": ""}}, {"$set": {"customer": "c%d" % self.random.randint(0, 9)}}]
            upsert = self.random.random() < 0.05
            return "update_one", ({"_id": self.any_id()}, self.random.choice(updates), upsert)
        if roll < 0.46:
            replacement = self.document(0, now)
            del replacement["_id"]
            return "replace_one", ({"_id": self.any_id()}, replacement)
        if roll < 0.53:
            return "delete_one", {"_id": self.any_id()}
        if roll < 0.55:
            return "update_many", ({"a": self.random.randint(0, 40)}, {"$inc": {"n": 10}})
        if roll < 0.56:
            return "delete_many", {"a": self.random.randint(0, 40)}
        if roll < 0.72:
            return "find_id", self.any_id()
        if roll < 0.77:
            return "find_ids", sorted({self.any_id() for _ in range(3)})
        if roll < 0.89:
            since = now - datetime.timedelta(milliseconds=self.random.randint(200, 5000))
            return "find_range", since
        if roll < 0.95:
            return "count", {"a": {"$lt": self.random.randint(0, 40)}}
        since = now - datetime.timedelta(milliseconds=self.random.randint(200, 8000))
        return "count", {"createdAt": {"$gte": since}}


def run(collection, kind, arguments):
    """The operation's outcome as comparable data: ("ok", ...) or ("error", code)."""
    try:
        if kind == "insert":
            return "ok", collection.insert_one(arguments).inserted_id
        if kind == "update_one":
            result = collection.update_one(arguments[0], arguments[1], upsert=arguments[2])
            return "ok", result.matched_count, result.modified_count, result.upserted_id
        if kind == "replace_one":
            result = collection.replace_one(*arguments)
            return "ok", result.matched_count, result.modified_count
        if kind == "delete_one":
            return "ok", collection.delete_one(arguments).deleted_count
        if kind == "update_many":
            result = collection.update_many(*arguments)
            return "ok", result.matched_count, result.modified_count
        if kind == "delete_many":
            return "ok", collection.delete_many(arguments).deleted_count
        if kind == "find_id":
            return "ok", encode_all(collection.find({"_id": arguments}))
        if kind == "find_ids":
            return "ok", encode_all(collection.find({"_id": {"$in": arguments}}))
        if kind == "find_range":
            return "ok", encode_all(collection.find({"createdAt": {"$gte": arguments}}).sort("_id", 1))
        if kind == "count":
            return "ok", collection.count_documents(arguments)
    except pymongo.errors.OperationFailure as error:
        return "error", error.code
    raise AssertionError("unknown operation " + kind)


def diagnose(archive, fast, oracle):
    """Which documents differ between the oracle and the tiers (fast first)."""
    def by_id(process):
        with client_for(process) as client:
            return {document["_id"]: document for document in client.shop.orders.find()}
    archived, held, truth = by_id(archive), by_id(fast), by_id(oracle)
    differences = []
    for identifier in sorted(set(archived) | set(held) | set(truth), key=repr):
        tiered = held.get(identifier, archived.get(identifier))
        if tiered != truth.get(identifier):
            differences.append((identifier, "oracle", truth.get(identifier), "fast", held.get(identifier),
                                "archive", archived.get(identifier)))
    return differences[:5]


def seed_data(archive, oracle, now, application=False):
    """400 documents in the archive (and the oracle) before the proxy starts,
    half inside the window: the warmer copies those while the test runs. With
    application, the application's indexes first, and emails on some documents."""
    rng = random.Random(99)
    documents = []
    for identifier in range(400):
        age = rng.randint(0, 8000) if identifier % 2 == 0 else rng.randint(8000, 60000)
        document = {"_id": identifier, "createdAt": now - datetime.timedelta(milliseconds=age),
                    "a": rng.randint(0, 40), "n": 0, "tags": [], "s": "seed"}
        if application:
            document["customer"] = "c%d" % rng.randint(0, 9)
            document["status"] = "new"
            if identifier % 8 == 0:
                document["email"] = "e%d@shop" % (identifier // 8)  # e0..e49: the pool's first part
        documents.append(document)
    for process in (archive, oracle):
        with MongoClient(process.uri) as client:
            if application:
                client.shop.orders.create_index("email", unique=True, sparse=True)
                client.shop.orders.create_index("customer")
                client.shop.orders.create_index("status", partialFilterExpression={"status": "new"})
            client.shop.orders.create_index("createdAt")
            client.shop.orders.insert_many(documents)
    return len(documents)


def run_against_oracle(tiered, single, workload, operations, seed, describe, before_operation=None,
                       run_tiered=run):
    """Runs the workload's operations on the tiered collection and on the oracle's;
    every reply must be identical (describe() tells the first difference's
    documents). before_operation(index), when given, runs before each and
    run_tiered runs the tiered side (the many-proxies test disturbs the proxies,
    and reconnects). Returns the count of each kind of operation, and of
    duplicate keys."""
    mismatches = []
    counts = {}
    for index in range(operations):
        if before_operation is not None:
            before_operation(index)
        kind, arguments = workload.next_operation(utc_now())
        counts[kind] = counts.get(kind, 0) + 1
        expected = run(single, kind, arguments)
        actual = run_tiered(tiered, kind, arguments)
        if expected == ("error", 11000):
            counts["duplicate key"] = counts.get("duplicate key", 0) + 1
        if actual != expected:
            mismatches.append((index, kind, arguments, expected, actual))
            if len(mismatches) == 1:
                mismatches.append(("diagnosis", describe()))
            if len(mismatches) >= 5:
                break
    assert not mismatches, "seed %d: replies differ from the oracle's:\n%s" % (
        seed, "\n".join(repr(item) for item in mismatches))
    return counts


def assert_converged(proxy, archive, fast, oracle, seed):
    """After quiescence (the feeder has applied everything, the warmer has
    finished) the archive equals the oracle (I1) and the fast tier holds exactly
    the window, newest versions only (I2, I6)."""
    wait_feeder(proxy, timeout=30)
    wait_warm(proxy, timeout=30)
    with client_for(archive) as archive_client, client_for(oracle) as oracle_client:
        archived = encode_all(archive_client.shop.orders.find().sort("_id", 1))
        truth = encode_all(oracle_client.shop.orders.find().sort("_id", 1))
    assert archived == truth, "seed %d: the archive differs from the oracle (I1): %d vs %d documents; %r" % (
        seed, len(archived), len(truth), diagnose(archive, fast, oracle))

    time.sleep(1.0)  # a few evictor periods
    now = utc_now()
    with client_for(fast) as fast_client, client_for(oracle) as oracle_client:
        held = {document["_id"]: bson.encode(document) for document in fast_client.shop.orders.find()}
        oracle_documents = list(oracle_client.shop.orders.find())
    by_id = {document["_id"]: document for document in oracle_documents}
    stale = [identifier for identifier, raw in held.items()
             if identifier not in by_id or bson.encode(by_id[identifier]) != raw]
    assert not stale, "seed %d: the fast tier holds deleted or old versions: %r" % (seed, stale[:10])
    horizon = now - datetime.timedelta(seconds=MAX_AGE_SECONDS - SLACK_SECONDS)
    # A document without a date in createdAt (an upsert makes some) is outside every
    # window: the evictor removes it once the archive holds it, as an aged one.
    missing = [document["_id"] for document in oracle_documents
               if in_window(document.get("createdAt"), horizon) and document["_id"] not in held]
    assert not missing, "seed %d: window documents missing from the fast tier: %r" % (seed, missing[:10])
    too_old = now - datetime.timedelta(seconds=MAX_AGE_SECONDS + 1.5)
    lingering = [identifier for identifier in held if by_id[identifier].get("createdAt", now) < too_old]
    assert not lingering, "seed %d: documents older than the window not evicted: %r" % (seed, lingering[:10])


@pytest.mark.parametrize("shape,seed", [("lab", seed) for seed in seeds()] +
                         [("application", seed) for seed in seeds("TIER_DIFF_APP_SEEDS", "13")])
def test_random_operations_match_one_server(replicated_tiers, tmp_path, shape, seed):
    archive, fast = replicated_tiers
    oracle = track(StoreProcess(tmp_path / "oracle")).start()
    operations = int(os.environ.get("TIER_DIFF_OPS", "700"))
    started = time.monotonic()
    proxy = None
    application = shape == "application"
    try:
        first_new_id = seed_data(archive, oracle, utc_now(), application)
        proxy = start_proxy(tmp_path / "proxy", archive, fast, max_age="%ds" % MAX_AGE_SECONDS,
                            slack="%dms" % int(SLACK_SECONDS * 1000), top={"readYourWritesWait": "20s"})
        workload = Workload(seed, first_new_id, application)
        with client_for(proxy) as proxy_client, client_for(oracle) as oracle_client:
            counts = run_against_oracle(proxy_client.shop.orders, oracle_client.shop.orders, workload,
                                        operations, seed, lambda: diagnose(archive, fast, oracle))
        if application:  # the mix must have made unique keys collide, or it proves nothing
            assert counts.get("duplicate key", 0) >= 5, counts
        assert_converged(proxy, archive, fast, oracle, seed)
        item = namespace_status(proxy)
        print("seed %d: %d operations in %.1f s %r; evicted %d, warmed %d, feeder %r" % (
            seed, operations, time.monotonic() - started, counts, item["evictor"]["evicted"],
            item["warmer"]["copied"], item["feeder"]))
    finally:
        if proxy is not None and proxy.is_alive():
            proxy.stop()
        oracle.stop()
