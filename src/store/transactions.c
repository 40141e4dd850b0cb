/* Multi-document transactions: the logical-session table and each session's
 * transaction state machine.
 *
 *   NONE ──startTransaction──▶ IN_PROGRESS ──commitTransaction──▶ COMMITTED
 *                                   │  ▲ └──abort / failed command / lifetime /
 *                                   │  │    DDL on a collection it used──▶ ABORTED
 *                  (a higher txnNumber starts the next one from any state)
 *
 * Locking: a command of a transaction holds the catalog lock shared from before
 * it checks its session out until after it gives it back. A DDL first waits,
 * as behind mongod's exclusive collection lock, until the transactions that
 * used its collection have ended (transaction_lock_ddl), then takes the catalog
 * lock exclusive; the catalog's hook still aborts any transaction it would
 * undercut (none, when every DDL waited). Handlers take the shared lock again inside:
 * the catalog's rwlock prefers readers, so that never waits behind a writer.
 * table->mutex guards the table and every session's state; the one thread that
 * has a session checked out (in_use) alone uses its storage session. */
#include "store/transactions.h"
#include "common/clock.h"
#include "common/log.h"
#include "query/value_format.h"
#include "store/change_stream.h"
#include "store/oplog.h"
#include "store/current_op.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LOG_COMPONENT "TXN"
#define SESSION_IDLE_TIMEOUT_MS (30 * 60 * 1000) /* logicalSessionTimeoutMinutes */
#define IDLE_STORAGE_SESSIONS 16                  /* kept open for the next transactions */
#define LSID_BYTES 16

typedef enum transaction_state {
    TRANSACTION_NONE, /* no transaction at the active number (none yet, or a retryable write's) */
    TRANSACTION_IN_PROGRESS,
    TRANSACTION_COMMITTED,
    TRANSACTION_ABORTED,
} transaction_state_t;

/* One logical session (lsid) and its latest transaction. */
typedef struct transaction_session {
    uint8_t id[LSID_BYTES];       /* lsid.id */
    bson_t lsid;                  /* as the client sent it: the oplog entry records it */
    int64_t active_number;        /* the highest txnNumber seen; -1: none */
    transaction_state_t state;
    bool in_use;                  /* a command has it checked out */
    storage_session_t *storage;   /* holds the WiredTiger transaction while IN_PROGRESS */
    uint64_t transaction_id;      /* unique per transaction: its cursors carry it */
    int64_t expires_ms;           /* IN_PROGRESS: transactionLifetimeLimitSeconds after the start */
    int64_t last_used_ms;
    char **namespaces;            /* the collections it used, for the DDL hook */
    size_t namespace_count;
} transaction_session_t;

struct transaction_table {
    store_t *store;
    pthread_mutex_t mutex;
    pthread_cond_t released;      /* a session was given back */
    transaction_session_t **sessions;
    size_t session_count;
    storage_session_t *idle_storage[IDLE_STORAGE_SESSIONS];
    size_t idle_storage_count;
    uint64_t last_transaction_id;
    _Atomic int64_t lifetime_seconds;
    uint64_t total_started, total_committed, total_aborted;
    char **ddl_names;             /* what running DDLs lock: "db.coll", or "db" for all of it */
    size_t ddl_count;
};

/* The commands mongod runs inside a transaction (create and createIndexes,
 * which 4.4 added, are not offered: a WiredTiger table cannot be created inside
 * a transaction). */
static const char *const allowed_commands[] = {
    "find", "getMore", "killCursors", "insert", "update", "delete", "findAndModify", "findandmodify",
    "aggregate", "distinct", "commitTransaction", "abortTransaction", NULL,
};

/* --- sessions -------------------------------------------------------------------- */

static bool is_command(const command_context_t *context, const char *name)
{
    return strcmp(context->name, name) == 0;
}

static void set_state(transaction_session_t *session, transaction_state_t next)
{
    static const char *const names[] = {"none", "in progress", "committed", "aborted"};
    bool legal = next == TRANSACTION_IN_PROGRESS || next == TRANSACTION_NONE ||
                 session->state == TRANSACTION_IN_PROGRESS;
    if (!legal) {
        TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, 0, "transaction %lld: illegal change from %s to %s",
               (long long)session->active_number, names[session->state], names[next]);
        abort();
    }
    session->state = next;
}

static void forget_namespaces(transaction_session_t *session)
{
    for (size_t i = 0; i < session->namespace_count; i++) {
        bson_free(session->namespaces[i]);
    }
    bson_free(session->namespaces);
    session->namespaces = NULL;
    session->namespace_count = 0;
}

static void note_namespace(transaction_session_t *session, const char *ns)
{
    for (size_t i = 0; i < session->namespace_count; i++) {
        if (strcmp(session->namespaces[i], ns) == 0) {
            return;
        }
    }
    session->namespaces = bson_realloc(session->namespaces, (session->namespace_count + 1) * sizeof(char *));
    session->namespaces[session->namespace_count++] = bson_strdup(ns);
}

