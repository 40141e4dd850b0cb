/* Query execution: access-path choice (with the index bounds of find_bounds.c),
 * the scan loop (filter, skip, limit, projection), blocking sorts, covered
 * queries and explain. Read top to bottom: plan structure, choice, execution,
 * explain. */
#include "store/find_private.h"
#include "query/filter_implies.h"
#include "query/match.h"
#include "query/projection.h"
#include "query/sort.h"

#include <stdio.h>
#include <string.h>

/* mongod's default limit for a blocking sort without allowDiskUse. */
#define BLOCKING_SORT_MEMORY_LIMIT (100 * 1024 * 1024)

typedef enum access_kind {
    ACCESS_COLLECTION_SCAN,
    ACCESS_ID_LOOKUP, /* {_id: value}: mongod's IDHACK */
    ACCESS_INDEX_SCAN,
} access_kind_t;

/* What explain's IXSCAN says of the index (isUnique, isSparse, isPartial). */
enum {
    INDEX_PROPERTY_UNIQUE = 1,
    INDEX_PROPERTY_SPARSE = 2,
    INDEX_PROPERTY_PARTIAL = 4,
};

/* The set of record ids already returned by a multikey index scan. */
typedef struct record_id_set {
    int64_t *slots; /* 0 = empty; record ids start at 1 */
    size_t capacity;
    size_t count;
} record_id_set_t;

/* One clause of a top-level $or and the index that bounds it: the plan scans
 * each in turn and returns a record once (mongod's OR stage over IXSCANs). */
typedef struct or_branch {
    char *index_name;
    bson_t key_pattern;
    bool multikey;
    unsigned properties;      /* INDEX_PROPERTY_* */
    scan_bounds_t *intervals; /* moved into the plan when its scan starts */
    size_t interval_count;
    bson_t bounds_explain;
    uint64_t keys_examined;
} or_branch_t;

typedef struct sorted_result {
    keystring_t sort_key; /* generated once; compared as bytes */
    bson_t *document;
    int64_t record_id;
} sorted_result_t;

struct find_plan {
    char *ns;
    bson_t filter;
    /* A reference to the command's collation (else the collection's default):
     * its filter, sort and the indexes it may use follow it; NULL: binary. */
    const collation_t *collation;
    /* A hinted index under another collation: its key order is not the query's,
     * so it is scanned whole and the results sorted after. */
    bool index_collation_differs;
    match_expression_t *matcher;
    sort_spec_t *sort;
    bson_t sort_pattern;
    projection_t *projection;
    bson_t projection_spec;
    int64_t skip;
    int64_t skip_remaining;
    int64_t limit;
    int64_t returned;

    access_kind_t access;
    char *index_name;
    bson_t index_key_pattern;
    bool index_multikey;
    unsigned index_properties; /* INDEX_PROPERTY_* */
    scan_bounds_t *intervals;
    size_t interval_count;
    size_t interval_index;
    size_t bounded_fields; /* of the index's key pattern, from the first: scoring */
    bson_t index_bounds_explain; /* {field: ["[5, 5]"]} */
    bool descending_scan;
    bool covered;
    bool blocking_sort;
    scan_position_t position;
    record_id_set_t seen;
    or_branch_t *branches; /* a union of index scans; NULL otherwise */
    size_t branch_count;
    size_t branch_active;  /* whose index and intervals the fields above hold */

    sorted_result_t *sorted;
    size_t sorted_count;
    size_t sorted_next;
    bool sorted_ready;

    bson_t *pending; /* a result emit refused: first of the next batch */
    int64_t pending_record_id;
    bool exhausted;

    uint64_t keys_examined;
    uint64_t documents_examined;
};

/* --- small helpers ------------------------------------------------------------ */

static void record_id_set_cleanup(record_id_set_t *set)
{
    bson_free(set->slots);
    memset(set, 0, sizeof *set);
}

/* Adds record_id; false when it was already there. */
static bool record_id_set_add(record_id_set_t *set, int64_t record_id)
{
    if ((set->count + 1) * 2 > set->capacity) {
        record_id_set_t bigger = {.capacity = set->capacity ? set->capacity * 2 : 64};
        bigger.slots = bson_malloc0(bigger.capacity * sizeof(int64_t));
        for (size_t i = 0; i < set->capacity; i++) {
            if (set->slots[i] != 0) {
                record_id_set_add(&bigger, set->slots[i]);
            }
        }
        bson_free(set->slots);
        *set = bigger;
    }
    size_t slot = (size_t)((uint64_t)record_id * 0x9E3779B97F4A7C15ull) & (set->capacity - 1);
    while (set->slots[slot] != 0) {
        if (set->slots[slot] == record_id) {
            return false;
        }
        slot = (slot + 1) & (set->capacity - 1);
    }
    set->slots[slot] = record_id;
    set->count++;
    return true;
}

static void copy_or_init(bson_t *destination, const bson_t *source)
{
    if (source != NULL) {
        bson_copy_to(source, destination);
    } else {
        bson_init(destination);
    }
}

/* --- index bounds (find_bounds.c) ------------------------------------------- */

static bool interval_is_point(const scan_bounds_t *interval)
{
    return interval->lower.length == interval->upper.length &&
           memcmp(interval->lower.data, interval->upper.data, interval->lower.length) == 0;
}

/* Whether the plan's intervals are points on every field of a unique index: at
 * most one document each, so no other index can read less (mongod's ranking
 * finds the same at once: such a plan ends after its first documents). */
static bool plan_pins_unique_keys(const find_plan_t *plan, const index_descriptor_t *index, bool multikey)
{
    if (!index->unique || multikey || plan->interval_count == 0 ||
        plan->bounded_fields != bson_count_keys(&index->key_pattern)) {
        return false;
    }
    for (size_t i = 0; i < plan->interval_count; i++) {
        if (!interval_is_point(&plan->intervals[i])) {
            return false;
        }
    }
    return true;
}

