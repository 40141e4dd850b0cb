/* Databases, collections and indexes: listDatabases, listCollections, create,
 * drop, dropDatabase, createIndexes, listIndexes, dropIndexes, collStats and
 * dbStats (renameCollection is cmd_rename.c's), with mongod 6.0's reply shapes and error codes. DDL holds
 * the catalog lock exclusively for its whole run; listings and statistics hold it
 * shared. */
#include "store/commands.h"
#include "store/index_options.h"
#include "store/oplog.h"
#include "store/validation.h"
#include "query/value_format.h"
#include "common/log.h"
#include "query/match.h"
#include "query/order.h"
#include "store/transactions.h"

#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* --- shared helpers ------------------------------------------------------------ */


/* mongod's BSONObjBuilder::appendNumber: an int when the value is small, else a long. */
static void append_number(bson_t *document, const char *key, int64_t value)
{
    if (value >= -(INT64_C(1) << 30) && value <= (INT64_C(1) << 30)) {
        BSON_APPEND_INT32(document, key, (int32_t)value);
    } else {
        BSON_APPEND_INT64(document, key, value);
    }
}

/* The optional filter of listDatabases and listCollections, compiled; *out stays
 * NULL without one. */
static bool compile_filter(const command_context_t *context, match_expression_t **out, bson_error_t *error)
{
    bson_t filter;
    *out = NULL;
    if (!command_get_document(context, "filter", &filter, error)) {
        return false;
    }
    if (!bson_empty(&filter)) {
        *out = match_compile(&filter, error);
        return *out != NULL;
    }
    return true;
}

/* cursor: {batchSize: N}; *out_batch_size is -1 when not given (everything in the first batch). */
static bool get_cursor_batch_size(const command_context_t *context, int64_t *out_batch_size, bson_error_t *error)
{
    bson_t cursor_options;
    bson_iter_t iter;
    *out_batch_size = -1;
    if (!command_get_document(context, "cursor", &cursor_options, error)) {
        return false;
    }
    if (!bson_iter_init_find(&iter, &cursor_options, "batchSize")) {
        return true;
    }
    if (!BSON_ITER_HOLDS_NUMBER(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field 'batchSize' is the wrong type '%s', expected types '[long, int, decimal, double]'",
                            value_type_name(bson_iter_type(&iter)));
    }
    int64_t batch_size = bson_iter_as_int64(&iter);
    if (batch_size < 0) {
        return tc_error_set(error, 51024, "BSON field 'batchSize' value must be >= 0, actual value '%lld'",
                            (long long)batch_size);
    }
    *out_batch_size = batch_size;
    return true;
}

/* Growable array of owned documents, handed to a cursor at the end. */
typedef struct document_list {
    bson_t **documents;
    size_t count;
    size_t capacity;
} document_list_t;

static void document_list_add(document_list_t *list, bson_t *document)
{
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? list->capacity * 2 : 16;
        list->documents = bson_realloc(list->documents, list->capacity * sizeof(bson_t *));
    }
    list->documents[list->count++] = document;
}

static void document_list_cleanup(document_list_t *list)
{
    for (size_t i = 0; i < list->count; i++) {
        bson_destroy(list->documents[i]);
    }
    bson_free(list->documents);
    memset(list, 0, sizeof *list);
}

/* Replies cursor: {id, ns, firstBatch} over documents (taken from list): all of
 * them, or batch_size with the rest kept for getMore, as mongod answers
 * listCollections and listIndexes. */
static bool reply_with_documents(command_context_t *context, const char *ns, document_list_t *list,
                                 int64_t batch_size, bson_t *reply, bson_error_t *error)
{
    store_cursor_t *cursor = store_cursor_new(ns);
    batch_builder_t batch = {.limit = 0};
    bool exhausted = true;

    cursor->documents = list->documents;
    cursor->document_count = list->count;
    memset(list, 0, sizeof *list);
    bson_init(&batch.array);
    if (batch_size == 0) {
        exhausted = cursor->document_count == 0;
    } else {
        batch.limit = batch_size < 0 ? 0 : (uint32_t)(batch_size > UINT32_MAX ? UINT32_MAX : batch_size);
        if (!command_fill_batch(context, cursor, NULL, &batch, &exhausted, error)) {
            store_cursor_destroy(cursor);
            bson_destroy(&batch.array);
            return false;
        }
    }
    int64_t cursor_id = 0;
    if (!exhausted) {
        cursor_table_add(context->store->cursors, cursor, context->command);
        cursor_id = cursor->id;
        cursor_table_release(context->store->cursors, cursor, false);
    } else {
        store_cursor_destroy(cursor);
    }
    bson_t cursor_document;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor_document);
    BSON_APPEND_INT64(&cursor_document, "id", cursor_id);
    BSON_APPEND_UTF8(&cursor_document, "ns", ns);
    BSON_APPEND_ARRAY(&cursor_document, "firstBatch", &batch.array);
    bson_append_document_end(reply, &cursor_document);
    bson_destroy(&batch.array);
    return true;
}

