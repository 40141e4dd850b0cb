/* Unit tests of the aggregation pipeline engine (src/query/pipeline*.c): each case runs a
 * pipeline in JSON over documents in JSON and compares every result document byte for
 * byte (so field order and numeric types are checked) with the expected JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support.h"

#include "query/pipeline.h"

/* Feeds the documents of a JSON array, then the end (or an error when asked). */
typedef struct test_source {
    bson_t *wrapper;
    bson_iter_t documents;
    bson_t current;
    int reads;
    int fail_after; /* -1: never */
} test_source_t;

static bool test_source_next(void *context, const bson_t **out_document, bson_error_t *error)
{
    test_source_t *source = context;
    if (source->fail_after >= 0 && source->reads >= source->fail_after) {
        bson_set_error(error, 27017, 11601, "operation was interrupted");
        return false;
    }
    source->reads++;
    if (!bson_iter_next(&source->documents)) {
        *out_document = NULL;
        return true;
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&source->documents, &length, &data);
    bson_init_static(&source->current, data, length);
    *out_document = &source->current;
    return true;
}

static void test_source_init(test_source_t *source, const char *documents_json)
{
    source->wrapper = support_json_wrapped(documents_json);
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, source->wrapper, "v"));
    assert_true(bson_iter_recurse(&iter, &source->documents));
    source->reads = 0;
    source->fail_after = -1;
}

/* Runs the pipeline; on success out_results holds {"v": [results...]}. */
static bool run_pipeline(const char *documents_json, const char *pipeline_json,
                         const pipeline_options_t *options, bson_t *out_results,
                         bson_error_t *error)
{
    test_source_t source;
    test_source_init(&source, documents_json);
    bson_t *stages_wrapper = support_json_wrapped(pipeline_json);
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, stages_wrapper, "v"));
    uint32_t length;
    const uint8_t *data;
    bson_iter_array(&iter, &length, &data);
    bson_t stages;
    bson_init_static(&stages, data, length);

    bool ok = false;
    pipeline_t *pipeline = pipeline_compile(&stages, options, error);
    if (pipeline != NULL) {
        pipeline_run_t *run = pipeline_start(pipeline, test_source_next, &source);
        bson_init(out_results);
        bson_t array;
        bson_append_array_begin(out_results, "v", 1, &array);
        uint32_t index = 0;
        for (;;) {
            bson_t document;
            bool end;
            if (!pipeline_next(run, &document, &end, error)) {
                break;
            }
            if (end) {
                ok = true;
                break;
            }
            char key[16];
            snprintf(key, sizeof key, "%u", index++);
            bson_append_document(&array, key, -1, &document);
            bson_destroy(&document);
        }
        bson_append_array_end(out_results, &array);
        if (!ok) {
            bson_destroy(out_results);
        }
        pipeline_run_destroy(run);
    }
    pipeline_destroy(pipeline);
    bson_destroy(stages_wrapper);
    bson_destroy(source.wrapper);
    return ok;
}

static void check_with(const char *documents_json, const char *pipeline_json,
                       const pipeline_options_t *options, const char *expected_json)
{
    bson_t results;
    bson_error_t error;
    if (!run_pipeline(documents_json, pipeline_json, options, &results, &error)) {
        fail_msg("%s failed: %s (%u)", pipeline_json, error.message, error.code);
    }
    bson_t *expected = support_json_wrapped(expected_json);
    if (!bson_equal(&results, expected)) {
        char *actual_text = bson_as_canonical_extended_json(&results, NULL);
        char *expected_text = bson_as_canonical_extended_json(expected, NULL);
        fail_msg("%s:\n got      %s\n expected %s", pipeline_json, actual_text, expected_text);
    }
    bson_destroy(expected);
    bson_destroy(&results);
}

static void check(const char *documents_json, const char *pipeline_json, const char *expected_json)
{
    check_with(documents_json, pipeline_json, NULL, expected_json);
}

static void check_error_with(const char *documents_json, const char *pipeline_json,
                             const pipeline_options_t *options, uint32_t code, const char *message)
{
    bson_t results;
    bson_error_t error;
    if (run_pipeline(documents_json, pipeline_json, options, &results, &error)) {
        bson_destroy(&results);
        fail_msg("%s succeeded, expected error %u", pipeline_json, code);
    }
    if (error.code != code || (message != NULL && strcmp(error.message, message) != 0)) {
        fail_msg("%s: got error %u '%s', expected %u '%s'", pipeline_json, error.code,
                 error.message, code, message == NULL ? "" : message);
    }
}

static void check_error(const char *documents_json, const char *pipeline_json, uint32_t code,
                        const char *message)
{
    check_error_with(documents_json, pipeline_json, NULL, code, message);
}

static const char *const people =
    "[{\"_id\": 1, \"a\": 1}, {\"_id\": 2, \"a\": 2}, {\"_id\": 3, \"a\": 2}, {\"_id\": 4}]";

