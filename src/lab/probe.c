/* What the lab asks its servers over the wire, with one single-threaded libmongoc
 * client per server: is it up, the archive's read counters (serverStatus), the
 * collection's sizes, and what the proxy's workers report (thermoclineStatus). */
#include "lab/lab_private.h"
#include "common/clock.h"

#include <string.h>

#define LAB_READY_POLL_MS 50

mongoc_client_t *lab_client_new(int port, bson_error_t *error)
{
    char text[256];
    /* Seconds, not libmongoc's 30, to notice a dead server; a long socket
     * timeout because the archive under its read cap answers slowly. */
    snprintf(text, sizeof text,
             "mongodb://127.0.0.1:%d/?directConnection=true&serverSelectionTimeoutMS=3000"
             "&connectTimeoutMS=3000&socketTimeoutMS=120000&appname=thermocline-lab",
             port);
    bson_error_t uri_error;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(text, &uri_error);
    if (uri == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "bad URI %s: %s", text, uri_error.message);
        return NULL;
    }
    mongoc_client_t *client = mongoc_client_new_from_uri_with_error(uri, &uri_error);
    mongoc_uri_destroy(uri);
    if (client == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot create a client for port %d: %s", port, uri_error.message);
        return NULL;
    }
    mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
    return client;
}

static bool ping(int port)
{
    bson_error_t error;
    mongoc_client_t *client = lab_client_new(port, &error);
    if (client == NULL) {
        return false;
    }
    bson_t command = BSON_INITIALIZER;
    BSON_APPEND_INT32(&command, "ping", 1);
    bool ok = mongoc_client_command_simple(client, "admin", &command, NULL, NULL, &error);
    bson_destroy(&command);
    mongoc_client_destroy(client);
    return ok;
}

bool lab_wait_ready(lab_process_t *process, int port, int64_t timeout_ms, bson_error_t *error)
{
    int64_t deadline = clock_monotonic_ms() + timeout_ms;
    /* A bare TCP probe until it listens: a single-threaded libmongoc client waits
     * 5 s before retrying a server it once failed to reach. */
    for (;;) {
        if (!lab_process_running(process)) {
            char how[128];
            lab_process_describe_exit(process, how, sizeof how);
            return tc_error_set(error, TC_ERR_OPERATION_FAILED, "the %s %s during start-up: see %s", process->name,
                                how, process->log_path);
        }
        if (lab_port_open(port) && ping(port)) {
            return true;
        }
        if (clock_monotonic_ms() >= deadline) {
            return tc_error_set(error, TC_ERR_NETWORK_TIMEOUT, "the %s did not answer on port %d within %lld s: see %s",
                                process->name, port, (long long)(timeout_ms / 1000), process->log_path);
        }
        if (!lab_sleep_ms(LAB_READY_POLL_MS)) {
            return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
        }
    }
}

static int64_t number_at(const bson_t *document, const char *const *path, size_t depth)
{
    bson_iter_t iter, child;
    if (!bson_iter_init_find(&iter, document, path[0])) {
        return -1;
    }
    /* Keys may hold dots or spaces ("pages read into cache"), so each level is
     * looked up by its exact name, not as a dotted path. */
    for (size_t level = 1; level < depth; level++) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &child) ||
            !bson_iter_find(&child, path[level])) {
            return -1;
        }
        iter = child;
    }
    return BSON_ITER_HOLDS_NUMBER(&iter) ? bson_iter_as_int64(&iter) : -1;
}

/* WiredTiger's time in journal syncs, in either store's serverStatus. */
static const char *const journal_sync_path[] = {"wiredTiger", "log", "log sync time duration (usecs)"};

