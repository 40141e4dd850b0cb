/* Tests for src/security/privileges.c, the command -> privileges table the store
 * and the proxy share: mongod's two refusals, the commands that run before
 * authentication, the rules that read inside a command (pipelines, upserts,
 * renames, user commands, usersInfo on oneself), the localhost exception,
 * listDatabases' filter and user documents. */
#include "security/privileges.h"
#include "security/sasl.h"

#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* A user of database holding one role (borrowed strings: never cleaned up). */
static privileges_user_t user_with(const char *name, const char *database, roles_grant_t *grant)
{
    privileges_user_t user = {(char *)name, (char *)database, grant, grant != NULL ? 1 : 0};
    return user;
}

static bool allowed(const privileges_user_t *user, const char *json, const char *database, bson_error_t *error)
{
    bson_error_t parse_error;
    bson_t *command = bson_new_from_json((const uint8_t *)json, -1, &parse_error);
    assert_non_null(command);
    bson_iter_t first;
    assert_true(bson_iter_init(&first, command) && bson_iter_next(&first));
    privileges_subject_t subject = {.user = user};
    bool ok = privileges_check_command(&subject, bson_iter_key(&first), command, database, error);
    bson_destroy(command);
    return ok;
}

static void test_before_authentication(void **state)
{
    (void)state;
    bson_error_t error;
    const char *open[] = {"{\"hello\": 1}", "{\"isMaster\": 1}", "{\"saslStart\": 1}", "{\"saslContinue\": 1}",
                          "{\"ping\": 1}", "{\"buildInfo\": 1}", "{\"logout\": 1}", "{\"connectionStatus\": 1}"};
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++) {
        assert_true(allowed(NULL, open[i], "admin", &error));
    }
    assert_false(allowed(NULL, "{\"find\": \"orders\"}", "shop", &error));
    assert_int_equal(error.code, 13);
    assert_string_equal(error.message, "command find requires authentication");
    assert_false(allowed(NULL, "{\"endSessions\": []}", "admin", &error));
    assert_string_equal(error.message, "command endSessions requires authentication");
    assert_true(privileges_runs_unauthenticated("saslStart"));
    assert_false(privileges_runs_unauthenticated("usersInfo"));
}

static void test_read_write_user(void **state)
{
    (void)state;
    bson_error_t error;
    roles_grant_t grant = {"readWrite", "shop"};
    privileges_user_t user = user_with("app", "shop", &grant);
    assert_true(allowed(&user, "{\"find\": \"orders\"}", "shop", &error));
    assert_true(allowed(&user, "{\"insert\": \"orders\", \"documents\": []}", "shop", &error));
    assert_true(allowed(&user, "{\"endSessions\": []}", "admin", &error));
    assert_false(allowed(&user, "{\"find\": \"orders\"}", "other", &error));
    assert_false(allowed(&user, "{\"dropDatabase\": 1}", "shop", &error));
    assert_int_equal(error.code, 13);
    assert_string_equal(error.message, "not authorized on shop to execute command { dropDatabase: 1 }");
    /* A pipeline writing elsewhere needs that database too. */
    assert_false(allowed(&user, "{\"aggregate\": \"orders\", \"pipeline\": [{\"$out\": {\"db\": \"other\", "
                                "\"coll\": \"x\"}}]}",
                         "shop", &error));
    assert_true(allowed(&user, "{\"aggregate\": \"orders\", \"pipeline\": [{\"$out\": \"copy\"}]}", "shop", &error));
    /* Unknown commands are root's. */
    assert_false(allowed(&user, "{\"compact\": \"orders\"}", "shop", &error));
    /* The proxy's status counts as serverStatus. */
    assert_false(allowed(&user, "{\"thermoclineStatus\": 1}", "admin", &error));
    roles_grant_t monitor = {"clusterMonitor", "admin"};
    privileges_user_t watcher = user_with("ops", "admin", &monitor);
    assert_true(allowed(&watcher, "{\"thermoclineStatus\": 1}", "admin", &error));
}

/* bypassDocumentValidation: true asks for its own action: readWrite lacks it,
 * dbAdmin holds it. */
