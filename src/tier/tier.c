/* Starting and stopping the tier workers (tier.h): one libmongoc pool per tier,
 * one thread per worker in a thread group; and `thermocline feeder|evictor|warmer`,
 * which runs one worker alone until SIGINT or SIGTERM. */
#include "tier/lease_private.h"
#include "tier/tier_private.h"

#include "common/log.h"
#include "config/arguments.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "TIER"

/* One worker's thread: it runs the worker while this process holds its lease. */
typedef struct leased_worker {
    tier_worker_t worker;
    tier_group_run_fn run;
    tier_context_t *context;
    tier_leases_t *leases;
} leased_worker_t;

struct tier_workers {
    tier_context_t context;
    tier_group_t *group;
    tier_leases_t *leases;
    leased_worker_t leased[TIER_WORKER_COUNT];
};

/* Waits for the worker's lease, runs the worker in a scope that stops when the
 * lease is lost (with its own context: the worker's sleeps and checks see that
 * scope), and waits again; returns when the group stops. */
static void run_leased(tier_group_t *group, void *argument)
{
    leased_worker_t *leased = argument;
    int64_t term;
    tier_group_t *scope;
    while ((scope = tier_leases_wait(leased->leases, leased->worker, group, &term)) != NULL) {
        tier_context_t context = *leased->context;
        context.group = scope;
        context.leases = leased->leases;
        context.lease_term = term;
        leased->run(scope, &context);
        tier_worker_progress_t *item = tier_progress_lock_worker(context.progress, leased->worker);
        item->running = false;
        tier_progress_unlock(context.progress, true);
        tier_leases_end(leased->leases, leased->worker, scope);
    }
}

/* libmongoc's own messages: warnings and errors into our log, the rest dropped
 * (its default handler prints its debug chatter to stderr). */
static void log_from_mongoc(mongoc_log_level_t level, const char *domain, const char *message, void *context)
{
    (void)context;
    if (level <= MONGOC_LOG_LEVEL_WARNING) {
        TC_LOG_ATTRS(level <= MONGOC_LOG_LEVEL_ERROR ? TC_LOG_ERROR : TC_LOG_WARNING, "MONGOC", 0,
                     "{domain}: {message}", TC_ATTR_STR("domain", domain), TC_ATTR_STR("message", message));
    }
}

/* "thermocline feeder: ..." as tc_log_failure writes it. */
static void log_failure(const char *worker, const char *message)
{
    char program[64];
    snprintf(program, sizeof program, "thermocline %s", worker);
    tc_log_failure(program, message);
}

void tier_libmongoc_init(void)
{
    mongoc_init();
    mongoc_log_set_handler(log_from_mongoc, NULL);
}

bool tier_feeder_ensure_start(const config_t *config, bson_error_t *error)
{
    tier_libmongoc_init();
    mongoc_client_t *client = tier_client_new(config->fast_uri, "thermocline-proxy", error);
    if (client == NULL) {
        return false;
    }
    uint64_t now = 0;
    bool ok = tier_cluster_time(client, &now, error);
    if (ok && now != 0) {
        bson_t command = BSON_INITIALIZER, documents, document, concern, reply;
        BSON_APPEND_UTF8(&command, "insert", TIER_FEEDER_COLLECTION);
        BSON_APPEND_ARRAY_BEGIN(&command, "documents", &documents);
        BSON_APPEND_DOCUMENT_BEGIN(&documents, "0", &document);
        BSON_APPEND_UTF8(&document, "_id", "stream");
        timestamp_append(&document, "startAtOperationTime", now);
        timestamp_append(&document, "appliedTime", now);
        BSON_APPEND_DATE_TIME(&document, "updatedAt", clock_wall_ms());
        bson_append_document_end(&documents, &document);
        bson_append_array_end(&command, &documents);
        BSON_APPEND_DOCUMENT_BEGIN(&command, "writeConcern", &concern);
        BSON_APPEND_UTF8(&concern, "w", "majority");
        bson_append_document_end(&command, &concern);
        bson_iter_t errors;
        tier_write_error_t write_error;
        ok = tier_command(client, TIER_DATABASE, &command, &reply, error);
        /* A checkpoint already there refuses the insert: the feeder has a start. */
        if (ok && tier_write_errors_init(&errors, &reply)) {
            ok = tier_write_errors_next(&errors, &write_error) && write_error.code == TC_ERR_DUPLICATE_KEY;
            if (!ok) {
                tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot record the feeder's start in the fast tier");
            }
        }
        bson_destroy(&reply);
        bson_destroy(&command);
    }
    mongoc_client_destroy(client);
    return ok;
}

