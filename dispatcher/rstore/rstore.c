/*
 * rstore.c - the Redis snapshot store: the handle and its connection, the
 * pipeline helpers, and the sandboxes (heads, create, commit, fork, delete,
 * list, history, job records). rstore_blob.c moves blobs between Redis and
 * a local store (push, pull); rstore_lua.c holds the scripts every write
 * of a head runs; rstore.h has the model and the key layout.
 *
 * DESIGN
 * One blocking hiredis context per handle, used from one thread. Reads
 * are single commands or pipelines of at most RSTORE_PIPELINE commands
 * (appended, then their replies read in order); writes of heads are
 * scripts, sent with EVALSHA of the SHA-1 SCRIPT LOAD gave at open, and
 * with EVAL when Redis answers NOSCRIPT (it was restarted or its script
 * cache flushed; EVAL caches the script again). Any I/O error or timeout
 * leaves a context whose replies are out of step, so it is dropped there
 * and the next call opens a new one: a handle outlives a Redis restart.
 * Every value read from Redis is checked (lengths, numbers, key shapes)
 * before it is copied into a fixed buffer: a damaged one is -EBADMSG.
 *
 * Sections: Connection, Names and replies, The commit script, Sandboxes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/util.h"
#include "../../common/xmalloc.h"
#include "../../proto/keys.h"
#include "../../queue/redis_sync.h"
#include "rstore.h"
#include "rstore_int.h"

static const char *const script_text[RS_NSCRIPTS] = {
	[RS_COMMIT] = rstore_commit_lua,
	[RS_FORK] = rstore__fork_lua,
	[RS_DELETE] = rstore__delete_lua,
};

/*** Connection ***/

/* Drops a broken connection; the next rstore__conn() opens another. */
static void
conn_drop(struct rstore *rs)
{
	if (rs->c != NULL)
		redisFree(rs->c);
	rs->c = NULL;
}

/* SCRIPT LOAD of every script, keeping the SHA-1s for EVALSHA. */
static int
scripts_load(struct rstore *rs, struct err *e)
{
	for (int i = 0; i < RS_NSCRIPTS; i++) {
		const char *argv[] = { "SCRIPT", "LOAD", script_text[i] };
		size_t len[] = { 6, 4, strlen(script_text[i]) };
		redisReply *r = NULL;
		int rc;

		if ((rc = rstore__command(rs, 3, argv, len, &r, e)) != 0)
			return rc;
		if (r->type != REDIS_REPLY_STRING || r->len != 40) {
			rc = err_set(e, -EIO, "rstore: SCRIPT LOAD: %s",
			    r->type == REDIS_REPLY_ERROR ? r->str :
			    "unexpected reply");
			freeReplyObject(r);
			return rc;
		}
		memcpy(rs->sha[i], r->str, 41);
		freeReplyObject(r);
	}
	return 0;
}

int
rstore__conn(struct rstore *rs, struct err *e)
{
	int rc;

	if (rs->c != NULL && rs->c->err == 0)
		return 0;
	conn_drop(rs);
	rs->c = redis_sync_open(rs->url, RSTORE_CONNECT_MS, RSTORE_COMMAND_MS,
	    NULL, e);
	if (rs->c == NULL)
		return e != NULL && e->code != 0 ? e->code : -EIO;
	if ((rc = scripts_load(rs, e)) != 0)
		conn_drop(rs);
	return rc;
}

int
rstore__append(struct rstore *rs, int argc, const char **argv,
    const size_t *len, struct err *e)
{
	if (redisAppendCommandArgv(rs->c, argc, argv, len) != REDIS_OK) {
		err_set(e, -EIO, "rstore: redis: %s", rs->c->errstr[0] ?
		    rs->c->errstr : "cannot queue a command");
		conn_drop(rs);
		return -EIO;
	}
	return 0;
}

