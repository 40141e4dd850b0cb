/* The plain transport (bytes on the socket are the messages) and the detecting
 * one that --tlsMode allowTLS, preferTLS and requireTLS start every connection
 * with: it reads the first bytes into a small buffer of its own and decides, as
 * mongod does, from the first message header's worth whether a TLS ClientHello
 * begins (record type 0x16, protocol major version 3, handshake type 1). */
#include "net/transport.h"

#include "common/log.h"

#include <string.h>

#define LOG_COMPONENT "NETWORK"
/* Every plain read is offered at least this much free space. */
#define READ_CHUNK_BYTES (16 * 1024)
/* mongod peeks at one message header before choosing; a ClientHello is longer. */
#define DETECT_BYTES 16

static void plain_read_buffer(connection_t *connection, uv_buf_t *out_buffer)
{
    size_t available;
    uint8_t *space = connection_input_space(connection, READ_CHUNK_BYTES, &available);
    *out_buffer = uv_buf_init((char *)space, (unsigned int)available);
}

static bool plain_received(connection_t *connection, uint8_t *data, size_t count)
{
    (void)data; /* already in place: read_buffer lent the input buffer itself */
    connection_input_added(connection, count);
    return true;
}

static bool plain_wrap_reply(connection_t *connection, uint8_t *reply, size_t length, uint8_t **out_wire,
                             size_t *out_length)
{
    (void)connection;
    *out_wire = reply;
    *out_length = length;
    return true;
}

const transport_vtable_t transport_plain = {
    .name = "plain",
    .read_buffer = plain_read_buffer,
    .received = plain_received,
    .wrap_reply = plain_wrap_reply,
    .destroy = NULL,
};

/* --- detection ------------------------------------------------------------------ */

typedef struct detect_state {
    uint8_t header[DETECT_BYTES];
    size_t count;
} detect_state_t;

static detect_state_t *detect_state(connection_t *connection)
{
    detect_state_t *state = connection_transport_state(connection);
    if (state == NULL) {
        state = bson_malloc0(sizeof *state);
        connection_set_transport(connection, &transport_detect, state);
    }
    return state;
}

static void detect_read_buffer(connection_t *connection, uv_buf_t *out_buffer)
{
    detect_state_t *state = detect_state(connection);
    *out_buffer = uv_buf_init((char *)state->header + state->count, (unsigned int)(DETECT_BYTES - state->count));
}

static bool looks_like_client_hello(const uint8_t *header, size_t count)
{
    return count >= 6 && header[0] == TLS_RECORD_HANDSHAKE && header[1] == 3 && header[5] == 1;
}

static bool detect_received(connection_t *connection, uint8_t *data, size_t count)
{
    (void)data; /* landed in state->header */
    detect_state_t *state = detect_state(connection);
    server_t *server = connection_server(connection);
    state->count += count;
    if (state->header[0] == TLS_RECORD_HANDSHAKE && state->count < DETECT_BYTES) {
        connection_set_handshaking(connection, true); /* the receive timeout applies while we wait */
        return true; /* could be TLS: wait for a header's worth */
    }
    detect_state_t decided = *state; /* the switch below frees state */
    if (looks_like_client_hello(decided.header, decided.count)) {
        bson_error_t error;
        tls_session_t *session = tls_session_new(server->options.tls_context, &error);
        if (session == NULL) {
            TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection_id(connection),
                         "cannot accept TLS from {remote}: {error}",
                         TC_ATTR_STR("remote", connection_peer(connection)), TC_ATTR_STR("error", error.message));
            return false;
        }
        connection_set_transport(connection, &transport_tls, session);
        connection_set_handshaking(connection, true);
        return transport_tls.received(connection, decided.header, decided.count);
    }
    if (server->options.tls_mode == TLS_MODE_REQUIRE) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection_id(connection),
                     "Error receiving request from client {remote}: SSLHandshakeFailed: The server is configured to "
                     "only allow SSL connections. Ending connection from remote",
                     TC_ATTR_STR("remote", connection_peer(connection)));
        return false;
    }
    connection_set_transport(connection, &transport_plain, NULL);
    connection_set_handshaking(connection, false);
    size_t available;
    uint8_t *space = connection_input_space(connection, decided.count, &available);
    memcpy(space, decided.header, decided.count);
    connection_input_added(connection, decided.count);
    return true;
}

static bool detect_wrap_reply(connection_t *connection, uint8_t *reply, size_t length, uint8_t **out_wire,
                              size_t *out_length)
{
    /* No request can have been read before the transport was chosen. */
    (void)out_wire, (void)out_length, (void)length;
    bson_free(reply);
    TC_LOG(TC_LOG_ERROR, LOG_COMPONENT, connection_id(connection), "reply before the transport was chosen");
    return false;
}

const transport_vtable_t transport_detect = {
    .name = "detect",
    .read_buffer = detect_read_buffer,
    .received = detect_received,
    .wrap_reply = detect_wrap_reply,
    .destroy = bson_free,
};
