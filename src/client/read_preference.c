/* $readPreference parsing (mongos's ReadPreferenceSetting::fromInnerBSON rules and
 * messages) and member selection (the server selection specification's steps for a
 * replica set: candidates by mode, maxStalenessSeconds, tag sets, latency). */
#include "client/read_preference.h"

#include "common/timestamp.h"
#include "query/value_format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MINIMUM_MAX_STALENESS_SECONDS 90

static const char *const mode_names[] = {
    [READ_PREFERENCE_PRIMARY] = "primary",
    [READ_PREFERENCE_PRIMARY_PREFERRED] = "primaryPreferred",
    [READ_PREFERENCE_SECONDARY] = "secondary",
    [READ_PREFERENCE_SECONDARY_PREFERRED] = "secondaryPreferred",
    [READ_PREFERENCE_NEAREST] = "nearest",
};

const char *read_preference_mode_name(read_preference_mode_t mode)
{
    return mode_names[mode];
}

/* --- parsing ------------------------------------------------------------------- */

static bool wrong_type(bson_error_t *error, const char *field, const char *expected, const bson_iter_t *iter)
{
    return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "\"%s\" had the wrong type. Expected %s, found %s", field,
                        expected, value_type_name(bson_iter_type(iter)));
}

static bool parse_mode(const bson_t *document, read_preference_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, document, "mode")) {
        return tc_error_set(error, TC_ERR_NO_SUCH_KEY, "Missing expected field \"mode\"");
    }
    if (!BSON_ITER_HOLDS_UTF8(&iter)) {
        return wrong_type(error, "mode", "string", &iter);
    }
    const char *name = bson_iter_utf8(&iter, NULL);
    for (size_t mode = 0; mode < sizeof mode_names / sizeof mode_names[0]; mode++) {
        if (strcmp(name, mode_names[mode]) == 0) {
            out->mode = (read_preference_mode_t)mode;
            return true;
        }
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE,
                        "Could not parse $readPreference mode '%s'. Only the modes 'primary', 'primaryPreferred', "
                        "'secondary', 'secondaryPreferred', and 'nearest' are supported. :: caused by :: "
                        "Enumeration value '%s' for field 'mode' is not a valid value.",
                        name, name);
}

static bool parse_hedge(const bson_t *document, read_preference_t *out, bson_error_t *error)
{
    bson_iter_t iter, field;
    if (!bson_iter_init_find(&iter, document, "hedge")) {
        out->has_hedge = out->mode == READ_PREFERENCE_NEAREST;
        out->hedge_enabled = out->has_hedge;
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_string_t *value = bson_string_new(NULL);
        value_format_append(value, bson_iter_value(&iter));
        tc_error_set(error, TC_ERR_TYPE_MISMATCH, "hedge field must be of type object if provided; found hedge: %s",
                     value->str);
        bson_string_free(value, true);
        return false;
    }
    out->has_hedge = true;
    out->hedge_enabled = true; /* HedgingMode's default */
    bson_iter_recurse(&iter, &field);
    while (bson_iter_next(&field)) {
        if (strcmp(bson_iter_key(&field), "enabled") != 0) {
            return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field 'hedge.%s' is an unknown field.",
                                bson_iter_key(&field));
        }
        if (!BSON_ITER_HOLDS_BOOL(&field)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "BSON field 'hedge.enabled' is the wrong type '%s', expected type 'bool'",
                                value_type_name(bson_iter_type(&field)));
        }
        out->hedge_enabled = bson_iter_bool(&field);
    }
    if (out->hedge_enabled && out->mode == READ_PREFERENCE_PRIMARY) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                            "cannot enable hedging for $readPreference mode \"primaryOnly\"");
    }
    return true;
}

/* [] and [{}] both mean "no tags": the default of every mode. */
static bool parse_tags(const bson_t *document, read_preference_t *out, bson_error_t *error)
{
    bson_iter_t iter, sets;
    if (!bson_iter_init_find(&iter, document, "tags")) {
        return true;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&iter)) {
        return wrong_type(error, "tags", "array", &iter);
    }
    bson_iter_recurse(&iter, &sets);
    uint32_t count = 0;
    bool first_is_empty = false;
    while (bson_iter_next(&sets)) {
        bson_iter_t fields;
        if (count++ == 0) {
            first_is_empty = BSON_ITER_HOLDS_DOCUMENT(&sets) && bson_iter_recurse(&sets, &fields) &&
                             !bson_iter_next(&fields);
        }
    }
    if (count == 0 || (count == 1 && first_is_empty)) {
        return true;
    }
    if (out->mode == READ_PREFERENCE_PRIMARY) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Only empty tags are allowed with primary read preference");
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_array(&iter, &length, &data);
    bson_t array;
    bson_init_static(&array, data, length);
    bson_destroy(&out->tag_sets);
    bson_copy_to(&array, &out->tag_sets);
    out->tag_set_count = count;
    return true;
}

