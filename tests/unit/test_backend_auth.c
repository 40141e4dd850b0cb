/* Tests for src/client/backend_auth.c, the proxy's SCRAM client to a tier, in
 * OP_MSG: credentials from the URI, mechanism negotiation, and whole
 * conversations against the server side the store runs (security/sasl.h), with
 * and without the empty last step, a wrong password, and a tier that cannot
 * prove it holds the user's keys. */
#include "client/backend_auth.h"
#include "security/sasl.h"
#include "wire/wire.h"

#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static backend_credentials_t *credentials_for(const char *uri_text)
{
    bson_error_t error;
    backend_credentials_t *credentials;
    mongoc_uri_t *uri = mongoc_uri_new(uri_text);
    assert_non_null(uri);
    assert_true(backend_credentials_from_uri(uri, &credentials, &error));
    mongoc_uri_destroy(uri);
    return credentials;
}

static bson_t *body_of(const uint8_t *message, size_t length)
{
    bson_t body;
    bson_error_t error;
    assert_true(wire_op_msg_find_body(message, length, &body, &error));
    return bson_copy(&body);
}

static uint8_t *message_of(const bson_t *body, size_t *out_length)
{
    uint8_t *message;
    bson_error_t error;
    assert_true(wire_op_msg_build(0, 0, 0, body, NULL, 0, &message, out_length, &error));
    return message;
}

/* A tier's side: the store's SASL conversation over stored credentials. */
typedef struct fake_tier {
    scram_credentials_t credentials[2];
    bool ignore_skip_empty_exchange; /* as a server older than 4.4 */
    bool forge_signature;            /* as a server that does not hold the keys */
    sasl_conversation_t *conversation;
    scram_mechanism_t last_mechanism; /* of the last saslStart */
    char expected_database[32];
} fake_tier_t;

/* Answers one request of the client with an OP_MSG reply. */
static uint8_t *tier_answer(fake_tier_t *tier, const uint8_t *request, size_t request_length, size_t *out_length)
{
    bson_t *command = body_of(request, request_length);
    bson_t reply = BSON_INITIALIZER;
    bson_error_t error;
    bson_iter_t iter;
    sasl_request_t sasl;
    bool done = false;
    bool ok;
    assert_true(bson_iter_init_find(&iter, command, "$db"));
    assert_string_equal(bson_iter_utf8(&iter, NULL), tier->expected_database);
    if (bson_has_field(command, "saslStart")) {
        assert_true(sasl_parse_start(command, &sasl, &error));
        if (tier->ignore_skip_empty_exchange) {
            sasl.skip_empty_exchange = false;
        }
        assert_true(scram_mechanism_from_name(sasl.mechanism, &tier->last_mechanism));
        ok = sasl_conversation_start(&sasl, tier->expected_database, false, &tier->conversation, &error) &&
             sasl_conversation_reply_first(tier->conversation,
                                           &tier->credentials[sasl_conversation_mechanism(tier->conversation)],
                                           &reply, &error);
    } else {
        assert_true(sasl_parse_continue(command, &sasl, &error));
        ok = sasl_conversation_continue(tier->conversation, &sasl, &reply, &done, &error);
    }
    sasl_request_cleanup(&sasl);
    if (ok && tier->forge_signature && bson_iter_init_find(&iter, &reply, "payload")) {
        bson_subtype_t subtype;
        uint32_t length;
        const uint8_t *payload;
        bson_iter_binary(&iter, &subtype, &length, &payload);
        if (length > 2 && memcmp(payload, "v=", 2) == 0) {
            /* Another signature of the same length: the first character changed. */
            char forged[128];
            assert_true(length < sizeof forged);
            memcpy(forged, payload, length);
            forged[2] = forged[2] == 'A' ? 'B' : 'A';
            bson_t replaced = BSON_INITIALIZER;
            BSON_APPEND_INT32(&replaced, "conversationId", 1);
            BSON_APPEND_BOOL(&replaced, "done", done);
            BSON_APPEND_BINARY(&replaced, "payload", BSON_SUBTYPE_BINARY, (const uint8_t *)forged, length);
            bson_destroy(&reply);
            bson_copy_to(&replaced, &reply);
            bson_destroy(&replaced);
        }
    }
    if (ok) {
        BSON_APPEND_DOUBLE(&reply, "ok", 1.0);
    } else {
        bson_reinit(&reply);
        bson_error_t answer;
        tc_error_set(&answer, TC_ERR_AUTHENTICATION_FAILED, SASL_FAILED_MESSAGE);
        tc_error_append_reply(&answer, &reply);
    }
    uint8_t *message = message_of(&reply, out_length);
    bson_destroy(&reply);
    bson_destroy(command);
    return message;
}

/* Runs the client's conversation against tier; returns whether it authenticated,
 * error filled otherwise. *out_steps: the client's messages. */
static bool authenticate(backend_credentials_t *credentials, const bson_t *hello_reply, fake_tier_t *tier,
                         int *out_steps, bson_error_t *error)
{
    uint8_t *message;
    size_t length;
    backend_auth_t *auth = backend_auth_start(credentials, hello_reply, &message, &length, error);
    assert_non_null(auth);
    bool ok = true;
    *out_steps = 0;
    while (message != NULL && ok) {
        size_t reply_length;
        uint8_t *reply = tier_answer(tier, message, length, &reply_length);
        bson_free(message);
        (*out_steps)++;
        ok = backend_auth_step(auth, reply, reply_length, &message, &length, error);
        bson_free(reply);
    }
    bson_free(message);
    backend_auth_destroy(auth);
    sasl_conversation_destroy(tier->conversation);
    tier->conversation = NULL;
    return ok;
}

