/* Base64 as RFC 4648 section 4 defines it: the SCRAM messages carry nonces, salts
 * and proofs in it, and mongod stores salts and keys in it. */
#include "security/base64.h"

#include <bson/bson.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_length(size_t length)
{
    return (length + 2) / 3 * 4;
}

void base64_encode(const uint8_t *data, size_t length, char *out)
{
    size_t in = 0;
    char *cursor = out;
    while (in + 3 <= length) {
        uint32_t group = (uint32_t)data[in] << 16 | (uint32_t)data[in + 1] << 8 | data[in + 2];
        *cursor++ = alphabet[group >> 18];
        *cursor++ = alphabet[(group >> 12) & 63];
        *cursor++ = alphabet[(group >> 6) & 63];
        *cursor++ = alphabet[group & 63];
        in += 3;
    }
    if (length - in == 1) {
        uint32_t group = (uint32_t)data[in] << 16;
        *cursor++ = alphabet[group >> 18];
        *cursor++ = alphabet[(group >> 12) & 63];
        *cursor++ = '=';
        *cursor++ = '=';
    } else if (length - in == 2) {
        uint32_t group = (uint32_t)data[in] << 16 | (uint32_t)data[in + 1] << 8;
        *cursor++ = alphabet[group >> 18];
        *cursor++ = alphabet[(group >> 12) & 63];
        *cursor++ = alphabet[(group >> 6) & 63];
        *cursor++ = '=';
    }
    *cursor = '\0';
}

char *base64_encode_new(const uint8_t *data, size_t length)
{
    char *out = bson_malloc(base64_encoded_length(length) + 1);
    base64_encode(data, length, out);
    return out;
}

static int base64_value(char character)
{
    if (character >= 'A' && character <= 'Z') {
        return character - 'A';
    }
    if (character >= 'a' && character <= 'z') {
        return character - 'a' + 26;
    }
    if (character >= '0' && character <= '9') {
        return character - '0' + 52;
    }
    if (character == '+') {
        return 62;
    }
    if (character == '/') {
        return 63;
    }
    return -1;
}

bool base64_decode(const char *text, size_t text_length, uint8_t *out, size_t capacity, size_t *out_length)
{
    if (text_length % 4 != 0) {
        return false;
    }
    size_t written = 0;
    for (size_t in = 0; in < text_length; in += 4) {
        bool last = in + 4 == text_length;
        int values[4];
        int padding = 0;
        for (int i = 0; i < 4; i++) {
            char character = text[in + i];
            if (character == '=' && last && i >= 2) {
                padding++;
                values[i] = 0;
                continue;
            }
            if (padding > 0) {
                return false; /* data after padding */
            }
            values[i] = base64_value(character);
            if (values[i] < 0) {
                return false;
            }
        }
        uint32_t group = (uint32_t)values[0] << 18 | (uint32_t)values[1] << 12 | (uint32_t)values[2] << 6 |
                         (uint32_t)values[3];
        size_t produced = 3 - (size_t)padding;
        if (written + produced > capacity) {
            return false;
        }
        /* Bits under the padding must be zero in canonical base64. */
        if ((padding == 1 && (group & 0xff) != 0) || (padding == 2 && (group & 0xffff) != 0)) {
            return false;
        }
        out[written++] = (uint8_t)(group >> 16);
        if (produced > 1) {
            out[written++] = (uint8_t)(group >> 8);
        }
        if (produced > 2) {
            out[written++] = (uint8_t)group;
        }
    }
    *out_length = written;
    return true;
}
