/* The reports of `thermocline bench`: a human table on stdout and one JSON
 * document with every figure, including the per-second series. */
#include "bench/bench_private.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static const double report_percentiles[] = {50.0, 95.0, 99.0, 99.9};
static const char *const report_percentile_names[] = {"p50", "p95", "p99", "p99.9"};
#define REPORT_PERCENTILE_COUNT 4

/* An operation gets a row if the workload issues it or it happened anyway. */
static bool report_shows(const bench_options_t *options, const bench_results_t *results, int operation)
{
    const bench_workload_t *workload = options->workload;
    const bench_operation_result_t *result = &results->operations[operation];
    if (result->count > 0 || result->errors > 0) {
        return true;
    }
    switch (operation) {
    case BENCH_OP_READ:
        return workload->read_fraction > 0;
    case BENCH_OP_UPDATE:
        return workload->update_fraction > 0;
    case BENCH_OP_INSERT:
        return workload->insert_fraction > 0;
    default:
        return workload->is_load;
    }
}

static double report_seconds(const bench_results_t *results)
{
    return results->measured_ns > 0 ? (double)results->measured_ns / 1e9 : 0.0;
}

static double report_rate(uint64_t count, const bench_results_t *results)
{
    double seconds = report_seconds(results);
    return seconds > 0 ? (double)count / seconds : 0.0;
}

/* 1234567 -> "1,234,567" */
static const char *report_grouped(uint64_t value, char *buffer, size_t size)
{
    char digits[32];
    int length = snprintf(digits, sizeof digits, "%llu", (unsigned long long)value);
    size_t out = 0;
    for (int index = 0; index < length && out + 2 < size; index++) {
        if (index > 0 && (length - index) % 3 == 0) {
            buffer[out++] = ',';
        }
        buffer[out++] = digits[index];
    }
    buffer[out] = '\0';
    return buffer;
}

static double report_cpu_seconds(const bench_results_t *results)
{
    return results->cpu_user_seconds + results->cpu_system_seconds;
}

static double report_cpu_us_per_operation(const bench_results_t *results)
{
    uint64_t total = bench_results_total(results);
    return total > 0 ? report_cpu_seconds(results) * 1e6 / (double)total : 0.0;
}

/* The hosts the mix drove: one line, or with several a line per host with its
 * clients and operations (they add up to the total). */
static void report_hosts_table(FILE *stream, const bench_results_t *results)
{
    char operations[32], errors[32];
    if (results->host_count == 1 && results->replica_set[0] != '\0') {
        fprintf(stream, "  1 host: the primary of replica set %s, found through %s\n", results->replica_set,
                results->hosts[0].address);
        return;
    }
    if (results->host_count == 1) {
        fprintf(stream, "  1 host: %s\n", results->hosts[0].address);
        return;
    }
    fprintf(stream, "  %d hosts, the clients spread over them round-robin:\n", results->host_count);
    for (int host = 0; host < results->host_count; host++) {
        const bench_host_result_t *item = &results->hosts[host];
        fprintf(stream, "    %-32s %4d clients %12s operations %8s errors\n", item->address, item->client_count,
                report_grouped(item->operations, operations, sizeof operations),
                report_grouped(item->errors, errors, sizeof errors));
    }
}

