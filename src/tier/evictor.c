/* The evictor: every evictorPeriod, per namespace, deletes from the fast tier the
 * documents whose time field is older than now - maxAge, in batches:
 *
 *   read candidates (fast tier, operationTime T)
 *   ─▶ wait until the feeder has applied every write up to T: the archive then
 *      holds each candidate's version, without reading the archive (I2)
 *   ─▶ mark {ns, _id, "evict", pending} in thermocline.workerWrites
 *   ─▶ delete each with its exact-version filter (a concurrent update wins), in
 *      one transaction with its mark's "committed": a crash leaves both or
 *      neither, so a pending mark never stands for a delete
 *   ─▶ mark done with the delete's time range (the feeder skips the one delete
 *      event of that document in it: I3), or release the mark when nothing was
 *      deleted (back to an earlier eviction's range, or gone: tier_release_marks)
 *
 * A document whose TTL field has expired under one of the archive's TTL indexes
 * (index_sync.c copies their rules to thermocline.indexes) is a candidate too, on
 * the same terms: the fast tier keeps no TTL of its own (src/tier/README.md).
 *
 * Only the fast tier is touched; a per-second cap keeps client traffic first. */
#include "tier/index_sync.h"
#include "tier/pins.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_COMPONENT "EVICTOR"
#define EVICT_BATCH 100
#define EVICT_MAX_PER_SECOND 2000
#define APPLIED_WAIT_MS 5000
#define BATCHES_PER_PASS 50
#define EXPIRED_CLEANUP_MS 10000
#define COUNT_MAX_TIME_MS 10000 /* the held candidates' count: a slow fast tier must not stall a pass */
#define PACED_PERIOD_MAX_MS 60000 /* a longer evictorPeriod spaces a pass's batches as a minute does */

/* One per namespace of the config, in its order. */
typedef struct evictor_namespace {
    const config_namespace_t *config;
    int64_t next_due_ms; /* monotonic: when its next pass is due */
} evictor_namespace_t;

typedef struct evictor {
    tier_context_t *context;
    mongoc_client_t *fast;
    evictor_namespace_t *namespaces;
    /* Pending marks may stand (left by a crash, a failed batch or another process),
     * each refusing its document's eviction: released before the next batch. True
     * at start. */
    bool marks_unsettled;
    /* Test hook: THERMOCLINE_TEST_FAIL_EVICT_MARK=N makes the Nth recording of a
     * delete's outcome fail, as a fast tier lost at that moment would
     * (tests/integration/test_tier_faults.py). */
    long fail_mark_after;
    /* Test hook: THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE=N kills the process just
     * before its Nth delete, its marks and intent written (test_tier_faults.py). */
    long kill_before_delete;
    /* Test hook: THERMOCLINE_TEST_KILL_IN_EVICT_TRANSACTION=N kills the process inside
     * its Nth transaction, the delete sent, the commit not (test_tier_faults.py). */
    long kill_in_transaction;
    /* The batch's logical session: its transactions' (one per delete), its lsid in
     * each of the batch's marks, so that a successor can abort one a crash left
     * open (release_pending_marks). */
    mongoc_client_session_t *session;
    bson_oid_t intent;                  /* the _id of the batch's intent (pins.h) */
    char holder[TIER_PIN_HOLDER_SIZE];  /* this process, in its intents */
    int64_t next_cleanup_ms;            /* monotonic: when expired pins and intents are next removed */
    int64_t pace_ms;                    /* between the starts of a pass's full batches (evict_namespace) */
} evictor_t;

/* Writes pending marks for documents; *out_refused[i] is true for a document
 * whose mark is pending or committed (an earlier delete's outcome not settled:
 * kept this round); any other write error fails the batch. A done mark is taken
 * over, its range kept in its history for the change streams that have not
 * passed it. */
