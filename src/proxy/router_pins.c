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
 * waits for its deletes to end. The writes that ask while one round's upsert is
 * in flight form the next round: one upsert of all their pins, then one read of
 * the intents covering any of them (a pin written before the read, as each
 * write's own would be). Only a write an intent covers goes on alone, reading
 * again until the intents are gone. The pins are removed when the request is
 * freed, in one delete for all the writes freed while the previous one was in
 * flight (a delete nobody waits for: one that fails expires). A proxy that runs
 * the evictor and sees no other proxy keeps the in-memory pins only. */
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"
#include "tier/pins.h"
#include "wire/wire.h"

#define LOG_COMPONENT "ROUTER"
#define EVICTIONS_RECHECK_MS 5
#define EVICTIONS_BATCH 1000
/* A round takes no more ids than this, so that its upsert stays far below 16 MB
 * (unless one write's alone is larger, as it was before rounds). */
#define ROUND_MAX_IDS 100000

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

/* --- rounds: the pins of several writes in one upsert and one read -------------- */

typedef enum pin_round_state {
    PIN_ROUND_COLLECTING,       /* writes join; sent once no other round's upsert is in flight */
    PIN_ROUND_WRITING,          /* the members' pins upserted */
    PIN_ROUND_READING,          /* the evictor's live intents that cover any of them */
    PIN_ROUND_AWAITING_PRIMARY, /* a call failed retryably: until the fast tier's primary is found */
    PIN_ROUND_DONE,             /* each member gone on (or failed); freed */
} pin_round_state_t;

typedef struct pin_round {
    proxy_t *proxy;
    pin_round_state_t state; /* only pin_round_enter() changes it */
    proxy_request_t **members;
    size_t member_count;
    size_t member_capacity;
    uint64_t id_count;       /* the members' pinned ids */
    uint8_t *message;        /* the call in flight, kept for its one retry */
    size_t length;
    pin_round_state_t retry_state; /* PIN_ROUND_AWAITING_PRIMARY: the call to send again */
    bool retried;
} pin_round_t;

static void pin_round_enter(pin_round_t *round, pin_round_state_t state)
{
    static const uint32_t next[] = {
        [PIN_ROUND_COLLECTING] = 1u << PIN_ROUND_WRITING,
        [PIN_ROUND_WRITING] = 1u << PIN_ROUND_READING | 1u << PIN_ROUND_AWAITING_PRIMARY | 1u << PIN_ROUND_DONE,
        [PIN_ROUND_READING] = 1u << PIN_ROUND_AWAITING_PRIMARY | 1u << PIN_ROUND_DONE,
        [PIN_ROUND_AWAITING_PRIMARY] = 1u << PIN_ROUND_WRITING | 1u << PIN_ROUND_READING | 1u << PIN_ROUND_DONE,
        [PIN_ROUND_DONE] = 0,
    };
    if (!(next[round->state] & (1u << state))) {
        TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, 0, "a pin round cannot move from state %d to %d", (int)round->state,
               (int)state);
        abort();
    }
    round->state = state;
    for (size_t i = 0; i < round->member_count && state == PIN_ROUND_READING; i++) {
        router_enter(round->members[i], PHASE_READING_EVICTIONS);
    }
}

static void pin_round_free(pin_round_t *round)
{
    bson_free(round->members);
    bson_free(round->message);
    bson_free(round);
}

static void pin_round_send(pin_round_t *round, pin_round_state_t state, bson_t *command);

/* Every member's pins in one update (each write keeps its own pin documents, which
 * its release removes). */
static void pin_round_write(pin_round_t *round)
{
    const config_t *config = round->proxy->config;
    bson_t update = BSON_INITIALIZER, statements;
    char holder[TIER_PIN_HOLDER_SIZE];
    uint32_t index = 0;
    tier_pins_holder(holder, sizeof holder);
    BSON_APPEND_UTF8(&update, "update", TIER_PINS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&update, "updates", &statements);
    /* From the send: the pins' lifetime counts from their write, which is later. */
    int64_t now = clock_monotonic_ms();
    round->proxy->pin_rounds++;
    round->proxy->pinned_writes += round->member_count;
    for (size_t i = 0; i < round->member_count; i++) {
        proxy_request_t *request = round->members[i];
        bson_t ids;
        pinned_ids(request, &ids);
        request->fast_pins.keys = bson_new();
        request->fast_pins.sent_ms = now;
        tier_pins_append_upserts(&statements, &index, request->namespace_state->config->ns, &ids,
                                 router_pins_whole_namespace(request), holder, tier_pin_lifetime_ms(config),
                                 request->fast_pins.keys);
        bson_destroy(&ids);
    }
    bson_append_array_end(&update, &statements);
    router_append_state_write_options(&update);
    pin_round_send(round, PIN_ROUND_WRITING, &update);
}

