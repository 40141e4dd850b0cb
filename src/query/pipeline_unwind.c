/* The $unwind stage: one output document per element of the array at a path (with
 * includeArrayIndex and preserveNullAndEmptyArrays), the path followed through
 * sub-documents only, as Document::getNestedField does. */
#include "query/pipeline_private.h"

#include "query/aggregation_value.h"
#include "query/value_format.h"

#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    PIPELINE_ERROR_UNWIND_SPEC = 15981,
    PIPELINE_ERROR_UNWIND_PATH_STRING = 28808,
    PIPELINE_ERROR_UNWIND_PRESERVE_BOOL = 28809,
    PIPELINE_ERROR_UNWIND_INDEX_STRING = 28810,
    PIPELINE_ERROR_UNWIND_UNKNOWN_OPTION = 28811,
    PIPELINE_ERROR_UNWIND_NO_PATH = 28812,
    PIPELINE_ERROR_UNWIND_PATH_DOLLAR = 28818,
    PIPELINE_ERROR_UNWIND_INDEX_DOLLAR = 28822,
};

/* ---- dotted paths inside documents (no traversal of arrays) ---- */

/* Document::getNestedField: follows sub-documents only; anything else is missing.
 * out_value borrows from document (valid while document is). */
static void document_get_path(const bson_t *document, const pipeline_field_path_t *path,
                              bson_value_t *out_value)
{
    aggregation_value_set_missing(out_value);
    bson_iter_t iter;
    if (!bson_iter_init(&iter, document)) {
        return;
    }
    for (size_t i = 0; i < path->length; i++) {
        if (!bson_iter_find_w_len(&iter, path->components[i], (int)strlen(path->components[i]))) {
            return;
        }
        if (i + 1 == path->length) {
            *out_value = *bson_iter_value(&iter);
            return;
        }
        bson_iter_t child;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &child)) {
            return;
        }
        iter = child;
    }
}

static void append_with_path(bson_t *out, const char *key, const pipeline_field_path_t *path,
                             size_t depth, const bson_value_t *existing, const bson_value_t *value);

/* Copies source into out with the field at path[depth..] set to value (missing removes
 * it), creating sub-documents as MutableDocument::setNestedField does. */
static void copy_with_path(const uint8_t *data, uint32_t length, const pipeline_field_path_t *path,
                           size_t depth, const bson_value_t *value, bson_t *out)
{
    const char *name = path->components[depth];
    bool found = false;
    bson_iter_t iter;
    if (data != NULL && bson_iter_init_from_data(&iter, data, length)) {
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            if (!found && strcmp(key, name) == 0) {
                found = true;
                append_with_path(out, key, path, depth, bson_iter_value(&iter), value);
            } else {
                bson_append_iter(out, key, -1, &iter);
            }
        }
    }
    if (!found) {
        append_with_path(out, name, path, depth, NULL, value);
    }
}

static void append_with_path(bson_t *out, const char *key, const pipeline_field_path_t *path,
                             size_t depth, const bson_value_t *existing, const bson_value_t *value)
{
    if (depth + 1 == path->length) {
        aggregation_value_append(out, key, -1, value);
        return;
    }
    bool is_document = existing != NULL && existing->value_type == BSON_TYPE_DOCUMENT;
    if (!is_document && aggregation_value_is_missing(value)) {
        if (existing != NULL) {
            bson_append_value(out, key, -1, existing); /* nothing to remove below a scalar */
        }
        return;
    }
    bson_t child;
    bson_append_document_begin(out, key, -1, &child);
    copy_with_path(is_document ? existing->value.v_doc.data : NULL,
                   is_document ? existing->value.v_doc.data_len : 0, path, depth + 1, value,
                   &child);
    bson_append_document_end(out, &child);
}

static void document_set_path(const bson_t *source, const pipeline_field_path_t *path,
                              const bson_value_t *value, bson_t *out)
{
    bson_init(out);
    copy_with_path(bson_get_data(source), source->len, path, 0, value, out);
}

/* ---- $unwind ---- */

