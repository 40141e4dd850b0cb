/* find-command projections: the spec is parsed into a tree of path components as
 * mongod's projection_ast does, then applied in one pass over the document, keeping
 * the document's field order; $slice and $elemMatch are computed fields, and the
 * positional "a.$" replaces an array by the element the query matched. */
#include "query/value_format.h"
#include "query/projection.h"

#include "query/match.h"

#include <stdlib.h>
#include <string.h>

typedef enum projection_kind {
    PROJECTION_PATH,       /* an inner component: children below */
    PROJECTION_INCLUDE,    /* {a: 1} */
    PROJECTION_EXCLUDE,    /* {a: 0} */
    PROJECTION_SLICE,      /* {a: {$slice: ...}} */
    PROJECTION_ELEM_MATCH, /* {a: {$elemMatch: ...}} */
    PROJECTION_POSITIONAL, /* {"a.$": 1}: included, then narrowed to the matched element */
} projection_kind_t;

typedef struct projection_node projection_node_t;
struct projection_node {
    projection_kind_t kind;
    char *name;
    projection_node_t **children; /* in spec order: computed fields come out in it */
    size_t child_count;
    size_t child_capacity;
    bool slice_has_skip;
    int32_t slice_skip;
    int32_t slice_limit;
    match_expression_t *elem_match; /* {name: {$elemMatch: ...}} */
};

typedef enum projection_type {
    PROJECTION_TYPE_UNDECIDED,
    PROJECTION_TYPE_INCLUSION,
    PROJECTION_TYPE_EXCLUSION,
} projection_type_t;

struct projection {
    projection_node_t *root;
    bool empty;
    bool inclusion;
    bool includes_id;
    bool has_computed_fields;
    char **included_paths;
    size_t included_path_count;
    /* The positional projection: its path without ".$", split at the dots, and the
     * query that tells which element it keeps. NULL / 0 without one. */
    match_expression_t *query_matcher;
    char **positional_parts;
    size_t positional_part_count;
};

/* What parsing learns on the way (mongod's ParseContext). */
typedef struct parse_context {
    projection_type_t type;
    bool id_specified;
    bool id_included_entirely;
    bool id_excluded_entirely;
    bool has_slice;
    bool has_elem_match;
    bool has_query;
    bool has_positional;
    char *positional_path; /* full dotted path, without ".$" */
    bson_string_t *prefix; /* the dotted path of the sub-projection being parsed */
} parse_context_t;


static void node_destroy(projection_node_t *node)
{
    if (node == NULL) {
        return;
    }
    for (size_t i = 0; i < node->child_count; i++) {
        node_destroy(node->children[i]);
    }
    bson_free(node->children);
    bson_free(node->name);
    match_destroy(node->elem_match);
    bson_free(node);
}

static projection_node_t *node_new(projection_kind_t kind, const char *name)
{
    projection_node_t *node = BSON_ALIGNED_ALLOC0(projection_node_t);
    node->kind = kind;
    node->name = bson_strdup(name);
    return node;
}

static projection_node_t *node_find(const projection_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->child_count; i++) {
        if (strcmp(node->children[i]->name, name) == 0) {
            return node->children[i];
        }
    }
    return NULL;
}

static void node_append(projection_node_t *node, projection_node_t *child)
{
    if (node->child_count == node->child_capacity) {
        node->child_capacity = node->child_capacity ? node->child_capacity * 2 : 4;
        node->children =
            bson_realloc(node->children, node->child_capacity * sizeof *node->children);
    }
    node->children[node->child_count++] = child;
}

static void node_remove(projection_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->child_count; i++) {
        if (strcmp(node->children[i]->name, name) == 0) {
            node_destroy(node->children[i]);
            memmove(node->children + i, node->children + i + 1,
                    (node->child_count - i - 1) * sizeof *node->children);
            node->child_count--;
            return;
        }
    }
}

