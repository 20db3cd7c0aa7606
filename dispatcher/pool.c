/*
 * pool.c - the worker table: spawn, handshake, dispatch, reap, respawn.
 *
 * Start-up of a worker (STYLE 11): socketpair(SOCK_SEQPACKET) -> fork ->
 * in the child, the channel onto fd 3, every other descriptor but stdio
 * closed (the Redis sockets included), exec of sandq-worker for a fresh
 * address space. The worker introduces itself with MSG_HELLO; only then is
 * it idle.
 *
 * What a worker may send, and when, is the table `wdispatch` below: a frame
 * of a type it lists, in a state it allows, goes to its handler; anything
 * else, and any malformed frame, means the worker is broken or compromised:
 * it is killed, its job is tried again (jobs_retry), and it is respawned.
 *
 * Reaping is driven by SIGCHLD (uv_signal_t -> pool_reap). A worker that died
 * is respawned after a delay that doubles from respawn_backoff_ms up to 10 s
 * while workers keep dying without finishing a job, so a crash loop cannot
 * spin the host.
 *
 * Hygiene. A worker is retired after its result, and replaced at once, when
 * it has run worker_max_jobs jobs or its own resident set has grown more
 * than worker_max_memory_growth since its HELLO (worn_out()). One timer for
 * the whole pool (watch_cb(), every POOL_WATCH_MS) kills a worker stuck in
 * set-up (no HELLO within worker_setup_timeout_ms) or on a job (no result
 * worker_stuck_grace_ms past the job's wall limit), like a broken one: the
 * reaper tries its job again and respawns it with the usual backoff.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "dispatcher.h"

#define RESPAWN_MAX_MS 10000
#define POOL_WATCH_MS 500		/* how often watch_cb() looks */

static void spawn(struct sandqd *d, struct wslot *w);

/*** Dispatch table ***/

#define WS(st) (1u << (st))

typedef void wmsg_handler(struct sandqd *, struct wslot *, struct msg *);

static wmsg_handler h_hello, h_done, h_committed, h_output, h_net;

static const struct {
	uint32_t type;
	unsigned states;		/* WS() bits the frame is allowed in */
	wmsg_handler *fn;
} wdispatch[] = {
	{ MSG_HELLO, WS(W_STARTING), h_hello },
	{ MSG_JOB_DONE, WS(W_BUSY), h_done },
	{ MSG_JOB_COMMITTED, WS(W_BUSY), h_committed },
	{ MSG_JOB_OUTPUT, WS(W_BUSY), h_output },
	{ MSG_JOB_NET, WS(W_BUSY), h_net },
};

/* Frees the poll handle once libuv is done with it. */
static void
poll_closed(uv_handle_t *h)
{
	free(h);
}

static void
close_channel(struct wslot *w)
{
	if (w->poll != NULL) {
		uv_poll_stop(w->poll);
		uv_close((uv_handle_t *)w->poll, poll_closed);
		w->poll = NULL;
	}
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
}

/* The slot's job, if any, failed with its worker: it is tried again. */
static void
fail_job(struct sandqd *d, struct wslot *w, const char *why)
{
	struct djob *j = w->run.job;

	if (j == NULL)
		return;
	w->run.job = NULL;
	egress_job_drop(d, j);
	d->tenants[j->tenant].running--;
	if (j->cancelled)
		jobs_cancelled(d, j, "while running");
	else if (j->committed > 0 && !shared_enabled(d))
		/* Its changes are in: running it again would apply them twice.
		 * (With the shared store the local commit never reached Redis,
		 * and the rerun starts from Redis's head.) */
		jobs_result_lost(d, j, j->committed);
	else
		jobs_retry(d, j, "worker %d %s while running the job", w->index, why);
}

/*
 * A broken or compromised worker: kill it. Its job stays on the slot until
 * SIGCHLD reaps the worker, so the job's result can say how it ended.
 */
