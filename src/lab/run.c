/* The lab's processes at work: the load that makes the archive's snapshot, and
 * one run (direct, tiered, or the empty start), each from a fresh copy of that
 * snapshot, with the archive's counters sampled every second while bench runs. */
#include "lab/lab_private.h"
#include "common/clock.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define LAB_START_TIMEOUT_MS 60000
#define LAB_SAMPLE_INTERVAL_MS 1000
#define LAB_STATUS_POLL_MS 200
#define LAB_ARGUMENT_MAX 40

/* argv for a child, each string owned. */
typedef struct argument_list {
    char *items[LAB_ARGUMENT_MAX + 1];
    int count;
} argument_list_t;

static void argument_add(argument_list_t *list, const char *format, ...) __attribute__((format(printf, 2, 3)));

static void argument_add(argument_list_t *list, const char *format, ...)
{
    if (list->count == LAB_ARGUMENT_MAX) {
        return; /* the lists below are far shorter; a longer one would fail visibly in the child */
    }
    va_list arguments;
    va_start(arguments, format);
    list->items[list->count++] = bson_strdupv_printf(format, arguments);
    va_end(arguments);
    list->items[list->count] = NULL;
}

static void argument_list_cleanup(argument_list_t *list)
{
    for (int i = 0; i < list->count; i++) {
        bson_free(list->items[i]);
    }
    list->count = 0;
}

/* "16MB" when it is a whole number of megabytes, else bytes. */
static void format_size(uint64_t bytes, char *out, size_t size)
{
    if (bytes % (1024 * 1024) == 0) {
        snprintf(out, size, "%" PRIu64 "MB", bytes / (1024 * 1024));
    } else {
        snprintf(out, size, "%" PRIu64, bytes);
    }
}

static void reset_processes(lab_t *lab)
{
    memset(&lab->archive, 0, sizeof lab->archive);
    memset(&lab->fast, 0, sizeof lab->fast);
    memset(lab->proxies, 0, sizeof lab->proxies);
    memset(&lab->bench, 0, sizeof lab->bench);
    lab->proxy_count = 0;
}

/* The servers of the run, proxies first (the newest), then the fast tier and the
 * archive; returns how many. */
static int run_servers(lab_t *lab, lab_process_t **out)
{
    int count = 0;
    for (int index = lab->proxy_count - 1; index >= 0; index--) {
        out[count++] = &lab->proxies[index];
    }
    out[count++] = &lab->fast;
    out[count++] = &lab->archive;
    return count;
}

void lab_stop_all(lab_t *lab)
{
    lab_process_t *servers[LAB_MAX_PROXIES + 2];
    int count = run_servers(lab, servers);
    lab_process_stop(&lab->bench, lab->settings.stop_wait_ms);
    for (int i = 0; i < count; i++) {
        lab_process_stop(servers[i], lab->settings.stop_wait_ms);
    }
}

/* After a stop: a server that did not exit cleanly is worth a note (a crash, a
 * sanitizer report, a shutdown that needed SIGKILL). */
static void note_unclean_exits(lab_t *lab, const char *run_name)
{
    lab_process_t *servers[LAB_MAX_PROXIES + 2];
    int count = run_servers(lab, servers);
    for (int i = 0; i < count; i++) {
        lab_process_t *process = servers[i];
        if (process->exited && !lab_process_succeeded(process)) {
            char how[128];
            lab_process_describe_exit(process, how, sizeof how);
            lab_note(lab, "%s: the %s %s when stopped: see %s", run_name, process->name, how, process->log_path);
        }
    }
}

static bool start_store(lab_t *lab, lab_process_t *process, const char *name, const char *dbpath, int port,
                        bool is_archive, const char *log_path, bson_error_t *error)
{
    const lab_settings_t *settings = &lab->settings;
    argument_list_t arguments = {.count = 0};
    char cache[32];
    format_size(is_archive ? settings->archive_cache_bytes : settings->fast_cache_bytes, cache, sizeof cache);
    argument_add(&arguments, "thermocline");
    argument_add(&arguments, "store");
    argument_add(&arguments, "--port");
    argument_add(&arguments, "%d", port);
    argument_add(&arguments, "--dbpath");
    argument_add(&arguments, "%s", dbpath);
    argument_add(&arguments, "--replSet");
    argument_add(&arguments, "%s", is_archive ? "rs0" : "rs1");
    argument_add(&arguments, "--cache-size");
    argument_add(&arguments, "%s", cache);
    argument_add(&arguments, "--oplog-size");
    argument_add(&arguments, "%" PRId64, is_archive ? settings->archive_oplog_mb : settings->fast_oplog_mb);
    if (settings->sync_delay_ms > 0) {
        argument_add(&arguments, "--sync-delay");
        argument_add(&arguments, "%" PRId64 "ms", settings->sync_delay_ms);
    }
    if (is_archive) {
        argument_add(&arguments, "--read-iops");
        argument_add(&arguments, "%" PRId64, settings->read_iops);
        argument_add(&arguments, "--workers");
        argument_add(&arguments, "%d", settings->archive_workers);
    }
    bool ok = lab_process_start(process, name, arguments.items, log_path, false, error) &&
              lab_wait_ready(process, port, LAB_START_TIMEOUT_MS, error);
    argument_list_cleanup(&arguments);
    return ok;
}

