/*
 * server.c - sandq-gateway's loop: libh2o's HTTP server and hiredis's
 * async client on one libuv loop, and the routes of docs/gateway.md.
 *
 * DESIGN: libh2o (Debian's libh2o-dev is built on libuv) reads each
 * request, its body buffered and bounded by --max-body, and calls
 * on_req(). A request becomes a reference-counted struct call (call.c)
 * that outlives it when the client goes away. GET /v1/jobs/ID/events and
 * POST /v1/jobs/ID/cancel continue in stream.c once authenticated, POST
 * /v1/mcp in mcp.c (its tool's job XADDed and polled here). Every
 * /v1 route first looks up the token (HGET PREFIX:tokens SHA256), and
 * only then reads the body, so an unauthenticated client learns nothing
 * but 401.
 *
 * Long polls (GET /v1/jobs/ID?wait=S, POST /v1/jobs?wait=S and the waits
 * of the sandbox and MCP routes) are woken when the result is published
 * (wake.c) and GET it on the shared connection; a GET every --poll-ms
 * (default 250) is the fallback, and while no subscriber listens the
 * GETs back off from 1 ms (doubling) to --poll-ms, so a short job's
 * result is still seen within about its run time. A BLPOP of the done
 * list would need a Redis connection per waiter and would take the list's
 * single element from a libsandq client waiting on the same job.
 *
 * Redis is reached once, through one connection; when it drops, requests
 * answer 503 "unavailable" and a timer reconnects every 500 ms.
 *
 * Sections: Redis, routes, start-up.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <uv.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../proto/url.h"
#include "../queue/token.h"
#include "gateway.h"
#include "internal.h"
#include "jobjson.h"

#define GW_POLL_FIRST_MS 1	/* a long poll's first wait, unwoken; doubles to --poll-ms */



/*** Redis ***/

static void redis_connect(void);

static void
reconnect_cb(uv_timer_t *t)
{
	(void)t;
	redis_connect();
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
	if (status != REDIS_OK) {
		if (!gw.down_logged)
			log_warnx("redis: cannot connect: %s (retrying every 500 ms)",
			    ac->errstr);
		gw.down_logged = true;
		gw.rc = NULL;
		uv_timer_start(&gw.reconnect, reconnect_cb, 500, 0);
		return;
	}
	gw.down_logged = false;
	log_info("redis: connected");
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
	(void)status;
	log_warnx("redis: disconnected: %s", ac->errstr);
	gw.rc = NULL;
	uv_timer_start(&gw.reconnect, reconnect_cb, 500, 0);
}

/* Opens the connection; commands queued before it is up wait in hiredis. */
static void
redis_connect(void)
{
	const char *why = NULL;
	redisAsyncContext *ac = gw_redis_open("redis", on_connect, on_disconnect, true,
	    &why);

	if (ac == NULL) {
		if (!gw.down_logged)
			log_warnx("redis: cannot connect: %s (retrying every 500 ms)", why);
		gw.down_logged = true;
		uv_timer_start(&gw.reconnect, reconnect_cb, 500, 0);
		return;
	}
	gw.rc = ac;
}

/*** Routes ***/

static void route_submit(struct call *c);
static void submit_wait(struct call *c);
static void authenticate(struct call *c);
static void poll_result(struct call *c);
static void poll_timer_cb(uv_timer_t *t);
static void route_tenant(struct call *c);

/* GET /readyz: PING answered. */
static void
ready_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;

	(void)ac;
	if (reply && reply->type == REDIS_REPLY_STATUS)
		call_json(c, 200, json_pack("{s:b}", "ok", 1));
	else
		call_error(c, 503, "unavailable", "Redis does not answer PING");
	call_unref(c);
}

/* The token's record is known: the call acts as its tenant (or the admin). */
static void
token_accept(struct call *c, const struct token_record *rec)
{
	if (rec->admin || rec->tenant[0] == '\0') {
		if (c->route == R_ADMIN)
			admin_answer(c);
		else if (!admin_as_tenant(c, route_tenant))
			call_error(c, 403, "admin_token", "an admin token names no "
			    "tenant: name one with X-Sandq-Tenant, or use a tenant token");
		return;
	}
	if (c->route == R_ADMIN) {
		call_error(c, 403, "not_admin", "the operator's views take an admin token");
		return;
	}
	snprintf(c->tenant, sizeof(c->tenant), "%s", rec->tenant);
	route_tenant(c);
}

