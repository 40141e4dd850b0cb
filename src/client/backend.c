/* A connection pool on the caller's libuv loop (the proxy's, bench's): a tier's,
 * to its primary, or one of its secondaries' (backend_members.c opens those). Each connection runs this state
 * machine; every change goes through backend_set_state(), which aborts on an
 * impossible one:
 *
 *   CONNECTING ──connected──▶ HANDSHAKING ──hello ok──▶ IDLE ◀──reply──┐
 *        │                        │    │                 ▲ │  request    │
 *        │                        │    │ credentials:    │ └──────▶ BUSY ┘
 *        │                        │    └─▶ AUTHENTICATING┘ (SCRAM, backend_auth.c)
 *        │                        │ not the primary: retarget the pool
 *        │                        │ (a secondary's pool: not a secondary of the set: fail)
 *        └──── error / timeout ───┴──────────── any state ──▶ CLOSING ─▶ freed
 *
 * A request that was on a connection when it failed is failed with
 * HostUnreachable (retryable for drivers); queued requests wait for the next
 * connection, which the pool opens at once. When the tier's URI asks for TLS,
 * HANDSHAKING starts with the TLS handshake (backend_tls.c, under the connect
 * timeout): the hello waits in the TLS layer until it is done. */
#include "client/backend.h"
#include "client/backend_auth.h"
#include "client/backend_members.h"
#include "client/backend_tls.h"

#include "common/log.h"
#include "net/stream_write.h"
#include "wire/wire.h"
#include "common/clock.h"

#include <mongoc/mongoc.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "BACKEND"
#define READ_CHUNK_BYTES (64 * 1024)

typedef enum backend_state {
    BACKEND_CONNECTING,
    BACKEND_HANDSHAKING,
    BACKEND_AUTHENTICATING,
    BACKEND_IDLE,
    BACKEND_BUSY,
    BACKEND_CLOSING,
    BACKEND_STATE_COUNT,
} backend_state_t;

static const char *const backend_state_names[BACKEND_STATE_COUNT] = {
    "CONNECTING", "HANDSHAKING", "AUTHENTICATING", "IDLE", "BUSY", "CLOSING",
};

typedef struct backend_request {
    struct backend_request *next;
    uint8_t *message;
    size_t length;
    backend_reply_fn done;
    void *context;
    uint64_t sent_ns; /* clock_monotonic_ns() when written to a connection */
} backend_request_t;

typedef struct backend_connection {
    struct backend_connection *next; /* the pool's list */
    backend_pool_t *pool;
    backend_state_t state;
    uint64_t id;
    uint64_t generation; /* the pool's when opened; older ones close when idle */
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_request;
    int open_handles;
    backend_request_t *request; /* in flight (BUSY) */
    backend_auth_t *auth;       /* the SCRAM conversation (AUTHENTICATING) */
    int32_t request_id;
    backend_tls_t *tls;          /* NULL: plaintext */
    uint8_t *buffer;             /* received bytes (plaintext) */
    size_t capacity;
    size_t length;
} backend_connection_t;

/* What a pool's handshake accepts: the replica set's writable primary (the tier's
 * pool follows it), or a secondary of the tier's set (a member's pool). */
typedef enum backend_role {
    BACKEND_ROLE_PRIMARY,
    BACKEND_ROLE_SECONDARY,
} backend_role_t;

struct backend_pool {
    uv_loop_t *loop;
    backend_role_t role;
    char expected_set_name[128]; /* BACKEND_ROLE_SECONDARY: the tier's set */
    char *name;
    char host[256];
    int port;
    struct sockaddr_storage address;
    bool address_known;
    uv_getaddrinfo_t resolve_request;
    bool resolving;
    int max_connections;
    int in_flight_limit; /* requests sent at once at most (backend_pool_limit_in_flight) */
    int busy;            /* connections carrying a request */
    int connect_timeout_ms;
    bool closing;
    backend_connection_t *connections;
    int connection_count;
    uint64_t last_connection_id;
    int32_t next_request_id;
    backend_request_t *queue_head;
    backend_request_t *queue_tail;
    int queued;
    uint64_t sent;
    uint64_t failed;
    uint64_t waited;
    backend_server_info_t info;
    int consecutive_failures;
    /* The URI's user (NULL: none) and TLS context (NULL: no TLS): a member's pool
     * borrows its tier's, which outlives it. */
    backend_credentials_t *credentials;
    tls_context_t *tls_context;
    uint8_t *tls_read_buffer;   /* ciphertext as read, for every connection (one loop thread) */
    char last_error[256];       /* why the last connection attempt failed; "" after one succeeds */
    uint64_t generation; /* raised by backend_pool_clear */
    bson_t *hello;       /* the server's hello in the last handshake (the primary's, for a tier's pool) */
    int64_t round_trip_us; /* of the reply being handed to its request's done */
    backend_members_t *members; /* the tier's secondaries; NULL until first used */
    bool direct_connection;     /* the URI's directConnection=true: its host only */
};

