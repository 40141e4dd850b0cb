/* Tests for src/security/scram.c: the RFC 5802 (SHA-1) and RFC 7677 (SHA-256)
 * test vectors, MongoDB's SCRAM-SHA-1 password digest, and whole conversations
 * against a client written here with OpenSSL directly (not with scram.c), so a
 * mistake shared by both sides cannot hide. */
#include "security/base64.h"
#include "security/scram.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* --- a minimal SCRAM client -------------------------------------------------------- */

typedef struct test_client {
    scram_mechanism_t mechanism;
    char client_nonce[64];
    char first_bare[200];
    char final_message[512];
    uint8_t server_signature[32];
} test_client_t;

static const EVP_MD *digest_of(scram_mechanism_t mechanism)
{
    return mechanism == SCRAM_SHA_256 ? EVP_sha256() : EVP_sha1();
}

static size_t hash_length_of(scram_mechanism_t mechanism)
{
    return mechanism == SCRAM_SHA_256 ? 32 : 20;
}

static void client_first(test_client_t *client, scram_mechanism_t mechanism, const char *encoded_user,
                         const char *nonce, char *out, size_t size)
{
    client->mechanism = mechanism;
    snprintf(client->client_nonce, sizeof client->client_nonce, "%s", nonce);
    snprintf(client->first_bare, sizeof client->first_bare, "n=%s,r=%s", encoded_user, nonce);
    snprintf(out, size, "n,,%s", client->first_bare);
}

/* Parses server-first and builds client-final for the prepared password. */
static void client_final(test_client_t *client, const char *server_first, const char *prepared_password)
{
    scram_mechanism_t mechanism = client->mechanism;
    size_t hash_length = hash_length_of(mechanism);
    char nonce[256], salt_text[128];
    unsigned iterations;
    assert_int_equal(sscanf(server_first, "r=%255[^,],s=%127[^,],i=%u", nonce, salt_text, &iterations), 3);
    assert_memory_equal(nonce, client->client_nonce, strlen(client->client_nonce));
    uint8_t salt[128];
    size_t salt_length;
    assert_true(base64_decode(salt_text, strlen(salt_text), salt, sizeof salt, &salt_length));

    uint8_t salted[32], client_key[32], stored_key[32], server_key[32], client_signature[32], proof[32];
    unsigned int length;
    assert_int_equal(PKCS5_PBKDF2_HMAC(prepared_password, (int)strlen(prepared_password), salt, (int)salt_length,
                                       (int)iterations, digest_of(mechanism), (int)hash_length, salted), 1);
    HMAC(digest_of(mechanism), salted, (int)hash_length, (const uint8_t *)"Client Key", 10, client_key, &length);
    EVP_Digest(client_key, hash_length, stored_key, &length, digest_of(mechanism), NULL);
    HMAC(digest_of(mechanism), salted, (int)hash_length, (const uint8_t *)"Server Key", 10, server_key, &length);

    char without_proof[300];
    snprintf(without_proof, sizeof without_proof, "c=biws,r=%s", nonce);
    char auth_message[1024];
    snprintf(auth_message, sizeof auth_message, "%s,%s,%s", client->first_bare, server_first, without_proof);
    HMAC(digest_of(mechanism), stored_key, (int)hash_length, (const uint8_t *)auth_message, strlen(auth_message),
         client_signature, &length);
    for (size_t i = 0; i < hash_length; i++) {
        proof[i] = client_key[i] ^ client_signature[i];
    }
    HMAC(digest_of(mechanism), server_key, (int)hash_length, (const uint8_t *)auth_message, strlen(auth_message),
         client->server_signature, &length);
    char proof_text[64];
    base64_encode(proof, hash_length, proof_text);
    snprintf(client->final_message, sizeof client->final_message, "%s,p=%s", without_proof, proof_text);
}

static void client_check_server_final(const test_client_t *client, const char *server_final)
{
    char expected[64];
    base64_encode(client->server_signature, hash_length_of(client->mechanism), expected);
    assert_memory_equal(server_final, "v=", 2);
    assert_string_equal(server_final + 2, expected);
}

/* Credentials for user and password the way createUser makes them. */
static scram_credentials_t make_credentials(scram_mechanism_t mechanism, const char *user, const char *password)
{
    scram_credentials_t credentials;
    bson_error_t error;
    assert_true(scram_credentials_generate(mechanism, user, password, 4096, &credentials, &error));
    return credentials;
}