/* mongod's FieldPath rules. */
static bool check_field_path(const char *path, bson_error_t *error)
{
    if (path[0] == '\0') {
        return tc_error_set(error, 40352, "FieldPath cannot be constructed with empty string");
    }
    const char *start = path;
    for (;;) {
        const char *dot = strchr(start, '.');
        if (dot == start || start[0] == '\0') {
            return tc_error_set(error, 15998, "FieldPath field names may not be empty strings.");
        }
        if (start[0] == '$') {
            return tc_error_set(error, 16410,
                                "FieldPath field names may not start with '$'. Consider using "
                                "$getField or $setField.");
        }
        if (dot == NULL) {
            return true;
        }
        start = dot + 1;
    }
}

/* Adds node at the dotted path below parent (mongod's addNodeAtPath). Takes node. */
static bool add_node_at_path(projection_node_t *parent, const char *path, projection_node_t *node,
                             bson_error_t *error)
{
    const char *component = path;
    projection_node_t *current = parent;
    for (;;) {
        const char *dot = strchr(component, '.');
        if (dot == NULL) {
            if (node_find(current, component) != NULL) {
                node_destroy(node);
                return tc_error_set(error, 31250, "Path collision at %s", path);
            }
            bson_free(node->name);
            node->name = bson_strdup(component);
            node_append(current, node);
            return true;
        }
        char *name = bson_strndup(component, (size_t)(dot - component));
        projection_node_t *child = node_find(current, name);
        if (child == NULL) {
            child = node_new(PROJECTION_PATH, name);
            node_append(current, child);
        } else if (child->kind != PROJECTION_PATH) {
            bson_free(name);
            node_destroy(node);
            return tc_error_set(error, 31249, "Path collision at %s remaining portion %s", path,
                                dot + 1);
        }
        bson_free(name);
        current = child;
        component = dot + 1;
    }
}

/* A number as mongod's BSONElement::numberInt() reads it, clamped to int32. */
static int32_t iter_as_int32(const bson_iter_t *iter)
{
    double number = bson_iter_as_double(iter);
    if (BSON_ITER_HOLDS_INT32(iter)) {
        return bson_iter_int32(iter);
    }
    if (number != number) {
        return 0;
    }
    if (number >= 2147483647.0) {
        return INT32_MAX;
    }
    if (number <= -2147483648.0) {
        return INT32_MIN;
    }
    return (int32_t)number;
}

static bool parse_slice(parse_context_t *context, projection_node_t *parent, const char *path,
                        const bson_iter_t *argument, bson_error_t *error)
{
    projection_node_t *node = node_new(PROJECTION_SLICE, path);
    if (BSON_ITER_HOLDS_NUMBER(argument)) {
        node->slice_limit = iter_as_int32(argument);
    } else if (BSON_ITER_HOLDS_ARRAY(argument)) {
        bson_iter_t members;
        bson_iter_t skip, limit;
        bson_iter_recurse(argument, &members);
        bool two = bson_iter_next(&members) && (skip = members, bson_iter_next(&members)) &&
                   (limit = members, !bson_iter_next(&members));
        if (!two) {
            node_destroy(node);
            return tc_error_set(error, 31272,
                                "$slice array argument should be of form [skip, limit]");
        }
        if (!BSON_ITER_HOLDS_NUMBER(&skip)) {
            node_destroy(node);
            return tc_error_set(error, 31257,
                                "$slice expects the skip argument to be a number, got %s",
                                value_type_name(bson_iter_type(&skip)));
        }
        if (!BSON_ITER_HOLDS_NUMBER(&limit)) {
            node_destroy(node);
            return tc_error_set(error, 31258,
                                "$slice expects the limit argument to be a number, got %s",
                                value_type_name(bson_iter_type(&limit)));
        }
        node->slice_has_skip = true;
        node->slice_skip = iter_as_int32(&skip);
        node->slice_limit = iter_as_int32(&limit);
        if (node->slice_limit <= 0) {
            int32_t limit_value = node->slice_limit;
            node_destroy(node);
            return tc_error_set(error, 31259, "$slice limit must be positive, got %d",
                                (int)limit_value);
        }
    } else {
        node_destroy(node);
        return tc_error_set(error, 31273, "$slice only supports numbers and [skip, limit] arrays");
    }
    context->has_slice = true;
    return add_node_at_path(parent, path, node, error);
}

