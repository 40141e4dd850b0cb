/* Change events -> coalesced archive writes (feeder_batch.h). Documents are found
 * through a small open-addressing hash on (namespace, _id); two _id values are
 * one document when MongoDB's comparison says so (5, 5.0 and 5L). */
#include "tier/feeder_batch.h"

#include "common/timestamp.h"
#include "query/order.h"
#include "query/update.h"

#include <math.h>
#include <string.h>

typedef struct batch_document {
    size_t namespace_index;
    bson_value_t id;
    uint64_t hash;
    feeder_op_t **ops; /* each allocated alone: a bson_t must not move once it grew */
    size_t op_count;
    size_t op_capacity;
} batch_document_t;

struct feeder_batch {
    batch_document_t *documents;
    size_t document_count;
    size_t document_capacity;
    size_t *slots; /* document index + 1; 0: empty */
    size_t slot_count;
    feeder_op_t **finished;
    size_t finished_capacity;
    size_t event_count;
};

/* --- keys --------------------------------------------------------------------------- */

static uint64_t hash_bytes(uint64_t hash, const uint8_t *bytes, size_t length)
{
    for (size_t i = 0; i < length; i++) {
        hash = (hash ^ bytes[i]) * 1099511628211ull;
    }
    return hash;
}

/* Equal _id values (order_compare_values) hash alike: numbers by their double. */
static uint64_t hash_id(size_t namespace_index, const bson_value_t *id)
{
    uint64_t hash = hash_bytes(14695981039346656037ull, (const uint8_t *)&namespace_index, sizeof namespace_index);
    double number;
    switch (id->value_type) {
    case BSON_TYPE_INT32: number = id->value.v_int32; break;
    case BSON_TYPE_INT64: number = (double)id->value.v_int64; break;
    case BSON_TYPE_DOUBLE: number = id->value.v_double; break;
    case BSON_TYPE_DECIMAL128: return hash; /* rare: every decimal shares a chain */
    default: {
        bson_t holder = BSON_INITIALIZER;
        bson_append_value(&holder, "", 0, id);
        hash = hash_bytes(hash, bson_get_data(&holder), holder.len);
        bson_destroy(&holder);
        return hash;
    }
    }
    if (number == 0 || isnan(number)) {
        number = 0; /* -0.0 and 0 are one _id */
    }
    return hash_bytes(hash ^ 0x5a, (const uint8_t *)&number, sizeof number);
}

static void grow_slots(feeder_batch_t *batch)
{
    size_t count = batch->slot_count == 0 ? 256 : batch->slot_count * 2;
    bson_free(batch->slots);
    batch->slots = bson_malloc0(count * sizeof *batch->slots);
    batch->slot_count = count;
    for (size_t i = 0; i < batch->document_count; i++) {
        size_t slot = batch->documents[i].hash & (count - 1);
        while (batch->slots[slot] != 0) {
            slot = (slot + 1) & (count - 1);
        }
        batch->slots[slot] = i + 1;
    }
}

static batch_document_t *find_or_add_document(feeder_batch_t *batch, size_t namespace_index, const bson_value_t *id)
{
    if ((batch->document_count + 1) * 2 > batch->slot_count) {
        grow_slots(batch);
    }
    uint64_t hash = hash_id(namespace_index, id);
    size_t slot = hash & (batch->slot_count - 1);
    while (batch->slots[slot] != 0) {
        batch_document_t *document = &batch->documents[batch->slots[slot] - 1];
        if (document->hash == hash && document->namespace_index == namespace_index &&
            order_compare_values(&document->id, id) == 0) {
            return document;
        }
        slot = (slot + 1) & (batch->slot_count - 1);
    }
    if (batch->document_count == batch->document_capacity) {
        batch->document_capacity = batch->document_capacity == 0 ? 64 : batch->document_capacity * 2;
        batch->documents = bson_realloc(batch->documents, batch->document_capacity * sizeof *batch->documents);
    }
    batch_document_t *document = &batch->documents[batch->document_count];
    memset(document, 0, sizeof *document);
    document->namespace_index = namespace_index;
    document->hash = hash;
    bson_value_copy(id, &document->id);
    batch->slots[slot] = ++batch->document_count;
    return document;
}

/* --- writes of one document ------------------------------------------------------ */

