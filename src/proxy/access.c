/* Who a client of the proxy is, and what it may do. The proxy runs the SCRAM
 * conversation itself (security/sasl.h: saslStart, saslContinue, hello's
 * speculativeAuthenticate) against the users the archive holds (user_cache.c),
 * and with authorization: enabled checks every command against the user's
 * roles (security/privileges.h, the table the store uses) before it is
 * planned, whichever tier will serve it: the tiers only ever see the proxy's
 * own user. Authentication failures answer AuthenticationFailed "Authentication
 * failed." as mongod does; the reason goes to the log, never a secret. */
#include "proxy/proxy_private.h"

#include "common/clock.h"
#include "common/log.h"
#include "security/sasl.h"

#include <string.h>

#define LOG_COMPONENT "ACCESS"

typedef struct access_session {
    privileges_user_t user;              /* who the connection is; name NULL: nobody */
    int64_t user_read_ms;                /* when its roles were read from the archive */
    uint64_t user_generation;            /* the user cache's generation then */
    sasl_conversation_t *conversation;   /* under way, or NULL */
    privileges_user_t conversation_user; /* its user, as the archive had it at saslStart */
    int64_t conversation_read_ms;
    uint64_t conversation_generation;
} access_session_t;

/* One request waiting for the user cache. */
typedef struct access_call {
    proxy_t *proxy;
    access_client_t client;
    access_session_t *session;
    const char *name;          /* access_admit */
    const bson_t *command;     /* access_admit, access_hello: the request's, valid while it is */
    access_admit_fn admitted;  /* access_admit */
    access_reply_fn done;      /* the others */
    void *context;
    bool for_hello;            /* a speculative start: its reply goes into hello_fields */
    bson_t hello_fields;
} access_call_t;

static access_session_t *session_get(const access_client_t *client)
{
    if (*client->connection_data == NULL) {
        *client->connection_data = bson_malloc0(sizeof(access_session_t));
    }
    return *client->connection_data;
}

static void conversation_reset(access_session_t *session)
{
    sasl_conversation_destroy(session->conversation);
    session->conversation = NULL;
    privileges_user_cleanup(&session->conversation_user);
}

void access_session_destroy(void *application, void *state)
{
    access_session_t *session = state;
    (void)application;
    if (session == NULL) {
        return;
    }
    conversation_reset(session);
    privileges_user_cleanup(&session->user);
    bson_free(session);
}

static access_call_t *call_new(proxy_t *proxy, const access_client_t *client, void *context)
{
    access_call_t *call = BSON_ALIGNED_ALLOC0(access_call_t); /* holds a bson_t */
    call->proxy = proxy;
    call->client = *client;
    call->session = session_get(client);
    call->context = context;
    bson_init(&call->hello_fields);
    return call;
}

static void call_free(access_call_t *call)
{
    bson_destroy(&call->hello_fields);
    bson_free(call);
}

static const char *command_database(const bson_t *command)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, command, "$db") && BSON_ITER_HOLDS_UTF8(&iter)) {
        return bson_iter_utf8(&iter, NULL);
    }
    return "admin"; /* an OP_QUERY handshake names no database in its body */
}

/* --- the check before every command ---------------------------------------------------- */

static void check_command(access_call_t *call)
{
    bson_error_t error;
    privileges_subject_t subject = {.user = &call->session->user, .forwards_as_itself = true};
    bool allowed =
        privileges_check_command(&subject, call->name, call->command, command_database(call->command), &error);
    access_admit_fn admitted = call->admitted;
    void *context = call->context;
    call_free(call);
    admitted(context, allowed ? NULL : &error);
}

/* The user's roles as the archive has them now: a dropped user leaves the
 * connection unauthenticated, as mongod's session refresh does. When the
 * archive cannot answer, the roles read before stand until it can. */
