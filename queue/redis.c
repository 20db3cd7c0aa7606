/*
 * redis.c - sandqd's Redis side: two hiredis async connections on libuv.
 *
 * DESIGN. conn[RQ_READ] carries only XREADGROUP ... BLOCK, so waiting for
 * new jobs never queues a result behind it; conn[RQ_CMD] carries the rest.
 * Each connection is a small state machine: down -> connecting -> up, with a
 * reconnect timer doubling from 100 ms to 5 s. On (re)connect the command
 * connection authenticates and creates every tenant's consumer group
 * (XGROUP CREATE ... 0 MKSTREAM: a stream filled before the first sandqd
 * started is served from its first entry); the read connection authenticates
 * and learns its CLIENT ID so a drain can unblock it. ready() fires when both
 * are up and every group exists.
 *
 * A result is stored and its entry acknowledged in one MULTI/EXEC: SET res,
 * DEL+RPUSH+PEXPIRE done, XACK, XDEL. Redis applies all of it or, if the
 * connection drops first, none of it; the entry then stays pending and the
 * caller publishes again after the reconnect.
 *
 * Lua scripts go as EVALSHA, not as their text with every job: the command
 * connection sends SCRIPT LOAD of each (lua_text) on every (re)connect,
 * before its PING, and keeps the SHA-1s Redis answers; until one is known
 * the script goes as EVAL. Redis answers NOSCRIPT when it lost the script
 * (SCRIPT FLUSH, a restart, a failover to a replica that never loaded it):
 * a lone EVALSHA is then sent again as EVAL (lua_call), which also caches
 * the script again. Inside rq_publish's MULTI/EXEC a NOSCRIPT fails only
 * the EVALSHA and Redis applies the rest (dead record, eof, audit), so the
 * transaction is not repeated: only the script goes again, alone, as EVAL;
 * its SET NX keeps the first result, so nothing is stored or announced
 * twice, and the caller hears of the publish once, after that EVAL.
 *
 * hiredis frees each reply after its callback returns, so callbacks copy what
 * they keep; replies are walked with type and size checks throughout.
 */
#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "../audit/audit.h"
#include "../proto/keys.h"
#include "redis.h"
#include "uvredis.h"
#include "tenant.h"
#include "../proto/url.h"

#define RQ_READ 0
#define RQ_CMD 1
#define RQ_WATCH 2		/* XREAD of new entries for admission (rq_watch) */
#define RQ_NCONN 3
#define RQ_BACKOFF_MIN_MS 100
#define RQ_BACKOFF_MAX_MS 5000
#define RQ_DEAD_MAXLEN "10000"
#define RQ_DEAD_RAW_MAX 4096
#define RQ_DEAD_PAYLOAD_MAX (1024 * 1024)

/* The Lua scripts sent per job or per poll, by EVALSHA (lua_text). */
enum { RQ_LUA_PUBLISH, RQ_LUA_ADMIT, RQ_LUA_REDELIVERY, RQ_LUA_QSTATS, RQ_NLUA };

struct rconn {
	struct rq *q;			/* owner */
	int which;			/* RQ_READ or RQ_CMD */
	redisAsyncContext *ac;		/* NULL while down */
	bool up;			/* connect callback said OK, auth done */
	int64_t backoff_ms;		/* next reconnect delay */
	uv_timer_t timer;		/* reconnect timer */
	long long client_id;		/* CLIENT ID (read connection) */
	unsigned gen;			/* bumped per connection attempt */
};

struct rq {
	uv_loop_t *loop;
	struct redis_url url;
	char *prefix;
	char *consumer;
	char **tenants;
	size_t ntenants;
	char (*jobs_keys)[KEY_MAX];	/* sandq:{T}:jobs per tenant */
	bool *group_ok;			/* the tenant's consumer group exists */
	struct tload *tload;		/* rq_tenants_load() in flight, or NULL */
	struct rconn conn[RQ_NCONN];
	char (*watch_last)[48];		/* per tenant: last id seen by rq_watch */
	bool watch_pending;		/* an XREAD of rq_watch() is outstanding */
	bool history_pending;		/* the read in flight is of our history */
	size_t watch_starts;		/* XREVRANGEs of new watches still due */
	size_t groups_pending;		/* XGROUP replies still due */
	bool groups_ok;			/* every group exists */
	bool ready;			/* ready() fired since the last loss */
	bool read_pending;		/* an XREADGROUP is outstanding */
	bool closing;			/* rq_close() called */
	char audit_max[24];		/* MAXLEN ~ of the audit streams */
	char lua_sha[RQ_NLUA][41];	/* SCRIPT LOAD's SHA-1s, "" until known */
	struct rq_callbacks cb;
	void *arg;
};

static void conn_connect(struct rconn *c);
static const char *lua_text(int script);

static void
check_ready(struct rq *q)
{
	if (q->ready || q->closing)
		return;
	if (q->conn[RQ_READ].up && q->conn[RQ_CMD].up && q->groups_ok) {
		q->ready = true;
		log_info("redis: connected, %zu tenant stream%s ready", q->ntenants,
		    q->ntenants == 1 ? "" : "s");
		q->cb.ready(q->arg);
	}
}

static void
reconnect_cb(uv_timer_t *t)
{
	conn_connect(t->data);
}

static void
schedule_reconnect(struct rconn *c)
{
	if (c->q->closing)
		return;
	uv_timer_start(&c->timer, reconnect_cb, (uint64_t)c->backoff_ms, 0);
	c->backoff_ms *= 2;
	if (c->backoff_ms > RQ_BACKOFF_MAX_MS)
		c->backoff_ms = RQ_BACKOFF_MAX_MS;
}

static void
conn_lost(struct rconn *c)
{
	struct rq *q = c->q;
	bool was_ready = q->ready;

	c->ac = NULL;
	c->up = false;
	if (c->which == RQ_WATCH) {
		/* Admission only: reads and results go on without it. */
		q->watch_pending = false;
		if (!q->closing)
			schedule_reconnect(c);
		return;
	}
	if (c->which == RQ_CMD)
		q->groups_ok = false;
	q->ready = false;
	if (q->closing)
		return;
	if (was_ready)
		q->cb.lost(q->arg);
	schedule_reconnect(c);
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
	struct rconn *c = ac->data;

	if (status != REDIS_OK) {
		log_warnx("redis: cannot connect: %s", ac->errstr);
		/* hiredis frees the context after this callback. */
		conn_lost(c);
	}
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
	struct rconn *c = ac->data;

	if (status != REDIS_OK && !c->q->closing)
		log_warnx("redis: connection lost: %s", ac->errstr);
	conn_lost(c);
}

/*
 * SCRIPT LOAD's answer: the script's SHA-1 into priv (a lua_sha slot). An
 * error (an ACL without SCRIPT, say) keeps the link: the script then goes
 * as EVAL.
 */
static void
on_script_load(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	char *sha = priv;

	(void)ac;
	if (reply == NULL)
		return;		/* disconnecting */
	if (reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
	    strspn(reply->str, "0123456789abcdef") == 40) {
		memcpy(sha, reply->str, 41);
		return;
	}
	log_warnx("redis: SCRIPT LOAD failed (%s); scripts go as EVAL",
	    reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
	sha[0] = '\0';
}

/* Replies to AUTH/SELECT/CLIENT during set-up; any error drops the link. */
static void
on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rconn *c = ac->data;
	redisReply *reply = r;
	const char *what = priv;

	if (reply == NULL)
		return;		/* disconnecting */
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: %s failed: %s", what, reply->str);
		redisAsyncDisconnect(ac);
		return;
	}
	if (strcmp(what, "CLIENT ID") == 0 && reply->type == REDIS_REPLY_INTEGER)
		c->client_id = reply->integer;
	if (strcmp(what, "ping") == 0) {
		c->up = true;
		c->backoff_ms = RQ_BACKOFF_MIN_MS;
		check_ready(c->q);
	}
}

static void
on_group_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rconn *c = ac->data;
	struct rq *q = c->q;
	redisReply *reply = r;
	unsigned gen = (unsigned)(uintptr_t)priv;

	if (reply == NULL || gen != c->gen)
		return;
	if (reply->type == REDIS_REPLY_ERROR &&
	    strncmp(reply->str, "BUSYGROUP", 9) != 0) {
		log_warnx("redis: XGROUP CREATE failed: %s", reply->str);
		redisAsyncDisconnect(ac);
		return;
	}
	if (q->groups_pending > 0 && --q->groups_pending == 0) {
		q->groups_ok = true;
		for (size_t i = 0; i < q->ntenants; i++)
			q->group_ok[i] = true;
		check_ready(q);
	}
}

