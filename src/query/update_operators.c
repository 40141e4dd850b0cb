/* The update operators, each applied at the path the walk in update.c is visiting:
 * numbers as mongod's SafeNum, $push's $each/$position/$slice/$sort, paths created
 * with their missing parents, $unset, $pull, $pop, $rename. */
#include "query/value_format.h"
#include "query/update_private.h"

#include "query/order.h"
#include "common/clock.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* mongod refuses to pad an array by more than this many nulls ($set {"a.2000000": 1}). */
#define UPDATE_MAX_ARRAY_PADDING 1500000u

/* --- the path being visited ---------------------------------------------------------- */

static bool current_path_touches_id(const update_apply_context_t *context)
{
    return context->path.count > 0 && strcmp(context->path.parts[0], "_id") == 0;
}

static bool immutable_error(update_apply_context_t *context, const char *format_prefix)
{
    char *dotted = update_path_join(context->path.parts, context->path.count);
    tc_error_set(context->error, TC_ERR_IMMUTABLE_FIELD,
                 "%s '%s' would modify the immutable field '_id'", format_prefix, dotted);
    bson_free(dotted);
    return false;
}

/* --- numbers, as mongod's SafeNum ---------------------------------------------------- */

typedef struct number {
    bson_type_t type; /* INT32, INT64 or DOUBLE; EOD when the result overflowed */
    int64_t integer;
    double real;
} number_t;

static number_t number_from_value(const bson_value_t *value)
{
    number_t number = {value->value_type, 0, 0};
    switch (value->value_type) {
    case BSON_TYPE_INT32: number.integer = value->value.v_int32; break;
    case BSON_TYPE_INT64: number.integer = value->value.v_int64; break;
    case BSON_TYPE_DOUBLE: number.real = value->value.v_double; break;
    default: number.type = BSON_TYPE_EOD; break;
    }
    return number;
}

static double number_as_double(number_t number)
{
    return number.type == BSON_TYPE_DOUBLE ? number.real : (double)number.integer;
}

static number_t number_integer_result(int64_t result, bool both_int32)
{
    number_t number = {BSON_TYPE_INT64, result, 0};
    if (both_int32 && result >= INT32_MIN && result <= INT32_MAX) {
        number.type = BSON_TYPE_INT32;
    }
    return number;
}

static number_t number_combine(number_t left, number_t right, bool multiply)
{
    number_t invalid = {BSON_TYPE_EOD, 0, 0};
    if (left.type == BSON_TYPE_DOUBLE || right.type == BSON_TYPE_DOUBLE) {
        double l = number_as_double(left), r = number_as_double(right);
        number_t result = {BSON_TYPE_DOUBLE, 0, multiply ? l * r : l + r};
        return result;
    }
    bool both_int32 = left.type == BSON_TYPE_INT32 && right.type == BSON_TYPE_INT32;
    int64_t result;
    /* int32 results that leave int32 become int64; int64 overflow is an error. */
    bool overflow = multiply ? __builtin_mul_overflow(left.integer, right.integer, &result)
                             : __builtin_add_overflow(left.integer, right.integer, &result);
    return overflow ? invalid : number_integer_result(result, both_int32);
}

static bson_value_t number_to_value(number_t number)
{
    bson_value_t value;
    value.value_type = number.type;
    if (number.type == BSON_TYPE_INT32) {
        value.value.v_int32 = (int32_t)number.integer;
    } else if (number.type == BSON_TYPE_INT64) {
        value.value.v_int64 = number.integer;
    } else {
        value.value.v_double = number.real;
    }
    return value;
}

/* $bit's and/or/xor list (mongod's BitNode::applyOpList): int32 stays int32 unless an
 * operand is int64. */
static number_t number_apply_bits(const update_node_t *leaf, number_t value)
{
    bson_t operations;
    bson_iter_t iter;
    bson_init_static(&operations, leaf->argument.value.v_doc.data,
                     leaf->argument.value.v_doc.data_len);
    bson_iter_init(&iter, &operations);
    while (bson_iter_next(&iter)) {
        const char *name = bson_iter_key(&iter);
        int64_t operand = bson_iter_as_int64(&iter);
        if (BSON_ITER_HOLDS_INT64(&iter)) {
            value.type = BSON_TYPE_INT64;
        }
        if (strcmp(name, "and") == 0) {
            value.integer &= operand;
        } else if (strcmp(name, "or") == 0) {
            value.integer |= operand;
        } else {
            value.integer ^= operand;
        }
    }
    return value;
}

