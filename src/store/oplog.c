/* The oplog table, its clock, and the bookkeeping that tells readers how far
 * they may read.
 *
 * Table:  key = cluster time (uint64, seconds << 32 | increment), value = the
 *         entry {ts, t, v, op, ns, ui, o, o2, lsid, txnNumber, wall}, mongod's
 *         oplog.rs shape, with two differences kept private to change streams:
 *         an operator update stores o: {$v: 2, updateDescription: {...}} (what a
 *         change stream reports) instead of mongod's diff, and the images of a
 *         collection with changeStreamPreAndPostImages sit in preImage/postImage
 *         instead of config.system.preimages.
 *
 * Holes: a transaction takes its time just before it commits, but transactions
 * commit in any order, so time 7 may be visible while time 6 is still open. The
 * times taken and not yet ended are kept (ascending) in in_flight; everything
 * at or below committed_time has ended, and readers never read past it (past
 * majority_time, in fact: committed and synced to the journal). */
#include "store/oplog.h"
#include "store/storage_private.h"
#include "common/clock.h"
#include "common/log.h"

#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#define OPLOG_TABLE_URI "table:oplog"
#define OPLOG_TABLE_CONFIG "key_format=Q,value_format=u,block_compressor=snappy"
#define OPLOG_TERM 1
#define OPLOG_VERSION 2
/* How often the background thread syncs the journal for unjournaled writes
 * (mongod's journal commit interval) and checks the size. */
#define OPLOG_TICK_MS 100
#define OPLOG_TRIM_BATCH 1000
#define OPLOG_SIZE_SCAN_BATCH 10000

#define MEGABYTE (1024ull * 1024)

struct oplog {
    storage_t *storage;
    uint64_t max_bytes;

    pthread_mutex_t clock_mutex; /* guards last_time and in_flight */
    uint64_t last_time;
    uint64_t *in_flight;         /* times of open transactions, ascending */
    size_t in_flight_count;
    size_t in_flight_capacity;

    _Atomic uint64_t committed_time;
    _Atomic uint64_t majority_time;
    _Atomic uint64_t trimmed_time;
    _Atomic int64_t size_bytes;
    uint64_t opened_last_time; /* entries up to here existed at open: the thread sizes them */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t thread_mutex;
    pthread_cond_t thread_wakeup;
    bool stop;
};

struct oplog_scan {
    WT_CURSOR *cursor;
    bool positioned; /* the cursor sits on the next entry to return */
    bool exhausted;
};

/* --- helpers -------------------------------------------------------------- */

static void atomic_raise(_Atomic uint64_t *value, uint64_t candidate)
{
    uint64_t current = atomic_load(value);
    while (candidate > current && !atomic_compare_exchange_weak(value, &current, candidate)) {
    }
}

uint64_t oplog_default_size_bytes(const char *dbpath)
{
    struct statvfs file_system;
    uint64_t size = 990 * MEGABYTE;
    if (statvfs(dbpath, &file_system) == 0) {
        uint64_t five_percent = (uint64_t)file_system.f_bavail * file_system.f_frsize / 20;
        if (five_percent > size) {
            size = five_percent;
        }
    }
    if (size > 50 * 1024 * MEGABYTE) {
        size = 50 * 1024 * MEGABYTE;
    }
    return size;
}

oplog_t *oplog_for(storage_t *storage)
{
    return storage->oplog;
}

/* --- the clock and the in-flight times ------------------------------------- */

/* Strictly increasing; seconds follow the wall clock, the increment counts
 * within a second (and keeps counting if the wall clock steps back). Called
 * with clock_mutex held. */
static uint64_t clock_next(oplog_t *oplog)
{
    uint64_t seconds = (uint64_t)(clock_wall_ms() / 1000);
    uint64_t next = seconds > OPLOG_TIME_SECONDS(oplog->last_time) ? OPLOG_TIME(seconds, 1) : oplog->last_time + 1;
    oplog->last_time = next;
    return next;
}

