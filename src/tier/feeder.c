/* The feeder: tails the fast tier's change stream over the policy namespaces and
 * replays every client write in the archive.
 *
 *   getMore ─▶ drop events already applied (restart) and the evictor's deletes
 *              and warmer's copies (thermocline.workerWrites)
 *           ─▶ coalesce (feeder_batch.c) ─▶ one ordered bulk write per namespace,
 *              w: majority, retried with backoff while the archive is down
 *           ─▶ checkpoint the batch's resume token in the fast tier
 *           ─▶ publish the applied cluster time (read-your-writes)
 *
 * The checkpoint follows the archive's acknowledgement (in a proxy without
 * peers, at most every 100 ms while writes flow, and at a clean stop), so a
 * crash replays at most the batches since, and every replayed write is
 * idempotent. A write the archive refuses (a write error of its own) holds only
 * its document: it is recorded in thermocline.refusals with the document's later
 * writes behind it, and retried (feeder_refusal.c). A command the archive fails
 * as a whole (say Unauthorized: every write would fail the same way) stops that
 * namespace's feed only, with its own resume point ("stopped:<ns>") from which
 * the next start applies it again. */
#include "tier/feeder_private.h"

#include "common/bson_view.h"
#include "common/log.h"
#include "tier/feeder_restore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_COMPONENT "FEEDER"
#define STREAM_BATCH_SIZE 1000
#define STREAM_AWAIT_MS 50 /* short: an idle stream reports its position this often (waiters need it) */
#define IDLE_CHECKPOINT_MS 1000
/* In a proxy alone, the checkpoint only bounds the replay after a restart, and
 * each is a journaled write in the fast tier: a busy stream writes one at most
 * this often, not after every batch (about 130 a second, a tenth of the fast
 * tier's writes, in the lab's fixed-load run). */
#define BUSY_CHECKPOINT_MS 100
/* With other proxies alive, they learn the feeder's progress from its checkpoint,
 * and their waits cover the fast tier's latest write, often a bookkeeping one (a
 * pin, a mark, a lease, a checkpoint) that only an idle checkpoint passes: the
 * stream reports and the checkpoint follows every 10 ms then (a read through a
 * proxy without the feeder waited 110 ms at 50/100 ms, see
 * scripts/measure_cross_proxy_read_wait.py), some 200 small fast-tier operations
 * a second while proxies share the workers. */
#define STREAM_AWAIT_SHARED_MS 10
#define IDLE_CHECKPOINT_SHARED_MS 10
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 5000
/* Done marks stay WORKER_WRITES_RETENTION_SECONDS: a clean once a second is plenty
 * (sooner only while a backlog is left, feeder_clean_marks). */
#define MARK_CLEAN_INTERVAL_MS 1000
#define STATS_LOG_INTERVAL_MS 10000

/* One event of a batch on its way to the archive. */
typedef struct candidate {
    bson_t event; /* a view into the getMore reply */
    feeder_namespace_t *target;
    uint64_t time;
    bool is_insert;
    bool is_delete;
    bson_value_t id; /* a view */
    bool suppressed; /* a worker's write: not replayed */
    bool resolved;
} candidate_t;

/* --- small helpers ---------------------------------------------------------------- */

void feeder_backoff(feeder_t *feeder)
{
    feeder->backoff_ms = feeder->backoff_ms == 0 ? BACKOFF_FIRST_MS : feeder->backoff_ms * 2;
    if (feeder->backoff_ms > BACKOFF_MAX_MS) {
        feeder->backoff_ms = BACKOFF_MAX_MS;
    }
    tier_worker_progress_t *item = tier_progress_lock_worker(feeder->context->progress, TIER_WORKER_FEEDER);
    item->retries++;
    tier_progress_unlock(feeder->context->progress, false);
    tier_group_sleep(feeder->context->group, feeder->backoff_ms);
}

static bool view_field_document(const bson_t *document, const char *path, bson_t *out)
{
    bson_iter_t iter, found;
    return bson_iter_init(&iter, document) && bson_iter_find_descendant(&iter, path, &found) &&
           bson_view_of(&found, out);
}

static feeder_namespace_t *find_namespace(feeder_t *feeder, const char *database, const char *collection)
{
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        if (strcmp(feeder->namespaces[i].config->database, database) == 0 &&
            strcmp(feeder->namespaces[i].config->collection, collection) == 0) {
            return &feeder->namespaces[i];
        }
    }
    return NULL;
}

void feeder_append_write_concern(bson_t *command, bool majority)
{
    bson_t concern;
    BSON_APPEND_DOCUMENT_BEGIN(command, "writeConcern", &concern);
    if (majority) {
        BSON_APPEND_UTF8(&concern, "w", "majority");
    } else {
        BSON_APPEND_INT32(&concern, "w", 1);
        BSON_APPEND_BOOL(&concern, "j", true);
    }
    bson_append_document_end(command, &concern);
}

/* Runs a write command on the fast tier until it succeeds or the group stops. */
bool feeder_fast_write(feeder_t *feeder, const bson_t *command, const char *what)
{
    for (;;) {
        bson_t reply;
        bson_error_t error;
        bool ok = tier_command(feeder->fast, TIER_DATABASE, command, &reply, &error);
        bson_destroy(&reply);
        if (ok) {
            return true;
        }
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot %s in the fast tier: %s", what, error.message);
        if (tier_group_stopping(feeder->context->group)) {
            return false;
        }
        feeder_backoff(feeder);
    }
}

/* --- start: the checkpoint and the stopped namespaces ---------------------------------- */

/* A namespace a rejected write stopped: it is applied again from its own point,
 * a resume token, or (stopped before the stream had one) a cluster time. */
