/* aggregate: the pipeline (query/pipeline.h) fed by a find plan, so a leading
 * $match (and $sort) uses an index. Results stream through a cursor: each
 * batch pulls from the pipeline in a fresh read transaction, and the plan under
 * it resumes where it stopped, as a find cursor does. On a view, the plan reads
 * the collection under it and the views' pipelines come first (views.c). */
#include "store/commands.h"
#include "query/pipeline.h"
#include "store/change_stream.h"

#include <string.h>

#define SOURCE_BUFFER_SIZE 128

typedef struct aggregation {
    pipeline_t *pipeline;
    pipeline_run_t *run;
    find_plan_t *plan;
    char *source_ns; /* the collection the plan reads: the command's, or the one under its view */
    bson_t *buffer[SOURCE_BUFFER_SIZE]; /* documents read from the plan, not yet handed on */
    size_t buffered;
    size_t next;
    bool source_exhausted;
    bson_t *pending; /* a result the last batch had no room for */
    /* {aggregate: 1}: the documents of its $documents stage, the source instead of a plan. */
    bson_t *literal;
    bson_iter_t literal_iter;
    bson_t literal_current; /* a view of the element handed on last */
    /* Valid during one fill: where the plan reads from. */
    storage_session_t *session;
    collection_t *collection;
} aggregation_t;

static void release_buffer(aggregation_t *aggregation)
{
    for (size_t i = 0; i < aggregation->buffered; i++) {
        bson_destroy(aggregation->buffer[i]);
    }
    aggregation->buffered = 0;
    aggregation->next = 0;
}

static void aggregation_destroy(void *pointer)
{
    aggregation_t *aggregation = pointer;
    if (aggregation == NULL) {
        return;
    }
    release_buffer(aggregation);
    if (aggregation->pending != NULL) {
        bson_destroy(aggregation->pending);
    }
    pipeline_run_destroy(aggregation->run);
    pipeline_destroy(aggregation->pipeline);
    find_plan_destroy(aggregation->plan);
    bson_free(aggregation->source_ns);
    if (aggregation->literal != NULL) {
        bson_destroy(aggregation->literal);
    }
    bson_free(aggregation);
}

static bool buffer_emit(void *context, const bson_t *document, int64_t record_id)
{
    aggregation_t *aggregation = context;
    (void)record_id;
    if (aggregation->buffered == SOURCE_BUFFER_SIZE) {
        return false;
    }
    aggregation->buffer[aggregation->buffered++] = bson_copy(document);
    return true;
}

/* The pipeline's source: documents from the plan, a buffer at a time. A handed-on
 * document stays valid until the next call. */
static bool pull_source(void *context, const bson_t **out_document, bson_error_t *error)
{
    aggregation_t *aggregation = context;
    if (aggregation->literal != NULL) {
        /* Elements were checked to be documents when $documents was evaluated. */
        const bson_value_t *value = bson_iter_next(&aggregation->literal_iter) ? bson_iter_value(&aggregation->literal_iter)
                                                                             : NULL;
        *out_document = value != NULL && bson_init_static(&aggregation->literal_current, value->value.v_doc.data,
                                                          value->value.v_doc.data_len)
                            ? &aggregation->literal_current
                            : NULL;
        return true;
    }
    if (aggregation->next < aggregation->buffered) {
        *out_document = aggregation->buffer[aggregation->next++];
        return true;
    }
    release_buffer(aggregation);
    if (aggregation->source_exhausted || aggregation->collection == NULL) {
        *out_document = NULL;
        return true;
    }
    if (!find_plan_run(aggregation->plan, aggregation->session, aggregation->collection, buffer_emit, aggregation,
                       &aggregation->source_exhausted, error)) {
        return false;
    }
    if (aggregation->buffered == 0) {
        *out_document = NULL;
        return true;
    }
    *out_document = aggregation->buffer[aggregation->next++];
    return true;
}

