/* The planner's command side: which kind of command this is and which tier can
 * answer it completely. Writes are planned in planner_write.c, filters analysed in
 * planner_filter.c. */
#include "proxy/planner_private.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum command_class {
    CLASS_OTHER,
    CLASS_READ,
    CLASS_MAP_REDUCE,
    CLASS_WRITE,
    CLASS_CURSOR,
    CLASS_TRANSACTION,
    CLASS_CATALOG,
    CLASS_SESSION,
    CLASS_PROXY,
    CLASS_EXPLAIN,
    CLASS_REFUSED,
} command_class_t;

/* Command names are case-sensitive, as in mongod; aliases are listed. */
static const struct {
    const char *name;
    command_class_t class;
} command_table[] = {
    {"find", CLASS_READ},
    {"aggregate", CLASS_READ},
    {"count", CLASS_READ},
    {"distinct", CLASS_READ},
    {"mapReduce", CLASS_MAP_REDUCE},
    {"mapreduce", CLASS_MAP_REDUCE},
    {"insert", CLASS_WRITE},
    {"update", CLASS_WRITE},
    {"delete", CLASS_WRITE},
    {"findAndModify", CLASS_WRITE},
    {"findandmodify", CLASS_WRITE},
    {"getMore", CLASS_CURSOR},
    {"killCursors", CLASS_CURSOR},
    {"commitTransaction", CLASS_TRANSACTION},
    {"abortTransaction", CLASS_TRANSACTION},
    {"create", CLASS_CATALOG},
    {"drop", CLASS_CATALOG},
    {"createIndexes", CLASS_CATALOG},
    {"dropIndexes", CLASS_CATALOG},
    {"deleteIndexes", CLASS_CATALOG},
    {"dropDatabase", CLASS_CATALOG},
    {"renameCollection", CLASS_CATALOG},
    {"collMod", CLASS_CATALOG},
    {"endSessions", CLASS_SESSION},
    {"killSessions", CLASS_SESSION},
    {"killAllSessions", CLASS_SESSION},
    {"killAllSessionsByPattern", CLASS_SESSION},
    {"refreshSessions", CLASS_SESSION},
    {"hello", CLASS_PROXY},
    {"isMaster", CLASS_PROXY},
    {"ismaster", CLASS_PROXY},
    {"ping", CLASS_PROXY},
    {"_isSelf", CLASS_PROXY}, /* as mongos: about this process, not a tier */
    {"thermoclineStatus", CLASS_PROXY},
    {"thermoclineRetryRefusals", CLASS_PROXY},
    {"thermoclineReload", CLASS_PROXY},
    {"explain", CLASS_EXPLAIN},
    /* Both write any namespace around the fast tier; a 6.0 mongos knows neither. */
    {"applyOps", CLASS_REFUSED},
    {"bulkWrite", CLASS_REFUSED},
};

static command_class_t command_class(const char *name)
{
    for (size_t i = 0; i < sizeof command_table / sizeof command_table[0]; i++) {
        if (strcmp(command_table[i].name, name) == 0) {
            return command_table[i].class;
        }
    }
    return CLASS_OTHER;
}

bool plan_command_is_write(const char *name)
{
    return command_class(name) == CLASS_WRITE;
}

/* ---- decisions ------------------------------------------------------------ */

static void decision_init(plan_decision_t *out)
{
    memset(out, 0, sizeof *out);
    out->route = PLAN_ROUTE_ARCHIVE;
    out->reason = PLAN_REASON_NOT_ROUTED;
    out->kind = PLAN_KIND_OTHER;
    bson_init(&out->point_ids);
    bson_init(&out->fault_in_ids);
    bson_init(&out->fault_in_filters);
    bson_init(&out->unique_id_checks);
    bson_init(&out->unique_computed_statements);
    bson_init(&out->unique_computed_indexes);
}