/* The namespaces of database's collections, in ns order. Caller frees with
 * bson_strfreev(). Requires the catalog lock. */
typedef struct namespace_collector {
    const char *database;
    char **names;
    size_t count;
    size_t capacity;
} namespace_collector_t;

static void collector_add(namespace_collector_t *collector, const char *database, const char *ns)
{
    if (strcmp(database, collector->database) != 0) {
        return;
    }
    if (collector->count + 1 >= collector->capacity) {
        collector->capacity = collector->capacity ? collector->capacity * 2 : 16;
        collector->names = bson_realloc(collector->names, collector->capacity * sizeof(char *));
    }
    collector->names[collector->count++] = bson_strdup(ns);
    collector->names[collector->count] = NULL;
}

static void collect_namespace(collection_t *collection, void *context)
{
    collector_add(context, collection->database, collection->ns);
}

static void collect_view_namespace(view_t *view, void *context)
{
    collector_add(context, view->database, view->ns);
}

/* The collections of database, then (with_views) its views. */
static char **database_namespaces(storage_t *storage, const char *database, bool with_views, size_t *out_count)
{
    namespace_collector_t collector = {.database = database};
    storage_visit_collections(storage, collect_namespace, &collector);
    if (with_views) {
        storage_visit_views(storage, collect_view_namespace, &collector);
    }
    if (collector.names == NULL) {
        collector.names = bson_malloc0(sizeof(char *));
    }
    *out_count = collector.count;
    return collector.names;
}

/* Document count and total BSON bytes of a collection, by a scan in one read
 * transaction. Requires the catalog lock. */
static bool measure_collection(storage_session_t *session, collection_t *collection, int64_t *out_count,
                               int64_t *out_bytes, bson_error_t *error)
{
    scan_position_t position;
    int64_t count = 0, bytes = 0;
    bool ok;

    if (!storage_begin(session, error)) {
        return false;
    }
    scan_position_init(&position);
    scan_t *scan = scan_open(session, collection, NULL, NULL, false, &position, error);
    ok = scan != NULL;
    while (ok) {
        int64_t record_id;
        bson_t document, key_values;
        bool end = false;
        ok = scan_next(scan, &record_id, &document, &key_values, &end, error);
        if (!ok || end) {
            break;
        }
        count++;
        bytes += document.len;
    }
    scan_close(scan);
    scan_position_cleanup(&position);
    storage_rollback(session);
    *out_count = count;
    *out_bytes = bytes;
    return ok;
}

static int64_t indexes_size(storage_session_t *session, collection_t *collection)
{
    int64_t total = 0;
    for (size_t i = 0; i < collection->index_count; i++) {
        total += storage_table_size(session, collection->indexes[i]->table_uri);
    }
    return total;
}

/* The scale option of collStats and dbStats, whose messages differ: collStats
 * says ">= 1", dbStats "> 0". */
static bool get_scale(const command_context_t *context, const char *bound, int32_t *out_scale, bson_error_t *error)
{
    bson_iter_t iter;
    *out_scale = 1;
    if (!bson_iter_init_find(&iter, context->command, "scale")) {
        return true;
    }
    if (BSON_ITER_HOLDS_NUMBER(&iter)) {
        /* safeNumberInt: truncated, clamped to the int range. */
        double value = bson_iter_as_double(&iter);
        int64_t scale = value != value ? 0 : value > INT32_MAX ? INT32_MAX : value < INT32_MIN ? INT32_MIN : (int64_t)value;
        if (scale < 1) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "scale has to be %s", bound);
        }
        *out_scale = (int32_t)scale;
        return true;
    }
    if (bson_iter_as_bool(&iter)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "scale has to be a number %s", bound);
    }
    return true;
}

/* --- listDatabases ------------------------------------------------------------ */

typedef struct database_summary {
    char *name;
    int64_t size_on_disk;
} database_summary_t;

typedef struct database_collector {
    storage_session_t *session;
    bool name_only;
    database_summary_t *databases;
    size_t count;
    size_t capacity;
} database_collector_t;

/* The summary of database, added with size 0 when it is not there yet. */
static database_summary_t *collector_database(database_collector_t *collector, const char *database)
{
    for (size_t i = collector->count; i > 0; i--) { /* the last one first: collections arrive in ns order */
        if (strcmp(collector->databases[i - 1].name, database) == 0) {
            return &collector->databases[i - 1];
        }
    }
    if (collector->count == collector->capacity) {
        collector->capacity = collector->capacity ? collector->capacity * 2 : 8;
        collector->databases = bson_realloc(collector->databases, collector->capacity * sizeof(database_summary_t));
    }
    database_summary_t *added = &collector->databases[collector->count++];
    added->name = bson_strdup(database);
    added->size_on_disk = 0;
    return added;
}

static void collect_database(collection_t *collection, void *context)
{
    database_collector_t *collector = context;
    database_summary_t *summary = collector_database(collector, collection->database);
    if (!collector->name_only) {
        summary->size_on_disk += storage_table_size(collector->session, collection->table_uri) +
                                 indexes_size(collector->session, collection);
    }
}

/* A database holding only views is listed too, as mongod lists it (its
 * system.views collection). */
