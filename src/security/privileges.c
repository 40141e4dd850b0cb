/* The command -> privileges table (privileges.h), the check, mongod's refusal
 * message, listDatabases' filter, and the user documents sessions hold. The
 * custom rules read the parts of a command that widen what it needs: a
 * pipeline's $out, $merge and $lookup, an upsert, a rename across databases,
 * the roles a user command grants. */
#include "security/privileges.h"

#include "query/value_format.h"
#include "common/bson_view.h"

#include <string.h>

#define MAX_REQUIREMENTS 32
#define MAX_EXPLAIN_DEPTH 1

#define ACT(action) ROLES_ACTION(ROLES_##action)

/* The privileges one command needs, all of them. Resource names point into the
 * command or into owned strings, freed with requirements_cleanup(). */
typedef struct requirements {
    struct {
        roles_resource_t resource;
        roles_actions_t actions;
    } items[MAX_REQUIREMENTS];
    size_t count;
    bool overflow; /* more than fit: refused, never half-checked */
    char *owned[MAX_REQUIREMENTS];
    size_t owned_count;
} requirements_t;

static void require(requirements_t *out, roles_resource_kind_t kind, const char *database, const char *collection,
                    roles_actions_t actions)
{
    if (out->count == MAX_REQUIREMENTS) {
        out->overflow = true;
        return;
    }
    out->items[out->count].resource = (roles_resource_t){kind, database, collection};
    out->items[out->count].actions = actions;
    out->count++;
}

static const char *keep(requirements_t *out, char *string)
{
    if (out->owned_count == MAX_REQUIREMENTS) {
        out->overflow = true;
        bson_free(string);
        return "";
    }
    out->owned[out->owned_count++] = string;
    return string;
}

static void requirements_cleanup(requirements_t *requirements)
{
    for (size_t i = 0; i < requirements->owned_count; i++) {
        bson_free(requirements->owned[i]);
    }
}

/* What a rule works on: who asks, the command document and the database it runs in. */
typedef struct rule_input {
    const privileges_subject_t *subject;
    const bson_t *command;
    const char *database;
    int depth; /* explain nesting */
} rule_input_t;

typedef enum rule_kind {
    RULE_NO_AUTH,       /* runs before authentication (the handshake, the SASL steps, ping) */
    RULE_AUTHENTICATED, /* any authenticated user */
    RULE_COLLECTION,    /* actions on database.<the command's string value> */
    RULE_DATABASE,      /* actions on the database */
    RULE_CLUSTER,       /* actions on the cluster */
    RULE_CUSTOM,
} rule_kind_t;

typedef bool (*rule_fn)(const rule_input_t *input, requirements_t *out);

typedef struct command_rule {
    const char *name;
    rule_kind_t kind;
    roles_actions_t actions;
    rule_fn custom;
} command_rule_t;

/* --- helpers for the custom rules ------------------------------------------------ */

static const char *string_field(const bson_t *document, const char *field)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, document, field) && BSON_ITER_HOLDS_UTF8(&iter)) {
        return bson_iter_utf8(&iter, NULL);
    }
    return NULL;
}

static bool document_field(const bson_t *document, const char *field, bson_t *out)
{
    bson_iter_t iter;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, document, field) ||
        (!BSON_ITER_HOLDS_DOCUMENT(&iter) && !BSON_ITER_HOLDS_ARRAY(&iter))) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_iter_document(&iter, &length, &data);
    } else {
        bson_iter_array(&iter, &length, &data);
    }
    return bson_init_static(out, data, length);
}

/* The collection a command names with its first field, or NULL. */
static const char *first_string(const bson_t *command)
{
    bson_iter_t iter;
    if (bson_iter_init(&iter, command) && bson_iter_next(&iter) && BSON_ITER_HOLDS_UTF8(&iter)) {
        return bson_iter_utf8(&iter, NULL);
    }
    return NULL;
}

static void require_collection(const rule_input_t *input, requirements_t *out, roles_actions_t actions)
{
    const char *collection = first_string(input->command);
    if (collection != NULL) {
        require(out, ROLES_RESOURCE_COLLECTION, input->database, collection, actions);
    } else {
        /* Not a name (the handler refuses it): ask for the action database-wide. */
        require(out, ROLES_RESOURCE_DATABASE, input->database, NULL, actions);
    }
}

