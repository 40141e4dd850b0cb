/* One client of the server: frames wire messages out of its read buffer, hands
 * them to the workers one at a time, and writes the replies back in order. Every
 * state change goes through connection_set_state(), which aborts on one that
 * cannot happen (pgbouncer's change_client_state):
 *
 *             full message            reply
 *   READING ───────────────▶ EXECUTING ─────────────────────▶ WRITING
 *      ▲                        │  ▲ │ delay_ms > 0              ▲   │
 *      │   no reply (data NULL) │  │ └──────────▶ HOLDING ───────┘   │ written
 *      │                        │  └─── run_again, ◀──┘              │
 *      │                        │       after delay_ms               │
 *      └────────────────────────┴────────────────────────────────────┘
 *
 *   any state ── EOF, error, close_after, shutdown, timeout ──▶ CLOSING, then
 *   freed once its handles are closed and no request of it is with a worker.
 *
 * In worker mode a worker writes a plain reply itself when the kernel takes it
 * whole, and the loop takes the request back only when it next needs the
 * connection (connection_take_back_request): no wake-up of the loop per request.
 *
 * Bytes reach the socket through a transport (transport.h: plain, or TLS found by
 * its first byte). One deadline timer guards the states a client controls
 * (pgbouncer's client_idle_timeout, nginx's client_body_timeout): READING with
 * nothing buffered (idle timeout, off by default), a message or TLS handshake
 * begun but not finished (receive timeout: it must complete, or make
 * SERVER_PROGRESS_BYTES of progress, in time), and WRITING (send timeout: the
 * client must take some of its reply in time). Replies the kernel could not take
 * at once count against a server-wide bound (max_queued_reply_bytes).
 */
#include "net/server_private.h"
#include "net/stream_write.h"
#include "net/transport.h"

#include "common/clock.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define LOG_COMPONENT "NETWORK"
#define MESSAGE_HEADER_BYTES 16
/* A buffer grown for a large message shrinks back to this size. */
#define READ_BUFFER_KEEP_BYTES (64 * 1024)

typedef enum connection_state {
    CONNECTION_READING,   /* waiting for a complete request */
    CONNECTION_EXECUTING, /* a request is with the workers */
    CONNECTION_HOLDING,   /* the reply waits on delay_timer */
    CONNECTION_WRITING,   /* the reply is being written */
    CONNECTION_CLOSING,   /* handles closing; see connection_free_if_unused() */
    CONNECTION_STATE_COUNT,
} connection_state_t;

static const char *const connection_state_names[CONNECTION_STATE_COUNT] = {
    "READING", "EXECUTING", "HOLDING", "WRITING", "CLOSING",
};

/* Worker mode: who finishes the request with the workers. The common case (a
 * plain reply the kernel takes at once) costs no wake-up of the loop: the worker
 * writes it and leaves the request for the loop to take back when it next needs
 * the connection (connection_take_back_request). */
typedef enum connection_handoff {
    HANDOFF_LOOP,             /* the worker queues the job for connection_complete_request() */
    HANDOFF_WORKER_MAY_WRITE, /* the worker may write the reply itself */
    HANDOFF_WORKER_WROTE,     /* it did, whole: the request is over but not yet taken back */
} connection_handoff_t;

/* Which limit deadline_timer enforces; follows from state and buffers. */
typedef enum connection_deadline {
    DEADLINE_NONE,
    DEADLINE_IDLE,    /* READING, nothing buffered */
    DEADLINE_RECEIVE, /* a partial message or a TLS handshake */
    DEADLINE_SEND,    /* WRITING */
} connection_deadline_t;

struct connection {
    server_t *server;
    connection_t *previous; /* the server's list of connections */
    connection_t *next;
    uint64_t id;
    char peer[INET6_ADDRSTRLEN + 16]; /* "[::1]:54321" */

    connection_state_t state;
    uv_tcp_t tcp;
    uv_timer_t delay_timer;
    uv_timer_t deadline_timer;
    uv_write_t write_request;
    int open_handles;        /* tcp and both timers until their close callbacks ran */
    bool reading;            /* uv_read_start is in effect */
    bool request_in_flight;  /* job is with the worker pool or the application: do not free */
    bool dispatching;        /* inside handle_on_loop or an inline answer: a completion must not re-enter input */

    /* Received bytes not yet handed to a worker are buffer[start, end). */
    uint8_t *buffer;
    size_t capacity;
    size_t start;
    size_t end;

    worker_job_t job;
    uint8_t *job_message; /* the allocation behind job.request.message */
    size_t job_message_capacity; /* its size when it was the input buffer, lent whole; else 0 */
    server_reply_t reply; /* held or being written; data freed by on_write or free */
    uint8_t *wire;        /* the reply as written (the same as reply.data, or TLS records) */
    size_t wire_sent;     /* bytes of wire a worker already wrote (plain only) */