static bool insert_marks(evictor_t *evictor, const char *ns, const bson_value_t *ids, size_t count,
                         uint64_t since, bool *out_refused, bson_error_t *error)
{
    if (count == 0) {
        return true; /* an empty update is InvalidLength: nothing to mark is no command */
    }
    bson_t command = BSON_INITIALIZER, updates, reply;
    BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_t statement, query, update, set;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_document_begin(&updates, key_string, -1, &statement);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
        worker_writes_mark_key(&query, "_id", ns, &ids[i], "evict");
        /* Another state matches nothing: the upsert's insert is then a DuplicateKey. */
        BSON_APPEND_UTF8(&query, "state", "done");
        bson_append_document_end(&statement, &query);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
        BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
        BSON_APPEND_UTF8(&set, "state", "pending");
        timestamp_append(&set, "since", since);
        BSON_APPEND_DOCUMENT(&set, "session", mongoc_client_session_get_lsid(evictor->session));
        BSON_APPEND_UTF8(&set, "holder", evictor->holder);
        bson_append_document_end(&update, &set);
        bson_append_document_end(&statement, &update);
        BSON_APPEND_BOOL(&statement, "upsert", true);
        bson_append_document_end(&updates, &statement);
    }
    bson_append_array_end(&command, &updates);
    BSON_APPEND_BOOL(&command, "ordered", false);
    tier_append_state_write_concern(&command);
    /* Not tier_write_state: its write errors are the refusals, one per statement. */
    bool ok = tier_command(evictor->fast, TIER_DATABASE, &command, &reply, error);
    bson_iter_t errors;
    tier_write_error_t write_error;
    if (ok && tier_write_errors_init(&errors, &reply)) {
        while (ok && tier_write_errors_next(&errors, &write_error)) {
            if (write_error.code == TC_ERR_DUPLICATE_KEY && write_error.index >= 0 &&
                (size_t)write_error.index < count) {
                out_refused[write_error.index] = true;
            } else {
                ok = tc_error_set(error, (int32_t)write_error.code, "writing eviction marks to %s.%s: %s",
                                  TIER_DATABASE, TIER_MARKS_COLLECTION, write_error.message);
            }
        }
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* The outcome of a delete: done, the delete having happened in (since, at] (at:
 * the commit's operationTime, at or after its oplog entry), replacing "committed". */
static bool record_eviction(evictor_t *evictor, const char *ns, const bson_value_t *id, uint64_t since, uint64_t at,
                            bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, statements, statement, query;
    BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &statements);
    BSON_APPEND_DOCUMENT_BEGIN(&statements, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    worker_writes_mark_key(&query, "_id", ns, id, "evict");
    BSON_APPEND_UTF8(&query, "state", "committed");
    timestamp_append(&query, "since", since); /* this eviction's, not a successor's */
    bson_append_document_end(&statement, &query);
    worker_writes_append_done_update(&statement, "u", since, at);
    bson_append_document_end(&statements, &statement);
    bson_append_array_end(&command, &statements);
    bool ok = tier_write_state(evictor->fast, TIER_MARKS_COLLECTION, &command, NULL, NULL, error);
    bson_destroy(&command);
    return ok;
}

/* A document kept: its pending mark released, an earlier eviction's ranges kept
 * for the change streams behind them. */
static bool release_mark(evictor_t *evictor, const char *ns, const bson_value_t *id, bson_error_t *error)
{
    bson_t selector = BSON_INITIALIZER;
    worker_writes_mark_key(&selector, "_id", ns, id, "evict");
    bool ok = tier_release_marks(evictor->fast, &selector, NULL, error);
    bson_destroy(&selector);
    return ok;
}

/* The transaction's second write: the pending mark of id becomes "committed"
 * (worker_writes.h). It matches only a pending mark: one a recovery released
 * meanwhile leaves the transaction uncommitted, the document kept. */
static void append_commit_mark(bson_t *command, const char *ns, const bson_value_t *id)
{
    bson_t statements, statement, query, update, set;
    BSON_APPEND_UTF8(command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(command, "updates", &statements);
    BSON_APPEND_DOCUMENT_BEGIN(&statements, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    worker_writes_mark_key(&query, "_id", ns, id, "evict");
    BSON_APPEND_UTF8(&query, "state", "pending");
    bson_append_document_end(&statement, &query);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_UTF8(&set, "state", "committed");
    bson_append_document_end(&update, &set);
    bson_append_document_end(&statement, &update);
    bson_append_document_end(&statements, &statement);
    bson_append_array_end(command, &statements);
}

/* One command of the session's transaction; *out_count: the reply's field count
 * (n, nModified); *out_transient: it failed with TransientTransactionError (a
 * write conflict, a lock timeout: the transaction is aborted, nothing written). */
static bool transaction_write(evictor_t *evictor, const bson_t *options, const char *database, const bson_t *command,
                              const char *count_field, int64_t *out_count, bool *out_transient, bson_error_t *error)
{
    bson_t reply;
    bson_iter_t iter;
    bool ok = mongoc_client_command_with_opts(evictor->fast, database, command, NULL, options, &reply, error);
    *out_count = ok && bson_iter_init_find(&iter, &reply, count_field) ? bson_iter_as_int64(&iter) : 0;
    *out_transient = !ok && mongoc_error_has_label(&reply, "TransientTransactionError");
    bson_destroy(&reply);
    return ok;
}

/* Deletes one candidate if it is still exactly that version, in one transaction
 * with its mark's "committed": a crash leaves both or neither, so a mark still
 * pending means this delete never happened, whatever became of the document since
 * (gone after a crash, a client deleted it). *out_time: the commit's
 * operationTime. False when the outcome is unknown: the mark tells (pending, or
 * committed). */
static bool delete_version(evictor_t *evictor, const config_namespace_t *policy, const bson_value_t *id,
                           const bson_t *version, bool *out_deleted, uint64_t *out_time, bson_error_t *error)
{
    mongoc_transaction_opt_t *transaction = mongoc_transaction_opts_new();
    mongoc_write_concern_t *concern = mongoc_write_concern_new();
    mongoc_client_session_t *session = evictor->session;
    bson_t options = BSON_INITIALIZER, delete = BSON_INITIALIZER, mark = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int64_t deleted = 0, marked = 0;
    bool ok = false, open = false, transient = false;
    *out_deleted = false;
    *out_time = 0;
    mongoc_write_concern_set_w(concern, 1); /* as the evictor's other writes (tier_write_state) */
    mongoc_transaction_opts_set_write_concern(transaction, concern);
    if (!mongoc_client_session_start_transaction(session, transaction, error) ||
        !mongoc_client_session_append(session, &options, error)) {
        goto done;
    }
    open = true;
    tier_append_delete_version(&delete, policy->collection, version);
    append_commit_mark(&mark, policy->ns, id);
    if (!transaction_write(evictor, &options, policy->database, &delete, "n", &deleted, &transient, error) ||
        (deleted == 1 &&
         !transaction_write(evictor, &options, TIER_DATABASE, &mark, "nModified", &marked, &transient, error))) {
        ok = transient; /* kept this time; any other failure fails the batch, reported */
        goto done;
    }
    tier_test_hook_kill(&evictor->kill_in_transaction, "THERMOCLINE_TEST_KILL_IN_EVICT_TRANSACTION",
                        "inside an eviction's transaction");
    ok = true;
    if (deleted != 1 || marked != 1) {
        goto done; /* changed since the read, or its mark gone: nothing to commit */
    }
    bson_destroy(&reply);
    open = false;
    ok = mongoc_client_session_commit_transaction(session, &reply, error);
    *out_deleted = ok;
    /* Without a time the mark stays committed: the feeder writes its range. */
    *out_time = ok ? timestamp_find(&reply, "operationTime") : 0;
done:
    if (open) {
        bson_error_t abort_error;
        (void)mongoc_client_session_abort_transaction(session, &abort_error); /* one left open times out */
    }
    bson_destroy(&reply);
    bson_destroy(&mark);
    bson_destroy(&delete);
    bson_destroy(&options);
    mongoc_write_concern_destroy(concern);
    mongoc_transaction_opts_destroy(transaction);
    return ok;
}

/* Appends under key {$and: [candidates, {_id: {operator: held_ids}}]}: $nin for the
 * batches' reads (the documents a refused write holds are never candidates, so that
 * they cannot fill every batch), $in to count them. */
static void append_held_filter(bson_t *out, const char *key, const bson_t *candidates, const bson_t *held_ids,
                               const char *operator)
{
    bson_t filter, clauses, held, condition;
    BSON_APPEND_DOCUMENT_BEGIN(out, key, &filter);
    BSON_APPEND_ARRAY_BEGIN(&filter, "$and", &clauses);
    BSON_APPEND_DOCUMENT(&clauses, "0", candidates);
    BSON_APPEND_DOCUMENT_BEGIN(&clauses, "1", &held);
    BSON_APPEND_DOCUMENT_BEGIN(&held, "_id", &condition);
    BSON_APPEND_ARRAY(&condition, operator, held_ids);
    bson_append_document_end(&held, &condition);
    bson_append_document_end(&clauses, &held);
    bson_append_array_end(&filter, &clauses);
    bson_append_document_end(out, &filter);
}

/* find's filter: the candidates, less the documents held by a refused write. */
static void append_candidates_filter(bson_t *find, const bson_t *candidates, const bson_t *held_ids)
{
    if (bson_empty(held_ids)) {
        BSON_APPEND_DOCUMENT(find, "filter", candidates);
    } else {
        append_held_filter(find, "filter", candidates, held_ids, "$nin");
    }
}

/* The candidates held by the refused writes standing when a pass starts: left out
 * of its reads, counted once a pass (keptRefused), as the pinned are per batch. */
static void count_held_candidates(evictor_t *evictor, const config_namespace_t *policy, const bson_t *candidates,
                                  const bson_t *held_ids)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_iter_t iter;
    bson_error_t error;
    BSON_APPEND_UTF8(&command, "count", policy->collection);
    append_held_filter(&command, "query", candidates, held_ids, "$in");
    BSON_APPEND_INT32(&command, "maxTimeMS", COUNT_MAX_TIME_MS);
    bool ok = tier_command(evictor->fast, policy->database, &command, &reply, &error);
    if (ok && bson_iter_init_find(&iter, &reply, "n") && BSON_ITER_HOLDS_NUMBER(&iter)) {
        tier_namespace_progress_t *item = tier_progress_lock_namespace(evictor->context->progress, policy->index);
        item->evict_held += bson_iter_as_int64(&iter);
        tier_progress_unlock(evictor->context->progress, false);
    } else {
        TC_LOG_ATTRS(TC_LOG_DEBUG, LOG_COMPONENT, 0, "{ns}: cannot count the candidates refused writes hold: {error}",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("error", ok ? "unexpected reply" : error.message));
    }
    bson_destroy(&reply);
    bson_destroy(&command);
}

/* What one batch did, for the progress record. */
typedef struct batch_counts {
    int64_t evicted, changed, held, pinned, unsettled;
} batch_counts_t;

/* Records the batch's intent in thermocline.evictions, then reads the pins that
 * cover the ids it names (pins.h: each side writes, then reads the other's): sets
 * pinned[i] for each. The refused stay out of the intent: this batch never deletes
 * them, so no write to them waits for it. *out_sent_ms: when the intent was sent
 * (monotonic). */
static bool announce_batch(evictor_t *evictor, const config_namespace_t *policy, const bson_value_t *ids, size_t count,
                           const bool *refused, bool *pinned, int64_t *out_sent_ms, bson_error_t *error)
{
    bson_value_t *announced = bson_malloc((count + 1) * sizeof *announced);
    size_t announced_count = 0;
    for (size_t i = 0; i < count; i++) {
        if (!refused[i]) {
            announced[announced_count++] = ids[i]; /* a view: the values stay in the candidates' reply */
        }
    }
    bson_t command = BSON_INITIALIZER, statements, filter, pins = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&command, "update", TIER_EVICTIONS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &statements);
    tier_eviction_append_upsert(&statements, "0", &evictor->intent, policy->ns, announced, announced_count,
                                evictor->context->lease_term, evictor->holder,
                                tier_eviction_lifetime_ms(evictor->context->config));
    bson_append_array_end(&command, &statements);
    tier_pins_filter_for_batch(policy->ns, announced, announced_count, &filter); /* read after the write */
    bson_free(announced);
    *out_sent_ms = clock_monotonic_ms();
    bool ok = tier_write_state(evictor->fast, TIER_EVICTIONS_COLLECTION, &command, NULL, NULL, error);
    bson_destroy(&command);
    ok = ok && tier_read_state(evictor->fast, TIER_PINS_COLLECTION, &filter, &pins, error);
    if (ok && bson_count_keys(&pins) >= TIER_STATE_READ_LIMIT) {
        for (size_t i = 0; i < count; i++) {
            pinned[i] = true; /* more pins than one read shows: keep them all */
        }
    } else if (ok) {
        tier_pins_covered(&pins, ids, count, pinned);
    }
    bson_destroy(&pins);
    bson_destroy(&filter);
    return ok;
}

/* The intent is over: writes wait for it no longer. One left behind expires. */
static void withdraw_batch(evictor_t *evictor)
{
    bson_t query = BSON_INITIALIZER;
    bson_error_t error;
    BSON_APPEND_OID(&query, "_id", &evictor->intent);
    if (!tier_delete_state(evictor->fast, TIER_EVICTIONS_COLLECTION, &query, 1, NULL, &error)) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "cannot remove an eviction intent ({error}): writes to its documents wait until it expires",
                     TC_ATTR_STR("error", error.message));
    }
    bson_destroy(&query);
}

