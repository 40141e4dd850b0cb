/* The lab's figures: read from each bench JSON report, the archive's page reads
 * over bench's measured window, the empty start's catch-up, then the comparison
 * table on stdout and every figure as JSON. */
#include "lab/lab_private.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* --- bench's report ----------------------------------------------------------------- */

static bool find_child(const bson_t *document, const char *key, bson_t *out)
{
    bson_iter_t iter;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, document, key) ||
        !(BSON_ITER_HOLDS_DOCUMENT(&iter) || BSON_ITER_HOLDS_ARRAY(&iter))) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_iter_document(&iter, &length, &data);
    } else {
        bson_iter_array(&iter, &length, &data);
    }
    return bson_init_static(out, data, length);
}

static double number_of(const bson_t *document, const char *key)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, document, key) && BSON_ITER_HOLDS_NUMBER(&iter)) {
        return bson_iter_as_double(&iter);
    }
    return 0.0;
}

/* One operation's rate, counts and latency (microseconds in bench's report). */
static double read_operation(const bson_t *operations, const char *name, lab_latency_t *latency, lab_run_t *run)
{
    bson_t operation, percentiles;
    if (!find_child(operations, name, &operation)) {
        return 0.0;
    }
    run->errors += (int64_t)number_of(&operation, "errors");
    bson_iter_t first_error;
    if (run->first_error[0] == '\0' && bson_iter_init_find(&first_error, &operation, "first_error") &&
        BSON_ITER_HOLDS_UTF8(&first_error)) {
        snprintf(run->first_error, sizeof run->first_error, "%s %s", name, bson_iter_utf8(&first_error, NULL));
    }
    run->not_found += (int64_t)number_of(&operation, "not_found");
    if (latency != NULL && find_child(&operation, "latency_us", &percentiles)) {
        latency->p50_ms = number_of(&percentiles, "p50") / 1000.0;
        latency->p95_ms = number_of(&percentiles, "p95") / 1000.0;
        latency->p99_ms = number_of(&percentiles, "p99") / 1000.0;
        latency->p999_ms = number_of(&percentiles, "p99.9") / 1000.0;
        latency->max_ms = number_of(&percentiles, "max") / 1000.0;
    }
    return number_of(&operation, "ops_per_second");
}

/* bench's hosts, in the order of its URI: through the proxies, each one's
 * operations (run->proxy_operations; untouched when bench gave no hosts). */
static void read_hosts(const bson_t *report, lab_run_t *run)
{
    bson_t hosts;
    bson_iter_t iter;
    if (!find_child(report, "hosts", &hosts) || !bson_iter_init(&iter, &hosts)) {
        return;
    }
    for (int index = 0; index < LAB_MAX_PROXIES && bson_iter_next(&iter); index++) {
        uint32_t length;
        const uint8_t *data;
        bson_t host;
        if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            bson_iter_document(&iter, &length, &data);
            if (bson_init_static(&host, data, length)) {
                run->proxy_operations[index] = (int64_t)number_of(&host, "operations");
            }
        }
    }
}

/* "2026-11-30T00:07:43.577Z" -> milliseconds since the epoch; -1 if malformed. */
static int64_t parse_utc_ms(const char *text)
{
    struct tm parts;
    int milliseconds = 0;
    memset(&parts, 0, sizeof parts);
    if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &parts.tm_year, &parts.tm_mon, &parts.tm_mday, &parts.tm_hour,
               &parts.tm_min, &parts.tm_sec, &milliseconds) != 7) {
        return -1;
    }
    parts.tm_year -= 1900;
    parts.tm_mon -= 1;
    return (int64_t)timegm(&parts) * 1000 + milliseconds;
}