static void number_debug_string(bson_string_t *out, number_t number)
{
    if (number.type == BSON_TYPE_INT32) {
        bson_string_append_printf(out, "(NumberInt)%lld", (long long)number.integer);
    } else if (number.type == BSON_TYPE_INT64) {
        bson_string_append_printf(out, "(NumberLong)%lld", (long long)number.integer);
    } else {
        bson_string_append(out, "(NumberDouble)");
        update_format_double(out, number.real);
    }
}

/* --- $push helpers ------------------------------------------------------------------- */

typedef struct sort_item {
    update_element_t *element;
    bson_t *storage; /* one of an aligned array: bson_t needs an alignment malloc lacks */
    bson_value_t view;
} sort_item_t;

static void extract_sort_key(const bson_value_t *value, const char *field, bson_value_t *out)
{
    bson_t document;
    bson_iter_t iter;
    bson_iter_t found;
    out->value_type = BSON_TYPE_NULL;
    if (value->value_type != BSON_TYPE_DOCUMENT ||
        !bson_init_static(&document, value->value.v_doc.data, value->value.v_doc.data_len) ||
        !bson_iter_init(&iter, &document)) {
        return;
    }
    if (bson_iter_find_descendant(&iter, field, &found)) {
        *out = *bson_iter_value(&found);
    }
}

/* mongod's PatternElementCmp: whole values, or the pattern's fields (missing = null). */
static int push_sort_compare(const update_node_t *leaf, const sort_item_t *left,
                             const sort_item_t *right)
{
    if (leaf->sort_whole_value) {
        return order_compare_values(&left->view, &right->view) * leaf->sort_direction;
    }
    bson_iter_t pattern;
    bson_iter_init(&pattern, leaf->sort_pattern);
    while (bson_iter_next(&pattern)) {
        bson_value_t left_key, right_key;
        int direction = bson_iter_as_double(&pattern) < 0 ? -1 : 1;
        extract_sort_key(&left->view, bson_iter_key(&pattern), &left_key);
        extract_sort_key(&right->view, bson_iter_key(&pattern), &right_key);
        int result = order_compare_values(&left_key, &right_key);
        if (result != 0) {
            return result * direction;
        }
    }
    return 0;
}

/* A stable merge sort of array's members under the $push $sort clause. */
static void push_sort(const update_node_t *leaf, update_element_t *array)
{
    size_t count = array->child_count;
    if (count < 2) {
        return;
    }
    sort_item_t *items = bson_malloc0(count * sizeof *items);
    bson_t *storages = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), count * sizeof(bson_t));
    sort_item_t **order = bson_malloc(count * sizeof *order);
    sort_item_t **scratch = bson_malloc(count * sizeof *scratch);
    for (size_t i = 0; i < count; i++) {
        items[i].element = array->children[i];
        items[i].storage = &storages[i];
        update_element_view(items[i].element, items[i].storage, &items[i].view);
        order[i] = &items[i];
    }
    for (size_t width = 1; width < count; width *= 2) {
        for (size_t low = 0; low < count; low += 2 * width) {
            size_t middle = low + width < count ? low + width : count;
            size_t high = low + 2 * width < count ? low + 2 * width : count;
            size_t left = low, right = middle, out = low;
            while (left < middle && right < high) {
                scratch[out++] = push_sort_compare(leaf, order[right], order[left]) < 0
                                     ? order[right++]
                                     : order[left++];
            }
            while (left < middle) {
                scratch[out++] = order[left++];
            }
            while (right < high) {
                scratch[out++] = order[right++];
            }
        }
        memcpy(order, scratch, count * sizeof *order);
    }
    for (size_t i = 0; i < count; i++) {
        array->children[i] = order[i]->element;
        bson_destroy(items[i].storage);
    }
    bson_free(storages);
    bson_free(items);
    bson_free(order);
    bson_free(scratch);
}

