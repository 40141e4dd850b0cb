/* Change events as mongod 6.0's change streams report them, built from oplog
 * entries (oplog.h), and the resume tokens that identify and order them. Pure
 * logic, no storage: the current version of a document (fullDocument:
 * "updateLookup") comes through a callback. change_stream.c runs the streams. */
#ifndef TC_STORE_CHANGE_EVENT_H
#define TC_STORE_CHANGE_EVENT_H

#include "common/error.h"

#include <stdint.h>

/* --- resume tokens -------------------------------------------------------------
 * A token is a cluster time, a kind and, for the operations of a transaction
 * (which share one entry and one cluster time), the operation's index in it; on
 * the wire {_data: "<hex>"} whose hex is 0x82 (KeyString's Timestamp type, as in
 * mongod's tokens), the time's 8 bytes big-endian, the kind, then, only when the
 * index is not 0, the index's 4 bytes big-endian: tokens sort as their hex
 * strings do, and in stream order. Clients treat them as opaque. */
typedef enum change_token_kind {
    CHANGE_TOKEN_START = 0x00,           /* before every event at time: startAtOperationTime */
    CHANGE_TOKEN_EVENT = 0x01,           /* the event recorded at time */
    CHANGE_TOKEN_INVALIDATE = 0x02,      /* the invalidate that follows it */
    CHANGE_TOKEN_HIGH_WATER_MARK = 0xff, /* everything at time has been seen */
} change_token_kind_t;

typedef struct change_token {
    uint64_t time; /* seconds << 32 | increment */
    change_token_kind_t kind;
    uint32_t index; /* CHANGE_TOKEN_EVENT: the operation's place in its transaction */
} change_token_t;

/* Stream order: <0, 0 or >0. */
int change_token_compare(const change_token_t *left, const change_token_t *right);

/* Appends {_data: "<hex>"} under key. */
void change_token_append(bson_t *out, const char *key, const change_token_t *token);

/* Reads a token document. Errors as mongod's: 40647 when _data is missing or
 * not a string, FailedToParse 9 when it is not hex or not a token this server
 * makes. */
bool change_token_parse(const bson_t *document, change_token_t *out, bson_error_t *error) TC_MUST_CHECK;

/* --- what a stream watches ------------------------------------------------------ */

typedef enum change_scope {
    CHANGE_SCOPE_COLLECTION, /* aggregate: "coll" */
    CHANGE_SCOPE_DATABASE,   /* aggregate: 1 on a database */
    CHANGE_SCOPE_CLUSTER,    /* aggregate: 1 on admin, allChangesForCluster */
} change_scope_t;

typedef enum change_full_document {
    CHANGE_FULL_DOCUMENT_DEFAULT,
    CHANGE_FULL_DOCUMENT_UPDATE_LOOKUP,  /* updates: the document as it is when read */
    CHANGE_FULL_DOCUMENT_WHEN_AVAILABLE, /* updates: the stored post-image, or null */
    CHANGE_FULL_DOCUMENT_REQUIRED,       /* updates: the stored post-image, or an error */
} change_full_document_t;

typedef enum change_before_change {
    CHANGE_BEFORE_CHANGE_OFF,
    CHANGE_BEFORE_CHANGE_WHEN_AVAILABLE,
    CHANGE_BEFORE_CHANGE_REQUIRED,
} change_before_change_t;

typedef struct change_spec {
    change_scope_t scope;
    const char *database;   /* collection and database scopes */
    const char *collection; /* collection scope */
    change_full_document_t full_document;
    change_before_change_t full_document_before_change;
    /* showExpandedEvents: collectionUUID on every event, operationDescription,
     * and the create, createIndexes, dropIndexes and modify (collMod) events. */
    bool show_expanded_events;
} change_spec_t;

/* Reads the current version of the document with document_key ({_id: ...}) in
 * ns into out_document (initialized by the callee when *out_found). */
typedef bool (*change_lookup_fn)(void *context, const char *ns, const bson_t *document_key,
                                 bson_t *out_document, bool *out_found, bson_error_t *error);

/* --- events -------------------------------------------------------------------- */

typedef struct change_events {
    bson_t **documents; /* count of them */
    change_token_t *tokens;
    size_t count;
    size_t capacity;
} change_events_t;

/* The events the oplog entry recorded at time gives a stream of spec, in order:
 * none (another namespace, a system collection, a no-op, and without
 * show_expanded_events a create, createIndexes, dropIndexes or collMod), one
 * (insert, update, replace, delete, drop, rename, dropDatabase, and the expanded
 * create, createIndexes, dropIndexes, modify), that event and the
 * invalidate that ends the stream (a collection's drop or rename for its stream,
 * a dropDatabase for its database's streams), or, for a transaction's applyOps
 * entry, one event per operation in scope, in the transaction's order, each with
 * the transaction's lsid and txnNumber. lookup is called only for updateLookup;
 * it may be NULL otherwise. Errors: NoMatchingDocument 47 when a required image
 * is missing. out is initialized even on failure; free it with
 * change_events_cleanup(). */
bool change_events_build(const bson_t *entry, uint64_t time, const change_spec_t *spec, change_lookup_fn lookup,
                         void *lookup_context, change_events_t *out, bson_error_t *error) TC_MUST_CHECK;
void change_events_cleanup(change_events_t *events);

/* True for the databases no stream sees: admin, config, local. */
bool change_event_internal_database(const char *database);

#endif
