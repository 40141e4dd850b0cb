/* What `thermocline bench` asks of the server: the workloads (operation mix and
 * which documents they touch), the key-choice distributions (YCSB's "latest",
 * a hot-spot on the newest documents, uniform), a fast per-thread random number
 * generator, and YCSB-like documents. Pure logic: no I/O, no threads. */
#ifndef TC_BENCH_WORKLOAD_H
#define TC_BENCH_WORKLOAD_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* Documents: _id is an int64 in insertion order (0, 1, 2, ...: numbers, not
 * YCSB's "user%d" strings, so the newest id is found by sorting); fields
 * field0..field9 hold BENCH_FIELD_LENGTH printable characters; createdAt is a
 * BSON date, spread over the year before the load in _id order. */
#define BENCH_FIELD_COUNT 10
#define BENCH_FIELD_LENGTH 100
#define BENCH_YEAR_MS (INT64_C(365) * 24 * 3600 * 1000)

/* YCSB's zipfian constant, used by its "latest" distribution. */
#define BENCH_ZIPFIAN_THETA 0.99
/* `concentrated`: this share of operations goes to this newest share of documents. */
#define BENCH_HOT_OPERATION_FRACTION 0.99
#define BENCH_HOT_DATA_FRACTION 0.09

/* xoshiro256**: one per thread, seeded from --seed and the thread number. */
typedef struct bench_rng {
    uint64_t state[4];
} bench_rng_t;

void bench_rng_seed(bench_rng_t *rng, uint64_t seed);
uint64_t bench_rng_next(bench_rng_t *rng);
/* Uniform in [0, 1). */
double bench_rng_unit(bench_rng_t *rng);
/* Uniform in [0, bound); bound > 0. */
uint64_t bench_rng_below(bench_rng_t *rng, uint64_t bound);

typedef enum bench_key_distribution {
    BENCH_KEYS_UNIFORM,      /* every document equally likely */
    BENCH_KEYS_LATEST,       /* YCSB "latest": zipfian rank from the newest */
    BENCH_KEYS_CONCENTRATED, /* 99% of choices uniform in the newest 9% */
} bench_key_distribution_t;

/* Per-thread state of a distribution: the zipfian constants depend on the
 * number of documents, which grows as a workload inserts, so they are cached
 * and refreshed when it changes. */
typedef struct bench_key_chooser {
    bench_key_distribution_t distribution;
    uint64_t item_count; /* the count zeta_n and eta were computed for; 0: none yet */
    double zeta_n;
    double eta;
    double zeta_2;
    double zeta_cutoff; /* exact zeta over the first BENCH_ZETA_EXACT_TERMS ranks */
} bench_key_chooser_t;

void bench_key_chooser_init(bench_key_chooser_t *chooser, bench_key_distribution_t distribution);

/* A key in [0, record_count); record_count > 0. Key record_count - 1 is the newest. */
int64_t bench_key_choose(bench_key_chooser_t *chooser, bench_rng_t *rng, int64_t record_count);

/* sum over i = 1..n of 1 / i^theta: exact up to BENCH_ZETA_EXACT_TERMS terms, beyond
 * that the exact head plus a midpoint integral of the tail (relative error below
 * 1e-9), so choosing among 40 million documents needs no 40-million-term sum. */
#define BENCH_ZETA_EXACT_TERMS 10000
double bench_zeta(uint64_t n, double theta);

/* The secondary index a workload's collection carries on BENCH_EMAIL_FIELD, whose
 * value is distinct per document ("user<_id>@example.com"): the documents of a
 * workload with one carry the field, and bench creates the index (and the
 * {createdAt: 1} index a tiering proxy requires) before the run. */
typedef enum bench_email_index {
    BENCH_EMAIL_INDEX_NONE,   /* no email field, no index */
    BENCH_EMAIL_INDEX_PLAIN,  /* {email: 1}, not unique */
    BENCH_EMAIL_INDEX_UNIQUE, /* {email: 1}, unique */
} bench_email_index_t;

#define BENCH_EMAIL_FIELD "email"
#define BENCH_EMAIL_INDEX_NAME "email_1"
#define BENCH_TIME_FIELD "createdAt"
#define BENCH_TIME_INDEX_NAME "createdAt_1"

typedef struct bench_workload {
    const char *name;
    const char *summary; /* one line for --help and the report */
    bool is_load;        /* the bulk load, not a timed mix */
    double read_fraction;
    double update_fraction;
    double insert_fraction;
    bench_key_distribution_t distribution; /* for reads and updates */
    bench_email_index_t email_index;
} bench_workload_t;

/* NULL if name is not a workload. The result is static. */
const bench_workload_t *bench_workload_find(const char *name);

/* The table, ending with an entry whose name is NULL. */
const bench_workload_t *bench_workload_all(void);

/* "field0" .. "field9" for field 0 .. BENCH_FIELD_COUNT - 1 (static strings). */
const char *bench_field_name(int field);

/* Fills out_value with BENCH_FIELD_LENGTH printable characters (no terminator). */
void bench_field_value_fill(bench_rng_t *rng, char *out_value);

/* Appends one document (_id, field0..field9, createdAt, and with_email an email
 * distinct per _id) to the empty document. */
void bench_document_build(bson_t *document, int64_t id, int64_t created_at_ms, bool with_email, bench_rng_t *rng);

/* createdAt of loaded document id among record_count: spread over the year
 * before load_start_ms, oldest first, the last one just before load_start_ms. */
int64_t bench_document_created_at(int64_t id, int64_t record_count, int64_t load_start_ms);

#endif
