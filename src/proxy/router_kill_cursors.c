/* killCursors through the proxy: its ids are the proxy's (cursor_map.c), which may
 * belong to both tiers and to several members of each. */
#include "proxy/router_private.h"

#include "wire/wire.h"

#include <string.h>

/* killCursors names proxy ids that may belong to both tiers and to several
 * members of each: answered here from the map, each server told of its own ids
 * (no reply awaited from them). */
static void on_kill_sent(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    (void)context, (void)reply, (void)length, (void)error;
}

/* The cursors of one server. */
typedef struct kill_group {
    proxy_tier_t tier;
    uint64_t member_id;
    bson_t *ids;
    uint32_t count;
} kill_group_t;

void router_kill_cursors(proxy_request_t *request)
{
    bson_iter_t iter, ids;
    bson_t killed = BSON_INITIALIZER, missing = BSON_INITIALIZER;
    uint32_t killed_count = 0, missing_count = 0;
    kill_group_t *groups = NULL;
    size_t group_count = 0;
    bson_error_t error;
    const char *collection = "";
    bson_iter_init(&iter, &request->command);
    if (bson_iter_next(&iter) && BSON_ITER_HOLDS_UTF8(&iter)) {
        collection = bson_iter_utf8(&iter, NULL);
    }
    if (bson_iter_init_find(&iter, &request->command, "cursors") && BSON_ITER_HOLDS_ARRAY(&iter)) {
        bson_iter_recurse(&iter, &ids);
        while (bson_iter_next(&ids)) {
            char key[16];
            const char *key_string;
            int64_t proxy_id = BSON_ITER_HOLDS_INT64(&ids) ? bson_iter_int64(&ids) : 0;
            proxy_cursor_t *cursor = cursor_map_find(request->proxy->cursors, proxy_id);
            if (cursor != NULL && strcmp(cursor->ns, request->ns) == 0) {
                size_t group = 0;
                while (group < group_count &&
                       (groups[group].tier != cursor->tier || groups[group].member_id != cursor->member_id)) {
                    group++;
                }
                if (group == group_count) {
                    groups = bson_realloc(groups, (group_count + 1) * sizeof *groups);
                    groups[group] =
                        (kill_group_t){.tier = cursor->tier, .member_id = cursor->member_id, .ids = bson_new()};
                    group_count++;
                }
                bson_uint32_to_string(groups[group].count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(groups[group].ids, key_string, cursor->backend_id);
                cursor_map_remove(request->proxy->cursors, proxy_id);
                bson_uint32_to_string(killed_count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&killed, key_string, proxy_id);
            } else {
                bson_uint32_to_string(missing_count++, &key_string, key, sizeof key);
                BSON_APPEND_INT64(&missing, key_string, proxy_id);
            }
        }
    }
    for (size_t group = 0; group < group_count; group++) {
        bson_iter_t database;
        bson_t kill = BSON_INITIALIZER;
        uint8_t *encoded;
        size_t length;
        backend_pool_t *pool = backend_pool_member(request->proxy->tiers[groups[group].tier], groups[group].member_id);
        BSON_APPEND_UTF8(&kill, "killCursors", collection);
        BSON_APPEND_ARRAY(&kill, "cursors", groups[group].ids);
        if (bson_iter_init_find(&database, &request->command, "$db")) {
            bson_append_iter(&kill, "$db", 3, &database);
        }
        if (pool != NULL && wire_op_msg_build(0, 0, 0, &kill, NULL, 0, &encoded, &length, &error)) {
            backend_pool_send(pool, encoded, length, on_kill_sent, NULL);
            bson_free(encoded);
        }
        bson_destroy(&kill);
        bson_destroy(groups[group].ids);
    }
    bson_free(groups);
    bson_t body = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    BSON_APPEND_ARRAY(&body, "cursorsKilled", &killed);
    BSON_APPEND_ARRAY(&body, "cursorsNotFound", &missing);
    BSON_APPEND_ARRAY(&body, "cursorsAlive", &empty);
    BSON_APPEND_ARRAY(&body, "cursorsUnknown", &empty);
    BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    router_finish_with_document(request, &body, 0);
    bson_destroy(&body);
    bson_destroy(&empty);
    bson_destroy(&killed);
    bson_destroy(&missing);
}
