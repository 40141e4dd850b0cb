/* admin.system.users, where mongod keeps its users: one document per user,
 * {_id: "db.user", userId, user, db, credentials: {SCRAM-SHA-1: {...},
 * SCRAM-SHA-256: {...}}, roles: [{role, db}], customData}. Read by collection
 * scan (a deployment has few users) and written in a transaction of its own,
 * journaled, and under --replSet recorded in the oplog like any write. */
#include "store/auth_private.h"

#include "store/oplog.h"

#include <string.h>

#define WRITE_CONFLICT_RETRIES 8

static bool is_user(const bson_t *document, const char *user, const char *database)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, document, "_id") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return false;
    }
    const char *id = bson_iter_utf8(&iter, NULL);
    size_t database_length = strlen(database);
    if (strncmp(id, database, database_length) != 0 || id[database_length] != '.') {
        return false;
    }
    return user == NULL || strcmp(id + database_length + 1, user) == 0;
}

bool auth_users_scan(storage_session_t *session, auth_users_visit_fn visit, void *visit_context,
                     bson_error_t *error)
{
    storage_t *storage = storage_session_storage(session);
    scan_position_t position;
    scan_t *scan = NULL;
    bool ok = false;
    scan_position_init(&position);
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, AUTH_USERS_NS);
    if (collection == NULL) {
        ok = true; /* no user was ever created */
        goto unlock;
    }
    TC_CHECK(storage_begin(session, error));
    scan = scan_open(session, collection, NULL, NULL, false, &position, error);
    TC_CHECK(scan != NULL);
    for (;;) {
        int64_t record_id;
        bson_t document, key_values;
        bool end;
        TC_CHECK(scan_next(scan, &record_id, &document, &key_values, &end, error));
        if (end || !visit(visit_context, &document)) {
            break;
        }
    }
    ok = true;
done:
    scan_close(scan);
    if (storage_in_transaction(session)) {
        storage_rollback(session); /* read only */
    }
unlock:
    storage_unlock(storage);
    scan_position_cleanup(&position);
    return ok;
}

typedef struct find_context {
    const char *user;
    const char *database;
    bson_t *out;
    bool found;
} find_context_t;

static bool find_visit(void *visit_context, const bson_t *document)
{
    find_context_t *find = visit_context;
    if (!is_user(document, find->user, find->database)) {
        return true;
    }
    bson_copy_to(document, find->out);
    find->found = true;
    return false;
}

bool auth_users_find(storage_session_t *session, const char *user, const char *database, bson_t *out_document,
                     bool *out_found, bson_error_t *error)
{
    find_context_t find = {.user = user, .database = database, .out = out_document};
    bool ok = auth_users_scan(session, find_visit, &find, error);
    if (!ok && find.found) {
        bson_destroy(out_document);
    }
    *out_found = ok && find.found;
    return ok;
}

static bool any_visit(void *visit_context, const bson_t *document)
{
    (void)document;
    *(bool *)visit_context = true;
    return false;
}

bool auth_users_any(storage_session_t *session, bool *out_any, bson_error_t *error)
{
    *out_any = false;
    return auth_users_scan(session, any_visit, out_any, error);
}

void auth_users_changed(command_context_t *context)
{
    auth_manager_t *manager = context->store->auth;
    if (manager == NULL) {
        return;
    }
    atomic_fetch_add(&manager->generation, 1);
    atomic_store(&manager->users_exist, -1);
}

static bool is_write_conflict(const bson_error_t *error)
{
    return error->domain == TC_ERROR_DOMAIN && error->code == TC_ERR_WRITE_CONFLICT;
}

bool auth_users_insert(command_context_t *context, const bson_t *document, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bool ok = false;
    storage_lock_shared(storage);
    for (int attempt = 0;; attempt++) {
        collection_t *collection;
        ok = storage_obtain_collection(context->session, AUTH_USERS_NS, &collection, error) &&
             storage_begin(context->session, error);
        if (ok) {
            ok = storage_insert_record(context->session, collection, document, NULL, error) &&
                 oplog_log_insert(context->session, collection, document, context->command, error) &&
                 storage_commit(context->session, true, error);
            if (!ok && storage_in_transaction(context->session)) {
                storage_rollback(context->session);
            }
        }
        if (ok || !is_write_conflict(error) || attempt >= WRITE_CONFLICT_RETRIES) {
            break;
        }
    }
    storage_unlock(storage);
    if (!ok && error->domain == TC_ERROR_DOMAIN && error->code == TC_ERR_DUPLICATE_KEY) {
        bson_iter_t user, database;
        bson_iter_init_find(&user, document, "user");
        bson_iter_init_find(&database, document, "db");
        tc_error_set(error, TC_ERR_USER_ALREADY_EXISTS, "User \"%s@%s\" already exists",
                     bson_iter_utf8(&user, NULL), bson_iter_utf8(&database, NULL));
    }
    if (ok) {
        auth_users_changed(context);
    }
    return ok;
}

/* Deletes (replacement NULL) or replaces the matching users in one transaction. */
static bool rewrite_users(command_context_t *context, const char *user, const char *database,
                          const bson_t *replacement, int64_t *out_count, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    storage_session_t *session = context->session;
    bool ok = false;
    storage_lock_shared(storage);
    for (int attempt = 0;; attempt++) {
        scan_position_t position;
        scan_t *scan = NULL;
        *out_count = 0;
        ok = false;
        scan_position_init(&position);
        collection_t *collection = storage_find_collection(storage, AUTH_USERS_NS);
        if (collection == NULL) {
            ok = true; /* no user was ever created */
            goto done;
        }
        TC_CHECK(storage_begin(session, error));
        scan = scan_open(session, collection, NULL, NULL, false, &position, error);
        TC_CHECK(scan != NULL);
        for (;;) {
            int64_t record_id;
            bson_t view, key_values, current;
            bool end, written;
            TC_CHECK(scan_next(scan, &record_id, &view, &key_values, &end, error));
            if (end) {
                break;
            }
            if (!is_user(&view, user, database)) {
                continue;
            }
            bson_copy_to(&view, &current); /* the view dies with the next scan step or write */
            if (replacement == NULL) {
                written = storage_delete_record(session, collection, record_id, &current, error) &&
                          oplog_log_delete(session, collection, &current, context->command, error);
            } else {
                written = storage_update_record(session, collection, record_id, &current, replacement, error) &&
                          oplog_log_update(session, collection, &current, replacement, NULL, context->command, error);
            }
            bson_destroy(&current);
            TC_CHECK(written);
            (*out_count)++;
        }
        scan_close(scan);
        scan = NULL;
        TC_CHECK(storage_commit(session, true, error));
        ok = true;
    done:
        scan_close(scan);
        scan_position_cleanup(&position);
        if (storage_in_transaction(session)) {
            storage_rollback(session);
        }
        if (ok || !is_write_conflict(error) || attempt >= WRITE_CONFLICT_RETRIES) {
            break;
        }
    }
    storage_unlock(storage);
    if (ok && *out_count > 0) {
        auth_users_changed(context);
    }
    return ok;
}

bool auth_users_replace(command_context_t *context, const char *user, const char *database, const bson_t *document,
                        bool *out_found, bson_error_t *error)
{
    int64_t count;
    bool ok = rewrite_users(context, user, database, document, &count, error);
    *out_found = count > 0;
    return ok;
}

bool auth_users_delete(command_context_t *context, const char *user, const char *database, int64_t *out_count,
                       bson_error_t *error)
{
    return rewrite_users(context, user, database, NULL, out_count, error);
}