static fake_tier_t tier_for(const char *user, const char *password, const char *database)
{
    fake_tier_t tier = {0};
    bson_error_t error;
    assert_true(scram_credentials_generate(SCRAM_SHA_1, user, password, 4096, &tier.credentials[SCRAM_SHA_1], &error));
    assert_true(
        scram_credentials_generate(SCRAM_SHA_256, user, password, 4096, &tier.credentials[SCRAM_SHA_256], &error));
    snprintf(tier.expected_database, sizeof tier.expected_database, "%s", database);
    return tier;
}

static void test_credentials_from_uris(void **state)
{
    (void)state;
    bson_error_t error;
    backend_credentials_t *credentials;
    mongoc_uri_t *uri = mongoc_uri_new("mongodb://127.0.0.1:27018/?replicaSet=rs0");
    assert_true(backend_credentials_from_uri(uri, &credentials, &error));
    assert_null(credentials);
    mongoc_uri_destroy(uri);

    credentials = credentials_for("mongodb://proxy:p%40ss@127.0.0.1:27018/shop");
    assert_string_equal(backend_credentials_principal(credentials), "proxy@shop");
    bson_t hello = BSON_INITIALIZER;
    backend_credentials_append_hello(credentials, &hello);
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, &hello, "saslSupportedMechs"));
    assert_string_equal(bson_iter_utf8(&iter, NULL), "shop.proxy");
    bson_destroy(&hello);
    backend_credentials_destroy(credentials);

    /* A mechanism given: no negotiation. */
    credentials = credentials_for("mongodb://proxy:pw@127.0.0.1:27018/shop?authSource=admin&authMechanism=SCRAM-SHA-1");
    assert_string_equal(backend_credentials_principal(credentials), "proxy@admin");
    bson_init(&hello);
    backend_credentials_append_hello(credentials, &hello);
    assert_false(bson_has_field(&hello, "saslSupportedMechs"));
    bson_destroy(&hello);
    backend_credentials_destroy(credentials);

    uri = mongoc_uri_new("mongodb://proxy:pw@127.0.0.1:27018/?authMechanism=PLAIN");
    assert_true(uri != NULL);
    assert_false(backend_credentials_from_uri(uri, &credentials, &error));
    assert_int_equal(error.code, 2);
    mongoc_uri_destroy(uri);
    backend_credentials_destroy(NULL);
}

static void test_conversations(void **state)
{
    (void)state;
    bson_error_t error;
    int steps;
    fake_tier_t tier = tier_for("proxy", "pa55", "admin");
    backend_credentials_t *credentials = credentials_for("mongodb://proxy:pa55@127.0.0.1:27018/?authSource=admin");

    /* hello listed SCRAM-SHA-256: two steps with skipEmptyExchange. */
    bson_t *hello = BCON_NEW("saslSupportedMechs", "[", "SCRAM-SHA-1", "SCRAM-SHA-256", "]");
    assert_true(authenticate(credentials, hello, &tier, &steps, &error));
    assert_int_equal(steps, 2);
    assert_int_equal(tier.last_mechanism, SCRAM_SHA_256);
    /* Again, with the keys from the pool's cache. */
    assert_true(authenticate(credentials, hello, &tier, &steps, &error));
    /* A server that wants the empty last step gets it. */
    tier.ignore_skip_empty_exchange = true;
    assert_true(authenticate(credentials, hello, &tier, &steps, &error));
    assert_int_equal(steps, 3);
    tier.ignore_skip_empty_exchange = false;
    /* Nothing listed: SCRAM-SHA-1, as the drivers' rule says. */
    assert_true(authenticate(credentials, NULL, &tier, &steps, &error));
    assert_int_equal(tier.last_mechanism, SCRAM_SHA_1);
    bson_destroy(hello);
    backend_credentials_destroy(credentials);

    /* The wrong password: the tier's own error comes back. */
    credentials = credentials_for("mongodb://proxy:wrong@127.0.0.1:27018/?authSource=admin");
    assert_false(authenticate(credentials, NULL, &tier, &steps, &error));
    assert_int_equal(error.code, 18);
    assert_string_equal(error.message, "Authentication failed.");
    backend_credentials_destroy(credentials);

    /* A tier that does not hold the keys cannot sign: refused by the proxy. */
    credentials = credentials_for("mongodb://proxy:pa55@127.0.0.1:27018/?authSource=admin&authMechanism=SCRAM-SHA-256");
    tier.forge_signature = true;
    assert_false(authenticate(credentials, NULL, &tier, &steps, &error));
    assert_int_equal(error.code, 18);
    assert_non_null(strstr(error.message, "signature"));
    backend_credentials_destroy(credentials);
}

int main(void)
{
    mongoc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_credentials_from_uris),
        cmocka_unit_test(test_conversations),
    };
    int failures = cmocka_run_group_tests(tests, NULL, NULL);
    mongoc_cleanup();
    return failures;
}
