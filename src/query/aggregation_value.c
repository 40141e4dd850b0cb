/* Helpers on aggregation values (bson_value_t, with BSON_TYPE_EOD meaning missing):
 * comparison and hashing consistent with MongoDB's Value, truthiness, numeric
 * coercion, owned-value construction and UTC calendar arithmetic. */
#include "query/aggregation_value.h"

#include "query/keystring.h"
#include "query/order.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void aggregation_value_set_missing(bson_value_t *value)
{
    memset(value, 0, sizeof *value);
    value->value_type = BSON_TYPE_EOD;
}

bool aggregation_value_is_missing(const bson_value_t *value)
{
    return value->value_type == BSON_TYPE_EOD;
}

void aggregation_value_copy(const bson_value_t *source, bson_value_t *out_copy)
{
    if (source->value_type == BSON_TYPE_EOD) {
        aggregation_value_set_missing(out_copy);
    } else {
        bson_value_copy(source, out_copy);
    }
}

bool aggregation_value_is_nullish(const bson_value_t *value)
{
    return value->value_type == BSON_TYPE_EOD || value->value_type == BSON_TYPE_NULL ||
           value->value_type == BSON_TYPE_UNDEFINED;
}

bool aggregation_value_is_number(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return true;
    default:
        return false;
    }
}

/* Missing and undefined share Value's canonical rank 0, between MinKey and null. */
static bool is_missing_or_undefined(const bson_value_t *value)
{
    return value->value_type == BSON_TYPE_EOD || value->value_type == BSON_TYPE_UNDEFINED;
}

int aggregation_value_compare(const bson_value_t *left, const bson_value_t *right)
{
    return aggregation_value_compare_collated(left, right, NULL);
}

int aggregation_value_compare_collated(const bson_value_t *left, const bson_value_t *right,
                                       const collation_t *collation)
{
    bool left_low = is_missing_or_undefined(left);
    bool right_low = is_missing_or_undefined(right);
    if (left_low && right_low) {
        return 0;
    }
    if (left_low) {
        return right->value_type == BSON_TYPE_MINKEY ? 1 : -1;
    }
    if (right_low) {
        return left->value_type == BSON_TYPE_MINKEY ? -1 : 1;
    }
    return order_compare_values_collated(left, right, collation);
}

static double decimal_to_double(const bson_decimal128_t *decimal)
{
    char text[BSON_DECIMAL128_STRING];
    bson_decimal128_to_string(decimal, text);
    return strtod(text, NULL);
}

double aggregation_value_as_double(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        return value->value.v_int32;
    case BSON_TYPE_INT64:
        return (double)value->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return value->value.v_double;
    case BSON_TYPE_DECIMAL128:
        return decimal_to_double(&value->value.v_decimal128);
    default:
        return 0.0;
    }
}

/* A double truncated toward zero and clamped to the int64 range (NaN gives 0). */
static int64_t double_to_int64(double number)
{
    if (isnan(number)) {
        return 0;
    }
    if (number >= 9223372036854775807.0) {
        return INT64_MAX;
    }
    if (number <= -9223372036854775808.0) {
        return INT64_MIN;
    }
    return (int64_t)number;
}

int64_t aggregation_value_as_int64(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        return value->value.v_int32;
    case BSON_TYPE_INT64:
        return value->value.v_int64;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return double_to_int64(aggregation_value_as_double(value));
    default:
        return 0;
    }
}

bool aggregation_value_is_integral32(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        return true;
    case BSON_TYPE_INT64:
        return value->value.v_int64 >= INT32_MIN && value->value.v_int64 <= INT32_MAX;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: {
        double number = aggregation_value_as_double(value);
        return number >= INT32_MIN && number <= INT32_MAX && number == trunc(number);
    }
    default:
        return false;
    }
}

bool aggregation_value_truthy(const bson_value_t *value)
{
    switch (value->value_type) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return false;
    case BSON_TYPE_BOOL:
        return value->value.v_bool;
    case BSON_TYPE_INT32:
        return value->value.v_int32 != 0;
    case BSON_TYPE_INT64:
        return value->value.v_int64 != 0;
    case BSON_TYPE_DOUBLE:
        return value->value.v_double != 0.0;
    case BSON_TYPE_DECIMAL128:
        return aggregation_value_as_double(value) != 0.0;
    default:
        return true;
    }
}

/* ---- hashing (FNV-1a) ---- */

#define HASH_OFFSET 1469598103934665603ull
#define HASH_PRIME 1099511628211ull

