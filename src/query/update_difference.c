/* The updateDescription of a pipeline-style update: the difference between the
 * document before and after, as mongod's oplog diff (doc_diff.cpp
 * computeDocDiff/computeArrDiff) records it and a change stream reports it:
 *
 *   - a sub-document both sides hold is compared field by field ("a.b");
 *   - an array both sides hold is compared element by element: a changed
 *     element is "a.3" (or, for two sub-documents or two arrays, their own
 *     difference under "a.3."), elements past the old end are "a.4", "a.5"...,
 *     and an array that got shorter is {field: "a", newSize} in
 *     truncatedArrays; an unchanged prefix is left out entirely;
 *   - when that element-wise description would take more bytes than the new
 *     array itself, mongod logs the whole array instead, and so do we (the size
 *     is mongod's encoding of the diff, {a: true, l: n, u0: ..., s1: {...}},
 *     estimated: exact for an array's own elements, near for deeper changes);
 *   - anything else that changed is given whole.
 *
 * Operator updates log their paths as they go (update.c). */
#include "query/update_private.h"

#include <string.h>

/* What is recorded so far; the arrays are numbered as they grow. */
typedef struct difference {
    bson_t updated;
    bson_t removed;
    bson_t truncated;
    uint32_t removed_count;
    uint32_t truncated_count;
    size_t bytes; /* the size of mongod's encoding of the same diff, near enough */
} difference_t;

/* The bytes of mongod's array diff {a: true, l: <newSize>} around its entries. */
#define ARRAY_DIFF_HEADER_BYTES (5 + 4)
#define ARRAY_DIFF_RESIZE_BYTES 7
/* An element's update in an array diff is keyed "u<index>": one byte more than the array's own key. */
#define ARRAY_DIFF_UPDATE_EXTRA_BYTES 1
/* mongod's kAdditionalPaddingForObjectDiff: room it allows a sub-diff over the value, with the
 * names of the fields above it. */
#define DIFF_PADDING_BYTES 5

static void difference_init(difference_t *difference)
{
    memset(difference, 0, sizeof *difference);
    bson_init(&difference->updated);
    bson_init(&difference->removed);
    bson_init(&difference->truncated);
}

static void difference_cleanup(difference_t *difference)
{
    bson_destroy(&difference->updated);
    bson_destroy(&difference->removed);
    bson_destroy(&difference->truncated);
}

static void append_numbered(bson_t *array, uint32_t *count, const bson_value_t *value)
{
    char index_buffer[16];
    const char *key;
    bson_uint32_to_string((*count)++, &key, index_buffer, sizeof index_buffer);
    bson_append_value(array, key, -1, value);
}

/* An update of path to value; element_bytes is the element's size as a diff holds it. */
static void record_update(difference_t *difference, const char *path, const bson_value_t *value,
                          size_t element_bytes)
{
    bson_append_value(&difference->updated, path, -1, value);
    difference->bytes += element_bytes;
}

/* Moves what from recorded into into. */
static void difference_merge(difference_t *into, const difference_t *from)
{
    bson_iter_t iter;
    bson_concat(&into->updated, &from->updated);
    bson_iter_init(&iter, &from->removed);
    while (bson_iter_next(&iter)) {
        append_numbered(&into->removed, &into->removed_count, bson_iter_value(&iter));
    }
    bson_iter_init(&iter, &from->truncated);
    while (bson_iter_next(&iter)) {
        append_numbered(&into->truncated, &into->truncated_count, bson_iter_value(&iter));
    }
    into->bytes += from->bytes;
}

static void child_path(bson_string_t *path, const char *prefix, const char *key)
{
    bson_string_truncate(path, 0);
    if (prefix[0] != '\0') {
        bson_string_append_printf(path, "%s.", prefix);
    }
    bson_string_append(path, key);
}

static void describe_document(const bson_t *before, const bson_t *after, const char *prefix,
                              difference_t *out);

static size_t element_bytes(const bson_iter_t *iter)
{
    return (size_t)(iter->next_off - iter->off);
}

/* One value that differs (or is new) at path: sub-documents and arrays on both
 * sides are described inside, the rest given whole. */
static void describe_value(const bson_value_t *old_value, const bson_value_t *value, const char *path,
                           size_t bytes, difference_t *out);

/* mongod's computeArrDiff; false (nothing recorded) when the description would
 * be larger than the new array, which is then given whole. */
