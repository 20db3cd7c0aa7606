/*
 * sandbox_test.c - persistent sandboxes end to end: real redis-server,
 * sandqd, workers and sandboxes, driven through libsandq.
 *
 * What a job leaves in /workspace is there for the next job on the same
 * sandbox; forks are independent; the shell session carries over; jobs on
 * one sandbox run in order; path rules hold inside the job and at commit;
 * hostile workspaces (FIFOs, symlinks) never leak into the host or the
 * store; an export is a database the sqlite3 tool opens.
 *
 * Needs root (sandqd maps each worker's jobs to an unprivileged host uid).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
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
	harness_start(&H, 2, NULL);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(sandbox, .init = setup, .fini = teardown, .timeout = 600);

/*
 * The same jobs with workspace_overlay=off: every job writes its whole
 * snapshot out and reads it all back, the path a kernel without overlays
 * in user namespaces takes (docs/decisions.md).
 */
static bool plain;	/* this test runs in sandbox_plain */

static void
setup_plain(void)
{
	static const char *const extra[] = { "--set", "workspace_overlay=off", NULL };

	plain = true;
	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 2, extra);
}

TestSuite(sandbox_plain, .init = setup_plain, .fini = teardown, .timeout = 600);

/* A test body run in both suites. */
#define BOTH_WAYS(name) \
	static void name(void); \
	Test(sandbox, name) { name(); } \
	Test(sandbox_plain, name) { name(); }

#define WAIT_MS 60000

static struct sandq_result *
op(struct sandq *c, const char *name, const struct sandq_op_args *a,
    const struct sandq_job_opts *o)
{
	struct sandq_result *r = NULL;
	int rc = sandq_call(c, name, a, o, WAIT_MS, &r);

	cr_assert_eq(rc, 0, "%s: %s", name, sandq_last_error(c));
	cr_assert_not_null(r);
	return r;
}

static void
create(struct sandq *c, const char *id)
{
	struct sandq_op_args a = { .sandbox = id };
	struct sandq_result *r = op(c, "sandbox.create", &a, NULL);

	cr_assert_str_eq(r->status, "ok", "create %s: %s", id,
	    r->error_message ? r->error_message : "");
	cr_assert_eq(r->version, 1);
	sandq_result_free(r);
}

/* Runs script on sandbox sb (persisting) and expects it to end ok. */
static struct sandq_result *
sh_on(struct sandq *c, const char *sb, const char *script)
{
	struct sandq_job_opts o = { .sandbox = sb };
	struct sandq_result *r = harness_sh(c, script, &o);

	cr_assert_str_eq(r->status, "ok", "'%s' on %s: %s %s / %s", script, sb,
	    r->status, r->error_message ? r->error_message : "",
	    r->stderr_data ? (char *)r->stderr_data : "");
	return r;
}

/* The file's content through fs.read, or NULL with the error code in *code. */
static char *
fs_read(struct sandq *c, const char *sb, const char *path, char **code)
{
	struct sandq_op_args a = { .sandbox = sb, .path = path };
	struct sandq_result *r = op(c, "fs.read", &a, NULL);
	msgpack_unpacked u;
	char *out = NULL;

	*code = NULL;
	if (strcmp(r->status, "ok") != 0) {
		*code = strdup(r->error_code ? r->error_code : r->status);
		sandq_result_free(r);
		return NULL;
	}
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL),
	    MSGPACK_UNPACK_SUCCESS);
	cr_assert(u.data.type == MSGPACK_OBJECT_BIN || u.data.type == MSGPACK_OBJECT_STR);
	if (u.data.type == MSGPACK_OBJECT_BIN)
		out = strndup(u.data.via.bin.ptr, u.data.via.bin.size);
	else
		out = strndup(u.data.via.str.ptr, u.data.via.str.size);
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return out;
}

/* Run twice: on an overlay of the kept base, and with none (sandbox_plain). */
BOTH_WAYS(files_persist_across_jobs_and_versions_count)

static void
files_persist_across_jobs_and_versions_count(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	create(c, "p1");
	r = sh_on(c, "p1", "mkdir -p src && echo 'print(42)' > src/main.py && echo one > notes");
	cr_expect_eq(r->version, 2);
	cr_expect_eq(r->added, 3, "added %" PRIu64, r->added);
	cr_expect_str_eq(r->sandbox, "p1");
	cr_expect_eq(strlen(r->snapshot), 64);
	sandq_result_free(r);

	r = sh_on(c, "p1", "python3 src/main.py; cat notes; echo two >> notes");
	cr_expect_str_eq((char *)r->stdout_data, "42\none\n");
	cr_expect_eq(r->version, 3);
	cr_expect_eq(r->modified, 1);
	cr_expect_eq(r->nchanged, 1);
	if (r->nchanged == 1)
		cr_expect_str_eq(r->changed[0], "/notes");
	sandq_result_free(r);

	r = sh_on(c, "p1", "cat notes; rm -r src");
	cr_expect_str_eq((char *)r->stdout_data, "one\ntwo\n");
	cr_expect_eq(r->removed, 2);
	sandq_result_free(r);
	r = sh_on(c, "p1", "ls");
	cr_expect_str_eq((char *)r->stdout_data, "notes\n");
	sandq_result_free(r);
	sandq_close(c);
}

