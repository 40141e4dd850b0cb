/* Unit tests for src/query/update: operator and replacement updates, JSON in and
 * JSON out (field order is significant), errors with mongod's codes and messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "query/update.h"

static void assert_documents_equal(const bson_t *actual, const char *expected_json)
{
    bson_t *expected = support_json_single_quoted(expected_json);
    if (!bson_equal(actual, expected)) {
        char *actual_text = bson_as_canonical_extended_json(actual, NULL);
        char *expected_text = bson_as_canonical_extended_json(expected, NULL);
        print_error("expected %s\n     got %s\n", expected_text, actual_text);
        bson_free(actual_text);
        bson_free(expected_text);
        bson_destroy(expected);
        fail();
    }
    bson_destroy(expected);
}

/* changed: 1 or 0 to check update_apply's out_changed, -1 to ignore it. */
static void expect_full(const char *document_json, const char *update_json,
                        const char *filters_json, bool upsert, const char *expected_json,
                        int changed)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *update = support_json_single_quoted(update_json);
    bson_t *filters = filters_json ? support_json_single_quoted(filters_json) : NULL;
    bson_error_t error;
    bson_t out;
    bool out_changed = false;
    update_spec_t *spec = update_compile(update, filters, &error);
    if (spec == NULL) {
        fail_msg("compile %s: %s", update_json, error.message);
    }
    if (!update_apply(spec, document, upsert, &out, NULL, &out_changed, &error)) {
        fail_msg("apply %s to %s: %s", update_json, document_json, error.message);
    }
    assert_documents_equal(&out, expected_json);
    if (changed >= 0) {
        assert_int_equal(out_changed, changed);
    }
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
    bson_destroy(update);
    bson_destroy(filters);
}

static void expect_update(const char *document_json, const char *update_json,
                          const char *expected_json)
{
    expect_full(document_json, update_json, NULL, false, expected_json, -1);
}

static void expect_compile_error(const char *update_json, const char *filters_json, int code,
                                 const char *message)
{
    bson_t *update = support_json_single_quoted(update_json);
    bson_t *filters = filters_json ? support_json_single_quoted(filters_json) : NULL;
    bson_error_t error;
    update_spec_t *spec = update_compile(update, filters, &error);
    if (spec != NULL) {
        fail_msg("compile %s succeeded, expected code %d", update_json, code);
    }
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    bson_destroy(update);
    bson_destroy(filters);
}

static void expect_apply_error(const char *document_json, const char *update_json,
                               const char *filters_json, int code, const char *message)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *update = support_json_single_quoted(update_json);
    bson_t *filters = filters_json ? support_json_single_quoted(filters_json) : NULL;
    bson_error_t error;
    bson_t out;
    update_spec_t *spec = update_compile(update, filters, &error);
    if (spec == NULL) {
        fail_msg("compile %s: %s", update_json, error.message);
    }
    if (update_apply(spec, document, false, &out, NULL, NULL, &error)) {
        char *text = bson_as_relaxed_extended_json(&out, NULL);
        print_error("unexpected result %s\n", text);
        bson_free(text);
        fail_msg("apply %s to %s succeeded, expected code %d", update_json, document_json, code);
    }
    assert_int_equal(error.code, code);
    assert_true(bson_empty(&out));
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
    bson_destroy(update);
    bson_destroy(filters);
}

static void expect_description(const char *document_json, const char *update_json,
                               const char *filters_json, const char *expected_json)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *update = support_json_single_quoted(update_json);
    bson_t *filters = filters_json ? support_json_single_quoted(filters_json) : NULL;
    bson_error_t error;
    bson_t out, description;
    update_spec_t *spec = update_compile(update, filters, &error);
    assert_non_null(spec);
    if (!update_apply(spec, document, false, &out, &description, NULL, &error)) {
        fail_msg("apply: %s", error.message);
    }
    assert_documents_equal(&description, expected_json);
    bson_destroy(&description);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
    bson_destroy(update);
    bson_destroy(filters);
}

/* ---------------------------------------------------------------------------------- */

static void test_set(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': 1}", "{'$set': {'b': 2}}", "{'_id': 1, 'a': 1, 'b': 2}");
    /* An existing field keeps its place. */
    expect_update("{'_id': 1, 'a': 1, 'b': 2}", "{'$set': {'a': 5}}", "{'_id': 1, 'a': 5, 'b': 2}");
    /* New fields are created in lexicographic order whatever the update's order. */
    expect_update("{'_id': 1}", "{'$set': {'z': 1, 'b': 2, 'a': 3}}",
                  "{'_id': 1, 'a': 3, 'b': 2, 'z': 1}");
    expect_update("{'_id': 1}", "{'$set': {'z': 1}, '$inc': {'a': 1}}",
                  "{'_id': 1, 'a': 1, 'z': 1}");
    /* ... and numeric names in numeric order. */
    expect_update("{'_id': 1, 'a': {}}", "{'$set': {'a.10': 1, 'a.9': 2}}",
                  "{'_id': 1, 'a': {'9': 2, '10': 1}}");
    expect_update("{'_id': 1}", "{'$set': {'a.b.c': 1}}", "{'_id': 1, 'a': {'b': {'c': 1}}}");
    expect_update("{'_id': 1, 'a': {'x': 1}}", "{'$set': {'a.b': {'c': [1, 2]}}}",
                  "{'_id': 1, 'a': {'x': 1, 'b': {'c': [1, 2]}}}");
    expect_update("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.1': 5}}", "{'_id': 1, 'a': [1, 5]}");
    /* Setting past the end pads with nulls. */
    expect_update("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.4': 5}}",
                  "{'_id': 1, 'a': [1, 2, null, null, 5]}");
    expect_update("{'_id': 1, 'a': [1]}", "{'$set': {'a.2.b': 1}}",
                  "{'_id': 1, 'a': [1, null, {'b': 1}]}");
    /* A numeric component on a document is a field name. */
    expect_update("{'_id': 1, 'a': {'b': 1}}", "{'$set': {'a.0': 1}}",
                  "{'_id': 1, 'a': {'b': 1, '0': 1}}");
    /* Dotted paths through arrays of documents by index. */
    expect_update("{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$set': {'a.1.b': 9}}",
                  "{'_id': 1, 'a': [{'b': 1}, {'b': 9}]}");
    /* null is a value, not a missing field. */
    expect_update("{'_id': 1, 'a': null}", "{'$set': {'a': 1}}", "{'_id': 1, 'a': 1}");
}

static void test_set_no_op_and_type_change(void **state)
{
    (void)state;
    expect_full("{'_id': 1, 'a': 1}", "{'$set': {'a': 1}}", NULL, false, "{'_id': 1, 'a': 1}", 0);
    /* The same number as a double is a change of type. */
    expect_full("{'_id': 1, 'a': 1}", "{'$set': {'a': 1.0}}", NULL, false, "{'_id': 1, 'a': 1.0}",
                1);
    expect_full("{'_id': 1, 'a': {'b': 1}}", "{'$set': {'a': {'b': 1}}}", NULL, false,
                "{'_id': 1, 'a': {'b': 1}}", 0);
    expect_full("{'_id': 1}", "{'$set': {}}", NULL, false, "{'_id': 1}", 0);
    /* Setting _id to its own value is allowed. */
    expect_full("{'_id': 1, 'a': 1}", "{'$set': {'_id': 1}}", NULL, false, "{'_id': 1, 'a': 1}", 0);
}

