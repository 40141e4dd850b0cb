/* Tests for src/security/scram_client.c: the RFC 5802 (SHA-1) and RFC 7677
 * (SHA-256) conversations and MongoDB's SCRAM-SHA-1 example replayed from the
 * client's side, whole conversations against scram.c's server with the right and
 * the wrong password, and every way a server's message may be refused. */
#include "security/scram.h"
#include "security/scram_client.h"

#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* --- the published conversations ------------------------------------------------- */

static void run_client_vector(scram_mechanism_t mechanism, const char *prepared_password, const char *client_nonce,
                              const char *expected_first, const char *server_first, const char *expected_final,
                              const char *server_final)
{
    bson_error_t error;
    char *message;
    size_t length;
    scram_client_t *client = scram_client_new_prepared(mechanism, "user", prepared_password, client_nonce, NULL);
    assert_true(scram_client_first_message(client, &message, &length, &error));
    assert_string_equal(message, expected_first);
    assert_int_equal(length, strlen(expected_first));
    bson_free(message);
    assert_true(scram_client_receive_first(client, (const uint8_t *)server_first, strlen(server_first), &message,
                                           &length, &error));
    assert_string_equal(message, expected_final);
    assert_int_equal(length, strlen(expected_final));
    bson_free(message);
    assert_false(scram_client_succeeded(client));
    assert_true(scram_client_receive_final(client, (const uint8_t *)server_final, strlen(server_final), &error));
    assert_true(scram_client_succeeded(client));
    scram_client_destroy(client);
}