static void on_user_refreshed(void *context, const proxy_user_t *user, const bson_error_t *error)
{
    access_call_t *call = context;
    access_session_t *session = call->session;
    if (error != NULL) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, call->client.connection_id,
               "cannot refresh user %s@%s (its roles read before stand): %s", session->user.name,
               session->user.database, error->message);
        session->user_read_ms = clock_monotonic_ms(); /* try again when the cache would */
        session->user_generation = user_cache_generation(call->proxy->users);
    } else if (!user->found) {
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, call->client.connection_id,
               "user %s@%s was dropped: removing it from the connection", session->user.name, session->user.database);
        privileges_user_cleanup(&session->user);
    } else {
        privileges_user_cleanup(&session->user);
        privileges_user_copy(&user->user, &session->user);
        session->user_read_ms = user->fetched_ms;
        session->user_generation = user->generation;
    }
    check_command(call);
}

void access_admit(proxy_t *proxy, const access_client_t *client, const char *name, const bson_t *command,
                  access_admit_fn done, void *context)
{
    if (!proxy->config->authorization_enabled || privileges_runs_unauthenticated(name)) {
        done(context, NULL);
        return;
    }
    access_call_t *call = call_new(proxy, client, context);
    call->name = name;
    call->command = command;
    call->admitted = done;
    access_session_t *session = call->session;
    bool stale = clock_monotonic_ms() - session->user_read_ms >= PROXY_USER_CACHE_MS ||
                 session->user_generation != user_cache_generation(proxy->users);
    if (session->user.name != NULL && stale) {
        user_cache_lookup(proxy->users, session->user.name, session->user.database, on_user_refreshed, call);
        return;
    }
    check_command(call);
}

/* --- the SASL conversation ------------------------------------------------------------------ */

static bool is_network_error(const bson_error_t *error)
{
    return error->code == TC_ERR_HOST_UNREACHABLE || error->code == TC_ERR_NETWORK_TIMEOUT ||
           error->code == TC_ERR_SOCKET_EXCEPTION;
}

/* Logs why, ends the conversation, and fills error with what the client may
 * learn: the public errors as they are, the archive being unreachable (so that
 * drivers retry), else only that it failed. */
static void conversation_failed(access_call_t *call, const bson_error_t *reason, bson_error_t *error)
{
    access_session_t *session = call->session;
    sasl_conversation_t *conversation = session->conversation;
    sasl_log_authentication(conversation, call->client.connection_id, call->client.peer_address, reason);
    conversation_reset(session);
    if (sasl_error_is_public(reason) || is_network_error(reason)) {
        *error = *reason;
    } else {
        tc_error_set(error, TC_ERR_AUTHENTICATION_FAILED, SASL_FAILED_MESSAGE);
    }
}

/* The end of a saslStart, or of hello's speculative one. */
static void finish_start(access_call_t *call, const bson_t *reply, const bson_error_t *error)
{
    access_reply_fn done = call->done;
    void *context = call->context;
    if (call->for_hello) {
        if (reply != NULL) {
            BSON_APPEND_DOCUMENT(&call->hello_fields, "speculativeAuthenticate", reply);
        }
        done(context, &call->hello_fields, NULL); /* a failed speculative start only leaves it out */
    } else {
        done(context, reply, error);
    }
    call_free(call);
}

static void fail_start(access_call_t *call, const bson_error_t *reason)
{
    bson_error_t error;
    conversation_failed(call, reason, &error);
    finish_start(call, NULL, &error);
}