static void test_set_errors(void **state)
{
    (void)state;
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$set': {'a.b': 1}}", NULL, 28,
                       "Cannot create field 'b' in element {a: 5}");
    expect_apply_error("{'_id': 1, 'a': {'b': 'x'}}", "{'$set': {'a.b.c': 1}}", NULL, 28,
                       "Cannot create field 'c' in element {b: \"x\"}");
    expect_apply_error("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.x': 1}}", NULL, 28,
                       "Cannot create field 'x' in element {a: [ 1, 2 ]}");
    expect_apply_error("{'_id': 1, 'a': []}", "{'$set': {'a.2000000': 1}}", NULL, 34,
                       "can't backfill more than 1500000 elements");
    expect_apply_error("{'_id': 1}", "{'$set': {'_id': 2}}", NULL, 66,
                       "Performing an update on the path '_id' would modify the immutable field "
                       "'_id'");
    expect_apply_error("{'_id': {'a': 1}}", "{'$set': {'_id.a': 2}}", NULL, 66,
                       "Performing an update on the path '_id.a' would modify the immutable "
                       "field '_id'");
    expect_apply_error("{'_id': 1}", "{'$unset': {'_id': 1}}", NULL, 66, NULL);
    expect_apply_error("{'_id': 1}", "{'$set': {'$x': 1}}", NULL, 52, NULL);
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_compile_error("{'$foo': {'a': 1}}", NULL, 9,
                         "Unknown modifier: $foo. Expected a valid update modifier or "
                         "pipeline-style update specified as an array");
    expect_compile_error("{'$set': {'a': 1}, 'b': 1}", NULL, 9,
                         "Unknown modifier: b. Expected a valid update modifier or "
                         "pipeline-style update specified as an array");
    expect_compile_error("{'$set': 1}", NULL, 9,
                         "Modifiers operate on fields but we found type int instead. For "
                         "example: {$mod: {<field>: ...}} not {$set: 1}");
    expect_compile_error("{'$set': {'a': 1}, '$inc': {'a': 1}}", NULL, 40,
                         "Updating the path 'a' would create a conflict at 'a'");
    expect_compile_error("{'$set': {'a': 1, 'a.b': 1}}", NULL, 40,
                         "Updating the path 'a.b' would create a conflict at 'a'");
    expect_compile_error("{'$set': {'a.b': 1}, '$unset': {'a': 1}}", NULL, 40,
                         "Updating the path 'a' would create a conflict at 'a'");
    expect_compile_error("{'$set': {'a..b': 1}}", NULL, 56,
                         "The update path 'a..b' contains an empty field name, which is not "
                         "allowed.");
    expect_compile_error("{'$set': {'': 1}}", NULL, 56, "An empty update path is not valid.");
    expect_compile_error("{'$set': {'a.': 1}}", NULL, 56, NULL);
    expect_compile_error("{'a': 1, '$set': {'b': 1}}", NULL, 52,
                         "The dollar ($) prefixed field '$set' in '$set' is not allowed in the "
                         "context of an update's replacement document. Consider using an "
                         "aggregation pipeline with $replaceWith.");
    /* The positional '$': at most one, never first. */
    expect_compile_error("{'$set': {'a.$.b.$': 1}}", NULL, 2,
                         "Too many positional (i.e. '$') elements found in path 'a.$.b.$'");
    expect_compile_error("{'$set': {'$': 1}}", NULL, 2,
                         "Cannot have positional (i.e. '$') element in the first position in "
                         "path '$'");
    expect_compile_error("{'$inc': {'$.a': 1}}", NULL, 2,
                         "Cannot have positional (i.e. '$') element in the first position in "
                         "path '$.a'");
    expect_compile_error("{'$set': {'a.$': 1, 'a.$.b': 1}}", NULL, 40,
                         "Updating the path 'a.$.b' would create a conflict at 'a.$'");
    expect_compile_error("{'$rename': {'a.$': 'b'}}", NULL, 2,
                         "The source field for $rename may not be dynamic: a.$");
    expect_compile_error("{'$rename': {'a': 'b.$'}}", NULL, 2,
                         "The destination field for $rename may not be dynamic: b.$");
    expect_compile_error("{'$inc': {'a': 'x'}}", NULL, 14,
                         "Cannot increment with non-numeric argument: {a: \"x\"}");
    expect_compile_error("{'$mul': {'a': null}}", NULL, 14,
                         "Cannot multiply with non-numeric argument: {a: null}");
    expect_compile_error("{'$rename': {'a': 1}}", NULL, 2,
                         "The 'to' field for $rename must be a string: a: 1");
    expect_compile_error("{'$rename': {'a': 'a'}}", NULL, 2,
                         "The source and target field for $rename must differ: a: \"a\"");
    expect_compile_error("{'$rename': {'a': 'a.b'}}", NULL, 2,
                         "The source and target field for $rename must not be on the same path: "
                         "a: \"a.b\"");
    expect_compile_error("{'$rename': {'a': 'b'}, '$set': {'b': 1}}", NULL, 40, NULL);
    expect_compile_error("{'$rename': {'a': 'b'}, '$set': {'a': 1}}", NULL, 40, NULL);
    expect_compile_error("{'$pop': {'a': 2}}", NULL, 9, "$pop expects 1 or -1, found: 2");
    expect_compile_error("{'$pop': {'a': 'x'}}", NULL, 9, "Expected a number in: a: \"x\"");
    expect_compile_error("{'$pop': {'a': 1.5}}", NULL, 9, "Expected an integer: a: 1.5");
    expect_compile_error("{'$pullAll': {'a': 1}}", NULL, 2,
                         "$pullAll requires an array argument but was given a int");
    expect_compile_error("{'$currentDate': {'a': 1}}", NULL, 2,
                         "int is not valid type for $currentDate. Please use a boolean ('true') "
                         "or a $type expression ({$type: 'timestamp/date'}).");
    expect_compile_error("{'$currentDate': {'a': {'other': 'date'}}}", NULL, 2,
                         "Unrecognized $currentDate option: other");
    expect_compile_error("{'$push': {'a': {'$each': 1}}}", NULL, 2,
                         "The argument to $each in $push must be an array but it was of type: "
                         "int");
    expect_compile_error("{'$push': {'a': {'$each': [1], '$foo': 1}}}", NULL, 2,
                         "Unrecognized clause in $push: $foo");
    expect_compile_error("{'$push': {'a': {'$each': [1], '$slice': 'x'}}}", NULL, 2,
                         "The value for $slice must be an integer value but was given type: "
                         "string");
    expect_compile_error("{'$push': {'a': {'$each': [1], '$sort': 2}}}", NULL, 2,
                         "The $sort element value must be either 1 or -1");
    expect_compile_error("{'$push': {'a': {'$each': [1], '$sort': {}}}}", NULL, 2,
                         "The $sort pattern is empty when it should be a set of fields.");
    expect_compile_error("{'$addToSet': {'a': {'$each': 1}}}", NULL, 14, NULL);
    expect_compile_error("{'$addToSet': {'a': {'$each': [1], 'x': 1}}}", NULL, 2,
                         "Found unexpected fields after $each in $addToSet: { $each: [ 1 ], x: "
                         "1 }");
}

static void test_pipeline_and_value_forms(void **state)
{
    (void)state;
    bson_t *pipeline = support_json_single_quoted("{'u': [{'$set': {'a': 1}}], 'n': 5}");
    bson_iter_t iter;
    bson_error_t error;
    assert_true(bson_iter_init_find(&iter, pipeline, "u"));
    update_spec_t *pipeline_spec = update_compile_value(bson_iter_value(&iter), NULL, &error);
    assert_non_null(pipeline_spec);
    assert_true(update_is_pipeline(pipeline_spec));
    assert_false(update_is_replacement(pipeline_spec));
    assert_false(update_uses_positional(pipeline_spec));
    update_destroy(pipeline_spec);
    assert_true(bson_iter_init_find(&iter, pipeline, "n"));
    assert_null(update_compile_value(bson_iter_value(&iter), NULL, &error));
    assert_int_equal(error.code, 9);
    bson_destroy(pipeline);

    bson_t *wrapped = support_json_single_quoted("{'u': {'$set': {'a': 1}}}");
    assert_true(bson_iter_init_find(&iter, wrapped, "u"));
    update_spec_t *spec = update_compile_value(bson_iter_value(&iter), NULL, &error);
    assert_non_null(spec);
    assert_false(update_is_replacement(spec));
    assert_false(update_is_pipeline(spec));
    update_destroy(spec);
    bson_destroy(wrapped);
    update_destroy(NULL);
}

static void test_unset(void **state)
{
    (void)state;
    expect_full("{'_id': 1, 'a': 1, 'b': 2}", "{'$unset': {'a': ''}}", NULL, false,
                "{'_id': 1, 'b': 2}", 1);
    expect_full("{'_id': 1}", "{'$unset': {'a': 1}}", NULL, false, "{'_id': 1}", 0);
    expect_update("{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'$unset': {'a.b': 1}}",
                  "{'_id': 1, 'a': {'c': 2}}");
    /* An array member becomes null rather than shifting the others. */
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$unset': {'a.1': 1}}",
                  "{'_id': 1, 'a': [1, null, 3]}");
    /* Non-viable paths are no-ops for $unset. */
    expect_full("{'_id': 1, 'a': 5}", "{'$unset': {'a.b': 1}}", NULL, false, "{'_id': 1, 'a': 5}",
                0);
}

