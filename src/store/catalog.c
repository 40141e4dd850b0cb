/* The catalog: which collections exist, their options, indexes and WiredTiger
 * tables. Kept in memory (sorted by namespace) and persisted, one row per
 * collection, in the _catalog table in the same transaction as the change. */
#include "store/storage_private.h"
#include "store/oplog.h"
#include "store/index_options.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

/* --- names ---------------------------------------------------------------- */

bool catalog_validate_namespace(const char *ns, bson_error_t *error)
{
    const char *dot = strchr(ns, '.');
    if (dot == NULL || dot == ns || dot[1] == '\0') {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s'", ns);
    }
    if (strlen(ns) > 255) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Fully qualified namespace is too long: %s", ns);
    }
    for (const char *c = ns; c < dot; c++) {
        if (strchr("/\\. \"$", *c) != NULL) {
            return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid database name: '%.*s'",
                                (int)(dot - ns), ns);
        }
    }
    if (strchr(dot + 1, '$') != NULL) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid collection name: %s", dot + 1);
    }
    return true;
}

static char *new_table_uri(const char *kind)
{
    /* Random names: a table whose drop is still pending can never be reused. */
    uint8_t random_bytes[8];
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    memcpy(random_bytes, oid.bytes + 4, sizeof random_bytes);
    char uri[64];
    snprintf(uri, sizeof uri, "table:%s-%02x%02x%02x%02x%02x%02x%02x%02x", kind, random_bytes[0],
             random_bytes[1], random_bytes[2], random_bytes[3], random_bytes[4], random_bytes[5],
             random_bytes[6], random_bytes[7]);
    return bson_strdup(uri);
}

/* --- in-memory structures -------------------------------------------------- */

static void index_destroy(index_descriptor_t *index)
{
    if (index == NULL) {
        return;
    }
    bson_free(index->name);
    bson_destroy(&index->key_pattern);
    index_keys_pattern_destroy(index->compiled_pattern);
    bson_destroy(&index->spec);
    bson_destroy(&index->condition);
    match_destroy(index->condition_matcher);
    collation_release(index->collation);
    bson_free(index->table_uri);
    bson_free(index);
}

void collection_destroy(collection_t *collection)
{
    if (collection == NULL) {
        return;
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        index_destroy(collection->indexes[i]);
    }
    bson_free(collection->indexes);
    bson_free(collection->ns);
    bson_free(collection->database);
    bson_free(collection->table_uri);
    bson_destroy(&collection->options);
    collation_release(collection->default_collation);
    bson_free(collection);
}

static collection_t *collection_new(const char *ns, const char *table_uri, const bson_t *options)
{
    collection_t *collection = BSON_ALIGNED_ALLOC0(collection_t);
    collection->ns = bson_strdup(ns);
    const char *dot = strchr(collection->ns, '.');
    collection->database = bson_strndup(collection->ns, (size_t)(dot - collection->ns));
    collection->name = dot + 1;
    collection->table_uri = bson_strdup(table_uri);
    if (options != NULL) {
        bson_copy_to(options, &collection->options);
    } else {
        bson_init(&collection->options);
    }
    atomic_init(&collection->next_record_id, 1);
    bson_error_t error;
    if (!index_options_read_collation(&collection->options, &collection->default_collation, &error)) {
        /* create stored it expanded and valid; only another ICU can refuse it now. */
        TC_LOG(TC_LOG_WARNING, "STORAGE", 0, "%s: its default collation compares binary: %s", ns, error.message);
    }
    return collection;
}

static void collection_add_index(collection_t *collection, index_descriptor_t *index)
{
    collection->indexes = bson_realloc(collection->indexes,
                                       (collection->index_count + 1) * sizeof(index_descriptor_t *));
    collection->indexes[collection->index_count++] = index;
}

