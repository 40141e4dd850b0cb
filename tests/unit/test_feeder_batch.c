/* The feeder's pure part: change events -> coalesced archive writes
 * (src/tier/feeder_batch.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tier/feeder_batch.h"

#include <string.h>

/* {operationType, clusterTime: Timestamp(100, time), documentKey: {_id}, ...extra} from JSON. */
static bson_t *event_json(const char *operation, uint32_t time, const char *id_and_extra_json)
{
    bson_error_t error;
    char json[2048];
    snprintf(json, sizeof json, "{\"operationType\": \"%s\", \"clusterTime\": {\"$timestamp\": {\"t\": 100, \"i\": %u}}, %s}",
             operation, time, id_and_extra_json);
    bson_t *event = bson_new_from_json((const uint8_t *)json, -1, &error);
    if (event == NULL) {
        fail_msg("bad test JSON %s: %s", json, error.message);
    }
    return event;
}

static void add(feeder_batch_t *batch, size_t namespace_index, const char *operation, uint32_t time, const char *json)
{
    bson_error_t error;
    bson_t *event = event_json(operation, time, json);
    bool ok = feeder_batch_add(batch, namespace_index, event, &error);
    bson_destroy(event);
    if (!ok) {
        fail_msg("feeder_batch_add failed: %s", error.message);
    }
}

static void assert_json(const bson_t *document, const char *expected_json)
{
    bson_error_t error;
    bson_t *expected = bson_new_from_json((const uint8_t *)expected_json, -1, &error);
    assert_non_null(expected);
    if (!bson_equal(expected, document)) {
        char *actual = bson_as_canonical_extended_json(document, NULL);
        char *wanted = bson_as_canonical_extended_json(expected, NULL);
        fail_msg("got %s, expected %s", actual, wanted);
    }
    bson_destroy(expected);
}

/* --- descriptions -------------------------------------------------------------- */

static void description(const char *json, bson_t *truncation, bson_t *update)
{
    bson_error_t error;
    bson_t *parsed = bson_new_from_json((const uint8_t *)json, -1, &error);
    assert_non_null(parsed);
    assert_true(feeder_update_from_description(parsed, truncation, update, &error));
    bson_destroy(parsed);
}

static void test_description_set_and_unset(void **state)
{
    (void)state;
    bson_t truncation, update;
    description("{\"updatedFields\": {\"a.b\": 1, \"c\": null, \"arr.3\": [1]}, \"removedFields\": [\"d\", \"e.f\"],"
                " \"truncatedArrays\": []}",
                &truncation, &update);
    assert_true(bson_empty(&truncation));
    assert_json(&update, "{\"$set\": {\"a.b\": 1, \"c\": null, \"arr.3\": [1]}, \"$unset\": {\"d\": \"\", \"e.f\": \"\"}}");
    bson_destroy(&truncation);
    bson_destroy(&update);
}

static void test_description_truncated_arrays_become_push_slice(void **state)
{
    (void)state;
    bson_t truncation, update;
    description("{\"updatedFields\": {\"tags.1\": \"x\"}, \"removedFields\": [],"
                " \"truncatedArrays\": [{\"field\": \"tags\", \"newSize\": 2}, {\"field\": \"a.b\", \"newSize\": 0}]}",
                &truncation, &update);
    assert_json(&truncation, "{\"$push\": {\"tags\": {\"$each\": [], \"$slice\": 2}, \"a.b\": {\"$each\": [], \"$slice\": 0}}}");
    assert_json(&update, "{\"$set\": {\"tags.1\": \"x\"}}");
    bson_destroy(&truncation);
    bson_destroy(&update);
}

static void test_description_empty_and_missing_parts(void **state)
{
    (void)state;
    bson_t truncation, update;
    description("{\"updatedFields\": {}}", &truncation, &update); /* servers before 5.0 omit the rest */
    assert_true(bson_empty(&truncation));
    assert_true(bson_empty(&update));
    bson_destroy(&truncation);
    bson_destroy(&update);
}

static void test_description_malformed_is_refused(void **state)
{
    (void)state;
    const char *bad[] = {
        "{\"updatedFields\": 5}",
        "{\"updatedFields\": {}, \"removedFields\": [1]}",
        "{\"updatedFields\": {}, \"removedFields\": \"a\"}",
        "{\"updatedFields\": {}, \"truncatedArrays\": [{\"field\": \"a\"}]}",
        "{\"updatedFields\": {}, \"truncatedArrays\": [{\"field\": \"a\", \"newSize\": -1}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bson_error_t error;
        bson_t truncation, update;
        bson_t *parsed = bson_new_from_json((const uint8_t *)bad[i], -1, &error);
        assert_non_null(parsed);
        assert_false(feeder_update_from_description(parsed, &truncation, &update, &error));
        assert_int_equal(error.code, 2);
        bson_destroy(&truncation);
        bson_destroy(&update);
        bson_destroy(parsed);
    }
}

