/*
 * call.c - the gateway's one instance and its requests' struct call
 * (internal.h): JSON responses, and calls that outlive their request.
 *
 * A request becomes a struct call that outlives it when the client goes
 * away: h2o frees the request's memory pool then, so the call is
 * reference-counted (one reference for the request, one per Redis command
 * or timer in flight) and a Redis reply that comes back for a request
 * already gone is dropped. Shared by server.c (routes) and stream.c
 * (events, cancel).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "../queue/uvredis.h"
#include "internal.h"
#include "jobjson.h"

struct gw gw;

/*** Responses ***/

static const char *
reason_of(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 429: return "Too Many Requests";
	case 504: return "Gateway Timeout";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	default: return "Internal Server Error";
	}
}

/* Sends o (taken) as the JSON body of status. */
void
send_json(h2o_req_t *req, int status, json_t *o)
{
	char *text = json_dumps(o, JSON_COMPACT);
	size_t len;

	json_decref(o);
	if (text == NULL)
		text = xstrdup("{\"error\":{\"code\":\"internal\",\"message\":\"\"}}");
	len = strlen(text);
	req->res.status = status;
	req->res.reason = reason_of(status);
	req->res.content_length = len;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
	    H2O_STRLIT("application/json"));
	if (status == 401)
		h2o_add_header(&req->pool, &req->res.headers,
		    H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer"));
	h2o_send_inline(req, text, len);	/* copies text into the pool */
	free(text);
}

void
send_error(h2o_req_t *req, int status, const char *code, const char *msg)
{
	send_json(req, status, jobjson_error(code, msg));
}

/*** Calls ***/

static void
call_free_cb(uv_handle_t *h)
{
	struct call *c = h->data;

	if (c->ext_free != NULL)
		c->ext_free(c->ext);
	free(c->jobbuf);
	json_decref(c->mcp_id);
	free(c);
}

void
call_unref(struct call *c)
{
	if (--c->refs > 0)
		return;
	uv_close((uv_handle_t *)&c->timer, call_free_cb);
}

/* h2o frees the request: the call forgets it and stops any poll. */
static void
call_dispose(void *p)
{
	struct call *c = *(struct call **)p;

	c->req = NULL;
	if (uv_is_active((uv_handle_t *)&c->timer)) {
		uv_timer_stop(&c->timer);
		call_unref(c);
	}
	call_unref(c);
}

struct call *
call_new(h2o_req_t *req)
{
	struct call *c = xcalloc(1, sizeof(*c));
	struct call **slot;

	c->gw = &gw;
	c->req = req;
	c->refs = 1;
	uv_timer_init(gw.loop, &c->timer);
	c->timer.data = c;
	slot = h2o_mem_alloc_shared(&req->pool, sizeof(*slot), call_dispose);
	*slot = c;
	return c;
}

/* Answers the call once, if its client is still there. */
void
call_json(struct call *c, int status, json_t *o)
{
	if (c->req == NULL || c->answered) {
		json_decref(o);
		return;
	}
	c->answered = true;
	send_json(c->req, status, o);
}

void
call_bytes(struct call *c, int status, const char *ctype, const void *p, size_t n)
{
	h2o_req_t *req = c->req;

	if (req == NULL || c->answered)
		return;
	c->answered = true;
	req->res.status = status;
	req->res.reason = reason_of(status);
	req->res.content_length = n;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
	    ctype, strlen(ctype));
	h2o_send_inline(req, p, n);	/* copies the bytes into the pool */
}

void
call_error(struct call *c, int status, const char *code, const char *msg)
{
	call_json(c, status, jobjson_error(code, msg));
}

/*
 * Sends argv for c; cb gets c back. Takes a reference for the reply (hiredis
 * calls cb with a NULL reply when the connection drops). Returns false,
 * having answered 503, when Redis is not connected.
 */
bool
call_redis(struct call *c, redisCallbackFn *cb, int argc, const char **argv,
    const size_t *lens)
{
	if (gw.rc == NULL || redisAsyncCommandArgv(gw.rc, cb, c, argc, argv,
	    lens) != REDIS_OK) {
		call_error(c, 503, "unavailable", "the gateway cannot reach Redis");
		return false;
	}
	c->refs++;
	return true;
}

/*** Queries ***/

bool
gw_query(h2o_req_t *req, const char *const *names, size_t n, h2o_iovec_t *vals,
    const char **why)
{
	const char *q, *end;

	for (size_t i = 0; i < n; i++)
		vals[i] = h2o_iovec_init(NULL, 0);
	if (req->query_at == SIZE_MAX)
		return true;
	q = req->path.base + req->query_at + 1;
	end = req->path.base + req->path.len;
	while (q < end) {
		const char *amp = memchr(q, '&', (size_t)(end - q));
		const char *stop = amp ? amp : end;
		const char *eq = memchr(q, '=', (size_t)(stop - q));
		size_t i;

		if (eq == NULL) {
			*why = "a query parameter without '='";
			return false;
		}
		for (i = 0; i < n; i++)
			if (h2o_memis(q, (size_t)(eq - q), names[i], strlen(names[i])))
				break;
		if (i == n) {
			*why = "a query parameter this route does not take";
			return false;
		}
		if (vals[i].base != NULL) {
			*why = "a query parameter given twice";
			return false;
		}
		vals[i] = h2o_iovec_init(eq + 1, (size_t)(stop - eq - 1));
		q = amp ? amp + 1 : end;
	}
	return true;
}

bool
gw_query_uint(h2o_iovec_t v, unsigned long lo, unsigned long hi, unsigned long *out)
{
	unsigned long x = 0;

	if (v.len == 0 || v.len > 20)
		return false;
	for (size_t i = 0; i < v.len; i++) {
		if (v.base[i] < '0' || v.base[i] > '9' || x > hi)
			return false;
		x = x * 10 + (unsigned long)(v.base[i] - '0');
	}
	if (x < lo || x > hi)
		return false;
	*out = x;
	return true;
}

/*** Connections ***/

/* AUTH or SELECT answered: a refusal is logged and the connection dropped. */
static void
open_auth_cb(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;

	if (reply && reply->type == REDIS_REPLY_ERROR) {
		log_warnx("%s: AUTH or SELECT refused: %s", (const char *)priv, reply->str);
		redisAsyncDisconnect(ac);
	}
}

redisAsyncContext *
gw_redis_open(const char *what, redisConnectCallback *on_connect,
    redisDisconnectCallback *on_disconnect, bool select_db, const char **why)
{
	redisAsyncContext *ac;

	if (gw.url.path[0])
		ac = redisAsyncConnectUnix(gw.url.path);
	else
		ac = redisAsyncConnect(gw.url.host, gw.url.port);
	if (ac == NULL || ac->err || uvredis_attach(ac, gw.loop) != REDIS_OK) {
		static char msg[128];

		snprintf(msg, sizeof(msg), "%s", ac ? ac->errstr : "no memory");
		*why = msg;
		if (ac)
			redisAsyncFree(ac);
		return NULL;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	if (gw.url.pass[0] && gw.url.user[0])
		redisAsyncCommand(ac, open_auth_cb, (void *)(uintptr_t)what, "AUTH %s %s",
		    gw.url.user, gw.url.pass);
	else if (gw.url.pass[0])
		redisAsyncCommand(ac, open_auth_cb, (void *)(uintptr_t)what, "AUTH %s",
		    gw.url.pass);
	if (select_db && gw.url.db)
		redisAsyncCommand(ac, open_auth_cb, (void *)(uintptr_t)what, "SELECT %d",
		    gw.url.db);
	return ac;
}