/* A group made for a tenant added at run time: its stream is read from now. */
static void
on_added_group_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	redisReply *reply = r;
	size_t i = (size_t)(uintptr_t)priv;

	if (reply == NULL || i >= q->ntenants)
		return;
	if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "BUSYGROUP", 9) != 0) {
		log_warnx("redis: XGROUP CREATE %s failed: %s", q->jobs_keys[i], reply->str);
		return;
	}
	q->group_ok[i] = true;
}

static void
create_groups(struct rconn *c)
{
	struct rq *q = c->q;

	q->groups_pending = q->ntenants;
	q->groups_ok = false;
	for (size_t i = 0; i < q->ntenants; i++)
		redisAsyncCommand(c->ac, on_group_reply, (void *)(uintptr_t)c->gen,
		    "XGROUP CREATE %s %s 0 MKSTREAM", q->jobs_keys[i], KEY_GROUP);
}

int
rq_add_tenant(struct rq *q, const char *name, struct err *e)
{
	size_t i = q->ntenants;

	q->tenants = xreallocarray(q->tenants, i + 1, sizeof(*q->tenants));
	q->jobs_keys = xreallocarray(q->jobs_keys, i + 1, sizeof(*q->jobs_keys));
	q->group_ok = xreallocarray(q->group_ok, i + 1, sizeof(*q->group_ok));
	q->watch_last = xreallocarray(q->watch_last, i + 1, sizeof(*q->watch_last));
	q->watch_last[i][0] = '\0';
	if (key_jobs(q->jobs_keys[i], q->prefix, name) < 0)
		return err_set(e, -ENAMETOOLONG, "tenant %s: key name too long", name);
	q->tenants[i] = xstrdup(name);
	q->group_ok[i] = false;
	q->ntenants++;
	/* On a (re)connection create_groups() makes it with the others. */
	if (q->conn[RQ_CMD].ac != NULL)
		redisAsyncCommand(q->conn[RQ_CMD].ac, on_added_group_reply,
		    (void *)(uintptr_t)i, "XGROUP CREATE %s %s 0 MKSTREAM",
		    q->jobs_keys[i], KEY_GROUP);
	return 0;
}

static void
conn_connect(struct rconn *c)
{
	struct rq *q = c->q;
	redisAsyncContext *ac;

	if (q->closing || c->ac != NULL)
		return;
	if (q->url.path[0])
		ac = redisAsyncConnectUnix(q->url.path);
	else
		ac = redisAsyncConnect(q->url.host, q->url.port);
	if (ac == NULL) {
		log_warnx("redis: out of memory connecting");
		schedule_reconnect(c);
		return;
	}
	if (ac->err) {
		log_warnx("redis: cannot connect: %s", ac->errstr);
		redisAsyncFree(ac);
		schedule_reconnect(c);
		return;
	}
	if (uvredis_attach(ac, q->loop) != REDIS_OK) {
		log_warnx("redis: cannot watch the connection's socket");
		redisAsyncFree(ac);
		schedule_reconnect(c);
		return;
	}
	c->gen++;
	c->ac = ac;
	ac->data = c;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	/* Commands queue up until the socket connects; replies come in order. */
	if (q->url.pass[0]) {
		if (q->url.user[0])
			redisAsyncCommand(ac, on_setup_reply, (void *)"AUTH",
			    "AUTH %s %s", q->url.user, q->url.pass);
		else
			redisAsyncCommand(ac, on_setup_reply, (void *)"AUTH",
			    "AUTH %s", q->url.pass);
	}
	if (q->url.db)
		redisAsyncCommand(ac, on_setup_reply, (void *)"SELECT", "SELECT %d",
		    q->url.db);
	redisAsyncCommand(ac, on_setup_reply, (void *)"CLIENT SETNAME",
	    "CLIENT SETNAME sandqd-%s", c->which == RQ_READ ? "read" :
	    c->which == RQ_CMD ? "cmd" : "watch");
	if (c->which == RQ_READ)
		redisAsyncCommand(ac, on_setup_reply, (void *)"CLIENT ID", "CLIENT ID");
	else
		create_groups(c);
	if (c->which == RQ_CMD)
		for (int i = 0; i < RQ_NLUA; i++)
			redisAsyncCommand(ac, on_script_load, q->lua_sha[i],
			    "SCRIPT LOAD %s", lua_text(i));
	redisAsyncCommand(ac, on_setup_reply, (void *)"ping", "PING");
}

struct rq *
rq_new(uv_loop_t *loop, const char *url, const char *prefix,
    const char *consumer, char *const *tenants, size_t ntenants,
    const struct rq_callbacks *cb, void *arg, struct err *e)
{
	struct rq *q = xcalloc(1, sizeof(*q));

	if (redis_url_parse(url, &q->url, e) < 0) {
		free(q);
		return NULL;
	}
	q->loop = loop;
	q->prefix = xstrdup(prefix);
	snprintf(q->audit_max, sizeof(q->audit_max), "%d", 100000);
	q->consumer = xstrdup(consumer);
	q->ntenants = ntenants;
	q->tenants = xcalloc(ntenants, sizeof(char *));
	q->jobs_keys = xcalloc(ntenants, sizeof(*q->jobs_keys));
	q->group_ok = xcalloc(ntenants, sizeof(*q->group_ok));
	q->watch_last = xcalloc(ntenants, sizeof(*q->watch_last));
	for (size_t i = 0; i < ntenants; i++) {
		q->tenants[i] = xstrdup(tenants[i]);
		if (key_jobs(q->jobs_keys[i], prefix, tenants[i]) < 0) {
			err_set(e, -ENAMETOOLONG, "tenant %s: key name too long", tenants[i]);
			rq_free(q);
			return NULL;
		}
	}
	q->cb = *cb;
	q->arg = arg;
	for (int i = 0; i < RQ_NCONN; i++) {
		q->conn[i].q = q;
		q->conn[i].which = i;
		q->conn[i].backoff_ms = RQ_BACKOFF_MIN_MS;
		uv_timer_init(loop, &q->conn[i].timer);
		q->conn[i].timer.data = &q->conn[i];
	}
	return q;
}

void
rq_start(struct rq *q)
{
	conn_connect(&q->conn[RQ_READ]);
	conn_connect(&q->conn[RQ_CMD]);
	conn_connect(&q->conn[RQ_WATCH]);
}

bool
rq_is_ready(const struct rq *q)
{
	return q->ready;
}

bool
rq_read_pending(const struct rq *q)
{
	return q->read_pending;
}

/*** Reading ***/

static bool
reply_is_str(const redisReply *r)
{
	return r != NULL && (r->type == REDIS_REPLY_STRING ||
	    r->type == REDIS_REPLY_STATUS);
}

static size_t
tenant_of(const struct rq *q, const redisReply *name)
{
	for (size_t i = 0; i < q->ntenants; i++)
		if (strlen(q->jobs_keys[i]) == name->len &&
		    memcmp(q->jobs_keys[i], name->str, name->len) == 0)
			return i;
	return SIZE_MAX;
}

/*
 * Hands every entry of an XREAD(GROUP) reply to the entry callback (as
 * redelivered or not), or to the watched one (noting the last id per
 * stream) when watch. Returns how many.
 */
static size_t
entries_each(struct rq *q, const redisReply *reply, bool watch, bool redelivered)
{
	size_t n = 0;

	for (size_t s = 0; s < reply->elements; s++) {
		const redisReply *st = reply->element[s];
		size_t t;

		if (st->type != REDIS_REPLY_ARRAY || st->elements != 2 ||
		    !reply_is_str(st->element[0]) ||
		    st->element[1]->type != REDIS_REPLY_ARRAY)
			continue;
		if ((t = tenant_of(q, st->element[0])) == SIZE_MAX)
			continue;
		for (size_t i = 0; i < st->element[1]->elements; i++) {
			const redisReply *en = st->element[1]->element[i];
			const redisReply *fields;
			const char *job = NULL;
			size_t joblen = 0, nf = 0;

			if (en->type != REDIS_REPLY_ARRAY || en->elements != 2 ||
			    !reply_is_str(en->element[0]))
				continue;
			fields = en->element[1];
			if (fields->type == REDIS_REPLY_ARRAY) {
				nf = fields->elements / 2;
				for (size_t f = 0; f + 1 < fields->elements; f += 2) {
					const redisReply *k = fields->element[f];
					const redisReply *v = fields->element[f + 1];
					if (reply_is_str(k) && reply_is_str(v) &&
					    k->len == 3 && memcmp(k->str, "job", 3) == 0) {
						job = v->str;
						joblen = v->len;
					}
				}
			}
			if (watch) {
				snprintf(q->watch_last[t], sizeof(q->watch_last[t]), "%s",
				    en->element[0]->str);
				q->cb.watched(q->arg, t, en->element[0]->str, job, joblen);
			} else
				q->cb.entry(q->arg, t, en->element[0]->str, job, joblen, nf,
				    redelivered);
			n++;
		}
	}
	return n;
}

