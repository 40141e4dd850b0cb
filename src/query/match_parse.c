/* Parsing a find filter into the matcher's node tree as mongod 6.0's
 * MatchExpressionParser does, with its error codes and messages; regexes are
 * compiled here with PCRE2. */
#include "query/match_private.h"

#include "query/aggregation_value.h"
#include "query/order.h"
#include "query/value_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mongod refuses longer patterns before compiling them. */
#define MATCH_REGEX_MAX_PATTERN_LENGTH 32764

/* ---- value helpers for messages ---- */

/* First key of a document value, or NULL when it is empty. */
static const char *document_first_key(const bson_value_t *document)
{
    bson_iter_t iter;
    if (!match_value_iter_init(&iter, document) || !bson_iter_next(&iter)) {
        return NULL;
    }
    return bson_iter_key(&iter);
}

/* BSONElement's printed form ("field: value"), which mongod puts in some messages. */
static void describe_element(const char *key, const bson_value_t *value, char *out, size_t size)
{
    char number[40];
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        snprintf(out, size, "%s: %d", key, value->value.v_int32);
        return;
    case BSON_TYPE_INT64:
        snprintf(out, size, "%s: %lld", key, (long long)value->value.v_int64);
        return;
    case BSON_TYPE_DOUBLE:
        /* StringBuilder::appendDoubleNice: %.16g, plus ".0" when it has no '.', 'E' or 'N'. */
        snprintf(number, sizeof number, "%.16g", value->value.v_double);
        if (strchr(number, '.') == NULL && strchr(number, 'E') == NULL && strchr(number, 'N') == NULL) {
            strcat(number, ".0");
        }
        snprintf(out, size, "%s: %s", key, number);
        return;
    case BSON_TYPE_DECIMAL128: {
        char text[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&value->value.v_decimal128, text);
        snprintf(out, size, "%s: NumberDecimal(\"%s\")", key, text);
        return;
    }
    case BSON_TYPE_UTF8:
        snprintf(out, size, "%s: \"%s\"", key, value->value.v_utf8.str);
        return;
    case BSON_TYPE_BOOL:
        snprintf(out, size, "%s: %s", key, value->value.v_bool ? "true" : "false");
        return;
    case BSON_TYPE_NULL:
        snprintf(out, size, "%s: null", key);
        return;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bson_t document;
        char *json = NULL;
        if (bson_init_static(&document, value->value.v_doc.data, value->value.v_doc.data_len)) {
            json = bson_as_relaxed_extended_json(&document, NULL);
        }
        snprintf(out, size, "%s: %s", key, json ? json : "?");
        bson_free(json);
        return;
    }
    default:
        snprintf(out, size, "%s: <BSON type %d>", key, (int)value->value_type);
        return;
    }
}

/* ---- parsing ---- */

typedef enum match_keyword {
    KEYWORD_NONE,
    KEYWORD_EQ,
    KEYWORD_NE,
    KEYWORD_LT,
    KEYWORD_LTE,
    KEYWORD_GT,
    KEYWORD_GTE,
    KEYWORD_IN,
    KEYWORD_NIN,
    KEYWORD_EXISTS,
    KEYWORD_TYPE,
    KEYWORD_SIZE,
    KEYWORD_MOD,
    KEYWORD_REGEX,
    KEYWORD_OPTIONS,
    KEYWORD_ELEM_MATCH,
    KEYWORD_ALL,
    KEYWORD_BITS_ALL_SET,
    KEYWORD_BITS_ALL_CLEAR,
    KEYWORD_BITS_ANY_SET,
    KEYWORD_BITS_ANY_CLEAR,
    KEYWORD_UNSUPPORTED, /* operators mongod knows that we refuse (geo, internal) */
} match_keyword_t;

/* mongod's path-accepting operators ($not is parsed apart from these). */
static const struct {
    const char *name;
    match_keyword_t keyword;
} keywords[] = {
    {"$eq", KEYWORD_EQ},
    {"$ne", KEYWORD_NE},
    {"$lt", KEYWORD_LT},
    {"$lte", KEYWORD_LTE},
    {"$gt", KEYWORD_GT},
    {"$gte", KEYWORD_GTE},
    {"$in", KEYWORD_IN},
    {"$nin", KEYWORD_NIN},
    {"$exists", KEYWORD_EXISTS},
    {"$type", KEYWORD_TYPE},
    {"$size", KEYWORD_SIZE},
    {"$mod", KEYWORD_MOD},
    {"$regex", KEYWORD_REGEX},
    {"$options", KEYWORD_OPTIONS},
    {"$elemMatch", KEYWORD_ELEM_MATCH},
    {"$all", KEYWORD_ALL},
    {"$bitsAllSet", KEYWORD_BITS_ALL_SET},
    {"$bitsAllClear", KEYWORD_BITS_ALL_CLEAR},
    {"$bitsAnySet", KEYWORD_BITS_ANY_SET},
    {"$bitsAnyClear", KEYWORD_BITS_ANY_CLEAR},
    {"$geoIntersects", KEYWORD_UNSUPPORTED},
    {"$geoWithin", KEYWORD_UNSUPPORTED},
    {"$within", KEYWORD_UNSUPPORTED},
    {"$near", KEYWORD_UNSUPPORTED},
    {"$nearSphere", KEYWORD_UNSUPPORTED},
    {"$geoNear", KEYWORD_UNSUPPORTED},
};

