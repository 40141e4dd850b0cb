/* The server's lifecycle: binds the listener, runs the one loop thread, refuses
 * connections past max_connections, and on server_stop() or SIGINT/SIGTERM shuts
 * down in order: stop accepting, close connections, wait for in-flight requests,
 * join the workers, close the loop. Per-client work lives in connection.c. */
#include "net/server_private.h"

#include "common/log.h"

#include <arpa/inet.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>

#define LOG_COMPONENT "NETWORK"
#define DEFAULT_BIND_ADDRESS "127.0.0.1"
#define DEFAULT_MAX_MESSAGE_BYTES 48000000u
#define DEFAULT_RECEIVE_TIMEOUT_MS 30000u
#define DEFAULT_SEND_TIMEOUT_MS 30000u
#define DEFAULT_MAX_QUEUED_REPLY_BYTES (256u * 1024 * 1024)

static bool server_check_options(const server_options_t *options,
                                 const server_callbacks_t *callbacks, bson_error_t *error)
{
    if (options == NULL || callbacks == NULL || (callbacks->handle == NULL) == (callbacks->handle_on_loop == NULL)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "the server needs options and exactly one of handle and "
                            "handle_on_loop");
    }
    if (callbacks->handle_inline != NULL && callbacks->handle == NULL) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "handle_inline is for worker mode: it needs handle");
    }
    if (options->port < 0 || options->port > 65535) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "port number must be between 0 and 65535, not %d",
                            options->port);
    }
    if (options->max_connections < 1) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "maxIncomingConnections must be at least 1, not %d",
                            options->max_connections);
    }
    if (options->worker_count < (callbacks->handle_on_loop != NULL ? 0 : 1)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "the server needs at least 1 worker thread, not %d",
                            options->worker_count);
    }
    if (options->max_message_bytes != 0 &&
        (options->max_message_bytes < 16 || options->max_message_bytes > INT32_MAX)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "max_message_bytes must be between 16 and %d, not %zu", INT32_MAX,
                            options->max_message_bytes);
    }
    if (options->tls_mode != TLS_MODE_DISABLED && options->tls_context == NULL) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "tlsMode %s needs a TLS context (a certificate and key)",
                            tls_mode_name(options->tls_mode));
    }
    return true;
}

bool server_parse_address(const char *text, int port, struct sockaddr_storage *out_address, bson_error_t *error)
{
    memset(out_address, 0, sizeof *out_address);
    if (uv_ip4_addr(text, port, (struct sockaddr_in *)out_address) == 0) {
        return true;
    }
    memset(out_address, 0, sizeof *out_address);
    if (uv_ip6_addr(text, port, (struct sockaddr_in6 *)out_address) == 0) {
        return true;
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE,
                        "bind address '%s' is not an IPv4 or IPv6 address literal", text);
}

/* Marks stop_async closed under stop_lock, so a late server_stop() cannot touch it. */
static void server_close_stop_async(server_t *server)
{
    pthread_mutex_lock(&server->stop_lock);
    if (server->stop_async_open) {
        server->stop_async_open = false;
        uv_close((uv_handle_t *)&server->stop_async, NULL);
    }
    pthread_mutex_unlock(&server->stop_lock);
}

static void server_close_handle(uv_handle_t *handle, void *argument)
{
    server_t *server = argument;
    if (handle == (uv_handle_t *)&server->stop_async) {
        server_close_stop_async(server);
    } else if (!uv_is_closing(handle)) {
        uv_close(handle, NULL);
    }
}

/* Closes the loop, first closing whatever handle is still open (a server that
 * never ran, or one whose run failed part way). */
static bool server_close_loop(server_t *server, bson_error_t *error)
{
    if (!server->loop_open) {
        return true;
    }
    int result = uv_loop_close(&server->loop);
    if (result == UV_EBUSY) {
        uv_walk(&server->loop, server_close_handle, server);
        uv_run(&server->loop, UV_RUN_DEFAULT);
        result = uv_loop_close(&server->loop);
    }
    if (result != 0) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot close the event loop: %s",
                            uv_strerror(result));
    }
    server->loop_open = false;
    return true;
}

