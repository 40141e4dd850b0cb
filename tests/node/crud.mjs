// A CRUD session with the Node.js driver against `thermocline store`, checked
// with node:assert against MongoDB 6.0's documented answers.
// Usage: node tests/node/crud.mjs mongodb://127.0.0.1:PORT/?directConnection=true
// Exits 0 and prints "crud.mjs: N passed, 0 failed" when every check holds.

import assert from 'node:assert/strict';
import { Long, MongoBulkWriteError, MongoClient, MongoServerError, ObjectId } from 'mongodb';

const uri = process.argv[2];
if (!uri) {
  console.error('usage: node crud.mjs MONGODB_URI');
  process.exit(2);
}

const checks = [];
function check(name, body) {
  checks.push({ name, body });
}

async function expectServerError(promise, code) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof MongoServerError, `expected MongoServerError, got ${error}`);
    assert.equal(error.code, code, `expected code ${code}, got ${error.code}: ${error.message}`);
    return true;
  });
}

function winningPlanStages(explained) {
  const stages = [];
  const pending = [explained.queryPlanner.winningPlan];
  while (pending.length > 0) {
    const node = pending.pop();
    if (Array.isArray(node)) {
      pending.push(...node);
    } else if (node && typeof node === 'object') {
      if (typeof node.stage === 'string') stages.push(node);
      pending.push(...Object.values(node));
    }
  }
  return stages;
}

const client = new MongoClient(uri, {
  serverSelectionTimeoutMS: 10000,
  connectTimeoutMS: 5000,
  socketTimeoutMS: 30000,
  retryWrites: false,
});
const db = client.db('node_crud');

async function seedItems() {
  const items = db.collection('items');
  await items.drop().catch(() => {});
  await items.insertMany(
    Array.from({ length: 20 }, (_, n) => ({
      _id: n,
      n,
      group: n % 3,
      name: `item${String(n).padStart(2, '0')}`,
      tags: n % 2 === 0 ? ['even'] : ['odd'],
    })),
  );
  return items;
}

check('hello and ping', async () => {
  const ping = await db.admin().command({ ping: 1 });
  assert.equal(ping.ok, 1);
  const hello = await db.admin().command({ hello: 1 });
  assert.equal(hello.isWritablePrimary, true);
  assert.equal(hello.maxWireVersion, 17);
});

check('insertOne generates an ObjectId and round-trips types', async () => {
  const coll = db.collection('types');
  const document = {
    int: 7,
    long: Long.fromString('1099511627776'),
    double: 2.5,
    string: 'héllo',
    bool: true,
    nil: null,
    date: new Date('2024-02-29T12:30:45.123Z'),
    nested: { a: [1, { b: [2, 3] }] },
  };
  const result = await coll.insertOne(document);
  assert.ok(result.insertedId instanceof ObjectId);
  const stored = await coll.findOne({ _id: result.insertedId }, { promoteLongs: false });
  assert.deepEqual(Object.keys(stored), ['_id', 'int', 'long', 'double', 'string', 'bool', 'nil',
    'date', 'nested']);
  assert.equal(stored.long.toString(), '1099511627776');
  assert.equal(stored.date.getTime(), document.date.getTime());
  assert.deepEqual(stored.nested, document.nested);
  assert.equal(stored.string, 'héllo');
});

check('insertMany ordered stops at the duplicate', async () => {
  const coll = db.collection('dups_ordered');
  await coll.insertOne({ _id: 1 });
  await assert.rejects(coll.insertMany([{ _id: 2 }, { _id: 1 }, { _id: 3 }]), (error) => {
    assert.ok(error instanceof MongoBulkWriteError);
    assert.equal(error.code, 11000);
    assert.equal(error.insertedCount, 1);
    assert.equal(error.writeErrors.length, 1);
    assert.equal(error.writeErrors[0].index, 1);
    assert.equal(error.writeErrors[0].code, 11000);
    assert.match(error.writeErrors[0].errmsg, /^E11000 duplicate key error collection: node_crud\.dups_ordered index: _id_ dup key: \{ _id: 1 \}/);
    return true;
  });
  const ids = (await coll.find().sort({ _id: 1 }).toArray()).map((d) => d._id);
  assert.deepEqual(ids, [1, 2]);
});

