/* A document's top-level fields found once (key and offset), then each looked up
 * by key without walking and checking every element again: the proxy reads a
 * command's and a reply's fields many times over (planner, access control, the
 * retry rules, read preference, cluster time). */
#ifndef TC_COMMON_FIELDS_H
#define TC_COMMON_FIELDS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#define FIELDS_INDEXED 32 /* a command rarely has more; past them, lookups walk */

typedef struct field {
    const char *key; /* borrows the document */
    uint32_t key_length;
    uint32_t offset;
} field_t;

/* Borrows the document, which must outlive it and not change. */
typedef struct fields {
    const bson_t *document;
    uint32_t count;
    bool complete; /* every field is indexed */
    field_t items[FIELDS_INDEXED];
} fields_t;

/* Indexes document's top-level fields; false when it cannot be iterated (then
 * every lookup fails). */
bool fields_index(fields_t *fields, const bson_t *document);
/* The first field named key, as bson_iter_init_find finds it. */
bool fields_find(const fields_t *fields, const char *key, bson_iter_t *out_iter);
bool fields_has(const fields_t *fields, const char *key);

#endif
