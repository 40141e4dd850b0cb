/* The warmer: copies the recent window of each namespace from the archive into
 * the fast tier, newest first, once; then the namespace's coverage horizon is
 * valid and range reads inside it go to the fast tier. One batch:
 *
 *   T0 = the fast tier's cluster time; A = the time up to which the feeder has
 *        applied the fast tier's writes: every delete acknowledged before A is
 *        already in the archive (no waiting for the feeder to reach T0: under a
 *        saturated archive it lags by seconds, and each batch would pay the lag)
 *   read the next documents of the window from the archive (time desc, _id desc)
 *   mark {ns, _id, "warm", pending} in thermocline.workerWrites
 *   insert them into the fast tier: insert only, never replace, so a document
 *        the fast tier already holds (newer: I6) refuses the copy (DuplicateKey)
 *   mark done with (T0, T1]: the feeder does not copy them back to the archive
 *   read the fast tier's deletes of these _id in (min(A, T0), T1]: a copy that
 *        landed after a client deleted the document is deleted again (I6)
 *   persist the position (thermocline.warmer): a restart resumes there
 *
 * A batch cut short after its copies landed (a crash, a tier lost) is retried as
 * the same attempt: the marks written since the last saved batch (batchTime) show
 * which copies may be in place already, which the retry's insert refuses; they
 * keep a mark and are checked for deletes from that attempt's start on, and a copy
 * of a document that left the window meanwhile (deleted) is found by its mark.
 *
 * The pace follows the archive's latency (tier_pacer_t): warming never lengthens
 * the tail of the client reads and fault-ins that must go there. The batch size
 * does not change that share (one read in flight, a pause in proportion to its
 * time), so batches grow up to a read time budget, also on a busy archive, where
 * a read's cost is mostly the queue for its first page misses and the batch's
 * round trips to both tiers, amortised over more documents. */
#include "tier/warmer_private.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_COMPONENT "WARMER"
#define BATCH_FIRST 200
#define ARCHIVE_SHARE 0.5

void warm_cursor_clear(warm_cursor_t *cursor)
{
    if (cursor->has_id) {
        bson_value_destroy(&cursor->id);
    }
    memset(cursor, 0, sizeof *cursor);
}

void warm_cursor_set(warm_cursor_t *cursor, int64_t time_ms, const bson_value_t *id)
{
    warm_cursor_clear(cursor);
    cursor->set = true;
    cursor->time_ms = time_ms;
    if (id != NULL) {
        cursor->has_id = true;
        bson_value_copy(id, &cursor->id);
    }
}

bool warmer_view_array(const bson_t *reply, const char *path, bson_t *out)
{
    bson_iter_t iter, found;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init(&iter, reply) || !bson_iter_find_descendant(&iter, path, &found) ||
        !BSON_ITER_HOLDS_ARRAY(&found)) {
        return false;
    }
    bson_iter_array(&found, &length, &data);
    return bson_init_static(out, data, length);
}

/* --- state in thermocline.warmer ----------------------------------------------------- */

void warmer_publish(warmer_t *warmer, size_t index, bool notify)
{
    warm_namespace_t *state = &warmer->namespaces[index];
    tier_namespace_progress_t *item = tier_progress_lock_namespace(warmer->context->progress, index);
    /* Not before the fast tier has the archive's indexes: a read sent there must
     * find the plans it would find in the archive. */
    bool valid = state->complete && state->index_sync.synced;
    item->coverage_valid = valid;
    item->warm_copied = state->copied;
    item->warm_remaining = state->total_estimate < 0 ? -1
                           : state->complete          ? 0
                           : state->total_estimate > state->copied ? state->total_estimate - state->copied
                                                                   : 0;
    item->warm_started_ms = state->started_ms;
    item->warm_rate = state->complete ? 0 : state->rate;
    item->warm_completed_ms = state->completed_ms;
    item->warm_copy_time = valid ? state->last_copy_time : 0; /* with the coverage it makes valid */
    tier_progress_unlock(warmer->context->progress, notify);
}

