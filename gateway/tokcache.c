/*
 * tokcache.c - the gateway's short memory of token records (internal.h):
 * a token presented again within TOKCACHE_TTL_MS is not looked up in
 * Redis again, which saves one round trip on most requests.
 *
 * DESIGN: a direct-mapped table of TOKCACHE_SLOTS entries indexed by the
 * token's SHA-256 (the hash is already uniform); a collision replaces the
 * older entry. It holds what PREFIX:tokens holds (hashes and records),
 * never a token. Only tokens Redis knew are kept: an unknown token is
 * looked up every time, so guessing fills nothing. The price is the TTL:
 * `sandq tenant token rm` (and `tenant rm`) take effect at every gateway
 * within TOKCACHE_TTL_MS (docs/gateway.md "Tokens").
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TOKCACHE_SLOTS 1024

struct slot {
	char hash[TOKEN_HASH_HEX + 1];
	struct token_record rec;
	uint64_t expires;	/* loop ms; 0: empty */
};

static struct slot slots[TOKCACHE_SLOTS];

/* The slot of a hash: its first 8 hex digits, modulo the table. */
static struct slot *
slot_of(const char *hash)
{
	return &slots[strtoul((char[9]){ hash[0], hash[1], hash[2], hash[3], hash[4],
	    hash[5], hash[6], hash[7], '\0' }, NULL, 16) % TOKCACHE_SLOTS];
}

bool
tokcache_get(const char *hash, uint64_t now, struct token_record *out)
{
	struct slot *s = slot_of(hash);

	if (s->expires <= now || memcmp(s->hash, hash, TOKEN_HASH_HEX) != 0)
		return false;
	*out = s->rec;
	return true;
}

void
tokcache_put(const char *hash, const struct token_record *rec, uint64_t now)
{
	struct slot *s = slot_of(hash);

	explicit_bzero(s, sizeof(*s));
	memcpy(s->hash, hash, TOKEN_HASH_HEX);
	s->rec = *rec;
	s->expires = now + TOKCACHE_TTL_MS;
}