/* A storage session for a new transaction: an idle one, or a new one. */
static storage_session_t *take_storage(transaction_table_t *table, bson_error_t *error)
{
    if (table->idle_storage_count > 0) {
        return table->idle_storage[--table->idle_storage_count];
    }
    return storage_session_new(table->store->storage, error);
}

static void give_back_storage(transaction_table_t *table, storage_session_t *storage)
{
    if (table->idle_storage_count < IDLE_STORAGE_SESSIONS) {
        table->idle_storage[table->idle_storage_count++] = storage;
    } else {
        storage_session_destroy(storage);
    }
}

/* Ends an open transaction without committing it; table->mutex held. Its storage
 * session goes back now unless a command has the session checked out (that
 * command's end gives it back). */
static void abort_locked(transaction_table_t *table, transaction_session_t *session)
{
    storage_rollback_held(session->storage);
    cursor_table_kill_transaction(table->store->cursors, session->transaction_id);
    set_state(session, TRANSACTION_ABORTED);
    table->total_aborted++;
    if (!session->in_use) {
        give_back_storage(table, session->storage);
        session->storage = NULL;
    }
}

static void session_destroy(transaction_table_t *table, transaction_session_t *session)
{
    if (session->state == TRANSACTION_IN_PROGRESS) {
        abort_locked(table, session);
    }
    if (session->storage != NULL) {
        give_back_storage(table, session->storage);
    }
    forget_namespaces(session);
    bson_destroy(&session->lsid);
    bson_free(session);
}

static transaction_session_t *find_session(transaction_table_t *table, const uint8_t *id, size_t *out_slot)
{
    for (size_t i = 0; i < table->session_count; i++) {
        if (memcmp(table->sessions[i]->id, id, LSID_BYTES) == 0) {
            if (out_slot != NULL) {
                *out_slot = i;
            }
            return table->sessions[i];
        }
    }
    return NULL;
}

static transaction_session_t *add_session(transaction_table_t *table, const uint8_t *id, const bson_t *lsid)
{
    transaction_session_t *session = BSON_ALIGNED_ALLOC0(transaction_session_t);
    memcpy(session->id, id, LSID_BYTES);
    bson_copy_to(lsid, &session->lsid);
    session->active_number = -1;
    table->sessions = bson_realloc(table->sessions, (table->session_count + 1) * sizeof *table->sessions);
    table->sessions[table->session_count++] = session;
    return session;
}

static void remove_session(transaction_table_t *table, size_t slot)
{
    transaction_session_t *session = table->sessions[slot];
    table->sessions[slot] = table->sessions[--table->session_count];
    session_destroy(table, session);
}

/* --- DDL against transactions: mongod's collection lock, as transactions meet it ---------
 * A transaction holds its collections' intent locks until it ends, so on mongod a
 * DDL on one of them waits for it, and meanwhile a transaction's first use of
 * that collection waits maxTransactionLockRequestTimeoutMillis and fails with
 * LockTimeout (TransientTransactionError): the DDL never undercuts a running
 * transaction, and new ones do not starve it. */

#define DDL_LOCK_REQUEST_TIMEOUT_MS 5 /* maxTransactionLockRequestTimeoutMillis */
#define DDL_RECHECK_MS 100            /* the reaper ends transactions without a signal */

/* Whether a DDL's lock name ("db.coll", or "db" for the whole database) covers ns. */
static bool ddl_name_covers(const char *name, const char *ns)
{
    if (strchr(name, '.') != NULL) {
        return strcmp(name, ns) == 0;
    }
    size_t length = strlen(name);
    return strncmp(name, ns, length) == 0 && ns[length] == '.';
}

static bool ddl_is_waiting_for(const transaction_table_t *table, const char *ns)
{
    for (size_t i = 0; i < table->ddl_count; i++) {
        if (ddl_name_covers(table->ddl_names[i], ns)) {
            return true;
        }
    }
    return false;
}

/* Whether session's transaction is in progress and used what name covers. */
static bool transaction_uses(const transaction_session_t *session, const char *name)
{
    if (session->state != TRANSACTION_IN_PROGRESS) {
        return false;
    }
    for (size_t i = 0; i < session->namespace_count; i++) {
        if (ddl_name_covers(name, session->namespaces[i])) {
            return true;
        }
    }
    return false;
}

static bool some_transaction_uses(const transaction_table_t *table, const char *name)
{
    for (size_t i = 0; i < table->session_count; i++) {
        if (transaction_uses(table->sessions[i], name)) {
            return true;
        }
    }
    return false;
}

static void wait_for_released(transaction_table_t *table, int64_t milliseconds)
{
    struct timespec deadline = clock_deadline_after_ms(CLOCK_REALTIME, milliseconds);
    pthread_cond_timedwait(&table->released, &table->mutex, &deadline);
}

