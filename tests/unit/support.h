/* Shared fixtures of the C unit tests: test tables written as JSON with single
 * quotes, and keys written '%regex', '%type', '%set'... that become '$...' after
 * parsing (libbson's JSON reader would take {"$regex": ...} or {"$type": ...} for
 * legacy extended JSON). Include after <cmocka.h>. */
#ifndef TC_TESTS_UNIT_SUPPORT_H
#define TC_TESTS_UNIT_SUPPORT_H

#include <bson/bson.h>
#include <string.h>

/* Turns every key starting with '%' into one starting with '$', in place. */
static inline void support_dollar_keys(const uint8_t *data, uint32_t length)
{
    bson_iter_t iter;
    assert_true(bson_iter_init_from_data(&iter, data, length));
    while (bson_iter_next(&iter)) {
        char *key = (char *)bson_iter_key(&iter);
        if (key[0] == '%') {
            key[0] = '$';
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) || BSON_ITER_HOLDS_ARRAY(&iter)) {
            const uint8_t *child;
            uint32_t child_length;
            if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
                bson_iter_document(&iter, &child_length, &child);
            } else {
                bson_iter_array(&iter, &child_length, &child);
            }
            support_dollar_keys(child, child_length);
        }
    }
}

/* The document of a JSON text as written; fails the test on a typo. Free with
 * bson_destroy(). */
static inline bson_t *support_json_as_written(const char *text)
{
    bson_error_t error;
    bson_t *document = bson_new_from_json((const uint8_t *)text, -1, &error);
    if (document == NULL) {
        fail_msg("bad test JSON %s: %s", text, error.message);
    }
    return document;
}

/* The document of a JSON text written with single quotes for double quotes, to
 * keep the C strings readable. Free with bson_destroy(). */
static inline bson_t *support_json_single_quoted(const char *text)
{
    char *copy = bson_strdup(text);
    for (char *c = copy; *c != '\0'; c++) {
        if (*c == '\'') {
            *c = '"';
        }
    }
    bson_t *document = support_json_as_written(copy);
    bson_free(copy);
    return document;
}

/* The document {v: <value_json>}, its one value written as JSON: for tests of
 * values rather than documents. Free with bson_destroy(). */
static inline bson_t *support_json_wrapped(const char *value_json)
{
    char *text = bson_strdup_printf("{\"v\": %s}", value_json);
    bson_t *document = support_json_as_written(text);
    bson_free(text);
    return document;
}

/* The document of a single-quoted JSON text, '%' keys turned into '$' keys. Free
 * with bson_destroy(). */
static inline bson_t *support_json(const char *text)
{
    bson_t *document = support_json_single_quoted(text);
    support_dollar_keys(bson_get_data(document), document->len);
    return document;
}

#endif
