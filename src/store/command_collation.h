/* Private to src/store: which collation a command runs under. A command's own
 * `collation` wins; without one it takes its collection's default (create's
 * collation); {locale: "simple"} asks for binary comparison explicitly. The
 * collation reaches the query engine through the command's expression context,
 * as mongod's ExpressionContext carries its collator. */
#ifndef TC_STORE_COMMAND_COLLATION_H
#define TC_STORE_COMMAND_COLLATION_H

#include "store/commands.h"

/* For the commands that take a collation (find, count, distinct, aggregate,
 * findAndModify; update and delete per statement, below), sets
 * expression_context->collation and *out_collation (a reference the caller
 * releases after the handler; NULL: binary). Other commands are left alone.
 * Errors: TypeMismatch 14 for a collation that is not a document, and
 * collation_parse()'s. */
bool command_collation_resolve(const command_context_t *context, expression_context_t *expression_context,
                               const collation_t **out_collation, bson_error_t *error) TC_MUST_CHECK;

/* One update or delete statement's own collation ({q, ..., collation}): while
 * it runs, context->expression_context points at a copy carrying it. Pair
 * with command_statement_collation_end(), which restores the command's. */
typedef struct statement_collation {
    const expression_context_t *command_context;
    expression_context_t statement_context;
    collation_t *collation;
} statement_collation_t;

bool command_statement_collation_begin(command_context_t *context, const bson_iter_t *statement,
                                       const char *array_name, uint32_t index, statement_collation_t *out,
                                       bson_error_t *error) TC_MUST_CHECK;
void command_statement_collation_end(command_context_t *context, statement_collation_t *saved);

#endif
