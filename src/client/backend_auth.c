/* A pool's own authentication to a tier (backend_auth.h): the URI's
 * credentials, mechanism negotiation through hello's saslSupportedMechs, and
 * the three SCRAM steps over OP_MSG:
 *
 *   saslStart {mechanism, payload: client-first, options: {skipEmptyExchange}}
 *     -> {conversationId, done: false, payload: server-first}
 *   saslContinue {payload: client-final (the proof)}
 *     -> {done: true, payload: server-final}       (checked: the server's signature)
 *   [saslContinue {payload: ""} -> {done: true}]   (a server that ignores skipEmptyExchange)
 *
 * Each pool keeps the keys its password gives for the tier's salt
 * (scram_client_key_cache_t), so only its first connection pays for PBKDF2. */
#include "client/backend_auth.h"

#include "security/scram_client.h"
#include "wire/wire.h"

#include <openssl/crypto.h>
#include <string.h>

typedef enum backend_auth_state {
    BACKEND_AUTH_AWAITING_SERVER_FIRST,
    BACKEND_AUTH_AWAITING_SERVER_FINAL,
    BACKEND_AUTH_AWAITING_DONE,
} backend_auth_state_t;

struct backend_credentials {
    char *user;
    char *password;
    char *source;            /* authSource, or the URI's database, or admin */
    bool mechanism_given;
    scram_mechanism_t mechanism;
    char *principal;         /* user@source */
    scram_client_key_cache_t key_caches[2]; /* per mechanism */
};

struct backend_auth {
    backend_credentials_t *credentials;
    scram_client_t *client;
    backend_auth_state_t state;
    int32_t conversation_id;
};

bool backend_credentials_from_uri(const mongoc_uri_t *uri, backend_credentials_t **out_credentials,
                                  bson_error_t *error)
{
    const char *user = mongoc_uri_get_username(uri);
    const char *mechanism = mongoc_uri_get_auth_mechanism(uri);
    *out_credentials = NULL;
    if (user == NULL) {
        return true;
    }
    backend_credentials_t *credentials = bson_malloc0(sizeof *credentials);
    if (mechanism != NULL) {
        if (!scram_mechanism_from_name(mechanism, &credentials->mechanism)) {
            bson_free(credentials);
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "the proxy authenticates to a tier with SCRAM-SHA-256 or SCRAM-SHA-1, not %s",
                                mechanism);
        }
        credentials->mechanism_given = true;
    }
    const char *password = mongoc_uri_get_password(uri);
    credentials->user = bson_strdup(user);
    credentials->password = bson_strdup(password != NULL ? password : "");
    credentials->source = bson_strdup(mongoc_uri_get_auth_source(uri));
    credentials->principal = bson_strdup_printf("%s@%s", credentials->user, credentials->source);
    *out_credentials = credentials;
    return true;
}

void backend_credentials_destroy(backend_credentials_t *credentials)
{
    if (credentials == NULL) {
        return;
    }
    OPENSSL_cleanse(credentials->password, strlen(credentials->password));
    for (size_t i = 0; i < 2; i++) {
        scram_client_key_cache_clear(&credentials->key_caches[i]);
    }
    bson_free(credentials->user);
    bson_free(credentials->password);
    bson_free(credentials->source);
    bson_free(credentials->principal);
    bson_free(credentials);
}

const char *backend_credentials_principal(const backend_credentials_t *credentials)
{
    return credentials->principal;
}

void backend_credentials_append_hello(const backend_credentials_t *credentials, bson_t *hello)
{
    if (!credentials->mechanism_given) {
        char *qualified = bson_strdup_printf("%s.%s", credentials->source, credentials->user);
        BSON_APPEND_UTF8(hello, "saslSupportedMechs", qualified);
        bson_free(qualified);
    }
}

/* The drivers' rule: SCRAM-SHA-256 when the server lists it for the user, else
 * SCRAM-SHA-1. */
static scram_mechanism_t negotiated_mechanism(const bson_t *hello_reply)
{
    bson_iter_t iter, mechanisms;
    if (hello_reply != NULL && bson_iter_init_find(&iter, hello_reply, "saslSupportedMechs") &&
        BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &mechanisms)) {
        while (bson_iter_next(&mechanisms)) {
            if (BSON_ITER_HOLDS_UTF8(&mechanisms) && strcmp(bson_iter_utf8(&mechanisms, NULL), "SCRAM-SHA-256") == 0) {
                return SCRAM_SHA_256;
            }
        }
    }
    return SCRAM_SHA_1;
}

static bool build_message(const bson_t *command, uint8_t **out_message, size_t *out_length, bson_error_t *error)
{
    return wire_op_msg_build(0, 0, 0, command, NULL, 0, out_message, out_length, error);
}

/* saslContinue with payload, on the credentials' database. */
static bool build_continue(const backend_auth_t *auth, const char *payload, size_t payload_length,
                           uint8_t **out_message, size_t *out_length, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER;
    BSON_APPEND_INT32(&command, "saslContinue", 1);
    BSON_APPEND_INT32(&command, "conversationId", auth->conversation_id);
    BSON_APPEND_BINARY(&command, "payload", BSON_SUBTYPE_BINARY, (const uint8_t *)payload, (uint32_t)payload_length);
    BSON_APPEND_UTF8(&command, "$db", auth->credentials->source);
    bool ok = build_message(&command, out_message, out_length, error);
    bson_destroy(&command);
    return ok;
}

