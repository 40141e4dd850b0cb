/* $project (inclusion, exclusion, computed fields, nested), $addFields/$set and $unset,
 * as one projection tree per stage. Inclusion keeps the listed fields in input order
 * (and _id unless excluded), then sets computed fields in specification order, replacing
 * a field in place or appending it; $addFields keeps everything and sets; exclusion and
 * $unset drop the listed fields. Arrays on a path apply the sub-projection to each
 * element, as MongoDB does. */
#include "query/pipeline_private.h"

#include "query/aggregation_value.h"
#include "query/value_format.h"

#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    PROJECTION_ERROR_PROJECT_OBJECT = 15969,
    PROJECTION_ERROR_ADD_FIELDS_OBJECT = 40272,
    PROJECTION_ERROR_EMPTY = 51272,
    PROJECTION_ERROR_EMPTY_SUB_PROJECTION = 51270,
    PROJECTION_ERROR_EXPRESSION_IN_EXCLUSION = 31252,
    PROJECTION_ERROR_EXCLUSION_IN_INCLUSION = 31253,
    PROJECTION_ERROR_INCLUSION_IN_EXCLUSION = 31254,
    PROJECTION_ERROR_PATH_COLLISION = 31250,
    PROJECTION_ERROR_PATH_COLLISION_PREFIX = 31249,
    PROJECTION_ERROR_UNSET_TYPE = 31002,
    PROJECTION_ERROR_UNSET_EMPTY = 31119,
    PROJECTION_ERROR_UNSET_ELEMENT = 31120,
};

typedef enum projection_entry_kind {
    PROJECTION_INCLUDE,
    PROJECTION_EXCLUDE,
    PROJECTION_COMPUTED,
    PROJECTION_CHILD,
} projection_entry_kind_t;

typedef struct projection_node projection_node_t;

typedef struct projection_entry {
    char *name;
    projection_entry_kind_t kind;
    expression_t *expression; /* COMPUTED */
    projection_node_t *child; /* CHILD */
} projection_entry_t;

struct projection_node {
    projection_entry_t *entries; /* in specification order */
    size_t count;
    bool has_computed; /* here or below */
};

typedef enum projection_mode {
    PROJECTION_MODE_UNDECIDED,
    PROJECTION_MODE_INCLUSION,
    PROJECTION_MODE_EXCLUSION,
    PROJECTION_MODE_ADD_FIELDS,
} projection_mode_t;

typedef struct projection_spec {
    projection_mode_t mode;
    projection_node_t root;
    bool id_excluded; /* _id: 0 or false at the top */
} projection_spec_t;

static void node_clear(projection_node_t *node)
{
    for (size_t i = 0; i < node->count; i++) {
        bson_free(node->entries[i].name);
        expression_destroy(node->entries[i].expression);
        if (node->entries[i].child != NULL) {
            node_clear(node->entries[i].child);
            bson_free(node->entries[i].child);
        }
    }
    bson_free(node->entries);
    node->entries = NULL;
    node->count = 0;
}

static void projection_spec_destroy(void *spec)
{
    projection_spec_t *projection = spec;
    node_clear(&projection->root);
    bson_free(projection);
}

static projection_entry_t *node_find(const projection_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->count; i++) {
        if (strcmp(node->entries[i].name, name) == 0) {
            return &node->entries[i];
        }
    }
    return NULL;
}

static projection_entry_t *node_append(projection_node_t *node, const char *name,
                                       projection_entry_kind_t kind)
{
    node->entries = bson_realloc(node->entries, (node->count + 1) * sizeof *node->entries);
    projection_entry_t *entry = &node->entries[node->count++];
    memset(entry, 0, sizeof *entry);
    entry->name = bson_strdup(name);
    entry->kind = kind;
    if (kind == PROJECTION_CHILD) {
        entry->child = bson_malloc0(sizeof *entry->child);
    }
    return entry;
}

