/* A subset of $jsonSchema, MongoDB's schema validation operator, as a
 * collection's validator uses it: bsonType, required, properties,
 * additionalProperties, enum, minimum/maximum (with exclusiveMinimum and
 * exclusiveMaximum), pattern, and the annotations title and description.
 * Pure. */
#ifndef TC_QUERY_JSON_SCHEMA_H
#define TC_QUERY_JSON_SCHEMA_H

#include "common/error.h"

typedef struct json_schema json_schema_t;

/* Compiles the schema object of {$jsonSchema: schema}. Errors: TypeMismatch
 * 14 for a keyword of the wrong type, FailedToParse 9 for an unknown keyword
 * or bsonType name, CommandNotSupported 115 naming a keyword of mongod's the
 * subset lacks (items, minLength, anyOf, ...). Copies what it keeps; free
 * with json_schema_destroy(). */
json_schema_t *json_schema_compile(const bson_t *schema, bson_error_t *error) TC_MUST_CHECK;

/* Whether document satisfies the schema. When it does not and
 * out_rules_not_satisfied is not NULL, that array (initialised by the caller)
 * receives mongod 6.0's schemaRulesNotSatisfied entries: {operatorName:
 * "required", specifiedAs, missingProperties}, {operatorName: "properties",
 * propertiesNotSatisfied: [{propertyName, details: [...]}]}, {operatorName:
 * "bsonType" | "enum" | "minimum" | "maximum" | "pattern", specifiedAs,
 * reason, consideredValue[, consideredType]}, {operatorName:
 * "additionalProperties", specifiedAs, additionalProperties: [names]}. One
 * thread at a time may use a schema (its regexes' scratch space). */
bool json_schema_matches(json_schema_t *schema, const bson_t *document, bson_t *out_rules_not_satisfied);

/* Safe on NULL. */
void json_schema_destroy(json_schema_t *schema);

#endif
