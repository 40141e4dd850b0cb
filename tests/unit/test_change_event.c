/* Tests for src/store/change_event.c: resume tokens (round trip, order, bad
 * input) and the events oplog entries give collection, database and cluster
 * streams, with each fullDocument mode. */
#include "store/change_event.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "support.h"

#define TIME(seconds, increment) (((uint64_t)(seconds) << 32) | (uint32_t)(increment))

/* --- helpers -------------------------------------------------------------------- */

static char *token_hex(const change_token_t *token)
{
    bson_t holder = BSON_INITIALIZER;
    bson_iter_t iter;
    change_token_append(&holder, "t", token);
    assert_true(bson_iter_init(&iter, &holder));
    assert_true(bson_iter_find_descendant(&iter, "t._data", &iter));
    char *hex = bson_strdup(bson_iter_utf8(&iter, NULL));
    bson_destroy(&holder);
    return hex;
}

/* An oplog entry as oplog.c writes it; extra is appended JSON fields (may be ""). */
static bson_t *entry(const char *op, const char *ns, const char *object, const char *object2, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"ts\": {\"$timestamp\": {\"t\": 100, \"i\": 7}}, \"t\": 1, \"v\": 2, \"op\": \"%s\", \"ns\": \"%s\", "
             "\"o\": %s%s%s%s%s, \"wall\": {\"$date\": 1000}}",
             op, ns, object, object2 ? ", \"o2\": " : "", object2 ? object2 : "", extra[0] ? ", " : "", extra);
    return support_json_as_written(text);
}

static change_spec_t collection_spec(const char *database, const char *collection)
{
    return (change_spec_t){.scope = CHANGE_SCOPE_COLLECTION, .database = database, .collection = collection};
}

static void assert_field_json(const bson_t *document, const char *path, const char *expected_json)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, document) || !bson_iter_find_descendant(&iter, path, &iter)) {
        char *all = bson_as_relaxed_extended_json(document, NULL);
        fail_msg("no field %s in %s", path, all);
    }
    bson_t wrapper = BSON_INITIALIZER;
    bson_append_iter(&wrapper, "v", 1, &iter);
    char *actual = bson_as_relaxed_extended_json(&wrapper, NULL);
    char expected[1024];
    snprintf(expected, sizeof expected, "{ \"v\" : %s }", expected_json);
    bson_t *expected_document = support_json_as_written(expected);
    char *expected_text = bson_as_relaxed_extended_json(expected_document, NULL);
    if (strcmp(actual, expected_text) != 0) {
        fail_msg("%s: expected %s, got %s", path, expected_text, actual);
    }
    bson_free(actual);
    bson_free(expected_text);
    bson_destroy(expected_document);
    bson_destroy(&wrapper);
}

static void assert_no_field(const bson_t *document, const char *field)
{
    assert_false(bson_has_field(document, field));
}

/* The keys of document in order, joined by commas. */
static void assert_keys(const bson_t *document, const char *expected)
{
    bson_iter_t iter;
    char keys[512] = "";
    bson_iter_init(&iter, document);
    while (bson_iter_next(&iter)) {
        if (keys[0] != '\0') {
            strcat(keys, ",");
        }
        strcat(keys, bson_iter_key(&iter));
    }
    assert_string_equal(keys, expected);
}

static void build(const bson_t *oplog_entry, const change_spec_t *spec, change_events_t *out)
{
    bson_error_t error;
    if (!change_events_build(oplog_entry, TIME(100, 7), spec, NULL, NULL, out, &error)) {
        fail_msg("change_events_build: %s", error.message);
    }
}

/* --- tokens ------------------------------------------------------------------------ */

