/* One client request through the proxy, on the event loop:
 *
 *   arrive ─▶ decode (OP_COMPRESSED, OP_MSG / OP_QUERY handshake)
 *          ─▶ authentication commands, answered by access.c                ─▶ reply
 *          ─▶ admit (access.c: with authorization, the user's privileges)  ─▶ or refuse
 *          ─▶ answered here (hello, ping, thermoclineStatus: router_local.c) ─▶ reply
 *          ─▶ plan (planner.c) ─▶ [fault-in: archive find ─▶ fast insert]   (router_fault_in.c)
 *                              ─▶ forward to the tier ─▶ patch cursor ids ─▶ reply
 *
 * The request's phase (router_private.h, drawn in README.md) says what it waits
 * for. Every asynchronous step ends in router_advance(), the one dispatcher, which
 * hands the outcome to the phase's step; steps move the request on only through
 * router_enter() and the transition table below.
 *
 * This file holds the lifecycle, the replies, the calls to a tier (once more after
 * a retryable failure), the cursor ids, the planning and the arrival. The steps of
 * the longer routes live beside it: router_wait.c (read-your-writes waits and
 * pins), router_pins.c (pins in the fast tier, for an evictor elsewhere),
 * router_fault_in.c, router_unique.c (unique keys a write computes),
 * router_point_read.c (a find by _id: the fast tier, then the archive),
 * router_explain.c, router_transaction.c, router_catalog.c (commands both tiers
 * apply), router_kill_cursors.c, all sharing router_private.h.
 *
 * Whatever reads the archive (a read routed there, the archive half of a point
 * read, a fault-in's find) first waits in proxy->waits until the feeder has
 * applied every fast-tier write to the namespace acknowledged before it
 * (read-your-writes across tiers), at most readYourWritesWait.
 *
 * A command routed to one tier is forwarded as the client's own bytes (only the
 * requestID and, for getMore, the cursor id change), and its reply comes back the
 * same way, with the tier's cursor id replaced by the proxy's. */
#include "proxy/router_private.h"
#include "proxy/retry.h"

#include "common/clock.h"
#include "common/log.h"
#include "query/value_format.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "ROUTER"

/* --- the lifecycle -------------------------------------------------------------- */

#define PHASE_BIT(phase) (UINT64_C(1) << (phase))
/* A call's reply may send the same call again (another member, a rebuilt find). */
#define CALL_PHASES                                                                                          \
    (PHASE_BIT(PHASE_FORWARDING) | PHASE_BIT(PHASE_FAULT_IN_CHECKING_FAST) | PHASE_BIT(PHASE_FAULT_IN_FINDING) |      \
     PHASE_BIT(PHASE_FAULT_IN_MARKING) | PHASE_BIT(PHASE_FAULT_IN_INSERTING) | PHASE_BIT(PHASE_FAULT_IN_MARKED) |    \
     PHASE_BIT(PHASE_UNIQUE_READING_FAST) |                                                                           \
     PHASE_BIT(PHASE_STREAM_READING_MARKS) | PHASE_BIT(PHASE_STREAM_LOOKING_UP) | PHASE_BIT(PHASE_POINT_READING_FAST) | PHASE_BIT(PHASE_POINT_READING_ARCHIVE) |                          \
     PHASE_BIT(PHASE_EXPLAINING_FAST) | PHASE_BIT(PHASE_EXPLAINING_ARCHIVE) |                                \
     PHASE_BIT(PHASE_BOTH_ON_ARCHIVE) | PHASE_BIT(PHASE_BOTH_CREATING_ON_FAST) | PHASE_BIT(PHASE_BOTH_ON_FAST) |     \
     PHASE_BIT(PHASE_READING_EVICTIONS) | PHASE_BIT(PHASE_PUBLISHING_DELETES))
#define RETRYING (PHASE_BIT(PHASE_AWAITING_PRIMARY) | PHASE_BIT(PHASE_FINISHED))

_Static_assert(PHASE_COUNT <= 64, "the transition table holds a phase set in 64 bits");

