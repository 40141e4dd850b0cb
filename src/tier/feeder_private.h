/* What the feeder's two files share: feeder.c (the change stream, the archive,
 * the checkpoint) and feeder_refusal.c (the writes the archive refused, kept in
 * the fast tier's thermocline.refusals until a retry succeeds). */
#ifndef TC_TIER_FEEDER_PRIVATE_H
#define TC_TIER_FEEDER_PRIVATE_H

#include "tier/feeder_batch.h"
#include "tier/tier_private.h"

#define FEEDER_REFUSAL_MESSAGE_SIZE 256

/* A document with a refused write standing: its later writes queue behind it. */
typedef struct feeder_refused {
    bson_value_t id;           /* owned (bson_value_copy) */
    uint64_t recorded_through; /* its events at or before this time are recorded (a replay skips them) */
    int64_t records;           /* refused and queued writes recorded */
    int64_t first_ms;          /* wall clock of its first record */
    int32_t code;              /* the archive's error for the first of them */
    char message[FEEDER_REFUSAL_MESSAGE_SIZE];
    bool retry_refused;        /* a retry in progress met a refusal of it again: its later records wait */
} feeder_refused_t;

/* One per namespace of the config, in its order (config->index is the position). */
typedef struct feeder_namespace {
    const config_namespace_t *config; /* its names; config->index is also its ops' namespace_index */
    bool stopped;         /* a command the archive failed as a whole: nothing more is applied */
    bool retrying;        /* was stopped at start: applied again from its own resume point */
    uint64_t skip_until;  /* its events at or before this time are in the archive already */
    bson_t stopped_token; /* where it resumes after a restart; empty when the stream had no token yet... */
    uint64_t stopped_start_at; /* ...and it resumes from this cluster time instead */
    uint64_t stopped_time;
    feeder_refused_t *refused; /* few: looked up linearly */
    size_t refused_count;
    size_t refused_capacity;
} feeder_namespace_t;

typedef struct feeder {
    tier_context_t *context;
    mongoc_client_t *fast;
    mongoc_client_t *archive;
    mongoc_client_session_t *session;
    uint32_t server_id;
    int64_t cursor_id; /* 0: no stream open */
    bool started;
    bool have_token;
    bson_t token;             /* the stream position applied through */
    uint64_t start_at;        /* no token yet: where the proxy recorded the start (0: now) */
    uint64_t applied_time;    /* its cluster time */
    uint64_t start_time;      /* the checkpoint's time at start: retries are caught up past it */
    uint64_t replay_until;    /* events at or before may have been applied before a restart */
    bool archive_majority;    /* the archive is a replica set: w: majority */
    feeder_namespace_t *namespaces;
    size_t namespace_count;
    feeder_batch_t *batch;
    bson_t consumed_marks;    /* {key, to}: the eviction ranges deletes took since the last clean of
                                 the marks */
    int64_t last_checkpoint_ms;
    bool events_unsaved; /* events applied since the checkpoint (not only bookkeeping) */
    int64_t last_mark_clean_ms; /* marks are kept minutes: cleaned once a second, not at every checkpoint */
    bool marks_left;            /* the last clean stopped at its time budget: clean at the next checkpoint */
    int64_t mark_clean_failures; /* in a row: the warning is repeated only now and then */
    uint64_t checkpoint_time;
    int64_t backoff_ms;
    int64_t stats_since_ms;
    int64_t stats_events;
    int64_t stats_writes;
    int64_t next_refusal;     /* the sequence number (_id) of the next record in thermocline.refusals */
    bool refusals_due;        /* retry the refusals before the next batch (start, a request, a failed retry) */
    int64_t retry_requests_seen; /* thermoclineRetryRefusals requests already served */
    /* Test hook: THERMOCLINE_TEST_KILL_AFTER_APPLY=N makes the process SIGKILL itself
     * after the Nth batch the archive acknowledged, before its checkpoint: the crash
     * the checkpoint's order must survive (tests/integration/test_tier_faults.py). */
    long kill_after_batches;
} feeder_t;

/* --- feeder.c ---------------------------------------------------------------------- */

void feeder_append_write_concern(bson_t *command, bool majority);

/* Runs a write command on the fast tier until it succeeds; false only when the
 * group stops first. */
bool feeder_fast_write(feeder_t *feeder, const bson_t *command, const char *what);

/* Adds one archive write to an ordered bulk, as the replay sends it. */
bool feeder_append_op(mongoc_bulk_operation_t *bulk, feeder_op_kind_t kind, const bson_value_t *id,
                      const bson_t *document, bson_error_t *error);

const char *feeder_op_kind_name(feeder_op_kind_t kind); /* "replace", "update", "delete" */

/* Waits (backoff) before the next attempt on a tier. */
void feeder_backoff(feeder_t *feeder);

/* --- feeder_marks.c -------------------------------------------------------------- */

/* Whether a delete already took the eviction mark key's range ending at range_to
 * (consumed: feeder_t.consumed_marks); if not, this one takes it. */
bool feeder_consume_range(bson_t *consumed, const bson_t *key, uint64_t range_to);
/* Writes the range of a committed eviction mark (worker_writes.h) whose evictor
 * crashed before it did: done (since, delete_time], delete_time the first delete
 * after since, which the feeder takes for the eviction. *out_settled: the mark was
 * still that committed one (else it changed: read it again). False (reported) when
 * the write failed. */
bool feeder_settle_committed_mark(feeder_t *feeder, const bson_t *mark, uint64_t delete_time, bool *out_settled);
/* Forgets the eviction ranges deletes took, settles the copy marks left pending a
 * minute (done, bound to their copy's digest: worker_writes.h; one without a
 * digest goes back to its done range, or is removed when it has none), then
 * removes the done marks the feeder passed WORKER_WRITES_RETENTION_SECONDS ago,
 * in bounded batches for a bounded time; true when some are left for the next
 * call. */
bool feeder_clean_marks(feeder_t *feeder);
/* Creates the marks' indexes the clean and the readers of pending marks use. */
void feeder_index_marks(feeder_t *feeder);

/* --- feeder_refusal.c ----------------------------------------------------------------
 * thermocline.refusals: {_id: <sequence, int64>, ns, id, kind, write, firstTime,
 * lastTime, queued, code, message, at}: a write the archive refused (queued:
 * false) or one queued behind such a write of the same document (queued: true),
 * in the order they are to be replayed. */

/* The document's standing refusal in item, NULL when none. */
feeder_refused_t *feeder_refused_find(feeder_namespace_t *item, const bson_value_t *id);

/* Records op durably (w: majority) as refused by the archive with code and
 * message, or, with code 0, as queued behind the document's refused write, and
 * logs it. False only when the group stops before it is recorded. */
bool feeder_refusal_record(feeder_t *feeder, feeder_namespace_t *item, const feeder_op_t *op, int32_t code,
                           const char *message) TC_MUST_CHECK;

/* Reads thermocline.refusals into the namespaces (at start). */
bool feeder_refusals_load(feeder_t *feeder, bson_error_t *error) TC_MUST_CHECK;

/* Replays the recorded writes in order, each document's until one is refused
 * again; those the archive takes are removed. False when the archive or the fast
 * tier could not be reached (feeder->refusals_due stays set: tried again later). */
bool feeder_refusals_retry(feeder_t *feeder);

/* Publishes a namespace's refusals to thermoclineStatus. */
void feeder_refusals_publish(feeder_t *feeder, feeder_namespace_t *item);

void feeder_refusals_free(feeder_namespace_t *item);

#endif
