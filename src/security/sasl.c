/* saslStart, saslContinue and speculativeAuthenticate over scram.h's server side,
 * as mongod 6.0 reads and answers them (sasl_commands.cpp): payload as BinData
 * or base64 text, conversationId 1, and after server-final either done (with
 * skipEmptyExchange) or one more empty step from the client. */
#include "security/sasl.h"

#include "security/base64.h"
#include "common/log.h"

#include <string.h>

#define CONVERSATION_ID 1

struct sasl_conversation {
    scram_server_t *server;
    char *database;
    bool speculative;
    bool skip_empty_exchange;
    bool first_is_text;       /* the saslStart payload came as text: so goes server-first */
    bool awaiting_empty_step; /* server-final sent; the client's empty saslContinue ends it */
};

/* --- reading the commands --------------------------------------------------------- */

static bool read_payload(const bson_iter_t *iter, const char *command_name, sasl_request_t *out, bson_error_t *error)
{
    if (BSON_ITER_HOLDS_BINARY(iter)) {
        bson_subtype_t subtype;
        uint32_t length;
        bson_iter_binary(iter, &subtype, &length, &out->payload);
        out->payload_length = length;
        return true;
    }
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        uint32_t length;
        const char *text = bson_iter_utf8(iter, &length);
        out->decoded = bson_malloc((size_t)length + 1);
        if (!base64_decode(text, length, out->decoded, (size_t)length + 1, &out->payload_length)) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Invalid base64 in %s.payload", command_name);
        }
        out->payload = out->decoded;
        out->payload_is_text = true;
        return true;
    }
    return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                        "BSON field '%s.payload' is the wrong type, expected types '[string, binData]'", command_name);
}

static void read_options(const bson_t *command, sasl_request_t *out)
{
    bson_iter_t iter, options;
    if (bson_iter_init_find(&iter, command, "options") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, &options) && bson_iter_find(&options, "skipEmptyExchange")) {
        out->skip_empty_exchange = bson_iter_as_bool(&options);
    }
}

bool sasl_parse_start(const bson_t *command, sasl_request_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init_find(&iter, command, "mechanism") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field 'saslStart.mechanism' is missing but a required field");
    }
    out->mechanism = bson_iter_utf8(&iter, NULL);
    read_options(command, out);
    if (!bson_iter_init_find(&iter, command, "payload")) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field 'saslStart.payload' is missing but a required field");
    }
    return read_payload(&iter, "saslStart", out, error);
}

bool sasl_parse_continue(const bson_t *command, sasl_request_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init_find(&iter, command, "conversationId") || !BSON_ITER_HOLDS_NUMBER(&iter)) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field 'saslContinue.conversationId' is missing but a required field");
    }
    out->conversation_id = bson_iter_as_int64(&iter);
    if (!bson_iter_init_find(&iter, command, "payload")) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field 'saslContinue.payload' is missing but a required field");
    }
    return read_payload(&iter, "saslContinue", out, error);
}

bool sasl_parse_speculative(const bson_t *document, sasl_request_t *out)
{
    bson_iter_t iter;
    bson_error_t ignored;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init_find(&iter, document, "saslStart")) {
        return false; /* {authenticate: 1, mechanism: "MONGODB-X509"} is not offered */
    }
    if (bson_iter_init_find(&iter, document, "mechanism") && BSON_ITER_HOLDS_UTF8(&iter)) {
        out->mechanism = bson_iter_utf8(&iter, NULL);
    }
    if (bson_iter_init_find(&iter, document, "db") && BSON_ITER_HOLDS_UTF8(&iter)) {
        out->database = bson_iter_utf8(&iter, NULL);
    }
    read_options(document, out);
    /* mongod treats one it cannot read as if there were none. */
    return out->mechanism != NULL && out->database != NULL && bson_iter_init_find(&iter, document, "payload") &&
           read_payload(&iter, "saslStart", out, &ignored);
}

void sasl_request_cleanup(sasl_request_t *request)
{
    bson_free(request->decoded);
    memset(request, 0, sizeof *request);
}

bool sasl_error_is_public(const bson_error_t *error)
{
    return error->domain == TC_ERROR_DOMAIN &&
           (error->code == TC_ERR_PROTOCOL_ERROR || error->code == TC_ERR_MECHANISM_UNAVAILABLE);
}

/* --- the conversation ------------------------------------------------------------------ */

static void append_step_reply(bson_t *reply, bool done, const char *payload, size_t length, bool as_text)
{
    BSON_APPEND_INT32(reply, "conversationId", CONVERSATION_ID);
    BSON_APPEND_BOOL(reply, "done", done);
    if (as_text) {
        char *text = base64_encode_new((const uint8_t *)payload, length);
        BSON_APPEND_UTF8(reply, "payload", text);
        bson_free(text);
    } else {
        BSON_APPEND_BINARY(reply, "payload", BSON_SUBTYPE_BINARY, (const uint8_t *)payload, (uint32_t)length);
    }
}

