/* Unit tests for src/config/config.c: good files and their values (defaults, derived
 * defaults, every optional key), and bad files, each refused with the exact
 * "FILE:LINE: reason" a user would read. The files (and, for the TLS keys, a
 * CA and a certificate: certificates.h) are written to a temporary directory by
 * the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

#include <mongoc/mongoc.h>

#include "certificates.h"

#define ARCHIVE "archive: mongodb://127.0.0.1:27018/?replicaSet=rs0\n"
#define FAST "fast: mongodb://127.0.0.1:27019/?replicaSet=rs1\n"
#define TIERS ARCHIVE FAST

static char directory[64];
static unsigned file_counter;
static char ca_path[128], certificate_path[128]; /* for the TLS keys */

static int make_directory(void **state)
{
    (void)state;
    snprintf(directory, sizeof directory, "/tmp/tc_config_test_XXXXXX");
    if (mkdtemp(directory) == NULL) {
        return -1;
    }
    test_authority_t authority;
    test_authority_init(&authority, "config test CA");
    snprintf(ca_path, sizeof ca_path, "%s/ca.pem", directory);
    snprintf(certificate_path, sizeof certificate_path, "%s/proxy.pem", directory);
    test_authority_write(&authority, ca_path);
    test_certificate_write(&authority, "localhost", "DNS:localhost", NULL, certificate_path);
    test_authority_cleanup(&authority);
    return 0;
}

static int remove_directory(void **state)
{
    (void)state;
    char path[128];
    for (unsigned i = 0; i < file_counter; i++) {
        snprintf(path, sizeof path, "%s/%u.yaml", directory, i);
        unlink(path);
    }
    unlink(ca_path);
    unlink(certificate_path);
    return rmdir(directory);
}

/* Writes text to a new file in the test directory; path receives its name. */
static void write_file(const char *text, char *path, size_t size)
{
    snprintf(path, size, "%s/%u.yaml", directory, file_counter++);
    FILE *file = fopen(path, "wb");
    assert_non_null(file);
    assert_int_equal(fwrite(text, 1, strlen(text), file), strlen(text));
    assert_int_equal(fclose(file), 0);
}

static config_t *load(const char *text)
{
    char path[128];
    bson_error_t error;
    write_file(text, path, sizeof path);
    config_t *config = config_load_file(path, &error);
    if (config == NULL) {
        fail_msg("refused:\n%s\n%s", text, error.message);
    }
    return config;
}

/* ---- good files ---------------------------------------------------------- */

static void test_brief_example(void **state)
{
    (void)state;
    config_t *config = load("listen: 127.0.0.1:27017\n"
                            "archive: mongodb://127.0.0.1:27018/?replicaSet=rs0\n"
                            "fast: mongodb://127.0.0.1:27019/?replicaSet=rs1\n"
                            "namespaces:\n"
                            "  - ns: shop.orders\n"
                            "    timeField: createdAt\n"
                            "    maxAge: 30d\n");
    assert_string_equal(config->listen.host, "127.0.0.1");
    assert_int_equal(config->listen.port, 27017);
    assert_string_equal(config->archive_uri, "mongodb://127.0.0.1:27018/?replicaSet=rs0");
    assert_string_equal(config->fast_uri, "mongodb://127.0.0.1:27019/?replicaSet=rs1");
    assert_null(config->metrics_listen.host); /* metrics off unless configured */
    assert_int_equal(config->log_format, TC_LOG_FORMAT_TEXT);
    assert_int_equal(config->namespace_count, 1);
    const config_namespace_t *orders = &config->namespaces[0];
    assert_string_equal(orders->ns, "shop.orders");
    assert_string_equal(orders->database, "shop");
    assert_string_equal(orders->collection, "orders");
    assert_int_equal(orders->index, 0);
    assert_string_equal(orders->time_field, "createdAt");
    assert_true(orders->max_age_ms == INT64_C(30) * 86400000);
    assert_int_equal(orders->line, 5);
    /* defaults */
    assert_int_equal(orders->coverage, CONFIG_COVERAGE_WARM);
    assert_true(orders->safety_slack_ms == 15 * 60000);   /* maxAge/10 = 3d, at most 15m */
    assert_true(orders->evictor_period_ms == 60000);      /* maxAge/20, at most 1m */
    assert_true(orders->warmer_period_ms == 60000);
    assert_true(orders->index_sync_period_ms == 60000);
    assert_true(orders->require_time_field_index);
    assert_true(config->max_connections == 1000);
    assert_true(config->read_your_writes_wait_ms == 5000);
    assert_true(config->failover_wait_ms == 10000);
    assert_true(config->fault_in_limit == 1000);
    assert_true(config->feeder_enabled && config->evictor_enabled && config->warmer_enabled);
    assert_false(config->authorization_enabled);
    assert_ptr_equal(config_find_namespace(config, "shop.orders"), orders);
    assert_null(config_find_namespace(config, "shop.Orders"));
    assert_null(config_find_namespace(config, "shop"));
    assert_null(config_find_namespace(NULL, "shop.orders"));
    config_destroy(config);
    config_destroy(NULL);
}

