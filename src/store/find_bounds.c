/* Index bounds from a find filter: for each field of an index's key pattern the
 * filter's conjuncts give a range or a list of points, which become the scan's
 * intervals (keystrings) and explain's indexBounds. find.c chooses the index. */
#include "store/find_private.h"
#include "query/match.h"
#include "query/order.h"
#include "query/value_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- small helpers ------------------------------------------------------------ */

bool find_is_operator_document(const bson_iter_t *iter)
{
    bson_iter_t child;
    if (!BSON_ITER_HOLDS_DOCUMENT(iter) || !bson_iter_recurse(iter, &child) || !bson_iter_next(&child)) {
        return false;
    }
    return bson_iter_key(&child)[0] == '$';
}

/* --- field ranges ----------------------------------------------------------------
 * For one field, the filter's top-level conjuncts give a value range or a list
 * of points. Values an index cannot bound by (arrays, regexes, null, documents
 * of operators we do not model) leave the field unbounded; the filter is
 * always re-applied to what the scan returns, so bounds only need to be a
 * superset of the answer. */

typedef struct field_range {
    bool bounded;
    bool is_points;
    /* {$not: {<range>}}: every key outside [lower, upper], the intervals
     * [MinKey, lower) and (upper, MaxKey], as mongod bounds a negated range. */
    bool is_complement;
    bson_value_t *points; /* an $in list of any length: each point is one index seek */
    size_t point_count, point_capacity;
    bool has_lower, has_upper;
    bson_value_t lower, upper; /* copies */
    bool lower_inclusive, upper_inclusive;
    const collation_t *collation; /* the index's: how string bounds order; NULL: binary */
} field_range_t;

static void field_range_cleanup(field_range_t *range)
{
    for (size_t i = 0; i < range->point_count; i++) {
        bson_value_destroy(&range->points[i]);
    }
    bson_free(range->points);
    if (range->has_lower) {
        bson_value_destroy(&range->lower);
    }
    if (range->has_upper) {
        bson_value_destroy(&range->upper);
    }
    const collation_t *collation = range->collation; /* the index's, for the next condition */
    memset(range, 0, sizeof *range);
    range->collation = collation;
}

bool find_value_is_indexable_operand(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_ARRAY:
    case BSON_TYPE_REGEX:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return false;
    default:
        return true;
    }
}

/* The lowest and highest values of value's type bracket, so a one-sided range
 * stays inside its type as MongoDB's comparison does. */
static bool bracket_limits(const bson_value_t *value, bson_value_t *out_low, bson_value_t *out_high)
{
    memset(out_low, 0, sizeof *out_low);
    memset(out_high, 0, sizeof *out_high);
    switch (value->value_type) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        out_low->value_type = BSON_TYPE_DOUBLE;
        out_low->value.v_double = NAN;
        out_high->value_type = BSON_TYPE_DOUBLE;
        out_high->value.v_double = INFINITY;
        return true;
    case BSON_TYPE_DATE_TIME:
        out_low->value_type = BSON_TYPE_DATE_TIME;
        out_low->value.v_datetime = INT64_MIN;
        out_high->value_type = BSON_TYPE_DATE_TIME;
        out_high->value.v_datetime = INT64_MAX;
        return true;
    case BSON_TYPE_TIMESTAMP: /* the workers' marks are kept by cluster time */
        out_low->value_type = BSON_TYPE_TIMESTAMP;
        out_high->value_type = BSON_TYPE_TIMESTAMP;
        out_high->value.v_timestamp.timestamp = UINT32_MAX;
        out_high->value.v_timestamp.increment = UINT32_MAX;
        return true;
    case BSON_TYPE_OID:
        out_low->value_type = BSON_TYPE_OID;
        memset(out_low->value.v_oid.bytes, 0x00, 12);
        out_high->value_type = BSON_TYPE_OID;
        memset(out_high->value.v_oid.bytes, 0xff, 12);
        return true;
    default:
        return false;
    }
}

static void range_add_point(field_range_t *range, const bson_value_t *value)
{
    if (range->point_count == range->point_capacity) {
        range->point_capacity = range->point_capacity == 0 ? 4 : range->point_capacity * 2;
        range->points = bson_realloc(range->points, range->point_capacity * sizeof range->points[0]);
    }
    bson_value_copy(value, &range->points[range->point_count++]);
}