check('insertMany unordered continues past duplicates', async () => {
  const coll = db.collection('dups_unordered');
  await coll.insertOne({ _id: 1 });
  await assert.rejects(
    coll.insertMany([{ _id: 2 }, { _id: 1 }, { _id: 3 }, { _id: 2 }], { ordered: false }),
    (error) => {
      assert.ok(error instanceof MongoBulkWriteError);
      assert.equal(error.insertedCount, 2);
      assert.deepEqual(error.writeErrors.map((e) => e.index), [1, 3]);
      assert.ok(error.writeErrors.every((e) => e.code === 11000));
      return true;
    },
  );
  assert.equal(await coll.countDocuments(), 3);
});

check('find with filter, sort, projection, skip and limit', async () => {
  const items = await seedItems();
  const group1 = await items.find({ group: 1 }).sort({ n: -1 }).toArray();
  assert.deepEqual(group1.map((d) => d.n), [19, 16, 13, 10, 7, 4, 1]);
  const page = await items.find({}, { projection: { name: 1, _id: 0 } })
    .sort({ n: 1 }).skip(5).limit(3).toArray();
  assert.deepEqual(page, [{ name: 'item05' }, { name: 'item06' }, { name: 'item07' }]);
  const ranged = await items.find({ n: { $gte: 5, $lt: 8 } }).sort({ _id: 1 }).toArray();
  assert.deepEqual(ranged.map((d) => d._id), [5, 6, 7]);
  const either = await items.find({ $or: [{ n: 0 }, { name: 'item11' }] }).sort({ _id: 1 })
    .toArray();
  assert.deepEqual(either.map((d) => d._id), [0, 11]);
  assert.equal(await items.findOne({ _id: 404 }), null);
});

check('a cursor over many getMore batches returns every _id once, in order', async () => {
  const coll = db.collection('big');
  const ids = Array.from({ length: 3000 }, (_, i) => (i * 7919) % 3000);
  await coll.insertMany(ids.map((_id) => ({ _id, payload: 'x'.repeat(20) })));
  let getMores = 0;
  const counter = (event) => {
    if (event.commandName === 'getMore') getMores += 1;
  };
  const monitored = new MongoClient(uri, { serverSelectionTimeoutMS: 10000, monitorCommands: true });
  monitored.on('commandSucceeded', counter);
  try {
    const seen = [];
    const cursor = monitored.db('node_crud').collection('big').find({}).sort({ _id: 1 }).batchSize(101);
    for await (const doc of cursor) seen.push(doc._id);
    assert.equal(seen.length, 3000);
    assert.ok(seen.every((id, index) => id === index), 'ids out of order or missing');
    assert.equal(getMores, 29); // 101 in the first batch, then 29 getMores of up to 101
  } finally {
    await monitored.close();
  }
});

check('updateOne, updateMany with $set $inc $push $unset', async () => {
  const items = await seedItems();
  const one = await items.updateOne({ _id: 4 }, { $set: { name: 'four' }, $inc: { n: 10 } });
  assert.equal(one.matchedCount, 1);
  assert.equal(one.modifiedCount, 1);
  assert.deepEqual(await items.findOne({ _id: 4 }, { projection: { name: 1, n: 1 } }),
    { _id: 4, name: 'four', n: 14 });
  const many = await items.updateMany({ group: 2 }, { $inc: { n: 100 } });
  assert.equal(many.matchedCount, 6);
  assert.equal(many.modifiedCount, 6);
  await items.updateOne({ _id: 0 }, { $push: { tags: 'zero' }, $unset: { group: '' } });
  assert.deepEqual(await items.findOne({ _id: 0 }),
    { _id: 0, n: 0, name: 'item00', tags: ['even', 'zero'] });
  const none = await items.updateOne({ _id: 404 }, { $set: { x: 1 } });
  assert.equal(none.matchedCount, 0);
  await expectServerError(items.updateOne({ _id: 1 }, { $set: { _id: 5 } }), 66);
  await expectServerError(items.updateOne({ _id: 1 }, { $inc: { name: 1 } }), 14);
});