static void test_every_option(void **state)
{
    (void)state;
    config_t *config = load("# the lab's configuration\n"
                            "listen: '[::1]:28000'\n" TIERS "maxConnections: 50\n"
                            "readYourWritesWait: 250ms\n"
                            "failoverWait: 0s\n"
                            "faultInLimit: 0\n"
                            "feederEnabled: false\n"
                            "evictorEnabled: FALSE\n"
                            "warmerEnabled: True\n"
                            "warmerRateLimit: 500\n"
                            "authorization: enabled\n"
                            "metricsListen: 127.0.0.1:9216\n"
                            "logFormat: json\n"
                            "namespaces:\n"
                            "  - ns: shop.orders\n"
                            "    timeField: createdAt\n"
                            "    maxAge: 10s\n"
                            "    coverage: complete\n"
                            "    safetySlack: 2s\n"
                            "    evictorPeriod: 500ms\n"
                            "    warmerPeriod: 1.5s\n"
                            "    indexSyncPeriod: 2s\n"
                            "    requireTimeFieldIndex: false\n"
                            "  - ns: \"events.clicks\"\n"
                            "    timeField: meta.ts\n"
                            "    maxAge: 6h\n");
    assert_string_equal(config->listen.host, "::1");
    assert_int_equal(config->listen.port, 28000);
    assert_true(config->max_connections == 50);
    assert_true(config->read_your_writes_wait_ms == 250);
    assert_true(config->failover_wait_ms == 0);
    assert_true(config->fault_in_limit == 0);
    assert_false(config->feeder_enabled);
    assert_false(config->evictor_enabled);
    assert_true(config->warmer_enabled);
    assert_true(config->warmer_rate_limit == 500);
    assert_true(config->authorization_enabled);
    assert_string_equal(config->metrics_listen.host, "127.0.0.1");
    assert_int_equal(config->metrics_listen.port, 9216);
    assert_int_equal(config->log_format, TC_LOG_FORMAT_JSON);
    assert_int_equal(config->namespace_count, 2);
    const config_namespace_t *orders = config_find_namespace(config, "shop.orders");
    assert_non_null(orders);
    assert_int_equal(orders->coverage, CONFIG_COVERAGE_COMPLETE);
    assert_true(orders->max_age_ms == 10000);
    assert_true(orders->safety_slack_ms == 2000);
    assert_true(orders->evictor_period_ms == 500);
    assert_true(orders->warmer_period_ms == 1500);
    assert_true(orders->index_sync_period_ms == 2000);
    assert_false(orders->require_time_field_index);
    const config_namespace_t *clicks = config_find_namespace(config, "events.clicks");
    assert_non_null(clicks);
    assert_string_equal(clicks->time_field, "meta.ts");
    assert_int_equal(clicks->coverage, CONFIG_COVERAGE_WARM);
    assert_true(clicks->safety_slack_ms == 15 * 60000); /* 6h/10 = 36m, at most 15m */
    assert_true(clicks->evictor_period_ms == 60000);    /* 6h/20 = 18m, at most 1m */
    assert_int_equal(clicks->line, 26); /* after the two index keys of orders */
    assert_int_equal(clicks->index, 1);
    assert_ptr_equal(clicks, &config->namespaces[1]);
    config_destroy(config);
}

/* Tests shrink maxAge to seconds: the derived intervals follow it down. */
static void test_defaults_follow_max_age(void **state)
{
    (void)state;
    static const struct {
        const char *max_age;
        int64_t slack, period;
    } cases[] = {
        {"10s", 1000, 500},   {"1s", 100, 100}, /* periods never below 100ms */
        {"100ms", 10, 100},   {"1ms", 0, 100},  {"20m", 120000, 60000},
        {"1d", 900000, 60000}, {"30d", 900000, 60000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, TIERS "namespaces:\n  - ns: a.b\n    timeField: t\n    maxAge: %s\n",
                 cases[i].max_age);
        config_t *config = load(text);
        const config_namespace_t *entry = &config->namespaces[0];
        if (entry->safety_slack_ms != cases[i].slack || entry->evictor_period_ms != cases[i].period ||
            entry->warmer_period_ms != cases[i].period) {
            fail_msg("maxAge %s: slack %lld, periods %lld %lld", cases[i].max_age, (long long)entry->safety_slack_ms,
                     (long long)entry->evictor_period_ms, (long long)entry->warmer_period_ms);
        }
        config_destroy(config);
    }
}

