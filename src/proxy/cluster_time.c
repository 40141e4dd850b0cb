/* $clusterTime gossip across the two tiers. Each tier is a replica set of its own,
 * with its own clock and its own signing keys: a tier refuses a $clusterTime signed
 * by the other. So the proxy keeps the highest $clusterTime each tier has sent;
 * clients get the higher of the two, as a mongos gossips its cluster's time, and
 * each tier gets only its own. A readConcern afterClusterTime beyond the tier's
 * latest known time is lowered to it: every write of that tier the client can have
 * seen is at or before that time, and the other tier's writes reach the archive
 * through the feeder, which read-your-writes already waits for. Everything is done
 * in place when the documents have the same size, as they do between two tiers of
 * one kind; the message is rebuilt only to remove a $clusterTime. */
#include "proxy/proxy_private.h"

#include "wire/wire.h"

#include <string.h>

/* The value of body's document field `name`, in place: its bytes and length. */
static uint8_t *find_document_in_place(const bson_t *body, const char *name, uint32_t *out_length)
{
    bson_iter_t iter;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, body, name) || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return NULL;
    }
    bson_iter_document(&iter, out_length, &data);
    return (uint8_t *)data;
}

/* The clusterTime of a $clusterTime document; 0 when it has none. */
static uint64_t cluster_time_value(const uint8_t *data, uint32_t length)
{
    bson_t document;
    bson_iter_t iter;
    if (!bson_init_static(&document, data, length) || !bson_iter_init_find(&iter, &document, "clusterTime") ||
        !BSON_ITER_HOLDS_TIMESTAMP(&iter)) {
        return 0;
    }
    return timestamp_of_iter(&iter);
}

void cluster_time_note(proxy_t *proxy, proxy_tier_t tier, const bson_t *reply_body)
{
    uint32_t length;
    const uint8_t *data = find_document_in_place(reply_body, "$clusterTime", &length);
    if (data == NULL) {
        return;
    }
    uint64_t value = cluster_time_value(data, length);
    if (value > proxy->cluster_time_values[tier]) {
        bson_destroy(proxy->cluster_times[tier]);
        proxy->cluster_times[tier] = bson_new_from_data(data, length);
        proxy->cluster_time_values[tier] = value;
    }
}

/* The tier whose $clusterTime is the highest; -1 when neither sent one. */
static int highest_tier(const proxy_t *proxy)
{
    int highest = -1;
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        if (proxy->cluster_times[tier] != NULL &&
            (highest < 0 || proxy->cluster_time_values[tier] > proxy->cluster_time_values[highest])) {
            highest = tier;
        }
    }
    return highest;
}

/* Lowers readConcern.afterClusterTime to the tier's latest time, in place. */
static void cap_after_cluster_time(const proxy_t *proxy, proxy_tier_t tier, const bson_t *body)
{
    bson_iter_t iter, field;
    if (proxy->cluster_times[tier] == NULL || !bson_iter_init_find(&iter, body, "readConcern") ||
        !BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &field) ||
        !bson_iter_find(&field, "afterClusterTime") || !BSON_ITER_HOLDS_TIMESTAMP(&field) ||
        timestamp_of_iter(&field) <= proxy->cluster_time_values[tier]) {
        return;
    }
    uint64_t capped = proxy->cluster_time_values[tier];
    uint8_t little_endian[8];
    uint32_t increment = BSON_UINT32_TO_LE((uint32_t)capped);
    uint32_t seconds = BSON_UINT32_TO_LE((uint32_t)(capped >> 32));
    memcpy(little_endian, &increment, 4);
    memcpy(little_endian + 4, &seconds, 4);
    memcpy((uint8_t *)field.raw + field.d1, little_endian, 8);
}

/* message as the tier must get it when the client's $clusterTime cannot be
 * replaced in place (a driver that re-encodes keyId Long(0) as an int32, as the
 * Node.js driver does, sends a shorter one): *out_message (the caller frees it) is
 * message with that element spliced out and own (the tier's latest time, or
 * nothing when NULL) spliced in, the body's and the message's lengths adjusted, and
 * a checksum refreshed. Every other byte is the message's own, so the router's
 * in-place edits (a getMore's cursor id, a capped afterClusterTime) reach the tier;
 * a getMore rebuilt from the client's command would name the proxy's cursor id.
 * client_time: the element's value inside message's body (client_length bytes). */
