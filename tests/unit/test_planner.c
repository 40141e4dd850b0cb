/* Unit tests for src/proxy/planner*.c: tables of (command, policy, coverage) ->
 * route and reason, the filter lower-bound analysis, point reads, writes and their
 * fault-ins, every command class, malformed commands; and a seeded property test
 * that checks each proved bound against the query matcher's own semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

#include "proxy/planner.h"
#include "proxy/planner_private.h"
#include "query/match.h"
#include "query/order.h"

/* ---- helpers ------------------------------------------------------------- */

/* Dates around the horizon H = 2026-10-01T00:00:00Z used by every table. */
#define HORIZON_ISO "2026-10-01T00:00:00Z"
#define HORIZON_MS INT64_C(1790812800000)
#define AT "{'$date':'2026-10-01T00:00:00Z'}"
#define AT_MINUS_1 "{'$date':'2026-09-30T23:59:59.999Z'}"
#define AT_MINUS_2 "{'$date':'2026-09-30T23:59:59.998Z'}"
#define IN "{'$date':'2026-11-01T00:00:00Z'}"
#define IN_MS INT64_C(1793491200000)
#define OLD "{'$date':'2026-09-01T00:00:00Z'}"
#define OLD_MS INT64_C(1788220800000)
#define FUTURE "{'$date':'2027-01-01T00:00:00Z'}"
#define REGEX "{'$regularExpression':{'pattern':'^a','options':''}}"
#define OID "{'$oid':'0123456789abcdef01234567'}"

/* A command as a client sends it: the JSON plus $db: "shop". */
static bson_t *command_json(const char *text)
{
    bson_t *command = support_json(text);
    if (!bson_has_field(command, "$db")) {
        BSON_APPEND_UTF8(command, "$db", "shop");
    }
    return command;
}

/* The array of a JSON array text, for comparison with a decision's arrays. */
static bson_t *json_array(const char *text)
{
    char wrapped[4096];
    bson_iter_t iter;
    uint32_t length;
    const uint8_t *data;
    snprintf(wrapped, sizeof wrapped, "{'a': %s}", text);
    bson_t *document = support_json(wrapped);
    assert_true(bson_iter_init_find(&iter, document, "a") && BSON_ITER_HOLDS_ARRAY(&iter));
    bson_iter_array(&iter, &length, &data);
    bson_t *array = bson_new_from_data(data, length);
    bson_destroy(document);
    return array;
}

typedef enum setup {
    WITH_HORIZON,     /* policy timeField createdAt, horizon H */
    NO_POLICY,        /* the namespace has no policy */
    HORIZON_INFINITE, /* policy, coverage not valid */
    COVERAGE_NULL,    /* policy, coverage pointer NULL */
    DOTTED_FIELD,     /* policy timeField meta.ts, horizon H */
} setup_t;

static const plan_policy_t created_at_policy = {.time_field = "createdAt"};
static const plan_policy_t dotted_policy = {.time_field = "meta.ts"};
static const plan_coverage_t valid_coverage = {.valid = true, .horizon_ms = HORIZON_MS};
static const plan_coverage_t infinite_coverage = {.valid = false, .horizon_ms = 0};

static bool plan_with(const char *text, setup_t setup, plan_decision_t *out, bson_error_t *error)
{
    const plan_policy_t *policy = setup == NO_POLICY      ? NULL
                                  : setup == DOTTED_FIELD ? &dotted_policy
                                                          : &created_at_policy;
    const plan_coverage_t *coverage = setup == HORIZON_INFINITE ? &infinite_coverage
                                      : setup == COVERAGE_NULL  ? NULL
                                                                : &valid_coverage;
    bson_t *command = command_json(text);
    bool ok = plan_command(command, policy, coverage, out, error);
    bson_destroy(command);
    return ok;
}

/* ---- the filter lower bound --------------------------------------------- */

typedef struct bound_case {
    const char *filter;
    bool proved;
    int64_t bound_ms;
    bool inclusive;
} bound_case_t;

static void run_bound_cases(const bound_case_t *cases, size_t count, const char *time_field)
{
    int failures = 0;
    for (size_t i = 0; i < count; i++) {
        bson_t *filter = support_json(cases[i].filter);
        int64_t bound = -1;
        bool inclusive = false;
        bool proved = plan_filter_lower_bound(filter, time_field, &bound, &inclusive);
        if (proved != cases[i].proved ||
            (proved && (bound != cases[i].bound_ms || inclusive != cases[i].inclusive))) {
            print_error("filter %s: proved %d bound %" PRId64 " inclusive %d; expected %d %" PRId64 " %d\n",
                        cases[i].filter, proved, bound, inclusive, cases[i].proved, cases[i].bound_ms,
                        cases[i].inclusive);
            failures++;
        }
        bson_destroy(filter);
    }
    assert_int_equal(failures, 0);
}

#define RUN_BOUNDS(cases, field) run_bound_cases(cases, sizeof cases / sizeof cases[0], field)

static void test_lower_bound_provable(void **state)
{
    (void)state;
    static const bound_case_t cases[] = {
        {"{'createdAt': {'$gte': " IN "}}", true, IN_MS, true},
        {"{'createdAt': {'$gt': " IN "}}", true, IN_MS, false},
        {"{'createdAt': " IN "}", true, IN_MS, true},
        {"{'createdAt': {'$eq': " IN "}}", true, IN_MS, true},
        {"{'createdAt': {'$in': [" IN "]}}", true, IN_MS, true},
        /* $in: the smallest date bounds */
        {"{'createdAt': {'$in': [" IN ", " OLD "]}}", true, OLD_MS, true},
        /* other operators on the field are more conjuncts */
        {"{'createdAt': {'$gte': " IN ", '$lt': " FUTURE "}}", true, IN_MS, true},
        {"{'createdAt': {'$lt': " FUTURE ", '$gte': " IN "}}", true, IN_MS, true},
        {"{'createdAt': {'$gte': " IN ", '$ne': " FUTURE "}}", true, IN_MS, true},
        /* the strongest of several bounds */
        {"{'createdAt': {'$gt': " OLD ", '$gte': " IN "}}", true, IN_MS, true},
        {"{'createdAt': {'$gte': " IN ", '$gt': " IN "}}", true, IN_MS, false},
        {"{'createdAt': {'$gte': " IN ", '$in': [" OLD "]}}", true, IN_MS, true},
        /* sibling conjuncts of any kind cannot widen the match */
        {"{'x': 1, 'createdAt': {'$gte': " IN "}}", true, IN_MS, true},
        {"{'createdAt': {'$gte': " IN "}, '$or': [{'a': 1}, {'b': 2}]}", true, IN_MS, true},
        {"{'$nor': [{'a': 1}], 'createdAt': {'$gte': " IN "}}", true, IN_MS, true},
        {"{'$expr': {'$eq': ['$a', 1]}, 'createdAt': {'$gt': " IN "}}", true, IN_MS, false},
        {"{'createdAt.sub': 5, 'createdAt': {'$gte': " IN "}}", true, IN_MS, true},
        /* top-level $and, recursively */
        {"{'$and': [{'createdAt': {'$gte': " IN "}}, {'x': 1}]}", true, IN_MS, true},
        {"{'$and': [{'$and': [{'createdAt': {'$gte': " IN "}}]}]}", true, IN_MS, true},
        {"{'createdAt': {'$gte': " OLD "}, '$and': [{'createdAt': {'$gt': " IN "}}]}", true, IN_MS, false},
        {"{'$and': [{'createdAt': {'$gte': " IN "}}, {'$or': [{'createdAt': {'$lt': " OLD "}}]}]}", true, IN_MS,
         true},
        /* contradictory but sound: matches nothing */
        {"{'createdAt': {'$gte': " IN "}, '$and': [{'createdAt': {'$lt': " OLD "}}]}", true, IN_MS, true},
    };
    RUN_BOUNDS(cases, "createdAt");
}

static void test_lower_bound_unprovable(void **state)
{
    (void)state;
    static const bound_case_t cases[] = {
        {"{}", false, 0, false},
        {"{'x': 1}", false, 0, false},
        {"{'createdAt': {'$lt': " IN "}}", false, 0, false},
        {"{'createdAt': {'$lte': " IN "}}", false, 0, false},
        {"{'createdAt': {'$ne': " IN "}}", false, 0, false},
        {"{'createdAt': {'$nin': [" IN "]}}", false, 0, false},
        {"{'createdAt': {'$exists': true}}", false, 0, false},
        {"{'createdAt': null}", false, 0, false},
        {"{'createdAt': {'$eq': null}}", false, 0, false},
        {"{'createdAt': {'$gte': null}}", false, 0, false},
        {"{'createdAt': {'$not': {'$lt': " IN "}}}", false, 0, false},
        {"{'createdAt': {'$elemMatch': {'$gte': " IN "}}}", false, 0, false},
        {"{'createdAt': {'$all': [" IN "]}}", false, 0, false},
        {"{'createdAt': {'%type': 'date'}}", false, 0, false},
        /* $or, $nor, $expr, $where prove nothing */
        {"{'$or': [{'createdAt': {'$gte': " IN "}}]}", false, 0, false},
        {"{'$or': [{'createdAt': {'$gte': " IN "}}, {'createdAt': {'$gte': " FUTURE "}}]}", false, 0, false},
        {"{'$nor': [{'createdAt': {'$lt': " IN "}}]}", false, 0, false},
        {"{'$expr': {'$gte': ['$createdAt', " IN "]}}", false, 0, false},
        {"{'$where': 'this.createdAt > 0'}", false, 0, false},
        /* strings and numbers compared with a date bracket to their own types */
        {"{'createdAt': {'$gte': '2026-11-01T00:00:00Z'}}", false, 0, false},
        {"{'createdAt': '2026-11-01T00:00:00Z'}", false, 0, false},
        {"{'createdAt': {'$gte': {'$numberLong': '1793491200000'}}}", false, 0, false},
        {"{'createdAt': {'$gt': 1793491200000.0}}", false, 0, false},
        {"{'createdAt': {'$gte': {'$timestamp': {'t': 1793491200, 'i': 1}}}}", false, 0, false},
        {"{'createdAt': {'$gte': {'$minKey': 1}}}", false, 0, false},
        /* arrays: [d] equals an array holding [d], which no date bound covers */
        {"{'createdAt': [" IN "]}", false, 0, false},
        {"{'createdAt': {'$eq': [" IN "]}}", false, 0, false},
        {"{'createdAt': {'$gte': [" IN "]}}", false, 0, false},
        {"{'createdAt': {'$in': [[" IN "]]}}", false, 0, false},
        /* $in: every operand a date, and at least one */
        {"{'createdAt': {'$in': []}}", false, 0, false},
        {"{'createdAt': {'$in': [" IN ", 'x']}}", false, 0, false},
        {"{'createdAt': {'$in': [" IN ", null]}}", false, 0, false},
        {"{'createdAt': {'$in': [" IN ", " REGEX "]}}", false, 0, false},
        {"{'createdAt': {'$in': " IN "}}", false, 0, false},
        /* dotted sub-paths and other spellings of the field */
        {"{'createdAt.sub': {'$gte': " IN "}}", false, 0, false},
        {"{'createdAt.0': {'$gte': " IN "}}", false, 0, false},
        {"{'CreatedAt': {'$gte': " IN "}}", false, 0, false},
        {"{'createdAt ': {'$gte': " IN "}}", false, 0, false},
        /* a document whose first field is not an operator is a literal equality */
        {"{'createdAt': {'x': 1, '$gte': " IN "}}", false, 0, false},
        {"{'createdAt': {}}", false, 0, false},
        /* DBRef-like operator documents */
        {"{'createdAt': {'$gte': " IN ", '%id': 1}}", false, 0, false},
        /* a field or operator named twice proves nothing */
        {"{'createdAt': {'$gte': " IN "}, 'createdAt': {'$lt': " OLD "}}", false, 0, false},
        {"{'createdAt': {'$gte': " IN ", '$gte': " OLD "}}", false, 0, false},
        {"{'$and': [{'createdAt': {'$gte': " IN "}}], '$and': [{'x': 1}]}", false, 0, false},
        /* malformed $and */
        {"{'$and': []}", false, 0, false},
        {"{'$and': {'createdAt': {'$gte': " IN "}}}", false, 0, false},
        {"{'$and': [{'createdAt': {'$gte': " IN "}}, 5]}", false, 0, false},
        {"{'createdAt': {'$gte': " IN "}, '$and': [[]]}", false, 0, false},
    };
    RUN_BOUNDS(cases, "createdAt");
}