/* The evictor's live intents naming any member's ids (any in a namespace a member
 * pins whole). */
static void pin_round_read(pin_round_t *round)
{
    bson_t find = BSON_INITIALIZER, filter = BSON_INITIALIZER, clauses, projection;
    BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &clauses);
    for (size_t i = 0; i < round->member_count; i++) {
        proxy_request_t *request = round->members[i];
        bson_t ids, clause;
        char key[16];
        const char *key_string;
        pinned_ids(request, &ids);
        tier_evictions_filter_for_pin(request->namespace_state->config->ns, &ids,
                                      router_pins_whole_namespace(request), &clause);
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_document(&clauses, key_string, -1, &clause);
        bson_destroy(&clause);
        bson_destroy(&ids);
    }
    bson_append_array_end(&filter, &clauses);
    BSON_APPEND_UTF8(&find, "find", TIER_EVICTIONS_COLLECTION);
    BSON_APPEND_DOCUMENT(&find, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "projection", &projection);
    BSON_APPEND_INT32(&projection, "_id", 1);
    BSON_APPEND_INT32(&projection, "ns", 1);
    BSON_APPEND_INT32(&projection, "ids", 1);
    bson_append_document_end(&find, &projection);
    BSON_APPEND_INT32(&find, "batchSize", EVICTIONS_BATCH);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", TIER_DATABASE);
    bson_destroy(&filter);
    pin_round_send(round, PIN_ROUND_READING, &find);
}

static void on_pin_round_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error);

static void send_round_message(pin_round_t *round)
{
    backend_pool_send(round->proxy->tiers[PROXY_TIER_FAST], round->message, round->length, on_pin_round_reply,
                      round);
}

static void pin_round_send(pin_round_t *round, pin_round_state_t state, bson_t *command)
{
    bson_error_t error;
    bson_free(round->message);
    round->message = NULL;
    round->retried = false;
    bool built = wire_op_msg_build(0, 0, 0, command, NULL, 0, &round->message, &round->length, &error);
    bson_destroy(command);
    pin_round_enter(round, state);
    if (!built) {
        on_pin_round_reply(round, NULL, 0, &error);
        return;
    }
    send_round_message(round);
}

static void start_next_round(proxy_t *proxy, bool full);

/* The members go on, or fail with the round's failure (error, else the tier's
 * reply relayed as it is). */
static void pin_round_fail(pin_round_t *round, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_t *proxy = round->proxy;
    bool was_writing = round->state == PIN_ROUND_WRITING ||
                       (round->state == PIN_ROUND_AWAITING_PRIMARY && round->retry_state == PIN_ROUND_WRITING);
    pin_round_enter(round, PIN_ROUND_DONE);
    for (size_t i = 0; i < round->member_count; i++) {
        if (error != NULL) {
            router_finish_with_error(round->members[i], error);
        } else {
            router_relay_reply(round->members[i], reply, length);
        }
    }
    pin_round_free(round);
    if (was_writing) {
        proxy->pin_rounds_writing--;
        start_next_round(proxy, false);
    }
}

static void take_evictions(proxy_request_t *request, const bson_t *intents);

/* The intents read: each member goes on, waiting alone if one covers it. */
static void pin_round_on_read(pin_round_t *round, const bson_t *intents)
{
    pin_round_enter(round, PIN_ROUND_DONE);
    for (size_t i = 0; i < round->member_count; i++) {
        take_evictions(round->members[i], intents);
    }
    pin_round_free(round);
}

/* recovery_fn: the fast tier's primary found again (recovered), or the wait ended. */
static void on_round_primary_found(void *context, bool recovered)
{
    pin_round_t *round = context;
    pin_round_enter(round, round->retry_state);
    if (recovered) {
        send_round_message(round);
        return;
    }
    bson_error_t error;
    tc_error_set(&error, TC_ERR_HOST_UNREACHABLE, "the fast tier's primary was not found within failoverWait "
                                                  "while pinning a write's documents against eviction");
    pin_round_fail(round, NULL, 0, &error);
}

