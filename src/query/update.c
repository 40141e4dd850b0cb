/* Applying a compiled update as mongod 6.0 does: the tree is walked in field order
 * over a mutable copy of the document, so existing fields keep their place and new
 * ones are appended; replacements keep _id; upserts start from the filter's equalities. */
#include "query/value_format.h"
#include "query/update_private.h"

#include "query/order.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* mongod refuses to pad an array by more than this many nulls ($set {"a.2000000": 1}). */
#define UPDATE_MAX_ARRAY_PADDING 1500000u

/* ------------------------------------------------------------------------------------
 * Applying an operator update.
 * ---------------------------------------------------------------------------------- */

typedef struct change_log_entry {
    char *path;
    bool removed;
} change_log_entry_t;

typedef struct apply_context {
    const update_spec_t *spec;
    update_element_t *root;
    bool is_upsert_insert;
    const char *matched_array_index; /* what the positional '$' stands for; NULL: none */
    bool changed;
    update_path_t path; /* the path being visited, array indexes included */
    /* Inside $[] updates of several elements the array is logged as a whole. */
    int log_suppressed;
    /* Set by a $push that only appended: mongod logs the new members one by one. */
    size_t appended_from;
    change_log_entry_t *log;
    size_t log_count;
    size_t log_capacity;
    bson_error_t *error;
} apply_context_t;

static bool path_string_is_prefix(const char *prefix, const char *path)
{
    size_t length = strlen(prefix);
    return strncmp(prefix, path, length) == 0 && (path[length] == '\0' || path[length] == '.');
}

/* Records a change for the change-stream description, as mongod's v2 oplog diff
 * would: a change inside an already-logged subtree is covered by it. */
static void log_change(apply_context_t *context, char *path, bool removed)
{
    if (context->log_suppressed > 0) {
        bson_free(path);
        return;
    }
    for (size_t i = 0; i < context->log_count; i++) {
        if (!context->log[i].removed && path_string_is_prefix(context->log[i].path, path)) {
            bson_free(path);
            return;
        }
    }
    size_t kept = 0;
    for (size_t i = 0; i < context->log_count; i++) {
        if (path_string_is_prefix(path, context->log[i].path)) {
            bson_free(context->log[i].path);
        } else {
            context->log[kept++] = context->log[i];
        }
    }
    context->log_count = kept;
    if (context->log_count == context->log_capacity) {
        context->log_capacity = context->log_capacity ? context->log_capacity * 2 : 8;
        context->log = bson_realloc(context->log, context->log_capacity * sizeof *context->log);
    }
    context->log[context->log_count].path = path;
    context->log[context->log_count].removed = removed;
    context->log_count++;
}

static void log_current_path(apply_context_t *context, size_t count, bool removed)
{
    log_change(context, update_path_join(context->path.parts, count), removed);
}

static bool current_path_touches_id(const apply_context_t *context)
{
    return context->path.count > 0 && strcmp(context->path.parts[0], "_id") == 0;
}

static bool immutable_error(apply_context_t *context, const char *format_prefix)
{
    char *dotted = update_path_join(context->path.parts, context->path.count);
    tc_error_set(context->error, TC_ERR_IMMUTABLE_FIELD,
                 "%s '%s' would modify the immutable field '_id'", format_prefix, dotted);
    bson_free(dotted);
    return false;
}

/* A view of an element wrapped as {UPDATE_PULL_WRAP_FIELD: value} or {identifier: value}, to
 * run a match expression on one array element. */
static bool element_matches(const update_element_t *element, const char *field,
                            const match_expression_t *matcher)
{
    bson_t storage;
    bson_value_t view;
    bson_t wrapped = BSON_INITIALIZER;
    update_element_view(element, &storage, &view);
    bson_append_value(&wrapped, field, -1, &view);
    bool matches = match_document(matcher, &wrapped);
    bson_destroy(&wrapped);
    bson_destroy(&storage);
    return matches;
}