/* Deletes the candidates left (not refused, not pinned), each with its exact
 * version, while the batch's intent is fresh; resolves each mark. False when a
 * write failed (the marks left pending are settled before the next eviction). */
static bool delete_candidates(evictor_t *evictor, const config_namespace_t *policy, const bson_t *documents,
                              const bson_value_t *ids, size_t count, const bool *refused, const bool *pinned,
                              uint64_t read_time, int64_t intent_sent_ms, batch_counts_t *counts, bson_error_t *error)
{
    tier_context_t *context = evictor->context;
    bool ok = true;
    for (size_t i = 0; ok && i < count; i++) {
        bson_t version;
        bool deleted = false;
        uint64_t at = 0;
        if (refused[i]) {
            continue;
        }
        if (pinned[i] || !tier_version_filter(&documents[i], &version) ||
            !tier_eviction_fresh(context->config, intent_sent_ms, clock_monotonic_ms())) {
            /* A write elsewhere pinned it, it cannot be deleted by version, or the
             * intent may lapse before the delete lands: kept this time. */
            counts->pinned += pinned[i];
            if (!pinned[i]) {
                bson_destroy(&version);
            }
            ok = release_mark(evictor, policy->ns, &ids[i], error);
            continue;
        }
        /* A write of this process that faulted the document in runs first. */
        if (!tier_progress_begin_eviction(context->progress, policy->index, &ids[i])) {
            ok = release_mark(evictor, policy->ns, &ids[i], error);
            bson_destroy(&version);
            counts->changed++;
            continue;
        }
        tier_test_hook_kill(&evictor->kill_before_delete, "THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE",
                            "before an eviction's delete");
        ok = delete_version(evictor, policy, &ids[i], &version, &deleted, &at, error);
        tier_progress_end_eviction(context->progress, policy->index);
        bson_destroy(&version);
        if (!ok) {
            break; /* pending (never deleted: released before the next batch) or committed (the feeder
                    * writes its range) */
        }
        if (deleted && tier_test_hook_fires(&evictor->fail_mark_after)) {
            counts->evicted++;
            return tc_error_set(error, TC_ERR_HOST_UNREACHABLE, "THERMOCLINE_TEST_FAIL_EVICT_MARK");
        }
        /* Without a time the committed mark stands as it is (the first delete after since). */
        if (!deleted) {
            ok = release_mark(evictor, policy->ns, &ids[i], error);
        } else if (at != 0) {
            ok = record_eviction(evictor, policy->ns, &ids[i], read_time, at, error);
        }
        counts->evicted += deleted;
        counts->changed += !deleted;
    }
    return ok;
}

