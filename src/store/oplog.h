/* The oplog of `thermocline store --replSet`: one WiredTiger table (key: cluster
 * time, value: the entry's BSON) written in the same transaction as the change it
 * records, so an acknowledged write and its entry are one atomic unit. Cluster
 * times come from one process-wide clock; change streams (change_stream.c) read
 * the entries back, never past the point below which every transaction has ended
 * and the journal holds it (a single-node replica set's majority commit point).
 * Old entries are trimmed in the background to stay under --oplog-size. */
#ifndef TC_STORE_OPLOG_H
#define TC_STORE_OPLOG_H

#include "store/storage.h"

typedef struct oplog oplog_t;

/* A cluster time as a BSON Timestamp holds it: seconds << 32 | increment. */
#define OPLOG_TIME(seconds, increment) (((uint64_t)(seconds) << 32) | (uint32_t)(increment))
#define OPLOG_TIME_SECONDS(time) ((uint32_t)((time) >> 32))
#define OPLOG_TIME_INCREMENT(time) ((uint32_t)(time))

/* mongod's default --oplogSize: 5% of the free space of dbpath's file system,
 * at least 990 MB and at most 50 GB. */
uint64_t oplog_default_size_bytes(const char *dbpath);

/* --- lifecycle ------------------------------------------------------------ */

/* Opens (creating) the oplog table of storage, restarts the clock after its last
 * entry, writes a "new primary" no-op as mongod does when it steps up, and starts
 * the background thread that trims the oldest entries past max_bytes and makes
 * unjournaled writes durable. From then on every write path of storage records
 * its changes. Free with oplog_close() before storage_close(). */
oplog_t *oplog_open(storage_t *storage, uint64_t max_bytes, bson_error_t *error) TC_MUST_CHECK;
void oplog_close(oplog_t *oplog);

/* The oplog of storage, or NULL (a standalone store keeps none). */
oplog_t *oplog_for(storage_t *storage);

/* --- recording -----------------------------------------------------------
 * Each call appends one entry in the session's open transaction, after the
 * change it records (so two writes of one document get their times in commit
 * order), and does nothing when storage has no oplog. command is the write
 * command (lsid and txnNumber are taken from it) or NULL. A collection whose
 * options hold changeStreamPreAndPostImages: {enabled: true} (create or
 * collMod) also keeps, in the entry, the images change streams ask for with
 * fullDocument(BeforeChange). */
bool oplog_log_insert(storage_session_t *session, const collection_t *collection, const bson_t *document,
                      const bson_t *command, bson_error_t *error) TC_MUST_CHECK;

/* description: {updatedFields, removedFields, truncatedArrays} of an operator
 * update (update_apply's out_description), NULL for a replacement. */
bool oplog_log_update(storage_session_t *session, const collection_t *collection, const bson_t *before,
                      const bson_t *after, const bson_t *description, const bson_t *command,
                      bson_error_t *error) TC_MUST_CHECK;

bool oplog_log_delete(storage_session_t *session, const collection_t *collection, const bson_t *before,
                      const bson_t *command, bson_error_t *error) TC_MUST_CHECK;

/* A command entry on "<database>.$cmd", mongod's shapes: o {create: coll, ...,
 * idIndex}, {drop: coll}, {renameCollection: from, to: ...}, {dropDatabase: 1},
 * {createIndexes: coll, v, key, name, ...}, {dropIndexes: coll, index: name}
 * (o2: the index's spec), {collMod: coll, ...} (o2: {collectionOptions_old,
 * indexOptions_old?}). uuid (16 bytes) and object2 may be NULL. In the session's
 * transaction if one is open, else in its own. */
bool oplog_log_command(storage_session_t *session, const char *database, const uint8_t *uuid,
                       const bson_t *object, const bson_t *object2, bson_error_t *error) TC_MUST_CHECK;

/* A held (multi-document) transaction (storage_hold_transaction()): the
 * oplog_log_* calls above collect its operations; this writes them, just before
 * it commits, as one entry {op: "c", ns: "admin.$cmd", o: {applyOps: [...]},
 * lsid, txnNumber}, in the same transaction, so the commit and its entry are one
 * atomic unit and change streams see every operation at one cluster time. A
 * transaction that wrote nothing writes no entry. Errors: TransactionTooLarge
 * 257, from the write that took the operations past 16 MB. */
bool oplog_log_transaction(storage_session_t *session, const bson_t *lsid, int64_t txn_number,
                           bson_error_t *error) TC_MUST_CHECK;

/* --- times ---------------------------------------------------------------- */

/* Every transaction that took a time at or below this one has ended. */
uint64_t oplog_committed_time(oplog_t *oplog);

/* Committed and in the journal: what change streams may read (majority). */
uint64_t oplog_majority_time(oplog_t *oplog);

/* The clock's last value ($clusterTime). */
uint64_t oplog_cluster_time(oplog_t *oplog);

/* Entries at or below this time may have been trimmed (0: none). */
uint64_t oplog_trimmed_time(oplog_t *oplog);

/* The times of the oldest and the newest entry in the table (0 when it is empty):
 * the oplog window, as serverStatus's oplog section shows it. */
bool oplog_read_bounds(storage_session_t *session, uint64_t *out_first, uint64_t *out_last,
                       bson_error_t *error) TC_MUST_CHECK;

/* Waits until the journal holds every committed transaction, as storage_sync_journal
 * does, and then moves the majority time up to what was committed before. */
bool oplog_sync_journal(storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;

/* The asynchronous oplog_sync_journal(), without holding the calling thread:
 * once a journal sync begun after this call has ended, on the journal thread,
 * moves the majority time up to what was committed at the call and calls
 * done(argument, synced, session) (storage_after_journal_sync). */
void oplog_after_journal_sync(storage_t *storage, storage_journal_done_fn done, void *argument);

/* A command's operationTime: resets what the session wrote, then (after the
 * command) the time of its last write or, for a read, the committed time. */
void oplog_session_begin_command(storage_session_t *session);
uint64_t oplog_session_operation_time(storage_session_t *session);

/* The command that committed a transaction on its own session (from) answers on
 * the worker's (session): that write's time becomes the command's operationTime. */
void oplog_session_adopt_write_time(storage_session_t *session, const storage_session_t *from);

/* --- reading --------------------------------------------------------------- */

typedef struct oplog_scan oplog_scan_t;

/* Reads the entries with time >= from in time order, inside the session's open
 * transaction. *out_trimmed_time is the trimmed time as seen once the read's
 * snapshot exists: an entry above it is in this read if it ever committed below
 * the caller's visible limit. Close before the transaction ends. */
oplog_scan_t *oplog_scan_open(storage_session_t *session, uint64_t from, uint64_t *out_trimmed_time,
                              bson_error_t *error) TC_MUST_CHECK;

/* Next entry: *out_entry is a view valid until the next call. */
bool oplog_scan_next(oplog_scan_t *scan, uint64_t *out_time, bson_t *out_entry, bool *out_end,
                     bson_error_t *error) TC_MUST_CHECK;
void oplog_scan_close(oplog_scan_t *scan);

#endif