void plan_decision_cleanup(plan_decision_t *decision)
{
    if (decision == NULL) {
        return;
    }
    bson_destroy(&decision->point_ids);
    bson_destroy(&decision->fault_in_ids);
    bson_destroy(&decision->fault_in_filters);
    bson_destroy(&decision->unique_id_checks);
    bson_destroy(&decision->unique_computed_statements);
    bson_destroy(&decision->unique_computed_indexes);
}

void planner_decide(plan_decision_t *out, plan_route_t route, plan_reason_t reason, const char *format, ...)
{
    size_t used = 0;
    out->route = route;
    out->reason = reason;
    if (out->is_explain) {
        used = (size_t)snprintf(out->reason_text, sizeof out->reason_text, "explain: ");
    }
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(out->reason_text + used, sizeof out->reason_text - used, format, arguments);
    va_end(arguments);
}

void planner_reason_append(plan_decision_t *out, const char *format, ...)
{
    size_t used = strlen(out->reason_text);
    if (used + 1 >= sizeof out->reason_text) {
        return;
    }
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(out->reason_text + used, sizeof out->reason_text - used, format, arguments);
    va_end(arguments);
}

/* ISO-8601 UTC with milliseconds, or new Date(ms) beyond the years 0-9999. */
static void format_date(int64_t ms, char *out, size_t size)
{
    int64_t seconds = ms / 1000;
    int64_t millis = ms % 1000;
    struct tm calendar;
    if (millis < 0) {
        millis += 1000;
        seconds -= 1;
    }
    time_t time_value = (time_t)seconds;
    if (gmtime_r(&time_value, &calendar) == NULL || calendar.tm_year < -1900 || calendar.tm_year > 9999 - 1900) {
        snprintf(out, size, "new Date(%" PRId64 ")", ms);
        return;
    }
    char text[32];
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &calendar);
    snprintf(out, size, "%.20s.%03dZ", text, (int)millis);
}

static bool coverage_valid(const planner_context_t *context)
{
    return context->coverage != NULL && context->coverage->valid;
}

/* Whether a proved bound lies inside the horizon. Dates are whole milliseconds, so
 * time > b means time >= b + 1. */
bool planner_bound_inside_horizon(const planner_context_t *context, const planner_bound_t *bound)
{
    if (!bound->found || !coverage_valid(context)) {
        return false;
    }
    int64_t least = bound->ms;
    if (!bound->inclusive && least < INT64_MAX) {
        least++;
    }
    return least >= context->coverage->horizon_ms;
}

void planner_record_bound(plan_decision_t *out, const planner_bound_t *bound)
{
    out->has_lower_bound = true;
    out->lower_bound_ms = bound->ms;
    out->lower_bound_inclusive = bound->inclusive;
}

/* Routes a read by the bound its filter proved (what: "filter", "query", "the
 * leading $match"). */
static void route_by_bound(const planner_context_t *context, const planner_bound_t *bound, bool analysed,
                           const char *what, plan_decision_t *out)
{
    const char *field = context->policy->time_field;
    char date[64];
    char horizon[64];
    if (!analysed) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE,
                       "%s could not be analysed ($and not a non-empty array of documents, or nested too deep)", what);
        return;
    }
    if (!bound->found) {
        planner_decide(
            out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE,
            "%s does not prove %s >= a date (only top-level $eq, $gt, $gte and $in on %s with date operands count)",
            what, field, field);
        return;
    }
    planner_record_bound(out, bound);
    format_date(bound->ms, date, sizeof date);
    const char *comparison = bound->inclusive ? ">=" : ">";
    if (!coverage_valid(context)) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_HORIZON_UNKNOWN,
                       "%s proves %s %s %s, but the coverage horizon is not valid yet (the warmer has not finished its "
                       "first pass)",
                       what, field, comparison, date);
        return;
    }
    format_date(context->coverage->horizon_ms, horizon, sizeof horizon);
    if (!planner_bound_inside_horizon(context, bound)) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_BEFORE_HORIZON, "%s %s %s %s starts before the horizon %s",
                       what, field, comparison, date, horizon);
        return;
    }
    planner_decide(out, PLAN_ROUTE_FAST, PLAN_REASON_INSIDE_HORIZON, "%s %s %s %s is inside the horizon %s", what,
                   field, comparison, date, horizon);
}