static match_keyword_t keyword_lookup(const char *name)
{
    if (name == NULL || name[0] != '$' || name[1] == '\0') {
        return KEYWORD_NONE;
    }
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++) {
        if (strcmp(name, keywords[i].name) == 0) {
            return keywords[i].keyword;
        }
    }
    return strncmp(name, "$_internal", 10) == 0 ? KEYWORD_UNSUPPORTED : KEYWORD_NONE;
}

/* mongod's pathless (top-level) operators, name without the '$'. */
static bool is_pathless_operator(const char *name)
{
    static const char *const names[] = {"and",         "or",   "nor",        "comment",   "alwaysTrue",
                                        "alwaysFalse", "ref",  "id",         "db",        "where",
                                        "text",        "expr", "jsonSchema", "sampleRate"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i]) == 0) {
            return true;
        }
    }
    return strncmp(name, "_internal", 9) == 0;
}

static bool refuse_unsupported(const char *operator_name, bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_BAD_VALUE, "thermocline store does not support %s yet", operator_name);
}

/* Where mongod's parser bans its special features (kBanAllSpecialFeatures):
 * $expr and $jsonSchema are QueryFeatureNotAllowed, $where and $text BadValue. */
static bool refuse_special_feature(const char *operator_name, bson_error_t *error)
{
    bool query_feature = strcmp(operator_name, "$expr") == 0 || strcmp(operator_name, "$jsonSchema") == 0;
    return tc_error_set(error, query_feature ? TC_ERR_QUERY_FEATURE_NOT_ALLOWED : TC_ERR_BAD_VALUE,
                        "%s is not allowed in this context", operator_name);
}

/* An object whose first field starts with '$' holds operators ({$gt: 1}), unless it
 * is a DBRef ($ref and $id; any of $ref/$id/$db when incomplete ones count). */
static bool is_expression_document(const bson_value_t *value, bool allow_incomplete_dbref)
{
    if (value->value_type != BSON_TYPE_DOCUMENT) {
        return false;
    }
    const char *first = document_first_key(value);
    if (first == NULL || first[0] != '$') {
        return false;
    }
    bool has_ref = false, has_id = false, has_db = false;
    bson_iter_t iter;
    match_value_iter_init(&iter, value);
    while (!(has_ref && has_id) && bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        has_ref = has_ref || strcmp(key, "$ref") == 0;
        has_id = has_id || strcmp(key, "$id") == 0;
        has_db = has_db || strcmp(key, "$db") == 0;
    }
    bool dbref = allow_incomplete_dbref ? (has_ref || has_id || has_db) : (has_ref && has_id);
    return !dbref;
}

/* mongod's parseIntegerElementToLong; on failure fills reason with its FailedToParse text. */
static bool parse_integer(const bson_value_t *value, const char *description, int64_t *out, char *reason, size_t size)
{
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        *out = value->value.v_int32;
        return true;
    case BSON_TYPE_INT64:
        *out = value->value.v_int64;
        return true;
    case BSON_TYPE_DOUBLE: {
        double number = value->value.v_double;
        if (isnan(number)) {
            snprintf(reason, size, "Expected an integer, but found NaN in: %s", description);
            return false;
        }
        if (number >= MATCH_TWO_TO_63 || number < -MATCH_TWO_TO_63) {
            snprintf(reason, size, "Cannot represent as a 64-bit integer: %s", description);
            return false;
        }
        if (number != (double)(int64_t)number) {
            snprintf(reason, size, "Expected an integer: %s", description);
            return false;
        }
        *out = (int64_t)number;
        return true;
    }
    case BSON_TYPE_DECIMAL128: {
        double number = aggregation_value_as_double(value);
        if (!isfinite(number) || number != trunc(number) || number >= MATCH_TWO_TO_63 ||
            number < -MATCH_TWO_TO_63) {
            snprintf(reason, size, "Cannot represent as a 64-bit integer: %s", description);
            return false;
        }
        *out = (int64_t)number;
        return true;
    }
    default:
        snprintf(reason, size, "Expected a number in: %s", description);
        return false;
    }
}

bool match_parse_integer(const char *key, const bson_value_t *value, bool non_negative, int64_t *out, char *reason,
                         size_t size)
{
    char description[256];
    describe_element(key, value, description, sizeof description);
    if (!parse_integer(value, description, out, reason, size)) {
        return false;
    }
    if (non_negative && *out < 0) {
        snprintf(reason, size, "Expected a positive number in: %s", description);
        return false;
    }
    return true;
}
static bool parse_operator_document(match_node_t *parent, const char *path, const bson_value_t *operators,
                                    unsigned flags, bson_error_t *error);

