/* The pipeline engine: compiles the stage list, runs it as a chain of cursors each
 * pulling from the one before (the first from the store's source), and implements the
 * streaming stages $match, $limit, $skip and $replaceRoot/$replaceWith. The other
 * stages live in pipeline_projection.c, pipeline_group.c, pipeline_sort.c and
 * pipeline_unwind.c. */
#include "query/pipeline_private.h"

#include "query/aggregation_value.h"
#include "query/match.h"
#include "query/value_format.h"

#include <math.h>
#include <string.h>

/* mongod's numbered assertion codes (6.0) for malformed stages. */
enum {
    PIPELINE_ERROR_STAGE_ONE_FIELD = 40323,
    PIPELINE_ERROR_SOURCE_NOT_FIRST = 40602,
    PIPELINE_ERROR_MATCH_OBJECT = 15959,
    PIPELINE_ERROR_LIMIT_NUMBER = 15957,
    PIPELINE_ERROR_LIMIT_POSITIVE = 15958,
    PIPELINE_ERROR_LIMIT_INVALID = 5107201,
    PIPELINE_ERROR_SKIP_NUMBER = 15972,
    PIPELINE_ERROR_SKIP_INVALID = 5107200,
    PIPELINE_ERROR_REPLACE_ROOT_NOT_OBJECT = 40228,
    PIPELINE_ERROR_REPLACE_ROOT_SPEC = 40229,
    PIPELINE_ERROR_IDL_MISSING_FIELD = 40414,
};

struct pipeline {
    pipeline_stage_t *stages;
    size_t stage_count;
    pipeline_limits_t limits;
    bool has_context;             /* the command's $$NOW, else each run's start */
    expression_context_t context; /* variables points at the copy below */
    bson_t *variables;            /* the command's let values */
};

struct pipeline_run {
    const pipeline_t *pipeline;
    pipeline_source_fn source;
    void *source_context;
    expression_context_t expression_context;
    pipeline_cursor_t *cursors; /* one per stage, in order */
};

bool pipeline_error_add_stage_context(bson_error_t *error, const char *stage_name)
{
    if (error == NULL) {
        return false;
    }
    char *message = bson_strdup_printf("Invalid %s :: caused by :: %s", stage_name, error->message);
    bson_strncpy(error->message, message, sizeof error->message);
    bson_free(message);
    return false;
}

static char *describe_value(const bson_value_t *value)
{
    bson_string_t *text = bson_string_new(NULL);
    aggregation_value_describe(value, text);
    return bson_string_free(text, false);
}

/* ---- field paths ---- */

void pipeline_field_path_destroy(pipeline_field_path_t *path)
{
    for (size_t i = 0; i < path->length; i++) {
        bson_free(path->components[i]);
    }
    bson_free(path->components);
    path->components = NULL;
    path->length = 0;
}

bool pipeline_field_path_parse(const char *dotted, pipeline_field_path_t *out_path,
                               bson_error_t *error)
{
    out_path->components = NULL;
    out_path->length = 0;
    if (dotted[0] == '\0') {
        return tc_error_set(error, TC_ERR_FIELD_PATH_EMPTY,
                            "FieldPath cannot be constructed with empty string");
    }
    if (dotted[strlen(dotted) - 1] == '.') {
        return tc_error_set(error, TC_ERR_FIELD_PATH_TRAILING_DOT,
                            "FieldPath must not end with a '.'.");
    }
    const char *start = dotted;
    for (;;) {
        const char *dot = strchr(start, '.');
        size_t length = dot == NULL ? strlen(start) : (size_t)(dot - start);
        out_path->components =
            bson_realloc(out_path->components, (out_path->length + 1) * sizeof(char *));
        out_path->components[out_path->length++] = bson_strndup(start, length);
        if (length == 0) {
            pipeline_field_path_destroy(out_path);
            return tc_error_set(error, TC_ERR_FIELD_PATH_EMPTY_COMPONENT,
                                "FieldPath field names may not be empty strings.");
        }
        if (start[0] == '$') {
            pipeline_field_path_destroy(out_path);
            return tc_error_set(error, TC_ERR_FIELD_PATH_DOLLAR_PREFIX,
                                "FieldPath field names may not start with '$'. Consider using "
                                "$getField or $setField.");
        }
        if (dot == NULL) {
            return true;
        }
        start = dot + 1;
    }
}

