// A change stream through `thermocline proxy` with the Node.js driver 7:
// test_proxy_change_streams.py writes while this script watches shop.orders.
// Usage: node proxy_change_stream.mjs URI [START_SECONDS START_INCREMENT]
//   opens collection.watch() (from that cluster time when given), prints "ready",
//   then prints one JSON line per event ({op, id, txn, full, update}) until the
//   insert of _id "end", then "done". The driver resumes by itself when the
//   proxy dies and comes back (its own resume token, the fast tier's), so a test
//   can kill -9 the proxy meanwhile: the lines must show each event once.

import { MongoClient, Timestamp } from 'mongodb';

const [uri, seconds, increment] = process.argv.slice(2);
if (!uri) {
  console.error('usage: node proxy_change_stream.mjs MONGODB_URI [START_SECONDS START_INCREMENT]');
  process.exit(2);
}
const client = new MongoClient(uri, { serverSelectionTimeoutMS: 30000, connectTimeoutMS: 5000 });
const options = { maxAwaitTimeMS: 200 };
if (seconds !== undefined) {
  options.startAtOperationTime = new Timestamp({ t: Number(seconds), i: Number(increment) });
}

function withoutClock(document) {
  if (document === null || document === undefined) return document;
  const { createdAt, ...rest } = document; // eslint-disable-line no-unused-vars
  return rest;
}

let ok = false;
try {
  await client.connect();
  const stream = client.db('shop').collection('orders').watch([], options);
  await stream.tryNext(); // opens the cursor before the test writes
  console.log('ready');
  const deadline = Date.now() + 90000;
  while (Date.now() < deadline) {
    const event = await stream.tryNext().catch((error) => {
      console.log(`# retry after ${error.name}: ${error.message}`);
      return null;
    });
    if (event === null) continue;
    console.log(JSON.stringify({
      op: event.operationType,
      id: event.documentKey && event.documentKey._id,
      txn: event.txnNumber !== undefined && event.lsid !== undefined,
      full: withoutClock(event.fullDocument) ?? null,
      update: event.updateDescription ?? null,
    }));
    if (event.operationType === 'insert' && event.documentKey._id === 'end') {
      ok = true;
      break;
    }
  }
  await stream.close().catch(() => {});
  console.log(ok ? 'done' : 'not done: no insert of "end" in 90 s');
} catch (error) {
  console.log(`not ok\n  ${String(error && error.stack ? error.stack : error)}`);
} finally {
  await client.close().catch(() => {});
}
process.exitCode = ok ? 0 : 1;