static void test_token_round_trip_and_hex_form(void **state)
{
    change_token_t token = {.time = TIME(0x6B0CB621, 2), .kind = CHANGE_TOKEN_EVENT};
    char *hex = token_hex(&token);
    /* 0x82 (KeyString Timestamp), seconds, increment, kind: as mongod's tokens begin. */
    assert_string_equal(hex, "826B0CB6210000000201");
    bson_t document = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&document, "_data", hex);
    change_token_t parsed;
    bson_error_t error;
    assert_true(change_token_parse(&document, &parsed, &error));
    assert_true(parsed.time == token.time);
    assert_int_equal(parsed.kind, CHANGE_TOKEN_EVENT);
    bson_reinit(&document);
    BSON_APPEND_UTF8(&document, "_data", "826b0cb6210000000202"); /* lower case is accepted */
    assert_true(change_token_parse(&document, &parsed, &error));
    assert_int_equal(parsed.kind, CHANGE_TOKEN_INVALIDATE);
    /* An operation of a transaction: its index follows the kind. */
    token.index = 3;
    bson_free(hex);
    hex = token_hex(&token);
    assert_string_equal(hex, "826B0CB621000000020100000003");
    bson_reinit(&document);
    BSON_APPEND_UTF8(&document, "_data", hex);
    assert_true(change_token_parse(&document, &parsed, &error));
    assert_true(parsed.time == token.time);
    assert_int_equal(parsed.kind, CHANGE_TOKEN_EVENT);
    assert_int_equal(parsed.index, 3);
    assert_int_equal(change_token_compare(&parsed, &token), 0);
    bson_destroy(&document);
    bson_free(hex);
}

static void test_tokens_sort_as_their_hex_strings(void **state)
{
    const change_token_t ordered[] = {
        {TIME(5, 9), CHANGE_TOKEN_HIGH_WATER_MARK, 0},
        {TIME(6, 0), CHANGE_TOKEN_START, 0},
        {TIME(6, 1), CHANGE_TOKEN_START, 0},
        {TIME(6, 1), CHANGE_TOKEN_EVENT, 0},
        {TIME(6, 1), CHANGE_TOKEN_EVENT, 1}, /* the operations of one transaction */
        {TIME(6, 1), CHANGE_TOKEN_EVENT, 2},
        {TIME(6, 1), CHANGE_TOKEN_EVENT, 0x01000000},
        {TIME(6, 1), CHANGE_TOKEN_INVALIDATE, 0},
        {TIME(6, 1), CHANGE_TOKEN_HIGH_WATER_MARK, 0},
        {TIME(6, 2), CHANGE_TOKEN_EVENT, 0},
        {TIME(0x100000000ull - 1, 1), CHANGE_TOKEN_EVENT, 0},
    };
    size_t count = sizeof ordered / sizeof ordered[0];
    for (size_t i = 0; i + 1 < count; i++) {
        assert_true(change_token_compare(&ordered[i], &ordered[i + 1]) < 0);
        assert_true(change_token_compare(&ordered[i + 1], &ordered[i]) > 0);
        char *left = token_hex(&ordered[i]);
        char *right = token_hex(&ordered[i + 1]);
        assert_true(strcmp(left, right) < 0);
        bson_free(left);
        bson_free(right);
    }
    assert_int_equal(change_token_compare(&ordered[3], &ordered[3]), 0);
}

