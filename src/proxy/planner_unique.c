/* Unique secondary keys across tiers (invariant I7 beyond _id): the archive
 * documents that may hold a key value a write sets, as fault-in filters, so that
 * once they are copied in, the fast tier's own unique index refuses a duplicate
 * with MongoDB's E11000 exactly as one MongoDB would, and nothing is written.
 * Pure: the namespace's unique indexes come in plan_policy_t. A filter may find
 * more than the conflicts (a compound key of which the write sets one field):
 * copying extra documents is harmless, missing one is not. A key the update
 * computes from the stored document ($inc, $push, a pipeline...) cannot be named
 * here: the statement is recorded for the router, which computes it (router_unique.c). */
#include "proxy/planner_private.h"

#include "common/bson_view.h"

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

/* Where a filter entry goes: the decision's fault-in filters, or the router's list
 * of computed keys (where equal filters are left out: many documents share a key,
 * and so are the keys the document held before, `unchanged`, NULL-able). */
typedef struct filter_list {
    bson_t *filters;
    uint32_t *count;
    bool skip_equal;
    const bson_t *unchanged;
} filter_list_t;

/* Whether the BSON array entries holds a document equal to entry. */
static bool entries_hold(const bson_t *entries, const bson_t *entry)
{
    bson_iter_t iter;
    bson_t held;
    if (entries == NULL || !bson_iter_init(&iter, entries)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_view_of(&iter, &held) && bson_equal(&held, entry)) {
            return true;
        }
    }
    return false;
}

/* {filter, collation} of one index's conjunction of key conditions. */
static void append_entry(const bson_t *spec, const bson_t *conjunction, const filter_list_t *list)
{
    bson_iter_t iter;
    bson_t entry = BSON_INITIALIZER, filter, clauses;
    BSON_APPEND_DOCUMENT_BEGIN(&entry, "filter", &filter);
    bool partial = bson_iter_init_find(&iter, spec, "partialFilterExpression") && BSON_ITER_HOLDS_DOCUMENT(&iter);
    if (partial) {
        /* Only documents in the partial index can conflict. */
        BSON_APPEND_ARRAY_BEGIN(&filter, "$and", &clauses);
        bson_append_iter(&clauses, "0", 1, &iter);
        BSON_APPEND_DOCUMENT(&clauses, "1", conjunction);
        bson_append_array_end(&filter, &clauses);
    } else {
        bson_concat(&filter, conjunction);
    }
    bson_append_document_end(&entry, &filter);
    if (bson_iter_init_find(&iter, spec, "collation") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_append_iter(&entry, "collation", 9, &iter);
    }
    /* A key the document held stays its own, unless a partial index's filter (which
     * is not evaluated here) may have let the document in only now. */
    bool skipped = list->skip_equal && (entries_hold(list->filters, &entry) ||
                                        (!partial && entries_hold(list->unchanged, &entry)));
    if (!skipped) {
        char index[16];
        const char *array_key;
        size_t key_length = bson_uint32_to_string(*list->count, &array_key, index, sizeof index);
        bson_append_document(list->filters, array_key, (int)key_length, &entry);
        (*list->count)++;
    }
    bson_destroy(&entry);
}

/* The fault-in filter of one unique index for a write whose new values are
 * `values`; nothing when the write leaves the index's key as it was. True when a
 * key path is set to a value not known here (LOOKUP_UNKNOWN). */
static bool append_index_filter(const bson_t *spec, const bson_t *values, value_source_t source, bool query_values,
                                const filter_list_t *list)
{
    bson_iter_t iter, key_iter, field;
    bson_t key;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return false;
    }
    bson_iter_document(&iter, &length, &data);
    if (!bson_init_static(&key, data, length) || !bson_iter_init(&key_iter, &key)) {
        return false;
    }
    bool sparse = bson_iter_init_find(&iter, spec, "sparse") && bson_iter_as_bool(&iter);
    bool touched = false, any_present = false, unknown = false;
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
            touched = any_present = unknown = true;
            break;
        case LOOKUP_UNTOUCHED:
            break;
        }
    }
    /* Untouched: the key stays. A sparse index holds no key for a document without
     * any of its fields. No condition known: nothing here bounds what to copy. */
    if (touched && !(sparse && !any_present) && conditions > 0) {
        append_entry(spec, &conjunction, list);
    }
    bson_destroy(&conjunction);
    return unknown;
}

