/* Live reload: SIGHUP or thermoclineReload reads the config file again and
 * applies it without closing a client connection, all or nothing
 * (reload_changes.c says what may change live).
 *
 *   loop: SIGHUP / thermoclineReload ─▶ thread: load the file, compare, preflight,
 *         read the TLS files ─▶ loop: refused? answer; the running config stays
 *   loop: limits, timeouts, TLS and log format in place; a new generation (the
 *         config, and a namespace table keeping the counters of the namespaces
 *         that stay) routes every request from now on
 *   when namespaces or the workers' settings change, the workers still run on
 *   the previous config (an added namespace stays untiered meanwhile) until,
 *   when a namespace is removed, the requests that arrived before the reload are
 *     done (their fast-tier writes acknowledged) and the feeder applied every
 *     acknowledged write of the removed namespaces (once they route to the
 *     archive it would never replay them; checked every DRAIN_POLL_MS, at most
 *     readYourWritesWait, then logged and said in the reply)
 *   ─▶ thread: tier_workers_stop ─▶ loop: a new progress, the workers started on
 *      the new config; answer and log
 *
 * Every blocking step (the file, the archive's preflight, OpenSSL reading PEM
 * files, joining the worker threads) runs on libuv's thread pool. A replaced
 * generation is freed once none of its requests, none of its unique-index reads
 * and no worker uses it; a replaced progress once its last pin is gone. */
#include "proxy/proxy_private.h"

#include "common/log.h"

#include <signal.h>
#include <string.h>

#define LOG_COMPONENT "CONTROL"
#define DRAIN_POLL_MS 20

typedef struct retired_progress {
    tier_progress_t *progress;
    struct retired_progress *next;
} retired_progress_t;

struct proxy_reload {
    proxy_t *proxy;
    retired_progress_t *retired_progress; /* replaced, with pins left */
    uv_signal_t hangup;
    bool hangup_started;
    uv_timer_t drain_timer;
    bool drain_timer_started;
    int64_t drain_deadline_ms;
    uv_work_t work;
    bool busy;     /* one reload at a time */
    bool stopping; /* the loop stops: a reload under way is dropped */
    reload_fn done;
    void *context;
    /* Filled on the thread pool, read on the loop after. */
    config_t *config;
    tls_context_t *tls_context;
    reload_plan_t plan;
    bool compared;
    bson_error_t error;
    bool failed;
    char *not_drained;            /* the warning when the workers restarted before a removed namespace drained */
    tier_workers_t *stopping_workers;
};

/* --- generations ------------------------------------------------------------------ */

static bool generation_in_use(const proxy_t *proxy, const proxy_generation_t *generation)
{
    if (generation->requests > 0 || generation->config == proxy->workers_config) {
        return true;
    }
    for (size_t i = 0; i < generation->namespace_count; i++) {
        if (generation->namespaces[i].indexes_loading || generation->namespaces[i].index_waiters != NULL) {
            return true;
        }
    }
    return false;
}

static void generation_destroy(proxy_generation_t *generation)
{
    for (size_t i = 0; i < generation->namespace_count; i++) {
        bson_destroy(&generation->namespaces[i].unique_indexes);
    }
    bson_free(generation->namespaces);
    config_destroy(generation->config);
    bson_free(generation);
}