static void test_bypass_document_validation(void **state)
{
    (void)state;
    bson_error_t error;
    roles_grant_t writer_grant = {"readWrite", "shop"};
    privileges_user_t writer = user_with("app", "shop", &writer_grant);
    const char *bypassing[] = {
        "{\"insert\": \"orders\", \"documents\": [], \"bypassDocumentValidation\": true}",
        "{\"update\": \"orders\", \"updates\": [], \"bypassDocumentValidation\": true}",
        "{\"findAndModify\": \"orders\", \"update\": {}, \"bypassDocumentValidation\": true}",
    };
    for (size_t i = 0; i < sizeof bypassing / sizeof bypassing[0]; i++) {
        assert_false(allowed(&writer, bypassing[i], "shop", &error));
        assert_int_equal(error.code, 13);
    }
    assert_true(allowed(&writer, "{\"insert\": \"orders\", \"documents\": [], \"bypassDocumentValidation\": false}",
                        "shop", &error));
    roles_grant_t grants[] = {{"readWrite", "shop"}, {"dbAdmin", "shop"}};
    privileges_user_t admin = user_with("restorer", "shop", grants);
    admin.grant_count = 2;
    for (size_t i = 0; i < sizeof bypassing / sizeof bypassing[0]; i++) {
        assert_true(allowed(&admin, bypassing[i], "shop", &error));
    }
}

static void test_read_user_and_secrets_in_the_message(void **state)
{
    (void)state;
    bson_error_t error;
    roles_grant_t grant = {"read", "shop"};
    privileges_user_t user = user_with("reader", "shop", &grant);
    assert_false(allowed(&user, "{\"insert\": \"orders\", \"documents\": [{\"_id\": 1}]}", "shop", &error));
    assert_string_equal(error.message,
                        "not authorized on shop to execute command { insert: \"orders\", documents: [ { _id: 1 } ] }");
    assert_false(allowed(&user, "{\"update\": \"orders\", \"updates\": [{\"q\": {}, \"u\": {}, \"upsert\": true}]}",
                         "shop", &error));
    assert_false(allowed(&user, "{\"createUser\": \"x\", \"pwd\": \"secret\", \"roles\": []}", "shop", &error));
    assert_null(strstr(error.message, "secret"));
    assert_non_null(strstr(error.message, "pwd: \"xxx\""));
    /* usersInfo on oneself needs nothing; on anyone else viewUser. */
    assert_true(allowed(&user, "{\"usersInfo\": \"reader\"}", "shop", &error));
    assert_true(allowed(&user, "{\"usersInfo\": {\"user\": \"reader\", \"db\": \"shop\"}}", "admin", &error));
    assert_false(allowed(&user, "{\"usersInfo\": \"someone\"}", "shop", &error));
    assert_false(allowed(&user, "{\"usersInfo\": 1}", "shop", &error));
}

/* What is running: a user sees its own operations and sessions; everyone's need
 * inprog (listSessions for sessions), as mongod's checks. */
static void test_operations_and_sessions(void **state)
{
    (void)state;
    bson_error_t error;
    roles_grant_t grant = {"readWrite", "shop"};
    privileges_user_t user = user_with("app", "admin", &grant);
    roles_grant_t monitor = {"clusterMonitor", "admin"};
    privileges_user_t watcher = user_with("ops", "admin", &monitor);
    const char *own[] = {
        "{\"aggregate\": 1, \"pipeline\": [{\"$currentOp\": {}}]}",
        "{\"aggregate\": 1, \"pipeline\": [{\"$currentOp\": {\"allUsers\": false, \"idleConnections\": true}}]}",
        "{\"currentOp\": 1, \"$ownOps\": true}",
        "{\"aggregate\": 1, \"pipeline\": [{\"$listLocalSessions\": {}}]}",
        "{\"aggregate\": 1, \"pipeline\": [{\"$listLocalSessions\": {\"users\": [{\"user\": \"app\", \"db\": "
        "\"admin\"}]}}]}",
    };
    const char *everyone[] = {
        "{\"aggregate\": 1, \"pipeline\": [{\"$currentOp\": {\"allUsers\": true}}]}",
        "{\"currentOp\": 1}",
        "{\"currentOp\": 1, \"$ownOps\": false}",
        "{\"aggregate\": 1, \"pipeline\": [{\"$listLocalSessions\": {\"allUsers\": true}}]}",
        "{\"aggregate\": 1, \"pipeline\": [{\"$listLocalSessions\": {\"users\": [{\"user\": \"app\", \"db\": "
        "\"shop\"}]}}]}",
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        assert_true(allowed(&user, own[i], "admin", &error));
    }
    for (size_t i = 0; i < sizeof everyone / sizeof everyone[0]; i++) {
        assert_false(allowed(&user, everyone[i], "admin", &error));
        assert_int_equal(error.code, 13);
        assert_true(allowed(&watcher, everyone[i], "admin", &error));
    }
    /* killOp: any user, for its own operations (the store's handler checks killop). */
    assert_true(allowed(&user, "{\"killOp\": 1, \"op\": 5}", "admin", &error));
    assert_false(allowed(NULL, "{\"killOp\": 1, \"op\": 5}", "admin", &error));

    /* Through the proxy, one identity downstream: "own" means everyone's. */
    roles_grant_t admin_grant = {"clusterAdmin", "admin"};
    privileges_user_t administrator = user_with("boss", "admin", &admin_grant);
    const char *forwarded[] = {own[0], own[2], own[3], "{\"killOp\": 1, \"op\": 5}"};
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
        bson_error_t parse_error;
        bson_t *command = bson_new_from_json((const uint8_t *)forwarded[i], -1, &parse_error);
        bson_iter_t first;
        assert_true(command != NULL && bson_iter_init(&first, command) && bson_iter_next(&first));
        privileges_subject_t proxied = {.user = &user, .forwards_as_itself = true};
        assert_false(privileges_check_command(&proxied, bson_iter_key(&first), command, "admin", &error));
        proxied.user = &administrator;
        assert_true(privileges_check_command(&proxied, bson_iter_key(&first), command, "admin", &error));
        bson_destroy(command);
    }
}