/* The next dotted component of *path (advanced past it), its length in *out_length;
 * false at the end. */
static bool next_component(const char **path, const char **out_start, size_t *out_length)
{
    if (**path == '\0') {
        return false;
    }
    const char *dot = strchr(*path, '.');
    *out_start = *path;
    *out_length = dot != NULL ? (size_t)(dot - *path) : strlen(*path);
    *path = dot != NULL ? dot + 1 : *path + *out_length;
    return true;
}

/* A component that stands for array elements: positional $, $[], $[<id>], or a
 * number (an index, or a field named by digits: matched either way, a superset). */
static bool is_array_component(const char *start, size_t length)
{
    if (length > 0 && start[0] == '$') {
        return true;
    }
    size_t digits = 0;
    while (digits < length && start[digits] >= '0' && start[digits] <= '9') {
        digits++;
    }
    return length > 0 && digits == length;
}

/* The next component of path that names a field (array components skipped). */
static bool next_field(const char **path, const char **out_start, size_t *out_length, bool *out_skipped)
{
    while (next_component(path, out_start, out_length)) {
        if (!is_array_component(*out_start, *out_length)) {
            return true;
        }
        *out_skipped = true;
    }
    return false;
}

/* Whether an update of update_path may change what is at watched (either is a
 * prefix of the other once array components are left out). *out_through_array:
 * update_path reached it through an array component. */
static bool paths_overlap(const char *update_path, const char *watched, bool *out_through_array)
{
    const char *left = update_path, *right = watched;
    const char *left_start, *right_start;
    size_t left_length, right_length;
    bool skipped = false;
    for (;;) {
        bool left_more = next_field(&left, &left_start, &left_length, &skipped);
        bool unused = false;
        bool right_more = next_field(&right, &right_start, &right_length, &unused);
        if (!left_more || !right_more) {
            *out_through_array = skipped;
            return true; /* one ended: a prefix of the other */
        }
        if (left_length != right_length || memcmp(left_start, right_start, left_length) != 0) {
            return false;
        }
    }
}

/* Whether filter (a partial index's expression) names a path the update changes:
 * the document may then enter or leave the index with a key the planner does not
 * know. Its field names at the top and inside $and/$or. */
static bool filter_names_path(const bson_t *filter, const char *update_path, int depth)
{
    bson_iter_t iter, clauses;
    bool through_array;
    if (depth > PLANNER_MAX_DEPTH || !bson_iter_init(&iter, filter)) {
        return true;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (key[0] != '$') {
            if (paths_overlap(update_path, key, &through_array)) {
                return true;
            }
            continue;
        }
        if (!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &clauses)) {
            continue;
        }
        while (bson_iter_next(&clauses)) {
            bson_t clause;
            if (BSON_ITER_HOLDS_DOCUMENT(&clauses) && bson_view_of(&clauses, &clause) &&
                filter_names_path(&clause, update_path, depth + 1)) {
                return true;
            }
        }
    }
    return false;
}

/* How an update of path, by an operator that sets literal values (literal) or
 * computes them, bears on the index spec: true when the key it gives is not known
 * here. A literal $set of the key path itself is find_set's (known unless it
 * crosses an array); any other operator on a key path, and any change to a field
 * of the partial filter, computes the key. */
static bool path_computes_key(const bson_t *spec, const char *path, bool literal)
{
    bson_iter_t iter, key;
    bool through_array = false;
    if (bson_iter_init_find(&iter, spec, "key") && BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &key)) {
        while (bson_iter_next(&key)) {
            if (paths_overlap(path, bson_iter_key(&key), &through_array) && (!literal || through_array)) {
                return true;
            }
        }
    }
    if (bson_iter_init_find(&iter, spec, "partialFilterExpression") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_t partial;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        return bson_init_static(&partial, data, length) && filter_names_path(&partial, path, 0);
    }
    return false;
}

