/* Comparison ($eq $ne $gt $gte $lt $lte $cmp), boolean ($and $or $not), conditional
 * ($cond, $ifNull, $switch), $literal and array ($size $arrayElemAt $in $isArray)
 * expression operators. Comparisons use aggregation order, where missing sorts below
 * null. */
#include "query/expression_private.h"
#include "query/value_format.h"

#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    LOGIC_ERROR_COND_MISSING_IF = 17080,
    LOGIC_ERROR_COND_MISSING_THEN = 17081,
    LOGIC_ERROR_COND_MISSING_ELSE = 17082,
    LOGIC_ERROR_COND_UNKNOWN = 17083,
    LOGIC_ERROR_IF_NULL_ARITY = 1257300,
    LOGIC_ERROR_SWITCH_OBJECT = 40060,
    LOGIC_ERROR_SWITCH_BRANCHES_ARRAY = 40061,
    LOGIC_ERROR_SWITCH_BRANCH_OBJECT = 40062,
    LOGIC_ERROR_SWITCH_BRANCH_UNKNOWN = 40063,
    LOGIC_ERROR_SWITCH_BRANCH_CASE = 40064,
    LOGIC_ERROR_SWITCH_BRANCH_THEN = 40065,
    LOGIC_ERROR_SWITCH_NO_MATCH = 40066,
    LOGIC_ERROR_SWITCH_UNKNOWN = 40067,
    LOGIC_ERROR_SWITCH_NO_BRANCH = 40068,
    LOGIC_ERROR_SIZE_ARRAY = 17124,
    LOGIC_ERROR_ELEMENT_ARRAY = 28689,
    LOGIC_ERROR_ELEMENT_INDEX_NUMBER = 28690,
    LOGIC_ERROR_ELEMENT_INDEX_INTEGRAL = 28691,
    LOGIC_ERROR_IN_ARRAY = 40081,
};

static const char *type_name(const bson_value_t *value)
{
    return value_type_name(value->value_type);
}

/* ---- comparisons ---- */

/* The command's collation: expression comparisons of strings follow it, as mongod's. */
static const collation_t *evaluation_collation(const expression_evaluation_t *evaluation)
{
    return evaluation->context != NULL ? evaluation->context->collation : NULL;
}

static bool evaluate_comparison(const expression_t *expression,
                                const expression_evaluation_t *evaluation, int *out_order,
                                bson_error_t *error)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    int order = aggregation_value_compare_collated(&operands[0], &operands[1], evaluation_collation(evaluation));
    *out_order = order < 0 ? -1 : (order > 0 ? 1 : 0);
    expression_values_destroy(operands, 2);
    return true;
}

#define DEFINE_COMPARISON(function_name, test)                                                     \
    static bool function_name(const expression_t *expression,                                      \
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,  \
                              bson_error_t *error)                                                 \
    {                                                                                              \
        int order;                                                                                 \
        if (!evaluate_comparison(expression, evaluation, &order, error)) {                         \
            return false;                                                                          \
        }                                                                                          \
        aggregation_value_set_bool(out_value, test);                                               \
        return true;                                                                               \
    }

DEFINE_COMPARISON(evaluate_eq, order == 0)
DEFINE_COMPARISON(evaluate_ne, order != 0)
DEFINE_COMPARISON(evaluate_gt, order > 0)
DEFINE_COMPARISON(evaluate_gte, order >= 0)
DEFINE_COMPARISON(evaluate_lt, order < 0)
DEFINE_COMPARISON(evaluate_lte, order <= 0)

static bool evaluate_cmp(const expression_t *expression, const expression_evaluation_t *evaluation,
                         bson_value_t *out_value, bson_error_t *error)
{
    int order;
    if (!evaluate_comparison(expression, evaluation, &order, error)) {
        return false;
    }
    aggregation_value_set_int32(out_value, order);
    return true;
}

/* ---- booleans ---- */

/* Evaluates child i to its truth value. */
static bool evaluate_truth(const expression_t *expression, size_t i,
                           const expression_evaluation_t *evaluation, bool *out_truth,
                           bson_error_t *error)
{
    bson_value_t value;
    if (!expression_evaluate_in(expression->children[i], evaluation, &value, error)) {
        return false;
    }
    *out_truth = aggregation_value_truthy(&value);
    bson_value_destroy(&value);
    return true;
}

static bool evaluate_and(const expression_t *expression, const expression_evaluation_t *evaluation,
                         bson_value_t *out_value, bson_error_t *error)
{
    for (size_t i = 0; i < expression->child_count; i++) {
        bool truth;
        if (!evaluate_truth(expression, i, evaluation, &truth, error)) {
            return false;
        }
        if (!truth) {
            aggregation_value_set_bool(out_value, false);
            return true;
        }
    }
    aggregation_value_set_bool(out_value, true);
    return true;
}