static const struct {
    const char *name;
    uint64_t next; /* the phases it may move to */
} phase_table[PHASE_COUNT] = {
    [PHASE_DECODED] = {"decoded", PHASE_BIT(PHASE_AUTHENTICATING) | PHASE_BIT(PHASE_ADMITTING) |
                                      PHASE_BIT(PHASE_ANSWERING_HELLO) | PHASE_BIT(PHASE_FINISHED)},
    [PHASE_AUTHENTICATING] = {"authenticating", PHASE_BIT(PHASE_FINISHED)},
    [PHASE_ANSWERING_HELLO] = {"answering hello", PHASE_BIT(PHASE_FINISHED)},
    [PHASE_RELOADING] = {"reloading the config", PHASE_BIT(PHASE_FINISHED)},
    [PHASE_ADMITTING] = {"admitting", PHASE_BIT(PHASE_LOADING_INDEXES) | PHASE_BIT(PHASE_CHOOSING_MEMBERS) |
                                          PHASE_BIT(PHASE_FINISHED)},
    [PHASE_LOADING_INDEXES] = {"loading unique indexes", PHASE_BIT(PHASE_CHOOSING_MEMBERS) | PHASE_BIT(PHASE_FINISHED)},
    [PHASE_CHOOSING_MEMBERS] = {"choosing members",
                                PHASE_BIT(PHASE_ANSWERING_HELLO) | PHASE_BIT(PHASE_RELOADING) | PHASE_BIT(PHASE_WAITING_FOR_PINS) |
                                    PHASE_BIT(PHASE_PINNING_FAST) | PHASE_BIT(PHASE_FAULT_IN_CHECKING_FAST) |
                                    PHASE_BIT(PHASE_UNIQUE_READING_FAST) |
                                    PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | PHASE_BIT(PHASE_FORWARDING) |
                                    PHASE_BIT(PHASE_POINT_READING_FAST) | PHASE_BIT(PHASE_EXPLAINING_FAST) |
                                    PHASE_BIT(PHASE_BOTH_ON_ARCHIVE) | PHASE_BIT(PHASE_ABORTING_TRANSACTION) |
                                    PHASE_BIT(PHASE_FINISHED)},
    [PHASE_WAITING_FOR_PINS] = {"waiting for pins", PHASE_BIT(PHASE_PINNING_FAST) | PHASE_BIT(PHASE_FAULT_IN_CHECKING_FAST) |
                                                        PHASE_BIT(PHASE_UNIQUE_READING_FAST) | PHASE_BIT(PHASE_FORWARDING) |
                                                        PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | PHASE_BIT(PHASE_FINISHED)},
    /* With the other writes of its round (router_pins.c), whose calls are not its own. */
    [PHASE_PINNING_FAST] = {"pinning in the fast tier", PHASE_BIT(PHASE_READING_EVICTIONS) | PHASE_BIT(PHASE_FINISHED)},
    /* Then as after the in-memory pins: the fast tier's check, or straight on. */
    [PHASE_READING_EVICTIONS] = {"reading the evictor's intents",
                                 PHASE_BIT(PHASE_READING_EVICTIONS) | PHASE_BIT(PHASE_WAITING_FOR_EVICTIONS) |
                                     PHASE_BIT(PHASE_FAULT_IN_CHECKING_FAST) | PHASE_BIT(PHASE_WAITING_FOR_FEEDER) |
                                     PHASE_BIT(PHASE_UNIQUE_READING_FAST) | PHASE_BIT(PHASE_FORWARDING) | RETRYING},
    [PHASE_WAITING_FOR_EVICTIONS] = {"waiting for an eviction to end",
                                     PHASE_BIT(PHASE_READING_EVICTIONS) | PHASE_BIT(PHASE_FINISHED)},
    [PHASE_FAULT_IN_CHECKING_FAST] = {"looking in the fast tier for the documents to fault in",
                                      PHASE_BIT(PHASE_FAULT_IN_CHECKING_FAST) | PHASE_BIT(PHASE_FORWARDING) |
                                          PHASE_BIT(PHASE_UNIQUE_READING_FAST) | PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | RETRYING},
    [PHASE_WAITING_FOR_FEEDER] = {"waiting for the feeder",
                                  PHASE_BIT(PHASE_FORWARDING) | PHASE_BIT(PHASE_FAULT_IN_FINDING) |
                                      PHASE_BIT(PHASE_POINT_READING_ARCHIVE) | PHASE_BIT(PHASE_EXPLAINING_ARCHIVE) |
                                      PHASE_BIT(PHASE_BOTH_ON_ARCHIVE) | PHASE_BIT(PHASE_STREAM_LOOKING_UP) |
                                      PHASE_BIT(PHASE_FINISHED)},
    [PHASE_FORWARDING] = {"forwarding", PHASE_BIT(PHASE_FORWARDING) | PHASE_BIT(PHASE_STREAM_READING_MARKS) |
                                            PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | PHASE_BIT(PHASE_PUBLISHING_DELETES) |
                                            RETRYING},
    [PHASE_PUBLISHING_DELETES] = {"publishing a delete for other proxies", PHASE_BIT(PHASE_PUBLISHING_DELETES) | RETRYING},
    [PHASE_FAULT_IN_FINDING] = {"finding the documents to fault in", PHASE_BIT(PHASE_FAULT_IN_FINDING) |
                                    PHASE_BIT(PHASE_FAULT_IN_MARKING) | PHASE_BIT(PHASE_FORWARDING) | PHASE_BIT(PHASE_UNIQUE_READING_FAST) | RETRYING},
    [PHASE_FAULT_IN_MARKING] = {"marking the documents to fault in", PHASE_BIT(PHASE_FAULT_IN_MARKING) |
                                    PHASE_BIT(PHASE_FAULT_IN_INSERTING) | RETRYING},
    [PHASE_FAULT_IN_INSERTING] = {"inserting the documents faulted in", PHASE_BIT(PHASE_FAULT_IN_INSERTING) |
                                      PHASE_BIT(PHASE_FAULT_IN_MARKED) | RETRYING},
    [PHASE_FAULT_IN_MARKED] = {"marking the documents faulted in", PHASE_BIT(PHASE_FAULT_IN_MARKED) |
                                   PHASE_BIT(PHASE_FORWARDING) | PHASE_BIT(PHASE_UNIQUE_READING_FAST) | RETRYING},
    [PHASE_UNIQUE_READING_FAST] = {"reading the documents a write computes unique keys from",
                                   PHASE_BIT(PHASE_UNIQUE_READING_FAST) | PHASE_BIT(PHASE_FORWARDING) |
                                       PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | RETRYING},
    [PHASE_POINT_READING_FAST] = {"point read on the fast tier", PHASE_BIT(PHASE_POINT_READING_FAST) |
                                      PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | RETRYING},
    [PHASE_POINT_READING_ARCHIVE] = {"point read on the archive", PHASE_BIT(PHASE_POINT_READING_ARCHIVE) | RETRYING},
    [PHASE_EXPLAINING_FAST] = {"explain on the fast tier", PHASE_BIT(PHASE_EXPLAINING_FAST) |
                                   PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | RETRYING},
    [PHASE_EXPLAINING_ARCHIVE] = {"explain on the archive", PHASE_BIT(PHASE_EXPLAINING_ARCHIVE) | RETRYING},
    [PHASE_BOTH_ON_ARCHIVE] = {"both tiers: the archive", PHASE_BIT(PHASE_BOTH_ON_ARCHIVE) |
                                   PHASE_BIT(PHASE_BOTH_ON_FAST) | RETRYING},
    [PHASE_BOTH_CREATING_ON_FAST] = {"both tiers: creating the fast tier's collection",
                                     PHASE_BIT(PHASE_BOTH_CREATING_ON_FAST) | PHASE_BIT(PHASE_BOTH_ON_FAST) | RETRYING},
    [PHASE_BOTH_ON_FAST] = {"both tiers: the fast tier", PHASE_BIT(PHASE_BOTH_ON_FAST) |
                                PHASE_BIT(PHASE_BOTH_CREATING_ON_FAST) | RETRYING},
    [PHASE_ABORTING_TRANSACTION] = {"aborting the transaction", PHASE_BIT(PHASE_FINISHED)},
    [PHASE_STREAM_READING_MARKS] = {"reading the marks of a change stream's events",
                                    PHASE_BIT(PHASE_STREAM_READING_MARKS) | PHASE_BIT(PHASE_STREAM_WAITING_FOR_MARKS) |
                                        PHASE_BIT(PHASE_WAITING_FOR_FEEDER) | RETRYING},
    [PHASE_STREAM_WAITING_FOR_MARKS] = {"waiting for a worker to settle its mark",
                                        PHASE_BIT(PHASE_STREAM_READING_MARKS) | PHASE_BIT(PHASE_FINISHED)},
    [PHASE_STREAM_LOOKING_UP] = {"looking up a change stream's documents in the archive",
                                 PHASE_BIT(PHASE_STREAM_LOOKING_UP) | RETRYING},
    [PHASE_AWAITING_PRIMARY] = {"awaiting the primary", CALL_PHASES},
    [PHASE_FINISHED] = {"finished", 0},
};

