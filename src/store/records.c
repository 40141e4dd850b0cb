/* Documents and their index entries, and the scans that read them back.
 *
 * Record table:  key = record id (int64),  value = the document's BSON.
 * Index table:   key = keystring of the key values, followed (non-unique indexes
 *                only) by the record id, so equal keys stay distinct and ordered;
 *                value = record id (8 bytes, little-endian) + {"": v1, "": v2},
 *                the key's values, which covered queries return without a fetch.
 * A unique index inserts without overwrite, so WiredTiger itself reports the
 * duplicate, inside the writer's transaction. */
#include "store/storage_private.h"
#include "query/value_format.h"

#include <string.h>

#define RECORD_ID_BYTES 8

/* --- index entries --------------------------------------------------------- */

static void format_duplicate_key(const index_descriptor_t *index, const bson_t *key_values,
                                 bson_string_t *out)
{
    /* mongod's form: { _id: 1 } / { email: "a@b" } with the key pattern's names. */
    bson_iter_t pattern, values;
    bson_string_append(out, "{ ");
    bson_iter_init(&pattern, &index->key_pattern);
    bson_iter_init(&values, key_values);
    bool first = true;
    while (bson_iter_next(&pattern) && bson_iter_next(&values)) {
        if (!first) {
            bson_string_append(out, ", ");
        }
        first = false;
        bson_string_append_printf(out, "%s: ", bson_iter_key(&pattern));
        value_format_append(out, bson_iter_value(&values));
    }
    bson_string_append(out, " }");
}

static bool duplicate_key_error(storage_session_t *session, const collection_t *collection,
                                const index_descriptor_t *index, const bson_t *key_values, bson_error_t *error)
{
    bson_iter_t pattern, values;
    bson_reinit(&session->duplicate_key_pattern);
    bson_reinit(&session->duplicate_key_value);
    bson_concat(&session->duplicate_key_pattern, &index->key_pattern);
    bson_iter_init(&pattern, &index->key_pattern);
    bson_iter_init(&values, key_values);
    while (bson_iter_next(&pattern) && bson_iter_next(&values)) {
        bson_append_value(&session->duplicate_key_value, bson_iter_key(&pattern), -1, bson_iter_value(&values));
    }
    bson_string_t *key = bson_string_new(NULL);
    format_duplicate_key(index, key_values, key);
    tc_error_set(error, TC_ERR_DUPLICATE_KEY, "E11000 duplicate key error collection: %s index: %s dup key: %s",
                 collection->ns, index->name, key->str);
    bson_string_free(key, true);
    return false;
}

static void build_index_entry(const index_descriptor_t *index, const index_key_t *key, int64_t record_id,
                              keystring_t *out_key, uint8_t **out_value, size_t *out_value_length)
{
    keystring_init(out_key);
    keystring_append_bytes(out_key, key->keystring.data, key->keystring.length);
    if (!index->unique) {
        keystring_append_record_id(out_key, record_id);
    }
    *out_value_length = RECORD_ID_BYTES + key->values->len;
    *out_value = bson_malloc(*out_value_length);
    uint64_t little_endian = BSON_UINT64_TO_LE((uint64_t)record_id);
    memcpy(*out_value, &little_endian, RECORD_ID_BYTES);
    memcpy(*out_value + RECORD_ID_BYTES, bson_get_data(key->values), key->values->len);
}

static bool mark_multikey(storage_session_t *session, collection_t *collection, index_descriptor_t *index,
                          bson_error_t *error)
{
    bool expected = false;
    if (atomic_compare_exchange_strong(&index->multikey, &expected, true)) {
        if (!catalog_write_entry(session, collection, error)) {
            atomic_store(&index->multikey, false);
            return false;
        }
    }
    return true;
}