static bool parse_elem_match(parse_context_t *context, projection_node_t *parent, const char *path,
                             bson_iter_t *argument, bool nested, bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(argument)) {
        return tc_error_set(error, 31274,
                            "elemMatch: Invalid argument, object required, but got %s",
                            value_type_name(bson_iter_type(argument)));
    }
    if (context->has_positional) {
        return tc_error_set(error, 31255, "Cannot specify positional operator and $elemMatch.");
    }
    if (nested || strchr(path, '.') != NULL) {
        return tc_error_set(error, 31275, "Cannot use $elemMatch projection on a nested field.");
    }
    /* The matcher tests {path: [member]} against {path: {$elemMatch: ...}}. */
    bson_t query = BSON_INITIALIZER;
    bson_t condition;
    bson_append_document_begin(&query, path, -1, &condition);
    bson_append_value(&condition, "$elemMatch", -1, bson_iter_value(argument));
    bson_append_document_end(&query, &condition);
    match_expression_t *matcher = match_compile_without_special_features(&query, error);
    bson_destroy(&query);
    if (matcher == NULL) {
        return false;
    }
    projection_node_t *node = node_new(PROJECTION_ELEM_MATCH, path);
    node->elem_match = matcher;
    context->has_elem_match = true;
    return add_node_at_path(parent, path, node, error);
}

static bool parse_element(parse_context_t *context, projection_node_t *parent, bson_iter_t *iter,
                          bool nested, bson_error_t *error);

static bool parse_sub_object(parse_context_t *context, projection_node_t *parent, const char *path,
                             bson_iter_t *iter, bool nested, bson_error_t *error)
{
    bson_iter_t fields;
    bson_iter_t first;
    bson_iter_recurse(iter, &fields);
    first = fields;
    if (!bson_iter_next(&first)) {
        return tc_error_set(error, 51270,
                            "An empty sub-projection is not a valid value. Found empty object at "
                            "path");
    }
    bson_iter_t after_first = first;
    const char *first_key = bson_iter_key(&first);
    if (first_key[0] == '$' && !bson_iter_next(&after_first)) {
        if (strcmp(first_key, "$slice") == 0 &&
            (BSON_ITER_HOLDS_NUMBER(&first) || BSON_ITER_HOLDS_ARRAY(&first))) {
            return parse_slice(context, parent, path, &first, error);
        }
        if (strcmp(first_key, "$slice") == 0) {
            return tc_error_set(error, 31273,
                                "$slice only supports numbers and [skip, limit] arrays");
        }
        if (strcmp(first_key, "$elemMatch") == 0) {
            return parse_elem_match(context, parent, path, &first, nested, error);
        }
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Projection expressions such as {%s: {%s: ...}} are not supported "
                            "yet; only inclusion, exclusion, $slice and $elemMatch are",
                            path, first_key);
    }
    /* A sub-projection {a: {b: 1}} means {"a.b": 1}. */
    projection_node_t *child = NULL;
    uint32_t prefix_length = context->prefix->len;
    const char *component = path;
    projection_node_t *current = parent;
    for (;;) {
        const char *dot = strchr(component, '.');
        char *name =
            dot ? bson_strndup(component, (size_t)(dot - component)) : bson_strdup(component);
        child = node_find(current, name);
        if (child == NULL) {
            child = node_new(PROJECTION_PATH, name);
            node_append(current, child);
        } else if (child->kind != PROJECTION_PATH) {
            bson_free(name);
            return tc_error_set(error, 31250, "Path collision at %s", path);
        }
        bson_free(name);
        current = child;
        if (dot == NULL) {
            break;
        }
        component = dot + 1;
    }
    bson_string_append_printf(context->prefix, "%s.", path);
    bool ok = true;
    while (ok && bson_iter_next(&fields)) {
        ok = parse_element(context, current, &fields, true, error);
    }
    bson_string_truncate(context->prefix, prefix_length);
    return ok;
}

