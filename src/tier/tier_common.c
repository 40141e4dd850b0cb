/* Helpers the three tier workers share (tier_private.h): libmongoc pools and
 * commands, cluster times and resume tokens, waiting for the feeder, the
 * worker-writes marks, exact-version filters and the pacer. */
#include "tier/tier_private.h"

#include "common/error.h"
#include "common/log.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- clients and commands ------------------------------------------------------- */

/* The URI with the workers' timeouts where it sets none; NULL and *error when it
 * does not parse (*out_shown: the URI without its password, caller frees). */
static mongoc_uri_t *worker_uri_new(const char *uri_string, char **out_shown, bson_error_t *error)
{
    bson_error_t uri_error;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_string, &uri_error);
    *out_shown = config_uri_redacted(uri_string); /* errors reach the log: no password in them */
    if (uri == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot use the URI %s: %s", *out_shown, uri_error.message);
        return NULL;
    }
    /* A worker blocked on an unreachable tier must notice a stop within seconds. */
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 1000);
    }
    if (!mongoc_uri_has_option(uri, MONGOC_URI_CONNECTTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, 1000);
    }
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, 60000);
    }
    return uri;
}

mongoc_client_pool_t *tier_pool_new(const char *uri_string, const char *app_name, bson_error_t *error)
{
    char *shown = NULL;
    mongoc_uri_t *uri = worker_uri_new(uri_string, &shown, error);
    bson_error_t uri_error;
    mongoc_client_pool_t *pool = uri != NULL ? mongoc_client_pool_new_with_error(uri, &uri_error) : NULL;
    if (uri != NULL && pool == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot connect to %s: %s", shown, uri_error.message);
    }
    mongoc_uri_destroy(uri);
    bson_free(shown);
    if (pool != NULL) {
        mongoc_client_pool_set_error_api(pool, MONGOC_ERROR_API_VERSION_2);
        mongoc_client_pool_set_appname(pool, app_name);
        mongoc_client_pool_max_size(pool, 8);
    }
    return pool;
}

mongoc_client_t *tier_client_new(const char *uri_string, const char *app_name, bson_error_t *error)
{
    char *shown = NULL;
    mongoc_uri_t *uri = worker_uri_new(uri_string, &shown, error);
    if (uri != NULL && !mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTRYONCE)) {
        /* Wait for a server up to serverSelectionTimeoutMS, as a pool does. */
        mongoc_uri_set_option_as_bool(uri, MONGOC_URI_SERVERSELECTIONTRYONCE, false);
    }
    bson_error_t uri_error;
    mongoc_client_t *client = uri != NULL ? mongoc_client_new_from_uri_with_error(uri, &uri_error) : NULL;
    if (uri != NULL && client == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot connect to %s: %s", shown, uri_error.message);
    }
    mongoc_uri_destroy(uri);
    bson_free(shown);
    if (client != NULL) {
        mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
        mongoc_client_set_appname(client, app_name);
    }
    return client;
}

bool tier_command(mongoc_client_t *client, const char *database, const bson_t *command, bson_t *reply,
                  bson_error_t *error)
{
    return mongoc_client_command_with_opts(client, database, command, NULL, NULL, reply, error);
}

bool tier_read_state(mongoc_client_t *client, const char *collection, const bson_t *filter, bson_t *out_array,
                     bson_error_t *error)
{
    return tier_read_state_part(client, collection, filter, NULL, TIER_STATE_READ_LIMIT, out_array, error);
}