static void range_set_side(field_range_t *range, bool lower, const bson_value_t *value, bool inclusive)
{
    bool *has = lower ? &range->has_lower : &range->has_upper;
    bson_value_t *side = lower ? &range->lower : &range->upper;
    bool *side_inclusive = lower ? &range->lower_inclusive : &range->upper_inclusive;
    if (*has) {
        int comparison = order_compare_values_collated(value, side, range->collation);
        bool tighter = lower ? (comparison > 0 || (comparison == 0 && !inclusive))
                             : (comparison < 0 || (comparison == 0 && !inclusive));
        if (!tighter) {
            return;
        }
        bson_value_destroy(side);
    }
    bson_value_copy(value, side);
    *side_inclusive = inclusive;
    *has = true;
}

/* Completes a one-sided range with its type bracket's other end. */
static void range_close_bracket(field_range_t *range)
{
    if (range->is_points || range->is_complement || (range->has_lower && range->has_upper)) {
        return;
    }
    bson_value_t low, high;
    const bson_value_t *known = range->has_lower ? &range->lower : &range->upper;
    if (!bracket_limits(known, &low, &high)) {
        return;
    }
    if (!range->has_lower) {
        range->lower = low;
        range->has_lower = true;
        range->lower_inclusive = true;
    } else {
        range->upper = high;
        range->has_upper = true;
        range->upper_inclusive = true;
    }
}

/* $gt, $gte, $lt or $lte: which side of a range it sets, and whether inclusively. */
static bool comparison_side(const char *name, bool *out_lower, bool *out_inclusive)
{
    if (strcmp(name, "$gt") != 0 && strcmp(name, "$gte") != 0 && strcmp(name, "$lt") != 0 &&
        strcmp(name, "$lte") != 0) {
        return false;
    }
    *out_lower = name[1] == 'g';
    *out_inclusive = name[3] == 'e';
    return true;
}

/* Whether the range holds no value: the complement would then be two
 * overlapping intervals, each document found twice (mongod scans it whole). */
static bool range_is_empty(const field_range_t *range)
{
    int comparison = order_compare_values_collated(&range->lower, &range->upper, range->collation);
    return comparison > 0 || (comparison == 0 && (!range->lower_inclusive || !range->upper_inclusive));
}

/* {$not: {$gte: a, $lt: b, ...}}: the range the comparisons inside select,
 * closed within their type bracket, becomes a complement. False (range left
 * empty) for anything else inside the $not, a regex, NaN, an empty range, or a
 * type without a bracket (strings: the complement's upper piece would have no
 * end). Numbers' lower end is -Infinity, not NaN: NaN matches no comparison, so
 * it belongs to the complement, below every other number. */
static bool range_set_complement(field_range_t *range, const bson_iter_t *negated)
{
    bson_iter_t operators;
    if (!BSON_ITER_HOLDS_DOCUMENT(negated) || !bson_iter_recurse(negated, &operators)) {
        return false;
    }
    bson_type_t bracket = BSON_TYPE_EOD;
    bool any = false;
    while (bson_iter_next(&operators)) {
        const char *name = bson_iter_key(&operators);
        const bson_value_t *value = bson_iter_value(&operators);
        bson_value_t low, high;
        bool lower, inclusive;
        if (!comparison_side(name, &lower, &inclusive) || !find_value_is_indexable_operand(value) ||
            match_value_is_nan(value) || !bracket_limits(value, &low, &high) || (any && low.value_type != bracket)) {
            field_range_cleanup(range);
            return false;
        }
        bracket = low.value_type;
        range_set_side(range, lower, value, inclusive);
        any = true;
    }
    if (!any) {
        return false;
    }
    if (!range->has_lower && bracket == BSON_TYPE_DOUBLE) {
        bson_value_t lowest = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = -INFINITY};
        range_set_side(range, true, &lowest, true);
    }
    range_close_bracket(range);
    if (range_is_empty(range)) {
        field_range_cleanup(range);
        return false;
    }
    range->is_complement = true;
    return true;
}

