/* The WiredTiger connection: open and close, per-thread sessions, transactions
 * and the journal flusher that bounds how long a default-write-concern write can
 * stay only in memory (mongod's journal commit interval, 100 ms). */
#include "store/storage_private.h"
#include "store/slow_disk.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define JOURNAL_COMMIT_INTERVAL_MS 100
#define WIREDTIGER_EXTENSION_DIRECTORY "/usr/lib/x86_64-linux-gnu"

bool storage_error_from_wt(bson_error_t *error, int wt_code, const char *context)
{
    if (wt_code == WT_ROLLBACK) {
        return tc_error_set(error, TC_ERR_WRITE_CONFLICT,
                            "WriteConflict error: this operation conflicted with another operation. "
                            "Please retry your operation or multi-document transaction.");
    }
    return tc_error_set(error, TC_ERR_INTERNAL, "storage engine error in %s: %s", context,
                        wiredtiger_strerror(wt_code));
}

bool storage_open_cursor(storage_session_t *session, const char *uri, const char *config,
                         WT_CURSOR **out_cursor, bson_error_t *error)
{
    int wt_code = session->wt->open_cursor(session->wt, uri, NULL, config, out_cursor);
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, uri);
    }
    return true;
}

/* A reply waiting for the journal (storage_after_journal_sync). */
typedef struct journal_waiter {
    struct journal_waiter *next;
    storage_journal_done_fn done;
    void *argument;
} journal_waiter_t;

/* The journal thread: syncs the journal for the waiters, all those that arrived
 * before each sync, as soon as the previous sync ends (group commit); with none,
 * every JOURNAL_COMMIT_INTERVAL_MS, which bounds how long a write without j stays
 * only in memory. Nothing else: every durable write's reply waits for it. */
static void *journal_flusher_main(void *argument)
{
    storage_t *storage = argument;
    storage_session_t flusher_session = {.storage = storage, .wt = storage->journal_session};
    bool stopping = false;
    while (!stopping) {
        pthread_mutex_lock(&storage->journal_mutex);
        if (storage->journal_waiters == NULL && !storage->journal_stop) {
            struct timespec deadline = clock_deadline_after_ms(CLOCK_REALTIME, JOURNAL_COMMIT_INTERVAL_MS);
            pthread_cond_timedwait(&storage->journal_wakeup, &storage->journal_mutex, &deadline);
        }
        journal_waiter_t *waiters = storage->journal_waiters;
        storage->journal_waiters = NULL;
        storage->journal_waiters_tail = NULL;
        stopping = storage->journal_stop;
        pthread_mutex_unlock(&storage->journal_mutex);

        bson_error_t error;
        bool synced = storage_sync_journal(&flusher_session, &error);
        if (!synced) {
            TC_LOG(TC_LOG_ERROR, "STORAGE", 0, "journal sync failed: %s", error.message);
        }
        while (waiters != NULL) {
            journal_waiter_t *next = waiters->next;
            waiters->done(waiters->argument, synced, &flusher_session);
            bson_free(waiters);
            waiters = next;
        }
    }
    return NULL;
}

void storage_after_journal_sync(storage_t *storage, storage_journal_done_fn done, void *argument)
{
    pthread_mutex_lock(&storage->journal_mutex);
    if (storage->journal_stop) {
        /* Too late: no sync will come. The caller's reply is not acknowledged. */
        pthread_mutex_unlock(&storage->journal_mutex);
        done(argument, false, NULL);
        return;
    }
    journal_waiter_t *waiter = bson_malloc(sizeof *waiter);
    *waiter = (journal_waiter_t){.done = done, .argument = argument};
    if (storage->journal_waiters_tail != NULL) {
        storage->journal_waiters_tail->next = waiter;
    } else {
        storage->journal_waiters = waiter;
    }
    storage->journal_waiters_tail = waiter;
    pthread_cond_signal(&storage->journal_wakeup);
    pthread_mutex_unlock(&storage->journal_mutex);
}

/* WiredTiger's own messages go through the log, so they take its format (one json
 * object per line under --log-format json) instead of WiredTiger's stderr lines. */
static int on_wiredtiger_error(WT_EVENT_HANDLER *handler, WT_SESSION *session, int error, const char *message)
{
    (void)handler;
    (void)session;
    TC_LOG_ATTRS(TC_LOG_ERROR, "STORAGE", 0, "WiredTiger error: {message}", TC_ATTR_STR("message", message),
                 TC_ATTR_INT("error", error));
    return 0;
}