bool tier_read_state_part(mongoc_client_t *client, const char *collection, const bson_t *filter,
                          const bson_t *projection, int32_t limit, bson_t *out_array, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_iter_t iter, batch;
    bson_init(out_array);
    BSON_APPEND_UTF8(&command, "find", collection);
    BSON_APPEND_DOCUMENT(&command, "filter", filter);
    if (projection != NULL) {
        BSON_APPEND_DOCUMENT(&command, "projection", projection);
    }
    /* One batch, closed with it: batchSize bounds the documents. */
    BSON_APPEND_INT32(&command, "batchSize", limit < TIER_STATE_READ_LIMIT ? limit : TIER_STATE_READ_LIMIT);
    BSON_APPEND_BOOL(&command, "singleBatch", true);
    bool ok = tier_command(client, TIER_DATABASE, &command, &reply, error);
    if (ok && bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) &&
        BSON_ITER_HOLDS_ARRAY(&batch)) {
        uint32_t length;
        const uint8_t *data;
        bson_t view;
        bson_iter_array(&batch, &length, &data);
        bson_init_static(&view, data, length);
        bson_concat(out_array, &view);
    } else if (ok) {
        ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "unexpected reply reading %s.%s", TIER_DATABASE,
                          collection);
    }
    bson_destroy(&command);
    bson_destroy(&reply);
    return ok;
}

void tier_append_state_write_concern(bson_t *command)
{
    bson_t concern;
    BSON_APPEND_DOCUMENT_BEGIN(command, "writeConcern", &concern);
    BSON_APPEND_INT32(&concern, "w", 1);
    bson_append_document_end(command, &concern);
}

bool tier_write_state(mongoc_client_t *client, const char *collection, bson_t *command, const char *count_field,
                      int64_t *out_count, bson_error_t *error)
{
    bson_t reply;
    tier_append_state_write_concern(command);
    bool ok = tier_command(client, TIER_DATABASE, command, &reply, error);
    bson_iter_t iter;
    tier_write_error_t write_error;
    if (ok && tier_write_errors_init(&iter, &reply) && tier_write_errors_next(&iter, &write_error)) {
        ok = tc_error_set(error, (int32_t)write_error.code, "writing to %s.%s: %s", TIER_DATABASE, collection,
                          write_error.message);
    }
    if (out_count != NULL) {
        *out_count = ok && count_field != NULL && bson_iter_init_find(&iter, &reply, count_field)
                         ? bson_iter_as_int64(&iter)
                         : 0;
    }
    bson_destroy(&reply);
    return ok;
}

bool tier_delete_state(mongoc_client_t *client, const char *collection, const bson_t *query, int32_t limit,
                       int64_t *out_deleted, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, deletes, statement;
    BSON_APPEND_UTF8(&command, "delete", collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "deletes", &deletes);
    BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
    BSON_APPEND_DOCUMENT(&statement, "q", query);
    BSON_APPEND_INT32(&statement, "limit", limit);
    bson_append_document_end(&deletes, &statement);
    bson_append_array_end(&command, &deletes);
    bool ok = tier_write_state(client, collection, &command, "n", out_deleted, error);
    bson_destroy(&command);
    return ok;
}

void tier_append_mark_has_history(bson_t *filter, bool has)
{
    bson_t exists;
    BSON_APPEND_DOCUMENT_BEGIN(filter, "history.0", &exists);
    BSON_APPEND_BOOL(&exists, "$exists", has);
    bson_append_document_end(filter, &exists);
}