static void test_other_good_shapes(void **state)
{
    (void)state;
    /* no listen, no namespaces */
    config_t *config = load(TIERS);
    assert_string_equal(config->listen.host, "127.0.0.1");
    assert_int_equal(config->listen.port, 27017);
    assert_int_equal(config->namespace_count, 0);
    config_destroy(config);

    config = load(TIERS "namespaces:\n");
    assert_int_equal(config->namespace_count, 0);
    config_destroy(config);

    config = load(TIERS "namespaces: []\nlisten: localhost:1\n");
    assert_int_equal(config->namespace_count, 0);
    assert_string_equal(config->listen.host, "localhost");
    assert_int_equal(config->listen.port, 1);
    config_destroy(config);

    /* flow style, quoted names that look like numbers, anchors, comments, CRLF */
    config = load("archive: 'mongodb://a.example:27017,b.example:27017/?replicaSet=rs0'\r\n"
                  "fast: \"mongodb://c.example:27017\"\r\n"
                  "namespaces: [{ns: '1.2', timeField: '5', maxAge: &age 7d},  # flow\r\n"
                  "             {ns: x.y, timeField: at, maxAge: *age}]\r\n");
    assert_int_equal(config->namespace_count, 2);
    assert_string_equal(config->namespaces[0].ns, "1.2");
    assert_string_equal(config->namespaces[0].database, "1");
    assert_string_equal(config->namespaces[0].collection, "2");
    assert_string_equal(config->namespaces[0].time_field, "5");
    assert_true(config->namespaces[1].max_age_ms == INT64_C(7) * 86400000);
    config_destroy(config);

    /* a collection name holding dots: the database ends at the first one */
    config = load(TIERS "namespaces:\n  - ns: logs.app.2024\n    timeField: t\n    maxAge: 1d\n");
    assert_string_equal(config->namespaces[0].database, "logs");
    assert_string_equal(config->namespaces[0].collection, "app.2024");
    config_destroy(config);

    /* an SRV URI and a URI with credentials */
    config = load("archive: mongodb+srv://cluster0.example.com/\n"
                  "fast: mongodb://user:p%40ss@127.0.0.1:27019/?authSource=admin\n");
    assert_string_equal(config->fast_uri, "mongodb://user:p%40ss@127.0.0.1:27019/?authSource=admin");
    config_destroy(config);

    /* the largest and smallest values each bound allows */
    config = load(TIERS "maxConnections: 1000000\nreadYourWritesWait: 1h\nfaultInLimit: 10000000\n");
    assert_true(config->max_connections == 1000000);
    assert_true(config->read_your_writes_wait_ms == 3600000);
    config_destroy(config);
    config = load(TIERS "maxConnections: 1\nreadYourWritesWait: 0ms\nlisten: 0.0.0.0:65535\n");
    assert_true(config->read_your_writes_wait_ms == 0);
    assert_int_equal(config->listen.port, 65535);
    config_destroy(config);
}

/* ---- bad files ----------------------------------------------------------- */

typedef struct bad_case {
    const char *text;
    const char *message; /* after "PATH:" */
} bad_case_t;