static void collect_database_of_view(view_t *view, void *context)
{
    collector_database(context, view->database);
}

static int compare_database_names(const void *left, const void *right)
{
    return strcmp(((const database_summary_t *)left)->name, ((const database_summary_t *)right)->name);
}

static bool handle_list_databases(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    database_collector_t collector = {.session = context->session};
    match_expression_t *filter = NULL;
    bool name_only, authorized_only;

    if (!command_require_admin_database(context, error) || !command_get_bool(context, "nameOnly", false, &name_only, error) ||
        !command_get_bool(context, "authorizedDatabases", false, &authorized_only, error) ||
        !compile_filter(context, &filter, error)) {
        return false;
    }
    collector.name_only = name_only;
    storage_lock_shared(storage);
    storage_visit_collections(storage, collect_database, &collector);
    storage_visit_views(storage, collect_database_of_view, &collector);
    storage_unlock(storage);
    if (collector.count > 1) {
        qsort(collector.databases, collector.count, sizeof(database_summary_t), compare_database_names);
    }

    bson_t databases;
    int64_t total_size = 0;
    uint32_t listed = 0;
    BSON_APPEND_ARRAY_BEGIN(reply, "databases", &databases);
    for (size_t i = 0; i < collector.count; i++) {
        bson_t item = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&item, "name", collector.databases[i].name);
        if (!name_only) {
            BSON_APPEND_INT64(&item, "sizeOnDisk", collector.databases[i].size_on_disk);
            BSON_APPEND_BOOL(&item, "empty", false); /* listed only while it has collections or views */
        }
        if (filter == NULL || match_document(filter, &item)) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(listed++, &key_string, key, sizeof key);
            BSON_APPEND_DOCUMENT(&databases, key_string, &item);
            total_size += collector.databases[i].size_on_disk;
        }
        bson_destroy(&item);
        bson_free(collector.databases[i].name);
    }
    bson_append_array_end(reply, &databases);
    if (!name_only) {
        BSON_APPEND_INT64(reply, "totalSize", total_size);
        BSON_APPEND_INT64(reply, "totalSizeMb", total_size / (1024 * 1024));
    }
    bson_free(collector.databases);
    match_destroy(filter);
    return true;
}

/* --- listCollections ---------------------------------------------------------- */

static void append_collection_entry(const collection_t *collection, bool name_only, bson_t *entry)
{
    BSON_APPEND_UTF8(entry, "name", collection->name);
    BSON_APPEND_UTF8(entry, "type", "collection");
    if (name_only) {
        return;
    }
    BSON_APPEND_DOCUMENT(entry, "options", &collection->options);
    bson_t info;
    BSON_APPEND_DOCUMENT_BEGIN(entry, "info", &info);
    BSON_APPEND_BOOL(&info, "readOnly", false);
    BSON_APPEND_BINARY(&info, "uuid", BSON_SUBTYPE_UUID, collection->uuid, 16);
    bson_append_document_end(entry, &info);
    for (size_t i = 0; i < collection->index_count; i++) {
        if (collection->indexes[i]->is_id) {
            BSON_APPEND_DOCUMENT(entry, "idIndex", &collection->indexes[i]->spec);
            break;
        }
    }
}

typedef struct collection_lister {
    const char *database;
    bool name_only;
    const match_expression_t *filter;
    document_list_t entries;
} collection_lister_t;

/* Keeps entry (taken) when it passes the filter. */
static void lister_keep(collection_lister_t *lister, bson_t *entry)
{
    if (lister->filter == NULL || match_document(lister->filter, entry)) {
        document_list_add(&lister->entries, entry);
    } else {
        bson_destroy(entry);
    }
}

static void list_collection(collection_t *collection, void *context)
{
    collection_lister_t *lister = context;
    if (strcmp(collection->database, lister->database) != 0) {
        return;
    }
    bson_t *entry = bson_new();
    append_collection_entry(collection, lister->name_only, entry);
    lister_keep(lister, entry);
}

/* A view's entry, as mongod lists one: no uuid, no idIndex, read-only. */
static void list_view(view_t *view, void *context)
{
    collection_lister_t *lister = context;
    if (strcmp(view->database, lister->database) != 0) {
        return;
    }
    bson_t *entry = bson_new();
    BSON_APPEND_UTF8(entry, "name", view->name);
    BSON_APPEND_UTF8(entry, "type", "view");
    if (!lister->name_only) {
        bson_t options, info;
        BSON_APPEND_DOCUMENT_BEGIN(entry, "options", &options);
        BSON_APPEND_UTF8(&options, "viewOn", strchr(view->view_on, '.') + 1);
        BSON_APPEND_ARRAY(&options, "pipeline", &view->pipeline);
        bson_append_document_end(entry, &options);
        BSON_APPEND_DOCUMENT_BEGIN(entry, "info", &info);
        BSON_APPEND_BOOL(&info, "readOnly", true);
        bson_append_document_end(entry, &info);
    }
    lister_keep(lister, entry);
}

