/*
 * main.c - sandqd: start-up, signals, drain and shutdown.
 *
 *   sandqd --redis URL --state DIR [--workers N] [--config FILE]
 *          [--set KEY=VALUE]... [--log-level LEVEL] [-n] [--print-config]
 *
 * Options are applied in order: built-in defaults, then the config file,
 * then command-line flags, so a flag always wins. Serves in the foreground and
 * logs to stderr.
 *
 * SIGTERM or SIGINT drains: no new reads (a blocked read is woken with
 * CLIENT UNBLOCK), jobs already read run to completion and their results are
 * published, then workers are stopped and sandqd exits 0. Past
 * drain_timeout_ms the remaining jobs are killed and answered `internal`;
 * if Redis is unreachable even then, sandqd exits after a further grace
 * period, and the unanswered entries, still pending, are re-run by the next
 * start on this host (history read in sched.c).
 *
 * SIGHUP reloads: the config file is read again and the flags applied over
 * it as at start; the options marked reloadable (config.c) take effect at
 * once, the others are logged as needing a restart and kept. A file that
 * no longer parses changes nothing. Workers keep the log level they were
 * started with until they are replaced.
 *
 * Under systemd (Type=notify) sandqd says READY=1 once Redis answered and
 * the workers are forked, STOPPING=1 when it drains, RELOADING=1 and
 * READY=1 around a reload (notify.h).
 *
 * --help prints sandqd(8), the page man shows (docs/man/sandqd.8.scd), so
 * the two cannot disagree: a new option goes into the page too.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../workspace/perms.h"
#include "dispatcher.h"
#include "notify.h"

#define SANDQ_VERSION "0.1.0"
#define DRAIN_GRACE_MS 5000

/* The command line, kept to apply again over the file on SIGHUP. */
static int main_argc;
static char **main_argv;
static const char *main_config_file;
static uv_signal_t sig_hup;

/* sandqd(8) as mandoc renders it: docs/man/sandqd.8.scd, made into C at
 * build time by docs/man/help2c.py (build/gen/sandqd_man.c). */
extern const char sandqd_man[];

/*
 * Exits with CODE: 0 after printing sandqd(8) (--help), else after a
 * one-line usage on stderr.
 */
static void __attribute__((noreturn))
usage(int code)
{
	if (code == 0)
		fputs(sandqd_man, stdout);
	else
		fprintf(stderr, "usage: sandqd [--config FILE] [--redis URL] [--state DIR] "
		    "[options] (see --help)\n");
	exit(code);
}

/* The worker binary: configured, else beside sandqd, else in libexec. */
static char *
find_worker(const struct config *c)
{
	char self[PATH_MAX], *p;
	ssize_t n;

	if (c->worker_path[0] != '\0')
		return xstrdup(c->worker_path);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		xasprintf(&p, "%s/sandq-worker", dirname(self));
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return xstrdup(SANDQ_LIBEXECDIR "/sandq-worker");
}

static void
mkdir_p(const char *path)
{
	char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			fatal("mkdir %s", buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		fatal("mkdir %s", buf);
}

/*** Redis callbacks ***/

/*
 * Writes the path presets this build enforces as PREFIX:perm_presets, at
 * each (re)connection: a Redis that restarted empty gets them back, and
 * after an upgrade the newest host's table is the one listed.
 */
static void
presets_publish(struct sandqd *d)
{
	char *text = perms_presets_json();

	if (text == NULL || rq_perm_presets(d->rq, text) != 0)
		log_warnx("redis: cannot publish the path presets");
	free(text);
}

static void
on_ready(void *arg)
{
	struct sandqd *d = arg;

	static bool ready;

	jobs_publish_pending(d);
	sched_dispatch(d);
	admit_watch(d);
	status_now(d);
	presets_publish(d);
	/* The workers were forked before Redis was asked (main()). */
	if (!ready && !d->draining) {
		ready = true;
		notify_send("READY=1\nSTATUS=serving");
		log_info("ready: redis answered, %zu worker%s forked", d->nslots,
		    d->nslots == 1 ? "" : "s");
	}
}

static void
on_lost(void *arg)
{
	struct sandqd *d = arg;

	log_warnx("redis: lost; results are kept until it is back");
	/*
	 * An entry being delivered when the connection dropped is pending
	 * for us without our knowing: once back, read our own pending
	 * entries again (those we hold are skipped), as at a restart, rather
	 * than leave it to a takeover lease_ms later.
	 */
	d->history_done = false;
}

static void
on_watched(void *arg, size_t tenant, const char *entry_id, const char *job,
    size_t joblen)
{
	admit_watched(arg, tenant, entry_id, job, joblen);
}

static void
on_watch_done(void *arg, int status)
{
	(void)status;
	admit_watch(arg);
}

static void
on_entry(void *arg, size_t tenant, const char *entry_id, const char *job,
    size_t joblen, size_t nfields, bool redelivered)
{
	if (redelivered)
		lease_redelivered(arg, tenant, entry_id, job, joblen, nfields);
	else
		jobs_entry(arg, tenant, entry_id, job, joblen, nfields, NULL);
}

static void
on_read_done(void *arg, int status, size_t n)
{
	sched_read_done(arg, status, n);
}

/*** Drain and shutdown ***/

static void
close_all(struct sandqd *d)
{
	uv_signal_stop(&d->sig_term);
	uv_signal_stop(&d->sig_int);
	uv_signal_stop(&d->sig_chld);
	uv_signal_stop(&sig_hup);
	uv_close((uv_handle_t *)&sig_hup, NULL);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_chld, NULL);
	uv_close((uv_handle_t *)&d->read_retry, NULL);
	uv_close((uv_handle_t *)&d->publish_retry, NULL);
	uv_close((uv_handle_t *)&d->drain_timer, NULL);
	tenants_stop(d);
	status_stop(d);
	admit_stop(d);
	lease_stop(d);
	sched_stop(d);
	cancel_stop(d);
	image_pull_stop(d);
	exporter_stop(d);
	pool_close_handles(d);
	rq_close(d->rq);
}

