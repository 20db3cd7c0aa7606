/*
 * batch.c - /v1/batches: a file of cases (JSON lines, the format of
 * `sandq batch run`) submitted at once, its progress and results read back
 * from Redis, and its cancellation. docs/gateway.md, "Batches".
 *
 * DESIGN: the gateway keeps no state, so it does not drive a batch as the
 * CLI does (a window of cases in flight). POST /v1/batches parses every
 * line with proto/batchcase.c (the CLI's own code) and runs one script
 * that, atomically, XADDs each well-formed case as job batch:B:LINE (the
 * CLI's ids), records the batch in the protocol's hash PREFIX:{T}:batch:B
 * (state "submitted", source "gateway") and what each case expects in
 * PREFIX:{T}:bcases:B (LINE -> {"expect","expect_mode"}), both for 7 days.
 * sandqd's fair scheduling paces the cases like any other jobs. A case is
 * submitted again only when it has no result and was not submitted before
 * under the same id, so a resubmission resumes and never runs a case twice.
 *
 * GET reads the case list, then the results with MGET, BATCH_CHUNK keys at
 * a time, judging each with batchcase_expect_match() as the CLI does; the
 * work per request is bounded by GW_BATCH_CASES_MAX cases (results pages
 * by GW_BATCH_PAGE_MAX). POST .../cancel runs queue/cancel.c's script,
 * queued_only, for each case without a result.
 *
 * Sections: state, routes, submit, reading, cancel.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/batchcase.h"
#include "../proto/job.h"
#include "../proto/keys.h"
#include "../proto/result.h"
#include "../queue/cancel.h"
#include "internal.h"
#include "jobjson.h"

#define GW_BATCH_CASES_MAX 10000	/* cases of one batch */
#define GW_BATCH_PAGE_MAX 100		/* cases of one results page */
#define GW_BATCH_TTL_S (7 * 86400)	/* of the batch's hash and case list */
#define GW_BATCH_MALFORMED_MAX 100	/* malformed lines listed (all counted) */
#define BATCH_CHUNK 128			/* result keys per MGET */
#define CASE_ID_LEN (6 + BATCH_ID_MAX + 1 + 10)	/* "batch:" B ":" LINE */

/*** State ***/

enum bop { B_SUBMIT, B_STATUS, B_RESULTS, B_CANCEL };

/* One case: its line and what it expects (JSON); submit: its packed job. */
struct bcase {
	uint32_t line;
	char *expect;
	char *job;
	size_t joblen;
};

/* A batch request's state, the call's ext. */
struct bstate {
	enum bop op;
	char id[BATCH_ID_MAX + 1];
	struct bcase *cases;
	size_t n, cap;
	size_t total, nmalformed;	/* submit: lines; malformed lines */
	json_t *malformed;		/* submit: [{line, error}] */
	json_t *hash;			/* reading: the batch's hash */
	size_t next, end;		/* reading: cases [next, end) remain */
	uint32_t from;			/* results: first line */
	size_t limit;
	int pending;			/* replies awaited (cancel) */
	bool failed;
	uint64_t done, passed, failed_n, no_expect, not_ok;
	uint64_t cancelled, running, finished;
	json_t *by_status, *results;
};

static void
bstate_free(void *p)
{
	struct bstate *b = p;

	if (b == NULL)
		return;
	for (size_t i = 0; i < b->n; i++) {
		free(b->cases[i].expect);
		free(b->cases[i].job);
	}
	free(b->cases);
	json_decref(b->malformed);
	json_decref(b->hash);
	json_decref(b->by_status);
	json_decref(b->results);
	free(b);
}

static struct bcase *
bstate_add(struct bstate *b, uint32_t line)
{
	struct bcase *bc;

	if (b->n == b->cap) {
		b->cap = b->cap ? b->cap * 2 : 64;
		b->cases = xreallocarray(b->cases, b->cap, sizeof(*b->cases));
	}
	bc = &b->cases[b->n++];
	memset(bc, 0, sizeof(*bc));
	bc->line = line;
	return bc;
}

/*** Routes ***/