static size_t find_collection_slot(storage_t *storage, const char *ns, bool *out_found)
{
    size_t low = 0, high = storage->collection_count;
    while (low < high) {
        size_t middle = (low + high) / 2;
        int comparison = strcmp(storage->collections[middle]->ns, ns);
        if (comparison == 0) {
            *out_found = true;
            return middle;
        }
        if (comparison < 0) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    *out_found = false;
    return low;
}

static void catalog_insert_in_memory(storage_t *storage, collection_t *collection)
{
    bool found;
    size_t slot = find_collection_slot(storage, collection->ns, &found);
    if (storage->collection_count == storage->collection_capacity) {
        storage->collection_capacity = storage->collection_capacity ? storage->collection_capacity * 2 : 16;
        storage->collections = bson_realloc(storage->collections,
                                            storage->collection_capacity * sizeof(collection_t *));
    }
    memmove(&storage->collections[slot + 1], &storage->collections[slot],
            (storage->collection_count - slot) * sizeof(collection_t *));
    storage->collections[slot] = collection;
    storage->collection_count++;
}

collection_t *storage_find_collection(storage_t *storage, const char *ns)
{
    bool found;
    size_t slot = find_collection_slot(storage, ns, &found);
    return found ? storage->collections[slot] : NULL;
}

index_descriptor_t *storage_find_index(collection_t *collection, const char *name)
{
    for (size_t i = 0; i < collection->index_count; i++) {
        if (strcmp(collection->indexes[i]->name, name) == 0) {
            return collection->indexes[i];
        }
    }
    return NULL;
}

bool storage_index_covers_document(const index_descriptor_t *index, const bson_t *document)
{
    return index->condition_matcher == NULL || match_document(index->condition_matcher, document);
}

void storage_visit_collections(storage_t *storage, storage_visit_collection_fn visit, void *context)
{
    for (size_t i = 0; i < storage->collection_count; i++) {
        visit(storage->collections[i], context);
    }
}

/* --- persistence ----------------------------------------------------------- */

bool catalog_put_row(storage_session_t *session, const char *ns, const bson_t *entry, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    if (!storage_open_cursor(session, CATALOG_TABLE_URI, NULL, &cursor, error)) {
        return false;
    }
    WT_ITEM value = {.data = bson_get_data(entry), .size = entry->len};
    cursor->set_key(cursor, ns);
    cursor->set_value(cursor, &value);
    int wt_code = cursor->insert(cursor);
    cursor->close(cursor);
    return wt_code == 0 || storage_error_from_wt(error, wt_code, "writing the catalog");
}

bool catalog_write_entry(storage_session_t *session, collection_t *collection, bson_error_t *error)
{
    bson_t entry = BSON_INITIALIZER, indexes;
    bool ok;

    BSON_APPEND_UTF8(&entry, "ns", collection->ns);
    BSON_APPEND_UTF8(&entry, "table", collection->table_uri);
    BSON_APPEND_BINARY(&entry, "uuid", BSON_SUBTYPE_UUID, collection->uuid, 16);
    BSON_APPEND_DOCUMENT(&entry, "options", &collection->options);
    BSON_APPEND_ARRAY_BEGIN(&entry, "indexes", &indexes);
    for (size_t i = 0; i < collection->index_count; i++) {
        index_descriptor_t *index = collection->indexes[i];
        bson_t item;
        char key[16];
        const char *key_string;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_document_begin(&indexes, key_string, -1, &item);
        BSON_APPEND_DOCUMENT(&item, "spec", &index->spec);
        BSON_APPEND_UTF8(&item, "table", index->table_uri);
        BSON_APPEND_BOOL(&item, "multikey", atomic_load(&index->multikey));
        bson_append_document_end(&indexes, &item);
    }
    bson_append_array_end(&entry, &indexes);

    ok = catalog_put_row(session, collection->ns, &entry, error);
    bson_destroy(&entry);
    return ok;
}

bool catalog_remove_entry(storage_session_t *session, const char *ns, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    if (!storage_open_cursor(session, CATALOG_TABLE_URI, NULL, &cursor, error)) {
        return false;
    }
    cursor->set_key(cursor, ns);
    int wt_code = cursor->remove(cursor);
    cursor->close(cursor);
    if (wt_code != 0 && wt_code != WT_NOTFOUND) {
        return storage_error_from_wt(error, wt_code, "removing a catalog entry");
    }
    return true;
}

/* Returns NULL (error filled) when the key pattern cannot generate keys. */
static index_descriptor_t *index_new(const bson_t *spec, const char *table_uri, bson_error_t *error)
{
    index_descriptor_t *index = BSON_ALIGNED_ALLOC0(index_descriptor_t);
    bson_iter_t iter;
    bson_copy_to(spec, &index->spec);
    index->table_uri = bson_strdup(table_uri);
    if (bson_iter_init_find(&iter, spec, "name") && BSON_ITER_HOLDS_UTF8(&iter)) {
        index->name = bson_strdup(bson_iter_utf8(&iter, NULL));
    } else {
        index->name = bson_strdup("");
    }
    if (bson_iter_init_find(&iter, spec, "key") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t view;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&view, data, length);
        bson_copy_to(&view, &index->key_pattern);
    } else {
        bson_init(&index->key_pattern);
    }
    index->unique = index_options_flag(spec, "unique");
    index->sparse = index_options_flag(spec, "sparse");
    index->hidden = index_options_flag(spec, "hidden");
    index->partial = bson_iter_init_find(&iter, spec, "partialFilterExpression");
    index->is_id = strcmp(index->name, "_id_") == 0;
    if (index->is_id) {
        index->unique = true;
    }
    atomic_init(&index->multikey, false);
    if (!index_options_read_collation(spec, &index->collation, error)) {
        index_destroy(index);
        return NULL;
    }
    index_options_condition(spec, &index->key_pattern, &index->condition);
    if (!bson_empty(&index->condition)) {
        /* mongod matches a partial filter under the index's collation. */
        expression_context_t condition_context;
        expression_context_init(&condition_context);
        condition_context.collation = index->collation;
        index->condition_matcher = match_compile_with_context(&index->condition, &condition_context, error);
        if (index->condition_matcher == NULL) {
            index_destroy(index);
            return NULL;
        }
    }
    index->compiled_pattern = index_keys_pattern_new(&index->key_pattern, error);
    if (index->compiled_pattern == NULL) {
        index_destroy(index);
        return NULL;
    }
    index_keys_pattern_set_collation(index->compiled_pattern, index->collation);
    return index;
}