static void load_stopped_namespace(feeder_t *feeder, const bson_t *document, const char *ns, uint64_t stopped_time)
{
    const config_namespace_t *policy = config_find_namespace(feeder->context->config, ns);
    if (policy == NULL) {
        return; /* no longer in the config */
    }
    feeder_namespace_t *item = &feeder->namespaces[policy->index];
    bson_t token;
    bson_reinit(&item->stopped_token);
    item->stopped_start_at = timestamp_find(document, "startAtOperationTime");
    if (view_field_document(document, "resumeToken", &token) && !bson_empty(&token)) {
        bson_concat(&item->stopped_token, &token);
    } else if (item->stopped_start_at == 0) {
        TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, 0,
               "%s was stopped by a rejected write, but its record has neither a resume token nor a start time; "
               "it is fed from the main checkpoint",
               ns);
        return;
    }
    item->retrying = true;
    item->stopped_time = stopped_time;
    TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "%s was stopped by a rejected write; applying it again from where it stopped",
           ns);
}

static bool load_checkpoint(feeder_t *feeder, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, batch;
    bson_iter_t iter, field;
    bool ok = tier_read_state(feeder->fast, TIER_FEEDER_COLLECTION, &filter, &batch, error);
    bson_destroy(&filter);
    bson_iter_init(&iter, &batch);
    while (ok && bson_iter_next(&iter)) {
        bson_t document, token;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        if (!bson_iter_init_find(&field, &document, "_id") || !BSON_ITER_HOLDS_UTF8(&field)) {
            continue;
        }
        const char *id = bson_iter_utf8(&field, NULL);
        uint64_t time = timestamp_find(&document, "appliedTime");
        bson_iter_t ns_iter;
        if (strncmp(id, "stopped:", 8) == 0 && bson_iter_init_find(&ns_iter, &document, "ns") &&
            BSON_ITER_HOLDS_UTF8(&ns_iter)) {
            load_stopped_namespace(feeder, &document, bson_iter_utf8(&ns_iter, NULL), time);
            continue;
        }
        if (!view_field_document(&document, "resumeToken", &token)) {
            /* The start the proxy recorded before its first client (tier_feeder_ensure_start). */
            if (strcmp(id, "stream") == 0) {
                feeder->start_at = timestamp_find(&document, "startAtOperationTime");
                feeder->applied_time = time;
            }
            continue;
        }
        if (strcmp(id, "stream") == 0) {
            bson_reinit(&feeder->token);
            bson_concat(&feeder->token, &token);
            feeder->have_token = true;
            feeder->applied_time = time;
        }
    }
    bson_destroy(&batch);
    return ok;
}

static bool start_feeder(feeder_t *feeder)
{
    bson_error_t error;
    uint64_t now;
    if (!tier_cluster_time(feeder->fast, &now, &error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot reach the fast tier: %s", error.message);
        return false;
    }
    if (now == 0) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER,
                          "the fast tier keeps no oplog (start it as a replica set member, --replSet): the feeder "
                          "cannot see its writes and the archive receives none");
        return false;
    }
    bson_t hello = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&hello, "hello", 1);
    bool ok = tier_command(feeder->archive, "admin", &hello, &reply, &error);
    bson_destroy(&hello);
    if (!ok) {
        bson_destroy(&reply);
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot reach the archive: %s", error.message);
        return false;
    }
    bson_iter_t iter;
    feeder->archive_majority = bson_iter_init_find(&iter, &reply, "setName");
    bson_destroy(&reply);
    if (!load_checkpoint(feeder, &error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot read the checkpoint: %s", error.message);
        return false;
    }
    feeder_index_marks(feeder);
    if (!feeder_refusals_load(feeder, &error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot read the refused writes: %s", error.message);
        return false;
    }
    feeder->refusals_due = true; /* every start retries them: the operator may have fixed the cause */
    feeder->replay_until = now;
    feeder->start_time = feeder->applied_time;
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        feeder_namespace_t *item = &feeder->namespaces[i];
        item->skip_until = item->retrying ? item->stopped_time : feeder->applied_time;
        /* The stream starts at the oldest point anything must be applied from. */
        if (item->retrying && (!feeder->have_token || item->stopped_time < feeder->applied_time)) {
            bson_reinit(&feeder->token);
            feeder->have_token = !bson_empty(&item->stopped_token);
            if (feeder->have_token) {
                bson_concat(&feeder->token, &item->stopped_token);
            } else {
                feeder->start_at = item->stopped_start_at;
            }
        }
    }
    if (feeder->have_token || feeder->start_at != 0) {
        tier_progress_set_applied(feeder->context->progress, feeder->applied_time);
    }
    feeder->started = true;
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, 0, "feeding %zu namespace(s) to the archive (%s), %s", feeder->namespace_count,
           feeder->archive_majority ? "w: majority" : "w: 1, j: true",
           feeder->have_token   ? "resuming from the checkpoint"
           : feeder->start_at ? "from the start the proxy recorded"
                              : "from now: no checkpoint yet");
    return true;
}

/* --- the change stream -------------------------------------------------------------- */

static bool command_options(feeder_t *feeder, bson_t *opts, bson_error_t *error)
{
    bson_init(opts);
    BSON_APPEND_INT32(opts, "serverId", (int32_t)feeder->server_id);
    return mongoc_client_session_append(feeder->session, opts, error);
}

static void close_stream(feeder_t *feeder)
{
    if (feeder->cursor_id != 0) {
        bson_t kill = BSON_INITIALIZER, cursors, opts, reply;
        bson_error_t error;
        BSON_APPEND_UTF8(&kill, "killCursors", "$cmd.aggregate");
        BSON_APPEND_ARRAY_BEGIN(&kill, "cursors", &cursors);
        BSON_APPEND_INT64(&cursors, "0", feeder->cursor_id);
        bson_append_array_end(&kill, &cursors);
        if (command_options(feeder, &opts, &error)) {
            mongoc_client_command_with_opts(feeder->fast, "admin", &kill, NULL, &opts, &reply, &error);
            bson_destroy(&reply);
        }
        bson_destroy(&opts);
        bson_destroy(&kill);
        feeder->cursor_id = 0;
    }
    if (feeder->session != NULL) {
        mongoc_client_session_destroy(feeder->session);
        feeder->session = NULL;
    }
}

