/* The $group stage (an _id expression, any document/array/null included, and the
 * accumulators $sum $avg $min $max $first $last $push $addToSet $count) and the $count
 * stage, which is a $group of one counter without _id. Groups are found through a hash
 * of the key under which equal values (1, 1.0, NumberLong(1)) collide, and come out in
 * the order their first document arrived. */
#include "query/pipeline_private.h"

#include "query/aggregation_value.h"

#include <math.h>
#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    GROUP_ERROR_NOT_OBJECT = 15947,
    GROUP_ERROR_DUPLICATE_ID = 15948,
    GROUP_ERROR_UNKNOWN_ACCUMULATOR = 15952,
    GROUP_ERROR_MISSING_ID = 15955,
    GROUP_ERROR_NOT_ACCUMULATOR = 40234,
    GROUP_ERROR_DOTTED_NAME = 40235,
    GROUP_ERROR_OPERATOR_NAME = 40236,
    GROUP_ERROR_UNARY = 40237,
    GROUP_ERROR_ONE_ACCUMULATOR = 40238,
    COUNT_ERROR_NOT_STRING = 40156,
    COUNT_ERROR_EMPTY = 40157,
    COUNT_ERROR_DOLLAR = 40158,
    COUNT_ERROR_DOT = 40160,
};

typedef enum accumulator_kind {
    ACCUMULATOR_SUM,
    ACCUMULATOR_AVG,
    ACCUMULATOR_MIN,
    ACCUMULATOR_MAX,
    ACCUMULATOR_FIRST,
    ACCUMULATOR_LAST,
    ACCUMULATOR_PUSH,
    ACCUMULATOR_ADD_TO_SET,
    ACCUMULATOR_COUNT,
} accumulator_kind_t;

static const struct {
    const char *name;
    accumulator_kind_t kind;
} accumulator_names[] = {
    {"$sum", ACCUMULATOR_SUM},     {"$avg", ACCUMULATOR_AVG},
    {"$min", ACCUMULATOR_MIN},     {"$max", ACCUMULATOR_MAX},
    {"$first", ACCUMULATOR_FIRST}, {"$last", ACCUMULATOR_LAST},
    {"$push", ACCUMULATOR_PUSH},   {"$addToSet", ACCUMULATOR_ADD_TO_SET},
    {"$count", ACCUMULATOR_COUNT},
};

typedef struct group_field {
    char *name;
    accumulator_kind_t kind;
    expression_t *argument; /* NULL for $count */
} group_field_t;

typedef struct group_spec {
    expression_t *id;
    group_field_t *fields;
    size_t field_count;
    bool without_id; /* the $count stage */
} group_spec_t;

/* ---- a hash table of values, in insertion order ---- */

typedef struct value_table {
    bson_value_t *values; /* owned copies, in insertion order */
    uint64_t *hashes;
    size_t count;
    size_t capacity;
    size_t *slots; /* open addressing: index + 1, 0 when free */
    size_t slot_count;
} value_table_t;

static void value_table_destroy(value_table_t *table)
{
    for (size_t i = 0; i < table->count; i++) {
        bson_value_destroy(&table->values[i]);
    }
    bson_free(table->values);
    bson_free(table->hashes);
    bson_free(table->slots);
    memset(table, 0, sizeof *table);
}

static void value_table_place(value_table_t *table, size_t index)
{
    size_t mask = table->slot_count - 1;
    size_t slot = (size_t)table->hashes[index] & mask;
    while (table->slots[slot] != 0) {
        slot = (slot + 1) & mask;
    }
    table->slots[slot] = index + 1;
}

/* The index of value in table, adding a copy when absent (*out_added). */
static size_t value_table_insert(value_table_t *table, const bson_value_t *value, const collation_t *collation,
                                 bool *out_added)
{
    uint64_t hash = aggregation_value_hash_collated(value, collation);
    if (table->slot_count > 0) {
        size_t mask = table->slot_count - 1;
        for (size_t slot = (size_t)hash & mask; table->slots[slot] != 0; slot = (slot + 1) & mask) {
            size_t index = table->slots[slot] - 1;
            if (table->hashes[index] == hash &&
                aggregation_value_compare_collated(&table->values[index], value, collation) == 0) {
                *out_added = false;
                return index;
            }
        }
    }
    if (table->count == table->capacity) {
        table->capacity = table->capacity == 0 ? 8 : table->capacity * 2;
        table->values = bson_realloc(table->values, table->capacity * sizeof *table->values);
        table->hashes = bson_realloc(table->hashes, table->capacity * sizeof *table->hashes);
    }
    size_t index = table->count++;
    bson_value_copy(value, &table->values[index]);
    table->hashes[index] = hash;
    if (table->count * 2 > table->slot_count) {
        /* Keep the load at most one half, rebuilding the slots from stored hashes. */
        table->slot_count = table->slot_count == 0 ? 16 : table->slot_count * 2;
        bson_free(table->slots);
        table->slots = bson_malloc0(table->slot_count * sizeof *table->slots);
        for (size_t i = 0; i < table->count; i++) {
            value_table_place(table, i);
        }
    } else {
        value_table_place(table, index);
    }
    *out_added = true;
    return index;
}

