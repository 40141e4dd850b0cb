/* Unit tests for src/query/collation.c and what rests on it: collation-aware value
 * comparison (order.h), collated index keys (keystring.h, index_keys.h), sorts
 * (sort.h) and filters (match.h): case-insensitive at strength 2, accents ignored
 * at strength 1, numericOrdering, and the simple locale's binary path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "query/collation.h"
#include "query/index_keys.h"
#include "query/keystring.h"
#include "query/match.h"
#include "query/order.h"
#include "query/sort.h"

/* Compiles the collation of canonical extended JSON text; NULL for "simple". */
static collation_t *collation_of(const char *json)
{
    bson_error_t error;
    bson_t *spec = bson_new_from_json((const uint8_t *)json, -1, &error);
    assert_non_null(spec);
    collation_t *collation = NULL;
    if (!collation_parse(spec, &collation, &error)) {
        fail_msg("collation %s refused: %s", json, error.message);
    }
    bson_destroy(spec);
    return collation;
}

/* The error collation_parse gives for json. */
static bson_error_t refusal_of(const char *json)
{
    bson_error_t error = {0};
    bson_t *spec = bson_new_from_json((const uint8_t *)json, -1, &error);
    assert_non_null(spec);
    collation_t *collation = NULL;
    assert_false(collation_parse(spec, &collation, &error));
    assert_null(collation);
    bson_destroy(spec);
    return error;
}

static bson_value_t utf8_value(const char *text)
{
    bson_value_t value = {.value_type = BSON_TYPE_UTF8};
    value.value.v_utf8.str = (char *)text;
    value.value.v_utf8.len = (uint32_t)strlen(text);
    return value;
}

static int compare_strings(const collation_t *collation, const char *left, const char *right)
{
    bson_value_t left_value = utf8_value(left), right_value = utf8_value(right);
    return order_compare_values_collated(&left_value, &right_value, collation);
}

/* The keystring of one string under collation. */
static void key_of(const collation_t *collation, const char *text, keystring_t *out)
{
    bson_value_t value = utf8_value(text);
    keystring_init(out);
    keystring_append_value_collated(out, &value, false, collation);
}

static int compare_keys(const collation_t *collation, const char *left, const char *right)
{
    keystring_t left_key, right_key;
    key_of(collation, left, &left_key);
    key_of(collation, right, &right_key);
    int result = keystring_compare(&left_key, &right_key);
    keystring_cleanup(&left_key);
    keystring_cleanup(&right_key);
    return result;
}

static void test_strength_two_ignores_case_not_accents(void **state)
{
    (void)state;
    collation_t *collation = collation_of("{\"locale\": \"en\", \"strength\": 2}");
    assert_int_equal(compare_strings(collation, "abc", "ABC"), 0);
    assert_int_equal(compare_keys(collation, "abc", "ABC"), 0);
    assert_true(compare_strings(collation, "cote", "côte") != 0);
    assert_true(compare_keys(collation, "cote", "côte") != 0);
    /* Alphabetical, not binary: "b" < "C" although 'C' (0x43) < 'b' (0x62). */
    assert_true(compare_strings(collation, "b", "C") < 0);
    assert_true(compare_keys(collation, "b", "C") < 0);
    /* Binary (NULL) still orders by bytes. */
    assert_true(compare_strings(NULL, "b", "C") > 0);
    assert_true(compare_strings(NULL, "abc", "ABC") != 0);
    collation_release(collation);
}

static void test_strength_one_ignores_accents(void **state)
{
    (void)state;
    collation_t *collation = collation_of("{\"locale\": \"fr\", \"strength\": 1}");
    assert_int_equal(compare_strings(collation, "cote", "Côté"), 0);
    assert_int_equal(compare_keys(collation, "cote", "Côté"), 0);
    assert_true(compare_strings(collation, "cote", "cotes") < 0);
    collation_release(collation);
}

static void test_numeric_ordering(void **state)
{
    (void)state;
    collation_t *numeric = collation_of("{\"locale\": \"en\", \"numericOrdering\": true}");
    collation_t *plain = collation_of("{\"locale\": \"en\"}");
    assert_true(compare_strings(numeric, "10", "9") > 0);
    assert_true(compare_keys(numeric, "10", "9") > 0);
    assert_true(compare_strings(plain, "10", "9") < 0);
    assert_true(compare_keys(plain, "10", "9") < 0);
    collation_release(numeric);
    collation_release(plain);
}

