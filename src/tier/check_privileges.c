/* `thermocline check`: does each tier's user (the config's URIs) hold what the
 * proxy and the workers do there? Asked as MongoDB tells it:
 * connectionStatus {showPrivileges: true} lists the user's privileges (custom
 * roles included), and each needed action is looked up with mongod's rules for
 * which resource pattern covers which namespace. */
#include "tier/check_private.h"
#include "tier/lease.h"
#include "tier/pins.h"

#include <string.h>

/* Where an action is needed. */
typedef enum requirement_scope {
    SCOPE_NAMESPACE,          /* each tiered namespace's collection */
    SCOPE_NAMESPACE_DATABASE, /* each tiered namespace's database (listCollections) */
    SCOPE_STATE,              /* the workers' collections in the thermocline database */
    SCOPE_ANY_NORMAL,         /* every non-system collection of every database: {db: "", collection: ""} */
    SCOPE_USERS,              /* the admin database, where the clients' users live (authorization: enabled) */
} requirement_scope_t;

typedef struct requirement {
    bool fast; /* which tier: the fast tier, or the archive */
    requirement_scope_t scope;
    const char *action;
    const char *why;
} requirement_t;

/* What the proxy, the feeder, the evictor and the warmer do on each tier. */
static const requirement_t requirements[] = {
    {true, SCOPE_NAMESPACE, "find", "the proxy's reads and the workers'"},
    {true, SCOPE_NAMESPACE, "insert", "the proxy's writes, the warmer's copies"},
    {true, SCOPE_NAMESPACE, "update", "the proxy's writes"},
    {true, SCOPE_NAMESPACE, "remove", "the proxy's writes, the evictor's deletes"},
    {true, SCOPE_NAMESPACE, "bypassDocumentValidation", "the warmer's copies and the proxy's fault-ins"},
    {true, SCOPE_NAMESPACE, "changeStream", "the warmer's check for deletes"},
    {true, SCOPE_NAMESPACE, "listIndexes", "the index sync"},
    {true, SCOPE_NAMESPACE, "createIndex", "the index sync"},
    {true, SCOPE_NAMESPACE, "dropIndex", "the index sync"},
    {true, SCOPE_NAMESPACE, "createCollection", "the index sync"},
    {true, SCOPE_NAMESPACE, "collMod", "the index sync's validator"},
    {true, SCOPE_NAMESPACE_DATABASE, "listCollections", "the index sync"},
    {true, SCOPE_STATE, "find", "the workers' state"},
    {true, SCOPE_STATE, "insert", "the workers' state"},
    {true, SCOPE_STATE, "update", "the workers' state"},
    {true, SCOPE_STATE, "remove", "the workers' state"},
    {true, SCOPE_STATE, "createIndex", "the feeder's indexes of its marks"},
    {true, SCOPE_ANY_NORMAL, "find", "the feeder's change stream of the whole deployment"},
    {true, SCOPE_ANY_NORMAL, "changeStream", "the feeder's change stream of the whole deployment"},
    {false, SCOPE_NAMESPACE, "find", "the proxy's and the warmer's reads"},
    {false, SCOPE_NAMESPACE, "insert", "the feeder's replay"},
    {false, SCOPE_NAMESPACE, "update", "the feeder's replay"},
    {false, SCOPE_NAMESPACE, "remove", "the feeder's replay"},
    {false, SCOPE_NAMESPACE, "bypassDocumentValidation", "the feeder's replay"},
    {false, SCOPE_NAMESPACE, "changeStream", "clients' change streams through the proxy"},
    {false, SCOPE_NAMESPACE, "listIndexes", "the index sync and the checks at start"},
    {false, SCOPE_NAMESPACE_DATABASE, "listCollections", "the index sync and the checks at start"},
    {false, SCOPE_USERS, "viewUser", "authorization: enabled: the proxy reads its clients' users"},
};

/* The built-in roles that hold a scope's actions, for the advice. */
static const char *roles_for(requirement_scope_t scope)
{
    switch (scope) {
    case SCOPE_NAMESPACE:
    case SCOPE_NAMESPACE_DATABASE:
        return "readWrite and dbAdmin on the namespace's database";
    case SCOPE_STATE:
        return "readWrite on " TIER_DATABASE;
    case SCOPE_ANY_NORMAL:
        return "readAnyDatabase on admin";
    case SCOPE_USERS:
        return "userAdminAnyDatabase on admin";
    }
    return "root";
}

/* The resource an action is needed on. collection NULL: the database itself;
 * database NULL: every normal collection ({db: "", collection: ""}). */