/* Starts count proxies with one configuration but for its listen port (each its
 * own log), every worker enabled in each: the leases choose one process per
 * worker. One proxy keeps the names it always had (proxy.yaml, <run>-proxy.log). */
static bool start_proxies(lab_t *lab, const char *run_dir, const char *run_name, int count, const int *proxy_ports,
                          int archive_port, int fast_port, bson_error_t *error)
{
    bool ok = true;
    for (int index = 0; index < count && ok; index++) {
        char config_path[PATH_MAX], log_path[PATH_MAX], suffix[16] = "", name[32] = "proxy";
        if (count > 1) {
            snprintf(suffix, sizeof suffix, "-%d", index + 1);
            snprintf(name, sizeof name, "proxy %d", index + 1);
        }
        char *config = bson_strdup_printf("# Written by thermocline lab for the run %s.\n"
                                          "listen: 127.0.0.1:%d\n"
                                          "archive: mongodb://127.0.0.1:%d/?replicaSet=rs0\n"
                                          "fast: mongodb://127.0.0.1:%d/?replicaSet=rs1\n"
                                          "namespaces:\n"
                                          "  - ns: " LAB_NAMESPACE "\n"
                                          "    timeField: " LAB_TIME_FIELD "\n"
                                          "    maxAge: " LAB_MAX_AGE "\n",
                                          run_name, proxy_ports[index], archive_port, fast_port);
        snprintf(config_path, sizeof config_path, "%s/proxy%s.yaml", run_dir, suffix);
        snprintf(log_path, sizeof log_path, "%s/%s-proxy%s.log", lab->logs_dir, run_name, suffix);
        ok = lab_write_file(config_path, config, error);
        bson_free(config);
        if (ok) {
            char *arguments[] = {"thermocline", "proxy", "--config", config_path, NULL};
            ok = lab_process_start(&lab->proxies[index], name, arguments, log_path, false, error);
            lab->proxy_count = ok ? index + 1 : index;
        }
    }
    /* Started together, waited for after: they come up side by side. */
    for (int index = 0; index < lab->proxy_count && ok; index++) {
        ok = lab_wait_ready(&lab->proxies[index], proxy_ports[index], LAB_START_TIMEOUT_MS, error);
    }
    return ok;
}

static bool start_bench(lab_t *lab, const char *workload, const char *uri, int64_t warmup_ms, int64_t duration_ms,
                        int64_t target_ops, const char *json_path, const char *log_path, bson_error_t *error)
{
    const lab_settings_t *settings = &lab->settings;
    argument_list_t arguments = {.count = 0};
    argument_add(&arguments, "thermocline");
    argument_add(&arguments, "bench");
    argument_add(&arguments, "--uri");
    argument_add(&arguments, "%s", uri);
    argument_add(&arguments, "--workload");
    argument_add(&arguments, "%s", workload);
    argument_add(&arguments, "--seed");
    argument_add(&arguments, "%" PRIu64, settings->seed);
    argument_add(&arguments, "--json");
    argument_add(&arguments, "%s", json_path);
    bool is_load = strcmp(workload, "load") == 0;
    argument_add(&arguments, "--threads");
    argument_add(&arguments, "%d", is_load ? settings->load_thread_count : settings->thread_count);
    if (is_load) {
        argument_add(&arguments, "--records");
        argument_add(&arguments, "%" PRId64, settings->record_count);
    } else {
        argument_add(&arguments, "--warmup");
        argument_add(&arguments, "%" PRId64 "ms", warmup_ms);
        argument_add(&arguments, "--duration");
        argument_add(&arguments, "%" PRId64 "ms", duration_ms);
        if (target_ops > 0) {
            argument_add(&arguments, "--target-ops");
            argument_add(&arguments, "%" PRId64, target_ops);
        }
    }
    /* The load's progress bar goes to the terminal; a run's table to its log. */
    bool ok = lab_process_start(&lab->bench, "bench", arguments.items, log_path, is_load, error);
    argument_list_cleanup(&arguments);
    return ok;
}

/* A server of this run that is no longer running. */
static lab_process_t *dead_server(lab_t *lab)
{
    lab_process_t *servers[LAB_MAX_PROXIES + 2];
    int count = run_servers(lab, servers);
    for (int i = 0; i < count; i++) {
        if (servers[i]->name[0] != '\0' && !lab_process_running(servers[i])) {
            return servers[i];
        }
    }
    return NULL;
}

static bool fail_dead_server(lab_process_t *process, const char *run_name, bson_error_t *error)
{
    char how[128];
    lab_process_describe_exit(process, how, sizeof how);
    return tc_error_set(error, TC_ERR_OPERATION_FAILED, "the %s %s during %s: see %s", process->name, how, run_name,
                        process->log_path);
}

