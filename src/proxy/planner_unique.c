/* Unique secondary keys across tiers (invariant I7 beyond _id): the archive
 * documents that may hold a key value a write sets, as fault-in filters, so that
 * once they are copied in, the fast tier's own unique index refuses a duplicate
 * with MongoDB's E11000 exactly as one MongoDB would, and nothing is written.
 * Pure: the namespace's unique indexes come in plan_policy_t. A filter may find
 * more than the conflicts (a compound key of which the write sets one field):
 * copying extra documents is harmless, missing one is not. */
#include "proxy/planner_private.h"

#include <string.h>

/* Where a write's new values come from. */
typedef enum value_source {
    SOURCE_DOCUMENT, /* a whole document (insert, replacement): a missing field is null */
    SOURCE_SET,      /* {path: value} of $set or $setOnInsert: fields it names only */
} value_source_t;

typedef enum lookup {
    LOOKUP_VALUE,     /* the field's value is known: in *out */
    LOOKUP_MISSING,   /* the whole document lacks it: its key is null */
    LOOKUP_UNTOUCHED, /* $set leaves it as the stored document has it */
    LOOKUP_UNKNOWN,   /* set, but not to a value known here (a path through an array, a sub-path) */
} lookup_t;

/* The value of dotted path in document (nested fields). */
static lookup_t find_nested(const bson_t *document, const char *path, bson_iter_t *out)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, document)) {
        return LOOKUP_UNKNOWN;
    }
    if (bson_iter_find_descendant(&iter, path, out)) {
        return LOOKUP_VALUE;
    }
    /* A path crossing an array (a.0.b or an array of documents) is multikey: left to
     * the fast tier's index among what it holds. */
    const char *dot = strchr(path, '.');
    while (dot != NULL) {
        char prefix[PLAN_NAMESPACE_SIZE];
        size_t length = (size_t)(dot - path);
        if (length >= sizeof prefix) {
            return LOOKUP_UNKNOWN;
        }
        memcpy(prefix, path, length);
        prefix[length] = '\0';
        if (bson_iter_init(&iter, document) && bson_iter_find_descendant(&iter, prefix, out) &&
            BSON_ITER_HOLDS_ARRAY(out)) {
            return LOOKUP_UNKNOWN;
        }
        dot = strchr(dot + 1, '.');
    }
    return LOOKUP_MISSING;
}

/* The value $set gives path: a key equal to it, or a key naming a prefix whose
 * value holds the rest of the path. */
static lookup_t find_set(const bson_t *set, const char *path, bson_iter_t *out)
{
    bson_iter_t iter;
    size_t path_length = strlen(path);
    if (!bson_iter_init(&iter, set)) {
        return LOOKUP_UNKNOWN;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        size_t key_length = strlen(key);
        if (key_length == path_length && memcmp(key, path, path_length) == 0) {
            *out = iter;
            return LOOKUP_VALUE;
        }
        if (key_length < path_length && path[key_length] == '.' && memcmp(key, path, key_length) == 0) {
            bson_t value;
            uint32_t length;
            const uint8_t *data;
            if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
                return LOOKUP_UNKNOWN;
            }
            bson_iter_document(&iter, &length, &data);
            if (!bson_init_static(&value, data, length)) {
                return LOOKUP_UNKNOWN;
            }
            return find_nested(&value, path + key_length + 1, out); /* missing there: the key is null */
        }
        if (path_length < key_length && key[path_length] == '.' && memcmp(key, path, path_length) == 0) {
            return LOOKUP_UNKNOWN; /* a field inside the key's value changes: its new value is unknown here */
        }
    }
    return LOOKUP_UNTOUCHED;
}

/* An upsert's query gives the inserted document its equality fields: an operator
 * ({$in: ...}, {$gt: ...}) gives no value known here. */
static bool is_operator_document(const bson_iter_t *value)
{
    bson_iter_t inner;
    return BSON_ITER_HOLDS_DOCUMENT(value) && bson_iter_recurse(value, &inner) && bson_iter_next(&inner) &&
           bson_iter_key(&inner)[0] == '$';
}

/* {path: {$eq: value}}, or for an array (each element a key of the multikey
 * index) {path: {$in: elements}}; an empty array is matched as itself. */
static void append_key_condition(bson_t *filter, const char *path, const bson_iter_t *value)
{
    bson_t condition;
    bson_append_document_begin(filter, path, -1, &condition);
    bson_iter_t elements;
    if (BSON_ITER_HOLDS_ARRAY(value) && bson_iter_recurse(value, &elements)) {
        if (bson_iter_next(&elements)) {
            bson_append_iter(&condition, "$in", 3, value);
        } else {
            bson_append_iter(&condition, "$eq", 3, value);
        }
    } else {
        bson_append_iter(&condition, "$eq", 3, value);
    }
    bson_append_document_end(filter, &condition);
}

/* The fault-in filter of one unique index for a write whose new values are
 * `values`; nothing when the write leaves the index's key as it was. */