/* Reads the conjunct `path: operand` into range. allow_intersection is false
 * for multikey indexes, where two conditions may hold on different elements. */
static void range_add_condition(field_range_t *range, bson_iter_t *operand, bool allow_intersection)
{
    if (range->bounded && !allow_intersection) {
        return;
    }
    if (!find_is_operator_document(operand)) {
        const bson_value_t *value = bson_iter_value(operand);
        if (!find_value_is_indexable_operand(value) || range->bounded) {
            return;
        }
        range->bounded = true;
        range->is_points = true;
        range_add_point(range, value);
        return;
    }
    bson_iter_t operators;
    bson_iter_recurse(operand, &operators);
    field_range_t candidate = {.collation = range->collation};
    bool usable = false, lower, inclusive;
    while (bson_iter_next(&operators)) {
        const char *name = bson_iter_key(&operators);
        const bson_value_t *value = bson_iter_value(&operators);
        if (strcmp(name, "$eq") == 0 && find_value_is_indexable_operand(value)) {
            if (!usable) {
                candidate.is_points = true;
                range_add_point(&candidate, value);
                usable = true;
            }
        } else if (strcmp(name, "$in") == 0 && BSON_ITER_HOLDS_ARRAY(&operators) && !usable) {
            bson_iter_t items;
            bson_iter_recurse(&operators, &items);
            bool all_indexable = true;
            candidate.is_points = true;
            while (bson_iter_next(&items)) {
                if (!find_value_is_indexable_operand(bson_iter_value(&items))) {
                    all_indexable = false;
                    break;
                }
                range_add_point(&candidate, bson_iter_value(&items));
            }
            if (all_indexable && candidate.point_count > 0) {
                usable = true;
            } else {
                field_range_cleanup(&candidate);
            }
        } else if (strcmp(name, "$not") == 0 && !usable) {
            usable = range_set_complement(&candidate, &operators);
        } else if (comparison_side(name, &lower, &inclusive) && find_value_is_indexable_operand(value) &&
                   !candidate.is_points && !candidate.is_complement) {
            if (usable && !allow_intersection) {
                continue;
            }
            range_set_side(&candidate, lower, value, inclusive);
            usable = true;
        }
    }
    if (!usable) {
        field_range_cleanup(&candidate);
        return;
    }
    candidate.bounded = true;
    if (range->bounded) {
        /* Already bounded by an earlier conjunct on the same path: keep that. */
        field_range_cleanup(&candidate);
        return;
    }
    *range = candidate;
}

static void collect_field_range(const bson_t *filter, const char *path, bool allow_intersection,
                                field_range_t *range)
{
    bson_iter_t iter;
    if (filter == NULL || !bson_iter_init(&iter, filter)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, path) == 0) {
            range_add_condition(range, &iter, allow_intersection);
        } else if (strcmp(key, "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&iter)) {
            bson_iter_t clauses;
            bson_iter_recurse(&iter, &clauses);
            while (bson_iter_next(&clauses)) {
                bson_t clause;
                uint32_t length;
                const uint8_t *data;
                if (!BSON_ITER_HOLDS_DOCUMENT(&clauses)) {
                    continue;
                }
                bson_iter_document(&clauses, &length, &data);
                bson_init_static(&clause, data, length);
                collect_field_range(&clause, path, allow_intersection, range);
            }
        }
    }
}

int find_index_direction(const bson_iter_t *iter)
{
    return bson_iter_as_double(iter) < 0 ? -1 : 1;
}

static void append_explain_value(bson_string_t *out, const bson_value_t *value)
{
    value_format_append(out, value);
}

/* --- intervals ---------------------------------------------------------------- */

/* An equality's interval as explain shows it, "[5, 5]", appended to field_bounds under key. */
static void explain_append_point(bson_t *field_bounds, const char *key, const bson_value_t *value)
{
    bson_string_t *text = bson_string_new("[");
    append_explain_value(text, value);
    bson_string_append(text, ", ");
    append_explain_value(text, value);
    bson_string_append(text, "]");
    bson_append_utf8(field_bounds, key, -1, text->str, -1);
    bson_string_free(text, true);
}

/* A point's interval and its position in the filter, sorted by key (then by
 * position, so the first of equal points is the one kept). */
