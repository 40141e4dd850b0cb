/* BSON Timestamps (cluster times, opTimes, operationTime) as one ordered number,
 * seconds << 32 | increment, the form every comparison of two times in the
 * project uses. */
#ifndef TC_COMMON_TIMESTAMP_H
#define TC_COMMON_TIMESTAMP_H

#include <bson/bson.h>
#include <stdint.h>

/* The iterator's Timestamp as one number; 0 when it holds another type. */
uint64_t timestamp_of_iter(const bson_iter_t *iter);

/* document[key] as one number; 0 when key is missing or not a Timestamp. */
uint64_t timestamp_find(const bson_t *document, const char *key);

void timestamp_append(bson_t *out, const char *key, uint64_t time);

#endif
