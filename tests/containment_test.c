/*
 * containment_test.c - what a hostile job tries, and proof that it fails.
 *
 * Each case is a real job through a real sandqd (harness.h): it reads host
 * secrets, writes outside its workspace, signals host processes, exhausts
 * every limit, leaves daemons behind, calls refused syscalls. A case passes
 * only when the attack was really tried (the job prints a marker after or
 * during the attempt, and the test requires it) and its effect is absent,
 * checked on the host wherever it can be. Secrets and markers are random per
 * run, so no hard-coded string can pass by accident.
 *
 * The promises tested are those of docs/security.md and docs/protocol.md:
 * namespaces, the read-only image, seccomp (refusals named in the result),
 * cgroup limits and their statuses, and nothing of a job outliving it.
 *
 * Needs root (sandqd maps each worker's jobs to an unprivileged host uid);
 * every test stops with a reason if it runs without it.
 *
 * Sections: fixture and helpers / reading the host / writing the host /
 * other processes / limits / leftovers / syscalls / cleanup at stop.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <ftw.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 180000		/* a result's wait: the longest job runs 60 s */
#define GONE_MS 15000		/* how long leftovers of a job may take to go */
#define SECRET_ENV "SANDQ_CONTAINMENT_SECRET"

/*** Fixture and helpers ***/

static struct harness H;
static char env_secret[33];	/* SECRET_ENV's value in sandqd's environment */

/* Fills buf (2 * n + 1 bytes) with n random bytes in hex. */
static void
rand_hex(char *buf, size_t n)
{
	unsigned char raw[64];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	cr_assert(n <= sizeof(raw) && fd >= 0);
	cr_assert_eq(read(fd, raw, n), (ssize_t)n);
	close(fd);
	for (size_t i = 0; i < n; i++)
		snprintf(buf + 2 * i, 3, "%02x", raw[i]);
}

