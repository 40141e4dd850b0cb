/* Tests for src/net: a real server on an ephemeral loopback port, driven with
 * plain sockets. The handler reads a test opcode from each message's header and
 * echoes, sleeps, delays, stays silent or closes, so every server path is hit. */
#include "net/server.h"

#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* Opcodes of the test protocol; the 4 bytes after the header are the argument. */
enum {
    OP_ECHO = 1,        /* reply with the same payload */
    OP_SLOW = 2,        /* sleep argument ms, then echo */
    OP_DELAY = 3,       /* echo, held argument ms by the server */
    OP_SILENT = 4,      /* no reply */
    OP_CLOSE_AFTER = 5, /* echo, then the server closes */
    OP_RUN_AGAIN = 6,   /* ask to be run again (20 ms later) until attempt == argument, then echo */
    OP_HELD = 7,        /* echo, held by the application and released argument ms later */
    OP_HELD_DROPPED = 8, /* the same, but dropped when released: the server closes */
    OP_BLOCK = 9,       /* wait until the test sets unblocked, then echo */
    OP_INLINE = 10,     /* handle_inline echoes it on the loop (run again until attempt == argument);
                         * a worker, when the server gives it one, echoes it */
};

#define RUN_AGAIN_DELAY_MS 20

#define HEADER_BYTES 16
#define CONNECTION_SLOTS 64

typedef struct test_application {
    atomic_int workers_started;
    atomic_int workers_stopped;
    atomic_int requests_started;
    atomic_int requests_finished;
    atomic_int active_total;
    atomic_int max_active_total;
    atomic_int active_per_connection[CONNECTION_SLOTS];
    atomic_bool overlap_in_one_connection;
    atomic_llong last_echo_started_ms;
    atomic_int run_again_attempts_seen; /* bit n: a run with attempt n happened */
    atomic_ullong last_connection_id;
    atomic_bool unblocked;            /* OP_BLOCK's gate */
    atomic_int answered_inline;       /* requests handle_inline answered */
    atomic_bool inline_off_the_loop;  /* handle_inline ran on another thread than the first time */
    pthread_t inline_thread;
    atomic_bool inline_thread_known;
    atomic_int inline_state_index;    /* worker_index of handle_inline's state */
    pthread_mutex_t peer_lock;
    char last_peer[64];
} test_application_t;

typedef struct test_server {
    server_t *server;
    pthread_t thread;
    bool run_ok;
    bson_error_t run_error;
    test_application_t application;
    int worker_count;
    bool inline_mode; /* handle_inline set: worker_start also ran once for the loop */
    int port;
} test_server_t;

typedef struct test_reply {
    int32_t length;
    int32_t request_id;
    int32_t response_to;
    int32_t opcode;
    uint8_t *payload; /* length - HEADER_BYTES bytes; free with free() */
} test_reply_t;

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void sleep_ms(int milliseconds)
{
    struct timespec duration = {milliseconds / 1000, (long)(milliseconds % 1000) * 1000000L};
    nanosleep(&duration, NULL);
}

static void put_int32(uint8_t *out, int32_t value)
{
    uint32_t bits = (uint32_t)value;
    out[0] = (uint8_t)bits;
    out[1] = (uint8_t)(bits >> 8);
    out[2] = (uint8_t)(bits >> 16);
    out[3] = (uint8_t)(bits >> 24);
}

static int32_t get_int32(const uint8_t *in)
{
    return (int32_t)((uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 |
                     (uint32_t)in[3] << 24);
}

/* --- the application the server runs ------------------------------------- */

static void *test_worker_start(void *application, int worker_index)
{
    test_application_t *app = application;
    atomic_fetch_add(&app->workers_started, 1);
    int *state = malloc(sizeof *state); /* freed by test_worker_stop: LSan checks it ran */
    *state = worker_index;
    return state;
}

static void test_worker_stop(void *application, void *worker_state)
{
    test_application_t *app = application;
    atomic_fetch_add(&app->workers_stopped, 1);
    free(worker_state);
}

/* A held reply's release, from a thread of its own as the store's journal thread. */
typedef struct held_release {
    server_held_reply_t *held;
    int after_ms;
    bool deliver;
} held_release_t;

static void *release_later(void *argument)
{
    held_release_t *release = argument;
    sleep_ms(release->after_ms);
    server_release_reply(release->held, release->deliver);
    free(release);
    return NULL;
}

static void hold_and_release_later(server_reply_t *reply, int after_ms, bool deliver)
{
    held_release_t *release = malloc(sizeof *release);
    *release = (held_release_t){.held = server_hold_reply(reply), .after_ms = after_ms, .deliver = deliver};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, release_later, release), 0);
    pthread_detach(thread);
}

