/*
 * harness.h - a private redis-server and sandqd for integration tests.
 *
 * harness_start() makes a temporary folder, starts redis-server on a free
 * loopback port in it (retrying if another process takes the port first),
 * waits until it answers PING, starts build/sandqd against it and waits
 * until a job has run end to end. harness_stop() stops both by their pids
 * and removes the folder. harness_redis_start() is the first half alone,
 * for tests that need Redis and no sandqd (harness_stop() ends it too).
 * Nothing here assumes a server is already running.
 *
 * harness_registry_start() starts a private OCI registry (Debian's
 * docker-registry) the same way, for the image tests, and
 * harness_registry_push() copies an image into it with skopeo.
 *
 * A test finds its job's process by a marker (harness_marker()) that no
 * other test or run shares, below its own sandqd (harness_wait_job(),
 * harness_jobs()), and proves it gone machine-wide (harness_marker_gone()).
 */
#ifndef SANDQ_TEST_HARNESS_H
#define SANDQ_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "../libsandq/sandq.h"

struct harness {
	char dir[256];		/* temporary folder */
	char url[300];		/* redis://127.0.0.1:PORT */
	int port;
	pid_t redis_pid;
	pid_t sandqd_pid;
	char log[320];		/* sandqd's stderr */
	char sandqd[300];	/* the sandqd binary run */
	char sock[300];		/* redis-server's unix socket */
};

/*
 * A private redis-server (TCP on 127.0.0.1:port, and unix socket sock) in
 * a new temporary folder, answering PING; fills h->dir, port, url, sock
 * and redis_pid. Asserts on failure, having stopped what it started.
 */
void harness_redis_start(struct harness *h);
/* extra: NULL-terminated extra sandqd arguments, or NULL. */
void harness_start(struct harness *h, int workers, const char *const *extra);
/*
 * The second half of harness_start(): sandqd alone, on the harness's Redis
 * and state folder (again, after harness_stop_sandqd(): a restart), ready
 * once a job has run.
 */
void harness_sandqd_start(struct harness *h, int workers, const char *const *extra);
/* Sends SIGTERM to sandqd and returns its exit status (-1 if signalled). */
int harness_stop_sandqd(struct harness *h, int timeout_ms);
void harness_stop(struct harness *h);

/*
 * Starts another sandqd host on the harness's Redis: host name host-NAME,
 * state folder DIR/state-NAME, log DIR/sandqd-NAME.log, its own uid range
 * from uid_base, and sets (NULL-terminated "key=value", or NULL) each as
 * --set. Returns its pid (-1 if fork failed); the caller stops it.
 */
pid_t harness_start_host(const struct harness *h, const char *name, int workers,
    int uid_base, const char *const *sets);
/* A connection for the default tenant (asserts on failure). */
struct sandq *harness_client(const struct harness *h);
/* Runs a shell script and waits (asserts on submit/wait failure). */
struct sandq_result *harness_sh(struct sandq *c, const char *script,
    const struct sandq_job_opts *o);
/* Runs argv through redis-cli against the harness; returns its stdout. */
char *harness_redis_cli(const struct harness *h, const char *const *args);
/*
 * The folder of the binaries under test, made absolute: $SANDQ_BUILD (make
 * test sets it to its build folder, sanitizer builds included), else
 * "build".
 */
const char *harness_build_dir(void);
/* Runs a shell command line; returns its exit status and stdout (owned). */
int harness_run(const char *cmdline, char **out);
/*** Markers, and finding a harness's jobs ***/

/*
 * Writes to buf (n bytes) what followed by a token no other call, test or
 * run shares, and returns buf: ".000" then 16 digits (this process's pid,
 * a count of calls in it, random digits from getrandom()). Appended to a
 * number it leaves a number a thousandth or less larger, so
 * harness_marker(m, sizeof(m), "sleep 4646") gives a command line,
 * "sleep 4646.000PPPPPPPCCCRRRRRR", that this one job alone has, while
 * it still sleeps 4646 s. what "" gives the bare token, to append to
 * several commands.
 */
const char *harness_marker(char *buf, size_t n, const char *what);
/*
 * Pids (up to max) of processes whose command line contains needle, on
 * the whole machine. Only to prove something gone (harness_marker_gone):
 * to find something running, search below a sandqd (harness_pgrep_below).
 */
int harness_pgrep(const char *needle, pid_t *pids, int max);
/*
 * Pids (up to max) of the descendants of root, at any depth, whose command
 * line (its arguments joined by spaces) is exactly cmdline: a job's
 * process once its exec is done, never the shell that will exec it.
 */
