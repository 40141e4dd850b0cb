/* The feeder's upkeep of the worker-writes marks (tier/worker_writes.h): which
 * eviction ranges deletes took, and the marks it has passed long enough ago. */
#include "tier/feeder_private.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/timestamp.h"

#define LOG_COMPONENT "FEEDER"
#define MARK_CLEAN_BATCH 200    /* marks per delete: 20-110 ms of a loaded fast tier's worker */
#define MARK_CLEAN_BUDGET_MS 50 /* per clean: the rest waits for the feeder's next checkpoint */

/* Whether a delete already took the eviction mark key's range ending at range_to
 * (consumed: {key, to} entries); if not, this one takes it. */
bool feeder_consume_range(bson_t *consumed, const bson_t *key, uint64_t range_to)
{
    bson_iter_t iter, field;
    bson_iter_init(&iter, consumed);
    while (bson_iter_next(&iter)) {
        bson_t item, item_key;
        if (bson_view_of(&iter, &item) && bson_iter_init_find(&field, &item, "key") &&
            bson_view_of(&field, &item_key) && bson_equal(&item_key, key) && timestamp_find(&item, "to") == range_to) {
            return false;
        }
    }
    char index_key[16];
    const char *index_string;
    bson_t entry;
    bson_uint32_to_string(bson_count_keys(consumed), &index_string, index_key, sizeof index_key);
    BSON_APPEND_DOCUMENT_BEGIN(consumed, index_string, &entry);
    BSON_APPEND_DOCUMENT(&entry, "key", key);
    timestamp_append(&entry, "to", range_to);
    bson_append_document_end(consumed, &entry);
    return true;
}

/* The indexes feeder_clean_marks' clauses (and the warmer's reads of pending
 * marks, the evictor's release of them) are bounded by: without them every clean, once a
 * second, scanned every mark of the last WORKER_WRITES_RETENTION_SECONDS (a
 * faithful lab's warm-up alone leaves 54,000), a tenth of a second of the fast
 * tier's CPU each time. Creating existing indexes again is a no-op. */
void feeder_index_marks(feeder_t *feeder)
{
    static const char *const second_fields[] = {"to", "since"};
    bson_t command = BSON_INITIALIZER, indexes, index, key, reply;
    bson_error_t error;
    BSON_APPEND_UTF8(&command, "createIndexes", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "indexes", &indexes);
    for (uint32_t i = 0; i < sizeof second_fields / sizeof second_fields[0]; i++) {
        char array_key[16], name[32];
        const char *array_key_string;
        bson_uint32_to_string(i, &array_key_string, array_key, sizeof array_key);
        bson_append_document_begin(&indexes, array_key_string, -1, &index);
        BSON_APPEND_DOCUMENT_BEGIN(&index, "key", &key);
        BSON_APPEND_INT32(&key, "state", 1);
        BSON_APPEND_INT32(&key, second_fields[i], 1);
        bson_append_document_end(&index, &key);
        snprintf(name, sizeof name, "state_1_%s_1", second_fields[i]);
        BSON_APPEND_UTF8(&index, "name", name);
        bson_append_document_end(&indexes, &index);
    }
    bson_append_array_end(&command, &indexes);
    if (!tier_command(feeder->fast, TIER_DATABASE, &command, &reply, &error)) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0,
               "cannot index %s.%s (%s): cleaning the marks scans them all until it can", TIER_DATABASE,
               TIER_MARKS_COLLECTION, error.message);
    }
    bson_destroy(&reply);
    bson_destroy(&command);
}

/* Appends the clauses of copy marks left pending a minute before the applied time
 * (a warmer or a proxy died between its copy and its mark's outcome; readers
 * decided their inserts by digest long ago), state added by the caller: those
 * with their copy's digest (every copier writes one), or those without. */
static void append_abandoned_copy_clauses(const feeder_t *feeder, bool with_digest, bson_t *clause)
{
    bson_t condition, kinds, type;
    uint32_t seconds = (uint32_t)(feeder->applied_time >> 32);
    BSON_APPEND_DOCUMENT_BEGIN(clause, "_id.op", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &kinds);
    BSON_APPEND_UTF8(&kinds, "0", "warm");
    BSON_APPEND_UTF8(&kinds, "1", "fault");
    bson_append_array_end(&condition, &kinds);
    bson_append_document_end(clause, &condition);
    BSON_APPEND_DOCUMENT_BEGIN(clause, "since", &condition);
    bson_append_timestamp(&condition, "$lt", 3, seconds > 60 ? seconds - 60 : 0, 0);
    bson_append_document_end(clause, &condition);
    BSON_APPEND_DOCUMENT_BEGIN(clause, "copy", &condition);
    if (with_digest) {
        BSON_APPEND_UTF8(&condition, "$type", "long");
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&condition, "$not", &type);
        BSON_APPEND_UTF8(&type, "$type", "long");
        bson_append_document_end(&condition, &type);
    }
    bson_append_document_end(clause, &condition);
}

