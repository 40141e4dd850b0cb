/* Pins and eviction intents in the fast tier: how the evictor and the proxies'
 * fault-ins exclude each other across processes (issue 16). Pure (libbson, the
 * config, query/order.h; no I/O but the holder's host name): the documents, the
 * filters and the rules, shared by the evictor (evictor.c) and the proxy
 * (src/proxy/router_pins.c).
 *
 * A proxy that may not run the evictor itself records each write's pin in
 * thermocline.pins before it looks for the write's documents in the fast tier:
 *   {_id: ObjectId, ns, ids: [...], whole, holder, lifetimeMillis, at}
 * (whole: a write chosen by a filter pins its namespace; ids split in documents of
 * at most TIER_PIN_IDS_PER_DOCUMENT), and removes it once the write is answered.
 * The evictor records each delete batch's intent in thermocline.evictions before it
 * reads the pins:
 *   {_id: ObjectId, ns, ids: [...], term, holder, lifetimeMillis, at}
 * and removes it after its deletes. Each side writes its own document, then reads
 * the other's (Dekker): the evictor skips every pinned _id, and the proxy waits
 * until the intents it saw covering its ids are gone before its fast-tier check.
 * At least one of them sees the other; both seeing each other is safe.
 *
 * Both expire `lifetimeMillis` after `at`, the fast tier's own clock when written
 * ($currentDate): readers compare with the fast tier's $$NOW, so no two hosts'
 * clocks are compared, and a process killed -9 holds nothing for long. */
#ifndef TC_TIER_PINS_H
#define TC_TIER_PINS_H

#include "config/config.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TIER_PINS_COLLECTION "pins"
#define TIER_EVICTIONS_COLLECTION "evictions"
#define TIER_PIN_IDS_PER_DOCUMENT 10000
#define TIER_PIN_HOLDER_SIZE 160

/* Whether a proxy writes its pins in the fast tier as well as in memory: unless
 * the evictor runs in its own process and no other proxy is seen alive (the
 * evictor's lease may then move to one mid-request). */
bool tier_pins_in_fast_tier(bool evictor_runs_here, int peers);

/* How long a pin lives: twice the longest a fault-in may take before its write is
 * sent (an eviction intent waited out, leaseTimeout; the feeder's wait,
 * readYourWritesWait; a call retried, failoverWait) plus 5 s for the calls. The
 * proxy sends the write only within the first half (tier_pin_fresh), so the write
 * has the second half to run. */
int64_t tier_pin_lifetime_ms(const config_t *config);
/* Whether a write whose pins were sent sent_ms ago (monotonic) may still be sent. */
bool tier_pin_fresh(const config_t *config, int64_t sent_ms, int64_t now_ms);

/* How long an eviction intent lives: leaseTimeout (at least 1 s), so that a dead
 * evictor's intent holds writes no longer than its lease holds eviction. The
 * evictor deletes only within its first half (tier_eviction_fresh). */
int64_t tier_eviction_lifetime_ms(const config_t *config);
bool tier_eviction_fresh(const config_t *config, int64_t sent_ms, int64_t now_ms);

/* "<host> pid <pid>": who wrote a pin or an intent, for an operator. */
void tier_pins_holder(char *out, size_t size);

/* Appends to the statements array of an update of thermocline.pins (from key
 * *index on) the upserts of the pin documents of ids (a BSON array, may be empty)
 * and, when whole, of the namespace; their _ids are appended to out_keys (an
 * array being built). Upserts, so a call sent twice writes each once. */
void tier_pins_append_upserts(bson_t *statements, uint32_t *index, const char *ns, const bson_t *ids, bool whole,
                              const char *holder, int64_t lifetime_ms, bson_t *out_keys);

/* The upsert statement of an eviction intent (_id key, a fresh ObjectId). */
void tier_eviction_append_upsert(bson_t *statements, const char *statement_key, const bson_oid_t *key,
                                 const char *ns, const bson_value_t *ids, size_t count, int64_t term,
                                 const char *holder, int64_t lifetime_ms);

/* Appends to a filter the condition "not expired" (alive) or "expired", on the
 * fast tier's clock. */
void tier_pins_append_alive(bson_t *filter, bool alive);

/* The evictor's read of the live pins that cover any of ids[count] in ns:
 * {ns, $or: [{whole: true}, {ids: {$in: ids}}], alive}. out initialised here. */
void tier_pins_filter_for_batch(const char *ns, const bson_value_t *ids, size_t count, bson_t *out);

/* Which of ids[count] the pin documents (a BSON array, as read) cover: sets
 * out_pinned[i] (never clears it); returns how many it set. */
size_t tier_pins_covered(const bson_t *pins, const bson_value_t *ids, size_t count, bool *out_pinned);

/* A proxy's first read of the live intents that may cover its pin: in ns, naming
 * one of ids (an array), or any when whole. out initialised here. */
void tier_evictions_filter_for_pin(const char *ns, const bson_t *ids, bool whole, bson_t *out);

/* Whether an intent, as read (with ns and ids), is one that filter would find
 * (alive aside): in ns, naming one of ids (an array), or any when whole. So one
 * read of the intents covering several writes' pins tells each write its own. */
bool tier_eviction_covers(const bson_t *intent, const char *ns, const bson_t *ids, bool whole);

/* Its next reads: the intents it saw (keys, an array of their _ids) still alive. */
void tier_evictions_filter_for_keys(const bson_t *keys, bson_t *out);

/* The _ids of the documents of a read (a BSON array), appended to out_keys (an
 * array being built). Returns how many. */
uint32_t tier_pins_collect_keys(const bson_t *documents, bson_t *out_keys);

#endif
