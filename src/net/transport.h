/* Private to src/net: how bytes cross between a connection's socket and its
 * plaintext buffers (pgbouncer's SBufIO). connection.c runs the state machine on
 * plaintext only; a transport turns what libuv read into input and a reply into
 * what libuv writes. Three of them:
 *
 *   transport_plain   bytes are the messages (zero copy: libuv reads straight
 *                     into the input buffer)
 *   transport_detect  --tlsMode allowTLS/preferTLS/requireTLS before the first
 *                     byte: 0x16 (a TLS handshake record) switches the
 *                     connection to transport_tls, anything else to plain (or,
 *                     under requireTLS, closes it)
 *   transport_tls     a tls_session_t (src/security/tls.h) between the socket and
 *                     the buffers; handshake bytes go out through
 *                     connection_send_bytes() whatever the connection's state
 */
#ifndef TC_NET_TRANSPORT_H
#define TC_NET_TRANSPORT_H

#include "net/server_private.h"

typedef struct transport_vtable {
    const char *name;
    /* libuv's alloc callback: where the next bytes read from the socket land. */
    void (*read_buffer)(connection_t *connection, uv_buf_t *out_buffer);
    /* count bytes landed at data (from read_buffer): hand the plaintext to the
     * connection (connection_input_space/connection_input_added). false: close
     * the connection (the transport logged why). */
    bool (*received)(connection_t *connection, uint8_t *data, size_t count);
    /* Turns a reply (plaintext; the transport takes it over) into the bytes to
     * write, which the caller frees with bson_free() once written. false: close. */
    bool (*wrap_reply)(connection_t *connection, uint8_t *reply, size_t length, uint8_t **out_wire,
                       size_t *out_length);
    /* Frees the transport's per-connection state (may be NULL). */
    void (*destroy)(void *state);
} transport_vtable_t;

extern const transport_vtable_t transport_plain;
extern const transport_vtable_t transport_detect;
extern const transport_vtable_t transport_tls;

/* --- connection.c, for the transports --------------------------------------- */

/* At least minimum bytes of free space at the end of the input buffer (grown as
 * needed); *out_available says how much there is. Valid until the next call. */
uint8_t *connection_input_space(connection_t *connection, size_t minimum, size_t *out_available);

/* count bytes were written at connection_input_space(). */
void connection_input_added(connection_t *connection, size_t count);

/* Queues bytes for the peer outside the request/reply cycle (a TLS handshake);
 * takes data over. Order with replies is kept. */
void connection_send_bytes(connection_t *connection, uint8_t *data, size_t length);

/* Switches the connection to another transport with its state. */
void connection_set_transport(connection_t *connection, const transport_vtable_t *transport, void *state);
void *connection_transport_state(connection_t *connection);

/* Whether a handshake is under way: the receive timeout then applies. */
void connection_set_handshaking(connection_t *connection, bool handshaking);
bool connection_is_handshaking(connection_t *connection);

server_t *connection_server(connection_t *connection);
uint64_t connection_id(connection_t *connection);
const char *connection_peer(connection_t *connection);

#endif
