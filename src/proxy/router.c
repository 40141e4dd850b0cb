/* One client request through the proxy, on the event loop:
 *
 *   arrive ─▶ decode (OP_COMPRESSED, OP_MSG / OP_QUERY handshake)
 *          ─▶ authentication commands, answered by access.c                ─▶ reply
 *          ─▶ admit (access.c: with authorization, the user's privileges)  ─▶ or refuse
 *          ─▶ answered here (hello, ping, thermoclineStatus)          ─▶ reply
 *          ─▶ plan (planner.c) ─▶ [fault-in: archive find ─▶ fast insert]
 *                              ─▶ forward to the tier ─▶ patch cursor ids ─▶ reply
 *
 * Whatever reads the archive (a read routed there, the archive half of a point
 * read, a fault-in's find) first waits in proxy->waits until the feeder has
 * applied every fast-tier write to the namespace acknowledged before it
 * (read-your-writes across tiers), at most readYourWritesWait.
 *
 * A command routed to one tier is forwarded as the client's own bytes (only the
 * requestID and, for getMore, the cursor id change), and its reply comes back the
 * same way, with the tier's cursor id replaced by the proxy's. */
#include "proxy/proxy_private.h"
#include "proxy/retry.h"

#include "common/log.h"
#include "query/order.h"
#include "query/value_format.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "ROUTER"
#define MAX_WIRE_VERSION 17 /* MongoDB 6.0: the proxy speaks no newer protocol */
#define DEFAULT_LOGICAL_SESSION_TIMEOUT_MINUTES 30

/* The request's current send to a tier, kept so that it can be sent once more
 * (retry.h's rules) once the tier's primary is found again (recovery.c). */
typedef struct tier_call {
    proxy_tier_t tier;
    uint8_t *message;       /* the client's own message, or owned */
    size_t length;
    uint8_t *owned;         /* a message the router built for this step */
    backend_reply_fn done;
    bool retried;
    /* The first attempt's failure, answered if the primary is not found in time. */
    bool failed_on_network;
    bson_error_t network_error;
    uint8_t *failed_reply;
    size_t failed_length;
} tier_call_t;

typedef struct proxy_request {
    proxy_t *proxy;
    server_pending_t *pending;
    access_client_t client;  /* who sent it (access.c) */
    uint64_t connection_id;
    int32_t client_request_id;
    bool legacy_hello;      /* an OP_QUERY isMaster: answered with OP_REPLY */
    bool compressed;
    uint8_t compressor;
    bool no_reply;          /* the client sent moreToCome */
    uint8_t *message;       /* the request as forwarded (decompressed, flags cleared) */
    size_t length;
    bson_t command;         /* body with document sequences merged (for the planner) */
    const char *command_name;
    plan_decision_t decision;
    bool has_decision;
    namespace_state_t *namespace_state;
    char ns[PLAN_NAMESPACE_SIZE];
    proxy_tier_t tier;
    uint64_t members[PROXY_TIER_COUNT]; /* the member of each tier its reads go to (0: the primary) */
    int64_t getmore_proxy_id; /* getMore: the client's cursor id */
    bool opens_cursor;        /* the reply may carry a new cursor to map */
    bool pinned; /* the documents it faults in are pinned against the evictor */
    /* PLAN_ROUTE_FAST_THEN_ARCHIVE: the fast tier's documents and the ids it lacked. */
    bool has_point_state;
    bool point_rebuilt; /* the fast tier got our find (one batch), not the client's */
    bson_t point_fast_documents;
    bson_t point_missing_ids;
    /* explain of a point read: the fast tier's explain, while the archive's runs. */
    bson_t *explain_fast_body;
    retry_kind_t retry_kind; /* of the client's command; also its internal steps' */
    tier_call_t call;
    uint64_t operation_time; /* the latest operationTime of its tiers' replies */
    bson_error_t refusal; /* a transaction's command refused: sent once its abort is done */
} proxy_request_t;

/* --- replies built here ------------------------------------------------------- */

static void unpin_fault_in(proxy_request_t *request);

static void request_free(proxy_request_t *request)
{
    if (request->pinned) {
        unpin_fault_in(request);
    }
    if (request->has_decision) {
        plan_decision_cleanup(&request->decision);
    }
    if (request->has_point_state) {
        bson_destroy(&request->point_fast_documents);
        bson_destroy(&request->point_missing_ids);
    }
    bson_destroy(request->explain_fast_body);
    bson_free(request->call.owned);
    bson_free(request->call.failed_reply);
    bson_destroy(&request->command);
    bson_free(request->message);
    bson_free(request);
}

/* Sends encoded (an OP_MSG or OP_REPLY, owned) to the client, compressed like the
 * request was, and frees the request. */
static void finish_with_message(proxy_request_t *request, uint8_t *encoded, size_t length)
{
    server_reply_t reply = {0};
    bson_error_t error;
    cluster_time_prepare_reply(request->proxy, encoded, length);
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
    request_free(request);
}

static void finish_with_document(proxy_request_t *request, const bson_t *document, uint32_t delay_ms)
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
    bool built = wire_op_msg_build(0, request->client_request_id, 0, &body, NULL, 0, &encoded, &length, &error);
    bson_destroy(&body);
    if (!built) {
        bson_t fallback = BSON_INITIALIZER;
        tc_error_append_reply(&error, &fallback);
        built = wire_op_msg_build(0, request->client_request_id, 0, &fallback, NULL, 0, &encoded, &length, &error);
        bson_destroy(&fallback);
        if (!built) {
            server_reply_t close_reply = {.close_after = true};
            server_complete(request->pending, &close_reply);
            request_free(request);
            return;
        }
    }
    if (delay_ms > 0 && !request->no_reply) {
        server_reply_t reply = {.data = encoded, .length = length, .delay_ms = delay_ms};
        server_complete(request->pending, &reply);
        request_free(request);
        return;
    }
    finish_with_message(request, encoded, length);
}

static void finish_with_error(proxy_request_t *request, const bson_error_t *error)
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
    finish_with_document(request, &body, 0);
    bson_destroy(&body);
}

/* --- answered by the proxy ------------------------------------------------------ */

/* extra: what access.c adds for authentication (NULL: nothing). */
static void append_hello_fields(proxy_request_t *request, bool legacy_name, const bson_t *extra, bson_t *body)
{
    proxy_t *proxy = request->proxy;
    int32_t max_wire = MAX_WIRE_VERSION;
    int32_t session_minutes = DEFAULT_LOGICAL_SESSION_TIMEOUT_MINUTES;
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        const backend_server_info_t *info = backend_pool_server_info(proxy->tiers[tier]);
        if (info->known) {
            max_wire = info->max_wire_version < max_wire ? info->max_wire_version : max_wire;
            if (info->logical_session_timeout_minutes >= 0 && info->logical_session_timeout_minutes < session_minutes) {
                session_minutes = info->logical_session_timeout_minutes;
            }
        }
    }
    BSON_APPEND_BOOL(body, legacy_name ? "ismaster" : "isWritablePrimary", true);
    /* mongos's mark: drivers treat the proxy as a router and never look past it. */
    BSON_APPEND_UTF8(body, "msg", "isdbgrid");
    bson_t topology;
    BSON_APPEND_DOCUMENT_BEGIN(body, "topologyVersion", &topology);
    BSON_APPEND_OID(&topology, "processId", &proxy->process_id);
    BSON_APPEND_INT64(&topology, "counter", 0);
    bson_append_document_end(body, &topology);
    BSON_APPEND_INT32(body, "maxBsonObjectSize", WIRE_MAX_BSON_OBJECT_SIZE);
    BSON_APPEND_INT32(body, "maxMessageSizeBytes", WIRE_MAX_MESSAGE_SIZE);
    BSON_APPEND_INT32(body, "maxWriteBatchSize", WIRE_MAX_WRITE_BATCH_SIZE);
    BSON_APPEND_DATE_TIME(body, "localTime", proxy_wall_clock_ms());
    BSON_APPEND_INT32(body, "logicalSessionTimeoutMinutes", session_minutes);
    BSON_APPEND_INT64(body, "connectionId", (int64_t)request->connection_id);
    BSON_APPEND_INT32(body, "minWireVersion", 0);
    BSON_APPEND_INT32(body, "maxWireVersion", max_wire);
    BSON_APPEND_BOOL(body, "readOnly", false);

    wire_negotiate_compression(&request->command, body);
    if (extra != NULL) {
        bson_concat(body, extra);
    }
    BSON_APPEND_DOUBLE(body, "ok", 1.0);
}

