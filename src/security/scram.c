/* SCRAM-SHA-1 and SCRAM-SHA-256: credential derivation, the server's side of
 * the conversation (RFC 5802 sections 3, 5 and 7; RFC 7677), parsed as mongod
 * parses it (sasl_scram_server_conversation.cpp): GS2 header "n" or "y" without
 * channel binding, no mandatory extensions, extra attributes ignored; and the
 * credentials as user documents hold them. */
#include "security/scram.h"
#include "security/scram_private.h"

#include "security/base64.h"
#include "security/saslprep.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#define SERVER_NONCE_RANDOM_BYTES 24
#define MIN_CLIENT_NONCE_LENGTH 4 /* mongod wants "r=" plus at least 4 characters */

typedef enum scram_server_state {
    SCRAM_AWAITING_CLIENT_FIRST,
    SCRAM_AWAITING_CREDENTIALS,
    SCRAM_AWAITING_CLIENT_FINAL,
    SCRAM_SUCCEEDED,
    SCRAM_FAILED,
} scram_server_state_t;

struct scram_server {
    scram_mechanism_t mechanism;
    scram_server_state_t state;
    char *server_nonce;
    char *gs2_header;        /* "n,," as the client sent it: the channel binding repeats it */
    char *user;
    char *combined_nonce;    /* client nonce + server nonce */
    bson_string_t *auth_message;
    scram_credentials_t credentials;
};

static const EVP_MD *scram_digest(scram_mechanism_t mechanism)
{
    return mechanism == SCRAM_SHA_256 ? EVP_sha256() : EVP_sha1();
}

const char *scram_mechanism_name(scram_mechanism_t mechanism)
{
    return mechanism == SCRAM_SHA_256 ? "SCRAM-SHA-256" : "SCRAM-SHA-1";
}

bool scram_mechanism_from_name(const char *name, scram_mechanism_t *out_mechanism)
{
    if (strcmp(name, "SCRAM-SHA-256") == 0) {
        *out_mechanism = SCRAM_SHA_256;
        return true;
    }
    if (strcmp(name, "SCRAM-SHA-1") == 0) {
        *out_mechanism = SCRAM_SHA_1;
        return true;
    }
    return false;
}

size_t scram_hash_length(scram_mechanism_t mechanism)
{
    return mechanism == SCRAM_SHA_256 ? 32 : 20;
}

size_t scram_salt_length(scram_mechanism_t mechanism)
{
    return scram_hash_length(mechanism) - 4;
}

bool scram_hmac(scram_mechanism_t mechanism, const uint8_t *key, size_t key_length, const void *data,
                       size_t data_length, uint8_t *out)
{
    unsigned int out_length = 0;
    return HMAC(scram_digest(mechanism), key, (int)key_length, data, data_length, out, &out_length) != NULL &&
           out_length == scram_hash_length(mechanism);
}

bool scram_hash(scram_mechanism_t mechanism, const uint8_t *data, size_t length, uint8_t *out)
{
    unsigned int out_length = 0;
    return EVP_Digest(data, length, out, &out_length, scram_digest(mechanism), NULL) == 1 &&
           out_length == scram_hash_length(mechanism);
}

bool scram_prepare_password(scram_mechanism_t mechanism, const char *user, const char *password,
                            char **out_prepared, bson_error_t *error)
{
    if (mechanism == SCRAM_SHA_256) {
        if (!saslprep(password, out_prepared, error)) {
            tc_error_prefix(error, "Error preflighting SCRAM-SHA-256 password: ");
            return false;
        }
        return true;
    }
    /* MongoDB's SCRAM-SHA-1 hashes the legacy MONGODB-CR digest, not the password. */
    uint8_t digest[16];
    unsigned int digest_length = 0;
    char *input = bson_strdup_printf("%s:mongo:%s", user, password);
    bool hashed = EVP_Digest(input, strlen(input), digest, &digest_length, EVP_md5(), NULL) == 1;
    OPENSSL_cleanse(input, strlen(input));
    bson_free(input);
    if (!hashed || digest_length != sizeof digest) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot compute the SCRAM-SHA-1 password digest");
    }
    char *hex = bson_malloc(2 * sizeof digest + 1);
    for (size_t i = 0; i < sizeof digest; i++) {
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    }
    OPENSSL_cleanse(digest, sizeof digest);
    *out_prepared = hex;
    return true;
}

