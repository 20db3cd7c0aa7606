/*
 * acl_test.c - tenant credentials confine, against a real redis-server and
 * sandqd: `sandq tenant add` makes users that can submit to and read only
 * their own keys, the CLI works with them end to end, and set, ls, rm and
 * --rotate-password do what docs/tenants.md says.
 *
 * Each test starts its own redis-server and sandqd (tests/harness.c)
 * serving the tenants default, a and b. The tenant's own connection is made
 * with hiredis directly, so every refusal is checked as Redis sends it
 * (NOPERM), not as a client library reports it. Needs root, like every
 * test that runs sandqd.
 */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../proto/url.h"
#include "harness.h"

static struct harness H;

static void
setup(void)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	harness_start(&H, 2, extra);
}

static void
teardown(void)
{
	harness_stop(&H);
}

TestSuite(acl, .init = setup, .fini = teardown, .timeout = 180);

/*
 * Runs `sandq ARGS` (formatted; shell syntax) and returns its exit status,
 * stdout in *out and, with err, stdout and stderr together in *err.
 */
static int __attribute__((format(printf, 3, 4)))
sq(char **out, char **err, const char *fmt, ...)
{
	char args[4096], cmd[4600], *both = NULL;
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/sandq %s 2>/dev/null", harness_build_dir(), args);
	st = harness_run(cmd, out);
	if (err) {
		snprintf(cmd, sizeof(cmd), "%s/sandq %s 2>&1", harness_build_dir(), args);
		harness_run(cmd, &both);
		*err = both;
	}
	return st;
}

/* The last line of s, into buf. */
static void
last_line(const char *s, char *buf, size_t size)
{
	size_t n = strlen(s);
	const char *p;

	while (n > 0 && s[n - 1] == '\n')
		n--;
	p = s + n;
	while (p > s && p[-1] != '\n')
		p--;
	snprintf(buf, size, "%.*s", (int)(s + n - p), p);
}

/* `sandq tenant add NAME ARGS`, asserting success; the URL into url. */
static void
add(const char *name, const char *args, char *url, size_t size)
{
	char *out = NULL;
	int st = sq(&out, NULL, "--redis %s tenant add %s %s", H.url, name, args);

	cr_assert_eq(st, 0, "tenant add %s: %d: %s", name, st, out);
	last_line(out, url, size);
	free(out);
	cr_assert(strncmp(url, "redis://sandq-", 14) == 0, "last line: %s", url);
}

/* A hiredis connection as the URL's user; NULL if AUTH is refused. */
static redisContext *
connect_as(const char *url)
{
	struct redis_url u;
	struct err e = { 0 };
	redisContext *c;
	redisReply *r;
	bool ok;

	cr_assert_eq(redis_url_parse(url, &u, &e), 0, "%s", e.msg);
	c = redisConnect(u.host, u.port);
	cr_assert(c != NULL && c->err == 0, "connect %s", url);
	r = redisCommand(c, "AUTH %s %s", u.user, u.pass);
	ok = r != NULL && r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
	if (!ok) {
		redisFree(c);
		return NULL;
	}
	return c;
}

/* Runs a command (printf-style, hiredis format) and returns the reply. */
static redisReply *
cmdf(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	cr_assert_not_null(r, "connection failed: %s", c->errstr);
	return r;
}

/* The command is refused by the ACL. */
#define expect_noperm(c, ...) do { \
	redisReply *r_ = cmdf((c), __VA_ARGS__); \
	cr_expect(r_->type == REDIS_REPLY_ERROR && strncmp(r_->str, "NOPERM", 6) == 0, \
	    "%s was not refused: reply type %d %s", #__VA_ARGS__, r_->type, \
	    r_->type == REDIS_REPLY_ERROR ? r_->str : ""); \
	freeReplyObject(r_); \
} while (0)

/* The command is allowed (its reply is not an error). */
#define expect_allowed(c, ...) do { \
	redisReply *r_ = cmdf((c), __VA_ARGS__); \
	cr_expect(r_->type != REDIS_REPLY_ERROR, "%s was refused: %s", #__VA_ARGS__, \
	    r_->type == REDIS_REPLY_ERROR ? r_->str : ""); \
	freeReplyObject(r_); \
} while (0)