bool lab_read_counters(mongoc_client_t *client, lab_counters_t *out, bson_error_t *error)
{
    static const char *const pages_path[] = {"wiredTiger", "cache", "pages read into cache"};
    static const char *const reads_path[] = {"thermocline", "readIops", "reads"};
    static const char *const read_latency_path[] = {"opLatencies", "reads", "latency"};
    static const char *const read_ops_path[] = {"opLatencies", "reads", "ops"};
    bson_t command = BSON_INITIALIZER, reply;
    bson_error_t command_error;
    BSON_APPEND_INT32(&command, "serverStatus", 1);
    int64_t before = clock_wall_ms();
    bool ok = mongoc_client_command_simple(client, "admin", &command, NULL, &reply, &command_error);
    int64_t after = clock_wall_ms();
    if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "serverStatus on the archive failed: %s", command_error.message);
    } else {
        /* The server's own clock at the moment it read the counters: a busy
         * archive may queue the command for seconds, so the client's clock
         * would misplace the sample. */
        bson_iter_t local_time;
        out->at_ms = bson_iter_init_find(&local_time, &reply, "localTime") && BSON_ITER_HOLDS_DATE_TIME(&local_time)
                         ? bson_iter_date_time(&local_time)
                         : before + (after - before) / 2;
        out->values[LAB_COUNTER_PAGES_READ] = (double)number_at(&reply, pages_path, 3);
        out->values[LAB_COUNTER_DISK_READS] = (double)number_at(&reply, reads_path, 3);
        out->values[LAB_COUNTER_READ_LATENCY_US] = (double)number_at(&reply, read_latency_path, 3);
        out->values[LAB_COUNTER_READ_OPS] = (double)number_at(&reply, read_ops_path, 3);
        out->values[LAB_COUNTER_JOURNAL_SYNC_US_ARCHIVE] = (double)number_at(&reply, journal_sync_path, 3);
        if (out->values[LAB_COUNTER_PAGES_READ] < 0) {
            ok = tc_error_set(error, TC_ERR_OPERATION_FAILED,
                              "the archive's serverStatus has no wiredTiger.cache \"pages read into cache\"");
        }
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

double lab_read_journal_sync_us(mongoc_client_t *client)
{
    bson_t command = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&command, "serverStatus", 1);
    bool ok = mongoc_client_command_simple(client, "admin", &command, NULL, &reply, NULL);
    double microseconds = ok ? (double)number_at(&reply, journal_sync_path, 3) : -1.0;
    bson_destroy(&reply);
    bson_destroy(&command);
    return microseconds;
}

bool lab_collection_sizes(mongoc_client_t *client, int64_t *out_count, int64_t *out_data_bytes,
                          int64_t *out_storage_bytes, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_error_t command_error;
    BSON_APPEND_UTF8(&command, "collStats", LAB_COLLECTION);
    bool ok = mongoc_client_command_simple(client, LAB_DATABASE, &command, NULL, &reply, &command_error);
    if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "collStats on the archive failed: %s", command_error.message);
    } else {
        const char *count_path[] = {"count"}, *size_path[] = {"size"}, *storage_path[] = {"storageSize"},
                   *index_path[] = {"totalIndexSize"};
        *out_count = number_at(&reply, count_path, 1);
        *out_data_bytes = number_at(&reply, size_path, 1);
        int64_t indexes = number_at(&reply, index_path, 1);
        *out_storage_bytes = number_at(&reply, storage_path, 1) + (indexes > 0 ? indexes : 0);
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

bool lab_create_time_index(mongoc_client_t *client, bson_error_t *error)
{
    bson_t *command = BCON_NEW("createIndexes", BCON_UTF8(LAB_COLLECTION), "indexes", "[", "{", "key", "{",
                               LAB_TIME_FIELD, BCON_INT32(1), "}", "name", BCON_UTF8(LAB_TIME_FIELD "_1"), "}", "]");
    bson_error_t command_error;
    bool ok = mongoc_client_command_simple(client, LAB_DATABASE, command, NULL, NULL, &command_error);
    if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot create the %s index on the archive: %s", LAB_TIME_FIELD,
                     command_error.message);
    }
    bson_destroy(command);
    return ok;
}

/* thermoclineStatus through a proxy: the whole reply (always initialised; the
 * caller destroys it). */
static bool proxy_status(mongoc_client_t *client, bson_t *out_reply, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER;
    bson_error_t command_error;
    BSON_APPEND_INT32(&command, "thermoclineStatus", 1);
    bool ok = mongoc_client_command_simple(client, "admin", &command, NULL, out_reply, &command_error);
    if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "thermoclineStatus on the proxy failed: %s",
                     command_error.message);
    }
    bson_destroy(&command);
    return ok;
}

/* The first sub-document named "feeder" that reports lagMillis, anywhere in the
 * reply: where the workers' section sits is the proxy's business. */