bool tier_restore_done_marks(mongoc_client_t *fast, const bson_t *selector, int64_t *out_restored,
                             bson_error_t *error)
{
    static const char *const attempt_fields[] = {"since", "copy", "session", "holder"};
    bson_t command = BSON_INITIALIZER, updates, statement, query, update, set, unset;
    BSON_APPEND_UTF8(&command, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    bson_concat(&query, selector);
    BSON_APPEND_UTF8(&query, "state", "pending");
    tier_append_mark_has_history(&query, true);
    bson_append_document_end(&statement, &query);
    /* from, to and history still hold the last done range. The attempt's fields go:
     * a warm mark with a since after the warmer's last saved batch reads as an
     * unfinished copy (find_unfinished), which this attempt is not. */
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_UTF8(&set, "state", "done");
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$unset", &unset);
    for (size_t i = 0; i < sizeof attempt_fields / sizeof attempt_fields[0]; i++) {
        BSON_APPEND_UTF8(&unset, attempt_fields[i], "");
    }
    bson_append_document_end(&update, &unset);
    bson_append_document_end(&statement, &update);
    BSON_APPEND_BOOL(&statement, "multi", true);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    bool ok = tier_write_state(fast, TIER_MARKS_COLLECTION, &command, "nModified", out_restored, error);
    bson_destroy(&command);
    return ok;
}

bool tier_release_marks(mongoc_client_t *fast, const bson_t *selector, int64_t *out_released, bson_error_t *error)
{
    bson_t pending = BSON_INITIALIZER;
    int64_t restored = 0, removed = 0;
    bson_concat(&pending, selector);
    BSON_APPEND_UTF8(&pending, "state", "pending");
    tier_append_mark_has_history(&pending, false);
    bool ok = tier_restore_done_marks(fast, selector, &restored, error) &&
              tier_delete_state(fast, TIER_MARKS_COLLECTION, &pending, 0, &removed, error);
    if (out_released != NULL) {
        *out_released = ok ? restored + removed : 0;
    }
    bson_destroy(&pending);
    return ok;
}

int32_t tier_error_code(const bson_error_t *error)
{
    if (error->domain == MONGOC_ERROR_SERVER || error->domain == MONGOC_ERROR_WRITE_CONCERN ||
        error->domain == TC_ERROR_DOMAIN) {
        return (int32_t)error->code;
    }
    return 0;
}

bool tier_error_is_transient(const bson_error_t *error)
{
    if (error->domain == MONGOC_ERROR_STREAM || error->domain == MONGOC_ERROR_SERVER_SELECTION ||
        error->domain == MONGOC_ERROR_WRITE_CONCERN || error->domain == MONGOC_ERROR_CLIENT) {
        return true;
    }
    /* Beyond the drivers' list, a worker also waits out a timed-out or
     * interrupted command and an unsatisfied write concern: it repeats its own
     * idempotent batch later, where a driver must not repeat a user's write. */
    int32_t code = tier_error_code(error);
    return tc_error_code_is_retryable(code) || code == TC_ERR_MAX_TIME_MS_EXPIRED ||
           code == TC_ERR_WRITE_CONCERN_FAILED || code == TC_ERR_INTERRUPTED;
}

bool tier_write_errors_init(bson_iter_t *out_iter, const bson_t *reply)
{
    bson_iter_t field;
    return bson_iter_init_find(&field, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&field) &&
           bson_iter_recurse(&field, out_iter);
}

bool tier_write_errors_next(bson_iter_t *iter, tier_write_error_t *out)
{
    while (bson_iter_next(iter)) {
        bson_iter_t field;
        if (!BSON_ITER_HOLDS_DOCUMENT(iter) || !bson_iter_recurse(iter, &field)) {
            continue;
        }
        out->index = -1;
        out->code = 0;
        out->message = "write error";
        while (bson_iter_next(&field)) {
            const char *key = bson_iter_key(&field);
            if (strcmp(key, "index") == 0) {
                out->index = bson_iter_as_int64(&field);
            } else if (strcmp(key, "code") == 0) {
                out->code = bson_iter_as_int64(&field);
            } else if (strcmp(key, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&field)) {
                out->message = bson_iter_utf8(&field, NULL);
            }
        }
        return true;
    }
    return false;
}

/* --- cluster times --------------------------------------------------------------- */

uint64_t tier_token_time(const bson_t *token)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, token, "_data") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return 0;
    }
    uint32_t length;
    const char *hex = bson_iter_utf8(&iter, &length);
    if (length < 18 || (hex[0] != '8') || (hex[1] != '2')) {
        return 0;
    }
    uint64_t time = 0;
    for (int i = 2; i < 18; i++) {
        char digit = hex[i];
        int value = digit >= '0' && digit <= '9'   ? digit - '0'
                    : digit >= 'A' && digit <= 'F' ? digit - 'A' + 10
                    : digit >= 'a' && digit <= 'f' ? digit - 'a' + 10
                                                   : -1;
        if (value < 0) {
            return 0;
        }
        time = time << 4 | (uint64_t)value;
    }
    return time;
}

