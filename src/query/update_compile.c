/* Compiling an update: checks every operator's argument as mongod does and merges
 * the paths into one tree (mongod's UpdateObjectNode::parseAndMerge), children in
 * the order fields are visited; arrayFilters are compiled with the matcher. */
#include "query/aggregation_value.h"
#include "query/value_format.h"
#include "query/update_private.h"

#include "query/order.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * The compiled update: a tree of nodes.
 * ---------------------------------------------------------------------------------- */

static void node_destroy(update_node_t *node)
{
    if (node == NULL) {
        return;
    }
    for (size_t i = 0; i < node->child_count; i++) {
        node_destroy(node->children[i]);
    }
    bson_free(node->children);
    bson_free(node->name);
    bson_free(node->path);
    if (node->argument.value_type != BSON_TYPE_EOD) {
        bson_value_destroy(&node->argument);
    }
    bson_destroy(node->values);
    bson_destroy(node->sort_pattern);
    match_destroy(node->matcher);
    update_path_cleanup(&node->source);
    bson_free(node);
}

static update_node_t *node_new(update_node_kind_t kind, const char *name)
{
    update_node_t *node = BSON_ALIGNED_ALLOC0(update_node_t);
    node->kind = kind;
    node->name = bson_strdup(name);
    return node;
}

update_node_t *update_node_find_child(const update_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->child_count; i++) {
        if (strcmp(node->children[i]->name, name) == 0) {
            return node->children[i];
        }
    }
    return NULL;
}

static void node_add_child(update_node_t *node, update_node_t *child)
{
    size_t index = 0;
    while (index < node->child_count &&
           update_field_order_compare(node->children[index]->name, child->name) < 0) {
        index++;
    }
    if (node->child_count == node->child_capacity) {
        node->child_capacity = node->child_capacity ? node->child_capacity * 2 : 4;
        node->children =
            bson_realloc(node->children, node->child_capacity * sizeof *node->children);
    }
    memmove(node->children + index + 1, node->children + index,
            (node->child_count - index) * sizeof *node->children);
    node->children[index] = child;
    node->child_count++;
}

/* "name: value" for an update argument, as mongod quotes it in parse errors. */
char *update_describe_argument(const char *name, const bson_value_t *value)
{
    bson_string_t *out = bson_string_new(name);
    bson_string_append(out, ": ");
    update_format_value(out, value);
    return bson_string_free(out, false);
}

/* MatchExpressionParser::parseIntegerElementToLong. */
static bool parse_integer_argument(const char *name, const bson_value_t *value, int64_t *out,
                                   bson_error_t *error)
{
    char *described = update_describe_argument(name, value);
    bool ok = false;
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        *out = value->value.v_int32;
        ok = true;
        break;
    case BSON_TYPE_INT64:
        *out = value->value.v_int64;
        ok = true;
        break;
    case BSON_TYPE_DOUBLE: {
        double number = value->value.v_double;
        if (isnan(number)) {
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Expected an integer, but found NaN in: %s",
                         described);
        } else if (number >= 9223372036854775808.0 || number < -9223372036854775808.0) {
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Cannot represent as a 64-bit integer: %s",
                         described);
        } else if (number != (double)(int64_t)number) {
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Expected an integer: %s", described);
        } else {
            *out = (int64_t)number;
            ok = true;
        }
        break;
    }
    default:
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Expected a number in: %s", described);
        break;
    }
    bson_free(described);
    return ok;
}

bool update_is_number_type(bson_type_t type)
{
    return type == BSON_TYPE_INT32 || type == BSON_TYPE_INT64 || type == BSON_TYPE_DOUBLE ||
           type == BSON_TYPE_DECIMAL128;
}

/* The match operators that take a path ({$gt: 1}); a $pull condition starting with
 * one of them is a condition on each element rather than a query on documents. */
static bool is_path_accepting_keyword(const char *name)
{
    static const char *const keywords[] = {"$eq",
                                           "$ne",
                                           "$gt",
                                           "$gte",
                                           "$lt",
                                           "$lte",
                                           "$in",
                                           "$nin",
                                           "$exists",
                                           "$type",
                                           "$mod",
                                           "$regex",
                                           "$options",
                                           "$all",
                                           "$size",
                                           "$elemMatch",
                                           "$not",
                                           "$within",
                                           "$geoWithin",
                                           "$geoIntersects",
                                           "$near",
                                           "$nearSphere",
                                           "$bitsAllSet",
                                           "$bitsAllClear",
                                           "$bitsAnySet",
                                           "$bitsAnyClear",
                                           "$_internalSchemaType"};
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++) {
        if (strcmp(name, keywords[i]) == 0) {
            return true;
        }
    }
    return false;
}

