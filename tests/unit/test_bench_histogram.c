/* Unit tests for src/bench/histogram.c (percentiles against the exact order
 * statistics of random data, merging, shared recording) and src/bench/workload.c
 * (key-choice distributions checked empirically with fixed seeds, documents). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench/histogram.h"
#include "bench/workload.h"

/* ---- helpers ------------------------------------------------------------- */

static int compare_u64(const void *left, const void *right)
{
    uint64_t a = *(const uint64_t *)left, b = *(const uint64_t *)right;
    return (a > b) - (a < b);
}

/* The exact value at percentile: the sorted value at rank ceil(p/100 * n). */
static uint64_t exact_percentile(const uint64_t *sorted, size_t count, double percentile)
{
    double wanted = percentile / 100.0 * (double)count;
    size_t rank = (size_t)ceil(wanted - 1e-9);
    if (rank < 1) {
        rank = 1;
    }
    return sorted[rank - 1];
}

/* Log-uniform latencies from 1 us to about 100 s, like a real tail. */
static uint64_t *random_latencies(size_t count, uint64_t seed)
{
    bench_rng_t rng;
    bench_rng_seed(&rng, seed);
    uint64_t *values = malloc(count * sizeof *values);
    assert_non_null(values);
    for (size_t index = 0; index < count; index++) {
        values[index] = (uint64_t)exp(bench_rng_unit(&rng) * log(1e8));
    }
    return values;
}

static const double checked_percentiles[] = {0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100};

/* Every checked percentile is at or above the exact one, by less than one bucket. */
static void assert_percentiles_close(const bench_histogram_t *histogram, const uint64_t *sorted, size_t count,
                                     int precision_bits)
{
    for (size_t index = 0; index < sizeof checked_percentiles / sizeof *checked_percentiles; index++) {
        uint64_t exact = exact_percentile(sorted, count, checked_percentiles[index]);
        uint64_t reported = bench_histogram_percentile(histogram, checked_percentiles[index]);
        if (reported < exact || (double)(reported - exact) > (double)exact / (double)(1 << precision_bits)) {
            fail_msg("p%g: reported %llu, exact %llu", checked_percentiles[index], (unsigned long long)reported,
                     (unsigned long long)exact);
        }
    }
}

/* ---- histogram ----------------------------------------------------------- */

static void test_histogram_empty(void **state)
{
    (void)state;
    bench_histogram_t *histogram = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    assert_non_null(histogram);
    assert_int_equal(bench_histogram_percentile(histogram, 50), 0);
    assert_int_equal(bench_histogram_percentile(histogram, 100), 0);
    assert_int_equal(bench_histogram_min(histogram), 0);
    assert_true(bench_histogram_mean(histogram) == 0.0);
    assert_null(bench_histogram_new(0));
    assert_null(bench_histogram_new(11));
    bench_histogram_destroy(histogram);
    bench_histogram_destroy(NULL);
}

/* Below twice the sub-bucket count every value has its own bucket. */
static void test_histogram_small_values_exact(void **state)
{
    (void)state;
    bench_histogram_t *histogram = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    for (uint64_t value = 0; value < 256; value++) {
        bench_histogram_record(histogram, value);
    }
    assert_int_equal(bench_histogram_percentile(histogram, 50), 127);
    assert_int_equal(bench_histogram_percentile(histogram, 0), 0);
    assert_int_equal(bench_histogram_percentile(histogram, 1), 2);  /* rank ceil(2.56) = 3 */
    assert_int_equal(bench_histogram_percentile(histogram, 100), 255);
    assert_true(fabs(bench_histogram_mean(histogram) - 127.5) < 1e-9);
    bench_histogram_destroy(histogram);
}

static void test_histogram_percentiles_random(void **state)
{
    (void)state;
    const size_t count = 100000;
    uint64_t *values = random_latencies(count, 42);
    bench_histogram_t *precise = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    bench_histogram_t *coarse = bench_histogram_new(BENCH_HISTOGRAM_COARSE);
    uint64_t sum = 0;
    for (size_t index = 0; index < count; index++) {
        bench_histogram_record(precise, values[index]);
        bench_histogram_record(coarse, values[index]);
        sum += values[index];
    }
    qsort(values, count, sizeof *values, compare_u64);
    assert_percentiles_close(precise, values, count, BENCH_HISTOGRAM_PRECISE);
    assert_percentiles_close(coarse, values, count, BENCH_HISTOGRAM_COARSE);
    assert_int_equal(bench_histogram_min(precise), values[0]);
    assert_int_equal(precise->maximum, values[count - 1]);
    assert_int_equal(bench_histogram_percentile(precise, 100), values[count - 1]);
    assert_true(fabs(bench_histogram_mean(precise) - (double)sum / (double)count) < 1e-6);
    /* Two significant digits: p99.9 within 1% of the truth. */
    uint64_t exact = exact_percentile(values, count, 99.9);
    assert_true(fabs((double)bench_histogram_percentile(precise, 99.9) - (double)exact) <= 0.01 * (double)exact);
    bench_histogram_destroy(precise);
    bench_histogram_destroy(coarse);
    free(values);
}