/* The plan's intervals for index from filter (the plan's, or one $or clause),
 * each marked as a whole unique key when it is one (an exact search then finds
 * it, scan_bounds_t); false if the first field is unbounded. */
static bool build_intervals(find_plan_t *plan, const bson_t *filter, const index_descriptor_t *index, bool multikey)
{
    if (!find_bounds_build(filter, &index->key_pattern, multikey, plan->collation, &plan->intervals,
                           &plan->interval_count, &plan->bounded_fields, &plan->index_bounds_explain)) {
        return false;
    }
    bool whole = plan_pins_unique_keys(plan, index, multikey);
    for (size_t i = 0; i < plan->interval_count; i++) {
        scan_bounds_t *interval = &plan->intervals[i];
        interval->whole_unique_key = whole && interval->lower_inclusive && interval->upper_inclusive;
    }
    return true;
}

static void clear_intervals(find_plan_t *plan)
{
    for (size_t i = 0; i < plan->interval_count; i++) {
        scan_bounds_cleanup(&plan->intervals[i]);
    }
    bson_free(plan->intervals);
    plan->intervals = NULL;
    plan->interval_count = 0;
}

/* --- access-path choice ---------------------------------------------------------- */

/* +1 if the index gives the sort order scanning forward, -1 backward, 0 not at all. */
static int index_sort_direction(const bson_t *key_pattern, const bson_t *sort_pattern)
{
    bson_iter_t index_fields, sort_fields;
    int direction = 0;
    if (bson_count_keys(sort_pattern) == 0) {
        return 0;
    }
    bson_iter_init(&index_fields, key_pattern);
    bson_iter_init(&sort_fields, sort_pattern);
    while (bson_iter_next(&sort_fields)) {
        if (!bson_iter_next(&index_fields) || strcmp(bson_iter_key(&index_fields), bson_iter_key(&sort_fields)) != 0) {
            return 0;
        }
        if (!BSON_ITER_HOLDS_NUMBER(&sort_fields)) {
            return 0;
        }
        int relative = find_index_direction(&index_fields) * (bson_iter_as_double(&sort_fields) < 0 ? -1 : 1);
        if (direction != 0 && relative != direction) {
            return 0;
        }
        direction = relative;
    }
    return direction;
}

static bool filter_is_id_equality(const bson_t *filter, bson_value_t *out_id)
{
    bson_iter_t iter;
    if (filter == NULL || bson_count_keys(filter) != 1 || !bson_iter_init_find(&iter, filter, "_id")) {
        return false;
    }
    if (find_is_operator_document(&iter)) {
        bson_iter_t operators;
        bson_iter_recurse(&iter, &operators);
        if (!bson_iter_next(&operators) || strcmp(bson_iter_key(&operators), "$eq") != 0 ||
            bson_iter_next(&operators)) {
            return false;
        }
        bson_iter_recurse(&iter, &operators);
        bson_iter_next(&operators);
        iter = operators;
    }
    const bson_value_t *value = bson_iter_value(&iter);
    if (!find_value_is_indexable_operand(value) || value->value_type == BSON_TYPE_DOCUMENT) {
        return false;
    }
    bson_value_copy(value, out_id);
    return true;
}

static unsigned index_properties(const index_descriptor_t *index)
{
    return (index->unique ? INDEX_PROPERTY_UNIQUE : 0u) | (index->sparse ? INDEX_PROPERTY_SPARSE : 0u) |
           (index->partial ? INDEX_PROPERTY_PARTIAL : 0u);
}

/* Whether the planner may answer filter with index without missing a result:
 * never a hidden index; a partial or sparse one only when filter implies the
 * condition that decides which documents it holds (mongod's subset rule for
 * partial indexes; a sparse index needs a filter that requires one of its
 * fields, so no {f: null}, {f: {$exists: false}} or unfiltered sort). */
static bool index_is_eligible(const index_descriptor_t *index, const bson_t *filter)
{
    if (index->hidden) {
        return false;
    }
    return bson_empty(&index->condition) || filter_implies(filter, &index->condition);
}

/* mongod's rule: a query may use an index only under the same collation, since
 * the index's string keys are that collation's sort keys. */
static bool index_serves_collation(const find_plan_t *plan, const index_descriptor_t *index)
{
    return collation_equal(index->collation, plan->collation);
}

static void use_index(find_plan_t *plan, index_descriptor_t *index)
{
    plan->access = ACCESS_INDEX_SCAN;
    bson_free(plan->index_name);
    plan->index_name = bson_strdup(index->name);
    bson_destroy(&plan->index_key_pattern);
    bson_copy_to(&index->key_pattern, &plan->index_key_pattern);
    plan->index_multikey = atomic_load(&index->multikey);
    plan->index_properties = index_properties(index);
}

/* Scores an index for filter: 0 unusable; higher is better. */
static int score_index(find_plan_t *plan, const bson_t *filter, index_descriptor_t *index)
{
    bool multikey = atomic_load(&index->multikey);
    clear_intervals(plan);
    if (!build_intervals(plan, filter, index, multikey)) {
        return 0;
    }
    /* Points on every field of a unique index win outright ({_id: k, state: "done"}
     * reads one document by _id, not every done mark by {state: 1, to: 1}); then
     * each field the scan is bounded by counts most ({state: "done", to: {$lte: t}}
     * takes {state: 1, to: 1} over {state: 1, since: 1}); then point intervals beat
     * ranges; a provided sort order is worth a lot. */
    int score = 10 + 20 * (int)plan->bounded_fields;
    if (plan_pins_unique_keys(plan, index, multikey)) {
        score += 1000;
    }
    if (plan->interval_count > 0 && interval_is_point(&plan->intervals[0])) {
        score += 10;
    }
    score += (int)bson_count_keys(&index->key_pattern);
    if (plan->interval_count == 1 && index_sort_direction(&index->key_pattern, &plan->sort_pattern) != 0) {
        score += 5;
    }
    return score;
}