static void
worker_broken(struct sandqd *d, struct wslot *w, const char *why)
{
	(void)d;
	if (w->run.state == W_DEAD)
		return;
	log_warnx("worker/%d: %s; killing it", w->index, why);
	snprintf(w->why, sizeof(w->why), "%s", why);
	if (w->pid > 0)
		kill(w->pid, SIGKILL);
	close_channel(w);
	w->run.state = W_DEAD;
}

static void
h_hello(struct sandqd *d, struct wslot *w, struct msg *m)
{
	struct msg_hello h;

	if (m->len != sizeof(h)) {
		worker_broken(d, w, "malformed HELLO");
		return;
	}
	memcpy(&h, m->data, sizeof(h));
	if ((pid_t)h.pid != w->pid || (int)h.index != w->index) {
		worker_broken(d, w, "HELLO from the wrong worker");
		return;
	}
	runq_slot_idle(&d->runq, &w->run);
	/* Its baseline: the growth worn_out() measures starts here. */
	if (d->cfg.worker_max_memory_growth == 0 || proc_rss(w->pid, &w->rss_base) < 0)
		w->rss_base = 0;
	log_debug("worker/%d: ready (pid %d)", w->index, (int)w->pid);
	sched_dispatch(d);
}

static int64_t
mono_ms(void)
{
	return mono_ns() / 1000000;
}

/*
 * Whether w, which just finished a job, should make way for a fresh process:
 * it ran worker_max_jobs jobs, or its own resident set (its sandboxes are
 * other processes) grew past worker_max_memory_growth since its HELLO. An
 * unreadable /proc skips the check.
 */
static bool
worn_out(struct sandqd *d, struct wslot *w)
{
	uint64_t rss;

	if (d->cfg.worker_max_jobs > 0 && w->jobs >= (uint64_t)d->cfg.worker_max_jobs) {
		log_debug("worker/%d: %llu jobs done, replaced", w->index,
		    (unsigned long long)w->jobs);
		return true;
	}
	if (d->cfg.worker_max_memory_growth > 0 && w->rss_base > 0 &&
	    proc_rss(w->pid, &rss) == 0 && rss > w->rss_base &&
	    rss - w->rss_base > (uint64_t)d->cfg.worker_max_memory_growth) {
		log_info("worker/%d: resident set grew by %llu KiB (%llu to %llu KiB) "
		    "in %llu job%s, past worker_max_memory_growth; replaced", w->index,
		    (unsigned long long)((rss - w->rss_base) >> 10),
		    (unsigned long long)(w->rss_base >> 10), (unsigned long long)(rss >> 10),
		    (unsigned long long)w->jobs, w->jobs == 1 ? "" : "s");
		return true;
	}
	return false;
}

/*
 * A net "allow" job's listener, made in its namespace before it starts:
 * once per job (a run with cases: once per case, each case's sandbox being
 * new), for a job admitted with net "allow" only.
 */
static void
h_net(struct sandqd *d, struct wslot *w, struct msg *m)
{
	struct djob *j = w->run.job;

	/* A run with cases: one per case's sandbox, as many as its cases. */
	if (m->hdr.job_id != j->seq || m->len != 0 || m->fd < 0 || j->job == NULL ||
	    j->job->net_mode != NET_ALLOW ||
	    j->egress_listeners >= (j->job->ncases > 0 ? j->job->ncases : 1)) {
		worker_broken(d, w, "sent a listener out of place");
		return;
	}
	egress_job_listener(d, j, m->fd);
}

/*
 * A piece of a streaming job's output: relayed to its Redis stream at once.
 * Only for a job that asked, within twice its output limit (both streams).
 */
