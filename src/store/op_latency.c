/* Per-class command latency totals for serverStatus.opLatencies; the dispatcher
 * times each handler call and records it here. */
#include "store/op_latency.h"

#include <string.h>
#include <time.h>

op_latency_class_t op_latency_class_of(const char *command_name)
{
    static const char *const reads[] = {"find", "getMore", "count", "distinct", "aggregate"};
    static const char *const writes[] = {"insert", "update", "delete", "findAndModify", "findandmodify"};
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        if (strcmp(command_name, reads[i]) == 0) {
            return OP_LATENCY_READS;
        }
    }
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        if (strcmp(command_name, writes[i]) == 0) {
            return OP_LATENCY_WRITES;
        }
    }
    return OP_LATENCY_COMMANDS;
}

void op_latency_record(op_latency_t *latency, const char *command_name, uint64_t micros)
{
    op_latency_class_t class = op_latency_class_of(command_name);
    atomic_fetch_add_explicit(&latency->classes[class].micros, micros, memory_order_relaxed);
    atomic_fetch_add_explicit(&latency->classes[class].ops, 1, memory_order_relaxed);
}

static void append_class(bson_t *out, const char *name, uint64_t micros, uint64_t ops)
{
    bson_t entry;
    bson_append_document_begin(out, name, -1, &entry);
    BSON_APPEND_INT64(&entry, "latency", (int64_t)micros);
    BSON_APPEND_INT64(&entry, "ops", (int64_t)ops);
    bson_append_document_end(out, &entry);
}

void op_latency_append(const op_latency_t *latency, bson_t *out)
{
    static const char *const names[OP_LATENCY_CLASS_COUNT] = {"reads", "writes", "commands"};
    for (int class = 0; class < OP_LATENCY_CLASS_COUNT; class++) {
        /* atomic_load takes a non-const pointer in C11; the counters are only read. */
        op_latency_t *counters = (op_latency_t *)latency;
        append_class(out, names[class], atomic_load(&counters->classes[class].micros),
                     atomic_load(&counters->classes[class].ops));
    }
    append_class(out, "transactions", 0, 0);
}
