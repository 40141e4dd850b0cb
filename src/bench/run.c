/* The load of `thermocline bench`: a group of worker threads, each with its own
 * mongoc_client_t popped from one pool (a client is not thread-safe), inserting
 * batches of documents with insert_many; their latency histograms are merged when
 * the load ends. The timed mixes run on one event loop instead (mix.c). */
#include "bench/bench_private.h"
#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct run_shared {
    const bench_options_t *options;
    mongoc_client_pool_t *pool;
    bench_results_t *results;
    /* Start gate: the workers check in once they hold a connected client, and
     * wait until the main thread has set the clock below and opens the gate. */
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_changed;
    int workers_ready;
    bool gate_open;
    int64_t start_ns;
    /* The load. */
    int64_t load_start_ms;
    _Atomic int64_t next_batch_start;
    _Atomic uint64_t documents_done;
    _Atomic uint64_t documents_failed;
    _Atomic int workers_done;
} run_shared_t;

typedef struct run_worker {
    int index;
    pthread_t thread;
    run_shared_t *shared;
    bench_rng_t rng;
    bench_operation_result_t operations[BENCH_OP_COUNT];
    int64_t finished_ns; /* the load: when this worker found no batch left */
} run_worker_t;

/* --- workers ------------------------------------------------------------------------ */

static bool worker_init(run_worker_t *worker, run_shared_t *shared, int index, bson_error_t *error)
{
    memset(worker, 0, sizeof *worker);
    worker->index = index;
    worker->shared = shared;
    /* Distinct streams per thread, reproducible from --seed. */
    bench_rng_seed(&worker->rng, shared->options->seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)index + 1);
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        worker->operations[operation].latency = bench_histogram_new(BENCH_HISTOGRAM_PRECISE);
        if (worker->operations[operation].latency == NULL) {
            return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for the histograms");
        }
    }
    return true;
}

static void worker_cleanup(run_worker_t *worker)
{
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        bench_histogram_destroy(worker->operations[operation].latency);
    }
}

static void worker_note_error(run_worker_t *worker, bench_operation_t operation, const char *message)
{
    bench_operation_result_t *result = &worker->operations[operation];
    result->errors++;
    if (result->first_error[0] == '\0') {
        bson_strncpy(result->first_error, message, sizeof result->first_error);
    }
}

/* Takes a client and opens its connection, so connection set-up is not timed
 * (a failure here shows in the operations that follow), then waits at the gate. */
static mongoc_client_t *worker_connect(run_worker_t *worker, mongoc_collection_t **out_collection)
{
    run_shared_t *shared = worker->shared;
    mongoc_client_t *client = mongoc_client_pool_pop(shared->pool);
    bson_t ping = BSON_INITIALIZER;
    BSON_APPEND_INT32(&ping, "ping", 1);
    (void)mongoc_client_command_simple(client, "admin", &ping, NULL, NULL, NULL);
    bson_destroy(&ping);
    *out_collection = mongoc_client_get_collection(client, shared->options->database,
                                                   shared->options->collection);
    pthread_mutex_lock(&shared->gate_lock);
    shared->workers_ready++;
    pthread_cond_broadcast(&shared->gate_changed);
    while (!shared->gate_open) {
        pthread_cond_wait(&shared->gate_changed, &shared->gate_lock);
    }
    pthread_mutex_unlock(&shared->gate_lock);
    return client;
}

static void worker_disconnect(run_worker_t *worker, mongoc_client_t *client, mongoc_collection_t *collection)
{
    mongoc_collection_destroy(collection);
    mongoc_client_pool_push(worker->shared->pool, client);
}

