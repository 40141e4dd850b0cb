/* The client's side of a SCRAM conversation (RFC 5802 sections 3, 5 and 7; RFC
 * 7677), as MongoDB's drivers run it: GS2 header "n,," (no channel binding, no
 * authzid), the proof computed from the prepared password, and the server's
 * signature checked before the conversation counts as a success. */
#include "security/scram_client.h"

#include "security/base64.h"
#include "security/scram_private.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#define CLIENT_NONCE_RANDOM_BYTES 24
#define GS2_HEADER "n,,"
#define CHANNEL_BINDING "biws" /* base64 of the GS2 header: no channel binding */

typedef enum scram_client_state {
    SCRAM_CLIENT_STARTING,
    SCRAM_CLIENT_AWAITING_SERVER_FIRST,
    SCRAM_CLIENT_AWAITING_SERVER_FINAL,
    SCRAM_CLIENT_SUCCEEDED,
    SCRAM_CLIENT_FAILED,
} scram_client_state_t;

struct scram_client {
    scram_mechanism_t mechanism;
    scram_client_state_t state;
    char *user;              /* escaped for n= */
    char *prepared_password;
    char *client_nonce;
    char *first_bare;        /* client-first-message-bare */
    scram_client_key_cache_t *cache;
    uint8_t server_signature[SCRAM_MAX_HASH_BYTES]; /* what server-final must carry */
};

void scram_client_key_cache_clear(scram_client_key_cache_t *cache)
{
    OPENSSL_cleanse(cache, sizeof *cache);
}

/* RFC 5802 saslname: ',' and '=' are written =2C and =3D. */
static char *escape_user_name(const char *user)
{
    bson_string_t *escaped = bson_string_new(NULL);
    for (const char *character = user; *character != '\0'; character++) {
        if (*character == ',') {
            bson_string_append(escaped, "=2C");
        } else if (*character == '=') {
            bson_string_append(escaped, "=3D");
        } else {
            bson_string_append_c(escaped, *character);
        }
    }
    return bson_string_free(escaped, false);
}

scram_client_t *scram_client_new_prepared(scram_mechanism_t mechanism, const char *user, const char *prepared_password,
                                          const char *client_nonce, scram_client_key_cache_t *cache)
{
    scram_client_t *client = bson_malloc0(sizeof *client);
    client->mechanism = mechanism;
    client->state = SCRAM_CLIENT_STARTING;
    client->user = escape_user_name(user);
    client->prepared_password = bson_strdup(prepared_password);
    client->cache = cache;
    if (client_nonce != NULL) {
        client->client_nonce = bson_strdup(client_nonce);
    } else {
        uint8_t random_bytes[CLIENT_NONCE_RANDOM_BYTES] = {0};
        if (RAND_bytes(random_bytes, sizeof random_bytes) != 1) {
            /* Without randomness no conversation may start: fail every step. */
            client->state = SCRAM_CLIENT_FAILED;
        }
        client->client_nonce = base64_encode_new(random_bytes, sizeof random_bytes);
    }
    return client;
}

scram_client_t *scram_client_new(scram_mechanism_t mechanism, const char *user, const char *password,
                                 scram_client_key_cache_t *cache, bson_error_t *error)
{
    char *prepared = NULL;
    if (!scram_prepare_password(mechanism, user, password, &prepared, error)) {
        return NULL;
    }
    scram_client_t *client = scram_client_new_prepared(mechanism, user, prepared, NULL, cache);
    OPENSSL_cleanse(prepared, strlen(prepared));
    bson_free(prepared);
    return client;
}

void scram_client_destroy(scram_client_t *client)
{
    if (client == NULL) {
        return;
    }
    OPENSSL_cleanse(client->prepared_password, strlen(client->prepared_password));
    OPENSSL_cleanse(client->server_signature, sizeof client->server_signature);
    bson_free(client->prepared_password);
    bson_free(client->user);
    bson_free(client->client_nonce);
    bson_free(client->first_bare);
    bson_free(client);
}

bool scram_client_succeeded(const scram_client_t *client)
{
    return client->state == SCRAM_CLIENT_SUCCEEDED;
}

static bool client_fail(scram_client_t *client, bson_error_t *error, int32_t code, const char *message)
{
    client->state = SCRAM_CLIENT_FAILED;
    return tc_error_set(error, code, "%s", message);
}

static bool client_check_state(scram_client_t *client, scram_client_state_t expected, bson_error_t *error)
{
    if (client->state != expected) {
        client->state = SCRAM_CLIENT_FAILED;
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION, "SCRAM step out of order");
    }
    return true;
}