static void test_handle(void *application, void *worker_state, const server_request_t *request,
                        server_reply_t *reply)
{
    test_application_t *app = application;
    assert_non_null(worker_state);
    assert_true(request->length >= HEADER_BYTES);
    assert_int_equal(get_int32(request->message), (int32_t)request->length);
    int32_t opcode = get_int32(request->message + 12);
    int32_t argument = request->length >= HEADER_BYTES + 4 ? get_int32(request->message + 16) : 0;

    atomic_fetch_add(&app->requests_started, 1);
    atomic_store(&app->last_connection_id, request->connection_id);
    pthread_mutex_lock(&app->peer_lock);
    snprintf(app->last_peer, sizeof app->last_peer, "%s", request->peer_address);
    pthread_mutex_unlock(&app->peer_lock);
    atomic_int *mine = &app->active_per_connection[request->connection_id % CONNECTION_SLOTS];
    if (atomic_fetch_add(mine, 1) != 0) {
        atomic_store(&app->overlap_in_one_connection, true);
    }
    int active = atomic_fetch_add(&app->active_total, 1) + 1;
    int seen = atomic_load(&app->max_active_total);
    while (active > seen && !atomic_compare_exchange_weak(&app->max_active_total, &seen, active)) {
    }

    if (opcode == OP_ECHO) {
        atomic_store(&app->last_echo_started_ms, now_ms());
    }
    if (opcode == OP_SLOW) {
        sleep_ms(argument);
    }
    while (opcode == OP_BLOCK && !atomic_load(&app->unblocked)) {
        sleep_ms(1);
    }
    if (opcode == OP_RUN_AGAIN) {
        atomic_fetch_or(&app->run_again_attempts_seen, 1 << (request->attempt & 31));
    }
    if (opcode == OP_RUN_AGAIN && request->attempt < (uint32_t)argument) {
        reply->run_again = true;
        reply->delay_ms = RUN_AGAIN_DELAY_MS;
    } else if (opcode != OP_SILENT) {
        reply->length = request->length;
        reply->data = bson_malloc(request->length);
        memcpy(reply->data, request->message, request->length);
        put_int32(reply->data + 4, 1000000 + get_int32(request->message + 4));
        put_int32(reply->data + 8, get_int32(request->message + 4));
        reply->delay_ms = opcode == OP_DELAY ? (uint32_t)argument : 0;
        reply->close_after = opcode == OP_CLOSE_AFTER;
        if (opcode == OP_HELD || opcode == OP_HELD_DROPPED) {
            hold_and_release_later(reply, argument, opcode == OP_HELD);
        }
    }

    atomic_fetch_sub(&app->active_total, 1);
    atomic_fetch_sub(mine, 1);
    atomic_fetch_add(&app->requests_finished, 1);
}

/* Loop thread: answers OP_INLINE itself, hands everything else to a worker. */
static bool test_handle_inline(void *application, void *loop_state, const server_request_t *request,
                               server_reply_t *reply)
{
    test_application_t *app = application;
    int32_t opcode = get_int32(request->message + 12);
    if (opcode != OP_INLINE) {
        return false;
    }
    atomic_store(&app->inline_state_index, *(int *)loop_state);
    if (!atomic_load(&app->inline_thread_known)) {
        app->inline_thread = pthread_self();
        atomic_store(&app->inline_thread_known, true);
    } else if (!pthread_equal(app->inline_thread, pthread_self())) {
        atomic_store(&app->inline_off_the_loop, true);
    }
    int32_t argument = request->length >= HEADER_BYTES + 4 ? get_int32(request->message + 16) : 0;
    if (request->attempt < (uint32_t)argument) {
        reply->run_again = true;
        reply->delay_ms = RUN_AGAIN_DELAY_MS;
        return true;
    }
    reply->length = request->length;
    reply->data = bson_malloc(request->length);
    memcpy(reply->data, request->message, request->length);
    put_int32(reply->data + 4, 1000000 + get_int32(request->message + 4));
    put_int32(reply->data + 8, get_int32(request->message + 4));
    atomic_fetch_add(&app->answered_inline, 1);
    return true;
}

static void *test_server_thread(void *argument)
{
    test_server_t *fixture = argument;
    fixture->run_ok = server_run(fixture->server, &fixture->run_error);
    return NULL;
}

static test_server_t *test_server_start_with(const char *bind_address, int max_connections, int worker_count,
                                             bool inline_mode)
{
    test_server_t *fixture = calloc(1, sizeof *fixture);
    pthread_mutex_init(&fixture->application.peer_lock, NULL);
    fixture->worker_count = worker_count;
    server_options_t options = {
        .bind_address = bind_address,
        .port = 0,
        .max_connections = max_connections,
        .worker_count = worker_count,
        .max_message_bytes = 48000000,
    };
    server_callbacks_t callbacks = {
        .application = &fixture->application,
        .worker_start = test_worker_start,
        .worker_stop = test_worker_stop,
        .handle = test_handle,
        .handle_inline = inline_mode ? test_handle_inline : NULL,
    };
    fixture->inline_mode = inline_mode;
    bson_error_t error;
    fixture->server = server_new(&options, &callbacks, &error);
    if (fixture->server == NULL) {
        fail_msg("server_new: %s", error.message);
    }
    fixture->port = server_port(fixture->server);
    assert_true(fixture->port > 0);
    assert_int_equal(pthread_create(&fixture->thread, NULL, test_server_thread, fixture), 0);
    return fixture;
}

static test_server_t *test_server_start(const char *bind_address, int max_connections, int worker_count)
{
    return test_server_start_with(bind_address, max_connections, worker_count, false);
}

/* Stops the server and checks the teardown: run returned true, every worker ran
 * worker_stop, no request overlapped another of its connection. */
static void test_server_stop(test_server_t *fixture)
{
    server_stop(fixture->server);
    assert_int_equal(pthread_join(fixture->thread, NULL), 0);
    if (!fixture->run_ok) {
        fail_msg("server_run: %s", fixture->run_error.message);
    }
    int states = fixture->worker_count + (fixture->inline_mode ? 1 : 0);
    assert_int_equal(atomic_load(&fixture->application.workers_started), states);
    assert_int_equal(atomic_load(&fixture->application.workers_stopped), states);
    assert_false(atomic_load(&fixture->application.overlap_in_one_connection));
    server_stop(fixture->server); /* harmless once server_run has returned */
    server_destroy(fixture->server);
    pthread_mutex_destroy(&fixture->application.peer_lock);
    free(fixture);
}

/* --- a plain-socket client ------------------------------------------------ */

