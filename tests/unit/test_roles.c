/* Tests for src/security/roles.c: what each built-in role allows and refuses,
 * where (its database, system collections, local and config, the cluster), and
 * role names as mongod resolves them. */
#include "security/roles.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#define ACT(name) ROLES_ACTION(ROLES_##name)

static bool allow_on_collection(const char *role, const char *role_database, const char *database,
                                const char *collection, roles_actions_t actions)
{
    roles_grant_t grant = {role, role_database};
    roles_resource_t resource = {ROLES_RESOURCE_COLLECTION, database, collection};
    return roles_allow(&grant, 1, &resource, actions);
}

static bool allow_on_database(const char *role, const char *role_database, const char *database,
                              roles_actions_t actions)
{
    roles_grant_t grant = {role, role_database};
    roles_resource_t resource = {ROLES_RESOURCE_DATABASE, database, NULL};
    return roles_allow(&grant, 1, &resource, actions);
}

static bool allow_on_cluster(const char *role, const char *role_database, roles_actions_t actions)
{
    roles_grant_t grant = {role, role_database};
    roles_resource_t resource = {ROLES_RESOURCE_CLUSTER, NULL, NULL};
    return roles_allow(&grant, 1, &resource, actions);
}

static void test_read(void **state)
{
    (void)state;
    assert_true(allow_on_collection("read", "shop", "shop", "orders", ACT(FIND)));
    assert_true(allow_on_collection("read", "shop", "shop", "orders", ACT(FIND) | ACT(KILL_CURSORS)));
    assert_true(allow_on_database("read", "shop", "shop", ACT(LIST_COLLECTIONS) | ACT(DB_STATS)));
    assert_false(allow_on_collection("read", "shop", "shop", "orders", ACT(INSERT)));
    assert_false(allow_on_collection("read", "shop", "shop", "orders", ACT(FIND) | ACT(REMOVE)));
    assert_false(allow_on_collection("read", "shop", "other", "orders", ACT(FIND)));   /* another database */
    assert_false(allow_on_collection("read", "shop", "shop", "system.users", ACT(FIND)));
    assert_true(allow_on_collection("read", "shop", "shop", "system.js", ACT(FIND)));
    assert_false(allow_on_cluster("read", "admin", ACT(LIST_DATABASES)));
    /* read on admin is read on admin's collections, not on everything. */
    assert_false(allow_on_collection("read", "admin", "shop", "orders", ACT(FIND)));
}

static void test_read_write_cannot_drop_the_database(void **state)
{
    (void)state;
    assert_true(allow_on_collection("readWrite", "shop", "shop", "orders",
                                    ACT(INSERT) | ACT(UPDATE) | ACT(REMOVE) | ACT(FIND)));
    assert_true(allow_on_collection("readWrite", "shop", "shop", "orders", ACT(DROP_COLLECTION)));
    assert_true(allow_on_collection("readWrite", "shop", "shop", "orders", ACT(CREATE_INDEX)));
    assert_false(allow_on_database("readWrite", "shop", "shop", ACT(DROP_DATABASE)));
    assert_false(allow_on_database("readWrite", "shop", "shop", ACT(CREATE_USER)));
    assert_false(allow_on_collection("readWrite", "shop", "shop", "system.profile", ACT(FIND)));
}

static void test_db_admin_manages_but_does_not_read(void **state)
{
    (void)state;
    assert_true(allow_on_database("dbAdmin", "shop", "shop", ACT(DROP_DATABASE)));
    assert_true(allow_on_collection("dbAdmin", "shop", "shop", "orders", ACT(CREATE_INDEX) | ACT(COLL_STATS)));
    assert_false(allow_on_collection("dbAdmin", "shop", "shop", "orders", ACT(FIND)));
    assert_false(allow_on_collection("dbAdmin", "shop", "shop", "orders", ACT(INSERT)));
    assert_true(allow_on_collection("dbAdmin", "shop", "shop", "system.profile", ACT(FIND)));
    assert_false(allow_on_database("dbAdmin", "shop", "shop", ACT(CREATE_USER)));
}

static void test_user_admin(void **state)
{
    (void)state;
    assert_true(allow_on_database("userAdmin", "shop", "shop", ACT(CREATE_USER) | ACT(GRANT_ROLE) | ACT(VIEW_USER)));
    assert_false(allow_on_database("userAdmin", "shop", "other", ACT(CREATE_USER)));
    assert_false(allow_on_collection("userAdmin", "shop", "shop", "orders", ACT(FIND)));
    assert_true(allow_on_database("dbOwner", "shop", "shop", ACT(CREATE_USER) | ACT(DROP_DATABASE)));
    assert_true(allow_on_collection("dbOwner", "shop", "shop", "orders", ACT(FIND) | ACT(INSERT)));
}

