/* Expression compilation and the evaluation of the non-operator forms: literals, field
 * paths ("$a.b", "$$ROOT.x"), system variables, documents and arrays of expressions.
 * Operators are looked up in the tables of the expression_*.c files. */
#include "query/expression_private.h"
#include "common/clock.h"
#include "query/value_format.h"

#include <string.h>
#include <time.h>

/* mongod's numbered assertion codes for malformed expressions (codeName
 * "Location<code>"); the ones shared with other modules live in common/error.h. */
enum {
    EXPRESSION_ERROR_DOTTED_FIELD_NAME = 16412,
    EXPRESSION_ERROR_DUPLICATE_FIELD = 16406,
    EXPRESSION_ERROR_ONE_FIELD = 15983,
    EXPRESSION_ERROR_ARITY_EXACT = 16020,
    EXPRESSION_ERROR_ARITY_RANGE = 28667,
    EXPRESSION_ERROR_DOLLAR_ALONE = 16872,
    EXPRESSION_ERROR_EMPTY_VARIABLE = 16869,
    EXPRESSION_ERROR_VARIABLE_START = 16870,
    EXPRESSION_ERROR_VARIABLE_CHARACTER = 16871,
    EXPRESSION_ERROR_UNDEFINED_VARIABLE = 17276,
};

static expression_t *expression_new(expression_kind_t kind)
{
    expression_t *expression = BSON_ALIGNED_ALLOC0(expression_t);
    expression->kind = kind;
    aggregation_value_set_missing(&expression->constant);
    return expression;
}

void expression_destroy(expression_t *expression)
{
    if (expression == NULL) {
        return;
    }
    bson_value_destroy(&expression->constant);
    bson_free(expression->variable_name);
    for (size_t i = 0; i < expression->path_length; i++) {
        bson_free(expression->path[i]);
    }
    bson_free(expression->path);
    for (size_t i = 0; i < expression->child_count; i++) {
        expression_destroy(expression->children[i]);
        if (expression->names != NULL) {
            bson_free(expression->names[i]);
        }
    }
    bson_free(expression->children);
    bson_free(expression->names);
    bson_free(expression);
}

void expression_add_child(expression_t *expression, expression_t *child)
{
    expression->children = bson_realloc(expression->children, (expression->child_count + 1) *
                                                                  sizeof *expression->children);
    expression->children[expression->child_count++] = child;
}

static const expression_operator_t *find_operator(const char *name)
{
    const struct {
        const expression_operator_t *table;
        const size_t *count;
    } tables[] = {
        {expression_arithmetic_operators, &expression_arithmetic_operator_count},
        {expression_logic_operators, &expression_logic_operator_count},
        {expression_string_operators, &expression_string_operator_count},
        {expression_date_operators, &expression_date_operator_count},
        {expression_object_operators, &expression_object_operator_count},
    };
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        for (size_t i = 0; i < *tables[t].count; i++) {
            if (strcmp(tables[t].table[i].name, name) == 0) {
                return &tables[t].table[i];
            }
        }
    }
    return NULL;
}

/* FieldPath::uassertValidFieldName. */
static bool check_field_name(const char *name, bson_error_t *error)
{
    if (name[0] == '\0') {
        return tc_error_set(error, TC_ERR_FIELD_PATH_EMPTY_COMPONENT,
                            "FieldPath field names may not be empty strings.");
    }
    if (name[0] == '$') {
        return tc_error_set(error, TC_ERR_FIELD_PATH_DOLLAR_PREFIX,
                            "FieldPath field names may not start with '$'. Consider using "
                            "$getField or $setField.");
    }
    return true;
}

/* Splits a dotted path into validated components appended to expression->path. */
static bool parse_path_components(expression_t *expression, const char *dotted, bson_error_t *error)
{
    const char *start = dotted;
    for (;;) {
        const char *dot = strchr(start, '.');
        size_t length = dot == NULL ? strlen(start) : (size_t)(dot - start);
        char *component = bson_strndup(start, length);
        expression->path = bson_realloc(expression->path,
                                        (expression->path_length + 1) * sizeof *expression->path);
        expression->path[expression->path_length++] = component;
        if (!check_field_name(component, error)) {
            return false;
        }
        if (dot == NULL) {
            return true;
        }
        start = dot + 1;
    }
}