static void run_bad_cases(const bad_case_t *cases, size_t count, uint32_t code)
{
    int failures = 0;
    for (size_t i = 0; i < count; i++) {
        char path[128];
        char expected[600];
        bson_error_t error = {0};
        write_file(cases[i].text, path, sizeof path);
        snprintf(expected, sizeof expected, "%s:%s", path, cases[i].message);
        config_t *config = config_load_file(path, &error);
        if (config != NULL) {
            print_error("accepted:\n%s\n", cases[i].text);
            failures++;
            config_destroy(config);
        } else if (strcmp(error.message, expected) != 0 || error.code != code || error.domain != TC_ERROR_DOMAIN) {
            print_error("case %zu:\n%s\ngot      %u %s\nexpected %u %s\n", i, cases[i].text, error.code,
                        error.message, code, expected);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* BadValue, or FailedToParse for YAML syntax. */
#define RUN_BAD(cases) run_bad_cases(cases, sizeof cases / sizeof cases[0], 2)
#define RUN_SYNTAX(cases) run_bad_cases(cases, sizeof cases / sizeof cases[0], 9)
#define NS_HEAD TIERS "namespaces:\n  - ns: shop.orders\n" /* the entry starts at line 4 */

static void test_unknown_keys(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"archve: mongodb://a:1\n" FAST, "1: unknown key 'archve' at the top level; did you mean 'archive'?"},
        {TIERS "lisen: 127.0.0.1:1\n", "3: unknown key 'lisen' at the top level; did you mean 'listen'?"},
        {TIERS "maxconnections: 5\n",
         "3: unknown key 'maxconnections' at the top level; did you mean 'maxConnections'?"},
        {TIERS "fats: x\n", "3: unknown key 'fats' at the top level; did you mean 'fast'?"},
        {TIERS "namespace:\n", "3: unknown key 'namespace' at the top level; did you mean 'namespaces'?"},
        {TIERS "colour: blue\n", "3: unknown key 'colour' at the top level"},
        {TIERS "x: 1\n", "3: unknown key 'x' at the top level"},
        {NS_HEAD "    timefield: createdAt\n    maxAge: 1d\n",
         "5: unknown key 'timefield' in a namespace entry; did you mean 'timeField'?"},
        {NS_HEAD "    tmeField: createdAt\n    maxAge: 1d\n",
         "5: unknown key 'tmeField' in a namespace entry; did you mean 'timeField'?"},
        {NS_HEAD "    timeField: createdAt\n    maxage: 1d\n",
         "6: unknown key 'maxage' in a namespace entry; did you mean 'maxAge'?"},
        {NS_HEAD "    timeField: createdAt\n    maxAge: 1d\n    safety_slack: 1s\n",
         "7: unknown key 'safety_slack' in a namespace entry; did you mean 'safetySlack'?"},
        {NS_HEAD "    timeField: createdAt\n    maxAge: 1d\n    ttl: 1s\n",
         "7: unknown key 'ttl' in a namespace entry"},
        /* a key in the wrong place */
        {TIERS "maxAge: 30d\n", "3: maxAge is a namespace setting: put it in each entry of namespaces"},
        {TIERS "safetySlack: 1s\n", "3: safetySlack is a namespace setting: put it in each entry of namespaces"},
        {NS_HEAD "    timeField: createdAt\n    maxAge: 1d\n    faultInLimit: 5\n",
         "7: faultInLimit is a top-level setting, not a namespace one"},
        /* keys given twice, and keys that are not names */
        {TIERS "archive: mongodb://b:1\n", "3: archive is given twice (first at line 1)"},
        {NS_HEAD "    timeField: a\n    timeField: b\n    maxAge: 1d\n",
         "6: timeField is given twice (first at line 5)"},
        {TIERS "? [a, b]\n: 1\n", "3: a key must be a plain name, not a list"},
    };
    RUN_BAD(cases);
}

static void test_bad_uris_and_addresses(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"archive: http://127.0.0.1:27018\n" FAST,
         "1: archive is not a valid MongoDB URI (mongodb://host:port/?options): Invalid URI Schema, expecting "
         "'mongodb://' or 'mongodb+srv://'"},
        {ARCHIVE "fast: mongodb://\n",
         "2: fast is not a valid MongoDB URI (mongodb://host:port/?options): Invalid host string in URI"},
        {ARCHIVE "fast: 27019\n",
         "2: fast must be a string, not an integer ('27019'); quote it if that is really the name"},
        {ARCHIVE "fast: [mongodb://a:1]\n", "2: fast must be a mongodb:// URI, not a list"},
        {"archive: mongodb://127.0.0.1:27018\nfast: mongodb://127.0.0.1:27018/?replicaSet=x\n",
         "2: fast and archive both name the server 127.0.0.1:27018: the fast tier must be a separate deployment"},
        {"archive: mongodb://a:1,b:2\nfast: mongodb://c:3,B:2\n",
         "2: fast and archive both name the server b:2: the fast tier must be a separate deployment"},
        {"archive: mongodb://CN%3Dproxy@127.0.0.1:27018/?authMechanism=MONGODB-X509\n" FAST,
         "1: archive: the proxy authenticates to a tier with SCRAM-SHA-256 or SCRAM-SHA-1, not "
         "authMechanism=MONGODB-X509"},
        {TIERS "listen: 27017\n", "3: listen must be host:port, such as 127.0.0.1:27017, not '27017'"},
        {TIERS "listen: localhost\n", "3: listen must be host:port, such as 127.0.0.1:27017, not 'localhost'"},
        {TIERS "listen: localhost:0\n", "3: listen: the port must be a number from 1 to 65535, not '0'"},
        {TIERS "listen: localhost:65536\n", "3: listen: the port must be a number from 1 to 65535, not '65536'"},
        {TIERS "listen: localhost:http\n", "3: listen: the port must be a number from 1 to 65535, not 'http'"},
        {TIERS "listen: ':27017'\n", "3: listen needs a host before the port, such as 127.0.0.1:27017, not ':27017'"},
        {TIERS "listen: '::1:27017'\n",
         "3: listen: write an IPv6 address in brackets, as [::1]:27017, not '::1:27017'"},
        {TIERS "listen: '[]:27017'\n", "3: listen: write an IPv6 address as [::1]:27017, not '[]:27017'"},
    };
    RUN_BAD(cases);
}