static void
h_output(struct sandqd *d, struct wslot *w, struct msg *m)
{
	struct djob *j = w->run.job;
	const unsigned char *p = m->data;

	if (m->hdr.job_id != j->seq || m->len < 2 || (p[0] != 1 && p[0] != 2) ||
	    !j->stream || j->job == NULL ||
	    j->streamed + m->len - 1 > 2 * j->job->limits.output_bytes) {
		worker_broken(d, w, "sent live output out of place");
		return;
	}
	j->streamed += m->len - 1;
	if (rq_output(d->rq, j->tenant, j->id, p[0], p + 1, m->len - 1,
	    d->cfg.result_ttl_s * 1000) < 0)
		log_debug("job %s: live output not relayed (Redis down)", j->id);
}

/* The job's run committed its sandbox: noted, its result is still to come. */
static void
h_committed(struct sandqd *d, struct wslot *w, struct msg *m)
{
	uint64_t v;

	if (m->hdr.job_id != w->run.job->seq || m->len != sizeof(v)) {
		worker_broken(d, w, "sent a malformed commit report");
		return;
	}
	memcpy(&v, m->data, sizeof(v));
	w->run.job->committed = v;
}

static void
h_done(struct sandqd *d, struct wslot *w, struct msg *m)
{
	struct djob *j = w->run.job;

	if (m->hdr.job_id != j->seq) {
		worker_broken(d, w, "result for a job it was not running");
		return;
	}
	w->run.job = NULL;
	runq_slot_idle(&d->runq, &w->run);
	w->jobs++;
	w->backoff_ms = d->cfg.respawn_backoff_ms;
	d->tenants[j->tenant].running--;
	d->read_dry = false;
	jobs_worker_result(d, j, w->index, m->data, m->len);
	/* Worn: it leaves after this job and a fresh one takes its slot. */
	if (!d->stopping && !d->draining && worn_out(d, w)) {
		exporter_count(d, EXP_RECYCLED, 0);
		w->retiring = true;
		w->since_ms = mono_ms();
		close_channel(w);
		w->run.state = W_DEAD;
	}
	sched_dispatch(d);
	sandqd_check_drained(d);
}

static void
on_readable(uv_poll_t *h, int status, int events)
{
	struct wslot *w = h->data;
	struct sandqd *d = w->d;
	struct msg m;
	int rc;

	(void)events;
	if (status < 0) {
		worker_broken(d, w, "channel error");
		return;
	}
	msg_init(&m);
	/* Bounded: each readable event handles what is queued, then returns. */
	for (int i = 0; i < 16 && w->fd >= 0; i++) {
		size_t k;

		rc = msg_recv(w->fd, &m, 2 * (size_t)d->cfg.ceiling.output_bytes + MSG_MAX);
		if (rc == -EAGAIN)
			break;
		if (rc == 0) {
			worker_broken(d, w, "closed its channel");
			break;
		}
		if (rc < 0) {
			worker_broken(d, w, rc == -EBADMSG ? "sent a malformed frame" :
			    "channel read failed");
			break;
		}
		for (k = 0; k < sizeof(wdispatch) / sizeof(wdispatch[0]); k++)
			if (wdispatch[k].type == m.hdr.type)
				break;
		if (k == sizeof(wdispatch) / sizeof(wdispatch[0]) ||
		    !(wdispatch[k].states & WS(w->run.state))) {
			char why[96];
			snprintf(why, sizeof(why), "sent %s (%u) out of place",
			    msg_type_name(m.hdr.type), m.hdr.type);
			worker_broken(d, w, why);
			break;
		}
		wdispatch[k].fn(d, w, &m);
		msg_clear(&m);
	}
	msg_clear(&m);
}

/*** Spawn and respawn ***/

/* How long w's job may go without a result before w counts as stuck. */
static int64_t
stuck_after_ms(const struct sandqd *d, const struct djob *j)
{
	uint64_t wall = j != NULL && j->job != NULL && JOB_OP_RUNS(j->job->op) ?
	    j->job->limits.wall_ms : d->cfg.ceiling.wall_ms;

	/*
	 * A run with cases runs its command once per case, each in a sandbox
	 * of its own with its own limit: a second of set-up per case on top.
	 */
	if (j != NULL && j->job != NULL && j->job->ncases > 1)
		wall = (wall + 1000) * j->job->ncases;
	return (int64_t)wall + d->cfg.worker_stuck_grace_ms;
}

