/* Unit tests of the aggregation expression language (src/query/expression*.c): each case
 * is an expression and a document in JSON and the expected result in JSON, compared
 * byte for byte so that result types (int vs long vs double) are checked too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support.h"

#include "query/expression.h"

static void first_value(const bson_t *wrapper, bson_value_t *out_value)
{
    bson_iter_t iter;
    assert_true(bson_iter_init(&iter, wrapper) && bson_iter_next(&iter));
    bson_value_copy(bson_iter_value(&iter), out_value);
}

/* Compiles and evaluates expression_json against document_json. True on success with
 * out_value set; false with error filled by compile or evaluate. */
static bool run(const char *expression_json, const char *document_json, bson_value_t *out_value,
                bson_error_t *error)
{
    bson_t *wrapper = support_json_wrapped(expression_json);
    bson_t *document = support_json_as_written(document_json);
    bson_value_t spec;
    first_value(wrapper, &spec);
    expression_context_t context = {.now_milliseconds = 1600000000000};
    bool ok = false;
    expression_t *expression = expression_compile(&spec, error);
    if (expression != NULL) {
        ok = expression_evaluate(expression, document, &context, out_value, error);
    }
    expression_destroy(expression);
    bson_value_destroy(&spec);
    bson_destroy(wrapper);
    bson_destroy(document);
    return ok;
}

/* expected_json NULL means the result must be missing. */
static void check(const char *expression_json, const char *document_json, const char *expected_json)
{
    bson_value_t result;
    bson_error_t error;
    if (!run(expression_json, document_json, &result, &error)) {
        fail_msg("%s on %s failed: %s (%u)", expression_json, document_json, error.message,
                 error.code);
    }
    bson_t actual = BSON_INITIALIZER;
    if (result.value_type != BSON_TYPE_EOD) {
        bson_append_value(&actual, "v", 1, &result);
    }
    bson_t *expected = expected_json == NULL ? bson_new() : support_json_wrapped(expected_json);
    if (!bson_equal(&actual, expected)) {
        char *actual_text = bson_as_canonical_extended_json(&actual, NULL);
        char *expected_text = bson_as_canonical_extended_json(expected, NULL);
        fail_msg("%s on %s: got %s, expected %s", expression_json, document_json, actual_text,
                 expected_text);
    }
    bson_destroy(expected);
    bson_destroy(&actual);
    bson_value_destroy(&result);
}

/* The expression must fail with code; message, when given, must match exactly. */
static void check_error(const char *expression_json, const char *document_json, uint32_t code,
                        const char *message)
{
    bson_value_t result;
    bson_error_t error;
    if (run(expression_json, document_json, &result, &error)) {
        bson_value_destroy(&result);
        fail_msg("%s on %s succeeded, expected error %u", expression_json, document_json, code);
    }
    if (error.code != code || (message != NULL && strcmp(error.message, message) != 0)) {
        fail_msg("%s: got error %u '%s', expected %u '%s'", expression_json, error.code,
                 error.message, code, message == NULL ? "" : message);
    }
}

static void test_field_paths(void **state)
{
    (void)state;
    check("\"$a.b\"", "{\"a\": {\"b\": 1}}", "1");
    check("\"$a\"", "{\"b\": 1}", NULL);
    check("\"$a.b\"", "{\"a\": 5}", NULL);
    /* Arrays of sub-documents map to arrays; scalars, nested arrays and missing drop out. */
    check("\"$a.b\"", "{\"a\": [{\"b\": 1}, {\"c\": 2}, 3, [{\"b\": 9}], {\"b\": [4]}]}",
          "[1, [4]]");
    check("\"$a.b.c\"", "{\"a\": [{\"b\": [{\"c\": 1}, {\"c\": 2}]}, {\"b\": {\"c\": 3}}]}",
          "[[1, 2], 3]");
    check("\"$a\"", "{\"a\": null}", "null");
    check("\"$$ROOT\"", "{\"a\": 1}", "{\"a\": 1}");
    check("\"$$CURRENT.a\"", "{\"a\": 1}", "1");
    check("\"$$ROOT.a.b\"", "{\"a\": {\"b\": \"x\"}}", "\"x\"");
    check("\"$$REMOVE\"", "{\"a\": 1}", NULL);
    check("\"$$NOW\"", "{}", "{\"$date\": {\"$numberLong\": \"1600000000000\"}}");
    check_error("\"$$foo\"", "{}", 17276, "Use of undefined variable: foo");
    check_error("\"$$1a\"", "{}", 16870, NULL);
    check_error("\"$\"", "{}", 16872, "'$' by itself is not a valid FieldPath");
    check_error("\"$a..b\"", "{}", 15998, "FieldPath field names may not be empty strings.");
    check_error("\"$a.$b\"", "{}", 16410, NULL);
}