/* Stops workers and waits for them (they exit on EOF, at once). */
static void
stop_workers(struct sandqd *d)
{
	int64_t deadline = mono_ns() + 2000000000LL;

	pool_stop(d, false);
	while (!pool_all_down(d)) {
		bool reaped = false;

		/* By pid: an image pull's skopeo is a child too (pool_reap()). */
		for (size_t i = 0; i < d->nslots; i++) {
			pid_t pid = d->slots[i].pid;

			pid_t got = pid > 0 ? waitpid(pid, NULL, WNOHANG) : 0;

			if (got == pid || (got < 0 && errno == ECHILD)) {
				d->slots[i].pid = 0;
				reaped = true;
			}
		}
		if (reaped)
			continue;
		if (mono_ns() > deadline) {
			pool_stop(d, true);
			deadline = mono_ns() + 2000000000LL;
		}
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
	}
}

void
sandqd_check_drained(struct sandqd *d)
{
	if (!d->draining || d->stopping)
		return;
	if (rq_read_pending(d->rq) || sched_queued(d) > 0 || sched_running(d) > 0 ||
	    !TAILQ_EMPTY(&d->publish) || d->shared_inflight > 0 || egress_pending(d) > 0)
		return;
	log_info("drained: %llu job%s answered; stopping",
	    (unsigned long long)d->jobs_done, d->jobs_done == 1 ? "" : "s");
	stop_workers(d);
	egress_stop(d);
	close_all(d);
}

/*
 * First expiry: the drain timeout. Queued jobs are failed and running ones
 * killed; the reaper answers them `internal`, and the drain completes once
 * those answers are published. Second expiry, DRAIN_GRACE_MS later: Redis
 * never took them; exit anyway (the entries stay pending for the next start).
 */
static void
on_drain_timeout(uv_timer_t *t)
{
	struct sandqd *d = t->data;
	size_t unpublished = 0;
	struct djob *j;

	if (d->drain_grace) {
		TAILQ_FOREACH(j, &d->publish, link)
			unpublished++;
		log_warnx("exiting with %zu result%s unpublished; their entries stay "
		    "pending and run again on the next start", unpublished,
		    unpublished == 1 ? "" : "s");
		pool_kill(d);
		d->stopping = true;
		close_all(d);
		return;
	}
	log_warnx("drain timeout: killing %zu running job%s",
	    sched_running(d), sched_running(d) == 1 ? "" : "s");
	for (size_t i = 0; i < d->ntenants; i++) {
		struct djob *next;

		/* One whose sandbox is being pulled is failed when the pull ends. */
		for (j = TAILQ_FIRST(&d->tenants[i].queue); j != NULL; j = next) {
			next = TAILQ_NEXT(j, link);
			if (j->sync == SYNC_PULLING)
				continue;
			runq_remove(&d->tenants[i], j);
			jobs_fail(d, j, "sandqd shut down before the job started");
		}
	}
	d->drain_grace = true;
	pool_kill(d);
	uv_timer_start(&d->drain_timer, on_drain_timeout, DRAIN_GRACE_MS, 0);
	sandqd_check_drained(d);
}

