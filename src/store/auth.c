/* The store's access control, per server and per connection: the manager, each
 * connection's session (its user and a SASL conversation under way), the SCRAM
 * conversation behind saslStart, saslContinue and hello's
 * speculativeAuthenticate, and what hello and connectionStatus show. Every
 * authentication failure answers AuthenticationFailed "Authentication failed."
 * as mongod does; the reason goes to the log (never a payload or a key). */
#include "store/auth_private.h"

#include "common/log.h"

#include <string.h>

#define LOG_COMPONENT "ACCESS"

auth_manager_t *auth_manager_new(bool enabled)
{
    auth_manager_t *manager = bson_malloc0(sizeof *manager);
    manager->enabled = enabled;
    atomic_init(&manager->generation, 1);
    atomic_init(&manager->users_exist, -1);
    return manager;
}

void auth_manager_destroy(auth_manager_t *manager)
{
    bson_free(manager);
}

static void conversation_reset(auth_session_t *session)
{
    sasl_conversation_destroy(session->conversation);
    session->conversation = NULL;
}

void auth_session_destroy(void *state)
{
    auth_session_t *session = state;
    if (session == NULL) {
        return;
    }
    conversation_reset(session);
    privileges_user_cleanup(&session->user);
    bson_free(session);
}

auth_session_t *auth_session_get(command_context_t *context)
{
    if (context->connection == NULL) {
        return NULL; /* a command run outside any connection */
    }
    if (context->connection->auth == NULL) {
        context->connection->auth = bson_malloc0(sizeof(auth_session_t));
    }
    return context->connection->auth;
}

const privileges_user_t *auth_connection_user(const store_connection_t *connection)
{
    const auth_session_t *session = connection != NULL ? connection->auth : NULL;
    return session != NULL && session->user.name != NULL ? &session->user : NULL;
}

bool auth_enabled(const command_context_t *context)
{
    return context->store->auth->enabled;
}

static bool peer_is_loopback(const char *peer)
{
    return strncmp(peer, "127.", 4) == 0 || strncmp(peer, "[::1]:", 6) == 0 ||
           strncmp(peer, "[::ffff:127.", 12) == 0;
}

bool auth_localhost_exception(command_context_t *context)
{
    auth_manager_t *manager = context->store->auth;
    if (!manager->enabled || context->peer_address == NULL || !peer_is_loopback(context->peer_address)) {
        return false;
    }
    int exist = atomic_load(&manager->users_exist);
    if (exist < 0) {
        bool any;
        bson_error_t error;
        if (!auth_users_any(context->session, &any, &error)) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, context->connection_id, "cannot count users: %s", error.message);
            return false; /* unsure: no exception */
        }
        exist = any ? 1 : 0;
        atomic_store(&manager->users_exist, exist);
    }
    return exist == 0;
}

/* --- the SASL conversation -------------------------------------------------------- */

/* Logs why, ends the conversation, and answers as mongod: the client learns
 * nothing but that it failed (or the reason itself when it is public). */
static bool conversation_failed(command_context_t *context, auth_session_t *session, const bson_error_t *reason,
                                bson_error_t *error)
{
    sasl_conversation_t *conversation = session->conversation;
    sasl_log_authentication(conversation, context->connection_id, context->peer_address, reason);
    conversation_reset(session);
    if (sasl_error_is_public(reason)) {
        *error = *reason;
        return false;
    }
    return tc_error_set(error, TC_ERR_AUTHENTICATION_FAILED, SASL_FAILED_MESSAGE);
}

bool auth_sasl_start(command_context_t *context, const sasl_request_t *request, const char *database,
                     bool speculative, bson_t *reply, bson_error_t *error)
{
    auth_session_t *session = auth_session_get(context);
    bson_error_t reason;
    bson_t user_document;
    bool found = false;
    scram_credentials_t credentials;

    if (session == NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "authentication needs a connection");
    }
    conversation_reset(session); /* a new saslStart abandons any conversation under way */
    if (!sasl_conversation_start(request, database, speculative, &session->conversation, &reason)) {
        if (session->conversation == NULL) {
            *error = reason; /* an unknown mechanism: no conversation began */
            return false;
        }
        return conversation_failed(context, session, &reason, error);
    }
    const char *user = sasl_conversation_user(session->conversation);
    scram_mechanism_t mechanism = sasl_conversation_mechanism(session->conversation);
    if (!auth_users_find(context->session, user, database, &user_document, &found, &reason)) {
        return conversation_failed(context, session, &reason, error);
    }
    if (!found) {
        tc_error_set(&reason, TC_ERR_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", user, database);
        return conversation_failed(context, session, &reason, error);
    }
    bool has_credentials = scram_credentials_from_user_document(&user_document, mechanism, &credentials);
    bson_destroy(&user_document);
    if (!has_credentials) {
        tc_error_set(&reason, TC_ERR_AUTHENTICATION_FAILED,
                     "Unable to use %s based authentication for user without any %s credentials registered",
                     scram_mechanism_name(mechanism), scram_mechanism_name(mechanism));
        return conversation_failed(context, session, &reason, error);
    }
    bool replied = sasl_conversation_reply_first(session->conversation, &credentials, reply, &reason);
    memset(&credentials, 0, sizeof credentials);
    return replied || conversation_failed(context, session, &reason, error);
}

