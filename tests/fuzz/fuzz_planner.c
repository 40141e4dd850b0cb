/* libFuzzer target: the proxy planner's filter analysis (src/proxy/planner*.c). The
 * input is a filter, or a read command (find, count, distinct, aggregate, also under
 * explain), followed by up to MAX_INPUT_DOCUMENTS documents. The planner's answers are
 * checked against the query matcher's semantics (src/query/match.c), the oracle the
 * unit tests also use: a proved lower bound holds for every matching document, a read
 * sent to the fast tier matches nothing outside the horizon, point-read and pinned _ids
 * are exactly / at least the _ids the filter matches, and a delete faults in every
 * archive document outside the horizon it may touch. */
#include "fuzz_common.h"

#include "proxy/planner.h"
#include "proxy/planner_private.h"
#include "query/match.h"
#include "query/order.h"

#define MAX_INPUT_DOCUMENTS 8
/* Time fields tried per input: "createdAt", "meta.ts" and the filter's own fields. */
#define MAX_TIME_FIELDS 8
#define MAX_PROBES 16
#define MAX_CHECKED_DOCUMENTS \
    (MAX_INPUT_DOCUMENTS + FUZZ_FIXED_COUNT + (MAX_INPUT_DOCUMENTS + 1) * MAX_PROBES)

/* The documents one time field is checked against; `owned` ones are freed after. */
typedef struct fuzz_documents {
    const bson_t *documents[MAX_CHECKED_DOCUMENTS];
    bool owned[MAX_CHECKED_DOCUMENTS];
    size_t count;
} fuzz_documents_t;

static void documents_add(fuzz_documents_t *set, const bson_t *document, bool owned)
{
    FUZZ_REQUIRE(set->count < MAX_CHECKED_DOCUMENTS, "document set full");
    set->documents[set->count] = document;
    set->owned[set->count] = owned;
    set->count++;
}

static void documents_truncate(fuzz_documents_t *set, size_t count)
{
    while (set->count > count) {
        set->count--;
        if (set->owned[set->count]) {
            bson_destroy((bson_t *)set->documents[set->count]);
        }
    }
}

static char *to_json(const bson_t *document)
{
    char *text = bson_as_canonical_extended_json(document, NULL);
    return text != NULL ? text : bson_strdup("(not printable)");
}

/* Aborts with both documents printed: the filter (or command) and the witness. */
#define FUZZ_REQUIRE_FOR(condition, subject, witness, ...)                                   \
    do {                                                                                     \
        if (!(condition)) {                                                                  \
            char *subject_json = to_json(subject);                                           \
            char *witness_json = to_json(witness);                                           \
            fprintf(stderr, "subject: %s\ndocument: %s\n", subject_json, witness_json);      \
            bson_free(subject_json);                                                         \
            bson_free(witness_json);                                                         \
            FUZZ_REQUIRE(condition, __VA_ARGS__);                                            \
        }                                                                                    \
    } while (0)

/* ---- which filter a read command applies -------------------------------------- */

static bool sub_document(const bson_iter_t *iter, bson_t *out)
{
    uint32_t length = 0;
    const uint8_t *data = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return false;
    }
    bson_iter_document(iter, &length, &data);
    return bson_init_static(out, data, length);
}

/* The read in command: the command itself or explain's inner command (a view into
 * it), when that is a find, count, distinct or aggregate; its name, else NULL. */
static const char *read_command(const bson_t *command, bson_t *out_read)
{
    bson_iter_t first;
    if (!bson_iter_init(&first, command) || !bson_iter_next(&first)) {
        return NULL;
    }
    if (strcmp(bson_iter_key(&first), "explain") == 0) {
        if (!sub_document(&first, out_read) || !bson_iter_init(&first, out_read) || !bson_iter_next(&first)) {
            return NULL;
        }
    } else if (!bson_init_static(out_read, bson_get_data(command), command->len)) {
        return NULL;
    }
    const char *name = bson_iter_key(&first);
    bool is_read = strcmp(name, "find") == 0 || strcmp(name, "count") == 0 || strcmp(name, "distinct") == 0 ||
                   strcmp(name, "aggregate") == 0;
    return is_read ? name : NULL;
}