static bool mark_computed(projection_node_t *node)
{
    node->has_computed = false;
    for (size_t i = 0; i < node->count; i++) {
        if (node->entries[i].kind == PROJECTION_COMPUTED ||
            (node->entries[i].kind == PROJECTION_CHILD && mark_computed(node->entries[i].child))) {
            node->has_computed = true;
        }
    }
    return node->has_computed;
}

/* ---- parsing ---- */

typedef struct projection_parser {
    projection_spec_t *spec;
    const char *stage_name;
    const bson_t *variables; /* the command's let */
} projection_parser_t;

/* The node at components[0 .. length-2] below node, created as needed; NULL with a path
 * collision when a leaf already sits on the way. */
static projection_node_t *descend(projection_node_t *node, const pipeline_field_path_t *components,
                                  const char *full_path, bson_error_t *error)
{
    for (size_t i = 0; i + 1 < components->length; i++) {
        projection_entry_t *entry = node_find(node, components->components[i]);
        if (entry == NULL) {
            entry = node_append(node, components->components[i], PROJECTION_CHILD);
        } else if (entry->kind != PROJECTION_CHILD) {
            bson_string_t *remaining = bson_string_new(NULL);
            for (size_t j = i + 1; j < components->length; j++) {
                bson_string_append_printf(remaining, "%s%s", j > i + 1 ? "." : "",
                                          components->components[j]);
            }
            tc_error_set(error, PROJECTION_ERROR_PATH_COLLISION,
                         "Path collision at %s remaining portion %s", full_path, remaining->str);
            bson_string_free(remaining, true);
            return NULL;
        }
        node = entry->child;
    }
    return node;
}

/* Adds the leaf entry for name, refusing one that already exists. */
static projection_entry_t *add_leaf(projection_node_t *node, const char *name,
                                    projection_entry_kind_t kind, const char *full_path,
                                    bson_error_t *error)
{
    projection_entry_t *existing = node_find(node, name);
    if (existing != NULL) {
        tc_error_set(error,
                     existing->kind == PROJECTION_CHILD ? PROJECTION_ERROR_PATH_COLLISION_PREFIX
                                                        : PROJECTION_ERROR_PATH_COLLISION,
                     "Path collision at %s", full_path);
        return NULL;
    }
    return node_append(node, name, kind);
}

/* Records an inclusion, exclusion or computed field in a $project, enforcing that one
 * projection does not mix inclusion and exclusion. */
static bool decide_mode(projection_parser_t *parser, projection_entry_kind_t kind,
                        const char *full_path, bson_error_t *error)
{
    projection_mode_t mode = parser->spec->mode;
    if (kind == PROJECTION_EXCLUDE) {
        if (mode == PROJECTION_MODE_INCLUSION) {
            return tc_error_set(error, PROJECTION_ERROR_EXCLUSION_IN_INCLUSION,
                                "Cannot do exclusion on field %s in inclusion projection",
                                full_path);
        }
        parser->spec->mode = PROJECTION_MODE_EXCLUSION;
        return true;
    }
    if (mode == PROJECTION_MODE_EXCLUSION) {
        if (kind == PROJECTION_COMPUTED) {
            return tc_error_set(error, PROJECTION_ERROR_EXPRESSION_IN_EXCLUSION,
                                "Cannot use expression other than $meta in exclusion projection");
        }
        return tc_error_set(error, PROJECTION_ERROR_INCLUSION_IN_EXCLUSION,
                            "Cannot do inclusion on field %s in exclusion projection", full_path);
    }
    parser->spec->mode = PROJECTION_MODE_INCLUSION;
    return true;
}

static bool is_sub_projection(const bson_value_t *value)
{
    if (value->value_type != BSON_TYPE_DOCUMENT) {
        return false;
    }
    bson_iter_t iter;
    return bson_iter_init_from_data(&iter, value->value.v_doc.data, value->value.v_doc.data_len) &&
           bson_iter_next(&iter) && bson_iter_key(&iter)[0] != '$';
}

