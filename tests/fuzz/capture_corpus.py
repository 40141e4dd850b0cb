#!/usr/bin/env python3
"""Builds the fuzzers' seed corpora from real driver traffic.

Starts `thermocline store` on a free loopback port with a temporary dbpath, puts a
small recording proxy in front of it, and runs a typical application workload
through the proxy with pymongo (3.11, plain and zlib-compressed), the Node.js driver
(tests/node/node_modules, plain and zlib) and mongosh. Every message a client sends
is recorded; afterwards the store and the proxy are stopped and the seeds written:

  corpus/wire_message/    whole client messages (OP_QUERY hello, OP_MSG, OP_COMPRESSED)
  corpus/op_compressed/   the zlib messages the drivers compressed, and other captured
                          messages wrapped with noop and snappy (no client here has
                          snappy; libsnappy itself compresses them)
  corpus/match/           filter || document   (filters of find, count, delete, update, ...)
  corpus/update/          update || document [|| arrayFilters]
  corpus/pipeline/        pipeline array || input documents
  corpus/index_keys/      key pattern (createIndexes keys, find sorts) || document

Usage: capture_corpus.py [--binary build/thermocline] [--out tests/fuzz/corpus]
The output directories are replaced. Needs /usr/bin/python3 with pymongo.
"""
import argparse
import ctypes
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import bson
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

REPOSITORY = Path(__file__).resolve().parents[2]
NODE_DIR = REPOSITORY / "tests" / "node"
RAW = CodecOptions(document_class=RawBSONDocument)

OP_QUERY, OP_COMPRESSED, OP_MSG = 2004, 2012, 2013
# Seeds kept per (target, shape); shapes are what makes two messages differ in kind.
PER_SHAPE = 2


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def recv_exactly(sock, count):
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