/* The index scoring best for filter, or NULL when none bounds it. */
static index_descriptor_t *best_index(find_plan_t *plan, collection_t *collection, const bson_t *filter)
{
    index_descriptor_t *best = NULL;
    int best_score = 0;
    for (size_t i = 0; i < collection->index_count; i++) {
        if (!index_is_eligible(collection->indexes[i], filter) || !index_serves_collation(plan, collection->indexes[i])) {
            continue;
        }
        int score = score_index(plan, filter, collection->indexes[i]);
        if (score > best_score) {
            best_score = score;
            best = collection->indexes[i];
        }
    }
    clear_intervals(plan);
    return best;
}

static void branches_destroy(find_plan_t *plan)
{
    for (size_t i = 0; i < plan->branch_count; i++) {
        or_branch_t *branch = &plan->branches[i];
        bson_free(branch->index_name);
        bson_destroy(&branch->key_pattern);
        bson_destroy(&branch->bounds_explain);
        for (size_t j = 0; j < branch->interval_count; j++) {
            scan_bounds_cleanup(&branch->intervals[j]);
        }
        bson_free(branch->intervals);
    }
    bson_free(plan->branches);
    plan->branches = NULL;
    plan->branch_count = 0;
}

/* Makes branch index the one the scan reads: its index and intervals move
 * into the plan's fields, from its first interval. */
static void activate_branch(find_plan_t *plan, size_t index)
{
    or_branch_t *branch = &plan->branches[index];
    clear_intervals(plan);
    bson_free(plan->index_name);
    plan->index_name = bson_strdup(branch->index_name);
    bson_destroy(&plan->index_key_pattern);
    bson_copy_to(&branch->key_pattern, &plan->index_key_pattern);
    plan->index_multikey = branch->multikey;
    plan->index_properties = branch->properties;
    plan->intervals = branch->intervals;
    plan->interval_count = branch->interval_count;
    branch->intervals = NULL;
    branch->interval_count = 0;
    plan->interval_index = 0;
    plan->branch_active = index;
    scan_position_cleanup(&plan->position);
    scan_position_init(&plan->position);
}

/* A filter {$or: [...], ...} whose every clause some index bounds becomes a
 * union of those index scans; false (nothing changed) when one clause has none,
 * and the query scans the collection as mongod's would. */
static bool plan_or_union(find_plan_t *plan, collection_t *collection)
{
    bson_iter_t iter, clauses;
    if (!bson_iter_init_find(&iter, &plan->filter, "$or") || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        return false;
    }
    bson_iter_recurse(&iter, &clauses);
    size_t clause_count = 0;
    while (bson_iter_next(&clauses)) {
        clause_count++;
    }
    if (clause_count == 0) {
        return false;
    }
    plan->branches = bson_malloc0(clause_count * sizeof *plan->branches);
    bson_iter_recurse(&iter, &clauses);
    while (bson_iter_next(&clauses)) {
        bson_t clause;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&clauses)) {
            branches_destroy(plan);
            return false;
        }
        bson_iter_document(&clauses, &length, &data);
        bson_init_static(&clause, data, length);
        index_descriptor_t *index = best_index(plan, collection, &clause);
        if (index == NULL) {
            branches_destroy(plan);
            return false;
        }
        or_branch_t *branch = &plan->branches[plan->branch_count++];
        branch->index_name = bson_strdup(index->name);
        bson_copy_to(&index->key_pattern, &branch->key_pattern);
        branch->multikey = atomic_load(&index->multikey);
        branch->properties = index_properties(index);
        build_intervals(plan, &clause, index, branch->multikey);
        branch->intervals = plan->intervals;
        branch->interval_count = plan->interval_count;
        plan->intervals = NULL;
        plan->interval_count = 0;
        bson_copy_to(&plan->index_bounds_explain, &branch->bounds_explain);
    }
    plan->access = ACCESS_INDEX_SCAN;
    activate_branch(plan, 0);
    return true;
}

static bool has_fields(const bson_t *document)
{
    return document != NULL && !bson_empty(document);
}

/* Whether left and right name the same fields in the same order. */
static bool same_field_names(const bson_t *left, const bson_t *right)
{
    bson_iter_t left_fields, right_fields;
    bson_iter_init(&left_fields, left);
    bson_iter_init(&right_fields, right);
    while (bson_iter_next(&left_fields)) {
        if (!bson_iter_next(&right_fields) || strcmp(bson_iter_key(&left_fields), bson_iter_key(&right_fields)) != 0) {
            return false;
        }
    }
    return !bson_iter_next(&right_fields);
}

/* The keystring of a min or max bound, its values in the index's directions. */
static void append_bound_keystring(keystring_t *key, const bson_t *bound, const index_descriptor_t *index)
{
    bson_iter_t values, fields;
    bson_iter_init(&values, bound);
    bson_iter_init(&fields, &index->key_pattern);
    while (bson_iter_next(&values) && bson_iter_next(&fields)) {
        keystring_append_value_collated(key, bson_iter_value(&values), find_index_direction(&fields) < 0,
                                        index->collation);
    }
}

/* find's min and max, as mongod's: one scan of the hinted index from min
 * (inclusive) to max (exclusive), in index order; the filter still applies. */