/* An awaitable hello with our current topologyVersion waits maxAwaitTimeMS. */
static uint32_t awaitable_delay_ms(proxy_request_t *request)
{
    bson_iter_t iter, version;
    if (!bson_iter_init_find(&iter, &request->command, "topologyVersion") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return 0;
    }
    bson_iter_recurse(&iter, &version);
    if (!bson_iter_find(&version, "processId") || !BSON_ITER_HOLDS_OID(&version) ||
        !bson_oid_equal(bson_iter_oid(&version), &request->proxy->process_id)) {
        return 0;
    }
    if (!bson_iter_init_find(&iter, &request->command, "maxAwaitTimeMS") || !BSON_ITER_HOLDS_NUMBER(&iter)) {
        return 0;
    }
    int64_t wait = bson_iter_as_int64(&iter);
    return wait <= 0 ? 0 : (uint32_t)(wait > 600000 ? 600000 : wait);
}

static void answer_legacy_hello(proxy_request_t *request, const bson_t *extra)
{
    bson_t body = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    append_hello_fields(request, true, extra, &body);
    const bson_t *documents[] = {&body};
    bool built = wire_op_reply_build(0, request->client_request_id, 0, 0, 0, documents, 1, &encoded, &length, &error);
    bson_destroy(&body);
    if (!built) {
        server_reply_t close_reply = {.close_after = true};
        server_complete(request->pending, &close_reply);
        request_free(request);
        return;
    }
    finish_with_message(request, encoded, length);
}

static bool is_hello(const char *name)
{
    return strcmp(name, "hello") == 0 || strcmp(name, "isMaster") == 0 || strcmp(name, "ismaster") == 0;
}

static void answer_hello(proxy_request_t *request, const bson_t *extra)
{
    if (request->legacy_hello) {
        answer_legacy_hello(request, extra);
        return;
    }
    bson_t body = BSON_INITIALIZER;
    append_hello_fields(request, strcmp(request->command_name, "hello") != 0, extra, &body);
    finish_with_document(request, &body, awaitable_delay_ms(request));
    bson_destroy(&body);
}

/* hello's authentication fields are ready (access.c never fails a hello). */
static void on_hello_fields(void *context, const bson_t *fields, const bson_error_t *error)
{
    (void)error;
    answer_hello(context, fields);
}

static void answer_locally(proxy_request_t *request)
{
    const char *name = request->command_name;
    if (is_hello(name)) {
        if (access_hello_wanted(&request->command)) {
            access_hello(request->proxy, &request->client, &request->command, on_hello_fields, request);
            return;
        }
        answer_hello(request, NULL);
        return;
    }
    bson_t body = BSON_INITIALIZER;
    if (strcmp(name, "thermoclineStatus") == 0) {
        proxy_append_status(request->proxy, &body);
        BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    } else {
        BSON_APPEND_DOUBLE(&body, "ok", 1.0); /* ping */
    }
    finish_with_document(request, &body, 0);
    bson_destroy(&body);
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

static void note_transaction_commit(proxy_request_t *request, const bson_t *body);

/* A write acknowledged by the fast tier: reads of the namespace sent to the
 * archive from now on wait until the feeder has applied it. Also a failed
 * write's operationTime: an ordered insert may have written a part. Deletes are
 * also kept apart: they are all that a fault-in or the archive half of a point
 * read must wait for (see after_feeder_caught_up). */
static void note_fast_write(proxy_request_t *request, const bson_t *body)
{
    bson_iter_t iter;
    uint32_t seconds, increment;
    if (strcmp(request->command_name, "commitTransaction") == 0) {
        note_transaction_commit(request, body);
        return;
    }
    if (request->namespace_state == NULL || !request->has_decision || request->decision.kind != PLAN_KIND_WRITE ||
        request->decision.is_explain || !bson_iter_init_find(&iter, body, "operationTime") ||
        !BSON_ITER_HOLDS_TIMESTAMP(&iter)) {
        return;
    }
    bson_iter_timestamp(&iter, &seconds, &increment);
    uint64_t time = (uint64_t)seconds << 32 | increment;
    if (time > request->namespace_state->last_write_time) {
        request->namespace_state->last_write_time = time;
    }
    bson_iter_t remove;
    bool is_delete = strcmp(request->command_name, "delete") == 0 ||
                     ((strcmp(request->command_name, "findAndModify") == 0 ||
                       strcmp(request->command_name, "findandmodify") == 0) &&
                      bson_iter_init_find(&remove, &request->command, "remove") && bson_iter_as_bool(&remove));
    if (is_delete && time > request->namespace_state->last_delete_time) {
        request->namespace_state->last_delete_time = time;
    }
}

/* --- sending to a tier, once more after a retryable failure ---------------------- */

static void on_call_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error);

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
    cluster_time_prepare_request(request->proxy, call->tier, call->message, call->length, &request->command, &rebuilt,
                                 &rebuilt_length);
    if (rebuilt != NULL) {
        backend_pool_send(pool, rebuilt, rebuilt_length, on_call_reply, request);
        bson_free(rebuilt);
        return;
    }
    backend_pool_send(pool, call->message, call->length, on_call_reply, request);
}

/* Sends message to tier; done gets the reply. owned (NULL for the client's own
 * message) is kept until the request ends, for a retry. */
static void send_to_tier(proxy_request_t *request, proxy_tier_t tier, uint8_t *message, size_t length,
                         uint8_t *owned, backend_reply_fn done)
{
    tier_call_t *call = &request->call;
    bson_free(call->owned);
    bson_free(call->failed_reply);
    memset(call, 0, sizeof *call);
    call->tier = tier;
    call->message = message;
    call->length = length;
    call->owned = owned;
    call->done = done;
    request->tier = tier;
    send_call(request);
}

/* The primary is found again (recovered), or the wait ended: send once more, or
 * answer with the first attempt's failure. */
static void on_call_recovered(void *context, bool recovered)
{
    proxy_request_t *request = context;
    tier_call_t *call = &request->call;
    if (recovered) {
        send_call(request);
        return;
    }
    uint8_t *failed_reply = call->failed_reply;
    call->failed_reply = NULL;
    if (call->failed_on_network) {
        bson_error_t error = call->network_error;
        call->done(request, NULL, 0, &error);
    } else {
        call->done(request, failed_reply, call->failed_length, NULL);
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
    if (!member_route_choose_again(request->proxy, &request->command, call->tier, failed,
                                   error != NULL ? error->message : tc_error_code_name(code),
                                   &request->members[call->tier], &select_error)) {
        call->done(request, reply, length, error);
        return;
    }
    request->proxy->requests_retried++;
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "%s failed on a member of the %s tier (%s); sent again",
           request->command_name, proxy_tier_name(call->tier), error != NULL ? error->message : tc_error_code_name(code));
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
        bson_iter_t time;
        cluster_time_note(proxy, call->tier, &body);
        if (bson_iter_init_find(&time, &body, "operationTime") && BSON_ITER_HOLDS_TIMESTAMP(&time)) {
            uint32_t seconds, increment;
            bson_iter_timestamp(&time, &seconds, &increment);
            uint64_t value = (uint64_t)seconds << 32 | increment;
            request->operation_time = value > request->operation_time ? value : request->operation_time;
        }
    }
    bool retry = !call->retried && request->retry_kind != RETRY_NEVER && proxy->config->failover_wait_ms > 0;
    if (retry) {
        retry = error != NULL || (parsed && retry_reply_is_retryable(&body, request->retry_kind, &code));
    }
    if (!retry) {
        call->done(context, reply, length, error);
        return;
    }
    call->retried = true;
    if (request->members[call->tier] != 0) {
        retry_on_another_member(request, reply, length, error, code);
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
           proxy_tier_name(call->tier), error != NULL ? error->message : tc_error_code_name(code));
    recovery_wait(proxy, call->tier, proxy_now_ms() + proxy->config->failover_wait_ms, on_call_recovered, request);
}

static bool request_is_explain(const proxy_request_t *request);
static bool reply_is_ok(const bson_t *body);
static void finish_explain(proxy_request_t *request, const bson_t *body, const bson_t *archive_body);