int
rstore__reply(struct rstore *rs, redisReply **r, struct err *e)
{
	void *reply = NULL;

	*r = NULL;
	if (rs->c == NULL)
		return err_set(e, -EIO, "rstore: redis: connection lost");
	if (redisGetReply(rs->c, &reply) != REDIS_OK || reply == NULL) {
		err_set(e, -EIO, "rstore: redis: %s", rs->c->errstr[0] ?
		    rs->c->errstr : "no reply");
		conn_drop(rs);
		return -EIO;
	}
	*r = reply;
	return 0;
}

void
rstore__drain(struct rstore *rs, size_t n)
{
	redisReply *r;

	for (size_t i = 0; i < n && rs->c != NULL; i++) {
		if (rstore__reply(rs, &r, NULL) != 0)
			return;
		freeReplyObject(r);
	}
}

int
rstore__command(struct rstore *rs, int argc, const char **argv,
    const size_t *len, redisReply **r, struct err *e)
{
	int rc;

	*r = NULL;
	if ((rc = rstore__append(rs, argc, argv, len, e)) != 0)
		return rc;
	return rstore__reply(rs, r, e);
}

/* The prefix starts every key: [A-Za-z0-9_-], as config.c's check_prefix(). */
static bool
prefix_valid(const char *s)
{
	size_t n = strnlen(s, RSTORE_PREFIX_MAX + 1);

	if (n == 0 || n > RSTORE_PREFIX_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' &&
		    s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		    s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

int
rstore_open(const char *url, const char *prefix, struct rstore **out,
    struct err *e)
{
	struct rstore *rs;
	int rc;

	err_clear(e);
	*out = NULL;
	if (prefix == NULL)
		prefix = RSTORE_PREFIX_DEFAULT;
	if (!prefix_valid(prefix))
		return err_set(e, -EINVAL, "rstore: prefix: must be 1 to %d "
		    "characters of A-Z a-z 0-9 _ -", RSTORE_PREFIX_MAX);
	if (url == NULL)
		return err_set(e, -EINVAL, "rstore: url: missing");
	rs = xcalloc(1, sizeof(*rs));
	rs->url = xstrdup(url);
	snprintf(rs->prefix, sizeof(rs->prefix), "%s", prefix);
	if ((rc = rstore__conn(rs, e)) != 0) {
		rstore_close(rs);
		return rc;
	}
	*out = rs;
	return 0;
}

void
rstore_close(struct rstore *rs)
{
	if (rs == NULL)
		return;
	conn_drop(rs);
	if (rs->url != NULL) {
		explicit_bzero(rs->url, strlen(rs->url));
		free(rs->url);
	}
	free(rs);
}

/*** Names and replies ***/

int
rstore__names_check(const char *tenant, const char *field, const char *id,
    struct err *e)
{
	int rc;

	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = store_id_check(field, id, e)) != 0)
		return rc;
	return 0;
}

/* A job id: the characters of a sandbox id (and of proto/job.h's job ids). */
static int
job_check(const char *job_id, struct err *e)
{
	_Static_assert(RSTORE_JOB_ID_MAX == STORE_ID_MAX, "job id bound");

	if (job_id == NULL || job_id[0] == '\0')
		return 0;
	return store_id_check("job_id", job_id, e);
}

int
rstore__key(struct rstore *rs, char *buf, const char *tenant,
    const char *kind, const char *id, struct err *e)
{
	if (key_store(buf, rs->prefix, tenant, kind, id) < 0)
		return err_set(e, -ENAMETOOLONG, "rstore: key %s of %s: too "
		    "long", kind, tenant);
	return 0;
}

/* r is a string of no more than max bytes and no NUL inside. */
static bool
reply_is_text(const redisReply *r, size_t max)
{
	return r != NULL && (r->type == REDIS_REPLY_STRING ||
	    r->type == REDIS_REPLY_STATUS) && r->len <= max &&
	    strlen(r->str) == r->len;
}

/* A decimal string reply in [min, max] into *v. */
static bool
reply_i64(const redisReply *r, int64_t min, int64_t max, int64_t *v)
{
	return reply_is_text(r, 20) && parse_i64(r->str, min, max, v) == 0;
}

