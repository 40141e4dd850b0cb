/* Tests for src/net's transports and limits: per-connection application state
 * (connection_data and its close callback), the idle, receive and send
 * timeouts, the server-wide bound on queued replies, and TLS (requireTLS refuses
 * plaintext, preferTLS serves both) with a certificate made here and an OpenSSL
 * client in the test. A real server on an ephemeral loopback port. */
#include "net/server.h"

#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#define HEADER_BYTES 16
#define OP_ECHO 1
#define OP_BIG 2   /* reply with argument megabytes */
#define OP_COUNT 3 /* reply with how many requests this connection made (connection_data) */

static atomic_int closed_connection_data;

static void put_int32(uint8_t *out, int32_t value)
{
    uint32_t bits = (uint32_t)value;
    out[0] = (uint8_t)bits, out[1] = (uint8_t)(bits >> 8), out[2] = (uint8_t)(bits >> 16),
    out[3] = (uint8_t)(bits >> 24);
}

static int32_t get_int32(const uint8_t *in)
{
    return (int32_t)((uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24);
}

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void handle(void *application, void *worker_state, const server_request_t *request, server_reply_t *reply)
{
    (void)application, (void)worker_state;
    int32_t opcode = get_int32(request->message + 12);
    int32_t argument = request->length >= 20 ? get_int32(request->message + 16) : 0;
    size_t length = request->length;
    if (opcode == OP_BIG) {
        length = (size_t)argument * 1024 * 1024;
    }
    if (opcode == OP_COUNT) {
        if (*request->connection_data == NULL) {
            *request->connection_data = calloc(1, sizeof(int));
        }
        argument = ++*(int *)*request->connection_data;
        length = 20;
    }
    reply->data = bson_malloc0(length);
    reply->length = length;
    memcpy(reply->data, request->message, request->length < length ? request->length : length);
    put_int32(reply->data, (int32_t)length);
    if (length >= 20) {
        put_int32(reply->data + 16, argument);
    }
}

static void connection_close(void *application, void *connection_data)
{
    (void)application;
    free(connection_data);
    atomic_fetch_add(&closed_connection_data, 1);
}

typedef struct fixture {
    server_t *server;
    pthread_t thread;
    int port;
} fixture_t;

static void *run_server(void *argument)
{
    fixture_t *fixture = argument;
    bson_error_t error;
    assert_true(server_run(fixture->server, &error));
    return NULL;
}

static fixture_t *start(server_options_t options)
{
    fixture_t *fixture = calloc(1, sizeof *fixture);
    server_callbacks_t callbacks = {.handle = handle, .connection_close = connection_close};
    bson_error_t error;
    options.bind_address = "127.0.0.1";
    options.max_connections = 100;
    options.worker_count = 2;
    fixture->server = server_new(&options, &callbacks, &error);
    if (fixture->server == NULL) {
        fail_msg("server_new: %s", error.message);
    }
    fixture->port = server_port(fixture->server);
    assert_int_equal(pthread_create(&fixture->thread, NULL, run_server, fixture), 0);
    return fixture;
}

static void stop(fixture_t *fixture)
{
    server_stop(fixture->server);
    assert_int_equal(pthread_join(fixture->thread, NULL), 0);
    server_destroy(fixture->server);
    free(fixture);
}

static int connect_to(int port, int receive_buffer)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval timeout = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (receive_buffer > 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&address, sizeof address), 0);
    return fd;
}

static void message(uint8_t out[20], int32_t opcode, int32_t argument)
{
    put_int32(out, 20);
    put_int32(out + 4, 1);
    put_int32(out + 8, 0);
    put_int32(out + 12, opcode);
    put_int32(out + 16, argument);
}

/* The 20-byte reply's argument, or -1 if the server closed. */
static int32_t round_trip(int fd, int32_t opcode, int32_t argument)
{
    uint8_t request[20], reply[20];
    message(request, opcode, argument);
    if (send(fd, request, sizeof request, MSG_NOSIGNAL) != (ssize_t)sizeof request) {
        return -1;
    }
    size_t got = 0;
    while (got < sizeof reply) {
        ssize_t count = recv(fd, reply + got, sizeof reply - got, 0);
        if (count <= 0) {
            return -1;
        }
        got += (size_t)count;
    }
    return get_int32(reply + 16);
}

/* Milliseconds until the server closes fd (reading and dropping what comes), or
 * -1 if it is still open after limit_ms. */