static void on_tier_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    proxy_t *proxy = request->proxy;
    if (error != NULL) {
        proxy->requests_failed++;
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "%s failed on the %s tier: %s",
               request->command_name, proxy_tier_name(request->tier), error->message);
        finish_with_error(request, error);
        return;
    }
    access_note_reply(proxy, request->command_name, &request->command);
    bson_t body;
    bson_error_t parse_error;
    if (access_trims_reply(proxy, request->command_name) && wire_message_opcode(reply) == WIRE_OP_MSG &&
        wire_op_msg_peek_body(reply, length, &body, &parse_error)) {
        bson_t trimmed;
        bson_copy_to(&body, &trimmed);
        access_trim_reply(&request->client, &trimmed);
        finish_with_document(request, &trimmed, 0);
        bson_destroy(&trimmed);
        return;
    }
    uint8_t *copy = bson_malloc(length);
    memcpy(copy, reply, length);
    if (wire_message_opcode(copy) == WIRE_OP_MSG && wire_op_msg_peek_body(copy, length, &body, &parse_error)) {
        if (request->tier == PROXY_TIER_FAST) {
            note_fast_write(request, &body);
        }
        if (request_is_explain(request) && reply_is_ok(&body)) {
            finish_explain(request, &body, NULL);
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
                    cursor->last_used_ms = proxy_now_ms();
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
            write_int64(cursor_id, proxy_id);
        }
    }
    finish_with_message(request, copy, length);
}

static void forward(proxy_request_t *request, proxy_tier_t tier)
{
    send_to_tier(request, tier, request->message, request->length, NULL, on_tier_reply);
}

static void route_get_more(proxy_request_t *request)
{
    bson_error_t error;
    bson_t body;
    if (!wire_op_msg_peek_body(request->message, request->length, &body, &error)) {
        finish_with_error(request, &error);
        return;
    }
    uint8_t *id_bytes = find_int64_in_place(&body, "getMore", NULL);
    if (id_bytes == NULL) {
        bson_iter_t iter;
        bson_iter_init(&iter, &body);
        bson_iter_next(&iter);
        tc_error_set(&error, TC_ERR_TYPE_MISMATCH, "BSON field 'getMore.getMore' is the wrong type '%s', expected type 'long'",
                     value_type_name(bson_iter_type(&iter)));
        finish_with_error(request, &error);
        return;
    }
    int64_t proxy_id = read_int64(id_bytes);
    proxy_cursor_t *cursor = cursor_map_find(request->proxy->cursors, proxy_id);
    if (cursor == NULL) {
        tc_error_set(&error, TC_ERR_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)proxy_id);
        finish_with_error(request, &error);
        return;
    }
    request->getmore_proxy_id = proxy_id;
    request->members[cursor->tier] = cursor->member_id;
    write_int64(id_bytes, cursor->backend_id);
    forward(request, cursor->tier);
}

/* killCursors names proxy ids that may belong to both tiers and to several
 * members of each: answered here from the map, each server told of its own ids
 * (no reply awaited from them). */
static void on_kill_sent(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    (void)context, (void)reply, (void)length, (void)error;
}

/* The cursors of one server. */
typedef struct kill_group {
    proxy_tier_t tier;
    uint64_t member_id;
    bson_t *ids;
    uint32_t count;
} kill_group_t;

