/* Index parity (index_sync.h): the fast tier holds every index of the archive, so
 * a read the planner sends there finds the plan it would find in the archive, and
 * the archive's validator, so a write the archive would refuse is refused at once,
 * and its default collation, so a query without one compares strings alike.
 * Run by the warmer's thread before its first pass of a namespace (the coverage
 * horizon is not published before a sync succeeded) and every indexSyncPeriod, so
 * an index created or dropped on the archive directly is followed within it.
 *
 * A TTL index is copied without expireAfterSeconds: the fast tier's own TTL
 * monitor would delete on its own clock, and its deletes would reach the feeder
 * as a client's. The archive's rules go to thermocline.indexes, where the evictor
 * reads them and removes expired fast-tier copies like aged ones (once the archive
 * holds their version; src/tier/README.md says why). */
#include "common/bson_view.h"
#include "tier/index_sync.h"

#include "common/clock.h"
#include "common/log.h"

#include <string.h>

#define LOG_COMPONENT "INDEXES"

void index_sync_state_init(index_sync_state_t *state)
{
    memset(state, 0, sizeof *state);
    bson_init(&state->refused);
    bson_init(&state->ttl);
}

void index_sync_state_cleanup(index_sync_state_t *state)
{
    bson_destroy(&state->refused);
    bson_destroy(&state->ttl);
}

bool index_sync_list(mongoc_client_t *client, const char *database, const bson_t *command, bson_t *out_array,
                     bool *out_exists, bson_error_t *error)
{
    bson_t reply;
    bson_iter_t iter, batch;
    bson_init(out_array);
    *out_exists = true;
    bool ok = tier_command(client, database, command, &reply, error);
    if (!ok && tier_error_code(error) == TC_ERR_NAMESPACE_NOT_FOUND) {
        *out_exists = false;
        ok = true;
    } else if (ok && bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) &&
               BSON_ITER_HOLDS_ARRAY(&batch)) {
        uint32_t length;
        const uint8_t *data;
        bson_t view;
        bson_iter_array(&batch, &length, &data);
        bson_init_static(&view, data, length);
        bson_concat(out_array, &view);
    } else if (ok) {
        bson_iter_t name;
        ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "unexpected reply to %s",
                          bson_iter_init(&name, command) && bson_iter_next(&name) ? bson_iter_key(&name) : "a command");
    }
    bson_destroy(&reply);
    return ok;
}

bool index_sync_key_starts_with(const bson_t *spec, const char *field)
{
    bson_iter_t iter, key;
    return bson_iter_init_find(&iter, spec, "key") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
           bson_iter_recurse(&iter, &key) && bson_iter_next(&key) && strcmp(bson_iter_key(&key), field) == 0;
}

static const char *spec_name(const bson_t *spec)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, spec, "name") && BSON_ITER_HOLDS_UTF8(&iter) ? bson_iter_utf8(&iter, NULL) : "";
}

/* What the fast tier must hold of an archive spec: everything listIndexes shows
 * but the format version (v: the fast tier picks its own), the legacy ns and the
 * TTL (see above). */
static void append_collation_without_version(bson_t *out, const char *field, const bson_iter_t *collation)
{
    bson_iter_t option;
    bson_t copy;
    bson_append_document_begin(out, field, -1, &copy);
    if (bson_iter_recurse(collation, &option)) {
        while (bson_iter_next(&option)) {
            if (strcmp(bson_iter_key(&option), "version") != 0) {
                bson_append_iter(&copy, NULL, 0, &option);
            }
        }
    }
    bson_append_document_end(out, &copy);
}

static void fast_spec_of(const bson_t *spec, bson_t *out)
{
    bson_iter_t iter;
    bson_init(out);
    bson_iter_init(&iter, spec);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (strcmp(field, "collation") == 0 && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            /* The collation's ICU version is the server's own (mongod's 57.1, the
             * store's 72.1): the fast tier states its own, as with v. */
            append_collation_without_version(out, field, &iter);
        } else if (strcmp(field, "v") != 0 && strcmp(field, "ns") != 0 && strcmp(field, "expireAfterSeconds") != 0) {
            bson_append_iter(out, field, -1, &iter);
        }
    }
}