bool aggregation_fill_batch(command_context_t *context, void *pointer, collection_t *cursor_collection,
                            batch_builder_t *batch, bool *out_exhausted, bson_error_t *error)
{
    aggregation_t *aggregation = pointer;
    /* The cursor's namespace may be a view's: the plan reads its own source. */
    (void)cursor_collection;
    collection_t *collection = storage_find_collection(context->store->storage, aggregation->source_ns);
    bool ok = storage_begin(context->session, error);
    *out_exhausted = false;
    if (!ok) {
        return false;
    }
    aggregation->session = context->session;
    aggregation->collection = collection;
    if (aggregation->pending != NULL) {
        batch_builder_emit(batch, aggregation->pending, 0); /* first in an empty batch: always fits */
        bson_destroy(aggregation->pending);
        aggregation->pending = NULL;
    }
    while (batch->limit == 0 || batch->count < batch->limit) {
        bson_t document;
        bool end;
        ok = pipeline_next(aggregation->run, &document, &end, error);
        if (!ok || end) {
            *out_exhausted = ok && end; /* out_document untouched either way */
            break;
        }
        if (!batch_builder_emit(batch, &document, 0)) {
            aggregation->pending = bson_copy(&document);
            bson_destroy(&document);
            break;
        }
        bson_destroy(&document);
    }
    aggregation->session = NULL;
    aggregation->collection = NULL;
    storage_rollback(context->session);
    return ok;
}

typedef struct aggregate_request {
    bson_t pipeline;        /* a view of the command's pipeline */
    const bson_t *stages;   /* what the plan's pipeline runs: the command's, less a source or output stage */
    bool explain;
    bool allow_disk_use;
    int64_t batch_size;
} aggregate_request_t;

static bool parse_aggregate(command_context_t *context, aggregate_request_t *request, bson_error_t *error)
{
    bson_iter_t iter;
    bson_t cursor_options;
    if (!bson_iter_init_find(&iter, context->command, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "'pipeline' option must be specified as an array");
    }
    const bson_value_t *value = bson_iter_value(&iter);
    bson_init_static(&request->pipeline, value->value.v_doc.data, value->value.v_doc.data_len);
    request->stages = &request->pipeline;
    if (!command_get_bool(context, "explain", false, &request->explain, error) ||
        !command_get_bool(context, "allowDiskUse", true, &request->allow_disk_use, error) ||
        !command_get_document(context, "cursor", &cursor_options, error)) {
        return false;
    }
    if (!request->explain && !bson_has_field(context->command, "cursor")) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "The 'cursor' option is required, except for aggregate with the explain argument");
    }
    request->batch_size = 101;
    if (bson_iter_init_find(&iter, &cursor_options, "batchSize")) {
        if (!BSON_ITER_HOLDS_NUMBER(&iter) || bson_iter_as_int64(&iter) < 0) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "cursor.batchSize must be a non-negative number");
        }
        request->batch_size = bson_iter_as_int64(&iter);
    }
    return true;
}

/* --- {aggregate: 1} ------------------------------------------------------------ */

/* The name of the first stage (*out_argument its value), or NULL. */
static const char *first_stage(const bson_t *stages, bson_iter_t *out_argument)
{
    bson_iter_t iter;
    if (bson_iter_init(&iter, stages) && bson_iter_next(&iter) && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, out_argument) && bson_iter_next(out_argument)) {
        return bson_iter_key(out_argument);
    }
    return NULL;
}

/* Evaluates $documents' expression into aggregation's source: an array of
 * documents, or 5858203 / 5858204. */
