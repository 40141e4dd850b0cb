/* Unit tests for src/client/read_preference.c: $readPreference parsing with mongos's
 * errors, topologies read from hello replies, and member selection on made-up
 * replica sets (modes, tag sets, maxStalenessSeconds, latency, no primary). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <string.h>

#include "client/read_preference.h"

typedef struct parse_case {
    const char *command;
    int32_t code; /* 0: parses */
    const char *message;
} parse_case_t;

static void test_parse_errors_are_mongos_errors(void **state)
{
    (void)state;
    static const parse_case_t cases[] = {
        {"{'find': 'c'}", 0, NULL},
        {"{'find': 'c', '$readPreference': {'mode': 'secondary'}}", 0, NULL},
        {"{'find': 'c', '$readPreference': {'mode': 'primary', 'tags': [{}]}}", 0, NULL},
        {"{'find': 'c', '$readPreference': {'mode': 'primary', 'tags': []}}", 0, NULL},
        {"{'find': 'c', '$readPreference': {'mode': 'primary', 'hedge': {'enabled': false}}}", 0, NULL},
        {"{'find': 'c', '$readPreference': {'mode': 'nearest', 'maxStalenessSeconds': 90.0}}", 0, NULL},
        {"{'find': 'c', '$readPreference': 'secondary'}", 14,
         "$readPreference has incorrect type: expected object but got string"},
        {"{'find': 'c', '$readPreference': {}}", 4, "Missing expected field \"mode\""},
        {"{'find': 'c', '$readPreference': {'mode': 1}}", 14,
         "\"mode\" had the wrong type. Expected string, found int"},
        {"{'find': 'c', '$readPreference': {'mode': 'bogus'}}", 2,
         "Could not parse $readPreference mode 'bogus'. Only the modes 'primary', 'primaryPreferred', 'secondary', "
         "'secondaryPreferred', and 'nearest' are supported. :: caused by :: Enumeration value 'bogus' for field "
         "'mode' is not a valid value."},
        {"{'find': 'c', '$readPreference': {'mode': 'primary', 'tags': [{'dc': 'ny'}]}}", 2,
         "Only empty tags are allowed with primary read preference"},
        {"{'find': 'c', '$readPreference': {'mode': 'secondary', 'tags': {'dc': 'ny'}}}", 14,
         "\"tags\" had the wrong type. Expected array, found object"},
        {"{'find': 'c', '$readPreference': {'mode': 'secondary', 'maxStalenessSeconds': 30}}", 160,
         "maxStalenessSeconds value can not be less than 90"},
        {"{'find': 'c', '$readPreference': {'mode': 'secondary', 'maxStalenessSeconds': -1}}", 2,
         "maxStalenessSeconds must be a non-negative integer"},
        {"{'find': 'c', '$readPreference': {'mode': 'secondary', 'maxStalenessSeconds': 'x'}}", 14,
         "Expected field \"maxStalenessSeconds\" to have numeric type, but found string"},
        {"{'find': 'c', '$readPreference': {'mode': 'secondary', 'maxStalenessSeconds': 100.5}}", 2,
         "Expected field \"maxStalenessSeconds\" to have a value exactly representable as a 64-bit integer, but "
         "found 100.5"},
        {"{'find': 'c', '$readPreference': {'mode': 'primary', 'maxStalenessSeconds': 120}}", 2,
         "maxStalenessSeconds can not be set for the primary mode"},
        {"{'find': 'c', '$readPreference': {'mode': 'primary', 'hedge': {}}}", 72,
         "cannot enable hedging for $readPreference mode \"primaryOnly\""},
        {"{'find': 'c', '$readPreference': {'mode': 'nearest', 'hedge': 1}}", 14,
         "hedge field must be of type object if provided; found hedge: 1"},
        {"{'find': 'c', '$readPreference': {'mode': 'nearest', 'hedge': {'delay': true}}}", 40415,
         "BSON field 'hedge.delay' is an unknown field."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *command = support_json_single_quoted(cases[i].command);
        read_preference_t preference;
        bson_error_t error;
        bool parsed = read_preference_parse(command, &preference, &error);
        if (parsed != (cases[i].code == 0)) {
            fail_msg("%s: parsed %d (%s)", cases[i].command, parsed, parsed ? "" : error.message);
        }
        if (!parsed) {
            assert_int_equal(error.code, cases[i].code);
            assert_string_equal(error.message, cases[i].message);
        }
        read_preference_cleanup(&preference);
        bson_destroy(command);
    }
}

static void expect_description(const char *command_json, const char *expected)
{
    bson_t *command = support_json_single_quoted(command_json);
    read_preference_t preference;
    bson_error_t error;
    assert_true(read_preference_parse(command, &preference, &error));
    char *described = read_preference_describe(&preference);
    assert_string_equal(described, expected);
    bson_free(described);
    read_preference_cleanup(&preference);
    bson_destroy(command);
}

static void test_description_is_mongos_rendering(void **state)
{
    (void)state;
    expect_description("{'find': 'c'}", "{ mode: \"primary\" }");
    expect_description("{'find': 'c', '$readPreference': {'mode': 'secondary', 'tags': [{}]}}",
                       "{ mode: \"secondary\" }");
    expect_description("{'find': 'c', '$readPreference': {'mode': 'nearest'}}",
                       "{ mode: \"nearest\", hedge: { enabled: true } }");
    expect_description("{'find': 'c', '$readPreference': {'mode': 'secondary', 'tags': [{'dc': 'ny', 'rack': 'a'}, "
                       "{'dc': 'sf'}], 'maxStalenessSeconds': 120}}",
                       "{ mode: \"secondary\", tags: [ { dc: \"ny\", rack: \"a\" }, { dc: \"sf\" } ], "
                       "maxStalenessSeconds: 120 }");
}

/* --- selection on a made-up replica set ---------------------------------------------
 *   P  primary    {dc: ny}           lastWrite T          round trip 8 ms
 *   S1 secondary  {dc: ny, rack: a}  lastWrite T - 1 s    round trip 5 ms  (staleness 11 s)
 *   S2 secondary  {dc: sf}           lastWrite T - 200 s  round trip 2 ms  (staleness 210 s)
 *   A  arbiter (other)                                                           */
#define NOW_MS INT64_C(1800000000000)

static void build_set(read_preference_topology_t *topology, bool with_primary)
{
    memset(topology, 0, sizeof *topology);
    snprintf(topology->set_name, sizeof topology->set_name, "rs0");
    bson_t *tags;
    read_preference_member_t *member;
    if (with_primary) {
        tags = support_json_single_quoted("{'dc': 'ny'}");
        member = read_preference_topology_add(topology, "p:1", READ_PREFERENCE_MEMBER_PRIMARY, tags);
        member->last_write_ms = NOW_MS;
        member->last_update_ms = NOW_MS;
        member->round_trip_ms = 8;
        bson_destroy(tags);
    }
    tags = support_json_single_quoted("{'dc': 'ny', 'rack': 'a'}");
    member = read_preference_topology_add(topology, "s1:1", READ_PREFERENCE_MEMBER_SECONDARY, tags);
    member->last_write_ms = NOW_MS - 1000;
    member->last_update_ms = NOW_MS;
    member->round_trip_ms = 5;
    bson_destroy(tags);
    tags = support_json_single_quoted("{'dc': 'sf'}");
    member = read_preference_topology_add(topology, "s2:1", READ_PREFERENCE_MEMBER_SECONDARY, tags);
    member->last_write_ms = NOW_MS - 200000;
    member->last_update_ms = NOW_MS;
    member->round_trip_ms = 2;
    bson_destroy(tags);
    read_preference_topology_add(topology, "a:1", READ_PREFERENCE_MEMBER_OTHER, NULL);
}

typedef struct select_case {
    const char *preference; /* the $readPreference document */
    const char *expected;   /* the member's address, or the 133 message */
} select_case_t;

static void run_selection(const read_preference_topology_t *topology, const select_case_t *cases, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        char json[512];
        snprintf(json, sizeof json, "{'find': 'c', '$readPreference': %s}", cases[i].preference);
        bson_t *command = support_json_single_quoted(json);
        read_preference_t preference;
        bson_error_t error;
        size_t index;
        assert_true(read_preference_parse(command, &preference, &error));
        if (read_preference_select(topology, &preference, 0, &index, &error)) {
            if (strcmp(topology->members[index].address, cases[i].expected) != 0) {
                fail_msg("%s: chose %s, expected %s", cases[i].preference, topology->members[index].address,
                         cases[i].expected);
            }
        } else {
            assert_int_equal(error.code, 133);
            if (strcmp(error.message, cases[i].expected) != 0) {
                fail_msg("%s: failed with '%s', expected '%s'", cases[i].preference, error.message, cases[i].expected);
            }
        }
        read_preference_cleanup(&preference);
        bson_destroy(command);
    }
}

