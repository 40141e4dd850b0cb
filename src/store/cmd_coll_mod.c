/* collMod, as mongod 6.0 runs it on a collection (coll_mod.idl, coll_mod.cpp):
 *
 *   changeStreamPreAndPostImages: {enabled: bool}   recorded in the catalog's
 *       options (listCollections shows it while enabled); from then on each
 *       update and delete keeps its images for change streams (oplog.c);
 *   index: {name | keyPattern, hidden}   the index's spec (listIndexes),
 *       hidden taking it out of the planner's choices;
 *   validator, validationLevel, validationAction   checked (validation.h) and
 *       recorded in the options, as create records them; every later write
 *       is validated under them.
 *
 *   index: {name | keyPattern, expireAfterSeconds}   a TTL index's expiry
 *       changed, or a one-field index made a TTL index (ttl_monitor.h runs them).
 *
 * What the store cannot honour is refused, never silently kept: time series,
 * capped sizes, collection-level expireAfterSeconds, an index made unique. The change is one transaction with its {collMod: ...} oplog entry,
 * whose o2 holds the options before it (a change stream's expanded "modify"
 * event shows both). A view's collMod (viewOn, pipeline) is views.c's. */
#include "store/commands.h"
#include "store/validation.h"
#include "query/value_format.h"
#include "store/transactions.h"

#include <string.h>

/* --- changeStreamPreAndPostImages (create takes it too) --------------------------- */

bool command_parse_pre_and_post_images(const char *command_name, bson_iter_t *iter, bool *out_enabled,
                                       bson_error_t *error)
{
    bson_iter_t field;
    bool has_enabled = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '%s.changeStreamPreAndPostImages' is the wrong type '%s', expected type "
                            "'object'",
                            command_name, value_type_name(bson_iter_type(iter)));
    }
    bson_iter_recurse(iter, &field);
    while (bson_iter_next(&field)) {
        if (strcmp(bson_iter_key(&field), "enabled") != 0) {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD,
                                "BSON field '%s.changeStreamPreAndPostImages.%s' is an unknown field.", command_name,
                                bson_iter_key(&field));
        }
        if (!BSON_ITER_HOLDS_BOOL(&field)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "BSON field '%s.changeStreamPreAndPostImages.enabled' is the wrong type '%s', "
                                "expected type 'bool'",
                                command_name, value_type_name(bson_iter_type(&field)));
        }
        *out_enabled = bson_iter_bool(&field);
        has_enabled = true;
    }
    if (!has_enabled) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                            "BSON field '%s.changeStreamPreAndPostImages.enabled' is missing but a required field",
                            command_name);
    }
    return true;
}

/* --- the request ------------------------------------------------------------------ */

typedef struct coll_mod_request {
    const char *ns;
    bool has_images;
    bool images_enabled;
    bool has_index;
    bson_t index; /* a view of the index: {...} argument */
    bson_t recorded; /* validator, validationLevel, validationAction: copied into the options */
} coll_mod_request_t;

static bool refuse(const coll_mod_request_t *request, const char *what, bson_error_t *error)
{
    return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                        "thermocline store does not support %s; collMod of %s changed nothing", what,
                        request->ns);
}