/* mongod 6.0 still used PCRE1; its wording for the common mistakes is what clients see. */
static const char *regex_error_message(int code, char *buffer, size_t size)
{
    switch (code) {
    case PCRE2_ERROR_MISSING_CLOSING_PARENTHESIS:
        return "missing )";
    case PCRE2_ERROR_UNMATCHED_CLOSING_PARENTHESIS:
        return "unmatched parentheses";
    case PCRE2_ERROR_QUANTIFIER_INVALID:
        return "nothing to repeat";
    case PCRE2_ERROR_UNSUPPORTED_ESCAPE_SEQUENCE:
        return "PCRE does not support \\L, \\l, \\N{name}, \\U, or \\u";
    case PCRE2_ERROR_MISSING_NAME_TERMINATOR:
        return "syntax error in subpattern name (missing terminator)";
    case PCRE2_ERROR_DUPLICATE_SUBPATTERN_NAME:
        return "two named subpatterns have the same name";
    case PCRE2_ERROR_UNKNOWN_UNICODE_PROPERTY:
        return "unknown property name after \\P or \\p";
    default:
        pcre2_get_error_message(code, (PCRE2_UCHAR *)buffer, size);
        return buffer;
    }
}

static bool regex_init(match_regex_t *regex, const char *pattern, size_t pattern_length, const char *flags,
                       size_t flags_length, bson_error_t *error)
{
    uint32_t options = PCRE2_UTF;
    for (size_t i = 0; i < flags_length; i++) {
        switch (flags[i]) {
        case 'i':
            options |= PCRE2_CASELESS;
            break;
        case 'm':
            options |= PCRE2_MULTILINE;
            break;
        case 's':
            options |= PCRE2_DOTALL;
            break;
        case 'x':
            options |= PCRE2_EXTENDED;
            break;
        case 'u':
            break; /* UTF-8 is always on */
        default:
            return tc_error_set(error, TC_ERR_REGEX_BAD_FLAG, " invalid flag in regex options: %c", flags[i]);
        }
    }
    if (pattern_length > MATCH_REGEX_MAX_PATTERN_LENGTH) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Regular expression is too long");
    }
    if (memchr(pattern, '\0', pattern_length) != NULL) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Regular expression cannot contain an embedded null byte");
    }
    int code;
    PCRE2_SIZE offset;
    regex->code = pcre2_compile((PCRE2_SPTR)pattern, pattern_length, options, &code, &offset, NULL);
    if (regex->code == NULL) {
        char message[256];
        return tc_error_set(error, TC_ERR_REGEX_INVALID, "Regular expression is invalid: %s",
                            regex_error_message(code, message, sizeof message));
    }
    /* JIT is an optimisation only: without it pcre2_match interprets. */
    (void)pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    regex->match_data = pcre2_match_data_create(1, NULL);
    if (regex->match_data == NULL) {
        return tc_error_set(error, TC_ERR_INTERNAL, "out of memory compiling a regular expression");
    }
    regex->pattern = bson_strndup(pattern, pattern_length);
    regex->flags = bson_strndup(flags, flags_length);
    return true;
}

static match_node_t *parse_regex_value(const char *path, const bson_value_t *value, bson_error_t *error)
{
    match_node_t *node = match_node_new_with_path(MATCH_REGEX, path);
    const char *options = value->value.v_regex.options;
    if (!regex_init(&node->u.regex, value->value.v_regex.regex, strlen(value->value.v_regex.regex), options,
                    strlen(options), error)) {
        match_node_destroy(node);
        return NULL;
    }
    return node;
}

/* {$regex: ..., $options: ...} in either order; context is the whole operator document. */
static match_node_t *parse_regex_document(const char *path, const bson_value_t *context, bson_error_t *error)
{
    const char *pattern = "";
    size_t pattern_length = 0;
    const char *options = "";
    size_t options_length = 0;
    bson_iter_t iter;
    match_value_iter_init(&iter, context);
    while (bson_iter_next(&iter)) {
        match_keyword_t keyword = keyword_lookup(bson_iter_key(&iter));
        const bson_value_t *value = bson_iter_value(&iter);
        if (keyword == KEYWORD_REGEX) {
            if (value->value_type == BSON_TYPE_UTF8) {
                pattern = value->value.v_utf8.str;
                pattern_length = value->value.v_utf8.len;
            } else if (value->value_type == BSON_TYPE_REGEX) {
                pattern = value->value.v_regex.regex;
                pattern_length = strlen(pattern);
                if (value->value.v_regex.options[0] != '\0') {
                    if (options_length > 0) {
                        tc_error_set(error, TC_ERR_REGEX_OPTIONS_TWICE_IN_REGEX,
                                     "options set in both $regex and $options");
                        return NULL;
                    }
                    options = value->value.v_regex.options;
                    options_length = strlen(options);
                }
            } else {
                tc_error_set(error, TC_ERR_BAD_VALUE, "$regex has to be a string");
                return NULL;
            }
        } else if (keyword == KEYWORD_OPTIONS) {
            if (value->value_type != BSON_TYPE_UTF8) {
                tc_error_set(error, TC_ERR_BAD_VALUE, "$options has to be a string");
                return NULL;
            }
            if (options_length > 0) {
                tc_error_set(error, TC_ERR_REGEX_OPTIONS_TWICE_IN_OPTIONS,
                             "options set in both $regex and $options");
                return NULL;
            }
            options = value->value.v_utf8.str;
            options_length = value->value.v_utf8.len;
        }
    }
    match_node_t *node = match_node_new_with_path(MATCH_REGEX, path);
    if (!regex_init(&node->u.regex, pattern, pattern_length, options, options_length, error)) {
        match_node_destroy(node);
        return NULL;
    }
    return node;
}