/*
 * Every POOL_WATCH_MS: kills the workers that are stuck (blocked, stopped,
 * looping) before HELLO or on a job; the reaper then answers the job and
 * respawns them. A retired worker that does not exit once its channel is
 * closed is killed after worker_stuck_grace_ms, so its slot comes back. One
 * timer for the pool: a scan of at most 1,024 slots twice a second costs
 * nothing, where a timer per slot would be re-armed at every job; a kill
 * comes up to POOL_WATCH_MS late, which no timeout here needs to beat.
 */
static void
watch_cb(uv_timer_t *t)
{
	struct sandqd *d = t->data;
	int64_t now = mono_ms();

	for (size_t i = 0; i < d->nslots; i++) {
		struct wslot *w = &d->slots[i];
		int64_t age = now - w->since_ms;
		char why[96];

		if (w->run.state == W_STARTING && age > d->cfg.worker_setup_timeout_ms) {
			snprintf(why, sizeof(why), "was stuck in set-up: no HELLO %lld ms "
			    "after it started", (long long)d->cfg.worker_setup_timeout_ms);
			worker_broken(d, w, why);
		} else if (w->run.state == W_BUSY && age > stuck_after_ms(d, w->run.job)) {
			snprintf(why, sizeof(why), "was stuck: no result %lld ms after the "
			    "job's wall limit", (long long)d->cfg.worker_stuck_grace_ms);
			worker_broken(d, w, why);
		} else if (w->run.state == W_DEAD && w->retiring && w->pid > 0 &&
		    age > d->cfg.worker_stuck_grace_ms) {
			log_warnx("worker/%d: still running %lld ms after it was retired; "
			    "killing it", w->index, (long long)age);
			kill(w->pid, SIGKILL);
			w->since_ms = now;
		}
	}
}

static void
respawn_cb(uv_timer_t *t)
{
	struct wslot *w = t->data;

	spawn(w->d, w);
}

static void
spawn(struct sandqd *d, struct wslot *w)
{
	char idx[16], uid[24], rundir[1024], storedir[1024], keep[24], sock[24],
	    nsock[24], iuid[24], eport[8];
	int sv[2];
	pid_t pid;

	w->jobs = 0;		/* this process's count, for worker_max_jobs */

	if (d->stopping)
		return;
	snprintf(idx, sizeof(idx), "%d", w->index);
	snprintf(uid, sizeof(uid), "%lld", (long long)d->cfg.sandbox_uid_base + w->index);
	snprintf(rundir, sizeof(rundir), "%s/run/w%d", d->cfg.state, w->index);
	snprintf(storedir, sizeof(storedir), "%s/store", d->cfg.state);
	snprintf(keep, sizeof(keep), "%lld", (long long)d->cfg.keep_versions);
	snprintf(sock, sizeof(sock), "%lld", (long long)d->cfg.job_socket_bytes);
	snprintf(nsock, sizeof(nsock), "%lld", (long long)d->cfg.job_sockets);
	snprintf(iuid, sizeof(iuid), "%lld", (long long)d->cfg.image_unpack_uid);
	snprintf(eport, sizeof(eport), "%lld", (long long)d->cfg.egress_port);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		log_warn("worker/%d: socketpair", w->index);
		goto out_retry;
	}
	pid = fork();
	if (pid < 0) {
		log_warn("worker/%d: fork", w->index);
		close(sv[0]);
		close(sv[1]);
		goto out_retry;
	}
	if (pid == 0) {
		/* The image cache: its records to read, its layers to mount. */
		char *cache = (char *)(uintptr_t)images_root(d);
		char *argv[] = { d->worker_path, "--index", idx, "--run-dir", rundir,
		    "--store-dir", storedir, "--uid", uid, "--log-level", d->cfg.log_level,
		    "--log-format", d->cfg.log_format,
		    "--keep-versions", keep, "--socket-bytes", sock,
		    "--sockets", nsock, "--image-cache", cache, "--image-uid", iuid,
		    "--egress-port", eport, NULL, NULL, NULL };
		size_t na = sizeof(argv) / sizeof(argv[0]) - 3;
		sigset_t none;

		if (strcmp(d->cfg.workspace_overlay, "off") == 0)
			argv[na++] = "--no-overlay";
		if (strcmp(d->cfg.job_netns, "fresh") == 0)
			argv[na++] = "--net-fresh";

		/* The channel on fd 3; nothing else of ours crosses exec. */
		if (dup2(sv[1], 3) < 0)
			_exit(127);
		syscall(SYS_close_range, 4U, ~0U, 0U);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(d->worker_path, argv);
		_exit(127);
	}
	close(sv[1]);
	fd_set_nonblock(sv[0], true);
	w->fd = sv[0];
	w->pid = pid;
	w->run.state = W_STARTING;
	w->since_ms = mono_ms();
	w->rss_base = 0;
	w->run.last_sandbox[0] = '\0';	/* a new process caches nothing */
	w->poll = xcalloc(1, sizeof(*w->poll));
	w->poll->data = w;
	uv_poll_init(d->loop, w->poll, w->fd);
	uv_poll_start(w->poll, UV_READABLE | UV_DISCONNECT, on_readable);
	return;