static void
setup(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	rand_hex(env_secret, 16);
	/* Before the start, so sandqd and its workers inherit it. */
	setenv(SECRET_ENV, env_secret, 1);
	harness_start(&H, 2, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(containment, .init = setup, .fini = teardown, .timeout = 300);

/* Submits src as op ("sh": bash -c, "python": python3 -c); id receives its id. */
static void
submit(struct sandq *c, const char *op, const char *src,
    const struct sandq_job_opts *o, char *id)
{
	int rc;

	if (strcmp(op, "python") == 0)
		rc = sandq_submit_python(c, src, o, id);
	else
		rc = sandq_submit_sh(c, src, o, id);
	cr_assert_eq(rc, 0, "submit: %s", sandq_last_error(c));
}

/*
 * Runs src as a job of kind op with options o (NULL: the defaults; limits
 * in o->limits) and returns its result, owned by the caller.
 */
static struct sandq_result *
run_job(struct sandq *c, const char *op, const char *src,
    const struct sandq_job_opts *o)
{
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	submit(c, op, src, o, id);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0, "wait: %s", sandq_last_error(c));
	return r;
}

/* Whether the job printed needle on its stdout. */
static bool
out_has(const struct sandq_result *r, const char *needle)
{
	return memmem(r->stdout_data, r->stdout_len, needle, strlen(needle)) != NULL;
}

/* Expects needle in neither the stdout nor the stderr of r. */
static void
expect_absent(const struct sandq_result *r, const char *needle, const char *what)
{
	size_t n = strlen(needle);

	cr_expect_null(memmem(r->stdout_data, r->stdout_len, needle, n),
	    "%s: '%s' on stdout:\n%s", what, needle, r->stdout_data);
	cr_expect_null(memmem(r->stderr_data, r->stderr_len, needle, n),
	    "%s: '%s' on stderr:\n%s", what, needle, r->stderr_data);
}

/* Expects status want, saying what came instead. */
static void
expect_status(const struct sandq_result *r, const char *want)
{
	cr_expect_str_eq(r->status, want, "status %s, not %s (exit %d, signal %d, "
	    "error: %s); stderr: %.300s", r->status, want, r->exit_code, r->signal,
	    r->error_message ? r->error_message : "none", r->stderr_data);
}

/* Expects the job's proof that it ran the attack. */
static void
expect_tried(const struct sandq_result *r, const char *marker)
{
	cr_expect(out_has(r, marker), "the job did not get to try (no '%s'); "
	    "status %s, stdout:\n%s\nstderr:\n%s", marker, r->status,
	    r->stdout_data, r->stderr_data);
}

/* A script or code text, formatted (owned by the caller). */
static char * __attribute__((format(printf, 1, 2)))
text(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	cr_assert(n >= 0);
	return s;
}

/* Writes data to H.dir/name, mode 0644, and returns its path (owned). */
static char *
plant(const char *name, const char *data)
{
	char *path = text("%s/%s", H.dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	cr_assert(fd >= 0, "plant %s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
	return path;
}

/*
 * A grep pattern matching s that does not contain s: "[a][b]...". A job can
 * search for a secret without the secret itself appearing in its command
 * line, its script or its output.
 */
static char *
pattern_of(const char *s)
{
	char *p = calloc(strlen(s) * 3 + 1, 1);

	cr_assert(p != NULL);
	for (size_t i = 0; s[i]; i++)
		memcpy(p + 3 * i, (char[]){ '[', s[i], ']' }, 3);
	return p;
}

/* Forks and execs /bin/true on the host: it still can after a bomb. */
static bool
host_runs_true(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	    WEXITSTATUS(st) == 0;
}

/* A plain job on the same sandqd still runs: the host and sandqd are fine. */
static void
expect_still_serving(struct sandq *c)
{
	struct sandq_result *r = run_job(c, "sh", "echo alive", NULL);

	expect_status(r, "ok");
	cr_expect_str_eq((char *)r->stdout_data, "alive\n");
	sandq_result_free(r);
	cr_expect(host_runs_true(), "the host cannot fork and exec /bin/true");
}

/*** Reading the host ***/

/*
 * A 0644 file on the host, reached by its absolute path, through
 * /proc/PID/root, by name with find and by content with grep: never read.
 */
Test(containment, host_secret_file_is_out_of_reach)
{
	struct sandq *c = harness_client(&H);
	char secret[33], name[48] = "planted-";
	char *path, *pat, *script;
	struct sandq_result *r;

	rand_hex(secret, 16);
	rand_hex(name + 8, 8);
	path = plant(name, secret);
	pat = pattern_of(secret);
	script = text("cat %1$s 2>&1; cat /proc/1/root%1$s /proc/self/root%1$s 2>&1; "
	    "for p in /proc/[0-9]*/root; do cat \"$p%1$s\"; done 2>&1; "
	    "find / -xdev -name 'planted-*' -exec cat {} + 2>&1; "
	    "timeout 20 grep -rs --exclude-dir=proc --exclude-dir=usr "
	    "--exclude-dir=sys -e '%2$s' / 2>&1; echo TRIED", path, pat);
	r = run_job(c, "sh", script, NULL);
	expect_tried(r, "TRIED");
	cr_expect(out_has(r, "No such file"), "cat did not try the path:\n%s", r->stdout_data);
	expect_absent(r, secret, "host file read");
	sandq_result_free(r);
	free(script);
	free(pat);
	free(path);
	sandq_close(c);
}

/*
 * A variable of sandqd's environment, looked for in the job's environment
 * and every /proc/PID/environ; and the environment a job gets is exactly
 * PATH, HOME, LANG, PYTHONNOUSERSITE and its own variables.
 */
Test(containment, host_env_var_never_reaches_a_job)
{
	struct sandq *c = harness_client(&H);
	const char *argv[] = { "env", NULL };
	char mine[48] = "MINE=", *line, *save = NULL;
	const char *env[] = { mine, NULL };
	struct sandq_job_opts o = { .env = env };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];
	int nlines = 0;

	r = run_job(c, "sh", "env; tr '\\0' '\\n' < /proc/self/environ; "
	    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>&1; "
	    "echo TRIED", NULL);
	expect_tried(r, "TRIED");
	cr_expect(out_has(r, "HOME=/workspace"), "no environment printed:\n%s", r->stdout_data);
	expect_absent(r, env_secret, "host environment value");
	expect_absent(r, SECRET_ENV, "host environment name");
	sandq_result_free(r);

	/* Run without a shell, which would add PWD, SHLVL and _. */
	rand_hex(mine + 5, 8);
	cr_assert_eq(sandq_submit_exec(c, argv, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0);
	expect_status(r, "ok");
	for (line = strtok_r((char *)r->stdout_data, "\n", &save); line;
	    line = strtok_r(NULL, "\n", &save), nlines++)
		cr_expect(strncmp(line, "PATH=", 5) == 0 || strncmp(line, "HOME=", 5) == 0 ||
		    strncmp(line, "LANG=", 5) == 0 || strcmp(line, "PYTHONNOUSERSITE=1") == 0 ||
		    strcmp(line, mine) == 0,
		    "unexpected variable in the job's environment: %s", line);
	cr_expect_eq(nlines, 5, "expected PATH, HOME, LANG, PYTHONNOUSERSITE and %s", mine);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * /proc shows only the sandbox's own few processes (neither this test's
 * pid nor sandqd's), neither its mount table nor its init's command line
 * names a host path, and /sys is empty or absent.
 */
Test(containment, proc_and_sys_show_only_the_sandbox)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	char *script, *p;
	int n = -1;

	script = text("echo NUMERIC $(ls /proc | grep -c '^[0-9]*$'); "
	    "for p in %d %d; do test -e /proc/$p && echo HOSTPID $p; done; "
	    "cat /proc/self/mountinfo; tr '\\0' ' ' < /proc/1/cmdline; echo; "
	    "if [ -d /sys ] && [ -n \"$(ls -A /sys 2>/dev/null)\" ]; then "
	    "echo SYS-VISIBLE; ls /sys; fi; echo TRIED",
	    (int)getpid(), (int)H.sandqd_pid);
	r = run_job(c, "sh", script, NULL);
	expect_tried(r, "TRIED");
	p = strstr((char *)r->stdout_data, "NUMERIC ");
	cr_assert_not_null(p, "%s", r->stdout_data);
	cr_expect_eq(sscanf(p, "NUMERIC %d", &n), 1);
	cr_expect(n >= 1 && n < 10, "%d numeric entries in the job's /proc", n);
	cr_expect_not(out_has(r, "HOSTPID"), "a host pid is visible:\n%s", r->stdout_data);
	cr_expect(out_has(r, " / "), "no mount table printed:\n%s", r->stdout_data);
	expect_absent(r, H.dir, "host path in the job's mount table or init's command line");
	expect_absent(r, "/sys/fs/cgroup", "host cgroup mount in the job's mount table");
	cr_expect_not(out_has(r, "SYS-VISIBLE"), "/sys is visible:\n%s", r->stdout_data);
	sandq_result_free(r);
	free(script);
	sandq_close(c);
}

/*** Writing the host ***/

static const char *escape_name;	/* for found_escape */

static int
found_escape(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	return strcmp(path + ftw->base, escape_name) == 0;
}

/*
 * Creating a file or folder in /, /usr, /etc, /bin, /proc, /var and at
 * H.dir's absolute path fails in the job, and nothing of that name exists
 * on the host afterwards.
 */
Test(containment, writes_outside_the_workspace_fail)
{
	static const char *const dirs[] = { "", "/usr", "/etc", "/bin", "/proc", "/var" };
	struct sandq *c = harness_client(&H);
	char name[40] = "escape-";
	struct sandq_result *r;
	char *script, *want;

	rand_hex(name + 7, 8);
	script = text("for d in '' /usr /etc /bin /proc /var '%s'; do "
	    "if (echo x > \"$d/%s\") 2>/dev/null || mkdir \"$d/%s\" 2>/dev/null; "
	    "then echo \"WROTE $d\"; else echo \"REFUSED $d\"; fi; done; echo TRIED",
	    H.dir, name, name);
	r = run_job(c, "sh", script, NULL);
	expect_tried(r, "TRIED");
	cr_expect_not(out_has(r, "WROTE"), "%s", r->stdout_data);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char *host = text("%s/%s", dirs[i], name);

		want = text("REFUSED %s\n", dirs[i]);
		cr_expect(out_has(r, want), "no attempt on '%s':\n%s", dirs[i], r->stdout_data);
		cr_expect(access(host, F_OK) < 0 && errno == ENOENT, "%s exists on the host", host);
		free(want);
		free(host);
	}
	want = text("REFUSED %s\n", H.dir);
	cr_expect(out_has(r, want), "no attempt on H.dir:\n%s", r->stdout_data);
	escape_name = name;
	cr_expect_eq(nftw(H.dir, found_escape, 16, FTW_PHYS), 0,
	    "%s appeared under %s", name, H.dir);
	free(want);
	sandq_result_free(r);
	free(script);
	sandq_close(c);
}

static void
pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/*
 * Seeded file names that climb out of /workspace: libsandq refuses them
 * before sending, and sandqd answers `rejected`, naming the file, to a
 * client that sends them anyway (anyone who can XADD can).
 */
Test(containment, seeded_files_cannot_climb_out_of_the_workspace)
{
	struct sandq *c = harness_client(&H);
	char rnd[17], *paths[2];

	rand_hex(rnd, 8);
	paths[0] = text("../escape-%s", rnd);
	paths[1] = text("/../../x-%s", rnd);
	for (int i = 0; i < 2; i++) {
		struct sandq_file f = { .path = paths[i], .data = "x", .len = 1 };
		struct sandq_job_opts o = { .files = &f, .nfiles = 1 };
		struct sandq_result *r = NULL;
		char id[SANDQ_ID_MAX + 1], rid[64];
		msgpack_sbuffer sb;
		msgpack_packer pk;

		cr_expect_eq(sandq_submit_sh(c, "echo RAN", &o, id), -EINVAL);
		cr_expect_not_null(strstr(sandq_last_error(c), paths[i]),
		    "libsandq's message does not name '%s': %s", paths[i],
		    sandq_last_error(c));

		snprintf(rid, sizeof(rid), "climb-%d-%s", i, rnd);
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 4);
		pack_str(&pk, "id");
		pack_str(&pk, rid);
		pack_str(&pk, "op");
		pack_str(&pk, "sh");
		pack_str(&pk, "script");
		pack_str(&pk, "echo RAN");
		pack_str(&pk, "files");
		msgpack_pack_map(&pk, 1);
		pack_str(&pk, paths[i]);
		msgpack_pack_bin(&pk, 1);
		msgpack_pack_bin_body(&pk, "x", 1);
		cr_assert_eq(sandq_submit_raw(c, sb.data, sb.size), 0);
		msgpack_sbuffer_destroy(&sb);
		cr_assert_eq(sandq_wait(c, rid, WAIT_MS, &r), 0, "no result for %s", rid);
		expect_status(r, "rejected");
		cr_expect_not(out_has(r, "RAN"));
		cr_expect(r->error_message && strstr(r->error_message, paths[i]),
		    "sandqd's message does not name '%s': %s", paths[i],
		    r->error_message ? r->error_message : "(none)");
		sandq_result_free(r);
		free(paths[i]);
	}
	sandq_close(c);
}

/*
 * Symlinks made in /workspace towards a host file, /proc/1/root and
 * /proc/self/root/../.. lead only into the sandbox.
 */
Test(containment, symlinks_lead_nowhere_outside)
{
	struct sandq *c = harness_client(&H);
	char secret[33], name[48] = "planted-";
	char *path, *script;
	struct sandq_result *r;

	rand_hex(secret, 16);
	rand_hex(name + 8, 8);
	path = plant(name, secret);
	script = text("cd /workspace && ln -s %1$s l1 && ln -s /proc/1/root%1$s l2 && "
	    "ln -s /proc/self/root/../..%1$s l3 && ln -s ../../../../..%1$s l4 && "
	    "ln -s /proc/1/root r1 && ln -s /proc/self/root/../.. r2 && echo LINKED; "
	    "cat l1 l2 l3 l4 r1%1$s r2%1$s 2>&1; ls -a r1/ r2/ r1%2$s 2>&1; echo TRIED",
	    path, H.dir);
	r = run_job(c, "sh", script, NULL);
	expect_tried(r, "TRIED");
	cr_expect(out_has(r, "LINKED"), "the links were not made:\n%s\n%s",
	    r->stdout_data, r->stderr_data);
	expect_absent(r, secret, "host file read through a symlink");
	cr_expect(access(path, R_OK) == 0, "the planted file is gone");
	sandq_result_free(r);
	free(script);
	free(path);
	sandq_close(c);
}

/*** Other processes ***/

/*
 * A host process the job knows the pid of can be neither killed nor
 * ptrace-attached; it is alive after the job.
 */
Test(containment, host_process_cannot_be_signalled_or_traced)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	pid_t victim = fork();
	char *code;

	cr_assert(victim >= 0);
	if (victim == 0) {
		/* Gone with this test's process, whatever happens to the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl("/bin/sleep", "sleep", "600", (char *)NULL);
		_exit(127);
	}
	code = text("import ctypes, os\n"
	    "pid = %d\n"
	    "try:\n"
	    "    os.kill(pid, 9)\n"
	    "    print('KILL sent')\n"
	    "except OSError as e:\n"
	    "    print('KILL refused', e.errno)\n"
	    "libc = ctypes.CDLL(None, use_errno=True)\n"
	    "libc.syscall.restype = ctypes.c_long\n"
	    "L = ctypes.c_long\n"
	    "r = libc.syscall(L(101), L(16), L(pid), L(0), L(0))  # PTRACE_ATTACH\n"
	    "print('PTRACE', 'attached' if r == 0 else 'refused %%d' %% ctypes.get_errno())\n",
	    (int)victim);
	r = run_job(c, "python", code, NULL);
	cr_expect(out_has(r, "KILL refused"), "%s\n%s", r->stdout_data, r->stderr_data);
	cr_expect(out_has(r, "PTRACE refused"), "%s\n%s", r->stdout_data, r->stderr_data);
	cr_expect_eq(waitpid(victim, NULL, WNOHANG), 0, "the host process died");
	cr_expect_eq(kill(victim, 0), 0, "the host process is gone");
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);
	sandq_result_free(r);
	free(code);
	sandq_close(c);
}

/*
 * A TCP listener on the host's 127.0.0.1: the job's connection is refused
 * (its loopback is its own), and nobody connected on the host side.
 */
Test(containment, host_loopback_listener_is_unreachable)
{
	struct sandq *c = harness_client(&H);
	struct sockaddr_in sa = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), afd;
	struct sandq_result *r;
	char *code;

	cr_assert(lfd >= 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 16), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	code = text("import socket\n"
	    "print('TRIED', flush=True)\n"
	    "try:\n"
	    "    socket.create_connection(('127.0.0.1', %d), timeout=3)\n"
	    "    print('CONNECTED')\n"
	    "except OSError as e:\n"
	    "    print('FAILED', type(e).__name__, e.errno)\n", ntohs(sa.sin_port));
	r = run_job(c, "python", code, NULL);
	expect_tried(r, "TRIED");
	cr_expect_not(out_has(r, "CONNECTED"), "the job reached the host's loopback");
	cr_expect(out_has(r, "FAILED ConnectionRefusedError"),
	    "expected a refused connection on the job's own loopback:\n%s\n%s",
	    r->stdout_data, r->stderr_data);
	afd = accept(lfd, NULL, NULL);
	cr_expect(afd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK),
	    "a connection arrived at the host listener");
	if (afd >= 0)
		close(afd);
	close(lfd);
	sandq_result_free(r);
	free(code);
	sandq_close(c);
}

