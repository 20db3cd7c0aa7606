/*
 * stream.c - a job's live output as Server-Sent Events or a WebSocket
 * (GET /v1/jobs/ID/events) and its cancellation (POST /v1/jobs/ID/cancel),
 * both after server.c has authenticated the request as one tenant.
 *
 * DESIGN: the output stream PREFIX:{T}:out:ID (docs/protocol.md "Live
 * output") is read with XREAD BLOCK, which holds its connection; so every
 * open event stream is read by ONE reader connection of its own (not the
 * shared one, which must keep answering), issuing one
 * `XREAD COUNT 16 BLOCK 1000 STREAMS k1..kn id1..idn` over all the streams
 * being watched at once. Its reply is dealt out to the watchers, and it is
 * issued again at once. A stream that joins while the XREAD is blocked
 * wakes it with `CLIENT UNBLOCK` (its client id asked with CLIENT ID on
 * connect) sent on the shared connection, so it is read within a round
 * trip; the 1 s BLOCK bounds that wait if UNBLOCK is refused. Watchers of
 * the same key are read once, from the lowest position among them; each
 * takes the entries after its own. A watcher whose client reads slowly
 * (over SSE_BUF_MAX bytes not yet taken by h2o) is left out of the XREAD
 * until it drains.
 *
 * Which jobs have a stream is decided once, when the route opens, by a
 * script (open_lua): the output stream exists (stream it); the result
 * exists without it (404 no_stream: the job was not run with
 * `stream: true`, or its output expired); the job waits in the tenant's
 * jobs stream (stream it if it has `stream: true`, else 404 no_stream);
 * else 404 not_found. A stream ends at its `eof` entry (event `end`, its
 * status), or, for a watched job that never publishes one (refused before
 * it ran), when its result appears: a watcher idle for 2 s GETs the result
 * on the shared connection, and once it exists, the first XREAD after that
 * which brings nothing more for it ends it with the result's status.
 *
 * h2o's generator API sends: a watcher keeps what it has not handed to
 * h2o in `out` and what h2o is sending in `fly` (h2o does not copy), and
 * hands the next piece on proceed(). A watcher that sent nothing for 15 s
 * sends a `: keepalive` comment: h2o learns that a client went away only
 * when a write to it fails. The request's pool dispose frees the
 * watcher's HTTP side when the client goes; the watcher is
 * reference-counted against replies of the shared connection still in
 * flight.
 *
 * The same route upgraded to a WebSocket (h2o/websocket.h, on Debian's
 * libwslay) is the same watcher with `ws` set instead of `req`: each
 * event is one text message (the SSE data object with "event" and "id"
 * added), the end event is followed by a close 1000, keepalives are
 * pings. wslay copies queued messages; a watcher with over SSE_BUF_MAX
 * bytes queued is left out of the XREAD like a slow SSE client, and a
 * 500 ms tick (only while WebSockets are open) puts it back once drained,
 * since h2o tells its WebSocket user nothing when a write completes. The
 * tick also drops a socket whose client has not answered our close in
 * WS_CLOSE_WAIT_MS. The stream takes no messages: a text or binary
 * message is answered with close 1003, and wslay refuses (1009) any over
 * WS_RECV_MAX bytes before buffering it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o/websocket.h>
#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../proto/result.h"
#include "../queue/cancel.h"
#include "internal.h"
#include "jobjson.h"

#define SSE_BUF_MAX (1024 * 1024)	/* unsent bytes before a watcher is paused */
#define SSE_BLOCK_MS "1000"		/* the reader's XREAD BLOCK */
#define SSE_COUNT "16"			/* entries per stream per XREAD (<= 1 MiB) */
#define SSE_IDLE_CHECK_MS 2000		/* idle this long: is there a result? */
#define SSE_KEEPALIVE_MS 15000		/* nothing sent this long: a comment */
#define WS_TICK_MS 500			/* WebSockets: drained? closed? */
#define WS_CLOSE_WAIT_MS 5000		/* our close unanswered this long: drop */
#define WS_RECV_MAX 4096		/* a client's message, at most */
#define WS_PROTO "sandq.v1"		/* the subprotocol answered when offered */

