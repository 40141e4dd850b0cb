/* Validation of untrusted BSON from the network, before libbson touches it.
 * libbson's bson_validate recurses once per nesting level, so a 16 MB document of
 * nested objects overflows the stack; this walk keeps its own bounded frame stack,
 * follows mongod's validateBSON rules, codes and messages, and checks all that
 * libbson's iterator does, so that no second walk (bson_validate) is needed. */
#include "wire/wire_private.h"

#include <stdio.h>
#include <string.h>

typedef struct check_frame {
    size_t end;           /* offset just past this object's terminating byte */
    bool code_with_scope; /* the frame only checks a CodeWScope's total size */
} check_frame_t;

typedef struct check_cursor {
    const uint8_t *data;
    size_t position;
    size_t limit; /* the outermost object's length; data[limit - 1] is 0 */
    const char *field_name;
} check_cursor_t;

static bool check_fail(const check_cursor_t *cursor, bson_error_t *error, int32_t code,
                       const char *reason)
{
    return tc_error_set(error, code, "%s in element with field name '%s'", reason,
                        cursor->field_name ? cursor->field_name : "?");
}

/* Like mongod's Cursor::skip: the position after skipping must stay strictly
 * inside the object, since at least the terminating byte follows. */
static bool check_skip(check_cursor_t *cursor, size_t count, bson_error_t *error)
{
    if (count >= cursor->limit - cursor->position) {
        return check_fail(cursor, error, TC_ERR_INVALID_BSON,
                          "BSON size is larger than buffer size");
    }
    cursor->position += count;
    return true;
}

static bool check_read_uint32(check_cursor_t *cursor, uint32_t *out_value, bson_error_t *error)
{
    size_t start = cursor->position;
    if (!check_skip(cursor, 4, error)) {
        return false;
    }
    *out_value = (uint32_t)wire_load_int32(cursor->data + start);
    return true;
}

static bool check_skip_string(check_cursor_t *cursor, bson_error_t *error)
{
    uint32_t length = 0;
    if (!check_read_uint32(cursor, &length, error) || !check_skip(cursor, length, error)) {
        return false;
    }
    if (length == 0 || cursor->data[cursor->position - 1] != 0) {
        return check_fail(cursor, error, TC_ERR_INVALID_BSON, "Not null terminated string");
    }
    return true;
}

/* A code or DBPointer string: as check_skip_string, and without a NUL inside.
 * libbson appends these with strlen(), so one would be cut short silently the
 * first time a document holding it is rewritten: refused at the door instead. */
static bool check_skip_string_without_nul(check_cursor_t *cursor, bson_error_t *error)
{
    size_t start = cursor->position + 4;
    if (!check_skip_string(cursor, error)) {
        return false;
    }
    if (memchr(cursor->data + start, 0, cursor->position - start - 1) != NULL) {
        return check_fail(cursor, error, TC_ERR_INVALID_BSON,
                          "a JavaScript code or DBPointer string holds a NUL byte, which this server cannot store");
    }
    return true;
}

/* Skips a NUL-terminated string; safe because data[limit - 1] is 0. */
static bool check_skip_cstring(check_cursor_t *cursor, bson_error_t *error)
{
    if (!check_skip(cursor, 0, error)) {
        return false;
    }
    size_t length = strlen((const char *)cursor->data + cursor->position);
    return check_skip(cursor, length + 1, error);
}

static bool check_push_frame(check_cursor_t *cursor, check_frame_t *frames, size_t *depth,
                             bool code_with_scope, bson_error_t *error)
{
    if (*depth >= WIRE_MAX_BSON_DEPTH) {
        return check_fail(cursor, error, TC_ERR_OVERFLOW,
                          "BSONObj exceeds maximum nested object depth");
    }
    size_t start = cursor->position;
    uint32_t length = 0;
    if (!check_read_uint32(cursor, &length, error)) {
        return false;
    }
    if ((int32_t)length < 5) {
        return check_fail(cursor, error, TC_ERR_INVALID_BSON,
                          "Nested BSON object has to be at least 5 bytes");
    }
    (*depth)++;
    frames[*depth].end = start + length;
    frames[*depth].code_with_scope = code_with_scope;
    return true;
}