static bool parse_object(projection_parser_t *parser, projection_node_t *node,
                         const bson_value_t *object, const char *prefix, bson_error_t *error);

/* One field of a $project / $addFields specification. */
static bool parse_field(projection_parser_t *parser, projection_node_t *node, const char *key,
                        const bson_value_t *value, const char *prefix, bson_error_t *error)
{
    bool add_fields = parser->spec->mode == PROJECTION_MODE_ADD_FIELDS;
    char *full_path = bson_strdup_printf("%s%s", prefix, key);
    pipeline_field_path_t components;
    bool ok = false;
    TC_CHECK(pipeline_field_path_parse(key, &components, error));
    projection_node_t *parent = descend(node, &components, full_path, error);
    TC_CHECK(parent != NULL);
    const char *leaf = components.components[components.length - 1];
    bool is_top_id = prefix[0] == '\0' && strcmp(key, "_id") == 0;

    if (!add_fields &&
        (value->value_type == BSON_TYPE_BOOL || aggregation_value_is_number(value))) {
        bool include = aggregation_value_truthy(value);
        projection_entry_kind_t kind = include ? PROJECTION_INCLUDE : PROJECTION_EXCLUDE;
        if (is_top_id) {
            parser->spec->id_excluded = !include; /* _id never decides the projection type */
        } else {
            TC_CHECK(decide_mode(parser, kind, full_path, error));
        }
        TC_CHECK(add_leaf(parent, leaf, kind, full_path, error) != NULL);
    } else if (is_sub_projection(value)) {
        projection_entry_t *entry = node_find(parent, leaf);
        if (entry == NULL) {
            entry = node_append(parent, leaf, PROJECTION_CHILD);
        } else if (entry->kind != PROJECTION_CHILD) {
            tc_error_set(error, PROJECTION_ERROR_PATH_COLLISION, "Path collision at %s", full_path);
            goto done;
        }
        char *child_prefix = bson_strdup_printf("%s.", full_path);
        ok = parse_object(parser, entry->child, value, child_prefix, error);
        bson_free(child_prefix);
        goto done;
    } else {
        if (!add_fields && value->value_type == BSON_TYPE_DOCUMENT &&
            value->value.v_doc.data_len <= 5) {
            tc_error_set(error, PROJECTION_ERROR_EMPTY_SUB_PROJECTION,
                         "An empty sub-projection is not a valid value. Found empty object at "
                         "path %s",
                         full_path);
            goto done;
        }
        if (!add_fields) {
            TC_CHECK(decide_mode(parser, PROJECTION_COMPUTED, full_path, error));
        }
        expression_t *expression = expression_compile_with_variables(value, parser->variables, error);
        TC_CHECK(expression != NULL);
        projection_entry_t *entry = add_leaf(parent, leaf, PROJECTION_COMPUTED, full_path, error);
        if (entry == NULL) {
            expression_destroy(expression);
            goto done;
        }
        entry->expression = expression;
    }
    ok = true;
done:
    pipeline_field_path_destroy(&components);
    bson_free(full_path);
    return ok;
}

static bool parse_object(projection_parser_t *parser, projection_node_t *node,
                         const bson_value_t *object, const char *prefix, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, object->value.v_doc.data, object->value.v_doc.data_len)) {
        return tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in %s", parser->stage_name);
    }
    while (bson_iter_next(&iter)) {
        if (!parse_field(parser, node, bson_iter_key(&iter), bson_iter_value(&iter), prefix,
                         error)) {
            return false;
        }
    }
    return true;
}