bool lab_read_bench_report(const char *path, lab_run_t *run, bson_error_t *error)
{
    size_t length;
    bson_t report, operations, series;
    bson_error_t json_error;
    bson_iter_t iter;
    char *text = lab_read_file(path, &length, error);
    if (text == NULL) {
        return false;
    }
    bool parsed = bson_init_from_json(&report, text, (ssize_t)length, &json_error);
    bson_free(text);
    if (!parsed) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "bench's report %s is not JSON: %s", path,
                            json_error.message);
    }
    bool ok = false;
    if (!find_child(&report, "operations", &operations) || !bson_iter_init_find(&iter, &report, "started_at") ||
        !BSON_ITER_HOLDS_UTF8(&iter)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "bench's report %s lacks operations or started_at", path);
        goto done;
    }
    run->started_at_ms = parse_utc_ms(bson_iter_utf8(&iter, NULL));
    run->measured_seconds = number_of(&report, "measured_seconds");
    if (run->started_at_ms < 0 || run->measured_seconds <= 0) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "bench's report %s has no measured window", path);
        goto done;
    }
    run->read_ops_per_second = read_operation(&operations, "read", &run->read, run);
    run->update_ops_per_second = read_operation(&operations, "update", &run->update, run);
    run->insert_ops_per_second = read_operation(&operations, "insert", NULL, run);
    bson_t total;
    if (find_child(&report, "total", &total)) {
        run->ops_per_second = number_of(&total, "ops_per_second");
        run->operations = (int64_t)number_of(&total, "count");
    }
    read_hosts(&report, run);
    bson_t generator;
    run->cpu_us_per_operation[LAB_ROLE_BENCH] =
        find_child(&report, "generator", &generator) ? number_of(&generator, "cpu_us_per_op") : -1.0;
    if (find_child(&report, "time_series", &series)) {
        int count = (int)bson_count_keys(&series);
        run->ops_series = bson_malloc0(((size_t)count + 1) * sizeof *run->ops_series);
        run->read_p99_series = bson_malloc0(((size_t)count + 1) * sizeof *run->read_p99_series);
        run->second_count = 0;
        bson_iter_t row_iter;
        bson_iter_init(&row_iter, &series);
        while (bson_iter_next(&row_iter) && run->second_count < count) {
            uint32_t row_length;
            const uint8_t *row_data;
            bson_t row;
            if (!BSON_ITER_HOLDS_DOCUMENT(&row_iter)) {
                continue;
            }
            bson_iter_document(&row_iter, &row_length, &row_data);
            if (bson_init_static(&row, row_data, row_length)) {
                bson_iter_t p99;
                run->read_p99_series[run->second_count] =
                    bson_iter_init_find(&p99, &row, "read_p99_us") && BSON_ITER_HOLDS_NUMBER(&p99)
                        ? bson_iter_as_double(&p99) / 1000.0
                        : NAN;
                run->ops_series[run->second_count++] =
                    number_of(&row, "read") + number_of(&row, "update") + number_of(&row, "insert");
            }
        }
    }
    ok = true;
done:
    bson_destroy(&report);
    return ok;
}

double lab_counter_at(const lab_counters_t *samples, size_t count, int64_t at_ms, lab_counter_t counter)
{
#define VALUE(index) (samples[index].values[counter])
    if (count == 0) {
        return 0.0;
    }
    if (at_ms <= samples[0].at_ms) {
        return VALUE(0);
    }
    for (size_t i = 1; i < count; i++) {
        if (at_ms <= samples[i].at_ms) {
            double span = (double)(samples[i].at_ms - samples[i - 1].at_ms);
            double share = span > 0 ? (double)(at_ms - samples[i - 1].at_ms) / span : 1.0;
            return VALUE(i - 1) + (VALUE(i) - VALUE(i - 1)) * share;
        }
    }
    return VALUE(count - 1);
#undef VALUE
}

void lab_catch_up_compute(const double *series, int count, double reference, int window_seconds,
                          lab_catch_up_t *out)
{
    memset(out, 0, sizeof *out);
    out->passed_after_seconds = -1;
    if (count <= 0) {
        return;
    }
    if (window_seconds > count) {
        window_seconds = count;
    }
    if (window_seconds < 1) {
        window_seconds = 1;
    }
    double window_sum = 0;
    for (int second = 0; second < count; second++) {
        window_sum += series[second];
        if (second >= window_seconds) {
            window_sum -= series[second - window_seconds];
        }
        if (second + 1 >= window_seconds && window_sum / window_seconds >= reference) {
            out->passed_after_seconds = second + 1;
            break;
        }
    }
    /* The proof of concept reported the first and last 5 minutes of 30: a sixth. */
    out->part_seconds = count / 6 > 0 ? count / 6 : 1;
    double first = 0, last = 0;
    for (int second = 0; second < out->part_seconds; second++) {
        first += series[second];
        last += series[count - 1 - second];
    }
    out->first_part_ops_per_second = first / out->part_seconds;
    out->last_part_ops_per_second = last / out->part_seconds;
}

/* --- the table ---------------------------------------------------------------------- */

const char *lab_grouped(double value, char *out, size_t size)
{
    char digits[32];
    if (!isfinite(value) || value < 0) {
        snprintf(out, size, "-");
        return out;
    }
    int length = snprintf(digits, sizeof digits, "%.0f", value);
    size_t used = 0;
    for (int i = 0; i < length && used + 2 < size; i++) {
        if (i > 0 && (length - i) % 3 == 0) {
            out[used++] = ',';
        }
        out[used++] = digits[i];
    }
    out[used] = '\0';
    return out;
}

static const char *format_ratio(double tiered, double direct, char *out, size_t size)
{
    if (direct > 0 && isfinite(tiered / direct)) {
        snprintf(out, size, "%.2fx", tiered / direct);
    } else {
        snprintf(out, size, "-");
    }
    return out;
}

