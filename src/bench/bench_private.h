/* Shared by the files of src/bench: the parsed options, the results a run
 * produces, and the entry points of the runners (run.c, mix.c) and the reports
 * (report.c). Not for use outside src/bench. */
#ifndef TC_BENCH_BENCH_PRIVATE_H
#define TC_BENCH_BENCH_PRIVATE_H

#include "bench/histogram.h"
#include "bench/workload.h"
#include "common/error.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <sys/resource.h>

typedef enum bench_operation {
    BENCH_OP_READ,
    BENCH_OP_UPDATE,
    BENCH_OP_INSERT,
    BENCH_OP_INSERT_MANY, /* one batch of the load */
    BENCH_OP_COUNT,
} bench_operation_t;

/* "read", "update", "insert", "insert_many". */
const char *bench_operation_name(bench_operation_t operation);

/* Documents per insert_many of the load. */
#define BENCH_LOAD_BATCH 1000
/* The load's default --records: about 120 MB of documents. */
#define BENCH_DEFAULT_LOAD_RECORDS 100000

typedef struct bench_options {
    const char *uri_string;
    const bench_workload_t *workload;
    const char *database;
    const char *collection;
    int thread_count;
    int64_t duration_ms;
    int64_t warmup_ms;
    int64_t target_ops; /* operations per second over all threads; 0: as fast as possible */
    int64_t record_count; /* documents present (run) or to load; 0: discover / default */
    const char *json_path; /* NULL: no JSON */
    uint64_t seed;
    int64_t reply_timeout_ms; /* a reply later than this past the end, or a first one, fails the run's clients */
} bench_options_t;

typedef struct bench_operation_result {
    uint64_t count;     /* completed without error */
    uint64_t errors;    /* failed (driver or server error); for insert_many, batches */
    uint64_t not_found; /* reads that found no document, updates that matched none */
    bench_histogram_t *latency; /* microseconds, successful operations only; owned */
    char first_error[256];      /* "" if none */
} bench_operation_result_t;

/* One second of the measured window. */
typedef struct bench_second {
    uint64_t operations[BENCH_OP_COUNT]; /* completed; for the load, [BENCH_OP_INSERT] counts documents */
    uint64_t errors[BENCH_OP_COUNT];
    bench_histogram_t *read_latency; /* coarse; NULL for the load; owned */
} bench_second_t;

/* One host the mix's clients were spread over (a mongos or proxy of the URI's
 * seed list, or the replica set's primary). */
#define BENCH_HOST_ADDRESS_SIZE 280
typedef struct bench_host_result {
    char address[BENCH_HOST_ADDRESS_SIZE]; /* "host:port" as the URI names it */
    int client_count;
    uint64_t operations; /* completed without error in the measured window */
    uint64_t errors;     /* failed in the measured window */
} bench_host_result_t;

typedef struct bench_results {
    bench_operation_result_t operations[BENCH_OP_COUNT];
    int64_t started_at_ms;   /* wall clock at the start of the measured window */
    int64_t measured_ns;     /* length of the measured window */
    int64_t records_at_start;
    int64_t records_at_end;
    uint64_t documents_loaded; /* the load only */
    uint64_t documents_failed; /* the load only */
    double cpu_user_seconds;   /* this process, over the measured window */
    double cpu_system_seconds;
    int second_count;
    int second_capacity;
    bench_second_t *seconds;
    int host_count;              /* the mix only; 0 for the load */
    bench_host_result_t *hosts;  /* host_count of them; owned */
    char replica_set[128];       /* the URI's replicaSet= (its primary is the one host driven), "" if none */
} bench_results_t;

/* Allocates the latency histograms and room for second_count seconds (each with
 * its read histogram when with_read_latency). Free with bench_results_cleanup(). */
bool bench_results_init(bench_results_t *results, int second_count, bool with_read_latency,
                        bson_error_t *error) TC_MUST_CHECK;
void bench_results_cleanup(bench_results_t *results);

/* Grows the series to hold at least second_count seconds (the load adds one each
 * second); second_count itself is not changed. */
bool bench_results_reserve_seconds(bench_results_t *results, int second_count, bool with_read_latency,
                                   bson_error_t *error) TC_MUST_CHECK;

/* Completed operations of every kind (for the load: documents inserted). */
uint64_t bench_results_total(const bench_results_t *results);

/* The process's user and system CPU between two getrusage(RUSAGE_SELF) readings. */
void bench_results_set_cpu(bench_results_t *results, const struct rusage *before, const struct rusage *after);

/* Inserts documents 0 .. record_count - 1 with a progress bar on stderr. False
 * only if it could not run at all; lost documents show in the results. */
bool bench_run_load(const bench_options_t *options, mongoc_client_pool_t *pool, bench_results_t *results,
                    bson_error_t *error) TC_MUST_CHECK;

/* Runs the workload's operation mix for warmup + duration with thread_count
 * clients on one event loop (mix.c); records the measured part.
 * options->record_count must be the documents present. The clients are spread
 * round-robin over the hosts of a URI without replicaSet= (a mongos or proxy each,
 * as a driver spreads its operations over the mongos of its seed list); a replica
 * set's URI reaches its primary only. */
bool bench_run_mix(const bench_options_t *options, bench_results_t *results, bson_error_t *error) TC_MUST_CHECK;

/* The human table. */
void bench_report_table(FILE *stream, const bench_options_t *options, const bench_results_t *results);

/* Everything, as one JSON document, to stream. */
bool bench_report_json(FILE *stream, const bench_options_t *options, const bench_results_t *results,
                       bson_error_t *error) TC_MUST_CHECK;

#endif