static void op_cleanup(feeder_op_t *op)
{
    bson_destroy(&op->document);
    bson_destroy(&op->set_fields);
    bson_destroy(&op->unset_fields);
}

static void clear_ops(batch_document_t *document)
{
    for (size_t i = 0; i < document->op_count; i++) {
        op_cleanup(document->ops[i]);
        bson_free(document->ops[i]);
    }
    document->op_count = 0;
}

static feeder_op_t *push_op(batch_document_t *document, feeder_op_kind_t kind, uint64_t time)
{
    if (document->op_count == document->op_capacity) {
        document->op_capacity = document->op_capacity == 0 ? 2 : document->op_capacity * 2;
        document->ops = bson_realloc(document->ops, document->op_capacity * sizeof *document->ops);
    }
    feeder_op_t *op = bson_malloc0(sizeof *op);
    document->ops[document->op_count++] = op;
    op->kind = kind;
    op->namespace_index = document->namespace_index;
    op->id = document->id; /* a view: the document owns the copy */
    bson_init(&op->document);
    bson_init(&op->set_fields);
    bson_init(&op->unset_fields);
    op->first_time = op->last_time = time;
    op->events = 1;
    return op;
}

/* A delete or a full document: everything before it is superseded. */
static void set_final_state(batch_document_t *document, feeder_op_kind_t kind, const bson_t *full, uint64_t time)
{
    uint64_t first_time = document->op_count > 0 ? document->ops[0]->first_time : time;
    uint32_t events = 1;
    for (size_t i = 0; i < document->op_count; i++) {
        events += document->ops[i]->events;
    }
    clear_ops(document);
    feeder_op_t *op = push_op(document, kind, time);
    op->first_time = first_time;
    op->events = events;
    if (full != NULL) {
        bson_concat(&op->document, full);
    }
}

static bool path_has_prefix(const char *path, const char *prefix)
{
    size_t length = strlen(prefix);
    return strncmp(path, prefix, length) == 0 && path[length] == '.';
}

static bool paths_related(const char *left, const char *right)
{
    return strcmp(left, right) == 0 || path_has_prefix(left, right) || path_has_prefix(right, left);
}

static bool document_has_key(const bson_t *document, const char *key)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, document, key);
}

static bool related_to_any(const char *path, const bson_t *paths)
{
    bson_iter_t iter;
    bson_iter_init(&iter, paths);
    while (bson_iter_next(&iter)) {
        if (paths_related(path, bson_iter_key(&iter))) {
            return true;
        }
    }
    return false;
}

/* Whether (set2, unset2) applied after op's (set1, unset1) equals one update: the
 * later one sets only paths the earlier one set (so no new field changes place)
 * and removes only paths the earlier one touched exactly or did not touch. */
static bool can_merge(const feeder_op_t *op, const bson_t *set2, const bson_t *unset2)
{
    bson_iter_t iter;
    bson_iter_init(&iter, set2);
    while (bson_iter_next(&iter)) {
        if (!document_has_key(&op->set_fields, bson_iter_key(&iter))) {
            return false;
        }
    }
    bson_iter_init(&iter, unset2);
    while (bson_iter_next(&iter)) {
        const char *path = bson_iter_key(&iter);
        if (document_has_key(&op->set_fields, path) || document_has_key(&op->unset_fields, path)) {
            continue;
        }
        if (related_to_any(path, &op->set_fields) || related_to_any(path, &op->unset_fields)) {
            return false;
        }
    }
    return true;
}

static void merge_into(feeder_op_t *op, const bson_t *set2, const bson_t *unset2)
{
    bson_t set = BSON_INITIALIZER, unset = BSON_INITIALIZER;
    bson_iter_t iter, later;
    bson_iter_init(&iter, &op->set_fields);
    while (bson_iter_next(&iter)) {
        const char *path = bson_iter_key(&iter);
        if (document_has_key(unset2, path)) {
            continue;
        }
        if (bson_iter_init_find(&later, set2, path)) {
            bson_append_iter(&set, path, -1, &later);
        } else {
            bson_append_iter(&set, path, -1, &iter);
        }
    }
    bson_concat(&unset, &op->unset_fields);
    bson_iter_init(&iter, unset2);
    while (bson_iter_next(&iter)) {
        if (!document_has_key(&unset, bson_iter_key(&iter))) {
            bson_append_utf8(&unset, bson_iter_key(&iter), -1, "", 0);
        }
    }
    bson_destroy(&op->set_fields);
    bson_destroy(&op->unset_fields);
    bson_steal(&op->set_fields, &set);
    bson_steal(&op->unset_fields, &unset);
}