/* $unset: a path or an array of paths, each excluded. */
static bool parse_unset(projection_spec_t *spec, const bson_value_t *argument, bson_error_t *error)
{
    bson_t paths = BSON_INITIALIZER;
    bool ok = false;
    if (argument->value_type == BSON_TYPE_UTF8) {
        bson_append_value(&paths, "0", 1, argument);
    } else if (argument->value_type == BSON_TYPE_ARRAY) {
        bson_t view;
        aggregation_value_view_document(argument, &view);
        bson_concat(&paths, &view);
        if (bson_count_keys(&paths) == 0) {
            tc_error_set(error, PROJECTION_ERROR_UNSET_EMPTY,
                         "$unset specification must be a string or an array with at least one "
                         "field");
            goto done;
        }
    } else {
        tc_error_set(error, PROJECTION_ERROR_UNSET_TYPE,
                     "$unset specification must be a string or an array");
        goto done;
    }
    spec->mode = PROJECTION_MODE_EXCLUSION;
    bson_iter_t iter;
    bson_iter_init(&iter, &paths);
    while (bson_iter_next(&iter)) {
        if (!BSON_ITER_HOLDS_UTF8(&iter)) {
            tc_error_set(error, PROJECTION_ERROR_UNSET_ELEMENT,
                         "$unset specification must be a string or an array containing only "
                         "string values");
            goto done;
        }
        const char *key = bson_iter_utf8(&iter, NULL);
        pipeline_field_path_t components;
        bool parsed = pipeline_field_path_parse(key, &components, error);
        projection_node_t *parent = parsed ? descend(&spec->root, &components, key, error) : NULL;
        bool added =
            parent != NULL && add_leaf(parent, components.components[components.length - 1],
                                       PROJECTION_EXCLUDE, key, error) != NULL;
        pipeline_field_path_destroy(&components);
        TC_CHECK(added);
    }
    ok = true;
done:
    bson_destroy(&paths);
    return ok;
}

/* ---- applying ---- */

typedef struct field {
    char *name;
    bson_value_t value; /* owned; missing is left out of the output */
} field_t;

typedef struct field_list {
    field_t *items;
    size_t count;
} field_list_t;

static void fields_destroy(field_list_t *fields)
{
    for (size_t i = 0; i < fields->count; i++) {
        bson_free(fields->items[i].name);
        bson_value_destroy(&fields->items[i].value);
    }
    bson_free(fields->items);
}

/* Appends name with value (taking ownership of value). */
static void fields_add(field_list_t *fields, const char *name, bson_value_t *value)
{
    fields->items = bson_realloc(fields->items, (fields->count + 1) * sizeof *fields->items);
    fields->items[fields->count].name = bson_strdup(name);
    fields->items[fields->count].value = *value;
    fields->count++;
}

static field_t *fields_find(field_list_t *fields, const char *name)
{
    for (size_t i = 0; i < fields->count; i++) {
        if (strcmp(fields->items[i].name, name) == 0) {
            return &fields->items[i];
        }
    }
    return NULL;
}

/* MutableDocument::setField: replaces in place, or appends (takes ownership of value). */
static void fields_set(field_list_t *fields, const char *name, bson_value_t *value)
{
    field_t *existing = fields_find(fields, name);
    if (existing != NULL) {
        bson_value_destroy(&existing->value);
        existing->value = *value;
    } else {
        fields_add(fields, name, value);
    }
}

static void fields_from_document(const uint8_t *data, uint32_t length, field_list_t *out)
{
    bson_iter_t iter;
    if (bson_iter_init_from_data(&iter, data, length)) {
        while (bson_iter_next(&iter)) {
            bson_value_t copy;
            bson_value_copy(bson_iter_value(&iter), &copy);
            fields_add(out, bson_iter_key(&iter), &copy);
        }
    }
}

/* Consumes fields into an owned document value. */
static void fields_take_document(field_list_t *fields, bson_value_t *out_value)
{
    bson_t document = BSON_INITIALIZER;
    for (size_t i = 0; i < fields->count; i++) {
        aggregation_value_append(&document, fields->items[i].name, -1, &fields->items[i].value);
    }
    fields_destroy(fields);
    aggregation_value_take_document(out_value, &document, BSON_TYPE_DOCUMENT);
}

static void append_array_element(bson_t *array, uint32_t *index, const bson_value_t *value)
{
    char key[16];
    const char *key_text;
    size_t key_length = bson_uint32_to_string((*index)++, &key_text, key, sizeof key);
    bson_append_value(array, key_text, (int)key_length, value);
}

