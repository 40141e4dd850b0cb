/* The logical sessions this store has seen, mongod's local session cache behind
 * $listLocalSessions: every command carrying an lsid records its id, user and
 * time of use (O(1), a hash map under one mutex); endSessions and
 * logicalSessionTimeoutMinutes of disuse forget it. */
#ifndef TC_STORE_SESSION_CACHE_H
#define TC_STORE_SESSION_CACHE_H

#include "common/error.h"

#define SESSION_CACHE_TIMEOUT_MS (30 * 60 * 1000) /* logicalSessionTimeoutMinutes */

typedef struct session_cache session_cache_t;

/* Free with session_cache_destroy(). */
session_cache_t *session_cache_new(void);
void session_cache_destroy(session_cache_t *cache);

/* Records the command's lsid (when it has one whose id is a UUID) as used now
 * by user_name@user_database (NULL: no authenticated user). */
void session_cache_note_command(session_cache_t *cache, const bson_t *command, const char *user_name,
                                const char *user_database);

/* endSessions: forgets each lsid of the array. */
void session_cache_end(session_cache_t *cache, const bson_t *lsids);

/* Forgets sessions unused since before now_ms - SESSION_CACHE_TIMEOUT_MS. */
void session_cache_reap(session_cache_t *cache, int64_t now_ms);

/* Which sessions a listing shows: every one, or those of the users given
 * (names[i]@databases[i]; a NULL name stands for no authenticated user). */
typedef struct session_cache_filter {
    bool all_users;
    const char *const *names;
    const char *const *databases;
    size_t user_count;
} session_cache_filter_t;

/* Appends one document per session, as $listLocalSessions shows them:
 * {_id: {id, uid}, lastUse, user: {name: "user@db"}} (user only for an
 * authenticated one), keys continuing from *count. */
void session_cache_list(session_cache_t *cache, const session_cache_filter_t *filter, bson_t *array,
                        uint32_t *count);

/* Appends uid: the SHA-256 of "user@db" (of "" without a user), as mongod
 * identifies a session's owner. */
void session_cache_append_uid(bson_t *out, const char *user_name, const char *user_database);

#endif