static uint64_t hash_bytes(uint64_t hash, const void *bytes, size_t length)
{
    const uint8_t *cursor = bytes;
    for (size_t i = 0; i < length; i++) {
        hash ^= cursor[i];
        hash *= HASH_PRIME;
    }
    return hash;
}

static uint64_t hash_value(uint64_t hash, const bson_value_t *value);

static uint64_t hash_document(uint64_t hash, const uint8_t *data, uint32_t length, bool with_keys)
{
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, data, length)) {
        return hash;
    }
    while (bson_iter_next(&iter)) {
        if (with_keys) {
            hash = hash_bytes(hash, bson_iter_key(&iter), bson_iter_key_len(&iter) + 1);
        }
        hash = hash_value(hash, bson_iter_value(&iter));
    }
    return hash;
}

static uint64_t hash_value(uint64_t hash, const bson_value_t *value)
{
    if (is_missing_or_undefined(value)) {
        return hash_bytes(hash, "missing", 7);
    }
    int rank = order_canonical_type(value->value_type);
    hash = hash_bytes(hash, &rank, sizeof rank);
    switch (value->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: {
        double number = aggregation_value_as_double(value);
        if (number == 0.0) {
            number = 0.0; /* -0 equals 0 */
        }
        if (isnan(number)) {
            return hash_bytes(hash, "nan", 3);
        }
        return hash_bytes(hash, &number, sizeof number);
    }
    case BSON_TYPE_UTF8:
        return hash_bytes(hash, value->value.v_utf8.str, value->value.v_utf8.len);
    case BSON_TYPE_SYMBOL:
        return hash_bytes(hash, value->value.v_symbol.symbol, value->value.v_symbol.len);
    case BSON_TYPE_DOCUMENT:
        return hash_document(hash, value->value.v_doc.data, value->value.v_doc.data_len, true);
    case BSON_TYPE_ARRAY:
        return hash_document(hash, value->value.v_doc.data, value->value.v_doc.data_len, false);
    case BSON_TYPE_BINARY:
        return hash_bytes(hash, value->value.v_binary.data, value->value.v_binary.data_len);
    case BSON_TYPE_OID:
        return hash_bytes(hash, value->value.v_oid.bytes, sizeof value->value.v_oid.bytes);
    case BSON_TYPE_BOOL: {
        uint8_t truth = value->value.v_bool ? 1 : 0;
        return hash_bytes(hash, &truth, 1);
    }
    case BSON_TYPE_DATE_TIME:
        return hash_bytes(hash, &value->value.v_datetime, sizeof value->value.v_datetime);
    case BSON_TYPE_TIMESTAMP:
        hash = hash_bytes(hash, &value->value.v_timestamp.timestamp, 4);
        return hash_bytes(hash, &value->value.v_timestamp.increment, 4);
    case BSON_TYPE_REGEX:
        return hash_bytes(hash, value->value.v_regex.regex, strlen(value->value.v_regex.regex));
    default:
        return hash;
    }
}

uint64_t aggregation_value_hash(const bson_value_t *value)
{
    return hash_value(HASH_OFFSET, value);
}

uint64_t aggregation_value_hash_collated(const bson_value_t *value, const collation_t *collation)
{
    if (collation == NULL) {
        return hash_value(HASH_OFFSET, value);
    }
    /* The collated index key is equal exactly for the values the collation finds
     * equal (missing and undefined share a type byte), so hash its bytes. */
    keystring_t key;
    keystring_init(&key);
    keystring_append_value_collated(&key, value, false, collation);
    uint64_t hash = hash_bytes(HASH_OFFSET, key.data, key.length);
    keystring_cleanup(&key);
    return hash;
}

/* ---- construction ---- */

void aggregation_value_set_int32(bson_value_t *out, int32_t number)
{
    out->value_type = BSON_TYPE_INT32;
    out->value.v_int32 = number;
}

void aggregation_value_set_int64(bson_value_t *out, int64_t number)
{
    out->value_type = BSON_TYPE_INT64;
    out->value.v_int64 = number;
}

void aggregation_value_set_int_or_long(bson_value_t *out, int64_t number)
{
    if (number >= INT32_MIN && number <= INT32_MAX) {
        aggregation_value_set_int32(out, (int32_t)number);
    } else {
        aggregation_value_set_int64(out, number);
    }
}

void aggregation_value_set_double(bson_value_t *out, double number)
{
    out->value_type = BSON_TYPE_DOUBLE;
    out->value.v_double = number;
}

