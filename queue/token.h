/*
 * token.h - API tokens of the HTTP gateway (issue 17): what a token is,
 * how it is kept, and the record kept for it. Pure: no I/O, no globals.
 *
 * A token is "sqt_" and 43 characters of base64url (32 random bytes, no
 * padding): 47 bytes, printed once by `sandq tenant token add` and never
 * stored. What is stored is its SHA-256 (64 lower-case hex digits), the
 * field of one Redis hash:
 *
 *   PREFIX:tokens   hash: SHA256HEX -> JSON record
 *
 *   {"tenant": "acme", "name": "ci", "admin": false, "created_at": MS}
 *
 * An admin token names no tenant ("tenant": "") and reaches the operator's
 * views; any other acts as its tenant alone. The key matches no
 * PREFIX:{T}:* pattern, so no tenant's Redis user can read or forge it.
 * Tokens are compared by hash only: a lookup is one HGET of the hash of
 * what the request presented.
 */
#ifndef SANDQ_QUEUE_TOKEN_H
#define SANDQ_QUEUE_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define TOKEN_PREFIX "sqt_"
#define TOKEN_LEN 47			/* "sqt_" and 43 base64url characters */
#define TOKEN_HASH_HEX 64		/* SHA-256, lower-case hex */
#define TOKEN_NAME_MAX 64		/* bytes of a token's name: [A-Za-z0-9_.-] */
#define TOKEN_RECORD_MAX 1024		/* bytes of a stored record */

/* What is kept for one token. */
struct token_record {
	char tenant[65];		/* "" for an admin token */
	char name[TOKEN_NAME_MAX + 1];	/* the operator's label for it */
	bool admin;
	int64_t created_at;		/* epoch ms */
};

/* "PREFIX:tokens" into buf (size bytes). Returns its length or -ENAMETOOLONG. */
int token_key(char *buf, size_t size, const char *prefix);
/*
 * A new token (TOKEN_LEN bytes and a NUL) from the OS's random bytes
 * (OpenSSL's RAND_bytes). Returns 0 or -EIO.
 */
int token_new(char out[TOKEN_LEN + 1]);
/*
 * Whether s has a token's shape (prefix, length, alphabet): checked before
 * anything is hashed or looked up, so that a header of the wrong shape is
 * refused the same way whatever it holds.
 */
bool token_shape_ok(const char *s, size_t len);
/* The SHA-256 of token (len bytes) as 64 lower-case hex digits and a NUL. */
void token_hash_hex(const char *token, size_t len, char out[TOKEN_HASH_HEX + 1]);
/* Whether name is a valid token name: 1..TOKEN_NAME_MAX of [A-Za-z0-9_.-]. */
bool token_name_ok(const char *name);
/*
 * r's JSON text (malloc'd) into *out. Returns 0, or -EINVAL with e when r
 * is not one: an admin token with a tenant, a tenant token without a
 * valid tenant name, a bad name.
 */
int token_record_encode(const struct token_record *r, char **out, struct err *e);
/*
 * Reads a stored record (len bytes, at most TOKEN_RECORD_MAX), checking
 * what encode checks. Returns 0, or -EINVAL with e saying what is wrong.
 */
int token_record_decode(const char *json, size_t len, struct token_record *r,
    struct err *e);

#endif
