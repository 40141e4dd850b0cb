/* TLS as an engine over memory buffers (OpenSSL with memory BIOs), for servers
 * and clients: the caller moves ciphertext between the engine and its socket
 * however it likes (libuv in src/net and src/client/backend.c), so the engine
 * knows nothing of event loops and any component can put it under its
 * connections. Server options follow mongod's (--tlsMode,
 * --tlsCertificateKeyFile, --tlsCAFile, --tlsAllowConnectionsWithoutCertificates),
 * client options MongoDB URIs' (tlsCAFile, tlsCertificateKeyFile,
 * tlsAllowInvalidCertificates, tlsAllowInvalidHostnames): TLS 1.2 and later, no
 * renegotiation, client certificates asked for when a CA file is given, server
 * certificates and host names checked unless the client allows otherwise. */
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

typedef struct tls_client_options {
    const char *ca_file;              /* PEM: CAs trusted to sign server certificates; NULL: the system's */
    const char *certificate_key_file; /* PEM: a certificate and key for servers that ask; NULL: none */
    const char *certificate_key_password; /* for an encrypted key in certificate_key_file; NULL: none */
    bool allow_invalid_certificates;  /* no check of the server's chain (nor of its name) */
    bool allow_invalid_hostnames;     /* the chain is checked, the name in it is not */
} tls_client_options_t;

/* Loads the CAs and the client certificate. Errors: BadValue naming the file
 * and OpenSSL's reason. Free with tls_context_destroy(). Thread-safe once made. */
tls_context_t *tls_context_new_client(const tls_client_options_t *options, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL; sessions made from it must be destroyed first. */
void tls_context_destroy(tls_context_t *context);

/* One server-side connection, from a server context. Free with
 * tls_session_destroy(). A session is used by one thread at a time. */
tls_session_t *tls_session_new(tls_context_t *context, bson_error_t *error) TC_MUST_CHECK;

/* One client-side connection to host (a name or an IP address, as in the URI),
 * from a client context: host goes out as SNI when it is a name, and the
 * server's certificate must name it (subjectAltName, or CN without one) unless
 * the context allows invalid host names or certificates. The first
 * tls_session_read() produces the ClientHello; until the handshake completes,
 * tls_session_write() fails. Free with tls_session_destroy(). */
tls_session_t *tls_session_new_client(tls_context_t *context, const char *host, bson_error_t *error) TC_MUST_CHECK;
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

/* "TLSv1.3 TLS_AES_256_GCM_SHA384, client certificate CN=app" (on a client:
 * "server certificate CN=db1") for the log, once the handshake is complete. */
void tls_session_describe(tls_session_t *session, char *out, size_t size);

#endif
