/* renameCollection, with mongod 6.0's errors. The target is built by copying
 * (its options, indexes and documents) under the exclusive catalog lock, then
 * the source dropped with one renameCollection oplog entry. (This predates
 * storage_rename_collection, the catalog rename that $out uses.) */
#include "store/commands.h"
#include "common/log.h"
#include "store/transactions.h"

#include <string.h>

/* Documents a renameCollection copies per transaction: small enough to keep a
 * transaction well inside the WiredTiger cache. */
#define RENAME_COPY_BATCH 1000

static bool is_valid_namespace(const char *ns)
{
    const char *dot = strchr(ns, '.');
    return dot != NULL && dot != ns && dot[1] != '\0';
}

/* Copies every document of source into target, RENAME_COPY_BATCH per
 * transaction, resuming the scan where the last batch stopped. */
static bool copy_documents(storage_session_t *session, collection_t *source, collection_t *target,
                           bson_error_t *error)
{
    scan_position_t position;
    bool ok = true, end = false;
    scan_position_init(&position);
    while (ok && !end) {
        if (!storage_begin(session, error)) {
            ok = false;
            break;
        }
        scan_t *scan = scan_open(session, source, NULL, NULL, false, &position, error);
        ok = scan != NULL;
        for (int copied = 0; ok && copied < RENAME_COPY_BATCH; copied++) {
            int64_t record_id;
            bson_t document, key_values;
            ok = scan_next(scan, &record_id, &document, &key_values, &end, error);
            if (!ok || end) {
                break;
            }
            ok = storage_insert_record(session, target, &document, NULL, error);
        }
        scan_close(scan);
        if (ok) {
            ok = storage_commit(session, false, error);
        } else {
            storage_rollback(session);
        }
    }
    scan_position_cleanup(&position);
    return ok;
}

/* storage has no rename: the target is created with the source's options and
 * indexes, filled, and the source dropped. Under the exclusive lock nobody sees
 * the intermediate state; a failure drops the partial target. */
static bool rename_by_copy(storage_session_t *session, storage_t *storage, const char *from, const char *to,
                           bson_error_t *error)
{
    collection_t *source = storage_find_collection(storage, from);
    collection_t *target = NULL;
    bool ok = false;
    TC_CHECK(storage_create_collection(session, to, &source->options, &target, error));
    for (size_t i = 0; i < source->index_count; i++) {
        bool created;
        if (!source->indexes[i]->is_id) {
            TC_CHECK(storage_create_index(session, target, &source->indexes[i]->spec, &created, error));
        }
    }
    TC_CHECK(copy_documents(session, source, target, error));
    TC_CHECK(storage_finish_rename(session, from, to, error));
    ok = true;
done:
    if (!ok && target != NULL) {
        bson_error_t undo_error;
        if (!storage_drop_collection(session, to, &undo_error)) {
            TC_LOG(TC_LOG_WARNING, "COMMAND", 0, "renameCollection to %s failed and could not drop the "
                   "partial target: %s", to, undo_error.message);
        }
    }
    return ok;
}

static bool handle_rename_collection(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    const char *from, *to;
    bool drop_target = false;
    bson_iter_t iter;

    if (!command_require_admin_database(context, error) || !command_get_required_string(context, "renameCollection", &from, error) ||
        !command_get_required_string(context, "to", &to, error)) {
        return false;
    }
    /* dropTarget: a bool, or (6.0) the UUID the target must have. */
    if (bson_iter_init_find(&iter, context->command, "dropTarget")) {
        drop_target = BSON_ITER_HOLDS_BINARY(&iter) || bson_iter_as_bool(&iter);
    }
    if (!is_valid_namespace(from)) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid source namespace: %s", from);
    }
    if (!is_valid_namespace(to)) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid target namespace: %s", to);
    }
    if (strcmp(from, to) == 0) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION, "Can't rename a collection to itself");
    }
    bool ok = false;
    transaction_lock_ddl(context, from, to);
    TC_CHECK(views_refuse(storage, from, error));
    if (storage_find_collection(storage, from) == NULL) {
        tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "Source collection %s does not exist", from);
        goto done;
    }
    if (storage_find_collection(storage, to) != NULL) {
        if (!drop_target) {
            tc_error_set(error, TC_ERR_NAMESPACE_EXISTS, "target namespace exists");
            goto done;
        }
        TC_CHECK(storage_drop_collection(context->session, to, error));
    }
    ok = rename_by_copy(context->session, storage, from, to, error);
done:
    transaction_unlock_ddl(context, from, to);
    return ok;
}

const command_definition_t rename_commands[] = {
    {"renameCollection", handle_rename_collection},
    {NULL, NULL},
};