static void append_pipeline(feeder_t *feeder, bson_t *command)
{
    bson_t pipeline, stage, spec, match, match_spec, any, types;
    BSON_APPEND_ARRAY_BEGIN(command, "pipeline", &pipeline);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &spec);
    BSON_APPEND_BOOL(&spec, "allChangesForCluster", true);
    if (feeder->have_token) {
        BSON_APPEND_DOCUMENT(&spec, "resumeAfter", &feeder->token);
    } else if (feeder->start_at != 0) {
        timestamp_append(&spec, "startAtOperationTime", feeder->start_at);
    }
    bson_append_document_end(&stage, &spec);
    bson_append_document_end(&pipeline, &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &match);
    BSON_APPEND_DOCUMENT_BEGIN(&match, "$match", &match_spec);
    BSON_APPEND_ARRAY_BEGIN(&match_spec, "$or", &any);
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        char key[16];
        const char *key_string;
        bson_t clause;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_document_begin(&any, key_string, -1, &clause);
        BSON_APPEND_UTF8(&clause, "ns.db", feeder->namespaces[i].config->database);
        BSON_APPEND_UTF8(&clause, "ns.coll", feeder->namespaces[i].config->collection);
        bson_append_document_end(&any, &clause);
    }
    bson_append_array_end(&match_spec, &any);
    bson_t operation;
    BSON_APPEND_DOCUMENT_BEGIN(&match_spec, "operationType", &operation);
    BSON_APPEND_ARRAY_BEGIN(&operation, "$in", &types);
    BSON_APPEND_UTF8(&types, "0", "insert");
    BSON_APPEND_UTF8(&types, "1", "update");
    BSON_APPEND_UTF8(&types, "2", "replace");
    BSON_APPEND_UTF8(&types, "3", "delete");
    bson_append_array_end(&operation, &types);
    bson_append_document_end(&match_spec, &operation);
    bson_append_document_end(&match, &match_spec);
    bson_append_document_end(&pipeline, &match);
    bson_append_array_end(command, &pipeline);
}

/* Opens the stream; reply (initialised by the callee) holds the first batch. */
static bool open_stream(feeder_t *feeder, bson_t *reply, bson_error_t *error)
{
    bson_init(reply);
    mongoc_server_description_t *server = mongoc_client_select_server(feeder->fast, true, NULL, error);
    if (server == NULL) {
        return false;
    }
    feeder->server_id = mongoc_server_description_id(server);
    mongoc_server_description_destroy(server);
    feeder->session = mongoc_client_start_session(feeder->fast, NULL, error);
    if (feeder->session == NULL) {
        return false;
    }
    bson_t command = BSON_INITIALIZER, cursor, opts;
    BSON_APPEND_INT32(&command, "aggregate", 1);
    append_pipeline(feeder, &command);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "cursor", &cursor);
    BSON_APPEND_INT32(&cursor, "batchSize", STREAM_BATCH_SIZE);
    bson_append_document_end(&command, &cursor);
    bool ok = command_options(feeder, &opts, error);
    if (ok) {
        bson_destroy(reply);
        ok = mongoc_client_command_with_opts(feeder->fast, "admin", &command, NULL, &opts, reply, error);
    }
    bson_destroy(&opts);
    bson_destroy(&command);
    bson_iter_t iter, id;
    if (ok && bson_iter_init(&iter, reply) && bson_iter_find_descendant(&iter, "cursor.id", &id)) {
        feeder->cursor_id = bson_iter_as_int64(&id);
    }
    if (!ok) {
        close_stream(feeder);
    }
    return ok;
}

static bool get_more(feeder_t *feeder, bson_t *reply, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, opts;
    BSON_APPEND_INT64(&command, "getMore", feeder->cursor_id);
    BSON_APPEND_UTF8(&command, "collection", "$cmd.aggregate");
    BSON_APPEND_INT32(&command, "batchSize", STREAM_BATCH_SIZE);
    BSON_APPEND_INT32(&command, "maxTimeMS",
                      tier_progress_peers(feeder->context->progress) > 0 ? STREAM_AWAIT_SHARED_MS : STREAM_AWAIT_MS);
    bool ok = command_options(feeder, &opts, error);
    if (ok) {
        ok = mongoc_client_command_with_opts(feeder->fast, "admin", &command, NULL, &opts, reply, error);
    } else {
        bson_init(reply);
    }
    bson_destroy(&opts);
    bson_destroy(&command);
    bson_iter_t iter, id;
    if (ok && bson_iter_init(&iter, reply) && bson_iter_find_descendant(&iter, "cursor.id", &id) &&
        bson_iter_as_int64(&id) == 0) {
        feeder->cursor_id = 0; /* the server closed it: reopen from the token */
    }
    return ok;
}

/* --- worker-writes marks ------------------------------------------------------------- */

/* Looks the batch's inserts and deletes up in thermocline.workerWrites and marks
 * the evictor's deletes and the warmer's copies suppressed. Waits for marks whose
 * outcome is not written yet (a copy's, an eviction's range). False only when the
 * group stops. */
