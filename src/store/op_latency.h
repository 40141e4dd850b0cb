/* serverStatus.opLatencies: the time commands spend in their handlers, summed
 * per class (reads, writes, commands) as mongod sums it, in microseconds. */
#ifndef TC_STORE_OP_LATENCY_H
#define TC_STORE_OP_LATENCY_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdint.h>

typedef enum op_latency_class {
    OP_LATENCY_READS,
    OP_LATENCY_WRITES,
    OP_LATENCY_COMMANDS,
    OP_LATENCY_CLASS_COUNT,
} op_latency_class_t;

/* Zero-initialized (a static or a member of a zeroed struct) is ready to use. */
typedef struct op_latency {
    struct {
        _Atomic uint64_t micros;
        _Atomic uint64_t ops;
    } classes[OP_LATENCY_CLASS_COUNT];
} op_latency_t;

/* The class mongod gives a command: find, getMore, count, distinct and
 * aggregate are reads; insert, update, delete and findAndModify are writes;
 * everything else is a command. */
op_latency_class_t op_latency_class_of(const char *command_name);

/* Adds one operation of command_name that took micros. Thread-safe. */
void op_latency_record(op_latency_t *latency, const char *command_name, uint64_t micros);

/* Appends {reads: {latency, ops}, writes: ..., commands: ..., transactions: ...}
 * as the fields of out (the caller opens and closes the opLatencies document).
 * transactions stays at zero: the store runs no multi-document transactions. */
void op_latency_append(const op_latency_t *latency, bson_t *out);

#endif