static void test_count_documents(void **state)
{
    (void)state;
    /* What the drivers' countDocuments sends. */
    check(people, "[{\"$match\": {\"a\": 2}}, {\"$group\": {\"_id\": 1, \"n\": {\"$sum\": 1}}}]",
          "[{\"_id\": 1, \"n\": 2}]");
    check(people,
          "[{\"$match\": {}}, {\"$skip\": 1}, {\"$limit\": 2}, {\"$group\": {\"_id\": 1, \"n\": "
          "{\"$sum\": 1}}}]",
          "[{\"_id\": 1, \"n\": 2}]");
    check(people,
          "[{\"$match\": {}}, {\"$skip\": 3}, {\"$limit\": 10}, {\"$group\": {\"_id\": 1, \"n\": "
          "{\"$sum\": 1}}}]",
          "[{\"_id\": 1, \"n\": 1}]");
    /* No match: no document at all (the driver reports 0). */
    check(people, "[{\"$match\": {\"a\": 9}}, {\"$group\": {\"_id\": 1, \"n\": {\"$sum\": 1}}}]",
          "[]");
    check("[]", "[{\"$match\": {}}, {\"$group\": {\"_id\": 1, \"n\": {\"$sum\": 1}}}]", "[]");
}

static void test_match_limit_skip(void **state)
{
    (void)state;
    check(people, "[]", people);
    check(people, "[{\"$match\": {\"a\": {\"$gte\": 2}}}]",
          "[{\"_id\": 2, \"a\": 2}, {\"_id\": 3, \"a\": 2}]");
    check(people, "[{\"$limit\": 2}]", "[{\"_id\": 1, \"a\": 1}, {\"_id\": 2, \"a\": 2}]");
    check(people, "[{\"$skip\": 3}]", "[{\"_id\": 4}]");
    check(people, "[{\"$skip\": 9}]", "[]");
    check(people, "[{\"$skip\": 0}, {\"$limit\": {\"$numberLong\": \"1\"}}]",
          "[{\"_id\": 1, \"a\": 1}]");
    check(people, "[{\"$limit\": 1.0}]", "[{\"_id\": 1, \"a\": 1}]");
    check_error(people, "[{\"$limit\": 0}]", 15958, "the limit must be positive");
    check_error(people, "[{\"$limit\": -1}]", 5107201,
                "invalid argument to $limit stage: Expected a non-negative number in: $limit: -1");
    check_error(people, "[{\"$limit\": 1.5}]", 5107201,
                "invalid argument to $limit stage: Expected an integer: $limit: 1.5");
    check_error(people, "[{\"$limit\": \"1\"}]", 15957, "the limit must be specified as a number");
    check_error(people, "[{\"$skip\": -1}]", 5107200,
                "invalid argument to $skip stage: Expected a non-negative number in: $skip: -1");
    check_error(people, "[{\"$skip\": \"x\"}]", 15972, "Argument to $skip must be a number");
    check_error(people, "[{\"$match\": 1}]", 15959,
                "the match filter must be an expression in an object");
}

static void test_chained_stages(void **state)
{
    (void)state;
    const char *orders = "[{\"_id\": 1, \"item\": \"x\", \"qty\": 2, \"price\": 10, \"date\": "
                         "{\"$date\": \"2021-01-05T00:00:00Z\"}},"
                         " {\"_id\": 2, \"item\": \"y\", \"qty\": 1, \"price\": 5.5, \"date\": "
                         "{\"$date\": \"2021-02-01T00:00:00Z\"}},"
                         " {\"_id\": 3, \"item\": \"x\", \"qty\": 3, \"price\": 10, \"date\": "
                         "{\"$date\": \"2021-02-09T00:00:00Z\"}},"
                         " {\"_id\": 4, \"item\": \"z\", \"qty\": 0, \"price\": 1, \"date\": "
                         "{\"$date\": \"2022-01-01T00:00:00Z\"}}]";
    check(orders,
          "[{\"$match\": {\"qty\": {\"$gt\": 0}}},"
          " {\"$group\": {\"_id\": {\"month\": {\"$month\": \"$date\"}},"
          " \"total\": {\"$sum\": {\"$multiply\": [\"$qty\", \"$price\"]}}, \"items\": "
          "{\"$addToSet\": \"$item\"}}},"
          " {\"$sort\": {\"total\": -1}},"
          " {\"$project\": {\"_id\": 0, \"month\": \"$_id.month\", \"total\": 1,"
          " \"n\": {\"$size\": \"$items\"}}}]",
          "[{\"total\": 35.5, \"month\": 2, \"n\": 2}, {\"total\": 20, \"month\": 1, \"n\": 1}]");
}

static void test_stage_errors(void **state)
{
    (void)state;
    check_error(people, "[{\"$foo\": {}}]", 40324, "Unrecognized pipeline stage name: '$foo'");
    check_error(people, "[{\"$match\": {}, \"$limit\": 1}]", 40323,
                "A pipeline stage specification object must contain exactly one field.");
    check_error(people, "[{}]", 40323, NULL);
    check_error(people, "[1]", 14, "Each element of the 'pipeline' array must be an object");
    check_error(people, "[{\"$match\": {}}, {\"$changeStream\": {}}]", 40602, NULL);
    /* An error in a later document surfaces from pipeline_next. */
    check_error("[{\"a\": 1}, {\"a\": 0}]", "[{\"$project\": {\"x\": {\"$divide\": [1, \"$a\"]}}}]",
                2, "can't $divide by zero");
}