static void print_row(FILE *stream, const char *workload, const char *mode, const lab_run_t *run)
{
    char ops[32], pages[32];
    if (!run->attempted) {
        fprintf(stream, "%-13s %-14s %s\n", workload, mode, "not run");
        return;
    }
    if (!run->ok) {
        fprintf(stream, "%-13s %-14s failed: %s\n", workload, mode, run->failure);
        return;
    }
    fprintf(stream, "%-13s %-14s %9s %12.1f %12.1f %14.1f %18s\n", workload, mode,
            lab_grouped(run->ops_per_second, ops, sizeof ops), run->read.p95_ms, run->read.p99_ms,
            run->update.p99_ms, lab_grouped(run->archive_pages_read_per_second, pages, sizeof pages));
}

static void print_ratio_row(FILE *stream, const lab_run_t *direct, const lab_run_t *tiered)
{
    char a[16], b[16], c[16], d[16], e[16];
    if (!direct->ok || !tiered->ok) {
        return;
    }
    fprintf(stream, "%-13s %-14s %9s %12s %12s %14s %18s\n", "", "tiered/direct",
            format_ratio(tiered->ops_per_second, direct->ops_per_second, a, sizeof a),
            format_ratio(tiered->read.p95_ms, direct->read.p95_ms, b, sizeof b),
            format_ratio(tiered->read.p99_ms, direct->read.p99_ms, c, sizeof c),
            format_ratio(tiered->update.p99_ms, direct->update.p99_ms, d, sizeof d),
            format_ratio(tiered->archive_pages_read_per_second, direct->archive_pages_read_per_second, e, sizeof e));
}

const lab_run_t *lab_direct_store(const lab_t *lab)
{
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        if (strcmp(lab->workloads[i], "store") == 0) {
            return &lab->direct[i];
        }
    }
    return NULL;
}

static void print_empty_start(FILE *stream, const lab_t *lab)
{
    const lab_run_t *run = &lab->empty_start;
    const lab_run_t *reference = lab_direct_store(lab);
    char ops[32], direct_ops[32], first[32], last[32];
    if (!run->attempted) {
        return;
    }
    fprintf(stream, "\nempty start: store through the proxy from an empty fast tier, %.0f s measured from the first "
                    "second\n", run->measured_seconds > 0 ? run->measured_seconds : (double)lab->settings.empty_start_ms / 1000.0);
    if (!run->ok) {
        fprintf(stream, "  failed: %s\n", run->failure);
        return;
    }
    bool have_reference = reference != NULL && reference->ok && reference->ops_per_second > 0;
    lab_catch_up_t catch_up;
    lab_catch_up_compute(run->ops_series, run->second_count, have_reference ? reference->ops_per_second : INFINITY,
                         10, &catch_up);
    fprintf(stream, "  %s ops/s on average", lab_grouped(run->ops_per_second, ops, sizeof ops));
    if (have_reference) {
        fprintf(stream, " against %s ops/s for store direct, after its warm-up (%.2fx)",
                lab_grouped(reference->ops_per_second, direct_ops, sizeof direct_ops),
                run->ops_per_second / reference->ops_per_second);
    }
    fprintf(stream, "; read p95 %.1f ms, update p99 %.1f ms\n", run->read.p95_ms, run->update.p99_ms);
    if (have_reference) {
        if (catch_up.passed_after_seconds >= 0) {
            fprintf(stream, "  its 10-second average passed direct after %d s\n", catch_up.passed_after_seconds);
        } else {
            fprintf(stream, "  its 10-second average never reached direct\n");
        }
    }
    fprintf(stream, "  first %d s: %s ops/s, last %d s: %s ops/s; documents warmed: ", catch_up.part_seconds,
            lab_grouped(catch_up.first_part_ops_per_second, first, sizeof first), catch_up.part_seconds,
            lab_grouped(catch_up.last_part_ops_per_second, last, sizeof last));
    if (run->documents_warmed >= 0) {
        fprintf(stream, "%s\n", lab_grouped((double)run->documents_warmed, ops, sizeof ops));
    } else {
        fprintf(stream, "not reported\n");
    }
}

/* The share of a tiered run's finds by _id that the fast tier could not answer
 * alone (pointReadsFromArchive over the fast-then-archive route, the first
 * proxy's, warm-up included): those reads pay the archive's latency. */
static void print_archive_point_read_share(FILE *stream, const char *name, const lab_run_t *run, bool *first)
{
    bson_t routes;
    if (!run->ok || !find_child(&run->proxy_namespace_status, "routes", &routes)) {
        return;
    }
    double point_reads = number_of(&routes, "fast-then-archive");
    if (point_reads <= 0) {
        return;
    }
    double from_archive = number_of(&run->proxy_namespace_status, "pointReadsFromArchive");
    if (*first) {
        fprintf(stream, "\nfinds by _id the fast tier lacked an id of, sent on to the archive, and the archive's "
                        "mean read latency (every read it served) in each tiered run:\n");
    }
    fprintf(stream, "  %-13s %5.1f%% of finds by _id", name, 100.0 * from_archive / point_reads);
    if (run->archive_read_mean_ms >= 0) {
        fprintf(stream, ", archive reads %.1f ms", run->archive_read_mean_ms);
    }
    fprintf(stream, "\n");
    *first = false;
}

