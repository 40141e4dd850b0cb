/* Internals shared by the tier workers (feeder.c, evictor.c, warmer.c, warmer_batch.c) and their
 * helpers (tier_common.c): the context every worker thread gets, libmongoc
 * helpers, the worker-writes marks and the pacer. */
#ifndef TC_TIER_TIER_PRIVATE_H
#define TC_TIER_TIER_PRIVATE_H

#include "common/clock.h"
#include "common/timestamp.h"
#include "tier/thread_group.h"
#include "tier/tier.h"
#include "tier/worker_writes.h"

#include <mongoc/mongoc.h>

/* What the worker threads of one process share; all of it outlives them. */
typedef struct tier_context {
    const config_t *config;
    tier_progress_t *progress;
    tier_group_t *group;
    mongoc_client_pool_t *fast_pool;
    mongoc_client_pool_t *archive_pool;
    /* The lease the running worker holds (tier/lease.h); leases NULL: no leases. */
    struct tier_leases *leases;
    int64_t lease_term;
    /* A proxy's workers (a claim), not a worker process's: the proxies that wait
     * on a worker process's feeder are not all counted (those without workers do
     * not beat), so its checkpoint follows every batch. */
    bool in_proxy;
} tier_context_t;

/* Whether the running worker still holds its lease (renewed within half of
 * leaseTimeout): checked before a write its successor must not see, so that a
 * paused or partitioned holder does not write once another may have taken over. */
bool tier_holds_lease(const tier_context_t *context, tier_worker_t worker);

/* Fences a state write (an upsert that $sets leaseTerm: term): query gains
 * {$or: [{leaseTerm: {$lte: term}}, {leaseTerm: {$exists: false}}]}, so a document
 * written under a newer term refuses it (the upsert then meets the _id index) and
 * a holder that lost its lease never moves its successor's state. */
void tier_lease_fence(bson_t *query, int64_t term);

/* Whether the feeder runs in this process now (it holds the feeder's lease): its
 * progress is then in memory, else read from the fast tier. */
bool tier_feeder_runs_here(tier_context_t *context);

/* The worker threads' bodies (context: tier_context_t). */
void feeder_run(tier_group_t *group, void *context);
void evictor_run(tier_group_t *group, void *context);
void warmer_run(tier_group_t *group, void *context);

/* --- clients and commands ------------------------------------------------------- */

/* mongoc_init(), with libmongoc's warnings and errors sent to our log (tier.c). */
void tier_libmongoc_init(void);

/* A pool for uri with the workers' timeouts (server selection and connect 1 s,
 * socket 60 s) unless the URI sets its own. Free with mongoc_client_pool_destroy(). */
mongoc_client_pool_t *tier_pool_new(const char *uri, const char *app_name, bson_error_t *error);

/* One client with the same timeouts, for one thread's few commands at start: a
 * pool's monitoring threads took 0.5 s to stop, each start's preflight and
 * feeder start a second between them. Free with mongoc_client_destroy(). */
mongoc_client_t *tier_client_new(const char *uri, const char *app_name, bson_error_t *error);

/* Runs command on the tier's primary exactly as given. reply is always
 * initialised (caller destroys). False on a network error or ok: 0; a write's
 * writeErrors come with ok: 1, true here: the caller reads them. */
bool tier_command(mongoc_client_t *client, const char *database, const bson_t *command, bson_t *reply,
                  bson_error_t *error);

#define TIER_STATE_READ_LIMIT 10000

/* Every document of one of the workers' state collections in the thermocline
 * database (feeder, warmer, workerWrites: small) that matches filter, read in one
 * batch (at most TIER_STATE_READ_LIMIT), as a BSON array. out_array is always initialised (caller destroys). False
 * on an error, or a reply without cursor.firstBatch (OperationFailed). */
bool tier_read_state(mongoc_client_t *client, const char *collection, const bson_t *filter, bson_t *out_array,
                     bson_error_t *error);
/* As tier_read_state, at most limit documents (at most TIER_STATE_READ_LIMIT),
 * with only projection's fields (NULL: whole documents). */
