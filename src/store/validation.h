/* Document validation as mongod 6.0 runs it: a collection's validator (a
 * query filter, query/validator.h), its validationLevel (strict, moderate,
 * off) and validationAction (error, warn), kept in the collection's options
 * (listCollections shows them, the catalog persists them), and the check
 * every insert, update, upsert and findAndModify makes before it writes. */
#ifndef TC_STORE_VALIDATION_H
#define TC_STORE_VALIDATION_H

#include "store/commands.h"

/* Checks the validator, validationLevel or validationAction field at iter of
 * create or collMod (command_name) as mongod does: TypeMismatch 14 for a
 * wrong type, BadValue 2 for an unknown level or action, the validator's
 * compile errors (validator_compile()). Other fields: true. */
bool validation_check_option(const char *command_name, bson_iter_t *iter, bson_error_t *error) TC_MUST_CHECK;

/* Whether after (the document about to be written; before: the version it
 * replaces, NULL for an insert or upsert) may be written to collection.
 * Skipped with bypassDocumentValidation: true, validationLevel off, and under
 * moderate for an update of a document that already failed the validator.
 * A failure with validationAction warn is logged ("Document would fail
 * validation", as mongod's id 20294) and accepted; with error it is
 * DocumentValidationFailure 121 "Document failed validation", its errInfo
 * {failingDocumentId, details} left in *context->error_info. */
bool validation_check_write(command_context_t *context, const collection_t *collection, const bson_t *before,
                            const bson_t *after, bson_error_t *error) TC_MUST_CHECK;

/* Appends errInfo to a writeError or an error reply when error is a
 * validation failure this command recorded. */
void validation_append_error_info(const command_context_t *context, const bson_error_t *error, bson_t *out);

#endif
