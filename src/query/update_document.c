/* The mutable document update operators work on: a tree of elements that keeps
 * field order, built from and written back to BSON; dotted paths over it; and the
 * rendering of values in mongod's error-message style. */
#include "query/update_private.h"

#include "query/order.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * Rendering values as mongod's BSONElement::toString does, for error messages.
 * ---------------------------------------------------------------------------------- */


void update_format_double(bson_string_t *out, double number)
{
    char text[64];
    if (isnan(number)) {
        bson_string_append(out, "nan");
        return;
    }
    if (isinf(number)) {
        bson_string_append(out, number < 0 ? "-inf" : "inf");
        return;
    }
    /* The shortest text that reads back as the same double, as mongod prints it. */
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(text, sizeof text, "%.*g", precision, number);
        if (strtod(text, NULL) == number) {
            break;
        }
    }
    bson_string_append(out, text);
    if (strpbrk(text, ".e") == NULL) {
        bson_string_append(out, ".0");
    }
}

void update_format_container(bson_string_t *out, const uint8_t *data, uint32_t length,
                             bool is_array)
{
    bson_t document;
    bson_iter_t iter;
    bool first = true;
    if (!bson_init_static(&document, data, length) || !bson_iter_init(&iter, &document)) {
        bson_string_append(out, "<invalid BSON>");
        return;
    }
    bson_string_append(out, is_array ? "[" : "{");
    while (bson_iter_next(&iter)) {
        bson_string_append(out, first ? " " : ", ");
        first = false;
        if (!is_array) {
            bson_string_append_printf(out, "%s: ", bson_iter_key(&iter));
        }
        update_format_value(out, bson_iter_value(&iter));
    }
    if (first) {
        bson_string_append(out, is_array ? "]" : "}");
    } else {
        bson_string_append(out, is_array ? " ]" : " }");
    }
}

void update_format_value(bson_string_t *out, const bson_value_t *value)
{
    char oid_text[25];
    char decimal_text[BSON_DECIMAL128_STRING];
    switch (value->value_type) {
    case BSON_TYPE_DOUBLE: update_format_double(out, value->value.v_double); break;
    case BSON_TYPE_UTF8: bson_string_append_printf(out, "\"%s\"", value->value.v_utf8.str); break;
    case BSON_TYPE_SYMBOL:
        bson_string_append_printf(out, "\"%s\"", value->value.v_symbol.symbol);
        break;
    case BSON_TYPE_DOCUMENT:
        update_format_container(out, value->value.v_doc.data, value->value.v_doc.data_len, false);
        break;
    case BSON_TYPE_ARRAY:
        update_format_container(out, value->value.v_doc.data, value->value.v_doc.data_len, true);
        break;
    case BSON_TYPE_BINARY:
        bson_string_append_printf(out, "BinData(%d, ", (int)value->value.v_binary.subtype);
        for (uint32_t i = 0; i < value->value.v_binary.data_len; i++) {
            bson_string_append_printf(out, "%02X", value->value.v_binary.data[i]);
        }
        bson_string_append(out, ")");
        break;
    case BSON_TYPE_UNDEFINED: bson_string_append(out, "undefined"); break;
    case BSON_TYPE_OID:
        bson_oid_to_string(&value->value.v_oid, oid_text);
        bson_string_append_printf(out, "ObjectId('%s')", oid_text);
        break;
    case BSON_TYPE_BOOL: bson_string_append(out, value->value.v_bool ? "true" : "false"); break;
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(out, "new Date(%lld)", (long long)value->value.v_datetime);
        break;
    case BSON_TYPE_NULL: bson_string_append(out, "null"); break;
    case BSON_TYPE_REGEX:
        bson_string_append_printf(out, "/%s/%s", value->value.v_regex.regex,
                                  value->value.v_regex.options);
        break;
    case BSON_TYPE_CODE: bson_string_append(out, value->value.v_code.code); break;
    case BSON_TYPE_CODEWSCOPE: bson_string_append(out, value->value.v_codewscope.code); break;
    case BSON_TYPE_INT32: bson_string_append_printf(out, "%d", (int)value->value.v_int32); break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(out, "%lld", (long long)value->value.v_int64);
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_string_append_printf(out, "Timestamp(%u, %u)", value->value.v_timestamp.timestamp,
                                  value->value.v_timestamp.increment);
        break;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&value->value.v_decimal128, decimal_text);
        bson_string_append_printf(out, "NumberDecimal(\"%s\")", decimal_text);
        break;
    case BSON_TYPE_MINKEY: bson_string_append(out, "MinKey"); break;
    case BSON_TYPE_MAXKEY: bson_string_append(out, "MaxKey"); break;
    case BSON_TYPE_DBPOINTER:
        bson_oid_to_string(&value->value.v_dbpointer.oid, oid_text);
        bson_string_append_printf(out, "DBRef('%s', %s)", value->value.v_dbpointer.collection,
                                  oid_text);
        break;
    default: bson_string_append(out, "EOO"); break;
    }
}

