/*
 * harness.c - starts and stops a private redis-server and sandqd, and
 * finds their jobs; starts and stops a private OCI registry for the image
 * tests.
 *
 * Waits are conditions polled every few milliseconds up to a generous
 * deadline (never a fixed sleep), so the tests hold on a loaded 2-core
 * machine. A condition is the state a test needs, not its first sign: a
 * job's process is found by its exact command line (its exec done), below
 * this harness's sandqd, and named by a marker no other test or run
 * shares, so two runs of the suite at once never see each other's jobs.
 * Nothing machine-wide is fixed: the folder is mkdtemp()'s, the port
 * free_port()'s and proven ours by the server's pid.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static void
msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static long long
now_ms_(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool
harness_wait_for(bool (*pred)(void *), void *arg, int timeout_ms)
{
	long long end = now_ms_() + timeout_ms;

	for (;;) {
		if (pred(arg))
			return true;
		if (now_ms_() > end)
			return false;
		msleep(5);
	}
}

static int
free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	cr_assert(fd >= 0);
	cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	cr_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/*
 * Starts argv (argv[0] a path) with stdout and stderr appended to logpath,
 * in a process group of its own; returns its pid, or -1 if fork failed.
 * It gets SIGTERM when this test process dies: a test killed at its
 * timeout (Criterion gives it no teardown) leaves no daemon behind to load
 * the machine or hold a port, and sandqd stopped so cleans its cgroups.
 */
