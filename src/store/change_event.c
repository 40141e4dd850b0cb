/* Oplog entry -> change events, and resume tokens. The event shapes follow
 * mongod 6.0 (change_stream_event_transform.cpp and the invalidate stage):
 *
 *   {_id: <token>, operationType, clusterTime, collectionUUID?, wallTime,
 *    fullDocument?, ns, to? (rename), documentKey?, operationDescription?,
 *    updateDescription?, stateBeforeChange? (modify), lsid?, txnNumber?,
 *    fullDocumentBeforeChange?}
 *
 * collectionUUID and operationDescription only with showExpandedEvents, which
 * also turns the oplog's create, createIndexes, dropIndexes and collMod
 * entries into events.
 *
 * lsid and txnNumber appear only for writes of a multi-document transaction
 * (the operations of an applyOps entry), as on mongod: retryable writes carry
 * them in the oplog but not in events. */
#include "store/change_event.h"

#include <stdio.h>
#include <string.h>

#define TOKEN_MARKER 0x82 /* KeyString's type byte for a Timestamp */
#define TOKEN_BYTES 10
#define TOKEN_HEX_LENGTH (TOKEN_BYTES * 2)
#define TOKEN_INDEXED_BYTES (TOKEN_BYTES + 4)
#define TOKEN_INDEXED_HEX_LENGTH (TOKEN_INDEXED_BYTES * 2)

/* --- tokens ------------------------------------------------------------------- */

int change_token_compare(const change_token_t *left, const change_token_t *right)
{
    if (left->time != right->time) {
        return left->time < right->time ? -1 : 1;
    }
    if (left->kind != right->kind) {
        return left->kind < right->kind ? -1 : 1;
    }
    if (left->index != right->index) {
        return left->index < right->index ? -1 : 1;
    }
    return 0;
}

void change_token_append(bson_t *out, const char *key, const change_token_t *token)
{
    static const char digits[] = "0123456789ABCDEF";
    uint8_t bytes[TOKEN_INDEXED_BYTES];
    char hex[TOKEN_INDEXED_HEX_LENGTH + 1];
    int length = token->index != 0 ? TOKEN_INDEXED_BYTES : TOKEN_BYTES;
    bytes[0] = TOKEN_MARKER;
    for (int i = 0; i < 8; i++) {
        bytes[1 + i] = (uint8_t)(token->time >> (56 - 8 * i));
    }
    bytes[9] = (uint8_t)token->kind;
    for (int i = 0; i < 4; i++) {
        bytes[TOKEN_BYTES + i] = (uint8_t)(token->index >> (24 - 8 * i));
    }
    for (int i = 0; i < length; i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 0x0f];
    }
    hex[2 * length] = '\0';
    bson_t document;
    bson_append_document_begin(out, key, -1, &document);
    BSON_APPEND_UTF8(&document, "_data", hex);
    bson_append_document_end(out, &document);
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

bool change_token_parse(const bson_t *document, change_token_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, document, "_data") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        char *json = bson_as_relaxed_extended_json(document, NULL);
        tc_error_set(error, TC_ERR_BAD_RESUME_TOKEN_DATA,
                     "Bad resume token: _data of missing or of wrong type. Expected string, got %s",
                     json ? json : "?");
        bson_free(json);
        return false;
    }
    uint32_t length;
    const char *hex = bson_iter_utf8(&iter, &length);
    uint8_t bytes[TOKEN_INDEXED_BYTES];
    if (length % 2 != 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "resume token string was not a valid hex string");
    }
    for (uint32_t i = 0; i < length; i++) {
        if (hex_value(hex[i]) < 0) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "resume token string was not a valid hex string");
        }
    }
    if (length != TOKEN_HEX_LENGTH && length != TOKEN_INDEXED_HEX_LENGTH) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "resume token '%s' was not issued by thermocline store: its tokens are %d or %d hex "
                            "digits",
                            hex, TOKEN_HEX_LENGTH, TOKEN_INDEXED_HEX_LENGTH);
    }
    for (uint32_t i = 0; i < length / 2; i++) {
        bytes[i] = (uint8_t)(hex_value(hex[2 * i]) << 4 | hex_value(hex[2 * i + 1]));
    }
    uint8_t kind = bytes[9];
    uint32_t index = 0;
    if (length == TOKEN_INDEXED_HEX_LENGTH) {
        for (int i = 0; i < 4; i++) {
            index = index << 8 | bytes[TOKEN_BYTES + i];
        }
    }
    bool indexed_event = length == TOKEN_INDEXED_HEX_LENGTH && kind == CHANGE_TOKEN_EVENT && index != 0;
    if (bytes[0] != TOKEN_MARKER || (length == TOKEN_INDEXED_HEX_LENGTH && !indexed_event) ||
        (kind != CHANGE_TOKEN_START && kind != CHANGE_TOKEN_EVENT && kind != CHANGE_TOKEN_INVALIDATE &&
         kind != CHANGE_TOKEN_HIGH_WATER_MARK)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "resume token '%s' was not issued by thermocline store",
                            hex);
    }
    out->time = 0;
    for (int i = 0; i < 8; i++) {
        out->time = out->time << 8 | bytes[1 + i];
    }
    out->kind = (change_token_kind_t)kind;
    out->index = index;
    return true;
}

