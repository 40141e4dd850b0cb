/* Unit tests for src/query/order.c (MongoDB's BSON comparison order) and
 * src/query/sort.c (sort specifications and the sort-by-array rules). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "query/order.h"
#include "query/sort.h"

/* ---- helpers ------------------------------------------------------------- */

/* Documents backing the values handed out by value_of(), freed after each test. */
static bson_t *value_pool[512];
static size_t value_pool_count;

static int release_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < value_pool_count; i++) {
        bson_destroy(value_pool[i]);
    }
    value_pool_count = 0;
    return 0;
}

static bson_value_t keep_first_value(bson_t *document)
{
    bson_iter_t iter;
    assert_true(value_pool_count < sizeof value_pool / sizeof *value_pool);
    value_pool[value_pool_count++] = document;
    assert_true(bson_iter_init(&iter, document) && bson_iter_next(&iter));
    return *bson_iter_value(&iter);
}

/* The value of canonical extended JSON text, e.g. value_of("{\"$numberLong\": \"5\"}"). */
static bson_value_t value_of(const char *json)
{
    char *wrapped = bson_strdup_printf("{\"v\": %s}", json);
    bson_error_t error;
    bson_t *document = bson_new_from_json((const uint8_t *)wrapped, -1, &error);
    if (document == NULL) {
        fail_msg("bad test JSON %s: %s", json, error.message);
    }
    bson_free(wrapped);
    return keep_first_value(document);
}

static bson_value_t string_of(const char *bytes, size_t length)
{
    bson_t *document = bson_new();
    bson_append_utf8(document, "v", 1, bytes, (int)length);
    return keep_first_value(document);
}

static bson_value_t double_of(double number)
{
    bson_t *document = bson_new();
    BSON_APPEND_DOUBLE(document, "v", number);
    return keep_first_value(document);
}

static bson_value_t long_of(int64_t number)
{
    bson_t *document = bson_new();
    BSON_APPEND_INT64(document, "v", number);
    return keep_first_value(document);
}

static bson_value_t decimal_of(const char *text)
{
    bson_decimal128_t decimal;
    bson_t *document = bson_new();
    assert_true(bson_decimal128_from_string(text, &decimal));
    BSON_APPEND_DECIMAL128(document, "v", &decimal);
    return keep_first_value(document);
}

static int sign(int value)
{
    return value < 0 ? -1 : value > 0 ? 1 : 0;
}

/* Checks compare(left, right) has the expected sign, and the mirrored call the
 * opposite one. */
#define assert_order(left, right, expected)                                             \
    do {                                                                                \
        bson_value_t order_left_ = (left);                                              \
        bson_value_t order_right_ = (right);                                            \
        assert_int_equal(sign(order_compare_values(&order_left_, &order_right_)), (expected)); \
        assert_int_equal(sign(order_compare_values(&order_right_, &order_left_)), -(expected)); \
    } while (0)

/* ---- type ranks ---------------------------------------------------------- */

static void test_canonical_ranks(void **state)
{
    (void)state;
    assert_true(order_canonical_type(BSON_TYPE_MINKEY) < order_canonical_type(BSON_TYPE_UNDEFINED));
    assert_true(order_canonical_type(BSON_TYPE_UNDEFINED) < order_canonical_type(BSON_TYPE_NULL));
    assert_int_equal(order_canonical_type(BSON_TYPE_INT32), order_canonical_type(BSON_TYPE_DOUBLE));
    assert_int_equal(order_canonical_type(BSON_TYPE_INT64), order_canonical_type(BSON_TYPE_DECIMAL128));
    assert_int_equal(order_canonical_type(BSON_TYPE_UTF8), order_canonical_type(BSON_TYPE_SYMBOL));
    assert_true(order_canonical_type(BSON_TYPE_DATE_TIME) < order_canonical_type(BSON_TYPE_TIMESTAMP));
    assert_true(order_canonical_type(BSON_TYPE_CODEWSCOPE) < order_canonical_type(BSON_TYPE_MAXKEY));
    assert_true(order_is_number(BSON_TYPE_DECIMAL128));
    assert_false(order_is_number(BSON_TYPE_BOOL));
}

/* One list per rank, ascending: the largest value of each rank must still sort
 * below the smallest value of the next. */