static void on_conversation_user(void *context, const proxy_user_t *user, const bson_error_t *error)
{
    access_call_t *call = context;
    access_session_t *session = call->session;
    sasl_conversation_t *conversation = session->conversation;
    scram_mechanism_t mechanism = sasl_conversation_mechanism(conversation);
    bson_error_t reason;
    if (error != NULL) {
        fail_start(call, error);
        return;
    }
    if (!user->found) {
        tc_error_set(&reason, TC_ERR_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"",
                     sasl_conversation_user(conversation), sasl_conversation_database(conversation));
        fail_start(call, &reason);
        return;
    }
    if (!user->has_credentials[mechanism]) {
        tc_error_set(&reason, TC_ERR_AUTHENTICATION_FAILED,
                     "Unable to use %s based authentication for user without any %s credentials registered",
                     scram_mechanism_name(mechanism), scram_mechanism_name(mechanism));
        fail_start(call, &reason);
        return;
    }
    bson_t reply = BSON_INITIALIZER;
    if (!sasl_conversation_reply_first(conversation, &user->credentials[mechanism], &reply, &reason)) {
        bson_destroy(&reply);
        fail_start(call, &reason);
        return;
    }
    privileges_user_cleanup(&session->conversation_user);
    privileges_user_copy(&user->user, &session->conversation_user);
    session->conversation_read_ms = user->fetched_ms;
    session->conversation_generation = user->generation;
    finish_start(call, &reply, NULL);
    bson_destroy(&reply);
}

/* A saslStart (or speculative one) for a user of database: parses client-first,
 * then asks the user cache for the user's credentials. */
static void start_conversation(access_call_t *call, const sasl_request_t *request, const char *database,
                               bool speculative)
{
    access_session_t *session = call->session;
    bson_error_t reason;
    conversation_reset(session); /* a new saslStart abandons any conversation under way */
    if (!sasl_conversation_start(request, database, speculative, &session->conversation, &reason)) {
        if (session->conversation == NULL) {
            finish_start(call, NULL, &reason); /* an unknown mechanism: no conversation began */
            return;
        }
        fail_start(call, &reason);
        return;
    }
    user_cache_lookup(call->proxy->users, sasl_conversation_user(session->conversation), database,
                      on_conversation_user, call);
}

/* The conversation succeeded: the connection is now user@database, one user per
 * connection as mongod's addAndAuthorizeUser allows (the same one again is
 * accepted). */
static bool conversation_succeeded(const access_client_t *client, access_session_t *session, bson_error_t *error)
{
    sasl_conversation_t *conversation = session->conversation;
    const char *user = sasl_conversation_user(conversation);
    const char *database = sasl_conversation_database(conversation);
    if (session->user.name != NULL) {
        bool same = privileges_admit_another_login(&session->user, user, database, error);
        if (same) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, client->connection_id,
                   "Client has attempted to reauthenticate as a single user: %s@%s", user, database);
        }
        conversation_reset(session);
        return same;
    }
    sasl_log_authentication(conversation, client->connection_id, client->peer_address, NULL);
    session->user = session->conversation_user; /* moved */
    memset(&session->conversation_user, 0, sizeof session->conversation_user);
    session->user_read_ms = session->conversation_read_ms;
    session->user_generation = session->conversation_generation;
    conversation_reset(session);
    return true;
}

static void run_sasl_continue(proxy_t *proxy, const access_client_t *client, const bson_t *command,
                              access_reply_fn done, void *context)
{
    access_session_t *session = session_get(client);
    sasl_request_t request;
    bson_error_t error, reason;
    bson_t reply = BSON_INITIALIZER;
    bool finished = false;
    bool ok = false;
    (void)proxy;
    if (!sasl_parse_continue(command, &request, &error)) {
        goto done;
    }
    if (session->conversation == NULL) {
        tc_error_set(&error, TC_ERR_PROTOCOL_ERROR, "No SASL session state found");
        goto done;
    }
    if (!sasl_conversation_continue(session->conversation, &request, &reply, &finished, &reason)) {
        if (reason.code == TC_ERR_PROTOCOL_ERROR) {
            error = reason; /* the wrong conversationId: the conversation goes on */
        } else {
            access_call_t failed = {.proxy = proxy, .client = *client, .session = session};
            conversation_failed(&failed, &reason, &error);
        }
        goto done;
    }
    ok = !finished || conversation_succeeded(client, session, &error);
done:
    done(context, ok ? &reply : NULL, ok ? NULL : &error);
    bson_destroy(&reply);
    sasl_request_cleanup(&request);
}