/* The token's record arrived from Redis: kept a moment, then accepted. */
static void
token_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;
	struct token_record rec;
	struct err e = { 0 };

	(void)ac;
	if (c->req == NULL)
		goto out;
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		call_error(c, 503, "unavailable", "Redis did not answer the token lookup");
		goto out;
	}
	if (reply->type != REDIS_REPLY_STRING) {
		call_error(c, 401, "unauthorized", "unknown token");
		goto out;
	}
	if (token_record_decode(reply->str, reply->len, &rec, &e) < 0) {
		log_warnx("a token's record is damaged: %s", e.msg);
		call_error(c, 401, "unauthorized", "unknown token");
		goto out;
	}
	tokcache_put(c->tokhash, &rec, uv_now(gw.loop));
	token_accept(c, &rec);
	explicit_bzero(&rec, sizeof(rec));
out:
	call_unref(c);
}

/* Continues an authenticated call as c->tenant's. */
static void
route_tenant(struct call *c)
{
	if (c->route == R_SUBMIT)
		route_submit(c);
	else if (c->route == R_EVENTS)
		stream_events(c);
	else if (c->route == R_CANCEL)
		stream_cancel(c);
	else if (c->route == R_SBX)
		submit_wait(c);
	else if (c->route == R_MCP) {
		if (mcp_start(c))	/* false: answered already */
			submit_wait(c);
	} else if (c->route == R_BATCH)
		batch_authed(c);
	else
		poll_result(c);
}

/*
 * Checks the Authorization header's shape and looks the token up (in the
 * cache of tokcache.c, else in Redis); the route continues in
 * token_accept(). The token's hash is what travels.
 */
static void
authenticate(struct call *c)
{
	h2o_req_t *req = c->req;
	ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
	char hash[TOKEN_HASH_HEX + 1], key[KEY_MAX];
	struct token_record rec;
	const char *argv[3];
	size_t lens[3];
	h2o_iovec_t v;

	if (i < 0 && c->route == R_EVENTS && stream_ws_handshake(req) == 1 &&
	    stream_ws_bearer(req, &v)) {
		/* a browser's WebSocket: the token as a subprotocol (stream.c) */
		if (!token_shape_ok(v.base, v.len)) {
			call_error(c, 401, "unauthorized", "the bearer.TOKEN subprotocol "
			    "is not 'bearer.sqt_...'");
			return;
		}
	} else if (i < 0) {
		call_error(c, 401, "unauthorized", "no Authorization: Bearer header");
		return;
	} else {
		v = req->headers.entries[i].value;
		if (v.len < 7 || strncasecmp(v.base, "Bearer ", 7) != 0 ||
		    !token_shape_ok(v.base + 7, v.len - 7)) {
			call_error(c, 401, "unauthorized", "the Authorization header "
			    "is not 'Bearer sqt_...'");
			return;
		}
		v = h2o_iovec_init(v.base + 7, v.len - 7);
	}
	token_hash_hex(v.base, v.len, hash);
	if (tokcache_get(hash, uv_now(gw.loop), &rec)) {
		token_accept(c, &rec);
		explicit_bzero(&rec, sizeof(rec));
		return;
	}
	memcpy(c->tokhash, hash, sizeof(c->tokhash));
	if (token_key(key, sizeof(key), gw.prefix) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	argv[0] = "HGET";
	argv[1] = key;
	argv[2] = hash;
	lens[0] = 4;
	lens[1] = strlen(key);
	lens[2] = TOKEN_HASH_HEX;
	call_redis(c, token_cb, 3, argv, lens);
}

/*
 * A long poll's waits between GETs: while published results wake it
 * (wake.c), the fallback alone, every --poll-ms; otherwise from 1 ms
 * doubling to --poll-ms, so that a short job is still seen soon.
 */
static uint64_t
first_delay(void)
{
	return wake_ready() ? gw.poll_ms : GW_POLL_FIRST_MS;
}

static uint64_t
next_delay(uint64_t d)
{
	if (wake_ready() || d * 2 > gw.poll_ms)
		return gw.poll_ms;
	return d * 2;
}

/*
 * Starts c's poll timer (a reference taken) for its next GET: after
 * c->delay, but not past its deadline, which it answers on time.
 */
static void
arm(struct call *c)
{
	uint64_t now = uv_now(gw.loop), d = c->delay;

	if (c->deadline > now && c->deadline - now < d)
		d = c->deadline - now;
	uv_timer_start(&c->timer, poll_timer_cb, d, 0);
	c->refs++;
	c->delay = next_delay(c->delay);
}

static void
xadd_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;

	(void)ac;
	if (reply == NULL || reply->type != REDIS_REPLY_STRING) {
		wake_forget(c);
		call_error(c, 503, "unavailable", reply && reply->type ==
		    REDIS_REPLY_ERROR ? "Redis refused the job" : "Redis did not answer");
	} else if (c->deadline == 0)
		call_json(c, 202, json_pack("{s:s}", "id", c->id));
	else if (c->woken) {
		/* Its result was published before this reply came: look now. */
		c->woken = false;
		poll_result(c);
	} else if (c->req != NULL) {
		/* Just queued: no result to GET yet; its publish wakes it. */
		c->delay = first_delay();
		arm(c);
	}
	call_unref(c);
}