/*
 * Fills *sb (tenant and id given) from an HGETALL reply of P:{T}:sbx:ID:
 * 1 if it holds the sandbox, 0 if the hash is empty (no such sandbox),
 * -EBADMSG naming the field that is missing or damaged. Fields it does not
 * know are skipped, so a later version may add some.
 */
static int
sandbox_parse(const redisReply *r, const char *tenant, const char *id,
    struct store_sandbox *sb, struct err *e)
{
	unsigned seen = 0;
	int64_t v;

	memset(sb, 0, sizeof(*sb));
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
		return err_set(e, -EBADMSG, "rstore: sandbox %s/%s: not a "
		    "hash", tenant, id);
	if (r->elements == 0)
		return 0;
	snprintf(sb->tenant, sizeof(sb->tenant), "%s", tenant);
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	for (size_t i = 0; i < r->elements; i += 2) {
		const redisReply *k = r->element[i], *val = r->element[i + 1];
		const char *f = k->type == REDIS_REPLY_STRING ? k->str : "";

		if (strcmp(f, "head") == 0 &&
		    reply_is_text(val, STORE_SHA_HEX) &&
		    store_sha_check("head", val->str, NULL) == 0) {
			memcpy(sb->head, val->str, STORE_SHA_HEX + 1);
			seen |= 1;
		} else if (strcmp(f, "version") == 0 &&
		    reply_i64(val, 1, INT64_MAX, &v)) {
			sb->version = (uint64_t)v;
			seen |= 2;
		} else if (strcmp(f, "created_at") == 0 &&
		    reply_i64(val, 0, INT64_MAX, &v)) {
			sb->created_at = v;
			seen |= 4;
		} else if (strcmp(f, "updated_at") == 0 &&
		    reply_i64(val, 0, INT64_MAX, &v)) {
			sb->updated_at = v;
			seen |= 8;
		} else if (strcmp(f, "labels") == 0 &&
		    reply_is_text(val, STORE_LABELS_MAX)) {
			memcpy(sb->labels, val->str, val->len + 1);
			seen |= 16;
		} else if (strcmp(f, "image") == 0 &&
		    reply_is_text(val, STORE_IMAGE_MAX) &&
		    store_image_check(val->str, NULL, NULL) == 0) {
			memcpy(sb->image, val->str, val->len + 1);
		} else if (strcmp(f, "workdir") == 0 &&
		    reply_is_text(val, STORE_WORKDIR_MAX) &&
		    store_image_check(NULL, val->str, NULL) == 0) {
			memcpy(sb->workdir, val->str, val->len + 1);
		} else if (strcmp(f, "head") == 0 ||
		    strcmp(f, "version") == 0 ||
		    strcmp(f, "created_at") == 0 ||
		    strcmp(f, "updated_at") == 0 || strcmp(f, "labels") == 0 ||
		    strcmp(f, "image") == 0 || strcmp(f, "workdir") == 0) {
			return err_set(e, -EBADMSG, "rstore: sandbox %s/%s: "
			    "field %s: damaged", tenant, id, f);
		}
	}
	if (seen != 31)
		return err_set(e, -EBADMSG, "rstore: sandbox %s/%s: fields "
		    "missing", tenant, id);
	return 1;
}

/*
 * A history row, "VERSION SHA CREATED_AT[ JOB]", into *v and job (""
 * for none). -EBADMSG if it is not one.
 */
static int
row_parse(const redisReply *r, const char *tenant, const char *id,
    struct store_version *v, char job[RSTORE_JOB_ID_MAX + 1],
    struct err *e)
{
	char buf[24 + STORE_SHA_HEX + 24 + RSTORE_JOB_ID_MAX + 4];
	char *f[4] = { NULL }, *save = NULL, *p;
	int64_t n, t;
	int nf = 0;