/* Records spec among the indexes whose keys the router computes (once, by name). */
static void note_computed_index(const bson_t *spec, plan_decision_t *out)
{
    bson_iter_t iter, held, name;
    const char *spec_name = "";
    if (bson_iter_init_find(&iter, spec, "name") && BSON_ITER_HOLDS_UTF8(&iter)) {
        spec_name = bson_iter_utf8(&iter, NULL);
    }
    uint32_t count = 0;
    bson_iter_init(&held, &out->unique_computed_indexes);
    while (bson_iter_next(&held)) {
        count++;
        if (bson_iter_recurse(&held, &name) && bson_iter_find(&name, "name") && BSON_ITER_HOLDS_UTF8(&name) &&
            strcmp(bson_iter_utf8(&name, NULL), spec_name) == 0) {
            return;
        }
    }
    char index[16];
    const char *array_key;
    size_t key_length = bson_uint32_to_string(count, &array_key, index, sizeof index);
    bson_append_document(&out->unique_computed_indexes, array_key, (int)key_length, spec);
}

/* What a unique_scan_fn does with one index spec. */
typedef bool (*unique_scan_fn)(const bson_t *spec, const void *argument, plan_decision_t *out);

/* Calls scan on each index spec of the array indexes (NULL: none); true when one
 * of them returned true. */
static bool scan_indexes(const bson_t *indexes, unique_scan_fn scan, const void *argument, plan_decision_t *out)
{
    bson_iter_t iter;
    bool any = false;
    if (indexes == NULL || !bson_iter_init(&iter, indexes)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        bson_t spec;
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_view_of(&iter, &spec) && scan(&spec, argument, out)) {
            any = true;
        }
    }
    return any;
}

static bool for_each_unique_index(const plan_policy_t *policy, unique_scan_fn scan, const void *argument,
                                  plan_decision_t *out)
{
    return policy != NULL && scan_indexes(policy->unique_indexes, scan, argument, out);
}

/* The values a scan of literal values reads. */
typedef struct literal_values {
    const bson_t *values;
    value_source_t source;
    bool query_values;
} literal_values_t;

static bool scan_literal(const bson_t *spec, const void *argument, plan_decision_t *out)
{
    const literal_values_t *literal = argument;
    filter_list_t list = {.filters = &out->fault_in_filters, .count = &out->fault_in_filter_count};
    bool computed = append_index_filter(spec, literal->values, literal->source, literal->query_values, &list);
    if (literal->source == SOURCE_SET && !literal->query_values) {
        bson_iter_t iter;
        bson_iter_init(&iter, literal->values);
        while (!computed && bson_iter_next(&iter)) {
            computed = path_computes_key(spec, bson_iter_key(&iter), true);
        }
    }
    if (computed) {
        note_computed_index(spec, out);
    }
    return computed;
}

/* An operator computing values ($inc, $rename...): the paths it changes, its
 * arguments' field names (and for $rename their string values, the new names). */
typedef struct computed_paths {
    const bson_t *arguments;
    bool values_are_paths;
} computed_paths_t;

static bool scan_computed(const bson_t *spec, const void *argument, plan_decision_t *out)
{
    const computed_paths_t *paths = argument;
    bson_iter_t iter;
    bool computed = false;
    bson_iter_init(&iter, paths->arguments);
    while (!computed && bson_iter_next(&iter)) {
        computed = path_computes_key(spec, bson_iter_key(&iter), false) ||
                   (paths->values_are_paths && BSON_ITER_HOLDS_UTF8(&iter) &&
                    path_computes_key(spec, bson_iter_utf8(&iter, NULL), false));
    }
    if (computed) {
        note_computed_index(spec, out);
    }
    return computed;
}

/* A pipeline may set any field: every unique index's key is computed. */
static bool scan_pipeline(const bson_t *spec, const void *argument, plan_decision_t *out)
{
    (void)argument;
    note_computed_index(spec, out);
    return true;
}

/* An upsert's query joined by $and or $or: its equalities there seed the inserted
 * document too, with values the router reads from the seed. */
