/* A write's pins in the fast tier (tier/pins.h), for an evictor that may run in
 * another process: pinned in memory first (router_wait.c), a write that faults in
 * then, when the evictor's lease is elsewhere or other proxies are alive,
 *
 *   PHASE_PINNING_FAST          its pin documents upserted in thermocline.pins
 *   PHASE_READING_EVICTIONS     the evictor's live intents that cover them
 *   PHASE_WAITING_FOR_EVICTIONS a pause, then the intents it saw read again,
 *                               until they are gone
 *
 * before its fast-tier check (router_fault_in.c). The evictor writes its intent
 * before it reads the pins, so either it skips these documents or this write
 * waits for its deletes to end. The pins are removed when the request is freed
 * (a delete nobody waits for: one that fails expires). A proxy that runs the
 * evictor and sees no other proxy keeps the in-memory pins only. */
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"
#include "tier/pins.h"
#include "wire/wire.h"

#define LOG_COMPONENT "ROUTER"
#define EVICTIONS_RECHECK_MS 5
#define EVICTIONS_BATCH 1000

bool router_pins_needed(proxy_request_t *request)
{
    proxy_t *proxy = request->proxy;
    return request->namespace_state != NULL &&
           tier_pins_in_fast_tier(proxy_worker_runs_here(proxy, TIER_WORKER_EVICTOR),
                                  tier_progress_peers(proxy->progress));
}

/* The ids the write names, from both of the planner's lists, as one array. */
static void pinned_ids(const proxy_request_t *request, bson_t *out)
{
    const bson_t *lists[] = {&request->decision.fault_in_ids, &request->decision.unique_id_checks};
    uint32_t count = 0;
    bson_init(out);
    for (size_t list = 0; list < sizeof lists / sizeof lists[0]; list++) {
        bson_iter_t iter;
        bson_iter_init(&iter, lists[list]);
        while (bson_iter_next(&iter)) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(count++, &key_string, key, sizeof key);
            bson_append_iter(out, key_string, -1, &iter);
        }
    }
}

void router_pins_write(proxy_request_t *request)
{
    const config_t *config = request->proxy->config;
    bson_t ids, update = BSON_INITIALIZER, statements;
    char holder[TIER_PIN_HOLDER_SIZE];
    uint32_t index = 0;
    pinned_ids(request, &ids);
    tier_pins_holder(holder, sizeof holder);
    request->fast_pins.keys = bson_new();
    BSON_APPEND_UTF8(&update, "update", TIER_PINS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&update, "updates", &statements);
    tier_pins_append_upserts(&statements, &index, request->namespace_state->config->ns, &ids,
                             router_pins_whole_namespace(request), holder, tier_pin_lifetime_ms(config),
                             request->fast_pins.keys);
    bson_append_array_end(&update, &statements);
    router_append_state_write_options(&update);
    bson_destroy(&ids);
    /* From the send: the pins' lifetime counts from their write, which is later. */
    request->fast_pins.sent_ms = clock_monotonic_ms();
    router_call_tier_command(request, PHASE_PINNING_FAST, PROXY_TIER_FAST, &update);
}

/* The evictor's live intents that may cover the pins: at first any naming one of
 * the write's ids (any in the namespace for a write by filter); then only those
 * seen the first time (a later intent was written after the pins, so its evictor
 * reads them and skips these documents). */
static void read_evictions(proxy_request_t *request)
{
    bson_t find = BSON_INITIALIZER, filter, projection;
    if (request->fast_pins.evictions == NULL) {
        bson_t ids;
        pinned_ids(request, &ids);
        tier_evictions_filter_for_pin(request->namespace_state->config->ns, &ids,
                                      router_pins_whole_namespace(request), &filter);
        bson_destroy(&ids);
    } else {
        tier_evictions_filter_for_keys(request->fast_pins.evictions, &filter);
    }
    BSON_APPEND_UTF8(&find, "find", TIER_EVICTIONS_COLLECTION);
    BSON_APPEND_DOCUMENT(&find, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "projection", &projection);
    BSON_APPEND_INT32(&projection, "_id", 1);
    bson_append_document_end(&find, &projection);
    BSON_APPEND_INT32(&find, "batchSize", EVICTIONS_BATCH);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", TIER_DATABASE);
    bson_destroy(&filter);
    router_call_tier_command(request, PHASE_READING_EVICTIONS, PROXY_TIER_FAST, &find);
}

