/* Views, as mongod 6.0 runs them: create {viewOn, pipeline} checks the
 * definition (its pipeline compiles, no $out or $merge, no cycle, at most 20
 * views deep) and the catalog keeps it (catalog_views.c); a read of a view is
 * an aggregate of the collection at the bottom of the chain, with each view's
 * pipeline from the innermost out, then what the read asked for. find, count
 * and distinct become that aggregate as mongod rewrites them
 * (query/view_rewrite.h), so their replies are what an aggregate over the view
 * gives. */
#include "store/commands.h"
#include "query/pipeline.h"
#include "query/value_format.h"
#include "query/view_rewrite.h"

#include <string.h>

/* mongod's ViewGraph::kMaxViewDepth. */
#define VIEW_MAX_DEPTH 20

/* --- the definition ----------------------------------------------------------- */

static void append_array_items(bson_t *array, uint32_t *count, const bson_t *items)
{
    bson_iter_t iter;
    bson_iter_init(&iter, items);
    while (bson_iter_next(&iter)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string((*count)++, &key_string, key, sizeof key);
        bson_append_iter(array, key_string, -1, &iter);
    }
}

/* Refuses what mongod refuses in a view's pipeline: $out and $merge (they
 * would write at every read), and anything that does not compile. */
static bool check_pipeline(const bson_t *pipeline, bson_error_t *error)
{
    bson_iter_t iter, stage;
    bson_iter_init(&iter, pipeline);
    while (bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &stage) && bson_iter_next(&stage) &&
            (strcmp(bson_iter_key(&stage), "$out") == 0 || strcmp(bson_iter_key(&stage), "$merge") == 0)) {
            return tc_error_set(error, TC_ERR_OPTION_NOT_SUPPORTED_ON_VIEW,
                                "%s cannot be used in a view definition", bson_iter_key(&stage));
        }
    }
    pipeline_t *compiled = pipeline_compile(pipeline, NULL, error);
    pipeline_destroy(compiled);
    return compiled != NULL;
}

/* The chain a new definition of ns (view_on, pipeline) would make: a cycle is
 * GraphContainsCycle 5, a chain deeper than 20 ViewDepthLimitExceeded 165. */
static bool check_chain(storage_t *storage, const char *ns, const char *view_on, bson_error_t *error)
{
    bson_string_t *path = bson_string_new(ns);
    bool ok = true;
    int depth = 1;
    for (const char *next = view_on; next != NULL && ok; depth++) {
        bson_string_append_printf(path, " => %s", next);
        if (strcmp(next, ns) == 0) {
            ok = tc_error_set(error, TC_ERR_GRAPH_CONTAINS_CYCLE, "View cycle detected: [%s]", path->str);
        } else if (depth > VIEW_MAX_DEPTH) {
            ok = tc_error_set(error, TC_ERR_VIEW_DEPTH_LIMIT_EXCEEDED,
                              "View depth limit exceeded; maximum depth is %d", VIEW_MAX_DEPTH);
        } else {
            const view_t *view = storage_find_view(storage, next);
            next = view != NULL ? view->view_on : NULL;
        }
    }
    bson_string_free(path, true);
    return ok;
}

typedef struct view_definition {
    const char *view_on; /* a collection name, as the command gives it; NULL: absent */
    bson_t pipeline;     /* a view of the command's array, or empty */
    bool has_pipeline;
} view_definition_t;

/* viewOn and pipeline of create or collMod (command_name); any other own field
 * is InvalidOptions 72, as mongod refuses collection options on a view. */
static bool parse_definition(const command_context_t *context, const char *command_name, view_definition_t *out,
                             bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    bson_init(&out->pipeline);
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (command_is_generic_argument(field)) {
            continue;
        }
        if (strcmp(field, "viewOn") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&iter)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "BSON field '%s.viewOn' is the wrong type '%s', expected type 'string'",
                                    command_name, value_type_name(bson_iter_type(&iter)));
            }
            out->view_on = bson_iter_utf8(&iter, NULL);
        } else if (strcmp(field, "pipeline") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "BSON field '%s.pipeline' is the wrong type '%s', expected type 'array'",
                                    command_name, value_type_name(bson_iter_type(&iter)));
            }
            const bson_value_t *value = bson_iter_value(&iter);
            bson_destroy(&out->pipeline);
            bson_init_static(&out->pipeline, value->value.v_doc.data, value->value.v_doc.data_len);
            out->has_pipeline = true;
        } else if (strcmp(field, "collation") == 0) {
            /* A view's default collation is mongod's, but not the store's yet:
             * refused rather than ignored, as create refuses it for a collection. */
            return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                                "thermocline store does not support a view's collation yet; %s changed nothing",
                                command_name);
        } else {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "option not supported on a view: %s", field);
        }
    }
    if (out->view_on != NULL && out->view_on[0] == '\0') {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "'viewOn' cannot be empty");
    }
    return true;
}