static void include_value(const projection_node_t *node, const bson_value_t *value,
                          bson_value_t *out_value);

/* Inclusion, first phase: the included fields of a document, in input order. */
static void include_document(const projection_node_t *node, const uint8_t *data, uint32_t length,
                             bool top, bool id_excluded, field_list_t *out)
{
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, data, length)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        const projection_entry_t *entry = node_find(node, key);
        bson_value_t value;
        if (entry == NULL) {
            if (top && !id_excluded && strcmp(key, "_id") == 0) {
                bson_value_copy(bson_iter_value(&iter), &value);
                fields_add(out, key, &value);
            }
            continue;
        }
        if (entry->kind == PROJECTION_INCLUDE) {
            bson_value_copy(bson_iter_value(&iter), &value);
            fields_add(out, key, &value);
        } else if (entry->kind == PROJECTION_CHILD) {
            /* Added even when missing: the slot keeps the field's input position for a
             * computed value set there later (MutableDocument keeps missing fields). */
            include_value(entry->child, bson_iter_value(&iter), &value);
            fields_add(out, key, &value);
        }
    }
}

/* The sub-projection applied to a value: documents are projected, arrays element by
 * element, anything else is dropped (missing). */
static void include_value(const projection_node_t *node, const bson_value_t *value,
                          bson_value_t *out_value)
{
    aggregation_value_set_missing(out_value);
    if (value->value_type == BSON_TYPE_DOCUMENT) {
        field_list_t fields = {0};
        include_document(node, value->value.v_doc.data, value->value.v_doc.data_len, false, false,
                         &fields);
        fields_take_document(&fields, out_value);
    } else if (value->value_type == BSON_TYPE_ARRAY) {
        bson_t array = BSON_INITIALIZER;
        uint32_t index = 0;
        bson_iter_t iter;
        if (bson_iter_init_from_data(&iter, value->value.v_doc.data, value->value.v_doc.data_len)) {
            while (bson_iter_next(&iter)) {
                bson_value_t element;
                include_value(node, bson_iter_value(&iter), &element);
                if (!aggregation_value_is_missing(&element)) {
                    append_array_element(&array, &index, &element);
                }
                bson_value_destroy(&element);
            }
        }
        aggregation_value_take_document(out_value, &array, BSON_TYPE_ARRAY);
    }
}

/* The second phase runs over the input values (not the first phase's output), so that
 * array elements the first phase dropped still get their computed fields. */
typedef struct computation {
    const bson_t *root;
    const expression_context_t *context;
    bool keep_all; /* $addFields: sub-documents keep every field */
} computation_t;

static bool compute_value(const computation_t *computation, const projection_node_t *node,
                          const bson_value_t *input, bson_value_t *out_value, bson_error_t *error);

/* Second phase: computed fields in specification order, each set in place or appended.
 * input is the document this level was projected from (NULL when there was none). */
static bool add_computed_fields(const computation_t *computation, const projection_node_t *node,
                                const bson_value_t *input, field_list_t *fields,
                                bson_error_t *error)
{
    for (size_t i = 0; i < node->count; i++) {
        const projection_entry_t *entry = &node->entries[i];
        bson_value_t value;
        if (entry->kind == PROJECTION_COMPUTED) {
            if (!expression_evaluate(entry->expression, computation->root, computation->context,
                                     &value, error)) {
                return false;
            }
        } else if (entry->kind == PROJECTION_CHILD && entry->child->has_computed) {
            bson_value_t original;
            aggregation_value_set_missing(&original);
            bson_iter_t iter;
            if (input != NULL &&
                bson_iter_init_from_data(&iter, input->value.v_doc.data,
                                         input->value.v_doc.data_len) &&
                bson_iter_find_w_len(&iter, entry->name, (int)strlen(entry->name))) {
                original = *bson_iter_value(&iter);
            }
            if (!compute_value(computation, entry->child, &original, &value, error)) {
                return false;
            }
        } else {
            continue;
        }
        fields_set(fields, entry->name, &value);
    }
    return true;
}

