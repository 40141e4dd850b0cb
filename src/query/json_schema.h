/* $jsonSchema, MongoDB's schema validation operator, as mongod 6.0 reads it
 * (draft 4 with bsonType; every keyword but encrypt and encryptMetadata), for
 * collection validators and find filters alike. Pure. */
#ifndef TC_QUERY_JSON_SCHEMA_H
#define TC_QUERY_JSON_SCHEMA_H

#include "common/error.h"

typedef struct json_schema json_schema_t;

/* Compiles the schema object of {$jsonSchema: schema}. Errors as mongod's
 * parser: TypeMismatch 14 for a keyword of the wrong type, FailedToParse 9
 * for an unknown, duplicate or unsupported ($ref, format, ...) keyword, a
 * negative length or an empty list, BadValue 2 for an unknown type name or an
 * empty allOf/anyOf/oneOf; CommandNotSupported 115 for encrypt and
 * encryptMetadata. Copies what it keeps; free with json_schema_destroy(). */
json_schema_t *json_schema_compile(const bson_t *schema, bson_error_t *error) TC_MUST_CHECK;

/* Whether document satisfies the schema. When it does not and
 * out_rules_not_satisfied is not NULL, that array (initialised by the caller)
 * receives the entries of mongod 6.0's schemaRulesNotSatisfied, in the order
 * of its parser (string and number keywords, array keywords, object keywords,
 * logical keywords, the type last), each as doc_validation_error.cpp writes
 * it. One thread at a time may use a schema (its regexes' scratch space). */
bool json_schema_matches(json_schema_t *schema, const bson_t *document, bson_t *out_rules_not_satisfied);

/* A top-level type that excludes objects: mongod compiles such a schema to
 * "always false", and errInfo says only that. */
bool json_schema_rejects_every_document(const json_schema_t *schema);

/* Appends the schema's title and description, as errInfo repeats them beside
 * the rules. */
void json_schema_append_annotations(const json_schema_t *schema, bson_t *out);

/* Safe on NULL. */
void json_schema_destroy(json_schema_t *schema);

#endif