/* A few distinct values: percentiles must pick the right one, not a neighbour. */
static void test_histogram_percentile_ranks(void **state)
{
    (void)state;
    bench_histogram_t *histogram = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    for (int index = 0; index < 990; index++) {
        bench_histogram_record(histogram, 1000);
    }
    for (int index = 0; index < 9; index++) {
        bench_histogram_record(histogram, 50000);
    }
    bench_histogram_record(histogram, 2000000);
    assert_in_range(bench_histogram_percentile(histogram, 99), 1000, 1007);
    assert_in_range(bench_histogram_percentile(histogram, 99.5), 50000, 50255);
    assert_in_range(bench_histogram_percentile(histogram, 99.9), 50000, 50255); /* rank 999 */
    assert_int_equal(bench_histogram_percentile(histogram, 99.95), 2000000);
    assert_int_equal(bench_histogram_percentile(histogram, 100), 2000000);
    bench_histogram_destroy(histogram);
}

static void test_histogram_merge(void **state)
{
    (void)state;
    const size_t count = 40000;
    uint64_t *values = random_latencies(count, 7);
    bench_histogram_t *all = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    bench_histogram_t *parts[4];
    for (int part = 0; part < 4; part++) {
        parts[part] = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    }
    for (size_t index = 0; index < count; index++) {
        bench_histogram_record(all, values[index]);
        /* Uneven split: part 3 gets only the largest values' share of the tail. */
        bench_histogram_record(parts[values[index] > 1000000 ? 3 : index % 3], values[index]);
    }
    bench_histogram_t *merged = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    bson_error_t error;
    for (int part = 0; part < 4; part++) {
        assert_true(bench_histogram_merge(merged, parts[part], &error));
    }
    assert_int_equal(merged->total, count);
    assert_int_equal(merged->minimum, all->minimum);
    assert_int_equal(merged->maximum, all->maximum);
    assert_int_equal(merged->sum, all->sum);
    assert_memory_equal(merged->counts, all->counts, (size_t)all->length * sizeof *all->counts);
    qsort(values, count, sizeof *values, compare_u64);
    assert_percentiles_close(merged, values, count, BENCH_HISTOGRAM_PRECISE);

    /* Merging an empty histogram changes nothing, and different precisions refuse. */
    bench_histogram_t *empty = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    assert_true(bench_histogram_merge(merged, empty, &error));
    assert_int_equal(merged->minimum, all->minimum);
    bench_histogram_t *coarse = bench_histogram_new(BENCH_HISTOGRAM_COARSE);
    assert_false(bench_histogram_merge(merged, coarse, &error));
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    assert_int_equal(merged->total, count);

    bench_histogram_reset(merged);
    assert_int_equal(merged->total, 0);
    assert_int_equal(bench_histogram_percentile(merged, 50), 0);
    for (int part = 0; part < 4; part++) {
        bench_histogram_destroy(parts[part]);
    }
    bench_histogram_destroy(all);
    bench_histogram_destroy(merged);
    bench_histogram_destroy(empty);
    bench_histogram_destroy(coarse);
    free(values);
}

static void test_histogram_clamps_huge_values(void **state)
{
    (void)state;
    bench_histogram_t *histogram = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
    bench_histogram_record(histogram, 10);
    bench_histogram_record(histogram, BENCH_HISTOGRAM_MAX_VALUE * 4);
    assert_int_equal(histogram->total, 2);
    assert_int_equal(histogram->maximum, BENCH_HISTOGRAM_MAX_VALUE * 4);
    assert_int_equal(bench_histogram_percentile(histogram, 50), 10);
    assert_true(bench_histogram_percentile(histogram, 100) >= BENCH_HISTOGRAM_MAX_VALUE - BENCH_HISTOGRAM_MAX_VALUE / 128);
    bench_histogram_destroy(histogram);
}

typedef struct shared_writer {
    bench_histogram_t *histogram;
    uint64_t seed;
} shared_writer_t;