/*
 * A waited submit (R_SBX, R_MCP, POST /v1/jobs?wait=S): its deadline set
 * and its wake registered before the XADD, so that no publish of its
 * result can come before it listens.
 */
static void
wait_before_xadd(struct call *c, uint64_t ms)
{
	c->deadline = uv_now(gw.loop) + ms;
	wake_watch(c, poll_result);
}

/* POST /v1/jobs, authenticated: the body as a job, XADDed as libsandq does. */
static void
route_submit(struct call *c)
{
	h2o_req_t *req = c->req;
	struct gw_fail f = { 0 };
	struct job *j = NULL;
	char *buf = NULL, key[KEY_MAX];
	size_t len = 0;
	const char *argv[5];
	size_t lens[5];

	if (req->entity.base == NULL || req->entity.len == 0) {
		call_error(c, 400, "bad_json", "the body is empty");
		return;
	}
	if (req->entity.len > gw.max_body) {
		call_error(c, 413, "body_too_large", "the body is larger than --max-body");
		return;
	}
	if (jobjson_job(req->entity.base, req->entity.len, &j, &f) < 0) {
		call_error(c, f.status, f.code, f.msg);
		return;
	}
	snprintf(c->id, sizeof(c->id), "%s", j->id);
	if (key_jobs(key, gw.prefix, c->tenant) < 0 ||
	    payload_job_encode(j, &buf, &len) < 0) {
		call_error(c, 500, "internal", "cannot encode the job");
		goto out;
	}
	argv[0] = "XADD";
	argv[1] = key;
	argv[2] = "*";
	argv[3] = "job";
	argv[4] = buf;
	lens[0] = 4;
	lens[1] = strlen(key);
	lens[2] = 1;
	lens[3] = 3;
	lens[4] = len;
	if (c->wait_ms > 0)
		wait_before_xadd(c, c->wait_ms);
	call_redis(c, xadd_cb, 5, argv, lens);	/* hiredis copies the bytes */
out:
	free(buf);
	job_free(j);
}

/* XADDs c->jobbuf (R_SBX, R_MCP) as the tenant's job c->id; xadd_cb() then waits. */
static void
submit_wait(struct call *c)
{
	char key[KEY_MAX];
	const char *argv[5];
	size_t lens[5];

	if (key_jobs(key, gw.prefix, c->tenant) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	argv[0] = "XADD";
	argv[1] = key;
	argv[2] = "*";
	argv[3] = "job";
	argv[4] = c->jobbuf;
	lens[0] = 4;
	lens[1] = strlen(key);
	lens[2] = 1;
	lens[3] = 3;
	lens[4] = c->joblen;
	wait_before_xadd(c, c->route == R_MCP ? c->wait_ms :
	    (uint64_t)GW_WAIT_MAX_S * 1000);
	call_redis(c, xadd_cb, 5, argv, lens);
}

static void
poll_timer_cb(uv_timer_t *t)
{
	struct call *c = t->data;

	poll_result(c);
	call_unref(c);	/* the timer's reference */
}

static void
result_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;
	struct result *res = NULL;
	struct err e = { 0 };

	(void)ac;
	if (c->req == NULL)
		goto done;
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		call_error(c, 503, "unavailable", "Redis did not answer");
		goto done;
	}
	if (reply->type == REDIS_REPLY_STRING) {
		if (payload_result_decode(reply->str, reply->len, &res, &e) < 0) {
			log_warnx("job '%s': its result does not decode: %s", c->id, e.msg);
			call_error(c, 502, "bad_result", "the job's result does not decode");
			goto done;
		}
		if (c->route == R_SBX)
			sandbox_answer(c, res);
		else if (c->route == R_MCP)
			mcp_answer(c, res);
		else
			call_json(c, 200, jobjson_result(res));
		result_free(res);
		goto done;
	}
	if (uv_now(gw.loop) >= c->deadline && c->route == R_MCP) {
		mcp_timeout(c);
		goto done;
	}
	if (uv_now(gw.loop) >= c->deadline && c->route == R_SBX) {
		call_json(c, 504, json_pack("{s:s, s:{s:s, s:s}}", "id", c->id, "error",
		    "code", "timeout", "message", "no result yet: GET /v1/jobs/ID "
		    "has it when it comes"));
		goto done;
	}
	if (uv_now(gw.loop) >= c->deadline && c->route == R_SUBMIT) {
		/* POST /v1/jobs?wait=S: queued, not done within S. */
		call_json(c, 202, json_pack("{s:s}", "id", c->id));
		goto done;
	}
	if (uv_now(gw.loop) >= c->deadline) {
		call_json(c, 404, json_pack("{s:{s:s, s:s}}", "error", "code",
		    "not_found", "message", "no result for this job id (yet)"));
		goto done;
	}
	if (c->woken) {
		/* Published while this GET was in flight: look again now. */
		c->woken = false;
		poll_result(c);
		goto out;
	}
	/* The timer is the fallback: a publish wakes it first (wake.c). */
	arm(c);
	goto out;