/* Variables::validateNameForUserRead, then the lookup of the name. */
static bool parse_variable(expression_t *expression, const char *name, size_t length,
                           bson_error_t *error)
{
    if (length == 0) {
        return tc_error_set(error, EXPRESSION_ERROR_EMPTY_VARIABLE,
                            "empty variable names are not allowed");
    }
    char *variable = bson_strndup(name, length);
    bool ok = false;
    unsigned char first = (unsigned char)variable[0];
    if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || (first & 0x80))) {
        tc_error_set(error, EXPRESSION_ERROR_VARIABLE_START,
                     "'%s' starts with an invalid character for a user variable name", variable);
        goto done;
    }
    for (size_t i = 1; i < length; i++) {
        unsigned char c = (unsigned char)variable[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (c & 0x80))) {
            tc_error_set(error, EXPRESSION_ERROR_VARIABLE_CHARACTER,
                         "'%s' contains an invalid character for a variable name: '%c'", variable,
                         c);
            goto done;
        }
    }
    if (strcmp(variable, "ROOT") == 0) {
        expression->variable = EXPRESSION_VARIABLE_ROOT;
    } else if (strcmp(variable, "CURRENT") == 0) {
        expression->variable = EXPRESSION_VARIABLE_CURRENT;
    } else if (strcmp(variable, "REMOVE") == 0) {
        expression->variable = EXPRESSION_VARIABLE_REMOVE;
    } else if (strcmp(variable, "NOW") == 0) {
        expression->variable = EXPRESSION_VARIABLE_NOW;
    } else if (first >= 'A' && first <= 'Z') {
        tc_error_set(error, EXPRESSION_ERROR_UNDEFINED_VARIABLE, "Use of undefined variable: %s",
                     variable);
        goto done; /* an upper-case name is a system variable, and not one of those */
    } else {
        /* A user variable (let): whether it is defined is checked once the whole
         * expression is parsed (expression_compile_with_variables). */
        expression->variable = EXPRESSION_VARIABLE_USER;
        expression->variable_name = variable;
        return true;
    }
    ok = true;
done:
    bson_free(variable);
    return ok;
}

static expression_t *parse_field_path(const char *text, bson_error_t *error)
{
    expression_t *expression = expression_new(EXPRESSION_FIELD_PATH);
    if (text[1] == '\0') {
        tc_error_set(error, EXPRESSION_ERROR_DOLLAR_ALONE,
                     "'$' by itself is not a valid FieldPath");
        goto done;
    }
    if (text[1] == '$') {
        const char *name = text + 2;
        const char *dot = strchr(name, '.');
        size_t length = dot == NULL ? strlen(name) : (size_t)(dot - name);
        TC_CHECK(parse_variable(expression, name, length, error));
        if (dot != NULL) {
            TC_CHECK(parse_path_components(expression, dot + 1, error));
        }
        return expression;
    }
    expression->variable = EXPRESSION_VARIABLE_CURRENT;
    TC_CHECK(parse_path_components(expression, text + 1, error));
    return expression;
done:
    expression_destroy(expression);
    return NULL;
}

static char *describe_spec(const bson_value_t *spec)
{
    bson_string_t *text = bson_string_new(NULL);
    aggregation_value_describe(spec, text);
    return bson_string_free(text, false);
}

