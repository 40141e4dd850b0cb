/* What a filter provably implies, for the planner: a date lower bound on the time
 * field, the _id values it pins, the point-read shape, and the _id an upsert may
 * insert. Every answer errs toward "nothing proved". */
#include "proxy/planner_private.h"
#include "common/bson_view.h"

#include <string.h>

/* How many times key names a field of document's top level. A field named twice
 * proves nothing: the planner will not bet on which one a server honours. */
static size_t count_key(const bson_t *document, const char *key)
{
    bson_iter_t iter;
    size_t count = 0;
    if (bson_iter_init(&iter, document)) {
        while (bson_iter_next(&iter)) {
            if (strcmp(bson_iter_key(&iter), key) == 0) {
                count++;
            }
        }
    }
    return count;
}

static bool is_dbref_key(const char *key)
{
    return strcmp(key, "$ref") == 0 || strcmp(key, "$id") == 0 || strcmp(key, "$db") == 0;
}

/* An operand is an operator document when its first field starts with '$', as
 * MongoDB's parser decides; {a: 1, $gt: 2} is an equality with a document. */
static bool is_operator_document(const bson_iter_t *operand)
{
    bson_iter_t child;
    return BSON_ITER_HOLDS_DOCUMENT(operand) && bson_iter_recurse(operand, &child) && bson_iter_next(&child) &&
           bson_iter_key(&child)[0] == '$';
}

static void bound_tighten(planner_bound_t *bound, int64_t ms, bool inclusive)
{
    /* x > b is stronger than x >= b; of two bounds the larger wins. */
    if (!bound->found || ms > bound->ms || (ms == bound->ms && bound->inclusive && !inclusive)) {
        bound->found = true;
        bound->ms = ms;
        bound->inclusive = inclusive;
    }
}

static void bound_merge(planner_bound_t *bound, const planner_bound_t *other)
{
    if (other->found) {
        bound_tighten(bound, other->ms, other->inclusive);
    }
}

/* The smallest date of a non-empty $in array made only of dates. */
static bool in_minimum_date(const bson_iter_t *operand, int64_t *out_minimum)
{
    bson_iter_t element;
    bool any = false;
    int64_t minimum = INT64_MAX;
    if (!BSON_ITER_HOLDS_ARRAY(operand) || !bson_iter_recurse(operand, &element)) {
        return false;
    }
    while (bson_iter_next(&element)) {
        if (!BSON_ITER_HOLDS_DATE_TIME(&element)) {
            return false;
        }
        int64_t date = bson_iter_date_time(&element);
        if (date < minimum) {
            minimum = date;
        }
        any = true;
    }
    *out_minimum = minimum;
    return any;
}

/* The bound proved by one `time_field: operand` conjunct. */
static void operand_bound(const bson_iter_t *operand, planner_bound_t *out)
{
    enum { GTE, GT, EQ, IN, OPERATOR_COUNT };
    unsigned seen[OPERATOR_COUNT] = {0};
    planner_bound_t bound = {0};
    bson_iter_t operator;

    out->found = false;
    if (BSON_ITER_HOLDS_DATE_TIME(operand)) {
        bound_tighten(out, bson_iter_date_time(operand), true);
        return;
    }
    if (!is_operator_document(operand) || !bson_iter_recurse(operand, &operator)) {
        return;
    }
    while (bson_iter_next(&operator)) {
        const char *name = bson_iter_key(&operator);
        int64_t minimum;
        if (is_dbref_key(name)) {
            return;
        } else if (strcmp(name, "$gte") == 0) {
            seen[GTE]++;
            if (BSON_ITER_HOLDS_DATE_TIME(&operator)) {
                bound_tighten(&bound, bson_iter_date_time(&operator), true);
            }
        } else if (strcmp(name, "$gt") == 0) {
            seen[GT]++;
            if (BSON_ITER_HOLDS_DATE_TIME(&operator)) {
                bound_tighten(&bound, bson_iter_date_time(&operator), false);
            }
        } else if (strcmp(name, "$eq") == 0) {
            seen[EQ]++;
            if (BSON_ITER_HOLDS_DATE_TIME(&operator)) {
                bound_tighten(&bound, bson_iter_date_time(&operator), true);
            }
        } else if (strcmp(name, "$in") == 0) {
            seen[IN]++;
            if (in_minimum_date(&operator, &minimum)) {
                bound_tighten(&bound, minimum, true);
            }
        }
        /* Any other operator is one more conjunct: it can only narrow the match. */
    }
    for (int i = 0; i < OPERATOR_COUNT; i++) {
        if (seen[i] > 1) {
            return;
        }
    }
    *out = bound;
}

