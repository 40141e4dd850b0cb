/* One client request through the proxy, on the event loop:
 *
 *   arrive ─▶ decode (OP_COMPRESSED, OP_MSG / OP_QUERY handshake)
 *          ─▶ answered here (hello, ping, thermoclineStatus)          ─▶ reply
 *          ─▶ plan (planner.c) ─▶ [fault-in: archive find ─▶ fast insert]
 *                              ─▶ forward to the tier ─▶ patch cursor ids ─▶ reply
 *
 * A command routed to one tier is forwarded as the client's own bytes (only the
 * requestID and, for getMore, the cursor id change), and its reply comes back the
 * same way, with the tier's cursor id replaced by the proxy's. */
#include "proxy/proxy_private.h"

#include "common/log.h"
#include "query/order.h"
#include "query/value_format.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "ROUTER"
#define MAX_WIRE_VERSION 17 /* MongoDB 6.0: the proxy speaks no newer protocol */
#define DEFAULT_LOGICAL_SESSION_TIMEOUT_MINUTES 30

typedef struct proxy_request {
    proxy_t *proxy;
    server_pending_t *pending;
    uint64_t connection_id;
    int32_t client_request_id;
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
    int64_t getmore_proxy_id; /* getMore: the client's cursor id */
    bool opens_cursor;        /* the reply may carry a new cursor to map */
} proxy_request_t;

/* --- replies built here ------------------------------------------------------- */

static void request_free(proxy_request_t *request)
{
    if (request->has_decision) {
        plan_decision_cleanup(&request->decision);
    }
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

static void finish_with_document(proxy_request_t *request, const bson_t *body, uint32_t delay_ms)
{
    uint8_t *encoded = NULL;
    size_t length = 0;
    bson_error_t error;
    if (!wire_op_msg_build(0, request->client_request_id, 0, body, NULL, 0, &encoded, &length, &error)) {
        bson_t fallback = BSON_INITIALIZER;
        tc_error_append_reply(&error, &fallback);
        bool built = wire_op_msg_build(0, request->client_request_id, 0, &fallback, NULL, 0, &encoded, &length, &error);
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

static void append_hello_fields(proxy_request_t *request, bool legacy_name, bson_t *body)
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

static void answer_legacy_hello(proxy_request_t *request)
{
    bson_t body = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    append_hello_fields(request, true, &body);
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

static void answer_locally(proxy_request_t *request)
{
    bson_t body = BSON_INITIALIZER;
    uint32_t delay_ms = 0;
    const char *name = request->command_name;
    if (strcmp(name, "hello") == 0 || strcmp(name, "isMaster") == 0 || strcmp(name, "ismaster") == 0) {
        append_hello_fields(request, strcmp(name, "hello") != 0, &body);
        delay_ms = awaitable_delay_ms(request);
    } else if (strcmp(name, "thermoclineStatus") == 0) {
        proxy_append_status(request->proxy, &body);
        BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    } else {
        BSON_APPEND_DOUBLE(&body, "ok", 1.0); /* ping */
    }
    finish_with_document(request, &body, delay_ms);
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
    uint8_t *copy = bson_malloc(length);
    memcpy(copy, reply, length);
    bson_t body;
    bson_error_t parse_error;
    if (wire_message_opcode(copy) == WIRE_OP_MSG && wire_op_msg_peek_body(copy, length, &body, &parse_error)) {
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
            int64_t proxy_id = cursor_map_add(proxy->cursors, request->tier, read_int64(cursor_id), cursor_ns);
            write_int64(cursor_id, proxy_id);
        }
    }
    finish_with_message(request, copy, length);
}

static void forward(proxy_request_t *request, proxy_tier_t tier)
{
    request->tier = tier;
    backend_pool_send(request->proxy->tiers[tier], request->message, request->length, on_tier_reply, request);
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
    write_int64(id_bytes, cursor->backend_id);
    forward(request, cursor->tier);
}

/* killCursors names proxy ids that may belong to both tiers: answered here from
 * the map, each tier told of its own ids (no reply awaited from them). */
static void on_kill_sent(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    (void)context, (void)reply, (void)length, (void)error;
}

static void route_kill_cursors(proxy_request_t *request)
{
    bson_iter_t iter, ids;
    bson_t killed = BSON_INITIALIZER, missing = BSON_INITIALIZER;
    uint32_t killed_count = 0, missing_count = 0;
    bson_t per_tier[PROXY_TIER_COUNT];
    uint32_t per_tier_count[PROXY_TIER_COUNT] = {0};
    bson_error_t error;
    const char *collection = "";
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        bson_init(&per_tier[tier]);
    }
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
                bson_uint32_to_string(per_tier_count[cursor->tier]++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&per_tier[cursor->tier], key_string, cursor->backend_id);
                cursor_map_remove(request->proxy->cursors, proxy_id);
                bson_uint32_to_string(killed_count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&killed, key_string, proxy_id);
            } else {
                bson_uint32_to_string(missing_count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&missing, key_string, proxy_id);
            }
        }
    }
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        if (per_tier_count[tier] > 0) {
            bson_iter_t database;
            bson_t kill = BSON_INITIALIZER;
            uint8_t *encoded;
            size_t length;
            BSON_APPEND_UTF8(&kill, "killCursors", collection);
            BSON_APPEND_ARRAY(&kill, "cursors", &per_tier[tier]);
            if (bson_iter_init_find(&database, &request->command, "$db")) {
                bson_append_iter(&kill, "$db", 3, &database);
            }
            if (wire_op_msg_build(0, 0, 0, &kill, NULL, 0, &encoded, &length, &error)) {
                backend_pool_send(request->proxy->tiers[tier], encoded, length, on_kill_sent, NULL);
                bson_free(encoded);
            }
            bson_destroy(&kill);
        }
        bson_destroy(&per_tier[tier]);
    }
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
    backend_pool_send(request->proxy->tiers[PROXY_TIER_FAST], encoded, encoded_length, on_fault_in_inserted, request);
    bson_free(encoded);
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

    BSON_APPEND_UTF8(&find, "find", dot + 1);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
    BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &clauses);
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
    bson_append_array_end(&filter, &clauses);
    bson_append_document_end(&find, &filter);
    /* One more than the limit: a cursor left open means the write touches too many. */
    BSON_APPEND_INT64(&find, "batchSize", request->proxy->config->fault_in_limit + 1);
    bson_append_utf8(&find, "$db", 3, request->ns, (int)(dot - request->ns));
    bool built = wire_op_msg_build(0, 0, 0, &find, NULL, 0, &encoded, &length, &error);
    bson_destroy(&find);
    if (!built) {
        finish_with_error(request, &error);
        return;
    }
    backend_pool_send(request->proxy->tiers[PROXY_TIER_ARCHIVE], encoded, length, on_fault_in_found, request);
    bson_free(encoded);
}

