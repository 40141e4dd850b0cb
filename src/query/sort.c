/* Sort specifications and sort keys. As in mongod's SortKeyGenerator, a document's
 * sort key is its smallest index key under an index shaped like the sort spec: an
 * array sorts by its smallest element ascending, largest descending, [] below null. */
#include "query/sort.h"

#include <math.h>
#include <string.h>

#include "query/index_keys.h"
#include "query/keystring.h"
#include "query/order.h"

/* BSONDepth::getMaxAllowableDepth(), the bound on a FieldPath's length. */
#define SORT_MAX_PATH_COMPONENTS 200

struct sort_spec {
    size_t count;
    char **paths;
    int *directions;
    /* All keys together; NULL when the spec is empty. */
    index_keys_pattern_t *pattern;
    /* One pattern per key, for comparing documents whose keys cannot be generated
     * together (parallel arrays). */
    index_keys_pattern_t **single_patterns;
};

/* BSONElement::safeNumberLong: truncation toward zero, NaN as 0, saturating. */
static int64_t safe_number_long(const bson_value_t *value)
{
    order_number_t number;
    double approximation;

    switch (value->value_type) {
    case BSON_TYPE_INT32:
        return value->value.v_int32;
    case BSON_TYPE_INT64:
        return value->value.v_int64;
    case BSON_TYPE_DOUBLE:
        approximation = value->value.v_double;
        break;
    default:
        order_number_locate(value, &number);
        if (number.is_nan) {
            return 0;
        }
        /* No integer lies strictly between a value and the double next to it on the
         * zero side, so truncating that double truncates the value. */
        approximation = number.exact || !number.negative ? number.floor
                                                         : nextafter(number.floor, INFINITY);
        break;
    }
    if (isnan(approximation)) {
        return 0;
    }
    if (approximation >= 9223372036854775808.0) {
        return INT64_MAX;
    }
    if (approximation < -9223372036854775808.0) {
        return INT64_MIN;
    }
    return (int64_t)approximation;
}

/* The value as mongod prints an element in an error message (close to it for
 * types it prints in its own shell syntax). */
static char *describe_value(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_UTF8:
        return bson_strdup_printf("\"%s\"", value->value.v_utf8.str);
    case BSON_TYPE_BOOL:
        return bson_strdup(value->value.v_bool ? "true" : "false");
    case BSON_TYPE_NULL:
        return bson_strdup("null");
    case BSON_TYPE_UNDEFINED:
        return bson_strdup("undefined");
    case BSON_TYPE_MINKEY:
        return bson_strdup("MinKey");
    case BSON_TYPE_MAXKEY:
        return bson_strdup("MaxKey");
    default: {
        bson_t wrapper = BSON_INITIALIZER;
        bson_append_value(&wrapper, "v", 1, value);
        char *json = bson_as_relaxed_extended_json(&wrapper, NULL);
        bson_destroy(&wrapper);
        /* Drop the wrapper: '{ "v" : ' ... ' }'. */
        size_t length = json ? strlen(json) : 0;
        char *described = length > 10 ? bson_strndup(json + 9, length - 11) : bson_strdup("?");
        bson_free(json);
        return described;
    }
    }
}

/* FieldPath's checks on a sort key's path, in its order, codes and messages. */
static bool validate_field_path(const char *path, bson_error_t *error)
{
    static const char *const allowed_dollar_fields[] = {"$id", "$ref", "$db", "$sortKey",
                                                        "$recordId"};
    size_t length = strlen(path);

    if (length == 0) {
        return tc_error_set(error, TC_ERR_FIELD_PATH_EMPTY,
                            "FieldPath cannot be constructed with empty string");
    }
    if (path[length - 1] == '.') {
        return tc_error_set(error, TC_ERR_FIELD_PATH_TRAILING_DOT,
                            "FieldPath must not end with a '.'.");
    }
    size_t components = 1;
    for (const char *dot = strchr(path, '.'); dot != NULL; dot = strchr(dot + 1, '.')) {
        components++;
    }
    if (components > SORT_MAX_PATH_COMPONENTS) {
        return tc_error_set(error, TC_ERR_OVERFLOW, "FieldPath is too long");
    }
    const char *component = path;
    for (;;) {
        const char *dot = strchr(component, '.');
        size_t component_length = dot != NULL ? (size_t)(dot - component) : strlen(component);
        if (component_length == 0) {
            return tc_error_set(error, TC_ERR_FIELD_PATH_EMPTY_COMPONENT,
                                "FieldPath field names may not be empty strings.");
        }
        if (component[0] == '$') {
            bool allowed = false;
            for (size_t i = 0; i < sizeof allowed_dollar_fields / sizeof *allowed_dollar_fields;
                 i++) {
                const char *name = allowed_dollar_fields[i];
                allowed = allowed || (strlen(name) == component_length &&
                                      memcmp(name, component, component_length) == 0);
            }
            if (!allowed) {
                return tc_error_set(error, TC_ERR_FIELD_PATH_DOLLAR_PREFIX,
                                    "FieldPath field names may not start with '$'. Consider "
                                    "using $getField or $setField.");
            }
        }
        if (dot == NULL) {
            return true;
        }
        component = dot + 1;
    }
}