static pid_t
spawn(const char *const *argv, const char *logpath)
{
	pid_t parent = getpid(), pid = fork();

	if (pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		setpgid(0, 0);
		/* The parent may have died before the signal was asked for. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
			_exit(127);
		execv(argv[0], (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	return pid;
}

struct ping_arg {
	const struct harness *h;
	pid_t pid;
};

/*
 * Whether our redis-server answers on the port, or has exited (it lost
 * the port). Another run's server may have taken the port between
 * free_port() and ours binding it: it would answer a PING too, so the
 * answer must carry our server's pid.
 */
static bool
redis_answers(void *p)
{
	struct ping_arg *a = p;
	char cmd[400], want[64], *out = NULL;
	int st;

	if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
		a->pid = -1;
		return true;	/* exited: the caller checks */
	}
	snprintf(cmd, sizeof(cmd), "redis-cli -p %d info server 2>/dev/null", a->h->port);
	snprintf(want, sizeof(want), "\nprocess_id:%d\r", (int)a->pid);
	st = harness_run(cmd, &out);
	bool ok = st == 0 && out && strstr(out, want) != NULL;
	free(out);
	return ok;
}

void
harness_redis_start(struct harness *h)
{
	char portstr[16], rlog[300];

	memset(h, 0, sizeof(*h));
	snprintf(h->dir, sizeof(h->dir), "/tmp/sandq-test-XXXXXX");
	cr_assert(mkdtemp(h->dir) != NULL);
	snprintf(rlog, sizeof(rlog), "%s/redis.log", h->dir);
	snprintf(h->sock, sizeof(h->sock), "%s/redis.sock", h->dir);
	for (int attempt = 0; attempt < 10; attempt++) {
		struct ping_arg a = { h, 0 };

		h->port = free_port();
		snprintf(portstr, sizeof(portstr), "%d", h->port);
		{
			const char *rargv[] = { "/usr/bin/redis-server", "--port", portstr,
			    "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			    "--dir", h->dir, "--unixsocket", h->sock,
			    "--unixsocketperm", "700", NULL };
			h->redis_pid = spawn(rargv, rlog);
		}
		if (h->redis_pid < 0) {
			h->redis_pid = 0;
			harness_stop(h);
			cr_assert_fail("fork: %s", strerror(errno));
		}
		a.pid = h->redis_pid;
		if (!harness_wait_for(redis_answers, &a, 10000)) {
			harness_stop(h);
			cr_assert_fail("redis-server did not answer on port %d", h->port);
		}
		if (a.pid > 0)
			break;
		h->redis_pid = 0;	/* lost the port race: try another */
	}
	if (h->redis_pid <= 0) {
		harness_stop(h);
		cr_assert_fail("could not start redis-server");
	}
	snprintf(h->url, sizeof(h->url), "redis://127.0.0.1:%d", h->port);
}

void
harness_start(struct harness *h, int workers, const char *const *extra)
{
	harness_redis_start(h);
	harness_sandqd_start(h, workers, extra);
}

void
harness_sandqd_start(struct harness *h, int workers, const char *const *extra)
{
	char state[300], workers_s[16];
	const char *argv[64];
	size_t n = 0;

	snprintf(state, sizeof(state), "%s/state", h->dir);
	snprintf(workers_s, sizeof(workers_s), "%d", workers);
	snprintf(h->log, sizeof(h->log), "%s/sandqd.log", h->dir);
	snprintf(h->sandqd, sizeof(h->sandqd), "%s/sandqd", harness_build_dir());
	argv[n++] = h->sandqd;
	argv[n++] = "--redis";
	argv[n++] = h->url;
	argv[n++] = "--state";
	argv[n++] = state;
	argv[n++] = "--workers";
	argv[n++] = workers_s;
	/* No metrics endpoint unless a test asks (tests run side by side). */
	argv[n++] = "--set";
	argv[n++] = "metrics_listen=";
	for (size_t i = 0; extra && extra[i] && n < 62; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	if ((h->sandqd_pid = spawn(argv, h->log)) < 0) {
		h->sandqd_pid = 0;
		harness_stop(h);
		cr_assert_fail("fork: %s", strerror(errno));
	}

	/*
	 * Ready means a job went all the way through. On failure everything
	 * started so far is stopped before the test fails.
	 */
	{
		struct sandq *c = harness_client(h);
		struct sandq_result *r = NULL;
		char id[SANDQ_ID_MAX + 1], why[512] = "";
		const char *tr[] = { "true", NULL };

		int rc = sandq_submit_exec(c, tr, NULL, id), st;

		/* In slices, so a sandqd that could not start fails at once. */
		for (int i = 0; (rc == 0 || rc == -ETIMEDOUT) && i < 60; i++) {
			if ((rc = sandq_wait(c, id, 1000, &r)) != -ETIMEDOUT)
				break;
			if (waitpid(h->sandqd_pid, &st, WNOHANG) == h->sandqd_pid) {
				h->sandqd_pid = 0;
				rc = -ECHILD;
				snprintf(why, sizeof(why), "sandqd (%s) exited with status %d",
				    h->sandqd, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
				break;
			}
		}
		if (rc < 0 && why[0] == '\0')
			snprintf(why, sizeof(why), "sandqd never answered: %s",
			    sandq_last_error(c));
		else if (rc == 0 && strcmp(r->status, "ok") != 0)
			snprintf(why, sizeof(why), "first job: %s: %s", r->status,
			    r->error_message ? r->error_message : "");
		sandq_result_free(r);
		sandq_close(c);
		if (why[0]) {
			static char msg[8192];
			char *log = NULL, cmd[400];

			snprintf(cmd, sizeof(cmd), "tail -20 %s", h->log);
			harness_run(cmd, &log);
			harness_stop(h);
			/* The assertion ends the test: nothing may be left allocated. */
			snprintf(msg, sizeof(msg), "%s\nsandqd log:\n%s", why, log ? log : "");
			free(log);
			cr_assert_fail("%s", msg);
		}
	}
}

int
harness_stop_sandqd(struct harness *h, int timeout_ms)
{
	long long end = now_ms_() + timeout_ms;
	int st;

	if (h->sandqd_pid <= 0)
		return -1;
	kill(h->sandqd_pid, SIGTERM);
	for (;;) {
		pid_t p = waitpid(h->sandqd_pid, &st, WNOHANG);

		if (p == h->sandqd_pid)
			break;
		if (now_ms_() > end) {
			kill(h->sandqd_pid, SIGKILL);
			waitpid(h->sandqd_pid, &st, 0);
			h->sandqd_pid = 0;
			return -1;
		}
		msleep(5);
	}
	h->sandqd_pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	/* A folder left without write permission (an unpacked layer's). */
	if (flag == FTW_DP || flag == FTW_DNR) {
		chmod(path, 0700);
		return rmdir(path);
	}
	return unlink(path);
}

void
harness_rmtree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * A sanitizer's report in a daemon's log (sandqd's, or another host's a
 * test started in the folder) goes to our stderr before the folder goes:
 * tests/run.sh fails the binary on it. Only the report lines are copied.
 */
static int
scan_log(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	char line[1024];
	bool in_report = false;
	FILE *f;
	size_t n = strlen(path);

	(void)st;
	(void)ftw;
	if (flag != FTW_F || n < 4 || strcmp(path + n - 4, ".log") != 0 ||
	    (f = fopen(path, "r")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strstr(line, "ERROR: AddressSanitizer") != NULL ||
		    strstr(line, "ERROR: LeakSanitizer") != NULL ||
		    strstr(line, "runtime error: ") != NULL) {
			if (!in_report)
				fprintf(stderr, "harness: a sanitizer report in %s:\n", path);
			in_report = true;
		}
		if (in_report)
			fputs(line, stderr);
	}
	fclose(f);
	return 0;
}

void
harness_stop(struct harness *h)
{
	harness_stop_sandqd(h, 30000);
	if (h->redis_pid > 0) {
		kill(h->redis_pid, SIGTERM);
		waitpid(h->redis_pid, NULL, 0);
		h->redis_pid = 0;
	}
	if (h->dir[0]) {
		nftw(h->dir, scan_log, 16, FTW_PHYS);
		harness_rmtree(h->dir);
	}
}

pid_t
harness_start_host(const struct harness *h, const char *name, int workers,
    int uid_base, const char *const *sets)
{
	char state[400], log[400], sandqd[400], host[80], w[16], uid[32];
	const char *argv[64];
	size_t n = 0;

	snprintf(state, sizeof(state), "%s/state-%s", h->dir, name);
	snprintf(log, sizeof(log), "%s/sandqd-%s.log", h->dir, name);
	snprintf(sandqd, sizeof(sandqd), "%s/sandqd", harness_build_dir());
	snprintf(host, sizeof(host), "host=host-%s", name);
	snprintf(w, sizeof(w), "%d", workers);
	snprintf(uid, sizeof(uid), "sandbox_uid_base=%d", uid_base);
	argv[n++] = sandqd;
	argv[n++] = "--redis";
	argv[n++] = h->url;
	argv[n++] = "--state";
	argv[n++] = state;
	argv[n++] = "--workers";
	argv[n++] = w;
	argv[n++] = "--set";
	argv[n++] = host;
	argv[n++] = "--set";
	argv[n++] = uid;
	argv[n++] = "--set";
	argv[n++] = "metrics_listen=";
	for (size_t i = 0; sets != NULL && sets[i] != NULL && n + 3 < 64; i++) {
		argv[n++] = "--set";
		argv[n++] = sets[i];
	}
	argv[n] = NULL;
	return spawn(argv, log);
}

struct sandq *
harness_client(const struct harness *h)
{
	char err[256];
	struct sandq *c = sandq_connect(h->url, "default", err, sizeof(err));

	cr_assert(c != NULL, "connect: %s", err);
	return c;
}

/* The parent of pid from /proc/PID/stat, or 0. */
pid_t
harness_ppid_of(pid_t pid)
{
	char path[64], buf[512], *p;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
	if ((p = strrchr(buf, ')')) == NULL)
		return 0;
	return (pid_t)atoi(p + 4);
}

int
harness_pgrep_workers(const struct harness *h, pid_t *pids, int max)
{
	enum { NMAX = 8192 };
	static pid_t all[NMAX], parent[NMAX];
	char needle[300];
	int nall = 0, n;
	bool grew = true;
	DIR *d;
	struct dirent *de;

	/* The workers of this harness, by their command line... */
	snprintf(needle, sizeof(needle), "--run-dir %s/state/run/", h->dir);
	n = harness_pgrep(needle, pids, max);
	/* ...and everything below them: spawners, sandbox inits, jobs. */
	if ((d = opendir("/proc")) == NULL)
		return n;
	while ((de = readdir(d)) != NULL && nall < NMAX) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		all[nall] = (pid_t)atoi(de->d_name);
		parent[nall] = harness_ppid_of(all[nall]);
		nall++;
	}
	closedir(d);
	while (grew && n < max) {
		grew = false;
		for (int i = 0; i < nall && n < max; i++) {
			bool have = false, under = false;

			for (int k = 0; k < n; k++) {
				have |= pids[k] == all[i];
				under |= pids[k] == parent[i];
			}
			if (under && !have) {
				pids[n++] = all[i];
				grew = true;
			}
		}
	}
	return n;
}

struct sandq_result *
harness_sh(struct sandq *c, const char *script, const struct sandq_job_opts *o)
{
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	cr_assert(sandq_submit_sh(c, script, o, id) == 0, "submit: %s",
	    sandq_last_error(c));
	cr_assert(sandq_wait(c, id, 60000, &r) == 0, "wait: %s", sandq_last_error(c));
	return r;
}

const char *
harness_build_dir(void)
{
	static char abs[PATH_MAX];
	const char *b = getenv("SANDQ_BUILD");

	if (b == NULL || b[0] == '\0')
		b = "build";
	/* Absolute, so a command run from another folder finds it too. */
	if (abs[0] == '\0' && realpath(b, abs) == NULL)
		snprintf(abs, sizeof(abs), "%s", b);
	return abs;
}

int
harness_run(const char *cmdline, char **out)
{
	FILE *f = popen(cmdline, "r");
	size_t len = 0, cap = 4096;
	char *buf;
	size_t n;
	int st;

	cr_assert(f != NULL);
	buf = malloc(cap);
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (cap - len < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
	}
	buf[len] = '\0';
	st = pclose(f);
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

char *
harness_redis_cli(const struct harness *h, const char *const *args)
{
	char cmd[4096];
	size_t n;
	char *out = NULL;

	n = (size_t)snprintf(cmd, sizeof(cmd), "redis-cli -p %d --no-raw", h->port);
	for (size_t i = 0; args[i] && n < sizeof(cmd); i++)
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " '%s'", args[i]);
	harness_run(cmd, &out);
	return out;
}

/*** Markers, and finding a harness's jobs ***/

const char *
harness_marker(char *buf, size_t n, const char *what)
{
	static unsigned calls;
	uint32_t rnd = 0;

	/* Without randomness the pid and the count still set it apart. */
	if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		rnd = (uint32_t)now_ms_();
	/*
	 * The pid sets apart every test process alive now, on the machine (two
	 * runs of the suite included); the count, the markers of one test; the
	 * random digits, a process that had the same pid earlier.
	 */
	cr_assert_lt((size_t)snprintf(buf, n, "%s.000%07d%03u%06u", what,
	    (int)(getpid() % 10000000), calls++ % 1000, (unsigned)(rnd % 1000000)), n,
	    "marker for '%s' does not fit %zu bytes", what, n);
	return buf;
}

/*
 * The command line of pid, its arguments joined by spaces, into buf (n
 * bytes); returns its length, or -1 if pid is gone or has none (a kernel
 * thread, or a process in the middle of its exec).
 */
static ssize_t
cmdline_of(const char *pid, char *buf, size_t n)
{
	char path[300];
	ssize_t len;
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	len = read(fd, buf, n - 1);
	close(fd);
	while (len > 0 && buf[len - 1] == '\0')
		len--;
	if (len <= 0)
		return -1;
	for (ssize_t i = 0; i < len; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[len] = '\0';
	return len;
}

int
harness_pgrep(const char *needle, pid_t *pids, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	cr_assert(d != NULL);
	while ((de = readdir(d)) != NULL && n < max) {
		char cmd[4096];

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		if (cmdline_of(de->d_name, cmd, sizeof(cmd)) > 0 && strstr(cmd, needle) != NULL)
			pids[n++] = (pid_t)atoi(de->d_name);
	}
	closedir(d);
	return n;
}

/* Whether root is an ancestor of pid (a job is a few levels below sandqd). */
static bool
is_below(pid_t pid, pid_t root)
{
	for (int depth = 0; depth < 64 && pid > 1; depth++)
		if ((pid = harness_ppid_of(pid)) == root)
			return true;
	return false;
}

int
harness_pgrep_below(pid_t root, const char *cmdline, pid_t *pids, int max)
{
	DIR *d;
	struct dirent *de;
	int n = 0;

	if (root <= 0)
		return 0;
	cr_assert((d = opendir("/proc")) != NULL);
	while ((de = readdir(d)) != NULL && n < max) {
		char cmd[4096];
		pid_t pid;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		if (cmdline_of(de->d_name, cmd, sizeof(cmd)) <= 0 || strcmp(cmd, cmdline) != 0)
			continue;
		pid = (pid_t)atoi(de->d_name);
		if (is_below(pid, root))
			pids[n++] = pid;
	}
	closedir(d);
	return n;
}

int
harness_jobs(const struct harness *h, const char *cmdline, pid_t *pids, int max)
{
	return harness_pgrep_below(h->sandqd_pid, cmdline, pids, max);
}

bool
harness_job_running(void *arg)
{
	struct harness_job *j = arg;
	pid_t pids[8], found = 0;
	int n = harness_jobs(j->h, j->cmdline, pids, 8), count = 0;

	for (int i = 0; i < n; i++)
		if (pids[i] != j->not) {
			found = pids[i];
			count++;
		}
	if (count == 1)
		j->pid = found;
	return count == 1;
}

pid_t
harness_wait_job(const struct harness *h, const char *cmdline, pid_t not, int timeout_ms)
{
	struct harness_job j = { h, cmdline, not, 0 };

	cr_assert(harness_wait_for(harness_job_running, &j, timeout_ms),
	    "no job '%s' running below sandqd %d after %d ms", cmdline, (int)h->sandqd_pid,
	    timeout_ms);
	return j.pid;
}

bool
harness_marker_gone(void *marker)
{
	pid_t pids[8];

	return harness_pgrep(marker, pids, 8) == 0;
}

/*** A private OCI registry ***/

/* GET /v2/ on 127.0.0.1:port: true if it answers 200. */
static bool
registry_v2_ok(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons((uint16_t)port) };
	struct timeval tv = { 2, 0 };
	char req[128], buf[64] = "";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t n = 0;
	bool ok;

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	snprintf(req, sizeof(req), "GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n", port);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    write(fd, req, strlen(req)) == (ssize_t)strlen(req))
		n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	/* "HTTP/1.1 200 OK" */
	ok = strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 8, " 200", 4) == 0;
	return ok;
}