static bool check_sort_pattern(const bson_t *pattern, bson_error_t *error)
{
    bson_iter_t iter;
    if (bson_empty(pattern)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "The $sort pattern is empty when it should be a set of fields.");
    }
    bson_iter_init(&iter, pattern);
    while (bson_iter_next(&iter)) {
        double direction = BSON_ITER_HOLDS_NUMBER(&iter) ? bson_iter_as_double(&iter) : 0;
        const char *field = bson_iter_key(&iter);
        if (direction != 1 && direction != -1) {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "The $sort element value must be either 1 or -1");
        }
        if (field[0] == '\0') {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "The $sort field cannot be empty");
        }
        size_t length = strlen(field);
        if (field[0] == '.' || field[length - 1] == '.' || strstr(field, "..") != NULL) {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "The $sort field is a dotted field but has an empty part: %s",
                                field);
        }
    }
    return true;
}

static bson_t *copy_array_value(const bson_value_t *value)
{
    return bson_new_from_data(value->value.v_doc.data, value->value.v_doc.data_len);
}

static bool init_push(update_node_t *leaf, bson_error_t *error)
{
    bson_t argument;
    bson_iter_t iter;
    bool has_each = false;
    leaf->position = INT64_MAX;
    leaf->slice = INT64_MAX;
    if (leaf->argument.value_type == BSON_TYPE_DOCUMENT) {
        bson_init_static(&argument, leaf->argument.value.v_doc.data,
                         leaf->argument.value.v_doc.data_len);
        has_each = bson_iter_init_find(&iter, &argument, "$each");
    }
    if (!has_each) {
        bson_t *values = bson_new();
        bson_append_value(values, "0", 1, &leaf->argument);
        leaf->values = values;
        return true;
    }
    bool seen_each = false, seen_slice = false, seen_sort = false, seen_position = false;
    bson_iter_init(&iter, &argument);
    while (bson_iter_next(&iter)) {
        const char *clause = bson_iter_key(&iter);
        const bson_value_t *value = bson_iter_value(&iter);
        bool *seen = strcmp(clause, "$each") == 0       ? &seen_each
                     : strcmp(clause, "$slice") == 0    ? &seen_slice
                     : strcmp(clause, "$sort") == 0     ? &seen_sort
                     : strcmp(clause, "$position") == 0 ? &seen_position
                                                        : NULL;
        if (seen == NULL) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Unrecognized clause in $push: %s",
                                clause);
        }
        if (*seen) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Only one %s is supported.", clause);
        }
        *seen = true;
        if (seen == &seen_each) {
            if (value->value_type != BSON_TYPE_ARRAY) {
                return tc_error_set(error, TC_ERR_BAD_VALUE,
                                    "The argument to $each in $push must be an array but it was "
                                    "of type: %s",
                                    value_type_name(value->value_type));
            }
            leaf->values = copy_array_value(value);
        } else if (seen == &seen_slice) {
            if (!parse_integer_argument(clause, value, &leaf->slice, NULL)) {
                return tc_error_set(error, TC_ERR_BAD_VALUE,
                                    "The value for $slice must be an integer value but was given "
                                    "type: %s",
                                    value_type_name(value->value_type));
            }
        } else if (seen == &seen_position) {
            if (!parse_integer_argument(clause, value, &leaf->position, NULL)) {
                return tc_error_set(error, TC_ERR_BAD_VALUE,
                                    "The value for $position must be an integer value, not of "
                                    "type: %s",
                                    value_type_name(value->value_type));
            }
        } else if (value->value_type == BSON_TYPE_DOCUMENT) {
            leaf->sort_pattern =
                bson_new_from_data(value->value.v_doc.data, value->value.v_doc.data_len);
            if (!check_sort_pattern(leaf->sort_pattern, error)) {
                return false;
            }
            leaf->has_sort = true;
        } else if (update_is_number_type(value->value_type)) {
            bson_iter_t number_iter = iter;
            double direction = bson_iter_as_double(&number_iter);
            if (direction != 1 && direction != -1) {
                return tc_error_set(error, TC_ERR_BAD_VALUE,
                                    "The $sort element value must be either 1 or -1");
            }
            leaf->has_sort = true;
            leaf->sort_whole_value = true;
            leaf->sort_direction = direction > 0 ? 1 : -1;
        } else {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "The $sort is invalid: use 1/-1 to sort the whole element, or "
                                "{field:1/-1} to sort embedded fields");
        }
    }
    return true;
}

/* Appends value to values (an array document) unless an equal one is already there. */
static void append_unique(bson_t *values, const bson_value_t *value)
{
    bson_iter_t iter;
    uint32_t count = 0;
    char index_buffer[16];
    const char *key;
    bson_iter_init(&iter, values);
    while (bson_iter_next(&iter)) {
        if (order_compare_values(bson_iter_value(&iter), value) == 0) {
            return;
        }
        count++;
    }
    bson_uint32_to_string(count, &key, index_buffer, sizeof index_buffer);
    bson_append_value(values, key, -1, value);
}