bool expression_parse_operands(expression_t *expression, const bson_value_t *argument,
                               bson_error_t *error)
{
    if (argument->value_type == BSON_TYPE_ARRAY) {
        bson_iter_t iter;
        if (bson_iter_init_from_data(&iter, argument->value.v_doc.data,
                                     argument->value.v_doc.data_len)) {
            while (bson_iter_next(&iter)) {
                expression_t *child = expression_parse(bson_iter_value(&iter), error);
                if (child == NULL) {
                    return false;
                }
                expression_add_child(expression, child);
            }
        }
    } else {
        expression_t *child = expression_parse(argument, error);
        if (child == NULL) {
            return false;
        }
        expression_add_child(expression, child);
    }

    const expression_operator_t *operation = expression->operation;
    int count = (int)expression->child_count;
    if (operation->minimum_arguments == operation->maximum_arguments &&
        count != operation->minimum_arguments) {
        return tc_error_set(error, EXPRESSION_ERROR_ARITY_EXACT,
                            "Expression %s takes exactly %d arguments. %d were passed in.",
                            operation->name, operation->minimum_arguments, count);
    }
    if (count < operation->minimum_arguments ||
        (operation->maximum_arguments >= 0 && count > operation->maximum_arguments)) {
        if (operation->maximum_arguments < 0) {
            return tc_error_set(error, EXPRESSION_ERROR_ARITY_RANGE,
                                "Expression %s takes at least %d arguments, but %d were passed in.",
                                operation->name, operation->minimum_arguments, count);
        }
        return tc_error_set(error, EXPRESSION_ERROR_ARITY_RANGE,
                            "Expression %s takes at least %d arguments, and at most %d, but %d "
                            "were passed in.",
                            operation->name, operation->minimum_arguments,
                            operation->maximum_arguments, count);
    }
    return true;
}

static expression_t *parse_operator(const bson_value_t *spec, bson_iter_t *first,
                                    bson_error_t *error)
{
    bson_iter_t counter = *first;
    int field_count = 1;
    while (bson_iter_next(&counter)) {
        field_count++;
    }
    if (field_count != 1) {
        char *text = describe_spec(spec);
        tc_error_set(error, EXPRESSION_ERROR_ONE_FIELD,
                     "An object representing an expression must have exactly one field: %s", text);
        bson_free(text);
        return NULL;
    }
    const char *name = bson_iter_key(first);
    const expression_operator_t *operation = find_operator(name);
    if (operation == NULL) {
        tc_error_set(error, TC_ERR_INVALID_PIPELINE_OPERATOR, "Unrecognized expression '%s'", name);
        return NULL;
    }
    expression_t *expression = expression_new(EXPRESSION_OPERATOR);
    expression->operation = operation;
    bool ok = operation->parse != NULL
                  ? operation->parse(expression, bson_iter_value(first), error)
                  : expression_parse_operands(expression, bson_iter_value(first), error);
    if (!ok) {
        expression_destroy(expression);
        return NULL;
    }
    return expression;
}

/* ExpressionObject::parse: every field holds an expression. */
static expression_t *parse_object(const bson_value_t *spec, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, spec->value.v_doc.data, spec->value.v_doc.data_len)) {
        tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in expression");
        return NULL;
    }
    bson_iter_t first = iter;
    if (bson_iter_next(&first) && bson_iter_key(&first)[0] == '$') {
        return parse_operator(spec, &first, error);
    }
    expression_t *expression = expression_new(EXPRESSION_OBJECT);
    while (bson_iter_next(&iter)) {
        const char *name = bson_iter_key(&iter);
        TC_CHECK(check_field_name(name, error));
        if (strchr(name, '.') != NULL) {
            tc_error_set(error, EXPRESSION_ERROR_DOTTED_FIELD_NAME,
                         "FieldPath field names may not contain '.'. Consider using $getField or "
                         "$setField.");
            goto done;
        }
        for (size_t i = 0; i < expression->child_count; i++) {
            if (strcmp(expression->names[i], name) == 0) {
                char *text = describe_spec(spec);
                tc_error_set(error, EXPRESSION_ERROR_DUPLICATE_FIELD,
                             "duplicate field name specified in object literal: %s", text);
                bson_free(text);
                goto done;
            }
        }
        expression_t *child = expression_parse(bson_iter_value(&iter), error);
        TC_CHECK(child != NULL);
        expression->names = bson_realloc(expression->names,
                                         (expression->child_count + 1) * sizeof *expression->names);
        expression->names[expression->child_count] = bson_strdup(name);
        expression_add_child(expression, child);
    }
    return expression;
done:
    expression_destroy(expression);
    return NULL;
}

