/* One batch of the warmer (the steps at the top of warmer.c): read the next
 * documents of the window from the archive, mark and copy them into the fast tier,
 * check them against the deletes made meanwhile, save the position; and the pace
 * and batch size that follow the archive's read time. */
#include "tier/warmer_private.h"

#include "common/log.h"
#include "query/order.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_COMPONENT "WARMER"
#define BATCH_MIN 50
#define BATCH_MAX 1000
#define READ_BUDGET_MS 2000 /* one batch's archive read: short enough to follow the load and to stop */
#define APPLIED_WAIT_MS 5000
#define RESURRECTION_WAIT_MS 600000 /* the feeder's lag, however long, unless its feed stops */
#define DELETE_CHECK_WAIT_MS 10000
#define PROGRESS_LOG_MS 5000

/* Appends to out (a BSON array with *count elements) the archive documents of a
 * find; false on an error. */
static bool archive_find(warmer_t *warmer, const char *database, const char *collection, const bson_t *filter,
                         const bson_t *sort, int32_t limit, bson_t *out, uint32_t *count, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply, batch;
    BSON_APPEND_UTF8(&command, "find", collection);
    BSON_APPEND_DOCUMENT(&command, "filter", filter);
    BSON_APPEND_DOCUMENT(&command, "sort", sort);
    BSON_APPEND_INT32(&command, "limit", limit);
    BSON_APPEND_INT32(&command, "batchSize", limit);
    BSON_APPEND_BOOL(&command, "singleBatch", true);
    bool ok = tier_command(warmer->archive, database, &command, &reply, error);
    if (ok && warmer_view_array(&reply, "cursor.firstBatch", &batch)) {
        bson_iter_t iter;
        bson_iter_init(&iter, &batch);
        while (bson_iter_next(&iter)) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string((*count)++, &key_string, key, sizeof key);
            bson_append_iter(out, key_string, -1, &iter);
        }
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* A view of the document at index i of a BSON array of documents; its time and _id. */
typedef struct read_document {
    const uint8_t *data;
    uint32_t length;
    int64_t time_ms;
    bson_value_t id; /* a view */
} read_document_t;

static size_t collect_read(const bson_t *array, const char *time_field, read_document_t *out)
{
    bson_iter_t iter, id;
    size_t count = 0;
    bson_iter_init(&iter, array);
    while (bson_iter_next(&iter)) {
        bson_t document;
        bson_iter_document(&iter, &out[count].length, &out[count].data);
        bson_init_static(&document, out[count].data, out[count].length);
        out[count].time_ms = 0;
        tier_time_value(&document, time_field, &out[count].time_ms);
        if (bson_iter_init_find(&id, &document, "_id")) {
            out[count].id = *bson_iter_value(&id);
            count++;
        }
    }
    return count;
}

static void append_read(bson_t *out, uint32_t *count, const read_document_t *document)
{
    char key[16];
    const char *key_string;
    bson_t view;
    bson_init_static(&view, document->data, document->length);
    bson_uint32_to_string((*count)++, &key_string, key, sizeof key);
    bson_append_document(out, key_string, -1, &view);
}

/* The next documents of the window, newest first, in two reads an index on the
 * time field serves without sorting the window: the rest of the cursor's time
 * (equality, by _id), then older times (range, in index order). A range read cut
 * by the limit leaves out its last time, which comes whole through the next
 * equality read, so ties are never split in an order the index does not keep.
 * *out_cursor is where the pass stands after these; *out_exhausted when the
 * window has nothing left. */
static bool read_next(warmer_t *warmer, size_t index, int64_t lower_ms, bson_t *out, uint32_t *count,
                      warm_cursor_t *out_cursor, bool *out_exhausted, bson_error_t *error)
{
    warm_namespace_t *state = &warmer->namespaces[index];
    const config_namespace_t *policy = &warmer->context->config->namespaces[index];
    const warm_cursor_t *cursor = &state->cursor;
    char database[128];
    const char *collection;
    tier_split_namespace(policy->ns, database, sizeof database, &collection);
    bson_init(out);
    *count = 0;
    *out_exhausted = false;
    memset(out_cursor, 0, sizeof *out_cursor);
    bool ok = true;
    bson_t ties = BSON_INITIALIZER, older = BSON_INITIALIZER;
    uint32_t tie_count = 0, older_count = 0;
    if (cursor->set && cursor->time_ms >= lower_ms) {
        bson_t filter = BSON_INITIALIZER, id_condition, sort = BSON_INITIALIZER;
        BSON_APPEND_DATE_TIME(&filter, policy->time_field, cursor->time_ms);
        if (cursor->has_id) {
            BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &id_condition);
            BSON_APPEND_VALUE(&id_condition, "$lt", &cursor->id);
            bson_append_document_end(&filter, &id_condition);
        }
        BSON_APPEND_INT32(&sort, "_id", -1);
        ok = archive_find(warmer, database, collection, &filter, &sort, state->batch_size, &ties, &tie_count, error);
        bson_destroy(&filter);
        bson_destroy(&sort);
    }
    read_document_t *read = bson_malloc0((size_t)(2 * state->batch_size + 1) * sizeof *read);
    size_t tie_read = ok ? collect_read(&ties, policy->time_field, read) : 0;
    for (size_t i = 0; i < tie_read; i++) {
        append_read(out, count, &read[i]);
    }
    if (ok && (int32_t)tie_read >= state->batch_size) {
        warm_cursor_set(out_cursor, cursor->time_ms, &read[tie_read - 1].id); /* more at this time */
        goto done;
    }
    int32_t room = state->batch_size - (int32_t)tie_read;
    bson_t filter = BSON_INITIALIZER, condition, sort = BSON_INITIALIZER;
    bson_append_document_begin(&filter, policy->time_field, -1, &condition);
    BSON_APPEND_DATE_TIME(&condition, "$gte", lower_ms);
    if (cursor->set) {
        BSON_APPEND_DATE_TIME(&condition, "$lt", cursor->time_ms);
    }
    bson_append_document_end(&filter, &condition);
    bson_append_int32(&sort, policy->time_field, -1, -1);
    ok = ok && archive_find(warmer, database, collection, &filter, &sort, room, &older, &older_count, error);
    bson_destroy(&filter);
    bson_destroy(&sort);
    size_t older_read = ok ? collect_read(&older, policy->time_field, read + tie_read) : 0;
    read_document_t *range = read + tie_read;
    if (!ok) {
        goto done;
    }
    if (older_read == 0) {
        if (tie_read == 0) {
            *out_exhausted = true;
        } else {
            warm_cursor_set(out_cursor, cursor->time_ms, &read[tie_read - 1].id);
        }
        goto done;
    }
    int64_t last_time = range[older_read - 1].time_ms;
    if ((int32_t)older_read < room) {
        /* Everything older is here, the last time included. */
        for (size_t i = 0; i < older_read; i++) {
            append_read(out, count, &range[i]);
        }
        /* Nothing left at last_time: mark it done with the smallest _id read there. */
        const bson_value_t *smallest = NULL;
        for (size_t i = 0; i < older_read; i++) {
            if (range[i].time_ms == last_time && (smallest == NULL || order_compare_values(&range[i].id, smallest) < 0)) {
                smallest = &range[i].id;
            }
        }
        warm_cursor_set(out_cursor, last_time, smallest);
        goto done;
    }
    /* Cut by the limit: the last time comes whole next time, by _id. */
    for (size_t i = 0; i < older_read; i++) {
        if (range[i].time_ms != last_time) {
            append_read(out, count, &range[i]);
        }
    }
    warm_cursor_set(out_cursor, last_time, NULL);
done:
    bson_free(read);
    bson_destroy(&ties);
    bson_destroy(&older);
    return ok;
}