/* One write to the socket with its bytes. */
typedef struct backend_write {
    uv_write_t request;
    backend_connection_t *connection;
    uint8_t *bytes;
} backend_write_t;

static void backend_pool_pump(backend_pool_t *pool);
static void backend_connection_close(backend_connection_t *connection);

/* --- requests ---------------------------------------------------------------- */

static void fail_request(backend_pool_t *pool, backend_request_t *request, int32_t code, const char *reason)
{
    bson_error_t error;
    tc_error_set(&error, code, "%s tier (%s:%d): %s", pool->name, pool->host, pool->port, reason);
    pool->failed++;
    request->done(request->context, NULL, 0, &error);
    bson_free(request->message);
    bson_free(request);
}

static backend_request_t *dequeue(backend_pool_t *pool)
{
    backend_request_t *request = pool->queue_head;
    if (request != NULL) {
        pool->queue_head = request->next;
        if (pool->queue_head == NULL) {
            pool->queue_tail = NULL;
        }
        pool->queued--;
        request->next = NULL;
    }
    return request;
}

static void fail_queue(backend_pool_t *pool, const char *reason)
{
    backend_request_t *request;
    while ((request = dequeue(pool)) != NULL) {
        fail_request(pool, request, TC_ERR_HOST_UNREACHABLE, reason);
    }
}

/* --- connection state machine ------------------------------------------------ */

static void backend_set_state(backend_connection_t *connection, backend_state_t next)
{
    static const bool allowed[BACKEND_STATE_COUNT][BACKEND_STATE_COUNT] = {
        [BACKEND_CONNECTING] = {[BACKEND_HANDSHAKING] = true, [BACKEND_CLOSING] = true},
        [BACKEND_HANDSHAKING] = {[BACKEND_AUTHENTICATING] = true, [BACKEND_IDLE] = true, [BACKEND_CLOSING] = true},
        [BACKEND_AUTHENTICATING] = {[BACKEND_IDLE] = true, [BACKEND_CLOSING] = true},
        [BACKEND_IDLE] = {[BACKEND_BUSY] = true, [BACKEND_CLOSING] = true},
        [BACKEND_BUSY] = {[BACKEND_IDLE] = true, [BACKEND_CLOSING] = true},
        [BACKEND_CLOSING] = {[BACKEND_CLOSING] = false},
    };
    if (!allowed[connection->state][next]) {
        TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, connection->id, "impossible backend transition %s -> %s",
               backend_state_names[connection->state], backend_state_names[next]);
        abort();
    }
    connection->pool->busy += (next == BACKEND_BUSY) - (connection->state == BACKEND_BUSY);
    connection->state = next;
}

/* Whether another request may be sent now. */
static bool below_in_flight_limit(const backend_pool_t *pool)
{
    return pool->busy < pool->in_flight_limit;
}

static void backend_connection_free(backend_connection_t *connection)
{
    backend_pool_t *pool = connection->pool;
    backend_connection_t **link = &pool->connections;
    while (*link != connection) {
        link = &(*link)->next;
    }
    *link = connection->next;
    pool->connection_count--;
    bson_free(connection->buffer);
    backend_auth_destroy(connection->auth);
    backend_tls_destroy(connection->tls);
    bson_free(connection);
    backend_pool_pump(pool);
}

static void on_handle_closed(uv_handle_t *handle)
{
    backend_connection_t *connection = handle->data;
    if (--connection->open_handles == 0) {
        backend_connection_free(connection);
    }
}

static void backend_connection_fail(backend_connection_t *connection, const char *reason)
{
    backend_pool_t *pool = connection->pool;
    if (connection->request != NULL) {
        fail_request(pool, connection->request, TC_ERR_HOST_UNREACHABLE, reason);
        connection->request = NULL;
    }
    if (connection->state == BACKEND_CONNECTING || connection->state == BACKEND_HANDSHAKING ||
        connection->state == BACKEND_AUTHENTICATING) {
        pool->consecutive_failures++;
        snprintf(pool->last_error, sizeof pool->last_error, "%s", reason);
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection->id, "{tier} tier {host}:{port} unreachable: {error}",
                     TC_ATTR_STR("tier", pool->name), TC_ATTR_STR("host", pool->host), TC_ATTR_INT("port", pool->port),
                     TC_ATTR_STR("error", reason));
        /* Nothing can serve the queue until a connection succeeds: fail it now
         * rather than let clients hang; drivers retry. */
        fail_queue(pool, reason);
    }
    backend_connection_close(connection);
}

static void backend_connection_close(backend_connection_t *connection)
{
    if (connection->state == BACKEND_CLOSING) {
        return;
    }
    backend_set_state(connection, BACKEND_CLOSING);
    uv_close((uv_handle_t *)&connection->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&connection->timer, on_handle_closed);
}