static void
on_watch_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	redisReply *reply = r;

	(void)priv;
	q->watch_pending = false;
	if (reply == NULL) {
		q->cb.watch_done(q->arg, -ENOTCONN);
		return;
	}
	if (reply->type == REDIS_REPLY_ARRAY)
		(void)entries_each(q, reply, true, false);
	else if (reply->type == REDIS_REPLY_ERROR)
		log_warnx("redis: XREAD (admission) failed: %s", reply->str);
	q->cb.watch_done(q->arg, reply->type == REDIS_REPLY_ERROR ? -EIO : 0);
}

static void
on_read_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	redisReply *reply = r;
	size_t n = 0;

	(void)priv;
	q->read_pending = false;
	if (reply == NULL) {
		q->cb.read_done(q->arg, -ENOTCONN, 0);
		return;
	}
	if (reply->type == REDIS_REPLY_NIL) {
		q->cb.read_done(q->arg, 0, 0);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: XREADGROUP failed: %s", reply->str);
		/* A stream or group deleted under us: recreate the groups. */
		if (strncmp(reply->str, "NOGROUP", 7) == 0 && q->conn[RQ_CMD].ac)
			create_groups(&q->conn[RQ_CMD]);
		q->cb.read_done(q->arg, -EIO, 0);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY) {
		q->cb.read_done(q->arg, -EPROTO, 0);
		return;
	}
	n = entries_each(q, reply, false, q->history_pending);
	q->cb.read_done(q->arg, 0, n);
}

int
rq_read(struct rq *q, bool history, size_t count, int64_t block_ms,
    const bool *want)
{
	size_t argc = 0, nargs = 9 + 2 * q->ntenants, nstreams;
	const char **argv;
	size_t *argvlen;
	char cnt[24], blk[24];
	int rc;

	if (!q->ready || q->conn[RQ_READ].ac == NULL)
		return -ENOTCONN;
	if (q->read_pending)
		return -EBUSY;
	argv = xcalloc(nargs, sizeof(*argv));
	argvlen = xcalloc(nargs, sizeof(*argvlen));
	snprintf(cnt, sizeof(cnt), "%zu", count ? count : 1);
	snprintf(blk, sizeof(blk), "%lld", (long long)block_ms);
	argv[argc++] = "XREADGROUP";
	argv[argc++] = "GROUP";
	argv[argc++] = KEY_GROUP;
	argv[argc++] = q->consumer;
	argv[argc++] = "COUNT";
	argv[argc++] = cnt;
	if (!history && block_ms > 0) {
		argv[argc++] = "BLOCK";
		argv[argc++] = blk;
	}
	argv[argc++] = "STREAMS";
	nstreams = argc;
	for (size_t i = 0; i < q->ntenants; i++)
		if ((want == NULL || want[i]) && q->group_ok[i])
			argv[argc++] = q->jobs_keys[i];
	nstreams = argc - nstreams;
	if (nstreams == 0) {
		free(argv);
		free(argvlen);
		return -EAGAIN;		/* no stream to read (yet) */
	}
	for (size_t i = 0; i < q->ntenants; i++)
		if ((want == NULL || want[i]) && q->group_ok[i])
			argv[argc++] = history ? "0" : ">";
	for (size_t i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);
	q->history_pending = history;
	rc = redisAsyncCommandArgv(q->conn[RQ_READ].ac, on_read_reply, NULL,
	    (int)argc, argv, argvlen);
	free(argv);
	free(argvlen);
	if (rc != REDIS_OK)
		return -EIO;
	q->read_pending = true;
	return 0;
}

void
rq_unblock(struct rq *q)
{
	if (!q->read_pending || q->conn[RQ_CMD].ac == NULL ||
	    q->conn[RQ_READ].client_id == 0)
		return;
	redisAsyncCommand(q->conn[RQ_CMD].ac, NULL, NULL, "CLIENT UNBLOCK %lld",
	    q->conn[RQ_READ].client_id);
}

/*** Writing ***/

/*
 * One script call kept for its NOSCRIPT fallback: the arguments after the
 * script (numkeys, KEYS, ARGV), copied into the same allocation.
 */
struct lua_op {
	struct rq *q;
	int script;			/* RQ_LUA_* */
	bool sha;			/* sent as EVALSHA */
	redisCallbackFn *fn;		/* the caller's reply callback */
	void *priv;
	int argc;			/* 2 + args */
	const char **argv;		/* "EVAL"/"EVALSHA", script/SHA-1, args */
	size_t *len;
};

struct rq_op {
	rq_done_cb *cb;
	void *arg;
	struct lua_op *pub;		/* rq_publish's EVALSHA, for NOSCRIPT */
};

/* A lua_op for script with the nargs arguments args/lens (copied). */
static struct lua_op *
lua_op_new(struct rq *q, int script, int nargs, const char *const *args,
    const size_t *lens)
{
	size_t total = 0;
	struct lua_op *op;
	char *p;

	for (int i = 0; i < nargs; i++)
		total += lens[i] + 1;
	op = xcalloc(1, sizeof(*op) + (size_t)(nargs + 2) * (sizeof(char *) +
	    sizeof(size_t)) + total);
	op->q = q;
	op->script = script;
	op->argc = nargs + 2;
	op->argv = (const char **)(op + 1);
	op->len = (size_t *)(op->argv + op->argc);
	p = (char *)(op->len + op->argc);
	for (int i = 0; i < nargs; i++) {
		memcpy(p, args[i], lens[i]);
		p[lens[i]] = '\0';
		op->argv[i + 2] = p;
		op->len[i + 2] = lens[i];
		p += lens[i] + 1;
	}
	return op;
}

/* Fills argv[0..1]: EVALSHA and the SHA-1 when known (and !text), else
 * EVAL and the script's text. */
static void
lua_op_head(struct lua_op *op, bool text)
{
	const char *sha = op->q->lua_sha[op->script];

	op->sha = !text && sha[0] != '\0';
	op->argv[0] = op->sha ? "EVALSHA" : "EVAL";
	op->argv[1] = op->sha ? sha : lua_text(op->script);
	op->len[0] = strlen(op->argv[0]);
	op->len[1] = strlen(op->argv[1]);
}

static void on_lua_reply(redisAsyncContext *ac, void *r, void *priv);

/* Sends op on the command connection; on failure the caller still owns it. */
static int
lua_send(struct lua_op *op)
{
	return redisAsyncCommandArgv(op->q->conn[RQ_CMD].ac, on_lua_reply, op, op->argc,
	    op->argv, op->len) == REDIS_OK ? 0 : -EIO;
}

/* True when reply is Redis's NOSCRIPT: the EVALSHA's script is not cached. */
static bool
reply_noscript(const redisReply *reply)
{
	return reply != NULL && reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
	    strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/*
 * A script's reply: an EVALSHA answered NOSCRIPT goes again once as EVAL
 * (which caches the script again); anything else goes to the caller's fn.
 */
static void
on_lua_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct lua_op *op = priv;

	if (op->sha && reply_noscript(r)) {
		log_info("redis: script %d not cached (%s); sent again as EVAL",
		    op->script, ((redisReply *)r)->str);
		lua_op_head(op, true);
		if (lua_send(op) == 0)
			return;
		r = NULL;
	}
	op->fn(ac, r, op->priv);
	free(op);
}

/* One script call (args after the script) with fn(ac, reply, priv) on its
 * reply; -EIO if it could not be queued (fn is not called). */
static int
lua_call(struct rq *q, int script, int nargs, const char *const *args,
    const size_t *lens, redisCallbackFn *fn, void *priv)
{
	struct lua_op *op = lua_op_new(q, script, nargs, args, lens);

	op->fn = fn;
	op->priv = priv;
	lua_op_head(op, false);
	if (lua_send(op) < 0) {
		free(op);
		return -EIO;
	}
	return 0;
}

/* lua_call with NUL-terminated arguments. */
static int
lua_call_str(struct rq *q, int script, int nargs, const char *const *args,
    redisCallbackFn *fn, void *priv)
{
	size_t lens[16];

	if (nargs > 16)
		return -EINVAL;
	for (int i = 0; i < nargs; i++)
		lens[i] = strlen(args[i]);
	return lua_call(q, script, nargs, args, lens, fn, priv);
}

/* The EVAL of rq_publish's script after a NOSCRIPT in its transaction: the
 * publish is done (0) when it answers a number. */
