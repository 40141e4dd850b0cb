/* Query implication for the planner's partial and sparse index checks: a
 * condition is split into atoms (one field, one operator) joined by $and and
 * $or; each atom must be implied by some conjunct of the query. */
#include "query/filter_implies.h"
#include "query/order.h"
#include "query/value_format.h"

#include <string.h>

typedef enum atom_op {
    OP_EQ,
    OP_GT,
    OP_GTE,
    OP_LT,
    OP_LTE,
    OP_IN,
    OP_EXISTS,
    OP_TYPE,
    OP_OTHER, /* anything else: implies nothing, implied by nothing */
} atom_op_t;

typedef struct atom {
    atom_op_t op;
    bson_iter_t value;
} atom_t;

static atom_op_t op_from_name(const char *name)
{
    static const struct {
        const char *name;
        atom_op_t op;
    } table[] = {{"$eq", OP_EQ},   {"$gt", OP_GT}, {"$gte", OP_GTE},       {"$lt", OP_LT},
                 {"$lte", OP_LTE}, {"$in", OP_IN}, {"$exists", OP_EXISTS}, {"$type", OP_TYPE}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(name, table[i].name) == 0) {
            return table[i].op;
        }
    }
    return OP_OTHER;
}

static bool is_operator_document(const bson_iter_t *iter)
{
    bson_iter_t child;
    return BSON_ITER_HOLDS_DOCUMENT(iter) && bson_iter_recurse(iter, &child) && bson_iter_next(&child) &&
           bson_iter_key(&child)[0] == '$';
}

static bool is_null_like(const bson_iter_t *value)
{
    return BSON_ITER_HOLDS_NULL(value) || BSON_ITER_HOLDS_UNDEFINED(value);
}

/* value op bound holds, within the bound's type bracket. */
static bool value_in_range(const bson_iter_t *value, atom_op_t op, const bson_iter_t *bound)
{
    if (order_canonical_type(bson_iter_type(value)) != order_canonical_type(bson_iter_type(bound))) {
        return false;
    }
    int comparison = order_compare_iters(value, bound);
    switch (op) {
    case OP_GT: return comparison > 0;
    case OP_GTE: return comparison >= 0;
    case OP_LT: return comparison < 0;
    case OP_LTE: return comparison <= 0;
    default: return false;
    }
}

static bool values_equal(const bson_iter_t *left, const bson_iter_t *right)
{
    return order_canonical_type(bson_iter_type(left)) == order_canonical_type(bson_iter_type(right)) &&
           order_compare_iters(left, right) == 0;
}

/* Whether every element of an $in list satisfies predicate(element, op, bound). */
static bool all_in_list(const bson_iter_t *list, bool (*predicate)(const bson_iter_t *, atom_op_t, const bson_iter_t *),
                        atom_op_t op, const bson_iter_t *bound)
{
    bson_iter_t elements;
    if (!BSON_ITER_HOLDS_ARRAY(list) || !bson_iter_recurse(list, &elements)) {
        return false;
    }
    bool any = false;
    while (bson_iter_next(&elements)) {
        if (BSON_ITER_HOLDS_REGEX(&elements) || !predicate(&elements, op, bound)) {
            return false;
        }
        any = true;
    }
    return any;
}

static bool equal_predicate(const bson_iter_t *value, atom_op_t op, const bson_iter_t *bound)
{
    (void)op;
    return values_equal(value, bound);
}

static bool member_predicate(const bson_iter_t *value, atom_op_t op, const bson_iter_t *list)
{
    (void)op;
    bson_iter_t elements;
    if (!BSON_ITER_HOLDS_ARRAY(list) || !bson_iter_recurse(list, &elements)) {
        return false;
    }
    while (bson_iter_next(&elements)) {
        if (values_equal(value, &elements)) {
            return true;
        }
    }
    return false;
}

static bool not_null_predicate(const bson_iter_t *value, atom_op_t op, const bson_iter_t *bound)
{
    (void)op;
    (void)bound;
    return !is_null_like(value);
}

/* Whether a $type operand (a name, a number, or an array of them) names type. */
static bool type_operand_names(const bson_iter_t *operand, bson_type_t type)
{
    if (BSON_ITER_HOLDS_ARRAY(operand)) {
        bson_iter_t elements;
        bson_iter_recurse(operand, &elements);
        while (bson_iter_next(&elements)) {
            if (type_operand_names(&elements, type)) {
                return true;
            }
        }
        return false;
    }
    if (BSON_ITER_HOLDS_UTF8(operand)) {
        const char *name = bson_iter_utf8(operand, NULL);
        bson_type_t named;
        if (strcmp(name, "number") == 0) {
            return order_is_number(type);
        }
        return value_type_from_name(name, &named) && named == type;
    }
    if (BSON_ITER_HOLDS_NUMBER(operand)) {
        return bson_iter_as_int64(operand) == (int64_t)type;
    }
    return false;
}