static void *worker_run_load(void *argument)
{
    run_worker_t *worker = argument;
    run_shared_t *shared = worker->shared;
    const int64_t record_count = shared->options->record_count;
    mongoc_collection_t *collection;
    mongoc_client_t *client = worker_connect(worker, &collection);
    bson_t insert_options = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&insert_options, "ordered", false);
    bson_t *documents = calloc(BENCH_LOAD_BATCH, sizeof *documents);
    const bson_t **pointers = calloc(BENCH_LOAD_BATCH, sizeof *pointers);
    for (int index = 0; documents != NULL && pointers != NULL && index < BENCH_LOAD_BATCH; index++) {
        bson_init(&documents[index]);
        pointers[index] = &documents[index];
    }

    while (documents != NULL && pointers != NULL) {
        int64_t first = atomic_fetch_add(&shared->next_batch_start, BENCH_LOAD_BATCH);
        if (first >= record_count) {
            break;
        }
        int64_t count = record_count - first < BENCH_LOAD_BATCH ? record_count - first : BENCH_LOAD_BATCH;
        for (int64_t index = 0; index < count; index++) {
            bson_reinit(&documents[index]);
            int64_t id = first + index;
            bench_document_build(&documents[index], id,
                                 bench_document_created_at(id, record_count, shared->load_start_ms), false,
                                 &worker->rng);
        }
        bson_t reply;
        bson_error_t error;
        bson_iter_t iter;
        int64_t started_ns = clock_monotonic_ns();
        bool ok = mongoc_collection_insert_many(collection, pointers, (size_t)count, &insert_options, &reply,
                                                &error);
        int64_t done_ns = clock_monotonic_ns();
        int64_t inserted = ok ? count : 0;
        if (bson_iter_init_find(&iter, &reply, "insertedCount")) {
            inserted = bson_iter_as_int64(&iter);
        }
        bson_destroy(&reply);
        if (!ok) {
            worker_note_error(worker, BENCH_OP_INSERT_MANY, error.message);
        } else {
            worker->operations[BENCH_OP_INSERT_MANY].count++;
            bench_histogram_record(worker->operations[BENCH_OP_INSERT_MANY].latency,
                                   (uint64_t)((done_ns - started_ns) / 1000));
        }
        atomic_fetch_add(&shared->documents_done, (uint64_t)inserted);
        atomic_fetch_add(&shared->documents_failed, (uint64_t)(count - inserted));
    }
    for (int index = 0; documents != NULL && index < BENCH_LOAD_BATCH; index++) {
        bson_destroy(&documents[index]);
    }
    free(documents);
    free(pointers);
    bson_destroy(&insert_options);
    worker->finished_ns = clock_monotonic_ns();
    worker_disconnect(worker, client, collection);
    atomic_fetch_add(&shared->workers_done, 1);
    return NULL;
}

/* --- the run ------------------------------------------------------------------------ */

static bool shared_init(run_shared_t *shared, const bench_options_t *options, mongoc_client_pool_t *pool,
                        bench_results_t *results, bson_error_t *error)
{
    memset(shared, 0, sizeof *shared);
    shared->options = options;
    shared->pool = pool;
    shared->results = results;
    atomic_init(&shared->next_batch_start, 0);
    atomic_init(&shared->documents_done, 0);
    atomic_init(&shared->documents_failed, 0);
    atomic_init(&shared->workers_done, 0);
    pthread_mutex_init(&shared->gate_lock, NULL);
    pthread_cond_init(&shared->gate_changed, NULL);
    return true;
}

static void shared_cleanup(run_shared_t *shared)
{
    pthread_mutex_destroy(&shared->gate_lock);
    pthread_cond_destroy(&shared->gate_changed);
}

static void gate_wait_ready(run_shared_t *shared, int worker_count)
{
    pthread_mutex_lock(&shared->gate_lock);
    while (shared->workers_ready < worker_count) {
        pthread_cond_wait(&shared->gate_changed, &shared->gate_lock);
    }
    pthread_mutex_unlock(&shared->gate_lock);
}

static void gate_open(run_shared_t *shared)
{
    pthread_mutex_lock(&shared->gate_lock);
    shared->gate_open = true;
    pthread_cond_broadcast(&shared->gate_changed);
    pthread_mutex_unlock(&shared->gate_lock);
}

/* Starts thread_count workers running body. On failure, the workers already
 * started find no batch left, are joined, and every
 * worker is cleaned up. */
static bool workers_start(run_shared_t *shared, run_worker_t *workers, void *(*body)(void *),
                          bson_error_t *error)
{
    int count = shared->options->thread_count;
    for (int index = 0; index < count; index++) {
        if (!worker_init(&workers[index], shared, index, error)) {
            for (int started = 0; started <= index; started++) {
                worker_cleanup(&workers[started]);
            }
            return false;
        }
    }
    for (int index = 0; index < count; index++) {
        int status = pthread_create(&workers[index].thread, NULL, body, &workers[index]);
        if (status != 0) {
            tc_error_set(error, TC_ERR_INTERNAL, "cannot start worker thread %d of %d: %s", index + 1, count,
                         strerror(status));
            atomic_store(&shared->next_batch_start, shared->options->record_count);
            gate_open(shared);
            for (int started = 0; started < index; started++) {
                pthread_join(workers[started].thread, NULL);
            }
            for (int started = 0; started < count; started++) {
                worker_cleanup(&workers[started]);
            }
            return false;
        }
    }
    return true;
}

/* Joins the workers and merges what they measured into the results. */
static void workers_finish(run_shared_t *shared, run_worker_t *workers)
{
    bench_results_t *results = shared->results;
    for (int index = 0; index < shared->options->thread_count; index++) {
        run_worker_t *worker = &workers[index];
        pthread_join(worker->thread, NULL);
        for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
            bench_operation_result_t *from = &worker->operations[operation];
            bench_operation_result_t *into = &results->operations[operation];
            bson_error_t ignored;
            into->count += from->count;
            into->errors += from->errors;
            into->not_found += from->not_found;
            if (!bench_histogram_merge(into->latency, from->latency, &ignored)) {
                abort(); /* same precision by construction */
            }
            if (into->first_error[0] == '\0' && from->first_error[0] != '\0') {
                memcpy(into->first_error, from->first_error, sizeof into->first_error);
            }
        }
        worker_cleanup(worker);
    }
}