static void append_to_array(bson_t *array, uint32_t *count, const bson_iter_t *value)
{
    char index[16];
    const char *key;
    size_t key_length = bson_uint32_to_string((*count)++, &key, index, sizeof index);
    bson_append_iter(array, key, (int)key_length, value);
}

/* The documents a read (named name, from read_command) selects from its collection,
 * as one filter (into out_filter, initialised by the caller): find's filter, count's
 * and distinct's query, the leading run of aggregate's $match stages joined by $and.
 * Absent or null is {}. False when the read is malformed there. */
static bool read_filter(const bson_t *read, const char *name, bson_t *out_filter)
{
    bson_iter_t field;
    bson_t inner;
    if (strcmp(name, "aggregate") == 0) {
        bson_iter_t stage;
        bson_iter_t only_match;
        bson_t matches = BSON_INITIALIZER;
        uint32_t count = 0;
        if (!bson_iter_init_find(&field, read, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&field) ||
            !bson_iter_recurse(&field, &stage)) {
            bson_destroy(&matches);
            return false;
        }
        while (bson_iter_next(&stage)) {
            bson_iter_t body;
            if (!BSON_ITER_HOLDS_DOCUMENT(&stage) || !bson_iter_recurse(&stage, &body) ||
                !bson_iter_next(&body) || strcmp(bson_iter_key(&body), "$match") != 0 ||
                !BSON_ITER_HOLDS_DOCUMENT(&body)) {
                break;
            }
            only_match = body;
            append_to_array(&matches, &count, &body);
        }
        /* One $match as it is (the depth limit counts from it), several under $and;
         * none: the whole collection. */
        if (count == 1 && sub_document(&only_match, &inner)) {
            bson_concat(out_filter, &inner);
        } else if (count > 1) {
            BSON_APPEND_ARRAY(out_filter, "$and", &matches);
        }
        bson_destroy(&matches);
        return true;
    }
    const char *key = strcmp(name, "find") == 0 ? "filter" : "query";
    if (!bson_iter_init_find(&field, read, key) || BSON_ITER_HOLDS_NULL(&field)) {
        return true;
    }
    return sub_document(&field, &inner) && bson_concat(out_filter, &inner);
}

/* ---- time fields and the documents that probe them --------------------------- */

static void add_time_field(const char **fields, size_t *count, const char *field)
{
    if (*count >= MAX_TIME_FIELDS || field[0] == '\0' || field[0] == '$') {
        return;
    }
    for (size_t i = 0; i < *count; i++) {
        if (strcmp(fields[i], field) == 0) {
            return;
        }
    }
    fields[(*count)++] = field;
}

/* Candidates: the usual names, then the fields of filter's top level and of its
 * top-level $and's conjuncts (where a bound can be proved). The names borrow filter. */
