/* MongoDB's BSON comparison order, as BSONElement::compareElements and
 * BSONObj::woCompare define it: cross-type ranks first, numbers compared exactly
 * across int32/int64/double/decimal128, everything else byte-wise. */
#include "query/order.h"

#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decimal128 coefficients reach 10^34 - 1, which needs 113 bits. */
__extension__ typedef unsigned __int128 wide_unsigned;

#define DECIMAL_EXPONENT_BIAS 6176
#define DECIMAL_MAX_DIGITS 34

int order_canonical_type(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_MINKEY:
        return -1;
    case BSON_TYPE_EOD:
    case BSON_TYPE_UNDEFINED:
        return 0;
    case BSON_TYPE_NULL:
        return 5;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return 10;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return 15;
    case BSON_TYPE_DOCUMENT:
        return 20;
    case BSON_TYPE_ARRAY:
        return 25;
    case BSON_TYPE_BINARY:
        return 30;
    case BSON_TYPE_OID:
        return 35;
    case BSON_TYPE_BOOL:
        return 40;
    case BSON_TYPE_DATE_TIME:
        return 45;
    case BSON_TYPE_TIMESTAMP:
        return 47;
    case BSON_TYPE_REGEX:
        return 50;
    case BSON_TYPE_DBPOINTER:
        return 55;
    case BSON_TYPE_CODE:
        return 60;
    case BSON_TYPE_CODEWSCOPE:
        return 65;
    case BSON_TYPE_MAXKEY:
        return 127;
    default:
        return 0;
    }
}

bool order_is_number(bson_type_t type)
{
    return type == BSON_TYPE_DOUBLE || type == BSON_TYPE_INT32 || type == BSON_TYPE_INT64 ||
           type == BSON_TYPE_DECIMAL128;
}

static int sign_of(int64_t difference)
{
    return difference < 0 ? -1 : difference > 0 ? 1 : 0;
}

static int compare_longs(int64_t left, int64_t right)
{
    return left == right ? 0 : left < right ? -1 : 1;
}

/* NaN equals NaN and sorts below every other number. */
static int compare_doubles(double left, double right)
{
    if (left == right) {
        return 0;
    }
    if (left < right) {
        return -1;
    }
    if (left > right) {
        return 1;
    }
    if (isnan(left)) {
        return isnan(right) ? 0 : -1;
    }
    return 1;
}

/* Exact: an int64 beyond 2^53 is not rounded to a double first. */
static int compare_long_to_double(int64_t left, double right)
{
    const int64_t end_of_precise_doubles = INT64_C(1) << 53;
    const double bound_of_long_range = 9223372036854775808.0; /* 2^63 */

    if (isnan(right)) {
        return 1;
    }
    if (left <= end_of_precise_doubles && left >= -end_of_precise_doubles) {
        return compare_doubles((double)left, right);
    }
    if (right >= bound_of_long_range) {
        return -1;
    }
    if (right < -bound_of_long_range) {
        return 1;
    }
    /* Doubles this large have no fraction, so truncating loses nothing. */
    return compare_longs(left, (int64_t)right);
}

/* ---- decimal128 ---------------------------------------------------------- */

typedef enum { DECIMAL_FINITE, DECIMAL_INFINITY, DECIMAL_NAN } decimal_kind_t;

typedef struct decimal_parts {
    decimal_kind_t kind;
    bool negative;
    wide_unsigned coefficient; /* 0 for any zero */
    int32_t exponent;
} decimal_parts_t;

static wide_unsigned power_of_ten(int count)
{
    wide_unsigned result = 1;
    while (count-- > 0) {
        result *= 10;
    }
    return result;
}

static int digit_count(wide_unsigned value)
{
    int digits = 0;
    while (value != 0) {
        value /= 10;
        digits++;
    }
    return digits;
}