static bool insert_keys(storage_session_t *session, collection_t *collection, index_descriptor_t *index,
                        const index_key_set_t *keys, int64_t record_id, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    bool ok = false;
    TC_CHECK(storage_open_cursor(session, index->table_uri, index->unique ? "overwrite=false" : NULL,
                                 &cursor, error));
    for (size_t i = 0; i < keys->count; i++) {
        keystring_t entry_key;
        uint8_t *value;
        size_t value_length;
        build_index_entry(index, &keys->keys[i], record_id, &entry_key, &value, &value_length);
        WT_ITEM key_item = {.data = entry_key.data, .size = entry_key.length};
        WT_ITEM value_item = {.data = value, .size = value_length};
        cursor->set_key(cursor, &key_item);
        cursor->set_value(cursor, &value_item);
        int wt_code = cursor->insert(cursor);
        keystring_cleanup(&entry_key);
        bson_free(value);
        if (wt_code == WT_DUPLICATE_KEY) {
            duplicate_key_error(session, collection, index, keys->keys[i].values, error);
            goto done;
        }
        if (wt_code != 0) {
            storage_error_from_wt(error, wt_code, "inserting an index key");
            goto done;
        }
    }
    if (keys->multikey && !atomic_load(&index->multikey)) {
        TC_CHECK(mark_multikey(session, collection, index, error));
    }
    ok = true;
done:
    if (cursor != NULL) {
        cursor->close(cursor);
    }
    return ok;
}

static bool remove_keys(storage_session_t *session, index_descriptor_t *index, const index_key_set_t *keys,
                        int64_t record_id, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    bool ok = false;
    TC_CHECK(storage_open_cursor(session, index->table_uri, NULL, &cursor, error));
    for (size_t i = 0; i < keys->count; i++) {
        keystring_t entry_key;
        uint8_t *value;
        size_t value_length;
        build_index_entry(index, &keys->keys[i], record_id, &entry_key, &value, &value_length);
        WT_ITEM key_item = {.data = entry_key.data, .size = entry_key.length};
        cursor->set_key(cursor, &key_item);
        int wt_code = cursor->remove(cursor);
        keystring_cleanup(&entry_key);
        bson_free(value);
        if (wt_code != 0 && wt_code != WT_NOTFOUND) {
            storage_error_from_wt(error, wt_code, "removing an index key");
            goto done;
        }
    }
    ok = true;
done:
    if (cursor != NULL) {
        cursor->close(cursor);
    }
    return ok;
}

/* The keys document has in index: none when the index's sparse or partial
 * condition leaves the document out. Always initializes out. */
static bool generate_keys(const index_descriptor_t *index, const bson_t *document, index_key_set_t *out,
                          bson_error_t *error)
{
    if (!storage_index_covers_document(index, document)) {
        memset(out, 0, sizeof *out);
        return true;
    }
    return index_keys_generate(index->compiled_pattern, document, out, error);
}

bool records_insert_index_entries(storage_session_t *session, collection_t *collection,
                                  index_descriptor_t *index, const bson_t *document, int64_t record_id,
                                  bson_error_t *error)
{
    index_key_set_t keys;
    if (!generate_keys(index, document, &keys, error)) {
        index_keys_set_cleanup(&keys);
        return false;
    }
    bool ok = insert_keys(session, collection, index, &keys, record_id, error);
    index_keys_set_cleanup(&keys);
    return ok;
}

static bool key_sets_equal(const index_key_set_t *left, const index_key_set_t *right)
{
    if (left->count != right->count) {
        return false;
    }
    for (size_t i = 0; i < left->count; i++) {
        const keystring_t *a = &left->keys[i].keystring, *b = &right->keys[i].keystring;
        if (a->length != b->length || memcmp(a->data, b->data, a->length) != 0) {
            return false;
        }
    }
    return true;
}

/* --- records --------------------------------------------------------------- */

static bool write_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                         const bson_t *document, bool must_be_new, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    if (!storage_open_cursor(session, collection->table_uri, must_be_new ? "overwrite=false" : NULL, &cursor,
                             error)) {
        return false;
    }
    WT_ITEM value = {.data = bson_get_data(document), .size = document->len};
    cursor->set_key(cursor, record_id);
    cursor->set_value(cursor, &value);
    int wt_code = must_be_new ? cursor->insert(cursor) : cursor->update(cursor);
    cursor->close(cursor);
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "writing a record");
    }
    return true;
}

bool storage_insert_record(storage_session_t *session, collection_t *collection, const bson_t *document,
                           int64_t *out_record_id, bson_error_t *error)
{
    int64_t record_id = atomic_fetch_add(&collection->next_record_id, 1);
    if (!write_record(session, collection, record_id, document, true, error)) {
        return false;
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        if (!records_insert_index_entries(session, collection, collection->indexes[i], document, record_id,
                                          error)) {
            return false;
        }
    }
    if (out_record_id != NULL) {
        *out_record_id = record_id;
    }
    return true;
}