static match_node_t *parse_comparison(const char *path, match_compare_t op, const bson_value_t *value,
                                      bson_error_t *error)
{
    if (op != MATCH_EQ && value->value_type == BSON_TYPE_REGEX) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "Can't have RegEx as arg to predicate over field '%s'.", path);
        return NULL;
    }
    if (value->value_type == BSON_TYPE_UNDEFINED) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "cannot compare to undefined");
        return NULL;
    }
    match_node_t *node = match_node_new_with_path(MATCH_COMPARE, path);
    node->u.compare.op = op;
    node->u.compare.operand = *value;
    node->u.compare.operand_is_nan = match_value_is_nan(value);
    return node;
}

static match_node_t *parse_in(const char *path, const bson_value_t *array, bson_error_t *error)
{
    match_node_t *node = match_node_new_with_path(MATCH_IN, path);
    uint32_t count = match_array_length(array);
    node->u.in.values = bson_malloc0((count ? count : 1) * sizeof *node->u.in.values);
    node->u.in.regexes = bson_malloc0((count ? count : 1) * sizeof *node->u.in.regexes);
    bool has_undefined = false;
    bson_iter_t iter;
    match_value_iter_init(&iter, array);
    while (bson_iter_next(&iter)) {
        const bson_value_t *value = bson_iter_value(&iter);
        if (is_expression_document(value, false)) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "cannot nest $ under $in");
            goto fail;
        }
        if (value->value_type == BSON_TYPE_REGEX) {
            const char *options = value->value.v_regex.options;
            /* Counted before init so that a half-built regex is still freed. */
            match_regex_t *regex = &node->u.in.regexes[node->u.in.regex_count++];
            if (!regex_init(regex, value->value.v_regex.regex, strlen(value->value.v_regex.regex), options,
                            strlen(options), error)) {
                goto fail;
            }
            continue;
        }
        has_undefined = has_undefined || value->value_type == BSON_TYPE_UNDEFINED;
        node->u.in.has_null = node->u.in.has_null || value->value_type == BSON_TYPE_NULL;
        node->u.in.values[node->u.in.value_count++] = *value;
    }
    if (has_undefined) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "InMatchExpression equality cannot be undefined");
        goto fail;
    }
    qsort(node->u.in.values, node->u.in.value_count, sizeof *node->u.in.values,
          match_compare_values_for_sort);
    return node;
fail:
    match_node_destroy(node);
    return NULL;
}

static match_node_t *parse_size(const char *path, const bson_value_t *value, bson_error_t *error)
{
    int64_t size;
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        size = value->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        if (value->value.v_int64 < INT32_MIN || value->value.v_int64 > INT32_MAX) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "$size must be representable as a 32-bit integer");
            return NULL;
        }
        size = value->value.v_int64;
        break;
    case BSON_TYPE_DOUBLE: {
        double number = value->value.v_double;
        if (!(number >= INT32_MIN && number <= INT32_MAX) || number != trunc(number)) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "$size must be a whole number");
            return NULL;
        }
        size = (int64_t)number;
        break;
    }
    default:
        tc_error_set(error, TC_ERR_BAD_VALUE, "$size needs a number");
        return NULL;
    }
    if (size < 0) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "$size may not be negative");
        return NULL;
    }
    match_node_t *node = match_node_new_with_path(MATCH_SIZE, path);
    node->u.size = (int32_t)size;
    node->expand_leaf_arrays = false;
    return node;
}

/* BSONElement::tryCoerce to a long long, for $mod's arguments. */
static bool mod_argument(const bson_value_t *value, const char *which, int64_t *out, bson_error_t *error)
{
    if (value->value_type == BSON_TYPE_INT32) {
        *out = value->value.v_int32;
        return true;
    }
    if (value->value_type == BSON_TYPE_INT64) {
        *out = value->value.v_int64;
        return true;
    }
    double number = aggregation_value_as_double(value);
    if (!isfinite(number)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "malformed mod, %s value is invalid :: caused by :: Unable to coerce NaN/Inf to "
                            "integral type",
                            which);
    }
    if (!match_double_to_int64(number, out)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "malformed mod, %s value is invalid :: caused by :: Out of bounds coercing to "
                            "integral value",
                            which);
    }
    return true;
}