static void test_selection_with_a_primary(void **state)
{
    (void)state;
    static const select_case_t cases[] = {
        {"{'mode': 'primary'}", "p:1"},
        {"{'mode': 'primaryPreferred', 'tags': [{'dc': 'sf'}]}", "p:1"}, /* tags never exclude the primary */
        {"{'mode': 'secondary'}", "s2:1"},                              /* the lowest round trip */
        {"{'mode': 'secondary', 'tags': [{'dc': 'ny'}]}", "s1:1"},
        {"{'mode': 'secondary', 'tags': [{'dc': 'tokyo'}, {'dc': 'sf'}]}", "s2:1"}, /* the first set that matches */
        {"{'mode': 'secondary', 'tags': [{'dc': 'ny', 'rack': 'b'}, {}]}", "s2:1"}, /* {} matches any */
        {"{'mode': 'secondary', 'maxStalenessSeconds': 120}", "s1:1"},              /* s2 is 210 s stale */
        {"{'mode': 'secondary', 'maxStalenessSeconds': 300}", "s2:1"},
        {"{'mode': 'secondary', 'maxStalenessSeconds': 120, 'tags': [{'dc': 'sf'}]}",
         "Could not find host matching read preference { mode: \"secondary\", tags: [ { dc: \"sf\" } ], "
         "maxStalenessSeconds: 120 } for set rs0"},
        {"{'mode': 'secondaryPreferred', 'tags': [{'dc': 'tokyo'}]}", "p:1"},
        {"{'mode': 'secondaryPreferred', 'tags': [{'rack': 'a'}]}", "s1:1"},
        {"{'mode': 'nearest'}", "s2:1"},
        {"{'mode': 'nearest', 'tags': [{'dc': 'ny'}]}", "s1:1"},
        {"{'mode': 'nearest', 'tags': [{'dc': 'tokyo'}]}",
         "Could not find host matching read preference { mode: \"nearest\", tags: [ { dc: \"tokyo\" } ], hedge: { "
         "enabled: true } } for set rs0"},
    };
    read_preference_topology_t topology;
    build_set(&topology, true);
    run_selection(&topology, cases, sizeof cases / sizeof cases[0]);
    read_preference_topology_cleanup(&topology);
}

