/* `thermocline proxy --config FILE`: loads the config, opens a connection pool
 * to each tier, starts the tier workers (src/tier) as threads, serves clients on
 * one event loop (router.c, with access.c checking who they are) and answers
 * thermoclineStatus. Everything here runs
 * on that loop's thread; the workers' progress reaches it through an async
 * handle, or by polling the fast tier when they run in another process. */
#include "proxy/proxy.h"
#include "proxy/proxy_private.h"

#include "common/clock.h"
#include "common/log.h"
#include "config/arguments.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define LOG_COMPONENT "PROXY"
#define HOUSEKEEPING_INTERVAL_MS 1000
#define BACKEND_POOL_SIZE 64
/* While reads wait for a feeder of another process, its progress is read again
 * every 5 ms (one read in flight at a time): the feeder writes its checkpoint
 * after each batch, and a 100 ms period held every such read 100 ms (measured:
 * scripts/measure_cross_proxy_read_wait.py). Else once a second, and the timer
 * wakes the loop at that pace only. */
#define POLL_WAITING_INTERVAL_MS 5
#define POLL_IDLE_INTERVAL_MS 1000

const char *proxy_tier_name(proxy_tier_t tier)
{
    return tier == PROXY_TIER_FAST ? "fast" : "archive";
}

namespace_state_t *proxy_find_namespace(proxy_t *proxy, const char *ns)
{
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        if (strcmp(proxy->namespaces[i].config->ns, ns) == 0) {
            return proxy->namespaces[i].awaiting_workers ? NULL : &proxy->namespaces[i];
        }
    }
    return NULL;
}

plan_coverage_t proxy_coverage(const proxy_t *proxy, const namespace_state_t *state)
{
    /* Valid once the warmer has copied the whole window (or when declared: both
     * tiers started empty, so the fast tier has every write). The evictor keeps
     * documents newer than now - maxAge; the slack covers clock skew and an
     * eviction pass in progress. */
    plan_coverage_t coverage = {.valid = false};
    (void)proxy;
    if (state->config->coverage == CONFIG_COVERAGE_COMPLETE || state->progress.coverage_valid) {
        coverage.valid = true;
        coverage.horizon_ms = clock_wall_ms() - state->config->max_age_ms + state->config->safety_slack_ms;
    }
    return coverage;
}

static void append_tier_status(proxy_t *proxy, bson_t *out)
{
    bson_t tiers;
    BSON_APPEND_DOCUMENT_BEGIN(out, "backends", &tiers);
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        bson_t item;
        backend_pool_stats_t stats = backend_pool_stats(proxy->tiers[tier]);
        const backend_server_info_t *info = backend_pool_server_info(proxy->tiers[tier]);
        BSON_APPEND_DOCUMENT_BEGIN(&tiers, proxy_tier_name((proxy_tier_t)tier), &item);
        BSON_APPEND_INT32(&item, "connections", stats.open);
        BSON_APPEND_INT32(&item, "busy", stats.busy);
        BSON_APPEND_INT32(&item, "queued", stats.queued);
        BSON_APPEND_INT32(&item, "inFlightLimit", stats.in_flight_limit);
        BSON_APPEND_INT64(&item, "waits", (int64_t)stats.waited);
        BSON_APPEND_INT64(&item, "requests", (int64_t)stats.sent);
        BSON_APPEND_INT64(&item, "networkErrors", (int64_t)stats.failed);
        BSON_APPEND_BOOL(&item, "reachable", info->known);
        BSON_APPEND_BOOL(&item, "tls", stats.tls);
        if (stats.last_error != NULL) {
            BSON_APPEND_UTF8(&item, "lastError", stats.last_error);
        }
        if (info->known) {
            BSON_APPEND_INT32(&item, "maxWireVersion", info->max_wire_version);
            if (info->set_name[0] != '\0') {
                BSON_APPEND_UTF8(&item, "setName", info->set_name);
            }
        }
        backend_pool_append_members(proxy->tiers[tier], &item);
        bson_append_document_end(&tiers, &item);
    }
    bson_append_document_end(out, &tiers);
}