static void *shared_writer_run(void *argument)
{
    shared_writer_t *writer = argument;
    bench_rng_t rng;
    bench_rng_seed(&rng, writer->seed);
    for (int index = 0; index < 20000; index++) {
        bench_histogram_record_shared(writer->histogram, 1 + bench_rng_below(&rng, 100000));
    }
    return NULL;
}

/* Four threads writing one histogram lose no value. */
static void test_histogram_shared_recording(void **state)
{
    (void)state;
    bench_histogram_t *shared = bench_histogram_new(BENCH_HISTOGRAM_COARSE);
    bench_histogram_t *expected = bench_histogram_new(BENCH_HISTOGRAM_COARSE);
    pthread_t threads[4];
    shared_writer_t writers[4];
    for (int index = 0; index < 4; index++) {
        writers[index] = (shared_writer_t){shared, (uint64_t)index + 100};
        assert_int_equal(pthread_create(&threads[index], NULL, shared_writer_run, &writers[index]), 0);
    }
    for (int index = 0; index < 4; index++) {
        pthread_join(threads[index], NULL);
        bench_rng_t rng;
        bench_rng_seed(&rng, (uint64_t)index + 100);
        for (int value = 0; value < 20000; value++) {
            bench_histogram_record(expected, 1 + bench_rng_below(&rng, 100000));
        }
    }
    assert_int_equal(shared->total, 80000);
    assert_int_equal(shared->sum, expected->sum);
    assert_int_equal(shared->minimum, expected->minimum);
    assert_int_equal(shared->maximum, expected->maximum);
    assert_memory_equal(shared->counts, expected->counts, (size_t)shared->length * sizeof *shared->counts);
    bench_histogram_destroy(shared);
    bench_histogram_destroy(expected);
}

/* ---- key choice ---------------------------------------------------------- */

static void test_zeta_approximation(void **state)
{
    (void)state;
    double exact = 0.0;
    for (uint64_t rank = 1; rank <= 1000000; rank++) {
        exact += 1.0 / pow((double)rank, BENCH_ZIPFIAN_THETA);
    }
    double approximate = bench_zeta(1000000, BENCH_ZIPFIAN_THETA);
    assert_true(fabs(approximate - exact) / exact < 1e-9);
    assert_true(fabs(bench_zeta(1, BENCH_ZIPFIAN_THETA) - 1.0) < 1e-12);
    assert_true(fabs(bench_zeta(2, BENCH_ZIPFIAN_THETA) - (1.0 + pow(0.5, BENCH_ZIPFIAN_THETA))) < 1e-12);
}

static void test_latest_skews_to_newest(void **state)
{
    (void)state;
    const int64_t records = 100000;
    const int draws = 200000;
    bench_rng_t rng;
    bench_key_chooser_t chooser;
    bench_rng_seed(&rng, 1);
    bench_key_chooser_init(&chooser, BENCH_KEYS_LATEST);
    int *hits = calloc((size_t)records, sizeof *hits);
    int newest_percent = 0, oldest_half = 0;
    for (int draw = 0; draw < draws; draw++) {
        int64_t key = bench_key_choose(&chooser, &rng, records);
        assert_in_range(key, 0, records - 1);
        hits[key]++;
        newest_percent += key >= records - records / 100;
        oldest_half += key < records / 2;
    }
    double zeta_n = bench_zeta((uint64_t)records, BENCH_ZIPFIAN_THETA);
    /* The newest document is the zipfian rank 0: probability 1 / zeta(n), about 7.8%. */
    double newest_share = (double)hits[records - 1] / draws;
    assert_true(fabs(newest_share - 1.0 / zeta_n) < 0.1 / zeta_n);
    double second_share = (double)hits[records - 2] / draws;
    assert_true(fabs(second_share - pow(0.5, BENCH_ZIPFIAN_THETA) / zeta_n) < 0.1 / zeta_n);
    assert_true(hits[records - 1] > hits[records - 2]);
    assert_true(hits[records - 2] > hits[records - 10]);
    /* The newest 1% of documents take about zeta(1000) / zeta(n) of the choices (~60%). */
    double expected_newest_percent = bench_zeta(1000, BENCH_ZIPFIAN_THETA) / zeta_n;
    assert_true(fabs((double)newest_percent / draws - expected_newest_percent) < 0.03);
    assert_true((double)newest_percent / draws > 0.5);
    /* Zipfian 0.99 keeps a long tail: the oldest half still gets about 6%. */
    double expected_oldest_half = 1.0 - bench_zeta((uint64_t)records / 2, BENCH_ZIPFIAN_THETA) / zeta_n;
    assert_true(fabs((double)oldest_half / draws - expected_oldest_half) < 0.01);
    assert_true((double)oldest_half / draws < 0.1);
    free(hits);
}