/* --- logout, connectionStatus ------------------------------------------------------------- */

static void run_logout(const access_client_t *client, const bson_t *command, access_reply_fn done, void *context)
{
    access_session_t *session = session_get(client);
    bson_t reply = BSON_INITIALIZER;
    if (session->user.name != NULL && strcmp(session->user.database, command_database(command)) == 0) {
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, client->connection_id, "%s@%s logged out", session->user.name,
               session->user.database);
        privileges_user_cleanup(&session->user);
    }
    done(context, &reply, NULL);
    bson_destroy(&reply);
}

static void run_connection_status(const access_client_t *client, access_reply_fn done, void *context)
{
    access_session_t *session = session_get(client);
    const privileges_user_t *user = &session->user;
    bson_t reply = BSON_INITIALIZER, info, users, roles;
    BSON_APPEND_DOCUMENT_BEGIN(&reply, "authInfo", &info);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUsers", &users);
    if (user->name != NULL) {
        bson_t entry;
        BSON_APPEND_DOCUMENT_BEGIN(&users, "0", &entry);
        BSON_APPEND_UTF8(&entry, "user", user->name);
        BSON_APPEND_UTF8(&entry, "db", user->database);
        bson_append_document_end(&users, &entry);
    }
    bson_append_array_end(&info, &users);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUserRoles", &roles);
    for (size_t i = 0; user->name != NULL && i < user->grant_count; i++) {
        char key[16];
        const char *key_string;
        bson_t role;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&roles, key_string, &role);
        BSON_APPEND_UTF8(&role, "role", user->grants[i].role);
        BSON_APPEND_UTF8(&role, "db", user->grants[i].database);
        bson_append_document_end(&roles, &role);
    }
    bson_append_array_end(&info, &roles);
    bson_append_document_end(&reply, &info);
    done(context, &reply, NULL);
    bson_destroy(&reply);
}

bool access_answers(const char *name)
{
    static const char *const answered[] = {"saslStart", "saslContinue", "logout", "connectionStatus", "authenticate"};
    for (size_t i = 0; i < sizeof answered / sizeof answered[0]; i++) {
        if (strcmp(name, answered[i]) == 0) {
            return true;
        }
    }
    return false;
}

void access_run(proxy_t *proxy, const access_client_t *client, const char *name, const bson_t *command,
                access_reply_fn done, void *context)
{
    bson_error_t error;
    if (strcmp(name, "saslStart") == 0) {
        sasl_request_t request;
        if (!sasl_parse_start(command, &request, &error)) {
            sasl_request_cleanup(&request);
            done(context, NULL, &error);
            return;
        }
        access_call_t *call = call_new(proxy, client, context);
        call->done = done;
        start_conversation(call, &request, command_database(command), false);
        sasl_request_cleanup(&request);
    } else if (strcmp(name, "saslContinue") == 0) {
        run_sasl_continue(proxy, client, command, done, context);
    } else if (strcmp(name, "logout") == 0) {
        run_logout(client, command, done, context);
    } else if (strcmp(name, "connectionStatus") == 0) {
        run_connection_status(client, done, context);
    } else {
        /* authenticate: MONGODB-X509 and MONGODB-CR are not offered; forwarded, it
         * would act on the proxy's own connection to the archive. */
        bson_iter_t iter;
        const char *mechanism = bson_iter_init_find(&iter, command, "mechanism") && BSON_ITER_HOLDS_UTF8(&iter)
                                    ? bson_iter_utf8(&iter, NULL)
                                    : "";
        tc_error_set(&error, TC_ERR_MECHANISM_UNAVAILABLE,
                     "Received authentication for mechanism %s which is not enabled", mechanism);
        done(context, NULL, &error);
    }
}

