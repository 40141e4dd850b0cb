/* The change stream cursor. Its state is a position: the resume token of the
 * last event it has returned, or a high-water mark (every entry up to a time has
 * been examined). Each batch opens a read transaction, reads the oplog from the
 * position up to the majority time (never past a hole, never an unjournaled
 * write), builds each entry's events, drops those at or before the position,
 * runs the user's stages on the rest, and moves the position on. Nothing else is
 * remembered between batches, so a batch cut short (full, or cut by the byte
 * limit) simply rebuilds the rest of an entry's events next time.
 *
 * awaitData: a getMore that finds nothing asks to be run again after
 * CHANGE_STREAM_POLL_MS until maxTimeMS has passed since its first run. */
#include "store/change_stream.h"
#include "common/clock.h"
#include "common/log.h"
#include "query/pipeline.h"
#include "query/value_format.h"
#include "store/change_event.h"
#include "store/oplog.h"

#include <string.h>

#define CHANGE_STREAM_POLL_MS 10
#define CHANGE_STREAM_DEFAULT_AWAIT_MS 1000
#define CHANGE_STREAM_DEFAULT_BATCH_SIZE 101
/* Entries one batch examines at most, so a stream on a quiet collection of a
 * busy store still answers promptly (its high-water mark moves on). */
#define CHANGE_STREAM_MAX_ENTRIES_PER_BATCH 10000

typedef struct change_stream {
    change_spec_t spec;
    char *database;
    char *collection;
    pipeline_t *pipeline; /* the stages after $changeStream, or NULL */
    change_token_t position;
    bool invalidated;          /* the invalidate was reached: the cursor ends */
    int64_t await_deadline_ms; /* of the getMore being awaited; 0: none */
} change_stream_t;

static void change_stream_destroy(void *pointer)
{
    change_stream_t *stream = pointer;
    if (stream == NULL) {
        return;
    }
    pipeline_destroy(stream->pipeline);
    bson_free(stream->database);
    bson_free(stream->collection);
    bson_free(stream);
}

bool change_stream_is_cursor(const store_cursor_t *cursor)
{
    return cursor->stream != NULL && cursor->stream_destroy == change_stream_destroy;
}

bool change_stream_requested(const bson_t *command)
{
    bson_iter_t iter, stages, stage;
    if (!bson_iter_init_find(&iter, command, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&iter) ||
        !bson_iter_recurse(&iter, &stages) || !bson_iter_next(&stages) || !BSON_ITER_HOLDS_DOCUMENT(&stages) ||
        !bson_iter_recurse(&stages, &stage) || !bson_iter_next(&stage)) {
        return false;
    }
    return strcmp(bson_iter_key(&stage), "$changeStream") == 0;
}

/* The smallest entry time the stream still needs: an event position needs its
 * own entry again (for the events that follow it there, e.g. an invalidate). */
static uint64_t first_needed_time(const change_token_t *position)
{
    if (position->kind == CHANGE_TOKEN_HIGH_WATER_MARK) {
        return position->time + 1;
    }
    return position->time;
}

static bool history_lost(bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_CHANGE_STREAM_HISTORY_LOST,
                        "Resume of change stream was not possible, as the resume point may no longer be in the "
                        "oplog.");
}

const char *change_stream_error_label(const bson_error_t *error)
{
    bool non_resumable = error->domain == TC_ERROR_DOMAIN && (error->code == TC_ERR_CHANGE_STREAM_FATAL_ERROR ||
                                                              error->code == TC_ERR_CHANGE_STREAM_HISTORY_LOST);
    return non_resumable ? "NonResumableChangeStreamError" : NULL;
}

/* --- reading a batch --------------------------------------------------------------- */

typedef struct capture {
    bson_t document;
    bool found;
} capture_t;

static bool capture_first(void *pointer, const bson_t *document, int64_t record_id)
{
    capture_t *capture = pointer;
    (void)record_id;
    if (capture->found) {
        return false;
    }
    bson_copy_to(document, &capture->document);
    capture->found = true;
    return true;
}