static void ddl_lock_one(transaction_table_t *table, const char *name)
{
    table->ddl_names = bson_realloc(table->ddl_names, (table->ddl_count + 1) * sizeof(char *));
    table->ddl_names[table->ddl_count++] = bson_strdup(name);
    while (some_transaction_uses(table, name)) {
        wait_for_released(table, DDL_RECHECK_MS);
    }
}

static void ddl_unlock_one(transaction_table_t *table, const char *name)
{
    for (size_t i = 0; i < table->ddl_count; i++) {
        if (strcmp(table->ddl_names[i], name) == 0) {
            bson_free(table->ddl_names[i]);
            table->ddl_names[i] = table->ddl_names[--table->ddl_count];
            return;
        }
    }
}

void transaction_lock_ddl(command_context_t *context, const char *name, const char *second_name)
{
    transaction_table_t *table = context->store->transactions;
    pthread_mutex_lock(&table->mutex);
    ddl_lock_one(table, name);
    if (second_name != NULL) {
        ddl_lock_one(table, second_name);
    }
    pthread_mutex_unlock(&table->mutex);
    storage_lock_exclusive(context->store->storage);
}

void transaction_unlock_ddl(command_context_t *context, const char *name, const char *second_name)
{
    transaction_table_t *table = context->store->transactions;
    /* Names first, so a transaction that gets the catalog lock next finds no DDL waiting. */
    pthread_mutex_lock(&table->mutex);
    ddl_unlock_one(table, name);
    if (second_name != NULL) {
        ddl_unlock_one(table, second_name);
    }
    pthread_cond_broadcast(&table->released);
    pthread_mutex_unlock(&table->mutex);
    storage_unlock(context->store->storage);
}

/* A transaction's first use of ns while a DDL waits to lock it: waits for that
 * DDL at most DDL_LOCK_REQUEST_TIMEOUT_MS. Called and returns with table->mutex
 * and the catalog lock (shared) held, the session checked out; lets the catalog
 * lock go while it waits, so that the DDL can take it and finish. */
static bool wait_for_ddl(transaction_table_t *table, storage_t *storage, const char *ns, bson_error_t *error)
{
    int64_t deadline = clock_monotonic_ms() + DDL_LOCK_REQUEST_TIMEOUT_MS;
    while (ddl_is_waiting_for(table, ns)) {
        int64_t left = deadline - clock_monotonic_ms();
        if (left <= 0) {
            return tc_error_set(error, TC_ERR_LOCK_TIMEOUT,
                                "Unable to acquire IX lock on '%s' within %dms: a DDL operation on it is queued or "
                                "running",
                                ns, DDL_LOCK_REQUEST_TIMEOUT_MS);
        }
        pthread_mutex_unlock(&table->mutex);
        storage_unlock(storage);
        pthread_mutex_lock(&table->mutex);
        if (ddl_is_waiting_for(table, ns)) {
            wait_for_released(table, left);
        }
        pthread_mutex_unlock(&table->mutex);
        storage_lock_shared(storage); /* the catalog lock before the table's mutex, as everywhere */
        pthread_mutex_lock(&table->mutex);
    }
    return true;
}

/* --- the table ---------------------------------------------------------------------- */

/* The catalog's DDL hook (storage_set_ddl_hook), run with the catalog lock
 * exclusive: no transaction is checked out then. */
static void abort_users_of_namespace(void *context, const char *ns)
{
    transaction_table_t *table = context;
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->session_count; i++) {
        transaction_session_t *session = table->sessions[i];
        if (!transaction_uses(session, ns)) {
            continue;
        }
        if (session->in_use) {
            TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, 0, "transaction %lld is running during a DDL on %s",
                   (long long)session->active_number, ns);
            continue;
        }
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "aborting transaction {txnNumber}: {ns} changed under it",
                     TC_ATTR_INT("txnNumber", session->active_number), TC_ATTR_STR("ns", ns));
        abort_locked(table, session);
    }
    pthread_mutex_unlock(&table->mutex);
}

transaction_table_t *transaction_table_new(store_t *store)
{
    transaction_table_t *table = BSON_ALIGNED_ALLOC0(transaction_table_t);
    table->store = store;
    pthread_mutex_init(&table->mutex, NULL);
    pthread_cond_init(&table->released, NULL);
    atomic_init(&table->lifetime_seconds, TRANSACTION_DEFAULT_LIFETIME_SECONDS);
    storage_set_ddl_hook(store->storage, abort_users_of_namespace, table);
    return table;
}

