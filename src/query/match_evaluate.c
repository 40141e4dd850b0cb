/* Evaluating a compiled filter against a document with mongod's path rules
 * (BSONElementIterator: how a dotted path fans out through arrays), the
 * elemMatchKey details the positional '$' reads, and the value helpers. */
#include "query/match_private.h"

#include "query/aggregation_value.h"
#include "query/order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- value helpers ---- */

bool match_value_iter_init(bson_iter_t *iter, const bson_value_t *value)
{
    return bson_iter_init_from_data(iter, value->value.v_doc.data, value->value.v_doc.data_len);
}

bool match_value_is_nan(const bson_value_t *value)
{
    if (value->value_type == BSON_TYPE_DOUBLE) {
        return isnan(value->value.v_double);
    }
    if (value->value_type == BSON_TYPE_DECIMAL128) {
        /* Combination field 11111 marks a NaN. */
        return ((value->value.v_decimal128.high >> 58) & 0x1F) == 0x1F;
    }
    return false;
}

int match_compare_values_for_sort(const void *left, const void *right)
{
    return order_compare_values(left, right);
}

/* Truncates a finite double to an int64; false when out of range. */
bool match_double_to_int64(double number, int64_t *out)
{
    if (!isfinite(number)) {
        return false;
    }
    number = trunc(number);
    if (number >= MATCH_TWO_TO_63 || number < -MATCH_TWO_TO_63) {
        return false;
    }
    *out = (int64_t)number;
    return true;
}

uint32_t match_array_length(const bson_value_t *array)
{
    bson_iter_t element;
    uint32_t count = 0;
    if (match_value_iter_init(&element, array)) {
        while (bson_iter_next(&element)) {
            count++;
        }
    }
    return count;
}

/* ---- matching ---- */

static bool node_matches_value(const match_node_t *node, const bson_value_t *value);
static bool elem_match_matches(const match_node_t *node, const bson_value_t *array,
                               match_details_t *details);

static void details_record(match_details_t *details, const char *array_index)
{
    if (details == NULL || array_index == NULL) {
        return;
    }
    bson_strncpy(details->array_index, array_index, sizeof details->array_index);
    details->has_array_index = true;
}

/* One value a path reached, tested as mongod's PathMatchExpression::matches does:
 * offset is the field name of the outermost array element the walk went through
 * (NULL when it went through none), recorded when the value matches; an $elemMatch
 * first records its own element, which an offset then overrides. */
static bool path_value_matches(const match_node_t *node, const bson_value_t *value,
                               const char *offset, match_details_t *details)
{
    bool matches;
    if (details != NULL &&
        (node->kind == MATCH_ELEM_MATCH_OBJECT || node->kind == MATCH_ELEM_MATCH_VALUE)) {
        matches = value != NULL && value->value_type == BSON_TYPE_ARRAY &&
                  elem_match_matches(node, value, details);
    } else {
        matches = node_matches_value(node, value);
    }
    if (matches) {
        details_record(details, offset);
    }
    return matches;
}

static bool document_find_field(const uint8_t *data, uint32_t length, const match_path_part_t *part,
                                bson_iter_t *out_field)
{
    if (!bson_iter_init_from_data(out_field, data, length)) {
        return false;
    }
    while (bson_iter_next(out_field)) {
        if (bson_iter_key_len(out_field) == part->length &&
            memcmp(bson_iter_key(out_field), part->name, part->length) == 0) {
            return true;
        }
    }
    return false;
}

/* A path that ends on an array offers each element, each one under its own position
 * unless an outer array already gave the offset. */
static bool array_any_element_matches(const match_node_t *node, const bson_value_t *array,
                                      const char *offset, match_details_t *details)
{
    bson_iter_t element;
    if (!match_value_iter_init(&element, array)) {
        return false;
    }
    while (bson_iter_next(&element)) {
        const char *element_offset = offset != NULL ? offset : bson_iter_key(&element);
        if (path_value_matches(node, bson_iter_value(&element), element_offset, details)) {
            return true;
        }
    }
    return false;
}

static bool path_matches_array(const match_node_t *node, size_t part, const bson_value_t *array,
                               const char *offset, match_details_t *details);

/* Offers node every value that parts[part..] reaches from the document, as mongod's
 * BSONElementIterator does: a missing field (or a scalar where the path goes on)
 * is offered as missing (NULL); true as soon as one value matches. */