static void publish_committed_time(oplog_t *oplog)
{
    uint64_t committed = oplog->in_flight_count > 0 ? oplog->in_flight[0] - 1 : oplog->last_time;
    atomic_raise(&oplog->committed_time, committed);
}

static bool take_time(oplog_t *oplog, storage_session_t *session, uint64_t *out_time, bson_error_t *error)
{
    if (session->oplog_time_count == STORAGE_OPLOG_TIMES_PER_TRANSACTION) {
        return tc_error_set(error, TC_ERR_INTERNAL, "one transaction took more than %d oplog entries",
                            STORAGE_OPLOG_TIMES_PER_TRANSACTION);
    }
    pthread_mutex_lock(&oplog->clock_mutex);
    if (oplog->in_flight_count == oplog->in_flight_capacity) {
        oplog->in_flight_capacity = oplog->in_flight_capacity ? oplog->in_flight_capacity * 2 : 64;
        oplog->in_flight = bson_realloc(oplog->in_flight, oplog->in_flight_capacity * sizeof(uint64_t));
    }
    uint64_t time = clock_next(oplog);
    oplog->in_flight[oplog->in_flight_count++] = time; /* the largest so far: stays ascending */
    pthread_mutex_unlock(&oplog->clock_mutex);
    session->oplog_times[session->oplog_time_count++] = time;
    *out_time = time;
    return true;
}

void oplog_transaction_ended(storage_session_t *session, bool committed)
{
    oplog_t *oplog = session->storage->oplog;
    if (oplog != NULL) {
        pthread_mutex_lock(&oplog->clock_mutex);
        for (size_t i = 0; i < session->oplog_time_count; i++) {
            for (size_t slot = 0; slot < oplog->in_flight_count; slot++) {
                if (oplog->in_flight[slot] == session->oplog_times[i]) {
                    memmove(&oplog->in_flight[slot], &oplog->in_flight[slot + 1],
                            (oplog->in_flight_count - slot - 1) * sizeof(uint64_t));
                    oplog->in_flight_count--;
                    break;
                }
            }
        }
        publish_committed_time(oplog);
        pthread_mutex_unlock(&oplog->clock_mutex);
    }
    if (committed) {
        for (size_t i = 0; i < session->oplog_time_count; i++) {
            if (session->oplog_times[i] > session->oplog_last_committed) {
                session->oplog_last_committed = session->oplog_times[i];
            }
        }
    }
    session->oplog_time_count = 0;
}

uint64_t oplog_committed_time(oplog_t *oplog)
{
    return atomic_load(&oplog->committed_time);
}

uint64_t oplog_majority_time(oplog_t *oplog)
{
    return atomic_load(&oplog->majority_time);
}

uint64_t oplog_trimmed_time(oplog_t *oplog)
{
    return atomic_load(&oplog->trimmed_time);
}

uint64_t oplog_cluster_time(oplog_t *oplog)
{
    pthread_mutex_lock(&oplog->clock_mutex);
    uint64_t time = oplog->last_time;
    pthread_mutex_unlock(&oplog->clock_mutex);
    return time;
}

/* The majority time a journal sync that begins now will have made true: what
 * had committed before it began is in the journal once it ends. */
static uint64_t majority_time_after_sync(oplog_t *oplog)
{
    return oplog != NULL ? oplog_committed_time(oplog) : 0;
}

static void raise_majority_time(oplog_t *oplog, uint64_t synced)
{
    if (oplog != NULL) {
        atomic_raise(&oplog->majority_time, synced);
    }
}

bool oplog_sync_journal(storage_session_t *session, bson_error_t *error)
{
    oplog_t *oplog = session->storage->oplog;
    uint64_t synced = majority_time_after_sync(oplog);
    if (!storage_sync_journal(session, error)) {
        return false;
    }
    raise_majority_time(oplog, synced);
    return true;
}

/* One oplog_after_journal_sync() call, until its sync has ended. */
typedef struct journal_wait {
    oplog_t *oplog; /* NULL: no oplog */
    uint64_t synced;
    storage_journal_done_fn done;
    void *argument;
} journal_wait_t;