static void test_inc_mul(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': 1}", "{'$inc': {'a': 2}}", "{'_id': 1, 'a': 3}");
    expect_update("{'_id': 1}", "{'$inc': {'a': 2}}", "{'_id': 1, 'a': 2}");
    expect_update("{'_id': 1, 'a': 1}", "{'$inc': {'a': 0.5}}", "{'_id': 1, 'a': 1.5}");
    expect_update("{'_id': 1, 'a': 1.5}", "{'$inc': {'a': 1}}", "{'_id': 1, 'a': 2.5}");
    /* int32 overflow promotes to int64, as mongod does. */
    expect_update("{'_id': 1, 'a': 2147483647}", "{'$inc': {'a': 1}}",
                  "{'_id': 1, 'a': {'$numberLong': '2147483648'}}");
    expect_update("{'_id': 1, 'a': {'$numberLong': '5'}}", "{'$inc': {'a': 1}}",
                  "{'_id': 1, 'a': {'$numberLong': '6'}}");
    expect_update("{'_id': 1, 'a': -2147483648}", "{'$inc': {'a': -1}}",
                  "{'_id': 1, 'a': {'$numberLong': '-2147483649'}}");
    expect_full("{'_id': 1, 'a': 5}", "{'$inc': {'a': 0}}", NULL, false, "{'_id': 1, 'a': 5}", 0);
    /* +0.0 turns an int into a double: a change. */
    expect_full("{'_id': 1, 'a': 5}", "{'$inc': {'a': 0.0}}", NULL, false, "{'_id': 1, 'a': 5.0}",
                1);
    expect_update("{'_id': 1, 'a': {'b': [1, 2]}}", "{'$inc': {'a.b.1': 10}}",
                  "{'_id': 1, 'a': {'b': [1, 12]}}");
    expect_update("{'_id': 1, 'a': 3}", "{'$mul': {'a': 4}}", "{'_id': 1, 'a': 12}");
    expect_update("{'_id': 1, 'a': 3}", "{'$mul': {'a': 0.5}}", "{'_id': 1, 'a': 1.5}");
    expect_update("{'_id': 1, 'a': 65536}", "{'$mul': {'a': 65536}}",
                  "{'_id': 1, 'a': {'$numberLong': '4294967296'}}");
    /* $mul on a missing field creates zero of the argument's type. */
    expect_update("{'_id': 1}", "{'$mul': {'a': 5}}", "{'_id': 1, 'a': 0}");
    expect_update("{'_id': 1}", "{'$mul': {'a': {'$numberLong': '5'}}}",
                  "{'_id': 1, 'a': {'$numberLong': '0'}}");
    expect_update("{'_id': 1}", "{'$mul': {'a': 2.5}}", "{'_id': 1, 'a': 0.0}");

    expect_apply_error("{'_id': 1, 'a': 'x'}", "{'$inc': {'a': 1}}", NULL, 14,
                       "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field "
                       "'a' of non-numeric type string");
    expect_apply_error("{'_id': 'k', 'a': {'b': null}}", "{'$mul': {'a.b': 1}}", NULL, 14,
                       "Cannot apply $mul to a value of non-numeric type. {_id: \"k\"} has the "
                       "field 'b' of non-numeric type null");
    expect_apply_error("{'_id': 1, 'a': {'$numberLong': '9223372036854775807'}}",
                       "{'$inc': {'a': 1}}", NULL, 2,
                       "Failed to apply $inc operations to current value "
                       "((NumberLong)9223372036854775807) for document {_id: 1}");
    expect_apply_error("{'_id': 1, 'a': {'$numberLong': '4611686018427387904'}}",
                       "{'$mul': {'a': 4}}", NULL, 2,
                       "Failed to apply $mul operations to current value "
                       "((NumberLong)4611686018427387904) for document {_id: 1}");
}

static void test_bit(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': 13}", "{'$bit': {'a': {'and': 10}}}", "{'_id': 1, 'a': 8}");
    expect_update("{'_id': 1, 'a': 13}", "{'$bit': {'a': {'or': 2, 'xor': 1}}}",
                  "{'_id': 1, 'a': 14}");
    expect_update("{'_id': 1, 'a': 1}", "{'$bit': {'a': {'or': {'$numberLong': '4'}}}}",
                  "{'_id': 1, 'a': {'$numberLong': '5'}}");
    /* A missing field starts from int 0. */
    expect_update("{'_id': 1}", "{'$bit': {'a': {'or': 6}}}", "{'_id': 1, 'a': 6}");
    expect_full("{'_id': 1, 'a': 3}", "{'$bit': {'a': {'and': 3}}}", NULL, false,
                "{'_id': 1, 'a': 3}", 0);
    expect_compile_error("{'$bit': {'a': 5}}", NULL, 2,
                         "The $bit modifier is not compatible with a int. You must pass in an "
                         "embedded document: {$bit: {field: {and/or/xor: #}}");
    expect_compile_error("{'$bit': {'a': {'nand': 1}}}", NULL, 2,
                         "The $bit modifier only supports 'and', 'or', and 'xor', not 'nand' "
                         "which is an unknown operator: {nand: 1}");
    expect_compile_error("{'$bit': {'a': {'and': 1.0}}}", NULL, 2,
                         "The $bit modifier field must be an Integer(32/64 bit); a 'double' is "
                         "not supported here: {and: 1.0}");
    expect_compile_error("{'$bit': {'a': {}}}", NULL, 2, NULL);
    expect_apply_error("{'_id': 1, 'a': 's'}", "{'$bit': {'a': {'and': 1}}}", NULL, 2,
                       "Cannot apply $bit to a value of non-integral type._id: 1 has the field a "
                       "of non-integer type string");
}

static void test_min_max(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': 5}", "{'$min': {'a': 3}}", "{'_id': 1, 'a': 3}");
    expect_full("{'_id': 1, 'a': 5}", "{'$min': {'a': 7}}", NULL, false, "{'_id': 1, 'a': 5}", 0);
    expect_update("{'_id': 1, 'a': 5}", "{'$max': {'a': 7}}", "{'_id': 1, 'a': 7}");
    expect_full("{'_id': 1, 'a': 5}", "{'$max': {'a': 3}}", NULL, false, "{'_id': 1, 'a': 5}", 0);
    /* 5 and 5.0 compare equal: no change of type. */
    expect_full("{'_id': 1, 'a': 5}", "{'$max': {'a': 5.0}}", NULL, false, "{'_id': 1, 'a': 5}", 0);
    expect_update("{'_id': 1}", "{'$min': {'a': 3}}", "{'_id': 1, 'a': 3}");
    /* Cross-type order: null < numbers < strings. */
    expect_update("{'_id': 1, 'a': null}", "{'$max': {'a': 1}}", "{'_id': 1, 'a': 1}");
    expect_update("{'_id': 1, 'a': 10}", "{'$max': {'a': 'abc'}}", "{'_id': 1, 'a': 'abc'}");
    expect_update("{'_id': 1, 'a': 10}", "{'$min': {'a': null}}", "{'_id': 1, 'a': null}");
}

static void test_rename(void **state)
{
    (void)state;
    /* The renamed field goes to the end. */
    expect_update("{'_id': 1, 'a': 1, 'b': 2}", "{'$rename': {'a': 'z'}}",
                  "{'_id': 1, 'b': 2, 'z': 1}");
    /* An existing destination keeps its place. */
    expect_update("{'_id': 1, 'a': 1, 'b': 2, 'c': 3}", "{'$rename': {'c': 'a'}}",
                  "{'_id': 1, 'a': 3, 'b': 2}");
    expect_update("{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'$rename': {'a.b': 'd.e'}}",
                  "{'_id': 1, 'a': {'c': 2}, 'd': {'e': 1}}");
    expect_full("{'_id': 1, 'b': 1}", "{'$rename': {'a': 'c'}}", NULL, false, "{'_id': 1, 'b': 1}",
                0);
    expect_update("{'_id': 1, 'a': [1, 2]}", "{'$rename': {'a': 'b'}}", "{'_id': 1, 'b': [1, 2]}");
    /* A destination that is not UTF-8 would make a name no reader can walk. */
    bson_t update = BSON_INITIALIZER, rename;
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$rename", &rename);
    bson_append_utf8(&rename, "a", 1, "b\xff", 2);
    bson_append_document_end(&update, &rename);
    bson_error_t error;
    assert_null(update_compile(&update, NULL, &error));
    assert_int_equal(error.code, 2);
    assert_string_equal(error.message, "The 'to' field for $rename must be UTF-8");
    bson_destroy(&update);
    expect_apply_error("{'_id': 1, 'a': [{'b': 1}]}", "{'$rename': {'a.0.b': 'c'}}", NULL, 2,
                       "The source field cannot be an array element, 'a.0.b' in doc with _id: 1 "
                       "has an array field called 'a'");
    expect_apply_error("{'_id': 1, 'a': 1, 'b': [{}]}", "{'$rename': {'a': 'b.0.c'}}", NULL, 2,
                       "The destination field cannot be an array element, 'b.0.c' in doc with "
                       "_id: 1 has an array field called 'b'");
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$rename': {'a.b': 'c'}}", NULL, 28,
                       "cannot use the part (a of a.b) to traverse the element ({a: 5})");
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$rename': {'_id': 'b'}}", NULL, 66, NULL);
}

