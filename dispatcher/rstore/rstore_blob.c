/*
 * rstore_blob.c - moving blobs between Redis and a local store: push sends
 * the pieces of a local blob that Redis lacks; pull brings a sandbox's
 * head into the local store, fetching only the chunks it lacks.
 *
 * DESIGN
 * Both directions move chunks, never whole snapshots: a version that
 * changed 2 chunks of 160 costs 2 chunks each way. Existence is asked
 * with pipelined EXISTS (push) and the local store's index (pull); the
 * chunks themselves go in pipelines of RSTORE_PIPELINE commands, which
 * bounds what is in flight (4 MiB) without a round trip per chunk. A push
 * holds one pipeline of chunks at a time; a pull holds every chunk it
 * fetched until the one transaction that stores them all (at most the
 * snapshot's size, which a worker holds anyway when it loads it).
 *
 * Values are read with GETRANGE key 0 MAX, never GET: a value longer
 * than it may be is seen as MAX + 1 bytes, not read whole, so no damaged
 * or hostile value can make this process allocate more than a chunk or a
 * manifest. GETRANGE answers "" for a missing key; no chunk or manifest
 * is empty, so "" means missing.
 *
 * A pull reads the head, then the pieces, with no lock: a commit on
 * another host can move the head and collect the old one's pieces in
 * between. A piece found missing is therefore checked against the head:
 * if the head moved, the pull starts again (RSTORE_PULL_TRIES times);
 * if not, Redis lost a piece of a named blob, which is -EBADMSG.
 * The fetched chunks are hashed once, by store_blob_import(), and stored
 * with the manifest in one local transaction, then the head's row is
 * adopted: a failure leaves the local store as it was (but for a blob
 * imported and not yet named, which store_prune() collects). A chunk
 * the local store had when asked may be collected (another sandbox's
 * retention) before that transaction; the import says so (-ENOENT) and
 * the fetch asks again, once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/xmalloc.h"
#include "../../proto/keys.h"
#include "rstore.h"
#include "rstore_int.h"

#define PROBE_BATCH 1024	/* EXISTS in one pipeline: small replies */

/* Rewrites e's message as "rstore: tenant/id: what: <the message>". */
static int
err_wrap(struct err *e, int rc, const char *tenant, const char *id,
    const char *what)
{
	char msg[sizeof(e->msg)];

	if (e == NULL)
		return rc;
	snprintf(msg, sizeof(msg), "%s", e->msg);
	return err_set(e, rc, "rstore: %s/%s: %s: %s", tenant, id, what, msg);
}

/*** Push ***/

/*
 * EXISTS of the blob (index m->n) and of each distinct chunk of m,
 * pipelined: sets need[i] for each one Redis lacks. need has m->n + 1
 * entries; first[] is store_manifest_distinct()'s.
 */
static int
push_probe(struct rstore *rs, const char *tenant,
    const struct store_manifest *m, const bool *first, bool *need,
    struct err *e)
{
	size_t todo[PROBE_BATCH], n = 0, i = 0;
	char key[KEY_MAX], hex[STORE_SHA_HEX + 1];
	int rc;

	while (i <= m->n) {
		/* Fill a batch: chunk indexes, m->n standing for the blob. */
		for (n = 0; i <= m->n && n < PROBE_BATCH; i++) {
			const char *argv[2] = { "EXISTS", key };
			size_t len[2] = { 6, 0 };

			if (i < m->n && !first[i])
				continue;
			if (i < m->n)
				store_manifest_chunk_hex(m, i, hex);
			rc = i < m->n ?
			    rstore__key(rs, key, tenant, "chunk", hex, e) :
			    rstore__key(rs, key, tenant, "blob", m->sha256, e);
			if (rc == 0) {
				len[1] = strlen(key);
				rc = rstore__append(rs, 2, argv, len, e);
			}
			if (rc != 0) {
				rstore__drain(rs, n);
				return rc;
			}
			todo[n++] = i;
		}
		for (size_t k = 0; k < n; k++) {
			redisReply *r;

			if ((rc = rstore__reply(rs, &r, e)) != 0)
				return rc;
			if (r->type != REDIS_REPLY_INTEGER) {
				rc = err_set(e, -EIO, "rstore: EXISTS: %s",
				    r->type == REDIS_REPLY_ERROR ? r->str :
				    "unexpected reply");
				freeReplyObject(r);
				rstore__drain(rs, n - k - 1);
				return rc;
			}
			need[todo[k]] = r->integer == 0;
			freeReplyObject(r);
		}
	}
	return 0;
}