/* A namespace given as "coll" (in database) or {db, coll}. */
static void require_target(const rule_input_t *input, const bson_iter_t *target, requirements_t *out,
                           roles_actions_t actions)
{
    bson_t spec;
    if (BSON_ITER_HOLDS_UTF8(target)) {
        require(out, ROLES_RESOURCE_COLLECTION, input->database, bson_iter_utf8(target, NULL), actions);
    } else if (bson_view_of(target, &spec)) {
        const char *database = string_field(&spec, "db");
        const char *collection = string_field(&spec, "coll");
        require(out, ROLES_RESOURCE_COLLECTION, database != NULL ? database : input->database,
                collection != NULL ? collection : "", actions);
    }
}

/* Role names in a roles array: "name" (in database) or {role, db}. */
static void require_on_role_databases(const rule_input_t *input, const bson_t *roles, requirements_t *out,
                                      roles_actions_t actions)
{
    bson_iter_t iter;
    bson_t role;
    if (!bson_iter_init(&iter, roles)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_UTF8(&iter)) {
            require(out, ROLES_RESOURCE_DATABASE, input->database, NULL, actions);
        } else if (bson_view_of(&iter, &role)) {
            const char *database = string_field(&role, "db");
            require(out, ROLES_RESOURCE_DATABASE, database != NULL ? database : input->database, NULL, actions);
        }
    }
}

/* --- custom rules ------------------------------------------------------------------- */

static void require_pipeline(const rule_input_t *input, const bson_t *pipeline, requirements_t *out);

/* $listLocalSessions lists another's sessions (mongod's
 * listSessionsRequiredPrivileges): allUsers: true, or a users entry other
 * than the requester. */
static bool lists_others_sessions(const rule_input_t *input, const bson_t *spec)
{
    bson_iter_t iter, item;
    const privileges_user_t *self = input->subject->user;
    if (bson_iter_init_find(&iter, spec, "allUsers") && bson_iter_as_bool(&iter)) {
        return true;
    }
    if (!bson_iter_init_find(&iter, spec, "users") || !bson_iter_recurse(&iter, &item)) {
        return false;
    }
    while (bson_iter_next(&item)) {
        bson_t user;
        const char *name = bson_view_of(&item, &user) ? string_field(&user, "user") : NULL;
        const char *database = name != NULL ? string_field(&user, "db") : NULL;
        if (self == NULL || self->name == NULL || name == NULL || database == NULL || strcmp(name, self->name) != 0 ||
            strcmp(database, self->database) != 0) {
            return true;
        }
    }
    return false;
}

static void require_stage(const rule_input_t *input, const char *name, const bson_iter_t *value,
                          requirements_t *out)
{
    bson_t spec, inner;
    if (strcmp(name, "$out") == 0) {
        require_target(input, value, out, ACT(INSERT) | ACT(REMOVE));
    } else if (strcmp(name, "$merge") == 0) {
        bson_iter_t into;
        if (BSON_ITER_HOLDS_UTF8(value)) {
            require_target(input, value, out, ACT(INSERT) | ACT(UPDATE));
        } else if (bson_view_of(value, &spec) && bson_iter_init_find(&into, &spec, "into")) {
            require_target(input, &into, out, ACT(INSERT) | ACT(UPDATE));
        }
    } else if (strcmp(name, "$lookup") == 0 || strcmp(name, "$graphLookup") == 0) {
        bson_iter_t from;
        if (bson_view_of(value, &spec)) {
            if (bson_iter_init_find(&from, &spec, "from")) {
                require_target(input, &from, out, ACT(FIND));
            }
            if (document_field(&spec, "pipeline", &inner)) {
                require_pipeline(input, &inner, out);
            }
        }
    } else if (strcmp(name, "$unionWith") == 0) {
        bson_iter_t collection;
        if (BSON_ITER_HOLDS_UTF8(value)) {
            require_target(input, value, out, ACT(FIND));
        } else if (bson_view_of(value, &spec)) {
            if (bson_iter_init_find(&collection, &spec, "coll")) {
                require_target(input, &collection, out, ACT(FIND));
            }
            if (document_field(&spec, "pipeline", &inner)) {
                require_pipeline(input, &inner, out);
            }
        }
    } else if (strcmp(name, "$facet") == 0 && bson_view_of(value, &spec)) {
        bson_iter_t facets;
        bson_iter_init(&facets, &spec);
        while (bson_iter_next(&facets)) {
            if (bson_view_of(&facets, &inner)) {
                require_pipeline(input, &inner, out);
            }
        }
    } else if (strcmp(name, "$currentOp") == 0) {
        /* A user sees its own operations; allUsers: true needs inprog. */
        bson_iter_t all_users;
        if (input->subject->forwards_as_itself || (bson_view_of(value, &spec) &&
                                                   bson_iter_init_find(&all_users, &spec, "allUsers") &&
                                                   bson_iter_as_bool(&all_users))) {
            require(out, ROLES_RESOURCE_CLUSTER, NULL, NULL, ACT(INPROG));
        }
    } else if (strcmp(name, "$listLocalSessions") == 0 &&
               (input->subject->forwards_as_itself ||
                (bson_view_of(value, &spec) && lists_others_sessions(input, &spec)))) {
        require(out, ROLES_RESOURCE_CLUSTER, NULL, NULL, ACT(LIST_SESSIONS));
    }
}

