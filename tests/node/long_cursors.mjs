// Long cursors with the Node.js driver: every read of the spec is opened `copies`
// times and all its cursors are iterated at once, in batches of `batchSize`, so
// dozens of cursors are open in the proxy together and their getMores interleave.
// Prints one line "LONG_CURSORS {json}" with, per read, each cursor's documents
// (`_id` as a string, a colon, `n`), how many getMores it took and the error that
// ended it (null when it ran to the end); tests/integration/test_proxy_long_cursors.py
// compares them with what the store alone holds.
// Usage: node tests/node/long_cursors.mjs URI SPEC
//   SPEC: canonical extended JSON, [{"ns": "db.coll", "filter": {...}, "batchSize": 9, "copies": 4}, ...]
// Exits 1 when any cursor failed (after printing the line), 0 otherwise.

import { BSON, MongoClient } from 'mongodb';

const [uri, specText] = process.argv.slice(2);
if (!uri || !specText) {
  console.error('usage: node long_cursors.mjs MONGODB_URI SPEC_JSON');
  process.exit(2);
}
const reads = BSON.EJSON.parse(specText);

const client = new MongoClient(uri, {
  serverSelectionTimeoutMS: 10000,
  socketTimeoutMS: 30000,
  monitorCommands: true,
});

// getMores counted by the cursor id they name, as the driver sent them.
const getMores = new Map();
client.on('commandStarted', (event) => {
  if (event.commandName === 'getMore') {
    const id = String(event.command.getMore);
    getMores.set(id, (getMores.get(id) ?? 0) + 1);
  }
});

async function iterate(read) {
  const [database, ...rest] = read.ns.split('.');
  const cursor = client.db(database).collection(rest.join('.')).find(read.filter).batchSize(read.batchSize);
  const documents = [];
  let error = null;
  let cursorId = null;
  try {
    for await (const document of cursor) {
      // The id is known once the first batch came back (0 when it held everything).
      cursorId ??= String(cursor.id);
      documents.push(`${String(document._id)}:${document.n}`);
    }
  } catch (failure) {
    cursorId ??= cursor.id === undefined ? null : String(cursor.id);
    error = { code: failure.code ?? null, message: String(failure.message) };
  }
  return { documents, getMores: cursorId === null ? 0 : getMores.get(cursorId) ?? 0, error };
}

let failed = false;
const results = [];
try {
  const opened = reads.map((read) => Array.from({ length: read.copies ?? 1 }, () => iterate(read)));
  for (const [index, cursors] of opened.entries()) {
    const done = await Promise.all(cursors);
    failed ||= done.some((result) => result.error !== null);
    results.push({ ns: reads[index].ns, cursors: done });
  }
} finally {
  await client.close();
}
console.log('LONG_CURSORS ' + JSON.stringify(results));
// Not process.exit(): it would cut the line short on a pipe (stdout drains asynchronously).
process.exitCode = failed ? 1 : 0;