typedef struct sample_list {
    lab_counters_t *items;
    size_t count, capacity;
} sample_list_t;

/* The lab's clients of one run: the archive's and each proxy's (none in a direct
 * run). */
typedef struct run_clients {
    mongoc_client_t *archive;
    mongoc_client_t *fast; /* NULL in a direct run */
    mongoc_client_t *proxies[LAB_MAX_PROXIES];
    int proxy_count;
} run_clients_t;

static void run_clients_cleanup(run_clients_t *clients)
{
    mongoc_client_destroy(clients->archive);
    mongoc_client_destroy(clients->fast);
    for (int index = 0; index < clients->proxy_count; index++) {
        mongoc_client_destroy(clients->proxies[index]);
    }
    memset(clients, 0, sizeof *clients);
}

/* The CPU seconds of each proxy, and their sum (-1 when one is not running or
 * the run has none). */
static void sample_proxies_cpu(const lab_t *lab, lab_counters_t *reading)
{
    double sum = lab->proxy_count > 0 ? 0 : -1;
    for (int index = 0; index < LAB_MAX_PROXIES; index++) {
        double seconds = index < lab->proxy_count ? lab_process_cpu_seconds(&lab->proxies[index]) : -1;
        reading->values[LAB_COUNTER_CPU_EACH_PROXY + index] = seconds;
        if (index < lab->proxy_count) {
            sum = seconds >= 0 && sum >= 0 ? sum + seconds : -1;
        }
    }
    reading->values[LAB_COUNTER_CPU_PROXY] = sum;
}

static void sample_take(lab_t *lab, sample_list_t *samples, const run_clients_t *clients)
{
    lab_counters_t reading;
    bson_error_t error;
    if (clients->archive == NULL || !lab_read_counters(clients->archive, &reading, &error)) {
        return; /* a missed sample only widens the interpolation */
    }
    lab_read_proxy_counters(clients->proxies, clients->proxy_count, &reading);
    /* Read right after serverStatus returns, so close to its localTime. */
    reading.values[LAB_COUNTER_CPU_ARCHIVE] = lab_process_cpu_seconds(&lab->archive);
    reading.values[LAB_COUNTER_CPU_FAST] = lab_process_cpu_seconds(&lab->fast);
    reading.values[LAB_COUNTER_JOURNAL_SYNC_US_FAST] =
        clients->fast != NULL ? lab_read_journal_sync_us(clients->fast) : -1.0;
    sample_proxies_cpu(lab, &reading);
    if (samples->count == samples->capacity) {
        samples->capacity = samples->capacity == 0 ? 64 : samples->capacity * 2;
        samples->items = bson_realloc(samples->items, samples->capacity * sizeof *samples->items);
    }
    samples->items[samples->count++] = reading;
}

/* How much counter grew between from_ms and to_ms; -1 when a sample lacks it
 * (a CPU counter of a child that was not running throughout). */
static double counter_change(const sample_list_t *samples, lab_counter_t counter, int64_t from_ms, int64_t to_ms)
{
    for (size_t i = 0; i < samples->count; i++) {
        if (samples->items[i].values[counter] < 0) {
            return -1.0;
        }
    }
    return lab_counter_at(samples->items, samples->count, to_ms, counter) -
           lab_counter_at(samples->items, samples->count, from_ms, counter);
}

static void show_progress(const lab_t *lab, const char *label, int64_t elapsed_ms, int64_t total_ms)
{
    if (lab->stderr_is_terminal) {
        fprintf(stderr, "\r  %-24s %4lld/%lld s ", label, (long long)(elapsed_ms / 1000),
                (long long)((total_ms + 999) / 1000));
        fflush(stderr);
    }
}

static void clear_progress(const lab_t *lab)
{
    if (lab->stderr_is_terminal) {
        fprintf(stderr, "\r%60s\r", "");
        fflush(stderr);
    }
}

/* Waits for bench to exit, sampling the archive every second and watching the
 * servers; fails if one dies or the lab is interrupted (bench is left to the
 * caller's stop). */
static bool watch_bench(lab_t *lab, const char *run_name, const char *label, int64_t expected_ms,
                        const run_clients_t *clients, sample_list_t *samples, bson_error_t *error)
{
    int64_t started = clock_monotonic_ms();
    int64_t next_sample = started + LAB_SAMPLE_INTERVAL_MS;
    bool ok = true;
    while (lab_process_running(&lab->bench)) {
        lab_process_t *dead = dead_server(lab);
        if (dead != NULL) {
            ok = fail_dead_server(dead, run_name, error);
            break;
        }
        int64_t now = clock_monotonic_ms();
        if (now >= next_sample) {
            sample_take(lab, samples, clients);
            next_sample += LAB_SAMPLE_INTERVAL_MS;
            show_progress(lab, label, now - started, expected_ms);
        }
        if (!lab_sleep_ms(50)) {
            ok = tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
            break;
        }
    }
    clear_progress(lab);
    return ok;
}