/* The front door's connections, as serverStatus's connections and network. */
static void append_connection_status(proxy_t *proxy, bson_t *out)
{
    bson_t connections;
    server_connection_stats_t stats = server_connection_stats(proxy->server);
    BSON_APPEND_DOCUMENT_BEGIN(out, "connections", &connections);
    BSON_APPEND_INT64(&connections, "current", (int64_t)stats.current);
    BSON_APPEND_INT64(&connections, "available", (int64_t)stats.available);
    BSON_APPEND_INT64(&connections, "totalCreated", (int64_t)stats.total_created);
    BSON_APPEND_INT64(&connections, "tls", (int64_t)stats.tls);
    BSON_APPEND_INT64(&connections, "timedOut", (int64_t)stats.timed_out);
    BSON_APPEND_INT64(&connections, "queuedReplyBytes", (int64_t)stats.queued_reply_bytes);
    bson_append_document_end(out, &connections);
}

void proxy_append_status(proxy_t *proxy, bson_t *reply)
{
    bson_t namespaces;
    append_connection_status(proxy, reply);
    BSON_APPEND_INT64(reply, "requests", (int64_t)proxy->requests);
    BSON_APPEND_INT64(reply, "requestsFailed", (int64_t)proxy->requests_failed);
    BSON_APPEND_INT64(reply, "requestsRetried", (int64_t)proxy->requests_retried);
    BSON_APPEND_INT64(reply, "cursors", (int64_t)cursor_map_count(proxy->cursors));
    BSON_APPEND_DOCUMENT_BEGIN(reply, "namespaces", &namespaces);
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_state_t *state = &proxy->namespaces[i];
        bson_t item, routes, reasons;
        BSON_APPEND_DOCUMENT_BEGIN(&namespaces, state->config->ns, &item);
        BSON_APPEND_UTF8(&item, "timeField", state->config->time_field);
        BSON_APPEND_INT64(&item, "maxAgeMillis", state->config->max_age_ms);
        plan_coverage_t coverage = proxy_coverage(proxy, state);
        if (coverage.valid) {
            BSON_APPEND_DATE_TIME(&item, "coverageHorizon", coverage.horizon_ms);
        } else {
            BSON_APPEND_NULL(&item, "coverageHorizon"); /* +infinity: nothing is read from the fast tier */
        }
        BSON_APPEND_UTF8(&item, "coverage", state->config->coverage == CONFIG_COVERAGE_COMPLETE ? "complete" : "warm");
        if (state->awaiting_workers) { /* added by a reload: untiered until the workers run on it */
            BSON_APPEND_BOOL(&item, "awaitingWorkers", true);
        }
        BSON_APPEND_DOCUMENT_BEGIN(&item, "routes", &routes);
        for (int route = 0; route <= PLAN_ROUTE_PROXY; route++) {
            BSON_APPEND_INT64(&routes, plan_route_name((plan_route_t)route), (int64_t)state->route_counts[route]);
        }
        bson_append_document_end(&item, &routes);
        BSON_APPEND_DOCUMENT_BEGIN(&item, "reasons", &reasons);
        for (int reason = 0; reason <= PLAN_REASON_MALFORMED; reason++) {
            if (state->reason_counts[reason] > 0) {
                BSON_APPEND_INT64(&reasons, plan_reason_name((plan_reason_t)reason), (int64_t)state->reason_counts[reason]);
            }
        }
        bson_append_document_end(&item, &reasons);
        BSON_APPEND_INT64(&item, "faultedIn", (int64_t)state->fault_ins);
        BSON_APPEND_INT64(&item, "pointReadsFromArchive", (int64_t)state->point_reads_from_archive);
        bson_append_timestamp(&item, "lastFastWriteTime", -1, (uint32_t)(state->last_write_time >> 32),
                              (uint32_t)state->last_write_time);
        BSON_APPEND_INT64(&item, "readsWaitedForFeeder", (int64_t)state->reads_waited);
        BSON_APPEND_INT64(&item, "readsFailedWaitingForFeeder", (int64_t)state->reads_wait_failed);
        size_t slot = proxy_progress_slot(proxy, state);
        if (slot != SIZE_MAX) {
            tier_progress_append_namespace(proxy->progress, slot, &item);
        }
        bson_append_document_end(&namespaces, &item);
    }
    bson_append_document_end(reply, &namespaces);
    BSON_APPEND_INT64(reply, "readsWaitingForFeeder", (int64_t)proxy->wait_count);
    bson_t pins;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "fastTierPins", &pins);
    BSON_APPEND_INT64(&pins, "writes", (int64_t)proxy->pinned_writes);
    BSON_APPEND_INT64(&pins, "rounds", (int64_t)proxy->pin_rounds);
    bson_append_document_end(reply, &pins);
    /* This proxy and the others of its config seen beating (tier/lease.h). */
    BSON_APPEND_INT32(reply, "proxiesAlive", 1 + tier_progress_peers(proxy->progress));
    tier_progress_append_workers(proxy->progress, "workers", reply);
    append_tier_status(proxy, reply);
}

