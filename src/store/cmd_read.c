/* Read commands: find, getMore, killCursors, count, distinct and explain (of
 * find, count and distinct). aggregate lives in cmd_aggregate.c. */
#include "store/commands.h"
#include "store/command_collation.h"
#include "query/order.h"
#include "store/change_stream.h"
#include "common/clock.h"

#include <string.h>
#include <time.h>

#define DEFAULT_FIRST_BATCH_SIZE 101

/* Fields of find that mongod accepts; any other is an error (40415). */
static const char *const find_fields[] = {
    "find", "filter", "sort", "projection", "hint", "skip", "limit", "batchSize", "singleBatch", "comment",
    "maxTimeMS", "readConcern", "max", "min", "returnKey", "showRecordId", "tailable", "oplogReplay",
    "noCursorTimeout", "awaitData", "allowPartialResults", "collation", "allowDiskUse", "let", "lsid",
    "txnNumber", "autocommit", "startTransaction", "$db", "$clusterTime", "$readPreference", "apiVersion",
    "apiStrict", "apiDeprecationErrors", "readOnce", "$audit", "$client", "databaseVersion", "shardVersion",
    "maxScan", "$queryOptions", NULL,
};

/* request_name is how mongod's parser names the command in this error:
 * "FindCommandRequest" for find. */
static bool check_known_fields(const command_context_t *context, const char *request_name,
                               const char *const *known, bson_error_t *error)
{
    bson_iter_t iter;
    bson_iter_init(&iter, context->command);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        bool found = false;
        for (const char *const *name = known; *name != NULL && !found; name++) {
            found = strcmp(*name, key) == 0;
        }
        if (!found) {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field '%s.%s' is an unknown field.",
                                request_name, key);
        }
    }
    return true;
}

/* Reads hint, which may be a key pattern or an index name. */
static bool read_hint(const command_context_t *context, find_options_t *options, bson_t *hint_document,
                      bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, context->command, "hint")) {
        return true;
    }
    if (BSON_ITER_HOLDS_UTF8(&iter)) {
        options->hint_name = bson_iter_utf8(&iter, NULL);
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "hint must be either a string or nested object");
    }
    if (!command_get_document(context, "hint", hint_document, error)) {
        return false;
    }
    options->hint = hint_document;
    return true;
}