/* Leaves id out of the pass's next batches (append_candidates_filter's $nin). */
static void hold_for_pass(bson_t *held_ids, const bson_value_t *id)
{
    char key[16];
    const char *key_string;
    bson_uint32_to_string(bson_count_keys(held_ids), &key_string, key, sizeof key);
    bson_append_value(held_ids, key_string, -1, id);
}

/* The candidates of a batch (the find's documents, views into its reply) less those
 * a refused write holds; *out_count of them in documents and ids (caller frees).
 * The held ones are held for the rest of the pass too: a refusal recorded since the
 * pass read them would otherwise bring the same full batch back, counted each time. */
static bool keep_candidates(evictor_t *evictor, const char *ns, bson_iter_t *found, size_t count,
                            bson_t *held_ids, bson_t **out_documents, bson_value_t **out_ids, size_t *out_count,
                            int64_t *out_held, bson_error_t *error)
{
    bson_t *documents = bson_malloc0(count * sizeof *documents);
    bson_value_t *ids = bson_malloc0(count * sizeof *ids);
    bool *refused = bson_malloc0(count * sizeof *refused);
    size_t kept = 0, out = 0;
    bson_iter_t iter;
    bson_iter_recurse(found, &iter);
    while (bson_iter_next(&iter) && kept < count) {
        bson_iter_t id_iter;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&documents[kept], data, length);
        if (bson_iter_init_find(&id_iter, &documents[kept], "_id")) {
            ids[kept] = *bson_iter_value(&id_iter);
            kept++;
        }
    }
    /* After the feeder's wait: every refusal of a write up to the read is recorded
     * by now, so a document the archive lacks the version of is found here (I2, I8). */
    bool ok = tier_refused_ids(evictor->fast, ns, ids, kept, refused, error);
    for (size_t i = 0; ok && i < kept; i++) {
        if (refused[i]) {
            hold_for_pass(held_ids, &ids[i]);
            (*out_held)++;
            continue;
        }
        if (out != i) {
            /* A static bson_t points into itself: initialise it again, never copy it. */
            bson_init_static(&documents[out], bson_get_data(&documents[i]), documents[i].len);
            ids[out] = ids[i];
        }
        out++;
    }
    bson_free(refused);
    *out_documents = documents;
    *out_ids = ids;
    *out_count = out;
    return ok;
}