static bool path_matches_document(const match_node_t *node, size_t part, const uint8_t *data,
                                  uint32_t length, const char *offset, match_details_t *details)
{
    bson_iter_t field;
    for (;;) {
        if (!document_find_field(data, length, &node->parts[part], &field)) {
            return path_value_matches(node, NULL, offset, details);
        }
        const bson_value_t *value = bson_iter_value(&field);
        bool is_last = part + 1 == node->part_count;
        if (value->value_type == BSON_TYPE_ARRAY) {
            if (!is_last) {
                return path_matches_array(node, part + 1, value, offset, details);
            }
            if (node->expand_leaf_arrays &&
                array_any_element_matches(node, value, offset, details)) {
                return true;
            }
            return path_value_matches(node, value, offset, details);
        }
        if (is_last) {
            return path_value_matches(node, value, offset, details);
        }
        if (value->value_type != BSON_TYPE_DOCUMENT) {
            return path_value_matches(node, NULL, offset, details);
        }
        data = value->value.v_doc.data;
        length = value->value.v_doc.data_len;
        part++;
    }
}

/* parts[part..] continue past an array: each subdocument element is searched for
 * the rest of the path, and when parts[part] is a number it also selects the
 * element at that index. Nested arrays are only entered through an index. Values
 * found inside an element searched implicitly are reported at that element's
 * position; an explicit index is no implicit traversal and sets no offset. */
static bool path_matches_array(const match_node_t *node, size_t part, const bson_value_t *array,
                               const char *offset, match_details_t *details)
{
    const match_path_part_t *next = &node->parts[part];
    bool is_last = part + 1 == node->part_count;
    bson_iter_t element;
    if (!match_value_iter_init(&element, array)) {
        return false;
    }
    while (bson_iter_next(&element)) {
        const bson_value_t *value = bson_iter_value(&element);
        bool at_index = next->is_index && bson_iter_key_len(&element) == next->length &&
                        memcmp(bson_iter_key(&element), next->name, next->length) == 0;
        if (value->value_type == BSON_TYPE_DOCUMENT) {
            const char *element_offset = offset != NULL ? offset : bson_iter_key(&element);
            if (path_matches_document(node, part, value->value.v_doc.data,
                                      value->value.v_doc.data_len, element_offset, details)) {
                return true;
            }
            if (at_index) {
                if (is_last ? path_value_matches(node, value, offset, details)
                            : path_matches_document(node, part + 1, value->value.v_doc.data,
                                                    value->value.v_doc.data_len, offset, details)) {
                    return true;
                }
            }
        } else if (at_index) {
            if (is_last) {
                if (path_value_matches(node, value, offset, details)) {
                    return true;
                }
            } else if (value->value_type == BSON_TYPE_ARRAY &&
                       path_matches_array(node, part + 1, value, offset, details)) {
                return true;
            }
        }
    }
    return false;
}

/* Comparisons across canonical types are false, except against MinKey/MaxKey. */
static bool compare_against_bound(match_compare_t op, const bson_value_t *operand)
{
    if (operand->value_type == BSON_TYPE_MAXKEY) {
        return op == MATCH_LT || op == MATCH_LTE;
    }
    if (operand->value_type == BSON_TYPE_MINKEY) {
        return op == MATCH_GT || op == MATCH_GTE;
    }
    return false;
}

static bool compare_matches(const match_node_t *node, const bson_value_t *value)
{
    const bson_value_t *operand = &node->u.compare.operand;
    match_compare_t op = node->u.compare.op;
    /* Missing and undefined share a bracket below null, and equal null for $eq, $lte, $gte. */
    if (value == NULL || value->value_type == BSON_TYPE_UNDEFINED) {
        if (operand->value_type == BSON_TYPE_NULL) {
            return op == MATCH_EQ || op == MATCH_LTE || op == MATCH_GTE;
        }
        return compare_against_bound(op, operand);
    }
    if (value->value_type != operand->value_type &&
        order_canonical_type(value->value_type) != order_canonical_type(operand->value_type)) {
        return compare_against_bound(op, operand);
    }
    if (op != MATCH_EQ) {
        /* NaN only equals NaN; every ordering comparison with it is false. */
        bool value_nan = match_value_is_nan(value);
        if (value_nan || node->u.compare.operand_is_nan) {
            return (op == MATCH_LTE || op == MATCH_GTE) && value_nan && node->u.compare.operand_is_nan;
        }
    }
    int order = order_compare_values_collated(value, operand, node->collation);
    switch (op) {
    case MATCH_EQ:
        return order == 0;
    case MATCH_LT:
        return order < 0;
    case MATCH_LTE:
        return order <= 0;
    case MATCH_GT:
        return order > 0;
    case MATCH_GTE:
        return order >= 0;
    }
    return false;
}