static void append_mark_keys(bson_t *array, const char *ns, const bson_value_t *ids, const bool *selected, size_t count)
{
    uint32_t next = 0;
    for (size_t i = 0; i < count; i++) {
        if (selected == NULL || selected[i]) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(next++, &key_string, key, sizeof key);
            worker_writes_mark_key(array, key_string, ns, &ids[i], "warm");
        }
    }
}

/* Marks: pending for every id before the insert, since this batch's T0, or since
 * the start of an unfinished attempt at it (since_of[i], see find_unfinished), with
 * the digest of the copy (digests[i]). */
static bool write_pending_marks(warmer_t *warmer, const char *ns, const bson_value_t *ids, const uint64_t *since_of,
                                const int64_t *digests, size_t count, uint64_t since, bson_error_t *error)
{
    if (count == 0) {
        return true; /* an empty update is InvalidLength: nothing to mark is no command */
    }
    bson_t command = BSON_INITIALIZER, updates;
    BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_t statement, query, update, document;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_document_begin(&updates, key_string, -1, &statement);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
        worker_writes_mark_key(&query, "_id", ns, &ids[i], "warm");
        bson_append_document_end(&statement, &query);
        /* $set, not a replacement: the mark's history of done ranges stays. */
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
        BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &document);
        BSON_APPEND_UTF8(&document, "state", "pending");
        timestamp_append(&document, "since", since_of[i] != 0 ? since_of[i] : since);
        BSON_APPEND_INT64(&document, "copy", digests[i]);
        bson_append_document_end(&update, &document);
        bson_append_document_end(&statement, &update);
        BSON_APPEND_BOOL(&statement, "upsert", true);
        bson_append_document_end(&updates, &statement);
    }
    bson_append_array_end(&command, &updates);
    BSON_APPEND_BOOL(&command, "ordered", false);
    bool ok = tier_write_state(warmer->fast, TIER_MARKS_COLLECTION, &command, NULL, NULL, error);
    bson_destroy(&command);
    return ok;
}

/* Marks after the insert: done with (from, to] for the copies that landed and for
 * the ids an unfinished attempt may have copied (from its start: the feeder must
 * not replay that copy either), released (tier_release_marks) for the other refused ones. */
static bool finish_marks(warmer_t *warmer, const char *ns, const bson_value_t *ids, const bool *inserted,
                         const uint64_t *since_of, size_t count, uint64_t from, uint64_t to, bson_error_t *error)
{
    bool *refused = bson_malloc0(count + 1);
    size_t done_count = 0;
    for (size_t i = 0; i < count; i++) {
        refused[i] = !inserted[i] && since_of[i] == 0;
        done_count += !refused[i];
    }
    bool ok = true;
    if (done_count > 0) {
        bson_t command = BSON_INITIALIZER, updates;
        uint32_t next = 0;
        BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
        BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
        for (size_t i = 0; i < count; i++) {
            char key[16];
            const char *key_string;
            bson_t statement, query;
            if (refused[i]) {
                continue;
            }
            bson_uint32_to_string(next++, &key_string, key, sizeof key);
            bson_append_document_begin(&updates, key_string, -1, &statement);
            BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
            worker_writes_mark_key(&query, "_id", ns, &ids[i], "warm");
            bson_append_document_end(&statement, &query);
            worker_writes_append_done_update(&statement, "u", since_of[i] != 0 ? since_of[i] : from, to);
            bson_append_document_end(&updates, &statement);
        }
        bson_append_array_end(&command, &updates);
        BSON_APPEND_BOOL(&command, "ordered", false);
        ok = tier_write_state(warmer->fast, TIER_MARKS_COLLECTION, &command, NULL, NULL, error);
        bson_destroy(&command);
    }
    if (ok && done_count < count) {
        /* Released, not removed: an earlier copy's ranges stay for the change streams behind them. */
        bson_t selector = BSON_INITIALIZER, condition, keys;
        BSON_APPEND_DOCUMENT_BEGIN(&selector, "_id", &condition);
        BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &keys);
        append_mark_keys(&keys, ns, ids, refused, count);
        bson_append_array_end(&condition, &keys);
        bson_append_document_end(&selector, &condition);
        ok = tier_release_marks(warmer->fast, &selector, NULL, error);
        bson_destroy(&selector);
    }
    bson_free(refused);
    return ok;
}