static void check_rank_ladder(const bson_value_t *values, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        for (size_t j = 0; j < count; j++) {
            int expected = i < j ? -1 : i > j ? 1 : 0;
            if (sign(order_compare_values(&values[i], &values[j])) != expected) {
                fail_msg("rank %zu vs %zu: expected %d", i, j, expected);
            }
        }
    }
}

static void test_every_pair_of_ranks_smallest_values(void **state)
{
    (void)state;
    bson_value_t ladder[] = {
        value_of("{\"$minKey\": 1}"),
        value_of("{\"$undefined\": true}"),
        value_of("null"),
        value_of("{\"$numberDouble\": \"NaN\"}"),
        string_of("", 0),
        value_of("{}"),
        value_of("[]"),
        value_of("{\"$binary\": {\"base64\": \"\", \"subType\": \"00\"}}"),
        value_of("{\"$oid\": \"000000000000000000000000\"}"),
        value_of("false"),
        value_of("{\"$date\": {\"$numberLong\": \"-9223372036854775808\"}}"),
        value_of("{\"$timestamp\": {\"t\": 0, \"i\": 0}}"),
        value_of("{\"$regularExpression\": {\"pattern\": \"\", \"options\": \"\"}}"),
        value_of("{\"$dbPointer\": {\"$ref\": \"\", \"$id\": {\"$oid\": \"000000000000000000000000\"}}}"),
        value_of("{\"$code\": \"\"}"),
        value_of("{\"$code\": \"\", \"$scope\": {}}"),
        value_of("{\"$maxKey\": 1}"),
    };
    check_rank_ladder(ladder, sizeof ladder / sizeof *ladder);
}

static void test_every_pair_of_ranks_largest_values(void **state)
{
    (void)state;
    bson_value_t ladder[] = {
        value_of("{\"$minKey\": 1}"),
        value_of("{\"$undefined\": true}"),
        value_of("null"),
        value_of("{\"$numberDouble\": \"Infinity\"}"),
        string_of("\xff\xff\xff", 3),
        value_of("{\"\xc3\xbf\": {\"$maxKey\": 1}}"),
        value_of("[{\"$maxKey\": 1}]"),
        value_of("{\"$binary\": {\"base64\": \"/////w==\", \"subType\": \"80\"}}"),
        value_of("{\"$oid\": \"ffffffffffffffffffffffff\"}"),
        value_of("true"),
        value_of("{\"$date\": {\"$numberLong\": \"9223372036854775807\"}}"),
        value_of("{\"$timestamp\": {\"t\": 4294967295, \"i\": 4294967295}}"),
        value_of("{\"$regularExpression\": {\"pattern\": \"zzz\", \"options\": \"x\"}}"),
        value_of("{\"$dbPointer\": {\"$ref\": \"zzzz\", \"$id\": {\"$oid\": \"ffffffffffffffffffffffff\"}}}"),
        value_of("{\"$code\": \"zzzz\"}"),
        value_of("{\"$code\": \"zzzz\", \"$scope\": {\"z\": 1}}"),
        value_of("{\"$maxKey\": 1}"),
    };
    check_rank_ladder(ladder, sizeof ladder / sizeof *ladder);
}

static void test_null_and_undefined_and_keys(void **state)
{
    (void)state;
    assert_order(value_of("null"), value_of("null"), 0);
    assert_order(value_of("{\"$undefined\": true}"), value_of("null"), -1);
    assert_order(value_of("{\"$minKey\": 1}"), value_of("{\"$minKey\": 1}"), 0);
    assert_order(value_of("{\"$maxKey\": 1}"), value_of("{\"$maxKey\": 1}"), 0);
    assert_order(value_of("{\"$minKey\": 1}"), value_of("{\"$undefined\": true}"), -1);
}

/* ---- numbers ------------------------------------------------------------- */

static void test_numbers_equal_across_types(void **state)
{
    (void)state;
    bson_value_t fives[] = {
        value_of("5"), long_of(5), double_of(5.0), decimal_of("5"), decimal_of("5.00"),
        decimal_of("0.5E1"), decimal_of("500E-2"),
    };
    size_t count = sizeof fives / sizeof *fives;
    for (size_t i = 0; i < count; i++) {
        for (size_t j = 0; j < count; j++) {
            assert_int_equal(order_compare_values(&fives[i], &fives[j]), 0);
        }
    }
    assert_order(value_of("5"), decimal_of("5.000000000000000000000000000000001"), -1);
    assert_order(value_of("-5"), decimal_of("-4.999999999999999999999999999999999"), -1);
}

