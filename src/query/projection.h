/* find-command projections as mongod 6.0 parses and applies them: inclusion or
 * exclusion of dotted paths (through sub-documents and arrays of them), _id included
 * by default, {$slice: n | [skip, limit]}, {$elemMatch: query} and the positional
 * {"a.$": 1}. Pure logic. */
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
 * {$literal: ...}) are refused with BadValue 2 until they are implemented. A
 * positional "a.$" needs the query: here it is refused with 51050 ("Projections with a
 * positional operator require a matcher"); use projection_compile_with_query().
 * Everything needed is copied; free the result with projection_destroy(). */
projection_t *projection_compile(const bson_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* The same for a projection that accompanies query (the find filter; NULL: none), which
 * the positional "a.b.$" reads: projection_apply() matches the query again on each
 * document (match_document_with_details) and keeps, of the first array on the path
 * a.b, only the element the query matched. Positional errors as mongod's: 31394 ('$'
 * inside the path), 31276 (two of them), 31256/31255 (with $elemMatch), 31395 (an
 * exclusion), 31271 / 31308 (with a sub-object / a literal), 5392900 (".$"), and the
 * query's own parse errors. */
projection_t *projection_compile_with_query(const bson_t *spec, const bson_t *query,
                                            bson_error_t *error) TC_MUST_CHECK;

/* Writes the projected document into out, which the caller passes uninitialised and
 * must bson_destroy() whatever the result (empty on failure). Fails on invalid BSON
 * input and for the positional projection, as mongod's executor does (find prefixes
 * these messages with "Executor error during find command :: caused by :: "): 51246
 * "positional operator '.$' couldn't find a matching element in the array" when the
 * path reaches an array but the query matched no element of one, 51247 "positional
 * operator '.$' element mismatch" when the matched index is past that array's end. */
bool projection_apply(const projection_t *projection, const bson_t *document, bson_t *out,
                      bson_error_t *error) TC_MUST_CHECK;

/* True for an empty projection: documents are returned whole. */
bool projection_is_empty(const projection_t *projection);

/* True for an inclusion projection ({a: 1}, {_id: 1}, {a: {$elemMatch: ...}}, {"a.$": 1});
 * false for an exclusion ({a: 0}, {_id: 0}, {a: {$slice: 2}}) or an empty one. */
bool projection_is_inclusion(const projection_t *projection);

/* True when the result keeps the whole top-level _id (the default). */
bool projection_includes_id(const projection_t *projection);

/* True when a $slice, $elemMatch or positional projection needs the field's full
 * value: such a projection cannot be answered from index keys alone. */
bool projection_has_computed_fields(const projection_t *projection);

/* For an inclusion projection, the dotted paths whose values it reads, in spec order:
 * the included ones and the $slice/$elemMatch/positional ones (a covering index must
 * hold them all), not _id (see projection_includes_id). The strings belong to the
 * projection. Zero paths for an exclusion projection. */
size_t projection_included_path_count(const projection_t *projection);
const char *projection_included_path(const projection_t *projection, size_t index);

/* Safe on NULL. */
void projection_destroy(projection_t *projection);

#endif