static void test_group_accumulators(void **state)
{
    (void)state;
    const char *documents =
        "[{\"k\": \"a\", \"v\": 1}, {\"k\": \"a\", \"v\": {\"$numberLong\": \"2\"}},"
        " {\"k\": \"a\", \"v\": 2.5}, {\"k\": \"a\"}, {\"k\": \"a\", \"v\": null},"
        " {\"k\": \"a\", \"v\": \"str\"}, {\"k\": \"b\", \"v\": 2147483647}, {\"k\": \"b\", \"v\": "
        "1},"
        " {\"k\": \"c\"}]";
    const char *pipeline =
        "[{\"$group\": {\"_id\": \"$k\", \"sum\": {\"$sum\": \"$v\"}, \"avg\": {\"$avg\": \"$v\"},"
        " \"min\": {\"$min\": \"$v\"}, \"max\": {\"$max\": \"$v\"}, \"first\": {\"$first\": "
        "\"$v\"},"
        " \"last\": {\"$last\": \"$v\"}, \"push\": {\"$push\": \"$v\"},"
        " \"set\": {\"$addToSet\": \"$v\"}, \"count\": {\"$count\": {}}}}]";
    check(
        documents, pipeline,
        "[{\"_id\": \"a\", \"sum\": 5.5, \"avg\": 1.8333333333333333, \"min\": 1, \"max\": \"str\","
        " \"first\": 1, \"last\": \"str\", \"push\": [1, {\"$numberLong\": \"2\"}, 2.5, null, "
        "\"str\"],"
        " \"set\": [1, {\"$numberLong\": \"2\"}, 2.5, null, \"str\"], \"count\": 6},"
        " {\"_id\": \"b\", \"sum\": {\"$numberLong\": \"2147483648\"}, \"avg\": 1073741824.0,"
        " \"min\": 1, \"max\": 2147483647, \"first\": 2147483647, \"last\": 1,"
        " \"push\": [2147483647, 1], \"set\": [2147483647, 1], \"count\": 2},"
        " {\"_id\": \"c\", \"sum\": 0, \"avg\": null, \"min\": null, \"max\": null,"
        " \"first\": null, \"last\": null, \"push\": [], \"set\": [], \"count\": 1}]");

    /* Integer sums stay int, then long; a long sum past its range turns double. */
    check("[{\"v\": 1}, {\"v\": 2}]", "[{\"$group\": {\"_id\": null, \"s\": {\"$sum\": \"$v\"}}}]",
          "[{\"_id\": null, \"s\": 3}]");
    check("[{\"v\": {\"$numberLong\": \"9223372036854775807\"}}, {\"v\": 1}]",
          "[{\"$group\": {\"_id\": null, \"s\": {\"$sum\": \"$v\"}}}]",
          "[{\"_id\": null, \"s\": 9.2233720368547758e18}]");
    /* Doubles are summed with compensation, as mongod does. */
    check("[{\"v\": 0.1}, {\"v\": 0.2}, {\"v\": 0.3}]",
          "[{\"$group\": {\"_id\": null, \"s\": {\"$sum\": \"$v\"}}}]",
          "[{\"_id\": null, \"s\": 0.6}]");
    /* $addToSet and _id use numeric equality: 1, 1.0 and NumberLong(1) are one value. */
    check("[{\"v\": 1}, {\"v\": 1.0}, {\"v\": {\"$numberLong\": \"1\"}}, {\"v\": 2}]",
          "[{\"$group\": {\"_id\": null, \"s\": {\"$addToSet\": \"$v\"}}}]",
          "[{\"_id\": null, \"s\": [1, 2]}]");
    check("[{\"v\": 1}, {\"v\": 1.0}, {\"v\": {\"$numberLong\": \"1\"}}]",
          "[{\"$group\": {\"_id\": \"$v\", \"n\": {\"$sum\": 1}}}]", "[{\"_id\": 1, \"n\": 3}]");
    /* $sum of a constant counts; $sum of non-numbers is 0. */
    check("[{}, {}]",
          "[{\"$group\": {\"_id\": null, \"n\": {\"$sum\": 2}, \"z\": {\"$sum\": \"x\"}}}]",
          "[{\"_id\": null, \"n\": 4, \"z\": 0}]");
}

static void test_group_ids(void **state)
{
    (void)state;
    const char *documents =
        "[{\"a\": 1, \"b\": 1}, {\"a\": 1}, {\"a\": 1, \"b\": null}, {\"a\": 1, \"b\": 1}, {}]";
    /* A document _id drops missing fields, so {a: 1} and {a: 1, b: null} differ. */
    check(documents,
          "[{\"$group\": {\"_id\": {\"x\": \"$a\", \"y\": \"$b\"}, \"n\": {\"$sum\": 1}}}]",
          "[{\"_id\": {\"x\": 1, \"y\": 1}, \"n\": 2}, {\"_id\": {\"x\": 1}, \"n\": 1},"
          " {\"_id\": {\"x\": 1, \"y\": null}, \"n\": 1}, {\"_id\": {}, \"n\": 1}]");
    /* A missing _id groups with null. */
    check(documents, "[{\"$group\": {\"_id\": \"$b\", \"n\": {\"$sum\": 1}}}]",
          "[{\"_id\": 1, \"n\": 2}, {\"_id\": null, \"n\": 3}]");
    check(documents, "[{\"$group\": {\"_id\": [\"$a\", \"$b\"]}}]",
          "[{\"_id\": [1, 1]}, {\"_id\": [1, null]}, {\"_id\": [null, null]}]");

    check_error(people, "[{\"$group\": {\"n\": {\"$sum\": 1}}}]", 15955,
                "a group specification must include an _id");
    check_error(people, "[{\"$group\": 1}]", 15947,
                "a group's fields must be specified in an object");
    check_error(people, "[{\"$group\": {\"_id\": 1, \"n\": {\"$foo\": 1}}}]", 15952,
                "unknown group operator '$foo'");
    check_error(people, "[{\"$group\": {\"_id\": 1, \"n\": 1}}]", 40234,
                "The field 'n' must be an accumulator object");
    check_error(people, "[{\"$group\": {\"_id\": 1, \"n\": {\"$sum\": 1, \"$max\": 1}}}]", 40238,
                "The field 'n' must specify one accumulator");
    check_error(people, "[{\"$group\": {\"_id\": 1, \"a.b\": {\"$sum\": 1}}}]", 40235, NULL);
    check_error(people, "[{\"$group\": {\"_id\": 1, \"n\": {\"$sum\": [1, 2]}}}]", 40237,
                "The $sum accumulator is a unary operator");
    check_error(people, "[{\"$group\": {\"_id\": 1, \"n\": {\"$count\": 1}}}]", 14, NULL);
    check_error(people, "[{\"$group\": {\"_id\": {\"$bogus\": 1}}}]", 168, NULL);
}