    /* Worker mode. The lock orders a worker's write to the socket with the loop
     * taking the request back or closing the socket. */
    pthread_mutex_t handoff_lock;
    connection_handoff_t handoff; /* under handoff_lock while the job is with a worker */
    uv_os_fd_t socket_fd;
    size_t queued_reply_bytes; /* this reply's share of server->queued_reply_bytes */
    void *connection_data;     /* the application's (server_request_t.connection_data) */

    const transport_vtable_t *transport;
    void *transport_state;
    bool handshaking;

    connection_deadline_t deadline;
    uint64_t bytes_received;    /* progress counters the deadline compares */
    uint64_t messages_received;
    uint64_t mark_bytes_received;
    uint64_t mark_messages_received;
    size_t mark_unsent_bytes;
};

/* Bytes for the peer outside the reply cycle (TLS handshake), one write each. */
typedef struct connection_extra_write {
    uv_write_t request;
    uint8_t *data;
} connection_extra_write_t;

static void connection_process_input(connection_t *connection);
static void connection_update_deadline(connection_t *connection);
static bool connection_take_back_request(connection_t *connection);

static void connection_set_state(connection_t *connection, connection_state_t next)
{
    static const bool allowed[CONNECTION_STATE_COUNT][CONNECTION_STATE_COUNT] = {
        [CONNECTION_READING] = {[CONNECTION_EXECUTING] = true, [CONNECTION_CLOSING] = true},
        [CONNECTION_EXECUTING] = {[CONNECTION_READING] = true,
                                  [CONNECTION_HOLDING] = true,
                                  [CONNECTION_WRITING] = true,
                                  [CONNECTION_CLOSING] = true},
        [CONNECTION_HOLDING] = {[CONNECTION_WRITING] = true,
                                [CONNECTION_EXECUTING] = true,
                                [CONNECTION_CLOSING] = true},
        [CONNECTION_WRITING] = {[CONNECTION_READING] = true, [CONNECTION_CLOSING] = true},
    };
    if (!allowed[connection->state][next]) {
        tc_log_write(TC_LOG_ERROR, LOG_COMPONENT, connection->id,
                     "impossible connection state change %s -> %s",
                     connection_state_names[connection->state], connection_state_names[next]);
        abort();
    }
    connection->state = next;
    connection_update_deadline(connection);
}

static void connection_describe_peer(connection_t *connection)
{
    struct sockaddr_storage address;
    int length = sizeof address;
    char host[INET6_ADDRSTRLEN] = "";
    snprintf(connection->peer, sizeof connection->peer, "unknown");
    if (uv_tcp_getpeername(&connection->tcp, (struct sockaddr *)&address, &length) != 0) {
        return;
    }
    if (address.ss_family == AF_INET6) {
        const struct sockaddr_in6 *ipv6 = (const struct sockaddr_in6 *)&address;
        uv_ip6_name(ipv6, host, sizeof host);
        snprintf(connection->peer, sizeof connection->peer, "[%s]:%u", host,
                 (unsigned)ntohs(ipv6->sin6_port));
    } else if (address.ss_family == AF_INET) {
        const struct sockaddr_in *ipv4 = (const struct sockaddr_in *)&address;
        uv_ip4_name(ipv4, host, sizeof host);
        snprintf(connection->peer, sizeof connection->peer, "%s:%u", host,
                 (unsigned)ntohs(ipv4->sin_port));
    }
}

static void connection_free_if_unused(connection_t *connection)
{
    if (connection->open_handles > 0 || connection->request_in_flight) {
        return;
    }
    server_t *server = connection->server;
    if (connection->previous != NULL) {
        connection->previous->next = connection->next;
    } else {
        server->connections = connection->next;
    }
    if (connection->next != NULL) {
        connection->next->previous = connection->previous;
    }
    uint64_t now_open = atomic_fetch_sub(&server->current_connections, 1) - 1;
    if (connection->transport == &transport_tls) {
        atomic_fetch_sub(&server->tls_connections, 1);
    }
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "end connection {remote} ({connectionCount} now open)",
                 TC_ATTR_STR("remote", connection->peer), TC_ATTR_INT("connectionCount", now_open));

    if (connection->connection_data != NULL && server->callbacks.connection_close != NULL) {
        server->callbacks.connection_close(server->callbacks.application, connection->connection_data);
    }
    if (connection->transport != NULL && connection->transport->destroy != NULL) {
        connection->transport->destroy(connection->transport_state);
    }
    bson_free(connection->buffer);
    bson_free(connection->job_message);
    bson_free(connection->reply.data);
    bson_free(connection->wire);
    pthread_mutex_destroy(&connection->handoff_lock);
    bson_free(connection);
    server_on_connection_freed(server);
}

static void connection_on_handle_closed(uv_handle_t *handle)
{
    connection_t *connection = handle->data;
    connection->open_handles--;
    connection_free_if_unused(connection);
}

/* Starts closing; never frees here, so callers may keep using connection until
 * they return to the loop. */