static void test_nan_and_zeros_and_infinities(void **state)
{
    (void)state;
    bson_value_t nan = double_of(NAN);
    assert_order(nan, double_of(NAN), 0);
    assert_order(nan, decimal_of("NaN"), 0);
    assert_order(nan, double_of(-INFINITY), -1);
    assert_order(nan, long_of(INT64_MIN), -1);
    assert_order(decimal_of("NaN"), decimal_of("-Infinity"), -1);
    assert_order(decimal_of("NaN"), value_of("-2147483648"), -1);
    assert_order(decimal_of("NaN"), double_of(-INFINITY), -1);
    assert_order(decimal_of("-NaN"), double_of(NAN), 0);
    assert_order(double_of(-0.0), double_of(0.0), 0);
    assert_order(double_of(-0.0), value_of("0"), 0);
    assert_order(decimal_of("-0"), double_of(0.0), 0);
    assert_order(decimal_of("-0E+300"), long_of(0), 0);
    assert_order(decimal_of("Infinity"), double_of(INFINITY), 0);
    assert_order(decimal_of("-Infinity"), double_of(-INFINITY), 0);
    assert_order(double_of(-INFINITY), long_of(INT64_MIN), -1);
    assert_order(double_of(INFINITY), decimal_of("9.999999999999999999999999999999999E+6144"), 1);
}

static void test_large_integers_stay_exact(void **state)
{
    (void)state;
    int64_t two_53 = INT64_C(1) << 53;
    assert_order(long_of(two_53), double_of(9007199254740992.0), 0);
    assert_order(long_of(two_53 + 1), double_of(9007199254740992.0), 1);
    assert_order(long_of(two_53 + 1), double_of(9007199254740994.0), -1);
    assert_order(long_of(INT64_MAX), double_of(9223372036854775808.0), -1);
    assert_order(long_of(INT64_MIN), double_of(-9223372036854775808.0), 0);
    assert_order(long_of(INT64_MAX), long_of(INT64_MAX - 1), 1);
    assert_order(long_of(INT64_MAX), decimal_of("9223372036854775807"), 0);
    assert_order(long_of(INT64_MIN), decimal_of("-9223372036854775808"), 0);
    assert_order(long_of(INT64_MAX), decimal_of("9223372036854775807.5"), -1);
    assert_order(value_of("2147483647"), long_of(INT64_C(2147483648)), -1);
}

static void test_decimal_against_double_exactly(void **state)
{
    (void)state;
    /* The double nearest 0.1 is 0.1000000000000000055511151231257827...; */
    assert_order(decimal_of("0.1"), double_of(0.1), -1);
    assert_order(decimal_of("0.1000000000000000055511151231257827"), double_of(0.1), -1);
    assert_order(decimal_of("0.1000000000000000055511151231257828"), double_of(0.1), 1);
    assert_order(decimal_of("0.1"), double_of(nextafter(0.1, 0.0)), 1);
    assert_order(decimal_of("-0.1"), double_of(-0.1), 1);
    assert_order(decimal_of("0.5"), double_of(0.5), 0);
    assert_order(decimal_of("1E+400"), double_of(DBL_MAX), 1);
    assert_order(decimal_of("1E+400"), double_of(INFINITY), -1);
    assert_order(decimal_of("-1E+400"), double_of(-DBL_MAX), -1);
    assert_order(decimal_of("-1E+400"), double_of(-INFINITY), 1);
    assert_order(decimal_of("1E-400"), double_of(0.0), 1);
    assert_order(decimal_of("1E-400"), double_of(4.9406564584124654e-324), -1);
    assert_order(decimal_of("-1E-400"), double_of(-0.0), -1);
    assert_order(decimal_of("1.5"), value_of("1"), 1);
    assert_order(decimal_of("1.5"), value_of("2"), -1);
    assert_order(decimal_of("1E+2"), decimal_of("99.99999999999999999999999999999999"), 1);
    assert_order(decimal_of("-1E+2"), decimal_of("-99.99999999999999999999999999999999"), -1);
}

static void test_numbers_of_mixed_types_sort_numerically(void **state)
{
    (void)state;
    assert_order(value_of("-1"), double_of(-0.5), -1);
    assert_order(double_of(2.5), long_of(3), -1);
    assert_order(value_of("10"), double_of(9.99), 1);
    assert_order(long_of(-3), decimal_of("-2.9"), -1);
    assert_order(value_of("3"), string_of("2", 1), -1);
}

