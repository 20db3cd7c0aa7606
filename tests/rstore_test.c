/*
 * rstore_test.c - integration tests of the Redis snapshot store
 * (dispatcher/rstore/rstore.c) against a private redis-server.
 *
 * Each test starts its own redis-server in a mkdtemp folder
 * (harness_redis_start(), on a free loopback port and a unix socket) and
 * two local stores beside it: host A, which makes snapshots and pushes
 * them, and host B, an empty cache that pulls them. What is in Redis is
 * looked at through a plain hiredis connection of the test's own (SCAN,
 * HGET, PTTL), and damage is done through it too: the store has no back
 * door. Snapshots are real multi-chunk bytes (1 MB, 16 chunks of 64 KiB,
 * no two alike), changed a chunk at a time.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../dispatcher/rstore/rstore.h"
#include "../store/store.h"
#include "harness.h"

#define T "acme"			/* the tenant of most tests */
#define SNAP_BYTES (16 * STORE_CHUNK_BYTES)	/* 1 MiB: 16 chunks */

static struct harness h;
static char dir_a[] = "/tmp/rstore_test.a.XXXXXX";
static char dir_b[] = "/tmp/rstore_test.b.XXXXXX";
static struct store *a, *b;		/* host A's store, host B's cache */
static struct rstore *rs;		/* host A's (and B's) Redis store */
static redisContext *raw;		/* the test's own view of Redis */

