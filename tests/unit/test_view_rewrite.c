/* Unit tests for view_rewrite_read(): the stages mongod 6.0 runs after a view's
 * pipeline for a find, count or distinct on the view (find as
 * query_request_helper::asAggregationCommand writes it), and the find options
 * it refuses with InvalidPipelineOperator 168. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

#include "query/view_rewrite.h"

/* Rewrites command and compares the pipeline and cursor with the expected
 * ones (relaxed JSON, so an int and a long of one value compare equal). */
static void expect_rewrite(const char *name, const char *command_json, const char *pipeline_json,
                           const char *cursor_json)
{
    bson_t *command = support_json(command_json);
    bson_t *expected_pipeline = support_json(pipeline_json);
    bson_t *expected_cursor = support_json(cursor_json);
    bson_t pipeline = BSON_INITIALIZER, cursor = BSON_INITIALIZER;
    bson_error_t error;
    bool ok = view_rewrite_read(name, command, &pipeline, &cursor, &error);
    if (!ok) {
        fail_msg("%s: %s", command_json, error.message);
    }
    char *got = bson_as_relaxed_extended_json(&pipeline, NULL);
    char *want = bson_as_relaxed_extended_json(expected_pipeline, NULL);
    char *got_cursor = bson_as_relaxed_extended_json(&cursor, NULL);
    char *want_cursor = bson_as_relaxed_extended_json(expected_cursor, NULL);
    assert_string_equal(got, want);
    assert_string_equal(got_cursor, want_cursor);
    bson_free(got);
    bson_free(want);
    bson_free(got_cursor);
    bson_free(want_cursor);
    bson_destroy(&pipeline);
    bson_destroy(&cursor);
    bson_destroy(command);
    bson_destroy(expected_pipeline);
    bson_destroy(expected_cursor);
}

static void expect_refusal(const char *name, const char *command_json, uint32_t code, const char *message)
{
    bson_t *command = support_json(command_json);
    bson_t pipeline = BSON_INITIALIZER, cursor = BSON_INITIALIZER;
    bson_error_t error;
    assert_false(view_rewrite_read(name, command, &pipeline, &cursor, &error));
    assert_int_equal(error.code, code);
    assert_string_equal(error.message, message);
    bson_destroy(&pipeline);
    bson_destroy(&cursor);
    bson_destroy(command);
}

static void test_find_becomes_match_sort_skip_limit_project(void **state)
{
    (void)state;
    expect_rewrite("find",
                   "{'find': 'v', 'filter': {'a': 1}, 'sort': {'b': -1}, 'skip': 2, 'limit': 3, "
                   "'projection': {'a': 1}, 'batchSize': 5}",
                   "{'0': {'%match': {'a': 1}}, '1': {'%sort': {'b': -1}}, '2': {'%skip': 2}, '3': {'%limit': 3}, "
                   "'4': {'%project': {'a': 1}}}",
                   "{'batchSize': 5}");
    /* Empty documents and zero skip and limit add nothing, whatever their order in the command. */
    expect_rewrite("find", "{'limit': 0, 'find': 'v', 'filter': {}, 'sort': {}, 'projection': {}, 'skip': 0}", "{}",
                   "{}");
    /* find_one: singleBatch with limit 1 has its aggregate counterpart. */
    expect_rewrite("find", "{'find': 'v', 'limit': 1, 'singleBatch': true}", "{'0': {'%limit': 1}}", "{}");
}

static void test_find_options_without_an_aggregate_counterpart(void **state)
{
    (void)state;
    expect_refusal("find", "{'find': 'v', 'showRecordId': true}", 168,
                   "Option showRecordId not supported in aggregation.");
    expect_refusal("find", "{'find': 'v', 'min': {'a': 1}, 'hint': {'a': 1}}", 168,
                   "Option min not supported in aggregation.");
    expect_refusal("find", "{'find': 'v', 'tailable': true}", 168, "Option tailable not supported in aggregation.");
    expect_refusal("find", "{'find': 'v', 'singleBatch': true, 'limit': 2}", 168,
                   "Option singleBatch not supported in aggregation.");
    /* Options that ask for nothing are no refusal. */
    expect_rewrite("find", "{'find': 'v', 'returnKey': false, 'max': {}, 'singleBatch': false}", "{}", "{}");
}

static void test_count_ends_with_count(void **state)
{
    (void)state;
    expect_rewrite("count", "{'count': 'v', 'query': {'a': {'%gt': 1}}, 'skip': 1, 'limit': -2}",
                   "{'0': {'%match': {'a': {'%gt': 1}}}, '1': {'%skip': 1}, '2': {'%limit': 2}, "
                   "'3': {'%count': 'count'}}",
                   "{}");
    expect_rewrite("count", "{'count': 'v'}", "{'0': {'%count': 'count'}}", "{}");
}

static void test_distinct_unwinds_and_groups(void **state)
{
    (void)state;
    expect_rewrite("distinct", "{'distinct': 'v', 'key': 'a.b', 'query': {'c': 1}}",
                   "{'0': {'%match': {'c': 1}}, "
                   "'1': {'%unwind': {'path': '$a.b', 'preserveNullAndEmptyArrays': true}}, "
                   "'2': {'%group': {'_id': null, 'distinct': {'%addToSet': '$a.b'}}}}",
                   "{}");
    expect_refusal("distinct", "{'distinct': 'v'}", 9, "BSON field 'distinct.key' is missing but a required field");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_becomes_match_sort_skip_limit_project),
        cmocka_unit_test(test_find_options_without_an_aggregate_counterpart),
        cmocka_unit_test(test_count_ends_with_count),
        cmocka_unit_test(test_distinct_unwinds_and_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