/* ---- accumulators ---- */

typedef struct accumulator_state {
    /* $sum, $avg, $count */
    int widest;       /* 0 int32, 1 int64, 2 double, 3 decimal128 */
    int64_t long_sum; /* exact while only integers come and it fits */
    bool long_overflow;
    double double_sum; /* Neumaier-compensated, as mongod's DoubleDoubleSummation */
    double compensation;
    int64_t count;
    /* $min, $max, $first, $last */
    bson_value_t value;
    bool has_value;
    /* $push */
    bson_t *array;
    uint32_t array_length;
    /* $addToSet */
    value_table_t set;
} accumulator_state_t;

static int numeric_rank(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_INT32:
        return 0;
    case BSON_TYPE_INT64:
        return 1;
    case BSON_TYPE_DOUBLE:
        return 2;
    default:
        return 3;
    }
}

static void add_number(accumulator_state_t *state, const bson_value_t *number)
{
    int rank = numeric_rank(number->value_type);
    if (rank > state->widest) {
        state->widest = rank;
    }
    if (rank <= 1 && !state->long_overflow &&
        __builtin_add_overflow(state->long_sum, aggregation_value_as_int64(number),
                               &state->long_sum)) {
        state->long_overflow = true;
    }
    double addend = aggregation_value_as_double(number);
    double total = state->double_sum + addend;
    if (isfinite(total)) {
        if (fabs(state->double_sum) >= fabs(addend)) {
            state->compensation += (state->double_sum - total) + addend;
        } else {
            state->compensation += (addend - total) + state->double_sum;
        }
    }
    state->double_sum = total;
    state->count++;
}

static double compensated_sum(const accumulator_state_t *state)
{
    return isfinite(state->double_sum) ? state->double_sum + state->compensation
                                       : state->double_sum;
}

static void sum_result(const accumulator_state_t *state, bson_value_t *out_value)
{
    if (state->widest <= 1 && !state->long_overflow) {
        if (state->widest == 0) {
            aggregation_value_set_int_or_long(out_value, state->long_sum);
        } else {
            aggregation_value_set_int64(out_value, state->long_sum);
        }
    } else if (state->widest == 3) {
        aggregation_value_set_decimal_from_double(out_value, compensated_sum(state));
    } else {
        aggregation_value_set_double(out_value, compensated_sum(state));
    }
}

static void average_result(const accumulator_state_t *state, bson_value_t *out_value)
{
    if (state->count == 0) {
        aggregation_value_set_null(out_value);
        return;
    }
    double total = state->widest <= 1 && !state->long_overflow ? (double)state->long_sum
                                                               : compensated_sum(state);
    if (state->widest == 3) {
        aggregation_value_set_decimal_from_double(out_value, total / (double)state->count);
    } else {
        aggregation_value_set_double(out_value, total / (double)state->count);
    }
}

/* Replaces the held value with a copy of value, keeping the memory count. */
static void hold_value(accumulator_state_t *state, const bson_value_t *value, int64_t *memory)
{
    if (state->has_value) {
        *memory -= (int64_t)aggregation_value_memory(&state->value);
        bson_value_destroy(&state->value);
    }
    aggregation_value_copy(value, &state->value);
    state->has_value = true;
    *memory += (int64_t)aggregation_value_memory(&state->value);
}

