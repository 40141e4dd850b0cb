/* A collection's validator: the matcher decides whether a document is valid;
 * only when it is not are its clauses matched one by one to write errInfo's
 * details, the shape of mongod 6.0's doc_validation_error.cpp for query
 * operators (a failing write is rare, so that cost is paid only then). */
#include "query/validator.h"

#include "common/bson_view.h"
#include "query/json_schema.h"
#include "query/match.h"
#include "query/value_format.h"

#include <string.h>

struct validator {
    bson_t *filter; /* owned (a bson_t inside a malloc'ed struct would be misaligned) */
    match_expression_t *matcher;
    expression_context_t context;
    bool has_context;
};

validator_t *validator_compile(const bson_t *filter, const expression_context_t *context, bson_error_t *error)
{
    validator_t *validator = bson_malloc0(sizeof *validator);
    validator->filter = bson_copy(filter);
    if (context != NULL) {
        validator->context = *context;
        validator->context.variables = NULL; /* a validator has no let */
        validator->has_context = true;
    }
    validator->matcher = match_compile_with_context(filter, validator->has_context ? &validator->context : NULL,
                                                    error);
    if (validator->matcher == NULL) {
        validator_destroy(validator);
        return NULL;
    }
    return validator;
}

void validator_destroy(validator_t *validator)
{
    if (validator == NULL) {
        return;
    }
    match_destroy(validator->matcher);
    bson_destroy(validator->filter);
    bson_free(validator);
}

/* --- errInfo.details ------------------------------------------------------------ */

/* A clause: one operator on one path ({a: {$gt: 1}}, {a: 5}) or one pathless
 * operator ({$or: [...]}), as mongod's parser makes each a child of the
 * enclosing $and. */
typedef struct clause_list {
    bson_t **items;
    size_t count;
} clause_list_t;

static bson_t *clause_add(clause_list_t *list)
{
    list->items = bson_realloc(list->items, (list->count + 1) * sizeof(bson_t *));
    list->items[list->count] = bson_new();
    return list->items[list->count++];
}

static void clause_list_cleanup(clause_list_t *list)
{
    for (size_t i = 0; i < list->count; i++) {
        bson_destroy(list->items[i]);
    }
    bson_free(list->items);
}

static bool is_operator_document(const bson_iter_t *iter)
{
    bson_iter_t first;
    if (!BSON_ITER_HOLDS_DOCUMENT(iter) || !bson_iter_recurse(iter, &first) || !bson_iter_next(&first)) {
        return false;
    }
    const char *key = bson_iter_key(&first);
    return key[0] == '$' && strcmp(key, "$ref") != 0 && strcmp(key, "$id") != 0 && strcmp(key, "$db") != 0;
}

/* Splits filter into its clauses; {a: {$regex, $options}} stays one, the two
 * fields being one operator. */
static void split_clauses(const bson_t *filter, clause_list_t *out)
{
    bson_iter_t iter, operators;
    bson_iter_init(&iter, filter);
    while (bson_iter_next(&iter)) {
        const char *path = bson_iter_key(&iter);
        bool splits = path[0] != '$' && is_operator_document(&iter) && bson_iter_recurse(&iter, &operators);
        bson_iter_t probe;
        if (splits && bson_iter_recurse(&iter, &probe) && bson_iter_find(&probe, "$options")) {
            splits = false;
        }
        if (!splits) {
            bson_append_iter(clause_add(out), path, -1, &iter);
            continue;
        }
        while (bson_iter_next(&operators)) {
            bson_t *clause = clause_add(out), inner;
            BSON_APPEND_DOCUMENT_BEGIN(clause, path, &inner);
            bson_append_iter(&inner, bson_iter_key(&operators), -1, &operators);
            bson_append_document_end(clause, &inner);
        }
    }
}

static bool filter_matches(const validator_t *validator, const bson_t *filter, const bson_t *document)
{
    bson_error_t ignored;
    match_expression_t *matcher =
        match_compile_with_context(filter, validator->has_context ? &validator->context : NULL, &ignored);
    bool matches = matcher != NULL && match_document(matcher, document);
    match_destroy(matcher);
    return matches;
}

