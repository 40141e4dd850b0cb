/* The timed mixes of `thermocline bench`: --threads clients, each with its own
 * connection, its own implicit session and one operation in flight, all driven by
 * one libuv loop through the asynchronous wire client the proxy uses for its tiers
 * (client/backend.h: its connection pool, handshake, SCRAM and TLS). Each operation is the
 * command a driver's find / updateOne / insertOne sends, with the lsid and the
 * $clusterTime a driver attaches. A URI with several hosts and no replicaSet= names
 * several mongos (or proxies): client i uses host i modulo their number, with a pool
 * per host, as a driver spreads its operations over the mongos of its seed list.
 *
 * Why one loop and not a thread per client blocking in libmongoc, as YCSB's
 * clients do: 64 such threads cost the generator 35-45 µs of CPU per operation,
 * half of it switching between threads, and on one machine the generator takes
 * that CPU from the servers it measures. */
#include "bench/bench_private.h"

#include "client/backend.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/timestamp.h"
#include "wire/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <uv.h>

#define NANOSECONDS_PER_SECOND INT64_C(1000000000)
#define MIX_CONNECT_TIMEOUT_MS 10000
/* How long the closing endSessions may take. The clients' first pings, and
 * after the end the operations still in flight, have --reply-timeout (a server
 * that stopped answering). */
#define MIX_END_SESSIONS_TIMEOUT_MS 2000
/* Ring of "insert finished" flags: far more than the inserts a run can have in
 * flight (one per client). */
#define MIX_INSERT_WINDOW (INT64_C(1) << 20)

typedef struct mix_run mix_run_t;

typedef enum mix_phase {
    MIX_CONNECTING, /* the clients' pings are out */
    MIX_WARMING_UP,
    MIX_MEASURING,
    MIX_DRAINING, /* past the end: the operations in flight finish */
    MIX_ENDING,   /* every client stopped: endSessions is out */
    MIX_CLOSING,
} mix_phase_t;

typedef struct mix_client {
    mix_run_t *run;
    int host; /* its host: run->pools and results->hosts index */
    bench_rng_t rng;
    bench_key_chooser_t chooser;
    uint8_t session_id[16]; /* the implicit session's lsid, a random UUID */
    /* The operation in flight. */
    bench_operation_t operation;
    int64_t intended_ns; /* its start: scheduled with --target-ops, else when sent */
    int64_t insert_id;
    /* --target-ops: a timerfd wakes the client at its next scheduled start; libuv's
     * timers count whole milliseconds, which would add up to 1 ms to latencies. */
    int timer_fd;
    uv_poll_t timer_poll;
    bool timer_poll_open;
} mix_client_t;

/* Ids handed to inserts, and the count of ids below which every insert has
 * finished: reads choose among those, so they never ask for a document whose
 * insert is still in flight (YCSB's acknowledged counter). */
typedef struct insert_ids {
    int64_t next;
    int64_t limit;
    uint8_t *finished; /* indexed by id % MIX_INSERT_WINDOW */
} insert_ids_t;

struct mix_run {
    const bench_options_t *options;
    bench_results_t *results;
    uv_loop_t loop;
    backend_pool_t **pools; /* one per host, results->host_count of them */
    mix_client_t *clients;
    insert_ids_t ids;
    mix_phase_t phase;
    int clients_ready; /* answered their first ping */
    int clients_done;  /* past the end, nothing in flight */
    int end_sessions_pending; /* hosts yet to answer endSessions */
    int64_t start_ns, measure_start_ns, end_ns;
    int64_t interval_ns; /* --target-ops: between one client's scheduled starts; 0: none */
    /* Fires at the warm-up's end, each second of the measured window and the
     * end; then bounds the drain and the endSessions. */
    uv_timer_t clock_timer;
    bool clock_timer_open;
    int seconds_reported;
    struct rusage usage_before, usage_after;
    /* The highest $clusterTime a reply carried, gossiped back as drivers do. */
    bson_t cluster_time;
    uint64_t cluster_time_value;
    bson_error_t failure; /* a message could not be built */
    bool failed;
};

