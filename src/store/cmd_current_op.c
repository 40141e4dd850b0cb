/* What the store is doing: the $currentOp and $listLocalSessions sources of
 * {aggregate: 1} on admin, the currentOp command (a $currentOp, a match and the
 * operations in one document, as mongod runs it) and killOp. The tables they
 * read are current_op.h's, session_cache.h's, the cursors' and the
 * transactions'. */
#include "store/auth.h"
#include "store/commands.h"
#include "store/transactions.h"
#include "query/match.h"
#include "query/value_format.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* mongod's `host`: "hostname:port". */
static void format_host(const command_context_t *context, char *buffer, size_t size)
{
    char name[256] = "localhost";
    if (gethostname(name, sizeof name) != 0) {
        strcpy(name, "localhost");
    }
    name[sizeof name - 1] = '\0';
    snprintf(buffer, size, "%s:%d", name, server_port(context->store->server));
}

static bool require_admin_aggregate(const command_context_t *context, const char *stage, bson_error_t *error)
{
    if (strcmp(context->database, "admin") != 0) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE,
                            "%s must be run against the 'admin' database with {aggregate: 1}", stage);
    }
    return true;
}

/* --- $currentOp ------------------------------------------------------------------- */

typedef struct current_op_spec {
    bool all_users;
    bool idle_connections;
    bool idle_cursors;
    bool idle_sessions;
    bool local_ops;   /* a mongos's own operations only: on a store, every operation is local */
    bool truncate_ops;
} current_op_spec_t;

/* $currentOp's options as mongod's DocumentSourceCurrentOp::createFromBson
 * reads them: FailedToParse 9 for a non-document, a non-boolean option or an
 * unknown one. */
static bool parse_current_op_spec(const bson_iter_t *argument, current_op_spec_t *out, bson_error_t *error)
{
    static const char *const names[] = {"allUsers", "idleConnections", "idleCursors",
                                        "idleSessions", "localOps", "truncateOps"};
    bool *const targets[] = {&out->all_users, &out->idle_connections, &out->idle_cursors,
                             &out->idle_sessions, &out->local_ops, &out->truncate_ops};
    bson_iter_t iter;
    *out = (current_op_spec_t){.idle_sessions = true};
    if (!BSON_ITER_HOLDS_DOCUMENT(argument)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "$currentOp options must be specified in an object, but found: %s",
                            value_type_name(bson_iter_type(argument)));
    }
    bson_iter_recurse(argument, &iter);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(names[i], key) != 0) {
            i++;
        }
        if (i == sizeof names / sizeof names[0]) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Unrecognized option '%s' in $currentOp stage.", key);
        }
        if (!BSON_ITER_HOLDS_BOOL(&iter)) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                                "The '%s' parameter of the $currentOp stage must be a boolean value, but found: %s",
                                key, value_type_name(bson_iter_type(&iter)));
        }
        *targets[i] = bson_iter_bool(&iter);
    }
    return true;
}

/* The documents $currentOp produces for spec, appended to array. */
static void list_operations(command_context_t *context, const current_op_spec_t *spec, bson_t *array)
{
    char host[300];
    uint32_t count = 0;
    const privileges_user_t *user = auth_connection_user(context->connection);
    format_host(context, host, sizeof host);
    current_op_report_options_t options = {
        .all_users = spec->all_users,
        .user_name = user != NULL ? user->name : NULL,
        .user_database = user != NULL ? user->database : NULL,
        .auth_enabled = auth_enabled(context),
        .idle_connections = spec->idle_connections,
        .truncate_ops = spec->truncate_ops,
        .host = host,
    };
    current_op_report(context->store->operations, &options, array, &count);
    /* Cursors and transactions record no owner: under --auth only allUsers lists them. */
    bool owner_free = spec->all_users || !options.auth_enabled;
    if (spec->idle_cursors && owner_free) {
        cursor_table_report_idle(context->store->cursors, host, array, &count);
    }
    if (spec->idle_sessions && owner_free) {
        transaction_table_report_idle(context->store->transactions, host, array, &count);
    }
}

/* --- $listLocalSessions ---------------------------------------------------------- */