static void
setup(void)
{
	struct err e = { 0 };

	harness_redis_start(&h);
	cr_assert_not_null(mkdtemp(dir_a));
	cr_assert_not_null(mkdtemp(dir_b));
	cr_assert_eq(store_open(dir_a, &a, &e), 0, "%s", e.msg);
	cr_assert_eq(store_open(dir_b, &b, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_open(h.url, NULL, &rs, &e), 0, "%s", e.msg);
	raw = redisConnect("127.0.0.1", h.port);
	cr_assert(raw != NULL && raw->err == 0);
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void
teardown(void)
{
	rstore_close(rs);
	store_close(a);
	store_close(b);
	if (raw != NULL)
		redisFree(raw);
	nftw(dir_a, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	nftw(dir_b, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	harness_stop(&h);
}

TestSuite(rstore, .init = setup, .fini = teardown, .timeout = 60);

/*** Helpers ***/

/* n bytes of a pattern unique to seed, so no two chunks are equal. */
static unsigned char *
pattern(size_t n, uint32_t seed)
{
	unsigned char *p = malloc(n > 0 ? n : 1);
	uint32_t x = seed * 2654435761u + 1;

	cr_assert_not_null(p);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)x;
	}
	return p;
}

/* Rewrites chunk i of snap with new bytes (seed), as a job would. */
static void
chunk_change(unsigned char *snap, size_t i, uint32_t seed)
{
	unsigned char *p = pattern(STORE_CHUNK_BYTES, seed);

	memcpy(snap + i * STORE_CHUNK_BYTES, p, STORE_CHUNK_BYTES);
	free(p);
}

/* One command on the test's connection; the reply is the caller's. */
static redisReply *
cmd(const char *fmt, ...)
{
	redisReply *r;
	va_list ap;

	va_start(ap, fmt);
	r = redisvCommand(raw, fmt, ap);
	va_end(ap);
	cr_assert_not_null(r, "redis: %s", raw->errstr);
	return r;
}

static long long
cmd_int(const char *fmt, const char *arg)
{
	redisReply *r = cmd(fmt, arg);
	long long v;

	cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: %s", fmt,
	    r->type == REDIS_REPLY_ERROR ? r->str : "not an integer");
	v = r->integer;
	freeReplyObject(r);
	return v;
}

/* How many keys match pattern (SCAN, as an operator would count). */
static long
keys_count(const char *pat)
{
	char cursor[32] = "0";
	long n = 0;

	do {
		redisReply *r = cmd("SCAN %s MATCH %s COUNT 1000", cursor, pat);

		cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		n += (long)r->element[1]->elements;
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	return n;
}

static long
chunk_keys(const char *tenant)
{
	char pat[128];

	snprintf(pat, sizeof(pat), "sandq:{%s}:chunk:*", tenant);
	return keys_count(pat);
}

static long
blob_keys(const char *tenant)
{
	char pat[128];

	snprintf(pat, sizeof(pat), "sandq:{%s}:blob:*", tenant);
	return keys_count(pat);
}

static int
reply_cmp(const void *x, const void *y)
{
	const redisReply *const *p = x, *const *q = y;

	return strcmp((*p)->str, (*q)->str);
}

/*
 * Every key of the database with its value (DUMP) and whether it expires,
 * in one buffer, for comparing the whole of Redis before and after.
 */
static char *
redis_dump(size_t *len)
{
	redisReply *keys = cmd("KEYS *");
	size_t cap = 1 << 16;
	char *out = malloc(cap);

	cr_assert_eq(keys->type, REDIS_REPLY_ARRAY);
	/* Sorted, so the dump does not depend on the keyspace's order. */
	qsort(keys->element, keys->elements, sizeof(*keys->element),
	    reply_cmp);
	*len = 0;
	for (size_t i = 0; i < keys->elements; i++) {
		const char *k = keys->element[i]->str;
		redisReply *d = cmd("DUMP %s", k);
		long long ttl = cmd_int("PTTL %s", k);

		cr_assert_eq(d->type, REDIS_REPLY_STRING);
		while (cap - *len < strlen(k) + d->len + 8) {
			cap *= 2;
			out = realloc(out, cap);
		}
		memcpy(out + *len, k, strlen(k) + 1);
		*len += strlen(k) + 1;
		memcpy(out + *len, d->str, d->len);
		*len += d->len;
		out[(*len)++] = ttl > 0 ? 'v' : 'p';
		freeReplyObject(d);
	}
	freeReplyObject(keys);
	return out;
}

/* The dump now is the dump before. */
static void
expect_unchanged(char *before, size_t blen)
{
	size_t alen;
	char *after = redis_dump(&alen);

	cr_expect(alen == blen && memcmp(after, before, blen) == 0,
	    "Redis changed");
	free(after);
	free(before);
}

/* Flips one byte of key's value at off (SETRANGE), whatever it was. */
static void
byte_flip(const char *key, long off)
{
	redisReply *r = cmd("GETRANGE %s %ld %ld", key, off, off);
	char c;

	cr_assert_eq(r->len, 1);
	c = (char)(r->str[0] ^ 0x5a);
	freeReplyObject(r);
	r = cmd("SETRANGE %s %ld %b", key, off, &c, (size_t)1);
	freeReplyObject(r);
}

/*
 * Host A makes tenant/id at version 1 from snap (a local create, a push
 * and a create in Redis), writing the head's key to sha.
 */
static void
a_create(const char *tenant, const char *id, const unsigned char *snap,
    const char *job, char sha[STORE_SHA_HEX + 1])
{
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_create_blob(a, tenant, id, snap, SNAP_BYTES,
	    NULL, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_push(rs, a, tenant, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_create(rs, tenant, id, sha, NULL, job, &e), 0,
	    "%s", e.msg);
}

/*
 * Host A commits next (made from prev, whose key is *sha) as version
 * from + 1: a local commit, a push and a commit in Redis keeping keep
 * versions. *sha becomes the new head's key. Returns rstore_commit()'s
 * answer.
 */
static int
a_commit(const char *id, uint64_t from, const unsigned char *prev,
    const unsigned char *next, char sha[STORE_SHA_HEX + 1],
    const char *job, unsigned keep, struct err *e)
{
	char nsha[STORE_SHA_HEX + 1];

	cr_assert_eq(store_sandbox_commit_blob(a, T, id, from, next,
	    SNAP_BYTES, sha, prev, SNAP_BYTES, nsha, e), 0, "%s", e->msg);
	cr_assert_eq(rstore_push(rs, a, T, nsha, e), 0, "%s", e->msg);
	memcpy(sha, nsha, sizeof(nsha));
	return rstore_commit(rs, T, id, from, nsha, job, keep, e);
}

/* The bytes of blob sha in store st equal want. */
static void
expect_blob(struct store *st, const char *sha, const unsigned char *want,
    size_t len)
{
	struct err e = { 0 };
	void *data = NULL;
	size_t n = 0;

	cr_assert_eq(store_blob_get(st, sha, &data, &n, &e), 0, "%s", e.msg);
	cr_expect_eq(n, len);
	cr_expect(n == len && memcmp(data, want, len) == 0,
	    "pulled bytes differ");
	free(data);
}

/*** Pull and push ***/

Test(rstore, pull_into_an_empty_store_gives_identical_bytes)
{
	unsigned char *snap = pattern(SNAP_BYTES, 1);
	struct store_sandbox rem, got, loc;
	char sha[STORE_SHA_HEX + 1];
	struct err e = { 0 };

	a_create(T, "box", snap, "job-1", sha);
	cr_expect_eq(rstore_debug_chunks_pushed(rs), 16);
	cr_assert_eq(rstore_head(rs, T, "box", &rem, &e), 0, "%s", e.msg);
	cr_expect_str_eq(rem.head, sha);
	cr_expect_eq(rem.version, 1);
	cr_expect_str_eq(rem.labels, "{}");

	cr_assert_eq(store_blob_count(b, &e), 0);
	cr_assert_eq(rstore_pull(rs, b, T, "box", &got, &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_debug_chunks_fetched(rs), 16);
	expect_blob(b, sha, snap, SNAP_BYTES);
	/* The local row is the remote head, field for field. */
	cr_assert_eq(store_sandbox_get(b, T, "box", &loc, &e), 0, "%s", e.msg);
	cr_expect_str_eq(loc.head, rem.head);
	cr_expect_eq(loc.version, rem.version);
	cr_expect_eq(loc.created_at, rem.created_at);
	cr_expect_eq(loc.updated_at, rem.updated_at);
	cr_expect_str_eq(loc.labels, rem.labels);
	cr_expect_str_eq(got.head, rem.head);
	cr_expect_eq(got.version, 1);
	free(snap);
}

/* Redis's count of commands it has run (INFO stats). */
static long long
commands_processed(void)
{
	redisReply *r = cmd("INFO stats");
	const char *p = strstr(r->str, "total_commands_processed:");
	long long n;

	cr_assert_not_null(p);
	n = atoll(p + strlen("total_commands_processed:"));
	freeReplyObject(r);
	return n;
}

Test(rstore, second_pull_is_one_round_trip_and_fetches_nothing)
{
	unsigned char *snap = pattern(SNAP_BYTES, 2);
	char sha[STORE_SHA_HEX + 1];
	struct store_sandbox got;
	struct err e = { 0 };
	long long before;

	a_create(T, "box", snap, NULL, sha);
	cr_assert_eq(rstore_pull(rs, b, T, "box", &got, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_debug_chunks_fetched(rs), 16);
	before = commands_processed();
	cr_assert_eq(rstore_pull(rs, b, T, "box", &got, &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_debug_chunks_fetched(rs), 16);
	/* Our INFO, one HGETALL between: nothing else reached Redis. */
	cr_expect_eq(commands_processed() - before, 2);
	/* Host A holds the blob already: its pull fetches nothing either. */
	cr_assert_eq(rstore_pull(rs, a, T, "box", &got, &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_debug_chunks_fetched(rs), 16);
	free(snap);
}

Test(rstore, commit_of_one_changed_chunk_moves_one_chunk_each_way)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 3), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], sha1[STORE_SHA_HEX + 1];
	struct store_sandbox got;
	struct err e = { 0 };
	long pushed, fetched;

	a_create(T, "box", v1, NULL, sha);
	memcpy(sha1, sha, sizeof(sha));
	cr_assert_eq(rstore_pull(rs, b, T, "box", &got, &e), 0, "%s", e.msg);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 7, 300);
	pushed = rstore_debug_chunks_pushed(rs);
	cr_assert_eq(a_commit("box", 1, v1, v2, sha, NULL, 16, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(rstore_debug_chunks_pushed(rs) - pushed, 1);
	cr_expect_eq(chunk_keys(T), 17);
	cr_expect_eq(blob_keys(T), 2);

	fetched = rstore_debug_chunks_fetched(rs);
	cr_assert_eq(rstore_pull(rs, b, T, "box", &got, &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_debug_chunks_fetched(rs) - fetched, 1);
	cr_expect_eq(got.version, 2);
	cr_expect_str_eq(got.head, sha);
	expect_blob(b, sha, v2, SNAP_BYTES);
	/* B's cache keeps both versions (its own retention, 16). */
	expect_blob(b, sha1, v1, SNAP_BYTES);
	free(v1);
	free(v2);
}

Test(rstore, uploads_expire_until_a_commit_names_them)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 4), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], nsha[STORE_SHA_HEX + 1];
	char key[256], ckey[256], hex[STORE_SHA_HEX + 1];
	struct store_manifest m;
	struct err e = { 0 };
	void *mb = NULL;
	size_t ml;

	a_create(T, "box", v1, NULL, sha);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 0, 400);
	cr_assert_eq(store_sandbox_commit_blob(a, T, "box", 1, v2, SNAP_BYTES,
	    sha, v1, SNAP_BYTES, nsha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_push(rs, a, T, nsha, &e), 0, "%s", e.msg);
	cr_assert_eq(store_blob_manifest(a, nsha, &mb, &ml, &e), 0);
	cr_assert_eq(store_manifest_parse(mb, ml, nsha, &m, &e), 0);
	store_manifest_chunk_hex(&m, 0, hex);
	snprintf(key, sizeof(key), "sandq:{%s}:blob:%s", T, nsha);
	snprintf(ckey, sizeof(ckey), "sandq:{%s}:chunk:%s", T, hex);
	cr_expect_gt(cmd_int("PTTL %s", key), 0);
	cr_expect_gt(cmd_int("PTTL %s", ckey), 0);
	cr_assert_eq(rstore_commit(rs, T, "box", 1, nsha, NULL, 16, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(cmd_int("PTTL %s", key), -1);
	cr_expect_eq(cmd_int("PTTL %s", ckey), -1);
	/* A chunk already named was never given an expiry. */
	store_manifest_chunk_hex(&m, 1, hex);
	snprintf(ckey, sizeof(ckey), "sandq:{%s}:chunk:%s", T, hex);
	cr_expect_eq(cmd_int("PTTL %s", ckey), -1);
	free(mb);
	free(v1);
	free(v2);
}

Test(rstore, pull_of_a_large_snapshot_measured)
{
	const size_t n = 160 * STORE_CHUNK_BYTES;	/* 10 MiB */
	unsigned char *v1 = pattern(n, 5), *v2 = malloc(n);
	char sha[STORE_SHA_HEX + 1], nsha[STORE_SHA_HEX + 1];
	struct store_sandbox got;
	struct timespec t0, t1, t2, t3;
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_create_blob(a, T, "big", v1, n, NULL, sha,
	    &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_push(rs, a, T, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_create(rs, T, "big", sha, NULL, NULL, &e), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(rstore_pull(rs, b, T, "big", &got, &e), 0, "%s", e.msg);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	expect_blob(b, sha, v1, n);
	cr_expect_eq(rstore_debug_chunks_fetched(rs), 160);

	memcpy(v2, v1, n);
	chunk_change(v2, 80, 500);
	cr_assert_eq(store_sandbox_commit_blob(a, T, "big", 1, v2, n, sha, v1,
	    n, nsha, &e), 0, "%s", e.msg);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	cr_assert_eq(rstore_push(rs, a, T, nsha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_commit(rs, T, "big", 1, nsha, NULL, 16, &e), 0,
	    "%s", e.msg);
	clock_gettime(CLOCK_MONOTONIC, &t3);
	cr_log_info("10 MiB pull into an empty cache: %.1f ms; push + commit "
	    "of 1 changed chunk of 160: %.2f ms",
	    (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
	    (double)(t3.tv_sec - t2.tv_sec) * 1e3 +
	    (double)(t3.tv_nsec - t2.tv_nsec) / 1e6);
	free(v1);
	free(v2);
}

/*** Heads ***/

Test(rstore, stale_commit_changes_nothing)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 6), *v2 = malloc(SNAP_BYTES);
	unsigned char *v3 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], sha2[STORE_SHA_HEX + 1];
	char nsha[STORE_SHA_HEX + 1], *before;
	struct store_sandbox rem;
	struct err e = { 0 };
	size_t blen;

	a_create(T, "box", v1, NULL, sha);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 2, 600);
	cr_assert_eq(a_commit("box", 1, v1, v2, sha, NULL, 16, &e), 0, "%s",
	    e.msg);
	memcpy(sha2, sha, sizeof(sha));
	/* Another host, which loaded version 1, commits its own version 2. */
	memcpy(v3, v1, SNAP_BYTES);
	chunk_change(v3, 3, 601);
	cr_assert_eq(store_blob_put(a, v3, SNAP_BYTES, nsha, &e), 0);
	cr_assert_eq(rstore_push(rs, a, T, nsha, &e), 0, "%s", e.msg);
	before = redis_dump(&blen);
	cr_expect_eq(rstore_commit(rs, T, "box", 1, nsha, "late", 16, &e),
	    -ESTALE);
	cr_expect_str_eq(e.msg, "rstore: sandbox acme/box: at version 2, not "
	    "1");
	expect_unchanged(before, blen);
	cr_assert_eq(rstore_head(rs, T, "box", &rem, &e), 0);
	cr_expect_str_eq(rem.head, sha2);
	cr_expect_eq(rstore_job_version(rs, T, "box", "late", &e), 0);
	free(v1);
	free(v2);
	free(v3);
}

Test(rstore, create_twice_is_eexist)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 7);
	char sha[STORE_SHA_HEX + 1];
	struct err e = { 0 };

	a_create(T, "box", v1, NULL, sha);
	cr_expect_eq(rstore_create(rs, T, "box", sha, NULL, NULL, &e),
	    -EEXIST);
	cr_expect_str_eq(e.msg, "rstore: sandbox acme/box: exists (at version "
	    "1)");
	cr_expect_eq(rstore_commit(rs, T, "box", 0, sha, NULL, 16, &e),
	    -EEXIST);
	cr_expect_eq(cmd_int("HLEN %s", "sandq:{acme}:sbx:box"), 5);
	cr_expect_eq(cmd_int("LLEN %s", "sandq:{acme}:sbxv:box"), 1);
	free(v1);
}

Test(rstore, commit_needs_the_pushed_blob_and_every_chunk)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 8), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], nsha[STORE_SHA_HEX + 1];
	char hex[STORE_SHA_HEX + 1], want[200], *before;
	struct store_manifest m;
	struct err e = { 0 };
	redisReply *r;
	void *mb = NULL;
	size_t ml, blen;

	a_create(T, "box", v1, NULL, sha);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 5, 800);
	cr_assert_eq(store_blob_put(a, v2, SNAP_BYTES, nsha, &e), 0);
	/* Not pushed at all. */
	cr_expect_eq(rstore_commit(rs, T, "box", 1, nsha, NULL, 16, &e),
	    -ENOENT);
	snprintf(want, sizeof(want), "rstore: acme/box: blob %s: not in Redis",
	    nsha);
	cr_expect_str_eq(e.msg, want);
	/* Pushed, then its new chunk lost. */
	cr_assert_eq(rstore_push(rs, a, T, nsha, &e), 0, "%s", e.msg);
	cr_assert_eq(store_blob_manifest(a, nsha, &mb, &ml, &e), 0);
	cr_assert_eq(store_manifest_parse(mb, ml, nsha, &m, &e), 0);
	store_manifest_chunk_hex(&m, 5, hex);
	r = cmd("DEL sandq:{acme}:chunk:%s", hex);
	freeReplyObject(r);
	before = redis_dump(&blen);
	cr_expect_eq(rstore_commit(rs, T, "box", 1, nsha, NULL, 16, &e),
	    -ENOENT);
	snprintf(want, sizeof(want), "rstore: acme/box: chunk %s: not in Redis",
	    hex);
	cr_expect_str_eq(e.msg, want);
	expect_unchanged(before, blen);
	/* Pushing again puts it back, and the commit goes through. */
	cr_assert_eq(rstore_push(rs, a, T, nsha, &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_commit(rs, T, "box", 1, nsha, NULL, 16, &e), 0,
	    "%s", e.msg);
	free(mb);
	free(v1);
	free(v2);
}