static int64_t read_last_record_id(storage_session_t *session, const char *table_uri)
{
    WT_CURSOR *cursor = NULL;
    int64_t last = 0;
    if (session->wt->open_cursor(session->wt, table_uri, NULL, NULL, &cursor) != 0) {
        return 0;
    }
    if (cursor->prev(cursor) == 0) {
        cursor->get_key(cursor, &last);
    }
    cursor->close(cursor);
    return last;
}

bool catalog_load(storage_t *storage, storage_session_t *session, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    int wt_code;
    TC_CHECK(storage_open_cursor(session, CATALOG_TABLE_URI, NULL, &cursor, error));
    while ((wt_code = cursor->next(cursor)) == 0) {
        const char *ns;
        WT_ITEM value;
        bson_t entry;
        bson_iter_t iter, indexes;
        cursor->get_key(cursor, &ns);
        cursor->get_value(cursor, &value);
        if (!bson_init_static(&entry, value.data, value.size)) {
            tc_error_set(error, TC_ERR_INTERNAL, "the catalog entry of %s is corrupt", ns);
            goto done;
        }
        if (catalog_entry_is_view(&entry)) {
            TC_CHECK(catalog_load_view(storage, ns, &entry, error));
            continue;
        }
        const char *table = "";
        bson_t options = BSON_INITIALIZER;
        if (bson_iter_init_find(&iter, &entry, "table")) {
            table = bson_iter_utf8(&iter, NULL);
        }
        if (bson_iter_init_find(&iter, &entry, "options") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            uint32_t length;
            const uint8_t *data;
            bson_iter_document(&iter, &length, &data);
            bson_destroy(&options);
            bson_init_static(&options, data, length);
        }
        collection_t *collection = collection_new(ns, table, &options);
        if (bson_iter_init_find(&iter, &entry, "uuid") && BSON_ITER_HOLDS_BINARY(&iter)) {
            uint32_t length;
            const uint8_t *data;
            bson_iter_binary(&iter, NULL, &length, &data);
            if (length == 16) {
                memcpy(collection->uuid, data, 16);
            }
        }
        if (bson_iter_init_find(&iter, &entry, "indexes") && bson_iter_recurse(&iter, &indexes)) {
            while (bson_iter_next(&indexes)) {
                bson_iter_t item, field;
                bson_t spec;
                uint32_t length;
                const uint8_t *data;
                if (!bson_iter_recurse(&indexes, &item) || !bson_iter_find(&item, "spec")) {
                    continue;
                }
                bson_iter_document(&item, &length, &data);
                bson_init_static(&spec, data, length);
                bson_iter_recurse(&indexes, &field);
                const char *index_table = bson_iter_find(&field, "table") ? bson_iter_utf8(&field, NULL) : "";
                index_descriptor_t *index = index_new(&spec, index_table, error);
                if (index == NULL) {
                    collection_destroy(collection);
                    goto done;
                }
                bson_iter_recurse(&indexes, &field);
                if (bson_iter_find(&field, "multikey")) {
                    atomic_store(&index->multikey, bson_iter_as_bool(&field));
                }
                collection_add_index(collection, index);
            }
        }
        atomic_store(&collection->next_record_id, read_last_record_id(session, table) + 1);
        catalog_insert_in_memory(storage, collection);
    }
    if (wt_code != WT_NOTFOUND) {
        storage_error_from_wt(error, wt_code, "reading the catalog");
        goto done;
    }
    cursor->close(cursor);
    return true;
done:
    if (cursor != NULL) {
        cursor->close(cursor);
    }
    return false;
}