check('replaceOne and upserts', async () => {
  const items = await seedItems();
  const replaced = await items.replaceOne({ _id: 7 }, { only: 'this' });
  assert.equal(replaced.modifiedCount, 1);
  assert.deepEqual(await items.findOne({ _id: 7 }), { _id: 7, only: 'this' });
  const upserted = await items.updateOne({ name: 'new' }, { $set: { v: 1 } }, { upsert: true });
  assert.equal(upserted.upsertedCount, 1);
  assert.ok(upserted.upsertedId instanceof ObjectId);
  assert.deepEqual(await items.findOne({ _id: upserted.upsertedId }),
    { _id: upserted.upsertedId, name: 'new', v: 1 });
  const fixed = await items.replaceOne({ _id: 'fixed' }, { v: 2 }, { upsert: true });
  assert.equal(fixed.upsertedId, 'fixed');
});

check('deleteOne, deleteMany, countDocuments, estimatedDocumentCount, distinct', async () => {
  const items = await seedItems();
  assert.equal((await items.deleteOne({ group: 0 })).deletedCount, 1);
  assert.equal((await items.deleteMany({ group: 1 })).deletedCount, 7);
  assert.equal(await items.countDocuments(), 12);
  assert.equal(await items.countDocuments({ group: 2 }), 6);
  assert.equal(await items.countDocuments({}, { skip: 10 }), 2);
  assert.equal(await items.estimatedDocumentCount(), 12);
  assert.deepEqual((await items.distinct('group')).sort(), [0, 2]);
  assert.deepEqual((await items.distinct('tags')).sort(), ['even', 'odd']);
});

check('aggregate with $match $group $sort $project $unwind $count', async () => {
  const items = await seedItems();
  const grouped = await items.aggregate([
    { $match: { n: { $lt: 10 } } },
    { $group: { _id: '$group', total: { $sum: '$n' }, count: { $sum: 1 } } },
    { $sort: { _id: 1 } },
  ]).toArray();
  assert.deepEqual(grouped, [
    { _id: 0, total: 18, count: 4 },
    { _id: 1, total: 12, count: 3 },
    { _id: 2, total: 15, count: 3 },
  ]);
  const projected = await items.aggregate([
    { $match: { _id: 3 } },
    { $project: { _id: 0, double: { $multiply: ['$n', 2] }, name: 1 } },
  ]).toArray();
  assert.deepEqual(projected, [{ name: 'item03', double: 6 }]);
  const counted = await items.aggregate([{ $unwind: '$tags' }, { $match: { tags: 'odd' } },
    { $count: 'odds' }]).toArray();
  assert.deepEqual(counted, [{ odds: 10 }]);
});

check('createIndex (unique too), listIndexes, explain, dropIndex', async () => {
  const items = await seedItems();
  assert.equal(await items.createIndex({ n: 1 }), 'n_1');
  assert.equal(await items.createIndex({ name: 1 }, { unique: true }), 'name_1');
  const indexes = await items.listIndexes().toArray();
  assert.deepEqual(indexes.map((i) => i.name).sort(), ['_id_', 'n_1', 'name_1']);
  assert.equal(indexes.find((i) => i.name === 'name_1').unique, true);
  await expectServerError(items.insertOne({ _id: 100, name: 'item01' }), 11000);
  const explained = await items.find({ n: { $gte: 15 } }).explain();
  const ixscan = winningPlanStages(explained).find((s) => s.stage === 'IXSCAN');
  assert.ok(ixscan, `no IXSCAN in ${JSON.stringify(explained.queryPlanner.winningPlan)}`);
  assert.equal(ixscan.indexName, 'n_1');
  await items.dropIndex('n_1');
  assert.deepEqual((await items.listIndexes().toArray()).map((i) => i.name).sort(),
    ['_id_', 'name_1']);
  await expectServerError(items.dropIndex('n_1'), 27);
});

check('findOneAndUpdate and findOneAndDelete', async () => {
  const items = await seedItems();
  const before = await items.findOneAndUpdate({ _id: 1 }, { $inc: { n: 5 } });
  assert.equal(before.n, 1);
  const after = await items.findOneAndUpdate({ _id: 1 }, { $inc: { n: 5 } },
    { returnDocument: 'after' });
  assert.equal(after.n, 11);
  const deleted = await items.findOneAndDelete({ group: 1 }, { sort: { n: -1 } });
  assert.equal(deleted._id, 19);
  assert.equal(await items.findOne({ _id: 19 }), null);
  assert.equal(await items.findOneAndDelete({ _id: 404 }), null);
});