bool scram_derive_credentials(scram_mechanism_t mechanism, const char *prepared_password, const uint8_t *salt,
                              size_t salt_length, uint32_t iterations, scram_credentials_t *out_credentials,
                              bson_error_t *error)
{
    size_t hash_length = scram_hash_length(mechanism);
    uint8_t salted_password[SCRAM_MAX_HASH_BYTES];
    uint8_t client_key[SCRAM_MAX_HASH_BYTES];
    bool ok = false;

    if (salt_length == 0 || salt_length > SCRAM_MAX_SALT_BYTES) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "a SCRAM salt must have 1 to %d bytes, not %zu",
                            SCRAM_MAX_SALT_BYTES, salt_length);
    }
    if (iterations < SCRAM_MIN_ITERATIONS || iterations > INT32_MAX) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "a SCRAM iteration count must be at least %d, not %u",
                            SCRAM_MIN_ITERATIONS, (unsigned)iterations);
    }
    memset(out_credentials, 0, sizeof *out_credentials);
    out_credentials->mechanism = mechanism;
    out_credentials->iterations = iterations;
    memcpy(out_credentials->salt, salt, salt_length);
    out_credentials->salt_length = salt_length;

    /* Hi() of RFC 5802 is PBKDF2 with HMAC and one block of output. */
    if (PKCS5_PBKDF2_HMAC(prepared_password, (int)strlen(prepared_password), salt, (int)salt_length,
                          (int)iterations, scram_digest(mechanism), (int)hash_length, salted_password) != 1 ||
        !scram_hmac(mechanism, salted_password, hash_length, "Client Key", 10, client_key) ||
        !scram_hash(mechanism, client_key, hash_length, out_credentials->stored_key) ||
        !scram_hmac(mechanism, salted_password, hash_length, "Server Key", 10, out_credentials->server_key)) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot derive %s credentials", scram_mechanism_name(mechanism));
        goto done;
    }
    ok = true;
done:
    OPENSSL_cleanse(salted_password, sizeof salted_password);
    OPENSSL_cleanse(client_key, sizeof client_key);
    return ok;
}

bool scram_credentials_generate(scram_mechanism_t mechanism, const char *user, const char *password,
                                uint32_t iterations, scram_credentials_t *out_credentials, bson_error_t *error)
{
    uint8_t salt[SCRAM_MAX_SALT_BYTES];
    size_t salt_length = scram_salt_length(mechanism);
    char *prepared = NULL;
    if (iterations == 0) {
        iterations = mechanism == SCRAM_SHA_256 ? SCRAM_SHA_256_DEFAULT_ITERATIONS : SCRAM_SHA_1_DEFAULT_ITERATIONS;
    }
    if (RAND_bytes(salt, (int)salt_length) != 1) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot draw a random salt");
    }
    if (!scram_prepare_password(mechanism, user, password, &prepared, error)) {
        return false;
    }
    bool ok = scram_derive_credentials(mechanism, prepared, salt, salt_length, iterations, out_credentials, error);
    OPENSSL_cleanse(prepared, strlen(prepared));
    bson_free(prepared);
    return ok;
}

/* --- server conversation ------------------------------------------------------- */

scram_server_t *scram_server_new(scram_mechanism_t mechanism, const char *server_nonce)
{
    scram_server_t *server = bson_malloc0(sizeof *server);
    server->mechanism = mechanism;
    server->state = SCRAM_AWAITING_CLIENT_FIRST;
    if (server_nonce != NULL) {
        server->server_nonce = bson_strdup(server_nonce);
    } else {
        uint8_t random_bytes[SERVER_NONCE_RANDOM_BYTES] = {0};
        if (RAND_bytes(random_bytes, sizeof random_bytes) != 1) {
            /* Without randomness no conversation may start: fail every step. */
            server->state = SCRAM_FAILED;
        }
        server->server_nonce = base64_encode_new(random_bytes, sizeof random_bytes);
    }
    return server;
}

void scram_server_destroy(scram_server_t *server)
{
    if (server == NULL) {
        return;
    }
    OPENSSL_cleanse(&server->credentials, sizeof server->credentials);
    bson_free(server->server_nonce);
    bson_free(server->gs2_header);
    bson_free(server->user);
    bson_free(server->combined_nonce);
    if (server->auth_message != NULL) {
        bson_string_free(server->auth_message, true);
    }
    bson_free(server);
}

scram_mechanism_t scram_server_mechanism(const scram_server_t *server)
{
    return server->mechanism;
}

const char *scram_server_user(const scram_server_t *server)
{
    return server->user;
}

bool scram_server_succeeded(const scram_server_t *server)
{
    return server->state == SCRAM_SUCCEEDED;
}