/* --- insert ids --------------------------------------------------------------------- */

static int64_t insert_ids_take(insert_ids_t *ids)
{
    return ids->next++;
}

/* Marks id finished (acknowledged or failed: a failed id must not hold the limit
 * back forever) and moves the limit past every finished id. */
static void insert_ids_finish(insert_ids_t *ids, int64_t id)
{
    ids->finished[id % MIX_INSERT_WINDOW] = 1;
    while (ids->finished[ids->limit % MIX_INSERT_WINDOW]) {
        ids->finished[ids->limit % MIX_INSERT_WINDOW] = 0;
        ids->limit++;
    }
}

/* --- commands and replies ------------------------------------------------------------- */

/* What a driver adds to every command: $db, the session and the cluster time. */
static void append_driver_fields(mix_client_t *client, bson_t *command, const char *database)
{
    bson_t session;
    BSON_APPEND_UTF8(command, "$db", database);
    BSON_APPEND_DOCUMENT_BEGIN(command, "lsid", &session);
    bson_append_binary(&session, "id", 2, BSON_SUBTYPE_UUID, client->session_id, sizeof client->session_id);
    bson_append_document_end(command, &session);
    if (client->run->cluster_time_value != 0) {
        BSON_APPEND_DOCUMENT(command, "$clusterTime", &client->run->cluster_time);
    }
}

static void build_read(mix_client_t *client, bson_t *command)
{
    bson_t filter;
    int64_t key = bench_key_choose(&client->chooser, &client->rng, client->run->ids.limit);
    BSON_APPEND_UTF8(command, "find", client->run->options->collection);
    BSON_APPEND_DOCUMENT_BEGIN(command, "filter", &filter);
    BSON_APPEND_INT64(&filter, "_id", key);
    bson_append_document_end(command, &filter);
    BSON_APPEND_INT64(command, "limit", 1);
    BSON_APPEND_BOOL(command, "singleBatch", true);
}

static void build_update(mix_client_t *client, bson_t *command)
{
    bson_t updates, statement, filter, update, set;
    char value[BENCH_FIELD_LENGTH];
    int64_t key = bench_key_choose(&client->chooser, &client->rng, client->run->ids.limit);
    bench_field_value_fill(&client->rng, value);
    BSON_APPEND_UTF8(command, "update", client->run->options->collection);
    BSON_APPEND_ARRAY_BEGIN(command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &filter);
    BSON_APPEND_INT64(&filter, "_id", key);
    bson_append_document_end(&statement, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    bson_append_utf8(&set, bench_field_name((int)bench_rng_below(&client->rng, BENCH_FIELD_COUNT)), -1, value,
                     BENCH_FIELD_LENGTH);
    bson_append_document_end(&update, &set);
    bson_append_document_end(&statement, &update);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(command, &updates);
    BSON_APPEND_BOOL(command, "ordered", true);
}

static void build_insert(mix_client_t *client, bson_t *command)
{
    bson_t documents, document;
    client->insert_id = insert_ids_take(&client->run->ids);
    BSON_APPEND_UTF8(command, "insert", client->run->options->collection);
    BSON_APPEND_ARRAY_BEGIN(command, "documents", &documents);
    BSON_APPEND_DOCUMENT_BEGIN(&documents, "0", &document);
    bench_document_build(&document, client->insert_id, clock_wall_ms(),
                         client->run->options->workload->email_index != BENCH_EMAIL_INDEX_NONE, &client->rng);
    bson_append_document_end(&documents, &document);
    bson_append_array_end(command, &documents);
    BSON_APPEND_BOOL(command, "ordered", true);
}

/* The error an ok: 0 reply, or a writeErrors / writeConcernError entry of an
 * ok: 1 one, stands for, as the driver's CRUD helpers report it. False: none. */
static bool reply_error(const bson_t *body, bson_error_t *error)
{
    bson_iter_t iter, entry, field;
    bool ok = bson_iter_init_find(&iter, body, "ok") && bson_iter_as_double(&iter) == 1.0;
    const bson_t *holder = body;
    bson_t entry_document;
    if (ok) {
        static const char *const fields[] = {"writeErrors.0", "writeConcernError"};
        size_t index = 0;
        for (; index < sizeof fields / sizeof *fields; index++) {
            if (bson_iter_init(&iter, body) && bson_iter_find_descendant(&iter, fields[index], &entry) &&
                BSON_ITER_HOLDS_DOCUMENT(&entry)) {
                break;
            }
        }
        if (index == sizeof fields / sizeof *fields) {
            return false;
        }
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&entry, &length, &data);
        if (!bson_init_static(&entry_document, data, length)) {
            return tc_error_set(error, TC_ERR_INTERNAL, "write failed");
        }
        holder = &entry_document;
    }
    int32_t code = TC_ERR_INTERNAL;
    const char *message = ok ? "write failed" : "command failed";
    if (bson_iter_init_find(&field, holder, "errmsg") && BSON_ITER_HOLDS_UTF8(&field)) {
        message = bson_iter_utf8(&field, NULL);
    }
    if (bson_iter_init_find(&field, holder, "code")) {
        code = (int32_t)bson_iter_as_int64(&field);
    }
    tc_error_set(error, code, "%s", message);
    return true;
}