/* A decimal in [lo, hi] from s; false if it is not one. */
static bool
parse_num(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
	unsigned long v = 0;

	if (*s == '\0')
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > hi)
			return false;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* Whether the request's Content-Type is JSON lines. */
static bool
ctype_jsonl(h2o_req_t *req)
{
	ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
	h2o_iovec_t v;
	size_t n;

	if (i < 0)
		return false;
	v = req->headers.entries[i].value;
	n = v.len;
	for (size_t k = 0; k < v.len; k++)
		if (v.base[k] == ';' || v.base[k] == ' ') {
			n = k;
			break;
		}
	return h2o_lcstris(v.base, n, H2O_STRLIT("application/x-ndjson")) ||
	    h2o_lcstris(v.base, n, H2O_STRLIT("application/jsonl"));
}

static bool
method_is(h2o_req_t *req, const char *m)
{
	return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

/*
 * /v1/batches[/B[/results|/cancel]]: the route and its query checked
 * before the token is, the call returned to be authenticated.
 */
struct call *
batch_request(h2o_req_t *req)
{
	h2o_iovec_t p = req->path_normalized;
	const char *rest = p.base + 11, *slash;
	size_t rl = p.len - 11;
	static const char *const q_submit[] = { "id" };
	static const char *const q_results[] = { "from", "limit" };
	h2o_iovec_t qv[2];
	const char *why;
	struct bstate *b;
	struct call *c;
	unsigned long n;

	b = xcalloc(1, sizeof(*b));
	if (rl <= 1) {
		if (!method_is(req, "POST")) {
			send_error(req, 405, "method_not_allowed", "POST /v1/batches");
			goto out_free;
		}
		if (!ctype_jsonl(req)) {
			send_error(req, 415, "unsupported_media_type", "the body is JSON "
			    "lines: Content-Type: application/x-ndjson or application/jsonl");
			goto out_free;
		}
		if (gw_query(req, q_submit, 1, qv, &why) && qv[0].base != NULL &&
		    qv[0].len > 0 && qv[0].len < sizeof(b->id)) {
			memcpy(b->id, qv[0].base, qv[0].len);
			b->id[qv[0].len] = '\0';
		}
		if (!gw_query(req, q_submit, 1, qv, &why) || (qv[0].base != NULL &&
		    !batchcase_id_valid(b->id))) {
			send_error(req, 400, "bad_query", "the query takes only id=BATCH "
			    "(1 to 64 of [A-Za-z0-9._-])");
			goto out_free;
		}
		b->op = B_SUBMIT;
	} else {
		rest++;
		rl--;
		slash = memchr(rest, '/', rl);
		n = slash ? (size_t)(slash - rest) : rl;
		if (n == 0 || n > BATCH_ID_MAX) {
			send_error(req, 404, "not_found", "not a batch id");
			goto out_free;
		}
		memcpy(b->id, rest, n);
		b->id[n] = '\0';
		if (!batchcase_id_valid(b->id)) {
			send_error(req, 404, "not_found", "not a batch id");
			goto out_free;
		}
		if (slash == NULL) {
			b->op = B_STATUS;
			if (!method_is(req, "GET")) {
				send_error(req, 405, "method_not_allowed", "GET /v1/batches/B");
				goto out_free;
			}
		} else if (h2o_memis(slash + 1, rl - n - 1, H2O_STRLIT("results"))) {
			b->op = B_RESULTS;
			if (!method_is(req, "GET")) {
				send_error(req, 405, "method_not_allowed",
				    "GET /v1/batches/B/results");
				goto out_free;
			}
			b->from = 1;
			b->limit = GW_BATCH_PAGE_MAX;
			if (!gw_query(req, q_results, 2, qv, &why))
				goto out_bad_page;
			if (qv[0].base != NULL) {
				if (!gw_query_uint(qv[0], 1, UINT32_MAX, &n))
					goto out_bad_page;
				b->from = (uint32_t)n;
			}
			if (qv[1].base != NULL) {
				if (!gw_query_uint(qv[1], 1, GW_BATCH_PAGE_MAX, &n))
					goto out_bad_page;
				b->limit = n;
			}
		} else if (h2o_memis(slash + 1, rl - n - 1, H2O_STRLIT("cancel"))) {
			b->op = B_CANCEL;
			if (!method_is(req, "POST")) {
				send_error(req, 405, "method_not_allowed",
				    "POST /v1/batches/B/cancel");
				goto out_free;
			}
		} else {
			send_error(req, 404, "not_found", "no such route");
			goto out_free;
		}
	}
	c = call_new(req);
	c->route = R_BATCH;
	c->ext = b;
	c->ext_free = bstate_free;
	return c;

out_bad_page:
	send_error(req, 400, "bad_query", "the query takes only from=LINE and "
	    "limit=1..100");
out_free:
	bstate_free(b);
	return NULL;
}

static void submit(struct call *c);
static void read_start(struct call *c);

void
batch_authed(struct call *c)
{
	struct bstate *b = c->ext;

	if (b->op == B_SUBMIT)
		submit(c);
	else
		read_start(c);
}

/*** Submit ***/

/*
 * KEYS: the tenant's jobs, the batch's hash, its case list, then the
 * result key of each case. ARGV: now (ms), total, malformed count,
 * malformed JSON, TTL (s), then LINE, job, expect of each case. Returns
 * the cases XADDed, or -1 when the id is a `sandq batch` run's.
 */
static const char submit_lua[] =
"local h = redis.call('HGET', KEYS[2], 'source')\n"
"if redis.call('EXISTS', KEYS[2]) == 1 and h ~= 'gateway' then return -1 end\n"
"local n = #KEYS - 3\n"
"local add = {}\n"
"for i = 1, n do\n"
"  local a = 3 + 3 * i\n"
"  add[i] = redis.call('EXISTS', KEYS[3 + i]) == 0 and\n"
"    redis.call('HEXISTS', KEYS[3], ARGV[a]) == 0\n"
"end\n"
"redis.call('DEL', KEYS[3])\n"
"local sub = 0\n"
"for i = 1, n do\n"
"  local a = 3 + 3 * i\n"
"  redis.call('HSET', KEYS[3], ARGV[a], ARGV[a + 2])\n"
"  if add[i] then\n"
"    redis.call('XADD', KEYS[1], '*', 'job', ARGV[a + 1])\n"
"    sub = sub + 1\n"
"  end\n"
"end\n"
"local created = redis.call('HGET', KEYS[2], 'created_at') or ARGV[1]\n"
"redis.call('HSET', KEYS[2], 'state', 'submitted', 'source', 'gateway',\n"
"  'total', ARGV[2], 'malformed', ARGV[3], 'malformed_lines', ARGV[4],\n"
"  'created_at', created, 'updated_at', ARGV[1])\n"
"redis.call('EXPIRE', KEYS[2], ARGV[5])\n"
"if n > 0 then redis.call('EXPIRE', KEYS[3], ARGV[5]) end\n"
"return sub\n";

static void
submit_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct bstate *b = c->ext;
	redisReply *reply = r;

	(void)ac;
	if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0)
		call_json(c, 202, json_pack("{s:s, s:I, s:I, s:O}", "id", b->id,
		    "total", (json_int_t)b->total, "submitted",
		    (json_int_t)reply->integer, "malformed", b->malformed));
	else if (reply && reply->type == REDIS_REPLY_INTEGER)
		call_error(c, 409, "batch_exists", "a sandq batch run has this id");
	else
		call_error(c, 503, "unavailable", reply && reply->type ==
		    REDIS_REPLY_ERROR ? "Redis refused the batch" : "Redis did not answer");
	call_unref(c);
}

