/*
 * batch_test.c - `sandq batch` end to end (issue 7 item 1): a file of
 * cases run through build/sandq against a private redis-server and a
 * sandqd with 2 workers, as a script would run it.
 *
 * What is checked: the summary of 1,000 cases (--json, parsed: total,
 * passed, failed, by_status exact), one --out line per case with its
 * number and verdict, a rerun under the same id that submits nothing (the
 * job stream's entries-added, which counts every XADD ever made, does not
 * move) whether the answers come from --out or from Redis; --base forks
 * (each case sees the base's file, its changes stay in its fork, the forks
 * are deleted); the trim and regex expect modes; malformed lines reported
 * by number; Ctrl-C (exit 130, queued cases cancelled, the progress
 * record says interrupted).
 *
 * Needs root (sandqd maps each worker's jobs to an unprivileged uid);
 * every test stops with a reason without it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define WAIT_MS 60000

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

TestSuite(batch, .init = setup, .fini = teardown);

/*** Helpers ***/

/* Runs the CLI against the harness; returns its exit status, *out its stdout. */
static int
cli(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
cli(char **out, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s", harness_build_dir(), H.url,
	    args);
	return harness_run(cmd, out);
}

/* H.dir/name into buf. */
static const char *
path_of(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", H.dir, name);
	return buf;
}

/* Writes text to H.dir/name. */
static void
put(const char *name, const char *text)
{
	char p[512];
	FILE *f = fopen(path_of(p, sizeof(p), name), "w");

	cr_assert_not_null(f, "%s: %s", p, strerror(errno));
	cr_assert_eq(fputs(text, f) >= 0, true);
	cr_assert_eq(fclose(f), 0);
}

/* The whole of a file, NUL-terminated (owned). */
static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int ch;

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	while ((ch = fgetc(f)) != EOF)
		fputc(ch, m);
	fclose(f);
	fclose(m);
	return buf;
}

/* The lines of H.dir/name, each parsed; *n of them. Asserts each is JSON. */
static json_t **
read_lines(const char *name, size_t *n)
{
	char p[512], *line = NULL;
	size_t cap = 0, count = 0;
	json_t **v = NULL;
	ssize_t len;
	FILE *f = fopen(path_of(p, sizeof(p), name), "r");

	cr_assert_not_null(f, "%s: %s", p, strerror(errno));
	while ((len = getline(&line, &cap, f)) > 0) {
		json_error_t je;

		v = realloc(v, (count + 1) * sizeof(*v));
		cr_assert_not_null(v);
		v[count] = json_loadb(line, (size_t)len, 0, &je);
		cr_assert_not_null(v[count], "%s line %zu: %s", name, count + 1, je.text);
		count++;
	}
	free(line);
	fclose(f);
	*n = count;
	return v;
}

static void
free_lines(json_t **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_decref(v[i]);
	free(v);
}

/* Parses the one JSON line of out (freed). */
static json_t *
parse_out(char *out)
{
	json_error_t je;
	json_t *j = json_loads(out, 0, &je);

	cr_assert_not_null(j, "not JSON (%s): %s", je.text, out);
	free(out);
	return j;
}

static json_int_t
jint(const json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

/* XADDs ever made to the default tenant's job stream (XINFO entries-added). */
static long long
entries_added(void)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *r;
	long long n = -1;

	cr_assert(rc != NULL && rc->err == 0);
	r = redisCommand(rc, "XINFO STREAM sandq:{default}:jobs");
	cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY, "XINFO STREAM failed");
	for (size_t i = 0; i + 1 < r->elements; i += 2)
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    strcmp(r->element[i]->str, "entries-added") == 0)
			n = r->element[i + 1]->integer;
	freeReplyObject(r);
	redisFree(rc);
	cr_assert_geq(n, 0, "no entries-added in XINFO STREAM (Redis 7 or later)");
	return n;
}