/* --- coalescing ------------------------------------------------------------------- */

static void test_insert_then_updates_become_one_replace(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    add(batch, 0, "insert", 1, "\"documentKey\": {\"_id\": 1}, \"fullDocument\": {\"_id\": 1, \"n\": 1, \"tags\": [1, 2, 3]}");
    add(batch, 0, "update", 2,
        "\"documentKey\": {\"_id\": 1}, \"updateDescription\": {\"updatedFields\": {\"n\": 2, \"z\": true, \"a\": 0},"
        " \"removedFields\": [], \"truncatedArrays\": [{\"field\": \"tags\", \"newSize\": 1}]}");
    add(batch, 0, "update", 3,
        "\"documentKey\": {\"_id\": 1}, \"updateDescription\": {\"updatedFields\": {}, \"removedFields\": [\"z\"]}");
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 1);
    assert_int_equal(ops[0]->kind, FEEDER_OP_REPLACE);
    /* New fields land in lexicographic order, as mongod's $set puts them. */
    assert_json(&ops[0]->document, "{\"_id\": 1, \"n\": 2, \"tags\": [1], \"a\": 0}");
    assert_int_equal(ops[0]->events, 3);
    assert_int_equal(ops[0]->first_time, (100ull << 32) | 1);
    assert_int_equal(ops[0]->last_time, (100ull << 32) | 3);
    assert_int_equal(feeder_batch_event_count(batch), 3);
    feeder_batch_destroy(batch);
}

static void test_repeated_updates_of_the_same_fields_merge(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    for (uint32_t i = 1; i <= 50; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "\"documentKey\": {\"_id\": \"hot\"}, \"updateDescription\": {\"updatedFields\": {\"count\": %u,"
                 " \"meta.last\": %u}, \"removedFields\": []}",
                 i, i);
        add(batch, 0, "update", i, json);
    }
    add(batch, 0, "update", 51,
        "\"documentKey\": {\"_id\": \"hot\"}, \"updateDescription\": {\"updatedFields\": {\"count\": 99},"
        " \"removedFields\": [\"meta.last\", \"gone\"]}");
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 1);
    assert_int_equal(ops[0]->kind, FEEDER_OP_UPDATE);
    assert_json(&ops[0]->document, "{\"$set\": {\"count\": 99}, \"$unset\": {\"meta.last\": \"\", \"gone\": \"\"}}");
    assert_int_equal(ops[0]->events, 51);
    feeder_batch_destroy(batch);
}

static void test_updates_that_could_reorder_fields_stay_apart(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    /* b then a, both possibly new: one $set {a, b} would put a before b. */
    add(batch, 0, "update", 1, "\"documentKey\": {\"_id\": 7}, \"updateDescription\": {\"updatedFields\": {\"b\": 1}}");
    add(batch, 0, "update", 2, "\"documentKey\": {\"_id\": 7}, \"updateDescription\": {\"updatedFields\": {\"a\": 1}}");
    /* Removing a field the first update set, then setting it again, moves it to the end. */
    add(batch, 0, "update", 3, "\"documentKey\": {\"_id\": 8}, \"updateDescription\": {\"updatedFields\": {}, \"removedFields\": [\"x\"]}");
    add(batch, 0, "update", 4, "\"documentKey\": {\"_id\": 8}, \"updateDescription\": {\"updatedFields\": {\"x\": 2}}");
    /* A path under one the first update set. */
    add(batch, 0, "update", 5, "\"documentKey\": {\"_id\": 9}, \"updateDescription\": {\"updatedFields\": {\"a\": {\"b\": 1}}}");
    add(batch, 0, "update", 6, "\"documentKey\": {\"_id\": 9}, \"updateDescription\": {\"updatedFields\": {}, \"removedFields\": [\"a.b\"]}");
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 6);
    /* Rounds: every document's first write, then the second ones, each in event order. */
    assert_json(&ops[0]->document, "{\"$set\": {\"b\": 1}}");
    assert_json(&ops[1]->document, "{\"$unset\": {\"x\": \"\"}}");
    assert_json(&ops[2]->document, "{\"$set\": {\"a\": {\"b\": 1}}}");
    assert_json(&ops[3]->document, "{\"$set\": {\"a\": 1}}");
    assert_json(&ops[4]->document, "{\"$set\": {\"x\": 2}}");
    assert_json(&ops[5]->document, "{\"$unset\": {\"a.b\": \"\"}}");
    feeder_batch_destroy(batch);
}