bool storage_update_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                           const bson_t *old_document, const bson_t *new_document, bson_error_t *error)
{
    /* Remove every old key first: a unique index must accept a document that
     * keeps its own key. */
    index_key_set_t *old_keys = bson_malloc0(collection->index_count * sizeof *old_keys + 1);
    index_key_set_t *new_keys = bson_malloc0(collection->index_count * sizeof *new_keys + 1);
    size_t generated = 0;
    bool ok = false;
    for (; generated < collection->index_count; generated++) {
        const index_descriptor_t *index = collection->indexes[generated];
        if (!generate_keys(index, old_document, &old_keys[generated], error)) {
            index_keys_set_cleanup(&old_keys[generated]);
            goto done;
        }
        if (!generate_keys(index, new_document, &new_keys[generated], error)) {
            index_keys_set_cleanup(&new_keys[generated]);
            index_keys_set_cleanup(&old_keys[generated]);
            goto done;
        }
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        if (!key_sets_equal(&old_keys[i], &new_keys[i])) {
            TC_CHECK(remove_keys(session, collection->indexes[i], &old_keys[i], record_id, error));
        }
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        if (!key_sets_equal(&old_keys[i], &new_keys[i])) {
            TC_CHECK(insert_keys(session, collection, collection->indexes[i], &new_keys[i], record_id, error));
        }
    }
    TC_CHECK(write_record(session, collection, record_id, new_document, false, error));
    ok = true;
done:
    for (size_t i = 0; i < generated; i++) {
        index_keys_set_cleanup(&old_keys[i]);
        index_keys_set_cleanup(&new_keys[i]);
    }
    bson_free(old_keys);
    bson_free(new_keys);
    return ok;
}

bool storage_delete_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                           const bson_t *old_document, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    for (size_t i = 0; i < collection->index_count; i++) {
        index_key_set_t keys;
        if (!generate_keys(collection->indexes[i], old_document, &keys, error)) {
            index_keys_set_cleanup(&keys);
            return false;
        }
        bool removed = remove_keys(session, collection->indexes[i], &keys, record_id, error);
        index_keys_set_cleanup(&keys);
        if (!removed) {
            return false;
        }
    }
    if (!storage_open_cursor(session, collection->table_uri, NULL, &cursor, error)) {
        return false;
    }
    cursor->set_key(cursor, record_id);
    int wt_code = cursor->remove(cursor);
    cursor->close(cursor);
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "removing a record");
    }
    return true;
}

void storage_append_duplicate_key(storage_session_t *session, bson_t *out)
{
    BSON_APPEND_DOCUMENT(out, "keyPattern", &session->duplicate_key_pattern);
    BSON_APPEND_DOCUMENT(out, "keyValue", &session->duplicate_key_value);
}

bool storage_read_record(storage_session_t *session, collection_t *collection, int64_t record_id,
                         bson_t *out_document, bool *out_found, bson_error_t *error)
{
    WT_CURSOR *cursor = NULL;
    bson_init(out_document);
    *out_found = false;
    if (!storage_open_cursor(session, collection->table_uri, NULL, &cursor, error)) {
        return false;
    }
    cursor->set_key(cursor, record_id);
    int wt_code = cursor->search(cursor);
    if (wt_code == 0) {
        WT_ITEM value;
        cursor->get_value(cursor, &value);
        bson_t view;
        if (bson_init_static(&view, value.data, value.size)) {
            bson_destroy(out_document);
            bson_copy_to(&view, out_document);
            *out_found = true;
        }
    }
    cursor->close(cursor);
    if (wt_code != 0 && wt_code != WT_NOTFOUND) {
        return storage_error_from_wt(error, wt_code, "reading a record");
    }
    return true;
}

/* --- scans ------------------------------------------------------------------ */

struct scan {
    storage_session_t *session;
    collection_t *collection;
    index_descriptor_t *index;
    const scan_bounds_t *bounds;
    scan_position_t *position;
    bool descending;
    bool positioned;  /* the WiredTiger cursor sits on the next candidate */
    bool exhausted;
    WT_CURSOR *cursor;
    uint64_t keys_examined;
    keystring_t seek_key; /* scratch for building seek targets */
};