static void print_archive_point_reads(FILE *stream, const lab_t *lab)
{
    bool first = true;
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        print_archive_point_read_share(stream, lab->workloads[i], &lab->tiered[i], &first);
    }
    print_archive_point_read_share(stream, "store fixed", &lab->fixed_tiered, &first);
}

static const char *const role_names[LAB_ROLE_COUNT] = {"archive", "fast", "proxy", "bench"};

static void print_cpu_row(FILE *stream, const char *workload, const char *mode, const lab_run_t *run)
{
    if (!run->ok) {
        return;
    }
    fprintf(stream, "%-13s %-14s", workload, mode);
    double total = 0;
    for (int role = 0; role < LAB_ROLE_COUNT; role++) {
        double micros = run->cpu_us_per_operation[role];
        if (micros >= 0) {
            fprintf(stream, " %9.1f", micros);
            total += micros;
        } else {
            fprintf(stream, " %9s", "-");
        }
    }
    fprintf(stream, " %9.1f\n", total);
}

/* One proxied run's row of the proxies' table: each proxy's CPU per operation
 * (of all the run's operations) and its share of them. */
static void print_proxies_row(FILE *stream, const char *workload, const char *mode, const lab_run_t *run)
{
    if (!run->ok || run->proxy_count == 0) {
        return;
    }
    fprintf(stream, "%-13s %-14s", workload, mode);
    for (int index = 0; index < run->proxy_count; index++) {
        double micros = run->proxy_cpu_us_per_operation[index];
        int64_t operations = run->proxy_operations[index];
        char share[16] = "-";
        if (operations >= 0 && run->operations > 0) {
            snprintf(share, sizeof share, "%.0f%%", 100.0 * (double)operations / (double)run->operations);
        }
        if (micros >= 0) {
            fprintf(stream, " %9.1f %5s", micros, share);
        } else {
            fprintf(stream, " %9s %5s", "-", share);
        }
    }
    fputc('\n', stream);
}

/* With several proxies: each one's CPU per operation (they add up to the proxy
 * column above) and the share of bench's operations it carried. */
static void print_proxies_table(FILE *stream, const lab_t *lab)
{
    fprintf(stream, "\neach proxy: CPU per operation in microseconds, and its share of the operations:\n");
    fprintf(stream, "%-13s %-14s", "workload", "run");
    for (int index = 0; index < lab->settings.proxy_count; index++) {
        char name[24];
        snprintf(name, sizeof name, "proxy %d", index + 1);
        fprintf(stream, " %15s", name);
    }
    fputc('\n', stream);
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        print_proxies_row(stream, lab->workloads[i], "tiered", &lab->tiered[i]);
    }
    print_proxies_row(stream, "store fixed", "tiered", &lab->fixed_tiered);
    print_proxies_row(stream, "empty start", "tiered", &lab->empty_start);
}

/* Where each operation's CPU goes: on two shared cores a tiered run is bound by
 * the sum of its processes' CPU per operation, a direct one by the archive's disk. */
static void print_cpu_table(FILE *stream, const lab_t *lab)
{
    fprintf(stream, "\nCPU per operation, microseconds (user + system, every thread, over the measured window):\n");
    fprintf(stream, "%-13s %-14s", "workload", "run");
    for (int role = 0; role < LAB_ROLE_COUNT; role++) {
        fprintf(stream, " %9s", role_names[role]);
    }
    fprintf(stream, " %9s\n", "total");
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        print_cpu_row(stream, lab->workloads[i], "direct", &lab->direct[i]);
        print_cpu_row(stream, "", "tiered", &lab->tiered[i]);
    }
    print_cpu_row(stream, "empty start", "tiered", &lab->empty_start);
    if (lab->settings.proxy_count > 1) {
        print_proxies_table(stream, lab);
    }
}