#define MAX_LISTED_USERS 64

typedef struct list_sessions_spec {
    bool all_users;
    const char *names[MAX_LISTED_USERS]; /* point into the command */
    const char *databases[MAX_LISTED_USERS];
    size_t user_count;
    bool has_users;
} list_sessions_spec_t;

static bool wrong_type(const char *field, const bson_iter_t *iter, const char *expected, bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s' is the wrong type '%s', expected type '%s'",
                        field, value_type_name(bson_iter_type(iter)), expected);
}

/* users: [{user, db}] as mongod's ListSessionsUser IDL reads it. */
static bool parse_listed_users(bson_iter_t *users, list_sessions_spec_t *out, bson_error_t *error)
{
    bson_iter_t item, field;
    bson_iter_recurse(users, &item);
    while (bson_iter_next(&item)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&item)) {
            return wrong_type("$listLocalSessions.users", &item, "object", error);
        }
        if (out->user_count == MAX_LISTED_USERS) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "$listLocalSessions lists at most %d users at once",
                                MAX_LISTED_USERS);
        }
        const char *keys[] = {"user", "db"};
        const char **targets[] = {&out->names[out->user_count], &out->databases[out->user_count]};
        for (size_t i = 0; i < 2; i++) {
            char path[64];
            snprintf(path, sizeof path, "ListSessionsUser.%s", keys[i]);
            if (!bson_iter_recurse(&item, &field) || !bson_iter_find(&field, keys[i])) {
                return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field '%s' is missing but a required "
                                    "field", path);
            }
            if (!BSON_ITER_HOLDS_UTF8(&field)) {
                return wrong_type(path, &field, "string", error);
            }
            *targets[i] = bson_iter_utf8(&field, NULL);
        }
        out->user_count++;
    }
    return true;
}

/* The stage's options as mongod's ListSessionsSpec: 40415 for an unknown field,
 * TypeMismatch 14, UnsupportedFormat 12 for allUsers beside users. */
static bool parse_list_sessions_spec(const bson_iter_t *argument, list_sessions_spec_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    if (!BSON_ITER_HOLDS_DOCUMENT(argument)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$listLocalSessions options must be specified in an object, but found: %s",
                            value_type_name(bson_iter_type(argument)));
    }
    bson_iter_recurse(argument, &iter);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "allUsers") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&iter)) {
                return wrong_type("$listLocalSessions.allUsers", &iter, "bool", error);
            }
            out->all_users = bson_iter_bool(&iter);
        } else if (strcmp(key, "users") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
                return wrong_type("$listLocalSessions.users", &iter, "array", error);
            }
            out->has_users = true;
            if (!parse_listed_users(&iter, out, error)) {
                return false;
            }
        } else {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD,
                                "BSON field '$listLocalSessions.%s' is an unknown field.", key);
        }
    }
    if (out->all_users && out->user_count > 0) {
        return tc_error_set(error, TC_ERR_UNSUPPORTED_FORMAT,
                            "$listLocalSessions may not specify {allUsers:true} and {users:[...]} at the same time");
    }
    return true;
}

static void list_sessions(command_context_t *context, const list_sessions_spec_t *spec, bson_t *array)
{
    uint32_t count = 0;
    const privileges_user_t *user = auth_connection_user(context->connection);
    const char *own_name = user != NULL ? user->name : NULL;
    const char *own_database = user != NULL ? user->database : NULL;
    session_cache_filter_t filter = {.all_users = spec->all_users};
    if (spec->has_users) {
        filter.names = spec->names;
        filter.databases = spec->databases;
        filter.user_count = spec->user_count;
    } else {
        filter.names = &own_name; /* the requester's own: without access control, no user */
        filter.databases = &own_database;
        filter.user_count = 1;
    }
    session_cache_list(context->store->sessions, &filter, array, &count);
}