static int on_wiredtiger_message(WT_EVENT_HANDLER *handler, WT_SESSION *session, const char *message)
{
    (void)handler;
    (void)session;
    TC_LOG_ATTRS(TC_LOG_INFO, "STORAGE", 0, "WiredTiger message: {message}", TC_ATTR_STR("message", message));
    return 0;
}

static WT_EVENT_HANDLER wiredtiger_events = {
    .handle_error = on_wiredtiger_error,
    .handle_message = on_wiredtiger_message,
};

storage_t *storage_open(const storage_options_t *options, bson_error_t *error)
{
    storage_t *storage = BSON_ALIGNED_ALLOC0(storage_t);
    storage_session_t *session = NULL;
    char config[1024];
    bool ok = false;

    if (mkdir(options->dbpath, 0755) != 0 && errno != EEXIST) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot create --dbpath %s: %s", options->dbpath,
                     strerror(errno));
        goto done;
    }
    storage->default_compressor = bson_strdup(options->compressor ? options->compressor : "snappy");
    /* Readers first (glibc's default, said here): a reader may nest its shared
     * lock (dispatch_point_read_on_loop) without waiting for a queued DDL. */
    pthread_rwlockattr_t catalog_lock_kind;
    pthread_rwlockattr_init(&catalog_lock_kind);
    pthread_rwlockattr_setkind_np(&catalog_lock_kind, PTHREAD_RWLOCK_PREFER_READER_NP);
    pthread_rwlock_init(&storage->catalog_lock, &catalog_lock_kind);
    pthread_rwlockattr_destroy(&catalog_lock_kind);
    pthread_mutex_init(&storage->pending_drops_mutex, NULL);
    pthread_mutex_init(&storage->journal_mutex, NULL);
    pthread_cond_init(&storage->journal_wakeup, NULL);
    pthread_mutex_init(&storage->sync_mutex, NULL);
    pthread_cond_init(&storage->sync_finished, NULL);

    /* Under --read-iops every block must come through pread(), where the
     * emulated volume sits (slow_disk.c), never through a memory mapping. */
    slow_disk_set_cap(options->read_iops);
    slow_disk_set_sync_delay(options->sync_delay_ms);
    snprintf(config, sizeof config,
             "create,cache_size=%llu,session_max=1000,"
             /* Small journal files, not preallocated: a store is cheap to start many
              * times (tests, the lab), and a file switch every 16MB costs little. */
             "log=(enabled=true,file_max=16MB,prealloc=false),"
             "checkpoint=(wait=60),statistics=(fast),%s"
             "extensions=[%s/libwiredtiger_snappy.so,%s/libwiredtiger_zlib.so]",
             (unsigned long long)options->cache_bytes, options->read_iops > 0 ? "mmap=false," : "",
             WIREDTIGER_EXTENSION_DIRECTORY, WIREDTIGER_EXTENSION_DIRECTORY);
    int wt_code = wiredtiger_open(options->dbpath, &wiredtiger_events, config, &storage->connection);
    if (wt_code != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot open the database in %s: %s", options->dbpath,
                     wiredtiger_strerror(wt_code));
        storage->connection = NULL;
        goto done;
    }
    session = storage_session_new(storage, error);
    TC_CHECK(session != NULL);
    wt_code = session->wt->create(session->wt, CATALOG_TABLE_URI, "key_format=S,value_format=u");
    if (wt_code != 0) {
        storage_error_from_wt(error, wt_code, "creating the catalog");
        goto done;
    }
    TC_CHECK(catalog_load(storage, session, error));
    wt_code = storage->connection->open_session(storage->connection, NULL, NULL, &storage->journal_session);
    if (wt_code != 0) {
        storage_error_from_wt(error, wt_code, "opening the journal thread's session");
        goto done;
    }
    if (pthread_create(&storage->journal_thread, NULL, journal_flusher_main, storage) != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start the journal flusher thread");
        goto done;
    }
    storage->journal_started = true;
    ok = true;
done:
    storage_session_destroy(session);
    if (!ok) {
        storage_close(storage);
        return NULL;
    }
    return storage;
}