/*** Limits ***/

/*
 * A fork bomb (every process forks, and keeps trying when refused) ends as
 * pids_limit at the latest at its wall clock; none of its processes
 * survives, and the host and sandqd keep serving.
 */
Test(containment, fork_bomb_hits_the_pids_limit)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.pids = 32, .limits.wall_ms = 10000 };
	char marker[33], *code;
	struct sandq_result *r;

	rand_hex(marker, 16);
	code = text("# bomb-%s\n"
	    "import os\n"
	    "print('TRIED', flush=True)\n"
	    "while True:\n"
	    "    try:\n"
	    "        os.fork()\n"
	    "    except OSError:\n"
	    "        pass\n", marker);
	r = run_job(c, "python", code, &o);
	expect_status(r, "pids_limit");
	expect_tried(r, "TRIED");
	free(code);
	code = text("bomb-%s", marker);
	cr_expect(harness_wait_for(harness_marker_gone, code, GONE_MS),
	    "processes of the bomb outlived it");
	expect_still_serving(c);
	sandq_result_free(r);
	free(code);
	sandq_close(c);
}

/* Touching 1 GiB with a 64 MiB limit ends as memory_limit; the host is fine. */
Test(containment, memory_bomb_hits_the_memory_limit)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.memory_bytes = 64u << 20 };
	struct sandq_result *r;

	r = run_job(c, "python", "print('TRIED', flush=True)\n"
	    "b = bytearray(1 << 30)\n"
	    "for i in range(0, len(b), 4096):\n"
	    "    b[i] = 1\n"
	    "print('SURVIVED')\n", &o);
	expect_status(r, "memory_limit");
	expect_tried(r, "TRIED");
	cr_expect_not(out_has(r, "SURVIVED"));
	sandq_result_free(r);
	expect_still_serving(c);
	sandq_close(c);
}