/* One field of the command; false (error filled) when it is refused. */
static bool parse_field(coll_mod_request_t *request, bson_iter_t *iter, bson_error_t *error)
{
    const char *field = bson_iter_key(iter);
    if (strcmp(field, "changeStreamPreAndPostImages") == 0) {
        request->has_images = true;
        return command_parse_pre_and_post_images("collMod", iter, &request->images_enabled, error);
    }
    if (strcmp(field, "index") == 0) {
        if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "BSON field 'collMod.index' is the wrong type '%s', expected type 'object'",
                                value_type_name(bson_iter_type(iter)));
        }
        const bson_value_t *value = bson_iter_value(iter);
        request->has_index = bson_init_static(&request->index, value->value.v_doc.data, value->value.v_doc.data_len);
        return true;
    }
    if (strcmp(field, "validator") == 0 || strcmp(field, "validationLevel") == 0 ||
        strcmp(field, "validationAction") == 0) {
        if (!validation_check_option("collMod", iter, error)) {
            return false;
        }
    } else if (strcmp(field, "viewOn") == 0 || strcmp(field, "pipeline") == 0) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "'viewOn' and 'pipeline' are only valid for a view, and %s "
                            "is not one", request->ns);
    } else if (strcmp(field, "timeseries") == 0) {
        return refuse(request, "time series collections yet", error);
    } else if (strcmp(field, "expireAfterSeconds") == 0) {
        return refuse(request, "collection-level expireAfterSeconds yet", error);
    } else if (strcmp(field, "cappedSize") == 0 || strcmp(field, "cappedMax") == 0) {
        return refuse(request, "capped collections yet", error);
    } else if (strcmp(field, "recordPreImages") == 0) {
        return refuse(request, "recordPreImages (removed in MongoDB 6.0): use changeStreamPreAndPostImages", error);
    } else if (strcmp(field, "dryRun") == 0) {
        return !bson_iter_as_bool(iter) || refuse(request, "collMod's dryRun (a unique conversion) yet", error);
    } else {
        return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field 'collMod.%s' is an unknown field.",
                            field);
    }
    bson_append_iter(&request->recorded, field, -1, iter);
    return true;
}

/* --- the index -------------------------------------------------------------------- */

typedef struct index_change {
    index_descriptor_t *index;
    bool has_hidden;
    bool hidden;
    bool has_expire;         /* a TTL set, changed, or given to a one-field index */
    int64_t expire_seconds;
} index_change_t;

static bool parse_index_request(const coll_mod_request_t *request, collection_t *collection, index_change_t *out,
                                bson_error_t *error)
{
    bson_iter_t iter;
    const char *name = NULL;
    bson_t key_pattern;
    bool has_key_pattern = false;
    memset(out, 0, sizeof *out);
    bson_iter_init(&iter, &request->index);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (strcmp(field, "name") == 0 && BSON_ITER_HOLDS_UTF8(&iter)) {
            name = bson_iter_utf8(&iter, NULL);
        } else if (strcmp(field, "keyPattern") == 0 && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            const bson_value_t *value = bson_iter_value(&iter);
            has_key_pattern = bson_init_static(&key_pattern, value->value.v_doc.data, value->value.v_doc.data_len);
        } else if (strcmp(field, "hidden") == 0 && BSON_ITER_HOLDS_BOOL(&iter)) {
            out->has_hidden = true;
            out->hidden = bson_iter_bool(&iter);
        } else if (strcmp(field, "expireAfterSeconds") == 0 && BSON_ITER_HOLDS_NUMBER(&iter)) {
            out->has_expire = true;
            out->expire_seconds = bson_iter_as_int64(&iter);
            if (out->expire_seconds < 0 || out->expire_seconds > INT32_MAX) {
                return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                                    "TTL index 'expireAfterSeconds' option must be within an acceptable range, try "
                                    "a lower number");
            }
        } else if (strcmp(field, "unique") == 0 || strcmp(field, "prepareUnique") == 0 ||
                   strcmp(field, "forceNonUnique") == 0) {
            return refuse(request, "converting an index to or from unique yet", error);
        } else {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD,
                                "BSON field 'collMod.index.%s' is an unknown field or has the wrong type.", field);
        }
    }
    if (name != NULL && has_key_pattern) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "Cannot specify both key pattern and name.");
    }
    if (name == NULL && !has_key_pattern) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "Must specify either index name or key pattern.");
    }
    if (!out->has_hidden && !out->has_expire) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "no expireAfterSeconds or hidden field");
    }
    for (size_t i = 0; i < collection->index_count && out->index == NULL; i++) {
        index_descriptor_t *index = collection->indexes[i];
        if (name != NULL ? strcmp(index->name, name) == 0 : bson_equal(&index->key_pattern, &key_pattern)) {
            out->index = index;
        }
    }
    if (out->index == NULL) {
        char *described = name != NULL ? bson_strdup(name) : bson_as_relaxed_extended_json(&key_pattern, NULL);
        tc_error_set(error, TC_ERR_INDEX_NOT_FOUND, "cannot find index %s for ns %s", described, request->ns);
        bson_free(described);
        return false;
    }
    if (out->has_hidden && out->index->is_id) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "can't hide _id index");
    }
    if (out->has_expire && (out->index->is_id || bson_count_keys(&out->index->key_pattern) != 1)) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                            "TTL indexes are single-field indexes, compound indexes do not support TTL (and _id "
                            "does not): index %s", out->index->name);
    }
    return true;
}