/* --- planning ------------------------------------------------------------------------ */

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
    if (!plan_command(&request->command, policy, &coverage, &request->decision, &error)) {
        finish_with_error(request, &error);
        return;
    }
    plan_decision_t *decision = &request->decision;
    count_route(request, decision->route);
    TC_LOG(TC_LOG_DEBUG, LOG_COMPONENT, request->connection_id, "%s on %s: %s (%s)", request->command_name,
           request->ns, plan_route_name(decision->route), decision->reason_text);
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
        tc_error_set(&error, TC_ERR_COMMAND_NOT_SUPPORTED,
                     "multi-document transactions through thermocline proxy are not available yet (%s)",
                     request->ns);
        finish_with_error(request, &error);
        return;
    case PLAN_ROUTE_FAST:
        if (decision->in_transaction) {
            tc_error_set(&error, TC_ERR_COMMAND_NOT_SUPPORTED,
                         "multi-document transactions through thermocline proxy are not available yet (%s)",
                         request->ns);
            finish_with_error(request, &error);
            return;
        }
        if (decision->kind == PLAN_KIND_WRITE && !decision->is_explain &&
            (decision->needs_fault_in || decision->unique_id_check_count > 0)) {
            start_fault_in(request);
            return;
        }
        forward(request, PROXY_TIER_FAST);
        return;
    case PLAN_ROUTE_FAST_THEN_ARCHIVE:
        /* The archive holds every document; until read-your-writes across tiers
         * lands with the feeder, a point read is answered there. */
        forward(request, PROXY_TIER_ARCHIVE);
        return;
    case PLAN_ROUTE_ARCHIVE:
        if (decision->in_transaction) {
            tc_error_set(&error, TC_ERR_COMMAND_NOT_SUPPORTED,
                         "a transaction on %s reads what only the archive can answer (%s): thermocline proxy runs "
                         "transactions on the fast tier only",
                         request->ns, decision->reason_text);
            finish_with_error(request, &error);
            return;
        }
        forward(request, PROXY_TIER_ARCHIVE);
        return;
    }
}

/* --- arrival ------------------------------------------------------------------------ */

void router_handle(void *application, server_pending_t *pending, const server_request_t *server_request)
{
    proxy_t *proxy = application;
    proxy_request_t *request = bson_malloc0(sizeof *request);
    bson_error_t error;
    wire_header_t header;
    request->proxy = proxy;
    request->pending = pending;
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
            answer_legacy_hello(request);
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
    route_planned(request);
    return;

close_connection:
    TC_LOG(TC_LOG_INFO, LOG_COMPONENT, request->connection_id, "closing connection from %s: %s",
           server_request->peer_address, error.message);
    server_reply_t close_reply = {.close_after = true};
    server_complete(pending, &close_reply);
    request_free(request);
}
