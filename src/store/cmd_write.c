/* Write commands: insert, update, delete and findAndModify. Each document is
 * written in its own transaction (retried on a write conflict), as mongod does
 * outside multi-document transactions; a batch that asked for j: true syncs the
 * journal once before it answers. Inside a multi-document transaction
 * (context->transaction) every write joins the held transaction and nothing is
 * retried: a conflict fails the command, any other failure ends the batch and
 * the transaction, as on mongod. */
#include "store/commands.h"
#include "store/command_collation.h"
#include "store/oplog.h"
#include "store/validation.h"
#include "query/match.h"
#include "query/projection.h"
#include "query/update.h"
#include "query/value_format.h"
#include "wire/wire.h"

#include <sched.h>
#include <string.h>
#include <time.h>

/* A write conflict means another transaction holds the document: retry, as
 * mongod's writeConflictRetry does, backing off so the holder can finish. */
#define WRITE_CONFLICT_RETRIES 10000

/* --- shared ------------------------------------------------------------------- */

typedef struct write_errors {
    bson_t array;
    uint32_t count;
} write_errors_t;

static void write_errors_add(write_errors_t *errors, const command_context_t *context, uint32_t index,
                             const bson_error_t *error)
{
    char key[16];
    const char *key_string;
    bson_t item;
    int32_t code = error->domain == TC_ERROR_DOMAIN ? (int32_t)error->code : TC_ERR_INTERNAL;
    bson_uint32_to_string(errors->count++, &key_string, key, sizeof key);
    bson_append_document_begin(&errors->array, key_string, -1, &item);
    BSON_APPEND_INT32(&item, "index", (int32_t)index);
    BSON_APPEND_INT32(&item, "code", code);
    if (code == TC_ERR_DUPLICATE_KEY) {
        storage_append_duplicate_key(context->session, &item);
    }
    validation_append_error_info(context, error, &item);
    BSON_APPEND_UTF8(&item, "errmsg", error->message);
    bson_append_document_end(&errors->array, &item);
}

static void write_errors_append(write_errors_t *errors, bson_t *reply)
{
    if (errors->count > 0) {
        BSON_APPEND_ARRAY(reply, "writeErrors", &errors->array);
    }
}

/* Sleeps a little longer after each failed attempt, up to 10 ms. */
static void back_off_after_conflict(int attempt)
{
    if (attempt < 4) {
        sched_yield();
        return;
    }
    long microseconds = attempt < 100 ? 100L * attempt : 10000L;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = microseconds * 1000L};
    nanosleep(&pause, NULL);
}

static bool is_write_conflict(const bson_error_t *error)
{
    return error->domain == TC_ERROR_DOMAIN && error->code == TC_ERR_WRITE_CONFLICT;
}

/* How many times a conflicting write is tried again: never inside a transaction,
 * whose client retries the whole transaction (TransientTransactionError). */
static int conflict_retries(const command_context_t *context)
{
    return context->transaction != NULL ? 0 : WRITE_CONFLICT_RETRIES;
}

/* The collection a write goes to, created if it does not exist. A transaction's
 * was created before it took the catalog lock (transactions.c): one dropped
 * since is a conflict, as the transaction could not see it anyway. */
static bool writable_collection(command_context_t *context, const char *ns, collection_t **out_collection,
                                bson_error_t *error)
{
    if (context->transaction == NULL) {
        return storage_obtain_collection(context->session, ns, out_collection, error);
    }
    *out_collection = storage_find_collection(context->store->storage, ns);
    if (*out_collection == NULL) {
        return tc_error_set(error, TC_ERR_WRITE_CONFLICT, "collection %s was dropped during the transaction", ns);
    }
    return true;
}