static void on_pin_round_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    pin_round_t *round = context;
    proxy_t *proxy = round->proxy;
    bson_t body;
    bson_error_t parse_error;
    int32_t code = 0;
    bool parsed = error == NULL && wire_op_msg_find_body(reply, length, &body, &parse_error);
    if (error == NULL && !parsed) {
        error = &parse_error;
    }
    /* Both calls are idempotent (upserts, a read): once more, as a retryable write. */
    if (router_retries_failure(proxy, round->retried, RETRY_WRITE, parsed ? &body : NULL, error, &code)) {
        round->retried = true;
        round->retry_state = round->state;
        /* Each member's request runs a step once more: counted as the router counts its retries. */
        proxy->requests_retried += round->member_count;
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, 0,
               "the fast tier's pins of %zu writes failed (%s); sent again when its primary is found",
               round->member_count, router_failure_text(error, code));
        backend_pool_clear(proxy->tiers[PROXY_TIER_FAST]);
        pin_round_enter(round, PIN_ROUND_AWAITING_PRIMARY);
        recovery_wait(proxy, PROXY_TIER_FAST, clock_monotonic_ms() + proxy->config->failover_wait_ms,
                      on_round_primary_found, round);
        return;
    }
    bson_iter_t iter;
    if (error != NULL || !router_reply_is_ok(&body) ||
        (round->state == PIN_ROUND_WRITING && bson_iter_init_find(&iter, &body, "writeErrors"))) {
        pin_round_fail(round, reply, length, error);
        return;
    }
    if (round->state == PIN_ROUND_WRITING) {
        proxy->pin_rounds_writing--;
        pin_round_read(round);
        start_next_round(proxy, false);
        return;
    }
    bson_t intents;
    if (!bson_iter_init(&iter, &body) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &iter) ||
        !bson_view_of(&iter, &intents)) {
        tc_error_set(&parse_error, TC_ERR_OPERATION_FAILED, "unexpected reply reading thermocline.%s",
                     TIER_EVICTIONS_COLLECTION);
        pin_round_fail(round, NULL, 0, &parse_error);
        return;
    }
    pin_round_on_read(round, &intents);
}

/* The collected round goes out once no other round's upsert is in flight, or at
 * once when full. */
static void start_next_round(proxy_t *proxy, bool full)
{
    pin_round_t *round = proxy->pin_round_collecting;
    if (round == NULL || (proxy->pin_rounds_writing > 0 && !full)) {
        return;
    }
    proxy->pin_round_collecting = NULL;
    proxy->pin_rounds_writing++;
    pin_round_write(round);
}

void router_pins_write(proxy_request_t *request)
{
    proxy_t *proxy = request->proxy;
    uint64_t ids = (uint64_t)request->decision.fault_in_id_count + request->decision.unique_id_check_count;
    pin_round_t *round = proxy->pin_round_collecting;
    if (round != NULL && round->id_count + ids > ROUND_MAX_IDS) {
        start_next_round(proxy, true);
        round = NULL;
    }
    if (round == NULL) {
        round = bson_malloc0(sizeof *round);
        round->proxy = proxy;
        round->state = PIN_ROUND_COLLECTING;
        proxy->pin_round_collecting = round;
    }
    if (round->member_count == round->member_capacity) {
        round->member_capacity = round->member_capacity == 0 ? 8 : round->member_capacity * 2;
        round->members = bson_realloc(round->members, round->member_capacity * sizeof *round->members);
    }
    round->members[round->member_count++] = request;
    round->id_count += ids;
    router_enter(request, PHASE_PINNING_FAST);
    start_next_round(proxy, false);
}

/* --- a write an intent covers: alone, until its intents are gone ------------------- */

