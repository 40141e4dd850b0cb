/* Unit tests for the pure parts of `thermocline lab` (src/lab): the archive's
 * counters between samples, the empty start's catch-up, bench's JSON report as
 * the lab reads it, number formatting, and the SVG it writes. */
#include "lab/lab_private.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* --- counters between samples -------------------------------------------------------- */

static void test_counter_interpolates_between_samples(void **state)
{
    (void)state;
    const lab_counters_t samples[] = {
        {.at_ms = 1000, .values = {[LAB_COUNTER_PAGES_READ] = 100, [LAB_COUNTER_DISK_READS] = 10}},
        {.at_ms = 2000, .values = {[LAB_COUNTER_PAGES_READ] = 300, [LAB_COUNTER_DISK_READS] = 20}},
        {.at_ms = 4000, .values = {[LAB_COUNTER_PAGES_READ] = 700, [LAB_COUNTER_DISK_READS] = 60}},
    };
    assert_float_equal(lab_counter_at(samples, 3, 1000, LAB_COUNTER_PAGES_READ), 100.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 3, 1500, LAB_COUNTER_PAGES_READ), 200.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 3, 3000, LAB_COUNTER_PAGES_READ), 500.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 3, 3000, LAB_COUNTER_DISK_READS), 40.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 3, 4000, LAB_COUNTER_DISK_READS), 60.0, 1e-9);
}

static void test_counter_outside_samples_takes_the_nearest(void **state)
{
    (void)state;
    const lab_counters_t samples[] = {
        {.at_ms = 1000, .values = {[LAB_COUNTER_PAGES_READ] = 100, [LAB_COUNTER_DISK_READS] = 10}},
        {.at_ms = 2000, .values = {[LAB_COUNTER_PAGES_READ] = 300, [LAB_COUNTER_DISK_READS] = 20}},
    };
    assert_float_equal(lab_counter_at(samples, 2, 0, LAB_COUNTER_PAGES_READ), 100.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 2, 99999, LAB_COUNTER_PAGES_READ), 300.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 0, 1000, LAB_COUNTER_PAGES_READ), 0.0, 1e-9);
}

static void test_counter_with_two_samples_at_one_instant(void **state)
{
    (void)state;
    const lab_counters_t samples[] = {
        {.at_ms = 1000, .values = {[LAB_COUNTER_PAGES_READ] = 100, [LAB_COUNTER_DISK_READS] = 0}},
        {.at_ms = 1000, .values = {[LAB_COUNTER_PAGES_READ] = 150, [LAB_COUNTER_DISK_READS] = 0}},
        {.at_ms = 3000, .values = {[LAB_COUNTER_PAGES_READ] = 350, [LAB_COUNTER_DISK_READS] = 0}},
    };
    /* No division by a zero span. */
    assert_float_equal(lab_counter_at(samples, 3, 1000, LAB_COUNTER_PAGES_READ), 100.0, 1e-9);
    assert_float_equal(lab_counter_at(samples, 3, 2000, LAB_COUNTER_PAGES_READ), 250.0, 1e-9);
}

/* --- a child's CPU time ------------------------------------------------------------------ */

static void test_cpu_seconds_of_a_running_process(void **state)
{
    (void)state;
    lab_process_t self = {.pid = getpid()};
    double before = lab_process_cpu_seconds(&self);
    assert_true(before >= 0.0);
    /* Burn 100 ms of CPU as the kernel counts it; /proc, in 10 ms ticks, must
     * show most of it. */
    struct timespec start, now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    volatile uint64_t sum = 0;
    do {
        for (int i = 0; i < 100000; i++) {
            sum += (uint64_t)i;
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    } while ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9 < 0.1);
    double after = lab_process_cpu_seconds(&self);
    assert_true(after >= before + 0.07);
    assert_true(after <= before + 5.0);
}

static void test_cpu_seconds_of_no_process(void **state)
{
    (void)state;
    lab_process_t none = {.pid = 0};
    assert_true(lab_process_cpu_seconds(&none) < 0.0);
}