/* Reads the array field (documents, updates, deletes) every write command has. */
static bool get_batch(const command_context_t *context, const char *field, bson_iter_t *out_items,
                      uint32_t *out_count, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, context->command, field)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field '%s.%s' is missing but a required field",
                            context->name, field);
    }
    if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type '%s', expected type 'array'",
                            context->name, field, value_type_name(bson_iter_type(&iter)));
    }
    bson_iter_recurse(&iter, out_items);
    bson_iter_t counter = *out_items;
    uint32_t count = 0;
    while (bson_iter_next(&counter)) {
        count++;
    }
    /* An empty batch is refused as mongod does: a write that writes nothing is a client mistake. */
    if (count == 0 || count > WIRE_MAX_WRITE_BATCH_SIZE) {
        return tc_error_set(error, TC_ERR_INVALID_LENGTH,
                            "Write batch sizes must be between 1 and %d. Got %u operations.", WIRE_MAX_WRITE_BATCH_SIZE,
                            count);
    }
    *out_count = count;
    return true;
}

/* --- insert ------------------------------------------------------------------- */

bool command_prepare_insert_document(const bson_t *document, bson_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    bson_init(out);
    if (bson_iter_init_find(&iter, document, "_id")) {
        bson_type_t type = bson_iter_type(&iter);
        if (type == BSON_TYPE_ARRAY) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "can't use an array for _id");
        }
        if (type == BSON_TYPE_REGEX || type == BSON_TYPE_UNDEFINED) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "can't use a %s for _id",
                                type == BSON_TYPE_REGEX ? "regex" : "undefined");
        }
        bson_append_iter(out, "_id", 3, &iter);
    } else {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        BSON_APPEND_OID(out, "_id", &oid);
    }
    bson_iter_init(&iter, document);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "_id") == 0) {
            continue;
        }
        if (key[0] == '$') {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Document can't have $ prefixed field names: %s", key);
        }
        bson_append_iter(out, key, -1, &iter);
    }
    if (out->len > WIRE_MAX_BSON_OBJECT_SIZE) {
        return tc_error_set(error, TC_ERR_LOCATION_BSON_TOO_LARGE, "object to insert too large. size in bytes: %u, max size: %d",
                            out->len, WIRE_MAX_BSON_OBJECT_SIZE);
    }
    return true;
}

static bool insert_one(command_context_t *context, const char *ns, const bson_t *document, bson_error_t *error)
{
    for (int attempt = 0;; attempt++) {
        collection_t *collection;
        bool ok = writable_collection(context, ns, &collection, error) && storage_begin(context->session, error);
        if (ok) {
            ok = validation_check_write(context, collection, NULL, document, error) &&
                 storage_insert_record(context->session, collection, document, NULL, error) &&
                 oplog_log_insert(context->session, collection, document, context->command, error);
            if (ok) {
                ok = storage_commit(context->session, false, error);
            } else {
                storage_rollback(context->session);
            }
        }
        if (ok || !is_write_conflict(error) || attempt >= conflict_retries(context)) {
            return ok;
        }
        back_off_after_conflict(attempt);
    }
}

/* A statement of a write command's batch: one document of insert, one entry of
 * update's updates or delete's deletes. It adds what it did to totals. */
typedef bool (*statement_fn)(command_context_t *context, const char *ns, bson_iter_t *statement, uint32_t index,
                             void *totals, bson_error_t *error);

/* Runs every statement of the batch in array_field, in order, under the catalog
 * lock; a failed statement goes to writeErrors and, when ordered (the default),
 * ends the batch, as mongod does (an interrupted one, killOp's, fails the whole
 * command). A j: true batch syncs the journal once, after
 * its last write. errors is initialised here; the caller destroys its array. */
