// Change streams with the Node.js driver against `thermocline store --replSet`,
// checked with node:assert against MongoDB 6.0's documented behaviour.
// Usage: node tests/node/change_stream.mjs URI [resume]
//   without "resume": runs the checks below and prints
//     "change_stream.mjs: N passed, 0 failed" when every check holds;
//   with "resume": opens a stream on node_cs.resume, prints "ready", then expects
//     the 10 inserts {_id: 0..9} a test makes while it restarts the server, each
//     exactly once, in order (the driver resumes by itself), and prints "resumed ok".

import assert from 'node:assert/strict';
import { MongoClient, MongoServerError, Timestamp } from 'mongodb';

const uri = process.argv[2];
const mode = process.argv[3] || 'checks';
if (!uri) {
  console.error('usage: node change_stream.mjs MONGODB_URI [resume]');
  process.exit(2);
}

const client = new MongoClient(uri, {
  serverSelectionTimeoutMS: 20000,
  connectTimeoutMS: 5000,
  socketTimeoutMS: 30000,
});
const db = client.db('node_cs');

// Reads count events, failing after timeoutMs.
async function nextEvents(stream, count, timeoutMs = 10000) {
  const events = [];
  const deadline = Date.now() + timeoutMs;
  while (events.length < count) {
    assert.ok(Date.now() < deadline, `only ${events.length} of ${count} events: ${JSON.stringify(events)}`);
    const event = await stream.tryNext();
    if (event !== null) events.push(event);
  }
  return events;
}

const checks = [];
function check(name, body) {
  checks.push({ name, body });
}

check('hello reports lastWrite and replies carry operationTime', async () => {
  const hello = await db.admin().command({ hello: 1 });
  assert.equal(hello.setName, 'rs0');
  assert.ok(hello.lastWrite.opTime.ts instanceof Timestamp);
  const ping = await db.command({ ping: 1 });
  assert.ok(ping.operationTime instanceof Timestamp);
  assert.ok(ping.$clusterTime.clusterTime instanceof Timestamp);
});

check('watch() sees insert, update, replace and delete in order', async () => {
  const coll = db.collection('orders');
  const stream = coll.watch([], { maxAwaitTimeMS: 200 });
  await stream.tryNext(); // opens the cursor before the writes
  await coll.insertOne({ _id: 1, a: 1, list: [1, 2, 3] });
  await coll.updateOne({ _id: 1 }, { $set: { 'b.c': 'x' }, $unset: { a: '' }, $pop: { list: 1 } });
  await coll.replaceOne({ _id: 1 }, { replaced: true });
  await coll.deleteOne({ _id: 1 });
  const events = await nextEvents(stream, 4);
  await stream.close();
  assert.deepEqual(events.map((e) => e.operationType), ['insert', 'update', 'replace', 'delete']);
  const [insert, update, replace, remove] = events;
  assert.deepEqual(insert.fullDocument, { _id: 1, a: 1, list: [1, 2, 3] });
  assert.deepEqual(insert.ns, { db: 'node_cs', coll: 'orders' });
  assert.deepEqual(insert.documentKey, { _id: 1 });
  assert.ok(insert.wallTime instanceof Date);
  assert.deepEqual(update.updateDescription.updatedFields, { b: { c: 'x' }, list: [1, 2] });
  assert.deepEqual(update.updateDescription.removedFields, ['a']);
  assert.deepEqual(update.updateDescription.truncatedArrays, []);
  assert.equal(update.fullDocument, undefined);
  assert.deepEqual(replace.fullDocument, { _id: 1, replaced: true });
  assert.deepEqual(remove.documentKey, { _id: 1 });
  const tokens = events.map((e) => e._id._data);
  assert.deepEqual([...tokens].sort(), tokens);
});