/* --- DDL -------------------------------------------------------------------- */

static const char *compressor_from_options(storage_t *storage, const bson_t *options, char *buffer,
                                           size_t buffer_size)
{
    /* storageEngine: {wiredTiger: {configString: "block_compressor=zlib"}}, as mongod takes it. */
    bson_iter_t iter;
    if (options != NULL &&
        bson_iter_init(&iter, options) &&
        bson_iter_find_descendant(&iter, "storageEngine.wiredTiger.configString", &iter) &&
        BSON_ITER_HOLDS_UTF8(&iter)) {
        const char *config = bson_iter_utf8(&iter, NULL);
        const char *found = strstr(config, "block_compressor=");
        if (found != NULL) {
            found += strlen("block_compressor=");
            size_t length = strcspn(found, ",)");
            if (length < buffer_size) {
                memcpy(buffer, found, length);
                buffer[length] = '\0';
                return buffer;
            }
        }
    }
    return storage->default_compressor;
}

static bool create_table(storage_session_t *session, const char *uri, const char *format,
                         const char *compressor, bson_error_t *error)
{
    char config[256];
    if (strcmp(compressor, "none") == 0 || compressor[0] == '\0') {
        snprintf(config, sizeof config, "%s", format);
    } else {
        snprintf(config, sizeof config, "%s,block_compressor=%s", format, compressor);
    }
    int wt_code = session->wt->create(session->wt, uri, config);
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "creating a table");
    }
    return true;
}

#define RECORD_TABLE_FORMAT "key_format=q,value_format=u"

bool catalog_change_with_oplog(storage_session_t *session, catalog_step_fn step, void *step_context,
                               const char *database, const uint8_t *uuid, const bson_t *object,
                               const bson_t *object2, bson_error_t *error)
{
    bool own_transaction = !storage_in_transaction(session);
    if (own_transaction && !storage_begin(session, error)) {
        return false;
    }
    bool ok = step(session, step_context, error) &&
              oplog_log_command(session, database, uuid, object, object2, error);
    if (own_transaction) {
        if (ok) {
            ok = storage_commit(session, false, error);
        } else {
            storage_rollback(session);
        }
    }
    return ok;
}

static bool write_entry_step(storage_session_t *session, void *collection, bson_error_t *error)
{
    return catalog_write_entry(session, collection, error);
}

/* The catalog row of a new collection and its {create: coll, <options>,
 * idIndex} oplog entry, mongod's shape (a change stream's expanded create
 * event shows all but create in its operationDescription). */
static bool write_entry_and_log_create(storage_session_t *session, collection_t *collection, bson_error_t *error)
{
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "create", collection->name);
    bson_concat(&object, &collection->options);
    BSON_APPEND_DOCUMENT(&object, "idIndex", &collection->indexes[0]->spec);
    bool ok = catalog_change_with_oplog(session, write_entry_step, collection, collection->database,
                                        collection->uuid, &object, NULL, error);
    bson_destroy(&object);
    return ok;
}
#define INDEX_TABLE_FORMAT "key_format=u,value_format=u"

bool storage_create_collection(storage_session_t *session, const char *ns, const bson_t *options,
                               collection_t **out_collection, bson_error_t *error)
{
    storage_t *storage = session->storage;
    collection_t *collection = NULL;
    char compressor_buffer[32];
    bool ok = false;

    TC_CHECK(catalog_validate_namespace(ns, error));
    if (storage_find_collection(storage, ns) != NULL || storage_find_view(storage, ns) != NULL) {
        return tc_error_set(error, TC_ERR_NAMESPACE_EXISTS, "Collection %s already exists.", ns);
    }
    const char *compressor = compressor_from_options(storage, options, compressor_buffer,
                                                     sizeof compressor_buffer);
    if (strcmp(compressor, "snappy") != 0 && strcmp(compressor, "zlib") != 0 &&
        strcmp(compressor, "none") != 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "unknown block_compressor '%s': use snappy, zlib or none", compressor);
    }
    char *table_uri = new_table_uri("collection");
    collection = collection_new(ns, table_uri, options);
    bson_free(table_uri);
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    memcpy(collection->uuid, oid.bytes, 12);
    memcpy(collection->uuid + 12, oid.bytes + 8, 4);
    collection->uuid[6] = (uint8_t)((collection->uuid[6] & 0x0f) | 0x40);
    collection->uuid[8] = (uint8_t)((collection->uuid[8] & 0x3f) | 0x80);

    TC_CHECK(create_table(session, collection->table_uri, RECORD_TABLE_FORMAT, compressor, error));
    char *index_uri = new_table_uri("index");
    bson_t id_spec = BSON_INITIALIZER, id_key;
    BSON_APPEND_INT32(&id_spec, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(&id_spec, "key", &id_key);
    BSON_APPEND_INT32(&id_key, "_id", 1);
    bson_append_document_end(&id_spec, &id_key);
    BSON_APPEND_UTF8(&id_spec, "name", "_id_");
    if (collection->default_collation != NULL) {
        /* The _id index takes the collection's default collation, as on mongod. */
        BSON_APPEND_DOCUMENT(&id_spec, "collation", collation_spec(collection->default_collation));
    }
    index_descriptor_t *id_index = index_new(&id_spec, index_uri, error);
    bson_destroy(&id_spec);
    if (id_index == NULL) {
        bson_free(index_uri);
        goto done;
    }
    collection_add_index(collection, id_index);
    bool index_created = create_table(session, index_uri, INDEX_TABLE_FORMAT, compressor, error);
    bson_free(index_uri);
    TC_CHECK(index_created);
    TC_CHECK(write_entry_and_log_create(session, collection, error));
    catalog_insert_in_memory(storage, collection);
    if (out_collection != NULL) {
        *out_collection = collection;
    }
    collection = NULL;
    ok = true;
done:
    collection_destroy(collection);
    return ok;
}