static void require_pipeline(const rule_input_t *input, const bson_t *pipeline, requirements_t *out)
{
    bson_iter_t stages, stage;
    if (!bson_iter_init(&stages, pipeline)) {
        return;
    }
    while (bson_iter_next(&stages)) {
        bson_t document;
        if (bson_view_of(&stages, &document) && bson_iter_init(&stage, &document) && bson_iter_next(&stage)) {
            require_stage(input, bson_iter_key(&stage), &stage, out);
        }
    }
}

static bool rule_aggregate(const rule_input_t *input, requirements_t *out)
{
    bson_t pipeline, first_stage;
    bson_iter_t iter;
    roles_actions_t actions = ACT(FIND);
    bool has_pipeline = document_field(input->command, "pipeline", &pipeline);
    if (has_pipeline && bson_iter_init(&iter, &pipeline) && bson_iter_next(&iter) &&
        bson_view_of(&iter, &first_stage) && bson_has_field(&first_stage, "$changeStream")) {
        actions |= ACT(CHANGE_STREAM);
    }
    if (first_string(input->command) != NULL) {
        require_collection(input, out, actions);
    } else if (actions & ACT(CHANGE_STREAM)) {
        require(out, ROLES_RESOURCE_DATABASE, input->database, NULL, actions);
    }
    if (has_pipeline) {
        require_pipeline(input, &pipeline, out);
    }
    return true;
}

static bool collect(const rule_input_t *input, const char *name, requirements_t *out);

/* currentOp: any user may list its own operations ($ownOps: true); all of them
 * need inprog. */
static bool rule_current_op(const rule_input_t *input, requirements_t *out)
{
    bson_iter_t own;
    if (input->subject->forwards_as_itself || !bson_iter_init_find(&own, input->command, "$ownOps") ||
        !bson_iter_as_bool(&own)) {
        require(out, ROLES_RESOURCE_CLUSTER, NULL, NULL, ACT(INPROG));
    }
    return true;
}

/* killOp: any user may ask (the store kills only its own operations unless it
 * holds killop); through the proxy, killop. */
static bool rule_kill_op(const rule_input_t *input, requirements_t *out)
{
    if (input->subject->forwards_as_itself) {
        require(out, ROLES_RESOURCE_CLUSTER, NULL, NULL, ACT(KILLOP));
    }
    return true;
}

static bool rule_explain(const rule_input_t *input, requirements_t *out)
{
    bson_t inner;
    bson_iter_t iter;
    if (input->depth >= MAX_EXPLAIN_DEPTH || !document_field(input->command, "explain", &inner) ||
        !bson_iter_init(&iter, &inner) || !bson_iter_next(&iter)) {
        return false;
    }
    rule_input_t explained = {input->subject, &inner, input->database, input->depth + 1};
    return collect(&explained, bson_iter_key(&iter), out);
}

/* bypassDocumentValidation: true is an action of its own (dbAdmin's and
 * restore's, not readWrite's), which mongod's checks for insert, update and
 * findAndModify add to the write's. */
static roles_actions_t bypass_action(const bson_t *command)
{
    bson_iter_t iter;
    bool bypass = bson_iter_init_find(&iter, command, "bypassDocumentValidation") && bson_iter_as_bool(&iter);
    return bypass ? ACT(BYPASS_DOCUMENT_VALIDATION) : 0;
}

static bool rule_insert(const rule_input_t *input, requirements_t *out)
{
    require_collection(input, out, ACT(INSERT) | bypass_action(input->command));
    return true;
}

static bool rule_update(const rule_input_t *input, requirements_t *out)
{
    roles_actions_t actions = ACT(UPDATE) | bypass_action(input->command);
    bson_t updates, statement;
    bson_iter_t iter, upsert;
    if (document_field(input->command, "updates", &updates) && bson_iter_init(&iter, &updates)) {
        while (bson_iter_next(&iter)) {
            if (bson_view_of(&iter, &statement) && bson_iter_init_find(&upsert, &statement, "upsert") &&
                bson_iter_as_bool(&upsert)) {
                actions |= ACT(INSERT);
            }
        }
    }
    require_collection(input, out, actions);
    return true;
}