static bool scram_server_fail(scram_server_t *server, bson_error_t *error, int32_t code, const char *message)
{
    server->state = SCRAM_FAILED;
    return tc_error_set(error, code, "%s", message);
}

static bool scram_server_check_state(scram_server_t *server, scram_server_state_t expected, bson_error_t *error)
{
    if (server->state != expected) {
        server->state = SCRAM_FAILED;
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION, "SCRAM step out of order");
    }
    return true;
}

bool scram_next_attribute(const char **cursor, const char *end, const char **out_start, size_t *out_length)
{
    if (*cursor >= end) {
        return false;
    }
    const char *comma = memchr(*cursor, ',', (size_t)(end - *cursor));
    const char *stop = comma != NULL ? comma : end;
    *out_start = *cursor;
    *out_length = (size_t)(stop - *cursor);
    *cursor = comma != NULL ? comma + 1 : end;
    return true;
}

/* RFC 5802 saslname: "=2C" stands for ',' and "=3D" for '='. */
static char *decode_user_name(const char *text, size_t length)
{
    char *decoded = bson_malloc(length + 1);
    size_t written = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] == '=' && length - i >= 3) {
            if (strncmp(text + i, "=2C", 3) == 0) {
                decoded[written++] = ',';
                i += 2;
                continue;
            }
            if (strncmp(text + i, "=3D", 3) == 0) {
                decoded[written++] = '=';
                i += 2;
                continue;
            }
        }
        decoded[written++] = text[i];
    }
    decoded[written] = '\0';
    return decoded;
}

bool scram_server_receive_first(scram_server_t *server, const uint8_t *message, size_t length,
                                bson_error_t *error)
{
    if (!scram_server_check_state(server, SCRAM_AWAITING_CLIENT_FIRST, error)) {
        return false;
    }
    const char *text = (const char *)message;
    const char *end = text + length;
    const char *cursor = text;
    const char *flag, *authorization_id, *user, *nonce;
    size_t flag_length, authorization_id_length, user_length, nonce_length;

    if (memchr(text, '\0', length) != NULL) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "SCRAM message contains a NUL byte");
    }
    if (!scram_next_attribute(&cursor, end, &flag, &flag_length) || cursor == end) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE,
                                 "Incorrect number of arguments for first SCRAM client message");
    }
    if (flag_length >= 2 && strncmp(flag, "p=", 2) == 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Server does not support channel binding");
    }
    if (flag_length != 1 || (flag[0] != 'n' && flag[0] != 'y')) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM client message prefix");
    }
    if (!scram_next_attribute(&cursor, end, &authorization_id, &authorization_id_length) ||
        cursor[-1] != ',') {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE,
                                 "Incorrect number of arguments for first SCRAM client message");
    }
    if (authorization_id_length > 0 &&
        (authorization_id_length < 2 || strncmp(authorization_id, "a=", 2) != 0)) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM authzid");
    }
    size_t gs2_header_length = (size_t)(cursor - text);
    const char *bare = cursor;
    if (end - bare >= 2 && strncmp(bare, "m=", 2) == 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "SCRAM mandatory extensions are not supported");
    }
    if (!scram_next_attribute(&cursor, end, &user, &user_length) ||
        !scram_next_attribute(&cursor, end, &nonce, &nonce_length)) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE,
                                 "Incorrect number of arguments for first SCRAM client message");
    }
    if (user_length < 3 || strncmp(user, "n=", 2) != 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Invalid SCRAM user name");
    }
    if (nonce_length < 2 + MIN_CLIENT_NONCE_LENGTH || strncmp(nonce, "r=", 2) != 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Invalid SCRAM client nonce");
    }
    char *decoded_user = decode_user_name(user + 2, user_length - 2);
    if (authorization_id_length > 0 &&
        (authorization_id_length - 2 != strlen(decoded_user) ||
         strncmp(authorization_id + 2, decoded_user, authorization_id_length - 2) != 0)) {
        bson_free(decoded_user);
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "SCRAM user name does not match authzid");
    }
    server->user = decoded_user;
    server->gs2_header = bson_strndup(text, gs2_header_length);
    server->combined_nonce = bson_strdup_printf("%.*s%s", (int)(nonce_length - 2), nonce + 2, server->server_nonce);
    server->auth_message = bson_string_new(NULL);
    bson_string_append_printf(server->auth_message, "%.*s", (int)(end - bare), bare);
    server->state = SCRAM_AWAITING_CREDENTIALS;
    return true;
}

