/*
 * exporter.c - sandqd's Prometheus metrics: the events it counts and the
 * GET /metrics endpoint at metrics_listen (docs/operations.md, "Metrics").
 *
 * DESIGN: the endpoint is libh2o on sandqd's own libuv loop, as the
 * gateway serves its API (gateway/server.c): the HTTP parsing is h2o's,
 * and a scrape is answered in the loop's turn from what sandqd holds, so
 * it never waits on Redis or a worker. Counters and histograms are bumped
 * where each event happens (one exporter_* call per event in jobs.c,
 * pool.c, lease.c, image_pull.c); gauges (queues, workers, audit losses,
 * the image cache) are read from struct sandqd at each scrape. Queue depth
 * is what this host has taken from a tenant's stream and not yet started.
 *
 * The cluster's view of each stream (sandq_stream_*: entries, those no
 * host has read, the ages of the oldest) and the snapshot store's size are
 * polled every EXPORTER_POLL_MS while the endpoint listens: one EVAL per
 * served tenant on the command connection (rq_qstats(), a round at a
 * time), and the store's files and blob count read on a libuv work thread
 * (SQLite, off the loop). A scrape answers from the last values, so it
 * never waits on Redis or the disk; a tenant whose stream could not be
 * read in the last round shows no sandq_stream_* series rather than stale
 * ones.
 *
 * Labels are bounded: tenant (the tenants this host serves, TENANTS_CAP),
 * status (enum res_status), syscall (names a job's filter refused, at most
 * RESULT_REFUSED_MAX a result, and METRICS_SERIES_MAX in all), never a job
 * id. The endpoint has no authentication: it is on loopback by default.
 * Each response closes its connection (a scrape a second costs one
 * accept), so stopping sandqd never waits on a scraper's idle connection;
 * at most EXPORTER_CONNS_MAX are open at once, and one that sends nothing
 * is closed after h2o's request timeout.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o.h>
#include <sys/stat.h>

#include "../common/err.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../store/store.h"
#include "dispatcher.h"
#include "metrics.h"

#define EXPORTER_CONNS_MAX 64		/* scrape connections open at once */
#define EXPORTER_REQ_TIMEOUT_MS 5000	/* a connection that sends no request */
#define EXPORTER_POLL_MS 5000		/* streams and the store read this often */

/* A tenant's stream as last read from Redis. */
struct qstat {
	bool ok;			/* read in the last round */
	struct rq_qstats s;
	uint64_t at_ms;			/* when the reply came */
};

struct exporter {
	struct metrics *m;
	/* Counters and histograms, bumped as events happen. */
	struct metric *jobs;		/* {tenant, status} */
	struct metric *refused;		/* {syscall} */
	struct metric *retries;		/* {tenant} */
	struct metric *dead;		/* {tenant} */
	struct metric *taken_over;	/* {tenant} */
	struct metric *recycled;	/* (none) */
	struct metric *pulls;		/* {result} */
	struct metric *queue_s, *setup_s, *run_s, *publish_s;	/* {tenant} */
	/* Gauges and counters read at each scrape. */
	struct metric *queued, *oldest, *running;	/* {tenant} */
	struct metric *workers;		/* {state} */
	struct metric *audit_lost;	/* {sink} */
	struct metric *img_bytes;	/* (none) */
	struct metric *dropped;		/* (none) */
	/* Polled: the streams in Redis, the snapshot store. */
	struct metric *s_entries, *s_waiting;		/* {tenant} */
	struct metric *s_oldest, *s_oldest_waiting;	/* {tenant} */
	struct metric *store_bytes, *store_blobs;	/* (none) */
	uv_timer_t poll;
	bool polling;			/* the timer runs */
	struct qstat *qs;		/* per tenant index */
	size_t nqs;
	size_t qs_inflight;		/* rq_qstats() replies due this round */
	uv_work_t store_work;
	bool store_running;		/* store_work is queued or running */
	char store_dir[PATH_MAX];
	int64_t store_bytes_v, store_blobs_v;	/* -1: not read (yet) */
	int64_t out_bytes, out_blobs;	/* the work's, copied in store_done_cb */
	struct err store_e;		/* the work's error */
	/* The endpoint. */
	bool listening;
	bool ctx_live;			/* ctx initialised, not yet disposed */
	bool config_live;		/* config initialised, not yet disposed */
	h2o_globalconf_t config;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept;
	uv_tcp_t listener;
	size_t nconns;
	struct sandqd *d;
};