/* AccumulatorX::processInternal for one input value. */
static void accumulate(accumulator_kind_t kind, accumulator_state_t *state, const bson_value_t *input,
                       const collation_t *collation, int64_t *memory)
{
    switch (kind) {
    case ACCUMULATOR_SUM:
    case ACCUMULATOR_AVG:
        if (aggregation_value_is_number(input)) {
            add_number(state, input);
        }
        return;
    case ACCUMULATOR_COUNT: {
        bson_value_t one;
        aggregation_value_set_int32(&one, 1);
        add_number(state, &one);
        return;
    }
    case ACCUMULATOR_MIN:
    case ACCUMULATOR_MAX: {
        if (aggregation_value_is_nullish(input)) {
            return; /* null, undefined and missing never win */
        }
        int order = state->has_value ? aggregation_value_compare_collated(input, &state->value, collation) : 0;
        if (!state->has_value || (kind == ACCUMULATOR_MIN ? order < 0 : order > 0)) {
            hold_value(state, input, memory);
        }
        return;
    }
    case ACCUMULATOR_FIRST:
        if (!state->has_value) {
            hold_value(state, input, memory);
        }
        return;
    case ACCUMULATOR_LAST:
        hold_value(state, input, memory);
        return;
    case ACCUMULATOR_PUSH:
        if (!aggregation_value_is_missing(input)) {
            if (state->array == NULL) {
                state->array = bson_new();
            }
            char key[16];
            const char *key_text;
            size_t key_length =
                bson_uint32_to_string(state->array_length++, &key_text, key, sizeof key);
            bson_append_value(state->array, key_text, (int)key_length, input);
            *memory += (int64_t)aggregation_value_memory(input);
        }
        return;
    case ACCUMULATOR_ADD_TO_SET:
        if (!aggregation_value_is_missing(input)) {
            bool added;
            value_table_insert(&state->set, input, collation, &added);
            if (added) {
                *memory += (int64_t)aggregation_value_memory(input) + 16;
            }
        }
        return;
    }
}

/* The accumulator's result (an owned value; missing when it has none). */
static void accumulator_result(accumulator_kind_t kind, const accumulator_state_t *state,
                               bson_value_t *out_value)
{
    aggregation_value_set_missing(out_value);
    switch (kind) {
    case ACCUMULATOR_SUM:
    case ACCUMULATOR_COUNT:
        sum_result(state, out_value);
        return;
    case ACCUMULATOR_AVG:
        average_result(state, out_value);
        return;
    case ACCUMULATOR_MIN:
    case ACCUMULATOR_MAX:
    case ACCUMULATOR_FIRST:
    case ACCUMULATOR_LAST:
        if (state->has_value) {
            aggregation_value_copy(&state->value, out_value);
        }
        return;
    case ACCUMULATOR_PUSH: {
        bson_t *array = state->array != NULL ? bson_copy(state->array) : bson_new();
        aggregation_value_take_document(out_value, array, BSON_TYPE_ARRAY);
        return;
    }
    case ACCUMULATOR_ADD_TO_SET: {
        bson_t *array = bson_new();
        for (size_t i = 0; i < state->set.count; i++) {
            char key[16];
            const char *key_text;
            size_t key_length = bson_uint32_to_string((uint32_t)i, &key_text, key, sizeof key);
            bson_append_value(array, key_text, (int)key_length, &state->set.values[i]);
        }
        aggregation_value_take_document(out_value, array, BSON_TYPE_ARRAY);
        return;
    }
    }
}

static void accumulator_state_clear(accumulator_state_t *state)
{
    if (state->has_value) {
        bson_value_destroy(&state->value);
    }
    if (state->array != NULL) {
        bson_destroy(state->array);
    }
    value_table_destroy(&state->set);
}

/* ---- the stage ---- */

typedef struct group_state {
    size_t field_count;
    value_table_t keys;                 /* group keys, in first-seen order */
    accumulator_state_t **accumulators; /* per group, field_count each */
    size_t accumulator_capacity;
    int64_t memory;
    bool input_done;
    size_t position;
} group_state_t;

static void group_state_destroy(void *state)
{
    group_state_t *group = state;
    for (size_t i = 0; i < group->keys.count; i++) {
        for (size_t j = 0; j < group->field_count; j++) {
            accumulator_state_clear(&group->accumulators[i][j]);
        }
        bson_free(group->accumulators[i]);
    }
    bson_free(group->accumulators);
    value_table_destroy(&group->keys);
    bson_free(group);
}

static void group_spec_destroy(void *spec)
{
    group_spec_t *group = spec;
    expression_destroy(group->id);
    for (size_t i = 0; i < group->field_count; i++) {
        bson_free(group->fields[i].name);
        expression_destroy(group->fields[i].argument);
    }
    bson_free(group->fields);
    bson_free(group);
}