/* Unpacks the IEEE 754-2008 BID encoding libbson stores. */
static void decimal_split(const bson_decimal128_t *decimal, decimal_parts_t *out)
{
    uint64_t high = decimal->high;
    unsigned combination = (unsigned)((high >> 58) & 0x1f);

    out->negative = (high >> 63) != 0;
    out->coefficient = 0;
    out->exponent = 0;
    if (combination == 0x1f) {
        out->kind = DECIMAL_NAN;
        return;
    }
    if (combination == 0x1e) {
        out->kind = DECIMAL_INFINITY;
        return;
    }
    out->kind = DECIMAL_FINITE;
    if (((high >> 61) & 3) == 3) {
        /* This form implies a coefficient of at least 2^113, above the 10^34 - 1
         * maximum, and IEEE 754 reads such a coefficient as zero. */
        out->exponent = (int32_t)((high >> 47) & 0x3fff) - DECIMAL_EXPONENT_BIAS;
        return;
    }
    out->exponent = (int32_t)((high >> 49) & 0x3fff) - DECIMAL_EXPONENT_BIAS;
    wide_unsigned coefficient =
        ((wide_unsigned)(high & UINT64_C(0x1ffffffffffff)) << 64) | decimal->low;
    if (coefficient < power_of_ten(DECIMAL_MAX_DIGITS)) {
        out->coefficient = coefficient;
    }
}

static void decimal_parts_from_long(int64_t value, decimal_parts_t *out)
{
    out->kind = DECIMAL_FINITE;
    out->negative = value < 0;
    /* -(value + 1) + 1 avoids negating INT64_MIN. */
    out->coefficient = value < 0 ? (wide_unsigned)(uint64_t)(-(value + 1)) + 1
                                 : (wide_unsigned)(uint64_t)value;
    out->exponent = 0;
}

/* |value| = 0.d1 ... d34 x 10^exponent: comparing (exponent, digits) compares
 * magnitudes whatever the original coefficient/exponent split was. */
static void decimal_magnitude(const decimal_parts_t *parts, int32_t *out_exponent,
                              wide_unsigned *out_digits)
{
    int digits = digit_count(parts->coefficient);
    *out_digits = parts->coefficient * power_of_ten(DECIMAL_MAX_DIGITS - digits);
    *out_exponent = parts->exponent + digits;
}

/* NaN < -inf < negative < zero < positive < +inf. */
static int decimal_class(const decimal_parts_t *parts)
{
    switch (parts->kind) {
    case DECIMAL_NAN:
        return 0;
    case DECIMAL_INFINITY:
        return parts->negative ? 1 : 5;
    default:
        if (parts->coefficient == 0) {
            return 3;
        }
        return parts->negative ? 2 : 4;
    }
}

static int compare_decimal_parts(const decimal_parts_t *left, const decimal_parts_t *right)
{
    int left_class = decimal_class(left);
    int right_class = decimal_class(right);
    if (left_class != right_class) {
        return left_class < right_class ? -1 : 1;
    }
    if (left_class != 2 && left_class != 4) {
        return 0;
    }
    int32_t left_exponent, right_exponent;
    wide_unsigned left_digits, right_digits;
    decimal_magnitude(left, &left_exponent, &left_digits);
    decimal_magnitude(right, &right_exponent, &right_digits);
    int magnitude = left_exponent != right_exponent ? (left_exponent < right_exponent ? -1 : 1)
                    : left_digits != right_digits   ? (left_digits < right_digits ? -1 : 1)
                                                    : 0;
    return left_class == 2 ? -magnitude : magnitude;
}

/* The largest double not above a finite non-zero decimal, and whether it is the
 * decimal exactly. glibc's strtod rounds correctly in every rounding mode, so
 * rounding down and up brackets the value; equal brackets mean an exact double. */
static void decimal_floor_finite(const decimal_parts_t *parts, double *out_floor, bool *out_exact)
{
    char digits[48];
    char text[80];
    size_t length = 0;
    wide_unsigned rest = parts->coefficient;
    do {
        digits[length++] = (char)('0' + (int)(rest % 10));
        rest /= 10;
    } while (rest != 0);
    size_t position = 0;
    if (parts->negative) {
        text[position++] = '-';
    }
    while (length > 0) {
        text[position++] = digits[--length];
    }
    snprintf(text + position, sizeof text - position, "e%d", (int)parts->exponent);

    int saved_mode = fegetround();
    fesetround(FE_DOWNWARD);
    double down = strtod(text, NULL);
    fesetround(FE_UPWARD);
    double up = strtod(text, NULL);
    fesetround(saved_mode);

    *out_floor = down == 0.0 ? 0.0 : down;
    *out_exact = down == up;
}