/* Reads n replies of SET ... NX: "OK", or nil when the key was there. */
static int
set_replies(struct rstore *rs, size_t n, struct err *e)
{
	int rc = 0;

	for (size_t k = 0; k < n; k++) {
		redisReply *r;
		int got;

		if ((got = rstore__reply(rs, &r, e)) != 0)
			return got;
		if (rc == 0 && r->type != REDIS_REPLY_STATUS &&
		    r->type != REDIS_REPLY_NIL)
			rc = err_set(e, -EIO, "rstore: SET: %s",
			    r->type == REDIS_REPLY_ERROR ? r->str :
			    "unexpected reply");
		freeReplyObject(r);
	}
	return rc;
}

/* Queues SET key value NX PX RSTORE_PUSH_TTL_MS. */
static int
set_append(struct rstore *rs, const char *key, const void *data,
    size_t len, struct err *e)
{
	char ttl[16];
	const char *argv[6] = { "SET", key, data, "NX", "PX", ttl };
	size_t lens[6] = { 3, strlen(key), len, 2, 2, 0 };

	lens[5] = (size_t)snprintf(ttl, sizeof(ttl), "%d", RSTORE_PUSH_TTL_MS);
	return rstore__append(rs, 6, argv, lens, e);
}

/*
 * Sends the chunks need[] names, RSTORE_PIPELINE at a time, each read
 * (and checked) from local just before it is queued: hiredis copies a
 * command into its buffer, so a batch holds at most RSTORE_PIPELINE
 * chunks in memory.
 */
static int
push_chunks(struct rstore *rs, struct store *local, const char *tenant,
    const struct store_manifest *m, const bool *need, struct err *e)
{
	char key[KEY_MAX], hex[STORE_SHA_HEX + 1];
	size_t i = 0, n;
	int rc;

	while (i < m->n) {
		for (n = 0; i < m->n && n < RSTORE_PIPELINE; i++) {
			void *data = NULL;
			size_t len;

			if (!need[i])
				continue;
			store_manifest_chunk_hex(m, i, hex);
			rc = store_chunk_get(local, hex, &data, &len, e);
			if (rc == 0)
				rc = rstore__key(rs, key, tenant, "chunk", hex,
				    e);
			if (rc == 0)
				rc = set_append(rs, key, data, len, e);
			free(data);
			if (rc != 0) {
				rstore__drain(rs, n);
				return rc;
			}
			n++;
			rs->chunks_pushed++;
		}
		if ((rc = set_replies(rs, n, e)) != 0)
			return rc;
	}
	return 0;
}

int
rstore_push(struct rstore *rs, struct store *local, const char *tenant,
    const char *sha_hex, struct err *e)
{
	struct store_manifest m;
	char key[KEY_MAX];
	bool *first = NULL, *need = NULL;
	void *mb = NULL;
	size_t ml = 0;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_sha_check("sha256", sha_hex, e)) != 0 ||
	    (rc = rstore__conn(rs, e)) != 0)
		return rc;
	if ((rc = store_blob_manifest(local, sha_hex, &mb, &ml, e)) != 0 ||
	    (rc = store_manifest_parse(mb, ml, sha_hex, &m, e)) != 0)
		goto out_free;
	first = xcalloc(m.n + 1, sizeof(*first));
	need = xcalloc(m.n + 1, sizeof(*need));
	store_manifest_distinct(&m, first);
	if ((rc = push_probe(rs, tenant, &m, first, need, e)) != 0 ||
	    (rc = push_chunks(rs, local, tenant, &m, need, e)) != 0)
		goto out_free;
	/* The manifest last: a reader that finds it finds its chunks. */
	if (need[m.n]) {
		if ((rc = rstore__key(rs, key, tenant, "blob", sha_hex,
		    e)) != 0 || (rc = set_append(rs, key, mb, ml, e)) != 0 ||
		    (rc = set_replies(rs, 1, e)) != 0)
			goto out_free;
	}