const char *router_phase_name(request_phase_t phase)
{
    return phase < PHASE_COUNT ? phase_table[phase].name : "unknown";
}

void router_enter(proxy_request_t *request, request_phase_t phase)
{
    if (phase >= PHASE_COUNT || !(phase_table[request->phase].next & PHASE_BIT(phase))) {
        TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, request->connection_id, "%s: impossible move from %s to %s",
               request->command_name, router_phase_name(request->phase), router_phase_name(phase));
        abort();
    }
    uint64_t now = uv_now(request->proxy->loop);
    request->phase_ms[request->phase] += (uint32_t)(now - request->phase_entered_ms);
    request->phase_entered_ms = now;
    request->phase = phase;
    if (phase == PHASE_FINISHED) {
        router_log_if_slow(request, now - request->arrived_ms);
        proxy_metrics_request_finished(request);
    }
}

static void route_planned(proxy_request_t *request);
static void route_decided(proxy_request_t *request);
static void on_call_recovered(proxy_request_t *request, bool recovered);

void router_advance(proxy_request_t *request, const router_outcome_t *outcome)
{
    switch (request->phase) {
    case PHASE_AUTHENTICATING:
    case PHASE_RELOADING:
        if (outcome->error != NULL) {
            router_finish_with_error(request, outcome->error);
            return;
        }
        bson_t body;
        bson_copy_to(outcome->document, &body);
        BSON_APPEND_DOUBLE(&body, "ok", 1.0);
        router_finish_with_document(request, &body, 0);
        bson_destroy(&body);
        return;
    case PHASE_ANSWERING_HELLO:
        router_answer_hello(request, outcome->document);
        return;
    case PHASE_ADMITTING:
    case PHASE_LOADING_INDEXES:
        if (outcome->error != NULL) {
            router_finish_with_error(request, outcome->error);
            return;
        }
        route_planned(request);
        return;
    case PHASE_CHOOSING_MEMBERS:
        if (outcome->error != NULL) {
            router_finish_with_error(request, outcome->error);
            return;
        }
        memcpy(request->members, outcome->member_ids, sizeof request->members);
        route_decided(request);
        return;
    case PHASE_WAITING_FOR_PINS:
        router_fault_in_pinned(request);
        return;
    case PHASE_READING_EVICTIONS:
        router_pins_on_evictions(request, outcome);
        return;
    case PHASE_WAITING_FOR_EVICTIONS:
        router_pins_after_wait(request);
        return;
    case PHASE_WAITING_FOR_FEEDER:
        router_after_feeder_wait(request);
        return;
    case PHASE_FORWARDING:
        router_on_tier_reply(request, outcome->reply, outcome->length, outcome->error);
        return;
    case PHASE_PUBLISHING_DELETES:
        router_deletes_on_published(request, outcome);
        return;
    case PHASE_FAULT_IN_CHECKING_FAST:
        router_fault_in_on_fast_checked(request, outcome);
        return;
    case PHASE_FAULT_IN_FINDING:
        router_fault_in_on_found(request, outcome);
        return;
    case PHASE_FAULT_IN_MARKING:
        router_fault_in_on_marking(request, outcome);
        return;
    case PHASE_FAULT_IN_INSERTING:
        router_fault_in_on_inserted(request, outcome);
        return;
    case PHASE_FAULT_IN_MARKED:
        router_fault_in_on_marked(request, outcome);
        return;
    case PHASE_UNIQUE_READING_FAST:
        router_unique_on_read(request, outcome);
        return;
    case PHASE_STREAM_READING_MARKS:
        router_change_stream_on_marks(request, outcome);
        return;
    case PHASE_STREAM_WAITING_FOR_MARKS:
        router_change_stream_after_wait(request);
        return;
    case PHASE_STREAM_LOOKING_UP:
        router_change_stream_on_looked_up(request, outcome);
        return;
    case PHASE_POINT_READING_FAST:
        router_point_read_on_fast_reply(request, outcome);
        return;
    case PHASE_POINT_READING_ARCHIVE:
        router_point_read_on_archive_reply(request, outcome);
        return;
    case PHASE_EXPLAINING_FAST:
        router_explain_on_fast_reply(request, outcome);
        return;
    case PHASE_EXPLAINING_ARCHIVE:
        router_explain_on_archive_reply(request, outcome);
        return;
    case PHASE_BOTH_ON_ARCHIVE:
        router_both_on_archive_reply(request, outcome);
        return;
    case PHASE_BOTH_CREATING_ON_FAST:
        router_both_on_fast_created(request, outcome);
        return;
    case PHASE_BOTH_ON_FAST:
        router_both_on_fast_reply(request, outcome);
        return;
    case PHASE_ABORTING_TRANSACTION:
        router_transaction_on_aborted(request);
        return;
    case PHASE_AWAITING_PRIMARY:
        on_call_recovered(request, outcome->recovered);
        return;
    case PHASE_DECODED:
    case PHASE_PINNING_FAST: /* its round's calls answer the round */
    case PHASE_FINISHED:
    case PHASE_COUNT:
        break;
    }
    TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, request->connection_id, "%s: an outcome arrived in phase %s",
           request->command_name, router_phase_name(request->phase));
    abort();
}

/* backend_reply_fn of a step sent without the retry rules (a transaction's abort). */
void router_on_step_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    router_advance(context, &(router_outcome_t){.reply = reply, .length = length, .error = error});
}

/* --- replies built here ------------------------------------------------------- */