/* --- scope ------------------------------------------------------------------- */

bool change_event_internal_database(const char *database)
{
    return strcmp(database, "admin") == 0 || strcmp(database, "config") == 0 || strcmp(database, "local") == 0;
}

/* Splits "db.coll" into database (copied into buffer) and collection (a pointer
 * into ns). False when ns has no dot or the database name is too long. */
static bool split_namespace(const char *ns, char *database, size_t database_size, const char **out_collection)
{
    const char *dot = strchr(ns, '.');
    if (dot == NULL || (size_t)(dot - ns) >= database_size) {
        return false;
    }
    memcpy(database, ns, (size_t)(dot - ns));
    database[dot - ns] = '\0';
    *out_collection = dot + 1;
    return true;
}

static bool database_in_scope(const change_spec_t *spec, const char *database)
{
    if (spec->scope == CHANGE_SCOPE_CLUSTER) {
        return !change_event_internal_database(database);
    }
    return strcmp(database, spec->database) == 0;
}

static bool namespace_in_scope(const change_spec_t *spec, const char *database, const char *collection)
{
    /* Streams never show system collections (mongod's showSystemEvents is off). */
    if (strncmp(collection, "system.", 7) == 0 || !database_in_scope(spec, database)) {
        return false;
    }
    return spec->scope != CHANGE_SCOPE_COLLECTION || strcmp(collection, spec->collection) == 0;
}

static bool full_namespace_in_scope(const change_spec_t *spec, const char *ns)
{
    char database[128];
    const char *collection;
    return split_namespace(ns, database, sizeof database, &collection) &&
           namespace_in_scope(spec, database, collection);
}

/* --- building ------------------------------------------------------------------ */

/* One operation: a whole entry, or one operation of a transaction's applyOps. */
typedef struct entry_view {
    const char *op;
    const char *ns;
    bson_t object;  /* o */
    bson_t object2; /* o2, empty when absent */
    bool has_object2;
    const bson_t *operation;   /* the document with op, o, o2 and the images */
    const bson_t *transaction; /* the applyOps entry it belongs to (lsid, txnNumber), or NULL */
    uint32_t index;            /* its place in that entry */
} entry_view_t;

static bool get_document(const bson_t *document, const char *field, bson_t *out)
{
    bson_iter_t iter;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, document, field) || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return false;
    }
    bson_iter_document(&iter, &length, &data);
    return bson_init_static(out, data, length);
}

static const char *get_string(const bson_t *document, const char *field)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, document, field) || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return NULL;
    }
    return bson_iter_utf8(&iter, NULL);
}

/* Reads op, ns, o and o2 of operation; false when op, ns or o is missing. */
static bool view_operation(const bson_t *operation, entry_view_t *view)
{
    view->operation = operation;
    view->op = get_string(operation, "op");
    view->ns = get_string(operation, "ns");
    if (view->op == NULL || view->ns == NULL || !get_document(operation, "o", &view->object)) {
        return false;
    }
    view->has_object2 = get_document(operation, "o2", &view->object2);
    if (!view->has_object2) {
        bson_init(&view->object2);
    }
    return true;
}

/* A new empty event at the end of out and its token to fill; count counts it
 * only once the caller keeps it (the caller destroys it otherwise). */
static bson_t *reserve_event(change_events_t *out, change_token_t **out_token)
{
    if (out->count == out->capacity) {
        out->capacity = out->capacity ? out->capacity * 2 : 2;
        out->documents = bson_realloc(out->documents, out->capacity * sizeof(bson_t *));
        out->tokens = bson_realloc(out->tokens, out->capacity * sizeof(change_token_t));
    }
    *out_token = &out->tokens[out->count];
    out->documents[out->count] = bson_new();
    return out->documents[out->count];
}