/* --- the empty start's catch-up -------------------------------------------------------- */

static void test_catch_up_finds_the_first_window_at_the_reference(void **state)
{
    (void)state;
    const double series[] = {0, 0, 10, 10, 10, 10, 30, 30, 30, 30, 30, 30};
    lab_catch_up_t catch_up;
    lab_catch_up_compute(series, 12, 10.0, 2, &catch_up);
    assert_int_equal(catch_up.passed_after_seconds, 4); /* seconds 3 and 4 average 10 */
    assert_int_equal(catch_up.part_seconds, 2);          /* a sixth of 12 */
    assert_float_equal(catch_up.first_part_ops_per_second, 0.0, 1e-9);
    assert_float_equal(catch_up.last_part_ops_per_second, 30.0, 1e-9);

    lab_catch_up_compute(series, 12, 25.0, 3, &catch_up);
    assert_int_equal(catch_up.passed_after_seconds, 9); /* (10 + 30 + 30) / 3 < 25 at 8; 30 at 9 */
}

static void test_catch_up_that_never_happens(void **state)
{
    (void)state;
    const double series[] = {5, 6, 7};
    lab_catch_up_t catch_up;
    lab_catch_up_compute(series, 3, 100.0, 10, &catch_up); /* window longer than the run: the whole run */
    assert_int_equal(catch_up.passed_after_seconds, -1);
    assert_int_equal(catch_up.part_seconds, 1);
    assert_float_equal(catch_up.first_part_ops_per_second, 5.0, 1e-9);
    assert_float_equal(catch_up.last_part_ops_per_second, 7.0, 1e-9);

    lab_catch_up_compute(series, 0, 1.0, 10, &catch_up);
    assert_int_equal(catch_up.passed_after_seconds, -1);
    lab_catch_up_compute(series, 3, INFINITY, 1, &catch_up); /* no direct reference */
    assert_int_equal(catch_up.passed_after_seconds, -1);
}

/* --- numbers ------------------------------------------------------------------------------ */

static void test_grouped_numbers(void **state)
{
    (void)state;
    char text[32];
    assert_string_equal(lab_grouped(0, text, sizeof text), "0");
    assert_string_equal(lab_grouped(999, text, sizeof text), "999");
    assert_string_equal(lab_grouped(1000, text, sizeof text), "1,000");
    assert_string_equal(lab_grouped(1234567.4, text, sizeof text), "1,234,567");
    assert_string_equal(lab_grouped(23340, text, sizeof text), "23,340");
    assert_string_equal(lab_grouped(-1, text, sizeof text), "-");
    assert_string_equal(lab_grouped(NAN, text, sizeof text), "-");
}

/* --- bench's report ---------------------------------------------------------------------- */

static char *write_temporary(const char *text)
{
    char *path = bson_strdup("/tmp/test_lab_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* Each second of a run from samples taken about every second: per-second changes
 * of the cumulative counters, the gauges' values at each second's end, and no
 * series for a counter a sample lacks. */
static void test_timeline_is_computed_per_second(void **state)
{
    (void)state;
    lab_counters_t samples[3];
    memset(samples, 0, sizeof samples);
    for (int i = 0; i < 3; i++) {
        samples[i].at_ms = 10000 + i * 1000;
        samples[i].values[LAB_COUNTER_PAGES_READ] = 100.0 * i * i; /* 0, 100, 400 */
        samples[i].values[LAB_COUNTER_CPU_ARCHIVE] = 0.5 * i;       /* half a core */
        samples[i].values[LAB_COUNTER_CPU_FAST] = 0.25 * i;
        samples[i].values[LAB_COUNTER_CPU_PROXY] = -1;              /* no proxy */
        samples[i].values[LAB_COUNTER_FEEDER_LAG_MS] = i == 2 ? 800 : 0;
        samples[i].values[LAB_COUNTER_FEEDER_EVENTS] = -1;
        samples[i].values[LAB_COUNTER_READS_WAITED] = -1;
        samples[i].values[LAB_COUNTER_READS_WAITING] = -1;
    }
    lab_run_t run;
    memset(&run, 0, sizeof run);
    run.started_at_ms = 10000;
    run.second_count = 2;
    lab_timeline_compute(&run, samples, 3);
    assert_float_equal(run.series[LAB_SERIES_ARCHIVE_PAGES_READ][0], 100.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_ARCHIVE_PAGES_READ][1], 300.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_CPU_ARCHIVE][1], 50.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_CPU_FAST][0], 25.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_FEEDER_LAG_MS][0], 0.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_FEEDER_LAG_MS][1], 800.0, 1e-9);
    assert_null(run.series[LAB_SERIES_CPU_PROXY]);
    assert_null(run.series[LAB_SERIES_READS_WAITED]);
    lab_run_cleanup(&run);
}

