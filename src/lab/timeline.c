/* Each second of a run beside bench's throughput: what the archive read, each
 * process's CPU, the feeder's lag, the reads held on the read-your-writes
 * barrier and the time each store's journal spent in fsync, from the samples
 * the lab takes every second. A tail episode (a stretch of high read p99) then
 * shows what moved with it, in the lab's JSON and in a plot. */
#include "lab/lab_private.h"

#include <math.h>
#include <stdio.h>

/* The sampled counter behind a series, and whether it is cumulative (a
 * per-second change) or a gauge (its value at the end of the second). */
typedef struct series_source {
    lab_counter_t counter;
    bool cumulative;
    double scale; /* CPU seconds per second -> percent of one core; microseconds -> ms */
} series_source_t;

static const series_source_t series_sources[LAB_SERIES_CPU_EACH_PROXY] = {
    [LAB_SERIES_ARCHIVE_PAGES_READ] = {LAB_COUNTER_PAGES_READ, true, 1.0},
    [LAB_SERIES_CPU_ARCHIVE] = {LAB_COUNTER_CPU_ARCHIVE, true, 100.0},
    [LAB_SERIES_CPU_FAST] = {LAB_COUNTER_CPU_FAST, true, 100.0},
    [LAB_SERIES_CPU_PROXY] = {LAB_COUNTER_CPU_PROXY, true, 100.0},
    [LAB_SERIES_FEEDER_LAG_MS] = {LAB_COUNTER_FEEDER_LAG_MS, false, 1.0},
    [LAB_SERIES_FEEDER_EVENTS] = {LAB_COUNTER_FEEDER_EVENTS, true, 1.0},
    [LAB_SERIES_READS_WAITED] = {LAB_COUNTER_READS_WAITED, true, 1.0},
    [LAB_SERIES_READS_WAITING] = {LAB_COUNTER_READS_WAITING, false, 1.0},
    [LAB_SERIES_JOURNAL_SYNC_ARCHIVE] = {LAB_COUNTER_JOURNAL_SYNC_US_ARCHIVE, true, 0.001},
    [LAB_SERIES_JOURNAL_SYNC_FAST] = {LAB_COUNTER_JOURNAL_SYNC_US_FAST, true, 0.001},
};

static series_source_t series_source(int series)
{
    if (series >= LAB_SERIES_CPU_EACH_PROXY) {
        return (series_source_t){LAB_COUNTER_CPU_EACH_PROXY + (series - LAB_SERIES_CPU_EACH_PROXY), true, 100.0};
    }
    return series_sources[series];
}

/* Whether every sample has the counter (a CPU counter of a child that ran
 * throughout; the proxy's counters in a run through it). */
static bool counter_sampled(const lab_counters_t *samples, size_t count, lab_counter_t counter)
{
    if (count < 2) {
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        if (samples[i].values[counter] < 0) {
            return false;
        }
    }
    return true;
}

void lab_timeline_compute(lab_run_t *run, const lab_counters_t *samples, size_t count)
{
    lab_timeline_cleanup(run);
    for (int series = 0; series < LAB_SERIES_COUNT; series++) {
        series_source_t source = series_source(series);
        lab_counter_t counter = source.counter;
        bool beyond_proxies = series >= LAB_SERIES_CPU_EACH_PROXY + run->proxy_count;
        if (run->second_count <= 0 || beyond_proxies || !counter_sampled(samples, count, counter)) {
            continue;
        }
        double *values = bson_malloc0((size_t)run->second_count * sizeof *values);
        for (int second = 0; second < run->second_count; second++) {
            int64_t start = run->started_at_ms + (int64_t)second * 1000, end = start + 1000;
            double at_end = lab_counter_at(samples, count, end, counter);
            values[second] = source.cumulative ? (at_end - lab_counter_at(samples, count, start, counter)) * source.scale
                                               : at_end;
        }
        run->series[series] = values;
    }
}

void lab_timeline_cleanup(lab_run_t *run)
{
    for (int series = 0; series < LAB_SERIES_COUNT; series++) {
        bson_free(run->series[series]);
        run->series[series] = NULL;
    }
}

static void append_series(bson_t *parent, const char *key, const double *values, int count)
{
    bson_t array;
    char index[16];
    const char *index_text;
    if (values == NULL) {
        return;
    }
    BSON_APPEND_ARRAY_BEGIN(parent, key, &array);
    for (int second = 0; second < count; second++) {
        bson_uint32_to_string((uint32_t)second, &index_text, index, sizeof index);
        if (isfinite(values[second])) {
            bson_append_double(&array, index_text, -1, round(values[second] * 100) / 100);
        } else {
            bson_append_null(&array, index_text, -1);
        }
    }
    bson_append_array_end(parent, &array);
}