static void test_count_stage(void **state)
{
    (void)state;
    check(people, "[{\"$match\": {\"a\": {\"$exists\": true}}}, {\"$count\": \"total\"}]",
          "[{\"total\": 3}]");
    check("[]", "[{\"$count\": \"total\"}]", "[]");
    check_error(people, "[{\"$count\": 1}]", 40156, "the count field must be a non-empty string");
    check_error(people, "[{\"$count\": \"\"}]", 40157, NULL);
    check_error(people, "[{\"$count\": \"$n\"}]", 40158,
                "the count field cannot be a $-prefixed path");
    check_error(people, "[{\"$count\": \"a.b\"}]", 40160, "the count field cannot contain '.'");
}

static void test_unwind(void **state)
{
    (void)state;
    const char *documents =
        "[{\"_id\": 1, \"s\": [\"S\", \"M\"]}, {\"_id\": 2, \"s\": []}, {\"_id\": 3, \"s\": \"L\"},"
        " {\"_id\": 4, \"s\": null}, {\"_id\": 5}]";
    check(documents, "[{\"$unwind\": \"$s\"}]",
          "[{\"_id\": 1, \"s\": \"S\"}, {\"_id\": 1, \"s\": \"M\"}, {\"_id\": 3, \"s\": \"L\"}]");
    check(documents, "[{\"$unwind\": {\"path\": \"$s\", \"includeArrayIndex\": \"i\"}}]",
          "[{\"_id\": 1, \"s\": \"S\", \"i\": {\"$numberLong\": \"0\"}},"
          " {\"_id\": 1, \"s\": \"M\", \"i\": {\"$numberLong\": \"1\"}},"
          " {\"_id\": 3, \"s\": \"L\", \"i\": null}]");
    /* Preserved: an empty array loses the field, null and missing stay as they are. */
    check(documents,
          "[{\"$unwind\": {\"path\": \"$s\", \"preserveNullAndEmptyArrays\": true,"
          " \"includeArrayIndex\": \"i\"}}]",
          "[{\"_id\": 1, \"s\": \"S\", \"i\": {\"$numberLong\": \"0\"}},"
          " {\"_id\": 1, \"s\": \"M\", \"i\": {\"$numberLong\": \"1\"}},"
          " {\"_id\": 2, \"i\": null}, {\"_id\": 3, \"s\": \"L\", \"i\": null},"
          " {\"_id\": 4, \"s\": null, \"i\": null}, {\"_id\": 5, \"i\": null}]");
    check(documents, "[{\"$unwind\": {\"path\": \"$s\", \"preserveNullAndEmptyArrays\": true}}]",
          "[{\"_id\": 1, \"s\": \"S\"}, {\"_id\": 1, \"s\": \"M\"}, {\"_id\": 2},"
          " {\"_id\": 3, \"s\": \"L\"}, {\"_id\": 4, \"s\": null}, {\"_id\": 5}]");
    /* A nested path keeps its place in the sub-document; arrays on the way are not
     * traversed. */
    check("[{\"a\": {\"x\": 0, \"b\": [1, 2], \"y\": 3}}, {\"a\": [{\"b\": [1]}]}]",
          "[{\"$unwind\": \"$a.b\"}]",
          "[{\"a\": {\"x\": 0, \"b\": 1, \"y\": 3}}, {\"a\": {\"x\": 0, \"b\": 2, \"y\": 3}}]");
    check("[{\"a\": [{\"x\": 1}, {\"x\": 2}]}]",
          "[{\"$unwind\": \"$a\"}, {\"$group\": {\"_id\": null, \"t\": {\"$sum\": \"$a.x\"}}}]",
          "[{\"_id\": null, \"t\": 3}]");

    check_error(
        documents, "[{\"$unwind\": 1}]", 15981,
        "expected either a string or an object as specification for $unwind stage, got int");
    check_error(documents, "[{\"$unwind\": \"s\"}]", 28818,
                "path option to $unwind stage should be prefixed with a '$': s");
    check_error(documents, "[{\"$unwind\": {}}]", 28812, "no path specified to $unwind stage");
    check_error(documents, "[{\"$unwind\": {\"path\": 1}}]", 28808, NULL);
    check_error(documents, "[{\"$unwind\": {\"path\": \"$s\", \"preserveNullAndEmptyArrays\": 1}}]",
                28809, NULL);
    check_error(documents, "[{\"$unwind\": {\"path\": \"$s\", \"includeArrayIndex\": \"\"}}]",
                28810, NULL);
    check_error(documents, "[{\"$unwind\": {\"path\": \"$s\", \"includeArrayIndex\": \"$i\"}}]",
                28822, NULL);
    check_error(documents, "[{\"$unwind\": {\"path\": \"$s\", \"foo\": 1}}]", 28811,
                "unrecognized option to $unwind stage: foo");
}