static void append_index_filter(const bson_t *spec, const bson_t *values, value_source_t source, bool query_values,
                                plan_decision_t *out)
{
    bson_iter_t iter, key_iter, field;
    bson_t key;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return;
    }
    bson_iter_document(&iter, &length, &data);
    if (!bson_init_static(&key, data, length) || !bson_iter_init(&key_iter, &key)) {
        return;
    }
    bool sparse = bson_iter_init_find(&iter, spec, "sparse") && bson_iter_as_bool(&iter);
    bool touched = false, any_present = false;
    uint32_t conditions = 0;
    bson_t conjunction = BSON_INITIALIZER;
    while (bson_iter_next(&key_iter)) {
        const char *path = bson_iter_key(&key_iter);
        lookup_t found = source == SOURCE_DOCUMENT ? find_nested(values, path, &field) : find_set(values, path, &field);
        if (found == LOOKUP_VALUE && query_values && is_operator_document(&field)) {
            found = LOOKUP_UNKNOWN;
        }
        switch (found) {
        case LOOKUP_VALUE:
            touched = any_present = true;
            append_key_condition(&conjunction, path, &field);
            conditions++;
            break;
        case LOOKUP_MISSING: {
            touched = true;
            bson_t condition; /* a missing field's key is null: {$eq: null} also finds missing ones */
            bson_append_document_begin(&conjunction, path, -1, &condition);
            BSON_APPEND_NULL(&condition, "$eq");
            bson_append_document_end(&conjunction, &condition);
            conditions++;
            break;
        }
        case LOOKUP_UNKNOWN:
            touched = any_present = true;
            break;
        case LOOKUP_UNTOUCHED:
            break;
        }
    }
    /* Untouched: the key stays. A sparse index holds no key for a document without
     * any of its fields. No condition known: nothing here bounds what to copy. */
    if (!touched || (sparse && !any_present) || conditions == 0) {
        bson_destroy(&conjunction);
        return;
    }
    char index[16];
    const char *array_key;
    size_t key_length = bson_uint32_to_string(out->fault_in_filter_count, &array_key, index, sizeof index);
    bson_t entry, filter, clauses;
    bson_append_document_begin(&out->fault_in_filters, array_key, (int)key_length, &entry);
    BSON_APPEND_DOCUMENT_BEGIN(&entry, "filter", &filter);
    if (bson_iter_init_find(&iter, spec, "partialFilterExpression") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        /* Only documents in the partial index can conflict. */
        BSON_APPEND_ARRAY_BEGIN(&filter, "$and", &clauses);
        bson_append_iter(&clauses, "0", 1, &iter);
        BSON_APPEND_DOCUMENT(&clauses, "1", &conjunction);
        bson_append_array_end(&filter, &clauses);
    } else {
        bson_concat(&filter, &conjunction);
    }
    bson_append_document_end(&entry, &filter);
    if (bson_iter_init_find(&iter, spec, "collation") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_append_iter(&entry, "collation", 9, &iter);
    }
    bson_append_document_end(&out->fault_in_filters, &entry);
    out->fault_in_filter_count++;
    bson_destroy(&conjunction);
}

static void append_unique_filters(const plan_policy_t *policy, const bson_t *values, value_source_t source,
                                  bool query_values, plan_decision_t *out)
{
    bson_iter_t indexes, spec;
    if (policy == NULL || policy->unique_indexes == NULL || !bson_iter_init(&indexes, policy->unique_indexes)) {
        return;
    }
    while (bson_iter_next(&indexes)) {
        bson_t spec_document;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&indexes)) {
            continue;
        }
        spec = indexes;
        bson_iter_document(&spec, &length, &data);
        if (bson_init_static(&spec_document, data, length)) {
            append_index_filter(&spec_document, values, source, query_values, out);
        }
    }
}

void planner_unique_keys_of_document(const plan_policy_t *policy, const bson_t *document, plan_decision_t *out)
{
    append_unique_filters(policy, document, SOURCE_DOCUMENT, false, out);
}

void planner_unique_keys_of_update(const plan_policy_t *policy, const bson_iter_t *update, const bson_t *query,
                                   bool upsert, plan_decision_t *out)
{
    bson_iter_t operators;
    bson_t document;
    uint32_t length;
    const uint8_t *data;
    if (!BSON_ITER_HOLDS_DOCUMENT(update)) {
        return; /* a pipeline: what it sets is known only once it runs (README: limits) */
    }
    bson_iter_document(update, &length, &data);
    if (!bson_init_static(&document, data, length) || !bson_iter_init(&operators, &document)) {
        return;
    }
    if (!bson_iter_next(&operators)) {
        append_unique_filters(policy, &document, SOURCE_DOCUMENT, false, out); /* {} replaces the document */
        return;
    }
    if (bson_iter_key(&operators)[0] != '$') {
        append_unique_filters(policy, &document, SOURCE_DOCUMENT, false, out); /* a replacement */
        return;
    }
    do {
        const char *name = bson_iter_key(&operators);
        bool sets = strcmp(name, "$set") == 0 || (upsert && strcmp(name, "$setOnInsert") == 0);
        bson_t values;
        if (sets && BSON_ITER_HOLDS_DOCUMENT(&operators)) {
            bson_iter_document(&operators, &length, &data);
            if (bson_init_static(&values, data, length)) {
                append_unique_filters(policy, &values, SOURCE_SET, false, out);
            }
        }
    } while (bson_iter_next(&operators));
    if (upsert && query != NULL) {
        /* An upsert that inserts takes the query's equality fields too. */
        append_unique_filters(policy, query, SOURCE_SET, true, out);
    }
}