/* Inserts documents (a BSON array) into the fast tier; inserted[i] tells which
 * landed, *out_time is the insert's cluster time. DuplicateKey is the expected
 * refusal: the fast tier holds that document already (newer or equal). */
static bool insert_copies(warmer_t *warmer, const char *database, const char *collection, const bson_t *documents,
                          size_t count, bool *inserted, uint64_t *out_time, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&command, "insert", collection);
    BSON_APPEND_ARRAY(&command, "documents", documents);
    BSON_APPEND_BOOL(&command, "ordered", false);
    /* The archive accepted these documents; a validator copied to the fast tier
     * must not refuse the copies (mongod lets older documents break a newer one). */
    BSON_APPEND_BOOL(&command, "bypassDocumentValidation", true);
    /* Majority: the change stream that checks for deletes reaches the copies at once
     * (unjournaled writes become visible to it only at the next journal sync). */
    bson_t concern;
    BSON_APPEND_DOCUMENT_BEGIN(&command, "writeConcern", &concern);
    BSON_APPEND_UTF8(&concern, "w", "majority");
    bson_append_document_end(&command, &concern);
    for (size_t i = 0; i < count; i++) {
        inserted[i] = true;
    }
    bool ok = tier_command(warmer->fast, database, &command, &reply, error);
    bson_iter_t errors;
    tier_write_error_t write_error;
    if (tier_write_errors_init(&errors, &reply)) {
        ok = true;
        while (tier_write_errors_next(&errors, &write_error)) {
            if (write_error.index >= 0 && (size_t)write_error.index < count) {
                inserted[write_error.index] = false;
            }
            if (write_error.code != TC_ERR_DUPLICATE_KEY) {
                TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                             "the fast tier refused a copy of {db}.{collection} (code {code})",
                             TC_ATTR_STR("db", database), TC_ATTR_STR("collection", collection),
                             TC_ATTR_INT("code", write_error.code));
            }
        }
    }
    *out_time = timestamp_find(&reply, "operationTime");
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* The _id values of the fast tier's deletes in (from, to] among ids (a BSON
 * array), appended to out_deleted (a BSON array). */
static bool deletes_since(warmer_t *warmer, const char *database, const char *collection, const bson_t *ids,
                          uint64_t from, uint64_t to, bson_t *out_deleted, bson_error_t *error)
{
    mongoc_client_session_t *session = mongoc_client_start_session(warmer->fast, NULL, error);
    if (session == NULL) {
        return false;
    }
    bson_t command = BSON_INITIALIZER, pipeline, stage, spec, match, match_spec, id_condition, cursor, opts, reply;
    BSON_APPEND_UTF8(&command, "aggregate", collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "pipeline", &pipeline);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &spec);
    timestamp_append(&spec, "startAtOperationTime", from);
    bson_append_document_end(&stage, &spec);
    bson_append_document_end(&pipeline, &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &match);
    BSON_APPEND_DOCUMENT_BEGIN(&match, "$match", &match_spec);
    BSON_APPEND_UTF8(&match_spec, "operationType", "delete");
    BSON_APPEND_DOCUMENT_BEGIN(&match_spec, "documentKey._id", &id_condition);
    BSON_APPEND_ARRAY(&id_condition, "$in", ids);
    bson_append_document_end(&match_spec, &id_condition);
    bson_append_document_end(&match, &match_spec);
    bson_append_document_end(&pipeline, &match);
    bson_append_array_end(&command, &pipeline);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "cursor", &cursor);
    bson_append_document_end(&command, &cursor);
    bson_init(&opts);
    bool ok = mongoc_client_session_append(session, &opts, error) &&
              mongoc_client_command_with_opts(warmer->fast, database, &command, NULL, &opts, &reply, error);
    if (!ok) {
        bson_init(&reply);
    }
    bson_destroy(&command);
    int64_t deadline = clock_monotonic_ms() + DELETE_CHECK_WAIT_MS;
    int64_t cursor_id = 0;
    uint32_t found = 0;
    while (ok) {
        bson_t batch, token;
        bson_iter_t iter, field;
        if (bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "cursor.id", &field)) {
            cursor_id = bson_iter_as_int64(&field);
        }
        if (warmer_view_array(&reply, "cursor.firstBatch", &batch) ||
            warmer_view_array(&reply, "cursor.nextBatch", &batch)) {
            bson_iter_init(&iter, &batch);
            while (bson_iter_next(&iter)) {
                bson_iter_t event, id;
                if (bson_iter_recurse(&iter, &event) && bson_iter_find_descendant(&event, "documentKey._id", &id)) {
                    char key[16];
                    const char *key_string;
                    bson_uint32_to_string(found++, &key_string, key, sizeof key);
                    bson_append_iter(out_deleted, key_string, -1, &id);
                }
            }
        }
        uint64_t position = 0;
        if (bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "cursor.postBatchResumeToken", &field) &&
            BSON_ITER_HOLDS_DOCUMENT(&field)) {
            uint32_t length;
            const uint8_t *data;
            bson_iter_document(&field, &length, &data);
            bson_init_static(&token, data, length);
            position = tier_token_time(&token);
        }
        if (position >= to) {
            break;
        }
        if (cursor_id == 0 || clock_monotonic_ms() > deadline || tier_group_stopping(warmer->context->group)) {
            ok = tc_error_set(error, TC_ERR_EXCEEDED_TIME_LIMIT,
                              "the fast tier's change stream did not reach the copy's time within %d ms",
                              DELETE_CHECK_WAIT_MS);
            break;
        }
        bson_t get_more = BSON_INITIALIZER;
        BSON_APPEND_INT64(&get_more, "getMore", cursor_id);
        BSON_APPEND_UTF8(&get_more, "collection", collection);
        BSON_APPEND_INT32(&get_more, "maxTimeMS", 200);
        bson_destroy(&reply);
        ok = mongoc_client_command_with_opts(warmer->fast, database, &get_more, NULL, &opts, &reply, error);
        bson_destroy(&get_more);
    }
    bson_destroy(&reply);
    if (cursor_id != 0) {
        bson_t kill = BSON_INITIALIZER, cursors;
        bson_error_t ignored;
        BSON_APPEND_UTF8(&kill, "killCursors", collection);
        BSON_APPEND_ARRAY_BEGIN(&kill, "cursors", &cursors);
        BSON_APPEND_INT64(&cursors, "0", cursor_id);
        bson_append_array_end(&kill, &cursors);
        mongoc_client_command_with_opts(warmer->fast, database, &kill, NULL, &opts, &reply, &ignored);
        bson_destroy(&reply);
        bson_destroy(&kill);
    }
    bson_destroy(&opts);
    mongoc_client_session_destroy(session);
    return ok;
}