void router_request_free(proxy_request_t *request)
{
    if (request->pinned) {
        router_unpin_fault_in(request);
    }
    router_unique_destroy(request->unique);
    router_pins_release(request);
    bson_free(request->published_reply);
    if (request->has_decision) {
        plan_decision_cleanup(&request->decision);
    }
    switch (request->route_kind) {
    case ROUTE_STATE_POINT:
        bson_destroy(&request->route.point.fast_documents);
        bson_destroy(&request->route.point.missing_ids);
        break;
    case ROUTE_STATE_EXPLAIN:
        bson_destroy(request->route.explain.fast_body);
        break;
    case ROUTE_STATE_BOTH:
        bson_free(request->route.both.archive_reply);
        break;
    case ROUTE_STATE_FAULT_IN:
        bson_destroy(&request->route.fault_in.missing_ids);
        bson_destroy(&request->route.fault_in.copied_ids);
        bson_free(request->route.fault_in.insert);
        break;
    case ROUTE_STATE_STREAM:
        bson_destroy(&request->route.stream.body);
        bson_destroy(&request->route.stream.kept);
        break;
    case ROUTE_STATE_NONE:
    case ROUTE_STATE_TRANSACTION_REFUSAL:
        break;
    }
    bson_destroy(request->stream_stages);
    bson_free(request->call.owned);
    bson_free(request->call.failed_reply);
    bson_destroy(&request->command);
    bson_free(request->message);
    proxy_generation_release(request->proxy, request->generation); /* last: the above may read it */
    bson_free(request);
}

void router_close_connection(proxy_request_t *request)
{
    router_enter(request, PHASE_FINISHED);
    server_reply_t close_reply = {.close_after = true};
    server_complete(request->pending, &close_reply);
    router_request_free(request);
}

/* Sends encoded (an OP_MSG or OP_REPLY, owned) to the client, compressed like the
 * request was, and frees the request. */
void router_finish_with_message(proxy_request_t *request, uint8_t *encoded, size_t length)
{
    server_reply_t reply = {0};
    bson_error_t error;
    router_enter(request, PHASE_FINISHED);
    proxy_metrics_reply(request->proxy, encoded, length);
    cluster_time_prepare_reply(request->proxy, encoded, length);
    if (request->legacy && wire_message_opcode(encoded) == WIRE_OP_MSG) {
        /* An OP_QUERY command a tier answered: the client reads OP_REPLY, as from mongos. */
        uint8_t *converted;
        size_t converted_length;
        bool built = wire_op_reply_from_op_msg(encoded, length, &converted, &converted_length, &error);
        bson_free(encoded);
        if (!built) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, request->connection_id,
                   "closing connection: a tier's reply to an OP_QUERY command: %s", error.message);
            server_reply_t close_reply = {.close_after = true};
            server_complete(request->pending, &close_reply);
            router_request_free(request);
            return;
        }
        encoded = converted;
        length = converted_length;
    }
    if (request->no_reply) {
        bson_free(encoded);
        encoded = NULL;
        length = 0;
    } else {
        wire_message_set_response_to(encoded, length, request->client_request_id);
        if (request->compressed) {
            uint8_t *compressed;
            size_t compressed_length;
            if (wire_compress(encoded, length, request->compressor, &compressed, &compressed_length, &error)) {
                bson_free(encoded);
                encoded = compressed;
                length = compressed_length;
            }
        }
    }
    reply.data = encoded;
    reply.length = length;
    server_complete(request->pending, &reply);
    router_request_free(request);
}

void router_finish_with_document(proxy_request_t *request, const bson_t *document, uint32_t delay_ms)
{
    uint8_t *encoded = NULL;
    size_t length = 0;
    bson_error_t error;
    /* As a mongos, every reply carries the cluster's time, and the operation's. */
    bson_t body = BSON_INITIALIZER;
    bson_concat(&body, document);
    cluster_time_append(request->proxy, &body);
    if (request->operation_time != 0 && !bson_has_field(&body, "operationTime")) {
        bson_append_timestamp(&body, "operationTime", -1, (uint32_t)(request->operation_time >> 32),
                              (uint32_t)request->operation_time);
    }
    bool built = request->legacy
                     ? wire_op_reply_command_build(0, request->client_request_id, &body, &encoded, &length, &error)
                     : wire_op_msg_build(0, request->client_request_id, 0, &body, NULL, 0, &encoded, &length, &error);
    bson_destroy(&body);
    if (!built) {
        bson_t fallback = BSON_INITIALIZER;
        tc_error_append_reply(&error, &fallback);
        built = request->legacy
                    ? wire_op_reply_command_build(0, request->client_request_id, &fallback, &encoded, &length, &error)
                    : wire_op_msg_build(0, request->client_request_id, 0, &fallback, NULL, 0, &encoded, &length,
                                        &error);
        bson_destroy(&fallback);
        if (!built) {
            router_close_connection(request);
            return;
        }
    }
    if (delay_ms > 0 && !request->no_reply) {
        server_reply_t reply = {.data = encoded, .length = length, .delay_ms = delay_ms};
        router_enter(request, PHASE_FINISHED);
        server_complete(request->pending, &reply);
        router_request_free(request);
        return;
    }
    router_finish_with_message(request, encoded, length);
}

void router_finish_with_error(proxy_request_t *request, const bson_error_t *error)
{
    bson_t body = BSON_INITIALIZER;
    tc_error_append_reply(error, &body);
    int32_t code = error->domain == TC_ERROR_DOMAIN ? (int32_t)error->code : 0;
    if (code == TC_ERR_HOST_UNREACHABLE && bson_has_field(&request->command, "txnNumber")) {
        /* As mongos labels a network error on a retryable write. */
        bson_t labels;
        BSON_APPEND_ARRAY_BEGIN(&body, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", "RetryableWriteError");
        bson_append_array_end(&body, &labels);
    }
    router_finish_with_document(request, &body, 0);
    bson_destroy(&body);
}

/* Relays a tier's reply (an error) as it is. */
void router_relay_reply(proxy_request_t *request, const uint8_t *reply, size_t length)
{
    uint8_t *copy = bson_malloc(length);
    memcpy(copy, reply, length);
    router_finish_with_message(request, copy, length);
}

bool router_reply_is_ok(const bson_t *body)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, body, "ok") && bson_iter_as_double(&iter) == 1.0;
}

bool router_take_ok_reply(proxy_request_t *request, const uint8_t *reply, size_t length, const bson_error_t *error,
                          bson_t *out_body)
{
    bson_error_t parse_error;
    if (error != NULL) {
        request->proxy->requests_failed++;
        router_finish_with_error(request, error);
        return false;
    }
    if (!wire_op_msg_peek_body(reply, length, out_body, &parse_error) || !router_reply_is_ok(out_body)) {
        router_relay_reply(request, reply, length);
        return false;
    }
    return true;
}

/* --- forwarding ------------------------------------------------------------------ */

