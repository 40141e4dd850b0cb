/* Unit tests for src/proxy/retry.c: which commands the retryable-reads and
 * retryable-writes specifications allow to run again, and which tier replies are
 * retryable failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include "common/error.h"
#include "proxy/retry.h"

typedef struct kind_case {
    const char *command;
    retry_kind_t kind;
} kind_case_t;

static void test_command_kinds(void **state)
{
    (void)state;
    static const kind_case_t cases[] = {
        {"{'find': 'c', 'filter': {}, '$db': 'd'}", RETRY_READ},
        {"{'count': 'c', '$db': 'd'}", RETRY_READ},
        {"{'distinct': 'c', 'key': 'k', '$db': 'd'}", RETRY_READ},
        {"{'listCollections': 1, '$db': 'd'}", RETRY_READ},
        {"{'listIndexes': 'c', '$db': 'd'}", RETRY_READ},
        {"{'listDatabases': 1, '$db': 'admin'}", RETRY_READ},
        {"{'aggregate': 'c', 'pipeline': [{'$match': {}}], 'cursor': {}}", RETRY_READ},
        {"{'aggregate': 'c', 'pipeline': [{'$match': {}}, {'$out': 'o'}], 'cursor': {}}", RETRY_NEVER},
        {"{'aggregate': 'c', 'pipeline': [{'$merge': {'into': 'o'}}], 'cursor': {}}", RETRY_NEVER},
        /* reads never retried by the specifications */
        {"{'getMore': {'$numberLong': '5'}, 'collection': 'c'}", RETRY_NEVER},
        {"{'mapReduce': 'c', 'map': 'f', 'reduce': 'g', 'out': {'inline': 1}}", RETRY_NEVER},
        {"{'explain': {'find': 'c'}}", RETRY_NEVER},
        {"{'find': 'c', 'txnNumber': {'$numberLong': '1'}, 'autocommit': false}", RETRY_NEVER},
        /* writes: only with a txnNumber */
        {"{'insert': 'c', 'documents': [{}]}", RETRY_NEVER},
        {"{'insert': 'c', 'documents': [{}], 'txnNumber': {'$numberLong': '1'}}", RETRY_WRITE},
        {"{'insert': 'c', 'documents': [{}], 'txnNumber': {'$numberLong': '1'}, 'autocommit': false}", RETRY_NEVER},
        {"{'findAndModify': 'c', 'query': {}, 'remove': true, 'txnNumber': {'$numberLong': '1'}}", RETRY_WRITE},
        {"{'update': 'c', 'updates': [{'q': {}, 'u': {}}, {'q': {}, 'u': {}, 'multi': false}], "
         "'txnNumber': {'$numberLong': '1'}}",
         RETRY_WRITE},
        {"{'update': 'c', 'updates': [{'q': {}, 'u': {}}, {'q': {}, 'u': {}, 'multi': true}], "
         "'txnNumber': {'$numberLong': '1'}}",
         RETRY_NEVER},
        {"{'update': 'c', 'updates': [{'q': {}, 'u': {}}]}", RETRY_NEVER},
        {"{'delete': 'c', 'deletes': [{'q': {}, 'limit': 1}], 'txnNumber': {'$numberLong': '1'}}", RETRY_WRITE},
        {"{'delete': 'c', 'deletes': [{'q': {}, 'limit': 0}], 'txnNumber': {'$numberLong': '1'}}", RETRY_NEVER},
        {"{'delete': 'c', 'deletes': [{'q': {}}], 'txnNumber': {'$numberLong': '1'}}", RETRY_NEVER},
        {"{'delete': 'c', 'deletes': 'x', 'txnNumber': {'$numberLong': '1'}}", RETRY_NEVER},
        {"{'create': 'c', 'txnNumber': {'$numberLong': '1'}}", RETRY_NEVER},
        {"{'ping': 1}", RETRY_NEVER},
        {"{}", RETRY_NEVER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *command = support_json_single_quoted(cases[i].command);
        if (retry_command_kind(command) != cases[i].kind) {
            fail_msg("%s: expected kind %d, got %d", cases[i].command, cases[i].kind, retry_command_kind(command));
        }
        bson_destroy(command);
    }
    assert_int_equal(retry_command_kind(NULL), RETRY_NEVER);
}

static void test_codes(void **state)
{
    (void)state;
    static const int32_t retryable[] = {6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436};
    static const int32_t not_retryable[] = {0, 1, 2, 11000, 11601, 43, 50, 64, 133, 13};
    for (size_t i = 0; i < sizeof retryable / sizeof retryable[0]; i++) {
        assert_true(tc_error_code_is_retryable(retryable[i]));
    }
    for (size_t i = 0; i < sizeof not_retryable / sizeof not_retryable[0]; i++) {
        assert_false(tc_error_code_is_retryable(not_retryable[i]));
    }
    assert_true(retry_code_changes_primary(10107));
    assert_true(retry_code_changes_primary(91));
    assert_true(retry_code_changes_primary(11602));
    assert_false(retry_code_changes_primary(6));  /* a network error: the pool handles it */
    assert_false(retry_code_changes_primary(262)); /* a timeout says nothing of the primary */
}

typedef struct reply_case {
    const char *reply;
    retry_kind_t kind;
    bool retryable;
    int32_t code;
} reply_case_t;

static void test_replies(void **state)
{
    (void)state;
    static const reply_case_t cases[] = {
        {"{'ok': 0, 'code': 10107, 'codeName': 'NotWritablePrimary'}", RETRY_READ, true, 10107},
        {"{'ok': 0, 'code': 10107}", RETRY_WRITE, true, 10107},
        {"{'ok': 0, 'code': 10107}", RETRY_NEVER, false, 0},
        {"{'ok': 0.0, 'code': 189}", RETRY_READ, true, 189},
        {"{'ok': 0, 'code': 13436}", RETRY_READ, true, 13436},
        {"{'ok': 0, 'code': 11000}", RETRY_WRITE, false, 0},
        {"{'ok': 0, 'code': 2, 'errorLabels': ['RetryableWriteError']}", RETRY_WRITE, true, 2},
        {"{'ok': 0, 'code': 2, 'errorLabels': ['RetryableWriteError']}", RETRY_READ, false, 0},
        {"{'ok': 0, 'code': 2, 'errorLabels': ['TransientTransactionError']}", RETRY_WRITE, false, 0},
        {"{'ok': 1, 'n': 1, 'writeConcernError': {'code': 91, 'errmsg': 'shutting down'}}", RETRY_WRITE, true, 91},
        {"{'ok': 1, 'n': 1, 'writeConcernError': {'code': 64, 'errmsg': 'timeout'}}", RETRY_WRITE, false, 0},
        {"{'ok': 1, 'n': 1, 'writeConcernError': {'code': 91}}", RETRY_READ, false, 0},
        {"{'ok': 1, 'cursor': {'id': 0}}", RETRY_READ, false, 0},
        {"{'ok': 0}", RETRY_READ, false, 0},
        {"{'ok': 1, 'writeErrors': [{'index': 0, 'code': 11000}]}", RETRY_WRITE, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *reply = support_json_single_quoted(cases[i].reply);
        int32_t code = -1;
        bool retryable = retry_reply_is_retryable(reply, cases[i].kind, &code);
        if (retryable != cases[i].retryable || code != cases[i].code) {
            fail_msg("%s (kind %d): expected %d/%d, got %d/%d", cases[i].reply, cases[i].kind, cases[i].retryable,
                     cases[i].code, retryable, code);
        }
        bson_destroy(reply);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_command_kinds),
        cmocka_unit_test(test_codes),
        cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
