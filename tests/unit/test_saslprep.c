/* Tests for src/security/saslprep.c: RFC 4013's examples (section 3) for the
 * steps implemented, the prohibited tables, invalid UTF-8, and what is
 * documented as skipped (NFKC, bidi) behaving as documented. */
#include "security/saslprep.h"

#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static void expect_prepared(const char *input, const char *expected)
{
    char *prepared = NULL;
    bson_error_t error;
    assert_true(saslprep(input, &prepared, &error));
    assert_string_equal(prepared, expected);
    bson_free(prepared);
}

static void expect_refused(const char *input, const char *message_part)
{
    char *prepared = NULL;
    bson_error_t error;
    assert_false(saslprep(input, &prepared, &error));
    assert_null(prepared);
    assert_int_equal(error.code, 2);
    assert_non_null(strstr(error.message, message_part));
}

static void test_ascii_is_unchanged(void **state)
{
    (void)state;
    expect_prepared("user", "user");
    expect_prepared("USER", "USER");           /* RFC 4013 example: case is kept */
    expect_prepared("pa ss!~{}", "pa ss!~{}"); /* ASCII space and punctuation stay */
    expect_prepared("", "");
}

static void test_mapping(void **state)
{
    (void)state;
    expect_prepared("I\xC2\xADX", "IX");                   /* U+00AD soft hyphen: nothing (RFC example) */
    expect_prepared("a\xE2\x80\x8B" "b", "ab");            /* U+200B: B.1 wins over C.1.2 */
    expect_prepared("a\xEF\xBB\xBF" "b", "ab");            /* U+FEFF: nothing */
    expect_prepared("a\xC2\xA0" "b", "a b");               /* U+00A0 no-break space */
    expect_prepared("a\xE3\x80\x80" "b", "a b");           /* U+3000 ideographic space */
    expect_prepared("a\xE2\x80\x80" "b", "a b");           /* U+2000 en quad */
    expect_prepared("\xC3\xA9t\xC3\xA9", "\xC3\xA9t\xC3\xA9"); /* é: already normal, kept */
    expect_prepared("\xF0\x9F\x94\x91", "\xF0\x9F\x94\x91");   /* U+1F511, 4-byte sequence, kept */
}

static void test_prohibited_output(void **state)
{
    (void)state;
    expect_refused("\x07", "U+0007");                       /* RFC example: C.2.1 */
    expect_refused("a\x7F", "U+007F");
    expect_refused("a\xC2\x85", "U+0085");                  /* C.2.2 */
    expect_refused("\xEE\x80\x80", "U+E000");               /* C.3 private use */
    expect_refused("\xEF\xB7\x90", "U+FDD0");               /* C.4 non-character */
    expect_refused("\xEF\xBF\xBE", "U+FFFE");
    expect_refused("\xF0\x9F\xBF\xBF", "U+1FFFF");          /* C.4 in plane 1 */
    expect_refused("\xEF\xBF\xBD", "U+FFFD");               /* C.6 */
    expect_refused("\xE2\xBF\xB0", "U+2FF0");               /* C.7 */
    expect_refused("\xE2\x80\x8E", "U+200E");               /* C.8 */
    expect_refused("\xF3\xA0\x80\x81", "U+E0001");          /* C.9 */
}

static void test_invalid_utf8_is_refused(void **state)
{
    (void)state;
    expect_refused("\xC3", "UTF-8");                        /* truncated */
    expect_refused("\xC0\xAF", "UTF-8");                    /* overlong '/' */
    expect_refused("\xED\xA0\x80", "UTF-8");                /* encoded surrogate */
    expect_refused("\xF4\x90\x80\x80", "UTF-8");            /* past U+10FFFF */
    expect_refused("\xFF", "UTF-8");
    expect_refused("a\x80", "UTF-8");                       /* lone continuation byte */
}

/* Documented gaps: no NFKC (U+00AA stays, where a full SASLprep gives "a") and no
 * bidi check (RFC example U+0627 U+0031 passes here). */
static void test_skipped_steps_pass_through(void **state)
{
    (void)state;
    expect_prepared("\xC2\xAA", "\xC2\xAA");
    expect_prepared("\xD8\xA7" "1", "\xD8\xA7" "1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ascii_is_unchanged),
        cmocka_unit_test(test_mapping),
        cmocka_unit_test(test_prohibited_output),
        cmocka_unit_test(test_invalid_utf8_is_refused),
        cmocka_unit_test(test_skipped_steps_pass_through),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