static bool handle_list_collections(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    collection_lister_t lister = {.database = context->database};
    match_expression_t *filter = NULL;
    bool authorized_only;
    int64_t batch_size;

    if (!command_get_bool(context, "nameOnly", false, &lister.name_only, error) ||
        !command_get_bool(context, "authorizedCollections", false, &authorized_only, error) ||
        !get_cursor_batch_size(context, &batch_size, error) || !compile_filter(context, &filter, error)) {
        return false;
    }
    lister.filter = filter;
    storage_lock_shared(storage);
    storage_visit_collections(storage, list_collection, &lister);
    storage_visit_views(storage, list_view, &lister);
    storage_unlock(storage);
    match_destroy(filter);

    char *ns = bson_strdup_printf("%s.$cmd.listCollections", context->database);
    bool ok = reply_with_documents(context, ns, &lister.entries, batch_size, reply, error);
    document_list_cleanup(&lister.entries);
    bson_free(ns);
    return ok;
}

/* --- create --------------------------------------------------------------------- */

/* create's own fields in mongod 6.0 (create.idl). */
static const char *const create_option_fields[] = {
    "capped", "autoIndexId", "idIndex", "size", "max", "storageEngine", "validator", "validationLevel",
    "validationAction", "indexOptionDefaults", "viewOn", "pipeline", "collation", "changeStreamPreAndPostImages",
    "timeseries", "clusteredIndex", "expireAfterSeconds", "encryptedFields", "recordPreImages", "temp", "flags",
    NULL,
};

static bool name_in(const char *name, const char *const *names)
{
    for (; *names != NULL; names++) {
        if (strcmp(*names, name) == 0) {
            return true;
        }
    }
    return false;
}

/* Options thermocline store cannot honour yet: refused rather than ignored, so
 * an application never believes it has a capped collection. */
static bool refuse_unsupported_option(const char *ns, bson_iter_t *iter, bson_error_t *error)
{
    const char *field = bson_iter_key(iter);
    const char *what = NULL;
    if (strcmp(field, "capped") == 0 && bson_iter_as_bool(iter)) {
        what = "capped collections";
    } else if (strcmp(field, "timeseries") == 0) {
        what = "time series collections";
    } else if (strcmp(field, "clusteredIndex") == 0) {
        what = "clustered collections";
    } else if (strcmp(field, "encryptedFields") == 0) {
        what = "queryable encryption (encryptedFields)";
    } else if (strcmp(field, "expireAfterSeconds") == 0) {
        what = "collection-level expireAfterSeconds";
    }
    if (what != NULL) {
        return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                            "thermocline store does not support %s yet; %s was not created", what, ns);
    }
    return true;
}

/* The options listCollections will show: what the command gave, minus generic
 * arguments and the fields mongod does not keep for an uncapped collection. */
static bool build_create_options(const command_context_t *context, const char *ns, bson_t *options,
                                 bson_error_t *error)
{
    bson_iter_t iter;
    bson_t sub_document; /* only type-checked here */
    if (!command_get_document(context, "storageEngine", &sub_document, error) ||
        !command_get_document(context, "indexOptionDefaults", &sub_document, error)) {
        return false;
    }
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter); /* the command name */
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (command_is_generic_argument(field)) {
            continue;
        }
        if (!name_in(field, create_option_fields)) {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field 'create.%s' is an unknown field.",
                                field);
        }
        if (!refuse_unsupported_option(ns, &iter, error) || !validation_check_option("create", &iter, error)) {
            return false;
        }
        if (strcmp(field, "capped") == 0 || strcmp(field, "size") == 0 || strcmp(field, "max") == 0 ||
            strcmp(field, "autoIndexId") == 0 || strcmp(field, "idIndex") == 0 || strcmp(field, "flags") == 0) {
            continue;
        }
        if (strcmp(field, "collation") == 0) {
            /* Kept expanded, as listCollections shows it; {locale: "simple"} is no collation. */
            if (!index_options_append_collation(context->command, NULL, options, error)) {
                return false;
            }
            continue;
        }
        if (strcmp(field, "changeStreamPreAndPostImages") == 0) {
            /* Kept (and shown by listCollections) only while enabled, as on mongod. */
            bool enabled = false;
            if (!command_parse_pre_and_post_images("create", &iter, &enabled, error)) {
                return false;
            }
            if (!enabled) {
                continue;
            }
        }
        bson_append_iter(options, field, -1, &iter);
    }
    return true;
}

static bool handle_create(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    char *ns = NULL;
    bson_t options = BSON_INITIALIZER;
    bool ok = false;

    TC_CHECK(command_namespace(context, &ns, error));
    if (bson_has_field(context->command, "viewOn") || bson_has_field(context->command, "pipeline")) {
        ok = views_create(context, ns, error);
        goto done;
    }
    storage_lock_exclusive(storage);
    /* An existing collection or view is NamespaceExists whatever the options ask for. */
    if (storage_find_collection(storage, ns) != NULL || storage_find_view(storage, ns) != NULL) {
        tc_error_set(error, TC_ERR_NAMESPACE_EXISTS, "Collection %s already exists.", ns);
    } else if (build_create_options(context, ns, &options, error)) {
        ok = storage_create_collection(context->session, ns, &options, NULL, error);
    }
    storage_unlock(storage);
done:
    bson_destroy(&options);
    bson_free(ns);
    return ok;
}