static const char *const L_TENANT[] = { "tenant", NULL };
static const char *const L_TENANT_STATUS[] = { "tenant", "status", NULL };
static const char *const L_SYSCALL[] = { "syscall", NULL };
static const char *const L_RESULT[] = { "result", NULL };
static const char *const L_STATE[] = { "state", NULL };
static const char *const L_SINK[] = { "sink", NULL };

/* Seconds, from a few milliseconds to an hour (the default wall ceiling). */
static const double SECONDS[] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
};
#define NSECONDS (sizeof(SECONDS) / sizeof(SECONDS[0]))

/*** Events ***/

/* The tenant's name as a label value. */
static const char *const *
tenant_label(const struct sandqd *d, size_t tenant, const char **one)
{
	one[0] = tenant < d->ntenants ? d->tenants[tenant].name : "";
	return one;
}

void
exporter_job(struct sandqd *d, struct djob *j, const struct result *r)
{
	struct exporter *x = d->exporter;
	const char *t[1], *ts[2];

	if (x == NULL)
		return;
	tenant_label(d, j->tenant, t);
	ts[0] = t[0];
	ts[1] = res_status_name(r->status);
	metrics_add(x->jobs, ts, 1);
	for (size_t i = 0; i < r->nrefused; i++)
		metrics_add(x->refused, (const char *const[]){ r->refused[i].name },
		    (double)r->refused[i].count);
	/* Times only for a run that started on a worker here. */
	if (j->sent_at != 0 && r->started_at >= j->sent_at) {
		if (j->sent_at >= j->queued_at)
			metrics_observe(x->queue_s, t, (double)(j->sent_at - j->queued_at) / 1000);
		metrics_observe(x->setup_s, t, (double)(r->started_at - j->sent_at) / 1000);
		metrics_observe(x->run_s, t, (double)r->wall_ms / 1000);
	}
	j->answered_at = now_ms();
}

void
exporter_published(struct sandqd *d, const struct djob *j)
{
	struct exporter *x = d->exporter;
	uint64_t now = now_ms();
	const char *t[1];

	if (x == NULL || j->answered_at == 0 || now < j->answered_at)
		return;
	metrics_observe(x->publish_s, tenant_label(d, j->tenant, t),
	    (double)(now - j->answered_at) / 1000);
}

void
exporter_count(struct sandqd *d, enum exporter_event ev, size_t tenant)
{
	struct exporter *x = d->exporter;
	const char *t[1];

	if (x == NULL)
		return;
	tenant_label(d, tenant, t);
	switch (ev) {
	case EXP_RETRY: metrics_add(x->retries, t, 1); break;
	case EXP_DEAD_LETTER: metrics_add(x->dead, t, 1); break;
	case EXP_TAKEN_OVER: metrics_add(x->taken_over, t, 1); break;
	case EXP_RECYCLED: metrics_add(x->recycled, NULL, 1); break;
	case EXP_PULL_OK: metrics_add(x->pulls, (const char *const[]){ "ok" }, 1); break;
	case EXP_PULL_FAILED:
		metrics_add(x->pulls, (const char *const[]){ "failed" }, 1);
		break;
	}
}

/*** Polled gauges: the streams in Redis, the snapshot store ***/

/* One tenant's stream statistics came back (or failed: no series). */
static void
on_qstats(void *arg, int status, size_t tenant, const struct rq_qstats *s)
{
	struct exporter *x = arg;

	if (x->qs_inflight > 0)
		x->qs_inflight--;
	if (tenant >= x->nqs)
		return;
	x->qs[tenant].ok = status == 0;
	if (status == 0) {
		x->qs[tenant].s = *s;
		x->qs[tenant].at_ms = now_ms();
	}
}