static void on_journal_synced(void *argument, bool synced, storage_session_t *session)
{
    journal_wait_t *wait = argument;
    if (synced) {
        raise_majority_time(wait->oplog, wait->synced);
    }
    wait->done(wait->argument, synced, session);
    bson_free(wait);
}

void oplog_after_journal_sync(storage_t *storage, storage_journal_done_fn done, void *argument)
{
    journal_wait_t *wait = bson_malloc(sizeof *wait);
    *wait = (journal_wait_t){.oplog = storage->oplog,
                             .synced = majority_time_after_sync(storage->oplog),
                             .done = done,
                             .argument = argument};
    storage_after_journal_sync(storage, on_journal_synced, wait);
}

void oplog_session_begin_command(storage_session_t *session)
{
    session->oplog_last_committed = 0;
}

uint64_t oplog_session_operation_time(storage_session_t *session)
{
    oplog_t *oplog = session->storage->oplog;
    if (oplog == NULL) {
        return 0;
    }
    uint64_t committed = oplog_committed_time(oplog);
    return session->oplog_last_committed > committed ? session->oplog_last_committed : committed;
}

/* --- entries ---------------------------------------------------------------- */

typedef struct entry_parts {
    const char *op; /* "i", "u", "d", "c" or "n" */
    const char *ns;
    const uint8_t *uuid;
    const bson_t *object;
    const bson_t *object2;
    const bson_t *pre_image;
    const bson_t *post_image;
    const bson_t *command;
} entry_parts_t;

/* lsid and txnNumber as mongod records them for retryable writes (a
 * transaction's are on its applyOps entry, oplog_log_transaction()). */
static void append_session_fields(bson_t *entry, const bson_t *command)
{
    bson_iter_t iter;
    if (command == NULL) {
        return;
    }
    if (bson_iter_init_find(&iter, command, "lsid") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_append_iter(entry, "lsid", 4, &iter);
    }
    if (bson_iter_init_find(&iter, command, "txnNumber") && BSON_ITER_HOLDS_NUMBER(&iter)) {
        BSON_APPEND_INT64(entry, "txnNumber", bson_iter_as_int64(&iter));
    }
}

/* op, ns, ui, o, o2 and the images: what an entry and an operation inside a
 * transaction's applyOps have in common. */
static void append_operation_fields(bson_t *out, const entry_parts_t *parts)
{
    BSON_APPEND_UTF8(out, "op", parts->op);
    BSON_APPEND_UTF8(out, "ns", parts->ns);
    if (parts->uuid != NULL) {
        BSON_APPEND_BINARY(out, "ui", BSON_SUBTYPE_UUID, parts->uuid, 16);
    }
    BSON_APPEND_DOCUMENT(out, "o", parts->object);
    if (parts->object2 != NULL) {
        BSON_APPEND_DOCUMENT(out, "o2", parts->object2);
    }
    if (parts->pre_image != NULL) {
        BSON_APPEND_DOCUMENT(out, "preImage", parts->pre_image);
    }
    if (parts->post_image != NULL) {
        BSON_APPEND_DOCUMENT(out, "postImage", parts->post_image);
    }
}

/* Writes one entry in the session's open transaction, at a time taken now. body
 * adds the fields after ts, t and v. */