/* ------------------------------------------------------------------------------------
 * A mutable document: a tree of elements, each owning its name and value.
 * ---------------------------------------------------------------------------------- */

bool update_element_is_container(const update_element_t *element)
{
    return element->value.value_type == BSON_TYPE_DOCUMENT ||
           element->value.value_type == BSON_TYPE_ARRAY;
}

update_element_t *update_element_new(const char *name, bson_type_t type)
{
    update_element_t *element = BSON_ALIGNED_ALLOC0(update_element_t);
    element->name = name ? bson_strdup(name) : NULL;
    element->value.value_type = type;
    return element;
}

void update_element_destroy(update_element_t *element)
{
    if (element == NULL) {
        return;
    }
    for (size_t i = 0; i < element->child_count; i++) {
        update_element_destroy(element->children[i]);
    }
    bson_free(element->children);
    if (!update_element_is_container(element)) {
        bson_value_destroy(&element->value);
    }
    bson_free(element->name);
    bson_free(element);
}

void update_element_insert(update_element_t *parent, size_t index, update_element_t *child)
{
    if (parent->child_count == parent->child_capacity) {
        parent->child_capacity = parent->child_capacity ? parent->child_capacity * 2 : 4;
        parent->children =
            bson_realloc(parent->children, parent->child_capacity * sizeof *parent->children);
    }
    memmove(parent->children + index + 1, parent->children + index,
            (parent->child_count - index) * sizeof *parent->children);
    parent->children[index] = child;
    parent->child_count++;
    child->parent = parent;
    if (parent->value.value_type == BSON_TYPE_ARRAY) {
        bson_free(child->name);
        child->name = NULL;
    }
}

void update_element_append(update_element_t *parent, update_element_t *child)
{
    update_element_insert(parent, parent->child_count, child);
}

size_t update_element_index_of(const update_element_t *child)
{
    const update_element_t *parent = child->parent;
    for (size_t i = 0; i < parent->child_count; i++) {
        if (parent->children[i] == child) {
            return i;
        }
    }
    return SIZE_MAX;
}

/* Unlinks child from its parent; the caller owns it afterwards. */
update_element_t *update_element_detach(update_element_t *child)
{
    update_element_t *parent = child->parent;
    size_t index = update_element_index_of(child);
    memmove(parent->children + index, parent->children + index + 1,
            (parent->child_count - index - 1) * sizeof *parent->children);
    parent->child_count--;
    child->parent = NULL;
    return child;
}

update_element_t *update_element_find(const update_element_t *document, const char *name)
{
    for (size_t i = 0; i < document->child_count; i++) {
        if (strcmp(document->children[i]->name, name) == 0) {
            return document->children[i];
        }
    }
    return NULL;
}

/* A new element holding a deep copy of value. */
update_element_t *update_element_from_value(const char *name, const bson_value_t *value)
{
    update_element_t *element = update_element_new(name, value->value_type);
    if (update_element_is_container(element)) {
        update_element_fill_from_bson(element, value->value.v_doc.data,
                                      value->value.v_doc.data_len);
    } else {
        bson_value_copy(value, &element->value);
    }
    return element;
}

void update_element_fill_from_bson(update_element_t *container, const uint8_t *data,
                                   uint32_t length)
{
    bson_t document;
    bson_iter_t iter;
    if (!bson_init_static(&document, data, length) || !bson_iter_init(&iter, &document)) {
        return;
    }
    while (bson_iter_next(&iter)) {
        update_element_append(
            container, update_element_from_value(bson_iter_key(&iter), bson_iter_value(&iter)));
    }
}

update_element_t *update_element_from_document(const bson_t *document)
{
    update_element_t *root = update_element_new(NULL, BSON_TYPE_DOCUMENT);
    update_element_fill_from_bson(root, bson_get_data(document), document->len);
    return root;
}

update_element_t *update_element_copy(const update_element_t *source, const char *name)
{
    update_element_t *copy = update_element_new(name, source->value.value_type);
    if (update_element_is_container(source)) {
        for (size_t i = 0; i < source->child_count; i++) {
            update_element_append(
                copy, update_element_copy(source->children[i], source->children[i]->name));
        }
    } else {
        bson_value_copy(&source->value, &copy->value);
    }
    return copy;
}

