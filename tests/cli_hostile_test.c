/*
 * cli_hostile_test.c - the sandq CLI facing what a tenant (or a hostile
 * server, or anyone who can write its Redis keys) put in front of it, run
 * as an operator runs it: build/sandq against a real redis-server and
 * sandqd (tests/harness.h).
 *
 * Two promises of docs/security.md, "Containment, second round":
 *
 * 5. Nothing a tenant wrote reaches an operator's terminal raw. Labels, kv
 *    keys, tool-call names, file names and link targets, dead letters, host
 *    names, batch progress, case ids and error messages quoting an upload
 *    go through every verb that prints them; no output may hold a C0
 *    control but newline and tab, DEL, or a C1 control (raw or in UTF-8),
 *    and the escaped form (cli/cli_esc.h) must be there instead.
 * 6. An export never writes outside its folder. `sandq fs get` copies
 *    sandboxes holding links to /root, /tmp, ../../.., chains that climb
 *    out, and hostile listings (a link, then a file below its name; "..";
 *    NUL and newline in names) into a folder of the test; nothing appears
 *    outside it, links that stay inside are kept, the others are named and
 *    counted, and --keep-symlinks keeps them as stored.
 *
 * A real sandbox cannot hold some of this (sandqd refuses control
 * characters in names, and a file below a symlink), so a fake server
 * answers the ops of tenant "evil", whose stream no sandqd reads: a child
 * process that reads the jobs and publishes crafted results the way sandqd
 * does (res and done keys). The CLI must be safe against it too.
 *
 * Needs root (sandqd maps sandbox uids); each test stops with a reason
 * without it.
 *
 * Sections: fixture and helpers / a fake server / escaping / exports.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <msgpack.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/err.h"
#include "../proto/keys.h"
#include "../proto/job.h"
#include "../proto/result.h"
#include "harness.h"

#define EXIT_SANDQ 125
#define FAKE_TENANT "evil"

/*** Fixture and helpers ***/

static struct harness H;
static pid_t fake_pid = -1;

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
	if (fake_pid > 0) {
		kill(fake_pid, SIGKILL);
		waitpid(fake_pid, NULL, 0);
		fake_pid = -1;
	}
	harness_stop(&H);
}

TestSuite(cli_hostile, .init = setup, .fini = teardown, .timeout = 120);

/* A whole file, NUL-terminated (owned), or NULL. */
static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	size_t n = 0, cap = 4096, got;
	char *buf;

	if (f == NULL)
		return NULL;
	buf = malloc(cap);
	cr_assert_not_null(buf);
	while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
		n += got;
		if (cap - n < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
	}
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/*
 * Runs `sandq --redis URL ARGS` through sh in H.dir, ARGS formatted from
 * fmt (shell syntax: bytes go in as "$(printf '\033')"). *out and *err get
 * stdout and stderr (owned). Returns the exit status.
 */
static int __attribute__((format(printf, 3, 4)))
sq(char **out, char **err, const char *fmt, ...)
{
	char args[8192], cmd[9000], errpath[400];
	va_list ap;
	int n, st;

	va_start(ap, fmt);
	n = vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	cr_assert(n > 0 && (size_t)n < sizeof(args));
	snprintf(errpath, sizeof(errpath), "%s/cli.stderr", H.dir);
	n = snprintf(cmd, sizeof(cmd), "cd %s && %s/sandq --redis %s %s 2>%s", H.dir,
	    harness_build_dir(), H.url, args, errpath);
	cr_assert(n > 0 && (size_t)n < sizeof(cmd));
	st = harness_run(cmd, out);
	*err = slurp(errpath);
	cr_assert_not_null(*err);
	if (*out == NULL)
		*out = strdup("");
	return st;
}

/* sq() that must exit 0; stderr is dropped. Returns stdout (owned). */
static char * __attribute__((format(printf, 1, 2)))
sq_ok(const char *fmt, ...)
{
	char args[8192], *out = NULL, *err = NULL;
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	st = sq(&out, &err, "%s", args);
	cr_assert_eq(st, 0, "sandq %s: exit %d, stderr: %s", args, st, err);
	free(err);
	return out;
}

/* A command on the harness's Redis, binary-safe (argc strings). */
static void
redis_do(int argc, const char **argv, const size_t *lens)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *r;

	cr_assert(rc != NULL && rc->err == 0);
	r = redisCommandArgv(rc, argc, argv, lens);
	cr_assert(r != NULL && r->type != REDIS_REPLY_ERROR, "%s: %s", argv[0],
	    r ? r->str : rc->errstr);
	freeReplyObject(r);
	redisFree(rc);
}

