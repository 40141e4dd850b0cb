/* Arithmetic expression operators: $add (numbers and one date), $subtract, $multiply,
 * $divide, $mod, $abs, $ceil, $floor, $round, $trunc, with MongoDB 6.0's result types
 * (int stays int until it overflows into long, long overflows into double, any double
 * makes a double) and error codes. decimal128 operands are computed through double, so
 * results that need more than 15 significant digits are approximate. */
#include "query/expression_private.h"
#include "query/value_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    ARITHMETIC_ERROR_ADD_TYPE = 16554,
    ARITHMETIC_ERROR_ADD_TWO_DATES = 16612,
    ARITHMETIC_ERROR_MULTIPLY_TYPE = 16555,
    ARITHMETIC_ERROR_SUBTRACT_TYPE = 16556,
    ARITHMETIC_ERROR_SUBTRACT_FROM_DATE = 16613,
    ARITHMETIC_ERROR_DIVIDE_TYPE = 16609,
    ARITHMETIC_ERROR_MOD_BY_ZERO = 16610,
    ARITHMETIC_ERROR_MOD_TYPE = 16611,
    ARITHMETIC_ERROR_NUMERIC_ONLY = 28765,
    ARITHMETIC_ERROR_ABS_LONG_MIN = 28680,
    ARITHMETIC_ERROR_ROUND_TYPE = 51081,
    ARITHMETIC_ERROR_ROUND_PLACE_INTEGRAL = 51082,
    ARITHMETIC_ERROR_ROUND_PLACE_RANGE = 51083,
};

/* The widening order of numeric types: int32 < int64 < double < decimal128. */
static int numeric_rank(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_INT32:
        return 0;
    case BSON_TYPE_INT64:
        return 1;
    case BSON_TYPE_DOUBLE:
        return 2;
    case BSON_TYPE_DECIMAL128:
        return 3;
    default:
        return -1;
    }
}

enum { RANK_INT32 = 0, RANK_INT64 = 1, RANK_DOUBLE = 2, RANK_DECIMAL = 3 };

static const char *type_name(const bson_value_t *value)
{
    return value_type_name(value->value_type);
}

/* A double result, made decimal128 when an operand was decimal128. */
static void set_floating(bson_value_t *out_value, int rank, double number)
{
    if (rank == RANK_DECIMAL) {
        aggregation_value_set_decimal_from_double(out_value, number);
    } else {
        aggregation_value_set_double(out_value, number);
    }
}

/* ---- $add ---- */

/* The running sum of $add, kept in the narrowest type that holds it (AddState). */
typedef struct add_state {
    int64_t long_total;
    double double_total;
    int widest;
    bool is_date;
} add_state_t;

static bool add_operand(add_state_t *state, const bson_value_t *operand, bson_error_t *error)
{
    int old_widest = state->widest;
    int64_t long_operand;
    if (operand->value_type == BSON_TYPE_DATE_TIME) {
        if (state->is_date) {
            return tc_error_set(error, ARITHMETIC_ERROR_ADD_TWO_DATES,
                                "only one date allowed in an $add expression");
        }
        state->is_date = true;
        long_operand = operand->value.v_datetime;
    } else {
        int rank = numeric_rank(operand->value_type);
        if (rank > state->widest) {
            state->widest = rank;
        }
        long_operand = aggregation_value_as_int64(operand);
    }
    if (old_widest <= RANK_INT64 && state->widest >= RANK_DOUBLE) {
        state->double_total = (double)state->long_total;
    }
    if (state->widest <= RANK_INT64) {
        int64_t sum;
        if (__builtin_add_overflow(state->long_total, long_operand, &sum)) {
            state->widest = RANK_DOUBLE;
            state->double_total = (double)state->long_total + (double)long_operand;
        } else {
            state->long_total = sum;
        }
    } else if (operand->value_type == BSON_TYPE_DATE_TIME) {
        state->double_total += (double)long_operand;
    } else {
        state->double_total += aggregation_value_as_double(operand);
    }
    return true;
}