bool storage_obtain_collection(storage_session_t *session, const char *ns,
                               collection_t **out_collection, bson_error_t *error)
{
    storage_t *storage = session->storage;
    collection_t *collection = storage_find_collection(storage, ns);
    if (collection != NULL) {
        *out_collection = collection;
        return true;
    }
    if (storage_find_view(storage, ns) != NULL) {
        /* Writes never reach a view, and an implicit create cannot replace one. */
        return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW, "Namespace %s is a view, not a collection",
                            ns);
    }
    storage_unlock(storage);
    storage_lock_exclusive(storage);
    bool ok = true;
    if (storage_find_view(storage, ns) != NULL) {
        ok = tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW, "Namespace %s is a view, not a collection", ns);
    } else if (storage_find_collection(storage, ns) == NULL) {
        ok = storage_create_collection(session, ns, NULL, NULL, error);
    }
    storage_unlock(storage);
    storage_lock_shared(storage);
    if (!ok) {
        return false;
    }
    collection = storage_find_collection(storage, ns);
    if (collection == NULL) {
        /* Dropped again between our create and retaking the lock. */
        return tc_error_set(error, TC_ERR_WRITE_CONFLICT, "collection %s was dropped concurrently", ns);
    }
    *out_collection = collection;
    return true;
}

static bool remove_entry_step(storage_session_t *session, void *ns, bson_error_t *error)
{
    return catalog_remove_entry(session, ns, error);
}

/* Drops ns; object is what the oplog records in the same transaction as the
 * catalog row's removal ({drop: coll}, or a rename's entry). */
static bool drop_collection(storage_session_t *session, const char *ns, const bson_t *object, bson_error_t *error)
{
    storage_t *storage = session->storage;
    bool found;
    size_t slot = find_collection_slot(storage, ns, &found);
    if (!found) {
        return tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "ns not found");
    }
    collection_t *collection = storage->collections[slot];
    storage_run_ddl_hook(storage, collection->ns);
    TC_CHECK(catalog_change_with_oplog(session, remove_entry_step, collection->ns, collection->database,
                                       collection->uuid, object, NULL, error));
    storage_drop_table(session, collection->table_uri);
    for (size_t i = 0; i < collection->index_count; i++) {
        storage_drop_table(session, collection->indexes[i]->table_uri);
    }
    memmove(&storage->collections[slot], &storage->collections[slot + 1],
            (storage->collection_count - slot - 1) * sizeof(collection_t *));
    storage->collection_count--;
    collection_destroy(collection);
    return true;
done:
    return false;
}

bool storage_drop_collection(storage_session_t *session, const char *ns, bson_error_t *error)
{
    const char *dot = strchr(ns, '.');
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "drop", dot != NULL ? dot + 1 : ns);
    bool ok = drop_collection(session, ns, &object, error);
    bson_destroy(&object);
    return ok;
}

bool storage_finish_rename(storage_session_t *session, const char *from, const char *to, bson_error_t *error)
{
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "renameCollection", from);
    BSON_APPEND_UTF8(&object, "to", to);
    BSON_APPEND_BOOL(&object, "stayTemp", false);
    bool ok = drop_collection(session, from, &object, error);
    bson_destroy(&object);
    return ok;
}

/* --- rename ------------------------------------------------------------------ */

typedef struct rename_step {
    collection_t *collection; /* already named as the target */
    const char *from;
} rename_step_t;