static match_node_t *parse_mod(const char *path, const bson_value_t *value, bson_error_t *error)
{
    if (value->value_type != BSON_TYPE_ARRAY) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "malformed mod, needs to be an array");
        return NULL;
    }
    bson_iter_t iter;
    match_value_iter_init(&iter, value);
    if (!bson_iter_next(&iter)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "malformed mod, not enough elements");
        return NULL;
    }
    bson_value_t divisor = *bson_iter_value(&iter);
    if (!order_is_number(divisor.value_type)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "malformed mod, divisor not a number");
        return NULL;
    }
    if (!bson_iter_next(&iter)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "malformed mod, not enough elements");
        return NULL;
    }
    bson_value_t remainder = *bson_iter_value(&iter);
    if (!order_is_number(remainder.value_type)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "malformed mod, remainder not a number");
        return NULL;
    }
    if (bson_iter_next(&iter)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "malformed mod, too many elements");
        return NULL;
    }
    int64_t divisor_value, remainder_value;
    if (!mod_argument(&divisor, "divisor", &divisor_value, error) ||
        !mod_argument(&remainder, "remainder", &remainder_value, error)) {
        return NULL;
    }
    if (divisor_value == 0) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "divisor cannot be 0");
        return NULL;
    }
    match_node_t *node = match_node_new_with_path(MATCH_MOD, path);
    node->u.mod.divisor = divisor_value;
    node->u.mod.remainder = remainder_value;
    return node;
}

static bool parse_single_type(match_node_t *node, const bson_value_t *value, bson_error_t *error)
{
    if (value->value_type == BSON_TYPE_UTF8) {
        const char *alias = value->value.v_utf8.str;
        if (strcmp(alias, "number") == 0) {
            node->u.type.all_numbers = true;
            return true;
        }
        bson_type_t type;
        if (value_type_from_name(alias, &type)) {
            node->u.type.types[(uint8_t)type] = true;
            return true;
        }
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Unknown type name alias: %s", alias);
    }
    if (!order_is_number(value->value_type)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "type must be represented as a number or a string");
    }
    double number = aggregation_value_as_double(value);
    bool valid = number == trunc(number) &&
                 (number == -1 || number == 127 || (number >= 0 && number <= BSON_TYPE_DECIMAL128));
    if (!valid) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Invalid numerical type code: %g", number);
    }
    node->u.type.types[(uint8_t)(int)number] = true;
    return true;
}

static match_node_t *parse_type(const char *path, const bson_value_t *value, bson_error_t *error)
{
    match_node_t *node = match_node_new_with_path(MATCH_TYPE, path);
    bool any = false;
    if (value->value_type == BSON_TYPE_ARRAY) {
        bson_iter_t iter;
        match_value_iter_init(&iter, value);
        while (bson_iter_next(&iter)) {
            if (!parse_single_type(node, bson_iter_value(&iter), error)) {
                goto fail;
            }
            any = true;
        }
    } else {
        if (!parse_single_type(node, value, error)) {
            goto fail;
        }
        any = true;
    }
    if (!any) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s must match at least one type", path);
        goto fail;
    }
    return node;
fail:
    match_node_destroy(node);
    return NULL;
}

static void bits_add_position(match_node_t *node, uint32_t position, size_t *capacity)
{
    if (node->u.bits.position_count == *capacity) {
        *capacity = *capacity ? *capacity * 2 : 16;
        node->u.bits.positions =
            bson_realloc(node->u.bits.positions, *capacity * sizeof *node->u.bits.positions);
    }
    node->u.bits.positions[node->u.bits.position_count++] = position;
    /* Numbers are sign-extended, so every bit past 63 reads as the sign bit. */
    node->u.bits.mask |= 1ULL << (position < 63 ? position : 63);
}

static match_node_t *parse_bits(const char *path, const char *operator_name, match_bits_test_t test,
                                const bson_value_t *value, bson_error_t *error)
{
    match_node_t *node = match_node_new_with_path(MATCH_BITS, path);
    node->u.bits.test = test;
    size_t capacity = 0;
    char reason[400];
    char description[300];
    if (value->value_type == BSON_TYPE_ARRAY) {
        bson_iter_t iter;
        match_value_iter_init(&iter, value);
        while (bson_iter_next(&iter)) {
            const bson_value_t *position = bson_iter_value(&iter);
            int64_t number;
            if (!match_parse_integer(bson_iter_key(&iter), position, false, &number, reason, sizeof reason)) {
                tc_error_set(error, TC_ERR_BAD_VALUE, "Failed to parse bit position. %s", reason);
                goto fail;
            }
            describe_element(bson_iter_key(&iter), position, description, sizeof description);
            if (number < INT32_MIN || number > INT32_MAX) {
                tc_error_set(error, TC_ERR_BAD_VALUE,
                             "Failed to parse bit position. Cannot represent %s in an int", description);
                goto fail;
            }
            if (number < 0) {
                tc_error_set(error, TC_ERR_BAD_VALUE,
                             "Failed to parse bit position. Expected a positive number in: %s", description);
                goto fail;
            }
            bits_add_position(node, (uint32_t)number, &capacity);
        }
    } else if (order_is_number(value->value_type)) {
        int64_t mask;
        if (!match_parse_integer(operator_name, value, true, &mask, reason, sizeof reason)) {
            tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s", reason);
            goto fail;
        }
        for (uint32_t bit = 0; bit < 63; bit++) {
            if ((uint64_t)mask & (1ULL << bit)) {
                bits_add_position(node, bit, &capacity);
            }
        }
    } else if (value->value_type == BSON_TYPE_BINARY) {
        for (uint32_t byte = 0; byte < value->value.v_binary.data_len; byte++) {
            for (uint32_t bit = 0; bit < 8; bit++) {
                if (value->value.v_binary.data[byte] & (1u << bit)) {
                    bits_add_position(node, byte * 8 + bit, &capacity);
                }
            }
        }
    } else {
        describe_element(operator_name, value, description, sizeof description);
        tc_error_set(error, TC_ERR_BAD_VALUE, "%s takes an Array, a number, or a BinData but received: %s",
                     path, description);
        goto fail;
    }
    return node;
fail:
    match_node_destroy(node);
    return NULL;
}