static bool regex_matches_value(const match_regex_t *regex, const bson_value_t *value)
{
    const char *subject;
    uint32_t length;
    switch (value->value_type) {
    case BSON_TYPE_UTF8:
        subject = value->value.v_utf8.str;
        length = value->value.v_utf8.len;
        break;
    case BSON_TYPE_SYMBOL:
        subject = value->value.v_symbol.symbol;
        length = value->value.v_symbol.len;
        break;
    case BSON_TYPE_REGEX:
        /* A stored regex matches only the identical regex. */
        return strcmp(regex->pattern, value->value.v_regex.regex) == 0 &&
               strcmp(regex->flags, value->value.v_regex.options) == 0;
    default:
        return false;
    }
    /* 0 means "matched, ovector too small", which is all we ask. */
    return pcre2_match(regex->code, (PCRE2_SPTR)subject, length, 0, 0, regex->match_data, NULL) >= 0;
}

static bool in_matches(const match_node_t *node, const bson_value_t *value)
{
    /* With null in the list, $in matches missing and undefined as {$eq: null} does. */
    if (value == NULL || value->value_type == BSON_TYPE_UNDEFINED) {
        if (node->u.in.has_null) {
            return true;
        }
        if (value == NULL) {
            return false;
        }
    }
    if (node->collation != NULL) {
        /* The list is sorted in binary order, which is not the collation's: look at each. */
        for (size_t i = 0; i < node->u.in.value_count; i++) {
            if (order_compare_values_collated(value, &node->u.in.values[i], node->collation) == 0) {
                return true;
            }
        }
    } else if (bsearch(value, node->u.in.values, node->u.in.value_count, sizeof *node->u.in.values,
                       match_compare_values_for_sort) != NULL) {
        return true;
    }
    for (size_t i = 0; i < node->u.in.regex_count; i++) {
        if (regex_matches_value(&node->u.in.regexes[i], value)) {
            return true;
        }
    }
    return false;
}

static bool mod_matches(const match_node_t *node, const bson_value_t *value)
{
    int64_t dividend;
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        dividend = value->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        dividend = value->value.v_int64;
        break;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        if (!match_double_to_int64(aggregation_value_as_double(value), &dividend)) {
            return false;
        }
        break;
    default:
        return false;
    }
    /* INT64_MIN % -1 overflows in C; the remainder is 0. */
    int64_t remainder = node->u.mod.divisor == -1 ? 0 : dividend % node->u.mod.divisor;
    return remainder == node->u.mod.remainder;
}

static bool bits_continue(match_bits_test_t test, bool bit_set)
{
    switch (test) {
    case MATCH_BITS_ALL_SET:
    case MATCH_BITS_ANY_CLEAR:
        return bit_set;
    case MATCH_BITS_ALL_CLEAR:
    case MATCH_BITS_ANY_SET:
        return !bit_set;
    }
    return false;
}

static bool bits_matches(const match_node_t *node, const bson_value_t *value)
{
    match_bits_test_t test = node->u.bits.test;
    if (value->value_type == BSON_TYPE_BINARY) {
        /* Bit i is bit i%8 of byte i/8; bits past the end are 0 (no sign extension). */
        const uint8_t *bytes = value->value.v_binary.data;
        uint64_t bit_count = (uint64_t)value->value.v_binary.data_len * 8;
        for (size_t i = 0; i < node->u.bits.position_count; i++) {
            uint32_t position = node->u.bits.positions[i];
            bool bit_set = position < bit_count && (bytes[position / 8] >> (position % 8)) & 1;
            if (!bits_continue(test, bit_set)) {
                return test == MATCH_BITS_ANY_SET || test == MATCH_BITS_ANY_CLEAR;
            }
        }
        return test == MATCH_BITS_ALL_SET || test == MATCH_BITS_ALL_CLEAR;
    }
    int64_t number;
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        number = value->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        number = value->value.v_int64;
        break;
    case BSON_TYPE_DOUBLE: {
        /* Only integral doubles that fit in an int64 take part. */
        double d = value->value.v_double;
        if (!match_double_to_int64(d, &number) || (double)number != d) {
            return false;
        }
        break;
    }
    case BSON_TYPE_DECIMAL128: {
        double d = aggregation_value_as_double(value);
        if (!match_double_to_int64(nearbyint(d), &number)) {
            return false;
        }
        break;
    }
    default:
        return false;
    }
    uint64_t bits = (uint64_t)number;
    uint64_t mask = node->u.bits.mask;
    switch (test) {
    case MATCH_BITS_ALL_SET:
        return (bits & mask) == mask;
    case MATCH_BITS_ALL_CLEAR:
        return (bits & mask) == 0;
    case MATCH_BITS_ANY_SET:
        return (bits & mask) != 0;
    case MATCH_BITS_ANY_CLEAR:
        return (bits & mask) != mask;
    }
    return false;
}

