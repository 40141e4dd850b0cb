/* The writes the archive refused (I8: one refused write degrades one document,
 * never a namespace). A replayed write the archive refuses (a unique key only the
 * archive holds, a size limit) is recorded in the fast tier's
 * thermocline.refusals, w: majority, before the checkpoint moves past it; the
 * document's later writes are recorded behind it (per-document order), and every
 * other document goes on. The evictor keeps the documents with a record (they are
 * the only copy of their latest version). A retry (every feeder start, and
 * thermoclineRetryRefusals through the proxy) replays the records in order: those
 * the archive now takes are removed, and a document whose records are all gone
 * is fed and evicted as any other.
 *
 *   refused ─▶ record {_id: seq, ns, id, kind, write, queued: false, code, message}
 *   later write of the same document ─▶ record {..., queued: true}
 *   retry ─▶ replay in _id order ─▶ applied: remove │ refused again: keep (its error updated)
 */
#include "tier/feeder_private.h"

#include "common/log.h"

#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "FEEDER"
#define REFUSALS_COLLECTION TIER_REFUSALS_COLLECTION

/* --- the archive write of one op (the replay and its retries send the same) --- */

const char *feeder_op_kind_name(feeder_op_kind_t kind)
{
    return kind == FEEDER_OP_REPLACE ? "replace" : kind == FEEDER_OP_UPDATE ? "update" : "delete";
}

bool feeder_append_op(mongoc_bulk_operation_t *bulk, feeder_op_kind_t kind, const bson_value_t *id,
                      const bson_t *document, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, op_opts = BSON_INITIALIZER;
    bool added;
    BSON_APPEND_VALUE(&filter, "_id", id);
    /* What the fast tier accepted, the archive gets as is. */
    BSON_APPEND_BOOL(&op_opts, "validate", false);
    if (kind == FEEDER_OP_REPLACE) {
        BSON_APPEND_BOOL(&op_opts, "upsert", true);
        added = mongoc_bulk_operation_replace_one_with_opts(bulk, &filter, document, &op_opts, error);
    } else if (kind == FEEDER_OP_UPDATE) {
        added = mongoc_bulk_operation_update_one_with_opts(bulk, &filter, document, &op_opts, error);
    } else {
        bson_reinit(&op_opts);
        added = mongoc_bulk_operation_remove_one_with_opts(bulk, &filter, &op_opts, error);
    }
    bson_destroy(&filter);
    bson_destroy(&op_opts);
    return added;
}

/* --- the documents held -------------------------------------------------------- */

feeder_refused_t *feeder_refused_find(feeder_namespace_t *item, const bson_value_t *id)
{
    for (size_t i = 0; i < item->refused_count; i++) {
        if (tier_value_equal(&item->refused[i].id, id)) {
            return &item->refused[i];
        }
    }
    return NULL;
}

static feeder_refused_t *refused_add(feeder_namespace_t *item, const bson_value_t *id)
{
    if (item->refused_count == item->refused_capacity) {
        item->refused_capacity = item->refused_capacity == 0 ? 8 : item->refused_capacity * 2;
        item->refused = bson_realloc(item->refused, item->refused_capacity * sizeof *item->refused);
    }
    feeder_refused_t *entry = &item->refused[item->refused_count++];
    memset(entry, 0, sizeof *entry);
    bson_value_copy(id, &entry->id);
    return entry;
}

void feeder_refusals_free(feeder_namespace_t *item)
{
    for (size_t i = 0; i < item->refused_count; i++) {
        bson_value_destroy(&item->refused[i].id);
    }
    bson_free(item->refused);
    item->refused = NULL;
    item->refused_count = item->refused_capacity = 0;
}

static char *id_json(const bson_value_t *id)
{
    bson_t holder = BSON_INITIALIZER;
    BSON_APPEND_VALUE(&holder, "_id", id);
    char *json = bson_as_relaxed_extended_json(&holder, NULL);
    bson_destroy(&holder);
    return json;
}