static void test_only_strings_collate(void **state)
{
    (void)state;
    collation_t *collation = collation_of("{\"locale\": \"en\", \"strength\": 2}");
    bson_t *left = BCON_NEW("a", "[", "X", BCON_INT32(1), "]", "b", "{", "c", "Q", "}");
    bson_t *right = BCON_NEW("a", "[", "x", BCON_INT32(1), "]", "b", "{", "c", "q", "}");
    bson_t *other_name = BCON_NEW("A", "[", "x", BCON_INT32(1), "]", "b", "{", "c", "q", "}");
    bson_value_t left_value = {.value_type = BSON_TYPE_DOCUMENT}, right_value = left_value, other_value = left_value;
    left_value.value.v_doc.data = (uint8_t *)bson_get_data(left);
    left_value.value.v_doc.data_len = left->len;
    right_value.value.v_doc.data = (uint8_t *)bson_get_data(right);
    right_value.value.v_doc.data_len = right->len;
    other_value.value.v_doc.data = (uint8_t *)bson_get_data(other_name);
    other_value.value.v_doc.data_len = other_name->len;
    /* Strings inside arrays and documents collate; field names stay binary. */
    assert_int_equal(order_compare_values_collated(&left_value, &right_value, collation), 0);
    assert_true(order_compare_values_collated(&right_value, &other_value, collation) != 0);
    assert_true(order_compare_values_collated(&left_value, &right_value, NULL) != 0);
    /* Types still order by rank: any number before any string. */
    bson_value_t number = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 99};
    bson_value_t text = utf8_value("a");
    assert_true(order_compare_values_collated(&number, &text, collation) < 0);
    bson_destroy(left);
    bson_destroy(right);
    bson_destroy(other_name);
    collation_release(collation);
}

static void test_collated_index_keys(void **state)
{
    (void)state;
    collation_t *collation = collation_of("{\"locale\": \"en\", \"strength\": 2}");
    bson_t *pattern_document = BCON_NEW("email", BCON_INT32(1));
    bson_error_t error;
    index_keys_pattern_t *pattern = index_keys_pattern_new(pattern_document, &error);
    assert_non_null(pattern);
    index_keys_pattern_set_collation(pattern, collation);
    collation_release(collation); /* the pattern holds its own reference */
    bson_t *upper = BCON_NEW("email", "Ann@Example.COM");
    bson_t *lower = BCON_NEW("email", "ann@example.com");
    index_key_set_t upper_keys, lower_keys;
    assert_true(index_keys_generate(pattern, upper, &upper_keys, &error));
    assert_true(index_keys_generate(pattern, lower, &lower_keys, &error));
    assert_int_equal(keystring_compare(&upper_keys.keys[0].keystring, &lower_keys.keys[0].keystring), 0);
    /* The key keeps the original value beside the sort key. */
    bson_iter_t iter;
    assert_true(bson_iter_init(&iter, upper_keys.keys[0].values) && bson_iter_next(&iter));
    assert_string_equal(bson_iter_utf8(&iter, NULL), "Ann@Example.COM");
    index_keys_set_cleanup(&upper_keys);
    index_keys_set_cleanup(&lower_keys);
    index_keys_pattern_destroy(pattern);
    bson_destroy(pattern_document);
    bson_destroy(upper);
    bson_destroy(lower);
}

