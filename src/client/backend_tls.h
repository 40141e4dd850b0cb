/* Private to src/client: TLS under a tier connection of backend.c. The options
 * come from the tier's URI as drivers read them; the bytes go through a client
 * session of src/security/tls.h, and this layer only holds back what the
 * connection sends before the handshake is done, so backend.c's state machine
 * sees plaintext and one more step inside HANDSHAKING. */
#ifndef TC_CLIENT_BACKEND_TLS_H
#define TC_CLIENT_BACKEND_TLS_H

#include "common/error.h"
#include "security/tls.h"

#include <mongoc/mongoc.h>

/* The URI's TLS options (tls or ssl, tlsCAFile, tlsCertificateKeyFile,
 * tlsCertificateKeyFilePassword, tlsAllowInvalidCertificates,
 * tlsAllowInvalidHostnames, tlsInsecure): *out_context is a client context, or
 * NULL when the URI does not ask for TLS. Errors: BadValue naming the tier and
 * the file. */
bool backend_tls_context_from_uri(const mongoc_uri_t *uri, const char *tier_name, tls_context_t **out_context,
                                  bson_error_t *error) TC_MUST_CHECK;

typedef struct backend_tls backend_tls_t;

/* A session to host that has written its ClientHello (take it with
 * backend_tls_take_output()). Free with backend_tls_destroy(); safe on NULL. */
backend_tls_t *backend_tls_new(tls_context_t *context, const char *host, bson_error_t *error) TC_MUST_CHECK;
void backend_tls_destroy(backend_tls_t *tls);

/* Plaintext for the server (copied): encrypted now, or once the handshake is done. */
bool backend_tls_send(backend_tls_t *tls, const uint8_t *plaintext, size_t length, bson_error_t *error) TC_MUST_CHECK;

/* Ciphertext from the server. The plaintext it carried is appended at *length
 * of *buffer, which is grown (bson_realloc, *capacity) as needed. Errors:
 * SSLHandshakeFailed with OpenSSL's reason ("certificate verify failed:
 * hostname mismatch"), a TLS protocol error, or HostUnreachable when the server
 * ended the session. */
bool backend_tls_receive(backend_tls_t *tls, const uint8_t *data, size_t count, uint8_t **buffer, size_t *capacity,
                         size_t *length, bson_error_t *error) TC_MUST_CHECK;

/* The ciphertext waiting for the server, or NULL (*out_length 0) when none; the
 * caller writes it and frees it with bson_free(). */
uint8_t *backend_tls_take_output(backend_tls_t *tls, size_t *out_length);

bool backend_tls_handshake_complete(const backend_tls_t *tls);

/* The protocol, cipher and the server's certificate subject, for the log. */
void backend_tls_describe(const backend_tls_t *tls, char *out, size_t size);

#endif
