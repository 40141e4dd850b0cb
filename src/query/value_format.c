/* mongod's text form of BSON values, for error messages and explain. */
#include "query/value_format.h"

#include <math.h>
#include <string.h>

const char *value_type_name(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_DOUBLE: return "double";
    case BSON_TYPE_UTF8: return "string";
    case BSON_TYPE_DOCUMENT: return "object";
    case BSON_TYPE_ARRAY: return "array";
    case BSON_TYPE_BINARY: return "binData";
    case BSON_TYPE_UNDEFINED: return "undefined";
    case BSON_TYPE_OID: return "objectId";
    case BSON_TYPE_BOOL: return "bool";
    case BSON_TYPE_DATE_TIME: return "date";
    case BSON_TYPE_NULL: return "null";
    case BSON_TYPE_REGEX: return "regex";
    case BSON_TYPE_DBPOINTER: return "dbPointer";
    case BSON_TYPE_CODE: return "javascript";
    case BSON_TYPE_SYMBOL: return "symbol";
    case BSON_TYPE_CODEWSCOPE: return "javascriptWithScope";
    case BSON_TYPE_INT32: return "int";
    case BSON_TYPE_TIMESTAMP: return "timestamp";
    case BSON_TYPE_INT64: return "long";
    case BSON_TYPE_DECIMAL128: return "decimal";
    case BSON_TYPE_MINKEY: return "minKey";
    case BSON_TYPE_MAXKEY: return "maxKey";
    case BSON_TYPE_EOD: return "missing";
    default: return "unknown";
    }
}

bool value_type_from_name(const char *name, bson_type_t *out_type)
{
    /* Every BSON type: 0x01 (double) to 0x13 (decimal), then maxKey and minKey. */
    for (int code = BSON_TYPE_DOUBLE; code <= BSON_TYPE_MINKEY; code++) {
        bool is_type = code <= BSON_TYPE_DECIMAL128 || code == BSON_TYPE_MAXKEY || code == BSON_TYPE_MINKEY;
        if (is_type && strcmp(name, value_type_name((bson_type_t)code)) == 0) {
            *out_type = (bson_type_t)code;
            return true;
        }
    }
    return false;
}

static void append_document(bson_string_t *out, const uint8_t *data, uint32_t length, bool is_array)
{
    bson_t document;
    bson_iter_t iter;
    bool first = true;
    if (!bson_init_static(&document, data, length) || !bson_iter_init(&iter, &document)) {
        bson_string_append(out, is_array ? "[]" : "{}");
        return;
    }
    bson_string_append(out, is_array ? "[ " : "{ ");
    while (bson_iter_next(&iter)) {
        if (!first) {
            bson_string_append(out, ", ");
        }
        first = false;
        if (!is_array) {
            bson_string_append_printf(out, "%s: ", bson_iter_key(&iter));
        }
        value_format_append(out, bson_iter_value(&iter));
    }
    bson_string_append(out, first ? (is_array ? "]" : "}") : (is_array ? " ]" : " }"));
}

static void append_double(bson_string_t *out, double number)
{
    if (isnan(number)) {
        bson_string_append(out, "nan.0");
    } else if (isinf(number)) {
        bson_string_append(out, number > 0 ? "inf.0" : "-inf.0");
    } else if (number == floor(number) && fabs(number) < 1e15) {
        bson_string_append_printf(out, "%.1f", number);
    } else {
        bson_string_append_printf(out, "%.17g", number);
    }
}

void value_format_append(bson_string_t *out, const bson_value_t *value)
{
    char text[64];
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        bson_string_append_printf(out, "%d", value->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(out, "%lld", (long long)value->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE:
        append_double(out, value->value.v_double);
        break;
    case BSON_TYPE_DECIMAL128: {
        char decimal[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&value->value.v_decimal128, decimal);
        bson_string_append_printf(out, "NumberDecimal(\"%s\")", decimal);
        break;
    }
    case BSON_TYPE_UTF8:
        bson_string_append_printf(out, "\"%s\"", value->value.v_utf8.str);
        break;
    case BSON_TYPE_OID:
        bson_oid_to_string(&value->value.v_oid, text);
        bson_string_append_printf(out, "ObjectId('%s')", text);
        break;
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(out, "new Date(%lld)", (long long)value->value.v_datetime);
        break;
    case BSON_TYPE_BOOL:
        bson_string_append(out, value->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_NULL:
        bson_string_append(out, "null");
        break;
    case BSON_TYPE_UNDEFINED:
        bson_string_append(out, "undefined");
        break;
    case BSON_TYPE_MINKEY:
        bson_string_append(out, "MinKey");
        break;
    case BSON_TYPE_MAXKEY:
        bson_string_append(out, "MaxKey");
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_string_append_printf(out, "Timestamp(%u, %u)", value->value.v_timestamp.timestamp,
                                  value->value.v_timestamp.increment);
        break;
    case BSON_TYPE_REGEX:
        bson_string_append_printf(out, "/%s/%s", value->value.v_regex.regex, value->value.v_regex.options);
        break;
    case BSON_TYPE_DOCUMENT:
        append_document(out, value->value.v_doc.data, value->value.v_doc.data_len, false);
        break;
    case BSON_TYPE_ARRAY:
        append_document(out, value->value.v_doc.data, value->value.v_doc.data_len, true);
        break;
    case BSON_TYPE_BINARY:
        bson_string_append_printf(out, "BinData(%d, %u bytes)", (int)value->value.v_binary.subtype,
                                  value->value.v_binary.data_len);
        break;
    default:
        bson_string_append(out, "?");
        break;
    }
}
