/* The TLS engine: an SSL_CTX made from mongod-style server options or URI-style
 * client options, and per connection an SSL object between two memory BIOs
 * (ciphertext in, ciphertext out) so the caller owns all socket I/O. OpenSSL's error queue is per thread: every entry
 * point clears it first, so a reason read after a failure is that failure's. */
#include "security/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

struct tls_context {
    SSL_CTX *ssl_context;
    bool client;
    bool check_hostname; /* client: the server's certificate must name the host */
};

struct tls_session {
    SSL *ssl;
    BIO *input;  /* ciphertext from the peer, read by OpenSSL */
    BIO *output; /* ciphertext for the peer, written by OpenSSL */
};

static const struct {
    const char *name;
    tls_mode_t mode;
} mode_names[] = {
    {"disabled", TLS_MODE_DISABLED}, {"allowTLS", TLS_MODE_ALLOW},   {"preferTLS", TLS_MODE_PREFER},
    {"requireTLS", TLS_MODE_REQUIRE}, {"allowSSL", TLS_MODE_ALLOW},  {"preferSSL", TLS_MODE_PREFER},
    {"requireSSL", TLS_MODE_REQUIRE},
};

bool tls_mode_from_name(const char *name, tls_mode_t *out_mode)
{
    for (size_t i = 0; i < sizeof mode_names / sizeof mode_names[0]; i++) {
        if (strcmp(mode_names[i].name, name) == 0) {
            *out_mode = mode_names[i].mode;
            return true;
        }
    }
    return false;
}

const char *tls_mode_name(tls_mode_t mode)
{
    return mode_names[mode].name; /* the first four entries are in enum order */
}

/* OpenSSL's reason for the last failure ("no certificate returned"), or fallback;
 * for a file it could not open, the system's ("No such file or directory"),
 * which OpenSSL queues first and then reports only as "system lib". */
static const char *last_openssl_reason(const char *fallback)
{
    if (ERR_GET_LIB(ERR_peek_error()) == ERR_LIB_SYS) {
        return strerror(ERR_GET_REASON(ERR_peek_error()));
    }
    unsigned long code = ERR_peek_last_error();
    const char *reason = code != 0 ? ERR_reason_error_string(code) : NULL;
    return reason != NULL ? reason : fallback;
}

tls_context_t *tls_context_new_server(const tls_server_options_t *options, bson_error_t *error)
{
    tls_context_t *context = NULL;
    SSL_CTX *ssl_context = NULL;
    ERR_clear_error();

    if (options->certificate_key_file == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "need tlsCertificateKeyFile or certificateSelector when TLS is enabled");
        goto done;
    }
    ssl_context = SSL_CTX_new(TLS_server_method());
    if (ssl_context == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot create a TLS context: %s", last_openssl_reason("unknown"));
        goto done;
    }
    /* mongod 6.0 disables TLS 1.0 and 1.1 by default. */
    SSL_CTX_set_min_proto_version(ssl_context, TLS1_2_VERSION);
    /* Client-initiated renegotiation costs the server a handshake for free; session
     * tickets would only add bytes for clients that keep connections open. */
    SSL_CTX_set_options(ssl_context, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_num_tickets(ssl_context, 0);
    /* An idle connection gives its read and write buffers back. */
    SSL_CTX_set_mode(ssl_context, SSL_MODE_RELEASE_BUFFERS);

    if (SSL_CTX_use_certificate_chain_file(ssl_context, options->certificate_key_file) != 1) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot read the certificate in tlsCertificateKeyFile %s: %s",
                     options->certificate_key_file, last_openssl_reason("unreadable"));
        goto done;
    }
    if (SSL_CTX_use_PrivateKey_file(ssl_context, options->certificate_key_file, SSL_FILETYPE_PEM) != 1) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot read the private key in tlsCertificateKeyFile %s: %s",
                     options->certificate_key_file, last_openssl_reason("unreadable"));
        goto done;
    }
    if (SSL_CTX_check_private_key(ssl_context) != 1) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "the private key in %s does not match its certificate: %s",
                     options->certificate_key_file, last_openssl_reason("mismatch"));
        goto done;
    }
    if (options->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ssl_context, options->ca_file, NULL) != 1) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "cannot read tlsCAFile %s: %s", options->ca_file,
                         last_openssl_reason("unreadable"));
            goto done;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(options->ca_file);
        if (names != NULL) {
            SSL_CTX_set_client_CA_list(ssl_context, names);
        }
        int verify = SSL_VERIFY_PEER;
        if (!options->allow_connections_without_certificates) {
            verify |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        }
        SSL_CTX_set_verify(ssl_context, verify, NULL);
    }
    context = bson_malloc0(sizeof *context);
    context->ssl_context = ssl_context;
    ssl_context = NULL;