static long long closed_after(int fd, long long limit_ms)
{
    long long started = now_ms();
    uint8_t sink[65536];
    struct timeval timeout = {0, 100 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    while (now_ms() - started < limit_ms) {
        ssize_t count = recv(fd, sink, sizeof sink, 0);
        if (count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            return now_ms() - started;
        }
    }
    return -1;
}

/* Waits (10 s at most, for a loaded machine) until replies of at least bytes
 * wait for slow clients. */
static void wait_for_queued_replies(fixture_t *fixture, uint64_t bytes)
{
    for (int i = 0; i < 1000 && server_connection_stats(fixture->server).queued_reply_bytes < bytes; i++) {
        usleep(10 * 1000);
    }
    assert_true(server_connection_stats(fixture->server).queued_reply_bytes >= bytes);
}

static void wait_for(atomic_int *value, int expected)
{
    for (int i = 0; i < 200 && atomic_load(value) < expected; i++) {
        usleep(10 * 1000);
    }
    assert_true(atomic_load(value) >= expected);
}

/* --- connection_data -------------------------------------------------------------- */

static void test_connection_data_lives_as_long_as_the_connection(void **state)
{
    (void)state;
    atomic_store(&closed_connection_data, 0);
    fixture_t *fixture = start((server_options_t){0});
    int first = connect_to(fixture->port, 0);
    int second = connect_to(fixture->port, 0);
    assert_int_equal(round_trip(first, OP_COUNT, 0), 1);
    assert_int_equal(round_trip(first, OP_COUNT, 0), 2);
    assert_int_equal(round_trip(second, OP_COUNT, 0), 1); /* each connection its own */
    assert_int_equal(round_trip(first, OP_COUNT, 0), 3);
    assert_int_equal(round_trip(second, OP_ECHO, 7), 7);
    close(first);
    wait_for(&closed_connection_data, 1);
    assert_int_equal(atomic_load(&closed_connection_data), 1);
    close(second);
    wait_for(&closed_connection_data, 2);
    int third = connect_to(fixture->port, 0);
    assert_int_equal(round_trip(third, OP_ECHO, 5), 5); /* never set: nothing to free */
    close(third);
    stop(fixture);
    assert_int_equal(atomic_load(&closed_connection_data), 2);
}

/* --- timeouts --------------------------------------------------------------------------- */

static void test_idle_timeout_is_off_by_default_and_closes_when_set(void **state)
{
    (void)state;
    fixture_t *fixture = start((server_options_t){0});
    int fd = connect_to(fixture->port, 0);
    assert_int_equal(closed_after(fd, 500), -1);
    close(fd);
    stop(fixture);

    /* A client talking every 100 ms keeps its connection (a margin of 15x the
     * pause, for a loaded machine) while a silent one is closed. */
    fixture = start((server_options_t){.idle_timeout_ms = 1500});
    int silent = connect_to(fixture->port, 0);
    int talkative = connect_to(fixture->port, 0);
    for (int i = 0; i < 25; i++) {
        assert_int_equal(round_trip(talkative, OP_ECHO, i), i);
        usleep(100 * 1000);
    }
    assert_true(closed_after(silent, 10000) >= 0);
    assert_true(server_connection_stats(fixture->server).timed_out >= 1);
    close(silent);
    close(talkative);
    stop(fixture);
}

static void test_receive_timeout_closes_a_half_sent_message(void **state)
{
    (void)state;
    fixture_t *fixture = start((server_options_t){.receive_timeout_ms = 300});
    int slow = connect_to(fixture->port, 0);
    uint8_t request[20];
    message(request, OP_ECHO, 1);
    long long started = now_ms();
    for (int i = 0; i < 10; i++) { /* a byte every 60 ms: not done in 300 ms */
        send(slow, request + i, 1, MSG_NOSIGNAL);
        usleep(60 * 1000);
    }
    long long closed = closed_after(slow, 10000);
    assert_true(closed >= 0);
    assert_true(now_ms() - started >= 300);
    close(slow);
    /* Whole messages, however slowly they come, are progress. */
    int steady = connect_to(fixture->port, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(round_trip(steady, OP_ECHO, i), i);
        usleep(150 * 1000);
    }
    close(steady);
    stop(fixture);
}

static void test_send_timeout_closes_a_client_that_does_not_read(void **state)
{
    (void)state;
    fixture_t *fixture = start((server_options_t){.send_timeout_ms = 300});
    int reader = connect_to(fixture->port, 0);
    int stalled = connect_to(fixture->port, 4096);
    uint8_t request[20];
    message(request, OP_BIG, 8); /* an 8 MB reply it never reads */
    assert_int_equal(send(stalled, request, sizeof request, MSG_NOSIGNAL), (ssize_t)sizeof request);
    wait_for_queued_replies(fixture, 8 * 1024 * 1024);
    assert_int_equal(round_trip(reader, OP_ECHO, 3), 3); /* others are served meanwhile */
    for (int i = 0; i < 1000 && server_connection_stats(fixture->server).timed_out < 1; i++) {
        usleep(10 * 1000);
    }
    assert_true(server_connection_stats(fixture->server).timed_out >= 1);
    assert_int_equal(server_connection_stats(fixture->server).queued_reply_bytes, 0);
    assert_true(closed_after(stalled, 1000) >= 0);
    close(stalled);
    close(reader);
    stop(fixture);
}

static void test_queued_replies_past_the_bound_close_their_connection(void **state)
{
    (void)state;
    fixture_t *fixture = start((server_options_t){.max_queued_reply_bytes = 10 * 1024 * 1024});
    uint8_t request[20];
    /* Replies larger than the most a kernel send buffer takes (tcp_wmem's 4 MB
     * maximum), so each must wait in the server for its client. */
    message(request, OP_BIG, 6);
    int first = connect_to(fixture->port, 4096);
    send(first, request, sizeof request, MSG_NOSIGNAL);
    /* The first reply must be the one waiting before the second asks. */
    wait_for_queued_replies(fixture, 6 * 1024 * 1024);
    int second = connect_to(fixture->port, 4096);
    send(second, request, sizeof request, MSG_NOSIGNAL);
    /* 6 MB waits for the first; 12 MB would not fit: the second goes at once.
     * Neither client reads before that is seen (a client draining its reply as
     * the server writes it never makes the server hold the reply). */
    server_connection_stats_t stats = server_connection_stats(fixture->server);
    for (int i = 0; i < 1000 && !(stats.total_created == 2 && stats.current == 1); i++) {
        usleep(10 * 1000);
        stats = server_connection_stats(fixture->server);
    }
    assert_int_equal(stats.total_created, 2);
    assert_int_equal(stats.current, 1);
    assert_true(closed_after(second, 10000) >= 0);
    assert_int_equal(closed_after(first, 300), -1);
    assert_true(server_connection_stats(fixture->server).queued_reply_bytes <= 10 * 1024 * 1024);
    close(first);
    close(second);
    stop(fixture);
}

/* --- TLS ------------------------------------------------------------------------------ */

/* A self-signed certificate for localhost and its key, in one PEM file. */
static void make_certificate(char *path, size_t size)
{
    snprintf(path, size, "/tmp/test_transport_%d.pem", (int)getpid());
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *certificate = X509_new();
    assert_non_null(key);
    ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1);
    X509_gmtime_adj(X509_getm_notBefore(certificate), 0);
    X509_gmtime_adj(X509_getm_notAfter(certificate), 3600);
    X509_set_pubkey(certificate, key);
    X509_NAME *name = X509_get_subject_name(certificate);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(certificate, name);
    assert_true(X509_sign(certificate, key, EVP_sha256()) > 0);
    FILE *file = fopen(path, "w");
    assert_non_null(file);
    PEM_write_X509(file, certificate);
    PEM_write_PrivateKey(file, key, NULL, NULL, 0, NULL, NULL);
    fclose(file);
    X509_free(certificate);
    EVP_PKEY_free(key);
}