expression_t *expression_parse(const bson_value_t *spec, bson_error_t *error)
{
    switch (spec->value_type) {
    case BSON_TYPE_UTF8:
        if (spec->value.v_utf8.str[0] == '$') {
            return parse_field_path(spec->value.v_utf8.str, error);
        }
        break;
    case BSON_TYPE_DOCUMENT:
        return parse_object(spec, error);
    case BSON_TYPE_ARRAY: {
        expression_t *expression = expression_new(EXPRESSION_ARRAY);
        bson_iter_t iter;
        if (bson_iter_init_from_data(&iter, spec->value.v_doc.data, spec->value.v_doc.data_len)) {
            while (bson_iter_next(&iter)) {
                expression_t *child = expression_parse(bson_iter_value(&iter), error);
                if (child == NULL) {
                    expression_destroy(expression);
                    return NULL;
                }
                expression_add_child(expression, child);
            }
        }
        return expression;
    }
    default:
        break;
    }
    expression_t *expression = expression_new(EXPRESSION_CONSTANT);
    bson_value_copy(spec, &expression->constant);
    return expression;
}

void expression_reserve_slots(expression_t *expression, size_t count)
{
    expression->children = bson_malloc0(count * sizeof *expression->children);
    expression->child_count = count;
}

bool expression_parse_into_slot(expression_t *expression, size_t slot, const bson_value_t *value,
                                bson_error_t *error)
{
    expression_t *child = expression_parse(value, error);
    if (child == NULL) {
        return false;
    }
    expression_destroy(expression->children[slot]);
    expression->children[slot] = child;
    return true;
}

/* Every user variable the expression reads is one of defined's fields. */
static bool check_variables(const expression_t *expression, const bson_t *defined, bson_error_t *error)
{
    if (expression->kind == EXPRESSION_FIELD_PATH && expression->variable == EXPRESSION_VARIABLE_USER &&
        (defined == NULL || !bson_has_field(defined, expression->variable_name))) {
        return tc_error_set(error, EXPRESSION_ERROR_UNDEFINED_VARIABLE, "Use of undefined variable: %s",
                            expression->variable_name);
    }
    for (size_t i = 0; i < expression->child_count; i++) {
        if (!check_variables(expression->children[i], defined, error)) {
            return false;
        }
    }
    return true;
}

expression_t *expression_compile_with_variables(const bson_value_t *spec, const bson_t *defined,
                                                bson_error_t *error)
{
    expression_t *expression = expression_parse(spec, error);
    if (expression != NULL && !check_variables(expression, defined, error)) {
        expression_destroy(expression);
        return NULL;
    }
    return expression;
}

expression_t *expression_compile(const bson_value_t *spec, bson_error_t *error)
{
    return expression_compile_with_variables(spec, NULL, error);
}

expression_t *expression_compile_unchecked(const bson_value_t *spec, bson_error_t *error)
{
    return expression_parse(spec, error);
}

bool expression_check_variables(const expression_t *expression, const bson_t *defined, bson_error_t *error)
{
    return check_variables(expression, defined, error);
}

bool expression_evaluate_let(const bson_value_t *let, expression_context_t *context, bson_t *out_values,
                             bson_error_t *error)
{
    bson_iter_t iter;
    bson_init(out_values);
    if (let->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field 'let' is the wrong type '%s', expected type 'object'",
                            value_type_name(let->value_type));
    }
    if (!bson_iter_init_from_data(&iter, let->value.v_doc.data, let->value.v_doc.data_len)) {
        return tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in let");
    }
    while (bson_iter_next(&iter)) {
        const char *name = bson_iter_key(&iter);
        unsigned char first = (unsigned char)name[0];
        /* Variables::validateNameForUserWrite: a lower-case letter or a non-ASCII first. */
        if (first != '\0' && !((first >= 'a' && first <= 'z') || (first & 0x80))) {
            return tc_error_set(error, EXPRESSION_ERROR_VARIABLE_START,
                                "'%s' starts with an invalid character for a user variable name", name);
        }
        expression_t probe = {.kind = EXPRESSION_FIELD_PATH};
        if (!parse_variable(&probe, name, strlen(name), error)) {
            return false;
        }
        bson_free(probe.variable_name);
        /* Each value is a constant expression, evaluated once for the command; it may
         * read the variables defined before it. */
        expression_t *expression = expression_compile_with_variables(bson_iter_value(&iter), out_values, error);
        bson_value_t value;
        expression_context_t scope = *context;
        scope.variables = out_values;
        bson_t empty = BSON_INITIALIZER;
        bool ok = expression != NULL && expression_evaluate(expression, &empty, &scope, &value, error);
        expression_destroy(expression);
        if (!ok) {
            return false;
        }
        if (aggregation_value_is_missing(&value)) {
            aggregation_value_set_null(&value); /* $$REMOVE: the variable is null, not absent */
        }
        aggregation_value_append(out_values, name, -1, &value);
        bson_value_destroy(&value);
    }
    context->variables = out_values;
    return true;
}