static void test_push(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': [1]}", "{'$push': {'a': 2}}", "{'_id': 1, 'a': [1, 2]}");
    expect_update("{'_id': 1}", "{'$push': {'a': 2}}", "{'_id': 1, 'a': [2]}");
    /* An array value is pushed as one member. */
    expect_update("{'_id': 1, 'a': []}", "{'$push': {'a': [1, 2]}}", "{'_id': 1, 'a': [[1, 2]]}");
    expect_update("{'_id': 1, 'a': [1]}", "{'$push': {'a': {'$each': [2, 3]}}}",
                  "{'_id': 1, 'a': [1, 2, 3]}");
    /* An object without $each is a value. */
    expect_update("{'_id': 1, 'a': []}", "{'$push': {'a': {'$slice': 1}}}",
                  "{'_id': 1, 'a': [{'$slice': 1}]}");
    expect_update("{'_id': 1, 'a': [1, 2]}", "{'$push': {'a': {'$each': [9], '$position': 0}}}",
                  "{'_id': 1, 'a': [9, 1, 2]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}",
                  "{'$push': {'a': {'$each': [8, 9], '$position': 1}}}",
                  "{'_id': 1, 'a': [1, 8, 9, 2, 3]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$push': {'a': {'$each': [9], '$position': -1}}}",
                  "{'_id': 1, 'a': [1, 2, 9, 3]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}",
                  "{'$push': {'a': {'$each': [9], '$position': -10}}}",
                  "{'_id': 1, 'a': [9, 1, 2, 3]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$push': {'a': {'$each': [4], '$slice': 2}}}",
                  "{'_id': 1, 'a': [1, 2]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$push': {'a': {'$each': [4], '$slice': -2}}}",
                  "{'_id': 1, 'a': [3, 4]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$push': {'a': {'$each': [], '$slice': 0}}}",
                  "{'_id': 1, 'a': []}");
    expect_update("{'_id': 1, 'a': [3, 1]}", "{'$push': {'a': {'$each': [2], '$sort': 1}}}",
                  "{'_id': 1, 'a': [1, 2, 3]}");
    expect_update("{'_id': 1, 'a': [3, 1]}",
                  "{'$push': {'a': {'$each': [2], '$sort': -1, '$slice': 2}}}",
                  "{'_id': 1, 'a': [3, 2]}");
    /* Sort by a field: missing sorts as null, ties keep their order. */
    expect_update(
        "{'_id': 1, 'a': [{'s': 2, 'n': 'x'}, {'n': 'y'}, {'s': 1}]}",
        "{'$push': {'a': {'$each': [{'s': 2, 'n': 'z'}], '$sort': {'s': 1}}}}",
        "{'_id': 1, 'a': [{'n': 'y'}, {'s': 1}, {'s': 2, 'n': 'x'}, {'s': 2, 'n': 'z'}]}");
    expect_update("{'_id': 1, 'a': [{'b': {'c': 1}}, {'b': {'c': 3}}]}",
                  "{'$push': {'a': {'$each': [{'b': {'c': 2}}], '$sort': {'b.c': -1}}}}",
                  "{'_id': 1, 'a': [{'b': {'c': 3}}, {'b': {'c': 2}}, {'b': {'c': 1}}]}");
    /* Mixed types sort in MongoDB's cross-type order. */
    expect_update("{'_id': 1, 'a': ['b', 2, null, 1.5]}",
                  "{'$push': {'a': {'$each': [], '$sort': 1}}}",
                  "{'_id': 1, 'a': [null, 1.5, 2, 'b']}");
    expect_full("{'_id': 1, 'a': [1]}", "{'$push': {'a': {'$each': []}}}", NULL, false,
                "{'_id': 1, 'a': [1]}", 0);
    expect_apply_error("{'_id': 1, 'a': 1}", "{'$push': {'a': 2}}", NULL, 2,
                       "The field 'a' must be an array but is of type int in document {_id: 1}");
    expect_apply_error("{'_id': 1, 'a': {'b': 'x'}}", "{'$push': {'a.b': 2}}", NULL, 2,
                       "The field 'a.b' must be an array but is of type string in document "
                       "{_id: 1}");
}

static void test_add_to_set(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 3}}",
                  "{'_id': 1, 'a': [1, 2, 3]}");
    expect_full("{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 2}}", NULL, false,
                "{'_id': 1, 'a': [1, 2]}", 0);
    /* 2.0 equals 2. */
    expect_full("{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 2.0}}", NULL, false,
                "{'_id': 1, 'a': [1, 2]}", 0);
    expect_update("{'_id': 1, 'a': [1]}", "{'$addToSet': {'a': {'$each': [1, 2, 2, 3]}}}",
                  "{'_id': 1, 'a': [1, 2, 3]}");
    expect_update("{'_id': 1}", "{'$addToSet': {'a': {'$each': [4, 4, 5]}}}",
                  "{'_id': 1, 'a': [4, 5]}");
    /* Documents compare with field order. */
    expect_update("{'_id': 1, 'a': [{'x': 1, 'y': 2}]}", "{'$addToSet': {'a': {'y': 2, 'x': 1}}}",
                  "{'_id': 1, 'a': [{'x': 1, 'y': 2}, {'y': 2, 'x': 1}]}");
    expect_update("{'_id': 1, 'a': [[1, 2]]}", "{'$addToSet': {'a': [1, 2]}}",
                  "{'_id': 1, 'a': [[1, 2]]}");
    expect_apply_error("{'_id': 1, 'a': 1}", "{'$addToSet': {'a': 2}}", NULL, 2,
                       "Cannot apply $addToSet to non-array field. Field named 'a' has non-array "
                       "type int");
}

static void test_pull(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': [1, 2, 1, 3]}", "{'$pull': {'a': 1}}",
                  "{'_id': 1, 'a': [2, 3]}");
    expect_update("{'_id': 1, 'a': [1, 2.0, 3]}", "{'$pull': {'a': 2}}", "{'_id': 1, 'a': [1, 3]}");
    expect_update("{'_id': 1, 'a': [1, 5, 3, 8]}", "{'$pull': {'a': {'$gte': 5}}}",
                  "{'_id': 1, 'a': [1, 3]}");
    expect_update("{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'b': 2}, 3]}", "{'$pull': {'a': {'b': 1}}}",
                  "{'_id': 1, 'a': [{'b': 2}, 3]}");
    expect_update("{'_id': 1, 'a': [[1, 2], [3]]}", "{'$pull': {'a': [1, 2]}}",
                  "{'_id': 1, 'a': [[3]]}");
    expect_update("{'_id': 1, 'a': [{'b': 1}, {'b': 5}]}", "{'$pull': {'a': {'b': {'$gt': 2}}}}",
                  "{'_id': 1, 'a': [{'b': 1}]}");
    expect_full("{'_id': 1, 'a': [1]}", "{'$pull': {'a': 2}}", NULL, false, "{'_id': 1, 'a': [1]}",
                0);
    expect_full("{'_id': 1}", "{'$pull': {'a': 2}}", NULL, false, "{'_id': 1}", 0);
    expect_update("{'_id': 1, 'a': [1, 2, 3, 1]}", "{'$pullAll': {'a': [1, 3]}}",
                  "{'_id': 1, 'a': [2]}");
    expect_apply_error("{'_id': 1, 'a': 1}", "{'$pull': {'a': 1}}", NULL, 2,
                       "Cannot apply $pull to a non-array value");
    expect_apply_error("{'_id': 1, 'a': 1}", "{'$pullAll': {'a': [1]}}", NULL, 2,
                       "Cannot apply $pull to a non-array value");
    /* mongod bans its special features in a $pull condition. */
    expect_compile_error("{'$pull': {'a': {'$expr': {'$eq': ['$b', 1]}}}}", NULL, 224,
                         "$expr is not allowed in this context");
    expect_compile_error("{'$pull': {'a': {'$jsonSchema': {'required': ['b']}}}}", NULL, 224,
                         "$jsonSchema is not allowed in this context");
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$pull': {'a.b': 1}}", NULL, 28,
                       "Cannot use the part (b) of (a.b) to traverse the element ({a: 5})");
}

static void test_pop(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': 1}}", "{'_id': 1, 'a': [1, 2]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': -1}}", "{'_id': 1, 'a': [2, 3]}");
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': 1.0}}", "{'_id': 1, 'a': [1, 2]}");
    expect_full("{'_id': 1, 'a': []}", "{'$pop': {'a': 1}}", NULL, false, "{'_id': 1, 'a': []}", 0);
    expect_full("{'_id': 1}", "{'$pop': {'a': 1}}", NULL, false, "{'_id': 1}", 0);
    expect_full("{'_id': 1, 'a': {}}", "{'$pop': {'a.b.c': 1}}", NULL, false, "{'_id': 1, 'a': {}}",
                0);
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$pop': {'a': 1}}", NULL, 14,
                       "Path 'a' contains an element of non-array type 'int'");
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$pop': {'a.b': 1}}", NULL, 28, NULL);
}

