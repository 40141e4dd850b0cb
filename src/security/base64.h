/* Standard base64 (RFC 4648, with padding) for the SCRAM messages and the
 * credentials kept in admin.system.users. Strict decoding: a string that is not
 * canonical base64 is refused, never half-read. */
#ifndef TC_SECURITY_BASE64_H
#define TC_SECURITY_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Characters base64_encode writes for length bytes, without the terminating NUL. */
size_t base64_encoded_length(size_t length);

/* Encodes length bytes into out (base64_encoded_length(length) + 1 bytes); out is
 * NUL-terminated. */
void base64_encode(const uint8_t *data, size_t length, char *out);

/* Encodes into a new string; the caller frees it with bson_free(). */
char *base64_encode_new(const uint8_t *data, size_t length);

/* Decodes text_length characters of text into out (room for capacity bytes).
 * Returns false on a character outside the alphabet, wrong padding, a length
 * that is not a multiple of 4, or a result longer than capacity. */
bool base64_decode(const char *text, size_t text_length, uint8_t *out, size_t capacity,
                   size_t *out_length) __attribute__((warn_unused_result));

#endif