static void test_token_parse_errors(void **state)
{
    change_token_t token;
    bson_error_t error;
    bson_t *missing = support_json_as_written("{\"x\": 1}");
    assert_false(change_token_parse(missing, &token, &error));
    assert_int_equal(error.code, 40647);
    bson_t *number = support_json_as_written("{\"_data\": 5}");
    assert_false(change_token_parse(number, &token, &error));
    assert_int_equal(error.code, 40647);
    bson_t *not_hex = support_json_as_written("{\"_data\": \"82zz\"}");
    assert_false(change_token_parse(not_hex, &token, &error));
    assert_int_equal(error.code, TC_ERR_FAILED_TO_PARSE);
    assert_string_equal(error.message, "resume token string was not a valid hex string");
    /* A real mongod token: longer KeyString, not ours. */
    bson_t *foreign = support_json_as_written("{\"_data\": \"8263A1B2C3000000012B022C0100296E5A1004\"}");
    assert_false(change_token_parse(foreign, &token, &error));
    assert_int_equal(error.code, TC_ERR_FAILED_TO_PARSE);
    bson_t *bad_kind = support_json_as_written("{\"_data\": \"826B0CB6210000000207\"}");
    assert_false(change_token_parse(bad_kind, &token, &error));
    bson_t *bad_marker = support_json_as_written("{\"_data\": \"836B0CB6210000000201\"}");
    assert_false(change_token_parse(bad_marker, &token, &error));
    /* Only an event has an index, and never a written-out 0. */
    bson_t *indexed_invalidate = support_json_as_written("{\"_data\": \"826B0CB621000000020200000001\"}");
    assert_false(change_token_parse(indexed_invalidate, &token, &error));
    assert_int_equal(error.code, TC_ERR_FAILED_TO_PARSE);
    bson_t *index_zero = support_json_as_written("{\"_data\": \"826B0CB621000000020100000000\"}");
    assert_false(change_token_parse(index_zero, &token, &error));
    bson_destroy(indexed_invalidate);
    bson_destroy(index_zero);
    bson_destroy(missing);
    bson_destroy(number);
    bson_destroy(not_hex);
    bson_destroy(foreign);
    bson_destroy(bad_kind);
    bson_destroy(bad_marker);
}

/* --- document events ----------------------------------------------------------------- */

static void test_insert_event(void **state)
{
    bson_t *oplog_entry = entry("i", "shop.orders", "{\"_id\": 1, \"a\": [1, 2]}", "{\"_id\": 1}", "");
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    build(oplog_entry, &spec, &events);
    assert_int_equal(events.count, 1);
    const bson_t *event = events.documents[0];
    assert_keys(event, "_id,operationType,clusterTime,wallTime,fullDocument,ns,documentKey");
    assert_field_json(event, "_id", "{\"_data\": \"82000000640000000701\"}");
    assert_field_json(event, "operationType", "\"insert\"");
    assert_field_json(event, "clusterTime", "{\"$timestamp\": {\"t\": 100, \"i\": 7}}");
    assert_field_json(event, "fullDocument", "{\"_id\": 1, \"a\": [1, 2]}");
    assert_field_json(event, "ns", "{\"db\": \"shop\", \"coll\": \"orders\"}");
    assert_field_json(event, "documentKey", "{\"_id\": 1}");
    assert_true(events.tokens[0].time == TIME(100, 7));
    assert_int_equal(events.tokens[0].kind, CHANGE_TOKEN_EVENT);
    change_events_cleanup(&events);
    bson_destroy(oplog_entry);
}

static void test_update_event_has_description_and_no_full_document_by_default(void **state)
{
    bson_t *oplog_entry = entry("u", "shop.orders",
                                "{\"$v\": 2, \"updateDescription\": {\"updatedFields\": {\"b.c\": 2}, "
                                "\"removedFields\": [\"a\"], \"truncatedArrays\": []}}",
                                "{\"_id\": {\"$oid\": \"65a000000000000000000001\"}}",
                                "\"lsid\": {\"id\": 1}, \"txnNumber\": {\"$numberLong\": \"4\"}");
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    build(oplog_entry, &spec, &events);
    assert_int_equal(events.count, 1);
    const bson_t *event = events.documents[0];
    assert_keys(event, "_id,operationType,clusterTime,wallTime,ns,documentKey,updateDescription");
    assert_field_json(event, "operationType", "\"update\"");
    assert_field_json(event, "documentKey", "{\"_id\": {\"$oid\": \"65a000000000000000000001\"}}");
    assert_field_json(event, "updateDescription",
                      "{\"updatedFields\": {\"b.c\": 2}, \"removedFields\": [\"a\"], \"truncatedArrays\": []}");
    /* A retryable write's lsid stays out of the event, as on mongod. */
    assert_no_field(event, "lsid");
    assert_no_field(event, "txnNumber");
    change_events_cleanup(&events);
    bson_destroy(oplog_entry);
}

/* A transaction's applyOps entry: one event per operation in the stream's scope,
 * in order, at the entry's cluster time, with the transaction's lsid and
 * txnNumber, and tokens that tell the operations apart. */