/* ---- strings ------------------------------------------------------------- */

static void test_strings_bytewise_with_embedded_nul(void **state)
{
    (void)state;
    assert_order(string_of("", 0), string_of("a", 1), -1);
    assert_order(string_of("a", 1), string_of("a\0", 2), -1);
    assert_order(string_of("a\0", 2), string_of("a\0b", 3), -1);
    assert_order(string_of("a\0b", 3), string_of("a\x01", 2), -1);
    assert_order(string_of("a\0z", 3), string_of("ab", 2), -1);
    assert_order(string_of("a\0b", 3), string_of("a\0b", 3), 0);
    /* Simple collation: bytes unsigned, so UTF-8 lead bytes sort after ASCII. */
    assert_order(string_of("z", 1), string_of("\xc3\xa9", 2), -1);
    assert_order(string_of("B", 1), string_of("a", 1), -1);
    assert_order(value_of("{\"$symbol\": \"abc\"}"), string_of("abc", 3), 0);
    assert_order(value_of("{\"$symbol\": \"abd\"}"), string_of("abc", 3), 1);
}

/* ---- documents and arrays ------------------------------------------------ */

static void test_documents_element_by_element(void **state)
{
    (void)state;
    assert_order(value_of("{\"a\": 1}"), value_of("{\"a\": 2}"), -1);
    /* Field name before value, type rank before field name. */
    assert_order(value_of("{\"a\": 2}"), value_of("{\"b\": 1}"), -1);
    assert_order(value_of("{\"b\": 1}"), value_of("{\"a\": \"x\"}"), -1);
    assert_order(value_of("{\"a\": null}"), value_of("{\"a\": 0}"), -1);
    /* Shorter first. */
    assert_order(value_of("{}"), value_of("{\"a\": {\"$minKey\": 1}}"), -1);
    assert_order(value_of("{\"a\": 1}"), value_of("{\"a\": 1, \"b\": 1}"), -1);
    assert_order(value_of("{\"a\": 1}"), value_of("{\"aa\": 1}"), -1);
    /* Field order matters. */
    assert_order(value_of("{\"a\": 1, \"b\": 1}"), value_of("{\"b\": 1, \"a\": 1}"), -1);
    /* Numbers inside compare numerically. */
    assert_order(value_of("{\"a\": 5, \"b\": {\"c\": [1]}}"),
                 value_of("{\"a\": 5.0, \"b\": {\"c\": [{\"$numberLong\": \"1\"}]}}"), 0);
    assert_order(value_of("{\"a\": {\"b\": 1}}"), value_of("{\"a\": {\"b\": 1, \"c\": 0}}"), -1);
}

static void test_arrays_element_by_element(void **state)
{
    (void)state;
    assert_order(value_of("[]"), value_of("[{\"$minKey\": 1}]"), -1);
    assert_order(value_of("[1, 2]"), value_of("[1, 3]"), -1);
    assert_order(value_of("[1, 2]"), value_of("[2]"), -1);
    assert_order(value_of("[1]"), value_of("[1, 1]"), -1);
    assert_order(value_of("[1, 2]"), value_of("[1.0, 2.0]"), 0);
    assert_order(value_of("[[1], 2]"), value_of("[[1, 0]]"), -1);
    assert_order(value_of("{\"z\": 1}"), value_of("[]"), -1);
}

static void test_documents_and_iterators(void **state)
{
    (void)state;
    bson_t *left = bson_new_from_json((const uint8_t *)"{\"a\": 1, \"b\": [1, 2]}", -1, NULL);
    bson_t *right = bson_new_from_json((const uint8_t *)"{\"a\": 1, \"b\": [1, 3]}", -1, NULL);
    bson_iter_t left_iter, right_iter;
    assert_int_equal(sign(order_compare_documents(left, right)), -1);
    assert_int_equal(sign(order_compare_documents(right, left)), 1);
    assert_int_equal(order_compare_documents(left, left), 0);
    assert_true(bson_iter_init_find(&left_iter, left, "b"));
    assert_true(bson_iter_init_find(&right_iter, right, "b"));
    assert_int_equal(sign(order_compare_iters(&left_iter, &right_iter)), -1);
    assert_true(bson_iter_init_find(&right_iter, right, "a"));
    assert_int_equal(sign(order_compare_iters(&left_iter, &right_iter)), 1);
    bson_destroy(left);
    bson_destroy(right);
}

