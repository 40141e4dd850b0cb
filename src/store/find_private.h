/* Private to src/store/find*.c: index bounds from a filter (find_bounds.c), which
 * find.c's access-path choice scores and scans, and the filter helpers both use. */
#ifndef TC_STORE_FIND_PRIVATE_H
#define TC_STORE_FIND_PRIVATE_H

#include "store/find.h"

/* The intervals of a scan of index key_pattern bounded by filter (a plan's, or one
 * $or clause): equality prefixes, then one range or point list, each field's
 * bounds as explain's indexBounds in explain ({field: ["[5, 5]"]}, reset first).
 * Adds to *intervals (allocated here; empty on entry) and *interval_count; free
 * each with scan_bounds_cleanup() and the array with bson_free(). Returns false,
 * adding no interval, when the first field is unbounded. collation is the index's
 * (NULL: binary), which string bounds are encoded and ordered by.
 * *out_bounded_fields: how many of the pattern's fields, from the first, bound it. */
bool find_bounds_build(const bson_t *filter, const bson_t *key_pattern, bool multikey, const collation_t *collation,
                       scan_bounds_t **intervals, size_t *interval_count, size_t *out_bounded_fields,
                       bson_t *explain);

/* +1 for an ascending key pattern field, -1 for a descending one. */
int find_index_direction(const bson_iter_t *iter);

/* A document whose first field starts with '$': {$gt: 1}. */
bool find_is_operator_document(const bson_iter_t *iter);

/* False for the operands an index cannot bound by: arrays, regexes, null, undefined. */
bool find_value_is_indexable_operand(const bson_value_t *value);

#endif