static bool evaluate_documents(command_context_t *context, bson_iter_t *argument, aggregation_t *aggregation,
                               bson_error_t *error)
{
    bson_value_t value = {.value_type = BSON_TYPE_EOD};
    bson_iter_t item;
    expression_t *expression = expression_compile_with_variables(bson_iter_value(argument),
                                                                 context->expression_context != NULL
                                                                     ? context->expression_context->variables
                                                                     : NULL,
                                                                 error);
    bson_t no_document = BSON_INITIALIZER; /* $$ROOT: $documents reads no collection */
    bool ok = expression != NULL &&
              expression_evaluate(expression, &no_document, context->expression_context, &value, error);
    expression_destroy(expression);
    if (ok && value.value_type != BSON_TYPE_ARRAY) {
        ok = tc_error_set(error, 5858203, "error during $documents stage: argument must evaluate to an array");
    }
    if (ok) {
        aggregation->literal = bson_new_from_data(value.value.v_doc.data, value.value.v_doc.data_len);
        bson_iter_init(&item, aggregation->literal);
        while (ok && bson_iter_next(&item)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&item)) {
                ok = tc_error_set(error, 5858204, "error during $documents stage: argument must evaluate to an "
                                  "array of documents");
            }
        }
        bson_iter_init(&aggregation->literal_iter, aggregation->literal);
    }
    bson_value_destroy(&value);
    return ok;
}

/* {aggregate: 1}: its first stage must read no collection. $documents, or the
 * documents of $currentOp or $listLocalSessions (cmd_current_op.c), become the
 * source; the other stages go to out_rest (initialized here). */
static bool take_database_source(command_context_t *context, const bson_t *stages, aggregation_t *aggregation,
                                 bson_t *out_rest, bson_error_t *error)
{
    bson_iter_t argument, iter;
    uint32_t count = 0;
    bson_init(out_rest);
    const char *name = first_stage(stages, &argument);
    if (name == NULL) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "{aggregate: 1} is not valid for an empty pipeline.");
    }
    if (strcmp(name, "$currentOp") == 0 || strcmp(name, "$listLocalSessions") == 0) {
        bson_t documents;
        bool listed = command_system_source(context, name, &argument, &documents, error);
        aggregation->literal = bson_copy(&documents);
        bson_iter_init(&aggregation->literal_iter, aggregation->literal);
        bson_destroy(&documents);
        if (!listed) {
            return false;
        }
    } else if (strcmp(name, "$documents") != 0) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE,
                            "{aggregate: 1} is not valid for '%s'; a collection is required.", name);
    } else if (!evaluate_documents(context, &argument, aggregation, error)) {
        return false;
    }
    bson_iter_init(&iter, stages);
    bson_iter_next(&iter);
    while (bson_iter_next(&iter)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        bson_append_iter(out_rest, key_string, -1, &iter);
    }
    return true;
}

/* A collection's aggregate may not start with a stage of {aggregate: 1}. */
static bool refuse_database_stage(const bson_t *stages, bson_error_t *error)
{
    bson_iter_t argument;
    const char *name = first_stage(stages, &argument);
    if (name != NULL && strcmp(name, "$documents") == 0) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "'$documents' can only be run with {aggregate: 1}");
    }
    if (name != NULL && (strcmp(name, "$currentOp") == 0 || strcmp(name, "$listLocalSessions") == 0)) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE,
                            "%s must be run against the 'admin' database with {aggregate: 1}", name);
    }
    return true;
}

/* Compiles the views' stages then the command's, and plans the read of the
 * collection under them. Call with the lock held. */
static bool prepare_aggregation(command_context_t *context, const char *ns, const aggregate_request_t *request,
                                aggregation_t *aggregation, bson_t *out_stages, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t iter;
    if (!views_resolve(storage, ns, &aggregation->source_ns, out_stages, error)) {
        return false;
    }
    uint32_t count = bson_count_keys(out_stages);
    bson_iter_init(&iter, request->stages);
    while (bson_iter_next(&iter)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        bson_append_iter(out_stages, key_string, -1, &iter);
    }
    pipeline_options_t pipeline_options = {.allow_disk_use = request->allow_disk_use,
                                           .expression_context = context->expression_context};
    aggregation->pipeline = pipeline_compile(out_stages, &pipeline_options, error);
    if (aggregation->pipeline == NULL) {
        return false;
    }
    find_options_t find_options = {
        .filter = pipeline_leading_match(aggregation->pipeline),
        .sort = pipeline_leading_sort(aggregation->pipeline),
        .expression_context = context->expression_context,
    };
    if (find_options.sort != NULL && pipeline_leading_limit(aggregation->pipeline) > 0) {
        find_options.limit = pipeline_leading_limit(aggregation->pipeline);
    }
    collection_t *collection = storage_find_collection(storage, aggregation->source_ns);
    aggregation->plan = find_plan_new(context->session, collection, &find_options, error);
    return aggregation->plan != NULL;
}