static void route_kill_cursors(proxy_request_t *request)
{
    bson_iter_t iter, ids;
    bson_t killed = BSON_INITIALIZER, missing = BSON_INITIALIZER;
    uint32_t killed_count = 0, missing_count = 0;
    kill_group_t *groups = NULL;
    size_t group_count = 0;
    bson_error_t error;
    const char *collection = "";
    bson_iter_init(&iter, &request->command);
    if (bson_iter_next(&iter) && BSON_ITER_HOLDS_UTF8(&iter)) {
        collection = bson_iter_utf8(&iter, NULL);
    }
    if (bson_iter_init_find(&iter, &request->command, "cursors") && BSON_ITER_HOLDS_ARRAY(&iter)) {
        bson_iter_recurse(&iter, &ids);
        while (bson_iter_next(&ids)) {
            char key[16];
            const char *key_string;
            int64_t proxy_id = BSON_ITER_HOLDS_INT64(&ids) ? bson_iter_int64(&ids) : 0;
            proxy_cursor_t *cursor = cursor_map_find(request->proxy->cursors, proxy_id);
            if (cursor != NULL && strcmp(cursor->ns, request->ns) == 0) {
                size_t group = 0;
                while (group < group_count &&
                       (groups[group].tier != cursor->tier || groups[group].member_id != cursor->member_id)) {
                    group++;
                }
                if (group == group_count) {
                    groups = bson_realloc(groups, (group_count + 1) * sizeof *groups);
                    groups[group] =
                        (kill_group_t){.tier = cursor->tier, .member_id = cursor->member_id, .ids = bson_new()};
                    group_count++;
                }
                bson_uint32_to_string(groups[group].count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(groups[group].ids, key_string, cursor->backend_id);
                cursor_map_remove(request->proxy->cursors, proxy_id);
                bson_uint32_to_string(killed_count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&killed, key_string, proxy_id);
            } else {
                bson_uint32_to_string(missing_count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&missing, key_string, proxy_id);
            }
        }
    }
    for (size_t group = 0; group < group_count; group++) {
        bson_iter_t database;
        bson_t kill = BSON_INITIALIZER;
        uint8_t *encoded;
        size_t length;
        backend_pool_t *pool = backend_pool_member(request->proxy->tiers[groups[group].tier], groups[group].member_id);
        BSON_APPEND_UTF8(&kill, "killCursors", collection);
        BSON_APPEND_ARRAY(&kill, "cursors", groups[group].ids);
        if (bson_iter_init_find(&database, &request->command, "$db")) {
            bson_append_iter(&kill, "$db", 3, &database);
        }
        if (pool != NULL && wire_op_msg_build(0, 0, 0, &kill, NULL, 0, &encoded, &length, &error)) {
            backend_pool_send(pool, encoded, length, on_kill_sent, NULL);
            bson_free(encoded);
        }
        bson_destroy(&kill);
        bson_destroy(groups[group].ids);
    }
    bson_free(groups);
    bson_t body = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    BSON_APPEND_ARRAY(&body, "cursorsKilled", &killed);
    BSON_APPEND_ARRAY(&body, "cursorsNotFound", &missing);
    BSON_APPEND_ARRAY(&body, "cursorsAlive", &empty);
    BSON_APPEND_ARRAY(&body, "cursorsUnknown", &empty);
    BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    finish_with_document(request, &body, 0);
    bson_destroy(&body);
    bson_destroy(&empty);
    bson_destroy(&killed);
    bson_destroy(&missing);
}

/* --- fault-in: archive documents a write may touch are copied to the fast tier first */

typedef struct fault_in {
    proxy_request_t *request;
} fault_in_t;

static void on_fault_in_inserted(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    (void)reply, (void)length;
    if (error != NULL) {
        finish_with_error(request, error);
        return;
    }
    /* Duplicate keys are expected: the fast tier already had a newer version. */
    forward(request, PROXY_TIER_FAST);
}

static void on_fault_in_found(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    bson_t body;
    bson_iter_t iter, cursor, batch;
    bson_error_t parse_error;
    if (error != NULL) {
        finish_with_error(request, error);
        return;
    }
    if (!wire_op_msg_peek_body(reply, length, &body, &parse_error) || !bson_iter_init_find(&iter, &body, "cursor") ||
        !bson_iter_recurse(&iter, &cursor) || !bson_iter_find(&cursor, "firstBatch") ||
        !bson_iter_recurse(&cursor, &batch)) {
        tc_error_set(&parse_error, TC_ERR_OPERATION_FAILED,
                     "cannot copy the documents this write touches from the archive: unexpected reply");
        finish_with_error(request, &parse_error);
        return;
    }
    bson_t documents = BSON_INITIALIZER;
    uint32_t count = 0;
    while (bson_iter_next(&batch)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        bson_append_iter(&documents, key_string, -1, &batch);
    }
    if ((int64_t)count > request->proxy->config->fault_in_limit) {
        bson_destroy(&documents);
        tc_error_set(&parse_error, TC_ERR_OPERATION_FAILED,
                     "this write may touch more than %lld documents held only by the archive (faultInLimit): "
                     "narrow it, or raise faultInLimit in the proxy's config",
                     (long long)request->proxy->config->fault_in_limit);
        finish_with_error(request, &parse_error);
        return;
    }
    if (count == 0) {
        bson_destroy(&documents);
        forward(request, PROXY_TIER_FAST);
        return;
    }
    if (request->namespace_state != NULL) {
        request->namespace_state->fault_ins += count;
    }
    const char *dot = strchr(request->ns, '.');
    bson_t insert = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t encoded_length;
    BSON_APPEND_UTF8(&insert, "insert", dot + 1);
    BSON_APPEND_ARRAY(&insert, "documents", &documents);
    BSON_APPEND_BOOL(&insert, "ordered", false);
    bson_append_utf8(&insert, "$db", 3, request->ns, (int)(dot - request->ns));
    bool built = wire_op_msg_build(0, 0, 0, &insert, NULL, 0, &encoded, &encoded_length, &parse_error);
    bson_destroy(&insert);
    bson_destroy(&documents);
    if (!built) {
        finish_with_error(request, &parse_error);
        return;
    }
    send_to_tier(request, PROXY_TIER_FAST, encoded, encoded_length, encoded, on_fault_in_inserted);
}

/* Asks the archive for every document the write may touch: the ids named, and
 * the documents the filters match, at most faultInLimit of them. */
static void start_fault_in(proxy_request_t *request)
{
    plan_decision_t *decision = &request->decision;
    const char *dot = strchr(request->ns, '.');
    bson_t find = BSON_INITIALIZER, filter, clauses;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    uint32_t clause = 0;
    char key[16];
    const char *key_string;

    /* The clauses: {_id: {$in: ids}} and each filter. One clause is sent alone:
     * {$or: [...]} of one would cost the archive a collection scan where the
     * clause alone uses an index. */
    bson_init(&clauses);
    if (decision->fault_in_id_count + decision->unique_id_check_count > 0) {
        bson_t id_clause, id_condition, ids;
        bson_uint32_to_string(clause++, &key_string, key, sizeof key);
        bson_append_document_begin(&clauses, key_string, -1, &id_clause);
        BSON_APPEND_DOCUMENT_BEGIN(&id_clause, "_id", &id_condition);
        BSON_APPEND_ARRAY_BEGIN(&id_condition, "$in", &ids);
        bson_iter_t iter;
        uint32_t index = 0;
        const bson_t *lists[] = {&decision->fault_in_ids, &decision->unique_id_checks};
        for (size_t list = 0; list < 2; list++) {
            bson_iter_init(&iter, lists[list]);
            while (bson_iter_next(&iter)) {
                bson_uint32_to_string(index++, &key_string, key, sizeof key);
                bson_append_iter(&ids, key_string, -1, &iter);
            }
        }
        bson_append_array_end(&id_condition, &ids);
        bson_append_document_end(&id_clause, &id_condition);
        bson_append_document_end(&clauses, &id_clause);
    }
    bson_iter_t filters;
    bson_iter_init(&filters, &decision->fault_in_filters);
    while (bson_iter_next(&filters)) {
        bson_iter_t item;
        if (BSON_ITER_HOLDS_DOCUMENT(&filters) && bson_iter_recurse(&filters, &item) && bson_iter_find(&item, "filter") &&
            BSON_ITER_HOLDS_DOCUMENT(&item)) {
            bson_uint32_to_string(clause++, &key_string, key, sizeof key);
            bson_append_iter(&clauses, key_string, -1, &item);
        }
    }
    BSON_APPEND_UTF8(&find, "find", dot + 1);
    bson_iter_t only;
    if (clause == 1 && bson_iter_init(&only, &clauses) && bson_iter_next(&only)) {
        bson_append_iter(&find, "filter", 6, &only);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
        BSON_APPEND_ARRAY(&filter, "$or", &clauses);
        bson_append_document_end(&find, &filter);
    }
    bson_destroy(&clauses);
    /* One more than the limit: a cursor left open means the write touches too many. */
    BSON_APPEND_INT64(&find, "batchSize", request->proxy->config->fault_in_limit + 1);
    bson_append_utf8(&find, "$db", 3, request->ns, (int)(dot - request->ns));
    bool built = wire_op_msg_build(0, 0, 0, &find, NULL, 0, &encoded, &length, &error);
    bson_destroy(&find);
    if (!built) {
        finish_with_error(request, &error);
        return;
    }
    send_to_tier(request, PROXY_TIER_ARCHIVE, encoded, length, encoded, on_fault_in_found);
}

/* --- read-your-writes across tiers ----------------------------------------------------
 * A read the archive answers waits here until the feeder has applied every write to
 * its namespace that the fast tier acknowledged before the read arrived (the
 * operationTime of those replies, note_fast_write), bounded by readYourWritesWait.
 * The feeder's progress arrives on the loop through proxy_refresh_progress. */

typedef void (*wait_resume_fn)(proxy_request_t *request);

typedef struct read_wait {
    struct read_wait *next;
    proxy_request_t *request;
    bool for_pin; /* waits for an eviction to end, not for the feeder */
    bool deletes_only;
    namespace_state_t *blocking; /* the namespace the feeder is behind on */
    int64_t deadline_ms;
    int64_t started_ms;
    wait_resume_fn resume;
} read_wait_t;

typedef enum feed_state {
    FEED_CAUGHT_UP,
    FEED_BEHIND,
    FEED_STOPPED, /* the namespace's feed stopped with writes not in the archive */
} feed_state_t;

static feed_state_t namespace_feed_state(const namespace_state_t *state, bool deletes_only)
{
    uint64_t required = deletes_only ? state->last_delete_time : state->last_write_time;
    if (required == 0 || state->progress.applied_time >= required) {
        return FEED_CAUGHT_UP;
    }
    return state->progress.feed_stopped ? FEED_STOPPED : FEED_BEHIND;
}

/* The request's namespace, or every namespace for a pipeline that reads others. */
static feed_state_t request_feed_state(proxy_request_t *request, bool deletes_only, namespace_state_t **out_blocking)
{
    proxy_t *proxy = request->proxy;
    feed_state_t worst = FEED_CAUGHT_UP;
    *out_blocking = NULL;
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_state_t *state = &proxy->namespaces[i];
        if (state != request->namespace_state && !(request->has_decision && request->decision.reads_other_namespaces)) {
            continue;
        }
        feed_state_t feed = namespace_feed_state(state, deletes_only);
        if (feed > worst) {
            worst = feed;
            *out_blocking = state;
        }
    }
    return worst;
}

static void fail_stopped_feed(proxy_request_t *request, const namespace_state_t *blocking)
{
    bson_error_t error;
    tc_error_set(&error, TC_ERR_OPERATION_FAILED,
                 "cannot read %s from the archive: writes acknowledged before this read are not in the archive, "
                 "because the feeder stopped: %s",
                 blocking->config->ns, blocking->progress.feed_error);
    finish_with_error(request, &error);
}

static void fail_wait_expired(proxy_request_t *request, const namespace_state_t *blocking, int64_t waited_ms)
{
    bson_error_t error;
    tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                 "read-your-writes: the feeder has not yet applied to the archive the writes to %s acknowledged "
                 "before this read (waited %lld ms, readYourWritesWait); retry the read",
                 blocking->config->ns, (long long)waited_ms);
    finish_with_error(request, &error);
}

static void on_wait_deadline(uv_timer_t *timer)
{
    router_expire_waits(timer->data);
}

static void arm_wait_timer(proxy_t *proxy)
{
    int64_t earliest = INT64_MAX;
    for (read_wait_t *wait = proxy->waits_head; wait != NULL; wait = wait->next) {
        earliest = wait->deadline_ms < earliest ? wait->deadline_ms : earliest;
    }
    if (earliest == INT64_MAX) {
        uv_timer_stop(&proxy->wait_timer);
        return;
    }
    int64_t delay = earliest - proxy_now_ms();
    uv_timer_start(&proxy->wait_timer, on_wait_deadline, delay < 0 ? 0 : (uint64_t)delay, 0);
}

/* --- pins: the documents a write faults in stay until it has run ---------------------- */

static void pin_list(proxy_request_t *request, const bson_t *ids, bool pin, bool *out_failed, uint32_t *out_done,
                     uint32_t limit)
{
    bson_iter_t iter;
    bson_iter_init(&iter, ids);
    while (bson_iter_next(&iter) && *out_done < limit) {
        size_t index = request->namespace_state->index;
        if (!pin) {
            tier_progress_unpin(request->proxy->progress, index, bson_iter_value(&iter));
        } else if (!tier_progress_pin(request->proxy->progress, index, bson_iter_value(&iter))) {
            *out_failed = true;
            return;
        }
        (*out_done)++;
    }
}

