/* Unit tests for src/store/current_op.c and session_cache.c: the command field
 * as currentOp truncates it, op kinds and namespaces, the currentOp command's
 * filter, the table (opids, kill flags, which entries a report lists) and the
 * local session cache (users, endSessions, expiry). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include "store/current_op.h"
#include "store/session_cache.h"

static void test_command_truncation(void **state)
{
    (void)state;
    bson_t *small = support_json("{'find': 'orders', 'filter': {'a': 1}, '$db': 'shop'}");
    bson_t out = BSON_INITIALIZER;
    bson_iter_t iter;
    current_op_append_command(&out, small, 0, CURRENT_OP_MAX_COMMAND_BYTES);
    assert_true(bson_iter_init_find(&iter, &out, "command"));
    bson_iter_t inner;
    assert_true(bson_iter_recurse(&iter, &inner) && bson_iter_find(&inner, "find"));
    bson_destroy(&out);

    /* Past 1000 bytes: {$truncated: text of at most 1000 characters ending in "...", comment}. */
    bson_t large = BSON_INITIALIZER;
    char padding[2000];
    memset(padding, 'x', sizeof padding - 1);
    padding[sizeof padding - 1] = '\0';
    BSON_APPEND_UTF8(&large, "insert", "orders");
    BSON_APPEND_UTF8(&large, "payload", padding);
    BSON_APPEND_UTF8(&large, "comment", "tagged");
    bson_init(&out);
    current_op_append_command(&out, &large, 0, CURRENT_OP_MAX_COMMAND_BYTES);
    assert_true(bson_iter_init_find(&iter, &out, "command") && bson_iter_recurse(&iter, &inner));
    assert_true(bson_iter_find(&inner, "$truncated"));
    uint32_t length;
    const char *text = bson_iter_utf8(&inner, &length);
    assert_int_equal(length, CURRENT_OP_MAX_COMMAND_BYTES);
    assert_memory_equal(text + length - 3, "...", 3);
    assert_non_null(strstr(text, "orders"));
    assert_true(bson_iter_next(&inner));
    assert_string_equal(bson_iter_key(&inner), "comment");
    assert_string_equal(bson_iter_utf8(&inner, NULL), "tagged");
    bson_destroy(&out);

    /* $currentOp (truncateOps false) shows it whole. */
    bson_init(&out);
    current_op_append_command(&out, &large, 0, 0);
    assert_true(bson_iter_init_find(&iter, &out, "command") && bson_iter_recurse(&iter, &inner));
    assert_true(bson_iter_find(&inner, "payload"));
    bson_destroy(&out);
    bson_destroy(&large);
    bson_destroy(small);
}

/* An insert whose documents came as an OP_MSG document sequence (appended last
 * to the command): mongod reports the body only, so no documents and, small
 * again, no $truncated. */
static void test_command_without_its_sequences(void **state)
{
    (void)state;
    char padding[2000];
    memset(padding, 'x', sizeof padding - 1);
    padding[sizeof padding - 1] = '\0';
    bson_t assembled = BSON_INITIALIZER, documents, document;
    BSON_APPEND_UTF8(&assembled, "insert", "orders");
    BSON_APPEND_BOOL(&assembled, "ordered", true);
    BSON_APPEND_UTF8(&assembled, "$db", "shop");
    BSON_APPEND_ARRAY_BEGIN(&assembled, "documents", &documents);
    BSON_APPEND_DOCUMENT_BEGIN(&documents, "0", &document);
    BSON_APPEND_UTF8(&document, "payload", padding);
    bson_append_document_end(&documents, &document);
    bson_append_array_end(&assembled, &documents);
    bson_t out = BSON_INITIALIZER;
    current_op_append_command(&out, &assembled, 1, CURRENT_OP_MAX_COMMAND_BYTES);
    bson_t *expected = support_json("{'command': {'insert': 'orders', 'ordered': true, '$db': 'shop'}}");
    assert_true(bson_equal(&out, expected));
    bson_destroy(expected);
    bson_destroy(&out);
    bson_destroy(&assembled);
}

