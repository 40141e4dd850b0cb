/* TLS for a pool's tier connections: reads a tier URI's TLS options into a
 * client context (src/security/tls.h), and per connection moves bytes between
 * backend.c and a client session, holding back the plaintext sent before the
 * handshake completes (the hello that opens every connection). */
#include "client/backend_tls.h"

#include <string.h>

/* Room for one TLS record's plaintext. */
#define PLAINTEXT_CHUNK_BYTES (16 * 1024)

struct backend_tls {
    tls_session_t *session;
    uint8_t *held; /* plaintext waiting for the handshake */
    size_t held_length;
};

bool backend_tls_context_from_uri(const mongoc_uri_t *uri, const char *tier_name, tls_context_t **out_context,
                                  bson_error_t *error)
{
    *out_context = NULL;
    /* True for tls=true or ssl=true, and (as drivers have it) for any tls* option. */
    if (!mongoc_uri_get_tls(uri)) {
        return true;
    }
    bool insecure = mongoc_uri_get_option_as_bool(uri, MONGOC_URI_TLSINSECURE, false);
    tls_client_options_t options = {
        .ca_file = mongoc_uri_get_option_as_utf8(uri, MONGOC_URI_TLSCAFILE, NULL),
        .certificate_key_file = mongoc_uri_get_option_as_utf8(uri, MONGOC_URI_TLSCERTIFICATEKEYFILE, NULL),
        .certificate_key_password = mongoc_uri_get_option_as_utf8(uri, MONGOC_URI_TLSCERTIFICATEKEYFILEPASSWORD, NULL),
        .allow_invalid_certificates =
            insecure || mongoc_uri_get_option_as_bool(uri, MONGOC_URI_TLSALLOWINVALIDCERTIFICATES, false),
        .allow_invalid_hostnames =
            insecure || mongoc_uri_get_option_as_bool(uri, MONGOC_URI_TLSALLOWINVALIDHOSTNAMES, false),
    };
    bson_error_t tls_error;
    *out_context = tls_context_new_client(&options, &tls_error);
    if (*out_context == NULL) {
        return tc_error_set(error, (int32_t)tls_error.code, "%s tier URI: %s", tier_name, tls_error.message);
    }
    return true;
}

backend_tls_t *backend_tls_new(tls_context_t *context, const char *host, bson_error_t *error)
{
    tls_session_t *session = tls_session_new_client(context, host, error);
    if (session == NULL) {
        return NULL;
    }
    size_t count;
    bool closed;
    /* A read with no room runs the handshake's first step: the ClientHello. */
    if (!tls_session_read(session, NULL, 0, &count, &closed, error)) {
        tls_session_destroy(session);
        return NULL;
    }
    backend_tls_t *tls = bson_malloc0(sizeof *tls);
    tls->session = session;
    return tls;
}

void backend_tls_destroy(backend_tls_t *tls)
{
    if (tls == NULL) {
        return;
    }
    tls_session_destroy(tls->session);
    bson_free(tls->held);
    bson_free(tls);
}

bool backend_tls_send(backend_tls_t *tls, const uint8_t *plaintext, size_t length, bson_error_t *error)
{
    if (tls_session_handshake_complete(tls->session)) {
        return tls_session_write(tls->session, plaintext, length, error);
    }
    tls->held = bson_realloc(tls->held, tls->held_length + length);
    memcpy(tls->held + tls->held_length, plaintext, length);
    tls->held_length += length;
    return true;
}

bool backend_tls_receive(backend_tls_t *tls, const uint8_t *data, size_t count, uint8_t **buffer, size_t *capacity,
                         size_t *length, bson_error_t *error)
{
    bool closed = false;
    if (!tls_session_receive(tls->session, data, count, error)) {
        return false;
    }
    for (;;) {
        if (*capacity - *length < PLAINTEXT_CHUNK_BYTES) {
            *capacity = *length + PLAINTEXT_CHUNK_BYTES;
            *buffer = bson_realloc(*buffer, *capacity);
        }
        size_t decrypted;
        if (!tls_session_read(tls->session, *buffer + *length, *capacity - *length, &decrypted, &closed, error)) {
            return false;
        }
        if (decrypted == 0) {
            break;
        }
        *length += decrypted;
    }
    if (closed) {
        return tc_error_set(error, TC_ERR_HOST_UNREACHABLE, "the server ended the TLS session");
    }
    if (tls->held != NULL && tls_session_handshake_complete(tls->session)) {
        bool written = tls_session_write(tls->session, tls->held, tls->held_length, error);
        bson_free(tls->held);
        tls->held = NULL;
        tls->held_length = 0;
        return written;
    }
    return true;
}

uint8_t *backend_tls_take_output(backend_tls_t *tls, size_t *out_length)
{
    size_t pending = tls_session_pending_output(tls->session);
    *out_length = 0;
    if (pending == 0) {
        return NULL;
    }
    uint8_t *records = bson_malloc(pending);
    *out_length = tls_session_take_output(tls->session, records, pending);
    return records;
}

bool backend_tls_handshake_complete(const backend_tls_t *tls)
{
    return tls_session_handshake_complete(tls->session);
}

void backend_tls_describe(const backend_tls_t *tls, char *out, size_t size)
{
    tls_session_describe(tls->session, out, size);
}