	memset(v, 0, sizeof(*v));
	job[0] = '\0';
	if (!reply_is_text(r, sizeof(buf) - 1))
		goto out_bad;
	memcpy(buf, r->str, r->len + 1);
	for (p = strtok_r(buf, " ", &save); p != NULL && nf < 4;
	    p = strtok_r(NULL, " ", &save))
		f[nf++] = p;
	if (p != NULL || nf < 3 || parse_i64(f[0], 1, INT64_MAX, &n) != 0 ||
	    store_sha_check("sha256", f[1], NULL) != 0 ||
	    parse_i64(f[2], 0, INT64_MAX, &t) != 0 ||
	    (nf == 4 && job_check(f[3], NULL) != 0))
		goto out_bad;
	v->version = (uint64_t)n;
	memcpy(v->sha256, f[1], STORE_SHA_HEX + 1);
	v->created_at = t;
	if (nf == 4)
		snprintf(job, RSTORE_JOB_ID_MAX + 1, "%s", f[3]);
	return 0;
out_bad:
	return err_set(e, -EBADMSG, "rstore: sandbox %s/%s: damaged history "
	    "row", tenant, id);
}

/*
 * A script's reply {status, number, detail}: status into st, number into
 * *num and detail into det. -EIO naming what came instead.
 */
static int
script_reply(const redisReply *r, char st[16], long long *num,
    char det[KEY_MAX], struct err *e)
{
	if (r == NULL)
		return err_set(e, -EIO, "rstore: script: no reply");
	if (r->type == REDIS_REPLY_ERROR)
		return err_set(e, -EIO, "rstore: script: %s", r->str);
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    !reply_is_text(r->element[0], 15) ||
	    r->element[1]->type != REDIS_REPLY_INTEGER ||
	    !reply_is_text(r->element[2], KEY_MAX - 1))
		return err_set(e, -EIO, "rstore: script: unexpected reply");
	memcpy(st, r->element[0]->str, r->element[0]->len + 1);
	*num = r->element[1]->integer;
	memcpy(det, r->element[2]->str, r->element[2]->len + 1);
	return 0;
}

/*
 * Runs script s with argv[2..argc-1] (argv[0] and argv[1] are filled
 * here): EVALSHA, then EVAL if Redis lost the script. *r is the caller's.
 */
static int
script_run(struct rstore *rs, enum rstore_script s, int argc,
    const char **argv, size_t *len, redisReply **r, struct err *e)
{
	int rc;

	if ((rc = rstore__conn(rs, e)) != 0)
		return rc;
	argv[0] = "EVALSHA";
	argv[1] = rs->sha[s];
	len[0] = 7;
	len[1] = 40;
	if ((rc = rstore__command(rs, argc, argv, len, r, e)) != 0)
		return rc;
	if ((*r)->type != REDIS_REPLY_ERROR ||
	    strncmp((*r)->str, "NOSCRIPT", 8) != 0)
		return 0;
	freeReplyObject(*r);
	argv[0] = "EVAL";
	argv[1] = script_text[s];
	len[0] = 4;
	len[1] = strlen(script_text[s]);
	return rstore__command(rs, argc, argv, len, r, e);
}

/*** The commit script ***/

