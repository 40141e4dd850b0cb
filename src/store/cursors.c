/* The cursor table: an open-addressing map from id to cursor under one mutex.
 * Operations hold a cursor checked out, never the mutex, while they run. */
#include "store/cursors.h"
#include "store/current_op.h"

#include "wire/wire.h"
#include "common/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

struct cursor_table {
    pthread_mutex_t mutex;
    store_cursor_t **cursors; /* unordered array: cursor counts are small */
    size_t count;
    size_t capacity;
    _Atomic int64_t timeout_ms;
};

store_cursor_t *store_cursor_new(const char *ns)
{
    store_cursor_t *cursor = BSON_ALIGNED_ALLOC0(store_cursor_t);
    cursor->ns = bson_strdup(ns);
    cursor->last_used_ms = clock_monotonic_ms();
    cursor->created_wall_ms = clock_wall_ms();
    cursor->last_access_wall_ms = cursor->created_wall_ms;
    return cursor;
}

void store_cursor_destroy(store_cursor_t *cursor)
{
    if (cursor == NULL) {
        return;
    }
    find_plan_destroy(cursor->plan);
    if (cursor->stream != NULL) {
        cursor->stream_destroy(cursor->stream);
    }
    for (size_t i = 0; i < cursor->document_count; i++) {
        bson_destroy(cursor->documents[i]);
    }
    bson_free(cursor->documents);
    if (cursor->originating_command != NULL) {
        bson_destroy(cursor->originating_command);
    }
    bson_free(cursor->ns);
    bson_free(cursor);
}

cursor_table_t *cursor_table_new(void)
{
    cursor_table_t *table = BSON_ALIGNED_ALLOC0(cursor_table_t);
    pthread_mutex_init(&table->mutex, NULL);
    atomic_init(&table->timeout_ms, CURSOR_DEFAULT_IDLE_TIMEOUT_MS);
    return table;
}

void cursor_table_destroy(cursor_table_t *table)
{
    if (table == NULL) {
        return;
    }
    for (size_t i = 0; i < table->count; i++) {
        store_cursor_destroy(table->cursors[i]);
    }
    bson_free(table->cursors);
    pthread_mutex_destroy(&table->mutex);
    bson_free(table);
}

static ssize_t find_slot(cursor_table_t *table, int64_t id)
{
    for (size_t i = 0; i < table->count; i++) {
        if (table->cursors[i]->id == id) {
            return (ssize_t)i;
        }
    }
    return -1;
}

static void remove_slot(cursor_table_t *table, size_t slot)
{
    table->cursors[slot] = table->cursors[table->count - 1];
    table->count--;
}

void cursor_table_add(cursor_table_t *table, store_cursor_t *cursor, const bson_t *originating_command)
{
    if (originating_command != NULL && cursor->originating_command == NULL) {
        cursor->originating_command = bson_copy(originating_command);
    }
    pthread_mutex_lock(&table->mutex);
    do {
        cursor->id = wire_cursor_id_random(clock_monotonic_ms());
    } while (find_slot(table, cursor->id) >= 0);
    if (table->count == table->capacity) {
        table->capacity = table->capacity ? table->capacity * 2 : 16;
        table->cursors = bson_realloc(table->cursors, table->capacity * sizeof(store_cursor_t *));
    }
    cursor->in_use = true;
    table->cursors[table->count++] = cursor;
    pthread_mutex_unlock(&table->mutex);
}

bool cursor_table_checkout(cursor_table_t *table, int64_t id, const char *ns, store_cursor_t **out_cursor,
                           bson_error_t *error)
{
    bool ok = false;
    pthread_mutex_lock(&table->mutex);
    ssize_t slot = find_slot(table, id);
    if (slot < 0) {
        tc_error_set(error, TC_ERR_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)id);
        goto done;
    }
    store_cursor_t *cursor = table->cursors[slot];
    if (strcmp(cursor->ns, ns) != 0) {
        tc_error_set(error, TC_ERR_UNAUTHORIZED,
                     "Requested getMore on namespace '%s', but cursor belongs to a different namespace %s", ns,
                     cursor->ns);
        goto done;
    }
    if (cursor->in_use) {
        tc_error_set(error, TC_ERR_CURSOR_IN_USE, "Cursor id %lld is already in use", (long long)id);
        goto done;
    }
    cursor->in_use = true;
    *out_cursor = cursor;
    ok = true;
done:
    pthread_mutex_unlock(&table->mutex);
    return ok;
}

void cursor_table_release(cursor_table_t *table, store_cursor_t *cursor, bool destroy_it)
{
    pthread_mutex_lock(&table->mutex);
    ssize_t slot = find_slot(table, cursor->id);
    cursor->in_use = false;
    cursor->last_used_ms = clock_monotonic_ms();
    cursor->last_access_wall_ms = clock_wall_ms();
    if (slot < 0) {
        destroy_it = true; /* killed while in use */
    } else if (destroy_it) {
        remove_slot(table, (size_t)slot);
    }
    pthread_mutex_unlock(&table->mutex);
    if (destroy_it) {
        store_cursor_destroy(cursor);
    }
}