static void decide_malformed(plan_decision_t *out, const char *what, const char *expected)
{
    planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_MALFORMED, "%s is not %s: the archive reports the error", what,
                   expected);
}

/* The field's value as a document; absent and null count as {} (match all). */
static bool optional_document(const planner_context_t *context, const char *field, bson_t *out,
                              bool *out_wrong_type)
{
    bson_iter_t iter;
    *out_wrong_type = false;
    if (!fields_find(context->fields, field, &iter) || BSON_ITER_HOLDS_NULL(&iter)) {
        bson_init(out);
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        *out_wrong_type = true;
        return false;
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    return bson_init_static(out, data, length);
}

/* ---- reads ---------------------------------------------------------------- */

static bool is_number(const bson_iter_t *iter)
{
    return BSON_ITER_HOLDS_NUMBER(iter) || BSON_ITER_HOLDS_DECIMAL128(iter);
}

/* A point read's fields: only those that neither change which documents answer
 * nor stop the router from merging the two tiers' answers in _id order. */
static bool find_allows_point_read(const bson_t *command)
{
    static const char *const passive[] = {
        "find", "filter", "projection", "batchSize", "singleBatch", "maxTimeMS", "comment", "readConcern", "$db",
        "lsid", "txnNumber", "autocommit", "startTransaction", "$clusterTime", "$readPreference", "apiVersion",
        "apiStrict", "apiDeprecationErrors",
    };
    bson_iter_t iter;
    if (!bson_iter_init(&iter, command)) {
        return false;
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        bool allowed = false;
        for (size_t i = 0; i < sizeof passive / sizeof passive[0] && !allowed; i++) {
            allowed = strcmp(key, passive[i]) == 0;
        }
        if (allowed) {
            continue;
        }
        if (strcmp(key, "limit") == 0) {
            if (!is_number(&iter) || bson_iter_as_double(&iter) < 0) {
                return false;
            }
        } else if (strcmp(key, "skip") == 0) {
            if (!is_number(&iter) || bson_iter_as_double(&iter) != 0) {
                return false;
            }
        } else if (strcmp(key, "sort") == 0) {
            bson_iter_t field;
            if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &field)) {
                return false;
            }
            if (bson_iter_next(&field)) {
                double direction = is_number(&field) ? bson_iter_as_double(&field) : 0;
                if (strcmp(bson_iter_key(&field), "_id") != 0 || (direction != 1 && direction != -1) ||
                    bson_iter_next(&field)) {
                    return false;
                }
            }
        } else {
            return false;
        }
    }
    return true;
}

static void plan_find_count_distinct(const planner_context_t *context, const bson_t *command, plan_decision_t *out)
{
    const bool is_find = strcmp(context->name, "find") == 0;
    const char *field = is_find ? "filter" : "query";
    char what[64];
    bson_t filter;
    bool wrong_type;

    snprintf(what, sizeof what, "%s.%s", context->name, field);
    if (!optional_document(context, field, &filter, &wrong_type)) {
        decide_malformed(out, what, "a document");
        return;
    }
    if (is_find && plan_filter_point_ids(&filter, &out->point_ids, &out->point_id_count)) {
        if (find_allows_point_read(command)) {
            planner_decide(out, PLAN_ROUTE_FAST_THEN_ARCHIVE, PLAN_REASON_POINT_READ,
                           "find by _id (%u id%s): the fast tier first, then the archive for the ids it lacks",
                           out->point_id_count, out->point_id_count == 1 ? "" : "s");
            bson_destroy(&filter);
            return;
        }
        /* skip, a sort on other fields, collation, hint...: not mergeable by id. */
        bson_reinit(&out->point_ids);
        out->point_id_count = 0;
    }
    planner_bound_t bound = {0};
    bool analysed = planner_collect_bound(&filter, context->policy->time_field, &bound);
    route_by_bound(context, &bound, analysed, what, out);
    bson_destroy(&filter);
}