/* Run twice: on an overlay of the kept base, and with none (sandbox_plain). */
BOTH_WAYS(persist_false_and_failed_jobs_commit_nothing)

static void
persist_false_and_failed_jobs_commit_nothing(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .sandbox = "p2", .persist = SANDQ_PERSIST_NO };
	struct sandq_limits tight = { .wall_ms = 300 };
	struct sandq_result *r;

	create(c, "p2");
	r = harness_sh(c, "echo scratch > f; cat f", &o);
	cr_expect_str_eq(r->status, "ok");
	cr_expect_str_eq((char *)r->stdout_data, "scratch\n");
	cr_expect_eq(r->version, 1, "persist:false moved the head to %" PRIu64, r->version);
	sandq_result_free(r);

	/* Stopped by a limit: aborted, like a failed transaction. */
	o.persist = SANDQ_PERSIST_DEFAULT;
	o.limits = tight;
	r = harness_sh(c, "echo partial > g; sleep 30", &o);
	cr_expect_str_eq(r->status, "timeout");
	cr_expect_eq(r->version, 1);
	sandq_result_free(r);

	/* A non-zero exit is the job's own result: committed. */
	memset(&o.limits, 0, sizeof(o.limits));
	r = harness_sh(c, "echo kept > h; exit 3", &o);
	cr_expect_str_eq(r->status, "exit");
	cr_expect_eq(r->exit_code, 3);
	cr_expect_eq(r->version, 2);
	sandq_result_free(r);

	r = sh_on(c, "p2", "ls");
	cr_expect_str_eq((char *)r->stdout_data, "h\n");
	sandq_result_free(r);
	sandq_close(c);
}

/*
 * A worker keeps the tree of the last sandbox it ran (its base) and runs
 * the next job on the same head and rules as an overlay on it. Whatever
 * reaches a job must still be exactly its sandbox's head under its own
 * rules: nothing of a persist: false or timed-out job, of another sandbox,
 * of other rules, and every op that moved the head outside a job.
 */
/* Run twice: on an overlay of the kept base, and with none (sandbox_plain). */
BOTH_WAYS(the_kept_base_follows_heads_rules_and_sandboxes)

