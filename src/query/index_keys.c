/* Index key generation, following mongod's BtreeKeyGenerator step by step: walk
 * every indexed path, expand the single array the paths may meet at each level into
 * one recursion per element, and collect the keys in keystring order. */
#include "query/index_keys.h"

#include <stdlib.h>
#include <string.h>

#include "query/order.h"

struct index_keys_pattern {
    size_t count;
    char **paths;
    bool *descending;
    const collation_t *collation; /* a reference; NULL: binary string keys */
};

/* A BSON element found along a path; its value points into the document. */
typedef struct path_element {
    bool present;
    const char *name;
    bson_value_t value;
} path_element_t;

/* For a path such as "a.1.b" whose next component indexes an array by position,
 * the element it selects, looked up once per array rather than once per element
 * (mongod's PositionalPathInfo). */
typedef struct positional_info {
    bool has_indexed_element;
    path_element_t indexed_element;
    const uint8_t *array_data;
    uint32_t array_length;
    const char *remaining_path;
    path_element_t dotted_element;
} positional_info_t;

typedef struct pending_key {
    index_key_t key;
    size_t sequence; /* generation order, so deduplication keeps the first */
} pending_key_t;

typedef struct generator {
    const index_keys_pattern_t *pattern;
    positional_info_t *no_positional_info;
    pending_key_t *keys;
    size_t count;
    size_t capacity;
    bool multikey;
    bson_error_t *error;
} generator_t;

static const uint8_t empty_document[5] = {5, 0, 0, 0, 0};

index_keys_pattern_t *index_keys_pattern_new(const bson_t *key_pattern, bson_error_t *error)
{
    index_keys_pattern_t *pattern = NULL;
    bson_iter_t iter;
    size_t count = 0;

    if (!bson_iter_init(&iter, key_pattern)) {
        tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX, "Index key pattern is not valid BSON.");
        goto fail;
    }
    while (bson_iter_next(&iter)) {
        count++;
    }
    if (count == 0) {
        tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX, "Index keys cannot be empty.");
        goto fail;
    }
    pattern = BSON_ALIGNED_ALLOC0(index_keys_pattern_t);
    pattern->paths = bson_malloc0(count * sizeof *pattern->paths);
    pattern->descending = bson_malloc0(count * sizeof *pattern->descending);
    bson_iter_init(&iter, key_pattern);
    while (bson_iter_next(&iter)) {
        const char *path = bson_iter_key(&iter);
        if (path[0] == '\0') {
            tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX, "Index keys cannot be an empty field.");
            goto fail;
        }
        if (!BSON_ITER_HOLDS_NUMBER(&iter) && !BSON_ITER_HOLDS_DECIMAL128(&iter)) {
            tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX,
                         "Index key '%s' must be 1 or -1: special index types are not supported",
                         path);
            goto fail;
        }
        /* As mongod's Ordering: negative means descending, anything else ascending. */
        order_number_t direction;
        order_number_locate(bson_iter_value(&iter), &direction);
        pattern->descending[pattern->count] = !direction.is_nan && direction.negative;
        pattern->paths[pattern->count] = bson_strdup(path);
        pattern->count++;
    }
    return pattern;

fail:
    index_keys_pattern_destroy(pattern);
    return NULL;
}

size_t index_keys_pattern_field_count(const index_keys_pattern_t *pattern)
{
    return pattern->count;
}

void index_keys_pattern_set_collation(index_keys_pattern_t *pattern, const collation_t *collation)
{
    collation_release(pattern->collation);
    pattern->collation = collation_retain(collation);
}

void index_keys_pattern_destroy(index_keys_pattern_t *pattern)
{
    if (pattern == NULL) {
        return;
    }
    collation_release(pattern->collation);
    for (size_t i = 0; i < pattern->count; i++) {
        bson_free(pattern->paths[i]);
    }
    bson_free(pattern->paths);
    bson_free(pattern->descending);
    bson_free(pattern);
}