static bool array_filter_matches(const apply_context_t *context, const char *identifier,
                                 const update_element_t *element)
{
    for (size_t i = 0; i < context->spec->filter_count; i++) {
        if (strcmp(context->spec->filters[i].identifier, identifier) == 0) {
            return element_matches(element, identifier, context->spec->filters[i].matcher);
        }
    }
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
    struct timespec now;
    bson_value_t value;
    clock_gettime(CLOCK_REALTIME, &now);
    if (leaf->current_date_timestamp) {
        /* A process-wide counter keeps timestamps taken in the same second distinct. */
        value.value_type = BSON_TYPE_TIMESTAMP;
        value.value.v_timestamp.timestamp = (uint32_t)now.tv_sec;
        value.value.v_timestamp.increment = atomic_fetch_add(&timestamp_increment, 1) + 1;
    } else {
        value.value_type = BSON_TYPE_DATE_TIME;
        value.value.v_datetime = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    }
    return update_element_from_value(name, &value);
}

/* --- the operators --------------------------------------------------------------------- */

/* Changes an existing element; *out_modified false for a no-op. */
static bool update_existing(apply_context_t *context, const update_node_t *leaf,
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
    case UPDATE_OPERATOR_MUL: {
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
    case UPDATE_OPERATOR_BIT: {
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
    case UPDATE_OPERATOR_PUSH: {
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
    case UPDATE_OPERATOR_ADD_TO_SET: {
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
static bool create_path(apply_context_t *context, update_element_t *deepest, size_t resolved,
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
static bool apply_path_creating(apply_context_t *context, const update_node_t *leaf,
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
            log_current_path(context, context->path.count, false);
            return true;
        }
        for (size_t i = context->appended_from; i < element->child_count; i++) {
            char index_text[24];
            snprintf(index_text, sizeof index_text, "%zu", i);
            update_path_push(&context->path, index_text);
            log_current_path(context, context->path.count, false);
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
    if (!create_path(context, element, resolved, value)) {
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
    log_current_path(context, resolved + 1, false);
    return true;
}

static bool apply_unset(apply_context_t *context)
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
        log_current_path(context, context->path.count, false);
    } else {
        update_element_destroy(update_element_detach(element));
        log_current_path(context, context->path.count, true);
    }
    return true;
}

/* $pull and $pop on a missing path are no-ops unless the path could never exist. */
static bool check_viability(apply_context_t *context, const update_element_t *deepest,
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
        return element_matches(member, UPDATE_PULL_WRAP_FIELD, leaf->matcher);
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

static bool apply_pull(apply_context_t *context, const update_node_t *leaf)
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
    log_current_path(context, context->path.count, false);
    return true;
}

static bool apply_pop(apply_context_t *context, const update_node_t *leaf)
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
    log_current_path(context, context->path.count, false);
    return true;
}

static bool array_ancestor_error(apply_context_t *context, const char *which, const char *dotted,
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
static bool apply_rename(apply_context_t *context, const update_node_t *leaf)
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
    log_change(context, update_path_join(source_path->parts, source_path->count), true);
    return true;
}

static bool apply_leaf(apply_context_t *context, const update_node_t *leaf)
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

/* Two updates reaching the same array member must not touch the same path
 * (mongod's UpdateNode::createUpdateNodeByMerging). */
static bool check_merge_conflict(const update_node_t *left, const update_node_t *right,
                                 bson_string_t *path, bson_error_t *error)
{
    if (left->kind == UPDATE_NODE_LEAF || left->kind != right->kind) {
        return tc_error_set(error, TC_ERR_CONFLICTING_UPDATE_OPERATORS,
                            "Update created a conflict at '%s'", path->str);
    }
    for (size_t i = 0; i < left->child_count; i++) {
        const update_node_t *other = update_node_find_child(right, left->children[i]->name);
        if (other == NULL) {
            continue;
        }
        uint32_t length = path->len;
        if (left->kind == UPDATE_NODE_ARRAY) {
            bson_string_append_printf(path, ".$[%s]", left->children[i]->name);
        } else {
            bson_string_append_printf(path, ".%s", left->children[i]->name);
        }
        bool ok = check_merge_conflict(left->children[i], other, path, error);
        bson_string_truncate(path, length);
        if (!ok) {
            return false;
        }
    }
    return true;
}

static bool apply_node(apply_context_t *context, const update_node_t *node);

/* $[] and $[<identifier>]: the children apply to each matching member of the array. */
static bool apply_array_node(apply_context_t *context, const update_node_t *node)
{
    size_t resolved;
    bool ok = false;
    update_element_t *array =
        update_path_resolve(context->root, context->path.parts, context->path.count, &resolved);
    char *dotted = update_path_join(context->path.parts, context->path.count);
    bool *matches = NULL;
    size_t member_count = 0;
    size_t matched_members = 0;
    size_t modified_members = 0;
    size_t last_modified = 0;
    if (resolved < context->path.count) {
        tc_error_set(context->error, TC_ERR_BAD_VALUE,
                     "The path '%s' must exist in the document in order to apply array updates.",
                     dotted);
        goto done;
    }
    if (array->value.value_type != BSON_TYPE_ARRAY) {
        char *described = update_element_describe(array);
        tc_error_set(context->error, TC_ERR_BAD_VALUE,
                     "Cannot apply array updates to non-array element %s", described);
        bson_free(described);
        goto done;
    }
    /* Decide every member's updates before changing any, as mongod does. */
    member_count = array->child_count;
    matches = bson_malloc0((member_count * node->child_count + 1) * sizeof *matches);
    for (size_t member = 0; member < member_count; member++) {
        bool any = false;
        for (size_t c = 0; c < node->child_count; c++) {
            const char *identifier = node->children[c]->name;
            bool match = identifier[0] == '\0' ||
                         array_filter_matches(context, identifier, array->children[member]);
            matches[member * node->child_count + c] = match;
            any = any || match;
        }
        matched_members += any ? 1 : 0;
    }
    if (matched_members > 1) {
        context->log_suppressed++;
    }
    for (size_t member = 0; member < member_count && member < array->child_count; member++) {
        const bool *row = matches + member * node->child_count;
        char index_text[24];
        snprintf(index_text, sizeof index_text, "%zu", member);
        const update_node_t *first = NULL;
        for (size_t c = 0; c < node->child_count; c++) {
            if (!row[c]) {
                continue;
            }
            if (first != NULL) {
                bson_string_t *conflict_path = bson_string_new(dotted);
                bson_string_append_printf(conflict_path, ".%s", index_text);
                bool merged =
                    check_merge_conflict(first, node->children[c], conflict_path, context->error);
                bson_string_free(conflict_path, true);
                if (!merged) {
                    goto unsuppress;
                }
            } else {
                first = node->children[c];
            }
        }
        if (first == NULL) {
            continue;
        }
        bool changed_before = context->changed;
        context->changed = false;
        update_path_push(&context->path, index_text);
        bool applied = true;
        for (size_t c = 0; c < node->child_count && applied; c++) {
            if (row[c]) {
                applied = apply_node(context, node->children[c]);
            }
        }
        update_path_pop(&context->path);
        if (!applied) {
            goto unsuppress;
        }
        if (context->changed) {
            modified_members++;
            last_modified = member;
        }
        context->changed = changed_before || context->changed;
    }
    ok = true;
unsuppress:
    if (matched_members > 1) {
        context->log_suppressed--;
        if (ok && modified_members > 1) {
            log_current_path(context, context->path.count, false);
        } else if (ok && modified_members == 1) {
            char index_text[24];
            snprintf(index_text, sizeof index_text, "%zu", last_modified);
            update_path_push(&context->path, index_text);
            log_current_path(context, context->path.count, false);
            update_path_pop(&context->path);
        }
    }
done:
    bson_free(matches);
    bson_free(dotted);
    return ok;
}

/* The temporary nodes of a merged view (merge_view), freed together. */
typedef struct merged_nodes {
    update_node_t **nodes;
    size_t count;
} merged_nodes_t;

static void merged_nodes_cleanup(merged_nodes_t *merged)
{
    for (size_t i = 0; i < merged->count; i++) {
        bson_free(merged->nodes[i]->children);
        bson_free(merged->nodes[i]);
    }
    bson_free(merged->nodes);
}

/* One tree applying both left's and right's updates (mongod's
 * UpdateNode::createUpdateNodeByMerging), children in field order. check_merge_conflict
 * must have accepted the pair: same-named children are internal nodes of one kind.
 * The view borrows names and leaves; its own nodes are listed in merged. */
static const update_node_t *merge_view(const update_node_t *left, const update_node_t *right,
                                       merged_nodes_t *merged)
{
    update_node_t *node = BSON_ALIGNED_ALLOC0(update_node_t);
    merged->nodes = bson_realloc(merged->nodes, (merged->count + 1) * sizeof *merged->nodes);
    merged->nodes[merged->count++] = node;
    node->kind = left->kind;
    node->name = right->name;
    node->children =
        bson_malloc((left->child_count + right->child_count + 1) * sizeof *node->children);
    size_t l = 0, r = 0;
    while (l < left->child_count || r < right->child_count) {
        int order;
        if (l == left->child_count || r == right->child_count) {
            order = l == left->child_count ? 1 : -1;
        } else {
            order = update_field_order_compare(left->children[l]->name, right->children[r]->name);
        }
        if (order == 0) {
            node->children[node->child_count++] =
                (update_node_t *)merge_view(left->children[l++], right->children[r++], merged);
        } else if (order < 0) {
            node->children[node->child_count++] = left->children[l++];
        } else {
            node->children[node->child_count++] = right->children[r++];
        }
    }
    node->child_capacity = node->child_count;
    return node;
}

/* Applies child at context->path + name. */
static bool apply_child(apply_context_t *context, const update_node_t *child, const char *name)
{
    update_path_push(&context->path, name);
    bool ok = apply_node(context, child);
    update_path_pop(&context->path);
    return ok;
}

/* The positional child "$" applies at the matched index, in field order among its
 * siblings; a sibling of that very name is merged with it (mongod's
 * UpdateObjectNode::apply). */
static bool apply_positional(apply_context_t *context, const update_node_t *positional,
                             const update_node_t *same_name)
{
    const char *matched = context->matched_array_index;
    if (same_name == NULL) {
        return apply_child(context, positional, matched);
    }
    char *taken = update_path_join(context->path.parts, context->path.count);
    bson_string_t *conflict_path = bson_string_new(taken);
    bson_string_append_printf(conflict_path, ".%s", matched);
    bool ok = check_merge_conflict(positional, same_name, conflict_path, context->error);
    bson_string_free(conflict_path, true);
    bson_free(taken);
    if (!ok) {
        return false;
    }
    merged_nodes_t merged = {NULL, 0};
    ok = apply_child(context, merge_view(positional, same_name, &merged), matched);
    merged_nodes_cleanup(&merged);
    return ok;
}

static bool apply_object_node(apply_context_t *context, const update_node_t *node)
{
    const update_node_t *positional = update_node_find_child(node, "$");
    const char *matched = context->matched_array_index;
    if (positional != NULL && matched == NULL) {
        return tc_error_set(context->error, TC_ERR_BAD_VALUE,
                            "The positional operator did not find the match needed from the "
                            "query.");
    }
    const update_node_t *same_name = positional ? update_node_find_child(node, matched) : NULL;
    bool positional_pending = positional != NULL;
    for (size_t i = 0; i < node->child_count; i++) {
        const update_node_t *child = node->children[i];
        if (child == positional || child == same_name) {
            continue;
        }
        if (positional_pending && update_field_order_compare(matched, child->name) < 0) {
            positional_pending = false;
            if (!apply_positional(context, positional, same_name)) {
                return false;
            }
        }
        /* Array-node children are applied by apply_array_node under an index. */
        if (!apply_child(context, child, child->name)) {
            return false;
        }
    }
    return !positional_pending || apply_positional(context, positional, same_name);
}

static bool apply_node(apply_context_t *context, const update_node_t *node)
{
    switch (node->kind) {
    case UPDATE_NODE_LEAF: return apply_leaf(context, node);
    case UPDATE_NODE_ARRAY: return apply_array_node(context, node);
    case UPDATE_NODE_OBJECT:
    default: return apply_object_node(context, node);
    }
}

/* An upsert's new document: _id first, generated when missing; never an array. */
static bool finish_upsert_document(update_element_t *root, bool replacement, bson_error_t *error)
{
    update_element_t *id = update_element_find(root, "_id");
    if (id != NULL && id->value.value_type == BSON_TYPE_ARRAY) {
        return tc_error_set(error, TC_ERR_NOT_SINGLE_VALUE_FIELD,
                            "After applying the update to the document, the %sfield '_id' was "
                            "found to be an array or array descendant.",
                            replacement ? "(immutable) " : "");
    }
    if (id == NULL) {
        bson_value_t value;
        value.value_type = BSON_TYPE_OID;
        bson_oid_init(&value.value.v_oid, NULL);
        update_element_insert(root, 0, update_element_from_value("_id", &value));
    } else if (root->children[0] != id) {
        update_element_detach(id);
        update_element_insert(root, 0, id);
    }
    return true;
}

static void build_description(const apply_context_t *context, bson_t *out)
{
    bson_t updated, removed, truncated;
    uint32_t removed_count = 0;
    bson_init(out);
    bson_append_document_begin(out, "updatedFields", -1, &updated);
    for (size_t i = 0; i < context->log_count; i++) {
        update_path_t path;
        size_t resolved;
        if (context->log[i].removed || !update_path_parse(context->log[i].path, &path, NULL)) {
            continue;
        }
        update_element_t *element =
            update_path_resolve(context->root, path.parts, path.count, &resolved);
        if (resolved == path.count) {
            update_element_append_to_bson(&updated, context->log[i].path, element);
        }
        update_path_cleanup(&path);
    }
    bson_append_document_end(out, &updated);
    bson_append_array_begin(out, "removedFields", -1, &removed);
    for (size_t i = 0; i < context->log_count; i++) {
        if (context->log[i].removed) {
            char index_buffer[16];
            const char *key;
            bson_uint32_to_string(removed_count++, &key, index_buffer, sizeof index_buffer);
            bson_append_utf8(&removed, key, -1, context->log[i].path, -1);
        }
    }
    bson_append_array_end(out, &removed);
    bson_append_array_begin(out, "truncatedArrays", -1, &truncated);
    bson_append_array_end(out, &truncated);
}

/* mongod's ObjectReplaceExecutor::applyReplacementUpdate: replacement takes the
 * place of document's fields, keeping document's _id when it names none. */
static bool apply_replacement(const bson_t *replacement, const bson_t *document,
                              bool is_upsert_insert, bson_t *out_document, bool *out_changed,
                              bson_error_t *error)
{
    bson_iter_t original_id;
    bson_iter_t replacement_id;
    bool has_original_id = bson_iter_init_find(&original_id, document, "_id");
    bool has_replacement_id = bson_iter_init_find(&replacement_id, replacement, "_id");
    update_element_t *root = update_element_new(NULL, BSON_TYPE_DOCUMENT);
    bool ok = false;
    if (has_original_id && has_replacement_id &&
        order_compare_values(bson_iter_value(&original_id), bson_iter_value(&replacement_id)) !=
            0) {
        char *described = update_describe_argument("_id", bson_iter_value(&replacement_id));
        tc_error_set(error, TC_ERR_IMMUTABLE_FIELD,
                     "After applying the update, the (immutable) field '_id' was found to have "
                     "been altered to %s",
                     described);
        bson_free(described);
        goto done;
    }
    if (has_original_id && !has_replacement_id) {
        update_element_append(root,
                              update_element_from_value("_id", bson_iter_value(&original_id)));
    }
    update_element_fill_from_bson(root, bson_get_data(replacement), replacement->len);
    if (is_upsert_insert) {
        TC_CHECK(finish_upsert_document(root, true, error));
    } else {
        update_element_t *id = update_element_find(root, "_id");
        if (id != NULL && id->value.value_type == BSON_TYPE_ARRAY) {
            tc_error_set(error, TC_ERR_NOT_SINGLE_VALUE_FIELD,
                         "After applying the update to the document, the (immutable) field "
                         "'_id' was found to be an array or array descendant.");
            goto done;
        }
    }
    update_element_append_children(out_document, root);
    if (out_changed != NULL) {
        *out_changed = !bson_equal(document, out_document);
    }
    ok = true;
done:
    update_element_destroy(root);
    return ok;
}

/* ------------------------------------------------------------------------------------
 * Applying a pipeline.
 * ---------------------------------------------------------------------------------- */

/* The one input document of a pipeline run, handed out once. */
typedef struct single_source {
    const bson_t *document;
} single_source_t;

static bool single_source_next(void *context, const bson_t **out_document, bson_error_t *error)
{
    single_source_t *source = context;
    (void)error;
    *out_document = source->document;
    source->document = NULL;
    return true;
}

static void append_dotted(bson_string_t *path, const char *prefix, const char *key)
{
    bson_string_truncate(path, 0);
    if (prefix[0] != '\0') {
        bson_string_append_printf(path, "%s.", prefix);
    }
    bson_string_append(path, key);
}

/* Adds to updated/removed what turned before into after, under the dotted prefix:
 * sub-documents on both sides are compared field by field, anything else whole. */
static void describe_difference(const bson_t *before, const bson_t *after, const char *prefix,
                                bson_t *updated, bson_t *removed, uint32_t *removed_count)
{
    bson_iter_t iter, found;
    bson_string_t *path = bson_string_new(NULL);
    bson_iter_init(&iter, after);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        const bson_value_t *value = bson_iter_value(&iter);
        append_dotted(path, prefix, key);
        if (!bson_iter_init_find(&found, before, key)) {
            bson_append_value(updated, path->str, -1, value);
            continue;
        }
        const bson_value_t *old_value = bson_iter_value(&found);
        if (value->value_type == BSON_TYPE_DOCUMENT &&
            old_value->value_type == BSON_TYPE_DOCUMENT) {
            bson_t old_child, new_child;
            bson_init_static(&old_child, old_value->value.v_doc.data,
                             old_value->value.v_doc.data_len);
            bson_init_static(&new_child, value->value.v_doc.data, value->value.v_doc.data_len);
            describe_difference(&old_child, &new_child, path->str, updated, removed,
                                removed_count);
        } else if (!update_values_binary_equal(old_value, value)) {
            bson_append_value(updated, path->str, -1, value);
        }
    }
    bson_iter_init(&iter, before);
    while (bson_iter_next(&iter)) {
        if (!bson_iter_init_find(&found, after, bson_iter_key(&iter))) {
            char index_buffer[16];
            const char *index_key;
            append_dotted(path, prefix, bson_iter_key(&iter));
            bson_uint32_to_string((*removed_count)++, &index_key, index_buffer,
                                  sizeof index_buffer);
            bson_append_utf8(removed, index_key, -1, path->str, -1);
        }
    }
    bson_string_free(path, true);
}

static void build_difference_description(const bson_t *before, const bson_t *after, bson_t *out)
{
    bson_t updated, removed, truncated;
    uint32_t removed_count = 0;
    bson_t removed_list = BSON_INITIALIZER;
    bson_init(out);
    bson_append_document_begin(out, "updatedFields", -1, &updated);
    describe_difference(before, after, "", &updated, &removed_list, &removed_count);
    bson_append_document_end(out, &updated);
    bson_append_array_begin(out, "removedFields", -1, &removed);
    bson_concat(&removed, &removed_list);
    bson_append_array_end(out, &removed);
    bson_append_array_begin(out, "truncatedArrays", -1, &truncated);
    bson_append_array_end(out, &truncated);
    bson_destroy(&removed_list);
}

/* mongod's PipelineExecutor: the pipeline's one output replaces the document. */
static bool apply_pipeline(const update_spec_t *spec, const bson_t *document,
                           bool is_upsert_insert, bson_t *out_document, bson_t *out_description,
                           bool *out_changed, bson_error_t *error)
{
    single_source_t source = {document};
    pipeline_run_t *run = pipeline_start(spec->pipeline, single_source_next, &source);
    bson_t transformed;
    bool end = false;
    bool ok = pipeline_next(run, &transformed, &end, error);
    pipeline_run_destroy(run);
    if (!ok) {
        return false;
    }
    if (end) {
        /* The update stages turn one document into one; nothing out means no change. */
        bson_copy_to(document, &transformed);
    }
    ok = apply_replacement(&transformed, document, is_upsert_insert, out_document, out_changed,
                           error);
    bson_destroy(&transformed);
    if (ok && out_description != NULL) {
        bson_destroy(out_description);
        build_difference_description(document, out_document, out_description);
    }
    return ok;
}

/* ------------------------------------------------------------------------------------
 * The entry points.
 * ---------------------------------------------------------------------------------- */

bool update_apply(const update_spec_t *spec, const bson_t *document, bool is_upsert_insert,
                  bson_t *out_document, bson_t *out_description, bool *out_changed,
                  bson_error_t *error)
{
    update_apply_options_t options = {.is_upsert_insert = is_upsert_insert};
    return update_apply_with_options(spec, document, &options, out_document, out_description,
                                     out_changed, error);
}

bool update_apply_with_options(const update_spec_t *spec, const bson_t *document,
                               const update_apply_options_t *options, bson_t *out_document,
                               bson_t *out_description, bool *out_changed, bson_error_t *error)
{
    apply_context_t context;
    bool ok = false;
    bool is_upsert_insert = options != NULL && options->is_upsert_insert;
    bson_init(out_document);
    if (out_description != NULL) {
        bson_init(out_description);
    }
    if (out_changed != NULL) {
        *out_changed = false;
    }
    if (spec->replacement || spec->pipeline != NULL) {
        ok = spec->pipeline != NULL
                 ? apply_pipeline(spec, document, is_upsert_insert, out_document, out_description,
                                  out_changed, error)
                 : apply_replacement(spec->replacement_document, document, is_upsert_insert,
                                     out_document, out_changed, error);
        if (!ok) {
            bson_reinit(out_document);
            if (out_description != NULL) {
                bson_reinit(out_description);
            }
        }
        return ok;
    }
    memset(&context, 0, sizeof context);
    context.spec = spec;
    context.root = update_element_from_document(document);
    context.is_upsert_insert = is_upsert_insert;
    context.matched_array_index = options != NULL ? options->matched_array_index : NULL;
    context.appended_from = SIZE_MAX;
    context.error = error;
    TC_CHECK(apply_node(&context, spec->root));
    if (is_upsert_insert) {
        TC_CHECK(finish_upsert_document(context.root, false, error));
        context.changed = true;
    }
    update_element_append_children(out_document, context.root);
    if (out_description != NULL) {
        bson_destroy(out_description);
        build_description(&context, out_description);
    }
    if (out_changed != NULL) {
        *out_changed = context.changed;
    }
    ok = true;
done:
    if (!ok) {
        bson_reinit(out_document);
    }
    for (size_t i = 0; i < context.log_count; i++) {
        bson_free(context.log[i].path);
    }
    bson_free(context.log);
    update_path_cleanup(&context.path);
    update_element_destroy(context.root);
    return ok;
}

/* ------------------------------------------------------------------------------------
 * The seed document of an upsert.
 * ---------------------------------------------------------------------------------- */

typedef struct equality {
    char *path;
    bson_value_t value; /* a shallow copy: strings and documents point into the filter */
} equality_t;

typedef struct equality_list {
    equality_t *items;
    size_t count;
    size_t capacity;
} equality_list_t;

static bool add_equality(equality_list_t *list, const char *path, const bson_value_t *value,
                         bool only_id, bson_error_t *error)
{
    if (only_id) {
        if (strcmp(path, "_id") != 0) {
            if (path_string_is_prefix("_id", path)) {
                return tc_error_set(error, TC_ERR_NOT_EXACT_VALUE_FIELD,
                                    "field at '_id' must be exactly specified, field at sub-path "
                                    "'%s'found",
                                    path);
            }
            return true;
        }
    }
    for (size_t i = 0; i < list->count; i++) {
        const char *existing = list->items[i].path;
        if (strcmp(existing, path) == 0) {
            return tc_error_set(error, TC_ERR_NOT_SINGLE_VALUE_FIELD,
                                "cannot infer query fields to set, path '%s' is matched twice",
                                path);
        }
        if (path_string_is_prefix(existing, path) || path_string_is_prefix(path, existing)) {
            bool existing_shorter = strlen(existing) < strlen(path);
            return tc_error_set(error, TC_ERR_NOT_SINGLE_VALUE_FIELD,
                                "cannot infer query fields to set, both paths '%s' and '%s' are "
                                "matched",
                                existing_shorter ? path : existing,
                                existing_shorter ? existing : path);
        }
    }
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? list->capacity * 2 : 8;
        list->items = bson_realloc(list->items, list->capacity * sizeof *list->items);
    }
    list->items[list->count].path = bson_strdup(path);
    list->items[list->count].value = *value;
    list->count++;
    return true;
}

/* The equality conditions of a filter, as mongod's extractEqualityMatches finds them
 * in the canonicalised query (one-element $in and one-branch $or become equalities). */
static bool collect_equalities(const bson_t *filter, equality_list_t *list, bool only_id,
                               bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, filter)) {
        return true;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (key[0] == '$') {
            bson_iter_t branches;
            bool is_and = strcmp(key, "$and") == 0;
            bool is_single_or = strcmp(key, "$or") == 0 && BSON_ITER_HOLDS_ARRAY(&iter) &&
                                bson_iter_recurse(&iter, &branches) && bson_iter_next(&branches) &&
                                !bson_iter_next(&branches);
            if ((!is_and && !is_single_or) || !BSON_ITER_HOLDS_ARRAY(&iter)) {
                continue;
            }
            bson_iter_recurse(&iter, &branches);
            while (bson_iter_next(&branches)) {
                bson_t branch;
                const uint8_t *data;
                uint32_t length;
                if (!BSON_ITER_HOLDS_DOCUMENT(&branches)) {
                    continue;
                }
                bson_iter_document(&branches, &length, &data);
                if (bson_init_static(&branch, data, length) &&
                    !collect_equalities(&branch, list, only_id, error)) {
                    return false;
                }
            }
            continue;
        }
        bson_iter_t operators;
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &operators) &&
            bson_iter_next(&operators) && bson_iter_key(&operators)[0] == '$') {
            do {
                const char *op = bson_iter_key(&operators);
                bson_iter_t members;
                if (strcmp(op, "$eq") == 0) {
                    if (!add_equality(list, key, bson_iter_value(&operators), only_id, error)) {
                        return false;
                    }
                } else if (strcmp(op, "$in") == 0 && BSON_ITER_HOLDS_ARRAY(&operators) &&
                           bson_iter_recurse(&operators, &members) && bson_iter_next(&members)) {
                    const bson_value_t *single = bson_iter_value(&members);
                    bson_iter_t after = members;
                    if (!bson_iter_next(&after) && single->value_type != BSON_TYPE_REGEX &&
                        !add_equality(list, key, single, only_id, error)) {
                        return false;
                    }
                }
            } while (bson_iter_next(&operators));
            continue;
        }
        if (BSON_ITER_HOLDS_REGEX(&iter)) {
            continue;
        }
        if (!add_equality(list, key, bson_iter_value(&iter), only_id, error)) {
            return false;
        }
    }
    return true;
}