/* by_status is exactly the NULL-terminated name, count pairs given. */
static void
expect_by_status(const json_t *s, ...)
{
	const json_t *bs = json_object_get(s, "by_status");
	const char *name;
	size_t n = 0;
	va_list ap;

	cr_assert(json_is_object(bs), "no by_status");
	va_start(ap, s);
	while ((name = va_arg(ap, const char *)) != NULL) {
		int count = va_arg(ap, int);

		cr_expect_eq(jint(bs, name), count, "by_status.%s: %lld, not %d", name,
		    (long long)jint(bs, name), count);
		n++;
	}
	va_end(ap);
	cr_expect_eq(json_object_size(bs), n, "by_status has %zu statuses, not %zu",
	    json_object_size(bs), n);
}

/*** 1,000 cases, and resuming ***/

#define BIG 1000

/*
 * Case i echoes i and expects it, except cases 7, 107, ..., 907: those
 * expect something else, and 7, 507 and 907 carry a field sandqd refuses.
 */
static bool
big_fails(int i)
{
	return i % 100 == 7;
}

static bool
big_rejected(int i)
{
	return i == 7 || i == 507 || i == 907;
}

static void
big_write(void)
{
	size_t cap = BIG * 100, len = 0;
	char *text = malloc(cap);

	cr_assert_not_null(text);
	for (int i = 1; i <= BIG; i++)
		len += (size_t)snprintf(text + len, cap - len,
		    "{\"op\":\"sh\",\"script\":\"echo %d\",\"expect\":\"%d%s\\n\"%s}\n", i, i,
		    big_fails(i) ? "x" : "", big_rejected(i) ? ",\"bogus\":1" : "");
	put("big.jsonl", text);
	free(text);
}

static void
big_check_summary(const json_t *s, int resumed)
{
	cr_expect_str_eq(json_string_value(json_object_get(s, "batch")), "big");
	cr_expect_eq(jint(s, "total"), BIG);
	cr_expect_eq(jint(s, "done"), BIG);
	cr_expect_eq(jint(s, "resumed"), resumed);
	cr_expect_eq(jint(s, "passed"), BIG - 10);
	cr_expect_eq(jint(s, "failed"), 10);
	cr_expect_eq(jint(s, "malformed"), 0);
	cr_expect_eq(jint(s, "no_expect"), 0);
	expect_by_status(s, "ok", BIG - 3, "rejected", 3, NULL);
	cr_expect_eq(json_array_size(json_object_get(s, "failed_cases")), 10);
	cr_expect_eq(json_array_size(json_object_get(s, "slowest")), 5);
	cr_expect(json_is_false(json_object_get(s, "interrupted")));
}

Test(batch, a_thousand_cases_give_an_exact_summary_and_a_rerun_submits_nothing)
{
	char cases[512], outp[512], *out = NULL;
	long long added;
	json_t *s, **lines;
	size_t n;
	bool seen[BIG + 1] = { false };

	big_write();
	path_of(cases, sizeof(cases), "big.jsonl");
	path_of(outp, sizeof(outp), "big.out");
	cr_assert_eq(cli(&out, "batch run %s --id big --out %s --concurrency 16 --json "
	    "2>/dev/null", cases, outp), 1, "some cases fail: exit status 1");
	s = parse_out(out);
	big_check_summary(s, 0);
	json_decref(s);

	/* One line per case, with its number, id and verdict. */
	lines = read_lines("big.out", &n);
	cr_assert_eq(n, BIG, "--out has %zu lines", n);
	for (size_t i = 0; i < n; i++) {
		json_int_t c = jint(lines[i], "case");
		char id[64];

		cr_assert(c >= 1 && c <= BIG && !seen[c], "line %zu: case %lld", i + 1,
		    (long long)c);
		seen[c] = true;
		snprintf(id, sizeof(id), "batch:big:%lld", (long long)c);
		cr_expect_str_eq(json_string_value(json_object_get(lines[i], "id")), id);
		cr_expect_eq(json_is_true(json_object_get(lines[i], "pass")),
		    !big_fails((int)c), "case %lld: pass", (long long)c);
		cr_expect_str_eq(json_string_value(json_object_get(lines[i], "status")),
		    big_rejected((int)c) ? "rejected" : "ok", "case %lld", (long long)c);
	}
	free_lines(lines, n);

	/* Again under the same id: every answer is in --out, nothing is submitted. */
	added = entries_added();
	cr_assert_eq(cli(&out, "batch run %s --id big --out %s --json 2>/dev/null", cases,
	    outp), 1);
	s = parse_out(out);
	big_check_summary(s, BIG);
	json_decref(s);
	cr_expect_eq(entries_added(), added, "the rerun submitted jobs");
	lines = read_lines("big.out", &n);
	cr_expect_eq(n, BIG, "the rerun wrote to --out");
	free_lines(lines, n);

	/* And without --out: the answers come from Redis. */
	cr_assert_eq(cli(&out, "batch run %s --id big --json 2>/dev/null", cases), 1);
	s = parse_out(out);
	big_check_summary(s, BIG);
	json_decref(s);
	cr_expect_eq(entries_added(), added, "the rerun from Redis submitted jobs");

	/* The progress record says it is done. */
	cr_assert_eq(cli(&out, "batch status big --json"), 0);
	s = parse_out(out);
	cr_expect_str_eq(json_string_value(json_object_get(s, "state")), "finished");
	cr_expect_eq(jint(s, "done"), BIG);
	cr_expect_eq(jint(s, "passed"), BIG - 10);
	json_decref(s);
	cr_expect_eq(cli(&out, "batch status nosuch"), 1, "an unknown batch");
	free(out);
}