static int client_connect_to(int family, const char *address, int port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval timeout = {5, 0}; /* a hung server fails the test instead of hanging it */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_storage target;
    memset(&target, 0, sizeof target);
    socklen_t length;
    if (family == AF_INET6) {
        struct sockaddr_in6 *ipv6 = (struct sockaddr_in6 *)&target;
        ipv6->sin6_family = AF_INET6;
        ipv6->sin6_port = htons((uint16_t)port);
        assert_int_equal(inet_pton(AF_INET6, address, &ipv6->sin6_addr), 1);
        length = sizeof *ipv6;
    } else {
        struct sockaddr_in *ipv4 = (struct sockaddr_in *)&target;
        ipv4->sin_family = AF_INET;
        ipv4->sin_port = htons((uint16_t)port);
        assert_int_equal(inet_pton(AF_INET, address, &ipv4->sin_addr), 1);
        length = sizeof *ipv4;
    }
    assert_int_equal(connect(fd, (struct sockaddr *)&target, length), 0);
    return fd;
}

static int client_connect(int port)
{
    return client_connect_to(AF_INET, "127.0.0.1", port);
}

static void client_send(int fd, const void *data, size_t length)
{
    const uint8_t *bytes = data;
    while (length > 0) {
        ssize_t sent = send(fd, bytes, length, MSG_NOSIGNAL);
        assert_true(sent > 0);
        bytes += sent;
        length -= (size_t)sent;
    }
}

static bool client_receive_exactly(int fd, void *out, size_t length)
{
    uint8_t *bytes = out;
    while (length > 0) {
        ssize_t received = recv(fd, bytes, length, 0);
        if (received <= 0) {
            return false;
        }
        bytes += received;
        length -= (size_t)received;
    }
    return true;
}

/* Builds header + argument + text into out (which must be large enough). */
static size_t build_message(uint8_t *out, int32_t request_id, int32_t opcode, int32_t argument,
                            const char *text)
{
    size_t text_length = strlen(text);
    size_t length = HEADER_BYTES + 4 + text_length;
    put_int32(out, (int32_t)length);
    put_int32(out + 4, request_id);
    put_int32(out + 8, 0);
    put_int32(out + 12, opcode);
    put_int32(out + 16, argument);
    memcpy(out + 20, text, text_length);
    return length;
}

static void client_send_message(int fd, int32_t request_id, int32_t opcode, int32_t argument,
                                const char *text)
{
    uint8_t message[512];
    assert_true(strlen(text) < sizeof message - 20);
    client_send(fd, message, build_message(message, request_id, opcode, argument, text));
}

static test_reply_t client_read_reply(int fd)
{
    test_reply_t reply = {0};
    uint8_t header[HEADER_BYTES];
    if (!client_receive_exactly(fd, header, sizeof header)) {
        fail_msg("no reply: %s", strerror(errno));
    }
    reply.length = get_int32(header);
    reply.request_id = get_int32(header + 4);
    reply.response_to = get_int32(header + 8);
    reply.opcode = get_int32(header + 12);
    assert_true(reply.length >= HEADER_BYTES);
    reply.payload = malloc((size_t)reply.length - HEADER_BYTES + 1);
    assert_true(client_receive_exactly(fd, reply.payload, (size_t)reply.length - HEADER_BYTES));
    reply.payload[reply.length - HEADER_BYTES] = '\0';
    return reply;
}

/* Reads one reply and checks it answers request_id with text. */
static void client_expect_echo(int fd, int32_t request_id, const char *text)
{
    test_reply_t reply = client_read_reply(fd);
    assert_int_equal(reply.response_to, request_id);
    assert_int_equal(reply.request_id, 1000000 + request_id);
    assert_int_equal(reply.length, HEADER_BYTES + 4 + (int32_t)strlen(text));
    assert_string_equal((const char *)reply.payload + 4, text);
    free(reply.payload);
}

/* The server closed: recv sees EOF or a reset, not a timeout or data. */
static void client_expect_closed(int fd)
{
    uint8_t byte;
    ssize_t received = recv(fd, &byte, 1, 0);
    if (received == 0) {
        return;
    }
    if (received < 0 && errno == ECONNRESET) {
        return;
    }
    fail_msg("expected the server to close the connection, got %zd (%s)", received,
             received < 0 ? strerror(errno) : "data");
}

static void wait_for_current_connections(server_t *server, uint64_t expected)
{
    long long deadline = now_ms() + 5000;
    while (server_connection_stats(server).current != expected && now_ms() < deadline) {
        sleep_ms(5);
    }
    assert_int_equal(server_connection_stats(server).current, expected);
}

/* Redirects fd 2 to a file so a test can read the server's log lines. */
typedef struct stderr_capture {
    FILE *file;
    int saved_fd;
} stderr_capture_t;

static void stderr_capture_begin(stderr_capture_t *capture)
{
    fflush(stderr);
    capture->file = tmpfile();
    assert_non_null(capture->file);
    capture->saved_fd = dup(2);
    dup2(fileno(capture->file), 2);
}

/* Returns what was logged; free with free(). */
static char *stderr_capture_end(stderr_capture_t *capture)
{
    fflush(stderr);
    dup2(capture->saved_fd, 2);
    close(capture->saved_fd);
    long size = ftell(capture->file);
    char *text = calloc(1, (size_t)size + 1);
    rewind(capture->file);
    assert_int_equal(fread(text, 1, (size_t)size, capture->file), (size_t)size);
    fclose(capture->file);
    fputs(text, stderr);
    return text;
}

/* --- tests ----------------------------------------------------------------- */

