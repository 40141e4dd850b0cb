/* Unit tests for src/query/keystring.c (memcmp-ordered index keys) and
 * src/query/index_keys.c (MongoDB's index key generation). The central property:
 * the byte order of encodings is order_compare_values' order, checked on thousands
 * of seeded pseudo-random values of every type. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "query/index_keys.h"
#include "query/keystring.h"
#include "query/order.h"

/* ---- deterministic pseudo-random values ---------------------------------- */

static uint64_t random_state;

static uint64_t next_random(void)
{
    /* xorshift64*: fixed seed, same sequence on every run. */
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return random_state * UINT64_C(2685821657736338717);
}

static size_t random_below(size_t bound)
{
    return (size_t)(next_random() % bound);
}

#define PICK(array) ((array)[random_below(sizeof(array) / sizeof *(array))])

static void append_random_bytes_string(char *out, size_t *out_length, bool allow_nul)
{
    static const char alphabet[] = {'\0', 'a', 'b', '\x01', '\xff'};
    size_t length = random_below(4);
    for (size_t i = 0; i < length; i++) {
        char byte = PICK(alphabet);
        out[i] = (!allow_nul && byte == '\0') ? 'c' : byte;
    }
    out[length] = '\0';
    *out_length = length;
}

static void append_random_oid(bson_oid_t *oid)
{
    static const uint8_t choices[] = {0x00, 0x01, 0xff};
    memset(oid->bytes, 0x11, sizeof oid->bytes);
    oid->bytes[0] = PICK(choices);
    oid->bytes[11] = PICK(choices);
}

static void append_random_value(bson_t *document, const char *key, int depth);

static void append_random_document(bson_t *document, const char *key, int depth, bool array)
{
    static const char *const names[] = {"", "a", "b", "ab"};
    bson_t child;
    size_t count = random_below(4);
    if (array) {
        bson_append_array_begin(document, key, -1, &child);
    } else {
        bson_append_document_begin(document, key, -1, &child);
    }
    for (size_t i = 0; i < count; i++) {
        char index_name[16];
        snprintf(index_name, sizeof index_name, "%zu", i);
        append_random_value(&child, array ? index_name : PICK(names), depth + 1);
    }
    if (array) {
        bson_append_array_end(document, &child);
    } else {
        bson_append_document_end(document, &child);
    }
}

