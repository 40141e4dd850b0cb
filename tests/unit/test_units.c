/* Unit tests for src/common/units.c: sizes and durations with units, and the counts
 * and durations command-line flags take (bench, lab), with their error messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "common/units.h"

static void test_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } accepted[] = {
        {"512", 512}, {"512B", 512}, {"16KB", 16384}, {"16kb", 16384}, {"256MB", 268435456},
        {"1GB", 1073741824}, {"1.5GB", 1610612736}, {"2TB", UINT64_C(2199023255552)}, {"4M", 4194304},
        {"0", 0},
    };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        uint64_t bytes = 1;
        bson_error_t error;
        if (!units_parse_size(accepted[i].text, &bytes, &error) || bytes != accepted[i].bytes) {
            fail_msg("'%s': got %llu, expected %llu", accepted[i].text, (unsigned long long)bytes,
                     (unsigned long long)accepted[i].bytes);
        }
    }
    static const char *const refused[] = {"", "MB", "-1MB", "1 MB", "1PB", "1MBs", "x", "99999999999TB"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        uint64_t bytes;
        bson_error_t error;
        assert_false(units_parse_size(refused[i], &bytes, &error));
        assert_int_equal(error.code, TC_ERR_BAD_VALUE);
        assert_non_null(strstr(error.message, "invalid size"));
    }
}

static void test_durations(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int64_t milliseconds;
    } accepted[] = {
        {"500ms", 500}, {"20s", 20000}, {"1.5s", 1500}, {"15m", 900000}, {"6h", 21600000},
        {"30d", INT64_C(2592000000)}, {"0s", 0},
    };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        int64_t milliseconds = -1;
        bson_error_t error;
        assert_true(units_parse_duration_ms(accepted[i].text, &milliseconds, &error));
        assert_int_equal(milliseconds, accepted[i].milliseconds);
    }
    /* a unit is required, and only these units */
    static const char *const refused[] = {"", "500", "5S", "1w", "-1s", "s", "1 s"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int64_t milliseconds;
        bson_error_t error;
        assert_false(units_parse_duration_ms(refused[i], &milliseconds, &error));
        assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    }
}

static void test_counts(void **state)
{
    (void)state;
    int64_t count = 0;
    bson_error_t error;
    assert_true(units_parse_count("64", "--threads", 1, 4096, &count, &error));
    assert_int_equal(count, 64);
    assert_true(units_parse_count("1", "--threads", 1, 4096, &count, &error));
    assert_true(units_parse_count("4096", "--threads", 1, 4096, &count, &error));
    assert_int_equal(count, 4096);
    assert_true(units_parse_count("9223372036854775807", "--seed", 0, INT64_MAX, &count, &error));
    assert_int_equal(count, INT64_MAX);

    static const char *const refused[] = {"0", "4097", "", "12x", "1.5", "-3", "1e3", "9223372036854775808"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        count = 7;
        assert_false(units_parse_count(refused[i], "--threads", 1, 4096, &count, &error));
        assert_int_equal(count, 7);
        assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    }
    assert_false(units_parse_count("0", "--threads", 1, 4096, &count, &error));
    assert_string_equal(error.message, "--threads takes a whole number from 1 to 4096, not '0'");
}

static void test_flag_durations(void **state)
{
    (void)state;
    int64_t milliseconds = 0;
    bson_error_t error;
    /* a minimum of 1ms: anything but zero, unless zero is allowed */
    assert_true(units_parse_flag_duration("1ms", "--duration", 1, false, &milliseconds, &error));
    assert_int_equal(milliseconds, 1);
    assert_false(units_parse_flag_duration("0s", "--duration", 1, false, &milliseconds, &error));
    assert_string_equal(error.message, "--duration must be at least 1ms, not '0s'");
    assert_true(units_parse_flag_duration("0s", "--warmup", 1, true, &milliseconds, &error));
    assert_int_equal(milliseconds, 0);

    /* a minimum of 1s: 0 when allowed, nothing in between */
    assert_true(units_parse_flag_duration("2m", "--duration", 1000, false, &milliseconds, &error));
    assert_int_equal(milliseconds, 120000);
    assert_true(units_parse_flag_duration("1s", "--duration", 1000, false, &milliseconds, &error));
    assert_true(units_parse_flag_duration("0ms", "--warmup", 1000, true, &milliseconds, &error));
    assert_int_equal(milliseconds, 0);
    assert_false(units_parse_flag_duration("500ms", "--warmup", 1000, true, &milliseconds, &error));
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    assert_string_equal(error.message, "--warmup must be 0 or at least 1s, not '500ms'");
    assert_false(units_parse_flag_duration("0s", "--duration", 1000, false, &milliseconds, &error));
    assert_string_equal(error.message, "--duration must be at least 1s, not '0s'");

    /* a duration that does not parse names the flag */
    assert_false(units_parse_flag_duration("10", "--duration", 1000, false, &milliseconds, &error));
    assert_int_equal(error.code, TC_ERR_BAD_VALUE);
    assert_true(strncmp(error.message, "--duration: invalid duration '10'", 33) == 0);
}

static void test_host_ports(void **state)
{
    (void)state;
    bson_error_t error;
    char host[64];
    int port;
    assert_true(units_parse_host_port("127.0.0.1:9216", "--metrics-listen", host, sizeof host, &port, &error));
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 9216);
    assert_true(units_parse_host_port("[::1]:65535", "--metrics-listen", host, sizeof host, &port, &error));
    assert_string_equal(host, "::1");
    assert_int_equal(port, 65535);
    static const char *const refused[] = {"9216", ":9216", "::1:9216", "[]:9216", "127.0.0.1:"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        assert_false(units_parse_host_port(refused[i], "--metrics-listen", host, sizeof host, &port, &error));
        assert_int_equal(error.code, TC_ERR_BAD_VALUE);
        assert_non_null(strstr(error.message, "--metrics-listen"));
    }
    assert_false(units_parse_host_port("127.0.0.1:0", "--metrics-listen", host, sizeof host, &port, &error));
    assert_string_equal(error.message, "--metrics-listen takes a whole number from 1 to 65535, not '0'");
    /* a host longer than the buffer is refused, never cut */
    assert_false(units_parse_host_port("a-very-long-host-name:1", "--metrics-listen", host, 8, &port, &error));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_flag_durations),
        cmocka_unit_test(test_host_ports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