static match_node_t *parse_elem_match(const char *path, const bson_value_t *value, unsigned flags,
                                      bson_error_t *error)
{
    if (value->value_type != BSON_TYPE_DOCUMENT) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "$elemMatch needs an Object");
        return NULL;
    }
    /* {$elemMatch: {$gt: 1}} tests each element itself; {$elemMatch: {b: 1}} or one
     * led by a top-level operator ($and, ...) runs a filter on each element. */
    bool value_form =
        is_expression_document(value, true) && !is_pathless_operator(document_first_key(value) + 1);
    match_node_t *node =
        match_node_new_with_path(value_form ? MATCH_ELEM_MATCH_VALUE : MATCH_ELEM_MATCH_OBJECT, path);
    node->expand_leaf_arrays = false;
    if (value_form) {
        if (!parse_operator_document(node, "", value, flags | MATCH_PARSE_INSIDE_ELEM_MATCH, error)) {
            match_node_destroy(node);
            return NULL;
        }
        return node;
    }
    match_node_t *filter = match_parse_filter(value, flags | MATCH_PARSE_INSIDE_ELEM_MATCH, error);
    if (filter == NULL) {
        match_node_destroy(node);
        return NULL;
    }
    match_node_add_child(node, filter);
    return node;
}

static match_node_t *parse_all(const char *path, const bson_value_t *value, unsigned flags, bson_error_t *error)
{
    if (value->value_type != BSON_TYPE_ARRAY) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "$all needs an array");
        return NULL;
    }
    match_node_t *node = match_node_new(MATCH_AND);
    bson_iter_t iter;
    match_value_iter_init(&iter, value);
    bson_iter_t first = iter;
    bool elem_match_form = false;
    if (bson_iter_next(&first) && BSON_ITER_HOLDS_DOCUMENT(&first)) {
        const char *key = document_first_key(bson_iter_value(&first));
        elem_match_form = key != NULL && strcmp(key, "$elemMatch") == 0;
    }
    while (bson_iter_next(&iter)) {
        const bson_value_t *element = bson_iter_value(&iter);
        match_node_t *child;
        if (elem_match_form) {
            const char *key = element->value_type == BSON_TYPE_DOCUMENT ? document_first_key(element) : NULL;
            if (key == NULL || strcmp(key, "$elemMatch") != 0) {
                tc_error_set(error, TC_ERR_BAD_VALUE, "$all/$elemMatch has to be consistent");
                goto fail;
            }
            bson_iter_t inner;
            match_value_iter_init(&inner, element);
            bson_iter_next(&inner);
            child = parse_elem_match(path, bson_iter_value(&inner), flags, error);
        } else if (element->value_type == BSON_TYPE_REGEX) {
            child = parse_regex_value(path, element, error);
        } else if (element->value_type == BSON_TYPE_DOCUMENT &&
                   keyword_lookup(document_first_key(element)) != KEYWORD_NONE) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "no $ expressions in $all");
            goto fail;
        } else {
            child = parse_comparison(path, MATCH_EQ, element, error);
        }
        if (child == NULL) {
            goto fail;
        }
        match_node_add_child(node, child);
    }
    if (node->child_count == 0) {
        node->kind = MATCH_ALWAYS_FALSE;
    }
    return node;
fail:
    match_node_destroy(node);
    return NULL;
}

static match_node_t *parse_not(const char *path, const bson_value_t *value, unsigned flags,
                               bson_error_t *error)
{
    if (value->value_type == BSON_TYPE_REGEX) {
        match_node_t *regex = parse_regex_value(path, value, error);
        return regex ? match_node_negate(regex) : NULL;
    }
    if (value->value_type != BSON_TYPE_DOCUMENT) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "$not needs a regex or a document");
        return NULL;
    }
    if (document_first_key(value) == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "$not cannot be empty");
        return NULL;
    }
    match_node_t *all = match_node_new(MATCH_AND);
    if (!parse_operator_document(all, path, value, flags, error)) {
        match_node_destroy(all);
        return NULL;
    }
    return match_node_negate(match_node_collapse_and(all));
}

/* One operator of {path: {$op: value, ...}}; context is that whole operator
 * document ($regex and $options read each other). Adds at most one child. */
