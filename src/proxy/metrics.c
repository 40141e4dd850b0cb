/* The proxy's Prometheus metrics (metricsListen): served on the proxy's own loop
 * (src/metrics/http.h), so a scrape reads the loop's state without locks and
 * sees one instant of it. Most numbers are thermoclineStatus's, taken from the
 * document proxy_append_status() builds (nothing is counted twice); what the
 * status lacks is counted here: requests by namespace, route and reason, their
 * latency per route, the error codes of the replies, and the fast-tier writes the
 * feeder has not applied yet (its lag in documents). */
#include "proxy/proxy_private.h"
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "metrics/exposition.h"
#include "metrics/http.h"
#include "wire/wire.h"

#include <string.h>

#define ERROR_CODES_KEPT 64
#define PENDING_WRITES_KEPT 4096
#define FIELD_COUNT(fields) (sizeof(fields) / sizeof((fields)[0]))
#define NO_NAMESPACE_LABEL "(none)"

/* Fast-tier writes acknowledged through this proxy and not yet applied by the
 * feeder: their operationTime and documents, oldest first (a ring). Past
 * PENDING_WRITES_KEPT entries a write joins the newest, which then leaves with the
 * later time: the count stays whole, only released a little late. */
typedef struct pending_write {
    uint64_t time;
    uint64_t documents;
} pending_write_t;

typedef struct namespace_metrics {
    uint64_t requests[PLAN_ROUTE_PROXY + 1][PLAN_REASON_MALFORMED + 1];
    metrics_histogram_t latency[PLAN_ROUTE_PROXY + 1];
    pending_write_t pending[PENDING_WRITES_KEPT];
    size_t pending_head;
    size_t pending_count;
    uint64_t pending_documents;
} namespace_metrics_t;

typedef struct error_count {
    int32_t code;
    uint64_t count;
} error_count_t;

struct proxy_metrics {
    metrics_http_t *http;
    /* namespace_count + 1: the last holds requests of no tiered namespace. */
    namespace_metrics_t *namespaces;
    error_count_t errors[ERROR_CODES_KEPT];
    size_t error_code_count;
    uint64_t errors_of_other_codes; /* past ERROR_CODES_KEPT distinct codes */
};

/* --- counting ------------------------------------------------------------------------ */

/* state's slot in the current table (namespace_count: no tiered namespace); a
 * state of a table a reload replaced (its request arrived before) is found by name. */
static size_t namespace_slot(const proxy_t *proxy, const namespace_state_t *state)
{
    if (state == NULL) {
        return proxy->namespace_count;
    }
    size_t index = state->config->index;
    if (index < proxy->namespace_count && state == &proxy->namespaces[index]) {
        return index;
    }
    const config_namespace_t *current = config_find_namespace(proxy->config, state->config->ns);
    return current != NULL ? current->index : proxy->namespace_count;
}

void proxy_metrics_namespaces_changed(proxy_t *proxy, const proxy_generation_t *previous)
{
    if (proxy->metrics == NULL) {
        return;
    }
    namespace_metrics_t *kept = proxy->metrics->namespaces;
    namespace_metrics_t *slots = bson_malloc0((proxy->namespace_count + 1) * sizeof *slots);
    for (size_t i = 0; i <= previous->namespace_count; i++) {
        size_t slot = i < previous->namespace_count ? namespace_slot(proxy, &previous->namespaces[i])
                                                    : proxy->namespace_count;
        if (i == previous->namespace_count || slot < proxy->namespace_count) { /* a removed one's are dropped */
            slots[slot] = kept[i];
        }
    }
    proxy->metrics->namespaces = slots;
    bson_free(kept);
}

void proxy_metrics_request_finished(proxy_request_t *request)
{
    proxy_metrics_t *metrics = request->proxy->metrics;
    if (metrics == NULL || !request->has_decision) {
        return; /* not planned: closed on a bad message, or answered by access.c */
    }
    size_t index = namespace_slot(request->proxy, request->namespace_state);
    namespace_metrics_t *item = &metrics->namespaces[index];
    plan_route_t route = request->decision.route;
    item->requests[route][request->decision.reason]++;
    metrics_histogram_observe(&item->latency[route], (double)(uv_hrtime() - request->arrived_ns) / 1e9);
}