int
rstore_commit_call(const char *prefix, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, const char *job_id,
    unsigned keep_versions, const char *labels_json, const char *image,
    const char *workdir, struct rstore_call *c, struct err *e)
{
	static const char *const kinds[RSTORE_COMMIT_KEYS] = { "sbx", "sbxv",
	    "sbxj", "refs", "crefs", "sbxs" };
	int rc;

	memset(c, 0, sizeof(*c));
	if (prefix == NULL || !prefix_valid(prefix))
		return err_set(e, -EINVAL, "rstore: prefix: must be 1 to %d "
		    "characters of A-Z a-z 0-9 _ -", RSTORE_PREFIX_MAX);
	if ((rc = rstore__names_check(tenant, "id", id, e)) != 0 ||
	    (rc = store_sha_check("sha256", new_sha, e)) != 0 ||
	    (rc = job_check(job_id, e)) != 0)
		return rc;
	/* Lua's numbers are doubles: integers are exact below 2^53. */
	if (from_version >= RSTORE_VERSION_MAX)
		return err_set(e, -EOVERFLOW, "rstore: sandbox %s/%s: version "
		    "%" PRIu64 " too large", tenant, id, from_version);
	if (from_version == 0 &&
	    ((rc = store_labels_canon(labels_json, c->labels, e)) != 0 ||
	    (rc = store_image_check(image, workdir, e)) != 0))
		return rc;
	for (int i = 0; i < RSTORE_COMMIT_KEYS; i++) {
		bool per_id = i < 3;

		if (key_store(c->keys[i], prefix, tenant, kinds[i],
		    per_id ? id : NULL) < 0)
			return err_set(e, -ENAMETOOLONG, "rstore: key %s: too "
			    "long", kinds[i]);
	}
	if (key_store(c->base, prefix, tenant, "", NULL) < 0)
		return err_set(e, -ENAMETOOLONG, "rstore: prefix: too long");
	snprintf(c->from, sizeof(c->from), "%" PRIu64, from_version);
	snprintf(c->keep, sizeof(c->keep), "%u", keep_versions);
	c->argv[0] = "EVAL";
	c->argv[1] = rstore_commit_lua;
	c->argv[2] = "6";
	for (int i = 0; i < RSTORE_COMMIT_KEYS; i++)
		c->argv[3 + i] = c->keys[i];
	c->argv[9] = c->base;
	c->argv[10] = id;
	c->argv[11] = c->from;
	c->argv[12] = new_sha;
	c->argv[13] = job_id != NULL ? job_id : "";
	c->argv[14] = c->keep;
	c->argv[15] = c->labels;
	c->argv[16] = from_version == 0 && image != NULL ? image : "";
	c->argv[17] = from_version == 0 && workdir != NULL ? workdir : "";
	for (int i = 0; i < RSTORE_COMMIT_ARGC; i++)
		c->len[i] = strlen(c->argv[i]);
	return 0;
}

int
rstore_commit_result(const redisReply *r, const char *tenant,
    const char *id, uint64_t from_version, uint64_t *version,
    struct err *e)
{
	char st[16], det[KEY_MAX];
	long long n;
	int rc;

	if ((rc = script_reply(r, st, &n, det, e)) != 0)
		return rc;
	if (strcmp(st, "OK") == 0) {
		if (n < 1)
			return err_set(e, -EIO, "rstore: script: version %lld",
			    n);
		if (version != NULL)
			*version = (uint64_t)n;
		return 0;
	}
	if (strcmp(st, "ESTALE") == 0)
		return err_set(e, -ESTALE, "rstore: sandbox %s/%s: at version "
		    "%lld, not %" PRIu64, tenant, id, n, from_version);
	if (strcmp(st, "EEXIST") == 0)
		return err_set(e, -EEXIST, "rstore: sandbox %s/%s: exists (at "
		    "version %lld)", tenant, id, n);
	if (strcmp(st, "ENOENT") == 0)
		return err_set(e, -ENOENT, "rstore: %s/%s: %s: not in Redis",
		    tenant, id, det);
	if (strcmp(st, "EALREADY") == 0)
		return err_set(e, -EALREADY, "rstore: sandbox %s/%s: job %s "
		    "already made version %lld", tenant, id, det, n);
	if (strcmp(st, "EBADMSG") == 0)
		return err_set(e, -EBADMSG, "rstore: %s/%s: %s: not a manifest",
		    tenant, id, det);
	if (strcmp(st, "EINVAL") == 0)
		return err_set(e, -EINVAL, "rstore: script: %s", det);
	return err_set(e, -EIO, "rstore: script: status %s", st);
}

/* rstore_commit() and rstore_create(): one run of the commit script. */
static int
commit_run(struct rstore *rs, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, const char *job_id,
    unsigned keep_versions, const char *labels_json, const char *image,
    const char *workdir, struct err *e)
{
	struct rstore_call *c = xmalloc(sizeof(*c));
	redisReply *r = NULL;
	int rc;

	err_clear(e);
	rc = rstore_commit_call(rs->prefix, tenant, id, from_version, new_sha,
	    job_id, keep_versions, labels_json, image, workdir, c, e);
	if (rc == 0)
		rc = script_run(rs, RS_COMMIT, RSTORE_COMMIT_ARGC, c->argv,
		    c->len, &r, e);
	if (rc == 0)
		rc = rstore_commit_result(r, tenant, id, from_version, NULL, e);
	freeReplyObject(r);
	free(c);
	return rc;
}