static void describe_filter(const validator_t *validator, const bson_t *filter, const bson_t *document,
                            bool satisfied, bson_t *out);

/* Opens the position-th entry {index, details: {...}} of a clause list;
 * describe the clause into *details, then end_clause_entry(). */
static void begin_clause_entry(bson_t *array, uint32_t position, uint32_t index, bson_t *item, bson_t *details)
{
    char key[16];
    const char *key_string;
    bson_uint32_to_string(position, &key_string, key, sizeof key);
    BSON_APPEND_DOCUMENT_BEGIN(array, key_string, item);
    BSON_APPEND_INT32(item, "index", (int32_t)index);
    BSON_APPEND_DOCUMENT_BEGIN(item, "details", details);
}

static void end_clause_entry(bson_t *array, bson_t *item, bson_t *details)
{
    bson_append_document_end(item, details);
    bson_append_document_end(array, item);
}

/* $and and $or list the clauses the document fails, $nor those it satisfies. */
static void describe_logical(const validator_t *validator, const char *name, const bson_iter_t *iter,
                             const bson_t *document, bool satisfied, bson_t *out)
{
    bool is_nor = strcmp(name, "$nor") == 0;
    bson_t array, items_view, child, item, details;
    bson_iter_t items;
    uint32_t index = 0, listed = 0;
    BSON_APPEND_UTF8(out, "operatorName", name);
    BSON_APPEND_ARRAY_BEGIN(out, is_nor ? "clausesSatisfied" : "clausesNotSatisfied", &array);
    if (bson_view_of(iter, &items_view) && bson_iter_init(&items, &items_view)) {
        for (; bson_iter_next(&items); index++) {
            if (!bson_view_of(&items, &child) || filter_matches(validator, &child, document) != is_nor) {
                continue;
            }
            begin_clause_entry(&array, listed++, index, &item, &details);
            describe_filter(validator, &child, document, satisfied != is_nor, &details);
            end_clause_entry(&array, &item, &details);
        }
    }
    bson_append_array_end(out, &array);
}

static bool is_comparison(const char *name)
{
    static const char *const names[] = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", NULL};
    for (const char *const *candidate = names; *candidate != NULL; candidate++) {
        if (strcmp(*candidate, name) == 0) {
            return true;
        }
    }
    return false;
}

/* reason and consideredValue of a comparison or $type on path, when the path
 * reaches one value without crossing an array (through arrays mongod lists
 * every value considered, which is left out here). */
static void describe_considered(const char *operator_name, const char *path, const bson_t *document, bson_t *out)
{
    bool typed = strcmp(operator_name, "$type") == 0;
    if (!typed && !is_comparison(operator_name)) {
        return;
    }
    bson_iter_t iter, found;
    if (!bson_iter_init(&iter, document) || !bson_iter_find_descendant(&iter, path, &found)) {
        if (strchr(path, '.') == NULL) {
            BSON_APPEND_UTF8(out, "reason", "field was missing");
        }
        return;
    }
    if (BSON_ITER_HOLDS_ARRAY(&found)) {
        return;
    }
    BSON_APPEND_UTF8(out, "reason", typed ? "type did not match" : "comparison failed");
    bson_append_iter(out, "consideredValue", -1, &found);
    if (typed) {
        BSON_APPEND_UTF8(out, "consideredType", value_type_name(bson_iter_type(&found)));
    }
}

/* {$jsonSchema: schema}: the rules the document breaks, each as mongod writes
 * it; under $nor, only that it matched. The schema compiled with the filter. */
