/* Slow operations in the log, as mongod logs them (--slowms): one line per command
 * slower than the threshold, with its shape, namespace, outcome and where its time
 * went: queued for a worker, reading the data files (the emulated disk's wait
 * apart), waiting for the journal, and what WiredTiger was doing then (a
 * checkpoint, a full or dirty cache). */
#ifndef TC_STORE_SLOW_OPS_H
#define TC_STORE_SLOW_OPS_H

#include "store/commands.h"
#include "store/current_op.h"
#include "store/slow_disk.h"

#define SLOW_OPS_DEFAULT_MS 100

/* Started when a worker takes the command; submitted_us is when it was queued. */
typedef struct slow_op_watch {
    int64_t submitted_us;
    int64_t started_us;
    slow_disk_thread_reads_t reads_before;
} slow_op_watch_t;

void slow_op_start(slow_op_watch_t *watch, int64_t submitted_us);

/* Logs the command when it took longer than the store's slowms: name may be NULL
 * for a command that did not parse; error is the failure, or NULL; reply (may be
 * NULL) gives what a successful command returned or wrote, as mongod's nreturned,
 * ninserted, nMatched, nModified and ndeleted. */
void slow_op_finish(const slow_op_watch_t *watch, store_t *store, storage_session_t *session, const char *name,
                    const char *database, const bson_t *command, const bson_t *reply, const bson_error_t *error,
                    uint64_t connection_id);

/* A durable write whose reply waits for the journal's next sync: mongod's
 * durationMillis and opLatencies include the wait for write concern
 * (waitForWriteConcernDurationMillis), and its currentOp lists the operation
 * until the reply, so the store's line and latency are written once the sync
 * has ended, not when the command does, and the command's currentOp entry stays
 * active until then. */
typedef struct slow_op_held slow_op_held_t;

/* In place of slow_op_finish, at the end of a command that ran (name and
 * database set), on the worker's thread; the other arguments as there. Keeps
 * what the line needs; the caller owns the result until slow_op_release.
 * latency_started_us is when the command's handler began (opLatencies' start).
 * operation (NULL: none) is the command's active currentOp entry, which the
 * held operation ends in slow_op_end_wait; until slow_op_adopt_command it shows
 * the caller's command document, which must live until then. */
slow_op_held_t *slow_op_hold(const slow_op_watch_t *watch, store_t *store, const char *name, const char *database,
                             const bson_t *reply, const bson_error_t *error, uint64_t connection_id,
                             int64_t latency_started_us, current_op_entry_t *operation);

/* Takes the command's document (bson_init'ed, left empty) without a copy, for
 * the line's shape and currentOp's `command` while the reply waits. */
void slow_op_adopt_command(slow_op_held_t *held, bson_t *command);

/* Once the sync has ended, before the reply goes out (so that a serverStatus
 * or currentOp read after it sees the command done): ends the wait and the
 * operation, and records the command in opLatencies with the wait. synced false: the sync failed, the write is not
 * acknowledged. Safe on NULL. */
void slow_op_end_wait(slow_op_held_t *held, bool synced);

/* Then, after the reply, on any thread (slow_op_end_wait first): logs the line when the whole took longer
 * than slowms, and frees held (safe on NULL). session (NULL: left out) reads
 * WiredTiger's state for the line. */
void slow_op_release(slow_op_held_t *held, storage_session_t *session);

#endif