/* $elemMatch: true when one element qualifies; details (NULL-able) get its position. */
static bool elem_match_matches(const match_node_t *node, const bson_value_t *array,
                               match_details_t *details)
{
    bson_iter_t element;
    if (!match_value_iter_init(&element, array)) {
        return false;
    }
    while (bson_iter_next(&element)) {
        const bson_value_t *value = bson_iter_value(&element);
        bool matches;
        if (node->kind == MATCH_ELEM_MATCH_OBJECT) {
            /* Arrays count as documents whose fields are "0", "1", ... */
            matches = (value->value_type == BSON_TYPE_DOCUMENT ||
                       value->value_type == BSON_TYPE_ARRAY) &&
                      match_node_matches_document(node->children[0], value->value.v_doc.data,
                                                  value->value.v_doc.data_len, NULL);
        } else {
            matches = true;
            for (size_t i = 0; matches && i < node->child_count; i++) {
                matches = node_matches_value(node->children[i], value);
            }
        }
        if (matches) {
            details_record(details, bson_iter_key(&element));
            return true;
        }
    }
    return false;
}

/* mongod's matchesSingleElement: the node tested against one value (NULL: missing). */
static bool node_matches_value(const match_node_t *node, const bson_value_t *value)
{
    switch (node->kind) {
    case MATCH_AND:
        for (size_t i = 0; i < node->child_count; i++) {
            if (!node_matches_value(node->children[i], value)) {
                return false;
            }
        }
        return true;
    case MATCH_OR:
        for (size_t i = 0; i < node->child_count; i++) {
            if (node_matches_value(node->children[i], value)) {
                return true;
            }
        }
        return false;
    case MATCH_NOR:
        for (size_t i = 0; i < node->child_count; i++) {
            if (node_matches_value(node->children[i], value)) {
                return false;
            }
        }
        return true;
    case MATCH_NOT:
        return !node_matches_value(node->children[0], value);
    case MATCH_ALWAYS_TRUE:
        return true;
    case MATCH_ALWAYS_FALSE:
        return false;
    case MATCH_COMPARE:
        return compare_matches(node, value);
    case MATCH_IN:
        return in_matches(node, value);
    case MATCH_EXISTS:
        return value != NULL;
    default:
        break;
    }
    if (value == NULL) {
        return false;
    }
    switch (node->kind) {
    case MATCH_REGEX:
        return regex_matches_value(&node->u.regex, value);
    case MATCH_TYPE:
        return (node->u.type.all_numbers && order_is_number(value->value_type)) ||
               node->u.type.types[(uint8_t)value->value_type];
    case MATCH_MOD:
        return mod_matches(node, value);
    case MATCH_SIZE:
        return value->value_type == BSON_TYPE_ARRAY && match_array_length(value) == (uint32_t)node->u.size;
    case MATCH_BITS:
        return bits_matches(node, value);
    case MATCH_ELEM_MATCH_OBJECT:
    case MATCH_ELEM_MATCH_VALUE:
        return value->value_type == BSON_TYPE_ARRAY && elem_match_matches(node, value, NULL);
    default:
        return false;
    }
}

/* mongod's MatchType order, which its canonical form sorts an $and's children by
 * (after folding a one-value $in into an equality or a regex). */
static int node_canonical_rank(const match_node_t *node)
{
    switch (node->kind) {
    case MATCH_ELEM_MATCH_OBJECT: return 2;
    case MATCH_ELEM_MATCH_VALUE: return 3;
    case MATCH_SIZE: return 4;
    case MATCH_COMPARE:
        switch (node->u.compare.op) {
        case MATCH_EQ: return 5;
        case MATCH_LTE: return 6;
        case MATCH_LT: return 7;
        case MATCH_GT: return 8;
        case MATCH_GTE: return 9;
        }
        return 5;
    case MATCH_REGEX: return 10;
    case MATCH_MOD: return 11;
    case MATCH_EXISTS: return 12;
    case MATCH_IN:
        if (node->u.in.value_count + node->u.in.regex_count == 1) {
            return node->u.in.value_count == 1 ? 5 : 10;
        }
        return 13;
    case MATCH_BITS: return 14 + (int)node->u.bits.test;
    case MATCH_TYPE: return 20;
    default: return 0;
    }
}

