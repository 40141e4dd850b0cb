/* Applying a compiled update as mongod 6.0 does: the tree is walked in field order
 * over a mutable copy of the document, so existing fields keep their place and new
 * ones are appended (each operator in update_operators.c); replacements keep _id;
 * pipeline-style updates run the pipeline engine; upsert seeds in update_upsert.c. */
#include "query/value_format.h"
#include "query/update_private.h"

#include "query/order.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * Applying an operator update: the change log and the walk of the tree.
 * ---------------------------------------------------------------------------------- */


bool update_path_string_is_prefix(const char *prefix, const char *path)
{
    size_t length = strlen(prefix);
    return strncmp(prefix, path, length) == 0 && (path[length] == '\0' || path[length] == '.');
}

/* Records a change for the change-stream description, as mongod's v2 oplog diff
 * would: a change inside an already-logged subtree is covered by it. */
void update_log_change(update_apply_context_t *context, char *path, bool removed)
{
    if (context->log_suppressed > 0) {
        bson_free(path);
        return;
    }
    for (size_t i = 0; i < context->log_count; i++) {
        if (!context->log[i].removed && update_path_string_is_prefix(context->log[i].path, path)) {
            bson_free(path);
            return;
        }
    }
    size_t kept = 0;
    for (size_t i = 0; i < context->log_count; i++) {
        if (update_path_string_is_prefix(path, context->log[i].path)) {
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

void update_log_current_path(update_apply_context_t *context, size_t count, bool removed)
{
    update_log_change(context, update_path_join(context->path.parts, count), removed);
}

/* A view of an element wrapped as {UPDATE_PULL_WRAP_FIELD: value} or {identifier: value}, to
 * run a match expression on one array element. */
bool update_element_matches(const update_element_t *element, const char *field,
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

static bool array_filter_matches(const update_apply_context_t *context, const char *identifier,
                                 const update_element_t *element)
{
    for (size_t i = 0; i < context->spec->filter_count; i++) {
        if (strcmp(context->spec->filters[i].identifier, identifier) == 0) {
            return update_element_matches(element, identifier, context->spec->filters[i].matcher);
        }
    }
    return false;
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

static bool apply_node(update_apply_context_t *context, const update_node_t *node);

/* $[] and $[<identifier>]: the children apply to each matching member of the array. */
static bool apply_array_node(update_apply_context_t *context, const update_node_t *node)
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
            update_log_current_path(context, context->path.count, false);
        } else if (ok && modified_members == 1) {
            char index_text[24];
            snprintf(index_text, sizeof index_text, "%zu", last_modified);
            update_path_push(&context->path, index_text);
            update_log_current_path(context, context->path.count, false);
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
static bool apply_child(update_apply_context_t *context, const update_node_t *child, const char *name)
{
    update_path_push(&context->path, name);
    bool ok = apply_node(context, child);
    update_path_pop(&context->path);
    return ok;
}

/* The positional child "$" applies at the matched index, in field order among its
 * siblings; a sibling of that very name is merged with it (mongod's
 * UpdateObjectNode::apply). */
static bool apply_positional(update_apply_context_t *context, const update_node_t *positional,
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

static bool apply_object_node(update_apply_context_t *context, const update_node_t *node)
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

static bool apply_node(update_apply_context_t *context, const update_node_t *node)
{
    switch (node->kind) {
    case UPDATE_NODE_LEAF: return update_apply_leaf(context, node);
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

static void build_description(const update_apply_context_t *context, bson_t *out)
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
        update_describe_difference(document, out_document, out_description);
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
    update_apply_context_t context;
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
