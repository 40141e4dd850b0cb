/* The query matcher's public face: match_compile() parses a filter into a tree of
 * nodes (match_parse.c), match_document() evaluates it (match_evaluate.c); here
 * the nodes' construction and destruction. */
#include "query/match_private.h"

#include <string.h>

/* ---- nodes ---- */

match_node_t *match_node_new(match_kind_t kind)
{
    match_node_t *node = BSON_ALIGNED_ALLOC0(match_node_t);
    node->kind = kind;
    node->expand_leaf_arrays = true;
    return node;
}

static void regex_cleanup(match_regex_t *regex)
{
    bson_free(regex->pattern);
    bson_free(regex->flags);
    pcre2_match_data_free(regex->match_data);
    pcre2_code_free(regex->code);
}

void match_node_destroy(match_node_t *node)
{
    if (node == NULL) {
        return;
    }
    for (size_t i = 0; i < node->child_count; i++) {
        match_node_destroy(node->children[i]);
    }
    bson_free(node->children);
    bson_free(node->path_buffer);
    bson_free(node->parts);
    switch (node->kind) {
    case MATCH_IN:
        bson_free(node->u.in.values);
        for (size_t i = 0; i < node->u.in.regex_count; i++) {
            regex_cleanup(&node->u.in.regexes[i]);
        }
        bson_free(node->u.in.regexes);
        break;
    case MATCH_REGEX:
        regex_cleanup(&node->u.regex);
        break;
    case MATCH_BITS:
        bson_free(node->u.bits.positions);
        break;
    case MATCH_EXPR:
        expression_destroy(node->u.expr.expression);
        break;
    case MATCH_JSON_SCHEMA:
        json_schema_destroy(node->u.json_schema);
        break;
    default:
        break;
    }
    bson_free(node);
}

void match_node_add_child(match_node_t *parent, match_node_t *child)
{
    if (parent->child_count == parent->child_capacity) {
        parent->child_capacity = parent->child_capacity ? parent->child_capacity * 2 : 4;
        parent->children = bson_realloc(parent->children, parent->child_capacity * sizeof *parent->children);
    }
    parent->children[parent->child_count++] = child;
}

/* mongod returns the only child of a one-predicate $and in its place. */
match_node_t *match_node_collapse_and(match_node_t *node)
{
    if (node->kind != MATCH_AND || node->child_count != 1) {
        return node;
    }
    match_node_t *child = node->children[0];
    node->child_count = 0;
    match_node_destroy(node);
    return child;
}

match_node_t *match_node_negate(match_node_t *child)
{
    match_node_t *node = match_node_new(MATCH_NOT);
    match_node_add_child(node, child);
    return node;
}

static void node_set_path(match_node_t *node, const char *path)
{
    size_t length = strlen(path);
    size_t count = 1;
    for (size_t i = 0; i < length; i++) {
        count += path[i] == '.';
    }
    node->path_buffer = bson_strndup(path, length);
    node->parts = bson_malloc0(count * sizeof *node->parts);
    node->part_count = count;
    char *start = node->path_buffer;
    for (size_t part = 0; part < count; part++) {
        char *end = strchr(start, '.');
        if (end != NULL) {
            *end = '\0';
        }
        size_t part_length = strlen(start);
        bool digits = part_length > 0;
        for (size_t i = 0; i < part_length; i++) {
            digits = digits && start[i] >= '0' && start[i] <= '9';
        }
        node->parts[part].name = start;
        node->parts[part].length = (uint32_t)part_length;
        node->parts[part].is_index = digits;
        start += part_length + 1;
    }
}

match_node_t *match_node_new_with_path(match_kind_t kind, const char *path)
{
    match_node_t *node = match_node_new(kind);
    node_set_path(node, path);
    return node;
}

/* ---- public API ---- */

/* Gives each node the filter's collation, and each $expr node the filter's
 * shared state, once its variables are known to be defined. */
static bool attach_expr_state(match_expression_t *expression, match_node_t *node, const expression_context_t *context,
                              bson_error_t *error)
{
    node->collation = expression->collation;
    if (node->kind == MATCH_EXPR) {
        if (expression->expr_state == NULL) {
            match_expr_state_t *state = bson_malloc0(sizeof *state);
            state->variables = bson_new();
            if (context != NULL) {
                state->context = *context;
                if (context->variables != NULL) {
                    bson_concat(state->variables, context->variables);
                }
            } else {
                expression_context_init(&state->context);
            }
            state->context.variables = state->variables;
            state->context.collation = expression->collation;
            expression->expr_state = state;
        }
        node->u.expr.state = expression->expr_state;
        if (!expression_check_variables(node->u.expr.expression, expression->expr_state->variables, error)) {
            return false;
        }
    }
    for (size_t i = 0; i < node->child_count; i++) {
        if (!attach_expr_state(expression, node->children[i], context, error)) {
            return false;
        }
    }
    return true;
}

static match_expression_t *compile(const bson_t *filter, const expression_context_t *context, unsigned flags,
                                   bson_error_t *error)
{
    match_expression_t *expression = BSON_ALIGNED_ALLOC0(match_expression_t);
    expression->filter = filter ? bson_copy(filter) : bson_new();
    expression->collation = context != NULL ? collation_retain(context->collation) : NULL;
    bson_value_t document = {.value_type = BSON_TYPE_DOCUMENT};
    document.value.v_doc.data = (uint8_t *)bson_get_data(expression->filter);
    document.value.v_doc.data_len = expression->filter->len;
    expression->root = match_parse_filter(&document, flags, error);
    if (expression->root == NULL || !attach_expr_state(expression, expression->root, context, error)) {
        match_destroy(expression);
        return NULL;
    }
    return expression;
}

match_expression_t *match_compile_with_context(const bson_t *filter, const expression_context_t *context,
                                               bson_error_t *error)
{
    return compile(filter, context, 0, error);
}

match_expression_t *match_compile(const bson_t *filter, bson_error_t *error)
{
    return compile(filter, NULL, 0, error);
}

match_expression_t *match_compile_without_special_features(const bson_t *filter, bson_error_t *error)
{
    return compile(filter, NULL, MATCH_PARSE_NO_SPECIAL_FEATURES, error);
}

bool match_failed(const match_expression_t *expression, bson_error_t *error)
{
    if (expression == NULL || expression->expr_state == NULL || !expression->expr_state->failed) {
        return false;
    }
    if (error != NULL) {
        *error = expression->expr_state->error;
    }
    return true;
}

bool match_document(const match_expression_t *expression, const bson_t *document)
{
    return match_node_matches_document(expression->root, bson_get_data(document), document->len, NULL);
}

bool match_document_with_details(const match_expression_t *expression, const bson_t *document,
                                 match_details_t *out_details)
{
    if (out_details != NULL) {
        memset(out_details, 0, sizeof *out_details);
    }
    bool matches = match_node_matches_document(expression->root, bson_get_data(document), document->len,
                                               out_details);
    if (!matches && out_details != NULL) {
        out_details->has_array_index = false;
    }
    return matches;
}

void match_destroy(match_expression_t *expression)
{
    if (expression == NULL) {
        return;
    }
    match_node_destroy(expression->root);
    bson_destroy(expression->filter);
    collation_release(expression->collation);
    if (expression->expr_state != NULL) {
        bson_destroy(expression->expr_state->variables);
        bson_free(expression->expr_state);
    }
    bson_free(expression);
}