static void append_cursor_reply(bson_t *reply, const char *batch_name, batch_builder_t *batch, int64_t cursor_id,
                                const char *ns)
{
    bson_t cursor;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    bson_append_array(&cursor, batch_name, -1, &batch->array);
    BSON_APPEND_INT64(&cursor, "id", cursor_id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
}

/* --- find ---------------------------------------------------------------------- */

typedef struct find_request {
    char *ns;
    bson_t filter, sort, projection, hint, min, max;
    find_options_t options;
    int64_t batch_size;
    bool single_batch;
    bool no_cursor_timeout;
} find_request_t;

static bool parse_find(command_context_t *context, find_request_t *request, bson_error_t *error)
{
    memset(request, 0, sizeof *request);
    if (!check_known_fields(context, "FindCommandRequest", find_fields, error) || !command_namespace(context, &request->ns, error) ||
        !command_get_document(context, "filter", &request->filter, error) ||
        !command_get_document(context, "sort", &request->sort, error) ||
        !command_get_document(context, "projection", &request->projection, error) ||
        !read_hint(context, &request->options, &request->hint, error) ||
        !command_get_document(context, "min", &request->min, error) ||
        !command_get_document(context, "max", &request->max, error) ||
        !command_get_int64(context, "skip", 0, &request->options.skip, error) ||
        !command_get_int64(context, "limit", 0, &request->options.limit, error) ||
        !command_get_int64(context, "batchSize", DEFAULT_FIRST_BATCH_SIZE, &request->batch_size, error) ||
        !command_get_bool(context, "singleBatch", false, &request->single_batch, error) ||
        !command_get_bool(context, "noCursorTimeout", false, &request->no_cursor_timeout, error)) {
        return false;
    }
    if (request->batch_size < 0) {
        return tc_error_set(error, TC_ERR_NON_NEGATIVE_VALUE, "BatchSize value must be non-negative, but received: %lld",
                            (long long)request->batch_size);
    }
    request->options.filter = &request->filter;
    request->options.expression_context = context->expression_context;
    request->options.sort = &request->sort;
    request->options.projection = &request->projection;
    request->options.min = &request->min;
    request->options.max = &request->max;
    return true;
}

static bool handle_find(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    find_request_t request;
    storage_t *storage = context->store->storage;
    store_cursor_t *cursor = NULL;
    batch_builder_t batch = {.limit = 0};
    bool exhausted = true;
    bool ok = false;

    bool on_view;
    bool view_ok = views_answer_read(context, reply, &on_view, error);
    if (!view_ok || on_view) {
        return view_ok;
    }
    bson_init(&batch.array);
    if (!parse_find(context, &request, error)) {
        bson_free(request.ns);
        bson_destroy(&batch.array);
        return false;
    }
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, request.ns);
    find_plan_t *plan = find_plan_new(context->session, collection, &request.options, error);
    TC_CHECK(plan != NULL);
    cursor = store_cursor_new(request.ns);
    cursor->plan = plan;
    cursor->no_timeout = request.no_cursor_timeout;
    cursor->transaction_id = context->transaction_id;
    cursor->txn_number = context->txn_number;
    batch.limit = (uint32_t)(request.batch_size > UINT32_MAX ? UINT32_MAX : request.batch_size);
    if (request.batch_size == 0) {
        /* batchSize 0: open the cursor, return nothing yet (as mongod). */
        exhausted = collection == NULL;
    } else {
        TC_CHECK(command_fill_batch(context, cursor, collection, &batch, &exhausted, error));
    }
    int64_t cursor_id = 0;
    if (!exhausted && !request.single_batch) {
        cursor_table_add(context->store->cursors, cursor, context->command);
        cursor_id = cursor->id;
        cursor_table_release(context->store->cursors, cursor, false);
        cursor = NULL;
    }
    append_cursor_reply(reply, "firstBatch", &batch, cursor_id, request.ns);
    ok = true;
done:
    storage_unlock(storage);
    store_cursor_destroy(cursor);
    bson_destroy(&batch.array);
    bson_free(request.ns);
    return ok;
}

/* --- getMore / killCursors ------------------------------------------------------------ */

/* A cursor opened in a multi-document transaction continues only in it, and one
 * opened outside only outside one (mongod's validateTxnNumber). */
static bool check_cursor_transaction(const command_context_t *context, const store_cursor_t *cursor,
                                     bson_error_t *error)
{
    if (cursor->transaction_id == context->transaction_id) {
        return true;
    }
    if (cursor->transaction_id == 0) {
        return tc_error_set(error, 50739,
                            "Cannot run getMore on cursor %lld, which was not created in a transaction, in "
                            "transaction %lld",
                            (long long)cursor->id, (long long)context->txn_number);
    }
    if (context->transaction_id == 0) {
        return tc_error_set(error, 50740,
                            "Cannot run getMore on cursor %lld, which was created in transaction %lld, without a "
                            "txnNumber",
                            (long long)cursor->id, (long long)cursor->txn_number);
    }
    return tc_error_set(error, 50741,
                        "Cannot run getMore on cursor %lld, which was created in transaction %lld, in transaction "
                        "%lld",
                        (long long)cursor->id, (long long)cursor->txn_number, (long long)context->txn_number);
}

