/*
 * egress.c - sandqd's side of network by allowlist (issue 21): it starts
 * and supervises sandq-egress, the egress proxy, hands it each net "allow"
 * job's listener with sandqd's own word on the job, and puts the proxy's
 * reports on the audit trail and in the job's result.
 *
 * DESIGN. The worker of a net "allow" job has its spawner make a listener
 * on 127.0.0.1:egress_port in the job's namespace and sends it here
 * (MSG_JOB_NET) before the job starts. sandqd adds what only it knows for
 * sure (the job's id and tenant, its allow list as admitted at intake, the
 * limits of the config) and passes the listener on (MSG_EGRESS_JOB): the
 * proxy trusts no worker. Every connection the proxy decides is reported
 * (MSG_EGRESS_CONN): one audit event each, and a row of the result's
 * egress list. When the worker's result comes, it is held while the proxy
 * ends the job (MSG_EGRESS_END: listener closed, connections cut and
 * reported) and published once the proxy says so (MSG_EGRESS_ENDED), so
 * the result lists every connection. A proxy that dies is restarted with
 * a backoff; its jobs' listeners died with it (their connections are
 * refused from then on: closed, not open) and their held results go out
 * with what was reported.
 *
 * The proxy runs while net "allow" is among the host's or a tenant's
 * net_modes (egress_reconcile(): at start and after a reload).
 *
 * Sandboxes' allow lists: a sandbox.create's `allow` (admitted within the
 * tenant's net_allow) is kept by sandqd in Redis (key_sbxallow(), written
 * when the create succeeds, copied by a fork, dropped by a delete), never
 * in the worker's store: the list a run's proxy enforces stays sandqd's
 * word. A net "allow" run on a sandbox naming no list of its own reads it
 * there before it is queued (egress_sandbox_allow()), and is held to the
 * tenant's net_allow again, as a job's own list (the tenant's may have
 * narrowed since).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../queue/redis.h"
#include "dispatcher.h"

#define EGRESS_BACKOFF_MAX_MS 10000
#define EGRESS_HOLD_MAX_MS 5000		/* a result waits for the report at most */

struct degress {
	pid_t pid;		/* the proxy, or 0 */
	int fd;			/* our end of its channel, or -1 */
	uv_poll_t *poll;	/* on fd */
	uv_timer_t restart;	/* its restart after a death */
	uv_timer_t hold;	/* releases results a hung proxy never ended */
	int64_t backoff_ms;	/* the next restart's delay */
	char *path;		/* sandq-egress */
	struct djob **jobs;	/* jobs whose listener it holds */
	size_t njobs;
};

/* The proxy's binary: the config's, next to sandqd, then libexec. */
static char *
egress_find(const struct config *c)
{
	char self[PATH_MAX], *p;
	ssize_t n;

	if (c->egress_path[0] != '\0')
		return xstrdup(c->egress_path);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		xasprintf(&p, "%s/sandq-egress", dirname(self));
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return xstrdup(SANDQ_LIBEXECDIR "/sandq-egress");
}

/* Whether some tenant (or the host) may run net "allow" jobs. */
static bool
egress_wanted(const struct config *c)
{
	for (size_t i = 0; i < c->nnet_modes; i++)
		if (strcmp(c->net_modes[i], "allow") == 0)
			return true;
	for (size_t t = 0; t < c->ntenant_cfg; t++)
		for (size_t i = 0; i < c->tenant_cfg[t].nnet_modes; i++)
			if (strcmp(c->tenant_cfg[t].net_modes[i], "allow") == 0)
				return true;
	return false;
}

static void
job_forget(struct degress *g, struct djob *j)
{
	for (size_t i = 0; i < g->njobs; i++)
		if (g->jobs[i] == j) {
			g->jobs[i] = g->jobs[--g->njobs];
			break;
		}
	j->egress = false;
}

static struct djob *
job_by_seq(struct degress *g, uint32_t seq)
{
	for (size_t i = 0; i < g->njobs; i++)
		if (g->jobs[i]->seq == seq)
			return g->jobs[i];
	return NULL;
}

/* A held result goes on: the proxy's rows in, then the rest of its path. */
static void
release(struct sandqd *d, struct djob *j)
{
	struct result *r = j->egress_held, *rows = j->egress_rows;

	job_forget(d->egress, j);
	j->egress_held = NULL;
	j->egress_rows = NULL;
	if (r == NULL) {
		result_free(rows);
		return;
	}
	if (rows != NULL) {
		r->egress = rows->egress;
		r->negress = rows->negress;
		rows->egress = NULL;
		rows->negress = 0;
		result_free(rows);
	}
	jobs_worker_result_go(d, j, r);
}