static void
the_kept_base_follows_heads_rules_and_sandboxes(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .sandbox = "kb1" };
	struct sandq_perm hide[] = { { "/secret.txt", "none" } };
	struct sandq_op_args w = { .sandbox = "kb1", .path = "/src/a", .data = "v2\n",
	    .data_len = 3 };
	struct sandq_result *r;
	char *code;

	create(c, "kb1");
	create(c, "kb2");
	sandq_result_free(sh_on(c, "kb1", "mkdir src; echo v1 > src/a; echo s > secret.txt"));
	r = sh_on(c, "kb1", "grep -c ' /workspace .* overlay ' /proc/self/mountinfo; ls");
	if (plain)
		cr_expect(strncmp((char *)r->stdout_data, "0\n", 2) == 0,
		    "workspace_overlay=off, yet /workspace is an overlay");
	else if (strncmp((char *)r->stdout_data, "1\n", 2) != 0)
		cr_log_warn("no overlay /workspace on this kernel: the base is not "
		    "exercised, only the fallback");
	sandq_result_free(r);

	/* persist: false and a killed job leave the base as it was. */
	o.persist = SANDQ_PERSIST_NO;
	r = harness_sh(c, "rm -r src; echo junk > other; ls", &o);
	cr_expect_str_eq((char *)r->stdout_data, "other\nsecret.txt\n");
	sandq_result_free(r);
	o.persist = SANDQ_PERSIST_DEFAULT;
	o.limits.wall_ms = 300;
	r = harness_sh(c, "echo bad > src/a; rm secret.txt; sleep 30", &o);
	cr_expect_str_eq(r->status, "timeout");
	sandq_result_free(r);
	memset(&o.limits, 0, sizeof(o.limits));
	r = sh_on(c, "kb1", "cat src/a; ls");
	cr_expect_str_eq((char *)r->stdout_data, "v1\nsecret.txt\nsrc\n");
	sandq_result_free(r);

	/* Other rules, then none again: each job sees its own. */
	o.perms = hide;
	o.nperms = 1;
	r = harness_sh(c, "ls", &o);
	cr_expect_str_eq((char *)r->stdout_data, "src\n");
	sandq_result_free(r);
	o.perms = NULL;
	o.nperms = 0;
	r = sh_on(c, "kb1", "ls");
	cr_expect_str_eq((char *)r->stdout_data, "secret.txt\nsrc\n");
	sandq_result_free(r);

	/* An op moves the head outside any job; another sandbox in between. */
	r = op(c, "fs.write", &w, NULL);
	cr_expect_str_eq(r->status, "ok");
	sandq_result_free(r);
	sandq_result_free(sh_on(c, "kb2", "echo b > only-b"));
	r = sh_on(c, "kb1", "cat src/a; ls");
	cr_expect_str_eq((char *)r->stdout_data, "v2\nsecret.txt\nsrc\n");
	sandq_result_free(r);

	/* A chain of changes: what each job sees is what the store holds. */
	for (int i = 0; i < 6; i++) {
		char script[160], want[32], *got;

		snprintf(script, sizeof(script), "echo %d >> src/a; rm -rf d%d; mkdir -p d%d/x; "
		    "echo %d > d%d/x/f; mv src/a src/b && mv src/b src/a", i, i - 1, i, i, i);
		sandq_result_free(sh_on(c, "kb1", script));
		snprintf(want, sizeof(want), "%d\n", i);
		snprintf(script, sizeof(script), "/d%d/x/f", i);
		got = fs_read(c, "kb1", script, &code);
		cr_expect_str_eq(got ? got : code, want);
		free(got);
		free(code);
		snprintf(script, sizeof(script), "/d%d/x/f", i - 1);
		got = fs_read(c, "kb1", script, &code);
		cr_expect(i == 0 || (got == NULL && code != NULL), "d%d survived", i - 1);
		free(got);
		free(code);
	}
	r = sh_on(c, "kb1", "cat src/a; ls");
	cr_expect_str_eq((char *)r->stdout_data,
	    "v2\n0\n1\n2\n3\n4\n5\nd5\nsecret.txt\nsrc\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(sandbox, fork_shares_the_snapshot_and_then_goes_its_own_way)
{
	struct sandq *c = harness_client(&H);
	struct sandq_op_args a = { .sandbox = "f1", .to = "f2" };
	struct sandq_result *r, *base;
	char *code, *v;

	create(c, "f1");
	base = sh_on(c, "f1", "echo base > file");
	r = op(c, "sandbox.fork", &a, NULL);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ? r->error_message : "");
	cr_expect_str_eq(r->snapshot, base->snapshot, "a fork names the same blob");
	sandq_result_free(r);
	sandq_result_free(base);

	sandq_result_free(sh_on(c, "f2", "echo fork > file; touch only-in-fork"));
	sandq_result_free(sh_on(c, "f1", "echo orig >> file"));
	v = fs_read(c, "f1", "/file", &code);
	cr_expect_str_eq(v, "base\norig\n");
	free(v);
	v = fs_read(c, "f2", "/file", &code);
	cr_expect_str_eq(v, "fork\n");
	free(v);
	v = fs_read(c, "f1", "/only-in-fork", &code);
	cr_expect_null(v);
	cr_expect_str_eq(code, "not_found");
	free(code);
	sandq_close(c);
}

/* Run twice: on an overlay of the kept base, and with none (sandbox_plain). */
BOTH_WAYS(shell_session_carries_cwd_and_exports)

static void
shell_session_carries_cwd_and_exports(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .sandbox = "s1" };
	const char *env[] = { "B=2", NULL };
	struct sandq_result *r;

	create(c, "s1");
	/* Under set -eu too: the session is saved without tripping either. */
	sandq_result_free(sh_on(c, "s1", "set -eu; mkdir -p src; cd /workspace/src; "
	    "export A=1 MULTI=$'x\\ny'; NOTEXP=3"));
	r = sh_on(c, "s1", "pwd; echo \"$A\"; echo \"$MULTI\"; echo \"${NOTEXP-unset}\"");
	cr_expect_str_eq((char *)r->stdout_data, "/workspace/src\n1\nx\ny\nunset\n");
	sandq_result_free(r);

	/* A job that sets cwd or env itself does not take the session's. */
	o.cwd = "/workspace";
	o.env = env;
	r = harness_sh(c, "pwd; echo \"${A-unset}$B\"", &o);
	cr_expect_str_eq((char *)r->stdout_data, "/workspace\nunset2\n");
	sandq_result_free(r);

	/* That job saved its own session: B, in /workspace. */
	r = sh_on(c, "s1", "pwd; echo \"${A-unset}$B\"");
	cr_expect_str_eq((char *)r->stdout_data, "/workspace\nunset2\n");
	sandq_result_free(r);

	/* A session directory that is gone falls back to /workspace. */
	sandq_result_free(sh_on(c, "s1", "mkdir -p gone && cd gone && rmdir ../gone"));
	r = sh_on(c, "s1", "pwd");
	cr_expect_str_eq((char *)r->stdout_data, "/workspace\n");
	sandq_result_free(r);
	sandq_close(c);
}

/*** What a job leaves for a later one (docs/security.md, "Containment, second round" 2) ***/

/* Hides /secret; everything else writable. */
static const struct sandq_perm hide_secret[] = { { "/secret/**", "none" } };