/* Runs a conversation as user with password, against credentials; returns whether
 * the server accepted it; fills error with the server's reason. */
static bool converse(scram_mechanism_t mechanism, const scram_credentials_t *credentials, const char *user,
                     const char *client_password, bson_error_t *error)
{
    test_client_t client;
    char first[256];
    client_first(&client, mechanism, user, "clientnonce123", first, sizeof first);
    scram_server_t *server = scram_server_new(mechanism, NULL);
    bool ok = scram_server_receive_first(server, (const uint8_t *)first, strlen(first), error);
    assert_true(ok);
    assert_string_equal(scram_server_user(server), user);
    char *server_first;
    size_t server_first_length;
    assert_true(scram_server_first_message(server, credentials, &server_first, &server_first_length, error));
    char *prepared;
    assert_true(scram_prepare_password(mechanism, user, client_password, &prepared, error));
    client_final(&client, server_first, prepared);
    bson_free(prepared);
    bson_free(server_first);
    char *server_final = NULL;
    size_t server_final_length;
    ok = scram_server_receive_final(server, (const uint8_t *)client.final_message, strlen(client.final_message),
                                    &server_final, &server_final_length, error);
    assert_int_equal(ok, scram_server_succeeded(server));
    if (ok) {
        client_check_server_final(&client, server_final);
    }
    bson_free(server_final);
    scram_server_destroy(server);
    return ok;
}

/* --- the RFC vectors ----------------------------------------------------------------- */

static void run_vector(scram_mechanism_t mechanism, const char *salt_text, const char *client_first_text,
                       const char *server_nonce, const char *expected_server_first, const char *client_final_text,
                       const char *expected_server_final)
{
    uint8_t salt[64];
    size_t salt_length;
    bson_error_t error;
    scram_credentials_t credentials;
    assert_true(base64_decode(salt_text, strlen(salt_text), salt, sizeof salt, &salt_length));
    assert_true(scram_derive_credentials(mechanism, "pencil", salt, salt_length, 4096, &credentials, &error));

    scram_server_t *server = scram_server_new(mechanism, server_nonce);
    assert_true(scram_server_receive_first(server, (const uint8_t *)client_first_text, strlen(client_first_text),
                                           &error));
    assert_string_equal(scram_server_user(server), "user");
    char *message;
    size_t length;
    assert_true(scram_server_first_message(server, &credentials, &message, &length, &error));
    assert_string_equal(message, expected_server_first);
    assert_int_equal(length, strlen(expected_server_first));
    bson_free(message);
    assert_true(scram_server_receive_final(server, (const uint8_t *)client_final_text, strlen(client_final_text),
                                           &message, &length, &error));
    assert_string_equal(message, expected_server_final);
    assert_true(scram_server_succeeded(server));
    bson_free(message);
    scram_server_destroy(server);
}