/* --- socket I/O: plaintext, or TLS records (backend_tls.c) ---------------------- */

static void on_write(uv_write_t *write_request, int status)
{
    backend_write_t *write = write_request->data;
    backend_connection_t *connection = write->connection;
    bson_free(write->bytes);
    bson_free(write);
    if (status < 0 && connection->state != BACKEND_CLOSING) {
        backend_connection_fail(connection, uv_strerror(status));
    }
}

/* stream_write's request for what the socket did not take at once: a write of
 * its own, which keeps the bytes until on_write. */
typedef struct backend_pending_write {
    backend_connection_t *connection;
    uint8_t *bytes;
    backend_write_t *write; /* NULL until the socket leaves some bytes over */
} backend_pending_write_t;

static uv_write_t *backend_write_request(void *context)
{
    backend_pending_write_t *pending = context;
    pending->write = bson_malloc0(sizeof *pending->write);
    pending->write->connection = pending->connection;
    pending->write->bytes = pending->bytes;
    pending->write->request.data = pending->write;
    return &pending->write->request;
}

/* Writes bytes (taken over) to the socket. false: the connection failed. */
static bool write_bytes(backend_connection_t *connection, uint8_t *bytes, size_t length)
{
    backend_pending_write_t pending = {.connection = connection, .bytes = bytes};
    int error = 0;
    switch (stream_write((uv_stream_t *)&connection->tcp, bytes, length, backend_write_request, &pending, on_write,
                         &error)) {
    case STREAM_WRITE_DONE:
        bson_free(bytes);
        return true;
    case STREAM_WRITE_QUEUED:
        return true;
    case STREAM_WRITE_FAILED:
        break;
    }
    bson_free(bytes);
    bson_free(pending.write);
    backend_connection_fail(connection, uv_strerror(error));
    return false;
}

/* Writes the TLS records the session has for the server. */
static bool flush_tls(backend_connection_t *connection)
{
    size_t length;
    uint8_t *records = backend_tls_take_output(connection->tls, &length);
    return records == NULL || write_bytes(connection, records, length);
}

/* Sends plaintext (taken over): as it is, or through TLS. */
static bool send_plaintext(backend_connection_t *connection, uint8_t *bytes, size_t length)
{
    if (connection->tls == NULL) {
        return write_bytes(connection, bytes, length);
    }
    bson_error_t error;
    bool sent = backend_tls_send(connection->tls, bytes, length, &error);
    bson_free(bytes);
    if (!sent) {
        backend_connection_fail(connection, error.message);
        return false;
    }
    return flush_tls(connection);
}

/* count bytes were read into the buffer on_alloc gave: plaintext for the
 * framing below. false: the connection failed. */
static bool receive_bytes(backend_connection_t *connection, const uint8_t *data, size_t count)
{
    if (connection->tls == NULL) {
        connection->length += count;
        return true;
    }
    bson_error_t error;
    bool was_complete = backend_tls_handshake_complete(connection->tls);
    if (!backend_tls_receive(connection->tls, data, count, &connection->buffer, &connection->capacity,
                             &connection->length, &error)) {
        /* The alert that tells the server why goes out first, if the socket takes it. */
        if (flush_tls(connection)) {
            backend_connection_fail(connection, error.message);
        }
        return false;
    }
    if (!was_complete && backend_tls_handshake_complete(connection->tls) && tc_log_enabled(TC_LOG_DEBUG)) {
        char description[384];
        backend_tls_describe(connection->tls, description, sizeof description);
        TC_LOG(TC_LOG_DEBUG, LOG_COMPONENT, connection->id, "TLS to the %s tier %s:%d: %s", connection->pool->name,
               connection->pool->host, connection->pool->port, description);
    }
    return flush_tls(connection);
}

static bool write_message(backend_connection_t *connection, uint8_t *message, size_t length)
{
    connection->request_id = ++connection->pool->next_request_id;
    if (connection->pool->next_request_id == INT32_MAX) {
        connection->pool->next_request_id = 0;
    }
    wire_message_set_request_id(message, length, connection->request_id);
    return send_plaintext(connection, message, length);
}

static void start_request(backend_connection_t *connection, backend_request_t *request)
{
    backend_set_state(connection, BACKEND_BUSY);
    connection->request = request;
    connection->pool->sent++;
    request->sent_ns = (uint64_t)clock_monotonic_ns();
    uint8_t *message = request->message;
    request->message = NULL;
    write_message(connection, message, request->length);
}