proxy_generation_t *proxy_generation_new(config_t *config, const proxy_generation_t *previous)
{
    proxy_generation_t *generation = bson_malloc0(sizeof *generation);
    generation->config = config;
    generation->namespace_count = config->namespace_count;
    generation->namespaces = bson_malloc0((config->namespace_count + 1) * sizeof(namespace_state_t));
    for (size_t i = 0; i < config->namespace_count; i++) {
        namespace_state_t *state = &generation->namespaces[i];
        const namespace_state_t *kept = NULL;
        for (size_t j = 0; previous != NULL && j < previous->namespace_count; j++) {
            if (strcmp(previous->namespaces[j].config->ns, config->namespaces[i].ns) == 0) {
                kept = &previous->namespaces[j];
            }
        }
        if (kept != NULL) { /* its counters, read-your-writes times and unique indexes go on */
            memcpy(state->route_counts, kept->route_counts, sizeof state->route_counts);
            memcpy(state->reason_counts, kept->reason_counts, sizeof state->reason_counts);
            state->fault_ins = kept->fault_ins;
            state->point_reads_from_archive = kept->point_reads_from_archive;
            state->last_write_time = kept->last_write_time;
            state->last_delete_time = kept->last_delete_time;
            state->peers_delete_time = kept->peers_delete_time;
            state->progress = kept->progress;
            state->reads_waited = kept->reads_waited;
            state->reads_wait_failed = kept->reads_wait_failed;
            state->indexes_known = kept->indexes_known;
            state->indexes_loaded_ms = kept->indexes_loaded_ms;
        } else {
            state->progress.warm_remaining = -1;
            state->awaiting_workers = previous != NULL;
        }
        state->config = &config->namespaces[i];
        state->policy.time_field = config->namespaces[i].time_field;
        if (kept != NULL) {
            bson_copy_to(&kept->unique_indexes, &state->unique_indexes);
        } else {
            bson_init(&state->unique_indexes);
        }
        state->policy.unique_indexes = state->indexes_known ? &state->unique_indexes : NULL;
    }
    return generation;
}

proxy_generation_t *proxy_generation_acquire(proxy_t *proxy)
{
    proxy->generation->requests++;
    return proxy->generation;
}

/* Frees the retired generations nothing uses any more. */
static void sweep_retired(proxy_t *proxy)
{
    proxy_generation_t **link = &proxy->retired;
    while (*link != NULL) {
        proxy_generation_t *generation = *link;
        if (generation_in_use(proxy, generation)) {
            link = &generation->next_retired;
            continue;
        }
        *link = generation->next_retired;
        generation_destroy(generation);
    }
}

void proxy_generation_release(proxy_t *proxy, proxy_generation_t *generation)
{
    generation->requests--;
    if (generation != proxy->generation && generation->requests == 0) {
        sweep_retired(proxy);
    }
}

void proxy_reload_sweep(proxy_t *proxy)
{
    sweep_retired(proxy);
    retired_progress_t **link = &proxy->reload->retired_progress;
    while (*link != NULL) {
        retired_progress_t *item = *link;
        if (tier_progress_pin_count(item->progress) > 0) {
            link = &item->next;
            continue;
        }
        *link = item->next;
        tier_progress_destroy(item->progress);
        bson_free(item);
    }
}

/* Makes generation current; the one it replaces waits in the retired list. */
static void swap_generation(proxy_t *proxy, proxy_generation_t *generation)
{
    generation->next_retired = NULL;
    proxy->generation->next_retired = proxy->retired;
    proxy->retired = proxy->generation;
    proxy->generation = generation;
    proxy->config = generation->config;
    proxy->namespaces = generation->namespaces;
    proxy->namespace_count = generation->namespace_count;
    proxy_metrics_namespaces_changed(proxy, proxy->retired);
    sweep_retired(proxy);
}

/* --- the steps -------------------------------------------------------------------------- */

static void finish(struct proxy_reload *reload, const bson_error_t *error)
{
    proxy_t *proxy = reload->proxy;
    bson_t reply = BSON_INITIALIZER;
    if (error != NULL) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "config reload refused, the running config stays: {error}",
                     TC_ATTR_STR("error", error->message));
    } else {
        BSON_APPEND_UTF8(&reply, "config", proxy->config_path);
        BSON_APPEND_ARRAY(&reply, "changed", &reload->plan.changed);
        BSON_APPEND_BOOL(&reply, "workersRestarted", reload->plan.restart_workers);
        if (reload->not_drained != NULL) {
            BSON_APPEND_UTF8(&reply, "warning", reload->not_drained);
        }
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "config reloaded from {config}: {changed}",
                     TC_ATTR_STR("config", proxy->config_path), TC_ATTR_DOC("changed", &reload->plan.changed));
    }
    if (reload->compared) {
        reload_plan_cleanup(&reload->plan);
        reload->compared = false;
    }
    config_destroy(reload->config);
    reload->config = NULL;
    tls_context_destroy(reload->tls_context);
    reload->tls_context = NULL;
    bson_free(reload->not_drained);
    reload->not_drained = NULL;
    reload->busy = false;
    reload_fn done = reload->done;
    reload->done = NULL;
    if (done != NULL) {
        done(reload->context, &reply, error);
    }
    bson_destroy(&reply);
}

