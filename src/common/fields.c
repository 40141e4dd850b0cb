/* A document's top-level fields found once: the proxy reads a command's (and a
 * reply's) fields many times over (planner, access, retry rules, read preference,
 * cluster time), and each bson_iter_find walks and checks every element again. */
#include "common/fields.h"

#include <string.h>

bool fields_index(fields_t *fields, const bson_t *document)
{
    bson_iter_t iter;
    fields->document = document;
    fields->count = 0;
    fields->complete = true;
    if (!bson_iter_init(&iter, document)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        if (fields->count == FIELDS_INDEXED) {
            fields->complete = false; /* the rest are found by walking, as bson_iter_find does */
            break;
        }
        field_t *field = &fields->items[fields->count++];
        field->key = bson_iter_key(&iter);
        field->key_length = bson_iter_key_len(&iter);
        field->offset = bson_iter_offset(&iter);
    }
    return true;
}

bool fields_find(const fields_t *fields, const char *key, bson_iter_t *out_iter)
{
    size_t key_length = strlen(key);
    for (uint32_t i = 0; i < fields->count; i++) {
        const field_t *field = &fields->items[i];
        if (field->key_length == key_length && memcmp(field->key, key, key_length) == 0) {
            return bson_iter_init_from_data_at_offset(out_iter, bson_get_data(fields->document),
                                                      fields->document->len, field->offset, field->key_length);
        }
    }
    if (fields->complete) {
        return false;
    }
    /* Past the indexed fields: the first match, as bson_iter_init_find, which may be
     * an indexed one only if the key is duplicated (then the indexed one won above). */
    return bson_iter_init_find(out_iter, fields->document, key);
}

bool fields_has(const fields_t *fields, const char *key)
{
    bson_iter_t iter;
    return fields_find(fields, key, &iter);
}