void aggregation_value_set_decimal_from_double(bson_value_t *out, double number)
{
    char text[64];
    if (isnan(number)) {
        snprintf(text, sizeof text, "NaN");
    } else if (isinf(number)) {
        snprintf(text, sizeof text, number < 0 ? "-Infinity" : "Infinity");
    } else {
        /* The shortest spelling that reads back as the same double. */
        for (int precision = 1; precision <= 17; precision++) {
            snprintf(text, sizeof text, "%.*g", precision, number);
            if (strtod(text, NULL) == number) {
                break;
            }
        }
    }
    out->value_type = BSON_TYPE_DECIMAL128;
    bson_decimal128_from_string(text, &out->value.v_decimal128);
}

void aggregation_value_set_bool(bson_value_t *out, bool truth)
{
    out->value_type = BSON_TYPE_BOOL;
    out->value.v_bool = truth;
}

void aggregation_value_set_null(bson_value_t *out)
{
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_NULL;
}

void aggregation_value_set_date(bson_value_t *out, int64_t milliseconds)
{
    out->value_type = BSON_TYPE_DATE_TIME;
    out->value.v_datetime = milliseconds;
}

void aggregation_value_set_utf8(bson_value_t *out, const char *text, size_t length)
{
    char *copy = bson_malloc(length + 1);
    memcpy(copy, text, length);
    copy[length] = '\0';
    aggregation_value_take_utf8(out, copy, length);
}

void aggregation_value_take_utf8(bson_value_t *out, char *text, size_t length)
{
    out->value_type = BSON_TYPE_UTF8;
    out->value.v_utf8.str = text;
    out->value.v_utf8.len = (uint32_t)length;
}

void aggregation_value_take_document(bson_value_t *out, bson_t *document, bson_type_t type)
{
    uint32_t length = 0;
    uint8_t *data = bson_destroy_with_steal(document, true, &length);
    out->value_type = type;
    out->value.v_doc.data = data;
    out->value.v_doc.data_len = length;
}

void aggregation_value_append(bson_t *document, const char *key, int key_length,
                              const bson_value_t *value)
{
    if (value->value_type == BSON_TYPE_EOD) {
        return;
    }
    bson_append_value(document, key, key_length, value);
}

bool aggregation_value_is_field_name(const bson_value_t *string)
{
    return string->value_type == BSON_TYPE_UTF8 &&
           bson_utf8_validate(string->value.v_utf8.str, string->value.v_utf8.len, false);
}

int64_t aggregation_value_code_points(const bson_value_t *string)
{
    int64_t count = 0;
    for (uint32_t i = 0; i < string->value.v_utf8.len; i++) {
        count += ((unsigned char)string->value.v_utf8.str[i] & 0xC0) != 0x80;
    }
    return count;
}

bool aggregation_value_view_document(const bson_value_t *value, bson_t *out_view)
{
    if (value->value_type != BSON_TYPE_DOCUMENT && value->value_type != BSON_TYPE_ARRAY) {
        return false;
    }
    return bson_init_static(out_view, value->value.v_doc.data, value->value.v_doc.data_len);
}

size_t aggregation_value_memory(const bson_value_t *value)
{
    size_t size = sizeof *value;
    switch (value->value_type) {
    case BSON_TYPE_UTF8:
        return size + value->value.v_utf8.len + 1;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return size + value->value.v_doc.data_len;
    case BSON_TYPE_BINARY:
        return size + value->value.v_binary.data_len;
    case BSON_TYPE_REGEX:
        return size + strlen(value->value.v_regex.regex) + strlen(value->value.v_regex.options);
    default:
        return size;
    }
}

static void describe_document(const bson_value_t *value, bson_string_t *text)
{
    bool is_array = value->value_type == BSON_TYPE_ARRAY;
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, value->value.v_doc.data, value->value.v_doc.data_len)) {
        bson_string_append(text, is_array ? "[]" : "{}");
        return;
    }
    bool first = true;
    bson_string_append(text, is_array ? "[" : "{");
    while (bson_iter_next(&iter)) {
        bson_string_append(text, first ? " " : ", ");
        first = false;
        if (!is_array) {
            bson_string_append_printf(text, "%s: ", bson_iter_key(&iter));
        }
        aggregation_value_describe(bson_iter_value(&iter), text);
    }
    bson_string_append(text, first ? (is_array ? "]" : "}") : (is_array ? " ]" : " }"));
}