static bool rename_entry_step(storage_session_t *session, void *pointer, bson_error_t *error)
{
    rename_step_t *step = pointer;
    return catalog_remove_entry(session, step->from, error) && catalog_write_entry(session, step->collection, error);
}

/* ns and database are taken. */
static void set_collection_names(collection_t *collection, char *ns, char *database)
{
    collection->ns = ns;
    collection->database = database;
    collection->name = strchr(ns, '.') + 1;
}

bool storage_rename_collection(storage_session_t *session, const char *from, const char *to, bson_error_t *error)
{
    storage_t *storage = session->storage;
    bool found;
    if (!catalog_validate_namespace(to, error)) {
        return false;
    }
    if (storage_find_collection(storage, to) != NULL || storage_find_view(storage, to) != NULL) {
        return tc_error_set(error, TC_ERR_NAMESPACE_EXISTS, "target namespace exists");
    }
    size_t slot = find_collection_slot(storage, from, &found);
    if (!found) {
        return tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "Source collection %s does not exist", from);
    }
    collection_t *collection = storage->collections[slot];
    storage_run_ddl_hook(storage, collection->ns);
    char *old_ns = collection->ns, *old_database = collection->database;
    set_collection_names(collection, bson_strdup(to), bson_strndup(to, (size_t)(strchr(to, '.') - to)));
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "renameCollection", old_ns);
    BSON_APPEND_UTF8(&object, "to", to);
    BSON_APPEND_BOOL(&object, "stayTemp", false);
    rename_step_t step = {.collection = collection, .from = old_ns};
    bool ok = catalog_change_with_oplog(session, rename_entry_step, &step, old_database, collection->uuid, &object,
                                        NULL, error);
    bson_destroy(&object);
    if (!ok) {
        bson_free(collection->ns);
        bson_free(collection->database);
        set_collection_names(collection, old_ns, old_database);
        return false;
    }
    memmove(&storage->collections[slot], &storage->collections[slot + 1],
            (storage->collection_count - slot - 1) * sizeof(collection_t *));
    storage->collection_count--;
    catalog_insert_in_memory(storage, collection);
    bson_free(old_ns);
    bson_free(old_database);
    return true;
}

/* The default index name mongod derives from the key pattern: a_1_b_-1. */
static void default_index_name(const bson_t *key_pattern, bson_string_t *name)
{
    bson_iter_t iter;
    bson_iter_init(&iter, key_pattern);
    bool first = true;
    while (bson_iter_next(&iter)) {
        if (!first) {
            bson_string_append_c(name, '_');
        }
        first = false;
        bson_string_append(name, bson_iter_key(&iter));
        bson_string_append_c(name, '_');
        if (BSON_ITER_HOLDS_UTF8(&iter)) {
            bson_string_append(name, bson_iter_utf8(&iter, NULL));
        } else if (BSON_ITER_HOLDS_DOUBLE(&iter)) {
            double value = bson_iter_double(&iter);
            if (value == (double)(int64_t)value) {
                bson_string_append_printf(name, "%lld", (long long)value);
            } else {
                bson_string_append_printf(name, "%g", value);
            }
        } else {
            bson_string_append_printf(name, "%lld", (long long)bson_iter_as_int64(&iter));
        }
    }
}

static bool validate_key_pattern(const bson_t *key_pattern, bson_error_t *error)
{
    bson_iter_t iter;
    if (bson_count_keys(key_pattern) == 0) {
        return tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX, "Index keys cannot be an empty field.");
    }
    bson_iter_init(&iter, key_pattern);
    while (bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_NUMBER(&iter)) {
            double direction = bson_iter_as_double(&iter);
            if (direction == 0 || direction != direction) {
                return tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX,
                                    "Values in the index key pattern can't be all 0, null, or empty: %s",
                                    bson_iter_key(&iter));
            }
        } else if (BSON_ITER_HOLDS_UTF8(&iter)) {
            return tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX,
                                "Unknown index plugin '%s': thermocline store supports ascending and "
                                "descending indexes only",
                                bson_iter_utf8(&iter, NULL));
        } else {
            return tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX,
                                "Values in v:2 index key pattern cannot be of type %s. Only numbers > 0, "
                                "numbers < 0, and strings are allowed.",
                                bson_iter_type(&iter) == BSON_TYPE_DOCUMENT ? "object" : "other");
        }
    }
    return true;
}