static bool use_min_max(find_plan_t *plan, index_descriptor_t *hinted, const find_options_t *options,
                        bson_error_t *error)
{
    if (hinted == NULL) {
        return tc_error_set(error, TC_ERR_MIN_MAX_WITHOUT_HINT,
                            "When using min()/max() a hint of which index to use must be provided");
    }
    if ((has_fields(options->min) && !same_field_names(options->min, &hinted->key_pattern)) ||
        (has_fields(options->max) && !same_field_names(options->max, &hinted->key_pattern))) {
        return tc_error_set(error, TC_ERR_MIN_MAX_INCOMPATIBLE_INDEX,
                            "The index chosen is not compatible with min/max");
    }
    use_index(plan, hinted);
    clear_intervals(plan);
    plan->intervals = bson_malloc0(sizeof(scan_bounds_t));
    plan->interval_count = 1;
    scan_bounds_t *interval = &plan->intervals[0];
    scan_bounds_init(interval);
    if (has_fields(options->min)) {
        append_bound_keystring(&interval->lower, options->min, hinted);
    }
    if (has_fields(options->max)) {
        append_bound_keystring(&interval->upper, options->max, hinted);
        interval->upper_inclusive = false;
    }
    if (interval->lower.length > 0 && interval->upper.length > 0 &&
        keystring_compare(&interval->lower, &interval->upper) >= 0) {
        return tc_error_set(error, TC_ERR_MIN_NOT_BEFORE_MAX,
                            "The value provided for min() does not come before the value provided for max() in "
                            "the hinted index");
    }
    bson_reinit(&plan->index_bounds_explain); /* min and max bound the scan, not per-field intervals */
    return true;
}

static bool choose_access_path(find_plan_t *plan, collection_t *collection, const find_options_t *options,
                               bson_error_t *error)
{
    index_descriptor_t *hinted = NULL;
    if (options->hint_name != NULL) {
        hinted = storage_find_index(collection, options->hint_name);
    } else if (options->hint != NULL && bson_count_keys(options->hint) > 0) {
        bson_iter_t iter;
        if (bson_iter_init_find(&iter, options->hint, "$natural")) {
            if (has_fields(options->min) || has_fields(options->max)) {
                return tc_error_set(error, TC_ERR_NO_QUERY_EXECUTION_PLANS,
                                    "min and max are incompatible with $natural");
            }
            plan->access = ACCESS_COLLECTION_SCAN;
            plan->descending_scan = bson_iter_as_double(&iter) < 0;
            return true;
        }
        for (size_t i = 0; i < collection->index_count; i++) {
            if (bson_equal(&collection->indexes[i]->key_pattern, options->hint) &&
                (hinted == NULL || hinted->hidden)) {
                hinted = collection->indexes[i];
            }
        }
    }
    /* mongod refuses a hint naming a hidden index, or a partial index whose
     * filter the query does not imply, as it refuses one naming no index (a
     * sparse index may be hinted: its results may then be incomplete). */
    if (hinted != NULL && (hinted->hidden || (hinted->partial && !index_is_eligible(hinted, &plan->filter)))) {
        hinted = NULL;
    }
    if ((options->hint_name != NULL || (options->hint != NULL && bson_count_keys(options->hint) > 0)) &&
        hinted == NULL) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "error processing query: ns=%s: hint provided does not "
                            "correspond to an existing index", collection->ns);
    }
    if (has_fields(options->min) || has_fields(options->max)) {
        return use_min_max(plan, hinted, options, error);
    }
    if (hinted != NULL) {
        use_index(plan, hinted);
        clear_intervals(plan);
        plan->index_collation_differs = !index_serves_collation(plan, hinted);
        if (plan->index_collation_differs ||
            !build_intervals(plan, &plan->filter, hinted, plan->index_multikey)) {
            clear_intervals(plan); /* full index scan */
        }
        return true;
    }

    bson_value_t id_value;
    if (index_serves_collation(plan, collection->indexes[0]) && filter_is_id_equality(&plan->filter, &id_value)) {
        use_index(plan, collection->indexes[0]);
        plan->access = ACCESS_ID_LOOKUP;
        clear_intervals(plan);
        plan->intervals = bson_malloc0(sizeof(scan_bounds_t));
        scan_bounds_init(&plan->intervals[0]);
        /* The _id index's keys are its collation's (the collection's default). */
        const collation_t *id_collation = collection->indexes[0]->collation;
        keystring_append_value_collated(&plan->intervals[0].lower, &id_value, false, id_collation);
        keystring_append_value_collated(&plan->intervals[0].upper, &id_value, false, id_collation);
        plan->intervals[0].whole_unique_key = true;
        plan->interval_count = 1;
        bson_value_destroy(&id_value);
        return true;
    }

    index_descriptor_t *best = best_index(plan, collection, &plan->filter);
    if (best != NULL) {
        use_index(plan, best);
        build_intervals(plan, &plan->filter, best, plan->index_multikey);
        return true;
    }
    if (plan_or_union(plan, collection)) {
        return true;
    }
    /* No bounds anywhere: an index that yields the sort order avoids a blocking sort. */
    for (size_t i = 0; i < collection->index_count; i++) {
        index_descriptor_t *index = collection->indexes[i];
        if (index_sort_direction(&index->key_pattern, &plan->sort_pattern) != 0 && !atomic_load(&index->multikey) &&
            index_is_eligible(index, &plan->filter) && index_serves_collation(plan, index)) {
            use_index(plan, index);
            bson_destroy(&plan->index_bounds_explain);
            bson_init(&plan->index_bounds_explain);
            bson_iter_t fields;
            bson_iter_init(&fields, &index->key_pattern);
            while (bson_iter_next(&fields)) {
                bson_t field_bounds;
                bson_append_array_begin(&plan->index_bounds_explain, bson_iter_key(&fields), -1, &field_bounds);
                bson_append_utf8(&field_bounds, "0", 1, "[MinKey, MaxKey]", -1);
                bson_append_array_end(&plan->index_bounds_explain, &field_bounds);
            }
            return true;
        }
    }
    plan->access = ACCESS_COLLECTION_SCAN;
    return true;
}

/* A filter's {$not: ...}: a missing field's null key matches it, unlike null. */
static bool condition_negates(const bson_iter_t *condition)
{
    bson_iter_t operators;
    return find_is_operator_document(condition) && bson_iter_recurse(condition, &operators) &&
           bson_iter_find(&operators, "$not");
}

/* A covered query reads only the index: projection includes only index fields
 * (no _id unless indexed), every filter field is in the index and not negated,
 * and the index is not multikey (an array's elements are separate keys). */
