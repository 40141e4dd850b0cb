/* The text exposition format: line oriented, `name{label="value",...} value`,
 * with `# HELP` and `# TYPE` before a family's first sample. */
#include "metrics/exposition.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const double metrics_histogram_bounds[METRICS_HISTOGRAM_BOUNDS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10,
};

static const char *type_name(metrics_type_t type)
{
    switch (type) {
    case METRICS_COUNTER:
        return "counter";
    case METRICS_GAUGE:
        return "gauge";
    case METRICS_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* Help text escapes backslash and newline; label values also the double quote. */
static void append_escaped(bson_string_t *out, const char *text, bool in_label)
{
    for (const char *c = text != NULL ? text : ""; *c != '\0'; c++) {
        if (*c == '\\') {
            bson_string_append(out, "\\\\");
        } else if (*c == '\n') {
            bson_string_append(out, "\\n");
        } else if (*c == '"' && in_label) {
            bson_string_append(out, "\\\"");
        } else {
            bson_string_append_c(out, *c);
        }
    }
}

/* Go's ParseFloat reads what %.17g writes; whole numbers stay whole (counters). */
static void append_value(bson_string_t *out, double value)
{
    if (isnan(value)) {
        bson_string_append(out, "NaN");
    } else if (isinf(value)) {
        bson_string_append(out, value > 0 ? "+Inf" : "-Inf");
    } else if (value == floor(value) && fabs(value) < 1e15) {
        bson_string_append_printf(out, "%.0f", value);
    } else {
        bson_string_append_printf(out, "%.17g", value);
    }
}

void metrics_write_family(bson_string_t *out, const char *name, metrics_type_t type, const char *help)
{
    bson_string_append_printf(out, "# HELP %s ", name);
    append_escaped(out, help, false);
    bson_string_append_printf(out, "\n# TYPE %s %s\n", name, type_name(type));
}

/* name{labels,le="bound"} value: extra (NULL: none) is one more label after labels. */
static void write_line(bson_string_t *out, const char *name, const char *suffix, const metrics_label_t *labels,
                       size_t label_count, const metrics_label_t *extra, double value)
{
    bson_string_append(out, name);
    bson_string_append(out, suffix);
    if (label_count > 0 || extra != NULL) {
        bson_string_append_c(out, '{');
        for (size_t i = 0; i <= label_count; i++) {
            const metrics_label_t *label = i < label_count ? &labels[i] : extra;
            if (label == NULL) {
                break;
            }
            bson_string_append_printf(out, "%s%s=\"", i > 0 ? "," : "", label->name);
            append_escaped(out, label->value, true);
            bson_string_append_c(out, '"');
        }
        bson_string_append_c(out, '}');
    }
    bson_string_append_c(out, ' ');
    append_value(out, value);
    bson_string_append_c(out, '\n');
}

void metrics_write_sample(bson_string_t *out, const char *name, const metrics_label_t *labels, size_t label_count,
                          double value)
{
    write_line(out, name, "", labels, label_count, NULL, value);
}

void metrics_write_single(bson_string_t *out, const char *name, metrics_type_t type, const char *help,
                          double value)
{
    metrics_write_family(out, name, type, help);
    metrics_write_sample(out, name, METRICS_NO_LABELS, value);
}

void metrics_histogram_observe(metrics_histogram_t *histogram, double seconds)
{
    size_t bucket = 0;
    while (bucket < METRICS_HISTOGRAM_BOUNDS && seconds > metrics_histogram_bounds[bucket]) {
        bucket++;
    }
    histogram->buckets[bucket]++;
    histogram->count++;
    histogram->sum += seconds;
}

void metrics_write_histogram(bson_string_t *out, const char *name, const metrics_label_t *labels,
                             size_t label_count, const metrics_histogram_t *histogram)
{
    uint64_t cumulative = 0;
    char bound[32];
    for (size_t i = 0; i <= METRICS_HISTOGRAM_BOUNDS; i++) {
        cumulative += histogram->buckets[i];
        if (i < METRICS_HISTOGRAM_BOUNDS) {
            snprintf(bound, sizeof bound, "%g", metrics_histogram_bounds[i]);
        } else {
            snprintf(bound, sizeof bound, "+Inf");
        }
        metrics_label_t le = {"le", bound};
        write_line(out, name, "_bucket", labels, label_count, &le, (double)cumulative);
    }
    write_line(out, name, "_sum", labels, label_count, NULL, histogram->sum);
    write_line(out, name, "_count", labels, label_count, NULL, (double)histogram->count);
}

bool metrics_document_number(const bson_t *document, const char *path, double *out)
{
    bson_iter_t iter, found;
    if (!bson_iter_init(&iter, document) || !bson_iter_find_descendant(&iter, path, &found)) {
        return false;
    }
    if (BSON_ITER_HOLDS_NUMBER(&found)) {
        *out = bson_iter_as_double(&found);
    } else if (BSON_ITER_HOLDS_BOOL(&found)) {
        *out = bson_iter_bool(&found) ? 1 : 0;
    } else if (BSON_ITER_HOLDS_DATE_TIME(&found)) {
        *out = (double)bson_iter_date_time(&found);
    } else {
        return false;
    }
    return true;
}

void metrics_write_fields(bson_string_t *out, const metrics_field_t *fields, size_t field_count,
                          const metrics_source_t *sources, size_t source_count)
{
    for (size_t i = 0; i < field_count; i++) {
        metrics_write_family(out, fields[i].name, fields[i].type, fields[i].help);
        for (size_t j = 0; j < source_count; j++) {
            double value;
            if (metrics_document_number(sources[j].document, fields[i].path, &value)) {
                metrics_write_sample(out, fields[i].name, sources[j].labels, sources[j].label_count,
                                     value * fields[i].scale);
            }
        }
    }
}
