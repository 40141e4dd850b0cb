/* How a backend connection authenticates, private to backend.c: the
 * credentials of the tier's URI (username, password, authSource,
 * authMechanism) and the SCRAM conversation (security/scram_client.h) a
 * connection runs after its hello, as a driver does: saslStart, saslContinue
 * with the proof, the server's signature checked. Nothing here blocks or does
 * I/O: backend.c carries the messages. */
#ifndef TC_CLIENT_BACKEND_AUTH_H
#define TC_CLIENT_BACKEND_AUTH_H

#include "common/error.h"

#include <mongoc/mongoc.h>

typedef struct backend_credentials backend_credentials_t;

/* The user the URI names, or *out_credentials NULL when it names none. Errors:
 * BadValue (authMechanism other than SCRAM-SHA-1 or SCRAM-SHA-256). Free with
 * backend_credentials_destroy(). */
bool backend_credentials_from_uri(const mongoc_uri_t *uri, backend_credentials_t **out_credentials,
                                  bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. Wipes the password and cached keys. */
void backend_credentials_destroy(backend_credentials_t *credentials);

/* "user@authSource", for logs and errors. */
const char *backend_credentials_principal(const backend_credentials_t *credentials);

/* Adds saslSupportedMechs to a hello when the URI leaves the mechanism to
 * negotiation, as drivers do. */
void backend_credentials_append_hello(const backend_credentials_t *credentials, bson_t *hello);

/* One connection's conversation. */
typedef struct backend_auth backend_auth_t;

/* Starts one: the URI's mechanism, or the one hello_reply's saslSupportedMechs
 * offers (SCRAM-SHA-256 when listed, else SCRAM-SHA-1, as the drivers' auth
 * specification says). *out_message is the saslStart to send (bson_free()).
 * Errors: BadValue (a password SASLprep refuses). */
backend_auth_t *backend_auth_start(backend_credentials_t *credentials, const bson_t *hello_reply,
                                   uint8_t **out_message, size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* Reads the tier's reply to the last message. *out_message is the next to send,
 * or NULL once the connection is authenticated. Errors: the tier's own
 * (AuthenticationFailed 18 for a wrong password), AuthenticationFailed for a
 * server that cannot prove it holds the user's keys, BadValue for a malformed
 * exchange. */
bool backend_auth_step(backend_auth_t *auth, const uint8_t *reply, size_t length, uint8_t **out_message,
                       size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void backend_auth_destroy(backend_auth_t *auth);

#endif