static bool bench_finished_well(lab_t *lab, bson_error_t *error)
{
    if (lab_process_succeeded(&lab->bench)) {
        return true;
    }
    char how[128];
    lab_process_describe_exit(&lab->bench, how, sizeof how);
    return tc_error_set(error, TC_ERR_OPERATION_FAILED, "bench %s: see %s", how, lab->bench.log_path);
}

/* --- the load ----------------------------------------------------------------------- */

bool lab_load(lab_t *lab, bson_error_t *error)
{
    char log_path[PATH_MAX], bench_log[PATH_MAX], json_path[PATH_MAX];
    mongoc_client_t *client = NULL;
    bool ok = false;
    int port = lab_free_port();

    reset_processes(lab);
    snprintf(lab->snapshot_dir, sizeof lab->snapshot_dir, "%s/loaded", lab->work_dir);
    snprintf(log_path, sizeof log_path, "%s/load-archive.log", lab->logs_dir);
    snprintf(bench_log, sizeof bench_log, "%s/load-bench.log", lab->logs_dir);
    snprintf(json_path, sizeof json_path, "%s/load.json", lab->runs_dir);
    TC_CHECK(lab_make_directory(lab->snapshot_dir, error));
    TC_CHECK(start_store(lab, &lab->archive, "archive", lab->snapshot_dir, port, true, log_path, error));
    client = lab_client_new(port, error);
    TC_CHECK(client != NULL);
    /* The time index exists before the load, so the snapshot every run starts
     * from has it: an operator tiering by createdAt has it, and the warmer's
     * range scans of the window need it. */
    TC_CHECK(lab_create_time_index(client, error));

    char uri[128];
    snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", port);
    fprintf(stderr, "loading %s documents into the archive (bench --workload load)\n",
            lab_grouped((double)lab->settings.record_count, (char[32]){0}, 32));
    TC_CHECK(start_bench(lab, "load", uri, 0, 0, 0, json_path, bench_log, error));
    while (lab_process_running(&lab->bench)) {
        lab_process_t *dead = dead_server(lab);
        if (dead != NULL) {
            TC_CHECK(fail_dead_server(dead, "the load", error));
        }
        if (!lab_sleep_ms(100)) {
            tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
            goto done;
        }
    }
    TC_CHECK(bench_finished_well(lab, error));
    TC_CHECK(lab_collection_sizes(client, &lab->documents, &lab->data_bytes, &lab->storage_bytes, error));
    mongoc_client_destroy(client);
    client = NULL;

    /* A clean shutdown checkpoints everything: the directory is then a snapshot. */
    lab_process_stop(&lab->archive, lab->settings.stop_wait_ms * 4);
    if (!lab_process_succeeded(&lab->archive)) {
        char how[128];
        lab_process_describe_exit(&lab->archive, how, sizeof how);
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "the archive %s at the end of the load: see %s", how, log_path);
        goto done;
    }
    ok = true;
done:
    mongoc_client_destroy(client);
    lab_stop_all(lab);
    return ok;
}

/* --- one run ------------------------------------------------------------------------ */

static const char *mode_name(lab_mode_t mode)
{
    return mode == LAB_MODE_DIRECT ? "direct" : mode == LAB_MODE_TIERED ? "tiered" : "empty start";
}

/* What the warmer said by the end of a wait. */
typedef struct warm_state {
    bool reported; /* the proxy has a warmer section for the namespace */
    bool complete; /* its first pass is done: the coverage horizon is valid */
    char state[32];
    int64_t copied;
    double seconds;
} warm_state_t;

/* Polls the proxies' thermoclineStatus until the warmer reports its first pass
 * complete (to every proxy), the proxies show they run no warmer, or timeout_ms
 * passes (0: one look). False only on a failed status command or an interruption. */
static bool wait_for_warmer(lab_t *lab, const run_clients_t *clients, int64_t timeout_ms, warm_state_t *out,
                            bson_error_t *error)
{
    int64_t started = clock_monotonic_ms();
    for (;;) {
        lab_worker_view_t view;
        if (!lab_proxies_view(clients->proxies, clients->proxy_count, &view, error)) {
            lab_worker_view_cleanup(&view);
            return false;
        }
        out->complete = view.warm;
        out->reported = view.warmer_reported;
        out->copied = view.warmer_copied;
        snprintf(out->state, sizeof out->state, "%s", view.warmer_state[0] != '\0' ? view.warmer_state : "unknown");
        lab_worker_view_cleanup(&view);

        int64_t elapsed = clock_monotonic_ms() - started;
        out->seconds = (double)elapsed / 1000.0;
        if (out->complete || !out->reported || elapsed >= timeout_ms) {
            clear_progress(lab);
            return true;
        }
        if (lab->stderr_is_terminal) {
            fprintf(stderr, "\r  waiting for the warmer: %lld documents copied, %lld s ", (long long)out->copied,
                    (long long)(elapsed / 1000));
            fflush(stderr);
        }
        if (!lab_sleep_ms(LAB_STATUS_POLL_MS)) {
            clear_progress(lab);
            return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
        }
    }
}