/* NaN is handled by the caller. */
static void decimal_floor(const decimal_parts_t *parts, double *out_floor, bool *out_exact)
{
    if (parts->kind == DECIMAL_INFINITY) {
        *out_floor = parts->negative ? -INFINITY : INFINITY;
        *out_exact = true;
    } else if (parts->coefficient == 0) {
        *out_floor = 0.0;
        *out_exact = true;
    } else {
        decimal_floor_finite(parts, out_floor, out_exact);
    }
}

/* As mongo's compareDecimalToDouble: the decimal rounded toward negative infinity,
 * and an inexact rounding means the decimal is the greater. */
static int compare_decimal_to_double(const decimal_parts_t *left, double right)
{
    if (left->kind == DECIMAL_NAN) {
        return isnan(right) ? 0 : -1;
    }
    if (isnan(right)) {
        return 1;
    }
    double floor;
    bool exact;
    decimal_floor(left, &floor, &exact);
    if (floor == right) {
        return exact ? 0 : 1;
    }
    return floor < right ? -1 : 1;
}

static int64_t integer_of(const bson_value_t *value)
{
    return value->value_type == BSON_TYPE_INT32 ? value->value.v_int32 : value->value.v_int64;
}

static int compare_numbers(const bson_value_t *left, const bson_value_t *right)
{
    bson_type_t left_type = left->value_type;
    bson_type_t right_type = right->value_type;

    if (left_type == BSON_TYPE_DECIMAL128 || right_type == BSON_TYPE_DECIMAL128) {
        decimal_parts_t left_parts, right_parts;
        if (left_type == BSON_TYPE_DOUBLE) {
            decimal_split(&right->value.v_decimal128, &right_parts);
            return -compare_decimal_to_double(&right_parts, left->value.v_double);
        }
        if (right_type == BSON_TYPE_DOUBLE) {
            decimal_split(&left->value.v_decimal128, &left_parts);
            return compare_decimal_to_double(&left_parts, right->value.v_double);
        }
        if (left_type == BSON_TYPE_DECIMAL128) {
            decimal_split(&left->value.v_decimal128, &left_parts);
        } else {
            decimal_parts_from_long(integer_of(left), &left_parts);
        }
        if (right_type == BSON_TYPE_DECIMAL128) {
            decimal_split(&right->value.v_decimal128, &right_parts);
        } else {
            decimal_parts_from_long(integer_of(right), &right_parts);
        }
        return compare_decimal_parts(&left_parts, &right_parts);
    }
    if (left_type == BSON_TYPE_DOUBLE && right_type == BSON_TYPE_DOUBLE) {
        return compare_doubles(left->value.v_double, right->value.v_double);
    }
    if (left_type == BSON_TYPE_DOUBLE) {
        return -compare_long_to_double(integer_of(right), left->value.v_double);
    }
    if (right_type == BSON_TYPE_DOUBLE) {
        return compare_long_to_double(integer_of(left), right->value.v_double);
    }
    return compare_longs(integer_of(left), integer_of(right));
}

bool order_number_locate(const bson_value_t *value, order_number_t *out)
{
    decimal_parts_t parts;

    memset(out, 0, sizeof *out);
    out->exact = true;
    switch (value->value_type) {
    case BSON_TYPE_DOUBLE: {
        double number = value->value.v_double;
        if (isnan(number)) {
            out->is_nan = true;
            return true;
        }
        out->floor = number == 0.0 ? 0.0 : number;
        out->negative = number < 0.0;
        return true;
    }
    case BSON_TYPE_INT32:
        out->floor = value->value.v_int32;
        out->negative = value->value.v_int32 < 0;
        return true;
    case BSON_TYPE_INT64: {
        int64_t number = value->value.v_int64;
        double nearest = (double)number;
        int position = compare_long_to_double(number, nearest);
        out->floor = position < 0 ? nextafter(nearest, -INFINITY) : nearest;
        out->exact = position == 0;
        out->negative = number < 0;
        decimal_parts_from_long(number, &parts);
        break;
    }
    case BSON_TYPE_DECIMAL128:
        decimal_split(&value->value.v_decimal128, &parts);
        if (parts.kind == DECIMAL_NAN) {
            out->is_nan = true;
            return true;
        }
        decimal_floor(&parts, &out->floor, &out->exact);
        out->negative = parts.negative && decimal_class(&parts) != 3;
        break;
    default:
        return false;
    }
    if (!out->exact) {
        wide_unsigned digits;
        decimal_magnitude(&parts, &out->exponent, &digits);
        out->digits_high = (uint64_t)(digits >> 64);
        out->digits_low = (uint64_t)digits;
    }
    return true;
}