static void test_selection_without_a_primary(void **state)
{
    (void)state;
    static const select_case_t cases[] = {
        {"{'mode': 'primary'}", "Could not find host matching read preference { mode: \"primary\" } for set rs0"},
        {"{'mode': 'primaryPreferred'}", "s2:1"},
        {"{'mode': 'primaryPreferred', 'tags': [{'dc': 'ny'}]}", "s1:1"},
        {"{'mode': 'secondary', 'maxStalenessSeconds': 120}", "s1:1"}, /* measured from the newest secondary */
        {"{'mode': 'secondaryPreferred', 'tags': [{'dc': 'tokyo'}]}",
         "Could not find host matching read preference { mode: \"secondaryPreferred\", tags: [ { dc: \"tokyo\" } ] } "
         "for set rs0"},
    };
    read_preference_topology_t topology;
    build_set(&topology, false);
    run_selection(&topology, cases, sizeof cases / sizeof cases[0]);
    read_preference_topology_cleanup(&topology);
}

static void test_topologies_from_hello(void **state)
{
    (void)state;
    read_preference_topology_t topology;

    /* A one-member set, as a tier's store: every mode but secondary reads the primary. */
    bson_t *hello = support_json_single_quoted(
        "{'isWritablePrimary': true, 'setName': 'rs1', 'hosts': ['127.0.0.1:5'], "
        "'me': '127.0.0.1:5', 'primary': '127.0.0.1:5', 'ok': 1}");
    read_preference_topology_from_hello(hello, NOW_MS, &topology);
    assert_int_equal(topology.member_count, 1);
    assert_false(topology.standalone);
    static const select_case_t single[] = {
        {"{'mode': 'primaryPreferred'}", "127.0.0.1:5"},
        {"{'mode': 'secondaryPreferred'}", "127.0.0.1:5"},
        {"{'mode': 'nearest'}", "127.0.0.1:5"},
        {"{'mode': 'secondaryPreferred', 'maxStalenessSeconds': 90}", "127.0.0.1:5"},
        {"{'mode': 'secondary'}", "Could not find host matching read preference { mode: \"secondary\" } for set rs1"},
    };
    run_selection(&topology, single, sizeof single / sizeof single[0]);
    read_preference_topology_cleanup(&topology);
    bson_destroy(hello);

    /* Three members: the others are listed but unheard of, so not chosen. */
    hello = support_json_single_quoted(
        "{'isWritablePrimary': true, 'setName': 'rs0', 'hosts': ['a:1', 'b:1'], 'passives': ['c:1'], "
        "'arbiters': ['d:1'], 'me': 'a:1', 'tags': {'dc': 'ny'}, "
        "'lastWrite': {'lastWriteDate': {'$date': 1700000000000}, "
        "'opTime': {'ts': {'$timestamp': {'t': 1700000000, 'i': 7}}, 't': 1}}, 'ok': 1}");
    read_preference_topology_from_hello(hello, NOW_MS, &topology);
    assert_int_equal(topology.member_count, 4);
    assert_int_equal(topology.members[0].type, READ_PREFERENCE_MEMBER_PRIMARY);
    assert_true(topology.members[0].last_write_ms == INT64_C(1700000000000));
    assert_true(topology.members[0].last_write_time == ((uint64_t)1700000000 << 32 | 7)); /* what it applied */
    assert_true(topology.members[1].last_write_time == 0);                                 /* unheard of */
    assert_string_equal(topology.members[2].address, "c:1");
    assert_int_equal(topology.members[3].type, READ_PREFERENCE_MEMBER_OTHER);
    static const select_case_t three[] = {
        {"{'mode': 'nearest', 'tags': [{'dc': 'ny'}]}", "a:1"},
        {"{'mode': 'secondary'}", "Could not find host matching read preference { mode: \"secondary\" } for set rs0"},
    };
    run_selection(&topology, three, sizeof three / sizeof three[0]);
    read_preference_topology_cleanup(&topology);
    bson_destroy(hello);

    /* A standalone ignores read preferences, as a driver's Single topology does. */
    hello = support_json_single_quoted("{'isWritablePrimary': true, 'maxWireVersion': 17, 'ok': 1}");
    read_preference_topology_from_hello(hello, NOW_MS, &topology);
    assert_true(topology.standalone);
    static const select_case_t standalone[] = {{"{'mode': 'secondary', 'tags': [{'dc': 'x'}]}", ""}};
    run_selection(&topology, standalone, 1);
    read_preference_topology_cleanup(&topology);
    read_preference_topology_cleanup(NULL);
    bson_destroy(hello);
}