/* Whether a successful reply says the operation found its document: a read's
 * first batch holds one; an update matched one ("n"). */
static bool reply_found(bench_operation_t operation, const bson_t *body)
{
    bson_iter_t iter, batch;
    switch (operation) {
    case BENCH_OP_READ:
        return bson_iter_init(&iter, body) && bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) &&
               BSON_ITER_HOLDS_ARRAY(&batch) && bson_iter_recurse(&batch, &iter) && bson_iter_next(&iter);
    case BENCH_OP_UPDATE:
        return !(bson_iter_init_find(&iter, body, "n") && bson_iter_as_int64(&iter) == 0);
    default:
        return true;
    }
}

static void note_cluster_time(mix_run_t *run, const bson_t *body)
{
    bson_iter_t iter;
    uint32_t length;
    const uint8_t *data;
    bson_t document;
    if (!bson_iter_init_find(&iter, body, "$clusterTime") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return;
    }
    bson_iter_document(&iter, &length, &data);
    if (!bson_init_static(&document, data, length)) {
        return;
    }
    uint64_t value = timestamp_find(&document, "clusterTime");
    if (value > run->cluster_time_value) {
        bson_destroy(&run->cluster_time);
        bson_copy_to(&document, &run->cluster_time);
        run->cluster_time_value = value;
    }
}

/* Sends command (built here, freed here) to host with done as the reply's callback. */
static bool send_command(mix_run_t *run, int host, bson_t *command, backend_reply_fn done, void *context)
{
    uint8_t *message = NULL;
    size_t length;
    bool ok = wire_op_msg_build(0, 0, 0, command, NULL, 0, &message, &length, &run->failure);
    bson_destroy(command);
    if (!ok) {
        run->failed = true;
        return false;
    }
    backend_pool_send(run->pools[host], message, length, done, context);
    bson_free(message);
    return true;
}

/* --- recording ------------------------------------------------------------------------ */