static void test_current_date(void **state)
{
    (void)state;
    bson_t *document = support_json_single_quoted("{'_id': 1, 'a': 1}");
    /* Built with BCON: {$type: ...} reads as extended JSON. */
    bson_t *update =
        BCON_NEW("$currentDate", "{", "a", BCON_BOOL(true), "b", "{", "$type",
                 BCON_UTF8("timestamp"), "}", "c", "{", "$type", BCON_UTF8("date"), "}", "}");
    bson_error_t error;
    bson_t out;
    bson_iter_t iter;
    update_spec_t *spec = update_compile(update, NULL, &error);
    assert_non_null(spec);
    assert_true(update_apply(spec, document, false, &out, NULL, NULL, &error));
    assert_true(bson_iter_init_find(&iter, &out, "a"));
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_DATE_TIME);
    assert_true(bson_iter_date_time(&iter) > 1600000000000LL);
    assert_true(bson_iter_init_find(&iter, &out, "b"));
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_TIMESTAMP);
    assert_true(bson_iter_init_find(&iter, &out, "c"));
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_DATE_TIME);
    /* a stays in place, b and c are appended in order. */
    assert_true(bson_iter_init(&iter, &out));
    assert_true(bson_iter_next(&iter) && strcmp(bson_iter_key(&iter), "_id") == 0);
    assert_true(bson_iter_next(&iter) && strcmp(bson_iter_key(&iter), "a") == 0);
    assert_true(bson_iter_next(&iter) && strcmp(bson_iter_key(&iter), "b") == 0);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);
    bson_destroy(document);

    update = BCON_NEW("$currentDate", "{", "a", "{", "$type", BCON_UTF8("x"), "}", "}");
    assert_null(update_compile(update, NULL, &error));
    assert_int_equal(error.code, 2);
    assert_string_equal(error.message, "The '$type' string field is required to be 'date' or "
                                       "'timestamp': {$currentDate: {field : {$type: 'date'}}}");
    bson_destroy(update);
}

static void test_set_on_insert(void **state)
{
    (void)state;
    expect_full("{'_id': 1}", "{'$setOnInsert': {'a': 1}}", NULL, false, "{'_id': 1}", 0);
    expect_full("{'_id': 1}", "{'$setOnInsert': {'a': 1}, '$set': {'b': 2}}", NULL, true,
                "{'_id': 1, 'a': 1, 'b': 2}", 1);
}

static void test_array_filters(void **state)
{
    (void)state;
    expect_update("{'_id': 1, 'a': [1, 2, 3]}", "{'$inc': {'a.$[]': 10}}",
                  "{'_id': 1, 'a': [11, 12, 13]}");
    expect_full("{'_id': 1, 'a': [1, 5, 3, 8]}", "{'$set': {'a.$[big]': 0}}",
                "[{'big': {'$gte': 5}}]", false, "{'_id': 1, 'a': [1, 0, 3, 0]}", 1);
    expect_full("{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 1}]}",
                "{'$set': {'a.$[e].c': 9}}", "[{'e.b': 2}]", false,
                "{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 9}]}", 1);
    expect_update("{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$set': {'a.$[].c': 0}}",
                  "{'_id': 1, 'a': [{'b': 1, 'c': 0}, {'b': 2, 'c': 0}]}");
    expect_update("{'_id': 1, 'a': [[1, 2], [3]]}", "{'$inc': {'a.$[].$[]': 1}}",
                  "{'_id': 1, 'a': [[2, 3], [4]]}");
    /* Two identifiers on disjoint fields of the same member merge. */
    expect_full("{'_id': 1, 'a': [{'x': 1}, {'x': 2}]}", "{'$set': {'a.$[i].y': 1, 'a.$[j].z': 2}}",
                "[{'i.x': 1}, {'j.x': {'$gte': 1}}]", false,
                "{'_id': 1, 'a': [{'x': 1, 'y': 1, 'z': 2}, {'x': 2, 'z': 2}]}", 1);
    expect_full("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.$[i]': 0}}", "[{'i': 7}]", false,
                "{'_id': 1, 'a': [1, 2]}", 0);
    expect_apply_error("{'_id': 1, 'a': [{'x': 1}]}", "{'$set': {'a.$[i].y': 1, 'a.$[j].y': 2}}",
                       "[{'i.x': 1}, {'j.x': 1}]", 40, "Update created a conflict at 'a.0.y'");
    expect_apply_error("{'_id': 1}", "{'$set': {'a.$[]': 1}}", NULL, 2,
                       "The path 'a' must exist in the document in order to apply array "
                       "updates.");
    expect_apply_error("{'_id': 1, 'a': 5}", "{'$set': {'a.$[]': 1}}", NULL, 2,
                       "Cannot apply array updates to non-array element a: 5");
    expect_compile_error("{'$set': {'a.$[i]': 1}}", "[{'i': 1}, {'j': 1}]", 9,
                         "The array filter for identifier 'j' was not used in the update { $set: "
                         "{ a.$[i]: 1 } }");
    expect_compile_error("{'$set': {'a.$[k]': 1}}", "[]", 2,
                         "No array filter found for identifier 'k' in path 'a.$[k]'");
    expect_compile_error("{'$set': {'$[]': 1}}", NULL, 2,
                         "Cannot have array filter identifier (i.e. '$[<id>]') element in the "
                         "first position in path '$[]'");
    expect_compile_error("{'$set': {'a.$[i]': 1}}", "[{'i': 1}, {'i': 2}]", 9,
                         "Found multiple array filters with the same top-level field name i");
    expect_compile_error("{'$set': {'a.$[i]': 1}}", "[{'i': 1, 'j': 2}]", 9,
                         "Error parsing array filter :: caused by :: Expected a single top-level "
                         "field name, found 'i' and 'j'");
    expect_compile_error("{'$set': {'a.$[I]': 1}}", "[{'I': 1}]", 2,
                         "Error parsing array filter :: caused by :: The top-level field name "
                         "must be an alphanumeric string beginning with a lowercase letter, found "
                         "'I'");
    expect_compile_error("{'$set': {'a.$[i]': 1}}", "[{'$expr': {'$eq': ['$i', 1]}}]", 224,
                         "Error parsing array filter :: caused by :: $expr is not allowed in this context");
    expect_compile_error("{'$set': {'a.$[i]': 1}}", "[{'i': 1, '$jsonSchema': {}}]", 224,
                         "Error parsing array filter :: caused by :: $jsonSchema is not allowed in this "
                         "context");
    expect_compile_error("{'$set': {'a.$[i]': 1}}", "[{}]", 9,
                         "Cannot use an expression without a top-level field name in "
                         "arrayFilters");
    /* Array filters are ignored for replacements, as mongod does. */
    expect_full("{'_id': 1, 'a': 1}", "{'b': 2}", "[{'i': 1}]", false, "{'_id': 1, 'b': 2}", 1);
}

static void test_replacement(void **state)
{
    (void)state;
    /* The old _id is kept, first. */
    expect_full("{'_id': 1, 'a': 1}", "{'b': 2, 'c': 3}", NULL, false, "{'_id': 1, 'b': 2, 'c': 3}",
                1);
    expect_full("{'a': 1, '_id': 1}", "{'b': 2}", NULL, false, "{'_id': 1, 'b': 2}", 1);
    expect_full("{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 1}", NULL, false, "{'_id': 1, 'a': 1}", 0);
    expect_full("{'_id': 1, 'a': 1}", "{'a': 1}", NULL, false, "{'_id': 1, 'a': 1}", 0);
    expect_full("{'_id': 1, 'a': 1}", "{}", NULL, false, "{'_id': 1}", 1);
    /* The replacement's _id position is kept when it equals the old one. */
    expect_full("{'_id': 1, 'a': 1}", "{'a': 2, '_id': 1}", NULL, false, "{'a': 2, '_id': 1}", 1);
    expect_apply_error("{'_id': 1, 'a': 1}", "{'_id': 2, 'a': 1}", NULL, 66,
                       "After applying the update, the (immutable) field '_id' was found to have "
                       "been altered to _id: 2");
    bson_t *update = support_json_single_quoted("{'a': 1}");
    bson_error_t error;
    update_spec_t *spec = update_compile(update, NULL, &error);
    assert_true(update_is_replacement(spec));
    update_destroy(spec);
    bson_destroy(update);
}

static void expect_seed(const char *filter_json, const char *update_json, const char *expected)
{
    bson_t *filter = support_json_single_quoted(filter_json);
    bson_t *update = update_json ? support_json_single_quoted(update_json) : NULL;
    bson_error_t error;
    bson_t out;
    update_spec_t *spec = update ? update_compile(update, NULL, &error) : NULL;
    if (!update_build_upsert_seed(spec, filter, &out, &error)) {
        fail_msg("seed %s: %s", filter_json, error.message);
    }
    assert_documents_equal(&out, expected);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);
    bson_destroy(filter);
}

