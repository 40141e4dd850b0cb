/* Slow operations in the log, as mongod logs them (--slowms): one line per command
 * slower than the threshold, with its shape, namespace, outcome and where its time
 * went: queued for a worker, reading the data files (the emulated disk's wait
 * apart), and what WiredTiger was doing then (a checkpoint, a full or dirty cache). */
#ifndef TC_STORE_SLOW_OPS_H
#define TC_STORE_SLOW_OPS_H

#include "store/commands.h"
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

#endif