/* Adds each chunk key of blob sha (as host A holds it) to the set seen. */
static void
chunks_of(const char *sha, char (*seen)[STORE_SHA_HEX + 1], size_t *n)
{
	struct store_manifest m;
	struct err e = { 0 };
	void *mb = NULL;
	size_t ml;

	cr_assert_eq(store_blob_manifest(a, sha, &mb, &ml, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(store_manifest_parse(mb, ml, sha, &m, &e), 0);
	for (size_t i = 0; i < m.n; i++) {
		char hex[STORE_SHA_HEX + 1];
		bool have = false;

		store_manifest_chunk_hex(&m, i, hex);
		for (size_t k = 0; k < *n; k++)
			have |= strcmp(seen[k], hex) == 0;
		if (!have)
			memcpy(seen[(*n)++], hex, sizeof(hex));
	}
	free(mb);
}

Test(rstore, retention_keeps_only_the_chunks_of_the_last_versions)
{
	unsigned char *cur = pattern(SNAP_BYTES, 9), *next = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], prev[STORE_SHA_HEX + 1];
	char seen[64][STORE_SHA_HEX + 1];
	struct err e = { 0 };
	size_t nseen = 0;
	redisReply *r;

	a_create(T, "box", cur, NULL, sha);
	for (uint64_t v = 1; v <= 5; v++) {
		char job[16];

		memcpy(prev, sha, sizeof(sha));
		memcpy(next, cur, SNAP_BYTES);
		chunk_change(next, v, 900 + (uint32_t)v);
		snprintf(job, sizeof(job), "job-%u", (unsigned)v);
		cr_assert_eq(a_commit("box", v, cur, next, sha, job, 2, &e), 0,
		    "%s", e.msg);
		memcpy(cur, next, SNAP_BYTES);
	}
	/* Versions 5 and 6 remain: their chunks, nothing else. */
	chunks_of(prev, seen, &nseen);
	chunks_of(sha, seen, &nseen);
	cr_expect_eq(nseen, 17);
	cr_expect_eq(chunk_keys(T), 17);
	cr_expect_eq(blob_keys(T), 2);
	for (size_t i = 0; i < nseen; i++) {
		char key[128];

		snprintf(key, sizeof(key), "sandq:{acme}:chunk:%.64s", seen[i]);
		cr_expect_eq(cmd_int("PTTL %s", key), -1, "chunk %s", seen[i]);
	}
	cr_expect_eq(cmd_int("LLEN %s", "sandq:{acme}:sbxv:box"), 2);
	cr_expect_eq(cmd_int("HLEN %s", "sandq:{acme}:refs"), 2);
	cr_expect_eq(cmd_int("HLEN %s", "sandq:{acme}:crefs"), 17);
	/* Each count is what the two manifests say. */
	r = cmd("HGET sandq:{acme}:crefs %s", seen[0]);
	cr_expect_str_eq(r->str, "2");
	freeReplyObject(r);
	/* The job records went with their rows. */
	cr_expect_eq(cmd_int("HLEN %s", "sandq:{acme}:sbxj:box"), 2);
	cr_expect_eq(rstore_job_version(rs, T, "box", "job-5", &e), 6);
	cr_expect_eq(rstore_job_version(rs, T, "box", "job-4", &e), 5);
	cr_expect_eq(rstore_job_version(rs, T, "box", "job-3", &e), 0);
	free(cur);
	free(next);
}

Test(rstore, fork_shares_blobs_and_delete_collects_what_only_it_named)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 10), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], head[STORE_SHA_HEX + 1];
	struct store_sandbox sb;
	struct err e = { 0 };
	redisReply *r;

	a_create(T, "src", v1, NULL, sha);
	memcpy(head, sha, sizeof(sha));
	cr_assert_eq(rstore_fork(rs, T, "src", "dst", &e), 0, "%s", e.msg);
	cr_expect_eq(chunk_keys(T), 16);
	cr_expect_eq(blob_keys(T), 1);
	r = cmd("HGET sandq:{acme}:refs %s", head);
	cr_expect_str_eq(r->str, "2");
	freeReplyObject(r);
	cr_assert_eq(rstore_head(rs, T, "dst", &sb, &e), 0);
	cr_expect_str_eq(sb.head, head);
	cr_expect_eq(sb.version, 1);
	cr_expect_eq(rstore_fork(rs, T, "src", "dst", &e), -EEXIST);
	cr_expect_eq(rstore_fork(rs, T, "nope", "dst2", &e), -ENOENT);

	/* The source moves on alone, then goes: the fork keeps the blob. */
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 9, 1000);
	cr_assert_eq(a_commit("src", 1, v1, v2, sha, NULL, 16, &e), 0, "%s",
	    e.msg);
	cr_expect_eq(chunk_keys(T), 17);
	cr_assert_eq(rstore_delete(rs, T, "src", &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_delete(rs, T, "src", &e), -ENOENT);
	cr_expect_eq(chunk_keys(T), 16);
	cr_expect_eq(blob_keys(T), 1);
	cr_assert_eq(rstore_pull(rs, b, T, "dst", &sb, &e), 0, "%s", e.msg);
	expect_blob(b, head, v1, SNAP_BYTES);

	cr_assert_eq(rstore_delete(rs, T, "dst", &e), 0, "%s", e.msg);
	cr_expect_eq(chunk_keys(T), 0);
	cr_expect_eq(blob_keys(T), 0);
	cr_expect_eq(keys_count("sandq:{acme}:*"), 0);
	free(v1);
	free(v2);
}

