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
 */
#ifndef SANDQ_TEST_HARNESS_H
#define SANDQ_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "../client/sandq.h"

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
/* Pids of processes whose command line contains needle (up to max). */
int harness_pgrep(const char *needle, pid_t *pids, int max);
/* harness_wait_for() predicates on a marker (a string only one job's
 * command line holds, arg): some process has it, or none has. */
bool harness_marker_running(void *marker);
bool harness_marker_gone(void *marker);
/* The parent of pid (from /proc), or 0. */
pid_t harness_ppid_of(pid_t pid);
/* Pids of this harness's workers and every process below them. */
int harness_pgrep_workers(const struct harness *h, pid_t *pids, int max);
/* Waits until pred(arg) or timeout; returns pred's last answer. */
bool harness_wait_for(bool (*pred)(void *), void *arg, int timeout_ms);

#endif
