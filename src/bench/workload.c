/* Workload table, key-choice distributions, random numbers and documents for
 * `thermocline bench` (see workload.h). The zipfian generator is the one YCSB
 * uses (Gray et al., "Quickly generating billion-record synthetic databases"). */
#include "bench/workload.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const bench_workload_t bench_workloads[] = {
    {"load", "bulk insert of --records documents (unordered insert_many batches)", true, 0, 0, 0,
     BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_NONE},
    {"store", "85% reads, 10% updates, 5% inserts; reads and updates skewed to the newest (latest)", false,
     0.85, 0.10, 0.05, BENCH_KEYS_LATEST, BENCH_EMAIL_INDEX_NONE},
    {"readheavy", "95% reads, 5% updates, skewed to the newest (latest)", false, 0.95, 0.05, 0,
     BENCH_KEYS_LATEST, BENCH_EMAIL_INDEX_NONE},
    {"concentrated", "95% reads, 5% updates, 99% of them on the newest 9% of documents", false, 0.95, 0.05, 0,
     BENCH_KEYS_CONCENTRATED, BENCH_EMAIL_INDEX_NONE},
    {"uniform", "95% reads, 5% updates, uniform over the whole history", false, 0.95, 0.05, 0,
     BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_NONE},
    {"pointread", "100% reads by _id, uniform", false, 1.0, 0, 0, BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_NONE},
    {"insert", "100% inserts of new documents", false, 0, 0, 1.0, BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_NONE},
    {"insertunique", "100% inserts of new documents with a distinct email, unique index {email: 1}", false, 0, 0,
     1.0, BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_UNIQUE},
    {"insertemail", "insertunique's documents, {email: 1} not unique (its baseline)", false, 0, 0, 1.0,
     BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_PLAIN},
    {NULL, NULL, false, 0, 0, 0, BENCH_KEYS_UNIFORM, BENCH_EMAIL_INDEX_NONE},
};

static const char *const bench_field_names[BENCH_FIELD_COUNT] = {
    "field0", "field1", "field2", "field3", "field4", "field5", "field6", "field7", "field8", "field9",
};

/* --- random numbers ----------------------------------------------------------------- */