static bool rule_find_and_modify(const rule_input_t *input, requirements_t *out)
{
    bson_iter_t iter;
    bool remove = bson_iter_init_find(&iter, input->command, "remove") && bson_iter_as_bool(&iter);
    bool upsert = bson_iter_init_find(&iter, input->command, "upsert") && bson_iter_as_bool(&iter);
    require_collection(input, out,
                       ACT(FIND) | (remove ? ACT(REMOVE) : ACT(UPDATE)) | (upsert ? ACT(INSERT) : 0) |
                           bypass_action(input->command));
    return true;
}

static bool rule_get_more(const rule_input_t *input, requirements_t *out)
{
    const char *collection = string_field(input->command, "collection");
    if (collection == NULL) {
        return false;
    }
    require(out, ROLES_RESOURCE_COLLECTION, input->database, collection, ACT(FIND));
    return true;
}

/* "db.coll" split into owned strings. */
static bool split_namespace(requirements_t *out, const char *ns, const char **out_database,
                            const char **out_collection)
{
    const char *dot = ns != NULL ? strchr(ns, '.') : NULL;
    if (dot == NULL) {
        return false;
    }
    *out_database = keep(out, bson_strndup(ns, (size_t)(dot - ns)));
    *out_collection = dot + 1;
    return true;
}

static bool rule_rename_collection(const rule_input_t *input, requirements_t *out)
{
    const char *from_database, *from_collection, *to_database, *to_collection;
    bson_iter_t iter;
    if (!split_namespace(out, first_string(input->command), &from_database, &from_collection) ||
        !split_namespace(out, string_field(input->command, "to"), &to_database, &to_collection)) {
        return false;
    }
    if (strcmp(from_database, to_database) == 0) {
        require(out, ROLES_RESOURCE_DATABASE, from_database, NULL, ACT(RENAME_COLLECTION_SAME_DB));
    } else {
        require(out, ROLES_RESOURCE_COLLECTION, from_database, from_collection, ACT(FIND) | ACT(DROP_COLLECTION));
        require(out, ROLES_RESOURCE_COLLECTION, to_database, to_collection,
                ACT(INSERT) | ACT(CREATE_INDEX) | ACT(CREATE_COLLECTION));
    }
    if (bson_iter_init_find(&iter, input->command, "dropTarget") && bson_iter_as_bool(&iter)) {
        require(out, ROLES_RESOURCE_COLLECTION, to_database, to_collection, ACT(DROP_COLLECTION));
    }
    return true;
}

static bool rule_create_user(const rule_input_t *input, requirements_t *out)
{
    bson_t roles;
    require(out, ROLES_RESOURCE_DATABASE, input->database, NULL, ACT(CREATE_USER));
    if (document_field(input->command, "roles", &roles)) {
        require_on_role_databases(input, &roles, out, ACT(GRANT_ROLE));
    }
    return true;
}

static bool rule_update_user(const rule_input_t *input, requirements_t *out)
{
    bson_t roles;
    roles_actions_t actions = 0;
    if (bson_has_field(input->command, "pwd") || bson_has_field(input->command, "mechanisms")) {
        actions |= ACT(CHANGE_PASSWORD);
    }
    if (bson_has_field(input->command, "customData")) {
        actions |= ACT(CHANGE_CUSTOM_DATA);
    }
    if (document_field(input->command, "roles", &roles)) {
        actions |= ACT(REVOKE_ROLE);
        require_on_role_databases(input, &roles, out, ACT(GRANT_ROLE));
    }
    require(out, ROLES_RESOURCE_DATABASE, input->database, NULL,
            actions != 0 ? actions : ACT(CHANGE_PASSWORD) | ACT(CHANGE_CUSTOM_DATA));
    return true;
}

static bool rule_change_roles(const rule_input_t *input, requirements_t *out, roles_actions_t actions)
{
    bson_t roles;
    if (document_field(input->command, "roles", &roles)) {
        require_on_role_databases(input, &roles, out, actions);
    }
    return true;
}

static bool rule_grant_roles(const rule_input_t *input, requirements_t *out)
{
    return rule_change_roles(input, out, ACT(GRANT_ROLE));
}

static bool rule_revoke_roles(const rule_input_t *input, requirements_t *out)
{
    return rule_change_roles(input, out, ACT(REVOKE_ROLE));
}

