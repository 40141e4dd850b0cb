/* Each tiered namespace's unique indexes, as the archive lists them (the planner
 * turns a write's new key values into fault-ins with them: I7 beyond _id). Read
 * through the archive pool with listIndexes, which reads the catalog, not
 * documents; again every UNIQUE_INDEXES_REFRESH_MS, and before the next write
 * after a catalog command through the proxy. A write that finds them unknown waits
 * (PHASE_LOADING_INDEXES) for the read. Runs on the loop thread. */
#include "proxy/router_private.h"

#include "common/clock.h"
#include "common/log.h"
#include "wire/wire.h"

#include <string.h>

#define LOG_COMPONENT "ROUTER"
#define UNIQUE_INDEXES_REFRESH_MS 10000 /* an index made on the archive directly is seen within this */

/* Keeps the unique indexes of a listIndexes reply but _id_, which the router checks
 * on its own (unique_id_checks). */
static void keep_unique_indexes(namespace_state_t *state, const bson_t *body)
{
    bson_iter_t iter, batch;
    bson_reinit(&state->unique_indexes);
    uint32_t count = 0;
    if (!bson_iter_init(&iter, body) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) ||
        !BSON_ITER_HOLDS_ARRAY(&batch) || !bson_iter_recurse(&batch, &iter)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        bson_t spec;
        bson_iter_t field;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        if (!bson_init_static(&spec, data, length) || !bson_iter_init_find(&field, &spec, "unique") ||
            !bson_iter_as_bool(&field) ||
            (bson_iter_init_find(&field, &spec, "name") && BSON_ITER_HOLDS_UTF8(&field) &&
             strcmp(bson_iter_utf8(&field, NULL), "_id_") == 0)) {
            continue;
        }
        char key[16];
        const char *key_string;
        size_t key_length = bson_uint32_to_string(count++, &key_string, key, sizeof key);
        bson_append_document(&state->unique_indexes, key_string, (int)key_length, &spec);
    }
}

/* Every write that waited goes on (or fails with error). */
static void release_waiters(namespace_state_t *state, const bson_error_t *error)
{
    proxy_request_t *waiting = state->index_waiters;
    state->index_waiters = NULL;
    while (waiting != NULL) {
        proxy_request_t *request = waiting;
        waiting = request->next_index_waiter;
        request->next_index_waiter = NULL;
        router_advance(request, &(router_outcome_t){.error = error});
    }
}

static void on_indexes_listed(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    namespace_state_t *state = context;
    bson_t body;
    bson_error_t failure;
    bson_iter_t code;
    state->indexes_loading = false;
    if (error != NULL) {
        failure = *error;
    } else if (!wire_op_msg_peek_body(reply, length, &body, &failure)) {
        tc_error_set(&failure, TC_ERR_OPERATION_FAILED, "the archive's listIndexes reply could not be read");
    } else if (router_reply_is_ok(&body)) {
        keep_unique_indexes(state, &body);
        state->indexes_known = true;
        state->indexes_loaded_ms = clock_monotonic_ms();
        state->policy.unique_indexes = &state->unique_indexes;
        release_waiters(state, NULL);
        return;
    } else if (bson_iter_init_find(&code, &body, "code") && bson_iter_as_int64(&code) == TC_ERR_NAMESPACE_NOT_FOUND) {
        bson_reinit(&state->unique_indexes); /* no collection in the archive yet: no index */
        state->indexes_known = true;
        state->indexes_loaded_ms = clock_monotonic_ms();
        state->policy.unique_indexes = &state->unique_indexes;
        release_waiters(state, NULL);
        return;
    } else {
        tc_error_set(&failure, TC_ERR_OPERATION_FAILED, "the archive's listIndexes of %s failed: %s",
                     state->config->ns, bson_iter_init_find(&code, &body, "errmsg") && BSON_ITER_HOLDS_UTF8(&code)
                                            ? bson_iter_utf8(&code, NULL)
                                            : "no message");
    }
    TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot read the unique indexes of {ns} from the archive: {error}",
                 TC_ATTR_STR("ns", state->config->ns), TC_ATTR_STR("error", failure.message));
    release_waiters(state, &failure);
}

void unique_indexes_load(proxy_t *proxy, namespace_state_t *state)
{
    if (state->indexes_loading) {
        return;
    }
    bson_t command = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    BSON_APPEND_UTF8(&command, "listIndexes", state->config->collection);
    BSON_APPEND_UTF8(&command, "$db", state->config->database);
    bool built = wire_op_msg_build(0, 0, 0, &command, NULL, 0, &encoded, &length, &error);
    bson_destroy(&command);
    if (!built) {
        release_waiters(state, &error);
        return;
    }
    state->indexes_loading = true;
    backend_pool_send(proxy->tiers[PROXY_TIER_ARCHIVE], encoded, length, on_indexes_listed, state);
    bson_free(encoded);
}

void unique_indexes_refresh_due(proxy_t *proxy)
{
    int64_t now = clock_monotonic_ms();
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_state_t *state = &proxy->namespaces[i];
        if (state->indexes_known && now - state->indexes_loaded_ms >= UNIQUE_INDEXES_REFRESH_MS) {
            unique_indexes_load(proxy, state); /* the known list serves writes meanwhile */
        }
    }
}

void unique_indexes_forget(proxy_t *proxy, namespace_state_t *state)
{
    state->indexes_known = false;
    state->policy.unique_indexes = NULL;
    unique_indexes_load(proxy, state);
}

bool unique_indexes_wait(proxy_request_t *request)
{
    namespace_state_t *state = request->namespace_state;
    if (state == NULL || state->indexes_known) {
        return false;
    }
    router_enter(request, PHASE_LOADING_INDEXES);
    request->next_index_waiter = state->index_waiters;
    state->index_waiters = request;
    unique_indexes_load(request->proxy, state);
    return true;
}

void unique_indexes_cancel_waits(proxy_t *proxy)
{
    bson_error_t error;
    tc_error_set(&error, TC_ERR_INTERRUPTED, "the proxy is shutting down");
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        release_waiters(&proxy->namespaces[i], &error);
    }
}