Test(rstore, corrupted_chunk_fails_the_pull_and_leaves_the_cache_alone)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 11);
	char sha[STORE_SHA_HEX + 1], hex[STORE_SHA_HEX + 1], want[256];
	char key[256];
	struct store_manifest m;
	struct store_sandbox sb;
	struct err e = { 0 };
	redisReply *r;
	void *mb = NULL;
	size_t ml;

	a_create(T, "box", v1, NULL, sha);
	cr_assert_eq(store_blob_manifest(a, sha, &mb, &ml, &e), 0);
	cr_assert_eq(store_manifest_parse(mb, ml, sha, &m, &e), 0);
	store_manifest_chunk_hex(&m, 4, hex);
	/* One byte flipped, the length kept. */
	snprintf(key, sizeof(key), "sandq:{acme}:chunk:%s", hex);
	byte_flip(key, 1000);
	cr_expect_eq(rstore_pull(rs, b, T, "box", &sb, &e), -EBADMSG);
	snprintf(want, sizeof(want), "rstore: acme/box: Redis copy: store: "
	    "blob %s: chunk 4 (%s) does not match its SHA-256", sha, hex);
	cr_expect_str_eq(e.msg, want);
	cr_expect_eq(store_blob_count(b, &e), 0);
	cr_expect_eq(store_chunk_count(b, &e), 0);
	cr_expect_eq(store_sandbox_get(b, T, "box", &sb, &e), -ENOENT);

	/* Longer than a chunk may be: refused by its length, not read whole. */
	r = cmd("APPEND sandq:{acme}:chunk:%s tail", hex);
	freeReplyObject(r);
	cr_expect_eq(rstore_pull(rs, b, T, "box", &sb, &e), -EBADMSG);
	snprintf(want, sizeof(want), "rstore: acme/box: Redis copy: chunk 4 "
	    "(%s): over 65536 bytes, not 65536", hex);
	cr_expect_str_eq(e.msg, want);

	/* Gone while the head still names it: lost, not moved. */
	r = cmd("DEL sandq:{acme}:chunk:%s", hex);
	freeReplyObject(r);
	cr_expect_eq(rstore_pull(rs, b, T, "box", &sb, &e), -EBADMSG);
	snprintf(want, sizeof(want), "rstore: acme/box: chunk 4 (%s) of the "
	    "head (version 1) is missing from Redis", hex);
	cr_expect_str_eq(e.msg, want);
	cr_expect_eq(store_blob_count(b, &e), 0);
	cr_expect_eq(store_chunk_count(b, &e), 0);

	/* A damaged manifest. */
	snprintf(key, sizeof(key), "sandq:{acme}:blob:%s", sha);
	byte_flip(key, 40);
	cr_expect_eq(rstore_pull(rs, b, T, "box", &sb, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "manifest does not match its key") != NULL,
	    "%s", e.msg);
	cr_expect_eq(store_sandbox_get(b, T, "box", &sb, &e), -ENOENT);
	free(mb);
	free(v1);
}

