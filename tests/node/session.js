// A scripted mongosh session against `thermocline store`: inserts, finds,
// updates, deletes, aggregate, a cursor over many getMore batches, distinct,
// createIndex and explain, then one line
// "SESSION_RESULT {json}" that tests/integration/test_store_mongosh.py checks.
// Usage: mongosh mongodb://127.0.0.1:PORT/shell?directConnection=true --quiet session.js

const items = db.getCollection('items');
items.drop();
const out = {};

const documents = [];
for (let n = 0; n < 30; n++) {
  documents.push({ _id: n, n: n, group: n % 3, name: 'item' + String(n).padStart(2, '0') });
}
out.insertedCount = Object.keys(items.insertMany(documents).insertedIds).length;
out.count = items.countDocuments({});

out.groupOne = items.find({ group: 1 }).sort({ n: 1 }).toArray().map((d) => d.n);
out.page = items.find({}, { name: 1, _id: 0 }).sort({ n: 1 }).skip(10).limit(3).toArray();

const updated = items.updateMany({ group: 1 }, { $inc: { n: 100 } });
out.updateMany = { matched: updated.matchedCount, modified: updated.modifiedCount };
out.afterUpdate = items.find({ group: 1 }).sort({ n: 1 }).limit(3).toArray().map((d) => d.n);

// mongosh's UpdateResult names the upserted document's _id insertedId.
out.upsertedId = items.updateOne({ _id: 'shell-upsert' }, { $set: { n: -1, group: 9 } },
  { upsert: true }).insertedId;
out.deleted = items.deleteMany({ group: 0 }).deletedCount;
out.remaining = items.countDocuments({});

out.aggregate = items.aggregate([
  { $match: { group: { $in: [1, 2] } } },
  { $group: { _id: '$group', total: { $sum: '$n' }, count: { $sum: 1 } } },
  { $sort: { _id: 1 } },
]).toArray();

// A cursor iterated across many getMore batches, and distinct.
const many = db.getCollection('many');
many.drop();
many.insertMany(Array.from({ length: 1000 }, (_, i) => ({ _id: i, tag: 't' + (i % 4) })));
const getMores = () => Number(db.serverStatus().opcounters.getmore.toString());
const getMoresBefore = getMores();
const seen = many.find({}, { _id: 1 }).sort({ _id: 1 }).batchSize(50).toArray().map((d) => d._id);
out.manyInOrder = seen.length === 1000 && seen.every((id, i) => id === i);
out.getMores = getMores() - getMoresBefore;
out.distinctTags = many.distinct('tag').sort();
many.drop();

out.indexName = items.createIndex({ n: 1 }, { unique: true });
out.indexes = items.getIndexes().map((index) => index.name).sort();
try {
  items.insertOne({ _id: 'dup', n: 2 });
  out.duplicateCode = null;
} catch (error) {
  out.duplicateCode = error.code;
}

const explained = items.find({ n: { $gt: 120 } }).explain();
const pending = [explained.queryPlanner.winningPlan];
out.explainUsesIndex = null;
while (pending.length > 0) {
  const node = pending.pop();
  if (Array.isArray(node)) {
    pending.push(...node);
  } else if (node && typeof node === 'object') {
    if (node.stage === 'IXSCAN') out.explainUsesIndex = node.indexName;
    pending.push(...Object.values(node));
  }
}

// A $jsonSchema validator refuses a document with 121 and says which rule;
// $jsonSchema in a filter.
db.getCollection('validated').drop();
db.createCollection('validated', { validator: { $jsonSchema: {
  required: ['name'], properties: { name: { bsonType: 'string', maxLength: 5 } } } } });
try {
  db.getCollection('validated').insertOne({ _id: 1, name: 'too long' });
  out.schemaRefusal = null;
} catch (error) {
  const rules = error.errInfo.details.schemaRulesNotSatisfied;
  out.schemaRefusal = { code: error.code, rule: rules[0].propertiesNotSatisfied[0].details[0].operatorName };
}
out.schemaFiltered = items.countDocuments({ $jsonSchema: { properties: { n: { minimum: 100 } } } });
db.getCollection('validated').drop();

out.collections = db.getCollectionNames();

try {
  const reply = db.runCommand({ thisCommandDoesNotExist: 1 });
  out.unknownCommandCode = reply.code;
} catch (error) {
  out.unknownCommandCode = error.code;
}

print('SESSION_RESULT ' + JSON.stringify(out));