static void record(mix_client_t *client, int64_t latency_ns, const bson_error_t *error, bool found, int64_t done_ns)
{
    mix_run_t *run = client->run;
    bench_operation_t operation = client->operation;
    bench_results_t *results = run->results;
    bench_host_result_t *host = &results->hosts[client->host];
    bench_operation_result_t *result = &results->operations[operation];
    uint64_t latency_us = latency_ns > 0 ? (uint64_t)(latency_ns / 1000) : 0;
    if (error == NULL) {
        result->count++;
        host->operations++;
        bench_histogram_record(result->latency, latency_us);
        result->not_found += !found;
    } else {
        result->errors++;
        host->errors++;
        if (result->first_error[0] == '\0') {
            bson_strncpy(result->first_error, error->message, sizeof result->first_error);
        }
    }
    int64_t second = (done_ns - run->measure_start_ns) / NANOSECONDS_PER_SECOND;
    second = second < 0 ? 0 : second >= results->second_count ? results->second_count - 1 : second;
    bench_second_t *slot = &results->seconds[second];
    if (error == NULL) {
        slot->operations[operation]++;
        if (operation == BENCH_OP_READ && slot->read_latency != NULL) {
            bench_histogram_record(slot->read_latency, latency_us);
        }
    } else {
        slot->errors[operation]++;
    }
}

/* --- the clients ---------------------------------------------------------------------- */

static void client_next(mix_client_t *client);
static void run_client_done(mix_run_t *run);

static bench_operation_t choose_operation(mix_client_t *client)
{
    const bench_workload_t *workload = client->run->options->workload;
    double draw = bench_rng_unit(&client->rng);
    if (draw < workload->read_fraction) {
        return BENCH_OP_READ;
    }
    return draw < workload->read_fraction + workload->update_fraction ? BENCH_OP_UPDATE : BENCH_OP_INSERT;
}

static void on_operation_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    mix_client_t *client = context;
    mix_run_t *run = client->run;
    int64_t done_ns = clock_monotonic_ns();
    bson_error_t reply_failure;
    const bson_error_t *failure = error;
    bool found = false;
    bson_t body;
    if (failure == NULL && !wire_op_msg_peek_body(reply, length, &body, &reply_failure)) {
        failure = &reply_failure;
    }
    if (failure == NULL) {
        note_cluster_time(run, &body);
        if (reply_error(&body, &reply_failure)) {
            failure = &reply_failure;
        } else {
            found = reply_found(client->operation, &body);
        }
    }
    if (client->operation == BENCH_OP_INSERT) {
        insert_ids_finish(&run->ids, client->insert_id);
    }
    if (client->intended_ns >= run->measure_start_ns) {
        record(client, done_ns - client->intended_ns, failure, found, done_ns);
    }
    client->intended_ns += run->interval_ns;
    client_next(client);
}

static void client_send(mix_client_t *client)
{
    mix_run_t *run = client->run;
    bson_t command = BSON_INITIALIZER;
    client->operation = choose_operation(client);
    switch (client->operation) {
    case BENCH_OP_READ:
        build_read(client, &command);
        break;
    case BENCH_OP_UPDATE:
        build_update(client, &command);
        break;
    default:
        build_insert(client, &command);
        break;
    }
    append_driver_fields(client, &command, run->options->database);
    if (!send_command(run, client->host, &command, on_operation_reply, client)) {
        run_client_done(run);
    }
}

static void on_timer_fd(uv_poll_t *poll, int status, int events)
{
    mix_client_t *client = poll->data;
    uint64_t expirations;
    (void)status, (void)events;
    if (read(client->timer_fd, &expirations, sizeof expirations) == sizeof expirations) {
        client_send(client);
    }
}

/* Starts the client's next operation: at once, or with --target-ops at its
 * scheduled start (latency runs from there, so a slow server's queueing shows: no
 * coordinated omission). Past the end, the client stops; with --target-ops a
 * backlog of late operations is dropped rather than run on, and the shortfall
 * shows as throughput below the target. */
static void client_next(mix_client_t *client)
{
    mix_run_t *run = client->run;
    int64_t now_ns = clock_monotonic_ns();
    if (run->failed || run->phase == MIX_CLOSING || now_ns >= run->end_ns ||
        (run->interval_ns > 0 && client->intended_ns >= run->end_ns)) {
        run_client_done(run);
        return;
    }
    if (run->interval_ns == 0) {
        client->intended_ns = now_ns;
    } else if (now_ns < client->intended_ns) {
        struct itimerspec at = {.it_value = {.tv_sec = client->intended_ns / NANOSECONDS_PER_SECOND,
                                             .tv_nsec = client->intended_ns % NANOSECONDS_PER_SECOND}};
        if (timerfd_settime(client->timer_fd, TFD_TIMER_ABSTIME, &at, NULL) == 0) {
            return;
        }
    }
    client_send(client);
}