/*
 * Whether our registry answers on its port, or has exited (it lost the
 * port: pid becomes -1). Another run's registry could answer on a port
 * ours failed to take, so ours must also say in its own log that it
 * listens there.
 */
static bool
registry_answers(void *arg)
{
	struct harness_registry *r = arg;
	char path[400], want[96], buf[65536];
	size_t n = 0;
	FILE *f;
	int st;

	if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
		r->pid = -1;
		return true;
	}
	snprintf(path, sizeof(path), "%s/registry.log", r->dir);
	snprintf(want, sizeof(want), "listening on 127.0.0.1:%d", r->port);
	if ((f = fopen(path, "r")) != NULL) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return strstr(buf, want) != NULL && registry_v2_ok(r->port);
}

void
harness_registry_start(struct harness_registry *r, const char *dir)
{
	char conf[400], log[400], data[400];

	memset(r, 0, sizeof(*r));
	if (access("/usr/bin/docker-registry", X_OK) != 0 || access("/usr/bin/skopeo", X_OK) != 0)
		cr_assert_fail("docker-registry or skopeo is not installed: "
		    "run deploy/install-deps.sh (make test does)");
	cr_assert_lt((size_t)snprintf(r->dir, sizeof(r->dir), "%s/registry", dir),
	    sizeof(r->dir));
	cr_assert(mkdir(r->dir, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", r->dir,
	    strerror(errno));
	snprintf(conf, sizeof(conf), "%s/config.yml", r->dir);
	snprintf(log, sizeof(log), "%s/registry.log", r->dir);
	snprintf(data, sizeof(data), "%s/data", r->dir);
	for (int attempt = 0; attempt < 10; attempt++) {
		const char *argv[] = { "/usr/bin/docker-registry", "serve", conf, NULL };
		FILE *f;

		r->port = free_port();
		snprintf(r->addr, sizeof(r->addr), "127.0.0.1:%d", r->port);
		cr_assert((f = fopen(conf, "w")) != NULL);
		fprintf(f, "version: 0.1\n"
		    "log:\n  level: info\n"
		    "storage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\n"
		    "http:\n  addr: %s\n", data, r->addr);
		fclose(f);
		unlink(log);	/* the log of an attempt that lost its port */
		if ((r->pid = spawn(argv, log)) < 0) {
			r->pid = 0;
			cr_assert_fail("fork: %s", strerror(errno));
		}
		if (!harness_wait_for(registry_answers, r, 20000)) {
			harness_registry_stop(r);
			cr_assert_fail("docker-registry did not answer on %s (log %s)", r->addr, log);
		}
		if (r->pid > 0)
			return;
		r->pid = 0;	/* lost the port race: try another */
	}
	cr_assert_fail("could not start docker-registry (log %s)", log);
}

void
harness_registry_stop(struct harness_registry *r)
{
	long long end = now_ms_() + 10000;

	if (r->pid <= 0)
		return;
	kill(r->pid, SIGTERM);
	while (waitpid(r->pid, NULL, WNOHANG) != r->pid) {
		if (now_ms_() > end) {
			kill(r->pid, SIGKILL);
			waitpid(r->pid, NULL, 0);
			break;
		}
		msleep(5);
	}
	r->pid = 0;
}

int
harness_exec(const char *const *argv, char **out)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	int p[2], st;
	pid_t pid;
	ssize_t n;

	cr_assert(buf != NULL && pipe2(p, O_CLOEXEC) == 0);
	if ((pid = fork()) == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execv(argv[0], (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	close(p[1]);
	while ((n = read(p[0], buf + len, cap - len - 1)) > 0 ||
	    (n < 0 && errno == EINTR)) {
		if (n < 0)
			continue;
		len += (size_t)n;
		if (cap - len < 2) {
			cap *= 2;
			cr_assert((buf = realloc(buf, cap)) != NULL);
		}
	}
	close(p[0]);
	buf[len] = '\0';
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		st = -1;
	if (out != NULL)
		*out = buf;
	else
		free(buf);
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void
harness_registry_push(const struct harness_registry *r, const char *src, const char *repo)
{
	char dst[400], *out = NULL;
	const char *argv[] = { "/usr/bin/skopeo", "copy", "--all", "--dest-tls-verify=false",
	    src, dst, NULL };
	int st;

	snprintf(dst, sizeof(dst), "docker://%s/%s", r->addr, repo);
	st = harness_exec(argv, &out);
	if (st != 0) {
		static char msg[4096];

		snprintf(msg, sizeof(msg), "push %s to %s: exit %d: %s", src, dst, st, out);
		free(out);
		cr_assert_fail("%s", msg);
	}
	free(out);
}

/*** A proxy that cuts a transfer ***/

int
harness_listen(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons((uint16_t)*port) };
	socklen_t len = sizeof(sa);
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert(lfd >= 0);
	cr_assert(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	cr_assert(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	    "bind 127.0.0.1:%d: %s", *port, strerror(errno));
	cr_assert(listen(lfd, 64) == 0 && getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
	*port = ntohs(sa.sin_port);
	return lfd;
}

pid_t
harness_proxy_start(int lfd, int to_port, pid_t victim, size_t cut, bool stall)
{
	pid_t parent = getpid(), pid;

	if ((pid = fork()) != 0) {
		close(lfd);
		cr_assert(pid > 0);
		return pid;
	}
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);
	{
		struct pollfd pf[65];
		int peer[65];
		size_t passed = 0;
		int n = 1;
		char buf[16384];

		pf[0].fd = lfd;
		pf[0].events = POLLIN;
		for (;;) {
			if (poll(pf, (nfds_t)n, -1) < 0)
				continue;
			if ((pf[0].revents & POLLIN) && n + 2 <= 65) {
				struct sockaddr_in to = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				    .sin_port = htons((uint16_t)to_port) };
				int c = accept(lfd, NULL, NULL);
				int s = socket(AF_INET, SOCK_STREAM, 0);

				if (c >= 0 && s >= 0 && connect(s, (struct sockaddr *)&to, sizeof(to)) == 0) {
					pf[n] = (struct pollfd){ c, POLLIN, 0 };
					peer[n++] = s;
					pf[n] = (struct pollfd){ s, POLLIN, 0 };
					peer[n++] = c;
				} else {
					if (c >= 0)
						close(c);
					if (s >= 0)
						close(s);
				}
			}
			for (int i = 1; i < n; i++) {
				ssize_t r;

				if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
					continue;
				r = read(pf[i].fd, buf, sizeof(buf));
				if (r <= 0) {
					pf[i].fd = -1;	/* this direction is done */
					shutdown(peer[i], SHUT_WR);
					continue;
				}
				if (write(peer[i], buf, (size_t)r) != r)
					pf[i].fd = -1;
				/* Odd slots are clients, even ones the server's side. */
				if (i % 2 == 0 && (passed += (size_t)r) > cut) {
					if (stall)
						for (;;)
							pause();
					if (victim > 0)
						kill(victim, SIGKILL);
					_exit(0);
				}
			}
		}
	}
}

const char *
harness_registry_ref(const struct harness_registry *r, const char *repo)
{
	static char buf[8][400];
	static unsigned k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof(buf[k]), "docker://%s/%s", r->addr, repo);
	return buf[k];
}