/* $each/$position, then $sort, then $slice (mongod's PushNode::performPush). */
static bool push_into(const update_node_t *leaf, update_element_t *array)
{
    bool modified = false;
    bson_iter_t iter;
    int64_t size = (int64_t)array->child_count;
    size_t insert_at;
    if (leaf->position > size) {
        insert_at = (size_t)size;
    } else if (leaf->position >= 0) {
        insert_at = (size_t)leaf->position;
    } else if (-leaf->position < size) {
        insert_at = (size_t)(size + leaf->position);
    } else {
        insert_at = 0;
    }
    bson_iter_init(&iter, leaf->values);
    while (bson_iter_next(&iter)) {
        update_element_insert(array, insert_at++,
                              update_element_from_value(NULL, bson_iter_value(&iter)));
        modified = true;
    }
    if (leaf->has_sort) {
        push_sort(leaf, array);
        modified = true;
    }
    int64_t keep = leaf->slice == INT64_MIN ? INT64_MAX : llabs(leaf->slice);
    while ((int64_t)array->child_count > keep) {
        size_t victim = leaf->slice >= 0 ? array->child_count - 1 : 0;
        update_element_destroy(update_element_detach(array->children[victim]));
        modified = true;
    }
    return modified;
}

static update_element_t *element_now(const update_node_t *leaf, const char *name)
{
    static atomic_uint timestamp_increment;
    int64_t now_ms = clock_wall_ms();
    bson_value_t value;
    if (leaf->current_date_timestamp) {
        /* A process-wide counter keeps timestamps taken in the same second distinct. */
        value.value_type = BSON_TYPE_TIMESTAMP;
        value.value.v_timestamp.timestamp = (uint32_t)(now_ms / 1000);
        value.value.v_timestamp.increment = atomic_fetch_add(&timestamp_increment, 1) + 1;
    } else {
        value.value_type = BSON_TYPE_DATE_TIME;
        value.value.v_datetime = now_ms;
    }
    return update_element_from_value(name, &value);
}

/* --- the operators --------------------------------------------------------------------- */

/* $inc and $mul on an existing number: SafeNum arithmetic, refusing other types
 * and decimals, and an overflowed int64. */
static bool existing_inc_or_mul(update_apply_context_t *context, const update_node_t *leaf,
                                update_element_t *element, bool *out_modified)
{
    const char *operator_name = leaf->op == UPDATE_OPERATOR_INC ? "$inc" : "$mul";
    if (!update_is_number_type(element->value.value_type)) {
        char *id = update_element_describe_id(context->root);
        bson_string_t *name = bson_string_new(NULL);
        update_element_display_name(element, name);
        tc_error_set(context->error, TC_ERR_TYPE_MISMATCH,
                     "Cannot apply %s to a value of non-numeric type. {%s} has the field "
                     "'%s' of non-numeric type %s",
                     operator_name, id, name->str, value_type_name(element->value.value_type));
        bson_string_free(name, true);
        bson_free(id);
        return false;
    }
    if (element->value.value_type == BSON_TYPE_DECIMAL128 ||
        leaf->argument.value_type == BSON_TYPE_DECIMAL128) {
        return tc_error_set(context->error, TC_ERR_BAD_VALUE,
                            "%s with decimal128 values is not supported yet", operator_name);
    }
    number_t original = number_from_value(&element->value);
    number_t result = number_combine(number_from_value(&leaf->argument), original,
                                     leaf->op == UPDATE_OPERATOR_MUL);
    if (result.type == BSON_TYPE_EOD) {
        char *id = update_element_describe_id(context->root);
        bson_string_t *current = bson_string_new(NULL);
        number_debug_string(current, original);
        tc_error_set(context->error, TC_ERR_BAD_VALUE,
                     "Failed to apply %s operations to current value (%s) for document {%s}",
                     operator_name, current->str, id);
        bson_string_free(current, true);
        bson_free(id);
        return false;
    }
    bool identical = result.type == original.type &&
                     (result.type == BSON_TYPE_DOUBLE ? result.real == original.real
                                                      : result.integer == original.integer);
    if (!identical) {
        bson_value_t value = number_to_value(result);
        update_element_assign_value(element, &value);
        *out_modified = true;
    }
    return true;
}