static bool init_add_to_set(update_node_t *leaf, bson_error_t *error)
{
    bson_t argument;
    bson_iter_t iter;
    leaf->values = bson_new();
    if (leaf->argument.value_type == BSON_TYPE_DOCUMENT) {
        bson_init_static(&argument, leaf->argument.value.v_doc.data,
                         leaf->argument.value.v_doc.data_len);
        if (bson_iter_init(&iter, &argument) && bson_iter_next(&iter) &&
            strcmp(bson_iter_key(&iter), "$each") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "The argument to $each in $addToSet must be an array but it "
                                    "was of type %s",
                                    value_type_name(bson_iter_type(&iter)));
            }
            if (bson_count_keys(&argument) > 1) {
                bson_string_t *text = bson_string_new(NULL);
                update_format_value(text, &leaf->argument);
                tc_error_set(error, TC_ERR_BAD_VALUE,
                             "Found unexpected fields after $each in $addToSet: %s", text->str);
                bson_string_free(text, true);
                return false;
            }
            bson_iter_t each;
            bson_iter_recurse(&iter, &each);
            while (bson_iter_next(&each)) {
                append_unique(leaf->values, bson_iter_value(&each));
            }
            return true;
        }
    }
    append_unique(leaf->values, &leaf->argument);
    return true;
}

static bool init_pull(update_node_t *leaf, bson_error_t *error)
{
    bson_t argument;
    bson_iter_t iter;
    if (leaf->argument.value_type == BSON_TYPE_DOCUMENT) {
        bson_init_static(&argument, leaf->argument.value.v_doc.data,
                         leaf->argument.value.v_doc.data_len);
        bool first_is_keyword = bson_iter_init(&iter, &argument) && bson_iter_next(&iter) &&
                                is_path_accepting_keyword(bson_iter_key(&iter));
        if (!first_is_keyword) {
            leaf->pull_kind = UPDATE_PULL_OBJECT_QUERY;
            leaf->matcher = match_compile_without_special_features(&argument, error);
            return leaf->matcher != NULL;
        }
    }
    if (leaf->argument.value_type == BSON_TYPE_DOCUMENT ||
        leaf->argument.value_type == BSON_TYPE_REGEX) {
        bson_t wrapped = BSON_INITIALIZER;
        bson_append_value(&wrapped, UPDATE_PULL_WRAP_FIELD, -1, &leaf->argument);
        leaf->pull_kind = UPDATE_PULL_WRAPPED_QUERY;
        leaf->matcher = match_compile_without_special_features(&wrapped, error);
        bson_destroy(&wrapped);
        return leaf->matcher != NULL;
    }
    leaf->pull_kind = UPDATE_PULL_EQUALITY;
    return true;
}

static bool init_current_date(update_node_t *leaf, bson_error_t *error)
{
    bson_t argument;
    bson_iter_t iter;
    if (leaf->argument.value_type == BSON_TYPE_BOOL) {
        return true;
    }
    if (leaf->argument.value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "%s is not valid type for $currentDate. Please use a boolean ('true') "
                            "or a $type expression ({$type: 'timestamp/date'}).",
                            value_type_name(leaf->argument.value_type));
    }
    bool found_valid_type = false;
    bson_init_static(&argument, leaf->argument.value.v_doc.data,
                     leaf->argument.value.v_doc.data_len);
    bson_iter_init(&iter, &argument);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "$type") != 0) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Unrecognized $currentDate option: %s",
                                bson_iter_key(&iter));
        }
        if (BSON_ITER_HOLDS_UTF8(&iter)) {
            const char *type = bson_iter_utf8(&iter, NULL);
            if (strcmp(type, "date") == 0) {
                leaf->current_date_timestamp = false;
                found_valid_type = true;
            } else if (strcmp(type, "timestamp") == 0) {
                leaf->current_date_timestamp = true;
                found_valid_type = true;
            }
        }
    }
    if (!found_valid_type) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "The '$type' string field is required to be 'date' or 'timestamp': "
                            "{$currentDate: {field : {$type: 'date'}}}");
    }
    return true;
}

