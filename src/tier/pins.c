/* Pins and eviction intents across processes (pins.h): their documents, filters
 * and rules, pure. */
#include "tier/pins.h"

#include "query/order.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PIN_CALLS_MARGIN_MS 5000
#define EVICTION_MIN_LIFETIME_MS 1000

bool tier_pins_in_fast_tier(bool evictor_runs_here, int peers)
{
    return !evictor_runs_here || peers > 0;
}

int64_t tier_pin_lifetime_ms(const config_t *config)
{
    return 2 * (tier_eviction_lifetime_ms(config) + config->read_your_writes_wait_ms + config->failover_wait_ms) +
           PIN_CALLS_MARGIN_MS;
}

bool tier_pin_fresh(const config_t *config, int64_t sent_ms, int64_t now_ms)
{
    return now_ms - sent_ms < tier_pin_lifetime_ms(config) / 2;
}

int64_t tier_eviction_lifetime_ms(const config_t *config)
{
    return config->lease_timeout_ms > EVICTION_MIN_LIFETIME_MS ? config->lease_timeout_ms : EVICTION_MIN_LIFETIME_MS;
}

bool tier_eviction_fresh(const config_t *config, int64_t sent_ms, int64_t now_ms)
{
    return now_ms - sent_ms < tier_eviction_lifetime_ms(config) / 2;
}

void tier_pins_holder(char *out, size_t size)
{
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    snprintf(out, size, "%s pid %d", host, (int)getpid());
}

/* {q: {_id: key}, u: {$set: {ns, <fields>, holder, lifetimeMillis}, $currentDate: {at: true}}, upsert: true}:
 * the opening, up to $set's ns; close_upsert ends it. */
static void open_upsert(bson_t *statements, const char *statement_key, const bson_oid_t *key, const char *ns,
                        bson_t *statement, bson_t *update, bson_t *set)
{
    bson_t query;
    bson_append_document_begin(statements, statement_key, -1, statement);
    BSON_APPEND_DOCUMENT_BEGIN(statement, "q", &query);
    BSON_APPEND_OID(&query, "_id", key);
    bson_append_document_end(statement, &query);
    BSON_APPEND_DOCUMENT_BEGIN(statement, "u", update);
    BSON_APPEND_DOCUMENT_BEGIN(update, "$set", set);
    BSON_APPEND_UTF8(set, "ns", ns);
}

static void close_upsert(bson_t *statements, bson_t *statement, bson_t *update, bson_t *set, const char *holder,
                         int64_t lifetime_ms)
{
    bson_t current;
    BSON_APPEND_UTF8(set, "holder", holder);
    BSON_APPEND_INT64(set, "lifetimeMillis", lifetime_ms);
    bson_append_document_end(update, set);
    BSON_APPEND_DOCUMENT_BEGIN(update, "$currentDate", &current);
    BSON_APPEND_BOOL(&current, "at", true);
    bson_append_document_end(update, &current);
    bson_append_document_end(statement, update);
    BSON_APPEND_BOOL(statement, "upsert", true);
    bson_append_document_end(statements, statement);
}

static const char *array_key(uint32_t index, char *buffer, size_t size)
{
    const char *key;
    bson_uint32_to_string(index, &key, buffer, size);
    return key;
}

