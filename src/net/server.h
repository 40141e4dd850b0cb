/* The network front end of `thermocline store`: one libuv loop thread accepts
 * connections and frames wire messages; each complete message runs on a small
 * pool of worker threads (storage calls may block), unless the application
 * answers it on the loop at once (handle_inline), and its reply is written back
 * in order. Idle connections cost no CPU. */
#ifndef TC_NET_SERVER_H
#define TC_NET_SERVER_H

#include "common/error.h"
#include "security/tls.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct server server_t;

/* One complete wire message as received; valid only during the handle call. */
typedef struct server_request {
    const uint8_t *message; /* header included; length >= 16 */
    size_t length;
    uint64_t connection_id;    /* unique for the server's lifetime, starts at 1 */
    const char *peer_address;  /* "127.0.0.1:54321" */
    uint32_t attempt;          /* 0; n when this request runs again after n run_again replies */
    /* The application's state for this connection: NULL at first; the handler may
     * set *connection_data and gets it back in every later request of the
     * connection (one at a time, so no lock is needed). The server hands it to
     * callbacks.connection_close once the connection is gone. */
    void **connection_data;
    bool tls;                  /* the connection speaks TLS */
    int64_t submitted_us;      /* worker mode: when it was queued for a worker (clock_monotonic_us);
                                * until a worker takes it, it waits for one */
} server_request_t;

/* What the handler answers. The server owns data after the call (bson_free). */
typedef struct server_reply {
    uint8_t *data;     /* allocated with bson_malloc; NULL: send nothing */
    size_t length;
    uint32_t delay_ms; /* hold the reply this long before sending (awaitable hello) */
    bool close_after;  /* close the connection once the reply is written */
    /* Send nothing yet: run the same request again (attempt + 1) once delay_ms
     * has passed, so a handler waiting for data (an awaitData getMore) polls
     * without holding a worker. data must be NULL. */
    bool run_again;
    bool held;         /* the server's: set by server_hold_reply() */
} server_reply_t;

/* A reply held back until the application releases it (server_hold_reply). */
typedef struct server_held_reply server_held_reply_t;

/* One request in flight in loop mode (below); answered with server_complete(). */
typedef struct server_pending server_pending_t;

typedef struct server_callbacks {
    void *application;
    /* Runs once on each worker thread before it serves; returns its state. */
    void *(*worker_start)(void *application, int worker_index);
    /* Runs once on each worker thread at shutdown. May be NULL. */
    void (*worker_stop)(void *application, void *worker_state);
    /* Runs on a worker thread. Requests of one connection are handled one at a
     * time, in arrival order. */
    void (*handle)(void *application, void *worker_state, const server_request_t *request,
                   server_reply_t *reply);
    /* Worker mode, may be NULL: runs on the loop thread before a request goes to
     * a worker, with the state worker_start made for the loop (worker_index
     * worker_count). It answers a request it can serve without waiting into reply
     * and returns true, or returns false and a worker runs the request. For work
     * cheaper than a worker's wake-up and sleep (the store's point reads). reply
     * must not be held (server_hold_reply). */
    bool (*handle_inline)(void *application, void *loop_state, const server_request_t *request,
                          server_reply_t *reply);
    /* Loop mode, for applications that never block (the proxy): set this instead
     * of handle, and each request is given to it on the loop thread; request stays
     * valid until the application answers with server_complete(), on the loop
     * thread, now or later. worker_count may then be 0. */
    void (*handle_on_loop)(void *application, server_pending_t *pending, const server_request_t *request);
    /* Loop mode: called on the loop thread when the server starts shutting down,
     * so the application closes the libuv handles it opened on server_loop(). */
    void (*loop_stopping)(void *application);
    /* On the loop thread, once a connection whose connection_data was set is gone
     * and none of its requests is in flight: frees that state. May be NULL when
     * the handler never sets connection_data. */
    void (*connection_close)(void *application, void *connection_data);
} server_callbacks_t;

