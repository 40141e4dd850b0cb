/* Tests for dispatch_is_point_read (src/store/dispatch_on_loop.c): which finds
 * the store may run on its loop thread. A wrong "yes" would let a scan or a
 * wait hold every connection, a wrong "no" only costs a worker's wake-up. */
#include "store/dispatch.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "support.h"

static bool is_point_read(const char *json, char *ns, size_t ns_size)
{
    bson_t *body = support_json(json);
    bool result = dispatch_is_point_read(body, ns, ns_size);
    bson_destroy(body);
    return result;
}

static void test_finds_by_id_are_point_reads(void **state)
{
    (void)state;
    static const char *const yes[] = {
        "{'find': 'usertable', 'filter': {'_id': 'user42'}, '%db': 'ycsb'}",
        "{'find': 'c', 'filter': {'_id': 7}, 'limit': 1, 'singleBatch': true, 'projection': {'a': 1}, "
        "'lsid': {'id': 1}, '%clusterTime': {'t': 1}, 'readConcern': {'level': 'majority'}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'$oid': '0123456789abcdef01234567'}}, 'batchSize': 1, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': 1.5}, 'sort': {'_id': 1}, 'comment': 'x', 'maxTimeMS': 5, '%db': 'd'}",
        /* The proxy's question before a write: which of its ids the fast tier holds. */
        "{'find': 'c', 'filter': {'_id': {'%in': [1, 'a', 2.5]}}, 'projection': {'_id': 1}, 'batchSize': 4, "
        "'singleBatch': true, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': [1, 2, 3, 4, 5, 6, 7, 8]}}, '%db': 'd'}",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        char ns[256];
        if (!is_point_read(yes[i], ns, sizeof ns)) {
            fail_msg("not taken for a point read: %s", yes[i]);
        }
    }
    char ns[256];
    assert_true(is_point_read("{'find': 'usertable', 'filter': {'_id': 'u'}, '%db': 'ycsb'}", ns, sizeof ns));
    assert_string_equal(ns, "ycsb.usertable");
}

static void test_what_may_scan_or_wait_is_not(void **state)
{
    (void)state;
    char ns[256];
    static const char *const no[] = {
        "{'find': 'c', '%db': 'd'}",                                               /* no filter: a scan */
        "{'find': 'c', 'filter': {}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'a': 1}, '%db': 'd'}",                           /* another field */
        "{'find': 'c', 'filter': {'_id': 1, 'a': 1}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%gt': 1}}, '%db': 'd'}",                /* a range */
        "{'find': 'c', 'filter': {'_id': {'%in': []}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': [1, 2, 3, 4, 5, 6, 7, 8, 9]}}, '%db': 'd'}", /* too many searches */
        "{'find': 'c', 'filter': {'_id': {'%in': [1, null]}}, '%db': 'd'}",        /* not each an exact search */
        "{'find': 'c', 'filter': {'_id': {'%in': [1, [2]]}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': [{'a': 1}]}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': [{'$regularExpression': {'pattern': 'a', 'options': ''}}]}}, "
        "'%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': 1}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': [1], '%nin': [2]}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%nin': [1]}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'%in': [1]}, 'a': 1}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': [1]}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': {'$regularExpression': {'pattern': 'a', 'options': ''}}}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': null}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': 1}, 'hint': {'a': 1}, '%db': 'd'}",       /* may scan another index */
        "{'find': 'c', 'filter': {'_id': 1}, 'collation': {'locale': 'fr'}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': 1}, 'min': {'_id': 0}, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': 1}, 'tailable': true, '%db': 'd'}",
        "{'find': 'c', 'filter': {'_id': 1}, 'txnNumber': 1, 'autocommit': false, '%db': 'd'}", /* may wait */
        "{'find': 'c', 'filter': {'_id': 1}}",                                     /* no $db */
        "{'find': 1, 'filter': {'_id': 1}, '%db': 'd'}",
        "{'count': 'c', 'query': {'_id': 1}, '%db': 'd'}",
        "{'filter': {'_id': 1}, 'find': 'c', '%db': 'd'}",                          /* find is not the command */
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        if (is_point_read(no[i], ns, sizeof ns)) {
            fail_msg("taken for a point read: %s", no[i]);
        }
    }
    /* A repeated $db: the first is the one the command runs in. */
    assert_true(is_point_read("{'find': 'c', 'filter': {'_id': 1}, '%db': 'a', '%db': 'b'}", ns, sizeof ns));
    assert_string_equal(ns, "a.c");
    char small[8];
    assert_false(is_point_read("{'find': 'usertable', 'filter': {'_id': 1}, '%db': 'ycsb'}", small, sizeof small));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_by_id_are_point_reads),
        cmocka_unit_test(test_what_may_scan_or_wait_is_not),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