/* What a pipeline does beyond filtering its own collection. */
typedef struct pipeline_scan {
    bool malformed;
    const char *reader; /* first stage reading another collection */
    const char *writer; /* $out or $merge */
    bool change_stream;
    bool starts_with_match;
    bool bound_analysed;
    planner_bound_t bound; /* from the leading run of $match stages */
} pipeline_scan_t;

/* "db.collection" from a string, or {db, coll}; "" when neither. */
static void output_namespace_of(const bson_iter_t *target, const char *database, const char *db_key,
                                const char *collection_key, char *out, size_t size)
{
    const char *db = database;
    const char *collection = NULL;
    out[0] = '\0';
    if (BSON_ITER_HOLDS_UTF8(target)) {
        collection = bson_iter_utf8(target, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(target)) {
        bson_iter_t field;
        bson_iter_recurse(target, &field);
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), db_key) == 0 && BSON_ITER_HOLDS_UTF8(&field)) {
                db = bson_iter_utf8(&field, NULL);
            } else if (strcmp(bson_iter_key(&field), collection_key) == 0 && BSON_ITER_HOLDS_UTF8(&field)) {
                collection = bson_iter_utf8(&field, NULL);
            }
        }
    }
    if (collection == NULL || collection[0] == '\0' || db[0] == '\0') {
        return;
    }
    int length = snprintf(out, size, "%s.%s", db, collection);
    if (length < 0 || (size_t)length >= size) {
        out[0] = '\0';
    }
}

static void merge_output_namespace(const bson_iter_t *stage, const char *database, char *out, size_t size)
{
    bson_iter_t into;
    if (BSON_ITER_HOLDS_DOCUMENT(stage) && bson_iter_recurse(stage, &into) && bson_iter_find(&into, "into")) {
        output_namespace_of(&into, database, "db", "coll", out, size);
    } else {
        output_namespace_of(stage, database, "db", "coll", out, size);
    }
}

static bool is_reader_stage(const char *name)
{
    return strcmp(name, "$lookup") == 0 || strcmp(name, "$graphLookup") == 0 || strcmp(name, "$unionWith") == 0;
}

/* Looks through stages (and $facet's sub-pipelines) for readers and writers. */
static void scan_stages(const bson_iter_t *pipeline, int depth, pipeline_scan_t *scan)
{
    bson_iter_t stage;
    if (depth > PLANNER_MAX_DEPTH || !bson_iter_recurse(pipeline, &stage)) {
        scan->malformed = true;
        return;
    }
    while (bson_iter_next(&stage)) {
        bson_iter_t body;
        if (!BSON_ITER_HOLDS_DOCUMENT(&stage) || !bson_iter_recurse(&stage, &body) || !bson_iter_next(&body)) {
            scan->malformed = true;
            return;
        }
        const char *name = bson_iter_key(&body);
        if (is_reader_stage(name) && scan->reader == NULL) {
            scan->reader = name;
        } else if ((strcmp(name, "$out") == 0 || strcmp(name, "$merge") == 0) && scan->writer == NULL) {
            scan->writer = name;
        } else if (strcmp(name, "$facet") == 0 && BSON_ITER_HOLDS_DOCUMENT(&body)) {
            bson_iter_t facet;
            bson_iter_recurse(&body, &facet);
            while (bson_iter_next(&facet)) {
                if (BSON_ITER_HOLDS_ARRAY(&facet)) {
                    scan_stages(&facet, depth + 1, scan);
                }
            }
        }
        if (bson_iter_next(&body)) {
            scan->malformed = true; /* a stage has exactly one field */
            return;
        }
    }
}