/* Appends {$or: [...]} matching the marks the feeder has passed: done marks
 * WORKER_WRITES_RETENTION_SECONDS before the applied time (the proxy's clients'
 * change streams, which may lag or resume behind the feeder, classify their events
 * with them too), and abandoned copy marks without a digest or a done range (those
 * with a digest are settled, those with a range go back to it first:
 * settle_abandoned_copy_marks). */
static void append_passed_clauses(const feeder_t *feeder, bson_t *query)
{
    bson_t any, clause, condition;
    uint32_t seconds = (uint32_t)(feeder->applied_time >> 32);
    uint32_t retained = seconds > WORKER_WRITES_RETENTION_SECONDS ? seconds - WORKER_WRITES_RETENTION_SECONDS : 0;
    BSON_APPEND_ARRAY_BEGIN(query, "$or", &any);
    BSON_APPEND_DOCUMENT_BEGIN(&any, "0", &clause);
    BSON_APPEND_UTF8(&clause, "state", "done");
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "to", &condition);
    bson_append_timestamp(&condition, "$lte", 4, retained, 0);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&any, &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&any, "1", &clause);
    append_abandoned_copy_clauses(feeder, false, &clause);
    BSON_APPEND_UTF8(&clause, "state", "pending");
    tier_append_mark_has_history(&clause, false);
    bson_append_document_end(&any, &clause);
    bson_append_array_end(query, &any);
}

/* Appends one update statement settling an abandoned copy mark: done in
 * (since, to], bound to its copy's digest. False when it has no digest. */
static bool append_settle_statement(bson_t *statements, uint32_t index, const bson_t *mark, uint64_t to)
{
    bson_iter_t id, copy;
    uint64_t since = timestamp_find(mark, "since");
    if (!bson_iter_init_find(&id, mark, "_id") || !bson_iter_init_find(&copy, mark, "copy") ||
        !BSON_ITER_HOLDS_INT64(&copy)) {
        return false;
    }
    char index_key[16];
    const char *index_string;
    bson_t statement, query;
    bson_uint32_to_string(index, &index_string, index_key, sizeof index_key);
    bson_append_document_begin(statements, index_string, -1, &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    bson_append_iter(&query, "_id", 3, &id);
    BSON_APPEND_UTF8(&query, "state", "pending");
    timestamp_append(&query, "since", since); /* a new attempt since keeps its mark */
    bson_append_iter(&query, "copy", 4, &copy);
    bson_append_document_end(&statement, &query);
    worker_writes_append_settled_copy_update(&statement, "u", since, to, bson_iter_int64(&copy));
    bson_append_document_end(statements, &statement);
    return true;
}

/* Settles the copy marks left pending a minute (a warmer or a proxy died between
 * its copy and the mark's outcome): each goes to done in (since, applied time]
 * bound to its copy's digest, as readers past the wait judge an insert under it
 * (worker_writes_classify); removing it let a change stream resumed from before
 * the copy show it as a client's insert. At most MARK_CLEAN_BATCH per clean (only
 * crashes leave such marks: the state_1_since_1 index bounds the search). Those
 * without a digest (none of ours) that were done before go back to done; the
 * others go with the passed marks. */
static bool settle_abandoned_copy_marks(feeder_t *feeder, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, projection = BSON_INITIALIZER, marks, command = BSON_INITIALIZER;
    bson_t statements, selector = BSON_INITIALIZER;
    bson_iter_t iter;
    uint32_t count = 0;
    append_abandoned_copy_clauses(feeder, true, &filter);
    BSON_APPEND_UTF8(&filter, "state", "pending");
    BSON_APPEND_INT32(&projection, "since", 1);
    BSON_APPEND_INT32(&projection, "copy", 1);
    bool ok = tier_read_state_part(feeder->fast, TIER_MARKS_COLLECTION, &filter, &projection, MARK_CLEAN_BATCH,
                                   &marks, error);
    BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &statements);
    bson_iter_init(&iter, &marks);
    while (ok && bson_iter_next(&iter)) {
        bson_t mark;
        if (bson_view_of(&iter, &mark) && append_settle_statement(&statements, count, &mark, feeder->applied_time)) {
            count++;
        }
    }
    bson_append_array_end(&command, &statements);
    BSON_APPEND_BOOL(&command, "ordered", false);
    int64_t settled = 0;
    ok = ok && (count == 0 || tier_write_state(feeder->fast, TIER_MARKS_COLLECTION, &command, "nModified", &settled,
                                               error));
    if (ok && settled > 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{count} copies into the fast tier had no recorded outcome a minute on (their warmer or proxy "
                     "stopped): an insert of exactly the copy stays the worker's",
                     TC_ATTR_INT("count", settled));
    }
    append_abandoned_copy_clauses(feeder, false, &selector);
    ok = ok && tier_restore_done_marks(feeder->fast, &selector, NULL, error);
    bson_destroy(&selector);
    bson_destroy(&command);
    bson_destroy(&marks);
    bson_destroy(&projection);
    bson_destroy(&filter);
    return ok;
}