static bool plan_is_covered(find_plan_t *plan)
{
    if (plan->access != ACCESS_INDEX_SCAN || plan->index_multikey || plan->branches != NULL || plan->projection == NULL ||
        !projection_is_inclusion(plan->projection)) {
        return false;
    }
    bson_iter_t fields, iter;
    bool id_in_index = false;
    bson_iter_init(&fields, &plan->index_key_pattern);
    while (bson_iter_next(&fields)) {
        if (strchr(bson_iter_key(&fields), '.') != NULL) {
            return false;
        }
        if (strcmp(bson_iter_key(&fields), "_id") == 0) {
            id_in_index = true;
        }
    }
    if (projection_includes_id(plan->projection) && !id_in_index) {
        return false;
    }
    for (size_t i = 0; i < projection_included_path_count(plan->projection); i++) {
        if (!bson_iter_init_find(&iter, &plan->index_key_pattern, projection_included_path(plan->projection, i))) {
            return false;
        }
    }
    bson_iter_init(&iter, &plan->filter);
    while (bson_iter_next(&iter)) {
        bson_iter_t found;
        if (bson_iter_key(&iter)[0] == '$' || condition_negates(&iter) ||
            !bson_iter_init_find(&found, &plan->index_key_pattern, bson_iter_key(&iter))) {
            return false;
        }
    }
    bson_iter_init(&iter, &plan->sort_pattern);
    while (bson_iter_next(&iter)) {
        bson_iter_t found;
        if (!bson_iter_init_find(&found, &plan->index_key_pattern, bson_iter_key(&iter))) {
            return false;
        }
    }
    return true;
}

find_plan_t *find_plan_new(storage_session_t *session, collection_t *collection, const find_options_t *options,
                           bson_error_t *error)
{
    find_plan_t *plan = BSON_ALIGNED_ALLOC0(find_plan_t);
    copy_or_init(&plan->filter, options->filter);
    copy_or_init(&plan->sort_pattern, options->sort);
    copy_or_init(&plan->projection_spec, options->projection);
    bson_init(&plan->index_key_pattern);
    bson_init(&plan->index_bounds_explain);
    scan_position_init(&plan->position);
    plan->skip = options->skip;
    plan->skip_remaining = options->skip;
    plan->limit = options->limit;

    if (options->skip < 0) {
        tc_error_set(error, TC_ERR_NON_NEGATIVE_VALUE, "skip value must be non-negative, but received: %lld",
                     (long long)options->skip);
        goto fail;
    }
    if (options->limit < 0) {
        tc_error_set(error, TC_ERR_NON_NEGATIVE_VALUE, "limit value must be non-negative, but received: %lld",
                     (long long)options->limit);
        goto fail;
    }
    if (has_fields(options->min) && has_fields(options->max) && !same_field_names(options->min, options->max)) {
        tc_error_set(error, TC_ERR_MIN_MAX_DIFFERENT_FIELDS, "min and max must have the same field names");
        goto fail;
    }
    plan->collation = collation_retain(options->expression_context ? options->expression_context->collation : NULL);
    plan->matcher = match_compile_with_context(&plan->filter, options->expression_context, error);
    if (plan->matcher == NULL) {
        goto fail;
    }
    if (bson_count_keys(&plan->sort_pattern) > 0) {
        plan->sort = sort_spec_compile(&plan->sort_pattern, error);
        if (plan->sort == NULL) {
            goto fail;
        }
        sort_spec_set_collation(plan->sort, plan->collation);
    }
    if (bson_count_keys(&plan->projection_spec) > 0) {
        plan->projection = projection_compile_with_query(&plan->projection_spec, &plan->filter, error);
        if (plan->projection == NULL) {
            goto fail;
        }
    }
    if (collection != NULL) {
        plan->ns = bson_strdup(collection->ns);
        if (!choose_access_path(plan, collection, options, error)) {
            goto fail;
        }
        if (plan->sort != NULL) {
            int direction = plan->access == ACCESS_COLLECTION_SCAN
                                ? 0
                                : index_sort_direction(&plan->index_key_pattern, &plan->sort_pattern);
            if (direction != 0 && plan->interval_count <= 1 && !plan->index_multikey && plan->branches == NULL &&
                !plan->index_collation_differs) {
                plan->descending_scan = direction < 0;
            } else {
                plan->blocking_sort = true;
            }
        }
        plan->covered = plan_is_covered(plan);
    } else {
        plan->exhausted = true;
    }
    return plan;
fail:
    find_plan_destroy(plan);
    return NULL;
}

void find_plan_destroy(find_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    bson_free(plan->ns);
    bson_destroy(&plan->filter);
    collation_release(plan->collation);
    match_destroy(plan->matcher);
    sort_spec_destroy(plan->sort);
    bson_destroy(&plan->sort_pattern);
    projection_destroy(plan->projection);
    bson_destroy(&plan->projection_spec);
    bson_free(plan->index_name);
    bson_destroy(&plan->index_key_pattern);
    clear_intervals(plan);
    bson_destroy(&plan->index_bounds_explain);
    scan_position_cleanup(&plan->position);
    record_id_set_cleanup(&plan->seen);
    branches_destroy(plan);
    for (size_t i = 0; i < plan->sorted_count; i++) {
        bson_destroy(plan->sorted[i].document);
        keystring_cleanup(&plan->sorted[i].sort_key);
    }
    bson_free(plan->sorted);
    if (plan->pending != NULL) {
        bson_destroy(plan->pending);
    }
    bson_free(plan);
}

/* --- execution ---------------------------------------------------------------------- */

/* Produces the next document that passes the filter, before skip and limit.
 * *out_document is valid until the next call; owned_document holds a copy
 * when the document had to be fetched or built. */
typedef struct source_state {
    scan_t *scan;
    index_descriptor_t *index;
    bson_t owned;
    bool owns;
} source_state_t;