static void test_project_inclusion_exclusion(void **state)
{
    (void)state;
    const char *documents = "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": 4}]";
    check(documents, "[{\"$project\": {\"a\": 1}}]", "[{\"_id\": 1, \"a\": 1}]");
    check(documents, "[{\"$project\": {\"a\": true, \"_id\": 0}}]", "[{\"a\": 1}]");
    check(documents, "[{\"$project\": {\"e\": 1, \"a\": 1}}]",
          "[{\"_id\": 1, \"a\": 1, \"e\": 4}]");
    check(documents, "[{\"$project\": {\"b.c\": 1}}]", "[{\"_id\": 1, \"b\": {\"c\": 2}}]");
    check(documents, "[{\"$project\": {\"b\": {\"d\": 1}}}]", "[{\"_id\": 1, \"b\": {\"d\": 3}}]");
    check(documents, "[{\"$project\": {\"missing\": 1}}]", "[{\"_id\": 1}]");
    check(documents, "[{\"$project\": {\"a\": 0}}]",
          "[{\"_id\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": 4}]");
    check(documents, "[{\"$project\": {\"b.c\": 0, \"_id\": 0}}]",
          "[{\"a\": 1, \"b\": {\"d\": 3}, \"e\": 4}]");
    check(documents, "[{\"$project\": {\"_id\": 0}}]",
          "[{\"a\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": 4}]");
    check(documents, "[{\"$project\": {\"_id\": 1}}]", "[{\"_id\": 1}]");
    check(documents, "[{\"$project\": {\"a\": 0, \"_id\": 1}}]",
          "[{\"_id\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": 4}]");

    /* Arrays on a path: inclusion keeps only sub-documents, exclusion keeps the rest. */
    const char *arrays = "[{\"a\": [{\"b\": 1, \"c\": 2}, 3, [{\"b\": 4, \"c\": 5}]]}]";
    check(arrays, "[{\"$project\": {\"_id\": 0, \"a.b\": 1}}]",
          "[{\"a\": [{\"b\": 1}, [{\"b\": 4}]]}]");
    check(arrays, "[{\"$project\": {\"a.b\": 0}}]", "[{\"a\": [{\"c\": 2}, 3, [{\"c\": 5}]]}]");
    check("[{\"a\": 5}]", "[{\"$project\": {\"_id\": 0, \"a.b\": 1}}]", "[{}]");
    check("[{\"a\": {\"x\": 1}}]", "[{\"$project\": {\"_id\": 0, \"a.b\": 1}}]", "[{\"a\": {}}]");

    check_error(documents, "[{\"$project\": {\"a\": 1, \"e\": 0}}]", 31253,
                "Invalid $project :: caused by :: Cannot do exclusion on field e in inclusion "
                "projection");
    check_error(documents, "[{\"$project\": {\"a\": 0, \"e\": 1}}]", 31254,
                "Invalid $project :: caused by :: Cannot do inclusion on field e in exclusion "
                "projection");
    check_error(documents, "[{\"$project\": {\"a\": 0, \"x\": \"$e\"}}]", 31252, NULL);
    check_error(documents, "[{\"$project\": {}}]", 51272,
                "Invalid $project :: caused by :: projection specification must have at least one "
                "field");
    check_error(documents, "[{\"$project\": 1}]", 15969,
                "$project specification must be an object");
    check_error(documents, "[{\"$project\": {\"a\": 1, \"a.b\": 1}}]", 31250,
                "Invalid $project :: caused by :: Path collision at a.b remaining portion b");
    check_error(documents, "[{\"$project\": {\"a.b\": 1, \"a\": 1}}]", 31249, NULL);
    check_error(documents, "[{\"$project\": {\"a\": {}}}]", 51270, NULL);
    check_error(documents, "[{\"$project\": {\"$a\": 1}}]", 16410, NULL);
    check_error(documents, "[{\"$project\": {\"a..b\": 1}}]", 15998, NULL);
}