/* ---- the other types ----------------------------------------------------- */

static void test_bindata_length_then_subtype_then_bytes(void **state)
{
    (void)state;
    /* One byte of subtype 0x80 is shorter than two zero bytes of subtype 0. */
    assert_order(value_of("{\"$binary\": {\"base64\": \"/w==\", \"subType\": \"80\"}}"),
                 value_of("{\"$binary\": {\"base64\": \"AAA=\", \"subType\": \"00\"}}"), -1);
    assert_order(value_of("{\"$binary\": {\"base64\": \"/w==\", \"subType\": \"00\"}}"),
                 value_of("{\"$binary\": {\"base64\": \"AA==\", \"subType\": \"04\"}}"), -1);
    assert_order(value_of("{\"$binary\": {\"base64\": \"AAE=\", \"subType\": \"00\"}}"),
                 value_of("{\"$binary\": {\"base64\": \"AAI=\", \"subType\": \"00\"}}"), -1);
    assert_order(value_of("{\"$binary\": {\"base64\": \"AAE=\", \"subType\": \"00\"}}"),
                 value_of("{\"$binary\": {\"base64\": \"AAE=\", \"subType\": \"00\"}}"), 0);
}

static void test_scalar_types(void **state)
{
    (void)state;
    assert_order(value_of("{\"$oid\": \"000000000000000000000001\"}"),
                 value_of("{\"$oid\": \"000000000000000000000100\"}"), -1);
    assert_order(value_of("false"), value_of("true"), -1);
    assert_order(value_of("true"), value_of("true"), 0);
    /* Dates are signed: before 1970 sorts first. */
    assert_order(value_of("{\"$date\": {\"$numberLong\": \"-1\"}}"),
                 value_of("{\"$date\": {\"$numberLong\": \"0\"}}"), -1);
    /* Timestamps are unsigned: seconds, then increment. */
    assert_order(value_of("{\"$timestamp\": {\"t\": 1, \"i\": 5}}"),
                 value_of("{\"$timestamp\": {\"t\": 2147483648, \"i\": 0}}"), -1);
    assert_order(value_of("{\"$timestamp\": {\"t\": 1, \"i\": 5}}"),
                 value_of("{\"$timestamp\": {\"t\": 1, \"i\": 2147483648}}"), -1);
    /* Regex by pattern, then flags. */
    assert_order(value_of("{\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"z\"}}"),
                 value_of("{\"$regularExpression\": {\"pattern\": \"b\", \"options\": \"\"}}"), -1);
    assert_order(value_of("{\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"i\"}}"),
                 value_of("{\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"m\"}}"), -1);
    assert_order(value_of("{\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"\"}}"),
                 value_of("{\"$regularExpression\": {\"pattern\": \"ab\", \"options\": \"\"}}"), -1);
    /* DBPointer: shorter namespace first, then bytes, then id. */
    assert_order(
        value_of("{\"$dbPointer\": {\"$ref\": \"zz\", \"$id\": {\"$oid\": \"ffffffffffffffffffffffff\"}}}"),
        value_of("{\"$dbPointer\": {\"$ref\": \"aaa\", \"$id\": {\"$oid\": \"000000000000000000000000\"}}}"),
        -1);
    assert_order(
        value_of("{\"$dbPointer\": {\"$ref\": \"ab\", \"$id\": {\"$oid\": \"ffffffffffffffffffffffff\"}}}"),
        value_of("{\"$dbPointer\": {\"$ref\": \"ac\", \"$id\": {\"$oid\": \"000000000000000000000000\"}}}"),
        -1);
    assert_order(
        value_of("{\"$dbPointer\": {\"$ref\": \"ab\", \"$id\": {\"$oid\": \"000000000000000000000001\"}}}"),
        value_of("{\"$dbPointer\": {\"$ref\": \"ab\", \"$id\": {\"$oid\": \"000000000000000000000002\"}}}"),
        -1);
    /* Code by its text; code with scope by text, then scope. */
    assert_order(value_of("{\"$code\": \"a\"}"), value_of("{\"$code\": \"ab\"}"), -1);
    assert_order(value_of("{\"$code\": \"b\", \"$scope\": {}}"),
                 value_of("{\"$code\": \"a\", \"$scope\": {\"x\": 1}}"), 1);
    assert_order(value_of("{\"$code\": \"a\", \"$scope\": {\"x\": 1}}"),
                 value_of("{\"$code\": \"a\", \"$scope\": {\"x\": 2}}"), -1);
    assert_order(value_of("{\"$code\": \"a\", \"$scope\": {\"x\": 1}}"),
                 value_of("{\"$code\": \"a\", \"$scope\": {\"x\": 1.0}}"), 0);
}