struct sse {
	h2o_generator_t gen;	/* first: h2o hands it back to proceed/stop */
	h2o_req_t *req;		/* NULL once the client is gone */
	struct sse *next, *prev;	/* the watch list, while watching */
	bool watching;
	int refs;		/* the request, and each shared-connection reply */
	char key[KEY_MAX];	/* PREFIX:{T}:out:ID */
	char res[KEY_MAX];	/* PREFIX:{T}:res:ID */
	char last[STREAM_ID_MAX + 1];	/* last entry id taken */
	char *out, *fly;	/* not yet handed to h2o; being sent */
	size_t outlen, outcap, flycap;
	bool sending;		/* h2o holds fly until proceed */
	bool ending;		/* the end event is in out */
	bool final_sent;
	bool checking;		/* a result GET is in flight */
	char result_status[24];	/* the result's status once it exists, else "" */
	uint64_t result_gen;	/* reader generation when the result was seen */
	uint64_t active;	/* loop ms of the last entry or check */
	uint64_t sent;		/* loop ms of the last bytes handed to h2o */
	h2o_websocket_conn_t *ws;	/* a WebSocket's; NULL for SSE or once gone */
	struct sse *ws_next, *ws_prev;	/* every open WebSocket, ended or not */
	bool paused;		/* left out of the last XREAD: too much queued */
	uint64_t close_at;	/* loop ms our close was queued, else 0 */
	bool close_due;		/* close 1000 once the messages are written */
};

static struct {
	redisAsyncContext *rc;	/* the reader; NULL while disconnected */
	bool up;		/* connected and its CLIENT ID known */
	long long client_id;
	bool pending;		/* an XREAD is in flight */
	bool blocked_kicked;	/* CLIENT UNBLOCK sent for the pending XREAD */
	uint64_t gen;		/* XREADs issued */
	uv_timer_t reconnect;
	uv_timer_t retry;	/* after an XREAD error, the next one in 500 ms */
	bool down_logged;
	struct sse *head;
	size_t open;		/* watchers whose client is there (SSE and WS) */
	struct sse *ws_head;	/* open WebSockets */
	uv_timer_t ws_tick;
} rd;

static void reader_issue(void);
static void reader_kick(void);
static void sse_flush(struct sse *s);
static void ws_tick_cb(uv_timer_t *t);

/*** Stream entry ids ***/

/* "MS-SEQ" (or "MS") as two numbers; false if it is not one. */
static bool
sid_parse(const char *s, size_t len, uint64_t *ms, uint64_t *seq)
{
	size_t i = 0;
	int part = 0;

	*ms = *seq = 0;
	if (len == 0 || len > STREAM_ID_MAX)
		return false;
	for (; i < len; i++) {
		uint64_t *v = part ? seq : ms;

		if (s[i] == '-' && part == 0 && i > 0) {
			part = 1;
			continue;
		}
		if (s[i] < '0' || s[i] > '9' || *v > (UINT64_MAX - 9) / 10)
			return false;
		*v = *v * 10 + (uint64_t)(s[i] - '0');
	}
	return s[len - 1] != '-';
}

/* a < b as stream ids (both already valid). */
static bool
sid_less(const char *a, const char *b)
{
	uint64_t am, as, bm, bs;

	sid_parse(a, strlen(a), &am, &as);
	sid_parse(b, strlen(b), &bm, &bs);
	return am < bm || (am == bm && as < bs);
}

bool
stream_from(h2o_req_t *req, char *out, size_t outlen)
{
	uint64_t ms, seq;
	ssize_t h;
	const char *v = NULL;
	size_t vlen = 0;

	snprintf(out, outlen, "0-0");
	if (req->query_at != SIZE_MAX) {
		const char *q = req->path.base + req->query_at + 1;
		size_t qlen = req->path.len - req->query_at - 1;

		if (qlen < 6 || memcmp(q, "from=", 5) != 0)
			return false;
		v = q + 5;
		vlen = qlen - 5;
	} else if ((h = h2o_find_header_by_str(&req->headers,
	    H2O_STRLIT("last-event-id"), -1)) >= 0) {
		v = req->headers.entries[h].value.base;
		vlen = req->headers.entries[h].value.len;
	}
	if (v == NULL)
		return true;
	if (!sid_parse(v, vlen, &ms, &seq))
		return false;
	snprintf(out, outlen, "%" PRIu64 "-%" PRIu64, ms, seq);
	return true;
}

/*** Watchers: the HTTP side ***/

/* Bytes given to the client's side and not yet sent. */
static size_t
sse_backlog(const struct sse *s)
{
	if (s->ws != NULL)
		return wslay_event_get_queued_msg_length(s->ws->ws_ctx);
	return s->outlen;
}

/* Too much waits for the client: the watcher is left out of the XREAD. */
static bool
sse_full(const struct sse *s)
{
	return sse_backlog(s) >= SSE_BUF_MAX;
}

/* The client went away (its request freed, or its WebSocket closed). */
static bool
sse_gone(const struct sse *s)
{
	return s->req == NULL && s->ws == NULL;
}

static void
sse_unref(struct sse *s)
{
	if (--s->refs > 0)
		return;
	free(s->out);
	free(s->fly);
	free(s);
}

static void
sse_unwatch(struct sse *s)
{
	if (!s->watching)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		rd.head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
	s->watching = false;
}

/*
 * Appends an SSE event: optional id, the event name, one data line. On a
 * WebSocket, queues one text message instead: data with "event" and,
 * when there is one, "id" added (wslay copies it).
 */