/* Pins (pin) or unpins the first limit ids the write faults in, then its namespace
 * when it faults in by filter; *out_done counts what was done. */
static bool change_pins(proxy_request_t *request, bool pin, uint32_t limit, uint32_t *out_done)
{
    plan_decision_t *decision = &request->decision;
    bool failed = false;
    *out_done = 0;
    pin_list(request, &decision->fault_in_ids, pin, &failed, out_done, limit);
    if (!failed) {
        pin_list(request, &decision->unique_id_checks, pin, &failed, out_done, limit);
    }
    if (!failed && decision->fault_in_filter_count > 0 && *out_done < limit) {
        if (!pin) {
            tier_progress_unpin(request->proxy->progress, request->namespace_state->index, NULL);
        } else if (!tier_progress_pin(request->proxy->progress, request->namespace_state->index, NULL)) {
            failed = true;
        }
        *out_done += failed ? 0 : 1;
    }
    return !failed;
}

static bool pin_fault_in(proxy_request_t *request)
{
    uint32_t done, undone;
    if (request->namespace_state == NULL) {
        return true;
    }
    if (!change_pins(request, true, UINT32_MAX, &done)) {
        change_pins(request, false, done, &undone);
        return false;
    }
    request->pinned = true;
    return true;
}

static void unpin_fault_in(proxy_request_t *request)
{
    uint32_t done;
    change_pins(request, false, UINT32_MAX, &done);
    request->pinned = false;
}

static void queue_wait(proxy_request_t *request, bool for_pin, bool deletes_only, namespace_state_t *blocking,
                       wait_resume_fn resume);

/* Runs resume once the feeder has applied the writes to the request's namespace
 * acknowledged so far: all of them for a read the archive answers; only the
 * deletes (deletes_only) before copying archive documents into the fast tier (a
 * fault-in) or reading the ids the fast tier lacks (a point read). Those need no
 * more: a document the fast tier lacks was never written there since the archive
 * got it, or was evicted once the archive held its last version, or was deleted. */
static void after_feeder_caught_up(proxy_request_t *request, bool deletes_only, wait_resume_fn resume)
{
    proxy_t *proxy = request->proxy;
    namespace_state_t *blocking;
    feed_state_t feed = request_feed_state(request, deletes_only, &blocking);
    if (feed == FEED_CAUGHT_UP) {
        resume(request);
        return;
    }
    if (feed == FEED_STOPPED) {
        fail_stopped_feed(request, blocking);
        return;
    }
    if (proxy->config->read_your_writes_wait_ms <= 0) {
        blocking->reads_wait_failed++;
        fail_wait_expired(request, blocking, 0);
        return;
    }
    queue_wait(request, false, deletes_only, blocking, resume);
}

static void queue_wait(proxy_request_t *request, bool for_pin, bool deletes_only, namespace_state_t *blocking,
                       wait_resume_fn resume)
{
    proxy_t *proxy = request->proxy;
    read_wait_t *wait = bson_malloc0(sizeof *wait);
    wait->request = request;
    wait->for_pin = for_pin;
    wait->deletes_only = deletes_only;
    wait->blocking = blocking;
    wait->resume = resume;
    wait->started_ms = proxy_now_ms();
    wait->deadline_ms = wait->started_ms + proxy->config->read_your_writes_wait_ms;
    if (proxy->waits_tail != NULL) {
        proxy->waits_tail->next = wait;
    } else {
        proxy->waits_head = wait;
    }
    proxy->waits_tail = wait;
    proxy->wait_count++;
    if (!for_pin) {
        blocking->reads_waited++;
    }
    arm_wait_timer(proxy);
}

/* Takes the waits for which keep() is false out of the queue, in order, and hands
 * each to done(). done may queue new waits: they are not visited this time. */
static void sweep_waits(proxy_t *proxy, bool (*keep)(read_wait_t *wait, int64_t now),
                        void (*done)(read_wait_t *wait, int64_t now))
{
    int64_t now = proxy_now_ms();
    read_wait_t *list = proxy->waits_head;
    read_wait_t *kept_head = NULL, *kept_tail = NULL, *leaving_head = NULL, *leaving_tail = NULL;
    proxy->waits_head = proxy->waits_tail = NULL;
    while (list != NULL) {
        read_wait_t *wait = list;
        list = list->next;
        wait->next = NULL;
        read_wait_t **head = keep(wait, now) ? &kept_head : &leaving_head;
        read_wait_t **tail = head == &kept_head ? &kept_tail : &leaving_tail;
        if (*tail != NULL) {
            (*tail)->next = wait;
        } else {
            *head = wait;
        }
        *tail = wait;
    }
    proxy->waits_head = kept_head;
    proxy->waits_tail = kept_tail;
    while (leaving_head != NULL) {
        read_wait_t *wait = leaving_head;
        leaving_head = wait->next;
        proxy->wait_count--;
        done(wait, now);
        bson_free(wait);
    }
    if (proxy->wait_timer_started) {
        arm_wait_timer(proxy);
    }
}

static bool keep_while_behind(read_wait_t *wait, int64_t now)
{
    namespace_state_t *blocking;
    (void)now;
    if (wait->for_pin) {
        return !pin_fault_in(wait->request); /* pins as it succeeds */
    }
    return request_feed_state(wait->request, wait->deletes_only, &blocking) == FEED_BEHIND;
}

static void resume_or_fail(read_wait_t *wait, int64_t now)
{
    namespace_state_t *blocking;
    (void)now;
    if (!wait->for_pin && request_feed_state(wait->request, wait->deletes_only, &blocking) == FEED_STOPPED) {
        fail_stopped_feed(wait->request, blocking);
    } else {
        wait->resume(wait->request);
    }
}

static bool keep_until_deadline(read_wait_t *wait, int64_t now)
{
    return now < wait->deadline_ms;
}

static void expire(read_wait_t *wait, int64_t now)
{
    if (wait->for_pin) {
        bson_error_t error;
        tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                     "a document this write needs was being evicted from the fast tier for over %lld ms; retry the "
                     "write",
                     (long long)(now - wait->started_ms));
        finish_with_error(wait->request, &error);
        return;
    }
    wait->blocking->reads_wait_failed++;
    fail_wait_expired(wait->request, wait->blocking, now - wait->started_ms);
}

static bool keep_none(read_wait_t *wait, int64_t now)
{
    (void)wait, (void)now;
    return false;
}

static void cancel(read_wait_t *wait, int64_t now)
{
    bson_error_t error;
    (void)now;
    tc_error_set(&error, TC_ERR_INTERRUPTED, "the proxy is shutting down");
    finish_with_error(wait->request, &error);
}

void router_resume_waits(proxy_t *proxy)
{
    sweep_waits(proxy, keep_while_behind, resume_or_fail);
}

void router_expire_waits(proxy_t *proxy)
{
    sweep_waits(proxy, keep_until_deadline, expire);
}

void router_cancel_waits(proxy_t *proxy)
{
    sweep_waits(proxy, keep_none, cancel);
}

static void forward_to_archive(proxy_request_t *request)
{
    forward(request, PROXY_TIER_ARCHIVE);
}

/* --- point reads: the fast tier first, the archive for the ids it lacks ------------------
 * The fast tier holds the newest version of every document it holds (every write
 * lands there), so its answer stands for the ids it returns; the archive answers for
 * the others once the feeder has caught up. The two answers merge in _id order. */

static bool projection_hides_id(const bson_t *command)
{
    bson_iter_t iter, field;
    return bson_iter_init_find(&iter, command, "projection") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
           bson_iter_recurse(&iter, &field) && bson_iter_find(&field, "_id") &&
           (BSON_ITER_HOLDS_BOOL(&field) || BSON_ITER_HOLDS_NUMBER(&field)) && !bson_iter_as_bool(&field);
}

/* A find for ids (a BSON array) with the client's projection, sort and read concern,
 * answered in one batch. */
static bool build_point_find(proxy_request_t *request, const bson_t *filter, uint32_t id_count, uint8_t **out_message,
                             size_t *out_length, bson_error_t *error)
{
    static const char *const copied[] = {"projection", "sort", "readConcern", "maxTimeMS", "comment", "$db"};
    bson_t find = BSON_INITIALIZER;
    bson_iter_t iter;
    const char *dot = strchr(request->ns, '.');
    BSON_APPEND_UTF8(&find, "find", dot != NULL ? dot + 1 : request->ns);
    BSON_APPEND_DOCUMENT(&find, "filter", filter);
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
        if (bson_iter_init_find(&iter, &request->command, copied[i])) {
            bson_append_iter(&find, copied[i], -1, &iter);
        }
    }
    BSON_APPEND_INT64(&find, "batchSize", (int64_t)id_count + 1);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    bool ok = wire_op_msg_build(0, 0, 0, &find, NULL, 0, out_message, out_length, error);
    bson_destroy(&find);
    return ok;
}