/* Writes 1000 MiB into a folder capped at 16 MiB: disk_limit. */
static void
expect_disk_limit(const char *dir)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.disk_bytes = 16u << 20 };
	struct sandq_result *r;
	char *script;

	script = text("echo TRIED; dd if=/dev/zero of=%s/big bs=1M count=1000", dir);
	r = run_job(c, "sh", script, &o);
	expect_status(r, "disk_limit");
	expect_tried(r, "TRIED");
	sandq_result_free(r);
	free(script);
	sandq_close(c);
}

Test(containment, filling_the_workspace_hits_the_disk_limit)
{
	expect_disk_limit("/workspace");
}

Test(containment, filling_tmp_hits_the_disk_limit)
{
	expect_disk_limit("/tmp");
}

/*** Snapshots: what a job commits ***/

#define SNAP_DISK ((uint64_t)16 << 20)	/* the jobs' disk limit below */

/* One number from the store's database (sqlite3 CLI, read-only). */
static long long
store_number(const char *sql)
{
	char *cmd = text("sqlite3 -readonly %s/state/store/store.db \"%s\"", H.dir, sql);
	char *out = NULL;
	long long v;

	cr_assert_eq(harness_run(cmd, &out), 0, "%s", cmd);
	v = atoll(out);
	free(out);
	free(cmd);
	return v;
}

/* The stored size of the head of the default tenant's sandbox id. */
static long long
head_bytes(const char *id)
{
	char *sql = text("SELECT size FROM blobs WHERE sha256 = (SELECT head FROM "
	    "sandboxes WHERE tenant = 'default' AND id = '%s')", id);
	long long v = store_number(sql);

	free(sql);
	return v;
}

/*
 * What the workers keep between jobs: each one's kept base (the blocks
 * used on its base tmpfs, seen through /proc/PID/root in its own mount
 * namespace) and the snapshot memfds it holds (image and patch).
 */
static uint64_t
kept_bytes(void)
{
	pid_t pids[16];
	char seen[16][300], *needle = text("--run-dir %s/state/run/", H.dir);
	int n = harness_pgrep(needle, pids, 16), nseen = 0;
	uint64_t total = 0;

	free(needle);

	for (int i = 0; i < n; i++) {
		char path[400], cmd[4096], link[256];
		const char *run = NULL;
		struct statvfs sv;
		struct dirent *de;
		ssize_t len;
		bool dup = false;
		DIR *d;
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pids[i]);
		if ((fd = open(path, O_RDONLY)) < 0)
			continue;
		len = read(fd, cmd, sizeof(cmd) - 1);
		close(fd);
		for (ssize_t k = 0; len > 0 && k < len; k += (ssize_t)strlen(cmd + k) + 1) {
			cmd[len] = '\0';
			if (strcmp(cmd + k, "--run-dir") == 0 && k + 10 < len)
				run = cmd + k + 10;
		}
		for (int k = 0; run != NULL && k < nseen; k++)
			dup |= strcmp(seen[k], run) == 0;
		/* One base per run folder (a spawner shares its worker's). */
		if (run != NULL && !dup && nseen < 16) {
			snprintf(seen[nseen++], sizeof(seen[0]), "%s", run);
			snprintf(path, sizeof(path), "/proc/%d/root%s/base", (int)pids[i], run);
			if (statvfs(path, &sv) == 0)
				total += (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
		}
		snprintf(path, sizeof(path), "/proc/%d/fd", (int)pids[i]);
		if ((d = opendir(path)) == NULL)
			continue;
		while ((de = readdir(d)) != NULL) {
			char fdpath[700];
			struct stat st;

			snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
			len = readlink(fdpath, link, sizeof(link) - 1);
			if (len <= 0)
				continue;
			link[len] = '\0';
			if (strncmp(link, "/memfd:snapshot", 15) == 0 && stat(fdpath, &st) == 0)
				total += (uint64_t)st.st_blocks * 512;
		}
		closedir(d);
	}
	return total;
}

/* kept_bytes() once it has settled: a worker's init brings the kept base
 * up to date after the result is out. Same figure 500 ms apart, or 10 s. */
static uint64_t
kept_bytes_settled(void)
{
	uint64_t last = kept_bytes(), now;

	for (int i = 0; i < 20; i++) {
		usleep(500 * 1000);
		if ((now = kept_bytes()) == last)
			break;
		last = now;
	}
	return last;
}

/* Runs script on sandbox id with a 16 MiB disk limit. */
static struct sandq_result *
snap_job(struct sandq *c, const char *id, const char *script)
{
	struct sandq_job_opts o = { .sandbox = id, .limits.disk_bytes = SNAP_DISK };

	return run_job(c, "sh", script, &o);
}

/* A refused commit: disk_limit naming the limit, head and version as they were. */
static void
expect_not_committed(const struct sandq_result *r, uint64_t version, const char *head)
{
	char limit[32];

	snprintf(limit, sizeof(limit), "%llu", (unsigned long long)SNAP_DISK);
	expect_status(r, "disk_limit");
	expect_tried(r, "TRIED");
	cr_log_info("%s", r->error_message ? r->error_message : "no message");
	cr_expect_eq(r->version, version, "the refused commit moved the version");
	cr_expect_str_eq(r->snapshot ? r->snapshot : "", head, "the head moved");
	cr_expect(r->error_message != NULL && strstr(r->error_message, limit) != NULL,
	    "the message does not name the limit: %s",
	    r->error_message ? r->error_message : "none");
}

/*
 * Sparse files and hard links take little of a 16 MiB tmpfs but read back
 * in full: a job that makes 300 MiB of holes, or 19 names for one 8 MiB
 * file, commits nothing (disk_limit), and neither the store nor the
 * workers' kept copies grow; a job within the limit still commits, and
 * grows the head and what the workers keep by a bounded multiple of it.
 */
