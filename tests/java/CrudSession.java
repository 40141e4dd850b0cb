// A CRUD session with the MongoDB Java driver 3.x (Debian's libmongodb-java),
// the driver generation of YCSB 0.17 and Spring Data 2.0: its handshake still
// speaks OP_QUERY. Run as `java -cp <jars> CrudSession.java URI DATABASE COLLECTION`;
// prints one "ok"/"not ok" line per check and exits 1 when any check failed.
import com.mongodb.ErrorCategory;
import com.mongodb.MongoBulkWriteException;
import com.mongodb.MongoClient;
import com.mongodb.MongoClientURI;
import com.mongodb.MongoWriteException;
import com.mongodb.bulk.BulkWriteResult;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.MongoCursor;
import com.mongodb.client.MongoDatabase;
import com.mongodb.client.model.Accumulators;
import com.mongodb.client.model.Aggregates;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.CreateCollectionOptions;
import com.mongodb.client.model.DeleteOneModel;
import com.mongodb.client.model.Filters;
import com.mongodb.client.model.FindOneAndUpdateOptions;
import com.mongodb.client.model.IndexOptions;
import com.mongodb.client.model.Indexes;
import com.mongodb.client.model.InsertOneModel;
import com.mongodb.client.model.ReplaceOneModel;
import com.mongodb.client.model.ReturnDocument;
import com.mongodb.client.model.Sorts;
import com.mongodb.client.model.UpdateOneModel;
import com.mongodb.client.model.Updates;
import com.mongodb.client.model.ValidationOptions;
import com.mongodb.client.model.WriteModel;
import com.mongodb.client.result.DeleteResult;
import com.mongodb.client.result.UpdateResult;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.bson.Document;

public class CrudSession {
    private static int passed = 0;
    private static int failed = 0;

    private static void check(String name, boolean condition, Object detail) {
        if (condition) {
            passed++;
            System.out.println("ok - " + name);
        } else {
            failed++;
            System.out.println("not ok - " + name + ": " + detail);
        }
    }