static void test_literals_objects_arrays(void **state)
{
    (void)state;
    check("5", "{}", "5");
    check("\"text\"", "{}", "\"text\"");
    check("{\"$literal\": \"$a\"}", "{\"a\": 1}", "\"$a\"");
    check("{\"$literal\": {\"$add\": [1, 2]}}", "{}", "{\"$add\": [1, 2]}");
    check("{\"x\": \"$a\", \"y\": \"$missing\", \"z\": {\"w\": 1}}", "{\"a\": 1}",
          "{\"x\": 1, \"z\": {\"w\": 1}}");
    check("[\"$a\", \"$missing\", 3]", "{\"a\": 1}", "[1, null, 3]");
    check("{}", "{}", "{}");
    check_error("{\"$foo\": 1}", "{}", 168, "Unrecognized expression '$foo'");
    check_error("{\"$add\": [1], \"b\": 1}", "{}", 15983, NULL);
    check_error("{\"a.b\": 1}", "{}", 16412, NULL);
    check_error("{\"a\": {\"$b\": 1, \"c\": 2}}", "{}", 15983, NULL);
    check_error("{\"$abs\": [1, 2]}", "{}", 16020,
                "Expression $abs takes exactly 1 arguments. 2 were passed in.");
    check_error(
        "{\"$round\": [1, 2, 3]}", "{}", 28667,
        "Expression $round takes at least 1 arguments, and at most 2, but 3 were passed in.");
}

static void test_add(void **state)
{
    (void)state;
    check("{\"$add\": [1, 2]}", "{}", "3");
    check("{\"$add\": []}", "{}", "0");
    check("{\"$add\": [2147483647, 1]}", "{}", "{\"$numberLong\": \"2147483648\"}");
    check("{\"$add\": [1, {\"$numberLong\": \"2\"}]}", "{}", "{\"$numberLong\": \"3\"}");
    check("{\"$add\": [1, 2.5]}", "{}", "3.5");
    check("{\"$add\": [{\"$numberLong\": \"9223372036854775807\"}, 1]}", "{}",
          "9.2233720368547758e18");
    check("{\"$add\": [\"$d\", 1000]}", "{\"d\": {\"$date\": \"2020-01-01T00:00:00Z\"}}",
          "{\"$date\": \"2020-01-01T00:00:01Z\"}");
    check("{\"$add\": [1.5, \"$d\"]}", "{\"d\": {\"$date\": {\"$numberLong\": \"1000\"}}}",
          "{\"$date\": {\"$numberLong\": \"1002\"}}");
    check("{\"$add\": [1, null]}", "{}", "null");
    check("{\"$add\": [1, \"$missing\"]}", "{}", "null");
    check("{\"$add\": [null, \"a\"]}", "{}", "null");
    check_error("{\"$add\": [\"a\", 1]}", "{}", 16554,
                "$add only supports numeric or date types, not string");
    check_error("{\"$add\": [\"$d\", \"$d\"]}", "{\"d\": {\"$date\": \"2020-01-01T00:00:00Z\"}}",
                16612, "only one date allowed in an $add expression");
}