/* ---- $match ---- */

typedef struct match_spec {
    bson_t filter;
    match_expression_t *matcher;
} match_spec_t;

static void match_spec_destroy(void *spec)
{
    match_spec_t *match = spec;
    match_destroy(match->matcher);
    bson_destroy(&match->filter);
    bson_free(match);
}

static bool match_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                       bson_error_t *error)
{
    const match_spec_t *match = cursor->stage->spec;
    for (;;) {
        if (!pipeline_cursor_pull(cursor, out_document, out_end, error)) {
            return false;
        }
        if (*out_end) {
            return true;
        }
        if (match_document(match->matcher, out_document)) {
            return true;
        }
        bson_destroy(out_document);
        if (match_failed(match->matcher, error)) {
            return false; /* its $expr failed on the document */
        }
    }
}

static const pipeline_stage_kind_t match_kind = {"$match", match_next, NULL, match_spec_destroy};

static bool compile_match(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                          bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, PIPELINE_ERROR_MATCH_OBJECT,
                            "the match filter must be an expression in an object");
    }
    /* bson_t asks for 128-byte alignment, which bson_malloc0 does not promise. */
    match_spec_t *match = BSON_ALIGNED_ALLOC0(match_spec_t);
    bson_t borrowed;
    bson_init_static(&borrowed, argument->value.v_doc.data, argument->value.v_doc.data_len);
    bson_copy_to(&borrowed, &match->filter);
    expression_context_t context;
    if (scope->context != NULL) {
        context = *scope->context;
    } else {
        expression_context_init(&context);
        context.variables = scope->variables;
    }
    match->matcher = match_compile_with_context(&match->filter, &context, error);
    if (match->matcher == NULL) {
        match_spec_destroy(match);
        return false;
    }
    out_stage->kind = &match_kind;
    out_stage->spec = match;
    return true;
}

/* ---- $limit and $skip ---- */

typedef struct count_spec {
    int64_t count;
} count_spec_t;

typedef struct count_state {
    int64_t seen;
} count_state_t;

static count_state_t *count_state(pipeline_cursor_t *cursor)
{
    if (cursor->state == NULL) {
        cursor->state = bson_malloc0(sizeof(count_state_t));
    }
    return cursor->state;
}

static bool limit_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                       bson_error_t *error)
{
    const count_spec_t *limit = cursor->stage->spec;
    count_state_t *state = count_state(cursor);
    if (state->seen >= limit->count) {
        *out_end = true; /* read no further input */
        return true;
    }
    if (!pipeline_cursor_pull(cursor, out_document, out_end, error)) {
        return false;
    }
    if (!*out_end) {
        state->seen++;
    }
    return true;
}

static bool skip_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                      bson_error_t *error)
{
    const count_spec_t *skip = cursor->stage->spec;
    count_state_t *state = count_state(cursor);
    while (state->seen < skip->count) {
        if (!pipeline_cursor_pull(cursor, out_document, out_end, error)) {
            return false;
        }
        if (*out_end) {
            return true;
        }
        bson_destroy(out_document);
        state->seen++;
    }
    return pipeline_cursor_pull(cursor, out_document, out_end, error);
}

static const pipeline_stage_kind_t limit_kind = {"$limit", limit_next, bson_free, bson_free};
static const pipeline_stage_kind_t skip_kind = {"$skip", skip_next, bson_free, bson_free};

