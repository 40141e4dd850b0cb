/* The store's request entry point: one wire message in, one reply out. */
#ifndef TC_STORE_DISPATCH_H
#define TC_STORE_DISPATCH_H

#include "store/commands.h"

/* Decodes request, runs its command, encodes the reply into out_reply (data
 * NULL for moreToCome; close_after for a message that cannot be answered). */
void dispatch_message(store_t *store, storage_session_t *session, const server_request_t *request,
                      server_reply_t *out_reply);

/* Runs one command document (with $db) and fills reply with its fields and ok
 * (or the error fields). *out_delay_ms is set by awaitable hello. */
void dispatch_command(store_t *store, storage_session_t *session, const bson_t *command, uint64_t connection_id,
                      const char *peer_address, bson_t *reply, uint32_t *out_delay_ms);

#endif