static void test_subtract_multiply_divide_mod(void **state)
{
    (void)state;
    check("{\"$subtract\": [5, 3]}", "{}", "2");
    check("{\"$subtract\": [-2147483648, 1]}", "{}", "{\"$numberLong\": \"-2147483649\"}");
    check("{\"$subtract\": [5, 0.5]}", "{}", "4.5");
    check("{\"$subtract\": [\"$a\", \"$b\"]}",
          "{\"a\": {\"$date\": \"2020-01-01T00:00:01Z\"}, \"b\": {\"$date\": "
          "\"2020-01-01T00:00:00Z\"}}",
          "{\"$numberLong\": \"1000\"}");
    check("{\"$subtract\": [\"$a\", 1000]}", "{\"a\": {\"$date\": \"2020-01-01T00:00:01Z\"}}",
          "{\"$date\": \"2020-01-01T00:00:00Z\"}");
    check("{\"$subtract\": [\"$a\", null]}", "{\"a\": {\"$date\": \"2020-01-01T00:00:01Z\"}}",
          "null");
    check_error("{\"$subtract\": [1, \"$a\"]}", "{\"a\": {\"$date\": \"2020-01-01T00:00:01Z\"}}",
                16556, "cant $subtract adate from a int");
    check_error("{\"$subtract\": [\"$a\", \"x\"]}",
                "{\"a\": {\"$date\": \"2020-01-01T00:00:01Z\"}}", 16613,
                "cant $subtract a string from a Date");

    check("{\"$multiply\": [2, 3]}", "{}", "6");
    check("{\"$multiply\": [65536, 65536]}", "{}", "{\"$numberLong\": \"4294967296\"}");
    check("{\"$multiply\": [2, 2.5]}", "{}", "5.0");
    check("{\"$multiply\": []}", "{}", "1");
    check("{\"$multiply\": [2, \"$missing\"]}", "{}", "null");
    check_error("{\"$multiply\": [2, \"a\"]}", "{}", 16555,
                "$multiply only supports numeric types, not string");

    check("{\"$divide\": [7, 2]}", "{}", "3.5");
    check("{\"$divide\": [6, 3]}", "{}", "2.0");
    check("{\"$divide\": [null, 0]}", "{}", "null");
    check_error("{\"$divide\": [1, 0]}", "{}", 2, "can't $divide by zero");
    check_error("{\"$divide\": [1, 0.0]}", "{}", 2, "can't $divide by zero");
    check_error("{\"$divide\": [\"a\", 1]}", "{}", 16609,
                "$divide only supports numeric types, not string and int");
    check_error("{\"$divide\": [1]}", "{}", 16020, NULL);

    check("{\"$mod\": [7, 3]}", "{}", "1");
    check("{\"$mod\": [-7, 3]}", "{}", "-1");
    check("{\"$mod\": [7, {\"$numberLong\": \"3\"}]}", "{}", "{\"$numberLong\": \"1\"}");
    check("{\"$mod\": [7.5, 2]}", "{}", "1.5");
    check("{\"$mod\": [7, 2.0]}", "{}", "1");
    check("{\"$mod\": [7, 2.5]}", "{}", "2.0");
    check("{\"$mod\": [-2147483648, -1]}", "{}", "0");
    check_error("{\"$mod\": [7, 0]}", "{}", 16610, "can't $mod by zero");
    check_error("{\"$mod\": [\"a\", 2]}", "{}", 16611,
                "$mod only supports numeric types, not string and int");
}

static void test_unary_numeric(void **state)
{
    (void)state;
    check("{\"$abs\": -5}", "{}", "5");
    check("{\"$abs\": -2147483648}", "{}", "{\"$numberLong\": \"2147483648\"}");
    check("{\"$abs\": -2.5}", "{}", "2.5");
    check("{\"$abs\": \"$missing\"}", "{}", "null");
    check_error("{\"$abs\": {\"$numberLong\": \"-9223372036854775808\"}}", "{}", 28680,
                "can't take $abs of long long min");
    check_error("{\"$abs\": \"x\"}", "{}", 28765, "$abs only supports numeric types, not string");
    check("{\"$ceil\": 1.2}", "{}", "2.0");
    check("{\"$floor\": -1.2}", "{}", "-2.0");
    check("{\"$floor\": 3}", "{}", "3");
    check_error("{\"$ceil\": true}", "{}", 28765, "$ceil only supports numeric types, not bool");

    /* Half to even, at the given decimal place; integers keep their type. */
    check("{\"$round\": [10.5, 0]}", "{}", "10.0");
    check("{\"$round\": [11.5, 0]}", "{}", "12.0");
    check("{\"$round\": 2.5}", "{}", "2.0");
    check("{\"$round\": [-2.5, 0]}", "{}", "-2.0");
    check("{\"$round\": [2.675, 2]}", "{}", "2.68");
    check("{\"$round\": [1.2345, 3]}", "{}", "1.234");
    check("{\"$round\": [1234.5678, -2]}", "{}", "1200.0");
    check("{\"$round\": [1234, -2]}", "{}", "1200");
    check("{\"$round\": [1250, -2]}", "{}", "1200");
    check("{\"$round\": [1350, -2]}", "{}", "1400");
    check("{\"$round\": [-1351, -2]}", "{}", "-1400");
    check("{\"$round\": [5, 2]}", "{}", "5");
    check("{\"$round\": [0.4, 0]}", "{}", "0.0");
    check("{\"$round\": [null, 2]}", "{}", "null");
    check("{\"$trunc\": [1.99, 1]}", "{}", "1.9");
    check("{\"$trunc\": [-1999, -3]}", "{}", "-1000");
    check_error("{\"$round\": [\"x\", 1]}", "{}", 51081, NULL);
    check_error("{\"$round\": [1.5, 1.5]}", "{}", 51082, NULL);
    check_error("{\"$round\": [1.5, 101]}", "{}", 51083, NULL);
}