static void
on_publish_eval(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq_op *op = priv;
	redisReply *reply = r;
	int status = 0;

	(void)ac;
	if (reply == NULL) {
		status = -ENOTCONN;
	} else if (reply->type != REDIS_REPLY_INTEGER) {
		log_warnx("redis: publishing script failed: %s",
		    reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		status = -EIO;
	}
	op->cb(op->arg, status);
	free(op);
}

static void
on_exec_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq_op *op = priv;
	redisReply *reply = r;
	int status = 0;

	(void)ac;
	if (reply == NULL) {
		status = -ENOTCONN;
	} else if (reply->type != REDIS_REPLY_ARRAY) {
		/* EXECABORT, or a nil EXEC: nothing was applied. */
		log_warnx("redis: transaction failed: %s",
		    reply->type == REDIS_REPLY_ERROR ? reply->str : "aborted");
		status = -EIO;
	} else {
		bool noscript = op->pub != NULL && reply->elements > 0 &&
		    reply_noscript(reply->element[0]);

		for (size_t i = noscript ? 1 : 0; i < reply->elements; i++)
			if (reply->element[i]->type == REDIS_REPLY_ERROR) {
				log_warnx("redis: command in transaction failed: %s",
				    reply->element[i]->str);
				status = -EIO;
			}
		if (noscript && status == 0) {
			/* The rest is applied: only the script goes again. */
			struct lua_op *pub = op->pub;

			log_info("redis: publishing script not cached (%s); sent "
			    "again as EVAL", reply->element[0]->str);
			op->pub = NULL;
			pub->fn = on_publish_eval;
			pub->priv = op;
			lua_op_head(pub, true);
			if (lua_send(pub) == 0)
				return;
			free(pub);
			status = -EIO;
		} else if (noscript) {
			status = -EIO;
		}
	}
	op->cb(op->arg, status);
	free(op->pub);
	free(op);
}

static int
cmd(struct rq *q, int argc, const char **argv, const size_t *len)
{
	return redisAsyncCommandArgv(q->conn[RQ_CMD].ac, NULL, NULL, argc, argv, len)
	    == REDIS_OK ? 0 : -EIO;
}

/* Queues an XADD of each event to its tenant's audit stream (inside the
 * caller's MULTI). An event that does not encode is skipped. */
static int
audit_adds(struct rq *q, const struct audit_event *ev, size_t nev)
{
	char key[KEY_MAX];
	int rc = 0;

	for (size_t i = 0; i < nev; i++) {
		const char *argv[6 + 2 * AUDIT_NFIELDS];
		size_t len[6 + 2 * AUDIT_NFIELDS], n = 0;
		struct audit_fields f;
		struct err e = { 0 };

		if (audit_event_to_fields(&ev[i], &f, &e) < 0 ||
		    audit_stream_key(key, sizeof(key), q->prefix, ev[i].tenant) < 0) {
			log_warnx("audit: an event does not encode: %s", e.msg);
			continue;
		}
		argv[n++] = "XADD";
		argv[n++] = key;
		argv[n++] = "MAXLEN";
		argv[n++] = "~";
		argv[n++] = q->audit_max;
		argv[n++] = "*";
		for (size_t k = 0; k < AUDIT_NFIELDS; k++) {
			argv[n] = f.name[k];
			len[n++] = f.name_len[k];
			argv[n] = f.value[k];
			len[n++] = f.value_len[k];
		}
		for (size_t k = 0; k < 6; k++)
			len[k] = strlen(argv[k]);
		rc |= cmd(q, (int)n, argv, len);
	}
	return rc;
}

int
rq_audit(struct rq *q, const struct audit_event *ev, size_t nev)
{
	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	return audit_adds(q, ev, nev) != 0 ? -EIO : 0;
}

void
rq_audit_max(struct rq *q, int64_t max)
{
	snprintf(q->audit_max, sizeof(q->audit_max), "%lld", (long long)max);
}

/* Queues EXEC with cb(arg, status) on its reply; pub (owned from here)
 * is the transaction's EVALSHA, or NULL. */
static int
exec_with(struct rq *q, rq_done_cb *cb, void *arg, struct lua_op *pub)
{
	struct rq_op *op = xcalloc(1, sizeof(*op));

	op->cb = cb;
	op->arg = arg;
	op->pub = pub;
	if (redisAsyncCommand(q->conn[RQ_CMD].ac, on_exec_reply, op, "EXEC") != REDIS_OK) {
		free(op->pub);
		free(op);
		return -EIO;
	}
	return 0;
}

/*
 * KEYS: res, done, jobs stream, attempts, cancel; ARGV: result, ttl ms, entry id,
 * group, the results channel, the job id. The first result of a job wins:
 * a job run twice (taken over from a host that was only cut off, or
 * answered and then redelivered) keeps the result its waiters may have
 * seen, and its done list one element. A stored result's id is published
 * on the tenant's results channel (key_results) for waiters that poll.
 * Either way the entry is acknowledged and deleted, and the attempts
 * record goes. Returns 1 when this result was stored, 0 when one was.
 */
static const char publish_lua[] =
"local won = 0\n"
"if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then\n"
"  redis.call('DEL', KEYS[2])\n"
"  redis.call('RPUSH', KEYS[2], ARGV[1])\n"
"  redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
"  redis.call('PUBLISH', ARGV[5], ARGV[6])\n"
"  won = 1\n"
"end\n"
"redis.call('XACK', KEYS[3], ARGV[4], ARGV[3])\n"
"redis.call('XDEL', KEYS[3], ARGV[3])\n"
"redis.call('DEL', KEYS[4], KEYS[5])\n"
"return won\n";

int
rq_publish(struct rq *q, size_t tenant, const char *id, const char *entry_id,
    const void *res, size_t reslen, int64_t ttl_ms, const struct rq_dead_rec *dead,
    const char *eof_status, const struct audit_event *ev, size_t nev,
    rq_done_cb *cb, void *arg)
{
	char reskey[KEY_MAX], donekey[KEY_MAX], attkey[KEY_MAX], deadkey[KEY_MAX];
	char cankey[KEY_MAX], outkey[KEY_MAX], chan[KEY_MAX], ttl[24];
	const char *t = q->tenants[tenant];
	struct lua_op *pub;
	int rc = 0;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_res(reskey, q->prefix, t, id) < 0 || key_done(donekey, q->prefix, t, id) < 0 ||
	    key_attempts(attkey, q->prefix, t, id) < 0 || key_dead(deadkey, q->prefix, t) < 0 ||
	    key_cancel(cankey, q->prefix, t, id) < 0 || key_out(outkey, q->prefix, t, id) < 0 ||
	    key_results(chan, q->prefix, t) < 0)
		return -ENAMETOOLONG;
	snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
	{
		const char *multi[] = { "MULTI" };
		const char *args[] = { "5", reskey, donekey,
		    q->jobs_keys[tenant], attkey, cankey, res, ttl, entry_id, KEY_GROUP,
		    chan, id };
		size_t l_multi[] = { 5 };
		size_t l_args[] = { 1, strlen(reskey), strlen(donekey),
		    strlen(q->jobs_keys[tenant]), strlen(attkey), strlen(cankey), reslen,
		    strlen(ttl), strlen(entry_id), strlen(KEY_GROUP), strlen(chan), strlen(id) };

		/* Kept for a NOSCRIPT: the caller's res may go before the EXEC's reply. */
		pub = lua_op_new(q, RQ_LUA_PUBLISH, 12, args, l_args);
		lua_op_head(pub, false);
		rc |= cmd(q, 1, multi, l_multi);
		rc |= cmd(q, pub->argc, pub->argv, pub->len);
		if (!pub->sha) {
			free(pub);
			pub = NULL;
		}
	}
	if (dead != NULL) {
		size_t plen = dead->payload_len > RQ_DEAD_PAYLOAD_MAX ? RQ_DEAD_PAYLOAD_MAX :
		    dead->payload_len;
		const char *trunc = plen < dead->payload_len ? "1" : "0";
		const char *xadd[] = { "XADD", deadkey, "MAXLEN", "~", RQ_DEAD_MAXLEN, "*",
		    "entry", entry_id, "id", id, "reason", dead->reason, "attempts",
		    dead->attempts, "payload", dead->payload ? dead->payload : "",
		    "payload_truncated", trunc };
		size_t l_xadd[sizeof(xadd) / sizeof(xadd[0])];

		for (size_t i = 0; i < sizeof(xadd) / sizeof(xadd[0]); i++)
			l_xadd[i] = strlen(xadd[i]);
		l_xadd[15] = dead->payload ? plen : 0;
		rc |= cmd(q, (int)(sizeof(xadd) / sizeof(xadd[0])), xadd, l_xadd);
	}
	if (eof_status != NULL) {
		const char *xadd[] = { "XADD", outkey, "*", "eof", "1", "status", eof_status };
		const char *exp[] = { "PEXPIRE", outkey, ttl };
		size_t l_xadd[7], l_exp[3];

		for (size_t i = 0; i < 7; i++)
			l_xadd[i] = strlen(xadd[i]);
		for (size_t i = 0; i < 3; i++)
			l_exp[i] = strlen(exp[i]);
		rc |= cmd(q, 7, xadd, l_xadd);
		rc |= cmd(q, 3, exp, l_exp);
	}
	rc |= audit_adds(q, ev, nev);
	if (rc != 0) {
		free(pub);
		return -EIO;
	}
	return exec_with(q, cb, arg, pub);
}