/* why, made ASCII: a tenant's bytes cut at any length stay valid JSON text. */
static void
why_ascii(char *why)
{
	for (; *why; why++)
		if ((unsigned char)*why >= 0x80 || (unsigned char)*why < 0x20)
			*why = '?';
}

/* One line's case: parsed, packed, its expect kept; or counted malformed. */
static void
submit_line(struct bstate *b, uint32_t line, const char *p, size_t n)
{
	char cid[CASE_ID_LEN + 1], why[512];
	struct batch_expect ex;
	struct bcase *bc;
	json_t *job, *o, *e, *m;

	snprintf(cid, sizeof(cid), "batch:%s:%u", b->id, line);
	if (batchcase_parse(p, n, cid, NULL, &job, &ex, why, sizeof(why)) < 0) {
		why_ascii(why);
		b->nmalformed++;
		if (json_array_size(b->malformed) < GW_BATCH_MALFORMED_MAX)
			json_array_append_new(b->malformed, json_pack("{s:I, s:s}",
			    "line", (json_int_t)line, "error", why));
		return;
	}
	batchcase_expect_free(&ex);
	bc = bstate_add(b, line);
	batchcase_pack(job, &bc->job, &bc->joblen);
	json_decref(job);
	/* The line is known good JSON: read again for its expect fields only. */
	o = json_loadb(p, n, 0, NULL);
	e = json_object_get(o, "expect");
	m = json_object_get(o, "expect_mode");
	job = json_object();
	if (e != NULL)
		json_object_set(job, "expect", e);
	if (m != NULL)
		json_object_set(job, "expect_mode", m);
	bc->expect = json_dumps(job, JSON_COMPACT);
	if (bc->expect == NULL)
		bc->expect = xstrdup("{}");	/* no memory: judged as no expect */
	json_decref(job);
	json_decref(o);
}