/* The int64 value of body.path[0].path[1] inside a message we own, to patch. */
static uint8_t *find_int64_in_place(const bson_t *body, const char *outer, const char *inner)
{
    bson_iter_t iter, child;
    if (!bson_iter_init_find(&iter, body, outer)) {
        return NULL;
    }
    if (inner != NULL) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &child) || !bson_iter_find(&child, inner)) {
            return NULL;
        }
        iter = child;
    }
    if (!BSON_ITER_HOLDS_INT64(&iter)) {
        return NULL;
    }
    return (uint8_t *)iter.raw + iter.d1;
}

static int64_t read_int64(const uint8_t *bytes)
{
    uint64_t little_endian;
    memcpy(&little_endian, bytes, 8);
    return (int64_t)BSON_UINT64_FROM_LE(little_endian);
}

static void write_int64(uint8_t *bytes, int64_t value)
{
    uint64_t little_endian = BSON_UINT64_TO_LE((uint64_t)value);
    memcpy(bytes, &little_endian, 8);
}

static void count_route(proxy_request_t *request, plan_route_t route)
{
    if (request->namespace_state != NULL) {
        request->namespace_state->route_counts[route]++;
        request->namespace_state->reason_counts[request->decision.reason]++;
    }
}

/* A write acknowledged by the fast tier: reads of the namespace sent to the
 * archive from now on wait until the feeder has applied it. Also a failed
 * write's operationTime: an ordered insert may have written a part. Deletes are
 * also kept apart: they are all that a fault-in or the archive half of a point
 * read must wait for (see router_wait_for_feeder). */
/* Notes the write's time for the read-your-writes waits; returns the time of the
 * delete it acknowledges (a committed transaction's: it may have deleted), which
 * other proxies must learn before the client does (router_publish_deletes), or 0. */
static uint64_t note_fast_write(proxy_request_t *request, const bson_t *body)
{
    if (strcmp(request->command_name, "commitTransaction") == 0) {
        return router_note_transaction_commit(request, body);
    }
    if (request->namespace_state == NULL || !request->has_decision || request->decision.kind != PLAN_KIND_WRITE ||
        request->decision.is_explain) {
        return 0;
    }
    uint64_t time = timestamp_find(body, "operationTime");
    if (time == 0) {
        return 0;
    }
    if (time > request->namespace_state->last_write_time) {
        request->namespace_state->last_write_time = time;
    }
    proxy_metrics_fast_write(request->proxy, request->namespace_state, time, body);
    bson_iter_t remove;
    bool is_delete = strcmp(request->command_name, "delete") == 0 ||
                     ((strcmp(request->command_name, "findAndModify") == 0 ||
                       strcmp(request->command_name, "findandmodify") == 0) &&
                      bson_iter_init_find(&remove, &request->command, "remove") && bson_iter_as_bool(&remove));
    if (!is_delete) {
        return 0;
    }
    if (time > request->namespace_state->last_delete_time) {
        request->namespace_state->last_delete_time = time;
    }
    return time;
}

/* --- sending to a tier, once more after a retryable failure ---------------------- */

static void on_call_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error);

/* The call's outcome to its phase's step. */
static void finish_call(proxy_request_t *request, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    router_advance(request, &(router_outcome_t){.reply = reply, .length = length, .error = error});
}

/* Sends the call's message, readied for its tier (cluster_time.c), to the tier's
 * member chosen for the request. */
static void send_call(proxy_request_t *request)
{
    tier_call_t *call = &request->call;
    uint8_t *rebuilt;
    size_t rebuilt_length;
    backend_pool_t *pool = backend_pool_member(request->proxy->tiers[call->tier], request->members[call->tier]);
    if (pool == NULL) {
        bson_error_t error;
        tc_error_set(&error, TC_ERR_HOST_UNREACHABLE,
                     "the member of the %s tier this read (or its cursor) was on left its replica set",
                     proxy_tier_name(call->tier));
        on_call_reply(request, NULL, 0, &error);
        return;
    }
    cluster_time_prepare_request(request->proxy, call->tier, call->message, call->length, &rebuilt, &rebuilt_length);
    if (rebuilt != NULL) {
        backend_pool_send(pool, rebuilt, rebuilt_length, on_call_reply, request);
        bson_free(rebuilt);
        return;
    }
    backend_pool_send(pool, call->message, call->length, on_call_reply, request);
}

void router_call_tier(proxy_request_t *request, request_phase_t phase, proxy_tier_t tier, uint8_t *message,
                      size_t length, uint8_t *owned)
{
    tier_call_t *call = &request->call;
    router_enter(request, phase);
    bson_free(call->owned);
    bson_free(call->failed_reply);
    memset(call, 0, sizeof *call);
    call->tier = tier;
    call->phase = phase;
    call->message = message;
    call->length = length;
    call->owned = owned;
    request->tier = tier;
    send_call(request);
}

void router_call_tier_command(proxy_request_t *request, request_phase_t phase, proxy_tier_t tier, bson_t *command)
{
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    bool built = wire_op_msg_build(0, 0, 0, command, NULL, 0, &encoded, &length, &error);
    bson_destroy(command);
    if (!built) {
        router_finish_with_error(request, &error);
        return;
    }
    router_call_tier(request, phase, tier, encoded, length, encoded);
}

bool router_retries_failure(const proxy_t *proxy, bool retried, retry_kind_t kind, const bson_t *body,
                            const bson_error_t *error, int32_t *code)
{
    *code = 0;
    if (retried || kind == RETRY_NEVER || proxy->config->failover_wait_ms <= 0 || proxy->recovery_stopped) {
        return false;
    }
    return error != NULL || (body != NULL && retry_reply_is_retryable(body, kind, code));
}

const char *router_failure_text(const bson_error_t *error, int32_t code)
{
    return error != NULL ? error->message : tc_error_code_name(code);
}

/* recovery_fn: the wait for the tier's primary ended. */
static void on_primary_found(void *context, bool recovered)
{
    router_advance(context, &(router_outcome_t){.recovered = recovered});
}

/* The primary is found again (recovered), or the wait ended: send once more, or
 * hand the first attempt's failure to the call's step. */
static void on_call_recovered(proxy_request_t *request, bool recovered)
{
    tier_call_t *call = &request->call;
    router_enter(request, call->phase);
    if (recovered) {
        send_call(request);
        return;
    }
    uint8_t *failed_reply = call->failed_reply;
    call->failed_reply = NULL;
    if (call->failed_on_network) {
        bson_error_t error = call->network_error;
        finish_call(request, NULL, 0, &error);
    } else {
        finish_call(request, failed_reply, call->failed_length, NULL);
    }
    bson_free(failed_reply);
}