static bool parse_max_staleness(const bson_t *document, read_preference_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    int64_t seconds = 0;
    if (bson_iter_init_find(&iter, document, "maxStalenessSeconds")) {
        if (BSON_ITER_HOLDS_INT32(&iter) || BSON_ITER_HOLDS_INT64(&iter)) {
            seconds = bson_iter_as_int64(&iter);
        } else if (BSON_ITER_HOLDS_DOUBLE(&iter)) {
            double value = bson_iter_double(&iter);
            if (!(value == trunc(value) && value >= -9.2e18 && value <= 9.2e18)) {
                bson_string_t *text = bson_string_new(NULL);
                value_format_append(text, bson_iter_value(&iter));
                tc_error_set(error, TC_ERR_BAD_VALUE,
                             "Expected field \"maxStalenessSeconds\" to have a value exactly representable as a "
                             "64-bit integer, but found %s",
                             text->str);
                bson_string_free(text, true);
                return false;
            }
            seconds = (int64_t)value;
        } else {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "Expected field \"maxStalenessSeconds\" to have numeric type, but found %s",
                                value_type_name(bson_iter_type(&iter)));
        }
    }
    if (seconds < 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "maxStalenessSeconds must be a non-negative integer");
    }
    if (seconds > 0 && seconds < MINIMUM_MAX_STALENESS_SECONDS) {
        return tc_error_set(error, TC_ERR_MAX_STALENESS_OUT_OF_RANGE,
                            "maxStalenessSeconds value can not be less than %d", MINIMUM_MAX_STALENESS_SECONDS);
    }
    if (seconds > 0 && out->mode == READ_PREFERENCE_PRIMARY) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "maxStalenessSeconds can not be set for the primary mode");
    }
    out->max_staleness_seconds = seconds;
    return true;
}

bool read_preference_parse(const bson_t *command, read_preference_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    bson_init(&out->tag_sets);
    out->mode = READ_PREFERENCE_PRIMARY;
    if (!bson_iter_init_find(&iter, command, "$readPreference")) {
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$readPreference has incorrect type: expected object but got %s",
                            value_type_name(bson_iter_type(&iter)));
    }
    uint32_t length;
    const uint8_t *data;
    bson_t document;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(&document, data, length);
    return parse_mode(&document, out, error) && parse_hedge(&document, out, error) &&
           parse_tags(&document, out, error) && parse_max_staleness(&document, out, error);
}

void read_preference_cleanup(read_preference_t *preference)
{
    if (preference != NULL) {
        bson_destroy(&preference->tag_sets);
    }
}

char *read_preference_describe(const read_preference_t *preference)
{
    bson_string_t *text = bson_string_new("{ mode: \"");
    bson_string_append(text, read_preference_mode_name(preference->mode));
    bson_string_append(text, "\"");
    if (preference->tag_set_count > 0) {
        bson_value_t tags = {.value_type = BSON_TYPE_ARRAY};
        tags.value.v_doc.data = (uint8_t *)bson_get_data(&preference->tag_sets);
        tags.value.v_doc.data_len = preference->tag_sets.len;
        bson_string_append(text, ", tags: ");
        value_format_append(text, &tags);
    }
    if (preference->max_staleness_seconds > 0) {
        bson_string_append_printf(text, ", maxStalenessSeconds: %lld", (long long)preference->max_staleness_seconds);
    }
    if (preference->has_hedge) {
        bson_string_append_printf(text, ", hedge: { enabled: %s }", preference->hedge_enabled ? "true" : "false");
    }
    bson_string_append(text, " }");
    return bson_string_free(text, false);
}

/* --- topologies ------------------------------------------------------------------- */

