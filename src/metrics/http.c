/* One state machine per scrape connection:
 *
 *   READING --(blank line ends the headers; or 8 KiB, or garbage)--> WRITING --> DRAINING --> CLOSING
 *      \---------------------(EOF, read error, 5 s deadline)-------------------------------/
 *
 * DRAINING: our side is shut down and what the client still sends is read and
 * dropped until it closes, because closing a socket with unread bytes resets the
 * connection, and a reset can destroy the response before the client reads it (the
 * 431 to a request too large).
 * The response is built whole (the render callback's text is a snapshot of one
 * instant) and written once; the deadline covers the write too, so a client that
 * never reads its response is closed with it. */
#include "metrics/http.h"

#include "common/log.h"
#include "metrics/exposition.h"
#include "net/server.h"

#include <pthread.h>
#include <string.h>
#include <uv.h>

#define LOG_COMPONENT "NETWORK"
#define HTTP_MAX_REQUEST_BYTES 8192
#define HTTP_MAX_CLIENTS 16
#define HTTP_CLIENT_DEADLINE_MS 5000

typedef enum http_client_state {
    HTTP_CLIENT_READING,
    HTTP_CLIENT_WRITING,
    HTTP_CLIENT_DRAINING,
    HTTP_CLIENT_CLOSING,
} http_client_state_t;

typedef struct http_client {
    metrics_http_t *http;
    http_client_state_t state;
    uv_tcp_t socket;
    uv_timer_t deadline;
    int open_handles;
    uv_write_t write;
    uv_shutdown_t shutdown;
    bson_string_t *response;
    size_t used;
    char request[HTTP_MAX_REQUEST_BYTES];
    struct http_client *next;
    struct http_client *previous;
} http_client_t;

struct metrics_http {
    uv_loop_t *loop;
    uv_tcp_t listener;
    bool listener_open;
    bool closing;
    int port;
    metrics_render_fn render;
    void *context;
    http_client_t *clients;
    size_t client_count;
};

static void http_free_if_done(metrics_http_t *http)
{
    if (http->closing && !http->listener_open && http->clients == NULL) {
        bson_free(http);
    }
}

static void on_client_handle_closed(uv_handle_t *handle)
{
    http_client_t *client = handle->data;
    if (--client->open_handles > 0) {
        return;
    }
    metrics_http_t *http = client->http;
    if (client->previous != NULL) {
        client->previous->next = client->next;
    } else {
        http->clients = client->next;
    }
    if (client->next != NULL) {
        client->next->previous = client->previous;
    }
    http->client_count--;
    if (client->response != NULL) {
        bson_string_free(client->response, true);
    }
    bson_free(client);
    http_free_if_done(http);
}

/* Every way out: closing the socket also cancels a write under way. */
static void client_close(http_client_t *client)
{
    if (client->state == HTTP_CLIENT_CLOSING) {
        return;
    }
    client->state = HTTP_CLIENT_CLOSING;
    uv_close((uv_handle_t *)&client->socket, on_client_handle_closed);
    uv_close((uv_handle_t *)&client->deadline, on_client_handle_closed);
}

static void on_shut_down(uv_shutdown_t *shutdown, int status)
{
    (void)shutdown;
    (void)status; /* the client's EOF or the deadline closes it */
}

static void on_alloc_discard(uv_handle_t *handle, size_t suggested, uv_buf_t *buffer)
{
    http_client_t *client = handle->data;
    (void)suggested;
    *buffer = uv_buf_init(client->request, (unsigned)sizeof client->request);
}

static void on_read_discard(uv_stream_t *stream, ssize_t count, const uv_buf_t *buffer)
{
    (void)buffer;
    if (count < 0) {
        client_close(stream->data);
    }
}

static void on_written(uv_write_t *write, int status)
{
    http_client_t *client = write->data;
    if (status != 0 || client->state != HTTP_CLIENT_WRITING) {
        client_close(client);
        return;
    }
    client->state = HTTP_CLIENT_DRAINING;
    client->shutdown.data = client;
    if (uv_shutdown(&client->shutdown, (uv_stream_t *)&client->socket, on_shut_down) != 0 ||
        uv_read_start((uv_stream_t *)&client->socket, on_alloc_discard, on_read_discard) != 0) {
        client_close(client);
    }
}