static void test_pipelined_messages_come_back_in_order(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 4);
    int fd = client_connect(fixture->port);

    /* One send holding 12 messages; earlier ones sleep longer, so a server that
     * ran them in parallel would answer out of order. */
    uint8_t batch[12 * 64];
    size_t used = 0;
    char text[32];
    for (int index = 0; index < 12; index++) {
        snprintf(text, sizeof text, "message %d", index);
        int32_t opcode = index % 3 == 0 ? OP_SLOW : OP_ECHO;
        used += build_message(batch + used, 100 + index, opcode, 30 - index * 2, text);
    }
    client_send(fd, batch, used);
    for (int index = 0; index < 12; index++) {
        snprintf(text, sizeof text, "message %d", index);
        client_expect_echo(fd, 100 + index, text);
    }
    assert_int_equal(atomic_load(&fixture->application.last_connection_id), 1);
    pthread_mutex_lock(&fixture->application.peer_lock);
    assert_true(strncmp(fixture->application.last_peer, "127.0.0.1:", 10) == 0);
    pthread_mutex_unlock(&fixture->application.peer_lock);

    /* The smallest legal message is a bare 16-byte header. */
    uint8_t bare[HEADER_BYTES];
    put_int32(bare, HEADER_BYTES);
    put_int32(bare + 4, 7);
    put_int32(bare + 8, 0);
    put_int32(bare + 12, OP_ECHO);
    client_send(fd, bare, sizeof bare);
    test_reply_t reply = client_read_reply(fd);
    assert_int_equal(reply.length, HEADER_BYTES);
    assert_int_equal(reply.response_to, 7);
    free(reply.payload);

    close(fd);
    test_server_stop(fixture);
}

static void test_two_connections_run_concurrently(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 2);
    int first = client_connect(fixture->port);
    int second = client_connect(fixture->port);
    long long started = now_ms();
    client_send_message(first, 1, OP_SLOW, 300, "first");
    client_send_message(second, 2, OP_SLOW, 300, "second");
    client_expect_echo(first, 1, "first");
    client_expect_echo(second, 2, "second");
    long long elapsed = now_ms() - started;
    assert_int_equal(atomic_load(&fixture->application.max_active_total), 2);
    assert_true(elapsed < 550); /* one after the other would take 600 ms */

    server_connection_stats_t stats = server_connection_stats(fixture->server);
    assert_int_equal(stats.current, 2);
    assert_int_equal(stats.available, 8);
    assert_int_equal(stats.total_created, 2);
    close(first);
    close(second);
    wait_for_current_connections(fixture->server, 0);
    test_server_stop(fixture);
}

static void test_message_split_into_single_bytes(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int fd = client_connect(fixture->port);
    uint8_t message[64];
    size_t length = build_message(message, 42, OP_ECHO, 0, "one byte at a time");
    for (size_t index = 0; index < length; index++) {
        client_send(fd, message + index, 1);
        if (index % 4 == 0) {
            sleep_ms(1);
        }
    }
    client_expect_echo(fd, 42, "one byte at a time");
    close(fd);
    test_server_stop(fixture);
}

static void test_oversized_length_closes_only_that_connection(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 2);
    int healthy = client_connect(fixture->port);
    int bad = client_connect(fixture->port);
    client_send_message(healthy, 1, OP_ECHO, 0, "before");
    client_expect_echo(healthy, 1, "before");

    stderr_capture_t capture;
    stderr_capture_begin(&capture);
    uint8_t header[HEADER_BYTES] = {0};
    put_int32(header, 100 * 1000 * 1000);
    client_send(bad, header, sizeof header);
    client_expect_closed(bad);
    wait_for_current_connections(fixture->server, 1);
    char *logged = stderr_capture_end(&capture);
    assert_non_null(strstr(logged, "[conn2] recv(): message msgLen 100000000 is invalid"));
    assert_non_null(strstr(logged, "127.0.0.1:"));
    free(logged);

    client_send_message(healthy, 2, OP_ECHO, 0, "after");
    client_expect_echo(healthy, 2, "after");
    assert_int_equal(atomic_load(&fixture->application.requests_started), 2);
    close(healthy);
    close(bad);
    test_server_stop(fixture);
}

static void test_short_or_negative_length_closes(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int32_t lengths[] = {15, 0, -1};
    for (size_t index = 0; index < sizeof lengths / sizeof lengths[0]; index++) {
        int fd = client_connect(fixture->port);
        uint8_t header[HEADER_BYTES] = {0};
        put_int32(header, lengths[index]);
        client_send(fd, header, sizeof header);
        client_expect_closed(fd);
        close(fd);
    }
    assert_int_equal(atomic_load(&fixture->application.requests_started), 0);
    test_server_stop(fixture);
}

static void test_max_connections_refuses_the_next_one(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 2, 1);
    int first = client_connect(fixture->port);
    int second = client_connect(fixture->port);
    client_send_message(first, 1, OP_ECHO, 0, "one");
    client_expect_echo(first, 1, "one");
    client_send_message(second, 2, OP_ECHO, 0, "two");
    client_expect_echo(second, 2, "two");

    stderr_capture_t capture;
    stderr_capture_begin(&capture);
    int third = client_connect(fixture->port); /* the kernel completes the handshake */
    client_expect_closed(third);
    char *logged = stderr_capture_end(&capture);
    assert_non_null(strstr(logged, "connection refused because too many open connections: 3"));
    free(logged);

    server_connection_stats_t stats = server_connection_stats(fixture->server);
    assert_int_equal(stats.current, 2);
    assert_int_equal(stats.available, 0);
    assert_int_equal(stats.total_created, 2);

    /* A freed slot is usable again. */
    close(first);
    wait_for_current_connections(fixture->server, 1);
    int fourth = client_connect(fixture->port);
    client_send_message(fourth, 4, OP_ECHO, 0, "four");
    client_expect_echo(fourth, 4, "four");
    assert_int_equal(server_connection_stats(fixture->server).total_created, 3);

    close(second);
    close(third);
    close(fourth);
    test_server_stop(fixture);
}

