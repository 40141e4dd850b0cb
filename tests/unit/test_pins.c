/* Pins and eviction intents across processes (src/tier/pins.c): when a proxy pins
 * in the fast tier, how long pins and intents live, the documents written, the
 * filters each side reads the other's with (run through the store's matcher),
 * and which of a batch's candidates the pins read cover. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include "common/clock.h"
#include "query/match.h"
#include "tier/pins.h"

#include <string.h>

static void test_a_proxy_pins_in_the_fast_tier_unless_it_alone_runs_the_evictor(void **state)
{
    (void)state;
    assert_false(tier_pins_in_fast_tier(true, 0));
    assert_true(tier_pins_in_fast_tier(true, 1)); /* the lease may move to a peer mid-request */
    assert_true(tier_pins_in_fast_tier(false, 0)); /* an evictor process, or a standby */
    assert_true(tier_pins_in_fast_tier(false, 2));
}

static void test_lifetimes_follow_the_config_timeouts(void **state)
{
    (void)state;
    config_t config;
    memset(&config, 0, sizeof config);
    config.lease_timeout_ms = 2000;
    config.read_your_writes_wait_ms = 1000;
    config.failover_wait_ms = 500;
    assert_int_equal(tier_eviction_lifetime_ms(&config), 2000);
    assert_int_equal(tier_pin_lifetime_ms(&config), 2 * (2000 + 1000 + 500) + 5000);
    /* The write is sent within the first half of its pins' life; deletes within
     * the first half of their intent's. */
    assert_true(tier_pin_fresh(&config, 1000, 1000 + 5999));
    assert_false(tier_pin_fresh(&config, 1000, 1000 + 6000));
    assert_true(tier_eviction_fresh(&config, 1000, 1999));
    assert_false(tier_eviction_fresh(&config, 1000, 2000));
    config.lease_timeout_ms = 500;
    assert_int_equal(tier_eviction_lifetime_ms(&config), 1000);
}

/* The document at statement n's path (a view into statements). */
static void document_at(const bson_t *statements, uint32_t n, const char *path, bson_t *out)
{
    char full[64];
    bson_iter_t iter, found;
    uint32_t length;
    const uint8_t *data;
    snprintf(full, sizeof full, "%u.%s", n, path);
    assert_true(bson_iter_init(&iter, statements) && bson_iter_find_descendant(&iter, full, &found));
    assert_true(BSON_ITER_HOLDS_DOCUMENT(&found));
    bson_iter_document(&found, &length, &data);
    assert_true(bson_init_static(out, data, length));
}

/* The n-th statement's parts. */
static void statement_parts(const bson_t *statements, uint32_t n, bson_t *out_query, bson_t *out_set,
                            bson_t *out_current, bool *out_upsert)
{
    bson_t statement;
    bson_iter_t iter;
    char key[16];
    document_at(statements, n, "q", out_query);
    document_at(statements, n, "u.$set", out_set);
    document_at(statements, n, "u.$currentDate", out_current);
    snprintf(key, sizeof key, "%u", n);
    assert_true(bson_iter_init_find(&iter, statements, key) && BSON_ITER_HOLDS_DOCUMENT(&iter));
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    assert_true(bson_init_static(&statement, data, length));
    assert_true(bson_iter_init_find(&iter, &statement, "upsert"));
    *out_upsert = bson_iter_as_bool(&iter);
}

static int64_t array_length(const bson_t *document, const char *key)
{
    bson_iter_t iter, items;
    int64_t count = 0;
    assert_true(bson_iter_init_find(&iter, document, key) && BSON_ITER_HOLDS_ARRAY(&iter));
    assert_true(bson_iter_recurse(&iter, &items));
    while (bson_iter_next(&items)) {
        count++;
    }
    return count;
}

