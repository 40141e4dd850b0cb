/* The seed document of an upsert: the equalities of the statement's filter, as
 * mongod's extractEqualityMatches finds them, set at their paths before the update
 * applies (only _id for a replacement). */
#include "query/update_private.h"

#include <stdlib.h>
#include <string.h>

typedef struct equality {
    char *path;
    bson_value_t value; /* a shallow copy: strings and documents point into the filter */
} equality_t;

typedef struct equality_list {
    equality_t *items;
    size_t count;
    size_t capacity;
} equality_list_t;

static bool add_equality(equality_list_t *list, const char *path, const bson_value_t *value,
                         bool only_id, bson_error_t *error)
{
    if (only_id) {
        if (strcmp(path, "_id") != 0) {
            if (update_path_string_is_prefix("_id", path)) {
                return tc_error_set(error, TC_ERR_NOT_EXACT_VALUE_FIELD,
                                    "field at '_id' must be exactly specified, field at sub-path "
                                    "'%s'found",
                                    path);
            }
            return true;
        }
    }
    for (size_t i = 0; i < list->count; i++) {
        const char *existing = list->items[i].path;
        if (strcmp(existing, path) == 0) {
            return tc_error_set(error, TC_ERR_NOT_SINGLE_VALUE_FIELD,
                                "cannot infer query fields to set, path '%s' is matched twice",
                                path);
        }
        if (update_path_string_is_prefix(existing, path) || update_path_string_is_prefix(path, existing)) {
            bool existing_shorter = strlen(existing) < strlen(path);
            return tc_error_set(error, TC_ERR_NOT_SINGLE_VALUE_FIELD,
                                "cannot infer query fields to set, both paths '%s' and '%s' are "
                                "matched",
                                existing_shorter ? path : existing,
                                existing_shorter ? existing : path);
        }
    }
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? list->capacity * 2 : 8;
        list->items = bson_realloc(list->items, list->capacity * sizeof *list->items);
    }
    list->items[list->count].path = bson_strdup(path);
    list->items[list->count].value = *value;
    list->count++;
    return true;
}

/* The equality conditions of a filter, as mongod's extractEqualityMatches finds them
 * in the canonicalised query (one-element $in and one-branch $or become equalities). */
static bool collect_equalities(const bson_t *filter, equality_list_t *list, bool only_id,
                               bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, filter)) {
        return true;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (key[0] == '$') {
            bson_iter_t branches;
            bool is_and = strcmp(key, "$and") == 0;
            bool is_single_or = strcmp(key, "$or") == 0 && BSON_ITER_HOLDS_ARRAY(&iter) &&
                                bson_iter_recurse(&iter, &branches) && bson_iter_next(&branches) &&
                                !bson_iter_next(&branches);
            if ((!is_and && !is_single_or) || !BSON_ITER_HOLDS_ARRAY(&iter)) {
                continue;
            }
            bson_iter_recurse(&iter, &branches);
            while (bson_iter_next(&branches)) {
                bson_t branch;
                const uint8_t *data;
                uint32_t length;
                if (!BSON_ITER_HOLDS_DOCUMENT(&branches)) {
                    continue;
                }
                bson_iter_document(&branches, &length, &data);
                if (bson_init_static(&branch, data, length) &&
                    !collect_equalities(&branch, list, only_id, error)) {
                    return false;
                }
            }
            continue;
        }
        bson_iter_t operators;
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &operators) &&
            bson_iter_next(&operators) && bson_iter_key(&operators)[0] == '$') {
            do {
                const char *op = bson_iter_key(&operators);
                bson_iter_t members;
                if (strcmp(op, "$eq") == 0) {
                    if (!add_equality(list, key, bson_iter_value(&operators), only_id, error)) {
                        return false;
                    }
                } else if (strcmp(op, "$in") == 0 && BSON_ITER_HOLDS_ARRAY(&operators) &&
                           bson_iter_recurse(&operators, &members) && bson_iter_next(&members)) {
                    const bson_value_t *single = bson_iter_value(&members);
                    bson_iter_t after = members;
                    if (!bson_iter_next(&after) && single->value_type != BSON_TYPE_REGEX &&
                        !add_equality(list, key, single, only_id, error)) {
                        return false;
                    }
                }
            } while (bson_iter_next(&operators));
            continue;
        }
        if (BSON_ITER_HOLDS_REGEX(&iter)) {
            continue;
        }
        if (!add_equality(list, key, bson_iter_value(&iter), only_id, error)) {
            return false;
        }
    }
    return true;
}

static int equality_compare(const void *left, const void *right)
{
    return strcmp(((const equality_t *)left)->path, ((const equality_t *)right)->path);
}

bool update_build_upsert_seed(const update_spec_t *spec, const bson_t *filter, bson_t *out_document,
                              bson_error_t *error)
{
    equality_list_t list = {0};
    update_apply_context_t context;
    bool ok = false;
    bson_init(out_document);
    memset(&context, 0, sizeof context);
    context.root = update_element_new(NULL, BSON_TYPE_DOCUMENT);
    context.error = error;
    TC_CHECK(collect_equalities(filter, &list, spec != NULL && spec->replacement, error));
    if (list.count > 1) {
        qsort(list.items, list.count, sizeof *list.items, equality_compare);
    }
    for (size_t i = 0; i < list.count; i++) {
        update_path_t path;
        size_t resolved;
        TC_CHECK(update_path_parse(list.items[i].path, &path, error));
        context.path = path;
        update_element_t *deepest =
            update_path_resolve(context.root, path.parts, path.count, &resolved);
        bool created = resolved == path.count ||
                       update_create_path(&context, deepest, resolved,
                                          update_element_from_value(NULL, &list.items[i].value));
        update_path_cleanup(&context.path);
        TC_CHECK(created);
    }
    update_element_append_children(out_document, context.root);
    ok = true;
done:
    if (!ok) {
        bson_reinit(out_document);
    }
    for (size_t i = 0; i < list.count; i++) {
        bson_free(list.items[i].path);
    }
    bson_free(list.items);
    update_element_destroy(context.root);
    return ok;
}