read_preference_member_t *read_preference_topology_add(read_preference_topology_t *topology, const char *address,
                                                        read_preference_member_type_t type, const bson_t *tags)
{
    topology->members =
        bson_realloc(topology->members, (topology->member_count + 1) * sizeof *topology->members);
    read_preference_member_t *member = &topology->members[topology->member_count++];
    memset(member, 0, sizeof *member);
    snprintf(member->address, sizeof member->address, "%s", address);
    member->type = type;
    member->round_trip_ms = -1;
    if (tags != NULL) {
        bson_copy_to(tags, &member->tags);
    } else {
        bson_init(&member->tags);
    }
    return member;
}

static bool listed(const read_preference_topology_t *topology, const char *address)
{
    for (size_t i = 0; i < topology->member_count; i++) {
        if (strcmp(topology->members[i].address, address) == 0) {
            return true;
        }
    }
    return false;
}

void read_preference_topology_from_hello(const bson_t *hello, int64_t now_ms, read_preference_topology_t *out)
{
    bson_iter_t iter, child;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init_find(&iter, hello, "setName") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        out->standalone = true;
        read_preference_topology_add(out, "", READ_PREFERENCE_MEMBER_PRIMARY, NULL);
        return;
    }
    snprintf(out->set_name, sizeof out->set_name, "%s", bson_iter_utf8(&iter, NULL));
    const char *me = "";
    if (bson_iter_init_find(&iter, hello, "me") && BSON_ITER_HOLDS_UTF8(&iter)) {
        me = bson_iter_utf8(&iter, NULL);
    }
    bson_t tags = BSON_INITIALIZER;
    if (bson_iter_init_find(&iter, hello, "tags") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_destroy(&tags);
        bson_init_static(&tags, data, length);
    }
    bool writable = (bson_iter_init_find(&iter, hello, "isWritablePrimary") && bson_iter_as_bool(&iter)) ||
                    (bson_iter_init_find(&iter, hello, "ismaster") && bson_iter_as_bool(&iter));
    bool secondary = bson_iter_init_find(&iter, hello, "secondary") && bson_iter_as_bool(&iter);
    read_preference_member_t *self = read_preference_topology_add(
        out, me, writable ? READ_PREFERENCE_MEMBER_PRIMARY
                          : secondary ? READ_PREFERENCE_MEMBER_SECONDARY : READ_PREFERENCE_MEMBER_OTHER,
        &tags);
    bson_destroy(&tags);
    self->last_update_ms = now_ms;
    if (bson_iter_init(&iter, hello) && bson_iter_find_descendant(&iter, "lastWrite.lastWriteDate", &child) &&
        BSON_ITER_HOLDS_DATE_TIME(&child)) {
        self->last_write_ms = bson_iter_date_time(&child);
    }
    if (bson_iter_init(&iter, hello) && bson_iter_find_descendant(&iter, "lastWrite.opTime.ts", &child) &&
        BSON_ITER_HOLDS_TIMESTAMP(&child)) {
        self->last_write_time = timestamp_of_iter(&child);
    }
    static const char *const lists[] = {"hosts", "passives", "arbiters"};
    for (size_t list = 0; list < sizeof lists / sizeof lists[0]; list++) {
        if (!bson_iter_init_find(&iter, hello, lists[list]) || !BSON_ITER_HOLDS_ARRAY(&iter)) {
            continue;
        }
        bson_iter_recurse(&iter, &child);
        while (bson_iter_next(&child)) {
            if (BSON_ITER_HOLDS_UTF8(&child) && !listed(out, bson_iter_utf8(&child, NULL))) {
                read_preference_topology_add(out, bson_iter_utf8(&child, NULL), READ_PREFERENCE_MEMBER_OTHER, NULL);
            }
        }
    }
}

size_t read_preference_hello_hosts(const bson_t *hello, char (*out_addresses)[READ_PREFERENCE_ADDRESS_SIZE],
                                   size_t capacity)
{
    bson_iter_t iter, child;
    const char *me = "";
    size_t count = 0;
    if (bson_iter_init_find(&iter, hello, "me") && BSON_ITER_HOLDS_UTF8(&iter)) {
        me = bson_iter_utf8(&iter, NULL);
    }
    static const char *const lists[] = {"hosts", "passives"};
    for (size_t list = 0; list < sizeof lists / sizeof lists[0]; list++) {
        if (!bson_iter_init_find(&iter, hello, lists[list]) || !BSON_ITER_HOLDS_ARRAY(&iter)) {
            continue;
        }
        bson_iter_recurse(&iter, &child);
        while (bson_iter_next(&child) && count < capacity) {
            if (!BSON_ITER_HOLDS_UTF8(&child)) {
                continue;
            }
            const char *address = bson_iter_utf8(&child, NULL);
            bool seen = strcmp(address, me) == 0 || strlen(address) >= READ_PREFERENCE_ADDRESS_SIZE;
            for (size_t i = 0; i < count && !seen; i++) {
                seen = strcmp(out_addresses[i], address) == 0;
            }
            if (!seen) {
                snprintf(out_addresses[count++], READ_PREFERENCE_ADDRESS_SIZE, "%s", address);
            }
        }
    }
    return count;
}

