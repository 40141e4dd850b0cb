/* Private to src/query/update*.c: the mutable document the operators work on
 * (update_document.c), dotted paths, and the compiled update tree that
 * update_compile.c builds and update.c applies. */
#ifndef TC_QUERY_UPDATE_PRIVATE_H
#define TC_QUERY_UPDATE_PRIVATE_H

#include "query/match.h"
#include "query/pipeline.h"
#include "query/update.h"
#include "query/value_format.h"

#include <stddef.h>
#include <stdint.h>

typedef struct update_element update_element_t;
struct update_element {
    char *name;               /* NULL for array members, whose name is their index */
    update_element_t *parent; /* NULL for the root document */
    bson_value_t value;       /* scalars own a copy; documents and arrays keep only the type */
    update_element_t **children;
    size_t child_count;
    size_t child_capacity;
};

typedef struct update_path {
    char **parts;
    size_t count;
    size_t capacity;
} update_path_t;

typedef enum update_node_kind {
    UPDATE_NODE_OBJECT, /* children are field names */
    UPDATE_NODE_ARRAY,  /* children are array filter identifiers ("" for $[]) */
    UPDATE_NODE_LEAF,
} update_node_kind_t;

typedef enum update_operator_kind {
    UPDATE_OPERATOR_SET,
    UPDATE_OPERATOR_SET_ON_INSERT,
    UPDATE_OPERATOR_UNSET,
    UPDATE_OPERATOR_INC,
    UPDATE_OPERATOR_MUL,
    UPDATE_OPERATOR_MIN,
    UPDATE_OPERATOR_MAX,
    UPDATE_OPERATOR_RENAME,        /* lives at the destination path */
    UPDATE_OPERATOR_RENAME_SOURCE, /* holds the source path so that conflicts are detected */
    UPDATE_OPERATOR_PUSH,
    UPDATE_OPERATOR_ADD_TO_SET,
    UPDATE_OPERATOR_PULL,
    UPDATE_OPERATOR_PULL_ALL,
    UPDATE_OPERATOR_POP,
    UPDATE_OPERATOR_CURRENT_DATE,
    UPDATE_OPERATOR_BIT,
} update_operator_kind_t;

typedef enum update_pull_kind {
    UPDATE_PULL_EQUALITY,      /* a plain value or an array: exact match */
    UPDATE_PULL_OBJECT_QUERY,  /* {b: 1}: a query on document elements */
    UPDATE_PULL_WRAPPED_QUERY, /* {$gt: 1} or a regex: a condition on each element */
} update_pull_kind_t;

/* The field name under which a $pull condition or an array filter sees an element. */
#define UPDATE_PULL_WRAP_FIELD "value"

typedef struct update_node update_node_t;
struct update_node {
    update_node_kind_t kind;
    char *name;
    update_node_t **children; /* sorted in field order */
    size_t child_count;
    size_t child_capacity;

    /* Leaves only. */
    update_operator_kind_t op;
    char *path;            /* the dotted path as written, for messages */
    bson_value_t argument; /* owned copy of the operator's value */
    bson_t *values;        /* $push/$addToSet/$pullAll: the values, as an array */
    int64_t position;      /* $push $position; INT64_MAX appends */
    int64_t slice;         /* $push $slice; INT64_MAX keeps everything */
    bool has_sort;
    bool sort_whole_value;
    int sort_direction;   /* sort_whole_value: 1 or -1 */
    bson_t *sort_pattern; /* otherwise {field: 1/-1, ...} */
    update_pull_kind_t pull_kind;
    match_expression_t *matcher;
    bool pop_front;
    bool current_date_timestamp;
    update_path_t source; /* $rename */
};

typedef struct update_array_filter {
    char *identifier;
    match_expression_t *matcher;
    bool used;
} update_array_filter_t;

struct update_spec {
    bool replacement;
    bson_t *replacement_document; /* a pointer: bson_t needs an alignment malloc lacks */
    pipeline_t *pipeline;         /* a pipeline-style update; NULL otherwise */
    bool positional;              /* a path holds the positional '$' */
    update_node_t *root;
    update_array_filter_t *filters;
    size_t filter_count;
};

/* Rendering values as mongod's BSONElement::toString() does, for error messages. */
void update_format_value(bson_string_t *out, const bson_value_t *value);
void update_format_double(bson_string_t *out, double number);
void update_format_container(bson_string_t *out, const uint8_t *data, uint32_t length,
                             bool is_array);

/* The mutable document (update_document.c). Elements own their names, values and
 * children; update_element_destroy() frees a detached element and everything below. */