static void test_transaction_entry_gives_one_event_per_operation(void **state)
{
    bson_t *oplog_entry = entry(
        "c", "admin.$cmd",
        "{\"applyOps\": ["
        "{\"op\": \"i\", \"ns\": \"shop.orders\", \"o\": {\"_id\": 1}, \"o2\": {\"_id\": 1}},"
        "{\"op\": \"i\", \"ns\": \"shop.other\", \"o\": {\"_id\": 5}, \"o2\": {\"_id\": 5}},"
        "{\"op\": \"u\", \"ns\": \"shop.orders\", \"o\": {\"$v\": 2, \"updateDescription\": "
        "{\"updatedFields\": {\"a\": 2}, \"removedFields\": [], \"truncatedArrays\": []}}, "
        "\"o2\": {\"_id\": 1}},"
        "{\"op\": \"d\", \"ns\": \"shop.orders\", \"o\": {\"_id\": 3}}]}",
        NULL, "\"lsid\": {\"id\": 9}, \"txnNumber\": {\"$numberLong\": \"12\"}");
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    build(oplog_entry, &spec, &events);
    assert_int_equal(events.count, 3);
    const char *types[] = {"\"insert\"", "\"update\"", "\"delete\""};
    const uint32_t indexes[] = {0, 2, 3};
    for (size_t i = 0; i < events.count; i++) {
        assert_field_json(events.documents[i], "operationType", types[i]);
        assert_field_json(events.documents[i], "clusterTime", "{\"$timestamp\": {\"t\": 100, \"i\": 7}}");
        assert_field_json(events.documents[i], "lsid", "{\"id\": 9}");
        assert_field_json(events.documents[i], "txnNumber", "{\"$numberLong\": \"12\"}");
        assert_int_equal(events.tokens[i].index, indexes[i]);
        if (i > 0) {
            assert_true(change_token_compare(&events.tokens[i - 1], &events.tokens[i]) < 0);
        }
    }
    assert_keys(events.documents[2], "_id,operationType,clusterTime,wallTime,ns,documentKey,lsid,txnNumber");
    assert_field_json(events.documents[2], "documentKey", "{\"_id\": 3}");
    assert_field_json(events.documents[1], "_id", "{\"_data\": \"8200000064000000070100000002\"}");
    change_events_cleanup(&events);

    /* A database stream sees the other collection's insert too. */
    change_spec_t database = {.scope = CHANGE_SCOPE_DATABASE, .database = "shop"};
    build(oplog_entry, &database, &events);
    assert_int_equal(events.count, 4);
    assert_field_json(events.documents[1], "ns", "{\"db\": \"shop\", \"coll\": \"other\"}");
    change_events_cleanup(&events);
    bson_destroy(oplog_entry);
}

static void test_replacement_is_a_replace_event_with_the_new_document(void **state)
{
    bson_t *oplog_entry = entry("u", "shop.orders", "{\"_id\": \"k\", \"x\": null}", "{\"_id\": \"k\"}", "");
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    build(oplog_entry, &spec, &events);
    assert_int_equal(events.count, 1);
    assert_field_json(events.documents[0], "operationType", "\"replace\"");
    assert_field_json(events.documents[0], "fullDocument", "{\"_id\": \"k\", \"x\": null}");
    assert_no_field(events.documents[0], "updateDescription");
    change_events_cleanup(&events);
    bson_destroy(oplog_entry);
}

