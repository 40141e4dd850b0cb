/* Bounded text lines and command shapes for the log (see text_buffer.h). */
#include "common/text_buffer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SHAPE_DEPTH 3

void text_buffer_append(text_buffer_t *text, const char *format, ...)
{
    if (text->length + 1 >= text->size) {
        return;
    }
    va_list arguments;
    va_start(arguments, format);
    int written = vsnprintf(text->data + text->length, text->size - text->length, format, arguments);
    va_end(arguments);
    if (written > 0) {
        text->length += (size_t)written;
        if (text->length >= text->size) {
            text->length = text->size - 1; /* cut: the line says what fits */
        }
    }
}

static void append_shape(text_buffer_t *text, const bson_t *document, int depth, bool keep_first)
{
    bson_iter_t iter;
    bool first = true;
    if (!bson_iter_init(&iter, document)) {
        text_buffer_append(text, "?");
        return;
    }
    text_buffer_append(text, "{");
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        bson_t child;
        uint32_t length;
        const uint8_t *data;
        text_buffer_append(text, "%s%s: ", first ? "" : ", ", key);
        if (((first && keep_first) || strcmp(key, "$db") == 0) && BSON_ITER_HOLDS_UTF8(&iter)) {
            text_buffer_append(text, "\"%s\"", bson_iter_utf8(&iter, NULL));
        } else if (BSON_ITER_HOLDS_DOCUMENT(&iter) && depth < SHAPE_DEPTH && strcmp(key, "lsid") != 0 &&
                   strcmp(key, "$clusterTime") != 0) {
            bson_iter_document(&iter, &length, &data);
            if (bson_init_static(&child, data, length)) {
                append_shape(text, &child, depth + 1, false);
            }
        } else if (BSON_ITER_HOLDS_ARRAY(&iter)) {
            bson_iter_array(&iter, &length, &data);
            text_buffer_append(text, "[%u]", bson_init_static(&child, data, length) ? bson_count_keys(&child) : 0);
        } else {
            text_buffer_append(text, "?");
        }
        first = false;
    }
    text_buffer_append(text, "}");
}

void text_buffer_append_shape(text_buffer_t *text, const bson_t *command)
{
    append_shape(text, command, 0, true);
}