check('a pipeline update that shortens an array: truncatedArrays', async () => {
  const coll = db.collection('truncated');
  await coll.insertOne({ _id: 1, array: ['foo', { a: 'bar' }, 1, 2, 3] });
  const stream = coll.watch([], { maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.updateOne({ _id: 1 }, [{ $set: { array: ['foo', { a: 'bar' }] } }]);
  const [event] = await nextEvents(stream, 1);
  await stream.close();
  assert.equal(event.operationType, 'update');
  assert.deepEqual(event.updateDescription, {
    updatedFields: {}, removedFields: [], truncatedArrays: [{ field: 'array', newSize: 2 }],
  });
});

check('collMod changeStreamPreAndPostImages: images required for insert, update, replace, delete', async () => {
  await db.createCollection('imaged');
  await db.command({ collMod: 'imaged', changeStreamPreAndPostImages: { enabled: true } });
  const [info] = await db.listCollections({ name: 'imaged' }).toArray();
  assert.deepEqual(info.options, { changeStreamPreAndPostImages: { enabled: true } });
  const coll = db.collection('imaged');
  const stream = coll.watch([], {
    fullDocument: 'required', fullDocumentBeforeChange: 'required', maxAwaitTimeMS: 200,
  });
  await stream.tryNext();
  await coll.insertOne({ _id: 1, v: 1 });
  await coll.updateOne({ _id: 1 }, { $inc: { v: 1 } });
  await coll.replaceOne({ _id: 1 }, { w: 'replaced' });
  await coll.deleteOne({ _id: 1 });
  const [insert, update, replace, remove] = await nextEvents(stream, 4);
  await stream.close();
  assert.deepEqual(insert.fullDocument, { _id: 1, v: 1 });
  assert.equal(insert.fullDocumentBeforeChange, undefined);
  assert.deepEqual(update.fullDocumentBeforeChange, { _id: 1, v: 1 });
  assert.deepEqual(update.fullDocument, { _id: 1, v: 2 });
  assert.deepEqual(replace.fullDocumentBeforeChange, { _id: 1, v: 2 });
  assert.deepEqual(replace.fullDocument, { _id: 1, w: 'replaced' });
  assert.deepEqual(remove.fullDocumentBeforeChange, { _id: 1, w: 'replaced' });
  assert.equal(remove.fullDocument, undefined);
});

check('a required pre-image that was not kept: NoMatchingDocument', async () => {
  const coll = db.collection('not_imaged');
  await coll.insertOne({ _id: 1 });
  const stream = coll.watch([], { fullDocumentBeforeChange: 'required', maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.deleteOne({ _id: 1 });
  await assert.rejects(nextEvents(stream, 1), (error) => {
    assert.equal(error.code, 47);
    assert.equal(error.codeName, 'NoMatchingDocument');
    return true;
  });
  await stream.close().catch(() => {});
});

check('showExpandedEvents: create, createIndexes, modify, dropIndexes with collectionUUID', async () => {
  const stream = db.collection('expanded').watch([], { showExpandedEvents: true, maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await db.createCollection('expanded');
  const coll = db.collection('expanded');
  await coll.createIndex({ a: 1 });
  await db.command({ collMod: 'expanded', index: { name: 'a_1', hidden: true } });
  await coll.dropIndex('a_1');
  const events = await nextEvents(stream, 4);
  await stream.close();
  assert.deepEqual(events.map((e) => e.operationType), ['create', 'createIndexes', 'modify', 'dropIndexes']);
  const [info] = await db.listCollections({ name: 'expanded' }).toArray();
  for (const event of events) {
    assert.equal(event.collectionUUID.toString('hex'), info.info.uuid.toString('hex'));
    assert.deepEqual(event.ns, { db: 'node_cs', coll: 'expanded' });
  }
  assert.deepEqual(events[0].operationDescription, { idIndex: { v: 2, key: { _id: 1 }, name: '_id_' } });
  assert.deepEqual(events[1].operationDescription, { indexes: [{ v: 2, key: { a: 1 }, name: 'a_1' }] });
  assert.deepEqual(events[2].operationDescription, { index: { name: 'a_1', hidden: true } });
  assert.deepEqual(events[2].stateBeforeChange.indexOptions, { hidden: false });
  assert.deepEqual(events[3].operationDescription,
    { indexes: [{ v: 2, key: { a: 1 }, name: 'a_1', hidden: true }] });
});

check('fullDocument: updateLookup', async () => {
  const coll = db.collection('lookup');
  await coll.insertOne({ _id: 'k', n: 1 });
  const stream = coll.watch([], { fullDocument: 'updateLookup', maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.updateOne({ _id: 'k' }, { $inc: { n: 41 } });
  const [event] = await nextEvents(stream, 1);
  await stream.close();
  assert.equal(event.operationType, 'update');
  assert.deepEqual(event.fullDocument, { _id: 'k', n: 42 });
});

check('a $match on operationType', async () => {
  const coll = db.collection('matched');
  const stream = coll.watch([{ $match: { operationType: { $in: ['insert', 'delete'] } } }],
    { maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.insertOne({ _id: 1 });
  await coll.updateOne({ _id: 1 }, { $set: { x: 1 } });
  await coll.deleteOne({ _id: 1 });
  const events = await nextEvents(stream, 2);
  assert.equal(await stream.tryNext(), null);
  await stream.close();
  assert.deepEqual(events.map((e) => e.operationType), ['insert', 'delete']);
});

check('resumeAfter and startAfter deliver what follows the token, once', async () => {
  const coll = db.collection('resumable');
  const stream = coll.watch([], { maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.insertMany([{ _id: 1 }, { _id: 2 }, { _id: 3 }]);
  const [first] = await nextEvents(stream, 1);
  await stream.close();
  for (const option of ['resumeAfter', 'startAfter']) {
    const resumed = coll.watch([], { [option]: first._id, maxAwaitTimeMS: 200 });
    const rest = await nextEvents(resumed, 2);
    assert.equal(await resumed.tryNext(), null);
    await resumed.close();
    assert.deepEqual(rest.map((e) => e.documentKey._id), [2, 3]);
  }
});

check('database stream and cluster stream', async () => {
  const dbStream = db.watch([], { maxAwaitTimeMS: 200 });
  const clusterStream = client.watch([], { maxAwaitTimeMS: 200 });
  await dbStream.tryNext();
  await clusterStream.tryNext();
  await db.collection('one').insertOne({ _id: 'a' });
  await client.db('node_cs_other').collection('two').insertOne({ _id: 'b' });
  const [dbEvent] = await nextEvents(dbStream, 1);
  const clusterEvents = await nextEvents(clusterStream, 2);
  assert.equal(await dbStream.tryNext(), null);
  await dbStream.close();
  await clusterStream.close();
  assert.deepEqual(dbEvent.ns, { db: 'node_cs', coll: 'one' });
  assert.deepEqual(clusterEvents.map((e) => e.ns.db), ['node_cs', 'node_cs_other']);
});

check('drop invalidates a collection stream and closes it', async () => {
  const coll = db.collection('doomed');
  await coll.insertOne({ _id: 1 });
  const stream = coll.watch([], { maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.drop();
  const events = await nextEvents(stream, 2);
  assert.deepEqual(events.map((e) => e.operationType), ['drop', 'invalidate']);
  assert.equal(stream.closed, true);
});

check('a token older than the oplog is refused (ChangeStreamHistoryLost)', async () => {
  const coll = db.collection('refused');
  const bogus = { _data: '82000000010000000101' };
  const stream = coll.watch([], { resumeAfter: bogus });
  await assert.rejects(stream.tryNext(), (error) => {
    assert.ok(error instanceof MongoServerError, `expected MongoServerError, got ${error}`);
    assert.equal(error.code, 286);
    assert.equal(error.codeName, 'ChangeStreamHistoryLost');
    assert.ok(error.hasErrorLabel('NonResumableChangeStreamError'), `labels: ${error.errorLabels}`);
    return true;
  });
  await stream.close().catch(() => {});
});

check('a pipeline that removes _id fails once, labelled NonResumableChangeStreamError', async () => {
  const coll = db.collection('unresumable');
  const stream = coll.watch([{ $project: { _id: 0 } }], { maxAwaitTimeMS: 200 });
  await stream.tryNext();
  await coll.insertOne({ _id: 1 });
  await assert.rejects(nextEvents(stream, 1), (error) => {
    assert.ok(error instanceof MongoServerError, `expected MongoServerError, got ${error}`);
    assert.equal(error.code, 280);
    assert.equal(error.codeName, 'ChangeStreamFatalError');
    assert.ok(error.hasErrorLabel('NonResumableChangeStreamError'), `labels: ${error.errorLabels}`);
    return true;
  });
  await stream.close().catch(() => {});
});

async function runChecks() {
  let passed = 0;
  let failed = 0;
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
  console.log(`change_stream.mjs: ${passed} passed, ${failed} failed`);
  return failed === 0 && passed === checks.length;
}

async function runResume() {
  const coll = db.collection('resume');
  const stream = coll.watch([], { maxAwaitTimeMS: 300 });
  await stream.tryNext();
  console.log('ready');
  const ids = [];
  const deadline = Date.now() + 40000;
  while (ids.length < 10 && Date.now() < deadline) {
    // The server restarts meanwhile: tryNext() resumes by itself on the
    // network error; a failure while it is still down is retried here.
    const event = await stream.tryNext().catch((error) => {
      console.log(`# retry after ${error.name}: ${error.message}`);
      return null;
    });
    if (event !== null) ids.push(event.documentKey._id);
  }
  await stream.close().catch(() => {});
  assert.deepEqual(ids, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  console.log('resumed ok');
  return true;
}

let ok = false;
try {
  await client.connect();
  ok = mode === 'resume' ? await runResume() : await runChecks();
} catch (error) {
  console.log(`not ok - ${mode}\n  ${String(error && error.stack ? error.stack : error).replace(/\n/g, '\n  ')}`);
} finally {
  await client.close().catch(() => {});
}
process.exitCode = ok ? 0 : 1;
