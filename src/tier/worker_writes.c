/* The worker-writes marks read by one rule (worker_writes.h): the feeder's and the
 * proxy's classification of the fast tier's events. */
#include "tier/worker_writes.h"

#include "common/timestamp.h"

#include <string.h>

/* Whether an insert's document is exactly the copy a mark recorded (its field:
 * "copy" of a pending mark, "digest" of a settled range). */
static bool is_the_copy(const bson_t *mark, const char *field, const bson_t *full_document)
{
    bson_iter_t copy;
    return full_document != NULL && bson_iter_init_find(&copy, mark, field) && BSON_ITER_HOLDS_INT64(&copy) &&
           worker_writes_digest(full_document) == bson_iter_int64(&copy);
}

/* Whether range {from, to[, digest]} holds the event: its time in (from, to], and
 * for a range with a digest (a copy settled by the feeder) the insert of exactly
 * that document. */
static bool in_range(const bson_t *range, const worker_writes_event_t *event, uint64_t *out_to)
{
    *out_to = timestamp_find(range, "to");
    if (!(timestamp_find(range, "from") < event->time && event->time <= *out_to)) {
        return false;
    }
    return !bson_has_field(range, "digest") ||
           (!event->is_delete && is_the_copy(range, "digest", event->full_document));
}

/* Whether a done range of the mark, current or kept in its history, holds the
 * event (*out_to: its end). */
static bool in_done_range(const bson_t *mark, const char *state, const worker_writes_event_t *event, uint64_t *out_to)
{
    if (strcmp(state, "done") == 0 && in_range(mark, event, out_to)) {
        return true;
    }
    bson_iter_t history, item;
    if (!bson_iter_init_find(&history, mark, "history") || !BSON_ITER_HOLDS_ARRAY(&history) ||
        !bson_iter_recurse(&history, &item)) {
        return false;
    }
    while (bson_iter_next(&item)) {
        uint32_t length;
        const uint8_t *data;
        bson_t range;
        if (!BSON_ITER_HOLDS_DOCUMENT(&item)) {
            continue;
        }
        bson_iter_document(&item, &length, &data);
        if (bson_init_static(&range, data, length) && in_range(&range, event, out_to)) {
            return true;
        }
    }
    return false;
}

worker_writes_verdict_t worker_writes_classify(const bson_t *mark, const worker_writes_event_t *event,
                                               uint64_t *out_range_to)
{
    uint64_t range_to = 0;
    if (mark == NULL) {
        return WORKER_WRITES_APPLICATION;
    }
    const char *state = "";
    bson_iter_t field;
    if (bson_iter_init_find(&field, mark, "state") && BSON_ITER_HOLDS_UTF8(&field)) {
        state = bson_iter_utf8(&field, NULL);
    }
    bool worker = in_done_range(mark, state, event, &range_to);
    if (!worker && strcmp(state, "committed") == 0 && event->is_delete && event->time > timestamp_find(mark, "since")) {
        /* The evictor writes the range right after its commit: waited for, so that
         * two evictions of one document stay two ranges; past the wait (it crashed)
         * the feeder takes the first delete after since for the eviction and writes
         * the range, which every other reader waits for. */
        if (!event->writes_ranges || event->waited_ms < WORKER_WRITES_PENDING_WAIT_MS) {
            return WORKER_WRITES_PENDING;
        }
        worker = true;
        range_to = UINT64_MAX;
    }
    /* An eviction's delete commits with its mark's "committed": a delete seen while
     * the mark is pending is somebody else's. A copy is marked done after it. */
    if (!worker && strcmp(state, "pending") == 0 && !event->is_delete &&
        event->time > timestamp_find(mark, "since")) {
        /* The copy the mark announces may be this insert, its outcome unknown yet. */
        if (event->waited_ms < WORKER_WRITES_PENDING_WAIT_MS) {
            return WORKER_WRITES_PENDING;
        }
        /* A copy whose outcome no copier recorded (it crashed, or lost the fast tier)
         * is the worker's when the insert is byte for byte the copy: the archive
         * holds that version, and replaying or showing it would be a write nobody
         * made. Another insert of that _id (a client's, after a delete) is not. */
        if (!is_the_copy(mark, "copy", event->full_document)) {
            return WORKER_WRITES_APPLICATION;
        }
        worker = true;
        range_to = UINT64_MAX;
    }
    if (!worker) {
        return WORKER_WRITES_APPLICATION;
    }
    if (out_range_to != NULL) {
        *out_range_to = range_to;
    }
    return WORKER_WRITES_WORKER;
}