static void test_bad_namespaces(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        /* the time field */
        {NS_HEAD "    timeField: 5\n    maxAge: 1d\n",
         "5: timeField must be a string, not an integer ('5'); quote it if that is really the name"},
        {NS_HEAD "    timeField: 1.5e3\n    maxAge: 1d\n",
         "5: timeField must be a string, not a number ('1.5e3'); quote it if that is really the name"},
        {NS_HEAD "    timeField: true\n    maxAge: 1d\n",
         "5: timeField must be a string, not a boolean ('true'); quote it if that is really the name"},
        {NS_HEAD "    timeField:\n    maxAge: 1d\n",
         "5: timeField must be a string, not null (''); quote it if that is really the name"},
        {NS_HEAD "    timeField: [createdAt]\n    maxAge: 1d\n", "5: timeField must be a field name, not a list"},
        {NS_HEAD "    timeField: {a: 1}\n    maxAge: 1d\n", "5: timeField must be a field name, not a mapping"},
        {NS_HEAD "    timeField: $createdAt\n    maxAge: 1d\n",
         "5: timeField must be a field name, not '$createdAt' (no leading $)"},
        {NS_HEAD "    timeField: meta..ts\n    maxAge: 1d\n", "5: timeField 'meta..ts' has an empty part between dots"},
        {NS_HEAD "    timeField: meta.\n    maxAge: 1d\n", "5: timeField 'meta.' has an empty part between dots"},
        {NS_HEAD "    timeField: ''\n    maxAge: 1d\n", "5: timeField must name a field, such as createdAt"},
        /* maxAge and the durations */
        {NS_HEAD "    timeField: t\n    maxAge: 30\n",
         "6: maxAge: invalid duration '30': write a number with a unit (ms, s, m, h, d), such as 500ms or 30d"},
        {NS_HEAD "    timeField: t\n    maxAge: 30 days\n",
         "6: maxAge: invalid duration '30 days': write a number with a unit (ms, s, m, h, d), such as 500ms or 30d"},
        {NS_HEAD "    timeField: t\n    maxAge: -5s\n",
         "6: maxAge: invalid duration '-5s': write a number with a unit (ms, s, m, h, d), such as 500ms or 30d"},
        {NS_HEAD "    timeField: t\n    maxAge: 0s\n", "6: maxAge must be at least 1ms, not '0s'"},
        {NS_HEAD "    timeField: t\n    maxAge: 99999999999d\n", "6: maxAge: '99999999999d' is too long a duration"},
        {NS_HEAD "    timeField: t\n    maxAge: [1d]\n",
         "6: maxAge must be a duration such as 30d or 500ms, not a list"},
        {NS_HEAD "    timeField: t\n    maxAge: 1d\n    evictorPeriod: 0ms\n",
         "7: evictorPeriod must be at least 1ms, not '0ms'"},
        {NS_HEAD "    timeField: t\n    maxAge: 1d\n    indexSyncPeriod: 10ms\n",
         "7: indexSyncPeriod must be at least 100ms, not '10ms'"},
        {NS_HEAD "    timeField: t\n    maxAge: 1d\n    requireTimeFieldIndex: maybe\n",
         "7: requireTimeFieldIndex must be true or false, not 'maybe'"},
        {NS_HEAD "    timeField: t\n    maxAge: 1d\n    safetySlack: 1d\n",
         "7: safetySlack (1d) must be shorter than maxAge (1d): the horizon would never be in the past"},
        {NS_HEAD "    timeField: t\n    maxAge: 10s\n    safetySlack: 20s\n",
         "7: safetySlack (20s) must be shorter than maxAge (10s): the horizon would never be in the past"},
        {NS_HEAD "    timeField: t\n    maxAge: 1d\n    coverage: full\n",
         "7: coverage must be warm (the warmer copies the window first) or complete (the fast tier already holds "
         "it), not 'full'"},
        /* the namespace name */
        {TIERS "namespaces:\n  - ns: orders\n    timeField: t\n    maxAge: 1d\n",
         "4: ns must be 'database.collection', not 'orders'"},
        {TIERS "namespaces:\n  - ns: .orders\n    timeField: t\n    maxAge: 1d\n",
         "4: ns must be 'database.collection', not '.orders'"},
        {TIERS "namespaces:\n  - ns: shop.\n    timeField: t\n    maxAge: 1d\n",
         "4: ns must be 'database.collection', not 'shop.'"},
        {TIERS "namespaces:\n  - ns: my shop.orders\n    timeField: t\n    maxAge: 1d\n",
         "4: ns: database name 'my shop' may not contain / \\ space \" or $"},
        {TIERS "namespaces:\n  - ns: shop.a$b\n    timeField: t\n    maxAge: 1d\n",
         "4: ns: collection name 'a$b' may not contain $"},
        {TIERS "namespaces:\n  - ns: shop.system.profile\n    timeField: t\n    maxAge: 1d\n",
         "4: ns: system collections ('shop.system.profile') cannot be tiered"},
        {TIERS "namespaces:\n  - ns: 12.5\n    timeField: t\n    maxAge: 1d\n",
         "4: ns must be a string, not a number ('12.5'); quote it if that is really the name"},
        {TIERS "namespaces:\n"
               "  - ns: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.c\n"
               "    timeField: t\n    maxAge: 1d\n",
         "4: ns: database name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' is longer than 63 "
         "bytes"},
        /* duplicates, missing keys, wrong shapes */
        {TIERS "namespaces:\n  - ns: shop.orders\n    timeField: t\n    maxAge: 1d\n"
               "  - ns: shop.orders\n    timeField: u\n    maxAge: 2d\n",
         "7: namespace shop.orders is configured twice (first at line 4)"},
        {NS_HEAD "    timeField: t\n",
         "4: missing required key 'maxAge' in this namespace entry (each needs ns, timeField and maxAge)"},
        {TIERS "namespaces:\n  - timeField: t\n    maxAge: 1d\n",
         "4: missing required key 'ns' in this namespace entry (each needs ns, timeField and maxAge)"},
        {TIERS "namespaces: shop.orders\n",
         "3: namespaces must be a list of entries (- ns: db.collection ...), not a value"},
        {TIERS "namespaces:\n  ns: shop.orders\n",
         "4: namespaces must be a list of entries (- ns: db.collection ...), not a mapping"},
        {TIERS "namespaces:\n  - shop.orders\n",
         "4: each entry of namespaces must be a mapping with ns, timeField and maxAge, not a value"},
    };
    RUN_BAD(cases);
}