static bool find_feeder_lag(const bson_t *document, int depth, int64_t *out_lag)
{
    bson_iter_t iter, inner;
    if (depth > 4 || !bson_iter_init(&iter, document)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        uint32_t length;
        const uint8_t *data;
        bson_t child;
        bson_iter_document(&iter, &length, &data);
        if (!bson_init_static(&child, data, length)) {
            continue;
        }
        if (strcmp(bson_iter_key(&iter), "feeder") == 0 && bson_iter_init_find(&inner, &child, "lagMillis") &&
            BSON_ITER_HOLDS_NUMBER(&inner)) {
            *out_lag = bson_iter_as_int64(&inner);
            return true;
        }
        if (find_feeder_lag(&child, depth + 1, out_lag)) {
            return true;
        }
    }
    return false;
}

/* Fills view from one proxy's thermoclineStatus reply; free with
 * lab_worker_view_cleanup(). */
static void worker_view_init(lab_worker_view_t *view, const bson_t *reply)
{
    bson_iter_t iter, namespaces, field;
    memset(view, 0, sizeof *view);
    bson_init(&view->namespace_status);
    view->warmer_copied = -1;
    view->feeder_lag_ms = -1;
    view->feeder_reported = find_feeder_lag(reply, 0, &view->feeder_lag_ms);

    /* The namespace's key holds a dot, so it is found by exact name. */
    if (!bson_iter_init_find(&iter, reply, "namespaces") || !BSON_ITER_HOLDS_DOCUMENT(&iter) ||
        !bson_iter_recurse(&iter, &namespaces) || !bson_iter_find(&namespaces, LAB_NAMESPACE) ||
        !BSON_ITER_HOLDS_DOCUMENT(&namespaces)) {
        return;
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&namespaces, &length, &data);
    bson_t status;
    if (!bson_init_static(&status, data, length)) {
        return;
    }
    view->namespace_found = true;
    bson_destroy(&view->namespace_status);
    bson_copy_to(&status, &view->namespace_status);
    view->coverage_valid = bson_iter_init_find(&field, &status, "coverageHorizon") && BSON_ITER_HOLDS_DATE_TIME(&field);
    if (bson_iter_init_find(&field, &status, "warmer") && BSON_ITER_HOLDS_DOCUMENT(&field)) {
        bson_iter_t warmer;
        view->warmer_reported = true;
        bson_iter_recurse(&field, &warmer);
        while (bson_iter_next(&warmer)) {
            if (strcmp(bson_iter_key(&warmer), "state") == 0 && BSON_ITER_HOLDS_UTF8(&warmer)) {
                snprintf(view->warmer_state, sizeof view->warmer_state, "%s", bson_iter_utf8(&warmer, NULL));
            } else if (strcmp(bson_iter_key(&warmer), "copied") == 0 && BSON_ITER_HOLDS_NUMBER(&warmer)) {
                view->warmer_copied = bson_iter_as_int64(&warmer);
            }
        }
    }
    view->warm = view->coverage_valid || strcmp(view->warmer_state, "complete") == 0 ||
                 strcmp(view->warmer_state, "declared-complete") == 0;
}

/* Whether the proxy that sent reply runs worker ("feeder", "warmer"): its
 * workers.<worker>.runningHere, true in the holder of the worker's lease. */
static bool runs_worker(const bson_t *reply, const char *worker)
{
    bson_iter_t iter, workers, item;
    return bson_iter_init_find(&iter, reply, "workers") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
           bson_iter_recurse(&iter, &workers) && bson_iter_find(&workers, worker) &&
           BSON_ITER_HOLDS_DOCUMENT(&workers) && bson_iter_recurse(&workers, &item) &&
           bson_iter_find(&item, "runningHere") && BSON_ITER_HOLDS_BOOL(&item) && bson_iter_bool(&item);
}

/* The index of the reply whose proxy runs worker; 0 when none says so (one
 * proxy whose worker waits for its lease, or runs elsewhere). */
static int worker_runner(const bson_t *replies, int count, const char *worker)
{
    for (int index = 0; index < count; index++) {
        if (runs_worker(&replies[index], worker)) {
            return index;
        }
    }
    return 0;
}

/* thermoclineStatus of each proxy into replies (each initialised, to destroy);
 * false at the first that does not answer. */