static void test_delay_holds_the_reply_and_the_next_request(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 2);
    int fd = client_connect(fixture->port);
    long long started = now_ms();
    client_send_message(fd, 1, OP_DELAY, 250, "held");
    client_send_message(fd, 2, OP_ECHO, 0, "next");
    client_expect_echo(fd, 1, "held");
    long long held_for = now_ms() - started;
    assert_true(held_for >= 240);
    client_expect_echo(fd, 2, "next");
    /* The pipelined request did not run while the reply was held. */
    assert_true(atomic_load(&fixture->application.last_echo_started_ms) - started >= 240);
    close(fd);
    test_server_stop(fixture);
}

static void test_run_again_reruns_the_same_request_later(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 2);
    int fd = client_connect(fixture->port);
    long long started = now_ms();
    client_send_message(fd, 1, OP_RUN_AGAIN, 3, "polled");
    client_send_message(fd, 2, OP_ECHO, 0, "after");
    client_expect_echo(fd, 1, "polled"); /* the same message each run: same reply */
    assert_true(now_ms() - started >= 3 * RUN_AGAIN_DELAY_MS - 5);
    client_expect_echo(fd, 2, "after");
    /* Runs with attempts 0, 1, 2 and 3, and the next request only after. */
    assert_int_equal(atomic_load(&fixture->application.run_again_attempts_seen), 0xf);
    assert_true(atomic_load(&fixture->application.last_echo_started_ms) - started >= 3 * RUN_AGAIN_DELAY_MS - 5);
    assert_int_equal(atomic_load(&fixture->application.requests_finished), 5);

    /* A client that leaves while its request waits to run again is simply closed. */
    int leaving = client_connect(fixture->port);
    client_send_message(leaving, 3, OP_RUN_AGAIN, 1000, "never answered");
    sleep_ms(3 * RUN_AGAIN_DELAY_MS);
    close(leaving);
    wait_for_current_connections(fixture->server, 1);
    client_send_message(fd, 4, OP_ECHO, 0, "still serving");
    client_expect_echo(fd, 4, "still serving");
    close(fd);
    test_server_stop(fixture);
}

/* A held reply holds no worker: with one worker, another connection is served
 * while it waits; its own connection's next request runs only after it. */
static void test_held_reply_frees_the_worker_and_keeps_the_order(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int held = client_connect(fixture->port);
    int other = client_connect(fixture->port);
    long long started = now_ms();
    client_send_message(held, 1, OP_HELD, 1000, "held");
    client_send_message(held, 2, OP_ECHO, 0, "next");
    sleep_ms(50);
    client_send_message(other, 3, OP_ECHO, 0, "meanwhile");
    client_expect_echo(other, 3, "meanwhile");
    struct pollfd readable = {.fd = held, .events = POLLIN};
    assert_int_equal(poll(&readable, 1, 0), 0); /* still held */
    client_expect_echo(held, 1, "held");
    assert_true(now_ms() - started >= 990);
    client_expect_echo(held, 2, "next");
    assert_true(atomic_load(&fixture->application.last_echo_started_ms) - started >= 990);
    assert_false(atomic_load(&fixture->application.overlap_in_one_connection));
    close(other);

    /* Dropped on release: nothing is sent, and the connection closes. */
    client_send_message(held, 4, OP_HELD_DROPPED, 20, "never sent");
    client_expect_closed(held);
    close(held);
    wait_for_current_connections(fixture->server, 0);
    test_server_stop(fixture);
}

/* handle_inline answers on the loop with its own state (index worker_count)
 * while the workers are idle, once per turn of the loop, in order with the
 * workers' replies of the same connection; a run_again from the loop comes back
 * to the loop; while a worker is busy, requests go to the workers. */
static void test_inline_requests_run_on_the_loop_when_the_workers_are_idle(void **state)
{
    test_server_t *fixture = test_server_start_with("127.0.0.1", 10, 1, true);
    test_application_t *app = &fixture->application;
    int first = client_connect(fixture->port);
    int second = client_connect(fixture->port);
    client_send_message(first, 1, OP_INLINE, 0, "inline");
    client_expect_echo(first, 1, "inline");
    client_send_message(first, 2, OP_INLINE, 2, "inline, run again twice");
    client_expect_echo(first, 2, "inline, run again twice");
    assert_int_equal(atomic_load(&app->answered_inline), 2);
    assert_int_equal(atomic_load(&app->requests_started), 0); /* no worker ran either */
    assert_int_equal(atomic_load(&app->inline_state_index), 1);

    /* The only worker is busy: the next request waits for it, not the loop. */
    client_send_message(first, 3, OP_BLOCK, 0, "blocked");
    while (atomic_load(&app->requests_started) == 0) {
        sleep_ms(1);
    }
    assert_int_equal(server_connection_stats(fixture->server).requests, 3);
    client_send_message(second, 4, OP_INLINE, 0, "queued");
    while (server_connection_stats(fixture->server).requests < 4) { /* received while the worker is blocked */
        sleep_ms(1);
    }
    atomic_store(&app->unblocked, true);
    client_expect_echo(first, 3, "blocked");
    client_expect_echo(second, 4, "queued");
    assert_int_equal(atomic_load(&app->answered_inline), 2);
    assert_int_equal(atomic_load(&app->requests_finished), 2);

    /* Pipelined in one send: the loop answers one per turn, a worker the next. */
    uint8_t batch[8 * 64];
    size_t used = 0;
    char text[32];
    for (int index = 0; index < 8; index++) {
        snprintf(text, sizeof text, "message %d", index);
        used += build_message(batch + used, 10 + index, OP_INLINE, 0, text);
    }
    client_send(second, batch, used);
    for (int index = 0; index < 8; index++) {
        snprintf(text, sizeof text, "message %d", index);
        client_expect_echo(second, 10 + index, text);
    }
    int inlined = atomic_load(&app->answered_inline) - 2;
    assert_true(inlined >= 1 && inlined < 8);
    assert_int_equal(atomic_load(&app->requests_finished), 2 + 8 - inlined);
    assert_false(atomic_load(&app->inline_off_the_loop));
    close(first);
    close(second);
    wait_for_current_connections(fixture->server, 0);
    test_server_stop(fixture);
}

