/* Writing a message to a libuv stream the cheap way, for the server's replies
 * (connection.c) and the proxy's requests to its tiers (client/backend.c): most
 * fit the socket buffer and go out in one system call, with no write request. */
#ifndef TC_NET_STREAM_WRITE_H
#define TC_NET_STREAM_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Gives the write request for the bytes the socket did not take at once. */
typedef uv_write_t *(*stream_write_request_fn)(void *context);

typedef enum stream_write_result {
    STREAM_WRITE_DONE,   /* all written at once: done is never called */
    STREAM_WRITE_QUEUED, /* the rest waits in libuv: done is called once it is written or failed */
    STREAM_WRITE_FAILED, /* nothing queued; *out_error holds the libuv error */
} stream_write_result_t;

/* Writes data[0, length) to stream: with uv_try_write first (written at once, a
 * message needs no write request, whose completion would also change the epoll
 * set; libuv refuses while earlier writes wait, so the order holds), then the rest
 * with uv_write on the request that request_for_rest returns (called only then).
 * data must stay valid until done runs. */
stream_write_result_t stream_write(uv_stream_t *stream, const uint8_t *data, size_t length,
                                   stream_write_request_fn request_for_rest, void *context, uv_write_cb done,
                                   int *out_error);

#endif