/* Runs script on sb under preset and rules (o's other fields unset), ok. */
static struct sandq_result *
sh_ruled(struct sandq *c, const char *sb, const char *preset,
    const struct sandq_perm *perms, size_t nperms, const char *script)
{
	struct sandq_job_opts o = { .sandbox = sb, .perm_preset = preset,
	    .perms = perms, .nperms = nperms };
	struct sandq_result *r = harness_sh(c, script, &o);

	cr_assert_str_eq(r->status, "ok", "'%s' on %s: %s %s / %s", script, sb,
	    r->status, r->error_message ? r->error_message : "",
	    r->stderr_data ? (char *)r->stderr_data : "");
	return r;
}

/* How many of sb's history rows say their session was not restored. */
static int
history_not_restored(struct sandq *c, const char *sb)
{
	static const char note[] = "\"session\":\"not_restored\"";
	struct sandq_op_args a = { .sandbox = sb };
	struct sandq_result *r = op(c, "sandbox.history", &a, NULL);
	const char *p = (const char *)r->data, *end = p + r->data_len;
	int n = 0;

	cr_assert_str_eq(r->status, "ok");
	while (p < end && (p = memmem(p, (size_t)(end - p), note, sizeof(note) - 1)) != NULL) {
		n++;
		p += sizeof(note) - 1;
	}
	sandq_result_free(r);
	return n;
}

/*
 * A job that may not read /secret leaves a session whose variables would
 * run its file in the operator's next full-access job (BASH_ENV, a prompt
 * hook, a preload, a Python start-up file): that job starts fresh, nothing
 * of the restricted job runs, and its history says so.
 */
BOTH_WAYS(a_restricted_jobs_session_never_runs_code_in_a_full_access_job)

static void
a_restricted_jobs_session_never_runs_code_in_a_full_access_job(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;
	char *loot, *code;

	create(c, "sx1");
	sandq_result_free(sh_ruled(c, "sx1", "full-access", NULL, 0,
	    "mkdir secret && echo TOPSECRET > secret/x"));
	r = sh_ruled(c, "sx1", "full-access", hide_secret, 1,
	    "test -e secret/x || echo hidden; "
	    "echo 'cp /workspace/secret/x /workspace/loot' > evil.sh; "
	    "echo 'import shutil; shutil.copy(\"/workspace/secret/x\", \"/workspace/loot\")' "
	    "> evil.py; mkdir -p sub && cd sub; "
	    "export FOO=bar BASH_ENV=/workspace/evil.sh ENV=/workspace/evil.sh "
	    "PROMPT_COMMAND='. /workspace/evil.sh' PYTHONSTARTUP=/workspace/evil.py "
	    "LD_PRELOAD=/workspace/evil.so");
	cr_expect_str_eq((char *)r->stdout_data, "hidden\n", "the restricted job saw /secret");
	sandq_result_free(r);

	r = sh_ruled(c, "sx1", "full-access", NULL, 0,
	    "echo \"${BASH_ENV-unset} ${ENV-unset} ${PROMPT_COMMAND-unset} "
	    "${PYTHONSTARTUP-unset} ${LD_PRELOAD-unset} ${FOO-unset}\"; pwd; "
	    "python3 -i < /dev/null > /dev/null 2>&1; "
	    "test -e loot && echo LOOT || echo clean");
	cr_expect_str_eq((char *)r->stdout_data,
	    "unset unset unset unset unset unset\n/workspace\nclean\n",
	    "the restricted job's session reached the full-access job");
	cr_expect_eq(r->stderr_len, 0, "stderr: %s", r->stderr_data ? (char *)r->stderr_data : "");
	sandq_result_free(r);
	loot = fs_read(c, "sx1", "/loot", &code);
	cr_expect_null(loot, "the hidden file was copied out: %s", loot ? loot : "");
	free(loot);
	free(code);
	/* The restricted job and the full-access one each started fresh. */
	cr_expect_eq(history_not_restored(c, "sx1"), 2);
	sandq_close(c);
}

/*
 * Under the same rules the session carries on (cwd, an ordinary export,
 * PATH for a venv or a bin folder), but a variable that makes a shell or
 * a tool run code is never restored: BASH_ENV would run the file before
 * every later script.
 */
BOTH_WAYS(a_session_under_the_same_rules_keeps_cwd_and_exports_but_never_code)

static void
a_session_under_the_same_rules_keeps_cwd_and_exports_but_never_code(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	create(c, "sx2");
	sandq_result_free(sh_on(c, "sx2",
	    "mkdir -p bin sub; printf '#!/bin/sh\\necho mine\\n' > bin/hello; chmod +x bin/hello; "
	    "echo 'echo ran > /workspace/ran' > evil.sh; cd sub; "
	    "export FOO=bar PATH=/workspace/bin:$PATH BASH_ENV=/workspace/evil.sh "
	    "GIT_CONFIG_GLOBAL=/workspace/evil.gitconfig"));
	r = sh_on(c, "sx2", "pwd; echo \"$FOO ${BASH_ENV-unset} ${GIT_CONFIG_GLOBAL-unset}\"; "
	    "hello; test -e /workspace/ran && echo RAN || echo clean");
	cr_expect_str_eq((char *)r->stdout_data, "/workspace/sub\nbar unset unset\nmine\nclean\n");
	sandq_result_free(r);
	cr_expect_eq(history_not_restored(c, "sx2"), 0);
	sandq_close(c);
}