/* After bench through the proxy: how far behind the feeder was, how long it took
 * to catch up (the archive's share of the work that the run's figures may not
 * include), and the proxy's final word on the namespace. */
static bool after_proxied_run(lab_t *lab, const run_clients_t *clients, const char *run_name, lab_run_t *run,
                              bson_error_t *error)
{
    int64_t started = clock_monotonic_ms();
    bool first = true;
    run->feeder_drain_seconds = -1;
    for (;;) {
        lab_worker_view_t view;
        if (!lab_proxies_view(clients->proxies, clients->proxy_count, &view, error)) {
            lab_worker_view_cleanup(&view);
            return false;
        }
        if (first) {
            run->feeder_reported = view.feeder_reported;
            run->feeder_lag_ms_at_end = view.feeder_lag_ms;
            first = false;
        }
        bool drained = view.feeder_reported && view.feeder_lag_ms == 0;
        bool give_up = !view.feeder_reported || clock_monotonic_ms() - started >= lab->settings.drain_wait_ms;
        if (drained || give_up) {
            if (drained) {
                run->feeder_drain_seconds = (double)(clock_monotonic_ms() - started) / 1000.0;
            }
            if (view.warmer_copied >= 0) {
                run->documents_warmed = view.warmer_copied;
            }
            bson_destroy(&run->proxy_namespace_status);
            bson_copy_to(&view.namespace_status, &run->proxy_namespace_status);
            lab_worker_view_cleanup(&view);
            break;
        }
        lab_worker_view_cleanup(&view);
        if (!lab_sleep_ms(LAB_STATUS_POLL_MS)) {
            return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
        }
    }
    if (!run->feeder_reported) {
        lab_note(lab, "the proxy reports no feeder: writes through the proxy stayed in the fast tier, so in the "
                      "tiered runs the archive did none of their work and the tiered figures flatter tiering");
    } else if (run->feeder_drain_seconds < 0) {
        lab_note(lab, "%s: the feeder was still %lld ms behind %lld s after the run: the archive had not yet done "
                      "all of the run's writes when it was measured",
                 run_name, (long long)run->feeder_lag_ms_at_end, (long long)(lab->settings.drain_wait_ms / 1000));
    }
    return true;
}

/* --- the warm-up of the fast tier ---------------------------------------------------- */

bool lab_warm_fast_tier(lab_t *lab, bson_error_t *error)
{
    const lab_settings_t *settings = &lab->settings;
    lab_warm_up_t *warm_up = &lab->warm_up;
    char run_dir[LAB_DIRECTORY_SIZE + 128], archive_dir[PATH_MAX], log_path[PATH_MAX];
    run_clients_t clients = {.proxy_count = 0};
    warm_state_t warm = {0};
    bool ok = false;
    int ports[3];
    bool have_ports = lab_free_ports(ports, 3);
    int archive_port = ports[0], fast_port = ports[1], proxy_port = ports[2];

    memset(warm_up, 0, sizeof *warm_up);
    warm_up->attempted = true;
    warm_up->documents = -1;
    reset_processes(lab);
    snprintf(run_dir, sizeof run_dir, "%s/warm-up", lab->work_dir);
    snprintf(archive_dir, sizeof archive_dir, "%s/archive", run_dir);
    snprintf(lab->fast_snapshot_dir, sizeof lab->fast_snapshot_dir, "%s/fast-warmed", lab->work_dir);
    fprintf(stderr, "warm-up: the proxy's warmer copies the recent window into an empty fast tier\n");
    if (!have_ports) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "no free loopback port");
        goto done;
    }
    lab_remove_tree(run_dir);
    lab_remove_tree(lab->fast_snapshot_dir);
    TC_CHECK(lab_copy_tree(lab->snapshot_dir, archive_dir, error));
    TC_CHECK(lab_make_directory(lab->fast_snapshot_dir, error));
    snprintf(log_path, sizeof log_path, "%s/warm-up-archive.log", lab->logs_dir);
    TC_CHECK(start_store(lab, &lab->archive, "archive", archive_dir, archive_port, true, log_path, error));
    snprintf(log_path, sizeof log_path, "%s/warm-up-fast.log", lab->logs_dir);
    TC_CHECK(start_store(lab, &lab->fast, "fast", lab->fast_snapshot_dir, fast_port, false, log_path, error));
    /* One proxy: the warm-up is the warmer's work, whichever process runs it. */
    TC_CHECK(start_proxies(lab, run_dir, "warm-up", 1, &proxy_port, archive_port, fast_port, error));
    clients.proxies[0] = lab_client_new(proxy_port, error);
    TC_CHECK(clients.proxies[0] != NULL);
    clients.proxy_count = 1;
    TC_CHECK(wait_for_warmer(lab, &clients, settings->warm_wait_ms, &warm, error));
    warm_up->warmer_reported = warm.reported;
    warm_up->complete = warm.complete;
    warm_up->seconds = warm.seconds;
    warm_up->documents = warm.copied;
    run_clients_cleanup(&clients);

    /* A clean stop checkpoints the fast tier: its directory is then the
     * snapshot each tiered run copies. */
    lab_stop_all(lab);
    if (!lab_process_succeeded(&lab->fast)) {
        char how[128];
        lab_process_describe_exit(&lab->fast, how, sizeof how);
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "the fast tier %s at the end of the warm-up: see %s/warm-up-fast.log",
                     how, lab->logs_dir);
        goto done;
    }
    ok = true;