static bool next_candidate(find_plan_t *plan, storage_session_t *session, collection_t *collection,
                           source_state_t *state, const bson_t **out_document, int64_t *out_record_id,
                           bool *out_end, bson_error_t *error)
{
    for (;;) {
        if (state->owns) {
            bson_destroy(&state->owned);
            state->owns = false;
        }
        if (state->scan == NULL) {
            if (plan->access != ACCESS_COLLECTION_SCAN && plan->interval_count > 0 &&
                plan->interval_index >= plan->interval_count) {
                *out_end = true;
                return true;
            }
            const scan_bounds_t *bounds = plan->access == ACCESS_COLLECTION_SCAN || plan->interval_count == 0
                                              ? NULL
                                              : &plan->intervals[plan->interval_index];
            state->scan = scan_open(session, collection, plan->access == ACCESS_COLLECTION_SCAN ? NULL : state->index,
                                    bounds, plan->descending_scan, &plan->position, error);
            if (state->scan == NULL) {
                return false;
            }
        }
        int64_t record_id;
        bson_t document, key_values;
        bool end;
        if (!storage_session_check_interrupt(session, error)) {
            return false; /* killOp */
        }
        uint64_t keys_before = scan_keys_examined(state->scan);
        if (!scan_next(state->scan, &record_id, &document, &key_values, &end, error)) {
            return false;
        }
        uint64_t keys = scan_keys_examined(state->scan) - keys_before;
        plan->keys_examined += keys;
        if (plan->branches != NULL) {
            plan->branches[plan->branch_active].keys_examined += keys;
        }
        if (end) {
            scan_close(state->scan);
            state->scan = NULL;
            if (plan->access == ACCESS_COLLECTION_SCAN || plan->interval_count <= 1 ||
                ++plan->interval_index >= plan->interval_count) {
                if (plan->branch_active + 1 < plan->branch_count) {
                    activate_branch(plan, plan->branch_active + 1);
                    state->index = storage_find_index(collection, plan->index_name);
                    if (state->index == NULL) {
                        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "index %s was dropped while the query ran",
                                            plan->index_name);
                    }
                    continue;
                }
                plan->interval_index = plan->interval_count;
                *out_end = true;
                return true;
            }
            scan_position_cleanup(&plan->position);
            scan_position_init(&plan->position);
            continue;
        }
        if (plan->access == ACCESS_COLLECTION_SCAN) {
            plan->documents_examined++;
            if (!match_document(plan->matcher, &document)) {
                if (match_failed(plan->matcher, error)) {
                    return false; /* $expr failed on this document: so does the query */
                }
                continue;
            }
            bson_copy_to(&document, &state->owned);
            state->owns = true;
        } else {
            /* A multikey index or a second branch may return a record again. */
            if ((plan->index_multikey || plan->branches != NULL) && !record_id_set_add(&plan->seen, record_id)) {
                continue;
            }
            if (plan->covered) {
                /* Rebuild {field: value} from the key's values. */
                bson_init(&state->owned);
                state->owns = true;
                bson_iter_t fields, values;
                bson_iter_init(&fields, &plan->index_key_pattern);
                bson_iter_init(&values, &key_values);
                while (bson_iter_next(&fields) && bson_iter_next(&values)) {
                    bson_append_value(&state->owned, bson_iter_key(&fields), -1, bson_iter_value(&values));
                }
            } else {
                bool found;
                plan->documents_examined++;
                if (!storage_read_record(session, collection, record_id, &state->owned, &found, error)) {
                    bson_destroy(&state->owned);
                    return false;
                }
                state->owns = true;
                if (!found) {
                    continue;
                }
            }
            if (!match_document(plan->matcher, &state->owned)) {
                if (match_failed(plan->matcher, error)) {
                    bson_destroy(&state->owned);
                    state->owns = false;
                    return false;
                }
                continue;
            }
        }
        *out_document = &state->owned;
        *out_record_id = record_id;
        *out_end = false;
        return true;
    }
}

static int compare_sorted_results(const void *left, const void *right)
{
    const sorted_result_t *a = left, *b = right;
    int comparison = keystring_compare(&a->sort_key, &b->sort_key);
    if (comparison != 0) {
        return comparison;
    }
    return a->record_id < b->record_id ? -1 : a->record_id > b->record_id;
}

static bool fill_blocking_sort(find_plan_t *plan, storage_session_t *session, collection_t *collection,
                               source_state_t *state, bson_error_t *error)
{
    size_t capacity = 0;
    size_t memory = 0;
    for (;;) {
        const bson_t *document;
        int64_t record_id;
        bool end;
        if (!next_candidate(plan, session, collection, state, &document, &record_id, &end, error)) {
            return false;
        }
        if (end) {
            break;
        }
        keystring_t sort_key;
        keystring_init(&sort_key);
        if (!sort_key_generate(plan->sort, document, &sort_key, NULL, error)) {
            keystring_cleanup(&sort_key);
            return false;
        }
        memory += document->len + sort_key.length + sizeof(sorted_result_t);
        if (memory > BLOCKING_SORT_MEMORY_LIMIT) {
            return tc_error_set(error, TC_ERR_QUERY_EXCEEDED_MEMORY_LIMIT,
                                "Executor error during find command :: caused by :: Sort exceeded memory "
                                "limit of %d bytes, but did not opt in to external sorting.",
                                BLOCKING_SORT_MEMORY_LIMIT);
        }
        if (plan->sorted_count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            plan->sorted = bson_realloc(plan->sorted, capacity * sizeof(sorted_result_t));
        }
        plan->sorted[plan->sorted_count].sort_key = sort_key;
        plan->sorted[plan->sorted_count].document = bson_copy(document);
        plan->sorted[plan->sorted_count].record_id = record_id;
        plan->sorted_count++;
    }
    if (plan->sorted_count > 1) {
        qsort(plan->sorted, plan->sorted_count, sizeof(sorted_result_t), compare_sorted_results);
    }
    plan->sorted_ready = true;
    return true;
}