void scan_bounds_init(scan_bounds_t *bounds)
{
    keystring_init(&bounds->lower);
    keystring_init(&bounds->upper);
    bounds->lower_inclusive = true;
    bounds->upper_inclusive = true;
    bounds->whole_unique_key = false;
}

void scan_bounds_cleanup(scan_bounds_t *bounds)
{
    keystring_cleanup(&bounds->lower);
    keystring_cleanup(&bounds->upper);
}

void scan_position_init(scan_position_t *position)
{
    position->started = false;
    position->record_id = 0;
    keystring_init(&position->key);
}

void scan_position_cleanup(scan_position_t *position)
{
    keystring_cleanup(&position->key);
}

scan_t *scan_open(storage_session_t *session, collection_t *collection, index_descriptor_t *index,
                  const scan_bounds_t *bounds, bool descending, scan_position_t *position, bson_error_t *error)
{
    scan_t *scan = BSON_ALIGNED_ALLOC0(scan_t);
    scan->session = session;
    scan->collection = collection;
    scan->index = index;
    scan->bounds = bounds;
    scan->descending = descending;
    scan->position = position;
    keystring_init(&scan->seek_key);
    const char *uri = index != NULL ? index->table_uri : collection->table_uri;
    if (!storage_open_cursor(session, uri, NULL, &scan->cursor, error)) {
        keystring_cleanup(&scan->seek_key);
        bson_free(scan);
        return NULL;
    }
    return scan;
}

void scan_close(scan_t *scan)
{
    if (scan == NULL) {
        return;
    }
    if (scan->cursor != NULL) {
        scan->cursor->close(scan->cursor);
    }
    keystring_cleanup(&scan->seek_key);
    bson_free(scan);
}

uint64_t scan_keys_examined(const scan_t *scan)
{
    return scan->keys_examined;
}

/* Compares an index key with a bound that may be a prefix of it (fewer
 * components): keys that start with the bound compare equal to it. */
static int compare_key_to_bound(const uint8_t *key, size_t key_length, const keystring_t *bound)
{
    size_t common = key_length < bound->length ? key_length : bound->length;
    int comparison = memcmp(key, bound->data, common);
    if (comparison != 0) {
        return comparison;
    }
    return key_length >= bound->length ? 0 : -1;
}

/* Places the cursor on the first entry >= target (ascending) or the last entry
 * <= target (descending). Returns a WiredTiger code. */
static int seek(WT_CURSOR *cursor, bool is_index, const keystring_t *target, int64_t record_id, bool descending)
{
    int exact = 0;
    int wt_code;
    if (is_index) {
        WT_ITEM item = {.data = target->data, .size = target->length};
        cursor->set_key(cursor, &item);
    } else {
        cursor->set_key(cursor, record_id);
    }
    wt_code = cursor->search_near(cursor, &exact);
    if (wt_code != 0) {
        return wt_code;
    }
    if (!descending && exact < 0) {
        return cursor->next(cursor);
    }
    if (descending && exact > 0) {
        return cursor->prev(cursor);
    }
    return 0;
}

/* Bytes that sort after any continuation of a key: seeking to bound + this
 * lands after every key that starts with the bound. */