int
rq_output(struct rq *q, size_t tenant, const char *id, int fd, const void *data,
    size_t len, int64_t ttl_ms)
{
	char key[KEY_MAX], ttl[24], fds[4];
	const char *xadd[] = { "XADD", key, "*", "fd", fds, "data", data };
	const char *exp[] = { "PEXPIRE", key, ttl };
	size_t l_xadd[7], l_exp[3];
	int rc = 0;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_out(key, q->prefix, q->tenants[tenant], id) < 0)
		return -ENAMETOOLONG;
	snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
	snprintf(fds, sizeof(fds), "%d", fd);
	for (size_t i = 0; i < 6; i++)
		l_xadd[i] = strlen(xadd[i]);
	l_xadd[6] = len;
	for (size_t i = 0; i < 3; i++)
		l_exp[i] = strlen(exp[i]);
	rc |= cmd(q, 7, xadd, l_xadd);
	rc |= cmd(q, 3, exp, l_exp);
	return rc != 0 ? -EIO : 0;
}

int
rq_attempt_add(struct rq *q, size_t tenant, const char *id, const char *record,
    int64_t ttl_ms)
{
	char key[KEY_MAX], ttl[24];

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_attempts(key, q->prefix, q->tenants[tenant], id) < 0)
		return -ENAMETOOLONG;
	snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
	{
		const char *multi[] = { "MULTI" }, *exec[] = { "EXEC" };
		const char *push[] = { "RPUSH", key, record };
		const char *exp[] = { "PEXPIRE", key, ttl };
		size_t l_multi[] = { 5 }, l_exec[] = { 4 };
		size_t l_push[] = { 5, strlen(key), strlen(record) };
		size_t l_exp[] = { 7, strlen(key), strlen(ttl) };
		int rc = 0;

		rc |= cmd(q, 1, multi, l_multi);
		rc |= cmd(q, 3, push, l_push);
		rc |= cmd(q, 3, exp, l_exp);
		rc |= cmd(q, 1, exec, l_exec);
		return rc != 0 ? -EIO : 0;
	}
}

int
rq_dead(struct rq *q, size_t tenant, const char *entry_id, const char *reason,
    const void *raw, size_t rawlen, const struct audit_event *ev, size_t nev,
    rq_done_cb *cb, void *arg)
{
	char deadkey[KEY_MAX], now[24];
	int rc = 0;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_dead(deadkey, q->prefix, q->tenants[tenant]) < 0)
		return -ENAMETOOLONG;
	if (rawlen > RQ_DEAD_RAW_MAX)
		rawlen = RQ_DEAD_RAW_MAX;
	snprintf(now, sizeof(now), "%llu", (unsigned long long)uv_now(q->loop));
	{
		const char *multi[] = { "MULTI" };
		const char *xadd[] = { "XADD", deadkey, "MAXLEN", "~", RQ_DEAD_MAXLEN, "*",
		    "entry", entry_id, "reason", reason, "payload", raw ? raw : "" };
		const char *ack[] = { "XACK", q->jobs_keys[tenant], KEY_GROUP, entry_id };
		const char *xdel[] = { "XDEL", q->jobs_keys[tenant], entry_id };
		size_t l_multi[] = { 5 };
		size_t l_xadd[] = { 4, strlen(deadkey), 6, 1, strlen(RQ_DEAD_MAXLEN), 1,
		    5, strlen(entry_id), 6, strlen(reason), 7, raw ? rawlen : 0 };
		size_t l_ack[] = { 4, strlen(q->jobs_keys[tenant]), strlen(KEY_GROUP),
		    strlen(entry_id) };
		size_t l_xdel[] = { 4, strlen(q->jobs_keys[tenant]), strlen(entry_id) };

		rc |= cmd(q, 1, multi, l_multi);
		rc |= cmd(q, 12, xadd, l_xadd);
		rc |= cmd(q, 4, ack, l_ack);
		rc |= cmd(q, 3, xdel, l_xdel);
	}
	rc |= audit_adds(q, ev, nev);
	if (rc != 0)
		return -EIO;
	return exec_with(q, cb, arg, NULL);
}

/*** Tenants kept in Redis (tenant.h) ***/

struct tload {
	struct rq *q;
	rq_tenants_cb *cb;
	void *arg;
	uint64_t known, gen;
	size_t n, due;
	bool failed;
	char **names;
	struct tenant_conf *confs;
	bool *ok;
};

static void
tload_finish(struct tload *t, int status)
{
	t->cb(t->arg, status, t->confs, t->ok, status == 0 ? t->n : 0, t->gen);
	for (size_t i = 0; i < t->n; i++) {
		tenant_conf_free(&t->confs[i]);
		free(t->names[i]);
	}
	free(t->names);
	free(t->confs);
	free(t->ok);
	free(t);
}

static void
on_tenant_conf(redisAsyncContext *ac, void *r, void *priv)
{
	struct tload *t = ((struct rconn *)ac->data)->q->tload;
	redisReply *reply = r;
	size_t i = (size_t)(uintptr_t)priv;
	struct err e = { 0 };

	if (t == NULL)
		return;
	if (reply == NULL) {
		t->failed = true;
	} else if (reply->type == REDIS_REPLY_ARRAY && reply->elements % 2 == 0 &&
	    reply->elements / 2 <= TENANT_FIELDS_MAX) {
		const char *f[TENANT_FIELDS_MAX], *v[TENANT_FIELDS_MAX];
		size_t fl[TENANT_FIELDS_MAX], vl[TENANT_FIELDS_MAX], n = reply->elements / 2;
		bool strings = true;

		for (size_t k = 0; k < n; k++) {
			const redisReply *a = reply->element[2 * k], *b = reply->element[2 * k + 1];

			strings &= reply_is_str(a) && reply_is_str(b);
			if (!strings)
				break;
			f[k] = a->str;
			fl[k] = a->len;
			v[k] = b->str;
			vl[k] = b->len;
		}
		/* No hash: a name listed without settings takes the defaults. */
		if (strings && (n == 0 ? tenant_conf_init(&t->confs[i], t->names[i], &e) :
		    tenant_hash_decode(&t->confs[i], t->names[i], f, fl, v, vl, n, &e)) == 0)
			t->ok[i] = true;
		else
			log_warnx("tenant %s: settings in Redis not used: %s", t->names[i],
			    strings ? e.msg : "not a hash of strings");
	}
	if (--t->due == 0) {
		t->q->tload = NULL;
		tload_finish(t, t->failed ? -ENOTCONN : 0);
	}
}

static void
on_tenant_set(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	struct tload *t = q->tload;
	redisReply *reply = r;
	char key[KEY_MAX];

	(void)priv;
	if (t == NULL)
		return;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		q->tload = NULL;
		tload_finish(t, reply == NULL ? -ENOTCONN : -EPROTO);
		return;
	}
	t->names = xcalloc(reply->elements + 1, sizeof(*t->names));
	t->confs = xcalloc(reply->elements + 1, sizeof(*t->confs));
	t->ok = xcalloc(reply->elements + 1, sizeof(*t->ok));
	for (size_t k = 0; k < reply->elements; k++) {
		const redisReply *m = reply->element[k];

		if (!reply_is_str(m) || m->len == 0 || m->len > TENANT_NAME_MAX ||
		    memchr(m->str, '\0', m->len) != NULL)
			continue;
		t->names[t->n++] = xmemdup0(m->str, m->len);
	}
	if (t->n == 0) {
		q->tload = NULL;
		tload_finish(t, 0);
		return;
	}
	t->due = t->n;
	for (size_t k = 0; k < t->n; k++) {
		if (tenant_key_conf(key, q->prefix, t->names[k]) < 0 ||
		    redisAsyncCommand(ac, on_tenant_conf, (void *)(uintptr_t)k,
		    "HGETALL %s", key) != REDIS_OK) {
			t->failed = true;
			if (--t->due == 0) {
				q->tload = NULL;
				tload_finish(t, -EIO);
				return;
			}
		}
	}
}

static void
on_tenant_gen(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	struct tload *t = q->tload;
	redisReply *reply = r;
	char key[KEY_MAX];

	(void)priv;
	if (t == NULL)
		return;
	if (reply == NULL || (reply->type != REDIS_REPLY_NIL && !reply_is_str(reply))) {
		q->tload = NULL;
		tload_finish(t, reply == NULL ? -ENOTCONN : -EPROTO);
		return;
	}
	t->gen = reply->type == REDIS_REPLY_NIL ? 0 : strtoull(reply->str, NULL, 10);
	if (t->gen == t->known) {
		q->tload = NULL;
		tload_finish(t, 1);
		return;
	}
	if (tenant_key_set(key, q->prefix) < 0 ||
	    redisAsyncCommand(ac, on_tenant_set, NULL, "SMEMBERS %s", key) != REDIS_OK) {
		q->tload = NULL;
		tload_finish(t, -EIO);
	}
}