out_retry:
	w->run.state = W_DOWN;
	uv_timer_start(&w->respawn, respawn_cb, (uint64_t)w->backoff_ms, 0);
}

int
pool_start(struct sandqd *d)
{
	d->slots = xcalloc(d->nslots, sizeof(*d->slots));
	d->runq.slots = xcalloc(d->nslots, sizeof(*d->runq.slots));
	d->runq.nslots = d->nslots;
	for (size_t i = 0; i < d->nslots; i++) {
		struct wslot *w = &d->slots[i];

		d->runq.slots[i] = &w->run;

		w->index = (int)i;
		w->fd = -1;
		w->d = d;
		w->backoff_ms = d->cfg.respawn_backoff_ms;
		uv_timer_init(d->loop, &w->respawn);
		w->respawn.data = w;
		spawn(d, w);
	}
	uv_timer_init(d->loop, &d->pool_watch);
	d->pool_watch.data = d;
	uv_timer_start(&d->pool_watch, watch_cb, POOL_WATCH_MS, POOL_WATCH_MS);
	return 0;
}

void
pool_reap(struct sandqd *d)
{
	pid_t pid;
	int st;

	/*
	 * Each worker by its pid, never waitpid(-1): sandqd has other
	 * children, skopeo and the layer unpacker run by an image pull in a
	 * thread (images.c), whose exit status that thread must read itself.
	 */
	for (size_t k = 0; k < d->nslots; k++) {
		struct wslot *w = &d->slots[k];
		char why[160];

		if (w->pid <= 0 || (pid = waitpid(w->pid, &st, WNOHANG)) <= 0)
			continue;
		if (w->why[0] && strcmp(w->why, "closed its channel") != 0)
			snprintf(why, sizeof(why), "was killed (it %s)", w->why);
		else if (WIFSIGNALED(st))
			snprintf(why, sizeof(why), "died of signal %d", WTERMSIG(st));
		else
			snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(st));
		w->why[0] = '\0';
		if (w->run.job != NULL && w->run.job->cancelled) {
			/* Killed on purpose: answered, and replaced at once. */
			fail_job(d, w, why);
			w->retiring = true;
		}
		if (w->retiring && w->run.job == NULL) {
			/* Replaced on purpose: at once, and no warning. */
			w->retiring = false;
			close_channel(w);
			w->pid = 0;
			w->run.state = W_DOWN;
			if (!d->stopping && !d->draining)
				spawn(d, w);
			continue;
		}
		if (!d->stopping || w->run.job != NULL)
			log_warnx("worker/%d (pid %d) %s", w->index, (int)pid, why);
		fail_job(d, w, why);
		close_channel(w);
		w->pid = 0;
		w->run.state = W_DOWN;
		/* While draining, no replacement: the others finish what is left. */
		if (!d->stopping && !d->draining) {
			uv_timer_start(&w->respawn, respawn_cb, (uint64_t)w->backoff_ms, 0);
			w->backoff_ms = w->backoff_ms * 2 + 1;
			if (w->backoff_ms > RESPAWN_MAX_MS)
				w->backoff_ms = RESPAWN_MAX_MS;
		}
	}
	sched_dispatch(d);
	sandqd_check_drained(d);
}