/*** Sandboxes ***/

int
rstore_commit(struct rstore *rs, const char *tenant, const char *id,
    uint64_t from_version, const char *new_sha, const char *job_id,
    unsigned keep_versions, struct err *e)
{
	return commit_run(rs, tenant, id, from_version, new_sha, job_id,
	    keep_versions, NULL, NULL, NULL, e);
}

int
rstore_create(struct rstore *rs, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, const char *job_id,
    struct err *e)
{
	return commit_run(rs, tenant, id, 0, sha_hex, job_id, 0, labels_json,
	    NULL, NULL, e);
}

int
rstore_create_image(struct rstore *rs, const char *tenant, const char *id,
    const char *sha_hex, const char *labels_json, const char *image,
    const char *workdir, const char *job_id, struct err *e)
{
	return commit_run(rs, tenant, id, 0, sha_hex, job_id, 0, labels_json,
	    image, workdir, e);
}

int
rstore_head(struct rstore *rs, const char *tenant, const char *id,
    struct store_sandbox *out, struct err *e)
{
	char key[KEY_MAX];
	const char *argv[2] = { "HGETALL", key };
	size_t len[2] = { 7, 0 };
	redisReply *r = NULL;
	int rc;

	err_clear(e);
	memset(out, 0, sizeof(*out));
	if ((rc = rstore__names_check(tenant, "id", id, e)) != 0 ||
	    (rc = rstore__key(rs, key, tenant, "sbx", id, e)) != 0 ||
	    (rc = rstore__conn(rs, e)) != 0)
		return rc;
	len[1] = strlen(key);
	if ((rc = rstore__command(rs, 2, argv, len, &r, e)) != 0)
		return rc;
	rc = sandbox_parse(r, tenant, id, out, e);
	if (rc == 0)
		rc = err_set(e, -ENOENT, "rstore: sandbox %s/%s: not found",
		    tenant, id);
	freeReplyObject(r);
	return rc < 0 ? rc : 0;
}

/* The fork and delete scripts' statuses, as -errno with e. */
static int
script_result(const redisReply *r, const char *tenant, struct err *e)
{
	char st[16], det[KEY_MAX];
	long long n;
	int rc;

	if ((rc = script_reply(r, st, &n, det, e)) != 0)
		return rc;
	if (strcmp(st, "OK") == 0)
		return 0;
	if (strcmp(st, "ENOENT") == 0)
		return err_set(e, -ENOENT, "rstore: %s/%s: not found", tenant,
		    det);
	if (strcmp(st, "EEXIST") == 0)
		return err_set(e, -EEXIST, "rstore: sandbox %s/%s: exists (at "
		    "version %lld)", tenant, det, n);
	if (strcmp(st, "EINVAL") == 0)
		return err_set(e, -EINVAL, "rstore: script: %s", det);
	return err_set(e, -EIO, "rstore: script: status %s", st);
}

int
rstore_fork(struct rstore *rs, const char *tenant, const char *src,
    const char *dst, struct err *e)
{
	char keys[5][KEY_MAX], base[KEY_MAX];
	const char *argv[2 + 1 + 5 + 3];
	size_t len[2 + 1 + 5 + 3];
	redisReply *r = NULL;
	int rc;

	err_clear(e);
	if ((rc = rstore__names_check(tenant, "src", src, e)) != 0 ||
	    (rc = store_id_check("dst", dst, e)) != 0 ||
	    (rc = rstore__key(rs, keys[0], tenant, "sbx", src, e)) != 0 ||
	    (rc = rstore__key(rs, keys[1], tenant, "sbx", dst, e)) != 0 ||
	    (rc = rstore__key(rs, keys[2], tenant, "sbxv", dst, e)) != 0 ||
	    (rc = rstore__key(rs, keys[3], tenant, "refs", NULL, e)) != 0 ||
	    (rc = rstore__key(rs, keys[4], tenant, "sbxs", NULL, e)) != 0 ||
	    (rc = rstore__key(rs, base, tenant, "", NULL, e)) != 0)
		return rc;
	argv[2] = "5";
	for (int i = 0; i < 5; i++)
		argv[3 + i] = keys[i];
	argv[8] = base;
	argv[9] = src;
	argv[10] = dst;
	for (int i = 2; i < 11; i++)
		len[i] = strlen(argv[i]);
	if ((rc = script_run(rs, RS_FORK, 11, argv, len, &r, e)) == 0)
		rc = script_result(r, tenant, e);
	freeReplyObject(r);
	return rc;
}