static void test_kinds_and_namespaces(void **state)
{
    (void)state;
    static const struct {
        const char *command;
        const char *name;
        const char *kind;
        const char *ns;
    } cases[] = {
        {"{'find': 'orders'}", "find", "query", "shop.orders"},
        {"{'insert': 'orders'}", "insert", "insert", "shop.orders"},
        {"{'update': 'orders'}", "update", "update", "shop.orders"},
        {"{'delete': 'orders'}", "delete", "remove", "shop.orders"},
        {"{'getMore': 5, 'collection': 'orders'}", "getMore", "getmore", "shop.orders"},
        {"{'aggregate': 'orders'}", "aggregate", "command", "shop.orders"},
        {"{'aggregate': 1}", "aggregate", "command", "shop.$cmd.aggregate"},
        {"{'ping': 1}", "ping", "command", "shop.$cmd"},
        {"{'count': ''}", "count", "command", "shop.$cmd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *command = support_json(cases[i].command);
        assert_string_equal(current_op_kind(cases[i].name), cases[i].kind);
        char *ns = current_op_namespace(command, cases[i].name, "shop");
        assert_string_equal(ns, cases[i].ns);
        bson_free(ns);
        bson_destroy(command);
    }
}

static void test_command_filter(void **state)
{
    (void)state;
    bson_t *command = support_json("{'currentOp': 1, '%all': true, '%ownOps': false, 'active': true, "
                                   "'ns': 'shop.orders', 'lsid': {'id': 1}, '%db': 'admin', 'comment': 'x'}");
    bson_t filter;
    current_op_command_filter(command, &filter);
    bson_t *expected = support_json("{'active': true, 'ns': 'shop.orders'}");
    assert_true(bson_equal(&filter, expected));
    bson_destroy(expected);
    bson_destroy(&filter);
    bson_destroy(command);
}

static void test_format_time(void **state)
{
    (void)state;
    char text[64];
    current_op_format_time(INT64_C(1764625200123), text, sizeof text); /* 2025-12-01T21:40:00.123Z */
    assert_string_equal(text, "2025-12-01T21:40:00.123+00:00");
}

/* The number of documents a report lists, and the first one's opid (or -1). */
static uint32_t report_count(current_op_table_t *table, const current_op_report_options_t *options,
                             int64_t *out_first_opid)
{
    bson_t array = BSON_INITIALIZER;
    uint32_t count = 0;
    bson_iter_t iter, field;
    current_op_report(table, options, &array, &count);
    *out_first_opid = -1;
    if (bson_iter_init(&iter, &array) && bson_iter_next(&iter) && bson_iter_recurse(&iter, &field) &&
        bson_iter_find(&field, "opid")) {
        *out_first_opid = bson_iter_as_int64(&field);
    }
    bson_destroy(&array);
    return count;
}

static void test_table(void **state)
{
    (void)state;
    current_op_table_t *table = current_op_table_new();
    current_op_entry_t alice = {0}, bob = {0};
    current_op_register(table, &alice, 1, "127.0.0.1:1000");
    current_op_register(table, &bob, 2, "127.0.0.1:1001");
    current_op_set_user(table, &alice, "alice", "admin");
    current_op_set_user(table, &bob, "bob", "admin");
    bson_t *command = support_json("{'find': 'orders', '%db': 'shop'}");
    const atomic_bool *flag = current_op_begin(table, &alice, command, 0, "find", "shop");
    assert_false(atomic_load(flag));

    current_op_report_options_t options = {.host = "h:1", .auth_enabled = true, .user_name = "bob",
                                           .user_database = "admin"};
    int64_t opid;
    assert_int_equal(report_count(table, &options, &opid), 0); /* bob runs nothing, idle not asked */
    options.idle_connections = true;
    assert_int_equal(report_count(table, &options, &opid), 1); /* bob's idle connection */
    assert_int_equal(opid, -1);
    options.all_users = true;
    options.idle_connections = false;
    assert_int_equal(report_count(table, &options, &opid), 1); /* alice's find */
    assert_int_equal(opid, alice.opid);
    options.all_users = false;
    options.auth_enabled = false; /* without access control every operation is listed */
    assert_int_equal(report_count(table, &options, &opid), 1);

    assert_false(current_op_kill(table, alice.opid + 1, NULL, NULL));
    assert_false(current_op_kill(table, alice.opid, "bob", "admin")); /* not bob's to kill */
    assert_false(atomic_load(flag));
    assert_true(current_op_kill(table, alice.opid, "alice", "admin"));
    assert_true(atomic_load(flag));
    current_op_end(table, &alice);
    assert_false(current_op_kill(table, alice.opid, NULL, NULL)); /* no longer running */
    int64_t first_opid = alice.opid;
    current_op_begin(table, &alice, command, 0, "find", "shop");
    assert_true(alice.opid > first_opid);
    assert_false(atomic_load(flag)); /* a new command starts unkilled */
    current_op_end(table, &alice);

    current_op_unregister(table, &bob);
    current_op_unregister(table, &alice);
    options.idle_connections = true;
    assert_int_equal(report_count(table, &options, &opid), 0);
    bson_destroy(command);
    current_op_table_destroy(table);
}

/* A durable write's command moves to its held operation while the reply waits
 * for the journal: same opid and start, the document now at its new home, and
 * the entry still active until ended. */
static void test_move_command(void **state)
{
    (void)state;
    current_op_table_t *table = current_op_table_new();
    current_op_entry_t entry = {0};
    current_op_register(table, &entry, 7, "127.0.0.1:1007");
    bson_t assembled = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&assembled, "insert", "orders");
    BSON_APPEND_UTF8(&assembled, "$db", "shop");
    current_op_begin(table, &entry, &assembled, 0, "insert", "shop");
    int64_t opid = entry.opid, started_us = entry.started_us;
    bson_t kept;
    current_op_move_command(table, &entry, &assembled, &kept);
    assert_true(bson_empty(&assembled)); /* left empty, for its owner to reuse or destroy */
    bson_destroy(&assembled);
    assert_true(entry.active);
    assert_ptr_equal(entry.command, &kept);
    assert_string_equal(entry.command_name, "insert");
    assert_string_equal(entry.database, "shop");
    assert_true(entry.database > (const char *)bson_get_data(&kept) &&
                entry.database < (const char *)bson_get_data(&kept) + kept.len); /* read from its new home */
    assert_int_equal(entry.opid, opid);
    assert_int_equal(entry.started_us, started_us);
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, &kept, "insert") && strcmp(bson_iter_utf8(&iter, NULL), "orders") == 0);
    current_op_report_options_t options = {.host = "h:1"};
    assert_int_equal(report_count(table, &options, &opid), 1);
    assert_int_equal(opid, entry.opid);
    current_op_end(table, &entry);
    assert_int_equal(report_count(table, &options, &opid), 0);
    bson_destroy(&kept);
    current_op_unregister(table, &entry);
    current_op_table_destroy(table);
}

