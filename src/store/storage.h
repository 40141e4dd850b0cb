/* The store's storage layer on WiredTiger: one table per collection (record id ->
 * BSON) and one per index (keystring -> record id and key values), a catalog of
 * both, transactions with the journal, and scans that can resume on any thread.
 * Everything above it (commands, cursors) speaks only this interface. */
#ifndef TC_STORE_STORAGE_H
#define TC_STORE_STORAGE_H

#include "common/error.h"
#include "query/index_keys.h"
#include "query/keystring.h"
#include "query/match.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct storage storage_t;
typedef struct storage_session storage_session_t;

typedef struct storage_options {
    const char *dbpath;
    uint64_t cache_bytes;   /* WiredTiger cache size */
    const char *compressor; /* "snappy", "zlib" or "none": default for new collections */
    uint64_t read_iops;     /* cap on data-file reads per second (slow_disk.h); 0: none */
    uint64_t sync_delay_ms; /* added to each sync (slow_disk.h); 0: none */
} storage_options_t;

typedef struct index_descriptor {
    char *name;          /* "_id_", "a_1_b_-1" */
    bson_t key_pattern;  /* {a: 1, b: -1} */
    index_keys_pattern_t *compiled_pattern; /* what generates its keys */
    bson_t spec;         /* {v: 2, key: ..., name: ..., unique: ...} as listIndexes shows */
    bool unique;
    bool sparse;
    bool partial;        /* has a partialFilterExpression */
    bool hidden;         /* maintained, never chosen by the planner */
    /* Which documents have entries (index_options_condition()): the partial
     * filter, or a sparse index's {$or: [{k: {$exists: true}}...]}; empty and a
     * NULL matcher when every document has. */
    bson_t condition;
    match_expression_t *condition_matcher;
    bool is_id;          /* the mandatory _id index */
    /* The spec's collation, whose sort keys its string keys are (a collated
     * unique index refuses "abc" beside "ABC" at strength 2); NULL: binary. */
    const collation_t *collation;
    atomic_bool multikey;
    char *table_uri;     /* "table:index-17" */
} index_descriptor_t;

typedef struct collection {
    char *ns;             /* "db.coll" */
    char *database;       /* "db" */
    const char *name;     /* points into ns, after the dot */
    char *table_uri;      /* "table:collection-12" */
    bson_t options;       /* create options, as listCollections shows */
    /* options.collation compiled: what a command without its own collation and
     * an index created without one use; NULL: binary. */
    const collation_t *default_collation;
    uint8_t uuid[16];
    index_descriptor_t **indexes; /* indexes[0] is _id_ */
    size_t index_count;
    atomic_int_fast64_t next_record_id;
} collection_t;

/* A view (mongod's system.views entry): a name for a pipeline over another
 * collection or view of the same database. Only the definition is stored. */
typedef struct view {
    char *ns;             /* "db.v" */
    char *database;       /* "db" */
    const char *name;     /* points into ns, after the dot */
    char *view_on;        /* the namespace it reads, "db.c" */
    bson_t pipeline;      /* an array */
} view_t;

/* --- lifecycle ------------------------------------------------------------ */

/* Opens (creating if needed) the database in options->dbpath and loads the
 * catalog. Free with storage_close(). */
storage_t *storage_open(const storage_options_t *options, bson_error_t *error) TC_MUST_CHECK;
void storage_close(storage_t *storage);

/* One per thread: a WiredTiger session is not thread-safe. */
storage_session_t *storage_session_new(storage_t *storage, bson_error_t *error) TC_MUST_CHECK;
void storage_session_destroy(storage_session_t *session);
storage_t *storage_session_storage(storage_session_t *session);

/* The kill flag (killOp, current_op.h) of the operation now running on
 * session; NULL: none. Set around each command by dispatch.c. */
void storage_session_set_interrupt(storage_session_t *session, const atomic_bool *flag);

/* The check point of long loops (a scan's next document): Interrupted 11601
 * "operation was interrupted" once the running operation was killed. */