static void test_bad_top_level_values(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {TIERS "maxConnections: 0\n", "3: maxConnections must be a whole number from 1 to 1000000, not '0'"},
        {TIERS "maxConnections: many\n", "3: maxConnections must be a whole number from 1 to 1000000, not 'many'"},
        {TIERS "maxConnections: 1.5\n", "3: maxConnections must be a whole number from 1 to 1000000, not '1.5'"},
        {TIERS "maxConnections: 99999999999999999999\n",
         "3: maxConnections must be a whole number from 1 to 1000000, not '99999999999999999999'"},
        {TIERS "faultInLimit: -1\n", "3: faultInLimit must be a whole number from 0 to 10000000, not '-1'"},
        {TIERS "readYourWritesWait: 2h\n", "3: readYourWritesWait must be at most 1h, not '2h'"},
        {TIERS "failoverWait: 61m\n", "3: failoverWait must be at most 1h, not '61m'"},
        {TIERS "readYourWritesWait: 5\n",
         "3: readYourWritesWait: invalid duration '5': write a number with a unit (ms, s, m, h, d), such as 500ms or "
         "30d"},
        {TIERS "feederEnabled: yes\n", "3: feederEnabled must be true or false, not 'yes'"},
        {TIERS "warmerEnabled: 1\n", "3: warmerEnabled must be true or false, not '1'"},
        {TIERS "warmerRateLimit: 2.5\n", "3: warmerRateLimit must be a whole number from 0 to 10000000, not '2.5'"},
        {TIERS "evictorEnabled: {a: 1}\n", "3: evictorEnabled must be true or false, not a mapping"},
        {TIERS "authorization: true\n",
         "3: authorization must be enabled or disabled (as mongod's security.authorization), not 'true'"},
        {TIERS "authorization: Enabled\n",
         "3: authorization must be enabled or disabled (as mongod's security.authorization), not 'Enabled'"},
        /* missing tiers, and documents that are not a mapping */
        {FAST, "1: missing required key 'archive' (archive and fast are required)"},
        {"# only a comment\n" ARCHIVE, "2: missing required key 'fast' (archive and fast are required)"},
        {"", "1: the configuration is empty: archive and fast are required"},
        {"# nothing\n", "1: the configuration is empty: archive and fast are required"},
        {"- archive\n- fast\n",
         "1: the configuration must be a mapping of keys (listen, archive, fast, namespaces), not a list"},
        {"archive\n",
         "1: the configuration must be a mapping of keys (listen, archive, fast, namespaces), not a value"},
        {TIERS "---\n" TIERS, "4: a second YAML document: the configuration is one document"},
        {TIERS "logFormat: JSON\n", "3: logFormat must be text or json, not 'JSON'"},
        {TIERS "metricsListen: 9216\n", "3: metricsListen must be host:port, such as 127.0.0.1:27017, not '9216'"},
    };
    RUN_BAD(cases);
}