/*** --base ***/

Test(batch, base_runs_each_case_on_its_own_fork_and_deletes_it)
{
	struct sandq *c = harness_client(&H);
	struct sandq_file f = { "seed.txt", "base\n", 5 };
	struct sandq_op_args a = { .sandbox = "proj", .files = &f, .nfiles = 1 };
	struct sandq_result *r = NULL;
	char cases[512], outp[512], line[256], *text = NULL, *out = NULL;
	size_t len = 0, n, i;
	json_t *s, **lines, *list, *one;
	FILE *m = open_memstream(&text, &len);

	cr_assert_eq(sandq_call(c, "sandbox.create", &a, NULL, WAIT_MS, &r), 0, "%s",
	    sandq_last_error(c));
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	sandq_close(c);
	/* Each sees the base's one line, adds its own, and sees two. */
	for (i = 1; i <= 8; i++) {
		snprintf(line, sizeof(line), "{\"op\":\"sh\",\"script\":\"cat seed.txt; echo "
		    "case%zu >> seed.txt; wc -l < seed.txt\",\"expect\":\"base\\n2\\n\"}\n", i);
		fputs(line, m);
	}
	fputs("{\"op\":\"sh\",\"script\":\"true\",\"sandbox\":\"other\"}\n", m);
	fclose(m);
	put("base.jsonl", text);
	free(text);
	path_of(cases, sizeof(cases), "base.jsonl");
	path_of(outp, sizeof(outp), "base.out");
	cr_assert_eq(cli(&out, "batch run %s --base proj --id fb --concurrency 4 --out %s "
	    "--json 2>/dev/null", cases, outp), 1, "line 9 is malformed");
	s = parse_out(out);
	cr_expect_eq(jint(s, "passed"), 8);
	cr_expect_eq(jint(s, "failed"), 0);
	cr_expect_eq(jint(s, "malformed"), 1);
	expect_by_status(s, "ok", 8, "malformed", 1, NULL);
	json_decref(s);

	/* Each case ran on batch:fb:N, which its commit changed. */
	lines = read_lines("base.out", &n);
	cr_assert_eq(n, 9);
	for (i = 0; i < n; i++) {
		char want[64];

		if (jint(lines[i], "case") == 9) {
			cr_expect_str_eq(json_string_value(json_object_get(lines[i], "status")),
			    "malformed");
			continue;
		}
		snprintf(want, sizeof(want), "batch:fb:%lld", (long long)jint(lines[i], "case"));
		cr_expect_str_eq(json_string_value(json_object_get(lines[i], "sandbox")), want);
		cr_expect(json_is_true(json_object_get(lines[i], "pass")));
	}
	free_lines(lines, n);

	/* The base is as it was, and the forks are gone. */
	cr_assert_eq(cli(&out, "fs cat proj seed.txt"), 0);
	cr_expect_str_eq(out, "base\n");
	free(out);
	cr_assert_eq(cli(&out, "--json sandbox ls"), 0);
	list = parse_out(out);
	cr_expect_eq(json_array_size(list), 1, "sandboxes left: %zu", json_array_size(list));
	json_array_foreach(list, i, one)
		cr_expect_str_eq(json_string_value(json_object_get(one, "sandbox")), "proj");
	json_decref(list);

	cr_expect_eq(cli(&out, "batch run %s --base nosuch --id fb2 2>/dev/null", cases), 2,
	    "a missing base is a usage error");
	free(out);
}