int
rq_tenants_load(struct rq *q, uint64_t known_gen, rq_tenants_cb *cb, void *arg)
{
	char key[KEY_MAX];
	struct tload *t;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (q->tload != NULL)
		return -EBUSY;
	if (tenant_key_gen(key, q->prefix) < 0)
		return -ENAMETOOLONG;
	t = xcalloc(1, sizeof(*t));
	t->q = q;
	t->cb = cb;
	t->arg = arg;
	t->known = known_gen;
	if (redisAsyncCommand(q->conn[RQ_CMD].ac, on_tenant_gen, NULL, "GET %s", key)
	    != REDIS_OK) {
		free(t);
		return -EIO;
	}
	q->tload = t;
	return 0;
}

/*** Admission ***/

/*
 * New entries of the streams of the tenants i with want[i], as they are
 * added: XREAD (no group: every host sees them), from where the last watch
 * ended (at first, after the last entry its consumer group delivered).
 * Each goes to the watched callback, then watch_done. Blocks up to
 * block_ms.
 */
/*
 * Where a newly watched stream starts: its group's last delivered entry
 * (XINFO GROUPS), so every entry no reader has taken yet is watched, and
 * what readers took they decided themselves.
 */
static void
on_watch_start(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	redisReply *reply = r;
	size_t i = (size_t)(uintptr_t)priv;

	for (size_t g = 0; reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
	    i < q->ntenants && g < reply->elements; g++) {
		const redisReply *grp = reply->element[g];
		bool ours = false;
		const char *last = NULL;

		if (grp->type != REDIS_REPLY_ARRAY)
			continue;
		for (size_t k = 0; k + 1 < grp->elements; k += 2) {
			const redisReply *f = grp->element[k], *v = grp->element[k + 1];

			if (!reply_is_str(f) || !reply_is_str(v))
				continue;
			if (strcmp(f->str, "name") == 0)
				ours = strcmp(v->str, KEY_GROUP) == 0;
			else if (strcmp(f->str, "last-delivered-id") == 0)
				last = v->str;
		}
		if (ours && last != NULL)
			snprintf(q->watch_last[i], sizeof(q->watch_last[i]), "%s", last);
	}
	if (q->watch_starts > 0 && --q->watch_starts == 0) {
		q->watch_pending = false;
		q->cb.watch_done(q->arg, reply == NULL ? -ENOTCONN : 0);
	}
}

int
rq_watch(struct rq *q, const bool *want, int64_t block_ms)
{
	size_t argc = 0, nargs = 6 + 2 * q->ntenants, n = 0;
	const char **argv;
	size_t *argvlen;
	char blk[24];
	int rc;

	if (q->conn[RQ_WATCH].ac == NULL || !q->conn[RQ_WATCH].up)
		return -ENOTCONN;
	if (q->watch_pending)
		return -EBUSY;
	/*
	 * A stream watched for the first time starts after the last entry a
	 * reader took; from then on at the last entry seen, timeouts
	 * included, so no entry added between two XREADs is missed.
	 */
	for (size_t i = 0; i < q->ntenants; i++)
		if (want[i] && q->group_ok[i] && q->watch_last[i][0] == '\0' &&
		    redisAsyncCommand(q->conn[RQ_WATCH].ac, on_watch_start,
		    (void *)(uintptr_t)i, "XINFO GROUPS %s", q->jobs_keys[i]) == REDIS_OK)
			q->watch_starts++;
	if (q->watch_starts > 0) {
		q->watch_pending = true;
		return 0;
	}
	argv = xcalloc(nargs, sizeof(*argv));
	argvlen = xcalloc(nargs, sizeof(*argvlen));
	snprintf(blk, sizeof(blk), "%lld", (long long)block_ms);
	argv[argc++] = "XREAD";
	argv[argc++] = "COUNT";
	argv[argc++] = "256";
	argv[argc++] = "BLOCK";
	argv[argc++] = blk;
	argv[argc++] = "STREAMS";
	for (size_t i = 0; i < q->ntenants; i++)
		if (want[i] && q->group_ok[i]) {
			argv[argc++] = q->jobs_keys[i];
			n++;
		}
	for (size_t i = 0; i < q->ntenants; i++)
		if (want[i] && q->group_ok[i])
			argv[argc++] = q->watch_last[i];
	if (n == 0) {
		free(argv);
		free(argvlen);
		return -EAGAIN;
	}
	for (size_t i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);
	rc = redisAsyncCommandArgv(q->conn[RQ_WATCH].ac, on_watch_reply, NULL,
	    (int)argc, argv, argvlen);
	free(argv);
	free(argvlen);
	if (rc != REDIS_OK)
		return -EIO;
	q->watch_pending = true;
	return 0;
}

/*
 * One entry's admission, atomic whatever the number of hosts. KEYS: the
 * jobs stream, the tenant's admission state (a hash only dispatchers
 * write). ARGV: entry id, max_queued, rate, burst. Entries are decided in
 * stream order, each once: one at or before the state's "last" was decided
 * already, and is admitted (0) if it is still in the stream, else it was
 * refused (3: whoever refused it answered it). Otherwise: past max_queued
 * unfinished jobs before it (the stream holds exactly the unfinished ones:
 * an entry leaves it with its result), or with no token left in the bucket
 * (refilled at rate per second of submission time, the entries' ids, up to
 * burst), it is deleted and the reply says why: 1 queue full, 2 over the
 * rate. The watch and the reader of a capped tenant both ask, so whichever
 * comes first decides. Returns {verdict, unfinished before}.
 */
static const char admit_lua[] =
"local function older(a, b)\n"
"  local am, as = string.match(a, '^(%d+)-(%d+)$')\n"
"  local bm, bs = string.match(b, '^(%d+)-(%d+)$')\n"
"  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)\n"
"  return am < bm or (am == bm and as <= bs)\n"
"end\n"
"local id, maxq, rate, burst = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
"local st = redis.call('HMGET', KEYS[2], 'last', 'tokens', 'ts')\n"
"if st[1] and older(id, st[1]) then\n"
"  if #redis.call('XRANGE', KEYS[1], id, id) > 0 then return {0, -1} end\n"
"  return {3, -1}\n"
"end\n"
"redis.call('HSET', KEYS[2], 'last', id)\n"
"local before = -1\n"
"if maxq > 0 then\n"
"  local after = #redis.call('XRANGE', KEYS[1], '(' .. id, '+', 'COUNT', 1000)\n"
"  before = redis.call('XLEN', KEYS[1]) - after - 1\n"
"  if before >= maxq then redis.call('XDEL', KEYS[1], id) return {1, before} end\n"
"end\n"
"if rate > 0 then\n"
"  local t = tonumber(string.match(id, '^(%d+)-'))\n"
"  local tokens, ts = tonumber(st[2]) or burst, tonumber(st[3]) or t\n"
"  if t > ts then tokens = math.min(burst, tokens + (t - ts) * rate / 1000); ts = t end\n"
"  if tokens < 1 then\n"
"    redis.call('HSET', KEYS[2], 'tokens', tostring(tokens), 'ts', ts)\n"
"    redis.call('XDEL', KEYS[1], id) return {2, before}\n"
"  end\n"
"  redis.call('HSET', KEYS[2], 'tokens', tostring(tokens - 1), 'ts', ts)\n"
"end\n"
"return {0, before}\n";

struct admit_op {
	rq_admit_cb *cb;
	void *arg;
};

static void
on_admit_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct admit_op *op = priv;
	redisReply *reply = r;
	int verdict = -EIO;
	long long before = -1;

	(void)ac;
	if (reply == NULL)
		verdict = -ENOTCONN;
	else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
	    reply->element[0]->type == REDIS_REPLY_INTEGER &&
	    reply->element[1]->type == REDIS_REPLY_INTEGER) {
		verdict = (int)reply->element[0]->integer;
		before = reply->element[1]->integer;
	} else if (reply->type == REDIS_REPLY_ERROR)
		log_warnx("redis: admission script failed: %s", reply->str);
	op->cb(op->arg, verdict, before);
	free(op);
}

