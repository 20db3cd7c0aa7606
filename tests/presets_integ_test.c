/*
 * presets_integ_test.c - path presets against a real sandqd (issue 20).
 *
 * agent_safe_run: a job under agent-safe, AgentFense's preset, reads its
 * workspace, writes under /output and /tmp (the sandbox's tree: the job's
 * /workspace/output and /workspace/tmp), is refused a write anywhere else,
 * and does not see a secret or .git; the committed sandbox keeps only what
 * /output and /tmp got. tests/data/presets_golden.tsv pins each preset's levels
 * path by path (perms_test); this proves the sandbox enforces them.
 *
 * Each test starts its own redis-server and sandqd (tests/harness.c) in a
 * temporary folder and stops them by pid.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

TestSuite(presets_integ, .timeout = 240);

/* The lines of r's stdout, as one string (owned by r). */
static const char *
out_of(const struct sandq_result *r)
{
	return r->stdout_data ? (const char *)r->stdout_data : "";
}

Test(presets_integ, agent_safe_run)
{
	static const char env[] = "API_KEY=do-not-leak\n";
	static const char app[] = "print('app')\n";
	static const char keep[] = "";
	static const char head[] = "ref: refs/heads/main\n";
	const struct sandq_file files[] = {
		{ ".env", env, sizeof(env) - 1 },
		{ "src/app.py", app, sizeof(app) - 1 },
		{ "output/.keep", keep, 0 },
		{ "tmp/.keep", keep, 0 },
		{ ".git/HEAD", head, sizeof(head) - 1 },
	};
	struct sandq_job_opts o = { 0 };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r;
	struct harness h;
	struct sandq *c;

	harness_start(&h, 1, NULL);
	c = harness_client(&h);
	a.sandbox = "ps1";
	a.files = files;
	a.nfiles = sizeof(files) / sizeof(files[0]);
	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, 60000, &r), 0);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	o.sandbox = "ps1";
	o.perm_preset = "agent-safe";
	r = harness_sh(c,
	    "cd /workspace\n"
	    "cat src/app.py >/dev/null && echo read-src\n"
	    "echo w > output/report.txt && echo wrote-output\n"
	    "echo w > tmp/scratch && echo wrote-tmp\n"
	    "echo w >> src/app.py 2>/dev/null && echo WROTE-SRC\n"
	    "echo w > new.txt 2>/dev/null && echo WROTE-ROOT\n"
	    "test -e .env && echo SAW-ENV\n"
	    "cat .env 2>/dev/null\n"
	    "ls -a | grep -q '^.env$' && echo LISTED-ENV\n"
	    "test -e .git && echo SAW-GIT\n"
	    "echo done\n", &o);
	cr_assert_str_eq(r->status, "ok", "status %s: %s", r->status,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	cr_expect_str_eq(out_of(r), "read-src\nwrote-output\nwrote-tmp\ndone\n");
	cr_expect_null(strstr(out_of(r), "do-not-leak"));
	/* Committed: what /output and /tmp got, nothing else. */
	cr_expect_eq(r->nchanged, 2);
	for (size_t i = 0; i < r->nchanged; i++)
		cr_expect(strcmp(r->changed[i], "/output/report.txt") == 0 ||
		    strcmp(r->changed[i], "/tmp/scratch") == 0, "changed %s",
		    r->changed[i]);
	sandq_result_free(r);

	/* The same script under agent-edit, the default: it writes src. */
	o.perm_preset = NULL;
	r = harness_sh(c, "cd /workspace && echo w >> src/app.py && echo wrote-src"
	    " && test -e .git && echo saw-git && test ! -e .env && echo no-env",
	    &o);
	cr_expect_str_eq(out_of(r), "wrote-src\nsaw-git\nno-env\n");
	sandq_result_free(r);
	sandq_close(c);
	harness_stop(&h);
}