static const uint8_t AFTER_PREFIX[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

static int position_cursor(scan_t *scan)
{
    WT_CURSOR *cursor = scan->cursor;
    scan_position_t *position = scan->position;
    bool is_index = scan->index != NULL;
    int wt_code;

    if (is_index && scan->bounds != NULL && scan->bounds->whole_unique_key) {
        if (position->started) {
            return WT_NOTFOUND; /* its one entry was returned */
        }
        WT_ITEM item = {.data = scan->bounds->lower.data, .size = scan->bounds->lower.length};
        cursor->set_key(cursor, &item);
        return cursor->search(cursor);
    }
    if (position->started) {
        /* Resume strictly after the last entry returned. */
        wt_code = seek(cursor, is_index, &position->key, position->record_id, scan->descending);
        if (wt_code != 0) {
            return wt_code;
        }
        bool on_last_returned;
        if (is_index) {
            WT_ITEM key;
            cursor->get_key(cursor, &key);
            on_last_returned = key.size == position->key.length &&
                               memcmp(key.data, position->key.data, key.size) == 0;
        } else {
            int64_t record_id;
            cursor->get_key(cursor, &record_id);
            on_last_returned = record_id == position->record_id;
        }
        if (on_last_returned) {
            return scan->descending ? cursor->prev(cursor) : cursor->next(cursor);
        }
        return 0;
    }
    if (!is_index || scan->bounds == NULL) {
        return scan->descending ? cursor->prev(cursor) : cursor->next(cursor);
    }
    const scan_bounds_t *bounds = scan->bounds;
    const keystring_t *start = scan->descending ? &bounds->upper : &bounds->lower;
    bool inclusive = scan->descending ? bounds->upper_inclusive : bounds->lower_inclusive;
    if (start->length == 0) {
        return scan->descending ? cursor->prev(cursor) : cursor->next(cursor);
    }
    keystring_cleanup(&scan->seek_key);
    keystring_init(&scan->seek_key);
    keystring_append_bytes(&scan->seek_key, start->data, start->length);
    /* Ascending from an exclusive bound, or descending from an inclusive one,
     * starts past every key equal to the bound. */
    if (scan->descending == inclusive) {
        keystring_append_bytes(&scan->seek_key, AFTER_PREFIX, sizeof AFTER_PREFIX);
    }
    return seek(cursor, true, &scan->seek_key, 0, scan->descending);
}

bool scan_next(scan_t *scan, int64_t *out_record_id, bson_t *out_document, bson_t *out_key_values,
               bool *out_end, bson_error_t *error)
{
    WT_CURSOR *cursor = scan->cursor;
    int wt_code;
    *out_end = false;
    if (scan->exhausted) {
        *out_end = true;
        return true;
    }
    if (!scan->positioned) {
        wt_code = position_cursor(scan);
        scan->positioned = true;
    } else {
        wt_code = scan->descending ? cursor->prev(cursor) : cursor->next(cursor);
    }
    if (wt_code == WT_NOTFOUND) {
        scan->exhausted = true;
        *out_end = true;
        return true;
    }
    if (wt_code != 0) {
        return storage_error_from_wt(error, wt_code, "scanning");
    }

    WT_ITEM value;
    if (scan->index == NULL) {
        int64_t record_id;
        cursor->get_key(cursor, &record_id);
        cursor->get_value(cursor, &value);
        if (!bson_init_static(out_document, value.data, value.size)) {
            return tc_error_set(error, TC_ERR_INTERNAL, "corrupt record %lld in %s", (long long)record_id,
                                scan->collection->ns);
        }
        *out_record_id = record_id;
        scan->position->started = true;
        scan->position->record_id = record_id;
        return true;
    }

    WT_ITEM key;
    cursor->get_key(cursor, &key);
    scan->keys_examined++;
    const scan_bounds_t *bounds = scan->bounds;
    if (bounds != NULL) {
        const keystring_t *end = scan->descending ? &bounds->lower : &bounds->upper;
        bool inclusive = scan->descending ? bounds->lower_inclusive : bounds->upper_inclusive;
        if (end->length > 0) {
            int comparison = compare_key_to_bound(key.data, key.size, end);
            if (scan->descending) {
                comparison = -comparison;
            }
            if (comparison > 0 || (comparison == 0 && !inclusive)) {
                scan->exhausted = true;
                *out_end = true;
                return true;
            }
        }
    }
    cursor->get_value(cursor, &value);
    if (value.size < RECORD_ID_BYTES ||
        !bson_init_static(out_key_values, (const uint8_t *)value.data + RECORD_ID_BYTES,
                          value.size - RECORD_ID_BYTES)) {
        return tc_error_set(error, TC_ERR_INTERNAL, "corrupt index entry in %s", scan->index->name);
    }
    uint64_t little_endian;
    memcpy(&little_endian, value.data, RECORD_ID_BYTES);
    *out_record_id = (int64_t)BSON_UINT64_FROM_LE(little_endian);
    keystring_cleanup(&scan->position->key);
    keystring_init(&scan->position->key);
    keystring_append_bytes(&scan->position->key, key.data, key.size);
    scan->position->started = true;
    scan->position->record_id = *out_record_id;
    /* No entry follows a whole unique key's: stop here, not after walking on to
     * the next live key. */
    scan->exhausted = bounds != NULL && bounds->whole_unique_key;
    return true;
}
