/* Access control in the store, as mongod's (--auth): users in admin.system.users
 * with SCRAM-SHA-1 and SCRAM-SHA-256 credentials (salted and hashed only:
 * src/security/scram.h), built-in roles (src/security/roles.h), the SASL
 * commands and speculative authentication in hello, the user management
 * commands, a privilege check before every command, and the localhost exception
 * (with --auth and no user yet, a loopback client may create the first user on
 * admin). Each connection's state lives in store_connection_t.auth (commands.h). */
#ifndef TC_STORE_AUTH_H
#define TC_STORE_AUTH_H

#include "security/privileges.h"
#include "store/commands.h"

typedef struct auth_manager auth_manager_t;

/* The server-wide part; enabled: --auth. Free with auth_manager_destroy(). */
auth_manager_t *auth_manager_new(bool enabled);
void auth_manager_destroy(auth_manager_t *manager);

/* Frees a connection's authentication state (the server's connection_close
 * callback). Safe on NULL. */
void auth_session_destroy(void *session);

/* The user the connection is authenticated as, or NULL (owned by the
 * connection: valid until its next authentication command). */
const privileges_user_t *auth_connection_user(const store_connection_t *connection);

/* Whether the store runs with --auth. */
bool auth_enabled(const command_context_t *context);

/* Before a handler runs (dispatch.c): with --auth, refuses what the connection
 * may not run: Unauthorized 13 "command find requires authentication" before
 * authentication, "not authorized on db to execute command { ... }" after. */
bool auth_check_command(command_context_t *context, bson_error_t *error) TC_MUST_CHECK;

/* After a handler succeeded (dispatch.c): trims a reply to what the user may see
 * (listDatabases of a user without the listDatabases action lists only the
 * databases it has privileges on, as mongod's authorizedDatabases), and notices
 * writes to admin.system.users made without the user commands (a root's insert,
 * drop or dropDatabase), so sessions read their users again. */
void auth_after_command(command_context_t *context, bson_t *reply);

/* hello: answers saslSupportedMechs and runs a speculativeAuthenticate
 * saslStart, adding their fields to reply (a failure only leaves them out). */
void auth_append_hello(command_context_t *context, bson_t *reply);

/* connectionStatus: authInfo {authenticatedUsers, authenticatedUserRoles}, and with
 * showPrivileges: true authenticatedUserPrivileges ([{resource, actions}], mongod's
 * shape, from the built-in roles of security/roles.h). */
void auth_append_connection_status(command_context_t *context, bson_t *reply);

/* saslStart, saslContinue, logout, createUser, updateUser, dropUser,
 * dropAllUsersFromDatabase, grantRolesToUser, revokeRolesFromUser, usersInfo. */
extern const command_definition_t auth_commands[];

#endif
