/* Prometheus' text exposition format (version 0.0.4), written into a bson_string_t:
 * a family's `# HELP` and `# TYPE` lines, then its samples, which the caller keeps
 * together (the format wants every sample of a family after its TYPE line).
 *
 *   metrics_write_family(out, "thermocline_proxy_requests_total", METRICS_COUNTER, "...");
 *   metrics_write_sample(out, "thermocline_proxy_requests_total",
 *                        METRICS_LABELS({"namespace", ns}, {"route", "fast"}), 12);
 *
 * Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (the callers' constants do); label
 * values and help text are escaped here. */
#ifndef TC_METRICS_EXPOSITION_H
#define TC_METRICS_EXPOSITION_H

#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>

/* What a scrape's Content-Type says. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum metrics_type {
    METRICS_COUNTER,
    METRICS_GAUGE,
    METRICS_HISTOGRAM,
} metrics_type_t;

typedef struct metrics_label {
    const char *name;
    const char *value;
} metrics_label_t;

/* The labels of one sample as (array, count): METRICS_LABELS({"tier", "fast"}). */
#define METRICS_LABELS(...)                                                                                  \
    (const metrics_label_t[]){__VA_ARGS__},                                                                  \
        (sizeof((const metrics_label_t[]){__VA_ARGS__}) / sizeof(metrics_label_t))
#define METRICS_NO_LABELS NULL, 0

void metrics_write_family(bson_string_t *out, const char *name, metrics_type_t type, const char *help);

void metrics_write_sample(bson_string_t *out, const char *name, const metrics_label_t *labels, size_t label_count,
                          double value);

/* A family with one unlabelled sample. */
void metrics_write_single(bson_string_t *out, const char *name, metrics_type_t type, const char *help,
                          double value);

/* Latency in seconds, in fixed buckets from 100 µs to 10 s (their upper bounds in
 * metrics_histogram_bounds); the last bucket counts what is slower. Not
 * thread-safe: each owner observes from one thread. */
#define METRICS_HISTOGRAM_BOUNDS 16
extern const double metrics_histogram_bounds[METRICS_HISTOGRAM_BOUNDS];

typedef struct metrics_histogram {
    uint64_t buckets[METRICS_HISTOGRAM_BOUNDS + 1]; /* per bucket, not cumulative; the last: +Inf */
    uint64_t count;
    double sum;
} metrics_histogram_t;

void metrics_histogram_observe(metrics_histogram_t *histogram, double seconds);

/* The family's _bucket (cumulative, with an le label after labels), _sum and _count
 * samples for one label set. */
void metrics_write_histogram(bson_string_t *out, const char *name, const metrics_label_t *labels,
                             size_t label_count, const metrics_histogram_t *histogram);

/* --- from documents -----------------------------------------------------------------
 * Most numbers already live in a status document (thermoclineStatus, serverStatus):
 * a table of fields says which path of each source document makes which family. */

typedef struct metrics_field {
    const char *name;
    metrics_type_t type;
    const char *path;  /* dotted, inside each source's document */
    double scale;      /* the value times this: 0.001 turns milliseconds into seconds */
    const char *help;
} metrics_field_t;

typedef struct metrics_source {
    const bson_t *document;
    metrics_label_t labels[2];
    size_t label_count;
} metrics_source_t;

/* For each field: its family, and one sample per source whose document holds a
 * number (or a boolean, 0 or 1; or a date, in milliseconds) at its path. */
void metrics_write_fields(bson_string_t *out, const metrics_field_t *fields, size_t field_count,
                          const metrics_source_t *sources, size_t source_count);

/* The number at path in document, as metrics_write_fields reads it. */
bool metrics_document_number(const bson_t *document, const char *path, double *out);

#endif