/* A value read with the harness's admin (default) user. */
static long long
admin_int(const char *fmt, ...)
{
	redisContext *c = redisConnect("127.0.0.1", H.port);
	redisReply *r;
	va_list ap;
	long long v = -1;

	cr_assert(c != NULL && c->err == 0);
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	cr_assert_not_null(r);
	if (r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	freeReplyObject(r);
	redisFree(c);
	return v;
}

Test(acl, a_tenant_reaches_only_its_own_keys)
{
	char url_a[512], url_b[512];
	redisContext *a;

	add("a", "--weight 2", url_a, sizeof(url_a));
	add("b", "", url_b, sizeof(url_b));
	cr_assert_not_null(a = connect_as(url_a), "A's URL does not log in");

	/* Another tenant's keys: results, waiting, streams, submitting. */
	expect_noperm(a, "GET %s", "sandq:{b}:res:x");
	expect_noperm(a, "BLPOP %s 0.01", "sandq:{b}:done:x");
	expect_noperm(a, "XADD %s * job x", "sandq:{b}:jobs");
	expect_noperm(a, "XRANGE %s - +", "sandq:{b}:jobs");
	expect_noperm(a, "XREAD STREAMS %s %s 0 0", "sandq:{a}:jobs", "sandq:{b}:audit");

	/* Anything that lists keys or reveals server state. */
	expect_noperm(a, "KEYS *");
	expect_noperm(a, "SCAN 0");
	expect_noperm(a, "RANDOMKEY");
	expect_noperm(a, "DBSIZE");
	expect_noperm(a, "INFO keyspace");
	expect_noperm(a, "CLIENT LIST");
	expect_noperm(a, "PUBSUB CHANNELS");
	expect_noperm(a, "ACL WHOAMI");
	expect_noperm(a, "ACL LOG");
	expect_noperm(a, "CONFIG GET *");
	expect_noperm(a, "OBJECT ENCODING %s", "sandq:{a}:jobs");
	expect_noperm(a, "MEMORY USAGE %s", "sandq:{a}:jobs");
	expect_noperm(a, "EVAL %s 0", "return 1");
	expect_noperm(a, "FUNCTION LIST");
	expect_noperm(a, "SELECT 1");

	/* The tenant list, the counter and its own settings (its quotas). */
	expect_noperm(a, "SMEMBERS %s", "sandq:tenants");
	expect_noperm(a, "SISMEMBER %s b", "sandq:tenants");
	expect_noperm(a, "GET %s", "sandq:tenants:gen");
	expect_noperm(a, "GET %s", "sandq:tenant:a");
	expect_noperm(a, "HGETALL %s", "sandq:tenant:a");
	expect_noperm(a, "HSET %s weight 1000", "sandq:tenant:a");
	expect_noperm(a, "SET %s x", "sandq:tenant:a");
	expect_noperm(a, "DEL %s", "sandq:tenant:a");

	/* Its own keys: only what the client does, where it does it. */
	expect_allowed(a, "XADD %s * job %s", "sandq:{a}:jobs", "not-msgpack");
	expect_allowed(a, "GET %s", "sandq:{a}:res:x");
	expect_allowed(a, "BLPOP %s 0.01", "sandq:{a}:done:x");
	expect_allowed(a, "XRANGE %s - +", "sandq:{a}:jobs");
	expect_allowed(a, "XLEN %s", "sandq:{a}:jobs");
	expect_allowed(a, "XREAD COUNT 1 STREAMS %s 0", "sandq:{a}:jobs");
	expect_allowed(a, "PING");
	expect_noperm(a, "XADD %s * forged 1", "sandq:{a}:audit");
	expect_noperm(a, "XADD %s * forged 1", "sandq:{a}:done:x");
	expect_noperm(a, "SET %s forged", "sandq:{a}:res:x");
	expect_noperm(a, "DEL %s", "sandq:{a}:jobs");
	expect_noperm(a, "XTRIM %s MAXLEN 0", "sandq:{a}:jobs");
	expect_noperm(a, "XGROUP DESTROY %s sandq", "sandq:{a}:jobs");
	expect_noperm(a, "SUBSCRIBE %s", "sandq:{a}:x");
	redisFree(a);
}

Test(acl, the_cli_runs_jobs_with_a_tenants_url_and_no_other_tenants)
{
	char url_a[512], url_b[512], *out = NULL, *err = NULL;
	int st;

	add("a", "", url_a, sizeof(url_a));
	add("b", "", url_b, sizeof(url_b));
	st = sq(&out, NULL, "--redis '%s' --tenant a sh 'echo hi'", url_a);
	cr_expect_eq(st, 0);
	cr_expect_str_eq(out, "hi\n");
	free(out);

	st = sq(&out, &err, "--redis '%s' --tenant b sh 'echo hi'", url_a);
	cr_expect_eq(st, 125);
	cr_expect_str_eq(out, "");
	cr_expect_not_null(strstr(err, "NOPERM"), "%s", err);
	free(out);
	free(err);

	/* B's sandbox: invisible from A's queue, unreachable on B's. */
	st = sq(&out, &err, "--redis '%s' --tenant b sandbox create sb", url_b);
	cr_assert_eq(st, 0, "%s", err);
	free(out);
	free(err);
	st = sq(&out, &err, "--redis '%s' --tenant a sandbox info sb", url_a);
	cr_expect_eq(st, 125, "A sees B's sandbox: %s", err);
	free(out);
	free(err);
	st = sq(&out, &err, "--redis '%s' --tenant b sandbox info sb", url_a);
	cr_expect_eq(st, 125);
	cr_expect_not_null(strstr(err, "NOPERM"), "%s", err);
	free(out);
	free(err);
	st = sq(&out, &err, "--redis '%s' --tenant b sandbox info sb", url_b);
	cr_expect_eq(st, 0, "B cannot see its own sandbox: %s", err);
	free(out);
	free(err);
}

static void
pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

Test(acl, a_job_on_a_tenants_stream_cannot_claim_another_tenant)
{
	char url_a[512], err[256];
	struct sandq *c;
	struct sandq_result *r = NULL;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	add("a", "", url_a, sizeof(url_a));
	cr_assert_not_null(c = sandq_connect(url_a, "a", err, sizeof(err)), "%s", err);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 6);
	pack_str(&pk, "v");
	msgpack_pack_int(&pk, 1);
	pack_str(&pk, "id");
	pack_str(&pk, "j-claims-b");
	pack_str(&pk, "op");
	pack_str(&pk, "sh");
	pack_str(&pk, "script");
	pack_str(&pk, "echo hi");
	pack_str(&pk, "tenant");
	pack_str(&pk, "b");
	pack_str(&pk, "sandbox");
	pack_str(&pk, "sb");
	cr_assert_eq(sandq_submit_raw(c, sb.data, sb.size), 0, "%s", sandq_last_error(c));
	msgpack_sbuffer_destroy(&sb);
	cr_assert_eq(sandq_wait(c, "j-claims-b", 60000, &r), 0, "%s", sandq_last_error(c));
	cr_expect_str_eq(r->status, "rejected");
	cr_expect_not_null(r->error_message);
	cr_expect_not_null(strstr(r->error_message, "field 'tenant'"), "%s",
	    r->error_message);
	sandq_result_free(r);
	sandq_close(c);
}

