/* A document's index keys under a key pattern, as mongod's BtreeKeyGenerator makes
 * them: missing -> null, one key per array element (multikey), empty array ->
 * undefined, dotted paths through sub-documents and arrays of sub-documents. */
#ifndef TC_QUERY_INDEX_KEYS_H
#define TC_QUERY_INDEX_KEYS_H

#include "common/error.h"
#include "query/keystring.h"

typedef struct index_keys_pattern index_keys_pattern_t;

/* Compiles a key pattern such as {a: 1, "b.c": -1}: a negative number makes the field
 * descending, any other number ascending (full validation of createIndexes specs
 * belongs to the caller). Non-numeric values (special index types such as "hashed")
 * fail with CannotCreateIndex 67; so does an empty pattern or field name. The pattern
 * is copied. Free with index_keys_pattern_destroy(). */
index_keys_pattern_t *index_keys_pattern_new(const bson_t *key_pattern,
                                           bson_error_t *error) TC_MUST_CHECK;

size_t index_keys_pattern_field_count(const index_keys_pattern_t *pattern);

/* Makes the pattern's string keys collated (keystring_append_value_collated): an
 * index with a collation, or a sort under one. Takes a reference; NULL restores
 * binary keys. */
void index_keys_pattern_set_collation(index_keys_pattern_t *pattern, const collation_t *collation);

/* Safe on NULL. */
void index_keys_pattern_destroy(index_keys_pattern_t *pattern);

typedef struct index_key {
    /* The key's components, each in its field's direction, without record id. */
    keystring_t keystring;
    /* {"": v1, "": v2, ...}: the key's values, as kept for covered queries. */
    bson_t *values;
} index_key_t;

typedef struct index_key_set {
    /* Sorted by keystring, duplicates removed (the first generated one kept). */
    index_key_t *keys;
    size_t count;
    /* True when an indexed path went through an array (even an empty or a
     * one-element one), which makes the index multikey. */
    bool multikey;
} index_key_set_t;

/* Fills out with every key of document; at least one (all-null when every field is
 * missing). The keys copy what they need, so document may be freed afterwards. Always
 * initializes out, even on failure; release it with index_keys_set_cleanup().
 * Errors: CannotIndexParallelArrays 171 when two paths of the pattern reach two
 * different arrays; 16746 for a numeric field name that is also an array position. */
bool index_keys_generate(const index_keys_pattern_t *pattern, const bson_t *document,
                         index_key_set_t *out, bson_error_t *error) TC_MUST_CHECK;

/* Frees every key and empties the set; safe to call twice. */
void index_keys_set_cleanup(index_key_set_t *set);

#endif