Test(rstore, job_version_finds_the_version_a_job_made)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 12), *v2 = malloc(SNAP_BYTES);
	unsigned char *v3 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], sha2[STORE_SHA_HEX + 1];
	struct err e = { 0 };

	a_create(T, "box", v1, "make-box", sha);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 1, 1200);
	cr_assert_eq(a_commit("box", 1, v1, v2, sha, "job-42", 16, &e), 0,
	    "%s", e.msg);
	memcpy(sha2, sha, sizeof(sha));
	cr_expect_eq(rstore_job_version(rs, T, "box", "make-box", &e), 1);
	cr_expect_eq(rstore_job_version(rs, T, "box", "job-42", &e), 2);
	cr_expect_eq(rstore_job_version(rs, T, "box", "job-43", &e), 0);
	cr_expect_eq(rstore_job_version(rs, T, "other", "job-42", &e), 0);
	/* The same job, run again after a host failure, cannot commit twice. */
	memcpy(v3, v2, SNAP_BYTES);
	chunk_change(v3, 1, 1201);
	cr_expect_eq(a_commit("box", 2, v2, v3, sha, "job-42", 16, &e),
	    -EALREADY);
	cr_expect_str_eq(e.msg, "rstore: sandbox acme/box: job job-42 already "
	    "made version 2");
	free(v1);
	free(v2);
	free(v3);
}