/* ProjectionNode::applyExpressionsToValue (after the first phase on the same input):
 * documents get the computed fields, arrays element by element, and anything else is
 * replaced by a document of them. */
static bool compute_value(const computation_t *computation, const projection_node_t *node,
                          const bson_value_t *input, bson_value_t *out_value, bson_error_t *error)
{
    aggregation_value_set_missing(out_value);
    if (input->value_type == BSON_TYPE_ARRAY) {
        bson_t array = BSON_INITIALIZER;
        uint32_t index = 0;
        bson_iter_t iter;
        if (bson_iter_init_from_data(&iter, input->value.v_doc.data, input->value.v_doc.data_len)) {
            while (bson_iter_next(&iter)) {
                bson_value_t element;
                if (!compute_value(computation, node, bson_iter_value(&iter), &element, error)) {
                    bson_destroy(&array);
                    return false;
                }
                append_array_element(&array, &index, &element);
                bson_value_destroy(&element);
            }
        }
        aggregation_value_take_document(out_value, &array, BSON_TYPE_ARRAY);
        return true;
    }
    field_list_t fields = {0};
    bool is_document = input->value_type == BSON_TYPE_DOCUMENT;
    if (is_document && computation->keep_all) {
        fields_from_document(input->value.v_doc.data, input->value.v_doc.data_len, &fields);
    } else if (is_document) {
        include_document(node, input->value.v_doc.data, input->value.v_doc.data_len, false, false,
                         &fields);
    }
    if (!add_computed_fields(computation, node, is_document ? input : NULL, &fields, error)) {
        fields_destroy(&fields);
        return false;
    }
    fields_take_document(&fields, out_value);
    return true;
}

static void exclude_value(const projection_node_t *node, const bson_value_t *value, bson_t *out,
                          const char *key, int key_length);

/* Copies the document without the excluded fields. */
static void exclude_document(const projection_node_t *node, const uint8_t *data, uint32_t length,
                             bson_t *out)
{
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, data, length)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        const projection_entry_t *entry = node_find(node, key);
        if (entry == NULL || entry->kind == PROJECTION_INCLUDE) {
            bson_append_iter(out, key, -1, &iter);
        } else if (entry->kind == PROJECTION_CHILD) {
            exclude_value(entry->child, bson_iter_value(&iter), out, key, -1);
        }
    }
}

/* Appends value under key with the sub-projection's exclusions applied: documents
 * recursively, arrays element by element, anything else unchanged. */
static void exclude_value(const projection_node_t *node, const bson_value_t *value, bson_t *out,
                          const char *key, int key_length)
{
    if (value->value_type == BSON_TYPE_DOCUMENT) {
        bson_t child;
        bson_append_document_begin(out, key, key_length, &child);
        exclude_document(node, value->value.v_doc.data, value->value.v_doc.data_len, &child);
        bson_append_document_end(out, &child);
    } else if (value->value_type == BSON_TYPE_ARRAY) {
        bson_t child;
        bson_append_array_begin(out, key, key_length, &child);
        uint32_t index = 0;
        bson_iter_t iter;
        if (bson_iter_init_from_data(&iter, value->value.v_doc.data, value->value.v_doc.data_len)) {
            while (bson_iter_next(&iter)) {
                char index_key[16];
                const char *index_text;
                size_t index_length =
                    bson_uint32_to_string(index++, &index_text, index_key, sizeof index_key);
                exclude_value(node, bson_iter_value(&iter), &child, index_text, (int)index_length);
            }
        }
        bson_append_array_end(out, &child);
    } else {
        bson_append_value(out, key, key_length, value);
    }
}