static void append_namespace(bson_t *event, const char *key, const char *database, const char *collection)
{
    bson_t ns;
    bson_append_document_begin(event, key, -1, &ns);
    BSON_APPEND_UTF8(&ns, "db", database);
    if (collection != NULL) {
        BSON_APPEND_UTF8(&ns, "coll", collection);
    }
    bson_append_document_end(event, &ns);
}

static void append_full_namespace(bson_t *event, const char *key, const char *ns)
{
    char database[128];
    const char *collection;
    if (split_namespace(ns, database, sizeof database, &collection)) {
        append_namespace(event, key, database, collection);
    }
}

/* _id, operationType, clusterTime, collectionUUID (expanded events only, and
 * only when the operation names its collection: a dropDatabase does not),
 * wallTime: the head every event shares, in mongod's order. */
static void begin_event(bson_t *event, const bson_t *entry, const bson_t *operation, uint64_t time,
                        const change_token_t *token, const char *operation_type, const change_spec_t *spec)
{
    bson_iter_t iter;
    change_token_append(event, "_id", token);
    BSON_APPEND_UTF8(event, "operationType", operation_type);
    BSON_APPEND_TIMESTAMP(event, "clusterTime", (uint32_t)(time >> 32), (uint32_t)time);
    if (spec->show_expanded_events && operation != NULL && bson_iter_init_find(&iter, operation, "ui") &&
        BSON_ITER_HOLDS_BINARY(&iter)) {
        bson_append_iter(event, "collectionUUID", -1, &iter);
    }
    if (bson_iter_init_find(&iter, entry, "wall") && BSON_ITER_HOLDS_DATE_TIME(&iter)) {
        bson_append_iter(event, "wallTime", -1, &iter);
    }
}

static void describe_event_for_error(const char *ns, const bson_t *document_key, char *out, size_t size)
{
    char *key = bson_as_relaxed_extended_json(document_key, NULL);
    snprintf(out, size, "{ns: \"%s\", documentKey: %s}", ns, key ? key : "{}");
    bson_free(key);
}

/* fullDocument of an update event, per the stream's fullDocument mode. */
static bool append_update_post_image(bson_t *event, const entry_view_t *view, const change_spec_t *spec,
                                     change_lookup_fn lookup, void *lookup_context, bson_error_t *error)
{
    bson_t image;
    switch (spec->full_document) {
    case CHANGE_FULL_DOCUMENT_DEFAULT:
        return true;
    case CHANGE_FULL_DOCUMENT_UPDATE_LOOKUP: {
        bool found = false;
        if (lookup == NULL || !lookup(lookup_context, view->ns, &view->object2, &image, &found, error)) {
            return lookup == NULL ? tc_error_set(error, TC_ERR_INTERNAL, "updateLookup without a lookup") : false;
        }
        if (found) {
            BSON_APPEND_DOCUMENT(event, "fullDocument", &image);
            bson_destroy(&image);
        } else {
            BSON_APPEND_NULL(event, "fullDocument");
        }
        return true;
    }
    case CHANGE_FULL_DOCUMENT_WHEN_AVAILABLE:
    case CHANGE_FULL_DOCUMENT_REQUIRED:
        if (get_document(view->operation, "postImage", &image)) {
            BSON_APPEND_DOCUMENT(event, "fullDocument", &image);
            return true;
        }
        if (spec->full_document == CHANGE_FULL_DOCUMENT_REQUIRED) {
            char described[512];
            describe_event_for_error(view->ns, &view->object2, described, sizeof described);
            return tc_error_set(error, TC_ERR_NO_MATCHING_DOCUMENT,
                                "Change stream was configured to require a post-image for all update events, "
                                "but the post-image was not found for event: %s",
                                described);
        }
        BSON_APPEND_NULL(event, "fullDocument");
        return true;
    }
    return true;
}