static bool resolve_marks(feeder_t *feeder, candidate_t *candidates, size_t count)
{
    int64_t started = clock_monotonic_ms();
    for (;;) {
        bson_t command = BSON_INITIALIZER, filter, id_condition, keys, reply, batch;
        uint32_t key_count = 0;
        BSON_APPEND_UTF8(&command, "find", TIER_MARKS_COLLECTION);
        BSON_APPEND_DOCUMENT_BEGIN(&command, "filter", &filter);
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &id_condition);
        BSON_APPEND_ARRAY_BEGIN(&id_condition, "$in", &keys);
        for (size_t i = 0; i < count; i++) {
            candidate_t *item = &candidates[i];
            if (item->resolved) {
                continue;
            }
            char key[16];
            const char *key_string;
            bson_uint32_to_string(key_count++, &key_string, key, sizeof key);
            worker_writes_mark_key(&keys, key_string, item->target->config->ns, &item->id, item->is_delete ? "evict" : "warm");
        }
        bson_append_array_end(&id_condition, &keys);
        bson_append_document_end(&filter, &id_condition);
        bson_append_document_end(&command, &filter);
        BSON_APPEND_INT32(&command, "batchSize", (int32_t)key_count + 1);
        BSON_APPEND_BOOL(&command, "singleBatch", true);
        if (key_count == 0) {
            bson_destroy(&command);
            return true;
        }
        bson_error_t error;
        bool ok = tier_command(feeder->fast, TIER_DATABASE, &command, &reply, &error);
        bson_destroy(&command);
        if (!ok || !view_field_document(&reply, "cursor.firstBatch", &batch)) {
            bson_destroy(&reply);
            tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot read thermocline.%s in the fast tier: %s",
                              TIER_MARKS_COLLECTION, ok ? "unexpected reply" : error.message);
            if (tier_group_stopping(feeder->context->group)) {
                return false;
            }
            feeder_backoff(feeder);
            continue;
        }
        bool waiting = false, range_written = false;
        int64_t waited = clock_monotonic_ms() - started;
        for (size_t i = 0; i < count; i++) {
            candidate_t *item = &candidates[i];
            if (range_written) {
                waiting = true; /* the rest, against the marks read again */
                break;
            }
            if (item->resolved) {
                continue;
            }
            bson_t key_holder = BSON_INITIALIZER, key;
            worker_writes_mark_key(&key_holder, "k", item->target->config->ns, &item->id, item->is_delete ? "evict" : "warm");
            view_field_document(&key_holder, "k", &key);
            bson_iter_t marks;
            bool found = false;
            bson_iter_init(&marks, &batch);
            while (!found && bson_iter_next(&marks)) {
                bson_t mark, mark_id;
                uint32_t length;
                const uint8_t *data;
                bson_iter_document(&marks, &length, &data);
                bson_init_static(&mark, data, length);
                if (!view_field_document(&mark, "_id", &mark_id) || !bson_equal(&mark_id, &key)) {
                    continue;
                }
                found = true;
                bson_t full_document;
                worker_writes_event_t event = {
                    .is_delete = item->is_delete,
                    .time = item->time,
                    .full_document =
                        view_field_document(&item->event, "fullDocument", &full_document) ? &full_document : NULL,
                    .waited_ms = waited,
                    .writes_ranges = true,
                };
                uint64_t range_to = 0;
                switch (worker_writes_classify(&mark, &event, &range_to)) {
                case WORKER_WRITES_PENDING:
                    waiting = true;
                    continue;
                case WORKER_WRITES_WORKER:
                    if (item->is_delete && range_to == UINT64_MAX) {
                        /* A committed mark without its range (the evictor crashed): its
                         * range is written now, ending at this delete; the events after
                         * it are judged against the marks read again (a later delete of
                         * the document then falls outside). */
                        bool settled = false;
                        range_written = true;
                        if (!feeder_settle_committed_mark(feeder, &mark, item->time, &settled) || !settled) {
                            waiting = true; /* failed, or the mark changed meanwhile: read again */
                            continue;
                        }
                        item->suppressed = true;
                        break;
                    }
                    /* An eviction stands for one delete: the first in its range. */
                    item->suppressed = !item->is_delete || feeder_consume_range(&feeder->consumed_marks, &key, range_to);
                    break;
                case WORKER_WRITES_APPLICATION:
                    break;
                }
                item->resolved = true;
            }
            if (!found) {
                item->resolved = true;
            }
            bson_destroy(&key_holder);
        }
        bson_destroy(&reply);
        if (!waiting) {
            return true;
        }
        if (!tier_group_sleep(feeder->context->group, 10)) {
            return false;
        }
    }
}

/* --- the archive ----------------------------------------------------------------------- */


/* Errors a replayed update meets when the archive already holds a later version
 * of the document (a restart replays writes applied before it). */
static bool superseded_by_later_write(int32_t code)
{
    return code == 2 || code == 10 || code == 14 || code == 28 || code == 40;
}

static void stop_namespace(feeder_t *feeder, feeder_namespace_t *item, const feeder_op_t *op, int32_t code,
                           const char *message)
{
    const char *ns = item->config->ns;
    char *id_json = NULL;
    bson_t id_holder = BSON_INITIALIZER;
    BSON_APPEND_VALUE(&id_holder, "_id", &op->id);
    id_json = bson_as_relaxed_extended_json(&id_holder, NULL);
    char text[TIER_ERROR_TEXT_SIZE * 2]; /* the namespace and the message may be long: cut, not an error */
    snprintf(text, sizeof text,
             "the archive failed the replay command of a %s of %s in %s as a whole: %s (code %d). The feed of %s "
             "is stopped: nothing more reaches the archive and reads that need it fail; fix the cause in the "
             "archive (the feeder's user, the namespace) and restart the feeder, which applies again from here",
             feeder_op_kind_name(op->kind), id_json != NULL ? id_json : "?", ns, message, code, ns);
    item->stopped = true;
    if (!item->retrying) {
        bson_reinit(&item->stopped_token);
        /* Without a token yet, the stream's own start (or this write's time) is
         * where the namespace resumes: an empty token would not resume at all. */
        item->stopped_start_at = 0;
        if (feeder->have_token) {
            bson_concat(&item->stopped_token, &feeder->token);
        } else {
            item->stopped_start_at = feeder->start_at != 0 ? feeder->start_at : op->first_time;
        }
        item->stopped_time = feeder->applied_time;
    }
    TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, 0, "%s", text);

    bson_t command = BSON_INITIALIZER, updates, statement, query, document;
    char stopped_id[320];
    snprintf(stopped_id, sizeof stopped_id, "stopped:%s", ns);
    BSON_APPEND_UTF8(&command, "update", TIER_FEEDER_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_UTF8(&query, "_id", stopped_id);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &document);
    BSON_APPEND_UTF8(&document, "_id", stopped_id);
    BSON_APPEND_UTF8(&document, "ns", ns);
    if (!bson_empty(&item->stopped_token)) {
        BSON_APPEND_DOCUMENT(&document, "resumeToken", &item->stopped_token);
    } else {
        timestamp_append(&document, "startAtOperationTime", item->stopped_start_at);
    }
    timestamp_append(&document, "appliedTime", item->stopped_time);
    BSON_APPEND_UTF8(&document, "error", text);
    BSON_APPEND_INT32(&document, "code", code);
    BSON_APPEND_VALUE(&document, "documentId", &op->id);
    BSON_APPEND_DATE_TIME(&document, "at", clock_wall_ms());
    bson_append_document_end(&statement, &document);
    BSON_APPEND_BOOL(&statement, "upsert", true);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    feeder_append_write_concern(&command, true);
    feeder_fast_write(feeder, &command, "record the stopped namespace");
    bson_destroy(&command);
    bson_destroy(&id_holder);
    bson_free(id_json);

    tier_namespace_progress_t *progress = tier_progress_lock_namespace(feeder->context->progress, item->config->index);
    progress->feed_stopped = true;
    progress->applied_time = item->stopped_time;
    bson_strncpy(progress->feed_error, text, sizeof progress->feed_error);
    tier_progress_unlock(feeder->context->progress, true);
}