/* Compares the dotted paths of two predicates (path_buffer holds NULs for dots). */
static int node_path_compare(const match_node_t *left, const match_node_t *right)
{
    size_t left_length = 0, right_length = 0;
    if (left->part_count > 0) {
        const match_path_part_t *last = &left->parts[left->part_count - 1];
        left_length = (size_t)(last->name - left->path_buffer) + last->length;
    }
    if (right->part_count > 0) {
        const match_path_part_t *last = &right->parts[right->part_count - 1];
        right_length = (size_t)(last->name - right->path_buffer) + last->length;
    }
    for (size_t i = 0; i < left_length && i < right_length; i++) {
        unsigned char l = left->path_buffer[i] ? (unsigned char)left->path_buffer[i] : '.';
        unsigned char r = right->path_buffer[i] ? (unsigned char)right->path_buffer[i] : '.';
        if (l != r) {
            return l < r ? -1 : 1;
        }
    }
    return left_length == right_length ? 0 : left_length < right_length ? -1 : 1;
}

/* An $and matched with details: every child (nested $and flattened, as mongod's
 * canonical form has them) must match; the array index kept is the one recorded by the
 * child that sorts last in that form. *best is that child so far (NULL: none). */
static bool and_matches_with_details(const match_node_t *node, const uint8_t *data,
                                     uint32_t length, match_details_t *details,
                                     const match_node_t **best)
{
    for (size_t i = 0; i < node->child_count; i++) {
        const match_node_t *child = node->children[i];
        while (child->kind == MATCH_OR && child->child_count == 1) {
            child = child->children[0];
        }
        if (child->kind == MATCH_AND) {
            if (!and_matches_with_details(child, data, length, details, best)) {
                return false;
            }
            continue;
        }
        match_details_t child_details = {.has_array_index = false};
        if (!match_node_matches_document(child, data, length, &child_details)) {
            return false;
        }
        if (!child_details.has_array_index) {
            continue;
        }
        int order = *best == NULL ? 1 : node_canonical_rank(child) - node_canonical_rank(*best);
        if (order == 0) {
            order = node_path_compare(child, *best);
        }
        if (order >= 0) {
            *best = child;
            *details = child_details;
        }
    }
    return true;
}

/* $expr: the expression's value on the whole document, as $cond would read it. */
static bool expr_matches(const match_node_t *node, const uint8_t *data, uint32_t length)
{
    match_expr_state_t *state = node->u.expr.state;
    bson_t document;
    bson_value_t value;
    bson_error_t error;
    if (!bson_init_static(&document, data, length)) {
        return false;
    }
    if (!expression_evaluate(node->u.expr.expression, &document, &state->context, &value, &error)) {
        if (!state->failed) {
            state->failed = true;
            state->error = error;
        }
        return false;
    }
    bool truth = aggregation_value_truthy(&value);
    bson_value_destroy(&value);
    return truth;
}

/* details (NULL-able) as match_document_with_details() describes. */
bool match_node_matches_document(const match_node_t *node, const uint8_t *data, uint32_t length,
                                 match_details_t *details)
{
    switch (node->kind) {
    case MATCH_AND:
        if (details != NULL) {
            const match_node_t *best = NULL;
            if (!and_matches_with_details(node, data, length, details, &best)) {
                details->has_array_index = false;
                return false;
            }
            return true;
        }
        for (size_t i = 0; i < node->child_count; i++) {
            if (!match_node_matches_document(node->children[i], data, length, NULL)) {
                return false;
            }
        }
        return true;
    case MATCH_OR:
        /* mongod's canonical form replaces a one-branch $or by its branch. */
        if (node->child_count == 1) {
            return match_node_matches_document(node->children[0], data, length, details);
        }
        for (size_t i = 0; i < node->child_count; i++) {
            if (match_node_matches_document(node->children[i], data, length, NULL)) {
                return true;
            }
        }
        return false;
    case MATCH_NOR:
        for (size_t i = 0; i < node->child_count; i++) {
            if (match_node_matches_document(node->children[i], data, length, NULL)) {
                return false;
            }
        }
        return true;
    case MATCH_NOT:
        return !match_node_matches_document(node->children[0], data, length, NULL);
    case MATCH_ALWAYS_TRUE:
        return true;
    case MATCH_ALWAYS_FALSE:
        return false;
    case MATCH_EXPR:
        return expr_matches(node, data, length);
    case MATCH_JSON_SCHEMA: {
        bson_t document;
        return bson_init_static(&document, data, length) && json_schema_matches(node->u.json_schema, &document, NULL);
    }
    default:
        return node->part_count > 0 &&
               path_matches_document(node, 0, data, length, NULL, details);
    }
}