void lab_report_table(FILE *stream, const lab_t *lab)
{
    const lab_settings_t *settings = &lab->settings;
    char documents[32], iops[32];
    double data_mb = (double)lab->storage_bytes / 1048576.0;
    double cache_mb = (double)settings->archive_cache_bytes / 1048576.0;
    char syncs[48] = "";
    if (settings->sync_delay_ms > 0) {
        snprintf(syncs, sizeof syncs, ", every sync %lld ms slower", (long long)settings->sync_delay_ms);
    }
    fprintf(stream, "\nthermocline lab (%s): archive of %s documents, %.0f MB on disk = %.0fx its %.0f MB cache, "
                    "reads capped at %s/s%s;\n%d threads, %.0f s measured after %.0f s of warm-up per run, seed %llu\n\n",
            settings->preset, lab_grouped((double)lab->documents, documents, sizeof documents), data_mb,
            cache_mb > 0 ? data_mb / cache_mb : 0.0, cache_mb, lab_grouped((double)settings->read_iops, iops, sizeof iops),
            syncs, settings->thread_count, (double)settings->duration_ms / 1000.0, (double)settings->warmup_ms / 1000.0,
            (unsigned long long)settings->seed);
    if (lab->machine_before.measured && lab->machine_after.measured) {
        fprintf(stream, "machine, before the runs / after: a synced 4 KB write %.2f / %.2f ms (median), a loopback "
                        "round trip %.1f / %.1f us\n(the CPU-bound tiered runs and the fixed-load tail follow these; "
                        "compare runs of different days with them)\n\n",
                lab->machine_before.sync_median_ms, lab->machine_after.sync_median_ms,
                lab->machine_before.round_trip_us, lab->machine_after.round_trip_us);
    }
    if (settings->proxy_count > 1) {
        fprintf(stream, "tiered runs through %d proxies with one config, bench's clients spread over them "
                        "(the leases run each worker in one of them); proxy CPU is their sum\n\n",
                settings->proxy_count);
    }
    const lab_warm_up_t *warm_up = &lab->warm_up;
    if (warm_up->ok && warm_up->complete) {
        char copied[32];
        fprintf(stream, "fast tier: warmed once by the proxy's warmer (%s documents in %.1f s); every tiered run "
                        "starts from a copy\n\n",
                lab_grouped((double)warm_up->documents, copied, sizeof copied), warm_up->seconds);
    } else if (warm_up->attempted) {
        fprintf(stream, "fast tier: NOT warmed before the tiered runs (see the notes)\n\n");
    }
    fprintf(stream, "%-13s %-14s %9s %12s %12s %14s %18s\n", "workload", "run", "ops/s", "read p95 ms", "read p99 ms",
            "update p99 ms", "archive pages/s");
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        print_row(stream, lab->workloads[i], "direct", &lab->direct[i]);
        print_row(stream, "", "tiered", &lab->tiered[i]);
        print_ratio_row(stream, &lab->direct[i], &lab->tiered[i]);
    }
    fprintf(stream, "(tiered/direct: above 1 is more throughput; below 1 is lower latency or fewer archive page reads)\n");
    if (lab->fixed_target_ops > 0) {
        char target[32];
        fprintf(stream, "\nstore at a fixed %s ops/s offered (direct's maximum), latency from each operation's "
                        "intended start:\n",
                lab_grouped(lab->fixed_target_ops, target, sizeof target));
        print_row(stream, "store fixed", "direct", &lab->fixed_direct);
        print_row(stream, "", "tiered", &lab->fixed_tiered);
        print_ratio_row(stream, &lab->fixed_direct, &lab->fixed_tiered);
    }
    print_archive_point_reads(stream, lab);
    print_empty_start(stream, lab);
    print_cpu_table(stream, lab);
    if (lab->note_count > 0) {
        fprintf(stream, "\nnotes:\n");
        for (int i = 0; i < lab->note_count; i++) {
            fprintf(stream, "  - %s\n", lab->notes[i]);
        }
    }
}

/* --- JSON ----------------------------------------------------------------------------- */

static void append_number_or_null(bson_t *document, const char *key, double value, bool present)
{
    if (present && isfinite(value)) {
        BSON_APPEND_DOUBLE(document, key, value);
    } else {
        BSON_APPEND_NULL(document, key);
    }
}

static void append_latency(bson_t *parent, const char *key, const lab_latency_t *latency)
{
    bson_t child;
    BSON_APPEND_DOCUMENT_BEGIN(parent, key, &child);
    BSON_APPEND_DOUBLE(&child, "p50", latency->p50_ms);
    BSON_APPEND_DOUBLE(&child, "p95", latency->p95_ms);
    BSON_APPEND_DOUBLE(&child, "p99", latency->p99_ms);
    BSON_APPEND_DOUBLE(&child, "p99.9", latency->p999_ms);
    BSON_APPEND_DOUBLE(&child, "max", latency->max_ms);
    bson_append_document_end(parent, &child);
}

/* proxies: [{port, operations, cpu_us_per_op}], one per proxy bench's clients
 * were spread over, in order: the operations bench completed through each (they
 * add up to the run's operations) and its CPU per operation of the run. */