/* The documents a write reply says changed: an update's nModified and upserts,
 * findAndModify's lastErrorObject.n, else n (inserts, deletes). */
static uint64_t documents_written(const bson_t *reply)
{
    double count = 0, modified;
    bson_iter_t iter;
    if (metrics_document_number(reply, "nModified", &modified)) {
        bson_t upserted;
        if (bson_iter_init_find(&iter, reply, "upserted") && bson_view_of(&iter, &upserted)) {
            modified += bson_count_keys(&upserted);
        }
        return (uint64_t)modified;
    }
    if (!metrics_document_number(reply, "lastErrorObject.n", &count)) {
        metrics_document_number(reply, "n", &count);
    }
    return count > 0 ? (uint64_t)count : 0;
}

/* Drops what the feeder has applied (its time at most applied_time). */
static void release_applied(namespace_metrics_t *item, uint64_t applied_time)
{
    while (item->pending_count > 0 && item->pending[item->pending_head].time <= applied_time) {
        item->pending_documents -= item->pending[item->pending_head].documents;
        item->pending_head = (item->pending_head + 1) % PENDING_WRITES_KEPT;
        item->pending_count--;
    }
}

void proxy_metrics_fast_write(proxy_t *proxy, const namespace_state_t *state, uint64_t time, const bson_t *reply)
{
    if (proxy->metrics == NULL) {
        return;
    }
    size_t index = namespace_slot(proxy, state);
    if (index == proxy->namespace_count) {
        return; /* a write acknowledged after its namespace was removed: the feeder no longer tracks it */
    }
    namespace_metrics_t *item = &proxy->metrics->namespaces[index];
    uint64_t documents = documents_written(reply);
    release_applied(item, state->progress.applied_time);
    if (documents == 0) {
        return;
    }
    item->pending_documents += documents;
    if (item->pending_count == PENDING_WRITES_KEPT) {
        pending_write_t *newest = &item->pending[(item->pending_head + item->pending_count - 1) % PENDING_WRITES_KEPT];
        newest->time = time > newest->time ? time : newest->time;
        newest->documents += documents;
        return;
    }
    item->pending[(item->pending_head + item->pending_count) % PENDING_WRITES_KEPT] =
        (pending_write_t){.time = time, .documents = documents};
    item->pending_count++;
}

static void write_lag_events(proxy_t *proxy, bson_string_t *out)
{
    const char *name = "thermocline_feeder_lag_events";
    metrics_write_family(out, name, METRICS_GAUGE,
                         "documents written through this proxy that the fast tier acknowledged and the feeder has "
                         "not applied to the archive yet (the replies' counts; outside transactions)");
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_metrics_t *item = &proxy->metrics->namespaces[i];
        release_applied(item, proxy->namespaces[i].progress.applied_time);
        metrics_write_sample(out, name, METRICS_LABELS({"namespace", proxy->namespaces[i].config->ns}),
                             (double)item->pending_documents);
    }
}

static void count_error(proxy_metrics_t *metrics, int32_t code)
{
    for (size_t i = 0; i < metrics->error_code_count; i++) {
        if (metrics->errors[i].code == code) {
            metrics->errors[i].count++;
            return;
        }
    }
    if (metrics->error_code_count == ERROR_CODES_KEPT) {
        metrics->errors_of_other_codes++;
        return;
    }
    metrics->errors[metrics->error_code_count++] = (error_count_t){.code = code, .count = 1};
}