static bool same_value(const bson_value_t *left, const bson_value_t *right)
{
    bson_t left_holder = BSON_INITIALIZER, right_holder = BSON_INITIALIZER;
    BSON_APPEND_VALUE(&left_holder, "v", left);
    BSON_APPEND_VALUE(&right_holder, "v", right);
    bool equal = bson_equal(&left_holder, &right_holder);
    bson_destroy(&left_holder);
    bson_destroy(&right_holder);
    return equal;
}

/* Deletes the fast tier's document if it is still exactly that version (a client's
 * later write wins), not marked: the feeder replays this delete too, a no-op in the
 * archive. *out_deleted: it was there. */
static bool delete_copy(warmer_t *warmer, const char *database, const char *collection, const bson_t *version,
                        bool *out_deleted, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_iter_t n;
    tier_append_delete_version(&command, collection, version);
    bool ok = tier_command(warmer->fast, database, &command, &reply, error);
    *out_deleted = ok && bson_iter_init_find(&n, &reply, "n") && bson_iter_as_int64(&n) == 1;
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* Deletes again the copies of documents a client deleted while they were copied.
 * A delete seen in (min(A, T0), T1] may also be the evictor's (of an earlier copy, the
 * window having moved meanwhile): once the feeder has applied up to T1, a client's
 * delete is in the archive and an eviction is not, so the archive tells them apart.
 * That wait is the feeder's lag, as long as it takes (RESURRECTION_WAIT_MS): rare
 * (only a batch whose documents were deleted meanwhile pays it), and the one place
 * where the warmer still needs the feeder to catch up. False when a copy could not
 * be judged or deleted (the feeder or a tier unavailable): the batch is retried,
 * as an unfinished attempt (find_unfinished), instead of leaving the copy there. */
static bool undo_resurrections(warmer_t *warmer, size_t index, const char *database, const char *collection,
                               const bson_t *documents, const bson_t *deleted, uint64_t end_time, bson_error_t *error)
{
    if (!tier_wait_applied(warmer->context, warmer->fast, index, end_time, RESURRECTION_WAIT_MS, NULL)) {
        return tc_error_set(error, TC_ERR_EXCEEDED_TIME_LIMIT,
                            "a document of %s.%s was deleted while it was copied, and the feeder has not applied the "
                            "delete yet",
                            database, collection);
    }
    bool ok = true;
    bson_iter_t iter, deleted_iter, id;
    bson_iter_init(&iter, documents);
    while (ok && bson_iter_next(&iter)) {
        bson_t document, version;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        if (!bson_iter_init_find(&id, &document, "_id")) {
            continue;
        }
        bool was_deleted = false;
        bson_iter_init(&deleted_iter, deleted);
        while (!was_deleted && bson_iter_next(&deleted_iter)) {
            was_deleted = same_value(bson_iter_value(&deleted_iter), bson_iter_value(&id));
        }
        bool held = true;
        if (was_deleted) {
            ok = tier_find_by_id(warmer->archive, database, collection, bson_iter_value(&id), &held, NULL, error);
        }
        if (!ok || held) {
            continue;
        }
        bool copy_deleted = false;
        if (tier_version_filter(&document, &version)) {
            ok = delete_copy(warmer, database, collection, &version, &copy_deleted, error);
        }
        if (copy_deleted) {
            TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                         "{db}.{collection}: a document was deleted while the warmer copied it; the copy is "
                         "deleted again",
                         TC_ATTR_STR("db", database), TC_ATTR_STR("collection", collection));
        }
        bson_destroy(&version);
    }
    return ok;
}