static void test_upsert_seed(void **state)
{
    (void)state;
    expect_seed("{'b': 1, 'a': 2}", NULL, "{'a': 2, 'b': 1}");
    expect_seed("{'x.y': 1, 'x.z': {'$eq': 2}, 'q': {'$gt': 5}, 'r': {'$in': [7]}, "
                "'s': {'$in': [1, 2]}, 't': {'$regex': 'x'}}",
                NULL, "{'r': 7, 'x': {'y': 1, 'z': 2}}");
    expect_seed("{'$and': [{'a': 1}, {'$and': [{'b': 2}]}], '$or': [{'c': 3}]}", NULL,
                "{'a': 1, 'b': 2, 'c': 3}");
    expect_seed("{'$or': [{'c': 3}, {'d': 4}]}", NULL, "{}");
    expect_seed("{'_id': 5, 'a': {'b': 1}}", NULL, "{'_id': 5, 'a': {'b': 1}}");
    /* A replacement takes only _id from the filter. */
    expect_seed("{'_id': 5, 'a': 1}", "{'z': 1}", "{'_id': 5}");
    expect_seed("{'a': null}", NULL, "{'a': null}");

    bson_t *filter = support_json_single_quoted("{'a': 1, '$and': [{'a': 2}]}");
    bson_error_t error;
    bson_t out;
    assert_false(update_build_upsert_seed(NULL, filter, &out, &error));
    assert_int_equal(error.code, 54);
    assert_string_equal(error.message,
                        "cannot infer query fields to set, path 'a' is matched twice");
    bson_destroy(&out);
    bson_destroy(filter);
    filter = support_json_single_quoted("{'a': 1, 'a.b': 2}");
    assert_false(update_build_upsert_seed(NULL, filter, &out, &error));
    assert_int_equal(error.code, 54);
    assert_string_equal(error.message,
                        "cannot infer query fields to set, both paths 'a.b' and 'a' are matched");
    bson_destroy(&out);
    bson_destroy(filter);
}

static void test_upsert_apply(void **state)
{
    (void)state;
    expect_full("{'x': 1, '_id': 5}", "{'$set': {'a': 1}}", NULL, true,
                "{'_id': 5, 'x': 1, 'a': 1}", 1);
    expect_full("{'_id': 5}", "{'b': 1}", NULL, true, "{'_id': 5, 'b': 1}", 1);
    expect_full("{}", "{'b': 1, '_id': 3}", NULL, true, "{'_id': 3, 'b': 1}", 1);

    /* Without an _id anywhere an ObjectId is generated, first. */
    bson_t *seed = support_json_single_quoted("{'a': 1}");
    bson_t *update = support_json_single_quoted("{'$inc': {'n': 1}}");
    bson_error_t error;
    bson_t out;
    bson_iter_t iter;
    update_spec_t *spec = update_compile(update, NULL, &error);
    assert_true(update_apply(spec, seed, true, &out, NULL, NULL, &error));
    assert_true(bson_iter_init(&iter, &out) && bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "_id");
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_OID);
    assert_int_equal(bson_count_keys(&out), 3);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);

    /* The _id taken from the query is immutable; setting a missing one is fine. */
    update = support_json_single_quoted("{'$set': {'_id': 6}}");
    spec = update_compile(update, NULL, &error);
    assert_true(update_apply(spec, seed, true, &out, NULL, NULL, &error));
    assert_documents_equal(&out, "{'_id': 6, 'a': 1}");
    bson_destroy(&out);
    bson_t *with_id = support_json_single_quoted("{'_id': 5}");
    assert_false(update_apply(spec, with_id, true, &out, NULL, NULL, &error));
    assert_int_equal(error.code, 66);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);

    update = support_json_single_quoted("{'$set': {'_id': [1]}}");
    spec = update_compile(update, NULL, &error);
    assert_false(update_apply(spec, seed, true, &out, NULL, NULL, &error));
    assert_int_equal(error.code, 54);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);
    bson_destroy(with_id);
    bson_destroy(seed);
}

static void test_description(void **state)
{
    (void)state;
    expect_description("{'_id': 1, 'a': 1, 'b': 2, 'c': [1]}",
                       "{'$set': {'a': 5}, '$unset': {'b': 1}, '$push': {'c': {'$each': [2, 3]}}}",
                       NULL,
                       "{'updatedFields': {'a': 5, 'c.1': 2, 'c.2': 3}, 'removedFields': ['b'], "
                       "'truncatedArrays': []}");
    /* A new subtree is reported once, at its top. */
    expect_description("{'_id': 1}", "{'$set': {'x.y': 1, 'x.z': 2}}", NULL,
                       "{'updatedFields': {'x': {'y': 1, 'z': 2}}, 'removedFields': [], "
                       "'truncatedArrays': []}");
    expect_description("{'_id': 1, 'a': 1}", "{'$rename': {'a': 'b'}}", NULL,
                       "{'updatedFields': {'b': 1}, 'removedFields': ['a'], "
                       "'truncatedArrays': []}");
    expect_description("{'_id': 1, 'a': [1, 2, 3]}", "{'$pull': {'a': 2}}", NULL,
                       "{'updatedFields': {'a': [1, 3]}, 'removedFields': [], "
                       "'truncatedArrays': []}");
    expect_description("{'_id': 1, 'a': [1, 2, 3]}", "{'$inc': {'a.$[]': 1}}", NULL,
                       "{'updatedFields': {'a': [2, 3, 4]}, 'removedFields': [], "
                       "'truncatedArrays': []}");
    expect_description("{'_id': 1, 'a': [1, 2, 3]}", "{'$inc': {'a.$[i]': 1}}", "[{'i': 2}]",
                       "{'updatedFields': {'a.1': 3}, 'removedFields': [], "
                       "'truncatedArrays': []}");
    expect_description("{'_id': 1, 'a': {'b': 1}}", "{'$inc': {'a.b': 1}}", NULL,
                       "{'updatedFields': {'a.b': 2}, 'removedFields': [], "
                       "'truncatedArrays': []}");
    expect_description("{'_id': 1, 'a': 1}", "{'$set': {'a': 1}}", NULL,
                       "{'updatedFields': {}, 'removedFields': [], 'truncatedArrays': []}");
}

/* ---- the positional '$' --------------------------------------------------------- */

/* Applies update with matched (NULL: none) as the query's matched array index. changed:
 * 1 or 0 to check out_changed, -1 to ignore it. */
static void expect_positional(const char *document_json, const char *update_json,
                              const char *matched, const char *expected_json, int changed)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *update = support_json_single_quoted(update_json);
    bson_error_t error;
    bson_t out;
    bool out_changed = false;
    update_spec_t *spec = update_compile(update, NULL, &error);
    if (spec == NULL) {
        fail_msg("compile %s: %s", update_json, error.message);
    }
    assert_true(update_uses_positional(spec));
    update_apply_options_t options = {.matched_array_index = matched};
    if (!update_apply_with_options(spec, document, &options, &out, NULL, &out_changed, &error)) {
        fail_msg("apply %s to %s at %s: %s", update_json, document_json, matched, error.message);
    }
    assert_documents_equal(&out, expected_json);
    if (changed >= 0) {
        assert_int_equal(out_changed, changed);
    }
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
    bson_destroy(update);
}

static void expect_positional_error(const char *document_json, const char *update_json,
                                    const char *matched, bool upsert, int code,
                                    const char *message)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *update = support_json_single_quoted(update_json);
    bson_error_t error;
    bson_t out;
    update_spec_t *spec = update_compile(update, NULL, &error);
    assert_non_null(spec);
    update_apply_options_t options = {.is_upsert_insert = upsert, .matched_array_index = matched};
    assert_false(update_apply_with_options(spec, document, &options, &out, NULL, NULL, &error));
    assert_int_equal(error.code, code);
    assert_string_equal(error.message, message);
    assert_true(bson_empty(&out));
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
    bson_destroy(update);
}