/* redis_do() of NUL-terminated strings. */
static void
redis_strs(int argc, const char **argv)
{
	size_t lens[32];

	cr_assert(argc <= 32);
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	redis_do(argc, argv, lens);
}

/*
 * Why s is not safe for a terminal, or NULL if it is: a C0 control other
 * than newline and tab, DEL, a byte that is not part of valid UTF-8 (raw
 * C1 among them), or a C1 control written in UTF-8.
 */
static const char *
unsafe_at(const char *s, char *why, size_t size)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; p[i];) {
		size_t more = p[i] < 0x80 ? 0 : p[i] >= 0xc2 && p[i] <= 0xdf ? 1 :
		    p[i] >= 0xe0 && p[i] <= 0xef ? 2 : p[i] >= 0xf0 && p[i] <= 0xf4 ? 3 : 9;
		bool bad = (p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f ||
		    more == 9 || (p[i] == 0xc2 && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f);

		for (size_t k = 1; !bad && k <= more; k++)
			bad = (p[i + k] & 0xc0) != 0x80;
		if (bad) {
			snprintf(why, size, "byte 0x%02x at offset %zu, after \"%.*s\"", p[i], i,
			    (int)(i < 40 ? i : 40), (const char *)p + (i < 40 ? 0 : i - 40));
			return why;
		}
		i += more + 1;
	}
	return NULL;
}

/* Expects out and err of `sandq args` to be terminal-safe. */
static void
expect_safe(const char *args, const char *out, const char *err)
{
	char why[200];

	cr_expect_null(unsafe_at(out, why, sizeof(why)), "sandq %s: stdout: %s", args,
	    why);
	cr_expect_null(unsafe_at(err, why, sizeof(why)), "sandq %s: stderr: %s", args,
	    why);
}

/*** A fake server ***/

/* What the fake server answers to one op (path NULL: any path). */
struct fake {
	enum job_op op;
	const char *path;
	const char *data_json;		/* the result's data, as JSON (\u0000 allowed) */
	const char *data_bytes;		/* or the data as bytes (fs.read) */
	const char *error_message;	/* or a rejection with this message */
};

/* Packs a JSON value as msgpack, strings as they are (NUL bytes and all). */
static void
pack_json(msgpack_packer *pk, const json_t *j)
{
	const char *k;
	json_t *v;
	size_t i;

	switch (json_typeof(j)) {
	case JSON_OBJECT:
		msgpack_pack_map(pk, json_object_size(j));
		json_object_foreach((json_t *)(uintptr_t)j, k, v) {
			msgpack_pack_str_with_body(pk, k, strlen(k));
			pack_json(pk, v);
		}
		break;
	case JSON_ARRAY:
		msgpack_pack_array(pk, json_array_size(j));
		json_array_foreach(j, i, v)
			pack_json(pk, v);
		break;
	case JSON_STRING:
		msgpack_pack_str_with_body(pk, json_string_value(j), json_string_length(j));
		break;
	case JSON_INTEGER:
		msgpack_pack_int64(pk, json_integer_value(j));
		break;
	case JSON_TRUE:
		msgpack_pack_true(pk);
		break;
	case JSON_FALSE:
		msgpack_pack_false(pk);
		break;
	default:
		msgpack_pack_nil(pk);
	}
}

/* Publishes r as sandqd does: the result key, then the done list. */
static void
fake_publish(redisContext *rc, const struct result *r)
{
	char res[KEY_MAX], done[KEY_MAX], *enc = NULL;
	size_t len = 0;
	redisReply *rep;

	if (payload_result_encode(r, &enc, &len) < 0 ||
	    key_res(res, "sandq", FAKE_TENANT, r->id) < 0 ||
	    key_done(done, "sandq", FAKE_TENANT, r->id) < 0)
		_exit(3);
	rep = redisCommand(rc, "SET %s %b", res, enc, len);
	freeReplyObject(rep);
	rep = redisCommand(rc, "RPUSH %s %b", done, enc, len);
	freeReplyObject(rep);
	free(enc);
}