static void test_comparisons_and_booleans(void **state)
{
    (void)state;
    check("{\"$eq\": [1, 1.0]}", "{}", "true");
    check("{\"$eq\": [1, {\"$numberLong\": \"1\"}]}", "{}", "true");
    /* Missing is not null in aggregation: it sorts below it. */
    check("{\"$eq\": [\"$missing\", null]}", "{}", "false");
    check("{\"$lt\": [\"$missing\", null]}", "{}", "true");
    check("{\"$eq\": [\"$missing\", \"$alsoMissing\"]}", "{}", "true");
    check("{\"$gt\": [\"a\", 5]}", "{}", "true");
    check("{\"$gt\": [{\"a\": 1}, \"z\"]}", "{}", "true");
    check("{\"$gte\": [2, 2]}", "{}", "true");
    check("{\"$lte\": [3, 2]}", "{}", "false");
    check("{\"$ne\": [\"a\", \"b\"]}", "{}", "true");
    check("{\"$cmp\": [\"a\", \"b\"]}", "{}", "-1");
    check("{\"$cmp\": [2, 1]}", "{}", "1");
    check("{\"$cmp\": [[1, 2], [1, 2]]}", "{}", "0");
    check_error("{\"$eq\": [1]}", "{}", 16020, NULL);

    check("{\"$and\": [1, \"a\", []]}", "{}", "true");
    check("{\"$and\": [1, 0]}", "{}", "false");
    check("{\"$and\": []}", "{}", "true");
    check("{\"$or\": []}", "{}", "false");
    check("{\"$or\": [null, \"$missing\", 0.0]}", "{}", "false");
    check("{\"$or\": [null, -1]}", "{}", "true");
    check("{\"$not\": [null]}", "{}", "true");
    check("{\"$not\": [[]]}", "{}", "false");
    check("{\"$not\": \"$missing\"}", "{}", "true");
}

static void test_conditionals(void **state)
{
    (void)state;
    check("{\"$cond\": [true, 1, 2]}", "{}", "1");
    check("{\"$cond\": [\"$missing\", 1, 2]}", "{}", "2");
    check("{\"$cond\": {\"if\": {\"$gt\": [\"$a\", 1]}, \"then\": \"big\", \"else\": \"small\"}}",
          "{\"a\": 5}", "\"big\"");
    check("{\"$cond\": {\"else\": 1, \"if\": 0, \"then\": 2}}", "{}", "1");
    check_error("{\"$cond\": {\"then\": 1, \"else\": 2}}", "{}", 17080,
                "Missing 'if' parameter to $cond");
    check_error("{\"$cond\": {\"if\": 1, \"else\": 2}}", "{}", 17081, NULL);
    check_error("{\"$cond\": {\"if\": 1, \"then\": 2}}", "{}", 17082, NULL);
    check_error("{\"$cond\": {\"if\": 1, \"then\": 2, \"else\": 3, \"x\": 4}}", "{}", 17083,
                "Unrecognized parameter to $cond: x");
    check_error("{\"$cond\": [1, 2]}", "{}", 16020,
                "Expression $cond takes exactly 3 arguments. 2 were passed in.");

    check("{\"$ifNull\": [\"$a\", \"default\"]}", "{}", "\"default\"");
    check("{\"$ifNull\": [\"$a\", \"default\"]}", "{\"a\": 0}", "0");
    check("{\"$ifNull\": [null, \"$missing\", 5]}", "{}", "5");
    check("{\"$ifNull\": [null, \"$missing\"]}", "{}", NULL);
    check_error("{\"$ifNull\": [1]}", "{}", 1257300,
                "$ifNull needs at least two arguments, had: 1");

    const char *grade =
        "{\"$switch\": {\"branches\": [{\"case\": {\"$gte\": [\"$s\", 90]}, \"then\": \"A\"},"
        " {\"case\": {\"$gte\": [\"$s\", 80]}, \"then\": \"B\"}], \"default\": \"F\"}}";
    check(grade, "{\"s\": 95}", "\"A\"");
    check(grade, "{\"s\": 85}", "\"B\"");
    check(grade, "{\"s\": 10}", "\"F\"");
    check_error("{\"$switch\": {\"branches\": [{\"case\": false, \"then\": 1}]}}", "{}", 40066,
                "$switch could not find a matching branch for an input, and no default was "
                "specified.");
    check_error("{\"$switch\": {\"branches\": []}}", "{}", 40068, NULL);
    check_error("{\"$switch\": {\"branches\": {}}}", "{}", 40061, NULL);
    check_error("{\"$switch\": {\"branches\": [1]}}", "{}", 40062, NULL);
    check_error("{\"$switch\": {\"branches\": [{\"case\": 1}]}}", "{}", 40065, NULL);
    check_error("{\"$switch\": {\"branches\": [{\"then\": 1}]}}", "{}", 40064, NULL);
    check_error("{\"$switch\": {\"branches\": [{\"case\": 1, \"then\": 1}], \"other\": 1}}", "{}",
                40067, NULL);
    check_error("{\"$switch\": [1]}", "{}", 40060, NULL);
}