/* ---- sort specifications ------------------------------------------------- */

static void expect_compile_error(const char *spec_json, uint32_t code, const char *message)
{
    bson_error_t error;
    bson_t *spec = bson_new_from_json((const uint8_t *)spec_json, -1, NULL);
    assert_non_null(spec);
    memset(&error, 0, sizeof error);
    sort_spec_t *compiled = sort_spec_compile(spec, &error);
    if (compiled != NULL) {
        fail_msg("%s compiled", spec_json);
    }
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    bson_destroy(spec);
}

static sort_spec_t *compile(const char *spec_json)
{
    bson_error_t error;
    bson_t *spec = bson_new_from_json((const uint8_t *)spec_json, -1, NULL);
    assert_non_null(spec);
    sort_spec_t *compiled = sort_spec_compile(spec, &error);
    if (compiled == NULL) {
        fail_msg("%s: %s", spec_json, error.message);
    }
    bson_destroy(spec);
    return compiled;
}

static void test_sort_spec_errors(void **state)
{
    (void)state;
    const char *bad_order = "$sort key ordering must be 1 (for ascending) or -1 (for descending)";
    expect_compile_error("{\"a\": 0}", 15975, bad_order);
    expect_compile_error("{\"a\": 2}", 15975, bad_order);
    expect_compile_error("{\"a\": 0.5}", 15975, bad_order);
    expect_compile_error("{\"a\": {\"$numberDouble\": \"NaN\"}}", 15975, bad_order);
    expect_compile_error("{\"a\": {\"$numberDecimal\": \"-0.9\"}}", 15975, bad_order);
    /* Truncated toward zero, even where the nearest double would be -1. */
    expect_compile_error("{\"a\": {\"$numberDecimal\": \"-0.99999999999999999999999\"}}", 15975,
                         bad_order);
    expect_compile_error("{\"a\": 1, \"b\": 3}", 15975, bad_order);
    expect_compile_error("{\"a\": \"x\"}", 15974, "Illegal key in $sort specification: a: \"x\"");
    expect_compile_error("{\"a\": true}", 15974, "Illegal key in $sort specification: a: true");
    expect_compile_error("{\"a\": null}", 15974, "Illegal key in $sort specification: a: null");
    expect_compile_error("{\"a\": {}}", 17312, NULL);
    expect_compile_error("{\"a\": {\"b\": 1}}", 17312, NULL);
    expect_compile_error("{\"a\": {\"$meta\": \"bogus\"}}", 31138,
                         "Illegal $meta sort: $meta: \"bogus\"");
    expect_compile_error("{\"a\": {\"$meta\": \"textScore\", \"b\": 1}}", 9, NULL);
    expect_compile_error("{\"a\": {\"$meta\": \"textScore\"}}", 2, NULL);
    expect_compile_error("{\"\": 1}", 40352, NULL);
    expect_compile_error("{\"a.\": 1}", 40353, NULL);
    expect_compile_error("{\"a..b\": 1}", 15998, NULL);
    expect_compile_error("{\".a\": 1}", 15998, NULL);
    expect_compile_error("{\"$a\": 1}", 16410, NULL);
    expect_compile_error("{\"a.$b\": -1}", 16410, NULL);
}