void tier_pins_append_upserts(bson_t *statements, uint32_t *index, const char *ns, const bson_t *ids, bool whole,
                              const char *holder, int64_t lifetime_ms, bson_t *out_keys)
{
    char key[16], id_key[16];
    uint32_t key_count = bson_count_keys(out_keys);
    bson_iter_t iter;
    bool more = bson_iter_init(&iter, ids) && bson_iter_next(&iter);
    /* One document per TIER_PIN_IDS_PER_DOCUMENT ids (a document stays far below
     * 16 MB), then the namespace's own. */
    while (more || whole) {
        bson_oid_t oid;
        bson_t statement, update, set, list;
        bool this_is_whole = !more;
        bson_oid_init(&oid, NULL);
        bson_append_oid(out_keys, array_key(key_count++, key, sizeof key), -1, &oid);
        open_upsert(statements, array_key((*index)++, key, sizeof key), &oid, ns, &statement, &update, &set);
        BSON_APPEND_BOOL(&set, "whole", this_is_whole);
        BSON_APPEND_ARRAY_BEGIN(&set, "ids", &list);
        for (uint32_t count = 0; more && count < TIER_PIN_IDS_PER_DOCUMENT; count++) {
            bson_append_iter(&list, array_key(count, id_key, sizeof id_key), -1, &iter);
            more = bson_iter_next(&iter);
        }
        bson_append_array_end(&set, &list);
        close_upsert(statements, &statement, &update, &set, holder, lifetime_ms);
        if (this_is_whole) {
            break;
        }
    }
}

void tier_eviction_append_upsert(bson_t *statements, const char *statement_key, const bson_oid_t *key,
                                 const char *ns, const bson_value_t *ids, size_t count, int64_t term,
                                 const char *holder, int64_t lifetime_ms)
{
    bson_t statement, update, set, list;
    char id_key[16];
    open_upsert(statements, statement_key, key, ns, &statement, &update, &set);
    BSON_APPEND_ARRAY_BEGIN(&set, "ids", &list);
    for (size_t i = 0; i < count; i++) {
        BSON_APPEND_VALUE(&list, array_key((uint32_t)i, id_key, sizeof id_key), &ids[i]);
    }
    bson_append_array_end(&set, &list);
    BSON_APPEND_INT64(&set, "term", term);
    close_upsert(statements, &statement, &update, &set, holder, lifetime_ms);
}

void tier_pins_append_alive(bson_t *filter, bool alive)
{
    /* {$expr: {$gt | $lte: [{$add: ["$at", "$lifetimeMillis"]}, "$$NOW"]}}: a
     * document without `at` sums to null, which is below every date: expired. */
    bson_t expression, operands, sum, terms;
    BSON_APPEND_DOCUMENT_BEGIN(filter, "$expr", &expression);
    BSON_APPEND_ARRAY_BEGIN(&expression, alive ? "$gt" : "$lte", &operands);
    BSON_APPEND_DOCUMENT_BEGIN(&operands, "0", &sum);
    BSON_APPEND_ARRAY_BEGIN(&sum, "$add", &terms);
    BSON_APPEND_UTF8(&terms, "0", "$at");
    BSON_APPEND_UTF8(&terms, "1", "$lifetimeMillis");
    bson_append_array_end(&sum, &terms);
    bson_append_document_end(&operands, &sum);
    BSON_APPEND_UTF8(&operands, "1", "$$NOW");
    bson_append_array_end(&expression, &operands);
    bson_append_document_end(filter, &expression);
}

void tier_pins_filter_for_batch(const char *ns, const bson_value_t *ids, size_t count, bson_t *out)
{
    bson_t clauses, clause, condition, list;
    char key[16];
    bson_init(out);
    BSON_APPEND_UTF8(out, "ns", ns);
    BSON_APPEND_ARRAY_BEGIN(out, "$or", &clauses);
    BSON_APPEND_DOCUMENT_BEGIN(&clauses, "0", &clause);
    BSON_APPEND_BOOL(&clause, "whole", true);
    bson_append_document_end(&clauses, &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clauses, "1", &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "ids", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &list);
    for (size_t i = 0; i < count; i++) {
        BSON_APPEND_VALUE(&list, array_key((uint32_t)i, key, sizeof key), &ids[i]);
    }
    bson_append_array_end(&condition, &list);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&clauses, &clause);
    bson_append_array_end(out, &clauses);
    tier_pins_append_alive(out, true);
}

static bool field_is_true(const bson_t *document, const char *name)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, document, name) && bson_iter_as_bool(&iter);
}

