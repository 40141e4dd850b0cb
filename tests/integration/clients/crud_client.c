/* A CRUD session with libmongoc 1.23 for tests/integration/test_drivers.py, the
 * same checks as tests/java/CrudSession.java: CRUD, a cursor of 143 batches,
 * duplicate _id and unique-key errors, bulk writes, count, aggregate, distinct.
 *
 * Usage: crud_client URI DATABASE COLLECTION
 * Prints one "ok"/"not ok" line per check, then "N passed, N failed"; exit 1 when
 * any check failed, 2 on bad usage. */
#include <mongoc/mongoc.h>

#include <stdio.h>
#include <string.h>

static int passed;
static int failed;

static void check(const char *name, bool condition, const char *detail)
{
    if (condition) {
        passed++;
        printf("ok - %s\n", name);
    } else {
        failed++;
        printf("not ok - %s: %s\n", name, detail ? detail : "");
    }
}

static void check_reply(const char *name, bool condition, const bson_t *reply, const bson_error_t *error)
{
    char *json = reply ? bson_as_relaxed_extended_json(reply, NULL) : NULL;
    char detail[2048];
    snprintf(detail, sizeof detail, "%s %s", json ? json : "", error ? error->message : "");
    check(name, condition, detail);
    bson_free(json);
}

static int64_t reply_int(const bson_t *reply, const char *path)
{
    bson_iter_t iter, found;
    if (bson_iter_init(&iter, reply) && bson_iter_find_descendant(&iter, path, &found) &&
        BSON_ITER_HOLDS_NUMBER(&found)) {
        return bson_iter_as_int64(&found);
    }
    return -1;
}

static int64_t count_matching(mongoc_collection_t *collection, const bson_t *filter)
{
    bson_error_t error;
    return mongoc_collection_count_documents(collection, filter, NULL, NULL, NULL, &error);
}

/* Inserts the 1,000 documents: _id and n 0-999, every one dated now. */
static void insert_documents(mongoc_collection_t *orders, int64_t now_ms)
{
    bson_error_t error;
    bson_t reply;
    bson_t *first = BCON_NEW("_id", BCON_INT32(0), "n", BCON_INT32(0), "createdAt", BCON_DATE_TIME(now_ms),
                             "status", "new", "customer", "c0");
    bool inserted = mongoc_collection_insert_one(orders, first, NULL, &reply, &error);
    check_reply("insert_one", inserted && reply_int(&reply, "insertedCount") == 1, &reply, &error);
    bson_destroy(&reply);
    bson_destroy(first);

    bson_t *documents[999];
    for (int n = 1; n < 1000; n++) {
        char customer[8];
        snprintf(customer, sizeof customer, "c%d", n % 10);
        documents[n - 1] = BCON_NEW("_id", BCON_INT32(n), "n", BCON_INT32(n), "createdAt", BCON_DATE_TIME(now_ms),
                                    "status", n % 2 == 0 ? "new" : "paid", "customer", customer);
    }
    inserted = mongoc_collection_insert_many(orders, (const bson_t **)documents, 999, NULL, &reply, &error);
    check_reply("insert_many", inserted && reply_int(&reply, "insertedCount") == 999, &reply, &error);
    bson_destroy(&reply);
    for (int n = 0; n < 999; n++) {
        bson_destroy(documents[n]);
    }
}

static void check_long_cursor(mongoc_collection_t *orders, int64_t hour_ago_ms)
{
    bson_t *filter = BCON_NEW("createdAt", "{", "$gte", BCON_DATE_TIME(hour_ago_ms), "}");
    bson_t *options = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}", "batchSize", BCON_INT32(7));
    mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(orders, filter, options, NULL);
    const bson_t *document;
    bool seen[1000] = {false};
    int returned = 0, distinct = 0;
    while (mongoc_cursor_next(cursor, &document)) {
        bson_iter_t iter;
        returned++;
        if (bson_iter_init_find(&iter, document, "_id") && BSON_ITER_HOLDS_INT32(&iter) &&
            bson_iter_int32(&iter) >= 0 && bson_iter_int32(&iter) < 1000 && !seen[bson_iter_int32(&iter)]) {
            seen[bson_iter_int32(&iter)] = true;
            distinct++;
        }
    }
    bson_error_t error;
    const bson_t *error_reply = NULL;
    bool cursor_failed = mongoc_cursor_error_document(cursor, &error, &error_reply);
    char detail[1024];
    snprintf(detail, sizeof detail, "%d returned, %d distinct, %s", returned, distinct,
             cursor_failed ? error.message : "no error");
    check("cursor of 143 batches returns every document once", !cursor_failed && returned == 1000 && distinct == 1000,
          detail);
    mongoc_cursor_destroy(cursor);
    bson_destroy(options);
    bson_destroy(filter);
}