static void test_any_database_roles_skip_local_and_config(void **state)
{
    (void)state;
    assert_true(allow_on_collection("readAnyDatabase", "admin", "shop", "orders", ACT(FIND)));
    assert_true(allow_on_collection("readAnyDatabase", "admin", "admin", "things", ACT(FIND)));
    assert_false(allow_on_collection("readAnyDatabase", "admin", "local", "oplog.rs", ACT(FIND)));
    assert_false(allow_on_collection("readAnyDatabase", "admin", "config", "x", ACT(FIND)));
    assert_false(allow_on_collection("readAnyDatabase", "admin", "shop", "orders", ACT(INSERT)));
    assert_false(allow_on_collection("readAnyDatabase", "admin", "admin", "system.users", ACT(FIND)));
    assert_true(allow_on_cluster("readAnyDatabase", "admin", ACT(LIST_DATABASES)));
    assert_false(allow_on_cluster("readAnyDatabase", "admin", ACT(SERVER_STATUS)));
    assert_true(allow_on_collection("readWriteAnyDatabase", "admin", "a", "b", ACT(INSERT) | ACT(REMOVE)));
    assert_false(allow_on_database("readWriteAnyDatabase", "admin", "a", ACT(DROP_DATABASE)));
    assert_true(allow_on_database("dbAdminAnyDatabase", "admin", "a", ACT(DROP_DATABASE)));
    assert_true(allow_on_database("userAdminAnyDatabase", "admin", "a", ACT(CREATE_USER)));
    assert_true(allow_on_collection("userAdminAnyDatabase", "admin", "admin", "system.users", ACT(FIND)));
    /* The AnyDatabase roles exist only in admin: held on another database they grant nothing. */
    assert_false(allow_on_collection("readAnyDatabase", "shop", "shop", "orders", ACT(FIND)));
}

static void test_cluster_roles_and_root(void **state)
{
    (void)state;
    assert_true(allow_on_cluster("clusterMonitor", "admin", ACT(SERVER_STATUS) | ACT(GET_PARAMETER)));
    assert_false(allow_on_cluster("clusterMonitor", "admin", ACT(FSYNC)));
    assert_true(allow_on_cluster("clusterAdmin", "admin", ACT(FSYNC) | ACT(SERVER_STATUS)));
    assert_false(allow_on_collection("clusterAdmin", "admin", "shop", "orders", ACT(FIND)));
    assert_true(allow_on_cluster("root", "admin", ACT(FSYNC) | ACT(LIST_DATABASES)));
    assert_true(allow_on_database("root", "admin", "shop", ACT(DROP_DATABASE) | ACT(CREATE_USER)));
    assert_true(allow_on_collection("root", "admin", "local", "oplog.rs", ACT(FIND)));
    assert_true(allow_on_collection("root", "admin", "admin", "system.users", ACT(FIND) | ACT(INSERT)));
    assert_false(allow_on_collection("root", "shop", "shop", "orders", ACT(FIND)));
}

static void test_roles_combine_and_unknown_roles_grant_nothing(void **state)
{
    (void)state;
    roles_grant_t grants[] = {{"read", "shop"}, {"dbAdmin", "shop"}, {"nosuchrole", "shop"}};
    roles_resource_t orders = {ROLES_RESOURCE_COLLECTION, "shop", "orders"};
    roles_resource_t shop = {ROLES_RESOURCE_DATABASE, "shop", NULL};
    assert_true(roles_allow(grants, 3, &orders, ACT(FIND) | ACT(CREATE_INDEX)));
    assert_true(roles_allow(grants, 3, &shop, ACT(DROP_DATABASE) | ACT(LIST_COLLECTIONS)));
    assert_false(roles_allow(grants, 3, &orders, ACT(FIND) | ACT(INSERT)));
    assert_false(roles_allow(&grants[2], 1, &orders, ACT(FIND)));
    assert_false(roles_allow(NULL, 0, &orders, ACT(FIND)));
    assert_true(roles_allow(NULL, 0, &orders, 0)); /* nothing asked, nothing needed */
}

/* usersInfo {forAllDBs: true} asks for viewUser on every database at once: only
 * the AnyDatabase roles and root hold it. */
static void test_every_database_at_once(void **state)
{
    (void)state;
    roles_resource_t every = {ROLES_RESOURCE_ANY_DATABASE, NULL, NULL};
    roles_grant_t user_admin_any = {"userAdminAnyDatabase", "admin"};
    roles_grant_t user_admin_on_admin = {"userAdmin", "admin"};
    roles_grant_t root = {"root", "admin"};
    assert_true(roles_allow(&user_admin_any, 1, &every, ACT(VIEW_USER)));
    assert_true(roles_allow(&root, 1, &every, ACT(VIEW_USER)));
    assert_false(roles_allow(&user_admin_on_admin, 1, &every, ACT(VIEW_USER)));
    assert_false(roles_allow(&user_admin_any, 1, &every, ACT(FIND)));
    /* Every action on the cluster: root alone (commands nobody classified). */
    roles_resource_t cluster = {ROLES_RESOURCE_CLUSTER, NULL, NULL};
    roles_grant_t cluster_admin = {"clusterAdmin", "admin"};
    assert_true(roles_allow(&root, 1, &cluster, ROLES_ALL_ACTIONS));
    assert_false(roles_allow(&cluster_admin, 1, &cluster, ROLES_ALL_ACTIONS));
}

