/* The tier workers' pure helpers (src/tier/tier_common.c): resume-token times,
 * exact-version filters, document digests, time values, writeErrors, the pacer; and the progress module's pins
 * (src/tier/progress.c) and its feeder lag. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include "tier/tier_private.h"

static void test_token_time_reads_the_keystring_timestamp(void **state)
{
    (void)state;
    /* mongod's and the store's tokens: 0x82, then the Timestamp big-endian. */
    bson_t *token = support_json_as_written("{\"_data\": \"826B0CBC0B0000000401\"}");
    assert_int_equal(tier_token_time(token), ((uint64_t)0x6B0CBC0B << 32) | 4);
    bson_destroy(token);
    token = support_json_as_written("{\"_data\": \"826b0cbc0b00000004ff\"}"); /* lowercase hex, a high-water mark */
    assert_int_equal(tier_token_time(token), ((uint64_t)0x6B0CBC0B << 32) | 4);
    bson_destroy(token);
    const char *unknown[] = {"{\"_data\": \"8100\"}", "{\"_data\": \"826B0C\"}", "{\"_data\": 5}", "{}",
                             "{\"_data\": \"82XX0CBC0B0000000401\"}"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        token = support_json_as_written(unknown[i]);
        assert_int_equal(tier_token_time(token), 0);
        bson_destroy(token);
    }
}

static void test_write_errors_walk_index_code_and_message(void **state)
{
    (void)state;
    bson_t *reply = support_json_as_written("{\"ok\": 1, \"n\": 1, \"writeErrors\": ["
                                            "{\"index\": 2, \"code\": 11000, \"errmsg\": \"E11000 duplicate key\"},"
                                            " 5,"
                                            " {\"code\": {\"$numberLong\": \"121\"}},"
                                            " {\"index\": 0, \"code\": 2.0, \"errmsg\": 7}]}");
    bson_iter_t errors;
    tier_write_error_t write_error;
    assert_true(tier_write_errors_init(&errors, reply));
    assert_true(tier_write_errors_next(&errors, &write_error));
    assert_int_equal(write_error.index, 2);
    assert_int_equal(write_error.code, 11000);
    assert_string_equal(write_error.message, "E11000 duplicate key");
    /* 5 is not a document: skipped; missing fields take their defaults */
    assert_true(tier_write_errors_next(&errors, &write_error));
    assert_int_equal(write_error.index, -1);
    assert_int_equal(write_error.code, 121);
    assert_string_equal(write_error.message, "write error");
    assert_true(tier_write_errors_next(&errors, &write_error));
    assert_int_equal(write_error.index, 0);
    assert_int_equal(write_error.code, 2);
    assert_string_equal(write_error.message, "write error");
    assert_false(tier_write_errors_next(&errors, &write_error));
    bson_destroy(reply);

    const char *without[] = {"{\"ok\": 1, \"n\": 3}", "{\"writeErrors\": {\"index\": 0}}"};
    for (size_t i = 0; i < sizeof without / sizeof without[0]; i++) {
        reply = support_json_as_written(without[i]);
        assert_false(tier_write_errors_init(&errors, reply));
        bson_destroy(reply);
    }
    reply = support_json_as_written("{\"writeErrors\": []}");
    assert_true(tier_write_errors_init(&errors, reply));
    assert_false(tier_write_errors_next(&errors, &write_error));
    bson_destroy(reply);
}

static void test_version_filter_pins_every_field(void **state)
{
    (void)state;
    bson_t *document = support_json_as_written(
        "{\"_id\": 7, \"createdAt\": {\"$date\": 1000}, \"tags\": [1, 2], \"sub\": {\"a\": null}}");
    bson_t filter;
    assert_true(tier_version_filter(document, &filter));
    bson_t *expected = support_json_as_written(
        "{\"_id\": 7, \"createdAt\": {\"$eq\": {\"$date\": 1000}}, \"tags\": {\"$eq\": [1, 2]},"
        " \"sub\": {\"$eq\": {\"a\": null}}}");
    assert_true(bson_equal(&filter, expected));
    bson_destroy(expected);
    bson_destroy(&filter);
    bson_destroy(document);
    /* A field a filter would read as a path or an operator: no exact filter. */
    const char *refused[] = {"{\"_id\": 1, \"a.b\": 1}", "{\"_id\": 1, \"$x\": 1}"};
    for (size_t i = 0; i < 2; i++) {
        document = support_json_as_written(refused[i]);
        assert_false(tier_version_filter(document, &filter));
        assert_true(bson_empty(&filter));
        bson_destroy(&filter);
        bson_destroy(document);
    }
}

static void test_document_digest_follows_the_exact_bytes(void **state)
{
    (void)state;
    bson_t *copy = support_json_as_written("{\"_id\": 1, \"a\": 1, \"b\": \"x\"}");
    bson_t *same = support_json_as_written("{\"_id\": 1, \"a\": 1, \"b\": \"x\"}");
    bson_t *reordered = support_json_as_written("{\"_id\": 1, \"b\": \"x\", \"a\": 1}");
    bson_t *changed = support_json_as_written("{\"_id\": 1, \"a\": 2, \"b\": \"x\"}");
    assert_true(worker_writes_digest(copy) == worker_writes_digest(same));
    assert_true(worker_writes_digest(copy) != worker_writes_digest(reordered));
    assert_true(worker_writes_digest(copy) != worker_writes_digest(changed));
    bson_destroy(copy);
    bson_destroy(same);
    bson_destroy(reordered);
    bson_destroy(changed);
}