static bool handle_get_more(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    storage_t *storage = context->store->storage;
    store_cursor_t *cursor = NULL;
    batch_builder_t batch = {0};
    int64_t batch_size;
    bool exhausted = false;
    bool ok = false;
    char *ns = NULL;

    bson_init(&batch.array);
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (!BSON_ITER_HOLDS_INT64(&iter)) {
        tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field 'getMore.getMore' is the wrong type '%s', expected type 'long'",
                     BSON_ITER_HOLDS_INT32(&iter) ? "int" : "other");
        goto fail;
    }
    int64_t cursor_id = bson_iter_int64(&iter);
    if (!bson_iter_init_find(&iter, context->command, "collection") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field 'getMore.collection' is missing but a required field");
        goto fail;
    }
    ns = bson_strdup_printf("%s.%s", context->database, bson_iter_utf8(&iter, NULL));
    if (!command_get_int64(context, "batchSize", 0, &batch_size, error)) {
        goto fail;
    }
    if (batch_size < 0) {
        tc_error_set(error, TC_ERR_NON_NEGATIVE_VALUE, "BatchSize value must be non-negative, but received: %lld", (long long)batch_size);
        goto fail;
    }
    if (!cursor_table_checkout(context->store->cursors, cursor_id, ns, &cursor, error)) {
        goto fail;
    }
    if (!check_cursor_transaction(context, cursor, error)) {
        cursor_table_release(context->store->cursors, cursor, false);
        goto fail;
    }
    if (change_stream_is_cursor(cursor)) {
        ok = change_stream_get_more(context, cursor, batch_size, reply, error);
        goto fail;
    }
    batch.limit = (uint32_t)(batch_size > UINT32_MAX ? UINT32_MAX : batch_size);
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, ns);
    ok = command_fill_batch(context, cursor, collection, &batch, &exhausted, error);
    storage_unlock(storage);
    cursor_table_release(context->store->cursors, cursor, !ok || exhausted);
    if (ok) {
        append_cursor_reply(reply, "nextBatch", &batch, exhausted ? 0 : cursor_id, ns);
    }
fail:
    bson_destroy(&batch.array);
    bson_free(ns);
    return ok;
}

static bool handle_kill_cursors(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter, ids;
    char *ns = NULL;
    if (!command_namespace(context, &ns, error)) {
        return false;
    }
    if (!bson_iter_init_find(&iter, context->command, "cursors") || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        bson_free(ns);
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field 'killCursors.cursors' is missing but a required field");
    }
    bson_t killed, not_found, alive, unknown;
    bson_t killed_list = BSON_INITIALIZER, missing_list = BSON_INITIALIZER;
    uint32_t killed_count = 0, missing_count = 0;
    bson_iter_recurse(&iter, &ids);
    while (bson_iter_next(&ids)) {
        if (!BSON_ITER_HOLDS_INT64(&ids)) {
            bson_destroy(&killed_list);
            bson_destroy(&missing_list);
            bson_free(ns);
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field 'killCursors.cursors' is the wrong type, expected type 'long'");
        }
        int64_t id = bson_iter_int64(&ids);
        char key[16];
        const char *key_string;
        if (cursor_table_kill(context->store->cursors, id, ns)) {
            bson_uint32_to_string(killed_count++, &key_string, key, sizeof key);
            BSON_APPEND_INT64(&killed_list, key_string, id);
        } else {
            bson_uint32_to_string(missing_count++, &key_string, key, sizeof key);
            BSON_APPEND_INT64(&missing_list, key_string, id);
        }
    }
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsKilled", &killed);
    bson_concat(&killed, &killed_list);
    bson_append_array_end(reply, &killed);
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsNotFound", &not_found);
    bson_concat(&not_found, &missing_list);
    bson_append_array_end(reply, &not_found);
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsAlive", &alive);
    bson_append_array_end(reply, &alive);
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsUnknown", &unknown);
    bson_append_array_end(reply, &unknown);
    bson_destroy(&killed_list);
    bson_destroy(&missing_list);
    bson_free(ns);
    return true;
}

/* --- count ------------------------------------------------------------------------- */

