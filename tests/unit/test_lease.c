/* The rule a standby follows with a worker's lease (src/tier/lease.c): take a
 * missing, released or own lease at once, and another's only once it has stayed
 * unchanged for leaseTimeout on the standby's own clock; and the fence a fenced
 * state write carries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include "query/match.h"
#include "tier/lease.h"
#include "tier/tier_private.h"

#include <string.h>

#define ME "host-a pid 10 #1"
#define MY_CLAIM "host-a 127.0.0.1:27017"

static tier_lease_view_t view(const char *holder, const char *claim, int64_t term, int64_t renewals)
{
    tier_lease_view_t seen = {.exists = true, .term = term, .renewals = renewals};
    snprintf(seen.holder, sizeof seen.holder, "%s", holder);
    snprintf(seen.claim, sizeof seen.claim, "%s", claim);
    return seen;
}

static void test_a_standby_takes_what_nobody_holds_at_once(void **state)
{
    (void)state;
    tier_lease_view_t missing = {.exists = false};
    assert_int_equal(tier_lease_decide(&missing, ME, MY_CLAIM, 0, 0, 2000), TIER_LEASE_CREATE);
    tier_lease_view_t released = view("", "", 4, 90);
    assert_int_equal(tier_lease_decide(&released, ME, MY_CLAIM, 1000, 1000, 2000), TIER_LEASE_TAKE_OVER);
    tier_lease_view_t mine = view(ME, MY_CLAIM, 4, 90);
    assert_int_equal(tier_lease_decide(&mine, ME, MY_CLAIM, 1000, 1000, 2000), TIER_LEASE_TAKE_OVER);
    /* A dead process on this host and port: the port proves it is gone. */
    tier_lease_view_t claimed = view("host-a pid 9 #7", MY_CLAIM, 4, 90);
    assert_int_equal(tier_lease_decide(&claimed, ME, MY_CLAIM, 1000, 1000, 2000), TIER_LEASE_TAKE_OVER);
    /* A worker process has no claim: it waits like any other standby. */
    assert_int_equal(tier_lease_decide(&claimed, ME, "", 1000, 1000, 2000), TIER_LEASE_WAIT);
}

static void test_another_holder_is_replaced_only_after_the_timeout(void **state)
{
    (void)state;
    tier_lease_view_t other = view("host-b pid 3 #2", "host-b 127.0.0.1:27017", 4, 90);
    assert_int_equal(tier_lease_decide(&other, ME, MY_CLAIM, 1000, 1000, 2000), TIER_LEASE_WAIT);
    assert_int_equal(tier_lease_decide(&other, ME, MY_CLAIM, 1000, 2999, 2000), TIER_LEASE_WAIT);
    assert_int_equal(tier_lease_decide(&other, ME, MY_CLAIM, 1000, 3000, 2000), TIER_LEASE_TAKE_OVER);
    /* A renewal (or a new term) is a new document: the wait starts again. */
    tier_lease_view_t renewed = view("host-b pid 3 #2", "host-b 127.0.0.1:27017", 4, 91);
    assert_false(tier_lease_view_same(&other, &renewed));
    tier_lease_view_t new_term = view("host-b pid 3 #2", "host-b 127.0.0.1:27017", 5, 90);
    assert_false(tier_lease_view_same(&other, &new_term));
    tier_lease_view_t again = view("host-b pid 3 #2", "", 4, 90);
    assert_true(tier_lease_view_same(&other, &again));
}

/* The fence matches a document of an older or the same term, or none yet. */
static void test_the_fence_refuses_a_newer_term(void **state)
{
    (void)state;
    bson_t query = BSON_INITIALIZER;
    bson_error_t error;
    tier_lease_fence(&query, 5);
    match_expression_t *fence = match_compile(&query, &error);
    assert_non_null(fence);
    bson_t *older = support_json("{'leaseTerm': 4}");
    bson_t *same = support_json("{'leaseTerm': 5}");
    bson_t *newer = support_json("{'leaseTerm': 6}");
    bson_t *none = support_json("{'resumeToken': {}}");
    assert_true(match_document(fence, older));
    assert_true(match_document(fence, same));
    assert_false(match_document(fence, newer));
    assert_true(match_document(fence, none));
    match_destroy(fence);
    bson_destroy(older);
    bson_destroy(same);
    bson_destroy(newer);
    bson_destroy(none);
    bson_destroy(&query);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_standby_takes_what_nobody_holds_at_once),
        cmocka_unit_test(test_another_holder_is_replaced_only_after_the_timeout),
        cmocka_unit_test(test_the_fence_refuses_a_newer_term),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