class RecordingProxy:
    """Relays loopback connections to the store and records every whole message a
    client sends, tagged with the client currently running."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.port = free_port()
        self.label = "unknown"
        self.messages = []  # (label, bytes)
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._client_to_server, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(upstream, client),
                             daemon=True).start()

    def _client_to_server(self, client, upstream):
        try:
            while True:
                prefix = recv_exactly(client, 4)
                if prefix is None:
                    break
                length = struct.unpack("<i", prefix)[0]
                rest = recv_exactly(client, length - 4)
                if rest is None:
                    break
                with self.lock:
                    self.messages.append((self.label, prefix + rest))
                upstream.sendall(prefix + rest)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @staticmethod
    def _server_to_client(upstream, client):
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self):
        self.stopping = True
        self.listener.close()


# ---- The workloads: what a typical application asks of its database --------------

def pymongo_workload(port, compressors):
    import datetime
    from bson.decimal128 import Decimal128
    from bson.int64 import Int64
    import pymongo
    from pymongo import InsertOne, UpdateOne, DeleteOne, ReplaceOne, ReturnDocument

    options = {"compressors": compressors} if compressors else {}
    client = pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000, **options)
    db = client["shop" if not compressors else "shop_zlib"]
    orders = db.orders
    orders.drop()
    base = datetime.datetime(2024, 3, 1, 12, 0, 0)
    documents = []
    for i in range(12):
        documents.append({
            "_id": i + 1,
            "status": ["pending", "shipped", "delivered", "cancelled"][i % 4],
            "created": base + datetime.timedelta(days=i, hours=i),
            "customer": {"name": ["Ann", "bob", "Chloé", "Dan"][i % 4],
                         "email": "c%d@example.com" % i, "age": 20 + i},
            "items": [{"sku": "A%d" % (i % 3), "qty": i % 4, "price": 9.5 + i},
                      {"sku": "B%d" % (i % 2), "qty": 1, "price": Decimal128("19.99")}],
            "tags": [["gift"], ["sale", "red"], [], ["red", "blue"]][i % 4],
            "total": [Decimal128("29.49"), 120.0, Int64(7), 55][i % 4],
            "flags": i,
            "history": [{"at": base, "event": "created"}],
            "note": None if i % 5 == 0 else "deliver after 5pm",
        })
    orders.insert_many(documents)
    orders.insert_one({"_id": "odd", "items": "none", "tags": {"0": "x"}, "total": float("nan")})
    orders.create_index([("status", pymongo.ASCENDING), ("created", pymongo.DESCENDING)])
    orders.create_index("items.sku")
    orders.create_index([("customer.email", 1)], unique=True, sparse=True)

    since = base + datetime.timedelta(days=3)
    filters = [
        {"status": "shipped"},
        {"total": {"$gte": 50}},
        {"tags": {"$in": ["gift", "sale"]}},
        {"items": {"$elemMatch": {"sku": "A1", "qty": {"$gt": 0}}}},
        {"customer.name": {"$regex": "^an", "$options": "i"}},
        {"$or": [{"status": "pending"}, {"total": {"$lt": 10}}]},
        {"note": {"$exists": False}},
        {"note": None},
        {"total": {"$type": "decimal"}},
        {"tags": {"$size": 2}},
        {"tags": {"$all": ["red", "blue"]}},
        {"created": {"$gte": since, "$lt": since + datetime.timedelta(days=4)}},
        {"flags": {"$mod": [3, 0]}},
        {"status": {"$nin": ["cancelled", "pending"]}},
        {"$and": [{"customer.age": {"$gt": 21}}, {"customer.age": {"$lte": 30}}]},
        {"$nor": [{"status": "shipped"}, {"tags": "red"}]},
        {"total": {"$not": {"$gt": 50}}},
        {"items.qty": {"$ne": 0}},
        {"items.1.price": Decimal128("19.99")},
        {"flags": {"$bitsAllSet": [0, 1]}},
        {"_id": {"$in": [1, 2, "odd"]}},
        {"customer": {"name": "Ann", "email": "c0@example.com", "age": 20}},
        {"customer.name": {"$regex": "é"}},
        {"tags": {"$elemMatch": {"$eq": "red"}}},
        {"$expr": {"$gt": ["$flags", 5]}},
    ]
    for query in filters:
        try:
            list(orders.find(query).limit(20))
        except pymongo.errors.OperationFailure:
            pass
    list(orders.find({}, {"customer": 1, "_id": 0}).sort("created", -1).limit(5))
    list(orders.find({"status": "shipped"}, {"items": {"$slice": 1}, "note": 0}))
    list(orders.find({}, {"items": {"$elemMatch": {"qty": {"$gte": 2}}}}).sort([("status", 1), ("_id", -1)]))
    list(orders.find({"status": {"$exists": True}}).skip(2).limit(3).batch_size(2))
    orders.count_documents({"status": "delivered"})
    orders.estimated_document_count()
    orders.distinct("status", {"total": {"$gt": 0}})

    # Writes: some fail on purpose (the odd document, changing _id), as in real use.
    writes = [
        lambda: orders.update_one({"_id": 1}, {"$set": {"status": "shipped", "shipped_at": since},
                                               "$inc": {"version": 1}}),
        lambda: orders.update_many({"status": "pending"}, {"$push": {"history": {
            "$each": [{"at": since, "event": "reminded"}], "$slice": -5}}}),
        lambda: orders.update_one({"_id": 2}, {"$addToSet": {"tags": {"$each": ["vip", "red"]}}}),
        lambda: orders.update_many({}, {"$pull": {"items": {"qty": 0}}}),
        lambda: orders.update_one({"_id": 3}, {"$unset": {"note": ""},
                                               "$rename": {"flags": "bits"}}),
        lambda: orders.update_one({"_id": 4}, {"$min": {"total": 10},
                                               "$max": {"customer.age": 40}}),
        lambda: orders.update_one({"_id": 5}, {"$mul": {"items.0.price": 1.1},
                                               "$currentDate": {"updated": True}}),
        lambda: orders.update_one({"_id": 6}, {"$pop": {"history": -1},
                                               "$bit": {"flags": {"or": 4}}}),
        lambda: orders.update_one({"_id": 7}, {"$set": {"items.$[it].qty": 5}},
                                  array_filters=[{"it.sku": {"$in": ["A1", "A2"]}}]),
        lambda: orders.update_many({"status": "delivered"}, {"$inc": {"items.$[].qty": 1}}),
        lambda: orders.update_one({"_id": 99}, {"$setOnInsert": {"created": since, "status": "new"},
                                                "$set": {"customer.name": "Eve"}}, upsert=True),
        lambda: orders.update_one({"status": "ghost", "customer.email": "ghost@example.com"},
                                  {"$set": {"seen": True}}, upsert=True),
        lambda: orders.replace_one({"_id": 8}, {"status": "replaced", "items": [], "total": 0}),
        lambda: orders.find_one_and_update({"status": "shipped"},
                                           {"$set": {"status": "delivered"}},
                                           sort=[("created", 1)], projection={"status": 1},
                                           return_document=ReturnDocument.AFTER),
        lambda: orders.find_one_and_replace({"_id": 9}, {"status": "swapped"}, upsert=True),
        lambda: orders.find_one_and_delete({"status": "cancelled"}, sort=[("_id", -1)]),
        lambda: orders.bulk_write([
            InsertOne({"_id": 100, "status": "bulk", "items": [{"sku": "Z", "qty": 2}]}),
            UpdateOne({"_id": 100}, {"$inc": {"items.0.qty": 3}}),
            ReplaceOne({"_id": 10}, {"status": "bulk-replaced"}),
            DeleteOne({"_id": 11})], ordered=False),
        lambda: orders.delete_many({"status": "bulk-replaced"}),
        lambda: orders.update_one({"_id": 1}, {"$set": {"_id": 2}}),
    ]
    for write in writes:
        try:
            write()
        except pymongo.errors.OperationFailure:
            pass

    pipelines = [
        [{"$match": {"status": {"$in": ["shipped", "delivered"]}}},
         {"$group": {"_id": "$status", "n": {"$sum": 1}, "revenue": {"$sum": "$total"},
                     "avg": {"$avg": "$total"}, "first": {"$first": "$created"},
                     "skus": {"$addToSet": "$items.sku"}}},
         {"$sort": {"n": -1}}],
        [{"$unwind": "$items"},
         {"$group": {"_id": "$items.sku", "qty": {"$sum": "$items.qty"},
                     "max": {"$max": "$items.price"}, "min": {"$min": "$items.price"}}}],
        [{"$unwind": {"path": "$tags", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": True}},
         {"$project": {"tags": 1, "i": 1}}],
        [{"$project": {"month": {"$month": "$created"}, "day": {"$dayOfWeek": "$created"},
                       "total": 1, "name": {"$toUpper": "$customer.name"}}}],
        [{"$addFields": {"tax": {"$multiply": ["$total", 0.2]},
                         "label": {"$concat": ["$status", "-", {"$toString": "$_id"}]}}},
         {"$limit": 3}],
        [{"$match": {"total": {"$exists": True}}}, {"$count": "n"}],
        [{"$match": {"customer": {"$type": "object"}}}, {"$replaceRoot": {"newRoot": "$customer"}}],
        [{"$set": {"size": {"$size": {"$ifNull": ["$tags", []]}},
                   "firstItem": {"$arrayElemAt": ["$items", 0]}}},
         {"$unset": ["history", "note"]}, {"$skip": 1}, {"$limit": 2}],
        [{"$project": {"bucket": {"$switch": {"branches": [
            {"case": {"$lt": ["$flags", 3]}, "then": "low"},
            {"case": {"$lt": ["$flags", 8]}, "then": "mid"}], "default": "high"}},
            "big": {"$cond": [{"$gte": ["$total", 100]}, True, False]},
            "short": {"$substrCP": ["$status", 0, 3]},
            "rounded": {"$round": ["$total", 1]}}}],
        [{"$sort": {"created": -1, "_id": 1}}, {"$limit": 4},
         {"$replaceWith": {"id": "$_id", "when": "$created"}}],
        [{"$group": {"_id": None, "names": {"$push": "$customer.name"}, "count": {"$sum": 1}}}],
    ]
    for pipeline in pipelines:
        try:
            list(orders.aggregate(pipeline))
        except pymongo.errors.OperationFailure:
            pass
    db.command("listCollections")
    orders.index_information()
    orders.drop_index("items.sku_1")
    client.admin.command("ping")
    client.close()


NODE_SCRIPT = r"""
const { MongoClient, Decimal128, Long } = require('mongodb');
(async () => {
  const client = new MongoClient(process.argv[1], { serverSelectionTimeoutMS: 10000 });
  await client.connect();
  const db = client.db(process.argv[2]);
  const events = db.collection('events');
  await events.drop().catch(() => {});
  const docs = [];
  for (let i = 0; i < 10; i++) {
    docs.push({ _id: i, kind: ['click', 'view', 'buy'][i % 3], at: new Date(Date.UTC(2024, 0, 1 + i)),
                user: { id: Long.fromNumber(1000 + i), country: ['FR', 'US', 'JP'][i % 3] },
                amount: i % 2 ? Decimal128.fromString('12.50') : i * 3.5,
                path: ['/', '/cart', '/checkout'].slice(0, 1 + i % 3), score: i % 4 === 0 ? null : i });
  }
  await events.insertMany(docs);
  await events.createIndex({ kind: 1, at: -1 });
  await events.createIndex({ 'user.country': 1, amount: -1 });
  await events.find({ kind: 'buy', amount: { $gt: 10 } }).sort({ at: -1 }).limit(3).toArray();
  await events.find({ path: { $all: ['/', '/cart'] } }, { projection: { path: 1 } }).toArray();
  await events.find({ 'user.country': { $in: ['FR', 'JP'] }, score: { $ne: null } }).toArray();
  await events.find({ at: { $lt: new Date(Date.UTC(2024, 0, 5)) } }).batchSize(2).toArray();
  await events.find({ $or: [{ score: { $gte: 7 } }, { kind: { $regex: /^v/ } }] }).toArray();
  await events.find({ score: { $type: 'null' } }).toArray();
  await events.findOne({ _id: 3 });
  await events.countDocuments({ kind: 'view' });
  await events.distinct('user.country');
  await events.updateOne({ _id: 1 }, { $set: { 'user.vip': true }, $inc: { score: 2 } });
  await events.updateMany({ kind: 'click' }, { $push: { path: '/thanks' }, $currentDate: { seen: { $type: 'timestamp' } } });
  await events.updateOne({ _id: 42 }, { $setOnInsert: { kind: 'new' }, $max: { score: 5 } }, { upsert: true });
  await events.updateOne({ _id: 2 }, { $pull: { path: { $in: ['/cart'] } }, $unset: { score: '' } });
  await events.updateMany({ path: { $type: 'array' } }, { $set: { 'path.$[p]': '/home' } }, { arrayFilters: [{ p: '/' }] });
  await events.replaceOne({ _id: 5 }, { kind: 'replaced', at: new Date(0) });
  await events.findOneAndUpdate({ kind: 'buy' }, { $inc: { amount: 1 } }, { returnDocument: 'after', sort: { _id: 1 } });
  await events.bulkWrite([{ insertOne: { document: { _id: 50, kind: 'bulk' } } },
                          { updateOne: { filter: { _id: 50 }, update: { $set: { done: true } } } },
                          { deleteOne: { filter: { _id: 0 } } }]);
  await events.aggregate([{ $match: { kind: { $ne: 'bulk' } } },
                          { $group: { _id: '$user.country', total: { $sum: '$amount' }, n: { $sum: 1 } } },
                          { $sort: { total: -1 } }]).toArray();
  await events.aggregate([{ $unwind: '$path' }, { $group: { _id: '$path', hits: { $sum: 1 } } },
                          { $project: { _id: 0, page: '$_id', hits: 1 } }]).toArray();
  await events.aggregate([{ $project: { year: { $year: '$at' }, hour: { $hour: '$at' }, kind: { $toLower: '$kind' } } },
                          { $limit: 5 }]).toArray();
  await events.deleteMany({ kind: 'replaced' });
  await db.command({ ping: 1 });
  await client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""

MONGOSH_SCRIPT = r"""
db = db.getSiblingDB('shell');
db.notes.drop();
db.notes.insertMany([{ _id: 1, title: 'hello', words: ['a', 'b'], stars: 3 },
                     { _id: 2, title: 'world', words: [], stars: NumberDecimal('4.5') },
                     { _id: 3, title: 'Hello again', meta: { lang: 'en', tags: ['x'] } }]);
db.notes.createIndex({ 'meta.lang': 1, stars: -1 });
db.notes.find({ title: /^hello/i }).sort({ stars: -1 }).toArray();
db.notes.find({ words: { $size: 0 } }, { title: 1 }).toArray();
db.notes.find({ 'meta.tags': 'x', stars: { $exists: false } }).toArray();
db.notes.updateOne({ _id: 1 }, { $addToSet: { words: 'c' }, $inc: { stars: 1 } });
db.notes.updateMany({ stars: { $lt: 5 } }, { $set: { reviewed: true } });
db.notes.findOneAndUpdate({ _id: 3 }, { $rename: { meta: 'info' } }, { returnNewDocument: true });
db.notes.aggregate([{ $match: { stars: { $gte: 3 } } }, { $group: { _id: null, avg: { $avg: '$stars' } } }]).toArray();
db.notes.countDocuments({});
db.notes.deleteOne({ _id: 2 });
db.adminCommand({ listDatabases: 1 });
print('done');
"""


def run_node(port, compressors, database):
    uri = "mongodb://127.0.0.1:%d/?directConnection=true" % port
    if compressors:
        uri += "&compressors=" + compressors
    subprocess.run(["node", "-e", NODE_SCRIPT, uri, database], cwd=str(NODE_DIR), check=True,
                   timeout=120)


def run_mongosh(port, compressors, home):
    uri = "mongodb://127.0.0.1:%d/shell?directConnection=true" % port
    if compressors:
        uri += "&compressors=" + compressors
    environment = dict(os.environ, HOME=str(home))
    subprocess.run([str(NODE_DIR / "node_modules" / ".bin" / "mongosh"), uri, "--quiet",
                    "--eval", MONGOSH_SCRIPT], check=True, timeout=180, env=environment,
                   stdout=subprocess.DEVNULL)


# ---- Turning recorded messages into seeds ------------------------------------

def snappy_compress(data):
    library = ctypes.CDLL("libsnappy.so.1")
    capacity = ctypes.c_size_t(library.snappy_max_compressed_length(ctypes.c_size_t(len(data))))
    output = ctypes.create_string_buffer(capacity.value)
    status = library.snappy_compress(data, ctypes.c_size_t(len(data)), output,
                                     ctypes.byref(capacity))
    if status != 0:
        raise RuntimeError("snappy_compress failed")
    return output.raw[:capacity.value]


def wrap_compressed(message, compressor_id):
    length, request_id, response_to, opcode = struct.unpack("<iiii", message[:16])
    body = message[16:]
    payload = {0: lambda b: b, 1: snappy_compress, 2: zlib.compress}[compressor_id](body)
    header = struct.pack("<iiii", 16 + 9 + len(payload), request_id, response_to, OP_COMPRESSED)
    return header + struct.pack("<iiB", opcode, len(body), compressor_id) + payload


def decompress(message):
    """The original message inside an OP_COMPRESSED (zlib or noop), else itself."""
    length, request_id, response_to, opcode = struct.unpack("<iiii", message[:16])
    if opcode != OP_COMPRESSED:
        return message
    original, size, compressor = struct.unpack("<iiB", message[16:25])
    payload = message[25:]
    body = zlib.decompress(payload) if compressor == 2 else payload
    return struct.pack("<iiii", 16 + size, request_id, response_to, original) + body


def command_of(message):
    """The command (a RawBSONDocument, sequences merged as lists) of an OP_MSG or an
    OP_QUERY, or None."""
    message = decompress(message)
    opcode = struct.unpack("<i", message[12:16])[0]
    if opcode == OP_QUERY:
        # flags, fullCollectionName, numberToSkip, numberToReturn, then the query
        position = message.index(b"\0", 20) + 1 + 8
        length = struct.unpack("<i", message[position:position + 4])[0]
        return bson.decode(message[position:position + length], RAW), {}
    if opcode != OP_MSG:
        return None, {}
    flags = struct.unpack("<I", message[16:20])[0]
    end = len(message) - (4 if flags & 1 else 0)
    position = 20
    body = None
    sequences = {}
    while position < end:
        kind = message[position]
        position += 1
        if kind == 0:
            length = struct.unpack("<i", message[position:position + 4])[0]
            body = bson.decode(message[position:position + length], RAW)
            position += length
        else:
            size = struct.unpack("<i", message[position:position + 4])[0]
            section_end = position + size
            name_end = message.index(b"\0", position + 4)
            name = message[position + 4:name_end].decode()
            cursor = name_end + 1
            documents = []
            while cursor < section_end:
                length = struct.unpack("<i", message[cursor:cursor + 4])[0]
                documents.append(RawBSONDocument(message[cursor:cursor + length]))
                cursor += length
            sequences[name] = documents
            position = section_end
    return body, sequences


def raw(value):
    """BSON bytes of a document, or of a list encoded as an array (same layout)."""
    if isinstance(value, RawBSONDocument):
        return value.raw
    if isinstance(value, list):
        return bson.encode({str(i): item for i, item in enumerate(value)})
    return bson.encode(value)


class Seeds:
    def __init__(self, out):
        self.out = out
        self.counts = {}
        self.seen = set()

    def add(self, target, shape, origin, data):
        key = (target, shape)
        if self.counts.get(key, 0) >= PER_SHAPE:
            return
        digest = hashlib.sha1(data).hexdigest()
        if (target, digest) in self.seen:
            return
        self.seen.add((target, digest))
        self.counts[key] = self.counts.get(key, 0) + 1
        directory = self.out / target
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ("%s-%s" % (origin, digest[:16]))).write_bytes(data)


def shape_of(document):
    """The field names and operators of a document, two levels down."""
    if isinstance(document, RawBSONDocument):
        return tuple((key, shape_of(document[key])) for key in document)
    if isinstance(document, list):
        return ("[]",) + tuple(shape_of(item) for item in document[:3])
    return type(document).__name__


def write_seeds(messages, out):
    for target in ("wire_message", "op_compressed", "match", "update", "pipeline", "index_keys"):
        shutil.rmtree(out / target, ignore_errors=True)
    seeds = Seeds(out)
    documents = {}  # label -> inserted documents, raw
    commands = []
    for label, message in messages:
        opcode = struct.unpack("<i", message[12:16])[0]
        body, sequences = command_of(message)
        name = next(iter(body), "none") if body is not None else "none"
        inner = struct.unpack("<i", decompress(message)[12:16])[0]
        if opcode == OP_COMPRESSED:
            seeds.add("op_compressed", (label, name), label + "-" + name, message)
        seeds.add("wire_message", (label, opcode, inner, tuple(body) if body is not None else None),
                  label + "-" + name, message)
        if body is None:
            continue
        commands.append((label, name, body, sequences))
        if name == "insert":
            inserted = sequences.get("documents", []) or list(body.get("documents", []))
            documents.setdefault(label, []).extend(inserted)

    # Captured commands (every 5th OP_MSG) wrapped with the compressors no client here used.
    wrapped = 0
    for index, (label, message) in enumerate(messages):
        opcode = struct.unpack("<i", message[12:16])[0]
        if opcode == OP_MSG and index % 5 == 0 and wrapped < 40:
            compressor = 1 if wrapped % 2 == 0 else 0
            name = next(iter(command_of(message)[0]), "none")
            seeds.add("op_compressed", (label, name, compressor),
                      "%s-%s-%s" % (label, name, "snappy" if compressor == 1 else "noop"),
                      wrap_compressed(message, compressor))
            wrapped += 1

    if not documents:
        raise RuntimeError("no insert captured")
    everything = [document for label in documents for document in documents[label]]

    def document_for(index):
        """An inserted document, preferably one the same client inserted."""
        pool = documents.get(label) or everything
        return pool[index % len(pool)].raw

    counter = 0
    for label, name, body, sequences in commands:
        counter += 1
        origin = "%s-%s" % (label, name)
        if name in ("find", "count", "distinct") and isinstance(body.get("filter", body.get("query")), RawBSONDocument):
            query = body.get("filter", body.get("query"))
            seeds.add("match", shape_of(query), origin, query.raw + document_for(counter))
            projection = body.get("projection")
            if isinstance(projection, RawBSONDocument) and len(list(projection)) > 0:
                seeds.add("match", ("projection", shape_of(projection)), origin + "-projection",
                          projection.raw + document_for(counter))
            sort = body.get("sort")
            if isinstance(sort, RawBSONDocument) and len(list(sort)) > 0:
                seeds.add("index_keys", ("sort", shape_of(sort)), origin + "-sort",
                          sort.raw + document_for(counter))
        if name in ("update", "delete"):
            statements = sequences.get("updates" if name == "update" else "deletes") or \
                list(body.get("updates" if name == "update" else "deletes", []))
            for statement in statements:
                seeds.add("match", shape_of(statement["q"]), origin, statement["q"].raw + document_for(counter))
                if name == "update" and isinstance(statement["u"], RawBSONDocument):
                    data = statement["u"].raw + document_for(counter)
                    if "arrayFilters" in statement:
                        data += raw(list(statement["arrayFilters"]))
                    seeds.add("update", shape_of(statement["u"]), origin, data)
                elif name == "update" and isinstance(statement["u"], list):
                    seeds.add("pipeline", shape_of(statement["u"]), origin + "-u",
                              raw(list(statement["u"])) + document_for(counter))
        if name == "findAndModify":
            query = body.get("query")
            if isinstance(query, RawBSONDocument):
                seeds.add("match", shape_of(query), origin, query.raw + document_for(counter))
            update = body.get("update")
            if isinstance(update, RawBSONDocument):
                seeds.add("update", shape_of(update), origin, update.raw + document_for(counter))
            sort = body.get("sort")
            if isinstance(sort, RawBSONDocument) and len(list(sort)) > 0:
                seeds.add("index_keys", ("sort", shape_of(sort)), origin + "-sort",
                          sort.raw + document_for(counter))
        if name == "aggregate" and isinstance(body.get("pipeline"), list):
            stages = list(body["pipeline"])
            inputs = b"".join(document_for(counter + k) for k in range(4))
            seeds.add("pipeline", shape_of(stages), origin, raw(stages) + inputs)
            for stage in stages:
                if "$match" in stage:
                    seeds.add("match", shape_of(stage["$match"]), origin + "-match",
                              stage["$match"].raw + document_for(counter))
        if name == "createIndexes":
            for index in list(body.get("indexes", [])):
                for k in range(3):
                    seeds.add("index_keys", ("index", shape_of(index["key"]), k), origin,
                              index["key"].raw + document_for(counter + k))
    return seeds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.environ.get("THERMOCLINE_BIN", "build/thermocline"))
    parser.add_argument("--out", default=str(REPOSITORY / "tests" / "fuzz" / "corpus"))
    arguments = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="thermocline-capture-"))
    store_port = free_port()
    log = open(work / "store.log", "wb")
    store = subprocess.Popen([arguments.binary, "store", "--port", str(store_port),
                              "--dbpath", str(work / "db"), "--bind", "127.0.0.1"],
                             stdout=log, stderr=subprocess.STDOUT, cwd=str(work))
    proxy = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", store_port), timeout=1).close()
                break
            except OSError:
                if store.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the store did not start; see %s" % (work / "store.log"))
                time.sleep(0.1)
        proxy = RecordingProxy(store_port)
        for label, action in [
            ("pymongo", lambda: pymongo_workload(proxy.port, None)),
            ("pymongo-zlib", lambda: pymongo_workload(proxy.port, "zlib")),
            ("node", lambda: run_node(proxy.port, None, "web")),
            ("node-zlib", lambda: run_node(proxy.port, "zlib", "web_zlib")),
            ("mongosh", lambda: run_mongosh(proxy.port, None, work)),
            ("mongosh-zlib", lambda: run_mongosh(proxy.port, "zlib", work)),
        ]:
            proxy.label = label
            action()
            time.sleep(0.5)  # let the last messages of a closing client arrive
            print("%-13s %5d messages recorded so far" % (label, len(proxy.messages)))
    finally:
        if proxy is not None:
            proxy.stop()
        store.terminate()
        store.wait(30)
        log.close()
        if store.returncode != 0:
            print((work / "store.log").read_text(errors="replace")[-3000:], file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    seeds = write_seeds(list(proxy.messages), Path(arguments.out))
    total_files = sum(seeds.counts.values())
    print("%d seed files written under %s" % (total_files, arguments.out))


if __name__ == "__main__":
    sys.exit(main())