/* A conflict message quoting both specs, as mongod 6.0 words it. */
static bool spec_conflict(bson_error_t *error, uint32_t code, const char *reason, const bson_t *requested,
                          const bson_t *existing)
{
    bson_string_t *requested_text = bson_string_new(NULL), *existing_text = bson_string_new(NULL);
    index_options_format(requested_text, requested);
    index_options_format(existing_text, existing);
    tc_error_set(error, code, "%s Requested index: %s, existing index: %s", reason, requested_text->str,
                 existing_text->str);
    bson_string_free(requested_text, true);
    bson_string_free(existing_text, true);
    return false;
}

/* mongod's IndexCatalogImpl::_doesSpecConflictWithExisting: first an index of the
 * same name (identical: nothing to do; the same key and filter with other
 * options: IndexOptionsConflict; else IndexKeySpecsConflict), then one of another
 * name with the same key pattern and partialFilterExpression (IndexOptionsConflict).
 * Indexes of one key pattern under different partial filters may coexist. */
static bool check_index_conflicts(collection_t *collection, const bson_t *requested, const char *name,
                                  bool *out_identical, bson_error_t *error)
{
    *out_identical = false;
    index_descriptor_t *same_name = storage_find_index(collection, name);
    if (same_name != NULL) {
        index_options_comparison_t comparison = index_options_compare(&same_name->spec, requested);
        if (comparison == INDEX_OPTIONS_IDENTICAL) {
            *out_identical = true;
            return true;
        }
        if (comparison == INDEX_OPTIONS_EQUIVALENT) {
            return spec_conflict(error, TC_ERR_INDEX_OPTIONS_CONFLICT,
                                 "An equivalent index already exists with the same name but different options.",
                                 requested, &same_name->spec);
        }
        return spec_conflict(error, TC_ERR_INDEX_KEY_SPECS_CONFLICT,
                             "An existing index has the same name as the requested index. When index names are "
                             "not specified, they are auto generated and can cause conflicts. Please refer to our "
                             "documentation.",
                             requested, &same_name->spec);
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        index_descriptor_t *existing = collection->indexes[i];
        index_options_comparison_t comparison = index_options_compare(&existing->spec, requested);
        if (comparison == INDEX_OPTIONS_IDENTICAL) {
            return tc_error_set(error, TC_ERR_INDEX_OPTIONS_CONFLICT, "Index already exists with a different name: %s",
                                existing->name);
        }
        if (comparison == INDEX_OPTIONS_EQUIVALENT) {
            return spec_conflict(error, TC_ERR_INDEX_OPTIONS_CONFLICT,
                                 "An equivalent index already exists with a different name and options.", requested,
                                 &existing->spec);
        }
    }
    return true;
}

/* mongod's {createIndexes: coll, v, key, name, <options>} entry, in the build's transaction. */
static bool log_create_index(storage_session_t *session, collection_t *collection, const index_descriptor_t *index,
                             bson_error_t *error)
{
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "createIndexes", collection->name);
    bson_concat(&object, &index->spec);
    bool ok = oplog_log_command(session, collection->database, collection->uuid, &object, NULL, error);
    bson_destroy(&object);
    return ok;
}