static bool projection_apply(const projection_spec_t *spec, const bson_t *input,
                             const expression_context_t *context, bson_t *out_document,
                             bson_error_t *error)
{
    if (spec->mode == PROJECTION_MODE_EXCLUSION) {
        bson_init(out_document);
        exclude_document(&spec->root, bson_get_data(input), input->len, out_document);
        return true;
    }
    field_list_t fields = {0};
    if (spec->mode == PROJECTION_MODE_ADD_FIELDS) {
        fields_from_document(bson_get_data(input), input->len, &fields);
    } else {
        include_document(&spec->root, bson_get_data(input), input->len, true, spec->id_excluded,
                         &fields);
    }
    computation_t computation = {
        .root = input, .context = context, .keep_all = spec->mode == PROJECTION_MODE_ADD_FIELDS};
    bson_value_t input_value = {.value_type = BSON_TYPE_DOCUMENT};
    input_value.value.v_doc.data = (uint8_t *)bson_get_data(input);
    input_value.value.v_doc.data_len = input->len;
    if (spec->root.has_computed &&
        !add_computed_fields(&computation, &spec->root, &input_value, &fields, error)) {
        fields_destroy(&fields);
        return false;
    }
    bson_init(out_document);
    for (size_t i = 0; i < fields.count; i++) {
        aggregation_value_append(out_document, fields.items[i].name, -1, &fields.items[i].value);
    }
    fields_destroy(&fields);
    return true;
}

static bool projection_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                            bson_error_t *error)
{
    bson_t input;
    if (!pipeline_cursor_pull(cursor, &input, out_end, error)) {
        return false;
    }
    if (*out_end) {
        return true;
    }
    bool ok = projection_apply(cursor->stage->spec, &input, cursor->expression_context,
                               out_document, error);
    bson_destroy(&input);
    return ok;
}

static const pipeline_stage_kind_t projection_kind = {"$project", projection_next, NULL,
                                                      projection_spec_destroy};

bool pipeline_projection_compile(const char *stage_name, const bson_value_t *argument, const pipeline_scope_t *scope,
                                 pipeline_stage_t *out_stage, bson_error_t *error)
{
    bool is_project = strcmp(stage_name, "$project") == 0;
    bool is_unset = strcmp(stage_name, "$unset") == 0;
    projection_spec_t *spec = bson_malloc0(sizeof *spec);
    bool ok = false;
    if (is_unset) {
        TC_CHECK(parse_unset(spec, argument, error));
    } else if (argument->value_type != BSON_TYPE_DOCUMENT) {
        if (is_project) {
            tc_error_set(error, PROJECTION_ERROR_PROJECT_OBJECT,
                         "$project specification must be an object");
        } else {
            tc_error_set(error, PROJECTION_ERROR_ADD_FIELDS_OBJECT,
                         "%s specification stage must be an object, got %s", stage_name,
                         value_type_name(argument->value_type));
        }
        goto done;
    } else {
        projection_parser_t parser = {.spec = spec, .stage_name = stage_name, .variables = scope->variables};
        spec->mode = is_project ? PROJECTION_MODE_UNDECIDED : PROJECTION_MODE_ADD_FIELDS;
        if (is_project && argument->value.v_doc.data_len <= 5) {
            tc_error_set(error, PROJECTION_ERROR_EMPTY,
                         "projection specification must have at least one field");
            pipeline_error_add_stage_context(error, stage_name);
            goto done;
        }
        if (!parse_object(&parser, &spec->root, argument, "", error)) {
            if (is_project) {
                pipeline_error_add_stage_context(error, stage_name);
            }
            goto done;
        }
        if (spec->mode == PROJECTION_MODE_UNDECIDED) {
            /* Only _id was given: {_id: 0} excludes it, {_id: 1} keeps only it. */
            spec->mode = spec->id_excluded ? PROJECTION_MODE_EXCLUSION : PROJECTION_MODE_INCLUSION;
        }
    }
    mark_computed(&spec->root);
    out_stage->kind = &projection_kind;
    out_stage->spec = spec;
    spec = NULL;
    ok = true;
done:
    if (spec != NULL) {
        projection_spec_destroy(spec);
    }
    return ok;
}