static void plan_aggregate(const planner_context_t *context, const bson_t *command, plan_decision_t *out)
{
    bson_iter_t pipeline;
    bson_iter_t explain;
    pipeline_scan_t scan = {0};

    if (fields_find(context->fields, "explain", &explain) && bson_iter_as_bool(&explain)) {
        out->is_explain = true;
    }
    if (!fields_find(context->fields, "pipeline", &pipeline) || !BSON_ITER_HOLDS_ARRAY(&pipeline)) {
        decide_malformed(out, "aggregate.pipeline", "an array");
        return;
    }
    scan_stages(&pipeline, 1, &scan);

    /* The leading run of $match stages is one conjunction over the collection. */
    bson_iter_t stage;
    bool leading = true;
    bool first = true;
    scan.bound_analysed = true;
    bson_iter_recurse(&pipeline, &stage);
    while (!scan.malformed && bson_iter_next(&stage)) {
        bson_iter_t body;
        bson_iter_recurse(&stage, &body);
        bson_iter_next(&body);
        const char *name = bson_iter_key(&body);
        if (first && strcmp(name, "$changeStream") == 0) {
            scan.change_stream = true;
        }
        if (leading && strcmp(name, "$match") == 0 && context->policy != NULL) {
            bson_t match;
            uint32_t length;
            const uint8_t *data;
            if (!BSON_ITER_HOLDS_DOCUMENT(&body)) {
                scan.malformed = true;
                break;
            }
            bson_iter_document(&body, &length, &data);
            scan.starts_with_match = true;
            if (!bson_init_static(&match, data, length) ||
                !planner_collect_bound(&match, context->policy->time_field, &scan.bound)) {
                scan.bound_analysed = false;
            }
        } else {
            leading = false;
        }
        if (strcmp(name, "$out") == 0 || strcmp(name, "$merge") == 0) {
            if (strcmp(name, "$out") == 0) {
                output_namespace_of(&body, context->database, "db", "coll", out->output_namespace,
                                    sizeof out->output_namespace);
            } else {
                merge_output_namespace(&body, context->database, out->output_namespace, sizeof out->output_namespace);
            }
        }
        first = false;
    }

    if (scan.malformed) {
        out->output_namespace[0] = '\0';
        decide_malformed(out, "aggregate.pipeline", "an array of one-field stage documents");
        return;
    }
    out->reads_other_namespaces = scan.reader != NULL;
    out->writes_output = scan.writer != NULL && !out->is_explain;
    if (!out->writes_output) {
        out->output_namespace[0] = '\0';
    }
    if (scan.writer != NULL) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_WRITES, "pipeline stage %s writes %s", scan.writer,
                       out->output_namespace[0] != '\0' ? out->output_namespace
                                                        : "a collection the planner cannot name");
    } else if (scan.reader != NULL) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_READS_OTHER,
                       "pipeline stage %s reads another collection, which only the archive holds whole", scan.reader);
    } else if (context->policy == NULL) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY, "namespace has no tiering policy");
    } else if (scan.change_stream) {
        /* Every write runs on the fast tier first: its history is the one ordered
         * history of the namespace (the router drops the workers' events). */
        out->is_change_stream = true;
        planner_decide(out, PLAN_ROUTE_FAST, PLAN_REASON_CHANGE_STREAM,
                       "$changeStream on a tiered namespace: the fast tier's history holds every write");
    } else if (!scan.starts_with_match) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_FILTER_UNPROVABLE,
                       "pipeline does not start with $match, so nothing bounds %s", context->policy->time_field);
    } else {
        route_by_bound(context, &scan.bound, scan.bound_analysed, "the leading $match", out);
    }
}

static void plan_map_reduce(const planner_context_t *context, const bson_t *command, plan_decision_t *out)
{
    bson_iter_t target;
    bson_iter_t inline_field;
    out->kind = PLAN_KIND_READ;
    if (fields_find(context->fields, "out", &target)) {
        bool inline_output = BSON_ITER_HOLDS_DOCUMENT(&target) && bson_iter_recurse(&target, &inline_field) &&
                             bson_iter_find(&inline_field, "inline");
        if (!inline_output && !out->is_explain) {
            out->writes_output = true;
            bson_iter_t mode;
            const char *key = "replace";
            if (BSON_ITER_HOLDS_DOCUMENT(&target) && bson_iter_recurse(&target, &mode)) {
                while (bson_iter_next(&mode)) {
                    const char *name = bson_iter_key(&mode);
                    if (strcmp(name, "replace") == 0 || strcmp(name, "merge") == 0 || strcmp(name, "reduce") == 0) {
                        key = name;
                    }
                }
            }
            output_namespace_of(&target, context->database, "db", key, out->output_namespace,
                                sizeof out->output_namespace);
            planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_PIPELINE_WRITES, "%s writes %s", context->name,
                           out->output_namespace[0] != '\0' ? out->output_namespace
                                                            : "a collection the planner cannot name");
            return;
        }
    }
    planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED, "%s is not routed by tier: the archive answers",
                   context->name);
}