static void send_hello(backend_connection_t *connection)
{
    bson_t hello = BSON_INITIALIZER;
    bson_t client, driver;
    bson_error_t error;
    uint8_t *message;
    size_t length;
    BSON_APPEND_INT32(&hello, "hello", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&hello, "client", &client);
    BSON_APPEND_DOCUMENT_BEGIN(&client, "driver", &driver);
    BSON_APPEND_UTF8(&driver, "name", "thermocline-proxy");
    BSON_APPEND_UTF8(&driver, "version", "0.1.0");
    bson_append_document_end(&client, &driver);
    bson_append_document_end(&hello, &client);
    if (connection->pool->credentials != NULL) {
        backend_credentials_append_hello(connection->pool->credentials, &hello);
    }
    BSON_APPEND_UTF8(&hello, "$db", "admin");
    bool built = wire_op_msg_build(0, 0, 0, &hello, NULL, 0, &message, &length, &error);
    bson_destroy(&hello);
    if (!built) {
        backend_connection_fail(connection, error.message);
        return;
    }
    write_message(connection, message, length);
}

/* After hello, with the URI's credentials: the first SCRAM message. The connect
 * timer keeps running: a tier that never finishes the conversation times out
 * like one that never answers. Returns false if it closed. */
static bool start_authentication(backend_connection_t *connection, const bson_t *hello_reply)
{
    uint8_t *message;
    size_t length;
    bson_error_t error;
    backend_set_state(connection, BACKEND_AUTHENTICATING);
    connection->auth = backend_auth_start(connection->pool->credentials, hello_reply, &message, &length, &error);
    if (connection->auth == NULL) {
        backend_connection_fail(connection, error.message);
        return false;
    }
    return write_message(connection, message, length);
}

/* A reply in the SCRAM conversation: the next message, or IDLE once it is done.
 * Returns false if it closed. */
static bool continue_authentication(backend_connection_t *connection, const uint8_t *reply, size_t length)
{
    backend_pool_t *pool = connection->pool;
    uint8_t *message;
    size_t message_length;
    bson_error_t error;
    if (!backend_auth_step(connection->auth, reply, length, &message, &message_length, &error)) {
        char reason[sizeof error.message + 128];
        snprintf(reason, sizeof reason, "cannot authenticate as %s: %s",
                 backend_credentials_principal(pool->credentials), error.message);
        backend_connection_fail(connection, reason);
        return false;
    }
    if (message != NULL) {
        return write_message(connection, message, message_length);
    }
    backend_auth_destroy(connection->auth);
    connection->auth = NULL;
    pool->consecutive_failures = 0;
    uv_timer_stop(&connection->timer);
    backend_set_state(connection, BACKEND_IDLE);
    return true;
}

static bool finish_accepted_handshake(backend_connection_t *connection, const bson_t *body);

/* A member's pool takes only a secondary of the tier's set: reads go there for
 * their $readPreference, and a member that became the primary, or is recovering,
 * or belongs to another set, must not answer them. Returns false if it closed. */
static bool accept_secondary(backend_connection_t *connection, const bson_t *body)
{
    backend_pool_t *pool = connection->pool;
    bson_iter_t iter;
    char reason[256];
    const char *set_name = "";
    if (bson_iter_init_find(&iter, body, "setName") && BSON_ITER_HOLDS_UTF8(&iter)) {
        set_name = bson_iter_utf8(&iter, NULL);
    }
    bool secondary = bson_iter_init_find(&iter, body, "secondary") && bson_iter_as_bool(&iter);
    if (strcmp(set_name, pool->expected_set_name) != 0) {
        snprintf(reason, sizeof reason, "belongs to replica set '%s', not '%s'", set_name, pool->expected_set_name);
        backend_connection_fail(connection, reason);
        return false;
    }
    if (!secondary) {
        snprintf(reason, sizeof reason, "is no longer a secondary of %s", pool->expected_set_name);
        backend_connection_fail(connection, reason);
        return false;
    }
    return finish_accepted_handshake(connection, body);
}

/* Reads the hello reply: records the server's limits, and follows a replica
 * set's primary when this member is not it. Returns false if it closed. */