int harness_pgrep_below(pid_t root, const char *cmdline, pid_t *pids, int max);
/* The same below this harness's sandqd: its workers' jobs. */
int harness_jobs(const struct harness *h, const char *cmdline, pid_t *pids, int max);

/* What harness_job_running() looks for, and what it found. */
struct harness_job {
	const struct harness *h;	/* whose sandqd's descendants are searched */
	const char *cmdline;		/* the exact command line wanted */
	pid_t not;			/* a pid that does not count (an earlier run), or 0 */
	pid_t pid;			/* out: the one process found */
};
/*
 * harness_wait_for() predicate on a struct harness_job: exactly one
 * process below the sandqd has the command line (not counting not); sets
 * pid to it.
 */
bool harness_job_running(void *job);
/*
 * Waits up to timeout_ms for harness_job_running() and returns the job's
 * pid; asserts, naming the command line, if it never runs.
 */
pid_t harness_wait_job(const struct harness *h, const char *cmdline, pid_t not,
    int timeout_ms);
/*
 * harness_wait_for() predicate on a marker (char *): no process on the
 * machine has it in its command line. Machine-wide on purpose: a process
 * that left the harness's tree is exactly what it must catch, and the
 * marker is unique, so no other run's process can hold it.
 */
bool harness_marker_gone(void *marker);
/* The parent of pid (from /proc), or 0. */
pid_t harness_ppid_of(pid_t pid);
/* Pids of this harness's workers and every process below them. */
int harness_pgrep_workers(const struct harness *h, pid_t *pids, int max);
/* Waits until pred(arg) or timeout; returns pred's last answer. */
bool harness_wait_for(bool (*pred)(void *), void *arg, int timeout_ms);

/*** A private OCI registry ***/

/* Debian's docker-registry, serving a test's folder on loopback. */
struct harness_registry {
	char dir[300];		/* its folder: config.yml, storage, registry.log */
	char addr[64];		/* 127.0.0.1:PORT, for docker://ADDR/REPO:TAG */
	int port;
	pid_t pid;		/* 0 once stopped */
};

/*
 * Starts /usr/bin/docker-registry serve on a free loopback port with a
 * config it writes into dir/registry (made): filesystem storage there, no
 * auth, plain HTTP; retries on another port if the registry loses the
 * port to another process; waits until GET /v2/ answers 200 and its log
 * says it listens on that port. Asserts on failure, having stopped what
 * it started. harness_registry_stop() in the fixture's fini stops it.
 */
void harness_registry_start(struct harness_registry *r, const char *dir);
/* Stops it by its pid (SIGTERM, SIGKILL after 10 s) and reaps it; idempotent. */
void harness_registry_stop(struct harness_registry *r);
/*
 * "docker://ADDR/REPO" for repo (e.g. "test/img:1") in r: one of eight
 * rotating buffers, so a few may be used in one expression.
 */
const char *harness_registry_ref(const struct harness_registry *r, const char *repo);
/*
 * skopeo copy --all --dest-tls-verify=false SRC docker://ADDR/REPO (repo
 * "test/img:1"); asserts, with skopeo's output, that it worked.
 */
void harness_registry_push(const struct harness_registry *r, const char *src,
    const char *repo);
/*
 * Runs argv (argv[0] a path; no shell) with stdout and stderr collected
 * into *out (owned, if out is not NULL); returns its exit status, or -1.
 */
int harness_exec(const char *const *argv, char **out);

/*** A proxy that cuts a transfer ***/

/*
 * A listening TCP socket (close-on-exec, SO_REUSEADDR) on 127.0.0.1:*port,
 * or on a free port when *port is 0 (written back). Asserts.
 */
int harness_listen(int *port);
/*
 * A TCP proxy in a child process (dying with the caller): accepts on lfd
 * (closed in the caller) and forwards each connection to
 * 127.0.0.1:to_port. Once it has passed more than cut bytes from there to
 * its clients it SIGKILLs victim (if > 0) and exits, cutting every
 * connection in the middle of a transfer; or, if stall, stops forwarding
 * and keeps every connection open (a server that hangs). Returns its pid.
 */
pid_t harness_proxy_start(int lfd, int to_port, pid_t victim, size_t cut, bool stall);

/*
 * Removes the tree at path, links not followed, folders made writable
 * first (an unpacked layer may leave some read-only). Best effort.
 */
void harness_rmtree(const char *path);

#endif