/* Warm marks of the namespace written after the last batch that was checked and
 * saved (after): an attempt that did not finish (a crash, a tier lost mid-batch)
 * may have left copies in the fast tier. For an id of this batch, since_of[i] is
 * that attempt's start (0: none): this attempt's insert refuses the copy as a
 * duplicate, so the copy is covered as if this attempt had made it (mark, delete
 * check). The other ids (out_orphans, a BSON array of {id, copy}) are no longer in
 * the archive's window as read now, most likely deleted since: settle_orphans
 * looks at them. */
static bool find_unfinished(warmer_t *warmer, const char *ns, const bson_value_t *ids, size_t count, uint64_t after,
                            uint64_t *since_of, bson_t *out_orphans, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, filter, since, reply, batch;
    BSON_APPEND_UTF8(&command, "find", TIER_MARKS_COLLECTION);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "_id.ns", ns);
    BSON_APPEND_UTF8(&filter, "_id.op", "warm");
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "since", &since);
    timestamp_append(&since, "$gt", after);
    bson_append_document_end(&filter, &since);
    bson_append_document_end(&command, &filter);
    BSON_APPEND_INT32(&command, "limit", 4 * BATCH_MAX);
    BSON_APPEND_INT32(&command, "batchSize", 4 * BATCH_MAX);
    BSON_APPEND_BOOL(&command, "singleBatch", true);
    bool ok = tier_command(warmer->fast, TIER_DATABASE, &command, &reply, error);
    uint32_t orphans = 0;
    if (ok && warmer_view_array(&reply, "cursor.firstBatch", &batch)) {
        bson_iter_t iter, key;
        bson_iter_init(&iter, &batch);
        while (bson_iter_next(&iter)) {
            bson_t mark;
            uint32_t length;
            const uint8_t *data;
            bson_iter_document(&iter, &length, &data);
            bson_init_static(&mark, data, length);
            if (!bson_iter_init(&key, &mark) || !bson_iter_find_descendant(&key, "_id.id", &key)) {
                continue;
            }
            bool in_batch = false;
            for (size_t i = 0; i < count; i++) {
                if (same_value(&ids[i], bson_iter_value(&key))) {
                    since_of[i] = timestamp_find(&mark, "since");
                    in_batch = true;
                }
            }
            bson_iter_t copy;
            if (!in_batch && bson_iter_init_find(&copy, &mark, "copy") && BSON_ITER_HOLDS_INT64(&copy)) {
                char index_key[16];
                const char *index_string;
                bson_t orphan;
                bson_uint32_to_string(orphans++, &index_string, index_key, sizeof index_key);
                bson_append_document_begin(out_orphans, index_string, -1, &orphan);
                bson_append_iter(&orphan, "id", 2, &key);
                BSON_APPEND_INT64(&orphan, "copy", bson_iter_int64(&copy));
                bson_append_document_end(out_orphans, &orphan);
            }
        }
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* The copies an unfinished attempt may have left of documents the archive no
 * longer holds. Once the feeder has applied the fast tier's writes up to end_time,
 * every document the fast tier holds whose insert was replayed is in the archive
 * (the archive keeps evicted documents, I3): one the archive lacks and that is
 * exactly the copy (its digest) is a copy of a document a client deleted, which
 * the feeder did not replay, and is deleted again (that version only: a client's
 * later write wins). */
static bool settle_orphans(warmer_t *warmer, size_t index, const char *database, const char *collection,
                           const bson_t *orphans, uint64_t end_time, bson_error_t *error)
{
    if (bson_empty(orphans)) {
        return true;
    }
    if (!tier_wait_applied(warmer->context, warmer->fast, index, end_time, RESURRECTION_WAIT_MS, NULL)) {
        return tc_error_set(error, TC_ERR_EXCEEDED_TIME_LIMIT,
                            "%s.%s: the feeder has not applied the writes made while an unfinished warm batch ran",
                            database, collection);
    }
    bool ok = true;
    bson_iter_t orphan, iter, copy;
    bson_iter_init(&orphan, orphans);
    while (ok && bson_iter_next(&orphan)) {
        bool held = true;
        if (!bson_iter_recurse(&orphan, &iter) || !bson_iter_find(&iter, "id") ||
            !bson_iter_recurse(&orphan, &copy) || !bson_iter_find(&copy, "copy")) {
            continue;
        }
        ok = tier_find_by_id(warmer->archive, database, collection, bson_iter_value(&iter), &held, NULL, error);
        if (!ok || held) {
            continue;
        }
        bool present = false, copy_deleted = false;
        bson_t document, version;
        ok = tier_find_by_id(warmer->fast, database, collection, bson_iter_value(&iter), &present, &document, error);
        if (present && worker_writes_digest(&document) == bson_iter_as_int64(&copy)) {
            if (tier_version_filter(&document, &version)) {
                ok = delete_copy(warmer, database, collection, &version, &copy_deleted, error);
                if (ok) {
                    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                                 "{db}.{collection}: a copy left by an unfinished warm batch of a document deleted "
                                 "since is deleted again",
                                 TC_ATTR_STR("db", database), TC_ATTR_STR("collection", collection));
                }
            }
            bson_destroy(&version);
        }
        bson_destroy(&document);
    }
    return ok;
}