/* --- the tier workers' progress ---------------------------------------------------- */

size_t proxy_progress_slot(const proxy_t *proxy, const namespace_state_t *state)
{
    const config_t *slots = proxy->workers_config;
    size_t index = state->config->index;
    if (index < slots->namespace_count && &slots->namespaces[index] == state->config) {
        return index;
    }
    const config_namespace_t *entry = config_find_namespace(slots, state->config->ns);
    return entry != NULL ? entry->index : SIZE_MAX;
}

void proxy_refresh_progress(proxy_t *proxy)
{
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_state_t *state = &proxy->namespaces[i];
        size_t slot = proxy_progress_slot(proxy, state);
        if (slot != SIZE_MAX) { /* else added by a reload whose workers do not run yet */
            tier_progress_namespace(proxy->progress, slot, &state->progress);
        }
    }
    router_resume_waits(proxy);
}

/* Called on a worker thread: only wakes the loop. */
void proxy_on_worker_progress(void *context)
{
    proxy_t *proxy = context;
    uv_async_send(&proxy->progress_async);
}

static void on_progress_async(uv_async_t *handle)
{
    proxy_refresh_progress(handle->data);
}

/* Workers of another process leave their progress in the fast tier. */
static void on_poll_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_t *proxy = context;
    bson_t body, documents;
    bson_iter_t iter, batch;
    bson_error_t parse_error;
    proxy->polls_in_flight--;
    if (error != NULL || !wire_op_msg_find_body(reply, length, &body, &parse_error) ||
        !bson_iter_init(&iter, &body) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) ||
        !BSON_ITER_HOLDS_ARRAY(&batch)) {
        return;
    }
    uint32_t array_length;
    const uint8_t *data;
    bson_iter_t ns_iter;
    bson_iter_array(&batch, &array_length, &data);
    bson_init_static(&documents, data, array_length);
    if (bson_iter_init(&ns_iter, &body) && bson_iter_find_descendant(&ns_iter, "cursor.ns", &iter) &&
        BSON_ITER_HOLDS_UTF8(&iter) && strcmp(bson_iter_utf8(&iter, NULL), TIER_DATABASE "." TIER_WARMER_COLLECTION) == 0) {
        tier_progress_apply_warmer_documents(proxy->progress, proxy->workers_config, &documents);
    } else {
        tier_progress_apply_feeder_documents(proxy->progress, proxy->workers_config, &documents);
    }
    proxy_refresh_progress(proxy);
}

static void poll_collection(proxy_t *proxy, const char *collection)
{
    bson_t find = BSON_INITIALIZER;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_UTF8(&find, "find", collection);
    BSON_APPEND_INT32(&find, "batchSize", 10000);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", TIER_DATABASE);
    if (wire_op_msg_build(0, 0, 0, &find, NULL, 0, &message, &length, &error)) {
        proxy->polls_in_flight++;
        backend_pool_send(proxy->tiers[PROXY_TIER_FAST], message, length, on_poll_reply, proxy);
        bson_free(message);
    }
    bson_destroy(&find);
}

static void on_poll_timer(uv_timer_t *timer)
{
    proxy_t *proxy = timer->data;
    int64_t now = clock_monotonic_ms();
    int64_t interval = proxy->wait_count > 0 ? POLL_WAITING_INTERVAL_MS : POLL_IDLE_INTERVAL_MS;
    if (proxy->wait_count == 0) {
        uv_timer_set_repeat(timer, POLL_IDLE_INTERVAL_MS); /* back to its idle pace once none waits */
    }
    if (proxy->polls_in_flight > 0 || now - proxy->last_poll_ms < interval) {
        return;
    }
    proxy->last_poll_ms = now;
    if (!proxy_worker_runs_here(proxy, TIER_WORKER_FEEDER)) {
        poll_collection(proxy, TIER_FEEDER_COLLECTION);
    }
    if (!proxy_worker_runs_here(proxy, TIER_WORKER_WARMER)) {
        poll_collection(proxy, TIER_WARMER_COLLECTION);
    }
}


bool proxy_worker_runs_here(proxy_t *proxy, tier_worker_t worker)
{
    tier_worker_progress_t item;
    tier_progress_worker(proxy->progress, worker, &item);
    return item.running;
}

/* --- housekeeping and shutdown ---------------------------------------------------- */