void read_preference_topology_cleanup(read_preference_topology_t *topology)
{
    if (topology == NULL) {
        return;
    }
    for (size_t i = 0; i < topology->member_count; i++) {
        bson_destroy(&topology->members[i].tags);
    }
    bson_free(topology->members);
    topology->members = NULL;
    topology->member_count = 0;
}

/* --- selection ------------------------------------------------------------------- */

static const read_preference_member_t *find_primary(const read_preference_topology_t *topology)
{
    for (size_t i = 0; i < topology->member_count; i++) {
        if (topology->members[i].type == READ_PREFERENCE_MEMBER_PRIMARY) {
            return &topology->members[i];
        }
    }
    return NULL;
}

/* The server selection specification's staleness estimate, in milliseconds;
 * INT64_MAX when it cannot be estimated (no lastWrite known). */
static int64_t staleness_ms(const read_preference_topology_t *topology, const read_preference_member_t *member)
{
    const read_preference_member_t *primary = find_primary(topology);
    if (member->type == READ_PREFERENCE_MEMBER_PRIMARY) {
        return 0;
    }
    if (member->last_write_ms == 0) {
        return INT64_MAX;
    }
    if (primary != NULL) {
        if (primary->last_write_ms == 0) {
            return INT64_MAX;
        }
        return (member->last_update_ms - member->last_write_ms) - (primary->last_update_ms - primary->last_write_ms) +
               READ_PREFERENCE_HEARTBEAT_MS;
    }
    int64_t newest = 0;
    for (size_t i = 0; i < topology->member_count; i++) {
        if (topology->members[i].type == READ_PREFERENCE_MEMBER_SECONDARY &&
            topology->members[i].last_write_ms > newest) {
            newest = topology->members[i].last_write_ms;
        }
    }
    return newest - member->last_write_ms + READ_PREFERENCE_HEARTBEAT_MS;
}

/* Whether member's tags hold every field of the tag set (string values compared). */
static bool tags_match(const read_preference_member_t *member, const bson_iter_t *tag_set)
{
    bson_iter_t wanted, held;
    if (!BSON_ITER_HOLDS_DOCUMENT(tag_set) || !bson_iter_recurse(tag_set, &wanted)) {
        return false;
    }
    while (bson_iter_next(&wanted)) {
        if (!bson_iter_init_find(&held, &member->tags, bson_iter_key(&wanted)) || !BSON_ITER_HOLDS_UTF8(&held) ||
            !BSON_ITER_HOLDS_UTF8(&wanted) || strcmp(bson_iter_utf8(&held, NULL), bson_iter_utf8(&wanted, NULL)) != 0) {
            return false;
        }
    }
    return true;
}

/* Marks in eligible[] the members of the mode's candidates that pass the
 * staleness filter and the first tag set any of them matches. */
static size_t filter_candidates(const read_preference_topology_t *topology, const read_preference_t *preference,
                                bool with_primary, bool with_secondaries, bool *eligible)
{
    size_t count = 0;
    for (size_t i = 0; i < topology->member_count; i++) {
        const read_preference_member_t *member = &topology->members[i];
        eligible[i] = (with_primary && member->type == READ_PREFERENCE_MEMBER_PRIMARY) ||
                      (with_secondaries && member->type == READ_PREFERENCE_MEMBER_SECONDARY);
        if (eligible[i] && preference->max_staleness_seconds > 0 &&
            staleness_ms(topology, member) > preference->max_staleness_seconds * 1000) {
            eligible[i] = false;
        }
        count += eligible[i];
    }
    if (count == 0 || preference->tag_set_count == 0) {
        return count;
    }
    bson_iter_t tag_sets;
    bson_iter_init(&tag_sets, &preference->tag_sets);
    while (bson_iter_next(&tag_sets)) {
        size_t matching = 0;
        for (size_t i = 0; i < topology->member_count; i++) {
            matching += eligible[i] && tags_match(&topology->members[i], &tag_sets);
        }
        if (matching > 0) {
            for (size_t i = 0; i < topology->member_count; i++) {
                eligible[i] = eligible[i] && tags_match(&topology->members[i], &tag_sets);
            }
            return matching;
        }
    }
    memset(eligible, 0, topology->member_count * sizeof *eligible);
    return 0;
}