/* The top-level fields only: ok, code, and writeErrors' codes. */
void proxy_metrics_reply(proxy_t *proxy, const uint8_t *reply, size_t length)
{
    bson_t body;
    bson_error_t error;
    bson_iter_t iter, item;
    if (proxy->metrics == NULL || wire_message_opcode(reply) != WIRE_OP_MSG ||
        !wire_op_msg_peek_body(reply, length, &body, &error) || !bson_iter_init(&iter, &body)) {
        return;
    }
    bool failed = false;
    int32_t code = 0;
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "ok") == 0) {
            failed = bson_iter_as_double(&iter) != 1.0;
        } else if (strcmp(key, "code") == 0 && BSON_ITER_HOLDS_NUMBER(&iter)) {
            code = (int32_t)bson_iter_as_int64(&iter);
        } else if (strcmp(key, "writeErrors") == 0 && BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &item)) {
            while (bson_iter_next(&item)) {
                bson_iter_t write_code;
                if (BSON_ITER_HOLDS_DOCUMENT(&item) && bson_iter_recurse(&item, &write_code) &&
                    bson_iter_find(&write_code, "code") && BSON_ITER_HOLDS_NUMBER(&write_code)) {
                    count_error(proxy->metrics, (int32_t)bson_iter_as_int64(&write_code));
                }
            }
        }
    }
    if (failed) {
        count_error(proxy->metrics, code);
    }
}

/* --- rendering ------------------------------------------------------------------------ */

static const char *namespace_label(const proxy_t *proxy, size_t index)
{
    return index < proxy->namespace_count ? proxy->namespaces[index].config->ns : NO_NAMESPACE_LABEL;
}

static void write_requests(proxy_t *proxy, bson_string_t *out)
{
    const char *counter = "thermocline_proxy_requests_total";
    const char *histogram = "thermocline_proxy_request_duration_seconds";
    metrics_write_family(out, counter, METRICS_COUNTER,
                         "client commands answered, by namespace (" NO_NAMESPACE_LABEL
                         ": no tiered one), route and the planner's reason");
    for (size_t index = 0; index <= proxy->namespace_count; index++) {
        const namespace_metrics_t *item = &proxy->metrics->namespaces[index];
        for (int route = 0; route <= PLAN_ROUTE_PROXY; route++) {
            for (int reason = 0; reason <= PLAN_REASON_MALFORMED; reason++) {
                if (item->requests[route][reason] > 0) {
                    metrics_write_sample(out, counter,
                                         METRICS_LABELS({"namespace", namespace_label(proxy, index)},
                                                        {"route", plan_route_name((plan_route_t)route)},
                                                        {"reason", plan_reason_name((plan_reason_t)reason)}),
                                         (double)item->requests[route][reason]);
                }
            }
        }
    }
    metrics_write_family(out, histogram, METRICS_HISTOGRAM,
                         "time from a command's arrival to its reply, by namespace and route");
    for (size_t index = 0; index <= proxy->namespace_count; index++) {
        const namespace_metrics_t *item = &proxy->metrics->namespaces[index];
        for (int route = 0; route <= PLAN_ROUTE_PROXY; route++) {
            if (item->latency[route].count > 0) {
                metrics_write_histogram(out, histogram,
                                        METRICS_LABELS({"namespace", namespace_label(proxy, index)},
                                                       {"route", plan_route_name((plan_route_t)route)}),
                                        &item->latency[route]);
            }
        }
    }
}

static void write_errors(proxy_metrics_t *metrics, bson_string_t *out)
{
    const char *name = "thermocline_proxy_errors_total";
    char code[16];
    metrics_write_family(out, name, METRICS_COUNTER,
                         "error replies to clients (ok: 0, and each writeErrors entry), by MongoDB error code "
                         "(other: past 64 distinct codes)");
    for (size_t i = 0; i < metrics->error_code_count; i++) {
        snprintf(code, sizeof code, "%d", metrics->errors[i].code);
        metrics_write_sample(out, name, METRICS_LABELS({"code", code}), (double)metrics->errors[i].count);
    }
    if (metrics->errors_of_other_codes > 0) {
        metrics_write_sample(out, name, METRICS_LABELS({"code", "other"}), (double)metrics->errors_of_other_codes);
    }
}

static const metrics_field_t coverage_fields[] = {
    {"thermocline_coverage_valid", METRICS_GAUGE, "valid", 1,
     "1 once the fast tier holds the namespace's whole window (reads may go there)"},
    {"thermocline_coverage_horizon_seconds", METRICS_GAUGE, "horizonMillis", 0.001,
     "the coverage horizon (Unix time): the fast tier holds every document newer; absent while not valid"},
};