static bool init_bit(update_node_t *leaf, bson_error_t *error)
{
    bson_t argument;
    bson_iter_t iter;
    if (leaf->argument.value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "The $bit modifier is not compatible with a %s. You must pass in an "
                            "embedded document: {$bit: {field: {and/or/xor: #}}",
                            value_type_name(leaf->argument.value_type));
    }
    bson_init_static(&argument, leaf->argument.value.v_doc.data,
                     leaf->argument.value.v_doc.data_len);
    bson_iter_init(&iter, &argument);
    while (bson_iter_next(&iter)) {
        const char *name = bson_iter_key(&iter);
        char *described = update_describe_argument(name, bson_iter_value(&iter));
        bool known =
            strcmp(name, "and") == 0 || strcmp(name, "or") == 0 || strcmp(name, "xor") == 0;
        bool integral = BSON_ITER_HOLDS_INT32(&iter) || BSON_ITER_HOLDS_INT64(&iter);
        if (!known) {
            tc_error_set(error, TC_ERR_BAD_VALUE,
                         "The $bit modifier only supports 'and', 'or', and 'xor', not '%s' which "
                         "is an unknown operator: {%s}",
                         name, described);
        } else if (!integral) {
            tc_error_set(error, TC_ERR_BAD_VALUE,
                         "The $bit modifier field must be an Integer(32/64 bit); a '%s' is not "
                         "supported here: {%s}",
                         value_type_name(bson_iter_type(&iter)), described);
        }
        bson_free(described);
        if (!known || !integral) {
            return false;
        }
    }
    if (bson_empty(&argument)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "You must pass in at least one bitwise operation. The format is: "
                            "{$bit: {field: {and/or/xor: #}}");
    }
    return true;
}

static bool path_has_dynamic_part(const update_path_t *path)
{
    for (size_t i = 0; i < path->count; i++) {
        if (strcmp(path->parts[i], "$") == 0 || update_is_array_filter_part(path->parts[i])) {
            return true;
        }
    }
    return false;
}

static bool path_is_prefix(const update_path_t *prefix, const update_path_t *path)
{
    if (prefix->count > path->count) {
        return false;
    }
    for (size_t i = 0; i < prefix->count; i++) {
        if (strcmp(prefix->parts[i], path->parts[i]) != 0) {
            return false;
        }
    }
    return true;
}

static bool init_rename(update_node_t *leaf, const char *source_path,
                        const update_path_t *destination, bson_error_t *error)
{
    char *described = update_describe_argument(source_path, &leaf->argument);
    bool ok = false;
    if (!update_path_parse(source_path, &leaf->source, error)) {
        goto done;
    }
    if (path_is_prefix(&leaf->source, destination) && leaf->source.count == destination->count) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "The source and target field for $rename must differ: %s", described);
        goto done;
    }
    if (path_is_prefix(&leaf->source, destination) || path_is_prefix(destination, &leaf->source)) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "The source and target field for $rename must not be on the same path: %s",
                     described);
        goto done;
    }
    if (path_has_dynamic_part(&leaf->source)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "The source field for $rename may not be dynamic: %s",
                     source_path);
        goto done;
    }
    if (path_has_dynamic_part(destination)) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "The destination field for $rename may not be dynamic: %s", leaf->path);
        goto done;
    }
    ok = true;
done:
    bson_free(described);
    return ok;
}

/* Checks and digests the operator's argument (mongod's UpdateLeafNode::init). */
static bool leaf_init(update_node_t *leaf, const char *field_name, const char *rename_source,
                      const update_path_t *path, bson_error_t *error)
{
    switch (leaf->op) {
    case UPDATE_OPERATOR_INC:
    case UPDATE_OPERATOR_MUL:
        if (!update_is_number_type(leaf->argument.value_type)) {
            char *described = update_describe_argument(field_name, &leaf->argument);
            tc_error_set(error, TC_ERR_TYPE_MISMATCH, "Cannot %s with non-numeric argument: {%s}",
                         leaf->op == UPDATE_OPERATOR_INC ? "increment" : "multiply", described);
            bson_free(described);
            return false;
        }
        return true;
    case UPDATE_OPERATOR_PUSH: return init_push(leaf, error);
    case UPDATE_OPERATOR_ADD_TO_SET: return init_add_to_set(leaf, error);
    case UPDATE_OPERATOR_PULL: return init_pull(leaf, error);
    case UPDATE_OPERATOR_PULL_ALL:
        if (leaf->argument.value_type != BSON_TYPE_ARRAY) {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "$pullAll requires an array argument but was given a %s",
                                value_type_name(leaf->argument.value_type));
        }
        leaf->values = copy_array_value(&leaf->argument);
        return true;
    case UPDATE_OPERATOR_POP: {
        int64_t direction;
        if (!parse_integer_argument(field_name, &leaf->argument, &direction, error)) {
            return false;
        }
        if (direction != 1 && direction != -1) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "$pop expects 1 or -1, found: %lld",
                                (long long)direction);
        }
        leaf->pop_front = direction == -1;
        return true;
    }
    case UPDATE_OPERATOR_CURRENT_DATE: return init_current_date(leaf, error);
    case UPDATE_OPERATOR_BIT: return init_bit(leaf, error);
    case UPDATE_OPERATOR_RENAME: return init_rename(leaf, rename_source, path, error);
    default: return true;
    }
}

