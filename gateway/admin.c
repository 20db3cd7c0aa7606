/*
 * admin.c - what an admin token reaches (docs/gateway.md "Admin tokens"):
 * the operator's views under /v1/admin, and any tenant's routes when the
 * request names the tenant in an X-Sandq-Tenant header.
 *
 *   GET  /v1/admin/status                  hosts and tenants (queue/status.c)
 *   GET  /v1/admin/dead?tenant=T[&limit=N] dead letters, newest first
 *   POST /v1/admin/dead/T/DEAD_ID/retry    one dead letter submitted again
 *   GET  /v1/admin/audit?tenant=T[&limit=N][&before=ENTRY][&category=C]
 *                                          the tenant's audit stream, newest first
 *
 * DESIGN: the same computations as `sandq status`, `sandq dead` and
 * `sandq audit`, shared through queue/status.c, queue/dead.c and
 * audit/event.c, over the gateway's one async Redis connection: a view
 * that needs several commands sends them back to back (hiredis pipelines
 * them) and answers when the last reply is in. Nothing is kept between
 * requests. A tenant named by an admin must be known: in PREFIX:tenants
 * (`sandq tenant add`) or in a host's status (sandqd's config), so a typo
 * never becomes a stream no host reads.
 *
 * Sections: queries, status, dead letters, audit, acting as a tenant,
 * routing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "../audit/audit.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../queue/dead.h"
#include "../queue/status.h"
#include "../queue/tenant.h"
#include "internal.h"

#define ADMIN_LIMIT_DEFAULT 50		/* entries a list answers by default */
#define ADMIN_LIMIT_MAX 1000		/* at most, per request */

/* The view a /v1/admin request asks for. */
enum admin_view {
	AV_STATUS,
	AV_DEAD,
	AV_RETRY,
	AV_AUDIT,
};

/* A request's state while its replies come in (c->ext). */
struct admin {
	enum admin_view view;
	char tenant[TENANT_NAME_MAX + 1];
	char dead_id[STREAM_ID_MAX + 1];	/* retry: the letter; audit: before */
	char category[32];			/* audit: only this category */
	long limit;
	struct queue_status *qs;		/* status: the view being filled */
	size_t pending;				/* status: XLENs not answered yet */
};

static void
admin_free(void *p)
{
	struct admin *a = p;

	queue_status_free(a->qs);
	free(a);
}

/*** Queries ***/

/* True for "MS-SEQ": what XADD makes. */
static bool
entry_id_ok(const char *s, size_t n)
{
	size_t i = 0, d1 = 0, d2 = 0;

	while (i < n && s[i] >= '0' && s[i] <= '9' && d1 < 20)
		i++, d1++;
	if (d1 == 0 || i >= n || s[i++] != '-')
		return false;
	while (i < n && s[i] >= '0' && s[i] <= '9' && d2 < 20)
		i++, d2++;
	return d2 > 0 && i == n;
}

/*
 * Reads the query of req into a: the parameters of want among tenant,
 * limit, before and category (gw_query: each at most once, no other).
 * Values are plain (names, numbers, entry ids). False with msg set if bad.
 */
static bool
admin_query(h2o_req_t *req, struct admin *a, const char *const *want, size_t n,
    char *msg, size_t msglen)
{
	h2o_iovec_t v[4];
	const char *why;

	a->limit = ADMIN_LIMIT_DEFAULT;
	if (!gw_query(req, want, n, v, &why)) {
		size_t o = (size_t)snprintf(msg, msglen, "%s (this view takes %s", why,
		    n == 0 ? "none" : "");

		for (size_t i = 0; i < n && o < msglen; i++)
			o += (size_t)snprintf(msg + o, msglen - o, "%s%s", i ? ", " : "",
			    want[i]);
		if (o < msglen)
			snprintf(msg + o, msglen - o, ")");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned long lim;
		bool ok = true;

		if (v[i].base == NULL)
			continue;
		if (strcmp(want[i], "tenant") == 0) {
			ok = v[i].len > 0 && v[i].len <= TENANT_NAME_MAX;
			if (ok) {
				memcpy(a->tenant, v[i].base, v[i].len);
				a->tenant[v[i].len] = '\0';
				ok = key_tenant_valid(a->tenant);
			}
			if (!ok)
				snprintf(msg, msglen, "tenant: 1 to %d characters of "
				    "[A-Za-z0-9_-]", TENANT_NAME_MAX);
		} else if (strcmp(want[i], "limit") == 0) {
			ok = gw_query_uint(v[i], 1, ADMIN_LIMIT_MAX, &lim);
			if (ok)
				a->limit = (long)lim;
			else
				snprintf(msg, msglen, "limit: 1 to %d", ADMIN_LIMIT_MAX);
		} else if (strcmp(want[i], "before") == 0) {
			ok = entry_id_ok(v[i].base, v[i].len);
			if (ok) {
				memcpy(a->dead_id, v[i].base, v[i].len);
				a->dead_id[v[i].len] = '\0';
			} else
				snprintf(msg, msglen, "before: an entry id (MS-SEQ)");
		} else {
			ok = v[i].len > 0 && v[i].len < sizeof(a->category);
			for (size_t k = 0; ok && k < v[i].len; k++)
				ok = (v[i].base[k] >= 'a' && v[i].base[k] <= 'z') ||
				    v[i].base[k] == '_';
			if (ok) {
				memcpy(a->category, v[i].base, v[i].len);
				a->category[v[i].len] = '\0';
			} else
				snprintf(msg, msglen, "category: a category name "
				    "(docs/audit.md)");
		}
		if (!ok)
			return false;
	}
	if (n > 0 && strcmp(want[0], "tenant") == 0 && a->tenant[0] == '\0') {
		snprintf(msg, msglen, "this view needs tenant=NAME");
		return false;
	}
	return true;
}