static void test_collated_sort_and_match(void **state)
{
    (void)state;
    collation_t *collation = collation_of("{\"locale\": \"en\", \"numericOrdering\": true}");
    bson_t *spec = BCON_NEW("n", BCON_INT32(1));
    bson_error_t error;
    sort_spec_t *sort = sort_spec_compile(spec, &error);
    assert_non_null(sort);
    bson_t *nine = BCON_NEW("n", "9"), *ten = BCON_NEW("n", "10");
    assert_true(sort_compare_documents(sort, nine, ten) > 0);
    sort_spec_set_collation(sort, collation);
    assert_true(sort_compare_documents(sort, nine, ten) < 0);

    collation_t *insensitive = collation_of("{\"locale\": \"en\", \"strength\": 2}");
    expression_context_t context;
    expression_context_init(&context);
    context.collation = insensitive;
    bson_t *filter = BCON_NEW("n", "{", "$in", "[", "A", "B", "]", "}");
    match_expression_t *collated = match_compile_with_context(filter, &context, &error);
    match_expression_t *binary = match_compile(filter, &error);
    collation_release(insensitive); /* the matcher holds its own reference */
    bson_t *lower_a = BCON_NEW("n", "a"), *lower_c = BCON_NEW("n", "c");
    assert_true(match_document(collated, lower_a));
    assert_false(match_document(collated, lower_c));
    assert_false(match_document(binary, lower_a));
    match_destroy(collated);
    match_destroy(binary);
    bson_destroy(filter);
    bson_destroy(lower_a);
    bson_destroy(lower_c);
    sort_spec_destroy(sort);
    collation_release(collation);
    bson_destroy(spec);
    bson_destroy(nine);
    bson_destroy(ten);
}

static void test_simple_locale_and_expanded_form(void **state)
{
    (void)state;
    assert_null(collation_of("{\"locale\": \"simple\"}"));
    collation_t *collation = collation_of("{\"locale\": \"en\", \"strength\": 2}");
    char *json = bson_as_relaxed_extended_json(collation_spec(collation), NULL);
    /* Every field, in mongod's order, with the locale's defaults filled in, then ICU's version. */
    const char *expected = "{ \"locale\" : \"en\", \"caseLevel\" : false, \"caseFirst\" : \"off\", "
                           "\"strength\" : 2, \"numericOrdering\" : false, \"alternate\" : \"non-ignorable\", "
                           "\"maxVariable\" : \"punct\", \"normalization\" : false, \"backwards\" : false, "
                           "\"version\" : \"";
    assert_int_equal(strncmp(json, expected, strlen(expected)), 0);
    bson_free(json);
    /* Parsing the expanded form gives an equal collation. */
    collation_t *again = NULL;
    bson_error_t error;
    assert_true(collation_parse(collation_spec(collation), &again, &error));
    assert_true(collation_equal(collation, again));
    collation_t *other = collation_of("{\"locale\": \"en\", \"strength\": 3}");
    assert_false(collation_equal(collation, other));
    assert_false(collation_equal(collation, NULL));
    assert_true(collation_equal(NULL, NULL));
    collation_release(again);
    collation_release(other);
    collation_release(collation);
}

static void test_refusals(void **state)
{
    (void)state;
    bson_error_t error = refusal_of("{\"locale\": \"zz_nope\"}");
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    assert_string_equal(error.message, "Field 'locale' is invalid in: { locale: \"zz_nope\" }");
    error = refusal_of("{\"strength\": 2}");
    assert_int_equal(error.code, TC_ERR_MISSING_REQUIRED_FIELD);
    error = refusal_of("{\"locale\": \"en\", \"strength\": 7}");
    assert_int_equal(error.code, TC_ERR_NON_NEGATIVE_VALUE);
    error = refusal_of("{\"locale\": \"en\", \"what\": 1}");
    assert_int_equal(error.code, TC_ERR_UNRECOGNIZED_COMMAND_FIELD);
    error = refusal_of("{\"locale\": \"en\", \"caseLevel\": \"yes\"}");
    assert_int_equal(error.code, TC_ERR_TYPE_MISMATCH);
    error = refusal_of("{\"locale\": \"en\", \"strength\": 2, \"caseFirst\": \"upper\"}");
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    error = refusal_of("{\"locale\": \"en\", \"version\": \"1.0\"}");
    assert_int_equal(error.code, TC_ERR_INCOMPATIBLE_COLLATION_VERSION);
    error = refusal_of("{\"locale\": \"\"}");
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strength_two_ignores_case_not_accents),
        cmocka_unit_test(test_strength_one_ignores_accents),
        cmocka_unit_test(test_numeric_ordering),
        cmocka_unit_test(test_only_strings_collate),
        cmocka_unit_test(test_collated_index_keys),
        cmocka_unit_test(test_collated_sort_and_match),
        cmocka_unit_test(test_simple_locale_and_expanded_form),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