/* Splits {$set: {...}, $unset: {...}} into its two parts (views). */
static void split_update(const bson_t *update, bson_t *out_set, bson_t *out_unset)
{
    bson_iter_t iter;
    uint32_t length;
    const uint8_t *data;
    bson_init(out_set);
    bson_init(out_unset);
    if (bson_iter_init_find(&iter, update, "$set") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_iter_document(&iter, &length, &data);
        bson_destroy(out_set);
        bson_init_static(out_set, data, length);
    }
    if (bson_iter_init_find(&iter, update, "$unset") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_iter_document(&iter, &length, &data);
        bson_destroy(out_unset);
        bson_init_static(out_unset, data, length);
    }
}

/* Applies update to op's full document in place; false leaves it untouched. */
static bool apply_to_full(feeder_op_t *op, const bson_t *update)
{
    bson_error_t ignored;
    update_spec_t *spec = update_compile(update, NULL, &ignored);
    if (spec == NULL) {
        return false;
    }
    bson_t result;
    bool ok = update_apply_with_options(spec, &op->document, NULL, &result, NULL, NULL, &ignored);
    update_destroy(spec);
    if (ok) {
        bson_destroy(&op->document);
        bson_steal(&op->document, &result);
    } else {
        bson_destroy(&result);
    }
    return ok;
}

/* Folds one update (a truncation or a $set/$unset) into the document's writes;
 * new_event is false for the second half of one event. */
static void add_update(batch_document_t *document, const bson_t *update, bool is_truncation, bool new_event,
                       uint64_t time)
{
    feeder_op_t *last = document->op_count > 0 ? document->ops[document->op_count - 1] : NULL;
    if (last != NULL && last->kind == FEEDER_OP_REPLACE && apply_to_full(last, update)) {
        last->last_time = time;
        last->events += new_event ? 1 : 0;
        return;
    }
    if (!is_truncation && last != NULL && last->kind == FEEDER_OP_UPDATE && !last->is_truncation) {
        bson_t set, unset;
        split_update(update, &set, &unset);
        if (can_merge(last, &set, &unset)) {
            merge_into(last, &set, &unset);
            last->last_time = time;
            last->events += new_event ? 1 : 0;
            return;
        }
    }
    feeder_op_t *op = push_op(document, FEEDER_OP_UPDATE, time);
    op->events = new_event ? 1 : 0;
    op->is_truncation = is_truncation;
    if (is_truncation) {
        bson_concat(&op->document, update);
    } else {
        bson_t set, unset;
        split_update(update, &set, &unset);
        bson_concat(&op->set_fields, &set);
        bson_concat(&op->unset_fields, &unset);
    }
}

/* --- descriptions ------------------------------------------------------------------ */