bool storage_create_index(storage_session_t *session, collection_t *collection, const bson_t *spec,
                          bool *out_created, bson_error_t *error)
{
    bson_iter_t iter;
    bson_t key_pattern;
    bson_t normalized = BSON_INITIALIZER;
    bson_string_t *name = bson_string_new(NULL);
    index_descriptor_t *index = NULL;
    char *table_uri = NULL;
    bool ok = false;
    char compressor_buffer[32];

    *out_created = false;
    if (!bson_iter_init_find(&iter, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "The 'key' field is a required property of an index specification");
        goto done;
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(&key_pattern, data, length);
    TC_CHECK(validate_key_pattern(&key_pattern, error));
    if (bson_iter_init_find(&iter, spec, "name")) {
        if (!BSON_ITER_HOLDS_UTF8(&iter)) {
            tc_error_set(error, TC_ERR_TYPE_MISMATCH, "The field 'name' must be a string");
            goto done;
        }
        bson_string_append(name, bson_iter_utf8(&iter, NULL));
    } else {
        default_index_name(&key_pattern, name);
    }
    /* What listIndexes shows: v, key, name, then the options in the given order. */
    BSON_APPEND_INT32(&normalized, "v", 2);
    BSON_APPEND_DOCUMENT(&normalized, "key", &key_pattern);
    BSON_APPEND_UTF8(&normalized, "name", name->str);
    bson_iter_init(&iter, spec);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (strcmp(field, "key") != 0 && strcmp(field, "name") != 0 && strcmp(field, "v") != 0 &&
            strcmp(field, "ns") != 0 && strcmp(field, "collation") != 0) {
            bson_append_iter(&normalized, field, -1, &iter);
        }
    }
    TC_CHECK(index_options_append_collation(spec, collection->default_collation, &normalized, error));
    TC_CHECK(index_options_validate(spec, error));
    bool identical_exists = false;
    TC_CHECK(check_index_conflicts(collection, &normalized, name->str, &identical_exists, error));
    if (identical_exists) {
        ok = true; /* the same spec again: createIndexes succeeds without creating */
        goto done;
    }
    storage_run_ddl_hook(session->storage, collection->ns);
    table_uri = new_table_uri("index");
    index = index_new(&normalized, table_uri, error);
    TC_CHECK(index != NULL);
    TC_CHECK(create_table(session, table_uri, INDEX_TABLE_FORMAT,
                          compressor_from_options(session->storage, &collection->options,
                                                  compressor_buffer, sizeof compressor_buffer),
                          error));

    /* Build: one transaction over the existing documents, so a unique
     * violation leaves nothing behind. */
    TC_CHECK(storage_begin(session, error));
    {
        scan_position_t position;
        scan_position_init(&position);
        scan_t *scan = scan_open(session, collection, NULL, NULL, false, &position, error);
        bool built = scan != NULL;
        while (built) {
            int64_t record_id;
            bson_t document, key_values;
            bool end;
            built = scan_next(scan, &record_id, &document, &key_values, &end, error);
            if (!built || end) {
                break;
            }
            built = records_insert_index_entries(session, collection, index, &document, record_id, error);
        }
        scan_close(scan);
        scan_position_cleanup(&position);
        if (built) {
            collection_add_index(collection, index);
            built = catalog_write_entry(session, collection, error) &&
                    log_create_index(session, collection, index, error);
            if (!built) {
                collection->index_count--;
            }
        }
        if (!built) {
            storage_rollback(session);
            goto done;
        }
    }
    if (!storage_commit(session, false, error)) {
        collection->index_count--;
        goto done;
    }
    index = NULL;
    *out_created = true;
    ok = true;
done:
    if (index != NULL) {
        storage_drop_table(session, index->table_uri);
        index_destroy(index);
    }
    bson_free(table_uri);
    bson_string_free(name, true);
    bson_destroy(&normalized);
    return ok;
}

bool storage_drop_index(storage_session_t *session, collection_t *collection, const char *name,
                        bson_error_t *error)
{
    if (strcmp(name, "_id_") == 0) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "cannot drop _id index");
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        index_descriptor_t *index = collection->indexes[i];
        if (strcmp(index->name, name) != 0) {
            continue;
        }
        storage_run_ddl_hook(session->storage, collection->ns);
        memmove(&collection->indexes[i], &collection->indexes[i + 1],
                (collection->index_count - i - 1) * sizeof(index_descriptor_t *));
        collection->index_count--;
        /* mongod's {dropIndexes: coll, index: name} entry, with the spec in o2. */
        bson_t object = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&object, "dropIndexes", collection->name);
        BSON_APPEND_UTF8(&object, "index", index->name);
        bool ok = catalog_change_with_oplog(session, write_entry_step, collection, collection->database,
                                            collection->uuid, &object, &index->spec, error);
        bson_destroy(&object);
        if (!ok) {
            collection_add_index(collection, index);
            return false;
        }
        storage_drop_table(session, index->table_uri);
        index_destroy(index);
        return true;
    }
    return tc_error_set(error, TC_ERR_INDEX_NOT_FOUND, "index not found with name [%s]", name);
}

/* --- collMod ---------------------------------------------------------------- */

bool storage_modify_collection(storage_session_t *session, collection_t *collection, const bson_t *options,
                               index_descriptor_t *index, const bson_t *index_spec, const bson_t *object,
                               const bson_t *object2, bson_error_t *error)
{
    bson_t old_options, old_index_spec;
    bool old_hidden = index != NULL && index->hidden;
    bson_steal(&old_options, &collection->options);
    bson_copy_to(options, &collection->options);
    if (index != NULL) {
        bson_steal(&old_index_spec, &index->spec);
        bson_copy_to(index_spec, &index->spec);
        index->hidden = index_options_flag(index_spec, "hidden");
    }
    bool ok = catalog_change_with_oplog(session, write_entry_step, collection, collection->database,
                                        collection->uuid, object, object2, error);
    if (ok) {
        bson_destroy(&old_options);
    } else {
        bson_destroy(&collection->options);
        bson_steal(&collection->options, &old_options);
    }
    if (index != NULL && ok) {
        bson_destroy(&old_index_spec);
    } else if (index != NULL) {
        bson_destroy(&index->spec);
        bson_steal(&index->spec, &old_index_spec);
        index->hidden = old_hidden;
    }
    return ok;
}