static size_t collect_time_fields(const bson_t *filter, const char **fields)
{
    size_t count = 0;
    bson_iter_t iter;
    add_time_field(fields, &count, "createdAt");
    add_time_field(fields, &count, "meta.ts");
    if (!bson_iter_init(&iter, filter)) {
        return count;
    }
    while (bson_iter_next(&iter)) {
        bson_iter_t element;
        add_time_field(fields, &count, bson_iter_key(&iter));
        if (strcmp(bson_iter_key(&iter), "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&iter) &&
            bson_iter_recurse(&iter, &element)) {
            while (bson_iter_next(&element)) {
                bson_iter_t conjunct;
                if (BSON_ITER_HOLDS_DOCUMENT(&element) && bson_iter_recurse(&element, &conjunct)) {
                    while (bson_iter_next(&conjunct)) {
                        add_time_field(fields, &count, bson_iter_key(&conjunct));
                    }
                }
            }
        }
    }
    return count;
}

/* Appends `path: value` to document, a dotted path as nested documents (and, when
 * through_array, the first level as an array of one document). */
static void append_path(bson_t *document, const char *path, bool through_array, const bson_value_t *value)
{
    const char *dot = strchr(path, '.');
    if (dot == NULL) {
        if (value != NULL) {
            bson_append_value(document, path, -1, value);
        }
        return;
    }
    bson_t child;
    bson_t element;
    if (through_array) {
        bson_append_array_begin(document, path, (int)(dot - path), &child);
        bson_append_document_begin(&child, "0", 1, &element);
        append_path(&element, dot + 1, false, value);
        bson_append_document_end(&child, &element);
        bson_append_array_end(document, &child);
    } else {
        bson_append_document_begin(document, path, (int)(dot - path), &child);
        append_path(&child, dot + 1, false, value);
        bson_append_document_end(document, &child);
    }
}

/* Appends iter's element under key as it is. bson_append_iter would warn on stderr
 * about an array whose elements are not named "0", "1"... (fuzzed arrays are not). */
static void append_element(bson_t *document, const char *key, const bson_iter_t *iter)
{
    if (BSON_ITER_HOLDS_ARRAY(iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t view;
        bson_t child;
        bson_iter_array(iter, &length, &data);
        if (bson_init_static(&view, data, length)) {
            bson_append_array_begin(document, key, -1, &child);
            bson_concat(&child, &view);
            bson_append_array_end(document, &child);
        }
        return;
    }
    bson_append_iter(document, key, -1, iter);
}

/* base with the time field's first path component replaced by `path: value` (value
 * NULL: the field removed). Owned by the caller. */
static bson_t *document_with(const bson_t *base, const char *path, bool through_array, const bson_value_t *value)
{
    const char *dot = strchr(path, '.');
    size_t head = dot != NULL ? (size_t)(dot - path) : strlen(path);
    bson_t *document = bson_new();
    bson_iter_t iter;
    if (bson_iter_init(&iter, base)) {
        while (bson_iter_next(&iter)) {
            const char *key = bson_iter_key(&iter);
            if (strlen(key) != head || strncmp(key, path, head) != 0) {
                append_element(document, key, &iter);
            }
        }
    }
    append_path(document, path, through_array, value);
    return document;
}

static bson_value_t date_value(int64_t ms)
{
    bson_value_t value = {.value_type = BSON_TYPE_DATE_TIME};
    value.value.v_datetime = ms;
    return value;
}

/* Values of the time field around the least date the bound allows: the dates just
 * below and at it, the extremes, and values of other types an unsound proof could let
 * through. Array values are built in the scratch documents. */
static size_t probe_values(int64_t least, bson_t *scratch, bson_value_t *out)
{
    size_t count = 0;
    int64_t below = least > INT64_MIN ? least - 1 : least;
    out[count++] = date_value(below);
    out[count++] = date_value(least);
    out[count++] = date_value(INT64_MIN);
    out[count++] = date_value(INT64_MAX);
    /* [below] and [below, least]: an array qualifies through any element. */
    for (int i = 0; i < 2; i++) {
        bson_reinit(&scratch[i]);
        BSON_APPEND_DATE_TIME(&scratch[i], "0", below);
        if (i == 1) {
            BSON_APPEND_DATE_TIME(&scratch[i], "1", least);
        }
        bson_value_t array = {.value_type = BSON_TYPE_ARRAY};
        array.value.v_doc.data = (uint8_t *)bson_get_data(&scratch[i]);
        array.value.v_doc.data_len = scratch[i].len;
        out[count++] = array;
    }
    out[count] = (bson_value_t){.value_type = BSON_TYPE_NULL};
    count++;
    out[count] = (bson_value_t){.value_type = BSON_TYPE_INT64, .value.v_int64 = least};
    count++;
    out[count] = (bson_value_t){.value_type = BSON_TYPE_DOUBLE, .value.v_double = (double)least};
    count++;
    out[count] = (bson_value_t){.value_type = BSON_TYPE_TIMESTAMP,
                                .value.v_timestamp = {.timestamp = UINT32_MAX, .increment = UINT32_MAX}};
    count++;
    out[count] = (bson_value_t){.value_type = BSON_TYPE_MAXKEY};
    count++;
    bson_value_t text = {.value_type = BSON_TYPE_UTF8};
    text.value.v_utf8.str = (char *)"2099-01-01T00:00:00Z";
    text.value.v_utf8.len = 20;
    out[count++] = text;
    FUZZ_REQUIRE(count <= MAX_PROBES, "too many probes");
    return count;
}

/* ---- the checks ----------------------------------------------------------------- */

static match_expression_t *compile_bound(const char *time_field, const char *operator, int64_t ms)
{
    bson_t filter = BSON_INITIALIZER;
    bson_t operand;
    bson_append_document_begin(&filter, time_field, -1, &operand);
    BSON_APPEND_DATE_TIME(&operand, operator, ms);
    bson_append_document_end(&filter, &operand);
    match_expression_t *expression = match_compile(&filter, NULL);
    bson_destroy(&filter);
    return expression;
}

/* A document the archive could hold: one _id, of a type mongod stores as an _id. */
static bool storable_id(const bson_t *document, bson_iter_t *out_id)
{
    bson_iter_t iter;
    unsigned ids = 0;
    if (!bson_iter_init(&iter, document)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "_id") == 0) {
            *out_id = iter;
            ids++;
        }
    }
    if (ids != 1) {
        return false;
    }
    switch (bson_iter_type(out_id)) {
    case BSON_TYPE_ARRAY:
    case BSON_TYPE_REGEX:
    case BSON_TYPE_UNDEFINED:
        return false;
    case BSON_TYPE_DOCUMENT: {
        bson_iter_t child;
        if (!bson_iter_recurse(out_id, &child)) {
            return false;
        }
        while (bson_iter_next(&child)) {
            if (bson_iter_key(&child)[0] == '$') {
                return false;
            }
        }
        return true;
    }
    default:
        return true;
    }
}

