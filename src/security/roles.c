/* The built-in roles as tables of privileges (resource pattern + actions),
 * transcribed from mongod's role definitions (builtin_roles.cpp), reduced to the
 * actions roles.h names. A role's privileges are fixed; only where they apply
 * depends on the database the role is held on. */
#include "security/roles.h"

#include <string.h>

#define A(action) ROLES_ACTION(ROLES_##action)

/* read: what a database's readers may do with its collections. */
#define READ_ACTIONS                                                                                       \
    (A(FIND) | A(KILL_CURSORS) | A(CHANGE_STREAM) | A(LIST_COLLECTIONS) | A(LIST_INDEXES) | A(COLL_STATS) | \
     A(DB_STATS) | A(DB_HASH))
/* readWrite adds these. */
#define WRITE_ACTIONS                                                                                    \
    (A(INSERT) | A(UPDATE) | A(REMOVE) | A(CREATE_COLLECTION) | A(DROP_COLLECTION) | A(CREATE_INDEX) | \
     A(DROP_INDEX) | A(RENAME_COLLECTION_SAME_DB) | A(CONVERT_TO_CAPPED))
/* dbAdmin: schema and statistics, not the documents. */
#define DB_ADMIN_ACTIONS                                                                                       \
    (A(BYPASS_DOCUMENT_VALIDATION) | A(COLL_MOD) | A(COLL_STATS) | A(CONVERT_TO_CAPPED) | A(CREATE_COLLECTION) | \
     A(CREATE_INDEX) | A(DB_STATS) | A(DROP_COLLECTION) | A(DROP_DATABASE) | A(DROP_INDEX) |                    \
     A(LIST_COLLECTIONS) | A(LIST_INDEXES) | A(RENAME_COLLECTION_SAME_DB) | A(VALIDATE))
/* dbAdmin on system.profile. */
#define PROFILE_ACTIONS (READ_ACTIONS | A(CONVERT_TO_CAPPED) | A(CREATE_COLLECTION) | A(DROP_COLLECTION))
#define USER_ADMIN_ACTIONS                                                                                \
    (A(CREATE_USER) | A(DROP_USER) | A(CHANGE_PASSWORD) | A(CHANGE_CUSTOM_DATA) | A(GRANT_ROLE) |          \
     A(REVOKE_ROLE) | A(VIEW_USER) | A(VIEW_ROLE))
/* userAdminAnyDatabase on admin.system.users. */
#define USERS_COLLECTION_ACTIONS \
    (A(FIND) | A(KILL_CURSORS) | A(COLL_STATS) | A(DB_STATS) | A(DB_HASH) | A(CREATE_INDEX) | A(DROP_INDEX))
#define CLUSTER_MONITOR_ACTIONS                                                                            \
    (A(SERVER_STATUS) | A(HOST_INFO) | A(GET_CMD_LINE_OPTS) | A(GET_LOG) | A(GET_PARAMETER) |             \
     A(LIST_DATABASES) | A(INPROG) | A(TOP) | A(LIST_SESSIONS))
#define CLUSTER_ADMIN_ACTIONS (CLUSTER_MONITOR_ACTIONS | A(SET_PARAMETER) | A(FSYNC) | A(KILLOP))

typedef enum pattern_kind {
    PATTERN_NONE,              /* ends a role's list */
    PATTERN_DATABASE,          /* the role's database and its non-system collections */
    PATTERN_DATABASE_SYSTEM,   /* one system collection of the role's database */
    PATTERN_ANY_DATABASE,      /* every database but local and config, and their non-system collections */
    PATTERN_ADMIN_COLLECTION,  /* one collection of admin */
    PATTERN_CLUSTER,
    PATTERN_ANY_RESOURCE,      /* everything, system collections and the cluster included */
} pattern_kind_t;

typedef struct privilege {
    pattern_kind_t kind;
    const char *collection; /* PATTERN_DATABASE_SYSTEM, PATTERN_ADMIN_COLLECTION */
    roles_actions_t actions;
} privilege_t;

