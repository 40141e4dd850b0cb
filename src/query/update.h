/* Update documents as mongod (6.0) applies them: a replacement document, or the
 * operators $set $unset $inc $mul $min $max $rename $push $addToSet $pull $pullAll
 * $pop $bit $currentDate $setOnInsert with $[] and $[<identifier>] (arrayFilters).
 * Pure logic: compile once, apply to one document at a time; no storage here. */
#ifndef TC_QUERY_UPDATE_H
#define TC_QUERY_UPDATE_H

#include "common/error.h"

typedef struct update_spec update_spec_t;

/* Compiles the `u` value of an update statement. A document whose first field starts
 * with '$' is an operator update, any other document (including {}) a replacement.
 * An array (pipeline-style update) or any other type is refused: FailedToParse 9,
 * or CommandNotSupported 115 for a pipeline, which is not implemented yet.
 * array_filters (NULL-able) is the statement's arrayFilters array; it is ignored for
 * replacements, as mongod does. Errors carry mongod's code and message: FailedToParse
 * 9 ("Unknown modifier: $foo. ..."), ConflictingUpdateOperators 40, EmptyFieldName
 * 56, BadValue 2, TypeMismatch 14, DollarPrefixedFieldName 52 ... The positional '$'
 * operator is refused with BadValue 2 (it needs the query's matched array index).
 * Everything needed is copied; free the result with update_destroy(). */
update_spec_t *update_compile_value(const bson_value_t *update, const bson_t *array_filters,
                                    bson_error_t *error) TC_MUST_CHECK;

/* The same for an update given as a document. */
update_spec_t *update_compile(const bson_t *update, const bson_t *array_filters,
                              bson_error_t *error) TC_MUST_CHECK;

/* True for a replacement-style update (change streams report "replace" for it). */
bool update_is_replacement(const update_spec_t *spec);

/* Applies spec to document and writes the new document into out_document, which the
 * caller passes uninitialised and must bson_destroy() whatever the result (it is
 * initialised empty on failure). Field order follows mongod 5.0+: existing fields keep
 * their place, new fields are appended, operators visit fields in lexicographic order
 * (numeric names in numeric order).
 *
 * is_upsert_insert: the document is the seed of an upsert (see
 * update_build_upsert_seed): $setOnInsert applies, _id is moved first and an ObjectId
 * _id is generated when missing.
 *
 * out_description (NULL-able, uninitialised, caller destroys): for an operator
 * update, {updatedFields: {...}, removedFields: [...], truncatedArrays: []} as a
 * change stream reports the update; for a replacement an empty document.
 * out_changed (NULL-able): false when the update was a no-op (mongod's nModified 0).
 *
 * Errors as mongod raises them while applying: ImmutableField 66 (changing _id),
 * PathNotViable 28, TypeMismatch 14 ($inc on a string), BadValue 2 ($push to a
 * non-array, int64 overflow), ... On failure nothing is half-applied: out_document is
 * empty and document untouched. */
bool update_apply(const update_spec_t *spec, const bson_t *document, bool is_upsert_insert,
                  bson_t *out_document, bson_t *out_description, bool *out_changed,
                  bson_error_t *error) TC_MUST_CHECK;

/* The document an upsert starts from, before update_apply(..., true, ...): the
 * equality conditions of filter (plain values, $eq, a one-element $in, inside $and or
 * a one-branch $or), dotted paths expanded to sub-documents, fields in path order.
 * For a replacement spec only _id is taken from the filter, as mongod does. spec may
 * be NULL (treated as an operator update). out_document is uninitialised; the caller
 * bson_destroy()s it whatever the result. Errors: NotSingleValueField 54 ("cannot infer
 * query fields to set, path 'a' is matched twice"), NotExactValueField 111. */
bool update_build_upsert_seed(const update_spec_t *spec, const bson_t *filter, bson_t *out_document,
                              bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void update_destroy(update_spec_t *spec);

#endif