/* The same fields with the same values, in any order (mongod lists a spec's
 * options in its own order, not the creator's). */
static bool same_spec(const bson_t *left, const bson_t *right)
{
    bson_iter_t iter, other;
    if (bson_count_keys(left) != bson_count_keys(right)) {
        return false;
    }
    bson_iter_init(&iter, left);
    while (bson_iter_next(&iter)) {
        if (!bson_iter_init_find(&other, right, bson_iter_key(&iter))) {
            return false;
        }
        bson_t one = BSON_INITIALIZER, two = BSON_INITIALIZER;
        bson_append_iter(&one, "v", 1, &iter);
        bson_append_iter(&two, "v", 1, &other);
        bool equal = bson_equal(&one, &two);
        bson_destroy(&one);
        bson_destroy(&two);
        if (!equal) {
            return false;
        }
    }
    return true;
}

/* The spec named name in specs (a BSON array), viewed into out. */
static bool find_spec(const bson_t *specs, const char *name, bson_t *out)
{
    bson_iter_t iter;
    bson_iter_init(&iter, specs);
    while (bson_iter_next(&iter)) {
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(out, data, length);
        if (strcmp(spec_name(out), name) == 0) {
            return true;
        }
    }
    return false;
}

/* Whether the fast tier's spec, as listIndexes shows it, is the wanted one. A TTL
 * there (created on the fast tier directly) is not: its monitor would delete on
 * the fast tier's clock, and the feeder would replay those deletes. */
static bool held_as_wanted(const bson_t *held, const bson_t *wanted)
{
    if (bson_has_field(held, "expireAfterSeconds")) {
        return false;
    }
    bson_t stripped;
    fast_spec_of(held, &stripped);
    bool same = same_spec(&stripped, wanted);
    bson_destroy(&stripped);
    return same;
}

static void append_indexed(bson_t *array, uint32_t *position, const bson_t *document)
{
    char key[16];
    const char *key_string;
    bson_uint32_to_string((*position)++, &key_string, key, sizeof key);
    bson_append_document(array, key_string, -1, document);
}

/* The fast tier's wanted specs (a BSON array) and the TTL rules of the archive. */
static void desired_specs(const config_namespace_t *policy, const bson_t *archive_specs, bool archive_exists,
                          index_sync_state_t *state, bson_t *out_specs, bson_t *out_ttl)
{
    bson_iter_t iter, field;
    uint32_t count = 0, ttl_count = 0;
    bool has_time_index = false;
    bson_init(out_specs);
    bson_init(out_ttl);
    bson_iter_init(&iter, archive_specs);
    while (bson_iter_next(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t spec, wanted;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&spec, data, length);
        if (strcmp(spec_name(&spec), "_id_") == 0) {
            continue;
        }
        has_time_index = has_time_index || index_sync_key_starts_with(&spec, policy->time_field);
        fast_spec_of(&spec, &wanted);
        append_indexed(out_specs, &count, &wanted);
        bson_destroy(&wanted);
        bson_iter_t key, first;
        bson_t key_pattern;
        /* mongod applies expireAfterSeconds on single-field indexes only. */
        if (bson_iter_init_find(&field, &spec, "expireAfterSeconds") && BSON_ITER_HOLDS_NUMBER(&field) &&
            bson_iter_init_find(&key, &spec, "key") && BSON_ITER_HOLDS_DOCUMENT(&key)) {
            bson_iter_document(&key, &length, &data);
            bson_init_static(&key_pattern, data, length);
            if (bson_count_keys(&key_pattern) == 1 && bson_iter_init(&first, &key_pattern) && bson_iter_next(&first)) {
                bson_t rule = BSON_INITIALIZER;
                BSON_APPEND_UTF8(&rule, "field", bson_iter_key(&first));
                BSON_APPEND_INT64(&rule, "expireAfterSeconds", bson_iter_as_int64(&field));
                BSON_APPEND_UTF8(&rule, "name", spec_name(&spec));
                append_indexed(out_ttl, &ttl_count, &rule);
                bson_destroy(&rule);
            }
        }
    }
    if (!has_time_index) {
        /* The evictor's {timeField: {$lt}} and the planner's window reads need it
         * whatever the archive has: the one index thermocline adds of its own. */
        char name[300];
        bson_t spec = BSON_INITIALIZER, key;
        snprintf(name, sizeof name, "%s_1", policy->time_field);
        BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
        BSON_APPEND_INT32(&key, policy->time_field, 1);
        bson_append_document_end(&spec, &key);
        BSON_APPEND_UTF8(&spec, "name", name);
        append_indexed(out_specs, &count, &spec);
        bson_destroy(&spec);
        if (archive_exists && !state->time_index_warned) {
            state->time_index_warned = true;
            TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                         "{ns}: the archive has no index whose first key is {timeField}: every warmer pass scans "
                         "the collection (the fast tier gets {index} of its own)",
                         TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("timeField", policy->time_field),
                         TC_ATTR_STR("index", name));
        }
    }
}

