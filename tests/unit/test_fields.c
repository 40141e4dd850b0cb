/* Unit tests for src/common/fields.c: every lookup through the index finds what
 * bson_iter_init_find finds (the first of duplicated keys, nothing for a missing
 * key, fields past the indexed ones, keys that share a prefix), and an iterator
 * found through it reads the value in place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fields.h"

#include <stdio.h>

/* Every key of the document, and a few it lacks, found both ways. */
static void assert_same_as_walking(const bson_t *document, const char *const *extra_keys, size_t extra_count)
{
    fields_t fields;
    bson_iter_t walk, indexed, expected;
    assert_true(fields_index(&fields, document));
    assert_true(bson_iter_init(&walk, document));
    while (bson_iter_next(&walk)) {
        const char *key = bson_iter_key(&walk);
        assert_true(fields_find(&fields, key, &indexed));
        assert_true(bson_iter_init_find(&expected, document, key));
        assert_string_equal(bson_iter_key(&indexed), key);
        assert_int_equal(bson_iter_offset(&indexed), bson_iter_offset(&expected));
        assert_int_equal(bson_iter_type(&indexed), bson_iter_type(&expected));
    }
    for (size_t i = 0; i < extra_count; i++) {
        assert_int_equal(fields_has(&fields, extra_keys[i]), bson_iter_init_find(&expected, document, extra_keys[i]));
    }
}

static void test_a_command_s_fields(void **state)
{
    (void)state;
    bson_t *command = BCON_NEW("find", "orders", "filter", "{", "_id", BCON_INT32(7), "}", "limit", BCON_INT32(1),
                               "lsid", "{", "id", BCON_INT32(1), "}", "$db", "shop");
    const char *absent[] = {"autocommit", "txnNumber", "$readPreference", "fin", "finds", "", "$d"};
    assert_same_as_walking(command, absent, sizeof absent / sizeof absent[0]);
    fields_t fields;
    bson_iter_t iter;
    assert_true(fields_index(&fields, command));
    assert_true(fields_find(&fields, "$db", &iter));
    assert_string_equal(bson_iter_utf8(&iter, NULL), "shop");
    assert_true(fields_find(&fields, "limit", &iter));
    assert_int_equal(bson_iter_int32(&iter), 1);
    /* The found iterator goes on to the next field, as a walked one does. */
    assert_true(bson_iter_next(&iter));
    assert_string_equal(bson_iter_key(&iter), "lsid");
    bson_destroy(command);
}

static void test_duplicated_keys_find_the_first(void **state)
{
    (void)state;
    bson_t document = BSON_INITIALIZER;
    BSON_APPEND_INT32(&document, "a", 1);
    BSON_APPEND_INT32(&document, "b", 2);
    BSON_APPEND_INT32(&document, "a", 3);
    fields_t fields;
    bson_iter_t iter;
    assert_true(fields_index(&fields, &document));
    assert_true(fields_find(&fields, "a", &iter));
    assert_int_equal(bson_iter_int32(&iter), 1);
    bson_destroy(&document);
}

static void test_fields_past_the_index_are_found(void **state)
{
    (void)state;
    bson_t document = BSON_INITIALIZER;
    char key[32];
    for (int i = 0; i < FIELDS_INDEXED + 8; i++) {
        snprintf(key, sizeof key, "field%d", i);
        BSON_APPEND_INT32(&document, key, i);
    }
    BSON_APPEND_INT32(&document, "field3", -1); /* a duplicate past the index: the first still wins */
    const char *absent[] = {"field99", "field"};
    assert_same_as_walking(&document, absent, 2);
    fields_t fields;
    bson_iter_t iter;
    assert_true(fields_index(&fields, &document));
    assert_false(fields.complete);
    assert_true(fields_find(&fields, "field39", &iter));
    assert_int_equal(bson_iter_int32(&iter), 39);
    assert_true(fields_find(&fields, "field3", &iter));
    assert_int_equal(bson_iter_int32(&iter), 3);
    bson_destroy(&document);
}

static void test_empty_and_unreadable_documents_find_nothing(void **state)
{
    (void)state;
    bson_t empty = BSON_INITIALIZER;
    fields_t fields;
    bson_iter_t iter;
    assert_true(fields_index(&fields, &empty));
    assert_false(fields_find(&fields, "find", &iter));
    /* A length prefix that lies: bson_iter_init refuses it, and so does the index. */
    uint8_t lying[] = {0x20, 0, 0, 0, 0};
    bson_t broken;
    if (bson_init_static(&broken, lying, sizeof lying)) {
        assert_false(fields_index(&fields, &broken));
        assert_false(fields_find(&fields, "find", &iter));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_command_s_fields),
        cmocka_unit_test(test_duplicated_keys_find_the_first),
        cmocka_unit_test(test_fields_past_the_index_are_found),
        cmocka_unit_test(test_empty_and_unreadable_documents_find_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
