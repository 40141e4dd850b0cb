/* The checks at start (tier.h, tier_preflight): a namespace the workers cannot
 * tier, or could tier only by scanning the archive on every warmer pass, stops
 * the proxy or the worker before it serves anything, with what to do about it.
 * `thermocline check` (check_namespace.c) asks the same questions. */
#include "tier/index_sync.h"

#include "common/log.h"

#include <string.h>

#define LOG_COMPONENT "TIER"

const char *preflight_untierable_reason(const bson_t *info)
{
    bson_iter_t iter, options;
    if (bson_iter_init_find(&iter, info, "type") && BSON_ITER_HOLDS_UTF8(&iter)) {
        const char *type = bson_iter_utf8(&iter, NULL);
        if (strcmp(type, "timeseries") == 0) {
            return "it is a time-series collection (its documents live in buckets, which the feeder and the "
                   "warmer cannot copy one by one)";
        }
        if (strcmp(type, "view") == 0) {
            return "it is a view (it holds no documents of its own)";
        }
    }
    if (!bson_iter_init_find(&iter, info, "options") || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return NULL;
    }
    bson_iter_recurse(&iter, &options);
    while (bson_iter_next(&options)) {
        const char *key = bson_iter_key(&options);
        if (strcmp(key, "capped") == 0 && bson_iter_as_bool(&options)) {
            return "it is a capped collection (it refuses the evictor's deletes, and its own insertion order "
                   "decides what it keeps)";
        }
        if (strcmp(key, "timeseries") == 0) {
            return "it is a time-series collection (its documents live in buckets, which the feeder and the "
                   "warmer cannot copy one by one)";
        }
        if (strcmp(key, "clusteredIndex") == 0) {
            return "it is a clustered collection (stored in _id order with collection-level options the fast "
                   "tier does not reproduce)";
        }
    }
    return NULL;
}

bool preflight_has_time_field_index(mongoc_client_t *archive, const config_namespace_t *policy, bool *out_has,
                                    bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, specs;
    bson_iter_t iter;
    bool exists = false;
    BSON_APPEND_UTF8(&command, "listIndexes", policy->collection);
    bool ok = index_sync_list(archive, policy->database, &command, &specs, &exists, error);
    *out_has = false;
    if (ok) {
        bson_iter_init(&iter, &specs);
        while (bson_iter_next(&iter) && !*out_has) {
            uint32_t length;
            const uint8_t *data;
            bson_t spec;
            if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
                bson_iter_document(&iter, &length, &data);
                bson_init_static(&spec, data, length);
                *out_has = index_sync_key_starts_with(&spec, policy->time_field);
            }
        }
    }
    bson_destroy(&specs);
    bson_destroy(&command);
    return ok;
}

void preflight_time_index_advice(const config_namespace_t *policy, char *out, size_t size)
{
    snprintf(out, size,
             "%s has no index whose first key is its timeField %s in the archive, so every warmer pass would "
             "scan the whole collection: create it with db.getSiblingDB(\"%s\").runCommand({createIndexes: "
             "\"%s\", indexes: [{key: {%s: 1}, name: \"%s_1\"}]})",
             policy->ns, policy->time_field, policy->database, policy->collection, policy->time_field,
             policy->time_field);
}

/* One namespace: false with the finding in error; *out_unchecked when the archive
 * could not answer (the caller stops asking it). */
static bool preflight_namespace(mongoc_client_t *archive, const config_namespace_t *policy, bool *out_unchecked,
                                bson_error_t *error)
{
    bson_t info;
    bson_error_t read_error;
    bool exists = false, has_index = false, ok = true;
    *out_unchecked = false;
    if (!index_sync_collection_info(archive, policy, &info, &exists, &read_error) ||
        (exists && !preflight_has_time_field_index(archive, policy, &has_index, &read_error))) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "{ns}: cannot check the archive's collection at start ({error})",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("error", read_error.message));
        *out_unchecked = true;
    } else if (!exists) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{ns} does not exist in the archive yet: create its index on {timeField} before loading it (the "
                     "warmer's passes read the window through it)",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_STR("timeField", policy->time_field));
    } else if (preflight_untierable_reason(&info) != NULL) {
        ok = tc_error_set(error, TC_ERR_BAD_VALUE, "%s cannot be tiered: %s", policy->ns, preflight_untierable_reason(&info));
    } else if (!has_index) {
        char advice[600];
        preflight_time_index_advice(policy, advice, sizeof advice);
        if (policy->require_time_field_index) {
            ok = tc_error_set(error, TC_ERR_BAD_VALUE, "%s, or set requireTimeFieldIndex: false for it", advice);
        } else {
            TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0, "{advice} (requireTimeFieldIndex: false: starting anyway)",
                         TC_ATTR_STR("advice", advice), TC_ATTR_STR("ns", policy->ns));
        }
    }
    bson_destroy(&info);
    return ok;
}

bool tier_preflight(const config_t *config, bson_error_t *error)
{
    if (config->namespace_count == 0) {
        return true;
    }
    tier_libmongoc_init();
    mongoc_client_t *archive = tier_client_new(config->archive_uri, "thermocline-preflight", error);
    if (archive == NULL) {
        return false;
    }
    bool ok = true, unchecked = false;
    for (size_t i = 0; i < config->namespace_count && ok && !unchecked; i++) {
        ok = preflight_namespace(archive, &config->namespaces[i], &unchecked, error);
    }
    mongoc_client_destroy(archive);
    return ok;
}
