/* Private to src/store: the options of a createIndexes spec beyond key, name and
 * unique (sparse, partialFilterExpression, hidden) as mongod 6.0 checks, compares
 * and applies them. Pure: no WiredTiger, no catalog. */
#ifndef TC_STORE_INDEX_OPTIONS_H
#define TC_STORE_INDEX_OPTIONS_H

#include "common/error.h"
#include "query/collation.h"

#include <bson/bson.h>
#include <stdbool.h>

/* Checks spec's options (spec normalized: v, key, name, then the options).
 * Errors, as mongod's: CannotCreateIndex 67 for sparse together with
 * partialFilterExpression and for an expression a partial filter may not hold
 * ("Expression not supported in partial index: ..."), TypeMismatch 14 for a
 * partialFilterExpression that is not a document, BadValue 2 (and the matcher's
 * other codes) for a filter that does not parse. */
bool index_options_validate(const bson_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* The filter a document must match to have entries in the index: the
 * partialFilterExpression; for a sparse index {$or: [{k1: {$exists: true}}, ...]}
 * over its key fields (a document with none of them is left out, null values
 * are kept); empty when every document is indexed. out is initialized here. */
void index_options_condition(const bson_t *spec, const bson_t *key_pattern, bson_t *out);

/* mongod's IndexDescriptor::compareIndexOptions: DIFFERENT when the key pattern
 * or the partialFilterExpression or the collation differ (they identify an
 * index: two indexes may share a key pattern under different filters or
 * collations), EQUIVALENT when only unique,
 * sparse or hidden differ, IDENTICAL otherwise. */
typedef enum index_options_comparison {
    INDEX_OPTIONS_IDENTICAL,
    INDEX_OPTIONS_EQUIVALENT,
    INDEX_OPTIONS_DIFFERENT,
} index_options_comparison_t;
index_options_comparison_t index_options_compare(const bson_t *existing, const bson_t *requested);

/* Appends to out_spec the collation an index created from spec gets, as mongod:
 * spec's own in its expanded form (none for {locale: "simple"}), else the
 * collection's default_collation (NULL: none). Errors: collation_parse()'s, and
 * TypeMismatch 14 for a collation that is not a document. */
bool index_options_append_collation(const bson_t *spec, const collation_t *default_collation, bson_t *out_spec,
                                    bson_error_t *error) TC_MUST_CHECK;

/* Compiles the "collation" field of an index spec or a collection's options
 * (stored expanded): *out_collation a new reference, or NULL without one. */
bool index_options_read_collation(const bson_t *document, const collation_t **out_collation,
                                  bson_error_t *error) TC_MUST_CHECK;

/* Whether the index spec (a document value) has no collation or a valid one. */
bool index_options_check_collation(const bson_value_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* A boolean option's value in spec (absent: false), as mongod's trueValue(). */
bool index_options_flag(const bson_t *spec, const char *name);

/* Appends spec as mongod prints one in a message: { v: 2, key: { a: 1 }, name: "a_1" }. */
void index_options_format(bson_string_t *out, const bson_t *spec);

#endif