/* The first field called name (of name_length bytes) in a BSON document. */
static bool find_field(const uint8_t *data, size_t length, const char *name, size_t name_length,
                       path_element_t *out)
{
    bson_iter_t iter;
    out->present = false;
    if (!bson_iter_init_from_data(&iter, data, length) ||
        !bson_iter_find_w_len(&iter, name, (int)name_length)) {
        return false;
    }
    out->present = true;
    out->name = bson_iter_key(&iter);
    out->value = *bson_iter_value(&iter);
    return true;
}

/* Follows *path through sub-documents, stopping early at an array; advances *path
 * past what was consumed (dotted_path_support's extractElementAtPathOrArrayAlongPath).
 * A scalar met before the path ends means the path is missing. */
static void extract_at_path_or_array(const uint8_t *data, size_t length, const char **path,
                                     path_element_t *out)
{
    for (;;) {
        const char *dot = strchr(*path, '.');
        size_t part_length = dot != NULL ? (size_t)(dot - *path) : strlen(*path);
        bool found = find_field(data, length, *path, part_length, out);
        *path = dot != NULL ? dot + 1 : *path + part_length;
        if (!found) {
            return;
        }
        if (out->value.value_type == BSON_TYPE_ARRAY || **path == '\0') {
            return;
        }
        if (out->value.value_type != BSON_TYPE_DOCUMENT) {
            out->present = false;
            return;
        }
        data = out->value.value.v_doc.data;
        length = out->value.value.v_doc.data_len;
    }
}

/* The next element along *field from object, or the positionally indexed element of
 * the enclosing array when object lacks the field. */
static bool extract_next_element(generator_t *generator, const uint8_t *object,
                                 size_t object_length, const positional_info_t *positional,
                                 const char **field, bool *out_array_nested_in_array,
                                 path_element_t *out)
{
    const char *dot = strchr(*field, '.');
    size_t first_length = dot != NULL ? (size_t)(dot - *field) : strlen(*field);
    path_element_t probe;
    bool have_object_field = find_field(object, object_length, *field, first_length, &probe);

    if (have_object_field && positional->has_indexed_element) {
        bson_t array;
        char *array_json = NULL;
        if (bson_init_static(&array, positional->array_data, positional->array_length)) {
            array_json = bson_as_relaxed_extended_json(&array, NULL);
        }
        tc_error_set(generator->error, TC_ERR_INDEX_AMBIGUOUS_ARRAY_FIELD,
                     "Ambiguous field name found in array (do not use numeric field names in "
                     "embedded elements in an array), field: '%s' for array: %s",
                     positional->indexed_element.name, array_json ? array_json : "?");
        bson_free(array_json);
        return false;
    }
    *out_array_nested_in_array = false;
    if (have_object_field) {
        extract_at_path_or_array(object, object_length, field, out);
    } else if (positional->has_indexed_element) {
        *out_array_nested_in_array =
            positional->indexed_element.value.value_type == BSON_TYPE_ARRAY;
        *field = positional->remaining_path;
        *out = positional->dotted_element;
    } else {
        out->present = false;
    }
    return true;
}

static void emit_key(generator_t *generator, const path_element_t *fixed)
{
    if (generator->count == generator->capacity) {
        generator->capacity = generator->capacity == 0 ? 4 : generator->capacity * 2;
        generator->keys =
            bson_realloc(generator->keys, generator->capacity * sizeof *generator->keys);
    }
    pending_key_t *pending = &generator->keys[generator->count];
    pending->sequence = generator->count;
    keystring_init(&pending->key.keystring);
    pending->key.values = bson_new();
    for (size_t i = 0; i < generator->pattern->count; i++) {
        bson_value_t null_value = {.value_type = BSON_TYPE_NULL};
        const bson_value_t *value = fixed[i].present ? &fixed[i].value : &null_value;
        keystring_append_value_collated(&pending->key.keystring, value, generator->pattern->descending[i],
                                        generator->pattern->collation);
        bson_append_value(pending->key.values, "", 0, value);
    }
    generator->count++;
}

static bool generate_with_array(generator_t *generator, const char **fields,
                                path_element_t *fixed, const uint8_t *object,
                                size_t object_length, const positional_info_t *positional);

/* One array element's turn (mongod's _getKeysArrEltFixed): paths that ended at the
 * array take the element (or the whole array when it may not be expanded), and the
 * others continue inside the element. */