/* The coverage the planner uses now (proxy_coverage), one document per namespace. */
static void write_coverage(proxy_t *proxy, bson_string_t *out)
{
    metrics_source_t *sources = bson_malloc0((proxy->namespace_count + 1) * sizeof *sources);
    bson_t *documents = bson_malloc0((proxy->namespace_count + 1) * sizeof *documents);
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        plan_coverage_t coverage = proxy_coverage(proxy, &proxy->namespaces[i]);
        bson_init(&documents[i]);
        BSON_APPEND_BOOL(&documents[i], "valid", coverage.valid);
        if (coverage.valid) {
            BSON_APPEND_INT64(&documents[i], "horizonMillis", coverage.horizon_ms);
        }
        sources[i] = (metrics_source_t){&documents[i], {{"namespace", proxy->namespaces[i].config->ns}}, 1};
    }
    metrics_write_fields(out, coverage_fields, FIELD_COUNT(coverage_fields), sources, proxy->namespace_count);
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        bson_destroy(&documents[i]);
    }
    bson_free(sources);
    bson_free(documents);
}

static const metrics_field_t proxy_fields[] = {
    {"thermocline_proxy_client_connections", METRICS_GAUGE, "connections.current", 1,
     "client connections open now"},
    {"thermocline_proxy_client_connections_available", METRICS_GAUGE, "connections.available", 1,
     "client connections that may still open (maxConnections)"},
    {"thermocline_proxy_client_connections_created_total", METRICS_COUNTER, "connections.totalCreated", 1,
     "client connections accepted since start"},
    {"thermocline_proxy_client_connections_timed_out_total", METRICS_COUNTER, "connections.timedOut", 1,
     "client connections closed by idleTimeout, receiveTimeout or sendTimeout"},
    {"thermocline_proxy_requests_failed_total", METRICS_COUNTER, "requestsFailed", 1,
     "commands answered with a tier-unreachable error"},
    {"thermocline_proxy_requests_retried_total", METRICS_COUNTER, "requestsRetried", 1,
     "commands sent to a tier a second time (retryable reads and writes)"},
    {"thermocline_proxy_cursors", METRICS_GAUGE, "cursors", 1, "cursors the proxy maps to a tier's"},
    {"thermocline_proxy_reads_waiting_for_feeder", METRICS_GAUGE, "readsWaitingForFeeder", 1,
     "archive reads waiting for the feeder now (read-your-writes)"},
    {"thermocline_feeder_lag_seconds", METRICS_GAUGE, "workers.feeder.lagMillis", 0.001,
     "age of the oldest fast-tier event the feeder has not applied (0: caught up)"},
    {"thermocline_feeder_events_applied_total", METRICS_COUNTER, "workers.feeder.eventsApplied", 1,
     "change events replayed in the archive"},
    {"thermocline_feeder_events_suppressed_total", METRICS_COUNTER, "workers.feeder.eventsSuppressed", 1,
     "the evictor's deletes and the warmer's copies the feeder skipped"},
    {"thermocline_feeder_archive_writes_total", METRICS_COUNTER, "workers.feeder.archiveWrites", 1,
     "write operations sent to the archive after coalescing (events applied / this = the coalescing ratio)"},
    {"thermocline_feeder_batches_total", METRICS_COUNTER, "workers.feeder.batches", 1, "batches replayed"},
    {"thermocline_feeder_retries_total", METRICS_COUNTER, "workers.feeder.retries", 1,
     "failed replays retried with backoff"},
    {"thermocline_feeder_archive_reachable", METRICS_GAUGE, "workers.feeder.archiveReachable", 1,
     "1 while the feeder reaches the archive"},
};

