/* Private to `thermocline check` (check.c, check_privileges.c, check_namespace.c):
 * the findings it prints and what it knows of each tier. */
#ifndef TC_TIER_CHECK_PRIVATE_H
#define TC_TIER_CHECK_PRIVATE_H

#include "common/bson_view.h"
#include "tier/index_sync.h"

#include <stdio.h>

/* Errors make the pair unfit (exit 1); warnings are printed and do not block;
 * notes (the measurements) are printed only with --verbose. */
typedef enum check_severity {
    CHECK_ERROR,
    CHECK_WARNING,
    CHECK_NOTE,
} check_severity_t;

typedef struct check_report {
    FILE *out;
    bool verbose;
    size_t errors;
    size_t warnings;
} check_report_t;

/* Prints one finding, "error: ...", "warning: ..." or "note: ...", as one line. */
void check_report(check_report_t *report, check_severity_t severity, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* What a refused command says, short: "not authorized (Unauthorized 13)" rather
 * than the server's echo of the whole command; else the error's message. */
const char *check_reason(const bson_error_t *error);

/* One tier as the check reached it, with the config's URI (credentials, TLS). */
typedef struct check_tier {
    const char *name; /* "archive" or "fast" */
    bool is_fast;
    mongoc_client_pool_t *pool;
    mongoc_client_t *client; /* NULL when unreachable: nothing more is asked of it */
    bool authenticated;      /* connectionStatus names a user */
    char user[160];          /* "name@db" of the first authenticated user */
    bson_t privileges;       /* authInfo.authenticatedUserPrivileges (an array) */
} check_tier_t;

/* Whether tier's user holds what thermocline needs there (see check_privileges.c
 * for the table); one finding per resource short of actions. A tier whose URI
 * names no user but which enforces access control is an error too. False when
 * the tier refuses to be asked anything more (then its other checks are skipped). */
bool check_privileges(check_report_t *report, const config_t *config, check_tier_t *tier);

/* What one namespace's window weighs, estimated from the archive. */
typedef struct check_window {
    bool measured;
    int64_t documents;
    double data_bytes;  /* documents x the collection's average size */
    double index_bytes; /* the collection's indexes, pro rata */
} check_window_t;

/* The checks of one namespace: the archive's collection and its time-field index,
 * documents without a date, the window's size (into *out_window), and what the
 * index sync would change on the fast tier (fast may be NULL: unreachable). */
void check_namespace(check_report_t *report, mongoc_client_t *archive, mongoc_client_t *fast,
                     const config_namespace_t *policy, check_window_t *out_window);

#endif