bool warmer_save_state(warmer_t *warmer, size_t index, bson_error_t *error)
{
    warm_namespace_t *state = &warmer->namespaces[index];
    const char *ns = warmer->context->config->namespaces[index].ns;
    bson_t command = BSON_INITIALIZER, updates, statement, query, document;
    BSON_APPEND_UTF8(&command, "update", TIER_WARMER_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_UTF8(&query, "_id", ns);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &document);
    BSON_APPEND_UTF8(&document, "_id", ns);
    BSON_APPEND_BOOL(&document, "complete", state->complete);
    BSON_APPEND_INT64(&document, "copied", state->copied);
    BSON_APPEND_INT64(&document, "remaining",
                      state->total_estimate < 0 ? -1
                      : state->total_estimate > state->copied ? state->total_estimate - state->copied
                                                             : 0);
    BSON_APPEND_INT64(&document, "totalEstimate", state->total_estimate);
    BSON_APPEND_DATE_TIME(&document, "passStarted", state->started_ms);
    if (state->cursor.set) {
        BSON_APPEND_DATE_TIME(&document, "cursorTime", state->cursor.time_ms);
        if (state->cursor.has_id) {
            BSON_APPEND_VALUE(&document, "cursorId", &state->cursor.id);
        }
    }
    if (state->completed_ms > 0) {
        BSON_APPEND_DATE_TIME(&document, "completedAt", state->completed_ms);
    }
    if (state->last_copy_time != 0) {
        timestamp_append(&document, "lastCopyTime", state->last_copy_time);
    }
    if (state->batch_time != 0) {
        timestamp_append(&document, "batchTime", state->batch_time);
    }
    bson_append_document_end(&statement, &document);
    BSON_APPEND_BOOL(&statement, "upsert", true);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    bool ok = tier_write_state(warmer->fast, TIER_WARMER_COLLECTION, &command, NULL, NULL, error);
    bson_destroy(&command);
    return ok;
}

static bool load_states(warmer_t *warmer, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, batch;
    bson_iter_t iter, field;
    bool ok = tier_read_state(warmer->fast, TIER_WARMER_COLLECTION, &filter, &batch, error);
    bson_destroy(&filter);
    if (ok) {
        bson_iter_init(&iter, &batch);
        while (bson_iter_next(&iter)) {
            bson_t document;
            uint32_t length;
            const uint8_t *data;
            bson_iter_document(&iter, &length, &data);
            bson_init_static(&document, data, length);
            if (!bson_iter_init_find(&field, &document, "_id") || !BSON_ITER_HOLDS_UTF8(&field)) {
                continue;
            }
            const config_namespace_t *policy = config_find_namespace(warmer->context->config,
                                                                      bson_iter_utf8(&field, NULL));
            if (policy == NULL) {
                continue;
            }
            warm_namespace_t *state = &warmer->namespaces[policy - warmer->context->config->namespaces];
            state->complete = bson_iter_init_find(&field, &document, "complete") && bson_iter_as_bool(&field);
            if (bson_iter_init_find(&field, &document, "copied") && BSON_ITER_HOLDS_NUMBER(&field)) {
                state->copied = bson_iter_as_int64(&field);
            }
            if (bson_iter_init_find(&field, &document, "totalEstimate") && BSON_ITER_HOLDS_NUMBER(&field)) {
                state->total_estimate = bson_iter_as_int64(&field);
            }
            if (bson_iter_init_find(&field, &document, "passStarted") && BSON_ITER_HOLDS_DATE_TIME(&field)) {
                state->started_ms = bson_iter_date_time(&field);
            }
            if (bson_iter_init_find(&field, &document, "completedAt") && BSON_ITER_HOLDS_DATE_TIME(&field)) {
                state->completed_ms = bson_iter_date_time(&field);
            }
            state->last_copy_time = timestamp_find(&document, "lastCopyTime");
            state->batch_time = timestamp_find(&document, "batchTime");
            bson_iter_t id_iter;
            if (bson_iter_init_find(&field, &document, "cursorTime") && BSON_ITER_HOLDS_DATE_TIME(&field)) {
                warm_cursor_set(&state->cursor, bson_iter_date_time(&field),
                                bson_iter_init_find(&id_iter, &document, "cursorId") ? bson_iter_value(&id_iter)
                                                                                      : NULL);
            }
        }
    }
    bson_destroy(&batch);
    return ok;
}

/* Index parity of namespace index when due (index_sync.h); the first success makes a
 * finished pass (or a declared complete coverage) visible. True once it has synced. */