typedef struct unwind_spec {
    pipeline_field_path_t path;
    pipeline_field_path_t index_path; /* length 0 when no includeArrayIndex */
    bool preserve_null_and_empty;
} unwind_spec_t;

typedef struct unwind_state {
    bson_t document; /* the input being unwound */
    bool has_document;
    bson_iter_t array; /* positioned before the next element */
    int64_t index;
} unwind_state_t;

static void unwind_spec_destroy(void *spec)
{
    unwind_spec_t *unwind = spec;
    pipeline_field_path_destroy(&unwind->path);
    pipeline_field_path_destroy(&unwind->index_path);
    bson_free(unwind);
}

static void unwind_state_destroy(void *state)
{
    unwind_state_t *unwind = state;
    if (unwind->has_document) {
        bson_destroy(&unwind->document);
    }
    bson_free(unwind);
}

/* Writes document, with the unwound field set to element when set_field (a missing
 * element removes it), and the index field set to index (a long, or null when
 * index < 0). */
static void unwind_output(const unwind_spec_t *unwind, const bson_t *document,
                          const bson_value_t *element, bool set_field, int64_t index,
                          bson_t *out_document)
{
    bson_t with_element;
    if (set_field) {
        document_set_path(document, &unwind->path, element, &with_element);
    } else {
        bson_copy_to(document, &with_element);
    }
    if (unwind->index_path.length == 0) {
        bson_steal(out_document, &with_element);
        return;
    }
    bson_value_t index_value;
    if (index < 0) {
        aggregation_value_set_null(&index_value);
    } else {
        aggregation_value_set_int64(&index_value, index);
    }
    document_set_path(&with_element, &unwind->index_path, &index_value, out_document);
    bson_destroy(&with_element);
}

static bool unwind_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                        bson_error_t *error)
{
    const unwind_spec_t *unwind = cursor->stage->spec;
    if (cursor->state == NULL) {
        cursor->state = BSON_ALIGNED_ALLOC0(unwind_state_t); /* holds a bson_t */
    }
    unwind_state_t *state = cursor->state;
    for (;;) {
        if (state->has_document) {
            if (bson_iter_next(&state->array)) {
                unwind_output(unwind, &state->document, bson_iter_value(&state->array), true,
                              state->index++, out_document);
                *out_end = false;
                return true;
            }
            bson_destroy(&state->document);
            state->has_document = false;
        }
        bson_t input;
        if (!pipeline_cursor_pull(cursor, &input, out_end, error)) {
            return false;
        }
        if (*out_end) {
            return true;
        }
        bson_value_t target;
        document_get_path(&input, &unwind->path, &target);
        if (target.value_type == BSON_TYPE_ARRAY) {
            bson_t view;
            aggregation_value_view_document(&target, &view);
            if (bson_count_keys(&view) == 0) {
                if (unwind->preserve_null_and_empty) {
                    bson_value_t missing;
                    aggregation_value_set_missing(&missing);
                    unwind_output(unwind, &input, &missing, true, -1, out_document);
                    bson_destroy(&input);
                    return true;
                }
                bson_destroy(&input);
                continue;
            }
            /* Keep the document; the iterator walks the array inside it. */
            bson_steal(&state->document, &input);
            state->has_document = true;
            state->index = 0;
            document_get_path(&state->document, &unwind->path, &target);
            bson_iter_init_from_data(&state->array, target.value.v_doc.data,
                                     target.value.v_doc.data_len);
            continue;
        }
        if (aggregation_value_is_nullish(&target) && !unwind->preserve_null_and_empty) {
            bson_destroy(&input);
            continue;
        }
        /* null/missing preserved, or a scalar treated as a one-element array: as is. */
        unwind_output(unwind, &input, &target, false, -1, out_document);
        bson_destroy(&input);
        return true;
    }
}

static const pipeline_stage_kind_t unwind_kind = {"$unwind", unwind_next, unwind_state_destroy,
                                                  unwind_spec_destroy};