static bool run_on_fast(mongoc_client_t *fast, const config_namespace_t *policy, bson_t *command,
                        bson_error_t *error)
{
    bson_t reply;
    bool ok = tier_command(fast, policy->database, command, &reply, error);
    bson_destroy(&reply);
    bson_destroy(command);
    return ok;
}

/* A refusal that is not the tier being away: logged once per index and message,
 * and the sync goes on (our store may lack an option mongod has). */
static bool note_refusal(index_sync_state_t *state, bson_t *refused_now, const config_namespace_t *policy,
                         const char *name, const bson_error_t *error)
{
    if (tier_error_is_transient(error)) {
        return false;
    }
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, &state->refused, name) || !BSON_ITER_HOLDS_UTF8(&iter) ||
        strcmp(bson_iter_utf8(&iter, NULL), error->message) != 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{ns}: the fast tier refused the archive's index {index} ({error}): reads the planner sends "
                     "there run without it until the fast tier accepts it (retried every indexSyncPeriod)",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("index", name), TC_ATTR_STR("error", error->message));
    }
    BSON_APPEND_UTF8(refused_now, name, error->message);
    return true;
}

static bool drop_index(mongoc_client_t *fast, const config_namespace_t *policy, const char *name, const char *why,
                       bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&command, "dropIndexes", policy->collection);
    BSON_APPEND_UTF8(&command, "index", name);
    bool ok = run_on_fast(fast, policy, &command, error);
    if (ok || tier_error_code(error) == TC_ERR_INDEX_NOT_FOUND) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{ns}: dropped index {index} from the fast tier ({reason})",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("index", name), TC_ATTR_STR("reason", why));
        return true;
    }
    return false;
}

/* Drops the fast tier's indexes that are not wanted as they are. */
static bool drop_extra_indexes(mongoc_client_t *fast, const config_namespace_t *policy, const bson_t *fast_specs,
                               const bson_t *wanted_specs, bson_error_t *error)
{
    bson_iter_t iter;
    bson_iter_init(&iter, fast_specs);
    while (bson_iter_next(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t spec, wanted;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&spec, data, length);
        const char *name = spec_name(&spec);
        if (strcmp(name, "_id_") == 0) {
            continue;
        }
        bool known = find_spec(wanted_specs, name, &wanted);
        bool keep = known && held_as_wanted(&spec, &wanted);
        if (!keep && !drop_index(fast, policy, name,
                                 known ? "it differs from the archive's: rebuilt" : "the archive has no such index",
                                 error)) {
            return false;
        }
    }
    return true;
}

/* Creates each wanted spec the fast tier lacks, one command each, so that one
 * refused option costs that index only. */