Test(containment, sparse_files_and_hard_links_never_grow_a_sandbox_past_the_disk_limit)
{
	struct sandq *c = harness_client(&H);
	struct sandq_op_args a = { .sandbox = "sp1" };
	struct sandq_result *r;
	long long size0, size1;
	uint64_t version, kept0, kept1;
	char head[65];

	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	r = snap_job(c, "sp1", "head -c 1000000 /dev/urandom > seed");
	expect_status(r, "ok");
	version = r->version;
	snprintf(head, sizeof(head), "%s", r->snapshot);
	sandq_result_free(r);
	size0 = head_bytes("sp1");
	kept0 = kept_bytes_settled();

	/* RLIMIT_FSIZE keeps each file below the limit: 20 of them, then. */
	r = snap_job(c, "sp1", "for i in $(seq 1 19); do truncate -s 15M s$i; done && "
	    "dd if=/dev/zero of=s20 bs=1 count=1 seek=15M 2>/dev/null && du -sk . && "
	    "echo TRIED");
	expect_not_committed(r, version, head);
	sandq_result_free(r);

	r = snap_job(c, "sp1", "head -c 8M /dev/urandom > f && "
	    "for i in $(seq 1 18); do ln f g$i; done && du -sk . && echo TRIED");
	expect_not_committed(r, version, head);
	sandq_result_free(r);
	size1 = head_bytes("sp1");
	kept1 = kept_bytes_settled();
	cr_expect_eq(size1, size0, "the head grew from %lld to %lld bytes", size0, size1);
	cr_expect_leq(kept1, kept0 + ((uint64_t)1 << 20), "the workers keep %llu bytes "
	    "after the refused jobs, %llu before", (unsigned long long)kept1,
	    (unsigned long long)kept0);

	/* Within the limit: committed, and bounded by a multiple of it. */
	r = snap_job(c, "sp1", "head -c 12M /dev/urandom > ok");
	expect_status(r, "ok");
	cr_expect_eq(r->version, version + 1);
	sandq_result_free(r);
	size1 = head_bytes("sp1");
	kept1 = kept_bytes_settled();
	cr_expect_leq((uint64_t)(size1 - size0), SNAP_DISK * 5 / 4, "the head grew by "
	    "%lld bytes with a limit of %llu", size1 - size0, (unsigned long long)SNAP_DISK);
	cr_expect_leq(kept1 - kept0, SNAP_DISK * 5 / 2, "the workers keep %llu bytes "
	    "more", (unsigned long long)(kept1 - kept0));
	cr_log_info("head %lld -> %lld bytes; kept %llu -> %llu bytes", size0, size1,
	    (unsigned long long)kept0, (unsigned long long)kept1);
	sandq_close(c);
}

/*
 * 1 GiB on stdout with a 1 MiB cap: output_limit, exactly 1 MiB kept. The
 * job is stopped at the cap rather than drained to the end.
 */
Test(containment, a_gibibyte_of_output_hits_the_output_limit)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.output_bytes = 1u << 20,
	    .limits.wall_ms = 60000 };
	struct sandq_result *r;

	r = run_job(c, "sh", "echo TRIED; head -c 1073741824 /dev/zero", &o);
	expect_status(r, "output_limit");
	cr_expect_eq(r->stdout_len, 1u << 20);
	cr_expect(r->stdout_truncated);
	cr_expect_eq(strncmp((char *)r->stdout_data, "TRIED\n", 6), 0);
	sandq_result_free(r);
	sandq_close(c);
}

/* A busy loop past 1 s of CPU: cpu_limit, well before the wall clock. */
Test(containment, cpu_burn_hits_the_cpu_limit)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.cpu_ms = 1000, .limits.wall_ms = 30000 };
	struct sandq_result *r;

	r = run_job(c, "sh", "echo TRIED; while :; do :; done", &o);
	expect_status(r, "cpu_limit");
	expect_tried(r, "TRIED");
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * Four processes burning at once: the CPU limit is on the job's total, so
 * splitting the work across processes does not multiply it.
 */
Test(containment, cpu_limit_counts_every_process_together)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.cpu_ms = 2000, .limits.wall_ms = 60000 };
	struct sandq_result *r;

	r = run_job(c, "sh", "echo TRIED; for i in 1 2 3 4; do (while :; do :; done) & done; "
	    "wait", &o);
	expect_status(r, "cpu_limit");
	expect_tried(r, "TRIED");
	sandq_result_free(r);
	sandq_close(c);
}

/*** Leftovers ***/

/*
 * The script of a job leaving three daemons behind: setsid with HUP and TERM
 * ignored, double-forked with nohup, and a double-forked subshell that keeps
 * the job's stdout open. Their command line is "sleep $D" ($D a number
 * from harness_marker(), unique to the test and run), which the script's
 * own command line does not contain. The job waits until all three run, so
 * the attempt is real, and prints DAEMONS 3.
 */
#define DAEMONS_SH \
	"setsid sh -c \"trap '' HUP TERM; exec sleep $D\" </dev/null >/dev/null 2>&1 & " \
	"( setsid nohup sleep $D </dev/null >/dev/null 2>&1 & ); " \
	"( ( trap '' HUP TERM; exec sleep $D ) & ); " \
	"for i in $(seq 3000); do [ \"$(pgrep -xc sleep)\" -ge 3 ] && break; " \
	"sleep 0.01; done; echo DAEMONS $(pgrep -xc sleep); "

/* Double-forked, setsid, signal-ignoring daemons die with their job. */
Test(containment, double_forked_daemons_die_with_the_job)
{
	struct sandq *c = harness_client(&H);
	char denv[64], marker[64];
	const char *env[] = { denv, NULL };
	struct sandq_job_opts o = { .env = env };
	struct sandq_result *r;

	harness_marker(marker, sizeof(marker), "sleep 7777");
	snprintf(denv, sizeof(denv), "D=%s", marker + strlen("sleep "));
	r = run_job(c, "sh", DAEMONS_SH "exit 0", &o);
	expect_status(r, "ok");
	cr_expect(out_has(r, "DAEMONS 3"), "the daemons did not all start:\n%s\n%s",
	    r->stdout_data, r->stderr_data);
	cr_expect(harness_wait_for(harness_marker_gone, marker, GONE_MS),
	    "a daemon of the job outlived it");
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * Job A writes a secret into /workspace, /tmp and /dev/shm and sleeps; while
 * it runs, job B (on the other worker) looks for it everywhere it can. A's
 * sleep is killed from the host once B is done; it must still be running
 * then, so B searched while A's files existed.
 */
Test(containment, a_concurrent_jobs_files_are_out_of_reach)
{
	struct sandq *c = harness_client(&H);
	char secret[33], denv[64], marker[64], ida[SANDQ_ID_MAX + 1];
	const char *env[] = { denv, NULL };
	struct sandq_job_opts oa = { .env = env, .limits.wall_ms = 90000 };
	struct sandq_result *ra = NULL, *rb;
	char *script, *pat;
	pid_t pids[4], a;

	rand_hex(secret, 16);
	harness_marker(marker, sizeof(marker), "sleep 60");
	snprintf(denv, sizeof(denv), "D=%s", marker + strlen("sleep "));
	script = text("printf %%s %s | tee /workspace/s /tmp/s /dev/shm/s >/dev/null && "
	    "echo READY && exec sleep $D", secret);
	submit(c, "sh", script, &oa, ida);
	free(script);
	/* A's files are written once its shell has exec'd the sleep. */
	a = harness_wait_job(&H, marker, 0, 30000);

	pat = pattern_of(secret);
	script = text("cat /workspace/s /tmp/s /dev/shm/s 2>&1; ls /proc/*/root/ 2>&1; "
	    "cat /proc/*/root/workspace/s /proc/*/root/tmp/s 2>&1; "
	    "timeout 20 grep -rs --exclude-dir=proc --exclude-dir=usr --exclude-dir=sys "
	    "-e '%s' / 2>&1; echo TRIED", pat);
	rb = run_job(c, "sh", script, NULL);
	expect_tried(rb, "TRIED");
	expect_absent(rb, secret, "job B read job A's secret");

	cr_assert(harness_jobs(&H, marker, pids, 4) == 1 && pids[0] == a,
	    "job A ended before job B did");
	kill(a, SIGKILL);
	cr_assert_eq(sandq_wait(c, ida, WAIT_MS, &ra), 0);
	cr_expect(out_has(ra, "READY"), "job A did not write its files: %s", ra->stderr_data);
	sandq_result_free(ra);
	sandq_result_free(rb);
	free(script);
	free(pat);
	sandq_close(c);
}

/* The cgroup folders of a sandqd, newline-separated (owned; "" if none). */
static char *
sandq_cgroups(pid_t sandqd)
{
	char cmd[160], *out = NULL;

	snprintf(cmd, sizeof(cmd), "find /sys/fs/cgroup -maxdepth 8 -type d "
	    "-name 'sandq.%d' 2>/dev/null", (int)sandqd);
	harness_run(cmd, &out);
	return out;
}

/* Sub-folders of dir whose names start with c; -1 if dir cannot be read. */
static int
count_subdirs(const char *dir, char c, char sub[][300], int max)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (dp == NULL)
		return -1;
	while ((de = readdir(dp)) != NULL)
		if (de->d_type == DT_DIR && de->d_name[0] == c) {
			if (sub != NULL && n < max)
				snprintf(sub[n], sizeof(sub[n]), "%s/%s", dir, de->d_name);
			n++;
		}
	closedir(dp);
	return n;
}