/* Leaves the feeder, here or elsewhere, its share of the archive (archive_share.h). */
static void share_the_archive(proxy_t *proxy)
{
    tier_worker_progress_t feeder;
    tier_progress_worker(proxy->progress, TIER_WORKER_FEEDER, &feeder);
    /* The feeder's lag, whether it runs here or in another process (its lease). */
    int64_t lag_ms = tier_progress_lag_ms(&feeder, clock_wall_ms());
    int before = proxy->archive_share.limit;
    int limit = archive_share_next(&proxy->archive_share, lag_ms);
    if (limit == before) {
        return;
    }
    backend_pool_limit_in_flight(proxy->tiers[PROXY_TIER_ARCHIVE], limit);
    if (before == proxy->archive_share.maximum) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                     "the feeder is {lagMillis} ms behind: at most {limit} requests to the archive at once "
                     "(of {maximum}) until it catches up, so that its replay keeps a share of the archive",
                     TC_ATTR_INT("lagMillis", lag_ms), TC_ATTR_INT("limit", limit),
                     TC_ATTR_INT("maximum", proxy->archive_share.maximum));
    } else if (limit == proxy->archive_share.maximum) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                     "the feeder has caught up: up to {maximum} requests to the archive at once again",
                     TC_ATTR_INT("maximum", proxy->archive_share.maximum));
    }
}

static void on_housekeeping(uv_timer_t *timer)
{
    proxy_t *proxy = timer->data;
    share_the_archive(proxy);
    cursor_map_expire(proxy->cursors, clock_monotonic_ms());
    unique_indexes_refresh_due(proxy);
    proxy_reload_sweep(proxy); /* a replaced config whose last unique-index read came back */
}

static void on_loop_stopping(void *application)
{
    proxy_t *proxy = application;
    if (proxy->housekeeping_started) {
        uv_close((uv_handle_t *)&proxy->housekeeping_timer, NULL);
        proxy->housekeeping_started = false;
    }
    proxy_metrics_stop(proxy);
    proxy_reload_stop(proxy);
    /* Workers first: their last report must not reach a closed async handle. */
    tier_workers_stop(proxy->workers);
    proxy->workers = NULL;
    tier_progress_set_listener(proxy->progress, NULL, NULL);
    router_cancel_waits(proxy);
    unique_indexes_cancel_waits(proxy);
    recovery_stop(proxy);
    if (proxy->progress_async_started) {
        uv_close((uv_handle_t *)&proxy->progress_async, NULL);
        proxy->progress_async_started = false;
    }
    if (proxy->poll_timer_started) {
        uv_close((uv_handle_t *)&proxy->poll_timer, NULL);
        proxy->poll_timer_started = false;
    }
    if (proxy->wait_timer_started) {
        uv_close((uv_handle_t *)&proxy->wait_timer, NULL);
        proxy->wait_timer_started = false;
    }
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        if (proxy->tiers[tier] != NULL) { /* NULL: start-up failed before it was made */
            backend_pool_close(proxy->tiers[tier]);
        }
    }
}

/* Learns each tier's limits before the first client asks (hello's maxWireVersion). */
static void on_probe_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    backend_pool_t *pool = context;
    (void)reply, (void)length;
    if (error != NULL) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "%s tier not reachable yet: %s", backend_pool_name(pool),
               error->message);
    }
}

static void probe_tiers(proxy_t *proxy)
{
    bson_t ping = BSON_INITIALIZER;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_INT32(&ping, "ping", 1);
    BSON_APPEND_UTF8(&ping, "$db", "admin");
    if (wire_op_msg_build(0, 0, 0, &ping, NULL, 0, &message, &length, &error)) {
        for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
            backend_pool_send(proxy->tiers[tier], message, length, on_probe_reply, proxy->tiers[tier]);
        }
        bson_free(message);
    }
    bson_destroy(&ping);
}

/* --- run ---------------------------------------------------------------------------- */

void proxy_start_polling(proxy_t *proxy)
{
    if (proxy->namespace_count > 0 && !proxy->poll_timer_started) { /* a worker whose lease another process holds runs there */
        uv_timer_init(proxy->loop, &proxy->poll_timer);
        proxy->poll_timer.data = proxy;
        uv_timer_start(&proxy->poll_timer, on_poll_timer, 0, POLL_IDLE_INTERVAL_MS);
        proxy->poll_timer_started = true;
    }
}

