/* Sort specifications ({a: 1, "b.c": -1}) and the comparison of documents under
 * one, with MongoDB's rules: a missing field sorts as null, an array field sorts by
 * its smallest element ascending and its largest descending. */
#ifndef TC_QUERY_SORT_H
#define TC_QUERY_SORT_H

#include "common/error.h"
#include "query/keystring.h"

typedef struct sort_spec sort_spec_t;

/* Compiles a sort document. Values must be numbers truncating to 1 or -1 (1.0, -1L,
 * 1.5 alike, as mongod's safeNumberLong); an empty document sorts nothing. Errors,
 * with mongod 6.0's codes: 15974 for a non-numeric value, 15975 for another number,
 * 17312 / 9 / 31138 for a malformed {$meta: ...}, BadValue 2 for a valid $meta (no
 * text or search scores exist here), FieldPath's 40352 / 40353 / 15998 / 16410 /
 * Overflow 15 for a bad path. Free with sort_spec_destroy(). */
sort_spec_t *sort_spec_compile(const bson_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* Sorts strings by collation from now on (its ICU sort keys in the keystring;
 * NULL: binary). Takes a reference. */
void sort_spec_set_collation(sort_spec_t *spec, const collation_t *collation);

/* Appends document's sort key to out_key, a keystring (keystring.h) that orders
 * documents by plain byte comparison: its smallest index key under an index shaped
 * like spec, as mongod's SortKeyGenerator. When out_values is not NULL, appends the
 * key's values to it as {"": v1, "": v2, ...}. Nothing is appended for an empty spec.
 * Errors: BadValue 2 "cannot sort with keys that are parallel arrays", and 16746 for
 * an ambiguous numeric field name (index_keys.h). A sorter should generate each
 * document's key once with this, report its error as mongod would, and compare keys
 * with keystring_compare(). */
bool sort_key_generate(const sort_spec_t *spec, const bson_t *document, keystring_t *out_key,
                       bson_t *out_values, bson_error_t *error) TC_MUST_CHECK;

/* <0, 0 or >0 as left sorts before, equal to or after right under spec (generates
 * both sort keys on every call). When either key cannot be generated (parallel
 * arrays), where mongod would fail the query, falls back to comparing key by key,
 * each key generated alone and a failing one taken as null. */
int sort_compare_documents(const sort_spec_t *spec, const bson_t *left, const bson_t *right);

/* Number of keys; the i-th key's dotted path and direction (1 or -1). */
size_t sort_spec_key_count(const sort_spec_t *spec);
const char *sort_spec_key_path(const sort_spec_t *spec, size_t index);
int sort_spec_key_direction(const sort_spec_t *spec, size_t index);

/* Safe on NULL. */
void sort_spec_destroy(sort_spec_t *spec);

#endif