/* With two proxies: each one's CPU series beside their sum, and none for the
 * proxies the run did not have. */
static void test_timeline_shows_each_proxy(void **state)
{
    (void)state;
    lab_counters_t samples[3];
    memset(samples, 0, sizeof samples);
    for (int i = 0; i < 3; i++) {
        samples[i].at_ms = 10000 + i * 1000;
        samples[i].values[LAB_COUNTER_CPU_EACH_PROXY] = 0.5 * i;      /* half a core */
        samples[i].values[LAB_COUNTER_CPU_EACH_PROXY + 1] = 0.25 * i; /* a quarter */
        samples[i].values[LAB_COUNTER_CPU_PROXY] = 0.75 * i;
    }
    lab_run_t run;
    memset(&run, 0, sizeof run);
    run.started_at_ms = 10000;
    run.second_count = 2;
    run.proxy_count = 2;
    lab_timeline_compute(&run, samples, 3);
    assert_float_equal(run.series[LAB_SERIES_CPU_PROXY][1], 75.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_CPU_EACH_PROXY][0], 50.0, 1e-9);
    assert_float_equal(run.series[LAB_SERIES_CPU_EACH_PROXY + 1][1], 25.0, 1e-9);
    assert_null(run.series[LAB_SERIES_CPU_EACH_PROXY + 2]);
    lab_run_cleanup(&run);
}

/* bench's operations per host, in the URI's order: through the lab's proxies,
 * each proxy's. */
static void test_bench_report_hosts_are_read(void **state)
{
    (void)state;
    char *path = write_temporary(
        "{\"started_at\": \"2026-11-02T10:00:01.250Z\", \"measured_seconds\": 1.0,"
        " \"operations\": {\"read\": {\"count\": 1000, \"ops_per_second\": 1000}},"
        " \"total\": {\"count\": 1000, \"ops_per_second\": 1000},"
        " \"hosts\": [{\"address\": \"127.0.0.1:1\", \"clients\": 2, \"operations\": 600, \"errors\": 0},"
        "             {\"address\": \"127.0.0.1:2\", \"clients\": 2, \"operations\": 400, \"errors\": 0}]}");
    lab_run_t run;
    bson_error_t error;
    memset(&run, 0, sizeof run);
    run.proxy_operations[2] = -1;
    assert_true(lab_read_bench_report(path, &run, &error));
    assert_int_equal(run.proxy_operations[0], 600);
    assert_int_equal(run.proxy_operations[1], 400);
    assert_int_equal(run.proxy_operations[2], -1); /* no third host */
    lab_run_cleanup(&run);
    unlink(path);
    bson_free(path);
}