typedef struct server_options {
    const char *bind_address;  /* "127.0.0.1" */
    int port;
    int max_connections;       /* past it a new connection is closed at once, logged */
    int worker_count;          /* worker threads */
    size_t max_message_bytes;  /* 48,000,000 as mongod; a larger length prefix closes */

    /* TLS: with a mode other than TLS_MODE_DISABLED, tls_context (made by the
     * application, which keeps owning it and frees it after server_destroy) serves
     * the connections that start with a TLS handshake. */
    tls_mode_t tls_mode;
    tls_context_t *tls_context;

    /* Limits against clients that hold resources without using them; a reply is
     * written, and the next request read, only after the previous one, so each
     * connection holds at most one request running, one buffered and one reply.
     * Timeouts in milliseconds: 0 takes the default, SERVER_NO_TIMEOUT turns off. */
    uint32_t idle_timeout_ms;     /* no byte at all while no request runs: close. Default off, as mongod */
    uint32_t receive_timeout_ms;  /* a message (or TLS handshake) begun but not finished, with less than
                                   * SERVER_PROGRESS_BYTES more arriving in this long: close
                                   * (slowloris). Default 30 s */
    uint32_t send_timeout_ms;     /* a reply of which the client took nothing in this long: close (a
                                   * client that never reads). Default 30 s */
    size_t max_queued_reply_bytes; /* server-wide: replies the kernel could not take at once, held for
                                    * slow readers; a reply past it closes its connection. Default 256 MB */
} server_options_t;

#define SERVER_NO_TIMEOUT UINT32_MAX
#define SERVER_PROGRESS_BYTES (1024 * 1024)

typedef struct server_connection_stats {
    uint64_t current;
    uint64_t available;
    uint64_t total_created;
    uint64_t requests;             /* complete messages received (mongod's network.numRequests) */
    uint64_t tls;                  /* open connections speaking TLS */
    uint64_t timed_out;            /* closed by the idle, receive or send timeout */
    uint64_t queued_reply_bytes;   /* replies waiting for slow readers right now */
} server_connection_stats_t;

/* Binds and listens. Returns NULL and fills error (e.g. address in use). */
server_t *server_new(const server_options_t *options, const server_callbacks_t *callbacks,
                     bson_error_t *error) TC_MUST_CHECK;

/* Serves until server_stop() or SIGINT/SIGTERM; then closes every connection,
 * drains the workers and returns. */
bool server_run(server_t *server, bson_error_t *error) TC_MUST_CHECK;

/* Worker mode, inside handle, once it has filled reply: the reply is not sent
 * when handle returns but once server_release_reply() is called, from any
 * thread, and the worker serves other requests meanwhile; the connection's next
 * request waits, as its replies go out in order. For a reply that waits for
 * something slow that many share (a durable write's journal sync) without
 * holding a thread. Not with run_again. */
server_held_reply_t *server_hold_reply(server_reply_t *reply);

/* Any thread, once per held reply: sends it (deliver), or drops it and closes
 * the connection (the client then knows nothing was acknowledged). */
void server_release_reply(server_held_reply_t *held, bool deliver);

/* Loop mode, loop thread only: answers pending's request. The server owns
 * reply->data afterwards. pending must not be used again. */
void server_complete(server_pending_t *pending, const server_reply_t *reply);

/* The server's event loop, for the application's own handles (loop mode). Valid
 * from server_new() until server_run() returns. */
struct uv_loop_s *server_loop(server_t *server);

/* Thread-safe: asks server_run() to return. */
void server_stop(server_t *server);

/* The port the listener is bound to: options.port, or the one the system chose
 * when options.port is 0 (tests bind to port 0). Thread-safe. */
int server_port(server_t *server);

/* Thread-safe snapshot for serverStatus. */
server_connection_stats_t server_connection_stats(server_t *server);

/* What may change while a loop-mode server runs (the proxy's live reload): the
 * connection limit, the timeouts and the TLS mode and context. Loop thread only,
 * and only without worker threads (they read the options unlocked). Connections
 * open already keep their transport and the deadline they are running; every
 * later accept, deadline and handshake uses the new values. A TLS session holds
 * its own reference on its OpenSSL context, so the caller may free the previous
 * tls_context once this returns. */
typedef struct server_limits {
    int max_connections;
    uint32_t idle_timeout_ms;    /* 0: off here (SERVER_NO_TIMEOUT), unlike server_options_t */
    uint32_t receive_timeout_ms;
    uint32_t send_timeout_ms;
    tls_mode_t tls_mode;
    tls_context_t *tls_context;  /* required unless tls_mode is TLS_MODE_DISABLED */
} server_limits_t;

bool server_update_limits(server_t *server, const server_limits_t *limits, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void server_destroy(server_t *server);

/* text, an IPv4 or IPv6 address literal, and port as a socket address; BadValue
 * otherwise. The metrics listener (src/metrics) binds the same way. */
bool server_parse_address(const char *text, int port, struct sockaddr_storage *out_address,
                          bson_error_t *error) TC_MUST_CHECK;

#endif