/* --- drop / dropDatabase ---------------------------------------------------------- */

static bool handle_drop(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    char *ns = NULL;
    if (!command_namespace(context, &ns, error)) {
        return false;
    }
    transaction_lock_ddl(context, ns, NULL);
    collection_t *collection = storage_find_collection(storage, ns);
    int32_t index_count = collection ? (int32_t)collection->index_count : 0;
    bool is_view = storage_find_view(storage, ns) != NULL;
    bool ok = is_view ? storage_drop_view(context->session, ns, error)
                      : storage_drop_collection(context->session, ns, error);
    transaction_unlock_ddl(context, ns, NULL);
    if (ok) {
        if (!is_view) { /* a view had no indexes: mongod leaves nIndexesWas out */
            BSON_APPEND_INT32(reply, "nIndexesWas", index_count);
        }
        BSON_APPEND_UTF8(reply, "ns", ns);
    }
    bson_free(ns);
    return ok;
}

static bool handle_drop_database(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t iter;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (!BSON_ITER_HOLDS_NUMBER(&iter) || bson_iter_as_double(&iter) != 1.0) {
        return tc_error_set(error, 5255100, "Have to pass 1 as 'drop' parameter");
    }
    bool ok = true;
    size_t count;
    transaction_lock_ddl(context, context->database, NULL);
    char **names = database_namespaces(storage, context->database, true, &count);
    for (size_t i = 0; i < count && ok; i++) {
        ok = storage_find_view(storage, names[i]) != NULL ? storage_drop_view(context->session, names[i], error)
                                                          : storage_drop_collection(context->session, names[i], error);
    }
    if (ok && count > 0) {
        /* As mongod: a drop entry per collection, then this one. */
        bson_t object = BSON_INITIALIZER;
        BSON_APPEND_INT32(&object, "dropDatabase", 1);
        ok = oplog_log_command(context->session, context->database, NULL, &object, NULL, error);
        bson_destroy(&object);
    }
    transaction_unlock_ddl(context, context->database, NULL);
    bson_strfreev(names);
    if (ok) {
        BSON_APPEND_UTF8(reply, "dropped", context->database);
    }
    return ok;
}

/* --- createIndexes ------------------------------------------------------------------ */

/* Checks what mongod checks before building anything, so a bad spec late in
 * the list leaves no index half made. */
static bool validate_index_spec(bson_iter_t *item, uint32_t position, bson_error_t *error)
{
    bson_iter_t field;
    if (!BSON_ITER_HOLDS_DOCUMENT(item)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field 'createIndexes.indexes.%u' is the wrong type '%s', expected type 'object'",
                            position, value_type_name(bson_iter_type(item)));
    }
    bson_iter_recurse(item, &field);
    if (!bson_iter_find(&field, "key") || !BSON_ITER_HOLDS_DOCUMENT(&field)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "The 'key' field is a required property of an index specification");
    }
    bson_iter_recurse(item, &field);
    if (!bson_iter_find(&field, "name")) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "The 'name' field is a required property of an index specification");
    }
    if (!BSON_ITER_HOLDS_UTF8(&field)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "The field 'name' must be a string, not %s",
                            value_type_name(bson_iter_type(&field)));
    }
    const char *name = bson_iter_utf8(&field, NULL);
    if (name[0] == '\0') {
        return tc_error_set(error, TC_ERR_CANNOT_CREATE_INDEX, "index name cannot be empty");
    }
    if (strcmp(name, "*") == 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "The index name '*' is not valid.");
    }
    /* A bad collation fails the command before any index of the list is built. */
    return index_options_check_collation(bson_iter_value(item), error);
}

static bool get_index_specs(const command_context_t *context, bson_iter_t *out_items, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, context->command, "indexes")) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field 'createIndexes.indexes' is missing but a required field");
    }
    if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field 'createIndexes.indexes' is the wrong type '%s', expected type 'array'",
                            value_type_name(bson_iter_type(&iter)));
    }
    bson_iter_recurse(&iter, out_items);
    bson_iter_t items = *out_items;
    uint32_t count = 0;
    while (bson_iter_next(&items)) {
        if (!validate_index_spec(&items, count, error)) {
            return false;
        }
        count++;
    }
    if (count == 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Must specify at least one index to create");
    }
    return true;
}