static void test_bench_report_is_read(void **state)
{
    (void)state;
    char *path = write_temporary(
        "{\"workload\": \"store\", \"started_at\": \"2026-11-02T10:00:01.250Z\", \"measured_seconds\": 3.0,"
        " \"operations\": {"
        "  \"read\": {\"count\": 850, \"errors\": 1, \"not_found\": 2, \"ops_per_second\": 283.3,"
        "           \"latency_us\": {\"min\": 100, \"mean\": 900.5, \"p50\": 800, \"p95\": 2500, \"p99\": 4000,"
        "                            \"p99.9\": 9000, \"max\": 12000}},"
        "  \"update\": {\"count\": 100, \"errors\": 3, \"not_found\": 0, \"ops_per_second\": 33.3,"
        "             \"first_error\": \"WriteConflict\","
        "             \"latency_us\": {\"min\": 200, \"mean\": 1000, \"p50\": 1000, \"p95\": 3000, \"p99\": 5000,"
        "                              \"p99.9\": 7000, \"max\": 8000}},"
        "  \"insert\": {\"count\": 50, \"errors\": 0, \"not_found\": 0, \"ops_per_second\": 16.7,"
        "             \"latency_us\": {\"min\": 1, \"mean\": 1, \"p50\": 1, \"p95\": 1, \"p99\": 1, \"p99.9\": 1,"
        "                              \"max\": 1}}},"
        " \"total\": {\"count\": 1000, \"errors\": 4, \"not_found\": 2, \"ops_per_second\": 333.3},"
        " \"time_series\": [{\"second\": 1, \"read\": 200, \"update\": 20, \"insert\": 10, \"errors\": 0},"
        "                   {\"second\": 2, \"read\": 300, \"update\": 40, \"insert\": 20, \"errors\": 4,"
        "                    \"read_p99_us\": 4500},"
        "                   {\"second\": 3, \"read\": 350, \"update\": 40}]}");
    lab_run_t run;
    bson_error_t error;
    memset(&run, 0, sizeof run);
    assert_true(lab_read_bench_report(path, &run, &error));
    assert_int_equal(run.started_at_ms, INT64_C(1793613601250));
    assert_float_equal(run.measured_seconds, 3.0, 1e-9);
    assert_float_equal(run.ops_per_second, 333.3, 1e-9);
    assert_int_equal(run.operations, 1000);
    assert_int_equal(run.errors, 4);
    assert_int_equal(run.not_found, 2);
    assert_string_equal(run.first_error, "update WriteConflict");
    assert_float_equal(run.read_ops_per_second, 283.3, 1e-9);
    assert_float_equal(run.read.p95_ms, 2.5, 1e-9);
    assert_float_equal(run.read.p99_ms, 4.0, 1e-9);
    assert_float_equal(run.read.p999_ms, 9.0, 1e-9); /* "p99.9": a key with a dot */
    assert_float_equal(run.update.p99_ms, 5.0, 1e-9);
    assert_int_equal(run.second_count, 3);
    assert_float_equal(run.ops_series[0], 230.0, 1e-9);
    assert_float_equal(run.ops_series[1], 360.0, 1e-9);
    assert_float_equal(run.ops_series[2], 390.0, 1e-9); /* a missing operation counts as none */
    assert_true(isnan(run.read_p99_series[0]));
    assert_float_equal(run.read_p99_series[1], 4.5, 1e-9);
    lab_run_cleanup(&run);
    unlink(path);
    bson_free(path);
}

static void test_bench_report_without_a_window_is_refused(void **state)
{
    (void)state;
    char *path = write_temporary("{\"operations\": {}, \"started_at\": \"yesterday\", \"measured_seconds\": 1}");
    lab_run_t run;
    bson_error_t error;
    memset(&run, 0, sizeof run);
    assert_false(lab_read_bench_report(path, &run, &error));
    assert_non_null(strstr(error.message, "measured window"));
    unlink(path);
    bson_free(path);

    path = write_temporary("not json");
    assert_false(lab_read_bench_report(path, &run, &error));
    assert_non_null(strstr(error.message, "not JSON"));
    unlink(path);
    bson_free(path);

    assert_false(lab_read_bench_report("/nonexistent/report.json", &run, &error));
    assert_non_null(strstr(error.message, "cannot read"));
}