bool storage_session_check_interrupt(const storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;

/* --- catalog ---------------------------------------------------------------
 * Readers and writers of data hold the catalog lock shared for the whole
 * operation; DDL (create, drop, index builds) holds it exclusively. Collection
 * and index pointers are valid only while the lock is held. */
void storage_lock_shared(storage_t *storage);
void storage_lock_exclusive(storage_t *storage);
void storage_unlock(storage_t *storage);
/* Takes the lock shared, or returns false when a DDL holds it. Readers
 * are preferred, so a thread holding it shared may take it shared again. */
bool storage_try_lock_shared(storage_t *storage) TC_MUST_CHECK;

/* The collection named ns, or NULL. */
collection_t *storage_find_collection(storage_t *storage, const char *ns);

/* Creates ns with options (may be NULL). Requires the exclusive lock.
 * Errors: NamespaceExists 48, InvalidNamespace 73. */
bool storage_create_collection(storage_session_t *session, const char *ns, const bson_t *options,
                               collection_t **out_collection, bson_error_t *error) TC_MUST_CHECK;

/* Returns ns, creating it with default options if it does not exist (implicit
 * creation by insert, update with upsert, createIndexes). Called with the lock
 * shared; may drop and retake it, so re-read anything taken before. */
bool storage_obtain_collection(storage_session_t *session, const char *ns,
                               collection_t **out_collection, bson_error_t *error) TC_MUST_CHECK;

/* Requires the exclusive lock. Under --replSet the oplog records {drop: coll}
 * in the transaction that removes the catalog row. */
bool storage_drop_collection(storage_session_t *session, const char *ns, bson_error_t *error) TC_MUST_CHECK;

/* The last step of renameCollection, which cmd_rename.c does by copying: drops
 * from, and the oplog records one {renameCollection: from, to} entry instead of
 * a drop. Requires the exclusive lock. */
bool storage_finish_rename(storage_session_t *session, const char *from, const char *to,
                           bson_error_t *error) TC_MUST_CHECK;

/* Renames from to to in the catalog, keeping its tables (no copy), with one
 * {renameCollection: from, to} oplog entry: what $out does with its temporary
 * collection. Requires the exclusive lock. Errors: NamespaceNotFound 26,
 * NamespaceExists 48 (drop the target first), InvalidNamespace 73. */
bool storage_rename_collection(storage_session_t *session, const char *from, const char *to,
                               bson_error_t *error) TC_MUST_CHECK;

/* Builds an index over the existing documents. Requires the exclusive lock.
 * spec is the createIndexes entry ({key, name, unique, sparse,
 * partialFilterExpression, hidden, ...}).
 * Errors: DuplicateKey 11000 on a unique violation, IndexOptionsConflict 85,
 * IndexKeySpecsConflict 86, CannotCreateIndex 67 (and index_options_validate()'s).
 * Sets *out_created false when an identical index already exists. */
bool storage_create_index(storage_session_t *session, collection_t *collection, const bson_t *spec,
                          bool *out_created, bson_error_t *error) TC_MUST_CHECK;

/* Requires the exclusive lock. Errors: IndexNotFound 27, InvalidOptions 72 for _id_. */
bool storage_drop_index(storage_session_t *session, collection_t *collection, const char *name,
                        bson_error_t *error) TC_MUST_CHECK;

index_descriptor_t *storage_find_index(collection_t *collection, const char *name);

/* collMod: collection's options become options (what listCollections shows)
 * and, when index is not NULL, its spec becomes index_spec (hidden changed),
 * in one transaction with the oplog entry object
 * ({collMod: coll, ...}) and object2 ({collectionOptions_old,
 * indexOptions_old}). Nothing changes on failure. Requires the exclusive lock. */
bool storage_modify_collection(storage_session_t *session, collection_t *collection, const bson_t *options,
                               index_descriptor_t *index, const bson_t *index_spec, const bson_t *object,
                               const bson_t *object2, bson_error_t *error) TC_MUST_CHECK;

/* --- views ------------------------------------------------------------------
 * Kept in the catalog beside the collections, under the same lock; a name is
 * either a collection or a view. */

/* The view named ns, or NULL. */
view_t *storage_find_view(storage_t *storage, const char *ns);

/* Creates the view ns over view_on (a namespace of the same database) with
 * pipeline (an array, already validated by the caller), with its {create: v,
 * viewOn, pipeline} oplog entry. Requires the exclusive lock.
 * Errors: NamespaceExists 48, InvalidNamespace 73. */
bool storage_create_view(storage_session_t *session, const char *ns, const char *view_on, const bson_t *pipeline,
                         bson_error_t *error) TC_MUST_CHECK;

/* collMod of a view: its definition becomes view_on and pipeline, with the
 * oplog entry object ({collMod: v, viewOn, pipeline}). Requires the exclusive lock. */
bool storage_modify_view(storage_session_t *session, view_t *view, const char *view_on, const bson_t *pipeline,
                         const bson_t *object, bson_error_t *error) TC_MUST_CHECK;

/* Drops the view ns ({drop: v} in the oplog). Requires the exclusive lock.
 * Errors: NamespaceNotFound 26. */
bool storage_drop_view(storage_session_t *session, const char *ns, bson_error_t *error) TC_MUST_CHECK;

/* Calls visit for each view, in ns order. Requires the lock. */
typedef void (*storage_visit_view_fn)(view_t *view, void *context);
void storage_visit_views(storage_t *storage, storage_visit_view_fn visit, void *context);

/* Whether document has entries in index (its sparse or partial condition). */
bool storage_index_covers_document(const index_descriptor_t *index, const bson_t *document);

/* Calls visit for each collection, in ns order. Requires the lock. */
typedef void (*storage_visit_collection_fn)(collection_t *collection, void *context);
void storage_visit_collections(storage_t *storage, storage_visit_collection_fn visit, void *context);

/* Drops the tables a drop found busy (another session had them open) and left
 * for later; the store's janitor calls it every second. */
void storage_retry_pending_drops(storage_t *storage);

/* On-disk bytes of a table (its file size), for collStats and dbStats. */
int64_t storage_table_size(storage_session_t *session, const char *table_uri);

/* --- transactions ----------------------------------------------------------
 * Each write runs in one transaction. A write-write conflict between two
 * transactions fails with WriteConflict 112: the caller retries the operation. */
bool storage_begin(storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;
/* durable: wait until the journal holds the transaction (j: true). */
bool storage_commit(storage_session_t *session, bool durable, bson_error_t *error) TC_MUST_CHECK;
void storage_rollback(storage_session_t *session);

/* Waits until every transaction committed so far is in the journal on disk:
 * one sync for a whole batch of writes that asked for j: true. */
bool storage_sync_journal(storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;

/* Calls done(argument, synced, session) on the journal thread once a journal
 * sync that began after this call has ended: every transaction committed before
 * the call is then on disk, unless synced is false (the sync failed). session is
 * the journal thread's, for reading statistics in done (NULL: none). The
 * asynchronous storage_sync_journal(), for a reply that waits for the journal
 * without holding a worker. Once storage_close() has begun, done is called at
 * once with synced false and no session. */
typedef void (*storage_journal_done_fn)(void *argument, bool synced, storage_session_t *session);
void storage_after_journal_sync(storage_t *storage, storage_journal_done_fn done, void *argument);
bool storage_in_transaction(storage_session_t *session);

/* --- multi-document transactions --------------------------------------------
 * A session can hold one transaction open across commands (store/transactions.c).
 * While it is held, the storage_begin(), storage_commit() and storage_rollback()
 * calls of the commands run in it do nothing, so all their reads share one
 * snapshot and all their writes commit or roll back together; the oplog collects
 * their operations for one applyOps entry (oplog_log_transaction()). A held
 * transaction ends only with storage_commit_held() or storage_rollback_held(). */
bool storage_hold_transaction(storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;
bool storage_commit_held(storage_session_t *session, bool durable, bson_error_t *error) TC_MUST_CHECK;
void storage_rollback_held(storage_session_t *session);
bool storage_holds_transaction(storage_session_t *session);

/* Called by the catalog, with the lock exclusive, before it drops the collection
 * ns or builds or drops one of its indexes: the transactions layer aborts the
 * held transactions that used ns, whose snapshot or uncommitted writes the change
 * would leave behind. */
typedef void (*storage_ddl_hook_fn)(void *context, const char *ns);
void storage_set_ddl_hook(storage_t *storage, storage_ddl_hook_fn hook, void *context);

/* --- records -------------------------------------------------------------- */

/* Inserts document (which must already have _id first) and its index keys.
 * Errors: DuplicateKey 11000 with mongod's message; then
 * storage_append_duplicate_key() adds keyPattern and keyValue to a reply. */
bool storage_insert_record(storage_session_t *session, collection_t *collection,
                           const bson_t *document, int64_t *out_record_id, bson_error_t *error) TC_MUST_CHECK;

/* Replaces the document stored at record_id (old_document is its current
 * content), maintaining every index. */
bool storage_update_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                           const bson_t *old_document, const bson_t *new_document,
                           bson_error_t *error) TC_MUST_CHECK;

bool storage_delete_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                           const bson_t *old_document, bson_error_t *error) TC_MUST_CHECK;

/* Reads the document at record_id into out_document (initialized here; the
 * caller destroys it). *out_found false when absent. */
/* Appends keyPattern and keyValue of the session's last duplicate-key error, as
 * mongod adds them to a writeError or an error reply. */
void storage_append_duplicate_key(storage_session_t *session, bson_t *out);

bool storage_read_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                         bson_t *out_document, bool *out_found, bson_error_t *error) TC_MUST_CHECK;

/* --- scans ---------------------------------------------------------------
 * A scan walks a collection in record-id order or an index in key order between
 * bounds. It remembers where it stopped (scan_position), so a cursor can
 * resume it later, in another transaction or on another thread. */
typedef enum scan_kind { SCAN_COLLECTION, SCAN_INDEX } scan_kind_t;

typedef struct scan_bounds {
    keystring_t lower;      /* empty: unbounded */
    keystring_t upper;      /* empty: unbounded */
    bool lower_inclusive;
    bool upper_inclusive;
    /* lower == upper, inclusive, is a whole key of a unique index: at most one
     * entry, found by an exact search. A search for the nearest key would walk
     * every deleted entry between a missing key and the next live one. */
    bool whole_unique_key;
} scan_bounds_t;

typedef struct scan_position {
    bool started;
    int64_t record_id;   /* collection scans: last record id returned */
    keystring_t key;     /* index scans: last full index key returned */
} scan_position_t;

typedef struct scan scan_t;

/* Opens a scan over a collection (index == NULL) or an index, in ascending or
 * descending order, resuming after position (which it then updates). bounds may
 * be NULL for an index scan over the whole index. The scan keeps pointers to
 * bounds and position: they must outlive it. Close before ending the
 * transaction. */
scan_t *scan_open(storage_session_t *session, collection_t *collection, index_descriptor_t *index,
                  const scan_bounds_t *bounds, bool descending, scan_position_t *position,
                  bson_error_t *error) TC_MUST_CHECK;

/* Next entry. For collection scans *out_document is the record (a view valid
 * until the next call). For index scans *out_key_values is the index key's values
 * {"": v1, "": v2} (a view), and *out_document is NULL. *out_end true when done. */
bool scan_next(scan_t *scan, int64_t *out_record_id, bson_t *out_document, bson_t *out_key_values,
               bool *out_end, bson_error_t *error) TC_MUST_CHECK;

/* Counters for explain's executionStats. */
uint64_t scan_keys_examined(const scan_t *scan);
void scan_close(scan_t *scan);

void scan_bounds_init(scan_bounds_t *bounds);
void scan_bounds_cleanup(scan_bounds_t *bounds);
void scan_position_init(scan_position_t *position);
void scan_position_cleanup(scan_position_t *position);

/* --- statistics ----------------------------------------------------------- */

/* What WiredTiger is doing that may slow a command down, read when one was slow:
 * a checkpoint under way, and how full and how dirty the cache is (past 95% full
 * or 20% dirty, application threads help evict and wait). */
typedef struct storage_pressure {
    bool checkpoint_running;
    double cache_used_percent;
    double cache_dirty_percent;
} storage_pressure_t;

/* False (out zeroed) when the statistics cannot be read. */
bool storage_read_pressure(storage_session_t *session, storage_pressure_t *out);

/* Appends WiredTiger's connection statistics to out as mongod's
 * serverStatus().wiredTiger shows them: one sub-document per section (the part
 * of the description before the colon), e.g. cache: {"bytes read into cache":
 * N, ...}, each section once. */
bool storage_append_cache_statistics(storage_session_t *session, bson_t *out, bson_error_t *error) TC_MUST_CHECK;

/* Writes a checkpoint: every table's current content reaches its data file
 * (mongod's fsync command). */
bool storage_checkpoint(storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;

#endif
