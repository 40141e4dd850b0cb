/* The retryable-reads and retryable-writes rules as tables: which commands may run
 * again after a transient failure (which failures are transient is
 * tc_error_code_is_retryable in common/error.h). */
#include "proxy/retry.h"

#include "common/error.h"

#include <string.h>

/* SDAM's "not writable primary" and "node is recovering" errors: a subset of
 * tc_error_code_is_retryable's codes. */
bool retry_code_changes_primary(int32_t code)
{
    return code == TC_ERR_SHUTDOWN_IN_PROGRESS || code == TC_ERR_PRIMARY_STEPPED_DOWN ||
           code == TC_ERR_NOT_WRITABLE_PRIMARY || code == TC_ERR_INTERRUPTED_AT_SHUTDOWN ||
           code == TC_ERR_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE || code == TC_ERR_NOT_PRIMARY_NO_SECONDARY_OK ||
           code == TC_ERR_NOT_PRIMARY_OR_SECONDARY;
}

/* Whether every statement of an update (multi) or delete (limit) touches at most
 * one document: multi absent or false; limit exactly 1. */
static bool statements_are_single(const fields_t *command, const char *array, const char *field,
                                  bool delete_limit)
{
    bson_iter_t iter, statements, statement;
    if (!fields_find(command, array, &iter) || !BSON_ITER_HOLDS_ARRAY(&iter) ||
        !bson_iter_recurse(&iter, &statements)) {
        return false;
    }
    while (bson_iter_next(&statements)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&statements) || !bson_iter_recurse(&statements, &statement)) {
            return false;
        }
        bool found = bson_iter_find(&statement, field);
        if (delete_limit) {
            if (!found || !BSON_ITER_HOLDS_NUMBER(&statement) || bson_iter_as_int64(&statement) != 1) {
                return false;
            }
        } else if (found && bson_iter_as_bool(&statement)) {
            return false;
        }
    }
    return true;
}

/* An aggregate whose pipeline ends in a write stage is a write, and not retryable. */
static bool pipeline_writes(const fields_t *command)
{
    bson_iter_t iter, stages, stage;
    if (!fields_find(command, "pipeline", &iter) || !BSON_ITER_HOLDS_ARRAY(&iter) ||
        !bson_iter_recurse(&iter, &stages)) {
        return false;
    }
    while (bson_iter_next(&stages)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&stages) && bson_iter_recurse(&stages, &stage) && bson_iter_next(&stage) &&
            (strcmp(bson_iter_key(&stage), "$out") == 0 || strcmp(bson_iter_key(&stage), "$merge") == 0)) {
            return true;
        }
    }
    return false;
}

retry_kind_t retry_command_kind(const bson_t *command)
{
    fields_t fields;
    if (command == NULL) {
        return RETRY_NEVER;
    }
    fields_index(&fields, command);
    return retry_command_kind_fields(&fields);
}

retry_kind_t retry_command_kind_fields(const fields_t *command)
{
    static const char *const reads[] = {"find", "count", "distinct", "listCollections", "listIndexes",
                                        "listDatabases"};
    bson_iter_t first;
    if (!bson_iter_init(&first, command->document) || !bson_iter_next(&first) || fields_has(command, "autocommit")) {
        return RETRY_NEVER;
    }
    const char *name = bson_iter_key(&first);
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        if (strcmp(name, reads[i]) == 0) {
            return RETRY_READ;
        }
    }
    if (strcmp(name, "aggregate") == 0) {
        return pipeline_writes(command) ? RETRY_NEVER : RETRY_READ;
    }
    if (!fields_has(command, "txnNumber")) {
        return RETRY_NEVER;
    }
    if (strcmp(name, "insert") == 0 || strcmp(name, "findAndModify") == 0 || strcmp(name, "findandmodify") == 0) {
        return RETRY_WRITE;
    }
    if (strcmp(name, "update") == 0) {
        return statements_are_single(command, "updates", "multi", false) ? RETRY_WRITE : RETRY_NEVER;
    }
    if (strcmp(name, "delete") == 0) {
        return statements_are_single(command, "deletes", "limit", true) ? RETRY_WRITE : RETRY_NEVER;
    }
    return RETRY_NEVER;
}

static int32_t code_of(const bson_t *document)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, document, "code") && BSON_ITER_HOLDS_NUMBER(&iter)
               ? (int32_t)bson_iter_as_int64(&iter)
               : 0;
}

static bool has_retryable_write_label(const bson_t *reply)
{
    bson_iter_t iter, labels;
    if (!bson_iter_init_find(&iter, reply, "errorLabels") || !BSON_ITER_HOLDS_ARRAY(&iter) ||
        !bson_iter_recurse(&iter, &labels)) {
        return false;
    }
    while (bson_iter_next(&labels)) {
        if (BSON_ITER_HOLDS_UTF8(&labels) && strcmp(bson_iter_utf8(&labels, NULL), "RetryableWriteError") == 0) {
            return true;
        }
    }
    return false;
}

bool retry_reply_is_retryable(const bson_t *reply, retry_kind_t kind, int32_t *out_code)
{
    bson_iter_t iter;
    *out_code = 0;
    if (kind == RETRY_NEVER) {
        return false;
    }
    bool ok = bson_iter_init_find(&iter, reply, "ok") && bson_iter_as_double(&iter) == 1.0;
    int32_t code = ok ? 0 : code_of(reply);
    if (!ok && (tc_error_code_is_retryable(code) || (kind == RETRY_WRITE && has_retryable_write_label(reply)))) {
        *out_code = code;
        return true;
    }
    if (ok && kind == RETRY_WRITE && bson_iter_init_find(&iter, reply, "writeConcernError") &&
        BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_t concern;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        if (bson_init_static(&concern, data, length) && tc_error_code_is_retryable(code_of(&concern))) {
            *out_code = code_of(&concern);
            return true;
        }
    }
    return false;
}