/* fullDocument: "updateLookup": the document as the batch's snapshot holds it. */
static bool lookup_document(void *pointer, const char *ns, const bson_t *document_key, bson_t *out_document,
                            bool *out_found, bson_error_t *error)
{
    command_context_t *context = pointer;
    capture_t capture = {.found = false};
    bool exhausted;
    *out_found = false;
    collection_t *collection = storage_find_collection(context->store->storage, ns);
    if (collection == NULL) {
        return true;
    }
    find_options_t options = {.filter = document_key, .limit = 1};
    find_plan_t *plan = find_plan_new(context->session, collection, &options, error);
    if (plan == NULL) {
        return false;
    }
    bool ok = find_plan_run(plan, context->session, collection, capture_first, &capture, &exhausted, error);
    find_plan_destroy(plan);
    if (ok && capture.found) {
        bson_steal(out_document, &capture.document);
        *out_found = true;
    } else if (capture.found) {
        bson_destroy(&capture.document);
    }
    return ok;
}

typedef struct single_source {
    const bson_t *document;
    bool given;
} single_source_t;

static bool pull_single(void *pointer, const bson_t **out_document, bson_error_t *error)
{
    single_source_t *source = pointer;
    (void)error;
    *out_document = source->given ? NULL : source->document;
    source->given = true;
    return true;
}

/* Whether the stages left the event's _id (its resume token) as it was. */
static bool same_resume_token(const bson_t *result, const bson_t *event)
{
    bson_iter_t kept, original;
    if (!bson_iter_init_find(&kept, result, "_id") || !bson_iter_init_find(&original, event, "_id") ||
        !BSON_ITER_HOLDS_DOCUMENT(&kept)) {
        return false;
    }
    const bson_value_t *kept_value = bson_iter_value(&kept);
    const bson_value_t *original_value = bson_iter_value(&original);
    return kept_value->value.v_doc.data_len == original_value->value.v_doc.data_len &&
           memcmp(kept_value->value.v_doc.data, original_value->value.v_doc.data,
                  original_value->value.v_doc.data_len) == 0;
}

/* Runs the user's stages on one event; *out_kept false when they drop it. The
 * allowed stages map one document to at most one. */
static bool apply_stages(change_stream_t *stream, const bson_t *event, bson_t *out, bool *out_kept,
                         bson_error_t *error)
{
    *out_kept = false;
    if (stream->pipeline == NULL) {
        bson_copy_to(event, out);
        *out_kept = true;
        return true;
    }
    single_source_t source = {.document = event};
    pipeline_run_t *run = pipeline_start(stream->pipeline, pull_single, &source);
    bool end = true;
    bool ok = pipeline_next(run, out, &end, error);
    pipeline_run_destroy(run);
    if (!ok) {
        return false;
    }
    *out_kept = !end;
    if (end) {
        return true;
    }
    if (!same_resume_token(out, event)) {
        bson_destroy(out);
        *out_kept = false;
        return tc_error_set(error, TC_ERR_CHANGE_STREAM_FATAL_ERROR,
                            "Encountered an event whose _id field, which contains the resume token, was modified "
                            "by the pipeline. Modifying the _id field of an event makes it impossible to resume "
                            "the stream from that point. Only transformations that retain the unmodified _id "
                            "field are allowed.");
    }
    return true;
}

typedef enum batch_stop {
    BATCH_CAUGHT_UP, /* read every entry up to the majority time */
    BATCH_FULL,      /* the batch holds as many events (or bytes) as it may */
    BATCH_SCAN_LIMIT,
    BATCH_INVALIDATED,
} batch_stop_t;

