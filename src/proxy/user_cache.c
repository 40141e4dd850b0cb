/* The users the proxy authenticates its clients against, read from the archive
 * (the one place users are managed, as mongos reads them from the config
 * servers): usersInfo {user, db} with showCredentials, sent through the
 * archive's authenticated pool on the loop, never blocking it. A user is kept
 * for max_age_ms, or until user_cache_invalidate() (a user command went
 * through the proxy); lookups of a user being read wait for that one read. */
#include "proxy/proxy_private.h"

#include "common/clock.h"
#include "common/log.h"
#include "wire/wire.h"

#include <string.h>

#define LOG_COMPONENT "ACCESS"
#define USER_CACHE_MAX_ENTRIES 1024

typedef struct user_waiter {
    struct user_waiter *next;
    user_cache_fn done;
    void *context;
    uint64_t generation; /* the cache's when it asked: an older read does not answer it */
} user_waiter_t;

typedef struct user_entry {
    struct user_entry *next;
    user_cache_t *cache;
    char *name;
    char *database;
    bool has_value;          /* read at least once */
    proxy_user_t value;
    uint64_t fetch_generation; /* the cache's generation when the read under way began */
    bool fetching;
    bool delivering;         /* waiters are being called: not to be evicted */
    user_waiter_t *waiters;
    user_waiter_t *waiters_tail;
} user_entry_t;

struct user_cache {
    backend_pool_t *archive;
    int64_t max_age_ms;
    uint64_t generation;
    user_entry_t *entries;
    size_t entry_count;
};

user_cache_t *user_cache_new(backend_pool_t *archive, int64_t max_age_ms)
{
    user_cache_t *cache = bson_malloc0(sizeof *cache);
    cache->archive = archive;
    cache->max_age_ms = max_age_ms;
    cache->generation = 1;
    return cache;
}

static void value_cleanup(proxy_user_t *value)
{
    privileges_user_cleanup(&value->user);
    memset(value, 0, sizeof *value); /* the keys too */
}

static void entry_free(user_entry_t *entry)
{
    value_cleanup(&entry->value);
    bson_free(entry->name);
    bson_free(entry->database);
    bson_free(entry);
}

void user_cache_destroy(user_cache_t *cache)
{
    if (cache == NULL) {
        return;
    }
    /* Called once the archive pool has failed every request: no read is under way. */
    while (cache->entries != NULL) {
        user_entry_t *entry = cache->entries;
        cache->entries = entry->next;
        entry_free(entry);
    }
    bson_free(cache);
}

void user_cache_invalidate(user_cache_t *cache)
{
    cache->generation++;
}

uint64_t user_cache_generation(const user_cache_t *cache)
{
    return cache->generation;
}

static bool entry_fresh(const user_cache_t *cache, const user_entry_t *entry, int64_t now)
{
    return entry->has_value && entry->value.generation == cache->generation &&
           now - entry->value.fetched_ms < cache->max_age_ms;
}

/* Makes room for one more entry: drops one not in use, the oldest read first. */
static void evict_one(user_cache_t *cache)
{
    user_entry_t **oldest = NULL;
    for (user_entry_t **link = &cache->entries; *link != NULL; link = &(*link)->next) {
        user_entry_t *entry = *link;
        if (entry->fetching || entry->delivering) {
            continue;
        }
        if (oldest == NULL || !entry->has_value ||
            ((*oldest)->has_value && entry->value.fetched_ms < (*oldest)->value.fetched_ms)) {
            oldest = link;
        }
    }
    if (oldest != NULL) {
        user_entry_t *entry = *oldest;
        *oldest = entry->next;
        cache->entry_count--;
        entry_free(entry);
    }
}

static user_entry_t *find_or_add(user_cache_t *cache, const char *name, const char *database)
{
    for (user_entry_t *entry = cache->entries; entry != NULL; entry = entry->next) {
        if (strcmp(entry->name, name) == 0 && strcmp(entry->database, database) == 0) {
            return entry;
        }
    }
    if (cache->entry_count >= USER_CACHE_MAX_ENTRIES) {
        evict_one(cache);
    }
    user_entry_t *entry = bson_malloc0(sizeof *entry);
    entry->cache = cache;
    entry->name = bson_strdup(name);
    entry->database = bson_strdup(database);
    entry->next = cache->entries;
    cache->entries = entry;
    cache->entry_count++;
    return entry;
}