static bool finish_handshake(backend_connection_t *connection, const uint8_t *reply, size_t length)
{
    backend_pool_t *pool = connection->pool;
    bson_t body;
    bson_iter_t iter;
    bson_error_t error;
    if (!wire_op_msg_find_body(reply, length, &body, &error)) {
        backend_connection_fail(connection, error.message);
        return false;
    }
    bool writable = (bson_iter_init_find(&iter, &body, "isWritablePrimary") && bson_iter_as_bool(&iter)) ||
                    (bson_iter_init_find(&iter, &body, "ismaster") && bson_iter_as_bool(&iter));
    if (pool->role == BACKEND_ROLE_SECONDARY) {
        return accept_secondary(connection, &body);
    }
    if (!writable) {
        const char *primary = NULL;
        if (bson_iter_init_find(&iter, &body, "primary") && BSON_ITER_HOLDS_UTF8(&iter)) {
            primary = bson_iter_utf8(&iter, NULL);
        }
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection->id, "{tier} tier {host}:{port} is not the primary",
                     TC_ATTR_STR("tier", pool->name), TC_ATTR_STR("host", pool->host), TC_ATTR_INT("port", pool->port),
                     TC_ATTR_STR("primary", primary));
        if (primary != NULL) {
            const char *colon = strrchr(primary, ':');
            if (colon != NULL && (size_t)(colon - primary) < sizeof pool->host) {
                snprintf(pool->host, sizeof pool->host, "%.*s", (int)(colon - primary), primary);
                pool->port = atoi(colon + 1);
                pool->address_known = false;
            }
        }
        /* Follow the primary a few times; past that (or with no primary named)
         * fail what waits: drivers retry, and the next request tries again. */
        if (primary == NULL || ++pool->consecutive_failures > 3) {
            pool->consecutive_failures = 0;
            fail_queue(pool, "no writable primary");
        }
        backend_connection_close(connection);
        return false;
    }
    return finish_accepted_handshake(connection, &body);
}

/* The server is the one the pool wants: record its limits, then authenticate. */
static bool finish_accepted_handshake(backend_connection_t *connection, const bson_t *body)
{
    backend_pool_t *pool = connection->pool;
    bson_iter_t iter;
    pool->info.known = true;
    pool->info.max_wire_version = bson_iter_init_find(&iter, body, "maxWireVersion") ? bson_iter_as_int64(&iter) : 0;
    pool->info.min_wire_version = bson_iter_init_find(&iter, body, "minWireVersion") ? bson_iter_as_int64(&iter) : 0;
    pool->info.logical_session_timeout_minutes =
        bson_iter_init_find(&iter, body, "logicalSessionTimeoutMinutes") ? (int32_t)bson_iter_as_int64(&iter) : -1;
    if (bson_iter_init_find(&iter, body, "setName") && BSON_ITER_HOLDS_UTF8(&iter)) {
        snprintf(pool->info.set_name, sizeof pool->info.set_name, "%s", bson_iter_utf8(&iter, NULL));
    }
    bson_destroy(pool->hello);
    pool->hello = bson_copy(body);
    if (pool->credentials != NULL) {
        return start_authentication(connection, body);
    }
    pool->consecutive_failures = 0;
    pool->last_error[0] = '\0';
    uv_timer_stop(&connection->timer);
    backend_set_state(connection, BACKEND_IDLE);
    return true;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *out)
{
    backend_connection_t *connection = handle->data;
    (void)suggested;
    if (connection->tls != NULL) {
        if (connection->pool->tls_read_buffer == NULL) {
            connection->pool->tls_read_buffer = bson_malloc(READ_CHUNK_BYTES);
        }
        *out = uv_buf_init((char *)connection->pool->tls_read_buffer, READ_CHUNK_BYTES);
        return;
    }
    if (connection->capacity - connection->length < READ_CHUNK_BYTES) {
        connection->capacity = connection->length + READ_CHUNK_BYTES;
        connection->buffer = bson_realloc(connection->buffer, connection->capacity);
    }
    *out = uv_buf_init((char *)connection->buffer + connection->length,
                       (unsigned int)(connection->capacity - connection->length));
}

static void on_read(uv_stream_t *stream, ssize_t count, const uv_buf_t *buffer)
{
    backend_connection_t *connection = stream->data;
    if (connection->state == BACKEND_CLOSING) {
        return;
    }
    if (count < 0) {
        backend_connection_fail(connection, count == UV_EOF ? "connection closed by the server" : uv_strerror((int)count));
        return;
    }
    if (!receive_bytes(connection, (const uint8_t *)buffer->base, (size_t)count)) {
        return;
    }
    while (connection->length >= 4 && connection->state != BACKEND_CLOSING) {
        size_t message_length;
        bson_error_t error;
        if (!wire_frame_check(connection->buffer, &message_length, &error)) {
            backend_connection_fail(connection, error.message);
            return;
        }
        if (connection->length < message_length) {
            if (connection->capacity < message_length) {
                connection->capacity = message_length;
                connection->buffer = bson_realloc(connection->buffer, connection->capacity);
            }
            return;
        }
        if (wire_message_response_to(connection->buffer) != connection->request_id) {
            backend_connection_fail(connection, "reply does not answer the request sent");
            return;
        }
        if (connection->state == BACKEND_HANDSHAKING) {
            if (!finish_handshake(connection, connection->buffer, message_length)) {
                return;
            }
        } else if (connection->state == BACKEND_AUTHENTICATING) {
            if (!continue_authentication(connection, connection->buffer, message_length)) {
                return;
            }
        } else if (connection->state == BACKEND_BUSY) {
            backend_request_t *request = connection->request;
            connection->request = NULL;
            backend_set_state(connection, BACKEND_IDLE);
            connection->pool->round_trip_us = (int64_t)(((uint64_t)clock_monotonic_ns() - request->sent_ns) / 1000);
            request->done(request->context, connection->buffer, message_length, NULL);
            bson_free(request->message);
            bson_free(request);
        } else {
            backend_connection_fail(connection, "unexpected message from the server");
            return;
        }
        memmove(connection->buffer, connection->buffer + message_length, connection->length - message_length);
        connection->length -= message_length;
        if (connection->state == BACKEND_IDLE && connection->generation != connection->pool->generation) {
            backend_connection_close(connection); /* cleared while it was busy */
        } else if (connection->state == BACKEND_IDLE && below_in_flight_limit(connection->pool)) {
            backend_request_t *next = dequeue(connection->pool);
            if (next != NULL) {
                start_request(connection, next);
            }
        }
    }
    /* A large reply's buffer is not kept for the connection's life: between
     * replies a connection holds at most one read chunk. */
    if (connection->length == 0 && connection->capacity > READ_CHUNK_BYTES) {
        bson_free(connection->buffer);
        connection->buffer = NULL;
        connection->capacity = 0;
    }
}