/* The candidates whose mark refused them: an earlier eviction not settled yet (its
 * mark committed, its range written when the feeder reaches the delete), or a
 * pending mark another process left (a holder that lost the lease mid-batch).
 * They are left out of the pass's next batches, and the pending marks are
 * released before the next batch. */
static void hold_unsettled(evictor_t *evictor, const bson_value_t *ids, size_t count, const bool *refused,
                           bson_t *held_ids, int64_t *out_unsettled)
{
    for (size_t i = 0; i < count; i++) {
        if (refused[i]) {
            hold_for_pass(held_ids, &ids[i]);
            (*out_unsettled)++;
            evictor->marks_unsettled = true;
        }
    }
}

/* One batch: returns the number of candidates found (0 when all those kept were
 * pinned, -1 on an error or a wait that ran out: the pass ends). */
static int64_t evict_batch(evictor_t *evictor, const config_namespace_t *policy, const bson_t *candidates,
                           bson_t *held_ids)
{
    tier_context_t *context = evictor->context;
    const size_t index = policy->index; /* its slot in the workers' progress */
    bson_error_t error;

    bson_t find = BSON_INITIALIZER, reply;
    bson_iter_t iter, found;
    BSON_APPEND_UTF8(&find, "find", policy->collection);
    append_candidates_filter(&find, candidates, held_ids);
    BSON_APPEND_INT32(&find, "limit", EVICT_BATCH);
    BSON_APPEND_INT32(&find, "batchSize", EVICT_BATCH);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    bool ok = tier_command(evictor->fast, policy->database, &find, &reply, &error);
    bson_destroy(&find);
    if (!ok || !bson_iter_init(&iter, &reply) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &found) ||
        !BSON_ITER_HOLDS_ARRAY(&found)) {
        tier_report_error(context, TIER_WORKER_EVICTOR, "cannot read eviction candidates of %s: %s", policy->ns,
                          ok ? "unexpected reply" : error.message);
        bson_destroy(&reply);
        return -1;
    }
    uint64_t read_time = timestamp_find(&reply, "operationTime");
    bson_iter_t items;
    size_t count = 0;
    if (bson_iter_recurse(&found, &items)) {
        while (bson_iter_next(&items)) {
            count++;
        }
    }
    if (count == 0) {
        bson_destroy(&reply);
        return 0;
    }
    if (read_time == 0) {
        tier_report_error(context, TIER_WORKER_EVICTOR,
                          "the fast tier keeps no oplog (start it with --replSet): nothing is evicted, since the "
                          "feeder cannot prove the archive holds these documents");
        bson_destroy(&reply);
        return -1;
    }
    if (!tier_wait_applied(context, evictor->fast, index, read_time, APPLIED_WAIT_MS, NULL)) {
        if (!tier_group_stopping(context->group)) {
            tier_report_error(context, TIER_WORKER_EVICTOR,
                              "%s: the feeder has not applied the fast tier's writes up to the candidates' read "
                              "(stopped, lagging or not running): nothing is evicted until it has",
                              policy->ns);
        }
        bson_destroy(&reply);
        return -1;
    }

    bson_t *documents = NULL;
    bson_value_t *ids = NULL;
    size_t kept = 0;
    batch_counts_t counts = {0};
    ok = keep_candidates(evictor, policy->ns, &found, count, held_ids, &documents, &ids, &kept, &counts.held, &error);
    bool *refused = bson_malloc0((kept + 1) * sizeof *refused);
    bool *pinned = bson_malloc0((kept + 1) * sizeof *pinned);
    int64_t intent_sent_ms = 0;
    bool announced = false;
    evictor->session = ok && kept > 0 ? mongoc_client_start_session(evictor->fast, NULL, &error) : NULL;
    ok = ok && (kept == 0 || evictor->session != NULL);
    ok = ok && insert_marks(evictor, policy->ns, ids, kept, read_time, refused, &error);
    hold_unsettled(evictor, ids, kept, refused, held_ids, &counts.unsettled);
    if (ok && kept > (size_t)counts.unsettled) { /* all refused: nothing to delete, nothing to announce */
        bson_oid_init(&evictor->intent, NULL);
        announced = true; /* a lost reply may have written it */
        ok = announce_batch(evictor, policy, ids, kept, refused, pinned, &intent_sent_ms, &error);
    }
    ok = ok && delete_candidates(evictor, policy, documents, ids, kept, refused, pinned, read_time, intent_sent_ms,
                                 &counts, &error);
    if (announced) {
        withdraw_batch(evictor);
    }
    if (evictor->session != NULL) {
        mongoc_client_session_destroy(evictor->session);
        evictor->session = NULL;
    }
    if (!ok) {
        evictor->marks_unsettled = true;
        tier_report_error(context, TIER_WORKER_EVICTOR, "eviction in %s failed: %s", policy->ns, error.message);
    } else {
        tier_report_ok(context, TIER_WORKER_EVICTOR);
    }
    tier_namespace_progress_t *item = tier_progress_lock_namespace(context->progress, index);
    item->evicted += counts.evicted;
    item->evict_changed += counts.changed;
    item->evict_held += counts.held;
    item->evict_pinned += counts.pinned;
    item->evict_unsettled += counts.unsettled;
    tier_progress_unlock(context->progress, false);
    bson_free(pinned);
    bson_free(refused);
    bson_free(ids);
    bson_free(documents);
    bson_destroy(&reply);
    if (ok && kept > 0 && counts.pinned == (int64_t)kept) {
        return 0; /* all pinned (a write by filter pins its namespace): the next batch would read them again */
    }
    return ok ? (int64_t)count : -1;
}