static void plan_read(const planner_context_t *context, const bson_t *command, plan_decision_t *out)
{
    out->kind = PLAN_KIND_READ;
    if (strcmp(context->name, "aggregate") == 0) {
        plan_aggregate(context, command, out);
    } else if (context->policy == NULL) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY, "namespace has no tiering policy");
    } else {
        plan_find_count_distinct(context, command, out);
    }
}

/* ---- dispatch ------------------------------------------------------------- */

static void context_init(planner_context_t *context, const fields_t *fields, const bson_iter_t *first,
                         const char *database, const plan_policy_t *policy, const plan_coverage_t *coverage)
{
    context->fields = fields;
    context->database = database;
    context->name = bson_iter_key(first);
    context->collection = BSON_ITER_HOLDS_UTF8(first) ? bson_iter_utf8(first, NULL) : "";
    context->policy = policy;
    context->coverage = coverage;
}

static bool plan_dispatch(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                          bson_error_t *error);

static bool plan_explain(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                         bson_error_t *error)
{
    bson_iter_t explain;
    bson_iter_t inner_first;
    bson_t inner;
    uint32_t length;
    const uint8_t *data;

    fields_find(context->fields, "explain", &explain);
    if (!BSON_ITER_HOLDS_DOCUMENT(&explain)) {
        decide_malformed(out, "explain", "a command document");
        return true;
    }
    bson_iter_document(&explain, &length, &data);
    if (!bson_init_static(&inner, data, length) || !bson_iter_init(&inner_first, &inner) ||
        !bson_iter_next(&inner_first)) {
        decide_malformed(out, "explain", "a command document");
        return true;
    }
    planner_context_t inner_context;
    fields_t inner_fields;
    fields_index(&inner_fields, &inner);
    context_init(&inner_context, &inner_fields, &inner_first, context->database, context->policy, context->coverage);
    command_class_t class = command_class(inner_context.name);
    if (class != CLASS_READ && class != CLASS_WRITE && class != CLASS_MAP_REDUCE) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
                       "explain of %s is not routed by tier: the archive "
                       "answers",
                       inner_context.name);
        return true;
    }
    out->is_explain = true;
    return plan_dispatch(&inner_context, &inner, out, error);
}

static bool plan_dispatch(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                          bson_error_t *error)
{
    switch (command_class(context->name)) {
    case CLASS_REFUSED: return tc_error_set(error, TC_ERR_COMMAND_NOT_FOUND, "no such command: '%s'", context->name);
    case CLASS_READ: plan_read(context, command, out); return true;
    case CLASS_MAP_REDUCE: plan_map_reduce(context, command, out); return true;
    case CLASS_WRITE: return planner_plan_write(context, command, out, error);
    case CLASS_CURSOR:
        out->kind = PLAN_KIND_CURSOR;
        planner_decide(out, PLAN_ROUTE_CURSOR_OWNER, PLAN_REASON_CURSOR,
                       "%s goes to the tier that opened the cursor: the router's cursor table decides, not the planner",
                       context->name);
        return true;
    case CLASS_TRANSACTION:
        out->kind = PLAN_KIND_TRANSACTION;
        planner_decide(out, PLAN_ROUTE_TRANSACTION_OWNER, PLAN_REASON_TRANSACTION,
                       "%s goes to the tier that ran the transaction", context->name);
        return true;
    case CLASS_CATALOG:
        out->kind = PLAN_KIND_CATALOG;
        out->applies_to_both_tiers = true;
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_CATALOG,
                       "%s changes the catalog: the archive, and the router applies it to the fast tier too",
                       context->name);
        return true;
    case CLASS_SESSION:
        out->kind = PLAN_KIND_SESSION;
        out->applies_to_both_tiers = true;
        planner_decide(
            out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED,
            "%s concerns sessions, which both tiers hold: the archive, and the router sends it to the fast tier "
            "too",
            context->name);
        return true;
    case CLASS_PROXY:
        out->kind = PLAN_KIND_PROXY;
        planner_decide(out, PLAN_ROUTE_PROXY, PLAN_REASON_ANSWERED_BY_PROXY, "%s is answered by the proxy itself",
                       context->name);
        return true;
    case CLASS_EXPLAIN: return plan_explain(context, command, out, error);
    case CLASS_OTHER:
    default:
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NOT_ROUTED, "%s is not routed by tier: the archive answers",
                       context->name);
        return true;
    }
}

