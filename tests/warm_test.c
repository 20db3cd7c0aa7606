/*
 * warm_test.c - a python job on the warm interpreter sees what a cold start
 * sees, under the same confinement (issue 19, item 3; sandbox/warm.c).
 *
 * One sandqd with one worker. The same probe runs twice: once on the warm
 * path, once forced cold by a start-up variable the warm process lacks
 * (PYTHONCOLD=1: docs/decisions.md's rule), which the probe leaves out of
 * the environment it prints. Which path ran is read from
 * /proc/self/cmdline, the one documented difference (it shows the
 * bootstrap). Everything else the probe prints must be byte for byte the
 * same: argv, __main__'s globals, sys.path, sys.modules, the environment,
 * cwd, stdin, sys.flags, the rlimits, its descriptors, its traceback and
 * exit code. Then: the job's limits and seccomp filter bind a warm job,
 * and a shell job on a sandbox whose warm python3 was waiting sees none.
 * A worker's sandbox starts a warm python3 only after a python job
 * (sandbox.c), so each case runs one first (prime()).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct harness H;

static void
setup(void)
{
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 1, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(warm, .init = setup, .fini = teardown);

/* Runs code as a python job with o; returns the result (the caller frees). */
static struct sandq_result *
python(struct sandq *c, const char *code, const struct sandq_job_opts *o)
{
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	cr_assert(sandq_submit_python(c, code, o, id) == 0, "submit: %s",
	    sandq_last_error(c));
	cr_assert(sandq_wait(c, id, 60000, &r) == 0, "wait: %s", sandq_last_error(c));
	return r;
}

/*
 * A python job, so that the worker's next sandbox starts a warm python3
 * (sandbox.c starts one after a python job: one worker here).
 */
static void
prime(struct sandq *c)
{
	struct sandq_result *r = python(c, "pass", NULL);

	cr_assert_str_eq(r->status, "ok", "%s", r->stderr_data);
	sandq_result_free(r);
}

/* Everything a cold start decides before the code runs, then a traceback. */
static const char probe[] =
	"g = sorted(globals())\n"
	"import sys\n"
	"m = sorted(sys.modules)\n"
	"import os, resource\n"
	"print(g)\n"
	"print(sys.argv, sys.orig_argv)\n"
	"print(sys.path)\n"
	"print(m)\n"
	"print(sorted((k, v) for k, v in os.environ.items() if k != 'PYTHONCOLD'))\n"
	"print(os.getcwd())\n"
	"print(repr(sys.stdin.read()))\n"
	"print(sys.flags)\n"
	"print(sys.executable, sys.prefix, sys.getfilesystemencoding(),\n"
	"    sys.stdout.encoding, sys.stdin.encoding, sys.stdout.line_buffering)\n"
	"print([resource.getrlimit(getattr(resource, n)) for n in ('RLIMIT_CPU',\n"
	"    'RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE',\n"
	"    'RLIMIT_CORE', 'RLIMIT_STACK')])\n"
	"print(sorted(os.listdir('/proc/self/fd')), os.getppid(), os.getpgrp() == os.getpid())\n"
	"print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
	"print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])\n"
	"print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])\n"
	"sys.stdout.flush()\n"
	"print('warm' if b'def _' + b'r(s)' in open('/proc/self/cmdline', 'rb').read() else 'cold',\n"
	"    file=sys.stderr)\n"
	"def f():\n"
	"    return 1 / 0\n"
	"f()\n";

Test(warm, python_job_sees_what_a_cold_start_sees)
{
	struct sandq *c = harness_client(&H);
	const char *const env_warm[] = { "FOO=bar", "X=a=b", NULL };
	const char *const env_cold[] = { "FOO=bar", "X=a=b", "PYTHONCOLD=1", NULL };
	struct sandq_job_opts o = { .env = env_warm, .cwd = "/workspace/sub",
	    .stdin_data = "hello\nworld", .stdin_len = 11, .has_stdin = true };
	struct sandq_result *w, *k;
	const char *tb = "Traceback (most recent call last):\n"
	    "  File \"<string>\", line 27, in <module>\n"
	    "  File \"<string>\", line 26, in f\n"
	    "ZeroDivisionError: division by zero\n";

	prime(c);
	w = python(c, probe, &o);
	o.env = env_cold;
	k = python(c, probe, &o);
	cr_assert_str_eq(w->status, "exit", "%s", w->stderr_data);
	cr_assert_str_eq(k->status, "exit", "%s", k->stderr_data);
	/* The path each took: the comparison below is warm against cold. */
	cr_assert(strncmp((char *)w->stderr_data, "warm\n", 5) == 0, "%s", w->stderr_data);
	cr_assert(strncmp((char *)k->stderr_data, "cold\n", 5) == 0, "%s", k->stderr_data);
	cr_expect_str_eq((char *)w->stdout_data, (char *)k->stdout_data);
	cr_expect_str_eq((char *)w->stderr_data + 5, (char *)k->stderr_data + 5);
	cr_expect_str_eq((char *)k->stderr_data + 5, tb);
	cr_expect_eq(w->exit_code, 1);
	cr_expect_eq(k->exit_code, 1);
	/* What a cold start has, spelt out for the reader of a failure. */
	cr_expect(strstr((char *)w->stdout_data, "['__annotations__', '__builtins__', "
	    "'__doc__', '__loader__', '__name__', '__package__', '__spec__']\n") != NULL,
	    "%s", w->stdout_data);
	cr_expect(strstr((char *)w->stdout_data, "['-c'] ['python3', '-c', \"g = sorted")
	    != NULL, "%s", w->stdout_data);
	cr_expect(strstr((char *)w->stdout_data, "('FOO', 'bar')") != NULL);
	cr_expect(strstr((char *)w->stdout_data, "('X', 'a=b')") != NULL);
	cr_expect(strstr((char *)w->stdout_data, "\n/workspace/sub\n'hello\\nworld'\n")
	    != NULL, "%s", w->stdout_data);
	sandq_result_free(w);
	sandq_result_free(k);

	/* Exit statuses and SystemExit's message, warm. */
	w = python(c, "import sys; print('x'); sys.exit(3)", NULL);
	cr_expect_eq(w->exit_code, 3);
	cr_expect_str_eq((char *)w->stdout_data, "x\n");
	sandq_result_free(w);
	w = python(c, "raise SystemExit('bye')", NULL);
	cr_expect_eq(w->exit_code, 1);
	cr_expect_str_eq((char *)w->stderr_data, "bye\n");
	sandq_result_free(w);
	/* A syntax error has no traceback lines, as with a cold -c. */
	w = python(c, "x = (", NULL);
	cr_expect_eq(w->exit_code, 1);
	cr_expect_str_eq((char *)w->stderr_data, "  File \"<string>\", line 1\n"
	    "    x = (\n        ^\nSyntaxError: '(' was never closed\n");
	sandq_result_free(w);
	/* A missing cwd, reported as a cold start's spawn would. */
	o = (struct sandq_job_opts){ .cwd = "/nonexistent" };
	w = python(c, "print(1)", &o);
	cr_expect_eq(w->exit_code, 126, "%s %s", w->status, w->stderr_data);
	cr_expect_str_eq((char *)w->stderr_data,
	    "sandq: /nonexistent: No such file or directory\n");
	sandq_result_free(w);
	sandq_close(c);
}