static uint64_t rng_splitmix(uint64_t *state)
{
    uint64_t value = (*state += UINT64_C(0x9E3779B97F4A7C15));
    value = (value ^ (value >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    value = (value ^ (value >> 27)) * UINT64_C(0x94D049BB133111EB);
    return value ^ (value >> 31);
}

static uint64_t rng_rotate_left(uint64_t value, int bits)
{
    return (value << bits) | (value >> (64 - bits));
}

void bench_rng_seed(bench_rng_t *rng, uint64_t seed)
{
    uint64_t state = seed;
    for (int index = 0; index < 4; index++) {
        rng->state[index] = rng_splitmix(&state);
    }
}

uint64_t bench_rng_next(bench_rng_t *rng)
{
    uint64_t *state = rng->state;
    uint64_t result = rng_rotate_left(state[1] * 5, 7) * 9;
    uint64_t shifted = state[1] << 17;
    state[2] ^= state[0];
    state[3] ^= state[1];
    state[1] ^= state[2];
    state[0] ^= state[3];
    state[2] ^= shifted;
    state[3] = rng_rotate_left(state[3], 45);
    return result;
}

double bench_rng_unit(bench_rng_t *rng)
{
    return (double)(bench_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t bench_rng_below(bench_rng_t *rng, uint64_t bound)
{
    /* Lemire's multiply-shift: the bias is below bound / 2^64, far under noise. */
    return (uint64_t)(((unsigned __int128)bench_rng_next(rng) * bound) >> 64);
}

/* --- key choice --------------------------------------------------------------------- */

static double zeta_terms(uint64_t first, uint64_t last, double theta)
{
    double sum = 0.0;
    for (uint64_t rank = first; rank <= last; rank++) {
        sum += 1.0 / pow((double)rank, theta);
    }
    return sum;
}

/* zeta(n) from the exact head zeta(BENCH_ZETA_EXACT_TERMS), for n above it. */
static double zeta_from_head(uint64_t n, double theta, double head)
{
    double exponent = 1.0 - theta;
    double tail = (pow((double)n + 0.5, exponent) - pow(BENCH_ZETA_EXACT_TERMS + 0.5, exponent)) / exponent;
    return head + tail;
}

double bench_zeta(uint64_t n, double theta)
{
    if (n <= BENCH_ZETA_EXACT_TERMS) {
        return zeta_terms(1, n, theta);
    }
    return zeta_from_head(n, theta, zeta_terms(1, BENCH_ZETA_EXACT_TERMS, theta));
}

void bench_key_chooser_init(bench_key_chooser_t *chooser, bench_key_distribution_t distribution)
{
    chooser->distribution = distribution;
    chooser->item_count = 0;
    chooser->zeta_n = 0.0;
    chooser->eta = 0.0;
    chooser->zeta_2 = 0.0;
    chooser->zeta_cutoff = 0.0;
    if (distribution == BENCH_KEYS_LATEST) {
        chooser->zeta_2 = zeta_terms(1, 2, BENCH_ZIPFIAN_THETA);
        chooser->zeta_cutoff = zeta_terms(1, BENCH_ZETA_EXACT_TERMS, BENCH_ZIPFIAN_THETA);
    }
}

static void chooser_set_count(bench_key_chooser_t *chooser, uint64_t count)
{
    const double theta = BENCH_ZIPFIAN_THETA;
    if (count > BENCH_ZETA_EXACT_TERMS) {
        chooser->zeta_n = zeta_from_head(count, theta, chooser->zeta_cutoff);
    } else if (chooser->item_count > 0 && count > chooser->item_count) {
        /* Inserts grow the count a few at a time: extend the sum, as YCSB does. */
        chooser->zeta_n += zeta_terms(chooser->item_count + 1, count, theta);
    } else {
        chooser->zeta_n = zeta_terms(1, count, theta);
    }
    chooser->item_count = count;
    chooser->eta = (1.0 - pow(2.0 / (double)count, 1.0 - theta)) / (1.0 - chooser->zeta_2 / chooser->zeta_n);
}

/* A zipfian rank in [0, count): 0 is the most popular. */
static uint64_t chooser_zipfian_rank(bench_key_chooser_t *chooser, bench_rng_t *rng, uint64_t count)
{
    if (count != chooser->item_count) {
        chooser_set_count(chooser, count);
    }
    double unit = bench_rng_unit(rng);
    double scaled = unit * chooser->zeta_n;
    if (scaled < 1.0 || count == 1) {
        return 0;
    }
    if (scaled < 1.0 + pow(0.5, BENCH_ZIPFIAN_THETA) || count == 2) {
        return 1;
    }
    double alpha = 1.0 / (1.0 - BENCH_ZIPFIAN_THETA);
    uint64_t rank = (uint64_t)((double)count * pow(chooser->eta * unit - chooser->eta + 1.0, alpha));
    return rank < count ? rank : count - 1;
}

int64_t bench_key_choose(bench_key_chooser_t *chooser, bench_rng_t *rng, int64_t record_count)
{
    uint64_t count = (uint64_t)record_count;
    switch (chooser->distribution) {
    case BENCH_KEYS_LATEST:
        /* YCSB's SkewedLatestGenerator: the newest minus a zipfian rank. */
        return (int64_t)(count - 1 - chooser_zipfian_rank(chooser, rng, count));
    case BENCH_KEYS_CONCENTRATED: {
        uint64_t hot_count = (uint64_t)ceil((double)count * BENCH_HOT_DATA_FRACTION);
        uint64_t cold_count = count - hot_count;
        if (cold_count == 0 || bench_rng_unit(rng) < BENCH_HOT_OPERATION_FRACTION) {
            return (int64_t)(cold_count + bench_rng_below(rng, hot_count));
        }
        return (int64_t)bench_rng_below(rng, cold_count);
    }
    case BENCH_KEYS_UNIFORM:
    default:
        return (int64_t)bench_rng_below(rng, count);
    }
}

/* --- workloads and documents -------------------------------------------------------- */

const bench_workload_t *bench_workload_find(const char *name)
{
    for (const bench_workload_t *workload = bench_workloads; workload->name != NULL; workload++) {
        if (strcmp(workload->name, name) == 0) {
            return workload;
        }
    }
    return NULL;
}

const bench_workload_t *bench_workload_all(void)
{
    return bench_workloads;
}

void bench_field_value_fill(bench_rng_t *rng, char *out_value)
{
    static const char alphabet[65] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int filled = 0;
    while (filled < BENCH_FIELD_LENGTH) {
        /* Ten 6-bit characters from each 64-bit draw. */
        uint64_t bits = bench_rng_next(rng);
        for (int index = 0; index < 10 && filled < BENCH_FIELD_LENGTH; index++) {
            out_value[filled++] = alphabet[bits & 63];
            bits >>= 6;
        }
    }
}

void bench_document_build(bson_t *document, int64_t id, int64_t created_at_ms, bool with_email, bench_rng_t *rng)
{
    char value[BENCH_FIELD_LENGTH];
    BSON_APPEND_INT64(document, "_id", id);
    for (int field = 0; field < BENCH_FIELD_COUNT; field++) {
        bench_field_value_fill(rng, value);
        bson_append_utf8(document, bench_field_names[field], -1, value, BENCH_FIELD_LENGTH);
    }
    BSON_APPEND_DATE_TIME(document, BENCH_TIME_FIELD, created_at_ms);
    if (with_email) {
        char email[48];
        int length = snprintf(email, sizeof email, "user%" PRId64 "@example.com", id);
        bson_append_utf8(document, BENCH_EMAIL_FIELD, -1, email, length);
    }
}

int64_t bench_document_created_at(int64_t id, int64_t record_count, int64_t load_start_ms)
{
    if (record_count <= 0) {
        return load_start_ms;
    }
    /* id / record_count of the way through the year; 128-bit to avoid overflow. */
    __int128 offset = (__int128)BENCH_YEAR_MS * (record_count - id) / record_count;
    return load_start_ms - (int64_t)offset;
}

const char *bench_field_name(int field)
{
    return bench_field_names[field];
}