/* The candidates' filter: the documents {timeField: {$gte: cutoff}} does not
 * match, which are dates before the cutoff and also documents without the field,
 * with a value that is not a date, or with an array holding no date past the
 * cutoff (outside every window: the design's coverage contract; {$lt: cutoff}
 * would miss those, and would take an array that also holds a recent date). With
 * the archive's TTL indexes: {$or: [that, {ttlField: {$lt: now - expireAfterSeconds}}, ...]}. */
static void candidates_filter(evictor_t *evictor, const config_namespace_t *policy, bson_t *out)
{
    int64_t now = clock_wall_ms();
    bson_t conditions = BSON_INITIALIZER, aged = BSON_INITIALIZER, bound;
    bson_error_t error;
    uint32_t count = 1;
    bson_t not_bound;
    bson_append_document_begin(&aged, policy->time_field, -1, &bound);
    BSON_APPEND_DOCUMENT_BEGIN(&bound, "$not", &not_bound);
    BSON_APPEND_DATE_TIME(&not_bound, "$gte", now - policy->max_age_ms);
    bson_append_document_end(&bound, &not_bound);
    bson_append_document_end(&aged, &bound);
    BSON_APPEND_DOCUMENT(&conditions, "0", &aged);
    if (!index_sync_append_ttl_conditions(evictor->fast, policy->ns, now, &conditions, &count, &error)) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{ns}: cannot read the archive's TTL indexes ({error}): this batch evicts by age only",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("error", error.message));
    }
    bson_init(out);
    if (count == 1) {
        bson_concat(out, &aged);
    } else {
        BSON_APPEND_ARRAY(out, "$or", &conditions);
    }
    bson_destroy(&aged);
    bson_destroy(&conditions);
}

/* Aborts the transactions a crashed process may have left open in the sessions of
 * its pending marks (killSessions): one holds its document and its mark, and the
 * DDL of their collections, until transactionLifetimeLimitSeconds (60 s)
 * otherwise. This process's own are left alone: it aborted them, or libmongoc
 * discarded a session a network error dirtied, while a clean one it may reuse. */
