/*
 * presets_integ_test.c - path presets against a real sandqd (issue 20).
 *
 * agent_safe_run: a job under agent-safe, AgentFense's preset, reads its
 * workspace, writes under /output and /tmp (the sandbox's tree: the job's
 * /workspace/output and /workspace/tmp), is refused a write anywhere else,
 * and does not see a secret or .git (at the root or inside /output); the
 * committed sandbox keeps only what /output and /tmp got, and a secret the
 * job wrote over inside /output is refused at capture, stored unchanged. tests/data/presets_golden.tsv pins each preset's levels
 * path by path (perms_test); this proves the sandbox enforces them.
 *
 * published_presets: sandqd writes sandq:perm_presets at start, and again
 * at a restart after the key was deleted; its JSON is compared, preset by
 * preset and rule by rule, with workspace/perms.c's table.
 *
 * Each test starts its own redis-server and sandqd (tests/harness.c) in a
 * temporary folder and stops them by pid.
 */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../workspace/perms.h"
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
		{ "output/.env", env, sizeof(env) - 1 },
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
	    "test -e output/.env && echo SAW-OUTPUT-ENV\n"
	    "echo x > output/.env 2>/dev/null\n"
	    "mkdir made 2>/dev/null && echo MADE-DIR\n"
	    "echo done\n", &o);
	cr_assert_str_eq(r->status, "ok", "status %s: %s", r->status,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	cr_expect_str_eq(out_of(r), "read-src\nwrote-output\nwrote-tmp\ndone\n");
	cr_expect_null(strstr(out_of(r), "do-not-leak"));
	/*
	 * Committed: what /output and /tmp got, nothing else. The secret the
	 * job wrote over inside /output is refused at capture (hidden paths
	 * are never taken from a job: docs/paths.md "How rules are enforced").
	 */
	{
		bool refused_env = false;

		for (size_t i = 0; i < r->nrefused_paths; i++)
			refused_env |= strcmp(r->refused_paths[i], "/output/.env") == 0;
		cr_expect(refused_env, "/output/.env not among refused_paths");
	}
	cr_expect_eq(r->nchanged, 2);
	for (size_t i = 0; i < r->nchanged; i++)
		cr_expect(strcmp(r->changed[i], "/output/report.txt") == 0 ||
		    strcmp(r->changed[i], "/tmp/scratch") == 0, "changed %s",
		    r->changed[i]);
	sandq_result_free(r);
	{
		struct sandq_job_opts fo = { .perm_preset = "full-access" };
		struct sandq_op_args ra = { .sandbox = "ps1", .path = "output/.env" };

		cr_assert_eq(sandq_call(c, "fs.read", &ra, &fo, 60000, &r), 0);
		cr_assert_str_eq(r->status, "ok");
		/* data: one msgpack bin, the file's bytes, unchanged. */
		cr_expect_not_null(memmem(r->data, r->data_len, env, sizeof(env) - 1),
		    "the secret was changed");
	}
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

/* What harness_wait_for() polls: the key's value, once it exists. */
struct key_wait {
	const struct harness *h;	/* whose Redis */
	char *value;			/* out: the string, owned */
};

static bool
key_present(void *arg)
{
	struct key_wait *w = arg;
	redisContext *rc = redisConnect("127.0.0.1", w->h->port);
	redisReply *r;

	if (rc == NULL || rc->err) {
		redisFree(rc);
		return false;
	}
	r = redisCommand(rc, "GET sandq:perm_presets");
	if (r != NULL && r->type == REDIS_REPLY_STRING) {
		free(w->value);
		w->value = strndup(r->str, r->len);
	}
	freeReplyObject(r);
	redisFree(rc);
	return w->value != NULL;
}

static void
key_delete(const struct harness *h)
{
	redisContext *rc = redisConnect("127.0.0.1", h->port);
	redisReply *r;

	cr_assert(rc != NULL && !rc->err);
	r = redisCommand(rc, "DEL sandq:perm_presets");
	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	redisFree(rc);
}

/* Compares the published JSON with perms.c's table, field by field. */
static void
expect_table(const char *text)
{
	const char *const *names = perms_preset_names();
	json_error_t je;
	json_t *root = json_loads(text, 0, &je), *a;
	size_t i;

	cr_assert_not_null(root, "%s", je.text);
	cr_expect_str_eq(json_string_value(json_object_get(root,
	    "default_preset")), PERMS_PRESET_DEFAULT);
	a = json_object_get(root, "presets");
	cr_assert(json_is_array(a));
	for (i = 0; names[i] != NULL; i++) {
		json_t *p = json_array_get(a, i), *rules;
		const struct perm_rule *want;
		enum perm_level deflt;
		size_t n;

		cr_assert_not_null(p, "preset %s missing", names[i]);
		cr_assert_eq(perms_preset_rules(names[i], &want, &n, &deflt), 0);
		cr_expect_str_eq(json_string_value(json_object_get(p, "name")),
		    names[i]);
		cr_expect_str_eq(json_string_value(json_object_get(p,
		    "description")), perms_preset_description(names[i]));
		cr_expect_str_eq(json_string_value(json_object_get(p, "default")),
		    perms_level_str(deflt));
		rules = json_object_get(p, "rules");
		cr_assert_eq(json_array_size(rules), n, "%s: rules", names[i]);
		for (size_t k = 0; k < n; k++) {
			json_t *r = json_array_get(rules, k);

			cr_expect_str_eq(json_string_value(json_object_get(r,
			    "pattern")), want[k].pattern);
			cr_expect_str_eq(json_string_value(json_object_get(r,
			    "level")), perms_level_str(want[k].level));
		}
	}
	cr_expect_eq(json_array_size(a), i);
	json_decref(root);
}

/* Runs `sandq --redis URL ARGS` and returns its exit status and stdout. */
static int
sq(const struct harness *h, const char *args, char **out)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s 2>/dev/null",
	    harness_build_dir(), h->url, args);
	return harness_run(cmd, out);
}