void proxy_poll_while_waiting(proxy_t *proxy)
{
    if (proxy->poll_timer_started && uv_timer_get_repeat(&proxy->poll_timer) != POLL_WAITING_INTERVAL_MS) {
        uv_timer_start(&proxy->poll_timer, on_poll_timer, POLL_WAITING_INTERVAL_MS, POLL_WAITING_INTERVAL_MS);
    }
}

bool proxy_run(const char *config_path, bson_error_t *error)
{
    proxy_t proxy = {0};
    bool ok = false;

    config_t *config = config_load_file(config_path, error);
    if (config == NULL) {
        return false;
    }
    if (config->log_format == TC_LOG_FORMAT_JSON) {
        tc_log_set_format(TC_LOG_FORMAT_JSON); /* --log-format json needs no logFormat, and wins over text */
    }
    /* Before the port opens: a namespace that cannot be tiered stops the start. */
    if (!tier_preflight(config, error)) {
        config_destroy(config);
        return false;
    }
    proxy.config_path = config_path;
    proxy.generation = proxy_generation_new(config, NULL);
    proxy.config = config;
    proxy.namespaces = proxy.generation->namespaces;
    proxy.namespace_count = proxy.generation->namespace_count;
    bson_oid_init(&proxy.process_id, NULL);
    proxy.cursors = cursor_map_new();
    proxy.progress = tier_progress_new(proxy.namespace_count);
    proxy.workers_config = proxy.config;
    proxy.workers_here = (proxy.config->feeder_enabled ? TIER_RUN_FEEDER : 0) |
                         (proxy.config->evictor_enabled ? TIER_RUN_EVICTOR : 0) |
                         (proxy.config->warmer_enabled ? TIER_RUN_WARMER : 0);

    if (proxy.config->tls_mode != TLS_MODE_DISABLED) {
        tls_server_options_t tls_options = {
            .certificate_key_file = proxy.config->tls_certificate_key_file,
            .ca_file = proxy.config->tls_ca_file,
            .allow_connections_without_certificates = proxy.config->tls_allow_connections_without_certificates,
        };
        proxy.tls_context = tls_context_new_server(&tls_options, error);
        TC_CHECK(proxy.tls_context != NULL);
    }
    server_options_t server_options = {
        .bind_address = proxy.config->listen.host,
        .port = proxy.config->listen.port,
        .max_connections = (int)proxy.config->max_connections,
        .worker_count = 0,
        .max_message_bytes = WIRE_MAX_MESSAGE_SIZE,
        .idle_timeout_ms = (uint32_t)proxy.config->idle_timeout_ms,
        .receive_timeout_ms = (uint32_t)proxy.config->receive_timeout_ms,
        .send_timeout_ms = (uint32_t)proxy.config->send_timeout_ms,
        .tls_mode = proxy.config->tls_mode,
        .tls_context = proxy.tls_context,
    };
    server_callbacks_t callbacks = {
        .application = &proxy,
        .handle_on_loop = router_handle,
        .loop_stopping = on_loop_stopping,
        .connection_close = access_session_destroy,
    };
    proxy.server = server_new(&server_options, &callbacks, error);
    TC_CHECK(proxy.server != NULL);
    proxy.loop = server_loop(proxy.server);

    backend_pool_options_t tier_options[PROXY_TIER_COUNT] = {
        [PROXY_TIER_ARCHIVE] = {.name = "archive", .uri = proxy.config->archive_uri, .max_connections = BACKEND_POOL_SIZE},
        [PROXY_TIER_FAST] = {.name = "fast", .uri = proxy.config->fast_uri, .max_connections = BACKEND_POOL_SIZE},
    };
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        proxy.tiers[tier] = backend_pool_new(proxy.loop, &tier_options[tier], error);
        TC_CHECK(proxy.tiers[tier] != NULL);
    }
    archive_share_init(&proxy.archive_share, BACKEND_POOL_SIZE);
    proxy.users = user_cache_new(proxy.tiers[PROXY_TIER_ARCHIVE], PROXY_USER_CACHE_MS);
    TC_CHECK(proxy_metrics_start(&proxy, error));
    TC_CHECK(proxy_reload_start(&proxy, error));
    uv_timer_init(proxy.loop, &proxy.housekeeping_timer);
    proxy.housekeeping_timer.data = &proxy;
    uv_timer_start(&proxy.housekeeping_timer, on_housekeeping, HOUSEKEEPING_INTERVAL_MS, HOUSEKEEPING_INTERVAL_MS);
    proxy.housekeeping_started = true;
    probe_tiers(&proxy);
    for (size_t i = 0; i < proxy.namespace_count; i++) {
        unique_indexes_load(&proxy, &proxy.namespaces[i]); /* before the first write needs them */
    }

    uv_timer_init(proxy.loop, &proxy.wait_timer);
    proxy.wait_timer.data = &proxy;
    proxy.wait_timer_started = true;
    uv_async_init(proxy.loop, &proxy.progress_async, on_progress_async);
    proxy.progress_async.data = &proxy;
    proxy.progress_async_started = true;
    tier_progress_set_listener(proxy.progress, proxy_on_worker_progress, &proxy);
    proxy_start_polling(&proxy);
    if (proxy.namespace_count > 0) {
        /* Before the first client: the feeder, wherever it runs, starts no later. */
        bson_error_t start_error;
        if (!tier_feeder_ensure_start(proxy.config, &start_error)) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0,
                   "cannot record the feeder's start point in the fast tier (%s): writes accepted before the "
                   "feeder first runs would not reach the archive",
                   start_error.message);
        }
    }
    if (proxy.namespace_count > 0 && proxy.workers_here != 0) {
        /* This process's claim to its leases: no other process on this host can be
         * listening on this port, so a lease claimed so is a dead process's. */
        char claim[128];
        snprintf(claim, sizeof claim, "%s:%u", proxy.config->listen.host, (unsigned)server_port(proxy.server));
        proxy.workers = tier_workers_start(proxy.config, proxy.progress, proxy.workers_here, claim, error);
        TC_CHECK(proxy.workers != NULL);
    }

    char *archive_shown = config_uri_redacted(proxy.config->archive_uri);
    char *fast_shown = config_uri_redacted(proxy.config->fast_uri);
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                 "thermocline proxy on {address}:{port} (tlsMode {tlsMode}): archive {archive}, fast {fast}, "
                 "{namespaces} namespace(s) with a policy, authorization {authorization}",
                 TC_ATTR_STR("address", proxy.config->listen.host), TC_ATTR_INT("port", server_port(proxy.server)),
                 TC_ATTR_STR("tlsMode", tls_mode_name(proxy.config->tls_mode)), TC_ATTR_STR("archive", archive_shown),
                 TC_ATTR_STR("fast", fast_shown), TC_ATTR_INT("namespaces", proxy.namespace_count),
                 TC_ATTR_STR("authorization", proxy.config->authorization_enabled ? "enabled" : "disabled"));
    bson_free(archive_shown);
    bson_free(fast_shown);
    TC_CHECK(server_run(proxy.server, error));
    ok = true;