static const metrics_field_t namespace_fields[] = {
    {"thermocline_fault_ins_total", METRICS_COUNTER, "faultedIn", 1,
     "archive documents copied into the fast tier before a write that touches them"},
    {"thermocline_point_reads_from_archive_total", METRICS_COUNTER, "pointReadsFromArchive", 1,
     "finds by _id sent on to the archive for ids the fast tier lacked (of the fast-then-archive route's)"},
    {"thermocline_reads_waited_for_feeder_total", METRICS_COUNTER, "readsWaitedForFeeder", 1,
     "archive reads held until the feeder applied the writes before them"},
    {"thermocline_reads_failed_waiting_for_feeder_total", METRICS_COUNTER, "readsFailedWaitingForFeeder", 1,
     "archive reads failed after readYourWritesWait"},
    {"thermocline_feeder_refused_writes", METRICS_GAUGE, "feeder.refusals.count", 1,
     "writes the archive refused (and those queued behind them), standing"},
    {"thermocline_warmer_copied_documents_total", METRICS_COUNTER, "warmer.copied", 1,
     "documents the warmer copied into the fast tier (this pass: it restarts at 0 with each pass)"},
    {"thermocline_warmer_remaining_documents", METRICS_GAUGE, "warmer.remainingEstimate", 1,
     "the warmer's estimate of the documents its pass has left"},
    {"thermocline_warmer_docs_per_second", METRICS_GAUGE, "warmer.docsPerSecond", 1,
     "the warmer's pace over its last 5 s, while a pass runs"},
    {"thermocline_warmer_eta_seconds", METRICS_GAUGE, "warmer.etaSeconds", 1,
     "the time the warmer's pass has left at that pace"},
    {"thermocline_evictor_evicted_documents_total", METRICS_COUNTER, "evictor.evicted", 1,
     "documents the evictor deleted from the fast tier"},
    {"thermocline_evictor_kept_changed_total", METRICS_COUNTER, "evictor.keptChanged", 1,
     "eviction candidates kept because they changed under the evictor"},
    {"thermocline_evictor_kept_refused_total", METRICS_COUNTER, "evictor.keptRefused", 1,
     "eviction candidates kept because a refused write of theirs stands"},
    {"thermocline_evictor_kept_pinned_total", METRICS_COUNTER, "evictor.keptPinned", 1,
     "eviction candidates kept because a write through another process pinned them"},
    {"thermocline_evictor_kept_unsettled_total", METRICS_COUNTER, "evictor.keptUnsettled", 1,
     "eviction candidates kept because their last eviction's range is not written yet"},
};

static const metrics_field_t pool_fields[] = {
    {"thermocline_pool_connections", METRICS_GAUGE, "connections", 1,
     "connections open or opening to the tier's member"},
    {"thermocline_pool_busy_connections", METRICS_GAUGE, "busy", 1, "of them, carrying a request"},
    {"thermocline_pool_queued_requests", METRICS_GAUGE, "queued", 1, "requests waiting for a connection now"},
    {"thermocline_pool_in_flight_limit", METRICS_GAUGE, "inFlightLimit", 1,
     "requests sent to the member at once at most (the archive's narrows while the feeder lags)"},
    {"thermocline_pool_waits_total", METRICS_COUNTER, "waits", 1,
     "requests that had to wait for a connection"},
    {"thermocline_pool_requests_total", METRICS_COUNTER, "requests", 1, "requests sent"},
    {"thermocline_pool_network_errors_total", METRICS_COUNTER, "networkErrors", 1,
     "requests failed by a network error"},
    {"thermocline_pool_reachable", METRICS_GAUGE, "reachable", 1, "1 once the tier's primary answered"},
};

#define POOL_SOURCES_MAX 32