bool command_system_source(command_context_t *context, const char *stage, const bson_iter_t *argument,
                           bson_t *out_documents, bson_error_t *error)
{
    bson_init(out_documents);
    if (!require_admin_aggregate(context, stage, error)) {
        return false;
    }
    if (strcmp(stage, "$currentOp") == 0) {
        current_op_spec_t spec;
        if (!parse_current_op_spec(argument, &spec, error)) {
            return false;
        }
        list_operations(context, &spec, out_documents);
        return true;
    }
    list_sessions_spec_t spec;
    if (!parse_list_sessions_spec(argument, &spec, error)) {
        return false;
    }
    list_sessions(context, &spec, out_documents);
    return true;
}

/* --- currentOp and killOp --------------------------------------------------------- */

/* currentOp: mongod runs it as {$currentOp: {allUsers: !$ownOps, idleConnections:
 * $all, truncateOps: true}}, a $match on the command's other fields, and one
 * document {inprog: [...]}. */
static bool handle_current_op(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bool all = false, own_only = false;
    bson_t operations = BSON_INITIALIZER, filter, inprog;
    bson_iter_t iter;
    uint32_t count = 0;
    if (!command_require_admin_database(context, error) || !command_get_bool(context, "$all", false, &all, error) ||
        !command_get_bool(context, "$ownOps", false, &own_only, error)) {
        bson_destroy(&operations);
        return false;
    }
    current_op_command_filter(context->command, &filter);
    match_expression_t *matcher = match_compile(&filter, error);
    bson_destroy(&filter);
    if (matcher == NULL) {
        bson_destroy(&operations);
        return false;
    }
    current_op_spec_t spec = {
        .all_users = !own_only, .idle_connections = all, .idle_sessions = true, .truncate_ops = true};
    list_operations(context, &spec, &operations);
    BSON_APPEND_ARRAY_BEGIN(reply, "inprog", &inprog);
    bson_iter_init(&iter, &operations);
    while (bson_iter_next(&iter)) {
        bson_t operation;
        const bson_value_t *value = bson_iter_value(&iter);
        bson_init_static(&operation, value->value.v_doc.data, value->value.v_doc.data_len);
        if (match_document(matcher, &operation)) {
            current_op_array_append(&inprog, &count, &operation);
        }
    }
    bson_append_array_end(reply, &inprog);
    match_destroy(matcher);
    bson_destroy(&operations);
    return true;
}

/* killOp {op: <opid>}: the operation stops at its next check point (a scan's
 * next document) with Interrupted 11601. op is read as mongod's
 * bsonExtractIntegerField reads it: NoSuchKey 4, TypeMismatch 14, BadValue 2.
 * Under --auth a user without killop kills only its own operations; another's
 * opid is answered as one that does not run, as mongod does. */
static bool handle_kill_op(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    if (!command_require_admin_database(context, error)) {
        return false;
    }
    if (!bson_iter_init_find(&iter, context->command, "op")) {
        return tc_error_set(error, TC_ERR_NO_SUCH_KEY, "Missing expected field \"op\"");
    }
    if (!BSON_ITER_HOLDS_NUMBER(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "\"op\" had the wrong type. Expected number, found %s",
                            value_type_name(bson_iter_type(&iter)));
    }
    if (BSON_ITER_HOLDS_DOUBLE(&iter) && bson_iter_double(&iter) != (double)(int64_t)bson_iter_double(&iter)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Expected field \"op\" to have a value exactly representable as a 64-bit integer, but "
                            "found op: %g",
                            bson_iter_double(&iter));
    }
    const privileges_user_t *user = auth_connection_user(context->connection);
    roles_resource_t cluster = {ROLES_RESOURCE_CLUSTER, NULL, NULL};
    int64_t opid = bson_iter_as_int64(&iter);
    if (!auth_enabled(context) ||
        (user != NULL && roles_allow(user->grants, user->grant_count, &cluster, ROLES_ACTION(ROLES_KILLOP)))) {
        current_op_kill(context->store->operations, opid, NULL, NULL);
    } else if (user != NULL) {
        current_op_kill(context->store->operations, opid, user->name, user->database);
    } /* else the localhost exception's client, which owns no operation to kill */
    BSON_APPEND_UTF8(reply, "info", "attempting to kill op");
    return true;
}

const command_definition_t current_op_commands[] = {
    {"currentOp", handle_current_op},
    {"killOp", handle_kill_op},
    {NULL, NULL},
};