struct rows {
	int n;
	uint64_t version[8];
	char job[8][RSTORE_JOB_ID_MAX + 1];
	char ids[8][STORE_ID_MAX + 1];
};

static int
row_cb(const struct store_version *v, const char *job, void *arg)
{
	struct rows *r = arg;

	if (r->n < 8) {
		r->version[r->n] = v->version;
		snprintf(r->job[r->n], sizeof(r->job[0]), "%s", job);
	}
	r->n++;
	return 0;
}

static int
local_row_cb(const struct store_version *v, void *arg)
{
	return row_cb(v, "", arg);
}

static int
list_cb(const struct store_sandbox *sb, void *arg)
{
	struct rows *r = arg;

	if (r->n < 8) {
		r->version[r->n] = sb->version;
		snprintf(r->ids[r->n], sizeof(r->ids[0]), "%s", sb->id);
	}
	r->n++;
	return 0;
}

Test(rstore, history_is_newest_first_and_list_in_id_order)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 13), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], sha1[STORE_SHA_HEX + 1];
	struct rows rows = { 0 }, list = { 0 };
	struct err e = { 0 };

	a_create(T, "zed", v1, "j1", sha);
	memcpy(sha1, sha, sizeof(sha));
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 0, 1300);
	cr_assert_eq(a_commit("zed", 1, v1, v2, sha, NULL, 16, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(rstore_fork(rs, T, "zed", "alpha", &e), 0);
	cr_assert_eq(rstore_fork(rs, T, "zed", "mid", &e), 0);
	cr_assert_eq(rstore_history(rs, T, "zed", row_cb, &rows, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(rows.n, 2);
	cr_expect_eq(rows.version[0], 2);
	cr_expect_str_eq(rows.job[0], "");
	cr_expect_eq(rows.version[1], 1);
	cr_expect_str_eq(rows.job[1], "j1");
	cr_expect_eq(rstore_history(rs, T, "nope", row_cb, &rows, &e),
	    -ENOENT);
	cr_assert_eq(rstore_list(rs, T, list_cb, &list, &e), 0, "%s", e.msg);
	cr_expect_eq(list.n, 3);
	cr_expect_str_eq(list.ids[0], "alpha");
	cr_expect_str_eq(list.ids[1], "mid");
	cr_expect_str_eq(list.ids[2], "zed");
	cr_expect_eq(list.version[2], 2);
	free(v1);
	free(v2);
}

Test(rstore, tenants_are_isolated)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 14);
	char sha[STORE_SHA_HEX + 1];
	struct rows list = { 0 };
	struct store_sandbox sb;
	struct err e = { 0 };

	a_create(T, "box", v1, NULL, sha);
	cr_expect_eq(rstore_head(rs, "other", "box", &sb, &e), -ENOENT);
	cr_expect_eq(rstore_pull(rs, b, "other", "box", &sb, &e), -ENOENT);
	cr_expect_eq(rstore_commit(rs, "other", "box", 1, sha, NULL, 16, &e),
	    -ENOENT);
	cr_expect_eq(rstore_fork(rs, "other", "box", "mine", &e), -ENOENT);
	cr_expect_eq(rstore_delete(rs, "other", "box", &e), -ENOENT);
	/* A's blob is not B's: naming it by its key finds nothing. */
	cr_expect_eq(rstore_create(rs, "other", "mine", sha, NULL, NULL, &e),
	    -ENOENT);
	cr_assert_eq(rstore_list(rs, "other", list_cb, &list, &e), 0);
	cr_expect_eq(list.n, 0);
	/* Every key written carries the owner's hash tag. */
	cr_expect_eq(keys_count("*"), keys_count("sandq:{acme}:*"));
	cr_expect_eq(store_blob_count(b, &e), 0);
	free(v1);
}

Test(rstore, hostile_names_are_refused_before_redis_is_asked)
{
	static const char *const ids[] = { "", ".", "..", "../x", "a b",
	    "x{y}", "a*", "a\nb", "sbx:1 2", NULL };
	static const char *const tenants[] = { "", "a:b", "{x}", "a}b", "a b",
	    "a*", NULL };
	char sha[STORE_SHA_HEX + 1], longid[STORE_ID_MAX + 2];
	struct store_sandbox sb;
	struct rstore *bad = NULL;
	struct err e = { 0 };
	struct rows rows = { 0 };

	memset(sha, 'a', STORE_SHA_HEX);
	sha[STORE_SHA_HEX] = '\0';
	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	for (size_t i = 0; ids[i] != NULL; i++) {
		const char *id = ids[i];

		cr_expect_eq(rstore_head(rs, T, id, &sb, &e), -EINVAL, "%s",
		    id);
		cr_expect_eq(rstore_pull(rs, b, T, id, &sb, &e), -EINVAL);
		cr_expect_eq(rstore_create(rs, T, id, sha, NULL, NULL, &e),
		    -EINVAL);
		cr_expect_eq(rstore_commit(rs, T, id, 1, sha, NULL, 0, &e),
		    -EINVAL);
		cr_expect_eq(rstore_fork(rs, T, "box", id, &e), -EINVAL);
		cr_expect_eq(rstore_fork(rs, T, id, "box", &e), -EINVAL);
		cr_expect_eq(rstore_delete(rs, T, id, &e), -EINVAL);
		cr_expect_eq(rstore_history(rs, T, id, row_cb, &rows, &e),
		    -EINVAL);
		cr_expect_eq(rstore_job_version(rs, T, "box", id, &e), -EINVAL);
		cr_expect_eq(rstore_commit(rs, T, "box", 1, sha, id[0] ? id :
		    "a b", 0, &e), -EINVAL);
	}
	cr_expect_eq(rstore_head(rs, T, longid, &sb, &e), -EINVAL);
	for (size_t i = 0; tenants[i] != NULL; i++) {
		cr_expect_eq(rstore_head(rs, tenants[i], "box", &sb, &e),
		    -EINVAL, "%s", tenants[i]);
		cr_expect_eq(rstore_push(rs, a, tenants[i], sha, &e), -EINVAL);
		cr_expect_eq(rstore_list(rs, tenants[i], list_cb, &rows, &e),
		    -EINVAL);
	}
	cr_expect_str_eq(e.msg, "store: tenant: must be 1 to 64 characters of "
	    "A-Z a-z 0-9 _ -");
	cr_expect_eq(rstore_commit(rs, T, "box", 1, "ABC", NULL, 0, &e),
	    -EINVAL);
	cr_expect_eq(rstore_create(rs, T, "box", sha, "[1]", NULL, &e),
	    -EINVAL);
	cr_expect_eq(rstore_open(h.url, "a{b}", &bad, &e), -EINVAL);
	cr_expect_eq(rstore_open("http://x", NULL, &bad, &e), -EINVAL);
	cr_expect_null(bad);
	cr_expect_eq(keys_count("*"), 0);
	cr_expect_eq(rows.n, 0);
}

/*** Connections and the script elsewhere ***/

Test(rstore, connects_over_a_unix_socket_with_another_prefix)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 15);
	char url[400], sha[STORE_SHA_HEX + 1];
	struct rstore *u = NULL;
	struct store_sandbox sb;
	struct err e = { 0 };

	snprintf(url, sizeof(url), "unix://%s", h.sock);
	cr_assert_eq(rstore_open(url, "other-prefix", &u, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_create_blob(a, T, "box", v1, SNAP_BYTES,
	    "{\"b\":1,\"a\":2}", sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_push(u, a, T, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_create(u, T, "box", sha, "{\"b\":1,\"a\":2}", NULL,
	    &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_pull(u, b, T, "box", &sb, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sb.labels, "{\"a\":2,\"b\":1}");
	cr_expect_eq(keys_count("other-prefix:{acme}:*"), keys_count("*"));
	cr_expect_eq(rstore_head(rs, T, "box", &sb, &e), -ENOENT);
	rstore_close(u);
	free(v1);
}

Test(rstore, a_handle_outlives_a_dropped_connection_and_a_script_flush)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 16), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1];
	struct store_sandbox sb;
	struct err e = { 0 };
	redisReply *r;
	int rc;

	a_create(T, "box", v1, NULL, sha);
	r = cmd("SCRIPT FLUSH");
	freeReplyObject(r);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 0, 1600);
	cr_assert_eq(a_commit("box", 1, v1, v2, sha, NULL, 16, &e), 0, "%s",
	    e.msg);
	/* Every connection but the test's own is closed by Redis. */
	r = cmd("CLIENT KILL TYPE normal SKIPME yes");
	freeReplyObject(r);
	rc = rstore_head(rs, T, "box", &sb, &e);
	cr_expect(rc == 0 || rc == -EIO, "%d %s", rc, e.msg);
	cr_assert_eq(rstore_head(rs, T, "box", &sb, &e), 0, "%s", e.msg);
	cr_expect_eq(sb.version, 2);
	free(v1);
	free(v2);
}