static void count_window(warmer_t *warmer, size_t index, int64_t lower_ms)
{
    const config_namespace_t *policy = &warmer->context->config->namespaces[index];
    char database[128];
    const char *collection;
    tier_split_namespace(policy->ns, database, sizeof database, &collection);
    bson_t command = BSON_INITIALIZER, query, condition, reply;
    bson_error_t error;
    BSON_APPEND_UTF8(&command, "count", collection);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "query", &query);
    bson_append_document_begin(&query, policy->time_field, -1, &condition);
    BSON_APPEND_DATE_TIME(&condition, "$gte", lower_ms);
    bson_append_document_end(&query, &condition);
    bson_append_document_end(&command, &query);
    BSON_APPEND_INT32(&command, "maxTimeMS", 10000);
    bson_iter_t iter;
    warmer->namespaces[index].total_estimate =
        tier_command(warmer->archive, database, &command, &reply, &error) && bson_iter_init_find(&iter, &reply, "n")
            ? bson_iter_as_int64(&iter)
            : -1;
    bson_destroy(&reply);
    bson_destroy(&command);
}

static void log_progress(warmer_t *warmer, size_t index, bool force)
{
    warm_namespace_t *state = &warmer->namespaces[index];
    int64_t now = clock_monotonic_ms();
    if (!force && now - state->last_log_ms < PROGRESS_LOG_MS) {
        return;
    }
    double seconds = state->last_log_ms > 0 ? (double)(now - state->last_log_ms) / 1000.0 : 0;
    if (seconds > 0) {
        state->rate = (double)(state->copied - state->copied_at_last_log) / seconds; /* published: status, metrics */
    }
    /* The estimate and the time left are facts only once known: attributes after
     * the others, present or not. */
    tc_log_attr_t attrs[8] = {
        TC_ATTR_STR("ns", warmer->context->config->namespaces[index].ns),
        TC_ATTR_INT("copied", state->copied),
        TC_ATTR_INT("docsPerSecond", state->rate + 0.5),
        TC_ATTR_INT("batchSize", state->batch_size),
        TC_ATTR_INT("lastReadMillis", state->last_read_ms),
        TC_ATTR_INT("pauseMillis", state->last_pause_ms),
    };
    size_t count = 6;
    int64_t remaining = state->total_estimate - state->copied;
    if (state->total_estimate >= 0) {
        attrs[count++] = TC_ATTR_INT("totalEstimate", state->total_estimate);
    }
    if (state->total_estimate >= 0 && !state->complete && state->rate > 0) {
        attrs[count++] = TC_ATTR_INT("etaSeconds", remaining > 0 ? (double)remaining / state->rate + 0.5 : 0);
    }
    if (tc_log_enabled(TC_LOG_INFO)) {
        tc_log_write_attrs(TC_LOG_INFO, LOG_COMPONENT, 0,
                           state->total_estimate >= 0
                               ? "{ns}: copied {copied} of about {totalEstimate} documents of the window "
                                 "({docsPerSecond}/s; batches of {batchSize}, last read {lastReadMillis} ms, pause "
                                 "{pauseMillis} ms)"
                               : "{ns}: copied {copied} documents of the window ({docsPerSecond}/s; batches of "
                                 "{batchSize}, last read {lastReadMillis} ms, pause {pauseMillis} ms)",
                           attrs, count);
    }
    state->last_log_ms = now;
    state->copied_at_last_log = state->copied;
}

/* T0 (*out_start_time: the fast tier's cluster time) and the time from which the
 * copies are checked for deletes (*out_check_from: min(A, T0), A the feeder's
 * applied time); the first batch of a pass counts and announces the window. False,
 * reported, when no batch can start: the fast tier unreachable or without an oplog,
 * or no word from the feeder. */
static bool batch_start(warmer_t *warmer, size_t index, uint64_t *out_start_time, uint64_t *out_check_from)
{
    tier_context_t *context = warmer->context;
    const config_namespace_t *policy = &context->config->namespaces[index];
    warm_namespace_t *state = &warmer->namespaces[index];
    bson_error_t error;
    uint64_t start_time = 0;
    if (!tier_cluster_time(warmer->fast, &start_time, &error)) {
        tier_report_error(context, TIER_WORKER_WARMER, "cannot reach the fast tier: %s", error.message);
        return false;
    }
    if (start_time == 0) {
        tier_report_error(context, TIER_WORKER_WARMER,
                          "the fast tier keeps no oplog (start it with --replSet): nothing is warmed, since a copy "
                          "could not be checked against deletes made meanwhile");
        return false;
    }
    int64_t lower_ms = clock_wall_ms() - policy->max_age_ms + policy->safety_slack_ms;
    if (state->started_ms == 0) {
        state->started_ms = clock_wall_ms();
        count_window(warmer, index, lower_ms);
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                     "{ns}: warming the window (about {totalEstimate} documents), newest first",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_INT("totalEstimate", state->total_estimate));
        state->last_log_ms = clock_monotonic_ms();
        warmer_publish(warmer, index, false);
    }
    /* Every delete acknowledged before A is in the archive before we read it; those
     * after are checked once the copies landed. The wait is only for the feeder's
     * first report (a time of 1: any). */
    uint64_t applied_time = 0;
    if (!tier_wait_applied(context, warmer->fast, index, 1, APPLIED_WAIT_MS, &applied_time)) {
        if (!tier_group_stopping(context->group)) {
            tier_report_error(context, TIER_WORKER_WARMER,
                              "%s: waiting for the feeder (stopped or not running) before copying more", policy->ns);
        }
        return false;
    }
    *out_start_time = start_time;
    *out_check_from = applied_time < start_time ? applied_time : start_time;
    return true;
}

/* After a read of latency ms that brought count documents: the pause the pace
 * asks (*out_pause_ms), within the operator's rate limit, and the next batch's
 * size, bigger while a read stays well within its budget, smaller past it: not
 * smaller because the archive is busy (see the top of warmer.c). */