static void test_null_reply_sends_nothing(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int fd = client_connect(fixture->port);
    client_send_message(fd, 1, OP_SILENT, 0, "no answer");
    client_send_message(fd, 2, OP_ECHO, 0, "answer");
    client_expect_echo(fd, 2, "answer"); /* the first reply on the wire is request 2's */
    assert_int_equal(atomic_load(&fixture->application.requests_finished), 2);
    close(fd);
    test_server_stop(fixture);
}

static void test_close_after_writes_then_closes(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int fd = client_connect(fixture->port);
    client_send_message(fd, 1, OP_CLOSE_AFTER, 0, "goodbye");
    client_expect_echo(fd, 1, "goodbye");
    client_expect_closed(fd);
    close(fd);
    wait_for_current_connections(fixture->server, 0);
    test_server_stop(fixture);
}

/* A client that sends without reading must not make the server buffer it all:
 * reading pauses once one message beyond the running request is buffered, so
 * the kernel buffers fill and the client's sends stop being accepted. */
static void test_flooding_client_is_paused(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int fd = client_connect(fixture->port);
    client_send_message(fd, 1, OP_SLOW, 1500, "hold the connection busy");
    while (atomic_load(&fixture->application.requests_started) == 0) {
        sleep_ms(2);
    }

    const size_t message_bytes = 1024 * 1024;
    const size_t attempt_bytes = 64 * message_bytes;
    uint8_t *message = calloc(1, message_bytes);
    put_int32(message, (int32_t)message_bytes);
    put_int32(message + 12, OP_ECHO);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    size_t accepted = 0;
    long long deadline = now_ms() + 800;
    while (accepted < attempt_bytes && now_ms() < deadline) {
        ssize_t sent = send(fd, message + accepted % message_bytes,
                            message_bytes - accepted % message_bytes, MSG_NOSIGNAL);
        if (sent > 0) {
            accepted += (size_t)sent;
        } else {
            sleep_ms(5);
        }
    }
    free(message);
    print_message("flood: the kernel and server took %zu of %zu bytes\n", accepted, attempt_bytes);
    assert_true(accepted < attempt_bytes / 2);
    close(fd);
    wait_for_current_connections(fixture->server, 0);
    test_server_stop(fixture);
}

/* An OP_ECHO message of bytes with a patterned payload (malloc'd). */
static uint8_t *large_echo_message(size_t bytes, int32_t request_id)
{
    uint8_t *message = malloc(bytes);
    for (size_t index = 0; index < bytes; index++) {
        message[index] = (uint8_t)(index * 31);
    }
    put_int32(message, (int32_t)bytes);
    put_int32(message + 4, request_id);
    put_int32(message + 8, 0);
    put_int32(message + 12, OP_ECHO);
    put_int32(message + 16, 0);
    return message;
}

/* Reads the echo of large_echo_message's message, whole and unchanged. */
static void expect_large_echo(int fd, const uint8_t *message, size_t bytes, int32_t request_id)
{
    test_reply_t reply = client_read_reply(fd);
    assert_int_equal(reply.length, (int32_t)bytes);
    assert_int_equal(reply.response_to, request_id);
    assert_memory_equal(reply.payload, message + HEADER_BYTES, bytes - HEADER_BYTES);
    free(reply.payload);
}

static void test_large_message_then_small_ones(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int fd = client_connect(fixture->port);
    const size_t large_bytes = 5 * 1024 * 1024 + 3;
    uint8_t *large = large_echo_message(large_bytes, 9);
    client_send(fd, large, large_bytes);
    client_send_message(fd, 10, OP_ECHO, 0, "small after large");

    expect_large_echo(fd, large, large_bytes, 9);
    free(large);
    client_expect_echo(fd, 10, "small after large");
    close(fd);
    test_server_stop(fixture);
}

/* A reply the kernel cannot take at once (the client reads only later): the
 * worker writes what fits, the loop the rest, in order and whole. */
static void test_reply_larger_than_the_socket_buffer(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    int fd = client_connect(fixture->port);
    const size_t large_bytes = 8 * 1024 * 1024 + 5;
    uint8_t *large = large_echo_message(large_bytes, 21);
    client_send(fd, large, large_bytes);
    while (atomic_load(&fixture->application.requests_finished) == 0) {
        sleep_ms(2);
    }
    sleep_ms(50); /* the reply fills the socket buffers before the client reads */

    expect_large_echo(fd, large, large_bytes, 21);
    free(large);
    client_send_message(fd, 22, OP_ECHO, 0, "small after the large reply");
    client_expect_echo(fd, 22, "small after the large reply");
    assert_int_equal(server_connection_stats(fixture->server).queued_reply_bytes, 0);
    close(fd);
    test_server_stop(fixture);
}

/* Clients that leave with a request running and another buffered: whether the
 * loop or a worker meets the reset first, the connection closes and the server
 * lives on (a second write to a reset socket would raise SIGPIPE). */