/* usersInfo: a user may always see itself; anyone else takes viewUser. */
static void require_view_user(const rule_input_t *input, const char *user, const char *database,
                              requirements_t *out)
{
    const privileges_user_t *self = input->subject->user;
    if (user != NULL && self != NULL && self->name != NULL && strcmp(self->name, user) == 0 &&
        strcmp(self->database, database) == 0) {
        return;
    }
    require(out, ROLES_RESOURCE_DATABASE, database, NULL, ACT(VIEW_USER));
}

static void require_view_one(const rule_input_t *input, const bson_iter_t *iter, requirements_t *out)
{
    bson_t spec;
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        require_view_user(input, bson_iter_utf8(iter, NULL), input->database, out);
    } else if (BSON_ITER_HOLDS_DOCUMENT(iter) && bson_view_of(iter, &spec)) {
        if (bson_has_field(&spec, "forAllDBs")) {
            require(out, ROLES_RESOURCE_ANY_DATABASE, NULL, NULL, ACT(VIEW_USER));
            return;
        }
        const char *database = string_field(&spec, "db");
        require_view_user(input, string_field(&spec, "user"), database != NULL ? database : input->database, out);
    } else {
        require(out, ROLES_RESOURCE_DATABASE, input->database, NULL, ACT(VIEW_USER));
    }
}

static bool rule_users_info(const rule_input_t *input, requirements_t *out)
{
    bson_iter_t iter, element;
    bson_iter_init(&iter, input->command);
    bson_iter_next(&iter);
    if (BSON_ITER_HOLDS_ARRAY(&iter)) {
        bson_iter_recurse(&iter, &element);
        while (bson_iter_next(&element)) {
            require_view_one(input, &element, out);
        }
        return true;
    }
    require_view_one(input, &iter, out);
    return true;
}

/* --- the table ------------------------------------------------------------------------ */