done:
    run_clients_cleanup(&clients);
    lab_stop_all(lab);
    if (!lab_interrupted()) {
        note_unclean_exits(lab, "warm-up");
    }
    if (!settings->keep) {
        lab_remove_tree(run_dir);
    }
    warm_up->ok = ok;
    if (!ok) {
        snprintf(warm_up->failure, sizeof warm_up->failure, "%s", error->message);
        if (!lab_interrupted()) {
            lab_note(lab, "the warm-up failed (%s): the tiered runs started from an empty fast tier", error->message);
        }
    } else if (!warm.reported) {
        lab_note(lab, "the proxy reports no warmer (thermoclineStatus has no warmer section): the tiered runs started "
                      "from an empty fast tier, so they show the proxy's cost, not the fast tier's gain");
    } else if (!warm.complete) {
        lab_note(lab, "the warmer had not finished its first pass after %.0f s (state %s, %lld documents copied): "
                      "the tiered runs started from this partly warm fast tier",
                 warm.seconds, warm.state, (long long)warm.copied);
    } else {
        char documents[32];
        fprintf(stderr, "  the warmer copied %s documents in %.1f s\n",
                lab_grouped((double)warm.copied, documents, sizeof documents), warm.seconds);
    }
    return ok;
}

void lab_run_cleanup(lab_run_t *run)
{
    bson_free(run->ops_series);
    run->ops_series = NULL;
    bson_free(run->read_p99_series);
    run->read_p99_series = NULL;
    lab_timeline_cleanup(run);
    if (run->attempted) {
        bson_destroy(&run->proxy_namespace_status);
    }
}

/* The run's figures over bench's measured window from the samples: the archive's
 * reads, each process's CPU per operation, and each second (timeline.c). */
static void measure_from_samples(lab_t *lab, const char *run_name, lab_run_t *run, const sample_list_t *samples)
{
    lab_timeline_compute(run, samples->items, samples->count);
    if (samples->count < 2) {
        lab_note(lab, "%s: too few serverStatus samples of the archive to measure its page reads", run_name);
        return;
    }
    int64_t from = run->started_at_ms, to = run->started_at_ms + (int64_t)(run->measured_seconds * 1000.0);
    double seconds = (double)(to - from) / 1000.0;
    if (seconds <= 0) {
        return;
    }
    run->archive_pages_read_per_second = counter_change(samples, LAB_COUNTER_PAGES_READ, from, to) / seconds;
    run->archive_disk_reads_per_second = counter_change(samples, LAB_COUNTER_DISK_READS, from, to) / seconds;
    double read_ops = counter_change(samples, LAB_COUNTER_READ_OPS, from, to);
    double read_latency_us = counter_change(samples, LAB_COUNTER_READ_LATENCY_US, from, to);
    run->archive_read_mean_ms = read_ops > 0 && read_latency_us >= 0 ? read_latency_us / read_ops / 1000.0 : -1.0;
    for (int role = LAB_ROLE_ARCHIVE; role <= LAB_ROLE_PROXY; role++) {
        double cpu_seconds = counter_change(samples, LAB_COUNTER_CPU_ARCHIVE + role, from, to);
        run->cpu_us_per_operation[role] =
            cpu_seconds >= 0 && run->operations > 0 ? cpu_seconds * 1e6 / (double)run->operations : -1.0;
    }
    for (int index = 0; index < run->proxy_count; index++) {
        double cpu_seconds = counter_change(samples, LAB_COUNTER_CPU_EACH_PROXY + index, from, to);
        run->proxy_cpu_us_per_operation[index] =
            cpu_seconds >= 0 && run->operations > 0 ? cpu_seconds * 1e6 / (double)run->operations : -1.0;
    }
}

/* A proxied run's fast tier (from the warm-up's copy, or empty) and its proxies
 * with a client each, the warmer waited for in a tiered run; uri is then bench's,
 * every proxy's host in order. */