static void append_random_value(bson_t *document, const char *key, int depth)
{
    static const int32_t int32s[] = {-2, -1, 0, 1, 2, 5, INT32_MAX, INT32_MIN};
    static const int64_t int64s[] = {0,
                                     5,
                                     -5,
                                     INT64_C(9007199254740992),
                                     INT64_C(9007199254740993),
                                     INT64_C(-9007199254740993),
                                     INT64_MAX,
                                     INT64_MIN,
                                     INT64_MAX - 1,
                                     INT64_C(4611686018427387905)};
    static const double doubles[] = {0.0,      -0.0,        5.0,  -5.0,     0.1,      -0.1,
                                     0.5,      NAN,         2.5,  INFINITY, -INFINITY,
                                     9007199254740992.0,     9007199254740994.0,
                                     9223372036854775808.0,  DBL_MAX,  -DBL_MAX,
                                     4.9406564584124654e-324, 1e-300, 0.09999999999999999};
    static const char *const decimals[] = {
        "0", "-0", "5", "5.00", "0.1", "-0.1", "0.1000000000000000055511151231257827",
        "1E+400", "-1E+400", "1E-400", "-1E-400", "NaN", "Infinity", "-Infinity",
        "9007199254740993", "9223372036854775807", "9223372036854775807.5", "2.5", "0.5",
        "1.000000000000000000000000000000001", "-9.999999999999999999999999999999999E+6144",
        "-9007199254740993", "0.09999999999999999"};
    static const int64_t dates[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
    static const uint32_t stamps[] = {0, 1, 0x80000000u, 0xffffffffu};
    static const char *const short_texts[] = {"", "a", "ab", "b"};
    static const char *const regex_options[] = {"", "i", "im", "m"};
    static const uint8_t binary_bytes[] = {0x00, 0x01, 0xff};
    static const bson_subtype_t subtypes[] = {BSON_SUBTYPE_BINARY, BSON_SUBTYPE_BINARY_DEPRECATED,
                                              BSON_SUBTYPE_USER};
    char text[8];
    size_t text_length;
    bson_oid_t oid;
    size_t kind = random_below(depth >= 2 ? 19 : 21);

    switch (kind) {
    case 0:
        BSON_APPEND_INT32(document, key, PICK(int32s));
        break;
    case 1:
        BSON_APPEND_INT64(document, key, PICK(int64s));
        break;
    case 2:
    case 3:
        BSON_APPEND_DOUBLE(document, key, PICK(doubles));
        break;
    case 4:
    case 5: {
        bson_decimal128_t decimal;
        bson_decimal128_from_string(PICK(decimals), &decimal);
        BSON_APPEND_DECIMAL128(document, key, &decimal);
        break;
    }
    case 6:
        append_random_bytes_string(text, &text_length, true);
        bson_append_utf8(document, key, -1, text, (int)text_length);
        break;
    case 7:
        append_random_bytes_string(text, &text_length, true);
        bson_append_symbol(document, key, -1, text, (int)text_length);
        break;
    case 8: {
        uint8_t bytes[2];
        size_t length = random_below(3);
        for (size_t i = 0; i < length; i++) {
            bytes[i] = PICK(binary_bytes);
        }
        bson_append_binary(document, key, -1, PICK(subtypes), bytes, (uint32_t)length);
        break;
    }
    case 9:
        append_random_oid(&oid);
        BSON_APPEND_OID(document, key, &oid);
        break;
    case 10:
        BSON_APPEND_BOOL(document, key, random_below(2) == 1);
        break;
    case 11:
        BSON_APPEND_DATE_TIME(document, key, PICK(dates));
        break;
    case 12:
        bson_append_timestamp(document, key, -1, PICK(stamps), PICK(stamps));
        break;
    case 13:
        BSON_APPEND_REGEX(document, key, PICK(short_texts), PICK(regex_options));
        break;
    case 14:
        append_random_oid(&oid);
        bson_append_dbpointer(document, key, -1, PICK(short_texts), &oid);
        break;
    case 15:
        BSON_APPEND_CODE(document, key, PICK(short_texts));
        break;
    case 16: {
        static const char *const special[] = {"null", "undefined", "minkey", "maxkey"};
        const char *which = PICK(special);
        if (strcmp(which, "null") == 0) {
            BSON_APPEND_NULL(document, key);
        } else if (strcmp(which, "undefined") == 0) {
            BSON_APPEND_UNDEFINED(document, key);
        } else if (strcmp(which, "minkey") == 0) {
            BSON_APPEND_MINKEY(document, key);
        } else {
            BSON_APPEND_MAXKEY(document, key);
        }
        break;
    }
    case 17: {
        bson_t scope = BSON_INITIALIZER;
        if (random_below(2) == 1) {
            append_random_value(&scope, PICK(short_texts), 2);
        }
        BSON_APPEND_CODE_WITH_SCOPE(document, key, PICK(short_texts), &scope);
        bson_destroy(&scope);
        break;
    }
    case 18:
        BSON_APPEND_DOUBLE(document, key, (double)(int)random_below(7) - 3.0);
        break;
    case 19:
        append_random_document(document, key, depth, false);
        break;
    default:
        append_random_document(document, key, depth, true);
        break;
    }
}

/* ---- helpers ------------------------------------------------------------- */

typedef struct sample {
    bson_t *holder; /* {"v": value} */
    bson_value_t value;
    keystring_t ascending;
    keystring_t descending;
} sample_t;

static void sample_init(sample_t *sample, bson_t *holder)
{
    bson_iter_t iter;
    sample->holder = holder;
    assert_true(bson_iter_init(&iter, holder) && bson_iter_next(&iter));
    sample->value = *bson_iter_value(&iter);
    keystring_init(&sample->ascending);
    keystring_init(&sample->descending);
    keystring_append_value(&sample->ascending, &sample->value, false);
    keystring_append_value(&sample->descending, &sample->value, true);
}

static void sample_cleanup(sample_t *sample)
{
    keystring_cleanup(&sample->ascending);
    keystring_cleanup(&sample->descending);
    bson_destroy(sample->holder);
}

static sample_t *make_random_samples(size_t count, uint64_t seed)
{
    sample_t *samples = calloc(count, sizeof *samples);
    random_state = seed;
    for (size_t i = 0; i < count; i++) {
        bson_t *holder = bson_new();
        append_random_value(holder, "v", 0);
        sample_init(&samples[i], holder);
    }
    return samples;
}

static void free_samples(sample_t *samples, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        sample_cleanup(&samples[i]);
    }
    free(samples);
}