bool scram_server_first_message(scram_server_t *server, const scram_credentials_t *credentials,
                                char **out_message, size_t *out_length, bson_error_t *error)
{
    if (!scram_server_check_state(server, SCRAM_AWAITING_CREDENTIALS, error)) {
        return false;
    }
    if (credentials->mechanism != server->mechanism || credentials->salt_length == 0 ||
        credentials->salt_length > SCRAM_MAX_SALT_BYTES) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "credentials do not fit the SCRAM mechanism");
    }
    server->credentials = *credentials;
    char *salt = base64_encode_new(credentials->salt, credentials->salt_length);
    char *message = bson_strdup_printf("r=%s,s=%s,i=%u", server->combined_nonce, salt,
                                       (unsigned)credentials->iterations);
    bson_free(salt);
    bson_string_append_printf(server->auth_message, ",%s", message);
    server->state = SCRAM_AWAITING_CLIENT_FINAL;
    *out_message = message;
    *out_length = strlen(message);
    return true;
}

bool scram_server_receive_final(scram_server_t *server, const uint8_t *message, size_t length,
                                char **out_message, size_t *out_length, bson_error_t *error)
{
    if (!scram_server_check_state(server, SCRAM_AWAITING_CLIENT_FINAL, error)) {
        return false;
    }
    scram_mechanism_t mechanism = server->mechanism;
    size_t hash_length = scram_hash_length(mechanism);
    const char *text = (const char *)message;
    const char *end = text + length;
    const char *cursor = text;
    const char *binding, *nonce;
    size_t binding_length, nonce_length;
    uint8_t binding_bytes[256];
    size_t binding_bytes_length;
    uint8_t proof[SCRAM_MAX_HASH_BYTES];
    size_t proof_length;
    uint8_t client_signature[SCRAM_MAX_HASH_BYTES];
    uint8_t client_key[SCRAM_MAX_HASH_BYTES];
    uint8_t stored_key[SCRAM_MAX_HASH_BYTES];
    uint8_t server_signature[SCRAM_MAX_HASH_BYTES];
    bool ok = false;

    if (memchr(text, '\0', length) != NULL) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "SCRAM message contains a NUL byte");
    }
    const char *last_comma = NULL;
    for (const char *scan = text; scan < end; scan++) {
        if (*scan == ',') {
            last_comma = scan;
        }
    }
    if (last_comma == NULL || end - last_comma < 4 || strncmp(last_comma + 1, "p=", 2) != 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM ClientProof");
    }
    if (!base64_decode(last_comma + 3, (size_t)(end - last_comma - 3), proof, sizeof proof, &proof_length) ||
        proof_length != hash_length) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM ClientProof");
    }
    if (!scram_next_attribute(&cursor, last_comma, &binding, &binding_length) ||
        !scram_next_attribute(&cursor, last_comma, &nonce, &nonce_length)) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE,
                                 "Incorrect number of arguments for second SCRAM client message");
    }
    if (binding_length < 3 || strncmp(binding, "c=", 2) != 0 ||
        !base64_decode(binding + 2, binding_length - 2, binding_bytes, sizeof binding_bytes, &binding_bytes_length) ||
        binding_bytes_length != strlen(server->gs2_header) ||
        memcmp(binding_bytes, server->gs2_header, binding_bytes_length) != 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE, "Incorrect SCRAM channel binding");
    }
    if (nonce_length < 2 || strncmp(nonce, "r=", 2) != 0 || nonce_length - 2 != strlen(server->combined_nonce) ||
        memcmp(nonce + 2, server->combined_nonce, nonce_length - 2) != 0) {
        return scram_server_fail(server, error, TC_ERR_BAD_VALUE,
                                 "Unmatched SCRAM nonce received from client in second step");
    }

    /* AuthMessage := client-first-message-bare "," server-first-message ","
     * client-final-message-without-proof */
    bson_string_append_printf(server->auth_message, ",%.*s", (int)(last_comma - text), text);
    const char *auth_message = server->auth_message->str;
    size_t auth_message_length = server->auth_message->len;
    if (!scram_hmac(mechanism, server->credentials.stored_key, hash_length, auth_message, auth_message_length,
                    client_signature)) {
        scram_server_fail(server, error, TC_ERR_INTERNAL, "cannot compute the SCRAM client signature");
        goto done;
    }
    for (size_t i = 0; i < hash_length; i++) {
        client_key[i] = proof[i] ^ client_signature[i];
    }
    if (!scram_hash(mechanism, client_key, hash_length, stored_key)) {
        scram_server_fail(server, error, TC_ERR_INTERNAL, "cannot compute the SCRAM stored key");
        goto done;
    }
    if (CRYPTO_memcmp(stored_key, server->credentials.stored_key, hash_length) != 0) {
        scram_server_fail(server, error, TC_ERR_AUTHENTICATION_FAILED, "SCRAM authentication failed, storedKey mismatch");
        goto done;
    }
    if (!scram_hmac(mechanism, server->credentials.server_key, hash_length, auth_message, auth_message_length,
                    server_signature)) {
        scram_server_fail(server, error, TC_ERR_INTERNAL, "cannot compute the SCRAM server signature");
        goto done;
    }
    char *signature = base64_encode_new(server_signature, hash_length);
    *out_message = bson_strdup_printf("v=%s", signature);
    *out_length = strlen(*out_message);
    bson_free(signature);
    server->state = SCRAM_SUCCEEDED;
    ok = true;
