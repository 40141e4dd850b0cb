/* Date part operators: $year $month $dayOfMonth $hour $minute $second $millisecond
 * $dayOfWeek $dayOfYear, on a date, timestamp or ObjectId, in UTC or in the optional
 * timezone given as "UTC"/"GMT" or a fixed offset ("+05:30"). Olson names other than
 * UTC/GMT are refused (no timezone database here). */
#include "query/expression_private.h"
#include "query/value_format.h"

#include <stdlib.h>
#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    DATE_ERROR_NOT_DATE = 16006,
    DATE_ERROR_TIMEZONE_TYPE = 40517,
    DATE_ERROR_UNKNOWN_TIMEZONE = 40485,
    DATE_ERROR_UNKNOWN_OPTION = 40535,
    DATE_ERROR_ARRAY_ARITY = 40536,
    DATE_ERROR_MISSING_DATE = 40539,
};

typedef enum date_part {
    DATE_PART_YEAR,
    DATE_PART_MONTH,
    DATE_PART_DAY_OF_MONTH,
    DATE_PART_HOUR,
    DATE_PART_MINUTE,
    DATE_PART_SECOND,
    DATE_PART_MILLISECOND,
    DATE_PART_DAY_OF_WEEK,
    DATE_PART_DAY_OF_YEAR,
} date_part_t;

static bool add_operand(expression_t *expression, const bson_value_t *value, bson_error_t *error)
{
    expression_t *child = expression_parse(value, error);
    if (child == NULL) {
        return false;
    }
    expression_add_child(expression, child);
    return true;
}

/* parseDateExpressionAcceptingTimeZone: an operand, [operand], or {date, timezone}.
 * Children: date, then timezone when given. */
static bool parse_date_operator(expression_t *expression, const bson_value_t *argument,
                                bson_error_t *error)
{
    const char *name = expression->operation->name;
    if (argument->value_type == BSON_TYPE_ARRAY) {
        bson_t view;
        aggregation_value_view_document(argument, &view);
        uint32_t count = bson_count_keys(&view);
        if (count != 1) {
            return tc_error_set(error, DATE_ERROR_ARRAY_ARITY,
                                "%s accepts exactly one argument if given an array, but was "
                                "given %u",
                                name, count);
        }
        bson_iter_t iter;
        bson_iter_init(&iter, &view);
        bson_iter_next(&iter);
        return add_operand(expression, bson_iter_value(&iter), error);
    }
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return add_operand(expression, argument, error);
    }
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, argument->value.v_doc.data,
                                  argument->value.v_doc.data_len)) {
        return tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in %s", name);
    }
    bson_iter_t first = iter;
    if (bson_iter_next(&first) && bson_iter_key(&first)[0] == '$') {
        return add_operand(expression, argument, error); /* {$year: {$add: [...]}} */
    }
    /* Iterator copies, since bson_iter_value() points into the iterator itself. */
    bson_iter_t date;
    bson_iter_t zone;
    bool has_date = false;
    bool has_timezone = false;
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "date") == 0) {
            date = iter;
            has_date = true;
        } else if (strcmp(key, "timezone") == 0) {
            zone = iter;
            has_timezone = true;
        } else {
            return tc_error_set(error, DATE_ERROR_UNKNOWN_OPTION,
                                "unrecognized option to %s: \"%s\"", name, key);
        }
    }
    if (!has_date) {
        bson_string_t *text = bson_string_new(NULL);
        aggregation_value_describe(argument, text);
        tc_error_set(error, DATE_ERROR_MISSING_DATE, "missing 'date' argument to %s, provided: %s",
                     name, text->str);
        bson_string_free(text, true);
        return false;
    }
    if (!add_operand(expression, bson_iter_value(&date), error)) {
        return false;
    }
    return !has_timezone || add_operand(expression, bson_iter_value(&zone), error);
}

/* "UTC", "GMT", "Z" or a fixed offset "+hh", "+hhmm", "+hh:mm" (or '-'). */
static bool parse_timezone(const char *text, int64_t *out_offset_milliseconds)
{
    if (strcmp(text, "UTC") == 0 || strcmp(text, "GMT") == 0 || strcmp(text, "Z") == 0 ||
        strcmp(text, "Etc/UTC") == 0 || strcmp(text, "Etc/GMT") == 0) {
        *out_offset_milliseconds = 0;
        return true;
    }
    if (text[0] != '+' && text[0] != '-') {
        return false;
    }
    int digits[4];
    int count = 0;
    for (const char *c = text + 1; *c != '\0'; c++) {
        if (*c == ':' && count == 2 && c == text + 3) {
            continue;
        }
        if (*c < '0' || *c > '9' || count == 4) {
            return false;
        }
        digits[count++] = *c - '0';
    }
    if (count != 2 && count != 4) {
        return false;
    }
    int hours = digits[0] * 10 + digits[1];
    int minutes = count == 4 ? digits[2] * 10 + digits[3] : 0;
    int64_t offset = ((int64_t)hours * 60 + minutes) * 60000;
    *out_offset_milliseconds = text[0] == '-' ? -offset : offset;
    return true;
}