static void describe_json_schema(const bson_t *clause, const bson_iter_t *iter, const bson_t *document,
                                 bool satisfied, bson_t *out)
{
    bson_t spec, rules;
    bson_error_t ignored;
    json_schema_t *schema = bson_view_of(iter, &spec) ? json_schema_compile(&spec, &ignored) : NULL;
    BSON_APPEND_UTF8(out, "operatorName", "$jsonSchema");
    if (schema == NULL) {
        return;
    }
    if (satisfied) {
        BSON_APPEND_UTF8(out, "reason", "schema matched");
    } else if (json_schema_rejects_every_document(schema)) {
        BSON_APPEND_DOCUMENT(out, "specifiedAs", clause);
        BSON_APPEND_UTF8(out, "reason", "expression always evaluates to false");
    } else {
        json_schema_append_annotations(schema, out);
        BSON_APPEND_ARRAY_BEGIN(out, "schemaRulesNotSatisfied", &rules);
        json_schema_matches(schema, document, &rules);
        bson_append_array_end(out, &rules);
    }
    json_schema_destroy(schema);
}

/* One clause's details: {operatorName, specifiedAs, ...}; satisfied: the
 * clause holds (a child of $nor), so no reason for a failure is given. */
static void describe_clause(const validator_t *validator, const bson_t *clause, const bson_t *document,
                            bool satisfied, bson_t *out)
{
    bson_iter_t iter, operators;
    bson_iter_init(&iter, clause);
    bson_iter_next(&iter);
    const char *key = bson_iter_key(&iter);
    if (strcmp(key, "$and") == 0 || strcmp(key, "$or") == 0 || strcmp(key, "$nor") == 0) {
        describe_logical(validator, key, &iter, document, satisfied, out);
        return;
    }
    if (strcmp(key, "$jsonSchema") == 0) {
        describe_json_schema(clause, &iter, document, satisfied, out);
        return;
    }
    const char *operator_name = key[0] == '$' ? key : "$eq";
    if (key[0] != '$' && is_operator_document(&iter) && bson_iter_recurse(&iter, &operators) &&
        bson_iter_next(&operators)) {
        operator_name = bson_iter_key(&operators);
        if (strcmp(operator_name, "$options") == 0) {
            operator_name = "$regex";
        }
    }
    BSON_APPEND_UTF8(out, "operatorName", operator_name);
    BSON_APPEND_DOCUMENT(out, "specifiedAs", clause);
    if (satisfied) {
        return;
    }
    if (strcmp(key, "$expr") == 0) {
        BSON_APPEND_UTF8(out, "reason", "expression did not match");
    } else if (key[0] != '$') {
        describe_considered(operator_name, key, document, out);
    }
}

/* A filter's details: its one clause's, or an implicit $and's listing the
 * clauses the document fails (when it satisfies them all, under $nor, the
 * $and as specified). */
static void describe_filter(const validator_t *validator, const bson_t *filter, const bson_t *document,
                            bool satisfied, bson_t *out)
{
    clause_list_t clauses = {0};
    split_clauses(filter, &clauses);
    if (clauses.count == 1) {
        describe_clause(validator, clauses.items[0], document, satisfied, out);
        clause_list_cleanup(&clauses);
        return;
    }
    if (satisfied) {
        BSON_APPEND_UTF8(out, "operatorName", "$and");
        BSON_APPEND_DOCUMENT(out, "specifiedAs", filter);
        clause_list_cleanup(&clauses);
        return;
    }
    bson_t array, item, details;
    uint32_t listed = 0;
    BSON_APPEND_UTF8(out, "operatorName", "$and");
    BSON_APPEND_ARRAY_BEGIN(out, "clausesNotSatisfied", &array);
    for (size_t i = 0; i < clauses.count; i++) {
        if (filter_matches(validator, clauses.items[i], document)) {
            continue;
        }
        begin_clause_entry(&array, listed++, (uint32_t)i, &item, &details);
        describe_clause(validator, clauses.items[i], document, false, &details);
        end_clause_entry(&array, &item, &details);
    }
    bson_append_array_end(out, &array);
    clause_list_cleanup(&clauses);
}

bool validator_check(validator_t *validator, const bson_t *document, bool *out_valid, bson_t *out_details,
                     bson_error_t *error)
{
    *out_valid = match_document(validator->matcher, document);
    if (!*out_valid && match_failed(validator->matcher, error)) {
        return false;
    }
    if (*out_valid) {
        return true;
    }
    if (out_details != NULL) {
        bson_init(out_details);
        describe_filter(validator, validator->filter, document, false, out_details);
    }
    return true;
}
