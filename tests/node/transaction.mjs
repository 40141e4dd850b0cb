// Multi-document transactions with the Node.js driver's session.withTransaction
// against `thermocline store --replSet`, checked with node:assert.
// Usage: node tests/node/transaction.mjs URI
//   prints "transaction.mjs: N passed, 0 failed" when every check holds.

import assert from 'node:assert/strict';
import { MongoClient, MongoServerError } from 'mongodb';

const uri = process.argv[2];
if (!uri) {
  console.error('usage: node transaction.mjs MONGODB_URI');
  process.exit(2);
}

const client = new MongoClient(uri, {
  serverSelectionTimeoutMS: 20000,
  connectTimeoutMS: 5000,
  socketTimeoutMS: 30000,
});
const db = client.db('node_txn');

const checks = [];
function check(name, body) {
  checks.push({ name, body });
}

check('withTransaction commits every write at once, invisible before', async () => {
  const accounts = db.collection('accounts');
  await accounts.insertMany([{ _id: 'a', balance: 10 }, { _id: 'b', balance: 0 }]);
  const session = client.startSession();
  let outside = null;
  try {
    await session.withTransaction(async () => {
      await accounts.updateOne({ _id: 'a' }, { $inc: { balance: -4 } }, { session });
      await accounts.updateOne({ _id: 'b' }, { $inc: { balance: 4 } }, { session });
      await db.collection('log').insertOne({ moved: 4 }, { session });
      const inside = await accounts.findOne({ _id: 'a' }, { session });
      assert.equal(inside.balance, 6);
      outside = await accounts.find({}).sort({ _id: 1 }).toArray();
    });
  } finally {
    await session.endSession();
  }
  assert.deepEqual(outside.map((d) => d.balance), [10, 0]);
  const after = await accounts.find({}).sort({ _id: 1 }).toArray();
  assert.deepEqual(after.map((d) => d.balance), [6, 4]);
  assert.equal(await db.collection('log').countDocuments({}), 1);
});

check('a callback that throws aborts: nothing is written', async () => {
  const items = db.collection('items');
  const session = client.startSession();
  try {
    await assert.rejects(
      session.withTransaction(async () => {
        await items.insertOne({ _id: 1 }, { session });
        throw new Error('changed my mind');
      }),
      /changed my mind/,
    );
  } finally {
    await session.endSession();
  }
  assert.equal(await items.countDocuments({}), 0);
});

check('a conflicting transaction is retried by withTransaction until it commits', async () => {
  const counter = db.collection('counter');
  await counter.insertOne({ _id: 1, n: 0 });
  const holder = client.startSession();
  holder.startTransaction();
  await counter.updateOne({ _id: 1 }, { $inc: { n: 1 } }, { session: holder });
  const session = client.startSession();
  let attempts = 0;
  try {
    await session.withTransaction(async () => {
      attempts += 1;
      if (attempts === 2) await holder.commitTransaction();
      await counter.updateOne({ _id: 1 }, { $inc: { n: 10 } }, { session });
    });
  } finally {
    await session.endSession();
    await holder.endSession();
  }
  assert.ok(attempts >= 2, `attempts: ${attempts}`);
  assert.equal((await counter.findOne({ _id: 1 })).n, 11);
});

check('count is not allowed in a transaction (OperationNotSupportedInTransaction)', async () => {
  const session = client.startSession();
  try {
    session.startTransaction();
    await db.collection('items').insertOne({ _id: 'x' }, { session });
    await assert.rejects(db.command({ count: 'items' }, { session }), (error) => {
      assert.ok(error instanceof MongoServerError);
      assert.equal(error.code, 263);
      assert.equal(error.codeName, 'OperationNotSupportedInTransaction');
      return true;
    });
    await session.commitTransaction(); // the refused command left the transaction open
  } finally {
    await session.endSession();
  }
  assert.equal(await db.collection('items').countDocuments({ _id: 'x' }), 1);
});

async function runChecks() {
  let passed = 0;
  let failed = 0;
  await db.dropDatabase();
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
  console.log(`transaction.mjs: ${passed} passed, ${failed} failed`);
  return failed === 0 && passed === checks.length;
}

let ok = false;
try {
  await client.connect();
  ok = await runChecks();
} catch (error) {
  console.log(`not ok - setup\n  ${String(error && error.stack ? error.stack : error).replace(/\n/g, '\n  ')}`);
} finally {
  await client.close().catch(() => {});
}
process.exitCode = ok ? 0 : 1;