static void test_localhost_exception(void **state)
{
    (void)state;
    bson_error_t error;
    bson_error_t parse_error;
    bson_t *create = bson_new_from_json((const uint8_t *)"{\"createUser\": \"root\", \"pwd\": \"p\", \"roles\": "
                                                        "[{\"role\": \"root\", \"db\": \"admin\"}]}",
                                       -1, &parse_error);
    bson_t *find = bson_new_from_json((const uint8_t *)"{\"find\": \"c\"}", -1, &parse_error);
    privileges_subject_t subject = {.user = NULL, .localhost_exception = true};
    assert_true(privileges_check_command(&subject, "createUser", create, "admin", &error));
    assert_false(privileges_check_command(&subject, "createUser", create, "shop", &error));
    assert_false(privileges_check_command(&subject, "find", find, "admin", &error));
    assert_int_equal(error.code, 13);
    bson_destroy(create);
    bson_destroy(find);
}

static void test_list_databases_filter(void **state)
{
    (void)state;
    bson_error_t parse_error;
    const char *json = "{\"databases\": [{\"name\": \"shop\", \"sizeOnDisk\": 10}, {\"name\": \"hr\", \"sizeOnDisk\": "
                       "20}, {\"name\": \"admin\", \"sizeOnDisk\": 30}], \"totalSize\": 60, \"ok\": 1}";
    bson_t *reply = bson_new_from_json((const uint8_t *)json, -1, &parse_error);
    roles_grant_t grant = {"read", "shop"};
    privileges_user_t user = user_with("reader", "shop", &grant);
    privileges_filter_list_databases(&user, reply);
    char *text = bson_as_relaxed_extended_json(reply, NULL);
    assert_non_null(strstr(text, "\"shop\""));
    assert_null(strstr(text, "\"hr\""));
    assert_null(strstr(text, "\"admin\""));
    assert_non_null(strstr(text, "\"totalSize\" : 10"));
    bson_free(text);
    bson_destroy(reply);

    reply = bson_new_from_json((const uint8_t *)json, -1, &parse_error);
    roles_grant_t root = {"root", "admin"};
    privileges_user_t administrator = user_with("root", "admin", &root);
    privileges_filter_list_databases(&administrator, reply);
    text = bson_as_relaxed_extended_json(reply, NULL);
    assert_non_null(strstr(text, "\"hr\""));
    bson_free(text);
    bson_destroy(reply);
}

static void test_commands_that_change_users(void **state)
{
    (void)state;
    bson_t *insert = BCON_NEW("insert", "system.users");
    bson_t *other = BCON_NEW("insert", "orders");
    bson_t *create = BCON_NEW("createUser", "x");
    assert_true(privileges_command_changes_users("createUser", create, "shop"));
    assert_true(privileges_command_changes_users("grantRolesToUser", create, "shop"));
    assert_true(privileges_command_changes_users("insert", insert, "admin"));
    assert_false(privileges_command_changes_users("insert", insert, "shop"));
    assert_false(privileges_command_changes_users("insert", other, "admin"));
    assert_true(privileges_command_changes_users("dropDatabase", other, "admin"));
    assert_false(privileges_command_changes_users("find", insert, "admin"));
    bson_destroy(insert);
    bson_destroy(other);
    bson_destroy(create);
}