bool update_element_is_container(const update_element_t *element);
update_element_t *update_element_new(const char *name, bson_type_t type);
void update_element_destroy(update_element_t *element);
void update_element_insert(update_element_t *parent, size_t index, update_element_t *child);
void update_element_append(update_element_t *parent, update_element_t *child);
size_t update_element_index_of(const update_element_t *child);
update_element_t *update_element_detach(update_element_t *child);
update_element_t *update_element_find(const update_element_t *document, const char *name);
void update_element_fill_from_bson(update_element_t *container, const uint8_t *data,
                                   uint32_t length);
update_element_t *update_element_from_value(const char *name, const bson_value_t *value);
update_element_t *update_element_from_document(const bson_t *document);
update_element_t *update_element_copy(const update_element_t *source, const char *name);
void update_element_assign_element(update_element_t *element, const update_element_t *source);
void update_element_assign_value(update_element_t *element, const bson_value_t *value);
void update_element_append_to_bson(bson_t *out, const char *key, const update_element_t *element);
void update_element_append_children(bson_t *out, const update_element_t *container);
void update_element_view(const update_element_t *element, bson_t *storage, bson_value_t *view);
void update_element_display_name(const update_element_t *element, bson_string_t *out);
char *update_element_describe(const update_element_t *element);
char *update_element_describe_id(const update_element_t *root);
int update_element_compare_value(const update_element_t *element, const bson_value_t *value);
bool update_element_binary_equal(const update_element_t *element, const bson_value_t *value);
bool update_values_binary_equal(const bson_value_t *left, const bson_value_t *right);

/* update_difference.c: {updatedFields, removedFields, truncatedArrays} turning
 * before into after, as mongod's oplog diff of a pipeline update reports it
 * (arrays element by element, shrunk ones in truncatedArrays). out is
 * initialized here; the caller destroys it. */
void update_describe_difference(const bson_t *before, const bson_t *after, bson_t *out);

/* Dotted paths (update_document.c). */
void update_path_push(update_path_t *path, const char *part);
void update_path_pop(update_path_t *path);
void update_path_cleanup(update_path_t *path);
char *update_path_join(char *const *parts, size_t count);
bool update_path_parse(const char *dotted, update_path_t *out, bson_error_t *error);
bool update_path_part_index(const char *part, size_t *out_index);
update_element_t *update_path_resolve(update_element_t *root, char *const *parts, size_t count,
                                      size_t *out_resolved);
bool update_is_array_filter_part(const char *part);
int update_field_order_compare(const char *left, const char *right);

/* Shared by compiling and applying (update_compile.c). */
update_node_t *update_node_find_child(const update_node_t *node, const char *name);
bool update_is_number_type(bson_type_t type);
char *update_describe_argument(const char *name, const bson_value_t *value);

/* ------------------------------------------------------------------------------------
 * Applying an operator update: update.c walks the compiled tree over the document,
 * update_operators.c applies each leaf, update_upsert.c builds an upsert's seed.
 * ---------------------------------------------------------------------------------- */

typedef struct update_change_log_entry {
    char *path;
    bool removed;
} update_change_log_entry_t;

typedef struct update_apply_context {
    const update_spec_t *spec;
    update_element_t *root;
    bool is_upsert_insert;
    const char *matched_array_index; /* what the positional '$' stands for; NULL: none */
    bool changed;
    update_path_t path; /* the path being visited, array indexes included */
    /* Inside $[] updates of several elements the array is logged as a whole. */
    int log_suppressed;
    /* Set by a $push that only appended: mongod logs the new members one by one. */
    size_t appended_from;
    update_change_log_entry_t *log;
    size_t log_count;
    size_t log_capacity;
    bson_error_t *error;
} update_apply_context_t;

/* True when prefix is path or one of its dotted ancestors ("a" of "a.b", not of "ab"). */
bool update_path_string_is_prefix(const char *prefix, const char *path);
/* Records a change for the change-stream description, as mongod's v2 oplog diff
 * would: a change inside an already-logged subtree is covered by it. Takes path. */
void update_log_change(update_apply_context_t *context, char *path, bool removed);
/* update_log_change() of the first count parts of the path being visited. */
void update_log_current_path(update_apply_context_t *context, size_t count, bool removed);
/* A view of an element wrapped as {field: value}, run through matcher: how $pull
 * conditions and array filters test one array element. */
bool update_element_matches(const update_element_t *element, const char *field,
                            const match_expression_t *matcher);

/* Creates the path being visited's parts[resolved..] under deepest (which exists)
 * and puts value at the end, padding arrays with nulls (mongod's
 * pathsupport::createPathAt). Takes value; false with context->error filled. */
bool update_create_path(update_apply_context_t *context, update_element_t *deepest, size_t resolved,
                        update_element_t *value);
/* Applies one leaf operator at the path being visited (update_operators.c). */
bool update_apply_leaf(update_apply_context_t *context, const update_node_t *leaf);

#endif