static uint32_t list_count(session_cache_t *cache, const session_cache_filter_t *filter)
{
    bson_t array = BSON_INITIALIZER;
    uint32_t count = 0;
    session_cache_list(cache, filter, &array, &count);
    bson_destroy(&array);
    return count;
}

static void test_session_cache(void **state)
{
    (void)state;
    session_cache_t *cache = session_cache_new();
    bson_t commands[200];
    for (int i = 0; i < 200; i++) { /* enough to grow the buckets */
        uint8_t id[16] = {0};
        id[0] = (uint8_t)i;
        id[15] = (uint8_t)(i * 7);
        bson_t lsid;
        bson_init(&commands[i]);
        BSON_APPEND_UTF8(&commands[i], "find", "orders");
        BSON_APPEND_DOCUMENT_BEGIN(&commands[i], "lsid", &lsid);
        BSON_APPEND_BINARY(&lsid, "id", BSON_SUBTYPE_UUID, id, sizeof id);
        bson_append_document_end(&commands[i], &lsid);
        session_cache_note_command(cache, &commands[i], i % 2 ? "alice" : NULL, i % 2 ? "admin" : NULL);
        session_cache_note_command(cache, &commands[i], i % 2 ? "alice" : NULL, i % 2 ? "admin" : NULL);
    }
    bson_t *no_lsid = support_json("{'find': 'orders'}");
    session_cache_note_command(cache, no_lsid, NULL, NULL);
    bson_destroy(no_lsid);

    session_cache_filter_t all = {.all_users = true};
    assert_int_equal(list_count(cache, &all), 200);
    const char *alice[] = {"alice"}, *admin[] = {"admin"}, *nobody[] = {NULL};
    session_cache_filter_t of_alice = {.names = alice, .databases = admin, .user_count = 1};
    session_cache_filter_t of_nobody = {.names = nobody, .databases = nobody, .user_count = 1};
    assert_int_equal(list_count(cache, &of_alice), 100);
    assert_int_equal(list_count(cache, &of_nobody), 100);

    /* endSessions with the first ten lsids. */
    bson_t lsids = BSON_INITIALIZER;
    for (int i = 0; i < 10; i++) {
        bson_iter_t lsid;
        char key[16];
        const char *key_string;
        assert_true(bson_iter_init_find(&lsid, &commands[i], "lsid"));
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_iter(&lsids, key_string, -1, &lsid);
    }
    session_cache_end(cache, &lsids);
    bson_destroy(&lsids);
    assert_int_equal(list_count(cache, &all), 190);

    session_cache_reap(cache, INT64_MAX / 2); /* every session long unused */
    assert_int_equal(list_count(cache, &all), 0);
    for (int i = 0; i < 200; i++) {
        bson_destroy(&commands[i]);
    }
    session_cache_destroy(cache);
}

static void test_uid(void **state)
{
    (void)state;
    bson_t out = BSON_INITIALIZER;
    bson_iter_t iter;
    const uint8_t *digest;
    uint32_t length;
    bson_subtype_t subtype;
    session_cache_append_uid(&out, NULL, NULL);
    assert_true(bson_iter_init_find(&iter, &out, "uid"));
    bson_iter_binary(&iter, &subtype, &length, &digest);
    assert_int_equal(length, 32);
    /* SHA-256 of the empty string, mongod's uid of a session without a user. */
    static const uint8_t empty_sha256[4] = {0xe3, 0xb0, 0xc4, 0x42};
    assert_memory_equal(digest, empty_sha256, sizeof empty_sha256);
    bson_destroy(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_command_truncation),
        cmocka_unit_test(test_command_without_its_sequences),
        cmocka_unit_test(test_kinds_and_namespaces),
        cmocka_unit_test(test_command_filter),
        cmocka_unit_test(test_format_time),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_move_command),
        cmocka_unit_test(test_session_cache),
        cmocka_unit_test(test_uid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