bool feeder_update_from_description(const bson_t *description, bson_t *out_truncation, bson_t *out_update,
                                    bson_error_t *error)
{
    bson_iter_t iter, item, field;
    bson_init(out_truncation);
    bson_init(out_update);
    if (bson_iter_init_find(&iter, description, "truncatedArrays") && !BSON_ITER_HOLDS_NULL(&iter)) {
        if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "updateDescription.truncatedArrays is not an array");
        }
        bson_t push;
        bool any = false;
        bson_iter_recurse(&iter, &item);
        bson_append_document_begin(out_truncation, "$push", 5, &push);
        while (bson_iter_next(&item)) {
            const char *name = NULL;
            int64_t size = -1;
            if (BSON_ITER_HOLDS_DOCUMENT(&item) && bson_iter_recurse(&item, &field)) {
                while (bson_iter_next(&field)) {
                    if (strcmp(bson_iter_key(&field), "field") == 0 && BSON_ITER_HOLDS_UTF8(&field)) {
                        name = bson_iter_utf8(&field, NULL);
                    } else if (strcmp(bson_iter_key(&field), "newSize") == 0 && BSON_ITER_HOLDS_NUMBER(&field)) {
                        size = bson_iter_as_int64(&field);
                    }
                }
            }
            if (name == NULL || size < 0 || size > INT32_MAX) {
                bson_append_document_end(out_truncation, &push);
                return tc_error_set(error, TC_ERR_BAD_VALUE,
                                    "updateDescription.truncatedArrays holds an entry without field and newSize");
            }
            bson_t slice, each;
            bson_append_document_begin(&push, name, -1, &slice);
            BSON_APPEND_ARRAY_BEGIN(&slice, "$each", &each);
            bson_append_array_end(&slice, &each);
            BSON_APPEND_INT32(&slice, "$slice", (int32_t)size);
            bson_append_document_end(&push, &slice);
            any = true;
        }
        bson_append_document_end(out_truncation, &push);
        if (!any) {
            bson_reinit(out_truncation);
        }
    }
    if (bson_iter_init_find(&iter, description, "updatedFields")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "updateDescription.updatedFields is not a document");
        }
        uint32_t length;
        const uint8_t *data;
        bson_t fields;
        bson_iter_document(&iter, &length, &data);
        if (bson_init_static(&fields, data, length) && !bson_empty(&fields)) {
            BSON_APPEND_DOCUMENT(out_update, "$set", &fields);
        }
    }
    if (bson_iter_init_find(&iter, description, "removedFields") && !BSON_ITER_HOLDS_NULL(&iter)) {
        if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "updateDescription.removedFields is not an array");
        }
        bson_t unset;
        bool any = false;
        bson_iter_recurse(&iter, &item);
        bson_t removed = BSON_INITIALIZER;
        while (bson_iter_next(&item)) {
            if (!BSON_ITER_HOLDS_UTF8(&item)) {
                bson_destroy(&removed);
                return tc_error_set(error, TC_ERR_BAD_VALUE, "updateDescription.removedFields holds a non-string");
            }
            bson_append_utf8(&removed, bson_iter_utf8(&item, NULL), -1, "", 0);
            any = true;
        }
        if (any) {
            BSON_APPEND_DOCUMENT_BEGIN(out_update, "$unset", &unset);
            bson_concat(&unset, &removed);
            bson_append_document_end(out_update, &unset);
        }
        bson_destroy(&removed);
    }
    return true;
}

/* --- the batch --------------------------------------------------------------------- */

feeder_batch_t *feeder_batch_new(void)
{
    return bson_malloc0(sizeof(feeder_batch_t));
}

void feeder_batch_reset(feeder_batch_t *batch)
{
    for (size_t i = 0; i < batch->document_count; i++) {
        clear_ops(&batch->documents[i]);
        bson_free(batch->documents[i].ops);
        bson_value_destroy(&batch->documents[i].id);
    }
    batch->document_count = 0;
    batch->event_count = 0;
    if (batch->slots != NULL) {
        memset(batch->slots, 0, batch->slot_count * sizeof *batch->slots);
    }
}

void feeder_batch_destroy(feeder_batch_t *batch)
{
    if (batch == NULL) {
        return;
    }
    feeder_batch_reset(batch);
    bson_free(batch->documents);
    bson_free(batch->slots);
    bson_free(batch->finished);
    bson_free(batch);
}

size_t feeder_batch_event_count(const feeder_batch_t *batch)
{
    return batch->event_count;
}

static bool find_document_field(const bson_t *event, const char *path, bson_iter_t *out)
{
    bson_iter_t iter;
    return bson_iter_init(&iter, event) && bson_iter_find_descendant(&iter, path, out);
}

static bool view_document(bson_iter_t *iter, bson_t *out)
{
    uint32_t length;
    const uint8_t *data;
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return false;
    }
    bson_iter_document(iter, &length, &data);
    return bson_init_static(out, data, length);
}

