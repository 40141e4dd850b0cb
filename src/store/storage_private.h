/* Internals shared by storage.c (connection, sessions, transactions), catalog.c
 * (collections and indexes) and records.c (documents, index entries, scans). */
#ifndef TC_STORE_STORAGE_PRIVATE_H
#define TC_STORE_STORAGE_PRIVATE_H

#include "store/storage.h"

#include <wiredtiger.h>

#define CATALOG_TABLE_URI "table:_catalog"

struct storage {
    WT_CONNECTION *connection;
    char *default_compressor;
    pthread_rwlock_t catalog_lock;
    collection_t **collections; /* sorted by ns */
    size_t collection_count;
    size_t collection_capacity;
    view_t **views;             /* sorted by ns (catalog_views.c) */
    size_t view_count;
    char **pending_drops;       /* table URIs a busy drop left for later */
    size_t pending_drop_count;
    pthread_mutex_t pending_drops_mutex;
    pthread_t journal_thread;
    bool journal_started;
    WT_SESSION *journal_session;  /* the journal thread's */
    pthread_mutex_t journal_mutex;
    pthread_cond_t journal_wakeup;
    bool journal_stop;
    struct journal_waiter *journal_waiters; /* storage_after_journal_sync(), oldest first */
    struct journal_waiter *journal_waiters_tail;
    /* Group commit (storage_sync_journal): one sync at a time, covering every
     * waiter that had arrived when it began. Counts of waiters, under sync_mutex. */
    pthread_mutex_t sync_mutex;
    pthread_cond_t sync_finished;
    uint64_t sync_waiters_arrived;
    uint64_t sync_waiters_covered; /* by the syncs finished so far */
    uint64_t sync_waiters_synced;  /* by those that succeeded */
    bool sync_running;
    int sync_failure;              /* the last failed sync's WiredTiger code */
    struct oplog *oplog;        /* oplog.c, attached by oplog_open(); NULL: none */
    storage_ddl_hook_fn ddl_hook; /* storage_set_ddl_hook(); NULL: none */
    void *ddl_hook_context;
};

/* Cluster times one transaction may take from the oplog's clock (oplog.c): a
 * write records one entry, a DDL at most two. */
#define STORAGE_OPLOG_TIMES_PER_TRANSACTION 4

struct storage_session {
    storage_t *storage;
    WT_SESSION *wt;
    bool in_transaction;
    const atomic_bool *interrupt; /* the running operation's kill flag, or NULL */
    bson_t duplicate_key_pattern; /* the index and key of this session's last E11000 */
    bson_t duplicate_key_value;
    /* The oplog's (oplog.c): the times this transaction took, published or
     * released when it ends, and the last one this session committed. */
    uint64_t oplog_times[STORAGE_OPLOG_TIMES_PER_TRANSACTION];
    size_t oplog_time_count;
    uint64_t oplog_last_committed;
    /* A held (multi-document) transaction: the operations its writes recorded,
     * an array written as one applyOps entry when it commits (oplog.c). */
    bool held;
    bson_t held_operations;
    uint32_t held_operation_count;
};

/* Runs the DDL hook, if any, for ns (catalog.c). */
void storage_run_ddl_hook(storage_t *storage, const char *ns);

/* Fills error from a WiredTiger return code; always returns false. */
bool storage_error_from_wt(bson_error_t *error, int wt_code, const char *context);

/* Opens a cursor on uri in this session. config may be NULL. */
bool storage_open_cursor(storage_session_t *session, const char *uri, const char *config,
                         WT_CURSOR **out_cursor, bson_error_t *error) TC_MUST_CHECK;

/* Writes a collection's catalog entry (in the caller's transaction, if any). */
bool catalog_write_entry(storage_session_t *session, collection_t *collection, bson_error_t *error) TC_MUST_CHECK;

/* Loads every catalog entry at open. */
bool catalog_load(storage_t *storage, storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;

void collection_destroy(collection_t *collection);

/* mongod's rules for a namespace's database and collection names (catalog.c).
 * Errors: InvalidNamespace 73. */
bool catalog_validate_namespace(const char *ns, bson_error_t *error) TC_MUST_CHECK;

/* Runs step (in the caller's transaction if one is open, else in its own) and
 * records the command entry object (object2 NULL-able) in the oplog in the same
 * transaction (catalog.c). */
typedef bool (*catalog_step_fn)(storage_session_t *session, void *context, bson_error_t *error);
bool catalog_change_with_oplog(storage_session_t *session, catalog_step_fn step, void *step_context,
                               const char *database, const uint8_t *uuid, const bson_t *object,
                               const bson_t *object2, bson_error_t *error) TC_MUST_CHECK;

/* Writes (inserting or replacing) the catalog row of ns (catalog.c). */
bool catalog_put_row(storage_session_t *session, const char *ns, const bson_t *entry, bson_error_t *error) TC_MUST_CHECK;

/* Removes the catalog row of ns (catalog.c). */
bool catalog_remove_entry(storage_session_t *session, const char *ns, bson_error_t *error) TC_MUST_CHECK;

/* A view's catalog row, read at open (catalog_views.c); entry is the row. */
bool catalog_load_view(storage_t *storage, const char *ns, const bson_t *entry, bson_error_t *error) TC_MUST_CHECK;

/* Whether a catalog row is a view's. */
bool catalog_entry_is_view(const bson_t *entry);

/* Frees every view (storage_close). */
void catalog_destroy_views(storage_t *storage);

/* Adds the index entries of document to every index of collection / removes them. */
bool records_insert_index_entries(storage_session_t *session, collection_t *collection,
                                  index_descriptor_t *index, const bson_t *document,
                                  int64_t record_id, bson_error_t *error) TC_MUST_CHECK;

/* Called by storage_commit() and storage_rollback() when a transaction that took
 * oplog times ends: commits publish them, rollbacks release them (oplog.c). */
void oplog_transaction_ended(storage_session_t *session, bool committed);

/* Drops a WiredTiger table now, or later if a cursor still holds it. */
void storage_drop_table(storage_session_t *session, const char *table_uri);

#endif
