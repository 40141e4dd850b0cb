/* The store's Prometheus metrics (--metrics-listen): served by a thread of their
 * own (src/metrics/http.h), never by the network loop or a worker, with a storage
 * session of their own for WiredTiger's statistics. The numbers are serverStatus's,
 * read where it reads them (the opcounters, the server's connection counts, the
 * statistics cursor), under the names Percona's mongodb_exporter gives mongod's
 * (mongodb_ss_...), so the dashboards operators already have apply. */
#include "store/metrics.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "metrics/exposition.h"
#include "metrics/http.h"
#include "store/slow_disk.h"
#include "store/storage.h"

#include <ctype.h>
#include <stdatomic.h>
#include <string.h>

struct store_metrics {
    store_t *store;
    storage_session_t *session; /* used by the metrics thread only */
    metrics_thread_t *thread;
};

static void write_opcounters(const store_t *store, bson_string_t *out)
{
    const char *name = "mongodb_ss_opcounters";
    const struct {
        const char *type;
        const atomic_llong *count;
    } counters[] = {
        {"insert", &store->opcounters.insert}, {"query", &store->opcounters.query},
        {"update", &store->opcounters.update}, {"delete", &store->opcounters.delete_},
        {"getmore", &store->opcounters.getmore}, {"command", &store->opcounters.command},
    };
    metrics_write_family(out, name, METRICS_COUNTER, "serverStatus.opcounters: operations by type since start");
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        metrics_write_sample(out, name, METRICS_LABELS({"legacy_op_type", counters[i].type}),
                             (double)atomic_load(counters[i].count));
    }
}

static void write_connections(const store_t *store, bson_string_t *out)
{
    const char *name = "mongodb_ss_connections";
    server_connection_stats_t stats = server_connection_stats(store->server);
    metrics_write_family(out, name, METRICS_GAUGE,
                         "serverStatus.connections: current, available and totalCreated (since start)");
    metrics_write_sample(out, name, METRICS_LABELS({"conn_type", "current"}), (double)stats.current);
    metrics_write_sample(out, name, METRICS_LABELS({"conn_type", "available"}), (double)stats.available);
    metrics_write_sample(out, name, METRICS_LABELS({"conn_type", "totalCreated"}), (double)stats.total_created);
}

/* "bytes currently in the cache" -> mongodb_ss_wt_cache_bytes_currently_in_the_cache,
 * as the exporter turns serverStatus.wiredTiger.cache's keys into names. */
static void metric_name_of(const char *statistic, char *out, size_t size)
{
    size_t used = (size_t)snprintf(out, size, "mongodb_ss_wt_cache_");
    bool separator = true;
    for (const char *c = statistic; *c != '\0' && used + 1 < size; c++) {
        if (isalnum((unsigned char)*c)) {
            out[used++] = (char)tolower((unsigned char)*c);
            separator = false;
        } else if (!separator) {
            out[used++] = '_';
            separator = true;
        }
    }
    while (used > 0 && out[used - 1] == '_') {
        used--;
    }
    out[used] = '\0';
}

static bool write_cache(store_metrics_t *metrics, bson_string_t *out, bson_error_t *error)
{
    bson_t statistics = BSON_INITIALIZER;
    bson_iter_t cache, field;
    if (!storage_append_cache_statistics(metrics->session, &statistics, error)) {
        bson_destroy(&statistics);
        return false;
    }
    if (bson_iter_init_find(&cache, &statistics, "cache") && bson_iter_recurse(&cache, &field)) {
        while (bson_iter_next(&field)) {
            char name[160];
            metric_name_of(bson_iter_key(&field), name, sizeof name);
            metrics_write_single(out, name, METRICS_GAUGE, "serverStatus.wiredTiger.cache",
                                 (double)bson_iter_as_int64(&field));
        }
    }
    bson_destroy(&statistics);
    return true;
}

static const metrics_field_t latency_fields[] = {
    {"mongodb_ss_opLatencies_latency", METRICS_COUNTER, "latency", 1,
     "serverStatus.opLatencies: microseconds spent in the class's commands since start"},
    {"mongodb_ss_opLatencies_ops", METRICS_COUNTER, "ops", 1,
     "serverStatus.opLatencies: the class's commands since start"},
};

/* serverStatus.opLatencies by class (reads, writes, commands, transactions), read
 * from the document serverStatus builds. */
static void write_latencies(const store_t *store, bson_string_t *out)
{
    bson_t latencies = BSON_INITIALIZER;
    op_latency_append(&store->latencies, &latencies);
    metrics_source_t sources[8];
    bson_t documents[8];
    size_t count = 0;
    bson_iter_t iter;
    if (bson_iter_init(&iter, &latencies)) {
        while (bson_iter_next(&iter) && count < 8) {
            if (bson_view_of(&iter, &documents[count])) {
                sources[count] = (metrics_source_t){&documents[count], {{"op_type", bson_iter_key(&iter)}}, 1};
                count++;
            }
        }
    }
    metrics_write_fields(out, latency_fields, sizeof latency_fields / sizeof latency_fields[0], sources, count);
    bson_destroy(&latencies);
}

/* serverStatus.thermocline.readIops: the emulated volume under --read-iops. */
static void write_read_iops(bson_string_t *out)
{
    slow_disk_stats_t disk = slow_disk_stats();
    metrics_write_single(out, "thermocline_store_read_iops_cap", METRICS_GAUGE,
                         "--read-iops: data-file reads allowed per second (0: uncapped)", (double)disk.cap);
    metrics_write_single(out, "thermocline_store_disk_reads_total", METRICS_COUNTER, "data-file reads since start",
                         (double)disk.reads);
    metrics_write_single(out, "thermocline_store_disk_read_bytes_total", METRICS_COUNTER,
                         "bytes of data-file reads since start", (double)disk.bytes_read);
    metrics_write_single(out, "thermocline_store_disk_throttled_reads_total", METRICS_COUNTER,
                         "data-file reads that waited for the --read-iops cap", (double)disk.throttled_reads);
    metrics_write_single(out, "thermocline_store_disk_throttled_wait_seconds_total", METRICS_COUNTER,
                         "time data-file reads waited for the --read-iops cap",
                         (double)disk.throttled_wait_micros / 1e6);
}

static bool render(void *context, bson_string_t *out, bson_error_t *error)
{
    store_metrics_t *metrics = context;
    write_opcounters(metrics->store, out);
    write_connections(metrics->store, out);
    write_latencies(metrics->store, out);
    write_read_iops(out);
    metrics_write_single(out, "mongodb_ss_uptime", METRICS_GAUGE, "serverStatus.uptime: seconds since start",
                         (double)(clock_wall_ms() - metrics->store->start_time_ms) / 1000.0);
    return write_cache(metrics, out, error);
}

store_metrics_t *store_metrics_start(store_t *store, const char *host, int port, bson_error_t *error)
{
    store_metrics_t *metrics = bson_malloc0(sizeof *metrics);
    metrics->store = store;
    metrics->session = storage_session_new(store->storage, error);
    if (metrics->session != NULL) {
        metrics->thread = metrics_thread_start(host, port, render, metrics, error);
    }
    if (metrics->thread == NULL) {
        store_metrics_stop(metrics);
        return NULL;
    }
    return metrics;
}

void store_metrics_stop(store_metrics_t *metrics)
{
    if (metrics == NULL) {
        return;
    }
    metrics_thread_stop(metrics->thread);
    storage_session_destroy(metrics->session);
    bson_free(metrics);
}