static void
sse_event(struct sse *s, const char *id, const char *event, json_t *data)
{
	char *d;
	size_t need;

	if (s->ws != NULL) {
		struct wslay_event_msg m = { WSLAY_TEXT_FRAME, NULL, 0 };

		json_object_set_new(data, "event", json_string(event));
		if (id != NULL)
			json_object_set_new(data, "id", json_string(id));
		d = json_dumps(data, JSON_COMPACT);
		json_decref(data);
		if (d == NULL)
			return;
		m.msg = (const uint8_t *)d;
		m.msg_length = strlen(d);
		s->sent = uv_now(gw.loop);
		wslay_event_queue_msg(s->ws->ws_ctx, &m);	/* fails once closing */
		free(d);
		return;
	}
	d = json_dumps(data, JSON_COMPACT);
	json_decref(data);
	if (d == NULL)
		d = xstrdup("{}");
	need = strlen(d) + strlen(event) + (id ? strlen(id) : 0) + 32;
	if (s->outlen + need > s->outcap) {
		s->outcap = (s->outlen + need) * 2;
		s->out = xreallocarray(s->out, s->outcap, 1);
	}
	s->outlen += (size_t)snprintf(s->out + s->outlen, s->outcap - s->outlen,
	    "%s%s%sevent: %s\ndata: %s\n\n", id ? "id: " : "", id ? id : "",
	    id ? "\n" : "", event, d);
	free(d);
}

/* The end event; the watcher stops being read. */
static void
sse_end(struct sse *s, const char *id, const char *status)
{
	if (s->ending)
		return;
	sse_event(s, id, "end", json_pack("{s:s}", "status", status));
	s->ending = true;
	sse_unwatch(s);
	if (s->ws != NULL) {
		s->close_due = true;	/* sse_flush() or the tick, once written */
		uv_timer_start(&rd.ws_tick, ws_tick_cb, 20, WS_TICK_MS);
	}
	sse_flush(s);		/* or on proceed, if h2o still holds a piece */
}

/* Hands what is waiting to h2o, unless h2o still holds the last piece. */
static void
sse_flush(struct sse *s)
{
	h2o_iovec_t v;
	char *t;
	size_t tc;

	if (s->ws != NULL) {
		if (s->ws->sock == NULL)
			return;		/* h2o proceeds once upgraded */
		h2o_websocket_proceed(s->ws);	/* may close: ws_on_msg(NULL) */
		/*
		 * wslay sends a queued close before queued messages, so the
		 * close 1000 after the end event waits until wslay has handed
		 * every message to h2o (whose writes keep their order).
		 */
		if (s->ws != NULL && s->close_due && s->close_at == 0 &&
		    wslay_event_get_queued_msg_count(s->ws->ws_ctx) == 0 &&
		    !wslay_event_want_write(s->ws->ws_ctx)) {
			static const char bye[] = "end of the job's output";

			wslay_event_queue_close(s->ws->ws_ctx, WSLAY_CODE_NORMAL_CLOSURE,
			    (const uint8_t *)bye, sizeof(bye) - 1);
			s->close_at = uv_now(gw.loop);
			h2o_websocket_proceed(s->ws);
		}
		return;
	}
	if (s->req == NULL || s->sending || s->final_sent)
		return;
	if (s->outlen == 0 && !s->ending)
		return;
	t = s->fly;
	tc = s->flycap;
	s->fly = s->out;
	s->flycap = s->outcap;
	s->out = t;
	s->outcap = tc;
	v = h2o_iovec_init(s->fly, s->outlen);
	s->outlen = 0;
	s->sent = uv_now(gw.loop);
	s->sending = true;
	if (s->ending)
		s->final_sent = true;
	h2o_send(s->req, &v, 1, s->ending ? H2O_SEND_STATE_FINAL :
	    H2O_SEND_STATE_IN_PROGRESS);
}

static void
sse_proceed(h2o_generator_t *g, h2o_req_t *req)
{
	struct sse *s = (struct sse *)g;
	bool was_full = s->outlen >= SSE_BUF_MAX;

	(void)req;
	s->sending = false;
	sse_flush(s);
	if (was_full && s->outlen < SSE_BUF_MAX && s->watching)
		reader_kick();
}

static void
sse_stop(h2o_generator_t *g, h2o_req_t *req)
{
	(void)g;
	(void)req;	/* the pool's dispose (sse_dispose) does the freeing */
}

/* h2o frees the request: the watcher forgets its client. */
static void
sse_dispose(void *p)
{
	struct sse *s = *(struct sse **)p;

	s->req = NULL;
	sse_unwatch(s);
	rd.open--;
	sse_unref(s);
}