static void kill_pending_sessions(evictor_t *evictor)
{
    bson_t filter = BSON_INITIALIZER, projection = BSON_INITIALIZER, marks, command = BSON_INITIALIZER, sessions;
    bson_t reply, not_ours;
    bson_iter_t iter, field;
    bson_error_t error;
    uint32_t count = 0;
    BSON_APPEND_UTF8(&filter, "_id.op", "evict");
    BSON_APPEND_UTF8(&filter, "state", "pending");
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "holder", &not_ours);
    BSON_APPEND_UTF8(&not_ours, "$ne", evictor->holder);
    bson_append_document_end(&filter, &not_ours);
    BSON_APPEND_INT32(&projection, "session", 1);
    bool ok = tier_read_state_part(evictor->fast, TIER_MARKS_COLLECTION, &filter, &projection, TIER_STATE_READ_LIMIT,
                                   &marks, &error);
    BSON_APPEND_ARRAY_BEGIN(&command, "killSessions", &sessions);
    bson_iter_init(&iter, &marks);
    while (ok && bson_iter_next(&iter)) {
        bson_t mark;
        char key[16];
        const char *key_string;
        if (bson_view_of(&iter, &mark) && bson_iter_init_find(&field, &mark, "session") &&
            BSON_ITER_HOLDS_DOCUMENT(&field)) {
            bson_uint32_to_string(count++, &key_string, key, sizeof key);
            bson_append_iter(&sessions, key_string, -1, &field);
        }
    }
    bson_append_array_end(&command, &sessions);
    /* Never an empty list: killSessions: [] kills every session of the user. */
    if (ok && count > 0) {
        ok = tier_command(evictor->fast, "admin", &command, &reply, &error);
        bson_destroy(&reply);
    }
    if (!ok) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "cannot abort the transactions of unfinished evictions ({error}): they end within "
                     "transactionLifetimeLimitSeconds",
                     TC_ATTR_STR("error", error.message));
    }
    bson_destroy(&command);
    bson_destroy(&marks);
    bson_destroy(&projection);
    bson_destroy(&filter);
}

/* Releases the evict marks a crash or a failed batch left pending, their open
 * transactions aborted first: a delete commits with its mark's "committed", so a
 * pending one never deleted its document, and a document gone since was deleted
 * by a client (the feeder replays that delete). A pending mark refuses its
 * document's next eviction until then. */
static bool release_pending_marks(evictor_t *evictor, bson_error_t *error)
{
    bson_t selector = BSON_INITIALIZER;
    int64_t released = 0;
    kill_pending_sessions(evictor);
    BSON_APPEND_UTF8(&selector, "_id.op", "evict");
    bool ok = tier_release_marks(evictor->fast, &selector, &released, error);
    if (ok && released > 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{count} eviction(s) left unfinished by a crash or a failed batch never deleted their documents "
                     "(a delete commits with its mark): their marks are released",
                     TC_ATTR_INT("count", released));
    }
    bson_destroy(&selector);
    return ok;
}

/* Pins and intents whose holder died expire (pins.h) and stop counting; their
 * documents are removed now and then, so the collections stay small. */
static void remove_expired(evictor_t *evictor)
{
    const char *collections[] = {TIER_PINS_COLLECTION, TIER_EVICTIONS_COLLECTION};
    for (size_t i = 0; i < sizeof collections / sizeof collections[0]; i++) {
        bson_t query = BSON_INITIALIZER;
        bson_error_t error;
        tier_pins_append_alive(&query, false);
        if (!tier_delete_state(evictor->fast, collections[i], &query, 0, NULL, &error)) {
            TC_LOG_ATTRS(TC_LOG_DEBUG, LOG_COMPONENT, 0, "cannot remove expired documents of {collection}: {error}",
                         TC_ATTR_STR("collection", collections[i]), TC_ATTR_STR("error", error.message));
        }
        bson_destroy(&query);
    }
}

/* What runs between batches, when this evictor has no session or intent open:
 * the release of pending marks (they refuse their documents' evictions, and
 * another process's open transaction holds its document), and now and then the
 * removal of expired pins. False when the release failed: no batch runs. */
static bool tend_between_batches(evictor_t *evictor)
{
    if (evictor->marks_unsettled) {
        bson_error_t error;
        if (!release_pending_marks(evictor, &error)) {
            tier_report_error(evictor->context, TIER_WORKER_EVICTOR, "cannot check unfinished evictions: %s",
                              error.message);
            return false;
        }
        evictor->marks_unsettled = false;
    }
    int64_t now = clock_monotonic_ms();
    if (now >= evictor->next_cleanup_ms) {
        remove_expired(evictor);
        evictor->next_cleanup_ms = now + EXPIRED_CLEANUP_MS;
    }
    return true;
}

/* One pass over a namespace: at most BATCHES_PER_PASS batches, the full ones
 * spaced pace_ms apart so that a round of every namespace's passes fits in the
 * shortest evictorPeriod. Back to back, a pass of 4,400 faulted-in documents took
 * 7 s of a minute, its marks, transactions and ranges each waiting for the fast
 * tier's journal: a stall of the disk then held up the clients' writes behind
 * them (issue 20). */
