/* The operators on a document's own fields by name, whatever the name holds
 * (dots, a leading '$'): $getField and $setField, as MongoDB 6.0 has them. The
 * field must be a constant string ("price.usd", or {$literal: "$x"} for a name
 * that starts with '$'). */
#include "query/expression_private.h"

#include "query/value_format.h"

#include <string.h>

/* mongod's numbered assertion codes (codeName "Location<code>"). */
enum {
    GET_FIELD_UNKNOWN_ARGUMENT = 3041701,
    GET_FIELD_MISSING_FIELD = 3041702,
    GET_FIELD_INPUT_NOT_OBJECT = 3041705,
    GET_FIELD_NOT_CONSTANT = 5654602,
    GET_FIELD_NOT_STRING = 5654601,
    SET_FIELD_NOT_OBJECT = 4161101,
    SET_FIELD_UNKNOWN_ARGUMENT = 4161102,
    SET_FIELD_MISSING_FIELD = 4161103,
    SET_FIELD_MISSING_VALUE = 4161104,
    SET_FIELD_MISSING_INPUT = 4161105,
    SET_FIELD_NOT_CONSTANT = 4161106,
    SET_FIELD_NOT_STRING = 4161107,
    SET_FIELD_INPUT_NOT_OBJECT = 4161109,
};

/* The children of both operators, by slot. */
enum { SLOT_FIELD, SLOT_INPUT, SLOT_VALUE };

/* The field argument, once parsed, must be a string known before any document. */
static bool check_constant_field(const expression_t *field, const char *operator_name, int32_t not_constant,
                                 int32_t not_string, bson_error_t *error)
{
    if (field->kind != EXPRESSION_CONSTANT) {
        return tc_error_set(error, not_constant,
                            "%s requires 'field' to evaluate to a constant, but got a non-constant argument",
                            operator_name);
    }
    if (field->constant.value_type != BSON_TYPE_UTF8) {
        return tc_error_set(error, not_string, "%s requires 'field' to evaluate to type String, but got %s",
                            operator_name, value_type_name(field->constant.value_type));
    }
    if (!aggregation_value_is_field_name(&field->constant)) {
        return tc_error_set(error, not_string, "%s requires 'field' to be UTF-8 without a null byte",
                            operator_name);
    }
    return true;
}

/* {field, input?, value?} into the slots; names the operator accepts in allowed. */
static bool parse_arguments(expression_t *expression, const bson_value_t *argument, bool with_value,
                            int32_t unknown_code, bson_error_t *error)
{
    bson_iter_t iter;
    expression_reserve_slots(expression, with_value ? 3 : 2);
    bson_iter_init_from_data(&iter, argument->value.v_doc.data, argument->value.v_doc.data_len);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        size_t slot = strcmp(key, "field") == 0                 ? SLOT_FIELD
                      : strcmp(key, "input") == 0               ? SLOT_INPUT
                      : with_value && strcmp(key, "value") == 0 ? SLOT_VALUE
                                                                : 3;
        if (slot == 3) {
            return tc_error_set(error, unknown_code, "%s found an unknown argument: %s",
                                expression->operation->name, key);
        }
        if (!expression_parse_into_slot(expression, slot, bson_iter_value(&iter), error)) {
            return false;
        }
    }
    return true;
}

static bool parse_get_field(expression_t *expression, const bson_value_t *argument, bson_error_t *error)
{
    if (argument->value_type == BSON_TYPE_DOCUMENT) {
        if (!parse_arguments(expression, argument, false, GET_FIELD_UNKNOWN_ARGUMENT, error)) {
            return false;
        }
    } else {
        /* The shorthand {$getField: "name"}: field alone, input $$CURRENT. */
        expression_reserve_slots(expression, 2);
        if (!expression_parse_into_slot(expression, SLOT_FIELD, argument, error)) {
            return false;
        }
    }
    if (expression->children[SLOT_FIELD] == NULL) {
        return tc_error_set(error, GET_FIELD_MISSING_FIELD, "$getField requires 'field' to be specified");
    }
    if (expression->children[SLOT_INPUT] == NULL) {
        bson_value_t current = {.value_type = BSON_TYPE_UTF8};
        current.value.v_utf8.str = "$$CURRENT";
        current.value.v_utf8.len = 9;
        if (!expression_parse_into_slot(expression, SLOT_INPUT, &current, error)) {
            return false;
        }
    }
    return check_constant_field(expression->children[SLOT_FIELD], "$getField", GET_FIELD_NOT_CONSTANT,
                                GET_FIELD_NOT_STRING, error);
}