Test(warm, limits_and_filter_bind_a_warm_job)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .limits.memory_bytes = 128u << 20 };
	struct sandq_result *r;
	const char *marker = "import sys\n"
	    "assert b'def _' + b'r(s)' in open('/proc/self/cmdline', 'rb').read(), 'not warm'\n";
	char code[1024];

	/* The memory cgroup's OOM kill. */
	prime(c);
	snprintf(code, sizeof(code), "%sx = bytearray(512 << 20)\n", marker);
	r = python(c, code, &o);
	cr_expect_str_eq(r->status, "memory_limit", "%s", r->stderr_data);
	sandq_result_free(r);

	/* The descriptor limit (limits.c: 1024), set by init at hand-off. */
	snprintf(code, sizeof(code), "%sfs = []\n"
	    "try:\n"
	    "    while True: fs.append(open('/dev/null'))\n"
	    "except OSError as e: print(e.errno, len(fs) + 3)\n", marker);
	r = python(c, code, NULL);
	cr_expect_str_eq(r->status, "ok", "%s", r->stderr_data);
	cr_expect_str_eq((char *)r->stdout_data, "24 1024\n");
	sandq_result_free(r);

	/* The file size limit: disk_bytes. */
	o = (struct sandq_job_opts){ .limits.disk_bytes = 1u << 20 };
	snprintf(code, sizeof(code), "%simport resource\n"
	    "print(resource.getrlimit(resource.RLIMIT_FSIZE))\n", marker);
	r = python(c, code, &o);
	cr_expect_str_eq(r->status, "ok", "%s", r->stderr_data);
	cr_expect_str_eq((char *)r->stdout_data, "(1048576, 1048576)\n");
	sandq_result_free(r);

	/* The job's filter: a refused call, answered EPERM and counted. */
	snprintf(code, sizeof(code), "%simport ctypes\n"
	    "libc = ctypes.CDLL(None, use_errno=True)\n"
	    "print(libc.sethostname(b'x', 1), ctypes.get_errno())\n", marker);
	r = python(c, code, NULL);
	cr_expect_str_eq(r->status, "ok", "%s", r->stderr_data);
	cr_expect_str_eq((char *)r->stdout_data, "-1 1\n");
	{
		bool seen = false;

		for (size_t i = 0; i < r->nrefused; i++)
			seen |= strcmp(r->refused[i].syscall, "sethostname") == 0;
		cr_expect(seen, "sethostname not recorded as refused");
	}
	sandq_result_free(r);

	/* The CPU limit, counted from the job's start (not the warm start-up's). */
	o = (struct sandq_job_opts){ .limits.cpu_ms = 300 };
	snprintf(code, sizeof(code), "%swhile True: pass\n", marker);
	r = python(c, code, &o);
	cr_expect_str_eq(r->status, "cpu_limit", "%s", r->stderr_data);
	cr_expect_geq(r->cpu_ms, 300);
	sandq_result_free(r);
	sandq_close(c);
}

Test(warm, a_shell_job_sees_no_warm_python)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	/* The sandbox was prepared with a warm python3: gone before the job. */
	for (int i = 0; i < 3; i++) {
		prime(c);
		r = harness_sh(c, "cat /proc/[0-9]*/comm | sort | tr '\\n' ' '", NULL);
		cr_expect_str_eq(r->status, "ok", "%s", r->stderr_data);
		cr_expect_null(strstr((char *)r->stdout_data, "python"), "%s",
		    r->stdout_data);
		sandq_result_free(r);
	}
	sandq_close(c);
}
