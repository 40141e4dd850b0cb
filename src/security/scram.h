/* SCRAM (RFC 5802) with SHA-1 and SHA-256 (RFC 7677) as MongoDB uses them: the
 * credentials a server keeps (salt, iteration count, StoredKey, ServerKey: never
 * the password), how user documents hold them, and the server side of the
 * three-message conversation (the client's is scram_client.h). Pure:
 * no storage, no network; the caller finds a user's credentials and carries the
 * messages, so the store and the proxy share it. OpenSSL's libcrypto does the
 * hashing (SHA, HMAC, PBKDF2) and the randomness. */
#ifndef TC_SECURITY_SCRAM_H
#define TC_SECURITY_SCRAM_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef enum scram_mechanism {
    SCRAM_SHA_1,
    SCRAM_SHA_256,
} scram_mechanism_t;

#define SCRAM_MAX_HASH_BYTES 32
#define SCRAM_MAX_SALT_BYTES 64
/* mongod's defaults (scramIterationCount, scramSHA256IterationCount). */
#define SCRAM_SHA_1_DEFAULT_ITERATIONS 10000
#define SCRAM_SHA_256_DEFAULT_ITERATIONS 15000
/* RFC 7677 asks for at least 4096; mongod refuses fewer than 5000 in its own
 * settings, but stored credentials are honoured as found. */
#define SCRAM_MIN_ITERATIONS 4096

/* What a server stores for one user and mechanism. */
typedef struct scram_credentials {
    scram_mechanism_t mechanism;
    uint32_t iterations;
    uint8_t salt[SCRAM_MAX_SALT_BYTES];
    size_t salt_length;
    uint8_t stored_key[SCRAM_MAX_HASH_BYTES]; /* H(ClientKey); scram_hash_length() bytes */
    uint8_t server_key[SCRAM_MAX_HASH_BYTES]; /* HMAC(SaltedPassword, "Server Key") */
} scram_credentials_t;

/* "SCRAM-SHA-1", "SCRAM-SHA-256". */
const char *scram_mechanism_name(scram_mechanism_t mechanism);

/* Exact, case-sensitive match of a mechanism name, as mongod matches it. */
bool scram_mechanism_from_name(const char *name, scram_mechanism_t *out_mechanism);

/* 20 for SHA-1, 32 for SHA-256. */
size_t scram_hash_length(scram_mechanism_t mechanism);

/* mongod's salt length: the hash length minus 4 (16 and 28 bytes). */
size_t scram_salt_length(scram_mechanism_t mechanism);

/* The string a mechanism feeds PBKDF2, as MongoDB defines it: for SCRAM-SHA-1 the
 * hex MD5 of "user:mongo:password" (the legacy digest), for SCRAM-SHA-256 the
 * SASLprep of the password. Caller frees *out_prepared with bson_free(). Errors:
 * BadValue (a password SASLprep refuses). */
bool scram_prepare_password(scram_mechanism_t mechanism, const char *user, const char *password,
                            char **out_prepared, bson_error_t *error) TC_MUST_CHECK;

/* RFC 5802 section 3: SaltedPassword := Hi(prepared, salt, i); StoredKey :=
 * H(HMAC(SaltedPassword, "Client Key")); ServerKey := HMAC(SaltedPassword,
 * "Server Key"). Errors: BadValue (salt too long, too few iterations). */
bool scram_derive_credentials(scram_mechanism_t mechanism, const char *prepared_password, const uint8_t *salt,
                              size_t salt_length, uint32_t iterations, scram_credentials_t *out_credentials,
                              bson_error_t *error) TC_MUST_CHECK;

/* New credentials for user and password: a random salt of mongod's length,
 * iterations (0: the mechanism's default), then scram_prepare_password and
 * scram_derive_credentials. The password is not kept anywhere. */
bool scram_credentials_generate(scram_mechanism_t mechanism, const char *user, const char *password,
                                uint32_t iterations, scram_credentials_t *out_credentials,
                                bson_error_t *error) TC_MUST_CHECK;

/* The credentials of mechanism in a user document, as admin.system.users and
 * usersInfo with showCredentials hold them: {credentials: {"SCRAM-SHA-256":
 * {iterationCount, salt, storedKey, serverKey}}}. false: none, or malformed. */
bool scram_credentials_from_user_document(const bson_t *document, scram_mechanism_t mechanism,
                                          scram_credentials_t *out_credentials);

/* Appends {"SCRAM-SHA-1": {iterationCount, salt, storedKey, serverKey}, ...}
 * under key, as mongod stores them (base64 strings). */
void scram_credentials_append_document(bson_t *out, const char *key, const scram_credentials_t *credentials,
                                       size_t count);

/* --- the server side of one conversation ---------------------------------------
 *
 *   client-first  "n,,n=user,r=cnonce"           -> scram_server_receive_first()
 *                                                   caller looks up user's credentials
 *   server-first  "r=cnonce+snonce,s=salt,i=N"   <- scram_server_first_message()
 *   client-final  "c=biws,r=cnonce+snonce,p=..."  -> scram_server_receive_final()
 *   server-final  "v=ServerSignature"            <- (its output)
 *
 * A failure at any step ends the conversation; the error says why for the
 * server's log (it never holds a secret). mongod answers every such failure with
 * AuthenticationFailed "Authentication failed.", and so should the caller. */
typedef struct scram_server scram_server_t;

/* server_nonce: NULL for 24 random bytes in base64 (as mongod); tests pass the
 * RFC vectors' nonce. Free with scram_server_destroy(). */
scram_server_t *scram_server_new(scram_mechanism_t mechanism, const char *server_nonce);

/* Safe on NULL. Wipes the keys it held. */
void scram_server_destroy(scram_server_t *server);

scram_mechanism_t scram_server_mechanism(const scram_server_t *server);

/* Parses client-first-message. Errors: BadValue (channel binding requested,
 * mandatory extensions, a malformed user name or nonce, authzid not the user),
 * IllegalOperation (called out of order). */
bool scram_server_receive_first(scram_server_t *server, const uint8_t *message, size_t length,
                                bson_error_t *error) TC_MUST_CHECK;

/* The user name from client-first-message, with =2C and =3D decoded; owned by
 * server; NULL before scram_server_receive_first() succeeded. */
const char *scram_server_user(const scram_server_t *server);

/* Builds server-first-message from the user's stored credentials (a copy is
 * kept). *out_message is NUL-terminated; the caller frees it with bson_free().
 * Errors: BadValue (credentials of another mechanism), IllegalOperation. */
bool scram_server_first_message(scram_server_t *server, const scram_credentials_t *credentials,
                                char **out_message, size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* Checks client-final-message: the channel binding repeats the GS2 header, the
 * nonce is the combined one, and the proof is right. On success *out_message is
 * server-final-message ("v=..."), freed by the caller with bson_free(), and
 * scram_server_succeeded() becomes true. Errors: AuthenticationFailed (wrong
 * proof: the wrong password), BadValue (malformed), IllegalOperation. */
bool scram_server_receive_final(scram_server_t *server, const uint8_t *message, size_t length,
                                char **out_message, size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

bool scram_server_succeeded(const scram_server_t *server);

#endif