/* Every w* folder of every listed sandq.PID cgroup holds at most one j*. */
static bool
cgroups_settled(void *list)
{
	char *copy = strdup(list), *dir, *save = NULL;
	char workers[16][300];
	bool ok = true;

	for (dir = strtok_r(copy, "\n", &save); dir && ok; dir = strtok_r(NULL, "\n", &save)) {
		int nw = count_subdirs(dir, 'w', workers, 16);

		for (int i = 0; i < nw && i < 16 && ok; i++)
			ok = count_subdirs(workers[i], 'j', NULL, 0) <= 1;
	}
	free(copy);
	return ok;
}

/*
 * What every job after the one that tries to stay runs: FILES 0 and IPC 0
 * when /tmp, /dev/shm and SysV IPC are clean, then the details and its
 * processes, in which nothing of the earlier job may appear.
 */
#define CLEAN_SH \
	"echo FILES $(ls -A /tmp /dev/shm | grep -vc -e ':$' -e '^$'); " \
	"echo IPC $(tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/sem " \
	"/proc/sysvipc/msg | grep -c .); ipcs; ps -e -o pid,args; ls -A /tmp /dev/shm"

/*
 * Nothing outlives a job: after one that tries hard to stay (daemons, SysV
 * IPC objects, files in /tmp and /dev/shm, a mount attempt), every later job
 * on either worker sees an empty /tmp and /dev/shm, no IPC object and only
 * its own processes; no process of it remains on the host, nothing of it is
 * mounted there, and each worker keeps at most one sandbox cgroup (the one
 * prepared for its next job).
 */
Test(containment, nothing_outlives_a_job)
{
	struct sandq *c = harness_client(&H);
	char denv[64], marker[64], *cg, *hostpath, *mounts = NULL;
	const char *env[] = { denv, NULL };
	struct sandq_job_opts o = { .env = env, .limits.wall_ms = 30000 };
	struct sandq_result *r;
	bool seen[2] = { false, false };
	int jobs = 0;

	harness_marker(marker, sizeof(marker), "sleep 8888");
	snprintf(denv, sizeof(denv), "D=%s", marker + strlen("sleep "));
	r = run_job(c, "sh", DAEMONS_SH
	    "ipcmk -M 4096; ipcmk -S 1; ipcmk -Q; "
	    "echo stay > /tmp/stay-$D; echo stay > /dev/shm/stay-$D; "
	    "( mount -t tmpfs none /workspace >/dev/null 2>&1 & ); "
	    "echo IPC $(tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/sem "
	    "/proc/sysvipc/msg | grep -c .); ls /tmp /dev/shm", &o);
	expect_status(r, "ok");
	cr_expect(out_has(r, "DAEMONS 3") && out_has(r, "IPC 3") && out_has(r, "stay-"),
	    "the job did not set up all it tried to leave:\n%s\n%s",
	    r->stdout_data, r->stderr_data);
	sandq_result_free(r);

	/* Pairs of concurrent jobs until both workers ran at least one. */
	for (int round = 0; round < 10 && (jobs < 3 || !seen[0] || !seen[1]); round++) {
		char ids[2][SANDQ_ID_MAX + 1];

		for (int i = 0; i < 2; i++)
			submit(c, "sh", CLEAN_SH, NULL, ids[i]);
		for (int i = 0; i < 2; i++, jobs++) {
			cr_assert_eq(sandq_wait(c, ids[i], WAIT_MS, &r), 0);
			expect_status(r, "ok");
			cr_expect(out_has(r, "FILES 0\n"), "files left in /tmp or /dev/shm:\n%s",
			    r->stdout_data);
			cr_expect(out_has(r, "IPC 0\n"), "IPC objects left:\n%s", r->stdout_data);
			expect_absent(r, denv + 2, "a process or file of the earlier job");
			if (r->worker >= 0 && r->worker < 2)
				seen[r->worker] = true;
			sandq_result_free(r);
		}
	}
	cr_expect(seen[0] && seen[1], "not every worker ran a job after the leftover one");

	cr_expect(harness_wait_for(harness_marker_gone, marker, GONE_MS),
	    "a daemon of the job is still running on the host");
	hostpath = text("/tmp/stay-%s", denv + 2);
	cr_expect(access(hostpath, F_OK) < 0, "%s exists on the host", hostpath);
	free(hostpath);
	hostpath = text("/dev/shm/stay-%s", denv + 2);
	cr_expect(access(hostpath, F_OK) < 0, "%s exists on the host", hostpath);
	free(hostpath);
	harness_run("cat /proc/self/mountinfo", &mounts);
	cr_expect_null(strstr(mounts, H.dir), "a sandbox mount is in the host's table:\n%s",
	    mounts);
	free(mounts);

	cg = sandq_cgroups(H.sandqd_pid);
	cr_expect(cg[0] != '\0', "no cgroup named sandq.%d under /sys/fs/cgroup",
	    (int)H.sandqd_pid);
	cr_expect(harness_wait_for(cgroups_settled, cg, 30000),
	    "a worker keeps more than one job cgroup:\n%s", cg);
	free(cg);
	sandq_close(c);
}

/*** Syscalls ***/

/*
 * Each call the job filter refuses, with harmless arguments (NULL pointers,
 * bad descriptors) so an unfiltered call fails with another errno or does
 * nothing lasting. x86_64 numbers. The label is printed with the errno.
 */