static bool evaluate_or(const expression_t *expression, const expression_evaluation_t *evaluation,
                        bson_value_t *out_value, bson_error_t *error)
{
    for (size_t i = 0; i < expression->child_count; i++) {
        bool truth;
        if (!evaluate_truth(expression, i, evaluation, &truth, error)) {
            return false;
        }
        if (truth) {
            aggregation_value_set_bool(out_value, true);
            return true;
        }
    }
    aggregation_value_set_bool(out_value, false);
    return true;
}

static bool evaluate_not(const expression_t *expression, const expression_evaluation_t *evaluation,
                         bson_value_t *out_value, bson_error_t *error)
{
    bool truth;
    if (!evaluate_truth(expression, 0, evaluation, &truth, error)) {
        return false;
    }
    aggregation_value_set_bool(out_value, !truth);
    return true;
}

/* ---- conditionals ---- */

static bool parse_cond(expression_t *expression, const bson_value_t *argument, bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return expression_parse_operands(expression, argument, error);
    }
    expression_reserve_slots(expression, 3);
    bson_iter_t iter;
    if (bson_iter_init_from_data(&iter, argument->value.v_doc.data,
                                 argument->value.v_doc.data_len)) {
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            size_t slot;
            if (strcmp(key, "if") == 0) {
                slot = 0;
            } else if (strcmp(key, "then") == 0) {
                slot = 1;
            } else if (strcmp(key, "else") == 0) {
                slot = 2;
            } else {
                return tc_error_set(error, LOGIC_ERROR_COND_UNKNOWN,
                                    "Unrecognized parameter to $cond: %s", key);
            }
            if (!expression_parse_into_slot(expression, slot, bson_iter_value(&iter), error)) {
                return false;
            }
        }
    }
    if (expression->children[0] == NULL) {
        return tc_error_set(error, LOGIC_ERROR_COND_MISSING_IF, "Missing 'if' parameter to $cond");
    }
    if (expression->children[1] == NULL) {
        return tc_error_set(error, LOGIC_ERROR_COND_MISSING_THEN,
                            "Missing 'then' parameter to $cond");
    }
    if (expression->children[2] == NULL) {
        return tc_error_set(error, LOGIC_ERROR_COND_MISSING_ELSE,
                            "Missing 'else' parameter to $cond");
    }
    return true;
}

static bool evaluate_cond(const expression_t *expression, const expression_evaluation_t *evaluation,
                          bson_value_t *out_value, bson_error_t *error)
{
    bool truth;
    if (!evaluate_truth(expression, 0, evaluation, &truth, error)) {
        return false;
    }
    return expression_evaluate_in(expression->children[truth ? 1 : 2], evaluation, out_value,
                                  error);
}

static bool parse_if_null(expression_t *expression, const bson_value_t *argument,
                          bson_error_t *error)
{
    if (!expression_parse_operands(expression, argument, error)) {
        return false;
    }
    if (expression->child_count < 2) {
        return tc_error_set(error, LOGIC_ERROR_IF_NULL_ARITY,
                            "$ifNull needs at least two arguments, had: %zu",
                            expression->child_count);
    }
    return true;
}

/* The first operand that is not null, undefined or missing; else the last one as is. */
static bool evaluate_if_null(const expression_t *expression,
                             const expression_evaluation_t *evaluation, bson_value_t *out_value,
                             bson_error_t *error)
{
    size_t last = expression->child_count - 1;
    for (size_t i = 0; i < last; i++) {
        if (!expression_evaluate_in(expression->children[i], evaluation, out_value, error)) {
            return false;
        }
        if (!aggregation_value_is_nullish(out_value)) {
            return true;
        }
        bson_value_destroy(out_value);
    }
    return expression_evaluate_in(expression->children[last], evaluation, out_value, error);
}

static bool parse_switch_branch(expression_t *expression, const bson_value_t *branch,
                                bson_error_t *error)
{
    if (branch->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, LOGIC_ERROR_SWITCH_BRANCH_OBJECT,
                            "$switch expected each branch to be an object, found: %s",
                            type_name(branch));
    }
    expression_t *parts[2] = {NULL, NULL};
    bool ok = false;
    bson_iter_t iter;
    if (bson_iter_init_from_data(&iter, branch->value.v_doc.data, branch->value.v_doc.data_len)) {
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            int slot = strcmp(key, "case") == 0 ? 0 : (strcmp(key, "then") == 0 ? 1 : -1);
            if (slot < 0) {
                tc_error_set(error, LOGIC_ERROR_SWITCH_BRANCH_UNKNOWN,
                             "$switch found an unknown argument to a branch: %s", key);
                goto done;
            }
            expression_destroy(parts[slot]);
            parts[slot] = expression_parse(bson_iter_value(&iter), error);
            TC_CHECK(parts[slot] != NULL);
        }
    }
    if (parts[0] == NULL) {
        tc_error_set(error, LOGIC_ERROR_SWITCH_BRANCH_CASE,
                     "$switch requires each branch have a 'case' expression");
        goto done;
    }
    if (parts[1] == NULL) {
        tc_error_set(error, LOGIC_ERROR_SWITCH_BRANCH_THEN,
                     "$switch requires each branch have a 'then' expression.");
        goto done;
    }
    expression_add_child(expression, parts[0]);
    expression_add_child(expression, parts[1]);
    parts[0] = parts[1] = NULL;
    ok = true;