bool tier_read_state_part(mongoc_client_t *client, const char *collection, const bson_t *filter,
                          const bson_t *projection, int32_t limit, bson_t *out_array, bson_error_t *error);

/* Appends the workers' state writes' writeConcern, w: 1: the state is written
 * to the fast tier's primary, which the workers read it from. */
void tier_append_state_write_concern(bson_t *command);
/* Sends a write command (its statements, no writeConcern) to one of the workers'
 * state collections in the thermocline database, with w: 1. False on an error, a
 * write error included (the first one's code and message; unordered, the other
 * statements may have been applied). *out_count (may be NULL): the reply's
 * count_field (n, nModified; NULL: none), 0 on a failure. */
bool tier_write_state(mongoc_client_t *client, const char *collection, bson_t *command, const char *count_field,
                      int64_t *out_count, bson_error_t *error);
/* Deletes the documents of one of the workers' state collections that match query
 * (limit 1: one; 0: all), with w: 1. *out_deleted (may be NULL) is the reply's n.
 * False on an error, a write error included. */
bool tier_delete_state(mongoc_client_t *client, const char *collection, const bson_t *query, int32_t limit,
                       int64_t *out_deleted, bson_error_t *error);

/* Releases the pending worker-writes marks selector matches (it names which; the
 * state is added here) whose write did not happen: one that was done before, its
 * history holding ranges older change events are classified by, goes back to
 * "done" (tier_restore_done_marks, *out_restored: how many); one without a history
 * is removed. *out_released (may be NULL): how many in all. */
bool tier_release_marks(mongoc_client_t *fast, const bson_t *selector, int64_t *out_released, bson_error_t *error);
bool tier_restore_done_marks(mongoc_client_t *fast, const bson_t *selector, int64_t *out_restored,
                             bson_error_t *error);
/* Appends {"history.0": {$exists: has}}: whether a mark has a done range. */
void tier_append_mark_has_history(bson_t *filter, bool has);

/* One entry of a write reply's writeErrors. */
typedef struct tier_write_error {
    int64_t index;       /* the statement's position in the command; -1 when missing */
    int64_t code;        /* 0 when missing */
    const char *message; /* errmsg, or "write error"; borrows the reply */
} tier_write_error_t;

/* Walks reply's writeErrors: init is false when the reply has none; next fills out
 * with the next entry (entries that are not documents are skipped), false at the end:
 *     if (tier_write_errors_init(&errors, &reply)) while (tier_write_errors_next(&errors, &e)) ... */
bool tier_write_errors_init(bson_iter_t *out_iter, const bson_t *reply);
bool tier_write_errors_next(bson_iter_t *iter, tier_write_error_t *out);

/* Whether error is worth retrying later as is: the tier unreachable, stepping
 * down, or a time limit (not a write the server refused): a driver's retryable
 * codes (tc_error_code_is_retryable) plus MaxTimeMSExpired, WriteConcernFailed
 * and Interrupted. */
bool tier_error_is_transient(const bson_error_t *error);

/* The error code, as the server sent it (0 for client-side errors). */
int32_t tier_error_code(const bson_error_t *error);

/* --- cluster times --------------------------------------------------------------- */

/* The cluster time a resume token stands for: mongod's and our store's tokens
 * start with KeyString's Timestamp type (0x82) and the time, big-endian. 0 when
 * the token has another shape. */
uint64_t tier_token_time(const bson_t *token);

/* The fast tier's current cluster time: the operationTime of a ping. 0 when
 * the tier keeps no oplog (not a replica set member): the workers then idle. */
bool tier_cluster_time(mongoc_client_t *client, uint64_t *out_time, bson_error_t *error);

/* --- namespaces ----------------------------------------------------------------- */

/* Splits "db.coll" into database (copied into a buffer of PLAN-sized room) and
 * collection (a pointer into ns). A config_namespace_t carries both already,
 * split once at load: read its database and collection instead. */
void tier_split_namespace(const char *ns, char *out_database, size_t size, const char **out_collection);

