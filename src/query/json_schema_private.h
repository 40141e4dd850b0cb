/* Private to src/query/json_schema*.c: a compiled schema object, which
 * json_schema.c builds from the keywords (mongod's JSON Schema parser and its
 * errors) and json_schema_check.c checks values against (its verdict and
 * errInfo's rules, as doc_validation_error.cpp writes them). */
#ifndef TC_QUERY_JSON_SCHEMA_PRIVATE_H
#define TC_QUERY_JSON_SCHEMA_PRIVATE_H

#include "query/json_schema.h"
#include "query/match.h"

#include <stdint.h>

/* BSON types 0x01..0x13, minKey and maxKey, as bits; "number" sets four. */
typedef uint32_t json_schema_types_t;

/* Keywords with a count or a bound, as bits of json_schema_t.limits_present. */
typedef enum json_schema_limit {
    JSON_SCHEMA_MIN_LENGTH,
    JSON_SCHEMA_MAX_LENGTH,
    JSON_SCHEMA_MIN_ITEMS,
    JSON_SCHEMA_MAX_ITEMS,
    JSON_SCHEMA_MIN_PROPERTIES,
    JSON_SCHEMA_MAX_PROPERTIES,
    JSON_SCHEMA_LIMIT_COUNT
} json_schema_limit_t;

typedef struct json_schema_list {
    json_schema_t **items;
    size_t count;
} json_schema_list_t;

/* One entry of patternProperties: the names it matches, the schema their values meet. */
typedef struct json_schema_pattern_property {
    const char *pattern;          /* inside the schema's spec */
    match_expression_t *matcher;  /* {v: {$regex: pattern}}, on {v: name} */
    json_schema_t *schema;
} json_schema_pattern_property_t;

/* One entry of dependencies: when `property` is present, the object must hold
 * every name of `names` (a property dependency) or meet `schema`. */
typedef struct json_schema_dependency {
    const char *property; /* inside the schema's spec */
    const uint8_t *names; /* the array of names inside the spec; NULL with a schema */
    uint32_t names_length;
    json_schema_t *schema;
} json_schema_dependency_t;

/* No bson_t member: libbson aligns it to 128 bytes, more than malloc does. */
struct json_schema {
    bson_t *owned_spec;          /* the top schema's copy, which every node's views point into */
    const uint8_t *spec;         /* this node's schema object */
    uint32_t spec_length;
    bool is_top;                 /* $jsonSchema's own object */
    /* Applies to the document itself, as mongod's parser does with an empty
     * path: the top schema and its allOf/anyOf/oneOf/not and dependency
     * schemas. Keywords about strings, numbers and arrays mean nothing there. */
    bool at_root;
    const char *type_keyword;    /* "bsonType" or "type"; NULL: neither */
    json_schema_types_t types;
    bool single_type;            /* one type named: keywords of another kind are ignored */
    match_expression_t *pattern; /* {v: {$regex: pattern}}, on {v: value} */
    uint32_t limits_present;     /* bits by json_schema_limit_t */
    int64_t limits[JSON_SCHEMA_LIMIT_COUNT];
    bool has_multiple_of;
    bson_value_t multiple_of;    /* a positive number */
    bool has_minimum, has_maximum, exclusive_minimum, exclusive_maximum;
    bson_value_t minimum, maximum;
    bool unique_items;
    json_schema_t *items;          /* items: {schema}; NULL otherwise */
    bool items_is_list;            /* items: [schemas] */
    json_schema_list_t item_list;
    bool has_additional_items;     /* only with items as a list */
    json_schema_t *additional_items; /* NULL with additionalItems: a boolean */
    bool additional_items_allowed;
    char **property_names;
    json_schema_t **properties;
    size_t property_count;
    json_schema_pattern_property_t *pattern_properties;
    size_t pattern_property_count;
    bool has_additional_properties;
    json_schema_t *additional_properties; /* NULL with additionalProperties: a boolean */
    bool additional_properties_allowed;
    char **required; /* sorted, as mongod lists missingProperties */
    size_t required_count;
    json_schema_dependency_t *dependencies;
    size_t dependency_count;
    json_schema_list_t all_of, any_of, one_of;
    json_schema_t *not_schema;
    const uint8_t *enum_values; /* enum's array inside the spec; NULL: no enum */
    uint32_t enum_length;
};

/* The bit of type in a json_schema_types_t. */
json_schema_types_t json_schema_type_bit(bson_type_t type);

/* Appends document's string title and description (in that order) to out. */
void json_schema_append_document_annotations(const bson_t *document, bson_t *out);

/* qsort's comparison of two C strings, by strcmp. */
int json_schema_compare_names(const void *left, const void *right);

/* A bson_t view of data and length (an array or document inside a spec). */
void json_schema_view(const uint8_t *data, uint32_t length, bson_t *out);

/* Sets out to the spec's element keyword; false when the schema lacks it. */
bool json_schema_find_keyword(const json_schema_t *schema, const char *keyword, bson_iter_t *out);

/* BSON equality with the fields of embedded objects in any order, as mongod's
 * UnorderedFieldsBSONElementComparator: enum and uniqueItems compare this way. */
bool json_schema_values_equal(const bson_value_t *left, const bson_value_t *right);

/* The position of the first element of array equal (as above) to an earlier
 * one, or -1: in O(n log n), since an array may hold a million items. */
int64_t json_schema_first_duplicate(const bson_t *array);

/* Whether value (a number) is a multiple of divisor (a positive number), as
 * mongod's Decimal128 remainder decides it: a double counts by its 15
 * significant digits, so 0.3 is a multiple of 0.1. */
bool json_schema_is_multiple_of(const bson_value_t *value, const bson_value_t *divisor);

#endif