/* {"a.b.$": 1} (mongod's parseInclusion with a positional operator). */
static bool parse_positional(parse_context_t *context, projection_node_t *parent,
                             const char *path, bson_error_t *error)
{
    if (context->has_positional) {
        return tc_error_set(error, 31276,
                            "Cannot specify more than one positional projection per query.");
    }
    if (context->has_elem_match) {
        return tc_error_set(error, 31256, "Cannot specify positional operator and $elemMatch.");
    }
    if (!context->has_query) {
        return tc_error_set(error, 51050,
                            "Projections with a positional operator require a matcher");
    }
    if (strcmp(path, ".$") == 0) {
        return tc_error_set(error, 5392900, "Projection on field %s is invalid", path);
    }
    char *stripped = bson_strndup(path, strlen(path) - 2);
    bool ok = check_field_path(stripped, error) &&
              add_node_at_path(parent, stripped, node_new(PROJECTION_POSITIONAL, stripped), error);
    if (ok) {
        context->has_positional = true;
        context->positional_path = bson_strdup_printf("%s%s", context->prefix->str, stripped);
    }
    bson_free(stripped);
    return ok;
}

static bool parse_element(parse_context_t *context, projection_node_t *parent, bson_iter_t *iter,
                          bool nested, bson_error_t *error)
{
    const char *path = bson_iter_key(iter);
    bool is_top_level_id = !nested && strcmp(path, "_id") == 0;
    size_t length = strlen(path);
    bool positional = length >= 2 && strcmp(path + length - 2, ".$") == 0;
    if (strstr(path, ".$.") != NULL) {
        return tc_error_set(error, 31394,
                            "As of 4.4, it's illegal to specify positional operator in the middle "
                            "of a path.Positional projection may only be used at the end, for "
                            "example: a.b.$. If the query previously used a form like a.b.$.d, "
                            "remove the parts following the '$' and the results will be "
                            "equivalent.");
    }
    if (!positional && !check_field_path(path, error)) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(iter)) {
        if (positional) {
            return tc_error_set(error, 31271,
                                "positional projection cannot be used with an expression or sub "
                                "object");
        }
        return parse_sub_object(context, parent, path, iter, nested, error);
    }
    bson_type_t type = bson_iter_type(iter);
    if (type != BSON_TYPE_BOOL && type != BSON_TYPE_INT32 && type != BSON_TYPE_INT64 &&
        type != BSON_TYPE_DOUBLE && type != BSON_TYPE_DECIMAL128) {
        if (positional) {
            return tc_error_set(error, 31308,
                                "positional projection cannot be used with a literal");
        }
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Projection values other than true/false, numbers, $slice and "
                            "$elemMatch (here a %s at '%s') are expressions, not supported yet",
                            value_type_name(type), path);
    }
    bool include = bson_iter_as_bool(iter);
    if (positional && !include) {
        return tc_error_set(error, 31395, "positional projection cannot be used with exclusion");
    }
    if (positional) {
        if (!parse_positional(context, parent, path, error)) {
            return false;
        }
    } else if (!add_node_at_path(parent, path,
                                 node_new(include ? PROJECTION_INCLUDE : PROJECTION_EXCLUDE, path),
                                 error)) {
        return false;
    }
    if (is_top_level_id) {
        context->id_included_entirely = include;
        context->id_excluded_entirely = !include;
        return true;
    }
    if (include) {
        if (context->type == PROJECTION_TYPE_EXCLUSION) {
            return tc_error_set(error, 31253,
                                "Cannot do inclusion on field %s in exclusion projection", path);
        }
        context->type = PROJECTION_TYPE_INCLUSION;
    } else {
        if (context->type == PROJECTION_TYPE_INCLUSION) {
            return tc_error_set(error, 31254,
                                "Cannot do exclusion on field %s in inclusion projection", path);
        }
        context->type = PROJECTION_TYPE_EXCLUSION;
    }
    return true;
}

