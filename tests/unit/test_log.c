/* Unit tests for src/common/log.c: the text format (attributes written into their
 * {placeholders}, unnamed ones after, absent strings left out) and the json format
 * (mongod 4.4's fields in order, escaping, ids stable per message, thread context).
 * stderr is sent to a temporary file and read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static char path[64];

/* What the logger wrote since the last call. */
static char *take_output(void)
{
    fflush(stderr);
    FILE *file = fopen(path, "rb");
    assert_non_null(file);
    static char text[8192];
    size_t length = fread(text, 1, sizeof text - 1, file);
    text[length] = '\0';
    fclose(file);
    assert_non_null(freopen(path, "wb", stderr));
    return text;
}

static int redirect(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/tc_log_test_XXXXXX");
    int descriptor = mkstemp(path);
    if (descriptor < 0) {
        return -1;
    }
    close(descriptor);
    return freopen(path, "wb", stderr) != NULL ? 0 : -1;
}

static int restore(void **state)
{
    (void)state;
    tc_log_set_format(TC_LOG_FORMAT_TEXT);
    unlink(path);
    return 0;
}

static void test_text_writes_attributes_into_the_message(void **state)
{
    (void)state;
    tc_log_set_format(TC_LOG_FORMAT_TEXT);
    TC_LOG_ATTRS(TC_LOG_INFO, "NETWORK", 12, "end connection {remote} ({connectionCount} now open)",
                 TC_ATTR_STR("remote", "127.0.0.1:5"), TC_ATTR_INT("connectionCount", 3),
                 TC_ATTR_BOOL("tls", false), TC_ATTR_STR("absent", NULL));
    const char *text = take_output();
    const char *message = strstr(text, " I NETWORK  [conn12] ");
    assert_non_null(message);
    assert_string_equal(message, " I NETWORK  [conn12] end connection 127.0.0.1:5 (3 now open) (tls: false)\n");
    assert_true(text[23] == 'Z'); /* 2026-12-01T18:19:21.180Z */

    TC_LOG(TC_LOG_WARNING, "TIER", 0, "plain %s %d", "printf", 7);
    text = take_output();
    assert_non_null(strstr(text, " W TIER     [-] plain printf 7\n"));
}

static void test_json_has_mongods_fields(void **state)
{
    (void)state;
    tc_log_set_format(TC_LOG_FORMAT_JSON);
    bson_t *document = BCON_NEW("a", BCON_INT32(1));
    TC_LOG_ATTRS(TC_LOG_ERROR, "STORAGE", 0, "saw {what}", TC_ATTR_STR("what", "a \"quoted\"\nline\x01"),
                 TC_ATTR_DOC("doc", document), TC_ATTR_DOUBLE("ratio", 0.5), TC_ATTR_STR("absent", NULL));
    bson_destroy(document);
    const char *text = take_output();
    assert_true(strncmp(text, "{\"t\":{\"$date\":\"", 15) == 0);
    assert_non_null(strstr(text, "+00:00\"},\"s\":\"E\",\"c\":\"STORAGE\",\"id\":"));
    assert_non_null(strstr(text, ",\"ctx\":\"main\",\"msg\":\"saw {what}\",\"attr\":{\"what\":\"a \\\"quoted\\\"\\nline\\u0001\","
                                 "\"doc\":{ \"a\" : 1 },\"ratio\":0.5,\"absent\":null}}\n"));

    /* Invalid UTF-8 (a message cut mid-character) stays valid JSON. */
    TC_LOG(TC_LOG_DEBUG, "X", 0, "%s", "caf\xc3");
    tc_log_set_level(TC_LOG_DEBUG);
    TC_LOG(TC_LOG_DEBUG, "X", 0, "%s", "caf\xc3");
    tc_log_set_level(TC_LOG_INFO);
    text = take_output();
    assert_non_null(strstr(text, "\"s\":\"D1\""));
    assert_non_null(strstr(text, "\"msg\":\"caf\\u00c3\"}"));
}

static void log_one(int connection)
{
    TC_LOG_ATTRS(TC_LOG_INFO, "NETWORK", (uint64_t)connection, "connection accepted from {remote}",
                 TC_ATTR_STR("remote", connection == 1 ? "a" : "b"));
}

static void test_json_ids_and_context(void **state)
{
    (void)state;
    tc_log_set_format(TC_LOG_FORMAT_JSON);
    log_one(1);
    log_one(2);
    tc_log_set_thread_name("feeder");
    TC_LOG(TC_LOG_INFO, "FEEDER", 0, "other %d", 1);
    tc_log_set_thread_name("main");
    const char *text = take_output();
    const char *first = strstr(text, "\"id\":");
    const char *second = strstr(first + 1, "\"id\":");
    const char *third = strstr(second + 1, "\"id\":");
    assert_non_null(third);
    long id1 = strtol(first + 5, NULL, 10), id2 = strtol(second + 5, NULL, 10), id3 = strtol(third + 5, NULL, 10);
    assert_true(id1 > 0 && id1 == id2 && id3 != id1); /* one call site, one id */
    assert_non_null(strstr(text, "\"ctx\":\"conn1\""));
    assert_non_null(strstr(text, "\"ctx\":\"conn2\""));
    assert_non_null(strstr(text, "\"ctx\":\"feeder\",\"msg\":\"other 1\"}"));
}

static void test_failure_line(void **state)
{
    (void)state;
    tc_log_set_format(TC_LOG_FORMAT_TEXT);
    tc_log_failure("thermocline proxy", "bad file");
    assert_string_equal(take_output(), "thermocline proxy: bad file\n");
    tc_log_set_format(TC_LOG_FORMAT_JSON);
    tc_log_failure("thermocline proxy", "bad file");
    const char *text = take_output();
    assert_non_null(strstr(text, "\"s\":\"E\",\"c\":\"CONTROL\""));
    assert_non_null(strstr(text, "\"attr\":{\"program\":\"thermocline proxy\",\"error\":\"bad file\"}}\n"));
    tc_log_format_t format;
    assert_true(tc_log_format_from_name("json", &format) && format == TC_LOG_FORMAT_JSON);
    assert_false(tc_log_format_from_name("JSON", &format));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_writes_attributes_into_the_message),
        cmocka_unit_test(test_json_has_mongods_fields),
        cmocka_unit_test(test_json_ids_and_context),
        cmocka_unit_test(test_failure_line),
    };
    return cmocka_run_group_tests(tests, redirect, restore);
}