/* Reads the store's size: its files on disk and the blobs it holds (thread). */
static void
store_work_cb(uv_work_t *w)
{
	struct exporter *x = w->data;
	static const char *const files[] = { "store.db", "store.db-wal" };
	char path[PATH_MAX + 32];
	struct store *st = NULL;
	struct stat sb;
	int64_t bytes = 0;
	long blobs;

	x->store_e.code = 0;
	x->out_bytes = x->out_blobs = -1;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", x->store_dir, files[i]);
		if (stat(path, &sb) == 0)
			bytes += (int64_t)sb.st_size;
		else if (i == 0) {
			/* No store yet (no sandbox has run here): empty, not made. */
			x->out_bytes = 0;
			x->out_blobs = 0;
			return;
		}
	}
	x->out_bytes = bytes;
	if (store_open(x->store_dir, &st, &x->store_e) < 0)
		return;
	blobs = store_blob_count(st, &x->store_e);
	if (blobs >= 0)
		x->out_blobs = blobs;
	store_close(st);
}

static void
store_done_cb(uv_work_t *w, int status)
{
	struct exporter *x = w->data;

	(void)status;
	x->store_running = false;
	x->store_bytes_v = x->out_bytes;
	if (x->out_blobs >= 0 || x->out_bytes < 0)
		x->store_blobs_v = x->out_blobs;
	if (x->store_e.code < 0)
		log_warnx("metrics: snapshot store: %s", x->store_e.msg);
}

/* A round: each served tenant's stream, and the store, unless one still runs. */
static void
poll_cb(uv_timer_t *timer)
{
	struct exporter *x = timer->data;
	struct sandqd *d = x->d;

	if (x->nqs < d->ntenants) {
		x->qs = xreallocarray(x->qs, d->ntenants, sizeof(*x->qs));
		memset(x->qs + x->nqs, 0, (d->ntenants - x->nqs) * sizeof(*x->qs));
		x->nqs = d->ntenants;
	}
	if (x->qs_inflight == 0 && d->rq != NULL && rq_is_ready(d->rq)) {
		for (size_t i = 0; i < d->ntenants; i++) {
			if (!d->tenants[i].active) {
				x->qs[i].ok = false;
				continue;
			}
			if (rq_qstats(d->rq, i, on_qstats, x) == 0)
				x->qs_inflight++;
			else
				x->qs[i].ok = false;
		}
	}
	if (!x->store_running) {
		x->store_running = true;
		x->store_work.data = x;
		if (uv_queue_work(d->loop, &x->store_work, store_work_cb, store_done_cb) != 0)
			x->store_running = false;
	}
}

/* Seconds of an age read at at_ms, grown by the time since (0: none). */
static double
age_now(int64_t age_ms, uint64_t at_ms, uint64_t now)
{
	if (age_ms < 0)
		return 0;
	return (double)((uint64_t)age_ms + (now > at_ms ? now - at_ms : 0)) / 1000;
}

/* The polled gauges, from the last values read. */
static void
fill_polled(struct exporter *x, struct sandqd *d, uint64_t now)
{
	metrics_clear(x->s_entries);
	metrics_clear(x->s_waiting);
	metrics_clear(x->s_oldest);
	metrics_clear(x->s_oldest_waiting);
	for (size_t i = 0; i < x->nqs && i < d->ntenants; i++) {
		const struct qstat *q = &x->qs[i];
		const char *name[1] = { d->tenants[i].name };

		if (!q->ok || !d->tenants[i].active)
			continue;
		metrics_set(x->s_entries, name, (double)q->s.entries);
		metrics_set(x->s_waiting, name, (double)q->s.waiting);
		metrics_set(x->s_oldest, name, age_now(q->s.oldest_ms, q->at_ms, now));
		metrics_set(x->s_oldest_waiting, name,
		    age_now(q->s.oldest_waiting_ms, q->at_ms, now));
	}
	metrics_clear(x->store_bytes);
	metrics_clear(x->store_blobs);
	if (x->store_bytes_v >= 0)
		metrics_set(x->store_bytes, NULL, (double)x->store_bytes_v);
	if (x->store_blobs_v >= 0)
		metrics_set(x->store_blobs, NULL, (double)x->store_blobs_v);
}

/* Starts the rounds, the first at once. */
static void
poll_start(struct exporter *x, struct sandqd *d)
{
	snprintf(x->store_dir, sizeof(x->store_dir), "%s/store", d->cfg.state);
	uv_timer_init(d->loop, &x->poll);
	x->poll.data = x;
	uv_timer_start(&x->poll, poll_cb, 0, EXPORTER_POLL_MS);
	x->polling = true;
}

/*** Scrape ***/