static bool check_element_value(check_cursor_t *cursor, uint8_t type, check_frame_t *frames,
                                size_t *depth, bson_error_t *error)
{
    switch (type) {
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_NULL:
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_MAXKEY:
        return check_skip(cursor, 0, error);
    case BSON_TYPE_INT32:
        return check_skip(cursor, 4, error);
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_TIMESTAMP:
    case BSON_TYPE_INT64:
        return check_skip(cursor, 8, error);
    case BSON_TYPE_OID:
        return check_skip(cursor, 12, error);
    case BSON_TYPE_DECIMAL128:
        return check_skip(cursor, 16, error);
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return check_skip_string(cursor, error);
    case BSON_TYPE_CODE:
        return check_skip_string_without_nul(cursor, error);
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return check_push_frame(cursor, frames, depth, false, error);
    case BSON_TYPE_BINARY: {
        uint32_t length = 0;
        size_t subtype = cursor->position + 4;
        if (!check_read_uint32(cursor, &length, error) || !check_skip(cursor, 1, error) ||
            !check_skip(cursor, length, error)) {
            return false;
        }
        /* The old binary subtype 2 repeats its length inside: libbson's iterator
         * stops at one that does not match, so refused here. */
        if (cursor->data[subtype] == BSON_SUBTYPE_BINARY_DEPRECATED &&
            (length < 4 || (uint32_t)wire_load_int32(cursor->data + subtype + 1) != length - 4)) {
            return check_fail(cursor, error, TC_ERR_INVALID_BSON,
                              "the inner length of a binary of the deprecated subtype 2 is not its length less 4");
        }
        return true;
    }
    case BSON_TYPE_BOOL: {
        size_t start = cursor->position;
        if (!check_skip(cursor, 1, error)) {
            return false;
        }
        if (cursor->data[start] > 1) {
            return check_fail(cursor, error, TC_ERR_INVALID_BSON,
                              "BSON bool is neither false nor true");
        }
        return true;
    }
    case BSON_TYPE_REGEX:
        return check_skip_cstring(cursor, error) && check_skip_cstring(cursor, error);
    case BSON_TYPE_DBPOINTER:
        return check_skip_string_without_nul(cursor, error) && check_skip(cursor, 12, error);
    case BSON_TYPE_CODEWSCOPE:
        /* A frame for the total size, then the code string, then the scope object. */
        return check_push_frame(cursor, frames, depth, true, error) &&
               check_skip_string_without_nul(cursor, error) &&
               check_push_frame(cursor, frames, depth, false, error);
    default: {
        char reason[64];
        snprintf(reason, sizeof reason, "Unrecognized BSON type %u", (unsigned)type);
        return check_fail(cursor, error, TC_ERR_INVALID_BSON, reason);
    }
    }
}

bool wire_bson_check(const uint8_t *data, size_t available, size_t *out_length,
                     bson_error_t *error)
{
    check_frame_t frames[WIRE_MAX_BSON_DEPTH + 1];
    size_t depth = 0;
    check_cursor_t cursor = {.data = data, .position = 0, .limit = 0, .field_name = NULL};

    if (available < 5) {
        return check_fail(&cursor, error, TC_ERR_INVALID_BSON,
                          "BSON data has to be at least 5 bytes");
    }
    int32_t length = wire_load_int32(data);
    if (length < 5) {
        return check_fail(&cursor, error, TC_ERR_INVALID_BSON,
                          "BSON data has to be at least 5 bytes");
    }
    if ((size_t)length > available) {
        return check_fail(&cursor, error, TC_ERR_INVALID_BSON, "Incorrect BSON length");
    }
    if (data[length - 1] != 0) {
        return check_fail(&cursor, error, TC_ERR_INVALID_BSON,
                          "BSON object not terminated with EOO");
    }
    cursor.limit = (size_t)length;
    cursor.position = 4;
    frames[0].end = (size_t)length;
    frames[0].code_with_scope = false;

    for (;;) {
        if (cursor.position >= cursor.limit) {
            return check_fail(&cursor, error, TC_ERR_INVALID_BSON,
                              "BSON size is larger than buffer size");
        }
        uint8_t type = data[cursor.position];
        if (type == 0) {
            /* End of an object: it must end exactly where its length said. */
            cursor.position++;
            if (cursor.position != frames[depth].end) {
                return check_fail(&cursor, error, TC_ERR_INVALID_BSON, "incorrect BSON length");
            }
            if (depth == 0) {
                break;
            }
            depth--;
            if (frames[depth].code_with_scope) {
                if (cursor.position != frames[depth].end) {
                    return check_fail(&cursor, error, TC_ERR_INVALID_BSON,
                                      "incorrect BSON length");
                }
                depth--;
            }
            continue;
        }
        /* type != 0 and data[limit - 1] == 0, so the name's NUL is in bounds. */
        cursor.field_name = (const char *)data + cursor.position + 1;
        size_t name_length = strlen(cursor.field_name);
        cursor.position += 1 + name_length + 1;
        /* libbson's visitors (bson_validate, the JSON writers) stop at a name
         * that is not UTF-8, so such a document is refused at the door. */
        if (!bson_utf8_validate(cursor.field_name, name_length, false)) {
            return check_fail(&cursor, error, TC_ERR_INVALID_BSON, "Field name is not valid UTF-8");
        }
        if (!check_element_value(&cursor, type, frames, &depth, error)) {
            return false;
        }
    }
    *out_length = (size_t)length;
    return true;
}

bool wire_document_load(const uint8_t *data, size_t available, bson_t *out_document,
                        size_t *out_length, bson_error_t *error)
{
    size_t length = 0;
    if (!wire_bson_check(data, available, &length, error)) {
        return false;
    }
    if (length > WIRE_MAX_BSON_INTERNAL_SIZE) {
        return tc_error_set(error, TC_ERR_LOCATION_BSON_TOO_LARGE,
                            "BSONObj size: %zu (0x%zX) is invalid. Size must be between 0 and "
                            "%d(%dMB)",
                            length, length, WIRE_MAX_BSON_INTERNAL_SIZE,
                            WIRE_MAX_BSON_INTERNAL_SIZE / (1024 * 1024));
    }
    /* wire_bson_check walked every element as libbson's iterator will: no second walk. */
    if (!bson_init_static(out_document, data, length)) {
        return tc_error_set(error, TC_ERR_INVALID_BSON, "BSON document of %zu bytes is malformed", length);
    }
    *out_length = length;
    return true;
}