int
rq_admit(struct rq *q, size_t tenant, const char *entry_id, uint32_t max_queued,
    double rate, uint32_t burst, rq_admit_cb *cb, void *arg)
{
	char key[KEY_MAX], mq[16], rt[32], bu[16];
	struct admit_op *op;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (snprintf(key, sizeof(key), "%s:admit:%s", q->prefix, q->tenants[tenant]) >=
	    (int)sizeof(key))
		return -ENAMETOOLONG;
	snprintf(mq, sizeof(mq), "%u", max_queued);
	snprintf(rt, sizeof(rt), "%.6f", rate);
	snprintf(bu, sizeof(bu), "%u", burst);
	op = xcalloc(1, sizeof(*op));
	op->cb = cb;
	op->arg = arg;
	{
		const char *args[] = { "2", q->jobs_keys[tenant], key, entry_id, mq, rt, bu };

		if (lua_call_str(q, RQ_LUA_ADMIT, 7, args, on_admit_reply, op) < 0) {
			free(op);
			return -EIO;
		}
	}
	return 0;
}

/*** Leases (issue 6: at-least-once) ***/

int
rq_lease(struct rq *q, size_t tenant, const char *const *ids, size_t n)
{
	const char **argv;
	size_t *len, argc = 0;
	int rc;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (n == 0)
		return 0;
	argv = xcalloc(n + 6, sizeof(*argv));
	len = xcalloc(n + 6, sizeof(*len));
	argv[argc++] = "XCLAIM";
	argv[argc++] = q->jobs_keys[tenant];
	argv[argc++] = KEY_GROUP;
	argv[argc++] = q->consumer;
	argv[argc++] = "0";
	for (size_t i = 0; i < n; i++)
		argv[argc++] = ids[i];
	argv[argc++] = "JUSTID";
	for (size_t i = 0; i < argc; i++)
		len[i] = strlen(argv[i]);
	/* Min idle 0 and JUSTID: the idle time restarts, the delivery count
	 * does not move, nothing is sent back but the ids. */
	rc = cmd(q, (int)argc, argv, len);
	free(argv);
	free(len);
	return rc;
}

static void
on_reclaim_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rq *q = ((struct rconn *)ac->data)->q;
	redisReply *reply = r, wrap, *one[1];
	size_t t = (size_t)(uintptr_t)priv;

	if (reply == NULL || t >= q->ntenants)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: XAUTOCLAIM %s: %s", q->jobs_keys[t], reply->str);
		return;
	}
	/* [next-id, [entries...], [deleted ids]]: the entries as one stream. */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
	    reply->element[1]->type != REDIS_REPLY_ARRAY ||
	    reply->element[1]->elements == 0)
		return;
	{
		redisReply name = { .type = REDIS_REPLY_STRING, .str = q->jobs_keys[t],
		    .len = strlen(q->jobs_keys[t]) }, *pair[2] = { &name, reply->element[1] };
		redisReply stream = { .type = REDIS_REPLY_ARRAY, .elements = 2,
		    .element = pair };

		one[0] = &stream;
		wrap = (redisReply){ .type = REDIS_REPLY_ARRAY, .elements = 1, .element = one };
		log_info("tenant %s: took over %zu job%s from a host that stopped "
		    "renewing them", q->tenants[t], reply->element[1]->elements,
		    reply->element[1]->elements == 1 ? "" : "s");
		(void)entries_each(q, &wrap, false, true);
		q->cb.read_done(q->arg, 0, reply->element[1]->elements);
	}
}

int
rq_reclaim(struct rq *q, size_t tenant, int64_t min_idle_ms, size_t count)
{
	char idle[24], cnt[24];

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	snprintf(idle, sizeof(idle), "%lld", (long long)min_idle_ms);
	snprintf(cnt, sizeof(cnt), "%zu", count ? count : 1);
	return redisAsyncCommand(q->conn[RQ_CMD].ac, on_reclaim_reply,
	    (void *)(uintptr_t)tenant, "XAUTOCLAIM %s %s %s %s 0-0 COUNT %s",
	    q->jobs_keys[tenant], KEY_GROUP, q->consumer, idle, cnt) == REDIS_OK ? 0 : -EIO;
}

/* A job's stored result and its attempts list, in one read. */
static const char redelivery_lua[] = "return {redis.call('GET', KEYS[1]), "
    "redis.call('LRANGE', KEYS[2], 0, -1)}";

struct rget {
	rq_redelivery_cb *cb;
	void *arg;
};

static void
on_redelivery_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rget *g = priv;
	redisReply *reply = r, *res, *att;
	const char **recs = NULL;
	size_t n = 0;

	(void)ac;
	if (reply == NULL) {
		g->cb(g->arg, -ENOTCONN, NULL, 0, NULL, 0);
		goto out;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[1]->type != REDIS_REPLY_ARRAY) {
		if (reply->type == REDIS_REPLY_ERROR)
			log_warnx("redis: redelivery lookup: %s", reply->str);
		g->cb(g->arg, -EIO, NULL, 0, NULL, 0);
		goto out;
	}
	res = reply->element[0];
	att = reply->element[1];
	recs = xcalloc(att->elements + 1, sizeof(*recs));
	for (size_t i = 0; i < att->elements; i++)
		if (reply_is_str(att->element[i]))
			recs[n++] = att->element[i]->str;
	if (reply_is_str(res))
		g->cb(g->arg, 1, res->str, res->len, recs, n);
	else
		g->cb(g->arg, 0, NULL, 0, recs, n);
out:
	free(recs);
	free(g);
}

int
rq_redelivery_get(struct rq *q, size_t tenant, const char *id, rq_redelivery_cb *cb,
    void *arg)
{
	char key[KEY_MAX], akey[KEY_MAX];
	struct rget *g;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_res(key, q->prefix, q->tenants[tenant], id) < 0 ||
	    key_attempts(akey, q->prefix, q->tenants[tenant], id) < 0)
		return -ENAMETOOLONG;
	g = xcalloc(1, sizeof(*g));
	g->cb = cb;
	g->arg = arg;
	{
		const char *args[] = { "2", key, akey };

		if (lua_call_str(q, RQ_LUA_REDELIVERY, 3, args, on_redelivery_reply, g) < 0) {
			free(g);
			return -EIO;
		}
	}
	return 0;
}

/*** Image names (sandq image tag) ***/

struct rname {
	rq_image_name_cb *cb;
	void *arg;
};

static void
on_image_name_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rname *g = priv;
	redisReply *reply = r;

	(void)ac;
	if (reply == NULL)
		g->cb(g->arg, -ENOTCONN, NULL, 0);
	else if (reply_is_str(reply))
		g->cb(g->arg, 1, reply->str, reply->len);
	else if (reply->type == REDIS_REPLY_NIL)
		g->cb(g->arg, 0, NULL, 0);
	else {
		if (reply->type == REDIS_REPLY_ERROR)
			log_warnx("redis: image name lookup: %s", reply->str);
		g->cb(g->arg, -EIO, NULL, 0);
	}
	free(g);
}

int
rq_image_name_get(struct rq *q, size_t tenant, const char *name,
    rq_image_name_cb *cb, void *arg)
{
	char key[KEY_MAX];
	struct rname *g;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_images(key, q->prefix, q->tenants[tenant]) < 0)
		return -ENAMETOOLONG;
	g = xcalloc(1, sizeof(*g));
	g->cb = cb;
	g->arg = arg;
	if (redisAsyncCommand(q->conn[RQ_CMD].ac, on_image_name_reply, g,
	    "HGET %s %s", key, name) != REDIS_OK) {
		free(g);
		return -EIO;
	}
	return 0;
}

/* A sandbox's allow list: one HGET, answered as an image name's. */
int
rq_sbxallow_get(struct rq *q, size_t tenant, const char *sandbox,
    rq_image_name_cb *cb, void *arg)
{
	char key[KEY_MAX];
	struct rname *g;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_sbxallow(key, q->prefix, q->tenants[tenant]) < 0)
		return -ENAMETOOLONG;
	g = xcalloc(1, sizeof(*g));
	g->cb = cb;
	g->arg = arg;
	if (redisAsyncCommand(q->conn[RQ_CMD].ac, on_image_name_reply, g,
	    "HGET %s %s", key, sandbox) != REDIS_OK) {
		free(g);
		return -EIO;
	}
	return 0;
}

static void
on_sbxallow_set(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;

	(void)ac;
	(void)priv;
	if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
		log_warnx("redis: a sandbox's allow list: %s", reply->str);
}

int
rq_sbxallow_set(struct rq *q, size_t tenant, const char *sandbox, const char *value)
{
	char key[KEY_MAX];
	int rc;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_sbxallow(key, q->prefix, q->tenants[tenant]) < 0)
		return -ENAMETOOLONG;
	if (value != NULL)
		rc = redisAsyncCommand(q->conn[RQ_CMD].ac, on_sbxallow_set, NULL,
		    "HSET %s %s %s", key, sandbox, value);
	else
		rc = redisAsyncCommand(q->conn[RQ_CMD].ac, on_sbxallow_set, NULL,
		    "HDEL %s %s", key, sandbox);
	return rc == REDIS_OK ? 0 : -EIO;
}