/* Replaces element's value (not its name or place) with a copy of source's. */
void update_element_assign_element(update_element_t *element, const update_element_t *source)
{
    update_element_t *copy = update_element_copy(source, NULL);
    for (size_t i = 0; i < element->child_count; i++) {
        update_element_destroy(element->children[i]);
    }
    if (!update_element_is_container(element)) {
        bson_value_destroy(&element->value);
    }
    bson_free(element->children);
    element->value = copy->value;
    element->children = copy->children;
    element->child_count = copy->child_count;
    element->child_capacity = copy->child_capacity;
    for (size_t i = 0; i < element->child_count; i++) {
        element->children[i]->parent = element;
    }
    bson_free(copy->name);
    bson_free(copy);
}

void update_element_assign_value(update_element_t *element, const bson_value_t *value)
{
    update_element_t *source = update_element_from_value(NULL, value);
    update_element_assign_element(element, source);
    update_element_destroy(source);
}

void update_element_append_children(bson_t *out, const update_element_t *container)
{
    char index_buffer[16];
    const char *key;
    for (size_t i = 0; i < container->child_count; i++) {
        if (container->value.value_type == BSON_TYPE_ARRAY) {
            bson_uint32_to_string((uint32_t)i, &key, index_buffer, sizeof index_buffer);
        } else {
            key = container->children[i]->name;
        }
        update_element_append_to_bson(out, key, container->children[i]);
    }
}

void update_element_append_to_bson(bson_t *out, const char *key, const update_element_t *element)
{
    bson_t child;
    if (element->value.value_type == BSON_TYPE_DOCUMENT) {
        bson_append_document_begin(out, key, -1, &child);
        update_element_append_children(&child, element);
        bson_append_document_end(out, &child);
    } else if (element->value.value_type == BSON_TYPE_ARRAY) {
        bson_append_array_begin(out, key, -1, &child);
        update_element_append_children(&child, element);
        bson_append_array_end(out, &child);
    } else {
        bson_append_value(out, key, -1, &element->value);
    }
}

/* A read-only bson_value_t view of element. For documents and arrays the bytes live
 * in storage, which the caller initialises nothing for and must bson_destroy(). */
void update_element_view(const update_element_t *element, bson_t *storage, bson_value_t *view)
{
    bson_init(storage);
    if (!update_element_is_container(element)) {
        *view = element->value;
        return;
    }
    update_element_append_children(storage, element);
    view->value_type = element->value.value_type;
    view->value.v_doc.data = (uint8_t *)bson_get_data(storage);
    view->value.v_doc.data_len = storage->len;
}

/* The name mongod prints for element: its field name, or its index in an array. */
void update_element_display_name(const update_element_t *element, bson_string_t *out)
{
    if (element->name != NULL) {
        bson_string_append(out, element->name);
    } else if (element->parent != NULL) {
        bson_string_append_printf(out, "%zu", update_element_index_of(element));
    }
}

/* "name: value", as BSONElement::toString() renders an element. Caller frees. */
char *update_element_describe(const update_element_t *element)
{
    bson_string_t *out = bson_string_new(NULL);
    bson_t storage;
    bson_value_t view;
    update_element_display_name(element, out);
    bson_string_append(out, ": ");
    update_element_view(element, &storage, &view);
    update_format_value(out, &view);
    bson_destroy(&storage);
    return bson_string_free(out, false);
}

/* "_id: 1" for the document's _id, or "no id", as mongod's messages show it. */
char *update_element_describe_id(const update_element_t *root)
{
    const update_element_t *id = update_element_find(root, "_id");
    return id ? update_element_describe(id) : bson_strdup("no id");
}

int update_element_compare_value(const update_element_t *element, const bson_value_t *value)
{
    bson_t storage;
    bson_value_t view;
    update_element_view(element, &storage, &view);
    int result = order_compare_values(&view, value);
    bson_destroy(&storage);
    return result;
}

/* Same type and same bytes: $set of an identical value is a no-op, 1 -> 1.0 is not. */
bool update_values_binary_equal(const bson_value_t *left, const bson_value_t *right)
{
    bson_t left_wrapped = BSON_INITIALIZER;
    bson_t right_wrapped = BSON_INITIALIZER;
    bson_append_value(&left_wrapped, "", 0, left);
    bson_append_value(&right_wrapped, "", 0, right);
    bool equal =
        left_wrapped.len == right_wrapped.len &&
        memcmp(bson_get_data(&left_wrapped), bson_get_data(&right_wrapped), left_wrapped.len) == 0;
    bson_destroy(&left_wrapped);
    bson_destroy(&right_wrapped);
    return equal;
}

