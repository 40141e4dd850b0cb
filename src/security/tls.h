/* TLS for servers, as an engine over memory buffers (OpenSSL with memory BIOs):
 * the caller moves ciphertext between the engine and its socket however it likes
 * (libuv in src/net), so the engine knows nothing of event loops and any
 * component can put it under its connections. Options and behaviour follow
 * mongod's (--tlsMode, --tlsCertificateKeyFile, --tlsCAFile,
 * --tlsAllowConnectionsWithoutCertificates): TLS 1.2 and later, no
 * renegotiation, client certificates asked for when a CA file is given. */
#ifndef TC_SECURITY_TLS_H
#define TC_SECURITY_TLS_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

/* mongod's net.tls.mode. */
typedef enum tls_mode {
    TLS_MODE_DISABLED,
    TLS_MODE_ALLOW,   /* plaintext and TLS accepted (mongod: TLS not used between cluster members) */
    TLS_MODE_PREFER,  /* plaintext and TLS accepted */
    TLS_MODE_REQUIRE, /* TLS only: a plaintext client is closed after its first bytes */
} tls_mode_t;

/* "disabled", "allowTLS", "preferTLS", "requireTLS" (mongod's spelling; the older
 * allowSSL, preferSSL, requireSSL are accepted too). */
bool tls_mode_from_name(const char *name, tls_mode_t *out_mode);
const char *tls_mode_name(tls_mode_t mode);

/* The first byte of every TLS connection: a handshake record. */
#define TLS_RECORD_HANDSHAKE 0x16

typedef struct tls_server_options {
    const char *certificate_key_file; /* PEM: the server's certificate (chain) and private key */
    const char *ca_file;              /* PEM: CAs that sign client certificates; NULL: none asked for */
    /* With ca_file: a client without a certificate is still accepted (one that
     * presents an invalid one never is). */
    bool allow_connections_without_certificates;
} tls_server_options_t;

typedef struct tls_context tls_context_t;
typedef struct tls_session tls_session_t;

/* Loads the certificate, key and CAs. Errors: BadValue naming the file and
 * OpenSSL's reason (unreadable file, key not matching the certificate). Free with
 * tls_context_destroy(). Thread-safe once made. */
tls_context_t *tls_context_new_server(const tls_server_options_t *options, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL; sessions made from it must be destroyed first. */
void tls_context_destroy(tls_context_t *context);

/* One server-side connection. Free with tls_session_destroy(). A session is used
 * by one thread at a time. */
tls_session_t *tls_session_new(tls_context_t *context, bson_error_t *error) TC_MUST_CHECK;
void tls_session_destroy(tls_session_t *session);

/* Hands ciphertext received from the peer to the engine (it keeps a copy). */
bool tls_session_receive(tls_session_t *session, const uint8_t *data, size_t length, bson_error_t *error) TC_MUST_CHECK;

/* Decrypts up to capacity bytes of application data into out, advancing the
 * handshake as needed. *out_count 0: more ciphertext is needed; *out_closed: the
 * peer ended the session (close_notify). Errors: SSLHandshakeFailed or a protocol
 * error with OpenSSL's reason ("certificate verify failed", "http request"). */
bool tls_session_read(tls_session_t *session, uint8_t *out, size_t capacity, size_t *out_count, bool *out_closed,
                      bson_error_t *error) TC_MUST_CHECK;

/* Encrypts all of data (after the handshake). */
bool tls_session_write(tls_session_t *session, const uint8_t *data, size_t length, bson_error_t *error) TC_MUST_CHECK;

/* Ciphertext waiting to go to the peer: handshake messages, alerts, records. */
size_t tls_session_pending_output(tls_session_t *session);

/* Moves up to capacity bytes of it into out; returns how many. */
size_t tls_session_take_output(tls_session_t *session, uint8_t *out, size_t capacity);

bool tls_session_handshake_complete(tls_session_t *session);

/* "TLSv1.3 TLS_AES_256_GCM_SHA384, client certificate CN=app" for the log, once
 * the handshake is complete. */
void tls_session_describe(tls_session_t *session, char *out, size_t size);

#endif
