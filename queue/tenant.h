/*
 * tenant.h - a tenant's settings as a plain struct, their two stored forms
 * (a flat Redis hash and a JSON object), their Redis key names and the Redis
 * ACL rules of a tenant's own user. Pure: no I/O, no globals.
 *
 * Redis layout (docs/tenants.md "Redis layout"; PREFIX is "sandq"):
 *
 *   PREFIX:tenants       set of tenant names (docs/protocol.md, Keys)
 *   PREFIX:tenant:NAME   hash of NAME's settings, fields below
 *   PREFIX:tenants:gen   integer, INCR'd by every change to the two above
 *
 * None of these match PREFIX:{NAME}:*, the only keys a tenant's own ACL user
 * can reach, so no tenant can read the list of tenants or change its own
 * quotas. A dispatcher notices changes by polling PREFIX:tenants:gen.
 *
 * Lifecycle: tenant_conf_init() (defaults) -> tenant_conf_set() per field,
 * tenant_hash_decode() or tenant_json_decode() -> tenant_conf_check() ->
 * use, tenant_hash_encode() / tenant_json_encode() -> tenant_conf_free().
 * A struct tenant_conf may be copied by value only before deny or
 * image_sources is set; tenant_conf_copy() copies one at any time.
 */
#ifndef SANDQ_QUEUE_TENANT_H
#define SANDQ_QUEUE_TENANT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../proto/job.h"

#define TENANT_NAME_MAX 64		/* bytes of a name: [A-Za-z0-9_-] */
#define TENANT_WEIGHT_MAX 1000
#define TENANT_COUNT_MAX 1000000000u	/* max_running, max_queued */
#define TENANT_RATE_MAX 1000000.0	/* jobs per second */
#define TENANT_BURST_MAX 1000000u
#define TENANT_QUOTA_MAX (1ull << 50)	/* storage quota: 1 PiB */
#define TENANT_DENY_MAX 64		/* deny patterns per tenant */
#define TENANT_DENY_LEN_MAX 256		/* bytes of one deny pattern */
#define TENANT_IMAGE_SOURCES_MAX 32	/* image_sources patterns per tenant */
#define TENANT_FIELDS_MAX 20		/* fields of the hash form */
#define TENANT_HASH_VERSION 1		/* value of the "v" field */
#define TENANT_USER_PREFIX "sandq-"	/* ACL user of tenant T: sandq-T */
#define TENANT_ACL_ARGS_MAX 24		/* rules tenant_acl_rules() writes */

/* One tenant's settings. 0 in a limit means "no cap" or "the host's". */
struct tenant_conf {
	char name[TENANT_NAME_MAX + 1];	/* [A-Za-z0-9_-], 1..64 bytes */
	uint32_t weight;		/* 1..1000, share under contention; default 1 */
	uint32_t max_running;		/* jobs running at once; 0 = no cap */
	uint32_t max_queued;		/* jobs waiting; 0 = no cap */
	double rate;			/* jobs/s submitted; 0 = no cap */
	uint32_t burst;			/* token bucket size; 0 = max(1, ceil(rate)) */
	struct job_limits ceiling;	/* per limit; 0 = the host's ceiling */
	uint32_t net_mask;		/* bit (1u << NET_*) per allowed mode;
					 * 0 = the host's net_modes */
	uint64_t storage_quota_bytes;	/* all its sandboxes' snapshots; 0 = none */
	char **deny;			/* fnmatch(3) globs over the command text */
	size_t ndeny;			/* 0..TENANT_DENY_MAX */
	char **image_sources;		/* images/ref.h patterns, each valid; the
					 * tenant's images must match one as well
					 * as the host's list; none = the host's */
	size_t nimage_sources;		/* 0..TENANT_IMAGE_SOURCES_MAX */
};

/* The hash form: field names (static) and values (owned). */
struct tenant_hash {
	size_t n;
	const char *field[TENANT_FIELDS_MAX];
	char *value[TENANT_FIELDS_MAX];
};

/*** The record ***/

/*
 * Fills t with the defaults for tenant name (weight 1, everything else 0 or
 * empty). Returns 0, or -EINVAL with e naming the problem when name is not
 * a tenant name. t needs no tenant_conf_free() before this call.
 */
int tenant_conf_init(struct tenant_conf *t, const char *name, struct err *e);
/* Frees the deny and image_sources lists; t keeps its other values. NULL
 * is a no-op. */
void tenant_conf_free(struct tenant_conf *t);
/* Makes dst a deep copy of src (dst needs no tenant_conf_free() first). */
void tenant_conf_copy(struct tenant_conf *dst, const struct tenant_conf *src);

