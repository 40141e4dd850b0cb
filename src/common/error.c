/* Error construction and MongoDB's code-to-codeName table. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool tc_error_set(bson_error_t *error, int32_t code, const char *format, ...)
{
    if (error == NULL) {
        return false;
    }
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(error->message, sizeof error->message, format, arguments);
    va_end(arguments);
    error->domain = TC_ERROR_DOMAIN;
    error->code = (uint32_t)code;
    return false;
}

void tc_error_prefix(bson_error_t *error, const char *prefix)
{
    char message[sizeof error->message];
    int prefix_length = (int)strlen(prefix);
    int room = (int)sizeof message - 1 - prefix_length;
    if (room <= 0) {
        return;
    }
    snprintf(message, sizeof message, "%s%.*s", prefix, room, error->message);
    memcpy(error->message, message, sizeof message);
}

static const struct {
    int32_t code;
    const char *name;
} code_names[] = {
    {TC_ERR_INTERNAL, "InternalError"},
    {TC_ERR_BAD_VALUE, "BadValue"},
    {TC_ERR_NO_SUCH_KEY, "NoSuchKey"},
    {TC_ERR_GRAPH_CONTAINS_CYCLE, "GraphContainsCycle"},
    {TC_ERR_HOST_UNREACHABLE, "HostUnreachable"},
    {TC_ERR_FAILED_TO_PARSE, "FailedToParse"},
    {TC_ERR_CANNOT_MUTATE_OBJECT, "CannotMutateObject"},
    {TC_ERR_USER_NOT_FOUND, "UserNotFound"},
    {TC_ERR_UNSUPPORTED_FORMAT, "UnsupportedFormat"},
    {TC_ERR_UNAUTHORIZED, "Unauthorized"},
    {TC_ERR_TYPE_MISMATCH, "TypeMismatch"},
    {TC_ERR_OVERFLOW, "Overflow"},
    {TC_ERR_AUTHENTICATION_FAILED, "AuthenticationFailed"},
    {TC_ERR_ILLEGAL_OPERATION, "IllegalOperation"},
    {TC_ERR_EMPTY_ARRAY_OPERATION, "EmptyArrayOperation"},
    {TC_ERR_INVALID_BSON, "InvalidBSON"},
    {TC_ERR_LOCK_TIMEOUT, "LockTimeout"},
    {TC_ERR_NAMESPACE_NOT_FOUND, "NamespaceNotFound"},
    {TC_ERR_INDEX_NOT_FOUND, "IndexNotFound"},
    {TC_ERR_PATH_NOT_VIABLE, "PathNotViable"},
    {TC_ERR_NON_EXISTENT_PATH, "NonExistentPath"},
    {TC_ERR_INVALID_PATH, "InvalidPath"},
    {TC_ERR_ROLE_NOT_FOUND, "RoleNotFound"},
    {TC_ERR_CANNOT_BACKFILL_ARRAY, "CannotBackfillArray"},
    {TC_ERR_CONFLICTING_UPDATE_OPERATORS, "ConflictingUpdateOperators"},
    {TC_ERR_CURSOR_NOT_FOUND, "CursorNotFound"},
    {TC_ERR_NAMESPACE_EXISTS, "NamespaceExists"},
    {TC_ERR_MAX_TIME_MS_EXPIRED, "MaxTimeMSExpired"},
    {TC_ERR_DOLLAR_PREFIXED_FIELD_NAME, "DollarPrefixedFieldName"},
    {TC_ERR_INVALID_ID_FIELD, "InvalidIdField"},
    {TC_ERR_NOT_SINGLE_VALUE_FIELD, "NotSingleValueField"},
    {TC_ERR_EMPTY_FIELD_NAME, "EmptyFieldName"},
    {TC_ERR_COMMAND_NOT_FOUND, "CommandNotFound"},
    {TC_ERR_IMMUTABLE_FIELD, "ImmutableField"},
    {TC_ERR_CANNOT_CREATE_INDEX, "CannotCreateIndex"},
    {TC_ERR_INDEX_ALREADY_EXISTS, "IndexAlreadyExists"},
    {TC_ERR_INVALID_OPTIONS, "InvalidOptions"},
    {TC_ERR_INVALID_NAMESPACE, "InvalidNamespace"},
    {TC_ERR_INDEX_OPTIONS_CONFLICT, "IndexOptionsConflict"},
    {TC_ERR_NOT_EXACT_VALUE_FIELD, "NotExactValueField"},
    {TC_ERR_INDEX_KEY_SPECS_CONFLICT, "IndexKeySpecsConflict"},
    {TC_ERR_NETWORK_TIMEOUT, "NetworkTimeout"},
    {TC_ERR_OPERATION_FAILED, "OperationFailed"},
    {TC_ERR_CONFLICTING_OPERATION_IN_PROGRESS, "ConflictingOperationInProgress"},
    {TC_ERR_COMMAND_NOT_SUPPORTED, "CommandNotSupported"},
    {TC_ERR_DOCUMENT_VALIDATION_FAILURE, "DocumentValidationFailure"},
    {TC_ERR_WRITE_CONFLICT, "WriteConflict"},
    {TC_ERR_COMMAND_FAILED, "CommandFailed"},
    {TC_ERR_INVALID_PIPELINE_OPERATOR, "InvalidPipelineOperator"},
    {TC_ERR_VIEW_DEPTH_LIMIT_EXCEEDED, "ViewDepthLimitExceeded"},
    {TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW, "CommandNotSupportedOnView"},
    {TC_ERR_OPTION_NOT_SUPPORTED_ON_VIEW, "OptionNotSupportedOnView"},
    {TC_ERR_CURSOR_IN_USE, "CursorInUse"},
    {TC_ERR_NOT_WRITABLE_PRIMARY, "NotWritablePrimary"},
    {TC_ERR_SOCKET_EXCEPTION, "SocketException"},
    {TC_ERR_INTERRUPTED, "Interrupted"},
    {TC_ERR_TRANSACTION_TOO_OLD, "TransactionTooOld"},
    {TC_ERR_NO_SUCH_TRANSACTION, "NoSuchTransaction"},
    {TC_ERR_TRANSACTION_COMMITTED, "TransactionCommitted"},
    {TC_ERR_TRANSACTION_TOO_LARGE, "TransactionTooLarge"},
    {TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION, "OperationNotSupportedInTransaction"},
    {TC_ERR_DUPLICATE_KEY, "DuplicateKey"},
    {TC_ERR_CHANGE_STREAM_HISTORY_LOST, "ChangeStreamHistoryLost"},
    {TC_ERR_QUERY_EXCEEDED_MEMORY_LIMIT, "QueryExceededMemoryLimitNoDiskUseAllowed"},
    {TC_ERR_EXCEEDED_TIME_LIMIT, "ExceededTimeLimit"},
    {TC_ERR_API_STRICT_ERROR, "APIStrictError"},
    {TC_ERR_LOCATION_BSON_TOO_LARGE, "BSONObjectTooLarge"},
    {TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "Location40415"},
    {TC_ERR_INCOMPATIBLE_COLLATION_VERSION, "IncompatibleCollationVersion"},
    {TC_ERR_CANNOT_INDEX_PARALLEL_ARRAYS, "CannotIndexParallelArrays"},
    {TC_ERR_PROTOCOL_ERROR, "ProtocolError"},
    {TC_ERR_ILLEGAL_OP_MSG_FLAG, "IllegalOpMsgFlag"},
    {TC_ERR_TOO_MANY_DOCUMENT_SEQUENCES, "TooManyDocumentSequences"},
    {TC_ERR_CHECKSUM_MISMATCH, "ChecksumMismatch"},
    {TC_ERR_CONVERSION_FAILURE, "ConversionFailure"},
    {TC_ERR_UNRECOGNIZED_PIPELINE_STAGE, "Location40324"},
    {TC_ERR_NO_MATCHING_DOCUMENT, "NoMatchingDocument"},
    {TC_ERR_INVALID_RESUME_TOKEN, "InvalidResumeToken"},
    {TC_ERR_CHANGE_STREAM_FATAL_ERROR, "ChangeStreamFatalError"},
    {TC_ERR_SSL_HANDSHAKE_FAILED, "SSLHandshakeFailed"},
    {TC_ERR_MECHANISM_UNAVAILABLE, "MechanismUnavailable"},
    {TC_ERR_INVALID_LENGTH, "InvalidLength"},
    {TC_ERR_NO_QUERY_EXECUTION_PLANS, "NoQueryExecutionPlans"},
    {TC_ERR_QUERY_FEATURE_NOT_ALLOWED, "QueryFeatureNotAllowed"},
    {TC_ERR_FAILED_TO_SATISFY_READ_PREFERENCE, "FailedToSatisfyReadPreference"},
    {TC_ERR_MAX_STALENESS_OUT_OF_RANGE, "MaxStalenessOutOfRange"},
    {TC_ERR_UNSUPPORTED_OP_QUERY_COMMAND, "UnsupportedOpQueryCommand"},
    {TC_ERR_HOST_NOT_FOUND, "HostNotFound"},
    {TC_ERR_WRITE_CONCERN_FAILED, "WriteConcernFailed"},
    {TC_ERR_SHUTDOWN_IN_PROGRESS, "ShutdownInProgress"},
    {TC_ERR_READ_CONCERN_MAJORITY_NOT_AVAILABLE_YET, "ReadConcernMajorityNotAvailableYet"},
    {TC_ERR_PRIMARY_STEPPED_DOWN, "PrimarySteppedDown"},
    {TC_ERR_INTERRUPTED_AT_SHUTDOWN, "InterruptedAtShutdown"},
    {TC_ERR_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE, "InterruptedDueToReplStateChange"},
    {TC_ERR_NOT_PRIMARY_NO_SECONDARY_OK, "NotPrimaryNoSecondaryOk"},
    {TC_ERR_NOT_PRIMARY_OR_SECONDARY, "NotPrimaryOrSecondary"},
};

const char *tc_error_code_name(int32_t code)
{
    static __thread char location_name[32];
    for (size_t i = 0; i < sizeof code_names / sizeof code_names[0]; i++) {
        if (code_names[i].code == code) {
            return code_names[i].name;
        }
    }
    snprintf(location_name, sizeof location_name, "Location%d", (int)code);
    return location_name;
}

void tc_error_append_reply(const bson_error_t *error, bson_t *reply)
{
    int32_t code = error->domain == TC_ERROR_DOMAIN ? (int32_t)error->code : TC_ERR_INTERNAL;
    BSON_APPEND_DOUBLE(reply, "ok", 0.0);
    BSON_APPEND_UTF8(reply, "errmsg", error->message);
    BSON_APPEND_INT32(reply, "code", code);
    BSON_APPEND_UTF8(reply, "codeName", tc_error_code_name(code));
}

bool tc_error_code_is_retryable(int32_t code)
{
    switch (code) {
    case TC_ERR_HOST_UNREACHABLE:
    case TC_ERR_HOST_NOT_FOUND:
    case TC_ERR_NETWORK_TIMEOUT:
    case TC_ERR_SHUTDOWN_IN_PROGRESS:
    case TC_ERR_READ_CONCERN_MAJORITY_NOT_AVAILABLE_YET:
    case TC_ERR_PRIMARY_STEPPED_DOWN:
    case TC_ERR_EXCEEDED_TIME_LIMIT:
    case TC_ERR_SOCKET_EXCEPTION:
    case TC_ERR_NOT_WRITABLE_PRIMARY:
    case TC_ERR_INTERRUPTED_AT_SHUTDOWN:
    case TC_ERR_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE:
    case TC_ERR_NOT_PRIMARY_NO_SECONDARY_OK:
    case TC_ERR_NOT_PRIMARY_OR_SECONDARY:
        return true;
    default:
        return false;
    }
}