static bool evaluate_add(const expression_t *expression, const expression_evaluation_t *evaluation,
                         bson_value_t *out_value, bson_error_t *error)
{
    add_state_t state = {.widest = RANK_INT32};
    for (size_t i = 0; i < expression->child_count; i++) {
        bson_value_t operand;
        if (!expression_evaluate_in(expression->children[i], evaluation, &operand, error)) {
            return false;
        }
        if (aggregation_value_is_nullish(&operand)) {
            aggregation_value_set_null(out_value);
            return true;
        }
        bool ok;
        if (!aggregation_value_is_number(&operand) && operand.value_type != BSON_TYPE_DATE_TIME) {
            ok = tc_error_set(error, ARITHMETIC_ERROR_ADD_TYPE,
                              "$add only supports numeric or date types, not %s",
                              type_name(&operand));
        } else {
            ok = add_operand(&state, &operand, error);
        }
        bson_value_destroy(&operand);
        if (!ok) {
            return false;
        }
    }
    if (state.is_date) {
        if (state.widest <= RANK_INT64) {
            aggregation_value_set_date(out_value, state.long_total);
            return true;
        }
        if (!(state.double_total >= -9223372036854775808.0 &&
              state.double_total < 9223372036854775808.0)) {
            return tc_error_set(error, TC_ERR_OVERFLOW, "date overflow in $add");
        }
        aggregation_value_set_date(out_value, llround(state.double_total));
        return true;
    }
    switch (state.widest) {
    case RANK_INT32:
        aggregation_value_set_int_or_long(out_value, state.long_total);
        break;
    case RANK_INT64:
        aggregation_value_set_int64(out_value, state.long_total);
        break;
    default:
        set_floating(out_value, state.widest, state.double_total);
        break;
    }
    return true;
}

/* ---- $subtract ---- */

static bool evaluate_subtract(const expression_t *expression,
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,
                              bson_error_t *error)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    const bson_value_t *left = &operands[0];
    const bson_value_t *right = &operands[1];
    bool ok = true;
    int left_rank = numeric_rank(left->value_type);
    int right_rank = numeric_rank(right->value_type);
    if (left_rank >= 0 && right_rank >= 0) {
        int widest = left_rank > right_rank ? left_rank : right_rank;
        if (widest >= RANK_DOUBLE) {
            set_floating(out_value, widest,
                         aggregation_value_as_double(left) - aggregation_value_as_double(right));
        } else {
            int64_t difference;
            if (__builtin_sub_overflow(aggregation_value_as_int64(left),
                                       aggregation_value_as_int64(right), &difference)) {
                aggregation_value_set_double(out_value, aggregation_value_as_double(left) -
                                                            aggregation_value_as_double(right));
            } else if (widest == RANK_INT64) {
                aggregation_value_set_int64(out_value, difference);
            } else {
                aggregation_value_set_int_or_long(out_value, difference);
            }
        }
    } else if (aggregation_value_is_nullish(left) || aggregation_value_is_nullish(right)) {
        aggregation_value_set_null(out_value);
    } else if (left->value_type == BSON_TYPE_DATE_TIME) {
        if (right->value_type == BSON_TYPE_DATE_TIME) {
            aggregation_value_set_int64(out_value,
                                        left->value.v_datetime - right->value.v_datetime);
        } else if (right_rank >= 0) {
            aggregation_value_set_date(out_value,
                                       left->value.v_datetime - aggregation_value_as_int64(right));
        } else {
            ok = tc_error_set(error, ARITHMETIC_ERROR_SUBTRACT_FROM_DATE,
                              "cant $subtract a %s from a Date", type_name(right));
        }
    } else {
        /* mongod's message really lacks the space after "a". */
        ok = tc_error_set(error, ARITHMETIC_ERROR_SUBTRACT_TYPE, "cant $subtract a%s from a %s",
                          type_name(right), type_name(left));
    }
    expression_values_destroy(operands, 2);
    return ok;
}