static bool id_listed(const bson_iter_t *id, const bson_t *ids)
{
    bson_iter_t listed;
    if (!bson_iter_init(&listed, ids)) {
        return false;
    }
    while (bson_iter_next(&listed)) {
        if (order_compare_iters(id, &listed) == 0) {
            return true;
        }
    }
    return false;
}

/* Point-read ids are exactly the _ids the filter matches; pinned ids at least. */
static void check_ids(const bson_t *filter, const match_expression_t *expression, const fuzz_documents_t *set)
{
    bson_t point_ids = BSON_INITIALIZER;
    bson_t pinned_ids = BSON_INITIALIZER;
    uint32_t point_count = 0;
    uint32_t pinned_count = 0;
    bool point = plan_filter_point_ids(filter, &point_ids, &point_count);
    bool pinned = planner_filter_pinned_ids(filter, &pinned_ids, &pinned_count);
    FUZZ_REQUIRE(point_count == bson_count_keys(&point_ids) && pinned_count == bson_count_keys(&pinned_ids),
                 "id counts disagree with the arrays");
    FUZZ_REQUIRE(point ? point_count > 0 : point_count == 0, "point read with %u ids", point_count);
    FUZZ_REQUIRE(!point || pinned, "a point read pins no _id");
    for (size_t d = 0; d < set->count && (point || pinned); d++) {
        bson_iter_t id;
        if (!storable_id(set->documents[d], &id)) {
            continue;
        }
        bool matched = match_document(expression, set->documents[d]);
        if (point) {
            FUZZ_REQUIRE_FOR(matched == id_listed(&id, &point_ids), filter, set->documents[d],
                             "point-read ids %s the matched document", matched ? "miss" : "list an unmatched");
        }
        if (pinned && matched) {
            FUZZ_REQUIRE_FOR(id_listed(&id, &pinned_ids), filter, set->documents[d],
                             "a matched document's _id is not among the pinned ids");
        }
    }
    bson_destroy(&point_ids);
    bson_destroy(&pinned_ids);
}

static bool plan(const bson_t *command, const char *time_field, int64_t horizon_ms, plan_decision_t *out)
{
    plan_policy_t policy = {.time_field = time_field};
    plan_coverage_t coverage = {.valid = true, .horizon_ms = horizon_ms};
    bson_error_t error;
    return plan_command(command, &policy, &coverage, out, &error);
}

/* What a read's plan says, kept after the decision is freed. */
typedef struct read_route {
    bool planned; /* false: plan_command refused the command */
    plan_route_t route;
    plan_reason_t reason;
    bool has_lower_bound;
    int64_t lower_bound_ms;
    bool lower_bound_inclusive;
    char reason_text[PLAN_REASON_TEXT_SIZE];
} read_route_t;