static bool create_missing_indexes(mongoc_client_t *fast, const config_namespace_t *policy, const bson_t *fast_specs,
                                   const bson_t *wanted_specs, index_sync_state_t *state, bson_error_t *error)
{
    bson_t refused_now = BSON_INITIALIZER;
    bson_iter_t iter;
    bool ok = true;
    bson_iter_init(&iter, wanted_specs);
    while (ok && bson_iter_next(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t wanted, held, command = BSON_INITIALIZER, indexes;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&wanted, data, length);
        const char *name = spec_name(&wanted);
        if (find_spec(fast_specs, name, &held) && held_as_wanted(&held, &wanted)) {
            bson_destroy(&command);
            continue;
        }
        BSON_APPEND_UTF8(&command, "createIndexes", policy->collection);
        BSON_APPEND_ARRAY_BEGIN(&command, "indexes", &indexes);
        BSON_APPEND_DOCUMENT(&indexes, "0", &wanted);
        bson_append_array_end(&command, &indexes);
        if (run_on_fast(fast, policy, &command, error)) {
            TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{ns}: created index {index} on the fast tier",
                         TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("index", name));
        } else {
            ok = note_refusal(state, &refused_now, policy, name, error);
        }
    }
    if (ok) {
        bson_destroy(&state->refused);
        bson_steal(&state->refused, &refused_now);
    } else {
        bson_destroy(&refused_now);
    }
    return ok;
}

/* The collection options that make a write refused: validator, level, action,
 * with mongod's defaults for the missing ones, so that two listings compare. */
static void validation_of(const bson_t *info, bson_t *out)
{
    bson_iter_t iter, field;
    bson_init(out);
    bool has_options = bson_iter_init_find(&iter, info, "options") && BSON_ITER_HOLDS_DOCUMENT(&iter);
    bson_iter_t options;
    if (has_options && bson_iter_recurse(&iter, &options) && bson_iter_find(&options, "validator") &&
        BSON_ITER_HOLDS_DOCUMENT(&options)) {
        bson_append_iter(out, "validator", -1, &options);
    } else {
        bson_t empty = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(out, "validator", &empty);
    }
    const char *fields[] = {"validationLevel", "validationAction"};
    const char *defaults[] = {"strict", "error"};
    for (int i = 0; i < 2; i++) {
        if (has_options && bson_iter_recurse(&iter, &field) && bson_iter_find(&field, fields[i]) &&
            BSON_ITER_HOLDS_UTF8(&field)) {
            bson_append_iter(out, fields[i], -1, &field);
        } else {
            BSON_APPEND_UTF8(out, fields[i], defaults[i]);
        }
    }
}

bool index_sync_collection_info(mongoc_client_t *client, const config_namespace_t *policy, bson_t *out_info,
                                bool *out_exists, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, filter, batch, view;
    bson_iter_t iter;
    BSON_APPEND_INT32(&command, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "name", policy->collection);
    bson_append_document_end(&command, &filter);
    bool exists = false;
    bool ok = index_sync_list(client, policy->database, &command, &batch, &exists, error);
    bson_init(out_info);
    *out_exists = false;
    if (ok && bson_iter_init(&iter, &batch) && bson_iter_next(&iter) && bson_view_of(&iter, &view)) {
        bson_concat(out_info, &view);
        *out_exists = true;
    }
    bson_destroy(&batch);
    bson_destroy(&command);
    return ok;
}

/* A collection's default collation as listCollections shows it, without its ICU
 * version (empty: binary). */
static void default_collation_of(const bson_t *info, bson_t *out)
{
    bson_iter_t iter, options;
    bson_init(out);
    if (bson_iter_init_find(&iter, info, "options") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, &options) && bson_iter_find(&options, "collation") &&
        BSON_ITER_HOLDS_DOCUMENT(&options)) {
        append_collation_without_version(out, "collation", &options);
    }
}

/* The fast tier's collection created as the archive's, or told apart from it: its
 * default collation can be given only at its creation (no command changes it),
 * so a fast tier that created the collection without it (a client's write before
 * the first sync) compares strings otherwise than the archive until the
 * collection is dropped there and synced again: logged once, as an error. */