static void test_project_computed(void **state)
{
    (void)state;
    const char *documents = "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2}, \"e\": 4}]";
    /* Computed fields follow the included ones, in specification order. */
    check(documents, "[{\"$project\": {\"x\": {\"$add\": [\"$a\", \"$e\"]}, \"a\": 1}}]",
          "[{\"_id\": 1, \"a\": 1, \"x\": 5}]");
    check(documents,
          "[{\"$project\": {\"_id\": 0, \"lit\": \"text\", \"arr\": [\"$a\", \"$zz\"]}}]",
          "[{\"lit\": \"text\", \"arr\": [1, null]}]");
    check(documents, "[{\"$project\": {\"_id\": 0, \"b\": {\"c\": 1, \"n\": \"$e\"}}}]",
          "[{\"b\": {\"c\": 2, \"n\": 4}}]");
    check(documents, "[{\"$project\": {\"_id\": 0, \"b.n\": {\"$literal\": 1}, \"y.z\": \"$a\"}}]",
          "[{\"b\": {\"n\": 1}, \"y\": {\"z\": 1}}]");
    /* A computed result that is missing leaves the field out. */
    check(documents,
          "[{\"$project\": {\"_id\": 0, \"m\": \"$nothing\", \"r\": {\"$cond\": [true, "
          "\"$$REMOVE\", 1]}, "
          "\"a\": 1}}]",
          "[{\"a\": 1}]");
    check(documents, "[{\"$project\": {\"_id\": \"$a\"}}]", "[{\"_id\": 1}]");
    /* A sub-projection of computed fields keeps the field's input position. */
    check("[{\"a\": 5, \"b\": 1}]", "[{\"$project\": {\"a.c\": {\"$literal\": 0}, \"b\": 1}}]",
          "[{\"a\": {\"c\": 0}, \"b\": 1}]");
    check("[{\"b\": 1}]", "[{\"$project\": {\"a.c\": {\"$literal\": 0}, \"b\": 1}}]",
          "[{\"b\": 1, \"a\": {\"c\": 0}}]");
    /* Field paths through arrays of sub-documents give arrays. */
    check("[{\"_id\": 1, \"a\": [{\"b\": 1}, {\"b\": 2}, {}]}]",
          "[{\"$project\": {\"x\": \"$a.b\"}}]", "[{\"_id\": 1, \"x\": [1, 2]}]");
    /* A computed path over an array sets the field in every element. */
    check("[{\"a\": [{\"b\": 1}, 2]}]",
          "[{\"$project\": {\"_id\": 0, \"a.c\": {\"$literal\": 0}}}]",
          "[{\"a\": [{\"c\": 0}, {\"c\": 0}]}]");
}

static void test_add_fields_set_unset(void **state)
{
    (void)state;
    const char *documents = "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2}}]";
    /* An existing field is replaced in place; a new one is appended. */
    check(documents, "[{\"$addFields\": {\"a\": \"new\", \"z\": {\"$multiply\": [\"$a\", 10]}}}]",
          "[{\"_id\": 1, \"a\": \"new\", \"b\": {\"c\": 2}, \"z\": 10}]");
    check(documents, "[{\"$set\": {\"b.d\": 3, \"n\": true}}]",
          "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"n\": true}]");
    check(documents, "[{\"$set\": {\"b\": {\"e\": 5}}}]",
          "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2, \"e\": 5}}]");
    check(documents, "[{\"$set\": {\"a.x\": 7}}]",
          "[{\"_id\": 1, \"a\": {\"x\": 7}, \"b\": {\"c\": 2}}]");
    check(documents, "[{\"$set\": {\"a\": \"$$REMOVE\"}}]", "[{\"_id\": 1, \"b\": {\"c\": 2}}]");
    check(documents, "[{\"$set\": {\"x.y\": \"$a\"}}]",
          "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2}, \"x\": {\"y\": 1}}]");
    check(documents, "[{\"$set\": {\"e\": {}}}]",
          "[{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2}, \"e\": {}}]");
    check("[{\"a\": [{\"b\": 1}, 5]}]", "[{\"$addFields\": {\"a.c\": 2}}]",
          "[{\"a\": [{\"b\": 1, \"c\": 2}, {\"c\": 2}]}]");
    check_error(documents, "[{\"$addFields\": 1}]", 40272,
                "$addFields specification stage must be an object, got int");
    check_error(documents, "[{\"$set\": []}]", 40272,
                "$set specification stage must be an object, got array");

    check(documents, "[{\"$unset\": \"a\"}]", "[{\"_id\": 1, \"b\": {\"c\": 2}}]");
    check(documents, "[{\"$unset\": [\"_id\", \"b.c\"]}]", "[{\"a\": 1, \"b\": {}}]");
    check_error(documents, "[{\"$unset\": 1}]", 31002,
                "$unset specification must be a string or an array");
    check_error(documents, "[{\"$unset\": []}]", 31119, NULL);
    check_error(documents, "[{\"$unset\": [\"a\", 1]}]", 31120, NULL);
}

static void test_sort(void **state)
{
    (void)state;
    const char *documents =
        "[{\"_id\": 1, \"a\": 2}, {\"_id\": 2, \"a\": 1}, {\"_id\": 3, \"a\": 2}, {\"_id\": 4},"
        " {\"_id\": 5, \"a\": 1.5}]";
    /* Ties keep input order; missing sorts first ascending. */
    check(documents, "[{\"$sort\": {\"a\": 1}}]",
          "[{\"_id\": 4}, {\"_id\": 2, \"a\": 1}, {\"_id\": 5, \"a\": 1.5}, {\"_id\": 1, \"a\": 2},"
          " {\"_id\": 3, \"a\": 2}]");
    check(documents, "[{\"$sort\": {\"a\": -1, \"_id\": -1}}, {\"$limit\": 2}]",
          "[{\"_id\": 3, \"a\": 2}, {\"_id\": 1, \"a\": 2}]");
    check(documents, "[{\"$sort\": {\"a\": 1}}, {\"$skip\": 1}, {\"$limit\": 2}]",
          "[{\"_id\": 2, \"a\": 1}, {\"_id\": 5, \"a\": 1.5}]");
    check(documents, "[{\"$group\": {\"_id\": \"$a\"}}, {\"$sort\": {\"_id\": -1}}]",
          "[{\"_id\": 2}, {\"_id\": 1.5}, {\"_id\": 1}, {\"_id\": null}]");
    check_error(documents, "[{\"$sort\": 1}]", 15973,
                "the $sort key specification must be an object");
    check_error(documents, "[{\"$sort\": {}}]", 15976,
                "$sort stage must have at least one sort key");

    /* A top-k sort over many documents keeps the right ones. */
    bson_string_t *many = bson_string_new("[");
    for (int i = 0; i < 500; i++) {
        bson_string_append_printf(many, "%s{\"v\": %d}", i > 0 ? ", " : "", (i * 7919) % 500);
    }
    bson_string_append(many, "]");
    check(many->str, "[{\"$sort\": {\"v\": -1}}, {\"$limit\": 3}, {\"$project\": {\"_id\": 0}}]",
          "[{\"v\": 499}, {\"v\": 498}, {\"v\": 497}]");
    bson_string_free(many, true);
}