static bool consume(const group_spec_t *spec, group_state_t *state, const bson_t *document,
                    pipeline_cursor_t *cursor, bson_error_t *error)
{
    bson_value_t key;
    if (!expression_evaluate(spec->id, document, cursor->expression_context, &key, error)) {
        return false;
    }
    if (aggregation_value_is_missing(&key)) {
        aggregation_value_set_null(&key); /* a missing _id groups as null */
    }
    bool added;
    /* Group keys, $addToSet and $min/$max follow the command's collation. */
    const collation_t *collation = cursor->expression_context->collation;
    size_t index = value_table_insert(&state->keys, &key, collation, &added);
    if (added) {
        if (index >= state->accumulator_capacity) {
            state->accumulator_capacity =
                state->accumulator_capacity == 0 ? 16 : state->accumulator_capacity * 2;
            state->accumulators = bson_realloc(
                state->accumulators, state->accumulator_capacity * sizeof *state->accumulators);
        }
        state->accumulators[index] =
            bson_malloc0((spec->field_count + 1) * sizeof(accumulator_state_t));
        state->memory += (int64_t)(aggregation_value_memory(&key) + 32 +
                                   spec->field_count * sizeof(accumulator_state_t));
    }
    bson_value_destroy(&key);
    for (size_t i = 0; i < spec->field_count; i++) {
        const group_field_t *field = &spec->fields[i];
        bson_value_t input;
        aggregation_value_set_missing(&input);
        if (field->argument != NULL &&
            !expression_evaluate(field->argument, document, cursor->expression_context, &input,
                                 error)) {
            return false;
        }
        accumulate(field->kind, &state->accumulators[index][i], &input, collation, &state->memory);
        bson_value_destroy(&input);
    }
    if (state->memory > cursor->limits->memory_limit_bytes && !cursor->limits->allow_disk_use) {
        return tc_error_set(error, TC_ERR_QUERY_EXCEEDED_MEMORY_LIMIT,
                            "Exceeded memory limit for $group, but didn't allow external sort. "
                            "Pass allowDiskUse:true to opt in.");
    }
    return true;
}

static bool group_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                       bson_error_t *error)
{
    const group_spec_t *spec = cursor->stage->spec;
    if (cursor->state == NULL) {
        group_state_t *created = bson_malloc0(sizeof *created);
        created->field_count = spec->field_count;
        cursor->state = created;
    }
    group_state_t *state = cursor->state;
    while (!state->input_done) {
        bson_t input;
        if (!pipeline_cursor_pull(cursor, &input, out_end, error)) {
            return false;
        }
        if (*out_end) {
            state->input_done = true;
            break;
        }
        bool ok = consume(spec, state, &input, cursor, error);
        bson_destroy(&input);
        if (!ok) {
            return false;
        }
    }
    if (state->position >= state->keys.count) {
        *out_end = true;
        return true;
    }
    size_t index = state->position++;
    bson_init(out_document);
    if (!spec->without_id) {
        bson_append_value(out_document, "_id", 3, &state->keys.values[index]);
    }
    for (size_t i = 0; i < spec->field_count; i++) {
        bson_value_t result;
        accumulator_result(spec->fields[i].kind, &state->accumulators[index][i], &result);
        if (aggregation_value_is_missing(&result)) {
            aggregation_value_set_null(&result); /* as mongod, for predictable output */
        }
        bson_append_value(out_document, spec->fields[i].name, -1, &result);
        bson_value_destroy(&result);
    }
    *out_end = false;
    return true;
}

static const pipeline_stage_kind_t group_kind = {"$group", group_next, group_state_destroy,
                                                 group_spec_destroy};

static group_field_t *add_field(group_spec_t *spec, const char *name, accumulator_kind_t kind)
{
    spec->fields = bson_realloc(spec->fields, (spec->field_count + 1) * sizeof *spec->fields);
    group_field_t *field = &spec->fields[spec->field_count++];
    field->name = bson_strdup(name);
    field->kind = kind;
    field->argument = NULL;
    return field;
}