/* The tiers' pools: the primary's (member "primary"), then each secondary's. */
static void write_pools(const bson_t *status, bson_string_t *out)
{
    metrics_source_t sources[POOL_SOURCES_MAX];
    bson_t documents[POOL_SOURCES_MAX];
    size_t count = 0;
    bson_iter_t tiers, tier, members, member;
    if (bson_iter_init_find(&tiers, status, "backends") && bson_iter_recurse(&tiers, &tier)) {
        while (bson_iter_next(&tier) && count < POOL_SOURCES_MAX && BSON_ITER_HOLDS_DOCUMENT(&tier)) {
            const char *tier_name = bson_iter_key(&tier);
            bson_iter_t inside;
            if (!bson_view_of(&tier, &documents[count])) {
                continue;
            }
            sources[count] = (metrics_source_t){&documents[count], {{"tier", tier_name}, {"member", "primary"}}, 2};
            count++;
            if (!bson_iter_recurse(&tier, &inside) || !bson_iter_find(&inside, "members") ||
                !bson_iter_recurse(&inside, &members)) {
                continue;
            }
            while (bson_iter_next(&members) && count < POOL_SOURCES_MAX) {
                bson_iter_t address;
                if (!bson_view_of(&members, &documents[count]) || !bson_iter_recurse(&members, &member) ||
                    !bson_iter_find(&member, "connections") ||
                    !bson_iter_init_find(&address, &documents[count], "address")) {
                    continue; /* the primary, counted above, or a member without a pool yet */
                }
                sources[count] = (metrics_source_t){
                    &documents[count], {{"tier", tier_name}, {"member", bson_iter_utf8(&address, NULL)}}, 2};
                count++;
            }
        }
    }
    metrics_write_fields(out, pool_fields, FIELD_COUNT(pool_fields), sources, count);
}

static bool render(void *context, bson_string_t *out, bson_error_t *error)
{
    proxy_t *proxy = context;
    bson_t status = BSON_INITIALIZER;
    (void)error;
    proxy_append_status(proxy, &status);

    metrics_source_t whole = {.document = &status};
    metrics_write_fields(out, proxy_fields, FIELD_COUNT(proxy_fields), &whole, 1);
    metrics_write_family(out, "thermocline_feeder_coalescing_ratio", METRICS_GAUGE,
                         "change events applied per archive write (the feeder's coalescing)");
    double applied, writes;
    if (metrics_document_number(&status, "workers.feeder.eventsApplied", &applied) &&
        metrics_document_number(&status, "workers.feeder.archiveWrites", &writes) && writes > 0) {
        metrics_write_sample(out, "thermocline_feeder_coalescing_ratio", METRICS_NO_LABELS, applied / writes);
    }

    metrics_source_t *sources = bson_malloc0((proxy->namespace_count + 1) * sizeof *sources);
    bson_t *documents = bson_malloc0((proxy->namespace_count + 1) * sizeof *documents);
    bson_iter_t namespaces, item;
    size_t count = 0;
    if (bson_iter_init_find(&namespaces, &status, "namespaces") && bson_iter_recurse(&namespaces, &item)) {
        while (bson_iter_next(&item) && count < proxy->namespace_count) {
            if (!bson_view_of(&item, &documents[count])) {
                continue;
            }
            sources[count] = (metrics_source_t){&documents[count], {{"namespace", bson_iter_key(&item)}}, 1};
            count++;
        }
    }
    metrics_write_fields(out, namespace_fields, FIELD_COUNT(namespace_fields), sources, count);
    bson_free(sources);
    bson_free(documents);

    write_coverage(proxy, out);
    write_lag_events(proxy, out);
    write_pools(&status, out);
    write_requests(proxy, out);
    write_errors(proxy->metrics, out);
    bson_destroy(&status);
    return true;
}

/* --- start and stop -------------------------------------------------------------------- */

bool proxy_metrics_start(proxy_t *proxy, bson_error_t *error)
{
    if (proxy->config->metrics_listen.host == NULL) {
        return true;
    }
    proxy->metrics = bson_malloc0(sizeof *proxy->metrics);
    proxy->metrics->namespaces = bson_malloc0((proxy->namespace_count + 1) * sizeof(namespace_metrics_t));
    proxy->metrics->http = metrics_http_new(proxy->loop, proxy->config->metrics_listen.host,
                                            proxy->config->metrics_listen.port, render, proxy, error);
    return proxy->metrics->http != NULL;
}

void proxy_metrics_stop(proxy_t *proxy)
{
    if (proxy->metrics != NULL) {
        metrics_http_close(proxy->metrics->http);
        proxy->metrics->http = NULL;
    }
}

void proxy_metrics_destroy(proxy_t *proxy)
{
    if (proxy->metrics != NULL) {
        bson_free(proxy->metrics->namespaces);
        bson_free(proxy->metrics);
        proxy->metrics = NULL;
    }
}