/* --- hello ------------------------------------------------------------------------------- */

bool access_hello_wanted(const bson_t *command)
{
    bson_iter_t iter;
    return (bson_iter_init_find(&iter, command, "saslSupportedMechs") && BSON_ITER_HOLDS_UTF8(&iter)) ||
           (bson_iter_init_find(&iter, command, "speculativeAuthenticate") && BSON_ITER_HOLDS_DOCUMENT(&iter));
}

/* speculativeAuthenticate, the second part of hello's authentication work. */
static void continue_hello(access_call_t *call)
{
    bson_iter_t iter;
    bson_t document;
    sasl_request_t request;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, call->command, "speculativeAuthenticate") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        finish_start(call, NULL, NULL);
        return;
    }
    bson_iter_document(&iter, &length, &data);
    if (!bson_init_static(&document, data, length) || !sasl_parse_speculative(&document, &request)) {
        sasl_request_cleanup(&request);
        finish_start(call, NULL, NULL); /* mongod ignores one it cannot read */
        return;
    }
    start_conversation(call, &request, request.database, true);
    sasl_request_cleanup(&request);
}

/* saslSupportedMechs: "db.user": the mechanisms the user has credentials for;
 * nothing when there is no such user (or the archive cannot say). */
static void on_mechanisms_user(void *context, const proxy_user_t *user, const bson_error_t *error)
{
    access_call_t *call = context;
    if (error == NULL && user->found) {
        bson_t mechanisms;
        uint32_t index = 0;
        BSON_APPEND_ARRAY_BEGIN(&call->hello_fields, "saslSupportedMechs", &mechanisms);
        for (int m = SCRAM_SHA_1; m <= SCRAM_SHA_256; m++) {
            if (user->has_credentials[m]) {
                char key[16];
                const char *key_string;
                bson_uint32_to_string(index++, &key_string, key, sizeof key);
                BSON_APPEND_UTF8(&mechanisms, key_string, scram_mechanism_name((scram_mechanism_t)m));
            }
        }
        bson_append_array_end(&call->hello_fields, &mechanisms);
    }
    continue_hello(call);
}

void access_hello(proxy_t *proxy, const access_client_t *client, const bson_t *command, access_reply_fn done,
                  void *context)
{
    access_call_t *call = call_new(proxy, client, context);
    call->command = command;
    call->done = done;
    call->for_hello = true;
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, command, "saslSupportedMechs") && BSON_ITER_HOLDS_UTF8(&iter)) {
        const char *qualified = bson_iter_utf8(&iter, NULL);
        const char *dot = strchr(qualified, '.');
        if (dot != NULL && dot != qualified && dot[1] != '\0') {
            char *database = bson_strndup(qualified, (size_t)(dot - qualified));
            user_cache_lookup(proxy->users, dot + 1, database, on_mechanisms_user, call);
            bson_free(database);
            return;
        }
    }
    continue_hello(call);
}

/* --- after a tier's reply --------------------------------------------------------------------- */

void access_note_reply(proxy_t *proxy, const char *name, const fields_t *command)
{
    bson_iter_t iter;
    const char *database = fields_find(command, "$db", &iter) && BSON_ITER_HOLDS_UTF8(&iter)
                               ? bson_iter_utf8(&iter, NULL)
                               : "admin"; /* an OP_QUERY handshake names no database in its body */
    if (privileges_command_changes_users(name, command->document, database)) {
        user_cache_invalidate(proxy->users);
    }
}

bool access_trims_reply(const proxy_t *proxy, const char *name)
{
    return proxy->config->authorization_enabled && strcmp(name, "listDatabases") == 0;
}

void access_trim_reply(const access_client_t *client, bson_t *reply)
{
    access_session_t *session = *client->connection_data;
    privileges_filter_list_databases(session != NULL ? &session->user : NULL, reply);
}
