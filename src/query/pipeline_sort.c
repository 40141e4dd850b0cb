/* The $sort stage: reads its whole input, sorts it with sort.h's comparison (documents
 * that compare equal keep their input order) and replays it. When a $limit follows, only
 * the first skip + limit documents are kept as input arrives (a top-k sort), which is
 * also what its memory bound counts. */
#include "query/pipeline_private.h"

#include "query/aggregation_value.h"
#include "query/sort.h"

#include <stdlib.h>
#include <string.h>

/* mongod's numbered assertion codes (6.0). */
enum {
    SORT_ERROR_NOT_OBJECT = 15973,
    SORT_ERROR_EMPTY = 15976,
};

/* Bytes counted per held document beyond its own size. */
#define SORT_ENTRY_OVERHEAD 64

typedef struct sort_stage_spec {
    bson_t specification;
    sort_spec_t *sort;
    int64_t keep; /* -1: all */
} sort_stage_spec_t;

typedef struct sort_entry {
    uint8_t *data;
    uint32_t length;
    uint64_t sequence; /* input order, the tie-breaker */
} sort_entry_t;

typedef struct sort_state {
    sort_entry_t *entries;
    size_t count;
    size_t capacity;
    int64_t memory;
    uint64_t next_sequence;
    bool sorted;
    size_t position;
} sort_state_t;

static void sort_stage_spec_destroy(void *spec)
{
    sort_stage_spec_t *sort = spec;
    sort_spec_destroy(sort->sort);
    bson_destroy(&sort->specification);
    bson_free(sort);
}

static void sort_state_destroy(void *state)
{
    sort_state_t *sort = state;
    for (size_t i = 0; i < sort->count; i++) {
        bson_free(sort->entries[i].data);
    }
    bson_free(sort->entries);
    bson_free(sort);
}

static int compare_entries(const void *left, const void *right, void *spec)
{
    const sort_entry_t *a = left;
    const sort_entry_t *b = right;
    bson_t left_document;
    bson_t right_document;
    bson_init_static(&left_document, a->data, a->length);
    bson_init_static(&right_document, b->data, b->length);
    int order = sort_compare_documents(spec, &left_document, &right_document);
    if (order != 0) {
        return order;
    }
    return a->sequence < b->sequence ? -1 : (a->sequence > b->sequence ? 1 : 0);
}

/* Sorts what is held and drops everything past the first `keep` documents. */
static void sort_and_trim(const sort_stage_spec_t *spec, sort_state_t *state)
{
    /* Nothing held means no buffer yet, and qsort_r must not be given NULL. */
    if (state->count > 1) {
        qsort_r(state->entries, state->count, sizeof *state->entries, compare_entries, spec->sort);
    }
    if (spec->keep < 0) {
        return;
    }
    while ((int64_t)state->count > spec->keep) {
        sort_entry_t *dropped = &state->entries[--state->count];
        state->memory -= dropped->length + SORT_ENTRY_OVERHEAD;
        bson_free(dropped->data);
    }
}

static bool hold(const sort_stage_spec_t *spec, sort_state_t *state, const bson_t *document,
                 const pipeline_limits_t *limits, bson_error_t *error)
{
    if (state->count == state->capacity) {
        state->capacity = state->capacity == 0 ? 64 : state->capacity * 2;
        state->entries = bson_realloc(state->entries, state->capacity * sizeof *state->entries);
    }
    sort_entry_t *entry = &state->entries[state->count++];
    entry->length = document->len;
    entry->data = bson_malloc(document->len);
    memcpy(entry->data, bson_get_data(document), document->len);
    entry->sequence = state->next_sequence++;
    state->memory += entry->length + SORT_ENTRY_OVERHEAD;
    /* A top-k sort trims once it holds twice what it keeps (amortized n log k), or when
     * it is over its memory bound, which counts only the k documents it keeps. */
    bool over_limit = state->memory > limits->memory_limit_bytes;
    if (spec->keep >= 0 && ((int64_t)state->count >= 2 * spec->keep + 64 || over_limit)) {
        sort_and_trim(spec, state);
    }
    if (state->memory > limits->memory_limit_bytes && !limits->allow_disk_use) {
        return tc_error_set(error, TC_ERR_QUERY_EXCEEDED_MEMORY_LIMIT,
                            "Sort exceeded memory limit of %lld bytes, but did not opt in to "
                            "external sorting.",
                            (long long)limits->memory_limit_bytes);
    }
    return true;
}

static bool sort_next(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                      bson_error_t *error)
{
    const sort_stage_spec_t *spec = cursor->stage->spec;
    if (cursor->state == NULL) {
        cursor->state = bson_malloc0(sizeof(sort_state_t));
    }
    sort_state_t *state = cursor->state;
    while (!state->sorted) {
        bson_t input;
        if (!pipeline_cursor_pull(cursor, &input, out_end, error)) {
            return false;
        }
        if (*out_end) {
            sort_and_trim(spec, state);
            state->sorted = true;
            break;
        }
        bool ok = hold(spec, state, &input, cursor->limits, error);
        bson_destroy(&input);
        if (!ok) {
            return false;
        }
    }
    if (state->position >= state->count) {
        *out_end = true;
        return true;
    }
    sort_entry_t *entry = &state->entries[state->position++];
    bson_t view;
    bson_init_static(&view, entry->data, entry->length);
    bson_copy_to(&view, out_document);
    *out_end = false;
    return true;
}

static const pipeline_stage_kind_t sort_kind = {"$sort", sort_next, sort_state_destroy,
                                                sort_stage_spec_destroy};

bool pipeline_sort_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                           bson_error_t *error)
{
    if (argument->value_type != BSON_TYPE_DOCUMENT) {
        return tc_error_set(error, SORT_ERROR_NOT_OBJECT,
                            "the $sort key specification must be an object");
    }
    bson_t view;
    aggregation_value_view_document(argument, &view);
    if (bson_count_keys(&view) == 0) {
        return tc_error_set(error, SORT_ERROR_EMPTY, "$sort stage must have at least one sort key");
    }
    sort_spec_t *sort = sort_spec_compile(&view, error);
    if (sort == NULL) {
        return false;
    }
    sort_spec_set_collation(sort, scope->context != NULL ? scope->context->collation : NULL);
    sort_stage_spec_t *spec = BSON_ALIGNED_ALLOC0(sort_stage_spec_t); /* holds a bson_t */
    bson_copy_to(&view, &spec->specification);
    spec->sort = sort;
    spec->keep = -1;
    out_stage->kind = &sort_kind;
    out_stage->spec = spec;
    return true;
}

void pipeline_sort_set_keep(pipeline_stage_t *stage, int64_t count)
{
    sort_stage_spec_t *spec = stage->spec;
    if (spec->keep < 0 || count < spec->keep) {
        spec->keep = count;
    }
}

const bson_t *pipeline_sort_specification(const pipeline_stage_t *stage)
{
    return &((const sort_stage_spec_t *)stage->spec)->specification;
}

bool pipeline_stage_is_sort(const pipeline_stage_t *stage)
{
    return stage->kind == &sort_kind;
}