/* BSONElement::parseIntegerElementToNonNegativeLong, after a number check. */
static bool parse_count(const char *stage_name, const bson_value_t *argument, int32_t number_code,
                        const char *number_message, int32_t invalid_code, int64_t *out_count,
                        bson_error_t *error)
{
    if (!aggregation_value_is_number(argument)) {
        return tc_error_set(error, number_code, "%s", number_message);
    }
    char *text = describe_value(argument);
    bool ok = false;
    double number = aggregation_value_as_double(argument);
    if (argument->value_type == BSON_TYPE_DOUBLE || argument->value_type == BSON_TYPE_DECIMAL128) {
        if (isnan(number)) {
            tc_error_set(error, invalid_code,
                         "invalid argument to %s stage: Expected an integer, but found NaN in: "
                         "%s: %s",
                         stage_name, stage_name, text);
            goto done;
        }
        if (number >= 9223372036854775808.0 || number < -9223372036854775808.0) {
            tc_error_set(error, invalid_code,
                         "invalid argument to %s stage: Cannot represent as a 64-bit integer: "
                         "%s: %s",
                         stage_name, stage_name, text);
            goto done;
        }
        if (number != trunc(number)) {
            tc_error_set(error, invalid_code,
                         "invalid argument to %s stage: Expected an integer: %s: %s", stage_name,
                         stage_name, text);
            goto done;
        }
    }
    *out_count = aggregation_value_as_int64(argument);
    if (*out_count < 0) {
        tc_error_set(error, invalid_code,
                     "invalid argument to %s stage: Expected a non-negative number in: %s: %s",
                     stage_name, stage_name, text);
        goto done;
    }
    ok = true;
done:
    bson_free(text);
    return ok;
}

static bool compile_limit(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                          bson_error_t *error)
{
    int64_t count;
    if (!parse_count("$limit", argument, PIPELINE_ERROR_LIMIT_NUMBER,
                     "the limit must be specified as a number", PIPELINE_ERROR_LIMIT_INVALID,
                     &count, error)) {
        return false;
    }
    if (count == 0) {
        return tc_error_set(error, PIPELINE_ERROR_LIMIT_POSITIVE, "the limit must be positive");
    }
    count_spec_t *limit = bson_malloc0(sizeof *limit);
    limit->count = count;
    out_stage->kind = &limit_kind;
    out_stage->spec = limit;
    return true;
}

static bool compile_skip(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                         bson_error_t *error)
{
    int64_t count;
    if (!parse_count("$skip", argument, PIPELINE_ERROR_SKIP_NUMBER,
                     "Argument to $skip must be a number", PIPELINE_ERROR_SKIP_INVALID, &count,
                     error)) {
        return false;
    }
    count_spec_t *skip = bson_malloc0(sizeof *skip);
    skip->count = count;
    out_stage->kind = &skip_kind;
    out_stage->spec = skip;
    return true;
}

/* ---- $replaceRoot and $replaceWith ---- */

typedef struct replace_root_spec {
    expression_t *new_root;
    const char *what; /* names the expression in the error for a non-object result */
} replace_root_spec_t;

static void replace_root_spec_destroy(void *spec)
{
    replace_root_spec_t *replace = spec;
    expression_destroy(replace->new_root);
    bson_free(replace);
}

static bool replace_root_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                              bson_error_t *error)
{
    const replace_root_spec_t *replace = cursor->stage->spec;
    bson_t input;
    if (!pipeline_cursor_pull(cursor, &input, out_end, error)) {
        return false;
    }
    if (*out_end) {
        return true;
    }
    bson_value_t root;
    bool ok =
        expression_evaluate(replace->new_root, &input, cursor->expression_context, &root, error);
    if (ok && root.value_type != BSON_TYPE_DOCUMENT) {
        char *value_text = describe_value(&root);
        char *input_text = aggregation_document_describe(&input);
        tc_error_set(error, PIPELINE_ERROR_REPLACE_ROOT_NOT_OBJECT,
                     "%s must evaluate to an object, but resulting value was: %s. Type of "
                     "resulting value: '%s'. Input document: %s",
                     replace->what, value_text, value_type_name(root.value_type),
                     input_text);
        bson_free(value_text);
        bson_free(input_text);
        ok = false;
    }
    if (ok) {
        bson_t view;
        aggregation_value_view_document(&root, &view);
        bson_copy_to(&view, out_document);
    }
    bson_value_destroy(&root);
    bson_destroy(&input);
    return ok;
}

static const pipeline_stage_kind_t replace_root_kind = {"$replaceRoot", replace_root_next, NULL,
                                                        replace_root_spec_destroy};

static bool compile_replace_with_expression(const bson_value_t *expression_spec, const char *what,
                                            const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                                            bson_error_t *error)
{
    expression_t *new_root = expression_compile_with_variables(expression_spec, scope->variables, error);
    if (new_root == NULL) {
        return false;
    }
    replace_root_spec_t *replace = bson_malloc0(sizeof *replace);
    replace->new_root = new_root;
    replace->what = what;
    out_stage->kind = &replace_root_kind;
    out_stage->spec = replace;
    return true;
}