out_free:
	free(need);
	free(first);
	free(mb);
	return rc;
}

/*** Pull ***/

/* Queues GETRANGE key 0 max: the value, or its first max + 1 bytes. */
static int
getrange_append(struct rstore *rs, const char *key, size_t max,
    struct err *e)
{
	char end[24];
	const char *argv[4] = { "GETRANGE", key, "0", end };
	size_t len[4] = { 8, strlen(key), 1, 0 };

	len[3] = (size_t)snprintf(end, sizeof(end), "%zu", max);
	return rstore__append(rs, 4, argv, len, e);
}

/* A GETRANGE reply: a string (empty when the key is missing). */
static int
getrange_check(const redisReply *r, const char *key, struct err *e)
{
	if (r->type == REDIS_REPLY_STRING)
		return 0;
	return err_set(e, r->type == REDIS_REPLY_ERROR ? -EIO : -EBADMSG,
	    "rstore: %s: %s", key, r->type == REDIS_REPLY_ERROR ? r->str :
	    "not a string");
}

/*
 * Fetches the chunks missing[] names and got[] lacks, RSTORE_PIPELINE at
 * a time, into got[i] (the replies, kept for store_blob_import(); the
 * caller frees them) after checking each one's length. A chunk that is
 * gone is -EAGAIN with gone[] naming it.
 */
static int
pull_chunks(struct rstore *rs, const struct store_sandbox *sb,
    const struct store_manifest *m, const bool *missing, redisReply **got,
    char gone[KEY_MAX], struct err *e)
{
	size_t todo[RSTORE_PIPELINE], n, i = 0;
	char key[KEY_MAX], hex[STORE_SHA_HEX + 1];
	int rc;

	while (i < m->n) {
		for (n = 0; i < m->n && n < RSTORE_PIPELINE; i++) {
			/* Fetched by an earlier try: kept. */
			if (!missing[i] || got[i] != NULL)
				continue;
			store_manifest_chunk_hex(m, i, hex);
			if ((rc = rstore__key(rs, key, sb->tenant, "chunk", hex,
			    e)) != 0 || (rc = getrange_append(rs, key,
			    store_manifest_chunk_len(m, i), e)) != 0) {
				rstore__drain(rs, n);
				return rc;
			}
			todo[n++] = i;
		}
		for (size_t k = 0; k < n; k++) {
			size_t at = todo[k], want = store_manifest_chunk_len(m,
			    at);
			redisReply *r;

			if ((rc = rstore__reply(rs, &r, e)) != 0)
				return rc;
			got[at] = r;
			store_manifest_chunk_hex(m, at, hex);
			if ((rc = getrange_check(r, "chunk", e)) == 0 &&
			    r->len == 0) {
				snprintf(gone, KEY_MAX, "chunk %zu (%s)", at,
				    hex);
				rc = -EAGAIN;
			} else if (rc == 0 && r->len != want) {
				rc = err_set(e, -EBADMSG, "rstore: %s/%s: "
				    "Redis copy: chunk %zu (%s): %s%zu bytes, "
				    "not %zu", sb->tenant, sb->id, at, hex,
				    r->len > want ? "over " : "",
				    r->len > want ? want : r->len, want);
			}
			if (rc != 0) {
				rstore__drain(rs, n - k - 1);
				return rc;
			}
			rs->chunks_fetched++;
		}
	}
	return 0;
}

/*
 * Makes local hold blob sb->head, fetching what it lacks. 0 when local
 * holds it; -EAGAIN with gone[] naming the piece when Redis no longer has
 * one (the caller finds out why); -errno with e otherwise.
 */
