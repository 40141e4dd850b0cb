/* The aggregation pipeline engine: compiles the "pipeline" array of an aggregate command
 * once, then runs it over documents pulled from a source the store provides, yielding
 * result documents one at a time. Stages: $match, $project, $addFields/$set, $unset,
 * $sort, $limit, $skip, $group, $count, $unwind, $replaceRoot/$replaceWith. Pure logic,
 * no I/O; a compiled pipeline may be run any number of times, even concurrently. */
#ifndef TC_QUERY_PIPELINE_H
#define TC_QUERY_PIPELINE_H

#include "common/error.h"
#include "query/expression.h"

#include <stdint.h>

typedef struct pipeline pipeline_t;
typedef struct pipeline_run pipeline_run_t;

/* MongoDB's memory bound for one blocking stage ($sort, $group). */
#define PIPELINE_DEFAULT_MEMORY_LIMIT_BYTES (100ll * 1024 * 1024)

typedef struct pipeline_options {
    /* The aggregate command's allowDiskUse. With it a blocking stage may pass the memory
     * limit (it keeps everything in memory: nothing spills to disk here); without it the
     * stage fails with QueryExceededMemoryLimitNoDiskUseAllowed 292. Note that mongod 6.0
     * treats an absent allowDiskUse as true (allowDiskUseByDefault). */
    bool allow_disk_use;
    /* Per blocking stage; 0 means PIPELINE_DEFAULT_MEMORY_LIMIT_BYTES. */
    int64_t memory_limit_bytes;
    /* The command's $$NOW and let variables (copied; NULL: none, and $$NOW is read at
     * each run's start). */
    const expression_context_t *expression_context;
} pipeline_options_t;

/* Compiles stages, the aggregate command's "pipeline" array (a first $changeStream stage
 * must already be removed by the caller). options may be NULL (no allowDiskUse, 100 MB).
 * Errors carry mongod's codes: TypeMismatch 14 for a stage that is not an object, 40323
 * for a stage with other than one field, 40324 "Unrecognized pipeline stage name: '$foo'",
 * and each stage's own parse errors. Nothing of stages is referenced afterwards. Free with
 * pipeline_destroy(). */
pipeline_t *pipeline_compile(const bson_t *stages, const pipeline_options_t *options,
                             bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. Every run of the pipeline must be destroyed first. */
void pipeline_destroy(pipeline_t *pipeline);

/* Hands the pipeline its next input document: sets *out_document to a document that stays
 * valid (owned by the source) until the next call, or to NULL at the end of the input.
 * Returns false with error set to abort the run; the error reaches pipeline_next(). */
typedef bool (*pipeline_source_fn)(void *context, const bson_t **out_document, bson_error_t *error);

/* Starts a run reading from source(context). The run borrows pipeline, source and
 * context until pipeline_run_destroy(). $$NOW is fixed for the whole run. */
pipeline_run_t *pipeline_start(const pipeline_t *pipeline, pipeline_source_fn source,
                               void *context);

/* Produces the next result. On true with *out_end false, out_document (uninitialized
 * storage) now holds a document the caller owns: free it with bson_destroy(). On true
 * with *out_end true the pipeline is exhausted and out_document is untouched. On false,
 * error is set (the source's error, or a stage's: "can't $divide by zero" BadValue 2,
 * 292 past the memory limit, ...) and out_document is untouched; the run can only be
 * destroyed then. */
bool pipeline_next(pipeline_run_t *run, bson_t *out_document, bool *out_end,
                   bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void pipeline_run_destroy(pipeline_run_t *run);

/* Runs the pipeline over one document, for stages that map a document to at most
 * one (a change stream's: $match, $project, $addFields...): *out_kept true with
 * out_document (uninitialized storage, then the caller's to bson_destroy()) the
 * result; false with error set when a stage fails. */
bool pipeline_transform_one(const pipeline_t *pipeline, const bson_t *document, bson_t *out_document, bool *out_kept,
                            bson_error_t *error) TC_MUST_CHECK;

/* What the store may use to choose an index; the pipeline still applies all of it, so
 * these are hints and never change results. */

/* The filter of a first $match stage, or NULL. Owned by the pipeline. */
const bson_t *pipeline_leading_match(const pipeline_t *pipeline);

/* The specification of a $sort that is the first stage or directly follows the leading
 * $match, or NULL. Owned by the pipeline. */
const bson_t *pipeline_leading_sort(const pipeline_t *pipeline);

/* How many documents, counted after the leading $match and $sort, the rest of the
 * pipeline can ever read: skip + limit of the $skip/$limit stages that directly follow
 * them; -1 when unbounded. */
int64_t pipeline_leading_limit(const pipeline_t *pipeline);

#endif