done:
    OPENSSL_cleanse(client_key, sizeof client_key);
    OPENSSL_cleanse(client_signature, sizeof client_signature);
    return ok;
}

/* --- credentials in user documents ------------------------------------------------- */

static bool read_base64_field(const bson_t *document, const char *field, uint8_t *out, size_t capacity,
                              size_t *out_length)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, document, field) || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return false;
    }
    uint32_t length;
    const char *text = bson_iter_utf8(&iter, &length);
    return base64_decode(text, length, out, capacity, out_length);
}

bool scram_credentials_from_user_document(const bson_t *document, scram_mechanism_t mechanism, scram_credentials_t *out_credentials)
{
    bson_iter_t iter, entry;
    uint32_t length;
    const uint8_t *data;
    bson_t credentials;
    size_t key_length;
    size_t hash_length = scram_hash_length(mechanism);
    if (!bson_iter_init_find(&iter, document, "credentials") || !BSON_ITER_HOLDS_DOCUMENT(&iter) ||
        !bson_iter_recurse(&iter, &entry) || !bson_iter_find(&entry, scram_mechanism_name(mechanism)) ||
        !BSON_ITER_HOLDS_DOCUMENT(&entry)) {
        return false;
    }
    bson_iter_document(&entry, &length, &data);
    if (!bson_init_static(&credentials, data, length)) {
        return false;
    }
    memset(out_credentials, 0, sizeof *out_credentials);
    out_credentials->mechanism = mechanism;
    if (!bson_iter_init_find(&iter, &credentials, "iterationCount") || !BSON_ITER_HOLDS_NUMBER(&iter) ||
        bson_iter_as_int64(&iter) < 1 || bson_iter_as_int64(&iter) > INT32_MAX) {
        return false;
    }
    out_credentials->iterations = (uint32_t)bson_iter_as_int64(&iter);
    return read_base64_field(&credentials, "salt", out_credentials->salt, sizeof out_credentials->salt,
                             &out_credentials->salt_length) &&
           out_credentials->salt_length > 0 &&
           read_base64_field(&credentials, "storedKey", out_credentials->stored_key,
                             sizeof out_credentials->stored_key, &key_length) &&
           key_length == hash_length &&
           read_base64_field(&credentials, "serverKey", out_credentials->server_key,
                             sizeof out_credentials->server_key, &key_length) &&
           key_length == hash_length;
}

void scram_credentials_append_document(bson_t *out, const char *key, const scram_credentials_t *credentials,
                                   size_t count)
{
    bson_t all;
    BSON_APPEND_DOCUMENT_BEGIN(out, key, &all);
    for (size_t i = 0; i < count; i++) {
        const scram_credentials_t *one = &credentials[i];
        size_t hash_length = scram_hash_length(one->mechanism);
        bson_t entry;
        char *salt = base64_encode_new(one->salt, one->salt_length);
        char *stored_key = base64_encode_new(one->stored_key, hash_length);
        char *server_key = base64_encode_new(one->server_key, hash_length);
        BSON_APPEND_DOCUMENT_BEGIN(&all, scram_mechanism_name(one->mechanism), &entry);
        BSON_APPEND_INT32(&entry, "iterationCount", (int32_t)one->iterations);
        BSON_APPEND_UTF8(&entry, "salt", salt);
        BSON_APPEND_UTF8(&entry, "storedKey", stored_key);
        BSON_APPEND_UTF8(&entry, "serverKey", server_key);
        bson_append_document_end(&all, &entry);
        bson_free(salt);
        bson_free(stored_key);
        bson_free(server_key);
    }
    bson_append_document_end(out, &all);
}