/* The gauges, from what sandqd holds now. */
static void
fill_gauges(struct exporter *x, struct sandqd *d)
{
	static const char *const states[] = { "down", "starting", "idle", "busy", "dead" };
	uint64_t now = now_ms(), db_queued = 0, written = 0, db_dropped = 0, failed = 0;

	metrics_clear(x->queued);
	metrics_clear(x->oldest);
	metrics_clear(x->running);
	for (size_t i = 0; i < d->ntenants; i++) {
		const struct tenant *t = &d->tenants[i];
		const struct djob *head = TAILQ_FIRST(&t->queue);
		const char *name[1] = { t->name };

		if (!t->active && t->queued == 0 && t->running == 0)
			continue;
		metrics_set(x->queued, name, (double)t->queued);
		metrics_set(x->running, name, (double)t->running);
		metrics_set(x->oldest, name, head != NULL && now > head->queued_at ?
		    (double)(now - head->queued_at) / 1000 : 0);
	}
	for (size_t s = 0; s < sizeof(states) / sizeof(states[0]); s++)
		metrics_set(x->workers, (const char *const[]){ states[s] },
		    (double)pool_count(d, (enum wstate)s));
	if (d->audit != NULL)
		audit_writer_stats(d->audit, &db_queued, &written, &db_dropped, &failed);
	metrics_set(x->audit_lost, (const char *const[]){ "database" }, (double)db_dropped);
	metrics_set(x->audit_lost, (const char *const[]){ "stream" },
	    (double)d->audit_stream_lost);
	metrics_set(x->img_bytes, NULL, (double)status_image_cache_bytes(d));
	fill_polled(x, d, now);
	metrics_set(x->dropped, NULL, (double)metrics_dropped(x->m));
}

static int
on_req(h2o_handler_t *self, h2o_req_t *req)
{
	struct exporter *x = *(struct exporter **)(self + 1);
	char *text;
	size_t len;

	req->http1_is_persistent = 0;
	if (!h2o_memis(req->path_normalized.base, req->path_normalized.len,
	    H2O_STRLIT("/metrics"))) {
		req->res.status = 404;
		req->res.reason = "Not Found";
		h2o_send_inline(req, H2O_STRLIT("only /metrics is served here\n"));
		return 0;
	}
	if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) &&
	    !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
		req->res.status = 405;
		req->res.reason = "Method Not Allowed";
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL,
		    H2O_STRLIT("GET, HEAD"));
		h2o_send_inline(req, H2O_STRLIT("GET /metrics\n"));
		return 0;
	}
	fill_gauges(x, x->d);
	text = metrics_render(x->m, &len);
	req->res.status = 200;
	req->res.reason = "OK";
	req->res.content_length = len;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
	    H2O_STRLIT("text/plain; version=0.0.4; charset=utf-8"));
	h2o_send_inline(req, text, len);	/* copies text into the pool */
	free(text);
	return 0;
}

/* The one exporter of this process: h2o owns each connection's data field. */
static struct exporter *exporter_self;

/*
 * Disposes h2o's context once the listener is closed and no connection is
 * left: its inter-thread queue is an active libuv handle that would
 * otherwise keep sandqd's loop, and so its stop, waiting for ever.
 */
static void
ctx_dispose_if_idle(struct exporter *x)
{
	if (!x->ctx_live || x->listening || x->nconns > 0)
		return;
	h2o_context_dispose(&x->ctx);
	x->ctx_live = false;
	h2o_config_dispose(&x->config);
	x->config_live = false;
}

static void
on_conn_close(uv_handle_t *h)
{
	exporter_self->nconns--;
	free(h);
	ctx_dispose_if_idle(exporter_self);
}

/* A scraper's connection; past EXPORTER_CONNS_MAX, closed at once. */
static void
on_accept(uv_stream_t *listener, int status)
{
	struct exporter *x = listener->data;
	uv_tcp_t *conn;
	h2o_socket_t *sock;

	if (status != 0)
		return;
	conn = xcalloc(1, sizeof(*conn));
	uv_tcp_init(listener->loop, conn);
	if (uv_accept(listener, (uv_stream_t *)conn) != 0 ||
	    x->nconns >= EXPORTER_CONNS_MAX) {
		uv_close((uv_handle_t *)conn, (uv_close_cb)free);
		return;
	}
	x->nconns++;
	sock = h2o_uv_socket_create((uv_stream_t *)conn, on_conn_close);
	h2o_accept(&x->accept, sock);
}

