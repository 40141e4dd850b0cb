/* MongoDB's total order over BSON values: the cross-type comparison order, numeric
 * equivalence across int32/int64/double/decimal128, and the simple (binary) string
 * collation. Used by the matcher, sort, indexes and $group. */
#ifndef TC_QUERY_ORDER_H
#define TC_QUERY_ORDER_H

#include "query/collation.h"

#include <bson/bson.h>
#include <stdbool.h>

/* The canonical rank of a type in MongoDB's order: MinKey < undefined < null <
 * numbers < symbol = string < object < array < binData < ObjectId < bool < date <
 * timestamp < regex < ... < MaxKey. Types of equal rank compare by value. */
int order_canonical_type(bson_type_t type);

/* <0, 0 or >0 as left sorts before, equal to, or after right. Arrays and
 * documents compare element by element (type rank, then field name, then value),
 * as BSONObj::woCompare does. NaN equals NaN and sorts below every other number. */
int order_compare_values(const bson_value_t *left, const bson_value_t *right);

/* order_compare_values under a collation: strings (and symbols), also inside
 * arrays and documents, compare by collation (NULL: binary, the same as
 * order_compare_values); field names and every other type as before. */
int order_compare_values_collated(const bson_value_t *left, const bson_value_t *right, const collation_t *collation);

/* The same comparison for the values iterators point at. */
int order_compare_iters(const bson_iter_t *left, const bson_iter_t *right);

/* Compares two documents as values (order_compare_values on two documents). */
int order_compare_documents(const bson_t *left, const bson_t *right);

/* True when type is a number type (int32, int64, double, decimal128). */
bool order_is_number(bson_type_t type);

/* Where a number lies on the number line, exactly, whatever its BSON type: numbers
 * that compare equal (5, 5.0, 5L, 5.00 decimal) locate identically. The comparison
 * and the index key encoding (keystring.h) both rest on it. */
typedef struct order_number {
    bool is_nan;
    /* The largest double not above the value; +0.0 for every zero, -inf for values
     * below -DBL_MAX. */
    double floor;
    /* False when the value lies strictly between floor and the next double (an int64
     * beyond 2^53, most decimals); then the fields below give it exactly. */
    bool exact;
    bool negative;
    /* |value| = 0.d1 d2 ... d34 x 10^exponent with d1 != 0; the 34 digits as a
     * 113-bit integer split in two halves. */
    int32_t exponent;
    uint64_t digits_high;
    uint64_t digits_low;
} order_number_t;

/* Fills out for a number value; false when value is not a number. Decimals are
 * converted with the C library's correctly rounded strtod under directed rounding,
 * so this touches the calling thread's floating-point rounding mode (restored). */
bool order_number_locate(const bson_value_t *value, order_number_t *out);

#endif