/* One connection of job j: an audit event and a row of its result. */
static void
on_conn(struct sandqd *d, struct djob *j, const struct msg_egress_conn *c)
{
	char host[sizeof(c->host)], reason[sizeof(c->reason)], addr[sizeof(c->addr)];
	char target[sizeof(host) + 8], throttled[80] = "";
	bool refused = c->state == EGRESS_CONN_REFUSED;

	/* The proxy's text is bounded; it is made printable all the same. */
	memcpy(host, c->host, sizeof(host));
	memcpy(reason, c->reason, sizeof(reason));
	memcpy(addr, c->addr, sizeof(addr));
	host[sizeof(host) - 1] = reason[sizeof(reason) - 1] = addr[sizeof(addr) - 1] = '\0';
	for (char *p = host; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			*p = '?';
	for (char *p = reason; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	snprintf(target, sizeof(target), "%s:%u", host, (unsigned)c->port);
	if (c->throttled_ms > 0)
		snprintf(throttled, sizeof(throttled), "; held %u ms by the job's egress rate "
		    "(egress_rate_bytes)", (unsigned)c->throttled_ms);
	if (refused)
		daudit_job(d, j, AUDIT_CAT_POLICY, "egress_refused", target, false,
		    AUDIT_LVL_WARNING, "refused: %s", reason);
	else
		daudit_job(d, j, AUDIT_CAT_JOB, "egress", target, reason[0] == '\0',
		    AUDIT_LVL_INFO, "%s%s: %llu bytes sent, %llu received%s%s%s",
		    c->tls ? "CONNECT to " : "HTTP to ", addr[0] ? addr : "no address",
		    (unsigned long long)c->up, (unsigned long long)c->down,
		    reason[0] ? "; " : "", reason, throttled);
	if (j->egress_rows == NULL)
		j->egress_rows = result_new("");
	result_add_egress(j->egress_rows, host, c->port, !refused, reason, c->up, c->down,
	    c->throttled_ms);
}

static void stop_channel(struct sandqd *d);

static void
on_readable(uv_poll_t *h, int status, int events)
{
	struct sandqd *d = h->data;
	struct degress *g = d->egress;
	struct msg m;
	const char *broken = status < 0 ? "channel error" : NULL;

	(void)events;
	msg_init(&m);
	/* Bounded: each readable event handles what is queued, then returns. */
	for (int i = 0; broken == NULL && i < 64; i++) {
		struct djob *j;
		int rc = msg_recv(g->fd, &m, MSG_MAX);

		if (rc == -EAGAIN)
			break;
		if (rc <= 0 || m.fd >= 0) {
			broken = rc == 0 ? "closed its channel" : "sent a malformed frame";
			break;
		}
		j = job_by_seq(g, m.hdr.job_id);
		if (m.hdr.type == MSG_EGRESS_CONN && m.len == sizeof(struct msg_egress_conn)) {
			struct msg_egress_conn c;

			memcpy(&c, m.data, sizeof(c));
			if (j != NULL)
				on_conn(d, j, &c);
		} else if (m.hdr.type == MSG_EGRESS_ENDED && m.len == sizeof(uint64_t)) {
			uint64_t dropped;

			memcpy(&dropped, m.data, sizeof(dropped));
			if (j != NULL && dropped > 0)
				daudit_job(d, j, AUDIT_CAT_POLICY, "egress_refused", "*", false,
				    AUDIT_LVL_WARNING, "%llu more connections, not listed one "
				    "by one", (unsigned long long)dropped);
			if (j != NULL && j->egress_held != NULL)
				release(d, j);
		} else {
			broken = "sent a frame out of place";
		}
		msg_clear(&m);
	}
	msg_clear(&m);
	if (broken != NULL) {
		/* A confused proxy: killed; the reaper restarts it. */
		log_warnx("egress proxy: %s; killing it", broken);
		if (g->pid > 0)
			kill(g->pid, SIGKILL);
		stop_channel(d);
	}
}

/* Closes our channel; the jobs it held lose their proxy. */
static void
stop_channel(struct sandqd *d)
{
	struct degress *g = d->egress;

	if (g->poll != NULL) {
		uv_poll_stop(g->poll);
		uv_close((uv_handle_t *)g->poll, (uv_close_cb)free);
		g->poll = NULL;
	}
	if (g->fd >= 0) {
		close(g->fd);
		g->fd = -1;
	}
	/* Their listeners died with the proxy: held results go out now. */
	while (g->njobs > 0) {
		struct djob *j = g->jobs[g->njobs - 1];

		if (j->egress_held != NULL) {
			release(d, j);
		} else {
			job_forget(g, j);
			result_free(j->egress_rows);
			j->egress_rows = NULL;
		}
	}
}

static void
start(struct sandqd *d)
{
	struct degress *g = d->egress;
	const struct config *c = &d->cfg;
	char uid[24], *hosts = NULL, *addrs = NULL;
	size_t len = 0;
	FILE *f;
	int sv[2];
	pid_t pid;

	if (g->pid > 0 || d->stopping)
		return;
	snprintf(uid, sizeof(uid), "%lld", (long long)c->egress_uid);
	if ((f = open_memstream(&hosts, &len)) == NULL)
		fatal("open_memstream");
	for (size_t i = 0; i < c->negress_hosts; i++)
		fprintf(f, "%s%s", i ? "," : "", c->egress_hosts[i]);
	fclose(f);
	if ((f = open_memstream(&addrs, &len)) == NULL)
		fatal("open_memstream");
	for (size_t i = 0; i < c->negress_allow_addrs; i++)
		fprintf(f, "%s%s", i ? "," : "", c->egress_allow_addrs[i]);
	fclose(f);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		log_warn("egress proxy: socketpair");
		goto out_free;
	}
	pid = fork();
	if (pid < 0) {
		log_warn("egress proxy: fork");
		close(sv[0]);
		close(sv[1]);
		goto out_free;
	}
	if (pid == 0) {
		char *argv[] = { g->path, "--uid", uid, "--hosts", hosts,
		    "--allow-addrs", addrs, "--log-level", c->log_level, NULL };
		sigset_t none;

		/* Its channel on fd 3; nothing else of ours crosses exec. */
		if (dup2(sv[1], 3) < 0)
			_exit(127);
		syscall(SYS_close_range, 4U, ~0U, 0U);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(g->path, argv);
		_exit(127);
	}
	close(sv[1]);
	fd_set_nonblock(sv[0], true);
	g->fd = sv[0];
	g->pid = pid;
	g->poll = xcalloc(1, sizeof(*g->poll));
	uv_poll_init(d->loop, g->poll, g->fd);
	g->poll->data = d;
	uv_poll_start(g->poll, UV_READABLE, on_readable);
	log_info("egress proxy: started (pid %d, uid %s)", (int)pid, uid);
out_free:
	free(hosts);
	free(addrs);
}

static void
on_restart(uv_timer_t *t)
{
	struct sandqd *d = t->data;

	if (egress_wanted(&d->cfg))
		start(d);
}

/*
 * A result held past EGRESS_HOLD_MAX_MS goes out with the rows reported so
 * far: a proxy that hangs delays results, it never keeps them.
 */
static void
on_hold(uv_timer_t *t)
{
	struct sandqd *d = t->data;
	struct degress *g = d->egress;
	uint64_t now = uv_now(d->loop);
	bool more = false;

	for (size_t i = 0; i < g->njobs; ) {
		struct djob *j = g->jobs[i];

		if (j->egress_held != NULL && now - j->egress_held_at >= EGRESS_HOLD_MAX_MS) {
			log_warnx("job %s: the egress proxy did not end it in %d ms; its "
			    "result goes out with the connections reported so far", j->id,
			    EGRESS_HOLD_MAX_MS);
			release(d, j);	/* removes it from g->jobs: same i again */
			continue;
		}
		more |= j->egress_held != NULL;
		i++;
	}
	if (!more)
		uv_timer_stop(t);
}

void
egress_init(struct sandqd *d)
{
	struct degress *g = xcalloc(1, sizeof(*g));

	g->fd = -1;
	g->path = egress_find(&d->cfg);
	g->backoff_ms = 100;
	uv_timer_init(d->loop, &g->restart);
	g->restart.data = d;
	uv_timer_init(d->loop, &g->hold);
	g->hold.data = d;
	d->egress = g;
	egress_reconcile(d);
}

void
egress_reconcile(struct sandqd *d)
{
	struct degress *g = d->egress;

	if (g == NULL)
		return;
	if (egress_wanted(&d->cfg) && g->pid == 0 &&
	    !uv_is_active((uv_handle_t *)&g->restart)) {
		if (access(g->path, X_OK) < 0)
			log_warnx("egress proxy %s: %s; net \"allow\" jobs reach nothing",
			    g->path, strerror(errno));
		start(d);
	}
}

void
egress_reap(struct sandqd *d)
{
	struct degress *g = d->egress;
	int st;

	if (g == NULL || g->pid <= 0 || waitpid(g->pid, &st, WNOHANG) != g->pid)
		return;
	g->pid = 0;
	stop_channel(d);
	if (d->stopping || d->draining)
		return;
	log_warnx("egress proxy: %s %d; restarting in %lld ms",
	    WIFSIGNALED(st) ? "died of signal" : "exited with status",
	    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), (long long)g->backoff_ms);
	uv_timer_start(&g->restart, on_restart, (uint64_t)g->backoff_ms, 0);
	g->backoff_ms = g->backoff_ms * 2 > EGRESS_BACKOFF_MAX_MS ? EGRESS_BACKOFF_MAX_MS :
	    g->backoff_ms * 2;
}

