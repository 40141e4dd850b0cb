/* String operators ($concat, $toLower, $toUpper, $substrCP, $strLenCP), $type and the
 * type conversions $toString, $toInt, $toLong, $toDouble (MongoDB's $convert without
 * onError: failures are ConversionFailure 241). */
#include "query/expression_private.h"
#include "query/value_format.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    STRING_ERROR_CONCAT_TYPE = 16702,
    STRING_ERROR_COERCE = 16007,
    STRING_ERROR_SUBSTR_INDEX_TYPE = 34450,
    STRING_ERROR_SUBSTR_INDEX_INTEGRAL = 34451,
    STRING_ERROR_SUBSTR_LENGTH_TYPE = 34452,
    STRING_ERROR_SUBSTR_LENGTH_INTEGRAL = 34453,
    STRING_ERROR_SUBSTR_LENGTH_NEGATIVE = 34454,
    STRING_ERROR_SUBSTR_INDEX_NEGATIVE = 34455,
    STRING_ERROR_STRLEN_TYPE = 34471,
};

static const char *type_name(const bson_value_t *value)
{
    return value_type_name(value->value_type);
}

/* Value::coerceToString: numbers, strings, dates and timestamps become text,
 * null/undefined/missing the empty string; other types fail with 16007. Returns an
 * allocated string (free with bson_free()) or NULL. */
static char *coerce_to_string(const bson_value_t *value, bson_error_t *error)
{
    switch (value->value_type) {
    case BSON_TYPE_DOUBLE:
        /* mongod streams doubles with printf's %g (six significant digits). */
        return bson_strdup_printf("%g", value->value.v_double);
    case BSON_TYPE_INT32:
        return bson_strdup_printf("%d", value->value.v_int32);
    case BSON_TYPE_INT64:
        return bson_strdup_printf("%lld", (long long)value->value.v_int64);
    case BSON_TYPE_DECIMAL128: {
        char text[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&value->value.v_decimal128, text);
        return bson_strdup(text);
    }
    case BSON_TYPE_UTF8:
        return bson_strndup(value->value.v_utf8.str, value->value.v_utf8.len);
    case BSON_TYPE_SYMBOL:
        return bson_strndup(value->value.v_symbol.symbol, value->value.v_symbol.len);
    case BSON_TYPE_CODE:
        return bson_strndup(value->value.v_code.code, value->value.v_code.code_len);
    case BSON_TYPE_DATE_TIME:
        return aggregation_date_to_iso_string(value->value.v_datetime);
    case BSON_TYPE_TIMESTAMP:
        return bson_strdup_printf("Timestamp(%u, %u)", value->value.v_timestamp.timestamp,
                                  value->value.v_timestamp.increment);
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return bson_strdup("");
    default:
        tc_error_set(error, STRING_ERROR_COERCE, "can't convert from BSON type %s to String",
                     type_name(value));
        return NULL;
    }
}

/* ---- string operators ---- */

static bool evaluate_concat(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error)
{
    bson_string_t *text = bson_string_new(NULL);
    for (size_t i = 0; i < expression->child_count; i++) {
        bson_value_t part;
        if (!expression_evaluate_in(expression->children[i], evaluation, &part, error)) {
            bson_string_free(text, true);
            return false;
        }
        if (aggregation_value_is_nullish(&part)) {
            bson_string_free(text, true);
            aggregation_value_set_null(out_value);
            return true;
        }
        if (part.value_type != BSON_TYPE_UTF8) {
            tc_error_set(error, STRING_ERROR_CONCAT_TYPE, "$concat only supports strings, not %s",
                         type_name(&part));
            bson_value_destroy(&part);
            bson_string_free(text, true);
            return false;
        }
        bson_string_append(text, part.value.v_utf8.str);
        bson_value_destroy(&part);
    }
    size_t length = text->len;
    aggregation_value_take_utf8(out_value, bson_string_free(text, false), length);
    return true;
}

/* $toLower and $toUpper change ASCII letters only, as mongod does. */
static bool evaluate_change_case(const expression_t *expression,
                                 const expression_evaluation_t *evaluation, bson_value_t *out_value,
                                 bson_error_t *error, bool upper)
{
    bson_value_t operand;
    if (!expression_evaluate_in(expression->children[0], evaluation, &operand, error)) {
        return false;
    }
    char *text = coerce_to_string(&operand, error);
    bson_value_destroy(&operand);
    if (text == NULL) {
        return false;
    }
    size_t length = strlen(text);
    for (size_t i = 0; i < length; i++) {
        if (upper && text[i] >= 'a' && text[i] <= 'z') {
            text[i] = (char)(text[i] - 'a' + 'A');
        } else if (!upper && text[i] >= 'A' && text[i] <= 'Z') {
            text[i] = (char)(text[i] - 'A' + 'a');
        }
    }
    aggregation_value_take_utf8(out_value, text, length);
    return true;
}