static void test_lower_bound_dotted_time_field(void **state)
{
    (void)state;
    static const bound_case_t cases[] = {
        {"{'meta.ts': {'$gte': " IN "}}", true, IN_MS, true},
        {"{'meta.ts': " IN "}", true, IN_MS, true},
        {"{'meta': {'ts': " IN "}}", false, 0, false},
        {"{'meta': {'$gte': " IN "}}", false, 0, false},
        {"{'meta.ts.x': {'$gte': " IN "}}", false, 0, false},
    };
    RUN_BOUNDS(cases, "meta.ts");
}

static void test_lower_bound_arguments(void **state)
{
    (void)state;
    int64_t bound;
    bool inclusive;
    bson_t *filter = support_json("{'createdAt': {'$gte': " IN "}}");
    assert_false(plan_filter_lower_bound(NULL, "createdAt", &bound, &inclusive));
    assert_false(plan_filter_lower_bound(filter, "", &bound, &inclusive));
    assert_false(plan_filter_lower_bound(filter, "$createdAt", &bound, &inclusive));
    assert_true(plan_filter_lower_bound(filter, "createdAt", &bound, &inclusive));
    bson_destroy(filter);

    /* A filter 100 documents deep is analysed; one 101 deep proves nothing. */
    for (int levels = 99; levels <= 100; levels++) {
        filter = BCON_NEW("createdAt", "{", "$gte", BCON_DATE_TIME(IN_MS), "}");
        for (int i = 0; i < levels; i++) {
            bson_t *wrapped = bson_new();
            bson_t array;
            bson_append_array_begin(wrapped, "$and", -1, &array);
            BSON_APPEND_DOCUMENT(&array, "0", filter);
            bson_append_array_end(wrapped, &array);
            bson_destroy(filter);
            filter = wrapped;
        }
        assert_int_equal(plan_filter_lower_bound(filter, "createdAt", &bound, &inclusive), levels < 100);
        bson_destroy(filter);
    }
}

/* ---- routes -------------------------------------------------------------- */

typedef struct route_case {
    const char *command;
    setup_t setup;
    plan_route_t route;
    plan_reason_t reason;
} route_case_t;

static void run_route_cases(const route_case_t *cases, size_t count)
{
    int failures = 0;
    for (size_t i = 0; i < count; i++) {
        plan_decision_t decision;
        bson_error_t error = {0};
        bool ok = plan_with(cases[i].command, cases[i].setup, &decision, &error);
        if (!ok) {
            print_error("%s: failed: %s\n", cases[i].command, error.message);
            failures++;
        } else if (decision.route != cases[i].route || decision.reason != cases[i].reason) {
            print_error("%s (setup %d): got %s/%s (%s); expected %s/%s\n", cases[i].command, cases[i].setup,
                        plan_route_name(decision.route), plan_reason_name(decision.reason), decision.reason_text,
                        plan_route_name(cases[i].route), plan_reason_name(cases[i].reason));
            failures++;
        } else if (decision.reason_text[0] == '\0') {
            print_error("%s: empty reason text\n", cases[i].command);
            failures++;
        }
        plan_decision_cleanup(&decision);
    }
    assert_int_equal(failures, 0);
}

#define RUN_ROUTES(cases) run_route_cases(cases, sizeof cases / sizeof cases[0])

#define FIND(filter) "{'find': 'orders', 'filter': " filter "}"