/* Adds the events of one entry past the position to batch. */
static bool add_entry_events(command_context_t *context, change_stream_t *stream, const bson_t *entry,
                             uint64_t time, batch_builder_t *batch, batch_stop_t *out_stop, bson_error_t *error)
{
    change_events_t events;
    bool ok = change_events_build(entry, time, &stream->spec, lookup_document, context, &events, error);
    for (size_t i = 0; ok && i < events.count; i++) {
        if (change_token_compare(&events.tokens[i], &stream->position) <= 0) {
            continue;
        }
        bson_t result;
        bool kept;
        if (batch->limit > 0 && batch->count >= batch->limit) {
            *out_stop = BATCH_FULL;
            break;
        }
        ok = apply_stages(stream, events.documents[i], &result, &kept, error);
        if (!ok) {
            break;
        }
        if (kept) {
            bool fits = batch_builder_emit(batch, &result, 0);
            bson_destroy(&result);
            if (!fits) {
                *out_stop = BATCH_FULL;
                break;
            }
        }
        stream->position = events.tokens[i];
        if (events.tokens[i].kind == CHANGE_TOKEN_INVALIDATE) {
            stream->invalidated = true;
            *out_stop = BATCH_INVALIDATED;
            break;
        }
    }
    change_events_cleanup(&events);
    return ok;
}

static bool fill_batch(command_context_t *context, change_stream_t *stream, batch_builder_t *batch,
                       bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    oplog_t *oplog = oplog_for(storage);
    uint64_t visible = oplog_majority_time(oplog);
    change_token_t caught_up = {.time = visible, .kind = CHANGE_TOKEN_HIGH_WATER_MARK};
    if (change_token_compare(&stream->position, &caught_up) >= 0) {
        return true; /* nothing committed past the position yet */
    }
    uint64_t from = first_needed_time(&stream->position);
    uint64_t trimmed = 0;
    batch_stop_t stop = BATCH_CAUGHT_UP;
    oplog_scan_t *scan = NULL;
    bool ok = false;

    storage_lock_shared(storage);
    TC_CHECK(storage_begin(context->session, error));
    scan = oplog_scan_open(context->session, from, &trimmed, error);
    TC_CHECK(scan != NULL);
    if (trimmed >= from) {
        history_lost(error);
        goto done;
    }
    for (int examined = 0;; examined++) {
        uint64_t time;
        bson_t entry;
        bool end;
        TC_CHECK(oplog_scan_next(scan, &time, &entry, &end, error));
        if (end || time > visible) {
            break;
        }
        if (examined == CHANGE_STREAM_MAX_ENTRIES_PER_BATCH) {
            stop = BATCH_SCAN_LIMIT;
            break;
        }
        TC_CHECK(add_entry_events(context, stream, &entry, time, batch, &stop, error));
        if (stop != BATCH_CAUGHT_UP) {
            break;
        }
        stream->position = (change_token_t){.time = time, .kind = CHANGE_TOKEN_HIGH_WATER_MARK};
    }
    if (stop == BATCH_CAUGHT_UP && change_token_compare(&stream->position, &caught_up) < 0) {
        stream->position = caught_up;
    }
    ok = true;
done:
    oplog_scan_close(scan);
    storage_rollback(context->session);
    storage_unlock(storage);
    return ok;
}

static void append_cursor_reply(bson_t *reply, const char *batch_name, batch_builder_t *batch,
                                const change_stream_t *stream, int64_t cursor_id, const char *ns)
{
    bson_t cursor;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    bson_append_array(&cursor, batch_name, -1, &batch->array);
    change_token_append(&cursor, "postBatchResumeToken", &stream->position);
    BSON_APPEND_INT64(&cursor, "id", cursor_id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
}

/* --- opening ------------------------------------------------------------------------ */

typedef struct stream_options {
    bson_t resume_after;
    bool has_resume_after;
    bson_t start_after;
    bool has_start_after;
    uint32_t start_seconds, start_increment;
    bool has_start_time;
    bool all_changes_for_cluster;
    change_full_document_t full_document;
    change_before_change_t before_change;
    bool show_expanded_events;
} stream_options_t;

static bool option_document(bson_iter_t *iter, bson_t *out, bool *out_present, bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '$changeStream.%s' is the wrong type '%s', expected type 'object'",
                            bson_iter_key(iter), value_type_name(bson_iter_type(iter)));
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(iter, &length, &data);
    bson_init_static(out, data, length);
    *out_present = true;
    return true;
}