typedef struct role_definition {
    const char *name;
    bool admin_only;
    privilege_t privileges[6]; /* up to the first PATTERN_NONE: at most 5 used */
} role_definition_t;

static const role_definition_t builtin_roles[] = {
    {"read", false,
     {{PATTERN_DATABASE, NULL, READ_ACTIONS}, {PATTERN_DATABASE_SYSTEM, "system.js", READ_ACTIONS}}},
    {"readWrite", false,
     {{PATTERN_DATABASE, NULL, READ_ACTIONS | WRITE_ACTIONS},
      {PATTERN_DATABASE_SYSTEM, "system.js", READ_ACTIONS | WRITE_ACTIONS}}},
    {"dbAdmin", false,
     {{PATTERN_DATABASE, NULL, DB_ADMIN_ACTIONS}, {PATTERN_DATABASE_SYSTEM, "system.profile", PROFILE_ACTIONS}}},
    {"userAdmin", false, {{PATTERN_DATABASE, NULL, USER_ADMIN_ACTIONS}}},
    {"dbOwner", false,
     {{PATTERN_DATABASE, NULL, READ_ACTIONS | WRITE_ACTIONS | DB_ADMIN_ACTIONS | USER_ADMIN_ACTIONS},
      {PATTERN_DATABASE_SYSTEM, "system.js", READ_ACTIONS | WRITE_ACTIONS},
      {PATTERN_DATABASE_SYSTEM, "system.profile", PROFILE_ACTIONS}}},
    {"readAnyDatabase", true,
     {{PATTERN_ANY_DATABASE, NULL, READ_ACTIONS}, {PATTERN_CLUSTER, NULL, A(LIST_DATABASES)}}},
    {"readWriteAnyDatabase", true,
     {{PATTERN_ANY_DATABASE, NULL, READ_ACTIONS | WRITE_ACTIONS}, {PATTERN_CLUSTER, NULL, A(LIST_DATABASES)}}},
    {"dbAdminAnyDatabase", true,
     {{PATTERN_ANY_DATABASE, NULL, DB_ADMIN_ACTIONS}, {PATTERN_CLUSTER, NULL, A(LIST_DATABASES)}}},
    {"userAdminAnyDatabase", true,
     {{PATTERN_ANY_DATABASE, NULL, USER_ADMIN_ACTIONS},
      {PATTERN_CLUSTER, NULL, A(LIST_DATABASES)},
      {PATTERN_ADMIN_COLLECTION, "system.users", USERS_COLLECTION_ACTIONS}}},
    {"clusterMonitor", true, {{PATTERN_CLUSTER, NULL, CLUSTER_MONITOR_ACTIONS}}},
    {"clusterAdmin", true, {{PATTERN_CLUSTER, NULL, CLUSTER_ADMIN_ACTIONS}}},
    {"root", true, {{PATTERN_ANY_RESOURCE, NULL, ROLES_ALL_ACTIONS}}},
};