typedef struct tls_client {
    SSL_CTX *context;
    SSL *ssl;
    int fd;
} tls_client_t;

static bool tls_connect(tls_client_t *client, int port, const char *ca_file)
{
    client->context = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(client->context, ca_file, NULL);
    SSL_CTX_set_verify(client->context, SSL_VERIFY_PEER, NULL);
    client->fd = connect_to(port, 0);
    client->ssl = SSL_new(client->context);
    SSL_set_fd(client->ssl, client->fd);
    SSL_set_tlsext_host_name(client->ssl, "localhost");
    return SSL_connect(client->ssl) == 1;
}

static int32_t tls_round_trip(tls_client_t *client, int32_t argument)
{
    uint8_t request[20], reply[20];
    message(request, OP_ECHO, argument);
    if (SSL_write(client->ssl, request, sizeof request) != (int)sizeof request) {
        return -1;
    }
    size_t got = 0;
    while (got < sizeof reply) {
        int count = SSL_read(client->ssl, reply + got, (int)(sizeof reply - got));
        if (count <= 0) {
            return -1;
        }
        got += (size_t)count;
    }
    return get_int32(reply + 16);
}

static void tls_disconnect(tls_client_t *client)
{
    SSL_free(client->ssl);
    SSL_CTX_free(client->context);
    close(client->fd);
}