/* --- the run -------------------------------------------------------------------------- */

static void close_handles(mix_run_t *run)
{
    if (run->phase == MIX_CLOSING) {
        return;
    }
    run->phase = MIX_CLOSING;
    for (int index = 0; index < run->options->thread_count; index++) {
        mix_client_t *client = &run->clients[index];
        if (client->timer_poll_open) {
            uv_close((uv_handle_t *)&client->timer_poll, NULL);
            client->timer_poll_open = false;
        }
    }
    if (run->clock_timer_open) {
        uv_close((uv_handle_t *)&run->clock_timer, NULL);
        run->clock_timer_open = false;
    }
    for (int host = 0; run->pools != NULL && host < run->results->host_count; host++) {
        if (run->pools[host] != NULL) {
            backend_pool_close(run->pools[host]);
        }
    }
}

/* The measured window ends: at its end, or earlier when every client stopped (a
 * message that could not be built). */
static void end_measurement(mix_run_t *run)
{
    if (run->phase == MIX_MEASURING || run->phase == MIX_WARMING_UP) {
        getrusage(RUSAGE_SELF, &run->usage_after);
        if (run->phase == MIX_WARMING_UP) {
            run->usage_before = run->usage_after;
        }
        run->phase = MIX_DRAINING;
    }
}

static void on_end_sessions_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    mix_run_t *run = context;
    (void)reply, (void)length, (void)error;
    if (--run->end_sessions_pending == 0) {
        close_handles(run);
    }
}

static void on_give_up(uv_timer_t *timer)
{
    mix_run_t *run = timer->data;
    if (run->phase == MIX_CONNECTING || run->phase == MIX_DRAINING) {
        int answered = run->phase == MIX_CONNECTING ? run->clients_ready : run->clients_done;
        fprintf(stderr, "thermocline bench: %d of %d clients still wait for a reply after %g s; giving up\n",
                run->options->thread_count - answered, run->options->thread_count,
                (double)run->options->reply_timeout_ms / 1000.0);
    }
    if (run->phase == MIX_CONNECTING) {
        run->failed = true;
        tc_error_set(&run->failure, TC_ERR_HOST_UNREACHABLE,
                     "the server did not answer every client's first command within %g s",
                     (double)run->options->reply_timeout_ms / 1000.0);
    }
    close_handles(run); /* fails what is in flight: the clients stop */
}

/* endSessions of the sessions of host's clients, to that host. */
static bool end_sessions(mix_run_t *run, int host)
{
    bson_t command = BSON_INITIALIZER, sessions, session;
    char key[16];
    const char *key_text;
    uint32_t count = 0;
    BSON_APPEND_ARRAY_BEGIN(&command, "endSessions", &sessions);
    for (int index = 0; index < run->options->thread_count; index++) {
        if (run->clients[index].host != host) {
            continue;
        }
        bson_uint32_to_string(count++, &key_text, key, sizeof key);
        bson_append_document_begin(&sessions, key_text, -1, &session);
        bson_append_binary(&session, "id", 2, BSON_SUBTYPE_UUID, run->clients[index].session_id,
                           sizeof run->clients[index].session_id);
        bson_append_document_end(&sessions, &session);
    }
    bson_append_array_end(&command, &sessions);
    BSON_APPEND_UTF8(&command, "$db", "admin");
    if (count == 0) {
        bson_destroy(&command);
        return true;
    }
    run->end_sessions_pending++;
    return send_command(run, host, &command, on_end_sessions_reply, run);
}