static bool evaluate_to_lower(const expression_t *expression,
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,
                              bson_error_t *error)
{
    return evaluate_change_case(expression, evaluation, out_value, error, false);
}

static bool evaluate_to_upper(const expression_t *expression,
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,
                              bson_error_t *error)
{
    return evaluate_change_case(expression, evaluation, out_value, error, true);
}

static bool is_continuation_byte(char byte)
{
    return ((unsigned char)byte & 0xC0) == 0x80;
}

static bool evaluate_substr_code_points(const expression_t *expression,
                                        const expression_evaluation_t *evaluation,
                                        bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operands[3];
    if (!expression_evaluate_children(expression, evaluation, operands, 3, error)) {
        return false;
    }
    const bson_value_t *start = &operands[1];
    const bson_value_t *count = &operands[2];
    bool ok = false;
    bson_string_t *description = bson_string_new(NULL);
    char *text = coerce_to_string(&operands[0], error);
    TC_CHECK(text != NULL);
    if (!aggregation_value_is_number(start)) {
        tc_error_set(error, STRING_ERROR_SUBSTR_INDEX_TYPE,
                     "$substrCP: starting index must be a numeric type (is BSON type %s)",
                     type_name(start));
        goto done;
    }
    if (!aggregation_value_is_integral32(start)) {
        aggregation_value_describe(start, description);
        tc_error_set(
            error, STRING_ERROR_SUBSTR_INDEX_INTEGRAL,
            "$substrCP: starting index cannot be represented as a 32-bit integral value: %s",
            description->str);
        goto done;
    }
    if (!aggregation_value_is_number(count)) {
        tc_error_set(error, STRING_ERROR_SUBSTR_LENGTH_TYPE,
                     "$substrCP: length must be a numeric type (is BSON type %s)",
                     type_name(count));
        goto done;
    }
    if (!aggregation_value_is_integral32(count)) {
        aggregation_value_describe(count, description);
        tc_error_set(error, STRING_ERROR_SUBSTR_LENGTH_INTEGRAL,
                     "$substrCP: length cannot be represented as a 32-bit integral value: %s",
                     description->str);
        goto done;
    }
    int64_t start_code_point = aggregation_value_as_int64(start);
    int64_t code_points = aggregation_value_as_int64(count);
    if (code_points < 0) {
        tc_error_set(error, STRING_ERROR_SUBSTR_LENGTH_NEGATIVE,
                     "$substrCP: length must be a nonnegative integer.");
        goto done;
    }
    if (start_code_point < 0) {
        tc_error_set(error, STRING_ERROR_SUBSTR_INDEX_NEGATIVE,
                     "$substrCP: the starting index must be nonnegative integer.");
        goto done;
    }
    /* Walk code points: each starts at a byte that is not a UTF-8 continuation byte. */
    size_t length = strlen(text);
    size_t begin = 0;
    for (int64_t skipped = 0; skipped < start_code_point && begin < length; skipped++) {
        begin++;
        while (begin < length && is_continuation_byte(text[begin])) {
            begin++;
        }
    }
    size_t end = begin;
    for (int64_t taken = 0; taken < code_points && end < length; taken++) {
        end++;
        while (end < length && is_continuation_byte(text[end])) {
            end++;
        }
    }
    aggregation_value_set_utf8(out_value, text + begin, end - begin);
    ok = true;
done:
    bson_free(text);
    bson_string_free(description, true);
    expression_values_destroy(operands, 3);
    return ok;
}

static bool evaluate_string_length_code_points(const expression_t *expression,
                                               const expression_evaluation_t *evaluation,
                                               bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operand;
    if (!expression_evaluate_in(expression->children[0], evaluation, &operand, error)) {
        return false;
    }
    bool ok = true;
    if (operand.value_type != BSON_TYPE_UTF8) {
        ok = tc_error_set(error, STRING_ERROR_STRLEN_TYPE,
                          "$strLenCP requires a string argument, found: %s", type_name(&operand));
    } else {
        aggregation_value_set_int32(out_value, (int32_t)aggregation_value_code_points(&operand));
    }
    bson_value_destroy(&operand);
    return ok;
}

static bool evaluate_type(const expression_t *expression, const expression_evaluation_t *evaluation,
                          bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operand;
    if (!expression_evaluate_in(expression->children[0], evaluation, &operand, error)) {
        return false;
    }
    const char *name = value_type_name(operand.value_type);
    bson_value_destroy(&operand);
    aggregation_value_set_utf8(out_value, name, strlen(name));
    return true;
}

/* ---- conversions ---- */