/* Every result of the pipeline, read in one transaction, for $out and $merge
 * to write once the lock is released (*out_documents: free each with
 * bson_destroy(), then the array with bson_free()). Call with the lock held. */
static bool collect_results(command_context_t *context, aggregation_t *aggregation, bson_t ***out_documents,
                            size_t *out_count, bson_error_t *error)
{
    size_t capacity = 0;
    bool ok = storage_begin(context->session, error);
    aggregation->session = context->session;
    aggregation->collection = storage_find_collection(context->store->storage, aggregation->source_ns);
    aggregation->run = pipeline_start(aggregation->pipeline, pull_source, aggregation);
    while (ok) {
        bson_t document;
        bool end;
        ok = pipeline_next(aggregation->run, &document, &end, error);
        if (!ok || end) {
            break;
        }
        if (*out_count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            *out_documents = bson_realloc(*out_documents, capacity * sizeof(bson_t *));
        }
        (*out_documents)[(*out_count)++] = bson_copy(&document);
        bson_destroy(&document);
    }
    aggregation->session = NULL;
    aggregation->collection = NULL;
    storage_rollback(context->session);
    return ok;
}

/* $out or $merge: the results written, and an empty cursor as the reply. */
static bool run_output(command_context_t *context, const char *ns, aggregation_t *aggregation,
                       const aggregate_output_t *output, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_t **documents = NULL;
    size_t count = 0;
    bool ok = collect_results(context, aggregation, &documents, &count, error);
    storage_unlock(storage); /* the writes take it as they need it */
    if (ok) {
        ok = aggregate_output_write(context, output, documents, count, error);
    }
    for (size_t i = 0; i < count; i++) {
        bson_destroy(documents[i]);
    }
    bson_free(documents);
    storage_lock_shared(storage);
    if (ok) {
        bson_t cursor, empty = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
        BSON_APPEND_ARRAY(&cursor, "firstBatch", &empty);
        BSON_APPEND_INT64(&cursor, "id", 0);
        BSON_APPEND_UTF8(&cursor, "ns", ns);
        bson_append_document_end(reply, &cursor);
        bson_destroy(&empty);
    }
    return ok;
}

/* Appends the last element of from to the array to. */
static void append_last_item(bson_t *to, const bson_t *from)
{
    bson_iter_t iter, last;
    bool found = false;
    bson_iter_init(&iter, from);
    while (bson_iter_next(&iter)) {
        last = iter;
        found = true;
    }
    if (found) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(bson_count_keys(to), &key_string, key, sizeof key);
        bson_append_iter(to, key_string, -1, &last);
    }
}

static void append_explain(command_context_t *context, const aggregation_t *aggregation, const bson_t *stages,
                           bson_t *reply)
{
    bson_t planner;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "queryPlanner", &planner);
    find_plan_append_query_planner(aggregation->plan, aggregation->source_ns, &planner);
    bson_append_document_end(reply, &planner);
    BSON_APPEND_ARRAY(reply, "stages", stages);
    command_append_explain_server_info(context, context->command, reply);
}

/* A view has no oplog entries of its own to stream: watch() on one is
 * CommandNotSupportedOnView 166, as on mongod. */
static bool refuse_stream_on_view(command_context_t *context, bson_error_t *error)
{
    bson_iter_t iter;
    char *ns = NULL;
    bson_iter_init(&iter, context->command);
    if (!bson_iter_next(&iter) || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return true;
    }
    if (!command_namespace(context, &ns, error)) {
        return false;
    }
    storage_lock_shared(context->store->storage);
    bool ok = views_refuse(context->store->storage, ns, error);
    storage_unlock(context->store->storage);
    bson_free(ns);
    return ok;
}

