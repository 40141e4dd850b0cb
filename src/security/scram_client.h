/* The client side of SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677) as a
 * MongoDB driver runs it: the proxy authenticates its own connections to the
 * tiers with it. Pure, like scram.h's server side: the caller carries the
 * messages (saslStart / saslContinue payloads). */
#ifndef TC_SECURITY_SCRAM_CLIENT_H
#define TC_SECURITY_SCRAM_CLIENT_H

#include "security/scram.h"

/* The keys one password gives for one salt and iteration count. PBKDF2 is the
 * costly step (thousands of HMACs), and a server keeps a user's salt, so the
 * owner of a password (a connection pool) keeps its last derivation here and
 * every later conversation with the same salt skips it, as drivers cache it. */
typedef struct scram_client_key_cache {
    bool valid;
    scram_mechanism_t mechanism;
    uint8_t salt[SCRAM_MAX_SALT_BYTES];
    size_t salt_length;
    uint32_t iterations;
    uint8_t client_key[SCRAM_MAX_HASH_BYTES];
    uint8_t server_key[SCRAM_MAX_HASH_BYTES];
} scram_client_key_cache_t;

/* Wipes the keys. */
void scram_client_key_cache_clear(scram_client_key_cache_t *cache);

/* --- one conversation -----------------------------------------------------------
 *
 *   client-first  "n,,n=user,r=cnonce"            <- scram_client_first_message()
 *   server-first  "r=cnonce+snonce,s=salt,i=N"    -> scram_client_receive_first()
 *   client-final  "c=biws,r=cnonce+snonce,p=..."  <- (its output)
 *   server-final  "v=ServerSignature"             -> scram_client_receive_final()
 *
 * Any failure ends the conversation. The client refuses a server that does not
 * extend its nonce, asks for fewer than SCRAM_MIN_ITERATIONS, or cannot prove it
 * knows the password (a wrong server signature). */
typedef struct scram_client scram_client_t;

/* A conversation for user with a password already prepared for mechanism (what
 * it feeds PBKDF2: scram_prepare_password()'s output; the RFC vectors' plain
 * "pencil"). client_nonce: NULL for 24 random bytes in base64 (the RFC vectors
 * pass theirs). cache: NULL, or one that outlives the conversation. Copies what it
 * keeps; free with scram_client_destroy(). */
scram_client_t *scram_client_new_prepared(scram_mechanism_t mechanism, const char *user, const char *prepared_password,
                                          const char *client_nonce, scram_client_key_cache_t *cache);

/* The same from the clear password, prepared as MongoDB does (the SCRAM-SHA-1
 * digest, SASLprep for SCRAM-SHA-256). NULL with BadValue for a password SASLprep
 * refuses. */
scram_client_t *scram_client_new(scram_mechanism_t mechanism, const char *user, const char *password,
                                 scram_client_key_cache_t *cache, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. Wipes the password and keys it held. */
void scram_client_destroy(scram_client_t *client);

/* client-first-message, with the user name escaped (',' as =2C, '=' as =3D).
 * *out_message is NUL-terminated; the caller frees it with bson_free(). Errors:
 * IllegalOperation (out of order). */
bool scram_client_first_message(scram_client_t *client, char **out_message, size_t *out_length,
                                bson_error_t *error) TC_MUST_CHECK;

/* Reads server-first-message and answers with client-final-message (the proof),
 * freed by the caller with bson_free(). Errors: BadValue (malformed, a nonce
 * that does not extend ours, too few iterations), AuthenticationFailed (the
 * server sent "e=..."), IllegalOperation. */
bool scram_client_receive_first(scram_client_t *client, const uint8_t *message, size_t length, char **out_message,
                                size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* Checks server-final-message: "v=" with the signature only a server holding
 * the user's ServerKey can compute. Then scram_client_succeeded() is true.
 * Errors: AuthenticationFailed ("e=..." or a wrong signature), BadValue,
 * IllegalOperation. */
bool scram_client_receive_final(scram_client_t *client, const uint8_t *message, size_t length,
                                bson_error_t *error) TC_MUST_CHECK;

bool scram_client_succeeded(const scram_client_t *client);

#endif