static bool option_bool(bson_iter_t *iter, bool *out, bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_BOOL(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '$changeStream.%s' is the wrong type '%s', expected type 'bool'",
                            bson_iter_key(iter), value_type_name(bson_iter_type(iter)));
    }
    *out = bson_iter_bool(iter);
    return true;
}

static bool option_enumeration(bson_iter_t *iter, const char *const *names, int *out, bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_UTF8(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '$changeStream.%s' is the wrong type '%s', expected type 'string'",
                            bson_iter_key(iter), value_type_name(bson_iter_type(iter)));
    }
    const char *value = bson_iter_utf8(iter, NULL);
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(names[i], value) == 0) {
            *out = i;
            return true;
        }
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE,
                        "Enumeration value '%s' for field '$changeStream.%s' is not a valid value.", value,
                        bson_iter_key(iter));
}

static bool parse_stream_options(const bson_value_t *stage, stream_options_t *options, bson_error_t *error)
{
    static const char *const full_document_names[] = {"default", "updateLookup", "whenAvailable", "required",
                                                      NULL};
    static const char *const before_change_names[] = {"off", "whenAvailable", "required", NULL};
    bson_t spec;
    bson_iter_t iter;
    memset(options, 0, sizeof *options);
    if (stage->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, TC_ERR_CHANGE_STREAM_EXPECTS_OBJECT,
                            "$changeStream stage expects a document as argument");
    }
    bson_init_static(&spec, stage->value.v_doc.data, stage->value.v_doc.data_len);
    bson_iter_init(&iter, &spec);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        bool flag;
        int choice;
        if (strcmp(field, "resumeAfter") == 0) {
            TC_CHECK(option_document(&iter, &options->resume_after, &options->has_resume_after, error));
        } else if (strcmp(field, "startAfter") == 0) {
            TC_CHECK(option_document(&iter, &options->start_after, &options->has_start_after, error));
        } else if (strcmp(field, "startAtOperationTime") == 0) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&iter)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "BSON field '$changeStream.startAtOperationTime' is the wrong type '%s', "
                                    "expected type 'timestamp'",
                                    value_type_name(bson_iter_type(&iter)));
            }
            bson_iter_timestamp(&iter, &options->start_seconds, &options->start_increment);
            options->has_start_time = true;
        } else if (strcmp(field, "fullDocument") == 0) {
            TC_CHECK(option_enumeration(&iter, full_document_names, &choice, error));
            options->full_document = (change_full_document_t)choice;
        } else if (strcmp(field, "fullDocumentBeforeChange") == 0) {
            TC_CHECK(option_enumeration(&iter, before_change_names, &choice, error));
            options->before_change = (change_before_change_t)choice;
        } else if (strcmp(field, "allChangesForCluster") == 0) {
            TC_CHECK(option_bool(&iter, &options->all_changes_for_cluster, error));
        } else if (strcmp(field, "showExpandedEvents") == 0) {
            TC_CHECK(option_bool(&iter, &options->show_expanded_events, error));
        } else if (strcmp(field, "showRawUpdateDescription") == 0) {
            TC_CHECK(option_bool(&iter, &flag, error));
            if (flag) {
                return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                                    "thermocline store does not support $changeStream.%s yet", field);
            }
        } else if (strcmp(field, "showMigrationEvents") == 0 || strcmp(field, "allowToRunOnConfigDB") == 0 ||
                   strcmp(field, "allowToRunOnSystemNS") == 0 || strcmp(field, "showSystemEvents") == 0) {
            TC_CHECK(option_bool(&iter, &flag, error)); /* nothing here depends on them */
        } else {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field '$changeStream.%s' is an unknown field.",
                                field);
        }
    }
    return true;
done:
    return false;
}