/* The first 16 hex digits of the body's SHA-256: the CLI's derived id. */
static void
body_id(const char *p, size_t n, char *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* POST /v1/batches, authenticated: the lines into cases, one script run. */
static void
submit(struct call *c)
{
	struct bstate *b = c->ext;
	h2o_req_t *req = c->req;
	const char *p = req->entity.base;
	size_t len = req->entity.len, pos = 0, nargs, k;
	uint32_t line = 0;
	char *mal = NULL, now[24], total[24], nmal[24], ttl[24];
	char (*keys)[KEY_MAX] = NULL, (*lines)[12] = NULL;
	const char **argv = NULL;
	size_t *lens = NULL;

	if (p == NULL || len == 0) {
		call_error(c, 400, "bad_request", "the body is empty: one case per line");
		return;
	}
	if (len > gw.max_batch_body) {
		call_error(c, 413, "body_too_large", "the body is larger than "
		    "--max-batch-body");
		return;
	}
	if (b->id[0] == '\0')
		body_id(p, len, b->id);
	b->malformed = json_array();
	while (pos < len) {
		const char *nl = memchr(p + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - p) : len, i;

		line++;
		for (i = pos; i < end; i++)
			if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
				break;
		if (i < end) {
			if (++b->total > GW_BATCH_CASES_MAX) {
				call_error(c, 413, "too_many_cases", "a batch holds at most "
				    "10000 cases");
				return;
			}
			submit_line(b, line, p + pos, end - pos);
		}
		pos = end + 1;
	}
	if (b->total == 0) {
		call_error(c, 400, "bad_request", "the body has no case");
		return;
	}
	nargs = 1 + 1 + 1 + 3 + b->n + 5 + 3 * b->n;
	keys = xcalloc(3 + b->n, sizeof(*keys));
	argv = xcalloc(nargs, sizeof(*argv));
	lens = xcalloc(nargs, sizeof(*lens));
	if (key_jobs(keys[0], gw.prefix, c->tenant) < 0 ||
	    key_batch(keys[1], gw.prefix, c->tenant, b->id) < 0 ||
	    key_bcases(keys[2], gw.prefix, c->tenant, b->id) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		goto out;
	}
	for (size_t i = 0; i < b->n; i++) {
		char cid[CASE_ID_LEN + 1];

		snprintf(cid, sizeof(cid), "batch:%s:%u", b->id, b->cases[i].line);
		if (key_res(keys[3 + i], gw.prefix, c->tenant, cid) < 0) {
			call_error(c, 500, "internal", "the prefix is too long");
			goto out;
		}
	}
	mal = json_dumps(b->malformed, JSON_COMPACT);
	snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms());
	snprintf(total, sizeof(total), "%zu", b->total);
	snprintf(nmal, sizeof(nmal), "%zu", b->nmalformed);
	snprintf(ttl, sizeof(ttl), "%d", GW_BATCH_TTL_S);
	k = 0;
	argv[k++] = "EVAL";
	argv[k++] = submit_lua;
	argv[k++] = NULL;	/* numkeys, below */
	for (size_t i = 0; i < 3 + b->n; i++)
		argv[k++] = keys[i];
	argv[k++] = now;
	argv[k++] = total;
	argv[k++] = nmal;
	argv[k++] = mal;
	argv[k++] = ttl;
	lines = xcalloc(b->n + 1, sizeof(*lines));
	for (size_t i = 0; i < b->n; i++) {
		snprintf(lines[i], sizeof(lines[i]), "%u", b->cases[i].line);
		argv[k++] = lines[i];
		argv[k] = b->cases[i].job;
		lens[k++] = b->cases[i].joblen;
		argv[k++] = b->cases[i].expect;
	}
	{
		char nk[24];

		snprintf(nk, sizeof(nk), "%zu", 3 + b->n);
		argv[2] = nk;
		for (size_t i = 0; i < nargs; i++)
			if (lens[i] == 0)
				lens[i] = strlen(argv[i]);
		call_redis(c, submit_cb, (int)nargs, argv, lens);	/* copied */
	}
out:
	free(lines);
	free(mal);
	free(keys);
	free(argv);
	free(lens);
}

