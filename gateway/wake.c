/*
 * wake.c - long polls woken when their result is stored, not on their
 * next poll (wake.h in internal.h).
 *
 * DESIGN: sandqd's publish script and the cancel script PUBLISH a job's id
 * on its tenant's channel PREFIX:{T}:results as they store its result
 * (docs/protocol.md "Keys"). One subscriber connection of the gateway's
 * own (a connection in subscribe mode can send nothing else) listens to
 * PSUBSCRIBE PREFIX:{*}:results. A long poll registers here under
 * (tenant, id) before its first GET and stays until it is answered; a
 * message for its (tenant, id) stops its poll timer and polls at once, or,
 * while a GET is in flight (the message may overtake its reply, on another
 * connection), marks it to poll again as soon as that GET answers
 * nothing. So a result reaches its waiter one round trip after it is
 * stored, and the timer (from 50 ms up to every 250 ms) is only the
 * fallback: for a sandqd that does not publish, or a message lost while
 * the subscriber reconnects.
 *
 * The registry is a chained hash table of WAKE_BUCKETS buckets; each
 * entry holds a reference to its call. An entry goes when its call is
 * answered (wake_forget from server.c), or at the next sweep (every
 * second) once its client has gone, so a client that leaves a wait for a
 * job that never ends costs nothing for long.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "internal.h"

#define WAKE_BUCKETS 4096
#define WAKE_SWEEP_MS 1000
#define WAKE_RECONNECT_MS 500

struct waiter {
	struct waiter *next;
	struct call *c;
	void (*poll)(struct call *c);
	uint32_t hash;
};

static struct {
	struct waiter *bucket[WAKE_BUCKETS];
	size_t n;
	redisAsyncContext *rc;
	uv_timer_t reconnect, sweep;
	bool down_logged;
	bool subscribed;	/* the PSUBSCRIBE is confirmed and the connection up */
} wk;

/* FNV-1a of tenant, a NUL, and id. */
static uint32_t
wake_hash(const char *tenant, size_t tlen, const char *id, size_t idlen)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < tlen; i++)
		h = (h ^ (unsigned char)tenant[i]) * 16777619u;
	h = (h ^ 0u) * 16777619u;
	for (size_t i = 0; i < idlen; i++)
		h = (h ^ (unsigned char)id[i]) * 16777619u;
	return h;
}

void
wake_watch(struct call *c, void (*poll)(struct call *c))
{
	uint32_t h = wake_hash(c->tenant, strlen(c->tenant), c->id, strlen(c->id));
	struct waiter **b = &wk.bucket[h % WAKE_BUCKETS], *w;

	for (w = *b; w != NULL; w = w->next)
		if (w->c == c)
			return;
	w = xcalloc(1, sizeof(*w));
	w->c = c;
	w->poll = poll;
	w->hash = h;
	w->next = *b;
	*b = w;
	wk.n++;
	c->refs++;	/* the registry's */
}

/* Unlinks *pw and drops its reference; *pw is then its successor. */
static void
drop(struct waiter **pw)
{
	struct waiter *w = *pw;

	*pw = w->next;
	wk.n--;
	call_unref(w->c);
	free(w);
}

void
wake_forget(struct call *c)
{
	uint32_t h = wake_hash(c->tenant, strlen(c->tenant), c->id, strlen(c->id));

	for (struct waiter **pw = &wk.bucket[h % WAKE_BUCKETS]; *pw != NULL;
	    pw = &(*pw)->next)
		if ((*pw)->c == c) {
			drop(pw);
			return;
		}
}

/*
 * The result of (tenant, id) is stored: every call waiting on it polls
 * now, or, with its GET in flight (which may have missed the result), is
 * marked to poll again at once when that GET answers nothing.
 */
static void
wake(const char *tenant, size_t tlen, const char *id, size_t idlen)
{
	uint32_t h = wake_hash(tenant, tlen, id, idlen);

	for (struct waiter *w = wk.bucket[h % WAKE_BUCKETS]; w != NULL; w = w->next) {
		struct call *c = w->c;

		if (w->hash != h || strlen(c->tenant) != tlen ||
		    memcmp(c->tenant, tenant, tlen) != 0 || strlen(c->id) != idlen ||
		    memcmp(c->id, id, idlen) != 0 || c->req == NULL || c->answered)
			continue;
		if (uv_is_active((uv_handle_t *)&c->timer)) {
			uv_timer_stop(&c->timer);
			w->poll(c);	/* a GET, with its own reference */
			call_unref(c);	/* the timer's */
		} else
			c->woken = true;
	}
}