done:
    if (proxy.server != NULL && !ok) {
        on_loop_stopping(&proxy);
    }
    server_destroy(proxy.server);
    user_cache_destroy(proxy.users);
    tls_context_destroy(proxy.tls_context);
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        backend_pool_destroy(proxy.tiers[tier]);
    }
    cursor_map_destroy(proxy.cursors);
    bson_destroy(proxy.unpin_keys); /* none once the fast tier's pool has answered every call */
    cluster_time_cleanup(&proxy);
    tier_workers_stop(proxy.workers);
    tier_progress_destroy(proxy.progress);
    proxy_metrics_destroy(&proxy);
    proxy_reload_cleanup(&proxy);
    return ok;
}

static void print_usage(FILE *stream, const char *name)
{
    (void)name;
    fprintf(stream, "usage: thermocline proxy --config FILE [--verbose]\n"
                    "\n"
                    "Serves MongoDB clients in front of an archive and a fast tier, routing each\n"
                    "command to the tier that provably holds its complete answer. SIGHUP, or\n"
                    "db.adminCommand({thermoclineReload: 1}), reads FILE again and applies it\n"
                    "without dropping a client (README.md, Operating).\n"
                    "\n"
                    "  --config FILE   the YAML config (listen, archive, fast, namespaces...)\n"
                    "  --verbose       log every routing decision\n"
                    "  --log-format FORMAT  text (default) or json (mongod 4.4+'s structured lines;\n"
                    "                  logFormat: json in the config does the same)\n"
                    "  --help          this text\n");
}

int proxy_main(int argc, char **argv)
{
    config_arguments_t arguments;
    bson_error_t error;
    int usage_status = config_arguments_parse(argc, argv, print_usage, &arguments);
    if (usage_status >= 0) {
        return usage_status;
    }
    if (arguments.verbose) {
        tc_log_set_level(TC_LOG_DEBUG);
    }
    if (!proxy_run(arguments.config_path, &error)) {
        tc_log_failure("thermocline proxy", error.message);
        return 1;
    }
    return 0;
}