void
egress_job_listener(struct sandqd *d, struct djob *j, int fd)
{
	struct degress *g = d->egress;
	struct msg_egress_job *m;
	size_t off = 0;
	int rc;

	j->egress_listeners++;
	if (g == NULL || g->fd < 0) {
		/* No proxy: the listener closes here, and the job reaches nothing. */
		log_warnx("job %s: no egress proxy runs; its connections are refused", j->id);
		return;
	}
	if (j->egress) {
		/* The next case's sandbox: the proxy knows the job already. */
		if ((rc = msg_send(g->fd, MSG_EGRESS_LISTEN, j->seq, NULL, 0, fd)) < 0)
			log_warnx("job %s: the egress proxy took no listener: %s", j->id,
			    strerror(-rc));
		return;
	}
	m = xcalloc(1, sizeof(*m));
	snprintf(m->job, sizeof(m->job), "%s", j->id);
	snprintf(m->tenant, sizeof(m->tenant), "%s", d->tenants[j->tenant].name);
	m->conns_max = (uint32_t)d->cfg.egress_conns_max;
	m->bytes_max = (uint64_t)d->cfg.egress_bytes_max;
	m->rate = (uint64_t)config_egress_rate(&d->cfg, d->tenants[j->tenant].name);
	/* The list admitted at intake: each pattern bounded, no comma in it. */
	for (size_t i = 0; i < j->job->nallow; i++)
		off += (size_t)snprintf(m->allow + off, sizeof(m->allow) - off, "%s%s",
		    i ? "," : "", j->job->allow[i]);
	rc = msg_send(g->fd, MSG_EGRESS_JOB, j->seq, m, sizeof(*m), fd);
	free(m);
	if (rc < 0) {
		log_warnx("job %s: the egress proxy took no listener: %s", j->id,
		    strerror(-rc));
		return;
	}
	g->jobs = xreallocarray(g->jobs, g->njobs + 1, sizeof(*g->jobs));
	g->jobs[g->njobs++] = j;
	j->egress = true;
}