bool command_aggregate(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t iter;
    bson_t stages = BSON_INITIALIZER, stages_before_output = BSON_INITIALIZER, stages_after_source = BSON_INITIALIZER;
    char *ns = NULL;
    aggregate_request_t request;
    aggregate_output_t *output = NULL;
    aggregation_t *aggregation = NULL;
    store_cursor_t *cursor = NULL;
    batch_builder_t batch = {0};
    bool locked = false;
    bool ok = false;

    if (change_stream_requested(context->command)) {
        return refuse_stream_on_view(context, error) && change_stream_aggregate(context, reply, error);
    }
    bson_init(&batch.array);
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    bool database_level = BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_double(&iter) == 1.0;
    if (database_level) {
        ns = bson_strdup_printf("%s.$cmd.aggregate", context->database);
    } else if (!BSON_ITER_HOLDS_UTF8(&iter)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                     "Invalid command format: the 'aggregate' field must specify a collection name or 1");
        goto done;
    } else {
        TC_CHECK(command_namespace(context, &ns, error));
    }
    TC_CHECK(parse_aggregate(context, &request, error));
    bson_destroy(&stages_before_output);
    TC_CHECK(aggregate_output_parse(context, request.stages, &stages_before_output, &output, error));
    if (output != NULL) {
        request.stages = &stages_before_output;
    }
    aggregation = BSON_ALIGNED_ALLOC0(aggregation_t);
    if (database_level) {
        bson_destroy(&stages_after_source);
        TC_CHECK(take_database_source(context, request.stages, aggregation, &stages_after_source, error));
        request.stages = &stages_after_source;
    } else {
        TC_CHECK(refuse_database_stage(request.stages, error));
    }
    storage_lock_shared(storage);
    locked = true;
    bson_destroy(&stages);
    TC_CHECK(prepare_aggregation(context, ns, &request, aggregation, &stages, error));
    if (request.explain) {
        if (output != NULL) {
            append_last_item(&stages, &request.pipeline); /* explained, not run: nothing is written */
        }
        append_explain(context, aggregation, &stages, reply);
        ok = true;
        goto done;
    }
    if (output != NULL) {
        ok = run_output(context, ns, aggregation, output, reply, error);
        goto done;
    }
    aggregation->run = pipeline_start(aggregation->pipeline, pull_source, aggregation);
    cursor = store_cursor_new(ns);
    cursor->stream = aggregation;
    cursor->stream_destroy = aggregation_destroy;
    cursor->transaction_id = context->transaction_id;
    cursor->txn_number = context->txn_number;
    aggregation = NULL;
    batch.limit = (uint32_t)(request.batch_size > UINT32_MAX ? UINT32_MAX : request.batch_size);
    bool exhausted = false;
    if (request.batch_size > 0) {
        TC_CHECK(command_fill_batch(context, cursor, NULL, &batch, &exhausted, error));
    }
    storage_unlock(storage);
    locked = false;
    int64_t cursor_id = 0;
    if (!exhausted) {
        cursor_table_add(context->store->cursors, cursor, context->command);
        cursor_id = cursor->id;
        cursor_table_release(context->store->cursors, cursor, false);
        cursor = NULL;
    }
    bson_t cursor_reply;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor_reply);
    BSON_APPEND_ARRAY(&cursor_reply, "firstBatch", &batch.array);
    BSON_APPEND_INT64(&cursor_reply, "id", cursor_id);
    BSON_APPEND_UTF8(&cursor_reply, "ns", ns);
    bson_append_document_end(reply, &cursor_reply);
    ok = true;
done:
    if (locked) {
        storage_unlock(storage);
    }
    aggregation_destroy(aggregation);
    store_cursor_destroy(cursor);
    bson_destroy(&batch.array);
    bson_destroy(&stages);
    bson_destroy(&stages_before_output);
    bson_destroy(&stages_after_source);
    aggregate_output_destroy(output);
    bson_free(ns);
    return ok;
}

const command_definition_t aggregate_commands[] = {
    {"aggregate", command_aggregate},
    {NULL, NULL},
};