static bool write_entry(storage_session_t *session, void (*body)(bson_t *entry, const void *context),
                        const void *body_context, bson_error_t *error)
{
    oplog_t *oplog = session->storage->oplog;
    WT_CURSOR *cursor = NULL;
    bson_t entry = BSON_INITIALIZER;
    uint64_t time = 0;
    bool ok = false;

    if (!session->in_transaction) {
        return tc_error_set(error, TC_ERR_INTERNAL, "an oplog entry must be written inside a transaction");
    }
    TC_CHECK(storage_open_cursor(session, OPLOG_TABLE_URI, "overwrite=false", &cursor, error));
    TC_CHECK(take_time(oplog, session, &time, error));
    BSON_APPEND_TIMESTAMP(&entry, "ts", OPLOG_TIME_SECONDS(time), OPLOG_TIME_INCREMENT(time));
    BSON_APPEND_INT64(&entry, "t", OPLOG_TERM);
    BSON_APPEND_INT32(&entry, "v", OPLOG_VERSION);
    body(&entry, body_context);
    BSON_APPEND_DATE_TIME(&entry, "wall", clock_wall_ms());

    WT_ITEM value = {.data = bson_get_data(&entry), .size = entry.len};
    cursor->set_key(cursor, time);
    cursor->set_value(cursor, &value);
    int wt_code = cursor->insert(cursor);
    if (wt_code != 0) {
        storage_error_from_wt(error, wt_code, "writing the oplog");
        goto done;
    }
    atomic_fetch_add(&oplog->size_bytes, (int64_t)entry.len);
    ok = true;
done:
    if (cursor != NULL) {
        cursor->close(cursor);
    }
    bson_destroy(&entry);
    return ok;
}

static void append_single_body(bson_t *entry, const void *context)
{
    const entry_parts_t *parts = context;
    append_operation_fields(entry, parts);
    append_session_fields(entry, parts->command);
}

/* Larger than mongod's limit on one applyOps entry (16 MB plus 16 KB of room)
 * is refused, as mongod 4.0 refused it. */
#define OPLOG_TRANSACTION_MAX_BYTES (16 * 1024 * 1024 + 16 * 1024)

/* Inside a held transaction, adds the operation to the ones its commit writes. */
static bool collect_operation(storage_session_t *session, const entry_parts_t *parts, bson_error_t *error)
{
    char key[16];
    const char *key_string;
    bson_t operation;
    bson_uint32_to_string(session->held_operation_count, &key_string, key, sizeof key);
    bson_append_document_begin(&session->held_operations, key_string, -1, &operation);
    append_operation_fields(&operation, parts);
    bson_append_document_end(&session->held_operations, &operation);
    session->held_operation_count++;
    if (session->held_operations.len > OPLOG_TRANSACTION_MAX_BYTES) {
        return tc_error_set(error, TC_ERR_TRANSACTION_TOO_LARGE,
                            "Total size of all transaction operations must be less than %d. Actual size is %u",
                            OPLOG_TRANSACTION_MAX_BYTES, session->held_operations.len);
    }
    return true;
}

static bool append_entry(storage_session_t *session, const entry_parts_t *parts, bson_error_t *error)
{
    if (session->storage->oplog == NULL) {
        return true;
    }
    if (session->held) {
        return collect_operation(session, parts, error);
    }
    return write_entry(session, append_single_body, parts, error);
}

typedef struct transaction_body {
    const bson_t *operations;
    const bson_t *lsid;
    int64_t txn_number;
} transaction_body_t;

/* mongod's shape: {op: "c", ns: "admin.$cmd", o: {applyOps: [...]}, lsid,
 * txnNumber, prevOpTime} (one entry: no chain of partial ones to follow). */
static void append_transaction_body(bson_t *entry, const void *context)
{
    const transaction_body_t *body = context;
    bson_t object, previous;
    BSON_APPEND_UTF8(entry, "op", "c");
    BSON_APPEND_UTF8(entry, "ns", "admin.$cmd");
    BSON_APPEND_DOCUMENT_BEGIN(entry, "o", &object);
    BSON_APPEND_ARRAY(&object, "applyOps", body->operations);
    bson_append_document_end(entry, &object);
    BSON_APPEND_DOCUMENT(entry, "lsid", body->lsid);
    BSON_APPEND_INT64(entry, "txnNumber", body->txn_number);
    BSON_APPEND_DOCUMENT_BEGIN(entry, "prevOpTime", &previous);
    BSON_APPEND_TIMESTAMP(&previous, "ts", 0, 0);
    BSON_APPEND_INT64(&previous, "t", -1);
    bson_append_document_end(entry, &previous);
}