static void connection_close(connection_t *connection)
{
    if (connection->state == CONNECTION_CLOSING) {
        return;
    }
    connection_take_back_request(connection); /* no worker writes to the socket closed below */
    connection_set_state(connection, CONNECTION_CLOSING);
    connection->reading = false;
    uv_close((uv_handle_t *)&connection->tcp, connection_on_handle_closed);
    uv_close((uv_handle_t *)&connection->delay_timer, connection_on_handle_closed);
    uv_close((uv_handle_t *)&connection->deadline_timer, connection_on_handle_closed);
}

static void connection_resume_reading(connection_t *connection);

/* Keeps an empty input buffer of the usual size for a later read, or frees it. */
static void connection_spare_buffer(server_t *server, uint8_t *buffer, size_t capacity)
{
    if (capacity == READ_BUFFER_KEEP_BYTES && server->spare_read_buffer_count < SERVER_SPARE_READ_BUFFERS) {
        server->spare_read_buffers[server->spare_read_buffer_count++] = buffer;
    } else {
        bson_free(buffer);
    }
}

/* The request is over: its message's memory goes back to the spares or is freed. */
static void connection_release_job_message(connection_t *connection)
{
    connection_spare_buffer(connection->server, connection->job_message, connection->job_message_capacity);
    connection->job_message = NULL;
    connection->job_message_capacity = 0;
}

/* A read brought nothing: an input buffer holding nothing goes back to the spares. */
static void connection_release_empty_input(connection_t *connection)
{
    if (connection->buffer != NULL && connection->end == connection->start) {
        connection_spare_buffer(connection->server, connection->buffer, connection->capacity);
        connection->buffer = NULL;
        connection->capacity = 0;
        connection->start = 0;
        connection->end = 0;
    }
}

/* The little-endian length that opens the next buffered message (at least 4
 * bytes are buffered). */
static uint32_t connection_announced_length(const connection_t *connection)
{
    const uint8_t *prefix = connection->buffer + connection->start;
    return (uint32_t)prefix[0] | (uint32_t)prefix[1] << 8 | (uint32_t)prefix[2] << 16 | (uint32_t)prefix[3] << 24;
}

uint8_t *connection_input_space(connection_t *connection, size_t minimum, size_t *out_available)
{
    size_t unconsumed = connection->end - connection->start;
    size_t goal = unconsumed + minimum;
    if (unconsumed >= 4) {
        /* Grow towards the announced size as its bytes arrive, doubling, so a
         * client that announces 48 MB and sends a byte a second holds little. An
         * invalid length is refused before the next read, so it never gets here. */
        uint32_t length = connection_announced_length(connection);
        size_t doubled = 2 * unconsumed;
        if (length <= connection->server->options.max_message_bytes && length > goal) {
            goal = length < doubled ? length : (doubled > goal ? doubled : goal);
        }
    }
    size_t wanted_capacity = goal > READ_BUFFER_KEEP_BYTES ? goal : READ_BUFFER_KEEP_BYTES;
    server_t *server = connection->server;
    if (connection->buffer == NULL && wanted_capacity == READ_BUFFER_KEEP_BYTES &&
        server->spare_read_buffer_count > 0) {
        connection->buffer = server->spare_read_buffers[--server->spare_read_buffer_count];
        connection->capacity = READ_BUFFER_KEEP_BYTES;
        connection->start = 0;
        connection->end = 0;
    }

    if (connection->capacity > wanted_capacity && wanted_capacity == READ_BUFFER_KEEP_BYTES) {
        /* A large message has gone: give its memory back. */
        uint8_t *smaller = bson_malloc(READ_BUFFER_KEEP_BYTES);
        memcpy(smaller, connection->buffer + connection->start, unconsumed);
        bson_free(connection->buffer);
        connection->buffer = smaller;
        connection->capacity = READ_BUFFER_KEEP_BYTES;
        connection->start = 0;
        connection->end = unconsumed;
    } else if (connection->capacity - connection->start < goal) {
        if (connection->start > 0) {
            memmove(connection->buffer, connection->buffer + connection->start, unconsumed);
            connection->start = 0;
            connection->end = unconsumed;
        }
        if (connection->capacity < goal) {
            /* Grow by half at least, so a stream of small reads is not quadratic. */
            size_t grown = connection->capacity + connection->capacity / 2;
            connection->capacity = grown > wanted_capacity ? grown : wanted_capacity;
            connection->buffer = bson_realloc(connection->buffer, connection->capacity);
        }
    }
    size_t available = connection->capacity - connection->end;
    *out_available = available < UINT_MAX ? available : UINT_MAX;
    return connection->buffer + connection->end;
}

void connection_input_added(connection_t *connection, size_t count)
{
    connection->end += count;
    connection->bytes_received += count;
}

static void connection_on_alloc(uv_handle_t *handle, size_t suggested_size, uv_buf_t *out_buffer)
{
    connection_t *connection = handle->data;
    connection->transport->read_buffer(connection, out_buffer);
}