/* Applies skip, limit and projection to one filtered document, then emits it.
 * Returns false when emit refused it (kept as pending). */
static bool deliver(find_plan_t *plan, const bson_t *document, int64_t record_id, find_emit_fn emit, void *context,
                    bool *out_refused, bson_error_t *error)
{
    *out_refused = false;
    if (plan->skip_remaining > 0) {
        plan->skip_remaining--;
        return true;
    }
    bson_t projected;
    const bson_t *result = document;
    if (plan->projection != NULL) {
        bson_init(&projected);
        if (!projection_apply(plan->projection, document, &projected, error)) {
            bson_destroy(&projected);
            tc_error_prefix(error, "Executor error during find command :: caused by :: ");
            return false;
        }
        result = &projected;
    }
    bool accepted = emit(context, result, record_id);
    if (accepted) {
        plan->returned++;
        if (plan->limit > 0 && plan->returned >= plan->limit) {
            plan->exhausted = true;
        }
    } else {
        plan->pending = bson_copy(result);
        plan->pending_record_id = record_id;
        *out_refused = true;
    }
    if (result == &projected) {
        bson_destroy(&projected);
    }
    return true;
}

bool find_plan_run(find_plan_t *plan, storage_session_t *session, collection_t *collection, find_emit_fn emit,
                   void *context, bool *out_exhausted, bson_error_t *error)
{
    source_state_t state = {0};
    bool ok = false;
    *out_exhausted = false;

    if (plan->pending != NULL) {
        if (!emit(context, plan->pending, plan->pending_record_id)) {
            ok = true;
            goto done;
        }
        bson_destroy(plan->pending);
        plan->pending = NULL;
        plan->returned++;
        if (plan->limit > 0 && plan->returned >= plan->limit) {
            plan->exhausted = true;
        }
    }
    if (!plan->exhausted && collection == NULL) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "collection %s was dropped while the query ran", plan->ns);
        goto done;
    }
    if (!plan->exhausted && plan->access != ACCESS_COLLECTION_SCAN) {
        state.index = storage_find_index(collection, plan->index_name);
        if (state.index == NULL) {
            tc_error_set(error, TC_ERR_OPERATION_FAILED, "index %s was dropped while the query ran",
                         plan->index_name);
            goto done;
        }
    }
    if (!plan->exhausted && plan->blocking_sort && !plan->sorted_ready) {
        TC_CHECK(fill_blocking_sort(plan, session, collection, &state, error));
    }
    while (!plan->exhausted) {
        const bson_t *document;
        int64_t record_id;
        bool end, refused;
        if (plan->blocking_sort) {
            if (plan->sorted_next >= plan->sorted_count) {
                plan->exhausted = true;
                break;
            }
            sorted_result_t *next = &plan->sorted[plan->sorted_next++];
            TC_CHECK(deliver(plan, next->document, next->record_id, emit, context, &refused, error));
            bson_destroy(next->document);
            next->document = NULL;
        } else {
            TC_CHECK(next_candidate(plan, session, collection, &state, &document, &record_id, &end, error));
            if (end) {
                plan->exhausted = true;
                break;
            }
            TC_CHECK(deliver(plan, document, record_id, emit, context, &refused, error));
        }
        if (refused) {
            break;
        }
    }
    ok = true;
done:
    scan_close(state.scan);
    if (state.owns) {
        bson_destroy(&state.owned);
    }
    *out_exhausted = plan->exhausted && plan->pending == NULL;
    return ok;
}

/* --- explain ---------------------------------------------------------------------- */

static void append_index_scan(bson_t *target, const char *index_name, const bson_t *key_pattern, bool multikey,
                              unsigned properties, bool descending, const bson_t *bounds, uint64_t keys_examined,
                              bool with_stats)
{
    BSON_APPEND_UTF8(target, "stage", "IXSCAN");
    BSON_APPEND_DOCUMENT(target, "keyPattern", key_pattern);
    BSON_APPEND_UTF8(target, "indexName", index_name);
    BSON_APPEND_BOOL(target, "isMultiKey", multikey);
    BSON_APPEND_BOOL(target, "isUnique", (properties & INDEX_PROPERTY_UNIQUE) != 0);
    BSON_APPEND_BOOL(target, "isSparse", (properties & INDEX_PROPERTY_SPARSE) != 0);
    BSON_APPEND_BOOL(target, "isPartial", (properties & INDEX_PROPERTY_PARTIAL) != 0);
    BSON_APPEND_INT32(target, "indexVersion", 2);
    BSON_APPEND_UTF8(target, "direction", descending ? "backward" : "forward");
    BSON_APPEND_DOCUMENT(target, "indexBounds", bounds);
    if (with_stats) {
        BSON_APPEND_INT64(target, "keysExamined", (int64_t)keys_examined);
    }
}

static void append_index_scan_fields(const find_plan_t *plan, bson_t *target, bool with_stats)
{
    append_index_scan(target, plan->index_name, &plan->index_key_pattern, plan->index_multikey, plan->index_properties,
                      plan->descending_scan,
                      &plan->index_bounds_explain, plan->keys_examined, with_stats);
}

/* {stage: "OR", inputStages: [IXSCAN, ...]}, one per $or clause. */
static void append_union_stage(const find_plan_t *plan, bson_t *stage, bool with_stats)
{
    bson_t inputs;
    BSON_APPEND_UTF8(stage, "stage", "OR");
    BSON_APPEND_ARRAY_BEGIN(stage, "inputStages", &inputs);
    for (size_t i = 0; i < plan->branch_count; i++) {
        const or_branch_t *branch = &plan->branches[i];
        char key[16];
        const char *key_text;
        bson_t input;
        bson_uint32_to_string((uint32_t)i, &key_text, key, sizeof key);
        bson_append_document_begin(&inputs, key_text, -1, &input);
        append_index_scan(&input, branch->index_name, &branch->key_pattern, branch->multikey, branch->properties, false,
                          &branch->bounds_explain, branch->keys_examined, with_stats);
        bson_append_document_end(&inputs, &input);
    }
    bson_append_array_end(stage, &inputs);
}