static void pace_after_read(warmer_t *warmer, size_t index, int64_t latency, uint32_t count, int64_t *out_pause_ms)
{
    warm_namespace_t *state = &warmer->namespaces[index];
    *out_pause_ms = tier_pacer_pause_ms(&warmer->pacer, latency);
    int64_t rate_limit = warmer->context->config->warmer_rate_limit;
    if (rate_limit > 0) {
        /* The operator's fixed cap, on top of the adaptive pace. */
        int64_t budget_ms = (int64_t)count * 1000 / rate_limit - latency;
        *out_pause_ms = budget_ms > *out_pause_ms ? budget_ms : *out_pause_ms;
    }
    if (latency < READ_BUDGET_MS / 2 && state->batch_size < BATCH_MAX) {
        state->batch_size = state->batch_size * 5 / 4 + 1;
    } else if (latency > READ_BUDGET_MS && state->batch_size > BATCH_MIN) {
        state->batch_size /= 2;
    }
    if (state->batch_size > BATCH_MAX) {
        state->batch_size = BATCH_MAX;
    }
    if (state->batch_size < BATCH_MIN) {
        state->batch_size = BATCH_MIN;
    }
    if (rate_limit > 0 && state->batch_size > rate_limit) {
        state->batch_size = (int32_t)rate_limit; /* a batch is at most a second's worth */
    }
    state->last_read_ms = latency;
    state->last_pause_ms = *out_pause_ms;
}

/* Reads the batch from the archive: read_next() over the window as of now, then
 * the pace. On success the caller owns *out_documents and *out_next_cursor; false,
 * reported, with nothing to free. */
static bool batch_read(warmer_t *warmer, size_t index, bson_t *out_documents, uint32_t *out_count,
                       warm_cursor_t *out_next_cursor, bool *out_exhausted, int64_t *out_pause_ms)
{
    const config_namespace_t *policy = &warmer->context->config->namespaces[index];
    bson_error_t error;
    int64_t read_started = clock_monotonic_ms();
    /* The window as of now, not as of before the wait. */
    int64_t lower_ms = clock_wall_ms() - policy->max_age_ms + policy->safety_slack_ms;
    if (!read_next(warmer, index, lower_ms, out_documents, out_count, out_next_cursor, out_exhausted, &error)) {
        tier_report_error(warmer->context, TIER_WORKER_WARMER, "cannot read %s from the archive: %s", policy->ns,
                          error.message);
        warm_cursor_clear(out_next_cursor);
        bson_destroy(out_documents);
        return false;
    }
    pace_after_read(warmer, index, clock_monotonic_ms() - read_started, *out_count, out_pause_ms);
    return true;
}

/* The read found nothing left in the window: once the copies an unfinished attempt
 * left are settled, the pass is complete, saved and published. */
static warm_batch_result_t finish_pass(warmer_t *warmer, size_t index, const char *database, const char *collection,
                                       uint64_t start_time)
{
    tier_context_t *context = warmer->context;
    const config_namespace_t *policy = &context->config->namespaces[index];
    warm_namespace_t *state = &warmer->namespaces[index];
    bson_error_t error;
    /* The last attempt may have left copies of documents deleted since. */
    bson_t orphans = BSON_INITIALIZER;
    bool settled = find_unfinished(warmer, policy->ns, NULL, 0, state->batch_time, NULL, &orphans, &error) &&
                   settle_orphans(warmer, index, database, collection, &orphans, start_time, &error);
    bson_destroy(&orphans);
    if (!settled) {
        tier_report_error(context, TIER_WORKER_WARMER, "cannot end %s's pass: %s; retrying", policy->ns,
                          error.message);
        return WARM_BATCH_BLOCKED;
    }
    state->complete = true;
    state->completed_ms = clock_wall_ms();
    /* T0 of this last batch follows every write of the pass (copies, and copies
     * deleted again): a fast-tier secondary that has applied it lacks none. */
    uint64_t copy_time_before = state->last_copy_time;
    state->last_copy_time = start_time > state->last_copy_time ? start_time : state->last_copy_time;
    if (!warmer_save_state(warmer, index, &error)) {
        state->complete = false;
        state->completed_ms = 0;
        state->last_copy_time = copy_time_before;
        tier_report_error(context, TIER_WORKER_WARMER, "cannot record the end of %s's pass: %s", policy->ns,
                          error.message);
        return WARM_BATCH_BLOCKED;
    }
    warmer_publish(warmer, index, true);
    log_progress(warmer, index, true);
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                 "{ns}: the window is warm; range reads from now - maxAge + safetySlack on go to the fast tier",
                 TC_ATTR_STR("ns", policy->ns), TC_ATTR_INT("copied", state->copied));
    return WARM_BATCH_DONE;
}

/* The _id of each document of the batch (views into documents) in ids, its
 * digest in digests, and the ids as a BSON array in id_array; returns how many
 * documents had an _id. */
static size_t collect_ids(const bson_t *documents, bson_value_t *ids, int64_t *digests, bson_t *id_array)
{
    bson_iter_t iter, id;
    size_t index_in_batch = 0;
    bson_iter_init(&iter, documents);
    while (bson_iter_next(&iter)) {
        bson_t document;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        if (bson_iter_init_find(&id, &document, "_id")) {
            ids[index_in_batch] = *bson_iter_value(&id);
            digests[index_in_batch] = worker_writes_digest(&document);
            char key[16];
            const char *key_string;
            bson_uint32_to_string((uint32_t)index_in_batch, &key_string, key, sizeof key);
            BSON_APPEND_VALUE(id_array, key_string, &ids[index_in_batch]);
            index_in_batch++;
        }
    }
    return index_in_batch;
}

