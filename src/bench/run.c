/* The runner of `thermocline bench`: a group of worker threads, each with its
 * own mongoc_client_t popped from one pool (a client is not thread-safe), its
 * own random numbers and its own latency histograms, merged when the run ends.
 * The per-second time series is shared and updated with atomic adds. */
#include "bench/bench_private.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Ids handed to inserts, and the count of ids below which every insert has
 * finished: reads choose among those, so they never ask for a document whose
 * insert is still in flight (YCSB's acknowledged counter). */
typedef struct insert_ids {
    _Atomic int64_t next;
    _Atomic int64_t limit;
    pthread_mutex_t lock;
    uint8_t *finished; /* ring of window flags, indexed by id % window */
    int64_t window;
} insert_ids_t;

#define INSERT_IDS_WINDOW (INT64_C(1) << 20)

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
    int64_t measure_start_ns;
    int64_t end_ns;
    insert_ids_t ids;
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
    bench_key_chooser_t chooser;
    bench_operation_result_t operations[BENCH_OP_COUNT];
    int64_t finished_ns; /* the load: when this worker found no batch left */
} run_worker_t;

static void sleep_until_ns(int64_t deadline_ns)
{
    struct timespec until = {.tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}

static double cpu_seconds(const struct timeval *value)
{
    return (double)value->tv_sec + (double)value->tv_usec / 1e6;
}

/* --- insert ids --------------------------------------------------------------------- */

static bool insert_ids_init(insert_ids_t *ids, int64_t record_count, bson_error_t *error)
{
    atomic_init(&ids->next, record_count);
    atomic_init(&ids->limit, record_count);
    ids->window = INSERT_IDS_WINDOW;
    ids->finished = calloc((size_t)ids->window, 1);
    if (ids->finished == NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for insert ids");
    }
    pthread_mutex_init(&ids->lock, NULL);
    return true;
}

static void insert_ids_cleanup(insert_ids_t *ids)
{
    if (ids->finished != NULL) {
        pthread_mutex_destroy(&ids->lock);
        free(ids->finished);
        ids->finished = NULL;
    }
}

static int64_t insert_ids_take(insert_ids_t *ids)
{
    int64_t id = atomic_fetch_add(&ids->next, 1);
    /* One stalled insert holds the limit back while the others run ahead; wait
     * rather than overwrite a flag of the ring it still needs. */
    while (id - atomic_load(&ids->limit) >= ids->window) {
        usleep(100);
    }
    return id;
}

/* Marks id finished (acknowledged or failed: a failed id must not hold the limit
 * back forever) and moves the limit past every finished id. */
static void insert_ids_finish(insert_ids_t *ids, int64_t id)
{
    pthread_mutex_lock(&ids->lock);
    ids->finished[id % ids->window] = 1;
    int64_t limit = atomic_load(&ids->limit);
    while (ids->finished[limit % ids->window]) {
        ids->finished[limit % ids->window] = 0;
        limit++;
    }
    atomic_store(&ids->limit, limit);
    pthread_mutex_unlock(&ids->lock);
}

/* --- workers ------------------------------------------------------------------------ */

static bool worker_init(run_worker_t *worker, run_shared_t *shared, int index, bson_error_t *error)
{
    memset(worker, 0, sizeof *worker);
    worker->index = index;
    worker->shared = shared;
    /* Distinct streams per thread, reproducible from --seed. */
    bench_rng_seed(&worker->rng, shared->options->seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)index + 1);
    bench_key_chooser_init(&worker->chooser, shared->options->workload->distribution);
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

/* Records one measured operation finished at done_ns. */
static void worker_record(run_worker_t *worker, bench_operation_t operation, int64_t latency_ns, bool ok,
                          bool found, const bson_error_t *error, int64_t done_ns)
{
    run_shared_t *shared = worker->shared;
    bench_results_t *results = shared->results;
    bench_operation_result_t *result = &worker->operations[operation];
    uint64_t latency_us = latency_ns > 0 ? (uint64_t)(latency_ns / 1000) : 0;
    if (ok) {
        result->count++;
        bench_histogram_record(result->latency, latency_us);
        if (!found) {
            result->not_found++;
        }
    } else {
        worker_note_error(worker, operation, error->message);
    }
    int64_t second = (done_ns - shared->measure_start_ns) / 1000000000;
    if (second < 0) {
        second = 0;
    }
    if (second >= results->second_count) {
        second = results->second_count - 1;
    }
    bench_second_t *slot = &results->seconds[second];
    if (ok) {
        __atomic_fetch_add(&slot->operations[operation], 1, __ATOMIC_RELAXED);
        if (operation == BENCH_OP_READ && slot->read_latency != NULL) {
            bench_histogram_record_shared(slot->read_latency, latency_us);
        }
    } else {
        __atomic_fetch_add(&slot->errors[operation], 1, __ATOMIC_RELAXED);
    }
}

/* Runs one write command and turns a writeErrors or writeConcernError entry of
 * an ok: 1 reply into a failure, as the driver's CRUD helpers would. */
static bool write_command_run(mongoc_collection_t *collection, const bson_t *command, bson_t *out_reply,
                              bson_error_t *error)
{
    bson_iter_t iter, entry;
    if (!mongoc_collection_command_simple(collection, command, NULL, out_reply, error)) {
        return false;
    }
    const char *fields[] = {"writeErrors.0", "writeConcernError"};
    for (size_t index = 0; index < sizeof fields / sizeof *fields; index++) {
        if (bson_iter_init(&iter, out_reply) && bson_iter_find_descendant(&iter, fields[index], &entry) &&
            BSON_ITER_HOLDS_DOCUMENT(&entry)) {
            bson_iter_t field;
            const char *message = "write failed";
            int32_t code = TC_ERR_INTERNAL;
            if (bson_iter_recurse(&entry, &field) && bson_iter_find(&field, "errmsg") &&
                BSON_ITER_HOLDS_UTF8(&field)) {
                message = bson_iter_utf8(&field, NULL);
            }
            if (bson_iter_recurse(&entry, &field) && bson_iter_find(&field, "code")) {
                code = (int32_t)bson_iter_as_int64(&field);
            }
            return tc_error_set(error, code, "%s", message);
        }
    }
    return true;
}

/* The operations send the commands a driver's find / updateOne / insertOne
 * would, through mongoc_collection_command_simple: a find through a libmongoc
 * cursor costs the generator about 20 us of user CPU against 11 here, and the
 * generator shares the machine with the server it measures. */
static bool operation_read(run_worker_t *worker, mongoc_collection_t *collection, bool *out_found,
                           bson_error_t *error)
{
    int64_t key = bench_key_choose(&worker->chooser, &worker->rng, atomic_load(&worker->shared->ids.limit));
    bson_t command = BSON_INITIALIZER;
    bson_t filter;
    bson_t reply;
    bson_iter_t iter, batch;
    BSON_APPEND_UTF8(&command, "find", worker->shared->options->collection);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "filter", &filter);
    BSON_APPEND_INT64(&filter, "_id", key);
    bson_append_document_end(&command, &filter);
    BSON_APPEND_INT64(&command, "limit", 1);
    BSON_APPEND_BOOL(&command, "singleBatch", true);
    bool ok = mongoc_collection_command_simple(collection, &command, NULL, &reply, error);
    *out_found = ok && bson_iter_init(&iter, &reply) &&
                 bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) && BSON_ITER_HOLDS_ARRAY(&batch) &&
                 bson_iter_recurse(&batch, &iter) && bson_iter_next(&iter);
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