static bool count_emit(void *context, const bson_t *document, int64_t record_id)
{
    (void)document, (void)record_id;
    (*(int64_t *)context)++;
    return true;
}

/* Runs a plan to the end inside one read transaction, calling emit for each result. */
static bool run_plan_to_end(command_context_t *context, find_plan_t *plan, collection_t *collection,
                            find_emit_fn emit, void *emit_context, bson_error_t *error)
{
    bool exhausted = false;
    if (!storage_begin(context->session, error)) {
        return false;
    }
    bool ok = find_plan_run(plan, context->session, collection, emit, emit_context, &exhausted, error);
    storage_rollback(context->session);
    return ok;
}

static bool parse_count(command_context_t *context, char **out_ns, bson_t *query, bson_t *hint,
                        find_options_t *options, bson_error_t *error)
{
    memset(options, 0, sizeof *options);
    if (!command_namespace(context, out_ns, error) || !command_get_document(context, "query", query, error) ||
        !read_hint(context, options, hint, error) || !command_get_int64(context, "skip", 0, &options->skip, error) ||
        !command_get_int64(context, "limit", 0, &options->limit, error)) {
        return false;
    }
    if (options->limit < 0) {
        options->limit = -options->limit; /* count treats a negative limit as its absolute value */
    }
    options->filter = query;
    options->expression_context = context->expression_context;
    return true;
}

static bool handle_count(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    char *ns = NULL;
    bson_t query, hint;
    find_options_t options;
    storage_t *storage = context->store->storage;
    int64_t count = 0;
    bool ok = false;
    bool on_view;
    bool view_ok = views_answer_read(context, reply, &on_view, error);
    if (!view_ok || on_view) {
        return view_ok;
    }
    if (!parse_count(context, &ns, &query, &hint, &options, error)) {
        bson_free(ns);
        return false;
    }
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, ns);
    find_plan_t *plan = find_plan_new(context->session, collection, &options, error);
    if (plan != NULL) {
        ok = run_plan_to_end(context, plan, collection, count_emit, &count, error);
    }
    storage_unlock(storage);
    find_plan_destroy(plan);
    bson_free(ns);
    if (ok) {
        BSON_APPEND_INT32(reply, "n", (int32_t)count);
    }
    return ok;
}

/* --- distinct ---------------------------------------------------------------------- */

typedef struct distinct_state {
    const char *path;
    bson_value_t *values;
    size_t count;
    size_t capacity;
    size_t bytes;
    const collation_t *collation; /* the command's: "a" and "A" are one value at strength 2 */
} distinct_state_t;

static void distinct_add(distinct_state_t *state, const bson_value_t *value)
{
    for (size_t i = 0; i < state->count; i++) {
        if (order_compare_values_collated(&state->values[i], value, state->collation) == 0) {
            return;
        }
    }
    if (state->count == state->capacity) {
        state->capacity = state->capacity ? state->capacity * 2 : 16;
        state->values = bson_realloc(state->values, state->capacity * sizeof(bson_value_t));
    }
    bson_value_copy(value, &state->values[state->count++]);
}

/* Collects the values at path, descending into arrays of sub-documents and
 * adding each element of an array found at the end of the path. */
static void distinct_collect(distinct_state_t *state, const bson_t *document, const char *path)
{
    const char *dot = strchr(path, '.');
    size_t length = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t iter;
    if (!bson_iter_init(&iter, document)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        if (strlen(bson_iter_key(&iter)) != length || strncmp(bson_iter_key(&iter), path, length) != 0) {
            continue;
        }
        if (dot == NULL) {
            if (BSON_ITER_HOLDS_ARRAY(&iter)) {
                bson_iter_t items;
                bson_iter_recurse(&iter, &items);
                while (bson_iter_next(&items)) {
                    distinct_add(state, bson_iter_value(&items));
                }
            } else {
                distinct_add(state, bson_iter_value(&iter));
            }
            return;
        }
        uint32_t child_length;
        const uint8_t *child_data;
        bson_t child;
        if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            bson_iter_document(&iter, &child_length, &child_data);
            bson_init_static(&child, child_data, child_length);
            distinct_collect(state, &child, dot + 1);
        } else if (BSON_ITER_HOLDS_ARRAY(&iter)) {
            bson_iter_t items;
            bson_iter_recurse(&iter, &items);
            while (bson_iter_next(&items)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&items)) {
                    bson_iter_document(&items, &child_length, &child_data);
                    bson_init_static(&child, child_data, child_length);
                    distinct_collect(state, &child, dot + 1);
                }
            }
        }
        return;
    }
}