void feeder_refusals_publish(feeder_t *feeder, feeder_namespace_t *item)
{
    tier_namespace_progress_t *progress = tier_progress_lock_namespace(feeder->context->progress, item->config->index);
    progress->refusals = 0;
    progress->refused_documents = (int64_t)item->refused_count;
    progress->refusal_oldest_ms = 0;
    progress->refusal_sample_count = 0;
    for (size_t i = 0; i < item->refused_count; i++) {
        const feeder_refused_t *entry = &item->refused[i];
        progress->refusals += entry->records;
        if (progress->refusal_oldest_ms == 0 || entry->first_ms < progress->refusal_oldest_ms) {
            progress->refusal_oldest_ms = entry->first_ms;
        }
        if (progress->refusal_sample_count < TIER_REFUSAL_SAMPLE) {
            tier_refusal_sample_t *sample = &progress->refusal_sample[progress->refusal_sample_count++];
            bson_t holder = BSON_INITIALIZER;
            BSON_APPEND_VALUE(&holder, "_id", &entry->id);
            sample->id_length = holder.len <= sizeof sample->id ? holder.len : 0;
            if (sample->id_length > 0) {
                memcpy(sample->id, bson_get_data(&holder), holder.len);
            }
            bson_destroy(&holder);
            sample->code = entry->code;
            sample->at_ms = entry->first_ms;
            bson_strncpy(sample->message, entry->message, sizeof sample->message);
        }
    }
    tier_progress_unlock(feeder->context->progress, false);
}

bool feeder_refusal_record(feeder_t *feeder, feeder_namespace_t *item, const feeder_op_t *op, int32_t code,
                           const char *message)
{
    feeder_refused_t *entry = feeder_refused_find(item, &op->id);
    int64_t now = clock_wall_ms();
    bson_t command = BSON_INITIALIZER, documents, record;
    BSON_APPEND_UTF8(&command, "insert", REFUSALS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "documents", &documents);
    BSON_APPEND_DOCUMENT_BEGIN(&documents, "0", &record);
    BSON_APPEND_INT64(&record, "_id", feeder->next_refusal);
    BSON_APPEND_UTF8(&record, "ns", item->config->ns);
    BSON_APPEND_VALUE(&record, "id", &op->id);
    BSON_APPEND_UTF8(&record, "kind", feeder_op_kind_name(op->kind));
    BSON_APPEND_DOCUMENT(&record, "write", &op->document);
    timestamp_append(&record, "firstTime", op->first_time);
    timestamp_append(&record, "lastTime", op->last_time);
    BSON_APPEND_BOOL(&record, "queued", code == 0);
    BSON_APPEND_INT32(&record, "code", code);
    BSON_APPEND_UTF8(&record, "message", code == 0 ? "queued behind a refused write of this document" : message);
    BSON_APPEND_DATE_TIME(&record, "at", now);
    bson_append_document_end(&documents, &record);
    bson_append_array_end(&command, &documents);
    feeder_append_write_concern(&command, true);
    /* Durable before the checkpoint can pass the write: a crash loses nothing. */
    bool ok = feeder_fast_write(feeder, &command, "record a write the archive refused");
    bson_destroy(&command);
    if (!ok) {
        return false;
    }
    feeder->next_refusal++;
    char *json = id_json(&op->id);
    if (entry == NULL) {
        entry = refused_add(item, &op->id);
        entry->first_ms = now;
        entry->code = code;
        bson_strncpy(entry->message, message != NULL ? message : "", sizeof entry->message);
    }
    entry->records++;
    if (op->last_time > entry->recorded_through) {
        entry->recorded_through = op->last_time;
    }
    if (code != 0) {
        TC_LOG_ATTRS(TC_LOG_ERROR, LOG_COMPONENT, 0,
                     "the archive refused the replay of a {kind} of {documentKey} in {ns}: {error} (code {code}). "
                     "Only this document is held: it stays in the fast tier (never evicted) and its later writes "
                     "queue behind this one in " TIER_DATABASE "." REFUSALS_COLLECTION "; the rest of {ns} goes on. "
                     "Fix the cause in the archive (say, the document holding the conflicting unique key), then run "
                     "db.adminCommand({thermoclineRetryRefusals: 1}) through the proxy or restart the feeder",
                     TC_ATTR_STR("kind", feeder_op_kind_name(op->kind)),
                     TC_ATTR_STR("documentKey", json != NULL ? json : "?"), TC_ATTR_STR("ns", item->config->ns),
                     TC_ATTR_STR("error", message), TC_ATTR_INT("code", code));
    } else {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "a {kind} of {documentKey} in {ns} is queued behind a refused write of that document "
                     "(" TIER_DATABASE "." REFUSALS_COLLECTION ")",
                     TC_ATTR_STR("kind", feeder_op_kind_name(op->kind)),
                     TC_ATTR_STR("documentKey", json != NULL ? json : "?"), TC_ATTR_STR("ns", item->config->ns));
    }
    bson_free(json);
    feeder_refusals_publish(feeder, item);
    return true;
}

