/*
 * libsandq_api_test.c - libsandq's runs with cases, path presets and audit
 * trail (issue 20) against a real sandqd.
 *
 * cases: a run with four cases (exact, PCRE2 regex, a failing one, one
 * without expect) read back with sandq_cases_decode(), and a run whose
 * regex does not compile refused before any case runs, naming the case.
 * presets: sandq_presets() lists exactly workspace/perms.c's table, says
 * -ENOENT when nothing is published and -EBADMSG for a forged key.
 * audit: sandq_audit() with the CLI's filters (job, category, level,
 * outcome, time window), skipping a forged entry.
 *
 * Each test starts its own redis-server and sandqd (tests/harness.c) in a
 * temporary folder and stops them by pid.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../workspace/perms.h"
#include "../proto/batchcase.h"
#include "harness.h"

TestSuite(libsandq_api, .timeout = 240);

/* Runs a Redis command on the harness's server; returns the reply. */
static redisReply *
redis(const struct harness *h, const char *fmt, ...)
{
	redisContext *rc = redisConnect("127.0.0.1", h->port);
	redisReply *r;
	va_list ap;

	cr_assert(rc != NULL && !rc->err);
	va_start(ap, fmt);
	r = redisvCommand(rc, fmt, ap);
	va_end(ap);
	redisFree(rc);
	cr_assert_not_null(r);
	return r;
}

/*** Cases ***/

Test(libsandq_api, cases_run_and_per_case_results)
{
	const struct sandq_case cases[] = {
		{ "2\n", 2, "4\n", 2, NULL },
		{ "21\n", 3, "\\d+", 3, "regex" },
		{ "1\n", 2, "3\n", 2, "exact" },
		{ "7\n", 2, NULL, 0, NULL },
	};
	const struct sandq_case bad[] = {
		{ "1\n", 2, "1", 1, NULL },
		{ "1\n", 2, "(\\d+", 4, "regex" },
	};
	struct sandq_job_opts o = { 0 };
	struct sandq_cases *cs = NULL;
	struct sandq_result *r;
	struct harness h;
	struct sandq *c;

	harness_start(&h, 1, NULL);
	c = harness_client(&h);
	o.cases = cases;
	o.ncases = sizeof(cases) / sizeof(cases[0]);
	r = harness_sh(c, "read x; echo $((x * 2))", &o);
	cr_assert_str_eq(r->status, "ok", "%s", r->error_message ?
	    r->error_message : "");
	cr_expect_eq(r->exit_code, 1, "a case failed its expect");
	cr_assert_eq(sandq_cases_decode(r, &cs), 0);
	cr_assert_eq(cs->ncases, 4);
	cr_expect_eq(cs->passed, 2);
	cr_expect_eq(cs->failed, 1);
	for (size_t i = 0; i < cs->ncases; i++) {
		cr_expect_eq(cs->cases[i].index, i + 1);
		cr_expect_str_eq(cs->cases[i].status, "ok");
	}
	cr_expect_str_eq((char *)cs->cases[0].stdout_data, "4\n");
	cr_expect_eq(cs->cases[0].pass, 1);
	cr_expect_str_eq((char *)cs->cases[1].stdout_data, "42\n");
	cr_expect_eq(cs->cases[1].pass, 1, "\\d+ is PCRE2's digits");
	cr_expect_eq(cs->cases[2].pass, 0);
	cr_expect_eq(cs->cases[3].pass, -1, "no expect: neither");
	cr_expect_str_eq((char *)cs->cases[3].stdout_data, "14\n");
	sandq_cases_free(cs);
	sandq_result_free(r);

	/*
	 * The worker judges a case as `sandq batch` and the gateway judge a
	 * line (proto/batchcase.h): outputs with blanks ending their lines,
	 * each judged by the run and by batchcase_expect_check() alike.
	 */
	{
		const struct sandq_case blanks[] = {
			{ "abc\n", 4, "abc", 3, "regex" },
			{ "abc\n", 4, "abc\\s*", 6, "regex" },
			{ "abc\n", 4, "abc", 3, "trim" },
			{ "abc\n", 4, "abc  \n", 6, "exact" },
		};

		o.cases = blanks;
		o.ncases = sizeof(blanks) / sizeof(blanks[0]);
		r = harness_sh(c, "read x; printf '%s  \\n\\n' \"$x\"", &o);
		cr_assert_str_eq(r->status, "ok", "%s", r->error_message ?
		    r->error_message : "");
		cr_assert_eq(sandq_cases_decode(r, &cs), 0);
		cr_assert_eq(cs->ncases, o.ncases);
		for (size_t i = 0; i < cs->ncases; i++) {
			struct batch_expect ex;
			char why[320];
			int want;

			cr_assert_eq(batchcase_expect_set(&ex, blanks[i].expect_mode,
			    blanks[i].expect, blanks[i].expect_len, why, sizeof(why)), 0, "%s", why);
			want = batchcase_expect_check(&ex, cs->cases[i].stdout_data,
			    cs->cases[i].stdout_len);
			batchcase_expect_free(&ex);
			cr_expect_eq(cs->cases[i].pass, want, "case %zu (%s): the run says %d, "
			    "sandq batch %d", i + 1, blanks[i].expect_mode, cs->cases[i].pass, want);
		}
		cr_expect_eq(cs->cases[0].pass, 0, "'abc' is not the whole of 'abc  '");
		cr_expect_eq(cs->cases[1].pass, 1);
		cr_expect_eq(cs->cases[2].pass, 1);
		sandq_cases_free(cs);
		sandq_result_free(r);
	}

	/* A regex that does not compile: refused before any case runs. */
	o.cases = bad;
	o.ncases = 2;
	r = harness_sh(c, "cat", &o);
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_str_eq(r->error_code, "invalid_job");
	cr_expect_not_null(strstr(r->error_message, "field 'cases[1].expect': "
	    "not a valid regex (PCRE2): missing closing parenthesis at offset 4"),
	    "%s", r->error_message);
	cs = NULL;
	cr_expect_eq(sandq_cases_decode(r, &cs), -ENOENT);
	cr_expect_null(cs);
	sandq_result_free(r);

	/* What the protocol cannot carry is refused by the client. */
	o.has_stdin = true;
	cr_expect_eq(sandq_submit_sh(c, "cat", &o, NULL), -EINVAL);
	cr_expect_str_eq(sandq_last_error(c), "cases: not with stdin");
	sandq_close(c);
	harness_stop(&h);
}