void worker_writes_mark_key(bson_t *out, const char *key, const char *ns, const bson_value_t *id, const char *op)
{
    bson_t mark_id;
    bson_append_document_begin(out, key, -1, &mark_id);
    BSON_APPEND_UTF8(&mark_id, "ns", ns);
    BSON_APPEND_VALUE(&mark_id, "id", id);
    BSON_APPEND_UTF8(&mark_id, "op", op);
    bson_append_document_end(out, &mark_id);
}

/* Appends the range {from, to[, digest]} (digest: NULL for none). */
static void append_range(bson_t *range, uint64_t from, uint64_t to, const int64_t *digest)
{
    timestamp_append(range, "from", from);
    timestamp_append(range, "to", to);
    if (digest != NULL) {
        BSON_APPEND_INT64(range, "digest", *digest);
    }
}

void worker_writes_append_history_push(bson_t *push, uint64_t from, uint64_t to, const int64_t *digest)
{
    bson_t history, each, range;
    BSON_APPEND_DOCUMENT_BEGIN(push, "history", &history);
    BSON_APPEND_ARRAY_BEGIN(&history, "$each", &each);
    BSON_APPEND_DOCUMENT_BEGIN(&each, "0", &range);
    append_range(&range, from, to, digest);
    bson_append_document_end(&each, &range);
    bson_append_array_end(&history, &each);
    BSON_APPEND_INT32(&history, "$slice", -WORKER_WRITES_HISTORY);
    bson_append_document_end(push, &history);
}

static void append_done_update(bson_t *statement, const char *key, uint64_t from, uint64_t to, const int64_t *digest)
{
    bson_t update, set, push, unset;
    bson_append_document_begin(statement, key, -1, &update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_UTF8(&set, "state", "done");
    append_range(&set, from, to, digest);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$unset", &unset);
    if (digest == NULL) {
        BSON_APPEND_UTF8(&unset, "digest", ""); /* the range is exact: a settled one's digest goes */
    } else {
        /* The dead copier's attempt goes: a warm mark whose since is after the
         * warmer's last saved batch reads as its unfinished copy (find_unfinished),
         * and a new attempt reusing that since would look abandoned at once. */
        BSON_APPEND_UTF8(&unset, "since", "");
        BSON_APPEND_UTF8(&unset, "copy", "");
    }
    bson_append_document_end(&update, &unset);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$push", &push);
    worker_writes_append_history_push(&push, from, to, digest);
    bson_append_document_end(&update, &push);
    bson_append_document_end(statement, &update);
}

void worker_writes_append_done_update(bson_t *statement, const char *key, uint64_t from, uint64_t to)
{
    append_done_update(statement, key, from, to, NULL);
}

void worker_writes_append_settled_copy_update(bson_t *statement, const char *key, uint64_t from, uint64_t to,
                                              int64_t digest)
{
    append_done_update(statement, key, from, to, &digest);
}

int64_t worker_writes_digest(const bson_t *document)
{
    const uint8_t *data = bson_get_data(document);
    uint64_t hash = UINT64_C(14695981039346656037);
    for (uint32_t i = 0; i < document->len; i++) {
        hash = (hash ^ data[i]) * UINT64_C(1099511628211);
    }
    return (int64_t)hash;
}