static bool run_write_batch(command_context_t *context, const char *array_field, statement_fn run, void *totals,
                            write_errors_t *errors, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t statements;
    uint32_t count;
    bool ordered;
    char *ns = NULL;

    bson_init(&errors->array);
    errors->count = 0;
    if (!command_namespace(context, &ns, error) || !get_batch(context, array_field, &statements, &count, error) ||
        !command_get_bool(context, "ordered", true, &ordered, error)) {
        bson_free(ns);
        return false;
    }
    storage_lock_shared(storage);
    /* A view is refused before any statement runs: the whole command fails, as on mongod. */
    bool ok = views_refuse(storage, ns, error);
    for (uint32_t index = 0; ok && bson_iter_next(&statements); index++) {
        bson_error_t statement_error;
        if (!run(context, ns, &statements, index, totals, &statement_error)) {
            if (context->transaction != NULL && is_write_conflict(&statement_error)) {
                *error = statement_error; /* the whole command fails: the client retries the transaction */
                ok = false;
                break;
            }
            if (statement_error.code == TC_ERR_INTERRUPTED) {
                *error = statement_error; /* killOp fails the whole batch, as mongod rethrows interruptions */
                ok = false;
                break;
            }
            write_errors_add(errors, context, index, &statement_error);
            if (context->transaction != NULL) {
                context->abort_transaction = true;
                break;
            }
            if (ordered) {
                break;
            }
        }
    }
    storage_unlock(storage);
    bson_free(ns);
    return ok && (!command_wants_durable_write(context) || command_sync_journal(context, context->session, error));
}

static bool run_insert_statement(command_context_t *context, const char *ns, bson_iter_t *statement, uint32_t index,
                                 void *totals, bson_error_t *error)
{
    bson_t document, prepared;
    uint32_t length;
    const uint8_t *data;
    atomic_fetch_add(&context->store->opcounters.insert, 1);
    if (!BSON_ITER_HOLDS_DOCUMENT(statement)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field 'insert.documents.%u' is the wrong type, expected type 'object'", index);
    }
    bson_iter_document(statement, &length, &data);
    bson_init_static(&document, data, length);
    bool ok = command_prepare_insert_document(&document, &prepared, error) && insert_one(context, ns, &prepared, error);
    bson_destroy(&prepared);
    *(int64_t *)totals += ok;
    return ok;
}

static bool handle_insert(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    write_errors_t errors;
    int64_t inserted = 0;
    bool ok = run_write_batch(context, "documents", run_insert_statement, &inserted, &errors, error);
    if (ok) {
        BSON_APPEND_INT32(reply, "n", (int32_t)inserted);
        write_errors_append(&errors, reply);
    }
    bson_destroy(&errors.array);
    return ok;
}

/* --- matching documents ------------------------------------------------------ */

typedef struct record_list {
    int64_t *ids;
    size_t count;
    size_t capacity;
} record_list_t;

static bool collect_record_id(void *context, const bson_t *document, int64_t record_id)
{
    record_list_t *list = context;
    (void)document;
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? list->capacity * 2 : 16;
        list->ids = bson_realloc(list->ids, list->capacity * sizeof(int64_t));
    }
    list->ids[list->count++] = record_id;
    return true;
}

/* A write's hint: an index's key pattern or its name, as mongod takes both. */
typedef struct write_hint {
    bson_t pattern; /* empty when absent or a name */
    const char *name; /* NULL unless a name */
} write_hint_t;

/* Reads the hint field at iter (found) into hint; a view into the command. */
static bool read_write_hint(const bson_iter_t *iter, write_hint_t *hint, bson_error_t *error)
{
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        hint->name = bson_iter_utf8(iter, NULL);
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "hint must be either a string or nested object");
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(iter, &length, &data);
    bson_init_static(&hint->pattern, data, length);
    return true;
}

/* The hint of a statement of an update or a delete, or of findAndModify (statement NULL). */
static bool read_hint(const command_context_t *context, bson_iter_t *statement, write_hint_t *hint,
                      bson_error_t *error)
{
    static const uint8_t empty[5] = {5, 0, 0, 0, 0};
    bson_iter_t iter;
    bson_init_static(&hint->pattern, empty, sizeof empty);
    hint->name = NULL;
    bool found = statement != NULL ? bson_iter_recurse(statement, &iter) && bson_iter_find(&iter, "hint")
                                   : bson_iter_init_find(&iter, context->command, "hint");
    return !found || read_write_hint(&iter, hint, error);
}