/* A member's round trip for the latency window: unknown counts as 0 (inside any window). */
static int64_t window_round_trip(const read_preference_member_t *member)
{
    return member->round_trip_ms < 0 ? 0 : member->round_trip_ms;
}

/* Whether member i comes before member j in the window: the lower round trip,
 * then the primary, then the first listed. */
static bool window_before(const read_preference_topology_t *topology, size_t i, size_t j)
{
    int64_t here = window_round_trip(&topology->members[i]);
    int64_t there = window_round_trip(&topology->members[j]);
    if (here != there) {
        return here < there;
    }
    bool i_primary = topology->members[i].type == READ_PREFERENCE_MEMBER_PRIMARY;
    bool j_primary = topology->members[j].type == READ_PREFERENCE_MEMBER_PRIMARY;
    if (i_primary != j_primary) {
        return i_primary;
    }
    return i < j;
}

/* The eligible members within READ_PREFERENCE_LATENCY_WINDOW_MS of the lowest round
 * trip, in window order; random picks one, as a mongos spreads reads among them. */
static size_t choose_in_window(const read_preference_topology_t *topology, const bool *eligible, uint32_t random)
{
    int64_t lowest = INT64_MAX;
    for (size_t i = 0; i < topology->member_count; i++) {
        if (eligible[i] && window_round_trip(&topology->members[i]) < lowest) {
            lowest = window_round_trip(&topology->members[i]);
        }
    }
    size_t *window = bson_malloc0((topology->member_count + 1) * sizeof *window);
    size_t count = 0;
    for (size_t i = 0; i < topology->member_count; i++) {
        if (!eligible[i] || window_round_trip(&topology->members[i]) > lowest + READ_PREFERENCE_LATENCY_WINDOW_MS) {
            continue;
        }
        size_t position = count++;
        while (position > 0 && window_before(topology, i, window[position - 1])) {
            window[position] = window[position - 1];
            position--;
        }
        window[position] = i;
    }
    size_t chosen = window[random % count];
    bson_free(window);
    return chosen;
}

bool read_preference_select(const read_preference_topology_t *topology, const read_preference_t *preference,
                            uint32_t random, size_t *out_index, bson_error_t *error)
{
    const read_preference_member_t *primary = find_primary(topology);
    bool *eligible = bson_malloc0(topology->member_count + 1);
    size_t count = 0;
    if (topology->standalone && topology->member_count > 0) {
        eligible[0] = true;
        count = 1;
    } else {
        switch (preference->mode) {
        case READ_PREFERENCE_PRIMARY: count = filter_candidates(topology, preference, true, false, eligible); break;
        case READ_PREFERENCE_PRIMARY_PREFERRED:
            /* The primary whatever the tags; secondaries only without one. */
            if (primary != NULL) {
                eligible[primary - topology->members] = true;
                count = 1;
            } else {
                count = filter_candidates(topology, preference, false, true, eligible);
            }
            break;
        case READ_PREFERENCE_SECONDARY: count = filter_candidates(topology, preference, false, true, eligible); break;
        case READ_PREFERENCE_SECONDARY_PREFERRED:
            count = filter_candidates(topology, preference, false, true, eligible);
            if (count == 0 && primary != NULL) {
                eligible[primary - topology->members] = true;
                count = 1;
            }
            break;
        case READ_PREFERENCE_NEAREST: count = filter_candidates(topology, preference, true, true, eligible); break;
        }
    }
    if (count == 0) {
        bson_free(eligible);
        char *described = read_preference_describe(preference);
        tc_error_set(error, TC_ERR_FAILED_TO_SATISFY_READ_PREFERENCE,
                     "Could not find host matching read preference %s for set %s", described, topology->set_name);
        bson_free(described);
        return false;
    }
    *out_index = choose_in_window(topology, eligible, random);
    bson_free(eligible);
    return true;
}