void transaction_table_destroy(transaction_table_t *table)
{
    if (table == NULL) {
        return;
    }
    storage_set_ddl_hook(table->store->storage, NULL, NULL);
    pthread_mutex_lock(&table->mutex);
    while (table->session_count > 0) {
        remove_session(table, table->session_count - 1);
    }
    for (size_t i = 0; i < table->idle_storage_count; i++) {
        storage_session_destroy(table->idle_storage[i]);
    }
    pthread_mutex_unlock(&table->mutex);
    bson_free(table->sessions);
    bson_free(table->ddl_names); /* empty: no DDL runs once the server has stopped */
    pthread_mutex_destroy(&table->mutex);
    pthread_cond_destroy(&table->released);
    bson_free(table);
}

int64_t transaction_lifetime_seconds(transaction_table_t *table)
{
    return atomic_load(&table->lifetime_seconds);
}

void transaction_set_lifetime_seconds(transaction_table_t *table, int64_t seconds)
{
    atomic_store(&table->lifetime_seconds, seconds);
}

/* --- a command's session fields ------------------------------------------------------ */

typedef struct session_fields {
    bool has_lsid;
    bson_t lsid;
    const uint8_t *id; /* lsid.id's 16 bytes, when it is a UUID */
    bool has_txn_number;
    int64_t txn_number;
    bool has_autocommit;
    bool autocommit;
    bool has_start;
    bool start;
} session_fields_t;

static bool wrong_type(const char *field, const bson_iter_t *iter, const char *expected, bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                        "BSON field 'OperationSessionInfo.%s' is the wrong type '%s', expected type '%s'", field,
                        value_type_name(bson_iter_type(iter)), expected);
}

static bool read_session_fields(const bson_t *command, session_fields_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    if (bson_iter_init_find(&iter, command, "lsid")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            return wrong_type("lsid", &iter, "object", error);
        }
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&out->lsid, data, length);
        out->has_lsid = true;
        bson_iter_t id;
        if (bson_iter_init_find(&id, &out->lsid, "id") && BSON_ITER_HOLDS_BINARY(&id)) {
            bson_subtype_t subtype;
            const uint8_t *bytes;
            bson_iter_binary(&id, &subtype, &length, &bytes);
            if (subtype == BSON_SUBTYPE_UUID && length == LSID_BYTES) {
                out->id = bytes;
            }
        }
    }
    if (bson_iter_init_find(&iter, command, "txnNumber")) {
        if (!BSON_ITER_HOLDS_INT32(&iter) && !BSON_ITER_HOLDS_INT64(&iter)) {
            return wrong_type("txnNumber", &iter, "long", error);
        }
        out->has_txn_number = true;
        out->txn_number = bson_iter_as_int64(&iter);
    }
    if (bson_iter_init_find(&iter, command, "autocommit")) {
        if (!BSON_ITER_HOLDS_BOOL(&iter)) {
            return wrong_type("autocommit", &iter, "bool", error);
        }
        out->has_autocommit = true;
        out->autocommit = bson_iter_bool(&iter);
    }
    if (bson_iter_init_find(&iter, command, "startTransaction")) {
        if (!BSON_ITER_HOLDS_BOOL(&iter)) {
            return wrong_type("startTransaction", &iter, "bool", error);
        }
        out->has_start = true;
        out->start = bson_iter_bool(&iter);
    }
    return true;
}

/* mongod's initializeOperationSessionInfo(): how the fields may combine. */
static bool check_session_fields(const session_fields_t *fields, bool replica_set, bson_error_t *error)
{
    if (fields->has_txn_number) {
        if (!fields->has_lsid) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                                "Transaction number requires a session ID to also be specified");
        }
        if (fields->id == NULL) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "BSON field 'OperationSessionInfo.lsid.id' must be a UUID (binary subtype 4)");
        }
        if (fields->has_autocommit && !replica_set) {
            return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION,
                                "Transaction numbers are only allowed on a replica set member or mongos");
        }
        if (fields->txn_number < 0) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Transaction number cannot be negative");
        }
    }
    if (fields->has_autocommit) {
        if (!fields->has_txn_number) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                                "'autocommit' field requires a transaction number to also be specified");
        }
        if (fields->autocommit) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "Specifying autocommit=true is not allowed.");
        }
    } else if (fields->has_start) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                            "'startTransaction' field requires 'autocommit' field to also be specified");
    }
    if (fields->has_start && !fields->start) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "Specifying startTransaction=false is not allowed.");
    }
    return true;
}

/* --- what may run in a transaction --------------------------------------------------- */

static bool read_concern_level_allowed(const bson_t *command, bool starts, bson_error_t *error)
{
    bson_iter_t iter, level;
    if (!bson_iter_init_find(&iter, command, "readConcern") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return true;
    }
    bson_t concern;
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(&concern, data, length);
    if (bson_empty(&concern)) {
        return true;
    }
    if (!starts) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                            "Only the first command in a transaction may specify a readConcern");
    }
    if (bson_iter_init_find(&level, &concern, "level") && BSON_ITER_HOLDS_UTF8(&level)) {
        const char *name = bson_iter_utf8(&level, NULL);
        if (strcmp(name, "local") != 0 && strcmp(name, "majority") != 0 && strcmp(name, "snapshot") != 0) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                                "The readConcern level must be either 'local' (default), 'majority' or "
                                "'snapshot' in order to run in a transaction");
        }
    }
    return true;
}