/*
 * Sets one field from its text (the hash form's spelling, e.g. "weight" =
 * "3", "ceiling.memory_bytes" = "8G", "net" = "none,unix", "deny" = patterns
 * separated by '\n', "image_sources" = patterns separated by ','). Lengths are explicit: a value from Redis may hold any
 * byte, and one with a NUL is refused. Returns 0 or -EINVAL with
 * e->msg = "field 'weight': must be 1..1000, got '0'"; an unknown field is
 * refused the same way. On failure t is unchanged.
 */
int tenant_conf_set(struct tenant_conf *t, const char *field, size_t flen,
    const char *value, size_t vlen, struct err *e);
/* Appends one deny pattern (copied). 0 or -EINVAL (count, length, bytes). */
int tenant_deny_add(struct tenant_conf *t, const char *pattern, struct err *e);
/* Empties the deny list. */
void tenant_deny_clear(struct tenant_conf *t);
/* Checks the cross-field rules (burst needs a rate). 0 or -EINVAL. */
int tenant_conf_check(const struct tenant_conf *t, struct err *e);

/* The bucket size the dispatcher uses: burst, or max(1, ceil(rate)). */
uint32_t tenant_burst(const struct tenant_conf *t);
/* True if the tenant may run jobs with network mode n. */
bool tenant_net_allowed(const struct tenant_conf *t, enum job_net n);
/*
 * The first deny pattern that matches text as a whole (fnmatch(3), no
 * flags: '*' also matches '/'), or -1. text is what docs/tenants.md calls
 * the command text: exec's argv joined by spaces, sh's script, python's code.
 */
int tenant_deny_match(const struct tenant_conf *t, const char *text);

/*** Stored forms ***/

/*
 * Writes every field of t (all of them, defaults included, plus "v") into
 * h, values owned by h. Feed it to HSET after a DEL, in one MULTI.
 */
void tenant_hash_encode(const struct tenant_conf *t, struct tenant_hash *h);
/* Frees h's values. */
void tenant_hash_free(struct tenant_hash *h);
/*
 * Decodes an HGETALL reply's pairs (n fields, lengths explicit) into t,
 * which tenant_conf_init(name) fills first: a missing field keeps its
 * default, an unknown field, a bad value or a "v" other than
 * TENANT_HASH_VERSION is refused. On failure t is freed and e->msg names
 * the field. 0 or -EINVAL.
 */
int tenant_hash_decode(struct tenant_conf *t, const char *name,
    const char *const *fields, const size_t *flens,
    const char *const *values, const size_t *vlens, size_t n, struct err *e);

/*
 * The JSON form: {"name", "weight", "max_running", "max_queued", "rate",
 * "burst", "ceiling": {wall_ms...}, "net": [..] or null (the host's),
 * "storage_quota_bytes", "deny": [..], "image_sources": [..] ([]: the
 * host's)}. Returns a new reference.
 */
json_t *tenant_json_encode(const struct tenant_conf *t);
/*
 * Strict inverse of tenant_json_encode(): every member optional except
 * name, unknown members refused. On failure t is freed. 0 or -EINVAL.
 */
int tenant_json_decode(struct tenant_conf *t, const json_t *o, struct err *e);

/*** Redis names ***/

/*
 * Key names, written into buf (KEY_MAX bytes) as in proto/keys.c: the
 * length, or -ENAMETOOLONG. tenant_key_conf also returns -EINVAL for a
 * name that is not a tenant name.
 */
int tenant_key_set(char *buf, const char *prefix);		/* PREFIX:tenants */
int tenant_key_gen(char *buf, const char *prefix);		/* PREFIX:tenants:gen */
int tenant_key_conf(char *buf, const char *prefix, const char *name);
/* The tenant's ACL user name "sandq-NAME" into buf (>= 71 bytes). */
int tenant_acl_user(char *buf, size_t len, const char *name);

/*
 * The rules of ACL SETUSER for name's user (docs/tenants.md "ACL rules"),
 * after the user name: argv[0..n) point into buf (size >= 4096), n is
 * returned, or -ENAMETOOLONG / -EINVAL (bad name). The rules replace the
 * user's commands, keys, channels and selectors; they touch its passwords
 * only when pass_sha256 is not NULL (64 hex digits: "resetpass #HEX"), and
 * reset every other property when reset is true (a new user). allow_select
 * adds SELECT, for a deployment on a database other than 0.
 */
int tenant_acl_rules(const char *prefix, const char *name,
    const char *pass_sha256, bool reset, bool allow_select,
    const char **argv, size_t max, char *buf, size_t buflen);

#endif
