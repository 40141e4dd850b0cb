/* The TLS transport: ciphertext read from the socket goes into the connection's
 * tls_session_t (src/security/tls.h) and comes out as plaintext in the input
 * buffer; a reply is encrypted into one buffer for one write; handshake and
 * alert records go out as soon as the engine produces them. Everything runs on
 * the loop thread, so one read buffer per server serves all connections. */
#include "net/transport.h"

#include "common/log.h"

#define LOG_COMPONENT "NETWORK"
/* One TLS record (16 KiB of plaintext) plus its overhead. */
#define TLS_READ_BYTES (16 * 1024 + 512)
#define PLAINTEXT_CHUNK_BYTES (16 * 1024)

static void tls_read_buffer(connection_t *connection, uv_buf_t *out_buffer)
{
    server_t *server = connection_server(connection);
    if (server->tls_read_buffer == NULL) {
        server->tls_read_buffer = bson_malloc(TLS_READ_BYTES);
    }
    *out_buffer = uv_buf_init((char *)server->tls_read_buffer, TLS_READ_BYTES);
}

/* Sends whatever records the engine has for the peer. */
static void tls_flush(connection_t *connection, tls_session_t *session)
{
    size_t pending = tls_session_pending_output(session);
    if (pending == 0) {
        return;
    }
    uint8_t *records = bson_malloc(pending);
    size_t taken = tls_session_take_output(session, records, pending);
    connection_send_bytes(connection, records, taken);
}

static bool tls_received(connection_t *connection, uint8_t *data, size_t count)
{
    tls_session_t *session = connection_transport_state(connection);
    bson_error_t error;
    bool closed = false;
    if (!tls_session_receive(session, data, count, &error)) {
        goto failed;
    }
    for (;;) {
        size_t available, decrypted;
        uint8_t *space = connection_input_space(connection, PLAINTEXT_CHUNK_BYTES, &available);
        if (!tls_session_read(session, space, available, &decrypted, &closed, &error)) {
            goto failed;
        }
        if (decrypted == 0) {
            break;
        }
        connection_input_added(connection, decrypted);
    }
    tls_flush(connection, session);
    if (closed) {
        return false; /* close_notify: the client is done */
    }
    if (connection_is_handshaking(connection) && tls_session_handshake_complete(session)) {
        char description[384];
        tls_session_describe(session, description, sizeof description);
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection_id(connection), "TLS connection from {remote}: {tls}",
                     TC_ATTR_STR("remote", connection_peer(connection)), TC_ATTR_STR("tls", description));
        connection_set_handshaking(connection, false);
    }
    return true;
failed:
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, connection_id(connection),
                 "Error receiving request from client {remote}: {codeName}: {error}. Ending connection from remote",
                 TC_ATTR_STR("remote", connection_peer(connection)),
                 TC_ATTR_STR("codeName", tc_error_code_name((int32_t)error.code)), TC_ATTR_STR("error", error.message));
    return false;
}

static bool tls_wrap_reply(connection_t *connection, uint8_t *reply, size_t length, uint8_t **out_wire,
                           size_t *out_length)
{
    tls_session_t *session = connection_transport_state(connection);
    bson_error_t error;
    bool ok = tls_session_write(session, reply, length, &error);
    bson_free(reply);
    if (!ok) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, connection_id(connection),
                     "cannot send a reply to {remote}: {error}",
                     TC_ATTR_STR("remote", connection_peer(connection)), TC_ATTR_STR("error", error.message));
        return false;
    }
    size_t pending = tls_session_pending_output(session);
    *out_wire = bson_malloc(pending > 0 ? pending : 1);
    *out_length = tls_session_take_output(session, *out_wire, pending);
    return true;
}

static void tls_destroy(void *state)
{
    tls_session_destroy(state);
}

const transport_vtable_t transport_tls = {
    .name = "tls",
    .read_buffer = tls_read_buffer,
    .received = tls_received,
    .wrap_reply = tls_wrap_reply,
    .destroy = tls_destroy,
};