/* Every client has stopped: end their sessions on the host each used, as a driver
 * does when its pool closes, then close everything so uv_run() returns. */
static void run_client_done(mix_run_t *run)
{
    if (++run->clients_done < run->options->thread_count || run->phase == MIX_CLOSING) {
        return;
    }
    end_measurement(run);
    run->phase = MIX_ENDING;
    uv_timer_start(&run->clock_timer, on_give_up, MIX_END_SESSIONS_TIMEOUT_MS, 0);
    /* Counted as one until every command is out, so an early reply cannot close the run. */
    run->end_sessions_pending = 1;
    bool sent = true;
    for (int host = 0; host < run->results->host_count && sent; host++) {
        sent = end_sessions(run, host);
    }
    if (!sent) {
        close_handles(run);
    } else if (--run->end_sessions_pending == 0) {
        close_handles(run);
    }
}

static void print_status(const bench_results_t *results, int second)
{
    const bench_second_t *slot = &results->seconds[second];
    uint64_t operations = 0;
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        operations += slot->operations[operation];
    }
    double read_p99_ms =
        slot->read_latency ? (double)bench_histogram_percentile(slot->read_latency, 99.0) / 1000.0 : 0.0;
    if (tc_log_get_format() == TC_LOG_FORMAT_JSON) {
        TC_LOG_ATTRS(TC_LOG_INFO, "BENCH", 0, "{second} s, {opsPerSecond} ops/s, read p99 {readP99Millis} ms",
                     TC_ATTR_INT("second", second + 1), TC_ATTR_INT("opsPerSecond", operations),
                     TC_ATTR_DOUBLE("readP99Millis", read_p99_ms));
        return;
    }
    fprintf(stderr, "thermocline bench: %d s, %llu ops/s, read p99 %.3f ms\n", second + 1,
            (unsigned long long)operations, read_p99_ms);
}

/* Fires at the warm-up's end, then every second of the measured window and at its
 * end: CPU use is taken at both ends of the window, and a status line printed
 * every 10 s. libuv's timers count whole milliseconds, so one may fire up to 1 ms
 * early: the time is read, not assumed. */
static void on_clock(uv_timer_t *timer)
{
    mix_run_t *run = timer->data;
    int64_t now_ns = clock_monotonic_ns();
    if (run->phase == MIX_WARMING_UP) {
        getrusage(RUSAGE_SELF, &run->usage_before);
        run->results->started_at_ms = clock_wall_ms();
        run->phase = MIX_MEASURING;
    }
    if (run->phase != MIX_MEASURING) {
        return;
    }
    if (now_ns >= run->end_ns) {
        end_measurement(run);
        uv_timer_start(timer, on_give_up, (uint64_t)run->options->reply_timeout_ms, 0);
        return;
    }
    int seconds = now_ns > run->measure_start_ns ? (int)((now_ns - run->measure_start_ns) / NANOSECONDS_PER_SECOND) : 0;
    if (seconds > run->seconds_reported) {
        run->seconds_reported = seconds;
        if (seconds % 10 == 0 && seconds < run->results->second_count) {
            print_status(run->results, seconds - 1);
        }
    }
    int64_t next_ns = run->measure_start_ns + (int64_t)(seconds + 1) * NANOSECONDS_PER_SECOND;
    next_ns = next_ns < run->end_ns ? next_ns : run->end_ns;
    uv_timer_start(timer, on_clock, (uint64_t)((next_ns - now_ns + 999999) / 1000000), 0);
}

/* Every client has its connection (the pings were answered): the clock starts. */
static void start_clock(mix_run_t *run)
{
    const bench_options_t *options = run->options;
    run->start_ns = clock_monotonic_ns();
    run->measure_start_ns = run->start_ns + options->warmup_ms * 1000000;
    run->end_ns = run->measure_start_ns + options->duration_ms * 1000000;
    if (options->target_ops > 0) {
        run->interval_ns = (int64_t)((double)options->thread_count * 1e9 / (double)options->target_ops);
    }
    run->phase = MIX_WARMING_UP;
    uv_timer_start(&run->clock_timer, on_clock, (uint64_t)options->warmup_ms, 0);
    for (int index = 0; index < options->thread_count; index++) {
        mix_client_t *client = &run->clients[index];
        /* With --target-ops the clients are staggered across one interval. */
        client->intended_ns = run->start_ns + run->interval_ns * index / options->thread_count;
        client_next(client);
    }
}