static void append_proxies(bson_t *parent, const lab_run_t *run)
{
    bson_t array, item;
    BSON_APPEND_ARRAY_BEGIN(parent, "proxies", &array);
    for (int index = 0; index < run->proxy_count; index++) {
        char key[16];
        const char *key_text;
        bson_uint32_to_string((uint32_t)index, &key_text, key, sizeof key);
        bson_append_document_begin(&array, key_text, -1, &item);
        BSON_APPEND_INT32(&item, "port", run->proxy_ports[index]);
        if (run->ok && run->proxy_operations[index] >= 0) {
            BSON_APPEND_INT64(&item, "operations", run->proxy_operations[index]);
        } else {
            BSON_APPEND_NULL(&item, "operations");
        }
        append_number_or_null(&item, "cpu_us_per_op", run->proxy_cpu_us_per_operation[index],
                              run->ok && run->proxy_cpu_us_per_operation[index] >= 0);
        bson_append_document_end(&array, &item);
    }
    bson_append_array_end(parent, &array);
}

static void append_run(bson_t *parent, const char *key, const lab_run_t *run, bool proxied)
{
    bson_t child;
    BSON_APPEND_DOCUMENT_BEGIN(parent, key, &child);
    BSON_APPEND_BOOL(&child, "ok", run->ok);
    if (!run->ok) {
        BSON_APPEND_UTF8(&child, "failure", run->attempted ? run->failure : "not run");
    }
    append_number_or_null(&child, "ops_per_second", run->ops_per_second, run->ok);
    append_number_or_null(&child, "read_p95_ms", run->read.p95_ms, run->ok);
    append_number_or_null(&child, "read_p99_ms", run->read.p99_ms, run->ok);
    append_number_or_null(&child, "update_p99_ms", run->update.p99_ms, run->ok);
    append_number_or_null(&child, "archive_pages_read_per_second", run->archive_pages_read_per_second, run->ok);
    append_number_or_null(&child, "archive_disk_reads_per_second", run->archive_disk_reads_per_second, run->ok);
    append_number_or_null(&child, "archive_read_mean_ms", run->archive_read_mean_ms,
                          run->ok && run->archive_read_mean_ms >= 0);
    append_number_or_null(&child, "round_trip_us", run->round_trip_us, run->round_trip_us >= 0);
    if (run->ok) {
        BSON_APPEND_DOUBLE(&child, "read_ops_per_second", run->read_ops_per_second);
        BSON_APPEND_DOUBLE(&child, "update_ops_per_second", run->update_ops_per_second);
        BSON_APPEND_DOUBLE(&child, "insert_ops_per_second", run->insert_ops_per_second);
        BSON_APPEND_INT64(&child, "operations", run->operations);
        BSON_APPEND_INT64(&child, "errors", run->errors);
        BSON_APPEND_INT64(&child, "not_found", run->not_found);
        if (run->first_error[0] != '\0') {
            BSON_APPEND_UTF8(&child, "first_error", run->first_error);
        }
        BSON_APPEND_DOUBLE(&child, "measured_seconds", run->measured_seconds);
        append_latency(&child, "read_latency_ms", &run->read);
        append_latency(&child, "update_latency_ms", &run->update);
        bson_t cpu;
        BSON_APPEND_DOCUMENT_BEGIN(&child, "cpu_us_per_op", &cpu);
        for (int role = 0; role < LAB_ROLE_COUNT; role++) {
            append_number_or_null(&cpu, role_names[role], run->cpu_us_per_operation[role],
                                  run->cpu_us_per_operation[role] >= 0);
        }
        bson_append_document_end(&child, &cpu);
    }
    if (proxied && run->attempted) {
        BSON_APPEND_BOOL(&child, "warmer_reported", run->warmer_reported);
        BSON_APPEND_BOOL(&child, "fast_tier_warm_at_start", run->fast_tier_warm);
        BSON_APPEND_DOUBLE(&child, "warm_wait_seconds", run->warm_wait_seconds);
        append_number_or_null(&child, "documents_warmed", (double)run->documents_warmed, run->documents_warmed >= 0);
        BSON_APPEND_BOOL(&child, "feeder_reported", run->feeder_reported);
        append_number_or_null(&child, "feeder_lag_ms_at_end", (double)run->feeder_lag_ms_at_end,
                              run->feeder_lag_ms_at_end >= 0);
        append_number_or_null(&child, "feeder_drain_seconds", run->feeder_drain_seconds,
                              run->feeder_drain_seconds >= 0);
        BSON_APPEND_DOCUMENT(&child, "proxy_status", &run->proxy_namespace_status);
        append_proxies(&child, run);
    }
    if (run->ok) {
        lab_timeline_append_json(&child, "per_second", run);
    }
    bson_append_document_end(parent, &child);
}