static bool handle_create_indexes(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    char *ns = NULL;
    bson_iter_t items;
    char **created_names = NULL;
    size_t created_count = 0;
    bool created_collection = false;
    bool ok = false;

    if (!command_namespace(context, &ns, error) || !get_index_specs(context, &items, error)) {
        bson_free(ns);
        return false;
    }
    transaction_lock_ddl(context, ns, NULL);
    collection_t *collection = storage_find_collection(storage, ns);
    if (storage_find_view(storage, ns) != NULL) {
        tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED_ON_VIEW, "Cannot create indexes on a view: %s", ns);
        goto done;
    }
    if (collection == NULL) {
        TC_CHECK(storage_create_collection(context->session, ns, NULL, &collection, error));
        created_collection = true;
    }
    int32_t indexes_before = (int32_t)collection->index_count;
    while (bson_iter_next(&items)) {
        uint32_t length;
        const uint8_t *data;
        bson_t spec;
        bool created = false;
        bson_iter_document(&items, &length, &data);
        bson_init_static(&spec, data, length);
        TC_CHECK(storage_create_index(context->session, collection, &spec, &created, error));
        if (created) {
            bson_iter_t name;
            bson_iter_init_find(&name, &spec, "name");
            created_names = bson_realloc(created_names, (created_count + 1) * sizeof(char *));
            created_names[created_count++] = bson_strdup(bson_iter_utf8(&name, NULL));
        }
    }
    BSON_APPEND_INT32(reply, "numIndexesBefore", indexes_before);
    BSON_APPEND_INT32(reply, "numIndexesAfter", (int32_t)collection->index_count);
    if (created_count == 0 && !created_collection) {
        BSON_APPEND_UTF8(reply, "note", "all indexes already exist");
    } else {
        BSON_APPEND_BOOL(reply, "createdCollectionAutomatically", created_collection);
    }
    ok = true;
done:
    if (!ok && collection != NULL) {
        /* mongod builds a request's indexes together: a failure leaves none of
         * them, nor the collection it created for them. */
        bson_error_t undo_error;
        bool undone = true;
        if (created_collection) {
            undone = storage_drop_collection(context->session, ns, &undo_error);
        } else {
            for (size_t i = 0; i < created_count && undone; i++) {
                undone = storage_drop_index(context->session, collection, created_names[i], &undo_error);
            }
        }
        if (!undone) {
            TC_LOG(TC_LOG_WARNING, "INDEX", context->connection_id, "createIndexes on %s failed and could not "
                   "undo its partial work: %s", ns, undo_error.message);
        }
    }
    transaction_unlock_ddl(context, ns, NULL);
    for (size_t i = 0; i < created_count; i++) {
        bson_free(created_names[i]);
    }
    bson_free(created_names);
    bson_free(ns);
    return ok;
}

/* --- listIndexes ------------------------------------------------------------------- */

static bool handle_list_indexes(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    char *ns = NULL;
    int64_t batch_size;
    document_list_t specs = {0};

    if (!command_namespace(context, &ns, error) || !get_cursor_batch_size(context, &batch_size, error)) {
        bson_free(ns);
        return false;
    }
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, ns);
    if (collection != NULL) {
        for (size_t i = 0; i < collection->index_count; i++) {
            document_list_add(&specs, bson_copy(&collection->indexes[i]->spec));
        }
    }
    bool ok = views_refuse(storage, ns, error);
    storage_unlock(storage);
    if (!ok) {
        /* error set: a view has no indexes of its own */
    } else if (collection == NULL) {
        ok = tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "ns does not exist: %s", ns);
    } else {
        ok = reply_with_documents(context, ns, &specs, batch_size, reply, error);
    }
    document_list_cleanup(&specs);
    bson_free(ns);
    return ok;
}

/* --- dropIndexes --------------------------------------------------------------------- */

/* A key pattern as mongod prints it in messages: { a: 1, b: -1 }. */
static void format_key_pattern(const bson_t *pattern, bson_string_t *out)
{
    bson_iter_t iter;
    bool first = true;
    bson_string_append(out, "{");
    bson_iter_init(&iter, pattern);
    while (bson_iter_next(&iter)) {
        bson_string_append_printf(out, "%s %s: ", first ? "" : ",", bson_iter_key(&iter));
        first = false;
        switch (bson_iter_type(&iter)) {
        case BSON_TYPE_INT32: bson_string_append_printf(out, "%d", bson_iter_int32(&iter)); break;
        case BSON_TYPE_INT64: bson_string_append_printf(out, "%lld", (long long)bson_iter_int64(&iter)); break;
        case BSON_TYPE_DOUBLE: {
            double value = bson_iter_double(&iter);
            bson_string_append_printf(out, value == (double)(int64_t)value ? "%.1f" : "%g", value);
            break;
        }
        case BSON_TYPE_UTF8: bson_string_append_printf(out, "\"%s\"", bson_iter_utf8(&iter, NULL)); break;
        default: bson_string_append(out, value_type_name(bson_iter_type(&iter))); break;
        }
    }
    bson_string_append(out, first ? "}" : " }");
}

static bool drop_index_by_key(storage_session_t *session, collection_t *collection, const bson_t *pattern,
                              bson_error_t *error)
{
    for (size_t i = 0; i < collection->index_count; i++) {
        index_descriptor_t *index = collection->indexes[i];
        if (order_compare_documents(&index->key_pattern, pattern) != 0) {
            continue;
        }
        if (index->is_id) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "cannot drop _id index");
        }
        char *name = bson_strdup(index->name);
        bool ok = storage_drop_index(session, collection, name, error);
        bson_free(name);
        return ok;
    }
    bson_string_t *text = bson_string_new(NULL);
    format_key_pattern(pattern, text);
    tc_error_set(error, TC_ERR_INDEX_NOT_FOUND, "can't find index with key: %s", text->str);
    bson_string_free(text, true);
    return false;
}

