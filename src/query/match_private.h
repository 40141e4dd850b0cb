/* Private to src/query/match*.c: the compiled filter's node tree that match_parse.c
 * builds (as mongod 6.0's MatchExpressionParser does) and match_evaluate.c tests
 * documents against, with the helpers both sides share. */
#ifndef TC_QUERY_MATCH_PRIVATE_H
#define TC_QUERY_MATCH_PRIVATE_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif

#include "query/match.h"
#include "query/expression.h"
#include "query/json_schema.h"

#include <pcre2.h>
#include <stdint.h>

/* 2^63 as a double: the first value past INT64_MAX. */
#define MATCH_TWO_TO_63 9223372036854775808.0

typedef enum match_kind {
    MATCH_AND,
    MATCH_OR,
    MATCH_NOR,
    MATCH_NOT,
    MATCH_ALWAYS_TRUE,
    MATCH_ALWAYS_FALSE,
    /* Below: predicates on the values a path reaches. */
    MATCH_COMPARE,
    MATCH_IN,
    MATCH_REGEX,
    MATCH_EXISTS,
    MATCH_TYPE,
    MATCH_MOD,
    MATCH_SIZE,
    MATCH_BITS,
    MATCH_ELEM_MATCH_OBJECT, /* one child: a whole filter run on each element */
    MATCH_ELEM_MATCH_VALUE,  /* children: predicates that must all hold for one element */
    MATCH_EXPR,              /* $expr: an aggregation expression on the whole document */
    MATCH_JSON_SCHEMA,       /* $jsonSchema: a schema the whole document must meet */
} match_kind_t;

typedef enum match_compare { MATCH_EQ, MATCH_LT, MATCH_LTE, MATCH_GT, MATCH_GTE } match_compare_t;

typedef enum match_bits_test {
    MATCH_BITS_ALL_SET,
    MATCH_BITS_ALL_CLEAR,
    MATCH_BITS_ANY_SET,
    MATCH_BITS_ANY_CLEAR,
} match_bits_test_t;

typedef struct match_regex {
    char *pattern; /* owned; compared with BSON regex values in documents */
    char *flags;   /* owned */
    pcre2_code *code;
    /* Reused by every match call, which is why an expression serves one thread at a time. */
    pcre2_match_data *match_data;
} match_regex_t;

typedef struct match_path_part {
    const char *name; /* NUL-terminated, inside the node's path_buffer */
    uint32_t length;
    bool is_index; /* all digits: may also address an array element */
} match_path_part_t;

typedef struct match_node match_node_t;

/* What the $expr nodes of one compiled filter share: the command's $$NOW and let
 * variables, and the first error an evaluation met (a filter's evaluation
 * cannot fail, so it is kept for match_failed()). */
typedef struct match_expr_state {
    expression_context_t context;
    bson_t *variables;
    bool failed;
    bson_error_t error;
} match_expr_state_t;

struct match_node {
    match_kind_t kind;
    /* The dotted path of a predicate, split once. Empty for the predicates under
     * a value-form $elemMatch, which only ever see one element. */
    char *path_buffer;
    match_path_part_t *parts;
    size_t part_count;
    /* A path ending on an array offers each element and then the array itself;
     * $size and $elemMatch want only the array. */
    bool expand_leaf_arrays;
    /* The filter's collation for $eq, the ordering comparisons and $in (regexes
     * stay binary, as in mongod); borrowed from match_expression_t; NULL: binary. */
    const collation_t *collation;
    match_node_t **children;
    size_t child_count;
    size_t child_capacity;
    union {
        struct {
            match_compare_t op;
            bson_value_t operand; /* points into the expression's filter copy */
            bool operand_is_nan;
        } compare;
        struct {
            bson_value_t *values; /* sorted by order_compare_values */
            size_t value_count;
            bool has_null;
            match_regex_t *regexes;
            size_t regex_count;
        } in;
        match_regex_t regex;
        struct {
            bool all_numbers;
            bool types[256]; /* indexed by (uint8_t)bson_type_t */
        } type;
        struct {
            int64_t divisor;
            int64_t remainder;
        } mod;
        int32_t size;
        json_schema_t *json_schema; /* owned */
        struct {
            expression_t *expression; /* owned */
            match_expr_state_t *state; /* the compiled filter's */
        } expr;
        struct {
            match_bits_test_t test;
            uint64_t mask;       /* for numbers: positions past 63 fold onto the sign bit */
            uint32_t *positions; /* for BinData */
            size_t position_count;
        } bits;
    } u;
};

struct match_expression {
    bson_t *filter; /* owned copy: operands point into it */
    const collation_t *collation; /* a reference, lent to the nodes; NULL: binary */
    match_node_t *root;
    match_expr_state_t *expr_state; /* NULL without $expr */
};

/* ---- the node tree (match.c) ---- */

match_node_t *match_node_new(match_kind_t kind);
/* A predicate on the dotted path, split into its parts once. */
match_node_t *match_node_new_with_path(match_kind_t kind, const char *path);
/* Frees the node and its children. Safe on NULL. */
void match_node_destroy(match_node_t *node);
void match_node_add_child(match_node_t *parent, match_node_t *child);
/* mongod returns the only child of a one-predicate $and in its place; node is
 * freed when it is replaced. */
match_node_t *match_node_collapse_and(match_node_t *node);
/* A $not owning child. */
match_node_t *match_node_negate(match_node_t *child);

/* ---- parsing (match_parse.c) ---- */

/* How a filter is parsed: flags of match_parse_filter. */
enum {
    /* It runs on array elements (the object form of $elemMatch): $where, $text
     * and $expr are refused. */
    MATCH_PARSE_INSIDE_ELEM_MATCH = 1u << 0,
    /* mongod's kBanAllSpecialFeatures: $expr, $jsonSchema, $where and $text are
     * "not allowed in this context" (match_compile_without_special_features). */
    MATCH_PARSE_NO_SPECIAL_FEATURES = 1u << 1,
};

/* A filter document: its fields are ANDed. Operands point into document. NULL
 * with error filled on a bad filter. */
match_node_t *match_parse_filter(const bson_value_t *document, unsigned flags, bson_error_t *error);

/* ---- evaluation and value helpers (match_evaluate.c) ---- */

/* details (NULL-able) as match_document_with_details() describes. */
bool match_node_matches_document(const match_node_t *node, const uint8_t *data, uint32_t length,
                                 match_details_t *details);

/* Iterates a document or array value. */
bool match_value_iter_init(bson_iter_t *iter, const bson_value_t *value);
uint32_t match_array_length(const bson_value_t *array);
/* Truncates a finite double to an int64; false when out of range. */
bool match_double_to_int64(double number, int64_t *out);
/* order_compare_values() for qsort and bsearch over bson_value_t arrays. */
int match_compare_values_for_sort(const void *left, const void *right);

#endif
