/* HDR-style log-linear histogram (see histogram.h). Values below twice the
 * sub-bucket count are exact; above, each power of two [2^k, 2^(k+1)) is split
 * into 2^precision_bits equal sub-buckets, so a bucket is never wider than
 * value / 2^precision_bits. */
#include "bench/histogram.h"

#include <stdlib.h>
#include <string.h>

/* Bit length of the largest trackable value. */
#define HISTOGRAM_VALUE_BITS 32

static uint64_t histogram_clamp(uint64_t value)
{
    return value > BENCH_HISTOGRAM_MAX_VALUE ? BENCH_HISTOGRAM_MAX_VALUE : value;
}

static int32_t histogram_index(const bench_histogram_t *histogram, uint64_t value)
{
    value = histogram_clamp(value);
    int bit_length = value == 0 ? 0 : 64 - __builtin_clzll(value);
    int bucket = bit_length - (histogram->precision_bits + 1);
    if (bucket < 0) {
        bucket = 0;
    }
    uint64_t sub_bucket = value >> bucket;
    return (int32_t)(((int64_t)bucket << histogram->precision_bits) + (int64_t)sub_bucket);
}

/* The largest value that lands in counts[index]. */
static uint64_t histogram_highest_equivalent(const bench_histogram_t *histogram, int32_t index)
{
    int32_t half = 1 << histogram->precision_bits;
    if (index < 2 * half) {
        return (uint64_t)index;
    }
    int bucket = index / half - 1;
    uint64_t sub_bucket = (uint64_t)(index - bucket * half);
    return ((sub_bucket + 1) << bucket) - 1;
}

bench_histogram_t *bench_histogram_new(int precision_bits)
{
    if (precision_bits < 1 || precision_bits > 10) {
        return NULL;
    }
    bench_histogram_t *histogram = calloc(1, sizeof *histogram);
    if (histogram == NULL) {
        return NULL;
    }
    histogram->precision_bits = precision_bits;
    histogram->length = (HISTOGRAM_VALUE_BITS + 1 - precision_bits) << precision_bits;
    histogram->counts = calloc((size_t)histogram->length, sizeof *histogram->counts);
    if (histogram->counts == NULL) {
        free(histogram);
        return NULL;
    }
    histogram->minimum = UINT64_MAX;
    return histogram;
}

void bench_histogram_destroy(bench_histogram_t *histogram)
{
    if (histogram == NULL) {
        return;
    }
    free(histogram->counts);
    free(histogram);
}

void bench_histogram_reset(bench_histogram_t *histogram)
{
    memset(histogram->counts, 0, (size_t)histogram->length * sizeof *histogram->counts);
    histogram->total = 0;
    histogram->minimum = UINT64_MAX;
    histogram->maximum = 0;
    histogram->sum = 0;
}

void bench_histogram_record(bench_histogram_t *histogram, uint64_t value)
{
    histogram->counts[histogram_index(histogram, value)]++;
    histogram->total++;
    histogram->sum += value;
    if (value < histogram->minimum) {
        histogram->minimum = value;
    }
    if (value > histogram->maximum) {
        histogram->maximum = value;
    }
}

void bench_histogram_record_shared(bench_histogram_t *histogram, uint64_t value)
{
    __atomic_fetch_add(&histogram->counts[histogram_index(histogram, value)], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&histogram->total, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&histogram->sum, value, __ATOMIC_RELAXED);
    uint64_t seen = __atomic_load_n(&histogram->minimum, __ATOMIC_RELAXED);
    while (value < seen &&
           !__atomic_compare_exchange_n(&histogram->minimum, &seen, value, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    seen = __atomic_load_n(&histogram->maximum, __ATOMIC_RELAXED);
    while (value > seen &&
           !__atomic_compare_exchange_n(&histogram->maximum, &seen, value, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

bool bench_histogram_merge(bench_histogram_t *destination, const bench_histogram_t *source, bson_error_t *error)
{
    if (destination->precision_bits != source->precision_bits) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "cannot merge histograms of precision %d and %d bits",
                            destination->precision_bits, source->precision_bits);
    }
    for (int32_t index = 0; index < source->length; index++) {
        destination->counts[index] += source->counts[index];
    }
    destination->total += source->total;
    destination->sum += source->sum;
    if (source->minimum < destination->minimum) {
        destination->minimum = source->minimum;
    }
    if (source->maximum > destination->maximum) {
        destination->maximum = source->maximum;
    }
    return true;
}

uint64_t bench_histogram_percentile(const bench_histogram_t *histogram, double percentile)
{
    if (histogram->total == 0) {
        return 0;
    }
    if (percentile <= 0.0) {
        return histogram->minimum;
    }
    if (percentile > 100.0) {
        percentile = 100.0;
    }
    /* The rank of the wanted value among the sorted values, from 1. The small
     * epsilon keeps 99.9% of 1000 values at rank 999 despite rounding. */
    double wanted = percentile / 100.0 * (double)histogram->total;
    uint64_t rank = (uint64_t)(wanted - 1e-9);
    if ((double)rank < wanted - 1e-9) {
        rank++;
    }
    if (rank < 1) {
        rank = 1;
    }
    uint64_t seen = 0;
    for (int32_t index = 0; index < histogram->length; index++) {
        seen += histogram->counts[index];
        if (seen >= rank) {
            uint64_t value = histogram_highest_equivalent(histogram, index);
            return value > histogram->maximum ? histogram->maximum : value;
        }
    }
    return histogram->maximum;
}

uint64_t bench_histogram_min(const bench_histogram_t *histogram)
{
    return histogram->total == 0 ? 0 : histogram->minimum;
}

double bench_histogram_mean(const bench_histogram_t *histogram)
{
    return histogram->total == 0 ? 0.0 : (double)histogram->sum / (double)histogram->total;
}