typedef struct positioned_point {
    scan_bounds_t interval;
    size_t position;
} positioned_point_t;

static int compare_positioned_points(const void *left, const void *right)
{
    const positioned_point_t *a = left, *b = right;
    int comparison = keystring_compare(&a->interval.lower, &b->interval.lower);
    if (comparison == 0) {
        comparison = a->position < b->position ? -1 : a->position > b->position;
    }
    return comparison;
}

/* A point list on the first field: one interval per distinct point, in key order
 * (sorted once: an $in of thousands of _ids is one seek each, as on mongod);
 * explain lists the distinct points under their positions in the filter. */
static void build_point_intervals(const field_range_t *range, bool descending, scan_bounds_t **intervals,
                                  size_t *interval_count, bson_t *field_bounds)
{
    positioned_point_t *points = bson_malloc0(range->point_count * sizeof *points);
    bool *kept = bson_malloc0(range->point_count * sizeof *kept);
    for (size_t i = 0; i < range->point_count; i++) {
        scan_bounds_init(&points[i].interval);
        keystring_append_value_collated(&points[i].interval.lower, &range->points[i], descending, range->collation);
        keystring_append_value_collated(&points[i].interval.upper, &range->points[i], descending, range->collation);
        points[i].position = i;
    }
    qsort(points, range->point_count, sizeof *points, compare_positioned_points);
    *intervals = bson_malloc0(range->point_count * sizeof(scan_bounds_t));
    for (size_t i = 0; i < range->point_count; i++) {
        if (*interval_count > 0 && keystring_compare(&(*intervals)[*interval_count - 1].lower, &points[i].interval.lower) == 0) {
            scan_bounds_cleanup(&points[i].interval);
            continue;
        }
        (*intervals)[(*interval_count)++] = points[i].interval;
        kept[points[i].position] = true;
    }
    for (size_t i = 0; i < range->point_count; i++) {
        if (kept[i]) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
            explain_append_point(field_bounds, key_string, &range->points[i]);
        }
    }
    bson_free(kept);
    bson_free(points);
}

/* A range after the equality prefix: one interval, lower and upper in value order,
 * swapped for a descending field; explain shows it as "(5, 10]". */
static scan_bounds_t build_range_interval(const scan_bounds_t *prefix, const field_range_t *range, bool descending,
                                          bson_t *field_bounds, const char *explain_key)
{
    scan_bounds_t interval;
    scan_bounds_init(&interval);
    keystring_append_bytes(&interval.lower, prefix->lower.data, prefix->lower.length);
    keystring_append_bytes(&interval.upper, prefix->upper.data, prefix->upper.length);
    const bson_value_t *key_low = descending ? (range->has_upper ? &range->upper : NULL)
                                             : (range->has_lower ? &range->lower : NULL);
    const bson_value_t *key_high = descending ? (range->has_lower ? &range->lower : NULL)
                                              : (range->has_upper ? &range->upper : NULL);
    if (key_low != NULL) {
        keystring_append_value_collated(&interval.lower, key_low, descending, range->collation);
        interval.lower_inclusive = descending ? range->upper_inclusive : range->lower_inclusive;
    }
    if (key_high != NULL) {
        keystring_append_value_collated(&interval.upper, key_high, descending, range->collation);
        interval.upper_inclusive = descending ? range->lower_inclusive : range->upper_inclusive;
    }
    bson_string_t *text = bson_string_new(range->has_lower && !range->lower_inclusive ? "(" : "[");
    if (range->has_lower) {
        append_explain_value(text, &range->lower);
    } else {
        bson_string_append(text, "MinKey");
    }
    bson_string_append(text, ", ");
    if (range->has_upper) {
        append_explain_value(text, &range->upper);
    } else {
        bson_string_append(text, "MaxKey");
    }
    bson_string_append(text, range->has_upper && !range->upper_inclusive ? ")" : "]");
    bson_append_utf8(field_bounds, explain_key, -1, text->str, -1);
    bson_string_free(text, true);
    return interval;
}

/* A complement's two intervals, [MinKey, lower) and (upper, MaxKey], in key
 * order: swapped for a descending field. */