static bool parse_unwind_path(const bson_value_t *path, unwind_spec_t *unwind, bson_error_t *error)
{
    if (path->value_type != BSON_TYPE_UTF8) {
        return tc_error_set(error, PIPELINE_ERROR_UNWIND_PATH_STRING,
                            "expected a string as the path for $unwind stage, got %s",
                            value_type_name(path->value_type));
    }
    const char *text = path->value.v_utf8.str;
    if (text[0] == '\0') {
        return tc_error_set(error, PIPELINE_ERROR_UNWIND_NO_PATH,
                            "no path specified to $unwind stage");
    }
    if (text[0] != '$' || text[1] == '\0') {
        return tc_error_set(error, PIPELINE_ERROR_UNWIND_PATH_DOLLAR,
                            "path option to $unwind stage should be prefixed with a '$': %s", text);
    }
    pipeline_field_path_destroy(&unwind->path);
    return pipeline_field_path_parse(text + 1, &unwind->path, error);
}

bool pipeline_unwind_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                             bson_error_t *error)
{
    unwind_spec_t *unwind = bson_malloc0(sizeof *unwind);
    bool ok = false;
    if (argument->value_type == BSON_TYPE_UTF8) {
        TC_CHECK(parse_unwind_path(argument, unwind, error));
    } else if (argument->value_type == BSON_TYPE_DOCUMENT) {
        bson_iter_t iter;
        bool has_path = false;
        bson_iter_init_from_data(&iter, argument->value.v_doc.data, argument->value.v_doc.data_len);
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            const bson_value_t *value = bson_iter_value(&iter);
            if (strcmp(key, "path") == 0) {
                TC_CHECK(parse_unwind_path(value, unwind, error));
                has_path = true;
            } else if (strcmp(key, "preserveNullAndEmptyArrays") == 0) {
                if (value->value_type != BSON_TYPE_BOOL) {
                    tc_error_set(error, PIPELINE_ERROR_UNWIND_PRESERVE_BOOL,
                                 "expected a boolean for the preserveNullAndEmptyArrays option to "
                                 "$unwind stage, got %s",
                                 value_type_name(value->value_type));
                    goto done;
                }
                unwind->preserve_null_and_empty = value->value.v_bool;
            } else if (strcmp(key, "includeArrayIndex") == 0) {
                if (value->value_type != BSON_TYPE_UTF8 || value->value.v_utf8.len == 0) {
                    tc_error_set(error, PIPELINE_ERROR_UNWIND_INDEX_STRING,
                                 "expected a non-empty string for the includeArrayIndex option to "
                                 "$unwind stage, got %s",
                                 value_type_name(value->value_type));
                    goto done;
                }
                if (!aggregation_value_is_field_name(value)) {
                    tc_error_set(error, PIPELINE_ERROR_UNWIND_INDEX_STRING,
                                 "the includeArrayIndex option to $unwind stage must be UTF-8 "
                                 "without a null byte");
                    goto done;
                }
                if (value->value.v_utf8.str[0] == '$') {
                    tc_error_set(error, PIPELINE_ERROR_UNWIND_INDEX_DOLLAR,
                                 "includeArrayIndex option to $unwind stage should not be prefixed "
                                 "with a '$': %s",
                                 value->value.v_utf8.str);
                    goto done;
                }
                pipeline_field_path_destroy(&unwind->index_path);
                TC_CHECK(
                    pipeline_field_path_parse(value->value.v_utf8.str, &unwind->index_path, error));
            } else {
                tc_error_set(error, PIPELINE_ERROR_UNWIND_UNKNOWN_OPTION,
                             "unrecognized option to $unwind stage: %s", key);
                goto done;
            }
        }
        if (!has_path) {
            tc_error_set(error, PIPELINE_ERROR_UNWIND_NO_PATH,
                         "no path specified to $unwind stage");
            goto done;
        }
    } else {
        tc_error_set(error, PIPELINE_ERROR_UNWIND_SPEC,
                     "expected either a string or an object as specification for $unwind stage, "
                     "got %s",
                     value_type_name(argument->value_type));
        goto done;
    }
    out_stage->kind = &unwind_kind;
    out_stage->spec = unwind;
    unwind = NULL;
    ok = true;
done:
    if (unwind != NULL) {
        unwind_spec_destroy(unwind);
    }
    return ok;
}
