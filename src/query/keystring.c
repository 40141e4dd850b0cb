/* The byte encoding of index keys: one type byte per canonical rank (order.h), then
 * a body whose byte order is the value order within that rank. Bodies are
 * prefix-free, so documents, arrays and compound keys can simply concatenate them. */
#include "query/keystring.h"

#include <string.h>

#include "query/order.h"

/* One byte per canonical rank, in rank order, leaving 0x00 free to end documents. */
enum {
    KEY_END_OF_DOCUMENT = 0x00,
    KEY_MINKEY = 0x0a,
    KEY_UNDEFINED = 0x0f,
    KEY_NULL = 0x14,
    KEY_NUMBER = 0x1e,
    KEY_STRING = 0x28,
    KEY_DOCUMENT = 0x32,
    KEY_ARRAY = 0x3c,
    KEY_BINARY = 0x46,
    KEY_OID = 0x50,
    KEY_BOOL = 0x5a,
    KEY_DATE = 0x64,
    KEY_TIMESTAMP = 0x6e,
    KEY_REGEX = 0x78,
    KEY_DBPOINTER = 0x82,
    KEY_CODE = 0x8c,
    KEY_CODE_WITH_SCOPE = 0x96,
    KEY_MAXKEY = 0xf0,
};

/* Exponents of order_number_t span about -6176..6145; this keeps them positive. */
#define KEY_EXPONENT_BIAS 8192

void keystring_init(keystring_t *key)
{
    key->data = NULL;
    key->length = 0;
    key->capacity = 0;
}

void keystring_cleanup(keystring_t *key)
{
    bson_free(key->data);
    keystring_init(key);
}

void keystring_reset(keystring_t *key)
{
    key->length = 0;
}

static void reserve(keystring_t *key, size_t extra)
{
    if (key->length + extra <= key->capacity) {
        return;
    }
    size_t capacity = key->capacity < 32 ? 32 : key->capacity;
    while (capacity < key->length + extra) {
        capacity *= 2;
    }
    key->data = bson_realloc(key->data, capacity);
    key->capacity = capacity;
}

void keystring_append_bytes(keystring_t *key, const uint8_t *bytes, size_t length)
{
    if (length == 0) {
        return;
    }
    reserve(key, length);
    memcpy(key->data + key->length, bytes, length);
    key->length += length;
}

static void append_byte(keystring_t *key, uint8_t byte)
{
    reserve(key, 1);
    key->data[key->length++] = byte;
}

static void append_big_endian(keystring_t *key, uint64_t value, int byte_count)
{
    reserve(key, (size_t)byte_count);
    for (int shift = (byte_count - 1) * 8; shift >= 0; shift -= 8) {
        key->data[key->length++] = (uint8_t)(value >> shift);
    }
}

static void invert_from(keystring_t *key, size_t start)
{
    for (size_t i = start; i < key->length; i++) {
        key->data[i] = (uint8_t)~key->data[i];
    }
}

/* 0x00 inside the string becomes 00 FF and the string ends with 00 00, so a proper
 * prefix sorts first and embedded NULs keep their byte order. */
static void append_escaped(keystring_t *key, const char *text, size_t length)
{
    reserve(key, length + 2);
    for (size_t i = 0; i < length; i++) {
        uint8_t byte = (uint8_t)text[i];
        if (byte == 0x00) {
            append_byte(key, 0x00);
            append_byte(key, 0xff);
        } else {
            append_byte(key, byte);
        }
    }
    append_byte(key, 0x00);
    append_byte(key, 0x00);
}

/* Field names and regex parts cannot hold NUL, so a terminating NUL suffices. */
static void append_c_string(keystring_t *key, const char *text)
{
    keystring_append_bytes(key, (const uint8_t *)text, strlen(text) + 1);
}

/* The largest double not above the number (sign-flipped so bytes order as
 * numbers), then 00 when that double is the number, else 01 and the exact decimal
 * position, which orders the numbers lying between two adjacent doubles. */