static const char *const action_names[ROLES_ACTION_COUNT] = {
    [ROLES_FIND] = "find",
    [ROLES_INSERT] = "insert",
    [ROLES_UPDATE] = "update",
    [ROLES_REMOVE] = "remove",
    [ROLES_KILL_CURSORS] = "killCursors",
    [ROLES_CHANGE_STREAM] = "changeStream",
    [ROLES_LIST_COLLECTIONS] = "listCollections",
    [ROLES_LIST_INDEXES] = "listIndexes",
    [ROLES_COLL_STATS] = "collStats",
    [ROLES_DB_STATS] = "dbStats",
    [ROLES_DB_HASH] = "dbHash",
    [ROLES_CREATE_COLLECTION] = "createCollection",
    [ROLES_DROP_COLLECTION] = "dropCollection",
    [ROLES_CREATE_INDEX] = "createIndex",
    [ROLES_DROP_INDEX] = "dropIndex",
    [ROLES_RENAME_COLLECTION_SAME_DB] = "renameCollectionSameDB",
    [ROLES_CONVERT_TO_CAPPED] = "convertToCapped",
    [ROLES_COLL_MOD] = "collMod",
    [ROLES_DROP_DATABASE] = "dropDatabase",
    [ROLES_VALIDATE] = "validate",
    [ROLES_BYPASS_DOCUMENT_VALIDATION] = "bypassDocumentValidation",
    [ROLES_CREATE_USER] = "createUser",
    [ROLES_DROP_USER] = "dropUser",
    [ROLES_CHANGE_PASSWORD] = "changePassword",
    [ROLES_CHANGE_CUSTOM_DATA] = "changeCustomData",
    [ROLES_GRANT_ROLE] = "grantRole",
    [ROLES_REVOKE_ROLE] = "revokeRole",
    [ROLES_VIEW_USER] = "viewUser",
    [ROLES_VIEW_ROLE] = "viewRole",
    [ROLES_LIST_DATABASES] = "listDatabases",
    [ROLES_SERVER_STATUS] = "serverStatus",
    [ROLES_HOST_INFO] = "hostInfo",
    [ROLES_GET_CMD_LINE_OPTS] = "getCmdLineOpts",
    [ROLES_GET_LOG] = "getLog",
    [ROLES_GET_PARAMETER] = "getParameter",
    [ROLES_SET_PARAMETER] = "setParameter",
    [ROLES_FSYNC] = "fsync",
    [ROLES_INPROG] = "inprog",
    [ROLES_KILLOP] = "killop",
    [ROLES_TOP] = "top",
    [ROLES_LIST_SESSIONS] = "listSessions",
};

const char *roles_action_name(roles_action_t action)
{
    return action < ROLES_ACTION_COUNT ? action_names[action] : "unknown";
}

static const role_definition_t *find_role(const char *name)
{
    for (size_t i = 0; i < sizeof builtin_roles / sizeof builtin_roles[0]; i++) {
        if (strcmp(builtin_roles[i].name, name) == 0) {
            return &builtin_roles[i];
        }
    }
    return NULL;
}

bool roles_exists(const char *role, const char *database)
{
    const role_definition_t *definition = find_role(role);
    return definition != NULL && (!definition->admin_only || strcmp(database, "admin") == 0);
}

static bool is_system_collection(const char *collection)
{
    return strncmp(collection, "system.", 7) == 0;
}

static bool pattern_matches(const privilege_t *privilege, const char *role_database,
                            const roles_resource_t *resource)
{
    if (resource->kind == ROLES_RESOURCE_ANY_DATABASE) {
        return privilege->kind == PATTERN_ANY_DATABASE || privilege->kind == PATTERN_ANY_RESOURCE;
    }
    bool in_role_database = resource->kind != ROLES_RESOURCE_CLUSTER &&
                            strcmp(resource->database, role_database) == 0;
    bool normal = resource->kind == ROLES_RESOURCE_DATABASE ||
                  (resource->kind == ROLES_RESOURCE_COLLECTION && !is_system_collection(resource->collection));
    switch (privilege->kind) {
    case PATTERN_DATABASE:
        return in_role_database && normal;
    case PATTERN_DATABASE_SYSTEM:
        return in_role_database && resource->kind == ROLES_RESOURCE_COLLECTION &&
               strcmp(resource->collection, privilege->collection) == 0;
    case PATTERN_ANY_DATABASE:
        return normal && strcmp(resource->database, "local") != 0 && strcmp(resource->database, "config") != 0;
    case PATTERN_ADMIN_COLLECTION:
        return resource->kind == ROLES_RESOURCE_COLLECTION && strcmp(resource->database, "admin") == 0 &&
               strcmp(resource->collection, privilege->collection) == 0;
    case PATTERN_CLUSTER:
        return resource->kind == ROLES_RESOURCE_CLUSTER;
    case PATTERN_ANY_RESOURCE:
        return true;
    case PATTERN_NONE:
        break;
    }
    return false;
}