/* The latency window: members within 15 ms of the nearest, in window order (round
 * trip, the primary first among equals, then as listed); random picks among them. */
static void test_latency_window_and_random_choice(void **state)
{
    (void)state;
    read_preference_topology_t topology;
    memset(&topology, 0, sizeof topology);
    snprintf(topology.set_name, sizeof topology.set_name, "rs0");
    static const struct {
        const char *address;
        read_preference_member_type_t type;
        int64_t round_trip_ms;
    } members[] = {
        {"p:1", READ_PREFERENCE_MEMBER_PRIMARY, 300},   /* outside every window below */
        {"s1:1", READ_PREFERENCE_MEMBER_SECONDARY, 12},
        {"s2:1", READ_PREFERENCE_MEMBER_SECONDARY, 2},
        {"s3:1", READ_PREFERENCE_MEMBER_SECONDARY, 18}, /* 16 ms behind s2: outside */
        {"s4:1", READ_PREFERENCE_MEMBER_SECONDARY, -1}, /* unknown: counts as 0 */
    };
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        read_preference_member_t *member =
            read_preference_topology_add(&topology, members[i].address, members[i].type, NULL);
        member->round_trip_ms = members[i].round_trip_ms;
    }
    /* The window from s4 (0 ms): s4, s2, s1 (12 <= 15); s3 (18) and the primary stay out. */
    static const char *const window[] = {"s4:1", "s2:1", "s1:1"};
    const char *const modes[] = {"{'mode': 'nearest'}", "{'mode': 'secondary'}", "{'mode': 'secondaryPreferred'}"};
    for (size_t mode = 0; mode < sizeof modes / sizeof modes[0]; mode++) {
        char json[128];
        snprintf(json, sizeof json, "{'find': 'c', '$readPreference': %s}", modes[mode]);
        bson_t *command = support_json_single_quoted(json);
        read_preference_t preference;
        bson_error_t error;
        assert_true(read_preference_parse(command, &preference, &error));
        for (uint32_t random = 0; random < 7; random++) {
            size_t index;
            assert_true(read_preference_select(&topology, &preference, random, &index, &error));
            assert_string_equal(topology.members[index].address, window[random % 3]);
        }
        read_preference_cleanup(&preference);
        bson_destroy(command);
    }
    /* Equal round trips: the primary first, then as listed. */
    topology.members[0].round_trip_ms = 2;
    topology.members[4].round_trip_ms = 2;
    bson_t *command = support_json_single_quoted("{'find': 'c', '$readPreference': {'mode': 'nearest'}}");
    read_preference_t preference;
    bson_error_t error;
    size_t index;
    assert_true(read_preference_parse(command, &preference, &error));
    static const char *const tied[] = {"p:1", "s2:1", "s4:1", "s1:1"};
    for (uint32_t random = 0; random < 4; random++) {
        assert_true(read_preference_select(&topology, &preference, random, &index, &error));
        assert_string_equal(topology.members[index].address, tied[random]);
    }
    read_preference_cleanup(&preference);
    bson_destroy(command);
    read_preference_topology_cleanup(&topology);
}

