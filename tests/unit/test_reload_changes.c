/* Unit tests for src/proxy/reload_changes.c: what a new config changes, what it
 * may not change while the proxy runs, and when the tier workers must restart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "proxy/proxy_private.h"

#define BASE                                                                                                 \
    "listen: 127.0.0.1:27017\n"                                                                              \
    "archive: mongodb://127.0.0.1:27018/?replicaSet=rs0\n"                                                   \
    "fast: mongodb://127.0.0.1:27019/?replicaSet=rs1\n"

#define ORDERS                                                                                               \
    "  - ns: shop.orders\n"                                                                                  \
    "    timeField: createdAt\n"

static config_t *load(const char *text)
{
    bson_error_t error;
    config_t *config = config_load_string(text, strlen(text), "test.yaml", &error);
    if (config == NULL) {
        fail_msg("%s", error.message);
    }
    return config;
}

/* Whether list (a BSON array of strings) holds one containing needle. */
static bool lists(const bson_t *list, const char *needle)
{
    bson_iter_t iter;
    bson_iter_init(&iter, list);
    while (bson_iter_next(&iter)) {
        if (strstr(bson_iter_utf8(&iter, NULL), needle) != NULL) {
            return true;
        }
    }
    return false;
}

static void compare(const char *old_text, const char *new_text, reload_plan_t *plan)
{
    config_t *old_config = load(old_text);
    config_t *new_config = load(new_text);
    reload_plan_compare(old_config, new_config, plan);
    config_destroy(old_config);
    config_destroy(new_config);
}

static void test_same_file_changes_nothing(void **state)
{
    (void)state;
    reload_plan_t plan;
    const char *text = BASE "namespaces:\n" ORDERS "    maxAge: 1h\n";
    compare(text, text, &plan);
    assert_true(bson_empty(&plan.changed));
    assert_true(bson_empty(&plan.refused));
    assert_false(plan.restart_workers);
    assert_false(plan.removes_namespaces);
    reload_plan_cleanup(&plan);
}

static void test_live_settings(void **state)
{
    (void)state;
    reload_plan_t plan;
    compare(BASE "namespaces:\n" ORDERS "    maxAge: 1h\n",
            BASE "slowOpThresholdMs: 5\nidleTimeout: 10s\nnamespaces:\n" ORDERS "    maxAge: 30m\n", &plan);
    assert_true(bson_empty(&plan.refused));
    assert_true(lists(&plan.changed, "slowOpThresholdMs: 100 -> 5"));
    assert_true(lists(&plan.changed, "idleTimeout (ms): 0 -> 10000"));
    assert_true(lists(&plan.changed, "shop.orders maxAge (ms): 3600000 -> 1800000"));
    assert_true(plan.restart_workers); /* the evictor's window */
    reload_plan_cleanup(&plan);

    /* Limits alone: the workers go on. */
    compare(BASE "namespaces:\n" ORDERS "    maxAge: 1h\n",
            BASE "maxConnections: 10\nnamespaces:\n" ORDERS "    maxAge: 1h\n", &plan);
    assert_true(lists(&plan.changed, "maxConnections: 1000 -> 10"));
    assert_false(plan.restart_workers);
    reload_plan_cleanup(&plan);
}

static void test_namespaces_added_and_removed(void **state)
{
    (void)state;
    reload_plan_t plan;
    compare(BASE "namespaces:\n" ORDERS "    maxAge: 1h\n",
            BASE "namespaces:\n  - ns: shop.events\n    timeField: at\n    maxAge: 2h\n", &plan);
    assert_true(bson_empty(&plan.refused));
    assert_true(lists(&plan.changed, "namespace shop.events added (timeField at, maxAge 7200000ms)"));
    assert_true(lists(&plan.changed, "namespace shop.orders removed"));
    assert_true(plan.restart_workers);
    assert_true(plan.removes_namespaces);
    reload_plan_cleanup(&plan);
}

static void test_fixed_settings_are_refused(void **state)
{
    (void)state;
    reload_plan_t plan;
    compare(BASE "namespaces:\n" ORDERS "    maxAge: 1h\n",
            "listen: 127.0.0.1:27020\n"
            "archive: mongodb://u:secret@127.0.0.1:27021/?replicaSet=rs0\n"
            "fast: mongodb://127.0.0.1:27019/?replicaSet=rs1\n"
            "authorization: enabled\n"
            "namespaces:\n  - ns: shop.orders\n    timeField: updatedAt\n    maxAge: 1h\n",
            &plan);
    assert_true(lists(&plan.refused, "listen: 127.0.0.1:27017 -> 127.0.0.1:27020"));
    assert_true(lists(&plan.refused, "archive: mongodb://127.0.0.1:27018/"));
    assert_false(lists(&plan.refused, "secret")); /* passwords never shown */
    assert_true(lists(&plan.refused, "authorization: disabled -> enabled"));
    assert_true(lists(&plan.refused, "shop.orders: timeField or coverage changed"));
    assert_false(lists(&plan.refused, "fast:"));
    reload_plan_cleanup(&plan);
}

static void test_a_wider_window_is_refused(void **state)
{
    (void)state;
    reload_plan_t plan;
    /* maxAge - safetySlack: 1h - 6m (maxAge/10) -> 2h - 12m: wider. */
    compare(BASE "namespaces:\n" ORDERS "    maxAge: 1h\n", BASE "namespaces:\n" ORDERS "    maxAge: 2h\n", &plan);
    assert_true(lists(&plan.refused, "shop.orders: maxAge - safetySlack grows"));
    reload_plan_cleanup(&plan);
    /* A larger slack keeps the horizon where it was: accepted. */
    compare(BASE "namespaces:\n" ORDERS "    maxAge: 1h\n    safetySlack: 6m\n",
            BASE "namespaces:\n" ORDERS "    maxAge: 69m\n    safetySlack: 15m\n", &plan);
    assert_true(bson_empty(&plan.refused));
    reload_plan_cleanup(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_file_changes_nothing),
        cmocka_unit_test(test_live_settings),
        cmocka_unit_test(test_namespaces_added_and_removed),
        cmocka_unit_test(test_fixed_settings_are_refused),
        cmocka_unit_test(test_a_wider_window_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