static void connection_on_read(uv_stream_t *stream, ssize_t read_count, const uv_buf_t *buffer)
{
    connection_t *connection = stream->data;
    if (read_count <= 0) {
        connection_release_empty_input(connection);
    }
    if (read_count == UV_EOF) {
        connection_close(connection);
        return;
    }
    if (read_count < 0) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "error reading from {remote}: {error}",
                     TC_ATTR_STR("remote", connection->peer), TC_ATTR_STR("error", uv_strerror((int)read_count)));
        connection_close(connection);
        return;
    }
    if (read_count == 0) {
        return; /* EAGAIN: nothing read */
    }
    if (!connection->transport->received(connection, (uint8_t *)buffer->base, (size_t)read_count)) {
        connection_close(connection);
        return;
    }
    connection_process_input(connection);
    connection_update_deadline(connection);
}

static void connection_resume_reading(connection_t *connection)
{
    if (connection->reading || connection->state == CONNECTION_CLOSING) {
        return;
    }
    int result = uv_read_start((uv_stream_t *)&connection->tcp, connection_on_alloc,
                               connection_on_read);
    if (result != 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection->id, "cannot read from {remote}: {error}",
                     TC_ATTR_STR("remote", connection->peer), TC_ATTR_STR("error", uv_strerror(result)));
        connection_close(connection);
        return;
    }
    connection->reading = true;
}

static void connection_pause_reading(connection_t *connection)
{
    if (connection->reading) {
        uv_read_stop((uv_stream_t *)&connection->tcp);
        connection->reading = false;
    }
}

static void connection_submit(connection_t *connection);

static void connection_dispatch(connection_t *connection, size_t length)
{
    if (connection->end - connection->start == length) {
        /* The buffer holds exactly this message: lend it whole instead of copying. */
        connection->job_message = connection->buffer;
        connection->job_message_capacity = connection->capacity;
        connection->job.request.message = connection->buffer + connection->start;
        connection->buffer = NULL;
        connection->capacity = 0;
        connection->start = 0;
        connection->end = 0;
    } else {
        connection->job_message = bson_malloc(length);
        connection->job_message_capacity = 0;
        memcpy(connection->job_message, connection->buffer + connection->start, length);
        connection->job.request.message = connection->job_message;
        connection->start += length;
    }
    connection->job.owner = connection;
    connection->job.request.length = length;
    connection->job.request.connection_id = connection->id;
    connection->job.request.peer_address = connection->peer;
    connection->job.request.connection_data = &connection->connection_data;
    connection->job.request.tls = connection->transport == &transport_tls;
    connection->messages_received++;
    atomic_fetch_add_explicit(&connection->server->requests_received, 1, memory_order_relaxed);
    connection_set_state(connection, CONNECTION_EXECUTING);
    connection_submit(connection);
}

/* Whether a whole next message is buffered. */
static bool connection_has_whole_message(const connection_t *connection)
{
    size_t buffered = connection->end - connection->start;
    return buffered >= 4 && buffered >= connection_announced_length(connection);
}

/* Worker mode: the application answers the request on the loop now
 * (handle_inline), and the request completes here with no worker; false when it
 * leaves the request to a worker. Only when the workers are idle (a request
 * submitted now would wake one: the costly case) and once per turn of the loop:
 * under load the workers take requests without a wake-up and run them on every
 * core, and the loop must not become one serial worker. */
static bool connection_run_inline(connection_t *connection)
{
    server_t *server = connection->server;
    worker_job_t *job = &connection->job;
    if (server->inline_ran_this_turn || !worker_pool_is_idle(server->workers)) {
        return false;
    }
    memset(&job->reply, 0, sizeof job->reply);
    job->request.submitted_us = clock_monotonic_us();
    if (!server->callbacks.handle_inline(server->callbacks.application, server->inline_state, &job->request,
                                         &job->reply)) {
        return false;
    }
    BSON_ASSERT(!job->reply.held);
    server->inline_ran_this_turn = true;
    connection->dispatching = true;
    connection_complete_request(job);
    connection->dispatching = false;
    return true;
}

/* Hands the job's request to the application: the loop callback, or the loop
 * first (handle_inline) and else a worker. */
static void connection_submit(connection_t *connection)
{
    connection->request_in_flight = true;
    server_callbacks_t *callbacks = &connection->server->callbacks;
    if (callbacks->handle_on_loop != NULL) {
        connection->dispatching = true;
        callbacks->handle_on_loop(callbacks->application, (server_pending_t *)&connection->job,
                                  &connection->job.request);
        connection->dispatching = false;
        return;
    }
    if (callbacks->handle_inline != NULL && connection_run_inline(connection)) {
        return;
    }
    /* No lock: the job is with no worker yet, and the pool's queue orders this
     * write before the worker's read. The loop must see the request end when it
     * has a next message to dispatch (reading stays paused until then), and with
     * an idle timeout, which starts then. */
    uint32_t idle_timeout_ms = connection->server->options.idle_timeout_ms;
    bool may_write = connection->transport == &transport_plain &&
                     (idle_timeout_ms == 0 || idle_timeout_ms == SERVER_NO_TIMEOUT) &&
                     !connection_has_whole_message(connection);
    connection->handoff = may_write ? HANDOFF_WORKER_MAY_WRITE : HANDOFF_LOOP;
    worker_pool_submit(connection->server->workers, &connection->job);
}