/* The reply's firstBatch (a view), or false for a reply that is not ok: 1. */
static bool point_reply_batch(const uint8_t *reply, size_t length, bson_t *out_body, bson_t *out_batch)
{
    bson_iter_t iter, batch;
    bson_error_t error;
    uint32_t batch_length;
    const uint8_t *data;
    if (!wire_op_msg_peek_body(reply, length, out_body, &error) || !bson_iter_init_find(&iter, out_body, "ok") ||
        bson_iter_as_double(&iter) != 1.0 || !bson_iter_init(&iter, out_body) ||
        !bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) || !BSON_ITER_HOLDS_ARRAY(&batch)) {
        return false;
    }
    bson_iter_array(&batch, &batch_length, &data);
    return bson_init_static(out_batch, data, batch_length);
}

/* Relays a tier's reply (an error) as it is. */
static void relay_reply(proxy_request_t *request, const uint8_t *reply, size_t length)
{
    uint8_t *copy = bson_malloc(length);
    memcpy(copy, reply, length);
    finish_with_message(request, copy, length);
}

/* Raw bytes, not a bson_t: qsort moves these, and a static bson_t points into itself. */
typedef struct point_document {
    const uint8_t *data;
    uint32_t length;
    bson_value_t id;
} point_document_t;

static int compare_point_ascending(const void *left, const void *right)
{
    return order_compare_values(&((const point_document_t *)left)->id, &((const point_document_t *)right)->id);
}

static int compare_point_descending(const void *left, const void *right)
{
    return -compare_point_ascending(left, right);
}

static size_t collect_points(const bson_t *array, point_document_t *out, size_t count)
{
    bson_iter_t iter, id;
    bson_iter_init(&iter, array);
    while (bson_iter_next(&iter)) {
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_t document;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        out[count].data = data;
        out[count].length = length;
        out[count].id.value_type = BSON_TYPE_NULL;
        if (bson_iter_init_find(&id, &document, "_id")) {
            out[count].id = *bson_iter_value(&id);
        }
        count++;
    }
    return count;
}

/* Answers with the fast tier's documents and the archive's (NULL: none), in _id
 * order (descending for sort {_id: -1}), cut to the limit, in one batch. */
static void finish_point_read(proxy_request_t *request, const bson_t *archive_documents)
{
    size_t capacity = bson_count_keys(&request->point_fast_documents) +
                      (archive_documents != NULL ? bson_count_keys(archive_documents) : 0);
    point_document_t *points = bson_malloc0((capacity + 1) * sizeof *points);
    size_t count = collect_points(&request->point_fast_documents, points, 0);
    if (archive_documents != NULL) {
        count = collect_points(archive_documents, points, count);
    }
    bool descending = false;
    int64_t limit = 0;
    bson_iter_t iter, field;
    if (bson_iter_init_find(&iter, &request->command, "sort") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, &field) && bson_iter_next(&field)) {
        descending = bson_iter_as_double(&field) < 0;
    }
    if (bson_iter_init_find(&iter, &request->command, "limit") &&
        (BSON_ITER_HOLDS_NUMBER(&iter) || BSON_ITER_HOLDS_DECIMAL128(&iter))) {
        limit = (int64_t)bson_iter_as_double(&iter);
    }
    qsort(points, count, sizeof *points, descending ? compare_point_descending : compare_point_ascending);
    if (limit > 0 && (size_t)limit < count) {
        count = (size_t)limit;
    }
    bson_t body = BSON_INITIALIZER, cursor, batch;
    BSON_APPEND_DOCUMENT_BEGIN(&body, "cursor", &cursor);
    BSON_APPEND_ARRAY_BEGIN(&cursor, "firstBatch", &batch);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_t document;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_init_static(&document, points[i].data, points[i].length);
        bson_append_document(&batch, key_string, -1, &document);
    }
    bson_append_array_end(&cursor, &batch);
    BSON_APPEND_INT64(&cursor, "id", 0);
    BSON_APPEND_UTF8(&cursor, "ns", request->ns);
    bson_append_document_end(&body, &cursor);
    BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    bson_free(points);
    finish_with_document(request, &body, 0);
    bson_destroy(&body);
}

static void on_point_archive_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    bson_t body, batch;
    if (error != NULL) {
        request->proxy->requests_failed++;
        finish_with_error(request, error);
        return;
    }
    if (!point_reply_batch(reply, length, &body, &batch)) {
        relay_reply(request, reply, length);
        return;
    }
    finish_point_read(request, &batch);
}

static void send_point_archive(proxy_request_t *request)
{
    bson_t filter = BSON_INITIALIZER, condition;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &condition);
    BSON_APPEND_ARRAY(&condition, "$in", &request->point_missing_ids);
    bson_append_document_end(&filter, &condition);
    bool built = build_point_find(request, &filter, bson_count_keys(&request->point_missing_ids), &message, &length,
                                  &error);
    bson_destroy(&filter);
    if (!built) {
        finish_with_error(request, &error);
        return;
    }
    send_to_tier(request, PROXY_TIER_ARCHIVE, message, length, message, on_point_archive_reply);
}

/* The distinct values of a BSON array of ids (5, 5.0 and 5L are one). */
static uint32_t distinct_ids(const bson_t *ids)
{
    bson_iter_t iter, earlier;
    uint32_t count = 0, position = 0;
    bson_iter_init(&iter, ids);
    while (bson_iter_next(&iter)) {
        bool seen = false;
        uint32_t index = 0;
        bson_iter_init(&earlier, ids);
        while (index++ < position && bson_iter_next(&earlier) && !seen) {
            seen = order_compare_values(bson_iter_value(&earlier), bson_iter_value(&iter)) == 0;
        }
        count += !seen;
        position++;
    }
    return count;
}

static void route_point_read_rebuilt(proxy_request_t *request);

static void on_point_fast_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    bson_t body, batch;
    if (error != NULL) {
        request->proxy->requests_failed++;
        finish_with_error(request, error);
        return;
    }
    if (!point_reply_batch(reply, length, &body, &batch)) {
        relay_reply(request, reply, length);
        return;
    }
    /* The client's own find came back with every id: its reply goes back as it is. */
    if (!request->point_rebuilt && bson_count_keys(&batch) >= distinct_ids(&request->decision.point_ids)) {
        on_tier_reply(context, reply, length, NULL);
        return;
    }
    bson_iter_t cursor_id;
    if (!request->point_rebuilt && bson_iter_init(&cursor_id, &body) &&
        bson_iter_find_descendant(&cursor_id, "cursor.id", &cursor_id) && bson_iter_as_int64(&cursor_id) != 0) {
        /* Not all in one batch after all (a 16 MB reply): ask again in one batch. */
        route_point_read_rebuilt(request);
        return;
    }
    bson_concat(&request->point_fast_documents, &batch);
    size_t found_count = bson_count_keys(&batch);
    point_document_t *found = bson_malloc0((found_count + 1) * sizeof *found);
    found_count = collect_points(&batch, found, 0);
    uint32_t missing = 0;
    bson_iter_t ids, earlier;
    bson_iter_init(&ids, &request->decision.point_ids);
    while (bson_iter_next(&ids)) {
        const bson_value_t *id = bson_iter_value(&ids);
        bool present = false;
        for (size_t i = 0; i < found_count && !present; i++) {
            present = order_compare_values(&found[i].id, id) == 0;
        }
        bson_iter_init(&earlier, &request->point_missing_ids);
        while (!present && bson_iter_next(&earlier)) {
            present = order_compare_values(bson_iter_value(&earlier), id) == 0;
        }
        if (!present) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(missing++, &key_string, key, sizeof key);
            BSON_APPEND_VALUE(&request->point_missing_ids, key_string, id);
        }
    }
    bson_free(found);
    if (missing == 0) {
        finish_point_read(request, NULL);
        return;
    }
    after_feeder_caught_up(request, true, send_point_archive);
}

/* Whether the client's find, sent as it is, returns every id the fast tier holds
 * in its first batch: no limit below the number of ids, and a batch that holds
 * them all (mongod's first batch is 101 documents unless batchSize says). */