typedef enum apply_result {
    APPLY_DONE,  /* applied, refused writes recorded, or the namespace stopped */
    APPLY_RETRY, /* the archive is unreachable or busy (or the group stops): try the whole batch again later */
} apply_result_t;

/* How an ordered bulk of ops[0..count) ended. */
typedef enum execute_result {
    EXECUTE_DONE,
    EXECUTE_REFUSED,  /* *out_failed was refused (a write error) and nothing after it ran */
    EXECUTE_RETRY,    /* transient: nothing is known to be refused */
    EXECUTE_FAILED,   /* the command as a whole failed: not one write's refusal */
} execute_result_t;

static execute_result_t execute_ops(feeder_t *feeder, const config_namespace_t *config,
                                    mongoc_collection_t *collection, feeder_op_t *const *ops, size_t count,
                                    size_t *out_failed, int32_t *out_code, char *message, size_t size)
{
    bson_t bulk_opts = BSON_INITIALIZER, reply;
    bson_error_t error;
    BSON_APPEND_BOOL(&bulk_opts, "ordered", true);
    feeder_append_write_concern(&bulk_opts, feeder->archive_majority);
    mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts(collection, &bulk_opts);
    bson_destroy(&bulk_opts);
    for (size_t i = 0; i < count; i++) {
        if (!feeder_append_op(bulk, ops[i]->kind, &ops[i]->id, &ops[i]->document, &error)) {
            /* A write libmongoc cannot even send is that write's refusal. */
            mongoc_bulk_operation_destroy(bulk);
            *out_failed = i;
            *out_code = 0;
            bson_strncpy(message, error.message, size);
            return EXECUTE_REFUSED;
        }
    }
    bool ok = mongoc_bulk_operation_execute(bulk, &reply, &error) != 0;
    mongoc_bulk_operation_destroy(bulk);
    bson_iter_t errors;
    tier_write_error_t write_error;
    execute_result_t result = EXECUTE_DONE;
    if (ok && !feeder_restore_missing(feeder->fast, feeder->archive, config, ops, count, &reply, &error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "%s: %s", config->ns, error.message);
        result = EXECUTE_RETRY; /* every step is idempotent: the bulk is applied again */
    } else if (ok) {
        result = EXECUTE_DONE;
    } else if (tier_write_errors_init(&errors, &reply) && tier_write_errors_next(&errors, &write_error)) {
        /* Ordered: the first error is where the bulk stopped. */
        size_t failed = (size_t)(write_error.index > 0 ? write_error.index : 0);
        *out_failed = failed < count ? failed : count - 1;
        *out_code = (int32_t)write_error.code;
        bson_strncpy(message, write_error.message, size);
        result = EXECUTE_REFUSED;
    } else if (tier_error_is_transient(&error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER,
                          "the archive is unreachable or busy (%s); retrying, client writes keep landing in the "
                          "fast tier",
                          error.message);
        result = EXECUTE_RETRY;
    } else {
        *out_failed = 0;
        *out_code = tier_error_code(&error);
        bson_strncpy(message, error.message, size);
        result = EXECUTE_FAILED;
    }
    bson_destroy(&reply);
    return result;
}

/* Replays ops[0..count) of one namespace in order. A write the archive refuses is
 * recorded (feeder_refusal.c) and the others go on; the later writes of its
 * document are recorded behind it, never sent ahead of it (per-document order).
 * Consecutive writes of documents without a refusal go as one ordered bulk. */
static apply_result_t apply_namespace(feeder_t *feeder, feeder_namespace_t *item, feeder_op_t *const *ops,
                                      size_t count)
{
    mongoc_collection_t *collection =
        mongoc_client_get_collection(feeder->archive, item->config->database, item->config->collection);
    apply_result_t result = APPLY_DONE;
    size_t bulk_start = 0, i = 0;
    while (result == APPLY_DONE && !item->stopped && i <= count) {
        feeder_refused_t *refused = i < count ? feeder_refused_find(item, &ops[i]->id) : NULL;
        if (i < count && refused == NULL) {
            i++; /* joins the bulk */
            continue;
        }
        if (bulk_start < i) {
            size_t failed = 0;
            int32_t code = 0;
            char message[FEEDER_REFUSAL_MESSAGE_SIZE];
            execute_result_t executed =
                execute_ops(feeder, item->config, collection, ops + bulk_start, i - bulk_start, &failed, &code, message,
                            sizeof message);
            if (executed == EXECUTE_RETRY) {
                result = APPLY_RETRY;
                break;
            }
            if (executed == EXECUTE_FAILED) {
                stop_namespace(feeder, item, ops[bulk_start], code, message);
                break;
            }
            if (executed == EXECUTE_REFUSED) {
                const feeder_op_t *op = ops[bulk_start + failed];
                if (op->last_time <= feeder->replay_until && op->kind == FEEDER_OP_UPDATE &&
                    superseded_by_later_write(code)) {
                    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, 0,
                           "skipped an update replayed after a restart onto a later version (%s, code %d)", message,
                           code);
                } else if (!feeder_refusal_record(feeder, item, op, code != 0 ? code : TC_ERR_BAD_VALUE, message)) {
                    result = APPLY_RETRY; /* stopping: no checkpoint past it */
                    break;
                }
                i = bulk_start = bulk_start + failed + 1;
                continue;
            }
        }
        if (i == count) {
            break;
        }
        /* A write of a document whose refusal stands: queued behind it, unless a
         * replay after a restart meets one it recorded already. */
        if (ops[i]->last_time > refused->recorded_through && !feeder_refusal_record(feeder, item, ops[i], 0, NULL)) {
            result = APPLY_RETRY;
            break;
        }
        i = bulk_start = i + 1;
    }
    mongoc_collection_destroy(collection);
    return result;
}