static bool type_predicate(const bson_iter_t *value, atom_op_t op, const bson_iter_t *operand)
{
    (void)op;
    return type_operand_names(operand, bson_iter_type(value));
}

/* Whether each type the query's $type operand names is one the condition's names. */
static bool type_subset(const bson_iter_t *query_operand, const bson_iter_t *condition_operand)
{
    bson_iter_t elements;
    if (BSON_ITER_HOLDS_ARRAY(query_operand)) {
        bson_iter_recurse(query_operand, &elements);
        bool any = false;
        while (bson_iter_next(&elements)) {
            if (!type_subset(&elements, condition_operand)) {
                return false;
            }
            any = true;
        }
        return any;
    }
    if (BSON_ITER_HOLDS_UTF8(query_operand) && strcmp(bson_iter_utf8(query_operand, NULL), "number") == 0) {
        return type_operand_names(condition_operand, BSON_TYPE_INT32) &&
               type_operand_names(condition_operand, BSON_TYPE_INT64) &&
               type_operand_names(condition_operand, BSON_TYPE_DOUBLE) &&
               type_operand_names(condition_operand, BSON_TYPE_DECIMAL128);
    }
    bson_type_t type;
    if (BSON_ITER_HOLDS_UTF8(query_operand)) {
        if (!value_type_from_name(bson_iter_utf8(query_operand, NULL), &type)) {
            return false;
        }
    } else if (BSON_ITER_HOLDS_NUMBER(query_operand)) {
        type = (bson_type_t)bson_iter_as_int64(query_operand);
    } else {
        return false;
    }
    return type_operand_names(condition_operand, type);
}

/* A range bound implied by another range in the same direction. */
static bool range_implies_range(const atom_t *query, const atom_t *condition)
{
    bool condition_lower = condition->op == OP_GT || condition->op == OP_GTE;
    bool query_lower = query->op == OP_GT || query->op == OP_GTE;
    if (condition_lower != query_lower ||
        order_canonical_type(bson_iter_type(&query->value)) !=
            order_canonical_type(bson_iter_type(&condition->value))) {
        return false;
    }
    int comparison = order_compare_iters(&query->value, &condition->value);
    if (!condition_lower) {
        comparison = -comparison;
    }
    /* {$gt: w} implies {$gte: v} for w >= v and {$gt: v} for w >= v; {$gte: w}
     * implies {$gt: v} only for w > v. */
    bool query_strict = query->op == OP_GT || query->op == OP_LT;
    bool condition_strict = condition->op == OP_GT || condition->op == OP_LT;
    return comparison > 0 || (comparison == 0 && (query_strict || !condition_strict));
}

static bool atom_implies(const atom_t *query, const atom_t *condition)
{
    switch (condition->op) {
    case OP_EXISTS:
        if (!bson_iter_as_bool(&condition->value)) {
            return false;
        }
        switch (query->op) {
        case OP_EQ: return !is_null_like(&query->value);
        case OP_GT: case OP_GTE: case OP_LT: case OP_LTE:
            return !is_null_like(&query->value) && !BSON_ITER_HOLDS_MINKEY(&query->value) &&
                   !BSON_ITER_HOLDS_MAXKEY(&query->value);
        case OP_IN: return all_in_list(&query->value, not_null_predicate, OP_IN, NULL);
        case OP_EXISTS: return bson_iter_as_bool(&query->value);
        case OP_TYPE: return true;
        default: return false;
        }
    case OP_EQ:
        if (BSON_ITER_HOLDS_REGEX(&condition->value)) {
            return false;
        }
        if (query->op == OP_EQ) {
            return values_equal(&query->value, &condition->value);
        }
        return query->op == OP_IN && all_in_list(&query->value, equal_predicate, OP_EQ, &condition->value);
    case OP_GT: case OP_GTE: case OP_LT: case OP_LTE:
        switch (query->op) {
        case OP_EQ: return value_in_range(&query->value, condition->op, &condition->value);
        case OP_IN: return all_in_list(&query->value, value_in_range, condition->op, &condition->value);
        case OP_GT: case OP_GTE: case OP_LT: case OP_LTE: return range_implies_range(query, condition);
        default: return false;
        }
    case OP_IN:
        if (query->op == OP_EQ) {
            return member_predicate(&query->value, OP_IN, &condition->value);
        }
        return query->op == OP_IN && all_in_list(&query->value, member_predicate, OP_IN, &condition->value);
    case OP_TYPE:
        switch (query->op) {
        case OP_EQ: return !is_null_like(&query->value) && type_predicate(&query->value, OP_TYPE, &condition->value);
        case OP_IN: return all_in_list(&query->value, type_predicate, OP_TYPE, &condition->value);
        case OP_TYPE: return type_subset(&query->value, &condition->value);
        default: return false;
        }
    default:
        return false;
    }
}