/* The type of a projection that named no field but _id (computeProjectionType). */
static projection_type_t default_type(const parse_context_t *context)
{
    if (context->has_slice) {
        return context->id_included_entirely ? PROJECTION_TYPE_INCLUSION
                                             : PROJECTION_TYPE_EXCLUSION;
    }
    if (context->has_elem_match || context->id_included_entirely) {
        return PROJECTION_TYPE_INCLUSION;
    }
    return PROJECTION_TYPE_EXCLUSION;
}

static void collect_included_paths(projection_t *projection, const projection_node_t *node,
                                   bson_string_t *prefix)
{
    for (size_t i = 0; i < node->child_count; i++) {
        const projection_node_t *child = node->children[i];
        uint32_t length = prefix->len;
        if (length > 0) {
            bson_string_append_c(prefix, '.');
        }
        bson_string_append(prefix, child->name);
        if (child->kind == PROJECTION_PATH) {
            collect_included_paths(projection, child, prefix);
        } else if (child->kind != PROJECTION_EXCLUDE && strcmp(prefix->str, "_id") != 0) {
            projection->included_paths = bson_realloc(
                projection->included_paths, (projection->included_path_count + 1) * sizeof(char *));
            projection->included_paths[projection->included_path_count++] =
                bson_strdup(prefix->str);
            projection->has_computed_fields = projection->has_computed_fields ||
                                              child->kind == PROJECTION_SLICE ||
                                              child->kind == PROJECTION_ELEM_MATCH ||
                                              child->kind == PROJECTION_POSITIONAL;
        }
        bson_string_truncate(prefix, length);
    }
}

/* The positional path split at the dots, for the walk over the projected document. */
static void set_positional_parts(projection_t *projection, const char *path)
{
    const char *start = path;
    for (;;) {
        const char *dot = strchr(start, '.');
        size_t length = dot ? (size_t)(dot - start) : strlen(start);
        projection->positional_parts =
            bson_realloc(projection->positional_parts,
                         (projection->positional_part_count + 1) * sizeof(char *));
        projection->positional_parts[projection->positional_part_count++] =
            bson_strndup(start, length);
        if (dot == NULL) {
            return;
        }
        start = dot + 1;
    }
}

projection_t *projection_compile(const bson_t *spec, bson_error_t *error)
{
    return projection_compile_with_query(spec, NULL, error);
}

projection_t *projection_compile_with_query(const bson_t *spec, const bson_t *query,
                                            bson_error_t *error)
{
    projection_t *projection = BSON_ALIGNED_ALLOC0(projection_t);
    parse_context_t context = {0};
    bson_iter_t iter;
    projection->root = node_new(PROJECTION_PATH, "");
    if (spec == NULL || bson_empty(spec)) {
        projection->empty = true;
        projection->includes_id = true;
        return projection;
    }
    context.has_query = query != NULL;
    context.prefix = bson_string_new(NULL);
    bson_iter_init(&iter, spec);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        context.id_specified =
            context.id_specified || strcmp(key, "_id") == 0 || strncmp(key, "_id.", 4) == 0;
        if (!parse_element(&context, projection->root, &iter, false, error)) {
            goto fail;
        }
    }
    if (context.has_positional) {
        /* mongod parses the query again for the positional projection, banning its special features. */
        projection->query_matcher = match_compile_without_special_features(query, error);
        if (projection->query_matcher == NULL) {
            goto fail;
        }
        set_positional_parts(projection, context.positional_path);
    }
    bson_free(context.positional_path);
    bson_string_free(context.prefix, true);
    if (context.type == PROJECTION_TYPE_UNDECIDED) {
        context.type = default_type(&context);
    }
    projection->inclusion = context.type == PROJECTION_TYPE_INCLUSION;
    if (projection->inclusion && !context.id_specified) {
        node_append(projection->root, node_new(PROJECTION_INCLUDE, "_id"));
    }
    if (!projection->inclusion && context.id_included_entirely) {
        node_remove(projection->root, "_id");
    }
    const projection_node_t *id = node_find(projection->root, "_id");
    projection->includes_id =
        projection->inclusion ? id && id->kind == PROJECTION_INCLUDE : id == NULL;
    bson_string_t *prefix = bson_string_new(NULL);
    collect_included_paths(projection, projection->root, prefix);
    bson_string_free(prefix, true);
    if (!projection->inclusion) {
        for (size_t i = 0; i < projection->included_path_count; i++) {
            bson_free(projection->included_paths[i]);
        }
        projection->included_path_count = 0;
    }
    return projection;