static void client_respond(http_client_t *client, const char *status_line, const char *content_type,
                           const char *extra_headers, const char *body, size_t body_length, bool head_only)
{
    uv_read_stop((uv_stream_t *)&client->socket);
    client->state = HTTP_CLIENT_WRITING;
    client->response = bson_string_new(NULL);
    bson_string_append_printf(client->response,
                              "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                              status_line, content_type, body_length, extra_headers);
    if (!head_only) {
        bson_string_append(client->response, body);
    }
    uv_buf_t buffer = uv_buf_init(client->response->str, client->response->len);
    client->write.data = client;
    if (uv_write(&client->write, (uv_stream_t *)&client->socket, &buffer, 1, on_written) != 0) {
        client_close(client);
    }
}

static void client_respond_text(http_client_t *client, const char *status_line, const char *extra_headers,
                                const char *text)
{
    client_respond(client, status_line, "text/plain; charset=utf-8", extra_headers, text, strlen(text), false);
}

static void client_serve_metrics(http_client_t *client, bool head_only)
{
    bson_string_t *body = bson_string_new(NULL);
    bson_error_t error;
    if (client->http->render(client->http->context, body, &error)) {
        client_respond(client, "200 OK", METRICS_CONTENT_TYPE, "", body->str, body->len, head_only);
    } else {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot render the metrics: {error}",
                     TC_ATTR_STR("error", error.message));
        bson_string_truncate(body, 0);
        bson_string_append_printf(body, "cannot render the metrics: %s\n", error.message);
        client_respond_text(client, "500 Internal Server Error", "", body->str);
    }
    bson_string_free(body, true);
}

/* The request line of a complete header block: METHOD SP TARGET SP HTTP/1.x. */
static void client_handle_request(http_client_t *client)
{
    char *line_end = strpbrk(client->request, "\r\n");
    *line_end = '\0';
    char *method = client->request;
    char *target = strchr(method, ' ');
    char *version = target != NULL ? strchr(target + 1, ' ') : NULL;
    if (target == NULL || version == NULL || strncmp(version + 1, "HTTP/1.", 7) != 0 || target == method) {
        client_respond_text(client, "400 Bad Request", "", "a request line is METHOD /path HTTP/1.1\n");
        return;
    }
    *target++ = '\0';
    *version = '\0';
    bool get = strcmp(method, "GET") == 0;
    bool head = strcmp(method, "HEAD") == 0;
    if (!get && !head) {
        client_respond_text(client, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "only GET /metrics\n");
        return;
    }
    size_t path_length = strcspn(target, "?");
    if (path_length != strlen("/metrics") || strncmp(target, "/metrics", path_length) != 0) {
        client_respond_text(client, "404 Not Found", "", "only /metrics is served here\n");
        return;
    }
    client_serve_metrics(client, head);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buffer)
{
    http_client_t *client = handle->data;
    (void)suggested;
    /* One byte stays free for the terminating NUL the parsing relies on. */
    *buffer = uv_buf_init(client->request + client->used, (unsigned)(sizeof client->request - 1 - client->used));
}

static void on_read(uv_stream_t *stream, ssize_t count, const uv_buf_t *buffer)
{
    http_client_t *client = stream->data;
    (void)buffer;
    if (client->state != HTTP_CLIENT_READING) {
        return;
    }
    if (count < 0) {
        client_close(client);
        return;
    }
    client->used += (size_t)count;
    client->request[client->used] = '\0';
    if (memchr(client->request, '\0', client->used) != NULL) {
        client_respond_text(client, "400 Bad Request", "", "a request holds no NUL byte\n");
    } else if (strstr(client->request, "\r\n\r\n") != NULL || strstr(client->request, "\n\n") != NULL) {
        client_handle_request(client);
    } else if (client->used == sizeof client->request - 1) {
        client_respond_text(client, "431 Request Header Fields Too Large", "", "a request fits in 8 KiB\n");
    }
}

static void on_deadline(uv_timer_t *timer)
{
    client_close(timer->data);
}

static void on_connection(uv_stream_t *listener, int status)
{
    metrics_http_t *http = listener->data;
    if (status != 0 || http->closing) {
        return;
    }
    http_client_t *client = bson_malloc0(sizeof *client);
    client->http = http;
    client->next = http->clients;
    if (http->clients != NULL) {
        http->clients->previous = client;
    }
    http->clients = client;
    http->client_count++;
    uv_tcp_init(http->loop, &client->socket);
    uv_timer_init(http->loop, &client->deadline);
    client->socket.data = client->deadline.data = client;
    client->open_handles = 2;
    if (uv_accept(listener, (uv_stream_t *)&client->socket) != 0 || http->client_count > HTTP_MAX_CLIENTS) {
        client_close(client); /* accepted, so the backlog drains, and closed at once */
        return;
    }
    uv_timer_start(&client->deadline, on_deadline, HTTP_CLIENT_DEADLINE_MS, 0);
    if (uv_read_start((uv_stream_t *)&client->socket, on_alloc, on_read) != 0) {
        client_close(client);
    }
}

