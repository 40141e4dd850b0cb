/* Unit tests for src/common/timestamp.c: a BSON Timestamp as one number orders as
 * (seconds, increment) does, and other types or missing keys read as 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/timestamp.h"

static void test_round_trip_and_order(void **state)
{
    (void)state;
    bson_t document = BSON_INITIALIZER;
    timestamp_append(&document, "early", (uint64_t)7 << 32 | 0xFFFFFFFFu);
    BSON_APPEND_TIMESTAMP(&document, "late", 8, 1);
    assert_int_equal(timestamp_find(&document, "early"), (uint64_t)7 << 32 | 0xFFFFFFFFu);
    assert_int_equal(timestamp_find(&document, "late"), (uint64_t)8 << 32 | 1);
    assert_true(timestamp_find(&document, "early") < timestamp_find(&document, "late"));
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, &document, "late"));
    assert_int_equal(timestamp_of_iter(&iter), (uint64_t)8 << 32 | 1);
    bson_destroy(&document);
}

static void test_other_types_and_missing_keys_are_zero(void **state)
{
    (void)state;
    bson_t document = BSON_INITIALIZER;
    BSON_APPEND_INT64(&document, "number", 12345);
    BSON_APPEND_DATE_TIME(&document, "date", 12345);
    assert_int_equal(timestamp_find(&document, "number"), 0);
    assert_int_equal(timestamp_find(&document, "date"), 0);
    assert_int_equal(timestamp_find(&document, "missing"), 0);
    bson_destroy(&document);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_order),
        cmocka_unit_test(test_other_types_and_missing_keys_are_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