static void test_rfc5802_sha1_vector(void **state)
{
    (void)state;
    run_client_vector(SCRAM_SHA_1, "pencil", "fyko+d2lbbFgONRv9qkxdawL", "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
                      "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
                      "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
                      "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
}

static void test_rfc7677_sha256_vector(void **state)
{
    (void)state;
    run_client_vector(SCRAM_SHA_256, "pencil", "rOprNGfwEbeRWgbNEkqO", "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                      "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                      "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                      "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                      "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
}

/* MongoDB's SCRAM-SHA-1 runs on hex(MD5("user:mongo:pencil")): the auth
 * specification's example, from the prepared digest. */
static void test_mongodb_sha1_vector(void **state)
{
    (void)state;
    bson_error_t error;
    char *prepared;
    assert_true(scram_prepare_password(SCRAM_SHA_1, "user", "pencil", &prepared, &error));
    run_client_vector(SCRAM_SHA_1, prepared, "fyko+d2lbbFgONRv9qkxdawL", "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
                      "r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,s=rQ9ZY3MntBeuP3E1TDVC4w==,i=10000",
                      "c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,"
                      "p=MC2T8BvbmWRckDw8oWl5IVghwCY=",
                      "v=UMWeI25JD1yNYZRMpZ4VHvhZ9e0=");
    bson_free(prepared);
}

/* --- against the server side ---------------------------------------------------------- */

/* One whole conversation between scram_client.c and scram.c: returns whether the
 * server accepted the proof (and then, that the client accepted the server). */
static bool converse(scram_mechanism_t mechanism, const char *user, const char *stored_password,
                     const char *client_password, scram_client_key_cache_t *cache)
{
    bson_error_t error;
    scram_credentials_t credentials;
    char *message, *reply;
    size_t length, reply_length;
    assert_true(scram_credentials_generate(mechanism, user, stored_password, 4096, &credentials, &error));
    scram_client_t *client = scram_client_new(mechanism, user, client_password, cache, &error);
    assert_non_null(client);
    scram_server_t *server = scram_server_new(mechanism, NULL);

    assert_true(scram_client_first_message(client, &message, &length, &error));
    assert_true(scram_server_receive_first(server, (const uint8_t *)message, length, &error));
    bson_free(message);
    assert_string_equal(scram_server_user(server), user);
    assert_true(scram_server_first_message(server, &credentials, &reply, &reply_length, &error));
    assert_true(scram_client_receive_first(client, (const uint8_t *)reply, reply_length, &message, &length, &error));
    bson_free(reply);
    bool accepted = scram_server_receive_final(server, (const uint8_t *)message, length, &reply, &reply_length, &error);
    bson_free(message);
    if (accepted) {
        assert_true(scram_client_receive_final(client, (const uint8_t *)reply, reply_length, &error));
        assert_true(scram_client_succeeded(client));
        bson_free(reply);
    } else {
        assert_int_equal(error.code, 18);
    }
    scram_client_destroy(client);
    scram_server_destroy(server);
    return accepted;
}

static void test_conversations_with_the_server(void **state)
{
    (void)state;
    const scram_mechanism_t mechanisms[] = {SCRAM_SHA_1, SCRAM_SHA_256};
    for (size_t i = 0; i < 2; i++) {
        assert_true(converse(mechanisms[i], "alice", "s3cret!", "s3cret!", NULL));
        assert_false(converse(mechanisms[i], "alice", "s3cret!", "s3cret?", NULL));
        /* ',' and '=' travel escaped and arrive as they were. */
        assert_true(converse(mechanisms[i], "a,b=c", "pw", "pw", NULL));
    }
    /* SASLprep: a non-ASCII space is a space for SCRAM-SHA-256. */
    assert_true(converse(SCRAM_SHA_256, "bob", "pass word", "pass\xc2\xa0word", NULL));
}

/* The cache is keyed by mechanism, salt and count: a second conversation with the
 * same salt reuses the keys, another salt derives again. */
static void test_key_cache(void **state)
{
    (void)state;
    scram_client_key_cache_t cache = {0};
    const char *server_first = "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096";
    const char *proof = "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=";
    bson_error_t error;
    char *message;
    size_t length;
    scram_client_t *client = scram_client_new_prepared(SCRAM_SHA_1, "user", "pencil", "fyko+d2lbbFgONRv9qkxdawL", &cache);
    assert_true(scram_client_first_message(client, &message, &length, &error));
    bson_free(message);
    assert_true(scram_client_receive_first(client, (const uint8_t *)server_first, strlen(server_first), &message,
                                           &length, &error));
    bson_free(message);
    scram_client_destroy(client);
    assert_true(cache.valid);
    assert_int_equal(cache.iterations, 4096);
    assert_int_equal(cache.salt_length, 12);

    /* Same salt: the keys come from the cache, not from this (different) password. */
    client = scram_client_new_prepared(SCRAM_SHA_1, "user", "not pencil", "fyko+d2lbbFgONRv9qkxdawL", &cache);
    assert_true(scram_client_first_message(client, &message, &length, &error));
    bson_free(message);
    assert_true(scram_client_receive_first(client, (const uint8_t *)server_first, strlen(server_first), &message,
                                           &length, &error));
    assert_string_equal(message, proof);
    bson_free(message);
    scram_client_destroy(client);

    /* Another iteration count: derived again. */
    const char *other_count = "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4097";
    client = scram_client_new_prepared(SCRAM_SHA_1, "user", "pencil", "fyko+d2lbbFgONRv9qkxdawL", &cache);
    assert_true(scram_client_first_message(client, &message, &length, &error));
    bson_free(message);
    assert_true(scram_client_receive_first(client, (const uint8_t *)other_count, strlen(other_count), &message,
                                           &length, &error));
    assert_string_not_equal(message, proof);
    bson_free(message);
    scram_client_destroy(client);
    assert_int_equal(cache.iterations, 4097);
    scram_client_key_cache_clear(&cache);
    assert_false(cache.valid);
}

/* --- what the client refuses ------------------------------------------------------------- */

static scram_client_t *client_after_first(void)
{
    bson_error_t error;
    char *message;
    size_t length;
    scram_client_t *client = scram_client_new_prepared(SCRAM_SHA_256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO", NULL);
    assert_true(scram_client_first_message(client, &message, &length, &error));
    bson_free(message);
    return client;
}

static void expect_server_first_refused(const char *server_first, int32_t code)
{
    bson_error_t error;
    char *message = NULL;
    size_t length;
    scram_client_t *client = client_after_first();
    assert_false(scram_client_receive_first(client, (const uint8_t *)server_first, strlen(server_first), &message,
                                            &length, &error));
    assert_null(message);
    assert_int_equal(error.code, code);
    /* The conversation is over. */
    assert_false(scram_client_receive_final(client, (const uint8_t *)"v=AAAA", 6, &error));
    assert_int_equal(error.code, 20);
    scram_client_destroy(client);
}

static void test_malformed_server_first_is_refused(void **state)
{
    (void)state;
    const char *salt_and_count = ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    char text[256];
    /* The server's nonce must extend ours, and add to it. */
    snprintf(text, sizeof text, "r=someoneElsesNonce%s", salt_and_count);
    expect_server_first_refused(text, 2);
    snprintf(text, sizeof text, "r=rOprNGfwEbeRWgbNEkqO%s", salt_and_count);
    expect_server_first_refused(text, 2);
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", 2); /* too few */
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999", 2);
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4k", 2);
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,s=not base64,i=4096", 2);
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096", 2);
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,i=4096,s=W22ZaJ0SNY7soEsUEjb6gQ==", 2);
    expect_server_first_refused("r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==", 2);
    expect_server_first_refused("m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", 2);
    expect_server_first_refused("e=unknown-user", 18);
}

static void test_wrong_server_signature_is_refused(void **state)
{
    (void)state;
    const char *server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const char *finals[] = {
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G8=", /* one bit off: a server without the keys */
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl9",     /* too short to be one */
        "e=invalid-proof",
        "x=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    };
    const int32_t codes[] = {18, 18, 18, 2};
    for (size_t i = 0; i < sizeof finals / sizeof finals[0]; i++) {
        bson_error_t error;
        char *message;
        size_t length;
        scram_client_t *client = client_after_first();
        assert_true(scram_client_receive_first(client, (const uint8_t *)server_first, strlen(server_first), &message,
                                               &length, &error));
        bson_free(message);
        assert_false(scram_client_receive_final(client, (const uint8_t *)finals[i], strlen(finals[i]), &error));
        assert_int_equal(error.code, codes[i]);
        assert_false(scram_client_succeeded(client));
        scram_client_destroy(client);
    }
}

static void test_steps_out_of_order_fail(void **state)
{
    (void)state;
    bson_error_t error;
    char *message;
    size_t length;
    scram_client_t *client = scram_client_new_prepared(SCRAM_SHA_1, "user", "pencil", NULL, NULL);
    assert_false(scram_client_receive_first(client, (const uint8_t *)"r=x,s=AAAA,i=4096", 17, &message, &length,
                                            &error));
    assert_int_equal(error.code, 20);
    assert_false(scram_client_first_message(client, &message, &length, &error));
    scram_client_destroy(client);

    client = scram_client_new_prepared(SCRAM_SHA_1, "user", "pencil", NULL, NULL);
    assert_true(scram_client_first_message(client, &message, &length, &error));
    /* A random nonce: 24 bytes in base64. */
    assert_int_equal(length, strlen("n,,n=user,r=") + 32);
    bson_free(message);
    assert_false(scram_client_first_message(client, &message, &length, &error));
    assert_int_equal(error.code, 20);
    scram_client_destroy(client);
    scram_client_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc5802_sha1_vector),
        cmocka_unit_test(test_rfc7677_sha256_vector),
        cmocka_unit_test(test_mongodb_sha1_vector),
        cmocka_unit_test(test_conversations_with_the_server),
        cmocka_unit_test(test_key_cache),
        cmocka_unit_test(test_malformed_server_first_is_refused),
        cmocka_unit_test(test_wrong_server_signature_is_refused),
        cmocka_unit_test(test_steps_out_of_order_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
