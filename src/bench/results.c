/* What a run of `thermocline bench` produces (bench_results_t: merged latency
 * histograms, counts, the per-second series, CPU), the operation names, and the
 * clocks every part of bench reads. */
#include "bench/bench_private.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const operation_names[BENCH_OP_COUNT] = {"read", "update", "insert", "insert_many"};

const char *bench_operation_name(bench_operation_t operation)
{
    return operation_names[operation];
}

static double cpu_seconds(const struct timeval *value)
{
    return (double)value->tv_sec + (double)value->tv_usec / 1e6;
}

void bench_results_set_cpu(bench_results_t *results, const struct rusage *before, const struct rusage *after)
{
    results->cpu_user_seconds = cpu_seconds(&after->ru_utime) - cpu_seconds(&before->ru_utime);
    results->cpu_system_seconds = cpu_seconds(&after->ru_stime) - cpu_seconds(&before->ru_stime);
}

/* --- results ------------------------------------------------------------------------ */

bool bench_results_reserve_seconds(bench_results_t *results, int second_count, bool with_read_latency,
                                   bson_error_t *error)
{
    if (second_count <= results->second_capacity) {
        return true;
    }
    int capacity = results->second_capacity > 0 ? results->second_capacity : 16;
    while (capacity < second_count) {
        capacity *= 2;
    }
    bench_second_t *seconds = realloc(results->seconds, (size_t)capacity * sizeof *seconds);
    if (seconds == NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for the time series");
    }
    memset(seconds + results->second_capacity, 0,
           (size_t)(capacity - results->second_capacity) * sizeof *seconds);
    results->seconds = seconds;
    for (int second = results->second_capacity; second < capacity && with_read_latency; second++) {
        seconds[second].read_latency = bench_histogram_new(BENCH_HISTOGRAM_COARSE);
        if (seconds[second].read_latency == NULL) {
            results->second_capacity = second;
            return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for the time series");
        }
    }
    results->second_capacity = capacity;
    return true;
}

bool bench_results_init(bench_results_t *results, int second_count, bool with_read_latency, bson_error_t *error)
{
    memset(results, 0, sizeof *results);
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        results->operations[operation].latency = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
        if (results->operations[operation].latency == NULL) {
            return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for the histograms");
        }
    }
    if (!bench_results_reserve_seconds(results, second_count, with_read_latency, error)) {
        return false;
    }
    results->second_count = second_count;
    return true;
}

void bench_results_cleanup(bench_results_t *results)
{
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        bench_histogram_destroy(results->operations[operation].latency);
        results->operations[operation].latency = NULL;
    }
    for (int second = 0; second < results->second_capacity; second++) {
        bench_histogram_destroy(results->seconds[second].read_latency);
    }
    free(results->seconds);
    results->seconds = NULL;
    free(results->hosts);
    results->hosts = NULL;
    results->host_count = 0;
    results->second_count = 0;
    results->second_capacity = 0;
}

uint64_t bench_results_total(const bench_results_t *results)
{
    uint64_t total = 0;
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        if (operation != BENCH_OP_INSERT_MANY) {
            total += results->operations[operation].count;
        }
    }
    return total + results->documents_loaded;
}