/* ---- $multiply ---- */

static bool evaluate_multiply(const expression_t *expression,
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,
                              bson_error_t *error)
{
    int64_t long_product = 1;
    double double_product = 1.0;
    int widest = RANK_INT32;
    for (size_t i = 0; i < expression->child_count; i++) {
        bson_value_t operand;
        if (!expression_evaluate_in(expression->children[i], evaluation, &operand, error)) {
            return false;
        }
        if (aggregation_value_is_nullish(&operand)) {
            aggregation_value_set_null(out_value);
            return true;
        }
        int rank = numeric_rank(operand.value_type);
        if (rank < 0) {
            tc_error_set(error, ARITHMETIC_ERROR_MULTIPLY_TYPE,
                         "$multiply only supports numeric types, not %s", type_name(&operand));
            bson_value_destroy(&operand);
            return false;
        }
        if (widest <= RANK_INT64 && rank >= RANK_DOUBLE) {
            double_product = (double)long_product;
        }
        if (rank > widest) {
            widest = rank;
        }
        if (widest <= RANK_INT64) {
            int64_t product;
            if (__builtin_mul_overflow(long_product, aggregation_value_as_int64(&operand),
                                       &product)) {
                widest = RANK_DOUBLE;
                double_product = (double)long_product * aggregation_value_as_double(&operand);
            } else {
                long_product = product;
            }
        } else {
            double_product *= aggregation_value_as_double(&operand);
        }
        bson_value_destroy(&operand);
    }
    if (widest == RANK_INT32) {
        aggregation_value_set_int_or_long(out_value, long_product);
    } else if (widest == RANK_INT64) {
        aggregation_value_set_int64(out_value, long_product);
    } else {
        set_floating(out_value, widest, double_product);
    }
    return true;
}

/* ---- $divide and $mod ---- */

static bool evaluate_divide(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    bool ok = true;
    int left_rank = numeric_rank(operands[0].value_type);
    int right_rank = numeric_rank(operands[1].value_type);
    if (left_rank >= 0 && right_rank >= 0) {
        double denominator = aggregation_value_as_double(&operands[1]);
        if (denominator == 0.0) {
            ok = tc_error_set(error, TC_ERR_BAD_VALUE, "can't $divide by zero");
        } else {
            int rank = left_rank == RANK_DECIMAL || right_rank == RANK_DECIMAL ? RANK_DECIMAL
                                                                               : RANK_DOUBLE;
            set_floating(out_value, rank, aggregation_value_as_double(&operands[0]) / denominator);
        }
    } else if (aggregation_value_is_nullish(&operands[0]) ||
               aggregation_value_is_nullish(&operands[1])) {
        aggregation_value_set_null(out_value);
    } else {
        ok = tc_error_set(error, ARITHMETIC_ERROR_DIVIDE_TYPE,
                          "$divide only supports numeric types, not %s and %s",
                          type_name(&operands[0]), type_name(&operands[1]));
    }
    expression_values_destroy(operands, 2);
    return ok;
}

/* x % y without the overflow of INT_MIN % -1 (overflow::safeMod). */
static int64_t safe_mod(int64_t left, int64_t right)
{
    return right == -1 ? 0 : left % right;
}