static bool add_conflict_error(const update_path_t *path, size_t prefix_count, bson_error_t *error)
{
    char *full = update_path_join(path->parts, path->count);
    char *prefix = update_path_join(path->parts, prefix_count);
    tc_error_set(error, TC_ERR_CONFLICTING_UPDATE_OPERATORS,
                 "Updating the path '%s' would create a conflict at '%s'", full, prefix);
    bson_free(full);
    bson_free(prefix);
    return false;
}

/* The child name for path part i: the identifier of $[<id>] (checked against the
 * array filters), the part itself otherwise. Caller frees. */
static char *child_name_for_part(update_spec_t *spec, const update_path_t *path, size_t i,
                                 bson_error_t *error)
{
    const char *part = path->parts[i];
    if (!update_is_array_filter_part(part)) {
        return bson_strdup(part);
    }
    char *dotted = update_path_join(path->parts, path->count);
    char *identifier = NULL;
    if (i == 0) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "Cannot have array filter identifier (i.e. '$[<id>]') element in the first "
                     "position in path '%s'",
                     dotted);
        goto done;
    }
    identifier = bson_strndup(part + 2, strlen(part) - 3);
    if (identifier[0] != '\0') {
        update_array_filter_t *filter = NULL;
        for (size_t f = 0; f < spec->filter_count; f++) {
            if (strcmp(spec->filters[f].identifier, identifier) == 0) {
                filter = &spec->filters[f];
            }
        }
        if (filter == NULL) {
            tc_error_set(error, TC_ERR_BAD_VALUE,
                         "No array filter found for identifier '%s' in path '%s'", identifier,
                         dotted);
            bson_free(identifier);
            identifier = NULL;
            goto done;
        }
        filter->used = true;
    }
done:
    bson_free(dotted);
    return identifier;
}

/* Adds one operator at one path to the tree (mongod's UpdateObjectNode::parseAndMerge). */
static bool merge_path(update_spec_t *spec, update_operator_kind_t op, const char *dotted,
                       const bson_value_t *argument, const char *rename_source, bson_error_t *error)
{
    update_path_t path;
    update_node_t *leaf = NULL;
    char *name = NULL;
    bool ok = false;
    if (!update_path_parse(dotted, &path, error)) {
        return false;
    }
    /* At most one positional '$', never first (mongod's fieldchecker::isPositional). */
    size_t positional_count = 0, positional_index = 0;
    for (size_t i = 0; i < path.count; i++) {
        if (strcmp(path.parts[i], "$") == 0) {
            positional_index = positional_count == 0 ? i : positional_index;
            positional_count++;
        }
    }
    if (positional_count > 1) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "Too many positional (i.e. '$') elements found in path '%s'", dotted);
        goto done;
    }
    if (positional_count == 1 && positional_index == 0) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "Cannot have positional (i.e. '$') element in the first position in path "
                     "'%s'",
                     dotted);
        goto done;
    }
    spec->positional = spec->positional || positional_count > 0;
    leaf = node_new(UPDATE_NODE_LEAF, "");
    leaf->op = op;
    leaf->path = bson_strdup(dotted);
    if (argument != NULL) {
        bson_value_copy(argument, &leaf->argument);
    }
    TC_CHECK(leaf_init(leaf, dotted, rename_source, &path, error));

    update_node_t *current = spec->root;
    for (size_t i = 0; i + 1 < path.count; i++) {
        name = child_name_for_part(spec, &path, i, error);
        TC_CHECK(name != NULL);
        update_node_t *child = update_node_find_child(current, name);
        update_node_kind_t wanted =
            update_is_array_filter_part(path.parts[i + 1]) ? UPDATE_NODE_ARRAY : UPDATE_NODE_OBJECT;
        if (child == NULL) {
            child = node_new(wanted, name);
            node_add_child(current, child);
        } else if (child->kind != wanted) {
            add_conflict_error(&path, i + 1, error);
            goto done;
        }
        bson_free(name);
        name = NULL;
        current = child;
    }
    name = child_name_for_part(spec, &path, path.count - 1, error);
    TC_CHECK(name != NULL);
    if (update_node_find_child(current, name) != NULL) {
        add_conflict_error(&path, path.count, error);
        goto done;
    }
    bson_free(leaf->name);
    leaf->name = name;
    name = NULL;
    node_add_child(current, leaf);
    leaf = NULL;
    ok = true;
done:
    bson_free(name);
    node_destroy(leaf);
    update_path_cleanup(&path);
    return ok;
}