static bool append_pre_image(bson_t *event, const entry_view_t *view, const bson_t *document_key,
                             const change_spec_t *spec, bson_error_t *error)
{
    bson_t image;
    if (spec->full_document_before_change == CHANGE_BEFORE_CHANGE_OFF) {
        return true;
    }
    if (get_document(view->operation, "preImage", &image)) {
        BSON_APPEND_DOCUMENT(event, "fullDocumentBeforeChange", &image);
        return true;
    }
    if (spec->full_document_before_change == CHANGE_BEFORE_CHANGE_REQUIRED) {
        char described[512];
        describe_event_for_error(view->ns, document_key, described, sizeof described);
        return tc_error_set(error, TC_ERR_NO_MATCHING_DOCUMENT,
                            "Change stream was configured to require a pre-image for all update, delete and "
                            "replace events, but the pre-image was not found for event: %s",
                            described);
    }
    BSON_APPEND_NULL(event, "fullDocumentBeforeChange");
    return true;
}

static void append_transaction_fields(bson_t *event, const bson_t *transaction)
{
    bson_iter_t iter;
    if (transaction == NULL) {
        return;
    }
    if (bson_iter_init_find(&iter, transaction, "lsid")) {
        bson_append_iter(event, "lsid", 4, &iter);
    }
    if (bson_iter_init_find(&iter, transaction, "txnNumber")) {
        bson_append_iter(event, "txnNumber", 9, &iter);
    }
}

/* insert, update, replace and delete; entry is the oplog entry (its wall time). */
static bool build_document_event(const bson_t *entry, uint64_t time, const entry_view_t *view,
                                 const change_spec_t *spec, change_lookup_fn lookup, void *lookup_context,
                                 change_events_t *out, bson_error_t *error)
{
    change_token_t *token;
    bson_t *event = reserve_event(out, &token);
    bson_t update_description;
    bool is_update = false;
    const char *operation_type;
    const bson_t *document_key;
    bson_t id_only;

    *token = (change_token_t){.time = time, .kind = CHANGE_TOKEN_EVENT, .index = view->index};
    if (strcmp(view->op, "i") == 0) {
        operation_type = "insert";
        document_key = &view->object2;
    } else if (strcmp(view->op, "d") == 0) {
        operation_type = "delete";
        document_key = &view->object;
    } else {
        bson_iter_t version;
        is_update = bson_iter_init_find(&version, &view->object, "$v") &&
                    get_document(&view->object, "updateDescription", &update_description);
        operation_type = is_update ? "update" : "replace";
        document_key = &view->object2;
    }
    if (!view->has_object2 && strcmp(view->op, "d") != 0) {
        /* An entry without o2: the key is the full document's _id. */
        bson_iter_t id;
        bson_init(&id_only);
        if (bson_iter_init_find(&id, &view->object, "_id")) {
            bson_append_iter(&id_only, "_id", 3, &id);
        }
        document_key = &id_only;
    } else {
        bson_init(&id_only);
    }

    begin_event(event, entry, view->operation, time, token, operation_type, spec);
    bool ok = true;
    if (strcmp(view->op, "i") == 0 || (strcmp(view->op, "u") == 0 && !is_update)) {
        BSON_APPEND_DOCUMENT(event, "fullDocument", &view->object);
    } else if (is_update) {
        ok = append_update_post_image(event, view, spec, lookup, lookup_context, error);
    }
    if (ok) {
        append_full_namespace(event, "ns", view->ns);
        BSON_APPEND_DOCUMENT(event, "documentKey", document_key);
        if (is_update) {
            BSON_APPEND_DOCUMENT(event, "updateDescription", &update_description);
        }
        append_transaction_fields(event, view->transaction);
        if (strcmp(view->op, "i") != 0) {
            ok = append_pre_image(event, view, document_key, spec, error);
        }
    }
    bson_destroy(&id_only);
    if (ok) {
        out->count++;
    } else {
        bson_destroy(event);
    }
    return ok;
}

static bool is_document_operation(const char *op)
{
    return strcmp(op, "i") == 0 || strcmp(op, "u") == 0 || strcmp(op, "d") == 0;
}

static bson_t *add_command_event(change_events_t *out, const bson_t *entry, const bson_t *operation, uint64_t time,
                                 change_token_kind_t kind, const char *operation_type, const change_spec_t *spec)
{
    change_token_t *token;
    bson_t *event = reserve_event(out, &token);
    *token = (change_token_t){.time = time, .kind = kind};
    begin_event(event, entry, operation, time, token, operation_type, spec);
    out->count++;
    return event;
}

/* document without the fields named in skipped (NULL-ended). */
static void append_except(bson_t *out, const bson_t *document, const char *const *skipped)
{
    bson_iter_t iter;
    bson_iter_init(&iter, document);
    while (bson_iter_next(&iter)) {
        bool skip = false;
        for (const char *const *name = skipped; *name != NULL && !skip; name++) {
            skip = strcmp(*name, bson_iter_key(&iter)) == 0;
        }
        if (!skip) {
            bson_append_iter(out, bson_iter_key(&iter), -1, &iter);
        }
    }
}