static void test_pin_documents_split_ids_and_pin_a_namespace_last(void **state)
{
    (void)state;
    bson_t ids = BSON_INITIALIZER, statements = BSON_INITIALIZER, keys = BSON_INITIALIZER;
    for (uint32_t i = 0; i < TIER_PIN_IDS_PER_DOCUMENT + 1; i++) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(i, &key_string, key, sizeof key);
        bson_append_int32(&ids, key_string, -1, (int32_t)i);
    }
    uint32_t index = 0;
    tier_pins_append_upserts(&statements, &index, "shop.orders", &ids, true, "host pid 1", 12000, &keys);
    assert_int_equal(index, 3);
    assert_int_equal(bson_count_keys(&keys), 3);
    bool whole_expected[] = {false, false, true};
    int64_t ids_expected[] = {TIER_PIN_IDS_PER_DOCUMENT, 1, 0};
    for (uint32_t n = 0; n < 3; n++) {
        bson_t query, set, current;
        bool upsert;
        bson_iter_t iter, key;
        char key_name[16];
        statement_parts(&statements, n, &query, &set, &current, &upsert);
        assert_true(upsert);
        snprintf(key_name, sizeof key_name, "%u", n);
        assert_true(bson_iter_init_find(&key, &keys, key_name) && BSON_ITER_HOLDS_OID(&key));
        assert_true(bson_iter_init_find(&iter, &query, "_id") && BSON_ITER_HOLDS_OID(&iter));
        assert_int_equal(bson_oid_compare(bson_iter_oid(&iter), bson_iter_oid(&key)), 0);
        assert_true(bson_iter_init_find(&iter, &set, "ns"));
        assert_string_equal(bson_iter_utf8(&iter, NULL), "shop.orders");
        assert_true(bson_iter_init_find(&iter, &set, "whole"));
        assert_int_equal(bson_iter_as_bool(&iter), whole_expected[n]);
        assert_int_equal(array_length(&set, "ids"), ids_expected[n]);
        assert_true(bson_iter_init_find(&iter, &set, "lifetimeMillis") && bson_iter_as_int64(&iter) == 12000);
        /* The fast tier's clock dates it: no host's clock is compared with another's. */
        assert_true(bson_iter_init_find(&iter, &current, "at") && bson_iter_as_bool(&iter));
    }
    /* No ids and no filter: nothing to pin. */
    bson_t none = BSON_INITIALIZER, more = BSON_INITIALIZER;
    index = 0;
    tier_pins_append_upserts(&more, &index, "shop.orders", &none, false, "host pid 1", 12000, &keys);
    assert_int_equal(index, 0);
    assert_true(bson_empty(&more));
    bson_destroy(&more);
    bson_destroy(&none);
    bson_destroy(&keys);
    bson_destroy(&statements);
    bson_destroy(&ids);
}

static bool matches(const bson_t *filter, const bson_t *document)
{
    bson_error_t error;
    match_expression_t *expression = match_compile(filter, &error);
    assert_non_null(expression);
    bool matched = match_document(expression, document);
    match_destroy(expression);
    return matched;
}

/* A pin or intent document (_id an ObjectId ending in key) written at `at` (wall
 * clock) to live lifetime_ms. */
static bson_t *written_as(uint8_t key, const char *ns, const char *ids_json, bool whole, int64_t at,
                          int64_t lifetime_ms)
{
    bson_t *document = bson_new(), *ids = support_json(ids_json);
    bson_oid_t oid = {{0}};
    oid.bytes[11] = key;
    BSON_APPEND_OID(document, "_id", &oid);
    BSON_APPEND_UTF8(document, "ns", ns);
    BSON_APPEND_ARRAY(document, "ids", ids);
    BSON_APPEND_BOOL(document, "whole", whole);
    BSON_APPEND_INT64(document, "lifetimeMillis", lifetime_ms);
    BSON_APPEND_DATE_TIME(document, "at", at);
    bson_destroy(ids);
    return document;
}