static void append_number(keystring_t *key, const bson_value_t *value)
{
    order_number_t number;
    order_number_locate(value, &number);
    if (number.is_nan) {
        /* Below -inf, whose image is 000FFFFFFFFFFFFF. */
        append_big_endian(key, 0, 8);
        append_byte(key, 0x00);
        return;
    }
    uint64_t bits;
    memcpy(&bits, &number.floor, sizeof bits);
    bits = (bits >> 63) != 0 ? ~bits : bits | (UINT64_C(1) << 63);
    append_big_endian(key, bits, 8);
    if (number.exact) {
        append_byte(key, 0x00);
        return;
    }
    append_byte(key, 0x01);
    size_t start = key->length;
    append_big_endian(key, (uint64_t)(number.exponent + KEY_EXPONENT_BIAS), 2);
    append_big_endian(key, number.digits_high, 8);
    append_big_endian(key, number.digits_low, 8);
    if (number.negative) {
        /* A larger magnitude is a smaller negative number. */
        invert_from(key, start);
    }
}

static uint8_t type_byte(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_MINKEY:
        return KEY_MINKEY;
    case BSON_TYPE_NULL:
        return KEY_NULL;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return KEY_NUMBER;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return KEY_STRING;
    case BSON_TYPE_DOCUMENT:
        return KEY_DOCUMENT;
    case BSON_TYPE_ARRAY:
        return KEY_ARRAY;
    case BSON_TYPE_BINARY:
        return KEY_BINARY;
    case BSON_TYPE_OID:
        return KEY_OID;
    case BSON_TYPE_BOOL:
        return KEY_BOOL;
    case BSON_TYPE_DATE_TIME:
        return KEY_DATE;
    case BSON_TYPE_TIMESTAMP:
        return KEY_TIMESTAMP;
    case BSON_TYPE_REGEX:
        return KEY_REGEX;
    case BSON_TYPE_DBPOINTER:
        return KEY_DBPOINTER;
    case BSON_TYPE_CODE:
        return KEY_CODE;
    case BSON_TYPE_CODEWSCOPE:
        return KEY_CODE_WITH_SCOPE;
    case BSON_TYPE_MAXKEY:
        return KEY_MAXKEY;
    default:
        /* Undefined, and EOO which shares its rank. */
        return KEY_UNDEFINED;
    }
}

static void append_body(keystring_t *key, const bson_value_t *value, const collation_t *collation);

/* A string under a collation: its ICU sort key in place of its bytes, so equal
 * strings under the collation ("abc" and "ABC" at strength 2) make equal keys. */
static void append_string(keystring_t *key, const char *text, size_t length, const collation_t *collation)
{
    if (collation == NULL) {
        append_escaped(key, text, length);
        return;
    }
    size_t sort_key_length;
    uint8_t *sort_key = collation_sort_key(collation, text, length, &sort_key_length);
    append_escaped(key, (const char *)sort_key, sort_key_length);
    bson_free(sort_key);
}

/* Elements in order, each as type byte, field name (documents only) and body, then
 * a 00 that sorts below every type byte: shorter documents first. */
static void append_document(keystring_t *key, const uint8_t *data, size_t length,
                            bool with_field_names, const collation_t *collation)
{
    bson_iter_t iter;
    if (bson_iter_init_from_data(&iter, data, length)) {
        while (bson_iter_next(&iter)) {
            append_byte(key, type_byte(bson_iter_type(&iter)));
            if (with_field_names) {
                append_c_string(key, bson_iter_key(&iter));
            }
            append_body(key, bson_iter_value(&iter), collation);
        }
    }
    append_byte(key, KEY_END_OF_DOCUMENT);
}