static bool start_proxied_tiers(lab_t *lab, lab_mode_t mode, const char *run_name, const char *run_dir,
                                const int *ports, lab_run_t *run, run_clients_t *clients, char *uri,
                                size_t uri_size, bson_error_t *error)
{
    const lab_settings_t *settings = &lab->settings;
    char fast_dir[PATH_MAX], log_path[PATH_MAX];
    int archive_port = ports[0], fast_port = ports[1];
    const int *proxy_ports = ports + 2;
    snprintf(fast_dir, sizeof fast_dir, "%s/fast", run_dir);
    /* Tiered runs start from the fast tier the warm-up left (the same for each);
     * the empty start, and tiered runs without one, from nothing. */
    bool fast_dir_ready = mode == LAB_MODE_TIERED && lab->warm_up.ok
                              ? lab_copy_tree(lab->fast_snapshot_dir, fast_dir, error) &&
                                    lab_flush_file_system(fast_dir, error)
                              : lab_make_directory(fast_dir, error);
    snprintf(log_path, sizeof log_path, "%s/%s-fast.log", lab->logs_dir, run_name);
    if (!fast_dir_ready || !start_store(lab, &lab->fast, "fast", fast_dir, fast_port, false, log_path, error) ||
        !start_proxies(lab, run_dir, run_name, settings->proxy_count, proxy_ports, archive_port, fast_port, error)) {
        return false;
    }
    clients->fast = lab_client_new(fast_port, error);
    if (clients->fast == NULL) {
        return false;
    }
    size_t used = (size_t)snprintf(uri, uri_size, "mongodb://");
    for (int index = 0; index < settings->proxy_count; index++) {
        clients->proxies[index] = lab_client_new(proxy_ports[index], error);
        if (clients->proxies[index] == NULL) {
            return false;
        }
        clients->proxy_count = index + 1;
        run->proxy_ports[index] = proxy_ports[index];
        used += (size_t)snprintf(uri + used, uri_size - used, "%s127.0.0.1:%d", index > 0 ? "," : "",
                                 proxy_ports[index]);
    }
    run->proxy_count = settings->proxy_count;
    snprintf(uri + used, uri_size - used, "/");
    if (mode == LAB_MODE_TIERED) {
        /* A warmer that finished in the warm-up finds its pass done on restart;
         * one that did not is not waited for again. */
        warm_state_t warm;
        if (!wait_for_warmer(lab, clients, lab->warm_up.complete ? settings->warm_wait_ms : 0, &warm, error)) {
            return false;
        }
        run->warmer_reported = warm.reported;
        run->fast_tier_warm = warm.complete;
        run->warm_wait_seconds = warm.seconds;
        run->documents_warmed = warm.copied;
        if (lab->warm_up.complete && !warm.complete) {
            lab_note(lab, "%s: the warmer did not report the restored fast tier's first pass complete within "
                          "%lld s (state %s): the run went on with what the fast tier held",
                     run_name, (long long)(settings->warm_wait_ms / 1000), warm.state);
        }
    }
    return true;
}

/* A run's names: its files' ("store-tiered") and its progress label's. */
static void name_run(const char *workload, lab_mode_t mode, int64_t target_ops, char *run_name, size_t name_size,
                     char *label, size_t label_size)
{
    if (mode == LAB_MODE_EMPTY_START) {
        snprintf(run_name, name_size, "empty-start");
        snprintf(label, label_size, "empty start");
    } else if (target_ops > 0) {
        snprintf(run_name, name_size, "%s-fixed-%s", workload, mode_name(mode));
        snprintf(label, label_size, "%s at %" PRId64 " ops/s %s", workload, target_ops, mode_name(mode));
    } else {
        snprintf(run_name, name_size, "%s-%s", workload, mode_name(mode));
        snprintf(label, label_size, "%s %s", workload, mode_name(mode));
    }
}

static void run_init(lab_run_t *run)
{
    memset(run, 0, sizeof *run);
    run->attempted = true;
    run->documents_warmed = -1;
    run->feeder_lag_ms_at_end = -1;
    run->archive_read_mean_ms = -1.0;
    run->feeder_drain_seconds = -1;
    run->round_trip_us = -1.0;
    for (int role = 0; role < LAB_ROLE_COUNT; role++) {
        run->cpu_us_per_operation[role] = -1.0;
    }
    for (int index = 0; index < LAB_MAX_PROXIES; index++) {
        run->proxy_cpu_us_per_operation[index] = -1.0;
        run->proxy_operations[index] = -1;
    }
    bson_init(&run->proxy_namespace_status);
}