done:
    expression_destroy(parts[0]);
    expression_destroy(parts[1]);
    return ok;
}

/* Children: case0, then0, case1, then1, ... and the default last when has_default. */
static bool parse_switch(expression_t *expression, const bson_value_t *argument,
                         bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, LOGIC_ERROR_SWITCH_OBJECT,
                            "$switch requires an object as an argument, found: %s",
                            type_name(argument));
    }
    expression_t *default_expression = NULL;
    bool ok = false;
    bson_iter_t iter;
    if (bson_iter_init_from_data(&iter, argument->value.v_doc.data,
                                 argument->value.v_doc.data_len)) {
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            const bson_value_t *value = bson_iter_value(&iter);
            if (strcmp(key, "branches") == 0) {
                if (value->value_type != BSON_TYPE_ARRAY) {
                    tc_error_set(error, LOGIC_ERROR_SWITCH_BRANCHES_ARRAY,
                                 "$switch expected an array for 'branches', found: %s",
                                 type_name(value));
                    goto done;
                }
                bson_iter_t branches;
                if (bson_iter_init_from_data(&branches, value->value.v_doc.data,
                                             value->value.v_doc.data_len)) {
                    while (bson_iter_next(&branches)) {
                        TC_CHECK(
                            parse_switch_branch(expression, bson_iter_value(&branches), error));
                    }
                }
            } else if (strcmp(key, "default") == 0) {
                expression_destroy(default_expression);
                default_expression = expression_parse(value, error);
                TC_CHECK(default_expression != NULL);
            } else {
                tc_error_set(error, LOGIC_ERROR_SWITCH_UNKNOWN,
                             "$switch found an unknown argument: %s", key);
                goto done;
            }
        }
    }
    if (expression->child_count == 0) {
        tc_error_set(error, LOGIC_ERROR_SWITCH_NO_BRANCH, "$switch requires at least one branch.");
        goto done;
    }
    if (default_expression != NULL) {
        expression_add_child(expression, default_expression);
        expression->has_default = true;
        default_expression = NULL;
    }
    ok = true;
done:
    expression_destroy(default_expression);
    return ok;
}

static bool evaluate_switch(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error)
{
    size_t branch_children = expression->child_count - (expression->has_default ? 1 : 0);
    for (size_t i = 0; i + 1 < branch_children; i += 2) {
        bool truth;
        if (!evaluate_truth(expression, i, evaluation, &truth, error)) {
            return false;
        }
        if (truth) {
            return expression_evaluate_in(expression->children[i + 1], evaluation, out_value,
                                          error);
        }
    }
    if (!expression->has_default) {
        return tc_error_set(error, LOGIC_ERROR_SWITCH_NO_MATCH,
                            "$switch could not find a matching branch for an input, and no "
                            "default was specified.");
    }
    return expression_evaluate_in(expression->children[branch_children], evaluation, out_value,
                                  error);
}

/* $literal: the argument itself, never evaluated. */
static bool parse_literal(expression_t *expression, const bson_value_t *argument,
                          bson_error_t *error)
{
    expression->kind = EXPRESSION_CONSTANT;
    bson_value_copy(argument, &expression->constant);
    return true;
}

static bool evaluate_never(const expression_t *expression,
                           const expression_evaluation_t *evaluation, bson_value_t *out_value,
                           bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_INTERNAL, "operator %s evaluated as an operator",
                        expression->operation->name);
}

/* ---- arrays ---- */

static uint32_t array_length(const bson_value_t *array)
{
    bson_t view;
    return aggregation_value_view_document(array, &view) ? bson_count_keys(&view) : 0;
}

static bool evaluate_size(const expression_t *expression, const expression_evaluation_t *evaluation,
                          bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t array;
    if (!expression_evaluate_in(expression->children[0], evaluation, &array, error)) {
        return false;
    }
    bool ok = true;
    if (array.value_type != BSON_TYPE_ARRAY) {
        ok = tc_error_set(error, LOGIC_ERROR_SIZE_ARRAY,
                          "The argument to $size must be an array. Type of argument: %s",
                          type_name(&array));
    } else {
        aggregation_value_set_int32(out_value, (int32_t)array_length(&array));
    }
    bson_value_destroy(&array);
    return ok;
}