bool tier_cluster_time(mongoc_client_t *client, uint64_t *out_time, bson_error_t *error)
{
    bson_t ping = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&ping, "ping", 1);
    bool ok = tier_command(client, "admin", &ping, &reply, error);
    *out_time = ok ? timestamp_find(&reply, "operationTime") : 0;
    bson_destroy(&ping);
    bson_destroy(&reply);
    return ok;
}

/* --- namespaces ----------------------------------------------------------------- */

void tier_split_namespace(const char *ns, char *out_database, size_t size, const char **out_collection)
{
    const char *dot = strchr(ns, '.');
    size_t length = dot != NULL ? (size_t)(dot - ns) : strlen(ns);
    if (length >= size) {
        length = size - 1;
    }
    memcpy(out_database, ns, length);
    out_database[length] = '\0';
    *out_collection = dot != NULL ? dot + 1 : "";
}

bool tier_value_equal(const bson_value_t *left, const bson_value_t *right)
{
    if (left->value_type != right->value_type) {
        return false;
    }
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
    BSON_APPEND_VALUE(&a, "v", left);
    BSON_APPEND_VALUE(&b, "v", right);
    bool equal = a.len == b.len && memcmp(bson_get_data(&a), bson_get_data(&b), a.len) == 0;
    bson_destroy(&a);
    bson_destroy(&b);
    return equal;
}

/* The id of every thermocline.refusals record matching filter, as a BSON array. */
static bool read_refused_ids(mongoc_client_t *fast, const bson_t *filter, bson_t *out_ids, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, projection, reply;
    bson_iter_t iter, batch, id;
    bson_init(out_ids);
    BSON_APPEND_UTF8(&command, "find", TIER_REFUSALS_COLLECTION);
    BSON_APPEND_DOCUMENT(&command, "filter", filter);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "projection", &projection);
    BSON_APPEND_INT32(&projection, "id", 1);
    bson_append_document_end(&command, &projection);
    BSON_APPEND_INT32(&command, "batchSize", 10000);
    BSON_APPEND_BOOL(&command, "singleBatch", true);
    bool ok = tier_command(fast, TIER_DATABASE, &command, &reply, error);
    if (ok && bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) &&
        bson_iter_recurse(&batch, &iter)) {
        uint32_t count = 0;
        while (bson_iter_next(&iter)) {
            char key[16];
            const char *key_string;
            if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &id) && bson_iter_find(&id, "id")) {
                bson_uint32_to_string(count++, &key_string, key, sizeof key);
                bson_append_value(out_ids, key_string, -1, bson_iter_value(&id));
            }
        }
    } else if (ok) {
        ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "unexpected reply reading %s.%s", TIER_DATABASE,
                          TIER_REFUSALS_COLLECTION);
    }
    bson_destroy(&command);
    bson_destroy(&reply);
    return ok;
}

bool tier_refused_id_list(mongoc_client_t *fast, const char *ns, bson_t *out_ids, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, "ns", ns);
    bool ok = read_refused_ids(fast, &filter, out_ids, error);
    bson_destroy(&filter);
    return ok;
}

bool tier_refused_ids(mongoc_client_t *fast, const char *ns, const bson_value_t *ids, size_t count, bool *out_held,
                      bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, condition, list, held;
    BSON_APPEND_UTF8(&filter, "ns", ns);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "id", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &list);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_value(&list, key_string, -1, &ids[i]);
    }
    bson_append_array_end(&condition, &list);
    bson_append_document_end(&filter, &condition);
    bool ok = read_refused_ids(fast, &filter, &held, error);
    bson_iter_t iter;
    bson_iter_init(&iter, &held);
    while (ok && bson_iter_next(&iter)) {
        for (size_t i = 0; i < count; i++) {
            out_held[i] = out_held[i] || tier_value_equal(&ids[i], bson_iter_value(&iter));
        }
    }
    bson_destroy(&held);
    bson_destroy(&filter);
    return ok;
}