/* ---- evaluation ---- */

static void lookup_path(const uint8_t *data, uint32_t length, char *const *path, size_t path_length,
                        bson_value_t *out_value);

/* ExpressionFieldPath::evaluatePathArray: the path continues into each sub-document of
 * the array; other elements and missing results are dropped. */
static void lookup_path_in_array(const bson_value_t *array, char *const *path, size_t path_length,
                                 bson_value_t *out_value)
{
    bson_t result = BSON_INITIALIZER;
    bson_iter_t iter;
    uint32_t index = 0;
    if (bson_iter_init_from_data(&iter, array->value.v_doc.data, array->value.v_doc.data_len)) {
        while (bson_iter_next(&iter)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
                continue;
            }
            const bson_value_t *element = bson_iter_value(&iter);
            bson_value_t nested;
            lookup_path(element->value.v_doc.data, element->value.v_doc.data_len, path, path_length,
                        &nested);
            if (!aggregation_value_is_missing(&nested)) {
                char key[16];
                const char *key_text;
                size_t key_length = bson_uint32_to_string(index++, &key_text, key, sizeof key);
                bson_append_value(&result, key_text, (int)key_length, &nested);
            }
            bson_value_destroy(&nested);
        }
    }
    aggregation_value_take_document(out_value, &result, BSON_TYPE_ARRAY);
}

static void lookup_path(const uint8_t *data, uint32_t length, char *const *path, size_t path_length,
                        bson_value_t *out_value)
{
    aggregation_value_set_missing(out_value);
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, data, length) ||
        !bson_iter_find_w_len(&iter, path[0], (int)strlen(path[0]))) {
        return;
    }
    const bson_value_t *value = bson_iter_value(&iter);
    if (path_length == 1) {
        bson_value_copy(value, out_value);
        return;
    }
    if (value->value_type == BSON_TYPE_DOCUMENT) {
        lookup_path(value->value.v_doc.data, value->value.v_doc.data_len, path + 1, path_length - 1,
                    out_value);
    } else if (value->value_type == BSON_TYPE_ARRAY) {
        lookup_path_in_array(value, path + 1, path_length - 1, out_value);
    }
}

static void evaluate_field_path(const expression_t *expression,
                                const expression_evaluation_t *evaluation, bson_value_t *out_value)
{
    aggregation_value_set_missing(out_value);
    switch (expression->variable) {
    case EXPRESSION_VARIABLE_REMOVE:
        return;
    case EXPRESSION_VARIABLE_NOW:
        if (expression->path_length == 0) {
            aggregation_value_set_date(out_value, evaluation->context->now_milliseconds);
        }
        return;
    case EXPRESSION_VARIABLE_USER: {
        bson_iter_t iter;
        const bson_t *variables = evaluation->context->variables;
        if (variables == NULL || !bson_iter_init_find(&iter, variables, expression->variable_name)) {
            return; /* checked at compile time: not reached */
        }
        const bson_value_t *value = bson_iter_value(&iter);
        if (expression->path_length == 0) {
            bson_value_copy(value, out_value);
        } else if (value->value_type == BSON_TYPE_DOCUMENT) {
            lookup_path(value->value.v_doc.data, value->value.v_doc.data_len, expression->path,
                        expression->path_length, out_value);
        } else if (value->value_type == BSON_TYPE_ARRAY) {
            lookup_path_in_array(value, expression->path, expression->path_length, out_value);
        }
        return;
    }
    case EXPRESSION_VARIABLE_ROOT:
    case EXPRESSION_VARIABLE_CURRENT:
        break;
    }
    if (expression->path_length == 0) {
        bson_value_t whole;
        whole.value_type = BSON_TYPE_DOCUMENT;
        whole.value.v_doc.data = (uint8_t *)bson_get_data(evaluation->root);
        whole.value.v_doc.data_len = evaluation->root->len;
        bson_value_copy(&whole, out_value);
        return;
    }
    lookup_path(bson_get_data(evaluation->root), evaluation->root->len, expression->path,
                expression->path_length, out_value);
}