static tls_context_t *server_tls_context(const char *pem)
{
    bson_error_t error;
    tls_server_options_t options = {.certificate_key_file = pem};
    tls_context_t *context = tls_context_new_server(&options, &error);
    if (context == NULL) {
        fail_msg("tls_context_new_server: %s", error.message);
    }
    return context;
}

static void test_require_tls_serves_tls_and_refuses_plaintext(void **state)
{
    (void)state;
    char pem[128];
    make_certificate(pem, sizeof pem);
    tls_context_t *context = server_tls_context(pem);
    fixture_t *fixture = start((server_options_t){.tls_mode = TLS_MODE_REQUIRE, .tls_context = context});
    tls_client_t client;
    assert_true(tls_connect(&client, fixture->port, pem));
    for (int i = 0; i < 20; i++) {
        assert_int_equal(tls_round_trip(&client, i * 7), i * 7);
    }
    assert_int_equal(server_connection_stats(fixture->server).tls, 1);
    int plain = connect_to(fixture->port, 0);
    assert_int_equal(round_trip(plain, OP_ECHO, 1), -1);
    close(plain);
    assert_int_equal(tls_round_trip(&client, 99), 99);
    tls_disconnect(&client);
    stop(fixture);
    tls_context_destroy(context);
    unlink(pem);
}

static void test_prefer_tls_serves_both(void **state)
{
    (void)state;
    char pem[128];
    make_certificate(pem, sizeof pem);
    tls_context_t *context = server_tls_context(pem);
    fixture_t *fixture = start((server_options_t){.tls_mode = TLS_MODE_PREFER, .tls_context = context});
    tls_client_t client;
    assert_true(tls_connect(&client, fixture->port, pem));
    int plain = connect_to(fixture->port, 0);
    assert_int_equal(round_trip(plain, OP_ECHO, 11), 11);
    assert_int_equal(tls_round_trip(&client, 12), 12);
    assert_int_equal(round_trip(plain, OP_COUNT, 0), 1);
    tls_disconnect(&client);
    close(plain);
    stop(fixture);
    tls_context_destroy(context);
    unlink(pem);
}

static void test_tls_needs_a_context_and_a_readable_certificate(void **state)
{
    (void)state;
    bson_error_t error;
    server_callbacks_t callbacks = {.handle = handle};
    server_options_t options = {.bind_address = "127.0.0.1", .max_connections = 1, .worker_count = 1,
                                .tls_mode = TLS_MODE_REQUIRE};
    assert_null(server_new(&options, &callbacks, &error));
    assert_non_null(strstr(error.message, "TLS context"));
    tls_server_options_t tls_options = {.certificate_key_file = "/nonexistent/server.pem"};
    assert_null(tls_context_new_server(&tls_options, &error));
    assert_int_equal(error.code, 2);
    assert_non_null(strstr(error.message, "/nonexistent/server.pem"));
    tls_mode_t mode;
    assert_true(tls_mode_from_name("preferTLS", &mode));
    assert_int_equal(mode, TLS_MODE_PREFER);
    assert_true(tls_mode_from_name("requireSSL", &mode));
    assert_int_equal(mode, TLS_MODE_REQUIRE);
    assert_false(tls_mode_from_name("require", &mode));
    assert_string_equal(tls_mode_name(TLS_MODE_ALLOW), "allowTLS");
}

int main(void)
{
    tc_log_set_level(TC_LOG_WARNING);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connection_data_lives_as_long_as_the_connection),
        cmocka_unit_test(test_idle_timeout_is_off_by_default_and_closes_when_set),
        cmocka_unit_test(test_receive_timeout_closes_a_half_sent_message),
        cmocka_unit_test(test_send_timeout_closes_a_client_that_does_not_read),
        cmocka_unit_test(test_queued_replies_past_the_bound_close_their_connection),
        cmocka_unit_test(test_require_tls_serves_tls_and_refuses_plaintext),
        cmocka_unit_test(test_prefer_tls_serves_both),
        cmocka_unit_test(test_tls_needs_a_context_and_a_readable_certificate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