static bool unsupported_conversion(const bson_value_t *input, bson_type_t target,
                                   bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_CONVERSION_FAILURE,
                        "Unsupported conversion from %s to %s in $convert with no onError value",
                        type_name(input), value_type_name(target));
}

static bool parse_failure(const char *text, const char *reason, bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_CONVERSION_FAILURE,
                        "Failed to parse number '%s' in $convert with no onError value: %s", text,
                        reason);
}

/* A base-10 integer that must take the whole string. */
static bool parse_integer_text(const char *text, int64_t minimum, int64_t maximum,
                               int64_t *out_number, bson_error_t *error)
{
    if (text[0] == '\0') {
        return parse_failure(text, "No digits", error);
    }
    if (!(text[0] == '-' || text[0] == '+' || (text[0] >= '0' && text[0] <= '9'))) {
        return parse_failure(text, "Did not consume whole string.", error);
    }
    char *end = NULL;
    errno = 0;
    long long number = strtoll(text, &end, 10);
    if (end == text) {
        return parse_failure(text, "No digits", error);
    }
    if (*end != '\0') {
        return parse_failure(text, "Did not consume whole string.", error);
    }
    if (errno == ERANGE || number < minimum || number > maximum) {
        return parse_failure(text, "Out of range", error);
    }
    *out_number = number;
    return true;
}

static bool parse_double_text(const char *text, double *out_number, bson_error_t *error)
{
    if (text[0] == '\0') {
        return parse_failure(text, "No digits", error);
    }
    /* strtod also reads hexadecimal and leading spaces, which mongod refuses. */
    if (strpbrk(text, "xX") != NULL || text[0] == ' ' || text[0] == '\t') {
        return parse_failure(text, "Did not consume whole string.", error);
    }
    char *end = NULL;
    errno = 0;
    double number = strtod(text, &end);
    if (end == text) {
        return parse_failure(text, "No digits", error);
    }
    if (*end != '\0') {
        return parse_failure(text, "Did not consume whole string.", error);
    }
    if (errno == ERANGE && isinf(number)) {
        return parse_failure(text, "Out of range", error);
    }
    *out_number = number;
    return true;
}

/* Converts a double to an integer type bounded by [minimum, maximum], truncating. */
static bool double_to_integer(double number, int64_t minimum, int64_t maximum, int64_t *out_number,
                              bson_error_t *error)
{
    if (isnan(number)) {
        return tc_error_set(error, TC_ERR_CONVERSION_FAILURE,
                            "Attempt to convert NaN value to integer type in $convert with no "
                            "onError value");
    }
    if (isinf(number)) {
        return tc_error_set(error, TC_ERR_CONVERSION_FAILURE,
                            "Attempt to convert infinity value to integer type in $convert with "
                            "no onError value");
    }
    /* 2^63, exact as a double, is the first value past the int64 range; the int32 bounds
     * are exact themselves. */
    bool too_large =
        maximum == INT64_MAX ? number >= 9223372036854775808.0 : number > (double)maximum;
    if (number < (double)minimum || too_large) {
        return tc_error_set(error, TC_ERR_CONVERSION_FAILURE,
                            "Conversion would overflow target type in $convert with no onError "
                            "value: %g",
                            number);
    }
    *out_number = (int64_t)number;
    return true;
}

/* $toInt (target int32) and $toLong (target int64). */
static bool convert_to_integer(const bson_value_t *input, bson_type_t target,
                               bson_value_t *out_value, bson_error_t *error)
{
    int64_t minimum = target == BSON_TYPE_INT32 ? INT32_MIN : INT64_MIN;
    int64_t maximum = target == BSON_TYPE_INT32 ? INT32_MAX : INT64_MAX;
    int64_t number = 0;
    switch (input->value_type) {
    case BSON_TYPE_BOOL:
        number = input->value.v_bool ? 1 : 0;
        break;
    case BSON_TYPE_INT32:
        number = input->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        number = input->value.v_int64;
        if (number < minimum || number > maximum) {
            return tc_error_set(error, TC_ERR_CONVERSION_FAILURE,
                                "Conversion would overflow target type in $convert with no "
                                "onError value: %lld",
                                (long long)number);
        }
        break;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        if (!double_to_integer(aggregation_value_as_double(input), minimum, maximum, &number,
                               error)) {
            return false;
        }
        break;
    case BSON_TYPE_UTF8:
        if (!parse_integer_text(input->value.v_utf8.str, minimum, maximum, &number, error)) {
            return false;
        }
        break;
    case BSON_TYPE_DATE_TIME:
        if (target == BSON_TYPE_INT32) {
            return unsupported_conversion(input, target, error);
        }
        number = input->value.v_datetime;
        break;
    default:
        return unsupported_conversion(input, target, error);
    }
    if (target == BSON_TYPE_INT32) {
        aggregation_value_set_int32(out_value, (int32_t)number);
    } else {
        aggregation_value_set_int64(out_value, number);
    }
    return true;
}