/*** Presets ***/

/* What harness_wait_for() polls: sandq_presets() answering. */
struct presets_wait {
	struct sandq *c;
	struct sandq_presets *ps;	/* out, once published */
	int rc;				/* the last answer */
};

static bool
presets_ready(void *arg)
{
	struct presets_wait *w = arg;

	w->rc = sandq_presets(w->c, &w->ps);
	return w->rc != -ENOENT;
}

Test(libsandq_api, presets_list_exactly_the_table)
{
	const char *const *names = perms_preset_names();
	struct sandq_presets *ps = NULL;
	const struct sandq_preset *p;
	struct presets_wait w = { 0 };
	struct harness h;
	struct sandq *c;
	redisReply *rr;
	size_t i;

	harness_start(&h, 1, NULL);
	c = harness_client(&h);
	/* Published at start, on sandqd's own connection: wait for it. */
	w.c = c;
	harness_wait_for(presets_ready, &w, 30000);
	cr_assert_eq(w.rc, 0, "%s", sandq_last_error(c));
	ps = w.ps;
	cr_expect_str_eq(ps->default_preset, PERMS_PRESET_DEFAULT);
	for (i = 0; names[i] != NULL; i++) {
		const struct perm_rule *rules;
		enum perm_level deflt;
		size_t n;

		cr_assert_lt(i, ps->npresets);
		cr_assert_eq(perms_preset_rules(names[i], &rules, &n, &deflt), 0);
		cr_expect_str_eq(ps->presets[i].name, names[i]);
		cr_expect_str_eq(ps->presets[i].deflt, perms_level_str(deflt));
		cr_expect_str_eq(ps->presets[i].description,
		    perms_preset_description(names[i]));
		cr_assert_eq(ps->presets[i].nrules, n);
		for (size_t k = 0; k < n; k++) {
			cr_expect_str_eq(ps->presets[i].rules[k].pattern,
			    rules[k].pattern);
			cr_expect_str_eq(ps->presets[i].rules[k].level,
			    perms_level_str(rules[k].level));
		}
	}
	cr_expect_eq(ps->npresets, i);
	p = sandq_presets_find(ps, "agent-safe");
	cr_assert_not_null(p);
	cr_expect_str_eq(p->deflt, "read");
	cr_expect_null(sandq_presets_find(ps, "yolo"));
	sandq_presets_free(ps);

	/* Nothing published, then a forged key. */
	freeReplyObject(redis(&h, "DEL sandq:perm_presets"));
	cr_expect_eq(sandq_presets(c, &ps), -ENOENT);
	cr_expect_null(ps);
	freeReplyObject(redis(&h, "SET sandq:perm_presets %s",
	    "{\"presets\":[{\"name\":\"x\",\"description\":\"\",\"default\":"
	    "\"admin\",\"rules\":[]}]}"));
	cr_expect_eq(sandq_presets(c, &ps), -EBADMSG);
	cr_expect_null(ps);
	rr = redis(&h, "SET sandq:perm_presets %s", "not json");
	freeReplyObject(rr);
	cr_expect_eq(sandq_presets(c, &ps), -EBADMSG);
	sandq_close(c);
	harness_stop(&h);
}