static bool distinct_emit(void *context, const bson_t *document, int64_t record_id)
{
    (void)record_id;
    distinct_state_t *state = context;
    distinct_collect(state, document, state->path);
    return true;
}

static int compare_values_for_qsort(const void *left, const void *right, void *collation)
{
    return order_compare_values_collated(left, right, collation);
}

static bool handle_distinct(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    char *ns = NULL;
    bson_t query;
    find_options_t options = {0};
    distinct_state_t state = {0};
    storage_t *storage = context->store->storage;
    bool ok = false;
    bool on_view;
    bool view_ok = views_answer_read(context, reply, &on_view, error);
    if (!view_ok || on_view) {
        return view_ok;
    }
    if (!command_namespace(context, &ns, error) || !command_get_document(context, "query", &query, error)) {
        bson_free(ns);
        return false;
    }
    if (!bson_iter_init_find(&iter, context->command, "key") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        bson_free(ns);
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field 'distinct.key' is missing but a required field");
    }
    state.path = bson_iter_utf8(&iter, NULL);
    options.filter = &query;
    options.expression_context = context->expression_context;
    state.collation = context->expression_context->collation;
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, ns);
    find_plan_t *plan = find_plan_new(context->session, collection, &options, error);
    if (plan != NULL) {
        ok = run_plan_to_end(context, plan, collection, distinct_emit, &state, error);
    }
    storage_unlock(storage);
    find_plan_destroy(plan);
    if (ok) {
        if (state.count > 1) {
            qsort_r(state.values, state.count, sizeof(bson_value_t), compare_values_for_qsort,
                    (void *)state.collation);
        }
        bson_t values;
        BSON_APPEND_ARRAY_BEGIN(reply, "values", &values);
        for (size_t i = 0; i < state.count; i++) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
            bson_append_value(&values, key_string, -1, &state.values[i]);
        }
        bson_append_array_end(reply, &values);
    }
    for (size_t i = 0; i < state.count; i++) {
        bson_value_destroy(&state.values[i]);
    }
    bson_free(state.values);
    bson_free(ns);
    return ok;
}

/* --- explain -------------------------------------------------------------------------- */

static bool discard_emit(void *context, const bson_t *document, int64_t record_id)
{
    (void)document, (void)record_id;
    (*(int64_t *)context)++;
    return true;
}

/* An explained write names one statement (mongod explains no batch): its filter,
 * and the stage the write runs over the plan. findAndModify's query may be absent. */
static bool parse_explained_write(command_context_t *context, char **out_ns, bson_t *out_query,
                                  const char **out_stage, bson_error_t *error)
{
    bson_iter_t iter, statements, statement, rest;
    bool is_update = strcmp(context->name, "update") == 0;
    if (!command_namespace(context, out_ns, error)) {
        return false;
    }
    if (strcmp(context->name, "findAndModify") == 0 || strcmp(context->name, "findandmodify") == 0) {
        *out_stage = bson_iter_init_find(&iter, context->command, "remove") && bson_iter_as_bool(&iter) ? "DELETE"
                                                                                                       : "UPDATE";
        return command_get_document(context, "query", out_query, error);
    }
    *out_stage = is_update ? "UPDATE" : "DELETE";
    bool one_statement = bson_iter_init_find(&iter, context->command, is_update ? "updates" : "deletes") &&
                         BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &statements) &&
                         bson_iter_next(&statements);
    if (one_statement) {
        rest = statements;
        one_statement = !bson_iter_next(&rest);
    }
    if (!one_statement) {
        return tc_error_set(error, TC_ERR_INVALID_LENGTH, "explained write batches must be of size 1");
    }
    bson_init(out_query);
    if (!BSON_ITER_HOLDS_DOCUMENT(&statements) || !bson_iter_recurse(&statements, &statement) ||
        !bson_iter_find(&statement, "q") || !BSON_ITER_HOLDS_DOCUMENT(&statement)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field '%s.%s.q' is missing but a required field",
                            is_update ? "update" : "delete", is_update ? "updates" : "deletes");
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&statement, &length, &data);
    return bson_init_static(out_query, data, length);
}

