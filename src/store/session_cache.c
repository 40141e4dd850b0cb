/* The local session cache: a chained hash map from lsid.id (16 bytes, random:
 * its first 8 bytes are the hash) to the session's user and last use. */
#include "store/session_cache.h"
#include "store/current_op.h"
#include "common/clock.h"

#include <openssl/sha.h>
#include <pthread.h>
#include <string.h>

#define SESSION_ID_BYTES 16
#define INITIAL_BUCKETS 64

typedef struct cached_session {
    struct cached_session *next;
    uint8_t id[SESSION_ID_BYTES];
    char *user_name; /* owned; NULL: none */
    char *user_database;
    int64_t last_use_ms; /* wall clock */
} cached_session_t;

struct session_cache {
    pthread_mutex_t mutex;
    cached_session_t **buckets;
    size_t bucket_count; /* a power of two */
    size_t count;
};

static size_t bucket_of(const session_cache_t *cache, const uint8_t *id)
{
    uint64_t hash;
    memcpy(&hash, id, sizeof hash);
    return (size_t)(hash & (cache->bucket_count - 1));
}

session_cache_t *session_cache_new(void)
{
    session_cache_t *cache = BSON_ALIGNED_ALLOC0(session_cache_t);
    pthread_mutex_init(&cache->mutex, NULL);
    cache->bucket_count = INITIAL_BUCKETS;
    cache->buckets = bson_malloc0(cache->bucket_count * sizeof *cache->buckets);
    return cache;
}

static void session_free(cached_session_t *session)
{
    bson_free(session->user_name);
    bson_free(session->user_database);
    bson_free(session);
}

void session_cache_destroy(session_cache_t *cache)
{
    if (cache == NULL) {
        return;
    }
    for (size_t i = 0; i < cache->bucket_count; i++) {
        while (cache->buckets[i] != NULL) {
            cached_session_t *session = cache->buckets[i];
            cache->buckets[i] = session->next;
            session_free(session);
        }
    }
    bson_free(cache->buckets);
    pthread_mutex_destroy(&cache->mutex);
    bson_free(cache);
}

/* Doubles the buckets once sessions outnumber them twice over. */
static void grow(session_cache_t *cache)
{
    size_t old_count = cache->bucket_count;
    cached_session_t **old = cache->buckets;
    cache->bucket_count *= 2;
    cache->buckets = bson_malloc0(cache->bucket_count * sizeof *cache->buckets);
    for (size_t i = 0; i < old_count; i++) {
        while (old[i] != NULL) {
            cached_session_t *session = old[i];
            old[i] = session->next;
            size_t bucket = bucket_of(cache, session->id);
            session->next = cache->buckets[bucket];
            cache->buckets[bucket] = session;
        }
    }
    bson_free(old);
}

/* lsid.id's bytes when it is a 16-byte UUID, else NULL. */
static const uint8_t *session_id(const bson_iter_t *lsid)
{
    bson_iter_t id;
    bson_subtype_t subtype;
    uint32_t length;
    const uint8_t *bytes;
    if (!BSON_ITER_HOLDS_DOCUMENT(lsid) || !bson_iter_recurse(lsid, &id) || !bson_iter_find(&id, "id") ||
        !BSON_ITER_HOLDS_BINARY(&id)) {
        return NULL;
    }
    bson_iter_binary(&id, &subtype, &length, &bytes);
    return subtype == BSON_SUBTYPE_UUID && length == SESSION_ID_BYTES ? bytes : NULL;
}

void session_cache_note_command(session_cache_t *cache, const bson_t *command, const char *user_name,
                                const char *user_database)
{
    bson_iter_t lsid;
    if (!bson_iter_init_find(&lsid, command, "lsid")) {
        return;
    }
    const uint8_t *id = session_id(&lsid);
    if (id == NULL) {
        return;
    }
    int64_t now_ms = clock_wall_ms();
    pthread_mutex_lock(&cache->mutex);
    size_t bucket = bucket_of(cache, id);
    cached_session_t *session = cache->buckets[bucket];
    while (session != NULL && memcmp(session->id, id, SESSION_ID_BYTES) != 0) {
        session = session->next;
    }
    if (session == NULL) {
        session = bson_malloc0(sizeof *session);
        memcpy(session->id, id, SESSION_ID_BYTES);
        session->next = cache->buckets[bucket];
        cache->buckets[bucket] = session;
        if (++cache->count > 2 * cache->bucket_count) {
            grow(cache);
        }
    }
    if (!current_op_same_name(session->user_name, user_name) ||
        !current_op_same_name(session->user_database, user_database)) {
        bson_free(session->user_name);
        bson_free(session->user_database);
        session->user_name = user_name != NULL ? bson_strdup(user_name) : NULL;
        session->user_database = user_database != NULL ? bson_strdup(user_database) : NULL;
    }
    session->last_use_ms = now_ms;
    pthread_mutex_unlock(&cache->mutex);
}