/* Worker mode, loop thread: a request whose reply a worker wrote whole is taken
 * back (the connection returns to READING: true); otherwise the worker is told to
 * leave the reply to the loop, which then needs its completion (false). Called
 * before the loop needs the request over: a next message is waiting, or the
 * socket closes. */
static bool connection_take_back_request(connection_t *connection)
{
    if (connection->state != CONNECTION_EXECUTING || !connection->request_in_flight ||
        connection->server->callbacks.handle_on_loop != NULL) {
        return false;
    }
    pthread_mutex_lock(&connection->handoff_lock);
    bool wrote = connection->handoff == HANDOFF_WORKER_WROTE;
    connection->handoff = HANDOFF_LOOP;
    pthread_mutex_unlock(&connection->handoff_lock);
    if (!wrote) {
        return false;
    }
    memset(&connection->job.reply, 0, sizeof connection->job.reply);
    memset(&connection->job.request, 0, sizeof connection->job.request);
    connection_release_job_message(connection);
    connection->request_in_flight = false;
    connection_set_state(connection, CONNECTION_READING);
    return true;
}

bool connection_finish_on_worker(worker_job_t *job)
{
    connection_t *connection = job->owner;
    server_reply_t *reply = &job->reply;
    if (reply->run_again || reply->close_after || reply->delay_ms > 0 || reply->length > SSIZE_MAX) {
        return false;
    }
    bool finished = false;
    pthread_mutex_lock(&connection->handoff_lock);
    if (connection->handoff == HANDOFF_WORKER_MAY_WRITE) {
        /* Plain, and the previous reply is written: the socket's write queue is
         * empty, so writing here keeps the order. */
        size_t length = reply->data != NULL ? reply->length : 0;
        ssize_t written = 0;
        if (length > 0) {
            do {
                written = send(connection->socket_fd, reply->data, length, MSG_DONTWAIT | MSG_NOSIGNAL);
            } while (written < 0 && errno == EINTR);
        }
        if (written == (ssize_t)length) {
            bson_free(reply->data);
            reply->data = NULL;
            connection->handoff = HANDOFF_WORKER_WROTE;
            finished = true;
        } else if (written >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
            /* The loop writes the rest and keeps the limits (send timeout, queued bytes). */
            connection->wire_sent = written > 0 ? (size_t)written : 0;
            connection->handoff = HANDOFF_LOOP;
        } else {
            /* The kernel reports a reset once: a second write would raise SIGPIPE.
             * Nothing reaches this client any more, so the loop just closes. */
            TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "error writing to {remote}: {error}",
                         TC_ATTR_STR("remote", connection->peer),
                         TC_ATTR_STR("error", uv_strerror(uv_translate_sys_error(errno))));
            bson_free(reply->data);
            reply->data = NULL;
            reply->length = 0;
            reply->close_after = true;
            connection->handoff = HANDOFF_LOOP;
        }
    }
    pthread_mutex_unlock(&connection->handoff_lock);
    return finished; /* when true the loop may free connection at any time now */
}

/* Runs after every change of what is buffered or of state: dispatches the next
 * message when idle, and reads only until one message beyond the running request
 * is buffered, so a client that floods requests holds at most two in memory. */
static void connection_process_input(connection_t *connection)
{
    while (connection->state != CONNECTION_CLOSING) {
        size_t buffered = connection->end - connection->start;
        if (buffered < 4) {
            connection_resume_reading(connection);
            return;
        }
        int32_t length = (int32_t)connection_announced_length(connection);
        size_t max = connection->server->options.max_message_bytes;
        if (length < MESSAGE_HEADER_BYTES || (size_t)length > max) {
            TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection->id,
                         "recv(): message msgLen {msgLen} is invalid. Min {min} Max: {max}; closing connection from "
                         "{remote}",
                         TC_ATTR_INT("msgLen", (int32_t)length), TC_ATTR_INT("min", MESSAGE_HEADER_BYTES),
                         TC_ATTR_INT("max", max), TC_ATTR_STR("remote", connection->peer));
            connection_close(connection);
            return;
        }
        if (buffered < (size_t)length) {
            connection_resume_reading(connection);
            return;
        }
        if (connection->state != CONNECTION_READING && !connection_take_back_request(connection)) {
            connection_pause_reading(connection);
            return;
        }
        connection_dispatch(connection, (size_t)length);
    }
}

/* The reply is written (status 0) or could not be: back to reading, or closed. */
static void connection_finish_write(connection_t *connection, int status)
{
    bool close_after = connection->reply.close_after;
    atomic_fetch_sub(&connection->server->queued_reply_bytes, connection->queued_reply_bytes);
    connection->queued_reply_bytes = 0;
    bson_free(connection->wire);
    connection->wire = NULL;
    connection->wire_sent = 0;
    memset(&connection->reply, 0, sizeof connection->reply); /* its data was handed to the transport */
    if (connection->state == CONNECTION_CLOSING) {
        return; /* cancelled by the close; the close callbacks free the connection */
    }
    if (status < 0) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "error writing to {remote}: {error}",
                     TC_ATTR_STR("remote", connection->peer), TC_ATTR_STR("error", uv_strerror(status)));
        connection_close(connection);
        return;
    }
    if (close_after) {
        connection_close(connection);
        return;
    }
    connection_set_state(connection, CONNECTION_READING);
    if (!connection->dispatching) { /* else the dispatching loop goes on by itself */
        connection_process_input(connection);
    }
}