/*** Audit ***/

Test(libsandq_api, audit_with_the_cli_filters)
{
	struct sandq_job_opts o = { 0 };
	struct sandq_audit_filter f = { 0 };
	struct sandq_audit_events *ev = NULL;
	struct sandq_result *r;
	struct harness h;
	struct sandq *c;
	bool finished = false;

	harness_start(&h, 1, NULL);
	c = harness_client(&h);
	o.id = "aud-ok";
	r = harness_sh(c, "true", &o);
	sandq_result_free(r);
	o.id = "aud-fail";
	o.net = "no-such-mode";
	r = harness_sh(c, "true", &o);
	cr_expect_str_eq(r->status, "rejected");
	sandq_result_free(r);
	/* A forged entry: the tenant's own user may write the stream. */
	freeReplyObject(redis(&h, "XADD sandq:{default}:audit * time x job aud-ok"));

	cr_assert_eq(sandq_audit(c, NULL, &ev), 0, "%s", sandq_last_error(c));
	cr_expect_geq(ev->nevents, 4);
	cr_expect_geq(ev->skipped, 1, "the forged entry is skipped");
	sandq_audit_free(ev);

	f.job = "aud-ok";
	cr_assert_eq(sandq_audit(c, &f, &ev), 0);
	cr_expect_gt(ev->nevents, 0);
	for (size_t i = 0; i < ev->nevents; i++) {
		cr_expect_str_eq(ev->events[i].job, "aud-ok");
		cr_expect_str_eq(ev->events[i].tenant, "default");
		cr_expect(ev->events[i].allowed);
		if (strcmp(ev->events[i].action, "finished") == 0)
			finished = true;
	}
	cr_expect(finished, "the job's finished event");
	sandq_audit_free(ev);

	/* Denied job events at warning or above: the rejection's, not aud-ok's. */
	memset(&f, 0, sizeof(f));
	f.categories = "job";
	f.level = "warning";
	f.outcome = SANDQ_AUDIT_DENIED;
	cr_assert_eq(sandq_audit(c, &f, &ev), 0);
	cr_expect_gt(ev->nevents, 0);
	for (size_t i = 0; i < ev->nevents; i++) {
		cr_expect_str_eq(ev->events[i].category, "job");
		cr_expect_not(ev->events[i].allowed);
		cr_expect(strcmp(ev->events[i].level, "warning") == 0 ||
		    strcmp(ev->events[i].level, "alert") == 0);
		cr_expect_str_neq(ev->events[i].job, "aud-ok");
	}
	sandq_audit_free(ev);

	/* A window in the future holds nothing; limit caps the count. */
	memset(&f, 0, sizeof(f));
	f.since_ms = INT64_C(4102444800000);
	cr_assert_eq(sandq_audit(c, &f, &ev), 0);
	cr_expect_eq(ev->nevents, 0);
	sandq_audit_free(ev);
	memset(&f, 0, sizeof(f));
	f.limit = 2;
	cr_assert_eq(sandq_audit(c, &f, &ev), 0);
	cr_expect_eq(ev->nevents, 2);
	sandq_audit_free(ev);

	/* A bad filter is refused by name. */
	f.categories = "job,network";
	cr_expect_eq(sandq_audit(c, &f, &ev), -EINVAL);
	cr_expect_not_null(strstr(sandq_last_error(c), "category 'network'"),
	    "%s", sandq_last_error(c));
	sandq_close(c);
	harness_stop(&h);
}