static void test_positional(void **state)
{
    (void)state;
    expect_positional("{'_id': 1, 'grades': [80, 85, 90]}", "{'$set': {'grades.$': 86}}", "1",
                      "{'_id': 1, 'grades': [80, 86, 90]}", 1);
    expect_positional("{'_id': 1, 'grades': [80, 85, 90]}", "{'$set': {'grades.$': 85}}", "1",
                      "{'_id': 1, 'grades': [80, 85, 90]}", 0);
    expect_positional("{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$inc': {'a.$.b': 10}}", "1",
                      "{'_id': 1, 'a': [{'b': 1}, {'b': 12}]}", 1);
    /* Fields are created inside the matched element. */
    expect_positional("{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$set': {'a.$.c': 5}}", "0",
                      "{'_id': 1, 'a': [{'b': 1, 'c': 5}, {'b': 2}]}", 1);
    expect_positional("{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$unset': {'a.$.b': 1}}", "0",
                      "{'_id': 1, 'a': [{}, {'b': 2}]}", 1);
    expect_positional("{'_id': 1, 'a': [1, 2, 3]}", "{'$unset': {'a.$': 1}}", "2",
                      "{'_id': 1, 'a': [1, 2, null]}", 1);
    expect_positional("{'_id': 1, 'a': [{'v': [1]}, {'v': [1, 2]}]}",
                      "{'$inc': {'a.$.v.$[]': 1}}", "1",
                      "{'_id': 1, 'a': [{'v': [1]}, {'v': [2, 3]}]}", 1);
    expect_positional("{'_id': 1, 'a': [[1], [2, 3]]}", "{'$push': {'a.$': 4}}", "1",
                      "{'_id': 1, 'a': [[1], [2, 3, 4]]}", 1);
    /* Other operators of the same update apply as usual. */
    expect_positional("{'_id': 1, 'a': [5, 6], 'n': 1}",
                      "{'$set': {'a.$': 0}, '$inc': {'n': 1}}", "0",
                      "{'_id': 1, 'a': [0, 6], 'n': 2}", 1);
    /* A sibling of the matched name is merged with the positional update... */
    expect_positional("{'_id': 1, 'a': [{}, {}]}", "{'$set': {'a.$.b': 1, 'a.1.c': 2}}", "1",
                      "{'_id': 1, 'a': [{}, {'b': 1, 'c': 2}]}", 1);
    expect_positional("{'_id': 1, 'a': [{}, {}]}", "{'$set': {'a.$.c': 1, 'a.1.b': 2}}", "1",
                      "{'_id': 1, 'a': [{}, {'b': 2, 'c': 1}]}", 1);
    /* ... and the positional update takes the matched name's place in field order. */
    expect_positional("{'_id': 1, 'o': {}}", "{'$set': {'o.3': 'c', 'o.$': 'b', 'o.1': 'a'}}",
                      "2", "{'_id': 1, 'o': {'1': 'a', '2': 'b', '3': 'c'}}", 1);
    expect_positional("{'_id': 1, 'o': {}}", "{'$set': {'o.10': 'c', 'o.$': 'b'}}", "9",
                      "{'_id': 1, 'o': {'9': 'b', '10': 'c'}}", 1);

    expect_positional_error("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.$': 5}}", NULL, false, 2,
                            "The positional operator did not find the match needed from the "
                            "query.");
    /* An upsert's insert never has a matched index. */
    expect_positional_error("{'a': 1}", "{'$set': {'a.$': 5}}", NULL, true, 2,
                            "The positional operator did not find the match needed from the "
                            "query.");
    expect_positional_error("{'_id': 1, 'a': [{}, {}]}", "{'$set': {'a.$.b': 1, 'a.1.b': 2}}",
                            "1", false, 40, "Update created a conflict at 'a.1.b'");
    expect_positional_error("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.$': 1, 'a.1': 2}}", "1",
                            false, 40, "Update created a conflict at 'a.1'");
    /* No conflict when the query matched another element. */
    expect_positional("{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.$': 7, 'a.1': 8}}", "0",
                      "{'_id': 1, 'a': [7, 8]}", 1);
    expect_positional_error("{'_id': [1, 2]}", "{'$set': {'_id.$': 5}}", "0", false, 66,
                            "Performing an update on the path '_id.0' would modify the immutable "
                            "field '_id'");

    /* The change description names the element updated. */
    bson_t *document = support_json_single_quoted("{'_id': 1, 'grades': [80, 85, 90]}");
    bson_t *update = support_json_single_quoted("{'$set': {'grades.$': 86}}");
    bson_error_t error;
    bson_t out, description;
    update_spec_t *spec = update_compile(update, NULL, &error);
    update_apply_options_t options = {.matched_array_index = "1"};
    assert_true(
        update_apply_with_options(spec, document, &options, &out, &description, NULL, &error));
    assert_documents_equal(&description, "{'updatedFields': {'grades.1': 86}, "
                                         "'removedFields': [], 'truncatedArrays': []}");
    bson_destroy(&description);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);
    update = support_json_single_quoted("{'$set': {'grades.0': 1}}");
    spec = update_compile(update, NULL, &error);
    assert_false(update_uses_positional(spec));
    /* options may be NULL, and an unused matched index changes nothing. */
    assert_true(update_apply_with_options(spec, document, NULL, &out, NULL, NULL, &error));
    assert_documents_equal(&out, "{'_id': 1, 'grades': [1, 85, 90]}");
    bson_destroy(&out);
    assert_true(update_apply_with_options(spec, document, &options, &out, NULL, NULL, &error));
    assert_documents_equal(&out, "{'_id': 1, 'grades': [1, 85, 90]}");
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(update);
    bson_destroy(document);
}

/* ---- pipeline-style updates ----------------------------------------------------- */

/* Compiles stages_json, a JSON array of stages, as an update's `u`. */
static update_spec_t *compile_pipeline_update(const char *stages_json, const char *filters_json,
                                              bson_error_t *error)
{
    char *wrapped_json = bson_strdup_printf("{'u': %s}", stages_json);
    bson_t *wrapped = support_json_single_quoted(wrapped_json);
    bson_t *filters = filters_json ? support_json_single_quoted(filters_json) : NULL;
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, wrapped, "u"));
    update_spec_t *spec = update_compile_value(bson_iter_value(&iter), filters, error);
    bson_destroy(filters);
    bson_destroy(wrapped);
    bson_free(wrapped_json);
    return spec;
}

static void expect_pipeline(const char *document_json, const char *stages_json,
                            const char *expected_json, int changed)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_error_t error;
    bson_t out;
    bool out_changed = false;
    update_spec_t *spec = compile_pipeline_update(stages_json, NULL, &error);
    if (spec == NULL) {
        fail_msg("compile %s: %s", stages_json, error.message);
    }
    assert_true(update_is_pipeline(spec));
    if (!update_apply(spec, document, false, &out, NULL, &out_changed, &error)) {
        fail_msg("apply %s to %s: %s", stages_json, document_json, error.message);
    }
    assert_documents_equal(&out, expected_json);
    if (changed >= 0) {
        assert_int_equal(out_changed, changed);
    }
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
}

static void expect_pipeline_compile_error(const char *stages_json, const char *filters_json,
                                          int code, const char *message)
{
    bson_error_t error;
    update_spec_t *spec = compile_pipeline_update(stages_json, filters_json, &error);
    if (spec != NULL) {
        update_destroy(spec);
        fail_msg("compile %s succeeded, expected code %d", stages_json, code);
    }
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
}

static void expect_pipeline_apply_error(const char *document_json, const char *stages_json,
                                        bool upsert, int code, const char *message)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_error_t error;
    bson_t out, description;
    update_spec_t *spec = compile_pipeline_update(stages_json, NULL, &error);
    assert_non_null(spec);
    assert_false(update_apply(spec, document, upsert, &out, &description, NULL, &error));
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    assert_true(bson_empty(&out));
    assert_true(bson_empty(&description));
    bson_destroy(&description);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
}