static void connection_on_write(uv_write_t *request, int status)
{
    connection_finish_write(request->data, status);
}

static uv_write_t *connection_write_request(void *context)
{
    connection_t *connection = context;
    return &connection->write_request;
}

static void connection_write_reply(connection_t *connection)
{
    connection_set_state(connection, CONNECTION_WRITING);
    uint8_t *wire = NULL;
    size_t wire_length = 0;
    uint8_t *data = connection->reply.data;
    connection->reply.data = NULL; /* the transport owns it now */
    if (!connection->transport->wrap_reply(connection, data, connection->reply.length, &wire, &wire_length)) {
        connection_close(connection);
        return;
    }
    connection->wire = wire;
    if (wire_length > UINT_MAX) {
        TC_LOG_ATTRS(TC_LOG_ERROR, LOG_COMPONENT, connection->id,
                     "reply of {bytes} bytes is too large to send; closing connection",
                     TC_ATTR_INT("bytes", wire_length));
        connection_close(connection);
        return;
    }
    /* A worker may have written the start already (plain replies only). */
    int error = 0;
    switch (stream_write((uv_stream_t *)&connection->tcp, wire + connection->wire_sent,
                         wire_length - connection->wire_sent, connection_write_request, connection,
                         connection_on_write, &error)) {
    case STREAM_WRITE_DONE:
        connection_finish_write(connection, 0);
        return;
    case STREAM_WRITE_FAILED:
        connection_finish_write(connection, error);
        return;
    case STREAM_WRITE_QUEUED:
        break;
    }
    /* libuv wrote what the kernel took; whatever is left waits on this client and
     * keeps the whole reply allocated until it is written. */
    size_t unsent = uv_stream_get_write_queue_size((uv_stream_t *)&connection->tcp);
    if (unsent > 0) {
        server_t *server = connection->server;
        uint64_t queued = atomic_fetch_add(&server->queued_reply_bytes, wire_length) + wire_length;
        connection->queued_reply_bytes = wire_length;
        if (queued > server->options.max_queued_reply_bytes) {
            TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection->id,
                         "closing connection to {remote}: replies waiting for slow clients would take {queuedBytes} "
                         "bytes, more than the {maxQueuedBytes} allowed",
                         TC_ATTR_STR("remote", connection->peer), TC_ATTR_INT("queuedBytes", queued),
                         TC_ATTR_INT("maxQueuedBytes", server->options.max_queued_reply_bytes));
            connection_close(connection);
            return;
        }
    }
    connection->mark_unsent_bytes = unsent;
}

static void connection_on_delay_over(uv_timer_t *timer)
{
    connection_write_reply(timer->data);
}

/* A run_again reply's delay is over: the same request runs again. */
static void connection_on_rerun_due(uv_timer_t *timer)
{
    connection_t *connection = timer->data;
    connection_set_state(connection, CONNECTION_EXECUTING);
    connection_submit(connection);
    if (connection->state == CONNECTION_READING) {
        connection_process_input(connection); /* answered at once in loop mode */
    }
}

void connection_complete_request(worker_job_t *job)
{
    connection_t *connection = job->owner;
    if (job->reply.run_again && connection->state != CONNECTION_CLOSING) {
        /* Keep the request (and its message) for the next run. */
        uint32_t delay_ms = job->reply.delay_ms;
        bson_free(job->reply.data);
        memset(&job->reply, 0, sizeof job->reply);
        job->request.attempt++;
        connection->request_in_flight = false;
        connection_set_state(connection, CONNECTION_HOLDING);
        uv_timer_start(&connection->delay_timer, connection_on_rerun_due, delay_ms, 0);
        return;
    }
    server_reply_t reply = job->reply;
    memset(&job->reply, 0, sizeof job->reply);
    memset(&job->request, 0, sizeof job->request);
    connection_release_job_message(connection);
    connection->request_in_flight = false;

    if (connection->state == CONNECTION_CLOSING) {
        bson_free(reply.data); /* the client is gone or the server is stopping */
        connection_free_if_unused(connection);
        return;
    }
    if (reply.data == NULL || reply.length == 0) {
        bson_free(reply.data);
        if (reply.close_after) {
            connection_close(connection);
            return;
        }
        connection_set_state(connection, CONNECTION_READING);
        if (!connection->dispatching) { /* else the dispatching loop goes on by itself */
            connection_process_input(connection);
        }
        return;
    }
    connection->reply = reply;
    if (reply.delay_ms > 0) {
        connection_set_state(connection, CONNECTION_HOLDING);
        uv_timer_start(&connection->delay_timer, connection_on_delay_over, reply.delay_ms, 0);
        return;
    }
    connection_write_reply(connection);
}