static void test_rfc5802_sha1_vector(void **state)
{
    (void)state;
    run_vector(SCRAM_SHA_1, "QSXCR+Q6sek8bf92", "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j",
               "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
               "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
               "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
}

static void test_rfc7677_sha256_vector(void **state)
{
    (void)state;
    run_vector(SCRAM_SHA_256, "W22ZaJ0SNY7soEsUEjb6gQ==", "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
               "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
               "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
               "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
               "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
               "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
}

/* The wrong proof in an RFC conversation is refused with AuthenticationFailed. */
static void test_rfc_vector_with_wrong_proof_fails(void **state)
{
    (void)state;
    uint8_t salt[64];
    size_t salt_length;
    bson_error_t error;
    scram_credentials_t credentials;
    assert_true(base64_decode("QSXCR+Q6sek8bf92", 16, salt, sizeof salt, &salt_length));
    assert_true(scram_derive_credentials(SCRAM_SHA_1, "pencil", salt, salt_length, 4096, &credentials, &error));
    scram_server_t *server = scram_server_new(SCRAM_SHA_1, "3rfcNHYJY1ZVvWVs7j");
    const char *first = "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL";
    assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    char *message;
    size_t length;
    assert_true(scram_server_first_message(server, &credentials, &message, &length, &error));
    bson_free(message);
    /* The last character of the proof changed: one bit of the key differs. */
    const char *final = "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4TQ=";
    message = NULL;
    assert_false(scram_server_receive_final(server, (const uint8_t *)final, strlen(final), &message, &length,
                                            &error));
    assert_null(message);
    assert_int_equal(error.code, 18);
    assert_false(scram_server_succeeded(server));
    scram_server_destroy(server);
}

/* MongoDB's SCRAM-SHA-1 hashes hex(MD5("user:mongo:pencil")), not the password:
 * the auth specification's example conversation. */
static void test_mongodb_sha1_digest_vector(void **state)
{
    (void)state;
    bson_error_t error;
    char *prepared;
    assert_true(scram_prepare_password(SCRAM_SHA_1, "user", "pencil", &prepared, &error));
    assert_string_equal(prepared, "1c33006ec1ffd90f9cadcbcc0e118200");
    uint8_t salt[64];
    size_t salt_length;
    scram_credentials_t credentials;
    assert_true(base64_decode("rQ9ZY3MntBeuP3E1TDVC4w==", 24, salt, sizeof salt, &salt_length));
    assert_true(scram_derive_credentials(SCRAM_SHA_1, prepared, salt, salt_length, 10000, &credentials, &error));
    bson_free(prepared);

    scram_server_t *server = scram_server_new(SCRAM_SHA_1, "Ho+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE");
    const char *first = "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL";
    assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    char *message;
    size_t length;
    assert_true(scram_server_first_message(server, &credentials, &message, &length, &error));
    assert_string_equal(message,
                        "r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,s=rQ9ZY3MntBeuP3E1TDVC4w==,i=10000");
    bson_free(message);
    const char *final = "c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,"
                        "p=MC2T8BvbmWRckDw8oWl5IVghwCY=";
    assert_true(scram_server_receive_final(server, (const uint8_t *)final, strlen(final), &message, &length, &error));
    assert_string_equal(message, "v=UMWeI25JD1yNYZRMpZ4VHvhZ9e0=");
    bson_free(message);
    scram_server_destroy(server);
}

/* --- whole conversations --------------------------------------------------------------- */

static void test_conversation_right_and_wrong_password(void **state)
{
    (void)state;
    bson_error_t error;
    for (int m = 0; m < 2; m++) {
        scram_mechanism_t mechanism = m == 0 ? SCRAM_SHA_1 : SCRAM_SHA_256;
        scram_credentials_t credentials = make_credentials(mechanism, "alice", "s3cret!");
        assert_int_equal(credentials.salt_length, mechanism == SCRAM_SHA_256 ? 28 : 16);
        assert_int_equal(credentials.iterations, 4096);
        assert_true(converse(mechanism, &credentials, "alice", "s3cret!", &error));
        assert_false(converse(mechanism, &credentials, "alice", "s3cret", &error));
        assert_int_equal(error.code, 18);
        assert_false(converse(mechanism, &credentials, "alice", "S3cret!", &error));
        assert_int_equal(error.code, 18);
    }
}

/* The SHA-1 digest includes the user name: the same password under another name
 * gives other keys. */
static void test_sha1_keys_depend_on_the_user_name(void **state)
{
    (void)state;
    bson_error_t error;
    scram_credentials_t credentials = make_credentials(SCRAM_SHA_1, "alice", "pw-alice");
    assert_false(converse(SCRAM_SHA_1, &credentials, "bob", "pw-alice", &error));
}

/* Default iteration counts and fresh salts: two users with one password do not
 * share keys. */
static void test_generate_defaults_and_random_salt(void **state)
{
    (void)state;
    bson_error_t error;
    scram_credentials_t first, second;
    assert_true(scram_credentials_generate(SCRAM_SHA_256, "a", "same", 0, &first, &error));
    assert_true(scram_credentials_generate(SCRAM_SHA_256, "a", "same", 0, &second, &error));
    assert_int_equal(first.iterations, 15000);
    assert_true(memcmp(first.salt, second.salt, first.salt_length) != 0);
    assert_true(memcmp(first.stored_key, second.stored_key, 32) != 0);
    assert_true(scram_credentials_generate(SCRAM_SHA_1, "a", "same", 0, &first, &error));
    assert_int_equal(first.iterations, 10000);
    assert_false(scram_credentials_generate(SCRAM_SHA_1, "a", "same", 100, &first, &error));
    assert_int_equal(error.code, 2);
}

/* SCRAM-SHA-256 hashes the SASLprep'd password: a no-break space equals a space,
 * a soft hyphen vanishes. */
static void test_sha256_password_is_saslprepped(void **state)
{
    (void)state;
    bson_error_t error;
    scram_credentials_t credentials = make_credentials(SCRAM_SHA_256, "u", "pass word");
    assert_true(converse(SCRAM_SHA_256, &credentials, "u", "pass\xC2\xA0word", &error));
    assert_true(converse(SCRAM_SHA_256, &credentials, "u", "pa\xC2\xADss word", &error));
    scram_credentials_t refused;
    assert_false(scram_credentials_generate(SCRAM_SHA_256, "u", "bell\x07", 4096, &refused, &error));
    assert_int_equal(error.code, 2);
    assert_non_null(strstr(error.message, "SCRAM-SHA-256"));
}

/* RFC 5802 saslname: ',' and '=' in a user name travel as =2C and =3D. */
static void test_user_name_escapes(void **state)
{
    (void)state;
    bson_error_t error;
    scram_server_t *server = scram_server_new(SCRAM_SHA_256, NULL);
    const char *first = "n,,n=a=2Cb=3Dc,r=abcdefgh";
    assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    assert_string_equal(scram_server_user(server), "a,b=c");
    scram_server_destroy(server);
}

static void expect_first_refused(const char *first, int32_t code)
{
    bson_error_t error;
    scram_server_t *server = scram_server_new(SCRAM_SHA_256, NULL);
    assert_false(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    assert_int_equal(error.code, code);
    assert_null(scram_server_user(server));
    /* A failed conversation stays failed. */
    assert_false(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    scram_server_destroy(server);
}

static void test_malformed_client_first_is_refused(void **state)
{
    (void)state;
    expect_first_refused("p=tls-unique,,n=user,r=abcdefgh", 2);   /* channel binding */
    expect_first_refused("x,,n=user,r=abcdefgh", 2);              /* GS2 flag */
    expect_first_refused("n,,m=ext,n=user,r=abcdefgh", 2);        /* mandatory extension */
    expect_first_refused("n,,n=,r=abcdefgh", 2);                  /* empty user */
    expect_first_refused("n,,n=user,r=abc", 2);                   /* nonce too short */
    expect_first_refused("n,,r=abcdefgh,n=user", 2);              /* order */
    expect_first_refused("n,,n=user", 2);                         /* no nonce */
    expect_first_refused("n,", 2);
    expect_first_refused("", 2);
    expect_first_refused("n,b=other,n=user,r=abcdefgh", 2);       /* authzid syntax */
    expect_first_refused("n,a=other,n=user,r=abcdefgh", 2);       /* authzid not the user */
}

static void test_authzid_equal_to_user_is_accepted(void **state)
{
    (void)state;
    bson_error_t error;
    scram_server_t *server = scram_server_new(SCRAM_SHA_1, NULL);
    const char *first = "n,a=user,n=user,r=abcdefgh,x=extension";
    assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    assert_string_equal(scram_server_user(server), "user");
    scram_server_destroy(server);
}

/* A client-final whose nonce, channel binding or proof is not what the server
 * expects is refused even with the right password. */
static void test_malformed_client_final_is_refused(void **state)
{
    (void)state;
    bson_error_t error;
    scram_credentials_t credentials = make_credentials(SCRAM_SHA_256, "user", "pw");
    const char *variants[] = {"nonce", "binding", "proof_length", "no_proof", "extra_nul"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        test_client_t client;
        char first[256];
        client_first(&client, SCRAM_SHA_256, "user", "abcdefgh", first, sizeof first);
        scram_server_t *server = scram_server_new(SCRAM_SHA_256, NULL);
        assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
        char *server_first;
        size_t length;
        assert_true(scram_server_first_message(server, &credentials, &server_first, &length, &error));
        char *prepared;
        assert_true(scram_prepare_password(SCRAM_SHA_256, "user", "pw", &prepared, &error));
        client_final(&client, server_first, prepared);
        bson_free(prepared);
        bson_free(server_first);
        char tampered[600];
        size_t tampered_length;
        if (strcmp(variants[v], "nonce") == 0) {
            char *r = strstr(client.final_message, "r=");
            r[2] = r[2] == 'x' ? 'y' : 'x';
            snprintf(tampered, sizeof tampered, "%s", client.final_message);
        } else if (strcmp(variants[v], "binding") == 0) {
            /* "eSws" is base64 of "y,,": the client claims another GS2 header. */
            snprintf(tampered, sizeof tampered, "c=eSws%s", client.final_message + strlen("c=biws"));
        } else if (strcmp(variants[v], "proof_length") == 0) {
            snprintf(tampered, sizeof tampered, "%s", client.final_message);
            char *p = strstr(tampered, ",p=");
            snprintf(p, 10, ",p=AAAA");
        } else if (strcmp(variants[v], "no_proof") == 0) {
            snprintf(tampered, sizeof tampered, "%s", client.final_message);
            *strstr(tampered, ",p=") = '\0';
        } else {
            snprintf(tampered, sizeof tampered, "%s", client.final_message);
        }
        tampered_length = strlen(tampered);
        if (strcmp(variants[v], "extra_nul") == 0) {
            tampered_length++; /* the terminating NUL sent as part of the message */
        }
        char *out = NULL;
        assert_false(scram_server_receive_final(server, (const uint8_t *)tampered, tampered_length, &out, &length,
                                                &error));
        assert_null(out);
        assert_int_equal(error.code, 2);
        assert_false(scram_server_succeeded(server));
        scram_server_destroy(server);
    }
}

static void test_steps_out_of_order_fail(void **state)
{
    (void)state;
    bson_error_t error;
    scram_credentials_t credentials = make_credentials(SCRAM_SHA_1, "user", "pw");
    char *message;
    size_t length;
    scram_server_t *server = scram_server_new(SCRAM_SHA_1, NULL);
    assert_false(scram_server_first_message(server, &credentials, &message, &length, &error));
    assert_int_equal(error.code, 20);
    scram_server_destroy(server);

    server = scram_server_new(SCRAM_SHA_1, NULL);
    const char *final = "c=biws,r=abcdefgh,p=AAAA";
    assert_false(scram_server_receive_final(server, (const uint8_t *)final, strlen(final), &message, &length,
                                            &error));
    scram_server_destroy(server);

    /* Credentials of the other mechanism are refused. */
    server = scram_server_new(SCRAM_SHA_256, NULL);
    const char *first = "n,,n=user,r=abcdefgh";
    assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    assert_false(scram_server_first_message(server, &credentials, &message, &length, &error));
    assert_int_equal(error.code, 2);
    scram_server_destroy(server);
    scram_server_destroy(NULL);
}

/* mongod's server nonce: the client's followed by 24 random bytes in base64. */
static void test_server_nonce_extends_the_client_nonce(void **state)
{
    (void)state;
    bson_error_t error;
    scram_credentials_t credentials = make_credentials(SCRAM_SHA_256, "user", "pw");
    scram_server_t *server = scram_server_new(SCRAM_SHA_256, NULL);
    const char *first = "n,,n=user,r=clientpart";
    assert_true(scram_server_receive_first(server, (const uint8_t *)first, strlen(first), &error));
    char *message;
    size_t length;
    assert_true(scram_server_first_message(server, &credentials, &message, &length, &error));
    assert_memory_equal(message, "r=clientpart", 12);
    const char *comma = strchr(message, ',');
    assert_int_equal(comma - message, 12 + 32);
    assert_memory_equal(comma, ",s=", 3);
    assert_non_null(strstr(message, ",i=4096"));
    bson_free(message);
    scram_server_destroy(server);
}

static void test_mechanism_names(void **state)
{
    (void)state;
    scram_mechanism_t mechanism;
    assert_true(scram_mechanism_from_name("SCRAM-SHA-256", &mechanism));
    assert_int_equal(mechanism, SCRAM_SHA_256);
    assert_true(scram_mechanism_from_name("SCRAM-SHA-1", &mechanism));
    assert_int_equal(mechanism, SCRAM_SHA_1);
    assert_false(scram_mechanism_from_name("scram-sha-1", &mechanism));
    assert_false(scram_mechanism_from_name("PLAIN", &mechanism));
    assert_string_equal(scram_mechanism_name(SCRAM_SHA_256), "SCRAM-SHA-256");
    assert_int_equal(scram_salt_length(SCRAM_SHA_1), 16);
    assert_int_equal(scram_hash_length(SCRAM_SHA_256), 32);
}

static void test_base64_round_trip_and_strictness(void **state)
{
    (void)state;
    uint8_t out[16];
    size_t length;
    char text[32];
    const uint8_t data[] = {0xfb, 0xff, 0x00, 'a', 'b'};
    for (size_t n = 0; n <= sizeof data; n++) {
        base64_encode(data, n, text);
        assert_int_equal(strlen(text), base64_encoded_length(n));
        assert_true(base64_decode(text, strlen(text), out, sizeof out, &length));
        assert_int_equal(length, n);
        assert_memory_equal(out, data, n);
    }
    assert_string_equal((base64_encode((const uint8_t *)"n,,", 3, text), text), "biws");
    assert_false(base64_decode("biw", 3, out, sizeof out, &length));      /* length */
    assert_false(base64_decode("bi=s", 4, out, sizeof out, &length));     /* padding inside */
    assert_false(base64_decode("b!ws", 4, out, sizeof out, &length));     /* alphabet */
    assert_false(base64_decode("YR==", 4, out, sizeof out, &length));     /* non-zero pad bits */
    assert_false(base64_decode("YWFh", 4, out, 2, &length));              /* capacity */
    assert_true(base64_decode("", 0, out, sizeof out, &length));
    assert_int_equal(length, 0);
}

/* Credentials written into a user document as mongod stores them read back the
 * same; a document with a key of the wrong length or no such mechanism gives none. */
static void test_credentials_in_user_documents(void **state)
{
    (void)state;
    scram_credentials_t both[2] = {make_credentials(SCRAM_SHA_1, "u", "pw"), make_credentials(SCRAM_SHA_256, "u", "pw")};
    scram_credentials_t read;
    bson_t document = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&document, "user", "u");
    scram_credentials_append_document(&document, "credentials", both, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_true(scram_credentials_from_user_document(&document, both[i].mechanism, &read));
        assert_int_equal(read.iterations, 4096);
        assert_int_equal(read.salt_length, both[i].salt_length);
        assert_memory_equal(read.salt, both[i].salt, read.salt_length);
        assert_memory_equal(read.stored_key, both[i].stored_key, scram_hash_length(both[i].mechanism));
        assert_memory_equal(read.server_key, both[i].server_key, scram_hash_length(both[i].mechanism));
    }
    bson_destroy(&document);

    bson_t only_sha1 = BSON_INITIALIZER;
    scram_credentials_append_document(&only_sha1, "credentials", both, 1);
    assert_false(scram_credentials_from_user_document(&only_sha1, SCRAM_SHA_256, &read));
    bson_destroy(&only_sha1);

    /* A 32-byte stored key under the SHA-1 name: the wrong length. */
    const char *key20 = "AAAAAAAAAAAAAAAAAAAAAAAAAAA=", *key32 = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    bson_t *right = BCON_NEW("credentials", "{", "SCRAM-SHA-1", "{", "iterationCount", BCON_INT32(10000), "salt",
                             "c2FsdA==", "storedKey", key20, "serverKey", key20, "}", "}");
    bson_t *wrong = BCON_NEW("credentials", "{", "SCRAM-SHA-1", "{", "iterationCount", BCON_INT32(10000), "salt",
                             "c2FsdA==", "storedKey", key32, "serverKey", key20, "}", "}");
    assert_true(scram_credentials_from_user_document(right, SCRAM_SHA_1, &read));
    assert_false(scram_credentials_from_user_document(wrong, SCRAM_SHA_1, &read));
    bson_destroy(right);
    bson_destroy(wrong);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc5802_sha1_vector),
        cmocka_unit_test(test_rfc7677_sha256_vector),
        cmocka_unit_test(test_rfc_vector_with_wrong_proof_fails),
        cmocka_unit_test(test_mongodb_sha1_digest_vector),
        cmocka_unit_test(test_conversation_right_and_wrong_password),
        cmocka_unit_test(test_sha1_keys_depend_on_the_user_name),
        cmocka_unit_test(test_generate_defaults_and_random_salt),
        cmocka_unit_test(test_sha256_password_is_saslprepped),
        cmocka_unit_test(test_user_name_escapes),
        cmocka_unit_test(test_malformed_client_first_is_refused),
        cmocka_unit_test(test_authzid_equal_to_user_is_accepted),
        cmocka_unit_test(test_malformed_client_final_is_refused),
        cmocka_unit_test(test_steps_out_of_order_fail),
        cmocka_unit_test(test_server_nonce_extends_the_client_nonce),
        cmocka_unit_test(test_mechanism_names),
        cmocka_unit_test(test_base64_round_trip_and_strictness),
        cmocka_unit_test(test_credentials_in_user_documents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
