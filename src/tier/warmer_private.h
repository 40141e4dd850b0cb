/* Private to src/tier/warmer*.c: the warmer's state per namespace, which
 * warmer.c loads, saves and publishes and warmer_batch.c advances one batch at a
 * time. */
#ifndef TC_TIER_WARMER_PRIVATE_H
#define TC_TIER_WARMER_PRIVATE_H

#include "tier/index_sync.h"

/* Where the pass stands: every window document newer than time is copied, and
 * of those at time, every one with an _id above id (all of them without an id). */
typedef struct warm_cursor {
    bool set;
    int64_t time_ms;
    bool has_id;
    bson_value_t id; /* owned when has_id */
} warm_cursor_t;

typedef struct warm_namespace {
    bool loaded;
    bool complete;
    warm_cursor_t cursor;
    int64_t copied;
    int64_t total_estimate; /* -1: unknown */
    int64_t started_ms;
    int64_t completed_ms;
    int64_t next_due_ms;
    int64_t last_log_ms;
    int64_t copied_at_last_log;
    double rate; /* documents copied per second over the last progress interval; 0: not measured yet */
    int32_t batch_size;
    uint64_t last_copy_time; /* the fast tier's cluster time of the last copy: published with coverage */
    uint64_t batch_time;     /* T0 of the last batch checked and saved: a mark written after it is left from
                                an attempt that did not finish (persisted, so a crash is covered too) */
    int64_t last_read_ms;  /* the last batch's archive read, for the progress log */
    int64_t last_pause_ms; /* the pause the pace asked after it */
    index_sync_state_t index_sync; /* coverage is published valid only once it has synced */
} warm_namespace_t;

typedef struct warmer {
    tier_context_t *context;
    mongoc_client_t *fast;
    mongoc_client_t *archive;
    warm_namespace_t *namespaces;
    tier_pacer_t pacer;
    /* Test hook: THERMOCLINE_TEST_KILL_AFTER_COPY=N makes the process SIGKILL itself
     * once the Nth batch's copies landed, before their marks are finished: the crash
     * a retried batch must survive (tests/integration/test_tier_faults.py). */
    long kill_after_batches;
} warmer_t;

typedef enum warm_batch_result {
    WARM_BATCH_COPIED,  /* work done; go on after the pacer's pause */
    WARM_BATCH_BLOCKED, /* nothing possible now (feeder behind, tier down): wait a period */
    WARM_BATCH_DONE,    /* the pass is complete */
} warm_batch_result_t;

/* Empties cursor (it holds no position). */
void warm_cursor_clear(warm_cursor_t *cursor);
/* Sets cursor to (time_ms, id); id NULL for all of time_ms; the id is copied. */
void warm_cursor_set(warm_cursor_t *cursor, int64_t time_ms, const bson_value_t *id);

/* A view (out, not to destroy) of the array at a dotted path of reply; false when
 * there is none. */
bool warmer_view_array(const bson_t *reply, const char *path, bson_t *out);
/* Publishes namespace index's pass to the proxy (tier/progress.h); notify wakes
 * the waiters. */
void warmer_publish(warmer_t *warmer, size_t index, bool notify);
/* Saves namespace index's pass (position, counts, batchTime) in thermocline.warmer. */
bool warmer_save_state(warmer_t *warmer, size_t index, bson_error_t *error);

/* One batch of namespace index (warmer_batch.c); *out_pause_ms gets the pause the
 * pace asks before the next one when the result is WARM_BATCH_COPIED. */
warm_batch_result_t warmer_batch(warmer_t *warmer, size_t index, int64_t *out_pause_ms);

#endif