void storage_close(storage_t *storage)
{
    if (storage == NULL) {
        return;
    }
    if (storage->journal_started) {
        pthread_mutex_lock(&storage->journal_mutex);
        storage->journal_stop = true;
        pthread_cond_signal(&storage->journal_wakeup);
        pthread_mutex_unlock(&storage->journal_mutex);
        pthread_join(storage->journal_thread, NULL);
    }
    if (storage->connection != NULL) {
        storage->connection->close(storage->connection, NULL);
    }
    for (size_t i = 0; i < storage->collection_count; i++) {
        collection_destroy(storage->collections[i]);
    }
    for (size_t i = 0; i < storage->pending_drop_count; i++) {
        bson_free(storage->pending_drops[i]);
    }
    bson_free(storage->pending_drops);
    bson_free(storage->collections);
    catalog_destroy_views(storage);
    bson_free(storage->default_compressor);
    pthread_rwlock_destroy(&storage->catalog_lock);
    pthread_mutex_destroy(&storage->pending_drops_mutex);
    pthread_mutex_destroy(&storage->journal_mutex);
    pthread_cond_destroy(&storage->journal_wakeup);
    pthread_mutex_destroy(&storage->sync_mutex);
    pthread_cond_destroy(&storage->sync_finished);
    bson_free(storage);
}

storage_session_t *storage_session_new(storage_t *storage, bson_error_t *error)
{
    storage_session_t *session = BSON_ALIGNED_ALLOC0(storage_session_t);
    session->storage = storage;
    bson_init(&session->duplicate_key_pattern);
    bson_init(&session->duplicate_key_value);
    bson_init(&session->held_operations);
    int wt_code = storage->connection->open_session(storage->connection, NULL, "isolation=snapshot",
                                                    &session->wt);
    if (wt_code != 0) {
        storage_error_from_wt(error, wt_code, "opening a session");
        bson_destroy(&session->duplicate_key_pattern);
        bson_destroy(&session->duplicate_key_value);
        bson_destroy(&session->held_operations);
        bson_free(session);
        return NULL;
    }
    return session;
}

void storage_session_destroy(storage_session_t *session)
{
    if (session == NULL) {
        return;
    }
    if (session->held) {
        storage_rollback_held(session);
    } else if (session->in_transaction) {
        storage_rollback(session);
    }
    session->wt->close(session->wt, NULL);
    bson_destroy(&session->duplicate_key_pattern);
    bson_destroy(&session->duplicate_key_value);
    bson_destroy(&session->held_operations);
    bson_free(session);
}

storage_t *storage_session_storage(storage_session_t *session)
{
    return session->storage;
}

void storage_lock_shared(storage_t *storage)
{
    pthread_rwlock_rdlock(&storage->catalog_lock);
}

bool storage_try_lock_shared(storage_t *storage)
{
    return pthread_rwlock_tryrdlock(&storage->catalog_lock) == 0;
}

void storage_lock_exclusive(storage_t *storage)
{
    pthread_rwlock_wrlock(&storage->catalog_lock);
}

void storage_unlock(storage_t *storage)
{
    pthread_rwlock_unlock(&storage->catalog_lock);
}

void storage_session_set_interrupt(storage_session_t *session, const atomic_bool *flag)
{
    session->interrupt = flag;
}

bool storage_session_check_interrupt(const storage_session_t *session, bson_error_t *error)
{
    if (session->interrupt != NULL && atomic_load_explicit(session->interrupt, memory_order_relaxed)) {
        return tc_error_set(error, TC_ERR_INTERRUPTED, "operation was interrupted");
    }
    return true;
}

bool storage_begin(storage_session_t *session, bson_error_t *error)
{
    if (session->held) {
        return true; /* the held transaction is the command's transaction */
    }
    int wt_code = session->wt->begin_transaction(session->wt, NULL);
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "begin transaction");
    }
    session->in_transaction = true;
    return true;
}

bool storage_commit(storage_session_t *session, bool durable, bson_error_t *error)
{
    if (session->held) {
        return true; /* commits with the whole transaction */
    }
    session->in_transaction = false;
    int wt_code = session->wt->commit_transaction(session->wt, durable ? "sync=on" : NULL);
    if (session->oplog_time_count > 0) {
        oplog_transaction_ended(session, wt_code == 0);
    }
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "commit");
    }
    return true;
}

void storage_rollback(storage_session_t *session)
{
    if (session->in_transaction && !session->held) {
        session->in_transaction = false;
        session->wt->rollback_transaction(session->wt, NULL);
        if (session->oplog_time_count > 0) {
            oplog_transaction_ended(session, false);
        }
    }
}

/* Group commit, as mongod's journal flusher: a waiter arrives after its commit,
 * and the first sync to begin after that covers it (a log_flush syncs the whole
 * log written so far, whichever session asks). While one sync runs, every waiter
 * arriving queues; the next sync covers them all. Without this, concurrent
 * callers each paid a sync of their own in turn while the log kept growing (on
 * a slow disk, one sync per durable write). */