bool views_create(command_context_t *context, const char *ns, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    view_definition_t definition;
    char *view_on = NULL;
    bool ok = false;
    TC_CHECK(parse_definition(context, "create", &definition, error));
    if (definition.view_on == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "'pipeline' requires 'viewOn' to also be specified");
        goto done;
    }
    TC_CHECK(check_pipeline(&definition.pipeline, error));
    view_on = bson_strdup_printf("%s.%s", context->database, definition.view_on);
    storage_lock_exclusive(storage);
    /* A taken name first: mongod reports it before looking at the chain. */
    if (storage_find_collection(storage, ns) != NULL || storage_find_view(storage, ns) != NULL) {
        ok = tc_error_set(error, TC_ERR_NAMESPACE_EXISTS, "Collection %s already exists.", ns);
    } else {
        ok = check_chain(storage, ns, view_on, error) &&
             storage_create_view(context->session, ns, view_on, &definition.pipeline, error);
    }
    storage_unlock(storage);
done:
    bson_free(view_on);
    return ok;
}

bool views_modify(command_context_t *context, view_t *view, bson_error_t *error)
{
    view_definition_t definition;
    bson_t object = BSON_INITIALIZER;
    char *view_on = NULL;
    bool ok = false;
    TC_CHECK(parse_definition(context, "collMod", &definition, error));
    view_on = definition.view_on != NULL ? bson_strdup_printf("%s.%s", context->database, definition.view_on)
                                         : bson_strdup(view->view_on);
    const bson_t *pipeline = definition.has_pipeline ? &definition.pipeline : &view->pipeline;
    TC_CHECK(check_pipeline(pipeline, error));
    TC_CHECK(check_chain(context->store->storage, view->ns, view_on, error));
    BSON_APPEND_UTF8(&object, "collMod", view->name);
    BSON_APPEND_UTF8(&object, "viewOn", strchr(view_on, '.') + 1);
    BSON_APPEND_ARRAY(&object, "pipeline", pipeline);
    ok = storage_modify_view(context->session, view, view_on, pipeline, &object, error);
done:
    bson_destroy(&object);
    bson_free(view_on);
    return ok;
}

/* --- resolution ---------------------------------------------------------------- */

bool views_resolve(storage_t *storage, const char *ns, char **out_source_ns, bson_t *out_pipeline,
                   bson_error_t *error)
{
    /* The chain from ns down, then its pipelines from the bottom up. */
    const view_t *chain[VIEW_MAX_DEPTH + 1];
    size_t depth = 0;
    const char *source = ns;
    bson_init(out_pipeline);
    for (const view_t *view = storage_find_view(storage, ns); view != NULL;
         view = storage_find_view(storage, view->view_on)) {
        if (depth == VIEW_MAX_DEPTH) {
            return tc_error_set(error, TC_ERR_VIEW_DEPTH_LIMIT_EXCEEDED,
                                "View depth too deep or view cycle detected. Maximum depth is %d", VIEW_MAX_DEPTH);
        }
        chain[depth++] = view;
        source = view->view_on;
    }
    uint32_t count = 0;
    while (depth > 0) {
        append_array_items(out_pipeline, &count, &chain[--depth]->pipeline);
    }
    *out_source_ns = bson_strdup(source);
    return true;
}

bool views_refuse(storage_t *storage, const char *ns, bson_error_t *error)
{
    if (storage_find_view(storage, ns) != NULL) {
        return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW, "Namespace %s is a view, not a collection",
                            ns);
    }
    return true;
}

/* --- find, count and distinct on a view ---------------------------------------- */

/* Fields of the read that the aggregate carries over unchanged. */
static const char *const fields_passed_on[] = {
    "hint", "let", "maxTimeMS", "comment", "readConcern", "collation", "allowDiskUse", "lsid", "txnNumber",
    "autocommit", "startTransaction", "$db", "$readPreference", NULL,
};

