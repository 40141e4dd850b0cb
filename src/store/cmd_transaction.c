/* commitTransaction and abortTransaction: admin commands that end the
 * multi-document transaction they run in (transactions.h does the work). */
#include "store/commands.h"
#include "store/transactions.h"

#include <string.h>

/* What mongod checks before it looks at the transaction's state. */
static bool check_transaction_command(const command_context_t *context, bson_error_t *error)
{
    if (strcmp(context->database, "admin") != 0) {
        return tc_error_set(error, TC_ERR_UNAUTHORIZED, "%s may only be run against the admin database.",
                            context->name);
    }
    if (context->transaction == NULL) {
        return tc_error_set(error, TC_ERR_COMMAND_FAILED, "%s must be run within a transaction", context->name);
    }
    return true;
}

static bool handle_commit_transaction(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    return check_transaction_command(context, error) && transaction_commit(context, error);
}

static bool handle_abort_transaction(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    return check_transaction_command(context, error) && transaction_abort(context, error);
}

const command_definition_t transaction_commands[] = {
    {"commitTransaction", handle_commit_transaction},
    {"abortTransaction", handle_abort_transaction},
    {NULL, NULL},
};