static void test_client_gone_before_its_replies(void **state)
{
    const int rounds = 10;
    test_server_t *fixture = test_server_start("127.0.0.1", rounds + 1, 2);
    for (int round = 0; round < rounds; round++) {
        int fd = client_connect(fixture->port);
        client_send_message(fd, 1, OP_SLOW, 10, "slow");
        client_send_message(fd, 2, OP_ECHO, 0, "never read");
        close(fd);
    }
    /* Accepted first (the kernel completes connects before the server accepts), then gone. */
    long long deadline = now_ms() + 5000;
    while (server_connection_stats(fixture->server).total_created < (uint64_t)rounds && now_ms() < deadline) {
        sleep_ms(5);
    }
    wait_for_current_connections(fixture->server, 0);
    int fd = client_connect(fixture->port);
    client_send_message(fd, 3, OP_ECHO, 0, "still serving");
    client_expect_echo(fd, 3, "still serving");
    close(fd);
    test_server_stop(fixture);
}

static void test_stop_waits_for_the_request_in_flight(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 2);
    int busy = client_connect(fixture->port);
    int idle = client_connect(fixture->port);
    client_send_message(busy, 1, OP_SLOW, 300, "slow");
    while (atomic_load(&fixture->application.requests_started) == 0) {
        sleep_ms(2);
    }
    long long stopped_at = now_ms();
    server_stop(fixture->server);
    assert_int_equal(pthread_join(fixture->thread, NULL), 0);
    assert_true(fixture->run_ok);
    /* server_run returned only after the handler finished. */
    assert_int_equal(atomic_load(&fixture->application.requests_finished), 1);
    assert_true(now_ms() - stopped_at >= 200);
    assert_int_equal(atomic_load(&fixture->application.workers_stopped), 2);
    client_expect_closed(busy);
    client_expect_closed(idle);
    close(busy);
    close(idle);

    /* The listener is gone. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in target = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fixture->port)};
    inet_pton(AF_INET, "127.0.0.1", &target.sin_addr);
    assert_int_not_equal(connect(fd, (struct sockaddr *)&target, sizeof target), 0);
    close(fd);

    server_destroy(fixture->server);
    pthread_mutex_destroy(&fixture->application.peer_lock);
    free(fixture);
}

static void test_sigterm_stops_the_server(void **state)
{
    test_server_t *fixture = test_server_start("127.0.0.1", 10, 1);
    /* A round trip proves server_run is in its loop, with the handlers set. */
    int fd = client_connect(fixture->port);
    client_send_message(fd, 1, OP_ECHO, 0, "ready?");
    client_expect_echo(fd, 1, "ready?");
    assert_int_equal(kill(getpid(), SIGTERM), 0);
    assert_int_equal(pthread_join(fixture->thread, NULL), 0);
    assert_true(fixture->run_ok);
    assert_int_equal(atomic_load(&fixture->application.workers_stopped), 1);
    client_expect_closed(fd);
    close(fd);
    server_destroy(fixture->server);
    pthread_mutex_destroy(&fixture->application.peer_lock);
    free(fixture);
}

static void test_ipv6_literal(void **state)
{
    test_server_t *fixture = test_server_start("::1", 10, 1);
    int fd = client_connect_to(AF_INET6, "::1", fixture->port);
    client_send_message(fd, 1, OP_ECHO, 0, "over ipv6");
    client_expect_echo(fd, 1, "over ipv6");
    pthread_mutex_lock(&fixture->application.peer_lock);
    assert_true(strncmp(fixture->application.last_peer, "[::1]:", 6) == 0);
    pthread_mutex_unlock(&fixture->application.peer_lock);
    close(fd);
    test_server_stop(fixture);
}

static void loop_handle(void *application, server_pending_t *pending, const server_request_t *request);

static void test_new_reports_bad_options_and_busy_port(void **state)
{
    server_callbacks_t callbacks = {.handle = test_handle};
    server_options_t options = {.bind_address = "127.0.0.1", .port = 0, .max_connections = 1,
                                .worker_count = 1, .max_message_bytes = 0};
    bson_error_t error;

    options.bind_address = "localhost"; /* a name, not a literal */
    assert_null(server_new(&options, &callbacks, &error));
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    options.bind_address = "127.0.0.1";

    options.worker_count = 0;
    assert_null(server_new(&options, &callbacks, &error));
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    options.worker_count = 1;

    options.port = 70000;
    assert_null(server_new(&options, &callbacks, &error));
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    options.port = 0;

    server_callbacks_t loop_and_inline = {.handle_on_loop = loop_handle, .handle_inline = test_handle_inline};
    assert_null(server_new(&options, &loop_and_inline, &error)); /* inline is for worker mode */
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);

    server_t *first = server_new(&options, &callbacks, &error);
    assert_non_null(first);
    options.port = server_port(first);
    assert_null(server_new(&options, &callbacks, &error));
    assert_int_equal(error.code, TC_ERR_SOCKET_EXCEPTION);
    assert_string_equal(tc_error_code_name((int32_t)error.code), "SocketException");
    assert_non_null(strstr(error.message, "address already in use"));

    /* Never run: destroy still closes the listener and the loop. */
    server_destroy(first);
    server_destroy(NULL);
    server_t *again = server_new(&options, &callbacks, &error);
    assert_non_null(again);
    server_destroy(again);
}

static void test_stop_before_run_returns_at_once(void **state)
{
    test_server_t *fixture = calloc(1, sizeof *fixture);
    pthread_mutex_init(&fixture->application.peer_lock, NULL);
    server_callbacks_t callbacks = {.application = &fixture->application, .handle = test_handle};
    server_options_t options = {.bind_address = "127.0.0.1", .max_connections = 5,
                                .worker_count = 3};
    bson_error_t error;
    server_t *server = server_new(&options, &callbacks, &error);
    assert_non_null(server);
    server_stop(server);
    assert_true(server_run(server, &error));
    assert_false(server_run(server, &error)); /* once only */
    assert_int_equal(error.code, TC_ERR_ILLEGAL_OPERATION);
    server_destroy(server);
    pthread_mutex_destroy(&fixture->application.peer_lock);
    free(fixture);
}

