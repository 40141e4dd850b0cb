/* Index keys as bytes whose memcmp order is MongoDB's BSON order (order.h), in the
 * spirit of mongod's KeyString, so WiredTiger can keep indexes with plain byte
 * comparison. The encoding is one-way: the store keeps the key values beside it. */
#ifndef TC_QUERY_KEYSTRING_H
#define TC_QUERY_KEYSTRING_H

#include "query/collation.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer. Every encoded value is prefix-free (no value's bytes are a
 * proper prefix of another's), so concatenated components compare
 * lexicographically, component by component. */
typedef struct keystring {
    uint8_t *data;
    size_t length;
    size_t capacity;
} keystring_t;

/* An empty key. Pair with keystring_cleanup(). */
void keystring_init(keystring_t *key);

/* Appends one component. Values equal under order_compare_values encode to the same
 * bytes (5, 5.0, 5L and decimal 5.00 alike); descending inverts the component's
 * bytes, reversing its order. Arrays are encoded without their field names, which
 * assumes the positional names "0", "1", ... every valid array has. */
void keystring_append_value(keystring_t *key, const bson_value_t *value, bool descending);

/* keystring_append_value under a collation (NULL: binary): each string, also
 * inside arrays and documents, is encoded by its ICU sort key, so strings the
 * collation finds equal encode to the same bytes, as mongod's collated index keys. */
void keystring_append_value_collated(keystring_t *key, const bson_value_t *value, bool descending,
                                     const collation_t *collation);

/* Appends a record id (always ascending) so equal index keys stay distinct and
 * ordered by record. */
void keystring_append_record_id(keystring_t *key, int64_t record_id);

/* Appends raw bytes (to rebuild a key read back from storage). */
void keystring_append_bytes(keystring_t *key, const uint8_t *bytes, size_t length);

/* Empties the key, keeping its buffer. */
void keystring_reset(keystring_t *key);

/* memcmp order, a proper prefix first; <0, 0 or >0. */
int keystring_compare(const keystring_t *left, const keystring_t *right);
int keystring_compare_bytes(const uint8_t *left, size_t left_length, const uint8_t *right,
                            size_t right_length);

/* Frees the buffer and leaves an empty key; safe to call twice. */
void keystring_cleanup(keystring_t *key);

#endif