typedef struct target {
    const char *database;
    const char *collection;
} target_t;

static bool is_special_database(const char *database)
{
    return strcmp(database, "local") == 0 || strcmp(database, "config") == 0;
}

/* mongod's matching (AuthorizationSession): a collection is covered by its exact
 * pattern, and when it is not a system collection by its database's pattern, by
 * its name in any database, and (outside local and config) by any normal
 * resource; a database by its own pattern or any normal resource; anyResource
 * covers everything. */
static bool resource_covers(const bson_t *resource, const target_t *target)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, resource, "anyResource") && bson_iter_as_bool(&iter)) {
        return true;
    }
    const char *database = NULL, *collection = NULL;
    if (bson_iter_init_find(&iter, resource, "db") && BSON_ITER_HOLDS_UTF8(&iter)) {
        database = bson_iter_utf8(&iter, NULL);
    }
    if (bson_iter_init_find(&iter, resource, "collection") && BSON_ITER_HOLDS_UTF8(&iter)) {
        collection = bson_iter_utf8(&iter, NULL);
    }
    if (database == NULL || collection == NULL) {
        return false; /* {cluster: true}: nothing of ours */
    }
    bool any_normal = database[0] == '\0' && collection[0] == '\0';
    if (target->database == NULL) {
        return any_normal;
    }
    if (target->collection == NULL) {
        return collection[0] == '\0' &&
               (strcmp(database, target->database) == 0 || (any_normal && !is_special_database(target->database)));
    }
    if (strcmp(database, target->database) == 0 && strcmp(collection, target->collection) == 0) {
        return true;
    }
    if (strncmp(target->collection, "system.", 7) == 0) {
        return false;
    }
    return (strcmp(database, target->database) == 0 && collection[0] == '\0') ||
           (database[0] == '\0' && strcmp(collection, target->collection) == 0) ||
           (any_normal && !is_special_database(target->database));
}

static bool privileges_grant(const bson_t *privileges, const target_t *target, const char *action)
{
    bson_iter_t iter, field, actions;
    bson_iter_init(&iter, privileges);
    while (bson_iter_next(&iter)) {
        bson_t privilege, resource;
        if (!bson_view_of(&iter, &privilege) || !bson_iter_init_find(&field, &privilege, "resource") ||
            !bson_view_of(&field, &resource) || !resource_covers(&resource, target) ||
            !bson_iter_init_find(&field, &privilege, "actions") || !BSON_ITER_HOLDS_ARRAY(&field)) {
            continue;
        }
        bson_iter_recurse(&field, &actions);
        while (bson_iter_next(&actions)) {
            const char *granted = BSON_ITER_HOLDS_UTF8(&actions) ? bson_iter_utf8(&actions, NULL) : "";
            if (strcmp(granted, action) == 0 || strcmp(granted, "anyAction") == 0) {
                return true;
            }
        }
    }
    return false;
}

/* Appends text to a ", "-separated list in out unless it is there already. */
static void append_once(char *out, size_t size, const char *text)
{
    if (strstr(out, text) != NULL) {
        return;
    }
    size_t used = strlen(out);
    snprintf(out + used, size - used, "%s%s", used > 0 ? ", " : "", text);
}

/* One finding for the actions of scope that tier's user lacks on targets (all of
 * them needed on each), named as resource_name. */
static void check_scope(check_report_t *report, check_tier_t *tier, requirement_scope_t scope, const target_t *targets,
                        size_t target_count, const char *resource_name)
{
    char missing[512] = "", reasons[512] = "";
    for (size_t r = 0; r < sizeof requirements / sizeof requirements[0]; r++) {
        const requirement_t *requirement = &requirements[r];
        if (requirement->fast != tier->is_fast || requirement->scope != scope) {
            continue;
        }
        for (size_t t = 0; t < target_count; t++) {
            if (!privileges_grant(&tier->privileges, &targets[t], requirement->action)) {
                append_once(missing, sizeof missing, requirement->action);
                append_once(reasons, sizeof reasons, requirement->why);
            }
        }
    }
    if (missing[0] != '\0') {
        check_report(report, CHECK_ERROR,
                     "%s: the user %s lacks %s on %s (needed by %s): grant them (the built-in roles: %s; or root)",
                     tier->name, tier->user, missing, resource_name, reasons, roles_for(scope));
    }
}

