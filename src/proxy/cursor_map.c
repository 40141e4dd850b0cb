/* The proxy's cursor ids: an open-addressing table from proxy id to the tier, its
 * member and that server's own id. Ids are random positive int64, never 0, never reused while
 * mapped. Loop thread only. */
#include "proxy/proxy_private.h"

#include "wire/wire.h"
#include "common/clock.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Cursors idle longer than this are gone on the tiers too (mongod's 10 minutes). */
#define CURSOR_IDLE_LIMIT_MS (10 * 60 * 1000 + 30 * 1000)

struct cursor_map {
    proxy_cursor_t *slots; /* proxy_id 0: empty */
    size_t capacity;       /* a power of two */
    size_t count;
};

static size_t slot_of(const cursor_map_t *map, int64_t proxy_id)
{
    return (size_t)((uint64_t)proxy_id * 0x9E3779B97F4A7C15ull) & (map->capacity - 1);
}

cursor_map_t *cursor_map_new(void)
{
    cursor_map_t *map = bson_malloc0(sizeof *map);
    map->capacity = 64;
    map->slots = bson_malloc0(map->capacity * sizeof(proxy_cursor_t));
    return map;
}

void cursor_map_destroy(cursor_map_t *map)
{
    if (map == NULL) {
        return;
    }
    for (size_t i = 0; i < map->capacity; i++) {
        bson_destroy(map->slots[i].stages);
    }
    bson_free(map->slots);
    bson_free(map);
}

static void insert_slot(cursor_map_t *map, const proxy_cursor_t *cursor)
{
    size_t slot = slot_of(map, cursor->proxy_id);
    while (map->slots[slot].proxy_id != 0) {
        slot = (slot + 1) & (map->capacity - 1);
    }
    map->slots[slot] = *cursor;
    map->count++;
}

static void grow(cursor_map_t *map)
{
    proxy_cursor_t *old = map->slots;
    size_t old_capacity = map->capacity;
    map->capacity *= 2;
    map->slots = bson_malloc0(map->capacity * sizeof(proxy_cursor_t));
    map->count = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].proxy_id != 0) {
            insert_slot(map, &old[i]);
        }
    }
    bson_free(old);
}

int64_t cursor_map_add(cursor_map_t *map, proxy_tier_t tier, uint64_t member_id, int64_t backend_id, const char *ns)
{
    if ((map->count + 1) * 2 > map->capacity) {
        grow(map);
    }
    proxy_cursor_t cursor = {
        .backend_id = backend_id, .tier = tier, .member_id = member_id, .last_used_ms = clock_monotonic_ms()};
    snprintf(cursor.ns, sizeof cursor.ns, "%s", ns);
    do {
        cursor.proxy_id = wire_cursor_id_random(clock_monotonic_ms());
    } while (cursor_map_find(map, cursor.proxy_id) != NULL);
    insert_slot(map, &cursor);
    return cursor.proxy_id;
}

proxy_cursor_t *cursor_map_find(cursor_map_t *map, int64_t proxy_id)
{
    if (proxy_id == 0) {
        return NULL;
    }
    size_t slot = slot_of(map, proxy_id);
    while (map->slots[slot].proxy_id != 0) {
        if (map->slots[slot].proxy_id == proxy_id) {
            return &map->slots[slot];
        }
        slot = (slot + 1) & (map->capacity - 1);
    }
    return NULL;
}

void cursor_map_remove(cursor_map_t *map, int64_t proxy_id)
{
    proxy_cursor_t *found = cursor_map_find(map, proxy_id);
    if (found == NULL) {
        return;
    }
    bson_destroy(found->stages);
    /* Backward-shift deletion keeps every probe chain unbroken. */
    size_t hole = (size_t)(found - map->slots);
    size_t next = (hole + 1) & (map->capacity - 1);
    while (map->slots[next].proxy_id != 0) {
        size_t home = slot_of(map, map->slots[next].proxy_id);
        bool can_move = hole <= next ? (home <= hole || home > next) : (home <= hole && home > next);
        if (can_move) {
            map->slots[hole] = map->slots[next];
            hole = next;
        }
        next = (next + 1) & (map->capacity - 1);
    }
    memset(&map->slots[hole], 0, sizeof(proxy_cursor_t));
    map->count--;
}

void cursor_map_expire(cursor_map_t *map, int64_t now_ms)
{
    for (size_t i = 0; i < map->capacity;) {
        if (map->slots[i].proxy_id != 0 && now_ms - map->slots[i].last_used_ms > CURSOR_IDLE_LIMIT_MS) {
            cursor_map_remove(map, map->slots[i].proxy_id); /* may shift a later entry into slot i */
        } else {
            i++;
        }
    }
}

size_t cursor_map_count(const cursor_map_t *map)
{
    return map->count;
}