/* operationDescription: {indexes: [spec without the command's own field]}, as
 * mongod wraps the one index of a createIndexes or dropIndexes entry. */
static void append_index_description(bson_t *event, const bson_t *spec, const char *command)
{
    const char *skipped[] = {command, NULL};
    bson_t description, indexes, index;
    BSON_APPEND_DOCUMENT_BEGIN(event, "operationDescription", &description);
    BSON_APPEND_ARRAY_BEGIN(&description, "indexes", &indexes);
    BSON_APPEND_DOCUMENT_BEGIN(&indexes, "0", &index);
    append_except(&index, spec, skipped);
    bson_append_document_end(&indexes, &index);
    bson_append_array_end(&description, &indexes);
    bson_append_document_end(event, &description);
}

/* The DDL events only expanded streams see: create, createIndexes, dropIndexes
 * and modify (collMod), each with its operationDescription as mongod 6.0
 * builds it from the entry (o without the command's field; the index specs
 * wrapped in indexes: [...]; a modify's options before it in
 * stateBeforeChange). False when object is none of them. */
static bool build_expanded_command_event(const bson_t *entry, uint64_t time, const entry_view_t *view,
                                         const change_spec_t *spec, const char *database, change_events_t *out)
{
    static const char *const commands[] = {"create", "createIndexes", "dropIndexes", "collMod", NULL};
    static const char *const event_types[] = {"create", "createIndexes", "dropIndexes", "modify"};
    const char *collection = NULL;
    size_t which = 0;
    for (; commands[which] != NULL && collection == NULL; which++) {
        collection = get_string(&view->object, commands[which]);
    }
    if (collection == NULL) {
        return false;
    }
    which--;
    if (!spec->show_expanded_events || !namespace_in_scope(spec, database, collection)) {
        return true;
    }
    const char *skipped[] = {commands[which], NULL};
    bson_t *event = add_command_event(out, entry, view->operation, time, CHANGE_TOKEN_EVENT, event_types[which], spec);
    append_namespace(event, "ns", database, collection);
    if (strcmp(commands[which], "createIndexes") == 0) {
        append_index_description(event, &view->object, commands[which]);
    } else if (strcmp(commands[which], "dropIndexes") == 0) {
        append_index_description(event, &view->object2, commands[which]);
    } else {
        bson_t description;
        BSON_APPEND_DOCUMENT_BEGIN(event, "operationDescription", &description);
        append_except(&description, &view->object, skipped);
        bson_append_document_end(event, &description);
    }
    if (strcmp(commands[which], "collMod") == 0) {
        bson_t before, old_options;
        BSON_APPEND_DOCUMENT_BEGIN(event, "stateBeforeChange", &before);
        if (get_document(&view->object2, "collectionOptions_old", &old_options)) {
            BSON_APPEND_DOCUMENT(&before, "collectionOptions", &old_options);
        }
        if (get_document(&view->object2, "indexOptions_old", &old_options)) {
            BSON_APPEND_DOCUMENT(&before, "indexOptions", &old_options);
        }
        bson_append_document_end(event, &before);
    }
    return true;
}

/* An expanded rename's operationDescription: o without renameCollection and
 * stayTemp, its to as {db, coll}. */
static void append_rename_description(bson_t *event, const bson_t *object, const char *target)
{
    bson_t description;
    bson_iter_t iter;
    BSON_APPEND_DOCUMENT_BEGIN(event, "operationDescription", &description);
    bson_iter_init(&iter, object);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "to") == 0) {
            append_full_namespace(&description, "to", target);
        } else if (strcmp(key, "renameCollection") != 0 && strcmp(key, "stayTemp") != 0) {
            bson_append_iter(&description, key, -1, &iter);
        }
    }
    bson_append_document_end(event, &description);
}

/* drop, renameCollection and dropDatabase, and for expanded streams the other
 * DDL; other commands give no event. */