bool tier_time_value(const bson_t *document, const char *path, int64_t *out_ms)
{
    bson_iter_t iter, found, element;
    if (!bson_iter_init(&iter, document) || !bson_iter_find_descendant(&iter, path, &found)) {
        return false;
    }
    if (BSON_ITER_HOLDS_DATE_TIME(&found)) {
        *out_ms = bson_iter_date_time(&found);
        return true;
    }
    bool any = false;
    if (BSON_ITER_HOLDS_ARRAY(&found) && bson_iter_recurse(&found, &element)) {
        while (bson_iter_next(&element)) {
            if (BSON_ITER_HOLDS_DATE_TIME(&element) && (!any || bson_iter_date_time(&element) > *out_ms)) {
                *out_ms = bson_iter_date_time(&element);
                any = true;
            }
        }
    }
    return any;
}

/* --- feeder progress ----------------------------------------------------------------- */

void tier_progress_apply_feeder_documents(tier_progress_t *progress, const config_t *config, const bson_t *documents)
{
    bson_iter_t iter, field;
    uint64_t stream_time = 0;
    bool *stopped = bson_malloc0(config->namespace_count + 1);
    bson_iter_init(&iter, documents);
    while (bson_iter_next(&iter)) {
        bson_t document;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        if (!bson_iter_init_find(&field, &document, "_id") || !BSON_ITER_HOLDS_UTF8(&field)) {
            continue;
        }
        const char *id = bson_iter_utf8(&field, NULL);
        if (strcmp(id, "stream") == 0) {
            stream_time = timestamp_find(&document, "appliedTime");
            continue;
        }
        const char *ns = NULL;
        const char *message = "the archive rejected a write";
        if (bson_iter_init_find(&field, &document, "ns") && BSON_ITER_HOLDS_UTF8(&field)) {
            ns = bson_iter_utf8(&field, NULL);
        }
        if (bson_iter_init_find(&field, &document, "error") && BSON_ITER_HOLDS_UTF8(&field)) {
            message = bson_iter_utf8(&field, NULL);
        }
        const config_namespace_t *policy = config_find_namespace(config, ns);
        if (strncmp(id, "stopped:", 8) != 0 || policy == NULL) {
            continue;
        }
        stopped[policy->index] = true;
        tier_namespace_progress_t *item = tier_progress_lock_namespace(progress, policy->index);
        bool changed = !item->feed_stopped;
        item->feed_stopped = true;
        item->applied_time = timestamp_find(&document, "appliedTime");
        snprintf(item->feed_error, sizeof item->feed_error, "%s", message);
        tier_progress_unlock(progress, changed);
    }
    for (size_t i = 0; i < config->namespace_count; i++) {
        if (!stopped[i]) {
            tier_namespace_progress_t *item = tier_progress_lock_namespace(progress, i);
            bool changed = item->feed_stopped;
            item->feed_stopped = false;
            item->feed_error[0] = '\0';
            tier_progress_unlock(progress, changed);
        }
    }
    bson_free(stopped);
    tier_progress_set_applied(progress, stream_time);
}

void tier_progress_apply_warmer_documents(tier_progress_t *progress, const config_t *config, const bson_t *documents)
{
    bson_iter_t iter, field;
    bson_iter_init(&iter, documents);
    while (bson_iter_next(&iter)) {
        bson_t document;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        if (!bson_iter_init_find(&field, &document, "_id") || !BSON_ITER_HOLDS_UTF8(&field)) {
            continue;
        }
        const config_namespace_t *policy = config_find_namespace(config, bson_iter_utf8(&field, NULL));
        if (policy == NULL) {
            continue;
        }
        bool complete = bson_iter_init_find(&field, &document, "complete") && bson_iter_as_bool(&field);
        tier_namespace_progress_t *item = tier_progress_lock_namespace(progress, policy->index);
        uint64_t copy_time = complete ? timestamp_find(&document, "lastCopyTime") : 0;
        bool changed = item->coverage_valid != complete || item->warm_copy_time != copy_time;
        item->coverage_valid = complete;
        item->warm_copy_time = copy_time;
        if (bson_iter_init_find(&field, &document, "copied") && BSON_ITER_HOLDS_NUMBER(&field)) {
            item->warm_copied = bson_iter_as_int64(&field);
        }
        if (bson_iter_init_find(&field, &document, "remaining") && BSON_ITER_HOLDS_NUMBER(&field)) {
            item->warm_remaining = bson_iter_as_int64(&field);
        }
        if (bson_iter_init_find(&field, &document, "passStarted") && BSON_ITER_HOLDS_DATE_TIME(&field)) {
            item->warm_started_ms = bson_iter_date_time(&field);
        }
        if (bson_iter_init_find(&field, &document, "completedAt") && BSON_ITER_HOLDS_DATE_TIME(&field)) {
            item->warm_completed_ms = bson_iter_date_time(&field);
        }
        tier_progress_unlock(progress, changed);
    }
}

