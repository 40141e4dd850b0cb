/* A minimal HTTP/1.x server for Prometheus scrapes: `GET /metrics` (and HEAD)
 * answers what the render callback writes, any other path 404, any other method
 * 405; every response closes its connection. On the caller's libuv loop
 * (metrics_http_new: the proxy's, whose state it renders without locks), or on a
 * thread and loop of its own (metrics_thread_start: the store's, whose render may
 * read WiredTiger's statistics). A client is bounded in time (5 s from accept to
 * the last byte of its response), in request size (8 KiB) and in number (16 at
 * once), so a slow or garbage client never holds the loop. */
#ifndef TC_METRICS_HTTP_H
#define TC_METRICS_HTTP_H

#include "common/error.h"

#include <bson/bson.h>
#include <stdbool.h>

struct uv_loop_s;

/* Appends the exposition text to out; false (with error) answers 500. Runs on the
 * server's loop thread, once per scrape. */
typedef bool (*metrics_render_fn)(void *context, bson_string_t *out, bson_error_t *error);

typedef struct metrics_http metrics_http_t;

/* Listens on host (an IPv4 or IPv6 literal) and port (0: one the system picks).
 * NULL and error when it cannot. Loop thread only from then on. */
metrics_http_t *metrics_http_new(struct uv_loop_s *loop, const char *host, int port, metrics_render_fn render,
                                 void *context, bson_error_t *error) TC_MUST_CHECK;

/* The port it listens on. */
int metrics_http_port(const metrics_http_t *http);

/* Closes the listener and every client; the memory goes once their handles have
 * closed (the loop must run on). Safe on NULL. */
void metrics_http_close(metrics_http_t *http);

/* The same server on a thread running its own loop. */
typedef struct metrics_thread metrics_thread_t;

metrics_thread_t *metrics_thread_start(const char *host, int port, metrics_render_fn render, void *context,
                                       bson_error_t *error) TC_MUST_CHECK;

/* Stops the server, joins the thread. Safe on NULL. */
void metrics_thread_stop(metrics_thread_t *thread);

#endif