done:
    SSL_CTX_free(ssl_context);
    ERR_clear_error();
    return context;
}

tls_context_t *tls_context_new_client(const tls_client_options_t *options, bson_error_t *error)
{
    tls_context_t *context = NULL;
    SSL_CTX *ssl_context = NULL;
    ERR_clear_error();

    ssl_context = SSL_CTX_new(TLS_client_method());
    if (ssl_context == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot create a TLS context: %s", last_openssl_reason("unknown"));
        goto done;
    }
    SSL_CTX_set_min_proto_version(ssl_context, TLS1_2_VERSION);
    SSL_CTX_set_options(ssl_context, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ssl_context, SSL_MODE_RELEASE_BUFFERS);
    if (options->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ssl_context, options->ca_file, NULL) != 1) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "cannot read tlsCAFile %s: %s", options->ca_file,
                         last_openssl_reason("unreadable"));
            goto done;
        }
    } else if (SSL_CTX_set_default_verify_paths(ssl_context) != 1) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot load the system's CA certificates: %s",
                     last_openssl_reason("unreadable"));
        goto done;
    }
    if (options->certificate_key_file != NULL) {
        /* With no callback, OpenSSL takes the user data as the key's passphrase. */
        SSL_CTX_set_default_passwd_cb_userdata(ssl_context, (void *)options->certificate_key_password);
        if (SSL_CTX_use_certificate_chain_file(ssl_context, options->certificate_key_file) != 1) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "cannot read the certificate in tlsCertificateKeyFile %s: %s",
                         options->certificate_key_file, last_openssl_reason("unreadable"));
            goto done;
        }
        bool key_read = SSL_CTX_use_PrivateKey_file(ssl_context, options->certificate_key_file, SSL_FILETYPE_PEM) == 1;
        SSL_CTX_set_default_passwd_cb_userdata(ssl_context, NULL); /* the caller keeps the password */
        if (!key_read) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "cannot read the private key in tlsCertificateKeyFile %s: %s",
                         options->certificate_key_file, last_openssl_reason("unreadable"));
            goto done;
        }
        if (SSL_CTX_check_private_key(ssl_context) != 1) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "the private key in %s does not match its certificate: %s",
                         options->certificate_key_file, last_openssl_reason("mismatch"));
            goto done;
        }
    }
    SSL_CTX_set_verify(ssl_context, options->allow_invalid_certificates ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    context = bson_malloc0(sizeof *context);
    context->ssl_context = ssl_context;
    context->client = true;
    context->check_hostname = !options->allow_invalid_certificates && !options->allow_invalid_hostnames;
    ssl_context = NULL;
done:
    SSL_CTX_free(ssl_context);
    ERR_clear_error();
    return context;
}

void tls_context_destroy(tls_context_t *context)
{
    if (context == NULL) {
        return;
    }
    SSL_CTX_free(context->ssl_context);
    bson_free(context);
}

/* An SSL object between two fresh memory BIOs, or NULL with error set. */
static tls_session_t *session_new(tls_context_t *context, bson_error_t *error)
{
    ERR_clear_error();
    tls_session_t *session = bson_malloc0(sizeof *session);
    session->ssl = SSL_new(context->ssl_context);
    session->input = BIO_new(BIO_s_mem());
    session->output = BIO_new(BIO_s_mem());
    if (session->ssl == NULL || session->input == NULL || session->output == NULL) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start a TLS session: %s", last_openssl_reason("out of memory"));
        BIO_free(session->input);
        BIO_free(session->output);
        SSL_free(session->ssl);
        bson_free(session);
        return NULL;
    }
    /* An empty input BIO means "wait for more", not end of stream. */
    BIO_set_mem_eof_return(session->input, -1);
    BIO_set_mem_eof_return(session->output, -1);
    SSL_set_bio(session->ssl, session->input, session->output); /* the SSL owns both BIOs now */
    return session;
}

tls_session_t *tls_session_new(tls_context_t *context, bson_error_t *error)
{
    if (context->client) {
        tc_error_set(error, TC_ERR_INTERNAL, "a server TLS session needs a server context");
        return NULL;
    }
    tls_session_t *session = session_new(context, error);
    if (session != NULL) {
        SSL_set_accept_state(session->ssl);
    }
    return session;
}