/*
 * A session never crosses rules either way: a full-access job's exports
 * (a token read from a file the next job may not see) and directory do
 * not reach a restricted job. Rules written differently that compile alike
 * are the same rules.
 */
BOTH_WAYS(a_session_never_crosses_to_other_rules)

static void
a_session_never_crosses_to_other_rules(void)
{
	struct sandq *c = harness_client(&H);
	const struct sandq_perm same[] = { { "secret/**/", "none" } };
	struct sandq_result *r;

	create(c, "sx3");
	sandq_result_free(sh_ruled(c, "sx3", "full-access", NULL, 0,
	    "mkdir secret sub && echo TOPSECRET > secret/x && cd sub && "
	    "export FOO=bar TOKEN=$(cat /workspace/secret/x)"));
	r = sh_ruled(c, "sx3", "full-access", hide_secret, 1,
	    "pwd; echo \"${FOO-unset} ${TOKEN-unset}\"; cd sub; export FOO=restricted");
	cr_expect_str_eq((char *)r->stdout_data, "/workspace\nunset unset\n",
	    "a full-access job's session reached a restricted job");
	sandq_result_free(r);
	cr_expect_eq(history_not_restored(c, "sx3"), 1);

	/* The same pattern written relative, with a trailing slash: the same rules. */
	r = sh_ruled(c, "sx3", "full-access", same, 1, "pwd; echo \"$FOO\"");
	cr_expect_str_eq((char *)r->stdout_data, "/workspace/sub\nrestricted\n");
	sandq_result_free(r);
	cr_expect_eq(history_not_restored(c, "sx3"), 1);
	sandq_close(c);
}

/* Runs Python code on sb with env (NULL: none); the result, ok. */
static struct sandq_result *
py_on(struct sandq *c, const char *sb, const char *const *env, const char *code)
{
	struct sandq_job_opts o = { .sandbox = sb, .env = env };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];

	cr_assert_eq(sandq_submit_python(c, code, &o, id), 0, "%s", sandq_last_error(c));
	cr_assert_eq(sandq_wait(c, id, WAIT_MS, &r), 0);
	cr_assert_str_eq(r->status, "ok", "%s %s / %s", r->status,
	    r->error_message ? r->error_message : "",
	    r->stderr_data ? (char *)r->stderr_data : "");
	return r;
}

/*
 * HOME is /workspace: a .pth file or usercustomize.py one job plants in
 * the user site (~/.local/lib/python3.X/site-packages) would run at the
 * start of every later Python, the operator's included. Neither runs,
 * in a python job or in a python an sh job starts; a job that asks for
 * its user site (PYTHONNOUSERSITE set empty) gets it, which shows the
 * plant would have worked.
 */
Test(sandbox, a_planted_user_site_never_runs_in_a_later_python_job)
{
	static const char check[] = "import os\n"
	    "print(os.path.exists('/workspace/pth_ran'), os.path.exists('/workspace/uc_ran'))\n";
	const char *optin[] = { "PYTHONNOUSERSITE=", NULL };
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	create(c, "sx4");
	sandq_result_free(sh_on(c, "sx4",
	    "d=$(python3 -c 'import site; print(site.getusersitepackages())') && "
	    "mkdir -p \"$d\" && "
	    "echo 'import os; open(\"/workspace/pth_ran\", \"w\").close()' > \"$d/evil.pth\" && "
	    "echo 'open(\"/workspace/uc_ran\", \"w\").close()' > \"$d/usercustomize.py\""));
	r = py_on(c, "sx4", NULL, check);
	cr_expect_str_eq((char *)r->stdout_data, "False False\n",
	    "the planted user site ran in a python job");
	sandq_result_free(r);
	r = sh_on(c, "sx4", "python3 -c 'import os; print(os.path.exists(\"/workspace/pth_ran\"))'");
	cr_expect_str_eq((char *)r->stdout_data, "False\n",
	    "the planted user site ran in an sh job's python");
	sandq_result_free(r);
	r = py_on(c, "sx4", optin, check);
	cr_expect_str_eq((char *)r->stdout_data, "True True\n",
	    "the plant does not work: the test proves nothing");
	sandq_result_free(r);
	sandq_close(c);
}