/* --- SVG ---------------------------------------------------------------------------------- */

static char *read_all(const char *path)
{
    size_t length;
    bson_error_t error;
    char *text = lab_read_file(path, &length, &error);
    assert_non_null(text);
    return text;
}

static int count_of(const char *text, const char *needle)
{
    int count = 0;
    for (const char *at = strstr(text, needle); at != NULL; at = strstr(at + 1, needle)) {
        count++;
    }
    return count;
}

static void test_bars_skip_missing_values_and_escape_labels(void **state)
{
    (void)state;
    char *path = write_temporary("");
    static const char *const categories[] = {"p50", "p95", "p99 <tail>"};
    const double direct[] = {0.5, 80.0, 1200.0};
    const double tiered[] = {0.2, NAN, -1.0};
    lab_plot_bars_t groups[] = {{"direct & archive", "#c00", direct}, {"tiered", "#00c", tiered}};
    bson_error_t error;
    assert_true(lab_plot_bars(path, "latency", "ms", true, categories, 3, groups, 2, &error));
    char *svg = read_all(path);
    assert_true(strncmp(svg, "<?xml", 5) == 0);
    assert_non_null(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(svg, "</svg>\n"));
    assert_int_equal(count_of(svg, "<title>"), 4); /* 3 direct bars, 1 tiered: NaN and -1 are missing */
    assert_non_null(strstr(svg, "direct &amp; archive"));
    assert_non_null(strstr(svg, "p99 &lt;tail&gt;"));
    assert_null(strstr(svg, "<tail>"));
    /* Log scale over whole decades: 0.1 to 10,000. */
    assert_non_null(strstr(svg, ">0.1</text>"));
    assert_non_null(strstr(svg, ">10,000</text>"));
    bson_free(svg);
    unlink(path);
    bson_free(path);
}

static void test_lines_draw_one_polyline_per_series(void **state)
{
    (void)state;
    char *path = write_temporary("");
    const double rising[] = {100, 200, 300, 400};
    const double flat[] = {250, 250, 250, 250};
    lab_plot_line_t lines[] = {{"tiered", "#00c", rising, 4, 2.0, false}, {"direct", "#c00", flat, 4, 1.5, true}};
    bson_error_t error;
    assert_true(lab_plot_lines(path, "throughput", "seconds", "ops/s", lines, 2, &error));
    char *svg = read_all(path);
    assert_int_equal(count_of(svg, "<polyline"), 2);
    assert_int_equal(count_of(svg, "stroke-dasharray"), 2); /* the dashed line and its legend entry */
    assert_non_null(strstr(svg, ">400</text>"));             /* the y axis reaches the largest value */
    bson_free(svg);
    unlink(path);
    bson_free(path);

    assert_false(lab_plot_lines("/nonexistent/plot.svg", "t", "x", "y", lines, 2, &error));
    assert_non_null(strstr(error.message, "cannot write the plot"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_interpolates_between_samples),
        cmocka_unit_test(test_counter_outside_samples_takes_the_nearest),
        cmocka_unit_test(test_counter_with_two_samples_at_one_instant),
        cmocka_unit_test(test_cpu_seconds_of_a_running_process),
        cmocka_unit_test(test_cpu_seconds_of_no_process),
        cmocka_unit_test(test_catch_up_finds_the_first_window_at_the_reference),
        cmocka_unit_test(test_catch_up_that_never_happens),
        cmocka_unit_test(test_grouped_numbers),
        cmocka_unit_test(test_bench_report_is_read),
        cmocka_unit_test(test_timeline_is_computed_per_second),
        cmocka_unit_test(test_timeline_shows_each_proxy),
        cmocka_unit_test(test_bench_report_hosts_are_read),
        cmocka_unit_test(test_bench_report_without_a_window_is_refused),
        cmocka_unit_test(test_bars_skip_missing_values_and_escape_labels),
        cmocka_unit_test(test_lines_draw_one_polyline_per_series),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