static bool evaluate_mod(const expression_t *expression, const expression_evaluation_t *evaluation,
                         bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    const bson_value_t *left = &operands[0];
    const bson_value_t *right = &operands[1];
    bool ok = true;
    int left_rank = numeric_rank(left->value_type);
    int right_rank = numeric_rank(right->value_type);
    if (left_rank >= 0 && right_rank >= 0) {
        double divisor = aggregation_value_as_double(right);
        bool right_integral = divisor == trunc(divisor) && isfinite(divisor);
        if (divisor == 0.0) {
            ok = tc_error_set(error, ARITHMETIC_ERROR_MOD_BY_ZERO, "can't $mod by zero");
        } else if (left_rank == RANK_DECIMAL || right_rank == RANK_DECIMAL) {
            set_floating(out_value, RANK_DECIMAL, fmod(aggregation_value_as_double(left), divisor));
        } else if (left_rank == RANK_DOUBLE || (right_rank == RANK_DOUBLE && !right_integral)) {
            aggregation_value_set_double(out_value,
                                         fmod(aggregation_value_as_double(left), divisor));
        } else if (left_rank == RANK_INT64 || right_rank == RANK_INT64) {
            aggregation_value_set_int64(out_value, safe_mod(aggregation_value_as_int64(left),
                                                            aggregation_value_as_int64(right)));
        } else {
            /* Both int32, or an int32 and an integral double: an int32 result. */
            aggregation_value_set_int32(out_value,
                                        (int32_t)safe_mod(aggregation_value_as_int64(left),
                                                          aggregation_value_as_int64(right)));
        }
    } else if (aggregation_value_is_nullish(left) || aggregation_value_is_nullish(right)) {
        aggregation_value_set_null(out_value);
    } else {
        ok = tc_error_set(error, ARITHMETIC_ERROR_MOD_TYPE,
                          "$mod only supports numeric types, not %s and %s", type_name(left),
                          type_name(right));
    }
    expression_values_destroy(operands, 2);
    return ok;
}

/* ---- one-number operators ---- */

/* Evaluates the single operand of $abs, $ceil, $floor: null for nullish (answered in
 * out_value, *out_done set), else a number or error 28765. */
static bool evaluate_numeric_operand(const expression_t *expression,
                                     const expression_evaluation_t *evaluation,
                                     bson_value_t *operand, bool *out_done, bson_value_t *out_value,
                                     bson_error_t *error)
{
    *out_done = false;
    if (!expression_evaluate_in(expression->children[0], evaluation, operand, error)) {
        return false;
    }
    if (aggregation_value_is_nullish(operand)) {
        aggregation_value_set_null(out_value);
        *out_done = true;
        return true;
    }
    if (!aggregation_value_is_number(operand)) {
        tc_error_set(error, ARITHMETIC_ERROR_NUMERIC_ONLY, "%s only supports numeric types, not %s",
                     expression->operation->name, type_name(operand));
        bson_value_destroy(operand);
        return false;
    }
    return true;
}

static bool evaluate_abs(const expression_t *expression, const expression_evaluation_t *evaluation,
                         bson_value_t *out_value, bson_error_t *error)
{
    bson_value_t operand;
    bool done;
    if (!evaluate_numeric_operand(expression, evaluation, &operand, &done, out_value, error)) {
        return false;
    }
    if (done) {
        return true;
    }
    switch (operand.value_type) {
    case BSON_TYPE_DOUBLE:
        aggregation_value_set_double(out_value, fabs(operand.value.v_double));
        return true;
    case BSON_TYPE_DECIMAL128:
        /* The sign is the top bit of the high word. */
        *out_value = operand;
        out_value->value.v_decimal128.high &= ~(1ull << 63);
        return true;
    case BSON_TYPE_INT64:
        if (operand.value.v_int64 == INT64_MIN) {
            return tc_error_set(error, ARITHMETIC_ERROR_ABS_LONG_MIN,
                                "can't take $abs of long long min");
        }
        aggregation_value_set_int64(out_value, llabs(operand.value.v_int64));
        return true;
    default:
        aggregation_value_set_int_or_long(out_value, llabs((int64_t)operand.value.v_int32));
        return true;
    }
}

static bool evaluate_rounding(const expression_t *expression,
                              const expression_evaluation_t *evaluation, bson_value_t *out_value,
                              bson_error_t *error, double (*round_function)(double))
{
    bson_value_t operand;
    bool done;
    if (!evaluate_numeric_operand(expression, evaluation, &operand, &done, out_value, error)) {
        return false;
    }
    if (done) {
        return true;
    }
    if (operand.value_type == BSON_TYPE_DOUBLE) {
        aggregation_value_set_double(out_value, round_function(operand.value.v_double));
    } else if (operand.value_type == BSON_TYPE_DECIMAL128) {
        aggregation_value_set_decimal_from_double(
            out_value, round_function(aggregation_value_as_double(&operand)));
    } else {
        *out_value = operand; /* integers are already whole */
    }
    return true;
}