static bson_t *written(const char *ns, const char *ids_json, bool whole, int64_t at, int64_t lifetime_ms)
{
    return written_as(1, ns, ids_json, whole, at, lifetime_ms);
}

static void test_the_evictor_reads_the_live_pins_of_its_batch(void **state)
{
    (void)state;
    int64_t now = clock_wall_ms();
    bson_value_t batch[2] = {{.value_type = BSON_TYPE_INT32, .value.v_int32 = 7},
                             {.value_type = BSON_TYPE_INT32, .value.v_int32 = 8}};
    bson_t filter;
    tier_pins_filter_for_batch("shop.orders", batch, 2, &filter);
    bson_t *pin = written("shop.orders", "{'0': 1, '1': 8.0}", false, now, 60000);
    bson_t *whole = written("shop.orders", "{}", true, now, 60000);
    bson_t *other = written("shop.orders", "{'0': 9}", false, now, 60000);
    bson_t *elsewhere = written("shop.carts", "{'0': 7}", false, now, 60000);
    bson_t *expired = written("shop.orders", "{'0': 7}", false, now - 120000, 60000);
    bson_t *undated = bson_new();
    BSON_APPEND_UTF8(undated, "ns", "shop.orders");
    BSON_APPEND_BOOL(undated, "whole", true);
    assert_true(matches(&filter, pin)); /* 8.0 is the _id 8, as MongoDB compares */
    assert_true(matches(&filter, whole));
    assert_false(matches(&filter, other));
    assert_false(matches(&filter, elsewhere));
    assert_false(matches(&filter, expired)); /* a proxy killed -9 holds nothing past its pins' lifetime */
    assert_false(matches(&filter, undated));
    bson_t expired_filter = BSON_INITIALIZER;
    tier_pins_append_alive(&expired_filter, false);
    assert_true(matches(&expired_filter, expired));
    assert_true(matches(&expired_filter, undated));
    assert_false(matches(&expired_filter, pin));
    bson_destroy(&expired_filter);
    bson_destroy(undated);
    bson_destroy(expired);
    bson_destroy(elsewhere);
    bson_destroy(other);
    bson_destroy(whole);
    bson_destroy(pin);
    bson_destroy(&filter);
}

static void test_pins_cover_the_candidates_they_name_or_all(void **state)
{
    (void)state;
    bson_value_t batch[4] = {{.value_type = BSON_TYPE_DOUBLE, .value.v_double = 1.0},
                             {.value_type = BSON_TYPE_INT32, .value.v_int32 = 2},
                             {.value_type = BSON_TYPE_UTF8, .value.v_utf8 = {.str = "a", .len = 1}},
                             {.value_type = BSON_TYPE_INT64, .value.v_int64 = 4}};
    bool pinned[4] = {false, false, false, false};
    bson_t *pins = support_json("{'0': {'ids': [1, 'a']}, '1': {'ids': [1, 99]}, '2': {'whole': false}}");
    assert_int_equal(tier_pins_covered(pins, batch, 4, pinned), 2);
    assert_true(pinned[0] && !pinned[1] && pinned[2] && !pinned[3]);
    bson_t *whole = support_json("{'0': {'whole': true, 'ids': []}}");
    assert_int_equal(tier_pins_covered(whole, batch, 4, pinned), 2);
    assert_true(pinned[0] && pinned[1] && pinned[2] && pinned[3]);
    bson_t empty = BSON_INITIALIZER;
    bool none[4] = {false, false, false, false};
    assert_int_equal(tier_pins_covered(&empty, batch, 4, none), 0);
    assert_false(none[0] || none[1] || none[2] || none[3]);
    bson_destroy(whole);
    bson_destroy(pins);
}

/* A round of writes reads the intents covering any of them at once; each write
 * then picks its own (tier_eviction_covers), which must be exactly what its own
 * filter would have found. */