static const struct {
    const char *name;
    update_operator_kind_t op;
} modifiers[] = {
    {"$set", UPDATE_OPERATOR_SET},     {"$setOnInsert", UPDATE_OPERATOR_SET_ON_INSERT},
    {"$unset", UPDATE_OPERATOR_UNSET}, {"$inc", UPDATE_OPERATOR_INC},
    {"$mul", UPDATE_OPERATOR_MUL},     {"$min", UPDATE_OPERATOR_MIN},
    {"$max", UPDATE_OPERATOR_MAX},     {"$rename", UPDATE_OPERATOR_RENAME},
    {"$push", UPDATE_OPERATOR_PUSH},   {"$addToSet", UPDATE_OPERATOR_ADD_TO_SET},
    {"$pull", UPDATE_OPERATOR_PULL},   {"$pullAll", UPDATE_OPERATOR_PULL_ALL},
    {"$pop", UPDATE_OPERATOR_POP},     {"$currentDate", UPDATE_OPERATOR_CURRENT_DATE},
    {"$bit", UPDATE_OPERATOR_BIT},
};

static bool compile_modifier(update_spec_t *spec, bson_iter_t *modifier, bson_error_t *error)
{
    const char *modifier_name = bson_iter_key(modifier);
    update_operator_kind_t op = UPDATE_OPERATOR_SET;
    bool known = false;
    bson_iter_t fields;
    for (size_t i = 0; i < sizeof modifiers / sizeof modifiers[0]; i++) {
        if (strcmp(modifiers[i].name, modifier_name) == 0) {
            op = modifiers[i].op;
            known = true;
        }
    }
    if (!known) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "Unknown modifier: %s. Expected a valid update modifier or "
                            "pipeline-style update specified as an array",
                            modifier_name);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(modifier)) {
        char *described = update_describe_argument(modifier_name, bson_iter_value(modifier));
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                     "Modifiers operate on fields but we found type %s instead. For example: "
                     "{$mod: {<field>: ...}} not {%s}",
                     value_type_name(bson_iter_type(modifier)), described);
        bson_free(described);
        return false;
    }
    bson_iter_recurse(modifier, &fields);
    while (bson_iter_next(&fields)) {
        const char *field = bson_iter_key(&fields);
        const bson_value_t *argument = bson_iter_value(&fields);
        if (op != UPDATE_OPERATOR_RENAME) {
            if (!merge_path(spec, op, field, argument, NULL, error)) {
                return false;
            }
            continue;
        }
        if (!merge_path(spec, UPDATE_OPERATOR_RENAME_SOURCE, field, argument, NULL, error)) {
            return false;
        }
        if (argument->value_type != BSON_TYPE_UTF8) {
            char *described = update_describe_argument(field, argument);
            tc_error_set(error, TC_ERR_BAD_VALUE, "The 'to' field for $rename must be a string: %s",
                         described);
            bson_free(described);
            return false;
        }
        if (memchr(argument->value.v_utf8.str, '\0', argument->value.v_utf8.len) != NULL) {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "The 'to' field for $rename cannot contain an embedded null byte");
        }
        if (!aggregation_value_is_field_name(argument)) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "The 'to' field for $rename must be UTF-8");
        }
        if (!merge_path(spec, UPDATE_OPERATOR_RENAME, argument->value.v_utf8.str, argument, field,
                        error)) {
            return false;
        }
    }
    return true;
}

/* The identifier an array filter is about: the first component of every path in it,
 * looking through $and, $or and $nor. Returns false with error for zero or several. */
static bool filter_identifier(const bson_t *filter, char **identifier, bson_error_t *error)
{
    bson_iter_t iter;
    bson_iter_init(&iter, filter);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (key[0] == '$') {
            bool logical =
                strcmp(key, "$and") == 0 || strcmp(key, "$or") == 0 || strcmp(key, "$nor") == 0;
            bson_iter_t branches;
            if (!logical || !BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &branches)) {
                continue;
            }
            while (bson_iter_next(&branches)) {
                bson_t branch;
                const uint8_t *data;
                uint32_t length;
                if (!BSON_ITER_HOLDS_DOCUMENT(&branches)) {
                    continue;
                }
                bson_iter_document(&branches, &length, &data);
                if (bson_init_static(&branch, data, length) &&
                    !filter_identifier(&branch, identifier, error)) {
                    return false;
                }
            }
            continue;
        }
        const char *dot = strchr(key, '.');
        size_t length = dot ? (size_t)(dot - key) : strlen(key);
        if (*identifier == NULL) {
            *identifier = bson_strndup(key, length);
        } else if (strlen(*identifier) != length || strncmp(*identifier, key, length) != 0) {
            char *other = bson_strndup(key, length);
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                         "Error parsing array filter :: caused by :: Expected a single top-level "
                         "field name, found '%s' and '%s'",
                         *identifier, other);
            bson_free(other);
            return false;
        }
    }
    return true;
}