static int sign(int value)
{
    return value < 0 ? -1 : value > 0 ? 1 : 0;
}

static void check_pair(const sample_t *left, const sample_t *right)
{
    int expected = sign(order_compare_values(&left->value, &right->value));
    int ascending = sign(keystring_compare(&left->ascending, &right->ascending));
    int descending = sign(keystring_compare(&left->descending, &right->descending));
    if (ascending != expected || descending != -expected) {
        char *left_json = bson_as_canonical_extended_json(left->holder, NULL);
        char *right_json = bson_as_canonical_extended_json(right->holder, NULL);
        fail_msg("%s vs %s: order %d, keystring %d, descending keystring %d", left_json,
                 right_json, expected, ascending, descending);
    }
}

static bson_t *holder_of(const char *json)
{
    bson_error_t error;
    char *wrapped = bson_strdup_printf("{\"v\": %s}", json);
    bson_t *holder = bson_new_from_json((const uint8_t *)wrapped, -1, &error);
    if (holder == NULL) {
        fail_msg("bad test JSON %s: %s", json, error.message);
    }
    bson_free(wrapped);
    return holder;
}

static bool same_bytes(const keystring_t *left, const keystring_t *right)
{
    return left->length == right->length && memcmp(left->data, right->data, left->length) == 0;
}

/* ---- the ordering property ----------------------------------------------- */

enum { RANDOM_SAMPLES = 3000, FULL_PAIRWISE = 600, RANDOM_PAIRS = 200000 };

static void test_property_pairwise(void **state)
{
    (void)state;
    sample_t *samples = make_random_samples(RANDOM_SAMPLES, UINT64_C(0x5eed0f0dde));
    for (size_t i = 0; i < FULL_PAIRWISE; i++) {
        for (size_t j = 0; j < FULL_PAIRWISE; j++) {
            check_pair(&samples[i], &samples[j]);
        }
    }
    for (size_t n = 0; n < RANDOM_PAIRS; n++) {
        check_pair(&samples[random_below(RANDOM_SAMPLES)], &samples[random_below(RANDOM_SAMPLES)]);
    }
    free_samples(samples, RANDOM_SAMPLES);
}

static int compare_samples_by_order(const void *left, const void *right)
{
    return order_compare_values(&((const sample_t *)left)->value,
                                &((const sample_t *)right)->value);
}

/* Sorted by order_compare_values, neighbours' keys must agree, and keys must never
 * go down: together with the pairwise checks this exercises transitivity. */
static void test_property_sorted_sequence(void **state)
{
    (void)state;
    sample_t *samples = make_random_samples(RANDOM_SAMPLES, UINT64_C(0xabcdef12345));
    size_t distinct = 1;
    qsort(samples, RANDOM_SAMPLES, sizeof *samples, compare_samples_by_order);
    for (size_t i = 1; i < RANDOM_SAMPLES; i++) {
        check_pair(&samples[i - 1], &samples[i]);
        assert_true(keystring_compare(&samples[i - 1].ascending, &samples[i].ascending) <= 0);
        if (order_compare_values(&samples[i - 1].value, &samples[i].value) != 0) {
            distinct++;
        }
    }
    /* The generator must produce both many ties and many distinct values. */
    assert_true(distinct > 500);
    assert_true(distinct < RANDOM_SAMPLES - 200);
    free_samples(samples, RANDOM_SAMPLES);
}