/* ---- everything else ----------------------------------------------------- */

/* Byte-wise, a proper prefix first: StringData::compare with the simple collation. */
static int compare_bytes(const void *left, size_t left_length, const void *right,
                         size_t right_length)
{
    size_t common = left_length < right_length ? left_length : right_length;
    int result = common == 0 ? 0 : memcmp(left, right, common);
    if (result != 0) {
        return result < 0 ? -1 : 1;
    }
    return left_length < right_length ? -1 : left_length > right_length ? 1 : 0;
}

static int compare_c_strings(const char *left, const char *right)
{
    return sign_of(strcmp(left, right));
}

static int compare_document_data(const uint8_t *left, size_t left_length, const uint8_t *right,
                                 size_t right_length, const collation_t *collation);

/* collation NULL: the simple (binary) collation. */
static int compare_same_rank(const bson_value_t *left, const bson_value_t *right, const collation_t *collation)
{
    switch (left->value_type) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return compare_numbers(left, right);
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        /* Strings and symbols share a rank and compare as strings. */
        const char *left_text = left->value_type == BSON_TYPE_UTF8 ? left->value.v_utf8.str
                                                                : left->value.v_symbol.symbol;
        size_t left_length = left->value_type == BSON_TYPE_UTF8 ? left->value.v_utf8.len
                                                             : left->value.v_symbol.len;
        const char *right_text = right->value_type == BSON_TYPE_UTF8 ? right->value.v_utf8.str
                                                                 : right->value.v_symbol.symbol;
        size_t right_length = right->value_type == BSON_TYPE_UTF8 ? right->value.v_utf8.len
                                                              : right->value.v_symbol.len;
        if (collation != NULL) {
            return collation_compare(collation, left_text, left_length, right_text, right_length);
        }
        return compare_bytes(left_text, left_length, right_text, right_length);
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        /* Field names stay binary: a collation orders values only. */
        return compare_document_data(left->value.v_doc.data, left->value.v_doc.data_len,
                                     right->value.v_doc.data, right->value.v_doc.data_len, collation);
    case BSON_TYPE_BINARY: {
        /* mongod compares the stored length, which for the old binary subtype 2
         * includes the inner length prefix libbson strips. */
        uint32_t left_length = left->value.v_binary.data_len +
                               (left->value.v_binary.subtype == BSON_SUBTYPE_BINARY_DEPRECATED ? 4 : 0);
        uint32_t right_length = right->value.v_binary.data_len +
                                (right->value.v_binary.subtype == BSON_SUBTYPE_BINARY_DEPRECATED ? 4 : 0);
        if (left_length != right_length) {
            return left_length < right_length ? -1 : 1;
        }
        if (left->value.v_binary.subtype != right->value.v_binary.subtype) {
            return left->value.v_binary.subtype < right->value.v_binary.subtype ? -1 : 1;
        }
        return compare_bytes(left->value.v_binary.data, left->value.v_binary.data_len,
                             right->value.v_binary.data, right->value.v_binary.data_len);
    }
    case BSON_TYPE_OID:
        return sign_of(memcmp(left->value.v_oid.bytes, right->value.v_oid.bytes, 12));
    case BSON_TYPE_BOOL:
        return (int)left->value.v_bool - (int)right->value.v_bool;
    case BSON_TYPE_DATE_TIME:
        return compare_longs(left->value.v_datetime, right->value.v_datetime);
    case BSON_TYPE_TIMESTAMP: {
        /* Unsigned: seconds then increment. */
        uint64_t left_stamp =
            ((uint64_t)left->value.v_timestamp.timestamp << 32) | left->value.v_timestamp.increment;
        uint64_t right_stamp =
            ((uint64_t)right->value.v_timestamp.timestamp << 32) | right->value.v_timestamp.increment;
        return left_stamp == right_stamp ? 0 : left_stamp < right_stamp ? -1 : 1;
    }
    case BSON_TYPE_REGEX: {
        int result = compare_c_strings(left->value.v_regex.regex, right->value.v_regex.regex);
        if (result != 0) {
            return result;
        }
        return compare_c_strings(left->value.v_regex.options ? left->value.v_regex.options : "",
                                 right->value.v_regex.options ? right->value.v_regex.options : "");
    }
    case BSON_TYPE_DBPOINTER: {
        /* mongod compares the value's size (namespace length) before its bytes. */
        uint32_t left_length = left->value.v_dbpointer.collection_len;
        uint32_t right_length = right->value.v_dbpointer.collection_len;
        if (left_length != right_length) {
            return left_length < right_length ? -1 : 1;
        }
        int result = compare_bytes(left->value.v_dbpointer.collection, left_length,
                                   right->value.v_dbpointer.collection, right_length);
        if (result != 0) {
            return result;
        }
        return sign_of(memcmp(left->value.v_dbpointer.oid.bytes, right->value.v_dbpointer.oid.bytes, 12));
    }
    case BSON_TYPE_CODE:
        return compare_bytes(left->value.v_code.code, left->value.v_code.code_len, right->value.v_code.code,
                             right->value.v_code.code_len);
    case BSON_TYPE_CODEWSCOPE: {
        int result = compare_bytes(left->value.v_codewscope.code, left->value.v_codewscope.code_len,
                                   right->value.v_codewscope.code, right->value.v_codewscope.code_len);
        if (result != 0) {
            return result;
        }
        return compare_document_data(left->value.v_codewscope.scope_data,
                                     left->value.v_codewscope.scope_len,
                                     right->value.v_codewscope.scope_data,
                                     right->value.v_codewscope.scope_len, collation);
    }
    default:
        /* MinKey, MaxKey, null, undefined: the rank says it all. */
        return 0;
    }
}