static apply_result_t apply_batch(feeder_t *feeder, size_t *out_writes)
{
    size_t count;
    feeder_op_t *const *ops = feeder_batch_finish(feeder->batch, &count);
    *out_writes = count;
    for (size_t start = 0; start < count;) {
        size_t end = start;
        while (end < count && ops[end]->namespace_index == ops[start]->namespace_index) {
            end++;
        }
        feeder_namespace_t *item = &feeder->namespaces[ops[start]->namespace_index];
        if (!item->stopped && apply_namespace(feeder, item, ops + start, end - start) == APPLY_RETRY) {
            return APPLY_RETRY;
        }
        start = end;
    }
    return APPLY_DONE;
}

/* --- checkpoints ---------------------------------------------------------------------- */

static bool write_checkpoint(feeder_t *feeder)
{
    bson_t command = BSON_INITIALIZER, updates, statement, query, update, set;
    BSON_APPEND_UTF8(&command, "update", TIER_FEEDER_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_UTF8(&query, "_id", "stream");
    tier_lease_fence(&query, feeder->context->lease_term); /* a successor's checkpoint stays */
    bson_append_document_end(&statement, &query);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT64(&set, "leaseTerm", feeder->context->lease_term);
    BSON_APPEND_DOCUMENT(&set, "resumeToken", &feeder->token);
    timestamp_append(&set, "appliedTime", feeder->applied_time);
    BSON_APPEND_DATE_TIME(&set, "updatedAt", clock_wall_ms());
    bson_append_document_end(&update, &set);
    bson_append_document_end(&statement, &update);
    BSON_APPEND_BOOL(&statement, "upsert", true);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    feeder_append_write_concern(&command, true);
    bool ok = feeder_fast_write(feeder, &command, "write the feeder's checkpoint");
    bson_destroy(&command);
    if (ok) {
        feeder->checkpoint_time = feeder->applied_time;
        feeder->last_checkpoint_ms = clock_monotonic_ms();
        feeder->events_unsaved = false;
    }
    return ok;
}

/* Whether the archive has writes the checkpoint does not cover yet. */
static bool progress_unsaved(const feeder_t *feeder)
{
    return feeder->have_token && feeder->applied_time > feeder->checkpoint_time;
}

/* How long after the last checkpoint the next is due, a batch of event_count
 * events just applied. An idle stream still moves: it is checkpointed now and
 * then, not at every getMore. Other proxies wait on the checkpoint: with them,
 * and from a worker process (whose proxies are not all counted), every batch's. */
static int64_t checkpoint_due_ms(const feeder_t *feeder, uint32_t event_count)
{
    bool peers = tier_progress_peers(feeder->context->progress) > 0;
    if (event_count > 0 && (peers || !feeder->context->in_proxy)) {
        return 0;
    }
    if (peers) {
        return IDLE_CHECKPOINT_SHARED_MS;
    }
    return feeder->events_unsaved && feeder->context->in_proxy ? BUSY_CHECKPOINT_MS : IDLE_CHECKPOINT_MS;
}

/* Namespaces applied again after a stop are caught up once the stream passes the
 * point where the others were: their stopped record goes. */
static void finish_retries(feeder_t *feeder)
{
    if (feeder->applied_time < feeder->start_time) {
        return;
    }
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        feeder_namespace_t *item = &feeder->namespaces[i];
        if (!item->retrying || item->stopped) {
            continue;
        }
        const char *ns = item->config->ns;
        char stopped_id[320];
        bson_t command = BSON_INITIALIZER, deletes, statement, query;
        snprintf(stopped_id, sizeof stopped_id, "stopped:%s", ns);
        BSON_APPEND_UTF8(&command, "delete", TIER_FEEDER_COLLECTION);
        BSON_APPEND_ARRAY_BEGIN(&command, "deletes", &deletes);
        BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
        BSON_APPEND_UTF8(&query, "_id", stopped_id);
        bson_append_document_end(&statement, &query);
        BSON_APPEND_INT32(&statement, "limit", 1);
        bson_append_document_end(&deletes, &statement);
        bson_append_array_end(&command, &deletes);
        feeder_append_write_concern(&command, true);
        if (feeder_fast_write(feeder, &command, "clear a stopped namespace")) {
            item->retrying = false;
            TC_LOG(TC_LOG_INFO, LOG_COMPONENT, 0, "%s is fed again: the writes it missed are in the archive", ns);
        }
        bson_destroy(&command);
    }
}

/* --- one batch ------------------------------------------------------------------------ */

static int64_t event_wall_time(const bson_t *event)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, event, "wallTime") && BSON_ITER_HOLDS_DATE_TIME(&iter)
               ? bson_iter_date_time(&iter)
               : 0;
}

/* unapplied_since_ms: the oldest unapplied event's wall clock (0: none known).
 * reachable: 1 yes, 0 no, -1 not known (an attempt is under way). */
static void set_unapplied(feeder_t *feeder, int64_t unapplied_since_ms, int reachable)
{
    tier_worker_progress_t *item = tier_progress_lock_worker(feeder->context->progress, TIER_WORKER_FEEDER);
    item->unapplied_since_ms = unapplied_since_ms;
    if (reachable >= 0) {
        item->archive_reachable = reachable == 1;
    }
    item->updated_ms = clock_wall_ms();
    tier_progress_unlock(feeder->context->progress, false);
}