/* The member of `tenant ls --json`'s tenants named name, or NULL. */
static json_t *
ls_find(json_t *ls, const char *name)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(ls, "tenants"), i, v)
		if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0)
			return v;
	return NULL;
}

static json_t *
ls_json(void)
{
	char *out = NULL;
	json_t *j;

	cr_assert_eq(sq(&out, NULL, "--redis %s tenant ls --json", H.url), 0);
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "not JSON: %s", out);
	free(out);
	return j;
}

Test(acl, ls_set_rm_and_rotation_change_what_they_say)
{
	char url_a[512], url_b[512], url_a2[512], *out = NULL, *err = NULL;
	redisContext *b, *a;
	json_t *ls, *ta;
	long long gen;

	add("a", "--weight 2 --max-running 4 --rate 1.5 --net none --ceiling "
	    "memory_bytes=1G --deny '*curl *'", url_a, sizeof(url_a));
	add("b", "", url_b, sizeof(url_b));
	cr_expect_eq(sq(&out, &err, "--redis %s tenant add a", H.url), 125,
	    "an existing tenant was added again");
	cr_expect_not_null(strstr(err, "exists"), "%s", err);
	free(out);
	free(err);

	ls = ls_json();
	cr_assert_not_null(ta = ls_find(ls, "a"));
	cr_expect_not_null(ls_find(ls, "b"));
	cr_expect_eq(json_integer_value(json_object_get(ta, "weight")), 2);
	cr_expect_eq(json_integer_value(json_object_get(ta, "max_running")), 4);
	cr_expect(json_real_value(json_object_get(ta, "rate")) == 1.5);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(ta, "ceiling"),
	    "memory_bytes")), 1 << 30);
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(ta, "net"), 0)),
	    "none");
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(ta, "deny"), 0)),
	    "*curl *");
	/* "default" is served by the config alone. */
	cr_expect_eq(json_array_size(json_object_get(ls, "without_settings")), 0);
	gen = json_integer_value(json_object_get(ls, "gen"));
	cr_expect_eq(gen, admin_int("GET %s", "sandq:tenants:gen"));
	json_decref(ls);

	/* set changes one setting, keeps the rest, bumps the counter. */
	cr_expect_eq(sq(&out, NULL, "--redis %s tenant set a --weight 3", H.url), 0);
	free(out);
	cr_expect_eq(admin_int("GET %s", "sandq:tenants:gen"), gen + 1);
	cr_expect_eq(admin_int("HGET %s weight", "sandq:tenant:a"), 3);
	cr_expect_eq(admin_int("HGET %s max_running", "sandq:tenant:a"), 4);
	cr_expect_eq(sq(&out, &err, "--redis %s tenant set a --weight 0", H.url), 125);
	cr_expect_not_null(strstr(err, "field 'weight'"), "%s", err);
	free(out);
	free(err);
	cr_expect_eq(admin_int("GET %s", "sandq:tenants:gen"), gen + 1,
	    "a refused set changed the counter");

	/* rm: the user goes (and its open session with it), then the record. */
	cr_assert_not_null(b = connect_as(url_b));
	cr_expect_eq(sq(&out, NULL, "--redis %s tenant rm b", H.url), 0);
	free(out);
	cr_expect_null(redisCommand(b, "PING"), "B's open session survived rm");
	redisFree(b);
	cr_expect_null(connect_as(url_b), "B's URL still logs in after rm");
	cr_expect_eq(admin_int("SISMEMBER %s b", "sandq:tenants"), 0);
	cr_expect_eq(admin_int("EXISTS %s", "sandq:tenant:b"), 0);
	cr_expect_eq(sq(&out, NULL, "--redis %s tenant rm b", H.url), 125);
	free(out);
	ls = ls_json();
	cr_expect_null(ls_find(ls, "b"));
	cr_expect_not_null(ls_find(ls, "a"));
	json_decref(ls);

	/* Rotation: the old URL and its sessions stop, the new one works. */
	cr_assert_not_null(a = connect_as(url_a));
	cr_assert_eq(sq(&out, NULL, "--redis %s tenant set a --rotate-password",
	    H.url), 0);
	last_line(out, url_a2, sizeof(url_a2));
	free(out);
	cr_expect_null(redisCommand(a, "PING"), "A's old session survived rotation");
	redisFree(a);
	cr_expect_null(connect_as(url_a), "the old password still logs in");
	cr_assert_not_null(a = connect_as(url_a2), "the new URL does not log in");
	expect_allowed(a, "GET %s", "sandq:{a}:res:x");
	redisFree(a);
	cr_expect_eq(sq(&out, NULL, "--redis '%s' --tenant a sh 'echo rotated'", url_a2), 0);
	cr_expect_str_eq(out, "rotated\n");
	free(out);
}

Test(acl, admin_commands_refuse_bad_input_and_tenant_credentials)
{
	char url_a[512], *out = NULL, *err = NULL;

	add("a", "", url_a, sizeof(url_a));
	cr_expect_eq(sq(&out, &err, "--redis %s tenant add 'a:b'", H.url), 125);
	cr_expect_not_null(strstr(err, "tenant name"), "%s", err);
	free(out);
	free(err);
	cr_expect_eq(sq(&out, &err, "--redis %s tenant add c --weight 1001", H.url), 125);
	free(out);
	free(err);
	cr_expect_eq(admin_int("EXISTS %s", "sandq:tenant:c"), 0);
	/* A tenant's URL cannot administer tenants, not even itself. */
	cr_expect_eq(sq(&out, &err, "--redis '%s' tenant set a --weight 1000", url_a), 125);
	cr_expect_not_null(strstr(err, "NOPERM"), "%s", err);
	free(out);
	free(err);
	cr_expect_eq(sq(&out, &err, "--redis '%s' tenant add z", url_a), 125);
	free(out);
	free(err);
	cr_expect_eq(admin_int("HGET %s weight", "sandq:tenant:a"), 1);
	cr_expect_eq(admin_int("EXISTS %s", "sandq:tenant:z"), 0);
}