/*** Reading ***/

static void read_chunk(struct call *c);
static void cancel_all(struct call *c);

static int
case_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct bcase *)a)->line, y = ((const struct bcase *)b)->line;

	return x < y ? -1 : x > y;
}

/* The batch's hash, then its case list: both read in one pipeline. */
static void
hash_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct bstate *b = c->ext;
	redisReply *reply = r;

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		b->failed = true;
		goto out;
	}
	b->hash = json_object();
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		redisReply *k = reply->element[i], *v = reply->element[i + 1];

		if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING)
			json_object_set_new(b->hash, k->str, json_stringn(v->str, v->len));
	}
out:
	call_unref(c);
}

static void
cases_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct bstate *b = c->ext;
	redisReply *reply = r;
	const char *src;

	(void)ac;
	if (c->req == NULL)
		goto out;
	if (b->failed || reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer");
		goto out;
	}
	src = json_string_value(json_object_get(b->hash, "source"));
	if (src == NULL || strcmp(src, "gateway") != 0) {
		call_error(c, 404, "not_found", "no batch submitted through the "
		    "gateway has this id");
		goto out;
	}
	for (size_t i = 0; i + 1 < reply->elements && b->n < GW_BATCH_CASES_MAX;
	    i += 2) {
		redisReply *k = reply->element[i], *v = reply->element[i + 1];
		unsigned long line;
		struct bcase *bc;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
		    !parse_num(k->str, 1, UINT32_MAX, &line))
			continue;
		bc = bstate_add(b, (uint32_t)line);
		bc->expect = xmemdup0(v->str, v->len);
	}
	qsort(b->cases, b->n, sizeof(*b->cases), case_cmp);
	b->by_status = json_object();
	b->results = json_array();
	b->end = b->n;
	if (b->op == B_RESULTS) {
		while (b->next < b->n && b->cases[b->next].line < b->from)
			b->next++;
		if (b->end > b->next + b->limit)
			b->end = b->next + b->limit;
	}
	if (b->op == B_CANCEL)
		cancel_all(c);
	else
		read_chunk(c);
out:
	call_unref(c);
}