static void splice_cluster_time(const uint8_t *message, size_t length, const bson_t *body, const uint8_t *client_time,
                                uint32_t client_length, const bson_t *own, uint8_t **out_message,
                                size_t *out_length)
{
    static const char key[] = "$clusterTime";
    const size_t element_prefix = 1 + sizeof key; /* the type byte, the key and its NUL */
    const uint8_t *element = client_time - element_prefix;
    const uint8_t *element_end = client_time + client_length;
    const size_t replacement = own != NULL ? element_prefix + own->len : 0;
    const size_t removed = (size_t)(element_end - element);
    const size_t new_length = length - removed + replacement;
    const size_t body_offset = (size_t)(bson_get_data(body) - message);
    if (new_length > INT32_MAX || body->len - removed + replacement > INT32_MAX) {
        return; /* sent as the client wrote it */
    }
    uint8_t *out = bson_malloc(new_length);
    size_t before = (size_t)(element - message);
    memcpy(out, message, before);
    if (own != NULL) {
        out[before] = BSON_TYPE_DOCUMENT;
        memcpy(out + before + 1, key, sizeof key);
        memcpy(out + before + element_prefix, bson_get_data(own), own->len);
    }
    memcpy(out + before + replacement, element_end, length - (size_t)(element_end - message));
    uint32_t message_length = BSON_UINT32_TO_LE((uint32_t)new_length);
    uint32_t body_length = BSON_UINT32_TO_LE((uint32_t)(body->len - removed + replacement));
    memcpy(out, &message_length, 4);
    memcpy(out + body_offset, &body_length, 4);
    wire_message_set_request_id(out, new_length, wire_message_request_id(out)); /* refreshes a checksum */
    *out_message = out;
    *out_length = new_length;
}

void cluster_time_prepare_request(proxy_t *proxy, proxy_tier_t tier, uint8_t *message, size_t length,
                                  uint8_t **out_message, size_t *out_length)
{
    bson_t body;
    bson_error_t error;
    uint32_t client_length;
    *out_message = NULL;
    if (wire_message_opcode(message) != WIRE_OP_MSG || !wire_op_msg_peek_body(message, length, &body, &error)) {
        return;
    }
    cap_after_cluster_time(proxy, tier, &body);
    uint8_t *client_time = find_document_in_place(&body, "$clusterTime", &client_length);
    if (client_time == NULL) {
        return;
    }
    const bson_t *own = proxy->cluster_times[tier];
    if (own != NULL && own->len == client_length) {
        memcpy(client_time, bson_get_data(own), client_length); /* the tier's own latest time */
        return;
    }
    /* Not in place: the tier's own latest time spliced in instead, or nothing. */
    splice_cluster_time(message, length, &body, client_time, client_length, own, out_message, out_length);
}

void cluster_time_prepare_reply(proxy_t *proxy, uint8_t *message, size_t length)
{
    bson_t body;
    bson_error_t error;
    uint32_t reply_length;
    int highest = highest_tier(proxy);
    if (highest < 0 || wire_message_opcode(message) != WIRE_OP_MSG ||
        !wire_op_msg_peek_body(message, length, &body, &error)) {
        return;
    }
    uint8_t *reply_time = find_document_in_place(&body, "$clusterTime", &reply_length);
    const bson_t *best = proxy->cluster_times[highest];
    if (reply_time != NULL && best->len == reply_length &&
        cluster_time_value(reply_time, reply_length) < proxy->cluster_time_values[highest]) {
        memcpy(reply_time, bson_get_data(best), reply_length);
    }
}

void cluster_time_append(proxy_t *proxy, bson_t *body)
{
    int highest = highest_tier(proxy);
    if (highest >= 0 && !bson_has_field(body, "$clusterTime")) {
        BSON_APPEND_DOCUMENT(body, "$clusterTime", proxy->cluster_times[highest]);
    }
}

void cluster_time_cleanup(proxy_t *proxy)
{
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        bson_destroy(proxy->cluster_times[tier]);
        proxy->cluster_times[tier] = NULL;
    }
}