static void build_complement_intervals(const scan_bounds_t *prefix, const field_range_t *range, bool descending,
                                       scan_bounds_t **intervals, size_t *interval_count, bson_t *field_bounds)
{
    field_range_t below = {.has_upper = true, .upper = range->lower, .upper_inclusive = !range->lower_inclusive,
                           .collation = range->collation};
    field_range_t above = {.has_lower = true, .lower = range->upper, .lower_inclusive = !range->upper_inclusive,
                           .collation = range->collation};
    *intervals = bson_malloc0(2 * sizeof(scan_bounds_t));
    (*intervals)[descending ? 1 : 0] = build_range_interval(prefix, &below, descending, field_bounds, "0");
    (*intervals)[descending ? 0 : 1] = build_range_interval(prefix, &above, descending, field_bounds, "1");
    *interval_count = 2;
}

/* Appends {path: ["[MinKey, MaxKey]"]}: a field the scan does not bound. */
static void explain_append_unbounded(bson_t *explain, const char *path)
{
    bson_t field_bounds;
    bson_append_array_begin(explain, path, -1, &field_bounds);
    bson_append_utf8(&field_bounds, "0", 1, "[MinKey, MaxKey]", -1);
    bson_append_array_end(explain, &field_bounds);
}

bool find_bounds_build(const bson_t *filter, const bson_t *key_pattern, bool multikey, const collation_t *collation,
                       scan_bounds_t **intervals, size_t *interval_count, size_t *out_bounded_fields,
                       bson_t *explain)
{
    bson_iter_t fields;
    bson_iter_init(&fields, key_pattern);
    scan_bounds_t prefix;
    scan_bounds_init(&prefix);
    size_t prefix_fields = 0;
    bool built = false;
    bson_reinit(explain);
    *out_bounded_fields = 0;

    while (bson_iter_next(&fields)) {
        const char *path = bson_iter_key(&fields);
        bool descending = find_index_direction(&fields) < 0;
        field_range_t range = {.collation = collation};
        collect_field_range(filter, path, !multikey, &range);
        if (!range.bounded) {
            explain_append_unbounded(explain, path);
            field_range_cleanup(&range);
            break;
        }
        range_close_bracket(&range);
        bson_t field_bounds;
        if (range.is_points && range.point_count == 1 && !multikey) {
            /* Equality: extend the prefix and look at the next field. */
            keystring_append_value_collated(&prefix.lower, &range.points[0], descending, collation);
            keystring_append_value_collated(&prefix.upper, &range.points[0], descending, collation);
            bson_append_array_begin(explain, path, -1, &field_bounds);
            explain_append_point(&field_bounds, "0", &range.points[0]);
            bson_append_array_end(explain, &field_bounds);
            prefix_fields++;
            (*out_bounded_fields)++;
            field_range_cleanup(&range);
            built = true;
            continue;
        }
        if (range.is_points && prefix_fields > 0) {
            /* Points after an equality prefix: the prefix alone bounds the scan. */
            explain_append_unbounded(explain, path);
            field_range_cleanup(&range);
            break;
        }
        bson_append_array_begin(explain, path, -1, &field_bounds);
        if (range.is_points) {
            build_point_intervals(&range, descending, intervals, interval_count, &field_bounds);
        } else if (range.is_complement) {
            build_complement_intervals(&prefix, &range, descending, intervals, interval_count, &field_bounds);
        } else {
            *intervals = bson_malloc0(sizeof(scan_bounds_t));
            (*intervals)[0] = build_range_interval(&prefix, &range, descending, &field_bounds, "0");
            *interval_count = 1;
        }
        bson_append_array_end(explain, &field_bounds);
        field_range_cleanup(&range);
        scan_bounds_cleanup(&prefix);
        (*out_bounded_fields)++;
        built = true;
        goto finish;
    }
    /* Only equalities (or nothing) bounded the scan: the prefix is the interval. */
    if (built) {
        *intervals = bson_malloc0(sizeof(scan_bounds_t));
        (*intervals)[0] = prefix;
        *interval_count = 1;
    } else {
        scan_bounds_cleanup(&prefix);
    }
finish:
    /* Fields after the bounded ones are unbounded in explain. */
    while (bson_iter_next(&fields)) {
        explain_append_unbounded(explain, bson_iter_key(&fields));
    }
    return built;
}