bool plan_command_fields(const fields_t *fields, const plan_policy_t *policy, const plan_coverage_t *coverage,
                         plan_decision_t *out, bson_error_t *error)
{
    bson_iter_t first;
    bson_iter_t iter;
    const char *database = "";
    planner_context_t context;
    const bson_t *command = fields->document;

    decision_init(out);
    if (command == NULL || !bson_iter_init(&first, command) || !bson_iter_next(&first)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "the command document is empty");
    }
    if (policy != NULL &&
        (policy->time_field == NULL || policy->time_field[0] == '\0' || policy->time_field[0] == '$')) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "planner: the namespace policy has no valid time field");
    }
    if (fields_find(fields, "$db", &iter) && BSON_ITER_HOLDS_UTF8(&iter)) {
        database = bson_iter_utf8(&iter, NULL);
    }
    out->in_transaction = fields_find(fields, "autocommit", &iter);
    context_init(&context, fields, &first, database, policy, coverage);
    return plan_dispatch(&context, command, out, error);
}

bool plan_command(const bson_t *command, const plan_policy_t *policy, const plan_coverage_t *coverage,
                  plan_decision_t *out, bson_error_t *error)
{
    fields_t fields;
    if (command == NULL) {
        decision_init(out);
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "the command document is empty");
    }
    fields_index(&fields, command);
    return plan_command_fields(&fields, policy, coverage, out, error);
}

/* ---- namespaces ----------------------------------------------------------- */

static bool join_namespace(const char *database, const char *collection, char *out, size_t size)
{
    if (database[0] == '\0' || collection == NULL || collection[0] == '\0') {
        return false;
    }
    /* Not snprintf: this runs for every command the proxy routes. */
    size_t database_length = strlen(database);
    size_t collection_length = strlen(collection);
    if (database_length + 1 + collection_length >= size) {
        return false;
    }
    memcpy(out, database, database_length);
    out[database_length] = '.';
    memcpy(out + database_length + 1, collection, collection_length + 1);
    return true;
}

/* fields: command's, or NULL to walk it (the inner command of an explain). */
static bool namespace_of(const bson_t *command, const fields_t *fields, const char *database, int depth, char *out,
                         size_t size)
{
    bson_iter_t first;
    bson_iter_t iter;
    if (depth > 2 || !bson_iter_init(&first, command) || !bson_iter_next(&first)) {
        return false;
    }
    const char *name = bson_iter_key(&first);
    const char *value = BSON_ITER_HOLDS_UTF8(&first) ? bson_iter_utf8(&first, NULL) : NULL;
    switch (command_class(name)) {
    case CLASS_READ:
    case CLASS_MAP_REDUCE:
    case CLASS_WRITE: return join_namespace(database, value, out, size);
    case CLASS_CATALOG:
        if (strcmp(name, "renameCollection") == 0) {
            if (value == NULL || strchr(value, '.') == NULL || strlen(value) >= size) {
                return false;
            }
            memcpy(out, value, strlen(value) + 1);
            return true;
        }
        return strcmp(name, "dropDatabase") != 0 && join_namespace(database, value, out, size);
    case CLASS_CURSOR:
        if (strcmp(name, "getMore") == 0) {
            bool found = fields != NULL ? fields_find(fields, "collection", &iter)
                                        : bson_iter_init_find(&iter, command, "collection");
            return found && BSON_ITER_HOLDS_UTF8(&iter) &&
                   join_namespace(database, bson_iter_utf8(&iter, NULL), out, size);
        }
        return join_namespace(database, value, out, size);
    case CLASS_EXPLAIN: {
        bson_t inner;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&first)) {
            return false;
        }
        bson_iter_document(&first, &length, &data);
        return bson_init_static(&inner, data, length) && namespace_of(&inner, NULL, database, depth + 1, out, size);
    }
    default: return false;
    }
}