bool oplog_log_transaction(storage_session_t *session, const bson_t *lsid, int64_t txn_number, bson_error_t *error)
{
    if (session->storage->oplog == NULL || !session->held) {
        return tc_error_set(error, TC_ERR_INTERNAL, "no held transaction to record");
    }
    if (session->held_operation_count == 0) {
        return true; /* a read-only transaction leaves no entry, as on mongod */
    }
    transaction_body_t body = {.operations = &session->held_operations, .lsid = lsid, .txn_number = txn_number};
    return write_entry(session, append_transaction_body, &body, error);
}

void oplog_session_adopt_write_time(storage_session_t *session, const storage_session_t *from)
{
    if (from->oplog_last_committed > session->oplog_last_committed) {
        session->oplog_last_committed = from->oplog_last_committed;
    }
}

static bool images_enabled(const collection_t *collection)
{
    bson_iter_t iter, enabled;
    return bson_iter_init(&iter, &collection->options) &&
           bson_iter_find_descendant(&iter, "changeStreamPreAndPostImages.enabled", &enabled) &&
           bson_iter_as_bool(&enabled);
}

/* {_id: <the document's _id>}: the documentKey of an unsharded collection. */
static void build_document_key(const bson_t *document, bson_t *out)
{
    bson_iter_t iter;
    bson_init(out);
    if (bson_iter_init_find(&iter, document, "_id")) {
        bson_append_iter(out, "_id", 3, &iter);
    }
}

bool oplog_log_insert(storage_session_t *session, const collection_t *collection, const bson_t *document,
                      const bson_t *command, bson_error_t *error)
{
    if (session->storage->oplog == NULL) {
        return true;
    }
    bson_t key;
    build_document_key(document, &key);
    entry_parts_t parts = {.op = "i", .ns = collection->ns, .uuid = collection->uuid, .object = document,
                           .object2 = &key, .command = command};
    bool ok = append_entry(session, &parts, error);
    bson_destroy(&key);
    return ok;
}

bool oplog_log_update(storage_session_t *session, const collection_t *collection, const bson_t *before,
                      const bson_t *after, const bson_t *description, const bson_t *command, bson_error_t *error)
{
    if (session->storage->oplog == NULL) {
        return true;
    }
    bson_t key, update = BSON_INITIALIZER;
    bool images = images_enabled(collection);
    build_document_key(after, &key);
    if (description != NULL) {
        BSON_APPEND_INT32(&update, "$v", 2);
        BSON_APPEND_DOCUMENT(&update, "updateDescription", description);
    }
    entry_parts_t parts = {
        .op = "u",
        .ns = collection->ns,
        .uuid = collection->uuid,
        .object = description != NULL ? &update : after,
        .object2 = &key,
        .pre_image = images ? before : NULL,
        .post_image = images && description != NULL ? after : NULL,
        .command = command,
    };
    bool ok = append_entry(session, &parts, error);
    bson_destroy(&key);
    bson_destroy(&update);
    return ok;
}

bool oplog_log_delete(storage_session_t *session, const collection_t *collection, const bson_t *before,
                      const bson_t *command, bson_error_t *error)
{
    if (session->storage->oplog == NULL) {
        return true;
    }
    bson_t key;
    build_document_key(before, &key);
    entry_parts_t parts = {.op = "d", .ns = collection->ns, .uuid = collection->uuid, .object = &key,
                           .pre_image = images_enabled(collection) ? before : NULL, .command = command};
    bool ok = append_entry(session, &parts, error);
    bson_destroy(&key);
    return ok;
}

bool oplog_log_command(storage_session_t *session, const char *database, const uint8_t *uuid,
                       const bson_t *object, const bson_t *object2, bson_error_t *error)
{
    if (session->storage->oplog == NULL) {
        return true;
    }
    char *ns = bson_strdup_printf("%s.$cmd", database);
    entry_parts_t parts = {.op = "c", .ns = ns, .uuid = uuid, .object = object, .object2 = object2};
    bool own_transaction = !session->in_transaction;
    bool ok = !own_transaction || storage_begin(session, error);
    if (ok) {
        ok = append_entry(session, &parts, error);
        if (own_transaction) {
            if (ok) {
                ok = storage_commit(session, true, error);
            } else {
                storage_rollback(session);
            }
        }
    }
    bson_free(ns);
    return ok;
}

