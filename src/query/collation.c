/* Collation documents -> ICU collators, as mongod's CollatorFactoryICU: the
 * document is read strictly (its IDL rules), the locale must be one ICU knows
 * without falling back, each option given is set on the collator and each one
 * left out is read back from it, so the expanded form shows the locale's own
 * defaults. ICU does the collating; this file only configures it. */
#include "query/collation.h"

#include "query/value_format.h"

#include <stdatomic.h>
#include <string.h>
#include <unicode/ucol.h>
#include <unicode/uloc.h>
#include <unicode/ustring.h>
#include <unicode/uvernum.h>

struct collation {
    atomic_int references;
    UCollator *collator;
    bson_t spec; /* the expanded form */
};

/* What a collation document may say; `given` marks the fields it had. */
typedef struct collation_options {
    char locale[ULOC_FULLNAME_CAPACITY];
    bool case_level;
    UColAttributeValue case_first;
    int64_t strength;
    bool numeric_ordering;
    UColAttributeValue alternate;
    UColReorderCode max_variable;
    bool normalization;
    bool backwards;
    const char *version;
    struct {
        bool case_level, case_first, strength, numeric_ordering, alternate, max_variable, normalization, backwards;
    } given;
} collation_options_t;

typedef struct enumeration {
    const char *name;
    int value;
} enumeration_t;

static const enumeration_t case_first_values[] = {
    {"upper", UCOL_UPPER_FIRST}, {"lower", UCOL_LOWER_FIRST}, {"off", UCOL_OFF}, {NULL, 0}};
static const enumeration_t alternate_values[] = {
    {"non-ignorable", UCOL_NON_IGNORABLE}, {"shifted", UCOL_SHIFTED}, {NULL, 0}};
static const enumeration_t max_variable_values[] = {
    {"punct", UCOL_REORDER_CODE_PUNCTUATION}, {"space", UCOL_REORDER_CODE_SPACE}, {NULL, 0}};

static const char *enumeration_name(const enumeration_t *table, int value)
{
    for (size_t i = 0; table[i].name != NULL; i++) {
        if (table[i].value == value) {
            return table[i].name;
        }
    }
    return "off";
}

/* The spec as mongod prints it in its messages: { locale: "xx", strength: 2 }. */
static char *spec_text(const bson_t *spec)
{
    bson_string_t *text = bson_string_new(NULL);
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(spec);
    value.value.v_doc.data_len = spec->len;
    value_format_append(text, &value);
    return bson_string_free(text, false);
}

static bool wrong_type(const bson_iter_t *iter, const char *expected, bson_error_t *error)
{
    tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field 'collation.%s' is the wrong type '%s', expected %s",
                 bson_iter_key(iter), value_type_name(bson_iter_type(iter)), expected);
    return false;
}

/* IDL's safeBool: a bool or a number (non-zero is true). */
static bool read_bool(const bson_iter_t *iter, bool *out, bool *out_given, bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_BOOL(iter) && !BSON_ITER_HOLDS_NUMBER(iter) && !BSON_ITER_HOLDS_DECIMAL128(iter)) {
        return wrong_type(iter, "types '[bool, long, int, decimal, double]'", error);
    }
    *out = bson_iter_as_bool(iter);
    *out_given = true;
    return true;
}

static bool read_enumeration(const bson_iter_t *iter, const enumeration_t *table, int *out, bool *out_given,
                             bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_UTF8(iter)) {
        return wrong_type(iter, "type 'string'", error);
    }
    const char *name = bson_iter_utf8(iter, NULL);
    for (size_t i = 0; table[i].name != NULL; i++) {
        if (strcmp(table[i].name, name) == 0) {
            *out = table[i].value;
            *out_given = true;
            return true;
        }
    }
    tc_error_set(error, TC_ERR_BAD_VALUE, "Enumeration value '%s' for field 'collation.%s' is not a valid value.", name,
                 bson_iter_key(iter));
    return false;
}

