/* What the tier workers have done, shared between their threads and the proxy's
 * loop thread: the feeder's applied cluster time per namespace (read-your-writes),
 * the warmer's coverage (routing), the evictor's counts (status). One mutex
 * guards it all; a listener (the proxy's uv_async_send) hears every change that
 * matters to routing, and worker threads can wait for the next one. */
#ifndef TC_TIER_PROGRESS_H
#define TC_TIER_PROGRESS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TIER_ERROR_TEXT_SIZE 512
#define TIER_REFUSAL_SAMPLE 3

/* One document held in the fast tier by a write the archive refused. */
typedef struct tier_refusal_sample {
    uint8_t id[96];     /* {_id: value} as BSON; id_length 0: too long to show */
    uint32_t id_length;
    int32_t code;       /* the archive's */
    int64_t at_ms;      /* wall clock of the refusal */
    char message[200];
} tier_refusal_sample_t;

typedef struct tier_namespace_progress {
    /* Feeder: every fast-tier write to the namespace with a cluster time at or
     * below applied_time is in the archive (0: not known yet). */
    uint64_t applied_time;
    bool feed_stopped; /* the archive failed a command as a whole: nothing more is applied */
    char feed_error[TIER_ERROR_TEXT_SIZE];
    /* Feeder: writes the archive refused (thermocline.refusals), with those queued
     * behind them; their documents stay in the fast tier. */
    int64_t refusals;
    int64_t refused_documents;
    int64_t refusal_oldest_ms; /* wall clock of the oldest, 0: none */
    size_t refusal_sample_count;
    tier_refusal_sample_t refusal_sample[TIER_REFUSAL_SAMPLE];
    /* Warmer. */
    bool coverage_valid;        /* the first full pass is complete */
    bool warm_declared;         /* coverage: complete in the config: nothing to warm */
    int64_t warm_copied;        /* documents copied into the fast tier, this pass */
    int64_t warm_remaining;     /* estimate; -1: not known */
    int64_t warm_started_ms;    /* wall clock of the pass's start, 0: none */
    double warm_rate;           /* documents per second lately, while a pass runs; 0: not measured */
    int64_t warm_completed_ms;  /* wall clock of the first pass's end, 0: not yet */
    uint64_t warm_copy_time;    /* once coverage_valid, the fast tier's cluster time after the
                                 * last copy (0: none): a secondary that has not applied it
                                 * may lack copies */
    /* Evictor. */
    int64_t evicted;            /* documents deleted from the fast tier */
    int64_t evict_changed;      /* candidates that changed under the evictor: kept */
    int64_t evict_held;         /* candidates kept because a refused write of theirs stands */
    int64_t evict_pinned;       /* candidates kept because a proxy's pin in the fast tier covered them (pins.h) */
    int64_t evict_unsettled;    /* candidates kept because their last eviction's range is not written yet */
    int64_t evict_last_pass_ms; /* wall clock of the last completed pass */
} tier_namespace_progress_t;

typedef struct tier_worker_progress {
    bool running;          /* a thread of this process runs the worker */
    /* Its lease (tier/lease.h), as this process last read or held it. */
    bool lease_known;
    bool lease_held;       /* this process holds it */
    int64_t lease_term;
    char lease_holder[160]; /* "" when released */
    int64_t updated_ms;    /* wall clock of the last report */
    char last_error[TIER_ERROR_TEXT_SIZE]; /* "" when the last attempt succeeded */
    /* Feeder only. */
    uint64_t stream_time;      /* the change stream's position (all healthy namespaces) */
    /* Wall clock of the oldest event fetched and not yet applied (0: caught up),
     * so that the lag read at any moment is live, not the age it had when the
     * batch began (tier_progress_lag_ms). */
    int64_t unapplied_since_ms;
    int64_t events_applied;    /* change events replayed in the archive */
    int64_t events_suppressed; /* the evictor's deletes and the warmer's copies, skipped */
    int64_t batches;
    int64_t archive_writes;    /* write operations after coalescing */
    int64_t retries;           /* failed attempts retried with backoff */
    bool archive_reachable;
    int64_t refusal_retries_requested; /* thermoclineRetryRefusals: the feeder retries when it grows */
} tier_worker_progress_t;