/* --- reading ------------------------------------------------------------------ */

oplog_scan_t *oplog_scan_open(storage_session_t *session, uint64_t from, uint64_t *out_trimmed_time,
                              bson_error_t *error)
{
    oplog_t *oplog = session->storage->oplog;
    oplog_scan_t *scan = BSON_ALIGNED_ALLOC0(oplog_scan_t);
    if (oplog == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "this store keeps no oplog");
        goto fail;
    }
    if (!storage_open_cursor(session, OPLOG_TABLE_URI, NULL, &scan->cursor, error)) {
        goto fail;
    }
    /* Positioning takes the transaction's snapshot; the trimmed time read after
     * it covers every trim that snapshot can see (a trim raises it before it
     * commits). */
    int exact = 0;
    scan->cursor->set_key(scan->cursor, from);
    int wt_code = scan->cursor->search_near(scan->cursor, &exact);
    if (wt_code == 0 && exact < 0) {
        wt_code = scan->cursor->next(scan->cursor);
    }
    if (wt_code == WT_NOTFOUND) {
        scan->exhausted = true;
    } else if (wt_code != 0) {
        storage_error_from_wt(error, wt_code, "reading the oplog");
        goto fail;
    }
    scan->positioned = true;
    *out_trimmed_time = oplog_trimmed_time(oplog);
    return scan;
fail:
    oplog_scan_close(scan);
    return NULL;
}

bool oplog_scan_next(oplog_scan_t *scan, uint64_t *out_time, bson_t *out_entry, bool *out_end, bson_error_t *error)
{
    *out_end = false;
    if (!scan->positioned && !scan->exhausted) {
        int wt_code = scan->cursor->next(scan->cursor);
        if (wt_code == WT_NOTFOUND) {
            scan->exhausted = true;
        } else if (wt_code != 0) {
            return storage_error_from_wt(error, wt_code, "reading the oplog");
        }
    }
    scan->positioned = false;
    if (scan->exhausted) {
        *out_end = true;
        return true;
    }
    WT_ITEM value;
    uint64_t time;
    scan->cursor->get_key(scan->cursor, &time);
    scan->cursor->get_value(scan->cursor, &value);
    if (!bson_init_static(out_entry, value.data, value.size)) {
        return tc_error_set(error, TC_ERR_INTERNAL, "the oplog entry at %u.%u is corrupt", OPLOG_TIME_SECONDS(time),
                            OPLOG_TIME_INCREMENT(time));
    }
    *out_time = time;
    return true;
}

void oplog_scan_close(oplog_scan_t *scan)
{
    if (scan == NULL) {
        return;
    }
    if (scan->cursor != NULL) {
        scan->cursor->close(scan->cursor);
    }
    bson_free(scan);
}

/* --- background: journal and size ------------------------------------------------ */

/* Adds the sizes of the entries that existed at open, a batch per transaction so
 * no snapshot stays pinned for long. */
static void count_opened_entries(oplog_t *oplog, storage_session_t *session)
{
    uint64_t next = 0;
    int64_t total = 0;
    bool more = oplog->opened_last_time > 0;
    while (more) {
        WT_CURSOR *cursor = NULL;
        bson_error_t error;
        if (!storage_begin(session, &error)) {
            break;
        }
        if (storage_open_cursor(session, OPLOG_TABLE_URI, NULL, &cursor, &error)) {
            int exact = 0;
            cursor->set_key(cursor, next);
            int wt_code = cursor->search_near(cursor, &exact);
            if (wt_code == 0 && exact < 0) {
                wt_code = cursor->next(cursor);
            }
            more = false;
            for (int counted = 0; wt_code == 0; counted++) {
                uint64_t time;
                WT_ITEM value;
                cursor->get_key(cursor, &time);
                if (time > oplog->opened_last_time) {
                    break;
                }
                if (counted == OPLOG_SIZE_SCAN_BATCH) {
                    next = time;
                    more = true;
                    break;
                }
                cursor->get_value(cursor, &value);
                total += (int64_t)value.size;
                wt_code = cursor->next(cursor);
            }
            cursor->close(cursor);
        } else {
            more = false;
        }
        storage_rollback(session);
    }
    atomic_fetch_add(&oplog->size_bytes, total);
}