static void test_sort_spec_accepts_any_numeric_one(void **state)
{
    (void)state;
    sort_spec_t *spec = compile("{\"a\": 1.0, \"b.c\": {\"$numberLong\": \"-1\"}, "
                                "\"d\": {\"$numberDecimal\": \"1\"}, \"e\": 1.5, \"f\": -1.9, "
                                "\"g.$id\": {\"$numberDecimal\": \"-1.0000000000000000000001\"}}");
    assert_int_equal(sort_spec_key_count(spec), 6);
    assert_string_equal(sort_spec_key_path(spec, 1), "b.c");
    assert_int_equal(sort_spec_key_direction(spec, 0), 1);
    assert_int_equal(sort_spec_key_direction(spec, 1), -1);
    assert_int_equal(sort_spec_key_direction(spec, 2), 1);
    assert_int_equal(sort_spec_key_direction(spec, 3), 1);
    assert_int_equal(sort_spec_key_direction(spec, 4), -1);
    assert_int_equal(sort_spec_key_direction(spec, 5), -1);
    sort_spec_destroy(spec);
    sort_spec_destroy(NULL);

    spec = compile("{}");
    bson_t *a = bson_new_from_json((const uint8_t *)"{\"a\": 1}", -1, NULL);
    bson_t *b = bson_new_from_json((const uint8_t *)"{\"a\": 2}", -1, NULL);
    assert_int_equal(sort_spec_key_count(spec), 0);
    assert_int_equal(sort_compare_documents(spec, a, b), 0);
    bson_destroy(a);
    bson_destroy(b);
    sort_spec_destroy(spec);
}

/* Compares every pair of documents (JSON) under spec and checks the result against
 * expected_rank: a smaller rank sorts first, an equal rank means a tie. */
static void check_sorted(const char *spec_json, const char *const *documents_json, size_t count,
                         const int *expected_rank)
{
    sort_spec_t *spec = compile(spec_json);
    bson_t *documents[16];
    assert_true(count <= 16);
    for (size_t i = 0; i < count; i++) {
        bson_error_t error;
        documents[i] = bson_new_from_json((const uint8_t *)documents_json[i], -1, &error);
        if (documents[i] == NULL) {
            fail_msg("bad JSON %s: %s", documents_json[i], error.message);
        }
    }
    for (size_t i = 0; i < count; i++) {
        for (size_t j = 0; j < count; j++) {
            int expected = expected_rank[i] < expected_rank[j]   ? -1
                           : expected_rank[i] > expected_rank[j] ? 1
                                                                 : 0;
            int actual = sign(sort_compare_documents(spec, documents[i], documents[j]));
            if (actual != expected) {
                fail_msg("%s: %s vs %s gave %d, expected %d", spec_json, documents_json[i],
                         documents_json[j], actual, expected);
            }
        }
    }
    for (size_t i = 0; i < count; i++) {
        bson_destroy(documents[i]);
    }
    sort_spec_destroy(spec);
}

static void test_sort_missing_null_and_arrays(void **state)
{
    (void)state;
    const char *documents[] = {
        "{\"a\": []}",     "{}",           "{\"a\": null}", "{\"a\": [1, 5]}",
        "{\"a\": 2}",      "{\"a\": [3]}", "{\"a\": \"s\"}", "{\"a\": [null, 4]}",
        "{\"a\": {\"$undefined\": true}}",
    };
    /* Ascending: the smallest element; [] is undefined, below null and missing. */
    const int ascending[] = {0, 1, 1, 2, 3, 4, 5, 1, 0};
    check_sorted("{\"a\": 1}", documents, 9, ascending);
    /* Descending: the largest element; [] still sorts as undefined, so last. */
    const int descending[] = {6, 5, 5, 1, 4, 3, 0, 2, 6};
    check_sorted("{\"a\": -1}", documents, 9, descending);
}

static void test_sort_dotted_paths(void **state)
{
    (void)state;
    const char *documents[] = {
        "{\"a\": [{\"b\": 3}, {\"b\": 1}]}",
        "{\"a\": {\"b\": 2}}",
        "{\"a\": [{\"c\": 1}]}",
        "{\"a\": [{\"b\": 5}, {\"c\": 1}]}",
        "{\"a\": {\"b\": [0, 9]}}",
        "{\"a\": 7}",
    };
    /* Ascending keys: 1, 2, null, null (min of 5 and missing), 0, null. */
    const int ascending[] = {2, 3, 0, 0, 1, 0};
    check_sorted("{\"a.b\": 1}", documents, 6, ascending);
    /* Descending keys: 3, 2, null, 5, 9, null. */
    const int descending[] = {2, 3, 4, 1, 0, 4};
    check_sorted("{\"a.b\": -1}", documents, 6, descending);
}

static void test_sort_compound_keys(void **state)
{
    (void)state;
    const char *documents[] = {
        "{\"a\": 1, \"b\": 1}",
        "{\"a\": 1, \"b\": 2}",
        "{\"a\": 2, \"b\": 0}",
        "{\"a\": 1.0, \"b\": {\"$numberLong\": \"2\"}}",
        "{\"b\": 5}",
    };
    const int ascending_descending[] = {2, 1, 3, 1, 0};
    check_sorted("{\"a\": 1, \"b\": -1}", documents, 5, ascending_descending);
    const int descending_ascending[] = {1, 2, 0, 2, 3};
    check_sorted("{\"a\": -1, \"b\": 1}", documents, 5, descending_ascending);
}