static bool point_read_passes_through(proxy_request_t *request)
{
    uint32_t ids = distinct_ids(&request->decision.point_ids);
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, &request->command, "limit") && BSON_ITER_HOLDS_NUMBER(&iter) &&
        bson_iter_as_int64(&iter) > 0 && bson_iter_as_int64(&iter) < ids) {
        return false;
    }
    int64_t batch_size = 101;
    if (bson_iter_init_find(&iter, &request->command, "batchSize") && BSON_ITER_HOLDS_NUMBER(&iter)) {
        batch_size = bson_iter_as_int64(&iter);
    }
    return batch_size >= ids;
}

static void route_explain_both(proxy_request_t *request);

static void route_point_read(proxy_request_t *request)
{
    if (request->decision.is_explain) {
        route_explain_both(request);
        return;
    }
    if (projection_hides_id(&request->command)) {
        after_feeder_caught_up(request, false, forward_to_archive);
        return;
    }
    request->has_point_state = true;
    bson_init(&request->point_fast_documents);
    bson_init(&request->point_missing_ids);
    if (point_read_passes_through(request)) {
        /* The common case costs no more than a read sent to the fast tier. */
        send_to_tier(request, PROXY_TIER_FAST, request->message, request->length, NULL, on_point_fast_reply);
        return;
    }
    route_point_read_rebuilt(request);
}

/* The fast tier's half as our own find: every id, one batch, no limit. */
static void route_point_read_rebuilt(proxy_request_t *request)
{
    bson_iter_t iter, filter_iter;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    request->point_rebuilt = true;
    bson_t filter;
    uint32_t filter_length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, &request->command, "filter") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        after_feeder_caught_up(request, false, forward_to_archive);
        return;
    }
    filter_iter = iter;
    bson_iter_document(&filter_iter, &filter_length, &data);
    bson_init_static(&filter, data, filter_length);
    if (!build_point_find(request, &filter, request->decision.point_id_count, &message, &length, &error)) {
        finish_with_error(request, &error);
        return;
    }
    send_to_tier(request, PROXY_TIER_FAST, message, length, message, on_point_fast_reply);
}

/* --- explain: the tier's own explain, and which tier the planner chose and why ---------
 * The reply is the tier's explain with one more field before ok:
 *   thermocline: {tier: "fast" | "archive" | "both", reason: <the planner's text>,
 *                 reasonName: <plan_reason_name>, archive: <the archive's explain>}
 * "both" is a point read: the fast tier first, then the archive for the ids the fast
 * tier lacks; its top level is the fast tier's explain, `archive` the archive's (as it
 * would run the same query). An error reply passes unchanged, as mongod gave it. */

static bool request_is_explain(const proxy_request_t *request)
{
    return request->has_decision && (request->decision.is_explain || strcmp(request->command_name, "explain") == 0);
}

static bool reply_is_ok(const bson_t *body)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, body, "ok") && bson_iter_as_double(&iter) == 1.0;
}

/* The fields of a tier's explain, without what belongs to the reply rather than the
 * explain (ok, and the replica set's times). */
static void append_explain_fields(bson_t *out, const bson_t *body)
{
    bson_iter_t iter;
    bson_iter_init(&iter, body);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "ok") != 0 && strcmp(key, "$clusterTime") != 0 && strcmp(key, "operationTime") != 0) {
            bson_append_iter(out, key, -1, &iter);
        }
    }
}

static void append_thermocline_explain(proxy_request_t *request, const bson_t *archive_body, bson_t *out)
{
    const plan_decision_t *decision = &request->decision;
    const char *tier = decision->route == PLAN_ROUTE_FAST_THEN_ARCHIVE ? "both" : proxy_tier_name(request->tier);
    bson_t thermocline;
    BSON_APPEND_DOCUMENT_BEGIN(out, "thermocline", &thermocline);
    BSON_APPEND_UTF8(&thermocline, "tier", tier);
    BSON_APPEND_UTF8(&thermocline, "reason", decision->reason_text);
    BSON_APPEND_UTF8(&thermocline, "reasonName", plan_reason_name(decision->reason));
    if (archive_body != NULL) {
        bson_t archive;
        BSON_APPEND_DOCUMENT_BEGIN(&thermocline, "archive", &archive);
        append_explain_fields(&archive, archive_body);
        bson_append_document_end(&thermocline, &archive);
    }
    bson_append_document_end(out, &thermocline);
}

/* Answers with body (a tier's ok explain) and the thermocline field before its ok. */
static void finish_explain(proxy_request_t *request, const bson_t *body, const bson_t *archive_body)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t iter;
    bool added = false;
    bson_iter_init(&iter, body);
    while (bson_iter_next(&iter)) {
        if (!added && strcmp(bson_iter_key(&iter), "ok") == 0) {
            append_thermocline_explain(request, archive_body, &reply);
            added = true;
        }
        bson_append_iter(&reply, bson_iter_key(&iter), -1, &iter);
    }
    if (!added) {
        append_thermocline_explain(request, archive_body, &reply);
    }
    finish_with_document(request, &reply, 0);
    bson_destroy(&reply);
}

static void on_explain_archive_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    bson_t body;
    bson_error_t parse_error;
    if (error != NULL) {
        request->proxy->requests_failed++;
        finish_with_error(request, error);
        return;
    }
    if (!wire_op_msg_peek_body(reply, length, &body, &parse_error) || !reply_is_ok(&body)) {
        relay_reply(request, reply, length);
        return;
    }
    finish_explain(request, request->explain_fast_body, &body);
}

static void send_explain_archive(proxy_request_t *request)
{
    send_to_tier(request, PROXY_TIER_ARCHIVE, request->message, request->length, NULL, on_explain_archive_reply);
}

static void on_explain_fast_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_request_t *request = context;
    bson_t body;
    bson_error_t parse_error;
    if (error != NULL) {
        request->proxy->requests_failed++;
        finish_with_error(request, error);
        return;
    }
    if (!wire_op_msg_peek_body(reply, length, &body, &parse_error) || !reply_is_ok(&body)) {
        relay_reply(request, reply, length);
        return;
    }
    request->explain_fast_body = bson_copy(&body);
    after_feeder_caught_up(request, true, send_explain_archive);
}

/* A point read's explain: the client's explain on both tiers, the fast tier first. */
static void route_explain_both(proxy_request_t *request)
{
    send_to_tier(request, PROXY_TIER_FAST, request->message, request->length, NULL, on_explain_fast_reply);
}

static void fault_in_after_deletes(proxy_request_t *request)
{
    after_feeder_caught_up(request, true, start_fault_in);
}

/* --- transactions ------------------------------------------------------------------
 * A multi-document transaction runs on the fast tier, and only while each of its
 * commands is one the fast tier answers completely there: a read the planner
 * proves inside the horizon, a write with nothing to fault in (or, in the
 * command that starts the transaction, whose fault-in is done before its snapshot
 * is taken), on a tiered namespace. The first command that is not gets
 * OperationNotSupportedInTransaction naming its namespace, without
 * TransientTransactionError (retrying cannot help), once the fast tier has
 * aborted the transaction. commitTransaction and abortTransaction go to the fast
 * tier, which holds every transaction. */

/* Whether the transaction may run this command; if not, why (in reason). */
static bool transaction_may_run(const proxy_request_t *request, char *reason, size_t reason_size)
{
    const plan_decision_t *decision = &request->decision;
    if (decision->kind == PLAN_KIND_TRANSACTION || decision->route == PLAN_ROUTE_CURSOR_OWNER) {
        return true;
    }
    if (request->namespace_state == NULL) {
        snprintf(reason, reason_size, "%s has no tiering policy, so only the archive holds it",
                 request->ns[0] != '\0' ? request->ns : "the database");
        return false;
    }
    if (decision->route != PLAN_ROUTE_FAST) {
        snprintf(reason, reason_size, "the fast tier cannot answer it completely (%s)", decision->reason_text);
        return false;
    }
    if (decision->kind == PLAN_KIND_WRITE && decision->needs_fault_in &&
        !bson_has_field(&request->command, "startTransaction")) {
        snprintf(reason, reason_size,
                 "it must first copy archive documents to the fast tier, which the transaction's snapshot, taken "
                 "by its first command, would not show (%s)",
                 decision->reason_text);
        return false;
    }
    return true;
}

