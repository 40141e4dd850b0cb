/* A read-only bson_t over the document or array an iterator points at: the
 * one "iterator to sub-document" helper. The view borrows the iterator's
 * buffer (no copy, nothing to destroy) and lives as long as that buffer. */
#ifndef TC_COMMON_BSON_VIEW_H
#define TC_COMMON_BSON_VIEW_H

#include <bson/bson.h>
#include <stdbool.h>

/* Fills out with a view of iter's embedded document or array; false, with out
 * untouched or invalid, when iter holds another type or a malformed one. */
static inline bool bson_view_of(const bson_iter_t *iter, bson_t *out)
{
    uint32_t length = 0;
    const uint8_t *data = NULL;
    if (BSON_ITER_HOLDS_DOCUMENT(iter)) {
        bson_iter_document(iter, &length, &data);
    } else if (BSON_ITER_HOLDS_ARRAY(iter)) {
        bson_iter_array(iter, &length, &data);
    } else {
        return false;
    }
    return bson_init_static(out, data, length);
}

#endif