/* Answers one job from the table (a rejection when nothing matches). */
static void
fake_answer(redisContext *rc, const struct fake *tab, const struct job *j)
{
	struct result *r = result_new(j->id);
	const struct fake *f = NULL;

	for (; tab->op != OP_NONE; tab++)
		if (tab->op == j->op && (tab->path == NULL ||
		    (j->path && strcmp(tab->path, j->path) == 0))) {
			f = tab;
			break;
		}
	r->finished_at = r->started_at = r->queued_at = 1;
	if (f == NULL) {
		result_set_error(r, ST_REJECTED, "not_found", "no fake answer");
	} else if (f->error_message != NULL) {
		result_set_error(r, ST_REJECTED, "invalid", "%s", f->error_message);
	} else {
		msgpack_sbuffer sb;
		msgpack_packer pk;

		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		if (f->data_bytes != NULL) {
			msgpack_pack_bin_with_body(&pk, f->data_bytes, strlen(f->data_bytes));
		} else {
			json_t *d = json_loads(f->data_json, JSON_DECODE_ANY | JSON_ALLOW_NUL,
			    NULL);

			if (d == NULL)
				_exit(4);
			pack_json(&pk, d);
			json_decref(d);
		}
		r->status = ST_OK;
		r->exit_code = 0;
		r->data = (uint8_t *)sb.data;
		r->data_len = sb.size;
	}
	fake_publish(rc, r);
	result_free(r);
}

/*
 * Starts the fake server for tenant FAKE_TENANT: a child reading its job
 * stream and answering each job from tab (which it inherits). The
 * teardown kills it.
 */
static void
fake_start(const struct fake *tab)
{
	cr_assert_eq(fake_pid, -1);
	fake_pid = fork();
	cr_assert(fake_pid >= 0);
	if (fake_pid == 0) {
		redisContext *rc;
		char key[KEY_MAX], last[64] = "0-0";

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if ((rc = redisConnect("127.0.0.1", H.port)) == NULL || rc->err ||
		    key_jobs(key, "sandq", FAKE_TENANT) < 0)
			_exit(2);
		for (;;) {
			redisReply *r = redisCommand(rc, "XREAD BLOCK 1000 STREAMS %s %s", key,
			    last);

			if (r == NULL)
				_exit(2);
			if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
				redisReply *ents = r->element[0]->element[1];

				for (size_t i = 0; i < ents->elements; i++) {
					redisReply *e = ents->element[i], *f = e->element[1];
					struct job *j = NULL;
					struct err er = { 0 };

					snprintf(last, sizeof(last), "%s", e->element[0]->str);
					if (f->elements == 2 && payload_job_decode(f->element[1]->str,
					    f->element[1]->len, &j, NULL, &er) == 0)
						fake_answer(rc, tab, j);
					job_free(j);
				}
			}
			freeReplyObject(r);
		}
	}
}

/*** Escaping ***/

/* The bytes every hostile string below is made of, as the shell writes them. */
#define SH_CSI "\\033[2J"
#define SH_OSC "\\033]0;title\\007"
#define SH_C1 "\\302\\233"

/* One verb run, and what its output must hold. */
struct run {
	const char *args;		/* after `sandq --redis URL` */
	int status;			/* its exit status */
	const char *want_out;		/* in stdout (escaped form), or NULL */
	const char *want_err;		/* in stderr, or NULL */
};

/*
 * Runs each verb: exit status as expected, stdout and stderr free of
 * anything a terminal acts on, and the escaped form present.
 */
static void
run_all(const struct run *runs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *out = NULL, *err = NULL;
		int st = sq(&out, &err, "%s", runs[i].args);

		cr_expect_eq(st, runs[i].status, "sandq %s: exit %d, want %d; stderr: %s",
		    runs[i].args, st, runs[i].status, err);
		expect_safe(runs[i].args, out, err);
		if (runs[i].want_out)
			cr_expect_not_null(strstr(out, runs[i].want_out),
			    "sandq %s: stdout lacks %s: %s", runs[i].args, runs[i].want_out, out);
		if (runs[i].want_err)
			cr_expect_not_null(strstr(err, runs[i].want_err),
			    "sandq %s: stderr lacks %s: %s", runs[i].args, runs[i].want_err, err);
		free(out);
		free(err);
	}
}

/*
 * A database to import: sandbox hx's snapshot with a tool call whose name,
 * status and parameters are given as SQL expressions. Returns its path
 * (static buffer).
 */
static const char *
crafted_db(const char *file, const char *name_sql, const char *status_sql,
    const char *params_sql)
{
	static char path[512];
	char cmd[2048], *out = NULL;

	snprintf(path, sizeof(path), "%s/%s", H.dir, file);
	free(sq_ok("sandbox export hx %s", file));
	snprintf(cmd, sizeof(cmd), "sqlite3 %s \"INSERT INTO tool_calls (name, "
	    "parameters, status, started_at) VALUES (%s, %s, %s, 1); INSERT INTO "
	    "kv_store (key, value) VALUES (char(107,27,91,50,74,10,120), '1')\"", path,
	    name_sql, params_sql, status_sql);
	cr_assert_eq(harness_run(cmd, &out), 0, "%s", out);
	free(out);
	return path;
}