void bench_report_table(FILE *stream, const bench_options_t *options, const bench_results_t *results)
{
    const bench_workload_t *workload = options->workload;
    char count[32], errors[32], missing[32], other[32];
    double seconds = report_seconds(results);
    fprintf(stream, "thermocline bench: %s (%s)\n", workload->name, workload->summary);
    fprintf(stream, "  %s.%s, %d threads, seed %llu\n", options->database, options->collection,
            options->thread_count, (unsigned long long)options->seed);
    if (workload->is_load) {
        fprintf(stream, "  loaded %s of %s documents in %.2f s: %.0f documents/s\n",
                report_grouped(results->documents_loaded, count, sizeof count),
                report_grouped((uint64_t)options->record_count, other, sizeof other), seconds,
                report_rate(results->documents_loaded, results));
    } else {
        if (options->target_ops > 0) {
            snprintf(other, sizeof other, "%lld ops/s", (long long)options->target_ops);
        } else {
            snprintf(other, sizeof other, "as fast as possible");
        }
        fprintf(stream, "  %.1f s measured after %.1f s warm-up, offered load %s\n", seconds,
                (double)options->warmup_ms / 1000.0, other);
        fprintf(stream, "  documents: %s at start, %s at end\n",
                report_grouped((uint64_t)results->records_at_start, count, sizeof count),
                report_grouped((uint64_t)results->records_at_end, other, sizeof other));
        report_hosts_table(stream, results);
    }
    fprintf(stream, "\n%-12s %12s %8s %8s %11s %9s %9s %9s %9s %9s\n", "operation", "count", "errors", "missing",
            "ops/s", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms");
    uint64_t total_count = 0, total_errors = 0, total_missing = 0;
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        if (!report_shows(options, results, operation)) {
            continue;
        }
        const bench_operation_result_t *result = &results->operations[operation];
        fprintf(stream, "%-12s %12s %8s %8s %11.1f", bench_operation_name(operation),
                report_grouped(result->count, count, sizeof count),
                report_grouped(result->errors, errors, sizeof errors),
                report_grouped(result->not_found, missing, sizeof missing), report_rate(result->count, results));
        for (int index = 0; index < REPORT_PERCENTILE_COUNT; index++) {
            fprintf(stream, " %9.3f",
                    (double)bench_histogram_percentile(result->latency, report_percentiles[index]) / 1000.0);
        }
        fprintf(stream, " %9.3f\n", (double)result->latency->maximum / 1000.0);
        total_count += result->count;
        total_errors += result->errors;
        total_missing += result->not_found;
    }
    if (!workload->is_load) {
        fprintf(stream, "%-12s %12s %8s %8s %11.1f\n", "total", report_grouped(total_count, count, sizeof count),
                report_grouped(total_errors, errors, sizeof errors),
                report_grouped(total_missing, missing, sizeof missing), report_rate(total_count, results));
    }
    fprintf(stream,
            "\ngenerator CPU: %.2f s (user %.2f, system %.2f) over %.2f s = %.2f cores, %.1f us per %s\n",
            report_cpu_seconds(results), results->cpu_user_seconds, results->cpu_system_seconds, seconds,
            seconds > 0 ? report_cpu_seconds(results) / seconds : 0.0, report_cpu_us_per_operation(results),
            workload->is_load ? "document" : "operation");
}

/* --- JSON --------------------------------------------------------------------------- */

static void json_append_operation(bson_t *parent, const char *name, const bench_operation_result_t *result,
                                  const bench_results_t *results)
{
    bson_t document, latency;
    BSON_APPEND_DOCUMENT_BEGIN(parent, name, &document);
    BSON_APPEND_INT64(&document, "count", (int64_t)result->count);
    BSON_APPEND_INT64(&document, "errors", (int64_t)result->errors);
    BSON_APPEND_INT64(&document, "not_found", (int64_t)result->not_found);
    BSON_APPEND_DOUBLE(&document, "ops_per_second", report_rate(result->count, results));
    BSON_APPEND_DOCUMENT_BEGIN(&document, "latency_us", &latency);
    BSON_APPEND_INT64(&latency, "min", (int64_t)bench_histogram_min(result->latency));
    BSON_APPEND_DOUBLE(&latency, "mean", bench_histogram_mean(result->latency));
    for (int index = 0; index < REPORT_PERCENTILE_COUNT; index++) {
        BSON_APPEND_INT64(&latency, report_percentile_names[index],
                          (int64_t)bench_histogram_percentile(result->latency, report_percentiles[index]));
    }
    BSON_APPEND_INT64(&latency, "max", (int64_t)result->latency->maximum);
    bson_append_document_end(&document, &latency);
    if (result->first_error[0] != '\0') {
        BSON_APPEND_UTF8(&document, "first_error", result->first_error);
    }
    bson_append_document_end(parent, &document);
}