static void test_user_documents(void **state)
{
    (void)state;
    bson_error_t parse_error;
    bson_t *document = bson_new_from_json(
        (const uint8_t *)"{\"_id\": \"shop.app\", \"user\": \"app\", \"db\": \"shop\", \"roles\": [{\"role\": "
                         "\"readWrite\", \"db\": \"shop\"}, \"junk\", {\"role\": \"read\", \"db\": \"hr\"}]}",
        -1, &parse_error);
    privileges_user_t user, copy;
    assert_true(privileges_user_from_document(document, &user));
    assert_string_equal(user.name, "app");
    assert_string_equal(user.database, "shop");
    assert_int_equal(user.grant_count, 2);
    assert_string_equal(user.grants[1].role, "read");
    assert_string_equal(user.grants[1].database, "hr");
    privileges_user_copy(&user, &copy);
    privileges_user_cleanup(&user);
    assert_null(user.name);
    assert_string_equal(copy.grants[0].role, "readWrite");
    privileges_user_cleanup(&copy);
    bson_destroy(document);

    document = BCON_NEW("db", "shop");
    assert_false(privileges_user_from_document(document, &user));
    bson_destroy(document);
}

/* The SASL documents (security/sasl.c) the same two servers read. */
static void test_sasl_requests(void **state)
{
    (void)state;
    bson_error_t error;
    sasl_request_t request;
    bson_t *start = BCON_NEW("saslStart", BCON_INT32(1), "mechanism", "SCRAM-SHA-256", "payload", "biws",
                             "options", "{", "skipEmptyExchange", BCON_BOOL(true), "}");
    assert_true(sasl_parse_start(start, &request, &error));
    assert_string_equal(request.mechanism, "SCRAM-SHA-256");
    assert_true(request.payload_is_text);
    assert_true(request.skip_empty_exchange);
    assert_int_equal(request.payload_length, 3);
    assert_memory_equal(request.payload, "n,,", 3);
    sasl_request_cleanup(&request);
    bson_destroy(start);

    bson_t *bad = BCON_NEW("saslStart", BCON_INT32(1), "mechanism", "SCRAM-SHA-256", "payload", "!!");
    assert_false(sasl_parse_start(bad, &request, &error));
    assert_int_equal(error.code, 2);
    sasl_request_cleanup(&request);
    bson_destroy(bad);

    bson_t *missing = BCON_NEW("saslContinue", BCON_INT32(1), "payload", "");
    assert_false(sasl_parse_continue(missing, &request, &error));
    assert_int_equal(error.code, 40414);
    sasl_request_cleanup(&request);
    bson_destroy(missing);

    bson_t *speculative = BCON_NEW("saslStart", BCON_INT32(1), "mechanism", "SCRAM-SHA-1", "payload", "biws");
    assert_false(sasl_parse_speculative(speculative, &request)); /* no db: ignored, as mongod */
    sasl_request_cleanup(&request);
    bson_destroy(speculative);

    bson_t *unknown = BCON_NEW("saslStart", BCON_INT32(1), "mechanism", "PLAIN", "payload", "biws");
    sasl_conversation_t *conversation;
    assert_true(sasl_parse_start(unknown, &request, &error));
    assert_false(sasl_conversation_start(&request, "admin", false, &conversation, &error));
    assert_null(conversation);
    assert_int_equal(error.code, 334);
    assert_true(sasl_error_is_public(&error));
    sasl_request_cleanup(&request);
    bson_destroy(unknown);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_before_authentication),
        cmocka_unit_test(test_read_write_user),
        cmocka_unit_test(test_bypass_document_validation),
        cmocka_unit_test(test_read_user_and_secrets_in_the_message),
        cmocka_unit_test(test_operations_and_sessions),
        cmocka_unit_test(test_localhost_exception),
        cmocka_unit_test(test_list_databases_filter),
        cmocka_unit_test(test_commands_that_change_users),
        cmocka_unit_test(test_user_documents),
        cmocka_unit_test(test_sasl_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
