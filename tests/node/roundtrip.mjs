// A short CRUD round trip with the Node.js driver, every connection option
// (TLS included) in the URI: node roundtrip.mjs URI COLLECTION.
// Prints one JSON line with what it saw; exits non-zero on an error.
import { MongoClient } from 'mongodb';

const [uri, collectionName] = process.argv.slice(2);
if (!uri || !collectionName) {
  console.error('usage: node roundtrip.mjs MONGODB_URI COLLECTION');
  process.exit(2);
}

const client = new MongoClient(uri, { serverSelectionTimeoutMS: 10000, connectTimeoutMS: 5000 });
try {
  const collection = client.db('node_tls').collection(collectionName);
  const now = new Date();
  await collection.insertMany([1, 2, 3].map((n) => ({ _id: n, createdAt: now, n })));
  await collection.updateOne({ _id: 2 }, { $set: { n: 20 } });
  await collection.deleteOne({ _id: 3 });
  const found = await collection.find({}).sort({ _id: 1 }).toArray();
  const hello = await client.db('admin').command({ hello: 1 });
  console.log(JSON.stringify({ documents: found.map((d) => [d._id, d.n]), msg: hello.msg ?? null }));
} catch (error) {
  console.log('error ' + error);
  process.exitCode = 1;
} finally {
  await client.close();
}