static void evict_namespace(evictor_t *evictor, const config_namespace_t *policy)
{
    tier_context_t *context = evictor->context;
    int64_t total = 0;
    bson_t held_ids;
    bson_error_t error;
    if (!tier_refused_id_list(evictor->fast, policy->ns, &held_ids, &error)) {
        tier_report_error(context, TIER_WORKER_EVICTOR, "cannot read the refused writes of %s: %s", policy->ns,
                          error.message);
        bson_destroy(&held_ids);
        return;
    }
    for (int batch = 0; batch < BATCHES_PER_PASS && !tier_group_stopping(context->group); batch++) {
        int64_t started = clock_monotonic_ms();
        if (!tier_holds_lease(context, TIER_WORKER_EVICTOR) || (batch > 0 && !tend_between_batches(evictor))) {
            break; /* no mark or delete once another process may evict, nor beside marks left pending */
        }
        bson_t candidates;
        candidates_filter(evictor, policy, &candidates); /* the cutoff of now: a pass lasts up to its period */
        if (batch == 0 && !bson_empty(&held_ids)) {
            count_held_candidates(evictor, policy, &candidates, &held_ids); /* once a pass, by the lease holder */
        }
        /* The lease again: it may have lapsed during the count (up to its maxTimeMS). */
        int64_t found =
            tier_holds_lease(context, TIER_WORKER_EVICTOR) ? evict_batch(evictor, policy, &candidates, &held_ids) : -1;
        bson_destroy(&candidates);
        if (found <= 0) {
            break;
        }
        total += found;
        /* At most EVICT_MAX_PER_SECOND, and a full pass spread over its period:
         * client traffic comes first. */
        int64_t interval_ms = found * 1000 / EVICT_MAX_PER_SECOND;
        if (found == EVICT_BATCH && evictor->pace_ms > interval_ms) {
            interval_ms = evictor->pace_ms;
        }
        int64_t spent = clock_monotonic_ms() - started;
        if (spent < interval_ms && !tier_group_sleep(context->group, interval_ms - spent)) {
            break;
        }
        if (found < EVICT_BATCH) {
            break;
        }
    }
    bson_destroy(&held_ids);
    tier_namespace_progress_t *item = tier_progress_lock_namespace(context->progress, policy->index);
    item->evict_last_pass_ms = clock_wall_ms();
    tier_progress_unlock(context->progress, false);
    if (total > 0) {
        TC_LOG_ATTRS(TC_LOG_DEBUG, LOG_COMPONENT, 0,
                     "{ns}: looked at {documents} documents older than the window or expired",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_INT("documents", total));
    }
}

void evictor_run(tier_group_t *group, void *argument)
{
    tier_context_t *context = argument;
    evictor_t evictor = {.context = context};
    size_t count = context->config->namespace_count;
    evictor.fast = mongoc_client_pool_pop(context->fast_pool);
    evictor.namespaces = bson_malloc0((count + 1) * sizeof *evictor.namespaces);
    int64_t shortest_period_ms = PACED_PERIOD_MAX_MS;
    for (size_t i = 0; i < count; i++) {
        evictor.namespaces[i].config = &context->config->namespaces[i];
        if (context->config->namespaces[i].evictor_period_ms < shortest_period_ms) {
            shortest_period_ms = context->config->namespaces[i].evictor_period_ms;
        }
    }
    /* The passes run one after another: a round of full ones fits in the shortest period. */
    evictor.pace_ms = count > 0 ? shortest_period_ms / (BATCHES_PER_PASS * (int64_t)count) : 0;
    tier_worker_progress_t *item = tier_progress_lock_worker(context->progress, TIER_WORKER_EVICTOR);
    item->running = true;
    tier_progress_unlock(context->progress, false);

    evictor.fail_mark_after = tier_test_hook_countdown("THERMOCLINE_TEST_FAIL_EVICT_MARK");
    evictor.kill_before_delete = tier_test_hook_countdown("THERMOCLINE_TEST_KILL_BEFORE_EVICT_DELETE");
    evictor.kill_in_transaction = tier_test_hook_countdown("THERMOCLINE_TEST_KILL_IN_EVICT_TRANSACTION");
    tier_pins_holder(evictor.holder, sizeof evictor.holder);

    /* Evictions a crash or a failed batch interrupted: settled before any new one
     * starts (their pending marks would refuse their documents' evictions). */
    evictor.marks_unsettled = true;
    while (!tier_group_stopping(group) && count > 0) {
        if (!tend_between_batches(&evictor)) {
            tier_group_sleep(group, 1000);
            continue;
        }
        int64_t next = clock_monotonic_ms() + 1000;
        for (size_t i = 0; i < count && !tier_group_stopping(group); i++) {
            evictor_namespace_t *entry = &evictor.namespaces[i];
            int64_t started = clock_monotonic_ms();
            if (started >= entry->next_due_ms) {
                if (!tend_between_batches(&evictor)) {
                    break; /* the previous pass left marks pending: retried within a second */
                }
                /* Due a period from the pass's start: a paced pass may take most of it. */
                evict_namespace(&evictor, entry->config);
                entry->next_due_ms = started + entry->config->evictor_period_ms;
            }
            if (entry->next_due_ms < next) {
                next = entry->next_due_ms;
            }
        }
        tier_group_sleep(group, next - clock_monotonic_ms());
    }
    bson_free(evictor.namespaces);
    mongoc_client_pool_push(context->fast_pool, evictor.fast);
}