static read_route_t route_of(const bson_t *command, const char *time_field, int64_t horizon_ms)
{
    plan_decision_t decision;
    read_route_t result = {.planned = plan(command, time_field, horizon_ms, &decision)};
    result.route = decision.route;
    result.reason = decision.reason;
    result.has_lower_bound = decision.has_lower_bound;
    result.lower_bound_ms = decision.lower_bound_ms;
    result.lower_bound_inclusive = decision.lower_bound_inclusive;
    memcpy(result.reason_text, decision.reason_text, sizeof result.reason_text);
    plan_decision_cleanup(&decision);
    return result;
}

static bool is_fast(const read_route_t *route)
{
    return route->planned && route->route == PLAN_ROUTE_FAST;
}

/* A read the planner sends to the fast tier with horizon H must match only documents
 * inside it: the fast tier may still hold older ones, and lacks the archive's. */
static void check_read_route(const bson_t *command, const char *time_field, int64_t horizon_ms,
                             const match_expression_t *expression, const fuzz_documents_t *set)
{
    read_route_t route = route_of(command, time_field, horizon_ms);
    if (!is_fast(&route) || route.reason == PLAN_REASON_CHANGE_STREAM) {
        return; /* a change stream reads the fast tier's history, which holds every write (I9) */
    }
    FUZZ_REQUIRE(route.has_lower_bound, "fast route without a proved bound: %s", route.reason_text);
    match_expression_t *horizon = compile_bound(time_field, "$gte", horizon_ms);
    for (size_t d = 0; horizon != NULL && expression != NULL && d < set->count; d++) {
        if (match_document(expression, set->documents[d])) {
            FUZZ_REQUIRE_FOR(match_document(horizon, set->documents[d]), command, set->documents[d],
                             "sent to the fast tier (%s), but matches a document outside the horizon",
                             route.reason_text);
        }
    }
    match_destroy(horizon);
}

/* A delete faults in, before it runs, every archive document it may touch that the
 * fast tier may lack: those outside the horizon. */
static void check_delete(const bson_t *filter, const char *time_field, int64_t horizon_ms,
                         const match_expression_t *expression, const fuzz_documents_t *set)
{
    bson_t command = BSON_INITIALIZER;
    bson_t statements;
    bson_t statement;
    plan_decision_t decision;
    BSON_APPEND_UTF8(&command, "delete", "orders");
    bson_append_array_begin(&command, "deletes", 7, &statements);
    bson_append_document_begin(&statements, "0", 1, &statement);
    BSON_APPEND_DOCUMENT(&statement, "q", filter);
    BSON_APPEND_INT32(&statement, "limit", 0);
    bson_append_document_end(&statements, &statement);
    bson_append_array_end(&command, &statements);
    BSON_APPEND_UTF8(&command, "$db", "shop");

    if (plan(&command, time_field, horizon_ms, &decision)) {
        size_t filters = decision.fault_in_filter_count;
        match_expression_t *fault_in = NULL;
        bson_iter_t entry;
        FUZZ_REQUIRE(filters <= 1, "one statement, %zu fault-in filters", filters);
        if (filters == 1 && bson_iter_init(&entry, &decision.fault_in_filters) && bson_iter_next(&entry)) {
            bson_iter_t field;
            bson_t fault_filter;
            FUZZ_REQUIRE(bson_iter_recurse(&entry, &field) && bson_iter_find(&field, "filter") &&
                             sub_document(&field, &fault_filter),
                         "fault-in entry without a filter");
            fault_in = match_compile(&fault_filter, NULL);
        }
        match_expression_t *horizon = compile_bound(time_field, "$gte", horizon_ms);
        for (size_t d = 0; horizon != NULL && d < set->count; d++) {
            bson_iter_t id;
            const bson_t *document = set->documents[d];
            if (!storable_id(document, &id) || !match_document(expression, document) ||
                match_document(horizon, document)) {
                continue;
            }
            bool faulted = id_listed(&id, &decision.fault_in_ids) ||
                           (fault_in != NULL && match_document(fault_in, document));
            FUZZ_REQUIRE_FOR(faulted, &command, document,
                             "a delete may remove an archive document outside the horizon that it does not fault "
                             "in (%s)",
                             decision.reason_text);
        }
        match_destroy(horizon);
        match_destroy(fault_in);
    }
    plan_decision_cleanup(&decision);
    bson_destroy(&command);
}