static void on_refused_transaction_aborted(void *context, const uint8_t *reply, size_t length,
                                           const bson_error_t *error)
{
    proxy_request_t *request = context;
    (void)reply, (void)length, (void)error; /* whatever the tier answers, the transaction is over there */
    finish_with_error(request, &request->refusal);
}

/* Refuses the command and aborts its transaction on the fast tier first, so the
 * client's next command finds it aborted. A refused first command started
 * nothing there. */
static void refuse_in_transaction(proxy_request_t *request, const char *reason)
{
    tc_error_set(&request->refusal, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "%s on %s cannot run in a transaction through thermocline proxy: %s. Transactions run on the fast "
                 "tier only; this one was aborted",
                 request->command_name, request->ns[0] != '\0' ? request->ns : "(no collection)", reason);
    bson_iter_t lsid, number;
    bson_t abort = BSON_INITIALIZER;
    uint8_t *encoded = NULL;
    size_t length;
    bson_error_t error;
    bool sent = false;
    if (!bson_has_field(&request->command, "startTransaction") &&
        bson_iter_init_find(&lsid, &request->command, "lsid") &&
        bson_iter_init_find(&number, &request->command, "txnNumber")) {
        BSON_APPEND_INT32(&abort, "abortTransaction", 1);
        bson_append_iter(&abort, "lsid", 4, &lsid);
        bson_append_iter(&abort, "txnNumber", 9, &number);
        BSON_APPEND_BOOL(&abort, "autocommit", false);
        BSON_APPEND_UTF8(&abort, "$db", "admin");
        if (wire_op_msg_build(0, 0, 0, &abort, NULL, 0, &encoded, &length, &error)) {
            request->tier = PROXY_TIER_FAST;
            backend_pool_send(request->proxy->tiers[PROXY_TIER_FAST], encoded, length,
                              on_refused_transaction_aborted, request);
            bson_free(encoded);
            sent = true;
        }
    }
    bson_destroy(&abort);
    if (!sent) {
        finish_with_error(request, &request->refusal);
    }
}

/* A committed transaction may have written any tiered namespace: reads sent to
 * the archive wait until the feeder has applied it, as after a plain write. */
static void note_transaction_commit(proxy_request_t *request, const bson_t *body)
{
    bson_iter_t iter;
    uint32_t seconds, increment;
    if (!bson_iter_init_find(&iter, body, "ok") || bson_iter_as_double(&iter) != 1.0 ||
        !bson_iter_init_find(&iter, body, "operationTime") || !BSON_ITER_HOLDS_TIMESTAMP(&iter)) {
        return;
    }
    bson_iter_timestamp(&iter, &seconds, &increment);
    uint64_t time = (uint64_t)seconds << 32 | increment;
    for (size_t i = 0; i < request->proxy->namespace_count; i++) {
        namespace_state_t *state = &request->proxy->namespaces[i];
        state->last_write_time = time > state->last_write_time ? time : state->last_write_time;
        state->last_delete_time = time > state->last_delete_time ? time : state->last_delete_time;
    }
}

/* --- planning ------------------------------------------------------------------------ */

static void route_decided(proxy_request_t *request);

static void on_members_chosen(void *context, const uint64_t *member_ids, const bson_error_t *error)
{
    proxy_request_t *request = context;
    if (error != NULL) {
        finish_with_error(request, error);
        return;
    }
    memcpy(request->members, member_ids, sizeof request->members);
    route_decided(request);
}

static void route_planned(proxy_request_t *request)
{
    proxy_t *proxy = request->proxy;
    bson_error_t error;
    const plan_policy_t *policy = NULL;
    plan_coverage_t coverage = {0};

    if (plan_command_namespace(&request->command, request->ns, sizeof request->ns)) {
        request->namespace_state = proxy_find_namespace(proxy, request->ns);
        if (request->namespace_state != NULL) {
            policy = &request->namespace_state->policy;
            coverage = proxy_coverage(proxy, request->namespace_state);
        }
    }
    request->has_decision = true;
    request->retry_kind = retry_command_kind(&request->command);
    if (!plan_command(&request->command, policy, &coverage, &request->decision, &error)) {
        finish_with_error(request, &error);
        return;
    }
    member_route_choose(proxy, &request->command, request->command_name, &request->decision,
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
    if (decision->in_transaction && !transaction_may_run(request, refusal_reason, sizeof refusal_reason)) {
        refuse_in_transaction(request, refusal_reason);
        return;
    }
    switch (decision->route) {
    case PLAN_ROUTE_PROXY:
        answer_locally(request);
        return;
    case PLAN_ROUTE_CURSOR_OWNER:
        if (strcmp(request->command_name, "getMore") == 0) {
            route_get_more(request);
        } else {
            route_kill_cursors(request);
        }
        return;
    case PLAN_ROUTE_TRANSACTION_OWNER:
        forward(request, PROXY_TIER_FAST);
        return;
    case PLAN_ROUTE_FAST:
        if (decision->kind == PLAN_KIND_WRITE && !decision->is_explain &&
            (decision->needs_fault_in || decision->unique_id_check_count > 0)) {
            /* The documents stay in the fast tier until the write has run (no
             * eviction in between), and the archive must show earlier deletes
             * first: a copy of a document deleted since would bring it back (I6). */
            if (!pin_fault_in(request)) {
                queue_wait(request, true, false, request->namespace_state, fault_in_after_deletes);
                return;
            }
            fault_in_after_deletes(request);
            return;
        }
        forward(request, PROXY_TIER_FAST);
        return;
    case PLAN_ROUTE_FAST_THEN_ARCHIVE:
        route_point_read(request);
        return;
    case PLAN_ROUTE_ARCHIVE:
        if (decision->kind == PLAN_KIND_READ) {
            after_feeder_caught_up(request, false, forward_to_archive);
            return;
        }
        forward(request, PROXY_TIER_ARCHIVE);
        return;
    }
}

/* --- arrival ------------------------------------------------------------------------ */

/* A command access.c answered (saslStart, saslContinue, logout, connectionStatus). */
static void on_access_reply(void *context, const bson_t *reply, const bson_error_t *error)
{
    proxy_request_t *request = context;
    if (error != NULL) {
        finish_with_error(request, error);
        return;
    }
    bson_t body;
    bson_copy_to(reply, &body);
    BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    finish_with_document(request, &body, 0);
    bson_destroy(&body);
}

static void on_admitted(void *context, const bson_error_t *error)
{
    proxy_request_t *request = context;
    if (error != NULL) {
        finish_with_error(request, error);
        return;
    }
    route_planned(request);
}

void router_handle(void *application, server_pending_t *pending, const server_request_t *server_request)
{
    proxy_t *proxy = application;
    proxy_request_t *request = bson_malloc0(sizeof *request);
    bson_error_t error;
    wire_header_t header;
    request->proxy = proxy;
    request->pending = pending;
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
        bson_destroy(&request->command);
        if (!wire_op_query_parse(request->message, request->length, &query, &error) ||
            !wire_op_query_command(&query, &request->command, &error)) {
            goto close_connection;
        }
        bson_iter_t first;
        if (bson_iter_init(&first, &request->command) && bson_iter_next(&first) &&
            (strcmp(bson_iter_key(&first), "isMaster") == 0 || strcmp(bson_iter_key(&first), "ismaster") == 0 ||
             strcmp(bson_iter_key(&first), "hello") == 0)) {
            request->command_name = "isMaster";
            request->legacy_hello = true;
            answer_locally(request);
            return;
        }
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id,
               "closing connection from %s: OP_QUERY is only for the handshake", server_request->peer_address);
        goto close_connection;
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
        finish_with_error(request, &error);
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
        finish_with_error(request, &error);
        return;
    }
    bson_iter_t first;
    if (!bson_iter_init(&first, &request->command) || !bson_iter_next(&first)) {
        tc_error_set(&error, TC_ERR_FAILED_TO_PARSE, "Empty command: a command document needs a command name");
        finish_with_error(request, &error);
        return;
    }
    request->command_name = bson_iter_key(&first);
    if (access_answers(request->command_name)) {
        access_run(proxy, &request->client, request->command_name, &request->command, on_access_reply, request);
        return;
    }
    access_admit(proxy, &request->client, request->command_name, &request->command, on_admitted, request);
    return;

close_connection:
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "closing connection from %s: %s",
           server_request->peer_address, error.message);
    server_reply_t close_reply = {.close_after = true};
    server_complete(pending, &close_reply);
    request_free(request);
}