done:
	wake_forget(c);		/* answered, or its client gone */
out:
	call_unref(c);
}

/* GET PREFIX:{T}:res:ID once; result_cb() answers or waits again. */
static void
poll_result(struct call *c)
{
	char key[KEY_MAX];
	const char *argv[2];
	size_t lens[2];

	if (c->req == NULL)
		return;
	if (key_res(key, gw.prefix, c->tenant, c->id) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	/* A long poll listens for its result's publish from its first GET on. */
	if (uv_now(gw.loop) < c->deadline)
		wake_watch(c, poll_result);
	argv[0] = "GET";
	argv[1] = key;
	lens[0] = 3;
	lens[1] = strlen(key);
	call_redis(c, result_cb, 2, argv, lens);
}

/* ?wait=SECONDS of the query (a bare integer 0..GW_WAIT_MAX_S); -1 if bad. */
static int
query_wait(h2o_req_t *req)
{
	static const char *const names[] = { "wait" };
	h2o_iovec_t v;
	unsigned long w = 0;
	const char *why;

	if (!gw_query(req, names, 1, &v, &why) ||
	    (v.base != NULL && !gw_query_uint(v, 0, GW_WAIT_MAX_S, &w)))
		return -1;
	return (int)w;
}

static bool
path_is(h2o_req_t *req, const char *p)
{
	return h2o_memis(req->path_normalized.base, req->path_normalized.len, p,
	    strlen(p));
}

static bool
method_is(h2o_req_t *req, const char *m)
{
	return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

/*
 * /v1/jobs/ID/ACTION: GET events (Server-Sent Events of the job's live
 * output, or a WebSocket when asked) and POST cancel, both in stream.c
 * once authenticated.
 */
static int
on_job_action(h2o_req_t *req, const char *id, size_t idlen, const char *act,
    size_t actlen)
{
	struct call *c;
	bool events = h2o_memis(act, actlen, H2O_STRLIT("events"));

	if (!events && !h2o_memis(act, actlen, H2O_STRLIT("cancel"))) {
		send_error(req, 404, "not_found", "no such route");
		return 0;
	}
	if (!method_is(req, events ? "GET" : "POST")) {
		send_error(req, 405, "method_not_allowed", events ?
		    "GET /v1/jobs/ID/events" : "POST /v1/jobs/ID/cancel");
		return 0;
	}
	if (!payload_id_valid(id, idlen)) {
		send_error(req, 404, "not_found", "not a job id");
		return 0;
	}
	c = call_new(req);
	c->route = events ? R_EVENTS : R_CANCEL;
	memcpy(c->id, id, idlen);
	c->id[idlen] = '\0';
	if (events && stream_ws_handshake(req) < 0) {
		call_error(c, 400, "bad_query", "a malformed WebSocket handshake "
		    "(Sec-WebSocket-Key is not 24 characters)");
		return 0;
	}
	if (events && !stream_from(req, c->from, sizeof(c->from))) {
		call_error(c, 400, "bad_query", "the query takes only from=ENTRY_ID "
		    "(MS-SEQ), and Last-Event-ID must be one");
		return 0;
	}
	authenticate(c);
	return 0;
}

static int
on_req(h2o_handler_t *self, h2o_req_t *req)
{
	static const char jobs[] = "/v1/jobs/";
	h2o_iovec_t p = req->path_normalized;
	struct call *c;
	int wait;

	(void)self;
	if (path_is(req, "/healthz")) {
		if (!method_is(req, "GET"))
			send_error(req, 405, "method_not_allowed", "GET /healthz");
		else
			send_json(req, 200, json_pack("{s:b}", "ok", 1));
		return 0;
	}
	if (path_is(req, "/readyz")) {
		const char *argv[1] = { "PING" };
		size_t lens[1] = { 4 };

		if (!method_is(req, "GET")) {
			send_error(req, 405, "method_not_allowed", "GET /readyz");
			return 0;
		}
		c = call_new(req);
		call_redis(c, ready_cb, 1, argv, lens);
		return 0;
	}
	if (p.len >= 13 && memcmp(p.base, "/v1/sandboxes", 13) == 0 &&
	    (p.len == 13 || p.base[13] == '/')) {
		if ((c = sandbox_route(req)) != NULL)
			authenticate(c);
		return 0;
	}
	if (p.len >= 9 && memcmp(p.base, "/v1/admin", 9) == 0 &&
	    (p.len == 9 || p.base[9] == '/')) {
		if ((c = admin_route(req)) != NULL)
			authenticate(c);
		return 0;
	}
	if (path_is(req, "/v1/mcp")) {
		if ((c = mcp_route(req)) != NULL)
			authenticate(c);
		return 0;
	}
	if (p.len >= 11 && memcmp(p.base, "/v1/batches", 11) == 0 &&
	    (p.len == 11 || p.base[11] == '/')) {
		if ((c = batch_request(req)) != NULL)
			authenticate(c);
		return 0;
	}
	if (path_is(req, "/v1/jobs")) {
		if (!method_is(req, "POST")) {
			send_error(req, 405, "method_not_allowed", "POST /v1/jobs");
			return 0;
		}
		if ((wait = query_wait(req)) < 0) {
			send_error(req, 400, "bad_query", "the query takes only wait=SECONDS "
			    "(0 to 60)");
			return 0;
		}
		c = call_new(req);
		c->route = R_SUBMIT;
		c->wait_ms = (uint64_t)wait * 1000;
		authenticate(c);
		return 0;
	}
	if (p.len > sizeof(jobs) - 1 && memcmp(p.base, jobs, sizeof(jobs) - 1) == 0) {
		const char *id = p.base + sizeof(jobs) - 1;
		size_t idlen = p.len - (sizeof(jobs) - 1);
		const char *slash = memchr(id, '/', idlen);

		if (slash != NULL)
			return on_job_action(req, id, (size_t)(slash - id), slash + 1,
			    idlen - (size_t)(slash - id) - 1);
		if (!method_is(req, "GET")) {
			send_error(req, 405, "method_not_allowed", "GET /v1/jobs/ID");
			return 0;
		}
		if (!payload_id_valid(id, idlen)) {
			send_error(req, 404, "not_found", "not a job id");
			return 0;
		}
		if ((wait = query_wait(req)) < 0) {
			send_error(req, 400, "bad_query", "the query takes only wait=SECONDS "
			    "(0 to 60)");
			return 0;
		}
		c = call_new(req);
		c->route = R_GET;
		memcpy(c->id, id, idlen);
		c->id[idlen] = '\0';
		c->deadline = uv_now(gw.loop) + (uint64_t)wait * 1000;
		c->delay = first_delay();
		authenticate(c);
		return 0;
	}
	send_error(req, 404, "not_found", "no such route");
	return 0;
}

/*** Start-up ***/

/* h2o closed a client connection: one fewer open. */
static void
on_conn_close(uv_handle_t *h)
{
	gw.nconns--;
	free(h);
}

/*
 * A new client connection, or, with --max-connections open already, one
 * closed at once: accepting it (rather than leaving it in the backlog)
 * frees the kernel's queue, and the client sees a reset, not a hang. One
 * warning per burst: when the first is refused, and when one is served
 * again, with the count.
 */
static void
on_accept(uv_stream_t *listener, int status)
{
	uv_tcp_t *conn;
	h2o_socket_t *sock;

	if (status != 0)
		return;
	conn = xcalloc(1, sizeof(*conn));
	uv_tcp_init(listener->loop, conn);
	if (uv_accept(listener, (uv_stream_t *)conn) != 0) {
		uv_close((uv_handle_t *)conn, (uv_close_cb)free);
		return;
	}
	if (gw.nconns >= gw.max_conns) {
		if (gw.refused++ == 0)
			log_warnx("%zu connections open (--max-connections): closing new "
			    "ones at accept", gw.nconns);
		uv_close((uv_handle_t *)conn, (uv_close_cb)free);
		return;
	}
	if (gw.refused > 0) {
		log_warnx("serving new connections again; %zu were closed at accept",
		    gw.refused);
		gw.refused = 0;
	}
	gw.nconns++;
	sock = h2o_uv_socket_create((uv_stream_t *)conn, on_conn_close);
	h2o_accept(&gw.accept, sock);
}

/* "ADDR:PORT" or "[ADDR6]:PORT" into sa. */
static int
parse_listen(const char *s, struct sockaddr_storage *sa, struct err *e)
{
	char host[128];
	const char *colon = strrchr(s, ':');
	long port;
	char *end;
	size_t hl;

	if (colon == NULL)
		return err_set(e, -EINVAL, "--listen '%.64s': not ADDR:PORT", s);
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return err_set(e, -EINVAL, "--listen: no address before the port");
	memcpy(host, s, hl);
	host[hl] = '\0';
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < 0 || port > 65535 || end == colon + 1)
		return err_set(e, -EINVAL, "--listen: port '%.16s' is not 0..65535",
		    colon + 1);
	if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) == 0 ||
	    uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)sa) == 0)
		return 0;
	return err_set(e, -EINVAL, "--listen: '%.64s' is not an IP address", host);
}