static int equality_compare(const void *left, const void *right)
{
    return strcmp(((const equality_t *)left)->path, ((const equality_t *)right)->path);
}

bool update_build_upsert_seed(const update_spec_t *spec, const bson_t *filter, bson_t *out_document,
                              bson_error_t *error)
{
    equality_list_t list = {0};
    apply_context_t context;
    bool ok = false;
    bson_init(out_document);
    memset(&context, 0, sizeof context);
    context.root = update_element_new(NULL, BSON_TYPE_DOCUMENT);
    context.error = error;
    TC_CHECK(collect_equalities(filter, &list, spec != NULL && spec->replacement, error));
    if (list.count > 1) {
        qsort(list.items, list.count, sizeof *list.items, equality_compare);
    }
    for (size_t i = 0; i < list.count; i++) {
        update_path_t path;
        size_t resolved;
        TC_CHECK(update_path_parse(list.items[i].path, &path, error));
        context.path = path;
        update_element_t *deepest =
            update_path_resolve(context.root, path.parts, path.count, &resolved);
        bool created = resolved == path.count ||
                       create_path(&context, deepest, resolved,
                                   update_element_from_value(NULL, &list.items[i].value));
        update_path_cleanup(&context.path);
        TC_CHECK(created);
    }
    update_element_append_children(out_document, context.root);
    ok = true;
done:
    if (!ok) {
        bson_reinit(out_document);
    }
    for (size_t i = 0; i < list.count; i++) {
        bson_free(list.items[i].path);
    }
    bson_free(list.items);
    update_element_destroy(context.root);
    return ok;
}