/* Where the stream is opened: {aggregate: "coll"} or {aggregate: 1}. */
static bool resolve_target(command_context_t *context, const stream_options_t *options, change_stream_t *stream,
                           char **out_cursor_ns, bson_error_t *error)
{
    bson_iter_t iter;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    bool collectionless = BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_double(&iter) == 1.0;
    if (!collectionless && !BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "Invalid command format: the 'aggregate' field must specify a collection name or 1");
    }
    const char *database = context->database;
    const char *collection = collectionless ? NULL : bson_iter_utf8(&iter, NULL);
    bool admin = strcmp(database, "admin") == 0;
    if (options->all_changes_for_cluster && (!admin || !collectionless)) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                            "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' "
                            "database, and with no collection name; found %s.%s",
                            database, collectionless ? "$cmd.aggregate" : collection);
    }
    if (admin ? !options->all_changes_for_cluster : change_event_internal_database(database)) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "$changeStream may not be opened on the internal %s database",
                            database);
    }
    if (collection != NULL && strncmp(collection, "system.", 7) == 0) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE,
                            "$changeStream may not be opened on the internal %s.%s collection", database, collection);
    }
    if (collection != NULL && collection[0] == '\0') {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s.'", database);
    }
    stream->database = bson_strdup(database);
    stream->collection = collection != NULL ? bson_strdup(collection) : NULL;
    stream->spec.scope = options->all_changes_for_cluster ? CHANGE_SCOPE_CLUSTER
                         : collectionless                 ? CHANGE_SCOPE_DATABASE
                                                          : CHANGE_SCOPE_COLLECTION;
    stream->spec.database = stream->database;
    stream->spec.collection = stream->collection;
    stream->spec.full_document = options->full_document;
    stream->spec.full_document_before_change = options->before_change;
    stream->spec.show_expanded_events = options->show_expanded_events;
    *out_cursor_ns = collectionless ? bson_strdup_printf("%s.$cmd.aggregate", database)
                                    : bson_strdup_printf("%s.%s", database, collection);
    return true;
}

/* Checks that the oplog still holds the entry a resume token names. */
static bool check_token_present(command_context_t *context, const change_token_t *token, const bson_t *token_document,
                                bson_error_t *error)
{
    uint64_t trimmed = 0;
    uint64_t time = 0;
    bson_t entry;
    bool end = true;
    bool ok = storage_begin(context->session, error);
    if (!ok) {
        return false;
    }
    oplog_scan_t *scan = oplog_scan_open(context->session, token->time, &trimmed, error);
    ok = scan != NULL && oplog_scan_next(scan, &time, &entry, &end, error);
    oplog_scan_close(scan);
    storage_rollback(context->session);
    if (!ok) {
        return false;
    }
    if (trimmed >= token->time) {
        return history_lost(error);
    }
    if (end || time != token->time) {
        char *json = bson_as_relaxed_extended_json(token_document, NULL);
        tc_error_set(error, TC_ERR_CHANGE_STREAM_FATAL_ERROR, "cannot resume stream; the resume token was not found. %s",
                     json ? json : "");
        bson_free(json);
        return false;
    }
    return true;
}

/* The position a new stream starts from. */
static bool resolve_start(command_context_t *context, const stream_options_t *options, change_stream_t *stream,
                          bson_error_t *error)
{
    oplog_t *oplog = oplog_for(context->store->storage);
    if (options->has_resume_after && options->has_start_after) {
        return tc_error_set(error, TC_ERR_CHANGE_STREAM_RESUME_AND_START,
                            "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage");
    }
    const bson_t *token_document = options->has_resume_after  ? &options->resume_after
                                   : options->has_start_after ? &options->start_after
                                                              : NULL;
    if (token_document != NULL) {
        change_token_t token;
        if (!change_token_parse(token_document, &token, error)) {
            return false;
        }
        if (options->has_start_time) {
            return tc_error_set(error, TC_ERR_CHANGE_STREAM_RESUME_OPTIONS,
                                "Only one type of resume option is allowed, but multiple were found");
        }
        if (options->has_resume_after && token.kind == CHANGE_TOKEN_INVALIDATE) {
            return tc_error_set(error, TC_ERR_INVALID_RESUME_TOKEN,
                                "Attempting to resume a change stream using 'resumeAfter' is not allowed from an "
                                "invalidate notification");
        }
        stream->position = token;
        if ((token.kind == CHANGE_TOKEN_EVENT || token.kind == CHANGE_TOKEN_INVALIDATE) &&
            token.time <= oplog_majority_time(oplog)) {
            return check_token_present(context, &token, token_document, error);
        }
    } else if (options->has_start_time) {
        stream->position = (change_token_t){.time = OPLOG_TIME(options->start_seconds, options->start_increment),
                                            .kind = CHANGE_TOKEN_START};
    } else {
        /* As mongod: from now on. The majority (journaled) time lags the last
         * acknowledged write until the next journal flush, and a stream starting
         * there reported writes made before it was opened (a drop, say). Every
         * write at or below the committed time has ended; later ones show once
         * they are in the journal. */
        stream->position = (change_token_t){.time = oplog_committed_time(oplog),
                                            .kind = CHANGE_TOKEN_HIGH_WATER_MARK};
        return true;
    }
    if (oplog_trimmed_time(oplog) >= first_needed_time(&stream->position)) {
        return history_lost(error);
    }
    return true;
}