static void test_find_routes(void **state)
{
    (void)state;
    static const route_case_t cases[] = {
        {FIND("{'createdAt': {'$gte': " IN "}}"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': {'$gt': " IN "}, 'status': 'A'}"), WITH_HORIZON, PLAN_ROUTE_FAST,
         PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': " IN "}"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': {'$in': [" IN ", " FUTURE "]}}"), WITH_HORIZON, PLAN_ROUTE_FAST,
         PLAN_REASON_INSIDE_HORIZON},
        /* the bound exactly at the horizon: >= H and > H-1ms are inside, >= H-1ms is not */
        {FIND("{'createdAt': {'$gte': " AT "}}"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': {'$gt': " AT "}}"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': " AT "}"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': {'$gt': " AT_MINUS_1 "}}"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'createdAt': {'$gte': " AT_MINUS_1 "}}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_BEFORE_HORIZON},
        {FIND("{'createdAt': {'$gt': " AT_MINUS_2 "}}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_BEFORE_HORIZON},
        {FIND("{'createdAt': {'$in': [" IN ", " AT_MINUS_1 "]}}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_BEFORE_HORIZON},
        {FIND("{'createdAt': {'$gte': " OLD "}}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_BEFORE_HORIZON},
        /* horizon at +infinity */
        {FIND("{'createdAt': {'$gte': " IN "}}"), HORIZON_INFINITE, PLAN_ROUTE_ARCHIVE, PLAN_REASON_HORIZON_UNKNOWN},
        {FIND("{'createdAt': {'$gte': " FUTURE "}}"), COVERAGE_NULL, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_HORIZON_UNKNOWN},
        /* no policy */
        {FIND("{'createdAt': {'$gte': " IN "}}"), NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY},
        /* unprovable */
        {FIND("{}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {"{'find': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {FIND("null"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {FIND("{'$or': [{'createdAt': {'$gte': " IN "}}, {'x': 1}]}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {FIND("{'createdAt': {'$gte': '2026-11-01'}}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {FIND("{'createdAt': {'$in': [" IN ", 5]}}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {FIND("{'$and': []}"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        /* malformed: never fast */
        {FIND("5"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        {FIND("'createdAt'"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        {FIND("[{'createdAt': {'$gte': " IN "}}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        /* a dotted time field */
        {FIND("{'meta.ts': {'$gte': " IN "}}"), DOTTED_FIELD, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {FIND("{'meta': {'ts': " IN "}}"), DOTTED_FIELD, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {FIND("{'createdAt': {'$gte': " IN "}}"), DOTTED_FIELD, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        /* options that do not change the matching set keep the route */
        {"{'find': 'orders', 'filter': {'createdAt': {'$gte': " IN "}}, 'sort': {'x': 1}, 'skip': 5, 'limit': 2, "
         "'collation': {'locale': 'fr'}}",
         WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
    };
    RUN_ROUTES(cases);
}

static void test_count_distinct_routes(void **state)
{
    (void)state;
    static const route_case_t cases[] = {
        {"{'count': 'orders', 'query': {'createdAt': {'$gte': " IN "}}}", WITH_HORIZON, PLAN_ROUTE_FAST,
         PLAN_REASON_INSIDE_HORIZON},
        {"{'count': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {"{'count': 'orders', 'query': {'createdAt': {'$gte': " OLD "}}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_BEFORE_HORIZON},
        {"{'count': 'orders', 'query': 'x'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        /* count does not read a `filter` field */
        {"{'count': 'orders', 'filter': {'createdAt': {'$gte': " IN "}}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {"{'count': 'orders', 'query': {'_id': 5}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {"{'distinct': 'orders', 'key': 'sku', 'query': {'createdAt': {'$gt': " IN "}}}", WITH_HORIZON,
         PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {"{'distinct': 'orders', 'key': 'sku'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {"{'distinct': 'orders', 'key': 'sku', 'query': {'createdAt': {'$in': [" IN ", '2026']}}}", WITH_HORIZON,
         PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {"{'distinct': 'orders', 'key': 'sku', 'query': {'createdAt': {'$gte': " IN "}}}", HORIZON_INFINITE,
         PLAN_ROUTE_ARCHIVE, PLAN_REASON_HORIZON_UNKNOWN},
        {"{'distinct': 'orders', 'key': 'sku', 'query': {'createdAt': {'$gte': " IN "}}}", NO_POLICY,
         PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY},
    };
    RUN_ROUTES(cases);
}

#define AGGREGATE(pipeline) "{'aggregate': 'orders', 'pipeline': " pipeline ", 'cursor': {}}"
#define MATCH_IN "{'$match': {'createdAt': {'$gte': " IN "}}}"

static void test_aggregate_routes(void **state)
{
    (void)state;
    static const route_case_t cases[] = {
        {AGGREGATE("[" MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {AGGREGATE("[" MATCH_IN ", {'$group': {'_id': '$sku', 'n': {'$sum': 1}}}, {'$sort': {'n': -1}}]"),
         WITH_HORIZON, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        /* a leading run of $match stages is one conjunction */
        {AGGREGATE("[{'$match': {'x': 1}}, " MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_FAST,
         PLAN_REASON_INSIDE_HORIZON},
        {AGGREGATE("[{'$match': {'createdAt': {'$gte': " OLD "}}}, " MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_FAST,
         PLAN_REASON_INSIDE_HORIZON},
        /* the $match must come first: $limit, $sort, $skip before it see older documents */
        {AGGREGATE("[{'$limit': 5}, " MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {AGGREGATE("[{'$sort': {'x': 1}}, " MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {AGGREGATE("[{'$project': {'createdAt': '$other'}}, " MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {AGGREGATE("[]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE},
        {AGGREGATE("[{'$match': {'$expr': {'$gte': ['$createdAt', " IN "]}}}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_FILTER_UNPROVABLE},
        {AGGREGATE("[{'$match': {'createdAt': {'$gte': " OLD "}}}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_BEFORE_HORIZON},
        {AGGREGATE("[" MATCH_IN "]"), HORIZON_INFINITE, PLAN_ROUTE_ARCHIVE, PLAN_REASON_HORIZON_UNKNOWN},
        {AGGREGATE("[" MATCH_IN "]"), NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY},
        /* later stages that read other collections */
        {AGGREGATE("[" MATCH_IN ", {'$lookup': {'from': 'c', 'localField': 'a', 'foreignField': 'b', 'as': 'j'}}]"),
         WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_READS_OTHER},
        {AGGREGATE("[" MATCH_IN ", {'$unionWith': 'other'}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_PIPELINE_READS_OTHER},
        {AGGREGATE("[" MATCH_IN ", {'$graphLookup': {'from': 'c', 'startWith': '$a', 'connectFromField': 'a', "
                   "'connectToField': 'b', 'as': 'g'}}]"),
         WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_READS_OTHER},
        {AGGREGATE("[" MATCH_IN ", {'$facet': {'a': [{'$count': 'n'}], 'b': [{'$lookup': {'from': 'c', 'as': 'j', "
                   "'pipeline': []}}]}}]"),
         WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_READS_OTHER},
        {AGGREGATE("[" MATCH_IN ", {'$facet': {'a': [{'$count': 'n'}], 'b': [{'$limit': 1}]}}]"), WITH_HORIZON,
         PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON},
        {AGGREGATE("[{'$lookup': {'from': 'c', 'as': 'j', 'pipeline': []}}]"), NO_POLICY, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_PIPELINE_READS_OTHER},
        /* stages that write */
        {AGGREGATE("[" MATCH_IN ", {'$out': 'target'}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_PIPELINE_WRITES},
        {AGGREGATE("[" MATCH_IN ", {'$merge': {'into': 'target'}}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_PIPELINE_WRITES},
        {AGGREGATE("[{'$out': 'target'}]"), NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_WRITES},
        /* change streams */
        {AGGREGATE("[{'$changeStream': {}}, " MATCH_IN "]"), WITH_HORIZON, PLAN_ROUTE_FAST,
         PLAN_REASON_CHANGE_STREAM},
        /* malformed pipelines: the archive reports the error */
        {"{'aggregate': 'orders', 'pipeline': 5, 'cursor': {}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_MALFORMED},
        {"{'aggregate': 'orders', 'cursor': {}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        {"{'aggregate': 'orders', 'pipeline': {'$match': {}}, 'cursor': {}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_MALFORMED},
        {AGGREGATE("[{'$match': 5}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        {AGGREGATE("[{}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        {AGGREGATE("[5]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED},
        {AGGREGATE("[{'$match': {'createdAt': {'$gte': " IN "}}, '$limit': 5}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_MALFORMED},
        {AGGREGATE("[" MATCH_IN ", {'$facet': {'a': [5]}}]"), WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_MALFORMED},
    };
    RUN_ROUTES(cases);
}

static void test_pipeline_flags(void **state)
{
    (void)state;
    static const struct {
        const char *command;
        setup_t setup;
        bool reads_other;
        bool writes_output;
        const char *output_namespace;
        bool is_explain;
    } cases[] = {
        {AGGREGATE("[" MATCH_IN ", {'$out': 'target'}]"), WITH_HORIZON, false, true, "shop.target", false},
        {AGGREGATE("[{'$out': {'db': 'reports', 'coll': 'daily'}}]"), WITH_HORIZON, false, true, "reports.daily",
         false},
        {AGGREGATE("[{'$merge': 'target'}]"), NO_POLICY, false, true, "shop.target", false},
        {AGGREGATE("[{'$merge': {'into': {'db': 'other', 'coll': 'x'}, 'on': '_id'}}]"), WITH_HORIZON, false, true,
         "other.x", false},
        {AGGREGATE("[{'$merge': {'into': 5}}]"), WITH_HORIZON, false, true, "", false},
        {AGGREGATE("[{'$out': {'db': 'reports'}}]"), WITH_HORIZON, false, true, "", false},
        {"{'aggregate': 'orders', 'pipeline': [{'$out': 'target'}], 'explain': true}", WITH_HORIZON, false, false,
         "", true},
        {"{'explain': {'aggregate': 'orders', 'pipeline': [{'$out': 'target'}], 'cursor': {}}}", WITH_HORIZON,
         false, false, "", true},
        {AGGREGATE("[{'$unionWith': {'coll': 'b', 'pipeline': [{'$out': 'x'}]}}]"), NO_POLICY, true, false, "",
         false},
        {AGGREGATE("[" MATCH_IN ", {'$lookup': {'from': 'c', 'as': 'j', 'pipeline': []}}, {'$merge': 't'}]"),
         WITH_HORIZON, true, true, "shop.t", false},
        {"{'mapReduce': 'orders', 'map': 'f', 'reduce': 'g', 'out': 'results'}", WITH_HORIZON, false, true,
         "shop.results", false},
        {"{'mapReduce': 'orders', 'map': 'f', 'reduce': 'g', 'out': {'merge': 'r', 'db': 'other'}}", NO_POLICY,
         false, true, "other.r", false},
        {"{'mapreduce': 'orders', 'map': 'f', 'reduce': 'g', 'out': {'inline': 1}}", WITH_HORIZON, false, false, "",
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_decision_t decision;
        bson_error_t error;
        assert_true(plan_with(cases[i].command, cases[i].setup, &decision, &error));
        if (decision.reads_other_namespaces != cases[i].reads_other ||
            decision.writes_output != cases[i].writes_output ||
            strcmp(decision.output_namespace, cases[i].output_namespace) != 0 ||
            decision.is_explain != cases[i].is_explain) {
            fail_msg("%s: reads_other %d writes_output %d output '%s' explain %d", cases[i].command,
                     decision.reads_other_namespaces, decision.writes_output, decision.output_namespace,
                     decision.is_explain);
        }
        /* whatever the flags, a pipeline that writes is never sent to the fast tier */
        assert_int_not_equal(decision.route, PLAN_ROUTE_FAST);
        plan_decision_cleanup(&decision);
    }
}

/* ---- point reads --------------------------------------------------------- */

typedef struct point_case {
    const char *command;
    setup_t setup;
    bool point;
    const char *ids; /* JSON array when point */
} point_case_t;

static void test_point_reads(void **state)
{
    (void)state;
    static const point_case_t cases[] = {
        {FIND("{'_id': 5}"), WITH_HORIZON, true, "[5]"},
        {FIND("{'_id': {'$eq': 'a'}}"), WITH_HORIZON, true, "['a']"},
        {FIND("{'_id': {'$in': [1, 'b', " OID "]}}"), WITH_HORIZON, true, "[1, 'b', " OID "]"},
        {FIND("{'_id': {'a': 1, 'b': [1, 2]}}"), WITH_HORIZON, true, "[{'a': 1, 'b': [1, 2]}]"},
        {FIND("{'_id': {'$in': [{'a': 1}, 2.5]}}"), WITH_HORIZON, true, "[{'a': 1}, 2.5]"},
        {FIND("{'_id': null}"), WITH_HORIZON, true, "[null]"},
        {FIND("{'_id': " IN "}"), WITH_HORIZON, true, "[" IN "]"},
        /* the route does not depend on the horizon */
        {FIND("{'_id': 5}"), HORIZON_INFINITE, true, "[5]"},
        /* findOne: limit 1, singleBatch; sort by _id */
        {"{'find': 'orders', 'filter': {'_id': 5}, 'limit': 1, 'singleBatch': true, 'batchSize': 1, "
         "'projection': {'a': 1}, 'lsid': {'id': 1}, 'maxTimeMS': 100}",
         WITH_HORIZON, true, "[5]"},
        {"{'find': 'orders', 'filter': {'_id': {'$in': [1, 2]}}, 'sort': {'_id': -1}}", WITH_HORIZON, true,
         "[1, 2]"},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'sort': {}, 'skip': 0}", WITH_HORIZON, true, "[5]"},
        /* not point reads */
        {FIND("{'_id': {'$in': []}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': " REGEX "}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$in': [1, " REGEX "]}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$in': [[1, 2]]}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': [1, 2]}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$gt': 5}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$eq': 5, '$ne': 6}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$eq': {'$gt': 1}}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$in': [{'$gt': 1}]}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'$in': 5}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': {'%ref': 'c', '%id': 1}}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': 5, 'x': 1}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id': 5, '_id': 6}"), WITH_HORIZON, false, NULL},
        {FIND("{'_id.x': 5}"), WITH_HORIZON, false, NULL},
        {FIND("{'$and': [{'_id': 5}]}"), WITH_HORIZON, false, NULL},
        {FIND("{'$or': [{'_id': 5}, {'_id': 6}]}"), WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'skip': 1}", WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': {'$in': [1, 2]}}, 'sort': {'x': 1}}", WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'sort': {'_id': 1, 'x': 1}}", WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'collation': {'locale': 'en', 'strength': 2}}", WITH_HORIZON,
         false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'hint': {'x': 1}}", WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'limit': -1}", WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'tailable': true}", WITH_HORIZON, false, NULL},
        {"{'find': 'orders', 'filter': {'_id': 5}, 'min': {'_id': 1}}", WITH_HORIZON, false, NULL},
        {FIND("{'_id': 5}"), NO_POLICY, false, NULL},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_decision_t decision;
        bson_error_t error;
        assert_true(plan_with(cases[i].command, cases[i].setup, &decision, &error));
        bool point = decision.route == PLAN_ROUTE_FAST_THEN_ARCHIVE;
        if (point != cases[i].point || (point && decision.reason != PLAN_REASON_POINT_READ)) {
            print_error("%s: got %s (%s)\n", cases[i].command, plan_route_name(decision.route),
                        decision.reason_text);
            failures++;
        } else if (point) {
            bson_t *expected = json_array(cases[i].ids);
            if (!bson_equal(expected, &decision.point_ids) ||
                decision.point_id_count != (uint32_t)bson_count_keys(expected)) {
                char *got = bson_as_relaxed_extended_json(&decision.point_ids, NULL);
                print_error("%s: ids %s, expected %s\n", cases[i].command, got, cases[i].ids);
                bson_free(got);
                failures++;
            }
            bson_destroy(expected);
        } else if (decision.route == PLAN_ROUTE_FAST || decision.point_id_count != 0 ||
                   !bson_empty(&decision.point_ids)) {
            /* none of these filters bounds the time field */
            print_error("%s: route %s, %u point ids\n", cases[i].command, plan_route_name(decision.route),
                        decision.point_id_count);
            failures++;
        }
        plan_decision_cleanup(&decision);
    }
    assert_int_equal(failures, 0);

    /* a filter on _id and the time field is a range read */
    plan_decision_t decision;
    bson_error_t error;
    assert_true(plan_with(FIND("{'_id': 5, 'createdAt': {'$gte': " IN "}}"), WITH_HORIZON, &decision, &error));
    assert_int_equal(decision.route, PLAN_ROUTE_FAST);
    plan_decision_cleanup(&decision);
}

/* ---- writes -------------------------------------------------------------- */

typedef struct write_case {
    const char *command;
    setup_t setup;
    const char *fault_in_ids;      /* JSON array */
    uint32_t fault_in_filters;
    const char *unique_id_checks;  /* JSON array */
} write_case_t;

static void run_write_cases(const write_case_t *cases, size_t count)
{
    int failures = 0;
    for (size_t i = 0; i < count; i++) {
        plan_decision_t decision;
        bson_error_t error = {0};
        if (!plan_with(cases[i].command, cases[i].setup, &decision, &error)) {
            print_error("%s: failed: %s\n", cases[i].command, error.message);
            failures++;
            plan_decision_cleanup(&decision);
            continue;
        }
        bson_t *ids = json_array(cases[i].fault_in_ids);
        bson_t *checks = json_array(cases[i].unique_id_checks);
        bool needs = !bson_empty(ids) || cases[i].fault_in_filters > 0;
        if (decision.route != PLAN_ROUTE_FAST || decision.reason != PLAN_REASON_WRITE ||
            decision.kind != PLAN_KIND_WRITE || !bson_equal(ids, &decision.fault_in_ids) ||
            decision.fault_in_id_count != (uint32_t)bson_count_keys(ids) ||
            decision.fault_in_filter_count != cases[i].fault_in_filters ||
            (uint32_t)bson_count_keys(&decision.fault_in_filters) != cases[i].fault_in_filters ||
            !bson_equal(checks, &decision.unique_id_checks) ||
            decision.unique_id_check_count != (uint32_t)bson_count_keys(checks) || decision.needs_fault_in != needs) {
            char *got_ids = bson_as_relaxed_extended_json(&decision.fault_in_ids, NULL);
            char *got_checks = bson_as_relaxed_extended_json(&decision.unique_id_checks, NULL);
            print_error("%s: %s/%s ids %s filters %u checks %s needs %d (%s)\n", cases[i].command,
                        plan_route_name(decision.route), plan_reason_name(decision.reason), got_ids,
                        decision.fault_in_filter_count, got_checks, decision.needs_fault_in, decision.reason_text);
            bson_free(got_ids);
            bson_free(got_checks);
            failures++;
        }
        bson_destroy(ids);
        bson_destroy(checks);
        plan_decision_cleanup(&decision);
    }
    assert_int_equal(failures, 0);
}

#define RUN_WRITES(cases) run_write_cases(cases, sizeof cases / sizeof cases[0])

#define UPDATE(statement) "{'update': 'orders', 'updates': [" statement "]}"
#define DELETE(statement) "{'delete': 'orders', 'deletes': [" statement "]}"
#define Q_IN "'createdAt': {'$gte': " IN "}"

static void test_inserts(void **state)
{
    (void)state;
    static const write_case_t cases[] = {
        /* inserts never fault in; their _ids must be new to the archive (I7) */
        {"{'insert': 'orders', 'documents': [{'_id': 1, 'createdAt': " IN "}, {'x': 2}, {'_id': 'k'}]}",
         WITH_HORIZON, "[]", 0, "[1, 'k']"},
        {"{'insert': 'orders', 'documents': [{'x': 1}]}", WITH_HORIZON, "[]", 0, "[]"},
        {"{'insert': 'orders', 'documents': []}", WITH_HORIZON, "[]", 0, "[]"},
        {"{'insert': 'orders', 'documents': [{'_id': {'a': 1}}], 'ordered': false}", HORIZON_INFINITE, "[]", 0,
         "[{'a': 1}]"},
    };
    RUN_WRITES(cases);
}

static void test_updates_and_deletes(void **state)
{
    (void)state;
    static const write_case_t cases[] = {
        /* single-document writes by _id fault in that _id */
        {UPDATE("{'q': {'_id': 5}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[5]", 0, "[]"},
        {UPDATE("{'q': {'_id': {'$eq': 5}}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[5]", 0, "[]"},
        {UPDATE("{'q': {'_id': {'$in': [1, 2]}}, 'u': {'$set': {'a': 1}}, 'multi': true}"), WITH_HORIZON, "[1, 2]",
         0, "[]"},
        {UPDATE("{'q': {'$and': [{'x': 1}, {'_id': 7}]}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[7]", 0, "[]"},
        {UPDATE("{'q': {'_id': 5, 'status': 'A'}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[5]", 0, "[]"},
        {UPDATE("{'q': {'_id': {'$eq': 5, '$gt': 1}}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[5]", 0, "[]"},
        /* ... unless the filter proves the document inside the horizon */
        {UPDATE("{'q': {'_id': 5, " Q_IN "}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[]", 0, "[]"},
        {UPDATE("{'q': {'_id': 5, 'createdAt': {'$gte': " OLD "}}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, "[5]",
         0, "[]"},
        {UPDATE("{'q': {'_id': 5, " Q_IN "}, 'u': {'$set': {'a': 1}}}"), HORIZON_INFINITE, "[5]", 0, "[]"},
        /* an upsert by _id inside the horizon still faults the _id in: the archive may
         * hold it outside the window, and the insert must then be a duplicate */
        {UPDATE("{'q': {'_id': 5, " Q_IN "}, 'u': {'$set': {'a': 1}}, 'upsert': true}"), WITH_HORIZON, "[5]", 0,
         "[]"},
        {UPDATE("{'q': {'_id': 5}, 'u': [{'$set': {'a': 1}}], 'upsert': true}"), WITH_HORIZON, "[5]", 0, "[]"},
        /* with a collation, what the filter matches is faulted in as well */
        {UPDATE("{'q': {'_id': 'abc'}, 'u': {'$set': {'a': 1}}, 'collation': {'locale': 'en', 'strength': 2}}"),
         WITH_HORIZON, "['abc']", 1, "[]"},
        /* multi-document and non-_id writes fault in what their filter matches */
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$inc': {'n': 1}}, 'multi': true}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$inc': {'n': 1}}}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {'_id': {'$gt': 5}}, 'u': {'$inc': {'n': 1}}}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {'$or': [{'_id': 5}, {'_id': 6}]}, 'u': {'$inc': {'n': 1}}}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {'_id': 5, '_id': 6}, 'u': {'$inc': {'n': 1}}}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {" Q_IN "}, 'u': {'$inc': {'n': 1}}, 'multi': true}"), WITH_HORIZON, "[]", 0, "[]"},
        {UPDATE("{'q': {" Q_IN "}, 'u': {'$inc': {'n': 1}}, 'multi': true}"), HORIZON_INFINITE, "[]", 1, "[]"},
        {UPDATE("{'q': {'createdAt': {'$gte': " OLD "}}, 'u': {'$inc': {'n': 1}}, 'multi': true}"), WITH_HORIZON,
         "[]", 1, "[]"},
        /* upserts without _id in the query: the _id they may insert */
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$set': {'a': 1}}, 'upsert': true}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$setOnInsert': {'_id': 7}}, 'upsert': true}"), WITH_HORIZON, "[]", 1,
         "[7]"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$set': {'_id': 'k', 'a': 1}}, 'upsert': 1}"), WITH_HORIZON, "[]", 1,
         "['k']"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'_id': 8, 'a': 1}, 'upsert': true}"), WITH_HORIZON, "[]", 1, "[8]"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'a': 1}, 'upsert': true}"), WITH_HORIZON, "[]", 1, "[]"},
        {UPDATE("{'q': {" Q_IN "}, 'u': {'_id': 9, 'a': 1}, 'upsert': true}"), WITH_HORIZON, "[]", 0, "[9]"},
        /* a pipeline update without upsert is fine */
        {UPDATE("{'q': {'sku': 'x'}, 'u': [{'$set': {'a': 1}}]}"), WITH_HORIZON, "[]", 1, "[]"},
        /* upsert: 0 is no upsert */
        {UPDATE("{'q': {'sku': 'x'}, 'u': [{'$set': {'_id': 1}}], 'upsert': 0}"), WITH_HORIZON, "[]", 1, "[]"},
        /* several statements add up */
        {UPDATE("{'q': {'_id': 1}, 'u': {'$set': {'a': 1}}}, {'q': {'sku': 'y'}, 'u': {'$set': {'a': 1}}}, "
                "{'q': {'_id': 2}, 'u': {'x': 1}, 'upsert': true}"),
         WITH_HORIZON, "[1, 2]", 1, "[]"},
        /* deletes */
        {DELETE("{'q': {'_id': 5}, 'limit': 1}"), WITH_HORIZON, "[5]", 0, "[]"},
        {DELETE("{'q': {'_id': 5, " Q_IN "}, 'limit': 1}"), WITH_HORIZON, "[]", 0, "[]"},
        {DELETE("{'q': {}, 'limit': 0}"), WITH_HORIZON, "[]", 1, "[]"},
        {DELETE("{'q': {'createdAt': {'$lt': " OLD "}}, 'limit': 0}"), WITH_HORIZON, "[]", 1, "[]"},
        {DELETE("{'q': {" Q_IN "}, 'limit': 0}"), WITH_HORIZON, "[]", 0, "[]"},
        {DELETE("{'q': {'_id': 1}, 'limit': 1}, {'q': {'_id': 2}, 'limit': 1}"), WITH_HORIZON, "[1, 2]", 0, "[]"},
        /* findAndModify */
        {"{'findAndModify': 'orders', 'query': {'_id': 5}, 'update': {'$inc': {'n': 1}}}", WITH_HORIZON, "[5]", 0,
         "[]"},
        {"{'findandmodify': 'orders', 'query': {'_id': 5}, 'remove': true}", WITH_HORIZON, "[5]", 0, "[]"},
        {"{'findAndModify': 'orders', 'query': {'sku': 'x'}, 'sort': {'n': 1}, 'remove': true}", WITH_HORIZON, "[]",
         1, "[]"},
        {"{'findAndModify': 'orders', 'update': {'$inc': {'n': 1}}}", WITH_HORIZON, "[]", 1, "[]"},
        {"{'findAndModify': 'orders', 'query': {" Q_IN "}, 'update': {'$inc': {'n': 1}}}", WITH_HORIZON, "[]", 0,
         "[]"},
        {"{'findAndModify': 'orders', 'query': {'sku': 'x'}, 'update': {'$setOnInsert': {'_id': 3}}, "
         "'upsert': true, 'new': true}",
         WITH_HORIZON, "[]", 1, "[3]"},
        /* remove ignores upsert's insert */
        {"{'findAndModify': 'orders', 'query': {'sku': 'x'}, 'update': [{'$set': {'a': 1}}], 'upsert': true, "
         "'remove': true}",
         WITH_HORIZON, "[]", 1, "[]"},
    };
    RUN_WRITES(cases);
}

static void test_write_fault_in_filters(void **state)
{
    (void)state;
    plan_decision_t decision;
    bson_error_t error;
    assert_true(plan_with(UPDATE("{'q': {'sku': 'x'}, 'u': {'$set': {'a': 1}}, 'collation': {'locale': 'fr'}}, "
                                 "{'q': {'n': {'$gt': 2}}, 'u': {'$set': {'a': 1}}}"),
                          WITH_HORIZON, &decision, &error));
    bson_t *expected = support_json("{'0': {'filter': {'sku': 'x'}, 'collation': {'locale': 'fr'}}, "
                            "'1': {'filter': {'n': {'$gt': 2}}}}");
    assert_true(bson_equal(expected, &decision.fault_in_filters));
    assert_true(decision.needs_fault_in);
    assert_non_null(strstr(decision.reason_text, "2 filters"));
    bson_destroy(expected);
    plan_decision_cleanup(&decision);

    /* the filter proved inside the horizon is said so */
    assert_true(plan_with(UPDATE("{'q': {" Q_IN "}, 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, &decision, &error));
    assert_false(decision.needs_fault_in);
    assert_true(decision.has_lower_bound);
    assert_true(decision.lower_bound_ms == IN_MS);
    assert_non_null(strstr(decision.reason_text, "inside the horizon"));
    plan_decision_cleanup(&decision);
}

/* Unique secondary keys (planner_unique.c): a write that sets a unique key faults in
 * the archive documents that may hold the same value, whatever the horizon proves. */
static void assert_unique_fault_ins(const char *command_text, const char *expected_filters)
{
    bson_t *indexes = json_array("[{'v': 2, 'key': {'email': 1}, 'name': 'email_1', 'unique': true},"
                                 " {'key': {'shop': 1, 'n': 1}, 'name': 'shop_n', 'unique': true, 'sparse': true},"
                                 " {'key': {'code': 1}, 'name': 'code_1', 'unique': true,"
                                 "  'partialFilterExpression': {'live': true}}]");
    const plan_policy_t policy = {.time_field = "createdAt", .unique_indexes = indexes};
    plan_decision_t decision;
    bson_error_t error;
    bson_t *command = command_json(command_text);
    assert_true(plan_command(command, &policy, &valid_coverage, &decision, &error));
    bson_t *expected = support_json(expected_filters);
    if (!bson_equal(expected, &decision.fault_in_filters)) {
        char *got = bson_as_relaxed_extended_json(&decision.fault_in_filters, NULL);
        fail_msg("%s: fault-in filters %s", command_text, got);
    }
    assert_int_equal(decision.needs_fault_in, !bson_empty(expected));
    bson_destroy(expected);
    bson_destroy(command);
    plan_decision_cleanup(&decision);
    bson_destroy(indexes);
}

static void test_unique_key_fault_ins(void **state)
{
    (void)state;
    /* An insert: every unique index; a missing field is a null key, except in a
     * sparse index; a partial index's expression bounds what can conflict. */
    assert_unique_fault_ins("{'insert': 'orders', 'documents': [{'_id': 1, 'email': 'a@x', 'code': 7}]}",
                            "{'0': {'filter': {'email': {'%eq': 'a@x'}}},"
                            " '1': {'filter': {'%and': [{'live': true}, {'code': {'%eq': 7}}]}}}");
    assert_unique_fault_ins("{'insert': 'orders', 'documents': [{'_id': 1, 'shop': 's', 'tags': 1}]}",
                            "{'0': {'filter': {'email': {'%eq': null}}},"
                            " '1': {'filter': {'shop': {'%eq': 's'}, 'n': {'%eq': null}}},"
                            " '2': {'filter': {'%and': [{'live': true}, {'code': {'%eq': null}}]}}}");
    /* An array value: each element is a key of the multikey index. */
    assert_unique_fault_ins("{'insert': 'orders', 'documents': [{'email': ['a', 'b'], 'code': 1}]}",
                            "{'0': {'filter': {'email': {'%in': ['a', 'b']}}},"
                            " '1': {'filter': {'%and': [{'live': true}, {'code': {'%eq': 1}}]}}}");
    /* $set of one field of a compound key: the other comes from the stored document. */
    assert_unique_fault_ins("{'update': 'orders', 'updates': [{'q': {'_id': 1, " Q_IN "},"
                            " 'u': {'%set': {'shop': 't'}}}]}",
                            "{'0': {'filter': {'shop': {'%eq': 't'}}}}");
    /* A $set of other fields, and a pipeline, change no key known here. */
    assert_unique_fault_ins("{'update': 'orders', 'updates': [{'q': {'_id': 1, " Q_IN "},"
                            " 'u': {'%set': {'status': 'paid'}, '%inc': {'n': 1}}}]}", "{}");
    /* $set of a sub-document holding the key path. */
    assert_unique_fault_ins("{'update': 'orders', 'updates': [{'q': {" Q_IN "}, 'u': {'%set': {'email': {'x': 1}}}}]}",
                            "{'0': {'filter': {'email': {'%eq': {'x': 1}}}}}");
    /* An upsert by the key: the query's equality is the inserted value; an operator is not. */
    assert_unique_fault_ins("{'update': 'orders', 'updates': [{'q': {'email': 'a@x', " Q_IN "},"
                            " 'u': {'%setOnInsert': {'code': 2}}, 'upsert': true}]}",
                            "{'0': {'filter': {'%and': [{'live': true}, {'code': {'%eq': 2}}]}},"
                            " '1': {'filter': {'email': {'%eq': 'a@x'}}}}");
    assert_unique_fault_ins("{'update': 'orders', 'updates': [{'q': {'email': {'%in': ['a']}, " Q_IN "},"
                            " 'u': {'%set': {'z': 1}}, 'upsert': true}]}", "{}");
    /* A replacement is a whole document; findAndModify like an update. */
    assert_unique_fault_ins("{'findAndModify': 'orders', 'query': {'_id': 1, " Q_IN "},"
                            " 'update': {'email': 'b@x', 'shop': 's', 'n': 2}}",
                            "{'0': {'filter': {'email': {'%eq': 'b@x'}}},"
                            " '1': {'filter': {'shop': {'%eq': 's'}, 'n': {'%eq': 2}}},"
                            " '2': {'filter': {'%and': [{'live': true}, {'code': {'%eq': null}}]}}}");
}

/* Unique keys an update computes (planner_unique.c, issue 13): the statements whose
 * new key the planner cannot name, and the indexes concerned (by name), for the
 * router to compute at write time. */
#define UNIQUE_INDEXES                                                                                                 \
    "[{'v': 2, 'key': {'email': 1}, 'name': 'email_1', 'unique': true},"                                               \
    " {'key': {'shop': 1, 'n': 1}, 'name': 'shop_n', 'unique': true, 'sparse': true},"                                 \
    " {'key': {'code': 1}, 'name': 'code_1', 'unique': true, 'partialFilterExpression': {'live': true}}]"

static void assert_unique_computed(const char *command_text, const char *expected_statements,
                                   const char *expected_names)
{
    bson_t *indexes = json_array(UNIQUE_INDEXES);
    const plan_policy_t policy = {.time_field = "createdAt", .unique_indexes = indexes};
    plan_decision_t decision;
    bson_error_t error;
    bson_t *command = command_json(command_text);
    assert_true(plan_command(command, &policy, &valid_coverage, &decision, &error));
    bson_t *statements = json_array(expected_statements);
    if (!bson_equal(statements, &decision.unique_computed_statements)) {
        char *got = bson_as_relaxed_extended_json(&decision.unique_computed_statements, NULL);
        fail_msg("%s: computed statements %s, expected %s", command_text, got, expected_statements);
    }
    assert_int_equal(decision.unique_computed_count, (uint32_t)bson_count_keys(statements));
    char names[256] = "";
    bson_iter_t iter, name;
    bson_iter_init(&iter, &decision.unique_computed_indexes);
    while (bson_iter_next(&iter)) {
        assert_true(bson_iter_recurse(&iter, &name) && bson_iter_find(&name, "name"));
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] != '\0' ? " " : "",
                 bson_iter_utf8(&name, NULL));
    }
    if (strcmp(names, expected_names) != 0) {
        fail_msg("%s: computed indexes '%s', expected '%s'", command_text, names, expected_names);
    }
    if (decision.unique_computed_count > 0) {
        assert_non_null(strstr(decision.reason_text, "compute a unique key"));
    }
    bson_destroy(statements);
    bson_destroy(command);
    plan_decision_cleanup(&decision);
    bson_destroy(indexes);
}

#define ONE_UPDATE(u) "{'update': 'orders', 'updates': [{'q': {'_id': 1, " Q_IN "}, 'u': " u "}]}"

static void test_unique_keys_computed(void **state)
{
    (void)state;
    /* Operators whose value comes from the stored document, on a key path. */
    assert_unique_computed(ONE_UPDATE("{'%inc': {'n': 1}}"), "[0]", "shop_n");
    assert_unique_computed(ONE_UPDATE("{'%mul': {'code': 2}, '%min': {'email': 'a'}}"), "[0]", "code_1 email_1");
    assert_unique_computed(ONE_UPDATE("{'%currentDate': {'email': true}}"), "[0]", "email_1");
    assert_unique_computed(ONE_UPDATE("{'%bit': {'n': {'and': 1}}}"), "[0]", "shop_n");
    /* $rename to or from a key; $unset (the key becomes null). */
    assert_unique_computed(ONE_UPDATE("{'%rename': {'old': 'email'}}"), "[0]", "email_1");
    assert_unique_computed(ONE_UPDATE("{'%rename': {'email': 'old'}}"), "[0]", "email_1");
    assert_unique_computed(ONE_UPDATE("{'%unset': {'shop': ''}}"), "[0]", "shop_n");
    /* Array operators and positional paths on a multikey key. */
    assert_unique_computed(ONE_UPDATE("{'%push': {'email': 'x'}}"), "[0]", "email_1");
    assert_unique_computed(ONE_UPDATE("{'%pull': {'email': 'x'}, '%pop': {'n': 1}}"), "[0]", "email_1 shop_n");
    assert_unique_computed(ONE_UPDATE("{'%set': {'email.$[]': 'x'}}"), "[0]", "email_1");
    assert_unique_computed(ONE_UPDATE("{'%set': {'email.1': 'x'}}"), "[0]", "email_1");
    /* A $set inside the key's value, and a field of a partial index's filter. */
    assert_unique_computed(ONE_UPDATE("{'%set': {'email.local': 'x'}}"), "[0]", "email_1");
    assert_unique_computed(ONE_UPDATE("{'%set': {'live': true}}"), "[0]", "code_1");
    assert_unique_computed(ONE_UPDATE("{'%unset': {'live': ''}}"), "[0]", "code_1");
    /* A pipeline may set any field. */
    assert_unique_computed(ONE_UPDATE("[{'%set': {'status': 'paid'}}]"), "[0]", "email_1 shop_n code_1");
    /* Known values, other fields, $setOnInsert without upsert: nothing computed. */
    assert_unique_computed(ONE_UPDATE("{'%set': {'email': 'a', 'status': 'x'}, '%inc': {'total': 1}}"), "[]", "");
    assert_unique_computed(ONE_UPDATE("{'%setOnInsert': {'n': 1}, '%push': {'tags': 'x'}}"), "[]", "");
    assert_unique_computed(ONE_UPDATE("{'email': 'a'}"), "[]", "");
    assert_unique_computed(ONE_UPDATE("{'%set': {'emails': 1, 'shopper.n': 2}}"), "[]", "");
    /* An upsert's query operator, or $and/$or, seeds what it inserts. */
    assert_unique_computed("{'update': 'orders', 'updates': [{'q': {'email': {'%in': ['a']}}, 'u': {'%set': {'z': 1}},"
                           " 'upsert': true}]}",
                           "[0]", "email_1");
    assert_unique_computed("{'update': 'orders', 'updates': [{'q': {'%and': [{'email': 'a'}]}, 'u': {'%set': {'z': 1}},"
                           " 'upsert': true}]}",
                           "[0]", "email_1 shop_n code_1");
    /* A bulk: only the statements that compute, by their place. */
    assert_unique_computed("{'update': 'orders', 'updates': [{'q': {'_id': 1}, 'u': {'%set': {'status': 'x'}}},"
                           " {'q': {'_id': 2}, 'u': {'%inc': {'n': 1}}}, {'q': {'_id': 3}, 'u': {'%max': {'code': 3}}},"
                           " {'q': {'_id': 4}, 'u': {'%inc': {'n': 2}}}]}",
                           "[1, 2, 3]", "shop_n code_1");
    /* findAndModify: statement 0, unless it removes. */
    assert_unique_computed("{'findAndModify': 'orders', 'query': {'_id': 1}, 'update': {'%inc': {'n': 1}}}", "[0]",
                           "shop_n");
    assert_unique_computed("{'findAndModify': 'orders', 'query': {'_id': 1}, 'remove': true}", "[]", "");
    /* Deletes, inserts and explain compute nothing. */
    assert_unique_computed("{'delete': 'orders', 'deletes': [{'q': {'email': 'a'}, 'limit': 1}]}", "[]", "");
    assert_unique_computed("{'insert': 'orders', 'documents': [{'email': 'a'}]}", "[]", "");
    assert_unique_computed("{'explain': " ONE_UPDATE("{'%inc': {'n': 1}}") "}", "[]", "");
}

/* The router's half: the keys of one computed document, each filter once. */
static void test_unique_keys_of_document(void **state)
{
    (void)state;
    bson_t *indexes = json_array(UNIQUE_INDEXES);
    bson_t *first = support_json("{'_id': 1, 'email': ['a', 'b'], 'shop': 's', 'n': 2, 'live': true}");
    bson_t *second = support_json("{'_id': 2, 'email': ['a', 'b'], 'shop': 't'}");
    bson_t filters = BSON_INITIALIZER;
    uint32_t count = 0;
    plan_unique_keys_of_document(indexes, first, NULL, &filters, &count);
    plan_unique_keys_of_document(indexes, first, NULL, &filters, &count); /* the same keys: nothing more */
    plan_unique_keys_of_document(indexes, second, NULL, &filters, &count);
    bson_t *expected = support_json("{'0': {'filter': {'email': {'%in': ['a', 'b']}}},"
                                    " '1': {'filter': {'shop': {'%eq': 's'}, 'n': {'%eq': 2}}},"
                                    " '2': {'filter': {'%and': [{'live': true}, {'code': {'%eq': null}}]}},"
                                    " '3': {'filter': {'shop': {'%eq': 't'}, 'n': {'%eq': null}}}}");
    if (!bson_equal(expected, &filters)) {
        char *got = bson_as_relaxed_extended_json(&filters, NULL);
        fail_msg("filters %s", got);
    }
    assert_int_equal(count, 4);
    bson_destroy(expected);
    /* Against the document before the update: only the keys it did not hold, and a
     * partial index's always (the document may enter its filter only now). */
    bson_t *updated = support_json("{'_id': 1, 'email': ['a', 'c'], 'shop': 's', 'n': 2, 'live': true}");
    bson_reinit(&filters);
    count = 0;
    plan_unique_keys_of_document(indexes, updated, first, &filters, &count);
    expected = support_json("{'0': {'filter': {'email': {'%in': ['a', 'c']}}},"
                            " '1': {'filter': {'%and': [{'live': true}, {'code': {'%eq': null}}]}}}");
    if (!bson_equal(expected, &filters)) {
        char *got = bson_as_relaxed_extended_json(&filters, NULL);
        fail_msg("filters against the document before %s", got);
    }
    assert_int_equal(count, 2);
    bson_destroy(expected);
    bson_destroy(updated);
    bson_destroy(&filters);
    bson_destroy(first);
    bson_destroy(second);
    bson_destroy(indexes);
}

static void test_writes_without_policy_and_explained(void **state)
{
    (void)state;
    static const char *const writes[] = {
        "{'insert': 'orders', 'documents': [{'_id': 1}]}",
        UPDATE("{'q': {'_id': 5}, 'u': {'$set': {'a': 1}}}"),
        DELETE("{'q': {}, 'limit': 0}"),
        "{'findAndModify': 'orders', 'query': {'_id': 5}, 'remove': true}",
        /* malformed, but the archive is this namespace's only home */
        "{'insert': 'orders'}",
    };
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        plan_decision_t decision;
        bson_error_t error;
        assert_true(plan_with(writes[i], NO_POLICY, &decision, &error));
        assert_int_equal(decision.route, PLAN_ROUTE_ARCHIVE);
        assert_int_equal(decision.reason, PLAN_REASON_NO_POLICY);
        assert_int_equal(decision.kind, PLAN_KIND_WRITE);
        assert_false(decision.needs_fault_in);
        plan_decision_cleanup(&decision);
    }

    /* explain of a write: fast tier, nothing faulted in, nothing to check */
    static const char *const explained[] = {
        "{'explain': {'update': 'orders', 'updates': [{'q': {'_id': 5}, 'u': {'$set': {'a': 1}}}]}, "
        "'verbosity': 'queryPlanner'}",
        "{'explain': {'delete': 'orders', 'deletes': [{'q': {}, 'limit': 0}]}}",
        "{'explain': {'findAndModify': 'orders', 'query': {'_id': 5}, 'remove': true}}",
        /* refused when run (its inserted _id is unknowable), fine when explained */
        "{'explain': {'update': 'orders', 'updates': [{'q': {'a': 1}, 'u': [{'$set': {'b': 1}}], 'upsert': true}]}}",
    };
    for (size_t i = 0; i < sizeof explained / sizeof explained[0]; i++) {
        plan_decision_t decision;
        bson_error_t error;
        assert_true(plan_with(explained[i], WITH_HORIZON, &decision, &error));
        assert_int_equal(decision.route, PLAN_ROUTE_FAST);
        assert_true(decision.is_explain);
        assert_false(decision.needs_fault_in);
        assert_int_equal(decision.fault_in_id_count + decision.fault_in_filter_count, 0);
        assert_true(bson_empty(&decision.fault_in_ids) && bson_empty(&decision.fault_in_filters));
        assert_int_equal(strncmp(decision.reason_text, "explain: ", 9), 0);
        plan_decision_cleanup(&decision);
    }
}

typedef struct error_case {
    const char *command;
    setup_t setup;
    uint32_t code;
    const char *message; /* a substring of the message */
} error_case_t;

static void test_refused_commands(void **state)
{
    (void)state;
    static const error_case_t cases[] = {
        {"{'applyOps': [{'op': 'i', 'ns': 'shop.orders', 'o': {'_id': 1}}]}", NO_POLICY, 59,
         "no such command: 'applyOps'"},
        {"{'bulkWrite': 1, 'ops': [], 'nsInfo': []}", NO_POLICY, 59, "no such command: 'bulkWrite'"},
        {"{'applyOps': []}", WITH_HORIZON, 59, "no such command"},
        /* malformed writes on a policy namespace: mongod's IDL errors, never a route */
        {"{'insert': 'orders'}", WITH_HORIZON, 40414, "BSON field 'insert.documents' is missing but a required field"},
        {"{'insert': 'orders', 'documents': 5}", WITH_HORIZON, 14,
         "BSON field 'insert.documents' is the wrong type 'int', expected type 'array'"},
        {"{'insert': 'orders', 'documents': [{'_id': 1}, 'x']}", WITH_HORIZON, 14,
         "BSON field 'insert.documents.1' is the wrong type 'string', expected type 'object'"},
        {"{'update': 'orders'}", WITH_HORIZON, 40414, "'update.updates' is missing"},
        {"{'update': 'orders', 'updates': {'q': {}}}", WITH_HORIZON, 14, "'update.updates' is the wrong type 'object'"},
        {UPDATE("5"), WITH_HORIZON, 14, "'update.updates.0' is the wrong type 'int'"},
        {UPDATE("{'u': {'$set': {'a': 1}}}"), WITH_HORIZON, 40414, "'update.updates.q' is missing"},
        {UPDATE("{'q': [], 'u': {'$set': {'a': 1}}}"), WITH_HORIZON, 14,
         "'update.updates.q' is the wrong type 'array'"},
        {UPDATE("{'q': {}}"), WITH_HORIZON, 40414, "'update.updates.u' is missing"},
        {UPDATE("{'q': {}, 'u': 5}"), WITH_HORIZON, 9, "Update argument must be either an object or an array"},
        {UPDATE("{'q': {}, 'u': {'$set': {'a': 1}}, 'upsert': 'yes'}"), WITH_HORIZON, 14,
         "'update.updates.upsert' is the wrong type 'string'"},
        {UPDATE("{'q': {}, 'u': {'$set': {'a': 1}}, 'collation': 'fr'}"), WITH_HORIZON, 14,
         "'update.updates.collation' is the wrong type 'string'"},
        {"{'delete': 'orders', 'deletes': [{'limit': 1}]}", WITH_HORIZON, 40414, "'delete.deletes.q' is missing"},
        {"{'delete': 'orders', 'deletes': 'x'}", WITH_HORIZON, 14, "'delete.deletes' is the wrong type 'string'"},
        {"{'findAndModify': 'orders', 'query': 5, 'remove': true}", WITH_HORIZON, 14,
         "'findAndModify.query' is the wrong type 'int'"},
        {"{'findAndModify': 'orders', 'query': {}, 'update': 'x'}", WITH_HORIZON, 9, "Update argument"},
        {"{'findAndModify': 'orders', 'query': {}, 'remove': 'x'}", WITH_HORIZON, 14, "'findAndModify.remove'"},
        /* upserts whose inserted _id cannot be known */
        {UPDATE("{'q': {'sku': 'x'}, 'u': [{'$set': {'a': 1}}], 'upsert': true}"), WITH_HORIZON, 115,
         "aggregation pipeline"},
        {UPDATE("{'q': {'_id.a': 1}, 'u': {'$set': {'b': 1}}, 'upsert': true}"), WITH_HORIZON, 115, "sub-path of _id"},
        {UPDATE("{'q': {'$and': [{'_id.a': 1}]}, 'u': {'$set': {'b': 1}}, 'upsert': true}"), WITH_HORIZON, 115,
         "sub-path of _id"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$inc': {'_id': 1}}, 'upsert': true}"), WITH_HORIZON, 115,
         "other than by $set"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$set': {'_id.a': 1}}, 'upsert': true}"), WITH_HORIZON, 115,
         "other than by $set"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$rename': {'a': '_id'}}, 'upsert': true}"), WITH_HORIZON, 115,
         "other than by $set"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'$set': {'_id': 1}, '$setOnInsert': {'_id': 2}}, 'upsert': true}"),
         WITH_HORIZON, 115, "shop.orders"},
        {UPDATE("{'q': {'sku': 'x'}, 'u': {'_id': 1, '_id': 2}, 'upsert': true}"), WITH_HORIZON, 115, "_id"},
        {"{'findAndModify': 'orders', 'query': {'sku': 'x'}, 'update': [{'$set': {'a': 1}}], 'upsert': true}",
         WITH_HORIZON, 115, "aggregation pipeline"},
        /* an empty command */
        {"{}", WITH_HORIZON, 9, "empty"},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_decision_t decision;
        bson_error_t error = {0};
        bson_t *command = strcmp(cases[i].command, "{}") == 0 ? bson_new() : command_json(cases[i].command);
        const plan_policy_t *policy = cases[i].setup == NO_POLICY ? NULL : &created_at_policy;
        bool ok = plan_command(command, policy, &valid_coverage, &decision, &error);
        if (ok || error.domain != TC_ERROR_DOMAIN || error.code != cases[i].code ||
            strstr(error.message, cases[i].message) == NULL) {
            print_error("%s: ok %d, code %u \"%s\"; expected %u \"%s\"\n", cases[i].command, ok, error.code,
                        error.message, cases[i].code, cases[i].message);
            failures++;
        } else if (decision.route != PLAN_ROUTE_ARCHIVE || decision.needs_fault_in) {
            print_error("%s: a refused command still has route %s\n", cases[i].command,
                        plan_route_name(decision.route));
            failures++;
        }
        bson_destroy(command);
        plan_decision_cleanup(&decision);
    }
    assert_int_equal(failures, 0);

    /* a policy without a usable time field is a caller's bug */
    plan_decision_t decision;
    bson_error_t error;
    bson_t *command = command_json(FIND("{}"));
    const plan_policy_t empty = {.time_field = ""};
    const plan_policy_t missing = {.time_field = NULL};
    assert_false(plan_command(command, &empty, &valid_coverage, &decision, &error));
    plan_decision_cleanup(&decision);
    assert_false(plan_command(command, &missing, &valid_coverage, &decision, &error));
    plan_decision_cleanup(&decision);
    assert_false(plan_command(NULL, NULL, NULL, &decision, &error));
    plan_decision_cleanup(&decision);
    bson_destroy(command);
}

/* ---- every other command ------------------------------------------------- */

static void test_other_commands(void **state)
{
    (void)state;
    static const struct {
        const char *command;
        setup_t setup;
        plan_route_t route;
        plan_reason_t reason;
        plan_kind_t kind;
        bool both_tiers;
    } cases[] = {
        {"{'getMore': {'$numberLong': '12'}, 'collection': 'orders'}", WITH_HORIZON, PLAN_ROUTE_CURSOR_OWNER,
         PLAN_REASON_CURSOR, PLAN_KIND_CURSOR, false},
        {"{'getMore': {'$numberLong': '12'}, 'collection': 'orders'}", NO_POLICY, PLAN_ROUTE_CURSOR_OWNER,
         PLAN_REASON_CURSOR, PLAN_KIND_CURSOR, false},
        {"{'killCursors': 'orders', 'cursors': [{'$numberLong': '12'}]}", WITH_HORIZON, PLAN_ROUTE_CURSOR_OWNER,
         PLAN_REASON_CURSOR, PLAN_KIND_CURSOR, false},
        {"{'commitTransaction': 1, 'txnNumber': {'$numberLong': '1'}, 'autocommit': false, '$db': 'admin'}",
         NO_POLICY, PLAN_ROUTE_TRANSACTION_OWNER, PLAN_REASON_TRANSACTION, PLAN_KIND_TRANSACTION, false},
        {"{'abortTransaction': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_TRANSACTION_OWNER,
         PLAN_REASON_TRANSACTION, PLAN_KIND_TRANSACTION, false},
        {"{'create': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG, PLAN_KIND_CATALOG, true},
        {"{'create': 'orders'}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG, PLAN_KIND_CATALOG, true},
        {"{'drop': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG, PLAN_KIND_CATALOG, true},
        {"{'createIndexes': 'orders', 'indexes': [{'key': {'sku': 1}, 'name': 'sku_1', 'unique': true}]}",
         WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG, PLAN_KIND_CATALOG, true},
        {"{'dropIndexes': 'orders', 'index': '*'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG,
         PLAN_KIND_CATALOG, true},
        {"{'deleteIndexes': 'orders', 'index': '*'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG,
         PLAN_KIND_CATALOG, true},
        {"{'dropDatabase': 1}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG, PLAN_KIND_CATALOG, true},
        {"{'renameCollection': 'shop.orders', 'to': 'shop.old', '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_CATALOG, PLAN_KIND_CATALOG, true},
        {"{'collMod': 'orders', 'validator': {}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG,
         PLAN_KIND_CATALOG, true},
        {"{'endSessions': [{'id': 1}], '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_SESSION, true},
        {"{'killSessions': [], '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_SESSION, true},
        {"{'hello': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_PROXY, PLAN_REASON_ANSWERED_BY_PROXY,
         PLAN_KIND_PROXY, false},
        {"{'isMaster': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_PROXY, PLAN_REASON_ANSWERED_BY_PROXY,
         PLAN_KIND_PROXY, false},
        {"{'ismaster': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_PROXY, PLAN_REASON_ANSWERED_BY_PROXY,
         PLAN_KIND_PROXY, false},
        {"{'ping': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_PROXY, PLAN_REASON_ANSWERED_BY_PROXY, PLAN_KIND_PROXY,
         false},
        {"{'thermoclineStatus': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_PROXY, PLAN_REASON_ANSWERED_BY_PROXY,
         PLAN_KIND_PROXY, false},
        /* not routed: the archive answers */
        {"{'listDatabases': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        {"{'createUser': 'bob', 'pwd': 'x', 'roles': []}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        {"{'listCollections': 1}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER, false},
        {"{'listIndexes': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER,
         false},
        {"{'collStats': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER, false},
        {"{'serverStatus': 1, '$db': 'admin'}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        {"{'saslStart': 1, 'mechanism': 'SCRAM-SHA-256', 'payload': ''}", NO_POLICY, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER, false},
        {"{'convertToCapped': 'orders', 'size': 1000}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        /* names are case-sensitive, as in mongod */
        {"{'FIND': 'orders', 'filter': {'createdAt': {'$gte': " IN "}}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER, false},
        {"{'Hello': 1}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER, false},
        /* a command whose first field is $db */
        {"{'$db': 'shop', 'find': 'orders'}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        /* explain */
        {"{'explain': {'find': 'orders', 'filter': {" Q_IN "}}, 'verbosity': 'executionStats'}", WITH_HORIZON,
         PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON, PLAN_KIND_READ, false},
        {"{'explain': {'find': 'orders', 'filter': {'_id': 5}}}", WITH_HORIZON, PLAN_ROUTE_FAST_THEN_ARCHIVE,
         PLAN_REASON_POINT_READ, PLAN_KIND_READ, false},
        {"{'explain': {'count': 'orders'}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE,
         PLAN_KIND_READ, false},
        {"{'explain': {'getMore': {'$numberLong': '1'}, 'collection': 'orders'}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE,
         PLAN_REASON_NOT_ROUTED, PLAN_KIND_OTHER, false},
        {"{'explain': {'explain': {'find': 'orders'}}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        {"{'explain': {'drop': 'orders'}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
         PLAN_KIND_OTHER, false},
        {"{'explain': 5}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED, PLAN_KIND_OTHER, false},
        {"{'explain': {}}", WITH_HORIZON, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED, PLAN_KIND_OTHER, false},
        {"{'explain': {'find': 'orders', 'filter': {" Q_IN "}}}", NO_POLICY, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY,
         PLAN_KIND_READ, false},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_decision_t decision;
        bson_error_t error = {0};
        if (!plan_with(cases[i].command, cases[i].setup, &decision, &error)) {
            print_error("%s: failed: %s\n", cases[i].command, error.message);
            failures++;
        } else if (decision.route != cases[i].route || decision.reason != cases[i].reason ||
                   decision.kind != cases[i].kind || decision.applies_to_both_tiers != cases[i].both_tiers ||
                   decision.needs_fault_in) {
            print_error("%s: got %s/%s/%s both %d (%s)\n", cases[i].command, plan_route_name(decision.route),
                        plan_reason_name(decision.reason), plan_kind_name(decision.kind),
                        decision.applies_to_both_tiers, decision.reason_text);
            failures++;
        }
        plan_decision_cleanup(&decision);
    }
    assert_int_equal(failures, 0);
}

static void test_transactions_flagged(void **state)
{
    (void)state;
    plan_decision_t decision;
    bson_error_t error;
    assert_true(plan_with("{'find': 'orders', 'filter': {" Q_IN "}, 'lsid': {'id': 1}, 'txnNumber': "
                          "{'$numberLong': '3'}, 'autocommit': false, 'startTransaction': true}",
                          WITH_HORIZON, &decision, &error));
    assert_true(decision.in_transaction);
    assert_int_equal(decision.route, PLAN_ROUTE_FAST);
    plan_decision_cleanup(&decision);
    assert_true(plan_with(FIND("{" Q_IN "}"), WITH_HORIZON, &decision, &error));
    assert_false(decision.in_transaction);
    plan_decision_cleanup(&decision);
}

static void test_reason_text(void **state)
{
    (void)state;
    plan_decision_t decision;
    bson_error_t error;
    assert_true(plan_with(FIND("{'createdAt': {'$gte': " IN "}}"), WITH_HORIZON, &decision, &error));
    assert_string_equal(decision.reason_text, "find.filter createdAt >= 2026-11-01T00:00:00.000Z is inside the "
                                              "horizon 2026-10-01T00:00:00.000Z");
    assert_true(decision.has_lower_bound && decision.lower_bound_inclusive && decision.lower_bound_ms == IN_MS);
    plan_decision_cleanup(&decision);

    assert_true(plan_with(FIND("{'createdAt': {'$gt': " OLD "}}"), WITH_HORIZON, &decision, &error));
    assert_string_equal(decision.reason_text, "find.filter createdAt > 2026-09-01T00:00:00.000Z starts before the "
                                              "horizon 2026-10-01T00:00:00.000Z");
    plan_decision_cleanup(&decision);

    assert_true(plan_with(FIND("{'createdAt': {'$gte': {'$date': {'$numberLong': '-1'}}}}"), WITH_HORIZON,
                          &decision, &error));
    assert_non_null(strstr(decision.reason_text, "1969-12-31T23:59:59.999Z"));
    plan_decision_cleanup(&decision);

    assert_true(plan_with("{'insert': 'orders', 'documents': [{'_id': 1}, {'_id': 2}]}", WITH_HORIZON, &decision,
                          &error));
    assert_string_equal(decision.reason_text,
                        "writes run on the fast tier; check 2 new _ids against the archive (unique _id)");
    plan_decision_cleanup(&decision);

    static const struct {
        plan_route_t route;
        const char *name;
    } routes[] = {{PLAN_ROUTE_ARCHIVE, "archive"},           {PLAN_ROUTE_FAST, "fast"},
                  {PLAN_ROUTE_FAST_THEN_ARCHIVE, "fast-then-archive"}, {PLAN_ROUTE_CURSOR_OWNER, "cursor-owner"},
                  {PLAN_ROUTE_TRANSACTION_OWNER, "transaction-owner"}, {PLAN_ROUTE_PROXY, "proxy"}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        assert_string_equal(plan_route_name(routes[i].route), routes[i].name);
    }
    for (int reason = PLAN_REASON_NO_POLICY; reason <= PLAN_REASON_MALFORMED; reason++) {
        assert_string_not_equal(plan_reason_name((plan_reason_t)reason), "unknown");
    }
    for (int kind = PLAN_KIND_READ; kind <= PLAN_KIND_OTHER; kind++) {
        assert_string_not_equal(plan_kind_name((plan_kind_t)kind), "unknown");
    }
}

/* ---- namespaces ---------------------------------------------------------- */

static void test_command_namespace(void **state)
{
    (void)state;
    static const struct {
        const char *command;
        const char *namespace; /* NULL: none */
    } cases[] = {
        {"{'find': 'orders'}", "shop.orders"},
        {"{'aggregate': 'orders', 'pipeline': []}", "shop.orders"},
        {"{'aggregate': 1, 'pipeline': [{'$currentOp': {}}]}", NULL},
        {"{'count': 'orders'}", "shop.orders"},
        {"{'distinct': 'orders', 'key': 'a'}", "shop.orders"},
        {"{'insert': 'orders', 'documents': []}", "shop.orders"},
        {"{'update': 'orders', 'updates': []}", "shop.orders"},
        {"{'delete': 'orders', 'deletes': []}", "shop.orders"},
        {"{'findAndModify': 'orders'}", "shop.orders"},
        {"{'mapReduce': 'orders'}", "shop.orders"},
        {"{'getMore': {'$numberLong': '5'}, 'collection': 'orders'}", "shop.orders"},
        {"{'getMore': {'$numberLong': '5'}}", NULL},
        {"{'killCursors': 'orders', 'cursors': []}", "shop.orders"},
        {"{'explain': {'find': 'orders'}}", "shop.orders"},
        {"{'explain': {'explain': {'find': 'orders'}}}", NULL},
        {"{'explain': 5}", NULL},
        {"{'create': 'orders'}", "shop.orders"},
        {"{'createIndexes': 'orders', 'indexes': []}", "shop.orders"},
        {"{'renameCollection': 'shop.orders', 'to': 'shop.x', '$db': 'admin'}", "shop.orders"},
        {"{'renameCollection': 'orders', 'to': 'x', '$db': 'admin'}", NULL},
        {"{'dropDatabase': 1}", NULL},
        {"{'listDatabases': 1, '$db': 'admin'}", NULL},
        {"{'createUser': 'bob'}", NULL},
        {"{'find': 5}", NULL},
        {"{'find': ''}", NULL},
        {"{'find': 'orders', '$db': 5}", NULL},
        {"{'find': 'orders', '$db': ''}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char namespace[PLAN_NAMESPACE_SIZE] = "";
        bson_t *command = command_json(cases[i].command);
        bool found = plan_command_namespace(command, namespace, sizeof namespace);
        if (found != (cases[i].namespace != NULL) || (found && strcmp(namespace, cases[i].namespace) != 0)) {
            fail_msg("%s: found %d '%s'", cases[i].command, found, namespace);
        }
        bson_destroy(command);
    }
    /* no $db, and a buffer too small */
    bson_t *command = support_json("{'find': 'orders'}");
    char namespace[PLAN_NAMESPACE_SIZE];
    assert_false(plan_command_namespace(command, namespace, sizeof namespace));
    bson_destroy(command);
    command = command_json("{'find': 'orders'}");
    assert_false(plan_command_namespace(command, namespace, 11));
    assert_true(plan_command_namespace(command, namespace, 12));
    assert_string_equal(namespace, "shop.orders");
    bson_destroy(command);
}

/* ---- properties against the matcher ------------------------------------- */

/* A seeded generator, so a failure reproduces. */
static uint64_t rng_state;

static uint32_t rng_next(uint32_t bound)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % bound);
}

static const int64_t date_points[] = {HORIZON_MS - 2, HORIZON_MS - 1, HORIZON_MS, HORIZON_MS + 1, HORIZON_MS + 2,
                                      OLD_MS, IN_MS};
#define DATE_POINT_COUNT (sizeof date_points / sizeof date_points[0])

static void append_random_date(bson_t *document, const char *key)
{
    BSON_APPEND_DATE_TIME(document, key, date_points[rng_next(DATE_POINT_COUNT)]);
}

/* One operand for `createdAt: operand`: provable shapes and traps. */
static void append_random_operand(bson_t *document, const char *key)
{
    static const char *const operators[] = {"$gte", "$gt", "$eq", "$lt", "$lte", "$ne"};
    bson_t child;
    bson_t array;
    switch (rng_next(9)) {
    case 0:
        append_random_date(document, key);
        break;
    case 1:
    case 2:
    case 3:
        bson_append_document_begin(document, key, -1, &child);
        for (uint32_t i = 0, count = 1 + rng_next(2); i < count; i++) {
            append_random_date(&child, operators[rng_next(6)]);
        }
        bson_append_document_end(document, &child);
        break;
    case 4:
        bson_append_document_begin(document, key, -1, &child);
        bson_append_array_begin(&child, "$in", -1, &array);
        for (uint32_t i = 0, count = 1 + rng_next(3); i < count; i++) {
            char index[16];
            snprintf(index, sizeof index, "%u", i);
            if (rng_next(6) == 0) {
                BSON_APPEND_UTF8(&array, index, "2026");
            } else {
                append_random_date(&array, index);
            }
        }
        bson_append_array_end(&child, &array);
        bson_append_document_end(document, &child);
        break;
    case 5:
        bson_append_array_begin(document, key, -1, &array);
        append_random_date(&array, "0");
        bson_append_array_end(document, &array);
        break;
    case 6:
        BSON_APPEND_NULL(document, key);
        break;
    case 7:
        bson_append_document_begin(document, key, -1, &child);
        bson_t inner;
        bson_append_document_begin(&child, "$not", -1, &inner);
        append_random_date(&inner, "$lt");
        bson_append_document_end(&child, &inner);
        bson_append_document_end(document, &child);
        break;
    default:
        BSON_APPEND_INT64(document, key, HORIZON_MS + 5);
        break;
    }
}

static void append_random_filter(bson_t *filter, int depth)
{
    for (uint32_t i = 0, count = 1 + rng_next(3); i < count; i++) {
        uint32_t kind = depth < 3 ? rng_next(6) : rng_next(3);
        bson_t array;
        switch (kind) {
        case 0:
        case 1:
            append_random_operand(filter, "createdAt");
            break;
        case 2:
            BSON_APPEND_INT32(filter, rng_next(2) ? "x" : "createdAt.sub", (int32_t)rng_next(2));
            break;
        default: {
            const char *logical = kind == 3 ? "$and" : kind == 4 ? "$or" : "$nor";
            bson_append_array_begin(filter, logical, -1, &array);
            for (uint32_t j = 0, branches = 1 + rng_next(2); j < branches; j++) {
                char index[16];
                bson_t branch;
                snprintf(index, sizeof index, "%u", j);
                bson_append_document_begin(&array, index, -1, &branch);
                append_random_filter(&branch, depth + 1);
                bson_append_document_end(&array, &branch);
            }
            bson_append_array_end(filter, &array);
            break;
        }
        }
    }
}

static bson_t *random_document(void)
{
    bson_t *document = bson_new();
    bson_t child;
    BSON_APPEND_INT32(document, "x", (int32_t)rng_next(2));
    switch (rng_next(7)) {
    case 0: break; /* missing */
    case 1: BSON_APPEND_NULL(document, "createdAt"); break;
    case 2:
        bson_append_array_begin(document, "createdAt", -1, &child);
        append_random_date(&child, "0");
        append_random_date(&child, "1");
        bson_append_array_end(document, &child);
        break;
    case 3:
        bson_append_document_begin(document, "createdAt", -1, &child);
        append_random_date(&child, "sub");
        bson_append_document_end(document, &child);
        break;
    case 4: BSON_APPEND_UTF8(document, "createdAt", "2026"); break;
    default: append_random_date(document, "createdAt"); break;
    }
    return document;
}

/* Whatever the planner proves, the matcher agrees: every document a filter matches
 * also matches {createdAt: {$gte or $gt: bound}}; and a fast route means every such
 * document lies inside the horizon. */
static void test_bound_soundness_against_matcher(void **state)
{
    (void)state;
    enum { FILTERS = 2500, DOCUMENTS = 40 };
    bson_t *documents[DOCUMENTS];
    unsigned proved = 0, fast = 0, matched_proved = 0;
    rng_state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < DOCUMENTS; i++) {
        documents[i] = random_document();
    }
    bson_t *horizon_filter = BCON_NEW("createdAt", "{", "$gte", BCON_DATE_TIME(HORIZON_MS), "}");
    match_expression_t *horizon = match_compile(horizon_filter, NULL);
    assert_non_null(horizon);
    for (int f = 0; f < FILTERS; f++) {
        bson_t filter = BSON_INITIALIZER;
        int64_t bound;
        bool inclusive;
        append_random_filter(&filter, 0);
        match_expression_t *expression = match_compile(&filter, NULL);
        if (expression != NULL && plan_filter_lower_bound(&filter, "createdAt", &bound, &inclusive)) {
            proved++;
            bson_t *bound_filter = BCON_NEW("createdAt", "{", inclusive ? "$gte" : "$gt", BCON_DATE_TIME(bound), "}");
            match_expression_t *implied = match_compile(bound_filter, NULL);
            assert_non_null(implied);

            plan_decision_t decision;
            bson_error_t error;
            bson_t command = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&command, "find", "orders");
            BSON_APPEND_DOCUMENT(&command, "filter", &filter);
            BSON_APPEND_UTF8(&command, "$db", "shop");
            assert_true(plan_command(&command, &created_at_policy, &valid_coverage, &decision, &error));
            bool is_fast = decision.route == PLAN_ROUTE_FAST;
            fast += is_fast;

            for (int d = 0; d < DOCUMENTS; d++) {
                if (!match_document(expression, documents[d])) {
                    continue;
                }
                matched_proved++;
                if (!match_document(implied, documents[d]) || (is_fast && !match_document(horizon, documents[d]))) {
                    char *filter_json = bson_as_relaxed_extended_json(&filter, NULL);
                    char *document_json = bson_as_relaxed_extended_json(documents[d], NULL);
                    fail_msg("unsound: filter %s matches %s, bound %" PRId64 " inclusive %d fast %d", filter_json,
                             document_json, bound, inclusive, is_fast);
                }
            }
            plan_decision_cleanup(&decision);
            bson_destroy(&command);
            match_destroy(implied);
            bson_destroy(bound_filter);
        }
        match_destroy(expression);
        bson_destroy(&filter);
    }
    /* the generator must reach the interesting cases for the test to mean anything */
    assert_true(proved > 300);
    assert_true(fast > 100);
    assert_true(matched_proved > 1000);
    match_destroy(horizon);
    bson_destroy(horizon_filter);
    for (int i = 0; i < DOCUMENTS; i++) {
        bson_destroy(documents[i]);
    }
}

/* A point read's ids are exactly the documents the filter matches, under the
 * comparison the router must use (order_compare_values: 1, 1.0 and 1L are one id). */
static void test_point_ids_against_matcher(void **state)
{
    (void)state;
    static const char *const ids[] = {
        "1", "1.0", "{'$numberLong': '1'}", "2", "'a'", "'A'", "null", "{'a': 1}", "{'a': 1.0}", "{'a': 1, 'b': 2}",
        OID, IN, "{'$minKey': 1}", "true", "''",
    };
    static const char *const filters[] = {
        "{'_id': 1}",
        "{'_id': {'$eq': 1.0}}",
        "{'_id': {'$in': [2, 'a', null]}}",
        "{'_id': {'a': 1}}",
        "{'_id': {'$in': [{'a': 1}, true, " OID "]}}",
        "{'_id': null}",
        "{'_id': " IN "}",
        "{'_id': {'$in': [{'$minKey': 1}, '']}}",
        "{'_id': {'$eq': 'A'}}",
    };
    enum { ID_COUNT = sizeof ids / sizeof ids[0] };
    bson_t *documents[ID_COUNT];
    for (size_t i = 0; i < ID_COUNT; i++) {
        char text[256];
        snprintf(text, sizeof text, "{'_id': %s, 'v': %zu}", ids[i], i);
        documents[i] = support_json(text);
    }
    for (size_t f = 0; f < sizeof filters / sizeof filters[0]; f++) {
        bson_t *filter = support_json(filters[f]);
        bson_t point_ids = BSON_INITIALIZER;
        uint32_t count;
        assert_true(plan_filter_point_ids(filter, &point_ids, &count));
        match_expression_t *expression = match_compile(filter, NULL);
        assert_non_null(expression);
        for (size_t d = 0; d < ID_COUNT; d++) {
            bson_iter_t id;
            bson_iter_t wanted;
            bool listed = false;
            assert_true(bson_iter_init_find(&id, documents[d], "_id"));
            bson_iter_init(&wanted, &point_ids);
            while (bson_iter_next(&wanted)) {
                listed = listed || order_compare_iters(&id, &wanted) == 0;
            }
            if (listed != match_document(expression, documents[d])) {
                fail_msg("filter %s, document %zu: listed %d, matched %d", filters[f], d, listed, !listed);
            }
        }
        match_destroy(expression);
        bson_destroy(&point_ids);
        bson_destroy(filter);
    }
    for (size_t i = 0; i < ID_COUNT; i++) {
        bson_destroy(documents[i]);
    }
}

/* Pinned ids: any document a write's filter matches has one of the pinned _ids. */
static void test_pinned_ids_against_matcher(void **state)
{
    (void)state;
    static const char *const filters[] = {
        "{'_id': 1, 'x': 1}",
        "{'x': 1, '$and': [{'y': 2}, {'_id': {'$in': [1, 2]}}]}",
        "{'_id': {'$eq': 2, '$gt': 0}}",
        "{'_id': {'$in': [3, 1], '$ne': 3}}",
        "{'$and': [{'$and': [{'_id': 3}]}]}",
    };
    rng_state = 12345;
    for (size_t f = 0; f < sizeof filters / sizeof filters[0]; f++) {
        bson_t *filter = support_json(filters[f]);
        bson_t pinned = BSON_INITIALIZER;
        uint32_t count;
        assert_true(planner_filter_pinned_ids(filter, &pinned, &count));
        assert_int_equal(count, bson_count_keys(&pinned));
        match_expression_t *expression = match_compile(filter, NULL);
        assert_non_null(expression);
        for (int d = 0; d < 200; d++) {
            bson_t *document = BCON_NEW("_id", BCON_INT32((int32_t)rng_next(5)), "x", BCON_INT32((int32_t)rng_next(2)),
                                        "y", BCON_INT32((int32_t)rng_next(3)));
            if (match_document(expression, document)) {
                bson_iter_t id;
                bson_iter_t wanted;
                bool listed = false;
                bson_iter_init_find(&id, document, "_id");
                bson_iter_init(&wanted, &pinned);
                while (bson_iter_next(&wanted)) {
                    listed = listed || order_compare_iters(&id, &wanted) == 0;
                }
                assert_true(listed);
            }
            bson_destroy(document);
        }
        match_destroy(expression);
        bson_destroy(&pinned);
        bson_destroy(filter);
    }
    /* filters that pin nothing */
    static const char *const unpinned[] = {
        "{'x': 1}", "{'_id': {'$gt': 1}}", "{'$or': [{'_id': 1}]}", "{'_id': " REGEX "}", "{'_id': {'$in': []}}",
        "{'_id': 1, '_id': 2}", "{'_id.a': 1}",
    };
    for (size_t f = 0; f < sizeof unpinned / sizeof unpinned[0]; f++) {
        bson_t *filter = support_json(unpinned[f]);
        bson_t pinned = BSON_INITIALIZER;
        uint32_t count;
        assert_false(planner_filter_pinned_ids(filter, &pinned, &count));
        assert_true(bson_empty(&pinned));
        bson_destroy(&pinned);
        bson_destroy(filter);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lower_bound_provable),
        cmocka_unit_test(test_lower_bound_unprovable),
        cmocka_unit_test(test_lower_bound_dotted_time_field),
        cmocka_unit_test(test_lower_bound_arguments),
        cmocka_unit_test(test_find_routes),
        cmocka_unit_test(test_count_distinct_routes),
        cmocka_unit_test(test_aggregate_routes),
        cmocka_unit_test(test_pipeline_flags),
        cmocka_unit_test(test_point_reads),
        cmocka_unit_test(test_inserts),
        cmocka_unit_test(test_updates_and_deletes),
        cmocka_unit_test(test_write_fault_in_filters),
        cmocka_unit_test(test_unique_key_fault_ins),
        cmocka_unit_test(test_unique_keys_computed),
        cmocka_unit_test(test_unique_keys_of_document),
        cmocka_unit_test(test_writes_without_policy_and_explained),
        cmocka_unit_test(test_refused_commands),
        cmocka_unit_test(test_other_commands),
        cmocka_unit_test(test_transactions_flagged),
        cmocka_unit_test(test_reason_text),
        cmocka_unit_test(test_command_namespace),
        cmocka_unit_test(test_bound_soundness_against_matcher),
        cmocka_unit_test(test_point_ids_against_matcher),
        cmocka_unit_test(test_pinned_ids_against_matcher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