static void on_connect_timeout(uv_timer_t *timer)
{
    backend_connection_t *connection = timer->data;
    backend_connection_fail(connection, "connection timed out");
}

static void on_connect(uv_connect_t *connect_request, int status)
{
    backend_connection_t *connection = connect_request->data;
    if (connection->state == BACKEND_CLOSING) {
        return;
    }
    if (status < 0) {
        backend_connection_fail(connection, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&connection->tcp, 1);
    backend_set_state(connection, BACKEND_HANDSHAKING);
    if (connection->pool->tls_context != NULL) {
        bson_error_t error;
        connection->tls = backend_tls_new(connection->pool->tls_context, connection->pool->host, &error);
        if (connection->tls == NULL) {
            backend_connection_fail(connection, error.message);
            return;
        }
        if (!flush_tls(connection)) {
            return;
        }
    }
    uv_read_start((uv_stream_t *)&connection->tcp, on_alloc, on_read);
    send_hello(connection);
}

static void open_connection(backend_pool_t *pool)
{
    backend_connection_t *connection = BSON_ALIGNED_ALLOC0(backend_connection_t);
    connection->pool = pool;
    connection->id = ++pool->last_connection_id;
    connection->generation = pool->generation;
    connection->state = BACKEND_CONNECTING;
    uv_tcp_init(pool->loop, &connection->tcp);
    uv_timer_init(pool->loop, &connection->timer);
    connection->tcp.data = connection;
    connection->timer.data = connection;
    connection->open_handles = 2;
    connection->next = pool->connections;
    pool->connections = connection;
    pool->connection_count++;
    connection->connect_request.data = connection;
    uv_timer_start(&connection->timer, on_connect_timeout, (uint64_t)pool->connect_timeout_ms, 0);
    int result = uv_tcp_connect(&connection->connect_request, &connection->tcp,
                                (const struct sockaddr *)&pool->address, on_connect);
    if (result != 0) {
        backend_connection_fail(connection, uv_strerror(result));
    }
}

/* --- the pool ------------------------------------------------------------------ */

static void on_resolved(uv_getaddrinfo_t *request, int status, struct addrinfo *result)
{
    backend_pool_t *pool = request->data;
    pool->resolving = false;
    if (status == 0 && result != NULL) {
        memcpy(&pool->address, result->ai_addr, result->ai_addrlen);
        pool->address_known = true;
    }
    uv_freeaddrinfo(result);
    if (!pool->address_known) {
        fail_queue(pool, status != 0 ? uv_strerror(status) : "host not found");
        return;
    }
    backend_pool_pump(pool);
}

/* Puts idle connections to work and opens new ones while requests wait. */
static void backend_pool_pump(backend_pool_t *pool)
{
    if (pool->closing) {
        return;
    }
    for (backend_connection_t *connection = pool->connections; connection != NULL && pool->queue_head != NULL;
         connection = connection->next) {
        if (connection->state == BACKEND_IDLE && below_in_flight_limit(pool)) {
            start_request(connection, dequeue(pool));
        }
    }
    if (pool->queue_head == NULL || !below_in_flight_limit(pool)) {
        return;
    }
    if (!pool->address_known) {
        if (!pool->resolving) {
            char port[16];
            struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
            snprintf(port, sizeof port, "%d", pool->port);
            pool->resolving = true;
            pool->resolve_request.data = pool;
            if (uv_getaddrinfo(pool->loop, &pool->resolve_request, on_resolved, pool->host, port, &hints) != 0) {
                pool->resolving = false;
                fail_queue(pool, "cannot resolve the host");
            }
        }
        return;
    }
    /* Opening connections: as many as requests wait, within the pool's size. */
    int opening = 0;
    for (backend_connection_t *connection = pool->connections; connection != NULL; connection = connection->next) {
        opening += connection->state == BACKEND_CONNECTING || connection->state == BACKEND_HANDSHAKING ||
                   connection->state == BACKEND_AUTHENTICATING;
    }
    while (opening < pool->queued && opening < pool->in_flight_limit - pool->busy &&
           pool->connection_count < pool->max_connections) {
        open_connection(pool);
        opening++;
    }
}

backend_pool_t *backend_pool_new(uv_loop_t *loop, const backend_pool_options_t *options, bson_error_t *error)
{
    bson_error_t uri_error;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(options->uri, &uri_error);
    if (uri == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "bad %s URI: %s", options->name, uri_error.message);
        return NULL;
    }
    const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(uri);
    for (int index = 0; index < options->host_index && hosts != NULL; index++) {
        hosts = hosts->next;
    }
    if (hosts == NULL) {
        mongoc_uri_destroy(uri);
        tc_error_set(error, TC_ERR_BAD_VALUE, "the %s URI names fewer than %d hosts", options->name,
                     options->host_index + 1);
        return NULL;
    }
    backend_credentials_t *credentials;
    if (!backend_credentials_from_uri(uri, &credentials, error)) {
        mongoc_uri_destroy(uri);
        return NULL;
    }
    tls_context_t *tls_context;
    if (!backend_tls_context_from_uri(uri, options->name, &tls_context, error)) {
        backend_credentials_destroy(credentials);
        mongoc_uri_destroy(uri);
        return NULL;
    }
    backend_pool_t *pool = BSON_ALIGNED_ALLOC0(backend_pool_t);
    pool->credentials = credentials;
    pool->loop = loop;
    pool->tls_context = tls_context;
    pool->name = bson_strdup(options->name);
    snprintf(pool->host, sizeof pool->host, "%s", hosts->host);
    pool->port = hosts->port;
    pool->max_connections = options->max_connections > 0 ? options->max_connections : 100;
    pool->in_flight_limit = pool->max_connections;
    pool->connect_timeout_ms = options->connect_timeout_ms > 0 ? options->connect_timeout_ms : 5000;
    pool->info.logical_session_timeout_minutes = -1;
    pool->direct_connection = mongoc_uri_get_option_as_bool(uri, MONGOC_URI_DIRECTCONNECTION, false);
    mongoc_uri_destroy(uri);
    return pool;
}