/* Sets out_pinned[i] for each ids[i] equal (as MongoDB compares: 5 and 5.0 are
 * one _id) to a value of the array iter points at. */
static size_t cover_ids(bson_iter_t *pinned_ids, const bson_value_t *ids, size_t count, bool *out_pinned)
{
    size_t set = 0;
    while (bson_iter_next(pinned_ids)) {
        const bson_value_t *pinned = bson_iter_value(pinned_ids);
        for (size_t i = 0; i < count; i++) {
            if (!out_pinned[i] && order_compare_values(pinned, &ids[i]) == 0) {
                out_pinned[i] = true;
                set++;
            }
        }
    }
    return set;
}

size_t tier_pins_covered(const bson_t *pins, const bson_value_t *ids, size_t count, bool *out_pinned)
{
    bson_iter_t iter, field, list;
    size_t set = 0;
    if (!bson_iter_init(&iter, pins)) {
        return 0;
    }
    while (bson_iter_next(&iter)) {
        bson_t pin;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_iter_document(&iter, &length, &data);
        if (!bson_init_static(&pin, data, length)) {
            continue;
        }
        if (field_is_true(&pin, "whole")) {
            for (size_t i = 0; i < count; i++) {
                set += !out_pinned[i];
                out_pinned[i] = true;
            }
            return set;
        }
        if (bson_iter_init_find(&field, &pin, "ids") && BSON_ITER_HOLDS_ARRAY(&field) &&
            bson_iter_recurse(&field, &list)) {
            set += cover_ids(&list, ids, count, out_pinned);
        }
    }
    return set;
}

void tier_evictions_filter_for_pin(const char *ns, const bson_t *ids, bool whole, bson_t *out)
{
    bson_t condition;
    bson_init(out);
    BSON_APPEND_UTF8(out, "ns", ns);
    if (!whole) {
        BSON_APPEND_DOCUMENT_BEGIN(out, "ids", &condition);
        BSON_APPEND_ARRAY(&condition, "$in", ids);
        bson_append_document_end(out, &condition);
    }
    tier_pins_append_alive(out, true);
}

bool tier_eviction_covers(const bson_t *intent, const char *ns, const bson_t *ids, bool whole)
{
    bson_iter_t field, named, id;
    if (!bson_iter_init_find(&field, intent, "ns") || !BSON_ITER_HOLDS_UTF8(&field) ||
        strcmp(bson_iter_utf8(&field, NULL), ns) != 0) {
        return false;
    }
    if (whole) {
        return true;
    }
    if (!bson_iter_init_find(&field, intent, "ids") || !BSON_ITER_HOLDS_ARRAY(&field)) {
        return false;
    }
    bson_iter_recurse(&field, &named);
    while (bson_iter_next(&named)) {
        bson_iter_init(&id, ids);
        while (bson_iter_next(&id)) {
            if (order_compare_values(bson_iter_value(&named), bson_iter_value(&id)) == 0) {
                return true;
            }
        }
    }
    return false;
}

void tier_evictions_filter_for_keys(const bson_t *keys, bson_t *out)
{
    bson_t condition;
    bson_init(out);
    BSON_APPEND_DOCUMENT_BEGIN(out, "_id", &condition);
    BSON_APPEND_ARRAY(&condition, "$in", keys);
    bson_append_document_end(out, &condition);
    tier_pins_append_alive(out, true);
}

uint32_t tier_pins_collect_keys(const bson_t *documents, bson_t *out_keys)
{
    bson_iter_t iter, field;
    char key[16];
    uint32_t count = bson_count_keys(out_keys), added = 0;
    if (!bson_iter_init(&iter, documents)) {
        return 0;
    }
    while (bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &field) && bson_iter_find(&field, "_id")) {
            bson_append_iter(out_keys, array_key(count++, key, sizeof key), -1, &field);
            added++;
        }
    }
    return added;
}