static void test_role_names(void **state)
{
    (void)state;
    assert_true(roles_exists("read", "anything"));
    assert_true(roles_exists("dbOwner", "shop"));
    assert_true(roles_exists("root", "admin"));
    assert_false(roles_exists("root", "shop"));
    assert_false(roles_exists("readAnyDatabase", "shop"));
    assert_false(roles_exists("Read", "shop")); /* case matters */
    assert_false(roles_exists("", "admin"));
    assert_string_equal(roles_action_name(ROLES_DROP_DATABASE), "dropDatabase");
    assert_string_equal(roles_action_name(ROLES_FIND), "find");
}

static void test_any_on_database(void **state)
{
    (void)state;
    roles_grant_t reader = {"read", "shop"};
    assert_true(roles_allow_any_on_database(&reader, 1, "shop"));
    assert_false(roles_allow_any_on_database(&reader, 1, "other"));
    roles_grant_t any = {"readAnyDatabase", "admin"};
    assert_true(roles_allow_any_on_database(&any, 1, "other"));
    assert_false(roles_allow_any_on_database(&any, 1, "local"));
    roles_grant_t monitor = {"clusterMonitor", "admin"};
    assert_false(roles_allow_any_on_database(&monitor, 1, "admin"));
    roles_grant_t user_admin_any = {"userAdminAnyDatabase", "admin"};
    assert_true(roles_allow_any_on_database(&user_admin_any, 1, "admin"));
}

/* connectionStatus {showPrivileges: true}: one entry per resource, two roles'
 * actions on one resource merged, mongod's resource documents. */
static void test_privileges_as_listed(void **state)
{
    (void)state;
    roles_grant_t grants[] = {{"read", "shop"}, {"dbAdmin", "shop"}, {"readAnyDatabase", "admin"},
                              {"clusterMonitor", "admin"}, {"nosuchrole", "shop"}};
    roles_privilege_t privileges[5 * ROLES_PRIVILEGES_PER_GRANT];
    size_t count = roles_privileges(grants, 5, privileges, 5 * ROLES_PRIVILEGES_PER_GRANT);
    const roles_privilege_t *shop = NULL, *any = NULL, *cluster = NULL;
    size_t shop_entries = 0;
    for (size_t i = 0; i < count; i++) {
        const roles_privilege_t *item = &privileges[i];
        if (item->resource == ROLES_PRIVILEGE_NAMESPACE && strcmp(item->database, "shop") == 0 &&
            item->collection[0] == '\0') {
            shop = item;
            shop_entries++;
        } else if (item->resource == ROLES_PRIVILEGE_NAMESPACE && item->database[0] == '\0') {
            any = item;
        } else if (item->resource == ROLES_PRIVILEGE_CLUSTER) {
            cluster = item;
        }
    }
    assert_int_equal(shop_entries, 1);
    assert_non_null(shop);
    assert_true((shop->actions & (ACT(FIND) | ACT(COLL_MOD) | ACT(BYPASS_DOCUMENT_VALIDATION))) ==
                (ACT(FIND) | ACT(COLL_MOD) | ACT(BYPASS_DOCUMENT_VALIDATION)));
    assert_false(shop->actions & ACT(INSERT));
    assert_non_null(any);
    assert_true(any->actions & ACT(CHANGE_STREAM));
    assert_non_null(cluster);
    assert_true(cluster->actions & ACT(SERVER_STATUS));
    assert_true(cluster->actions & ACT(LIST_DATABASES));
    /* read's and dbAdmin's system collections, the any-database and the cluster entries: 5. */
    assert_int_equal(count, 5);
    roles_grant_t root = {"root", "admin"};
    assert_int_equal(roles_privileges(&root, 1, privileges, ROLES_PRIVILEGES_PER_GRANT), 1);
    assert_int_equal(privileges[0].resource, ROLES_PRIVILEGE_ANY_RESOURCE);
    assert_int_equal(roles_privileges(grants, 5, privileges, 2), 2); /* capacity respected */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_read_write_cannot_drop_the_database),
        cmocka_unit_test(test_db_admin_manages_but_does_not_read),
        cmocka_unit_test(test_user_admin),
        cmocka_unit_test(test_any_database_roles_skip_local_and_config),
        cmocka_unit_test(test_cluster_roles_and_root),
        cmocka_unit_test(test_roles_combine_and_unknown_roles_grant_nothing),
        cmocka_unit_test(test_every_database_at_once),
        cmocka_unit_test(test_role_names),
        cmocka_unit_test(test_any_on_database),
        cmocka_unit_test(test_privileges_as_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