bool update_element_binary_equal(const update_element_t *element, const bson_value_t *value)
{
    bson_t storage;
    bson_value_t view;
    update_element_view(element, &storage, &view);
    bool equal = update_values_binary_equal(&view, value);
    bson_destroy(&storage);
    return equal;
}

/* ------------------------------------------------------------------------------------
 * Dotted paths.
 * ---------------------------------------------------------------------------------- */

void update_path_push(update_path_t *path, const char *part)
{
    if (path->count == path->capacity) {
        path->capacity = path->capacity ? path->capacity * 2 : 8;
        path->parts = bson_realloc(path->parts, path->capacity * sizeof *path->parts);
    }
    path->parts[path->count++] = bson_strdup(part);
}

void update_path_pop(update_path_t *path)
{
    bson_free(path->parts[--path->count]);
}

void update_path_cleanup(update_path_t *path)
{
    while (path->count > 0) {
        update_path_pop(path);
    }
    bson_free(path->parts);
    memset(path, 0, sizeof *path);
}

/* The first count parts joined with dots. Caller frees. */
char *update_path_join(char *const *parts, size_t count)
{
    bson_string_t *out = bson_string_new(NULL);
    for (size_t i = 0; i < count; i++) {
        if (i > 0) {
            bson_string_append_c(out, '.');
        }
        bson_string_append(out, parts[i]);
    }
    return bson_string_free(out, false);
}

/* Splits "a.b.c"; mongod refuses empty paths and empty components. */
bool update_path_parse(const char *dotted, update_path_t *out, bson_error_t *error)
{
    memset(out, 0, sizeof *out);
    if (dotted[0] == '\0') {
        return tc_error_set(error, TC_ERR_EMPTY_FIELD_NAME, "An empty update path is not valid.");
    }
    const char *start = dotted;
    for (;;) {
        const char *dot = strchr(start, '.');
        size_t length = dot ? (size_t)(dot - start) : strlen(start);
        if (length == 0) {
            update_path_cleanup(out);
            return tc_error_set(error, TC_ERR_EMPTY_FIELD_NAME,
                                "The update path '%s' contains an empty field name, which is "
                                "not allowed.",
                                dotted);
        }
        char *part = bson_strndup(start, length);
        update_path_push(out, part);
        bson_free(part);
        if (dot == NULL) {
            return true;
        }
        start = dot + 1;
    }
}

/* True when part is a non-negative decimal integer (an array index). */
bool update_path_part_index(const char *part, size_t *out_index)
{
    size_t index = 0;
    if (part[0] == '\0') {
        return false;
    }
    for (const char *c = part; *c; c++) {
        if (*c < '0' || *c > '9') {
            return false;
        }
        index = index > (SIZE_MAX - 9) / 10 ? SIZE_MAX : index * 10 + (size_t)(*c - '0');
    }
    *out_index = index;
    return true;
}

/* Follows parts from root as far as they exist; *out_resolved tells how many did. */
update_element_t *update_path_resolve(update_element_t *root, char *const *parts, size_t count,
                                      size_t *out_resolved)
{
    update_element_t *current = root;
    size_t i = 0;
    for (; i < count; i++) {
        update_element_t *next = NULL;
        size_t index;
        if (current->value.value_type == BSON_TYPE_DOCUMENT) {
            next = update_element_find(current, parts[i]);
        } else if (current->value.value_type == BSON_TYPE_ARRAY &&
                   update_path_part_index(parts[i], &index) && index < current->child_count) {
            next = current->children[index];
        }
        if (next == NULL) {
            break;
        }
        current = next;
    }
    *out_resolved = i;
    return current;
}

bool update_is_array_filter_part(const char *part)
{
    size_t length = strlen(part);
    return length >= 3 && part[0] == '$' && part[1] == '[' && part[length - 1] == ']';
}

/* Operators visit fields in lexicographic order, numeric names in numeric order. */
int update_field_order_compare(const char *left, const char *right)
{
    size_t left_index;
    size_t right_index;
    if (update_path_part_index(left, &left_index) && update_path_part_index(right, &right_index)) {
        while (left[0] == '0' && left[1] != '\0') {
            left++;
        }
        while (right[0] == '0' && right[1] != '\0') {
            right++;
        }
        size_t left_length = strlen(left);
        size_t right_length = strlen(right);
        if (left_length != right_length) {
            return left_length < right_length ? -1 : 1;
        }
    }
    return strcmp(left, right);
}