Test(rstore, commit_script_runs_on_another_connection_inside_multi)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 17), *v2 = malloc(SNAP_BYTES);
	char sha[STORE_SHA_HEX + 1], nsha[STORE_SHA_HEX + 1];
	struct rstore_call *c = malloc(sizeof(*c));
	struct store_sandbox sb;
	struct err e = { 0 };
	uint64_t version = 0;
	redisReply *r;

	a_create(T, "box", v1, NULL, sha);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 3, 1700);
	cr_assert_eq(store_blob_put(a, v2, SNAP_BYTES, nsha, &e), 0);
	cr_assert_eq(rstore_push(rs, a, T, nsha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_commit_call("sandq", T, "box", 1, nsha, "job-9", 4,
	    NULL, NULL, NULL, c, &e), 0, "%s", e.msg);
	/* As the dispatcher will: the script within its result's MULTI. */
	freeReplyObject(cmd("MULTI"));
	freeReplyObject(cmd("SET sandq:{acme}:res:job-9 done"));
	r = redisCommandArgv(raw, RSTORE_COMMIT_ARGC, c->argv, c->len);
	cr_assert_str_eq(r->str, "QUEUED");
	freeReplyObject(r);
	r = cmd("EXEC");
	cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
	cr_assert_eq(r->elements, 2);
	cr_expect_eq(rstore_commit_result(r->element[1], T, "box", 1, &version,
	    &e), 0, "%s", e.msg);
	cr_expect_eq(version, 2);
	freeReplyObject(r);
	cr_assert_eq(rstore_head(rs, T, "box", &sb, &e), 0);
	cr_expect_str_eq(sb.head, nsha);
	cr_expect_eq(rstore_job_version(rs, T, "box", "job-9", &e), 2);
	/* The same call again: the job made a version already. */
	r = redisCommandArgv(raw, RSTORE_COMMIT_ARGC, c->argv, c->len);
	cr_expect_eq(rstore_commit_result(r, T, "box", 1, &version, &e),
	    -EALREADY);
	freeReplyObject(r);
	/* KEYS that were not built from ARGV are refused. */
	snprintf(c->keys[3], sizeof(c->keys[3]), "sandq:{other}:refs");
	c->len[6] = strlen(c->keys[3]);
	r = redisCommandArgv(raw, RSTORE_COMMIT_ARGC, c->argv, c->len);
	cr_expect_eq(rstore_commit_result(r, T, "box", 2, &version, &e),
	    -EINVAL);
	freeReplyObject(r);
	free(c);
	free(v1);
	free(v2);
}