static void json_append_time_series(bson_t *parent, const bench_options_t *options,
                                    const bench_results_t *results)
{
    bson_t array, row;
    char key[16];
    const char *key_text;
    BSON_APPEND_ARRAY_BEGIN(parent, "time_series", &array);
    for (int second = 0; second < results->second_count; second++) {
        const bench_second_t *slot = &results->seconds[second];
        bson_uint32_to_string((uint32_t)second, &key_text, key, sizeof key);
        bson_append_document_begin(&array, key_text, -1, &row);
        BSON_APPEND_INT32(&row, "second", second + 1);
        if (options->workload->is_load) {
            BSON_APPEND_INT64(&row, "documents", (int64_t)slot->operations[BENCH_OP_INSERT]);
        } else {
            uint64_t errors = 0;
            for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
                errors += slot->errors[operation];
                if (report_shows(options, results, operation)) {
                    BSON_APPEND_INT64(&row, bench_operation_name(operation), (int64_t)slot->operations[operation]);
                }
            }
            BSON_APPEND_INT64(&row, "errors", (int64_t)errors);
            if (slot->read_latency != NULL && slot->read_latency->total > 0) {
                BSON_APPEND_INT64(&row, "read_p99_us", (int64_t)bench_histogram_percentile(slot->read_latency, 99.0));
            } else if (options->workload->read_fraction > 0) {
                BSON_APPEND_NULL(&row, "read_p99_us");
            }
        }
        bson_append_document_end(&array, &row);
    }
    bson_append_array_end(parent, &array);
}

/* The mix's hosts: [{address, clients, operations, errors}], in the URI's order;
 * the operations add up to total.count. Absent for the load (libmongoc's). */
static void json_append_hosts(bson_t *parent, const bench_results_t *results)
{
    bson_t array, row;
    char key[16];
    const char *key_text;
    if (results->host_count == 0) {
        return;
    }
    if (results->replica_set[0] != '\0') {
        BSON_APPEND_UTF8(parent, "replica_set", results->replica_set);
    }
    BSON_APPEND_ARRAY_BEGIN(parent, "hosts", &array);
    for (int host = 0; host < results->host_count; host++) {
        const bench_host_result_t *item = &results->hosts[host];
        bson_uint32_to_string((uint32_t)host, &key_text, key, sizeof key);
        bson_append_document_begin(&array, key_text, -1, &row);
        BSON_APPEND_UTF8(&row, "address", item->address);
        BSON_APPEND_INT32(&row, "clients", item->client_count);
        BSON_APPEND_INT64(&row, "operations", (int64_t)item->operations);
        BSON_APPEND_INT64(&row, "errors", (int64_t)item->errors);
        bson_append_document_end(&array, &row);
    }
    bson_append_array_end(parent, &array);
}