static bool generate_for_element(generator_t *generator, const char **fields,
                                 const path_element_t *fixed, const char **fields_scratch,
                                 path_element_t *fixed_scratch, const path_element_t *entry,
                                 const path_element_t *array_element, const bool *through_array,
                                 bool may_expand_array, const positional_info_t *positional)
{
    size_t count = generator->pattern->count;
    memcpy(fields_scratch, fields, count * sizeof *fields);
    memcpy(fixed_scratch, fixed, count * sizeof *fixed);
    for (size_t i = 0; i < count; i++) {
        if (through_array[i] && *fields_scratch[i] == '\0') {
            fixed_scratch[i] = may_expand_array ? *entry : *array_element;
        }
    }
    if (entry->value.value_type == BSON_TYPE_DOCUMENT) {
        return generate_with_array(generator, fields_scratch, fixed_scratch,
                                   entry->value.value.v_doc.data,
                                   entry->value.value.v_doc.data_len, positional);
    }
    return generate_with_array(generator, fields_scratch, fixed_scratch, empty_document,
                               sizeof empty_document, positional);
}

/* mongod's _getKeysWithArray. fields[i] is what remains of path i ("" once resolved)
 * and fixed[i] its value once known; both are this call's to modify. */
static bool generate_with_array(generator_t *generator, const char **fields,
                                path_element_t *fixed, const uint8_t *object,
                                size_t object_length, const positional_info_t *positional)
{
    size_t count = generator->pattern->count;
    path_element_t array_element = {.present = false};
    bool may_expand_array = true;
    bool ok = false;
    bool *through_array = bson_malloc0(count * sizeof *through_array);
    const char **fields_scratch = NULL;
    path_element_t *fixed_scratch = NULL;
    positional_info_t *element_positional = NULL;

    for (size_t i = 0; i < count; i++) {
        if (*fields[i] == '\0') {
            continue;
        }
        bool array_nested_in_array;
        path_element_t element;
        TC_CHECK(extract_next_element(generator, object, object_length, &positional[i],
                                      &fields[i], &array_nested_in_array, &element));
        if (!element.present) {
            fixed[i] = (path_element_t){.present = true, .name = "",
                                        .value = {.value_type = BSON_TYPE_NULL}};
            fields[i] = "";
        } else if (element.value.value_type == BSON_TYPE_ARRAY) {
            through_array[i] = true;
            if (!array_element.present) {
                array_element = element;
            } else if (element.value.value.v_doc.data != array_element.value.value.v_doc.data) {
                tc_error_set(generator->error, TC_ERR_CANNOT_INDEX_PARALLEL_ARRAYS,
                             "cannot index parallel arrays [%s] [%s]", element.name,
                             array_element.name);
                goto done;
            }
            if (array_nested_in_array) {
                may_expand_array = false;
            }
        } else {
            fixed[i] = element;
        }
    }

    if (!array_element.present) {
        emit_key(generator, fixed);
        ok = true;
        goto done;
    }

    fields_scratch = bson_malloc0(count * sizeof *fields_scratch);
    fixed_scratch = bson_malloc0(count * sizeof *fixed_scratch);
    const uint8_t *array_data = array_element.value.value.v_doc.data;
    uint32_t array_length = array_element.value.value.v_doc.data_len;
    bson_iter_t iter;
    bool has_elements = bson_iter_init_from_data(&iter, array_data, array_length) &&
                        bson_iter_next(&iter);

    if (!has_elements) {
        /* An empty array indexes as undefined where the path ends at it, and as null
         * (the path goes missing) where the path continues past it. */
        if (may_expand_array) {
            for (size_t i = 0; i < count; i++) {
                generator->multikey = generator->multikey || through_array[i];
            }
        }
        path_element_t undefined_entry = {.present = true, .name = "",
                                          .value = {.value_type = BSON_TYPE_UNDEFINED}};
        TC_CHECK(generate_for_element(generator, fields, fixed, fields_scratch, fixed_scratch,
                                      &undefined_entry, &array_element, through_array, true,
                                      generator->no_positional_info));
        ok = true;
        goto done;
    }

    element_positional = bson_malloc0(count * sizeof *element_positional);
    for (size_t i = 0; i < count; i++) {
        if (*fields[i] == '\0') {
            if (through_array[i] && may_expand_array) {
                generator->multikey = true;
            }
            continue;
        }
        /* The path continues past the array: a numeric next component such as the
         * "1" of "a.1.b" selects one element, otherwise every element is visited. */
        const char *dot = strchr(fields[i], '.');
        size_t part_length = dot != NULL ? (size_t)(dot - fields[i]) : strlen(fields[i]);
        positional_info_t *info = &element_positional[i];
        if (!find_field(array_data, array_length, fields[i], part_length,
                        &info->indexed_element)) {
            generator->multikey = true;
            continue;
        }
        info->has_indexed_element = true;
        info->array_data = array_data;
        info->array_length = array_length;
        info->remaining_path = fields[i];
        extract_at_path_or_array(array_data, array_length, &info->remaining_path,
                                 &info->dotted_element);
    }

    do {
        path_element_t entry = {.present = true,
                                .name = bson_iter_key(&iter),
                                .value = *bson_iter_value(&iter)};
        TC_CHECK(generate_for_element(generator, fields, fixed, fields_scratch, fixed_scratch,
                                      &entry, &array_element, through_array, may_expand_array,
                                      element_positional));
    } while (bson_iter_next(&iter));
    ok = true;

done:
    bson_free(through_array);
    bson_free(fields_scratch);
    bson_free(fixed_scratch);
    bson_free(element_positional);
    return ok;
}