static void on_ping_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    mix_client_t *client = context;
    (void)reply, (void)length, (void)error; /* a failure shows in the operations that follow */
    if (client->run->phase == MIX_CONNECTING &&
        ++client->run->clients_ready == client->run->options->thread_count) {
        start_clock(client->run);
    }
}

static bool client_init(mix_run_t *run, mix_client_t *client, int index, bson_error_t *error)
{
    client->run = run;
    client->host = index % run->results->host_count; /* round-robin, as a driver spreads over its mongos */
    /* Distinct streams per client, reproducible from --seed. */
    bench_rng_seed(&client->rng, run->options->seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)index + 1);
    bench_key_chooser_init(&client->chooser, run->options->workload->distribution);
    for (size_t byte = 0; byte < sizeof client->session_id; byte += 8) {
        uint64_t random = bench_rng_next(&client->rng) ^ (uint64_t)clock_monotonic_ns();
        memcpy(client->session_id + byte, &random, 8);
    }
    client->session_id[6] = (uint8_t)((client->session_id[6] & 0x0F) | 0x40); /* UUID version 4 */
    client->session_id[8] = (uint8_t)((client->session_id[8] & 0x3F) | 0x80);
    if (run->options->target_ops == 0) {
        return true;
    }
    client->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (client->timer_fd < 0) {
        return tc_error_set(error, TC_ERR_INTERNAL, "timerfd_create for client %d: %s", index + 1, strerror(errno));
    }
    if (uv_poll_init(&run->loop, &client->timer_poll, client->timer_fd) != 0) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot watch the timer of client %d", index + 1);
    }
    client->timer_poll_open = true;
    client->timer_poll.data = client;
    uv_poll_start(&client->timer_poll, UV_READABLE, on_timer_fd);
    return true;
}

/* The hosts the clients are spread over: every host of the URI's seed list, or
 * for a replica set's URI the one its primary is found from (the first). */
static bool hosts_init(const bench_options_t *options, bench_results_t *results, bson_error_t *error)
{
    bson_error_t uri_error;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(options->uri_string, &uri_error);
    if (uri == NULL) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "--uri: %s", uri_error.message);
    }
    const char *replica_set = mongoc_uri_get_replica_set(uri);
    int count = 0;
    for (const mongoc_host_list_t *host = mongoc_uri_get_hosts(uri); host != NULL; host = host->next) {
        count++;
    }
    count = replica_set != NULL && count > 1 ? 1 : count;
    if (count == 0) {
        mongoc_uri_destroy(uri);
        return tc_error_set(error, TC_ERR_BAD_VALUE, "--uri names no host");
    }
    results->hosts = calloc((size_t)count, sizeof *results->hosts);
    if (results->hosts == NULL) {
        mongoc_uri_destroy(uri);
        return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for %d hosts", count);
    }
    results->host_count = count;
    snprintf(results->replica_set, sizeof results->replica_set, "%s", replica_set != NULL ? replica_set : "");
    const mongoc_host_list_t *host = mongoc_uri_get_hosts(uri);
    for (int index = 0; index < count; index++, host = host->next) {
        snprintf(results->hosts[index].address, sizeof results->hosts[index].address, "%s", host->host_and_port);
        results->hosts[index].client_count = options->thread_count / count + (index < options->thread_count % count);
    }
    mongoc_uri_destroy(uri);
    return true;
}

/* A connection pool per host, each the size of its clients plus one (for the
 * closing endSessions). */