static bool read_statuses(mongoc_client_t *const *proxies, int count, bson_t *replies, bson_error_t *error)
{
    bool ok = true;
    for (int index = 0; index < count; index++) {
        if (ok) {
            ok = proxy_status(proxies[index], &replies[index], error);
        } else {
            bson_init(&replies[index]);
        }
    }
    return ok;
}

static void destroy_statuses(bson_t *replies, int count)
{
    for (int index = 0; index < count; index++) {
        bson_destroy(&replies[index]);
    }
}

void lab_read_proxy_counters(mongoc_client_t *const *proxies, int count, lab_counters_t *out)
{
    static const char *const lag_path[] = {"workers", "feeder", "lagMillis"};
    static const char *const events_path[] = {"workers", "feeder", "eventsApplied"};
    static const char *const waiting_path[] = {"readsWaitingForFeeder"};
    static const char *const waited_path[] = {"namespaces", LAB_NAMESPACE, "readsWaitedForFeeder"};
    bson_t replies[LAB_MAX_PROXIES];
    bson_error_t error;
    count = count < LAB_MAX_PROXIES ? count : LAB_MAX_PROXIES;
    bool ok = count > 0 && read_statuses(proxies, count, replies, &error);
    out->values[LAB_COUNTER_FEEDER_LAG_MS] = out->values[LAB_COUNTER_FEEDER_EVENTS] = -1;
    out->values[LAB_COUNTER_READS_WAITING] = out->values[LAB_COUNTER_READS_WAITED] = -1;
    if (ok) {
        const bson_t *feeder = &replies[worker_runner(replies, count, "feeder")];
        out->values[LAB_COUNTER_FEEDER_LAG_MS] = (double)number_at(feeder, lag_path, 3);
        out->values[LAB_COUNTER_FEEDER_EVENTS] = (double)number_at(feeder, events_path, 3);
        double waiting = 0, waited = 0;
        for (int index = 0; index < count && waiting >= 0 && waited >= 0; index++) {
            int64_t now_waiting = number_at(&replies[index], waiting_path, 1);
            int64_t have_waited = number_at(&replies[index], waited_path, 3);
            waiting = now_waiting >= 0 ? waiting + (double)now_waiting : -1;
            waited = have_waited >= 0 ? waited + (double)have_waited : -1;
        }
        out->values[LAB_COUNTER_READS_WAITING] = waiting;
        out->values[LAB_COUNTER_READS_WAITED] = waited;
    }
    if (count > 0) {
        destroy_statuses(replies, count);
    }
}

bool lab_proxies_view(mongoc_client_t *const *proxies, int count, lab_worker_view_t *out, bson_error_t *error)
{
    bson_t replies[LAB_MAX_PROXIES];
    bson_t empty = BSON_INITIALIZER;
    worker_view_init(out, &empty);
    count = count < LAB_MAX_PROXIES ? count : LAB_MAX_PROXIES;
    if (count <= 0) {
        return tc_error_set(error, TC_ERR_INTERNAL, "no proxy to ask for thermoclineStatus");
    }
    if (!read_statuses(proxies, count, replies, error)) {
        destroy_statuses(replies, count);
        return false;
    }
    lab_worker_view_cleanup(out);
    worker_view_init(out, &replies[0]);
    for (int index = 1; index < count && out->warm; index++) {
        lab_worker_view_t other;
        worker_view_init(&other, &replies[index]);
        out->warm = other.warm;
        lab_worker_view_cleanup(&other);
    }
    int feeder = worker_runner(replies, count, "feeder"), warmer = worker_runner(replies, count, "warmer");
    lab_worker_view_t runner;
    worker_view_init(&runner, &replies[feeder]);
    out->feeder_reported = runner.feeder_reported;
    out->feeder_lag_ms = runner.feeder_lag_ms;
    lab_worker_view_cleanup(&runner);
    worker_view_init(&runner, &replies[warmer]);
    out->warmer_reported = runner.warmer_reported;
    out->warmer_copied = runner.warmer_copied;
    memcpy(out->warmer_state, runner.warmer_state, sizeof out->warmer_state);
    lab_worker_view_cleanup(&runner);
    destroy_statuses(replies, count);
    return true;
}

void lab_worker_view_cleanup(lab_worker_view_t *view)
{
    bson_destroy(&view->namespace_status);
}