check('collections and databases: list, drop, dropDatabase', async () => {
  const other = client.db('node_other');
  await other.collection('a').insertOne({ x: 1 });
  await other.createCollection('b');
  const names = (await other.listCollections({}, { nameOnly: true }).toArray())
    .map((c) => c.name).sort();
  assert.deepEqual(names, ['a', 'b']);
  assert.equal(await other.collection('a').drop(), true);
  assert.deepEqual((await other.listCollections().toArray()).map((c) => c.name), ['b']);
  const databases = (await client.db().admin().listDatabases()).databases.map((d) => d.name);
  assert.ok(databases.includes('node_other'));
  assert.equal(await other.dropDatabase(), true);
  const after = (await client.db().admin().listDatabases()).databases.map((d) => d.name);
  assert.ok(!after.includes('node_other'));
});

check('collStats and dbStats', async () => {
  const items = await seedItems();
  const stats = await db.command({ collStats: 'items' });
  assert.equal(stats.ns, 'node_crud.items');
  assert.equal(stats.count, 20);
  assert.ok(stats.size > 0);
  assert.equal(stats.nindexes, 1);
  const dbStats = await db.stats();
  assert.equal(dbStats.db, 'node_crud');
  assert.ok(dbStats.collections >= 1);
  assert.ok(dbStats.objects >= 20);
  assert.ok(items);
});

check('a $jsonSchema validator refuses with 121 and its reasons; $jsonSchema in a filter', async () => {
  const items = await seedItems();
  await db.collection('customers').drop().catch(() => {});
  const customers = await db.createCollection('customers', { validator: { $jsonSchema: {
    bsonType: 'object', required: ['name', 'tier'],
    properties: { name: { bsonType: 'string', minLength: 1 }, tier: { enum: ['gold', 'silver'] } },
  } } });
  await customers.insertOne({ _id: 1, name: 'Ada', tier: 'gold' });
  await assert.rejects(customers.insertOne({ _id: 2, name: '', tier: 'bronze' }), (error) => {
    assert.ok(error instanceof MongoServerError, `expected MongoServerError, got ${error}`);
    assert.equal(error.code, 121);
    assert.deepEqual(error.errInfo, { failingDocumentId: 2, details: {
      operatorName: '$jsonSchema',
      schemaRulesNotSatisfied: [{ operatorName: 'properties', propertiesNotSatisfied: [
        { propertyName: 'name', details: [{ operatorName: 'minLength', specifiedAs: { minLength: 1 },
          reason: 'specified string length was not satisfied', consideredValue: '' }] },
        { propertyName: 'tier', details: [{ operatorName: 'enum', specifiedAs: { enum: ['gold', 'silver'] },
          reason: 'value was not found in enum', consideredValue: 'bronze' }] },
      ] }],
    } });
    return true;
  });
  assert.equal(await customers.countDocuments(), 1);
  const schema = { required: ['name'], properties: { n: { minimum: 15 }, tags: { items: { enum: ['even'] } } } };
  const ids = (await items.find({ $jsonSchema: schema }).sort({ _id: 1 }).toArray()).map((doc) => doc._id);
  assert.deepEqual(ids, [16, 18]);
  assert.equal(await items.countDocuments({ $nor: [{ $jsonSchema: schema }] }), 18);
  await customers.drop();
});

check('command errors: CommandNotFound, CursorNotFound, TypeMismatch', async () => {
  await seedItems();
  await expectServerError(db.command({ thisCommandDoesNotExist: 1 }), 59);
  await expectServerError(db.command({ getMore: Long.fromNumber(123456789), collection: 'items' }),
    43);
  await expectServerError(db.command({ find: 'items', filter: 'not a document' }), 14);
  const killed = await db.command({ killCursors: 'items', cursors: [Long.fromNumber(987654321)] });
  assert.deepEqual(killed.cursorsNotFound.map(Number), [987654321]);
});

let passed = 0;
let failed = 0;
try {
  await client.connect();
  for (const { name, body } of checks) {
    try {
      await body();
      passed += 1;
      console.log(`ok - ${name}`);
    } catch (error) {
      failed += 1;
      console.log(`not ok - ${name}\n  ${String(error && error.stack ? error.stack : error).replace(/\n/g, '\n  ')}`);
    }
  }
} catch (error) {
  failed += 1;
  console.log(`not ok - connect\n  ${error}`);
} finally {
  await client.close().catch(() => {});
}
console.log(`crud.mjs: ${passed} passed, ${failed} failed`);
process.exitCode = failed === 0 && passed === checks.length ? 0 : 1;