int
rstore_delete(struct rstore *rs, const char *tenant, const char *id,
    struct err *e)
{
	static const char *const kinds[6] = { "sbx", "sbxv", "sbxj", "refs",
	    "crefs", "sbxs" };
	char keys[6][KEY_MAX], base[KEY_MAX];
	const char *argv[2 + 1 + 6 + 2];
	size_t len[2 + 1 + 6 + 2];
	redisReply *r = NULL;
	int rc;

	err_clear(e);
	if ((rc = rstore__names_check(tenant, "id", id, e)) != 0 ||
	    (rc = rstore__key(rs, base, tenant, "", NULL, e)) != 0)
		return rc;
	for (int i = 0; i < 6; i++)
		if ((rc = rstore__key(rs, keys[i], tenant, kinds[i],
		    i < 3 ? id : NULL, e)) != 0)
			return rc;
	argv[2] = "6";
	for (int i = 0; i < 6; i++)
		argv[3 + i] = keys[i];
	argv[9] = base;
	argv[10] = id;
	for (int i = 2; i < 11; i++)
		len[i] = strlen(argv[i]);
	if ((rc = script_run(rs, RS_DELETE, 11, argv, len, &r, e)) == 0)
		rc = script_result(r, tenant, e);
	freeReplyObject(r);
	return rc;
}

static int
id_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * HGETALL of ids[0..n-1], pipelined, calling cb for each sandbox still
 * there. Reads every reply before the first call, so the connection is in
 * step whatever cb returns.
 */
static int
list_batch(struct rstore *rs, const char *tenant, char **ids, size_t n,
    store_sandbox_cb cb, void *arg, struct err *e)
{
	redisReply *r[RSTORE_PIPELINE] = { NULL };
	struct store_sandbox sb;
	char key[KEY_MAX];
	size_t got = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		const char *argv[2] = { "HGETALL", key };
		size_t len[2] = { 7, 0 };

		rc = rstore__key(rs, key, tenant, "sbx", ids[i], e);
		if (rc == 0) {
			len[1] = strlen(key);
			rc = rstore__append(rs, 2, argv, len, e);
		}
		if (rc != 0) {
			rstore__drain(rs, i);
			return rc;
		}
	}
	for (got = 0; got < n; got++)
		if ((rc = rstore__reply(rs, &r[got], e)) != 0)
			goto out_free;
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = sandbox_parse(r[i], tenant, ids[i], &sb, e);
		if (rc > 0)
			rc = cb(&sb, arg);
	}
out_free:
	for (size_t i = 0; i < got; i++)
		freeReplyObject(r[i]);
	return rc;
}