bool tier_read_feeder_progress(tier_context_t *context, mongoc_client_t *fast, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, documents;
    bool ok = tier_read_state(fast, TIER_FEEDER_COLLECTION, &filter, &documents, error);
    if (ok) {
        tier_progress_apply_feeder_documents(context->progress, context->config, &documents);
    }
    bson_destroy(&documents);
    bson_destroy(&filter);
    return ok;
}

bool tier_feeder_runs_here(tier_context_t *context)
{
    tier_worker_progress_t feeder;
    tier_progress_worker(context->progress, TIER_WORKER_FEEDER, &feeder);
    return feeder.running;
}

bool tier_wait_applied(tier_context_t *context, mongoc_client_t *fast, size_t index, uint64_t time,
                       int64_t timeout_ms, uint64_t *out_applied_time)
{
    int64_t deadline = clock_monotonic_ms() + timeout_ms;
    for (;;) {
        bson_error_t error;
        bool feeder_here = tier_feeder_runs_here(context);
        if (!feeder_here && !tier_read_feeder_progress(context, fast, &error)) {
            return false;
        }
        tier_namespace_progress_t item;
        tier_progress_namespace(context->progress, index, &item);
        if (item.feed_stopped) {
            return false;
        }
        if (item.applied_time >= time) {
            if (out_applied_time != NULL) {
                *out_applied_time = item.applied_time;
            }
            return true;
        }
        int64_t remaining = deadline - clock_monotonic_ms();
        if (remaining <= 0 || tier_group_stopping(context->group)) {
            return false;
        }
        if (feeder_here) {
            tier_progress_wait(context->progress, remaining < 100 ? remaining : 100);
        } else if (!tier_group_sleep(context->group, remaining < 50 ? remaining : 50)) {
            return false;
        }
    }
}

void tier_append_delete_version(bson_t *command, const char *collection, const bson_t *version)
{
    bson_t deletes, statement;
    BSON_APPEND_UTF8(command, "delete", collection);
    BSON_APPEND_ARRAY_BEGIN(command, "deletes", &deletes);
    BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
    BSON_APPEND_DOCUMENT(&statement, "q", version);
    BSON_APPEND_INT32(&statement, "limit", 1);
    bson_append_document_end(&deletes, &statement);
    bson_append_array_end(command, &deletes);
}