/* Starts the 200 text/event-stream response for c and watches key. */
static void
sse_start(struct call *c)
{
	h2o_req_t *req = c->req;
	struct sse *s = xcalloc(1, sizeof(*s));
	struct sse **slot;
	static const char hello[] = ": sandq events\n\n";

	c->answered = true;
	s->gen.proceed = sse_proceed;
	s->gen.stop = sse_stop;
	s->req = req;
	s->refs = 1;
	if (key_out(s->key, gw.prefix, c->tenant, c->id) < 0 ||
	    key_res(s->res, gw.prefix, c->tenant, c->id) < 0)
		abort();	/* checked by the caller */
	snprintf(s->last, sizeof(s->last), "%s", c->from);
	s->active = s->sent = uv_now(gw.loop);
	slot = h2o_mem_alloc_shared(&req->pool, sizeof(*slot), sse_dispose);
	*slot = s;
	rd.open++;
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
	    H2O_STRLIT("text/event-stream"));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
	    H2O_STRLIT("no-cache"));
	h2o_start_response(req, &s->gen);
	s->out = xmalloc(sizeof(hello));
	s->outcap = sizeof(hello);
	memcpy(s->out, hello, sizeof(hello) - 1);
	s->outlen = sizeof(hello) - 1;
	s->next = rd.head;
	if (rd.head)
		rd.head->prev = s;
	rd.head = s;
	s->watching = true;
	sse_flush(s);
	reader_kick();
}

/*** Watchers: the WebSocket side ***/

static void
ws_unlist(struct sse *s)
{
	if (s->ws_prev)
		s->ws_prev->ws_next = s->ws_next;
	else
		rd.ws_head = s->ws_next;
	if (s->ws_next)
		s->ws_next->ws_prev = s->ws_prev;
	s->ws_next = s->ws_prev = NULL;
	if (rd.ws_head == NULL)
		uv_timer_stop(&rd.ws_tick);
}

/*
 * Closes the socket and forgets the client, as sse_dispose does for SSE.
 * Never from inside h2o_websocket_proceed() but at its end (on_close),
 * which is where h2o calls ws_on_msg(NULL), or from the tick.
 */
static void
ws_drop(struct sse *s)
{
	h2o_websocket_close(s->ws);
	s->ws = NULL;
	ws_unlist(s);
	sse_unwatch(s);
	rd.open--;
	sse_unref(s);
}

/*
 * h2o's WebSocket callback: arg NULL once the connection is closed (our
 * close answered, the client gone, a write failed, the upgrade failed),
 * else a message wslay received. wslay answers pings and a close itself;
 * a data message closes with 1003 (the stream is one-way).
 */
static void
ws_on_msg(h2o_websocket_conn_t *conn, const struct wslay_event_on_msg_recv_arg *arg)
{
	static const char why[] = "this stream takes no messages";
	struct sse *s = conn->data;

	if (arg == NULL) {
		ws_drop(s);
		return;
	}
	if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
		s->ending = true;	/* the client closes: stop reading for it */
		sse_unwatch(s);
		return;
	}
	if (arg->opcode != WSLAY_TEXT_FRAME && arg->opcode != WSLAY_BINARY_FRAME)
		return;
	s->ending = true;
	sse_unwatch(s);
	if (s->close_at == 0) {
		wslay_event_queue_close(conn->ws_ctx, WSLAY_CODE_UNSUPPORTED_DATA,
		    (const uint8_t *)why, sizeof(why) - 1);
		s->close_at = uv_now(gw.loop);
	}
}

/*
 * Every WS_TICK_MS while WebSockets are open: a paused watcher whose
 * queue drained is read again; a socket whose client left our close
 * unanswered for WS_CLOSE_WAIT_MS is dropped.
 */
static void
ws_tick_cb(uv_timer_t *t)
{
	uint64_t now = uv_now(gw.loop);
	bool kick = false;

	(void)t;
	for (struct sse *s = rd.ws_head, *next; s; s = next) {
		next = s->ws_next;
		if (s->close_at != 0 && now - s->close_at >= WS_CLOSE_WAIT_MS &&
		    s->ws->sock != NULL) {	/* else h2o still upgrades it */
			ws_drop(s);
			continue;
		}
		if (s->paused && s->watching && !sse_full(s)) {
			s->paused = false;
			kick = true;
		}
		if (s->close_due && s->close_at == 0) {
			s->refs++;
			sse_flush(s);	/* queues the close if all is written */
			sse_unref(s);
		}
	}
	if (kick)
		reader_kick();
}

/* The offered subprotocols (Sec-WebSocket-Protocol), one by one. */
static bool
ws_proto_next(h2o_req_t *req, ssize_t *h, size_t *off, h2o_iovec_t *out)
{
	for (;;) {
		h2o_iovec_t v;
		size_t i, j;

		if (*h < 0 && (*h = h2o_find_header_by_str(&req->headers,
		    H2O_STRLIT("sec-websocket-protocol"), *h)) < 0)
			return false;
		v = req->headers.entries[*h].value;
		for (i = *off; i < v.len && (v.base[i] == ' ' || v.base[i] == ','); i++)
			;
		if (i == v.len) {
			*off = 0;	/* this header is done: the next one */
			*h = h2o_find_header_by_str(&req->headers,
			    H2O_STRLIT("sec-websocket-protocol"), *h);
			if (*h < 0)
				return false;
			continue;
		}
		for (j = i; j < v.len && v.base[j] != ',' && v.base[j] != ' '; j++)
			;
		*out = h2o_iovec_init(v.base + i, j - i);
		*off = j;
		return true;
	}
}