static void test_strings(void **state)
{
    (void)state;
    check("{\"$concat\": [\"a\", \"$b\", \"c\"]}", "{\"b\": \"-\"}", "\"a-c\"");
    check("{\"$concat\": []}", "{}", "\"\"");
    check("{\"$concat\": [\"a\", \"$missing\"]}", "{}", "null");
    check_error("{\"$concat\": [\"a\", 1]}", "{}", 16702, "$concat only supports strings, not int");
    check("{\"$toLower\": \"AbC\\u00c9\"}", "{}", "\"abc\\u00c9\"");
    check("{\"$toUpper\": \"abc\"}", "{}", "\"ABC\"");
    check("{\"$toUpper\": 1.5}", "{}", "\"1.5\"");
    check("{\"$toLower\": 1.23456789}", "{}", "\"1.23457\"");
    check("{\"$toLower\": \"$missing\"}", "{}", "\"\"");
    check("{\"$toUpper\": {\"$numberLong\": \"12\"}}", "{}", "\"12\"");
    check_error("{\"$toUpper\": [[1]]}", "{}", 16007,
                "can't convert from BSON type array to String");
    check("{\"$substrCP\": [\"h\\u00e9llo\", 1, 3]}", "{}", "\"\\u00e9ll\"");
    check("{\"$substrCP\": [\"abc\", 5, 1]}", "{}", "\"\"");
    check("{\"$substrCP\": [\"abc\", 1, 100]}", "{}", "\"bc\"");
    check("{\"$substrCP\": [null, 0, 1]}", "{}", "\"\"");
    check_error("{\"$substrCP\": [\"abc\", -1, 1]}", "{}", 34455, NULL);
    check_error("{\"$substrCP\": [\"abc\", 0, -1]}", "{}", 34454, NULL);
    check_error("{\"$substrCP\": [\"abc\", \"1\", 1]}", "{}", 34450,
                "$substrCP: starting index must be a numeric type (is BSON type string)");
    check_error("{\"$substrCP\": [\"abc\", 0.5, 1]}", "{}", 34451, NULL);
    check_error("{\"$substrCP\": [\"abc\", 0, \"x\"]}", "{}", 34452, NULL);
    check("{\"$strLenCP\": \"h\\u00e9llo\"}", "{}", "5");
    check("{\"$strLenCP\": \"\"}", "{}", "0");
    check_error("{\"$strLenCP\": \"$missing\"}", "{}", 34471,
                "$strLenCP requires a string argument, found: missing");
}

static void test_fields_by_name(void **state)
{
    (void)state;
    check("{\"$getField\": \"a.b\"}", "{\"a.b\": 1, \"a\": {\"b\": 2}}", "1");
    check("{\"$getField\": {\"field\": {\"$literal\": \"$x\"}, \"input\": {\"$literal\": {\"$x\": 3}}}}", "{}",
          "3");
    check("{\"$getField\": {\"field\": \"z\", \"input\": \"$a\"}}", "{\"a\": {\"b\": 2}}", NULL);
    check("{\"$getField\": {\"field\": \"z\", \"input\": \"$missing\"}}", "{}", "null");
    check_error("{\"$getField\": \"$a\"}", "{}", 5654602, NULL);
    check_error("{\"$getField\": 5}", "{}", 5654601, NULL);
    check_error("{\"$getField\": {\"input\": {}}}", "{}", 3041702, "$getField requires 'field' to be specified");
    check_error("{\"$getField\": {\"field\": \"a\", \"extra\": 1}}", "{}", 3041701,
                "$getField found an unknown argument: extra");
    check_error("{\"$getField\": {\"field\": \"a\", \"input\": 1}}", "{}", 3041705, NULL);
    /* $setField keeps a field's place, appends a new one and removes on $$REMOVE. */
    check("{\"$setField\": {\"field\": \"a\", \"input\": \"$$ROOT\", \"value\": 9}}", "{\"a\": 1, \"b\": 2}",
          "{\"a\": 9, \"b\": 2}");
    check("{\"$setField\": {\"field\": \"c.d\", \"input\": \"$$ROOT\", \"value\": 9}}", "{\"a\": 1}",
          "{\"a\": 1, \"c.d\": 9}");
    check("{\"$setField\": {\"field\": \"a\", \"input\": \"$$ROOT\", \"value\": \"$$REMOVE\"}}",
          "{\"a\": 1, \"b\": 2}", "{\"b\": 2}");
    check("{\"$setField\": {\"field\": \"a\", \"input\": null, \"value\": 1}}", "{}", "null");
    check_error("{\"$setField\": {\"field\": \"a\", \"input\": {}}}", "{}", 4161104,
                "$setField requires 'value' to be specified");
    check_error("{\"$setField\": {\"field\": \"a\", \"value\": 1}}", "{}", 4161105, NULL);
    check_error("{\"$setField\": 1}", "{}", 4161101, NULL);
    /* A field that is not UTF-8 would make a name no reader can walk. */
    bson_t wrapper = BSON_INITIALIZER, set_field, arguments;
    BSON_APPEND_DOCUMENT_BEGIN(&wrapper, "v", &set_field);
    BSON_APPEND_DOCUMENT_BEGIN(&set_field, "$setField", &arguments);
    bson_append_utf8(&arguments, "field", -1, "a\xff", 2);
    BSON_APPEND_UTF8(&arguments, "input", "$$ROOT");
    BSON_APPEND_INT32(&arguments, "value", 1);
    bson_append_document_end(&set_field, &arguments);
    bson_append_document_end(&wrapper, &set_field);
    bson_value_t spec;
    first_value(&wrapper, &spec);
    bson_error_t error;
    assert_null(expression_compile(&spec, &error));
    assert_int_equal(error.code, 4161107);
    bson_value_destroy(&spec);
    bson_destroy(&wrapper);
    check_error("{\"$setField\": {\"field\": \"a\", \"input\": 2, \"value\": 1}}", "{}", 4161109, NULL);
}