/* A server's "e=server-error-value" ends the conversation with its reason. */
static bool client_server_error(scram_client_t *client, const char *text, size_t length, bson_error_t *error)
{
    client->state = SCRAM_CLIENT_FAILED;
    return tc_error_set(error, TC_ERR_AUTHENTICATION_FAILED, "the SCRAM server refused: %.*s", (int)(length - 2),
                        text + 2);
}

bool scram_client_first_message(scram_client_t *client, char **out_message, size_t *out_length, bson_error_t *error)
{
    if (!client_check_state(client, SCRAM_CLIENT_STARTING, error)) {
        return false;
    }
    client->first_bare = bson_strdup_printf("n=%s,r=%s", client->user, client->client_nonce);
    *out_message = bson_strdup_printf(GS2_HEADER "%s", client->first_bare);
    *out_length = strlen(*out_message);
    client->state = SCRAM_CLIENT_AWAITING_SERVER_FIRST;
    return true;
}

/* ClientKey and ServerKey for this salt and count: from the cache when it holds
 * them, else derived (and kept there). */
static bool client_keys(scram_client_t *client, const uint8_t *salt, size_t salt_length, uint32_t iterations,
                        uint8_t *out_client_key, uint8_t *out_server_key)
{
    size_t hash_length = scram_hash_length(client->mechanism);
    scram_client_key_cache_t *cache = client->cache;
    if (cache != NULL && cache->valid && cache->mechanism == client->mechanism && cache->iterations == iterations &&
        cache->salt_length == salt_length && memcmp(cache->salt, salt, salt_length) == 0) {
        memcpy(out_client_key, cache->client_key, hash_length);
        memcpy(out_server_key, cache->server_key, hash_length);
        return true;
    }
    uint8_t salted_password[SCRAM_MAX_HASH_BYTES];
    const EVP_MD *digest = client->mechanism == SCRAM_SHA_256 ? EVP_sha256() : EVP_sha1();
    bool ok = PKCS5_PBKDF2_HMAC(client->prepared_password, (int)strlen(client->prepared_password), salt,
                                (int)salt_length, (int)iterations, digest, (int)hash_length, salted_password) == 1 &&
              scram_hmac(client->mechanism, salted_password, hash_length, "Client Key", 10, out_client_key) &&
              scram_hmac(client->mechanism, salted_password, hash_length, "Server Key", 10, out_server_key);
    OPENSSL_cleanse(salted_password, sizeof salted_password);
    if (ok && cache != NULL) {
        cache->valid = true;
        cache->mechanism = client->mechanism;
        memcpy(cache->salt, salt, salt_length);
        cache->salt_length = salt_length;
        cache->iterations = iterations;
        memcpy(cache->client_key, out_client_key, hash_length);
        memcpy(cache->server_key, out_server_key, hash_length);
    }
    return ok;
}

/* Reads "i=" as a decimal count within SCRAM's bounds. */
static bool parse_iterations(const char *text, size_t length, uint32_t *out_iterations)
{
    uint64_t value = 0;
    if (length == 0 || length > 10) {
        return false;
    }
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9') {
            return false;
        }
        value = value * 10 + (uint64_t)(text[i] - '0');
    }
    if (value < SCRAM_MIN_ITERATIONS || value > INT32_MAX) {
        return false;
    }
    *out_iterations = (uint32_t)value;
    return true;
}

