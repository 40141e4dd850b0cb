/* The one rule by which the feeder and the proxy tell the workers' writes from
 * the applications' (src/tier/worker_writes.c): done ranges, kept history,
 * pending marks, committed evictions and copies settled by digest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "support.h"
#include "tier/worker_writes.h"

/* Times as {t: seconds, i: increment}: T(s) is (s << 32) | 1. */
#define T(seconds) (((uint64_t)(seconds) << 32) | 1)

static worker_writes_verdict_t verdict_of(const char *mark_json, bool is_delete, uint64_t time, int64_t waited_ms)
{
    bson_t *mark = mark_json != NULL ? support_json(mark_json) : NULL;
    worker_writes_event_t event = {.is_delete = is_delete, .time = time, .waited_ms = waited_ms};
    worker_writes_verdict_t verdict = worker_writes_classify(mark, &event, NULL);
    if (mark != NULL) {
        bson_destroy(mark);
    }
    return verdict;
}

/* A mark from JSON whose one %lld is the digest of copy. */
static bson_t *mark_with_digest_of(const char *json_format, const bson_t *copy)
{
    char json[768];
    snprintf(json, sizeof json, json_format, (long long)worker_writes_digest(copy));
    return support_json(json);
}

static void test_no_mark_is_an_application_write(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(NULL, true, T(10), 0), WORKER_WRITES_APPLICATION);
    assert_int_equal(verdict_of(NULL, false, T(10), 0), WORKER_WRITES_APPLICATION);
}

static void test_done_range_holds_the_worker_write_only(void **state)
{
    (void)state;
    const char *done = "{'state': 'done', 'from': {'$timestamp': {'t': 10, 'i': 1}}, "
                       "'to': {'$timestamp': {'t': 20, 'i': 1}}}";
    assert_int_equal(verdict_of(done, false, T(15), 0), WORKER_WRITES_WORKER);
    assert_int_equal(verdict_of(done, true, T(20), 0), WORKER_WRITES_WORKER); /* (from, to] */
    assert_int_equal(verdict_of(done, true, T(10), 0), WORKER_WRITES_APPLICATION);
    assert_int_equal(verdict_of(done, false, T(21), 0), WORKER_WRITES_APPLICATION);
    /* The range's end names the one delete an eviction stands for. */
    bson_t *mark = support_json(done);
    worker_writes_event_t event = {.is_delete = true, .time = T(15)};
    uint64_t range_to = 0;
    assert_int_equal(worker_writes_classify(mark, &event, &range_to), WORKER_WRITES_WORKER);
    assert_true(range_to == T(20));
    bson_destroy(mark);
}

static void test_history_keeps_earlier_ranges_for_resumed_streams(void **state)
{
    (void)state;
    /* Copied in (10, 20], evicted, copied again: pending since 50 now. */
    const char *again = "{'state': 'pending', 'since': {'$timestamp': {'t': 50, 'i': 1}}, 'copy': {'$numberLong': '7'},"
                        " 'history': [{'from': {'$timestamp': {'t': 10, 'i': 1}}, "
                        "'to': {'$timestamp': {'t': 20, 'i': 1}}}]}";
    assert_int_equal(verdict_of(again, false, T(15), 0), WORKER_WRITES_WORKER);
    bson_t *mark = support_json(again);
    worker_writes_event_t event = {.is_delete = true, .time = T(12)};
    uint64_t range_to = 0;
    assert_int_equal(worker_writes_classify(mark, &event, &range_to), WORKER_WRITES_WORKER);
    assert_true(range_to == T(20)); /* the earlier eviction's range, not the pending one */
    bson_destroy(mark);
    assert_int_equal(verdict_of(again, false, T(30), 0), WORKER_WRITES_APPLICATION); /* before since */
    assert_int_equal(verdict_of(again, false, T(60), 0), WORKER_WRITES_PENDING);
}