/* A read a secondary failed runs once more at once, on a member chosen again
 * (member_route.c), as a driver's retryable read selects a server again; with
 * none left, the first failure is answered. */
static void retry_on_another_member(proxy_request_t *request, const uint8_t *reply, size_t length,
                                    const bson_error_t *error, int32_t code)
{
    tier_call_t *call = &request->call;
    bson_error_t select_error;
    uint64_t failed = request->members[call->tier];
    const char *failure = router_failure_text(error, code);
    if (!member_route_choose_again(request->proxy, &request->command, call->tier, failed, failure,
                                   &request->members[call->tier], &select_error)) {
        finish_call(request, reply, length, error);
        return;
    }
    request->proxy->requests_retried++;
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "%s failed on a member of the %s tier (%s); sent again",
           request->command_name, proxy_tier_name(call->tier), failure);
    send_call(request);
}

static void on_call_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    proxy_t *proxy = request->proxy;
    tier_call_t *call = &request->call;
    int32_t code = 0;
    bson_t body;
    bson_error_t parse_error;
    bool parsed = error == NULL && wire_message_opcode(reply) == WIRE_OP_MSG &&
                  wire_op_msg_peek_body(reply, length, &body, &parse_error);
    if (parsed) {
        cluster_time_note(proxy, call->tier, &body);
        uint64_t time = timestamp_find(&body, "operationTime");
        request->operation_time = time > request->operation_time ? time : request->operation_time;
    }
    if (!router_retries_failure(proxy, call->retried, request->retry_kind, parsed ? &body : NULL, error, &code)) {
        finish_call(request, reply, length, error);
        return;
    }
    call->retried = true;
    if (request->members[call->tier] != 0) {
        retry_on_another_member(request, reply, length, error, code);
        return;
    }
    /* primaryPreferred (or any preference a secondary may answer) does not wait for
     * a primary that is gone (a network error, or "not primary" and the like, after
     * which a driver marks it unknown): it runs once more at once on a secondary. */
    const char *failure = router_failure_text(error, code);
    if (request->has_decision && (error != NULL || retry_code_changes_primary(code)) &&
        member_route_leave_failed_primary(proxy, &request->command, &request->decision, request->namespace_state,
                                          call->tier, failure, &request->members[call->tier])) {
        proxy->requests_retried++;
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id,
               "%s failed on the %s tier's primary (%s); sent again to a secondary", request->command_name,
               proxy_tier_name(call->tier), failure);
        send_call(request);
        return;
    }
    if (error != NULL) {
        call->failed_on_network = true;
        call->network_error = *error;
    } else {
        call->failed_reply = bson_malloc(length);
        memcpy(call->failed_reply, reply, length);
        call->failed_length = length;
    }
    if (error != NULL || retry_code_changes_primary(code)) {
        backend_pool_clear(proxy->tiers[call->tier]);
    }
    proxy->requests_retried++;
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id,
           "%s failed on the %s tier (%s); it runs once more when the tier's primary is found", request->command_name,
           proxy_tier_name(call->tier), failure);
    router_enter(request, PHASE_AWAITING_PRIMARY);
    recovery_wait(proxy, call->tier, clock_monotonic_ms() + proxy->config->failover_wait_ms, on_primary_found, request);
}

void router_on_tier_reply(proxy_request_t *request, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_t *proxy = request->proxy;
    if (error != NULL) {
        proxy->requests_failed++;
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "%s failed on the %s tier: %s",
               request->command_name, proxy_tier_name(request->tier), error->message);
        router_finish_with_error(request, error);
        return;
    }
    access_note_reply(proxy, request->command_name, &request->fields);
    bson_t body;
    bson_error_t parse_error;
    if (access_trims_reply(proxy, request->command_name) && wire_message_opcode(reply) == WIRE_OP_MSG &&
        wire_op_msg_peek_body(reply, length, &body, &parse_error)) {
        bson_t trimmed;
        bson_copy_to(&body, &trimmed);
        access_trim_reply(&request->client, &trimmed);
        router_finish_with_document(request, &trimmed, 0);
        bson_destroy(&trimmed);
        return;
    }
    if (request->change_stream && request->route_kind == ROUTE_STATE_NONE &&
        router_change_stream_takes_reply(request, reply, length)) {
        return;
    }
    uint8_t *copy = bson_malloc(length);
    memcpy(copy, reply, length);
    router_finish_cursor_reply(request, copy, length);
}

void router_finish_cursor_reply(proxy_request_t *request, uint8_t *copy, size_t length)
{
    proxy_t *proxy = request->proxy;
    bson_t body;
    bson_error_t parse_error;
    if (wire_message_opcode(copy) == WIRE_OP_MSG && wire_op_msg_peek_body(copy, length, &body, &parse_error)) {
        uint64_t delete_time = request->tier == PROXY_TIER_FAST ? note_fast_write(request, &body) : 0;
        if (delete_time != 0 && request->phase == PHASE_FORWARDING) {
            router_publish_deletes(request, delete_time, copy, length);
            return;
        }
        if (router_request_is_explain(request) && router_reply_is_ok(&body)) {
            router_finish_explain(request, &body, NULL);
            bson_free(copy);
            return;
        }
        uint8_t *cursor_id = find_int64_in_place(&body, "cursor", "id");
        if (request->getmore_proxy_id != 0) {
            bson_iter_t code;
            bool cursor_gone = cursor_id != NULL ? read_int64(cursor_id) == 0
                                                 : (bson_iter_init_find(&code, &body, "code") &&
                                                    bson_iter_as_int64(&code) == TC_ERR_CURSOR_NOT_FOUND);
            if (cursor_id != NULL && !cursor_gone) {
                write_int64(cursor_id, request->getmore_proxy_id);
                proxy_cursor_t *cursor = cursor_map_find(proxy->cursors, request->getmore_proxy_id);
                if (cursor != NULL) {
                    cursor->last_used_ms = clock_monotonic_ms();
                }
            } else if (cursor_gone) {
                cursor_map_remove(proxy->cursors, request->getmore_proxy_id);
            }
        } else if (cursor_id != NULL && read_int64(cursor_id) != 0) {
            bson_iter_t ns_iter, cursor_iter;
            const char *cursor_ns = request->ns;
            if (bson_iter_init_find(&cursor_iter, &body, "cursor") && bson_iter_recurse(&cursor_iter, &ns_iter) &&
                bson_iter_find(&ns_iter, "ns") && BSON_ITER_HOLDS_UTF8(&ns_iter)) {
                cursor_ns = bson_iter_utf8(&ns_iter, NULL);
            }
            int64_t proxy_id = cursor_map_add(proxy->cursors, request->tier, request->members[request->tier],
                                              read_int64(cursor_id), cursor_ns);
            proxy_cursor_t *cursor = cursor_map_find(proxy->cursors, proxy_id);
            cursor->change_stream = request->change_stream;
            cursor->update_lookup = request->stream_update_lookup;
            cursor->stages = request->stream_stages, request->stream_stages = NULL; /* the cursor's now */
            write_int64(cursor_id, proxy_id);
        }
    }
    router_finish_with_message(request, copy, length);
}

