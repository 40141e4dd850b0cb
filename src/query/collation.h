/* MongoDB's collations: a collation document ({locale: "en", strength: 2, ...})
 * compiled once into an ICU collator that compares strings and makes their sort
 * keys. A compiled collation is immutable and shared read-only by every thread
 * and every holder (a command's plan, a collection's default, an index), each
 * holding a reference. NULL everywhere means the simple collation: binary
 * comparison, {locale: "simple"}, the code paths that existed before collations. */
#ifndef TC_QUERY_COLLATION_H
#define TC_QUERY_COLLATION_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct collation collation_t;

/* Compiles a collation document as mongod 6.0 does (its IDL parser, then ICU).
 * *out_collation is NULL for {locale: "simple"}, else a new reference (release
 * with collation_release()). Errors, with mongod's codes and messages: 40414
 * without locale, Location40415 for an unknown field, TypeMismatch 14 for a
 * field of the wrong type, BadValue 2 for a locale ICU does not know ("Field
 * 'locale' is invalid in: { locale: "xx" }"), an enumeration value that is none
 * of caseFirst's, alternate's or maxVariable's, a strength outside 1..5
 * (51024 below 0 or above 5), backwards at strength 1, caseFirst without
 * caseLevel below strength 3; IncompatibleCollationVersion 161 for a version
 * that is not this ICU's. */
bool collation_parse(const bson_t *spec, collation_t **out_collation, bson_error_t *error) TC_MUST_CHECK;

/* Another reference to collation (NULL stays NULL), for a holder that may outlive
 * the one it got the collation from. */
const collation_t *collation_retain(const collation_t *collation);

/* Drops one reference; the last frees the collator. Safe on NULL. */
void collation_release(const collation_t *collation);

/* The expanded form every reply shows (listCollections, listIndexes, explain):
 * {locale, caseLevel, caseFirst, strength, numericOrdering, alternate,
 * maxVariable, normalization, backwards, version}, the defaults the locale gives
 * filled in, version ICU's own. Borrowed from collation. */
const bson_t *collation_spec(const collation_t *collation);

/* Whether two collations order strings identically (same expanded form); NULL
 * equals only NULL. A query may use an index only under an equal collation. */
bool collation_equal(const collation_t *left, const collation_t *right);

/* <0, 0 or >0 as left sorts before, equal to or after right (UTF-8, lengths in
 * bytes) under collation, which must not be NULL. */
int collation_compare(const collation_t *collation, const char *left, size_t left_length, const char *right,
                      size_t right_length);

/* The string's ICU sort key: bytes whose memcmp order is collation_compare's,
 * without any 0x00 byte (ICU's terminator is left out). Returns a buffer the
 * caller bson_free()s and its length in *out_length. */
uint8_t *collation_sort_key(const collation_t *collation, const char *text, size_t length, size_t *out_length);

#endif