/* Collects the events to replay: those of a running namespace not yet applied. */
static size_t collect_candidates(feeder_t *feeder, const bson_t *events, candidate_t *out, uint64_t *out_last_time,
                                 int64_t *out_first_wall)
{
    bson_iter_t iter, field;
    size_t count = 0;
    bson_iter_init(&iter, events);
    while (bson_iter_next(&iter)) {
        bson_t event, ns_document;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&event, data, length);
        uint64_t time = timestamp_find(&event, "clusterTime");
        if (time > *out_last_time) {
            *out_last_time = time;
        }
        if (*out_first_wall == 0) {
            *out_first_wall = event_wall_time(&event);
        }
        if (!view_field_document(&event, "ns", &ns_document)) {
            continue;
        }
        const char *database = "", *collection = "";
        if (bson_iter_init_find(&field, &ns_document, "db") && BSON_ITER_HOLDS_UTF8(&field)) {
            database = bson_iter_utf8(&field, NULL);
        }
        if (bson_iter_init_find(&field, &ns_document, "coll") && BSON_ITER_HOLDS_UTF8(&field)) {
            collection = bson_iter_utf8(&field, NULL);
        }
        feeder_namespace_t *target = find_namespace(feeder, database, collection);
        if (target == NULL || target->stopped || time <= target->skip_until) {
            continue;
        }
        candidate_t *item = &out[count];
        memset(item, 0, sizeof *item);
        /* A static bson_t points into itself: initialise it in place, never copy it. */
        bson_init_static(&item->event, data, length);
        item->target = target;
        item->time = time;
        const char *operation = "";
        if (bson_iter_init_find(&field, &event, "operationType") && BSON_ITER_HOLDS_UTF8(&field)) {
            operation = bson_iter_utf8(&field, NULL);
        }
        item->is_insert = strcmp(operation, "insert") == 0;
        item->is_delete = strcmp(operation, "delete") == 0;
        item->resolved = !item->is_insert && !item->is_delete;
        bson_iter_t id_iter;
        if (bson_iter_init(&id_iter, &event) && bson_iter_find_descendant(&id_iter, "documentKey._id", &field)) {
            item->id = *bson_iter_value(&field);
        } else {
            item->resolved = true;
        }
        count++;
    }
    return count;
}

/* Applies one getMore's events and moves the checkpoint to position. False only
 * when the group stops before the batch is applied. */
static bool process_batch(feeder_t *feeder, const bson_t *events, const bson_t *position)
{
    uint32_t event_count = bson_count_keys(events);
    uint64_t last_time = tier_token_time(position);
    int64_t first_wall = 0;
    candidate_t *candidates = bson_malloc0((event_count + 1) * sizeof *candidates);
    size_t count = collect_candidates(feeder, events, candidates, &last_time, &first_wall);
    size_t suppressed = 0, writes = 0;
    bool ok = true;

    if (count > 0) {
        ok = resolve_marks(feeder, candidates, count);
        feeder_batch_reset(feeder->batch);
        for (size_t i = 0; ok && i < count; i++) {
            bson_error_t error;
            if (candidates[i].suppressed) {
                suppressed++;
                continue;
            }
            if (!feeder_batch_add(feeder->batch, candidates[i].target->config->index, &candidates[i].event, &error)) {
                tier_report_error(feeder->context, TIER_WORKER_FEEDER, "skipped a change event: %s", error.message);
            }
        }
        while (ok) {
            if (!tier_holds_lease(feeder->context, TIER_WORKER_FEEDER)) {
                ok = false; /* another process may feed from here on: it replays this batch */
                break;
            }
            set_unapplied(feeder, first_wall, -1);
            if (apply_batch(feeder, &writes) == APPLY_DONE) {
                break;
            }
            set_unapplied(feeder, first_wall, 0);
            if (tier_group_stopping(feeder->context->group)) {
                ok = false;
                break;
            }
            feeder_backoff(feeder);
        }
    }
    bson_free(candidates);
    if (!ok) {
        return false;
    }
    if (count > 0) {
        tier_test_hook_kill(&feeder->kill_after_batches, "THERMOCLINE_TEST_KILL_AFTER_APPLY", "before the checkpoint");
    }
    feeder->backoff_ms = 0;
    if (last_time > feeder->applied_time) {
        feeder->applied_time = last_time;
    }
    bson_t last_event = BSON_INITIALIZER, last_id;
    bson_iter_t last;
    if (!bson_empty(position)) {
        bson_reinit(&feeder->token);
        bson_concat(&feeder->token, position);
        feeder->have_token = true;
    } else if (event_count > 0 && bson_iter_init(&last, events)) {
        /* A server without postBatchResumeToken: the last event's own token. */
        while (bson_iter_next(&last)) {
            if (BSON_ITER_HOLDS_DOCUMENT(&last)) {
                uint32_t length;
                const uint8_t *data;
                bson_iter_document(&last, &length, &data);
                bson_init_static(&last_event, data, length);
            }
        }
        if (view_field_document(&last_event, "_id", &last_id)) {
            bson_reinit(&feeder->token);
            bson_concat(&feeder->token, &last_id);
            feeder->have_token = true;
        }
    }
    /* The archive has it all now: reads may go (the checkpoint only saves a replay). */
    tier_progress_set_applied(feeder->context->progress, feeder->applied_time);
    feeder->events_unsaved |= event_count > 0;
    if (progress_unsaved(feeder) &&
        clock_monotonic_ms() - feeder->last_checkpoint_ms >= checkpoint_due_ms(feeder, event_count)) {
        if (!write_checkpoint(feeder)) {
            return false;
        }
        if (feeder->marks_left || clock_monotonic_ms() - feeder->last_mark_clean_ms >= MARK_CLEAN_INTERVAL_MS) {
            feeder->last_mark_clean_ms = clock_monotonic_ms();
            feeder->marks_left = feeder_clean_marks(feeder);
        }
        finish_retries(feeder);
    }
    tier_worker_progress_t *item = tier_progress_lock_worker(feeder->context->progress, TIER_WORKER_FEEDER);
    item->events_applied += (int64_t)(count - suppressed);
    item->events_suppressed += (int64_t)suppressed;
    item->archive_writes += (int64_t)writes;
    item->batches += count > 0;
    item->unapplied_since_ms = 0;
    item->archive_reachable = true;
    item->updated_ms = clock_wall_ms();
    tier_progress_unlock(feeder->context->progress, false);
    if (count > 0) {
        tier_report_ok(feeder->context, TIER_WORKER_FEEDER);
    }
    feeder->stats_events += (int64_t)count;
    feeder->stats_writes += (int64_t)writes;
    int64_t now = clock_monotonic_ms();
    if (now - feeder->stats_since_ms >= STATS_LOG_INTERVAL_MS) {
        if (feeder->stats_events > 0) {
            TC_LOG(TC_LOG_INFO, LOG_COMPONENT, 0, "applied %lld events as %lld archive writes in %.1f s",
                   (long long)feeder->stats_events, (long long)feeder->stats_writes,
                   (double)(now - feeder->stats_since_ms) / 1000.0);
        }
        feeder->stats_since_ms = now;
        feeder->stats_events = feeder->stats_writes = 0;
    }
    return true;
}

