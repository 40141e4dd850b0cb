/* Latency histograms for `thermocline bench`: HDR-style log-linear buckets over
 * microseconds (every power of two split into equal sub-buckets), so recording is
 * O(1), memory is fixed, percentiles keep a bounded relative error, and the
 * histograms of several threads merge by adding counts. */
#ifndef TC_BENCH_HISTOGRAM_H
#define TC_BENCH_HISTOGRAM_H

#include "common/error.h"

#include <stdbool.h>
#include <stdint.h>

/* Values above this (about 71 minutes in microseconds) are counted in the top
 * bucket; max still reports the true largest value. */
#define BENCH_HISTOGRAM_MAX_VALUE ((UINT64_C(1) << 32) - 1)

/* precision_bits 7: 256 sub-buckets per power of two, relative error below 0.8%
 * (two significant digits, as HdrHistogram's default); 5: below 3.2%, a quarter
 * of the memory, enough for a per-second time series. */
#define BENCH_HISTOGRAM_PRECISE 7
#define BENCH_HISTOGRAM_COARSE 5

typedef struct bench_histogram {
    int precision_bits;
    int32_t length;   /* entries in counts */
    uint64_t total;   /* values recorded */
    uint64_t minimum; /* UINT64_MAX while empty */
    uint64_t maximum;
    uint64_t sum;     /* of the recorded values, for the mean */
    uint64_t *counts;
} bench_histogram_t;

/* An empty histogram; precision_bits from 1 to 10. Returns NULL on a bad
 * precision. The caller owns it: free with bench_histogram_destroy(). */
bench_histogram_t *bench_histogram_new(int precision_bits);

/* Safe on NULL. */
void bench_histogram_destroy(bench_histogram_t *histogram);

/* Empties the histogram, keeping its precision. */
void bench_histogram_reset(bench_histogram_t *histogram);

/* Records one value (microseconds). Not thread-safe: one histogram per thread. */
void bench_histogram_record(bench_histogram_t *histogram, uint64_t value);

/* Records one value with atomic updates, for a histogram several threads write
 * at once (the per-second time series). Readers must wait until writers stop. */
void bench_histogram_record_shared(bench_histogram_t *histogram, uint64_t value);

/* Adds every value of source into destination. Both must have the same
 * precision (BadValue otherwise). */
bool bench_histogram_merge(bench_histogram_t *destination, const bench_histogram_t *source,
                           bson_error_t *error) TC_MUST_CHECK;

/* The value at percentile (0 to 100): the smallest recorded value v such that at
 * least percentile% of the values are <= v, reported as the top of v's bucket
 * (never above the true maximum). 0 for an empty histogram. */
uint64_t bench_histogram_percentile(const bench_histogram_t *histogram, double percentile);

/* 0 for an empty histogram. */
uint64_t bench_histogram_min(const bench_histogram_t *histogram);
double bench_histogram_mean(const bench_histogram_t *histogram);

#endif