/* The index's new spec (mongod keeps hidden: true and drops the field when
 * unhidden; a TTL's new expireAfterSeconds), the reply's hidden_old/hidden_new and
 * expireAfterSeconds_old/expireAfterSeconds_new (when they change), the oplog's
 * index argument (by name, as mongod normalizes a key pattern) and its
 * indexOptions_old. */
static void build_index_change(const index_change_t *change, bson_t *spec, bson_t *reply, bson_t *logged,
                               bson_t *old_options)
{
    const index_descriptor_t *index = change->index;
    bson_iter_t iter;
    bool hidden = change->has_hidden ? change->hidden : index->hidden;
    int64_t old_seconds = 0;
    bool had_ttl = bson_iter_init_find(&iter, &index->spec, "expireAfterSeconds") && BSON_ITER_HOLDS_NUMBER(&iter);
    if (had_ttl) {
        old_seconds = bson_iter_as_int64(&iter);
    }
    bson_iter_init(&iter, &index->spec);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (strcmp(field, "hidden") != 0 && !(change->has_expire && strcmp(field, "expireAfterSeconds") == 0)) {
            bson_append_iter(spec, field, -1, &iter);
        }
    }
    if (change->has_expire) {
        BSON_APPEND_INT64(spec, "expireAfterSeconds", change->expire_seconds);
    }
    if (hidden) {
        BSON_APPEND_BOOL(spec, "hidden", true);
    }
    BSON_APPEND_UTF8(logged, "name", index->name);
    if (change->has_hidden) {
        BSON_APPEND_BOOL(logged, "hidden", change->hidden);
        BSON_APPEND_BOOL(old_options, "hidden", index->hidden);
        if (index->hidden != change->hidden) {
            BSON_APPEND_BOOL(reply, "hidden_old", index->hidden);
            BSON_APPEND_BOOL(reply, "hidden_new", change->hidden);
        }
    }
    if (change->has_expire) {
        BSON_APPEND_INT64(logged, "expireAfterSeconds", change->expire_seconds);
        if (had_ttl) {
            BSON_APPEND_INT64(old_options, "expireAfterSeconds", old_seconds);
        }
        if (!had_ttl || old_seconds != change->expire_seconds) {
            if (had_ttl) {
                BSON_APPEND_INT64(reply, "expireAfterSeconds_old", old_seconds);
            }
            BSON_APPEND_INT64(reply, "expireAfterSeconds_new", change->expire_seconds);
        }
    }
}

/* --- the command ------------------------------------------------------------------- */

/* The collection's options after the change: the recorded fields replaced,
 * changeStreamPreAndPostImages present only while enabled, as listCollections
 * shows it on mongod. */