Test(cli_hostile, every_verb_escapes_what_a_tenant_wrote)
{
	char now[32], cases[512];
	FILE *f;

	/* Labels, kv keys, file paths: through the real sandqd. */
	free(sq_ok("sandbox create hx --label \"$(printf 'k" SH_OSC "')=$(printf 'v"
	    SH_CSI SH_C1 "\\nforged: line')\""));
	free(sq_ok("kv set hx \"$(printf 'key" SH_CSI SH_C1 "\\nnext')\" 1"));
	/* Tool-call names and a kv key with a newline: an imported database. */
	crafted_db("calls.db", "char(116,27,91,50,74,13,10,102,97,107,101)", "'success'",
	    "char(27,93,48,59,116,7)");
	free(sq_ok("sandbox import hy calls.db"));
	/* An import the server refuses, its message quoting the upload. */
	crafted_db("bad.db", "char(116,27,91,50,74)", "char(111,107,27,91,50,74)", "NULL");

	/* Dead letters: what the stream holds is shown, whoever wrote it. */
	{
		const char *xadd[] = { "XADD", "sandq:{default}:dead", "*", "entry",
		    "1-0\x1b[2J", "id", "job\x1b]0;title\x07", "reason",
		    "worker died\x1b[2J\xc2\x9b\x9b\nforged: line", "attempts",
		    "[{\"attempt\":1,\"host\":\"h\\u001b[2J\",\"reason\":\"r\\u009b\"}]",
		    "payload", "x" };

		redis_strs(13, xadd);
	}
	/* A host and a tenant name in the heartbeat hash. */
	snprintf(now, sizeof(now), "%lld", (long long)time(NULL) * 1000);
	{
		char beat[512];
		const char *hset[] = { "HSET", "sandq:hosts", "host\x1b]0;title\x07\x9b",
		    beat };

		/* With an image cache whose listing quotes a registry's text. */
		snprintf(beat, sizeof(beat), "{\"time\":%s,\"workers\":1,\"busy\":0,"
		    "\"tenants\":{\"t\\u001b[2J\":{\"running\":1}},\"images\":[{"
		    "\"reference\":\"docker://r.io/x\\u001b]0;title\\u0007\",\"digest\":"
		    "\"sha256:\\u009bab\\n\",\"bytes\":1,\"last_used\":1}],"
		    "\"images_total\":1}", now);
		redis_strs(4, hset);
	}
	/* A batch's progress record, and a cases file quoting ids and modes. */
	{
		const char *hset[] = { "HSET", "sandq:{default}:batch:hb", "state",
		    "running\x1b[2J", "host", "h\x1b]0;title\x07", "by_status",
		    "{\"ok\\u009b\":1}", "total", "2", "done", "1", "started_at", now,
		    "updated_at", now };

		redis_strs(16, hset);
	}
	snprintf(cases, sizeof(cases), "%s/cases.jsonl", H.dir);
	f = fopen(cases, "w");
	cr_assert_not_null(f);
	fputs("{\"op\":\"sh\",\"script\":\"\x1b]0;title\x07\xc2\x9b\"}\n"
	    "{\"op\":\"sh\",\"script\":\"true\",\"expect\":\"x\","
	    "\"expect_mode\":\"\\u001b]0;title\\u0007\"}\n", f);
	fclose(f);

	/* Names, targets and errors no sandqd would send: the fake server. */
	{
		static const struct fake tab[] = {
			{ OP_FS_LIST, NULL, "[{\"name\":\"n\\u001b[2J\",\"path\":\"/n\\u001b[2J\","
			    "\"type\":\"file\",\"mode\":420,\"size\":1,\"mtime\":1},"
			    "{\"name\":\"l\\u009b\\nforged\",\"path\":\"/l\\u009b\\nforged\","
			    "\"type\":\"symlink\",\"target\":\"/t\\u001b]0;title\\u0007\","
			    "\"mode\":511,\"size\":1,\"mtime\":1}]", NULL, NULL },
			{ OP_FS_STAT, NULL, "{\"name\":\"l\\u009b\",\"path\":\"/l\\u009b\","
			    "\"type\":\"symlink\\u001b[2J\",\"target\":\"/t\\u001b]0;title\\u0007\","
			    "\"mode\":511,\"size\":1,\"mtime\":1}", NULL, NULL },
			{ OP_SANDBOX_LIST, NULL, "[{\"sandbox\":\"s\\u001b[2J\",\"version\":1,"
			    "\"snapshot\":\"ab\\u009bcd\",\"updated_at\":1,\"labels\":{}}]",
			    NULL, NULL },
			{ OP_SANDBOX_INFO, NULL, "{\"sandbox\":\"s\\u001b[2J\",\"version\":1,"
			    "\"snapshot\":\"ab\\u009b\\u0000cd\",\"labels\":{\"k\\u009b\":\"v\"}}",
			    NULL, NULL },
			{ OP_FS_DELETE, NULL, NULL, NULL,
			    "path '/x\x1b[2J\xc2\x9b' \x1b]0;title\x07 not found" },
			{ OP_NONE, NULL, NULL, NULL, NULL },
		};

		fake_start(tab);
	}

	{
		static const struct run runs[] = {
			{ "sandbox ls", 0, "k\\x1b]0;title\\x07=v\\x1b[2J\\u009b\\nforged: line",
			    NULL },
			{ "sandbox info hx", 0, "labels: k\\x1b]0;title\\x07=v\\x1b[2J\\u009b"
			    "\\nforged: line\n", NULL },
			{ "kv keys hx", 0, "key\\x1b[2J\\u009b\\nnext\n", NULL },
			{ "kv keys hy", 0, "k\\x1b[2J\\nx\n", NULL },
			{ "sandbox history hy", 0, "t\\x1b[2J\\r\\nfake", NULL },
			{ "sandbox history hy", 0, "\\x1b]0;t\\x07", NULL },
			{ "sandbox import hz bad.db", EXIT_SANDQ, NULL, "t\\x1b[2J" },
			{ "fs put hx \"$(printf '/f" SH_C1 "x')\" /dev/null", EXIT_SANDQ, NULL,
			    "/f\\u009bx" },
			{ "dead ls", 0, "job\\x1b]0;title\\x07", NULL },
			{ "dead ls", 0, "worker died\\x1b[2J\\u009b\\x9b\\nforged: line", NULL },
			{ "dead show job\"$(printf '" SH_OSC "')\"", 0,
			    "  reason:   worker died\\x1b[2J\\u009b\\x9b\\nforged: line\n", NULL },
			{ "dead show job\"$(printf '" SH_OSC "')\"", 0, "attempt 1 on h\\x1b[2J: "
			    "r\\u009b\n", NULL },
			{ "dead show \"$(printf 'nope" SH_CSI "')\"", 1, NULL,
			    "no dead letter 'nope\\x1b[2J'" },
			{ "status", 0, "host\\x1b]0;title\\x07\\x9b", NULL },
			{ "status", 0, "t\\x1b[2J", NULL },
			{ "image ls", 0, "docker://r.io/x\\x1b]0;title\\x07", NULL },
			{ "image ls", 0, "sha256:\\u009bab\\n", NULL },
			{ "image ls", 0, "host\\x1b]0;title...", NULL },
			{ "batch status hb", 0, "running\\x1b[2J", NULL },
			{ "batch status hb", 0, "on h\\x1b]0;title\\x07", NULL },
			{ "batch status hb", 0, "ok\\u009b 1", NULL },
			{ "batch run cases.jsonl --id hr", 1, NULL,
			    "cases.jsonl:1: not JSON: " },
			{ "batch run cases.jsonl --id hr2", 1, NULL,
			    "regex, not '\\x1b]0;title\\x07'" },
			{ "--tenant " FAKE_TENANT " fs ls hx", 0, "n\\x1b[2J\n", NULL },
			{ "--tenant " FAKE_TENANT " fs ls hx", 0,
			    "l\\u009b\\nforged -> /t\\x1b]0;title\\x07\n", NULL },
			{ "--tenant " FAKE_TENANT " fs ls hx -R", 0, "/n\\x1b[2J\n", NULL },
			{ "--tenant " FAKE_TENANT " fs stat hx /l", 0, "type: symlink\\x1b[2J\n",
			    NULL },
			{ "--tenant " FAKE_TENANT " fs stat hx /l", 0,
			    "target: /t\\x1b]0;title\\x07\n", NULL },
			{ "--tenant " FAKE_TENANT " sandbox ls", 0, "s\\x1b[2J", NULL },
			{ "--tenant " FAKE_TENANT " sandbox ls", 0, "ab\\u009bcd", NULL },
			{ "--tenant " FAKE_TENANT " sandbox info hx", 0,
			    "snapshot: ab\\u009b\\x00cd\n", NULL },
			{ "--tenant " FAKE_TENANT " sandbox info hx", 0, "labels: k\\u009b=v\n",
			    NULL },
			{ "--tenant " FAKE_TENANT " fs rm hx /x", EXIT_SANDQ, NULL,
			    "sandq: invalid: path '/x\\x1b[2J\\u009b' \\x1b]0;title\\x07 not "
			    "found\n" },
			{ "--tenant " FAKE_TENANT " fs get hx /l .", EXIT_SANDQ, NULL,
			    "refusing the name of '/l\\u009b'" },
		};

		run_all(runs, sizeof(runs) / sizeof(runs[0]));
	}
}