/*** Use ***/

struct wslot *
pool_idle(struct sandqd *d)
{
	int i = runq_idle(&d->runq);

	return i >= 0 ? &d->slots[i] : NULL;
}

struct wslot *
pool_idle_for(struct sandqd *d, const struct djob *j)
{
	int i = runq_idle_for(&d->runq, j);

	return i >= 0 ? &d->slots[i] : NULL;
}

size_t
pool_count(const struct sandqd *d, enum wstate st)
{
	size_t n = 0;

	for (size_t i = 0; i < d->nslots; i++)
		n += d->slots[i].run.state == st;
	return n;
}

int
pool_send_job(struct sandqd *d, struct wslot *w, struct djob *j)
{
	int rc;

	struct msg_job_tenant jt = { .storage_quota = d->tenants[j->tenant].has_conf ?
	    d->tenants[j->tenant].conf.storage_quota_bytes : 0 };

	j->sent_at = now_ms();		/* metrics: queue and set-up times */
	rc = msg_send(w->fd, MSG_JOB_TENANT, j->seq, &jt, sizeof(jt), -1);
	if (rc == 0)
		rc = msg_send(w->fd, MSG_JOB_RUN, j->seq, j->norm, j->normlen, -1);
	if (rc < 0) {
		worker_broken(d, w, "cannot take a job");
		return rc;
	}
	runq_slot_busy(&w->run, j);
	w->since_ms = mono_ms();
	j->worker = w->index;
	daudit_job(d, j, AUDIT_CAT_JOB, "started", NULL, true, AUDIT_LVL_INFO,
	    "{\"worker\":%d}", w->index);
	return 0;
}

bool
pool_all_down(const struct sandqd *d)
{
	for (size_t i = 0; i < d->nslots; i++)
		if (d->slots[i].pid > 0)
			return false;
	return true;
}

void
pool_stop(struct sandqd *d, bool kill_now)
{
	d->stopping = true;
	uv_timer_stop(&d->pool_watch);
	for (size_t i = 0; i < d->nslots; i++) {
		struct wslot *w = &d->slots[i];

		uv_timer_stop(&w->respawn);
		if (kill_now && w->pid > 0)
			kill(w->pid, SIGKILL);
		/* A worker reads EOF and exits after its current job. */
		if (w->run.job == NULL || kill_now)
			close_channel(w);
	}
}

void
pool_cancel(struct sandqd *d, struct wslot *w)
{
	(void)d;
	w->run.job->cancelled = true;
	if (w->pid > 0)
		kill(w->pid, SIGKILL);
	close_channel(w);
	w->run.state = W_DEAD;
}

void
pool_kill(struct sandqd *d)
{
	for (size_t i = 0; i < d->nslots; i++) {
		struct wslot *w = &d->slots[i];

		uv_timer_stop(&w->respawn);
		if (w->pid > 0)
			kill(w->pid, SIGKILL);
	}
}

void
pool_close_handles(struct sandqd *d)
{
	uv_close((uv_handle_t *)&d->pool_watch, NULL);
	for (size_t i = 0; i < d->nslots; i++) {
		close_channel(&d->slots[i]);
		uv_close((uv_handle_t *)&d->slots[i].respawn, NULL);
	}
}