static bool parse_operator(match_node_t *parent, const char *path, const bson_value_t *context,
                           bson_iter_t *element, unsigned flags, bson_error_t *error)
{
    const char *key = bson_iter_key(element);
    bson_value_t value = *bson_iter_value(element);
    match_node_t *child = NULL;
    if (strcmp(key, "$not") == 0) {
        child = parse_not(path, &value, flags, error);
        goto done;
    }
    switch (keyword_lookup(key)) {
    case KEYWORD_NONE:
        if (strcmp(key, "$where") == 0) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "$where cannot be applied to a field");
        }
        return tc_error_set(error, TC_ERR_BAD_VALUE, "unknown operator: %s", key);
    case KEYWORD_EQ:
        child = parse_comparison(path, MATCH_EQ, &value, error);
        break;
    case KEYWORD_LT:
        child = parse_comparison(path, MATCH_LT, &value, error);
        break;
    case KEYWORD_LTE:
        child = parse_comparison(path, MATCH_LTE, &value, error);
        break;
    case KEYWORD_GT:
        child = parse_comparison(path, MATCH_GT, &value, error);
        break;
    case KEYWORD_GTE:
        child = parse_comparison(path, MATCH_GTE, &value, error);
        break;
    case KEYWORD_NE:
        if (value.value_type == BSON_TYPE_REGEX) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Can't have regex as arg to $ne.");
        }
        child = parse_comparison(path, MATCH_EQ, &value, error);
        child = child ? match_node_negate(child) : NULL;
        break;
    case KEYWORD_IN:
    case KEYWORD_NIN: {
        bool negated = strcmp(key, "$nin") == 0;
        if (value.value_type != BSON_TYPE_ARRAY) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "%s needs an array", key);
        }
        child = parse_in(path, &value, error);
        child = child && negated ? match_node_negate(child) : child;
        break;
    }
    case KEYWORD_EXISTS:
        child = match_node_new_with_path(MATCH_EXISTS, path);
        child = aggregation_value_truthy(&value) ? child : match_node_negate(child);
        break;
    case KEYWORD_TYPE:
        child = parse_type(path, &value, error);
        break;
    case KEYWORD_SIZE:
        child = parse_size(path, &value, error);
        break;
    case KEYWORD_MOD:
        child = parse_mod(path, &value, error);
        break;
    case KEYWORD_REGEX:
        child = parse_regex_document(path, context, error);
        break;
    case KEYWORD_OPTIONS: {
        /* Read together with its $regex, wherever that sits. */
        bson_iter_t sibling;
        match_value_iter_init(&sibling, context);
        while (bson_iter_next(&sibling)) {
            if (keyword_lookup(bson_iter_key(&sibling)) == KEYWORD_REGEX) {
                return true;
            }
        }
        return tc_error_set(error, TC_ERR_BAD_VALUE, "$options needs a $regex");
    }
    case KEYWORD_ELEM_MATCH:
        child = parse_elem_match(path, &value, flags, error);
        break;
    case KEYWORD_ALL:
        child = parse_all(path, &value, flags, error);
        break;
    case KEYWORD_BITS_ALL_SET:
        child = parse_bits(path, key, MATCH_BITS_ALL_SET, &value, error);
        break;
    case KEYWORD_BITS_ALL_CLEAR:
        child = parse_bits(path, key, MATCH_BITS_ALL_CLEAR, &value, error);
        break;
    case KEYWORD_BITS_ANY_SET:
        child = parse_bits(path, key, MATCH_BITS_ANY_SET, &value, error);
        break;
    case KEYWORD_BITS_ANY_CLEAR:
        child = parse_bits(path, key, MATCH_BITS_ANY_CLEAR, &value, error);
        break;
    case KEYWORD_UNSUPPORTED:
        return refuse_unsupported(key, error);
    }
done:
    if (child == NULL) {
        return false;
    }
    match_node_add_child(parent, child);
    return true;
}

static bool parse_operator_document(match_node_t *parent, const char *path, const bson_value_t *operators,
                                    unsigned flags, bson_error_t *error)
{
    bson_iter_t iter;
    match_value_iter_init(&iter, operators);
    while (bson_iter_next(&iter)) {
        if (!parse_operator(parent, path, operators, &iter, flags, error)) {
            return false;
        }
    }
    return true;
}

/* $and, $or, $nor: a non-empty array of filters. */
static match_node_t *parse_tree(const char *key, match_kind_t kind, const bson_value_t *value,
                                unsigned flags, bson_error_t *error)
{
    if (value->value_type != BSON_TYPE_ARRAY) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "%s must be an array", key);
        return NULL;
    }
    if (document_first_key(value) == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "$and/$or/$nor must be a nonempty array");
        return NULL;
    }
    match_node_t *node = match_node_new(kind);
    bson_iter_t iter;
    match_value_iter_init(&iter, value);
    while (bson_iter_next(&iter)) {
        const bson_value_t *entry = bson_iter_value(&iter);
        if (entry->value_type != BSON_TYPE_DOCUMENT) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "$or/$and/$nor entries need to be full objects");
            goto fail;
        }
        match_node_t *child = match_parse_filter(entry, flags, error);
        if (child == NULL) {
            goto fail;
        }
        match_node_add_child(node, child);
    }
    return node;
fail:
    match_node_destroy(node);
    return NULL;
}

/* {$alwaysTrue: 1} and {$alwaysFalse: 1}. */
static match_node_t *parse_always(const char *key, match_kind_t kind, const bson_value_t *value,
                                  bson_error_t *error)
{
    int64_t number;
    char reason[400];
    if (!match_parse_integer(key, value, false, &number, reason, sizeof reason)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s", reason);
        return NULL;
    }
    if (number != 1) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s must be an integer value of 1", key);
        return NULL;
    }
    return match_node_new(kind);
}