static const char refused_py[] =
	"import ctypes, os\n"
	"libc = ctypes.CDLL(None, use_errno=True)\n"
	"libc.syscall.restype = ctypes.c_long\n"
	"L = ctypes.c_long\n"
	"buf = ctypes.create_string_buffer(512)\n"
	"buf[0] = b'\\x01'  # struct timex .modes = ADJ_OFFSET; a byte for TIOCSTI\n"
	"B = ctypes.addressof(buf)\n"
	"calls = [\n"
	"    ('mount', 165, 0, 0, 0, 0, 0), ('umount2', 166, 0, 0),\n"
	"    ('pivot_root', 155, 0, 0), ('chroot', 161, 0),\n"
	"    ('unshare', 272, 0x20000), ('setns', 308, -1, 0),\n"
	"    ('clone', 56, 0x20000 | 0x10000000 | 17, 0, 0, 0, 0),\n"
	"    ('ptrace', 101, 16, 1, 0, 0),\n"
	"    ('process_vm_readv', 310, 1, 0, 0, 0, 0, 0),\n"
	"    ('process_vm_writev', 311, 1, 0, 0, 0, 0, 0),\n"
	"    ('kexec_load', 246, 0, 0, 0, 0), ('kexec_file_load', 320, -1, -1, 0, 0, 0),\n"
	"    ('init_module', 175, 0, 0, 0), ('finit_module', 313, -1, 0, 0),\n"
	"    ('delete_module', 176, 0, 0), ('bpf', 321, 0, 0, 0),\n"
	"    ('perf_event_open', 298, 0, 0, -1, -1, 0), ('userfaultfd', 323, 0),\n"
	"    ('io_uring_setup', 425, 0, 0), ('io_uring_enter', 426, -1, 0, 0, 0, 0, 0),\n"
	"    ('io_uring_register', 427, -1, 0, 0, 0), ('keyctl', 250, 0, 0, 0, 0, 0),\n"
	"    ('add_key', 248, 0, 0, 0, 0, 0), ('request_key', 249, 0, 0, 0, 0),\n"
	"    ('open_by_handle_at', 304, -1, 0, 0),\n"
	"    ('name_to_handle_at', 303, -100, 0, 0, 0, 0),\n"
	"    ('personality', 135, 0x0008),  # PER_LINUX32\n"
	"    ('settimeofday', 164, 0, 0), ('clock_settime', 227, 0, 0),\n"
	"    ('clock_adjtime', 305, 0, B), ('adjtimex', 159, B),\n"
	"    ('reboot', 169, 0, 0, 0, 0), ('swapon', 167, 0, 0), ('swapoff', 168, 0),\n"
	"    ('syslog', 103, 10, 0, 0), ('acct', 163, 0), ('quotactl', 179, 0, 0, 0, 0),\n"
	"    ('ioctl_TIOCSTI', 16, 0, 0x5412, B), ('ioctl_TIOCLINUX', 16, 0, 0x541C, B),\n"
	"    ('socket_AF_NETLINK', 41, 16, 3, 0), ('socket_AF_PACKET', 41, 17, 3, 0),\n"
	"]\n"
	"for label, nr, *args in calls:\n"
	"    ctypes.set_errno(0)\n"
	"    r = libc.syscall(L(nr), *[L(a) for a in args])\n"
	"    if label == 'clone' and r == 0:\n"
	"        os._exit(0)  # the child of a clone that was allowed\n"
	"    if label == 'clone' and r > 0:\n"
	"        os.waitpid(r, 0)\n"
	"    if label == 'personality' and r != -1:\n"
	"        libc.syscall(L(135), L(0))\n"
	"    print(label, ctypes.get_errno() if r == -1 else 'returned %d' % r, flush=True)\n"
	"print('DONE')\n";

/* The labels refused_py prints; each is its syscall's name up to a '_' + capital. */
static const char *const refused_labels[] = {
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "clone",
	"ptrace", "process_vm_readv", "process_vm_writev", "kexec_load",
	"kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
	"perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "keyctl", "add_key", "request_key",
	"open_by_handle_at", "name_to_handle_at", "personality", "settimeofday",
	"clock_settime", "clock_adjtime", "adjtimex", "reboot", "swapon",
	"swapoff", "syslog", "acct", "quotactl", "ioctl_TIOCSTI", "ioctl_TIOCLINUX",
	"socket_AF_NETLINK", "socket_AF_PACKET",
};

static uint64_t
refused_count(const struct sandq_result *r, const char *name)
{
	for (size_t i = 0; i < r->nrefused; i++)
		if (r->refused[i].syscall && strcmp(r->refused[i].syscall, name) == 0)
			return r->refused[i].count;
	return 0;
}

/* Appends " word" to the list buf (n bytes), truncating quietly. */
static void
list_add(char *buf, size_t n, const char *word)
{
	size_t len = strlen(buf);

	snprintf(buf + len, n - len, " %s", word);
}

/*
 * Every refused syscall fails with EPERM, the job keeps running to its
 * end, and the result names each refused call.
 */
Test(containment, every_refused_syscall_fails_with_eperm_and_is_reported)
{
	char not_eperm[1024] = "", not_reported[1024] = "";
	struct sandq *c;
	struct sandq_result *r;
	struct utsname u;

	cr_assert_eq(uname(&u), 0);
	if (strcmp(u.machine, "x86_64") != 0)
		cr_skip_test("the syscall table is x86_64's; this is %s", u.machine);
	c = harness_client(&H);
	r = run_job(c, "python", refused_py, NULL);
	expect_status(r, "ok");
	expect_tried(r, "DONE");
	for (size_t i = 0; i < sizeof(refused_labels) / sizeof(refused_labels[0]); i++) {
		const char *label = refused_labels[i], *cut = strstr(label, "_T");
		char *want = text("%s 1\n", label), name[32];

		if (cut == NULL)
			cut = strstr(label, "_AF");
		snprintf(name, sizeof(name), "%.*s",
		    cut ? (int)(cut - label) : (int)strlen(label), label);
		if (!out_has(r, want))
			list_add(not_eperm, sizeof(not_eperm), label);
		if (refused_count(r, name) == 0 && !strstr(not_reported, name))
			list_add(not_reported, sizeof(not_reported), name);
		free(want);
	}
	cr_expect(not_eperm[0] == '\0', "not refused with EPERM:%s\nthe job printed:\n%s",
	    not_eperm, r->stdout_data);
	cr_expect(not_reported[0] == '\0', "missing from the result's %zu refusals:%s",
	    r->nrefused, not_reported);
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * In net mode "none" a job may still make AF_UNIX, AF_INET and AF_INET6
 * sockets, which reach only its own loopback; asking for egress is refused.
 */
Test(containment, own_loopback_sockets_work_and_egress_is_rejected)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .net = "egress" };
	bool v6 = access("/proc/net/if_inet6", F_OK) == 0;
	struct sandq_result *r;

	r = run_job(c, "python", "import socket\n"
	    "for name in ('AF_UNIX', 'AF_INET', 'AF_INET6'):\n"
	    "    try:\n"
	    "        socket.socket(getattr(socket, name), socket.SOCK_STREAM).close()\n"
	    "        print(name, 'created')\n"
	    "    except OSError as e:\n"
	    "        print(name, 'refused', e.errno)\n"
	    "try:\n"
	    "    srv = socket.create_server(('127.0.0.1', 0))\n"
	    "    cli = socket.create_connection(srv.getsockname(), timeout=3)\n"
	    "    srv.accept()[0].sendall(b'pong')\n"
	    "    print('LOOPBACK', cli.recv(4).decode())\n"
	    "except OSError as e:\n"
	    "    print('LOOPBACK failed', e)\n", NULL);
	expect_status(r, "ok");
	cr_expect(out_has(r, "AF_UNIX created\n"), "%s", r->stdout_data);
	cr_expect(out_has(r, "AF_INET created\n"), "%s", r->stdout_data);
	if (v6)
		cr_expect(out_has(r, "AF_INET6 created\n"), "%s", r->stdout_data);
	else
		cr_log_warn("AF_INET6 not checked: this kernel has no IPv6 "
		    "(no /proc/net/if_inet6)");
	cr_expect(out_has(r, "LOOPBACK pong\n"), "%s", r->stdout_data);
	sandq_result_free(r);

	r = run_job(c, "sh", "echo RAN", &o);
	expect_status(r, "rejected");
	cr_expect_not(out_has(r, "RAN"));
	cr_expect(r->error_message && strstr(r->error_message, "net"), "message: %s",
	    r->error_message ? r->error_message : "(none)");
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * net "unix": no IP at all. The job's inet socket is refused (EPERM) and
 * recorded; unix sockets still work. A tenant whose section allows only
 * "unix" has a job that leaves the default "none" rejected, naming the field,
 * and one asking for "unix" run.
 */