server_held_reply_t *server_hold_reply(server_reply_t *reply)
{
    BSON_ASSERT(!reply->run_again);
    worker_job_t *job = (worker_job_t *)((char *)reply - offsetof(worker_job_t, reply));
    worker_pool_hold(job);
    return (server_held_reply_t *)job;
}

void server_release_reply(server_held_reply_t *held, bool deliver)
{
    worker_job_t *job = (worker_job_t *)held;
    connection_t *connection = job->owner;
    if (!deliver) {
        bson_free(job->reply.data);
        job->reply.data = NULL;
        job->reply.length = 0;
        job->reply.close_after = true;
    }
    worker_pool_release_held(connection->server->workers, job);
}

void server_complete(server_pending_t *pending, const server_reply_t *reply)
{
    worker_job_t *job = (worker_job_t *)pending;
    job->reply = *reply;
    connection_complete_request(job);
}

void connection_accept(server_t *server)
{
    connection_t *connection = BSON_ALIGNED_ALLOC0(connection_t);
    int result = uv_tcp_init(&server->loop, &connection->tcp);
    if (result != 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot accept a connection: {error}",
                     TC_ATTR_STR("error", uv_strerror(result)));
        bson_free(connection);
        return;
    }
    uv_timer_init(&server->loop, &connection->delay_timer);
    uv_timer_init(&server->loop, &connection->deadline_timer);
    pthread_mutex_init(&connection->handoff_lock, NULL);
    connection->socket_fd = -1;
    connection->server = server;
    connection->state = CONNECTION_READING;
    connection->transport = server->options.tls_mode == TLS_MODE_DISABLED ? &transport_plain : &transport_detect;
    snprintf(connection->peer, sizeof connection->peer, "unknown");
    connection->tcp.data = connection;
    connection->delay_timer.data = connection;
    connection->deadline_timer.data = connection;
    connection->write_request.data = connection;
    connection->open_handles = 3;
    connection->id = ++server->last_connection_id;
    connection->next = server->connections;
    if (server->connections != NULL) {
        server->connections->previous = connection;
    }
    server->connections = connection;
    uint64_t now_open = atomic_fetch_add(&server->current_connections, 1) + 1;
    atomic_fetch_add(&server->total_created, 1);

    result = uv_accept((uv_stream_t *)&server->listener, (uv_stream_t *)&connection->tcp);
    if (result != 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection->id, "cannot accept a connection: {error}",
                     TC_ATTR_STR("error", uv_strerror(result)));
        connection_close(connection);
        return;
    }
    /* Replies are whole messages written at once: Nagle would only delay them. */
    uv_tcp_nodelay(&connection->tcp, 1);
    uv_fileno((uv_handle_t *)&connection->tcp, &connection->socket_fd);
    connection_describe_peer(connection);
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id,
                 "connection accepted from {remote} #{connectionId} ({connectionCount} now open)",
                 TC_ATTR_STR("remote", connection->peer), TC_ATTR_INT("connectionId", connection->id),
                 TC_ATTR_INT("connectionCount", now_open));
    connection_resume_reading(connection);
    connection_update_deadline(connection);
}

void connection_close_all(server_t *server)
{
    /* connection_close() never frees, so the list stays intact while we walk it. */
    for (connection_t *connection = server->connections; connection != NULL;
         connection = connection->next) {
        connection_close(connection);
    }
}

/* --- limits --------------------------------------------------------------------- */

static connection_deadline_t connection_current_deadline(const connection_t *connection)
{
    switch (connection->state) {
    case CONNECTION_WRITING:
        return DEADLINE_SEND;
    case CONNECTION_READING:
        return connection->end > connection->start || connection->handshaking ? DEADLINE_RECEIVE
                                                                              : DEADLINE_IDLE;
    case CONNECTION_EXECUTING:
    case CONNECTION_HOLDING:
        /* The server is working; only a next message the client began is its doing. */
        return connection->end > connection->start ? DEADLINE_RECEIVE : DEADLINE_NONE;
    default:
        return DEADLINE_NONE;
    }
}

static void connection_timed_out(connection_t *connection, const char *what)
{
    atomic_fetch_add(&connection->server->timed_out_connections, 1);
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "closing connection from {remote}: {reason}",
                 TC_ATTR_STR("remote", connection->peer), TC_ATTR_STR("reason", what));
    connection_close(connection);
}

static void connection_on_deadline(uv_timer_t *timer);

/* Starts the period of the current deadline from here, remembering the progress
 * made so far; a deadline whose timeout is off stops the timer. */