/* Every record, in _id order, as one array (out initialised here). */
static bool read_records(feeder_t *feeder, bson_t *out, bson_error_t *error)
{
    bson_init(out);
    mongoc_collection_t *collection = mongoc_client_get_collection(feeder->fast, TIER_DATABASE, REFUSALS_COLLECTION);
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(collection, &filter, &opts, NULL);
    const bson_t *document;
    uint32_t count = 0;
    while (mongoc_cursor_next(cursor, &document)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT(out, key_string, document);
    }
    bool ok = !mongoc_cursor_error(cursor, error);
    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(collection);
    return ok;
}

/* The next record of an array read_records filled (a view). */
static bool next_record(bson_iter_t *iter, bson_t *out_record)
{
    while (bson_iter_next(iter)) {
        uint32_t length;
        const uint8_t *data;
        if (BSON_ITER_HOLDS_DOCUMENT(iter)) {
            bson_iter_document(iter, &length, &data);
            return bson_init_static(out_record, data, length);
        }
    }
    return false;
}

/* A record's namespace and document; NULL when its namespace left the config. */
static feeder_namespace_t *record_target(feeder_t *feeder, const bson_t *record, bson_value_t *out_id)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, record, "ns") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return NULL;
    }
    const config_namespace_t *policy = config_find_namespace(feeder->context->config, bson_iter_utf8(&iter, NULL));
    if (policy == NULL || !bson_iter_init_find(&iter, record, "id")) {
        return NULL;
    }
    *out_id = *bson_iter_value(&iter);
    return &feeder->namespaces[policy->index];
}

static void record_error(const bson_t *record, int32_t *out_code, const char **out_message)
{
    bson_iter_t iter;
    *out_code = bson_iter_init_find(&iter, record, "code") ? (int32_t)bson_iter_as_int64(&iter) : 0;
    *out_message = bson_iter_init_find(&iter, record, "message") && BSON_ITER_HOLDS_UTF8(&iter)
                       ? bson_iter_utf8(&iter, NULL)
                       : "";
}

bool feeder_refusals_load(feeder_t *feeder, bson_error_t *error)
{
    bson_t records;
    if (!read_records(feeder, &records, error)) {
        bson_destroy(&records);
        return false;
    }
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        feeder_refusals_free(&feeder->namespaces[i]);
    }
    feeder->next_refusal = 1;
    bson_iter_t iter, field;
    bson_iter_init(&iter, &records);
    bson_t record;
    while (next_record(&iter, &record)) {
        bson_value_t id;
        if (bson_iter_init_find(&field, &record, "_id") && bson_iter_as_int64(&field) >= feeder->next_refusal) {
            feeder->next_refusal = bson_iter_as_int64(&field) + 1;
        }
        feeder_namespace_t *item = record_target(feeder, &record, &id);
        if (item == NULL) {
            continue;
        }
        feeder_refused_t *entry = feeder_refused_find(item, &id);
        if (entry == NULL) {
            /* The document's first record (in _id order) is the one that holds it. */
            int32_t code;
            const char *message;
            entry = refused_add(item, &id);
            record_error(&record, &code, &message);
            entry->code = code;
            bson_strncpy(entry->message, message, sizeof entry->message);
            entry->first_ms = bson_iter_init_find(&field, &record, "at") && BSON_ITER_HOLDS_DATE_TIME(&field)
                                  ? bson_iter_date_time(&field)
                                  : clock_wall_ms();
        }
        entry->records++;
        uint64_t last_time = timestamp_find(&record, "lastTime");
        if (last_time > entry->recorded_through) {
            entry->recorded_through = last_time;
        }
    }
    bson_destroy(&records);
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        feeder_refusals_publish(feeder, &feeder->namespaces[i]);
    }
    return true;
}