/* queryPlanner of a write: the read plan under the write's own stage, as mongod
 * shows it ({stage: "UPDATE", inputStage: {...}}). */
static void append_write_query_planner(const find_plan_t *plan, const char *ns, const char *stage, bson_t *out)
{
    bson_t planner = BSON_INITIALIZER;
    bson_iter_t iter;
    find_plan_append_query_planner(plan, ns, &planner);
    bson_iter_init(&iter, &planner);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "winningPlan") == 0) {
            bson_t wrapped;
            BSON_APPEND_DOCUMENT_BEGIN(out, "winningPlan", &wrapped);
            BSON_APPEND_UTF8(&wrapped, "stage", stage);
            bson_append_iter(&wrapped, "inputStage", -1, &iter);
            bson_append_document_end(out, &wrapped);
        } else {
            bson_append_iter(out, bson_iter_key(&iter), -1, &iter);
        }
    }
    bson_destroy(&planner);
}

void command_append_explain_server_info(const command_context_t *context, const bson_t *explained, bson_t *reply)
{
    bson_t server_info;
    BSON_APPEND_DOCUMENT(reply, "command", explained);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "serverInfo", &server_info);
    BSON_APPEND_UTF8(&server_info, "host", "thermocline-store");
    BSON_APPEND_INT32(&server_info, "port", server_port(context->store->server));
    BSON_APPEND_UTF8(&server_info, "version", "6.0.0");
    bson_append_document_end(reply, &server_info);
}

/* explain {aggregate: ...} is aggregate {explain: true}, which answers it (with its
 * serverInfo). */
static bool explain_aggregate(command_context_t *context, bson_t *inner, bson_t *reply, bson_error_t *error)
{
    if (!bson_has_field(inner, "explain")) {
        BSON_APPEND_BOOL(inner, "explain", true);
    }
    context->command = inner;
    return command_aggregate(context, reply, error);
}