/* $bit on an existing int32 or int64. */
static bool existing_bit(update_apply_context_t *context, const update_node_t *leaf,
                         update_element_t *element, bool *out_modified)
{
    bson_type_t type = element->value.value_type;
    if (type != BSON_TYPE_INT32 && type != BSON_TYPE_INT64) {
        char *id = update_element_describe_id(context->root);
        bson_string_t *name = bson_string_new(NULL);
        update_element_display_name(element, name);
        tc_error_set(context->error, TC_ERR_BAD_VALUE,
                     "Cannot apply $bit to a value of non-integral type.%s has the field %s "
                     "of non-integer type %s",
                     id, name->str, value_type_name(type));
        bson_string_free(name, true);
        bson_free(id);
        return false;
    }
    number_t original = number_from_value(&element->value);
    number_t result = number_apply_bits(leaf, original);
    if (result.type != original.type || result.integer != original.integer) {
        bson_value_t value = number_to_value(result);
        update_element_assign_value(element, &value);
        *out_modified = true;
    }
    return true;
}

/* $push into an existing array; a pure append is remembered for the change log. */
static bool existing_push(update_apply_context_t *context, const update_node_t *leaf,
                          update_element_t *element, bool *out_modified)
{
    if (element->value.value_type != BSON_TYPE_ARRAY) {
        char *id = update_element_describe_id(context->root);
        char *dotted = update_path_join(context->path.parts, context->path.count);
        tc_error_set(context->error, TC_ERR_BAD_VALUE,
                     "The field '%s' must be an array but is of type %s in document {%s}",
                     dotted, value_type_name(element->value.value_type), id);
        bson_free(dotted);
        bson_free(id);
        return false;
    }
    /* A pure append is reported member by member in the change description. */
    size_t before = element->child_count;
    bool appends = before > 0 && leaf->position > (int64_t)before && !leaf->has_sort;
    *out_modified = push_into(leaf, element);
    if (appends && element->child_count == before + bson_count_keys(leaf->values)) {
        context->appended_from = before;
    }
    return true;
}

/* $addToSet into an existing array: each value not already a member is appended. */
static bool existing_add_to_set(update_apply_context_t *context, const update_node_t *leaf,
                                update_element_t *element, bool *out_modified)
{
    if (element->value.value_type != BSON_TYPE_ARRAY) {
        bson_string_t *name = bson_string_new(NULL);
        update_element_display_name(element, name);
        tc_error_set(context->error, TC_ERR_BAD_VALUE,
                     "Cannot apply $addToSet to non-array field. Field named '%s' has "
                     "non-array type %s",
                     name->str, value_type_name(element->value.value_type));
        bson_string_free(name, true);
        return false;
    }
    bson_iter_t iter;
    size_t original_count = element->child_count;
    bson_iter_init(&iter, leaf->values);
    while (bson_iter_next(&iter)) {
        bool present = false;
        for (size_t i = 0; i < original_count && !present; i++) {
            present =
                update_element_compare_value(element->children[i], bson_iter_value(&iter)) == 0;
        }
        if (!present) {
            update_element_append(element,
                                  update_element_from_value(NULL, bson_iter_value(&iter)));
            *out_modified = true;
        }
    }
    return true;
}