typedef enum retry_outcome {
    RETRY_APPLIED,
    RETRY_REFUSED,     /* message and code filled */
    RETRY_UNREACHABLE, /* the round ends: tried again later */
} retry_outcome_t;

/* Replays one record in the archive. */
static retry_outcome_t replay_record(feeder_t *feeder, feeder_namespace_t *item, const bson_t *record,
                                     const bson_value_t *id, int32_t *out_code, char *message, size_t size)
{
    bson_iter_t iter;
    bson_t write = BSON_INITIALIZER, reply, opts = BSON_INITIALIZER;
    bson_error_t error;
    feeder_op_kind_t kind = FEEDER_OP_DELETE;
    if (bson_iter_init_find(&iter, record, "kind") && BSON_ITER_HOLDS_UTF8(&iter)) {
        const char *name = bson_iter_utf8(&iter, NULL);
        kind = strcmp(name, "replace") == 0 ? FEEDER_OP_REPLACE
               : strcmp(name, "update") == 0 ? FEEDER_OP_UPDATE
                                             : FEEDER_OP_DELETE;
    }
    if (bson_iter_init_find(&iter, record, "write") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_destroy(&write);
        bson_init_static(&write, data, length);
    }
    mongoc_collection_t *collection =
        mongoc_client_get_collection(feeder->archive, item->config->database, item->config->collection);
    BSON_APPEND_BOOL(&opts, "ordered", true);
    feeder_append_write_concern(&opts, feeder->archive_majority);
    mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts(collection, &opts);
    retry_outcome_t outcome = RETRY_APPLIED;
    bson_init(&reply);
    if (!feeder_append_op(bulk, kind, id, &write, &error)) {
        *out_code = TC_ERR_BAD_VALUE;
        bson_strncpy(message, error.message, size);
        outcome = RETRY_REFUSED;
    } else {
        bson_destroy(&reply);
        if (mongoc_bulk_operation_execute(bulk, &reply, &error) == 0) {
            bson_iter_t errors;
            tier_write_error_t write_error;
            if (tier_write_errors_init(&errors, &reply) && tier_write_errors_next(&errors, &write_error)) {
                *out_code = (int32_t)write_error.code;
                bson_strncpy(message, write_error.message, size);
                outcome = RETRY_REFUSED;
            } else if (tier_error_is_transient(&error)) {
                bson_strncpy(message, error.message, size);
                outcome = RETRY_UNREACHABLE;
            } else {
                *out_code = tier_error_code(&error);
                bson_strncpy(message, error.message, size);
                outcome = RETRY_REFUSED;
            }
        }
    }
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(bulk);
    mongoc_collection_destroy(collection);
    bson_destroy(&opts);
    bson_destroy(&write);
    return outcome;
}