static bool evaluate_object(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error)
{
    bson_t result = BSON_INITIALIZER;
    for (size_t i = 0; i < expression->child_count; i++) {
        bson_value_t field;
        if (!expression_evaluate_in(expression->children[i], evaluation, &field, error)) {
            bson_destroy(&result);
            return false;
        }
        aggregation_value_append(&result, expression->names[i], -1, &field);
        bson_value_destroy(&field);
    }
    aggregation_value_take_document(out_value, &result, BSON_TYPE_DOCUMENT);
    return true;
}

/* ExpressionArray: a missing element becomes null. */
static bool evaluate_array(const expression_t *expression,
                           const expression_evaluation_t *evaluation, bson_value_t *out_value,
                           bson_error_t *error)
{
    bson_t result = BSON_INITIALIZER;
    for (size_t i = 0; i < expression->child_count; i++) {
        bson_value_t element;
        if (!expression_evaluate_in(expression->children[i], evaluation, &element, error)) {
            bson_destroy(&result);
            return false;
        }
        if (aggregation_value_is_missing(&element)) {
            aggregation_value_set_null(&element);
        }
        char key[16];
        const char *key_text;
        size_t key_length = bson_uint32_to_string((uint32_t)i, &key_text, key, sizeof key);
        bson_append_value(&result, key_text, (int)key_length, &element);
        bson_value_destroy(&element);
    }
    aggregation_value_take_document(out_value, &result, BSON_TYPE_ARRAY);
    return true;
}

bool expression_evaluate_in(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error)
{
    aggregation_value_set_missing(out_value);
    switch (expression->kind) {
    case EXPRESSION_CONSTANT:
        bson_value_copy(&expression->constant, out_value);
        return true;
    case EXPRESSION_FIELD_PATH:
        evaluate_field_path(expression, evaluation, out_value);
        return true;
    case EXPRESSION_OBJECT:
        return evaluate_object(expression, evaluation, out_value, error);
    case EXPRESSION_ARRAY:
        return evaluate_array(expression, evaluation, out_value, error);
    case EXPRESSION_OPERATOR:
        if (!expression->operation->evaluate(expression, evaluation, out_value, error)) {
            bson_value_destroy(out_value);
            aggregation_value_set_missing(out_value);
            return false;
        }
        return true;
    }
    return tc_error_set(error, TC_ERR_INTERNAL, "unknown expression kind");
}

bool expression_evaluate_children(const expression_t *expression,
                                  const expression_evaluation_t *evaluation, bson_value_t *values,
                                  size_t count, bson_error_t *error)
{
    for (size_t i = 0; i < count; i++) {
        aggregation_value_set_missing(&values[i]);
    }
    for (size_t i = 0; i < count && i < expression->child_count; i++) {
        if (!expression_evaluate_in(expression->children[i], evaluation, &values[i], error)) {
            expression_values_destroy(values, count);
            return false;
        }
    }
    return true;
}

void expression_values_destroy(bson_value_t *values, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        bson_value_destroy(&values[i]);
        aggregation_value_set_missing(&values[i]);
    }
}

void expression_context_init(expression_context_t *context)
{
    context->now_milliseconds = clock_wall_ms();
    context->variables = NULL;
    context->collation = NULL;
}

bool expression_evaluate(const expression_t *expression, const bson_t *document,
                         const expression_context_t *context, bson_value_t *out_value,
                         bson_error_t *error)
{
    expression_context_t clock_context;
    if (context == NULL) {
        expression_context_init(&clock_context);
        context = &clock_context;
    }
    expression_evaluation_t evaluation = {.root = document, .context = context};
    return expression_evaluate_in(expression, &evaluation, out_value, error);
}