/* {$jsonSchema: schema}: the schema compiled whole (query/json_schema.h). */
static match_node_t *parse_json_schema(const bson_value_t *value, bson_error_t *error)
{
    bson_t spec;
    if (value->value_type != BSON_TYPE_DOCUMENT ||
        !bson_init_static(&spec, value->value.v_doc.data, value->value.v_doc.data_len)) {
        tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema must be an object");
        return NULL;
    }
    json_schema_t *schema = json_schema_compile(&spec, error);
    if (schema == NULL) {
        return NULL;
    }
    match_node_t *node = match_node_new(MATCH_JSON_SCHEMA);
    node->u.json_schema = schema;
    return node;
}

/* A '$' field of a filter: adds at most one child to root. */
static bool parse_top_level_operator(match_node_t *root, bson_iter_t *element, unsigned flags,
                                     bson_error_t *error)
{
    const char *key = bson_iter_key(element);
    const char *name = key + 1;
    bson_value_t value = *bson_iter_value(element);
    match_node_t *child;
    if (strcmp(name, "and") == 0 || strcmp(name, "or") == 0 || strcmp(name, "nor") == 0) {
        match_kind_t kind = name[0] == 'a' ? MATCH_AND : name[0] == 'o' ? MATCH_OR : MATCH_NOR;
        child = parse_tree(key, kind, &value, flags, error);
    } else if (strcmp(name, "comment") == 0) {
        return true;
    } else if (strcmp(name, "alwaysTrue") == 0) {
        child = parse_always(key, MATCH_ALWAYS_TRUE, &value, error);
    } else if (strcmp(name, "alwaysFalse") == 0) {
        child = parse_always(key, MATCH_ALWAYS_FALSE, &value, error);
    } else if (strcmp(name, "ref") == 0 || strcmp(name, "id") == 0 || strcmp(name, "db") == 0) {
        /* DBRef fields inside an $elemMatch document are plain equalities. */
        child = parse_comparison(key, MATCH_EQ, &value, error);
    } else if (strcmp(name, "where") == 0 || strcmp(name, "text") == 0 || strcmp(name, "expr") == 0) {
        /* mongod checks the ban before the level for $where, after it for $text and $expr. */
        bool banned = (flags & MATCH_PARSE_NO_SPECIAL_FEATURES) != 0;
        if (banned && strcmp(name, "where") == 0) {
            return refuse_special_feature(key, error);
        }
        if (flags & MATCH_PARSE_INSIDE_ELEM_MATCH) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "%s can only be applied to the top-level document",
                                key);
        }
        if (banned) {
            return refuse_special_feature(key, error);
        }
        if (strcmp(name, "expr") != 0) {
            return refuse_unsupported(key, error);
        }
        /* Compiled whole here; its let variables are checked, and its state
         * attached, once the filter is parsed (match_compile_with_context). */
        expression_t *compiled = expression_compile_unchecked(&value, error);
        if (compiled == NULL) {
            return false;
        }
        child = match_node_new(MATCH_EXPR);
        child->u.expr.expression = compiled;
    } else if (strcmp(name, "jsonSchema") == 0) {
        if (flags & MATCH_PARSE_NO_SPECIAL_FEATURES) {
            return refuse_special_feature(key, error);
        }
        child = parse_json_schema(&value, error);
    } else if (is_pathless_operator(name)) {
        return refuse_unsupported(key, error);
    } else {
        const char *hint = strcmp(name, "not") == 0
                               ? "If you are trying to negate an entire expression, use $nor."
                               : "If you have a field name that starts with a '$' symbol, consider using "
                                 "$getField or $setField.";
        return tc_error_set(error, TC_ERR_BAD_VALUE, "unknown top level operator: %s. %s", key, hint);
    }
    if (child == NULL) {
        return false;
    }
    match_node_add_child(root, child);
    return true;
}

/* A filter document: its fields are ANDed (flags: match_private.h's). */
match_node_t *match_parse_filter(const bson_value_t *document, unsigned flags, bson_error_t *error)
{
    match_node_t *root = match_node_new(MATCH_AND);
    bson_iter_t iter;
    if (!match_value_iter_init(&iter, document)) {
        tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in filter");
        goto fail;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (key[0] == '$') {
            if (!parse_top_level_operator(root, &iter, flags, error)) {
                goto fail;
            }
            continue;
        }
        bson_value_t value = *bson_iter_value(&iter);
        if (is_expression_document(&value, false)) {
            if (!parse_operator_document(root, key, &value, flags, error)) {
                goto fail;
            }
            continue;
        }
        match_node_t *child = value.value_type == BSON_TYPE_REGEX
                                  ? parse_regex_value(key, &value, error)
                                  : parse_comparison(key, MATCH_EQ, &value, error);
        if (child == NULL) {
            goto fail;
        }
        match_node_add_child(root, child);
    }
    return match_node_collapse_and(root);
fail:
    match_node_destroy(root);
    return NULL;
}
