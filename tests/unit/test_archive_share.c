/* Unit tests for src/proxy/archive_share.c: how many requests the proxy sends to
 * the archive at once as the feeder's lag grows, holds, shrinks and ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "proxy/archive_share.h"

static void test_a_current_feeder_leaves_the_pool_whole(void **state)
{
    (void)state;
    archive_share_t share;
    archive_share_init(&share, 64);
    assert_int_equal(share.limit, 64);
    assert_int_equal(archive_share_next(&share, 0), 64);
    assert_int_equal(archive_share_next(&share, ARCHIVE_SHARE_LAG_BOUND_MS), 64); /* at the bound: not past it */
}

static void test_a_growing_lag_halves_the_limit_down_to_one(void **state)
{
    (void)state;
    archive_share_t share;
    archive_share_init(&share, 64);
    int expected[] = {32, 16, 8, 4, 2, 1, 1};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(archive_share_next(&share, 3000 + 1000 * i), expected[i]);
    }
    /* Past the bound and standing still is not shrinking: halved again. */
    archive_share_init(&share, 64);
    assert_int_equal(archive_share_next(&share, 5000), 32);
    assert_int_equal(archive_share_next(&share, 5000 - ARCHIVE_SHARE_SHRINK_MS + 1), 16);
}

static void test_a_shrinking_lag_keeps_the_limit(void **state)
{
    (void)state;
    archive_share_t share;
    archive_share_init(&share, 64);
    assert_int_equal(archive_share_next(&share, 9000), 32);
    assert_int_equal(archive_share_next(&share, 8000), 32);
    assert_int_equal(archive_share_next(&share, 3000), 32);
    /* Between half the bound and the bound: kept, whichever way it moves. */
    assert_int_equal(archive_share_next(&share, 1500), 32);
    assert_int_equal(archive_share_next(&share, 1900), 32);
}

static void test_the_limit_widens_by_an_eighth_once_caught_up(void **state)
{
    (void)state;
    archive_share_t share;
    archive_share_init(&share, 64);
    for (int i = 0; i < 8; i++) {
        archive_share_next(&share, 10000 + 1000 * i);
    }
    assert_int_equal(share.limit, 1);
    int expected[] = {9, 17, 25, 33, 41, 49, 57, 64, 64};
    for (int i = 0; i < 9; i++) {
        assert_int_equal(archive_share_next(&share, 0), expected[i]);
    }
}

static void test_a_small_pool_still_moves(void **state)
{
    (void)state;
    archive_share_t share;
    archive_share_init(&share, 3);
    assert_int_equal(archive_share_next(&share, 4000), 1);
    assert_int_equal(archive_share_next(&share, 0), 2);
    assert_int_equal(archive_share_next(&share, 0), 3);
    archive_share_init(&share, 0);
    assert_int_equal(share.limit, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_current_feeder_leaves_the_pool_whole),
        cmocka_unit_test(test_a_growing_lag_halves_the_limit_down_to_one),
        cmocka_unit_test(test_a_shrinking_lag_keeps_the_limit),
        cmocka_unit_test(test_the_limit_widens_by_an_eighth_once_caught_up),
        cmocka_unit_test(test_a_small_pool_still_moves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