static void append_access_stage(const find_plan_t *plan, bson_t *stage, bool with_stats)
{
    if (plan->access == ACCESS_COLLECTION_SCAN) {
        BSON_APPEND_UTF8(stage, "stage", "COLLSCAN");
        if (bson_count_keys(&plan->filter) > 0) {
            BSON_APPEND_DOCUMENT(stage, "filter", &plan->filter);
        }
        BSON_APPEND_UTF8(stage, "direction", plan->descending_scan ? "backward" : "forward");
        if (with_stats) {
            BSON_APPEND_INT64(stage, "docsExamined", (int64_t)plan->documents_examined);
        }
        return;
    }
    if (plan->access == ACCESS_ID_LOOKUP) {
        BSON_APPEND_UTF8(stage, "stage", "IDHACK");
        if (with_stats) {
            BSON_APPEND_INT64(stage, "keysExamined", (int64_t)plan->keys_examined);
            BSON_APPEND_INT64(stage, "docsExamined", (int64_t)plan->documents_examined);
        }
        return;
    }
    if (plan->covered) {
        append_index_scan_fields(plan, stage, with_stats);
        return;
    }
    BSON_APPEND_UTF8(stage, "stage", "FETCH");
    if (bson_count_keys(&plan->filter) > 0) {
        BSON_APPEND_DOCUMENT(stage, "filter", &plan->filter);
    }
    if (with_stats) {
        BSON_APPEND_INT64(stage, "docsExamined", (int64_t)plan->documents_examined);
    }
    bson_t index_scan;
    BSON_APPEND_DOCUMENT_BEGIN(stage, "inputStage", &index_scan);
    if (plan->branches != NULL) {
        append_union_stage(plan, &index_scan, with_stats);
    } else {
        append_index_scan_fields(plan, &index_scan, with_stats);
    }
    bson_append_document_end(stage, &index_scan);
}

static void append_plan_stages(const find_plan_t *plan, bson_t *out, const char *key, bool with_stats)
{
    /* Outermost first: PROJECTION, LIMIT, SKIP, SORT, then the access stages. */
    const char *wrappers[4];
    size_t wrapper_count = 0;
    if (plan->projection != NULL) {
        wrappers[wrapper_count++] = plan->covered ? "PROJECTION_COVERED" : "PROJECTION_SIMPLE";
    }
    if (plan->limit > 0 && !plan->blocking_sort) {
        wrappers[wrapper_count++] = "LIMIT";
    }
    if (plan->skip > 0) {
        wrappers[wrapper_count++] = "SKIP";
    }
    if (plan->blocking_sort) {
        wrappers[wrapper_count++] = "SORT";
    }
    bson_t levels[6];
    bson_t *current = out;
    const char *current_key = key;
    for (size_t i = 0; i < wrapper_count; i++) {
        bson_append_document_begin(current, current_key, -1, &levels[i]);
        BSON_APPEND_UTF8(&levels[i], "stage", wrappers[i]);
        if (strncmp(wrappers[i], "PROJECTION", 10) == 0) {
            BSON_APPEND_DOCUMENT(&levels[i], "transformBy", &plan->projection_spec);
        } else if (strcmp(wrappers[i], "LIMIT") == 0) {
            BSON_APPEND_INT64(&levels[i], "limitAmount", plan->limit);
        } else if (strcmp(wrappers[i], "SKIP") == 0) {
            BSON_APPEND_INT64(&levels[i], "skipAmount", plan->skip);
        } else if (strcmp(wrappers[i], "SORT") == 0) {
            BSON_APPEND_DOCUMENT(&levels[i], "sortPattern", &plan->sort_pattern);
            BSON_APPEND_INT32(&levels[i], "memLimit", BLOCKING_SORT_MEMORY_LIMIT);
            if (plan->limit > 0) {
                BSON_APPEND_INT64(&levels[i], "limitAmount", plan->limit);
            }
            BSON_APPEND_UTF8(&levels[i], "type", "simple");
        }
        if (with_stats) {
            BSON_APPEND_INT64(&levels[i], "nReturned", plan->returned);
        }
        current = &levels[i];
        current_key = "inputStage";
    }
    bson_t access;
    bson_append_document_begin(current, current_key, -1, &access);
    append_access_stage(plan, &access, with_stats);
    bson_append_document_end(current, &access);
    for (size_t i = wrapper_count; i > 0; i--) {
        bson_append_document_end(i == 1 ? out : &levels[i - 2], &levels[i - 1]);
    }
}

void find_plan_append_query_planner(const find_plan_t *plan, const char *ns, bson_t *out)
{
    BSON_APPEND_UTF8(out, "namespace", ns);
    BSON_APPEND_BOOL(out, "indexFilterSet", false);
    BSON_APPEND_DOCUMENT(out, "parsedQuery", &plan->filter);
    BSON_APPEND_INT32(out, "maxIndexedOrSolutionsReached", 0);
    append_plan_stages(plan, out, "winningPlan", false);
    bson_t rejected;
    BSON_APPEND_ARRAY_BEGIN(out, "rejectedPlans", &rejected);
    bson_append_array_end(out, &rejected);
}

void find_plan_append_execution_stats(const find_plan_t *plan, int64_t elapsed_ms, bson_t *out)
{
    BSON_APPEND_BOOL(out, "executionSuccess", true);
    BSON_APPEND_INT64(out, "nReturned", plan->returned);
    BSON_APPEND_INT64(out, "executionTimeMillis", elapsed_ms);
    BSON_APPEND_INT64(out, "totalKeysExamined", (int64_t)plan->keys_examined);
    BSON_APPEND_INT64(out, "totalDocsExamined", (int64_t)plan->documents_examined);
    append_plan_stages(plan, out, "executionStages", true);
}