static bool check_default_collation(const config_namespace_t *policy, const bson_t *archive_info,
                                    const bson_t *fast_info, index_sync_state_t *state)
{
    bson_t wanted, held;
    default_collation_of(archive_info, &wanted);
    default_collation_of(fast_info, &held);
    bool same = bson_equal(&wanted, &held);
    if (!same && !state->collation_differs) {
        char *archive_json = bson_as_relaxed_extended_json(&wanted, NULL);
        char *fast_json = bson_as_relaxed_extended_json(&held, NULL);
        TC_LOG_ATTRS(TC_LOG_ERROR, LOG_COMPONENT, 0,
                     "{ns}: the fast tier's collection has another default collation than the archive's (archive "
                     "{archive}, fast tier {fast}): queries without a collation match strings differently there. "
                     "Stop the proxies, drop the collection on the fast tier and start them again: the warmer creates "
                     "it as the archive's and copies the window again",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("archive", archive_json),
                     TC_ATTR_STR("fast", fast_json));
        bson_free(archive_json);
        bson_free(fast_json);
    }
    state->collation_differs = !same;
    bson_destroy(&wanted);
    bson_destroy(&held);
    return same;
}

/* Makes the fast tier's collection take the archive's options: created with its
 * validator and default collation when missing, collMod'ed when the validator
 * differs. */
static bool sync_collection_options(mongoc_client_t *archive, mongoc_client_t *fast,
                                    const config_namespace_t *policy, index_sync_state_t *state, bson_error_t *error)
{
    bson_t archive_info, fast_info, wanted, held, collation;
    bool archive_exists = false, fast_exists = false, ok = false;
    bson_init(&wanted);
    bson_init(&held);
    bson_init(&collation);
    bson_init(&fast_info);
    TC_CHECK(index_sync_collection_info(archive, policy, &archive_info, &archive_exists, error));
    TC_CHECK(index_sync_collection_info(fast, policy, &fast_info, &fast_exists, error));
    bson_destroy(&wanted);
    bson_destroy(&held);
    bson_destroy(&collation);
    validation_of(&archive_info, &wanted);
    validation_of(&fast_info, &held);
    default_collation_of(&archive_info, &collation);
    ok = true;
    if (!archive_exists) {
        goto done;
    }
    if (fast_exists) {
        check_default_collation(policy, &archive_info, &fast_info, state);
        if (bson_equal(&wanted, &held)) {
            goto done;
        }
    } else if (bson_equal(&wanted, &held) && bson_empty(&collation)) {
        goto done; /* the first write creates it as the archive's */
    }
    bson_t command = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&command, fast_exists ? "collMod" : "create", policy->collection);
    bson_concat(&command, &wanted);
    if (!fast_exists) {
        bson_concat(&command, &collation);
    }
    bson_error_t refusal;
    if (run_on_fast(fast, policy, &command, &refusal)) {
        state->options_refused = false;
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{ns}: the fast tier's collection has the archive's options now",
                     TC_ATTR_STR("ns", policy->ns));
    } else if (tier_error_is_transient(&refusal)) {
        *error = refusal;
        ok = false;
    } else if (!state->options_refused) {
        state->options_refused = true;
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{ns}: the fast tier refused the archive's collection options ({error}): a write the archive "
                     "would refuse is accepted by the proxy and refused by the archive when the feeder replays it",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("error", refusal.message));
    }
done:
    bson_destroy(&archive_info);
    bson_destroy(&fast_info);
    bson_destroy(&wanted);
    bson_destroy(&held);
    bson_destroy(&collation);
    return ok;
}

/* Writes the TTL rules where the evictor (of any process) reads them, when they changed. */
static bool save_ttl_rules(mongoc_client_t *fast, const config_namespace_t *policy, bson_t *rules,
                           index_sync_state_t *state, bson_error_t *error)
{
    if (state->ttl_written && bson_equal(&state->ttl, rules)) {
        return true;
    }
    bson_t command = BSON_INITIALIZER, updates, statement, query, document, reply;
    BSON_APPEND_UTF8(&command, "update", TIER_INDEXES_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_UTF8(&query, "_id", policy->ns);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &document);
    BSON_APPEND_UTF8(&document, "_id", policy->ns);
    BSON_APPEND_ARRAY(&document, "ttl", rules);
    BSON_APPEND_DATE_TIME(&document, "updatedAt", clock_wall_ms());
    bson_append_document_end(&statement, &document);
    BSON_APPEND_BOOL(&statement, "upsert", true);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    bool ok = tier_command(fast, TIER_DATABASE, &command, &reply, error);
    bson_destroy(&reply);
    bson_destroy(&command);
    if (ok) {
        if (!bson_empty(rules) || state->ttl_written) {
            TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                         "{ns}: {ttlIndexes} TTL index(es) of the archive; the evictor removes expired fast-tier "
                         "copies",
                         TC_ATTR_STR("ns", policy->ns), TC_ATTR_INT("ttlIndexes", bson_count_keys(rules)));
        }
        bson_destroy(&state->ttl);
        bson_copy_to(rules, &state->ttl);
        state->ttl_written = true;
    }
    return ok;
}

