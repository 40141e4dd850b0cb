// Authentication through thermocline proxy with the Node.js driver:
// node proxy_auth.mjs GOOD_URI BAD_URI. The good URI's user holds readWrite on
// its database (which has the tiered collection orders): it writes and reads a
// recent order, sees itself in connectionStatus, and may not drop the
// database. The bad URI's password is wrong. Prints "ok ..." lines; exits
// non-zero on a failed check.
import { MongoClient } from 'mongodb';

const [goodUri, badUri] = process.argv.slice(2);
let failed = 0;

function check(condition, text) {
  console.log((condition ? 'ok ' : 'not ok ') + text);
  if (!condition) failed++;
}

const good = new MongoClient(goodUri, { serverSelectionTimeoutMS: 10000 });
try {
  const orders = good.db().collection('orders');
  await orders.insertOne({ _id: 'node-1', createdAt: new Date(), total: 11 });
  const found = await orders.findOne({ _id: 'node-1' });
  check(found !== null && found.total === 11, 'read back the recent order');
  const status = await good.db('admin').command({ connectionStatus: 1 });
  const users = status.authInfo.authenticatedUsers;
  check(users.length === 1, 'authenticated as ' + (users.length ? users[0].user : 'nobody'));
  try {
    await good.db().dropDatabase();
    check(false, 'dropDatabase refused: it was allowed');
  } catch (error) {
    check(error.code === 13, 'dropDatabase refused ' + error.code + ' ' + error.message);
  }
} catch (error) {
  check(false, 'authenticated: ' + error);
} finally {
  await good.close();
}

const bad = new MongoClient(badUri, { serverSelectionTimeoutMS: 10000 });
try {
  await bad.db().collection('orders').findOne({});
  check(false, 'refused: a wrong password was accepted');
} catch (error) {
  check(error.code === 18, 'refused ' + error.code + ' ' + error.message);
} finally {
  await bad.close();
}
process.exit(failed === 0 ? 0 : 1);