bool storage_sync_journal(storage_session_t *session, bson_error_t *error)
{
    storage_t *storage = session->storage;
    pthread_mutex_lock(&storage->sync_mutex);
    uint64_t ticket = ++storage->sync_waiters_arrived;
    while (storage->sync_waiters_covered < ticket) {
        if (storage->sync_running) {
            pthread_cond_wait(&storage->sync_finished, &storage->sync_mutex);
            continue;
        }
        uint64_t covering = storage->sync_waiters_arrived;
        storage->sync_running = true;
        pthread_mutex_unlock(&storage->sync_mutex);
        int flushed = session->wt->log_flush(session->wt, "sync=on");
        pthread_mutex_lock(&storage->sync_mutex);
        storage->sync_running = false;
        storage->sync_waiters_covered = covering;
        if (flushed == 0) {
            storage->sync_waiters_synced = covering;
        } else {
            storage->sync_failure = flushed;
        }
        pthread_cond_broadcast(&storage->sync_finished);
    }
    /* A later sync may have failed after the one that covered this waiter. */
    bool synced = storage->sync_waiters_synced >= ticket;
    int wt_code = storage->sync_failure;
    pthread_mutex_unlock(&storage->sync_mutex);
    if (!synced) {
        return storage_error_from_wt(error, wt_code, "journal sync");
    }
    return true;
}

bool storage_in_transaction(storage_session_t *session)
{
    return session->in_transaction;
}

static void forget_held_operations(storage_session_t *session)
{
    bson_reinit(&session->held_operations);
    session->held_operation_count = 0;
}

bool storage_hold_transaction(storage_session_t *session, bson_error_t *error)
{
    if (session->in_transaction) {
        return tc_error_set(error, TC_ERR_INTERNAL, "a session can hold only one transaction");
    }
    if (!storage_begin(session, error)) {
        return false;
    }
    session->held = true;
    session->oplog_last_committed = 0;
    forget_held_operations(session);
    return true;
}

bool storage_commit_held(storage_session_t *session, bool durable, bson_error_t *error)
{
    session->held = false;
    forget_held_operations(session);
    return storage_commit(session, durable, error);
}

void storage_rollback_held(storage_session_t *session)
{
    session->held = false;
    forget_held_operations(session);
    storage_rollback(session);
}

bool storage_holds_transaction(storage_session_t *session)
{
    return session->held;
}

void storage_set_ddl_hook(storage_t *storage, storage_ddl_hook_fn hook, void *context)
{
    storage->ddl_hook = hook;
    storage->ddl_hook_context = context;
}

void storage_run_ddl_hook(storage_t *storage, const char *ns)
{
    if (storage->ddl_hook != NULL) {
        storage->ddl_hook(storage->ddl_hook_context, ns);
    }
}

void storage_drop_table(storage_session_t *session, const char *table_uri)
{
    storage_t *storage = session->storage;
    pthread_mutex_lock(&storage->pending_drops_mutex);
    if (table_uri != NULL) {
        storage->pending_drops = bson_realloc(storage->pending_drops,
                                              (storage->pending_drop_count + 1) * sizeof(char *));
        storage->pending_drops[storage->pending_drop_count++] = bson_strdup(table_uri);
    }
    /* A drop fails with EBUSY while any session has the table open; what stays
     * busy is retried later (storage_retry_pending_drops). */
    size_t kept = 0;
    for (size_t i = 0; i < storage->pending_drop_count; i++) {
        int wt_code = session->wt->drop(session->wt, storage->pending_drops[i], "force=true");
        if (wt_code == EBUSY) {
            storage->pending_drops[kept++] = storage->pending_drops[i];
        } else {
            bson_free(storage->pending_drops[i]);
        }
    }
    storage->pending_drop_count = kept;
    pthread_mutex_unlock(&storage->pending_drops_mutex);
}

void storage_retry_pending_drops(storage_t *storage)
{
    pthread_mutex_lock(&storage->pending_drops_mutex);
    size_t pending = storage->pending_drop_count;
    pthread_mutex_unlock(&storage->pending_drops_mutex);
    if (pending == 0) {
        return;
    }
    bson_error_t error;
    storage_session_t *session = storage_session_new(storage, &error);
    if (session == NULL) {
        TC_LOG(TC_LOG_WARNING, "STORAGE", 0, "cannot retry the pending drops: %s", error.message);
        return;
    }
    storage_drop_table(session, NULL);
    storage_session_destroy(session);
}

