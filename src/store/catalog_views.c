/* Views in the catalog: one row per view in the _catalog table, keyed by its
 * namespace like a collection's ({ns, viewOn, pipeline}, no table), and an
 * in-memory array sorted by namespace. mongod keeps the same definition as a
 * document of db.system.views; here the catalog row is the only copy, so the
 * definition and the name's existence change in one WiredTiger transaction
 * with their oplog entry. */
#include "store/storage_private.h"

#include <string.h>

static void view_destroy(view_t *view)
{
    if (view == NULL) {
        return;
    }
    bson_free(view->ns);
    bson_free(view->database);
    bson_free(view->view_on);
    bson_destroy(&view->pipeline);
    bson_free(view);
}

static view_t *view_new(const char *ns, const char *view_on, const bson_t *pipeline)
{
    view_t *view = BSON_ALIGNED_ALLOC0(view_t);
    view->ns = bson_strdup(ns);
    const char *dot = strchr(view->ns, '.');
    view->database = bson_strndup(view->ns, (size_t)(dot - view->ns));
    view->name = dot + 1;
    view->view_on = bson_strdup(view_on);
    bson_copy_to(pipeline, &view->pipeline);
    return view;
}

void catalog_destroy_views(storage_t *storage)
{
    for (size_t i = 0; i < storage->view_count; i++) {
        view_destroy(storage->views[i]);
    }
    bson_free(storage->views);
    storage->views = NULL;
    storage->view_count = 0;
}

static size_t find_view_slot(const storage_t *storage, const char *ns, bool *out_found)
{
    size_t slot = 0;
    *out_found = false;
    while (slot < storage->view_count) {
        int comparison = strcmp(storage->views[slot]->ns, ns);
        if (comparison >= 0) {
            *out_found = comparison == 0;
            break;
        }
        slot++;
    }
    return slot;
}

static void insert_in_memory(storage_t *storage, view_t *view)
{
    bool found;
    size_t slot = find_view_slot(storage, view->ns, &found);
    storage->views = bson_realloc(storage->views, (storage->view_count + 1) * sizeof(view_t *));
    memmove(&storage->views[slot + 1], &storage->views[slot], (storage->view_count - slot) * sizeof(view_t *));
    storage->views[slot] = view;
    storage->view_count++;
}

view_t *storage_find_view(storage_t *storage, const char *ns)
{
    bool found;
    size_t slot = find_view_slot(storage, ns, &found);
    return found ? storage->views[slot] : NULL;
}

void storage_visit_views(storage_t *storage, storage_visit_view_fn visit, void *context)
{
    for (size_t i = 0; i < storage->view_count; i++) {
        visit(storage->views[i], context);
    }
}

/* --- persistence ----------------------------------------------------------- */

bool catalog_entry_is_view(const bson_t *entry)
{
    return bson_has_field(entry, "viewOn");
}

bool catalog_load_view(storage_t *storage, const char *ns, const bson_t *entry, bson_error_t *error)
{
    bson_iter_t iter;
    const char *view_on = NULL;
    bson_t pipeline;
    if (bson_iter_init_find(&iter, entry, "viewOn") && BSON_ITER_HOLDS_UTF8(&iter)) {
        view_on = bson_iter_utf8(&iter, NULL);
    }
    if (view_on == NULL || !bson_iter_init_find(&iter, entry, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        return tc_error_set(error, TC_ERR_INTERNAL, "the catalog entry of the view %s is corrupt", ns);
    }
    const bson_value_t *value = bson_iter_value(&iter);
    bson_init_static(&pipeline, value->value.v_doc.data, value->value.v_doc.data_len);
    insert_in_memory(storage, view_new(ns, view_on, &pipeline));
    return true;
}

static bool write_view_entry(storage_session_t *session, void *pointer, bson_error_t *error)
{
    const view_t *view = pointer;
    bson_t entry = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&entry, "ns", view->ns);
    BSON_APPEND_UTF8(&entry, "viewOn", view->view_on);
    BSON_APPEND_ARRAY(&entry, "pipeline", &view->pipeline);
    bool ok = catalog_put_row(session, view->ns, &entry, error);
    bson_destroy(&entry);
    return ok;
}

static bool remove_view_entry(storage_session_t *session, void *ns, bson_error_t *error)
{
    return catalog_remove_entry(session, ns, error);
}

/* The oplog's {create: v, viewOn: c, pipeline}, mongod 6.0's entry for a view
 * (viewOn by collection name, as the command gives it). */
static void build_create_entry(const view_t *view, bson_t *object)
{
    const char *dot = strchr(view->view_on, '.');
    BSON_APPEND_UTF8(object, "create", view->name);
    BSON_APPEND_UTF8(object, "viewOn", dot != NULL ? dot + 1 : view->view_on);
    BSON_APPEND_ARRAY(object, "pipeline", &view->pipeline);
}

/* --- DDL -------------------------------------------------------------------- */

bool storage_create_view(storage_session_t *session, const char *ns, const char *view_on, const bson_t *pipeline,
                         bson_error_t *error)
{
    storage_t *storage = session->storage;
    if (!catalog_validate_namespace(ns, error)) {
        return false;
    }
    if (storage_find_collection(storage, ns) != NULL || storage_find_view(storage, ns) != NULL) {
        return tc_error_set(error, TC_ERR_NAMESPACE_EXISTS, "Collection %s already exists.", ns);
    }
    view_t *view = view_new(ns, view_on, pipeline);
    bson_t object = BSON_INITIALIZER;
    build_create_entry(view, &object);
    bool ok = catalog_change_with_oplog(session, write_view_entry, view, view->database, NULL, &object, NULL, error);
    bson_destroy(&object);
    if (!ok) {
        view_destroy(view);
        return false;
    }
    insert_in_memory(storage, view);
    return true;
}

bool storage_modify_view(storage_session_t *session, view_t *view, const char *view_on, const bson_t *pipeline,
                         const bson_t *object, bson_error_t *error)
{
    view_t *changed = view_new(view->ns, view_on, pipeline);
    bool ok = catalog_change_with_oplog(session, write_view_entry, changed, view->database, NULL, object, NULL,
                                        error);
    if (ok) {
        /* Swap the definitions: pointers to view stay valid. */
        char *old_view_on = view->view_on;
        view->view_on = changed->view_on;
        changed->view_on = old_view_on;
        bson_t old_pipeline;
        bson_steal(&old_pipeline, &view->pipeline);
        bson_steal(&view->pipeline, &changed->pipeline);
        bson_steal(&changed->pipeline, &old_pipeline);
    }
    view_destroy(changed);
    return ok;
}

bool storage_drop_view(storage_session_t *session, const char *ns, bson_error_t *error)
{
    storage_t *storage = session->storage;
    bool found;
    size_t slot = find_view_slot(storage, ns, &found);
    if (!found) {
        return tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND, "ns not found");
    }
    view_t *view = storage->views[slot];
    bson_t object = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&object, "drop", view->name);
    bool ok = catalog_change_with_oplog(session, remove_view_entry, view->ns, view->database, NULL, &object, NULL,
                                        error);
    bson_destroy(&object);
    if (!ok) {
        return false;
    }
    memmove(&storage->views[slot], &storage->views[slot + 1], (storage->view_count - slot - 1) * sizeof(view_t *));
    storage->view_count--;
    view_destroy(view);
    return true;
}