/* Compound keys: components concatenated, some descending, then a record id. */
static void test_property_compound_keys(void **state)
{
    (void)state;
    enum { POOL = 40, KEYS = 1500, COMPONENTS = 3 };
    static const bool descending[COMPONENTS] = {false, true, false};
    sample_t *pool = make_random_samples(POOL, UINT64_C(0xc0ffee));
    size_t (*choice)[COMPONENTS] = calloc(KEYS, sizeof *choice);
    int64_t *record_ids = calloc(KEYS, sizeof *record_ids);
    keystring_t *keys = calloc(KEYS, sizeof *keys);

    for (size_t k = 0; k < KEYS; k++) {
        keystring_init(&keys[k]);
        for (size_t c = 0; c < COMPONENTS; c++) {
            /* A small pool for the first components, so prefixes often tie. */
            choice[k][c] = random_below(c == 0 ? 6 : POOL);
            keystring_append_value(&keys[k], &pool[choice[k][c]].value, descending[c]);
        }
        record_ids[k] = (int64_t)random_below(5) - 2;
        keystring_append_record_id(&keys[k], record_ids[k]);
    }
    for (size_t n = 0; n < 100000; n++) {
        size_t a = random_below(KEYS);
        size_t b = random_below(KEYS);
        int expected = 0;
        for (size_t c = 0; c < COMPONENTS && expected == 0; c++) {
            expected = sign(order_compare_values(&pool[choice[a][c]].value,
                                                 &pool[choice[b][c]].value));
            if (descending[c]) {
                expected = -expected;
            }
        }
        if (expected == 0) {
            expected = record_ids[a] < record_ids[b] ? -1 : record_ids[a] > record_ids[b] ? 1 : 0;
        }
        assert_int_equal(sign(keystring_compare(&keys[a], &keys[b])), expected);
    }
    for (size_t k = 0; k < KEYS; k++) {
        keystring_cleanup(&keys[k]);
    }
    free(keys);
    free(record_ids);
    free(choice);
    free_samples(pool, POOL);
}

/* ---- specific encodings --------------------------------------------------- */

static void test_equal_numbers_encode_identically(void **state)
{
    (void)state;
    const char *fives[] = {"5", "{\"$numberLong\": \"5\"}", "5.0", "{\"$numberDecimal\": \"5\"}",
                           "{\"$numberDecimal\": \"5.00\"}", "{\"$numberDecimal\": \"0.5E1\"}"};
    const char *zeros[] = {"0", "{\"$numberDouble\": \"-0.0\"}", "{\"$numberDecimal\": \"-0\"}",
                           "{\"$numberDecimal\": \"0E-300\"}", "{\"$numberLong\": \"0\"}"};
    const char *nans[] = {"{\"$numberDouble\": \"NaN\"}", "{\"$numberDecimal\": \"NaN\"}",
                          "{\"$numberDecimal\": \"-NaN\"}"};
    const char *big[] = {"{\"$numberLong\": \"9223372036854775807\"}",
                         "{\"$numberDecimal\": \"9223372036854775807\"}",
                         "{\"$numberDecimal\": \"9.223372036854775807000E+18\"}"};
    const char *const *groups[] = {fives, zeros, nans, big};
    size_t sizes[] = {6, 5, 3, 3};

    for (size_t g = 0; g < 4; g++) {
        sample_t first;
        sample_init(&first, holder_of(groups[g][0]));
        for (size_t i = 1; i < sizes[g]; i++) {
            sample_t other;
            sample_init(&other, holder_of(groups[g][i]));
            if (!same_bytes(&first.ascending, &other.ascending)) {
                fail_msg("%s and %s encode differently", groups[g][0], groups[g][i]);
            }
            assert_true(same_bytes(&first.descending, &other.descending));
            sample_cleanup(&other);
        }
        sample_cleanup(&first);
    }
}

static void expect_strictly_increasing(const char *const *values_json, size_t count)
{
    sample_t *samples = calloc(count, sizeof *samples);
    for (size_t i = 0; i < count; i++) {
        sample_init(&samples[i], holder_of(values_json[i]));
    }
    for (size_t i = 1; i < count; i++) {
        if (keystring_compare(&samples[i - 1].ascending, &samples[i].ascending) >= 0) {
            fail_msg("%s does not encode below %s", values_json[i - 1], values_json[i]);
        }
        assert_true(keystring_compare(&samples[i - 1].descending, &samples[i].descending) > 0);
        assert_true(order_compare_values(&samples[i - 1].value, &samples[i].value) < 0);
    }
    for (size_t i = 0; i < count; i++) {
        sample_cleanup(&samples[i]);
    }
    free(samples);
}