static void test_each_write_of_a_round_finds_the_intents_its_own_filter_would(void **state)
{
    (void)state;
    int64_t now = clock_wall_ms();
    const char *intents[] = {"{'0': 3, '1': 7}", "{'0': 3}", "{'0': 7.0}", "{'0': 'x', '1': 9}", "{}"};
    const char *namespaces[] = {"shop.orders", "shop.other"};
    bson_t *ids = support_json("{'0': 7, '1': 'x'}");
    for (size_t n = 0; n < sizeof namespaces / sizeof namespaces[0]; n++) {
        for (size_t i = 0; i < sizeof intents / sizeof intents[0]; i++) {
            bson_t *intent = written(namespaces[n], intents[i], false, now, 2000);
            for (int whole = 0; whole <= 1; whole++) {
                bson_t filter;
                tier_evictions_filter_for_pin("shop.orders", ids, whole, &filter);
                assert_int_equal(tier_eviction_covers(intent, "shop.orders", ids, whole), matches(&filter, intent));
                bson_destroy(&filter);
            }
            bson_destroy(intent);
        }
    }
    bson_t *covering = written("shop.orders", "{'0': 3, '1': 7}", false, now, 2000);
    assert_true(tier_eviction_covers(covering, "shop.orders", ids, false)); /* the oracle is not vacuous */
    bson_destroy(covering);
    bson_destroy(ids);
}

static void test_a_proxy_reads_the_intents_covering_its_pin_then_only_those(void **state)
{
    (void)state;
    int64_t now = clock_wall_ms();
    bson_t *ids = support_json("{'0': 7, '1': 'x'}");
    bson_t by_ids, by_namespace, by_keys;
    tier_evictions_filter_for_pin("shop.orders", ids, false, &by_ids);
    tier_evictions_filter_for_pin("shop.orders", ids, true, &by_namespace);
    bson_t *covering = written("shop.orders", "{'0': 3, '1': 7}", false, now, 2000);
    bson_t *apart = written("shop.orders", "{'0': 3}", false, now, 2000);
    bson_t *lapsed = written("shop.orders", "{'0': 7}", false, now - 5000, 2000);
    assert_true(matches(&by_ids, covering));
    assert_false(matches(&by_ids, apart));
    assert_false(matches(&by_ids, lapsed)); /* a dead evictor's intent holds writes only until it expires */
    assert_true(matches(&by_namespace, apart)); /* a write by filter waits for any batch of its namespace */

    bson_t documents = BSON_INITIALIZER, keys = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&documents, "0", covering);
    assert_int_equal(tier_pins_collect_keys(&documents, &keys), 1);
    tier_evictions_filter_for_keys(&keys, &by_keys);
    assert_true(matches(&by_keys, covering));
    /* An intent written after the pin: its evictor reads the pin, so it is not waited for. */
    bson_t *later = written_as(2, "shop.orders", "{'0': 7}", false, now, 2000);
    assert_false(matches(&by_keys, later));
    bson_destroy(later);
    bson_destroy(&by_keys);
    bson_destroy(&keys);
    bson_destroy(&documents);
    bson_destroy(lapsed);
    bson_destroy(apart);
    bson_destroy(covering);
    bson_destroy(&by_namespace);
    bson_destroy(&by_ids);
    bson_destroy(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_proxy_pins_in_the_fast_tier_unless_it_alone_runs_the_evictor),
        cmocka_unit_test(test_lifetimes_follow_the_config_timeouts),
        cmocka_unit_test(test_pin_documents_split_ids_and_pin_a_namespace_last),
        cmocka_unit_test(test_the_evictor_reads_the_live_pins_of_its_batch),
        cmocka_unit_test(test_pins_cover_the_candidates_they_name_or_all),
        cmocka_unit_test(test_each_write_of_a_round_finds_the_intents_its_own_filter_would),
        cmocka_unit_test(test_a_proxy_reads_the_intents_covering_its_pin_then_only_those),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