static void server_finish_shutdown_if_drained(server_t *server)
{
    if (server->connections != NULL || uv_is_closing((uv_handle_t *)&server->completion_async)) {
        return;
    }
    /* No connection is left, so no request is with a worker and no completion is
     * coming: the last active handles can go, and uv_run() returns. */
    server_close_stop_async(server);
    uv_close((uv_handle_t *)&server->completion_async, NULL);
}

static void server_begin_shutdown(server_t *server)
{
    if (server->stopping) {
        return;
    }
    server->stopping = true;
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "shutting down: closing {connectionCount} connection(s)",
                 TC_ATTR_INT("connectionCount", atomic_load(&server->current_connections)));
    uv_close((uv_handle_t *)&server->listener, NULL);
    uv_close((uv_handle_t *)&server->interrupt_signal, NULL);
    uv_close((uv_handle_t *)&server->terminate_signal, NULL);
    if (server->inline_started) {
        uv_close((uv_handle_t *)&server->inline_turn, NULL);
    }
    if (server->callbacks.loop_stopping != NULL) {
        server->callbacks.loop_stopping(server->callbacks.application);
    }
    connection_close_all(server);
    server_finish_shutdown_if_drained(server);
}

void server_on_connection_freed(server_t *server)
{
    if (server->stopping) {
        server_finish_shutdown_if_drained(server);
    }
}

static void server_on_stop_requested(uv_async_t *async)
{
    server_begin_shutdown(async->data);
}

static void server_on_signal(uv_signal_t *handle, int signal_number)
{
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                 "got signal {signal} ({signalName}), will terminate after current cmd ends",
                 TC_ATTR_INT("signal", signal_number), TC_ATTR_STR("signalName", strsignal(signal_number)));
    server_begin_shutdown(handle->data);
}

static void server_on_requests_completed(uv_async_t *async)
{
    server_t *server = async->data;
    worker_job_t *job = worker_pool_take_completed(server->workers);
    while (job != NULL) {
        worker_job_t *next = job->next; /* completing may free the job's connection */
        connection_complete_request(job);
        job = next;
    }
}

/* Worker thread, under the pool's completion lock. */
static void server_notify_completion(void *context)
{
    server_t *server = context;
    uv_async_send(&server->completion_async);
}

static void server_free_handle(uv_handle_t *handle)
{
    bson_free(handle);
}

/* As mongod: accept, so the client sees a close rather than a hang, then close. */
static void server_refuse_connection(server_t *server, uint64_t connection_count)
{
    uv_tcp_t *tcp = BSON_ALIGNED_ALLOC0(uv_tcp_t);
    if (uv_tcp_init(&server->loop, tcp) != 0) {
        bson_free(tcp);
        return;
    }
    (void)uv_accept((uv_stream_t *)&server->listener, (uv_stream_t *)tcp);
    TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                 "connection refused because too many open connections: {connectionCount}",
                 TC_ATTR_INT("connectionCount", connection_count));
    uv_close((uv_handle_t *)tcp, server_free_handle);
}

static void server_on_connection(uv_stream_t *listener, int status)
{
    server_t *server = listener->data;
    if (status < 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "error accepting a new connection: {error}",
                     TC_ATTR_STR("error", uv_strerror(status)));
        return;
    }
    uint64_t open_count = atomic_load(&server->current_connections);
    if (open_count >= (uint64_t)server->options.max_connections) {
        /* mongod counts the refused connection too. */
        server_refuse_connection(server, open_count + 1);
        return;
    }
    connection_accept(server);
}