/* Changes an existing element; *out_modified false for a no-op. */
static bool update_existing(update_apply_context_t *context, const update_node_t *leaf,
                            update_element_t *element, const update_element_t *rename_source,
                            bool *out_modified)
{
    *out_modified = false;
    switch (leaf->op) {
    case UPDATE_OPERATOR_SET:
    case UPDATE_OPERATOR_SET_ON_INSERT:
        if (!update_element_binary_equal(element, &leaf->argument)) {
            update_element_assign_value(element, &leaf->argument);
            *out_modified = true;
        }
        return true;
    case UPDATE_OPERATOR_CURRENT_DATE: {
        update_element_t *now = element_now(leaf, NULL);
        update_element_assign_element(element, now);
        update_element_destroy(now);
        *out_modified = true;
        return true;
    }
    case UPDATE_OPERATOR_MIN:
    case UPDATE_OPERATOR_MAX: {
        int comparison = update_element_compare_value(element, &leaf->argument);
        if ((leaf->op == UPDATE_OPERATOR_MIN && comparison > 0) ||
            (leaf->op == UPDATE_OPERATOR_MAX && comparison < 0)) {
            update_element_assign_value(element, &leaf->argument);
            *out_modified = true;
        }
        return true;
    }
    case UPDATE_OPERATOR_INC:
    case UPDATE_OPERATOR_MUL:
        return existing_inc_or_mul(context, leaf, element, out_modified);
    case UPDATE_OPERATOR_BIT:
        return existing_bit(context, leaf, element, out_modified);
    case UPDATE_OPERATOR_PUSH:
        return existing_push(context, leaf, element, out_modified);
    case UPDATE_OPERATOR_ADD_TO_SET:
        return existing_add_to_set(context, leaf, element, out_modified);
    case UPDATE_OPERATOR_RENAME: {
        bson_t storage;
        bson_value_t view;
        update_element_view(rename_source, &storage, &view);
        int comparison = update_element_compare_value(element, &view);
        bson_destroy(&storage);
        if (comparison != 0) {
            update_element_assign_element(element, rename_source);
            *out_modified = true;
        }
        return true;
    }
    default: return true;
    }
}

/* The element a path-creating operator puts where nothing was. */
static update_element_t *new_value_element(const update_node_t *leaf, const char *name,
                                           const update_element_t *rename_source)
{
    update_element_t *element;
    bson_iter_t iter;
    switch (leaf->op) {
    case UPDATE_OPERATOR_CURRENT_DATE: return element_now(leaf, name);
    case UPDATE_OPERATOR_MUL: {
        /* The product with zero keeps the argument's type (and a double's sign). */
        number_t zero = {BSON_TYPE_INT32, 0, 0};
        bson_value_t value =
            number_to_value(number_combine(number_from_value(&leaf->argument), zero, true));
        if (leaf->argument.value_type == BSON_TYPE_DECIMAL128) {
            value = leaf->argument;
            memset(&value.value.v_decimal128, 0, sizeof value.value.v_decimal128);
            bson_decimal128_from_string("0", &value.value.v_decimal128);
        }
        return update_element_from_value(name, &value);
    }
    case UPDATE_OPERATOR_BIT: {
        number_t zero = {BSON_TYPE_INT32, 0, 0};
        bson_value_t value = number_to_value(number_apply_bits(leaf, zero));
        return update_element_from_value(name, &value);
    }
    case UPDATE_OPERATOR_PUSH:
        element = update_element_new(name, BSON_TYPE_ARRAY);
        push_into(leaf, element);
        return element;
    case UPDATE_OPERATOR_ADD_TO_SET:
        element = update_element_new(name, BSON_TYPE_ARRAY);
        bson_iter_init(&iter, leaf->values);
        while (bson_iter_next(&iter)) {
            update_element_append(element, update_element_from_value(NULL, bson_iter_value(&iter)));
        }
        return element;
    case UPDATE_OPERATOR_RENAME: return update_element_copy(rename_source, name);
    default: return update_element_from_value(name, &leaf->argument);
    }
}

/* Creates parts[resolved..] under deepest (which exists) and puts value at the end,
 * padding arrays with nulls (mongod's pathsupport::createPathAt). Takes value. */