/* On the thread pool: reads nothing the loop changes (the running config is
 * replaced only by this reload, later, on the loop). */
static void load_and_compare(uv_work_t *work)
{
    struct proxy_reload *reload = work->data;
    proxy_t *proxy = reload->proxy;
    reload->config = config_load_file(proxy->config_path, &reload->error);
    if (reload->config == NULL) {
        reload->failed = true;
        return;
    }
    reload_plan_compare(proxy->config, reload->config, &reload->plan);
    reload->compared = true;
    if (!bson_empty(&reload->plan.refused)) {
        bson_string_t *text = bson_string_new(NULL);
        bson_iter_t iter;
        bson_iter_init(&iter, &reload->plan.refused);
        while (bson_iter_next(&iter)) {
            bson_string_append_printf(text, "%s%s", text->len > 0 ? "; " : "", bson_iter_utf8(&iter, NULL));
        }
        tc_error_set(&reload->error, TC_ERR_ILLEGAL_OPERATION, "%s: cannot change while the proxy runs: %s",
                     proxy->config_path, text->str);
        bson_string_free(text, true);
        reload->failed = true;
        return;
    }
    if (reload->plan.restart_workers && !tier_preflight(reload->config, &reload->error)) {
        reload->failed = true;
        return;
    }
    if (reload->plan.restart_workers && reload->config->namespace_count > 0) {
        bson_error_t start_error;
        if (!tier_feeder_ensure_start(reload->config, &start_error)) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot record the feeder's start point: %s",
                   start_error.message);
        }
    }
    if (reload->plan.reload_tls) {
        tls_server_options_t options = {
            .certificate_key_file = reload->config->tls_certificate_key_file,
            .ca_file = reload->config->tls_ca_file,
            .allow_connections_without_certificates = reload->config->tls_allow_connections_without_certificates,
        };
        reload->tls_context = tls_context_new_server(&options, &reload->error);
        reload->failed = reload->tls_context == NULL;
    }
}

static void stop_workers(uv_work_t *work)
{
    struct proxy_reload *reload = work->data;
    tier_workers_stop(reload->stopping_workers);
    reload->stopping_workers = NULL;
}

/* On the loop, the reload accepted: what changes in place, then the generation. */
static void apply_in_place(struct proxy_reload *reload)
{
    proxy_t *proxy = reload->proxy;
    const config_t *config = reload->config;
    bson_error_t error;
    server_limits_t limits = {
        .max_connections = (int)config->max_connections,
        .idle_timeout_ms = (uint32_t)config->idle_timeout_ms,
        .receive_timeout_ms = (uint32_t)config->receive_timeout_ms,
        .send_timeout_ms = (uint32_t)config->send_timeout_ms,
        .tls_mode = config->tls_mode,
        .tls_context = reload->tls_context,
    };
    if (server_update_limits(proxy->server, &limits, &error)) {
        tls_context_destroy(proxy->tls_context); /* open sessions hold their own reference */
        proxy->tls_context = reload->tls_context;
        reload->tls_context = NULL;
    } else {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "the client limits stay as they were: %s", error.message);
    }
    if (config->log_format != proxy->config->log_format) {
        tc_log_set_format(config->log_format);
    }
}

static void start_workers(proxy_t *proxy)
{
    const config_t *config = proxy->config;
    proxy->workers_here = (config->feeder_enabled ? TIER_RUN_FEEDER : 0) |
                          (config->evictor_enabled ? TIER_RUN_EVICTOR : 0) |
                          (config->warmer_enabled ? TIER_RUN_WARMER : 0);
    if (config->namespace_count == 0 || proxy->workers_here == 0) {
        return;
    }
    char claim[128];
    bson_error_t error;
    snprintf(claim, sizeof claim, "%s:%u", config->listen.host, (unsigned)server_port(proxy->server));
    proxy->workers = tier_workers_start(config, proxy->progress, proxy->workers_here, claim, &error);
    if (proxy->workers == NULL) {
        TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, 0, "the tier workers did not start again after the reload: %s",
               error.message);
        return;
    }
}

/* The workers stopped: a new progress, sized for the new namespaces, and the
 * workers again on the current config. */