/* Whether the query value at iter (the value of a field named path) implies atom. */
static bool field_implies_atom(const bson_iter_t *iter, const atom_t *condition)
{
    if (!is_operator_document(iter)) {
        atom_t query = {.op = OP_EQ, .value = *iter};
        return atom_implies(&query, condition);
    }
    bson_iter_t operators;
    bson_iter_recurse(iter, &operators);
    while (bson_iter_next(&operators)) {
        atom_t query = {.op = op_from_name(bson_iter_key(&operators)), .value = operators};
        if (query.op != OP_OTHER && atom_implies(&query, condition)) {
            return true;
        }
    }
    return false;
}

/* Steps clauses (inside an $and or $or array) to its next filter document; false
 * at the end or, with *out_bad set, at an element that is not a document. */
static bool next_clause(bson_iter_t *clauses, bson_t *out_clause, bool *out_bad)
{
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_next(clauses)) {
        return false;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(clauses)) {
        *out_bad = true;
        return false;
    }
    bson_iter_document(clauses, &length, &data);
    return bson_init_static(out_clause, data, length);
}

static bool query_implies_atom(const bson_t *query, const char *path, const atom_t *condition);

/* Every clause of an array of filters implies the atom (a query $or), or some
 * clause does (a query $and). */
static bool clauses_imply_atom(const bson_iter_t *array, bool every, const char *path, const atom_t *condition)
{
    bson_iter_t clauses;
    if (!BSON_ITER_HOLDS_ARRAY(array) || !bson_iter_recurse(array, &clauses)) {
        return false;
    }
    bool any_clause = false, bad = false;
    bson_t clause;
    while (next_clause(&clauses, &clause, &bad)) {
        bool implied = query_implies_atom(&clause, path, condition);
        if (every && !implied) {
            return false;
        }
        if (!every && implied) {
            return true;
        }
        any_clause = true;
    }
    return every && any_clause && !bad;
}

static bool query_implies_atom(const bson_t *query, const char *path, const atom_t *condition)
{
    bson_iter_t iter;
    bson_iter_init(&iter, query);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "$and") == 0) {
            if (clauses_imply_atom(&iter, false, path, condition)) {
                return true;
            }
        } else if (strcmp(key, "$or") == 0) {
            if (clauses_imply_atom(&iter, true, path, condition)) {
                return true;
            }
        } else if (strcmp(key, path) == 0 && field_implies_atom(&iter, condition)) {
            return true;
        }
    }
    return false;
}

static bool query_implies_or(const bson_t *query, const bson_iter_t *clauses_iter);

/* Whether query implies every clause of an $and array (every = true) or some clause
 * of an $or array (every = false). */
static bool query_implies_clauses(const bson_t *query, const bson_iter_t *array, bool every)
{
    bson_iter_t clauses;
    if (!BSON_ITER_HOLDS_ARRAY(array) || !bson_iter_recurse(array, &clauses)) {
        return false;
    }
    bool any_clause = false, bad = false;
    bson_t clause;
    while (next_clause(&clauses, &clause, &bad)) {
        bool implied = filter_implies(query, &clause);
        if (every && !implied) {
            return false;
        }
        if (!every && implied) {
            return true;
        }
        any_clause = true;
    }
    return every && any_clause && !bad;
}

/* A condition's $or: some clause implied by the whole query, or the query's own
 * top-level $or has every clause implying it (each clause alone). */
static bool query_implies_or(const bson_t *query, const bson_iter_t *clauses_iter)
{
    if (query_implies_clauses(query, clauses_iter, false)) {
        return true;
    }
    bson_iter_t query_or, query_clauses;
    if (!bson_iter_init_find(&query_or, query, "$or") || !BSON_ITER_HOLDS_ARRAY(&query_or)) {
        return false;
    }
    bson_iter_recurse(&query_or, &query_clauses);
    bool any_clause = false, bad = false;
    bson_t clause;
    while (next_clause(&query_clauses, &clause, &bad)) {
        if (!query_implies_clauses(&clause, clauses_iter, false)) {
            return false;
        }
        any_clause = true;
    }
    return any_clause && !bad;
}

bool filter_implies(const bson_t *query, const bson_t *condition)
{
    bson_iter_t iter;
    if (query == NULL) {
        return bson_empty0(condition);
    }
    bson_iter_init(&iter, condition);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        bool implied;
        if (strcmp(key, "$and") == 0) {
            implied = query_implies_clauses(query, &iter, true);
        } else if (strcmp(key, "$or") == 0) {
            implied = query_implies_or(query, &iter);
        } else if (key[0] == '$') {
            implied = false;
        } else if (!is_operator_document(&iter)) {
            atom_t atom = {.op = OP_EQ, .value = iter};
            implied = query_implies_atom(query, key, &atom);
        } else {
            bson_iter_t operators;
            bson_iter_recurse(&iter, &operators);
            implied = true;
            while (implied && bson_iter_next(&operators)) {
                atom_t atom = {.op = op_from_name(bson_iter_key(&operators)), .value = operators};
                implied = atom.op != OP_OTHER && query_implies_atom(query, key, &atom);
            }
        }
        if (!implied) {
            return false;
        }
    }
    return true;
}