static int
blob_fetch(struct rstore *rs, struct store *local,
    const struct store_sandbox *sb, char gone[KEY_MAX], struct err *e)
{
	struct store_manifest m = { 0 };
	redisReply *mr = NULL, **got = NULL;
	const void **chunks = NULL;
	bool *missing = NULL;
	char key[KEY_MAX];
	long n;
	int rc;

	if ((rc = store_blob_exists(local, sb->head, e)) != 0)
		return rc < 0 ? rc : 0;
	if ((rc = rstore__key(rs, key, sb->tenant, "blob", sb->head,
	    e)) != 0 ||
	    (rc = getrange_append(rs, key, STORE_MANIFEST_MAX, e)) != 0 ||
	    (rc = rstore__reply(rs, &mr, e)) != 0 ||
	    (rc = getrange_check(mr, key, e)) != 0)
		goto out_free;
	if (mr->len == 0) {
		snprintf(gone, KEY_MAX, "blob %s", sb->head);
		rc = -EAGAIN;
		goto out_free;
	}
	if ((rc = store_manifest_parse(mr->str, mr->len, sb->head, &m,
	    e)) != 0) {
		rc = err_wrap(e, rc, sb->tenant, sb->id, "Redis copy");
		goto out_free;
	}
	missing = xcalloc(m.n > 0 ? m.n : 1, sizeof(*missing));
	got = xcalloc(m.n > 0 ? m.n : 1, sizeof(*got));
	chunks = xcalloc(m.n > 0 ? m.n : 1, sizeof(*chunks));
	for (int tries = 0; tries < 2; tries++) {
		if ((n = store_chunks_missing(local, &m, missing, e)) < 0) {
			rc = (int)n;
			break;
		}
		if ((rc = pull_chunks(rs, sb, &m, missing, got, gone, e)) != 0)
			break;
		for (size_t i = 0; i < m.n; i++)
			chunks[i] = got[i] != NULL ? got[i]->str : NULL;
		/* Hashes every chunk fetched: a damaged one stores nothing. */
		rc = store_blob_import(local, &m, chunks, e);
		if (rc == -EBADMSG)
			rc = err_wrap(e, rc, sb->tenant, sb->id, "Redis copy");
		if (rc != -ENOENT)
			break;
		/* A chunk local had was collected meanwhile: ask again. */
		err_clear(e);
	}
out_free:
	for (size_t i = 0; got != NULL && i < m.n; i++)
		freeReplyObject(got[i]);
	free(chunks);
	free(got);
	free(missing);
	freeReplyObject(mr);
	return rc;
}

/* The local row says what Redis says: nothing to do. */
static bool
sandbox_same(const struct store_sandbox *a, const struct store_sandbox *b)
{
	return a->version == b->version && strcmp(a->head, b->head) == 0 &&
	    a->created_at == b->created_at && a->updated_at == b->updated_at &&
	    strcmp(a->labels, b->labels) == 0 && strcmp(a->image, b->image) == 0 &&
	    strcmp(a->workdir, b->workdir) == 0;
}

int
rstore_pull(struct rstore *rs, struct store *local, const char *tenant,
    const char *id, struct store_sandbox *out, struct err *e)
{
	struct store_sandbox sb, cur;
	char gone[KEY_MAX];
	int rc;

	err_clear(e);
	memset(out, 0, sizeof(*out));
	for (int tries = 0; tries < RSTORE_PULL_TRIES; tries++) {
		if ((rc = rstore_head(rs, tenant, id, &sb, e)) != 0)
			return rc;
		rc = store_sandbox_get(local, tenant, id, &cur, e);
		if (rc != 0 && rc != -ENOENT)
			return rc;
		if (rc == 0 && sandbox_same(&sb, &cur)) {
			*out = sb;
			return 0;
		}
		err_clear(e);
		rc = blob_fetch(rs, local, &sb, gone, e);
		if (rc == -EAGAIN) {
			/* Gone: collected after the head moved, or lost. */
			if ((rc = rstore_head(rs, tenant, id, &cur, e)) != 0)
				return rc;
			if (strcmp(cur.head, sb.head) != 0)
				continue;
			return err_set(e, -EBADMSG, "rstore: %s/%s: %s of the "
			    "head (version %llu) is missing from Redis",
			    tenant, id, gone, (unsigned long long)sb.version);
		}
		if (rc == 0 && (rc = store_sandbox_adopt(local, &sb,
		    e)) == -EINVAL)
			/* Names and keys were checked: labels are damaged. */
			rc = err_wrap(e, -EBADMSG, tenant, id, "Redis copy");
		if (rc == 0)
			*out = sb;
		return rc;
	}
	return err_set(e, -ESTALE, "rstore: %s/%s: the head moved %d times "
	    "while it was pulled", tenant, id, RSTORE_PULL_TRIES);
}