/* listIndexes of policy's collection on both tiers; both arrays always initialised. */
static bool list_both_indexes(mongoc_client_t *archive, mongoc_client_t *fast, const config_namespace_t *policy,
                              bson_t *out_archive, bool *out_archive_exists, bson_t *out_fast, bool *out_fast_exists,
                              bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&command, "listIndexes", policy->collection);
    bool ok = index_sync_list(archive, policy->database, &command, out_archive, out_archive_exists, error);
    if (ok) {
        ok = index_sync_list(fast, policy->database, &command, out_fast, out_fast_exists, error);
    } else {
        bson_init(out_fast);
    }
    bson_destroy(&command);
    return ok;
}

bool index_sync_namespace(tier_context_t *context, mongoc_client_t *archive, mongoc_client_t *fast,
                          const config_namespace_t *policy, index_sync_state_t *state, bson_error_t *error)
{
    (void)context;
    bson_t archive_specs, fast_specs, wanted, ttl, command = BSON_INITIALIZER;
    bool archive_exists = false, fast_exists = false, ok = false;
    bson_init(&wanted);
    bson_init(&ttl);
    BSON_APPEND_UTF8(&command, "listIndexes", policy->collection);
    TC_CHECK(list_both_indexes(archive, fast, policy, &archive_specs, &archive_exists, &fast_specs, &fast_exists,
                               error));
    TC_CHECK(sync_collection_options(archive, fast, policy, state, error));
    bson_destroy(&wanted);
    bson_destroy(&ttl);
    desired_specs(policy, &archive_specs, archive_exists, state, &wanted, &ttl);
    TC_CHECK(drop_extra_indexes(fast, policy, &fast_specs, &wanted, error));
    /* What the drops left, so that a rebuilt index is created again. */
    bson_destroy(&fast_specs);
    TC_CHECK(index_sync_list(fast, policy->database, &command, &fast_specs, &fast_exists, error));
    TC_CHECK(create_missing_indexes(fast, policy, &fast_specs, &wanted, state, error));
    TC_CHECK(save_ttl_rules(fast, policy, &ttl, state, error));
    ok = true;
done:
    bson_destroy(&command);
    bson_destroy(&archive_specs);
    bson_destroy(&fast_specs);
    bson_destroy(&wanted);
    bson_destroy(&ttl);
    return ok;
}

bool index_sync_append_ttl_conditions(mongoc_client_t *fast, const char *ns, int64_t now_ms, bson_t *out_or,
                                      uint32_t *position, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, documents;
    bson_iter_t iter, rules, rule, field;
    BSON_APPEND_UTF8(&filter, "_id", ns);
    bool ok = tier_read_state(fast, TIER_INDEXES_COLLECTION, &filter, &documents, error);
    bson_destroy(&filter);
    if (ok && bson_iter_init(&iter, &documents) && bson_iter_next(&iter) && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, &rules) && bson_iter_find(&rules, "ttl") && BSON_ITER_HOLDS_ARRAY(&rules)) {
        bson_iter_recurse(&rules, &rule);
        while (bson_iter_next(&rule)) {
            uint32_t length;
            const uint8_t *data;
            bson_t view, condition = BSON_INITIALIZER, bound;
            if (!BSON_ITER_HOLDS_DOCUMENT(&rule)) {
                continue;
            }
            bson_iter_document(&rule, &length, &data);
            bson_init_static(&view, data, length);
            if (!bson_iter_init_find(&field, &view, "field") || !BSON_ITER_HOLDS_UTF8(&field)) {
                continue;
            }
            const char *path = bson_iter_utf8(&field, NULL);
            int64_t seconds = bson_iter_init_find(&field, &view, "expireAfterSeconds") ? bson_iter_as_int64(&field)
                                                                                         : 0;
            /* mongod's rule: a date (or, in an array, the earliest one) older than
             * now - expireAfterSeconds; $lt on a date matches exactly those. */
            bson_append_document_begin(&condition, path, -1, &bound);
            BSON_APPEND_DATE_TIME(&bound, "$lt", now_ms - seconds * 1000);
            bson_append_document_end(&condition, &bound);
            append_indexed(out_or, position, &condition);
            bson_destroy(&condition);
        }
    }
    bson_destroy(&documents);
    return ok;
}