backend_auth_t *backend_auth_start(backend_credentials_t *credentials, const bson_t *hello_reply,
                                   uint8_t **out_message, size_t *out_length, bson_error_t *error)
{
    scram_mechanism_t mechanism = credentials->mechanism_given ? credentials->mechanism
                                                               : negotiated_mechanism(hello_reply);
    scram_client_t *client = scram_client_new(mechanism, credentials->user, credentials->password,
                                              &credentials->key_caches[mechanism], error);
    if (client == NULL) {
        return NULL;
    }
    char *first = NULL;
    size_t first_length;
    if (!scram_client_first_message(client, &first, &first_length, error)) {
        scram_client_destroy(client);
        return NULL;
    }
    bson_t command = BSON_INITIALIZER, options;
    BSON_APPEND_INT32(&command, "saslStart", 1);
    BSON_APPEND_UTF8(&command, "mechanism", scram_mechanism_name(mechanism));
    BSON_APPEND_BINARY(&command, "payload", BSON_SUBTYPE_BINARY, (const uint8_t *)first, (uint32_t)first_length);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "options", &options);
    BSON_APPEND_BOOL(&options, "skipEmptyExchange", true);
    bson_append_document_end(&command, &options);
    BSON_APPEND_UTF8(&command, "$db", credentials->source);
    bool built = build_message(&command, out_message, out_length, error);
    bson_destroy(&command);
    bson_free(first);
    if (!built) {
        scram_client_destroy(client);
        return NULL;
    }
    backend_auth_t *auth = bson_malloc0(sizeof *auth);
    auth->credentials = credentials;
    auth->client = client;
    auth->state = BACKEND_AUTH_AWAITING_SERVER_FIRST;
    return auth;
}

void backend_auth_destroy(backend_auth_t *auth)
{
    if (auth == NULL) {
        return;
    }
    scram_client_destroy(auth->client);
    bson_free(auth);
}

/* The reply's {conversationId, done, payload}, or the tier's error as it gave it. */
static bool read_step(const uint8_t *reply, size_t length, int32_t *out_conversation_id, bool *out_done,
                      const uint8_t **out_payload, uint32_t *out_payload_length, bson_error_t *error)
{
    bson_t body;
    bson_iter_t iter;
    if (!wire_op_msg_find_body(reply, length, &body, error)) {
        return false;
    }
    if (!bson_iter_init_find(&iter, &body, "ok") || bson_iter_as_double(&iter) != 1.0) {
        const char *message = "the tier refused";
        int32_t code = TC_ERR_AUTHENTICATION_FAILED;
        if (bson_iter_init_find(&iter, &body, "errmsg") && BSON_ITER_HOLDS_UTF8(&iter)) {
            message = bson_iter_utf8(&iter, NULL);
        }
        if (bson_iter_init_find(&iter, &body, "code") && BSON_ITER_HOLDS_NUMBER(&iter)) {
            code = (int32_t)bson_iter_as_int64(&iter);
        }
        return tc_error_set(error, code, "%s", message);
    }
    *out_conversation_id = bson_iter_init_find(&iter, &body, "conversationId") && BSON_ITER_HOLDS_NUMBER(&iter)
                               ? (int32_t)bson_iter_as_int64(&iter)
                               : 1;
    *out_done = bson_iter_init_find(&iter, &body, "done") && bson_iter_as_bool(&iter);
    *out_payload = NULL;
    *out_payload_length = 0;
    if (bson_iter_init_find(&iter, &body, "payload") && BSON_ITER_HOLDS_BINARY(&iter)) {
        bson_subtype_t subtype;
        bson_iter_binary(&iter, &subtype, out_payload_length, out_payload);
    }
    return true;
}

bool backend_auth_step(backend_auth_t *auth, const uint8_t *reply, size_t length, uint8_t **out_message,
                       size_t *out_length, bson_error_t *error)
{
    int32_t conversation_id = 0;
    bool done = false;
    const uint8_t *payload = NULL;
    uint32_t payload_length = 0;
    *out_message = NULL;
    if (!read_step(reply, length, &conversation_id, &done, &payload, &payload_length, error)) {
        return false;
    }
    switch (auth->state) {
    case BACKEND_AUTH_AWAITING_SERVER_FIRST: {
        char *final = NULL;
        size_t final_length;
        if (done || payload == NULL) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "the tier ended the SCRAM conversation after one step");
        }
        auth->conversation_id = conversation_id;
        if (!scram_client_receive_first(auth->client, payload, payload_length, &final, &final_length, error)) {
            return false;
        }
        bool built = build_continue(auth, final, final_length, out_message, out_length, error);
        OPENSSL_cleanse(final, final_length);
        bson_free(final);
        auth->state = BACKEND_AUTH_AWAITING_SERVER_FINAL;
        return built;
    }
    case BACKEND_AUTH_AWAITING_SERVER_FINAL:
        if (payload == NULL) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "the tier sent no SCRAM signature");
        }
        if (!scram_client_receive_final(auth->client, payload, payload_length, error)) {
            return false;
        }
        if (done) {
            return true;
        }
        auth->state = BACKEND_AUTH_AWAITING_DONE;
        return build_continue(auth, "", 0, out_message, out_length, error);
    case BACKEND_AUTH_AWAITING_DONE:
        return done || tc_error_set(error, TC_ERR_BAD_VALUE, "the tier did not end the SCRAM conversation");
    }
    return tc_error_set(error, TC_ERR_INTERNAL, "backend authentication in an impossible state");
}