Test(cli_hostile, the_job_output_and_json_stay_exact)
{
	char *out, *err = NULL;
	json_t *j;

	/* A job's output is the program's, as docker logs and ssh pass it. */
	cr_assert_eq(sq(&out, &err, "sh 'printf \"a\\033[2Jb\\302\\233\"'"), 0, "%s", err);
	cr_expect_str_eq(out, "a\x1b[2Jb\xc2\x9b");
	free(out);
	free(err);
	/* fs cat and kv get: the bytes asked for. */
	free(sq_ok("sandbox create hj"));
	{
		char p[512];
		FILE *f;

		snprintf(p, sizeof(p), "%s/f.in", H.dir);
		f = fopen(p, "w");
		cr_assert_not_null(f);
		fputs("x\x1b[2J", f);
		fclose(f);
	}
	free(sq_ok("fs put hj /f.txt f.in"));
	out = sq_ok("fs cat hj /f.txt");
	cr_expect_not_null(strchr(out, '\x1b'), "%s", out);
	free(out);
	/* --json: the exact text, JSON-escaped. */
	free(sq_ok("kv set hj \"$(printf 'k\\033[2J')\" 1"));
	out = sq_ok("kv keys hj --json");
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "%s", out);
	cr_expect_str_eq(json_string_value(json_array_get(j, 0)), "k\x1b[2J");
	json_decref(j);
	free(out);
}