/* The keys of the intents (as read: _id, ns, ids) that cover the request's pins. */
static uint32_t collect_covering(const proxy_request_t *request, const bson_t *intents, bson_t *out_keys)
{
    bson_t ids;
    bson_iter_t intent;
    uint32_t count = 0;
    pinned_ids(request, &ids);
    bson_iter_init(&intent, intents);
    while (bson_iter_next(&intent)) {
        bson_t document;
        bson_iter_t key;
        if (bson_view_of(&intent, &document) && bson_iter_init_find(&key, &document, "_id") &&
            tier_eviction_covers(&document, request->namespace_state->config->ns, &ids,
                                 router_pins_whole_namespace(request))) {
            char index[16];
            const char *index_string;
            bson_uint32_to_string(count++, &index_string, index, sizeof index);
            bson_append_iter(out_keys, index_string, -1, &key);
        }
    }
    bson_destroy(&ids);
    return count;
}

/* The evictor's live intents that still cover the pins: those seen the first time
 * (a later intent was written after the pins, so its evictor reads them and skips
 * these documents). */
static void read_evictions(proxy_request_t *request)
{
    bson_t find = BSON_INITIALIZER, filter, projection;
    tier_evictions_filter_for_keys(request->fast_pins.evictions, &filter);
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

/* Whether the intents the request waits for (fast_pins.evictions) are all gone:
 * then the fast-tier check; else a pause and another read, up to a bound. */
static void go_on_or_wait(proxy_request_t *request, uint32_t alive)
{
    bson_error_t error;
    if (alive == 0) {
        router_fault_in_check_fast(request);
        return;
    }
    /* Intents expire on their own: past that (and a margin), something is wrong. */
    int64_t now = clock_monotonic_ms();
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

static void take_evictions(proxy_request_t *request, const bson_t *intents)
{
    request->fast_pins.evictions = bson_new();
    request->fast_pins.waiting_since_ms = clock_monotonic_ms();
    go_on_or_wait(request, collect_covering(request, intents, request->fast_pins.evictions));
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
    bson_reinit(request->fast_pins.evictions);
    go_on_or_wait(request, tier_pins_collect_keys(&intents, request->fast_pins.evictions));
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

/* --- releases: one delete for the writes freed while the last was in flight -------- */

static void send_unpins(proxy_t *proxy);

static void on_unpinned(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_t *proxy = context;
    (void)reply, (void)length;
    if (error != NULL) {
        TC_LOG(TC_LOG_DEBUG, LOG_COMPONENT, 0, "cannot remove writes' pins (%s): they expire", error->message);
    }
    proxy->unpin_in_flight = false;
    send_unpins(proxy);
}

static void send_unpins(proxy_t *proxy)
{
    bson_t *keys = proxy->unpin_keys;
    if (keys == NULL || proxy->unpin_in_flight) {
        return;
    }
    proxy->unpin_keys = NULL;
    proxy->unpin_key_count = 0;
    bson_t remove = BSON_INITIALIZER, deletes, statement, query, condition;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_UTF8(&remove, "delete", TIER_PINS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&remove, "deletes", &deletes);
    BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_DOCUMENT_BEGIN(&query, "_id", &condition);
    BSON_APPEND_ARRAY(&condition, "$in", keys);
    bson_append_document_end(&query, &condition);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_INT32(&statement, "limit", 0);
    bson_append_document_end(&deletes, &statement);
    bson_append_array_end(&remove, &deletes);
    router_append_state_write_options(&remove);
    if (wire_op_msg_build(0, 0, 0, &remove, NULL, 0, &message, &length, &error)) {
        proxy->unpin_in_flight = true;
        backend_pool_send(proxy->tiers[PROXY_TIER_FAST], message, length, on_unpinned, proxy);
        bson_free(message);
    }
    bson_destroy(&remove);
    bson_destroy(keys);
}

void router_pins_release(proxy_request_t *request)
{
    proxy_t *proxy = request->proxy;
    if (request->fast_pins.keys != NULL) {
        if (proxy->unpin_keys == NULL) {
            proxy->unpin_keys = bson_new();
        }
        bson_iter_t key;
        bson_iter_init(&key, request->fast_pins.keys);
        while (bson_iter_next(&key)) {
            char index[16];
            const char *index_string;
            bson_uint32_to_string(proxy->unpin_key_count++, &index_string, index, sizeof index);
            bson_append_iter(proxy->unpin_keys, index_string, -1, &key);
        }
        send_unpins(proxy);
    }
    bson_destroy(request->fast_pins.keys);
    bson_destroy(request->fast_pins.evictions);
    request->fast_pins.keys = request->fast_pins.evictions = NULL;
}