static void test_tls_and_connection_limits(void **state)
{
    (void)state;
    config_t *config = load(TIERS);
    assert_int_equal(config->tls_mode, TLS_MODE_DISABLED);
    assert_null(config->tls_certificate_key_file);
    assert_null(config->tls_ca_file);
    assert_false(config->tls_allow_connections_without_certificates);
    assert_true(config->idle_timeout_ms == 0 && config->receive_timeout_ms == 30000 &&
                config->send_timeout_ms == 30000);
    config_destroy(config);

    char text[1024];
    snprintf(text, sizeof text,
             TIERS "tlsMode: requireTLS\ntlsCertificateKeyFile: %s\ntlsCAFile: '%s'\n"
                   "tlsAllowConnectionsWithoutCertificates: true\n"
                   "idleTimeout: 10m\nreceiveTimeout: 2s\nsendTimeout: 500ms\n",
             certificate_path, ca_path);
    config = load(text);
    assert_int_equal(config->tls_mode, TLS_MODE_REQUIRE);
    assert_string_equal(config->tls_certificate_key_file, certificate_path);
    assert_string_equal(config->tls_ca_file, ca_path);
    assert_true(config->tls_allow_connections_without_certificates);
    assert_true(config->idle_timeout_ms == 600000 && config->receive_timeout_ms == 2000 &&
                config->send_timeout_ms == 500);
    config_destroy(config);

    snprintf(text, sizeof text, TIERS "tlsMode: preferSSL\ntlsCertificateKeyFile: %s\n", certificate_path);
    config = load(text);
    assert_int_equal(config->tls_mode, TLS_MODE_PREFER);
    config_destroy(config);
}

/* Refused with a message that starts with "PATH:" expected. */
static void expect_refused(const char *text, const char *expected)
{
    char path[128];
    char message[600];
    bson_error_t error;
    write_file(text, path, sizeof path);
    config_t *config = config_load_file(path, &error);
    if (config != NULL) {
        config_destroy(config);
        fail_msg("accepted:\n%s", text);
    }
    snprintf(message, sizeof message, "%s:%s", path, expected);
    if (strncmp(error.message, message, strlen(message)) != 0 || error.code != 2) {
        fail_msg("%s\ngot      %s\nexpected %s...", text, error.message, message);
    }
}

static void test_bad_tls_and_connection_limits(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {TIERS "tlsMode: sometimes\n",
         "3: tlsMode must be disabled, allowTLS, preferTLS or requireTLS, not 'sometimes'"},
        {TIERS "tlsMode: requireTLS\n",
         "3: tlsMode requireTLS needs tlsCertificateKeyFile (the proxy's certificate and key)"},
        {TIERS "tlsMode: true\n", "3: tlsMode must be disabled, allowTLS, preferTLS or requireTLS, not 'true'"},
        {TIERS "tlsCAFile: 5\n",
         "3: tlsCAFile must be a string, not an integer ('5'); quote it if that is really the name"},
        {TIERS "tlsCAFile: ''\n", "3: tlsCAFile must name a file"},
        {TIERS "tlsCAFile: [a]\n", "3: tlsCAFile must be a file name, not a list"},
        {TIERS "tlsMode: requireTLS\ntlsCertificateKeyFile: /nonexistent/proxy.pem\n",
         "4: tlsCertificateKeyFile: cannot read '/nonexistent/proxy.pem': No such file or directory"},
        {TIERS "tlsAllowConnectionsWithoutCertificates: sure\n",
         "3: tlsAllowConnectionsWithoutCertificates must be true or false, not 'sure'"},
        {TIERS "tlsmode: requireTLS\n", "3: unknown key 'tlsmode' at the top level; did you mean 'tlsMode'?"},
        {TIERS "receiveTimeout: 0s\n", "3: receiveTimeout must be at least 1ms, not '0s'"},
        {TIERS "sendTimeout: 2d\n", "3: sendTimeout must be at most 1d, not '2d'"},
        {TIERS "idleTimeout: 10\n",
         "3: idleTimeout: invalid duration '10': write a number with a unit (ms, s, m, h, d), such as 500ms or 30d"},
    };
    RUN_BAD(cases);

    char text[1024], expected[512];
    /* Files given while TLS is off are a mistake, not something to ignore. */
    snprintf(text, sizeof text, TIERS "tlsCertificateKeyFile: %s\n", certificate_path);
    expect_refused(text, "3: tlsCertificateKeyFile is set but tlsMode is disabled: set tlsMode to requireTLS, "
                         "preferTLS or allowTLS");
    snprintf(text, sizeof text, TIERS "tlsMode: disabled\ntlsCAFile: %s\n", ca_path);
    expect_refused(text, "4: tlsCAFile is set but tlsMode is disabled");
    /* Readable files that do not hold what they should: refused at their line. */
    snprintf(text, sizeof text, TIERS "tlsMode: allowTLS\ntlsCertificateKeyFile: %s\n", ca_path);
    snprintf(expected, sizeof expected, "4: cannot read the private key in tlsCertificateKeyFile %s: ", ca_path);
    expect_refused(text, expected);
    char yaml_path[128];
    write_file(TIERS, yaml_path, sizeof yaml_path);
    snprintf(text, sizeof text, TIERS "tlsMode: allowTLS\ntlsCertificateKeyFile: %s\ntlsCAFile: %s\n",
             certificate_path, yaml_path);
    snprintf(expected, sizeof expected, "5: cannot read tlsCAFile %s: ", yaml_path);
    expect_refused(text, expected);
}