/* The user from usersInfo's reply: its roles and the credentials it shows. */
static bool read_reply(user_entry_t *entry, const uint8_t *reply, size_t length, proxy_user_t *out,
                       bson_error_t *error)
{
    bson_t body, user;
    bson_iter_t iter, users;
    memset(out, 0, sizeof *out);
    if (!wire_op_msg_find_body(reply, length, &body, error)) {
        return false;
    }
    if (!bson_iter_init_find(&iter, &body, "ok") || bson_iter_as_double(&iter) != 1.0) {
        const char *message = "no reason given";
        int32_t code = TC_ERR_OPERATION_FAILED;
        if (bson_iter_init_find(&iter, &body, "errmsg") && BSON_ITER_HOLDS_UTF8(&iter)) {
            message = bson_iter_utf8(&iter, NULL);
        }
        if (bson_iter_init_find(&iter, &body, "code") && BSON_ITER_HOLDS_NUMBER(&iter)) {
            code = (int32_t)bson_iter_as_int64(&iter);
        }
        return tc_error_set(error, code, "the archive refused usersInfo for %s@%s: %s", entry->name, entry->database,
                            message);
    }
    if (!bson_iter_init_find(&iter, &body, "users") || !BSON_ITER_HOLDS_ARRAY(&iter) ||
        !bson_iter_recurse(&iter, &users)) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "the archive's usersInfo reply has no users array");
    }
    while (bson_iter_next(&users)) {
        uint32_t document_length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&users)) {
            continue;
        }
        bson_iter_document(&users, &document_length, &data);
        if (!bson_init_static(&user, data, document_length) || !privileges_user_from_document(&user, &out->user)) {
            continue;
        }
        if (strcmp(out->user.name, entry->name) != 0 || strcmp(out->user.database, entry->database) != 0) {
            privileges_user_cleanup(&out->user);
            continue;
        }
        out->found = true;
        for (int m = SCRAM_SHA_1; m <= SCRAM_SHA_256; m++) {
            out->has_credentials[m] =
                scram_credentials_from_user_document(&user, (scram_mechanism_t)m, &out->credentials[m]);
        }
        break;
    }
    return true;
}

static void add_waiter(user_entry_t *entry, user_waiter_t *waiter)
{
    waiter->next = NULL;
    if (entry->waiters_tail != NULL) {
        entry->waiters_tail->next = waiter;
    } else {
        entry->waiters = waiter;
    }
    entry->waiters_tail = waiter;
}

static void fetch(user_entry_t *entry);

/* Answers the waiters this read may answer: all of them on an error, else those
 * that asked before the users last changed; the others wait for a new read. */
static void deliver(user_entry_t *entry, const bson_error_t *error)
{
    user_waiter_t *waiter = entry->waiters;
    user_waiter_t *answered = NULL, **answered_tail = &answered;
    entry->waiters = NULL;
    entry->waiters_tail = NULL;
    while (waiter != NULL) {
        user_waiter_t *next = waiter->next;
        if (error == NULL && waiter->generation > entry->fetch_generation) {
            add_waiter(entry, waiter);
        } else {
            waiter->next = NULL;
            *answered_tail = waiter;
            answered_tail = &waiter->next;
        }
        waiter = next;
    }
    if (entry->waiters != NULL) {
        fetch(entry);
    }
    entry->delivering = true;
    while (answered != NULL) {
        user_waiter_t *next = answered->next;
        answered->done(answered->context, error != NULL ? NULL : &entry->value, error);
        bson_free(answered);
        answered = next;
    }
    entry->delivering = false;
}

static void on_users_info(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    user_entry_t *entry = context;
    bson_error_t read_error;
    proxy_user_t fresh;
    entry->fetching = false;
    if (error == NULL && !read_reply(entry, reply, length, &fresh, &read_error)) {
        error = &read_error;
    }
    if (error != NULL) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot read user {user}@{db} from the archive: {error}",
                     TC_ATTR_STR("user", entry->name), TC_ATTR_STR("db", entry->database),
                     TC_ATTR_STR("error", error->message));
        deliver(entry, error);
        return;
    }
    value_cleanup(&entry->value);
    entry->value = fresh;
    entry->value.fetched_ms = clock_monotonic_ms();
    entry->value.generation = entry->fetch_generation;
    entry->has_value = true;
    deliver(entry, NULL);
}

static void fetch(user_entry_t *entry)
{
    bson_t command = BSON_INITIALIZER, target;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_DOCUMENT_BEGIN(&command, "usersInfo", &target);
    BSON_APPEND_UTF8(&target, "user", entry->name);
    BSON_APPEND_UTF8(&target, "db", entry->database);
    bson_append_document_end(&command, &target);
    BSON_APPEND_BOOL(&command, "showCredentials", true);
    BSON_APPEND_UTF8(&command, "$db", entry->database);
    bool built = wire_op_msg_build(0, 0, 0, &command, NULL, 0, &message, &length, &error);
    bson_destroy(&command);
    if (!built) {
        deliver(entry, &error);
        return;
    }
    entry->fetching = true;
    entry->fetch_generation = entry->cache->generation;
    backend_pool_send(entry->cache->archive, message, length, on_users_info, entry);
    bson_free(message);
}

void user_cache_lookup(user_cache_t *cache, const char *name, const char *database, user_cache_fn done,
                       void *context)
{
    user_entry_t *entry = find_or_add(cache, name, database);
    if (entry_fresh(cache, entry, clock_monotonic_ms()) && !entry->fetching) {
        done(context, &entry->value, NULL);
        return;
    }
    user_waiter_t *waiter = bson_malloc0(sizeof *waiter);
    waiter->done = done;
    waiter->context = context;
    waiter->generation = cache->generation;
    add_waiter(entry, waiter);
    if (!entry->fetching) {
        fetch(entry);
    }
}