/* The conversation succeeded: the connection is now user@database, as mongod's
 * addAndAuthorizeUser allows (one user per connection; the same one again is
 * accepted). */
static bool conversation_succeeded(command_context_t *context, auth_session_t *session, bson_error_t *error)
{
    const char *user = sasl_conversation_user(session->conversation);
    const char *database = sasl_conversation_database(session->conversation);
    bson_t document;
    bool found = false;
    bson_error_t reason;

    if (session->user.name != NULL) {
        bool same = privileges_admit_another_login(&session->user, user, database, error);
        if (same) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, context->connection_id,
                   "Client has attempted to reauthenticate as a single user: %s@%s", user, database);
        }
        conversation_reset(session);
        return same;
    }
    bool read = auth_users_find(context->session, user, database, &document, &found, &reason);
    if (!read || !found) {
        if (read) { /* dropped since saslStart */
            tc_error_set(&reason, TC_ERR_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", user, database);
        }
        return conversation_failed(context, session, &reason, error);
    }
    bool parsed = privileges_user_from_document(&document, &session->user);
    bson_destroy(&document);
    if (!parsed) {
        tc_error_set(&reason, TC_ERR_AUTHENTICATION_FAILED, "the user document of %s@%s is malformed", user, database);
        return conversation_failed(context, session, &reason, error);
    }
    session->generation = atomic_load(&context->store->auth->generation);
    sasl_log_authentication(session->conversation, context->connection_id, context->peer_address, NULL);
    conversation_reset(session);
    return true;
}

bool auth_sasl_continue(command_context_t *context, const sasl_request_t *request, bson_t *reply, bson_error_t *error)
{
    auth_session_t *session = auth_session_get(context);
    bson_error_t reason;
    bson_t step = BSON_INITIALIZER;
    bool done = false;
    if (session == NULL || session->conversation == NULL) {
        return tc_error_set(error, TC_ERR_PROTOCOL_ERROR, "No SASL session state found");
    }
    if (!sasl_conversation_continue(session->conversation, request, &step, &done, &reason)) {
        bson_destroy(&step);
        if (reason.code == TC_ERR_PROTOCOL_ERROR) {
            *error = reason; /* the wrong conversationId: the conversation goes on */
            return false;
        }
        return conversation_failed(context, session, &reason, error);
    }
    bool ok = !done || conversation_succeeded(context, session, error);
    if (ok) {
        bson_concat(reply, &step);
    }
    bson_destroy(&step);
    return ok;
}

/* --- hello and connectionStatus -------------------------------------------------------- */

/* saslSupportedMechs: "db.user": the mechanisms user has credentials for; nothing
 * when there is no such user. */
static void append_supported_mechanisms(command_context_t *context, const char *qualified_name, bson_t *reply)
{
    const char *dot = strchr(qualified_name, '.');
    if (dot == NULL || dot == qualified_name || dot[1] == '\0') {
        return;
    }
    char *database = bson_strndup(qualified_name, (size_t)(dot - qualified_name));
    bson_t document;
    bool found = false;
    bson_error_t error;
    if (auth_users_find(context->session, dot + 1, database, &document, &found, &error) && found) {
        bson_t mechanisms;
        uint32_t index = 0;
        BSON_APPEND_ARRAY_BEGIN(reply, "saslSupportedMechs", &mechanisms);
        const scram_mechanism_t all[] = {SCRAM_SHA_1, SCRAM_SHA_256};
        for (size_t i = 0; i < 2; i++) {
            scram_credentials_t credentials;
            if (scram_credentials_from_user_document(&document, all[i], &credentials)) {
                char key[16];
                const char *key_string;
                bson_uint32_to_string(index++, &key_string, key, sizeof key);
                BSON_APPEND_UTF8(&mechanisms, key_string, scram_mechanism_name(all[i]));
            }
        }
        bson_append_array_end(reply, &mechanisms);
        bson_destroy(&document);
    }
    bson_free(database);
}

