/* The pieces of the pipeline engine shared between pipeline.c (stage list, runs and the
 * simple streaming stages) and the files of the other stages (pipeline_projection.c,
 * pipeline_group.c, pipeline_sort.c, pipeline_unwind.c). Not for use outside
 * src/query/pipeline*. */
#ifndef TC_QUERY_PIPELINE_PRIVATE_H
#define TC_QUERY_PIPELINE_PRIVATE_H

#include "query/expression.h"
#include "query/pipeline.h"

typedef struct pipeline_stage pipeline_stage_t;
typedef struct pipeline_cursor pipeline_cursor_t;

/* One stage's behaviour. next() produces the stage's next output, pulling its input
 * with pipeline_cursor_pull(); it follows pipeline_next()'s contract for out_document. */
typedef struct pipeline_stage_kind {
    const char *name;
    bool (*next)(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                 bson_error_t *error);
    void (*destroy_state)(void *state); /* a run's cursor->state; NULL when none */
    void (*destroy_spec)(void *spec);   /* the compiled stage's spec */
} pipeline_stage_kind_t;

struct pipeline_stage {
    const pipeline_stage_kind_t *kind;
    void *spec;
};

/* The run-wide settings a stage reads. */
typedef struct pipeline_limits {
    bool allow_disk_use;
    int64_t memory_limit_bytes;
} pipeline_limits_t;

/* A stage within a run: its spec, its run state (allocated by the stage on first use,
 * freed by destroy_state) and its input. */
struct pipeline_cursor {
    const pipeline_stage_t *stage;
    void *state;
    pipeline_cursor_t *input; /* NULL: the run's source */
    pipeline_run_t *run;
    const expression_context_t *expression_context;
    const pipeline_limits_t *limits;
};

/* Pulls the next input document of cursor (from the previous stage or the source);
 * same contract as pipeline_next(). */
bool pipeline_cursor_pull(pipeline_cursor_t *cursor, bson_t *out_document, bool *out_end,
                          bson_error_t *error);

/* A dotted field path split into components, validated as mongod's FieldPath: errors
 * 40352 (empty), 40353 (trailing dot), 15998 (empty component), 16410 ('$' prefix). On
 * failure out_path is left empty. Free with pipeline_field_path_destroy(). */
typedef struct pipeline_field_path {
    char **components;
    size_t length;
} pipeline_field_path_t;

bool pipeline_field_path_parse(const char *dotted, pipeline_field_path_t *out_path,
                               bson_error_t *error);
/* Safe to call twice. */
void pipeline_field_path_destroy(pipeline_field_path_t *path);

/* Prefixes error's message with "Invalid <stage> :: caused by :: ", as mongod adds
 * context to errors from parsing some stages; returns false. */
bool pipeline_error_add_stage_context(bson_error_t *error, const char *stage_name);

/* What a stage's expressions may read besides the document: the command's let
 * variables (their names are checked at compile time). */
typedef struct pipeline_scope {
    const bson_t *variables;              /* NULL: none */
    const expression_context_t *context;  /* the command's $$NOW with them; NULL: each run's */
} pipeline_scope_t;

/* Stage compilers: each fills *out_stage (kind and spec) from the stage's argument. */
bool pipeline_projection_compile(const char *stage_name, const bson_value_t *argument, const pipeline_scope_t *scope,
                                 pipeline_stage_t *out_stage, bson_error_t *error);
bool pipeline_group_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                            bson_error_t *error);
/* A $count stage is a $group of one counter, named by argument. */
bool pipeline_count_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                            bson_error_t *error);
bool pipeline_sort_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                           bson_error_t *error);
bool pipeline_unwind_compile(const bson_value_t *argument, const pipeline_scope_t *scope, pipeline_stage_t *out_stage,
                             bson_error_t *error);

/* Tells a compiled $sort that only its first `count` documents are ever read (a $limit,
 * possibly after a $skip, follows it), so it keeps only that many. */
void pipeline_sort_set_keep(pipeline_stage_t *stage, int64_t count);

/* The specification a compiled $sort was built from. */
const bson_t *pipeline_sort_specification(const pipeline_stage_t *stage);

bool pipeline_stage_is_sort(const pipeline_stage_t *stage);

#endif