fail:
    bson_free(context.positional_path);
    bson_string_free(context.prefix, true);
    projection_destroy(projection);
    return NULL;
}

void projection_destroy(projection_t *projection)
{
    if (projection == NULL) {
        return;
    }
    node_destroy(projection->root);
    for (size_t i = 0; i < projection->included_path_count; i++) {
        bson_free(projection->included_paths[i]);
    }
    bson_free(projection->included_paths);
    match_destroy(projection->query_matcher);
    for (size_t i = 0; i < projection->positional_part_count; i++) {
        bson_free(projection->positional_parts[i]);
    }
    bson_free(projection->positional_parts);
    bson_free(projection);
}

bool projection_is_empty(const projection_t *projection)
{
    return projection->empty;
}

bool projection_is_inclusion(const projection_t *projection)
{
    return projection->inclusion;
}

bool projection_includes_id(const projection_t *projection)
{
    return projection->includes_id;
}

bool projection_has_computed_fields(const projection_t *projection)
{
    return projection->has_computed_fields;
}

size_t projection_included_path_count(const projection_t *projection)
{
    return projection->included_path_count;
}

const char *projection_included_path(const projection_t *projection, size_t index)
{
    return index < projection->included_path_count ? projection->included_paths[index] : NULL;
}

/* ------------------------------------------------------------------------------------
 * Applying.
 * ---------------------------------------------------------------------------------- */

static void append_key(bson_t *out, const char *key, bool is_array, uint32_t *index,
                       const bson_value_t *value)
{
    char buffer[16];
    const char *array_key = key;
    if (is_array) {
        bson_uint32_to_string((*index)++, &array_key, buffer, sizeof buffer);
    }
    bson_append_value(out, array_key, -1, value);
}

/* $slice: n first (or last when negative) members, or [skip, limit]. */
static void append_slice(bson_t *out, const char *key, const projection_node_t *node,
                         const bson_value_t *value)
{
    bson_t array, sliced;
    bson_iter_t iter;
    if (value->value_type != BSON_TYPE_ARRAY) {
        bson_append_value(out, key, -1, value);
        return;
    }
    bson_init_static(&array, value->value.v_doc.data, value->value.v_doc.data_len);
    int64_t size = bson_count_keys(&array);
    int64_t start, count;
    if (node->slice_has_skip) {
        start = node->slice_skip >= 0 ? node->slice_skip : size + node->slice_skip;
        if (start < 0) {
            start = 0;
        }
        count = node->slice_limit;
    } else if (node->slice_limit >= 0) {
        start = 0;
        count = node->slice_limit;
    } else {
        start = size + node->slice_limit;
        if (start < 0) {
            start = 0;
        }
        count = size;
    }
    uint32_t out_index = 0;
    int64_t position = 0;
    bson_append_array_begin(out, key, -1, &sliced);
    bson_iter_init(&iter, &array);
    while (bson_iter_next(&iter)) {
        if (position >= start && position - start < count) {
            append_key(&sliced, NULL, true, &out_index, bson_iter_value(&iter));
        }
        position++;
    }
    bson_append_array_end(out, &sliced);
}

/* $elemMatch: the first matching member, as a one-member array; nothing otherwise. */
static void append_elem_match(bson_t *out, const char *key, const projection_node_t *node,
                              const bson_value_t *value)
{
    bson_t array;
    bson_iter_t iter;
    if (value->value_type != BSON_TYPE_ARRAY) {
        return;
    }
    bson_init_static(&array, value->value.v_doc.data, value->value.v_doc.data_len);
    bson_iter_init(&iter, &array);
    while (bson_iter_next(&iter)) {
        bson_t candidate = BSON_INITIALIZER;
        bson_t members;
        bson_append_array_begin(&candidate, key, -1, &members);
        bson_append_value(&members, "0", 1, bson_iter_value(&iter));
        bson_append_array_end(&candidate, &members);
        bool matches = match_document(node->elem_match, &candidate);
        bson_destroy(&candidate);
        if (matches) {
            bson_t result;
            bson_append_array_begin(out, key, -1, &result);
            bson_append_value(&result, "0", 1, bson_iter_value(&iter));
            bson_append_array_end(out, &result);
            return;
        }
    }
}

