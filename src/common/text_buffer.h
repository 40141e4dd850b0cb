/* A bounded line of text built piece by piece (a log line that says what fits),
 * and a command's shape: its structure without its values, which may be
 * private, as slow-operation log lines show it. */
#ifndef TC_COMMON_TEXT_BUFFER_H
#define TC_COMMON_TEXT_BUFFER_H

#include <bson/bson.h>
#include <stddef.h>

/* The caller owns data (size bytes, data[0] == '\0' to start). */
typedef struct text_buffer {
    char *data;
    size_t size;
    size_t length;
} text_buffer_t;

/* Appends as printf would; text past the end is cut, never an error. */
void text_buffer_append(text_buffer_t *text, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* {find: "coll", filter: {a: ?}, sort: {b: ?}, $db: "shop"}: the command's keys
 * to three levels, arrays as [count], every value "?" but the command name's
 * (the collection) and $db's; lsid and $clusterTime are not opened. */
void text_buffer_append_shape(text_buffer_t *text, const bson_t *command);

#endif