static void after_stop_workers(uv_work_t *work, int status)
{
    struct proxy_reload *reload = work->data;
    proxy_t *proxy = reload->proxy;
    (void)status;
    tier_progress_set_listener(proxy->progress, NULL, NULL);
    retired_progress_t *retired = bson_malloc0(sizeof *retired);
    retired->progress = proxy->progress; /* requests may still hold pins there */
    retired->next = reload->retired_progress;
    reload->retired_progress = retired;
    proxy->progress = tier_progress_new(proxy->namespace_count);
    proxy->workers_config = proxy->config;
    tier_progress_set_listener(proxy->progress, proxy_on_worker_progress, proxy);
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        proxy->namespaces[i].awaiting_workers = false; /* the feeder that starts now replays their writes */
    }
    if (!reload->stopping) {
        start_workers(proxy);
        proxy_start_polling(proxy);
    }
    proxy_reload_sweep(proxy);
    finish(reload, NULL);
}

/* A namespace a replaced generation tiers and the current does not, whose
 * acknowledged fast-tier writes the feeder has not applied yet. */
static const char *namespace_not_drained(struct proxy_reload *reload)
{
    proxy_t *proxy = reload->proxy;
    for (const proxy_generation_t *replaced = proxy->retired; replaced != NULL; replaced = replaced->next_retired) {
        for (size_t i = 0; i < replaced->namespace_count; i++) {
            const namespace_state_t *state = &replaced->namespaces[i];
            size_t slot = proxy_progress_slot(proxy, state);
            if (proxy_find_namespace(proxy, state->config->ns) != NULL || slot == SIZE_MAX) {
                continue; /* still tiered, or unknown to the workers: nothing of it was fed */
            }
            tier_namespace_progress_t progress;
            tier_progress_namespace(proxy->progress, slot, &progress);
            if (progress.applied_time < state->last_write_time) {
                return state->config->ns;
            }
        }
    }
    return NULL;
}

/* Requests that arrived before this reload (thermoclineReload's own among them,
 * answered at the end): they may still write a removed namespace in the fast tier. */
static bool requests_before_reload(struct proxy_reload *reload)
{
    uint64_t count = 0;
    for (const proxy_generation_t *replaced = reload->proxy->retired; replaced != NULL;
         replaced = replaced->next_retired) {
        count += replaced->requests;
    }
    return count > (reload->done != NULL ? 1u : 0u);
}

static void stop_workers_now(struct proxy_reload *reload)
{
    proxy_t *proxy = reload->proxy;
    reload->stopping_workers = proxy->workers;
    proxy->workers = NULL;
    reload->work.data = reload;
    uv_queue_work(proxy->loop, &reload->work, stop_workers, after_stop_workers);
}

static void on_drain_timer(uv_timer_t *timer)
{
    struct proxy_reload *reload = timer->data;
    bool requests_left = requests_before_reload(reload);
    const char *behind = requests_left ? NULL : namespace_not_drained(reload);
    if (!reload->stopping && (requests_left || behind != NULL) &&
        clock_monotonic_ms() < reload->drain_deadline_ms) {
        return;
    }
    uv_timer_stop(timer);
    if (requests_left || behind != NULL) {
        char text[600];
        snprintf(text, sizeof text,
                 "the workers restarted before %s: acknowledged fast-tier writes to a removed namespace may not "
                 "have reached the archive",
                 requests_left ? "the requests that arrived before the reload were done"
                               : "the feeder applied every write of the removed namespace");
        reload->not_drained = bson_strdup(text);
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "{warning} ({ns})", TC_ATTR_STR("warning", text),
                     TC_ATTR_STR("ns", behind != NULL ? behind : "requests in flight"));
    }
    stop_workers_now(reload);
}

/* On the loop, the reload accepted: the new generation routes from now on. */
static void go_on(struct proxy_reload *reload)
{
    proxy_t *proxy = reload->proxy;
    apply_in_place(reload);
    proxy_generation_t *generation = proxy_generation_new(reload->config, proxy->generation);
    reload->config = NULL; /* the generation owns it */
    swap_generation(proxy, generation);
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        if (!proxy->namespaces[i].indexes_known) {
            unique_indexes_load(proxy, &proxy->namespaces[i]);
        }
    }
    proxy_refresh_progress(proxy);
    if (!reload->plan.restart_workers) {
        finish(reload, NULL);
        return;
    }
    if (!reload->plan.removes_namespaces) {
        stop_workers_now(reload);
        return;
    }
    /* The replaced generation stays retired while workers_config is its config. */
    reload->drain_deadline_ms = clock_monotonic_ms() + proxy->config->read_your_writes_wait_ms;
    uv_timer_start(&reload->drain_timer, on_drain_timer, 0, DRAIN_POLL_MS);
}

