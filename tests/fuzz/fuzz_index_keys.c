/* libFuzzer target: index keys, sort keys and the order they rest on. The input is a
 * key pattern followed by an optional document (each a BSON document whose first 4
 * bytes give its length). Checked on that document and the fixed awkward ones:
 * index_keys_generate never crashes, returns keys sorted without duplicates whose
 * stored values encode back to the key; under the pattern taken as a sort, comparing
 * documents agrees with comparing their sort keys; and for any two values, the order
 * of their keystrings is the order of order_compare_values. */
#include "fuzz_common.h"

#include "query/index_keys.h"
#include "query/keystring.h"
#include "query/order.h"
#include "query/sort.h"

/* Top-level values of the fuzzed document taken into the pairwise order check. */
#define MAX_FUZZED_VALUES 24
#define MAX_FIXED_VALUES 128

typedef struct fixed_pattern {
    const char *json;
    int directions[4]; /* 1 or -1 per field, 0 after the last */
} fixed_pattern_t;

static const fixed_pattern_t fixed_patterns[] = {
    {"{\"a\": 1}", {1}},
    {"{\"a.b\": -1, \"c\": 1}", {-1, 1}},
    {"{\"a.0\": 1, \"b\": 1}", {1, 1}},
    {"{\"_id\": 1, \"items.sku\": -1}", {1, -1}},
    {"{\"b\": 1, \"a\": -1}", {1, -1}},
    {"{\"a.b.c.d\": 1, \"x\": -1, \"s\": 1}", {1, -1, 1}},
};

#define FIXED_PATTERN_COUNT (sizeof fixed_patterns / sizeof fixed_patterns[0])

static int sign(int value)
{
    return (value > 0) - (value < 0);
}

/* A value with its keystrings in both directions, encoded once. */
typedef struct encoded_value {
    bson_value_t value;
    keystring_t ascending;
    keystring_t descending;
} encoded_value_t;

static void encode_value(encoded_value_t *encoded, const bson_value_t *value)
{
    encoded->value = *value;
    keystring_init(&encoded->ascending);
    keystring_init(&encoded->descending);
    keystring_append_value(&encoded->ascending, value, false);
    keystring_append_value(&encoded->descending, value, true);
}

static void check_value_order(const encoded_value_t *left, const encoded_value_t *right)
{
    int expected = sign(order_compare_values(&left->value, &right->value));
    FUZZ_REQUIRE(expected == -sign(order_compare_values(&right->value, &left->value)),
                 "order_compare_values is not antisymmetric");
    int ascending = sign(keystring_compare(&left->ascending, &right->ascending));
    int descending = sign(keystring_compare(&left->descending, &right->descending));
    FUZZ_REQUIRE(ascending == expected && descending == -expected,
                 "keystrings order %d (descending %d), values order %d (types %d, %d)",
                 ascending, descending, expected, (int)left->value.value_type,
                 (int)right->value.value_type);
}

/* directions may be NULL when unknown (the fuzzed pattern); then, and for a document
 * that is not canonical (fuzz_is_canonical), the stored values are not re-encoded. */
static void check_index_keys(const index_keys_pattern_t *pattern, const int *directions,
                             const bson_t *document)
{
    index_key_set_t set;
    bson_error_t error;
    if (index_keys_generate(pattern, document, &set, &error)) {
        FUZZ_REQUIRE(set.count >= 1, "no index key");
        for (size_t i = 0; i < set.count; i++) {
            const index_key_t *key = &set.keys[i];
            FUZZ_REQUIRE(i == 0 || keystring_compare(&set.keys[i - 1].keystring,
                                                     &key->keystring) < 0,
                         "index keys %zu and %zu out of order or duplicated", i - 1, i);
            fuzz_require_valid(key->values, "index key values");
            FUZZ_REQUIRE(bson_count_keys(key->values) == index_keys_pattern_field_count(pattern),
                         "key %zu has %u values for %zu fields", i,
                         bson_count_keys(key->values), index_keys_pattern_field_count(pattern));
            if (directions == NULL) {
                continue;
            }
            keystring_t encoded;
            keystring_init(&encoded);
            bson_iter_t iter;
            FUZZ_REQUIRE(bson_iter_init(&iter, key->values), "key values");
            for (size_t field = 0; bson_iter_next(&iter); field++) {
                keystring_append_value(&encoded, bson_iter_value(&iter), directions[field] < 0);
            }
            FUZZ_REQUIRE(keystring_compare(&encoded, &key->keystring) == 0,
                         "key %zu: its values encode to another keystring", i);
            keystring_cleanup(&encoded);
        }
    }
    index_keys_set_cleanup(&set);
}