/* A command's let: evaluated once, in order, into the variables the expressions read. */
static void test_let_variables(void **state)
{
    (void)state;
    bson_t *let = support_json_wrapped(
        "{\"limit\": 10, \"twice\": {\"$multiply\": [\"$$limit\", 2]}, \"gone\": \"$$REMOVE\"}");
    bson_value_t let_value, result;
    bson_t values;
    bson_error_t error;
    first_value(let, &let_value);
    expression_context_t context = {.now_milliseconds = 1600000000000};
    assert_true(expression_evaluate_let(&let_value, &context, &values, &error));
    assert_ptr_equal(context.variables, &values);
    bson_t *spec_wrapper = support_json_wrapped("[\"$$limit\", \"$$twice\", \"$$gone\", \"$$limit.x\"]");
    bson_value_t spec;
    first_value(spec_wrapper, &spec);
    assert_null(expression_compile(&spec, &error)); /* no let: undefined */
    assert_int_equal(error.code, 17276);
    expression_t *expression = expression_compile_with_variables(&spec, &values, &error);
    assert_non_null(expression);
    bson_t empty = BSON_INITIALIZER;
    assert_true(expression_evaluate(expression, &empty, &context, &result, &error));
    bson_t actual = BSON_INITIALIZER;
    bson_append_value(&actual, "v", 1, &result);
    bson_t *expected = support_json_wrapped("[10, 20, null, null]");
    assert_true(bson_equal(&actual, expected));
    bson_destroy(expected);
    bson_destroy(&actual);
    bson_value_destroy(&result);
    expression_destroy(expression);
    bson_value_destroy(&spec);
    bson_destroy(spec_wrapper);
    bson_destroy(&values);
    bson_value_destroy(&let_value);
    bson_destroy(let);

    const char *bad[][2] = {{"{\"Upper\": 1}", "16870"}, {"{\"a-b\": 1}", "16871"}, {"{\"\": 1}", "16869"},
                            {"5", "14"}, {"{\"x\": \"$$y\"}", "17276"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bson_t *wrapper = support_json_wrapped(bad[i][0]);
        first_value(wrapper, &let_value);
        expression_context_t scope = {.now_milliseconds = 0};
        if (expression_evaluate_let(&let_value, &scope, &values, &error)) {
            fail_msg("let %s was accepted", bad[i][0]);
        }
        if (error.code != (uint32_t)atoi(bad[i][1])) {
            fail_msg("let %s: got %u %s, expected %s", bad[i][0], error.code, error.message, bad[i][1]);
        }
        bson_destroy(&values);
        bson_value_destroy(&let_value);
        bson_destroy(wrapper);
    }
}

static void test_arrays(void **state)
{
    (void)state;
    check("{\"$size\": [[1, 2, 3]]}", "{}", "3");
    check("{\"$size\": \"$a\"}", "{\"a\": []}", "0");
    check_error("{\"$size\": \"$a\"}", "{}", 17124,
                "The argument to $size must be an array. Type of argument: missing");
    check("{\"$arrayElemAt\": [[1, 2, 3], 0]}", "{}", "1");
    check("{\"$arrayElemAt\": [[1, 2, 3], -1]}", "{}", "3");
    check("{\"$arrayElemAt\": [[1, 2, 3], 3]}", "{}", NULL);
    check("{\"$arrayElemAt\": [[1, 2, 3], -4]}", "{}", NULL);
    check("{\"$arrayElemAt\": [[1, 2, 3], {\"$numberLong\": \"1\"}]}", "{}", "2");
    check("{\"$arrayElemAt\": [\"$missing\", 1]}", "{}", "null");
    check_error("{\"$arrayElemAt\": [1, 1]}", "{}", 28689,
                "$arrayElemAt's first argument must be an array, but is int");
    check_error("{\"$arrayElemAt\": [[1], \"a\"]}", "{}", 28690, NULL);
    check_error("{\"$arrayElemAt\": [[1], 1.5]}", "{}", 28691, NULL);
    check("{\"$in\": [2, [1, 2.0]]}", "{}", "true");
    check("{\"$in\": [\"a\", []]}", "{}", "false");
    check("{\"$in\": [null, [\"$missing\"]]}", "{}", "true");
    check_error("{\"$in\": [1, \"$missing\"]}", "{}", 40081,
                "$in requires an array as a second argument, found: missing");
    check("{\"$isArray\": [[1]]}", "{}", "true");
    check("{\"$isArray\": \"$a\"}", "{\"a\": {\"b\": 1}}", "false");
}

/* Evaluates {$type: <operand_json>} and expects the type name. */
static void check_type(const char *operand_json, const char *document_json, const char *expected)
{
    bson_t *operand = support_json_wrapped(operand_json);
    bson_value_t operand_value;
    first_value(operand, &operand_value);
    bson_t spec_document = BSON_INITIALIZER;
    bson_append_value(&spec_document, "$type", 5, &operand_value);
    bson_value_t spec = {.value_type = BSON_TYPE_DOCUMENT};
    spec.value.v_doc.data = (uint8_t *)bson_get_data(&spec_document);
    spec.value.v_doc.data_len = spec_document.len;
    bson_t *document = support_json_as_written(document_json);
    bson_error_t error;
    expression_t *expression = expression_compile(&spec, &error);
    assert_non_null(expression);
    bson_value_t result;
    assert_true(expression_evaluate(expression, document, NULL, &result, &error));
    assert_int_equal(result.value_type, BSON_TYPE_UTF8);
    assert_string_equal(result.value.v_utf8.str, expected);
    bson_value_destroy(&result);
    expression_destroy(expression);
    bson_destroy(document);
    bson_destroy(&spec_document);
    bson_value_destroy(&operand_value);
    bson_destroy(operand);
}

static void test_types_and_conversions(void **state)
{
    (void)state;
    /* libbson's JSON reader takes {"$type": ...} for legacy binary, so these are built. */
    check_type("\"$missing\"", "{}", "missing");
    check_type("1", "{}", "int");
    check_type("{\"$numberLong\": \"1\"}", "{}", "long");
    check_type("1.5", "{}", "double");
    check_type("{\"$numberDecimal\": \"1\"}", "{}", "decimal");
    check_type("[[]]", "{}", "array");
    check_type("\"$a\"", "{\"a\": {\"b\": 1}}", "object");
    check_type("null", "{}", "null");
    check_type("true", "{}", "bool");
    check_type("{\"$oid\": \"5f0c2b2e9d1b2c3d4e5f6a7b\"}", "{}", "objectId");

    check("{\"$toString\": 1.5}", "{}", "\"1.5\"");
    check("{\"$toString\": 42}", "{}", "\"42\"");
    check("{\"$toString\": true}", "{}", "\"true\"");
    check("{\"$toString\": \"$d\"}", "{\"d\": {\"$date\": \"2018-03-27T16:58:51.538Z\"}}",
          "\"2018-03-27T16:58:51.538Z\"");
    check("{\"$toString\": {\"$oid\": \"5f0c2b2e9d1b2c3d4e5f6a7b\"}}", "{}",
          "\"5f0c2b2e9d1b2c3d4e5f6a7b\"");
    check("{\"$toString\": \"$missing\"}", "{}", "null");
    check_error("{\"$toString\": {\"$literal\": {\"a\": 1}}}", "{}", 241,
                "Unsupported conversion from object to string in $convert with no onError value");

    check("{\"$toInt\": \"12\"}", "{}", "12");
    check("{\"$toInt\": 3.9}", "{}", "3");
    check("{\"$toInt\": -3.9}", "{}", "-3");
    check("{\"$toInt\": true}", "{}", "1");
    check("{\"$toInt\": {\"$numberLong\": \"5\"}}", "{}", "5");
    check("{\"$toInt\": null}", "{}", "null");
    check_error("{\"$toInt\": \"1.5\"}", "{}", 241,
                "Failed to parse number '1.5' in $convert with no onError value: Did not consume "
                "whole string.");
    check_error("{\"$toInt\": 1e10}", "{}", 241, NULL);
    check_error("{\"$toInt\": {\"$numberLong\": \"2147483648\"}}", "{}", 241, NULL);
    check_error("{\"$toInt\": \"$d\"}", "{\"d\": {\"$date\": \"2020-01-01T00:00:00Z\"}}", 241,
                "Unsupported conversion from date to int in $convert with no onError value");
    check("{\"$toLong\": \"$d\"}", "{\"d\": {\"$date\": {\"$numberLong\": \"1234\"}}}",
          "{\"$numberLong\": \"1234\"}");
    check("{\"$toLong\": \"-42\"}", "{}", "{\"$numberLong\": \"-42\"}");
    check("{\"$toLong\": 1e10}", "{}", "{\"$numberLong\": \"10000000000\"}");
    check("{\"$toDouble\": \"2.5\"}", "{}", "2.5");
    check("{\"$toDouble\": false}", "{}", "0.0");
    check("{\"$toDouble\": 7}", "{}", "7.0");
    check_error("{\"$toDouble\": \"abc\"}", "{}", 241, NULL);
    check_error("{\"$toDouble\": [[1]]}", "{}", 241, NULL);
}

static void test_dates(void **state)
{
    (void)state;
    const char *document = "{\"d\": {\"$date\": \"2021-03-04T05:06:07.089Z\"}}";
    check("{\"$year\": \"$d\"}", document, "2021");
    check("{\"$month\": \"$d\"}", document, "3");
    check("{\"$dayOfMonth\": \"$d\"}", document, "4");
    check("{\"$hour\": \"$d\"}", document, "5");
    check("{\"$minute\": \"$d\"}", document, "6");
    check("{\"$second\": \"$d\"}", document, "7");
    check("{\"$millisecond\": \"$d\"}", document, "89");
    check("{\"$dayOfWeek\": \"$d\"}", document, "5"); /* a Thursday */
    check("{\"$dayOfYear\": \"$d\"}", document, "63");
    check("{\"$year\": [\"$d\"]}", document, "2021");
    check("{\"$hour\": {\"date\": \"$d\", \"timezone\": \"+01:30\"}}", document, "6");
    check("{\"$dayOfMonth\": {\"date\": \"$d\", \"timezone\": \"-06:00\"}}", document, "3");
    check("{\"$hour\": {\"date\": \"$d\", \"timezone\": \"UTC\"}}", document, "5");
    /* Before the epoch: floor, not truncation. */
    const char *before = "{\"d\": {\"$date\": {\"$numberLong\": \"-1\"}}}";
    check("{\"$year\": \"$d\"}", before, "1969");
    check("{\"$month\": \"$d\"}", before, "12");
    check("{\"$dayOfMonth\": \"$d\"}", before, "31");
    check("{\"$millisecond\": \"$d\"}", before, "999");
    check("{\"$dayOfYear\": {\"$date\": \"2020-12-31T00:00:00Z\"}}", "{}", "366");
    check("{\"$year\": {\"$timestamp\": {\"t\": 1600000000, \"i\": 1}}}", "{}", "2020");
    check("{\"$year\": \"$missing\"}", "{}", "null");
    check_error("{\"$year\": \"x\"}", "{}", 16006, "can't convert from BSON type string to Date");
    check_error("{\"$year\": {\"date\": \"$d\", \"timezone\": \"Mars/Base\"}}", document, 40485,
                NULL);
    check_error("{\"$year\": {\"date\": \"$d\", \"timezone\": 5}}", document, 40517, NULL);
    check_error("{\"$year\": {\"foo\": 1}}", "{}", 40535, NULL);
    check_error("{\"$year\": {\"timezone\": \"UTC\"}}", "{}", 40539, NULL);
    check_error("{\"$year\": [1, 2]}", "{}", 40536, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field_paths),   cmocka_unit_test(test_literals_objects_arrays),
        cmocka_unit_test(test_add),           cmocka_unit_test(test_subtract_multiply_divide_mod),
        cmocka_unit_test(test_unary_numeric), cmocka_unit_test(test_comparisons_and_booleans),
        cmocka_unit_test(test_conditionals),  cmocka_unit_test(test_strings),
        cmocka_unit_test(test_arrays),        cmocka_unit_test(test_types_and_conversions),
        cmocka_unit_test(test_dates),
        cmocka_unit_test(test_fields_by_name), cmocka_unit_test(test_let_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