/* Removes the oldest entries, up to a batch, while the oplog is over its size.
 * Never removes an entry above the majority time, so the newest one stays.
 * Returns false when there is nothing (more) to remove. */
static bool trim_batch(oplog_t *oplog, storage_session_t *session)
{
    int64_t excess = atomic_load(&oplog->size_bytes) - (int64_t)oplog->max_bytes;
    uint64_t keep_from = oplog_majority_time(oplog);
    WT_CURSOR *cursor = NULL;
    bson_error_t error;
    int64_t removed_bytes = 0;
    uint64_t last_removed = 0;
    int removed = 0;
    if (excess <= 0 || !storage_begin(session, &error)) {
        return false;
    }
    if (storage_open_cursor(session, OPLOG_TABLE_URI, NULL, &cursor, &error)) {
        while (removed < OPLOG_TRIM_BATCH && removed_bytes < excess && cursor->next(cursor) == 0) {
            uint64_t time;
            WT_ITEM value;
            cursor->get_key(cursor, &time);
            if (time >= keep_from) {
                break;
            }
            cursor->get_value(cursor, &value);
            size_t size = value.size;
            if (cursor->remove(cursor) != 0) {
                break;
            }
            removed_bytes += (int64_t)size;
            last_removed = time;
            removed++;
        }
        cursor->close(cursor);
    }
    if (removed == 0) {
        storage_rollback(session);
        return false;
    }
    /* Raised before the removal can be seen: a reader that sees the gap also
     * sees this (oplog_scan_open). */
    atomic_raise(&oplog->trimmed_time, last_removed);
    if (!storage_commit(session, false, &error)) {
        TC_LOG(TC_LOG_WARNING, "REPL", 0, "oplog trim failed: %s", error.message);
        return false;
    }
    atomic_fetch_sub(&oplog->size_bytes, removed_bytes);
    return true;
}

static void *oplog_thread_main(void *argument)
{
    oplog_t *oplog = argument;
    bson_error_t error;
    storage_session_t *session = storage_session_new(oplog->storage, &error);
    if (session == NULL) {
        TC_LOG(TC_LOG_ERROR, "REPL", 0, "the oplog thread cannot open a session: %s", error.message);
        return NULL;
    }
    count_opened_entries(oplog, session);
    pthread_mutex_lock(&oplog->thread_mutex);
    while (!oplog->stop) {
        struct timespec deadline = clock_deadline_after_ms(CLOCK_REALTIME, OPLOG_TICK_MS);
        pthread_cond_timedwait(&oplog->thread_wakeup, &oplog->thread_mutex, &deadline);
        pthread_mutex_unlock(&oplog->thread_mutex);
        /* Writes acknowledged without j (w: 1) reach the change streams once the
         * journal holds them, at most one tick later. */
        if (oplog_majority_time(oplog) < oplog_committed_time(oplog) && !oplog_sync_journal(session, &error)) {
            TC_LOG(TC_LOG_WARNING, "REPL", 0, "journal sync failed: %s", error.message);
        }
        while (!oplog->stop && trim_batch(oplog, session)) {
        }
        pthread_mutex_lock(&oplog->thread_mutex);
    }
    pthread_mutex_unlock(&oplog->thread_mutex);
    storage_session_destroy(session);
    return NULL;
}

/* --- lifecycle -------------------------------------------------------------------- */