typedef enum tier_worker {
    TIER_WORKER_FEEDER,
    TIER_WORKER_EVICTOR,
    TIER_WORKER_WARMER,
    TIER_WORKER_COUNT,
} tier_worker_t;

const char *tier_worker_name(tier_worker_t worker); /* "feeder", "evictor", "warmer" */

typedef struct tier_progress tier_progress_t;

/* Called with no lock held after a change that matters to routing (applied time,
 * a stopped feed, coverage). Must not block: uv_async_send is the intended use. */
typedef void (*tier_progress_listener_fn)(void *context);

/* For namespace_count namespaces, in the config's order: `index` below is a
 * namespace's config_namespace_t.index. Free with tier_progress_destroy() once no
 * thread uses it. */
tier_progress_t *tier_progress_new(size_t namespace_count);
void tier_progress_destroy(tier_progress_t *progress);

size_t tier_progress_namespace_count(const tier_progress_t *progress);

/* NULL listener: none. Set before the workers start or after they stop. */
void tier_progress_set_listener(tier_progress_t *progress, tier_progress_listener_fn listener, void *context);

/* Writers: lock, change the returned record, unlock. notify: tell the listener
 * and the waiters (tier_progress_wait). Only one record is locked at a time. */
tier_namespace_progress_t *tier_progress_lock_namespace(tier_progress_t *progress, size_t index);
tier_worker_progress_t *tier_progress_lock_worker(tier_progress_t *progress, tier_worker_t worker);
void tier_progress_unlock(tier_progress_t *progress, bool notify);

/* Sets every namespace's applied_time whose feed is not stopped to time, if that
 * moves it forward, and notifies. */
void tier_progress_set_applied(tier_progress_t *progress, uint64_t time);

/* The other proxies of this configuration seen alive (heartbeats in
 * thermocline.proxies, tier/lease.h): with any, a read sent to the archive waits
 * for writes acknowledged through them too. */
void tier_progress_set_peers(tier_progress_t *progress, int peers);
int tier_progress_peers(tier_progress_t *progress);

/* Readers: copies, consistent at one instant. */
void tier_progress_namespace(tier_progress_t *progress, size_t index, tier_namespace_progress_t *out);
void tier_progress_worker(tier_progress_t *progress, tier_worker_t worker, tier_worker_progress_t *out);
/* The feeder's lag at now_wall_ms: the age of its oldest event not yet applied. */
int64_t tier_progress_lag_ms(const tier_worker_progress_t *feeder, int64_t now_wall_ms);

/* Waits until a notifying unlock happens or timeout_ms passes. */
void tier_progress_wait(tier_progress_t *progress, int64_t timeout_ms);

/* --- pins: the proxy's writes against the evictor, in this process -------------
 * A write that faults documents in needs them to stay in the fast tier until it
 * runs. The router pins their _id values (or, for a write chosen by a filter, the
 * whole namespace) from before the fault-in until the write's reply; the evictor
 * deletes a document only between tier_progress_begin_eviction (refused while it
 * is pinned) and tier_progress_end_eviction, and a pin is refused during that.
 * An evictor of another process does not see these: a proxy that may not run the
 * evictor itself also pins in the fast tier (tier/pins.h). */

/* Pins id in namespace index (id NULL: the whole namespace). False, pinning
 * nothing, while an eviction of that document (of any, for NULL) is under way:
 * try again after the next notification. Each pin needs one unpin. */
bool tier_progress_pin(tier_progress_t *progress, size_t index, const bson_value_t *id);
void tier_progress_unpin(tier_progress_t *progress, size_t index, const bson_value_t *id);
/* Pins held now (the proxy frees a progress a reload replaced once none is left). */
size_t tier_progress_pin_count(tier_progress_t *progress);

/* False while the document or its namespace is pinned. */
bool tier_progress_begin_eviction(tier_progress_t *progress, size_t index, const bson_value_t *id);
/* Ends it and notifies (a pin may be waiting). */
void tier_progress_end_eviction(tier_progress_t *progress, size_t index);

/* thermoclineStatus: appends {feeder: {...}, evictor: {...}, warmer: {...}}
 * under key, and one namespace's worker fields into out. */
void tier_progress_append_workers(tier_progress_t *progress, const char *key, bson_t *out);
void tier_progress_append_namespace(tier_progress_t *progress, size_t index, bson_t *out);

#endif