/* Whether the client offered the subprotocol p. */
static bool
ws_offers(h2o_req_t *req, const char *p)
{
	ssize_t h = -1;
	size_t off = 0;
	h2o_iovec_t v;

	while (ws_proto_next(req, &h, &off, &v))
		if (h2o_memis(v.base, v.len, p, strlen(p)))
			return true;
	return false;
}

bool
stream_ws_bearer(h2o_req_t *req, h2o_iovec_t *token)
{
	ssize_t h = -1;
	size_t off = 0;
	h2o_iovec_t v;

	while (ws_proto_next(req, &h, &off, &v)) {
		if (v.len > 7 && memcmp(v.base, "bearer.", 7) == 0) {
			*token = h2o_iovec_init(v.base + 7, v.len - 7);
			return true;
		}
	}
	return false;
}

int
stream_ws_handshake(h2o_req_t *req)
{
	const char *key = NULL;

	if (req->version >= 0x200)
		return 0;
	if (h2o_is_websocket_handshake(req, &key) != 0)
		return -1;
	return key != NULL;
}

/* Upgrades c's request to a WebSocket and watches key, as sse_start(). */
static void
ws_start(struct call *c)
{
	h2o_req_t *req = c->req;
	struct sse *s;
	const char *key = NULL;

	if (h2o_is_websocket_handshake(req, &key) != 0 || key == NULL)
		abort();	/* checked by server.c */
	s = xcalloc(1, sizeof(*s));
	c->answered = true;
	s->refs = 1;
	if (key_out(s->key, gw.prefix, c->tenant, c->id) < 0 ||
	    key_res(s->res, gw.prefix, c->tenant, c->id) < 0)
		abort();	/* checked by the caller */
	snprintf(s->last, sizeof(s->last), "%s", c->from);
	s->active = s->sent = uv_now(gw.loop);
	if (ws_offers(req, WS_PROTO))	/* never the bearer.* one: a secret */
		h2o_add_header_by_str(&req->pool, &req->res.headers,
		    H2O_STRLIT("sec-websocket-protocol"), 0, NULL, H2O_STRLIT(WS_PROTO));
	s->ws = h2o_upgrade_to_websocket(req, key, s, ws_on_msg);
	wslay_event_config_set_max_recv_msg_length(s->ws->ws_ctx, WS_RECV_MAX);
	rd.open++;
	s->ws_next = rd.ws_head;
	if (rd.ws_head)
		rd.ws_head->ws_prev = s;
	else
		uv_timer_start(&rd.ws_tick, ws_tick_cb, WS_TICK_MS, WS_TICK_MS);
	rd.ws_head = s;
	s->next = rd.head;
	if (rd.head)
		rd.head->prev = s;
	rd.head = s;
	s->watching = true;
	reader_kick();
}

/*** The reader connection ***/

/* One entry [id, [f, v, ...]] for s, if it is after s->last. */
static void
take_entry(struct sse *s, const redisReply *e)
{
	const redisReply *id, *f;
	const char *fd = NULL, *eof = NULL, *status = "";
	const redisReply *data = NULL;
	json_t *o, *str;

	if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
		return;
	id = e->element[0];
	f = e->element[1];
	if (id->type != REDIS_REPLY_STRING || id->len > STREAM_ID_MAX ||
	    f->type != REDIS_REPLY_ARRAY || !sid_less(s->last, id->str))
		return;
	snprintf(s->last, sizeof(s->last), "%s", id->str);
	s->active = uv_now(gw.loop);
	for (size_t i = 0; i + 1 < f->elements; i += 2) {
		const redisReply *k = f->element[i], *v = f->element[i + 1];

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(k->str, "fd") == 0)
			fd = v->str;
		else if (strcmp(k->str, "data") == 0)
			data = v;
		else if (strcmp(k->str, "eof") == 0)
			eof = v->str;
		else if (strcmp(k->str, "status") == 0)
			status = v->str;
	}
	if (eof != NULL) {
		sse_end(s, id->str, status[0] ? status : "unknown");
		return;
	}
	if (fd == NULL || data == NULL)
		return;
	o = json_object();
	if ((str = json_stringn(data->str, data->len)) != NULL) {
		json_object_set_new(o, "data", str);	/* UTF-8 */
	} else {
		char *b64 = xmalloc(4 * ((data->len + 2) / 3) + 1);

		EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)data->str,
		    (int)data->len);
		json_object_set_new(o, "data_b64", json_string(b64));
		free(b64);
	}
	sse_event(s, id->str, strcmp(fd, "1") == 0 ? "stdout" : strcmp(fd, "2") == 0 ?
	    "stderr" : "progress", o);
}