/*** Expect modes and malformed lines ***/

Test(batch, trim_and_regex_modes_and_malformed_lines_reported_by_number)
{
	static const char text[] =
	    /* 1 */ "{\"op\":\"sh\",\"script\":\"printf 'a  \\\\nb\\\\t\\\\n\\\\n\\\\n'\","
	    "\"expect\":\"a\\nb\",\"expect_mode\":\"trim\"}\n"
	    /* 2 */ "{\"op\":\"sh\",\"script\":\"printf 'a\\\\nc\\\\n'\",\"expect\":\"a\\nb\","
	    "\"expect_mode\":\"trim\"}\n"
	    /* 3 */ "{\"op\":\"exec\",\"argv\":[\"echo\",\"hello world 42\"],"
	    "\"expect\":\"hel+o w.* \\\\d+\",\"expect_mode\":\"regex\"}\n"
	    /* 4 */ "{\"op\":\"exec\",\"argv\":[\"echo\",\"hello world\"],"
	    "\"expect\":\"hello\",\"expect_mode\":\"regex\"}\n"
	    /* 5 */ "{\"op\":\"sh\",\"script\":\"printf 'x\\\\ny\\\\n'\",\"expect\":\"x.y\","
	    "\"expect_mode\":\"regex\"}\n"
	    /* 6 */ "\n"
	    /* 7 */ "not json\n"
	    /* 8 */ "{\"op\":\"sh\",\"script\":\"echo 1\",\"id\":\"mine\"}\n"
	    /* 9 */ "{\"op\":\"sh\",\"script\":\"echo 1\",\"expect\":\"(\",\"expect_mode\":\"regex\"}\n"
	    /* 10 */ "{\"op\":\"sh\",\"script\":\"echo 1\",\"expect\":\"1\",\"expect_mode\":\"fuzzy\"}\n"
	    /* 11 */ "{\"op\":\"sh\",\"script\":\"echo 1\",\"expect\":\"1\"}\n"
	    /* 12 */ "[1, 2]\n"
	    /* 13 */ "{\"op\":\"sh\",\"script\":\"exit 4\"}\n";
	static const int pass_of[14] = { 0, 1, 0, 1, 0, 1, -2, -2, -2, -2, -2, 0, -2, -1 };
	char cases[512], outp[512], errp[512], *out = NULL, *err;
	json_t *s, **lines;
	size_t n;

	put("modes.jsonl", text);
	path_of(cases, sizeof(cases), "modes.jsonl");
	path_of(outp, sizeof(outp), "modes.out");
	path_of(errp, sizeof(errp), "modes.err");
	cr_assert_eq(cli(&out, "batch run %s --out %s --json 2>%s", cases, outp, errp), 1);
	s = parse_out(out);
	cr_expect_eq(jint(s, "total"), 12, "the empty line is no case");
	cr_expect_eq(jint(s, "passed"), 3);
	cr_expect_eq(jint(s, "failed"), 3);
	cr_expect_eq(jint(s, "malformed"), 5);
	cr_expect_eq(jint(s, "no_expect"), 1);
	cr_expect_eq(jint(s, "not_ok"), 1);
	expect_by_status(s, "ok", 6, "exit", 1, "malformed", 5, NULL);
	json_decref(s);

	/* Each malformed line is named by its number on stderr. */
	err = slurp(errp);
	cr_expect_not_null(strstr(err, "modes.jsonl:7: not JSON"), "%s", err);
	cr_expect_not_null(strstr(err, "modes.jsonl:8: field 'id'"), "%s", err);
	cr_expect_not_null(strstr(err, "modes.jsonl:9: field 'expect': not a valid "
	    "regex (PCRE2): missing closing parenthesis at offset 1"), "%s", err);
	cr_expect_not_null(strstr(err, "modes.jsonl:10: field 'expect_mode'"), "%s", err);
	cr_expect_not_null(strstr(err, "modes.jsonl:12: expected a JSON object"), "%s", err);
	free(err);

	/* And in --out: each case's verdict under its line number. */
	lines = read_lines("modes.out", &n);
	cr_assert_eq(n, 12);
	for (size_t i = 0; i < n; i++) {
		json_int_t c = jint(lines[i], "case");
		const json_t *p = json_object_get(lines[i], "pass");

		cr_assert(c >= 1 && c <= 13 && c != 6, "case %lld", (long long)c);
		if (pass_of[c] == -2)
			cr_expect_str_eq(json_string_value(json_object_get(lines[i], "status")),
			    "malformed", "case %lld", (long long)c);
		if (pass_of[c] < 0)
			cr_expect_null(p, "case %lld has no expect", (long long)c);
		else
			cr_expect_eq(json_is_true(p), pass_of[c] == 1, "case %lld: pass",
			    (long long)c);
	}
	free_lines(lines, n);
}