/* Removes a record the archive took, or keeps it with the archive's new error. */
static bool settle_record(feeder_t *feeder, const bson_t *record, bool applied, int32_t code, const char *message)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, record, "_id")) {
        return true;
    }
    bson_t command = BSON_INITIALIZER, statements, statement, query, update, set;
    BSON_APPEND_UTF8(&command, applied ? "delete" : "update", REFUSALS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, applied ? "deletes" : "updates", &statements);
    BSON_APPEND_DOCUMENT_BEGIN(&statements, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_VALUE(&query, "_id", bson_iter_value(&iter));
    bson_append_document_end(&statement, &query);
    if (applied) {
        BSON_APPEND_INT32(&statement, "limit", 1);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
        BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
        BSON_APPEND_BOOL(&set, "queued", false);
        BSON_APPEND_INT32(&set, "code", code);
        BSON_APPEND_UTF8(&set, "message", message);
        BSON_APPEND_DATE_TIME(&set, "lastTried", clock_wall_ms());
        bson_append_document_end(&update, &set);
        bson_append_document_end(&statement, &update);
    }
    bson_append_document_end(&statements, &statement);
    bson_append_array_end(&command, &statements);
    feeder_append_write_concern(&command, true);
    bool ok = feeder_fast_write(feeder, &command, applied ? "remove a retried refusal" : "update a refusal");
    bson_destroy(&command);
    return ok;
}

bool feeder_refusals_retry(feeder_t *feeder)
{
    bson_t records;
    bson_error_t error;
    if (!read_records(feeder, &records, &error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot read %s.%s: %s", TIER_DATABASE,
                          REFUSALS_COLLECTION, error.message);
        bson_destroy(&records);
        return false;
    }
    bool reached = true;
    int64_t applied = 0, tried = 0;
    for (size_t i = 0; i < feeder->namespace_count; i++) {
        for (size_t j = 0; j < feeder->namespaces[i].refused_count; j++) {
            feeder->namespaces[i].refused[j].retry_refused = false;
        }
    }
    bson_iter_t iter;
    bson_t record;
    bson_iter_init(&iter, &records);
    while (reached && next_record(&iter, &record)) {
        bson_value_t id;
        feeder_namespace_t *item = record_target(feeder, &record, &id);
        feeder_refused_t *entry = item != NULL ? feeder_refused_find(item, &id) : NULL;
        if (entry == NULL || entry->retry_refused) {
            continue; /* its namespace left the config, or an earlier write of it is still refused */
        }
        int32_t code = 0;
        char message[FEEDER_REFUSAL_MESSAGE_SIZE];
        tried++;
        retry_outcome_t outcome = replay_record(feeder, item, &record, &id, &code, message, sizeof message);
        if (outcome == RETRY_UNREACHABLE) {
            tier_report_error(feeder->context, TIER_WORKER_FEEDER,
                              "retrying the refused writes: the archive is unreachable (%s); tried again later",
                              message);
            reached = false;
            break;
        }
        if (outcome == RETRY_REFUSED) {
            entry->retry_refused = true;
            char *json = id_json(&id);
            TC_LOG_ATTRS(TC_LOG_ERROR, LOG_COMPONENT, 0,
                         "the archive still refuses a write of {documentKey} in {ns}: {error} (code {code}); the "
                         "document stays held in the fast tier until the cause is fixed and thermoclineRetryRefusals "
                         "runs again",
                         TC_ATTR_STR("documentKey", json != NULL ? json : "?"), TC_ATTR_STR("ns", item->config->ns),
                         TC_ATTR_STR("error", message), TC_ATTR_INT("code", code));
            bson_free(json);
        }
        applied += outcome == RETRY_APPLIED;
        if (!settle_record(feeder, &record, outcome == RETRY_APPLIED, code, message)) {
            reached = false;
        }
    }
    bson_destroy(&records);
    if (tried > 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "retried {tried} refused or queued write(s): {applied} applied in the archive",
                     TC_ATTR_INT("tried", tried), TC_ATTR_INT("applied", applied));
    }
    /* What stands now, read back: the records are the truth, the memory a cache. */
    if (reached && !feeder_refusals_load(feeder, &error)) {
        tier_report_error(feeder->context, TIER_WORKER_FEEDER, "cannot read %s.%s: %s", TIER_DATABASE,
                          REFUSALS_COLLECTION, error.message);
        reached = false;
    }
    feeder->refusals_due = !reached;
    return reached;
}
