/* Tests for src/security/tls.c's client side against its server side, both in
 * memory (the test moves the ciphertext): a server certificate checked against
 * the CA and the host name or address, what tlsAllowInvalidCertificates and
 * tlsAllowInvalidHostnames let through, client certificates, an encrypted key,
 * and the errors for files that cannot be used. Certificates are made here
 * (certificates.h). */
#include "security/tls.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "certificates.h"

static char ca_path[128], rogue_ca_path[128], server_path[128], client_path[128], locked_client_path[128];

static int make_certificates(void **state)
{
    (void)state;
    test_authority_t authority, rogue;
    test_authority_init(&authority, "unit test CA");
    test_authority_init(&rogue, "rogue CA");
    snprintf(ca_path, sizeof ca_path, "/tmp/test_tls_%d_ca.pem", (int)getpid());
    snprintf(rogue_ca_path, sizeof rogue_ca_path, "/tmp/test_tls_%d_rogue.pem", (int)getpid());
    snprintf(server_path, sizeof server_path, "/tmp/test_tls_%d_server.pem", (int)getpid());
    snprintf(client_path, sizeof client_path, "/tmp/test_tls_%d_client.pem", (int)getpid());
    snprintf(locked_client_path, sizeof locked_client_path, "/tmp/test_tls_%d_locked.pem", (int)getpid());
    test_authority_write(&authority, ca_path);
    test_authority_write(&rogue, rogue_ca_path);
    test_certificate_write(&authority, "db1", "DNS:db1.example.com,DNS:localhost,IP:127.0.0.1", NULL, server_path);
    test_certificate_write(&authority, "app", NULL, NULL, client_path);
    test_certificate_write(&authority, "locked-app", NULL, "s3cret", locked_client_path);
    test_authority_cleanup(&authority);
    test_authority_cleanup(&rogue);
    return 0;
}

static int remove_certificates(void **state)
{
    (void)state;
    unlink(ca_path), unlink(rogue_ca_path), unlink(server_path), unlink(client_path), unlink(locked_client_path);
    return 0;
}

static tls_context_t *server_context(const char *ca_file)
{
    bson_error_t error;
    tls_server_options_t options = {.certificate_key_file = server_path, .ca_file = ca_file};
    tls_context_t *context = tls_context_new_server(&options, &error);
    if (context == NULL) {
        fail_msg("tls_context_new_server: %s", error.message);
    }
    return context;
}

static tls_context_t *client_context(const tls_client_options_t *options)
{
    bson_error_t error;
    tls_context_t *context = tls_context_new_client(options, &error);
    if (context == NULL) {
        fail_msg("tls_context_new_client: %s", error.message);
    }
    return context;
}

/* Moves what from has for its peer into to. */
static bool pass_records(tls_session_t *from, tls_session_t *to, bson_error_t *error)
{
    uint8_t records[64 * 1024];
    size_t count;
    while ((count = tls_session_take_output(from, records, sizeof records)) > 0) {
        if (!tls_session_receive(to, records, count, error)) {
            return false;
        }
    }
    return true;
}

typedef struct handshake {
    bool ok;
    bson_error_t client_error;
    bson_error_t server_error;
    char client_view[384]; /* tls_session_describe() on each side */
    char server_view[384];
} handshake_t;

/* A handshake between a client of client_context to host and a server of
 * server_context; then "ping" from the client must reach the server. */
static handshake_t run_handshake(tls_context_t *client, tls_context_t *server, const char *host)
{
    handshake_t result = {.ok = false};
    tls_session_t *client_session = tls_session_new_client(client, host, &result.client_error);
    tls_session_t *server_session = tls_session_new(server, &result.server_error);
    assert_non_null(client_session);
    assert_non_null(server_session);
    uint8_t plaintext[64];
    size_t count;
    bool closed;
    bool client_ok = true, server_ok = true;
    for (int round = 0; round < 10 && client_ok && server_ok; round++) {
        client_ok =
            tls_session_read(client_session, plaintext, sizeof plaintext, &count, &closed, &result.client_error);
        assert_true(pass_records(client_session, server_session, &result.server_error));
        server_ok =
            tls_session_read(server_session, plaintext, sizeof plaintext, &count, &closed, &result.server_error);
        assert_true(pass_records(server_session, client_session, &result.client_error));
        if (tls_session_handshake_complete(client_session) && tls_session_handshake_complete(server_session)) {
            break;
        }
    }
    if (!client_ok || !server_ok) {
        /* The side that did not fail reads the other's alert. */
        if (client_ok) {
            client_ok = tls_session_read(client_session, plaintext, sizeof plaintext, &count, &closed,
                                         &result.client_error);
        }
        goto done;
    }
    assert_true(tls_session_handshake_complete(client_session));
    assert_true(tls_session_write(client_session, (const uint8_t *)"ping", 4, &result.client_error));
    assert_true(pass_records(client_session, server_session, &result.server_error));
    assert_true(tls_session_read(server_session, plaintext, sizeof plaintext, &count, &closed, &result.server_error));
    assert_int_equal(count, 4);
    assert_memory_equal(plaintext, "ping", 4);
    tls_session_describe(client_session, result.client_view, sizeof result.client_view);
    tls_session_describe(server_session, result.server_view, sizeof result.server_view);
    result.ok = true;
done:
    tls_session_destroy(client_session);
    tls_session_destroy(server_session);
    return result;
}

