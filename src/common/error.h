/* One way to fail: functions return bool and fill a bson_error_t whose code is
 * the MongoDB error code a client would see (domain TC_ERROR_DOMAIN), so an error
 * travels unchanged from the module that found it to the wire reply. */
#ifndef TC_COMMON_ERROR_H
#define TC_COMMON_ERROR_H

#include <bson/bson.h>
#include <stdbool.h>

#define TC_MUST_CHECK __attribute__((warn_unused_result))

/* bson_error_t.domain for errors that carry a MongoDB server error code. */
#define TC_ERROR_DOMAIN 27017u

/* MongoDB's error codes (src/mongo/base/error_codes.yml), those we answer with. */
enum {
    TC_ERR_INTERNAL = 1,
    TC_ERR_BAD_VALUE = 2,
    TC_ERR_NO_SUCH_KEY = 4,
    TC_ERR_GRAPH_CONTAINS_CYCLE = 5,
    TC_ERR_HOST_UNREACHABLE = 6,
    TC_ERR_FAILED_TO_PARSE = 9,
    TC_ERR_CANNOT_MUTATE_OBJECT = 10,
    TC_ERR_USER_NOT_FOUND = 11,
    TC_ERR_UNSUPPORTED_FORMAT = 12,
    TC_ERR_UNAUTHORIZED = 13,
    TC_ERR_TYPE_MISMATCH = 14,
    TC_ERR_OVERFLOW = 15,
    TC_ERR_AUTHENTICATION_FAILED = 18,
    TC_ERR_ILLEGAL_OPERATION = 20,
    TC_ERR_EMPTY_ARRAY_OPERATION = 21,
    TC_ERR_INVALID_BSON = 22,
    TC_ERR_LOCK_TIMEOUT = 24,
    TC_ERR_NAMESPACE_NOT_FOUND = 26,
    TC_ERR_INDEX_NOT_FOUND = 27,
    TC_ERR_PATH_NOT_VIABLE = 28,
    TC_ERR_NON_EXISTENT_PATH = 29,
    TC_ERR_INVALID_PATH = 30,
    TC_ERR_ROLE_NOT_FOUND = 31,
    TC_ERR_CANNOT_BACKFILL_ARRAY = 34,
    TC_ERR_CONFLICTING_UPDATE_OPERATORS = 40,
    TC_ERR_CURSOR_NOT_FOUND = 43,
    TC_ERR_NAMESPACE_EXISTS = 48,
    TC_ERR_MAX_TIME_MS_EXPIRED = 50,
    TC_ERR_DOLLAR_PREFIXED_FIELD_NAME = 52,
    TC_ERR_INVALID_ID_FIELD = 53,
    TC_ERR_NOT_SINGLE_VALUE_FIELD = 54,
    TC_ERR_EMPTY_FIELD_NAME = 56,
    TC_ERR_COMMAND_NOT_FOUND = 59,
    TC_ERR_IMMUTABLE_FIELD = 66,
    TC_ERR_CANNOT_CREATE_INDEX = 67,
    TC_ERR_INDEX_ALREADY_EXISTS = 68,
    TC_ERR_INVALID_OPTIONS = 72,
    TC_ERR_INVALID_NAMESPACE = 73,
    TC_ERR_INDEX_OPTIONS_CONFLICT = 85,
    TC_ERR_NOT_EXACT_VALUE_FIELD = 111,
    TC_ERR_INDEX_KEY_SPECS_CONFLICT = 86,
    TC_ERR_NETWORK_TIMEOUT = 89,
    TC_ERR_OPERATION_FAILED = 96,
    TC_ERR_CONFLICTING_OPERATION_IN_PROGRESS = 117,
    TC_ERR_COMMAND_NOT_SUPPORTED = 115,
    TC_ERR_DOCUMENT_VALIDATION_FAILURE = 121,
    TC_ERR_WRITE_CONFLICT = 112,
    TC_ERR_COMMAND_FAILED = 125,
    TC_ERR_INVALID_PIPELINE_OPERATOR = 168,
    /* Views (src/store/views.c). */
    TC_ERR_VIEW_DEPTH_LIMIT_EXCEEDED = 165,
    TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW = 166,
    TC_ERR_OPTION_NOT_SUPPORTED_ON_VIEW = 167,
    TC_ERR_CURSOR_IN_USE = 179,
    TC_ERR_NOT_WRITABLE_PRIMARY = 10107,
    TC_ERR_SOCKET_EXCEPTION = 9001,
    TC_ERR_INTERRUPTED = 11601,
    /* Multi-document transactions (src/store/transactions.c). */
    TC_ERR_QUERY_FEATURE_NOT_ALLOWED = 224, /* $expr in a partial index filter */
    TC_ERR_TRANSACTION_TOO_OLD = 225,
    TC_ERR_NO_SUCH_TRANSACTION = 251,
    TC_ERR_TRANSACTION_COMMITTED = 256,
    TC_ERR_TRANSACTION_TOO_LARGE = 257,
    TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION = 263,
    TC_ERR_DUPLICATE_KEY = 11000,
    TC_ERR_NON_NEGATIVE_VALUE = 51024, /* find's skip, limit and batchSize */
    TC_ERR_NO_QUERY_EXECUTION_PLANS = 291,
    /* find's min and max (codeName "Location<code>"). */
    TC_ERR_MIN_MAX_WITHOUT_HINT = 51173,
    TC_ERR_MIN_MAX_INCOMPATIBLE_INDEX = 51174,
    TC_ERR_MIN_NOT_BEFORE_MAX = 51175,
    TC_ERR_MIN_MAX_DIFFERENT_FIELDS = 51176,
    TC_ERR_CHANGE_STREAM_HISTORY_LOST = 286,
    TC_ERR_QUERY_EXCEEDED_MEMORY_LIMIT = 292,
    TC_ERR_EXCEEDED_TIME_LIMIT = 262, /* retryable: a bounded wait ran out */
    TC_ERR_API_STRICT_ERROR = 323,
    TC_ERR_LOCATION_BSON_TOO_LARGE = 10334,
    TC_ERR_UNRECOGNIZED_COMMAND_FIELD = 40415,
    TC_ERR_INCOMPATIBLE_COLLATION_VERSION = 161, /* a collation's version is not this ICU's */
    TC_ERR_MISSING_REQUIRED_FIELD = 40414, /* codeName Location40414 */
    TC_ERR_CANNOT_INDEX_PARALLEL_ARRAYS = 171,
    /* Numbered assertions (codeName "Location<code>") raised by sort and index key
     * generation. */
    TC_ERR_SORT_ILLEGAL_KEY = 15974,
    TC_ERR_SORT_BAD_ORDER = 15975,
    TC_ERR_SORT_META_ONLY = 17312,
    TC_ERR_SORT_ILLEGAL_META = 31138,
    TC_ERR_FIELD_PATH_EMPTY = 40352,
    TC_ERR_FIELD_PATH_TRAILING_DOT = 40353,
    TC_ERR_FIELD_PATH_EMPTY_COMPONENT = 15998,
    TC_ERR_FIELD_PATH_DOLLAR_PREFIX = 16410,
    TC_ERR_INDEX_AMBIGUOUS_ARRAY_FIELD = 16746,
    /* Wire protocol (src/wire): message framing and parsing. */
    TC_ERR_PROTOCOL_ERROR = 17,
    TC_ERR_ILLEGAL_OP_MSG_FLAG = 223,
    TC_ERR_TOO_MANY_DOCUMENT_SEQUENCES = 233,
    TC_ERR_CHECKSUM_MISMATCH = 288,
    /* Numbered assertions of mongod's OP_MSG and OP_QUERY parsers. */
    TC_ERR_LOCATION_EXPECTED_OBJECT = 10065,
    TC_ERR_LOCATION_BAD_COMMAND_NUMBER_TO_RETURN = 16979,
    TC_ERR_LOCATION_EXHAUST_COMMAND = 18527,
    TC_ERR_LOCATION_NAMESPACE_STRING = 18633,
    TC_ERR_LOCATION_NOT_ENOUGH_DATA = 18634,
    TC_ERR_LOCATION_MULTIPLE_BODIES = 40430,
    TC_ERR_LOCATION_DUPLICATE_DOCUMENT_SEQUENCE = 40431,
    TC_ERR_LOCATION_UNKNOWN_SECTION_KIND = 40432,
    TC_ERR_LOCATION_DUPLICATE_BODY_FIELD = 40433,
    TC_ERR_LOCATION_NOT_A_COMMAND_NAMESPACE = 40473,
    TC_ERR_LOCATION_OP_MSG_NO_BODY = 40587,
    TC_ERR_LOCATION_DB_IN_OP_QUERY = 40621,
    TC_ERR_LOCATION_OP_MSG_CHECKSUM_SIZE = 51251,
    TC_ERR_LOCATION_OP_QUERY_REMOVED = 5739101, /* an OP_QUERY that is not a command (a legacy find) */
    TC_ERR_UNSUPPORTED_OP_QUERY_COMMAND = 352, /* an OP_QUERY command other than the handshake's */
    /* Numbered assertions of mongod's query matcher ($regex). */
    TC_ERR_REGEX_OPTIONS_TWICE_IN_REGEX = 51074,
    TC_ERR_REGEX_OPTIONS_TWICE_IN_OPTIONS = 51075,
    TC_ERR_REGEX_INVALID = 51091,
    TC_ERR_REGEX_BAD_FLAG = 51108,
    /* Aggregation pipelines and expressions (src/query/pipeline*, expression*). */
    TC_ERR_CONVERSION_FAILURE = 241,
    TC_ERR_UNRECOGNIZED_PIPELINE_STAGE = 40324,
    /* Change streams (src/store/change_stream.c, change_event.c). */
    TC_ERR_NO_MATCHING_DOCUMENT = 47,
    TC_ERR_INVALID_RESUME_TOKEN = 260,
    TC_ERR_CHANGE_STREAM_FATAL_ERROR = 280,
    TC_ERR_CHANGE_STREAM_NOT_REPLICA_SET = 40573,
    TC_ERR_CHANGE_STREAM_NOT_FIRST_STAGE = 40602,
    TC_ERR_CHANGE_STREAM_RESUME_OPTIONS = 40674,    /* more than one kind of start point */
    TC_ERR_CHANGE_STREAM_EXPECTS_OBJECT = 50808,
    TC_ERR_CHANGE_STREAM_RESUME_AND_START = 50865,  /* both resumeAfter and startAfter */
    TC_ERR_BAD_RESUME_TOKEN_DATA = 40647,
    /* Authentication and TLS (src/security, src/store/auth*). */
    TC_ERR_SSL_HANDSHAKE_FAILED = 141,
    TC_ERR_MECHANISM_UNAVAILABLE = 334,
    TC_ERR_USER_ALREADY_EXISTS = 51003,               /* codeName Location51003 */
    TC_ERR_AUTHENTICATED_AS_ANOTHER_USER = 5626701,   /* "Each client connection may only be authenticated once" */
    TC_ERR_AUTHENTICATED_ON_ANOTHER_DATABASE = 5626702,
    /* Explain, read preferences and routing (src/store/cmd_read.c, src/proxy). */
    TC_ERR_INVALID_LENGTH = 16,
    TC_ERR_FAILED_TO_SATISFY_READ_PREFERENCE = 133,
    TC_ERR_MAX_STALENESS_OUT_OF_RANGE = 160,
    /* A member going away, stepping down or not yet ready (the retryable codes). */
    TC_ERR_HOST_NOT_FOUND = 7,
    TC_ERR_WRITE_CONCERN_FAILED = 64,
    TC_ERR_SHUTDOWN_IN_PROGRESS = 91,
    TC_ERR_READ_CONCERN_MAJORITY_NOT_AVAILABLE_YET = 134,
    TC_ERR_PRIMARY_STEPPED_DOWN = 189,
    TC_ERR_INTERRUPTED_AT_SHUTDOWN = 11600,
    TC_ERR_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE = 11602,
    TC_ERR_NOT_PRIMARY_NO_SECONDARY_OK = 13435,
    TC_ERR_NOT_PRIMARY_OR_SECONDARY = 13436,
};