/* "ADDR:PORT" or "[ADDR6]:PORT" (checked by the config) into sa. */
static int
parse_addr(const char *s, struct sockaddr_storage *sa, struct err *e)
{
	char host[128];
	const char *colon = strrchr(s, ':');
	size_t hl;
	int port;

	if (colon == NULL)
		return err_set(e, -EINVAL, "metrics_listen '%.64s': not ADDR:PORT", s);
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return err_set(e, -EINVAL, "metrics_listen: no address before the port");
	memcpy(host, s, hl);
	host[hl] = '\0';
	port = atoi(colon + 1);
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)sa) == 0 ||
	    uv_ip6_addr(host, port, (struct sockaddr_in6 *)sa) == 0)
		return 0;
	return err_set(e, -EINVAL, "metrics_listen: '%.64s' is not an IP address", host);
}

/* Listens at metrics_listen; on failure e says why and nothing is left open. */
static int
listen_at(struct exporter *x, struct sandqd *d, struct err *e)
{
	struct sockaddr_storage sa;
	h2o_hostconf_t *host;
	h2o_pathconf_t *path;
	h2o_handler_t *h;
	int rc;

	memset(&sa, 0, sizeof(sa));
	if ((rc = parse_addr(d->cfg.metrics_listen, &sa, e)) < 0)
		return rc;
	uv_tcp_init(d->loop, &x->listener);
	x->listener.data = x;
	if ((rc = uv_tcp_bind(&x->listener, (struct sockaddr *)&sa, 0)) != 0 ||
	    (rc = uv_listen((uv_stream_t *)&x->listener, 64, on_accept)) != 0) {
		uv_close((uv_handle_t *)&x->listener, NULL);
		return err_set(e, rc, "metrics_listen %.64s: %s", d->cfg.metrics_listen,
		    uv_strerror(rc));
	}
	h2o_config_init(&x->config);
	x->config_live = true;
	x->config.max_request_entity_size = 4096;
	x->config.http1.req_timeout = EXPORTER_REQ_TIMEOUT_MS;
	host = h2o_config_register_host(&x->config, h2o_iovec_init(H2O_STRLIT("default")),
	    65535);
	path = h2o_config_register_path(host, "/", 0);
	h = h2o_create_handler(path, sizeof(*h) + sizeof(x));
	h->on_req = on_req;
	*(struct exporter **)(h + 1) = x;
	h2o_context_init(&x->ctx, d->loop, &x->config);
	x->accept.ctx = &x->ctx;
	x->accept.hosts = x->config.hosts;
	x->listening = true;
	x->ctx_live = true;
	return 0;
}

/*** Start and stop ***/

