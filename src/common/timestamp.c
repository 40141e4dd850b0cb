/* BSON Timestamps as one ordered number: see timestamp.h. */
#include "common/timestamp.h"

uint64_t timestamp_of_iter(const bson_iter_t *iter)
{
    uint32_t seconds, increment;
    if (!BSON_ITER_HOLDS_TIMESTAMP(iter)) {
        return 0;
    }
    bson_iter_timestamp(iter, &seconds, &increment);
    return (uint64_t)seconds << 32 | increment;
}

uint64_t timestamp_find(const bson_t *document, const char *key)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, document, key) ? timestamp_of_iter(&iter) : 0;
}

void timestamp_append(bson_t *out, const char *key, uint64_t time)
{
    bson_append_timestamp(out, key, -1, (uint32_t)(time >> 32), (uint32_t)time);
}
