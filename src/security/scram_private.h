/* Private to the two sides of SCRAM (scram.c, scram_client.c): the hashing
 * steps and the message tokenizer they share. */
#ifndef TC_SECURITY_SCRAM_PRIVATE_H
#define TC_SECURITY_SCRAM_PRIVATE_H

#include "security/scram.h"

/* HMAC and H of the mechanism's hash; out holds scram_hash_length() bytes. */
bool scram_hmac(scram_mechanism_t mechanism, const uint8_t *key, size_t key_length, const void *data,
                size_t data_length, uint8_t *out);
bool scram_hash(scram_mechanism_t mechanism, const uint8_t *data, size_t length, uint8_t *out);

/* The next comma-separated attribute of [*cursor, end): returns its start and
 * length and moves *cursor past the comma. */
bool scram_next_attribute(const char **cursor, const char *end, const char **out_start, size_t *out_length);

#endif
