/* Tests for src/net/stream_write.h: a message the socket takes at once, one it
 * takes only in part (the rest queued, in order, on the request asked for then),
 * and a socket whose peer is gone. Streams are libuv pipes over socketpairs. */
#include "net/stream_write.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

typedef struct fixture {
    uv_loop_t loop;
    uv_pipe_t pipe;
    int peer; /* the other end, read with plain blocking calls */
    uv_write_t request;
    int requests_given;
    int done_calls;
    int done_status;
} fixture_t;

static uv_write_t *give_request(void *context)
{
    fixture_t *fixture = context;
    fixture->requests_given++;
    return &fixture->request;
}

static void on_done(uv_write_t *request, int status)
{
    fixture_t *fixture = request->data;
    fixture->done_calls++;
    fixture->done_status = status;
}

static void open_fixture(fixture_t *fixture, int send_buffer_bytes)
{
    int fds[2];
    memset(fixture, 0, sizeof *fixture);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    if (send_buffer_bytes > 0) {
        assert_int_equal(setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &send_buffer_bytes, sizeof send_buffer_bytes), 0);
        assert_int_equal(setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &send_buffer_bytes, sizeof send_buffer_bytes), 0);
    }
    assert_int_equal(uv_loop_init(&fixture->loop), 0);
    assert_int_equal(uv_pipe_init(&fixture->loop, &fixture->pipe, 0), 0);
    assert_int_equal(uv_pipe_open(&fixture->pipe, fds[0]), 0);
    fixture->peer = fds[1];
    fixture->request.data = fixture;
}

static void close_fixture(fixture_t *fixture)
{
    if (fixture->peer >= 0) {
        close(fixture->peer);
    }
    uv_close((uv_handle_t *)&fixture->pipe, NULL);
    uv_run(&fixture->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&fixture->loop), 0);
}

/* Reads exactly length bytes from the peer; false on EOF or error. No cmocka
 * assertion here: it also runs on a thread of its own. */
static bool read_all(int fd, uint8_t *out, size_t length)
{
    size_t got = 0;
    while (got < length) {
        ssize_t count = read(fd, out + got, length - got);
        if (count <= 0) {
            return false;
        }
        got += (size_t)count;
    }
    return true;
}

static void test_small_message_is_written_at_once(void **state)
{
    (void)state;
    fixture_t fixture;
    open_fixture(&fixture, 0);
    const uint8_t message[] = "a small reply";
    int error = 0;
    assert_int_equal(stream_write((uv_stream_t *)&fixture.pipe, message, sizeof message, give_request, &fixture,
                                  on_done, &error),
                     STREAM_WRITE_DONE);
    assert_int_equal(fixture.requests_given, 0); /* no write request for a message written at once */
    uint8_t received[sizeof message];
    assert_true(read_all(fixture.peer, received, sizeof received));
    assert_memory_equal(received, message, sizeof message);
    uv_run(&fixture.loop, UV_RUN_NOWAIT);
    assert_int_equal(fixture.done_calls, 0);
    close_fixture(&fixture);
}

/* Drains the peer on a thread while the loop writes the rest. */
typedef struct drain {
    int fd;
    uint8_t *data;
    size_t length;
    bool complete;
} drain_t;

static void drain_peer(void *argument)
{
    drain_t *drain = argument;
    drain->complete = read_all(drain->fd, drain->data, drain->length);
}

static void test_large_message_queues_the_rest_in_order(void **state)
{
    (void)state;
    fixture_t fixture;
    open_fixture(&fixture, 4096);
    size_t length = 4 * 1024 * 1024; /* far more than the socket buffers hold */
    uint8_t *message = malloc(length);
    for (size_t i = 0; i < length; i++) {
        message[i] = (uint8_t)(i * 7 + i / 251);
    }
    int error = 0;
    assert_int_equal(stream_write((uv_stream_t *)&fixture.pipe, message, length, give_request, &fixture, on_done,
                                  &error),
                     STREAM_WRITE_QUEUED);
    assert_int_equal(fixture.requests_given, 1);
    assert_true(uv_stream_get_write_queue_size((uv_stream_t *)&fixture.pipe) > 0);

    drain_t drain = {.fd = fixture.peer, .data = malloc(length), .length = length};
    uv_thread_t reader;
    assert_int_equal(uv_thread_create(&reader, drain_peer, &drain), 0);
    uv_run(&fixture.loop, UV_RUN_DEFAULT); /* returns once the queued write is done */
    assert_int_equal(uv_thread_join(&reader), 0);
    assert_int_equal(fixture.done_calls, 1);
    assert_int_equal(fixture.done_status, 0);
    assert_true(drain.complete);
    assert_memory_equal(drain.data, message, length);
    free(drain.data);
    free(message);
    close_fixture(&fixture);
}

static void test_closed_peer_fails_without_queueing(void **state)
{
    (void)state;
    fixture_t fixture;
    open_fixture(&fixture, 0);
    close(fixture.peer);
    fixture.peer = -1;
    const uint8_t message[] = "nobody reads this";
    int error = 0;
    assert_int_equal(stream_write((uv_stream_t *)&fixture.pipe, message, sizeof message, give_request, &fixture,
                                  on_done, &error),
                     STREAM_WRITE_FAILED);
    assert_int_equal(error, UV_EPIPE);
    assert_int_equal(fixture.requests_given, 0);
    close_fixture(&fixture);
    assert_int_equal(fixture.done_calls, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the closed peer's write must fail with EPIPE, not kill the test */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_message_is_written_at_once),
        cmocka_unit_test(test_large_message_queues_the_rest_in_order),
        cmocka_unit_test(test_closed_peer_fails_without_queueing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