/* AccumulationStatement::parseAccumulationStatement for `name: {$accumulator: argument}`. */
static bool parse_accumulator(group_spec_t *spec, const char *name, const bson_value_t *value,
                              const pipeline_scope_t *scope, bson_error_t *error)
{
    bson_iter_t iter;
    bool is_accumulator_object =
        value->value_type == BSON_TYPE_DOCUMENT &&
        bson_iter_init_from_data(&iter, value->value.v_doc.data, value->value.v_doc.data_len) &&
        bson_iter_next(&iter) && bson_iter_key(&iter)[0] == '$';
    if (!is_accumulator_object) {
        return tc_error_set(error, GROUP_ERROR_NOT_ACCUMULATOR,
                            "The field '%s' must be an accumulator object", name);
    }
    if (strchr(name, '.') != NULL) {
        return tc_error_set(error, GROUP_ERROR_DOTTED_NAME,
                            "The field name '%s' cannot contain '.'", name);
    }
    if (name[0] == '$') {
        return tc_error_set(error, GROUP_ERROR_OPERATOR_NAME,
                            "The field name '%s' cannot be an operator name", name);
    }
    bson_iter_t more = iter;
    if (bson_iter_next(&more)) {
        return tc_error_set(error, GROUP_ERROR_ONE_ACCUMULATOR,
                            "The field '%s' must specify one accumulator", name);
    }
    const char *accumulator = bson_iter_key(&iter);
    const bson_value_t *argument = bson_iter_value(&iter);
    if (argument->value_type == BSON_TYPE_ARRAY) {
        return tc_error_set(error, GROUP_ERROR_UNARY, "The %s accumulator is a unary operator",
                            accumulator);
    }
    for (size_t i = 0; i < sizeof accumulator_names / sizeof accumulator_names[0]; i++) {
        if (strcmp(accumulator_names[i].name, accumulator) != 0) {
            continue;
        }
        accumulator_kind_t kind = accumulator_names[i].kind;
        if (kind == ACCUMULATOR_COUNT) {
            if (argument->value_type != BSON_TYPE_DOCUMENT || argument->value.v_doc.data_len > 5) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "$count takes no arguments, i.e. $count:{}");
            }
            add_field(spec, name, kind);
            return true;
        }
        expression_t *expression = expression_compile_with_variables(argument, scope->variables, error);
        if (expression == NULL) {
            return false;
        }
        add_field(spec, name, kind)->argument = expression;
        return true;
    }
    return tc_error_set(error, GROUP_ERROR_UNKNOWN_ACCUMULATOR, "unknown group operator '%s'",
                        accumulator);
}

bool pipeline_group_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                            bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, GROUP_ERROR_NOT_OBJECT,
                            "a group's fields must be specified in an object");
    }
    group_spec_t *spec = bson_malloc0(sizeof *spec);
    bool ok = false;
    bson_iter_t iter;
    bson_iter_init_from_data(&iter, argument->value.v_doc.data, argument->value.v_doc.data_len);
    while (bson_iter_next(&iter)) {
        const char *name = bson_iter_key(&iter);
        if (strcmp(name, "_id") == 0) {
            if (spec->id != NULL) {
                tc_error_set(error, GROUP_ERROR_DUPLICATE_ID,
                             "a group's _id may only be specified once");
                goto done;
            }
            spec->id = expression_compile_with_variables(bson_iter_value(&iter), scope->variables, error);
            TC_CHECK(spec->id != NULL);
        } else {
            TC_CHECK(parse_accumulator(spec, name, bson_iter_value(&iter), scope, error));
        }
    }
    if (spec->id == NULL) {
        tc_error_set(error, GROUP_ERROR_MISSING_ID, "a group specification must include an _id");
        goto done;
    }
    out_stage->kind = &group_kind;
    out_stage->spec = spec;
    spec = NULL;
    ok = true;
done:
    if (spec != NULL) {
        group_spec_destroy(spec);
    }
    return ok;
}

bool pipeline_count_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                            bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_UTF8) {
        return tc_error_set(error, COUNT_ERROR_NOT_STRING,
                            "the count field must be a non-empty string");
    }
    if (!aggregation_value_is_field_name(argument)) {
        return tc_error_set(error, COUNT_ERROR_NOT_STRING,
                            "the count field must be UTF-8 without a null byte");
    }
    const char *name = argument->value.v_utf8.str;
    if (name[0] == '\0') {
        return tc_error_set(error, COUNT_ERROR_EMPTY, "the count field must be a non-empty string");
    }
    if (name[0] == '$') {
        return tc_error_set(error, COUNT_ERROR_DOLLAR,
                            "the count field cannot be a $-prefixed path");
    }
    if (strchr(name, '.') != NULL) {
        return tc_error_set(error, COUNT_ERROR_DOT, "the count field cannot contain '.'");
    }
    group_spec_t *spec = bson_malloc0(sizeof *spec);
    bson_value_t null_key;
    aggregation_value_set_null(&null_key);
    spec->id = expression_compile(&null_key, error);
    spec->without_id = true;
    add_field(spec, name, ACCUMULATOR_COUNT);
    out_stage->kind = &group_kind;
    out_stage->spec = spec;
    return true;
}