static void test_delete_and_reinsert_supersede_earlier_writes(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    add(batch, 0, "update", 1, "\"documentKey\": {\"_id\": 1}, \"updateDescription\": {\"updatedFields\": {\"a\": 1}}");
    add(batch, 0, "delete", 2, "\"documentKey\": {\"_id\": 1}");
    add(batch, 0, "insert", 3, "\"documentKey\": {\"_id\": 2}, \"fullDocument\": {\"_id\": 2}");
    add(batch, 0, "delete", 4, "\"documentKey\": {\"_id\": 2}");
    add(batch, 0, "insert", 5, "\"documentKey\": {\"_id\": 2}, \"fullDocument\": {\"_id\": 2, \"again\": true}");
    add(batch, 0, "replace", 6, "\"documentKey\": {\"_id\": 3}, \"fullDocument\": {\"_id\": 3, \"r\": 1}");
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 3);
    /* Replaces before deletes inside a round: independent documents. */
    assert_int_equal(ops[0]->kind, FEEDER_OP_REPLACE);
    assert_json(&ops[0]->document, "{\"_id\": 2, \"again\": true}");
    assert_int_equal(ops[0]->events, 3);
    assert_int_equal(ops[1]->kind, FEEDER_OP_REPLACE);
    assert_json(&ops[1]->document, "{\"_id\": 3, \"r\": 1}");
    assert_int_equal(ops[2]->kind, FEEDER_OP_DELETE);
    assert_int_equal(ops[2]->id.value.v_int32, 1);
    assert_int_equal(ops[2]->events, 2);
    feeder_batch_destroy(batch);
}

static void test_equal_ids_of_different_numeric_types_are_one_document(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    add(batch, 0, "delete", 1, "\"documentKey\": {\"_id\": 5}");
    add(batch, 0, "insert", 2, "\"documentKey\": {\"_id\": 5.0}, \"fullDocument\": {\"_id\": 5.0}");
    add(batch, 0, "insert", 3, "\"documentKey\": {\"_id\": {\"$numberLong\": \"6\"}}, \"fullDocument\": {\"_id\": 6}");
    add(batch, 0, "delete", 4, "\"documentKey\": {\"_id\": 6.0}");
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 2);
    assert_int_equal(ops[0]->kind, FEEDER_OP_REPLACE);
    assert_int_equal(ops[1]->kind, FEEDER_OP_DELETE);
    feeder_batch_destroy(batch);
}

static void test_namespaces_stay_apart_and_grouped(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    add(batch, 1, "insert", 1, "\"documentKey\": {\"_id\": 1}, \"fullDocument\": {\"_id\": 1, \"ns\": 1}");
    add(batch, 0, "insert", 2, "\"documentKey\": {\"_id\": 1}, \"fullDocument\": {\"_id\": 1, \"ns\": 0}");
    add(batch, 1, "delete", 3, "\"documentKey\": {\"_id\": 2}");
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 3);
    assert_int_equal(ops[0]->namespace_index, 0);
    assert_json(&ops[0]->document, "{\"_id\": 1, \"ns\": 0}");
    assert_int_equal(ops[1]->namespace_index, 1);
    assert_int_equal(ops[1]->kind, FEEDER_OP_REPLACE);
    assert_int_equal(ops[2]->kind, FEEDER_OP_DELETE);
    feeder_batch_reset(batch);
    assert_int_equal(feeder_batch_event_count(batch), 0);
    feeder_batch_finish(batch, &count);
    assert_int_equal(count, 0);
    feeder_batch_destroy(batch);
}

static void test_many_documents_and_bad_events(void **state)
{
    (void)state;
    feeder_batch_t *batch = feeder_batch_new();
    for (uint32_t i = 0; i < 3000; i++) {
        char json[128];
        snprintf(json, sizeof json, "\"documentKey\": {\"_id\": %u}, \"fullDocument\": {\"_id\": %u}", i % 1000, i);
        add(batch, 0, "insert", i + 1, json);
    }
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(batch, &count);
    assert_int_equal(count, 1000);
    assert_int_equal(ops[999]->events, 3);

    const char *bad[][2] = {
        {"drop", "\"documentKey\": {\"_id\": 1}"},
        {"insert", "\"documentKey\": {\"_id\": 1}"},
        {"update", "\"documentKey\": {\"_id\": 1}"},
        {"delete", "\"documentKey\": {}"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bson_error_t error;
        bson_t *event = event_json(bad[i][0], 1, bad[i][1]);
        assert_false(feeder_batch_add(batch, 0, event, &error));
        assert_int_equal(error.code, 2);
        bson_destroy(event);
    }
    feeder_batch_destroy(batch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_description_set_and_unset),
        cmocka_unit_test(test_description_truncated_arrays_become_push_slice),
        cmocka_unit_test(test_description_empty_and_missing_parts),
        cmocka_unit_test(test_description_malformed_is_refused),
        cmocka_unit_test(test_insert_then_updates_become_one_replace),
        cmocka_unit_test(test_repeated_updates_of_the_same_fields_merge),
        cmocka_unit_test(test_updates_that_could_reorder_fields_stay_apart),
        cmocka_unit_test(test_delete_and_reinsert_supersede_earlier_writes),
        cmocka_unit_test(test_equal_ids_of_different_numeric_types_are_one_document),
        cmocka_unit_test(test_namespaces_stay_apart_and_grouped),
        cmocka_unit_test(test_many_documents_and_bad_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