static const command_rule_t rules[] = {
    /* The handshake, authentication and liveness: mongod's requiresAuth() false. */
    {"hello", RULE_NO_AUTH, 0, NULL},
    {"isMaster", RULE_NO_AUTH, 0, NULL},
    {"ismaster", RULE_NO_AUTH, 0, NULL},
    {"buildInfo", RULE_NO_AUTH, 0, NULL},
    {"buildinfo", RULE_NO_AUTH, 0, NULL},
    {"saslStart", RULE_NO_AUTH, 0, NULL},
    {"saslContinue", RULE_NO_AUTH, 0, NULL},
    {"logout", RULE_NO_AUTH, 0, NULL},
    {"ping", RULE_NO_AUTH, 0, NULL},
    {"connectionStatus", RULE_NO_AUTH, 0, NULL},
    /* Any authenticated user. */
    {"whatsmyuri", RULE_AUTHENTICATED, 0, NULL},
    {"_isSelf", RULE_AUTHENTICATED, 0, NULL},
    {"endSessions", RULE_AUTHENTICATED, 0, NULL},
    /* mongod: one's own sessions; another user's need killAnySession, which the
     * store does not tell apart (it does not record a session's user). */
    {"killSessions", RULE_AUTHENTICATED, 0, NULL},
    {"commitTransaction", RULE_AUTHENTICATED, 0, NULL}, /* the transaction's commands were checked */
    {"abortTransaction", RULE_AUTHENTICATED, 0, NULL},
    {"listDatabases", RULE_AUTHENTICATED, 0, NULL}, /* filtered: privileges_filter_list_databases() */
    /* Reads. */
    {"find", RULE_COLLECTION, ACT(FIND), NULL},
    {"count", RULE_COLLECTION, ACT(FIND), NULL},
    {"distinct", RULE_COLLECTION, ACT(FIND), NULL},
    {"getMore", RULE_CUSTOM, 0, rule_get_more},
    {"killCursors", RULE_COLLECTION, ACT(KILL_CURSORS), NULL},
    {"aggregate", RULE_CUSTOM, 0, rule_aggregate},
    {"explain", RULE_CUSTOM, 0, rule_explain},
    /* Writes. */
    {"insert", RULE_CUSTOM, 0, rule_insert},
    {"update", RULE_CUSTOM, 0, rule_update},
    {"delete", RULE_COLLECTION, ACT(REMOVE), NULL},
    {"findAndModify", RULE_CUSTOM, 0, rule_find_and_modify},
    {"findandmodify", RULE_CUSTOM, 0, rule_find_and_modify},
    /* Catalog. */
    {"create", RULE_COLLECTION, ACT(CREATE_COLLECTION), NULL},
    {"drop", RULE_COLLECTION, ACT(DROP_COLLECTION), NULL},
    {"dropDatabase", RULE_DATABASE, ACT(DROP_DATABASE), NULL},
    {"createIndexes", RULE_COLLECTION, ACT(CREATE_INDEX), NULL},
    {"listIndexes", RULE_COLLECTION, ACT(LIST_INDEXES), NULL},
    {"dropIndexes", RULE_COLLECTION, ACT(DROP_INDEX), NULL},
    {"deleteIndexes", RULE_COLLECTION, ACT(DROP_INDEX), NULL},
    {"collMod", RULE_COLLECTION, ACT(COLL_MOD), NULL},
    {"collStats", RULE_COLLECTION, ACT(COLL_STATS), NULL},
    {"collstats", RULE_COLLECTION, ACT(COLL_STATS), NULL},
    {"listCollections", RULE_DATABASE, ACT(LIST_COLLECTIONS), NULL},
    {"dbStats", RULE_DATABASE, ACT(DB_STATS), NULL},
    {"dbstats", RULE_DATABASE, ACT(DB_STATS), NULL},
    {"renameCollection", RULE_CUSTOM, 0, rule_rename_collection},
    /* Server. */
    {"serverStatus", RULE_CLUSTER, ACT(SERVER_STATUS), NULL},
    {"hostInfo", RULE_CLUSTER, ACT(HOST_INFO), NULL},
    {"getCmdLineOpts", RULE_CLUSTER, ACT(GET_CMD_LINE_OPTS), NULL},
    {"getLog", RULE_CLUSTER, ACT(GET_LOG), NULL},
    {"getParameter", RULE_CLUSTER, ACT(GET_PARAMETER), NULL},
    {"fsync", RULE_CLUSTER, ACT(FSYNC), NULL},
    {"currentOp", RULE_CUSTOM, 0, rule_current_op},
    {"killOp", RULE_CUSTOM, 0, rule_kill_op},
    /* The proxy's own counters, as serverStatus shows a server's. */
    {"thermoclineStatus", RULE_CLUSTER, ACT(SERVER_STATUS), NULL},
    /* Replays writes into the archive: an operator's action on the cluster, as fsync is. */
    {"thermoclineRetryRefusals", RULE_CLUSTER, ACT(FSYNC), NULL},
    /* Re-reads the proxy's config: changes its settings, as setParameter does a server's. */
    {"thermoclineReload", RULE_CLUSTER, ACT(SET_PARAMETER), NULL},
    /* Users. */
    {"createUser", RULE_CUSTOM, 0, rule_create_user},
    {"updateUser", RULE_CUSTOM, 0, rule_update_user},
    {"dropUser", RULE_DATABASE, ACT(DROP_USER), NULL},
    {"dropAllUsersFromDatabase", RULE_DATABASE, ACT(DROP_USER), NULL},
    {"grantRolesToUser", RULE_CUSTOM, 0, rule_grant_roles},
    {"revokeRolesFromUser", RULE_CUSTOM, 0, rule_revoke_roles},
    {"usersInfo", RULE_CUSTOM, 0, rule_users_info},
};

static const command_rule_t *find_rule(const char *name)
{
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (strcmp(rules[i].name, name) == 0) {
            return &rules[i];
        }
    }
    return NULL;
}

/* Fills out with what command name needs; false: refuse outright. */
static bool collect(const rule_input_t *input, const char *name, requirements_t *out)
{
    const command_rule_t *rule = find_rule(name);
    if (rule == NULL) {
        require(out, ROLES_RESOURCE_CLUSTER, NULL, NULL, ROLES_ALL_ACTIONS);
        return true;
    }
    switch (rule->kind) {
    case RULE_NO_AUTH:
    case RULE_AUTHENTICATED:
        return true;
    case RULE_COLLECTION:
        require_collection(input, out, rule->actions);
        return true;
    case RULE_DATABASE:
        require(out, ROLES_RESOURCE_DATABASE, input->database, NULL, rule->actions);
        return true;
    case RULE_CLUSTER:
        require(out, ROLES_RESOURCE_CLUSTER, NULL, NULL, rule->actions);
        return true;
    case RULE_CUSTOM:
        return rule->custom(input, out);
    }
    return false;
}


/* --- the check ----------------------------------------------------------------------- */