Test(sandbox, jobs_on_one_sandbox_run_in_arrival_order)
{
	struct sandq *c = harness_client(&H);
	char ids[3][64];
	struct sandq_job_opts o = { .sandbox = "o1" };
	struct sandq_result *r;

	create(c, "o1");
	/* The first is slow, the last has the highest priority: order holds. */
	cr_assert_eq(sandq_submit_sh(c, "sleep 0.5; echo a >> log", &o, ids[0]), 0);
	cr_assert_eq(sandq_submit_sh(c, "echo b >> log", &o, ids[1]), 0);
	o.priority = 100;
	cr_assert_eq(sandq_submit_sh(c, "echo c >> log", &o, ids[2]), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(sandq_wait(c, ids[i], WAIT_MS, &r), 0);
		cr_expect_str_eq(r->status, "ok", "job %d: %s", i,
		    r->error_message ? r->error_message : "");
		cr_expect_eq(r->version, (uint64_t)i + 2, "job %d committed version %"
		    PRIu64, i, r->version);
		sandq_result_free(r);
	}
	r = sh_on(c, "o1", "cat log");
	cr_expect_str_eq((char *)r->stdout_data, "a\nb\nc\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(sandbox, unknown_sandbox_is_rejected_naming_it)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .sandbox = "nope" };
	struct sandq_result *r = harness_sh(c, "true", &o);

	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "sandbox_not_found");
	cr_expect(strstr(r->error_message, "nope") != NULL, "%s", r->error_message);
	sandq_result_free(r);
	sandq_close(c);
}

/* Run twice: on an overlay of the kept base, and with none (sandbox_plain). */
BOTH_WAYS(special_files_are_refused_and_symlinks_never_followed)

static void
special_files_are_refused_and_symlinks_never_followed(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_job_opts o = { .sandbox = "t1" };
	struct sandq_result *r;

	create(c, "t1");
	/* A FIFO cannot be committed: the job's changes are refused, whole. */
	r = harness_sh(c, "echo before > kept; mkfifo pipe", &o);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "commit_refused");
	cr_expect(strstr(r->error_message, "/pipe") != NULL, "%s", r->error_message);
	cr_expect_eq(r->exit_code, 0, "the job itself ran");
	cr_expect_eq(r->version, 1);
	sandq_result_free(r);

	/* Symlinks to the sandbox's /etc and root come back as symlinks. */
	r = sh_on(c, "t1", "ln -s /etc/passwd pw; ln -s / root; ln -s ../../.. up");
	cr_expect_eq(r->added, 3);
	sandq_result_free(r);
	r = sh_on(c, "t1", "readlink pw root up; test -L root && echo link");
	cr_expect_str_eq((char *)r->stdout_data, "/etc/passwd\n/\n../../..\nlink\n");
	sandq_result_free(r);
	sandq_close(c);
}

Test(sandbox, history_records_every_committed_job)
{
	struct sandq *c = harness_client(&H);
	struct sandq_op_args a = { .sandbox = "h1" };
	struct sandq_job_opts o = { .sandbox = "h1" };
	struct sandq_result *r;
	msgpack_unpacked u;
	const msgpack_object *calls = NULL;

	create(c, "h1");
	sandq_result_free(sh_on(c, "h1", "echo hi"));
	sandq_result_free(harness_sh(c, "exit 4", &o));
	r = op(c, "sandbox.history", &a, NULL);
	cr_assert_str_eq(r->status, "ok");
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL),
	    MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(u.data.type, MSGPACK_OBJECT_MAP);
	for (uint32_t i = 0; i < u.data.via.map.size; i++) {
		const msgpack_object_kv *kv = &u.data.via.map.ptr[i];

		if (kv->key.via.str.size == 5 && memcmp(kv->key.via.str.ptr, "calls", 5) == 0)
			calls = &kv->val;
	}
	cr_assert_not_null(calls);
	cr_assert_eq(calls->type, MSGPACK_OBJECT_ARRAY);
	/* sandbox.create, then the two runs. */
	cr_expect_eq(calls->via.array.size, 3);
	msgpack_unpacked_destroy(&u);
	/* The rows themselves, as JSON: name, status and exit code. */
	cr_expect(memmem(r->data, r->data_len, "\"exit_code\":0", 13) != NULL);
	cr_expect(memmem(r->data, r->data_len, "\"exit_code\":4", 13) != NULL);
	cr_expect(memmem(r->data, r->data_len, "\"stdout\":\"hi\\n\"", 15) != NULL);
	sandq_result_free(r);
	sandq_close(c);
}

/* The export is a plain SQLite file: the sqlite3 tool reads its files. */
Test(sandbox, export_opens_in_the_sqlite3_tool)
{
	struct sandq *c = harness_client(&H);
	struct sandq_op_args a = { .sandbox = "e1" };
	struct sandq_result *r;
	msgpack_unpacked u;
	char path[512], cmd[1024], *out = NULL;
	FILE *f;

	create(c, "e1");
	sandq_result_free(sh_on(c, "e1", "mkdir d; printf hello > d/x"));
	r = op(c, "sandbox.export", &a, NULL);
	cr_assert_str_eq(r->status, "ok");
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL),
	    MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(u.data.type, MSGPACK_OBJECT_BIN);
	snprintf(path, sizeof(path), "%s/export.db", H.dir);
	f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(u.data.via.bin.ptr, 1, u.data.via.bin.size, f), u.data.via.bin.size);
	fclose(f);
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	snprintf(cmd, sizeof(cmd), "sqlite3 %s \"PRAGMA integrity_check; SELECT value FROM "
	    "fs_config WHERE key='schema_version'; SELECT d.name, typeof(x.data), "
	    "CAST(x.data AS TEXT) FROM fs_dentry d JOIN fs_data x ON x.ino = d.ino; "
	    "SELECT name FROM tool_calls;\"", path);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out ? out : "");
	cr_expect_str_eq(out, "ok\n0.4\nx|blob|hello\nsandbox.create\nsh\n");
	free(out);
	snprintf(cmd, sizeof(cmd), "test ! -e %s-wal", path);
	cr_expect_eq(harness_run(cmd, &out), 0, "a -wal file beside the export");
	free(out);
	sandq_close(c);
}