static void assert_contains(const char *text, const char *part)
{
    if (strstr(text, part) == NULL) {
        fail_msg("'%s' does not contain '%s'", text, part);
    }
}

static void test_server_certificate_checked_against_ca_and_name(void **state)
{
    (void)state;
    tls_context_t *server = server_context(NULL);
    tls_client_options_t options = {.ca_file = ca_path};
    tls_context_t *client = client_context(&options);

    handshake_t result = run_handshake(client, server, "db1.example.com");
    assert_true(result.ok);
    assert_contains(result.client_view, "server certificate /CN=db1");
    assert_true(run_handshake(client, server, "localhost").ok);
    assert_true(run_handshake(client, server, "127.0.0.1").ok); /* an IP address in subjectAltName */

    result = run_handshake(client, server, "db2.example.com");
    assert_false(result.ok);
    assert_int_equal(result.client_error.code, 141); /* SSLHandshakeFailed */
    assert_contains(result.client_error.message, "certificate verify failed: hostname mismatch");
    result = run_handshake(client, server, "127.0.0.2");
    assert_false(result.ok);
    assert_contains(result.client_error.message, "IP address mismatch");
    tls_context_destroy(client);

    options = (tls_client_options_t){.ca_file = rogue_ca_path};
    client = client_context(&options);
    result = run_handshake(client, server, "localhost");
    assert_false(result.ok);
    assert_contains(result.client_error.message, "certificate verify failed");
    /* The server learns why from the client's alert. */
    assert_contains(result.server_error.message, "SSL handshake failed");
    tls_context_destroy(client);
    tls_context_destroy(server);
}

static void test_allow_invalid_certificates_and_hostnames(void **state)
{
    (void)state;
    tls_context_t *server = server_context(NULL);
    tls_client_options_t options = {.ca_file = ca_path, .allow_invalid_hostnames = true};
    tls_context_t *client = client_context(&options);
    assert_true(run_handshake(client, server, "db2.example.com").ok);
    tls_context_destroy(client);

    /* The chain is still checked when only host names may be wrong. */
    options = (tls_client_options_t){.ca_file = rogue_ca_path, .allow_invalid_hostnames = true};
    client = client_context(&options);
    assert_false(run_handshake(client, server, "localhost").ok);
    tls_context_destroy(client);

    options = (tls_client_options_t){.ca_file = rogue_ca_path, .allow_invalid_certificates = true};
    client = client_context(&options);
    assert_true(run_handshake(client, server, "db2.example.com").ok);
    tls_context_destroy(client);
    tls_context_destroy(server);
}

static void test_client_certificates(void **state)
{
    (void)state;
    tls_context_t *server = server_context(ca_path); /* asks for, and requires, a client certificate */
    tls_client_options_t options = {.ca_file = ca_path};
    tls_context_t *client = client_context(&options);
    handshake_t result = run_handshake(client, server, "localhost");
    assert_false(result.ok);
    assert_contains(result.server_error.message, "SSL handshake failed");
    tls_context_destroy(client);

    options.certificate_key_file = client_path;
    client = client_context(&options);
    result = run_handshake(client, server, "localhost");
    assert_true(result.ok);
    assert_contains(result.server_view, "client certificate /CN=app");
    tls_context_destroy(client);

    options.certificate_key_file = locked_client_path;
    options.certificate_key_password = "s3cret";
    client = client_context(&options);
    result = run_handshake(client, server, "localhost");
    assert_true(result.ok);
    assert_contains(result.server_view, "client certificate /CN=locked-app");
    tls_context_destroy(client);
    tls_context_destroy(server);
}

static void test_unusable_files_and_wrong_roles(void **state)
{
    (void)state;
    bson_error_t error;
    tls_client_options_t options = {.ca_file = "/nonexistent/ca.pem"};
    assert_null(tls_context_new_client(&options, &error));
    assert_int_equal(error.code, 2);
    assert_string_equal(error.message, "cannot read tlsCAFile /nonexistent/ca.pem: No such file or directory");

    options = (tls_client_options_t){.certificate_key_file = ca_path}; /* a certificate without its key */
    assert_null(tls_context_new_client(&options, &error));
    assert_contains(error.message, "cannot read the private key in tlsCertificateKeyFile");

    options = (tls_client_options_t){.certificate_key_file = locked_client_path, .certificate_key_password = "nope"};
    assert_null(tls_context_new_client(&options, &error));
    assert_contains(error.message, "cannot read the private key in tlsCertificateKeyFile");

    /* A session of the other side's kind is refused, not half made. */
    options = (tls_client_options_t){.ca_file = ca_path};
    tls_context_t *client = client_context(&options);
    tls_context_t *server = server_context(NULL);
    assert_null(tls_session_new(client, &error));
    assert_null(tls_session_new_client(server, "localhost", &error));
    tls_context_destroy(client);
    tls_context_destroy(server);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_certificate_checked_against_ca_and_name),
        cmocka_unit_test(test_allow_invalid_certificates_and_hostnames),
        cmocka_unit_test(test_client_certificates),
        cmocka_unit_test(test_unusable_files_and_wrong_roles),
    };
    return cmocka_run_group_tests(tests, make_certificates, remove_certificates);
}
