/* Tests for src/store/oplog.c on a real WiredTiger database in a temporary
 * directory: entries written in the writer's transaction, the in-flight times
 * that hold readers back (the "hole" problem), the majority time, the clock
 * across a reopen, and trimming to the size cap. */
#include "store/oplog.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

typedef struct fixture {
    char directory[64];
    storage_t *storage;
    oplog_t *oplog;
    storage_session_t *first;
    storage_session_t *second;
} fixture_t;

static void open_store(fixture_t *fixture, uint64_t oplog_bytes)
{
    bson_error_t error;
    storage_options_t options = {.dbpath = fixture->directory, .cache_bytes = 64ull << 20, .compressor = "snappy"};
    fixture->storage = storage_open(&options, &error);
    if (fixture->storage == NULL) {
        fail_msg("storage_open: %s", error.message);
    }
    fixture->oplog = oplog_open(fixture->storage, oplog_bytes, &error);
    if (fixture->oplog == NULL) {
        fail_msg("oplog_open: %s", error.message);
    }
    fixture->first = storage_session_new(fixture->storage, &error);
    fixture->second = storage_session_new(fixture->storage, &error);
    assert_non_null(fixture->first);
    assert_non_null(fixture->second);
}

static void close_store(fixture_t *fixture)
{
    storage_session_destroy(fixture->first);
    storage_session_destroy(fixture->second);
    oplog_close(fixture->oplog);
    storage_close(fixture->storage);
}

static int setup(void **state)
{
    fixture_t *fixture = calloc(1, sizeof *fixture);
    snprintf(fixture->directory, sizeof fixture->directory, "/tmp/test_oplog_XXXXXX");
    assert_non_null(mkdtemp(fixture->directory));
    open_store(fixture, 64ull << 20);
    *state = fixture;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fixture = *state;
    close_store(fixture);
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", fixture->directory);
    assert_int_equal(system(command), 0);
    free(fixture);
    return 0;
}

static void log_drop(storage_session_t *session, const char *collection)
{
    bson_error_t error;
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "drop", collection);
    if (!oplog_log_command(session, "db", NULL, &object, NULL, &error)) {
        fail_msg("oplog_log_command: %s", error.message);
    }
    bson_destroy(&object);
}

/* The times of the entries a fresh read sees, from time from, up to limit. */
static size_t read_times(storage_session_t *session, uint64_t from, uint64_t *out, size_t capacity)
{
    bson_error_t error;
    uint64_t trimmed;
    size_t count = 0;
    assert_true(storage_begin(session, &error));
    oplog_scan_t *scan = oplog_scan_open(session, from, &trimmed, &error);
    assert_non_null(scan);
    for (;;) {
        uint64_t time;
        bson_t entry;
        bool end;
        assert_true(oplog_scan_next(scan, &time, &entry, &end, &error));
        if (end) {
            break;
        }
        if (count < capacity) {
            out[count] = time;
        }
        count++;
    }
    oplog_scan_close(scan);
    storage_rollback(session);
    return count;
}

/* --- tests -------------------------------------------------------------------------- */

static void test_open_writes_a_noop_and_times_start_there(void **state)
{
    fixture_t *fixture = *state;
    uint64_t times[8];
    assert_int_equal(read_times(fixture->first, 0, times, 8), 1);
    assert_true(times[0] == oplog_committed_time(fixture->oplog));
    assert_true(times[0] == oplog_majority_time(fixture->oplog));
    assert_true(oplog_trimmed_time(fixture->oplog) == times[0] - 1);
    /* Seconds follow the wall clock. */
    long long seconds = (long long)OPLOG_TIME_SECONDS(times[0]);
    assert_true(llabs(seconds - (long long)time(NULL)) <= 2);
}