/* "PREFIX:{T}:results": T, or false for another channel. */
static bool
channel_tenant(const char *ch, size_t len, const char **t, size_t *tlen)
{
	size_t plen = strlen(gw.prefix);
	static const char tail[] = "}:results";
	size_t tl = sizeof(tail) - 1;

	if (len < plen + 2 + tl || memcmp(ch, gw.prefix, plen) != 0 ||
	    ch[plen] != ':' || ch[plen + 1] != '{' ||
	    memcmp(ch + len - tl, tail, tl) != 0)
		return false;
	*t = ch + plen + 2;
	*tlen = len - plen - 2 - tl;
	return *tlen > 0 && *tlen <= JOB_TENANT_MAX;
}

/* Every reply of the subscriber connection: subscribe confirmations and messages. */
static void
message_cb(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *m = r;
	const char *t;
	size_t tlen;

	(void)ac;
	(void)priv;
	if (m != NULL && m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
	    m->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(m->element[0]->str, "psubscribe") == 0) {
		wk.subscribed = true;
		return;
	}
	if (m == NULL || m->type != REDIS_REPLY_ARRAY || m->elements != 4 ||
	    m->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(m->element[0]->str, "pmessage") != 0 ||
	    m->element[2]->type != REDIS_REPLY_STRING ||
	    m->element[3]->type != REDIS_REPLY_STRING)
		return;
	if (!channel_tenant(m->element[2]->str, m->element[2]->len, &t, &tlen))
		return;
	if (m->element[3]->len == 0 || m->element[3]->len > JOB_ID_MAX)
		return;
	wake(t, tlen, m->element[3]->str, m->element[3]->len);
}

static void wake_connect(void);

static void
reconnect_cb(uv_timer_t *t)
{
	(void)t;
	wake_connect();
}

static void
down(const char *why)
{
	if (!wk.down_logged)
		log_warnx("results: the subscriber connection is down: %s (long polls "
		    "fall back to polling; retrying every %d ms)", why, WAKE_RECONNECT_MS);
	wk.down_logged = true;
	wk.rc = NULL;
	wk.subscribed = false;
	uv_timer_start(&wk.reconnect, reconnect_cb, WAKE_RECONNECT_MS, 0);
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
	if (status != REDIS_OK)
		down(ac->errstr);
	else
		wk.down_logged = false;
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
	(void)status;
	down(ac->errstr);
}

/* Opens the subscriber connection with the shared one's credentials. */
static void
wake_connect(void)
{
	char pattern[sizeof(gw.prefix) + 16];
	const char *why = NULL;
	/* Pub/sub ignores SELECT: channels are global to the server. */
	redisAsyncContext *ac = gw_redis_open("results", on_connect, on_disconnect,
	    false, &why);

	if (ac == NULL) {
		down(why);
		return;
	}
	snprintf(pattern, sizeof(pattern), "%s:{*}:results", gw.prefix);
	redisAsyncCommand(ac, message_cb, NULL, "PSUBSCRIBE %s", pattern);
	wk.rc = ac;
}

/* Drops the entries whose client has gone (their timers are stopped). */
static void
sweep_cb(uv_timer_t *t)
{
	(void)t;
	if (wk.n == 0)
		return;
	for (size_t i = 0; i < WAKE_BUCKETS; i++)
		for (struct waiter **pw = &wk.bucket[i]; *pw != NULL;)
			if ((*pw)->c->req == NULL || (*pw)->c->answered)
				drop(pw);
			else
				pw = &(*pw)->next;
}

bool
wake_ready(void)
{
	return wk.subscribed;
}

void
wake_init(void)
{
	uv_timer_init(gw.loop, &wk.reconnect);
	uv_timer_init(gw.loop, &wk.sweep);
	uv_timer_start(&wk.sweep, sweep_cb, WAKE_SWEEP_MS, WAKE_SWEEP_MS);
	uv_unref((uv_handle_t *)&wk.sweep);
	wake_connect();
}