/* mongod sorts by the smallest compound index key, not by each field's own
 * smallest value: {x: [{a:1, b:5}, {a:2, b:0}]} has keys (1,5) and (2,0). */
static void test_sort_keys_stay_correlated(void **state)
{
    (void)state;
    const char *documents[] = {
        "{\"x\": [{\"a\": 1, \"b\": 5}, {\"a\": 2, \"b\": 0}]}",
        "{\"x\": [{\"a\": 1, \"b\": 3}]}",
    };
    const int expected[] = {1, 0};
    check_sorted("{\"x.a\": 1, \"x.b\": 1}", documents, 2, expected);
}

static void test_sort_key_generate_and_parallel_arrays(void **state)
{
    (void)state;
    sort_spec_t *spec = compile("{\"a\": 1, \"b\": -1}");
    bson_t *parallel =
        bson_new_from_json((const uint8_t *)"{\"a\": [1, 2], \"b\": [1, 2]}", -1, NULL);
    bson_t *plain = bson_new_from_json((const uint8_t *)"{\"a\": [3, 2], \"b\": 7}", -1, NULL);
    bson_t *zero = bson_new_from_json((const uint8_t *)"{\"a\": 0, \"b\": 0}", -1, NULL);
    keystring_t key;
    bson_t values = BSON_INITIALIZER;
    bson_error_t error;

    keystring_init(&key);
    assert_false(sort_key_generate(spec, parallel, &key, NULL, &error));
    assert_int_equal(error.code, 2);
    assert_string_equal(error.message, "cannot sort with keys that are parallel arrays");

    assert_true(sort_key_generate(spec, plain, &key, &values, &error));
    assert_true(key.length > 0);
    char *json = bson_as_relaxed_extended_json(&values, NULL);
    assert_string_equal(json, "{ \"\" : 2, \"\" : 7 }");
    bson_free(json);

    /* Still ordered, key by key, where mongod would refuse. */
    assert_int_equal(sign(sort_compare_documents(spec, parallel, zero)), 1);
    assert_int_equal(sign(sort_compare_documents(spec, zero, parallel)), -1);

    keystring_cleanup(&key);
    bson_destroy(&values);
    bson_destroy(parallel);
    bson_destroy(plain);
    bson_destroy(zero);
    sort_spec_destroy(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_canonical_ranks, release_values),
        cmocka_unit_test_teardown(test_every_pair_of_ranks_smallest_values, release_values),
        cmocka_unit_test_teardown(test_every_pair_of_ranks_largest_values, release_values),
        cmocka_unit_test_teardown(test_null_and_undefined_and_keys, release_values),
        cmocka_unit_test_teardown(test_numbers_equal_across_types, release_values),
        cmocka_unit_test_teardown(test_nan_and_zeros_and_infinities, release_values),
        cmocka_unit_test_teardown(test_large_integers_stay_exact, release_values),
        cmocka_unit_test_teardown(test_decimal_against_double_exactly, release_values),
        cmocka_unit_test_teardown(test_numbers_of_mixed_types_sort_numerically, release_values),
        cmocka_unit_test_teardown(test_strings_bytewise_with_embedded_nul, release_values),
        cmocka_unit_test_teardown(test_documents_element_by_element, release_values),
        cmocka_unit_test_teardown(test_arrays_element_by_element, release_values),
        cmocka_unit_test_teardown(test_documents_and_iterators, release_values),
        cmocka_unit_test_teardown(test_bindata_length_then_subtype_then_bytes, release_values),
        cmocka_unit_test_teardown(test_scalar_types, release_values),
        cmocka_unit_test(test_sort_spec_errors),
        cmocka_unit_test(test_sort_spec_accepts_any_numeric_one),
        cmocka_unit_test(test_sort_missing_null_and_arrays),
        cmocka_unit_test(test_sort_dotted_paths),
        cmocka_unit_test(test_sort_compound_keys),
        cmocka_unit_test(test_sort_keys_stay_correlated),
        cmocka_unit_test(test_sort_key_generate_and_parallel_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
