/* mongod's rewrite of a read of a view into an aggregate: find
 * (query_request_helper::asAggregationCommand), count and distinct, each as
 * the stages that follow the view's own pipeline. Pure: BSON in, BSON out. */
#include "query/view_rewrite.h"

#include <string.h>

static void append_stage(bson_t *pipeline, uint32_t *count, const char *name, const bson_value_t *argument)
{
    char key[16];
    const char *key_string;
    bson_t stage;
    bson_uint32_to_string((*count)++, &key_string, key, sizeof key);
    bson_append_document_begin(pipeline, key_string, -1, &stage);
    bson_append_value(&stage, name, -1, argument);
    bson_append_document_end(pipeline, &stage);
}

/* Appends {name: <the command's field>} when the field is present and, for a
 * document, not empty (mongod leaves out an empty filter, sort or projection). */
static void append_stage_from_field(const bson_t *command, const char *field, const char *name,
                                    bson_t *pipeline, uint32_t *count)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, command, field)) {
        return;
    }
    const bson_value_t *value = bson_iter_value(&iter);
    if (value->value_type == BSON_TYPE_DOCUMENT && value->value.v_doc.data_len <= 5) {
        return;
    }
    if (BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) == 0) {
        return; /* skip: 0, limit: 0 */
    }
    append_stage(pipeline, count, name, value);
}

/* find's options without an aggregation counterpart: InvalidPipelineOperator
 * 168 on a view, as mongod answers. */
static const char *const find_options_refused_on_view[] = {
    "min", "max", "returnKey", "showRecordId", "tailable", "oplogReplay", "noCursorTimeout", "awaitData",
    "allowPartialResults", "readOnce", NULL,
};

/* Whether the option at iter asks for something: true, or a non-empty document. */
static bool option_is_set(bson_iter_t *iter)
{
    if (BSON_ITER_HOLDS_BOOL(iter)) {
        return bson_iter_bool(iter);
    }
    return !BSON_ITER_HOLDS_DOCUMENT(iter) || bson_iter_value(iter)->value.v_doc.data_len > 5;
}

static bool rewrite_find(const bson_t *command, bson_t *pipeline, uint32_t *count, bson_t *cursor,
                         bson_error_t *error)
{
    bson_iter_t iter;
    for (const char *const *option = find_options_refused_on_view; *option != NULL; option++) {
        if (bson_iter_init_find(&iter, command, *option) && option_is_set(&iter)) {
            return tc_error_set(error, TC_ERR_INVALID_PIPELINE_OPERATOR, "Option %s not supported in aggregation.",
                                *option);
        }
    }
    /* singleBatch has no aggregate counterpart, except with limit 1 (find_one). */
    if (bson_iter_init_find(&iter, command, "singleBatch") && bson_iter_as_bool(&iter) &&
        !(bson_iter_init_find(&iter, command, "limit") && bson_iter_as_int64(&iter) == 1)) {
        return tc_error_set(error, TC_ERR_INVALID_PIPELINE_OPERATOR, "Option singleBatch not supported in aggregation.");
    }
    append_stage_from_field(command, "filter", "$match", pipeline, count);
    append_stage_from_field(command, "sort", "$sort", pipeline, count);
    append_stage_from_field(command, "skip", "$skip", pipeline, count);
    append_stage_from_field(command, "limit", "$limit", pipeline, count);
    append_stage_from_field(command, "projection", "$project", pipeline, count);
    if (bson_iter_init_find(&iter, command, "batchSize")) {
        bson_append_iter(cursor, "batchSize", -1, &iter);
    }
    return true;
}

/* count: [$match, $skip, $limit, {$count: "count"}]. */
static void rewrite_count(const bson_t *command, bson_t *pipeline, uint32_t *count)
{
    append_stage_from_field(command, "query", "$match", pipeline, count);
    append_stage_from_field(command, "skip", "$skip", pipeline, count);
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, command, "limit") && BSON_ITER_HOLDS_NUMBER(&iter) &&
        bson_iter_as_int64(&iter) != 0) {
        /* count takes a negative limit as its absolute value */
        int64_t limit = bson_iter_as_int64(&iter);
        bson_value_t value = {.value_type = BSON_TYPE_INT64, .value.v_int64 = limit < 0 ? -limit : limit};
        append_stage(pipeline, count, "$limit", &value);
    }
    bson_value_t name = {.value_type = BSON_TYPE_UTF8, .value.v_utf8 = {.str = "count", .len = 5}};
    append_stage(pipeline, count, "$count", &name);
}

/* distinct: [$match, {$unwind: {path: "$key", preserveNullAndEmptyArrays:
 * true}}, {$group: {_id: null, distinct: {$addToSet: "$key"}}}]. */
static bool rewrite_distinct(const bson_t *command, bson_t *pipeline, uint32_t *count, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, command, "key") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "BSON field 'distinct.key' is missing but a required field");
    }
    char *path = bson_strdup_printf("$%s", bson_iter_utf8(&iter, NULL));
    append_stage_from_field(command, "query", "$match", pipeline, count);
    bson_t unwind = BSON_INITIALIZER, group = BSON_INITIALIZER, accumulator;
    BSON_APPEND_UTF8(&unwind, "path", path);
    BSON_APPEND_BOOL(&unwind, "preserveNullAndEmptyArrays", true);
    BSON_APPEND_NULL(&group, "_id");
    BSON_APPEND_DOCUMENT_BEGIN(&group, "distinct", &accumulator);
    BSON_APPEND_UTF8(&accumulator, "$addToSet", path);
    bson_append_document_end(&group, &accumulator);
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(&unwind);
    value.value.v_doc.data_len = unwind.len;
    append_stage(pipeline, count, "$unwind", &value);
    value.value.v_doc.data = (uint8_t *)bson_get_data(&group);
    value.value.v_doc.data_len = group.len;
    append_stage(pipeline, count, "$group", &value);
    bson_destroy(&unwind);
    bson_destroy(&group);
    bson_free(path);
    return true;
}

bool view_rewrite_read(const char *command_name, const bson_t *command, bson_t *out_pipeline, bson_t *out_cursor,
                       bson_error_t *error)
{
    uint32_t count = 0;
    if (strcmp(command_name, "find") == 0) {
        return rewrite_find(command, out_pipeline, &count, out_cursor, error);
    }
    if (strcmp(command_name, "count") == 0) {
        rewrite_count(command, out_pipeline, &count);
        return true;
    }
    if (strcmp(command_name, "distinct") == 0) {
        return rewrite_distinct(command, out_pipeline, &count, error);
    }
    return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW, "%s is not supported on a view", command_name);
}
