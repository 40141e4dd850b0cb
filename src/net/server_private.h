/* Private to src/net: the server object shared by server.c (listener, signals,
 * shutdown) and connection.c (one client's state machine). Loop-thread fields are
 * touched only on the loop thread; the rest says how it is guarded. */
#ifndef TC_NET_SERVER_PRIVATE_H
#define TC_NET_SERVER_PRIVATE_H

#include "net/server.h"
#include "net/worker_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

typedef struct connection connection_t;

#define SERVER_SPARE_READ_BUFFERS 8

struct server {
    server_options_t options; /* options.bind_address points at bind_address */
    char *bind_address;
    server_callbacks_t callbacks;
    int bound_port; /* fixed once server_new returns */

    uv_loop_t loop;
    bool loop_open;
    uv_tcp_t listener;
    uv_async_t completion_async; /* workers to loop: jobs are done */
    uv_signal_t interrupt_signal;
    uv_signal_t terminate_signal;

    /* server_stop() may come from any thread, even after server_run() returned:
     * stop_lock makes "is the handle still open" and uv_async_send one step. */
    pthread_mutex_t stop_lock;
    uv_async_t stop_async;
    bool stop_async_open;

    worker_pool_t *workers;
    void *inline_state; /* worker_start's state for handle_inline, on the loop thread */
    bool inline_started;
    /* Loop thread only: handle_inline answered a request in this turn of the
     * loop; inline_turn, run after each turn's poll (before the next turn's
     * timers), clears it. */
    uv_check_t inline_turn;
    bool inline_ran_this_turn;

    /* Loop thread only. */
    connection_t *connections;
    uint64_t last_connection_id;
    bool ran;
    bool stopping;

    /* Loop thread only: where transport_tls has libuv put ciphertext, decrypted at
     * once, so one buffer serves every connection. Allocated on first use. */
    uint8_t *tls_read_buffer;

    /* Loop thread only: empty input buffers of the usual size no connection holds
     * (connection.c), so a read that brings nothing (EOF) allocates nothing and a
     * request's buffer serves a later read. */
    uint8_t *spare_read_buffers[SERVER_SPARE_READ_BUFFERS];
    int spare_read_buffer_count;

    /* Read from any thread by server_connection_stats(). */
    _Atomic uint64_t current_connections;
    _Atomic uint64_t total_created;
    _Atomic uint64_t requests_received; /* written on the loop thread only */
    _Atomic uint64_t tls_connections;
    _Atomic uint64_t timed_out_connections;
    _Atomic uint64_t queued_reply_bytes; /* written on the loop thread only */
};

/* connection.c */

/* Accepts the pending connection on the listener and starts reading from it. */
void connection_accept(server_t *server);

/* Closes every connection; each is freed once its in-flight request is done. */
void connection_close_all(server_t *server);

/* Loop thread: a worker finished job; sends or holds its reply. */
void connection_complete_request(worker_job_t *job);

/* Worker thread, right after the handler: writes a plain reply straight to the
 * socket when the connection allows it and the kernel takes it whole; true when
 * the job is done (the loop takes the request back lazily), false: complete it
 * on the loop with connection_complete_request(). */
bool connection_finish_on_worker(worker_job_t *job);

/* server.c */

/* Loop thread: a connection was freed; finishes a shutdown once none is left. */
void server_on_connection_freed(server_t *server);

#endif
