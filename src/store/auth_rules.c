/* The store's side of the privilege check dispatch.c makes before and after
 * each command: which user a connection holds (read again after the users
 * changed), the localhost exception, and listDatabases' filter. The rules
 * themselves are security/privileges.c, shared with the proxy. */
#include "store/auth_private.h"

#include "common/log.h"

#include <string.h>

#define LOG_COMPONENT "ACCESS"

/* A user changed since the session read it: read it again; a dropped user leaves
 * the connection unauthenticated, as mongod's session refresh does. */
static void refresh_user(command_context_t *context, auth_session_t *session)
{
    uint64_t generation = atomic_load(&context->store->auth->generation);
    if (session->user.name == NULL || session->generation == generation) {
        return;
    }
    bson_t document;
    bool found;
    bson_error_t error;
    if (!auth_users_find(context->session, session->user.name, session->user.database, &document, &found, &error)) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, context->connection_id, "cannot refresh user %s@%s: %s",
               session->user.name, session->user.database, error.message);
        return; /* keep what we have; the next command tries again */
    }
    if (!found) {
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, context->connection_id,
               "user %s@%s was dropped: removing it from the connection", session->user.name, session->user.database);
        privileges_user_cleanup(&session->user);
    } else {
        privileges_user_t fresh;
        if (privileges_user_from_document(&document, &fresh)) {
            privileges_user_cleanup(&session->user);
            session->user = fresh;
        }
        bson_destroy(&document);
    }
    session->generation = generation;
}

bool auth_check_command(command_context_t *context, bson_error_t *error)
{
    auth_manager_t *manager = context->store->auth;
    if (manager == NULL || !manager->enabled || privileges_runs_unauthenticated(context->name)) {
        return true;
    }
    auth_session_t *session = auth_session_get(context);
    if (session != NULL) {
        refresh_user(context, session);
    }
    bool authenticated = session != NULL && session->user.name != NULL;
    privileges_subject_t subject = {
        .user = session != NULL ? &session->user : NULL,
        .localhost_exception = !authenticated && auth_localhost_exception(context),
    };
    return privileges_check_command(&subject, context->name, context->command, context->database, error);
}

void auth_after_command(command_context_t *context, bson_t *reply)
{
    auth_manager_t *manager = context->store->auth;
    if (manager != NULL && privileges_command_changes_users(context->name, context->command, context->database)) {
        auth_users_changed(context);
    }
    if (manager == NULL || !manager->enabled || strcmp(context->name, "listDatabases") != 0) {
        return;
    }
    auth_session_t *session = auth_session_get(context);
    privileges_filter_list_databases(session != NULL ? &session->user : NULL, reply);
}