void router_pins_on_written(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    bson_iter_t iter;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        return;
    }
    if (bson_iter_init_find(&iter, &body, "writeErrors")) {
        router_relay_reply(request, outcome->reply, outcome->length);
        return;
    }
    read_evictions(request);
}

void router_pins_on_evictions(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body, intents;
    bson_iter_t iter;
    bson_error_t error;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        return;
    }
    if (!bson_iter_init(&iter, &body) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &iter) ||
        !bson_view_of(&iter, &intents)) {
        tc_error_set(&error, TC_ERR_OPERATION_FAILED, "unexpected reply reading thermocline.%s",
                     TIER_EVICTIONS_COLLECTION);
        router_finish_with_error(request, &error);
        return;
    }
    int64_t now = clock_monotonic_ms();
    if (request->fast_pins.evictions == NULL) {
        request->fast_pins.evictions = bson_new();
        request->fast_pins.waiting_since_ms = now;
    } else {
        bson_reinit(request->fast_pins.evictions);
    }
    if (tier_pins_collect_keys(&intents, request->fast_pins.evictions) == 0) {
        router_fault_in_check_fast(request);
        return;
    }
    /* Intents expire on their own: past that (and a margin), something is wrong. */
    int64_t bound = tier_eviction_lifetime_ms(request->proxy->config) + request->proxy->config->read_your_writes_wait_ms;
    if (now - request->fast_pins.waiting_since_ms > bound) {
        tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                     "a document this write needs was being evicted from the fast tier by another process for "
                     "over %lld ms; retry the write",
                     (long long)(now - request->fast_pins.waiting_since_ms));
        router_finish_with_error(request, &error);
        return;
    }
    router_wait_briefly(request, PHASE_WAITING_FOR_EVICTIONS, EVICTIONS_RECHECK_MS);
}

void router_pins_after_wait(proxy_request_t *request)
{
    read_evictions(request);
}

bool router_pins_fresh(const proxy_request_t *request)
{
    return request->fast_pins.keys == NULL ||
           tier_pin_fresh(request->proxy->config, request->fast_pins.sent_ms, clock_monotonic_ms());
}

static void on_unpinned(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    (void)context, (void)reply, (void)length;
    if (error != NULL) {
        TC_LOG(TC_LOG_DEBUG, LOG_COMPONENT, 0, "cannot remove a write's pins (%s): they expire", error->message);
    }
}

void router_pins_release(proxy_request_t *request)
{
    if (request->fast_pins.keys != NULL) {
        bson_t remove = BSON_INITIALIZER, deletes, statement, query, condition;
        uint8_t *message;
        size_t length;
        bson_error_t error;
        BSON_APPEND_UTF8(&remove, "delete", TIER_PINS_COLLECTION);
        BSON_APPEND_ARRAY_BEGIN(&remove, "deletes", &deletes);
        BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
        BSON_APPEND_DOCUMENT_BEGIN(&query, "_id", &condition);
        BSON_APPEND_ARRAY(&condition, "$in", request->fast_pins.keys);
        bson_append_document_end(&query, &condition);
        bson_append_document_end(&statement, &query);
        BSON_APPEND_INT32(&statement, "limit", 0);
        bson_append_document_end(&deletes, &statement);
        bson_append_array_end(&remove, &deletes);
        router_append_state_write_options(&remove);
        if (wire_op_msg_build(0, 0, 0, &remove, NULL, 0, &message, &length, &error)) {
            backend_pool_send(request->proxy->tiers[PROXY_TIER_FAST], message, length, on_unpinned, NULL);
            bson_free(message);
        }
        bson_destroy(&remove);
    }
    bson_destroy(request->fast_pins.keys);
    bson_destroy(request->fast_pins.evictions);
    request->fast_pins.keys = request->fast_pins.evictions = NULL;
}