/* mongod's validateSessionOptions() and the checks before a session checkout:
 * none of these failures touches the transaction. */
static bool check_command_allowed(const command_context_t *context, bool starts, bson_error_t *error)
{
    bool allowed = false;
    for (const char *const *name = allowed_commands; *name != NULL && !allowed; name++) {
        allowed = is_command(context, *name);
    }
    if (!allowed) {
        return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                            "Cannot run '%s' in a multi-document transaction.", context->name);
    }
    bool ends = is_command(context, "commitTransaction") || is_command(context, "abortTransaction");
    if (ends && strcmp(context->database, "admin") != 0) {
        return tc_error_set(error, TC_ERR_UNAUTHORIZED, "%s may only be run against the admin database.",
                            context->name);
    }
    if (strcmp(context->database, "config") == 0 || strcmp(context->database, "local") == 0) {
        return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                            "Cannot run command against the '%s' database in a transaction.", context->database);
    }
    if (starts) {
        if (is_command(context, "killCursors")) {
            return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                                "Cannot run killCursors as the first operation in a multi-document transaction.");
        }
        if (is_command(context, "commitTransaction")) {
            return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                                "Cannot start a transaction with a commit");
        }
        if (is_command(context, "abortTransaction")) {
            return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                                "Cannot start a transaction with an abort");
        }
    }
    if (!ends && bson_has_field(context->command, "writeConcern")) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                            "writeConcern is not allowed within a multi-statement transaction");
    }
    if (is_command(context, "aggregate") && change_stream_requested(context->command)) {
        return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                            "Operation not permitted in transaction :: caused by :: Aggregation stage "
                            "$changeStream cannot run within a multi-document transaction.");
    }
    return read_concern_level_allowed(context->command, starts, error);
}

/* The collection the command reads or writes ("db.coll"), or NULL. */
static char *command_collection(const command_context_t *context)
{
    bson_iter_t iter;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (is_command(context, "getMore")) {
        if (!bson_iter_init_find(&iter, context->command, "collection")) {
            return NULL;
        }
    }
    if (!BSON_ITER_HOLDS_UTF8(&iter) || bson_iter_utf8(&iter, NULL)[0] == '\0') {
        return NULL;
    }
    return bson_strdup_printf("%s.%s", context->database, bson_iter_utf8(&iter, NULL));
}

static bool statement_upserts(bson_iter_t *statement)
{
    bson_iter_t field;
    return BSON_ITER_HOLDS_DOCUMENT(statement) && bson_iter_recurse(statement, &field) &&
           bson_iter_find(&field, "upsert") && bson_iter_as_bool(&field);
}

/* Whether the command may create its collection: insert, or an upsert. */
static bool command_creates_collection(const command_context_t *context)
{
    bson_iter_t iter, statements;
    if (is_command(context, "insert")) {
        /* A batch refused whole (no documents) creates nothing, as with mongod. */
        return bson_iter_init_find(&iter, context->command, "documents") && BSON_ITER_HOLDS_ARRAY(&iter) &&
               bson_iter_recurse(&iter, &statements) && bson_iter_next(&statements);
    }
    if (is_command(context, "findAndModify") || is_command(context, "findandmodify")) {
        return bson_iter_init_find(&iter, context->command, "upsert") && bson_iter_as_bool(&iter);
    }
    if (is_command(context, "update") && bson_iter_init_find(&iter, context->command, "updates") &&
        BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &statements)) {
        while (bson_iter_next(&statements)) {
            if (statement_upserts(&statements)) {
                return true;
            }
        }
    }
    return false;
}

/* A collection a transaction's write creates is created first, on the worker's
 * own session and committed at once (mongod 4.4 creates it inside the
 * transaction; a WiredTiger table cannot be): a write under the catalog lock
 * shared cannot take it exclusive, as creating needs. */
static bool create_collection_first(command_context_t *context, const char *ns, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    collection_t *collection;
    if (ns == NULL || !command_creates_collection(context)) {
        return true;
    }
    storage_lock_shared(storage);
    bool ok = storage_obtain_collection(context->session, ns, &collection, error);
    storage_unlock(storage);
    return ok;
}

/* --- checkout ---------------------------------------------------------------------------- */

static bool start_transaction(transaction_table_t *table, transaction_session_t *session, int64_t number,
                              bson_error_t *error)
{
    storage_session_t *storage = take_storage(table, error);
    if (storage == NULL) {
        return false;
    }
    if (!storage_hold_transaction(storage, error)) {
        give_back_storage(table, storage);
        return false;
    }
    session->storage = storage;
    session->active_number = number;
    set_state(session, TRANSACTION_IN_PROGRESS);
    session->transaction_id = ++table->last_transaction_id;
    session->expires_ms = clock_monotonic_ms() + atomic_load(&table->lifetime_seconds) * 1000;
    forget_namespaces(session);
    table->total_started++;
    return true;
}