bool privileges_admit_another_login(const privileges_user_t *current, const char *user, const char *database,
                                    bson_error_t *error)
{
    bool same_database = strcmp(current->database, database) == 0;
    if (same_database && strcmp(current->name, user) == 0) {
        return true;
    }
    if (same_database) {
        return tc_error_set(error, TC_ERR_AUTHENTICATED_AS_ANOTHER_USER,
                            "Each client connection may only be authenticated once. Previously authenticated as: "
                            "%s@%s",
                            current->name, current->database);
    }
    return tc_error_set(error, TC_ERR_AUTHENTICATED_ON_ANOTHER_DATABASE,
                        "Client has attempted to authenticate on multiple databases.Already authenticated as: %s@%s",
                        current->name, current->database);
}

bool privileges_runs_unauthenticated(const char *name)
{
    const command_rule_t *rule = find_rule(name);
    return rule != NULL && rule->kind == RULE_NO_AUTH;
}

/* The localhost exception grants mongod's bootstrap privileges only: createUser
 * and grantRole on admin. */
static bool localhost_allows(const roles_resource_t *resource, roles_actions_t actions)
{
    return actions == 0 ||
           (resource->kind == ROLES_RESOURCE_DATABASE && strcmp(resource->database, "admin") == 0 &&
            (actions & ~(ACT(CREATE_USER) | ACT(GRANT_ROLE))) == 0);
}

/* mongod's wording of a refusal: "not authorized on db to execute command { ... }",
 * with passwords and SASL payloads shown as "xxx". Always returns false. */
static bool refuse(const bson_t *command, const char *database, bson_error_t *error)
{
    bson_t shown = BSON_INITIALIZER;
    bson_iter_t iter;
    bson_iter_init(&iter, command);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "pwd") == 0 || strcmp(key, "payload") == 0) {
            BSON_APPEND_UTF8(&shown, key, "xxx");
        } else {
            bson_append_iter(&shown, key, -1, &iter);
        }
    }
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(&shown);
    value.value.v_doc.data_len = shown.len;
    bson_string_t *text = bson_string_new(NULL);
    value_format_append(text, &value);
    tc_error_set(error, TC_ERR_UNAUTHORIZED, "not authorized on %s to execute command %s", database, text->str);
    bson_string_free(text, true);
    bson_destroy(&shown);
    return false;
}

bool privileges_check_command(const privileges_subject_t *subject, const char *name, const bson_t *command,
                              const char *database, bson_error_t *error)
{
    if (privileges_runs_unauthenticated(name)) {
        return true;
    }
    const privileges_user_t *user = subject->user;
    bool authenticated = user != NULL && user->name != NULL;
    if (!authenticated && !subject->localhost_exception) {
        return tc_error_set(error, TC_ERR_UNAUTHORIZED, "command %s requires authentication", name);
    }
    requirements_t requirements = {0};
    rule_input_t input = {subject, command, database, 0};
    bool allowed = collect(&input, name, &requirements) && !requirements.overflow;
    for (size_t i = 0; allowed && i < requirements.count; i++) {
        const roles_resource_t *resource = &requirements.items[i].resource;
        roles_actions_t actions = requirements.items[i].actions;
        allowed = authenticated ? roles_allow(user->grants, user->grant_count, resource, actions)
                                : localhost_allows(resource, actions);
    }
    requirements_cleanup(&requirements);
    return allowed || refuse(command, database, error);
}

void privileges_filter_list_databases(const privileges_user_t *user, bson_t *reply)
{
    const roles_grant_t *grants = user != NULL ? user->grants : NULL;
    size_t grant_count = user != NULL ? user->grant_count : 0;
    roles_resource_t cluster = {ROLES_RESOURCE_CLUSTER, NULL, NULL};
    if (roles_allow(grants, grant_count, &cluster, ACT(LIST_DATABASES))) {
        return;
    }
    bson_t filtered = BSON_INITIALIZER;
    bson_iter_t iter;
    int64_t total_size = 0;
    bson_iter_init(&iter, reply);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        bson_t databases, database, kept;
        if (strcmp(key, "databases") == 0 && bson_view_of(&iter, &databases)) {
            bson_iter_t entries, field;
            uint32_t index = 0;
            BSON_APPEND_ARRAY_BEGIN(&filtered, "databases", &kept);
            bson_iter_init(&entries, &databases);
            while (bson_iter_next(&entries)) {
                const char *name;
                if (!bson_view_of(&entries, &database) || (name = string_field(&database, "name")) == NULL ||
                    !roles_allow_any_on_database(grants, grant_count, name)) {
                    continue;
                }
                if (bson_iter_init_find(&field, &database, "sizeOnDisk") && BSON_ITER_HOLDS_NUMBER(&field)) {
                    total_size += bson_iter_as_int64(&field);
                }
                char index_key[16];
                const char *index_string;
                bson_uint32_to_string(index++, &index_string, index_key, sizeof index_key);
                BSON_APPEND_DOCUMENT(&kept, index_string, &database);
            }
            bson_append_array_end(&filtered, &kept);
        } else if (strcmp(key, "totalSize") == 0 || strcmp(key, "totalSizeMb") == 0) {
            continue; /* recomputed below over what is shown */
        } else {
            bson_append_iter(&filtered, key, -1, &iter);
        }
    }
    if (bson_has_field(reply, "totalSize")) {
        BSON_APPEND_INT64(&filtered, "totalSize", total_size);
        BSON_APPEND_INT64(&filtered, "totalSizeMb", total_size / (1024 * 1024));
    }
    bson_reinit(reply);
    bson_concat(reply, &filtered);
    bson_destroy(&filtered);
}