server_t *server_new(const server_options_t *options, const server_callbacks_t *callbacks,
                     bson_error_t *error)
{
    struct sockaddr_storage address;
    server_t *server = NULL;
    bool ok = false;

    TC_CHECK(server_check_options(options, callbacks, error));
    const char *bind_address = options->bind_address != NULL ? options->bind_address
                                                             : DEFAULT_BIND_ADDRESS;
    TC_CHECK(server_parse_address(bind_address, options->port, &address, error));

    server = BSON_ALIGNED_ALLOC0(server_t);
    server->options = *options;
    server->bind_address = bson_strdup(bind_address);
    server->options.bind_address = server->bind_address;
    if (server->options.max_message_bytes == 0) {
        server->options.max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES;
    }
    if (server->options.receive_timeout_ms == 0) {
        server->options.receive_timeout_ms = DEFAULT_RECEIVE_TIMEOUT_MS;
    }
    if (server->options.send_timeout_ms == 0) {
        server->options.send_timeout_ms = DEFAULT_SEND_TIMEOUT_MS;
    }
    if (server->options.max_queued_reply_bytes == 0) {
        server->options.max_queued_reply_bytes = DEFAULT_MAX_QUEUED_REPLY_BYTES;
    }
    server->callbacks = *callbacks;
    pthread_mutex_init(&server->stop_lock, NULL);
    atomic_init(&server->current_connections, 0);
    atomic_init(&server->total_created, 0);
    atomic_init(&server->requests_received, 0);
    atomic_init(&server->tls_connections, 0);
    atomic_init(&server->timed_out_connections, 0);
    atomic_init(&server->queued_reply_bytes, 0);

    int result = uv_loop_init(&server->loop);
    if (result != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot create the event loop: %s", uv_strerror(result));
        goto done;
    }
    server->loop_open = true;
    result = uv_async_init(&server->loop, &server->stop_async, server_on_stop_requested);
    server->stop_async_open = result == 0;
    if (result == 0) {
        result = uv_async_init(&server->loop, &server->completion_async, server_on_requests_completed);
    }
    if (result == 0) {
        result = uv_signal_init(&server->loop, &server->interrupt_signal);
    }
    if (result == 0) {
        result = uv_signal_init(&server->loop, &server->terminate_signal);
    }
    if (result == 0) {
        result = uv_tcp_init(&server->loop, &server->listener);
    }
    if (result != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot set up the event loop: %s", uv_strerror(result));
        goto done;
    }
    server->stop_async.data = server;
    server->completion_async.data = server;
    server->interrupt_signal.data = server;
    server->terminate_signal.data = server;
    server->listener.data = server;

    /* libuv sets SO_REUSEADDR on every TCP bind, so a restart does not wait out
     * TIME_WAIT. IPv6 listeners are IPv6 only, as mongod's. */
    unsigned int flags = address.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0;
    result = uv_tcp_bind(&server->listener, (const struct sockaddr *)&address, flags);
    if (result == 0) {
        result = uv_listen((uv_stream_t *)&server->listener, SOMAXCONN, server_on_connection);
    }
    if (result != 0) {
        tc_error_set(error, TC_ERR_SOCKET_EXCEPTION, "Failed to set up listener on %s:%d: %s",
                     bind_address, options->port, uv_strerror(result));
        goto done;
    }

    struct sockaddr_storage bound;
    int bound_length = sizeof bound;
    result = uv_tcp_getsockname(&server->listener, (struct sockaddr *)&bound, &bound_length);
    if (result != 0) {
        tc_error_set(error, TC_ERR_SOCKET_EXCEPTION, "cannot read the listener's address: %s",
                     uv_strerror(result));
        goto done;
    }
    server->bound_port = bound.ss_family == AF_INET6
                             ? ntohs(((const struct sockaddr_in6 *)&bound)->sin6_port)
                             : ntohs(((const struct sockaddr_in *)&bound)->sin_port);
    ok = true;

done:
    if (!ok) {
        server_destroy(server);
        server = NULL;
    }
    return server;
}

static void server_on_inline_turn(uv_check_t *check)
{
    server_t *server = check->data;
    server->inline_ran_this_turn = false;
}

/* The loop's handle_inline state goes once no request can reach it. */
static void server_stop_inline(server_t *server)
{
    if (server->inline_started && server->callbacks.worker_stop != NULL) {
        server->callbacks.worker_stop(server->callbacks.application, server->inline_state);
    }
    server->inline_started = false;
    server->inline_state = NULL;
}