static int compare_pending_keys(const void *left, const void *right)
{
    const pending_key_t *left_key = left;
    const pending_key_t *right_key = right;
    int result = keystring_compare(&left_key->key.keystring, &right_key->key.keystring);
    if (result != 0) {
        return result;
    }
    return left_key->sequence < right_key->sequence   ? -1
           : left_key->sequence > right_key->sequence ? 1
                                                      : 0;
}

static void destroy_key(index_key_t *key)
{
    keystring_cleanup(&key->keystring);
    bson_destroy(key->values);
    key->values = NULL;
}

bool index_keys_generate(const index_keys_pattern_t *pattern, const bson_t *document,
                         index_key_set_t *out, bson_error_t *error)
{
    size_t count = pattern->count;
    generator_t generator = {.pattern = pattern, .error = error};
    const char **fields = bson_malloc0(count * sizeof *fields);
    path_element_t *fixed = bson_malloc0(count * sizeof *fixed);
    bool ok = false;

    out->keys = NULL;
    out->count = 0;
    out->multikey = false;
    generator.no_positional_info = bson_malloc0(count * sizeof *generator.no_positional_info);
    for (size_t i = 0; i < count; i++) {
        fields[i] = pattern->paths[i];
    }
    TC_CHECK(generate_with_array(&generator, fields, fixed, bson_get_data(document),
                                 document->len, generator.no_positional_info));

    qsort(generator.keys, generator.count, sizeof *generator.keys, compare_pending_keys);
    out->keys = bson_malloc0(generator.count * sizeof *out->keys);
    for (size_t i = 0; i < generator.count; i++) {
        if (out->count > 0 &&
            keystring_compare(&out->keys[out->count - 1].keystring,
                              &generator.keys[i].key.keystring) == 0) {
            destroy_key(&generator.keys[i].key);
            continue;
        }
        out->keys[out->count++] = generator.keys[i].key;
    }
    generator.count = 0;
    out->multikey = generator.multikey;
    ok = true;

done:
    for (size_t i = 0; i < generator.count; i++) {
        destroy_key(&generator.keys[i].key);
    }
    bson_free(generator.keys);
    bson_free(generator.no_positional_info);
    bson_free(fields);
    bson_free(fixed);
    return ok;
}

void index_keys_set_cleanup(index_key_set_t *set)
{
    for (size_t i = 0; i < set->count; i++) {
        destroy_key(&set->keys[i]);
    }
    bson_free(set->keys);
    set->keys = NULL;
    set->count = 0;
    set->multikey = false;
}
