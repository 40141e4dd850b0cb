/* Values as the aggregation framework sees them: a bson_value_t whose value_type is
 * BSON_TYPE_EOD stands for "missing" (a field that is absent, $$REMOVE), which MongoDB
 * keeps apart from null. Shared by expressions, $group, $project and $unwind. */
#ifndef TC_QUERY_AGGREGATION_VALUE_H
#define TC_QUERY_AGGREGATION_VALUE_H

#include "query/collation.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* Sets value to missing (no allocation; bson_value_destroy() on it is a no-op). */
void aggregation_value_set_missing(bson_value_t *value);

bool aggregation_value_is_missing(const bson_value_t *value);

/* bson_value_copy that also copies missing (which libbson refuses). */
void aggregation_value_copy(const bson_value_t *source, bson_value_t *out_copy);

/* Missing, null or undefined: what most operators answer null to. */
bool aggregation_value_is_nullish(const bson_value_t *value);

/* int32, int64, double or decimal128. */
bool aggregation_value_is_number(const bson_value_t *value);

/* MongoDB's Value::compare: order_compare_values, except that missing and undefined
 * sort together below null (so {$eq: ["$absent", null]} is false). */
int aggregation_value_compare(const bson_value_t *left, const bson_value_t *right);

/* A hash under which values that compare equal (1, 1.0, NumberLong(1)) collide. */
uint64_t aggregation_value_hash(const bson_value_t *value);

/* The two under a collation (NULL: the same as above): strings it finds equal
 * compare equal and hash alike ($group keys, $addToSet, $min and $max). */
int aggregation_value_compare_collated(const bson_value_t *left, const bson_value_t *right,
                                       const collation_t *collation);
uint64_t aggregation_value_hash_collated(const bson_value_t *value, const collation_t *collation);

/* Value::coerceToBool: false for false, null, undefined, missing and numeric zero. */
bool aggregation_value_truthy(const bson_value_t *value);

/* Numeric coercions; the value must be a number (decimal128 goes through double). */
double aggregation_value_as_double(const bson_value_t *value);
int64_t aggregation_value_as_int64(const bson_value_t *value);

/* True when a number holds an integral value that fits int32 (Value::integral). */
bool aggregation_value_is_integral32(const bson_value_t *value);

/* Setters that overwrite out without destroying it. */
void aggregation_value_set_int32(bson_value_t *out, int32_t number);
void aggregation_value_set_int64(bson_value_t *out, int64_t number);
/* int32 when number fits, else int64 (MongoDB's Value::createIntOrLong). */
void aggregation_value_set_int_or_long(bson_value_t *out, int64_t number);
void aggregation_value_set_double(bson_value_t *out, double number);
/* decimal128 from a double (through its shortest %.17g spelling). */
void aggregation_value_set_decimal_from_double(bson_value_t *out, double number);
void aggregation_value_set_bool(bson_value_t *out, bool truth);
void aggregation_value_set_null(bson_value_t *out);
void aggregation_value_set_date(bson_value_t *out, int64_t milliseconds);
/* Copies length bytes of text into an owned UTF-8 value. */
void aggregation_value_set_utf8(bson_value_t *out, const char *text, size_t length);
/* Takes ownership of text (allocated with bson_malloc). */
void aggregation_value_take_utf8(bson_value_t *out, char *text, size_t length);

/* Turns a built document (or array, when type is BSON_TYPE_ARRAY) into an owned value;
 * document is consumed (its storage is stolen and it must not be used again). */
void aggregation_value_take_document(bson_value_t *out, bson_t *document, bson_type_t type);

/* Appends value under key to document; a missing value appends nothing. */
void aggregation_value_append(bson_t *document, const char *key, int key_length,
                              const bson_value_t *value);

/* Whether a string value may become a field name of a document the server builds
 * ($count, includeArrayIndex, $setField, $rename): valid UTF-8 without an embedded
 * NUL. Every document the server accepts has such names (wire_bson_check), and
 * libbson's iterator stops at a name that is not UTF-8, so none is made here either. */
bool aggregation_value_is_field_name(const bson_value_t *string);

/* The length of a string value in code points ($strLenCP, $jsonSchema's
 * minLength): each starts at a byte that is not a UTF-8 continuation byte. */
int64_t aggregation_value_code_points(const bson_value_t *string);

/* A document or array value seen as a read-only bson_t (no copy). False for other types. */
bool aggregation_value_view_document(const bson_value_t *value, bson_t *out_view);

/* Approximate bytes a value holds, for the memory limits of blocking stages. */
size_t aggregation_value_memory(const bson_value_t *value);

/* Appends a rendering of value to text for error messages, in the style of mongod's
 * BSONObj::toString: { a: 1, b: "x" }, [ 1, 2 ], missing as MISSING. */
void aggregation_value_describe(const bson_value_t *value, bson_string_t *text);

/* The same for a whole document; returns an allocated string: free with bson_free(). */
char *aggregation_document_describe(const bson_t *document);

/* UTC civil time of a date in milliseconds since the epoch. */
typedef struct aggregation_civil_time {
    int64_t year;
    int month; /* 1..12 */
    int day;   /* 1..31 */
    int hour, minute, second, millisecond;
    int day_of_week; /* 1 (Sunday) .. 7 (Saturday), as $dayOfWeek */
    int day_of_year; /* 1..366 */
} aggregation_civil_time_t;

void aggregation_civil_time_from_milliseconds(int64_t milliseconds,
                                              aggregation_civil_time_t *out_time);

/* "2018-03-27T16:58:51.538Z", MongoDB's rendering of a date as a string; returns an
 * allocated string: free with bson_free(). */
char *aggregation_date_to_iso_string(int64_t milliseconds);

#endif