/* IDL's safeInt with mongod's validator {gte: 0, lte: 5}; 0 is then no strength. */
static bool read_strength(const bson_iter_t *iter, collation_options_t *options, bson_error_t *error)
{
    bson_type_t type = bson_iter_type(iter);
    if (type != BSON_TYPE_INT32 && type != BSON_TYPE_INT64 && type != BSON_TYPE_DOUBLE) {
        return wrong_type(iter, "types '[long, int, decimal, double]'", error);
    }
    int64_t strength = bson_iter_as_int64(iter);
    if (strength < 0 || strength > 5) {
        tc_error_set(error, TC_ERR_NON_NEGATIVE_VALUE, "BSON field 'strength' value must be %s, actual value '%lld'",
                     strength < 0 ? ">= 0" : "<= 5", (long long)strength);
        return false;
    }
    if (strength == 0) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "Enumeration value '0' for field 'collation.strength' is not a valid value.");
        return false;
    }
    options->strength = strength;
    options->given.strength = true;
    return true;
}

static bool read_field(const bson_iter_t *iter, collation_options_t *options, bool *out_has_locale,
                       bson_error_t *error)
{
    const char *key = bson_iter_key(iter);
    int value = 0;
    if (strcmp(key, "locale") == 0) {
        if (!BSON_ITER_HOLDS_UTF8(iter)) {
            return wrong_type(iter, "type 'string'", error);
        }
        uint32_t length;
        const char *locale = bson_iter_utf8(iter, &length);
        if (length >= sizeof options->locale || strlen(locale) != length) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "Field 'locale' is invalid: '%s'", locale);
            return false;
        }
        memcpy(options->locale, locale, length + 1);
        *out_has_locale = true;
        return true;
    }
    if (strcmp(key, "caseLevel") == 0) {
        return read_bool(iter, &options->case_level, &options->given.case_level, error);
    }
    if (strcmp(key, "caseFirst") == 0) {
        bool ok = read_enumeration(iter, case_first_values, &value, &options->given.case_first, error);
        options->case_first = (UColAttributeValue)value;
        return ok;
    }
    if (strcmp(key, "strength") == 0) {
        return read_strength(iter, options, error);
    }
    if (strcmp(key, "numericOrdering") == 0) {
        return read_bool(iter, &options->numeric_ordering, &options->given.numeric_ordering, error);
    }
    if (strcmp(key, "alternate") == 0) {
        bool ok = read_enumeration(iter, alternate_values, &value, &options->given.alternate, error);
        options->alternate = (UColAttributeValue)value;
        return ok;
    }
    if (strcmp(key, "maxVariable") == 0) {
        bool ok = read_enumeration(iter, max_variable_values, &value, &options->given.max_variable, error);
        options->max_variable = (UColReorderCode)value;
        return ok;
    }
    if (strcmp(key, "normalization") == 0) {
        return read_bool(iter, &options->normalization, &options->given.normalization, error);
    }
    if (strcmp(key, "backwards") == 0) {
        return read_bool(iter, &options->backwards, &options->given.backwards, error);
    }
    if (strcmp(key, "version") == 0) {
        if (!BSON_ITER_HOLDS_UTF8(iter)) {
            return wrong_type(iter, "type 'string'", error);
        }
        options->version = bson_iter_utf8(iter, NULL);
        return true;
    }
    tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field 'collation.%s' is an unknown field.", key);
    return false;
}

static bool read_options(const bson_t *spec, collation_options_t *options, bson_error_t *error)
{
    bson_iter_t iter;
    bool has_locale = false;
    if (!bson_iter_init(&iter, spec)) {
        tc_error_set(error, TC_ERR_INVALID_BSON, "the collation document is not valid BSON");
        return false;
    }
    while (bson_iter_next(&iter)) {
        if (!read_field(&iter, options, &has_locale, error)) {
            return false;
        }
    }
    if (!has_locale) {
        tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field 'collation.locale' is missing but a required field");
        return false;
    }
    return true;
}

static UColAttributeValue on_off(bool value)
{
    return value ? UCOL_ON : UCOL_OFF;
}

static UColAttributeValue strength_attribute(int64_t strength)
{
    static const UColAttributeValue by_strength[] = {UCOL_DEFAULT, UCOL_PRIMARY, UCOL_SECONDARY, UCOL_TERTIARY,
                                                    UCOL_QUATERNARY, UCOL_IDENTICAL};
    return by_strength[strength];
}

static int64_t strength_from_attribute(UColAttributeValue attribute)
{
    switch (attribute) {
    case UCOL_PRIMARY:
        return 1;
    case UCOL_SECONDARY:
        return 2;
    case UCOL_QUATERNARY:
        return 4;
    case UCOL_IDENTICAL:
        return 5;
    default:
        return 3;
    }
}

/* Sets on the collator what the document gave; reads back the locale's default
 * for what it left out. */