static void test_time_value_of_dates_arrays_and_paths(void **state)
{
    (void)state;
    int64_t value = 0;
    bson_t *document = support_json_as_written("{\"t\": {\"$date\": 5}, \"meta\": {\"ts\": {\"$date\": 9}},"
                                               " \"many\": [{\"$date\": 3}, \"x\", {\"$date\": 8}, {\"$date\": 1}], \"none\": [1, 2],"
                                               " \"text\": \"2024\"}");
    assert_true(tier_time_value(document, "t", &value));
    assert_int_equal(value, 5);
    assert_true(tier_time_value(document, "meta.ts", &value));
    assert_int_equal(value, 9);
    assert_true(tier_time_value(document, "many", &value)); /* the key of a descending sort: the largest */
    assert_int_equal(value, 8);
    assert_false(tier_time_value(document, "none", &value));
    assert_false(tier_time_value(document, "text", &value));
    assert_false(tier_time_value(document, "missing", &value));
    bson_destroy(document);
}

static void test_pacer_backs_off_when_the_tier_slows(void **state)
{
    (void)state;
    tier_pacer_t pacer;
    tier_pacer_init(&pacer, 0.5);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(tier_pacer_pause_ms(&pacer, 10), 10); /* half the time at the usual latency */
    }
    int64_t pause = 0;
    for (int i = 0; i < 10; i++) {
        pause = tier_pacer_pause_ms(&pacer, 100); /* ten times slower: clients are busy */
    }
    assert_true(pause > 100);
    assert_true(pause <= 4 * 100); /* the floor: a fifth of the time even on a saturated tier */
    assert_int_equal(tier_pacer_pause_ms(&pacer, 100000), 5000); /* capped */
    tier_pacer_init(&pacer, 0.8);
    assert_int_equal(tier_pacer_pause_ms(&pacer, 40), 10);
}

static void test_pins_keep_documents_from_the_evictor(void **state)
{
    (void)state;
    tier_progress_t *progress = tier_progress_new(2);
    bson_value_t five = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 5};
    bson_value_t five_double = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = 5.0};
    bson_value_t six = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 6};

    assert_true(tier_progress_pin(progress, 0, &five));
    assert_false(tier_progress_begin_eviction(progress, 0, &five_double)); /* 5 and 5.0: one _id */
    assert_true(tier_progress_begin_eviction(progress, 1, &five));        /* another namespace */
    tier_progress_end_eviction(progress, 1);
    assert_true(tier_progress_begin_eviction(progress, 0, &six));
    assert_false(tier_progress_pin(progress, 0, &six));   /* being evicted: wait */
    assert_false(tier_progress_pin(progress, 0, NULL));   /* the whole namespace waits too */
    assert_true(tier_progress_pin(progress, 0, &five));   /* a second pin of 5 */
    tier_progress_end_eviction(progress, 0);
    assert_true(tier_progress_pin(progress, 0, NULL));
    assert_false(tier_progress_begin_eviction(progress, 0, &six)); /* the namespace is pinned */
    tier_progress_unpin(progress, 0, NULL);
    tier_progress_unpin(progress, 0, &five);
    assert_false(tier_progress_begin_eviction(progress, 0, &five)); /* one pin of 5 left */
    tier_progress_unpin(progress, 0, &five);
    assert_true(tier_progress_begin_eviction(progress, 0, &five));
    tier_progress_end_eviction(progress, 0);
    tier_progress_destroy(progress);
}

static void test_applied_time_moves_forward_except_for_stopped_feeds(void **state)
{
    (void)state;
    tier_progress_t *progress = tier_progress_new(2);
    tier_progress_set_applied(progress, 100);
    tier_namespace_progress_t *item = tier_progress_lock_namespace(progress, 1);
    item->feed_stopped = true;
    tier_progress_unlock(progress, true);
    tier_progress_set_applied(progress, 200);
    tier_progress_set_applied(progress, 150); /* never backwards */
    tier_namespace_progress_t first, second;
    tier_progress_namespace(progress, 0, &first);
    tier_progress_namespace(progress, 1, &second);
    assert_int_equal(first.applied_time, 200);
    assert_int_equal(second.applied_time, 100);
    tier_worker_progress_t feeder;
    tier_progress_worker(progress, TIER_WORKER_FEEDER, &feeder);
    assert_int_equal(feeder.stream_time, 200);
    tier_progress_destroy(progress);
}

/* The feeder's lag is read live: it keeps growing while an event waits (a batch
 * the archive is slow to take), not frozen at the age it had when the batch began. */
static void test_feeder_lag_grows_while_an_event_waits(void **state)
{
    (void)state;
    tier_worker_progress_t feeder = {0};
    assert_int_equal(tier_progress_lag_ms(&feeder, 1000000), 0); /* caught up */
    feeder.unapplied_since_ms = 1000000;
    assert_int_equal(tier_progress_lag_ms(&feeder, 1000000), 0);
    assert_int_equal(tier_progress_lag_ms(&feeder, 1002500), 2500);
    assert_int_equal(tier_progress_lag_ms(&feeder, 1040000), 40000);
    assert_int_equal(tier_progress_lag_ms(&feeder, 999000), 0); /* a clock stepped back: no negative lag */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_time_reads_the_keystring_timestamp),
        cmocka_unit_test(test_version_filter_pins_every_field),
        cmocka_unit_test(test_write_errors_walk_index_code_and_message),
        cmocka_unit_test(test_time_value_of_dates_arrays_and_paths),
        cmocka_unit_test(test_document_digest_follows_the_exact_bytes),
        cmocka_unit_test(test_pacer_backs_off_when_the_tier_slows),
        cmocka_unit_test(test_pins_keep_documents_from_the_evictor),
        cmocka_unit_test(test_applied_time_moves_forward_except_for_stopped_feeds),
        cmocka_unit_test(test_feeder_lag_grows_while_an_event_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