metrics_http_t *metrics_http_new(struct uv_loop_s *loop, const char *host, int port, metrics_render_fn render,
                                 void *context, bson_error_t *error)
{
    struct sockaddr_storage address;
    if (!server_parse_address(host, port, &address, error)) {
        return NULL;
    }
    metrics_http_t *http = bson_malloc0(sizeof *http);
    http->loop = loop;
    http->render = render;
    http->context = context;
    uv_tcp_init(loop, &http->listener);
    http->listener.data = http;
    http->listener_open = true;
    unsigned flags = address.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0;
    int result = uv_tcp_bind(&http->listener, (const struct sockaddr *)&address, flags);
    if (result == 0) {
        result = uv_listen((uv_stream_t *)&http->listener, SOMAXCONN, on_connection);
    }
    if (result != 0) {
        tc_error_set(error, TC_ERR_SOCKET_EXCEPTION, "cannot serve metrics on %s:%d: %s", host, port,
                     uv_strerror(result));
        metrics_http_close(http);
        return NULL;
    }
    struct sockaddr_storage bound;
    int bound_length = sizeof bound;
    uv_tcp_getsockname(&http->listener, (struct sockaddr *)&bound, &bound_length);
    http->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                   : ((struct sockaddr_in *)&bound)->sin_port);
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "serving Prometheus metrics at http://{address}:{port}/metrics",
                 TC_ATTR_STR("address", host), TC_ATTR_INT("port", http->port));
    return http;
}

int metrics_http_port(const metrics_http_t *http)
{
    return http->port;
}

static void on_listener_closed(uv_handle_t *handle)
{
    metrics_http_t *http = handle->data;
    http->listener_open = false;
    http_free_if_done(http);
}

void metrics_http_close(metrics_http_t *http)
{
    if (http == NULL || http->closing) {
        return;
    }
    http->closing = true;
    for (http_client_t *client = http->clients; client != NULL; client = client->next) {
        client_close(client);
    }
    uv_close((uv_handle_t *)&http->listener, on_listener_closed);
}

/* --- on a thread of its own ----------------------------------------------------------- */

struct metrics_thread {
    uv_loop_t loop;
    uv_async_t stop;
    pthread_t thread;
    metrics_http_t *http;
};

static void on_stop(uv_async_t *async)
{
    metrics_thread_t *thread = async->data;
    metrics_http_close(thread->http);
    uv_close((uv_handle_t *)&thread->stop, NULL);
}

static void *metrics_thread_main(void *argument)
{
    metrics_thread_t *thread = argument;
    tc_log_set_thread_name("metrics");
    uv_run(&thread->loop, UV_RUN_DEFAULT);
    return NULL;
}

metrics_thread_t *metrics_thread_start(const char *host, int port, metrics_render_fn render, void *context,
                                       bson_error_t *error)
{
    metrics_thread_t *thread = bson_malloc0(sizeof *thread);
    uv_loop_init(&thread->loop);
    thread->http = metrics_http_new(&thread->loop, host, port, render, context, error);
    if (thread->http == NULL) {
        uv_run(&thread->loop, UV_RUN_DEFAULT); /* lets the listener's close finish */
        uv_loop_close(&thread->loop);
        bson_free(thread);
        return NULL;
    }
    uv_async_init(&thread->loop, &thread->stop, on_stop);
    thread->stop.data = thread;
    if (pthread_create(&thread->thread, NULL, metrics_thread_main, thread) != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start the metrics thread");
        on_stop(&thread->stop);
        uv_run(&thread->loop, UV_RUN_DEFAULT);
        uv_loop_close(&thread->loop);
        bson_free(thread);
        return NULL;
    }
    return thread;
}

void metrics_thread_stop(metrics_thread_t *thread)
{
    if (thread == NULL) {
        return;
    }
    uv_async_send(&thread->stop);
    pthread_join(thread->thread, NULL);
    uv_loop_close(&thread->loop);
    bson_free(thread);
}