/*** Status ***/

static void
xlen_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct admin *a = c->ext;
	redisReply *reply = r;
	size_t i = queue_status_count(a->qs) - a->pending;

	(void)ac;
	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER)
		queue_status_backlog(a->qs, i, reply->integer);
	if (--a->pending == 0)
		call_json(c, 200, queue_status_json(a->qs));
	call_unref(c);
}

static void
tenants_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct admin *a = c->ext;
	redisReply *reply = r;
	char key[KEY_MAX];

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer SMEMBERS");
		goto out;
	}
	queue_status_tenants(a->qs, reply);
	a->pending = queue_status_count(a->qs);
	if (a->pending == 0) {
		call_json(c, 200, queue_status_json(a->qs));
		goto out;
	}
	/* Back to back: replies come in order, so the i-th is tenant i's. */
	for (size_t i = 0; i < queue_status_count(a->qs); i++) {
		const char *argv[2] = { "XLEN", key };
		size_t lens[2];

		if (key_jobs(key, gw.prefix, queue_status_name(a->qs, i)) < 0)
			key[0] = '\0';
		lens[0] = 4;
		lens[1] = strlen(key);
		if (!call_redis(c, xlen_cb, 2, argv, lens))
			break;
	}
out:
	call_unref(c);
}

static void
hosts_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct admin *a = c->ext;
	redisReply *reply = r;
	char key[KEY_MAX];
	const char *argv[2] = { "SMEMBERS", key };
	size_t lens[2];

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer HGETALL");
		goto out;
	}
	queue_status_hosts(a->qs, reply);
	snprintf(key, sizeof(key), "%s:tenants", gw.prefix);
	lens[0] = 8;
	lens[1] = strlen(key);
	call_redis(c, tenants_cb, 2, argv, lens);
out:
	call_unref(c);
}

static void
view_status(struct call *c)
{
	struct admin *a = c->ext;
	char key[KEY_MAX];
	const char *argv[2] = { "HGETALL", key };
	size_t lens[2];

	a->qs = queue_status_new(now_ms());
	snprintf(key, sizeof(key), "%s:hosts", gw.prefix);
	lens[0] = 7;
	lens[1] = strlen(key);
	call_redis(c, hosts_cb, 2, argv, lens);
}

/*** Dead letters ***/

static void
dead_ls_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;
	json_t *arr;

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer XREVRANGE");
		goto out;
	}
	arr = json_array();
	for (size_t i = 0; i < reply->elements; i++) {
		struct queue_dead d;
		json_t *o;

		if (queue_dead_parse(reply->element[i], &d) &&
		    (o = queue_dead_json(&d)) != NULL)
			json_array_append_new(arr, o);
	}
	call_json(c, 200, json_pack("{s:o}", "dead", arr));
out:
	call_unref(c);
}