/* Copies the batch's count documents into the fast tier under their marks, deletes
 * again the copies of documents deleted since check_from, settles the copies an
 * unfinished attempt left, then moves the position to *next_cursor (taken: it is
 * left empty) and saves it. */
static bool copy_batch(warmer_t *warmer, size_t index, const char *database, const char *collection,
                       const bson_t *documents, uint32_t count, uint64_t start_time, uint64_t check_from,
                       warm_cursor_t *next_cursor, bson_error_t *error)
{
    const config_namespace_t *policy = &warmer->context->config->namespaces[index];
    warm_namespace_t *state = &warmer->namespaces[index];
    bson_value_t *ids = bson_malloc0(count * sizeof *ids);
    int64_t *digests = bson_malloc0(count * sizeof *digests);
    bool *inserted = bson_malloc0(count * sizeof *inserted);
    bson_t id_array = BSON_INITIALIZER;
    size_t index_in_batch = collect_ids(documents, ids, digests, &id_array);

    uint64_t end_time = 0;
    uint64_t *since_of = bson_malloc0(count * sizeof *since_of);
    bson_t deleted = BSON_INITIALIZER, orphans = BSON_INITIALIZER;
    bool ok = find_unfinished(warmer, policy->ns, ids, index_in_batch, state->batch_time, since_of, &orphans, error) &&
              write_pending_marks(warmer, policy->ns, ids, since_of, digests, index_in_batch, start_time, error) &&
              insert_copies(warmer, database, collection, documents, index_in_batch, inserted, &end_time, error);
    size_t copied = 0, unfinished = 0;
    for (size_t i = 0; ok && i < index_in_batch; i++) {
        copied += inserted[i];
        if (since_of[i] != 0) {
            unfinished++;
            check_from = since_of[i] < check_from ? since_of[i] : check_from;
        }
    }
    if (ok && copied > 0) {
        tier_test_hook_kill(&warmer->kill_after_batches, "THERMOCLINE_TEST_KILL_AFTER_COPY",
                            "before the copies' marks are finished");
    }
    if (ok) {
        ok = finish_marks(warmer, policy->ns, ids, inserted, since_of, index_in_batch, start_time, end_time, error);
    }
    if (ok && (copied > 0 || unfinished > 0)) {
        ok = deletes_since(warmer, database, collection, &id_array, check_from, end_time, &deleted, error);
        if (ok && !bson_empty(&deleted)) {
            ok = undo_resurrections(warmer, index, database, collection, documents, &deleted, end_time, error);
        }
    }
    if (ok) {
        ok = settle_orphans(warmer, index, database, collection, &orphans, end_time, error);
    }
    if (ok) {
        warm_cursor_clear(&state->cursor);
        state->cursor = *next_cursor;
        memset(next_cursor, 0, sizeof *next_cursor);
        state->copied += (int64_t)copied;
        if (copied > 0 && end_time > state->last_copy_time) {
            state->last_copy_time = end_time;
        }
        state->batch_time = start_time;
        ok = warmer_save_state(warmer, index, error);
    }
    bson_destroy(&orphans);
    bson_destroy(&deleted);
    bson_destroy(&id_array);
    bson_free(since_of);
    bson_free(digests);
    bson_free(inserted);
    bson_free(ids);
    return ok;
}

warm_batch_result_t warmer_batch(warmer_t *warmer, size_t index, int64_t *out_pause_ms)
{
    tier_context_t *context = warmer->context;
    const config_namespace_t *policy = &context->config->namespaces[index];
    warm_namespace_t *state = &warmer->namespaces[index];
    char database[128];
    const char *collection;
    bson_error_t error;
    uint64_t start_time = 0, check_from = 0;
    tier_split_namespace(policy->ns, database, sizeof database, &collection);

    if (!batch_start(warmer, index, &start_time, &check_from)) {
        return WARM_BATCH_BLOCKED;
    }
    bson_t documents;
    uint32_t count = 0;
    warm_cursor_t next_cursor;
    bool exhausted;
    if (!batch_read(warmer, index, &documents, &count, &next_cursor, &exhausted, out_pause_ms)) {
        return WARM_BATCH_BLOCKED;
    }
    if (count == 0 && !exhausted) {
        /* Only moved past a time the next read takes whole. */
        warm_cursor_clear(&state->cursor);
        state->cursor = next_cursor;
        bson_destroy(&documents);
        return warmer_save_state(warmer, index, &error) ? WARM_BATCH_COPIED : WARM_BATCH_BLOCKED;
    }
    if (count == 0) {
        warm_cursor_clear(&next_cursor);
        bson_destroy(&documents);
        return finish_pass(warmer, index, database, collection, start_time);
    }
    if (!tier_holds_lease(context, TIER_WORKER_WARMER)) {
        warm_cursor_clear(&next_cursor);
        bson_destroy(&documents);
        return WARM_BATCH_BLOCKED; /* no copy once another process may warm */
    }
    bool ok = copy_batch(warmer, index, database, collection, &documents, count, start_time, check_from,
                         &next_cursor, &error);
    warm_cursor_clear(&next_cursor);
    bson_destroy(&documents);
    if (!ok) {
        tier_report_error(context, TIER_WORKER_WARMER, "warming %s failed: %s; retrying", policy->ns, error.message);
        return WARM_BATCH_BLOCKED;
    }
    tier_report_ok(context, TIER_WORKER_WARMER);
    log_progress(warmer, index, false); /* first: it measures the rate the publication carries */
    warmer_publish(warmer, index, false);
    return WARM_BATCH_COPIED;
}