/*** The local cache ***/

Test(rstore, pull_after_a_recreate_replaces_the_cached_history)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 18), *v2 = malloc(SNAP_BYTES);
	unsigned char *w1 = pattern(SNAP_BYTES, 19);
	char sha[STORE_SHA_HEX + 1], wsha[STORE_SHA_HEX + 1];
	struct rows rows = { 0 };
	struct store_sandbox sb;
	struct err e = { 0 };

	a_create(T, "box", v1, NULL, sha);
	memcpy(v2, v1, SNAP_BYTES);
	chunk_change(v2, 0, 1800);
	cr_assert_eq(a_commit("box", 1, v1, v2, sha, NULL, 16, &e), 0, "%s",
	    e.msg);
	cr_assert_eq(rstore_pull(rs, b, T, "box", &sb, &e), 0, "%s", e.msg);
	cr_expect_eq(store_blob_count(b, &e), 1);
	/* Deleted and made again elsewhere: version 1 of another sandbox. */
	cr_assert_eq(rstore_delete(rs, T, "box", &e), 0);
	cr_assert_eq(store_sandbox_delete(a, T, "box", &e), 0);
	a_create(T, "box", w1, NULL, wsha);
	cr_assert_eq(rstore_pull(rs, b, T, "box", &sb, &e), 0, "%s", e.msg);
	cr_expect_eq(sb.version, 1);
	cr_expect_str_eq(sb.head, wsha);
	cr_assert_eq(store_sandbox_history(b, T, "box", local_row_cb, &rows,
	    &e), 0);
	cr_expect_eq(rows.n, 1);
	/* The old lineage's blob went from the cache with its rows. */
	cr_expect_eq(store_blob_count(b, &e), 1);
	cr_expect_eq(store_chunk_count(b, &e), 16);
	expect_blob(b, wsha, w1, SNAP_BYTES);
	free(v1);
	free(v2);
	free(w1);
}

/*** What a sandbox runs on (docs/images.md "Sandboxes on images") ***/

#define IMG "docker://127.0.0.1:5000/t/testbed:1"

/*
 * A create records the image and workdir in the hash; a pull makes the
 * other host's row say the same (and a second pull is still one round
 * trip); a fork copies them; a sandbox without them has neither field.
 */
Test(rstore, image_and_workdir_travel_with_create_pull_and_fork)
{
	unsigned char *v1 = pattern(SNAP_BYTES, 31);
	char sha[STORE_SHA_HEX + 1];
	struct store_sandbox sb, loc;
	struct err e = { 0 };

	cr_assert_eq(store_sandbox_create_image(a, T, "img", v1, SNAP_BYTES, NULL,
	    IMG, "/testbed", sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_push(rs, a, T, sha, &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_create_image(rs, T, "img", sha, NULL, IMG, "/testbed",
	    "job-1", &e), 0, "%s", e.msg);
	cr_expect_eq(cmd_int("HEXISTS sandq:{%s}:sbx:img image", T), 1);
	cr_assert_eq(rstore_head(rs, T, "img", &sb, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sb.image, IMG);
	cr_expect_str_eq(sb.workdir, "/testbed");
	/* Host B learns both with the head. */
	cr_assert_eq(rstore_pull(rs, b, T, "img", &sb, &e), 0, "%s", e.msg);
	cr_assert_eq(store_sandbox_get(b, T, "img", &loc, &e), 0);
	cr_expect_str_eq(loc.image, IMG);
	cr_expect_str_eq(loc.workdir, "/testbed");
	cr_assert_eq(rstore_pull(rs, b, T, "img", &sb, &e), 0, "%s", e.msg);
	cr_expect_eq(rstore_debug_chunks_fetched(rs), 16, "the second pull "
	    "fetched nothing");
	/* A fork runs on the same image, with its files at the same place. */
	cr_assert_eq(rstore_fork(rs, T, "img", "img2", &e), 0, "%s", e.msg);
	cr_assert_eq(rstore_pull(rs, b, T, "img2", &sb, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sb.image, IMG);
	cr_expect_str_eq(sb.workdir, "/testbed");
	/* A plain sandbox, and its fork: neither field. */
	a_create(T, "plain", v1, NULL, sha);
	cr_assert_eq(rstore_fork(rs, T, "plain", "plain2", &e), 0, "%s", e.msg);
	cr_expect_eq(cmd_int("HEXISTS sandq:{%s}:sbx:plain2 image", T), 0);
	cr_expect_eq(cmd_int("HEXISTS sandq:{%s}:sbx:plain2 workdir", T), 0);
	cr_assert_eq(rstore_pull(rs, b, T, "plain2", &sb, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sb.image, "");
	cr_expect_str_eq(sb.workdir, "");
	/* A damaged field is refused by the pull, naming it. */
	freeReplyObject(cmd("HSET sandq:{%s}:sbx:img workdir relative", T));
	cr_expect_eq(rstore_pull(rs, b, T, "img", &sb, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "field workdir: damaged") != NULL, "%s", e.msg);
	/* And a create refuses what a column may not hold. */
	cr_expect_eq(rstore_create_image(rs, T, "bad", sha, NULL, "a b", NULL, NULL,
	    &e), -EINVAL);
	free(v1);
}