/* The events and the position of a reply's cursor (views). */
static void reply_batch(const bson_t *reply, bson_t *out_events, bson_t *out_position)
{
    if (!view_field_document(reply, "cursor.firstBatch", out_events) &&
        !view_field_document(reply, "cursor.nextBatch", out_events)) {
        bson_init(out_events);
    }
    if (!view_field_document(reply, "cursor.postBatchResumeToken", out_position)) {
        bson_init(out_position);
    }
}

static bool fatal_stream_error(const bson_error_t *error)
{
    int32_t code = tier_error_code(error);
    return code == TC_ERR_CHANGE_STREAM_HISTORY_LOST || code == TC_ERR_CHANGE_STREAM_FATAL_ERROR ||
           code == TC_ERR_INVALID_RESUME_TOKEN || code == TC_ERR_BAD_RESUME_TOKEN_DATA;
}

/* --- the thread --------------------------------------------------------------------- */

void feeder_run(tier_group_t *group, void *argument)
{
    tier_context_t *context = argument;
    feeder_t feeder = {.context = context};
    feeder.namespace_count = context->config->namespace_count;
    feeder.namespaces = bson_malloc0((feeder.namespace_count + 1) * sizeof *feeder.namespaces);
    for (size_t i = 0; i < feeder.namespace_count; i++) {
        feeder.namespaces[i].config = &context->config->namespaces[i];
        bson_init(&feeder.namespaces[i].stopped_token);
    }
    bson_init(&feeder.token);
    bson_init(&feeder.consumed_marks);
    feeder.batch = feeder_batch_new();
    feeder.fast = mongoc_client_pool_pop(context->fast_pool);
    feeder.archive = mongoc_client_pool_pop(context->archive_pool);
    feeder.stats_since_ms = clock_monotonic_ms();
    feeder.kill_after_batches = tier_test_hook_countdown("THERMOCLINE_TEST_KILL_AFTER_APPLY");
    tier_worker_progress_t *item = tier_progress_lock_worker(context->progress, TIER_WORKER_FEEDER);
    item->running = true;
    item->unapplied_since_ms = 0; /* no longer the previous holder's, as followed (lease.c) */
    tier_progress_unlock(context->progress, false);

    while (!tier_group_stopping(group) && feeder.namespace_count > 0) {
        bson_error_t error;
        bson_t reply, events, position;
        if (!feeder.started && !start_feeder(&feeder)) {
            feeder.backoff_ms = BACKOFF_MAX_MS / 2;
            feeder_backoff(&feeder);
            continue;
        }
        tier_worker_progress_t requests;
        tier_progress_worker(context->progress, TIER_WORKER_FEEDER, &requests);
        if (requests.refusal_retries_requested != feeder.retry_requests_seen) {
            feeder.retry_requests_seen = requests.refusal_retries_requested;
            feeder.refusals_due = true;
        }
        /* Between batches: a refused document's later writes are all recorded by now. */
        if (feeder.refusals_due && !feeder_refusals_retry(&feeder)) {
            feeder_backoff(&feeder);
            continue;
        }
        bool ok = feeder.cursor_id == 0 ? open_stream(&feeder, &reply, &error) : get_more(&feeder, &reply, &error);
        if (!ok) {
            bson_destroy(&reply);
            close_stream(&feeder);
            if (fatal_stream_error(&error)) {
                tier_report_error(context, TIER_WORKER_FEEDER,
                                  "the fast tier's change stream cannot resume from the checkpoint (%s): writes made "
                                  "while the feeder was away are no longer in the oplog; the archive needs a full "
                                  "copy of these namespaces before the feeder can run",
                                  error.message);
                feeder.backoff_ms = BACKOFF_MAX_MS;
            } else {
                tier_report_error(context, TIER_WORKER_FEEDER, "the fast tier's change stream failed: %s; reopening",
                                  error.message);
            }
            feeder_backoff(&feeder);
            continue;
        }
        reply_batch(&reply, &events, &position);
        if (!process_batch(&feeder, &events, &position)) {
            bson_destroy(&reply);
            break;
        }
        bson_destroy(&reply);
    }
    /* A clean stop (a shutdown, a reload, the lease handed over) saves what was
     * applied since the last checkpoint: whoever feeds next replays nothing. */
    if (progress_unsaved(&feeder) && tier_holds_lease(context, TIER_WORKER_FEEDER)) {
        write_checkpoint(&feeder);
    }
    close_stream(&feeder);
    mongoc_client_pool_push(context->archive_pool, feeder.archive);
    mongoc_client_pool_push(context->fast_pool, feeder.fast);
    feeder_batch_destroy(feeder.batch);
    for (size_t i = 0; i < feeder.namespace_count; i++) {
        bson_destroy(&feeder.namespaces[i].stopped_token);
        feeder_refusals_free(&feeder.namespaces[i]);
    }
    bson_free(feeder.namespaces);
    bson_destroy(&feeder.token);
    bson_destroy(&feeder.consumed_marks);
}
