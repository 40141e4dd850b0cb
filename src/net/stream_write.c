/* uv_try_write, then uv_write for the rest (stream_write.h): the one place the
 * server's replies and the proxy's requests to its tiers are written. */
#include "net/stream_write.h"

#include <limits.h>

stream_write_result_t stream_write(uv_stream_t *stream, const uint8_t *data, size_t length,
                                   stream_write_request_fn request_for_rest, void *context, uv_write_cb done,
                                   int *out_error)
{
    if (length > UINT_MAX) { /* a uv_buf_t holds an unsigned int */
        *out_error = UV_E2BIG;
        return STREAM_WRITE_FAILED;
    }
    uv_buf_t buffer = uv_buf_init((char *)data, (unsigned int)length);
    int written = uv_try_write(stream, &buffer, 1);
    if (written == (int)length) {
        return STREAM_WRITE_DONE;
    }
    if (written > 0) {
        buffer = uv_buf_init((char *)data + written, (unsigned int)(length - (size_t)written));
    } else if (written != UV_EAGAIN) {
        *out_error = written;
        return STREAM_WRITE_FAILED;
    }
    int result = uv_write(request_for_rest(context), stream, &buffer, 1, done);
    if (result != 0) {
        *out_error = result;
        return STREAM_WRITE_FAILED;
    }
    return STREAM_WRITE_QUEUED;
}