static void test_an_open_transaction_holds_back_the_committed_time(void **state)
{
    fixture_t *fixture = *state;
    bson_error_t error;
    uint64_t before = oplog_committed_time(fixture->oplog);

    assert_true(storage_begin(fixture->first, &error));
    log_drop(fixture->first, "slow"); /* takes time t1, stays open */
    uint64_t t1 = oplog_cluster_time(fixture->oplog);
    assert_true(t1 > before);

    log_drop(fixture->second, "fast"); /* its own transaction: t2, committed at once */
    uint64_t t2 = oplog_cluster_time(fixture->oplog);
    assert_true(t2 > t1);
    /* t2 is visible in the table, but readers must stop before t1. */
    assert_true(oplog_committed_time(fixture->oplog) == t1 - 1);
    assert_true(oplog_sync_journal(fixture->second, &error));
    assert_true(oplog_majority_time(fixture->oplog) <= t1 - 1);
    uint64_t times[8];
    assert_int_equal(read_times(fixture->second, t1, times, 8), 1);
    assert_true(times[0] == t2);

    assert_true(storage_commit(fixture->first, false, &error));
    assert_true(oplog_committed_time(fixture->oplog) == t2);
    assert_int_equal(read_times(fixture->second, t1, times, 8), 2);
    assert_true(times[0] == t1 && times[1] == t2);
    assert_true(oplog_majority_time(fixture->oplog) < t2);
    assert_true(oplog_sync_journal(fixture->second, &error));
    assert_true(oplog_majority_time(fixture->oplog) == t2);

    /* The session's last committed write is its operationTime. */
    oplog_session_begin_command(fixture->first);
    assert_true(storage_begin(fixture->first, &error));
    log_drop(fixture->first, "again");
    uint64_t t3 = oplog_cluster_time(fixture->oplog);
    assert_true(storage_commit(fixture->first, true, &error));
    assert_true(oplog_session_operation_time(fixture->first) == t3);
}

static void test_a_rollback_releases_its_time(void **state)
{
    fixture_t *fixture = *state;
    bson_error_t error;
    assert_true(storage_begin(fixture->first, &error));
    log_drop(fixture->first, "never");
    uint64_t taken = oplog_cluster_time(fixture->oplog);
    assert_true(oplog_committed_time(fixture->oplog) < taken);
    storage_rollback(fixture->first);
    assert_true(oplog_committed_time(fixture->oplog) == taken);
    uint64_t times[8];
    assert_int_equal(read_times(fixture->first, taken, times, 8), 0);
    /* Outside a transaction, a command entry opens and commits its own. */
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_INT32(&object, "dropDatabase", 1);
    assert_true(oplog_log_command(fixture->first, "db", NULL, &object, NULL, &error)); /* opens its own */
    bson_destroy(&object);
    assert_true(oplog_committed_time(fixture->oplog) == oplog_cluster_time(fixture->oplog));
}

static void test_entries_record_document_writes(void **state)
{
    fixture_t *fixture = *state;
    bson_error_t error;
    collection_t *collection;
    storage_lock_exclusive(fixture->storage);
    assert_true(storage_create_collection(fixture->first, "db.items", NULL, &collection, &error));
    storage_unlock(fixture->storage);
    uint64_t created = oplog_cluster_time(fixture->oplog);

    bson_t *document = BCON_NEW("_id", BCON_INT32(5), "n", BCON_INT32(1));
    bson_t *after = BCON_NEW("_id", BCON_INT32(5), "n", BCON_INT32(2));
    bson_t *description = BCON_NEW("updatedFields", "{", "n", BCON_INT32(2), "}", "removedFields", "[", "]",
                                   "truncatedArrays", "[", "]");
    bson_t *command = BCON_NEW("insert", "items", "lsid", "{", "id", BCON_INT32(1), "}", "txnNumber",
                               BCON_INT64(3));
    assert_true(storage_begin(fixture->first, &error));
    assert_true(oplog_log_insert(fixture->first, collection, document, command, &error));
    assert_true(oplog_log_update(fixture->first, collection, document, after, description, NULL, &error));
    assert_true(oplog_log_update(fixture->first, collection, document, after, NULL, NULL, &error));
    assert_true(oplog_log_delete(fixture->first, collection, after, NULL, &error));
    assert_true(storage_commit(fixture->first, false, &error));

    assert_true(storage_begin(fixture->first, &error));
    uint64_t trimmed;
    oplog_scan_t *scan = oplog_scan_open(fixture->first, created + 1, &trimmed, &error);
    const char *expected_ops[] = {"i", "u", "u", "d"};
    for (int i = 0; i < 4; i++) {
        uint64_t time;
        bson_t entry;
        bool end;
        bson_iter_t iter;
        assert_true(oplog_scan_next(scan, &time, &entry, &end, &error));
        assert_false(end);
        assert_true(bson_iter_init_find(&iter, &entry, "op"));
        assert_string_equal(bson_iter_utf8(&iter, NULL), expected_ops[i]);
        assert_true(bson_iter_init_find(&iter, &entry, "ns"));
        assert_string_equal(bson_iter_utf8(&iter, NULL), "db.items");
        assert_true(bson_iter_init_find(&iter, &entry, "ts"));
        uint32_t seconds, increment;
        bson_iter_timestamp(&iter, &seconds, &increment);
        assert_true(OPLOG_TIME(seconds, increment) == time);
        assert_true(bson_iter_init_find(&iter, &entry, "ui") && BSON_ITER_HOLDS_BINARY(&iter));
        assert_true(bson_iter_init_find(&iter, &entry, "wall") && BSON_ITER_HOLDS_DATE_TIME(&iter));
        /* No changeStreamPreAndPostImages on this collection: no images kept. */
        assert_false(bson_has_field(&entry, "preImage"));
        assert_false(bson_has_field(&entry, "postImage"));
        if (i == 0) {
            assert_true(bson_iter_init_find(&iter, &entry, "txnNumber"));
            assert_true(bson_iter_as_int64(&iter) == 3);
            assert_true(bson_has_field(&entry, "lsid"));
            assert_false(bson_has_field(&entry, "inTransaction"));
        }
        if (i == 1) {
            assert_true(bson_iter_init(&iter, &entry) && bson_iter_find_descendant(&iter, "o.$v", &iter));
            assert_true(bson_iter_init(&iter, &entry) &&
                        bson_iter_find_descendant(&iter, "o.updateDescription.updatedFields.n", &iter));
        }
        if (i == 2) {
            assert_true(bson_iter_init(&iter, &entry) && bson_iter_find_descendant(&iter, "o.n", &iter));
            assert_int_equal(bson_iter_int32(&iter), 2);
        }
        if (i == 3) {
            assert_true(bson_iter_init(&iter, &entry) && bson_iter_find_descendant(&iter, "o._id", &iter));
            assert_int_equal(bson_iter_int32(&iter), 5);
        }
    }
    oplog_scan_close(scan);
    storage_rollback(fixture->first);
    bson_destroy(document);
    bson_destroy(after);
    bson_destroy(description);
    bson_destroy(command);
}