bool update_create_path(update_apply_context_t *context, update_element_t *deepest, size_t resolved,
                        update_element_t *value)
{
    char *const *parts = context->path.parts;
    size_t count = context->path.count;
    update_element_t *parent = deepest;
    size_t i = resolved;
    if (deepest->value.value_type != BSON_TYPE_DOCUMENT) {
        size_t index;
        if (deepest->value.value_type != BSON_TYPE_ARRAY ||
            !update_path_part_index(parts[i], &index)) {
            char *described = update_element_describe(deepest);
            tc_error_set(context->error, TC_ERR_PATH_NOT_VIABLE,
                         "Cannot create field '%s' in element {%s}", parts[i], described);
            bson_free(described);
            update_element_destroy(value);
            return false;
        }
        if (index - deepest->child_count > UPDATE_MAX_ARRAY_PADDING) {
            update_element_destroy(value);
            return tc_error_set(context->error, TC_ERR_CANNOT_BACKFILL_ARRAY,
                                "can't backfill more than %u elements", UPDATE_MAX_ARRAY_PADDING);
        }
        while (deepest->child_count < index) {
            update_element_append(deepest, update_element_new(NULL, BSON_TYPE_NULL));
        }
        if (i + 1 == count) {
            update_element_append(deepest, value);
            return true;
        }
        /* An array member on the way is a new document holding the rest of the path. */
        parent = update_element_new(NULL, BSON_TYPE_DOCUMENT);
        update_element_append(deepest, parent);
        i++;
    }
    for (; i + 1 < count; i++) {
        update_element_t *child = update_element_new(parts[i], BSON_TYPE_DOCUMENT);
        update_element_append(parent, child);
        parent = child;
    }
    bson_free(value->name);
    value->name = bson_strdup(parts[count - 1]);
    update_element_append(parent, value);
    return true;
}

/* $set and every operator that creates its path when missing. */
static bool apply_path_creating(update_apply_context_t *context, const update_node_t *leaf,
                                const update_element_t *rename_source)
{
    size_t resolved;
    update_element_t *element =
        update_path_resolve(context->root, context->path.parts, context->path.count, &resolved);
    if (resolved == context->path.count) {
        bool modified;
        if (!update_existing(context, leaf, element, rename_source, &modified)) {
            return false;
        }
        if (!modified) {
            return true;
        }
        if (current_path_touches_id(context)) {
            return immutable_error(context, "Performing an update on the path");
        }
        context->changed = true;
        if (context->appended_from == SIZE_MAX) {
            update_log_current_path(context, context->path.count, false);
            return true;
        }
        for (size_t i = context->appended_from; i < element->child_count; i++) {
            char index_text[24];
            snprintf(index_text, sizeof index_text, "%zu", i);
            update_path_push(&context->path, index_text);
            update_log_current_path(context, context->path.count, false);
            update_path_pop(&context->path);
        }
        context->appended_from = SIZE_MAX;
        return true;
    }
    if (resolved == 0 && context->path.parts[0][0] == '$') {
        return tc_error_set(context->error, TC_ERR_DOLLAR_PREFIXED_FIELD_NAME,
                            "The dollar ($) prefixed field '%s' in '%s' is not valid for storage.",
                            context->path.parts[0], context->path.parts[0]);
    }
    update_element_t *value =
        new_value_element(leaf, context->path.parts[context->path.count - 1], rename_source);
    if (!update_create_path(context, element, resolved, value)) {
        return false;
    }
    if (resolved > 0 && current_path_touches_id(context)) {
        char *taken = update_path_join(context->path.parts, resolved);
        char *described = update_element_describe(element);
        tc_error_set(context->error, TC_ERR_IMMUTABLE_FIELD,
                     "Updating the path '%s' to %s would modify the immutable field '_id'", taken,
                     described);
        bson_free(described);
        bson_free(taken);
        return false;
    }
    context->changed = true;
    update_log_current_path(context, resolved + 1, false);
    return true;
}

static bool apply_unset(update_apply_context_t *context)
{
    size_t resolved;
    update_element_t *element =
        update_path_resolve(context->root, context->path.parts, context->path.count, &resolved);
    if (resolved < context->path.count) {
        return true;
    }
    if (current_path_touches_id(context)) {
        return immutable_error(context, "Performing an update on the path");
    }
    context->changed = true;
    if (element->parent->value.value_type == BSON_TYPE_ARRAY) {
        /* $unset of an array member nulls it rather than shifting the others. */
        bson_value_t null_value = {.value_type = BSON_TYPE_NULL};
        update_element_assign_value(element, &null_value);
        update_log_current_path(context, context->path.count, false);
    } else {
        update_element_destroy(update_element_detach(element));
        update_log_current_path(context, context->path.count, true);
    }
    return true;
}