static void build_options(const collection_t *collection, const coll_mod_request_t *request, bson_t *out)
{
    bson_iter_t iter;
    bson_iter_init(&iter, &collection->options);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        bool replaced = bson_has_field(&request->recorded, field) ||
                        (request->has_images && strcmp(field, "changeStreamPreAndPostImages") == 0);
        if (!replaced) {
            bson_append_iter(out, field, -1, &iter);
        }
    }
    bson_concat(out, &request->recorded);
    if (request->has_images && request->images_enabled) {
        bson_t images;
        BSON_APPEND_DOCUMENT_BEGIN(out, "changeStreamPreAndPostImages", &images);
        BSON_APPEND_BOOL(&images, "enabled", true);
        bson_append_document_end(out, &images);
    }
}

/* o: the command without its generic arguments, the index named; o2:
 * {collectionOptions_old: {uuid, ...}, indexOptions_old?}. */
static void build_oplog_entry(const command_context_t *context, const collection_t *collection,
                              const bson_t *logged_index, const bson_t *old_index_options, bson_t *object,
                              bson_t *object2)
{
    bson_iter_t iter;
    bson_t old_options;
    bson_iter_init(&iter, context->command);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (strcmp(field, "index") == 0) {
            BSON_APPEND_DOCUMENT(object, field, logged_index);
        } else if (!command_is_generic_argument(field)) {
            bson_append_iter(object, field, -1, &iter);
        }
    }
    BSON_APPEND_DOCUMENT_BEGIN(object2, "collectionOptions_old", &old_options);
    BSON_APPEND_BINARY(&old_options, "uuid", BSON_SUBTYPE_UUID, collection->uuid, 16);
    bson_concat(&old_options, &collection->options);
    bson_append_document_end(object2, &old_options);
    if (!bson_empty(old_index_options)) {
        BSON_APPEND_DOCUMENT(object2, "indexOptions_old", old_index_options);
    }
}

static bool handle_coll_mod(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    coll_mod_request_t request = {0};
    index_change_t change = {0};
    bson_t options = BSON_INITIALIZER, index_spec = BSON_INITIALIZER, logged_index = BSON_INITIALIZER;
    bson_t old_index_options = BSON_INITIALIZER, index_reply = BSON_INITIALIZER;
    bson_t object = BSON_INITIALIZER, object2 = BSON_INITIALIZER;
    char *ns = NULL;
    bson_iter_t iter;
    bool locked = false;
    bool ok = false;

    bson_init(&request.recorded);
    TC_CHECK(command_namespace(context, &ns, error));
    request.ns = ns;
    transaction_lock_ddl(context, ns, NULL);
    locked = true;
    view_t *view = storage_find_view(storage, ns);
    if (view != NULL) {
        ok = views_modify(context, view, error);
        goto done;
    }
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter); /* collMod: <collection> */
    while (bson_iter_next(&iter)) {
        if (!command_is_generic_argument(bson_iter_key(&iter))) {
            TC_CHECK(parse_field(&request, &iter, error));
        }
    }
    collection_t *collection = storage_find_collection(storage, ns);
    if (collection == NULL) {
        tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "ns does not exist: %s", ns);
        goto done;
    }
    if (request.has_index) {
        TC_CHECK(parse_index_request(&request, collection, &change, error));
        build_index_change(&change, &index_spec, &index_reply, &logged_index, &old_index_options);
    }
    build_options(collection, &request, &options);
    build_oplog_entry(context, collection, &logged_index, &old_index_options, &object, &object2);
    TC_CHECK(storage_modify_collection(context->session, collection, &options, change.index, &index_spec, &object,
                                       &object2, error));
    bson_concat(reply, &index_reply);
    ok = true;
done:
    if (locked) {
        transaction_unlock_ddl(context, ns, NULL);
    }
    bson_destroy(&request.recorded);
    bson_destroy(&options);
    bson_destroy(&index_spec);
    bson_destroy(&logged_index);
    bson_destroy(&old_index_options);
    bson_destroy(&index_reply);
    bson_destroy(&object);
    bson_destroy(&object2);
    bson_free(ns);
    return ok;
}

const command_definition_t coll_mod_commands[] = {
    {"collMod", handle_coll_mod},
    {NULL, NULL},
};