/* The record ids matching filter (in sort order, at most limit; 0: all), read in
 * one snapshot. Writes then re-read and re-check each document in their own
 * transaction, so a write never scans an index it is changing. */
static bool find_matching_records(command_context_t *context, collection_t *collection, const bson_t *filter,
                                  const bson_t *sort, const write_hint_t *hint, int64_t limit, record_list_t *out,
                                  bson_error_t *error)
{
    find_options_t options = {.filter = filter,
                              .sort = sort,
                              .hint = bson_count_keys(&hint->pattern) > 0 ? &hint->pattern : NULL,
                              .hint_name = hint->name,
                              .limit = limit,
                              .expression_context = context->expression_context};
    bool exhausted;
    find_plan_t *plan = find_plan_new(context->session, collection, &options, error);
    if (plan == NULL) {
        return false;
    }
    bool ok = storage_begin(context->session, error);
    if (ok) {
        ok = find_plan_run(plan, context->session, collection, collect_record_id, out, &exhausted, error);
        storage_rollback(context->session);
    }
    find_plan_destroy(plan);
    return ok;
}

/* The outcome of writing one matched document. */
typedef enum document_outcome {
    DOCUMENT_GONE,      /* deleted or changed so it no longer matches */
    DOCUMENT_UNCHANGED, /* matched; the update changed nothing */
    DOCUMENT_WRITTEN,
} document_outcome_t;

typedef struct document_write {
    const match_expression_t *matcher;
    const update_spec_t *update; /* NULL: delete */
    bson_t before;               /* filled when the caller asks (findAndModify) */
    bson_t after;
    bool keep_images;
} document_write_t;

static bool write_matched_document(command_context_t *context, collection_t *collection, int64_t record_id,
                                   document_write_t *write, document_outcome_t *out_outcome, bson_error_t *error)
{
    for (int attempt = 0;; attempt++) {
        bson_t current, updated;
        bool found, changed = false;
        /* The array index the query matched, for the positional '$' of the update. */
        match_details_t details;
        bool ok = storage_begin(context->session, error);
        *out_outcome = DOCUMENT_GONE;
        bson_init(&updated);
        if (ok) {
            ok = storage_read_record(context->session, collection, record_id, &current, &found, error);
            if (ok && found && match_document_with_details(write->matcher, &current, &details)) {
                if (write->update == NULL) {
                    ok = storage_delete_record(context->session, collection, record_id, &current, error) &&
                         oplog_log_delete(context->session, collection, &current, context->command, error);
                    *out_outcome = DOCUMENT_WRITTEN;
                } else {
                    update_apply_options_t options = {
                        .matched_array_index = details.has_array_index ? details.array_index : NULL,
                    };
                    bson_t description; /* what the oplog records for a change stream */
                    bson_destroy(&updated);
                    ok = update_apply_with_options(write->update, &current, &options, &updated, &description,
                                                   &changed, error);
                    if (ok && changed) {
                        if (updated.len > WIRE_MAX_BSON_OBJECT_SIZE) {
                            ok = tc_error_set(error, TC_ERR_LOCATION_BSON_TOO_LARGE,
                                              "Resulting document after update is larger than %d",
                                              WIRE_MAX_BSON_OBJECT_SIZE);
                        } else {
                            ok = validation_check_write(context, collection, &current, &updated, error) &&
                                 storage_update_record(context->session, collection, record_id, &current,
                                                       &updated, error) &&
                                 oplog_log_update(context->session, collection, &current, &updated,
                                                  update_is_replacement(write->update) ? NULL : &description,
                                                  context->command, error);
                        }
                    }
                    bson_destroy(&description);
                    *out_outcome = changed ? DOCUMENT_WRITTEN : DOCUMENT_UNCHANGED;
                }
                if (ok && write->keep_images) {
                    bson_destroy(&write->before);
                    bson_destroy(&write->after);
                    bson_copy_to(&current, &write->before);
                    bson_copy_to(write->update != NULL && changed ? &updated : &current, &write->after);
                }
            } else if (ok && found && match_failed(write->matcher, error)) {
                ok = false; /* its $expr failed on this document: so does the write */
            }
            bson_destroy(&current);
            if (ok) {
                ok = storage_commit(context->session, false, error);
            } else {
                storage_rollback(context->session);
            }
        }
        bson_destroy(&updated);
        if (ok || !is_write_conflict(error) || attempt >= conflict_retries(context)) {
            return ok;
        }
        back_off_after_conflict(attempt);
    }
}