static void
view_dead(struct call *c)
{
	struct admin *a = c->ext;
	char key[KEY_MAX], count[24];
	const char *argv[6] = { "XREVRANGE", key, "+", "-", "COUNT", count };
	size_t lens[6];

	if (key_dead(key, gw.prefix, a->tenant) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	snprintf(count, sizeof(count), "%ld", a->limit);
	for (int i = 0; i < 6; i++)
		lens[i] = strlen(argv[i]);
	call_redis(c, dead_ls_cb, 6, argv, lens);
}

static void
retry_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct admin *a = c->ext;
	redisReply *reply = r;

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[1]->type != REDIS_REPLY_STRING)
		call_error(c, 503, "unavailable", "Redis did not run the retry");
	else if (reply->element[0]->integer != 1)
		call_error(c, strcmp(reply->element[1]->str, "gone") == 0 ? 404 : 409,
		    strcmp(reply->element[1]->str, "gone") == 0 ? "not_found" :
		    "not_retryable", strcmp(reply->element[1]->str, "gone") == 0 ?
		    "no such dead letter (retried or purged meanwhile)" :
		    "the dead letter holds no whole job");
	else
		call_json(c, 202, json_pack("{s:s, s:s, s:s}", "dead_id", a->dead_id,
		    "entry", reply->element[1]->str, "tenant", a->tenant));
	call_unref(c);
}

/* The dead letter is read: retry it if it can be (the script checks again). */
static void
retry_read_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct admin *a = c->ext;
	redisReply *reply = r;
	struct queue_dead d;
	char dead[KEY_MAX], jobs[KEY_MAX], res[KEY_MAX], done[KEY_MAX];
	char att[KEY_MAX], can[KEY_MAX];
	const char *argv[10];
	size_t lens[10];

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer XRANGE");
		goto out;
	}
	if (reply->elements != 1 || !queue_dead_parse(reply->element[0], &d)) {
		call_error(c, 404, "not_found", "no such dead letter");
		goto out;
	}
	if (!queue_dead_retryable(&d) || !payload_id_valid(d.id, strlen(d.id))) {
		call_error(c, 409, "not_retryable", d.id == NULL ?
		    "its entry had no readable job id" :
		    "its job was cut at 1 MiB when it was recorded");
		goto out;
	}
	if (key_dead(dead, gw.prefix, a->tenant) < 0 ||
	    key_jobs(jobs, gw.prefix, a->tenant) < 0 ||
	    key_res(res, gw.prefix, a->tenant, d.id) < 0 ||
	    key_done(done, gw.prefix, a->tenant, d.id) < 0 ||
	    key_attempts(att, gw.prefix, a->tenant, d.id) < 0 ||
	    key_cancel(can, gw.prefix, a->tenant, d.id) < 0) {
		call_error(c, 500, "internal", "a key is too long");
		goto out;
	}
	argv[0] = "EVAL";
	argv[1] = queue_dead_retry_lua;
	argv[2] = "6";
	argv[3] = dead;
	argv[4] = jobs;
	argv[5] = res;
	argv[6] = done;
	argv[7] = att;
	argv[8] = can;
	argv[9] = a->dead_id;
	for (int i = 0; i < 10; i++)
		lens[i] = strlen(argv[i]);
	call_redis(c, retry_cb, 10, argv, lens);
out:
	call_unref(c);
}

static void
view_retry(struct call *c)
{
	struct admin *a = c->ext;
	char key[KEY_MAX];
	const char *argv[4] = { "XRANGE", key, a->dead_id, a->dead_id };
	size_t lens[4];

	if (key_dead(key, gw.prefix, a->tenant) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	for (int i = 0; i < 4; i++)
		lens[i] = strlen(argv[i]);
	call_redis(c, retry_read_cb, 4, argv, lens);
}

/*** Audit ***/

/* One XRANGE entry as an event's JSON; an entry that fails the strict decode as {entry, error}. */
static json_t *
audit_entry_json(const redisReply *ent)
{
	const char *names[AUDIT_NFIELDS], *values[AUDIT_NFIELDS];
	size_t nlens[AUDIT_NFIELDS], vlens[AUDIT_NFIELDS], n;
	const redisReply *kv;
	struct audit_event ev;
	struct err e = { 0 };
	json_t *o;

	if (ent->type != REDIS_REPLY_ARRAY || ent->elements != 2 ||
	    ent->element[0]->type != REDIS_REPLY_STRING)
		return NULL;
	kv = ent->element[1];
	if (kv->type != REDIS_REPLY_ARRAY || kv->elements % 2 != 0 ||
	    kv->elements > 2 * AUDIT_NFIELDS) {
		err_set(&e, -EINVAL, "not field/value pairs of an event");
		goto bad;
	}
	n = kv->elements / 2;
	for (size_t i = 0; i < n; i++) {
		const redisReply *k = kv->element[2 * i], *v = kv->element[2 * i + 1];

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
			err_set(&e, -EINVAL, "a field or value is not a string");
			goto bad;
		}
		names[i] = k->str;
		nlens[i] = k->len;
		values[i] = v->str;
		vlens[i] = v->len;
	}
	if (audit_event_from_fields(&ev, n, names, nlens, values, vlens, &e) < 0)
		goto bad;
	if ((o = audit_event_to_json(&ev)) == NULL) {
		err_set(&e, -ENOMEM, "no memory");
		goto bad;
	}
	json_object_set_new(o, "entry", json_string(ent->element[0]->str));
	return o;
bad:
	/* The decoder's message names the field; what it quotes is escaped. */
	return json_pack("{s:s, s:s}", "entry", ent->element[0]->str, "error", e.msg);
}

