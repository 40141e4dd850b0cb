/* Read preferences as a mongos applies them: parsing a command's $readPreference
 * with mongos's errors, and choosing the replica set member of a tier that may
 * answer it, by the server selection specification (maxStalenessSeconds, then tag
 * sets, then the latency window), or FailedToSatisfyReadPreference (133) with
 * mongos's message. Pure: the members come from hello replies the caller holds. */
#ifndef TC_CLIENT_READ_PREFERENCE_H
#define TC_CLIENT_READ_PREFERENCE_H

#include "common/error.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define READ_PREFERENCE_ADDRESS_SIZE 270          /* host:port */
#define READ_PREFERENCE_LATENCY_WINDOW_MS 15      /* localThresholdMS */
#define READ_PREFERENCE_HEARTBEAT_MS 10000        /* heartbeatFrequencyMS, for staleness */
#define READ_PREFERENCE_MAX_MEMBERS 50            /* a replica set's voting and non-voting members, at most */

typedef enum read_preference_mode {
    READ_PREFERENCE_PRIMARY,
    READ_PREFERENCE_PRIMARY_PREFERRED,
    READ_PREFERENCE_SECONDARY,
    READ_PREFERENCE_SECONDARY_PREFERRED,
    READ_PREFERENCE_NEAREST,
} read_preference_mode_t;

/* A parsed $readPreference. tag_sets is a BSON array of documents, empty when
 * none were given (which means [{}]: any member); free with
 * read_preference_cleanup(). */
typedef struct read_preference {
    read_preference_mode_t mode;
    bson_t tag_sets;
    uint32_t tag_set_count;
    int64_t max_staleness_seconds; /* 0: none */
    bool has_hedge;                /* given, or nearest's default (enabled) */
    bool hedge_enabled;
} read_preference_t;

/* Parses command's $readPreference (absent: primary) as mongos does:
 * TypeMismatch 14, NoSuchKey 4, BadValue 2, InvalidOptions 72 and
 * MaxStalenessOutOfRange 160 with mongos's messages. out is always initialised. */
bool read_preference_parse(const bson_t *command, read_preference_t *out, bson_error_t *error) TC_MUST_CHECK;

void read_preference_cleanup(read_preference_t *preference);

typedef enum read_preference_member_type {
    READ_PREFERENCE_MEMBER_PRIMARY,
    READ_PREFERENCE_MEMBER_SECONDARY,
    READ_PREFERENCE_MEMBER_OTHER, /* unknown, recovering, arbiter, or not heard from */
} read_preference_member_type_t;

typedef struct read_preference_member {
    char address[READ_PREFERENCE_ADDRESS_SIZE];
    read_preference_member_type_t type;
    bson_t tags;             /* its hello's tags: {dc: "ny"}; empty when none */
    int64_t last_write_ms;   /* its hello's lastWrite.lastWriteDate; 0: unknown */
    uint64_t last_write_time; /* its hello's lastWrite.opTime.ts (seconds << 32 | increment); 0: unknown */
    int64_t last_update_ms;  /* when that hello arrived */
    int64_t round_trip_ms;   /* -1: unknown */
} read_preference_member_t;

/* A tier as the proxy knows it. standalone: no replica set, and read preferences
 * do not apply (any mode reads the one server). */
typedef struct read_preference_topology {
    bool standalone;
    char set_name[128];
    read_preference_member_t *members;
    size_t member_count;
} read_preference_topology_t;

/* The topology a tier's primary describes in its hello, received at now_ms: the
 * primary itself (its tags and lastWrite), and every other member it lists (hosts,
 * passives, arbiters) as OTHER, since the proxy has not heard from them. A hello
 * without setName is a standalone. Free with read_preference_topology_cleanup(). */
void read_preference_topology_from_hello(const bson_t *hello, int64_t now_ms, read_preference_topology_t *out);

/* The other data-bearing members a hello lists (hosts, then passives; not arbiters,
 * not the member itself, `me`; hidden members are never listed), at most capacity,
 * each once: the members a tier's reads may go to. Returns how many were stored. */
size_t read_preference_hello_hosts(const bson_t *hello, char (*out_addresses)[READ_PREFERENCE_ADDRESS_SIZE],
                                   size_t capacity);

/* Adds a member (its tags copied); returns it for the caller to fill in. */
read_preference_member_t *read_preference_topology_add(read_preference_topology_t *topology, const char *address,
                                                        read_preference_member_type_t type, const bson_t *tags);

void read_preference_topology_cleanup(read_preference_topology_t *topology);

/* The member that should answer: *out_index into topology->members. Among the
 * suitable members, those whose round trip (unknown counts as 0) is within
 * READ_PREFERENCE_LATENCY_WINDOW_MS of the lowest form the latency window, ordered by
 * round trip (the primary first among equals, then as listed); random picks one of
 * them (random % their number: 0 is the nearest), as mongos picks at random to
 * spread the reads. A standalone always answers. Fails with
 * FailedToSatisfyReadPreference 133: "Could not find host matching read preference
 * { mode: \"secondary\" } for set rs0". */
bool read_preference_select(const read_preference_topology_t *topology, const read_preference_t *preference,
                            uint32_t random, size_t *out_index, bson_error_t *error) TC_MUST_CHECK;

/* mongos's rendering: { mode: "nearest", tags: [ { dc: "ny" } ], maxStalenessSeconds: 120,
 * hedge: { enabled: true } }. The caller bson_free()s it. */
char *read_preference_describe(const read_preference_t *preference);

const char *read_preference_mode_name(read_preference_mode_t mode);

#endif