static void test_number_edges_stay_distinct(void **state)
{
    (void)state;
    const char *ladder[] = {
        "{\"$numberDouble\": \"NaN\"}",
        "{\"$numberDouble\": \"-Infinity\"}",
        "{\"$numberDecimal\": \"-1E+400\"}",
        "{\"$numberDouble\": \"-1.7976931348623157E+308\"}",
        "{\"$numberLong\": \"-9223372036854775808\"}",
        "{\"$numberLong\": \"-9007199254740993\"}",
        "{\"$numberDouble\": \"-9007199254740992\"}",
        "-1",
        "{\"$numberDecimal\": \"-1E-400\"}",
        "0",
        "{\"$numberDecimal\": \"1E-400\"}",
        "{\"$numberDouble\": \"4.9406564584124654E-324\"}",
        "{\"$numberDecimal\": \"0.1\"}",
        "{\"$numberDouble\": \"0.1\"}",
        "{\"$numberDecimal\": \"0.1000000000000000055511151231257828\"}",
        "1",
        "{\"$numberDecimal\": \"1.000000000000000000000000000000001\"}",
        "{\"$numberDouble\": \"9007199254740992\"}",
        "{\"$numberLong\": \"9007199254740993\"}",
        "{\"$numberDecimal\": \"9007199254740993.5\"}",
        "{\"$numberDouble\": \"9007199254740994\"}",
        "{\"$numberLong\": \"9223372036854775806\"}",
        "{\"$numberLong\": \"9223372036854775807\"}",
        "{\"$numberDecimal\": \"9223372036854775807.5\"}",
        "{\"$numberDouble\": \"9223372036854775808\"}",
        "{\"$numberDouble\": \"1.7976931348623157E+308\"}",
        "{\"$numberDecimal\": \"1E+400\"}",
        "{\"$numberDecimal\": \"1E+401\"}",
        "{\"$numberDouble\": \"Infinity\"}",
    };
    expect_strictly_increasing(ladder, sizeof ladder / sizeof *ladder);
}

static void test_strings_and_nested_values(void **state)
{
    (void)state;
    bson_t *holders[5];
    const char *strings[] = {"", "a", "a\0", "a\0b", "a\x01"};
    const size_t lengths[] = {0, 1, 2, 3, 2};
    keystring_t keys[5];
    for (size_t i = 0; i < 5; i++) {
        bson_iter_t iter;
        holders[i] = bson_new();
        bson_append_utf8(holders[i], "v", 1, strings[i], (int)lengths[i]);
        assert_true(bson_iter_init(&iter, holders[i]) && bson_iter_next(&iter));
        keystring_init(&keys[i]);
        keystring_append_value(&keys[i], bson_iter_value(&iter), false);
    }
    for (size_t i = 1; i < 5; i++) {
        assert_true(keystring_compare(&keys[i - 1], &keys[i]) < 0);
    }
    for (size_t i = 0; i < 5; i++) {
        keystring_cleanup(&keys[i]);
        bson_destroy(holders[i]);
    }

    const char *nested[] = {
        /* Each element by type rank first, then field name, then value. */
        "{}",
        "{\"b\": {\"$minKey\": 1}}",
        "{\"a\": null}",
        "{\"\": 1}",
        "{\"a\": 1}",
        "{\"a\": 1, \"b\": 0}",
        "{\"a\": 2}",
        "{\"aa\": 0}",
        "{\"a\": \"x\"}",
        "{\"a\": {}}",
        "[]",
        "[{\"$minKey\": 1}]",
        "[1]",
        "[1, []]",
        "[1, {\"$maxKey\": 1}]",
        "[2]",
        "[[]]",
    };
    expect_strictly_increasing(nested, sizeof nested / sizeof *nested);
}