static void run_speculative_start(command_context_t *context, const bson_t *document, bson_t *reply)
{
    sasl_request_t request;
    bson_t step = BSON_INITIALIZER;
    bson_error_t error;
    if (sasl_parse_speculative(document, &request) &&
        auth_sasl_start(context, &request, request.database, true, &step, &error)) {
        BSON_APPEND_DOCUMENT(reply, "speculativeAuthenticate", &step);
    }
    bson_destroy(&step);
    sasl_request_cleanup(&request);
}

void auth_append_hello(command_context_t *context, bson_t *reply)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, context->command, "saslSupportedMechs") && BSON_ITER_HOLDS_UTF8(&iter)) {
        append_supported_mechanisms(context, bson_iter_utf8(&iter, NULL), reply);
    }
    if (bson_iter_init_find(&iter, context->command, "speculativeAuthenticate") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t request;
        bson_iter_document(&iter, &length, &data);
        if (bson_init_static(&request, data, length)) {
            run_speculative_start(context, &request, reply);
        }
    }
}

/* authenticatedUserPrivileges: what user's roles grant, one entry per resource
 * (an empty array when nobody is authenticated, as mongod answers). */
static void append_user_privileges(const privileges_user_t *user, bson_t *info)
{
    size_t capacity = user != NULL ? user->grant_count * ROLES_PRIVILEGES_PER_GRANT : 0;
    roles_privilege_t *privileges = bson_malloc0((capacity + 1) * sizeof *privileges);
    size_t count = user != NULL ? roles_privileges(user->grants, user->grant_count, privileges, capacity) : 0;
    bson_t array, entry, resource, actions;
    BSON_APPEND_ARRAY_BEGIN(info, "authenticatedUserPrivileges", &array);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&array, key_string, &entry);
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "resource", &resource);
        if (privileges[i].resource == ROLES_PRIVILEGE_CLUSTER) {
            BSON_APPEND_BOOL(&resource, "cluster", true);
        } else if (privileges[i].resource == ROLES_PRIVILEGE_ANY_RESOURCE) {
            BSON_APPEND_BOOL(&resource, "anyResource", true);
        } else {
            BSON_APPEND_UTF8(&resource, "db", privileges[i].database);
            BSON_APPEND_UTF8(&resource, "collection", privileges[i].collection);
        }
        bson_append_document_end(&entry, &resource);
        BSON_APPEND_ARRAY_BEGIN(&entry, "actions", &actions);
        uint32_t position = 0;
        for (int action = 0; action < ROLES_ACTION_COUNT; action++) {
            if ((privileges[i].actions & ROLES_ACTION(action)) != 0) {
                bson_uint32_to_string(position++, &key_string, key, sizeof key);
                BSON_APPEND_UTF8(&actions, key_string, roles_action_name((roles_action_t)action));
            }
        }
        bson_append_array_end(&entry, &actions);
        bson_append_document_end(&array, &entry);
    }
    bson_append_array_end(info, &array);
    bson_free(privileges);
}

void auth_append_connection_status(command_context_t *context, bson_t *reply)
{
    auth_session_t *session = auth_session_get(context);
    bson_t info, users, roles;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "authInfo", &info);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUsers", &users);
    if (session != NULL && session->user.name != NULL) {
        bson_t user;
        BSON_APPEND_DOCUMENT_BEGIN(&users, "0", &user);
        BSON_APPEND_UTF8(&user, "user", session->user.name);
        BSON_APPEND_UTF8(&user, "db", session->user.database);
        bson_append_document_end(&users, &user);
    }
    bson_append_array_end(&info, &users);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUserRoles", &roles);
    for (size_t i = 0; session != NULL && session->user.name != NULL && i < session->user.grant_count; i++) {
        char key[16];
        const char *key_string;
        bson_t role;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&roles, key_string, &role);
        BSON_APPEND_UTF8(&role, "role", session->user.grants[i].role);
        BSON_APPEND_UTF8(&role, "db", session->user.grants[i].database);
        bson_append_document_end(&roles, &role);
    }
    bson_append_array_end(&info, &roles);
    bson_iter_t show;
    if (bson_iter_init_find(&show, context->command, "showPrivileges") && bson_iter_as_bool(&show)) {
        append_user_privileges(session != NULL && session->user.name != NULL ? &session->user : NULL, &info);
    }
    bson_append_document_end(reply, &info);
}