/* {field: {$meta: ...}}: checked as mongod does, then refused, since no metadata
 * (text score, search score) exists here to sort on. */
static bool refuse_meta_sort(const bson_iter_t *element, bson_error_t *error)
{
    static const char *const meta_names[] = {"textScore", "randVal", "searchScore"};
    bson_iter_t inner;
    bson_iter_t copy = *element;

    if (!bson_iter_recurse(&copy, &inner) || !bson_iter_next(&inner) ||
        strcmp(bson_iter_key(&inner), "$meta") != 0) {
        return tc_error_set(error, TC_ERR_SORT_META_ONLY,
                            "$meta is the only expression supported by $sort right now");
    }
    bson_iter_t after = inner;
    if (bson_iter_next(&after)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "Cannot have additional keys in a $meta sort specification");
    }
    bool known = false;
    if (BSON_ITER_HOLDS_UTF8(&inner)) {
        for (size_t i = 0; i < sizeof meta_names / sizeof *meta_names; i++) {
            known = known || strcmp(bson_iter_utf8(&inner, NULL), meta_names[i]) == 0;
        }
    }
    if (!known) {
        char *described = describe_value(bson_iter_value(&inner));
        tc_error_set(error, TC_ERR_SORT_ILLEGAL_META, "Illegal $meta sort: $meta: %s", described);
        bson_free(described);
        return false;
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE,
                        "sorting by $meta is not supported: thermocline has no text or search "
                        "scores; sort on a field instead");
}

sort_spec_t *sort_spec_compile(const bson_t *spec, bson_error_t *error)
{
    sort_spec_t *compiled = BSON_ALIGNED_ALLOC0(sort_spec_t);
    bson_t pattern_document = BSON_INITIALIZER;
    bson_iter_t iter;
    size_t count = 0;

    if (!bson_iter_init(&iter, spec)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "sort specification is not valid BSON");
        goto fail;
    }
    while (bson_iter_next(&iter)) {
        count++;
    }
    compiled->paths = bson_malloc0((count + 1) * sizeof *compiled->paths);
    compiled->directions = bson_malloc0((count + 1) * sizeof *compiled->directions);
    compiled->single_patterns = bson_malloc0((count + 1) * sizeof *compiled->single_patterns);

    bson_iter_init(&iter, spec);
    while (bson_iter_next(&iter)) {
        const char *path = bson_iter_key(&iter);
        if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            refuse_meta_sort(&iter, error);
            goto fail;
        }
        if (!order_is_number(bson_iter_type(&iter))) {
            char *described = describe_value(bson_iter_value(&iter));
            tc_error_set(error, TC_ERR_SORT_ILLEGAL_KEY,
                         "Illegal key in $sort specification: %s: %s", path, described);
            bson_free(described);
            goto fail;
        }
        int64_t direction = safe_number_long(bson_iter_value(&iter));
        if (direction != 1 && direction != -1) {
            tc_error_set(error, TC_ERR_SORT_BAD_ORDER,
                         "$sort key ordering must be 1 (for ascending) or -1 (for descending)");
            goto fail;
        }
        if (!validate_field_path(path, error)) {
            goto fail;
        }
        compiled->paths[compiled->count] = bson_strdup(path);
        compiled->directions[compiled->count] = (int)direction;
        compiled->count++;
        BSON_APPEND_INT32(&pattern_document, path, (int32_t)direction);
    }

    if (compiled->count > 0) {
        compiled->pattern = index_keys_pattern_new(&pattern_document, error);
        if (compiled->pattern == NULL) {
            goto fail;
        }
        for (size_t i = 0; i < compiled->count; i++) {
            bson_t single = BSON_INITIALIZER;
            BSON_APPEND_INT32(&single, compiled->paths[i], compiled->directions[i]);
            compiled->single_patterns[i] = index_keys_pattern_new(&single, error);
            bson_destroy(&single);
            if (compiled->single_patterns[i] == NULL) {
                goto fail;
            }
        }
    }
    bson_destroy(&pattern_document);
    return compiled;

