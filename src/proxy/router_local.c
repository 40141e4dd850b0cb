/* What the proxy answers itself, without a tier: hello (and the legacy isMaster,
 * as a mongos: msg "isdbgrid", the tiers' lowest maxWireVersion and session
 * timeout), ping, _isSelf, thermoclineStatus and thermoclineReload (reload.c). */
#include "proxy/router_private.h"

#include "wire/wire.h"
#include "common/clock.h"

#include <string.h>

#define MAX_WIRE_VERSION 17 /* MongoDB 6.0: the proxy speaks no newer protocol */
#define DEFAULT_LOGICAL_SESSION_TIMEOUT_MINUTES 30

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
    wire_append_hello_limits(body);
    BSON_APPEND_DATE_TIME(body, "localTime", clock_wall_ms());
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
    bool built = wire_op_reply_command_build(0, request->client_request_id, &body, &encoded, &length, &error);
    bson_destroy(&body);
    if (!built) {
        router_close_connection(request);
        return;
    }
    router_finish_with_message(request, encoded, length);
}

static bool is_hello(const char *name)
{
    return strcmp(name, "hello") == 0 || strcmp(name, "isMaster") == 0 || strcmp(name, "ismaster") == 0;
}

void router_answer_hello(proxy_request_t *request, const bson_t *extra)
{
    if (request->legacy) {
        answer_legacy_hello(request, extra);
        return;
    }
    bson_t body = BSON_INITIALIZER;
    append_hello_fields(request, strcmp(request->command_name, "hello") != 0, extra, &body);
    router_finish_with_document(request, &body, awaitable_delay_ms(request));
    bson_destroy(&body);
}

/* hello's authentication fields are ready (access.c never fails a hello). */
static void on_hello_fields(void *context, const bson_t *fields, const bson_error_t *error)
{
    (void)error;
    router_advance(context, &(router_outcome_t){.document = fields});
}

/* thermoclineRetryRefusals: asks this process's feeder to replay the writes the
 * archive refused (src/tier/README.md); it does so between two batches, so the reply
 * does not wait for the outcome: thermoclineStatus shows what stands after. */
static void retry_refusals(proxy_t *proxy, bson_t *body)
{
    if (!proxy_worker_runs_here(proxy, TIER_WORKER_FEEDER)) {
        bson_error_t error;
        tier_worker_progress_t feeder;
        tier_progress_worker(proxy->progress, TIER_WORKER_FEEDER, &feeder);
        tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                     "thermoclineRetryRefusals: the feeder does not run in this proxy (%s); run the command "
                     "through the proxy that holds its lease, or restart the process that runs it, which "
                     "retries the refused writes at start",
                     (proxy->workers_here & TIER_RUN_FEEDER) == 0 ? "feederEnabled: false"
                     : feeder.lease_holder[0] != '\0'           ? feeder.lease_holder
                                                                  : "it waits for its lease");
        tc_error_append_reply(&error, body);
        return;
    }
    tier_worker_progress_t *feeder = tier_progress_lock_worker(proxy->progress, TIER_WORKER_FEEDER);
    feeder->refusal_retries_requested++;
    tier_progress_unlock(proxy->progress, false);
    BSON_APPEND_UTF8(body, "note", "the feeder retries the refused writes in order before its next batch; "
                                   "thermoclineStatus shows the refusals that stand");
    BSON_APPEND_DOUBLE(body, "ok", 1.0);
}

/* thermoclineReload's outcome (reload.c): what changed, or why nothing did. */
static void on_reloaded(void *context, const bson_t *reply, const bson_error_t *error)
{
    router_advance(context, &(router_outcome_t){.document = reply, .error = error});
}

void router_answer_locally(proxy_request_t *request)
{
    const char *name = request->command_name;
    if (strcmp(name, "thermoclineReload") == 0) {
        router_enter(request, PHASE_RELOADING);
        proxy_reload(request->proxy, on_reloaded, request);
        return;
    }
    if (is_hello(name)) {
        if (access_hello_wanted(&request->command)) {
            router_enter(request, PHASE_ANSWERING_HELLO);
            access_hello(request->proxy, &request->client, &request->command, on_hello_fields, request);
            return;
        }
        router_answer_hello(request, NULL);
        return;
    }
    bson_t body = BSON_INITIALIZER;
    if (strcmp(name, "thermoclineStatus") == 0) {
        proxy_append_status(request->proxy, &body);
        BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    } else if (strcmp(name, "thermoclineRetryRefusals") == 0) {
        retry_refusals(request->proxy, &body);
    } else if (strcmp(name, "_isSelf") == 0) {
        BSON_APPEND_OID(&body, "id", &request->proxy->process_id);
        BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    } else {
        BSON_APPEND_DOUBLE(&body, "ok", 1.0); /* ping */
    }
    router_finish_with_document(request, &body, 0);
    bson_destroy(&body);
}
