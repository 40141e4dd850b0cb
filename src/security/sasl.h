/* The SASL commands as mongod runs them over SCRAM, shared by the store and the
 * proxy: saslStart, saslContinue and hello's speculativeAuthenticate read from
 * their documents, and one conversation's steps (conversationId 1, the payload
 * answered as binary or base64 text as it came, the empty last step a client
 * may skip with skipEmptyExchange). Pure: the caller finds the user's
 * credentials between the start and the first reply, and decides what an
 * authenticated connection may do. */
#ifndef TC_SECURITY_SASL_H
#define TC_SECURITY_SASL_H

#include "security/scram.h"

/* mongod's answer to every authentication failure; the reason goes to the log. */
#define SASL_FAILED_MESSAGE "Authentication failed."

/* One SASL step as a client sent it. */
typedef struct sasl_request {
    const char *mechanism;     /* saslStart and speculative; borrowed from the command */
    const char *database;      /* speculativeAuthenticate's db; NULL otherwise */
    int64_t conversation_id;   /* saslContinue */
    const uint8_t *payload;
    size_t payload_length;
    bool payload_is_text;      /* sent as a base64 string: answered the same way */
    bool skip_empty_exchange;  /* options.skipEmptyExchange */
    uint8_t *decoded;          /* the text payload's bytes, owned */
} sasl_request_t;

/* Reads a saslStart command. Errors: 40414 (no mechanism or payload),
 * TypeMismatch, BadValue (a payload that is not base64). Clean up with
 * sasl_request_cleanup() whatever the result. */
bool sasl_parse_start(const bson_t *command, sasl_request_t *out, bson_error_t *error) TC_MUST_CHECK;

/* Reads a saslContinue command. Errors as sasl_parse_start(). */
bool sasl_parse_continue(const bson_t *command, sasl_request_t *out, bson_error_t *error) TC_MUST_CHECK;

/* Reads hello's speculativeAuthenticate document {saslStart: 1, mechanism, db,
 * payload}. false: not one mongod would start (it is then ignored, as mongod
 * ignores it). */
bool sasl_parse_speculative(const bson_t *document, sasl_request_t *out) TC_MUST_CHECK;

void sasl_request_cleanup(sasl_request_t *request);

/* Whether an error of the conversation may go to the client as it is
 * (ProtocolError 17, MechanismUnavailable 334); any other is a reason to log,
 * and the client gets AuthenticationFailed SASL_FAILED_MESSAGE. */
bool sasl_error_is_public(const bson_error_t *error);

/* --- one conversation ------------------------------------------------------------ */

typedef struct sasl_conversation sasl_conversation_t;

/* Starts a conversation for a user of database from a saslStart (or a
 * speculative one): the mechanism and client-first message. *out_conversation
 * is set (free with sasl_conversation_destroy()) even when client-first is
 * refused, so the caller can log whom it was for. Errors: MechanismUnavailable
 * 334 (public), else the reason SCRAM refused. */
bool sasl_conversation_start(const sasl_request_t *request, const char *database, bool speculative,
                             sasl_conversation_t **out_conversation, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void sasl_conversation_destroy(sasl_conversation_t *conversation);

/* The user named in client-first (NULL before), its database, the mechanism, and
 * whether the conversation started in hello. */
const char *sasl_conversation_user(const sasl_conversation_t *conversation);
const char *sasl_conversation_database(const sasl_conversation_t *conversation);
scram_mechanism_t sasl_conversation_mechanism(const sasl_conversation_t *conversation);
bool sasl_conversation_speculative(const sasl_conversation_t *conversation);

/* mongod's record of a conversation's end (component ACCESS): "Authentication
 * succeeded" when failure is NULL, else "Authentication failed" with its code and
 * message; the mechanism, speculative, principalName, authenticationDatabase and
 * remote as attributes. conversation NULL: none had started. The store and the
 * proxy write the same record. */
void sasl_log_authentication(const sasl_conversation_t *conversation, uint64_t connection_id, const char *remote,
                             const bson_error_t *failure);

/* With the user's stored credentials for the mechanism, appends the first reply
 * {conversationId, done: false, payload: server-first} to reply. Errors: the
 * reason (never public). A user that does not exist, or has no credentials for
 * the mechanism, is the caller's reason to fail. */
bool sasl_conversation_reply_first(sasl_conversation_t *conversation, const scram_credentials_t *credentials,
                                   bson_t *reply, bson_error_t *error) TC_MUST_CHECK;

/* A saslContinue: appends its reply to reply; *out_done true once the client is
 * authenticated as sasl_conversation_user() (the caller then ends the
 * conversation). Errors: ProtocolError 17 for another conversationId (public;
 * the conversation goes on), else the reason (the conversation is over). */
bool sasl_conversation_continue(sasl_conversation_t *conversation, const sasl_request_t *request, bson_t *reply,
                                bool *out_done, bson_error_t *error) TC_MUST_CHECK;

#endif