bool plan_command_namespace_fields(const fields_t *fields, char *out_namespace, size_t out_size)
{
    bson_iter_t iter;
    if (fields->document == NULL || out_size == 0 || !fields_find(fields, "$db", &iter) ||
        !BSON_ITER_HOLDS_UTF8(&iter)) {
        return false;
    }
    return namespace_of(fields->document, fields, bson_iter_utf8(&iter, NULL), 1, out_namespace, out_size);
}

bool plan_command_namespace(const bson_t *command, char *out_namespace, size_t out_size)
{
    fields_t fields;
    if (command == NULL) {
        return false;
    }
    fields_index(&fields, command);
    return plan_command_namespace_fields(&fields, out_namespace, out_size);
}

/* ---- names ---------------------------------------------------------------- */

const char *plan_route_name(plan_route_t route)
{
    switch (route) {
    case PLAN_ROUTE_ARCHIVE: return "archive";
    case PLAN_ROUTE_FAST: return "fast";
    case PLAN_ROUTE_FAST_THEN_ARCHIVE: return "fast-then-archive";
    case PLAN_ROUTE_CURSOR_OWNER: return "cursor-owner";
    case PLAN_ROUTE_TRANSACTION_OWNER: return "transaction-owner";
    case PLAN_ROUTE_PROXY: return "proxy";
    }
    return "unknown";
}

const char *plan_reason_name(plan_reason_t reason)
{
    switch (reason) {
    case PLAN_REASON_NO_POLICY: return "no-policy";
    case PLAN_REASON_FILTER_UNPROVABLE: return "filter-unprovable";
    case PLAN_REASON_HORIZON_UNKNOWN: return "horizon-unknown";
    case PLAN_REASON_BEFORE_HORIZON: return "before-horizon";
    case PLAN_REASON_INSIDE_HORIZON: return "inside-horizon";
    case PLAN_REASON_PIPELINE_READS_OTHER: return "pipeline-reads-other";
    case PLAN_REASON_PIPELINE_WRITES: return "pipeline-writes";
    case PLAN_REASON_CHANGE_STREAM: return "change-stream";
    case PLAN_REASON_POINT_READ: return "point-read";
    case PLAN_REASON_WRITE: return "write";
    case PLAN_REASON_CURSOR: return "cursor";
    case PLAN_REASON_TRANSACTION: return "transaction";
    case PLAN_REASON_CATALOG: return "catalog";
    case PLAN_REASON_NOT_ROUTED: return "not-routed";
    case PLAN_REASON_ANSWERED_BY_PROXY: return "proxy";
    case PLAN_REASON_MALFORMED: return "malformed";
    }
    return "unknown";
}

const char *plan_kind_name(plan_kind_t kind)
{
    switch (kind) {
    case PLAN_KIND_READ: return "read";
    case PLAN_KIND_WRITE: return "write";
    case PLAN_KIND_CURSOR: return "cursor";
    case PLAN_KIND_TRANSACTION: return "transaction";
    case PLAN_KIND_CATALOG: return "catalog";
    case PLAN_KIND_SESSION: return "session";
    case PLAN_KIND_PROXY: return "proxy";
    case PLAN_KIND_OTHER: return "other";
    }
    return "unknown";
}
