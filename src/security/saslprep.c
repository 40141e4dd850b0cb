/* SASLprep (RFC 4013 over RFC 3454's tables): map, then refuse what may not appear
 * in a prepared string. The tables are ranges transcribed from RFC 3454 appendices
 * B.1 and C; see saslprep.h for what is left out. */
#include "security/saslprep.h"

#include <string.h>

typedef struct code_point_range {
    uint32_t first;
    uint32_t last;
} code_point_range_t;

/* RFC 3454 B.1: commonly mapped to nothing. */
static const code_point_range_t mapped_to_nothing[] = {
    {0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x1806, 0x1806}, {0x180B, 0x180D}, {0x200B, 0x200D},
    {0x2060, 0x2060}, {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF},
};

/* RFC 3454 C.1.2: non-ASCII space characters (mapped to U+0020 by SASLprep). */
static const code_point_range_t non_ascii_spaces[] = {
    {0x00A0, 0x00A0}, {0x1680, 0x1680}, {0x2000, 0x200B}, {0x202F, 0x202F},
    {0x205F, 0x205F}, {0x3000, 0x3000},
};

/* RFC 3454 C.2.1, C.2.2, C.3, C.4, C.6, C.7, C.8, C.9 (C.5, the surrogates, are
 * refused as invalid UTF-8). */
static const code_point_range_t prohibited[] = {
    {0x0000, 0x001F}, {0x007F, 0x009F},                       /* C.2.1, C.2.2 controls */
    {0x0340, 0x0341},                                         /* C.8 */
    {0x06DD, 0x06DD}, {0x070F, 0x070F}, {0x180E, 0x180E},     /* C.2.2 */
    {0x200C, 0x200F},                                         /* C.2.2, C.8 */
    {0x2028, 0x202E},                                         /* C.2.2, C.8 */
    {0x2060, 0x2063}, {0x206A, 0x206F},                       /* C.2.2, C.8 */
    {0x2FF0, 0x2FFB},                                         /* C.7 */
    {0xE000, 0xF8FF},                                         /* C.3 private use */
    {0xFDD0, 0xFDEF},                                         /* C.4 */
    {0xFEFF, 0xFEFF},                                         /* C.2.2 */
    {0xFFF9, 0xFFFF},                                         /* C.2.2, C.6, C.4 */
    {0x1D173, 0x1D17A},                                       /* C.2.2 */
    {0xE0001, 0xE0001}, {0xE0020, 0xE007F},                   /* C.9 tags */
    {0xF0000, 0xFFFFD}, {0x100000, 0x10FFFD},                 /* C.3 private use */
};

static bool in_table(const code_point_range_t *table, size_t count, uint32_t code_point)
{
    for (size_t i = 0; i < count; i++) {
        if (code_point >= table[i].first && code_point <= table[i].last) {
            return true;
        }
    }
    return false;
}

/* C.4: the last two code points of every plane are non-characters. */
static bool is_plane_non_character(uint32_t code_point)
{
    return (code_point & 0xFFFE) == 0xFFFE;
}

/* Decodes one UTF-8 sequence at text; returns its length, 0 if invalid (overlong
 * forms, surrogates encoded directly and code points past U+10FFFF included). */
static size_t utf8_decode(const unsigned char *text, uint32_t *out_code_point)
{
    unsigned char lead = text[0];
    size_t length;
    uint32_t code_point;
    uint32_t minimum;
    if (lead < 0x80) {
        *out_code_point = lead;
        return 1;
    } else if ((lead & 0xE0) == 0xC0) {
        length = 2, code_point = lead & 0x1F, minimum = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
        length = 3, code_point = lead & 0x0F, minimum = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
        length = 4, code_point = lead & 0x07, minimum = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < length; i++) {
        if ((text[i] & 0xC0) != 0x80) {
            return 0; /* also stops at the terminating NUL */
        }
        code_point = code_point << 6 | (text[i] & 0x3F);
    }
    if (code_point < minimum || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
        return 0;
    }
    *out_code_point = code_point;
    return length;
}

bool saslprep(const char *text, char **out_prepared, bson_error_t *error)
{
    const unsigned char *cursor = (const unsigned char *)text;
    size_t length = strlen(text);
    /* Mapping only shortens (B.1) or keeps lengths (a space is 1 byte, every
     * C.1.2 character at least 2), so the input's length is enough. */
    char *prepared = bson_malloc(length + 1);
    size_t written = 0;
    while (*cursor != '\0') {
        uint32_t code_point;
        size_t sequence_length = utf8_decode(cursor, &code_point);
        if (sequence_length == 0) {
            bson_free(prepared);
            return tc_error_set(error, TC_ERR_BAD_VALUE, "SASLprep: the string is not valid UTF-8");
        }
        if (in_table(mapped_to_nothing, sizeof mapped_to_nothing / sizeof mapped_to_nothing[0], code_point)) {
            cursor += sequence_length;
            continue;
        }
        if (in_table(non_ascii_spaces, sizeof non_ascii_spaces / sizeof non_ascii_spaces[0], code_point)) {
            prepared[written++] = ' ';
            cursor += sequence_length;
            continue;
        }
        if (in_table(prohibited, sizeof prohibited / sizeof prohibited[0], code_point) ||
            is_plane_non_character(code_point)) {
            bson_free(prepared);
            return tc_error_set(error, TC_ERR_BAD_VALUE, "SASLprep: prohibited character U+%04X",
                                (unsigned)code_point);
        }
        memcpy(prepared + written, cursor, sequence_length);
        written += sequence_length;
        cursor += sequence_length;
    }
    prepared[written] = '\0';
    *out_prepared = prepared;
    return true;
}