void backend_pool_send(backend_pool_t *pool, const uint8_t *message, size_t length, backend_reply_fn done,
                       void *context)
{
    backend_request_t *request = bson_malloc0(sizeof *request);
    request->message = bson_malloc(length);
    memcpy(request->message, message, length);
    request->length = length;
    request->done = done;
    request->context = context;
    if (pool->closing) {
        fail_request(pool, request, TC_ERR_HOST_UNREACHABLE, "the proxy is shutting down");
        return;
    }
    if (pool->queue_tail != NULL) {
        pool->queue_tail->next = request;
    } else {
        pool->queue_head = request;
    }
    pool->queue_tail = request;
    pool->queued++;
    backend_pool_pump(pool);
    if (pool->queue_tail == request) {
        pool->waited++; /* no connection took it at once */
    }
}

backend_pool_t *backend_pool_new_member(backend_pool_t *tier, const char *address, const char *set_name)
{
    const char *colon = strrchr(address, ':');
    const char *host = address;
    size_t host_length = colon != NULL ? (size_t)(colon - address) : 0;
    if (host_length >= 2 && address[0] == '[' && address[host_length - 1] == ']') { /* [::1]:27017 */
        host++;
        host_length -= 2;
    }
    int port = colon != NULL ? atoi(colon + 1) : 0;
    if (host_length == 0 || host_length >= sizeof tier->host || port <= 0 || port > 65535) {
        return NULL;
    }
    backend_pool_t *pool = BSON_ALIGNED_ALLOC0(backend_pool_t);
    pool->loop = tier->loop;
    pool->role = BACKEND_ROLE_SECONDARY;
    snprintf(pool->expected_set_name, sizeof pool->expected_set_name, "%s", set_name);
    pool->name = bson_strdup(tier->name);
    snprintf(pool->host, sizeof pool->host, "%.*s", (int)host_length, host);
    pool->port = port;
    pool->credentials = tier->credentials;
    pool->tls_context = tier->tls_context;
    pool->max_connections = tier->max_connections;
    pool->in_flight_limit = pool->max_connections;
    pool->connect_timeout_ms = tier->connect_timeout_ms;
    pool->info.logical_session_timeout_minutes = -1;
    return pool;
}