/* The names of the specs of from (a BSON array) that other (by name and spec, as
 * held_as_wanted compares them) lacks, appended to out. from_fast: from holds the
 * fast tier's specs (stripped before comparing), else the wanted ones. */
static void append_unmatched(const bson_t *from, const bson_t *other, bool from_fast, bson_t *out)
{
    bson_iter_t iter;
    uint32_t position = bson_count_keys(out);
    bson_iter_init(&iter, from);
    while (bson_iter_next(&iter)) {
        bson_t spec, match;
        if (!bson_view_of(&iter, &spec) || strcmp(spec_name(&spec), "_id_") == 0) {
            continue;
        }
        const char *name = spec_name(&spec);
        bool matched = find_spec(other, name, &match) &&
                       (from_fast ? held_as_wanted(&spec, &match) : held_as_wanted(&match, &spec));
        if (!matched) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(position++, &key_string, key, sizeof key);
            BSON_APPEND_UTF8(out, key_string, name);
        }
    }
}

bool index_sync_plan(mongoc_client_t *archive, mongoc_client_t *fast, const config_namespace_t *policy,
                     bool *out_fast_exists, bson_t *out_create, bson_t *out_drop, bool *out_validation_differs,
                     bool *out_collation_differs, bson_error_t *error)
{
    bson_t archive_specs, fast_specs, wanted, ttl, archive_info, fast_info, wanted_validation, held_validation;
    bool archive_exists = false, info_exists = false, ok = false;
    index_sync_state_t scratch; /* the sync's memory between runs: none here, and no log line */
    index_sync_state_init(&scratch);
    scratch.time_index_warned = true;
    bson_init(out_create);
    bson_init(out_drop);
    bson_init(&archive_info);
    bson_init(&fast_info);
    *out_fast_exists = false;
    *out_validation_differs = false;
    *out_collation_differs = false;
    TC_CHECK(list_both_indexes(archive, fast, policy, &archive_specs, &archive_exists, &fast_specs, out_fast_exists,
                               error));
    bson_destroy(&archive_info);
    TC_CHECK(index_sync_collection_info(archive, policy, &archive_info, &info_exists, error));
    bson_destroy(&fast_info);
    TC_CHECK(index_sync_collection_info(fast, policy, &fast_info, out_fast_exists, error));
    desired_specs(policy, &archive_specs, archive_exists, &scratch, &wanted, &ttl);
    append_unmatched(&fast_specs, &wanted, true, out_drop);
    append_unmatched(&wanted, &fast_specs, false, out_create);
    validation_of(&archive_info, &wanted_validation);
    validation_of(&fast_info, &held_validation);
    *out_validation_differs = archive_exists && !bson_equal(&wanted_validation, &held_validation);
    scratch.collation_differs = true; /* nothing to log here */
    *out_collation_differs = info_exists && *out_fast_exists &&
                             !check_default_collation(policy, &archive_info, &fast_info, &scratch);
    bson_destroy(&wanted_validation);
    bson_destroy(&held_validation);
    bson_destroy(&wanted);
    bson_destroy(&ttl);
    ok = true;
done:
    bson_destroy(&archive_specs);
    bson_destroy(&fast_specs);
    bson_destroy(&archive_info);
    bson_destroy(&fast_info);
    index_sync_state_cleanup(&scratch);
    return ok;
}
