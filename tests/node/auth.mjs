// Authentication with the Node.js driver: node auth.mjs GOOD_URI BAD_URI.
// The good URI's user must be able to write to its database; the bad URI's
// password is wrong. Prints "ok ..." lines; exits non-zero on a failed check.
import { MongoClient } from 'mongodb';

const [goodUri, badUri] = process.argv.slice(2);
let failed = 0;

const good = new MongoClient(goodUri, { serverSelectionTimeoutMS: 10000 });
try {
  const collection = good.db().collection('node_auth');
  await collection.insertOne({ at: new Date() });
  const status = await good.db('admin').command({ connectionStatus: 1 });
  if (status.authInfo.authenticatedUsers.length !== 1) throw new Error('not authenticated: ' + JSON.stringify(status));
  console.log('ok authenticated as ' + status.authInfo.authenticatedUsers[0].user);
} catch (error) {
  failed++;
  console.log('not ok authenticated: ' + error);
} finally {
  await good.close();
}

const bad = new MongoClient(badUri, { serverSelectionTimeoutMS: 10000 });
try {
  await bad.db().collection('node_auth').findOne({});
  failed++;
  console.log('not ok refused: a wrong password was accepted');
} catch (error) {
  console.log((error.code === 18 ? 'ok refused ' : 'not ok refused ') + error.code + ' ' + error.message);
  if (error.code !== 18) failed++;
} finally {
  await bad.close();
}
process.exit(failed === 0 ? 0 : 1);
