/* Unit tests for filter_implies(): the planner's subset rule for partial and
 * sparse indexes. Expectations follow MongoDB 6.0's documentation of partial
 * indexes ("Query Coverage": a query can use the index when its predicate is a
 * subset of the filter expression; {rating: {$gte: 8}} uses an index filtered on
 * {rating: {$gt: 5}}, {rating: {$lt: 8}} does not) and mongod's
 * jstests/core/index_partial_read_ops.js (type bracketing: {a: {$lt: 1.6}} is
 * not inside {a: {$lte: 1.5}}). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

#include "query/filter_implies.h"

typedef struct implies_case {
    const char *query;
    const char *condition;
    bool expected;
} implies_case_t;

static void run_cases(const implies_case_t *cases, size_t count)
{
    int failures = 0;
    for (size_t i = 0; i < count; i++) {
        bson_t *query = support_json(cases[i].query);
        bson_t *condition = support_json(cases[i].condition);
        bool got = filter_implies(query, condition);
        if (got != cases[i].expected) {
            print_error("%s implies %s: expected %d, got %d\n", cases[i].query, cases[i].condition,
                        cases[i].expected, got);
            failures++;
        }
        bson_destroy(query);
        bson_destroy(condition);
    }
    assert_int_equal(failures, 0);
}

static void test_equality_and_exists(void **state)
{
    (void)state;
    static const implies_case_t cases[] = {
        {"{'status': 'A'}", "{'status': 'A'}", true},
        {"{'status': {'%eq': 'A'}, 'x': 1}", "{'status': 'A'}", true},
        {"{'status': 'B'}", "{'status': 'A'}", false},
        {"{'x': 1}", "{'status': 'A'}", false},
        {"{}", "{'status': 'A'}", false},
        {"{'status': {'%in': ['A', 'A']}}", "{'status': 'A'}", true},
        {"{'status': {'%in': ['A', 'B']}}", "{'status': 'A'}", false},
        {"{'n': 5}", "{'n': 5.0}", true},
        /* $exists: true is implied by a non-null equality, a range, $in without null, $type. */
        {"{'a': 5}", "{'a': {'%exists': true}}", true},
        {"{'a': null}", "{'a': {'%exists': true}}", false},
        {"{'a': {'%gt': 5}}", "{'a': {'%exists': true}}", true},
        {"{'a': {'%in': [1, null]}}", "{'a': {'%exists': true}}", false},
        {"{'a': {'%in': [1, 2]}}", "{'a': {'%exists': true}}", true},
        {"{'a': {'%exists': true}}", "{'a': {'%exists': true}}", true},
        {"{'a': {'%exists': false}}", "{'a': {'%exists': true}}", false},
        {"{'a': {'%ne': 5}}", "{'a': {'%exists': true}}", false},
        {"{'a': {'%type': 'string'}}", "{'a': {'%exists': true}}", true},
        {"{'b': 5}", "{'a': {'%exists': true}}", false},
        /* A sparse compound index's condition: any of its fields. */
        {"{'b': 5}", "{'%or': [{'a': {'%exists': true}}, {'b': {'%exists': true}}]}", true},
        {"{'c': 5}", "{'%or': [{'a': {'%exists': true}}, {'b': {'%exists': true}}]}", false},
        {"{'a': null}", "{'a': null}", true},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_ranges(void **state)
{
    (void)state;
    static const implies_case_t cases[] = {
        /* The documentation's example: filter {rating: {$gt: 5}}. */
        {"{'rating': {'%gte': 8}}", "{'rating': {'%gt': 5}}", true},
        {"{'rating': {'%lt': 8}}", "{'rating': {'%gt': 5}}", false},
        {"{'rating': {'%gt': 5}}", "{'rating': {'%gt': 5}}", true},
        {"{'rating': {'%gte': 5}}", "{'rating': {'%gt': 5}}", false},
        {"{'rating': {'%gt': 5}}", "{'rating': {'%gte': 5}}", true},
        {"{'rating': 6}", "{'rating': {'%gt': 5}}", true},
        {"{'rating': 5}", "{'rating': {'%gt': 5}}", false},
        {"{'rating': {'%in': [6, 7]}}", "{'rating': {'%gt': 5}}", true},
        {"{'rating': {'%in': [5, 7]}}", "{'rating': {'%gt': 5}}", false},
        {"{'rating': 'x'}", "{'rating': {'%gt': 5}}", false},
        /* index_partial_read_ops.js: filter {a: {$lte: 1.5}}. */
        {"{'x': 6, 'a': 1}", "{'a': {'%lte': 1.5}}", true},
        {"{'x': 6, 'a': {'%lte': 1}}", "{'a': {'%lte': 1.5}}", true},
        {"{'x': 6, 'a': {'%lt': 1.6}}", "{'a': {'%lte': 1.5}}", false},
        {"{'x': 6}", "{'a': {'%lte': 1.5}}", false},
        /* Both ends of a range. */
        {"{'a': {'%gt': 2, '%lt': 4}}", "{'a': {'%gte': 1, '%lte': 5}}", true},
        {"{'a': {'%gt': 2}}", "{'a': {'%gte': 1, '%lte': 5}}", false},
        {"{'%and': [{'a': {'%gt': 2}}, {'a': {'%lt': 4}}]}", "{'a': {'%gte': 1, '%lte': 5}}", true},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_logical_and_type(void **state)
{
    (void)state;
    static const implies_case_t cases[] = {
        {"{'a': 1, 'b': 2}", "{'%and': [{'a': 1}, {'b': 2}]}", true},
        {"{'a': 1}", "{'%and': [{'a': 1}, {'b': 2}]}", false},
        {"{'a': 1}", "{'%or': [{'a': 1}, {'b': 2}]}", true},
        {"{'c': 1}", "{'%or': [{'a': 1}, {'b': 2}]}", false},
        {"{'%or': [{'a': 1}, {'b': 2}]}", "{'%or': [{'a': 1}, {'b': 2}]}", true},
        {"{'%or': [{'a': 1}, {'c': 2}]}", "{'%or': [{'a': 1}, {'b': 2}]}", false},
        {"{'%or': [{'a': 1, 'z': 1}, {'a': 1, 'y': 2}]}", "{'a': 1}", true},
        {"{'%or': [{'a': 1}, {'y': 2}]}", "{'a': 1}", false},
        {"{'a': {'%type': 'string'}}", "{'a': {'%type': 'string'}}", true},
        {"{'a': 'x'}", "{'a': {'%type': 'string'}}", true},
        {"{'a': 5}", "{'a': {'%type': 'string'}}", false},
        {"{'a': 5}", "{'a': {'%type': 'number'}}", true},
        {"{'a': {'%type': ['string', 'int']}}", "{'a': {'%type': 'string'}}", false},
        {"{'a': 'x'}", "{'a': {'%in': ['x', 'y']}}", true},
        {"{'a': {'%in': ['y']}}", "{'a': {'%in': ['x', 'y']}}", true},
        {"{'a': {'%in': ['z']}}", "{'a': {'%in': ['x', 'y']}}", false},
        {"{'a': {'%nin': ['z']}}", "{'a': {'%in': ['x', 'y']}}", false},
        {"{'a': 1}", "{}", true},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equality_and_exists),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_logical_and_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