bool cursor_table_kill(cursor_table_t *table, int64_t id, const char *ns)
{
    store_cursor_t *victim = NULL;
    bool found = false;
    pthread_mutex_lock(&table->mutex);
    ssize_t slot = find_slot(table, id);
    if (slot >= 0 && strcmp(table->cursors[slot]->ns, ns) == 0) {
        found = true;
        victim = table->cursors[slot];
        remove_slot(table, (size_t)slot);
        if (victim->in_use) {
            victim = NULL; /* its user destroys it on release */
        }
    }
    pthread_mutex_unlock(&table->mutex);
    store_cursor_destroy(victim);
    return found;
}

void cursor_table_kill_transaction(cursor_table_t *table, uint64_t transaction_id)
{
    store_cursor_t **victims = NULL;
    size_t victim_count = 0;
    if (transaction_id == 0) {
        return;
    }
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->count;) {
        store_cursor_t *cursor = table->cursors[i];
        if (cursor->transaction_id != transaction_id) {
            i++;
            continue;
        }
        remove_slot(table, i);
        if (!cursor->in_use) { /* one in use dies when its user releases it */
            victims = bson_realloc(victims, (victim_count + 1) * sizeof *victims);
            victims[victim_count++] = cursor;
        }
    }
    pthread_mutex_unlock(&table->mutex);
    for (size_t i = 0; i < victim_count; i++) {
        store_cursor_destroy(victims[i]);
    }
    bson_free(victims);
}

int64_t cursor_table_timeout_ms(cursor_table_t *table)
{
    return atomic_load(&table->timeout_ms);
}

void cursor_table_set_timeout_ms(cursor_table_t *table, int64_t timeout_ms)
{
    atomic_store(&table->timeout_ms, timeout_ms);
}

void cursor_table_reap(cursor_table_t *table, int64_t now_ms)
{
    int64_t timeout_ms = atomic_load(&table->timeout_ms);
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->count;) {
        store_cursor_t *cursor = table->cursors[i];
        if (!cursor->in_use && !cursor->no_timeout && now_ms - cursor->last_used_ms > timeout_ms) {
            remove_slot(table, i);
            store_cursor_destroy(cursor);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&table->mutex);
}

size_t cursor_table_count(cursor_table_t *table)
{
    pthread_mutex_lock(&table->mutex);
    size_t count = table->count;
    pthread_mutex_unlock(&table->mutex);
    return count;
}

static void append_idle_cursor(const store_cursor_t *cursor, const char *host, bson_t *out)
{
    bson_iter_t lsid;
    bson_t details;
    BSON_APPEND_UTF8(out, "type", "idleCursor");
    BSON_APPEND_UTF8(out, "host", host);
    BSON_APPEND_UTF8(out, "ns", cursor->ns);
    if (cursor->originating_command != NULL && bson_iter_init_find(&lsid, cursor->originating_command, "lsid")) {
        bson_append_iter(out, "lsid", -1, &lsid);
    }
    BSON_APPEND_DOCUMENT_BEGIN(out, "cursor", &details);
    BSON_APPEND_INT64(&details, "cursorId", cursor->id);
    BSON_APPEND_DATE_TIME(&details, "createdDate", cursor->created_wall_ms);
    BSON_APPEND_DATE_TIME(&details, "lastAccessDate", cursor->last_access_wall_ms);
    BSON_APPEND_INT64(&details, "nDocsReturned", cursor->documents_returned);
    BSON_APPEND_INT64(&details, "nBatchesReturned", cursor->batches_returned);
    BSON_APPEND_BOOL(&details, "noCursorTimeout", cursor->no_timeout);
    BSON_APPEND_BOOL(&details, "tailable", cursor->tailable);
    BSON_APPEND_BOOL(&details, "awaitData", cursor->await_data);
    if (cursor->originating_command != NULL) {
        BSON_APPEND_DOCUMENT(&details, "originatingCommand", cursor->originating_command);
    }
    bson_append_document_end(out, &details);
}

void cursor_table_report_idle(cursor_table_t *table, const char *host, bson_t *array, uint32_t *count)
{
    pthread_mutex_lock(&table->mutex);
    for (size_t i = 0; i < table->count; i++) {
        if (table->cursors[i]->in_use) {
            continue;
        }
        bson_t document = BSON_INITIALIZER;
        append_idle_cursor(table->cursors[i], host, &document);
        current_op_array_append(array, count, &document);
        bson_destroy(&document);
    }
    pthread_mutex_unlock(&table->mutex);
}