bool
egress_hold(struct sandqd *d, struct djob *j, struct result *r)
{
	struct degress *g = d->egress;

	if (g == NULL || !j->egress)
		return false;
	if (g->fd < 0 || msg_send(g->fd, MSG_EGRESS_END, j->seq, NULL, 0, -1) < 0) {
		j->egress_held = r;
		release(d, j);
		return true;
	}
	j->egress_held = r;
	j->egress_held_at = uv_now(d->loop);
	if (!uv_is_active((uv_handle_t *)&g->hold))
		uv_timer_start(&g->hold, on_hold, EGRESS_HOLD_MAX_MS / 5, EGRESS_HOLD_MAX_MS / 5);
	return true;
}

void
egress_job_drop(struct sandqd *d, struct djob *j)
{
	struct degress *g = d->egress;

	if (g == NULL || !j->egress)
		return;
	if (g->fd >= 0)
		(void)msg_send(g->fd, MSG_EGRESS_END, j->seq, NULL, 0, -1);
	job_forget(g, j);
	result_free(j->egress_rows);
	j->egress_rows = NULL;
	result_free(j->egress_held);
	j->egress_held = NULL;
}

size_t
egress_pending(const struct sandqd *d)
{
	size_t n = 0;

	for (size_t i = 0; d->egress != NULL && i < d->egress->njobs; i++)
		n += d->egress->jobs[i]->egress_held != NULL;
	return n;
}

