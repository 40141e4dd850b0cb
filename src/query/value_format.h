/* BSON values written the way mongod writes them in messages and explain output
 * (its "shell" form): 5, 2.5, "text", ObjectId('...'), new Date(1600000000000),
 * inf.0 / -inf.0 / nan.0, MinKey, MaxKey, { a: 1 }, [ 1, 2 ]. */
#ifndef TC_QUERY_VALUE_FORMAT_H
#define TC_QUERY_VALUE_FORMAT_H

#include <bson/bson.h>

/* MongoDB's name for a BSON type, as $type aliases and error messages use it:
 * "double", "string", "object", "array", "int", "long", "minKey"... */
const char *value_type_name(bson_type_t type);

/* The type a $type alias names (value_type_name's inverse over the BSON types:
 * not "missing", "unknown", nor $type's "number", which names several). */
bool value_type_from_name(const char *name, bson_type_t *out_type);

/* Appends value's text to out. */
void value_format_append(bson_string_t *out, const bson_value_t *value);

#endif