void router_forward(proxy_request_t *request, proxy_tier_t tier)
{
    router_call_tier(request, PHASE_FORWARDING, tier, request->message, request->length, NULL);
}

/* --- cursors: getMore goes to the tier that opened the cursor -------------------- */

static void route_get_more(proxy_request_t *request)
{
    bson_error_t error;
    bson_t body;
    if (!wire_op_msg_peek_body(request->message, request->length, &body, &error)) {
        router_finish_with_error(request, &error);
        return;
    }
    uint8_t *id_bytes = find_int64_in_place(&body, "getMore", NULL);
    if (id_bytes == NULL) {
        bson_iter_t iter;
        bson_iter_init(&iter, &body);
        bson_iter_next(&iter);
        tc_error_set(&error, TC_ERR_TYPE_MISMATCH,
                     "BSON field 'getMore.getMore' is the wrong type '%s', expected type 'long'",
                     value_type_name(bson_iter_type(&iter)));
        router_finish_with_error(request, &error);
        return;
    }
    int64_t proxy_id = read_int64(id_bytes);
    proxy_cursor_t *cursor = cursor_map_find(request->proxy->cursors, proxy_id);
    if (cursor == NULL) {
        tc_error_set(&error, TC_ERR_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)proxy_id);
        router_finish_with_error(request, &error);
        return;
    }
    request->getmore_proxy_id = proxy_id;
    request->change_stream = cursor->change_stream;
    request->stream_update_lookup = cursor->update_lookup;
    request->stream_stages = cursor->stages != NULL ? bson_copy(cursor->stages) : NULL;
    request->members[cursor->tier] = cursor->member_id;
    write_int64(id_bytes, cursor->backend_id);
    router_forward(request, cursor->tier);
}

/* --- planning ------------------------------------------------------------------------ */

static void on_members_chosen(void *context, const uint64_t *member_ids, const bson_error_t *error)
{
    router_advance(context, &(router_outcome_t){.member_ids = member_ids, .error = error});
}

static void route_planned(proxy_request_t *request)
{
    proxy_t *proxy = request->proxy;
    bson_error_t error;
    const plan_policy_t *policy = NULL;
    plan_coverage_t coverage = {0};

    if (plan_command_namespace_fields(&request->fields, request->ns, sizeof request->ns)) {
        request->namespace_state = proxy_find_namespace(proxy, request->ns);
        if (request->namespace_state != NULL) {
            policy = &request->namespace_state->policy;
            coverage = proxy_coverage(proxy, request->namespace_state);
        }
    }
    if (plan_command_is_write(request->command_name) && unique_indexes_wait(request)) {
        return; /* a write's new unique key values are checked: planned once the archive's are known */
    }
    request->has_decision = true;
    request->retry_kind = retry_command_kind_fields(&request->fields);
    if (!plan_command_fields(&request->fields, policy, &coverage, &request->decision, &error)) {
        router_finish_with_error(request, &error);
        return;
    }
    router_enter(request, PHASE_CHOOSING_MEMBERS);
    member_route_choose(proxy, &request->fields, request->command_name, &request->decision,
                        request->namespace_state, on_members_chosen, request);
}

/* Planned, and each tier's member chosen for a read with a $readPreference. */
static void route_decided(proxy_request_t *request)
{
    plan_decision_t *decision = &request->decision;
    count_route(request, decision->route);
    TC_LOG(TC_LOG_DEBUG, LOG_COMPONENT, request->connection_id, "%s on %s: %s (%s)", request->command_name,
           request->ns, plan_route_name(decision->route), decision->reason_text);
    char refusal_reason[PLAN_REASON_TEXT_SIZE + 160];
    if (decision->in_transaction && !router_transaction_may_run(request, refusal_reason, sizeof refusal_reason)) {
        router_refuse_in_transaction(request, refusal_reason);
        return;
    }
    if (router_refuse_tiered_output(request) || router_change_stream_refuse_whole(request)) {
        return;
    }
    switch (decision->route) {
    case PLAN_ROUTE_PROXY:
        router_answer_locally(request);
        return;
    case PLAN_ROUTE_CURSOR_OWNER:
        if (strcmp(request->command_name, "getMore") == 0) {
            route_get_more(request);
        } else {
            router_kill_cursors(request);
        }
        return;
    case PLAN_ROUTE_TRANSACTION_OWNER:
        router_forward(request, PROXY_TIER_FAST);
        return;
    case PLAN_ROUTE_FAST:
        if (decision->kind == PLAN_KIND_WRITE && !decision->is_explain &&
            (decision->needs_fault_in || decision->unique_id_check_count > 0 || router_unique_pending(request))) {
            router_fault_in_start(request);
            return;
        }
        if (decision->is_change_stream && !decision->is_explain) {
            router_change_stream_open(request);
            return;
        }
        router_forward(request, PROXY_TIER_FAST);
        return;
    case PLAN_ROUTE_FAST_THEN_ARCHIVE:
        router_point_read_start(request);
        return;
    case PLAN_ROUTE_ARCHIVE:
        if (decision->applies_to_both_tiers) {
            router_both_tiers_start(request);
            return;
        }
        if (decision->kind == PLAN_KIND_READ) {
            router_wait_for_feeder(request, false, PHASE_FORWARDING);
            return;
        }
        if (router_route_catalog_listing(request)) {
            return;
        }
        router_forward(request, PROXY_TIER_ARCHIVE);
        return;
    }
}

/* --- arrival ------------------------------------------------------------------------ */

/* A command access.c answered (saslStart, saslContinue, logout, connectionStatus). */
static void on_access_reply(void *context, const bson_t *reply, const bson_error_t *error)
{
    router_advance(context, &(router_outcome_t){.document = reply, .error = error});
}