static void test_record_ids_order_equal_keys(void **state)
{
    (void)state;
    bson_t *holder = holder_of("\"same\"");
    bson_iter_t iter;
    keystring_t lower, higher, negative;
    assert_true(bson_iter_init(&iter, holder) && bson_iter_next(&iter));
    keystring_init(&lower);
    keystring_init(&higher);
    keystring_init(&negative);
    keystring_append_value(&lower, bson_iter_value(&iter), true);
    keystring_append_value(&higher, bson_iter_value(&iter), true);
    keystring_append_value(&negative, bson_iter_value(&iter), true);
    keystring_append_record_id(&lower, 5);
    keystring_append_record_id(&higher, 6);
    keystring_append_record_id(&negative, -1);
    assert_true(keystring_compare(&lower, &higher) < 0);
    assert_true(keystring_compare(&negative, &lower) < 0);
    keystring_reset(&lower);
    assert_int_equal(lower.length, 0);
    keystring_cleanup(&lower);
    keystring_cleanup(&lower);
    keystring_cleanup(&higher);
    keystring_cleanup(&negative);
    bson_destroy(holder);
}

/* ---- index key generation ------------------------------------------------ */

/* Generates the keys of document_json under pattern_json and checks their values
 * (relaxed extended JSON, in key order) and the multikey flag. */
static void expect_keys(const char *pattern_json, const char *document_json,
                        const char *const *expected, size_t expected_count, bool multikey)
{
    bson_error_t error;
    bson_t *pattern_document = bson_new_from_json((const uint8_t *)pattern_json, -1, &error);
    bson_t *document = bson_new_from_json((const uint8_t *)document_json, -1, &error);
    assert_non_null(pattern_document);
    if (document == NULL) {
        fail_msg("bad JSON %s: %s", document_json, error.message);
    }
    index_keys_pattern_t *pattern = index_keys_pattern_new(pattern_document, &error);
    assert_non_null(pattern);
    index_key_set_t keys;
    if (!index_keys_generate(pattern, document, &keys, &error)) {
        fail_msg("%s on %s: %s", pattern_json, document_json, error.message);
    }
    if (keys.count != expected_count) {
        fail_msg("%s on %s: %zu keys, expected %zu", pattern_json, document_json, keys.count,
                 expected_count);
    }
    for (size_t i = 0; i < keys.count; i++) {
        char *json = bson_as_relaxed_extended_json(keys.keys[i].values, NULL);
        if (strcmp(json, expected[i]) != 0) {
            fail_msg("%s on %s: key %zu is %s, expected %s", pattern_json, document_json, i, json,
                     expected[i]);
        }
        bson_free(json);
        if (i > 0) {
            assert_true(keystring_compare(&keys.keys[i - 1].keystring, &keys.keys[i].keystring) <
                        0);
        }
    }
    assert_int_equal(keys.multikey, multikey);
    index_keys_set_cleanup(&keys);
    index_keys_set_cleanup(&keys);
    index_keys_pattern_destroy(pattern);
    bson_destroy(pattern_document);
    bson_destroy(document);
}