static void append_ratios(bson_t *parent, const lab_run_t *direct, const lab_run_t *tiered)
{
    bson_t child;
    bool both = direct->ok && tiered->ok;
    BSON_APPEND_DOCUMENT_BEGIN(parent, "tiered_over_direct", &child);
    append_number_or_null(&child, "ops_per_second", tiered->ops_per_second / direct->ops_per_second,
                          both && direct->ops_per_second > 0);
    append_number_or_null(&child, "read_p95_ms", tiered->read.p95_ms / direct->read.p95_ms,
                          both && direct->read.p95_ms > 0);
    append_number_or_null(&child, "read_p99_ms", tiered->read.p99_ms / direct->read.p99_ms,
                          both && direct->read.p99_ms > 0);
    append_number_or_null(&child, "update_p99_ms", tiered->update.p99_ms / direct->update.p99_ms,
                          both && direct->update.p99_ms > 0);
    append_number_or_null(&child, "archive_pages_read_per_second",
                          tiered->archive_pages_read_per_second / direct->archive_pages_read_per_second,
                          both && direct->archive_pages_read_per_second > 0);
    bson_append_document_end(parent, &child);
}

/* {sync_median_ms, sync_p99_ms, round_trip_us}, or null when not measured. */
static void append_machine_speed(bson_t *parent, const char *key, const lab_machine_speed_t *speed)
{
    if (!speed->measured) {
        bson_append_null(parent, key, -1);
        return;
    }
    bson_t child;
    bson_append_document_begin(parent, key, -1, &child);
    BSON_APPEND_DOUBLE(&child, "sync_median_ms", speed->sync_median_ms);
    BSON_APPEND_DOUBLE(&child, "sync_p99_ms", speed->sync_p99_ms);
    BSON_APPEND_DOUBLE(&child, "round_trip_us", speed->round_trip_us);
    bson_append_document_end(parent, &child);
}

static void append_settings(bson_t *report, const lab_t *lab)
{
    const lab_settings_t *settings = &lab->settings;
    bson_t child;
    BSON_APPEND_DOCUMENT_BEGIN(report, "settings", &child);
    BSON_APPEND_INT64(&child, "records", settings->record_count);
    BSON_APPEND_INT64(&child, "documents", lab->documents);
    BSON_APPEND_INT64(&child, "data_bytes", lab->data_bytes);
    BSON_APPEND_INT64(&child, "storage_bytes", lab->storage_bytes);
    BSON_APPEND_INT64(&child, "disk_free_bytes", lab->disk_free_bytes);
    bson_t machine;
    BSON_APPEND_DOCUMENT_BEGIN(&child, "machine", &machine);
    append_machine_speed(&machine, "before", &lab->machine_before);
    append_machine_speed(&machine, "after", &lab->machine_after);
    bson_append_document_end(&child, &machine);
    BSON_APPEND_INT64(&child, "archive_cache_bytes", (int64_t)settings->archive_cache_bytes);
    BSON_APPEND_DOUBLE(&child, "storage_to_cache_ratio",
                       settings->archive_cache_bytes > 0
                           ? (double)lab->storage_bytes / (double)settings->archive_cache_bytes : 0.0);
    BSON_APPEND_INT64(&child, "fast_cache_bytes", (int64_t)settings->fast_cache_bytes);
    BSON_APPEND_INT64(&child, "read_iops", settings->read_iops);
    BSON_APPEND_INT64(&child, "sync_delay_ms", settings->sync_delay_ms);
    BSON_APPEND_INT32(&child, "archive_workers", settings->archive_workers);
    BSON_APPEND_INT32(&child, "threads", settings->thread_count);
    BSON_APPEND_INT32(&child, "proxies", settings->proxy_count);
    BSON_APPEND_DOUBLE(&child, "warmup_seconds", (double)settings->warmup_ms / 1000.0);
    BSON_APPEND_DOUBLE(&child, "duration_seconds", (double)settings->duration_ms / 1000.0);
    BSON_APPEND_DOUBLE(&child, "empty_start_seconds", (double)settings->empty_start_ms / 1000.0);
    BSON_APPEND_INT64(&child, "seed", (int64_t)settings->seed);
    BSON_APPEND_UTF8(&child, "namespace", LAB_NAMESPACE);
    BSON_APPEND_UTF8(&child, "time_field", LAB_TIME_FIELD);
    BSON_APPEND_UTF8(&child, "max_age", LAB_MAX_AGE);
    bson_append_document_end(report, &child);
}