int64_t storage_table_size(storage_session_t *session, const char *table_uri)
{
    /* The table's one file is named after the table: table:x -> x.wt. */
    char statistics_uri[256];
    WT_CURSOR *cursor = NULL;
    int64_t size = 0;
    snprintf(statistics_uri, sizeof statistics_uri, "statistics:%s", table_uri);
    if (session->wt->open_cursor(session->wt, statistics_uri, NULL, "statistics=(size)", &cursor) != 0) {
        return 0;
    }
    cursor->set_key(cursor, WT_STAT_DSRC_BLOCK_SIZE);
    if (cursor->search(cursor) == 0) {
        const char *description, *printable;
        uint64_t value;
        if (cursor->get_value(cursor, &description, &printable, &value) == 0) {
            size = (int64_t)value;
        }
    }
    cursor->close(cursor);
    return size;
}

/* One connection statistic, 0 when it cannot be read. */
static int64_t connection_statistic(WT_CURSOR *cursor, int key)
{
    const char *description, *printable;
    uint64_t value;
    cursor->set_key(cursor, key);
    if (cursor->search(cursor) != 0 || cursor->get_value(cursor, &description, &printable, &value) != 0) {
        return 0;
    }
    return (int64_t)value;
}

bool storage_read_pressure(storage_session_t *session, storage_pressure_t *out)
{
    WT_CURSOR *cursor = NULL;
    memset(out, 0, sizeof *out);
    if (session->wt->open_cursor(session->wt, "statistics:", NULL, "statistics=(fast)", &cursor) != 0) {
        return false;
    }
    out->checkpoint_running = connection_statistic(cursor, WT_STAT_CONN_TXN_CHECKPOINT_RUNNING) != 0;
    int64_t maximum = connection_statistic(cursor, WT_STAT_CONN_CACHE_BYTES_MAX);
    if (maximum > 0) {
        out->cache_used_percent = (double)connection_statistic(cursor, WT_STAT_CONN_CACHE_BYTES_INUSE) * 100 / maximum;
        out->cache_dirty_percent = (double)connection_statistic(cursor, WT_STAT_CONN_CACHE_BYTES_DIRTY) * 100 / maximum;
    }
    cursor->close(cursor);
    return true;
}

#define STATISTICS_MAX_SECTIONS 64

typedef struct statistics_section {
    char name[64];
    bson_t fields;
} statistics_section_t;

bool storage_append_cache_statistics(storage_session_t *session, bson_t *out, bson_error_t *error)
{
    /* WiredTiger lists its statistics sorted by description today, but the
     * sections are gathered first so none can appear twice in the reply even if
     * a later version interleaves them. */
    statistics_section_t *sections = bson_malloc0(STATISTICS_MAX_SECTIONS * sizeof *sections);
    size_t section_count = 0;
    WT_CURSOR *cursor = NULL;
    bool ok = false;
    int wt_code;

    TC_CHECK(storage_open_cursor(session, "statistics:", NULL, &cursor, error));
    while ((wt_code = cursor->next(cursor)) == 0) {
        const char *description, *printable;
        uint64_t value;
        if (cursor->get_value(cursor, &description, &printable, &value) != 0) {
            continue;
        }
        const char *colon = strchr(description, ':');
        if (colon == NULL || (size_t)(colon - description) >= sizeof sections[0].name) {
            continue;
        }
        size_t name_length = (size_t)(colon - description);
        statistics_section_t *section = NULL;
        for (size_t i = 0; i < section_count && section == NULL; i++) {
            if (strncmp(sections[i].name, description, name_length) == 0 && sections[i].name[name_length] == '\0') {
                section = &sections[i];
            }
        }
        if (section == NULL) {
            if (section_count == STATISTICS_MAX_SECTIONS) {
                continue;
            }
            section = &sections[section_count++];
            memcpy(section->name, description, name_length);
            section->name[name_length] = '\0';
            bson_init(&section->fields);
        }
        const char *field = colon + 1;
        while (*field == ' ') {
            field++;
        }
        bson_iter_t existing;
        if (!bson_iter_init_find(&existing, &section->fields, field)) {
            bson_append_int64(&section->fields, field, -1, (int64_t)value);
        }
    }
    if (wt_code != WT_NOTFOUND) {
        storage_error_from_wt(error, wt_code, "reading statistics");
        goto done;
    }
    for (size_t i = 0; i < section_count; i++) {
        bson_append_document(out, sections[i].name, -1, &sections[i].fields);
    }
    ok = true;
done:
    if (cursor != NULL) {
        cursor->close(cursor);
    }
    for (size_t i = 0; i < section_count; i++) {
        bson_destroy(&sections[i].fields);
    }
    bson_free(sections);
    return ok;
}

bool storage_checkpoint(storage_session_t *session, bson_error_t *error)
{
    int wt_code = session->wt->checkpoint(session->wt, NULL);
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "checkpoint");
    }
    return true;
}