int
rstore_list(struct rstore *rs, const char *tenant, store_sandbox_cb cb,
    void *arg, struct err *e)
{
	char key[KEY_MAX];
	const char *argv[2] = { "SMEMBERS", key };
	size_t len[2] = { 8, 0 }, n = 0;
	redisReply *r = NULL;
	char **ids = NULL;
	int rc;

	err_clear(e);
	if ((rc = store_tenant_check(tenant, e)) != 0 ||
	    (rc = rstore__key(rs, key, tenant, "sbxs", NULL, e)) != 0 ||
	    (rc = rstore__conn(rs, e)) != 0)
		return rc;
	len[1] = strlen(key);
	if ((rc = rstore__command(rs, 2, argv, len, &r, e)) != 0)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY) {
		rc = err_set(e, -EBADMSG, "rstore: %s: not a set", key);
		goto out_free;
	}
	ids = xcalloc(r->elements > 0 ? r->elements : 1, sizeof(*ids));
	for (n = 0; n < r->elements; n++) {
		if (!reply_is_text(r->element[n], STORE_ID_MAX) ||
		    store_id_check("id", r->element[n]->str, NULL) != 0) {
			rc = err_set(e, -EBADMSG, "rstore: %s: damaged member",
			    key);
			goto out_free;
		}
		ids[n] = r->element[n]->str;
	}
	if (n > 1)
		qsort(ids, n, sizeof(*ids), id_cmp);
	for (size_t i = 0; i < n && rc == 0; i += RSTORE_PIPELINE)
		rc = list_batch(rs, tenant, ids + i, n - i < RSTORE_PIPELINE ?
		    n - i : RSTORE_PIPELINE, cb, arg, e);
out_free:
	free(ids);
	freeReplyObject(r);
	return rc;
}

int
rstore_history(struct rstore *rs, const char *tenant, const char *id,
    rstore_version_cb cb, void *arg, struct err *e)
{
	char key[KEY_MAX], job[RSTORE_JOB_ID_MAX + 1];
	const char *argv[4] = { "LRANGE", key, "0", "-1" };
	size_t len[4] = { 6, 0, 1, 2 };
	struct store_version v;
	struct store_sandbox sb;
	redisReply *r = NULL;
	int rc;

	err_clear(e);
	if ((rc = rstore__names_check(tenant, "id", id, e)) != 0 ||
	    (rc = rstore__key(rs, key, tenant, "sbxv", id, e)) != 0 ||
	    (rc = rstore__conn(rs, e)) != 0)
		return rc;
	len[1] = strlen(key);
	if ((rc = rstore__command(rs, 4, argv, len, &r, e)) != 0)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY) {
		rc = err_set(e, -EBADMSG, "rstore: %s: not a list", key);
		goto out_free;
	}
	/* The head's row is always there: no rows means no sandbox. */
	if (r->elements == 0) {
		rc = rstore_head(rs, tenant, id, &sb, e);
		goto out_free;
	}
	for (size_t i = 0; i < r->elements && rc == 0; i++) {
		rc = row_parse(r->element[i], tenant, id, &v, job, e);
		if (rc == 0)
			rc = cb(&v, job, arg);
	}
out_free:
	freeReplyObject(r);
	return rc;
}

int64_t
rstore_job_version(struct rstore *rs, const char *tenant, const char *id,
    const char *job_id, struct err *e)
{
	char key[KEY_MAX];
	const char *argv[3] = { "HGET", key, job_id };
	size_t len[3] = { 4, 0, 0 };
	redisReply *r = NULL;
	int64_t v = 0;
	int rc;

	err_clear(e);
	if ((rc = rstore__names_check(tenant, "id", id, e)) != 0 ||
	    (rc = store_id_check("job_id", job_id, e)) != 0 ||
	    (rc = rstore__key(rs, key, tenant, "sbxj", id, e)) != 0 ||
	    (rc = rstore__conn(rs, e)) != 0)
		return rc;
	len[1] = strlen(key);
	len[2] = strlen(job_id);
	if ((rc = rstore__command(rs, 3, argv, len, &r, e)) != 0)
		return rc;
	if (r->type != REDIS_REPLY_NIL && !reply_i64(r, 1, INT64_MAX, &v))
		v = err_set(e, -EBADMSG, "rstore: %s: job %s: damaged record",
		    key, job_id);
	freeReplyObject(r);
	return v;
}

/*** Test hooks ***/

long
rstore_debug_chunks_fetched(const struct rstore *rs)
{
	return rs->chunks_fetched;
}

long
rstore_debug_chunks_pushed(const struct rstore *rs)
{
	return rs->chunks_pushed;
}