bool feeder_batch_add(feeder_batch_t *batch, size_t namespace_index, const bson_t *event, bson_error_t *error)
{
    bson_iter_t iter, id_iter;
    const char *operation = NULL;
    uint64_t time = 0;
    if (bson_iter_init_find(&iter, event, "operationType") && BSON_ITER_HOLDS_UTF8(&iter)) {
        operation = bson_iter_utf8(&iter, NULL);
    }
    time = timestamp_find(event, "clusterTime");
    if (operation == NULL || time == 0 || !find_document_field(event, "documentKey._id", &id_iter)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "a change event without operationType, clusterTime or documentKey._id");
    }
    bool is_full = strcmp(operation, "insert") == 0 || strcmp(operation, "replace") == 0;
    bool is_update = strcmp(operation, "update") == 0;
    bool is_delete = strcmp(operation, "delete") == 0;
    if (!is_full && !is_update && !is_delete) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "the feeder does not replay '%s' events", operation);
    }
    bson_t full, description;
    if (is_full && !(bson_iter_init_find(&iter, event, "fullDocument") && view_document(&iter, &full))) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "a%s %s event without fullDocument",
                            operation[0] == 'i' ? "n" : "", operation);
    }
    if (is_update && !(bson_iter_init_find(&iter, event, "updateDescription") && view_document(&iter, &description))) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "an update event without updateDescription");
    }
    bson_t truncation, update;
    if (is_update && !feeder_update_from_description(&description, &truncation, &update, error)) {
        bson_destroy(&truncation);
        bson_destroy(&update);
        return false;
    }

    batch->event_count++;
    batch_document_t *document = find_or_add_document(batch, namespace_index, bson_iter_value(&id_iter));
    if (is_full) {
        set_final_state(document, FEEDER_OP_REPLACE, &full, time);
    } else if (is_delete) {
        set_final_state(document, FEEDER_OP_DELETE, NULL, time);
    } else {
        if (!bson_empty(&truncation)) {
            add_update(document, &truncation, true, true, time);
        }
        if (!bson_empty(&update)) {
            add_update(document, &update, false, bson_empty(&truncation), time);
        }
        bson_destroy(&truncation);
        bson_destroy(&update);
    }
    return true;
}

typedef struct sort_entry {
    feeder_op_t *op;
    size_t round;
    size_t sequence;
} sort_entry_t;

static int compare_entries(const void *left_pointer, const void *right_pointer)
{
    const sort_entry_t *left = left_pointer;
    const sort_entry_t *right = right_pointer;
    if (left->op->namespace_index != right->op->namespace_index) {
        return left->op->namespace_index < right->op->namespace_index ? -1 : 1;
    }
    if (left->round != right->round) {
        return left->round < right->round ? -1 : 1;
    }
    bool left_delete = left->op->kind == FEEDER_OP_DELETE, right_delete = right->op->kind == FEEDER_OP_DELETE;
    if (left_delete != right_delete) {
        return left_delete ? 1 : -1;
    }
    return left->sequence < right->sequence ? -1 : (left->sequence > right->sequence ? 1 : 0);
}

feeder_op_t *const *feeder_batch_finish(feeder_batch_t *batch, size_t *out_count)
{
    size_t count = 0;
    for (size_t i = 0; i < batch->document_count; i++) {
        count += batch->documents[i].op_count;
    }
    sort_entry_t *entries = bson_malloc((count + 1) * sizeof *entries);
    size_t next = 0;
    for (size_t i = 0; i < batch->document_count; i++) {
        batch_document_t *document = &batch->documents[i];
        for (size_t round = 0; round < document->op_count; round++) {
            feeder_op_t *op = document->ops[round];
            op->id = document->id;
            if (op->kind == FEEDER_OP_UPDATE && !op->is_truncation) {
                bson_reinit(&op->document);
                if (!bson_empty(&op->set_fields)) {
                    BSON_APPEND_DOCUMENT(&op->document, "$set", &op->set_fields);
                }
                if (!bson_empty(&op->unset_fields)) {
                    BSON_APPEND_DOCUMENT(&op->document, "$unset", &op->unset_fields);
                }
            }
            entries[next] = (sort_entry_t){.op = op, .round = round, .sequence = next};
            next++;
        }
    }
    qsort(entries, count, sizeof *entries, compare_entries);
    if (count + 1 > batch->finished_capacity) {
        batch->finished_capacity = count + 1;
        batch->finished = bson_realloc(batch->finished, batch->finished_capacity * sizeof *batch->finished);
    }
    for (size_t i = 0; i < count; i++) {
        batch->finished[i] = entries[i].op;
    }
    bson_free(entries);
    *out_count = count;
    return batch->finished;
}