/* As inserts grow the count, the cached constants follow it exactly. */
static void test_latest_follows_a_growing_count(void **state)
{
    (void)state;
    bench_rng_t rng;
    bench_key_chooser_t chooser;
    bench_rng_seed(&rng, 3);
    bench_key_chooser_init(&chooser, BENCH_KEYS_LATEST);
    const int64_t counts[] = {1, 2, 3, 10, 11, 12, 9000, 10000, 10001, 250000, 250001, 5000, 40000000};
    for (size_t index = 0; index < sizeof counts / sizeof *counts; index++) {
        for (int draw = 0; draw < 1000; draw++) {
            int64_t key = bench_key_choose(&chooser, &rng, counts[index]);
            assert_in_range(key, 0, counts[index] - 1);
        }
        double expected = bench_zeta((uint64_t)counts[index], BENCH_ZIPFIAN_THETA);
        assert_true(fabs(chooser.zeta_n - expected) / expected < 1e-9);
    }
    /* With one document there is one choice. */
    assert_int_equal(bench_key_choose(&chooser, &rng, 1), 0);
}

static void test_concentrated_keeps_99_percent_in_newest_9(void **state)
{
    (void)state;
    const int64_t records = 100000;
    const int64_t hot_first = records - 9000;
    const int draws = 200000;
    bench_rng_t rng;
    bench_key_chooser_t chooser;
    bench_rng_seed(&rng, 2);
    bench_key_chooser_init(&chooser, BENCH_KEYS_CONCENTRATED);
    int hot = 0;
    double hot_sum = 0, cold_sum = 0;
    int64_t cold_minimum = records, cold_maximum = -1;
    for (int draw = 0; draw < draws; draw++) {
        int64_t key = bench_key_choose(&chooser, &rng, records);
        assert_in_range(key, 0, records - 1);
        if (key >= hot_first) {
            hot++;
            hot_sum += (double)key;
        } else {
            cold_sum += (double)key;
            cold_minimum = key < cold_minimum ? key : cold_minimum;
            cold_maximum = key > cold_maximum ? key : cold_maximum;
        }
    }
    double hot_share = (double)hot / draws;
    assert_true(hot_share > 0.985 && hot_share < 0.995);
    /* Uniform inside each part. */
    assert_true(fabs(hot_sum / hot - (hot_first + records - 1) / 2.0) < 100);
    assert_true(fabs(cold_sum / (draws - hot) - (hot_first - 1) / 2.0) < 3000);
    assert_true(cold_minimum < 1000);
    assert_true(cold_maximum > hot_first - 1000);
    /* Tiny collections: the hot part is at least the newest document. */
    assert_int_equal(bench_key_choose(&chooser, &rng, 1), 0);
}

static void test_uniform_covers_everything(void **state)
{
    (void)state;
    const int64_t records = 1000;
    const int draws = 200000;
    bench_rng_t rng;
    bench_key_chooser_t chooser;
    bench_rng_seed(&rng, 4);
    bench_key_chooser_init(&chooser, BENCH_KEYS_UNIFORM);
    int deciles[10] = {0};
    for (int draw = 0; draw < draws; draw++) {
        int64_t key = bench_key_choose(&chooser, &rng, records);
        assert_in_range(key, 0, records - 1);
        deciles[key * 10 / records]++;
    }
    for (int decile = 0; decile < 10; decile++) {
        assert_true(fabs((double)deciles[decile] / draws - 0.1) < 0.005);
    }
}

static void test_seed_is_reproducible(void **state)
{
    (void)state;
    bench_rng_t first, second, other;
    bench_rng_seed(&first, 99);
    bench_rng_seed(&second, 99);
    bench_rng_seed(&other, 100);
    int differences = 0;
    for (int index = 0; index < 100; index++) {
        uint64_t value = bench_rng_next(&first);
        assert_int_equal(value, bench_rng_next(&second));
        differences += value != bench_rng_next(&other);
        double unit = bench_rng_unit(&first);
        assert_true(unit >= 0.0 && unit < 1.0);
        (void)bench_rng_unit(&second);
    }
    assert_true(differences > 95);
}

/* ---- workloads and documents --------------------------------------------- */