static void settle_attribute(UCollator *collator, UColAttribute attribute, bool given, UColAttributeValue *value,
                             UErrorCode *status)
{
    if (given) {
        ucol_setAttribute(collator, attribute, *value, status);
    } else {
        *value = ucol_getAttribute(collator, attribute, status);
    }
}

static void settle_bool(UCollator *collator, UColAttribute attribute, bool given, bool *value, UErrorCode *status)
{
    UColAttributeValue attribute_value = on_off(*value);
    settle_attribute(collator, attribute, given, &attribute_value, status);
    *value = attribute_value == UCOL_ON;
}

static void configure(UCollator *collator, collation_options_t *options, UErrorCode *status)
{
    settle_bool(collator, UCOL_CASE_LEVEL, options->given.case_level, &options->case_level, status);
    settle_attribute(collator, UCOL_CASE_FIRST, options->given.case_first, &options->case_first, status);
    UColAttributeValue strength = options->given.strength ? strength_attribute(options->strength) : UCOL_DEFAULT;
    settle_attribute(collator, UCOL_STRENGTH, options->given.strength, &strength, status);
    options->strength = strength_from_attribute(strength);
    settle_bool(collator, UCOL_NUMERIC_COLLATION, options->given.numeric_ordering, &options->numeric_ordering,
                status);
    settle_attribute(collator, UCOL_ALTERNATE_HANDLING, options->given.alternate, &options->alternate, status);
    if (options->given.max_variable) {
        ucol_setMaxVariable(collator, options->max_variable, status);
    } else {
        options->max_variable = ucol_getMaxVariable(collator);
    }
    settle_bool(collator, UCOL_NORMALIZATION_MODE, options->given.normalization, &options->normalization, status);
    settle_bool(collator, UCOL_FRENCH_COLLATION, options->given.backwards, &options->backwards, status);
}

/* mongod's validateCollationSpec: options that would silently do nothing. */
static bool check_combination(const collation_options_t *options, const char *text, bson_error_t *error)
{
    if (options->backwards && options->strength == 1) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "'backwards' is invalid with 'strength' of 1 in: %s", text);
        return false;
    }
    if (options->case_first != UCOL_OFF && !options->case_level && options->strength <= 2) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 in: %s", text);
        return false;
    }
    return true;
}

static void build_spec(const collation_options_t *options, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "locale", options->locale);
    BSON_APPEND_BOOL(out, "caseLevel", options->case_level);
    BSON_APPEND_UTF8(out, "caseFirst", enumeration_name(case_first_values, options->case_first));
    BSON_APPEND_INT32(out, "strength", (int32_t)options->strength);
    BSON_APPEND_BOOL(out, "numericOrdering", options->numeric_ordering);
    BSON_APPEND_UTF8(out, "alternate", enumeration_name(alternate_values, options->alternate));
    BSON_APPEND_UTF8(out, "maxVariable", enumeration_name(max_variable_values, options->max_variable));
    BSON_APPEND_BOOL(out, "normalization", options->normalization);
    BSON_APPEND_BOOL(out, "backwards", options->backwards);
    BSON_APPEND_UTF8(out, "version", U_ICU_VERSION);
}

/* mongod refuses a locale ICU would have to canonicalize or fall back from, and
 * names the one ICU would have used. */
static bool check_locale(const UCollator *collator, const char *requested, const char *text, bson_error_t *error)
{
    UErrorCode status = U_ZERO_ERROR;
    const char *valid = ucol_getLocaleByType(collator, ULOC_VALID_LOCALE, &status);
    if (U_FAILURE(status) || valid == NULL || strcmp(valid, requested) != 0) {
        if (U_SUCCESS(status) && valid != NULL && valid[0] != '\0' && strcmp(valid, "root") != 0) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "Field 'locale' is invalid in: %s. Did you mean '%s'?", text, valid);
        } else {
            tc_error_set(error, TC_ERR_BAD_VALUE, "Field 'locale' is invalid in: %s", text);
        }
        return false;
    }
    return true;
}