static void test_other_collections_system_collections_and_noops_give_nothing(void **state)
{
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    bson_t *other = entry("i", "shop.orders2", "{\"_id\": 1}", "{\"_id\": 1}", "");
    build(other, &spec, &events);
    assert_int_equal(events.count, 0);
    bson_t *prefix = entry("i", "shop.order", "{\"_id\": 1}", "{\"_id\": 1}", "");
    build(prefix, &spec, &events);
    assert_int_equal(events.count, 0);
    bson_t *noop = entry("n", "", "{\"msg\": \"new primary\"}", NULL, "");
    build(noop, &spec, &events);
    assert_int_equal(events.count, 0);
    change_spec_t database = {.scope = CHANGE_SCOPE_DATABASE, .database = "shop"};
    bson_t *system = entry("i", "shop.system.views", "{\"_id\": 1}", "{\"_id\": 1}", "");
    build(system, &database, &events);
    assert_int_equal(events.count, 0);
    bson_t *create = entry("c", "shop.$cmd", "{\"create\": \"orders\"}", NULL, "");
    build(create, &database, &events);
    assert_int_equal(events.count, 0);
    bson_destroy(other);
    bson_destroy(prefix);
    bson_destroy(noop);
    bson_destroy(system);
    bson_destroy(create);
}

static void test_database_and_cluster_scopes(void **state)
{
    change_spec_t database = {.scope = CHANGE_SCOPE_DATABASE, .database = "shop"};
    change_spec_t cluster = {.scope = CHANGE_SCOPE_CLUSTER};
    change_events_t events;
    bson_t *in_shop = entry("i", "shop.any", "{\"_id\": 1}", "{\"_id\": 1}", "");
    bson_t *in_shop2 = entry("i", "shop2.any", "{\"_id\": 1}", "{\"_id\": 1}", "");
    bson_t *in_admin = entry("i", "admin.any", "{\"_id\": 1}", "{\"_id\": 1}", "");
    build(in_shop, &database, &events);
    assert_int_equal(events.count, 1);
    change_events_cleanup(&events);
    build(in_shop2, &database, &events);
    assert_int_equal(events.count, 0);
    build(in_shop2, &cluster, &events);
    assert_int_equal(events.count, 1);
    assert_field_json(events.documents[0], "ns", "{\"db\": \"shop2\", \"coll\": \"any\"}");
    change_events_cleanup(&events);
    build(in_admin, &cluster, &events);
    assert_int_equal(events.count, 0);
    assert_true(change_event_internal_database("local"));
    assert_true(change_event_internal_database("config"));
    assert_false(change_event_internal_database("configs"));
    bson_destroy(in_shop);
    bson_destroy(in_shop2);
    bson_destroy(in_admin);
}

/* --- commands ------------------------------------------------------------------------ */

static void test_drop_invalidates_only_the_collection_stream(void **state)
{
    bson_t *drop = entry("c", "shop.$cmd", "{\"drop\": \"orders\"}", NULL, "");
    change_spec_t collection = collection_spec("shop", "orders");
    change_spec_t database = {.scope = CHANGE_SCOPE_DATABASE, .database = "shop"};
    change_spec_t cluster = {.scope = CHANGE_SCOPE_CLUSTER};
    change_events_t events;
    build(drop, &collection, &events);
    assert_int_equal(events.count, 2);
    assert_keys(events.documents[0], "_id,operationType,clusterTime,wallTime,ns");
    assert_field_json(events.documents[0], "operationType", "\"drop\"");
    assert_field_json(events.documents[0], "ns", "{\"db\": \"shop\", \"coll\": \"orders\"}");
    assert_keys(events.documents[1], "_id,operationType,clusterTime,wallTime");
    assert_field_json(events.documents[1], "operationType", "\"invalidate\"");
    assert_field_json(events.documents[1], "_id", "{\"_data\": \"82000000640000000702\"}");
    assert_int_equal(events.tokens[1].kind, CHANGE_TOKEN_INVALIDATE);
    assert_true(change_token_compare(&events.tokens[0], &events.tokens[1]) < 0);
    change_events_cleanup(&events);
    build(drop, &database, &events);
    assert_int_equal(events.count, 1);
    change_events_cleanup(&events);
    build(drop, &cluster, &events);
    assert_int_equal(events.count, 1);
    change_events_cleanup(&events);
    change_spec_t other = collection_spec("shop", "customers");
    build(drop, &other, &events);
    assert_int_equal(events.count, 0);
    bson_destroy(drop);
}