static bool collect_bound(const bson_t *filter, const char *time_field, int depth, planner_bound_t *bound)
{
    bson_iter_t iter;
    if (depth > PLANNER_MAX_DEPTH || !bson_iter_init(&iter, filter)) {
        return false;
    }
    const bool time_field_once = count_key(filter, time_field) == 1;
    const bool and_once = count_key(filter, "$and") == 1;
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "$and") == 0) {
            bson_iter_t element;
            planner_bound_t and_bound = {0};
            size_t elements = 0;
            if (!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &element)) {
                return false;
            }
            while (bson_iter_next(&element)) {
                bson_t conjunct;
                if (!BSON_ITER_HOLDS_DOCUMENT(&element) || !bson_view_of(&element, &conjunct) ||
                    !collect_bound(&conjunct, time_field, depth + 1, &and_bound)) {
                    return false;
                }
                elements++;
            }
            if (elements == 0) {
                return false;
            }
            if (and_once) {
                bound_merge(bound, &and_bound);
            }
        } else if (strcmp(key, time_field) == 0 && time_field_once) {
            planner_bound_t field_bound;
            operand_bound(&iter, &field_bound);
            bound_merge(bound, &field_bound);
        }
        /* $or, $nor, $expr, $where, dotted sub-paths, other fields: more conjuncts,
         * which prove nothing about the time field but cannot widen the match. */
    }
    return true;
}

bool planner_collect_bound(const bson_t *filter, const char *time_field, planner_bound_t *bound)
{
    if (filter == NULL || time_field == NULL || time_field[0] == '\0' || time_field[0] == '$') {
        return false;
    }
    return collect_bound(filter, time_field, 1, bound);
}

bool plan_filter_lower_bound(const bson_t *filter, const char *time_field, int64_t *out_lower_bound_ms,
                             bool *out_inclusive)
{
    planner_bound_t bound = {0};
    if (!planner_collect_bound(filter, time_field, &bound) || !bound.found) {
        return false;
    }
    *out_lower_bound_ms = bound.ms;
    *out_inclusive = bound.inclusive;
    return true;
}

/* ---- _id values ----------------------------------------------------------- */

bool planner_is_plain_id(const bson_iter_t *iter)
{
    switch (bson_iter_type(iter)) {
    case BSON_TYPE_REGEX:
    case BSON_TYPE_ARRAY:
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_EOD:
        return false;
    case BSON_TYPE_DOCUMENT:
        return !is_operator_document(iter);
    default:
        return true;
    }
}

void planner_append_value(bson_t *array, uint32_t *count, const bson_iter_t *value)
{
    char index[16];
    const char *key;
    size_t key_length = bson_uint32_to_string(*count, &key, index, sizeof index);
    bson_append_iter(array, key, (int)key_length, value);
    (*count)++;
}

/* The ids of a non-empty $in array of plain values; appends nothing otherwise. */
static bool append_in_ids(const bson_iter_t *operand, bson_t *ids, uint32_t *count)
{
    bson_iter_t element;
    size_t elements = 0;
    if (!BSON_ITER_HOLDS_ARRAY(operand) || !bson_iter_recurse(operand, &element)) {
        return false;
    }
    while (bson_iter_next(&element)) {
        if (!planner_is_plain_id(&element)) {
            return false;
        }
        elements++;
    }
    if (elements == 0) {
        return false;
    }
    bson_iter_recurse(operand, &element);
    while (bson_iter_next(&element)) {
        planner_append_value(ids, count, &element);
    }
    return true;
}

/* The ids one `_id: operand` conjunct allows. exact: the operand must be a plain
 * value or an operator document of exactly one $eq or $in (the point-read shape);
 * otherwise a lone $eq or $in among other operators pins too. */
static bool operand_ids(const bson_iter_t *operand, bool exact, bson_t *ids, uint32_t *count)
{
    bson_iter_t operator;
    bson_iter_t equal = {0};
    bson_iter_t in = {0};
    unsigned equals = 0, ins = 0, others = 0;

    if (!is_operator_document(operand)) {
        if (!planner_is_plain_id(operand)) {
            return false;
        }
        planner_append_value(ids, count, operand);
        return true;
    }
    bson_iter_recurse(operand, &operator);
    while (bson_iter_next(&operator)) {
        const char *name = bson_iter_key(&operator);
        if (is_dbref_key(name)) {
            return false;
        } else if (strcmp(name, "$eq") == 0) {
            equal = operator;
            equals++;
        } else if (strcmp(name, "$in") == 0) {
            in = operator;
            ins++;
        } else {
            others++;
        }
    }
    if (equals > 1 || ins > 1 || (exact && equals + ins + others != 1)) {
        return false;
    }
    if (equals == 1 && planner_is_plain_id(&equal)) {
        planner_append_value(ids, count, &equal);
        return true;
    }
    return ins == 1 && append_in_ids(&in, ids, count);
}