bool lab_run(lab_t *lab, const char *workload, lab_mode_t mode, int64_t target_ops, lab_run_t *run)
{
    const lab_settings_t *settings = &lab->settings;
    bson_error_t error = {0};
    char run_name[64], label[64], run_dir[LAB_DIRECTORY_SIZE + 128], archive_dir[PATH_MAX];
    char log_path[PATH_MAX], json_path[PATH_MAX], uri[64 + 24 * LAB_MAX_PROXIES];
    run_clients_t clients = {.proxy_count = 0};
    sample_list_t samples = {0};
    bool ok = false;
    int ports[2 + LAB_MAX_PROXIES]; /* archive, fast tier, proxies */
    bool have_ports = lab_free_ports(ports, 2 + (size_t)settings->proxy_count);
    int archive_port = ports[0];
    int64_t warmup_ms = mode == LAB_MODE_EMPTY_START ? 0 : settings->warmup_ms;
    int64_t duration_ms = mode == LAB_MODE_EMPTY_START ? settings->empty_start_ms : settings->duration_ms;

    run_init(run);
    reset_processes(lab);
    name_run(workload, mode, target_ops, run_name, sizeof run_name, label, sizeof label);
    snprintf(run_dir, sizeof run_dir, "%s/%s", lab->work_dir, run_name);
    snprintf(archive_dir, sizeof archive_dir, "%s/archive", run_dir);
    snprintf(json_path, sizeof json_path, "%s/%s.json", lab->runs_dir, run_name);
    if (mode == LAB_MODE_DIRECT || settings->proxy_count == 1) {
        fprintf(stderr, "%s: %s%s\n", label,
                mode == LAB_MODE_DIRECT ? "bench against the archive" : "bench through the proxy",
                mode == LAB_MODE_EMPTY_START ? ", fast tier empty at the start" : "");
    } else {
        fprintf(stderr, "%s: bench through %d proxies%s\n", label, settings->proxy_count,
                mode == LAB_MODE_EMPTY_START ? ", fast tier empty at the start" : "");
    }

    if (!have_ports) {
        tc_error_set(&error, TC_ERR_OPERATION_FAILED, "no free loopback port");
        goto done;
    }
    /* Every run starts from the loaded snapshot: the same documents, the same
     * _id range for bench's key choice, and a cold archive cache (the warm-up,
     * equal on both sides, is what warms it). */
    lab_remove_tree(run_dir);
    TC_CHECK(lab_copy_tree(lab->snapshot_dir, archive_dir, &error));
    /* Left to the kernel, the copy (and the last run's removal) would reach the
     * disk about 30 s into this run, beside the stores' journal syncs. */
    TC_CHECK(lab_flush_file_system(archive_dir, &error));
    bson_error_t probe_error;
    if (!lab_measure_round_trip(&run->round_trip_us, &probe_error)) {
        lab_note(lab, "%s: the loopback round trip was not measured: %s", run_name, probe_error.message);
    }
    snprintf(log_path, sizeof log_path, "%s/%s-archive.log", lab->logs_dir, run_name);
    TC_CHECK(start_store(lab, &lab->archive, "archive", archive_dir, archive_port, true, log_path, &error));
    if (mode == LAB_MODE_DIRECT) {
        snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", archive_port);
    } else {
        TC_CHECK(start_proxied_tiers(lab, mode, run_name, run_dir, ports, run, &clients, uri, sizeof uri, &error));
    }
    clients.archive = lab_client_new(archive_port, &error);
    TC_CHECK(clients.archive != NULL);

    sample_take(lab, &samples, &clients);
    snprintf(log_path, sizeof log_path, "%s/%s-bench.log", lab->logs_dir, run_name);
    TC_CHECK(start_bench(lab, workload, uri, warmup_ms, duration_ms, target_ops, json_path, log_path, &error));
    TC_CHECK(watch_bench(lab, run_name, label, warmup_ms + duration_ms, &clients, &samples, &error));
    sample_take(lab, &samples, &clients);
    TC_CHECK(bench_finished_well(lab, &error));
    TC_CHECK(lab_read_bench_report(json_path, run, &error));

    if (run->errors > 0) {
        char operations[32];
        lab_note(lab, "%s: %lld operations failed besides the %s that succeeded; the first: %s", run_name,
                 (long long)run->errors, lab_grouped((double)run->operations, operations, sizeof operations),
                 run->first_error);
    }
    measure_from_samples(lab, run_name, run, &samples);
    if (mode != LAB_MODE_DIRECT) {
        TC_CHECK(after_proxied_run(lab, &clients, run_name, run, &error));
    }
    ok = true;
done:
    clear_progress(lab);
    if (!ok) {
        snprintf(run->failure, sizeof run->failure, "%s", error.message);
        if (!lab_interrupted()) {
            fprintf(stderr, "  %s failed: %s\n", label, error.message);
        }
    }
    run_clients_cleanup(&clients);
    lab_stop_all(lab);
    if (!lab_interrupted()) {
        note_unclean_exits(lab, run_name);
    }
    bson_free(samples.items);
    if (!settings->keep) {
        lab_remove_tree(run_dir);
    }
    run->ok = ok;
    if (ok) {
        char ops[32];
        fprintf(stderr,
                "  %s ops/s, read p95 %.1f ms, update p99 %.1f ms, archive %s pages read/s, loopback %.1f us\n",
                lab_grouped(run->ops_per_second, ops, sizeof ops), run->read.p95_ms, run->update.p99_ms,
                lab_grouped(run->archive_pages_read_per_second, (char[32]){0}, 32), run->round_trip_us);
    }
    return ok;
}