/* The stages after $changeStream, compiled, and only those a change stream allows. */
static bool compile_stages(const bson_t *command, change_stream_t *stream, bson_error_t *error)
{
    static const char *const allowed[] = {"$match", "$project", "$addFields", "$set", "$unset",
                                          "$replaceRoot", "$replaceWith", "$redact", NULL};
    bson_iter_t iter, stages;
    bson_t rest = BSON_INITIALIZER;
    uint32_t count = 0;
    bson_iter_init_find(&iter, command, "pipeline");
    bson_iter_recurse(&iter, &stages);
    bson_iter_next(&stages); /* the $changeStream stage */
    while (bson_iter_next(&stages)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        bson_append_iter(&rest, key_string, -1, &stages);
    }
    bool ok = true;
    if (count > 0) {
        stream->pipeline = pipeline_compile(&rest, NULL, error);
        ok = stream->pipeline != NULL;
    }
    bson_iter_init(&stages, &rest);
    while (ok && bson_iter_next(&stages)) {
        bson_iter_t stage;
        bson_iter_recurse(&stages, &stage);
        bson_iter_next(&stage);
        const char *name = bson_iter_key(&stage);
        bool permitted = false;
        for (const char *const *candidate = allowed; *candidate != NULL && !permitted; candidate++) {
            permitted = strcmp(*candidate, name) == 0;
        }
        if (!permitted) {
            ok = tc_error_set(error, TC_ERR_ILLEGAL_OPERATION, "%s is not permitted in a $changeStream pipeline", name);
        }
    }
    bson_destroy(&rest);
    return ok;
}