static void
result_status_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct sse *s = priv;
	redisReply *reply = r;
	struct result *res = NULL;
	struct err e = { 0 };

	(void)ac;
	s->checking = false;
	s->active = uv_now(gw.loop);
	if (!sse_gone(s) && s->watching && reply && reply->type == REDIS_REPLY_STRING) {
		if (payload_result_decode(reply->str, reply->len, &res, &e) < 0) {
			snprintf(s->result_status, sizeof(s->result_status), "unknown");
		} else {
			snprintf(s->result_status, sizeof(s->result_status), "%s",
			    res_status_name(res->status));
			result_free(res);
		}
		s->result_gen = rd.gen;
		reader_kick();
	}
	sse_unref(s);
}

/*
 * Watchers idle for SSE_IDLE_CHECK_MS ask whether their job has a result;
 * those that sent nothing for SSE_KEEPALIVE_MS send a comment, which is
 * also how a client that went away silently is noticed (h2o learns it
 * when a write fails).
 */
static void
check_idle(void)
{
	static const char ka[] = ": keepalive\n\n";
	uint64_t now = uv_now(gw.loop);

	for (struct sse *s = rd.head, *next; s; s = next) {
		const char *argv[2] = { "GET", s->res };
		size_t lens[2] = { 3, strlen(s->res) };

		next = s->next;
		if (s->ws != NULL && now - s->sent >= SSE_KEEPALIVE_MS &&
		    sse_backlog(s) == 0) {
			struct wslay_event_msg ping = { WSLAY_PING, NULL, 0 };

			wslay_event_queue_msg(s->ws->ws_ctx, &ping);
			s->sent = now;
			s->refs++;
			sse_flush(s);
			if (s->refs == 1 || sse_gone(s)) {
				sse_unref(s);	/* its client went away on this write */
				continue;
			}
			s->refs--;
		} else if (s->ws == NULL && now - s->sent >= SSE_KEEPALIVE_MS &&
		    !s->sending && s->outlen == 0) {
			if (s->outcap < sizeof(ka))
				s->out = xreallocarray(s->out, s->outcap = sizeof(ka), 1);
			memcpy(s->out, ka, sizeof(ka) - 1);
			s->outlen = sizeof(ka) - 1;
			s->refs++;
			sse_flush(s);
			if (s->refs == 1 || s->req == NULL) {
				sse_unref(s);	/* its client went away on this write */
				continue;
			}
			s->refs--;
		}
		if (s->checking || s->result_status[0] || now - s->active < SSE_IDLE_CHECK_MS ||
		    s->paused || gw.rc == NULL)	/* paused: not idle, just behind */
			continue;
		if (redisAsyncCommandArgv(gw.rc, result_status_cb, s, 2, argv, lens) == REDIS_OK) {
			s->checking = true;
			s->refs++;
		}
	}
}

static void
retry_cb(uv_timer_t *t)
{
	(void)t;
	reader_issue();
}

static void
xread_cb(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	uint64_t gen = (uint64_t)(uintptr_t)priv;
	struct sse *s, *next;

	(void)ac;
	rd.pending = false;
	rd.blocked_kicked = false;
	if (reply == NULL)
		return;		/* disconnected: reader_disconnect() takes over */
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warnx("events: XREAD refused: %s (again in 500 ms)", reply->str);
		uv_timer_start(&rd.retry, retry_cb, 500, 0);
		return;
	}
	if (reply->type == REDIS_REPLY_ARRAY) {
		for (size_t i = 0; i < reply->elements; i++) {
			const redisReply *ks = reply->element[i], *k, *es;

			if (ks->type != REDIS_REPLY_ARRAY || ks->elements != 2)
				continue;
			k = ks->element[0];
			es = ks->element[1];
			if (k->type != REDIS_REPLY_STRING || es->type != REDIS_REPLY_ARRAY)
				continue;
			for (s = rd.head; s; s = next) {
				next = s->next;
				if (strcmp(s->key, k->str) != 0)
					continue;
				s->result_gen = s->result_status[0] ? gen : s->result_gen;
				s->refs++;	/* held while h2o may answer */
				for (size_t j = 0; j < es->elements && !s->ending; j++)
					take_entry(s, es->element[j]);
				sse_unref(s);
			}
		}
	}
	/*
	 * A watcher whose result was seen before this XREAD was issued, and
	 * which it brought nothing for, has had all its output: it ends. Not
	 * one left out of this XREAD (paused): it was not asked.
	 */
	for (s = rd.head; s; s = next) {
		next = s->next;
		s->refs++;
		if (s->result_status[0] && s->result_gen < gen && !s->paused)
			sse_end(s, NULL, s->result_status);
		else
			sse_flush(s);
		sse_unref(s);
	}
	check_idle();
	reader_issue();
}

