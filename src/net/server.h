/* The network front end of `thermocline store`: one libuv loop thread accepts
 * connections and frames wire messages; each complete message runs on a small
 * pool of worker threads (never on the loop: storage calls may block), and its
 * reply is written back in order. Idle connections cost no CPU. */
#ifndef TC_NET_SERVER_H
#define TC_NET_SERVER_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct server server_t;

/* One complete wire message as received; valid only during the handle call. */
typedef struct server_request {
    const uint8_t *message; /* header included; length >= 16 */
    size_t length;
    uint64_t connection_id;    /* unique for the server's lifetime, starts at 1 */
    const char *peer_address;  /* "127.0.0.1:54321" */
} server_request_t;

/* What the handler answers. The server owns data after the call (bson_free). */
typedef struct server_reply {
    uint8_t *data;     /* allocated with bson_malloc; NULL: send nothing */
    size_t length;
    uint32_t delay_ms; /* hold the reply this long before sending (awaitable hello) */
    bool close_after;  /* close the connection once the reply is written */
} server_reply_t;

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
} server_callbacks_t;

typedef struct server_options {
    const char *bind_address;  /* "127.0.0.1" */
    int port;
    int max_connections;       /* past it a new connection is closed at once, logged */
    int worker_count;          /* worker threads */
    size_t max_message_bytes;  /* 48,000,000 as mongod; a larger length prefix closes */
} server_options_t;

typedef struct server_connection_stats {
    uint64_t current;
    uint64_t available;
    uint64_t total_created;
} server_connection_stats_t;

/* Binds and listens. Returns NULL and fills error (e.g. address in use). */
server_t *server_new(const server_options_t *options, const server_callbacks_t *callbacks,
                     bson_error_t *error) TC_MUST_CHECK;

/* Serves until server_stop() or SIGINT/SIGTERM; then closes every connection,
 * drains the workers and returns. */
bool server_run(server_t *server, bson_error_t *error) TC_MUST_CHECK;

/* Thread-safe: asks server_run() to return. */
void server_stop(server_t *server);

/* The port the listener is bound to: options.port, or the one the system chose
 * when options.port is 0 (tests bind to port 0). Thread-safe. */
int server_port(server_t *server);

/* Thread-safe snapshot for serverStatus. */
server_connection_stats_t server_connection_stats(server_t *server);

/* Safe on NULL. */
void server_destroy(server_t *server);

#endif