bool oplog_read_bounds(storage_session_t *session, uint64_t *out_first, uint64_t *out_last, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    *out_first = 0;
    *out_last = 0;
    if (!storage_open_cursor(session, OPLOG_TABLE_URI, NULL, &cursor, error)) {
        return false;
    }
    if (cursor->next(cursor) == 0) {
        cursor->get_key(cursor, out_first);
    }
    cursor->reset(cursor);
    if (cursor->prev(cursor) == 0) {
        cursor->get_key(cursor, out_last);
    }
    cursor->close(cursor);
    return true;
}

oplog_t *oplog_open(storage_t *storage, uint64_t max_bytes, bson_error_t *error)
{
    oplog_t *oplog = BSON_ALIGNED_ALLOC0(oplog_t);
    storage_session_t *session = NULL;
    uint64_t first, last;
    bool ok = false;

    oplog->storage = storage;
    oplog->max_bytes = max_bytes;
    pthread_mutex_init(&oplog->clock_mutex, NULL);
    pthread_mutex_init(&oplog->thread_mutex, NULL);
    pthread_cond_init(&oplog->thread_wakeup, NULL);
    session = storage_session_new(storage, error);
    TC_CHECK(session != NULL);
    int wt_code = session->wt->create(session->wt, OPLOG_TABLE_URI, OPLOG_TABLE_CONFIG);
    if (wt_code != 0) {
        storage_error_from_wt(error, wt_code, "creating the oplog");
        goto done;
    }
    TC_CHECK(oplog_read_bounds(session, &first, &last, error));
    /* Everything on disk after recovery is committed and journaled. */
    oplog->last_time = last;
    oplog->opened_last_time = last;
    atomic_init(&oplog->committed_time, last);
    atomic_init(&oplog->majority_time, last);
    atomic_init(&oplog->size_bytes, 0);
    storage->oplog = oplog;

    bson_t message = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&message, "msg", "new primary");
    entry_parts_t parts = {.op = "n", .ns = "", .object = &message};
    bool written = storage_begin(session, error);
    if (written) {
        written = append_entry(session, &parts, error);
        if (written) {
            written = storage_commit(session, true, error);
        } else {
            storage_rollback(session);
        }
    }
    bson_destroy(&message);
    TC_CHECK(written);
    atomic_raise(&oplog->majority_time, oplog_committed_time(oplog));
    /* A resume point older than the first entry is lost, as on mongod. */
    uint64_t oldest = first != 0 ? first : oplog->last_time;
    atomic_init(&oplog->trimmed_time, oldest - 1);

    if (pthread_create(&oplog->thread, NULL, oplog_thread_main, oplog) != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start the oplog thread");
        goto done;
    }
    oplog->thread_started = true;
    TC_LOG_ATTRS(TC_LOG_INFO, "REPL", 0, "oplog: {maxMB} MB maximum, last entry {lastSeconds}.{lastIncrement}",
                 TC_ATTR_INT("maxMB", max_bytes / MEGABYTE),
                 TC_ATTR_INT("lastSeconds", OPLOG_TIME_SECONDS(oplog->last_time)),
                 TC_ATTR_INT("lastIncrement", OPLOG_TIME_INCREMENT(oplog->last_time)));
    ok = true;
done:
    storage_session_destroy(session);
    if (!ok) {
        oplog_close(oplog);
        return NULL;
    }
    return oplog;
}

void oplog_close(oplog_t *oplog)
{
    if (oplog == NULL) {
        return;
    }
    if (oplog->thread_started) {
        pthread_mutex_lock(&oplog->thread_mutex);
        oplog->stop = true;
        pthread_cond_signal(&oplog->thread_wakeup);
        pthread_mutex_unlock(&oplog->thread_mutex);
        pthread_join(oplog->thread, NULL);
    }
    if (oplog->storage->oplog == oplog) {
        oplog->storage->oplog = NULL;
    }
    pthread_mutex_destroy(&oplog->clock_mutex);
    pthread_mutex_destroy(&oplog->thread_mutex);
    pthread_cond_destroy(&oplog->thread_wakeup);
    bson_free(oplog->in_flight);
    bson_free(oplog);
}