/*
 * Sends one XREAD over every watched key (each once, from the lowest
 * position among its watchers), unless one is in flight.
 */
static void
reader_issue(void)
{
	const char **argv;
	size_t *lens, n = 0, keys = 0, cap;
	struct sse *s, *t;

	if (!rd.up || rd.pending || rd.head == NULL ||
	    uv_is_active((uv_handle_t *)&rd.retry))
		return;
	for (s = rd.head; s; s = s->next)
		n++;
	cap = 6 + 2 * n;
	argv = xcalloc(cap, sizeof(*argv));
	lens = xcalloc(cap, sizeof(*lens));
	argv[0] = "XREAD";
	argv[1] = "COUNT";
	argv[2] = SSE_COUNT;
	argv[3] = "BLOCK";
	argv[4] = SSE_BLOCK_MS;
	argv[5] = "STREAMS";
	for (s = rd.head; s; s = s->next) {
		const char *from = s->last;
		bool dup = false;

		s->paused = sse_full(s);
		if (s->paused)
			continue;	/* until its client reads */
		for (t = rd.head; t != s; t = t->next)
			if (!sse_full(t) && strcmp(t->key, s->key) == 0)
				dup = true;
		if (dup)
			continue;
		for (t = s->next; t; t = t->next)
			if (!sse_full(t) && strcmp(t->key, s->key) == 0 &&
			    sid_less(t->last, from))
				from = t->last;
		argv[6 + keys] = s->key;
		argv[6 + n + keys] = from;	/* ids after all keys: compacted below */
		keys++;
	}
	if (keys == 0)
		goto out;
	memmove(&argv[6 + keys], &argv[6 + n], keys * sizeof(*argv));
	for (size_t i = 0; i < 6 + 2 * keys; i++)
		lens[i] = strlen(argv[i]);
	rd.gen++;
	if (redisAsyncCommandArgv(rd.rc, xread_cb, (void *)(uintptr_t)rd.gen,
	    (int)(6 + 2 * keys), argv, lens) == REDIS_OK)
		rd.pending = true;
out:
	free(argv);
	free(lens);
}

/* The watched set changed: wake a blocked XREAD, or issue one. */
static void
reader_kick(void)
{
	char id[24];
	const char *argv[3] = { "CLIENT", "UNBLOCK", id };
	size_t lens[3];

	if (!rd.pending) {
		reader_issue();
		return;
	}
	if (rd.blocked_kicked || gw.rc == NULL || rd.client_id <= 0)
		return;		/* the BLOCK timeout bounds the wait */
	snprintf(id, sizeof(id), "%lld", rd.client_id);
	lens[0] = 6;
	lens[1] = 7;
	lens[2] = strlen(id);
	if (redisAsyncCommandArgv(gw.rc, NULL, NULL, 3, argv, lens) == REDIS_OK)
		rd.blocked_kicked = true;
}

static void reader_connect(void);

static void
reader_reconnect_cb(uv_timer_t *t)
{
	(void)t;
	reader_connect();
}

static void
reader_down(const char *why)
{
	if (!rd.down_logged)
		log_warnx("events: the reader connection is down: %s "
		    "(retrying every 500 ms)", why);
	rd.down_logged = true;
	rd.rc = NULL;
	rd.up = false;
	rd.pending = false;
	rd.client_id = 0;
	uv_timer_start(&rd.reconnect, reader_reconnect_cb, 500, 0);
}

static void
reader_on_connect(const redisAsyncContext *ac, int status)
{
	if (status != REDIS_OK)
		reader_down(ac->errstr);
}

static void
reader_on_disconnect(const redisAsyncContext *ac, int status)
{
	(void)status;
	reader_down(ac->errstr);
}

static void
reader_id_cb(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;

	(void)ac;
	(void)priv;
	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER)
		return;
	rd.client_id = reply->integer;
	rd.up = true;
	rd.down_logged = false;
	reader_issue();
}

/* Opens the reader connection, with the same credentials as the shared one. */
static void
reader_connect(void)
{
	const char *why = NULL;
	redisAsyncContext *ac = gw_redis_open("events", reader_on_connect,
	    reader_on_disconnect, true, &why);

	if (ac == NULL) {
		reader_down(why);
		return;
	}
	redisAsyncCommand(ac, reader_id_cb, NULL, "CLIENT ID");
	rd.rc = ac;
}

void
stream_init(void)
{
	uv_timer_init(gw.loop, &rd.reconnect);
	uv_timer_init(gw.loop, &rd.retry);
	uv_timer_init(gw.loop, &rd.ws_tick);
	reader_connect();
}

/*** Routes ***/