static void test_rename_reaches_source_and_target_streams(void **state)
{
    bson_t *rename = entry("c", "shop.$cmd",
                           "{\"renameCollection\": \"shop.orders\", \"to\": \"archive.old\", \"stayTemp\": false}", NULL,
                           "");
    change_events_t events;
    change_spec_t source = collection_spec("shop", "orders");
    build(rename, &source, &events);
    assert_int_equal(events.count, 2);
    assert_keys(events.documents[0], "_id,operationType,clusterTime,wallTime,ns,to");
    assert_field_json(events.documents[0], "operationType", "\"rename\"");
    assert_field_json(events.documents[0], "ns", "{\"db\": \"shop\", \"coll\": \"orders\"}");
    assert_field_json(events.documents[0], "to", "{\"db\": \"archive\", \"coll\": \"old\"}");
    change_events_cleanup(&events);
    change_spec_t target = collection_spec("archive", "old");
    build(rename, &target, &events);
    assert_int_equal(events.count, 2);
    change_events_cleanup(&events);
    change_spec_t target_database = {.scope = CHANGE_SCOPE_DATABASE, .database = "archive"};
    build(rename, &target_database, &events);
    assert_int_equal(events.count, 1);
    change_events_cleanup(&events);
    change_spec_t unrelated = {.scope = CHANGE_SCOPE_DATABASE, .database = "other"};
    build(rename, &unrelated, &events);
    assert_int_equal(events.count, 0);
    bson_destroy(rename);
}

static void test_drop_database(void **state)
{
    bson_t *drop_database = entry("c", "shop.$cmd", "{\"dropDatabase\": 1}", NULL, "");
    change_events_t events;
    change_spec_t database = {.scope = CHANGE_SCOPE_DATABASE, .database = "shop"};
    build(drop_database, &database, &events);
    assert_int_equal(events.count, 2);
    assert_field_json(events.documents[0], "operationType", "\"dropDatabase\"");
    assert_field_json(events.documents[0], "ns", "{\"db\": \"shop\"}");
    assert_field_json(events.documents[1], "operationType", "\"invalidate\"");
    change_events_cleanup(&events);
    change_spec_t cluster = {.scope = CHANGE_SCOPE_CLUSTER};
    build(drop_database, &cluster, &events);
    assert_int_equal(events.count, 1);
    change_events_cleanup(&events);
    change_spec_t collection = collection_spec("shop", "orders");
    build(drop_database, &collection, &events);
    assert_int_equal(events.count, 2);
    change_events_cleanup(&events);
    change_spec_t elsewhere = collection_spec("shop2", "orders");
    build(drop_database, &elsewhere, &events);
    assert_int_equal(events.count, 0);
    bson_destroy(drop_database);
}

/* --- fullDocument modes ----------------------------------------------------------------- */

typedef struct lookup_stub {
    int calls;
    bool found;
    char ns[64];
    char key[128];
} lookup_stub_t;

static bool stub_lookup(void *context, const char *ns, const bson_t *document_key, bson_t *out_document,
                        bool *out_found, bson_error_t *error)
{
    lookup_stub_t *stub = context;
    stub->calls++;
    snprintf(stub->ns, sizeof stub->ns, "%s", ns);
    char *key = bson_as_relaxed_extended_json(document_key, NULL);
    snprintf(stub->key, sizeof stub->key, "%s", key);
    bson_free(key);
    *out_found = stub->found;
    if (stub->found) {
        bson_init(out_document);
        BSON_APPEND_INT32(out_document, "_id", 5);
        BSON_APPEND_UTF8(out_document, "now", "current");
    }
    return true;
}

static const char *const UPDATE_OBJECT =
    "{\"$v\": 2, \"updateDescription\": {\"updatedFields\": {\"n\": 1}, \"removedFields\": [], "
    "\"truncatedArrays\": []}}";