bool sasl_conversation_start(const sasl_request_t *request, const char *database, bool speculative,
                             sasl_conversation_t **out_conversation, bson_error_t *error)
{
    scram_mechanism_t mechanism;
    *out_conversation = NULL;
    if (!scram_mechanism_from_name(request->mechanism, &mechanism)) {
        return tc_error_set(error, TC_ERR_MECHANISM_UNAVAILABLE,
                            "Received authentication for mechanism %s which is not enabled", request->mechanism);
    }
    sasl_conversation_t *conversation = bson_malloc0(sizeof *conversation);
    conversation->server = scram_server_new(mechanism, NULL);
    conversation->database = bson_strdup(database);
    conversation->speculative = speculative;
    conversation->skip_empty_exchange = request->skip_empty_exchange;
    conversation->first_is_text = request->payload_is_text;
    *out_conversation = conversation;
    return scram_server_receive_first(conversation->server, request->payload, request->payload_length, error);
}

void sasl_conversation_destroy(sasl_conversation_t *conversation)
{
    if (conversation == NULL) {
        return;
    }
    scram_server_destroy(conversation->server);
    bson_free(conversation->database);
    bson_free(conversation);
}

const char *sasl_conversation_user(const sasl_conversation_t *conversation)
{
    return scram_server_user(conversation->server);
}

const char *sasl_conversation_database(const sasl_conversation_t *conversation)
{
    return conversation->database;
}

scram_mechanism_t sasl_conversation_mechanism(const sasl_conversation_t *conversation)
{
    return scram_server_mechanism(conversation->server);
}

bool sasl_conversation_speculative(const sasl_conversation_t *conversation)
{
    return conversation->speculative;
}

bool sasl_conversation_reply_first(sasl_conversation_t *conversation, const scram_credentials_t *credentials,
                                   bson_t *reply, bson_error_t *error)
{
    char *server_first = NULL;
    size_t length;
    if (!scram_server_first_message(conversation->server, credentials, &server_first, &length, error)) {
        return false;
    }
    append_step_reply(reply, false, server_first, length, conversation->first_is_text);
    bson_free(server_first);
    return true;
}

bool sasl_conversation_continue(sasl_conversation_t *conversation, const sasl_request_t *request, bson_t *reply,
                                bool *out_done, bson_error_t *error)
{
    char *server_final = NULL;
    size_t length;
    *out_done = false;
    if (request->conversation_id != CONVERSATION_ID) {
        return tc_error_set(error, TC_ERR_PROTOCOL_ERROR, "sasl: Mismatched conversation id");
    }
    if (conversation->awaiting_empty_step) {
        if (request->payload_length != 0) {
            return tc_error_set(error, TC_ERR_AUTHENTICATION_FAILED, "Invalid SCRAM authentication step: 3");
        }
        append_step_reply(reply, true, "", 0, request->payload_is_text);
        *out_done = true;
        return true;
    }
    if (!scram_server_receive_final(conversation->server, request->payload, request->payload_length, &server_final,
                                    &length, error)) {
        return false;
    }
    /* Without skipEmptyExchange the client checks the server's signature, then
     * sends an empty step. */
    *out_done = conversation->skip_empty_exchange;
    conversation->awaiting_empty_step = !conversation->skip_empty_exchange;
    append_step_reply(reply, *out_done, server_final, length, request->payload_is_text);
    bson_free(server_final);
    return true;
}

/* What both records say, as mongod's do. */
#define AUTHENTICATION_FACTS                                                                                        \
    "mechanism {mechanism}, speculative {speculative}, principalName \"{principalName}\", authenticationDatabase " \
    "\"{authenticationDatabase}\", remote {remote}"

void sasl_log_authentication(const sasl_conversation_t *conversation, uint64_t connection_id, const char *remote,
                             const bson_error_t *failure)
{
    const char *user = conversation != NULL ? sasl_conversation_user(conversation) : NULL;
    const char *database = conversation != NULL ? sasl_conversation_database(conversation) : NULL;
    tc_log_attr_t attrs[] = {
        TC_ATTR_STR("mechanism",
                    conversation != NULL ? scram_mechanism_name(sasl_conversation_mechanism(conversation)) : "?"),
        TC_ATTR_BOOL("speculative", conversation != NULL && sasl_conversation_speculative(conversation)),
        TC_ATTR_STR("principalName", user != NULL ? user : ""),
        TC_ATTR_STR("authenticationDatabase", database != NULL ? database : ""),
        TC_ATTR_STR("remote", remote),
        TC_ATTR_STR("codeName", failure != NULL ? tc_error_code_name((int32_t)failure->code) : NULL),
        TC_ATTR_STR("error", failure != NULL ? failure->message : NULL),
    };
    const char *message = failure != NULL
                              ? "Authentication failed: " AUTHENTICATION_FACTS ", error {codeName}: {error}"
                              : "Authentication succeeded: " AUTHENTICATION_FACTS;
    if (tc_log_enabled(TC_LOG_INFO)) {
        /* A success has no codeName and error: the first five attributes only. */
        tc_log_write_attrs(TC_LOG_INFO, "ACCESS", connection_id, message, attrs,
                           failure != NULL ? sizeof attrs / sizeof attrs[0] : 5);
    }
}
