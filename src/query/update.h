/* Update documents as mongod (6.0) applies them: a replacement document, the
 * operators $set $unset $inc $mul $min $max $rename $push $addToSet $pull $pullAll
 * $pop $bit $currentDate $setOnInsert with the positional '$', $[] and
 * $[<identifier>] (arrayFilters), or a pipeline of $addFields/$set, $project, $unset,
 * $replaceRoot/$replaceWith stages. Pure logic: compile once, apply to one document at
 * a time; no storage here. */
#ifndef TC_QUERY_UPDATE_H
#define TC_QUERY_UPDATE_H

#include "common/error.h"
#include "query/expression.h"

typedef struct update_spec update_spec_t;

/* Compiles the `u` value of an update statement. A document whose first field starts
 * with '$' is an operator update, any other document (including {}) a replacement, an
 * array a pipeline-style update; any other type is refused with FailedToParse 9.
 * array_filters (NULL-able) is the statement's arrayFilters array; it is ignored for
 * replacements, as mongod does, and refused for a pipeline unless empty (FailedToParse
 * 9). Errors carry mongod's code and message: FailedToParse 9 ("Unknown modifier:
 * $foo. ..."), ConflictingUpdateOperators 40, EmptyFieldName 56, BadValue 2 ("Too many
 * positional (i.e. '$') elements found in path 'a.$.b.$'"), TypeMismatch 14,
 * DollarPrefixedFieldName 52, InvalidOptions 72 ("$match is not allowed to be used
 * within an update"), and the pipeline stages' own parse errors ...
 * Everything needed is copied; free the result with update_destroy(). */
update_spec_t *update_compile_value(const bson_value_t *update, const bson_t *array_filters,
                                    bson_error_t *error) TC_MUST_CHECK;

/* update_compile_value() for a command with `let`: a pipeline update's
 * expressions read context's variables and $$NOW (context NULL: none). */
update_spec_t *update_compile_with_context(const bson_value_t *update, const bson_t *array_filters,
                                           const expression_context_t *context, bson_error_t *error) TC_MUST_CHECK;

/* The same for an update given as a document (an operator update or a replacement). */
update_spec_t *update_compile(const bson_t *update, const bson_t *array_filters,
                              bson_error_t *error) TC_MUST_CHECK;

/* True for a replacement-style update (change streams report "replace" for it). */
bool update_is_replacement(const update_spec_t *spec);

/* True for a pipeline-style update. */
bool update_is_pipeline(const update_spec_t *spec);

/* True when a path of the update holds the positional '$': applying it needs the array
 * index the query matched (match_document_with_details() in query/match.h). */
bool update_uses_positional(const update_spec_t *spec);

/* How update_apply_with_options() applies an update to one document. */
typedef struct update_apply_options {
    /* The document is the seed of an upsert (see update_build_upsert_seed):
     * $setOnInsert applies, _id is moved first and an ObjectId _id is generated when
     * missing. */
    bool is_upsert_insert;
    /* What the statement's query matched in this document: match_details_t's
     * array_index when has_array_index, else NULL. The positional '$' stands for it; with
     * NULL (always so for an upsert's insert) a positional update fails with BadValue 2
     * "The positional operator did not find the match needed from the query.". */
    const char *matched_array_index;
} update_apply_options_t;

/* Applies spec to document and writes the new document into out_document, which the
 * caller passes uninitialised and must bson_destroy() whatever the result (it is
 * initialised empty on failure). Field order follows mongod 5.0+: existing fields keep
 * their place, new fields are appended, operators visit fields in lexicographic order
 * (numeric names in numeric order). options (NULL-able: all false/NULL) as above.
 *
 * A pipeline runs on the document alone ($$ROOT is the document, $$NOW is read once per
 * call); its result replaces the document as a replacement does: the original _id is
 * kept when the result has none, and may not change.
 *
 * out_description (NULL-able, uninitialised, caller destroys): for an operator or a
 * pipeline update, {updatedFields: {...}, removedFields: [...], truncatedArrays: [...]} as
 * a change stream reports the update; for a replacement an empty document. An operator
 * update's lists the paths it set ($push's appended elements as "field.N"), with
 * truncatedArrays empty; a pipeline's is the difference between the two documents as
 * mongod's oplog diff gives it: sub-documents field by field, arrays element by element
 * with a shortened array in truncatedArrays ({field, newSize}) and its unchanged prefix
 * left out, or whole when that is smaller (update_difference.c).
 * out_changed (NULL-able): false when the update was a no-op (mongod's nModified 0).
 *
 * Errors as mongod raises them while applying: ImmutableField 66 (changing _id),
 * PathNotViable 28, TypeMismatch 14 ($inc on a string), BadValue 2 ($push to a
 * non-array, int64 overflow, the positional operator without a matched index), the
 * pipeline's expression errors ... On failure nothing is half-applied: out_document is
 * empty and document untouched. */
bool update_apply_with_options(const update_spec_t *spec, const bson_t *document,
                               const update_apply_options_t *options, bson_t *out_document,
                               bson_t *out_description, bool *out_changed,
                               bson_error_t *error) TC_MUST_CHECK;

/* update_apply_with_options() with only is_upsert_insert set (no matched index). */
bool update_apply(const update_spec_t *spec, const bson_t *document, bool is_upsert_insert,
                  bson_t *out_document, bson_t *out_description, bool *out_changed,
                  bson_error_t *error) TC_MUST_CHECK;

/* The document an upsert starts from, before update_apply(..., true, ...): the
 * equality conditions of filter (plain values, $eq, a one-element $in, inside $and or
 * a one-branch $or), dotted paths expanded to sub-documents, fields in path order.
 * For a replacement spec only _id is taken from the filter, as mongod does (operator
 * and pipeline updates take them all). spec may
 * be NULL (treated as an operator update). out_document is uninitialised; the caller
 * bson_destroy()s it whatever the result. Errors: NotSingleValueField 54 ("cannot infer
 * query fields to set, path 'a' is matched twice"), NotExactValueField 111. */
bool update_build_upsert_seed(const update_spec_t *spec, const bson_t *filter, bson_t *out_document,
                              bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void update_destroy(update_spec_t *spec);

#endif