static void
start_drain(struct sandqd *d, const char *why)
{
	if (d->draining)
		return;
	log_info("%s: draining (%zu running, %zu queued)", why, sched_running(d),
	    sched_queued(d));
	d->draining = true;
	notify_send("STOPPING=1\nSTATUS=draining");
	rq_unblock(d->rq);
	uv_timer_start(&d->drain_timer, on_drain_timeout,
	    (uint64_t)d->cfg.drain_timeout_ms, 0);
	sandqd_check_drained(d);
}

static void
on_signal(uv_signal_t *h, int signum)
{
	struct sandqd *d = h->data;

	if (signum == SIGCHLD) {
		egress_reap(d);
		pool_reap(d);
	}
	else
		start_drain(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/*** Configuration and reload ***/

/*
 * Applies the flags of argv (all but --config, read first by the caller)
 * to c. Sets *check and *print for -n and --print-config. Returns 0, or
 * -EINVAL with e->msg; exits on --help, --version and a usage error.
 */
static int
apply_flags(struct config *c, int argc, char **argv, bool *check, bool *print,
    struct err *e)
{
	static const struct option opts[] = {
		{ "redis", required_argument, NULL, 'r' },
		{ "state", required_argument, NULL, 's' },
		{ "workers", required_argument, NULL, 'w' },
		{ "config", required_argument, NULL, 'c' },
		{ "set", required_argument, NULL, 'o' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "check", no_argument, NULL, 'n' },
		{ "print-config", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const keys[] = {
		['r'] = "redis", ['s'] = "state", ['w'] = "workers", ['l'] = "log_level",
	};
	char *kv;
	int ch, rc;

	optind = 0;	/* GNU: start over (SIGHUP parses a second time). */
	while ((ch = getopt_long(argc, argv, "nhV", opts, NULL)) != -1) {
		switch (ch) {
		case 'r':
		case 's':
		case 'w':
		case 'l':
			xasprintf(&kv, "%s=%s", keys[ch], optarg);
			rc = config_set(c, kv, e);
			free(kv);
			if (rc < 0)
				return rc;
			break;
		case 'c': break;
		case 'o':
			if ((rc = config_set(c, optarg, e)) < 0)
				return rc;
			break;
		case 'n': *check = true; break;
		case 'p': *print = true; break;
		case 'h': usage(0);
		case 'V': printf("sandqd %s\n", SANDQ_VERSION); exit(0);
		default: usage(2);
		}
	}
	if (optind != argc)
		usage(2);
	return 0;
}

/* The whole configuration as at start: defaults, file, flags, finish. */
static int
load_config(struct config *c, bool *check, bool *print, struct err *e)
{
	int rc;

	config_defaults(c);
	if (main_config_file != NULL &&
	    (rc = config_load_file(c, main_config_file, e)) < 0)
		return rc;
	if ((rc = apply_flags(c, main_argc, main_argv, check, print, e)) < 0)
		return rc;
	return config_finish(c, e);
}

/* config_reload_cb: each option a reload found changed. */
static void
on_reload_note(void *arg, const char *name, const char *was, const char *now,
    bool applied)
{
	(void)arg;
	if (applied)
		log_info("SIGHUP: %s = %s (was %s)", name, now, was);
	else
		log_warnx("SIGHUP: %s = %s needs a restart; %s kept", name, now, was);
}

static void
on_hup(uv_signal_t *h, int signum)
{
	struct sandqd *d = h->data;
	struct config fresh;
	struct err e = { 0 };
	bool check = false, print = false;
	int n;

	(void)signum;
	notify_send("RELOADING=1");
	if (load_config(&fresh, &check, &print, &e) < 0) {
		log_warnx("SIGHUP: %s; configuration unchanged", e.msg);
	} else {
		n = config_reload(&d->cfg, &fresh, on_reload_note, NULL);
		log_setlevel(d->cfg.log_level);
		egress_reconcile(d);
		log_info("SIGHUP: reloaded %s: %d option%s changed",
		    main_config_file ? main_config_file : "the command line", n,
		    n == 1 ? "" : "s");
	}
	config_free(&fresh);
	notify_send(d->draining ? "STOPPING=1" : "READY=1");
}

/*** Main ***/

int
main(int argc, char **argv)
{
	struct sandqd sd, *d = &sd;
	struct rq_callbacks cb = { on_ready, on_lost, on_entry, on_watched, on_watch_done,
	    on_read_done };
	struct err e = { 0 };
	bool check = false, print = false;
	char *run;

	memset(d, 0, sizeof(*d));
	log_procinit("sandqd");

	/* The config file first, wherever --config appears, then the flags. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			main_config_file = argv[i + 1];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			main_config_file = argv[i] + 9;
	}
	main_argc = argc;
	main_argv = argv;
	if (load_config(&d->cfg, &check, &print, &e) < 0)
		fatalx("%s", e.msg);
	if (check) {
		printf("configuration OK\n");
		return 0;
	}
	if (print) {
		config_print(&d->cfg, stdout);
		return 0;
	}
	log_setlevel(d->cfg.log_level);
	/* Before the first line of the run; workers get it on their command line. */
	if (log_setformat(d->cfg.log_format) < 0)
		fatalx("log_format: unknown format '%s'", d->cfg.log_format);

	/* hiredis writes to sockets that may close under it. */
	signal(SIGPIPE, SIG_IGN);
	mkdir_p(d->cfg.state);
	xasprintf(&run, "%s/run", d->cfg.state);
	mkdir_p(run);
	free(run);
	/* The snapshot store: the workers' alone (store/store.h). */
	xasprintf(&run, "%s/store", d->cfg.state);
	if (mkdir(run, 0700) < 0 && errno != EEXIST)
		fatal("mkdir %s", run);
	free(run);
	d->worker_path = find_worker(&d->cfg);
	if (access(d->worker_path, X_OK) < 0)
		fatal("worker binary %s", d->worker_path);

	d->loop = uv_default_loop();
	tenants_init(d);
	TAILQ_INIT(&d->publish);
	TAILQ_INIT(&d->pushing);
	d->nslots = (size_t)d->cfg.workers;
	d->rq = rq_new(d->loop, d->cfg.redis, d->cfg.prefix, d->cfg.host,
	    d->cfg.tenants, d->cfg.ntenants, &cb, d, &e);
	if (d->rq == NULL)
		fatalx("%s", e.msg);

	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	uv_signal_init(d->loop, &d->sig_chld);
	d->sig_term.data = d->sig_int.data = d->sig_chld.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	uv_signal_start(&d->sig_chld, on_signal, SIGCHLD);
	uv_signal_init(d->loop, &sig_hup);
	sig_hup.data = d;
	uv_signal_start(&sig_hup, on_hup, SIGHUP);
	uv_timer_init(d->loop, &d->read_retry);
	uv_timer_init(d->loop, &d->publish_retry);
	uv_timer_init(d->loop, &d->drain_timer);
	d->read_retry.data = d->publish_retry.data = d->drain_timer.data = d;

	log_info("sandqd %s: host %s, %zu worker%s, %zu tenant%s, redis %s, state %s",
	    SANDQ_VERSION, d->cfg.host, d->nslots, d->nslots == 1 ? "" : "s",
	    d->ntenants, d->ntenants == 1 ? "" : "s", d->cfg.redis, d->cfg.state);
	cg_detect(&d->cg);
	if (cg_host_setup(&d->cg, getpid(), &e) < 0)
		log_warnx("cgroups unusable: %s", e.msg);
	if (d->cg.version == CG_NONE)
		log_warnx("no cgroups for jobs (%s): memory and processes are bounded "
		    "per process by rlimits only", d->cg.why);
	else
		log_info("jobs run in cgroup v%d", (int)d->cg.version);
	daudit_start(d);
	exporter_start(d);
	admit_init(d);
	images_start(d);
	sbximage_init(d);
	egress_init(d);
	pool_start(d);
	rq_start(d->rq);
	tenants_start(d);
	status_start(d);
	lease_start(d);
	sched_init(d);
	cancel_start(d);
	uv_run(d->loop, UV_RUN_DEFAULT);
	daudit_stop(d);
	shared_stop(d);

	/* Everything is closed; free what is left. */
	while (!TAILQ_EMPTY(&d->publish)) {
		struct djob *j = TAILQ_FIRST(&d->publish);
		TAILQ_REMOVE(&d->publish, j, link);
		djob_free(j);
	}
	uv_loop_close(d->loop);
	cg_host_cleanup(&d->cg, getpid());
	rq_free(d->rq);
	free(d->slots);
	free(d->runq.slots);
	tenants_free(d);
	images_free(d);
	sbximage_free(d);
	exporter_free(d);
	egress_free(d);
	free(d->worker_path);
	config_free(&d->cfg);
	log_info("stopped");
	return 0;
}
