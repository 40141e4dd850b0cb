/* Private to the store's access control: auth.c (manager, sessions, the SASL
 * conversation, hello and connectionStatus), auth_rules.c (the privilege check,
 * with security/privileges.c), auth_users.c (admin.system.users) and cmd_auth.c (the
 * commands). */
#ifndef TC_STORE_AUTH_PRIVATE_H
#define TC_STORE_AUTH_PRIVATE_H

#include "security/privileges.h"
#include "security/sasl.h"
#include "security/scram.h"
#include "store/auth.h"

#include <stdatomic.h>

#define AUTH_USERS_NS "admin.system.users"

struct auth_manager {
    bool enabled;
    /* Bumped after every change to admin.system.users: a session whose user was
     * read under an older generation reads it again before its next command. */
    atomic_uint_fast64_t generation;
    /* For the localhost exception: -1 not known (count on next use), 0, 1. */
    atomic_int users_exist;
};

/* One connection's (store_connection_t.auth). */
typedef struct auth_session {
    privileges_user_t user;
    uint64_t generation;                /* of the manager when user was read */
    sasl_conversation_t *conversation;  /* a SASL conversation under way, or NULL */
} auth_session_t;

/* The connection's session, created on first use. */
auth_session_t *auth_session_get(command_context_t *context);

/* Whether the localhost exception applies to this request now. */
bool auth_localhost_exception(command_context_t *context);

/* --- auth.c: the SASL conversation, for saslStart, saslContinue and hello ------- */

/* Starts a conversation for a user of database (saslStart, or hello's
 * speculativeAuthenticate) and appends its first reply {conversationId, done,
 * payload} to reply. Errors: MechanismUnavailable 334 for an unknown mechanism,
 * otherwise AuthenticationFailed 18 (the reason is logged, never sent). */
bool auth_sasl_start(command_context_t *context, const sasl_request_t *request, const char *database,
                     bool speculative, bson_t *reply, bson_error_t *error) TC_MUST_CHECK;

/* The next step of the session's conversation. Errors: ProtocolError 17 (no
 * conversation, wrong conversationId), AuthenticationFailed 18, 5626701 and
 * 5626702 (already authenticated as another user). */
bool auth_sasl_continue(command_context_t *context, const sasl_request_t *request, bson_t *reply,
                        bson_error_t *error) TC_MUST_CHECK;

/* --- auth_users.c: admin.system.users ---------------------------------------------- */

/* Reads user@database's document into *out_document (initialized only when
 * found; the caller destroys it). */
bool auth_users_find(storage_session_t *session, const char *user, const char *database, bson_t *out_document,
                     bool *out_found, bson_error_t *error) TC_MUST_CHECK;

/* Calls visit for every user document (any order); visit returns false to stop. */
typedef bool (*auth_users_visit_fn)(void *visit_context, const bson_t *document);
bool auth_users_scan(storage_session_t *session, auth_users_visit_fn visit, void *visit_context,
                     bson_error_t *error) TC_MUST_CHECK;

/* Inserts a new user document (_id "db.user" first). Errors: 51003 "User
 * "alice@test" already exists". */
bool auth_users_insert(command_context_t *context, const bson_t *document, bson_error_t *error) TC_MUST_CHECK;

/* Replaces user@database's document. *out_found false: no such user, nothing done. */
bool auth_users_replace(command_context_t *context, const char *user, const char *database, const bson_t *document,
                        bool *out_found, bson_error_t *error) TC_MUST_CHECK;

/* Deletes user@database, or every user of database when user is NULL. */
bool auth_users_delete(command_context_t *context, const char *user, const char *database, int64_t *out_count,
                       bson_error_t *error) TC_MUST_CHECK;

/* Every session reads its user again before its next command; the localhost
 * exception counts users again. */
void auth_users_changed(command_context_t *context);

/* Whether any user exists (the localhost exception ends with the first). */
bool auth_users_any(storage_session_t *session, bool *out_any, bson_error_t *error) TC_MUST_CHECK;

#endif