bool change_stream_aggregate(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    stream_options_t options;
    change_stream_t *stream = BSON_ALIGNED_ALLOC0(change_stream_t);
    store_cursor_t *cursor = NULL;
    char *cursor_ns = NULL;
    batch_builder_t batch = {0};
    bson_t cursor_options;
    bson_iter_t iter, stages;
    bool explain;
    bool ok = false;

    bson_init(&batch.array);
    if (!bson_iter_init_find(&iter, context->command, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        tc_error_set(error, TC_ERR_TYPE_MISMATCH, "'pipeline' option must be specified as an array");
        goto done;
    }
    bson_iter_recurse(&iter, &stages);
    bson_iter_next(&stages);
    bson_iter_t stage;
    bson_iter_recurse(&stages, &stage);
    bson_iter_next(&stage);
    TC_CHECK(parse_stream_options(bson_iter_value(&stage), &options, error));
    if (oplog_for(context->store->storage) == NULL) {
        tc_error_set(error, TC_ERR_CHANGE_STREAM_NOT_REPLICA_SET, "The $changeStream stage is only supported on replica sets");
        goto done;
    }
    TC_CHECK(resolve_target(context, &options, stream, &cursor_ns, error));
    TC_CHECK(compile_stages(context->command, stream, error));
    TC_CHECK(command_get_bool(context, "explain", false, &explain, error));
    if (explain) {
        tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED, "thermocline store cannot explain a $changeStream aggregate");
        goto done;
    }
    TC_CHECK(command_get_document(context, "cursor", &cursor_options, error));
    if (!bson_has_field(context->command, "cursor")) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                     "The 'cursor' option is required, except for aggregate with the explain argument");
        goto done;
    }
    int64_t batch_size = CHANGE_STREAM_DEFAULT_BATCH_SIZE;
    if (bson_iter_init_find(&iter, &cursor_options, "batchSize")) {
        if (!BSON_ITER_HOLDS_NUMBER(&iter) || bson_iter_as_int64(&iter) < 0) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "cursor.batchSize must be a non-negative number");
            goto done;
        }
        batch_size = bson_iter_as_int64(&iter);
    }
    TC_CHECK(resolve_start(context, &options, stream, error));

    batch.limit = (uint32_t)(batch_size > UINT32_MAX ? UINT32_MAX : batch_size);
    if (batch_size > 0) {
        TC_CHECK(fill_batch(context, stream, &batch, error));
    }
    cursor = store_cursor_new(cursor_ns);
    cursor->stream = stream;
    cursor->stream_destroy = change_stream_destroy;
    cursor->tailable = true;
    cursor->await_data = true;
    bool invalidated = stream->invalidated;
    stream = NULL;
    if (invalidated) {
        append_cursor_reply(reply, "firstBatch", &batch, cursor->stream, 0, cursor_ns);
    } else {
        /* Checked out until the reply is built: nothing else can touch it. */
        cursor_table_add(context->store->cursors, cursor, context->command);
        append_cursor_reply(reply, "firstBatch", &batch, cursor->stream, cursor->id, cursor_ns);
        cursor_table_release(context->store->cursors, cursor, false);
        cursor = NULL;
    }
    ok = true;
done:
    store_cursor_destroy(cursor);
    change_stream_destroy(stream);
    bson_destroy(&batch.array);
    bson_free(cursor_ns);
    return ok;
}

/* --- getMore ------------------------------------------------------------------------ */

bool change_stream_get_more(command_context_t *context, store_cursor_t *cursor, int64_t batch_size, bson_t *reply,
                            bson_error_t *error)
{
    change_stream_t *stream = cursor->stream;
    batch_builder_t batch = {0};
    int64_t await_ms;
    bool ok = command_get_int64(context, "maxTimeMS", CHANGE_STREAM_DEFAULT_AWAIT_MS, &await_ms, error);
    if (ok && await_ms < 0) {
        ok = tc_error_set(error, TC_ERR_BAD_VALUE, "%lld value for maxTimeMS is out of range", (long long)await_ms);
    }
    if (!ok) {
        cursor_table_release(context->store->cursors, cursor, false);
        return false;
    }
    int64_t now = clock_monotonic_ms();
    if (context->attempt == 0 || stream->await_deadline_ms == 0) {
        stream->await_deadline_ms = now + await_ms;
    }
    bson_init(&batch.array);
    batch.limit = (uint32_t)(batch_size > UINT32_MAX ? UINT32_MAX : batch_size);
    ok = fill_batch(context, stream, &batch, error);
    if (!ok) {
        cursor_table_release(context->store->cursors, cursor, true);
        bson_destroy(&batch.array);
        return false;
    }
    if (batch.count == 0 && !stream->invalidated && now < stream->await_deadline_ms) {
        int64_t wait_ms = stream->await_deadline_ms - now;
        context->rerun_after_ms = (uint32_t)(wait_ms < CHANGE_STREAM_POLL_MS ? wait_ms : CHANGE_STREAM_POLL_MS);
        cursor_table_release(context->store->cursors, cursor, false);
        bson_destroy(&batch.array);
        return true;
    }
    stream->await_deadline_ms = 0;
    int64_t cursor_id = stream->invalidated ? 0 : cursor->id;
    append_cursor_reply(reply, "nextBatch", &batch, stream, cursor_id, cursor->ns);
    cursor_table_release(context->store->cursors, cursor, stream->invalidated);
    bson_destroy(&batch.array);
    return true;
}