static bool sync_indexes(warmer_t *warmer, size_t index)
{
    tier_context_t *context = warmer->context;
    const config_namespace_t *policy = &context->config->namespaces[index];
    index_sync_state_t *sync = &warmer->namespaces[index].index_sync;
    if (clock_monotonic_ms() < sync->next_due_ms) {
        return sync->synced;
    }
    bson_error_t error;
    bool first = !sync->synced;
    if (index_sync_namespace(context, warmer->archive, warmer->fast, policy, sync, &error)) {
        sync->synced = true;
        sync->next_due_ms = clock_monotonic_ms() + policy->index_sync_period_ms;
        if (first && policy->coverage == CONFIG_COVERAGE_COMPLETE) {
            tier_namespace_progress_t *declared = tier_progress_lock_namespace(context->progress, index);
            declared->warm_declared = true;
            tier_progress_unlock(context->progress, true);
        } else if (first) {
            warmer_publish(warmer, index, warmer->namespaces[index].complete);
        }
    } else {
        tier_report_error(context, TIER_WORKER_WARMER, "cannot copy the archive's indexes of %s to the fast tier: %s",
                          policy->ns, error.message);
        sync->next_due_ms = clock_monotonic_ms() + (first ? 1000 : policy->index_sync_period_ms);
    }
    return sync->synced;
}

void warmer_run(tier_group_t *group, void *argument)
{
    tier_context_t *context = argument;
    size_t count = context->config->namespace_count;
    warmer_t warmer = {.context = context};
    warmer.namespaces = bson_malloc0((count + 1) * sizeof *warmer.namespaces);
    for (size_t i = 0; i < count; i++) {
        warmer.namespaces[i].total_estimate = -1;
        index_sync_state_init(&warmer.namespaces[i].index_sync);
        int64_t rate_limit = context->config->warmer_rate_limit;
        warmer.namespaces[i].batch_size = rate_limit > 0 && rate_limit < BATCH_FIRST ? (int32_t)rate_limit : BATCH_FIRST;
    }
    tier_pacer_init(&warmer.pacer, ARCHIVE_SHARE);
    warmer.kill_after_batches = tier_test_hook_countdown("THERMOCLINE_TEST_KILL_AFTER_COPY");
    warmer.fast = mongoc_client_pool_pop(context->fast_pool);
    warmer.archive = mongoc_client_pool_pop(context->archive_pool);
    tier_worker_progress_t *item = tier_progress_lock_worker(context->progress, TIER_WORKER_WARMER);
    item->running = true;
    tier_progress_unlock(context->progress, false);

    bool loaded = false;
    while (!tier_group_stopping(group) && count > 0) {
        bson_error_t error;
        if (!loaded) {
            loaded = load_states(&warmer, &error);
            if (!loaded) {
                tier_report_error(context, TIER_WORKER_WARMER, "cannot read the warmer's position: %s", error.message);
                tier_group_sleep(group, 1000);
                continue;
            }
            for (size_t i = 0; i < count; i++) {
                warmer_publish(&warmer, i, false);
            }
        }
        int64_t pause = 1000;
        bool worked = false;
        for (size_t i = 0; i < count && !tier_group_stopping(group); i++) {
            warm_namespace_t *state = &warmer.namespaces[i];
            if (!sync_indexes(&warmer, i)) {
                continue; /* no batch before the first sync: see warmer_publish */
            }
            if (context->config->namespaces[i].coverage == CONFIG_COVERAGE_COMPLETE || state->complete ||
                clock_monotonic_ms() < state->next_due_ms) {
                continue;
            }
            int64_t batch_pause = 0;
            warm_batch_result_t result = warmer_batch(&warmer, i, &batch_pause);
            if (result == WARM_BATCH_BLOCKED) {
                state->next_due_ms = clock_monotonic_ms() + context->config->namespaces[i].warmer_period_ms;
            } else {
                worked = true;
                pause = batch_pause < pause ? batch_pause : pause;
            }
        }
        if (!worked) {
            pause = 200;
        }
        tier_group_sleep(group, pause);
    }
    for (size_t i = 0; i < count; i++) {
        warm_cursor_clear(&warmer.namespaces[i].cursor);
        index_sync_state_cleanup(&warmer.namespaces[i].index_sync);
    }
    bson_free(warmer.namespaces);
    mongoc_client_pool_push(context->archive_pool, warmer.archive);
    mongoc_client_pool_push(context->fast_pool, warmer.fast);
}