int order_compare_values(const bson_value_t *left, const bson_value_t *right)
{
    return order_compare_values_collated(left, right, NULL);
}

int order_compare_values_collated(const bson_value_t *left, const bson_value_t *right, const collation_t *collation)
{
    int left_rank = order_canonical_type(left->value_type);
    int right_rank = order_canonical_type(right->value_type);
    if (left_rank != right_rank) {
        return left_rank < right_rank ? -1 : 1;
    }
    return compare_same_rank(left, right, collation);
}

/* BSONObj::woCompare: element by element, each by rank, then field name, then
 * value; the document that runs out first is the smaller. */
static int compare_document_data(const uint8_t *left, size_t left_length, const uint8_t *right,
                                 size_t right_length, const collation_t *collation)
{
    bson_iter_t left_iter, right_iter;
    bool left_valid = bson_iter_init_from_data(&left_iter, left, left_length);
    bool right_valid = bson_iter_init_from_data(&right_iter, right, right_length);

    for (;;) {
        bool left_more = left_valid && bson_iter_next(&left_iter);
        bool right_more = right_valid && bson_iter_next(&right_iter);
        if (!left_more) {
            return right_more ? -1 : 0;
        }
        if (!right_more) {
            return 1;
        }
        int left_rank = order_canonical_type(bson_iter_type(&left_iter));
        int right_rank = order_canonical_type(bson_iter_type(&right_iter));
        if (left_rank != right_rank) {
            return left_rank < right_rank ? -1 : 1;
        }
        const char *left_key = bson_iter_key(&left_iter);
        const char *right_key = bson_iter_key(&right_iter);
        int result = compare_bytes(left_key, strlen(left_key), right_key, strlen(right_key));
        if (result != 0) {
            return result;
        }
        bson_value_t left_value = *bson_iter_value(&left_iter);
        bson_value_t right_value = *bson_iter_value(&right_iter);
        result = compare_same_rank(&left_value, &right_value, collation);
        if (result != 0) {
            return result;
        }
    }
}

int order_compare_iters(const bson_iter_t *left, const bson_iter_t *right)
{
    /* bson_iter_value caches into the iterator, so work on copies. */
    bson_iter_t left_copy = *left;
    bson_iter_t right_copy = *right;
    bson_value_t left_value = *bson_iter_value(&left_copy);
    bson_value_t right_value = *bson_iter_value(&right_copy);
    return order_compare_values(&left_value, &right_value);
}

int order_compare_documents(const bson_t *left, const bson_t *right)
{
    return compare_document_data(bson_get_data(left), left->len, bson_get_data(right), right->len, NULL);
}