static bool compile_array_filters(update_spec_t *spec, const bson_t *array_filters,
                                  bson_error_t *error)
{
    bson_iter_t iter;
    uint32_t count = bson_count_keys(array_filters);
    spec->filters = bson_malloc0((count ? count : 1) * sizeof *spec->filters);
    bson_iter_init(&iter, array_filters);
    while (bson_iter_next(&iter)) {
        bson_t filter;
        const uint8_t *data;
        uint32_t length;
        char *identifier = NULL;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "BSON field 'arrayFilters.%s' is the wrong type '%s', expected "
                                "type 'object'",
                                bson_iter_key(&iter), value_type_name(bson_iter_type(&iter)));
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&filter, data, length);
        match_expression_t *matcher = match_compile_without_special_features(&filter, error);
        if (matcher == NULL) {
            char reason[sizeof error->message];
            bson_strncpy(reason, error->message, sizeof reason);
            return tc_error_set(error, (int32_t)error->code,
                                "Error parsing array filter :: caused by :: %s", reason);
        }
        if (!filter_identifier(&filter, &identifier, error)) {
            match_destroy(matcher);
            bson_free(identifier);
            return false;
        }
        bool valid = identifier != NULL && identifier[0] >= 'a' && identifier[0] <= 'z';
        for (const char *c = identifier ? identifier : ""; *c && valid; c++) {
            valid =
                (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
        }
        bool duplicate = false;
        for (size_t i = 0; identifier && i < spec->filter_count; i++) {
            duplicate = duplicate || strcmp(spec->filters[i].identifier, identifier) == 0;
        }
        if (identifier == NULL) {
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                         "Cannot use an expression without a top-level field name in "
                         "arrayFilters");
        } else if (!valid) {
            tc_error_set(error, TC_ERR_BAD_VALUE,
                         "Error parsing array filter :: caused by :: The top-level field name "
                         "must be an alphanumeric string beginning with a lowercase letter, found "
                         "'%s'",
                         identifier);
        } else if (duplicate) {
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                         "Found multiple array filters with the same top-level field name %s",
                         identifier);
        }
        if (identifier == NULL || !valid || duplicate) {
            match_destroy(matcher);
            bson_free(identifier);
            return false;
        }
        spec->filters[spec->filter_count].identifier = identifier;
        spec->filters[spec->filter_count].matcher = matcher;
        spec->filter_count++;
    }
    return true;
}

update_spec_t *update_compile(const bson_t *update, const bson_t *array_filters,
                              bson_error_t *error)
{
    update_spec_t *spec = BSON_ALIGNED_ALLOC0(update_spec_t);
    bson_iter_t iter;
    bool is_operator_update =
        bson_iter_init(&iter, update) && bson_iter_next(&iter) && bson_iter_key(&iter)[0] == '$';
    if (!is_operator_update) {
        spec->replacement = true;
        spec->replacement_document = bson_copy(update);
        bson_iter_init(&iter, update);
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            if (key[0] == '$') {
                tc_error_set(error, TC_ERR_DOLLAR_PREFIXED_FIELD_NAME,
                             "The dollar ($) prefixed field '%s' in '%s' is not allowed in the "
                             "context of an update's replacement document. Consider using an "
                             "aggregation pipeline with $replaceWith.",
                             key, key);
                goto fail;
            }
        }
        return spec;
    }

    spec->root = node_new(UPDATE_NODE_OBJECT, "");
    if (array_filters != NULL && !compile_array_filters(spec, array_filters, error)) {
        goto fail;
    }
    bson_iter_init(&iter, update);
    while (bson_iter_next(&iter)) {
        if (!compile_modifier(spec, &iter, error)) {
            goto fail;
        }
    }
    for (size_t i = 0; i < spec->filter_count; i++) {
        if (!spec->filters[i].used) {
            bson_string_t *text = bson_string_new(NULL);
            update_format_container(text, bson_get_data(update), update->len, false);
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                         "The array filter for identifier '%s' was not used in the update %s",
                         spec->filters[i].identifier, text->str);
            bson_string_free(text, true);
            goto fail;
        }
    }
    return spec;
fail:
    update_destroy(spec);
    return NULL;
}