static void test_pending_marks_wait_then_copies_settle_by_digest(void **state)
{
    (void)state;
    bson_t *copy = support_json("{'_id': 1, 'a': 2}");
    bson_t *other = support_json("{'_id': 1, 'a': 3}");
    bson_t *mark = mark_with_digest_of(
        "{'state': 'pending', 'since': {'$timestamp': {'t': 10, 'i': 1}}, 'copy': {'$numberLong': '%lld'}}", copy);
    worker_writes_event_t event = {.is_delete = false, .time = T(11), .full_document = copy};
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_PENDING);
    event.waited_ms = WORKER_WRITES_PENDING_WAIT_MS;
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_WORKER);
    event.full_document = other; /* a client's insert of the same _id */
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    /* An eviction's delete commits with its mark's "committed": a delete under a
     * pending eviction mark is a client's, at once (a crash before the commit). */
    const char *evict = "{'state': 'pending', 'since': {'$timestamp': {'t': 10, 'i': 1}}}";
    assert_int_equal(verdict_of(evict, true, T(11), 0), WORKER_WRITES_APPLICATION);
    assert_int_equal(verdict_of(evict, true, T(10), 0), WORKER_WRITES_APPLICATION);
    bson_destroy(mark);
    bson_destroy(copy);
    bson_destroy(other);
}

/* A copy the feeder settled (its copier died before recording the outcome) is
 * done in (since, applied time] for exactly that copy's insert, in the mark and
 * in its history, as the pending mark had said. */
static void test_settled_copy_range_holds_only_the_copy(void **state)
{
    (void)state;
    bson_t *copy = support_json("{'_id': 1, 'a': 2}");
    bson_t *other = support_json("{'_id': 1, 'a': 3}");
    bson_t *mark = mark_with_digest_of(
        "{'state': 'done', 'from': {'$timestamp': {'t': 10, 'i': 1}}, 'to': {'$timestamp': {'t': 90, 'i': 1}}, "
        "'digest': {'$numberLong': '%lld'}}",
        copy);
    worker_writes_event_t event = {.is_delete = false, .time = T(11), .full_document = copy};
    uint64_t range_to = 0;
    assert_int_equal(worker_writes_classify(mark, &event, &range_to), WORKER_WRITES_WORKER); /* no wait */
    assert_true(range_to == T(90));
    event.full_document = other; /* a client's insert of that _id in the range */
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    event.full_document = NULL;
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    event = (worker_writes_event_t){.is_delete = true, .time = T(12)};
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    event = (worker_writes_event_t){.is_delete = false, .time = T(91), .full_document = copy};
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION); /* past to */
    bson_destroy(mark);
    /* Copied again since: the settled range, now in the history, still holds it. */
    mark = mark_with_digest_of(
        "{'state': 'done', 'from': {'$timestamp': {'t': 95, 'i': 1}}, 'to': {'$timestamp': {'t': 96, 'i': 1}}, "
        "'history': [{'from': {'$timestamp': {'t': 10, 'i': 1}}, 'to': {'$timestamp': {'t': 90, 'i': 1}}, "
        "'digest': {'$numberLong': '%lld'}}, {'from': {'$timestamp': {'t': 95, 'i': 1}}, "
        "'to': {'$timestamp': {'t': 96, 'i': 1}}}]}",
        copy);
    event = (worker_writes_event_t){.is_delete = false, .time = T(11), .full_document = copy};
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_WORKER);
    event.full_document = other;
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    event.time = T(96); /* the later copy's exact range: any insert in it */
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_WORKER);
    bson_destroy(mark);
    bson_destroy(copy);
    bson_destroy(other);
}