/* Everything that depends on the time field. `commands` are the reads to plan (the
 * input command, or those built around a bare filter: find, count, aggregate). */
static void check_time_field(const bson_t *filter, const match_expression_t *expression, const char *time_field,
                             const bson_t *const *commands, size_t command_count, bool strict_routes,
                             fuzz_documents_t *set, size_t input_count)
{
    int64_t bound = 0;
    bool inclusive = false;
    bool proved = plan_filter_lower_bound(filter, time_field, &bound, &inclusive);
    if (!proved) {
        /* Nothing proved: whatever the horizon, no read around a bare filter goes to
         * the fast tier; a command's own route must still match nothing outside. */
        for (size_t c = 0; c < command_count; c++) {
            if (strict_routes) {
                read_route_t route = route_of(commands[c], time_field, INT64_MIN);
                FUZZ_REQUIRE_FOR(!is_fast(&route), commands[c], filter,
                                 "fast route for time field '%s' without a bound: %s", time_field,
                                 route.reason_text);
            }
            check_read_route(commands[c], time_field, INT64_MIN, expression, set);
        }
        return;
    }
    /* Dates are whole milliseconds: > b is >= b + 1. */
    FUZZ_REQUIRE(inclusive || bound < INT64_MAX, "nothing is > the largest date");
    int64_t least = inclusive ? bound : bound + 1;

    /* Probe documents: each input document with the time field set to each probe. */
    size_t before = set->count;
    bson_t scratch[2] = {BSON_INITIALIZER, BSON_INITIALIZER};
    bson_value_t probes[MAX_PROBES];
    size_t probe_count = probe_values(least, scratch, probes);
    bson_t empty = BSON_INITIALIZER;
    size_t bases = input_count > 0 ? input_count : 1;
    for (size_t b = 0; b < bases; b++) {
        const bson_t *base = input_count > 0 ? set->documents[b] : &empty;
        for (size_t p = 0; p < probe_count; p++) {
            documents_add(set, document_with(base, time_field, false, &probes[p]), true);
        }
        if (strchr(time_field, '.') != NULL) {
            documents_add(set, document_with(base, time_field, true, &probes[0]), true);
        }
        documents_add(set, document_with(base, time_field, false, NULL), true);
    }

    /* The bound itself: every matched document satisfies it. */
    match_expression_t *implied = compile_bound(time_field, inclusive ? "$gte" : "$gt", bound);
    for (size_t d = 0; implied != NULL && expression != NULL && d < set->count; d++) {
        if (match_document(expression, set->documents[d])) {
            FUZZ_REQUIRE_FOR(match_document(implied, set->documents[d]), filter, set->documents[d],
                             "proved %s %s %lld, but a matched document does not satisfy it", time_field,
                             inclusive ? ">=" : ">", (long long)bound);
        }
    }
    match_destroy(implied);

    /* Routes: fast exactly when the bound reaches the horizon. */
    for (size_t c = 0; c < command_count; c++) {
        read_route_t route = route_of(commands[c], time_field, least);
        if (is_fast(&route)) {
            FUZZ_REQUIRE(route.lower_bound_ms == bound && route.lower_bound_inclusive == inclusive,
                         "the decision's bound differs from plan_filter_lower_bound's");
        }
        FUZZ_REQUIRE_FOR(!strict_routes || is_fast(&route) || route.reason == PLAN_REASON_POINT_READ, commands[c],
                         filter, "bound at the horizon, but routed %s: %s", plan_route_name(route.route),
                         route.reason_text);
        if (least < INT64_MAX) {
            route = route_of(commands[c], time_field, least + 1);
            FUZZ_REQUIRE_FOR(!is_fast(&route), commands[c], filter,
                             "bound below the horizon, but routed to the fast tier: %s", route.reason_text);
        }
        check_read_route(commands[c], time_field, least, expression, set);
    }
    if (expression != NULL) {
        check_delete(filter, time_field, least, expression, set);
    }
    documents_truncate(set, before);
    bson_destroy(&empty);
    bson_destroy(&scratch[0]);
    bson_destroy(&scratch[1]);
}

