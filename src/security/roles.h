/* MongoDB's built-in roles as privileges: which actions a role held on a database
 * grants on which resources, and the one question every command asks before it
 * runs: does this set of roles allow these actions on this resource? Pure data
 * and lookups, shared by the store and the proxy.
 *
 * Built in: read, readWrite, dbAdmin, userAdmin, dbOwner (on any database);
 * readAnyDatabase, readWriteAnyDatabase, dbAdminAnyDatabase,
 * userAdminAnyDatabase, clusterMonitor, clusterAdmin and root (on admin only).
 * As mongod's, the "AnyDatabase" roles leave out local and config, and the
 * per-database roles cover only a database's non-system collections (plus
 * system.js for read and readWrite, system.profile for dbAdmin). No custom roles. */
#ifndef TC_SECURITY_ROLES_H
#define TC_SECURITY_ROLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mongod's action types, those the store's commands check. */
typedef enum roles_action {
    ROLES_FIND,
    ROLES_INSERT,
    ROLES_UPDATE,
    ROLES_REMOVE,
    ROLES_KILL_CURSORS,
    ROLES_CHANGE_STREAM,
    ROLES_LIST_COLLECTIONS,
    ROLES_LIST_INDEXES,
    ROLES_COLL_STATS,
    ROLES_DB_STATS,
    ROLES_DB_HASH,
    ROLES_CREATE_COLLECTION,
    ROLES_DROP_COLLECTION,
    ROLES_CREATE_INDEX,
    ROLES_DROP_INDEX,
    ROLES_RENAME_COLLECTION_SAME_DB,
    ROLES_CONVERT_TO_CAPPED,
    ROLES_COLL_MOD,
    ROLES_DROP_DATABASE,
    ROLES_VALIDATE,
    ROLES_BYPASS_DOCUMENT_VALIDATION,
    ROLES_CREATE_USER,
    ROLES_DROP_USER,
    ROLES_CHANGE_PASSWORD,
    ROLES_CHANGE_CUSTOM_DATA,
    ROLES_GRANT_ROLE,
    ROLES_REVOKE_ROLE,
    ROLES_VIEW_USER,
    ROLES_VIEW_ROLE,
    ROLES_LIST_DATABASES,
    ROLES_SERVER_STATUS,
    ROLES_HOST_INFO,
    ROLES_GET_CMD_LINE_OPTS,
    ROLES_GET_LOG,
    ROLES_GET_PARAMETER,
    ROLES_SET_PARAMETER,
    ROLES_FSYNC,
    ROLES_INPROG,
    ROLES_KILLOP,
    ROLES_TOP,
    ROLES_LIST_SESSIONS,
    ROLES_ACTION_COUNT,
} roles_action_t;

/* A set of actions: bit (1 << action). */
typedef uint64_t roles_actions_t;
#define ROLES_ACTION(action) ((roles_actions_t)1 << (action))
/* Every action: on the cluster, only root holds them all. */
#define ROLES_ALL_ACTIONS (ROLES_ACTION(ROLES_ACTION_COUNT) - 1)

typedef enum roles_resource_kind {
    ROLES_RESOURCE_CLUSTER,    /* server-wide actions (serverStatus, listDatabases) */
    ROLES_RESOURCE_DATABASE,   /* database-level actions (dropDatabase, createUser) */
    ROLES_RESOURCE_COLLECTION, /* one namespace (find on db.coll) */
    ROLES_RESOURCE_ANY_DATABASE, /* every database at once (usersInfo with forAllDBs) */
} roles_resource_kind_t;

typedef struct roles_resource {
    roles_resource_kind_t kind;
    const char *database;   /* DATABASE and COLLECTION */
    const char *collection; /* COLLECTION */
} roles_resource_t;

/* One role a user holds: {role: "readWrite", db: "shop"}. */
typedef struct roles_grant {
    const char *role;
    const char *database;
} roles_grant_t;

/* Whether role is a built-in role that exists in database (root only in admin). */
bool roles_exists(const char *role, const char *database);

/* Whether the roles together grant every action of actions on resource. */
bool roles_allow(const roles_grant_t *grants, size_t count, const roles_resource_t *resource,
                 roles_actions_t actions);

/* Whether the roles grant any action at all on database or one of its
 * collections: listDatabases shows a user without the listDatabases action only
 * those databases (mongod's authorizedDatabases). */
bool roles_allow_any_on_database(const roles_grant_t *grants, size_t count, const char *database);

/* One privilege as connectionStatus {showPrivileges: true} lists it: a resource
 * document ({db, collection}, either "" for "any", as mongod writes them;
 * {cluster: true}; {anyResource: true}) and the actions granted on it. */
typedef enum roles_privilege_resource {
    ROLES_PRIVILEGE_NAMESPACE, /* {db: database, collection: collection} */
    ROLES_PRIVILEGE_CLUSTER,
    ROLES_PRIVILEGE_ANY_RESOURCE,
} roles_privilege_resource_t;

typedef struct roles_privilege {
    roles_privilege_resource_t resource;
    const char *database;   /* NAMESPACE: "" for every database; borrows the grant or a constant */
    const char *collection; /* NAMESPACE: "" for every non-system collection */
    roles_actions_t actions;
} roles_privilege_t;

/* The privileges the roles grant together, one entry per distinct resource (the
 * actions of two roles on one resource merged, as mongod shows them), written to
 * out (at most capacity; ROLES_PRIVILEGES_PER_GRANT per grant is always enough).
 * Returns how many were written. Roles that do not exist grant nothing. */
#define ROLES_PRIVILEGES_PER_GRANT 6
size_t roles_privileges(const roles_grant_t *grants, size_t count, roles_privilege_t *out, size_t capacity);

/* The action's name as mongod spells it ("find", "dropDatabase"). */
const char *roles_action_name(roles_action_t action);

#endif