static bool evaluate_array_element_at(const expression_t *expression,
                                      const expression_evaluation_t *evaluation,
                                      bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    const bson_value_t *array = &operands[0];
    const bson_value_t *index = &operands[1];
    bool ok = true;
    if (aggregation_value_is_nullish(array) || aggregation_value_is_nullish(index)) {
        aggregation_value_set_null(out_value);
        goto done;
    }
    if (array->value_type != BSON_TYPE_ARRAY) {
        ok = tc_error_set(error, LOGIC_ERROR_ELEMENT_ARRAY,
                          "$arrayElemAt's first argument must be an array, but is %s",
                          type_name(array));
        goto done;
    }
    if (!aggregation_value_is_number(index)) {
        ok = tc_error_set(error, LOGIC_ERROR_ELEMENT_INDEX_NUMBER,
                          "$arrayElemAt's second argument must be a numeric value, but is %s",
                          type_name(index));
        goto done;
    }
    if (!aggregation_value_is_integral32(index)) {
        ok = tc_error_set(error, LOGIC_ERROR_ELEMENT_INDEX_INTEGRAL,
                          "$arrayElemAt's second argument must be representable as a 32-bit "
                          "integer: %g",
                          aggregation_value_as_double(index));
        goto done;
    }
    int64_t position = aggregation_value_as_int64(index);
    int64_t length = array_length(array);
    if (position < 0) {
        position += length; /* from the back */
    }
    if (position < 0 || position >= length) {
        goto done; /* out of range: missing */
    }
    bson_iter_t iter;
    if (bson_iter_init_from_data(&iter, array->value.v_doc.data, array->value.v_doc.data_len)) {
        for (int64_t i = 0; bson_iter_next(&iter); i++) {
            if (i == position) {
                bson_value_copy(bson_iter_value(&iter), out_value);
                break;
            }
        }
    }
done:
    expression_values_destroy(operands, 2);
    return ok;
}

static bool evaluate_in(const expression_t *expression, const expression_evaluation_t *evaluation,
                        bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    bool ok = true;
    if (operands[1].value_type != BSON_TYPE_ARRAY) {
        ok = tc_error_set(error, LOGIC_ERROR_IN_ARRAY,
                          "$in requires an array as a second argument, found: %s",
                          type_name(&operands[1]));
    } else {
        bool found = false;
        bson_iter_t iter;
        if (bson_iter_init_from_data(&iter, operands[1].value.v_doc.data,
                                     operands[1].value.v_doc.data_len)) {
            while (!found && bson_iter_next(&iter)) {
                found = aggregation_value_compare_collated(&operands[0], bson_iter_value(&iter),
                                                           evaluation_collation(evaluation)) == 0;
            }
        }
        aggregation_value_set_bool(out_value, found);
    }
    expression_values_destroy(operands, 2);
    return ok;
}

static bool evaluate_is_array(const expression_t *expression,
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,
                              bson_error_t *error)
{
    bson_value_t value;
    if (!expression_evaluate_in(expression->children[0], evaluation, &value, error)) {
        return false;
    }
    aggregation_value_set_bool(out_value, value.value_type == BSON_TYPE_ARRAY);
    bson_value_destroy(&value);
    return true;
}

const expression_operator_t expression_logic_operators[] = {
    {"$eq", NULL, 2, 2, evaluate_eq},
    {"$ne", NULL, 2, 2, evaluate_ne},
    {"$gt", NULL, 2, 2, evaluate_gt},
    {"$gte", NULL, 2, 2, evaluate_gte},
    {"$lt", NULL, 2, 2, evaluate_lt},
    {"$lte", NULL, 2, 2, evaluate_lte},
    {"$cmp", NULL, 2, 2, evaluate_cmp},
    {"$and", NULL, 0, -1, evaluate_and},
    {"$or", NULL, 0, -1, evaluate_or},
    {"$not", NULL, 1, 1, evaluate_not},
    {"$cond", parse_cond, 3, 3, evaluate_cond},
    {"$ifNull", parse_if_null, 0, -1, evaluate_if_null},
    {"$switch", parse_switch, 0, -1, evaluate_switch},
    {"$literal", parse_literal, 0, -1, evaluate_never},
    {"$size", NULL, 1, 1, evaluate_size},
    {"$arrayElemAt", NULL, 2, 2, evaluate_array_element_at},
    {"$in", NULL, 2, 2, evaluate_in},
    {"$isArray", NULL, 1, 1, evaluate_is_array},
};

const size_t expression_logic_operator_count =
    sizeof expression_logic_operators / sizeof expression_logic_operators[0];