static void expect_key_error(const char *pattern_json, const char *document_json, uint32_t code,
                             const char *message)
{
    bson_error_t error;
    bson_t *pattern_document = bson_new_from_json((const uint8_t *)pattern_json, -1, NULL);
    bson_t *document = bson_new_from_json((const uint8_t *)document_json, -1, NULL);
    index_keys_pattern_t *pattern = index_keys_pattern_new(pattern_document, &error);
    assert_non_null(pattern);
    index_key_set_t keys;
    memset(&error, 0, sizeof error);
    assert_false(index_keys_generate(pattern, document, &keys, &error));
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    assert_int_equal(keys.count, 0);
    index_keys_set_cleanup(&keys);
    index_keys_pattern_destroy(pattern);
    bson_destroy(pattern_document);
    bson_destroy(document);
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__}), (sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static void test_index_keys_scalars_and_missing(void **state)
{
    (void)state;
    expect_keys("{\"a\": 1}", "{\"a\": 5}", KEYS("{ \"\" : 5 }"), false);
    expect_keys("{\"a\": 1}", "{}", KEYS("{ \"\" : null }"), false);
    expect_keys("{\"a\": 1}", "{\"a\": null}", KEYS("{ \"\" : null }"), false);
    expect_keys("{\"a.b\": 1}", "{\"a\": {\"b\": 1}}", KEYS("{ \"\" : 1 }"), false);
    expect_keys("{\"a.b\": 1}", "{\"a\": 3}", KEYS("{ \"\" : null }"), false);
    expect_keys("{\"a\": 1, \"b\": -1}", "{\"b\": \"x\"}", KEYS("{ \"\" : null, \"\" : \"x\" }"),
                false);
    expect_keys("{\"a\": 1}", "{\"a\": {\"b\": [1, 2]}}", KEYS("{ \"\" : { \"b\" : [ 1, 2 ] } }"),
                false);
}

static void test_index_keys_arrays(void **state)
{
    (void)state;
    /* One key per element, duplicates (1 and 1.0 too) removed, the first kept. */
    expect_keys("{\"a\": 1}", "{\"a\": [2, 1, 2, 1.0]}", KEYS("{ \"\" : 1 }", "{ \"\" : 2 }"), true);
    expect_keys("{\"a\": -1}", "{\"a\": [1, 2]}", KEYS("{ \"\" : 2 }", "{ \"\" : 1 }"), true);
    expect_keys("{\"a\": 1}", "{\"a\": [1]}", KEYS("{ \"\" : 1 }"), true);
    /* An empty array is undefined at the end of the path, null inside it. */
    expect_keys("{\"a\": 1}", "{\"a\": []}", KEYS("{ \"\" : { \"$undefined\" : true } }"), true);
    expect_keys("{\"a.b\": 1}", "{\"a\": []}", KEYS("{ \"\" : null }"), true);
    expect_keys("{\"a.b\": 1}", "{\"a\": [{\"b\": []}, {\"b\": 1}]}",
                KEYS("{ \"\" : { \"$undefined\" : true } }", "{ \"\" : 1 }"), true);
    /* Nested arrays are not expanded further. */
    expect_keys("{\"a\": 1}", "{\"a\": [[1, 2], 3]}", KEYS("{ \"\" : 3 }", "{ \"\" : [ 1, 2 ] }"),
                true);
    /* Arrays of sub-documents under a dotted path; elements lacking the field
     * (or not documents) index as null. */
    expect_keys("{\"a.b\": 1}", "{\"a\": [{\"b\": 1}, {\"c\": 2}, 3]}",
                KEYS("{ \"\" : null }", "{ \"\" : 1 }"), true);
    expect_keys("{\"a.b\": 1}", "{\"a\": {\"b\": [1, 2]}}", KEYS("{ \"\" : 1 }", "{ \"\" : 2 }"),
                true);
    expect_keys("{\"a.b.c\": 1}",
                "{\"a\": [{\"b\": [{\"c\": 1}, {\"c\": 2}]}, {\"b\": {\"c\": 3}}]}",
                KEYS("{ \"\" : 1 }", "{ \"\" : 2 }", "{ \"\" : 3 }"), true);
}

static void test_index_keys_compound(void **state)
{
    (void)state;
    expect_keys("{\"a\": 1, \"b\": 1}", "{\"a\": [1, 2], \"b\": 5}",
                KEYS("{ \"\" : 1, \"\" : 5 }", "{ \"\" : 2, \"\" : 5 }"), true);
    /* Keys follow each field's direction. */
    expect_keys("{\"a\": 1, \"b.c\": -1}", "{\"a\": 5, \"b\": [{\"c\": 1}, {\"c\": 2}]}",
                KEYS("{ \"\" : 5, \"\" : 2 }", "{ \"\" : 5, \"\" : 1 }"), true);
    /* Paths through the same array stay correlated, element by element. */
    expect_keys("{\"a.b\": 1, \"a.c\": 1}",
                "{\"a\": [{\"b\": 1, \"c\": 2}, {\"b\": 3, \"c\": 4}]}",
                KEYS("{ \"\" : 1, \"\" : 2 }", "{ \"\" : 3, \"\" : 4 }"), true);
    expect_keys("{\"a\": 1, \"a.b\": 1}", "{\"a\": [{\"b\": 1}, {\"b\": 2}]}",
                KEYS("{ \"\" : { \"b\" : 1 }, \"\" : 1 }", "{ \"\" : { \"b\" : 2 }, \"\" : 2 }"),
                true);
}

static void test_index_keys_positional_paths(void **state)
{
    (void)state;
    /* "a.0" selects the first element: one key, not multikey. */
    expect_keys("{\"a.0\": 1}", "{\"a\": [5, 6]}", KEYS("{ \"\" : 5 }"), false);
    expect_keys("{\"a.0\": 1}", "{\"a\": [[1, 2]]}", KEYS("{ \"\" : [ 1, 2 ] }"), false);
    expect_keys("{\"a.1.b\": 1}", "{\"a\": [{\"b\": 1}, {\"b\": 2}]}", KEYS("{ \"\" : 2 }"), false);
    /* A document field named "0" inside the array is ambiguous with the position. */
    expect_key_error("{\"a.0\": 1}", "{\"a\": [{\"0\": 1}]}", 16746, NULL);
}

static void test_index_keys_errors(void **state)
{
    (void)state;
    expect_key_error("{\"a\": 1, \"b\": 1}", "{\"a\": [1, 2], \"b\": [3]}", 171,
                     "cannot index parallel arrays [b] [a]");
    expect_key_error("{\"a.x\": 1, \"b.y\": -1}", "{\"a\": [{\"x\": 1}], \"b\": [{\"y\": 1}]}",
                     171, "cannot index parallel arrays [b] [a]");

    bson_error_t error;
    bson_t empty = BSON_INITIALIZER;
    assert_null(index_keys_pattern_new(&empty, &error));
    assert_int_equal(error.code, 67);
    bson_t *hashed = bson_new_from_json((const uint8_t *)"{\"a\": \"hashed\"}", -1, NULL);
    assert_null(index_keys_pattern_new(hashed, &error));
    assert_int_equal(error.code, 67);
    bson_destroy(hashed);
    index_keys_pattern_destroy(NULL);
}

/* An index key's keystring is its values' components, encoded one by one. */
static void test_index_key_matches_component_encoding(void **state)
{
    (void)state;
    bson_error_t error;
    bson_t *pattern_document =
        bson_new_from_json((const uint8_t *)"{\"a\": 1, \"b\": -1}", -1, NULL);
    bson_t *document = bson_new_from_json(
        (const uint8_t *)"{\"b\": {\"$numberDecimal\": \"2.5\"}, \"a\": \"x\"}", -1, NULL);
    index_keys_pattern_t *pattern = index_keys_pattern_new(pattern_document, &error);
    assert_int_equal(index_keys_pattern_field_count(pattern), 2);
    index_key_set_t keys;
    assert_true(index_keys_generate(pattern, document, &keys, &error));
    assert_int_equal(keys.count, 1);

    keystring_t expected;
    bson_iter_t iter;
    keystring_init(&expected);
    assert_true(bson_iter_init_find(&iter, document, "a"));
    keystring_append_value(&expected, bson_iter_value(&iter), false);
    assert_true(bson_iter_init_find(&iter, document, "b"));
    keystring_append_value(&expected, bson_iter_value(&iter), true);
    assert_true(same_bytes(&expected, &keys.keys[0].keystring));

    keystring_cleanup(&expected);
    index_keys_set_cleanup(&keys);
    index_keys_pattern_destroy(pattern);
    bson_destroy(pattern_document);
    bson_destroy(document);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property_pairwise),
        cmocka_unit_test(test_property_sorted_sequence),
        cmocka_unit_test(test_property_compound_keys),
        cmocka_unit_test(test_equal_numbers_encode_identically),
        cmocka_unit_test(test_number_edges_stay_distinct),
        cmocka_unit_test(test_strings_and_nested_values),
        cmocka_unit_test(test_record_ids_order_equal_keys),
        cmocka_unit_test(test_index_keys_scalars_and_missing),
        cmocka_unit_test(test_index_keys_arrays),
        cmocka_unit_test(test_index_keys_compound),
        cmocka_unit_test(test_index_keys_positional_paths),
        cmocka_unit_test(test_index_keys_errors),
        cmocka_unit_test(test_index_key_matches_component_encoding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