/*** Exports ***/

/* True if something (even a dangling symlink) is at path. */
static bool
exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* readlink() into buf, "" if it is no symlink. */
static const char *
link_of(const char *path, char *buf, size_t size)
{
	ssize_t n = readlink(path, buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* Every name below dir (find, sorted, one per line, relative; owned). */
static char *
tree_in(const char *dir)
{
	char cmd[600], *out = NULL;

	snprintf(cmd, sizeof(cmd), "cd '%s' && find . -mindepth 1 | LC_ALL=C sort", dir);
	cr_assert_eq(harness_run(cmd, &out), 0);
	return out;
}

/*
 * Sandbox ID: /d holding a file, links that stay inside (in -> f,
 * sub/up -> ../f, loopy -> sub/../in), links that leave (abs -> /root/x,
 * tmp -> an absolute path of the test's own, up3 -> ../../.., c0 -> c1 ->
 * sub/c2 -> ../../<outside>: a chain that climbs out) and a folder sub.
 * outside receives the path those names point to.
 */
static void
make_link_sandbox(const char *id, char outside[300])
{
	char *out;

	snprintf(outside, 300, "%s/outside", H.dir);
	cr_assert_eq(mkdir(outside, 0755), 0);
	free(sq_ok("sandbox create %s", id));
	out = sq_ok("sh --sandbox %s 'mkdir -p d/sub && echo f > d/f && "
	    "ln -s f d/in && ln -s ../f d/sub/up && ln -s sub/../in d/loopy && "
	    "ln -s /root/x d/abs && ln -s %s/y d/tmp && ln -s ../../.. d/up3 && "
	    "ln -s c1 d/c0 && ln -s sub/c2 d/c1 && ln -s ../../outside/z d/sub/c2'",
	    id, outside);
	cr_expect_str_eq(out, "");
	free(out);
}

Test(cli_hostile, fs_get_leaves_out_links_that_lead_outside_the_copy)
{
	char outside[300], p[600], l[600], *err = NULL, *out = NULL, *s;
	json_t *j;
	int st;

	make_link_sandbox("lk", outside);
	cr_assert_eq(mkdir(strcat(strcpy(p, H.dir), "/get"), 0755), 0);
	st = sq(&out, &err, "fs get lk /d get --json");
	cr_assert_eq(st, 0, "%s", err);
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "%s", out);
	cr_expect_eq(json_integer_value(json_object_get(j, "files")), 1);
	cr_expect_eq(json_integer_value(json_object_get(j, "symlinks")), 3, "%s", out);
	cr_expect_eq(json_integer_value(json_object_get(j, "symlinks_skipped")), 6, "%s",
	    out);
	cr_expect_eq(json_array_size(json_object_get(j, "skipped")), 6, "%s", out);
	json_decref(j);
	/* What stays: the file, the folder, the links that resolve inside. */
	snprintf(p, sizeof(p), "%s/get", H.dir);
	s = tree_in(p);
	cr_expect_str_eq(s, "./d\n./d/f\n./d/in\n./d/loopy\n./d/sub\n./d/sub/up\n", "%s",
	    s);
	free(s);
	snprintf(p, sizeof(p), "%s/get/d/sub/up", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "../f");
	s = slurp(p);
	cr_expect_str_eq(s, "f\n", "the kept link does not resolve inside");
	free(s);
	/* The summary names each one left out, and counts them. */
	cr_expect_not_null(strstr(err, "left out get/d/abs -> /root/x: it leads outside "
	    "get/d\n"), "%s", err);
	cr_expect_not_null(strstr(err, "left out get/d/up3 -> ../../..:"), "%s", err);
	cr_expect_not_null(strstr(err, "left out get/d/c0 -> c1:"), "%s", err);
	cr_expect_not_null(strstr(err, "left out get/d/sub/c2 -> ../../outside/z:"), "%s",
	    err);
	cr_expect_not_null(strstr(err, "left out 6 symlinks leading outside get/d "
	    "(--keep-symlinks keeps them as stored)\n"), "%s", err);
	free(out);
	free(err);
	/* Nothing reached the folder beside it. */
	s = tree_in(outside);
	cr_expect_str_eq(s, "", "%s", s);
	free(s);

	/* The root: LOCALDIR is the copy; d/../../.. climbs out of it. */
	cr_assert_eq(mkdir(strcat(strcpy(p, H.dir), "/root"), 0755), 0);
	st = sq(&out, &err, "fs get lk / root");
	cr_expect_eq(st, 0, "%s", err);
	cr_expect_str_eq(out, "");
	snprintf(p, sizeof(p), "%s/root/d/up3", H.dir);
	cr_expect_not(exists(p), "d/up3 -> ../../.. was kept");
	/* Here the chain c0 -> c1 -> sub/c2 -> ../../outside/z ends in root/. */
	snprintf(p, sizeof(p), "%s/root/d/c0", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "c1");
	snprintf(p, sizeof(p), "%s/root/d/in", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "f");
	free(out);
	free(err);

	/* --keep-symlinks: every link as stored, each outside one named. */
	cr_assert_eq(mkdir(strcat(strcpy(p, H.dir), "/keep"), 0755), 0);
	st = sq(&out, &err, "fs get lk /d keep --keep-symlinks");
	cr_expect_eq(st, 0, "%s", err);
	snprintf(p, sizeof(p), "%s/keep/d/abs", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "/root/x");
	snprintf(p, sizeof(p), "%s/keep/d/up3", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "../../..");
	snprintf(p, sizeof(p), "%s/keep/d/sub/c2", H.dir);
	cr_expect_str_eq(link_of(p, l, sizeof(l)), "../../outside/z");
	cr_expect_not_null(strstr(err, "kept keep/d/abs -> /root/x, which leads outside "
	    "keep/d (--keep-symlinks)"), "%s", err);
	cr_expect_not_null(strstr(err, "--keep-symlinks: 6 symlinks lead outside keep/d"),
	    "%s", err);
	free(out);
	free(err);
	s = tree_in(outside);
	cr_expect_str_eq(s, "", "%s", s);
	free(s);

	/* A link alone: judged from LOCALDIR, where it lands. */
	cr_assert_eq(mkdir(strcat(strcpy(p, H.dir), "/one"), 0755), 0);
	st = sq(&out, &err, "fs get lk /d/tmp one");
	cr_expect_eq(st, 0, "%s", err);
	snprintf(p, sizeof(p), "%s/one/tmp", H.dir);
	cr_expect_not(exists(p), "one/tmp was kept");
	cr_expect_not_null(strstr(err, "left out 1 symlink leading outside one"), "%s", err);
	free(out);
	free(err);
}

Test(cli_hostile, fs_get_checks_kept_links_against_what_the_folder_held)
{
	char p[600], target[600], *out = NULL, *err = NULL;
	int st;

	/* LOCALDIR/p -> a folder outside it; the copy's x -> p/secret. */
	snprintf(p, sizeof(p), "%s/dest", H.dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(target, sizeof(target), "%s/secrets", H.dir);
	cr_assert_eq(mkdir(target, 0755), 0);
	snprintf(p, sizeof(p), "%s/dest/p", H.dir);
	cr_assert_eq(symlink(target, p), 0);
	free(sq_ok("sandbox create hk"));
	free(sq_ok("sh --sandbox hk 'ln -s p/secret x && echo a > y && ln -s y z'"));
	st = sq(&out, &err, "fs get hk / dest");
	cr_expect_eq(st, 0, "%s", err);
	snprintf(p, sizeof(p), "%s/dest/x", H.dir);
	cr_expect_not(exists(p), "x -> p/secret was kept");
	snprintf(p, sizeof(p), "%s/dest/z", H.dir);
	cr_expect(exists(p), "z -> y was dropped");
	cr_expect_not_null(strstr(err, "left out dest/x -> p/secret: through what dest "
	    "already held, it leads outside it"), "%s", err);
	free(out);
	free(err);
}

Test(cli_hostile, fs_get_never_writes_below_a_link_of_its_own_copy)
{
	static char target_json[1024];
	static struct fake tab[] = {
		{ OP_FS_LIST, NULL, target_json, NULL, NULL },
		{ OP_FS_READ, NULL, NULL, "pwned\n", NULL },
		{ OP_NONE, NULL, NULL, NULL, NULL },
	};
	char outside[300], p[600], *out = NULL, *err = NULL, *s;
	int st;

	snprintf(outside, sizeof(outside), "%s/outside", H.dir);
	cr_assert_eq(mkdir(outside, 0755), 0);
	/* a -> OUTSIDE, then a/x and a/sub/y: a listing no sandbox can hold. */
	snprintf(target_json, sizeof(target_json), "["
	    "{\"path\":\"/a\",\"type\":\"symlink\",\"target\":\"%s\",\"mode\":511},"
	    "{\"path\":\"/a/x\",\"type\":\"file\",\"mode\":420,\"size\":6},"
	    "{\"path\":\"/b\",\"type\":\"symlink\",\"target\":\"../outside\",\"mode\":511},"
	    "{\"path\":\"/b/y\",\"type\":\"file\",\"mode\":420,\"size\":6}]", outside);
	fake_start(tab);
	for (int keep = 0; keep < 2; keep++) {
		snprintf(p, sizeof(p), "%s/dest%d", H.dir, keep);
		cr_assert_eq(mkdir(p, 0755), 0);
		st = sq(&out, &err, "--tenant " FAKE_TENANT " fs get hx / dest%d %s", keep,
		    keep ? "--keep-symlinks" : "");
		cr_expect_eq(st, EXIT_SANDQ, "keep %d: exit %d; %s", keep, st, err);
		cr_expect_not_null(strstr(err, "refusing the entry '/a/x': it lies below the "
		    "symlink a"), "keep %d: %s", keep, err);
		free(out);
		free(err);
		s = tree_in(outside);
		cr_expect_str_eq(s, "", "keep %d: written outside: %s", keep, s);
		free(s);
	}
}

Test(cli_hostile, fs_get_refuses_hostile_names)
{
	static const char *const names[] = {
		"/..", "/a/../../x", "/a\\u0000b", "/a\\nb", "/a\\u001b[2J", "//x",
	};
	static char list_json[512];
	static struct fake tab[] = {
		{ OP_FS_LIST, NULL, list_json, NULL, NULL },
		{ OP_FS_READ, NULL, NULL, "pwned\n", NULL },
		{ OP_NONE, NULL, NULL, NULL, NULL },
	};
	char p[600], *out = NULL, *err = NULL, *s;

	/* One fake server, one answer per run: the listing changes under it. */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(list_json, sizeof(list_json), "[{\"path\":\"%s\",\"type\":\"file\","
		    "\"mode\":420,\"size\":6}]", names[i]);
		fake_start(tab);
		snprintf(p, sizeof(p), "%s/d%zu", H.dir, i);
		cr_assert_eq(mkdir(p, 0755), 0);
		cr_expect_eq(sq(&out, &err, "--tenant " FAKE_TENANT " fs get hx / d%zu", i),
		    EXIT_SANDQ, "%s: %s", names[i], err);
		expect_safe(names[i], out, err);
		cr_expect_not_null(strstr(err, "refusing"), "%s: %s", names[i], err);
		free(out);
		free(err);
		s = tree_in(p);
		cr_expect_str_eq(s, "", "%s: %s", names[i], s);
		free(s);
		kill(fake_pid, SIGKILL);
		waitpid(fake_pid, NULL, 0);
		fake_pid = -1;
	}
	s = tree_in(H.dir);
	cr_expect_null(strstr(s, "./x\n"), "%s", s);
	free(s);
}