/* $pull and $pop on a missing path are no-ops unless the path could never exist. */
static bool check_viability(update_apply_context_t *context, const update_element_t *deepest,
                            size_t resolved)
{
    size_t index;
    if (deepest->value.value_type == BSON_TYPE_DOCUMENT ||
        (deepest->value.value_type == BSON_TYPE_ARRAY &&
         update_path_part_index(context->path.parts[resolved], &index))) {
        return true;
    }
    char *dotted = update_path_join(context->path.parts, context->path.count);
    char *described = update_element_describe(deepest);
    tc_error_set(context->error, TC_ERR_PATH_NOT_VIABLE,
                 "Cannot use the part (%s) of (%s) to traverse the element ({%s})",
                 context->path.parts[resolved], dotted, described);
    bson_free(described);
    bson_free(dotted);
    return false;
}

static bool pull_matches(const update_node_t *leaf, const update_element_t *member)
{
    bson_iter_t iter;
    switch (leaf->op == UPDATE_OPERATOR_PULL_ALL ? UPDATE_PULL_EQUALITY : leaf->pull_kind) {
    case UPDATE_PULL_OBJECT_QUERY: {
        if (member->value.value_type != BSON_TYPE_DOCUMENT) {
            return false;
        }
        bson_t document;
        bson_init(&document);
        update_element_append_children(&document, member);
        bool matches = match_document(leaf->matcher, &document);
        bson_destroy(&document);
        return matches;
    }
    case UPDATE_PULL_WRAPPED_QUERY:
        return update_element_matches(member, UPDATE_PULL_WRAP_FIELD, leaf->matcher);
    case UPDATE_PULL_EQUALITY:
    default:
        if (leaf->op == UPDATE_OPERATOR_PULL) {
            return update_element_compare_value(member, &leaf->argument) == 0;
        }
        bson_iter_init(&iter, leaf->values);
        while (bson_iter_next(&iter)) {
            if (update_element_compare_value(member, bson_iter_value(&iter)) == 0) {
                return true;
            }
        }
        return false;
    }
}

static bool apply_pull(update_apply_context_t *context, const update_node_t *leaf)
{
    size_t resolved;
    update_element_t *element =
        update_path_resolve(context->root, context->path.parts, context->path.count, &resolved);
    if (resolved < context->path.count) {
        return check_viability(context, element, resolved);
    }
    if (element->value.value_type != BSON_TYPE_ARRAY) {
        return tc_error_set(context->error, TC_ERR_BAD_VALUE,
                            "Cannot apply $pull to a non-array value");
    }
    size_t removed = 0;
    for (size_t i = 0; i < element->child_count;) {
        if (pull_matches(leaf, element->children[i])) {
            update_element_destroy(update_element_detach(element->children[i]));
            removed++;
        } else {
            i++;
        }
    }
    if (removed == 0) {
        return true;
    }
    if (current_path_touches_id(context)) {
        return immutable_error(context, "Performing an update on the path");
    }
    context->changed = true;
    update_log_current_path(context, context->path.count, false);
    return true;
}

static bool apply_pop(update_apply_context_t *context, const update_node_t *leaf)
{
    size_t resolved;
    update_element_t *element =
        update_path_resolve(context->root, context->path.parts, context->path.count, &resolved);
    if (resolved == 0) {
        return true;
    }
    if (resolved < context->path.count) {
        return check_viability(context, element, resolved);
    }
    if (element->value.value_type != BSON_TYPE_ARRAY) {
        char *dotted = update_path_join(context->path.parts, context->path.count);
        tc_error_set(context->error, TC_ERR_TYPE_MISMATCH,
                     "Path '%s' contains an element of non-array type '%s'", dotted,
                     value_type_name(element->value.value_type));
        bson_free(dotted);
        return false;
    }
    if (element->child_count == 0) {
        return true;
    }
    if (current_path_touches_id(context)) {
        return immutable_error(context, "Performing a $pop on the path");
    }
    size_t victim = leaf->pop_front ? 0 : element->child_count - 1;
    update_element_destroy(update_element_detach(element->children[victim]));
    context->changed = true;
    update_log_current_path(context, context->path.count, false);
    return true;
}