/* GET /v1/batches/B[/results] and POST .../cancel: the batch first. */
static void
read_start(struct call *c)
{
	struct bstate *b = c->ext;
	char hk[KEY_MAX], ck[KEY_MAX];
	const char *argv[2];
	size_t lens[2];

	if (key_batch(hk, gw.prefix, c->tenant, b->id) < 0 ||
	    key_bcases(ck, gw.prefix, c->tenant, b->id) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	argv[0] = "HGETALL";
	argv[1] = hk;
	lens[0] = 7;
	lens[1] = strlen(hk);
	if (!call_redis(c, hash_cb, 2, argv, lens))
		return;
	argv[1] = ck;
	lens[1] = strlen(ck);
	call_redis(c, cases_cb, 2, argv, lens);
}

/*
 * Judges case bc's result res as `sandq batch` does: 1 passed, 0 failed,
 * -1 no expect (or an expect that no longer parses).
 */
static int
judge(const struct bcase *bc, const struct result *res)
{
	struct batch_expect ex;
	json_t *job;
	char why[256];
	int pass = -1;

	if (bc->expect == NULL || batchcase_parse(bc->expect, strlen(bc->expect), "x",
	    NULL, &job, &ex, why, sizeof(why)) < 0)
		return -1;
	json_decref(job);
	if (ex.mode != EXPECT_NONE)
		pass = res->status == ST_OK &&
		    batchcase_expect_match(&ex, res->out, res->out_len);
	batchcase_expect_free(&ex);
	return pass;
}

static json_int_t
hash_int(const json_t *h, const char *k)
{
	const char *s = json_string_value(json_object_get(h, k));

	return s ? strtoll(s, NULL, 10) : 0;
}

/* The progress, as GET /v1/batches/B answers it. */
static json_t *
progress_json(struct bstate *b)
{
	json_int_t mal = hash_int(b->hash, "malformed");
	const char *st = json_string_value(json_object_get(b->hash, "state"));
	json_t *ml = json_loads(json_string_value(json_object_get(b->hash,
	    "malformed_lines")) ? json_string_value(json_object_get(b->hash,
	    "malformed_lines")) : "[]", 0, NULL);

	if (mal > 0)
		json_object_set_new(b->by_status, "malformed", json_integer(mal));
	if (b->done == b->n)
		st = "finished";
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:O, "
	    "s:o, s:I}", "id", b->id, "state", st ? st : "submitted",
	    "total", hash_int(b->hash, "total"),
	    "done", (json_int_t)b->done + mal, "passed", (json_int_t)b->passed,
	    "failed", (json_int_t)b->failed_n, "no_expect", (json_int_t)b->no_expect,
	    "not_ok", (json_int_t)b->not_ok, "malformed", mal,
	    "pending", (json_int_t)(b->n - b->done),
	    "by_status", b->by_status, "malformed_lines", ml ? ml : json_array(),
	    "created_at", hash_int(b->hash, "created_at"));
}

/* One MGET's answers: counted (status) or listed (results). */
static void
chunk_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct bstate *b = c->ext;
	redisReply *reply = r;
	size_t from = b->next;

	(void)ac;
	if (c->req == NULL)
		goto out;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer");
		goto out;
	}
	for (size_t i = 0; i < reply->elements && from + i < b->end; i++) {
		const struct bcase *bc = &b->cases[from + i];
		redisReply *v = reply->element[i];
		struct result *res = NULL;
		struct err e = { 0 };
		const char *sn;
		json_t *n;
		int pass;

		if (v->type != REDIS_REPLY_STRING)
			continue;
		if (payload_result_decode(v->str, v->len, &res, &e) < 0) {
			log_warnx("batch '%s' line %u: its result does not decode: %s",
			    b->id, bc->line, e.msg);
			continue;
		}
		pass = judge(bc, res);
		sn = res_status_name(res->status);
		b->done++;
		n = json_object_get(b->by_status, sn);
		json_object_set_new(b->by_status, sn,
		    json_integer(n ? json_integer_value(n) + 1 : 1));
		if (pass == 1)
			b->passed++;
		else if (pass == 0)
			b->failed_n++;
		else {
			b->no_expect++;
			if (res->status != ST_OK)
				b->not_ok++;
		}
		if (b->op == B_RESULTS) {
			json_t *o = json_pack("{s:I, s:o}", "case", (json_int_t)bc->line,
			    "result", jobjson_result(res));

			if (pass >= 0)
				json_object_set_new(o, "pass", json_boolean(pass));
			json_array_append_new(b->results, o);
		}
		result_free(res);
	}
	b->next = from + (reply->elements < b->end - from ? reply->elements :
	    b->end - from);
	read_chunk(c);
out:
	call_unref(c);
}