/* Fills error with a MongoDB code and a printf-style message; always returns false,
 * so callers can write `return tc_error_set(error, ...)`. error may be NULL. */
bool tc_error_set(bson_error_t *error, int32_t code, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts prefix before error's message, as mongod wraps an error with its context
 * ("Executor error during find command :: caused by :: ..."), truncating the end
 * if it must. */
void tc_error_prefix(bson_error_t *error, const char *prefix);

/* The codeName MongoDB sends with code ("BadValue"), or "Location<code>" for the
 * numbered assertion codes that have no name, as mongod does. Never NULL. */
const char *tc_error_code_name(int32_t code);

/* Appends ok: 0, errmsg, code and codeName for error to reply. */
void tc_error_append_reply(const bson_error_t *error, bson_t *reply);

/* Whether a server error code is one the retryable-reads and retryable-writes
 * specifications both retry: InterruptedAtShutdown,
 * InterruptedDueToReplStateChange, NotWritablePrimary, NotPrimaryNoSecondaryOk,
 * NotPrimaryOrSecondary, PrimarySteppedDown, ShutdownInProgress, HostNotFound,
 * HostUnreachable, NetworkTimeout, SocketException, ExceededTimeLimit and
 * ReadConcernMajorityNotAvailableYet. The one list of them in the project. */
bool tc_error_code_is_retryable(int32_t code);

/* WiredTiger-style cleanup discipline inside a module: `TC_CHECK(expr)` jumps to
 * the function's `done` label when expr is false (the callee filled error). */
#define TC_CHECK(expression)                                                   \
    do {                                                                       \
        if (!(expression)) {                                                   \
            goto done;                                                         \
        }                                                                      \
    } while (0)

#endif