static void apply_computed(bson_t *out, const projection_node_t *node, const bson_value_t *value)
{
    if (node->kind == PROJECTION_SLICE) {
        append_slice(out, node->name, node, value);
    } else {
        append_elem_match(out, node->name, node, value);
    }
}

static void project_document(const projection_node_t *node, bool inclusion, const uint8_t *data,
                             uint32_t length, bson_t *out);

/* A path node applied to a value: documents recurse, arrays apply to each member;
 * anything else is dropped by an inclusion and kept by an exclusion. */
static void project_value(const projection_node_t *node, bool inclusion, bson_t *out,
                          const char *key, bool is_array, uint32_t *index,
                          const bson_value_t *value)
{
    char buffer[16];
    const char *member_key = key;
    bson_t child;
    if (value->value_type != BSON_TYPE_DOCUMENT && value->value_type != BSON_TYPE_ARRAY) {
        if (!inclusion) {
            append_key(out, key, is_array, index, value);
        }
        return;
    }
    if (is_array) {
        bson_uint32_to_string((*index)++, &member_key, buffer, sizeof buffer);
    }
    if (value->value_type == BSON_TYPE_DOCUMENT) {
        bson_append_document_begin(out, member_key, -1, &child);
        project_document(node, inclusion, value->value.v_doc.data, value->value.v_doc.data_len,
                         &child);
        bson_append_document_end(out, &child);
        return;
    }
    bson_t array;
    bson_iter_t iter;
    uint32_t child_index = 0;
    bson_init_static(&array, value->value.v_doc.data, value->value.v_doc.data_len);
    bson_append_array_begin(out, member_key, -1, &child);
    bson_iter_init(&iter, &array);
    while (bson_iter_next(&iter)) {
        project_value(node, inclusion, &child, NULL, true, &child_index, bson_iter_value(&iter));
    }
    bson_append_array_end(out, &child);
}

static void project_document(const projection_node_t *node, bool inclusion, const uint8_t *data,
                             uint32_t length, bson_t *out)
{
    bson_t document;
    bson_iter_t iter;
    if (!bson_init_static(&document, data, length) || !bson_iter_init(&iter, &document)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        const bson_value_t *value = bson_iter_value(&iter);
        const projection_node_t *child = node_find(node, key);
        if (child == NULL) {
            if (!inclusion) {
                bson_append_value(out, key, -1, value);
            }
            continue;
        }
        switch (child->kind) {
        case PROJECTION_INCLUDE:
        case PROJECTION_POSITIONAL: bson_append_value(out, key, -1, value); break;
        case PROJECTION_EXCLUDE: break;
        case PROJECTION_PATH: project_value(child, inclusion, out, key, false, NULL, value); break;
        case PROJECTION_SLICE:
        case PROJECTION_ELEM_MATCH:
            /* An exclusion computes in place; an inclusion appends after the kept fields. */
            if (!inclusion) {
                apply_computed(out, child, value);
            }
            break;
        }
    }
    if (!inclusion) {
        return;
    }
    for (size_t i = 0; i < node->child_count; i++) {
        const projection_node_t *child = node->children[i];
        bson_iter_t found;
        if ((child->kind == PROJECTION_SLICE || child->kind == PROJECTION_ELEM_MATCH) &&
            bson_iter_init_find(&found, &document, child->name)) {
            apply_computed(out, child, bson_iter_value(&found));
        }
    }
}

/* Copies the document (data, length) into out with the field at parts[depth..count)
 * replaced by value; every component on the way is a document. */
