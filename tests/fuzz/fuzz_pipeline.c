/* libFuzzer target: the aggregation pipeline. The input is the pipeline array (as
 * BSON: an array has a document's layout), then up to MAX_INPUT_DOCUMENTS input
 * documents, each starting with its BSON length. A pipeline that compiles runs over
 * those documents followed by the fixed awkward ones, with a small memory limit; every
 * result must be valid BSON, and the hints the store reads (leading $match and $sort)
 * must compile on their own. */
#include "fuzz_common.h"

#include "query/match.h"
#include "query/pipeline.h"
#include "query/sort.h"

#define MAX_INPUT_DOCUMENTS 16
/* A run stops after this many results: enough for $unwind fan-out, bounded time. */
#define MAX_RESULTS 2000
/* Small, so that $sort and $group reach their memory limit within a fuzz input. */
#define MEMORY_LIMIT_BYTES (256 * 1024)

typedef struct fuzz_source {
    const bson_t *documents[MAX_INPUT_DOCUMENTS + FUZZ_FIXED_COUNT];
    size_t count;
    size_t next;
} fuzz_source_t;

static bool fuzz_source_next(void *context, const bson_t **out_document, bson_error_t *error)
{
    fuzz_source_t *source = context;
    *out_document = source->next < source->count ? source->documents[source->next++] : NULL;
    return true;
}

static void run(const pipeline_t *pipeline, fuzz_source_t *source)
{
    source->next = 0;
    pipeline_run_t *run = pipeline_start(pipeline, fuzz_source_next, source);
    FUZZ_REQUIRE(run != NULL, "pipeline_start failed");
    for (size_t results = 0; results < MAX_RESULTS; results++) {
        bson_t out;
        bool end = false;
        bson_error_t error;
        if (!pipeline_next(run, &out, &end, &error) || end) {
            break;
        }
        fuzz_require_valid(&out, "pipeline result");
        bson_destroy(&out);
    }
    pipeline_run_destroy(run);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader_t reader;
    bson_t stages;
    bson_t inputs[MAX_INPUT_DOCUMENTS];
    fuzz_source_t source = {.count = 0, .next = 0};
    fuzz_reader_init(&reader, data, size);
    if (!fuzz_reader_document(&reader, &stages)) {
        return 0;
    }
    while (source.count < MAX_INPUT_DOCUMENTS &&
           fuzz_reader_document(&reader, &inputs[source.count])) {
        source.documents[source.count] = &inputs[source.count];
        source.count++;
    }
    for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
        source.documents[source.count++] = fuzz_fixed_document(i);
    }

    bson_error_t error;
    /* allowDiskUse for even-length inputs, so both sides of the memory limit are seen. */
    pipeline_options_t options = {.allow_disk_use = (size % 2) == 0,
                                  .memory_limit_bytes = MEMORY_LIMIT_BYTES};
    pipeline_t *pipeline = pipeline_compile(&stages, &options, &error);
    if (pipeline == NULL) {
        return 0;
    }
    const bson_t *leading_match = pipeline_leading_match(pipeline);
    if (leading_match != NULL) {
        match_expression_t *expression = match_compile(leading_match, &error);
        FUZZ_REQUIRE(expression != NULL, "the leading $match does not compile alone: %s",
                     error.message);
        match_destroy(expression);
    }
    const bson_t *leading_sort = pipeline_leading_sort(pipeline);
    if (leading_sort != NULL) {
        sort_spec_t *sort = sort_spec_compile(leading_sort, &error);
        FUZZ_REQUIRE(sort != NULL, "the leading $sort does not compile alone: %s",
                     error.message);
        sort_spec_destroy(sort);
    }
    FUZZ_REQUIRE(pipeline_leading_limit(pipeline) >= -1, "leading limit %lld",
                 (long long)pipeline_leading_limit(pipeline));
    run(pipeline, &source);
    pipeline_destroy(pipeline);
    return 0;
}