    public static void main(String[] args) {
        Logger.getLogger("org.mongodb.driver").setLevel(Level.WARNING);
        MongoClient client = new MongoClient(new MongoClientURI(args[0]));
        try {
            run(client.getDatabase(args[1]), args[2]);
        } catch (RuntimeException unexpected) {
            failed++;
            System.out.println("not ok - session aborted: " + unexpected);
            unexpected.printStackTrace(System.out);
        } finally {
            client.close();
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    private static void run(MongoDatabase database, String collectionName) {
        Document buildInfo = database.runCommand(new Document("buildInfo", 1));
        check("buildInfo names a version", buildInfo.getString("version") != null, buildInfo);

        MongoCollection<Document> orders = database.getCollection(collectionName);
        orders.drop();
        // Every document is recent: on a tiered namespace the window holds them all.
        Date now = new Date();
        Date hourAgo = new Date(now.getTime() - 3600 * 1000L);

        orders.insertOne(new Document("_id", 0).append("n", 0).append("createdAt", now).append("status", "new"));
        List<Document> batch = new ArrayList<>();
        for (int n = 1; n < 1000; n++) {
            batch.add(new Document("_id", n).append("n", n).append("createdAt", now)
                          .append("status", n % 2 == 0 ? "new" : "paid").append("customer", "c" + (n % 10)));
        }
        orders.insertMany(batch);
        check("count after inserts", orders.count() == 1000, orders.count());
        check("count with a filter", orders.count(Filters.gte("n", 500)) == 500,
              orders.count(Filters.gte("n", 500)));

        // A cursor across many batches: 1,000 documents seven at a time.
        Set<Integer> seen = new HashSet<>();
        int returned = 0;
        try (MongoCursor<Document> cursor = orders.find(Filters.gte("createdAt", hourAgo))
                                                   .sort(Sorts.ascending("_id")).batchSize(7).iterator()) {
            while (cursor.hasNext()) {
                seen.add(cursor.next().getInteger("_id"));
                returned++;
            }
        }
        check("cursor of 143 batches returns every document once", returned == 1000 && seen.size() == 1000,
              returned + " returned, " + seen.size() + " distinct");
        Document first = orders.find(Filters.eq("_id", 42)).first();
        check("find by _id", first != null && first.getInteger("n") == 42, first);

        UpdateResult one = orders.updateOne(Filters.eq("_id", 1), Updates.set("status", "shipped"));
        check("updateOne", one.getMatchedCount() == 1 && one.getModifiedCount() == 1, one);
        UpdateResult many = orders.updateMany(Filters.eq("customer", "c3"), Updates.inc("n", 10000));
        check("updateMany", many.getMatchedCount() == 100 && many.getModifiedCount() == 100, many);
        UpdateResult replaced = orders.replaceOne(Filters.eq("_id", 2),
            new Document("n", 2).append("createdAt", now).append("status", "replaced"));
        check("replaceOne", replaced.getModifiedCount() == 1
                  && "replaced".equals(orders.find(Filters.eq("_id", 2)).first().getString("status")), replaced);
        Document updated = orders.findOneAndUpdate(Filters.eq("_id", 3), Updates.set("status", "returned"),
            new FindOneAndUpdateOptions().returnDocument(ReturnDocument.AFTER));
        check("findOneAndUpdate returns the new version",
              updated != null && "returned".equals(updated.getString("status")), updated);

        try {
            orders.insertOne(new Document("_id", 5).append("createdAt", now));
            check("duplicate _id is refused", false, "acknowledged");
        } catch (MongoWriteException duplicate) {
            check("duplicate _id is refused with E11000",
                  duplicate.getError().getCode() == 11000
                      && duplicate.getError().getCategory() == ErrorCategory.DUPLICATE_KEY,
                  duplicate.getError());
        }

        orders.createIndex(Indexes.ascending("n"), new IndexOptions().unique(true).name("n_unique"));
        try {
            orders.updateOne(Filters.eq("_id", 11), Updates.set("n", 12));
            check("duplicate unique key is refused", false, "acknowledged");
        } catch (MongoWriteException duplicate) {
            check("duplicate unique key is refused with E11000",
                  duplicate.getError().getCode() == 11000 && duplicate.getError().getMessage().contains("n_unique"),
                  duplicate.getError());
        }

        List<WriteModel<Document>> writes = Arrays.asList(
            new InsertOneModel<>(new Document("_id", 2000).append("n", 2000).append("createdAt", now)),
            new UpdateOneModel<>(Filters.eq("_id", 4), Updates.set("status", "bulk")),
            new ReplaceOneModel<>(Filters.eq("_id", 6), new Document("n", 6).append("createdAt", now)),
            new DeleteOneModel<>(Filters.eq("_id", 8)));
        BulkWriteResult bulk = orders.bulkWrite(writes);
        check("bulkWrite counts", bulk.getInsertedCount() == 1 && bulk.getMatchedCount() == 2
                  && bulk.getModifiedCount() == 2 && bulk.getDeletedCount() == 1, bulk);
        try {
            orders.bulkWrite(Arrays.asList(
                new InsertOneModel<>(new Document("_id", 2001).append("createdAt", now)),
                new InsertOneModel<>(new Document("_id", 2000).append("createdAt", now)),
                new InsertOneModel<>(new Document("_id", 2002).append("createdAt", now))),
                new BulkWriteOptions().ordered(true));
            check("ordered bulk with a duplicate fails", false, "acknowledged");
        } catch (MongoBulkWriteException bulkError) {
            check("ordered bulk stops at the duplicate",
                  bulkError.getWriteErrors().size() == 1 && bulkError.getWriteErrors().get(0).getIndex() == 1
                      && bulkError.getWriteErrors().get(0).getCode() == 11000
                      && bulkError.getWriteResult().getInsertedCount() == 1
                      && orders.count(Filters.eq("_id", 2002)) == 0,
                  bulkError.getWriteErrors());
        }

        List<Document> groups = orders.aggregate(Arrays.asList(
            Aggregates.match(Filters.gte("createdAt", hourAgo)),
            Aggregates.group("$status", Accumulators.sum("count", 1)),
            Aggregates.sort(Sorts.ascending("_id")))).into(new ArrayList<>());
        long grouped = 0;
        for (Document group : groups) {
            grouped += ((Number) group.get("count")).longValue();
        }
        check("aggregate groups every document", grouped == orders.count(Filters.gte("createdAt", hourAgo)),
              groups);
        List<String> customers = orders.distinct("customer", String.class).into(new ArrayList<>());
        check("distinct", customers.size() == 10, customers);

        checkJsonSchema(database, orders, collectionName + "_customers", hourAgo);

        DeleteResult deletedOne = orders.deleteOne(Filters.eq("_id", 0));
        check("deleteOne", deletedOne.getDeletedCount() == 1, deletedOne);
        DeleteResult deleted = orders.deleteMany(Filters.eq("status", "paid"));
        check("deleteMany", deleted.getDeletedCount() > 0 && orders.count(Filters.eq("status", "paid")) == 0,
              deleted);
        orders.drop();
        check("drop", orders.count() == 0, orders.count());
    }

    // $jsonSchema as an application with a schema uses it: a collection's
    // validator refuses a document with 121 and says why, and a filter selects
    // exactly what the equivalent plain filter does (on a tiered namespace, from
    // the fast tier).
    private static void checkJsonSchema(MongoDatabase database, MongoCollection<Document> orders,
                                        String validatedName, Date hourAgo) {
        MongoCollection<Document> customers = database.getCollection(validatedName);
        customers.drop();
        Document schema = Document.parse("{bsonType: 'object', required: ['name', 'tier'], properties: {"
            + "name: {bsonType: 'string', minLength: 1}, tier: {enum: ['gold', 'silver']}}}");
        database.createCollection(validatedName, new CreateCollectionOptions().validationOptions(
            new ValidationOptions().validator(Filters.jsonSchema(schema))));
        customers.insertOne(new Document("_id", 1).append("name", "Ada").append("tier", "gold"));
        try {
            customers.insertOne(new Document("_id", 2).append("name", "").append("tier", "bronze"));
            check("a document against the schema is refused", false, "acknowledged");
        } catch (MongoWriteException refused) {
            String details = String.valueOf(refused.getError().getDetails());
            check("a document against the schema is refused with 121 and its reasons",
                  refused.getError().getCode() == 121 && details.contains("failingDocumentId")
                      && details.contains("minLength") && details.contains("enum") && customers.count() == 1,
                  refused.getError() + " " + details);
        }
        customers.drop();

        Document someCustomers = Document.parse(
            "{required: ['customer'], properties: {customer: {bsonType: 'string', pattern: '^c[0-4]$'}}}");
        long bySchema = orders.count(Filters.and(Filters.gte("createdAt", hourAgo), Filters.jsonSchema(someCustomers)));
        long byValues = orders.count(Filters.and(Filters.gte("createdAt", hourAgo),
                                                 Filters.in("customer", "c0", "c1", "c2", "c3", "c4")));
        check("$jsonSchema in a filter selects what the plain filter does", bySchema == byValues && bySchema > 0,
              bySchema + " against " + byValues);
    }
}