static void replace_nested(const uint8_t *data, uint32_t length, char *const *parts,
                           size_t depth, size_t count, const bson_value_t *value, bson_t *out)
{
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, data, length)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        const bson_value_t *current = bson_iter_value(&iter);
        if (strcmp(key, parts[depth]) != 0) {
            bson_append_value(out, key, -1, current);
        } else if (depth + 1 == count) {
            bson_append_value(out, key, -1, value);
        } else {
            bson_t child;
            bson_append_document_begin(out, key, -1, &child);
            replace_nested(current->value.v_doc.data, current->value.v_doc.data_len, parts,
                           depth + 1, count, value, &child);
            bson_append_document_end(out, &child);
        }
    }
}

/* The member of array whose position is the decimal index; NULL when out of range. */
static const bson_value_t *array_member(const bson_value_t *array, const char *index,
                                        bson_iter_t *iter)
{
    char *end = NULL;
    unsigned long long wanted = strtoull(index, &end, 10);
    unsigned long long position = 0;
    if (end == index || *end != '\0' ||
        !bson_iter_init_from_data(iter, array->value.v_doc.data, array->value.v_doc.data_len)) {
        return NULL;
    }
    while (bson_iter_next(iter)) {
        if (position++ == wanted) {
            return bson_iter_value(iter);
        }
    }
    return NULL;
}

/* mongod's applyPositionalProjection: the query is matched again on the original
 * document to learn the element's index, then the first array on the positional path
 * of the projected document becomes [that element]. A path that reaches no array
 * leaves the projected document as it is. Replaces *projected on success. */
static bool apply_positional(const projection_t *projection, const bson_t *document,
                             bson_t *projected, bson_error_t *error)
{
    match_details_t details;
    match_document_with_details(projection->query_matcher, document, &details);
    const uint8_t *data = bson_get_data(projected);
    uint32_t length = projected->len;
    for (size_t depth = 0; depth < projection->positional_part_count; depth++) {
        bson_iter_t field;
        if (!bson_iter_init_from_data(&field, data, length) ||
            !bson_iter_find(&field, projection->positional_parts[depth])) {
            return true;
        }
        const bson_value_t *value = bson_iter_value(&field);
        if (value->value_type == BSON_TYPE_DOCUMENT) {
            data = value->value.v_doc.data;
            length = value->value.v_doc.data_len;
            continue;
        }
        if (value->value_type != BSON_TYPE_ARRAY) {
            return true;
        }
        if (!details.has_array_index) {
            return tc_error_set(error, 51246,
                                "positional operator '.$' couldn't find a matching element in "
                                "the array");
        }
        bson_iter_t member_iter;
        const bson_value_t *member = array_member(value, details.array_index, &member_iter);
        if (member == NULL) {
            return tc_error_set(error, 51247, "positional operator '.$' element mismatch");
        }
        bson_t single = BSON_INITIALIZER;
        bson_append_value(&single, "0", 1, member);
        bson_value_t replacement = {.value_type = BSON_TYPE_ARRAY};
        replacement.value.v_doc.data = (uint8_t *)bson_get_data(&single);
        replacement.value.v_doc.data_len = single.len;
        bson_t narrowed = BSON_INITIALIZER;
        replace_nested(bson_get_data(projected), projected->len, projection->positional_parts, 0,
                       depth + 1, &replacement, &narrowed);
        bson_destroy(&single);
        bson_destroy(projected);
        bson_copy_to(&narrowed, projected);
        bson_destroy(&narrowed);
        return true;
    }
    return true;
}

bool projection_apply(const projection_t *projection, const bson_t *document, bson_t *out,
                      bson_error_t *error)
{
    bson_iter_t iter;
    bson_init(out);
    if (!bson_iter_init(&iter, document)) {
        return tc_error_set(error, TC_ERR_INVALID_BSON,
                            "The document to project is not valid BSON");
    }
    if (projection->empty) {
        bson_concat(out, document);
        return true;
    }
    project_document(projection->root, projection->inclusion, bson_get_data(document),
                     document->len, out);
    if (projection->query_matcher != NULL && !apply_positional(projection, document, out, error)) {
        bson_reinit(out);
        return false;
    }
    return true;
}