/* On a terminal the line is redrawn in place; elsewhere each call is a line. */
static void progress_print(uint64_t done, int64_t total, int64_t elapsed_ns, bool terminal, bool final)
{
    static const int width = 30;
    double fraction = total > 0 ? (double)done / (double)total : 1.0;
    int filled = (int)(fraction * width);
    double rate = elapsed_ns > 0 ? (double)done * 1e9 / (double)elapsed_ns : 0.0;
    double remaining = rate > 0 ? ((double)total - (double)done) / rate : 0.0;
    char bar[64];
    for (int index = 0; index < width; index++) {
        bar[index] = index < filled ? '#' : '-';
    }
    bar[width] = '\0';
    if (tc_log_get_format() == TC_LOG_FORMAT_JSON) {
        TC_LOG_ATTRS(TC_LOG_INFO, "BENCH", 0,
                     "loading: {documents}/{total} documents, {docsPerSecond} docs/s, ETA {etaSeconds} s",
                     TC_ATTR_INT("documents", done), TC_ATTR_INT("total", total), TC_ATTR_INT("docsPerSecond", rate),
                     TC_ATTR_INT("etaSeconds", remaining));
        return;
    }
    fprintf(stderr, "%sloading [%s] %3d%%  %llu/%lld documents  %.0f docs/s  ETA %.0fs%s", terminal ? "\r" : "",
            bar, (int)(fraction * 100), (unsigned long long)done, (long long)total, rate, remaining,
            final || !terminal ? "\n" : "");
    fflush(stderr);
}

bool bench_run_load(const bench_options_t *options, mongoc_client_pool_t *pool, bench_results_t *results,
                    bson_error_t *error)
{
    run_shared_t shared;
    run_worker_t *workers = NULL;
    struct rusage usage_before, usage_after;
    bool ok = false;
    if (!shared_init(&shared, options, pool, results, error)) {
        return false;
    }
    workers = calloc((size_t)options->thread_count, sizeof *workers);
    if (workers == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "out of memory for %d workers", options->thread_count);
        goto done;
    }
    shared.load_start_ms = clock_wall_ms();
    TC_CHECK(workers_start(&shared, workers, worker_run_load, error));
    gate_wait_ready(&shared, options->thread_count);
    bool terminal = isatty(STDERR_FILENO);
    getrusage(RUSAGE_SELF, &usage_before);
    results->started_at_ms = clock_wall_ms();
    shared.start_ns = clock_monotonic_ns();
    gate_open(&shared);

    /* Progress: redrawn in place on a terminal, a line per 10% otherwise; one
     * time-series entry (documents inserted) per elapsed second. */
    uint64_t documents_at_last_second = 0;
    int last_decile = -1;
    int64_t next_second_ns = shared.start_ns + 1000000000;
    while (atomic_load(&shared.workers_done) < options->thread_count) {
        usleep(100000);
        int64_t now_ns = clock_monotonic_ns();
        uint64_t done_count = atomic_load(&shared.documents_done);
        while (now_ns >= next_second_ns) {
            if (!bench_results_reserve_seconds(results, results->second_count + 1, false, error)) {
                break; /* out of memory: the series stops short, the load goes on */
            }
            results->seconds[results->second_count].operations[BENCH_OP_INSERT] =
                done_count - documents_at_last_second;
            results->second_count++;
            documents_at_last_second = done_count;
            next_second_ns += 1000000000;
        }
        int decile = (int)(done_count * 10 / (uint64_t)options->record_count);
        if (terminal || (decile != last_decile && decile < 10)) {
            progress_print(done_count, options->record_count, now_ns - shared.start_ns, terminal, false);
            last_decile = decile;
        }
    }
    getrusage(RUSAGE_SELF, &usage_after);
    workers_finish(&shared, workers);
    int64_t end_ns = shared.start_ns;
    for (int index = 0; index < options->thread_count; index++) {
        end_ns = workers[index].finished_ns > end_ns ? workers[index].finished_ns : end_ns;
    }
    free(workers);
    workers = NULL;
    results->measured_ns = end_ns - shared.start_ns;
    results->documents_loaded = atomic_load(&shared.documents_done);
    results->documents_failed = atomic_load(&shared.documents_failed);
    progress_print(results->documents_loaded, options->record_count, results->measured_ns, terminal, true);
    if ((results->second_count == 0 || results->documents_loaded > documents_at_last_second) &&
        bench_results_reserve_seconds(results, results->second_count + 1, false, error)) {
        /* The last, partial second. */
        results->seconds[results->second_count].operations[BENCH_OP_INSERT] =
            results->documents_loaded - documents_at_last_second;
        results->second_count++;
    }
    bench_results_set_cpu(results, &usage_before, &usage_after);
    results->records_at_start = 0;
    results->records_at_end = (int64_t)results->documents_loaded;
    ok = true;
done:
    if (workers != NULL) {
        /* Only reached before the workers started. */
        free(workers);
    }
    shared_cleanup(&shared);
    return ok;
}