int
rq_sbxallow_copy(struct rq *q, size_t tenant, const char *from, const char *to)
{
	static const char script[] =
		"local v = redis.call('HGET', KEYS[1], ARGV[1]) "
		"if v then redis.call('HSET', KEYS[1], ARGV[2], v) "
		"else redis.call('HDEL', KEYS[1], ARGV[2]) end return 1";
	char key[KEY_MAX];

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (key_sbxallow(key, q->prefix, q->tenants[tenant]) < 0)
		return -ENAMETOOLONG;
	return redisAsyncCommand(q->conn[RQ_CMD].ac, on_sbxallow_set, NULL,
	    "EVAL %s 1 %s %s %s", script, key, from, to) == REDIS_OK ? 0 : -EIO;
}

/*** Cancellations (sandq cancel) ***/

struct rcancel {
	rq_cancels_cb *cb;
	void *arg;
	size_t n;
	size_t *tenants;
	char **ids;
};

static void
on_cancels_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rcancel *c = priv;
	redisReply *reply = r;

	(void)ac;
	if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == c->n) {
		for (size_t i = 0; i < c->n; i++)
			if (reply->element[i]->type != REDIS_REPLY_NIL)
				c->cb(c->arg, c->tenants[i], c->ids[i]);
	} else if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: cancellation check: %s", reply->str);
	}
	for (size_t i = 0; i < c->n; i++)
		free(c->ids[i]);
	free(c->ids);
	free(c->tenants);
	free(c);
}

int
rq_cancels(struct rq *q, const size_t *tenants, const char *const *ids, size_t n,
    rq_cancels_cb *cb, void *arg)
{
	const char **argv;
	size_t *len;
	char (*keys)[KEY_MAX];
	struct rcancel *c;
	int rc = 0;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (n == 0)
		return 0;
	argv = xcalloc(n + 1, sizeof(*argv));
	len = xcalloc(n + 1, sizeof(*len));
	keys = xcalloc(n, sizeof(*keys));
	c = xcalloc(1, sizeof(*c));
	c->cb = cb;
	c->arg = arg;
	c->n = n;
	c->tenants = xcalloc(n, sizeof(*c->tenants));
	c->ids = xcalloc(n, sizeof(*c->ids));
	argv[0] = "MGET";
	len[0] = 4;
	for (size_t i = 0; i < n; i++) {
		if (key_cancel(keys[i], q->prefix, q->tenants[tenants[i]], ids[i]) < 0)
			keys[i][0] = '\0';
		argv[i + 1] = keys[i];
		len[i + 1] = strlen(keys[i]);
		c->tenants[i] = tenants[i];
		c->ids[i] = xstrdup(ids[i]);
	}
	if (redisAsyncCommandArgv(q->conn[RQ_CMD].ac, on_cancels_reply, c, (int)n + 1,
	    argv, len) != REDIS_OK) {
		c->n = 0;
		for (size_t i = 0; i < n; i++)
			free(c->ids[i]);
		on_cancels_reply(NULL, NULL, c);
		rc = -EIO;
	}
	free(keys);
	free(argv);
	free(len);
	return rc;
}

/*** Queue statistics (Prometheus, dispatcher/exporter.c) ***/

/*
 * One tenant's stream as the metrics show it, in one round trip: its
 * length, the entries its consumer group has handed out and not yet
 * acknowledged (read by a host, queued or running there), and the ages
 * in milliseconds, by Redis's own clock (TIME), of the oldest entry and of
 * the oldest entry no host has read yet (the first after the group's
 * last-delivered-id), -1 for none. Reads only; the job bodies stay in
 * Redis (the script returns four integers).
 */
static const char qstats_lua[] =
"local k = KEYS[1]\n"
"local t = redis.call('TIME')\n"
"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
"if redis.call('EXISTS', k) == 0 then return {0, 0, -1, -1} end\n"
"local pending, last = 0, '0-0'\n"
"for _, g in ipairs(redis.call('XINFO', 'GROUPS', k)) do\n"
"  local f = {}\n"
"  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end\n"
"  if f['name'] == ARGV[1] then pending, last = f['pending'], f['last-delivered-id'] end\n"
"end\n"
"local function age(r)\n"
"  if #r == 0 then return -1 end\n"
"  return math.max(now - tonumber(string.match(r[1][1], '^(%d+)')), 0)\n"
"end\n"
"return {redis.call('XLEN', k), pending,\n"
"  age(redis.call('XRANGE', k, '-', '+', 'COUNT', 1)),\n"
"  age(redis.call('XRANGE', k, '(' .. last, '+', 'COUNT', 1))}\n";

struct qstats_op {
	rq_qstats_cb *cb;
	void *arg;
	size_t tenant;
};

static void
on_qstats_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct qstats_op *op = priv;
	redisReply *reply = r;
	struct rq_qstats s = { 0 };
	int status = -EIO;

	(void)ac;
	if (reply == NULL)
		status = -ENOTCONN;
	else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 4) {
		long long v[4];
		size_t i;

		for (i = 0; i < 4 && reply->element[i]->type == REDIS_REPLY_INTEGER; i++)
			v[i] = reply->element[i]->integer;
		if (i == 4) {
			s.entries = v[0] > 0 ? (uint64_t)v[0] : 0;
			s.taken = v[1] > 0 ? (uint64_t)v[1] : 0;
			s.waiting = s.entries > s.taken ? s.entries - s.taken : 0;
			s.oldest_ms = v[2];
			s.oldest_waiting_ms = v[3];
			status = 0;
		}
	} else if (reply->type == REDIS_REPLY_ERROR)
		log_warnx("redis: queue statistics script failed: %s", reply->str);
	op->cb(op->arg, status, op->tenant, status == 0 ? &s : NULL);
	free(op);
}

int
rq_qstats(struct rq *q, size_t tenant, rq_qstats_cb *cb, void *arg)
{
	struct qstats_op *op;

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (tenant >= q->ntenants)
		return -EINVAL;
	op = xcalloc(1, sizeof(*op));
	op->cb = cb;
	op->arg = arg;
	op->tenant = tenant;
	{
		const char *args[] = { "1", q->jobs_keys[tenant], KEY_GROUP };

		if (lua_call_str(q, RQ_LUA_QSTATS, 3, args, on_qstats_reply, op) < 0) {
			free(op);
			return -EIO;
		}
	}
	return 0;
}

/*** Host status ***/

int
rq_host_status(struct rq *q, const char *host, const char *json)
{
	char key[KEY_MAX];

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (snprintf(key, sizeof(key), "%s:hosts", q->prefix) >= (int)sizeof(key))
		return -ENAMETOOLONG;
	return redisAsyncCommand(q->conn[RQ_CMD].ac, NULL, NULL, "HSET %s %s %s", key,
	    host, json) == REDIS_OK ? 0 : -EIO;
}

/*
 * SET PREFIX:perm_presets json: the path presets sandqd enforces, for
 * clients (docs/protocol.md "Keys"). Fire and forget, like the status.
 */
int
rq_perm_presets(struct rq *q, const char *json)
{
	char key[KEY_MAX];

	if (!q->ready || q->conn[RQ_CMD].ac == NULL)
		return -ENOTCONN;
	if (snprintf(key, sizeof(key), "%s:perm_presets", q->prefix) >= (int)sizeof(key))
		return -ENAMETOOLONG;
	return redisAsyncCommand(q->conn[RQ_CMD].ac, NULL, NULL, "SET %s %s", key,
	    json) == REDIS_OK ? 0 : -EIO;
}

/*** Shutdown ***/

void
rq_close(struct rq *q)
{
	q->closing = true;
	for (int i = 0; i < RQ_NCONN; i++) {
		uv_timer_stop(&q->conn[i].timer);
		uv_close((uv_handle_t *)&q->conn[i].timer, NULL);
		if (q->conn[i].ac != NULL) {
			redisAsyncContext *ac = q->conn[i].ac;
			q->conn[i].ac = NULL;
			/* Pending callbacks run with a NULL reply. */
			redisAsyncFree(ac);
		}
	}
}

void
rq_free(struct rq *q)
{
	if (q == NULL)
		return;
	for (size_t i = 0; i < q->ntenants; i++)
		free(q->tenants[i]);
	free(q->tenants);
	free(q->jobs_keys);
	free(q->group_ok);
	free(q->watch_last);
	free(q->prefix);
	free(q->consumer);
	free(q);
}

/* The text of script (RQ_LUA_*), for SCRIPT LOAD and EVAL. */
static const char *
lua_text(int script)
{
	switch (script) {
	case RQ_LUA_PUBLISH:
		return publish_lua;
	case RQ_LUA_ADMIT:
		return admit_lua;
	case RQ_LUA_REDELIVERY:
		return redelivery_lua;
	default:
		return qstats_lua;
	}
}