/* Unlinks and frees every session for which drop says so. Call with the mutex held. */
static void remove_where(session_cache_t *cache, bool (*drop)(const cached_session_t *, const void *),
                         const void *argument)
{
    for (size_t i = 0; i < cache->bucket_count; i++) {
        cached_session_t **link = &cache->buckets[i];
        while (*link != NULL) {
            cached_session_t *session = *link;
            if (drop(session, argument)) {
                *link = session->next;
                session_free(session);
                cache->count--;
            } else {
                link = &session->next;
            }
        }
    }
}

static bool has_id(const cached_session_t *session, const void *id)
{
    return memcmp(session->id, id, SESSION_ID_BYTES) == 0;
}

static bool unused_since(const cached_session_t *session, const void *oldest_ms)
{
    return session->last_use_ms < *(const int64_t *)oldest_ms;
}

void session_cache_end(session_cache_t *cache, const bson_t *lsids)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, lsids)) {
        return;
    }
    pthread_mutex_lock(&cache->mutex);
    while (bson_iter_next(&iter)) {
        const uint8_t *id = session_id(&iter);
        if (id != NULL) {
            size_t bucket = bucket_of(cache, id);
            for (cached_session_t **link = &cache->buckets[bucket]; *link != NULL; link = &(*link)->next) {
                if (has_id(*link, id)) {
                    cached_session_t *session = *link;
                    *link = session->next;
                    session_free(session);
                    cache->count--;
                    break;
                }
            }
        }
    }
    pthread_mutex_unlock(&cache->mutex);
}

void session_cache_reap(session_cache_t *cache, int64_t now_ms)
{
    int64_t oldest_ms = now_ms - SESSION_CACHE_TIMEOUT_MS;
    pthread_mutex_lock(&cache->mutex);
    remove_where(cache, unused_since, &oldest_ms);
    pthread_mutex_unlock(&cache->mutex);
}

void session_cache_append_uid(bson_t *out, const char *user_name, const char *user_database)
{
    uint8_t digest[SHA256_DIGEST_LENGTH];
    char *full_name = user_name != NULL ? bson_strdup_printf("%s@%s", user_name, user_database ? user_database : "")
                                        : bson_strdup("");
    SHA256((const unsigned char *)full_name, strlen(full_name), digest);
    BSON_APPEND_BINARY(out, "uid", BSON_SUBTYPE_BINARY, digest, sizeof digest);
    bson_free(full_name);
}

static bool filter_admits(const session_cache_filter_t *filter, const cached_session_t *session)
{
    if (filter->all_users) {
        return true;
    }
    for (size_t i = 0; i < filter->user_count; i++) {
        if (current_op_same_name(filter->names[i], session->user_name) &&
            (filter->names[i] == NULL || current_op_same_name(filter->databases[i], session->user_database))) {
            return true;
        }
    }
    return false;
}

static void append_session(const cached_session_t *session, bson_t *out)
{
    bson_t id;
    BSON_APPEND_DOCUMENT_BEGIN(out, "_id", &id);
    BSON_APPEND_BINARY(&id, "id", BSON_SUBTYPE_UUID, session->id, SESSION_ID_BYTES);
    session_cache_append_uid(&id, session->user_name, session->user_database);
    bson_append_document_end(out, &id);
    BSON_APPEND_DATE_TIME(out, "lastUse", session->last_use_ms);
    if (session->user_name != NULL) {
        bson_t user;
        char *full_name = bson_strdup_printf("%s@%s", session->user_name,
                                             session->user_database ? session->user_database : "");
        BSON_APPEND_DOCUMENT_BEGIN(out, "user", &user);
        BSON_APPEND_UTF8(&user, "name", full_name);
        bson_append_document_end(out, &user);
        bson_free(full_name);
    }
}

void session_cache_list(session_cache_t *cache, const session_cache_filter_t *filter, bson_t *array,
                        uint32_t *count)
{
    pthread_mutex_lock(&cache->mutex);
    for (size_t i = 0; i < cache->bucket_count; i++) {
        for (const cached_session_t *session = cache->buckets[i]; session != NULL; session = session->next) {
            if (!filter_admits(filter, session)) {
                continue;
            }
            bson_t document = BSON_INITIALIZER;
            append_session(session, &document);
            current_op_array_append(array, count, &document);
            bson_destroy(&document);
        }
    }
    pthread_mutex_unlock(&cache->mutex);
}