/*
 * KEYS: out, res, jobs; ARGV: the job id. 1: the output stream exists;
 * 2: a result and no stream; 3: the job waits in the jobs stream with
 * `stream: true`; 4: it waits there without; 0: no trace of it. The jobs
 * stream is searched as the cancel script does (queue/cancel.c).
 */
static const char open_lua[] =
"if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end\n"
"if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end\n"
"local start = '-'\n"
"while true do\n"
"  local batch = redis.call('XRANGE', KEYS[3], start, '+', 'COUNT', 1000)\n"
"  if #batch == 0 then return 0 end\n"
"  for _, e in ipairs(batch) do\n"
"    local f = e[2]\n"
"    for i = 1, #f, 2 do\n"
"      if f[i] == 'job' and string.find(f[i + 1], ARGV[1], 1, true) then\n"
"        local ok, job = pcall(cmsgpack.unpack, f[i + 1])\n"
"        if ok and type(job) == 'table' and job['id'] == ARGV[1] then\n"
"          if job['stream'] == true then return 3 end\n"
"          return 4\n"
"        end\n"
"      end\n"
"    end\n"
"  end\n"
"  start = '(' .. batch[#batch][1]\n"
"end\n";

static void
open_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	redisReply *reply = r;

	(void)ac;
	if (c->req == NULL)
		goto out;
	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
		if (reply && reply->type == REDIS_REPLY_ERROR)
			log_warnx("events: the open script failed: %s", reply->str);
		call_error(c, 503, "unavailable", "Redis did not answer");
		goto out;
	}
	switch (reply->integer) {
	case 1:
	case 3:
		if (rd.open >= gw.max_streams) {
			call_error(c, 503, "too_many_streams", "this gateway has "
			    "--max-streams event streams open");
			break;
		}
		if (stream_ws_handshake(c->req) == 1)
			ws_start(c);
		else
			sse_start(c);
		break;
	case 2:
	case 4:
		call_error(c, 404, "no_stream", "the job was not submitted with "
		    "stream: true (or its output expired); GET /v1/jobs/ID has its result");
		break;
	default:
		call_error(c, 404, "not_found", "no job of this tenant has this id");
		break;
	}
out:
	call_unref(c);
}

void
stream_events(struct call *c)
{
	char out[KEY_MAX], res[KEY_MAX], jobs[KEY_MAX];
	const char *argv[7];
	size_t lens[7];

	if (rd.open >= gw.max_streams) {
		call_error(c, 503, "too_many_streams", "this gateway has --max-streams "
		    "event streams open");
		return;
	}
	if (key_out(out, gw.prefix, c->tenant, c->id) < 0 ||
	    key_res(res, gw.prefix, c->tenant, c->id) < 0 ||
	    key_jobs(jobs, gw.prefix, c->tenant) < 0) {
		call_error(c, 500, "internal", "the prefix is too long");
		return;
	}
	argv[0] = "EVAL";
	argv[1] = open_lua;
	argv[2] = "3";
	argv[3] = out;
	argv[4] = res;
	argv[5] = jobs;
	argv[6] = c->id;
	for (int i = 0; i < 7; i++)
		lens[i] = strlen(argv[i]);
	call_redis(c, open_cb, 7, argv, lens);
}

static void
cancel_cb(redisAsyncContext *ac, void *r, void *priv)
{
	struct call *c = priv;
	char host[128];

	(void)ac;
	switch (queue_cancel_outcome(r, false, host, sizeof(host))) {
	case QCANCEL_CANCELLED:
		call_json(c, 202, json_pack("{s:s, s:s}", "id", c->id, "cancel",
		    "cancelled"));
		break;
	case QCANCEL_CANCELLING:
	case QCANCEL_HELD:
		call_json(c, 202, json_pack("{s:s, s:s}", "id", c->id, "cancel",
		    "requested"));
		break;
	case QCANCEL_FINISHED:
		call_error(c, 409, "finished", "the job has a result already");
		break;
	case QCANCEL_UNKNOWN:
		call_error(c, 404, "not_found", "no job of this tenant has this id");
		break;
	default:
		if (r && ((redisReply *)r)->type == REDIS_REPLY_ERROR)
			log_warnx("cancel: the script failed: %s", ((redisReply *)r)->str);
		call_error(c, 503, "unavailable", "Redis did not run the cancel script");
		break;
	}
	call_unref(c);
}

void
stream_cancel(struct call *c)
{
	struct queue_cancel_args a;
	struct err e = { 0 };

	if (queue_cancel_args(&a, gw.prefix, c->tenant, c->id, "the gateway", false,
	    &e) < 0) {
		call_error(c, 500, "internal", e.msg);
		return;
	}
	call_redis(c, cancel_cb, QUEUE_CANCEL_ARGC, a.argv, a.lens);	/* hiredis copies */
	queue_cancel_args_free(&a);
}