static void test_workload_table(void **state)
{
    (void)state;
    const char *names[] = {"load",      "store",  "readheavy",    "concentrated", "uniform",
                           "pointread", "insert", "insertunique", "insertemail"};
    for (size_t index = 0; index < sizeof names / sizeof *names; index++) {
        const bench_workload_t *workload = bench_workload_find(names[index]);
        assert_non_null(workload);
        if (!workload->is_load) {
            double sum = workload->read_fraction + workload->update_fraction + workload->insert_fraction;
            assert_true(fabs(sum - 1.0) < 1e-12);
        }
    }
    const bench_workload_t *store = bench_workload_find("store");
    assert_true(store->read_fraction == 0.85 && store->update_fraction == 0.10 && store->insert_fraction == 0.05);
    assert_int_equal(store->distribution, BENCH_KEYS_LATEST);
    assert_int_equal(bench_workload_find("readheavy")->distribution, BENCH_KEYS_LATEST);
    assert_int_equal(bench_workload_find("concentrated")->distribution, BENCH_KEYS_CONCENTRATED);
    assert_int_equal(bench_workload_find("uniform")->distribution, BENCH_KEYS_UNIFORM);
    assert_true(bench_workload_find("load")->is_load);
    assert_int_equal(bench_workload_find("insert")->email_index, BENCH_EMAIL_INDEX_NONE);
    assert_int_equal(bench_workload_find("insertunique")->email_index, BENCH_EMAIL_INDEX_UNIQUE);
    assert_int_equal(bench_workload_find("insertemail")->email_index, BENCH_EMAIL_INDEX_PLAIN);
    assert_true(bench_workload_find("insertunique")->insert_fraction == 1.0);
    assert_null(bench_workload_find("Store"));
    assert_null(bench_workload_find(""));
}

static void test_document_shape(void **state)
{
    (void)state;
    bench_rng_t rng;
    bench_rng_seed(&rng, 5);
    bson_t document = BSON_INITIALIZER;
    bench_document_build(&document, 7, 1700000000000, false, &rng);
    bson_iter_t iter;
    assert_true(bson_iter_init(&iter, &document));
    assert_true(bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "_id");
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_INT64);
    assert_int_equal(bson_iter_int64(&iter), 7);
    for (int field = 0; field < BENCH_FIELD_COUNT; field++) {
        uint32_t length;
        assert_true(bson_iter_next(&iter));
        assert_string_equal(bson_iter_key(&iter), bench_field_name(field));
        assert_int_equal(bson_iter_type(&iter), BSON_TYPE_UTF8);
        const char *value = bson_iter_utf8(&iter, &length);
        assert_int_equal(length, BENCH_FIELD_LENGTH);
        for (uint32_t index = 0; index < length; index++) {
            assert_true(value[index] > ' ' && value[index] < 127);
        }
    }
    assert_true(bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "createdAt");
    assert_int_equal(bson_iter_type(&iter), BSON_TYPE_DATE_TIME);
    assert_int_equal(bson_iter_date_time(&iter), 1700000000000);
    assert_false(bson_iter_next(&iter));
    bson_destroy(&document);

    /* With an email: the last field, distinct per _id. */
    bson_init(&document);
    bench_document_build(&document, 7, 1700000000000, true, &rng);
    assert_true(bson_iter_init_find(&iter, &document, "email"));
    assert_string_equal(bson_iter_utf8(&iter, NULL), "user7@example.com");
    assert_false(bson_iter_next(&iter));
    bson_destroy(&document);

    /* createdAt: the year before the load, oldest first, newest just before it. */
    const int64_t start = 1700000000000, records = 1000;
    assert_int_equal(bench_document_created_at(0, records, start), start - BENCH_YEAR_MS);
    int64_t previous = INT64_MIN;
    for (int64_t id = 0; id < records; id++) {
        int64_t created_at = bench_document_created_at(id, records, start);
        assert_true(created_at > previous);
        assert_true(created_at >= start - BENCH_YEAR_MS && created_at < start);
        previous = created_at;
    }
    assert_true(start - previous <= BENCH_YEAR_MS / records + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_histogram_empty),
        cmocka_unit_test(test_histogram_small_values_exact),
        cmocka_unit_test(test_histogram_percentiles_random),
        cmocka_unit_test(test_histogram_percentile_ranks),
        cmocka_unit_test(test_histogram_merge),
        cmocka_unit_test(test_histogram_clamps_huge_values),
        cmocka_unit_test(test_histogram_shared_recording),
        cmocka_unit_test(test_zeta_approximation),
        cmocka_unit_test(test_latest_skews_to_newest),
        cmocka_unit_test(test_latest_follows_a_growing_count),
        cmocka_unit_test(test_concentrated_keeps_99_percent_in_newest_9),
        cmocka_unit_test(test_uniform_covers_everything),
        cmocka_unit_test(test_seed_is_reproducible),
        cmocka_unit_test(test_workload_table),
        cmocka_unit_test(test_document_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