bool collation_parse(const bson_t *spec, collation_t **out_collation, bson_error_t *error)
{
    collation_options_t options = {.case_first = UCOL_OFF, .alternate = UCOL_NON_IGNORABLE};
    UErrorCode status = U_ZERO_ERROR;
    UCollator *collator = NULL;
    char *text = NULL;
    bool ok = false;

    *out_collation = NULL;
    if (!read_options(spec, &options, error)) {
        goto done;
    }
    if (strcmp(options.locale, "simple") == 0) {
        ok = true; /* the binary comparison every path already does */
        goto done;
    }
    text = spec_text(spec);
    if (options.locale[0] == '\0') {
        tc_error_set(error, TC_ERR_BAD_VALUE, "Field 'locale' cannot be the empty string in: %s", text);
        goto done;
    }
    collator = ucol_open(options.locale, &status);
    if (U_FAILURE(status)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "Field 'locale' is invalid in: %s", text);
        goto done;
    }
    if (!check_locale(collator, options.locale, text, error)) {
        goto done;
    }
    configure(collator, &options, &status);
    if (U_FAILURE(status)) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "ICU refused the collation %s: %s", text, u_errorName(status));
        goto done;
    }
    if (!check_combination(&options, text, error)) {
        goto done;
    }
    if (options.version != NULL && strcmp(options.version, U_ICU_VERSION) != 0) {
        tc_error_set(error, TC_ERR_INCOMPATIBLE_COLLATION_VERSION,
                     "Requested collation version %s but the only available collator version was %s. Requested "
                     "collation spec: %s",
                     options.version, U_ICU_VERSION, text);
        goto done;
    }
    collation_t *collation = BSON_ALIGNED_ALLOC0(collation_t); /* it holds a bson_t */
    atomic_init(&collation->references, 1);
    collation->collator = collator;
    collator = NULL;
    build_spec(&options, &collation->spec);
    *out_collation = collation;
    ok = true;
done:
    if (collator != NULL) {
        ucol_close(collator);
    }
    bson_free(text);
    return ok;
}

const collation_t *collation_retain(const collation_t *collation)
{
    if (collation != NULL) {
        /* The count is the only part of a shared collation that ever changes. */
        atomic_fetch_add(&((collation_t *)collation)->references, 1);
    }
    return collation;
}

void collation_release(const collation_t *collation)
{
    if (collation == NULL) {
        return;
    }
    collation_t *owned = (collation_t *)collation;
    if (atomic_fetch_sub(&owned->references, 1) != 1) {
        return;
    }
    ucol_close(owned->collator);
    bson_destroy(&owned->spec);
    bson_free(owned);
}

const bson_t *collation_spec(const collation_t *collation)
{
    return &collation->spec;
}

bool collation_equal(const collation_t *left, const collation_t *right)
{
    if (left == NULL || right == NULL) {
        return left == right;
    }
    return left == right || bson_equal(&left->spec, &right->spec);
}

int collation_compare(const collation_t *collation, const char *left, size_t left_length, const char *right,
                      size_t right_length)
{
    UErrorCode status = U_ZERO_ERROR;
    UCollationResult result =
        ucol_strcollUTF8(collation->collator, left, (int32_t)left_length, right, (int32_t)right_length, &status);
    return result == UCOL_LESS ? -1 : result == UCOL_GREATER ? 1 : 0;
}

/* Below this many UTF-16 units the string is converted on the stack. */
#define COLLATION_STACK_UNITS 256

uint8_t *collation_sort_key(const collation_t *collation, const char *text, size_t length, size_t *out_length)
{
    UChar stack_units[COLLATION_STACK_UNITS];
    UChar *units = stack_units;
    int32_t unit_count = 0;
    UErrorCode status = U_ZERO_ERROR;

    /* Invalid UTF-8 becomes U+FFFD, as ICU's own UTF-8 comparison treats it. */
    u_strFromUTF8WithSub(units, COLLATION_STACK_UNITS, &unit_count, text, (int32_t)length, 0xFFFD, NULL, &status);
    if (status == U_BUFFER_OVERFLOW_ERROR || unit_count > COLLATION_STACK_UNITS) {
        units = bson_malloc(((size_t)unit_count + 1) * sizeof *units);
        status = U_ZERO_ERROR;
        u_strFromUTF8WithSub(units, unit_count + 1, &unit_count, text, (int32_t)length, 0xFFFD, NULL, &status);
    }
    int32_t needed = ucol_getSortKey(collation->collator, units, unit_count, NULL, 0);
    uint8_t *key = bson_malloc((size_t)needed + 1);
    ucol_getSortKey(collation->collator, units, unit_count, key, needed + 1);
    if (units != stack_units) {
        bson_free(units);
    }
    /* ICU counts its terminating 0x00, which the caller's own framing replaces. */
    *out_length = needed > 0 ? (size_t)needed - 1 : 0;
    return key;
}