bool plan_filter_point_ids(const bson_t *filter, bson_t *out_ids, uint32_t *out_count)
{
    bson_iter_t iter;
    *out_count = 0;
    if (filter == NULL || bson_count_keys(filter) != 1 || !bson_iter_init_find(&iter, filter, "_id")) {
        return false;
    }
    return operand_ids(&iter, true, out_ids, out_count);
}

static bool pinned_ids(const bson_t *filter, int depth, bson_t *ids, uint32_t *count)
{
    bson_iter_t iter;
    if (depth > PLANNER_MAX_DEPTH || !bson_iter_init(&iter, filter)) {
        return false;
    }
    const bool id_once = count_key(filter, "_id") == 1;
    const bool and_once = count_key(filter, "$and") == 1;
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "_id") == 0 && id_once && operand_ids(&iter, false, ids, count)) {
            return true;
        }
        if (strcmp(key, "$and") == 0 && and_once && BSON_ITER_HOLDS_ARRAY(&iter)) {
            bson_iter_t element;
            bson_iter_recurse(&iter, &element);
            while (bson_iter_next(&element)) {
                bson_t conjunct;
                if (BSON_ITER_HOLDS_DOCUMENT(&element) && bson_view_of(&element, &conjunct) &&
                    pinned_ids(&conjunct, depth + 1, ids, count)) {
                    return true;
                }
            }
        }
    }
    return false;
}

bool planner_filter_pinned_ids(const bson_t *filter, bson_t *out_ids, uint32_t *out_count)
{
    *out_count = 0;
    return filter != NULL && pinned_ids(filter, 1, out_ids, out_count);
}

static bool is_id_subpath(const char *path)
{
    return strncmp(path, "_id.", 4) == 0;
}

static bool has_id_subpath(const bson_t *filter, int depth)
{
    bson_iter_t iter;
    if (depth > PLANNER_MAX_DEPTH || !bson_iter_init(&iter, filter)) {
        return true; /* too deep to tell: assume the worst */
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (is_id_subpath(key)) {
            return true;
        }
        if (strcmp(key, "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&iter)) {
            bson_iter_t element;
            bson_iter_recurse(&iter, &element);
            while (bson_iter_next(&element)) {
                bson_t conjunct;
                if (BSON_ITER_HOLDS_DOCUMENT(&element) && bson_view_of(&element, &conjunct) &&
                    has_id_subpath(&conjunct, depth + 1)) {
                    return true;
                }
            }
        }
    }
    return false;
}

bool planner_filter_has_id_subpath(const bson_t *filter)
{
    return filter != NULL && has_id_subpath(filter, 1);
}

/* ---- upserts -------------------------------------------------------------- */

planner_upsert_id_t planner_upsert_inserted_id(const bson_iter_t *update, bson_t *out_ids, uint32_t *out_count)
{
    bson_iter_t field;
    bson_iter_t known = {0};
    unsigned known_count = 0;

    if (!BSON_ITER_HOLDS_DOCUMENT(update) || !bson_iter_recurse(update, &field)) {
        return PLANNER_UPSERT_ID_UNKNOWN; /* an aggregation pipeline may compute any _id */
    }
    if (!is_operator_document(update)) {
        /* A replacement document: its own _id, or a generated one. */
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), "_id") == 0) {
                known = field;
                known_count++;
            }
        }
    } else {
        while (bson_iter_next(&field)) {
            const char *operator = bson_iter_key(&field);
            const bool sets = strcmp(operator, "$set") == 0 || strcmp(operator, "$setOnInsert") == 0;
            const bool renames = strcmp(operator, "$rename") == 0;
            bson_iter_t path;
            if (!BSON_ITER_HOLDS_DOCUMENT(&field) || !bson_iter_recurse(&field, &path)) {
                return PLANNER_UPSERT_ID_UNKNOWN;
            }
            while (bson_iter_next(&path)) {
                const char *name = bson_iter_key(&path);
                if (strcmp(name, "_id") == 0) {
                    if (!sets) {
                        return PLANNER_UPSERT_ID_UNKNOWN;
                    }
                    known = path;
                    known_count++;
                } else if (is_id_subpath(name)) {
                    return PLANNER_UPSERT_ID_UNKNOWN;
                }
                if (renames && BSON_ITER_HOLDS_UTF8(&path)) {
                    const char *target = bson_iter_utf8(&path, NULL);
                    if (strcmp(target, "_id") == 0 || is_id_subpath(target)) {
                        return PLANNER_UPSERT_ID_UNKNOWN;
                    }
                }
            }
        }
    }
    if (known_count > 1) {
        return PLANNER_UPSERT_ID_UNKNOWN;
    }
    if (known_count == 1) {
        planner_append_value(out_ids, out_count, &known);
        return PLANNER_UPSERT_ID_KNOWN;
    }
    return PLANNER_UPSERT_ID_GENERATED;
}
