/* Unit tests for src/metrics/exposition.c: the text format's escaping, values,
 * histogram buckets, and the families a status document's table gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "metrics/exposition.h"

static void test_family_and_escaped_labels(void **state)
{
    (void)state;
    bson_string_t *out = bson_string_new(NULL);
    metrics_write_family(out, "x_total", METRICS_COUNTER, "a \\ help\nline");
    metrics_write_sample(out, "x_total", METRICS_LABELS({"ns", "a\"b\\c\nd"}, {"route", "fast"}), 12);
    metrics_write_sample(out, "x_total", METRICS_NO_LABELS, 0.25);
    assert_string_equal(out->str, "# HELP x_total a \\\\ help\\nline\n"
                                  "# TYPE x_total counter\n"
                                  "x_total{ns=\"a\\\"b\\\\c\\nd\",route=\"fast\"} 12\n"
                                  "x_total 0.25\n");
    bson_string_free(out, true);
}

static void test_special_values(void **state)
{
    (void)state;
    bson_string_t *out = bson_string_new(NULL);
    metrics_write_sample(out, "g", METRICS_NO_LABELS, NAN);
    metrics_write_sample(out, "g", METRICS_NO_LABELS, INFINITY);
    metrics_write_sample(out, "g", METRICS_NO_LABELS, -INFINITY);
    metrics_write_sample(out, "g", METRICS_NO_LABELS, 1e20);
    metrics_write_sample(out, "g", METRICS_NO_LABELS, -3);
    assert_string_equal(out->str, "g NaN\ng +Inf\ng -Inf\ng 1e+20\ng -3\n");
    bson_string_free(out, true);
}

static void test_histogram_is_cumulative(void **state)
{
    (void)state;
    metrics_histogram_t histogram = {0};
    metrics_histogram_observe(&histogram, 0.0001); /* on a bound: that bucket (le) */
    metrics_histogram_observe(&histogram, 0.003);
    metrics_histogram_observe(&histogram, 0.003);
    metrics_histogram_observe(&histogram, 60);     /* past the last bound: +Inf only */
    bson_string_t *out = bson_string_new(NULL);
    metrics_write_histogram(out, "d", METRICS_LABELS({"route", "fast"}), &histogram);
    assert_non_null(strstr(out->str, "d_bucket{route=\"fast\",le=\"0.0001\"} 1\n"));
    assert_non_null(strstr(out->str, "d_bucket{route=\"fast\",le=\"0.0025\"} 1\n"));
    assert_non_null(strstr(out->str, "d_bucket{route=\"fast\",le=\"0.005\"} 3\n"));
    assert_non_null(strstr(out->str, "d_bucket{route=\"fast\",le=\"10\"} 3\n"));
    assert_non_null(strstr(out->str, "d_bucket{route=\"fast\",le=\"+Inf\"} 4\n"));
    assert_non_null(strstr(out->str, "d_sum{route=\"fast\"} 60.006100000000004\n"));
    assert_non_null(strstr(out->str, "d_count{route=\"fast\"} 4\n"));
    bson_string_free(out, true);
}

static void test_fields_from_documents(void **state)
{
    (void)state;
    bson_t *first = BCON_NEW("feeder", "{", "lagMillis", BCON_INT64(1500), "ok", BCON_BOOL(true), "}");
    bson_t *second = BCON_NEW("feeder", "{", "lagMillis", BCON_DOUBLE(250), "}");
    bson_t *third = BCON_NEW("feeder", "{", "lagMillis", BCON_UTF8("not a number"), "}");
    const metrics_source_t sources[] = {
        {first, {{"tier", "fast"}}, 1},
        {second, {{"tier", "archive"}}, 1},
        {third, {{"tier", "none"}}, 1},
    };
    const metrics_field_t fields[] = {
        {"lag_seconds", METRICS_GAUGE, "feeder.lagMillis", 0.001, "lag"},
        {"ok", METRICS_GAUGE, "feeder.ok", 1, "up"},
    };
    bson_string_t *out = bson_string_new(NULL);
    metrics_write_fields(out, fields, 2, sources, 3);
    assert_string_equal(out->str, "# HELP lag_seconds lag\n# TYPE lag_seconds gauge\n"
                                  "lag_seconds{tier=\"fast\"} 1.5\n"
                                  "lag_seconds{tier=\"archive\"} 0.25\n"
                                  "# HELP ok up\n# TYPE ok gauge\n"
                                  "ok{tier=\"fast\"} 1\n");
    bson_string_free(out, true);
    bson_destroy(first);
    bson_destroy(second);
    bson_destroy(third);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_and_escaped_labels),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_histogram_is_cumulative),
        cmocka_unit_test(test_fields_from_documents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