/*** Path rules: the golden table, in real jobs ***/

#include "../workspace/perms.h"

#define GOLDEN "tests/data/perms_golden.tsv"
#define GROUP_MAX 64

struct gcase {
	char preset[32];
	char rules[1024];
	char path[512];
	char level[8];
};

/* "/workspace/x" -> "/x": the alias jobs and fs ops apply (docs/protocol.md). */
static const char *
unalias(const char *p)
{
	if (strcmp(p, "/workspace") == 0)
		return "/";
	if (strncmp(p, "/workspace/", 11) == 0)
		return p + 10;
	return p;
}

/* Splits "P=L;P=L" into rules (strings kept in store). */
static size_t
split_rules(const char *text, struct sandq_perm *out, char store[][512], bool alias)
{
	char buf[1024], *save = NULL;
	size_t n = 0;

	if (strcmp(text, "-") == 0)
		return 0;
	snprintf(buf, sizeof(buf), "%s", text);
	for (char *r = strtok_r(buf, ";", &save); r && n < 16; r = strtok_r(NULL, ";", &save)) {
		char *eq = strrchr(r, '=');

		cr_assert_not_null(eq);
		*eq = '\0';
		snprintf(store[2 * n], 512, "%s", alias ? unalias(r) : r);
		snprintf(store[2 * n + 1], 512, "%s", eq + 1);
		out[n].pattern = store[2 * n];
		out[n].level = store[2 * n + 1];
		n++;
	}
	return n;
}

/* The matcher's level for a case, with or without the /workspace alias. */
static const char *
matcher_level(const struct gcase *g, bool alias)
{
	struct sandq_perm sp[16];
	struct perm_rule pr[16];
	char store[32][512];
	struct perms p = { 0 };
	struct err e = { 0 };
	size_t n = split_rules(g->rules, sp, store, alias);
	const char *lv;

	for (size_t i = 0; i < n; i++) {
		pr[i].pattern = sp[i].pattern;
		cr_assert_eq(perms_parse_level(sp[i].level, &pr[i].level), 0);
	}
	if (perms_compile(&p, pr, n, strcmp(g->preset, "-") == 0 ? NULL : g->preset, &e) < 0)
		return NULL;
	lv = perms_level_str(perms_check(&p, alias ? unalias(g->path) : g->path));
	perms_free(&p);
	return lv;
}

/*
 * One sandbox per (preset, rules) group, holding every path of the group
 * as a file. One job per group reports what it can do with each (absent,
 * listed but unreadable, readable, writable) and tries to change all of
 * them; the commit must keep everything below write as it was.
 */