/* index: [names]: every name checked before any is dropped. */
static bool drop_index_list(storage_session_t *session, collection_t *collection, bson_iter_t *names,
                            bson_error_t *error)
{
    bson_iter_t check = *names;
    while (bson_iter_next(&check)) {
        if (!BSON_ITER_HOLDS_UTF8(&check)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "BSON field 'dropIndexes.index.%s' is the wrong type '%s', expected type 'string'",
                                bson_iter_key(&check), value_type_name(bson_iter_type(&check)));
        }
        const char *name = bson_iter_utf8(&check, NULL);
        if (strcmp(name, "*") == 0) {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "'*' is not a valid index name when dropping multiple indexes");
        }
        if (strcmp(name, "_id_") == 0) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "cannot drop _id index");
        }
        if (storage_find_index(collection, name) == NULL) {
            return tc_error_set(error, TC_ERR_INDEX_NOT_FOUND, "index not found with name [%s]", name);
        }
    }
    while (bson_iter_next(names)) {
        if (!storage_drop_index(session, collection, bson_iter_utf8(names, NULL), error)) {
            return false;
        }
    }
    return true;
}

static bool drop_all_indexes(storage_session_t *session, collection_t *collection, bson_error_t *error)
{
    size_t i = 0;
    while (i < collection->index_count) {
        if (collection->indexes[i]->is_id) {
            i++;
            continue;
        }
        char *name = bson_strdup(collection->indexes[i]->name);
        bool ok = storage_drop_index(session, collection, name, error);
        bson_free(name);
        if (!ok) {
            return false;
        }
    }
    return true;
}

static bool handle_drop_indexes(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    bson_iter_t index;
    char *ns = NULL;
    bool ok = false;
    bool dropped_all = false;

    if (!command_namespace(context, &ns, error)) {
        return false;
    }
    if (!bson_iter_init_find(&index, context->command, "index")) {
        bson_free(ns);
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field '%s.index' is missing but a required field", context->name);
    }
    transaction_lock_ddl(context, ns, NULL);
    collection_t *collection = storage_find_collection(storage, ns);
    TC_CHECK(views_refuse(storage, ns, error));
    if (collection == NULL) {
        tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "ns not found %s", ns);
        goto done;
    }
    int32_t indexes_before = (int32_t)collection->index_count;
    if (BSON_ITER_HOLDS_UTF8(&index) && strcmp(bson_iter_utf8(&index, NULL), "*") == 0) {
        TC_CHECK(drop_all_indexes(context->session, collection, error));
        dropped_all = true;
    } else if (BSON_ITER_HOLDS_UTF8(&index)) {
        TC_CHECK(storage_drop_index(context->session, collection, bson_iter_utf8(&index, NULL), error));
    } else if (BSON_ITER_HOLDS_DOCUMENT(&index)) {
        uint32_t length;
        const uint8_t *data;
        bson_t pattern;
        bson_iter_document(&index, &length, &data);
        bson_init_static(&pattern, data, length);
        TC_CHECK(drop_index_by_key(context->session, collection, &pattern, error));
    } else if (BSON_ITER_HOLDS_ARRAY(&index)) {
        bson_iter_t names;
        bson_iter_recurse(&index, &names);
        TC_CHECK(drop_index_list(context->session, collection, &names, error));
    } else {
        tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                     "BSON field '%s.index' is the wrong type '%s', expected types '[string, object, array]'",
                     context->name, value_type_name(bson_iter_type(&index)));
        goto done;
    }
    BSON_APPEND_INT32(reply, "nIndexesWas", indexes_before);
    if (dropped_all) {
        BSON_APPEND_UTF8(reply, "msg", "non-_id indexes dropped for collection");
    }
    ok = true;
done:
    transaction_unlock_ddl(context, ns, NULL);
    bson_free(ns);
    return ok;
}

/* --- collStats / dbStats -------------------------------------------------------------- */