static bool compile_replace_root(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                                 bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, PIPELINE_ERROR_REPLACE_ROOT_SPEC,
                            "expected an object as specification for $replaceRoot stage, got %s",
                            value_type_name(argument->value_type));
    }
    bson_iter_t iter;
    bson_iter_t new_root;
    bool has_new_root = false;
    bson_iter_init_from_data(&iter, argument->value.v_doc.data, argument->value.v_doc.data_len);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "newRoot") == 0) {
            new_root = iter;
            has_new_root = true;
        } else {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD,
                                "BSON field '$replaceRoot.%s' is an unknown field.",
                                bson_iter_key(&iter));
        }
    }
    if (!has_new_root) {
        return tc_error_set(error, PIPELINE_ERROR_IDL_MISSING_FIELD,
                            "BSON field '$replaceRoot.newRoot' is missing but a required field");
    }
    return compile_replace_with_expression(bson_iter_value(&new_root), "'newRoot' expression", scope,
                                           out_stage, error);
}

static bool compile_replace_with(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                                 bson_error_t *error)
{
    return compile_replace_with_expression(argument, "'replacement document'", scope, out_stage, error);
}

/* ---- the stage list ---- */

static bool compile_project(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                            bson_error_t *error)
{
    return pipeline_projection_compile("$project", argument, scope, out_stage, error);
}

static bool compile_add_fields(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                               bson_error_t *error)
{
    return pipeline_projection_compile("$addFields", argument, scope, out_stage, error);
}

static bool compile_set(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                        bson_error_t *error)
{
    return pipeline_projection_compile("$set", argument, scope, out_stage, error);
}

static bool compile_unset(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                          bson_error_t *error)
{
    return pipeline_projection_compile("$unset", argument, scope, out_stage, error);
}

static const struct {
    const char *name;
    bool (*compile)(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage, bson_error_t *error);
} stage_compilers[] = {
    {"$match", compile_match},
    {"$project", compile_project},
    {"$addFields", compile_add_fields},
    {"$set", compile_set},
    {"$unset", compile_unset},
    {"$sort", pipeline_sort_compile},
    {"$limit", compile_limit},
    {"$skip", compile_skip},
    {"$group", pipeline_group_compile},
    {"$count", pipeline_count_compile},
    {"$unwind", pipeline_unwind_compile},
    {"$replaceRoot", compile_replace_root},
    {"$replaceWith", compile_replace_with},
};

static bool compile_stage(const bson_iter_t *element, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                          bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "Each element of the 'pipeline' array must be an object");
    }
    bson_iter_t stage;
    bson_iter_recurse(element, &stage);
    bson_iter_t counter = stage;
    int field_count = 0;
    while (bson_iter_next(&counter)) {
        field_count++;
    }
    if (field_count != 1 || !bson_iter_next(&stage)) {
        return tc_error_set(
            error, PIPELINE_ERROR_STAGE_ONE_FIELD,
            "A pipeline stage specification object must contain exactly one field.");
    }
    const char *name = bson_iter_key(&stage);
    for (size_t i = 0; i < sizeof stage_compilers / sizeof stage_compilers[0]; i++) {
        if (strcmp(stage_compilers[i].name, name) == 0) {
            return stage_compilers[i].compile(bson_iter_value(&stage), scope, out_stage, error);
        }
    }
    if (strcmp(name, "$changeStream") == 0 || strcmp(name, "$currentOp") == 0 ||
        strcmp(name, "$listLocalSessions") == 0) {
        return tc_error_set(error, PIPELINE_ERROR_SOURCE_NOT_FIRST, "%s is only valid as the first stage in a pipeline.",
                            name);
    }
    return tc_error_set(error, TC_ERR_UNRECOGNIZED_PIPELINE_STAGE,
                        "Unrecognized pipeline stage name: '%s'", name);
}

static int64_t stage_count_value(const pipeline_stage_t *stage)
{
    return ((const count_spec_t *)stage->spec)->count;
}