/* mongod's beginOrContinue() and _checkIsCommandValidWithTxnState(); table->mutex
 * held, session not in use. */
static bool begin_or_continue(transaction_table_t *table, transaction_session_t *session,
                              const command_context_t *context, const session_fields_t *fields, bson_error_t *error)
{
    int64_t number = fields->txn_number;
    if (session->state == TRANSACTION_IN_PROGRESS && clock_monotonic_ms() >= session->expires_ms) {
        abort_locked(table, session);
    }
    if (number < session->active_number) {
        return tc_error_set(error, TC_ERR_TRANSACTION_TOO_OLD,
                            "Cannot start transaction %lld on session because a newer transaction with txnNumber "
                            "%lld has already started on this session.",
                            (long long)number, (long long)session->active_number);
    }
    if (fields->has_start) {
        if (number == session->active_number) {
            return tc_error_set(error, TC_ERR_CONFLICTING_OPERATION_IN_PROGRESS,
                                "Only servers in a sharded cluster can start a new transaction at the active "
                                "transaction number");
        }
        if (session->state == TRANSACTION_IN_PROGRESS) {
            abort_locked(table, session); /* a newer transaction aborts the older, as on mongod */
        }
        return start_transaction(table, session, number, error);
    }
    if (number != session->active_number || session->state == TRANSACTION_NONE) {
        return tc_error_set(error, TC_ERR_NO_SUCH_TRANSACTION,
                            "Given transaction number %lld does not match any in-progress transactions. The "
                            "active transaction number is %lld",
                            (long long)number, (long long)session->active_number);
    }
    if (session->state == TRANSACTION_ABORTED) {
        return tc_error_set(error, TC_ERR_NO_SUCH_TRANSACTION, "Transaction with { txnNumber: %lld } has been aborted.",
                            (long long)number);
    }
    if (session->state == TRANSACTION_COMMITTED && !is_command(context, "commitTransaction")) {
        return tc_error_set(error, TC_ERR_TRANSACTION_COMMITTED,
                            "Transaction with { txnNumber: %lld } has been committed.", (long long)number);
    }
    return true;
}

/* A retryable write (txnNumber without autocommit) on a session that ran
 * transactions: an older number is refused, a newer one ends the transaction. */
static bool note_retryable_write(transaction_table_t *table, const session_fields_t *fields, bson_error_t *error)
{
    bool ok = true;
    storage_lock_shared(table->store->storage);
    pthread_mutex_lock(&table->mutex);
    transaction_session_t *session = find_session(table, fields->id, NULL);
    if (session != NULL && !session->in_use) {
        if (fields->txn_number < session->active_number) {
            ok = tc_error_set(error, TC_ERR_TRANSACTION_TOO_OLD,
                              "Retryable write with txnNumber %lld is prohibited on session because a newer "
                              "transaction with txnNumber %lld has already started on this session.",
                              (long long)fields->txn_number, (long long)session->active_number);
        } else if (fields->txn_number == session->active_number && session->state != TRANSACTION_NONE) {
            ok = tc_error_set(error, 6611001,
                              "Attempted to use the active transaction number %lld to run a retryable write but it "
                              "corresponds to a transaction",
                              (long long)fields->txn_number);
        } else if (fields->txn_number > session->active_number) {
            if (session->state == TRANSACTION_IN_PROGRESS) {
                abort_locked(table, session);
            }
            session->active_number = fields->txn_number;
            set_state(session, TRANSACTION_NONE);
        }
    }
    pthread_mutex_unlock(&table->mutex);
    storage_unlock(table->store->storage);
    return ok;
}