static bool convert_to_double(const bson_value_t *input, bson_value_t *out_value,
                              bson_error_t *error)
{
    double number = 0.0;
    switch (input->value_type) {
    case BSON_TYPE_BOOL:
        number = input->value.v_bool ? 1.0 : 0.0;
        break;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        number = aggregation_value_as_double(input);
        break;
    case BSON_TYPE_UTF8:
        if (!parse_double_text(input->value.v_utf8.str, &number, error)) {
            return false;
        }
        break;
    case BSON_TYPE_DATE_TIME:
        number = (double)input->value.v_datetime;
        break;
    default:
        return unsupported_conversion(input, BSON_TYPE_DOUBLE, error);
    }
    aggregation_value_set_double(out_value, number);
    return true;
}

static bool convert_to_string(const bson_value_t *input, bson_value_t *out_value,
                              bson_error_t *error)
{
    char *text;
    switch (input->value_type) {
    case BSON_TYPE_DOUBLE: {
        double number = input->value.v_double;
        if (isinf(number)) {
            text = bson_strdup(number < 0 ? "-Infinity" : "Infinity");
        } else if (isnan(number)) {
            text = bson_strdup("NaN");
        } else if (number == 0.0 && signbit(number)) {
            text = bson_strdup("-0");
        } else {
            text = bson_strdup_printf("%g", number);
        }
        break;
    }
    case BSON_TYPE_BOOL:
        text = bson_strdup(input->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_OID:
        text = bson_malloc(25);
        bson_oid_to_string(&input->value.v_oid, text);
        break;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
    case BSON_TYPE_UTF8:
    case BSON_TYPE_DATE_TIME:
        text = coerce_to_string(input, error);
        if (text == NULL) {
            return false;
        }
        break;
    default:
        return unsupported_conversion(input, BSON_TYPE_UTF8, error);
    }
    aggregation_value_take_utf8(out_value, text, strlen(text));
    return true;
}

/* Evaluates the single operand of a conversion to target (null stays null). */
static bool evaluate_conversion(const expression_t *expression,
                                const expression_evaluation_t *evaluation, bson_value_t *out_value,
                                bson_error_t *error, bson_type_t target)
{
    bson_value_t input;
    if (!expression_evaluate_in(expression->children[0], evaluation, &input, error)) {
        return false;
    }
    bool ok;
    if (aggregation_value_is_nullish(&input)) {
        aggregation_value_set_null(out_value);
        ok = true;
    } else if (target == BSON_TYPE_UTF8) {
        ok = convert_to_string(&input, out_value, error);
    } else if (target == BSON_TYPE_DOUBLE) {
        ok = convert_to_double(&input, out_value, error);
    } else {
        ok = convert_to_integer(&input, target, out_value, error);
    }
    bson_value_destroy(&input);
    return ok;
}

static bool evaluate_to_string(const expression_t *expression,
                               const expression_evaluation_t *evaluation, bson_value_t *out_value,
                               bson_error_t *error)
{
    return evaluate_conversion(expression, evaluation, out_value, error, BSON_TYPE_UTF8);
}

static bool evaluate_to_int(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error)
{
    return evaluate_conversion(expression, evaluation, out_value, error, BSON_TYPE_INT32);
}

static bool evaluate_to_long(const expression_t *expression,
                             const expression_evaluation_t *evaluation, bson_value_t *out_value,
                             bson_error_t *error)
{
    return evaluate_conversion(expression, evaluation, out_value, error, BSON_TYPE_INT64);
}

static bool evaluate_to_double(const expression_t *expression,
                               const expression_evaluation_t *evaluation, bson_value_t *out_value,
                               bson_error_t *error)
{
    return evaluate_conversion(expression, evaluation, out_value, error, BSON_TYPE_DOUBLE);
}

const expression_operator_t expression_string_operators[] = {
    {"$concat", NULL, 0, -1, evaluate_concat},
    {"$toLower", NULL, 1, 1, evaluate_to_lower},
    {"$toUpper", NULL, 1, 1, evaluate_to_upper},
    {"$substrCP", NULL, 3, 3, evaluate_substr_code_points},
    {"$strLenCP", NULL, 1, 1, evaluate_string_length_code_points},
    {"$type", NULL, 1, 1, evaluate_type},
    {"$toString", NULL, 1, 1, evaluate_to_string},
    {"$toInt", NULL, 1, 1, evaluate_to_int},
    {"$toLong", NULL, 1, 1, evaluate_to_long},
    {"$toDouble", NULL, 1, 1, evaluate_to_double},
};

const size_t expression_string_operator_count =
    sizeof expression_string_operators / sizeof expression_string_operators[0];