void backend_pool_close_with_reason(backend_pool_t *pool, const char *reason)
{
    pool->closing = true; /* what the members' closing fails and sends again fails here at once */
    if (pool->members != NULL) {
        backend_members_close(pool->members);
    }
    fail_queue(pool, reason);
    for (backend_connection_t *connection = pool->connections; connection != NULL;) {
        backend_connection_t *next = connection->next;
        if (connection->request != NULL) {
            fail_request(pool, connection->request, TC_ERR_HOST_UNREACHABLE, reason);
            connection->request = NULL;
        }
        backend_connection_close(connection);
        connection = next;
    }
}

void backend_pool_close(backend_pool_t *pool)
{
    backend_pool_close_with_reason(pool, "the proxy is shutting down");
}

void backend_pool_clear(backend_pool_t *pool)
{
    pool->generation++;
    for (backend_connection_t *connection = pool->connections; connection != NULL; connection = connection->next) {
        if (connection->state == BACKEND_IDLE) {
            backend_connection_close(connection);
        }
    }
}

bool backend_pool_closed(const backend_pool_t *pool)
{
    return pool->connections == NULL && !pool->resolving &&
           (pool->members == NULL || backend_members_closed(pool->members));
}

void backend_pool_destroy(backend_pool_t *pool)
{
    if (pool == NULL) {
        return;
    }
    backend_members_destroy(pool->members);
    if (pool->role == BACKEND_ROLE_PRIMARY) {
        backend_credentials_destroy(pool->credentials);
        tls_context_destroy(pool->tls_context);
    }
    bson_destroy(pool->hello);
    bson_free(pool->name);
    bson_free(pool->tls_read_buffer);
    bson_free(pool);
}

const backend_server_info_t *backend_pool_server_info(const backend_pool_t *pool)
{
    return &pool->info;
}

const bson_t *backend_pool_hello(const backend_pool_t *pool)
{
    return pool->hello;
}

const char *backend_pool_name(const backend_pool_t *pool)
{
    return pool->name;
}

int64_t backend_pool_round_trip_us(const backend_pool_t *pool)
{
    return pool->round_trip_us;
}

/* --- the tier's members (backend_members.c) -------------------------------------- */

void backend_pool_discover(backend_pool_t *pool, backend_discover_fn done, void *context)
{
    if (pool->role != BACKEND_ROLE_PRIMARY || pool->direct_connection || pool->closing) {
        done(context);
        return;
    }
    if (pool->members == NULL) {
        pool->members = backend_members_new(pool, pool->loop, pool->connect_timeout_ms);
    }
    backend_members_discover(pool->members, done, context);
}

bool backend_pool_select(backend_pool_t *pool, const read_preference_t *preference, uint64_t *out_member_id,
                         bson_error_t *error)
{
    *out_member_id = 0;
    if (pool->members != NULL && backend_members_known(pool->members)) {
        return backend_members_select(pool->members, preference, out_member_id, error);
    }
    /* Members not discovered: what the primary's handshake said, where only the
     * primary can be chosen (its staleness is 0 whenever its hello arrived). Not
     * reached yet: the send finds out. */
    if (pool->hello == NULL) {
        return true;
    }
    read_preference_topology_t topology;
    size_t index;
    read_preference_topology_from_hello(pool->hello, 0, &topology);
    bool ok = read_preference_select(&topology, preference, 0, &index, error);
    read_preference_topology_cleanup(&topology);
    return ok;
}

backend_pool_t *backend_pool_member(backend_pool_t *pool, uint64_t member_id)
{
    if (member_id == 0) {
        return pool;
    }
    return pool->members != NULL ? backend_members_pool(pool->members, member_id) : NULL;
}

uint64_t backend_pool_member_applied_time(backend_pool_t *pool, uint64_t member_id)
{
    return pool->members != NULL ? backend_members_applied_time(pool->members, member_id) : 0;
}

void backend_pool_member_failed(backend_pool_t *pool, uint64_t member_id, const char *reason)
{
    if (pool->members != NULL) {
        backend_members_mark_failed(pool->members, member_id, reason);
    }
}

void backend_pool_append_members(const backend_pool_t *pool, bson_t *out)
{
    if (pool->members != NULL) {
        backend_members_append_status(pool->members, out);
    }
}

void backend_pool_limit_in_flight(backend_pool_t *pool, int limit)
{
    pool->in_flight_limit = limit < 1 ? 1 : limit > pool->max_connections ? pool->max_connections : limit;
    backend_pool_pump(pool);
}

backend_pool_stats_t backend_pool_stats(const backend_pool_t *pool)
{
    backend_pool_stats_t stats = {.queued = pool->queued,
                                  .in_flight_limit = pool->in_flight_limit,
                                  .sent = pool->sent,
                                  .failed = pool->failed,
                                  .waited = pool->waited,
                                  .tls = pool->tls_context != NULL,
                                  .open = pool->connection_count,
                                  .busy = pool->busy,
                                  .last_error = pool->last_error[0] != '\0' ? pool->last_error : NULL};
    return stats;
}