/* Inserts the document an upsert creates; *out_document receives it. */
static bool upsert_document(command_context_t *context, const char *ns, const update_spec_t *update,
                            const bson_t *filter, bson_t *out_document, bson_error_t *error)
{
    bson_t seed;
    bool ok = update_build_upsert_seed(update, filter, &seed, error);
    if (ok) {
        ok = update_apply(update, &seed, true, out_document, NULL, NULL, error);
    } else {
        bson_init(out_document);
    }
    bson_destroy(&seed);
    if (ok) {
        ok = insert_one(context, ns, out_document, error);
    }
    return ok;
}

static void append_upserted_id(bson_t *upserted_array, uint32_t *upserted_count, uint32_t index,
                               const bson_t *document)
{
    bson_iter_t id;
    bson_t item;
    char key[16];
    const char *key_string;
    bson_uint32_to_string((*upserted_count)++, &key_string, key, sizeof key);
    bson_append_document_begin(upserted_array, key_string, -1, &item);
    BSON_APPEND_INT32(&item, "index", (int32_t)index);
    if (bson_iter_init_find(&id, document, "_id")) {
        bson_append_iter(&item, "_id", 3, &id);
    }
    bson_append_document_end(upserted_array, &item);
}

/* Reads a statement's sub-document field (q, u, hint...) with the error mongod gives. */
static bool statement_document(bson_iter_t *statement, const char *command, const char *array, const char *field,
                               bool required, bson_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    static const uint8_t empty[5] = {5, 0, 0, 0, 0};
    bson_init_static(out, empty, sizeof empty);
    if (!bson_iter_recurse(statement, &iter) || !bson_iter_find(&iter, field)) {
        if (required) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field '%s.%s.%s' is missing but a required field",
                                command, array, field);
        }
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s.%s' is the wrong type, expected type 'object'",
                            command, array, field);
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(out, data, length);
    return true;
}

static bool statement_flag(bson_iter_t *statement, const char *field)
{
    bson_iter_t iter;
    return bson_iter_recurse(statement, &iter) && bson_iter_find(&iter, field) && bson_iter_as_bool(&iter);
}

/* --- update ------------------------------------------------------------------- */

typedef struct update_totals {
    int64_t matched;
    int64_t modified;
    bson_t upserted;
    uint32_t upserted_count;
} update_totals_t;