/* Whether two _id values are the same BSON value (type and bytes). */
bool tier_value_equal(const bson_value_t *left, const bson_value_t *right);

/* The first value at a dotted path of document (the time field); false when
 * missing. For an array, the largest date in it (the key of a descending sort). */
bool tier_time_value(const bson_t *document, const char *path, int64_t *out_ms);

/* --- feeder progress for the evictor and the warmer -------------------------------- */

/* Waits until every fast-tier write to namespace index at or before time is in
 * the archive, as the feeder reports (in memory, or its checkpoint in the fast
 * tier when it runs elsewhere); out_applied_time (may be NULL) gets the time it
 * has reached, which may be later. False after timeout_ms, when the namespace's
 * feed is stopped, or when the group stops. */
bool tier_wait_applied(tier_context_t *context, mongoc_client_t *fast, size_t index, uint64_t time,
                       int64_t timeout_ms, uint64_t *out_applied_time);

/* Reads the feeder's documents from the fast tier into context->progress. */
bool tier_read_feeder_progress(tier_context_t *context, mongoc_client_t *fast, bson_error_t *error);

/* --- worker-writes marks (worker_writes.h) ---------------------------------------- */

/* The exact-version filter of a fast-tier document: {_id, every top-level
 * field: {$eq: value}}. False for a document with a field name a filter would
 * read as a path or an operator (dots, leading '$'). */
bool tier_version_filter(const bson_t *document, bson_t *out_filter);

/* Appends to command the delete of one document of collection matching version
 * (a tier_version_filter): a client's later write wins over the worker's delete. */
void tier_append_delete_version(bson_t *command, const char *collection, const bson_t *version);

/* Whether database.collection on client holds a document with _id id; when
 * out_document is not NULL it is initialised here and, if found, holds a copy
 * (the caller destroys it). */
bool tier_find_by_id(mongoc_client_t *client, const char *database, const char *collection, const bson_value_t *id,
                     bool *out_found, bson_t *out_document, bson_error_t *error);

/* Sets out_held[i] for each ids[i] of namespace ns that a write the archive
 * refused holds in the fast tier (thermocline.refusals: see feeder_private.h):
 * the evictor keeps those documents, whichever process runs the feeder. */
bool tier_refused_ids(mongoc_client_t *fast, const char *ns, const bson_value_t *ids, size_t count, bool *out_held,
                      bson_error_t *error);

/* The _id values of namespace ns that refused writes hold (at most 10,000, one
 * per record), as a BSON array for $nin; out_ids always initialised (caller destroys). */
bool tier_refused_id_list(mongoc_client_t *fast, const char *ns, bson_t *out_ids, bson_error_t *error);

/* --- pacing ------------------------------------------------------------------------ */

/* Keeps background work on a tier to a share of its time: after each request of
 * latency L it asks for a pause of L * (1 - share) / share, longer when L grows
 * well past the best latency seen lately (the tier is busy with clients), but at
 * most 4 times longer (and 5 s): the work keeps share / (share + 4 (1 - share)) of
 * the time (a fifth at share 0.5) on a saturated tier, so it always progresses. */
typedef struct tier_pacer {
    double share;
    double best_ms;
    double average_ms;
} tier_pacer_t;

void tier_pacer_init(tier_pacer_t *pacer, double share);
int64_t tier_pacer_pause_ms(tier_pacer_t *pacer, int64_t latency_ms);

/* Records a worker's state for thermoclineStatus and the log. */
void tier_report_error(tier_context_t *context, tier_worker_t worker, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
void tier_report_ok(tier_context_t *context, tier_worker_t worker);

/* Test hooks: THERMOCLINE_TEST_<NAME>=N arms a countdown (0, never, when unset);
 * tier_test_hook_fires counts one occasion down and says whether it was the Nth,
 * tier_test_hook_kill SIGKILLs the process on the Nth, logging which hook did. */
long tier_test_hook_countdown(const char *variable);
bool tier_test_hook_fires(long *countdown);
void tier_test_hook_kill(long *countdown, const char *variable, const char *moment);

#endif
