/* Which privileges each MongoDB command needs, and the check made before it runs
 * (mongod's checkAuthForOperation, one table instead of a method per command),
 * shared by the store (--auth) and the proxy (authorization: enabled) so that
 * both refuse the same commands with mongod's words. Pure: the caller says who
 * asks (a user and its built-in roles, roles.h) and carries the command. */
#ifndef TC_SECURITY_PRIVILEGES_H
#define TC_SECURITY_PRIVILEGES_H

#include "common/error.h"
#include "security/roles.h"

/* A user as a connection holds it: name, database and roles, all owned. */
typedef struct privileges_user {
    char *name; /* NULL: nobody */
    char *database;
    roles_grant_t *grants;
    size_t grant_count;
} privileges_user_t;

/* Fills out_user from a user document ({user, db, roles: [{role, db}]}, as in
 * admin.system.users and usersInfo's replies; copies). false: malformed. Roles
 * that are not {role, db} documents are skipped: they grant nothing. */
bool privileges_user_from_document(const bson_t *document, privileges_user_t *out_user);

/* Deep copy of from into out_user. */
void privileges_user_copy(const privileges_user_t *from, privileges_user_t *out_user);

/* Frees what user owns and leaves it nobody. */
void privileges_user_cleanup(privileges_user_t *user);

/* A connection that holds current authenticates again as user@database: as
 * mongod's addAndAuthorizeUser, the same user is accepted (true); another is
 * refused with mongod's error (false). */
bool privileges_admit_another_login(const privileges_user_t *current, const char *user, const char *database,
                                    bson_error_t *error);

/* Whether mongod runs command name before authentication: the handshake
 * (hello, isMaster), buildInfo, the SASL steps, logout, ping, connectionStatus. */
bool privileges_runs_unauthenticated(const char *name);

/* Who asks. localhost_exception: mongod's exception applies (no user exists yet,
 * the client is on loopback): an unauthenticated client may then create the
 * first user on admin and nothing else. */
typedef struct privileges_subject {
    const privileges_user_t *user; /* NULL, or name NULL: not authenticated */
    bool localhost_exception;
    /* The caller (the proxy) runs the commands downstream under one identity of
     * its own, where a user's "own" operations and sessions cannot be told from
     * another's: seeing or killing them then needs the cluster-wide action
     * (inprog, listSessions, killop). */
    bool forwards_as_itself;
} privileges_subject_t;

/* Whether subject may run command name (its document, run in database). A command
 * missing from the table needs every action on the cluster: only root runs it.
 * Errors: Unauthorized 13, worded as mongod: "command find requires
 * authentication" before authentication, "not authorized on db to execute
 * command { ... }" after (passwords and SASL payloads shown as "xxx"). */
bool privileges_check_command(const privileges_subject_t *subject, const char *name, const bson_t *command,
                              const char *database, bson_error_t *error) TC_MUST_CHECK;

/* Trims a listDatabases reply for user (NULL: nobody): without the
 * listDatabases action it lists only the databases the user has a privilege on
 * (mongod's authorizedDatabases), with totalSize recomputed. */
void privileges_filter_list_databases(const privileges_user_t *user, bson_t *reply);

/* Whether command name (run in database) may change the users: the user
 * management commands, and writes to admin.system.users as a collection (a
 * root's insert, update, drop, dropDatabase or renameCollection on admin).
 * Whoever caches users reads them again after one succeeds. */
bool privileges_command_changes_users(const char *name, const bson_t *command, const char *database);

#endif