static void check_sort(const sort_spec_t *sort, const bson_t *const *documents, size_t count)
{
    keystring_t keys[FUZZ_FIXED_COUNT + 1];
    bool generated[FUZZ_FIXED_COUNT + 1];
    for (size_t i = 0; i < count; i++) {
        bson_error_t error;
        bson_t values = BSON_INITIALIZER;
        keystring_init(&keys[i]);
        generated[i] = sort_key_generate(sort, documents[i], &keys[i], &values, &error);
        if (generated[i]) {
            fuzz_require_valid(&values, "sort key values");
        }
        bson_destroy(&values);
    }
    for (size_t i = 0; i < count; i++) {
        FUZZ_REQUIRE(sort_compare_documents(sort, documents[i], documents[i]) == 0,
                     "document %zu sorts apart from itself", i);
        /* The first document (the fuzzed one, when there is one) against all, the
         * others against their neighbour: every pair would cost too much speed. */
        for (size_t j = i + 1; j < count && (i == 0 || j == i + 1); j++) {
            int forward = sign(sort_compare_documents(sort, documents[i], documents[j]));
            int backward = sign(sort_compare_documents(sort, documents[j], documents[i]));
            FUZZ_REQUIRE(forward == -backward, "sort comparison of %zu and %zu not antisymmetric",
                         i, j);
            if (generated[i] && generated[j]) {
                FUZZ_REQUIRE(forward == sign(keystring_compare(&keys[i], &keys[j])),
                             "documents %zu and %zu: sort keys order %d, comparison %d", i, j,
                             sign(keystring_compare(&keys[i], &keys[j])), forward);
            }
        }
    }
    for (size_t i = 0; i < count; i++) {
        keystring_cleanup(&keys[i]);
    }
}

/* Appends document's top-level values, encoded, to values (they point into document).
 * Keystrings encode arrays without their field names, so the order check holds only
 * for arrays named "0", "1", ... as every array a driver sends is: others are left
 * out. */
static size_t collect_values(const bson_t *document, encoded_value_t *values, size_t count,
                             size_t capacity)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, document)) {
        return count;
    }
    while (count < capacity && bson_iter_next(&iter)) {
        if (fuzz_value_is_canonical(bson_iter_value(&iter))) {
            encode_value(&values[count++], bson_iter_value(&iter));
        }
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static index_keys_pattern_t *compiled_fixed[FIXED_PATTERN_COUNT];
    static encoded_value_t fixed_values[MAX_FIXED_VALUES];
    static size_t fixed_value_count = SIZE_MAX;
    bson_error_t error;
    if (fixed_value_count == SIZE_MAX) {
        for (size_t i = 0; i < FIXED_PATTERN_COUNT; i++) {
            bson_t *pattern =
                bson_new_from_json((const uint8_t *)fixed_patterns[i].json, -1, &error);
            FUZZ_REQUIRE(pattern != NULL, "fixed pattern %zu", i);
            compiled_fixed[i] = index_keys_pattern_new(pattern, &error);
            FUZZ_REQUIRE(compiled_fixed[i] != NULL, "fixed pattern %zu: %s", i, error.message);
            bson_destroy(pattern);
        }
        fixed_value_count = 0;
        for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
            fixed_value_count = collect_values(fuzz_fixed_document(i), fixed_values,
                                               fixed_value_count, MAX_FIXED_VALUES);
        }
    }

    fuzz_reader_t reader;
    bson_t pattern;
    bson_t document;
    fuzz_reader_init(&reader, data, size);
    if (!fuzz_reader_document(&reader, &pattern)) {
        return 0;
    }
    bool have_document = fuzz_reader_document(&reader, &document);

    const bson_t *documents[FUZZ_FIXED_COUNT + 1];
    size_t document_count = 0;
    if (have_document) {
        documents[document_count++] = &document;
    }
    for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
        documents[document_count++] = fuzz_fixed_document(i);
    }

    index_keys_pattern_t *compiled = index_keys_pattern_new(&pattern, &error);
    if (compiled != NULL) {
        for (size_t i = 0; i < document_count; i++) {
            check_index_keys(compiled, NULL, documents[i]);
        }
        index_keys_pattern_destroy(compiled);
    }
    if (have_document) {
        for (size_t i = 0; i < FIXED_PATTERN_COUNT; i++) {
            check_index_keys(compiled_fixed[i],
                             fuzz_is_canonical(&document) ? fixed_patterns[i].directions : NULL,
                             &document);
        }
    }

    sort_spec_t *sort = sort_spec_compile(&pattern, &error);
    if (sort != NULL) {
        check_sort(sort, documents, document_count);
        sort_spec_destroy(sort);
    }

    /* The order check, on the pattern's and the document's own values against each
     * other and against the fixed documents' values. */
    encoded_value_t values[2 * MAX_FUZZED_VALUES];
    size_t value_count = collect_values(&pattern, values, 0, MAX_FUZZED_VALUES);
    if (have_document) {
        value_count = collect_values(&document, values, value_count, 2 * MAX_FUZZED_VALUES);
    }
    for (size_t i = 0; i < value_count; i++) {
        check_value_order(&values[i], &values[i]);
        for (size_t j = i + 1; j < value_count; j++) {
            check_value_order(&values[i], &values[j]);
        }
        for (size_t j = 0; j < fixed_value_count; j++) {
            check_value_order(&values[i], &fixed_values[j]);
        }
    }
    for (size_t i = 0; i < value_count; i++) {
        keystring_cleanup(&values[i].ascending);
        keystring_cleanup(&values[i].descending);
    }
    return 0;
}