static void connection_arm_deadline(connection_t *connection)
{
    const server_options_t *options = &connection->server->options;
    connection_deadline_t deadline = connection->deadline;
    uint32_t timeout_ms = deadline == DEADLINE_IDLE      ? options->idle_timeout_ms
                          : deadline == DEADLINE_RECEIVE ? options->receive_timeout_ms
                          : deadline == DEADLINE_SEND    ? options->send_timeout_ms
                                                         : 0;
    if (timeout_ms == 0 || timeout_ms == SERVER_NO_TIMEOUT) {
        uv_timer_stop(&connection->deadline_timer);
        return;
    }
    connection->mark_bytes_received = connection->bytes_received;
    connection->mark_messages_received = connection->messages_received;
    connection->mark_unsent_bytes = uv_stream_get_write_queue_size((uv_stream_t *)&connection->tcp);
    uv_timer_start(&connection->deadline_timer, connection_on_deadline, timeout_ms, 0);
}

static void connection_on_deadline(uv_timer_t *timer)
{
    connection_t *connection = timer->data;
    const server_options_t *options = &connection->server->options;
    char what[160];
    switch (connection->deadline) {
    case DEADLINE_IDLE:
        snprintf(what, sizeof what, "idle for %u ms (idle timeout)", (unsigned)options->idle_timeout_ms);
        connection_timed_out(connection, what);
        return;
    case DEADLINE_RECEIVE:
        if (connection->messages_received > connection->mark_messages_received ||
            connection->bytes_received - connection->mark_bytes_received >= SERVER_PROGRESS_BYTES) {
            break; /* slow but moving: another period */
        }
        snprintf(what, sizeof what, "%s not completed within %u ms (receive timeout; %llu bytes came)",
                 connection->handshaking ? "TLS handshake" : "message", (unsigned)options->receive_timeout_ms,
                 (unsigned long long)(connection->bytes_received - connection->mark_bytes_received));
        connection_timed_out(connection, what);
        return;
    case DEADLINE_SEND: {
        size_t unsent = uv_stream_get_write_queue_size((uv_stream_t *)&connection->tcp);
        if (unsent < connection->mark_unsent_bytes) {
            break;
        }
        snprintf(what, sizeof what, "it read none of its reply in %u ms (send timeout; %zu bytes unsent)",
                 (unsigned)options->send_timeout_ms, unsent);
        connection_timed_out(connection, what);
        return;
    }
    case DEADLINE_NONE:
        return;
    }
    connection_arm_deadline(connection);
}

/* Re-arms deadline_timer when the limit that applies changed; called after every
 * state change and read. A limit keeps running while it still applies. */
static void connection_update_deadline(connection_t *connection)
{
    connection_deadline_t deadline = connection_current_deadline(connection);
    if (deadline == connection->deadline) {
        return;
    }
    connection->deadline = deadline;
    if (connection->state == CONNECTION_CLOSING) {
        return; /* the timer is being closed */
    }
    connection_arm_deadline(connection);
}

/* --- for the transports ------------------------------------------------------------ */

static void connection_on_extra_write(uv_write_t *request, int status)
{
    connection_extra_write_t *write = (connection_extra_write_t *)request;
    connection_t *connection = request->data;
    bson_free(write->data);
    bson_free(write);
    if (status < 0 && connection->state != CONNECTION_CLOSING) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "error writing to {remote}: {error}",
                     TC_ATTR_STR("remote", connection->peer), TC_ATTR_STR("error", uv_strerror(status)));
        connection_close(connection);
    }
}

void connection_send_bytes(connection_t *connection, uint8_t *data, size_t length)
{
    if (connection->state == CONNECTION_CLOSING || length == 0 || length > UINT_MAX) {
        bson_free(data);
        return;
    }
    connection_extra_write_t *write = bson_malloc0(sizeof *write);
    write->data = data;
    write->request.data = connection;
    uv_buf_t buffer = uv_buf_init((char *)data, (unsigned int)length);
    int result = uv_write(&write->request, (uv_stream_t *)&connection->tcp, &buffer, 1, connection_on_extra_write);
    if (result != 0) {
        bson_free(data);
        bson_free(write);
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection->id, "error writing to {remote}: {error}",
                     TC_ATTR_STR("remote", connection->peer), TC_ATTR_STR("error", uv_strerror(result)));
        connection_close(connection);
    }
}

void connection_set_transport(connection_t *connection, const transport_vtable_t *transport, void *state)
{
    if (connection->transport->destroy != NULL && connection->transport_state != state) {
        connection->transport->destroy(connection->transport_state);
    }
    connection->transport = transport;
    connection->transport_state = state;
    if (transport == &transport_tls) {
        atomic_fetch_add(&connection->server->tls_connections, 1);
    }
}

void *connection_transport_state(connection_t *connection)
{
    return connection->transport_state;
}

void connection_set_handshaking(connection_t *connection, bool handshaking)
{
    connection->handshaking = handshaking;
    connection_update_deadline(connection);
}

bool connection_is_handshaking(connection_t *connection)
{
    return connection->handshaking;
}

server_t *connection_server(connection_t *connection)
{
    return connection->server;
}

uint64_t connection_id(connection_t *connection)
{
    return connection->id;
}

const char *connection_peer(connection_t *connection)
{
    return connection->peer;
}