Test(containment, net_unix_refuses_ip_and_hosts_choose_the_modes_they_allow)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .net = "unix" };
	const char *const extra[] = { "--set", "tenants=default,locked",
	    "--set", "tenant.locked.net_modes=unix", NULL };
	char err[256];
	struct harness h;
	struct sandq_result *r;
	bool recorded = false;

	r = run_job(c, "python", "import socket\n"
	    "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()\n"
	    "print('UNIX created')\n"
	    "try:\n"
	    "    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
	    "    print('INET created')\n"
	    "except OSError as e:\n"
	    "    print('INET refused', e.errno)\n", &o);
	expect_status(r, "ok");
	cr_expect(out_has(r, "UNIX created\n"), "%s", r->stdout_data);
	cr_expect(out_has(r, "INET refused 1\n"), "%s", r->stdout_data);
	for (size_t i = 0; i < r->nrefused; i++)
		recorded |= strcmp(r->refused[i].syscall, "socket") == 0;
	cr_expect(recorded, "the refused socket() is not in the result");
	sandq_result_free(r);
	sandq_close(c);

	/* Tenant "locked" may use only "unix": its default "none" is refused. */
	harness_start(&h, 1, extra);
	c = sandq_connect(h.url, "locked", err, sizeof(err));
	cr_assert_not_null(c, "%s", err);
	r = run_job(c, "sh", "echo RAN", NULL);
	expect_status(r, "rejected");
	cr_expect_not(out_has(r, "RAN"));
	cr_expect(r->error_message && strstr(r->error_message, "field 'net': mode 'none' "
	    "(the default) is not allowed for tenant 'locked' (net_modes: unix)"),
	    "message: %s", r->error_message ? r->error_message : "(none)");
	sandq_result_free(r);
	r = run_job(c, "sh", "echo RAN", &o);
	expect_status(r, "ok");
	cr_expect(out_has(r, "RAN\n"), "%s", r->stdout_data);
	sandq_result_free(r);
	sandq_close(c);
	harness_stop(&h);
}

/*
 * A flood of refused calls: every one is answered and counted, and a job
 * that never stops making them is still stopped at its wall clock (the
 * worker stays in charge).
 */
Test(containment, a_flood_of_refused_calls_is_answered_and_counted)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.wall_ms = 3000 };
	struct sandq_result *r;
	uint64_t n = 0;

	r = run_job(c, "python", "import ctypes\n"
	    "libc = ctypes.CDLL(None, use_errno=True)\n"
	    "bad = sum(1 for _ in range(20000) if libc.syscall(165, 0, 0, 0, 0, 0) == -1 "
	    "and ctypes.get_errno() == 1)\n"
	    "print('EPERM', bad)\n", NULL);
	expect_status(r, "ok");
	cr_expect(out_has(r, "EPERM 20000\n"), "%s%s", r->stdout_data, r->stderr_data);
	for (size_t i = 0; i < r->nrefused; i++)
		if (strcmp(r->refused[i].syscall, "mount") == 0)
			n = r->refused[i].count;
	cr_expect_eq(n, 20000, "mount counted %" PRIu64 " times", n);
	sandq_result_free(r);

	r = run_job(c, "python", "import ctypes\n"
	    "libc = ctypes.CDLL(None)\n"
	    "print('FLOODING', flush=True)\n"
	    "while True: libc.syscall(165, 0, 0, 0, 0, 0)\n", &o);
	expect_status(r, "timeout");
	cr_expect(out_has(r, "FLOODING\n"), "%s", r->stdout_data);
	sandq_result_free(r);
	sandq_close(c);
}

/* mknod of a character or block device fails; no device node exists after. */
Test(containment, mknod_fails)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	r = run_job(c, "sh", "mknod /tmp/n c 1 3 || echo TMP-FAILED; "
	    "mknod /workspace/n b 8 0 || echo WORKSPACE-FAILED; "
	    "find /tmp /workspace \\( -type c -o -type b \\) -printf 'NODE %p\\n'; "
	    "echo TRIED", NULL);
	expect_tried(r, "TRIED");
	cr_expect(out_has(r, "TMP-FAILED") && out_has(r, "WORKSPACE-FAILED"),
	    "a mknod succeeded:\n%s", r->stdout_data);
	cr_expect_not(out_has(r, "NODE"), "a device node exists:\n%s", r->stdout_data);
	sandq_result_free(r);
	sandq_close(c);
}

/*** Cleanup at stop ***/

static bool
none_exist(void *list)
{
	char *copy = strdup(list), *dir, *save = NULL;
	bool none = true;

	for (dir = strtok_r(copy, "\n", &save); dir; dir = strtok_r(NULL, "\n", &save))
		none &= access(dir, F_OK) < 0;
	free(copy);
	return none;
}

/* Its own sandqd, stopped inside the test: no fixture. */
TestSuite(containment_cleanup, .timeout = 300);

/* After sandqd stops, none of its cgroups remains. */
Test(containment_cleanup, stopping_sandqd_removes_its_cgroups)
{
	struct harness h;
	struct sandq *c;
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1], *cg, *after;
	pid_t pid;

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids");
	harness_start(&h, 2, NULL);
	pid = h.sandqd_pid;
	c = harness_client(&h);
	cr_assert_eq(sandq_submit_sh(c, "echo ran", NULL, id), 0);
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0);
	expect_status(r, "ok");
	sandq_result_free(r);
	sandq_close(c);
	cg = sandq_cgroups(pid);
	cr_expect(cg[0] != '\0', "no cgroup named sandq.%d under /sys/fs/cgroup", (int)pid);
	harness_stop(&h);
	cr_expect(harness_wait_for(none_exist, cg, 30000), "cgroups left after stop:\n%s", cg);
	after = sandq_cgroups(pid);
	cr_expect_str_eq(after, "", "cgroups left after stop:\n%s", after);
	free(after);
	free(cg);
}