static bool pools_init(mix_run_t *run, bson_error_t *error)
{
    const bench_results_t *results = run->results;
    run->pools = calloc((size_t)results->host_count, sizeof *run->pools);
    if (run->pools == NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "out of memory for %d hosts", results->host_count);
    }
    for (int host = 0; host < results->host_count; host++) {
        backend_pool_options_t pool_options = {.name = "bench",
                                               .uri = run->options->uri_string,
                                               .max_connections = results->hosts[host].client_count + 1,
                                               .connect_timeout_ms = MIX_CONNECT_TIMEOUT_MS,
                                               .host_index = host};
        run->pools[host] = backend_pool_new(&run->loop, &pool_options, error);
        if (run->pools[host] == NULL) {
            return false;
        }
    }
    return true;
}

bool bench_run_mix(const bench_options_t *options, bench_results_t *results, bson_error_t *error)
{
    mix_run_t run = {.options = options, .results = results};
    bool loop_open = false;
    bool ok = false;
    bson_init(&run.cluster_time);
    run.ids.next = run.ids.limit = options->record_count;
    run.ids.finished = calloc((size_t)MIX_INSERT_WINDOW, 1);
    run.clients = calloc((size_t)options->thread_count, sizeof *run.clients);
    if (run.ids.finished == NULL || run.clients == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "out of memory for %d clients", options->thread_count);
        goto done;
    }
    for (int index = 0; index < options->thread_count; index++) {
        run.clients[index].timer_fd = -1; /* "none", for the clean-up below whichever client_init failed */
    }
    if (uv_loop_init(&run.loop) != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start an event loop");
        goto done;
    }
    loop_open = true;
    TC_CHECK(hosts_init(options, results, error));
    if (!pools_init(&run, error)) {
        close_handles(&run);
        uv_run(&run.loop, UV_RUN_DEFAULT);
        goto done;
    }
    uv_timer_init(&run.loop, &run.clock_timer);
    run.clock_timer.data = &run;
    run.clock_timer_open = true;
    for (int index = 0; index < options->thread_count; index++) {
        if (!client_init(&run, &run.clients[index], index, error)) {
            close_handles(&run);
            uv_run(&run.loop, UV_RUN_DEFAULT);
            goto done;
        }
    }
    results->records_at_start = options->record_count;
    /* Each client opens its connection with a ping, so connection set-up is not timed. */
    uv_timer_start(&run.clock_timer, on_give_up, (uint64_t)options->reply_timeout_ms, 0);
    for (int index = 0; index < options->thread_count; index++) {
        bson_t ping = BSON_INITIALIZER;
        BSON_APPEND_INT32(&ping, "ping", 1);
        append_driver_fields(&run.clients[index], &ping, "admin");
        if (!send_command(&run, run.clients[index].host, &ping, on_ping_reply, &run.clients[index])) {
            close_handles(&run);
            break;
        }
    }
    uv_run(&run.loop, UV_RUN_DEFAULT);
    if (run.failed) {
        *error = run.failure;
        goto done;
    }
    results->measured_ns = run.end_ns - run.measure_start_ns;
    bench_results_set_cpu(results, &run.usage_before, &run.usage_after);
    results->records_at_end = run.ids.limit;
    ok = true;
done:
    for (int host = 0; run.pools != NULL && host < results->host_count; host++) {
        if (run.pools[host] != NULL) {
            backend_pool_destroy(run.pools[host]);
        }
    }
    free(run.pools);
    for (int index = 0; run.clients != NULL && index < options->thread_count; index++) {
        if (run.clients[index].timer_fd >= 0) {
            close(run.clients[index].timer_fd);
        }
    }
    if (loop_open && uv_loop_close(&run.loop) != 0 && ok) {
        ok = tc_error_set(error, TC_ERR_INTERNAL, "bench left a handle open on its event loop");
    }
    bson_destroy(&run.cluster_time);
    free(run.clients);
    free(run.ids.finished);
    return ok;
}