static void test_update_lookup_reads_the_current_document_or_null(void **state)
{
    bson_t *update = entry("u", "shop.orders", UPDATE_OBJECT, "{\"_id\": 5}", "");
    change_spec_t spec = collection_spec("shop", "orders");
    spec.full_document = CHANGE_FULL_DOCUMENT_UPDATE_LOOKUP;
    lookup_stub_t stub = {.found = true};
    change_events_t events;
    bson_error_t error;
    assert_true(change_events_build(update, TIME(100, 7), &spec, stub_lookup, &stub, &events, &error));
    assert_int_equal(stub.calls, 1);
    assert_string_equal(stub.ns, "shop.orders");
    assert_string_equal(stub.key, "{ \"_id\" : 5 }");
    assert_keys(events.documents[0],
                "_id,operationType,clusterTime,wallTime,fullDocument,ns,documentKey,updateDescription");
    assert_field_json(events.documents[0], "fullDocument", "{\"_id\": 5, \"now\": \"current\"}");
    change_events_cleanup(&events);

    stub.found = false; /* deleted since: null, not missing */
    assert_true(change_events_build(update, TIME(100, 7), &spec, stub_lookup, &stub, &events, &error));
    assert_field_json(events.documents[0], "fullDocument", "null");
    change_events_cleanup(&events);

    /* Inserts and replaces already carry their document: no lookup. */
    bson_t *insert = entry("i", "shop.orders", "{\"_id\": 6}", "{\"_id\": 6}", "");
    assert_true(change_events_build(insert, TIME(100, 7), &spec, stub_lookup, &stub, &events, &error));
    assert_int_equal(stub.calls, 2);
    change_events_cleanup(&events);
    bson_destroy(insert);
    bson_destroy(update);
}

static void test_stored_images_when_available_and_required(void **state)
{
    bson_t *without = entry("u", "shop.orders", UPDATE_OBJECT, "{\"_id\": 5}", "");
    bson_t *with = entry("u", "shop.orders", UPDATE_OBJECT, "{\"_id\": 5}",
                         "\"preImage\": {\"_id\": 5, \"n\": 0}, \"postImage\": {\"_id\": 5, \"n\": 1}");
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    bson_error_t error;

    spec.full_document = CHANGE_FULL_DOCUMENT_WHEN_AVAILABLE;
    spec.full_document_before_change = CHANGE_BEFORE_CHANGE_WHEN_AVAILABLE;
    build(with, &spec, &events);
    assert_field_json(events.documents[0], "fullDocument", "{\"_id\": 5, \"n\": 1}");
    assert_field_json(events.documents[0], "fullDocumentBeforeChange", "{\"_id\": 5, \"n\": 0}");
    assert_keys(events.documents[0], "_id,operationType,clusterTime,wallTime,fullDocument,ns,documentKey,"
                                      "updateDescription,fullDocumentBeforeChange");
    change_events_cleanup(&events);
    build(without, &spec, &events);
    assert_field_json(events.documents[0], "fullDocument", "null");
    assert_field_json(events.documents[0], "fullDocumentBeforeChange", "null");
    change_events_cleanup(&events);

    spec.full_document = CHANGE_FULL_DOCUMENT_REQUIRED;
    spec.full_document_before_change = CHANGE_BEFORE_CHANGE_OFF;
    assert_false(change_events_build(without, TIME(100, 7), &spec, NULL, NULL, &events, &error));
    assert_int_equal(error.code, TC_ERR_NO_MATCHING_DOCUMENT);
    assert_non_null(strstr(error.message, "require a post-image"));
    change_events_cleanup(&events);
    spec.full_document = CHANGE_FULL_DOCUMENT_DEFAULT;
    spec.full_document_before_change = CHANGE_BEFORE_CHANGE_REQUIRED;
    assert_false(change_events_build(without, TIME(100, 7), &spec, NULL, NULL, &events, &error));
    assert_int_equal(error.code, TC_ERR_NO_MATCHING_DOCUMENT);
    assert_non_null(strstr(error.message, "require a pre-image"));
    change_events_cleanup(&events);
    bson_destroy(without);
    bson_destroy(with);
}