/* find, count and aggregate [{$match: filter}] around a bare filter. */
static void build_reads(const bson_t *filter, bson_t *reads)
{
    bson_t pipeline;
    bson_t stage;
    BSON_APPEND_UTF8(&reads[0], "find", "orders");
    BSON_APPEND_DOCUMENT(&reads[0], "filter", filter);
    BSON_APPEND_UTF8(&reads[0], "$db", "shop");
    BSON_APPEND_UTF8(&reads[1], "count", "orders");
    BSON_APPEND_DOCUMENT(&reads[1], "query", filter);
    BSON_APPEND_UTF8(&reads[1], "$db", "shop");
    BSON_APPEND_UTF8(&reads[2], "aggregate", "orders");
    bson_append_array_begin(&reads[2], "pipeline", 8, &pipeline);
    bson_append_document_begin(&pipeline, "0", 1, &stage);
    BSON_APPEND_DOCUMENT(&stage, "$match", filter);
    bson_append_document_end(&pipeline, &stage);
    bson_append_array_end(&reads[2], &pipeline);
    bson_append_document_begin(&reads[2], "cursor", 6, &stage);
    bson_append_document_end(&reads[2], &stage);
    BSON_APPEND_UTF8(&reads[2], "$db", "shop");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader_t reader;
    bson_t first;
    bson_t inputs[MAX_INPUT_DOCUMENTS];
    fuzz_documents_t set = {.count = 0};
    size_t input_count = 0;

    fuzz_reader_init(&reader, data, size);
    if (!fuzz_reader_document(&reader, &first)) {
        return 0;
    }
    while (input_count < MAX_INPUT_DOCUMENTS && fuzz_reader_document(&reader, &inputs[input_count])) {
        documents_add(&set, &inputs[input_count], false);
        input_count++;
    }
    for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
        documents_add(&set, fuzz_fixed_document(i), false);
    }

    /* A read command as given (with $db added when missing), or a bare filter. */
    bson_t filter = BSON_INITIALIZER;
    bson_t reads[3] = {BSON_INITIALIZER, BSON_INITIALIZER, BSON_INITIALIZER};
    const bson_t *commands[3];
    size_t command_count;
    bson_t read;
    const char *read_name = read_command(&first, &read);
    bool is_command = read_name != NULL;
    if (is_command) {
        bson_iter_t field;
        bson_iter_init(&field, &first);
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), "$db") != 0) {
                append_element(&reads[0], bson_iter_key(&field), &field);
            }
        }
        BSON_APPEND_UTF8(&reads[0], "$db", "shop");
        commands[0] = &reads[0];
        command_count = 1;
        if (!read_filter(&read, read_name, &filter)) {
            /* Malformed: the archive reports the error, whatever the horizon. */
            const char *fields[MAX_TIME_FIELDS];
            size_t field_count = collect_time_fields(&filter, fields);
            for (size_t f = 0; f < field_count; f++) {
                read_route_t route = route_of(&reads[0], fields[f], INT64_MIN);
                FUZZ_REQUIRE_FOR(!is_fast(&route), &reads[0], &filter,
                                 "a malformed read routed to the fast tier: %s", route.reason_text);
            }
            goto done;
        }
    } else {
        bson_concat(&filter, &first);
        build_reads(&filter, reads);
        for (size_t i = 0; i < 3; i++) {
            commands[i] = &reads[i];
        }
        command_count = 3;
    }

    match_expression_t *expression = match_compile(&filter, NULL);
    if (expression != NULL) {
        check_ids(&filter, expression, &set);
    }
    const char *fields[MAX_TIME_FIELDS];
    size_t field_count = collect_time_fields(&filter, fields);
    for (size_t f = 0; f < field_count; f++) {
        check_time_field(&filter, expression, fields[f], commands, command_count, !is_command, &set, input_count);
    }
    match_destroy(expression);

done:
    for (size_t i = 0; i < 3; i++) {
        bson_destroy(&reads[i]);
    }
    bson_destroy(&filter);
    documents_truncate(&set, 0);
    return 0;
}