/* MGETs the next chunk of results, or answers once all are read. */
static void
read_chunk(struct call *c)
{
	struct bstate *b = c->ext;
	const char *argv[1 + BATCH_CHUNK];
	size_t lens[1 + BATCH_CHUNK], k = 1;
	char (*keys)[KEY_MAX];

	if (b->next >= b->end) {
		if (b->op == B_STATUS)
			call_json(c, 200, progress_json(b));
		else
			call_json(c, 200, json_pack("{s:s, s:O, s:o}", "id", b->id,
			    "results", b->results, "next", b->end < b->n ?
			    json_integer(b->cases[b->end].line) : json_null()));
		return;
	}
	keys = xcalloc(BATCH_CHUNK, sizeof(*keys));
	argv[0] = "MGET";
	lens[0] = 4;
	for (size_t i = b->next; i < b->end && k <= BATCH_CHUNK; i++, k++) {
		char cid[CASE_ID_LEN + 1];

		snprintf(cid, sizeof(cid), "batch:%s:%u", b->id, b->cases[i].line);
		key_res(keys[k - 1], gw.prefix, c->tenant, cid);
		argv[k] = keys[k - 1];
		lens[k] = strlen(keys[k - 1]);
	}
	call_redis(c, chunk_cb, (int)k, argv, lens);
	free(keys);
}

/*** Cancel ***/

static void
cancel_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct bstate *b = c->ext;
	char host[128];

	(void)ac;
	switch (queue_cancel_outcome(r, true, host, sizeof(host))) {
	case QCANCEL_CANCELLED:
		b->cancelled++;
		break;
	case QCANCEL_CANCELLING:
	case QCANCEL_HELD:
		b->running++;
		break;
	case QCANCEL_FINISHED:
	case QCANCEL_UNKNOWN:
		b->finished++;
		break;
	default:
		b->failed = true;
		break;
	}
	if (--b->pending == 0) {
		if (b->failed)
			call_error(c, 503, "unavailable", "Redis did not run the cancel "
			    "script for every case");
		else
			call_json(c, 202, json_pack("{s:s, s:I, s:I, s:I}", "id", b->id,
			    "cancelled", (json_int_t)b->cancelled, "running",
			    (json_int_t)b->running, "finished", (json_int_t)b->finished));
	}
	call_unref(c);
}

/*
 * POST /v1/batches/B/cancel: each case no host has read is removed and
 * answered `cancelled` (queue/cancel.c, queued_only); the batch's state
 * becomes "cancelled". Cases a host holds run to their end.
 */
static void
cancel_all(struct call *c)
{
	struct bstate *b = c->ext;
	char hk[KEY_MAX];
	const char *argv[4];
	size_t lens[4];

	if (b->n == 0) {
		call_json(c, 202, json_pack("{s:s, s:i, s:i, s:i}", "id", b->id,
		    "cancelled", 0, "running", 0, "finished", 0));
		return;
	}
	if (key_batch(hk, gw.prefix, c->tenant, b->id) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	argv[0] = "HSET";
	argv[1] = hk;
	argv[2] = "state";
	argv[3] = "cancelled";
	for (int i = 0; i < 4; i++)
		lens[i] = strlen(argv[i]);
	/* The state first, unanswered: the scripts' replies answer the call. */
	if (gw.rc != NULL)
		redisAsyncCommandArgv(gw.rc, NULL, NULL, 4, argv, lens);
	for (size_t i = 0; i < b->n; i++) {
		struct queue_cancel_args a;
		struct err e = { 0 };
		char cid[CASE_ID_LEN + 1];

		snprintf(cid, sizeof(cid), "batch:%s:%u", b->id, b->cases[i].line);
		if (queue_cancel_args(&a, gw.prefix, c->tenant, cid, "the gateway",
		    true, &e) < 0) {
			b->failed = true;
			break;
		}
		if (call_redis(c, cancel_cb, QUEUE_CANCEL_ARGC, a.argv, a.lens))
			b->pending++;
		else
			b->failed = true;
		queue_cancel_args_free(&a);
		if (b->failed)
			break;
	}
	if (b->pending == 0)
		call_error(c, 503, "unavailable", "Redis did not answer");
}