static void
audit_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	struct admin *a = c->ext;
	redisReply *reply = r;
	json_t *arr, *o;

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		call_error(c, 503, "unavailable", "Redis did not answer XREVRANGE");
		goto out;
	}
	arr = json_array();
	for (size_t i = 0; i < reply->elements; i++) {
		const char *cat;

		if ((o = audit_entry_json(reply->element[i])) == NULL)
			continue;
		cat = json_string_value(json_object_get(o, "category"));
		if (a->category[0] && (cat == NULL || strcmp(cat, a->category) != 0)) {
			json_decref(o);
			continue;
		}
		json_array_append_new(arr, o);
	}
	/* "next": the before= of the next page, while this one was full. */
	call_json(c, 200, json_pack("{s:o, s:I, s:o}", "events", arr, "scanned",
	    (json_int_t)reply->elements, "next", (long)reply->elements == a->limit &&
	    reply->elements > 0 ? json_string(reply->element[reply->elements - 1]->
	    element[0]->str) : json_null()));
out:
	call_unref(c);
}

static void
view_audit(struct call *c)
{
	struct admin *a = c->ext;
	char key[KEY_MAX], count[24], end[STREAM_ID_MAX + 2];
	const char *argv[6] = { "XREVRANGE", key, end, "-", "COUNT", count };
	size_t lens[6];

	if (audit_stream_key(key, sizeof(key), gw.prefix, a->tenant) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	/* "(ID" is exclusive (Redis 6.2): the page starts after what was seen. */
	if (a->dead_id[0])
		snprintf(end, sizeof(end), "(%s", a->dead_id);
	else
		snprintf(end, sizeof(end), "+");
	snprintf(count, sizeof(count), "%ld", a->limit);
	for (int i = 0; i < 6; i++)
		lens[i] = strlen(argv[i]);
	call_redis(c, audit_cb, 6, argv, lens);
}

/*** Acting as a tenant ***/

/*
 * KEYS: PREFIX:tenants, PREFIX:hosts; ARGV: a tenant. 1 if the set has it
 * (sandq tenant add) or some host's status lists it (a tenant of sandqd's
 * config), else 0. A status that does not decode is skipped.
 */
static const char known_lua[] =
"if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end\n"
"for _, v in ipairs(redis.call('HVALS', KEYS[2])) do\n"
"  local ok, h = pcall(cjson.decode, v)\n"
"  if ok and type(h) == 'table' and type(h.tenants) == 'table' and\n"
"      h.tenants[ARGV[1]] ~= nil then return 1 end\n"
"end\n"
"return 0\n";

static void
known_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER)
		call_error(c, 503, "unavailable", "Redis did not answer the tenant lookup");
	else if (reply->integer != 1)
		call_error(c, 404, "unknown_tenant", "X-Sandq-Tenant names no tenant "
		    "of this Redis (sandq tenant add) or of its hosts");
	else if (c->req != NULL)
		c->cont(c);
	call_unref(c);
}