static bool query_has_logical_operator(const bson_t *query)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, query)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "$and") == 0 || strcmp(bson_iter_key(&iter), "$or") == 0) {
            return true;
        }
    }
    return false;
}

void planner_unique_keys_of_insert(const plan_policy_t *policy, const bson_t *document, plan_decision_t *out)
{
    literal_values_t literal = {.values = document, .source = SOURCE_DOCUMENT};
    for_each_unique_index(policy, scan_literal, &literal, out);
}

/* The router's computed document and the list its keys go to. */
typedef struct computed_document {
    const bson_t *document;
    filter_list_t list;
} computed_document_t;

static bool scan_computed_document(const bson_t *spec, const void *argument, plan_decision_t *out)
{
    const computed_document_t *target = argument;
    (void)out;
    append_index_filter(spec, target->document, SOURCE_DOCUMENT, false, &target->list);
    return false;
}

void plan_unique_keys_of_document(const bson_t *unique_indexes, const bson_t *document, const bson_t *before,
                                  bson_t *out_filters, uint32_t *count)
{
    bson_t unchanged = BSON_INITIALIZER;
    uint32_t unchanged_count = 0;
    if (before != NULL) {
        computed_document_t previous = {before, {.filters = &unchanged, .count = &unchanged_count}};
        scan_indexes(unique_indexes, scan_computed_document, &previous, NULL);
    }
    computed_document_t target = {document,
                                  {.filters = out_filters, .count = count, .skip_equal = true, .unchanged = &unchanged}};
    scan_indexes(unique_indexes, scan_computed_document, &target, NULL);
    bson_destroy(&unchanged);
}

/* One operator of an update ({$inc: {...}}): its literal keys' filters, and whether
 * it computes a key. */
static bool scan_operator(const plan_policy_t *policy, const char *name, const bson_t *arguments, bool upsert,
                          plan_decision_t *out)
{
    if (strcmp(name, "$set") == 0 || (upsert && strcmp(name, "$setOnInsert") == 0)) {
        literal_values_t literal = {.values = arguments, .source = SOURCE_SET};
        return for_each_unique_index(policy, scan_literal, &literal, out);
    }
    if (strcmp(name, "$setOnInsert") == 0) {
        return false; /* not an upsert: it never applies */
    }
    computed_paths_t paths = {.arguments = arguments, .values_are_paths = strcmp(name, "$rename") == 0};
    return for_each_unique_index(policy, scan_computed, &paths, out);
}

bool planner_unique_keys_of_update(const plan_policy_t *policy, const bson_iter_t *update, const bson_t *query,
                                   bool upsert, plan_decision_t *out)
{
    bson_iter_t operators;
    bson_t document;
    uint32_t length;
    const uint8_t *data;
    bool computed = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(update)) {
        return for_each_unique_index(policy, scan_pipeline, NULL, out); /* what it sets is known once it runs */
    }
    bson_iter_document(update, &length, &data);
    if (!bson_init_static(&document, data, length) || !bson_iter_init(&operators, &document)) {
        return false;
    }
    if (!bson_iter_next(&operators) || bson_iter_key(&operators)[0] != '$') {
        planner_unique_keys_of_insert(policy, &document, out); /* a replacement ({} too) */
        return false;
    }
    do {
        bson_t arguments;
        if (BSON_ITER_HOLDS_DOCUMENT(&operators)) {
            bson_iter_document(&operators, &length, &data);
            if (bson_init_static(&arguments, data, length) &&
                scan_operator(policy, bson_iter_key(&operators), &arguments, upsert, out)) {
                computed = true;
            }
        }
    } while (bson_iter_next(&operators));
    if (upsert && query != NULL) {
        /* An upsert that inserts takes the query's equality fields too. */
        literal_values_t literal = {.values = query, .source = SOURCE_SET, .query_values = true};
        if (for_each_unique_index(policy, scan_literal, &literal, out)) {
            computed = true;
        }
        if (query_has_logical_operator(query) && for_each_unique_index(policy, scan_pipeline, NULL, out)) {
            computed = true;
        }
    }
    return computed;
}