static void append_body(keystring_t *key, const bson_value_t *value, const collation_t *collation)
{
    switch (value->value_type) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        append_number(key, value);
        break;
    case BSON_TYPE_UTF8:
        append_string(key, value->value.v_utf8.str, value->value.v_utf8.len, collation);
        break;
    case BSON_TYPE_SYMBOL:
        append_string(key, value->value.v_symbol.symbol, value->value.v_symbol.len, collation);
        break;
    case BSON_TYPE_DOCUMENT:
        append_document(key, value->value.v_doc.data, value->value.v_doc.data_len, true, collation);
        break;
    case BSON_TYPE_ARRAY:
        append_document(key, value->value.v_doc.data, value->value.v_doc.data_len, false, collation);
        break;
    case BSON_TYPE_BINARY: {
        /* Length (as mongod stores it: subtype 2 counts its inner length prefix),
         * subtype, then bytes: the fixed-size length makes it prefix-free. */
        bool deprecated = value->value.v_binary.subtype == BSON_SUBTYPE_BINARY_DEPRECATED;
        uint32_t stored_length = value->value.v_binary.data_len + (deprecated ? 4 : 0);
        append_big_endian(key, stored_length, 4);
        append_byte(key, (uint8_t)value->value.v_binary.subtype);
        keystring_append_bytes(key, value->value.v_binary.data, value->value.v_binary.data_len);
        break;
    }
    case BSON_TYPE_OID:
        keystring_append_bytes(key, value->value.v_oid.bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        append_byte(key, value->value.v_bool ? 1 : 0);
        break;
    case BSON_TYPE_DATE_TIME:
        append_big_endian(key, (uint64_t)value->value.v_datetime ^ (UINT64_C(1) << 63), 8);
        break;
    case BSON_TYPE_TIMESTAMP:
        append_big_endian(key, value->value.v_timestamp.timestamp, 4);
        append_big_endian(key, value->value.v_timestamp.increment, 4);
        break;
    case BSON_TYPE_REGEX:
        append_c_string(key, value->value.v_regex.regex);
        append_c_string(key, value->value.v_regex.options ? value->value.v_regex.options : "");
        break;
    case BSON_TYPE_DBPOINTER:
        append_big_endian(key, value->value.v_dbpointer.collection_len, 4);
        keystring_append_bytes(key, (const uint8_t *)value->value.v_dbpointer.collection,
                               value->value.v_dbpointer.collection_len);
        keystring_append_bytes(key, value->value.v_dbpointer.oid.bytes, 12);
        break;
    case BSON_TYPE_CODE:
        append_escaped(key, value->value.v_code.code, value->value.v_code.code_len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        append_escaped(key, value->value.v_codewscope.code, value->value.v_codewscope.code_len);
        append_document(key, value->value.v_codewscope.scope_data, value->value.v_codewscope.scope_len,
                        true, collation);
        break;
    default:
        /* MinKey, MaxKey, null, undefined: the type byte is the whole value. */
        break;
    }
}

void keystring_append_value(keystring_t *key, const bson_value_t *value, bool descending)
{
    keystring_append_value_collated(key, value, descending, NULL);
}

void keystring_append_value_collated(keystring_t *key, const bson_value_t *value, bool descending,
                                     const collation_t *collation)
{
    size_t start = key->length;
    append_byte(key, type_byte(value->value_type));
    append_body(key, value, collation);
    if (descending) {
        invert_from(key, start);
    }
}

void keystring_append_record_id(keystring_t *key, int64_t record_id)
{
    append_big_endian(key, (uint64_t)record_id ^ (UINT64_C(1) << 63), 8);
}

int keystring_compare_bytes(const uint8_t *left, size_t left_length, const uint8_t *right,
                            size_t right_length)
{
    size_t common = left_length < right_length ? left_length : right_length;
    int result = common == 0 ? 0 : memcmp(left, right, common);
    if (result != 0) {
        return result < 0 ? -1 : 1;
    }
    return left_length < right_length ? -1 : left_length > right_length ? 1 : 0;
}

int keystring_compare(const keystring_t *left, const keystring_t *right)
{
    return keystring_compare_bytes(left->data, left->length, right->data, right->length);
}