/* showExpandedEvents: the DDL entries become events with mongod 6.0's shapes. */
static void test_expanded_events(void **state)
{
    (void)state;
    change_spec_t spec = collection_spec("shop", "orders");
    change_events_t events;
    const char *uuid = "\"ui\": {\"$binary\": {\"base64\": \"AAECAwQFBgcICQoLDA0ODw==\", \"subType\": \"04\"}}";
    bson_t *coll_mod = entry("c", "shop.$cmd", "{\"collMod\": \"orders\", \"index\": {\"name\": \"a_1\", \"hidden\": true}}",
                             "{\"collectionOptions_old\": {\"validationLevel\": \"strict\"}, "
                             "\"indexOptions_old\": {\"hidden\": false}}",
                             uuid);
    build(coll_mod, &spec, &events);
    assert_int_equal(events.count, 0); /* not without the option */
    spec.show_expanded_events = true;
    build(coll_mod, &spec, &events);
    assert_int_equal(events.count, 1);
    assert_keys(events.documents[0],
                "_id,operationType,clusterTime,collectionUUID,wallTime,ns,operationDescription,stateBeforeChange");
    assert_field_json(events.documents[0], "operationType", "\"modify\"");
    assert_field_json(events.documents[0], "operationDescription", "{\"index\": {\"name\": \"a_1\", \"hidden\": true}}");
    assert_field_json(events.documents[0], "stateBeforeChange",
                      "{\"collectionOptions\": {\"validationLevel\": \"strict\"}, \"indexOptions\": {\"hidden\": false}}");
    change_events_cleanup(&events);

    bson_t *drop_index = entry("c", "shop.$cmd", "{\"dropIndexes\": \"orders\", \"index\": \"a_1\"}",
                               "{\"v\": 2, \"key\": {\"a\": 1}, \"name\": \"a_1\"}", uuid);
    build(drop_index, &spec, &events);
    assert_int_equal(events.count, 1);
    assert_field_json(events.documents[0], "operationType", "\"dropIndexes\"");
    assert_field_json(events.documents[0], "operationDescription",
                      "{\"indexes\": [{\"v\": 2, \"key\": {\"a\": 1}, \"name\": \"a_1\"}]}");
    assert_field_json(events.documents[0], "ns", "{\"db\": \"shop\", \"coll\": \"orders\"}");
    change_events_cleanup(&events);

    /* Another collection's DDL is not this stream's; an insert gains collectionUUID. */
    bson_t *other = entry("c", "shop.$cmd", "{\"create\": \"other\", \"idIndex\": {}}", NULL, uuid);
    build(other, &spec, &events);
    assert_int_equal(events.count, 0);
    bson_t *insert = entry("i", "shop.orders", "{\"_id\": 1}", "{\"_id\": 1}", uuid);
    build(insert, &spec, &events);
    assert_int_equal(events.count, 1);
    assert_keys(events.documents[0], "_id,operationType,clusterTime,collectionUUID,wallTime,fullDocument,ns,documentKey");
    change_events_cleanup(&events);
    bson_destroy(coll_mod);
    bson_destroy(drop_index);
    bson_destroy(other);
    bson_destroy(insert);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_round_trip_and_hex_form),
        cmocka_unit_test(test_tokens_sort_as_their_hex_strings),
        cmocka_unit_test(test_token_parse_errors),
        cmocka_unit_test(test_insert_event),
        cmocka_unit_test(test_update_event_has_description_and_no_full_document_by_default),
        cmocka_unit_test(test_transaction_entry_gives_one_event_per_operation),
        cmocka_unit_test(test_replacement_is_a_replace_event_with_the_new_document),
        cmocka_unit_test(test_other_collections_system_collections_and_noops_give_nothing),
        cmocka_unit_test(test_database_and_cluster_scopes),
        cmocka_unit_test(test_drop_invalidates_only_the_collection_stream),
        cmocka_unit_test(test_rename_reaches_source_and_target_streams),
        cmocka_unit_test(test_drop_database),
        cmocka_unit_test(test_update_lookup_reads_the_current_document_or_null),
        cmocka_unit_test(test_stored_images_when_available_and_required),
        cmocka_unit_test(test_expanded_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