bool tier_find_by_id(mongoc_client_t *client, const char *database, const char *collection, const bson_value_t *id,
                     bool *out_found, bson_t *out_document, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, filter, reply, found;
    bson_iter_t first;
    BSON_APPEND_UTF8(&command, "find", collection);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "filter", &filter);
    BSON_APPEND_VALUE(&filter, "_id", id);
    bson_append_document_end(&command, &filter);
    BSON_APPEND_INT32(&command, "limit", 1);
    bool ok = tier_command(client, database, &command, &reply, error);
    *out_found = ok && bson_iter_init(&first, &reply) &&
                 bson_iter_find_descendant(&first, "cursor.firstBatch.0", &first) && BSON_ITER_HOLDS_DOCUMENT(&first);
    if (out_document != NULL) {
        uint32_t length = 0;
        const uint8_t *data = NULL;
        if (*out_found) {
            bson_iter_document(&first, &length, &data);
        }
        if (*out_found && bson_init_static(&found, data, length)) {
            bson_copy_to(&found, out_document);
        } else {
            bson_init(out_document);
        }
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

bool tier_version_filter(const bson_t *document, bson_t *out_filter)
{
    bson_iter_t iter;
    bson_init(out_filter);
    if (!bson_iter_init(&iter, document)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (key[0] == '$' || strchr(key, '.') != NULL) {
            bson_reinit(out_filter);
            return false;
        }
        if (strcmp(key, "_id") == 0) {
            bson_append_iter(out_filter, key, -1, &iter);
            continue;
        }
        bson_t condition;
        bson_append_document_begin(out_filter, key, -1, &condition);
        bson_append_iter(&condition, "$eq", 3, &iter);
        bson_append_document_end(out_filter, &condition);
    }
    return true;
}

/* --- pacing ------------------------------------------------------------------------ */

void tier_pacer_init(tier_pacer_t *pacer, double share)
{
    pacer->share = share;
    pacer->best_ms = 0;
    pacer->average_ms = 0;
}

int64_t tier_pacer_pause_ms(tier_pacer_t *pacer, int64_t latency_ms)
{
    double latency = latency_ms < 1 ? 1 : (double)latency_ms;
    /* The best latency creeps up so that one lucky request does not pin it. */
    pacer->best_ms = pacer->best_ms == 0 || latency < pacer->best_ms ? latency : pacer->best_ms * 1.05;
    pacer->average_ms = pacer->average_ms == 0 ? latency : pacer->average_ms * 0.8 + latency * 0.2;
    double pause = latency * (1 - pacer->share) / pacer->share;
    if (pacer->average_ms > 3 * pacer->best_ms) {
        /* The tier is slower than usual (busy with clients): back off, at most 4 times more. */
        double factor = pacer->average_ms / (3 * pacer->best_ms);
        pause *= factor > 4 ? 4 : factor;
    }
    return pause > 5000 ? 5000 : (int64_t)(pause + 0.5);
}

/* --- reports ------------------------------------------------------------------------ */

static const char *worker_component(tier_worker_t worker)
{
    return worker == TIER_WORKER_FEEDER ? "FEEDER" : worker == TIER_WORKER_EVICTOR ? "EVICTOR" : "WARMER";
}

void tier_report_error(tier_context_t *context, tier_worker_t worker, const char *format, ...)
{
    char message[TIER_ERROR_TEXT_SIZE];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    tier_worker_progress_t *item = tier_progress_lock_worker(context->progress, worker);
    bool repeated = strcmp(item->last_error, message) == 0;
    snprintf(item->last_error, sizeof item->last_error, "%s", message);
    item->updated_ms = clock_wall_ms();
    tier_progress_unlock(context->progress, false);
    if (!repeated) {
        TC_LOG_ATTRS(TC_LOG_WARNING, worker_component(worker), 0, "{error}", TC_ATTR_STR("error", message));
    }
}

void tier_report_ok(tier_context_t *context, tier_worker_t worker)
{
    tier_worker_progress_t *item = tier_progress_lock_worker(context->progress, worker);
    bool recovered = item->last_error[0] != '\0';
    item->last_error[0] = '\0';
    item->updated_ms = clock_wall_ms();
    tier_progress_unlock(context->progress, false);
    if (recovered) {
        TC_LOG(TC_LOG_INFO, worker_component(worker), 0, "working again");
    }
}

/* --- test hooks ----------------------------------------------------------------- */

long tier_test_hook_countdown(const char *variable)
{
    const char *value = getenv(variable);
    return value != NULL ? strtol(value, NULL, 10) : 0;
}

bool tier_test_hook_fires(long *countdown)
{
    return *countdown > 0 && --*countdown == 0;
}

void tier_test_hook_kill(long *countdown, const char *variable, const char *moment)
{
    if (tier_test_hook_fires(countdown)) {
        TC_LOG(TC_LOG_WARNING, "TIER", 0, "%s: killing the process %s", variable, moment);
        raise(SIGKILL);
    }
}