tls_session_t *tls_session_new_client(tls_context_t *context, const char *host, bson_error_t *error)
{
    if (!context->client) {
        tc_error_set(error, TC_ERR_INTERNAL, "a client TLS session needs a client context");
        return NULL;
    }
    tls_session_t *session = session_new(context, error);
    if (session == NULL) {
        return NULL;
    }
    unsigned char address[sizeof(struct in6_addr)];
    bool is_address = inet_pton(AF_INET, host, address) == 1 || inet_pton(AF_INET6, host, address) == 1;
    bool named = true;
    /* SNI carries names only (RFC 6066). */
    if (!is_address) {
        named = SSL_set_tlsext_host_name(session->ssl, host) == 1;
    }
    if (named && context->check_hostname) {
        if (is_address) {
            named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(session->ssl), host) == 1;
        } else {
            SSL_set_hostflags(session->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            named = SSL_set1_host(session->ssl, host) == 1;
        }
    }
    if (!named) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot use '%s' as a TLS host name: %s", host,
                     last_openssl_reason("invalid"));
        tls_session_destroy(session);
        return NULL;
    }
    SSL_set_connect_state(session->ssl);
    return session;
}

void tls_session_destroy(tls_session_t *session)
{
    if (session == NULL) {
        return;
    }
    SSL_free(session->ssl);
    bson_free(session);
}

bool tls_session_receive(tls_session_t *session, const uint8_t *data, size_t length, bson_error_t *error)
{
    if (length == 0) {
        return true;
    }
    ERR_clear_error();
    if (length > INT32_MAX || BIO_write(session->input, data, (int)length) != (int)length) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot buffer %zu bytes of TLS input", length);
    }
    return true;
}

bool tls_session_read(tls_session_t *session, uint8_t *out, size_t capacity, size_t *out_count, bool *out_closed,
                      bson_error_t *error)
{
    *out_count = 0;
    *out_closed = false;
    ERR_clear_error();
    if (!SSL_is_init_finished(session->ssl)) {
        int result = SSL_do_handshake(session->ssl);
        if (result != 1) {
            int reason = SSL_get_error(session->ssl, result);
            if (reason == SSL_ERROR_WANT_READ || reason == SSL_ERROR_WANT_WRITE) {
                return true;
            }
            const char *verify = SSL_get_verify_result(session->ssl) != X509_V_OK
                                     ? X509_verify_cert_error_string(SSL_get_verify_result(session->ssl))
                                     : NULL;
            return tc_error_set(error, TC_ERR_SSL_HANDSHAKE_FAILED, "SSL handshake failed: %s%s%s",
                                last_openssl_reason("the peer closed the connection"), verify ? ": " : "",
                                verify ? verify : "");
        }
    }
    if (capacity == 0) {
        return true;
    }
    size_t count = 0;
    int result = SSL_read_ex(session->ssl, out, capacity, &count);
    if (result == 1) {
        *out_count = count;
        return true;
    }
    int reason = SSL_get_error(session->ssl, result);
    if (reason == SSL_ERROR_WANT_READ || reason == SSL_ERROR_WANT_WRITE) {
        return true;
    }
    if (reason == SSL_ERROR_ZERO_RETURN) {
        *out_closed = true;
        return true;
    }
    return tc_error_set(error, TC_ERR_PROTOCOL_ERROR, "TLS error: %s", last_openssl_reason("protocol violation"));
}

bool tls_session_write(tls_session_t *session, const uint8_t *data, size_t length, bson_error_t *error)
{
    ERR_clear_error();
    size_t written = 0;
    while (written < length) {
        size_t count = 0;
        if (SSL_write_ex(session->ssl, data + written, length - written, &count) != 1) {
            return tc_error_set(error, TC_ERR_PROTOCOL_ERROR, "cannot encrypt a reply: %s",
                                last_openssl_reason("TLS session not ready"));
        }
        written += count;
    }
    return true;
}

size_t tls_session_pending_output(tls_session_t *session)
{
    return BIO_ctrl_pending(session->output);
}

size_t tls_session_take_output(tls_session_t *session, uint8_t *out, size_t capacity)
{
    size_t count = 0;
    if (capacity == 0 || BIO_read_ex(session->output, out, capacity, &count) != 1) {
        return 0;
    }
    return count;
}

bool tls_session_handshake_complete(tls_session_t *session)
{
    return SSL_is_init_finished(session->ssl) == 1;
}

void tls_session_describe(tls_session_t *session, char *out, size_t size)
{
    char subject[256] = "";
    X509 *peer = SSL_get1_peer_certificate(session->ssl);
    if (peer != NULL) {
        X509_NAME_oneline(X509_get_subject_name(peer), subject, sizeof subject);
        X509_free(peer);
    }
    const char *whose = SSL_is_server(session->ssl) ? ", client certificate " : ", server certificate ";
    snprintf(out, size, "%s %s%s%s", SSL_get_version(session->ssl), SSL_get_cipher_name(session->ssl),
             peer != NULL ? whose : "", subject);
}