static bool run_update_statement(command_context_t *context, const char *ns, bson_iter_t *statement, uint32_t index,
                                 void *totals_pointer, bson_error_t *error)
{
    update_totals_t *totals = totals_pointer;
    bson_t filter, array_filters_document;
    write_hint_t hint;
    bson_iter_t iter;
    update_spec_t *update = NULL;
    match_expression_t *matcher = NULL;
    record_list_t matches = {0};
    statement_collation_t statement_collation = {.command_context = context->expression_context};
    bool ok = false;

    if (!BSON_ITER_HOLDS_DOCUMENT(statement)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field 'update.updates.%u' is the wrong type, expected type 'object'",
                            index);
    }
    TC_CHECK(command_statement_collation_begin(context, statement, "updates", index, &statement_collation, error));
    TC_CHECK(statement_document(statement, "update", "updates", "q", true, &filter, error));
    TC_CHECK(read_hint(context, statement, &hint, error));
    bool multi = statement_flag(statement, "multi");
    bool upsert = statement_flag(statement, "upsert");
    const bson_t *array_filters = NULL;
    if (bson_iter_recurse(statement, &iter) && bson_iter_find(&iter, "arrayFilters") && BSON_ITER_HOLDS_ARRAY(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_iter_array(&iter, &length, &data);
        bson_init_static(&array_filters_document, data, length);
        array_filters = &array_filters_document;
    }
    if (!bson_iter_recurse(statement, &iter) || !bson_iter_find(&iter, "u")) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field 'update.updates.u' is missing but a required field");
        goto done;
    }
    update = update_compile_with_context(bson_iter_value(&iter), array_filters, context->expression_context,
                                         error);
    TC_CHECK(update != NULL);
    if (multi && update_is_replacement(update)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "multi update is not supported for replacement-style update");
        goto done;
    }
    matcher = match_compile_with_context(&filter, context->expression_context, error);
    TC_CHECK(matcher != NULL);
    atomic_fetch_add(&context->store->opcounters.update, 1);

    collection_t *collection = storage_find_collection(context->store->storage, ns);
    if (collection != NULL) {
        TC_CHECK(find_matching_records(context, collection, &filter, NULL, &hint,
                                       multi ? 0 : 1, &matches, error));
    }
    document_write_t write = {.matcher = matcher, .update = update};
    int64_t matched = 0;
    for (size_t i = 0; i < matches.count; i++) {
        document_outcome_t outcome;
        TC_CHECK(write_matched_document(context, collection, matches.ids[i], &write, &outcome, error));
        if (outcome != DOCUMENT_GONE) {
            matched++;
            totals->modified += outcome == DOCUMENT_WRITTEN;
        }
    }
    totals->matched += matched;
    if (matched == 0 && upsert) {
        bson_t inserted;
        ok = upsert_document(context, ns, update, &filter, &inserted, error);
        if (ok) {
            append_upserted_id(&totals->upserted, &totals->upserted_count, index, &inserted);
        }
        bson_destroy(&inserted);
        goto done;
    }
    ok = true;
done:
    bson_free(matches.ids);
    match_destroy(matcher);
    update_destroy(update);
    command_statement_collation_end(context, &statement_collation);
    return ok;
}

static bool handle_update(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    write_errors_t errors;
    update_totals_t totals = {0};
    bson_init(&totals.upserted);
    bool ok = run_write_batch(context, "updates", run_update_statement, &totals, &errors, error);
    if (ok) {
        BSON_APPEND_INT32(reply, "n", (int32_t)(totals.matched + totals.upserted_count));
        BSON_APPEND_INT32(reply, "nModified", (int32_t)totals.modified);
        if (totals.upserted_count > 0) {
            BSON_APPEND_ARRAY(reply, "upserted", &totals.upserted);
        }
        write_errors_append(&errors, reply);
    }
    bson_destroy(&totals.upserted);
    bson_destroy(&errors.array);
    return ok;
}

/* --- delete ------------------------------------------------------------------- */