bool
admin_as_tenant(struct call *c, void (*cont)(struct call *c))
{
	static const h2o_iovec_t name = { H2O_STRLIT("x-sandq-tenant") };
	ssize_t i = h2o_find_header_by_str(&c->req->headers, name.base, name.len, -1);
	h2o_iovec_t v;
	char set[KEY_MAX], hosts[KEY_MAX];
	const char *argv[6];
	size_t lens[6];

	if (i < 0)
		return false;
	v = c->req->headers.entries[i].value;
	if (v.len > 0 && v.len <= TENANT_NAME_MAX) {
		memcpy(c->tenant, v.base, v.len);
		c->tenant[v.len] = '\0';
	}
	if (v.len == 0 || v.len > TENANT_NAME_MAX || !key_tenant_valid(c->tenant)) {
		c->tenant[0] = '\0';
		call_error(c, 400, "bad_tenant", "X-Sandq-Tenant: 1 to 64 characters "
		    "of [A-Za-z0-9_-]");
		return true;
	}
	c->cont = cont;
	snprintf(set, sizeof(set), "%s:tenants", gw.prefix);
	snprintf(hosts, sizeof(hosts), "%s:hosts", gw.prefix);
	argv[0] = "EVAL";
	argv[1] = known_lua;
	argv[2] = "2";
	argv[3] = set;
	argv[4] = hosts;
	argv[5] = c->tenant;
	for (int k = 0; k < 6; k++)
		lens[k] = strlen(argv[k]);
	call_redis(c, known_cb, 6, argv, lens);
	return true;
}

/*** Routing ***/

struct call *
admin_route(h2o_req_t *req)
{
	static const char dead[] = "/v1/admin/dead/";
	h2o_iovec_t p = req->path_normalized;
	struct admin *a = xcalloc(1, sizeof(*a));
	static const char *const q_dead[] = { "tenant", "limit" };
	static const char *const q_audit[] = { "tenant", "limit", "before", "category" };
	const char *const *want = NULL;
	size_t nwant = 0;
	const char *method = "GET", *usage = NULL;
	char msg[160];
	struct call *c;

	if (h2o_memis(p.base, p.len, H2O_STRLIT("/v1/admin/status"))) {
		a->view = AV_STATUS;
		usage = "GET /v1/admin/status";
	} else if (h2o_memis(p.base, p.len, H2O_STRLIT("/v1/admin/dead"))) {
		a->view = AV_DEAD;
		want = q_dead;
		nwant = 2;
		usage = "GET /v1/admin/dead?tenant=T";
	} else if (h2o_memis(p.base, p.len, H2O_STRLIT("/v1/admin/audit"))) {
		a->view = AV_AUDIT;
		want = q_audit;
		nwant = 4;
		usage = "GET /v1/admin/audit?tenant=T";
	} else if (p.len > sizeof(dead) - 1 && memcmp(p.base, dead, sizeof(dead) - 1) == 0) {
		/* dead/TENANT/DEAD_ID/retry */
		const char *s = p.base + sizeof(dead) - 1, *e = p.base + p.len;
		const char *s1 = memchr(s, '/', (size_t)(e - s)), *s2;

		s2 = s1 ? memchr(s1 + 1, '/', (size_t)(e - s1 - 1)) : NULL;
		if (s2 == NULL || !h2o_memis(s2 + 1, (size_t)(e - s2 - 1), H2O_STRLIT("retry")) ||
		    s1 - s == 0 || s1 - s > TENANT_NAME_MAX ||
		    !entry_id_ok(s1 + 1, (size_t)(s2 - s1 - 1))) {
			free(a);
			send_error(req, 404, "not_found", "no such route "
			    "(POST /v1/admin/dead/TENANT/DEAD_ID/retry)");
			return NULL;
		}
		memcpy(a->tenant, s, (size_t)(s1 - s));
		memcpy(a->dead_id, s1 + 1, (size_t)(s2 - s1 - 1));
		if (!key_tenant_valid(a->tenant)) {
			free(a);
			send_error(req, 404, "not_found", "not a tenant name");
			return NULL;
		}
		a->view = AV_RETRY;
		method = "POST";
		usage = "POST /v1/admin/dead/TENANT/DEAD_ID/retry";
	} else {
		free(a);
		send_error(req, 404, "not_found", "no such route");
		return NULL;
	}
	if (!h2o_memis(req->method.base, req->method.len, method, strlen(method))) {
		free(a);
		send_error(req, 405, "method_not_allowed", usage);
		return NULL;
	}
	if (a->view != AV_RETRY && !admin_query(req, a, want, nwant, msg, sizeof(msg))) {
		free(a);
		send_error(req, 400, "bad_query", msg);
		return NULL;
	}
	c = call_new(req);
	c->route = R_ADMIN;
	c->ext = a;
	c->ext_free = admin_free;
	return c;
}

void
admin_answer(struct call *c)
{
	struct admin *a = c->ext;

	switch (a->view) {
	case AV_STATUS:
		view_status(c);
		break;
	case AV_DEAD:
		view_dead(c);
		break;
	case AV_RETRY:
		view_retry(c);
		break;
	case AV_AUDIT:
		view_audit(c);
		break;
	}
}