static void on_admitted(void *context, const bson_error_t *error)
{
    router_advance(context, &(router_outcome_t){.error = error});
}

static void authenticate(proxy_request_t *request)
{
    router_enter(request, PHASE_AUTHENTICATING);
    access_run(request->proxy, &request->client, request->command_name, &request->command, on_access_reply, request);
}

static void admit(proxy_request_t *request)
{
    router_enter(request, PHASE_ADMITTING);
    fields_index(&request->fields, &request->command); /* the one walk every later step reads */
    access_admit(request->proxy, &request->client, request->command_name, &request->command, on_admitted, request);
}

void router_handle(void *application, server_pending_t *pending, const server_request_t *server_request)
{
    proxy_t *proxy = application;
    proxy_request_t *request = bson_malloc0(sizeof *request);
    bson_error_t error;
    wire_header_t header;
    request->proxy = proxy;
    request->generation = proxy_generation_acquire(proxy);
    request->pending = pending;
    request->arrived_ms = request->phase_entered_ms = uv_now(proxy->loop);
    request->arrived_ns = uv_hrtime();
    request->client.connection_data = server_request->connection_data;
    request->client.connection_id = server_request->connection_id;
    request->client.peer_address = server_request->peer_address;
    request->connection_id = server_request->connection_id;
    request->command_name = "";
    bson_init(&request->command);
    proxy->requests++;

    if (!wire_request_header_parse(server_request->message, server_request->length, &header, &error)) {
        goto close_connection;
    }
    request->client_request_id = header.request_id;
    if (header.opcode == WIRE_OP_COMPRESSED) {
        if (!wire_decompress(server_request->message, server_request->length, &request->message, &request->length,
                             &request->compressor, &error) ||
            !wire_request_header_parse(request->message, request->length, &header, &error)) {
            goto close_connection;
        }
        request->compressed = true;
    } else {
        request->message = bson_malloc(server_request->length);
        memcpy(request->message, server_request->message, server_request->length);
        request->length = server_request->length;
    }

    if (header.opcode == WIRE_OP_QUERY) {
        wire_op_query_t query;
        bool parsed = wire_op_query_parse(request->message, request->length, &query, &error);
        if (wire_op_query_is_removed(&query)) {
            /* A legacy find: answered as mongod 6.0 does, from the namespace alone. */
            uint8_t *encoded;
            size_t encoded_length;
            if (!wire_op_query_removed_reply_build(0, request->client_request_id, &encoded, &encoded_length,
                                                   &error)) {
                goto close_connection;
            }
            router_finish_with_message(request, encoded, encoded_length);
            return;
        }
        bson_destroy(&request->command);
        if (!parsed || !wire_op_query_command(&query, &request->command, &error)) {
            goto close_connection;
        }
        /* From here on the client is answered in OP_REPLY, as mongos answers it. */
        request->legacy = true;
        if (!wire_op_query_check_command(&request->command, &error)) {
            /* Refused while parsing, as mongod refuses it: no $clusterTime. */
            bson_t refusal = BSON_INITIALIZER;
            uint8_t *encoded;
            size_t encoded_length;
            tc_error_append_reply(&error, &refusal);
            bool built = wire_op_reply_command_build(0, request->client_request_id, &refusal, &encoded,
                                                     &encoded_length, &error);
            bson_destroy(&refusal);
            if (!built) {
                goto close_connection;
            }
            router_finish_with_message(request, encoded, encoded_length);
            return;
        }
        bson_iter_t first;
        if (bson_iter_init(&first, &request->command) && bson_iter_next(&first)) {
            request->command_name = bson_iter_key(&first);
        }
        if (strcmp(request->command_name, "isMaster") == 0 || strcmp(request->command_name, "ismaster") == 0 ||
            strcmp(request->command_name, "hello") == 0) {
            request->command_name = "isMaster";
            router_answer_locally(request);
            return;
        }
        if (access_answers(request->command_name)) {
            authenticate(request); /* saslStart, saslContinue, authenticate: old drivers still log in this way */
            return;
        }
        /* buildinfo and _isSelf (the Java driver 3.x sends buildinfo in its handshake):
         * forwarded as their OP_MSG form, the reply turned back into OP_REPLY by
         * router_finish_with_message. */
        uint8_t *upconverted;
        size_t upconverted_length;
        if (!wire_op_msg_build(header.request_id, 0, 0, &request->command, NULL, 0, &upconverted,
                               &upconverted_length, &error)) {
            goto close_connection;
        }
        bson_free(request->message);
        request->message = upconverted;
        request->length = upconverted_length;
        admit(request);
        return;
    }
    if (header.opcode != WIRE_OP_MSG) {
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "closing connection from %s: opcode %d",
               server_request->peer_address, header.opcode);
        goto close_connection;
    }
    wire_op_msg_t parsed;
    if (!wire_op_msg_parse(request->message, request->length, &parsed, &error)) {
        bson_destroy(&request->command);
        bson_init(&request->command);
        router_finish_with_error(request, &error);
        return;
    }
    if (parsed.flags & WIRE_MSG_FLAG_MORE_TO_COME) {
        /* Forward as an acknowledged request and drop the answer: the proxy must
         * know when the tier is done with it before it reuses the connection. */
        request->no_reply = true;
        uint32_t flags = parsed.flags & ~(uint32_t)WIRE_MSG_FLAG_MORE_TO_COME;
        uint32_t little_endian = BSON_UINT32_TO_LE(flags);
        memcpy(request->message + WIRE_HEADER_SIZE, &little_endian, 4);
        wire_message_set_request_id(request->message, request->length, header.request_id); /* refreshes a checksum */
    }
    bson_destroy(&request->command);
    if (!wire_op_msg_command(&parsed, &request->command, &error)) {
        router_finish_with_error(request, &error);
        return;
    }
    bson_iter_t first;
    if (!bson_iter_init(&first, &request->command) || !bson_iter_next(&first)) {
        tc_error_set(&error, TC_ERR_FAILED_TO_PARSE, "Empty command: a command document needs a command name");
        router_finish_with_error(request, &error);
        return;
    }
    request->command_name = bson_iter_key(&first);
    if (access_answers(request->command_name)) {
        authenticate(request);
        return;
    }
    admit(request);
    return;

close_connection:
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "closing connection from %s: %s",
           server_request->peer_address, error.message);
    router_close_connection(request);
}