/* --- loop mode (the proxy's): requests answered later, on the loop thread ------- */

typedef struct loop_reply {
    uv_timer_t timer;
    server_pending_t *pending;
    server_reply_t reply;
} loop_reply_t;

typedef struct loop_application {
    server_t *server;
    int answered_at_once;
    int answered_later;
    bool stopping_called;
    loop_reply_t *waiting[16];
    int waiting_count;
} loop_application_t;

static void loop_reply_closed(uv_handle_t *handle)
{
    free(handle->data);
}

static void loop_reply_due(uv_timer_t *timer)
{
    loop_reply_t *later = timer->data;
    loop_application_t *app = uv_handle_get_loop((uv_handle_t *)timer)->data;
    server_complete(later->pending, &later->reply);
    app->answered_later++;
    for (int i = 0; i < app->waiting_count; i++) {
        if (app->waiting[i] == later) {
            app->waiting[i] = app->waiting[--app->waiting_count];
            break;
        }
    }
    uv_close((uv_handle_t *)timer, loop_reply_closed);
}

/* OP_ECHO answers inside the call; OP_DELAY answers from a timer of our own;
 * OP_SILENT answers with nothing, inside the call. */
static void loop_handle(void *application, server_pending_t *pending, const server_request_t *request)
{
    loop_application_t *app = application;
    int32_t opcode = get_int32(request->message + 12);
    int32_t argument = get_int32(request->message + 16);
    server_reply_t reply = {0};
    if (opcode != OP_SILENT) {
        reply.length = request->length;
        reply.data = bson_malloc(request->length);
        memcpy(reply.data, request->message, request->length);
        put_int32(reply.data + 4, 1000000 + get_int32(request->message + 4));
        put_int32(reply.data + 8, get_int32(request->message + 4));
    }
    if (opcode != OP_DELAY) {
        app->answered_at_once++;
        server_complete(pending, &reply);
        return;
    }
    loop_reply_t *later = calloc(1, sizeof *later);
    later->pending = pending;
    later->reply = reply;
    uv_loop_t *loop = server_loop(app->server);
    loop->data = app;
    uv_timer_init(loop, &later->timer);
    later->timer.data = later;
    uv_timer_start(&later->timer, loop_reply_due, (uint64_t)argument, 0);
    app->waiting[app->waiting_count++] = later;
}

static void loop_stopping(void *application)
{
    loop_application_t *app = application;
    app->stopping_called = true;
}

typedef struct loop_run {
    server_t *server;
    bool ok;
} loop_run_t;

static void *loop_server_thread(void *argument)
{
    bson_error_t error;
    loop_run_t *run = argument;
    run->ok = server_run(run->server, &error);
    return NULL;
}

static void test_loop_mode_answers_now_or_later_in_order(void **state)
{
    (void)state;
    loop_application_t app = {0};
    server_options_t options = {.bind_address = "127.0.0.1", .max_connections = 8, .worker_count = 0};
    server_callbacks_t callbacks = {.application = &app, .handle_on_loop = loop_handle, .loop_stopping = loop_stopping};
    bson_error_t error;
    app.server = server_new(&options, &callbacks, &error);
    if (app.server == NULL) {
        fail_msg("server_new: %s", error.message);
    }
    loop_run_t run = {.server = app.server};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, loop_server_thread, &run), 0);

    int fd = client_connect(server_port(app.server));
    /* Pipelined: a late answer must still come back before the next request's. */
    client_send_message(fd, 1, OP_DELAY, 150, "later");
    client_send_message(fd, 2, OP_SILENT, 0, "");
    client_send_message(fd, 3, OP_ECHO, 0, "now");
    long long started = now_ms();
    client_expect_echo(fd, 1, "later");
    assert_true(now_ms() - started >= 140);
    client_expect_echo(fd, 3, "now");
    close(fd);

    server_stop(app.server);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_true(run.ok);
    assert_true(app.stopping_called);
    assert_int_equal(app.answered_later, 1);
    assert_int_equal(app.answered_at_once, 2);
    server_destroy(app.server);
}

int main(void)
{
    tc_log_set_level(TC_LOG_WARNING);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_messages_come_back_in_order),
        cmocka_unit_test(test_two_connections_run_concurrently),
        cmocka_unit_test(test_message_split_into_single_bytes),
        cmocka_unit_test(test_oversized_length_closes_only_that_connection),
        cmocka_unit_test(test_short_or_negative_length_closes),
        cmocka_unit_test(test_max_connections_refuses_the_next_one),
        cmocka_unit_test(test_delay_holds_the_reply_and_the_next_request),
        cmocka_unit_test(test_run_again_reruns_the_same_request_later),
        cmocka_unit_test(test_held_reply_frees_the_worker_and_keeps_the_order),
        cmocka_unit_test(test_inline_requests_run_on_the_loop_when_the_workers_are_idle),
        cmocka_unit_test(test_null_reply_sends_nothing),
        cmocka_unit_test(test_close_after_writes_then_closes),
        cmocka_unit_test(test_flooding_client_is_paused),
        cmocka_unit_test(test_large_message_then_small_ones),
        cmocka_unit_test(test_stop_waits_for_the_request_in_flight),
        cmocka_unit_test(test_reply_larger_than_the_socket_buffer),
        cmocka_unit_test(test_client_gone_before_its_replies),
        cmocka_unit_test(test_sigterm_stops_the_server),
        cmocka_unit_test(test_ipv6_literal),
        cmocka_unit_test(test_new_reports_bad_options_and_busy_port),
        cmocka_unit_test(test_stop_before_run_returns_at_once),
        cmocka_unit_test(test_loop_mode_answers_now_or_later_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