static void append_empty_start(bson_t *report, const lab_t *lab)
{
    const lab_run_t *run = &lab->empty_start;
    const lab_run_t *reference = lab_direct_store(lab);
    bool have_reference = reference != NULL && reference->ok && reference->ops_per_second > 0;
    bson_t child, series;
    BSON_APPEND_DOCUMENT_BEGIN(report, "empty_start", &child);
    append_run(&child, "run", run, true);
    append_number_or_null(&child, "direct_ops_per_second", have_reference ? reference->ops_per_second : 0,
                          have_reference);
    if (run->ok) {
        lab_catch_up_t catch_up;
        lab_catch_up_compute(run->ops_series, run->second_count,
                             have_reference ? reference->ops_per_second : INFINITY, 10, &catch_up);
        append_number_or_null(&child, "ops_per_second", run->ops_per_second, true);
        append_number_or_null(&child, "ratio_to_direct",
                              have_reference ? run->ops_per_second / reference->ops_per_second : 0, have_reference);
        append_number_or_null(&child, "passed_direct_after_seconds", catch_up.passed_after_seconds,
                              have_reference && catch_up.passed_after_seconds >= 0);
        BSON_APPEND_INT32(&child, "part_seconds", catch_up.part_seconds);
        BSON_APPEND_DOUBLE(&child, "first_part_ops_per_second", catch_up.first_part_ops_per_second);
        BSON_APPEND_DOUBLE(&child, "last_part_ops_per_second", catch_up.last_part_ops_per_second);
        append_number_or_null(&child, "documents_warmed", (double)run->documents_warmed, run->documents_warmed >= 0);
        BSON_APPEND_ARRAY_BEGIN(&child, "ops_per_second_series", &series);
        for (int second = 0; second < run->second_count; second++) {
            char key[16];
            const char *key_text;
            bson_uint32_to_string((uint32_t)second, &key_text, key, sizeof key);
            bson_append_double(&series, key_text, -1, run->ops_series[second]);
        }
        bson_append_array_end(&child, &series);
    }
    bson_append_document_end(report, &child);
}

static void append_warm_up(bson_t *report, const lab_warm_up_t *warm_up)
{
    bson_t child;
    BSON_APPEND_DOCUMENT_BEGIN(report, "warm_up", &child);
    BSON_APPEND_BOOL(&child, "ok", warm_up->ok);
    if (warm_up->attempted && !warm_up->ok) {
        BSON_APPEND_UTF8(&child, "failure", warm_up->failure);
    }
    BSON_APPEND_BOOL(&child, "warmer_reported", warm_up->warmer_reported);
    BSON_APPEND_BOOL(&child, "complete", warm_up->complete);
    BSON_APPEND_DOUBLE(&child, "seconds", warm_up->seconds);
    append_number_or_null(&child, "documents_warmed", (double)warm_up->documents, warm_up->documents >= 0);
    bson_append_document_end(report, &child);
}

bool lab_report_json(const lab_t *lab, const char *path, bson_error_t *error)
{
    bson_t report = BSON_INITIALIZER, workloads, notes;
    BSON_APPEND_UTF8(&report, "preset", lab->settings.preset);
    append_settings(&report, lab);
    BSON_APPEND_DOCUMENT_BEGIN(&report, "workloads", &workloads);
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        bson_t workload;
        BSON_APPEND_DOCUMENT_BEGIN(&workloads, lab->workloads[i], &workload);
        append_run(&workload, "direct", &lab->direct[i], false);
        append_run(&workload, "tiered", &lab->tiered[i], true);
        append_ratios(&workload, &lab->direct[i], &lab->tiered[i]);
        bson_append_document_end(&workloads, &workload);
    }
    bson_append_document_end(&report, &workloads);
    if (lab->fixed_target_ops > 0) {
        bson_t fixed;
        BSON_APPEND_DOCUMENT_BEGIN(&report, "fixed_load", &fixed);
        BSON_APPEND_UTF8(&fixed, "workload", "store");
        BSON_APPEND_DOUBLE(&fixed, "target_ops_per_second", lab->fixed_target_ops);
        append_run(&fixed, "direct", &lab->fixed_direct, false);
        append_run(&fixed, "tiered", &lab->fixed_tiered, true);
        append_ratios(&fixed, &lab->fixed_direct, &lab->fixed_tiered);
        bson_append_document_end(&report, &fixed);
    }
    append_warm_up(&report, &lab->warm_up);
    append_empty_start(&report, lab);
    BSON_APPEND_ARRAY_BEGIN(&report, "notes", &notes);
    for (int i = 0; i < lab->note_count; i++) {
        char key[16];
        const char *key_text;
        bson_uint32_to_string((uint32_t)i, &key_text, key, sizeof key);
        bson_append_utf8(&notes, key_text, -1, lab->notes[i], -1);
    }
    bson_append_array_end(&report, &notes);

    size_t length;
    char *text = bson_as_relaxed_extended_json(&report, &length);
    bool ok = text != NULL;
    if (!ok) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot turn the lab's report into JSON");
    } else {
        char *with_newline = bson_strdup_printf("%s\n", text);
        ok = lab_write_file(path, with_newline, error);
        bson_free(with_newline);
    }
    bson_free(text);
    bson_destroy(&report);
    return ok;
}