static bool array_ancestor_error(update_apply_context_t *context, const char *which, const char *dotted,
                                 const update_element_t *array)
{
    char *id = update_element_describe_id(context->root);
    bson_string_t *name = bson_string_new(NULL);
    update_element_display_name(array, name);
    tc_error_set(context->error, TC_ERR_BAD_VALUE,
                 "The %s field cannot be an array element, '%s' in doc with %s has an array "
                 "field called '%s'",
                 which, dotted, id, name->str);
    bson_string_free(name, true);
    bson_free(id);
    return false;
}

/* $rename runs at the destination's place in field order (mongod's RenameNode). */
static bool apply_rename(update_apply_context_t *context, const update_node_t *leaf)
{
    const update_path_t *source_path = &leaf->source;
    update_element_t *source = context->root;
    for (size_t i = 0; i < source_path->count; i++) {
        update_element_t *next = NULL;
        size_t index;
        if (source->value.value_type == BSON_TYPE_DOCUMENT) {
            next = update_element_find(source, source_path->parts[i]);
        } else if (source->value.value_type == BSON_TYPE_ARRAY &&
                   update_path_part_index(source_path->parts[i], &index)) {
            next = index < source->child_count ? source->children[index] : NULL;
        } else {
            char *dotted = update_path_join(source_path->parts, source_path->count);
            char *described = update_element_describe(source);
            tc_error_set(context->error, TC_ERR_PATH_NOT_VIABLE,
                         "cannot use the part (%s of %s) to traverse the element ({%s})",
                         source_path->parts[i - 1], dotted, described);
            bson_free(described);
            bson_free(dotted);
            return false;
        }
        if (next == NULL) {
            return true; /* Renaming a missing field is a no-op. */
        }
        source = next;
    }
    for (const update_element_t *ancestor = source->parent; ancestor != context->root;
         ancestor = ancestor->parent) {
        if (ancestor->value.value_type == BSON_TYPE_ARRAY) {
            char *dotted = update_path_join(source_path->parts, source_path->count);
            array_ancestor_error(context, "source", dotted, ancestor);
            bson_free(dotted);
            return false;
        }
    }
    size_t resolved;
    update_element_t *destination =
        update_path_resolve(context->root, context->path.parts, context->path.count, &resolved);
    const update_element_t *ancestor =
        resolved == context->path.count ? destination->parent : destination;
    for (; ancestor != NULL && ancestor != context->root; ancestor = ancestor->parent) {
        if (ancestor->value.value_type == BSON_TYPE_ARRAY) {
            return array_ancestor_error(context, "destination", leaf->path, ancestor);
        }
    }
    if (!apply_path_creating(context, leaf, source)) {
        return false;
    }
    if (strcmp(source_path->parts[0], "_id") == 0) {
        char *dotted = update_path_join(source_path->parts, source_path->count);
        tc_error_set(context->error, TC_ERR_IMMUTABLE_FIELD,
                     "Unsetting the path '%s' using $rename would modify the immutable field "
                     "'_id'",
                     dotted);
        bson_free(dotted);
        return false;
    }
    update_element_destroy(update_element_detach(source));
    context->changed = true;
    update_log_change(context, update_path_join(source_path->parts, source_path->count), true);
    return true;
}

bool update_apply_leaf(update_apply_context_t *context, const update_node_t *leaf)
{
    switch (leaf->op) {
    case UPDATE_OPERATOR_SET_ON_INSERT:
        return context->is_upsert_insert ? apply_path_creating(context, leaf, NULL) : true;
    case UPDATE_OPERATOR_UNSET: return apply_unset(context);
    case UPDATE_OPERATOR_PULL:
    case UPDATE_OPERATOR_PULL_ALL: return apply_pull(context, leaf);
    case UPDATE_OPERATOR_POP: return apply_pop(context, leaf);
    case UPDATE_OPERATOR_RENAME: return apply_rename(context, leaf);
    case UPDATE_OPERATOR_RENAME_SOURCE: return true;
    default: return apply_path_creating(context, leaf, NULL);
    }
}
