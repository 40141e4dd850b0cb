/* The compiled form of an expression and the operator registry, shared by
 * expression.c (parsing, field paths, documents, arrays) and the files that
 * implement the operators (expression_arithmetic.c, expression_logic.c,
 * expression_string.c, expression_date.c). Not for use outside src/query/expression*. */
#ifndef TC_QUERY_EXPRESSION_PRIVATE_H
#define TC_QUERY_EXPRESSION_PRIVATE_H

#include "query/aggregation_value.h"
#include "query/expression.h"

#include <stddef.h>

/* Per-evaluation state: the document ($$ROOT = $$CURRENT) and the context. */
typedef struct expression_evaluation {
    const bson_t *root;
    const expression_context_t *context;
} expression_evaluation_t;

/* Writes the result to out_value (an owned value, missing allowed); false with error set
 * on failure, out_value then left missing. */
typedef bool (*expression_evaluate_fn)(const expression_t *expression,
                                       const expression_evaluation_t *evaluation,
                                       bson_value_t *out_value, bson_error_t *error);

/* Fills the children of expression from the operator's argument, for operators whose
 * argument is not a plain operand list ($cond's object form, $switch, dates). */
typedef bool (*expression_parse_fn)(expression_t *expression, const bson_value_t *argument,
                                    bson_error_t *error);

typedef struct expression_operator {
    const char *name;          /* "$add" */
    expression_parse_fn parse; /* NULL: argument is an operand or an array of operands */
    int minimum_arguments;     /* checked for operand lists */
    int maximum_arguments;     /* -1: no maximum */
    expression_evaluate_fn evaluate;
} expression_operator_t;

typedef enum expression_kind {
    EXPRESSION_CONSTANT,
    EXPRESSION_FIELD_PATH,
    EXPRESSION_OBJECT,
    EXPRESSION_ARRAY,
    EXPRESSION_OPERATOR,
} expression_kind_t;

typedef enum expression_variable {
    EXPRESSION_VARIABLE_CURRENT,
    EXPRESSION_VARIABLE_ROOT,
    EXPRESSION_VARIABLE_REMOVE,
    EXPRESSION_VARIABLE_NOW,
    EXPRESSION_VARIABLE_USER, /* a let variable, named by variable_name */
} expression_variable_t;

struct expression {
    expression_kind_t kind;
    bson_value_t constant;          /* CONSTANT: owned copy */
    expression_variable_t variable; /* FIELD_PATH: where the path starts */
    char *variable_name;            /* FIELD_PATH of a USER variable: its name, owned */
    char **path;                    /* FIELD_PATH: components after the variable */
    size_t path_length;
    char **names;            /* OBJECT: field names, parallel to children */
    expression_t **children; /* OBJECT, ARRAY, OPERATOR operands */
    size_t child_count;
    const expression_operator_t *operation; /* OPERATOR */
    bool has_default;                       /* $switch: last child is the default */
};

/* expression_compile() without the check that the user variables it reads are
 * defined: for the parts of an expression, which is checked whole. */
expression_t *expression_parse(const bson_value_t *spec, bson_error_t *error);

/* For operators with named arguments: count children, all NULL, to fill by slot;
 * then value compiled into children[slot] (replacing what was there). */
void expression_reserve_slots(expression_t *expression, size_t count);
bool expression_parse_into_slot(expression_t *expression, size_t slot, const bson_value_t *value,
                                bson_error_t *error);

/* Appends child to expression's children (takes ownership). */
void expression_add_child(expression_t *expression, expression_t *child);

/* Parses argument as an operand list (an array's elements, or argument itself) and
 * checks the operator's arity: "Expression $abs takes exactly 1 arguments. 2 were
 * passed in." (16020) or the ranged form (28667). */
bool expression_parse_operands(expression_t *expression, const bson_value_t *argument,
                               bson_error_t *error);

/* Evaluates a child (or any compiled expression) within an evaluation. */
bool expression_evaluate_in(const expression_t *expression,
                            const expression_evaluation_t *evaluation, bson_value_t *out_value,
                            bson_error_t *error);

/* Evaluates expression->children[0 .. count-1] into values[] (all set, missing on
 * failure); the caller destroys them with expression_values_destroy(). */
bool expression_evaluate_children(const expression_t *expression,
                                  const expression_evaluation_t *evaluation, bson_value_t *values,
                                  size_t count, bson_error_t *error);
void expression_values_destroy(bson_value_t *values, size_t count);

/* Operator tables of each implementation file. */
extern const expression_operator_t expression_arithmetic_operators[];
extern const size_t expression_arithmetic_operator_count;
extern const expression_operator_t expression_logic_operators[];
extern const size_t expression_logic_operator_count;
extern const expression_operator_t expression_string_operators[];
extern const size_t expression_string_operator_count;
extern const expression_operator_t expression_date_operators[];
extern const size_t expression_date_operator_count;
extern const expression_operator_t expression_object_operators[];
extern const size_t expression_object_operator_count;

#endif