static void test_committed_eviction_takes_the_first_delete_after_since(void **state)
{
    (void)state;
    bson_t *mark = support_json("{'state': 'committed', 'since': {'$timestamp': {'t': 10, 'i': 1}}}");
    worker_writes_event_t event = {.is_delete = true, .time = T(12)};
    uint64_t range_to = 0;
    /* Its range is written right after the commit: waited for first. */
    assert_int_equal(worker_writes_classify(mark, &event, &range_to), WORKER_WRITES_PENDING);
    event.waited_ms = WORKER_WRITES_PENDING_WAIT_MS;
    assert_int_equal(worker_writes_classify(mark, &event, &range_to), WORKER_WRITES_PENDING); /* not the feeder */
    event.writes_ranges = true;
    assert_int_equal(worker_writes_classify(mark, &event, &range_to), WORKER_WRITES_WORKER);
    assert_true(range_to == UINT64_MAX); /* no range yet: the feeder writes it (feeder_settle_committed_mark) */
    event.time = T(9);
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    event.time = T(12);
    event.is_delete = false;
    assert_int_equal(worker_writes_classify(mark, &event, NULL), WORKER_WRITES_APPLICATION);
    bson_destroy(mark);
}

static void test_mark_key_history_push_and_done_update(void **state)
{
    (void)state;
    bson_t out = BSON_INITIALIZER;
    bson_value_t id = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 5};
    worker_writes_mark_key(&out, "_id", "shop.orders", &id, "fault");
    bson_t *expected = support_json("{'_id': {'ns': 'shop.orders', 'id': 5, 'op': 'fault'}}");
    assert_true(bson_equal(&out, expected));
    bson_destroy(expected);
    bson_reinit(&out);
    worker_writes_append_history_push(&out, T(1), T(2), NULL);
    expected = support_json("{'history': {'%each': [{'from': {'$timestamp': {'t': 1, 'i': 1}}, "
                            "'to': {'$timestamp': {'t': 2, 'i': 1}}}], '%slice': -8}}");
    assert_true(bson_equal(&out, expected));
    bson_destroy(expected);
    bson_reinit(&out);
    worker_writes_append_done_update(&out, "u", T(1), T(2));
    expected = support_json("{'u': {'%set': {'state': 'done', 'from': {'$timestamp': {'t': 1, 'i': 1}}, "
                            "'to': {'$timestamp': {'t': 2, 'i': 1}}}, '%unset': {'digest': ''}, "
                            "'%push': {'history': {'%each': [{'from': {'$timestamp': {'t': 1, 'i': 1}}, "
                            "'to': {'$timestamp': {'t': 2, 'i': 1}}}], '%slice': -8}}}}");
    assert_true(bson_equal(&out, expected));
    bson_destroy(expected);
    bson_reinit(&out);
    worker_writes_append_settled_copy_update(&out, "u", T(1), T(2), 42);
    expected = support_json("{'u': {'%set': {'state': 'done', 'from': {'$timestamp': {'t': 1, 'i': 1}}, "
                            "'to': {'$timestamp': {'t': 2, 'i': 1}}, 'digest': {'$numberLong': '42'}}, "
                            "'%unset': {'since': '', 'copy': ''}, '%push': {'history': {'%each': [{'from': {'$timestamp': {'t': 1, 'i': 1}}, "
                            "'to': {'$timestamp': {'t': 2, 'i': 1}}, 'digest': {'$numberLong': '42'}}], "
                            "'%slice': -8}}}}");
    assert_true(bson_equal(&out, expected));
    bson_destroy(expected);
    bson_destroy(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_mark_is_an_application_write),
        cmocka_unit_test(test_done_range_holds_the_worker_write_only),
        cmocka_unit_test(test_history_keeps_earlier_ranges_for_resumed_streams),
        cmocka_unit_test(test_pending_marks_wait_then_copies_settle_by_digest),
        cmocka_unit_test(test_settled_copy_range_holds_only_the_copy),
        cmocka_unit_test(test_committed_eviction_takes_the_first_delete_after_since),
        cmocka_unit_test(test_mark_key_history_push_and_done_update),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