static void test_memory_limits(void **state)
{
    (void)state;
    bson_string_t *documents = bson_string_new("[");
    for (int i = 0; i < 200; i++) {
        bson_string_append_printf(documents, "%s{\"k\": %d, \"pad\": \"%0100d\"}",
                                  i > 0 ? ", " : "", i, i);
    }
    bson_string_append(documents, "]");
    pipeline_options_t small = {.allow_disk_use = false, .memory_limit_bytes = 4096};
    check_error_with(documents->str, "[{\"$sort\": {\"k\": -1}}]", &small, 292,
                     "Sort exceeded memory limit of 4096 bytes, but did not opt in to external "
                     "sorting.");
    check_error_with(documents->str,
                     "[{\"$group\": {\"_id\": \"$k\", \"p\": {\"$push\": \"$pad\"}}}]", &small, 292,
                     "Exceeded memory limit for $group, but didn't allow external sort. Pass "
                     "allowDiskUse:true to opt in.");
    /* A top-k sort holds only k documents, so it fits. */
    check_with(
        documents->str,
        "[{\"$sort\": {\"k\": -1}}, {\"$limit\": 1}, {\"$project\": {\"k\": 1, \"_id\": 0}}]",
        &small, "[{\"k\": 199}]");
    /* allowDiskUse lets the stage go past the limit. */
    pipeline_options_t disk = {.allow_disk_use = true, .memory_limit_bytes = 4096};
    check_with(documents->str,
               "[{\"$sort\": {\"k\": -1}}, {\"$group\": {\"_id\": null, \"n\": {\"$sum\": 1}}}]",
               &disk, "[{\"_id\": null, \"n\": 200}]");
    bson_string_free(documents, true);
}

static void test_replace_root(void **state)
{
    (void)state;
    const char *documents = "[{\"_id\": 1, \"in\": {\"x\": 1}}, {\"_id\": 2, \"in\": {\"x\": 2}}]";
    check(documents, "[{\"$replaceRoot\": {\"newRoot\": \"$in\"}}]", "[{\"x\": 1}, {\"x\": 2}]");
    check(documents, "[{\"$replaceWith\": {\"id\": \"$_id\", \"x\": \"$in.x\"}}]",
          "[{\"id\": 1, \"x\": 1}, {\"id\": 2, \"x\": 2}]");
    check_error(documents, "[{\"$replaceRoot\": {\"newRoot\": \"$_id\"}}]", 40228,
                "'newRoot' expression must evaluate to an object, but resulting value was: 1. "
                "Type of resulting value: 'int'. Input document: { _id: 1, in: { x: 1 } }");
    check_error(
        documents, "[{\"$replaceWith\": \"$nothing\"}]", 40228,
        "'replacement document' must evaluate to an object, but resulting value was: "
        "MISSING. Type of resulting value: 'missing'. Input document: { _id: 1, in: { x: 1 } }");
    check_error(documents, "[{\"$replaceRoot\": {}}]", 40414,
                "BSON field '$replaceRoot.newRoot' is missing but a required field");
    check_error(documents, "[{\"$replaceRoot\": {\"newRoot\": \"$in\", \"x\": 1}}]", 40415, NULL);
}

/* Compiles pipeline_json and returns it (fails the test when it does not compile). */
static pipeline_t *compile(const char *pipeline_json, bson_t **out_wrapper)
{
    *out_wrapper = support_json_wrapped(pipeline_json);
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, *out_wrapper, "v"));
    uint32_t length;
    const uint8_t *data;
    bson_iter_array(&iter, &length, &data);
    bson_t stages;
    bson_init_static(&stages, data, length);
    bson_error_t error;
    pipeline_t *pipeline = pipeline_compile(&stages, NULL, &error);
    if (pipeline == NULL) {
        fail_msg("%s: %s", pipeline_json, error.message);
    }
    return pipeline;
}