void
exporter_start(struct sandqd *d)
{
	struct exporter *x = xcalloc(1, sizeof(*x));
	struct metrics *m = metrics_new();
	struct err e = { 0 };

	x->m = m;
	x->d = d;
	exporter_self = x;
	x->jobs = metrics_counter(m, "sandq_jobs_total",
	    "Jobs answered by this host, by tenant and result status.", L_TENANT_STATUS);
	x->refused = metrics_counter(m, "sandq_seccomp_refusals_total",
	    "System calls jobs' seccomp filters refused, by name.", L_SYSCALL);
	x->retries = metrics_counter(m, "sandq_retries_total",
	    "Attempts that failed under a job (worker or host lost) and were retried.",
	    L_TENANT);
	x->dead = metrics_counter(m, "sandq_dead_letters_total",
	    "Entries and jobs put on the dead-letter stream.", L_TENANT);
	x->taken_over = metrics_counter(m, "sandq_leases_taken_over_total",
	    "Jobs this host took over from a host that stopped renewing its lease.",
	    L_TENANT);
	x->recycled = metrics_counter(m, "sandq_workers_recycled_total",
	    "Workers replaced after worker_max_jobs or worker_max_memory_growth.", NULL);
	x->pulls = metrics_counter(m, "sandq_image_pulls_total",
	    "Image pulls this host ran, by result.", L_RESULT);
	x->queue_s = metrics_histogram(m, "sandq_job_queue_seconds",
	    "Seconds from a job's submission to its worker.", L_TENANT, SECONDS, NSECONDS);
	x->setup_s = metrics_histogram(m, "sandq_job_setup_seconds",
	    "Seconds from a job's worker to its process's start (sandbox, snapshot).",
	    L_TENANT, SECONDS, NSECONDS);
	x->run_s = metrics_histogram(m, "sandq_job_run_seconds",
	    "Seconds a job's process ran (wall clock).", L_TENANT, SECONDS, NSECONDS);
	x->publish_s = metrics_histogram(m, "sandq_job_publish_seconds",
	    "Seconds from a job's result to its publication in Redis.", L_TENANT, SECONDS,
	    NSECONDS);
	x->queued = metrics_gauge(m, "sandq_queue_depth",
	    "Jobs this host has read and not yet started, by tenant.", L_TENANT);
	x->oldest = metrics_gauge(m, "sandq_queue_oldest_age_seconds",
	    "Age of the oldest job this host holds queued, by tenant (0: none).", L_TENANT);
	x->running = metrics_gauge(m, "sandq_jobs_running",
	    "Jobs running on this host's workers, by tenant.", L_TENANT);
	x->workers = metrics_gauge(m, "sandq_workers",
	    "This host's worker slots by state (idle, busy, starting, down, dead).",
	    L_STATE);
	x->audit_lost = metrics_gauge(m, "sandq_audit_lost_events",
	    "Audit events a sink lost since start (the host's database, the Redis "
	    "streams).", L_SINK);
	x->img_bytes = metrics_gauge(m, "sandq_image_cache_bytes",
	    "Bytes the image cache holds (each layer once, unpacked and compressed).",
	    NULL);
	x->dropped = metrics_gauge(m, "sandq_metrics_dropped_series",
	    "Values not recorded because a metric had METRICS_SERIES_MAX series.", NULL);
	x->s_entries = metrics_gauge(m, "sandq_stream_entries",
	    "Jobs in the tenant's stream in Redis, cluster-wide: not yet answered by "
	    "any host (read or not).", L_TENANT);
	x->s_waiting = metrics_gauge(m, "sandq_stream_waiting",
	    "Jobs in the tenant's stream that no host has read yet, cluster-wide.",
	    L_TENANT);
	x->s_oldest = metrics_gauge(m, "sandq_stream_oldest_age_seconds",
	    "Age of the oldest job in the tenant's stream, cluster-wide (0: none).",
	    L_TENANT);
	x->s_oldest_waiting = metrics_gauge(m, "sandq_stream_waiting_oldest_age_seconds",
	    "Age of the oldest job no host has read yet, cluster-wide (0: none).",
	    L_TENANT);
	x->store_bytes = metrics_gauge(m, "sandq_snapshot_store_bytes",
	    "Bytes of this host's snapshot store on disk (store.db and its WAL).", NULL);
	x->store_blobs = metrics_gauge(m, "sandq_snapshot_store_blobs",
	    "Snapshots (blobs) this host's snapshot store holds.", NULL);
	x->store_bytes_v = x->store_blobs_v = -1;
	d->exporter = x;
	if (d->cfg.metrics_listen[0] == '\0')
		return;
	if (listen_at(x, d, &e) < 0) {
		log_warnx("%s: no metrics endpoint", e.msg);
		return;
	}
	log_info("metrics on http://%s/metrics", d->cfg.metrics_listen);
	poll_start(x, d);
}

void
exporter_stop(struct sandqd *d)
{
	struct exporter *x = d->exporter;

	if (x == NULL)
		return;
	if (x->polling) {
		/* Replies still due come back (NULL) at rq_close(); x lives on. */
		uv_timer_stop(&x->poll);
		uv_close((uv_handle_t *)&x->poll, NULL);
		x->polling = false;
	}
	if (!x->listening)
		return;
	/*
	 * Connections still open end with their response (none is kept
	 * alive); h2o's context holds no active handle once they have.
	 */
	uv_close((uv_handle_t *)&x->listener, NULL);
	x->listening = false;
	ctx_dispose_if_idle(x);
}

void
exporter_free(struct sandqd *d)
{
	struct exporter *x = d->exporter;

	if (x == NULL)
		return;
	/* A connection still open at the loop's end kept h2o's context. */
	if (x->ctx_live)
		h2o_context_dispose(&x->ctx);
	if (x->config_live)
		h2o_config_dispose(&x->config);
	metrics_free(x->m);
	free(x->qs);
	free(x);
	d->exporter = NULL;
}