bool privileges_command_changes_users(const char *name, const bson_t *command, const char *database)
{
    static const char *const user_commands[] = {"createUser",       "updateUser",          "dropUser",
                                                "dropAllUsersFromDatabase", "grantRolesToUser", "revokeRolesFromUser"};
    static const char *const writes[] = {"insert", "update", "delete", "findAndModify", "findandmodify", "drop"};
    for (size_t i = 0; i < sizeof user_commands / sizeof user_commands[0]; i++) {
        if (strcmp(name, user_commands[i]) == 0) {
            return true;
        }
    }
    if (strcmp(database, "admin") != 0) {
        return false;
    }
    if (strcmp(name, "dropDatabase") == 0 || strcmp(name, "renameCollection") == 0) {
        return true;
    }
    const char *collection = first_string(command);
    for (size_t i = 0; collection != NULL && i < sizeof writes / sizeof writes[0]; i++) {
        if (strcmp(name, writes[i]) == 0) {
            return strcmp(collection, "system.users") == 0;
        }
    }
    return false;
}

/* --- users ------------------------------------------------------------------------------ */

static void add_grant(privileges_user_t *user, size_t *capacity, const char *role, const char *database)
{
    if (user->grant_count == *capacity) {
        *capacity = *capacity == 0 ? 4 : *capacity * 2;
        user->grants = bson_realloc(user->grants, *capacity * sizeof *user->grants);
    }
    user->grants[user->grant_count].role = bson_strdup(role);
    user->grants[user->grant_count].database = bson_strdup(database);
    user->grant_count++;
}

bool privileges_user_from_document(const bson_t *document, privileges_user_t *out_user)
{
    bson_iter_t roles;
    const char *name = string_field(document, "user");
    const char *database = string_field(document, "db");
    memset(out_user, 0, sizeof *out_user);
    if (name == NULL || database == NULL) {
        return false;
    }
    out_user->name = bson_strdup(name);
    out_user->database = bson_strdup(database);
    if (!bson_iter_init_find(&roles, document, "roles") || !BSON_ITER_HOLDS_ARRAY(&roles) ||
        !bson_iter_recurse(&roles, &roles)) {
        return true; /* no roles: authenticated, allowed nothing */
    }
    size_t capacity = 0;
    while (bson_iter_next(&roles)) {
        bson_t role;
        const char *role_name, *role_database;
        if (BSON_ITER_HOLDS_DOCUMENT(&roles) && bson_view_of(&roles, &role) &&
            (role_name = string_field(&role, "role")) != NULL && (role_database = string_field(&role, "db")) != NULL) {
            add_grant(out_user, &capacity, role_name, role_database);
        }
    }
    return true;
}

void privileges_user_copy(const privileges_user_t *from, privileges_user_t *out_user)
{
    size_t capacity = 0;
    memset(out_user, 0, sizeof *out_user);
    if (from->name == NULL) {
        return;
    }
    out_user->name = bson_strdup(from->name);
    out_user->database = bson_strdup(from->database);
    for (size_t i = 0; i < from->grant_count; i++) {
        add_grant(out_user, &capacity, from->grants[i].role, from->grants[i].database);
    }
}

void privileges_user_cleanup(privileges_user_t *user)
{
    for (size_t i = 0; i < user->grant_count; i++) {
        bson_free((char *)user->grants[i].role);
        bson_free((char *)user->grants[i].database);
    }
    bson_free(user->grants);
    bson_free(user->name);
    bson_free(user->database);
    memset(user, 0, sizeof *user);
}