static bool evaluate_ceil(const expression_t *expression, const expression_evaluation_t *evaluation,
                          bson_value_t *out_value, bson_error_t *error)
{
    return evaluate_rounding(expression, evaluation, out_value, error, ceil);
}

static bool evaluate_floor(const expression_t *expression,
                           const expression_evaluation_t *evaluation, bson_value_t *out_value,
                           bson_error_t *error)
{
    return evaluate_rounding(expression, evaluation, out_value, error, floor);
}

/* ---- $round and $trunc ---- */

/* Decides whether dropping digits rounds the kept part away from zero: for $round,
 * half to even (MongoDB rounds 10.5 to 10 and 11.5 to 12); $trunc never does. */
static bool rounds_up(bool truncate, int first_dropped, bool rest_nonzero, bool last_kept_odd)
{
    if (truncate || first_dropped < 5) {
        return false;
    }
    if (first_dropped > 5 || rest_nonzero) {
        return true;
    }
    return last_kept_odd;
}

static int64_t power_of_ten(int exponent)
{
    int64_t power = 1;
    for (int i = 0; i < exponent; i++) {
        power *= 10;
    }
    return power;
}

/* An integer rounded to a negative place (-1 keeps tens). */
static int64_t round_integer(int64_t number, int place, bool truncate)
{
    int digits = -place;
    if (digits >= 19) {
        return 0;
    }
    int64_t divisor = power_of_ten(digits);
    int64_t quotient = number / divisor;
    int64_t remainder = number % divisor;
    int64_t magnitude = remainder < 0 ? -remainder : remainder;
    /* Compare the dropped part with half the divisor through its leading digit. */
    int first_dropped = (int)(magnitude / (divisor / 10));
    bool rest_nonzero = magnitude % (divisor / 10) != 0;
    if (rounds_up(truncate, first_dropped, rest_nonzero, quotient % 2 != 0)) {
        quotient += number < 0 ? -1 : 1;
    }
    return quotient * divisor;
}

/* A double rounded in decimal at place digits after the point, on its 15-significant-
 * digit decimal form (as mongod rounds through Decimal128). */
static double round_double(double number, int place, bool truncate)
{
    if (!isfinite(number) || number == 0.0) {
        return number;
    }
    char text[40];
    snprintf(text, sizeof text, "%.14e", fabs(number));
    char digits[16];
    int digit_count = 0;
    for (const char *c = text; *c != 'e' && *c != '\0'; c++) {
        if (*c >= '0' && *c <= '9') {
            digits[digit_count++] = *c;
        }
    }
    int exponent = atoi(strchr(text, 'e') + 1);
    int kept = exponent + place + 1; /* digits whose place value is at least 10^-place */
    if (kept >= digit_count) {
        digits[digit_count] = '\0';
        snprintf(text, sizeof text, "%s%se%d", number < 0 ? "-" : "", digits,
                 exponent - digit_count + 1);
        return strtod(text, NULL);
    }
    if (kept < 0) {
        return copysign(0.0, number);
    }
    int first_dropped = digits[kept] - '0';
    bool rest_nonzero = false;
    for (int i = kept + 1; i < digit_count; i++) {
        rest_nonzero = rest_nonzero || digits[i] != '0';
    }
    bool last_kept_odd = kept > 0 && (digits[kept - 1] - '0') % 2 != 0;
    /* The kept digits as an integer (at most 15 digits), scaled back after rounding. */
    long long mantissa = 0;
    for (int i = 0; i < kept; i++) {
        mantissa = mantissa * 10 + (digits[i] - '0');
    }
    if (rounds_up(truncate, first_dropped, rest_nonzero, last_kept_odd)) {
        mantissa++;
    }
    snprintf(text, sizeof text, "%s%llde%d", number < 0 ? "-" : "", mantissa, -place);
    return copysign(strtod(text, NULL), number);
}