static void test_leading_stages(void **state)
{
    (void)state;
    bson_t *wrapper;
    pipeline_t *pipeline = compile(
        "[{\"$match\": {\"a\": 1}}, {\"$sort\": {\"b\": -1}}, {\"$skip\": 5}, {\"$limit\": 10}]",
        &wrapper);
    char *match = bson_as_relaxed_extended_json(pipeline_leading_match(pipeline), NULL);
    char *sort = bson_as_relaxed_extended_json(pipeline_leading_sort(pipeline), NULL);
    assert_string_equal(match, "{ \"a\" : 1 }");
    assert_string_equal(sort, "{ \"b\" : -1 }");
    assert_int_equal(pipeline_leading_limit(pipeline), 15);
    bson_free(match);
    bson_free(sort);
    pipeline_destroy(pipeline);
    bson_destroy(wrapper);

    pipeline = compile("[{\"$sort\": {\"b\": 1}}, {\"$limit\": 3}]", &wrapper);
    assert_null(pipeline_leading_match(pipeline));
    assert_non_null(pipeline_leading_sort(pipeline));
    assert_int_equal(pipeline_leading_limit(pipeline), 3);
    pipeline_destroy(pipeline);
    bson_destroy(wrapper);

    pipeline = compile("[{\"$project\": {\"a\": 1}}, {\"$match\": {\"a\": 1}}, {\"$limit\": 3}]",
                       &wrapper);
    assert_null(pipeline_leading_match(pipeline));
    assert_null(pipeline_leading_sort(pipeline));
    assert_int_equal(pipeline_leading_limit(pipeline), -1);
    pipeline_destroy(pipeline);
    bson_destroy(wrapper);
}

/* Compiles the one stage {stage_name: {option: text}} (or {stage_name: text} when
 * option is NULL), text given as raw bytes, and expects code. */
static void expect_raw_string_refused(const char *stage_name, const char *option, const char *text,
                                      uint32_t code)
{
    bson_t stages = BSON_INITIALIZER, stage, argument;
    BSON_APPEND_DOCUMENT_BEGIN(&stages, "0", &stage);
    if (option == NULL) {
        bson_append_utf8(&stage, stage_name, -1, text, (int)strlen(text));
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&stage, stage_name, &argument);
        if (strcmp(stage_name, "$unwind") == 0) {
            BSON_APPEND_UTF8(&argument, "path", "$a");
        }
        bson_append_utf8(&argument, option, -1, text, (int)strlen(text));
        bson_append_document_end(&stage, &argument);
    }
    bson_append_document_end(&stages, &stage);
    bson_error_t error;
    pipeline_t *pipeline = pipeline_compile(&stages, NULL, &error);
    if (pipeline != NULL) {
        pipeline_destroy(pipeline);
        fail_msg("%s with a name that is not UTF-8 compiled", stage_name);
    }
    assert_int_equal(error.code, code);
    bson_destroy(&stages);
}

/* A field name made from a string must be one the server would accept in a
 * document (UTF-8): the fuzzer's $count of "\xff" built a result no reader could
 * walk. */
static void test_field_names_made_from_strings_are_utf8(void **state)
{
    (void)state;
    expect_raw_string_refused("$count", NULL, "n\xff", 40156);
    expect_raw_string_refused("$unwind", "includeArrayIndex", "i\xc3", 28810);
    check_error(people, "[{\"$count\": \"a\\u0000b\"}]", 40156, NULL);
    check(people, "[{\"$count\": \"n\xc3\xa9\"}]", "[{\"n\xc3\xa9\": 4}]");
}

static void test_source_errors_and_reuse(void **state)
{
    (void)state;
    bson_t *wrapper;
    pipeline_t *pipeline = compile("[{\"$match\": {\"a\": {\"$gt\": 0}}}]", &wrapper);
    /* The source's error reaches pipeline_next unchanged. */
    test_source_t source;
    test_source_init(&source, "[{\"a\": 1}, {\"a\": 2}]");
    source.fail_after = 1;
    pipeline_run_t *run = pipeline_start(pipeline, test_source_next, &source);
    bson_t document;
    bool end;
    bson_error_t error;
    assert_true(pipeline_next(run, &document, &end, &error));
    assert_false(end);
    bson_destroy(&document);
    assert_false(pipeline_next(run, &document, &end, &error));
    assert_int_equal(error.code, 11601);
    pipeline_run_destroy(run);
    bson_destroy(source.wrapper);

    /* A compiled pipeline runs again from scratch; a $limit does not read past its count. */
    pipeline_destroy(pipeline);
    bson_destroy(wrapper);
    pipeline = compile("[{\"$limit\": 1}]", &wrapper);
    for (int round = 0; round < 2; round++) {
        test_source_init(&source, "[{\"a\": 1}, {\"a\": 2}]");
        run = pipeline_start(pipeline, test_source_next, &source);
        assert_true(pipeline_next(run, &document, &end, &error));
        assert_false(end);
        bson_destroy(&document);
        assert_true(pipeline_next(run, &document, &end, &error));
        assert_true(end);
        assert_int_equal(source.reads, 1);
        pipeline_run_destroy(run);
        bson_destroy(source.wrapper);
    }
    pipeline_destroy(pipeline);
    bson_destroy(wrapper);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_documents),
        cmocka_unit_test(test_match_limit_skip),
        cmocka_unit_test(test_stage_errors),
        cmocka_unit_test(test_chained_stages),
        cmocka_unit_test(test_group_accumulators),
        cmocka_unit_test(test_group_ids),
        cmocka_unit_test(test_count_stage),
        cmocka_unit_test(test_unwind),
        cmocka_unit_test(test_project_inclusion_exclusion),
        cmocka_unit_test(test_project_computed),
        cmocka_unit_test(test_add_fields_set_unset),
        cmocka_unit_test(test_sort),
        cmocka_unit_test(test_memory_limits),
        cmocka_unit_test(test_replace_root),
        cmocka_unit_test(test_leading_stages),
        cmocka_unit_test(test_source_errors_and_reuse),
        cmocka_unit_test(test_field_names_made_from_strings_are_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