static void test_hello_hosts_are_the_other_data_bearing_members(void **state)
{
    (void)state;
    char addresses[4][READ_PREFERENCE_ADDRESS_SIZE];
    bson_t *hello = support_json_single_quoted("{'isWritablePrimary': true, 'setName': 'rs0', 'me': 'a:1', "
                                               "'hosts': ['a:1', 'b:1', 'b:1', 7, 'c:1'], 'passives': ['d:1', 'c:1'], "
                                               "'arbiters': ['e:1'], 'ok': 1}");
    size_t count = read_preference_hello_hosts(hello, addresses, 4);
    assert_int_equal(count, 3); /* not me, not twice, not a number, not the arbiter */
    assert_string_equal(addresses[0], "b:1");
    assert_string_equal(addresses[1], "c:1");
    assert_string_equal(addresses[2], "d:1");
    assert_int_equal(read_preference_hello_hosts(hello, addresses, 2), 2); /* at most capacity */
    bson_destroy(hello);

    /* A secondary's hello lists the primary too; a standalone's lists nobody. */
    hello = support_json_single_quoted(
        "{'secondary': true, 'setName': 'rs0', 'me': 'b:1', 'hosts': ['a:1', 'b:1'], 'ok': 1}");
    assert_int_equal(read_preference_hello_hosts(hello, addresses, 4), 1);
    assert_string_equal(addresses[0], "a:1");
    bson_destroy(hello);
    hello = support_json_single_quoted("{'isWritablePrimary': true, 'ok': 1}");
    assert_int_equal(read_preference_hello_hosts(hello, addresses, 4), 0);
    bson_destroy(hello);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors_are_mongos_errors),
        cmocka_unit_test(test_description_is_mongos_rendering),
        cmocka_unit_test(test_selection_with_a_primary),
        cmocka_unit_test(test_selection_without_a_primary),
        cmocka_unit_test(test_topologies_from_hello),
        cmocka_unit_test(test_latency_window_and_random_choice),
        cmocka_unit_test(test_hello_hosts_are_the_other_data_bearing_members),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