static bool evaluate_round_or_truncate(const expression_t *expression,
                                       const expression_evaluation_t *evaluation,
                                       bson_value_t *out_value, bson_error_t *error, bool truncate)
{
    bson_value_t operands[2];
    if (!expression_evaluate_children(expression, evaluation, operands, 2, error)) {
        return false;
    }
    const char *name = expression->operation->name;
    bson_value_t *number = &operands[0];
    bson_value_t *place_value = &operands[1];
    if (expression->child_count < 2) {
        aggregation_value_set_int32(place_value, 0);
    }
    bool ok = true;
    if (aggregation_value_is_nullish(number) || aggregation_value_is_nullish(place_value)) {
        aggregation_value_set_null(out_value);
        goto done;
    }
    if (!aggregation_value_is_number(number)) {
        ok = tc_error_set(error, ARITHMETIC_ERROR_ROUND_TYPE,
                          "%s only supports numeric types, not %s", name, type_name(number));
        goto done;
    }
    if (!aggregation_value_is_integral32(place_value)) {
        ok = tc_error_set(error, ARITHMETIC_ERROR_ROUND_PLACE_INTEGRAL,
                          "precision argument to %s must be a integral value", name);
        goto done;
    }
    int place = (int)aggregation_value_as_int64(place_value);
    if (place < -20 || place > 100) {
        ok = tc_error_set(error, ARITHMETIC_ERROR_ROUND_PLACE_RANGE,
                          "cannot apply %s with precision value %d value must be in [-20, 100]",
                          name, place);
        goto done;
    }
    switch (number->value_type) {
    case BSON_TYPE_INT32:
        aggregation_value_set_int_or_long(
            out_value, place >= 0 ? number->value.v_int32
                                  : round_integer(number->value.v_int32, place, truncate));
        break;
    case BSON_TYPE_INT64:
        aggregation_value_set_int64(
            out_value, place >= 0 ? number->value.v_int64
                                  : round_integer(number->value.v_int64, place, truncate));
        break;
    case BSON_TYPE_DOUBLE:
        aggregation_value_set_double(out_value,
                                     round_double(number->value.v_double, place, truncate));
        break;
    default:
        aggregation_value_set_decimal_from_double(
            out_value, round_double(aggregation_value_as_double(number), place, truncate));
        break;
    }
done:
    expression_values_destroy(operands, 2);
    return ok;
}

static bool evaluate_round(const expression_t *expression,
                           const expression_evaluation_t *evaluation, bson_value_t *out_value,
                           bson_error_t *error)
{
    return evaluate_round_or_truncate(expression, evaluation, out_value, error, false);
}

static bool evaluate_trunc(const expression_t *expression,
                           const expression_evaluation_t *evaluation, bson_value_t *out_value,
                           bson_error_t *error)
{
    return evaluate_round_or_truncate(expression, evaluation, out_value, error, true);
}

const expression_operator_t expression_arithmetic_operators[] = {
    {"$add", NULL, 0, -1, evaluate_add},
    {"$subtract", NULL, 2, 2, evaluate_subtract},
    {"$multiply", NULL, 0, -1, evaluate_multiply},
    {"$divide", NULL, 2, 2, evaluate_divide},
    {"$mod", NULL, 2, 2, evaluate_mod},
    {"$abs", NULL, 1, 1, evaluate_abs},
    {"$ceil", NULL, 1, 1, evaluate_ceil},
    {"$floor", NULL, 1, 1, evaluate_floor},
    {"$round", NULL, 1, 2, evaluate_round},
    {"$trunc", NULL, 1, 2, evaluate_trunc},
};

const size_t expression_arithmetic_operator_count =
    sizeof expression_arithmetic_operators / sizeof expression_arithmetic_operators[0];