static void build_command_events(const bson_t *entry, uint64_t time, const entry_view_t *view,
                                 const change_spec_t *spec, change_events_t *out)
{
    char database[128];
    const char *command_collection;
    if (!split_namespace(view->ns, database, sizeof database, &command_collection)) {
        return;
    }
    const char *dropped = get_string(&view->object, "drop");
    const char *renamed = get_string(&view->object, "renameCollection");
    bson_iter_t iter;
    bool invalidates = false;
    bson_t *event;

    if (dropped != NULL) {
        if (!namespace_in_scope(spec, database, dropped)) {
            return;
        }
        event = add_command_event(out, entry, view->operation, time, CHANGE_TOKEN_EVENT, "drop", spec);
        append_namespace(event, "ns", database, dropped);
        invalidates = spec->scope == CHANGE_SCOPE_COLLECTION;
    } else if (renamed != NULL) {
        const char *target = get_string(&view->object, "to");
        if (target == NULL ||
            (!full_namespace_in_scope(spec, renamed) && !full_namespace_in_scope(spec, target))) {
            return;
        }
        event = add_command_event(out, entry, view->operation, time, CHANGE_TOKEN_EVENT, "rename", spec);
        append_full_namespace(event, "ns", renamed);
        append_full_namespace(event, "to", target);
        if (spec->show_expanded_events) {
            append_rename_description(event, &view->object, target);
        }
        invalidates = spec->scope == CHANGE_SCOPE_COLLECTION;
    } else if (bson_iter_init_find(&iter, &view->object, "dropDatabase")) {
        if (!database_in_scope(spec, database)) {
            return;
        }
        event = add_command_event(out, entry, view->operation, time, CHANGE_TOKEN_EVENT, "dropDatabase", spec);
        append_namespace(event, "ns", database, NULL);
        invalidates = spec->scope != CHANGE_SCOPE_CLUSTER;
    } else {
        build_expanded_command_event(entry, time, view, spec, database, out);
        return;
    }
    if (invalidates) {
        /* mongod's invalidate carries no collectionUUID. */
        add_command_event(out, entry, NULL, time, CHANGE_TOKEN_INVALIDATE, "invalidate", spec);
    }
}

/* A transaction's entry: one event per operation in scope, in order. */
static bool build_transaction_events(const bson_t *entry, uint64_t time, const bson_iter_t *operations,
                                     const change_spec_t *spec, change_lookup_fn lookup, void *lookup_context,
                                     change_events_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    uint32_t index = 0;
    bson_iter_recurse(operations, &iter);
    for (; bson_iter_next(&iter); index++) {
        bson_t operation;
        entry_view_t view = {0};
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&operation, data, length);
        if (!view_operation(&operation, &view)) {
            return tc_error_set(error, TC_ERR_INTERNAL, "operation %u of the oplog entry at %u.%u has no op, ns or o",
                                index, (uint32_t)(time >> 32), (uint32_t)time);
        }
        view.transaction = entry;
        view.index = index;
        if (!is_document_operation(view.op) || !full_namespace_in_scope(spec, view.ns)) {
            continue;
        }
        if (!build_document_event(entry, time, &view, spec, lookup, lookup_context, out, error)) {
            return false;
        }
    }
    return true;
}

bool change_events_build(const bson_t *entry, uint64_t time, const change_spec_t *spec, change_lookup_fn lookup,
                         void *lookup_context, change_events_t *out, bson_error_t *error)
{
    entry_view_t view = {0};
    memset(out, 0, sizeof *out);
    const char *op = get_string(entry, "op");
    if (op != NULL && strcmp(op, "n") == 0) {
        return true;
    }
    if (!view_operation(entry, &view)) {
        return tc_error_set(error, TC_ERR_INTERNAL, "the oplog entry at %u.%u has no op, ns or o",
                            (uint32_t)(time >> 32), (uint32_t)time);
    }
    if (strcmp(view.op, "c") == 0) {
        bson_iter_t operations;
        if (bson_iter_init_find(&operations, &view.object, "applyOps") && BSON_ITER_HOLDS_ARRAY(&operations)) {
            return build_transaction_events(entry, time, &operations, spec, lookup, lookup_context, out, error);
        }
        build_command_events(entry, time, &view, spec, out);
        return true;
    }
    if (!is_document_operation(view.op) || !full_namespace_in_scope(spec, view.ns)) {
        return true;
    }
    return build_document_event(entry, time, &view, spec, lookup, lookup_context, out, error);
}

void change_events_cleanup(change_events_t *events)
{
    for (size_t i = 0; i < events->count; i++) {
        bson_destroy(events->documents[i]);
    }
    bson_free(events->documents);
    bson_free(events->tokens);
    memset(events, 0, sizeof *events);
}
