/* The workers' writes in the fast tier's history, told from the applications':
 * what a thermocline.workerWrites mark says about one insert or delete event. Pure
 * (libbson only): the feeder classifies its stream with it, and the proxy its
 * clients' change streams, so both read the marks by one rule.
 *
 * A mark is one document per (ns, _id, op), _id {ns, id, op}:
 *   op "evict" (the evictor's delete), "warm" (the warmer's copy), "fault" (the
 *   proxy's fault-in copy of an archive document);
 *   state "pending" {since, copy (warm, fault: the copy's worker_writes_digest)}
 *         written before the write, so a reader never sees a copy unmarked; an
 *         eviction's is not its delete's: a delete seen under it is a client's;
 *         "committed" {since} (evict): written in one transaction with the
 *         evictor's delete, so the two land together or not at all; "done" follows
 *         at once, waited for; a committed mark left so (the evictor crashed)
 *         says the first delete of the document after since was the evictor's:
 *         the feeder takes it and writes the mark's range, which other readers
 *         wait for;
 *         "done" {from, to}: the write happened in (from, to]; {from, to, digest}
 *         (a copy whose outcome no copier recorded, settled by the feeder a minute
 *         on: feeder_clean_marks): only the insert in (from, to] of exactly the
 *         document whose worker_writes_digest is digest, as the pending mark said,
 *         now for as long as done marks stay;
 *   history: the last WORKER_WRITES_HISTORY done ranges [{from, to[, digest]}], pushed with
 *         each "done": the next copy or eviction of the same document overwrites
 *         state, from and to, and a change stream resumed from an older token still
 *         finds the earlier range here. So a pending mark whose write never happened
 *         is released (tier_release_marks): back to "done" when it has a history,
 *         removed only when it has none.
 * Done marks stay WORKER_WRITES_RETENTION_SECONDS of cluster time past the feeder's
 * applied time (the feeder removes them after), so a client's stream that lags or
 * resumes up to that far behind classifies the same way. */
#ifndef TC_TIER_WORKER_WRITES_H
#define TC_TIER_WORKER_WRITES_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#define WORKER_WRITES_HISTORY 8
#define WORKER_WRITES_RETENTION_SECONDS 600
/* How long a reader waits for a pending copy's outcome before deciding by its
 * digest, or for a committed eviction's range (a worker that crashed never writes
 * either). */
#define WORKER_WRITES_PENDING_WAIT_MS 2000

typedef enum worker_writes_verdict {
    WORKER_WRITES_APPLICATION, /* an application's write: replayed, shown to clients */
    WORKER_WRITES_WORKER,      /* the worker's own write: never replayed nor shown */
    WORKER_WRITES_PENDING,     /* the mark's outcome is not written yet: look again shortly */
} worker_writes_verdict_t;

/* One insert or delete event of the fast tier's change stream. */
typedef struct worker_writes_event {
    bool is_delete;              /* else an insert */
    uint64_t time;               /* its clusterTime */
    const bson_t *full_document; /* an insert's document (NULL: not in the event) */
    int64_t waited_ms;           /* how long the reader has waited on pending marks */
    /* The reader writes a committed eviction's range once it takes its delete (the
     * feeder, which reads each document's deletes in order); any other reader
     * waits for that range. */
    bool writes_ranges;
} worker_writes_event_t;

/* What mark (the event's mark, of op "evict" for a delete, "warm" or "fault" for
 * an insert; NULL when there is none) says about event. For WORKER,
 * *out_range_to (may be NULL) is the end of the done range holding the event
 * (UINT64_MAX for a committed mark): an eviction stands for one delete, the first
 * in its range, which a reader that sees a document's deletes in order (the
 * feeder) tells apart by (mark, range). */
worker_writes_verdict_t worker_writes_classify(const bson_t *mark, const worker_writes_event_t *event,
                                               uint64_t *out_range_to);

/* Appends {ns, id, op} under key: a mark's _id. */
void worker_writes_mark_key(bson_t *out, const char *key, const char *ns, const bson_value_t *id, const char *op);

/* Appends to an update's $push the done range {from, to[, digest]} (digest: NULL
 * for none) into history, keeping the last WORKER_WRITES_HISTORY ({history:
 * {$each: [{from, to}], $slice: -N}}). */
void worker_writes_append_history_push(bson_t *push, uint64_t from, uint64_t to, const int64_t *digest);
/* Appends under key (an update statement's "u") the update that records a write
 * done in (from, to]: {$set: {state: "done", from, to}, $unset: {digest}, $push:
 * {history}}. */
void worker_writes_append_done_update(bson_t *statement, const char *key, uint64_t from, uint64_t to);
/* The same for a copy whose insert in (from, to], if any, is known only by its
 * digest, the attempt's since and copy dropped: {$set: {state: "done", from, to,
 * digest}, $unset: {since, copy}, $push: {history}}. */
void worker_writes_append_settled_copy_update(bson_t *statement, const char *key, uint64_t from, uint64_t to,
                                              int64_t digest);

/* A 64-bit digest (FNV-1a) of a document's exact bytes: tells a copy from a
 * client's insert of the same _id when a crash hid the copy's outcome. */
int64_t worker_writes_digest(const bson_t *document);

#endif