bool feeder_settle_committed_mark(feeder_t *feeder, const bson_t *mark, uint64_t delete_time, bool *out_settled)
{
    bson_t command = BSON_INITIALIZER, statements, statement, query, mark_id;
    bson_error_t error;
    uint64_t since = timestamp_find(mark, "since");
    int64_t modified = 0;
    bson_iter_t iter;
    *out_settled = false;
    if (!bson_iter_init_find(&iter, mark, "_id") || !bson_view_of(&iter, &mark_id)) {
        return true; /* not a mark: nothing to write */
    }
    BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &statements);
    BSON_APPEND_DOCUMENT_BEGIN(&statements, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_DOCUMENT(&query, "_id", &mark_id);
    BSON_APPEND_UTF8(&query, "state", "committed");
    timestamp_append(&query, "since", since);
    bson_append_document_end(&statement, &query);
    worker_writes_append_done_update(&statement, "u", since, delete_time);
    bson_append_document_end(&statements, &statement);
    bson_append_array_end(&command, &statements);
    bool ok = tier_write_state(feeder->fast, TIER_MARKS_COLLECTION, &command, "nModified", &modified, &error);
    *out_settled = modified == 1;
    if (*out_settled) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0,
               "an eviction whose evictor stopped before recording its range: the range is written now");
    } else if (!ok) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot record an eviction's range in thermocline.%s: %s",
                          TIER_MARKS_COLLECTION, error.message);
    }
    bson_destroy(&command);
    return ok;
}

/* Deletes at most MARK_CLEAN_BATCH of the passed marks: their _ids first (an index
 * scan of the clauses), then those _ids with the clauses checked again (the
 * planner bounds the _id index by the $in, so each is looked up). Sets *out_more
 * when the batch was full and all of it went. */
static bool clean_passed_batch(feeder_t *feeder, bool *out_more, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, projection = BSON_INITIALIZER, marks, query = BSON_INITIALIZER;
    bson_t id_condition, ids;
    bson_iter_t iter, field;
    uint32_t count = 0;
    int64_t deleted = 0;
    *out_more = false;
    append_passed_clauses(feeder, &filter);
    BSON_APPEND_INT32(&projection, "_id", 1);
    bool ok = tier_read_state_part(feeder->fast, TIER_MARKS_COLLECTION, &filter, &projection, MARK_CLEAN_BATCH,
                                   &marks, error);
    BSON_APPEND_DOCUMENT_BEGIN(&query, "_id", &id_condition);
    BSON_APPEND_ARRAY_BEGIN(&id_condition, "$in", &ids);
    bson_iter_init(&iter, &marks);
    while (ok && bson_iter_next(&iter)) {
        bson_t mark;
        if (bson_view_of(&iter, &mark) && bson_iter_init_find(&field, &mark, "_id")) {
            char index_key[16];
            const char *index_string;
            bson_uint32_to_string(count++, &index_string, index_key, sizeof index_key);
            bson_append_iter(&ids, index_string, -1, &field);
        }
    }
    bson_append_array_end(&id_condition, &ids);
    bson_append_document_end(&query, &id_condition);
    bson_concat(&query, &filter);
    ok = ok && (count == 0 || tier_delete_state(feeder->fast, TIER_MARKS_COLLECTION, &query, 0, &deleted, error));
    /* All found gone: no mark found again and again keeps the clean busy. */
    *out_more = ok && count >= MARK_CLEAN_BATCH && deleted == count;
    bson_destroy(&query);
    bson_destroy(&marks);
    bson_destroy(&projection);
    bson_destroy(&filter);
    return ok;
}

/* Cleans the marks the feeder has passed in batches, starting none after
 * MARK_CLEAN_BUDGET_MS: one unbounded delete of the 54,000 marks a faithful lab's
 * warm-up leaves held the fast tier two seconds, and the feeder with it. Called
 * after a checkpoint. True when passed marks are left for the next call,
 * which should come at the next checkpoint rather than MARK_CLEAN_INTERVAL_MS on. */
bool feeder_clean_marks(feeder_t *feeder)
{
    int64_t started_ms = clock_monotonic_ms();
    bson_error_t error;
    bool more = true;
    /* A range ends at its eviction's commit: no later delete falls in one a delete
     * already took (a restart replays from a checkpoint, with none taken). */
    bson_reinit(&feeder->consumed_marks);
    /* A failed settle (a write error in one of its statements fails the call)
     * holds up neither the removal of passed marks nor its pace. */
    bson_error_t settle_error;
    bool settled = settle_abandoned_copy_marks(feeder, &settle_error);
    while (more && clock_monotonic_ms() - started_ms < MARK_CLEAN_BUDGET_MS) {
        if (!clean_passed_batch(feeder, &more, &error)) {
            more = false;
            goto failed;
        }
    }
    if (!settled) {
        error = settle_error;
        goto failed;
    }
    feeder->mark_clean_failures = 0;
    return more;
failed:
    /* Marks left a while cost the fast tier space, not correctness: the next
     * clean retries, and a lasting failure is told once a minute or so. */
    if (feeder->mark_clean_failures++ % 60 == 0) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot clean %s.%s (failed %lld times in a row): %s", TIER_DATABASE,
               TIER_MARKS_COLLECTION, (long long)feeder->mark_clean_failures, error.message);
    }
    return more;
}