static void
golden_group(struct sandq *c, struct gcase *g, size_t n, int gi, int *checked)
{
	struct sandq_file files[GROUP_MAX];
	struct sandq_perm sp[16];
	char store[32][512], sb[32], script[8192], expect[8192];
	struct sandq_op_args a = { 0 };
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r;
	size_t nf = 0, off = 0, eoff = 0;

	snprintf(sb, sizeof(sb), "golden-%d", gi);
	/* A path that is a parent of another is a directory: not checked. */
	for (size_t i = 0; i < n; i++) {
		const char *p = unalias(g[i].path);
		bool parent = strcmp(p, "/") == 0;

		for (size_t k = 0; k < n && !parent; k++)
			parent = strncmp(unalias(g[k].path), p, strlen(p)) == 0 &&
			    unalias(g[k].path)[strlen(p)] == '/';
		/* "/workspace/.env" and "/.env" are one file to a job. */
		for (size_t k = 0; k < nf && !parent; k++)
			parent = strcmp(files[k].path, p) == 0;
		if (parent)
			continue;
		files[nf].path = p;
		files[nf].data = "x";
		files[nf].len = 1;
		nf++;
		off += (size_t)snprintf(script + off, sizeof(script) - off,
		    "chk '/workspace%s'\n", p);
		eoff += (size_t)snprintf(expect + eoff, sizeof(expect) - eoff,
		    "/workspace%s %s\n", p, g[i].level);
	}
	if (nf == 0)
		return;
	a.sandbox = sb;
	a.files = files;
	a.nfiles = nf;
	r = op(c, "sandbox.create", &a, NULL);
	cr_assert_str_eq(r->status, "ok", "%s: %s", sb, r->error_message ? r->error_message : "");
	sandq_result_free(r);

	o.sandbox = sb;
	o.perms = sp;
	o.nperms = split_rules(g[0].rules, sp, store, true);
	o.perm_preset = strcmp(g[0].preset, "-") == 0 ? NULL : g[0].preset;
	{
		char full[9000];

		snprintf(full, sizeof(full),
		    "chk() { p=$1; d=$(dirname \"$p\"); b=$(basename \"$p\");\n"
		    "  if ! ls -A \"$d\" 2>/dev/null | grep -qxF -- \"$b\"; then lv=none;\n"
		    "  elif ! cat \"$p\" >/dev/null 2>&1; then lv=view;\n"
		    "  elif ! (echo y >> \"$p\") 2>/dev/null; then lv=read;\n"
		    "  else lv=write; fi; echo \"$p $lv\"; }\n%s", script);
		r = harness_sh(c, full, &o);
	}
	cr_expect_str_eq(r->status, "ok", "%s: %s %s", sb, r->error_message ?
	    r->error_message : "", r->stderr_data ? (char *)r->stderr_data : "");
	cr_expect_str_eq((char *)r->stdout_data, expect, "preset %s rules %s",
	    g[0].preset, g[0].rules);
	sandq_result_free(r);

	/* At commit: only the writable files changed ("x" + "y\n"). */
	for (size_t i = 0; i < nf; i++) {
		struct sandq_op_args ra = { .sandbox = sb, .path = files[i].path };
		struct sandq_job_opts fo = { .perm_preset = "full-access" };
		const char *want = NULL;
		msgpack_unpacked u;

		for (size_t k = 0; k < n; k++)
			if (strcmp(unalias(g[k].path), files[i].path) == 0)
				want = strcmp(g[k].level, "write") == 0 ? "xy\n" : "x";
		r = op(c, "fs.read", &ra, &fo);
		cr_assert_str_eq(r->status, "ok", "%s %s: %s", sb, files[i].path,
		    r->error_message ? r->error_message : "");
		msgpack_unpacked_init(&u);
		cr_assert_eq(msgpack_unpack_next(&u, (const char *)r->data, r->data_len, NULL),
		    MSGPACK_UNPACK_SUCCESS);
		cr_expect(u.data.via.bin.size == strlen(want) &&
		    memcmp(u.data.via.bin.ptr, want, strlen(want)) == 0,
		    "%s %s: committed '%.*s', want '%s'", sb, files[i].path,
		    (int)u.data.via.bin.size, u.data.via.bin.ptr, want);
		msgpack_unpacked_destroy(&u);
		sandq_result_free(r);
		(*checked)++;
	}
}

/* Run twice: on an overlay of the kept base, and with none (sandbox_plain). */
BOTH_WAYS(path_rules_hold_in_jobs_and_at_commit_for_the_golden_table)

static void
path_rules_hold_in_jobs_and_at_commit_for_the_golden_table(void)
{
	struct sandq *c = harness_client(&H);
	static struct gcase all[512];
	size_t n = 0, skipped = 0, start = 0;
	int groups = 0, checked = 0;
	char line[2048];
	FILE *f = fopen(GOLDEN, "r");

	cr_assert_not_null(f, "%s: %s", GOLDEN, strerror(errno));
	while (fgets(line, sizeof(line), f) != NULL && n < 512) {
		struct gcase *g = &all[n];
		const char *ml, *ma;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		line[strcspn(line, "\n")] = '\0';
		cr_assert_eq(sscanf(line, "%31[^\t]\t%1023[^\t]\t%511[^\t]\t%7s", g->preset,
		    g->rules, g->path, g->level), 4, "bad line: %s", line);
		/*
		 * Jobs read a leading /workspace as the root. A case whose
		 * level changes under that alias (a pattern names /workspace
		 * but the path does not, say) says nothing about jobs: counted
		 * and skipped, never silently.
		 */
		ml = matcher_level(g, false);
		ma = matcher_level(g, true);
		if (ml == NULL || ma == NULL || strcmp(ml, ma) != 0 ||
		    strcmp(unalias(g->path), "/") == 0) {
			skipped++;
			continue;
		}
		n++;
	}
	fclose(f);
	cr_assert_gt(n, 80, "only %zu golden cases usable", n);
	/* Cases of one group are adjacent when sorted by preset and rules. */
	for (size_t i = 1; i <= n; i++) {
		if (i == n || strcmp(all[i].preset, all[start].preset) != 0 ||
		    strcmp(all[i].rules, all[start].rules) != 0) {
			size_t len = i - start;

			if (len > GROUP_MAX)
				len = GROUP_MAX;
			golden_group(c, &all[start], len, groups++, &checked);
			start = i;
		}
	}
	cr_log_info("golden table: %d files checked in %d jobs, %zu cases skipped "
	    "(root, or meaning changed by the /workspace alias)", checked, groups, skipped);
	cr_expect_gt(checked, 60);
	sandq_close(c);
}