int
gw_run(const struct gw_opts *o, struct err *e)
{
	struct sockaddr_storage sa;
	h2o_hostconf_t *host;
	h2o_pathconf_t *path;
	h2o_handler_t *h;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	memset(&sa, 0, sizeof(sa));
	if ((rc = parse_listen(o->listen, &sa, e)) < 0)
		return rc;
	if ((rc = redis_url_parse(o->redis, &gw.url, e)) < 0)
		return rc;
	if (strlen(o->prefix) >= sizeof(gw.prefix) || !key_tenant_valid(o->prefix))
		return err_set(e, -EINVAL, "--prefix: 1-64 of [A-Za-z0-9_-]");
	snprintf(gw.prefix, sizeof(gw.prefix), "%s", o->prefix);
	gw.max_body = o->max_body;
	gw.max_streams = o->max_streams;
	gw.poll_ms = o->poll_ms;
	gw.mcp_origins = o->mcp_origins;
	gw.max_conns = o->max_connections;
	gw.max_batch_body = o->max_batch_body;
	gw.loop = uv_default_loop();
	uv_timer_init(gw.loop, &gw.reconnect);

	h2o_config_init(&gw.config);
	/*
	 * h2o refuses bodies above this itself, with its own text 413; the
	 * gateway's JSON 413 answers anything above max_body up to it, so
	 * h2o's limit is set well past the gateway's.
	 */
	gw.config.max_request_entity_size = o->max_body * 2 + 65536;
	/* POST /v1/batches checks its own, larger bound the same way. */
	if (o->max_batch_body + 65536 > gw.config.max_request_entity_size)
		gw.config.max_request_entity_size = o->max_batch_body + 65536;
	host = h2o_config_register_host(&gw.config, h2o_iovec_init(H2O_STRLIT("default")),
	    65535);
	if ((rc = dashboard_register(host, o->dashboard, e)) < 0)
		return rc;
	path = h2o_config_register_path(host, "/", 0);
	h = h2o_create_handler(path, sizeof(*h));
	h->on_req = on_req;
	h2o_context_init(&gw.ctx, gw.loop, &gw.config);
	gw.accept.ctx = &gw.ctx;
	gw.accept.hosts = gw.config.hosts;

	uv_tcp_init(gw.loop, &gw.listener);
	if ((rc = uv_tcp_bind(&gw.listener, (struct sockaddr *)&sa, 0)) != 0 ||
	    (rc = uv_listen((uv_stream_t *)&gw.listener, 511, on_accept)) != 0)
		return err_set(e, rc, "--listen %.64s: %s", o->listen, uv_strerror(rc));
	redis_connect();
	stream_init();
	wake_init();
	log_info("listening on %s", o->listen);
	uv_run(gw.loop, UV_RUN_DEFAULT);
	return err_set(e, -EIO, "the loop stopped");
}