bool roles_allow(const roles_grant_t *grants, size_t count, const roles_resource_t *resource,
                 roles_actions_t actions)
{
    roles_actions_t granted = 0;
    for (size_t g = 0; g < count; g++) {
        if (!roles_exists(grants[g].role, grants[g].database)) {
            continue; /* a role that does not exist (here) grants nothing */
        }
        const role_definition_t *definition = find_role(grants[g].role);
        for (const privilege_t *privilege = definition->privileges; privilege->kind != PATTERN_NONE; privilege++) {
            if (pattern_matches(privilege, grants[g].database, resource)) {
                granted |= privilege->actions;
            }
        }
        if ((granted & actions) == actions) {
            return true;
        }
    }
    return actions == 0;
}

bool roles_allow_any_on_database(const roles_grant_t *grants, size_t count, const char *database)
{
    roles_resource_t whole = {.kind = ROLES_RESOURCE_DATABASE, .database = database};
    for (size_t g = 0; g < count; g++) {
        if (!roles_exists(grants[g].role, grants[g].database)) {
            continue;
        }
        const role_definition_t *definition = find_role(grants[g].role);
        for (const privilege_t *privilege = definition->privileges; privilege->kind != PATTERN_NONE; privilege++) {
            bool collection_in_database =
                (privilege->kind == PATTERN_DATABASE_SYSTEM && strcmp(grants[g].database, database) == 0) ||
                (privilege->kind == PATTERN_ADMIN_COLLECTION && strcmp(database, "admin") == 0);
            if (collection_in_database || pattern_matches(privilege, grants[g].database, &whole)) {
                return true;
            }
        }
    }
    return false;
}

/* The resource document of privilege as mongod writes it for a role held on database. */
static roles_privilege_t privilege_resource(const privilege_t *privilege, const char *database)
{
    roles_privilege_t out = {.resource = ROLES_PRIVILEGE_NAMESPACE, .database = "", .collection = ""};
    switch (privilege->kind) {
    case PATTERN_DATABASE:
        out.database = database;
        break;
    case PATTERN_DATABASE_SYSTEM:
        out.database = database;
        out.collection = privilege->collection;
        break;
    case PATTERN_ADMIN_COLLECTION:
        out.database = "admin";
        out.collection = privilege->collection;
        break;
    case PATTERN_CLUSTER:
        out.resource = ROLES_PRIVILEGE_CLUSTER;
        break;
    case PATTERN_ANY_RESOURCE:
        out.resource = ROLES_PRIVILEGE_ANY_RESOURCE;
        break;
    case PATTERN_ANY_DATABASE:
    case PATTERN_NONE:
        break;
    }
    return out;
}

static bool same_resource(const roles_privilege_t *left, const roles_privilege_t *right)
{
    return left->resource == right->resource && strcmp(left->database, right->database) == 0 &&
           strcmp(left->collection, right->collection) == 0;
}

size_t roles_privileges(const roles_grant_t *grants, size_t count, roles_privilege_t *out, size_t capacity)
{
    size_t written = 0;
    for (size_t g = 0; g < count; g++) {
        if (!roles_exists(grants[g].role, grants[g].database)) {
            continue;
        }
        const role_definition_t *definition = find_role(grants[g].role);
        for (const privilege_t *privilege = definition->privileges; privilege->kind != PATTERN_NONE; privilege++) {
            roles_privilege_t candidate = privilege_resource(privilege, grants[g].database);
            size_t i = 0;
            while (i < written && !same_resource(&out[i], &candidate)) {
                i++;
            }
            if (i == written && written == capacity) {
                continue;
            }
            if (i == written) {
                out[written++] = candidate;
            }
            out[i].actions |= privilege->actions;
        }
    }
    return written;
}
