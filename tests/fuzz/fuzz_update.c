/* libFuzzer target: update documents. The input is the update (its `u`), then an
 * optional document to update, then an optional arrayFilters array, each a BSON
 * document whose first 4 bytes give its length. A compiled update is applied to that
 * document and to the fixed awkward documents; the document also serves as an upsert's
 * filter. Results must be valid BSON, keep _id, and a reported no-op must change
 * nothing. */
#include "fuzz_common.h"

#include "query/order.h"
#include "query/update.h"

/* exact: the update and the document are canonical (fuzz_is_canonical), so the
 * result can be compared with the document byte for byte. */
static void check_apply(const update_spec_t *spec, const bson_t *document, bool exact)
{
    bson_t out;
    bson_t description;
    bool changed = true;
    bson_error_t error;
    if (update_apply(spec, document, false, &out, &description, &changed, &error)) {
        fuzz_require_valid(&out, "updated document");
        fuzz_require_valid(&description, "update description");
        if (!changed && exact) {
            FUZZ_REQUIRE(bson_equal(&out, document), "a no-op update changed the document");
        }
        bson_iter_t before;
        bson_iter_t after;
        if (exact && bson_iter_init_find(&before, document, "_id")) {
            FUZZ_REQUIRE(bson_iter_init_find(&after, &out, "_id") &&
                             order_compare_iters(&before, &after) == 0,
                         "the update lost or changed _id");
        }
    } else {
        FUZZ_REQUIRE(bson_empty(&out), "a failed update left a non-empty document");
    }
    bson_destroy(&out);
    bson_destroy(&description);
}

static void check_upsert(const update_spec_t *spec, const bson_t *filter)
{
    bson_t seed;
    bson_error_t error;
    if (update_build_upsert_seed(spec, filter, &seed, &error)) {
        fuzz_require_valid(&seed, "upsert seed");
        bson_t out;
        if (update_apply(spec, &seed, true, &out, NULL, NULL, &error)) {
            fuzz_require_valid(&out, "upserted document");
            bson_iter_t iter;
            FUZZ_REQUIRE(bson_iter_init(&iter, &out) && bson_iter_next(&iter) &&
                             strcmp(bson_iter_key(&iter), "_id") == 0,
                         "an upserted document does not start with _id");
        }
        bson_destroy(&out);
    }
    bson_destroy(&seed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader_t reader;
    bson_t update;
    bson_t document;
    bson_t array_filters;
    fuzz_reader_init(&reader, data, size);
    if (!fuzz_reader_document(&reader, &update)) {
        return 0;
    }
    bool have_document = fuzz_reader_document(&reader, &document);
    bool have_array_filters = have_document && fuzz_reader_document(&reader, &array_filters);

    bson_error_t error;
    update_spec_t *spec =
        update_compile(&update, have_array_filters ? &array_filters : NULL, &error);
    if (spec == NULL) {
        return 0;
    }
    (void)update_is_replacement(spec);
    bool update_exact = fuzz_is_canonical(&update);
    if (have_document) {
        check_apply(spec, &document, update_exact && fuzz_is_canonical(&document));
        check_upsert(spec, &document);
    }
    for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
        check_apply(spec, fuzz_fixed_document(i), update_exact);
    }
    check_upsert(spec, fuzz_fixed_document(1));
    update_destroy(spec);
    return 0;
}