/* `sandq presets`: the list, one preset's rules, --json, an unknown name. */
static void
expect_cli(const struct harness *h)
{
	json_t *o;
	char *out;

	cr_assert_eq(sq(h, "presets", &out), 0);
	cr_expect_not_null(strstr(out, "PRESET "), "%s", out);
	cr_expect_not_null(strstr(out, "\nagent-edit       write"), "%s", out);
	cr_expect_not_null(strstr(out, "(the default)\nagent-safe       read"),
	    "%s", out);
	free(out);
	cr_assert_eq(sq(h, "presets agent-safe", &out), 0);
	cr_expect_eq(strncmp(out, "default read\nwrite /output/**\n"
	    "write /tmp/**\nnone  **/.git/**\n", 50), 0, "%s", out);
	free(out);
	cr_assert_eq(sq(h, "presets development --json", &out), 0);
	o = json_loads(out, 0, NULL);
	cr_expect_str_eq(json_string_value(json_object_get(o, "default")), "write");
	cr_expect_eq(json_array_size(json_object_get(o, "rules")), 6);
	json_decref(o);
	free(out);
	cr_expect_eq(sq(h, "presets yolo", &out), 1);
	free(out);
	cr_expect_eq(sq(h, "presets a b", &out), 2);
	free(out);
}

/*
 * A sandbox without output/ or tmp/ (AgentFense's examples write
 * /workspace/output/report.txt into any project): under agent-safe both
 * folders are there, writable, and what the job wrote there is committed;
 * the rest stays read-only, so no other folder can be made.
 */
Test(presets_integ, agent_safe_makes_its_write_folders)
{
	static const char app[] = "print('app')\n";
	const struct sandq_file files[] = { { "src/app.py", app, sizeof(app) - 1 } };
	struct sandq_job_opts o = { .sandbox = "ps2", .perm_preset = "agent-safe" };
	struct sandq_op_args a = { .sandbox = "ps2", .files = files, .nfiles = 1 };
	struct sandq_result *r;
	struct harness h;
	struct sandq *c;
	bool report = false;

	harness_start(&h, 1, NULL);
	c = harness_client(&h);
	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, 60000, &r), 0);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	/* A job that leaves the folders empty commits as any job does. */
	r = harness_sh(c, "test -d /workspace/output && test -d /workspace/tmp && echo both", &o);
	cr_assert_str_eq(r->status, "ok", "status %s: %s", r->status,
	    r->error_message ? r->error_message : "");
	cr_expect_str_eq(out_of(r), "both\n");
	sandq_result_free(r);
	r = harness_sh(c,
	    "cd /workspace\n"
	    "echo results > output/report.txt && echo wrote-output\n"
	    "echo w > tmp/scratch && echo wrote-tmp\n"
	    "mkdir other 2>/dev/null && echo MADE-DIR\n"
	    "echo done\n", &o);
	cr_assert_str_eq(r->status, "ok", "status %s: %s", r->status,
	    r->stderr_data ? (const char *)r->stderr_data : "");
	cr_expect_str_eq(out_of(r), "wrote-output\nwrote-tmp\ndone\n");
	for (size_t i = 0; i < r->nchanged; i++)
		report |= strcmp(r->changed[i], "/output/report.txt") == 0;
	cr_expect(report, "/output/report.txt was not committed");
	sandq_result_free(r);
	/* The next job reads it back, on the committed version. */
	r = harness_sh(c, "cat /workspace/output/report.txt", &o);
	cr_assert_str_eq(r->status, "ok");
	cr_expect_str_eq(out_of(r), "results\n");
	sandq_result_free(r);
	sandq_close(c);
	harness_stop(&h);
}

Test(presets_integ, published_presets)
{
	struct key_wait w = { 0 };
	struct harness h;
	json_t *root;

	harness_start(&h, 1, NULL);
	w.h = &h;
	cr_assert(harness_wait_for(key_present, &w, 30000),
	    "sandq:perm_presets never written");
	expect_table(w.value);
	/* agent-safe as AgentFense has it: read, /output and /tmp write. */
	root = json_loads(w.value, 0, NULL);
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(
	    json_object_get(root, "presets"), 1), "default")), "read");
	json_decref(root);

	/* sandq presets lists what was published. */
	expect_cli(&h);

	/* Every start writes it: deleted, it is back after a restart. */
	key_delete(&h);
	cr_assert_eq(harness_stop_sandqd(&h, 30000), 0);
	free(w.value);
	w.value = NULL;
	cr_expect_not(key_present(&w));
	harness_sandqd_start(&h, 1, NULL);
	cr_assert(harness_wait_for(key_present, &w, 30000),
	    "sandq:perm_presets not written again at a restart");
	expect_table(w.value);
	free(w.value);
	harness_stop(&h);
}
