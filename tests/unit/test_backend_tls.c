/* Tests for src/client/backend_tls.c: which tier URIs ask for TLS and with what
 * options (as drivers read them), and a tier connection's TLS layer against a
 * server session of src/security/tls.h in memory: what the proxy sends before
 * the handshake is held and arrives after it, replies come back as plaintext,
 * a failed check is an SSLHandshakeFailed naming the reason. */
#include "client/backend_tls.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "certificates.h"

static char ca_path[128], rogue_ca_path[128], server_path[128];

static int make_certificates(void **state)
{
    (void)state;
    test_authority_t authority, rogue;
    test_authority_init(&authority, "unit test CA");
    test_authority_init(&rogue, "rogue CA");
    snprintf(ca_path, sizeof ca_path, "/tmp/test_backend_tls_%d_ca.pem", (int)getpid());
    snprintf(rogue_ca_path, sizeof rogue_ca_path, "/tmp/test_backend_tls_%d_rogue.pem", (int)getpid());
    snprintf(server_path, sizeof server_path, "/tmp/test_backend_tls_%d_server.pem", (int)getpid());
    test_authority_write(&authority, ca_path);
    test_authority_write(&rogue, rogue_ca_path);
    test_certificate_write(&authority, "localhost", "DNS:localhost,IP:127.0.0.1", NULL, server_path);
    test_authority_cleanup(&authority);
    test_authority_cleanup(&rogue);
    return 0;
}

static int remove_certificates(void **state)
{
    (void)state;
    unlink(ca_path), unlink(rogue_ca_path), unlink(server_path);
    return 0;
}

/* backend_tls_context_from_uri on format with file for its %s (if any);
 * *out_context NULL when plaintext. */
static bool context_for(const char *format, const char *file, tls_context_t **out_context, bson_error_t *error)
{
    char uri_text[512];
    snprintf(uri_text, sizeof uri_text, format, file);
    mongoc_uri_t *uri = mongoc_uri_new(uri_text);
    assert_non_null(uri);
    bool ok = backend_tls_context_from_uri(uri, "archive", out_context, error);
    mongoc_uri_destroy(uri);
    return ok;
}

static void test_uri_options(void **state)
{
    (void)state;
    tls_context_t *context;
    bson_error_t error;
    assert_true(context_for("mongodb://127.0.0.1:1/?replicaSet=rs0", NULL, &context, &error));
    assert_null(context);
    assert_true(context_for("mongodb://127.0.0.1:1/?tls=false", NULL, &context, &error));
    assert_null(context);
    static const char *const secure[] = {
        "mongodb://127.0.0.1:1/?tls=true&tlsCAFile=%s",
        "mongodb://127.0.0.1:1/?ssl=true&tlsCAFile=%s",
        "mongodb://127.0.0.1:1/?tlsCAFile=%s", /* any tls option implies TLS, as for drivers */
        "mongodb://127.0.0.1:1/?tls=true&tlsCAFile=%s&tlsInsecure=true",
    };
    for (size_t i = 0; i < sizeof secure / sizeof secure[0]; i++) {
        assert_true(context_for(secure[i], ca_path, &context, &error));
        assert_non_null(context);
        tls_context_destroy(context);
    }
    assert_false(context_for("mongodb://127.0.0.1:1/?tls=true&tlsCAFile=%s", "/nonexistent.pem", &context, &error));
    assert_null(context);
    assert_int_equal(error.code, 2);
    assert_string_equal(error.message,
                        "archive tier URI: cannot read tlsCAFile /nonexistent.pem: No such file or directory");
}

/* Moves the layer's output to the server session. */
static void to_server(backend_tls_t *tls, tls_session_t *server)
{
    size_t length;
    uint8_t *records = backend_tls_take_output(tls, &length);
    bson_error_t error;
    if (records != NULL) {
        assert_true(tls_session_receive(server, records, length, &error));
    }
    bson_free(records);
}