/* A tier whose URI names no user: fine unless it enforces access control. */
static bool check_unauthenticated(check_report_t *report, const config_t *config, check_tier_t *tier)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_error_t error;
    BSON_APPEND_INT32(&command, "listCollections", 1);
    BSON_APPEND_BOOL(&command, "nameOnly", true);
    bool ok = tier_command(tier->client, config->namespace_count > 0 ? config->namespaces[0].database : "admin",
                           &command, &reply, &error);
    bson_destroy(&reply);
    bson_destroy(&command);
    if (!ok && tier_error_code(&error) == TC_ERR_UNAUTHORIZED) {
        check_report(report, CHECK_ERROR,
                     "%s: it enforces access control and its URI names no user: put the proxy's user in the %s URI "
                     "(mongodb://USER:PASSWORD@HOST:PORT/?authSource=admin)",
                     tier->name, tier->name);
        return false;
    }
    check_report(report, CHECK_NOTE, "%s: no user in its URI, and it does not enforce access control", tier->name);
    return true;
}

/* Reads authInfo: the first authenticated user and the privileges. */
static bool read_connection_status(check_tier_t *tier, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply, users;
    bson_iter_t iter, field;
    BSON_APPEND_INT32(&command, "connectionStatus", 1);
    BSON_APPEND_BOOL(&command, "showPrivileges", true);
    bool ok = tier_command(tier->client, "admin", &command, &reply, error);
    if (ok && bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "authInfo.authenticatedUsers", &iter) &&
        bson_view_of(&iter, &users) && bson_iter_init(&field, &users) && bson_iter_next(&field)) {
        bson_t user;
        bson_iter_t name, database;
        if (bson_view_of(&field, &user) && bson_iter_init_find(&name, &user, "user") &&
            bson_iter_init_find(&database, &user, "db") && BSON_ITER_HOLDS_UTF8(&name) &&
            BSON_ITER_HOLDS_UTF8(&database)) {
            tier->authenticated = true;
            snprintf(tier->user, sizeof tier->user, "%s@%s", bson_iter_utf8(&name, NULL),
                     bson_iter_utf8(&database, NULL));
        }
    }
    bson_t privileges;
    if (ok && bson_iter_init(&iter, &reply) &&
        bson_iter_find_descendant(&iter, "authInfo.authenticatedUserPrivileges", &iter) &&
        bson_view_of(&iter, &privileges)) {
        bson_concat(&tier->privileges, &privileges);
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

bool check_privileges(check_report_t *report, const config_t *config, check_tier_t *tier)
{
    bson_error_t error;
    if (!read_connection_status(tier, &error)) {
        check_report(report, CHECK_WARNING, "%s: connectionStatus refused (%s): its user's privileges are not checked",
                     tier->name, check_reason(&error));
        return true;
    }
    if (!tier->authenticated) {
        return check_unauthenticated(report, config, tier);
    }
    char name[300];
    for (size_t i = 0; i < config->namespace_count; i++) {
        const config_namespace_t *policy = &config->namespaces[i];
        target_t collection = {policy->database, policy->collection}, database = {policy->database, NULL};
        check_scope(report, tier, SCOPE_NAMESPACE, &collection, 1, policy->ns);
        snprintf(name, sizeof name, "the database %s", policy->database);
        check_scope(report, tier, SCOPE_NAMESPACE_DATABASE, &database, 1, name);
    }
    if (tier->is_fast) {
        const target_t state[] = {
            {TIER_DATABASE, TIER_FEEDER_COLLECTION}, {TIER_DATABASE, TIER_WARMER_COLLECTION},
            {TIER_DATABASE, TIER_MARKS_COLLECTION},  {TIER_DATABASE, TIER_REFUSALS_COLLECTION},
            {TIER_DATABASE, TIER_INDEXES_COLLECTION}, {TIER_DATABASE, TIER_LEASES_COLLECTION},
            {TIER_DATABASE, TIER_PROXIES_COLLECTION}, {TIER_DATABASE, TIER_PINS_COLLECTION},
            {TIER_DATABASE, TIER_EVICTIONS_COLLECTION},
        };
        const target_t every = {NULL, NULL};
        check_scope(report, tier, SCOPE_STATE, state, sizeof state / sizeof state[0],
                    "the collections of the " TIER_DATABASE " database");
        check_scope(report, tier, SCOPE_ANY_NORMAL, &every, 1, "every database ({db: \"\", collection: \"\"})");
    } else if (config->authorization_enabled) {
        const target_t users = {"admin", NULL};
        check_scope(report, tier, SCOPE_USERS, &users, 1, "the database admin");
    }
    check_report(report, CHECK_NOTE, "%s: checked the privileges of %s", tier->name, tier->user);
    return true;
}