/*** Ctrl-C ***/

/* Both workers run a case: two of this test's sleeps, exec done, below sandqd. */
static bool
two_running(void *marker)
{
	pid_t pids[8];

	return harness_jobs(&H, marker, pids, 8) >= 2;
}

Test(batch, ctrl_c_cancels_the_queued_cases_and_exits_130)
{
	char cases[512], outp[512], sq[512], m[64], *out = NULL, *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	json_t *s;
	pid_t pid;
	int st, fd;

	harness_marker(m, sizeof(m), "sleep 4242");
	for (int i = 0; i < 12; i++)
		fprintf(f, "{\"op\":\"sh\",\"script\":\"%s\",\"limits\":{\"wall_ms\":60000},"
		    "\"expect\":\"\"}\n", m);
	fclose(f);
	put("slow.jsonl", text);
	free(text);
	path_of(cases, sizeof(cases), "slow.jsonl");
	path_of(outp, sizeof(outp), "slow.json");
	snprintf(sq, sizeof(sq), "%s/sandq", harness_build_dir());
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
			_exit(127);
		execl(sq, sq, "--redis", H.url, "batch", "run", cases, "--id", "slow",
		    "--concurrency", "12", "--json", (char *)NULL);
		_exit(127);
	}
	/* Both workers busy: the other cases are queued, in Redis or on sandqd. */
	cr_assert(harness_wait_for(two_running, m, WAIT_MS), "the cases did not start");
	cr_assert_eq(kill(pid, SIGINT), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "sandq batch was killed by a signal");
	cr_expect_eq(WEXITSTATUS(st), 130);

	s = parse_out(slurp(outp));
	cr_expect(json_is_true(json_object_get(s, "interrupted")));
	cr_expect_eq(jint(s, "total"), 12);
	cr_expect_eq(jint(s, "done"), 0, "no case finished");
	/* sandqd holds at most 2 running and 2 queued: the rest were cancelled. */
	cr_expect_geq(jint(s, "cancelled"), 8, "cancelled %lld", (long long)jint(s, "cancelled"));
	json_decref(s);
	cr_assert_eq(cli(&out, "batch status slow --json"), 0);
	s = parse_out(out);
	cr_expect_str_eq(json_string_value(json_object_get(s, "state")), "interrupted");
	json_decref(s);
	/* The last case had not been read: cancelled, and a rerun would run it. */
	cr_assert_eq(cli(&out, "--json result batch:slow:12"), 125);
	s = parse_out(out);
	cr_expect_str_eq(json_string_value(json_object_get(s, "status")), "cancelled");
	json_decref(s);
}