tier_workers_t *tier_workers_start(const config_t *config, tier_progress_t *progress, unsigned which,
                                   const char *claim, bson_error_t *error)
{
    static const struct {
        tier_worker_t worker;
        const char *thread_name;
        tier_group_run_fn run;
    } workers[] = {
        {TIER_WORKER_FEEDER, "tc-feeder", feeder_run},
        {TIER_WORKER_EVICTOR, "tc-evictor", evictor_run},
        {TIER_WORKER_WARMER, "tc-warmer", warmer_run},
    };
    tier_libmongoc_init();
    tier_workers_t *started = bson_malloc0(sizeof *started);
    started->group = tier_group_new();
    started->context.config = config;
    started->context.progress = progress;
    started->context.group = started->group;
    started->context.in_proxy = claim != NULL;
    started->context.fast_pool = tier_pool_new(config->fast_uri, "thermocline-workers", error);
    if (started->context.fast_pool == NULL) {
        goto fail;
    }
    started->context.archive_pool = tier_pool_new(config->archive_uri, "thermocline-workers", error);
    if (started->context.archive_pool == NULL) {
        goto fail;
    }
    started->leases = tier_leases_new(&started->context, which, claim);
    if (!tier_group_start(started->group, "tc-leases", tier_leases_run, started->leases, error)) {
        goto fail;
    }
    for (size_t i = 0; i < sizeof workers / sizeof workers[0]; i++) {
        leased_worker_t *leased = &started->leased[workers[i].worker];
        *leased = (leased_worker_t){workers[i].worker, workers[i].run, &started->context, started->leases};
        if ((which & (1u << workers[i].worker)) != 0 &&
            !tier_group_start(started->group, workers[i].thread_name, run_leased, leased, error)) {
            goto fail;
        }
    }
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                 "tier workers running here: feeder {feeder}, evictor {evictor}, warmer {warmer}",
                 TC_ATTR_BOOL("feeder", (which & TIER_RUN_FEEDER) != 0),
                 TC_ATTR_BOOL("evictor", (which & TIER_RUN_EVICTOR) != 0),
                 TC_ATTR_BOOL("warmer", (which & TIER_RUN_WARMER) != 0));
    return started;
fail:
    tier_workers_stop(started);
    return NULL;
}

void tier_workers_stop(tier_workers_t *workers)
{
    if (workers == NULL) {
        return;
    }
    tier_group_destroy(workers->group);
    tier_leases_destroy(workers->leases);
    if (workers->context.archive_pool != NULL) {
        mongoc_client_pool_destroy(workers->context.archive_pool);
    }
    if (workers->context.fast_pool != NULL) {
        mongoc_client_pool_destroy(workers->context.fast_pool);
    }
    bson_free(workers);
}

/* --- `thermocline feeder|evictor|warmer` -------------------------------------------------- */

static void print_usage(FILE *stream, const char *worker)
{
    fprintf(stream,
            "usage: thermocline %s --config FILE [--verbose]\n"
            "\n"
            "Runs the %s alone, with the proxy's config file; the proxy's config then disables\n"
            "it there (%sEnabled: false). Stops on SIGINT or SIGTERM.\n"
            "\n"
            "  --config FILE   the proxy's YAML config (archive, fast, namespaces...)\n"
            "  --verbose       log more\n"
            "  --help          this text\n",
            worker, worker, worker);
}

int tier_main(int argc, char **argv)
{
    const char *worker = argv[0];
    unsigned which = strcmp(worker, "feeder") == 0    ? TIER_RUN_FEEDER
                     : strcmp(worker, "evictor") == 0 ? TIER_RUN_EVICTOR
                     : strcmp(worker, "warmer") == 0  ? TIER_RUN_WARMER
                                                      : 0;
    if (which == 0) {
        fprintf(stderr, "thermocline: unknown worker '%s'\n", worker);
        return 2;
    }
    config_arguments_t arguments;
    int usage_status = config_arguments_parse(argc, argv, print_usage, &arguments);
    if (usage_status >= 0) {
        return usage_status;
    }
    if (arguments.verbose) {
        tc_log_set_level(TC_LOG_DEBUG);
    }
    const char *config_path = arguments.config_path;
    bson_error_t error;
    config_t *config = config_load_file(config_path, &error);
    if (config == NULL) {
        log_failure(worker, error.message);
        return 1;
    }
    if (config->log_format == TC_LOG_FORMAT_JSON) {
        tc_log_set_format(TC_LOG_FORMAT_JSON); /* as the proxy: json when the flag or the file asks */
    }
    tier_libmongoc_init();
    if (!tier_preflight(config, &error)) {
        log_failure(worker, error.message);
        config_destroy(config);
        mongoc_cleanup();
        return 1;
    }
    /* The worker threads inherit the blocked signals; this thread waits for them. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    tier_progress_t *progress = tier_progress_new(config->namespace_count);
    tier_workers_t *workers = tier_workers_start(config, progress, which, NULL, &error);
    int status = 0;
    if (workers == NULL) {
        log_failure(worker, error.message);
        status = 1;
    } else {
        int received = 0;
        sigwait(&signals, &received);
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{worker} stopping (signal {signal})",
                     TC_ATTR_STR("worker", worker), TC_ATTR_INT("signal", received));
        tier_workers_stop(workers);
    }
    tier_progress_destroy(progress);
    config_destroy(config);
    mongoc_cleanup();
    return status;
}