static void check_updates(mongoc_collection_t *orders, int64_t now_ms)
{
    bson_error_t error;
    bson_t reply;
    bson_t *selector = BCON_NEW("_id", BCON_INT32(1));
    bson_t *update = BCON_NEW("$set", "{", "status", "shipped", "}");
    bool ok = mongoc_collection_update_one(orders, selector, update, NULL, &reply, &error);
    check_reply("update_one", ok && reply_int(&reply, "matchedCount") == 1 && reply_int(&reply, "modifiedCount") == 1,
                &reply, &error);
    bson_destroy(&reply), bson_destroy(selector), bson_destroy(update);

    selector = BCON_NEW("customer", "c3");
    update = BCON_NEW("$inc", "{", "n", BCON_INT32(10000), "}");
    ok = mongoc_collection_update_many(orders, selector, update, NULL, &reply, &error);
    check_reply("update_many", ok && reply_int(&reply, "modifiedCount") == 100, &reply, &error);
    bson_destroy(&reply), bson_destroy(selector), bson_destroy(update);

    selector = BCON_NEW("_id", BCON_INT32(2));
    bson_t *replacement = BCON_NEW("n", BCON_INT32(2), "createdAt", BCON_DATE_TIME(now_ms), "status", "replaced");
    ok = mongoc_collection_replace_one(orders, selector, replacement, NULL, &reply, &error);
    check_reply("replace_one", ok && reply_int(&reply, "modifiedCount") == 1, &reply, &error);
    bson_destroy(&reply), bson_destroy(selector), bson_destroy(replacement);

    selector = BCON_NEW("_id", BCON_INT32(3));
    update = BCON_NEW("$set", "{", "status", "returned", "}");
    mongoc_find_and_modify_opts_t *find_and_modify = mongoc_find_and_modify_opts_new();
    mongoc_find_and_modify_opts_set_update(find_and_modify, update);
    mongoc_find_and_modify_opts_set_flags(find_and_modify, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
    ok = mongoc_collection_find_and_modify_with_opts(orders, selector, find_and_modify, &reply, &error);
    bson_iter_t iter;
    bool returned_new = ok && bson_iter_init(&iter, &reply) &&
                        bson_iter_find_descendant(&iter, "value.status", &iter) && BSON_ITER_HOLDS_UTF8(&iter) &&
                        strcmp(bson_iter_utf8(&iter, NULL), "returned") == 0;
    check_reply("findAndModify returns the new version", returned_new, &reply, &error);
    mongoc_find_and_modify_opts_destroy(find_and_modify);
    bson_destroy(&reply), bson_destroy(selector), bson_destroy(update);
}

static void check_duplicates(mongoc_collection_t *orders, int64_t now_ms)
{
    bson_error_t error;
    bson_t reply;
    bson_t *duplicate = BCON_NEW("_id", BCON_INT32(5), "createdAt", BCON_DATE_TIME(now_ms));
    bool ok = mongoc_collection_insert_one(orders, duplicate, NULL, &reply, &error);
    check_reply("duplicate _id is refused with E11000", !ok && error.code == 11000, &reply, &error);
    bson_destroy(&reply), bson_destroy(duplicate);

    bson_t *create = BCON_NEW("createIndexes", mongoc_collection_get_name(orders), "indexes", "[", "{", "key", "{",
                              "n", BCON_INT32(1), "}", "name", "n_unique", "unique", BCON_BOOL(true), "}", "]");
    ok = mongoc_collection_write_command_with_opts(orders, create, NULL, &reply, &error);
    check_reply("createIndexes unique", ok, &reply, &error);
    bson_destroy(&reply), bson_destroy(create);

    bson_t *selector = BCON_NEW("_id", BCON_INT32(11));
    bson_t *update = BCON_NEW("$set", "{", "n", BCON_INT32(12), "}");
    ok = mongoc_collection_update_one(orders, selector, update, NULL, &reply, &error);
    check_reply("duplicate unique key is refused with E11000",
                !ok && error.code == 11000 && strstr(error.message, "n_unique") != NULL, &reply, &error);
    bson_destroy(&reply), bson_destroy(selector), bson_destroy(update);
}

static void check_bulk_writes(mongoc_collection_t *orders, int64_t now_ms)
{
    bson_error_t error;
    bson_t reply;
    mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts(orders, NULL);
    bson_t *insert = BCON_NEW("_id", BCON_INT32(2000), "n", BCON_INT32(2000), "createdAt", BCON_DATE_TIME(now_ms));
    bson_t *update_selector = BCON_NEW("_id", BCON_INT32(4));
    bson_t *update = BCON_NEW("$set", "{", "status", "bulk", "}");
    bson_t *replace_selector = BCON_NEW("_id", BCON_INT32(6));
    bson_t *replacement = BCON_NEW("n", BCON_INT32(6), "createdAt", BCON_DATE_TIME(now_ms));
    bson_t *delete_selector = BCON_NEW("_id", BCON_INT32(8));
    bool ok = mongoc_bulk_operation_insert_with_opts(bulk, insert, NULL, &error) &&
              mongoc_bulk_operation_update_one_with_opts(bulk, update_selector, update, NULL, &error) &&
              mongoc_bulk_operation_replace_one_with_opts(bulk, replace_selector, replacement, NULL, &error) &&
              mongoc_bulk_operation_remove_one_with_opts(bulk, delete_selector, NULL, &error);
    ok = ok && mongoc_bulk_operation_execute(bulk, &reply, &error) != 0;
    check_reply("bulk write counts",
                ok && reply_int(&reply, "nInserted") == 1 && reply_int(&reply, "nMatched") == 2 &&
                    reply_int(&reply, "nModified") == 2 && reply_int(&reply, "nRemoved") == 1,
                &reply, &error);
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(bulk);
    bson_destroy(insert), bson_destroy(update_selector), bson_destroy(update);
    bson_destroy(replace_selector), bson_destroy(replacement), bson_destroy(delete_selector);

    bulk = mongoc_collection_create_bulk_operation_with_opts(orders, NULL); /* ordered by default */
    for (int id = 2001; id <= 2003; id++) {
        bson_t *document = BCON_NEW("_id", BCON_INT32(id == 2002 ? 2000 : id), "createdAt", BCON_DATE_TIME(now_ms));
        ok = mongoc_bulk_operation_insert_with_opts(bulk, document, NULL, &error);
        bson_destroy(document);
    }
    ok = mongoc_bulk_operation_execute(bulk, &reply, &error) != 0;
    bson_t *absent = BCON_NEW("_id", BCON_INT32(2003));
    check_reply("ordered bulk stops at the duplicate",
                !ok && error.code == 11000 && reply_int(&reply, "nInserted") == 1 &&
                    reply_int(&reply, "writeErrors.0.index") == 1 && count_matching(orders, absent) == 0,
                &reply, &error);
    bson_destroy(absent);
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(bulk);
}

static void check_reads(mongoc_collection_t *orders, int64_t hour_ago_ms)
{
    bson_error_t error;
    bson_t *pipeline = BCON_NEW("pipeline", "[", "{", "$match", "{", "createdAt", "{", "$gte",
                                BCON_DATE_TIME(hour_ago_ms), "}", "}", "}", "{", "$group", "{", "_id", "$status",
                                "count", "{", "$sum", BCON_INT32(1), "}", "}", "}", "]");
    mongoc_cursor_t *cursor = mongoc_collection_aggregate(orders, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
    const bson_t *group;
    int64_t grouped = 0;
    while (mongoc_cursor_next(cursor, &group)) {
        grouped += reply_int(group, "count");
    }
    bson_t *recent = BCON_NEW("createdAt", "{", "$gte", BCON_DATE_TIME(hour_ago_ms), "}");
    int64_t expected = count_matching(orders, recent);
    char detail[128];
    snprintf(detail, sizeof detail, "%lld grouped, %lld counted", (long long)grouped, (long long)expected);
    check("aggregate groups every document", !mongoc_cursor_error(cursor, &error) && grouped == expected, detail);
    mongoc_cursor_destroy(cursor);
    bson_destroy(pipeline);
    bson_destroy(recent);

    bson_t reply;
    bson_t *distinct = BCON_NEW("distinct", mongoc_collection_get_name(orders), "key", "customer");
    bool ok = mongoc_collection_read_command_with_opts(orders, distinct, NULL, NULL, &reply, &error);
    bson_iter_t iter, values;
    uint32_t count = 0;
    if (ok && bson_iter_init_find(&iter, &reply, "values") && bson_iter_recurse(&iter, &values)) {
        while (bson_iter_next(&values)) {
            count++;
        }
    }
    check_reply("distinct", ok && count == 10, &reply, &error);
    bson_destroy(&reply);
    bson_destroy(distinct);

    bson_t *filter = BCON_NEW("n", "{", "$gte", BCON_INT32(500), "$lt", BCON_INT32(1000), "}");
    int64_t counted = count_matching(orders, filter);
    snprintf(detail, sizeof detail, "%lld", (long long)counted);
    check("count with a filter", counted == 450, detail); /* 50 of them are c3's, moved past 10,000 */
    bson_destroy(filter);
}

static void check_deletes(mongoc_collection_t *orders)
{
    bson_error_t error;
    bson_t reply;
    bson_t *selector = BCON_NEW("_id", BCON_INT32(0));
    bool ok = mongoc_collection_delete_one(orders, selector, NULL, &reply, &error);
    check_reply("delete_one", ok && reply_int(&reply, "deletedCount") == 1, &reply, &error);
    bson_destroy(&reply), bson_destroy(selector);
    selector = BCON_NEW("status", "paid");
    ok = mongoc_collection_delete_many(orders, selector, NULL, &reply, &error);
    check_reply("delete_many", ok && reply_int(&reply, "deletedCount") > 0 && count_matching(orders, selector) == 0,
                &reply, &error);
    bson_destroy(&reply), bson_destroy(selector);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: crud_client URI DATABASE COLLECTION\n");
        return 2;
    }
    mongoc_init();
    bson_error_t error;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(argv[1], &error);
    mongoc_client_t *client = uri ? mongoc_client_new_from_uri(uri) : NULL;
    if (client == NULL) {
        fprintf(stderr, "crud_client: bad URI %s: %s\n", argv[1], error.message);
        mongoc_uri_destroy(uri);
        return 2;
    }
    bson_t reply;
    bson_t *build_info = BCON_NEW("buildInfo", BCON_INT32(1));
    bool ok = mongoc_client_command_simple(client, "admin", build_info, NULL, &reply, &error);
    check_reply("buildInfo names a version", ok && bson_has_field(&reply, "version"), &reply, &error);
    bson_destroy(&reply);
    bson_destroy(build_info);

    mongoc_collection_t *orders = mongoc_client_get_collection(client, argv[2], argv[3]);
    (void)mongoc_collection_drop(orders, NULL); /* NamespaceNotFound when it is new */
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    int64_t hour_ago_ms = now_ms - 3600 * 1000;
    insert_documents(orders, now_ms);
    bson_t *everything = bson_new();
    char detail[32];
    snprintf(detail, sizeof detail, "%lld", (long long)count_matching(orders, everything));
    check("count after inserts", count_matching(orders, everything) == 1000, detail);
    check_long_cursor(orders, hour_ago_ms);
    check_updates(orders, now_ms);
    check_duplicates(orders, now_ms);
    check_bulk_writes(orders, now_ms);
    check_reads(orders, hour_ago_ms);
    check_deletes(orders);
    ok = mongoc_collection_drop(orders, &error);
    snprintf(detail, sizeof detail, "%lld", (long long)count_matching(orders, everything));
    check("drop", ok && count_matching(orders, everything) == 0, detail);
    bson_destroy(everything);

    mongoc_collection_destroy(orders);
    mongoc_client_destroy(client);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