/* Runs the server's side and hands what it wrote to the layer. */
static bool to_client(tls_session_t *server, backend_tls_t *tls, uint8_t **buffer, size_t *capacity, size_t *length,
                      uint8_t *server_plaintext, size_t *server_count, bson_error_t *error)
{
    bool closed;
    bson_error_t server_error;
    assert_true(tls_session_read(server, server_plaintext, 256, server_count, &closed, &server_error));
    uint8_t records[64 * 1024];
    size_t count = tls_session_take_output(server, records, sizeof records);
    return backend_tls_receive(tls, records, count, buffer, capacity, length, error);
}

static tls_context_t *server_context(void)
{
    bson_error_t error;
    tls_server_options_t options = {.certificate_key_file = server_path};
    tls_context_t *context = tls_context_new_server(&options, &error);
    assert_non_null(context);
    return context;
}

static void test_messages_wait_for_the_handshake(void **state)
{
    (void)state;
    tls_context_t *client_context, *server = server_context();
    bson_error_t error;
    assert_true(context_for("mongodb://localhost:1/?tls=true&tlsCAFile=%s", ca_path, &client_context, &error));
    backend_tls_t *tls = backend_tls_new(client_context, "localhost", &error);
    assert_non_null(tls);
    tls_session_t *session = tls_session_new(server, &error);
    assert_non_null(session);

    /* The hello is sent as soon as TCP connects: it waits for the handshake. */
    assert_true(backend_tls_send(tls, (const uint8_t *)"hello", 5, &error));
    uint8_t *buffer = NULL, server_plaintext[256];
    size_t capacity = 0, length = 0, server_count = 0;
    char received[64] = "";
    for (int round = 0; round < 5 && strlen(received) < 5; round++) {
        to_server(tls, session);
        assert_true(to_client(session, tls, &buffer, &capacity, &length, server_plaintext, &server_count, &error));
        strncat(received, (const char *)server_plaintext, server_count);
    }
    assert_true(backend_tls_handshake_complete(tls));
    assert_string_equal(received, "hello");
    char description[384];
    backend_tls_describe(tls, description, sizeof description);
    assert_non_null(strstr(description, "server certificate /CN=localhost"));

    /* A reply larger than one record comes back whole, the buffer grown. */
    size_t reply_length = 100 * 1024;
    uint8_t *reply = bson_malloc(reply_length);
    memset(reply, 'r', reply_length);
    assert_true(tls_session_write(session, reply, reply_length, &error));
    uint8_t records[128 * 1024];
    size_t count = tls_session_take_output(session, records, sizeof records);
    assert_true(backend_tls_receive(tls, records, count, &buffer, &capacity, &length, &error));
    assert_int_equal(length, reply_length);
    assert_memory_equal(buffer, reply, reply_length);
    bson_free(reply);
    bson_free(buffer);
    backend_tls_destroy(tls);
    tls_session_destroy(session);
    tls_context_destroy(client_context);
    tls_context_destroy(server);
}

static void test_untrusted_server_fails_the_handshake(void **state)
{
    (void)state;
    tls_context_t *client_context, *server = server_context();
    bson_error_t error;
    assert_true(context_for("mongodb://localhost:1/?tls=true&tlsCAFile=%s", rogue_ca_path, &client_context, &error));
    backend_tls_t *tls = backend_tls_new(client_context, "localhost", &error);
    tls_session_t *session = tls_session_new(server, &error);
    assert_true(backend_tls_send(tls, (const uint8_t *)"hello", 5, &error));
    uint8_t *buffer = NULL, server_plaintext[256];
    size_t capacity = 0, length = 0, server_count = 0;
    to_server(tls, session);
    assert_false(to_client(session, tls, &buffer, &capacity, &length, server_plaintext, &server_count, &error));
    assert_int_equal(error.code, 141);
    assert_non_null(strstr(error.message, "SSL handshake failed: certificate verify failed"));
    assert_int_equal(server_count, 0); /* the hello never left */
    assert_int_equal(length, 0);
    bson_free(buffer);
    backend_tls_destroy(tls);
    tls_session_destroy(session);
    tls_context_destroy(client_context);
    tls_context_destroy(server);
}

int main(void)
{
    mongoc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uri_options),
        cmocka_unit_test(test_messages_wait_for_the_handshake),
        cmocka_unit_test(test_untrusted_server_fails_the_handshake),
    };
    int failed = cmocka_run_group_tests(tests, make_certificates, remove_certificates);
    mongoc_cleanup();
    return failed;
}