static bool run_delete_statement(command_context_t *context, const char *ns, bson_iter_t *statement, uint32_t index,
                                 void *totals, bson_error_t *error)
{
    int64_t *deleted = totals;
    bson_t filter;
    write_hint_t hint;
    bson_iter_t iter;
    match_expression_t *matcher = NULL;
    record_list_t matches = {0};
    statement_collation_t statement_collation = {.command_context = context->expression_context};
    bool ok = false;

    if (!BSON_ITER_HOLDS_DOCUMENT(statement)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field 'delete.deletes.%u' is the wrong type, expected type 'object'",
                            index);
    }
    TC_CHECK(command_statement_collation_begin(context, statement, "deletes", index, &statement_collation, error));
    TC_CHECK(statement_document(statement, "delete", "deletes", "q", true, &filter, error));
    TC_CHECK(read_hint(context, statement, &hint, error));
    if (!bson_iter_recurse(statement, &iter) || !bson_iter_find(&iter, "limit")) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field 'delete.deletes.limit' is missing but a required field");
        goto done;
    }
    int64_t limit = bson_iter_as_int64(&iter);
    if (limit != 0 && limit != 1) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "The limit field in delete objects must be 0 or 1. Got %lld",
                     (long long)limit);
        goto done;
    }
    matcher = match_compile_with_context(&filter, context->expression_context, error);
    TC_CHECK(matcher != NULL);
    atomic_fetch_add(&context->store->opcounters.delete_, 1);
    collection_t *collection = storage_find_collection(context->store->storage, ns);
    if (collection != NULL) {
        TC_CHECK(find_matching_records(context, collection, &filter, NULL, &hint, limit,
                                       &matches, error));
    }
    document_write_t write = {.matcher = matcher};
    for (size_t i = 0; i < matches.count; i++) {
        document_outcome_t outcome;
        TC_CHECK(write_matched_document(context, collection, matches.ids[i], &write, &outcome, error));
        *deleted += outcome == DOCUMENT_WRITTEN;
    }
    ok = true;
done:
    bson_free(matches.ids);
    match_destroy(matcher);
    command_statement_collation_end(context, &statement_collation);
    return ok;
}

static bool handle_delete(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    write_errors_t errors;
    int64_t deleted = 0;
    bool ok = run_write_batch(context, "deletes", run_delete_statement, &deleted, &errors, error);
    if (ok) {
        BSON_APPEND_INT32(reply, "n", (int32_t)deleted);
        write_errors_append(&errors, reply);
    }
    bson_destroy(&errors.array);
    return ok;
}

/* --- findAndModify ----------------------------------------------------------------- */

static bool append_projected(bson_t *reply, const char *key, const bson_t *document, const projection_t *projection,
                             bson_error_t *error)
{
    if (projection == NULL) {
        return bson_append_document(reply, key, -1, document);
    }
    bson_t projected;
    bool ok = projection_apply(projection, document, &projected, error);
    if (ok) {
        bson_append_document(reply, key, -1, &projected);
    }
    bson_destroy(&projected);
    return ok;
}