/* A $sort directly followed by $limit, or by $skip then $limit, need keep only skip +
 * limit documents (mongod coalesces these into a top-k sort). */
static void bound_sorts(pipeline_t *pipeline)
{
    for (size_t i = 0; i + 1 < pipeline->stage_count; i++) {
        if (!pipeline_stage_is_sort(&pipeline->stages[i])) {
            continue;
        }
        const pipeline_stage_t *next = &pipeline->stages[i + 1];
        if (next->kind == &limit_kind) {
            pipeline_sort_set_keep(&pipeline->stages[i], stage_count_value(next));
        } else if (next->kind == &skip_kind && i + 2 < pipeline->stage_count &&
                   pipeline->stages[i + 2].kind == &limit_kind) {
            int64_t keep;
            if (!__builtin_add_overflow(stage_count_value(next),
                                        stage_count_value(&pipeline->stages[i + 2]), &keep)) {
                pipeline_sort_set_keep(&pipeline->stages[i], keep);
            }
        }
    }
}

pipeline_t *pipeline_compile(const bson_t *stages, const pipeline_options_t *options,
                             bson_error_t *error)
{
    pipeline_t *pipeline = bson_malloc0(sizeof *pipeline);
    pipeline->limits.allow_disk_use = options != NULL && options->allow_disk_use;
    pipeline->limits.memory_limit_bytes = options != NULL && options->memory_limit_bytes > 0
                                              ? options->memory_limit_bytes
                                              : PIPELINE_DEFAULT_MEMORY_LIMIT_BYTES;
    pipeline->variables = bson_new();
    if (options != NULL && options->expression_context != NULL) {
        pipeline->has_context = true;
        pipeline->context = *options->expression_context;
        /* A cursor's pipeline outlives the command that lent the collation. */
        collation_retain(pipeline->context.collation);
        if (options->expression_context->variables != NULL) {
            bson_concat(pipeline->variables, options->expression_context->variables);
        }
    }
    pipeline->context.variables = pipeline->variables;
    pipeline_scope_t scope = {.variables = pipeline->variables,
                              .context = pipeline->has_context ? &pipeline->context : NULL};
    uint32_t count = bson_count_keys(stages);
    pipeline->stages = bson_malloc0((count + 1) * sizeof *pipeline->stages);
    bson_iter_t iter;
    if (!bson_iter_init(&iter, stages)) {
        tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in the pipeline");
        goto fail;
    }
    while (bson_iter_next(&iter) && pipeline->stage_count < count) {
        if (!compile_stage(&iter, &scope, &pipeline->stages[pipeline->stage_count], error)) {
            goto fail;
        }
        pipeline->stage_count++;
    }
    bound_sorts(pipeline);
    return pipeline;
fail:
    pipeline_destroy(pipeline);
    return NULL;
}

void pipeline_destroy(pipeline_t *pipeline)
{
    if (pipeline == NULL) {
        return;
    }
    for (size_t i = 0; i < pipeline->stage_count; i++) {
        pipeline->stages[i].kind->destroy_spec(pipeline->stages[i].spec);
    }
    bson_free(pipeline->stages);
    bson_destroy(pipeline->variables);
    collation_release(pipeline->context.collation);
    bson_free(pipeline);
}

const bson_t *pipeline_leading_match(const pipeline_t *pipeline)
{
    if (pipeline->stage_count == 0 || pipeline->stages[0].kind != &match_kind) {
        return NULL;
    }
    return &((const match_spec_t *)pipeline->stages[0].spec)->filter;
}

/* Index of the first stage after the leading $match and $sort. */
static size_t after_leading_match_and_sort(const pipeline_t *pipeline)
{
    size_t i = 0;
    if (i < pipeline->stage_count && pipeline->stages[i].kind == &match_kind) {
        i++;
    }
    if (i < pipeline->stage_count && pipeline_stage_is_sort(&pipeline->stages[i])) {
        i++;
    }
    return i;
}

const bson_t *pipeline_leading_sort(const pipeline_t *pipeline)
{
    size_t i = pipeline->stage_count > 0 && pipeline->stages[0].kind == &match_kind ? 1 : 0;
    if (i >= pipeline->stage_count || !pipeline_stage_is_sort(&pipeline->stages[i])) {
        return NULL;
    }
    return pipeline_sort_specification(&pipeline->stages[i]);
}