void
egress_stop(struct sandqd *d)
{
	struct degress *g = d->egress;

	if (g == NULL)
		return;
	uv_timer_stop(&g->restart);
	uv_close((uv_handle_t *)&g->restart, NULL);
	uv_timer_stop(&g->hold);
	uv_close((uv_handle_t *)&g->hold, NULL);
	stop_channel(d);
	if (g->pid > 0) {
		/* It exits on its channel's EOF; reaped here, by its pid. */
		kill(g->pid, SIGTERM);
		waitpid(g->pid, NULL, 0);
		g->pid = 0;
	}
}

void
egress_free(struct sandqd *d)
{
	if (d->egress == NULL)
		return;
	free(d->egress->jobs);
	free(d->egress->path);
	free(d->egress);
	d->egress = NULL;
}

/*** Sandboxes' allow lists ***/

static void
on_sandbox_allow(void *arg, int status, const char *val, size_t len)
{
	struct djob *j = arg;
	struct sandqd *d = j->d;
	const struct tenant *t = &d->tenants[j->tenant];
	struct intake in = { .cfg = &d->cfg, .tenant = t->name,
	    .conf = t->has_conf ? &t->conf : NULL };
	struct intake_refusal r;

	if (status == -ENOTCONN) {
		djob_free(j);	/* its entry stays pending: read again */
		return;
	}
	if (status < 0) {
		jobs_answer_error(d, j, ST_INTERNAL, "net", "field 'allow': the sandbox's "
		    "allow list could not be read from Redis");
		return;
	}
	if (!intake_sandbox_allow(&in, j->job, status == 1 ? val : NULL, len, &j->norm,
	    &j->normlen, &r)) {
		jobs_refused_rule(d, j, &r);
		return;
	}
	log_debug("job %s (%s): sandbox '%s''s allow list", j->id, t->name, j->job->sandbox);
	if (imgnames_lookup(d, j))
		return;
	jobs_admitted(d, j);
	sched_dispatch(d);
}

bool
egress_sandbox_allow(struct sandqd *d, struct djob *j)
{
	int rc;

	if (!intake_needs_sandbox_allow(j->job))
		return false;
	j->d = d;
	if ((rc = rq_sbxallow_get(d->rq, j->tenant, j->job->sandbox, on_sandbox_allow,
	    j)) < 0) {
		if (rc == -ENOTCONN)
			djob_free(j);	/* Redis is down: read again once it is back */
		else
			jobs_answer_error(d, j, ST_INTERNAL, "net", "field 'allow': the "
			    "sandbox's allow list could not be read from Redis");
	}
	return true;
}

void
egress_sandbox_result(struct sandqd *d, const struct djob *j, const struct result *r)
{
	const struct job *job = j->job;
	char *list = NULL;
	size_t off = 0, len = 0;

	if (job == NULL || job->sandbox == NULL || r->status != ST_OK)
		return;
	switch (job->op) {
	case OP_SANDBOX_CREATE:
		/* Admitted: each pattern bounded, printable, without a comma. */
		for (size_t i = 0; i < job->nallow; i++)
			len += strlen(job->allow[i]) + 1;
		if (len > 0) {
			list = xmalloc(len);
			for (size_t i = 0; i < job->nallow; i++)
				off += (size_t)snprintf(list + off, len - off, "%s%s",
				    i ? "," : "", job->allow[i]);
		}
		if (rq_sbxallow_set(d->rq, j->tenant, job->sandbox, list) < 0)
			log_warnx("job %s: sandbox '%s''s allow list not kept (Redis)", j->id,
			    job->sandbox);
		free(list);
		break;
	case OP_SANDBOX_FORK:
		/* One step, before the result goes out: a run after it reads it. */
		if (job->to != NULL)
			(void)rq_sbxallow_copy(d->rq, j->tenant, job->sandbox, job->to);
		break;
	case OP_SANDBOX_DELETE:
		(void)rq_sbxallow_set(d->rq, j->tenant, job->sandbox, NULL);
		break;
	default:
		break;
	}
}