static bool describe_array(const bson_t *before, const bson_t *after, const char *path, difference_t *out)
{
    difference_t local;
    bson_iter_t old_iter, new_iter;
    bson_string_t *element_path = bson_string_new(NULL);
    uint32_t index = 0;
    difference_init(&local);
    local.bytes = ARRAY_DIFF_HEADER_BYTES;
    bson_iter_init(&old_iter, before);
    bson_iter_init(&new_iter, after);
    bool old_more = bson_iter_next(&old_iter);
    bool new_more = bson_iter_next(&new_iter);
    for (; old_more && new_more; index++, old_more = bson_iter_next(&old_iter), new_more = bson_iter_next(&new_iter)) {
        const bson_value_t *old_value = bson_iter_value(&old_iter);
        const bson_value_t *value = bson_iter_value(&new_iter);
        if (!update_values_binary_equal(old_value, value)) {
            bson_string_truncate(element_path, 0);
            bson_string_append_printf(element_path, "%s.%u", path, index);
            describe_value(old_value, value, element_path->str,
                           element_bytes(&new_iter) + ARRAY_DIFF_UPDATE_EXTRA_BYTES, &local);
        }
    }
    for (; new_more; index++, new_more = bson_iter_next(&new_iter)) {
        bson_string_truncate(element_path, 0);
        bson_string_append_printf(element_path, "%s.%u", path, index);
        record_update(&local, element_path->str, bson_iter_value(&new_iter),
                      element_bytes(&new_iter) + ARRAY_DIFF_UPDATE_EXTRA_BYTES);
    }
    if (old_more) {
        bson_value_t truncation = {.value_type = BSON_TYPE_DOCUMENT};
        bson_t entry = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&entry, "field", path);
        BSON_APPEND_INT32(&entry, "newSize", (int32_t)index);
        truncation.value.v_doc.data = (uint8_t *)bson_get_data(&entry);
        truncation.value.v_doc.data_len = entry.len;
        append_numbered(&local.truncated, &local.truncated_count, &truncation);
        bson_destroy(&entry);
        local.bytes += ARRAY_DIFF_RESIZE_BYTES;
    }
    bool smaller = local.bytes < (size_t)after->len + strlen(path) + DIFF_PADDING_BYTES;
    if (smaller) {
        difference_merge(out, &local);
    }
    difference_cleanup(&local);
    bson_string_free(element_path, true);
    return smaller;
}

static void describe_value(const bson_value_t *old_value, const bson_value_t *value, const char *path,
                           size_t bytes, difference_t *out)
{
    bson_t old_child, new_child;
    bool both_documents = value->value_type == BSON_TYPE_DOCUMENT && old_value->value_type == BSON_TYPE_DOCUMENT;
    bool both_arrays = value->value_type == BSON_TYPE_ARRAY && old_value->value_type == BSON_TYPE_ARRAY;
    if (!both_documents && !both_arrays) {
        record_update(out, path, value, bytes);
        return;
    }
    bson_init_static(&old_child, old_value->value.v_doc.data, old_value->value.v_doc.data_len);
    bson_init_static(&new_child, value->value.v_doc.data, value->value.v_doc.data_len);
    if (both_documents) {
        describe_document(&old_child, &new_child, path, out);
    } else if (!describe_array(&old_child, &new_child, path, out)) {
        record_update(out, path, value, bytes);
    }
}

/* Adds to out what turned before into after, under the dotted prefix. */
static void describe_document(const bson_t *before, const bson_t *after, const char *prefix,
                              difference_t *out)
{
    bson_iter_t iter, found;
    bson_string_t *path = bson_string_new(NULL);
    bson_iter_init(&iter, after);
    while (bson_iter_next(&iter)) {
        const bson_value_t *value = bson_iter_value(&iter);
        child_path(path, prefix, bson_iter_key(&iter));
        if (!bson_iter_init_find(&found, before, bson_iter_key(&iter))) {
            record_update(out, path->str, value, element_bytes(&iter));
        } else if (!update_values_binary_equal(bson_iter_value(&found), value)) {
            describe_value(bson_iter_value(&found), value, path->str, element_bytes(&iter), out);
        }
    }
    bson_iter_init(&iter, before);
    while (bson_iter_next(&iter)) {
        if (!bson_iter_init_find(&found, after, bson_iter_key(&iter))) {
            bson_value_t removed_path = {.value_type = BSON_TYPE_UTF8};
            child_path(path, prefix, bson_iter_key(&iter));
            removed_path.value.v_utf8.str = path->str;
            removed_path.value.v_utf8.len = (uint32_t)path->len;
            append_numbered(&out->removed, &out->removed_count, &removed_path);
            out->bytes += element_bytes(&iter);
        }
    }
    bson_string_free(path, true);
}

void update_describe_difference(const bson_t *before, const bson_t *after, bson_t *out)
{
    difference_t difference;
    difference_init(&difference);
    describe_document(before, after, "", &difference);
    bson_init(out);
    BSON_APPEND_DOCUMENT(out, "updatedFields", &difference.updated);
    BSON_APPEND_ARRAY(out, "removedFields", &difference.removed);
    BSON_APPEND_ARRAY(out, "truncatedArrays", &difference.truncated);
    difference_cleanup(&difference);
}