static void test_pipeline(void **state)
{
    (void)state;
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}", "[{'$set': {'sum': {'$add': ['$a', '$b']}}}]",
                    "{'_id': 1, 'a': 2, 'b': 3, 'sum': 5}", 1);
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}",
                    "[{'$addFields': {'a': {'$multiply': ['$a', 10]}}}]",
                    "{'_id': 1, 'a': 20, 'b': 3}", 1);
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}", "[{'$unset': 'a'}]", "{'_id': 1, 'b': 3}", 1);
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}", "[{'$unset': ['a', 'b']}]", "{'_id': 1}", 1);
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}", "[{'$project': {'b': 1}}]",
                    "{'_id': 1, 'b': 3}", 1);
    /* A result without _id keeps the document's. */
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}", "[{'$project': {'_id': 0, 'a': 1}}]",
                    "{'_id': 1, 'a': 2}", 1);
    expect_pipeline("{'_id': 1, 'a': 2, 'b': 3}", "[{'$replaceWith': {'x': '$a'}}]",
                    "{'_id': 1, 'x': 2}", 1);
    expect_pipeline("{'_id': 1, 'a': {'x': 1, 'y': 2}}", "[{'$replaceRoot': {'newRoot': '$a'}}]",
                    "{'_id': 1, 'x': 1, 'y': 2}", 1);
    /* Replacing _id by an equal value (1.0 == 1) is allowed. */
    expect_pipeline("{'_id': 1, 'a': 2}", "[{'$replaceWith': {'_id': 1.0, 'b': 1}}]",
                    "{'_id': 1.0, 'b': 1}", 1);
    expect_pipeline("{'_id': 1, 'a': 2}", "[{'$set': {'copy': '$$ROOT'}}]",
                    "{'_id': 1, 'a': 2, 'copy': {'_id': 1, 'a': 2}}", 1);
    expect_pipeline("{'_id': 1, 'a': 2}", "[{'$set': {'c': 1}}, {'$unset': 'a'}, "
                                          "{'$set': {'d': {'$add': ['$c', 1]}}}]",
                    "{'_id': 1, 'c': 1, 'd': 2}", 1);
    /* Nothing changed: not modified. */
    expect_pipeline("{'_id': 1, 'a': 2}", "[{'$set': {'a': 2}}]", "{'_id': 1, 'a': 2}", 0);
    expect_pipeline("{'_id': 1, 'a': 2}", "[]", "{'_id': 1, 'a': 2}", 0);
    /* A different type is a change even when the values compare equal. */
    expect_pipeline("{'_id': 1, 'a': 2}", "[{'$set': {'a': 2.0}}]", "{'_id': 1, 'a': 2.0}", 1);

    /* $$NOW is a date. */
    bson_t *document = support_json_single_quoted("{'_id': 1}");
    bson_error_t error;
    bson_t out;
    bson_iter_t iter;
    update_spec_t *spec = compile_pipeline_update("[{'$set': {'t': '$$NOW'}}]", NULL, &error);
    assert_non_null(spec);
    assert_true(update_apply(spec, document, false, &out, NULL, NULL, &error));
    assert_true(bson_iter_init_find(&iter, &out, "t"));
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_DATE_TIME);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);

    /* An upsert runs the pipeline on the query's equalities; the _id is generated first. */
    bson_t *filter = support_json_single_quoted("{'k': 'new', 'n': {'$gt': 1}}");
    spec = compile_pipeline_update("[{'$set': {'v': {'$concat': ['$k', '!']}}}]", NULL, &error);
    bson_t seed;
    assert_true(update_build_upsert_seed(spec, filter, &seed, &error));
    assert_documents_equal(&seed, "{'k': 'new'}");
    assert_true(update_apply(spec, &seed, true, &out, NULL, NULL, &error));
    assert_true(bson_iter_init(&iter, &out) && bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "_id");
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_OID);
    assert_true(bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "k");
    assert_true(bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "v");
    assert_string_equal(bson_iter_utf8(&iter, NULL), "new!");
    bson_destroy(&out);
    bson_destroy(&seed);
    update_destroy(spec);
    bson_destroy(filter);
    expect_pipeline_apply_error("{'_id': 5}", "[{'$set': {'_id': 6}}]", true, 66, NULL);

    expect_pipeline_apply_error("{'_id': 1, 'a': 2}", "[{'$set': {'_id': 2}}]", false, 66,
                                "After applying the update, the (immutable) field '_id' was "
                                "found to have been altered to _id: 2");
    expect_pipeline_apply_error("{'_id': 1, 'a': 2}", "[{'$replaceWith': '$a'}]", false, 40228,
                                NULL);
    expect_pipeline_apply_error("{'_id': 1, 'a': 2}", "[{'$set': {'d': {'$divide': [1, 0]}}}]",
                                false, 2, NULL);

    expect_pipeline_compile_error("[{'$match': {'a': 1}}]", NULL, 72,
                                  "$match is not allowed to be used within an update");
    expect_pipeline_compile_error("[{'$set': {'a': 1}}, {'$sort': {'a': 1}}]", NULL, 72,
                                  "$sort is not allowed to be used within an update");
    expect_pipeline_compile_error("[{'$lookup': {'from': 'x', 'as': 'y'}}]", NULL, 72,
                                  "$lookup is not allowed to be used within an update");
    /* The whole pipeline is parsed before the stages are checked. */
    expect_pipeline_compile_error("[{'$sort': {'a': 1}}, {'$replaceRoot': {}}]", NULL, 40414,
                                  NULL);
    expect_pipeline_compile_error("[{'$frob': 1}]", NULL, 40324,
                                  "Unrecognized pipeline stage name: '$frob'");
    expect_pipeline_compile_error("[1]", NULL, 14, NULL);
    expect_pipeline_compile_error("[{'$set': {'a': 1}, '$unset': 'b'}]", NULL, 40323, NULL);
    expect_pipeline_compile_error("[{'$set': {'a': 1}}]", "[{'i': 1}]", 9,
                                  "arrayFilters may not be specified for pipeline-style updates");
    spec = compile_pipeline_update("[{'$set': {'a': 1}}]", "[]", &error);
    assert_non_null(spec);
    update_destroy(spec);
}

static void test_pipeline_description(void **state)
{
    (void)state;
    bson_t *document = support_json_single_quoted("{'_id': 1, 'a': {'x': 1, 'y': 2}, 'b': [1, 2], 'c': 3, 'd': 4}");
    bson_error_t error;
    bson_t out, description;
    update_spec_t *spec = compile_pipeline_update(
        "[{'$set': {'a.x': 5, 'b': [1], 'e': {'f': 1}}}, {'$unset': ['c', 'a.y']}]", NULL,
        &error);
    assert_non_null(spec);
    assert_true(update_apply(spec, document, false, &out, &description, NULL, &error));
    assert_documents_equal(&out, "{'_id': 1, 'a': {'x': 5}, 'b': [1], 'd': 4, 'e': {'f': 1}}");
    assert_documents_equal(&description,
                           "{'updatedFields': {'a.x': 5, 'e': {'f': 1}}, "
                           "'removedFields': ['a.y', 'c'], 'truncatedArrays': [{'field': 'b', 'newSize': 1}]}");
    bson_destroy(&description);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
}

/* Arrays as mongod's oplog diff describes them (doc_diff.cpp computeArrDiff). */
static void expect_pipeline_description(const char *document_json, const char *stages_json,
                                        const char *expected_json)
{
    bson_t *document = support_json_single_quoted(document_json);
    bson_error_t error;
    bson_t out, description;
    update_spec_t *spec = compile_pipeline_update(stages_json, NULL, &error);
    assert_non_null(spec);
    assert_true(update_apply(spec, document, false, &out, &description, NULL, &error));
    assert_documents_equal(&description, expected_json);
    bson_destroy(&description);
    bson_destroy(&out);
    update_destroy(spec);
    bson_destroy(document);
}

static void test_pipeline_array_description(void **state)
{
    (void)state;
    /* The change-streams specification's "Test array truncation": the kept prefix is left out. */
    expect_pipeline_description("{'_id': 1, 'a': 1, 'array': ['foo', {'a': 'bar'}, 1, 2, 3]}",
                                "[{'$set': {'array': ['foo', {'a': 'bar'}]}}]",
                                "{'updatedFields': {}, 'removedFields': [], "
                                "'truncatedArrays': [{'field': 'array', 'newSize': 2}]}");
    /* Appended elements and a changed element by index; a changed sub-document inside. */
    expect_pipeline_description("{'_id': 1, 'list': ['aaaaaaaaaa', 'bbbbbbbbbb', {'x': 1, 'y': 'cccccccccc'}]}",
                                "[{'$set': {'list': ['aaaaaaaaaa', 'zz', {'x': 2, 'y': 'cccccccccc'}, 'dd']}}]",
                                "{'updatedFields': {'list.1': 'zz', 'list.2.x': 2, 'list.3': 'dd'}, "
                                "'removedFields': [], 'truncatedArrays': []}");
    /* A change and a truncation together, and in a nested array. */
    expect_pipeline_description("{'_id': 1, 'm': {'n': ['aaaaaaaaaa', 'bbbbbbbbbb', 'c', 'd']}}",
                                "[{'$set': {'m.n': ['aaaaaaaaaa', 'e']}}]",
                                "{'updatedFields': {'m.n.1': 'e'}, 'removedFields': [], "
                                "'truncatedArrays': [{'field': 'm.n', 'newSize': 2}]}");
    /* Every element changed: the diff would be larger than the array, which is given whole. */
    expect_pipeline_description("{'_id': 1, 'a': [1, 2, 3]}", "[{'$set': {'a': [4, 5, 6]}}]",
                                "{'updatedFields': {'a': [4, 5, 6]}, 'removedFields': [], 'truncatedArrays': []}");
    /* An array that becomes something else is given whole. */
    expect_pipeline_description("{'_id': 1, 'a': [1, 2, 3]}", "[{'$set': {'a': 'x'}}]",
                                "{'updatedFields': {'a': 'x'}, 'removedFields': [], 'truncatedArrays': []}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_set_no_op_and_type_change),
        cmocka_unit_test(test_set_errors),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_pipeline_and_value_forms),
        cmocka_unit_test(test_unset),
        cmocka_unit_test(test_inc_mul),
        cmocka_unit_test(test_bit),
        cmocka_unit_test(test_min_max),
        cmocka_unit_test(test_rename),
        cmocka_unit_test(test_push),
        cmocka_unit_test(test_add_to_set),
        cmocka_unit_test(test_pull),
        cmocka_unit_test(test_pop),
        cmocka_unit_test(test_current_date),
        cmocka_unit_test(test_set_on_insert),
        cmocka_unit_test(test_array_filters),
        cmocka_unit_test(test_replacement),
        cmocka_unit_test(test_upsert_seed),
        cmocka_unit_test(test_upsert_apply),
        cmocka_unit_test(test_description),
        cmocka_unit_test(test_positional),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_pipeline_description),
        cmocka_unit_test(test_pipeline_array_description),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