bool transaction_begin_command(command_context_t *context, transaction_command_t *state, bson_error_t *error)
{
    transaction_table_t *table = context->store->transactions;
    session_fields_t fields;
    char *ns = NULL;
    bool ok = false;

    memset(state, 0, sizeof *state);
    state->worker_session = context->session;
    if (!read_session_fields(context->command, &fields, error) ||
        !check_session_fields(&fields, context->store->options.replica_set != NULL, error)) {
        return false;
    }
    if (!fields.has_txn_number || context->store->options.replica_set == NULL) {
        /* Not a transaction. A retryable write's txnNumber on a standalone store is
         * ignored rather than refused as mongod does: the proxy forwards a
         * mongos's retryable writes to standalone stores unchanged. */
        return true;
    }
    if (!fields.has_autocommit) {
        return note_retryable_write(table, &fields, error);
    }
    TC_CHECK(check_command_allowed(context, fields.has_start, error));
    ns = command_collection(context);
    TC_CHECK(create_collection_first(context, ns, error));

    storage_lock_shared(context->store->storage);
    state->locked = true;
    pthread_mutex_lock(&table->mutex);
    transaction_session_t *session = find_session(table, fields.id, NULL);
    if (session == NULL && fields.has_start) {
        session = add_session(table, fields.id, &fields.lsid);
    }
    if (session == NULL) {
        pthread_mutex_unlock(&table->mutex);
        tc_error_set(error, TC_ERR_NO_SUCH_TRANSACTION,
                     "Given transaction number %lld does not match any in-progress transactions. The active "
                     "transaction number is -1",
                     (long long)fields.txn_number);
        goto done;
    }
    while (session->in_use) { /* one command at a time per session, as mongod's checkout */
        pthread_cond_wait(&table->released, &table->mutex);
    }
    if (!begin_or_continue(table, session, context, &fields, error)) {
        pthread_mutex_unlock(&table->mutex);
        goto done;
    }
    session->in_use = true;
    if (ns != NULL && session->state == TRANSACTION_IN_PROGRESS && !transaction_uses(session, ns) &&
        !wait_for_ddl(table, context->store->storage, ns, error)) {
        session->in_use = false;
        abort_locked(table, session); /* a failed statement ends its transaction, as on mongod */
        pthread_cond_broadcast(&table->released);
        pthread_mutex_unlock(&table->mutex);
        goto done;
    }
    session->last_used_ms = clock_monotonic_ms();
    if (ns != NULL && session->state == TRANSACTION_IN_PROGRESS) {
        note_namespace(session, ns);
    }
    pthread_mutex_unlock(&table->mutex);

    state->transaction = session;
    context->transaction = session;
    context->transaction_id = session->transaction_id;
    context->txn_number = fields.txn_number;
    if (session->state == TRANSACTION_IN_PROGRESS) {
        context->session = session->storage;
    }
    ok = true;
done:
    if (!ok && state->locked) {
        storage_unlock(context->store->storage);
        state->locked = false;
    }
    bson_free(ns);
    return ok;
}

void transaction_end_command(command_context_t *context, transaction_command_t *state, bool ok)
{
    transaction_table_t *table = context->store->transactions;
    transaction_session_t *session = state->transaction;
    if (session == NULL) {
        return;
    }
    pthread_mutex_lock(&table->mutex);
    if (session->state == TRANSACTION_IN_PROGRESS && (!ok || context->abort_transaction)) {
        abort_locked(table, session);
    }
    if (session->storage != NULL) {
        oplog_session_adopt_write_time(state->worker_session, session->storage);
        if (session->state != TRANSACTION_IN_PROGRESS) {
            give_back_storage(table, session->storage);
            session->storage = NULL;
        }
    }
    session->in_use = false;
    session->last_used_ms = clock_monotonic_ms();
    pthread_cond_broadcast(&table->released);
    pthread_mutex_unlock(&table->mutex);
    context->session = state->worker_session;
    context->transaction = NULL;
    if (state->locked) {
        storage_unlock(context->store->storage);
    }
    memset(state, 0, sizeof *state);
}

const char *transaction_error_label(const bson_t *command, const bson_error_t *error)
{
    bson_iter_t iter;
    if (error->domain != TC_ERROR_DOMAIN || !bson_iter_init_find(&iter, command, "autocommit")) {
        return NULL;
    }
    switch (error->code) {
    case TC_ERR_WRITE_CONFLICT:
    case TC_ERR_LOCK_TIMEOUT:
    case TC_ERR_NO_SUCH_TRANSACTION:
        return "TransientTransactionError";
    default:
        return NULL;
    }
}

/* --- commit and abort ------------------------------------------------------------------- */

bool transaction_commit(command_context_t *context, bson_error_t *error)
{
    transaction_table_t *table = context->store->transactions;
    transaction_session_t *session = context->transaction;
    bool durable = command_wants_durable_write(context);
    if (session->state == TRANSACTION_COMMITTED) {
        /* A retry: the commit is done; wait for its write concern again. */
        return !durable || command_sync_journal(context, context->session, error);
    }
    storage_session_t *storage = session->storage;
    bool logged = oplog_log_transaction(storage, &session->lsid, session->active_number, error);
    bool ok = logged && storage_commit_held(storage, false, error);
    pthread_mutex_lock(&table->mutex);
    if (ok) {
        set_state(session, TRANSACTION_COMMITTED);
        table->total_committed++;
        cursor_table_kill_transaction(table->store->cursors, session->transaction_id);
    } else if (!logged) {
        abort_locked(table, session);
    } else {
        /* WiredTiger rolled back the failed commit itself. */
        cursor_table_kill_transaction(table->store->cursors, session->transaction_id);
        set_state(session, TRANSACTION_ABORTED);
        table->total_aborted++;
    }
    pthread_mutex_unlock(&table->mutex);
    /* Majority means journaled on this one-node set; the sync also lets change
     * streams see the entry at once. */
    return ok && (!durable || command_sync_journal(context, storage, error));
}