static void after_load(uv_work_t *work, int status)
{
    struct proxy_reload *reload = work->data;
    (void)status;
    if (reload->failed || reload->stopping) {
        if (!reload->failed) {
            tc_error_set(&reload->error, TC_ERR_INTERNAL, "the proxy is shutting down");
        }
        bson_error_t error = reload->error;
        finish(reload, &error);
        return;
    }
    go_on(reload);
}

void proxy_reload(proxy_t *proxy, reload_fn done, void *context)
{
    struct proxy_reload *reload = proxy->reload;
    if (reload->busy || reload->stopping) {
        bson_error_t error;
        bson_t empty = BSON_INITIALIZER;
        tc_error_set(&error, TC_ERR_CONFLICTING_OPERATION_IN_PROGRESS,
                     reload->busy ? "a config reload is already under way" : "the proxy is shutting down");
        if (done != NULL) {
            done(context, &empty, &error);
        }
        return;
    }
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "reloading the config from {config}",
                 TC_ATTR_STR("config", proxy->config_path));
    reload->busy = true;
    reload->failed = false;
    reload->done = done;
    reload->context = context;
    reload->work.data = reload;
    uv_queue_work(proxy->loop, &reload->work, load_and_compare, after_load);
}

static void on_hangup(uv_signal_t *handle, int signal_number)
{
    (void)signal_number;
    proxy_reload(handle->data, NULL, NULL);
}

bool proxy_reload_start(proxy_t *proxy, bson_error_t *error)
{
    struct proxy_reload *reload = bson_malloc0(sizeof *reload);
    reload->proxy = proxy;
    proxy->reload = reload;
    uv_timer_init(proxy->loop, &reload->drain_timer);
    reload->drain_timer.data = reload;
    reload->drain_timer_started = true;
    int result = uv_signal_init(proxy->loop, &reload->hangup);
    if (result == 0) {
        reload->hangup.data = proxy;
        reload->hangup_started = true;
        result = uv_signal_start(&reload->hangup, on_hangup, SIGHUP);
    }
    if (result != 0) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot handle SIGHUP: %s", uv_strerror(result));
    }
    return true;
}

void proxy_reload_stop(proxy_t *proxy)
{
    struct proxy_reload *reload = proxy->reload;
    if (reload == NULL) {
        return;
    }
    reload->stopping = true;
    if (reload->hangup_started) {
        uv_close((uv_handle_t *)&reload->hangup, NULL);
        reload->hangup_started = false;
    }
    if (reload->drain_timer_started) {
        if (uv_is_active((uv_handle_t *)&reload->drain_timer)) {
            on_drain_timer(&reload->drain_timer); /* answers the reload that waited */
        }
        uv_close((uv_handle_t *)&reload->drain_timer, NULL);
        reload->drain_timer_started = false;
    }
}

void proxy_reload_cleanup(proxy_t *proxy)
{
    if (proxy->reload != NULL) {
        while (proxy->reload->retired_progress != NULL) {
            retired_progress_t *item = proxy->reload->retired_progress;
            proxy->reload->retired_progress = item->next;
            tier_progress_destroy(item->progress);
            bson_free(item);
        }
        bson_free(proxy->reload->not_drained);
        config_destroy(proxy->reload->config);
        tls_context_destroy(proxy->reload->tls_context);
        bson_free(proxy->reload);
        proxy->reload = NULL;
    }
    proxy->workers_config = NULL;
    while (proxy->retired != NULL) {
        proxy_generation_t *generation = proxy->retired;
        proxy->retired = generation->next_retired;
        generation_destroy(generation);
    }
    if (proxy->generation != NULL) {
        generation_destroy(proxy->generation);
        proxy->generation = NULL;
    }
    proxy->config = NULL;
    proxy->namespaces = NULL;
    proxy->namespace_count = 0;
}
