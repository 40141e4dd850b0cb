/* find-command projections as mongod 6.0 parses and applies them: inclusion or
 * exclusion of dotted paths (through sub-documents and arrays of them), _id included
 * by default, {$slice: n | [skip, limit]} and {$elemMatch: query}. Pure logic. */
#ifndef TC_QUERY_PROJECTION_H
#define TC_QUERY_PROJECTION_H

#include "common/error.h"

#include <stddef.h>

typedef struct projection projection_t;

/* Compiles a projection document; spec may be NULL or empty (the whole document is
 * returned). Errors as mongod gives them: 31254 "Cannot do exclusion on field b in
 * inclusion projection", 31253 for the reverse, 31250/31249 path collisions, 31273
 * and 31257-31259 for a bad $slice, 31274/31275 for a bad $elemMatch, FieldPath
 * errors (15998, 16410, 40352). Aggregation expressions ({x: "$y"}, {x: "text"},
 * {$literal: ...}) and the positional "a.$" projection are refused with BadValue 2
 * until they are implemented. Everything needed is copied; free the result with
 * projection_destroy(). */
projection_t *projection_compile(const bson_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* Writes the projected document into out, which the caller passes uninitialised and
 * must bson_destroy() whatever the result. Fails only on invalid BSON input. */
bool projection_apply(const projection_t *projection, const bson_t *document, bson_t *out,
                      bson_error_t *error) TC_MUST_CHECK;

/* True for an empty projection: documents are returned whole. */
bool projection_is_empty(const projection_t *projection);

/* True for an inclusion projection ({a: 1}, {_id: 1}, {a: {$elemMatch: ...}});
 * false for an exclusion ({a: 0}, {_id: 0}, {a: {$slice: 2}}) or an empty one. */
bool projection_is_inclusion(const projection_t *projection);

/* True when the result keeps the whole top-level _id (the default). */
bool projection_includes_id(const projection_t *projection);

/* True when a $slice or $elemMatch needs the field's full value: such a projection
 * cannot be answered from index keys alone. */
bool projection_has_computed_fields(const projection_t *projection);

/* For an inclusion projection, the dotted paths whose values it reads, in spec order:
 * the included ones and the $slice/$elemMatch ones (a covering index must hold them
 * all), not _id (see projection_includes_id). The strings belong to the projection.
 * Zero paths for an exclusion projection. */
size_t projection_included_path_count(const projection_t *projection);
const char *projection_included_path(const projection_t *projection, size_t index);

/* Safe on NULL. */
void projection_destroy(projection_t *projection);

#endif