bool transaction_abort(command_context_t *context, bson_error_t *error)
{
    transaction_table_t *table = context->store->transactions;
    transaction_session_t *session = context->transaction;
    (void)error;
    pthread_mutex_lock(&table->mutex);
    abort_locked(table, session);
    pthread_mutex_unlock(&table->mutex);
    return true;
}

/* --- sessions ending, lifetime ------------------------------------------------------------ */

void transaction_end_sessions(transaction_table_t *table, const bson_t *lsids, bool forget)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, lsids)) {
        return;
    }
    storage_lock_shared(table->store->storage);
    pthread_mutex_lock(&table->mutex);
    while (bson_iter_next(&iter)) {
        session_fields_t fields;
        bson_t wrapper = BSON_INITIALIZER;
        bson_error_t ignored;
        size_t slot;
        bson_append_iter(&wrapper, "lsid", 4, &iter);
        if (read_session_fields(&wrapper, &fields, &ignored) && fields.id != NULL) {
            transaction_session_t *session = find_session(table, fields.id, &slot);
            if (session != NULL && !session->in_use && forget) {
                remove_session(table, slot);
            } else if (session != NULL && !session->in_use && session->state == TRANSACTION_IN_PROGRESS) {
                abort_locked(table, session);
            }
        }
        bson_destroy(&wrapper);
    }
    pthread_mutex_unlock(&table->mutex);
    storage_unlock(table->store->storage);
}

void transaction_table_reap(transaction_table_t *table)
{
    int64_t now = clock_monotonic_ms();
    storage_lock_shared(table->store->storage);
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->session_count;) {
        transaction_session_t *session = table->sessions[i];
        if (session->in_use) {
            i++;
            continue;
        }
        if (session->state == TRANSACTION_IN_PROGRESS && now >= session->expires_ms) {
            TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                         "aborting transaction {txnNumber}: it ran longer than transactionLifetimeLimitSeconds "
                         "({transactionLifetimeLimitSeconds})",
                         TC_ATTR_INT("txnNumber", session->active_number),
                         TC_ATTR_INT("transactionLifetimeLimitSeconds", atomic_load(&table->lifetime_seconds)));
            abort_locked(table, session);
        }
        if (session->state != TRANSACTION_IN_PROGRESS && now - session->last_used_ms > SESSION_IDLE_TIMEOUT_MS) {
            remove_session(table, i);
            continue;
        }
        i++;
    }
    pthread_mutex_unlock(&table->mutex);
    storage_unlock(table->store->storage);
}

void transaction_append_statistics(transaction_table_t *table, bson_t *out)
{
    int64_t open = 0, active = 0;
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->session_count; i++) {
        if (table->sessions[i]->state == TRANSACTION_IN_PROGRESS) {
            open++;
            active += table->sessions[i]->in_use;
        }
    }
    BSON_APPEND_INT64(out, "currentActive", active);
    BSON_APPEND_INT64(out, "currentInactive", open - active);
    BSON_APPEND_INT64(out, "currentOpen", open);
    BSON_APPEND_INT64(out, "totalAborted", (int64_t)table->total_aborted);
    BSON_APPEND_INT64(out, "totalCommitted", (int64_t)table->total_committed);
    BSON_APPEND_INT64(out, "totalStarted", (int64_t)table->total_started);
    pthread_mutex_unlock(&table->mutex);
}

void transaction_table_report_idle(transaction_table_t *table, const char *host, bson_t *array, uint32_t *count)
{
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->session_count; i++) {
        const transaction_session_t *session = table->sessions[i];
        if (session->in_use || session->state != TRANSACTION_IN_PROGRESS) {
            continue;
        }
        bson_t document = BSON_INITIALIZER, transaction, parameters;
        BSON_APPEND_UTF8(&document, "type", "idleSession");
        BSON_APPEND_UTF8(&document, "host", host);
        BSON_APPEND_UTF8(&document, "desc", "inactive transaction");
        BSON_APPEND_BOOL(&document, "active", false);
        BSON_APPEND_DOCUMENT(&document, "lsid", &session->lsid);
        BSON_APPEND_DOCUMENT_BEGIN(&document, "transaction", &transaction);
        BSON_APPEND_DOCUMENT_BEGIN(&transaction, "parameters", &parameters);
        BSON_APPEND_INT64(&parameters, "txnNumber", session->active_number);
        BSON_APPEND_BOOL(&parameters, "autocommit", false);
        bson_append_document_end(&transaction, &parameters);
        bson_append_document_end(&document, &transaction);
        current_op_array_append(array, count, &document);
        bson_destroy(&document);
    }
    pthread_mutex_unlock(&table->mutex);
}