/* The stages mongod runs in an update pipeline (isAllowedWithinUpdatePipeline). */
static bool is_update_pipeline_stage(const char *name)
{
    static const char *const allowed[] = {"$addFields", "$set",         "$project",
                                          "$unset",     "$replaceRoot", "$replaceWith"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strcmp(name, allowed[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* Stages mongod 6.0 knows that the pipeline engine does not compile: they are refused
 * in an update as mongod refuses them, by name, without parsing their arguments. */
static bool is_stage_unknown_to_pipeline(const char *name)
{
    static const char *const stages[] = {
        "$lookup",         "$graphLookup",      "$facet",           "$bucket",
        "$bucketAuto",     "$sortByCount",      "$out",             "$merge",
        "$geoNear",        "$sample",           "$redact",          "$indexStats",
        "$collStats",      "$currentOp",        "$listSessions",    "$listLocalSessions",
        "$planCacheStats", "$unionWith",        "$setWindowFields", "$densify",
        "$documents",      "$search",           "$searchMeta",      "$listCatalog"};
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        if (strcmp(name, stages[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* The name of a stage shaped {<name>: ...}, or NULL for any other shape. */
static const char *stage_name(bson_iter_t *stage)
{
    bson_iter_t fields;
    if (!BSON_ITER_HOLDS_DOCUMENT(stage) || !bson_iter_recurse(stage, &fields) ||
        !bson_iter_next(&fields)) {
        return NULL;
    }
    const char *name = bson_iter_key(&fields);
    return bson_iter_next(&fields) ? NULL : name;
}

/* A pipeline-style update (mongod's PipelineExecutor): the whole pipeline is parsed
 * first, then every stage must be one an update may run (InvalidOptions 72). */
static update_spec_t *compile_pipeline(const bson_value_t *update, const bson_t *array_filters,
                                       const expression_context_t *context, bson_error_t *error)
{
    bson_iter_t iter;
    bson_t compilable = BSON_INITIALIZER;
    const char *refused = NULL;
    update_spec_t *spec = NULL;
    uint32_t count = 0;
    if (array_filters != NULL && !bson_empty(array_filters)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                     "arrayFilters may not be specified for pipeline-style updates");
        goto done;
    }
    if (!bson_iter_init_from_data(&iter, update->value.v_doc.data, update->value.v_doc.data_len)) {
        tc_error_set(error, TC_ERR_INVALID_BSON, "The update pipeline is not valid BSON");
        goto done;
    }
    while (bson_iter_next(&iter)) {
        const char *name = stage_name(&iter);
        if (name != NULL && !is_update_pipeline_stage(name) && refused == NULL) {
            refused = name;
        }
        if (name != NULL && is_stage_unknown_to_pipeline(name)) {
            continue;
        }
        char key_buffer[16];
        const char *key;
        bson_uint32_to_string(count++, &key, key_buffer, sizeof key_buffer);
        bson_append_value(&compilable, key, -1, bson_iter_value(&iter));
    }
    pipeline_options_t options = {.expression_context = context};
    pipeline_t *pipeline = pipeline_compile(&compilable, &options, error);
    if (pipeline == NULL) {
        goto done;
    }
    if (refused != NULL) {
        tc_error_set(error, TC_ERR_INVALID_OPTIONS, "%s is not allowed to be used within an update",
                     refused);
        pipeline_destroy(pipeline);
        goto done;
    }
    spec = BSON_ALIGNED_ALLOC0(update_spec_t);
    spec->pipeline = pipeline;
done:
    bson_destroy(&compilable);
    return spec;
}

update_spec_t *update_compile_value(const bson_value_t *update, const bson_t *array_filters,
                                    bson_error_t *error)
{
    return update_compile_with_context(update, array_filters, NULL, error);
}

update_spec_t *update_compile_with_context(const bson_value_t *update, const bson_t *array_filters,
                                           const expression_context_t *context, bson_error_t *error)
{
    bson_t document;
    if (update->value_type == BSON_TYPE_ARRAY) {
        return compile_pipeline(update, array_filters, context, error);
    }
    if (update->value_type != BSON_TYPE_DOCUMENT) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                     "Update argument must be either an object or an array");
        return NULL;
    }
    if (!bson_init_static(&document, update->value.v_doc.data, update->value.v_doc.data_len)) {
        tc_error_set(error, TC_ERR_INVALID_BSON, "The update document is not valid BSON");
        return NULL;
    }
    return update_compile(&document, array_filters, error);
}

bool update_is_replacement(const update_spec_t *spec)
{
    return spec->replacement;
}

bool update_is_pipeline(const update_spec_t *spec)
{
    return spec->pipeline != NULL;
}

bool update_uses_positional(const update_spec_t *spec)
{
    return spec->positional;
}

void update_destroy(update_spec_t *spec)
{
    if (spec == NULL) {
        return;
    }
    node_destroy(spec->root);
    for (size_t i = 0; i < spec->filter_count; i++) {
        bson_free(spec->filters[i].identifier);
        match_destroy(spec->filters[i].matcher);
    }
    bson_free(spec->filters);
    bson_destroy(spec->replacement_document);
    pipeline_destroy(spec->pipeline);
    bson_free(spec);
}