bool bench_report_json(FILE *stream, const bench_options_t *options, const bench_results_t *results,
                       bson_error_t *error)
{
    const bench_workload_t *workload = options->workload;
    bson_t report = BSON_INITIALIZER;
    bson_t child;
    char started_at[64];
    time_t started_seconds = (time_t)(results->started_at_ms / 1000);
    struct tm started_tm;
    gmtime_r(&started_seconds, &started_tm);
    size_t length = strftime(started_at, sizeof started_at, "%Y-%m-%dT%H:%M:%S", &started_tm);
    snprintf(started_at + length, sizeof started_at - length, ".%03dZ", (int)(results->started_at_ms % 1000));

    BSON_APPEND_UTF8(&report, "workload", workload->name);
    BSON_APPEND_UTF8(&report, "description", workload->summary);
    BSON_APPEND_UTF8(&report, "database", options->database);
    BSON_APPEND_UTF8(&report, "collection", options->collection);
    BSON_APPEND_INT32(&report, "threads", options->thread_count);
    if (workload->is_load) {
        BSON_APPEND_INT64(&report, "records", options->record_count);
    } else {
        BSON_APPEND_DOUBLE(&report, "duration_seconds", (double)options->duration_ms / 1000.0);
        BSON_APPEND_DOUBLE(&report, "warmup_seconds", (double)options->warmup_ms / 1000.0);
        if (options->target_ops > 0) {
            BSON_APPEND_INT64(&report, "target_ops_per_second", options->target_ops);
        } else {
            BSON_APPEND_NULL(&report, "target_ops_per_second");
        }
    }
    BSON_APPEND_INT64(&report, "seed", (int64_t)options->seed);
    BSON_APPEND_UTF8(&report, "started_at", started_at);
    BSON_APPEND_DOUBLE(&report, "measured_seconds", report_seconds(results));
    BSON_APPEND_INT64(&report, "records_at_start", results->records_at_start);
    BSON_APPEND_INT64(&report, "records_at_end", results->records_at_end);
    if (workload->is_load) {
        BSON_APPEND_INT64(&report, "documents_loaded", (int64_t)results->documents_loaded);
        BSON_APPEND_INT64(&report, "documents_failed", (int64_t)results->documents_failed);
        BSON_APPEND_DOUBLE(&report, "documents_per_second", report_rate(results->documents_loaded, results));
    }

    uint64_t total_count = 0, total_errors = 0, total_missing = 0;
    BSON_APPEND_DOCUMENT_BEGIN(&report, "operations", &child);
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        if (report_shows(options, results, operation)) {
            const bench_operation_result_t *result = &results->operations[operation];
            json_append_operation(&child, bench_operation_name(operation), result, results);
            total_count += result->count;
            total_errors += result->errors;
            total_missing += result->not_found;
        }
    }
    bson_append_document_end(&report, &child);

    BSON_APPEND_DOCUMENT_BEGIN(&report, "total", &child);
    BSON_APPEND_INT64(&child, "count", (int64_t)total_count);
    BSON_APPEND_INT64(&child, "errors", (int64_t)total_errors);
    BSON_APPEND_INT64(&child, "not_found", (int64_t)total_missing);
    BSON_APPEND_DOUBLE(&child, "ops_per_second", report_rate(total_count, results));
    bson_append_document_end(&report, &child);

    /* What the generator itself costs, to show it is not the bottleneck. */
    double seconds = report_seconds(results);
    BSON_APPEND_DOCUMENT_BEGIN(&report, "generator", &child);
    BSON_APPEND_DOUBLE(&child, "cpu_user_seconds", results->cpu_user_seconds);
    BSON_APPEND_DOUBLE(&child, "cpu_system_seconds", results->cpu_system_seconds);
    BSON_APPEND_DOUBLE(&child, "cpu_seconds", report_cpu_seconds(results));
    BSON_APPEND_DOUBLE(&child, "cpu_cores", seconds > 0 ? report_cpu_seconds(results) / seconds : 0.0);
    BSON_APPEND_DOUBLE(&child, "cpu_us_per_op", report_cpu_us_per_operation(results));
    BSON_APPEND_UTF8(&child, "op", workload->is_load ? "document" : "operation");
    bson_append_document_end(&report, &child);

    json_append_hosts(&report, results);
    json_append_time_series(&report, options, results);

    size_t json_length;
    char *json = bson_as_relaxed_extended_json(&report, &json_length);
    bool ok = json != NULL && fwrite(json, 1, json_length, stream) == json_length && fputc('\n', stream) != EOF &&
              fflush(stream) == 0;
    if (!ok) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot write the JSON report: %s", strerror(errno));
    }
    bson_free(json);
    bson_destroy(&report);
    return ok;
}