int64_t pipeline_leading_limit(const pipeline_t *pipeline)
{
    size_t i = after_leading_match_and_sort(pipeline);
    int64_t skipped = 0;
    while (i < pipeline->stage_count && pipeline->stages[i].kind == &skip_kind) {
        if (__builtin_add_overflow(skipped, stage_count_value(&pipeline->stages[i]), &skipped)) {
            return -1;
        }
        i++;
    }
    int64_t needed;
    if (i < pipeline->stage_count && pipeline->stages[i].kind == &limit_kind &&
        !__builtin_add_overflow(skipped, stage_count_value(&pipeline->stages[i]), &needed)) {
        return needed;
    }
    return -1;
}

/* ---- runs ---- */

pipeline_run_t *pipeline_start(const pipeline_t *pipeline, pipeline_source_fn source, void *context)
{
    pipeline_run_t *run = bson_malloc0(sizeof *run);
    run->pipeline = pipeline;
    run->source = source;
    run->source_context = context;
    if (pipeline->has_context) {
        run->expression_context = pipeline->context;
    } else {
        expression_context_init(&run->expression_context);
        run->expression_context.variables = pipeline->variables;
    }
    run->cursors = bson_malloc0((pipeline->stage_count + 1) * sizeof *run->cursors);
    for (size_t i = 0; i < pipeline->stage_count; i++) {
        pipeline_cursor_t *cursor = &run->cursors[i];
        cursor->stage = &pipeline->stages[i];
        cursor->input = i == 0 ? NULL : &run->cursors[i - 1];
        cursor->run = run;
        cursor->expression_context = &run->expression_context;
        cursor->limits = &pipeline->limits;
    }
    return run;
}

static bool pull_source(pipeline_run_t *run, bson_t *out_document, bool *out_end,
                        bson_error_t *error)
{
    const bson_t *document = NULL;
    if (!run->source(run->source_context, &document, error)) {
        return false;
    }
    *out_end = document == NULL;
    if (document != NULL) {
        bson_copy_to(document, out_document);
    }
    return true;
}

bool pipeline_cursor_pull(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                          bson_error_t *error)
{
    *out_end = false;
    if (cursor->input == NULL) {
        return pull_source(cursor->run, out_document, out_end, error);
    }
    pipeline_cursor_t *input = cursor->input;
    *out_end = false;
    return input->stage->kind->next(input, out_document, out_end, error);
}

bool pipeline_next(pipeline_run_t *run, bson_t *out_document, bool *out_end, bson_error_t *error)
{
    *out_end = false;
    size_t count = run->pipeline->stage_count;
    if (count == 0) {
        return pull_source(run, out_document, out_end, error);
    }
    pipeline_cursor_t *last = &run->cursors[count - 1];
    return last->stage->kind->next(last, out_document, out_end, error);
}

void pipeline_run_destroy(pipeline_run_t *run)
{
    if (run == NULL) {
        return;
    }
    for (size_t i = 0; i < run->pipeline->stage_count; i++) {
        pipeline_cursor_t *cursor = &run->cursors[i];
        if (cursor->state != NULL && cursor->stage->kind->destroy_state != NULL) {
            cursor->stage->kind->destroy_state(cursor->state);
        }
    }
    bson_free(run->cursors);
    bson_free(run);
}

/* The source of pipeline_transform_one: its document, once. */
typedef struct one_document {
    const bson_t *document;
    bool given;
} one_document_t;

static bool pull_one(void *context, const bson_t **out_document, bson_error_t *error)
{
    one_document_t *source = context;
    (void)error;
    *out_document = source->given ? NULL : source->document;
    source->given = true;
    return true;
}

bool pipeline_transform_one(const pipeline_t *pipeline, const bson_t *document, bson_t *out_document, bool *out_kept,
                            bson_error_t *error)
{
    one_document_t source = {.document = document};
    pipeline_run_t *run = pipeline_start(pipeline, pull_one, &source);
    bool end = true;
    bool ok = pipeline_next(run, out_document, &end, error);
    pipeline_run_destroy(run);
    *out_kept = ok && !end;
    return ok;
}