static bool parse_set_field(expression_t *expression, const bson_value_t *argument, bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, SET_FIELD_NOT_OBJECT, "$setField only supports an object as its argument");
    }
    if (!parse_arguments(expression, argument, true, SET_FIELD_UNKNOWN_ARGUMENT, error)) {
        return false;
    }
    if (expression->children[SLOT_FIELD] == NULL) {
        return tc_error_set(error, SET_FIELD_MISSING_FIELD, "$setField requires 'field' to be specified");
    }
    if (expression->children[SLOT_VALUE] == NULL) {
        return tc_error_set(error, SET_FIELD_MISSING_VALUE, "$setField requires 'value' to be specified");
    }
    if (expression->children[SLOT_INPUT] == NULL) {
        return tc_error_set(error, SET_FIELD_MISSING_INPUT, "$setField requires 'input' to be specified");
    }
    return check_constant_field(expression->children[SLOT_FIELD], "$setField", SET_FIELD_NOT_CONSTANT,
                                SET_FIELD_NOT_STRING, error);
}

/* The input: an object, or null for missing, null and undefined (*out_null). */
static bool evaluate_input(const expression_t *expression, const expression_evaluation_t *evaluation,
                           int32_t not_object, bson_value_t *out_input, bool *out_null, bson_error_t *error)
{
    if (!expression_evaluate_in(expression->children[SLOT_INPUT], evaluation, out_input, error)) {
        return false;
    }
    bson_type_t type = out_input->value_type;
    *out_null = type == BSON_TYPE_EOD || type == BSON_TYPE_NULL || type == BSON_TYPE_UNDEFINED;
    if (!*out_null && type != BSON_TYPE_DOCUMENT) {
        tc_error_set(error, not_object, "%s requires 'input' to evaluate to type Object, but got %s",
                     expression->operation->name, value_type_name(type));
        bson_value_destroy(out_input);
        return false;
    }
    return true;
}

static bool evaluate_get_field(const expression_t *expression, const expression_evaluation_t *evaluation,
                               bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t input;
    bool is_null;
    aggregation_value_set_missing(out_value);
    if (!evaluate_input(expression, evaluation, GET_FIELD_INPUT_NOT_OBJECT, &input, &is_null, error)) {
        return false;
    }
    const char *field = expression->children[SLOT_FIELD]->constant.value.v_utf8.str;
    bson_iter_t iter;
    if (is_null) {
        aggregation_value_set_null(out_value);
    } else if (bson_iter_init_from_data(&iter, input.value.v_doc.data, input.value.v_doc.data_len) &&
               bson_iter_find_w_len(&iter, field, (int)strlen(field))) {
        bson_value_copy(bson_iter_value(&iter), out_value);
    }
    bson_value_destroy(&input);
    return true;
}

static bool evaluate_set_field(const expression_t *expression, const expression_evaluation_t *evaluation,
                               bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t input, value;
    bool is_null;
    aggregation_value_set_missing(out_value);
    if (!evaluate_input(expression, evaluation, SET_FIELD_INPUT_NOT_OBJECT, &input, &is_null, error)) {
        return false;
    }
    if (is_null) {
        bson_value_destroy(&input);
        aggregation_value_set_null(out_value);
        return true;
    }
    if (!expression_evaluate_in(expression->children[SLOT_VALUE], evaluation, &value, error)) {
        bson_value_destroy(&input);
        return false;
    }
    /* The field keeps its place when it is there, goes to the end when not, and
     * leaves when the value is missing ($$REMOVE). */
    const char *field = expression->children[SLOT_FIELD]->constant.value.v_utf8.str;
    bool placed = false;
    bson_t result = BSON_INITIALIZER;
    bson_iter_t iter;
    bson_iter_init_from_data(&iter, input.value.v_doc.data, input.value.v_doc.data_len);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), field) != 0) {
            bson_append_value(&result, bson_iter_key(&iter), -1, bson_iter_value(&iter));
        } else if (!aggregation_value_is_missing(&value)) {
            aggregation_value_append(&result, field, -1, &value);
            placed = true;
        } else {
            placed = true;
        }
    }
    if (!placed && !aggregation_value_is_missing(&value)) {
        aggregation_value_append(&result, field, -1, &value);
    }
    aggregation_value_take_document(out_value, &result, BSON_TYPE_DOCUMENT);
    bson_value_destroy(&value);
    bson_value_destroy(&input);
    return true;
}

const expression_operator_t expression_object_operators[] = {
    {"$getField", parse_get_field, 0, -1, evaluate_get_field},
    {"$setField", parse_set_field, 0, -1, evaluate_set_field},
};

const size_t expression_object_operator_count =
    sizeof expression_object_operators / sizeof expression_object_operators[0];