bool scram_client_receive_first(scram_client_t *client, const uint8_t *message, size_t length, char **out_message,
                                size_t *out_length, bson_error_t *error)
{
    if (!client_check_state(client, SCRAM_CLIENT_AWAITING_SERVER_FIRST, error)) {
        return false;
    }
    scram_mechanism_t mechanism = client->mechanism;
    size_t hash_length = scram_hash_length(mechanism);
    const char *text = (const char *)message;
    const char *end = text + length;
    const char *cursor = text;
    const char *nonce, *salt_text, *count;
    size_t nonce_length, salt_text_length, count_length;
    uint8_t salt[SCRAM_MAX_SALT_BYTES];
    size_t salt_length;
    uint32_t iterations;
    uint8_t client_key[SCRAM_MAX_HASH_BYTES], server_key[SCRAM_MAX_HASH_BYTES];
    uint8_t stored_key[SCRAM_MAX_HASH_BYTES], client_signature[SCRAM_MAX_HASH_BYTES];
    uint8_t proof[SCRAM_MAX_HASH_BYTES];
    bson_string_t *auth_message = NULL;
    char *without_proof = NULL;
    bool ok = false;

    if (memchr(text, '\0', length) != NULL) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "SCRAM message contains a NUL byte");
    }
    if (length >= 2 && strncmp(text, "e=", 2) == 0) {
        return client_server_error(client, text, length, error);
    }
    if (length >= 2 && strncmp(text, "m=", 2) == 0) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "SCRAM mandatory extensions are not supported");
    }
    if (!scram_next_attribute(&cursor, end, &nonce, &nonce_length) ||
        !scram_next_attribute(&cursor, end, &salt_text, &salt_text_length) ||
        !scram_next_attribute(&cursor, end, &count, &count_length)) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "Incorrect number of arguments for the SCRAM server's "
                                                            "first message");
    }
    size_t client_nonce_length = strlen(client->client_nonce);
    if (nonce_length < 2 || strncmp(nonce, "r=", 2) != 0 || nonce_length - 2 <= client_nonce_length ||
        memcmp(nonce + 2, client->client_nonce, client_nonce_length) != 0) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "the SCRAM server's nonce does not extend the client's");
    }
    if (salt_text_length < 3 || strncmp(salt_text, "s=", 2) != 0 ||
        !base64_decode(salt_text + 2, salt_text_length - 2, salt, sizeof salt, &salt_length) || salt_length == 0) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM salt");
    }
    if (count_length < 2 || strncmp(count, "i=", 2) != 0 ||
        !parse_iterations(count + 2, count_length - 2, &iterations)) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM iteration count (at least 4096)");
    }
    if (!client_keys(client, salt, salt_length, iterations, client_key, server_key)) {
        client_fail(client, error, TC_ERR_INTERNAL, "cannot derive the SCRAM keys");
        goto done;
    }

    /* AuthMessage := client-first-message-bare "," server-first-message ","
     * client-final-message-without-proof */
    without_proof = bson_strdup_printf("c=" CHANNEL_BINDING ",r=%.*s", (int)(nonce_length - 2), nonce + 2);
    auth_message = bson_string_new(client->first_bare);
    bson_string_append_printf(auth_message, ",%.*s,%s", (int)length, text, without_proof);
    if (!scram_hash(mechanism, client_key, hash_length, stored_key) ||
        !scram_hmac(mechanism, stored_key, hash_length, auth_message->str, auth_message->len, client_signature) ||
        !scram_hmac(mechanism, server_key, hash_length, auth_message->str, auth_message->len,
                    client->server_signature)) {
        client_fail(client, error, TC_ERR_INTERNAL, "cannot compute the SCRAM proof");
        goto done;
    }
    for (size_t i = 0; i < hash_length; i++) {
        proof[i] = client_key[i] ^ client_signature[i];
    }
    char *proof_text = base64_encode_new(proof, hash_length);
    *out_message = bson_strdup_printf("%s,p=%s", without_proof, proof_text);
    *out_length = strlen(*out_message);
    bson_free(proof_text);
    client->state = SCRAM_CLIENT_AWAITING_SERVER_FINAL;
    ok = true;
done:
    OPENSSL_cleanse(client_key, sizeof client_key);
    OPENSSL_cleanse(server_key, sizeof server_key);
    OPENSSL_cleanse(stored_key, sizeof stored_key);
    OPENSSL_cleanse(client_signature, sizeof client_signature);
    OPENSSL_cleanse(proof, sizeof proof);
    if (auth_message != NULL) {
        bson_string_free(auth_message, true);
    }
    bson_free(without_proof);
    return ok;
}

bool scram_client_receive_final(scram_client_t *client, const uint8_t *message, size_t length, bson_error_t *error)
{
    if (!client_check_state(client, SCRAM_CLIENT_AWAITING_SERVER_FINAL, error)) {
        return false;
    }
    const char *text = (const char *)message;
    const char *cursor = text;
    const char *verifier;
    size_t verifier_length;
    uint8_t signature[SCRAM_MAX_HASH_BYTES];
    size_t signature_length;
    size_t hash_length = scram_hash_length(client->mechanism);

    if (memchr(text, '\0', length) != NULL) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "SCRAM message contains a NUL byte");
    }
    if (length >= 2 && strncmp(text, "e=", 2) == 0) {
        return client_server_error(client, text, length, error);
    }
    if (!scram_next_attribute(&cursor, text + length, &verifier, &verifier_length) || verifier_length < 3 ||
        strncmp(verifier, "v=", 2) != 0 ||
        !base64_decode(verifier + 2, verifier_length - 2, signature, sizeof signature, &signature_length)) {
        return client_fail(client, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM server signature");
    }
    if (signature_length != hash_length || CRYPTO_memcmp(signature, client->server_signature, hash_length) != 0) {
        return client_fail(client, error, TC_ERR_AUTHENTICATION_FAILED,
                           "the SCRAM server's signature is wrong: it does not hold this user's keys");
    }
    client->state = SCRAM_CLIENT_SUCCEEDED;
    return true;
}
