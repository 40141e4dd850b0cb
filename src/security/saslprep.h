/* SASLprep (RFC 4013), the string preparation SCRAM-SHA-256 applies to passwords
 * before hashing, so "pass\u00A0word" and "pass word" give the same keys on the
 * server and in every driver.
 *
 * Implemented: the mapping step (non-ASCII spaces, table C.1.2, become U+0020;
 * the characters of table B.1 are removed) and the prohibited output of tables
 * C.1.2, C.2.1, C.2.2, C.3, C.4, C.6, C.7, C.8 and C.9; invalid UTF-8 (the
 * surrogates of C.5 included) is refused. Skipped: NFKC normalization (step 2),
 * the bidirectional check (step 4) and the unassigned code points of table A.1.
 * ASCII passwords are therefore prepared exactly; a password with characters
 * NFKC changes (full-width forms, ligatures, superscripts, decomposed accents)
 * gets keys a driver that normalizes will not reproduce.
 */
#ifndef TC_SECURITY_SASLPREP_H
#define TC_SECURITY_SASLPREP_H

#include "common/error.h"

/* Prepares the NUL-terminated UTF-8 string text. On success *out_prepared is a
 * new string the caller frees with bson_free(). Errors: BadValue naming the
 * offending code point (never echoing the password). */
bool saslprep(const char *text, char **out_prepared, bson_error_t *error) TC_MUST_CHECK;

#endif