void aggregation_value_describe(const bson_value_t *value, bson_string_t *text)
{
    switch (value->value_type) {
    case BSON_TYPE_EOD:
        bson_string_append(text, "MISSING");
        return;
    case BSON_TYPE_UTF8:
        bson_string_append_printf(text, "\"%s\"", value->value.v_utf8.str);
        return;
    case BSON_TYPE_INT32:
        bson_string_append_printf(text, "%d", value->value.v_int32);
        return;
    case BSON_TYPE_INT64:
        bson_string_append_printf(text, "%lld", (long long)value->value.v_int64);
        return;
    case BSON_TYPE_DOUBLE: {
        double number = value->value.v_double;
        bson_string_append_printf(
            text, number == trunc(number) && fabs(number) < 1e15 ? "%.1f" : "%g", number);
        return;
    }
    case BSON_TYPE_BOOL:
        bson_string_append(text, value->value.v_bool ? "true" : "false");
        return;
    case BSON_TYPE_NULL:
        bson_string_append(text, "null");
        return;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        describe_document(value, text);
        return;
    default: {
        /* Wrap in a document so libbson renders any other type as JSON. */
        bson_t wrapper = BSON_INITIALIZER;
        bson_append_value(&wrapper, "v", 1, value);
        char *json = bson_as_relaxed_extended_json(&wrapper, NULL);
        if (json != NULL && strlen(json) > 10) {
            /* json is `{ "v" : <value> }`: keep only <value>. */
            json[strlen(json) - 2] = '\0';
            bson_string_append(text, json + 8);
        }
        bson_free(json);
        bson_destroy(&wrapper);
        return;
    }
    }
}

char *aggregation_document_describe(const bson_t *document)
{
    bson_value_t value;
    value.value_type = BSON_TYPE_DOCUMENT;
    value.value.v_doc.data = (uint8_t *)bson_get_data(document);
    value.value.v_doc.data_len = document->len;
    bson_string_t *text = bson_string_new(NULL);
    aggregation_value_describe(&value, text);
    return bson_string_free(text, false);
}

/* ---- calendar (proleptic Gregorian, UTC) ---- */

static int64_t floor_divide(int64_t numerator, int64_t denominator)
{
    int64_t quotient = numerator / denominator;
    if ((numerator % denominator != 0) && ((numerator < 0) != (denominator < 0))) {
        quotient--;
    }
    return quotient;
}

static bool is_leap_year(int64_t year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

void aggregation_civil_time_from_milliseconds(int64_t milliseconds,
                                              aggregation_civil_time_t *out_time)
{
    int64_t days = floor_divide(milliseconds, 86400000);
    int64_t in_day = milliseconds - days * 86400000;
    out_time->hour = (int)(in_day / 3600000);
    out_time->minute = (int)(in_day / 60000 % 60);
    out_time->second = (int)(in_day / 1000 % 60);
    out_time->millisecond = (int)(in_day % 1000);

    /* Days since 1970-01-01 to a civil date, counting in 400-year eras from 0000-03-01
     * so leap days fall at the end of each counted year. */
    int64_t shifted = days + 719468;
    int64_t era = floor_divide(shifted, 146097);
    int64_t day_of_era = shifted - era * 146097;
    int64_t year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
    int64_t day_of_march_year =
        day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    int64_t month_from_march = (5 * day_of_march_year + 2) / 153;
    out_time->day = (int)(day_of_march_year - (153 * month_from_march + 2) / 5 + 1);
    out_time->month = (int)(month_from_march < 10 ? month_from_march + 3 : month_from_march - 9);
    out_time->year = year_of_era + era * 400 + (out_time->month <= 2 ? 1 : 0);

    /* 1970-01-01 was a Thursday (5 when Sunday is 1). */
    out_time->day_of_week = (int)(floor_divide(days + 4, 7) * -7 + days + 4) + 1;

    static const int days_before_month[12] = {0,   31,  59,  90,  120, 151,
                                              181, 212, 243, 273, 304, 334};
    out_time->day_of_year = days_before_month[out_time->month - 1] + out_time->day +
                            ((out_time->month > 2 && is_leap_year(out_time->year)) ? 1 : 0);
}

char *aggregation_date_to_iso_string(int64_t milliseconds)
{
    aggregation_civil_time_t time;
    aggregation_civil_time_from_milliseconds(milliseconds, &time);
    return bson_strdup_printf("%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ", (long long)time.year,
                              time.month, time.day, time.hour, time.minute, time.second,
                              time.millisecond);
}