static bool handle_explain(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    bson_t explained;
    storage_t *storage = context->store->storage;
    if (!command_get_document(context, "explain", &explained, error)) {
        return false;
    }
    const char *verbosity = "allPlansExecution";
    if (bson_iter_init_find(&iter, context->command, "verbosity")) {
        if (!BSON_ITER_HOLDS_UTF8(&iter)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "verbosity must be a string");
        }
        verbosity = bson_iter_utf8(&iter, NULL);
        if (strcmp(verbosity, "queryPlanner") != 0 && strcmp(verbosity, "executionStats") != 0 &&
            strcmp(verbosity, "allPlansExecution") != 0) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "verbosity string must be one of {'queryPlanner', "
                                "'executionStats', 'allPlansExecution'}");
        }
    }
    if (!bson_iter_init(&iter, &explained) || !bson_iter_next(&iter)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "explain command requires a nested object");
    }
    /* The explained command, with this command's $db, read as a command of its own. */
    bson_t inner = BSON_INITIALIZER;
    bson_concat(&inner, &explained);
    if (!bson_has_field(&inner, "$db")) {
        BSON_APPEND_UTF8(&inner, "$db", context->database);
    }
    command_context_t inner_context = *context;
    inner_context.command = &inner;
    inner_context.name = bson_iter_key(&iter);
    /* The explained command's collation decides its plan, as it would decide its run. */
    expression_context_t inner_expression = *context->expression_context;
    const collation_t *inner_collation = NULL;
    inner_context.expression_context = &inner_expression;

    char *ns = NULL;
    find_request_t request;
    bson_t query, hint;
    find_options_t count_options = {0};
    find_options_t *options = NULL;
    const char *write_stage = NULL;
    bool ok = false;
    memset(&request, 0, sizeof request);
    const char *name = inner_context.name;
    TC_CHECK(command_collation_resolve(&inner_context, &inner_expression, &inner_collation, error));
    count_options.expression_context = &inner_expression;
    bool on_view = false;
    if (strcmp(name, "find") == 0 || strcmp(name, "count") == 0 || strcmp(name, "distinct") == 0) {
        ok = views_explain_read(&inner_context, reply, &on_view, error);
        if (!ok || on_view) {
            goto done;
        }
        ok = false;
    }
    if (strcmp(name, "find") == 0) {
        TC_CHECK(parse_find(&inner_context, &request, error));
        ns = request.ns;
        request.ns = NULL;
        options = &request.options;
    } else if (strcmp(name, "count") == 0) {
        TC_CHECK(parse_count(&inner_context, &ns, &query, &hint, &count_options, error));
        options = &count_options;
    } else if (strcmp(name, "distinct") == 0) {
        TC_CHECK(command_namespace(&inner_context, &ns, error));
        TC_CHECK(command_get_document(&inner_context, "query", &query, error));
        count_options.filter = &query;
        options = &count_options;
    } else if (strcmp(name, "update") == 0 || strcmp(name, "delete") == 0 || strcmp(name, "findAndModify") == 0 ||
               strcmp(name, "findandmodify") == 0) {
        TC_CHECK(parse_explained_write(&inner_context, &ns, &query, &write_stage, error));
        count_options.filter = &query;
        options = &count_options;
    } else if (strcmp(name, "aggregate") == 0) {
        ok = explain_aggregate(&inner_context, &inner, reply, error);
        goto done;
    } else {
        tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED, "Explain for %s is not supported by thermocline store; "
                     "explain supports find, count, distinct, aggregate, update, delete and findAndModify",
                     name);
        goto done;
    }

    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, ns);
    find_plan_t *plan = find_plan_new(context->session, collection, options, error);
    if (plan != NULL) {
        bson_t planner;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "queryPlanner", &planner);
        if (write_stage != NULL) {
            append_write_query_planner(plan, ns, write_stage, &planner);
        } else {
            find_plan_append_query_planner(plan, ns, &planner);
        }
        bson_append_document_end(reply, &planner);
        ok = true;
        if (strcmp(verbosity, "queryPlanner") != 0) {
            int64_t started = clock_monotonic_ms(), returned = 0;
            ok = run_plan_to_end(context, plan, collection, discard_emit, &returned, error);
            if (ok) {
                bson_t stats;
                BSON_APPEND_DOCUMENT_BEGIN(reply, "executionStats", &stats);
                find_plan_append_execution_stats(plan, clock_monotonic_ms() - started, &stats);
                bson_append_document_end(reply, &stats);
            }
        }
    }
    storage_unlock(storage);
    find_plan_destroy(plan);
    if (ok) {
        command_append_explain_server_info(context, &explained, reply);
    }
done:
    bson_free(request.ns);
    bson_free(ns);
    bson_destroy(&inner);
    collation_release(inner_collation);
    return ok;
}

const command_definition_t read_commands[] = {
    {"find", handle_find},
    {"getMore", handle_get_more},
    {"killCursors", handle_kill_cursors},
    {"count", handle_count},
    {"distinct", handle_distinct},
    {"explain", handle_explain},
    {NULL, NULL},
};