/* A date, timestamp or ObjectId as milliseconds since the epoch, else error 16006. */
static bool date_milliseconds(const bson_value_t *value, int64_t *out_milliseconds,
                              bson_error_t *error)
{
    switch (value->value_type) {
    case BSON_TYPE_DATE_TIME:
        *out_milliseconds = value->value.v_datetime;
        return true;
    case BSON_TYPE_TIMESTAMP:
        *out_milliseconds = (int64_t)value->value.v_timestamp.timestamp * 1000;
        return true;
    case BSON_TYPE_OID:
        *out_milliseconds = (int64_t)bson_oid_get_time_t(&value->value.v_oid) * 1000;
        return true;
    default:
        return tc_error_set(error, DATE_ERROR_NOT_DATE, "can't convert from BSON type %s to Date",
                            value_type_name(value->value_type));
    }
}

static bool evaluate_date_part(const expression_t *expression,
                               const expression_evaluation_t *evaluation, bson_value_t *out_value,
                               bson_error_t *error, date_part_t part)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    bool ok = false;
    int64_t offset = 0;
    if (aggregation_value_is_nullish(&operands[0])) {
        aggregation_value_set_null(out_value);
        ok = true;
        goto done;
    }
    if (expression->child_count > 1) {
        if (aggregation_value_is_nullish(&operands[1])) {
            aggregation_value_set_null(out_value);
            ok = true;
            goto done;
        }
        if (operands[1].value_type != BSON_TYPE_UTF8) {
            tc_error_set(error, DATE_ERROR_TIMEZONE_TYPE,
                         "timezone must evaluate to a string, found %s",
                         value_type_name(operands[1].value_type));
            goto done;
        }
        if (!parse_timezone(operands[1].value.v_utf8.str, &offset)) {
            tc_error_set(error, DATE_ERROR_UNKNOWN_TIMEZONE,
                         "unrecognized time zone identifier: \"%s\"", operands[1].value.v_utf8.str);
            goto done;
        }
    }
    int64_t milliseconds = 0;
    TC_CHECK(date_milliseconds(&operands[0], &milliseconds, error));
    aggregation_civil_time_t time;
    aggregation_civil_time_from_milliseconds(milliseconds + offset, &time);
    int32_t result = 0;
    switch (part) {
    case DATE_PART_YEAR:
        result = (int32_t)time.year;
        break;
    case DATE_PART_MONTH:
        result = time.month;
        break;
    case DATE_PART_DAY_OF_MONTH:
        result = time.day;
        break;
    case DATE_PART_HOUR:
        result = time.hour;
        break;
    case DATE_PART_MINUTE:
        result = time.minute;
        break;
    case DATE_PART_SECOND:
        result = time.second;
        break;
    case DATE_PART_MILLISECOND:
        result = time.millisecond;
        break;
    case DATE_PART_DAY_OF_WEEK:
        result = time.day_of_week;
        break;
    case DATE_PART_DAY_OF_YEAR:
        result = time.day_of_year;
        break;
    }
    aggregation_value_set_int32(out_value, result);
    ok = true;
done:
    expression_values_destroy(operands, 2);
    return ok;
}

#define DEFINE_DATE_PART(function_name, part)                                                      \
    static bool function_name(const expression_t *expression,                                      \
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,  \
                              bson_error_t *error)                                                 \
    {                                                                                              \
        return evaluate_date_part(expression, evaluation, out_value, error, part);                 \
    }

DEFINE_DATE_PART(evaluate_year, DATE_PART_YEAR)
DEFINE_DATE_PART(evaluate_month, DATE_PART_MONTH)
DEFINE_DATE_PART(evaluate_day_of_month, DATE_PART_DAY_OF_MONTH)
DEFINE_DATE_PART(evaluate_hour, DATE_PART_HOUR)
DEFINE_DATE_PART(evaluate_minute, DATE_PART_MINUTE)
DEFINE_DATE_PART(evaluate_second, DATE_PART_SECOND)
DEFINE_DATE_PART(evaluate_millisecond, DATE_PART_MILLISECOND)
DEFINE_DATE_PART(evaluate_day_of_week, DATE_PART_DAY_OF_WEEK)
DEFINE_DATE_PART(evaluate_day_of_year, DATE_PART_DAY_OF_YEAR)

const expression_operator_t expression_date_operators[] = {
    {"$year", parse_date_operator, 1, 1, evaluate_year},
    {"$month", parse_date_operator, 1, 1, evaluate_month},
    {"$dayOfMonth", parse_date_operator, 1, 1, evaluate_day_of_month},
    {"$hour", parse_date_operator, 1, 1, evaluate_hour},
    {"$minute", parse_date_operator, 1, 1, evaluate_minute},
    {"$second", parse_date_operator, 1, 1, evaluate_second},
    {"$millisecond", parse_date_operator, 1, 1, evaluate_millisecond},
    {"$dayOfWeek", parse_date_operator, 1, 1, evaluate_day_of_week},
    {"$dayOfYear", parse_date_operator, 1, 1, evaluate_day_of_year},
};

const size_t expression_date_operator_count =
    sizeof expression_date_operators / sizeof expression_date_operators[0];