static bool operation_update(run_worker_t *worker, mongoc_collection_t *collection, bool *out_found,
                             bson_error_t *error)
{
    int64_t key = bench_key_choose(&worker->chooser, &worker->rng, atomic_load(&worker->shared->ids.limit));
    char value[BENCH_FIELD_LENGTH];
    bson_t command = BSON_INITIALIZER;
    bson_t updates, statement, filter, update, set;
    bson_t reply;
    bson_iter_t iter;
    bench_field_value_fill(&worker->rng, value);
    BSON_APPEND_UTF8(&command, "update", worker->shared->options->collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &filter);
    BSON_APPEND_INT64(&filter, "_id", key);
    bson_append_document_end(&statement, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    bson_append_utf8(&set, bench_field_name((int)bench_rng_below(&worker->rng, BENCH_FIELD_COUNT)), -1, value,
                     BENCH_FIELD_LENGTH);
    bson_append_document_end(&update, &set);
    bson_append_document_end(&statement, &update);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    BSON_APPEND_BOOL(&command, "ordered", true);
    bool ok = write_command_run(collection, &command, &reply, error);
    /* "n" of an update reply counts the documents matched. */
    *out_found = !(ok && bson_iter_init_find(&iter, &reply, "n") && bson_iter_as_int64(&iter) == 0);
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

static bool operation_insert(run_worker_t *worker, mongoc_collection_t *collection, bson_error_t *error)
{
    insert_ids_t *ids = &worker->shared->ids;
    int64_t id = insert_ids_take(ids);
    bson_t command = BSON_INITIALIZER;
    bson_t documents, document;
    bson_t reply;
    BSON_APPEND_UTF8(&command, "insert", worker->shared->options->collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "documents", &documents);
    BSON_APPEND_DOCUMENT_BEGIN(&documents, "0", &document);
    bench_document_build(&document, id, bench_wall_ms(), &worker->rng);
    bson_append_document_end(&documents, &document);
    bson_append_array_end(&command, &documents);
    BSON_APPEND_BOOL(&command, "ordered", true);
    bool ok = write_command_run(collection, &command, &reply, error);
    insert_ids_finish(ids, id);
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

static bench_operation_t worker_choose_operation(run_worker_t *worker)
{
    const bench_workload_t *workload = worker->shared->options->workload;
    double draw = bench_rng_unit(&worker->rng);
    if (draw < workload->read_fraction) {
        return BENCH_OP_READ;
    }
    if (draw < workload->read_fraction + workload->update_fraction) {
        return BENCH_OP_UPDATE;
    }
    return BENCH_OP_INSERT;
}

static void *worker_run_mix(void *argument)
{
    run_worker_t *worker = argument;
    run_shared_t *shared = worker->shared;
    const bench_options_t *options = shared->options;
    mongoc_collection_t *collection;
    mongoc_client_t *client = worker_connect(worker, &collection);

    /* With --target-ops each thread offers its share on a fixed schedule, the
     * threads staggered across one interval; latency runs from the scheduled
     * start, so a slow server's queueing shows (no coordinated omission). */
    int64_t interval_ns = 0;
    int64_t intended_ns = shared->start_ns;
    if (options->target_ops > 0) {
        interval_ns = (int64_t)((double)options->thread_count * 1e9 / (double)options->target_ops);
        intended_ns += interval_ns * worker->index / options->thread_count;
    }
    for (;;) {
        int64_t now_ns = bench_clock_ns();
        if (interval_ns > 0) {
            /* Past the end, a backlog of late operations is dropped rather than
             * run on: the shortfall shows as throughput below the target. */
            if (intended_ns >= shared->end_ns || now_ns >= shared->end_ns) {
                break;
            }
            if (now_ns < intended_ns) {
                sleep_until_ns(intended_ns);
            }
        } else {
            if (now_ns >= shared->end_ns) {
                break;
            }
            intended_ns = now_ns;
        }
        bench_operation_t operation = worker_choose_operation(worker);
        bool found = true;
        bool ok;
        bson_error_t error;
        switch (operation) {
        case BENCH_OP_READ:
            ok = operation_read(worker, collection, &found, &error);
            break;
        case BENCH_OP_UPDATE:
            ok = operation_update(worker, collection, &found, &error);
            break;
        default:
            ok = operation_insert(worker, collection, &error);
            break;
        }
        int64_t done_ns = bench_clock_ns();
        if (intended_ns >= shared->measure_start_ns) {
            worker_record(worker, operation, done_ns - intended_ns, ok, found, &error, done_ns);
        }
        intended_ns += interval_ns;
    }
    worker_disconnect(worker, client, collection);
    return NULL;
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
                                 bench_document_created_at(id, record_count, shared->load_start_ms), &worker->rng);
        }
        bson_t reply;
        bson_error_t error;
        bson_iter_t iter;
        int64_t started_ns = bench_clock_ns();
        bool ok = mongoc_collection_insert_many(collection, pointers, (size_t)count, &insert_options, &reply,
                                                &error);
        int64_t done_ns = bench_clock_ns();
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
    worker->finished_ns = bench_clock_ns();
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
    if (!insert_ids_init(&shared->ids, options->record_count, error)) {
        return false;
    }
    pthread_mutex_init(&shared->gate_lock, NULL);
    pthread_cond_init(&shared->gate_changed, NULL);
    return true;
}

static void shared_cleanup(run_shared_t *shared)
{
    pthread_mutex_destroy(&shared->gate_lock);
    pthread_cond_destroy(&shared->gate_changed);
    insert_ids_cleanup(&shared->ids);
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
 * started find no work (end time 0, no batch left), are joined, and every
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
            shared->end_ns = 0;
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
    shared.load_start_ms = bench_wall_ms();
    TC_CHECK(workers_start(&shared, workers, worker_run_load, error));
    gate_wait_ready(&shared, options->thread_count);
    bool terminal = isatty(STDERR_FILENO);
    getrusage(RUSAGE_SELF, &usage_before);
    results->started_at_ms = bench_wall_ms();
    shared.start_ns = shared.measure_start_ns = bench_clock_ns();
    gate_open(&shared);

    /* Progress: redrawn in place on a terminal, a line per 10% otherwise; one
     * time-series entry (documents inserted) per elapsed second. */
    uint64_t documents_at_last_second = 0;
    int last_decile = -1;
    int64_t next_second_ns = shared.start_ns + 1000000000;
    while (atomic_load(&shared.workers_done) < options->thread_count) {
        usleep(100000);
        int64_t now_ns = bench_clock_ns();
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
    results->cpu_user_seconds = cpu_seconds(&usage_after.ru_utime) - cpu_seconds(&usage_before.ru_utime);
    results->cpu_system_seconds = cpu_seconds(&usage_after.ru_stime) - cpu_seconds(&usage_before.ru_stime);
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

/* Prints one status line every 10 s of a long run, from the last full second. */
static void status_print(const bench_results_t *results, int second)
{
    const bench_second_t *slot = &results->seconds[second];
    uint64_t operations = 0;
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        operations += __atomic_load_n(&slot->operations[operation], __ATOMIC_RELAXED);
    }
    fprintf(stderr, "thermocline bench: %d s, %llu ops/s, read p99 %.3f ms\n", second + 1,
            (unsigned long long)operations,
            slot->read_latency ? (double)bench_histogram_percentile(slot->read_latency, 99.0) / 1000.0 : 0.0);
}

bool bench_run_mix(const bench_options_t *options, mongoc_client_pool_t *pool, bench_results_t *results,
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
    TC_CHECK(workers_start(&shared, workers, worker_run_mix, error));
    gate_wait_ready(&shared, options->thread_count);
    shared.start_ns = bench_clock_ns();
    shared.measure_start_ns = shared.start_ns + options->warmup_ms * 1000000;
    shared.end_ns = shared.measure_start_ns + options->duration_ms * 1000000;
    results->records_at_start = options->record_count;
    gate_open(&shared);

    if (options->warmup_ms > 0) {
        sleep_until_ns(shared.measure_start_ns);
    }
    getrusage(RUSAGE_SELF, &usage_before);
    results->started_at_ms = bench_wall_ms();
    for (int second = 1; second < results->second_count; second++) {
        sleep_until_ns(shared.measure_start_ns + (int64_t)second * 1000000000);
        if (second % 10 == 0) {
            status_print(results, second - 1);
        }
    }
    sleep_until_ns(shared.end_ns);
    getrusage(RUSAGE_SELF, &usage_after);
    workers_finish(&shared, workers);
    free(workers);
    workers = NULL;
    results->measured_ns = shared.end_ns - shared.measure_start_ns;
    results->cpu_user_seconds = cpu_seconds(&usage_after.ru_utime) - cpu_seconds(&usage_before.ru_utime);
    results->cpu_system_seconds = cpu_seconds(&usage_after.ru_stime) - cpu_seconds(&usage_before.ru_stime);
    results->records_at_end = atomic_load(&shared.ids.limit);
    ok = true;
done:
    free(workers);
    shared_cleanup(&shared);
    return ok;
}