fail:
    bson_destroy(&pattern_document);
    sort_spec_destroy(compiled);
    return NULL;
}

/* The first (smallest under the pattern's directions) index key of document. */
static bool first_index_key(const index_keys_pattern_t *pattern, const bson_t *document,
                            keystring_t *out_key, bson_t *out_values, bson_error_t *error)
{
    index_key_set_t keys;
    if (!index_keys_generate(pattern, document, &keys, error)) {
        index_keys_set_cleanup(&keys);
        return false;
    }
    keystring_append_bytes(out_key, keys.keys[0].keystring.data, keys.keys[0].keystring.length);
    if (out_values != NULL) {
        bson_concat(out_values, keys.keys[0].values);
    }
    index_keys_set_cleanup(&keys);
    return true;
}

bool sort_key_generate(const sort_spec_t *spec, const bson_t *document, keystring_t *out_key,
                       bson_t *out_values, bson_error_t *error)
{
    bson_error_t local_error;
    if (spec->count == 0) {
        return true;
    }
    if (first_index_key(spec->pattern, document, out_key, out_values, &local_error)) {
        return true;
    }
    if (local_error.code == TC_ERR_CANNOT_INDEX_PARALLEL_ARRAYS) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "cannot sort with keys that are parallel arrays");
    }
    if (error != NULL) {
        *error = local_error;
    }
    return false;
}

/* Key by key, each generated alone; a key that still fails sorts as null. */
static int compare_key_by_key(const sort_spec_t *spec, const bson_t *left, const bson_t *right)
{
    keystring_t left_key, right_key;
    int result = 0;

    keystring_init(&left_key);
    keystring_init(&right_key);
    for (size_t i = 0; i < spec->count && result == 0; i++) {
        const bson_t *documents[2] = {left, right};
        keystring_t *keys[2] = {&left_key, &right_key};
        for (int side = 0; side < 2; side++) {
            keystring_reset(keys[side]);
            if (!first_index_key(spec->single_patterns[i], documents[side], keys[side], NULL,
                                 NULL)) {
                bson_value_t null_value = {.value_type = BSON_TYPE_NULL};
                keystring_reset(keys[side]);
                keystring_append_value(keys[side], &null_value, spec->directions[i] < 0);
            }
        }
        result = keystring_compare(&left_key, &right_key);
    }
    keystring_cleanup(&left_key);
    keystring_cleanup(&right_key);
    return result;
}

int sort_compare_documents(const sort_spec_t *spec, const bson_t *left, const bson_t *right)
{
    keystring_t left_key, right_key;
    int result;

    if (spec->count == 0) {
        return 0;
    }
    keystring_init(&left_key);
    keystring_init(&right_key);
    if (sort_key_generate(spec, left, &left_key, NULL, NULL) &&
        sort_key_generate(spec, right, &right_key, NULL, NULL)) {
        result = keystring_compare(&left_key, &right_key);
    } else {
        result = compare_key_by_key(spec, left, right);
    }
    keystring_cleanup(&left_key);
    keystring_cleanup(&right_key);
    return result;
}

void sort_spec_set_collation(sort_spec_t *spec, const collation_t *collation)
{
    if (spec->count == 0) {
        return;
    }
    index_keys_pattern_set_collation(spec->pattern, collation);
    for (size_t i = 0; i < spec->count; i++) {
        index_keys_pattern_set_collation(spec->single_patterns[i], collation);
    }
}

size_t sort_spec_key_count(const sort_spec_t *spec)
{
    return spec->count;
}

const char *sort_spec_key_path(const sort_spec_t *spec, size_t index)
{
    return spec->paths[index];
}

int sort_spec_key_direction(const sort_spec_t *spec, size_t index)
{
    return spec->directions[index];
}

void sort_spec_destroy(sort_spec_t *spec)
{
    if (spec == NULL) {
        return;
    }
    for (size_t i = 0; i < spec->count; i++) {
        bson_free(spec->paths[i]);
        index_keys_pattern_destroy(spec->single_patterns[i]);
    }
    bson_free(spec->paths);
    bson_free(spec->directions);
    bson_free(spec->single_patterns);
    index_keys_pattern_destroy(spec->pattern);
    bson_free(spec);
}