static bool handle_coll_stats(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    char *ns = NULL;
    int32_t scale;
    bool ok = true;

    if (!command_namespace(context, &ns, error) || !get_scale(context, ">= 1", &scale, error)) {
        bson_free(ns);
        return false;
    }
    BSON_APPEND_UTF8(reply, "ns", ns);
    bson_t empty = BSON_INITIALIZER, sizes;
    storage_lock_shared(storage);
    if (!views_refuse(storage, ns, error)) {
        storage_unlock(storage);
        bson_free(ns);
        return false;
    }
    collection_t *collection = storage_find_collection(storage, ns);
    if (collection == NULL) {
        /* mongod 6.0 answers ok with zeros for a collection that does not exist. */
        append_number(reply, "size", 0);
        append_number(reply, "count", 0);
        append_number(reply, "storageSize", 0);
        BSON_APPEND_INT32(reply, "totalSize", 0);
        BSON_APPEND_INT32(reply, "nindexes", 0);
        append_number(reply, "totalIndexSize", 0);
        BSON_APPEND_DOCUMENT(reply, "indexDetails", &empty);
        BSON_APPEND_DOCUMENT(reply, "indexSizes", &empty);
        BSON_APPEND_INT32(reply, "scaleFactor", scale);
        goto done;
    }
    int64_t count = 0, bytes = 0;
    ok = measure_collection(context->session, collection, &count, &bytes, error);
    if (!ok) {
        goto done;
    }
    int64_t storage_size = storage_table_size(context->session, collection->table_uri);
    append_number(reply, "size", bytes / scale);
    append_number(reply, "count", count);
    if (count > 0) {
        BSON_APPEND_INT32(reply, "avgObjSize", (int32_t)(bytes / count));
    }
    append_number(reply, "storageSize", storage_size / scale);
    append_number(reply, "freeStorageSize", 0);
    BSON_APPEND_BOOL(reply, "capped", false);
    BSON_APPEND_INT32(reply, "nindexes", (int32_t)collection->index_count);
    BSON_APPEND_DOCUMENT(reply, "indexDetails", &empty);
    BSON_APPEND_ARRAY(reply, "indexBuilds", &empty);
    int64_t index_total = 0;
    bson_init(&sizes);
    for (size_t i = 0; i < collection->index_count; i++) {
        int64_t size = storage_table_size(context->session, collection->indexes[i]->table_uri);
        index_total += size;
        append_number(&sizes, collection->indexes[i]->name, size / scale);
    }
    append_number(reply, "totalIndexSize", index_total / scale);
    append_number(reply, "totalSize", (storage_size + index_total) / scale);
    BSON_APPEND_DOCUMENT(reply, "indexSizes", &sizes);
    BSON_APPEND_INT32(reply, "scaleFactor", scale);
    bson_destroy(&sizes);
done:
    storage_unlock(storage);
    bson_destroy(&empty);
    bson_free(ns);
    return ok;
}

static bool handle_db_stats(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    int32_t scale;
    size_t count;
    int64_t objects = 0, data_size = 0, storage_size = 0, index_count = 0, index_size = 0;
    bool ok = true;

    if (!get_scale(context, "> 0", &scale, error)) {
        return false;
    }
    storage_lock_shared(storage);
    size_t with_views;
    char **names = database_namespaces(storage, context->database, true, &with_views);
    count = 0;
    while (count < with_views && storage_find_view(storage, names[count]) == NULL) {
        count++; /* the collections come first */
    }
    for (size_t i = 0; i < count && ok; i++) {
        collection_t *collection = storage_find_collection(storage, names[i]);
        int64_t documents, bytes;
        ok = measure_collection(context->session, collection, &documents, &bytes, error);
        objects += documents;
        data_size += bytes;
        storage_size += storage_table_size(context->session, collection->table_uri);
        index_count += (int64_t)collection->index_count;
        index_size += indexes_size(context->session, collection);
    }
    storage_unlock(storage);
    bson_strfreev(names);
    if (!ok) {
        return false;
    }
    BSON_APPEND_UTF8(reply, "db", context->database);
    append_number(reply, "collections", (int64_t)count);
    append_number(reply, "views", (int64_t)(with_views - count));
    append_number(reply, "objects", objects);
    if (count == 0) {
        BSON_APPEND_INT32(reply, "avgObjSize", 0); /* as mongod answers for a database that does not exist */
    } else {
        BSON_APPEND_DOUBLE(reply, "avgObjSize", objects == 0 ? 0.0 : (double)data_size / (double)objects);
    }
    append_number(reply, "dataSize", data_size / scale);
    append_number(reply, "storageSize", storage_size / scale);
    append_number(reply, "indexes", index_count);
    append_number(reply, "indexSize", index_size / scale);
    append_number(reply, "totalSize", (storage_size + index_size) / scale);
    append_number(reply, "scaleFactor", scale);
    int64_t used = 0, total = 0;
    struct statvfs filesystem;
    if (count > 0 && statvfs(context->store->options.dbpath, &filesystem) == 0) {
        total = (int64_t)filesystem.f_blocks * (int64_t)filesystem.f_frsize;
        used = total - (int64_t)filesystem.f_bavail * (int64_t)filesystem.f_frsize;
    }
    append_number(reply, "fsUsedSize", used / scale);
    append_number(reply, "fsTotalSize", total / scale);
    return true;
}

const command_definition_t catalog_commands[] = {
    {"listDatabases", handle_list_databases},
    {"listCollections", handle_list_collections},
    {"create", handle_create},
    {"drop", handle_drop},
    {"dropDatabase", handle_drop_database},
    {"createIndexes", handle_create_indexes},
    {"listIndexes", handle_list_indexes},
    {"dropIndexes", handle_drop_indexes},
    {"deleteIndexes", handle_drop_indexes},
    {"collStats", handle_coll_stats},
    {"collstats", handle_coll_stats},
    {"dbStats", handle_db_stats},
    {"dbstats", handle_db_stats},
    {NULL, NULL},
};