static bool handle_find_and_modify(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t iter;
    char *ns = NULL;
    bson_t query, sort, fields, array_filters_document;
    write_hint_t hint;
    const bson_t *array_filters = NULL;
    bool remove, return_new, upsert;
    update_spec_t *update = NULL;
    match_expression_t *matcher = NULL;
    projection_t *projection = NULL;
    record_list_t matches = {0};
    document_write_t write = {.keep_images = true};
    bool locked = false;
    bool ok = false;

    bson_init(&write.before);
    bson_init(&write.after);
    TC_CHECK(command_namespace(context, &ns, error));
    TC_CHECK(command_get_document(context, "query", &query, error));
    TC_CHECK(command_get_document(context, "sort", &sort, error));
    TC_CHECK(command_get_document(context, "fields", &fields, error));
    TC_CHECK(read_hint(context, NULL, &hint, error));
    TC_CHECK(command_get_bool(context, "remove", false, &remove, error));
    TC_CHECK(command_get_bool(context, "new", false, &return_new, error));
    TC_CHECK(command_get_bool(context, "upsert", false, &upsert, error));
    bool has_update = bson_iter_init_find(&iter, context->command, "update");
    if (remove && has_update) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Cannot specify both an update and remove=true");
        goto done;
    }
    if (!remove && !has_update) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Either an update or remove=true must be specified");
        goto done;
    }
    if (remove && (upsert || return_new)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Cannot specify both upsert=true and remove=true");
        goto done;
    }
    if (has_update) {
        bson_iter_t filters;
        if (bson_iter_init_find(&filters, context->command, "arrayFilters") && BSON_ITER_HOLDS_ARRAY(&filters)) {
            uint32_t length;
            const uint8_t *data;
            bson_iter_array(&filters, &length, &data);
            bson_init_static(&array_filters_document, data, length);
            array_filters = &array_filters_document;
        }
        update = update_compile_with_context(bson_iter_value(&iter), array_filters,
                                             context->expression_context, error);
        TC_CHECK(update != NULL);
    }
    if (bson_count_keys(&fields) > 0) {
        /* The query goes along for a positional "a.$" projection. */
        projection = projection_compile_with_query(&fields, &query, error);
        TC_CHECK(projection != NULL);
    }
    matcher = match_compile_with_context(&query, context->expression_context, error);
    TC_CHECK(matcher != NULL);
    write.matcher = matcher;
    write.update = update;
    atomic_fetch_add(remove ? &context->store->opcounters.delete_ : &context->store->opcounters.update, 1);

    storage_lock_shared(storage);
    locked = true;
    TC_CHECK(views_refuse(storage, ns, error));
    collection_t *collection = storage_find_collection(storage, ns);
    document_outcome_t outcome = DOCUMENT_GONE;
    if (collection != NULL) {
        TC_CHECK(find_matching_records(context, collection, &query, &sort, &hint, 1,
                                       &matches, error));
        if (matches.count > 0) {
            TC_CHECK(write_matched_document(context, collection, matches.ids[0], &write, &outcome, error));
        }
    }
    bson_t last_error;
    if (outcome != DOCUMENT_GONE) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &last_error);
        BSON_APPEND_INT32(&last_error, "n", 1);
        if (!remove) {
            BSON_APPEND_BOOL(&last_error, "updatedExisting", true);
        }
        bson_append_document_end(reply, &last_error);
        TC_CHECK(append_projected(reply, "value", return_new ? &write.after : &write.before, projection, error));
    } else if (upsert) {
        bson_t inserted;
        bool inserted_ok = upsert_document(context, ns, update, &query, &inserted, error);
        if (inserted_ok) {
            bson_iter_t id;
            BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &last_error);
            BSON_APPEND_INT32(&last_error, "n", 1);
            BSON_APPEND_BOOL(&last_error, "updatedExisting", false);
            if (bson_iter_init_find(&id, &inserted, "_id")) {
                bson_append_iter(&last_error, "upserted", -1, &id);
            }
            bson_append_document_end(reply, &last_error);
            if (return_new) {
                inserted_ok = append_projected(reply, "value", &inserted, projection, error);
            } else {
                BSON_APPEND_NULL(reply, "value");
            }
        }
        bson_destroy(&inserted);
        TC_CHECK(inserted_ok);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &last_error);
        BSON_APPEND_INT32(&last_error, "n", 0);
        if (!remove) {
            BSON_APPEND_BOOL(&last_error, "updatedExisting", false);
        }
        bson_append_document_end(reply, &last_error);
        BSON_APPEND_NULL(reply, "value");
    }
    storage_unlock(storage);
    locked = false;
    if (command_wants_durable_write(context)) {
        TC_CHECK(command_sync_journal(context, context->session, error));
    }
    ok = true;
done:
    if (locked) {
        storage_unlock(storage);
    }
    bson_destroy(&write.before);
    bson_destroy(&write.after);
    bson_free(matches.ids);
    projection_destroy(projection);
    match_destroy(matcher);
    update_destroy(update);
    bson_free(ns);
    return ok;
}

const command_definition_t write_commands[] = {
    {"insert", handle_insert},
    {"update", handle_update},
    {"delete", handle_delete},
    {"findAndModify", handle_find_and_modify},
    {"findandmodify", handle_find_and_modify},
    {NULL, NULL},
};