void lab_timeline_append_json(bson_t *parent, const char *key, const lab_run_t *run)
{
    bson_t timeline, cpu;
    if (run->second_count <= 0 || run->ops_series == NULL) {
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(parent, key, &timeline);
    append_series(&timeline, "ops", run->ops_series, run->second_count);
    append_series(&timeline, "read_p99_ms", run->read_p99_series, run->second_count);
    append_series(&timeline, "archive_pages_read", run->series[LAB_SERIES_ARCHIVE_PAGES_READ], run->second_count);
    BSON_APPEND_DOCUMENT_BEGIN(&timeline, "cpu_percent", &cpu);
    append_series(&cpu, "archive", run->series[LAB_SERIES_CPU_ARCHIVE], run->second_count);
    append_series(&cpu, "fast", run->series[LAB_SERIES_CPU_FAST], run->second_count);
    append_series(&cpu, "proxy", run->series[LAB_SERIES_CPU_PROXY], run->second_count);
    if (run->proxy_count > 0) {
        bson_t proxies;
        BSON_APPEND_ARRAY_BEGIN(&cpu, "proxies", &proxies);
        for (int index = 0; index < run->proxy_count; index++) {
            char position[16];
            const char *position_text;
            bson_uint32_to_string((uint32_t)index, &position_text, position, sizeof position);
            const double *values = run->series[LAB_SERIES_CPU_EACH_PROXY + index];
            if (values != NULL) {
                append_series(&proxies, position_text, values, run->second_count);
            } else {
                bson_append_null(&proxies, position_text, -1);
            }
        }
        bson_append_array_end(&cpu, &proxies);
    }
    bson_append_document_end(&timeline, &cpu);
    append_series(&timeline, "feeder_lag_ms", run->series[LAB_SERIES_FEEDER_LAG_MS], run->second_count);
    append_series(&timeline, "feeder_events_applied", run->series[LAB_SERIES_FEEDER_EVENTS], run->second_count);
    append_series(&timeline, "reads_waited_for_feeder", run->series[LAB_SERIES_READS_WAITED], run->second_count);
    append_series(&timeline, "reads_waiting_for_feeder", run->series[LAB_SERIES_READS_WAITING], run->second_count);
    bson_t journal;
    BSON_APPEND_DOCUMENT_BEGIN(&timeline, "journal_sync_ms", &journal);
    append_series(&journal, "archive", run->series[LAB_SERIES_JOURNAL_SYNC_ARCHIVE], run->second_count);
    append_series(&journal, "fast", run->series[LAB_SERIES_JOURNAL_SYNC_FAST], run->second_count);
    bson_append_document_end(&timeline, &journal);
    bson_append_document_end(parent, &timeline);
}

/* A line of the plot for a series that may be missing (count 0 then). */
static lab_plot_line_t line_of(const char *label, const char *color, const double *values, int count)
{
    return (lab_plot_line_t){label, color, values, values != NULL ? count : 0, 1.5, false};
}

bool lab_timeline_plot(const lab_run_t *run, const char *title, const char *path, bson_error_t *error)
{
    int count = run->second_count;
    lab_plot_line_t throughput[] = {line_of("operations per second", "#2471a3", run->ops_series, count)};
    lab_plot_line_t tail[] = {line_of("read p99 (ms)", "#c0392b", run->read_p99_series, count)};
    lab_plot_line_t feeder[] = {
        line_of("feeder lag (ms)", "#8e44ad", run->series[LAB_SERIES_FEEDER_LAG_MS], count),
        line_of("reads waiting on the barrier", "#d35400", run->series[LAB_SERIES_READS_WAITING], count),
    };
    lab_plot_line_t journal[] = {
        line_of("archive", "#c0392b", run->series[LAB_SERIES_JOURNAL_SYNC_ARCHIVE], count),
        line_of("fast tier", "#27ae60", run->series[LAB_SERIES_JOURNAL_SYNC_FAST], count),
    };
    lab_plot_line_t archive[] = {
        line_of("archive pages read per second", "#7f8c8d", run->series[LAB_SERIES_ARCHIVE_PAGES_READ], count),
        line_of("feeder events applied per second", "#16a085", run->series[LAB_SERIES_FEEDER_EVENTS], count),
    };
    /* One proxy's line as it always was; with several, each proxy's. */
    static const char *const proxy_colors[LAB_MAX_PROXIES] = {"#2471a3", "#8e44ad", "#d4ac0d",
                                                              "#17a589", "#e67e22", "#5d6d7e"};
    char proxy_labels[LAB_MAX_PROXIES][24];
    lab_plot_line_t cpu[2 + LAB_MAX_PROXIES] = {
        line_of("archive", "#c0392b", run->series[LAB_SERIES_CPU_ARCHIVE], count),
        line_of("fast tier", "#27ae60", run->series[LAB_SERIES_CPU_FAST], count),
        line_of("proxy", proxy_colors[0], run->series[LAB_SERIES_CPU_PROXY], count),
    };
    size_t cpu_lines = 3;
    if (run->proxy_count > 1) {
        cpu_lines = 2;
        for (int index = 0; index < run->proxy_count && index < LAB_MAX_PROXIES; index++) {
            snprintf(proxy_labels[index], sizeof proxy_labels[index], "proxy %d", index + 1);
            cpu[cpu_lines++] = line_of(proxy_labels[index], proxy_colors[index],
                                       run->series[LAB_SERIES_CPU_EACH_PROXY + index], count);
        }
    }
    lab_plot_panel_t panels[] = {
        {"ops/s", throughput, 1},
        {"read p99 (ms)", tail, 1},
        {"feeder", feeder, 2},
        {"journal fsync (ms per s)", journal, 2},
        {"per second", archive, 2},
        {"CPU (% of a core)", cpu, cpu_lines},
    };
    return lab_plot_panels(path, title, "seconds of the measured window", panels, sizeof panels / sizeof panels[0],
                           error);
}