static void test_the_clock_continues_after_a_reopen(void **state)
{
    fixture_t *fixture = *state;
    log_drop(fixture->first, "one");
    uint64_t last = oplog_cluster_time(fixture->oplog);
    close_store(fixture);
    open_store(fixture, 64ull << 20);
    /* The reopen wrote its "new primary" no-op after every earlier entry. */
    assert_true(oplog_cluster_time(fixture->oplog) > last);
    assert_true(oplog_majority_time(fixture->oplog) == oplog_cluster_time(fixture->oplog));
    uint64_t times[16];
    size_t count = read_times(fixture->first, 0, times, 16);
    assert_int_equal(count, 3); /* the first open's no-op, the drop, the reopen's no-op */
    assert_true(times[0] < times[1] && times[1] < times[2]);
    assert_true(oplog_trimmed_time(fixture->oplog) == times[0] - 1);
}

static void test_trimming_keeps_the_oplog_under_its_size(void **state)
{
    fixture_t *fixture = *state;
    close_store(fixture);
    open_store(fixture, 1ull << 20); /* 1 MB */
    bson_error_t error;
    char *payload = malloc(50001);
    memset(payload, 'x', 50000);
    payload[50000] = '\0';
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "drop", payload);
    uint64_t first_written = 0;
    for (int i = 0; i < 60; i++) { /* 3 MB */
        assert_true(oplog_log_command(fixture->first, "db", NULL, &object, NULL, &error));
        if (i == 0) {
            first_written = oplog_cluster_time(fixture->oplog);
        }
    }
    bson_destroy(&object);
    free(payload);
    /* The background thread trims a batch at a time: wait until it is done. */
    uint64_t times[128];
    size_t count = read_times(fixture->first, 0, times, 128);
    for (int waited = 0; waited < 100 && count > 22; waited++) {
        usleep(50 * 1000);
        count = read_times(fixture->first, 0, times, 128);
    }
    assert_true(count >= 18 && count <= 22); /* 1 MB holds about 20 entries of 50 KB */
    uint64_t trimmed = oplog_trimmed_time(fixture->oplog);
    assert_true(trimmed >= first_written + 30);
    assert_true(times[0] > trimmed);
    assert_true(times[count - 1] == oplog_cluster_time(fixture->oplog)); /* the newest stays */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_writes_a_noop_and_times_start_there, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_open_transaction_holds_back_the_committed_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_rollback_releases_its_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entries_record_document_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_clock_continues_after_a_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trimming_keeps_the_oplog_under_its_size, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