bool server_run(server_t *server, bson_error_t *error)
{
    if (server->ran) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION,
                            "server_run() can be called only once per server");
    }
    server->ran = true;
    if (server->options.worker_count > 0) {
        server->workers = worker_pool_new(server->options.worker_count, &server->callbacks,
                                          connection_finish_on_worker, server_notify_completion, server,
                                          error);
        if (server->workers == NULL) {
            return false;
        }
    }
    if (server->callbacks.handle_inline != NULL && server->callbacks.worker_start != NULL) {
        server->inline_state = server->callbacks.worker_start(server->callbacks.application,
                                                              server->options.worker_count);
    }
    server->inline_started = server->callbacks.handle_inline != NULL;
    if (server->inline_started) {
        uv_check_init(&server->loop, &server->inline_turn);
        server->inline_turn.data = server;
        uv_check_start(&server->inline_turn, server_on_inline_turn);
        uv_unref((uv_handle_t *)&server->inline_turn); /* it alone does not keep the loop running */
    }

    bool ok = true;
    int result = uv_signal_start(&server->interrupt_signal, server_on_signal, SIGINT);
    if (result == 0) {
        result = uv_signal_start(&server->terminate_signal, server_on_signal, SIGTERM);
    }
    if (result != 0) {
        ok = tc_error_set(error, TC_ERR_INTERNAL, "cannot handle SIGINT and SIGTERM: %s",
                          uv_strerror(result));
        server_begin_shutdown(server); /* the loop below then only runs the teardown */
    } else {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "waiting for connections on {address}:{port}",
                     TC_ATTR_STR("address", server->bind_address), TC_ATTR_INT("port", server->bound_port));
    }

    /* Returns once a shutdown has closed every handle. */
    uv_run(&server->loop, UV_RUN_DEFAULT);

    worker_pool_destroy(server->workers);
    server->workers = NULL;
    server_stop_inline(server);
    if (!server_close_loop(server, ok ? error : NULL)) {
        ok = false;
    }
    return ok;
}

void server_stop(server_t *server)
{
    if (server == NULL) {
        return;
    }
    pthread_mutex_lock(&server->stop_lock);
    if (server->stop_async_open) {
        uv_async_send(&server->stop_async);
    }
    pthread_mutex_unlock(&server->stop_lock);
}

struct uv_loop_s *server_loop(server_t *server)
{
    return &server->loop;
}

bool server_update_limits(server_t *server, const server_limits_t *limits, bson_error_t *error)
{
    if (server->workers != NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "a server with worker threads cannot change its limits");
    }
    if (limits->tls_mode != TLS_MODE_DISABLED && limits->tls_context == NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "tlsMode %s needs a TLS context", tls_mode_name(limits->tls_mode));
    }
    server->options.max_connections = limits->max_connections;
    server->options.idle_timeout_ms = limits->idle_timeout_ms == 0 ? SERVER_NO_TIMEOUT : limits->idle_timeout_ms;
    server->options.receive_timeout_ms = limits->receive_timeout_ms;
    server->options.send_timeout_ms = limits->send_timeout_ms;
    server->options.tls_mode = limits->tls_mode;
    server->options.tls_context = limits->tls_context;
    return true;
}

int server_port(server_t *server)
{
    return server->bound_port;
}

server_connection_stats_t server_connection_stats(server_t *server)
{
    server_connection_stats_t stats;
    uint64_t limit = (uint64_t)server->options.max_connections;
    stats.current = atomic_load(&server->current_connections);
    stats.available = stats.current < limit ? limit - stats.current : 0;
    stats.total_created = atomic_load(&server->total_created);
    stats.requests = atomic_load(&server->requests_received);
    stats.tls = atomic_load(&server->tls_connections);
    stats.timed_out = atomic_load(&server->timed_out_connections);
    stats.queued_reply_bytes = atomic_load(&server->queued_reply_bytes);
    return stats;
}

void server_destroy(server_t *server)
{
    if (server == NULL) {
        return;
    }
    worker_pool_destroy(server->workers);
    server_stop_inline(server);
    bson_error_t error;
    if (!server_close_loop(server, &error)) {
        TC_LOG_ATTRS(TC_LOG_ERROR, LOG_COMPONENT, 0, "{error}", TC_ATTR_STR("error", error.message));
    }
    pthread_mutex_destroy(&server->stop_lock);
    bson_free(server->tls_read_buffer);
    for (int index = 0; index < server->spare_read_buffer_count; index++) {
        bson_free(server->spare_read_buffers[index]);
    }
    bson_free(server->bind_address);
    bson_free(server);
}