static void test_syntax_errors_and_files(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {ARCHIVE "fast: [unclosed\n", "3: YAML syntax error: did not find expected ',' or ']' while parsing a flow "
                                      "sequence"},
        {ARCHIVE "\tfast: x\n", "2: YAML syntax error: found a tab character that violates indentation while "
                                "scanning a plain scalar"},
        {"archive: 'unterminated\n", "2: YAML syntax error: found unexpected end of stream while scanning a quoted "
                                     "scalar"},
        {ARCHIVE "fast: *nowhere\n", "2: YAML syntax error: found undefined alias"},
    };
    RUN_SYNTAX(cases);

    bson_error_t error;
    char path[160];
    snprintf(path, sizeof path, "%s/does-not-exist.yaml", directory);
    assert_null(config_load_file(path, &error));
    char expected[256];
    snprintf(expected, sizeof expected, "%s: cannot read the configuration: No such file or directory", path);
    assert_string_equal(error.message, expected);
    assert_int_equal(error.code, 2);

    /* a directory is not a configuration */
    assert_null(config_load_file(directory, &error));
    assert_non_null(strstr(error.message, "cannot read the configuration"));

    /* from memory, with the name standing for the file */
    static const char text[] = TIERS "maxConnections: 0\n";
    assert_null(config_load_string(text, sizeof text - 1, "inline.yaml", &error));
    assert_string_equal(error.message,
                        "inline.yaml:3: maxConnections must be a whole number from 1 to 1000000, not '0'");
    config_t *config = config_load_string(TIERS, strlen(TIERS), "inline.yaml", &error);
    assert_non_null(config);
    config_destroy(config);
    /* a NUL inside a value is refused, not cut short */
    static const char with_nul[] = ARCHIVE FAST "namespaces:\n  - ns: \"a.b\\0c\"\n    timeField: t\n    maxAge: 1d\n";
    assert_null(config_load_string(with_nul, sizeof with_nul - 1, "nul.yaml", &error));
    assert_string_equal(error.message, "nul.yaml:4: ns must not contain a NUL character");
}

/* Passwords never reach a log: URIs are shown with "***" in their place. */
static void test_uri_redacted(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"mongodb://proxy:s3cret@127.0.0.1:27018/?authSource=admin", "mongodb://proxy:***@127.0.0.1:27018/?authSource=admin"},
        {"mongodb://proxy:p%40ss@a:1,b:2/db", "mongodb://proxy:***@a:1,b:2/db"},
        {"mongodb://proxy@127.0.0.1:27018/?authMechanism=SCRAM-SHA-1", "mongodb://proxy@127.0.0.1:27018/?authMechanism=SCRAM-SHA-1"},
        {"mongodb://127.0.0.1:27018/?replicaSet=rs0", "mongodb://127.0.0.1:27018/?replicaSet=rs0"},
        {"mongodb://127.0.0.1:27018/?x=a:b@c", "mongodb://127.0.0.1:27018/?x=a:b@c"},
        {"not a uri", "not a uri"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *redacted = config_uri_redacted(cases[i][0]);
        assert_string_equal(redacted, cases[i][1]);
        bson_free(redacted);
    }
    config_t *config = load("archive: mongodb://proxy:pw@127.0.0.1:27018/?authMechanism=SCRAM-SHA-1\n"
                            "fast: mongodb://proxy:pw@127.0.0.1:27019/?authMechanism=SCRAM-SHA-256\n");
    assert_false(config->authorization_enabled);
    config_destroy(config);
}

int main(void)
{
    /* mongoc also logs a bad URI on stderr; the tests read the error instead */
    mongoc_log_set_handler(NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_brief_example),
        cmocka_unit_test(test_every_option),
        cmocka_unit_test(test_defaults_follow_max_age),
        cmocka_unit_test(test_other_good_shapes),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_bad_uris_and_addresses),
        cmocka_unit_test(test_bad_namespaces),
        cmocka_unit_test(test_bad_top_level_values),
        cmocka_unit_test(test_tls_and_connection_limits),
        cmocka_unit_test(test_bad_tls_and_connection_limits),
        cmocka_unit_test(test_syntax_errors_and_files),
        cmocka_unit_test(test_uri_redacted),
    };
    return cmocka_run_group_tests(tests, make_directory, remove_directory);
}