static bool name_listed(const char *name, const char *const *names)
{
    for (; *names != NULL; names++) {
        if (strcmp(*names, name) == 0) {
            return true;
        }
    }
    return false;
}

/* The aggregate a read of the view (find, count or distinct: context->name)
 * runs: {aggregate: <view>, pipeline, cursor, <fields passed on>}. */
static bool translate_read(const command_context_t *context, const char *view_name, bson_t *out, bson_error_t *error)
{
    bson_t pipeline = BSON_INITIALIZER, cursor = BSON_INITIALIZER;
    bool ok = view_rewrite_read(context->name, context->command, &pipeline, &cursor, error);
    if (ok) {
        bson_iter_t iter;
        BSON_APPEND_UTF8(out, "aggregate", view_name);
        BSON_APPEND_ARRAY(out, "pipeline", &pipeline);
        BSON_APPEND_DOCUMENT(out, "cursor", &cursor);
        bson_iter_init(&iter, context->command);
        while (bson_iter_next(&iter)) {
            if (name_listed(bson_iter_key(&iter), fields_passed_on)) {
                bson_append_iter(out, bson_iter_key(&iter), -1, &iter);
            }
        }
    }
    bson_destroy(&pipeline);
    bson_destroy(&cursor);
    return ok;
}

/* count's and distinct's replies from the aggregate's single batch: {n} from
 * {count}, {values} from {distinct}; nothing matched gives 0 and []. */
static void reshape_reply(const command_context_t *context, const bson_t *aggregate_reply, bson_t *reply)
{
    bson_iter_t iter;
    bool counting = strcmp(context->name, "count") == 0;
    bool found = bson_iter_init(&iter, aggregate_reply) &&
                 bson_iter_find_descendant(&iter, counting ? "cursor.firstBatch.0.count" : "cursor.firstBatch.0.distinct",
                                           &iter);
    if (counting) {
        BSON_APPEND_INT32(reply, "n", found ? (int32_t)bson_iter_as_int64(&iter) : 0);
    } else if (found) {
        bson_append_iter(reply, "values", -1, &iter);
    } else {
        bson_t empty = BSON_INITIALIZER;
        BSON_APPEND_ARRAY(reply, "values", &empty);
        bson_destroy(&empty);
    }
}

/* Whether the read's namespace is a view, and if so the aggregate it becomes
 * (out_aggregate, initialized by the caller). */
static bool translate_if_view(command_context_t *context, bool *out_is_view, bson_t *out_aggregate,
                              bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t iter;
    char *ns = NULL;
    *out_is_view = false;
    bson_iter_init(&iter, context->command);
    if (!bson_iter_next(&iter) || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return true; /* not a namespace: the command's own parsing reports it */
    }
    if (!command_namespace(context, &ns, error)) {
        return false;
    }
    storage_lock_shared(storage);
    *out_is_view = storage_find_view(storage, ns) != NULL;
    storage_unlock(storage);
    bool ok = !*out_is_view || translate_read(context, strchr(ns, '.') + 1, out_aggregate, error);
    bson_free(ns);
    return ok;
}

bool views_answer_read(command_context_t *context, bson_t *reply, bool *out_handled, bson_error_t *error)
{
    bson_t aggregate = BSON_INITIALIZER, aggregate_reply = BSON_INITIALIZER;
    bool ok = false;
    TC_CHECK(translate_if_view(context, out_handled, &aggregate, error));
    if (!*out_handled) {
        ok = true;
        goto done;
    }
    command_context_t inner = *context;
    inner.command = &aggregate;
    inner.name = "aggregate";
    bool finding = strcmp(context->name, "find") == 0;
    TC_CHECK(command_aggregate(&inner, finding ? reply : &aggregate_reply, error));
    if (!finding) {
        reshape_reply(context, &aggregate_reply, reply);
    }
    ok = true;
done:
    bson_destroy(&aggregate);
    bson_destroy(&aggregate_reply);
    return ok;
}

bool views_explain_read(command_context_t *context, bson_t *reply, bool *out_handled, bson_error_t *error)
{
    bson_t aggregate = BSON_INITIALIZER;
    bool ok = translate_if_view(context, out_handled, &aggregate, error);
    if (ok && *out_handled) {
        BSON_APPEND_BOOL(&aggregate, "explain", true);
        command_context_t inner = *context;
        inner.command = &aggregate;
        inner.name = "aggregate";
        ok = command_aggregate(&inner, reply, error);
    }
    bson_destroy(&aggregate);
    return ok;
}
