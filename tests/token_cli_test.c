/*
 * token_cli_test.c - `sandq tenant token add|ls|rm` (cli/cli_token.c)
 * against a private redis-server (harness_redis_start(); no sandqd): a
 * token is printed once and only its SHA-256 is kept, ls and rm find
 * tokens by tenant and name and never show one, names are unique per
 * tenant, `tenant rm` takes the tenant's tokens with it, and a damaged
 * entry in PREFIX:tokens is listed as damaged and escaped, not trusted.
 *
 * What is in Redis is looked at (and damaged) through the test's own
 * hiredis connection.
 */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../queue/token.h"
#include "harness.h"

#define KEY "sandq:tokens"

static struct harness H;
static redisContext *raw;

static void
setup(void)
{
	harness_redis_start(&H);
	raw = redisConnect("127.0.0.1", H.port);
	cr_assert(raw != NULL && raw->err == 0);
}

static void
teardown(void)
{
	if (raw != NULL)
		redisFree(raw);
	harness_stop(&H);
}

TestSuite(token_cli, .init = setup, .fini = teardown, .timeout = 60);

/*** Helpers ***/

/*
 * Runs `sandq --redis URL ARGS` (formatted; shell syntax): its exit
 * status, stdout in *out and, with err, its stderr in *err.
 */
static int __attribute__((format(printf, 3, 4)))
sq(char **out, char **err, const char *fmt, ...)
{
	char args[2048], cmd[4096], errpath[600];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(errpath, sizeof(errpath), "%s/sq.err", H.dir);
	snprintf(cmd, sizeof(cmd), "%s/sandq --redis %s %s 2>%s", harness_build_dir(),
	    H.url, args, errpath);
	st = harness_run(cmd, out);
	if (err) {
		snprintf(cmd, sizeof(cmd), "cat %s", errpath);
		harness_run(cmd, err);
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

/* `sandq tenant add NAME`, asserting success. */
static void
tenant_add(const char *name)
{
	char *out = NULL;

	cr_assert_eq(sq(&out, NULL, "tenant add %s", name), 0, "tenant add %s", name);
	free(out);
}

/* `sandq tenant token add ARGS`, asserting success; the token into tok. */
static void
token_add(const char *args, char tok[TOKEN_LEN + 1])
{
	char *out = NULL, line[256];
	int st = sq(&out, NULL, "tenant token add %s", args);

	cr_assert_eq(st, 0, "token add %s: %d: %s", args, st, out);
	last_line(out, line, sizeof(line));
	free(out);
	cr_assert(token_shape_ok(line, strlen(line)), "last line: %s", line);
	snprintf(tok, TOKEN_LEN + 1, "%s", line);
}

/* HGETALL sandq:tokens (the caller frees it). */
static redisReply *
hgetall(void)
{
	redisReply *r = redisCommand(raw, "HGETALL %s", KEY);

	cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY);
	return r;
}

/* The number of fields of sandq:tokens. */
static long long
hlen(void)
{
	redisReply *r = redisCommand(raw, "HLEN %s", KEY);
	long long n;

	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
	n = r->integer;
	freeReplyObject(r);
	return n;
}

/* Whether the hash has tok's hash as a field. */
static bool
has_token(const char *tok)
{
	char h[TOKEN_HASH_HEX + 1];
	redisReply *r;
	bool yes;

	token_hash_hex(tok, strlen(tok), h);
	r = redisCommand(raw, "HEXISTS %s %s", KEY, h);
	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
	yes = r->integer == 1;
	freeReplyObject(r);
	return yes;
}

/*** Tests ***/

Test(token_cli, add_prints_the_token_once_and_keeps_only_its_hash)
{
	char tok[TOKEN_LEN + 1], h[TOKEN_HASH_HEX + 1], *out = NULL, *err = NULL;
	struct token_record rec;
	struct err e = { 0 };
	redisReply *r;
	const char *p;
	int st;

	tenant_add("acme");
	st = sq(&out, &err, "tenant token add acme --name ci");
	cr_assert_eq(st, 0, "%s%s", out, err);
	{
		char line[256];

		last_line(out, line, sizeof(line));
		cr_assert(token_shape_ok(line, strlen(line)), "last line: %s", line);
		snprintf(tok, sizeof(tok), "%s", line);
	}
	p = strstr(out, tok);
	cr_expect(p != NULL && strstr(p + 1, tok) == NULL, "printed once: %s", out);
	cr_expect(strstr(err, tok) == NULL, "not on stderr");
	cr_expect(strstr(err, "cannot be shown again") != NULL, "the note: %s", err);
	token_hash_hex(tok, strlen(tok), h);
	r = hgetall();
	cr_assert_eq(r->elements, 2, "one token");
	cr_expect_str_eq(r->element[0]->str, h, "the field is the token's SHA-256");
	for (size_t i = 0; i < r->elements; i++)
		cr_expect(strstr(r->element[i]->str, tok + 4) == NULL,
		    "no token text in Redis: %s", r->element[i]->str);
	cr_assert_eq(token_record_decode(r->element[1]->str, r->element[1]->len, &rec,
	    &e), 0, "%s", e.msg);
	cr_expect_str_eq(rec.tenant, "acme");
	cr_expect_str_eq(rec.name, "ci");
	cr_expect(!rec.admin);
	cr_expect_gt(rec.created_at, 1700000000000LL);
	freeReplyObject(r);
	free(out);
	free(err);
	/* Without --name: a default name, and another one for the next. */
	token_add("acme", tok);
	token_add("acme", tok);
	cr_expect_eq(hlen(), 3);
}

Test(token_cli, a_taken_name_an_unknown_tenant_and_bad_names_are_refused)
{
	char tok[TOKEN_LEN + 1], *out = NULL, *err = NULL;

	tenant_add("acme");
	tenant_add("bob");
	token_add("acme --name ci", tok);
	cr_expect_eq(sq(&out, &err, "tenant token add acme --name ci"), 125);
	cr_expect(strstr(err, "exists") != NULL, "%s", err);
	cr_expect(strstr(out, "sqt_") == NULL, "no token printed: %s", out);
	free(out);
	free(err);
	/* The same name for another tenant, and for an admin token, is fine. */
	token_add("bob --name ci", tok);
	token_add("--admin --name ci", tok);
	cr_expect_eq(sq(&out, &err, "tenant token add nobody"), 125);
	cr_expect(strstr(err, "no tenant 'nobody'") != NULL, "%s", err);
	free(out);
	free(err);
	cr_expect_eq(sq(&out, NULL, "tenant token add acme --name 'a/b'"), 125);
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant token add 'a:b'"), 125);
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant token add acme --admin"), 125,
	    "an admin token names no tenant");
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant token frob"), 125);
	free(out);
	cr_expect_eq(hlen(), 3, "nothing added by a refusal");
}

Test(token_cli, ls_lists_names_tenants_and_hash_prefixes_never_a_token)
{
	char t1[TOKEN_LEN + 1], t2[TOKEN_LEN + 1], t3[TOKEN_LEN + 1], h[TOKEN_HASH_HEX + 1];
	char pre[16], *out = NULL;

	tenant_add("acme");
	tenant_add("bob");
	token_add("acme --name ci", t1);
	token_add("bob --name deploy", t2);
	token_add("--admin --name ops", t3);
	cr_assert_eq(sq(&out, NULL, "tenant token ls"), 0, "%s", out);
	cr_expect(strstr(out, "ci") && strstr(out, "deploy") && strstr(out, "ops") &&
	    strstr(out, "acme") && strstr(out, "bob") && strstr(out, "(admin)"), "%s", out);
	token_hash_hex(t2, strlen(t2), h);
	snprintf(pre, sizeof(pre), "%.12s", h);
	cr_expect(strstr(out, pre) != NULL, "the hash's first 12 digits: %s", out);
	cr_expect(strstr(out, h) == NULL, "not the whole hash");
	cr_expect(strstr(out, "sqt_") == NULL, "no token: %s", out);
	free(out);
	cr_assert_eq(sq(&out, NULL, "tenant token ls acme"), 0);
	cr_expect(strstr(out, "ci") && !strstr(out, "deploy") && !strstr(out, "ops"),
	    "%s", out);
	free(out);
	cr_assert_eq(sq(&out, NULL, "tenant token ls --admin"), 0);
	cr_expect(strstr(out, "ops") && !strstr(out, "deploy") && !strstr(out, " ci "),
	    "%s", out);
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant token ls acme --admin"), 125);
	free(out);
}

Test(token_cli, rm_removes_one_token_and_says_when_there_is_none)
{
	char t1[TOKEN_LEN + 1], t2[TOKEN_LEN + 1], t3[TOKEN_LEN + 1], *out = NULL;

	tenant_add("acme");
	tenant_add("bob");
	token_add("acme --name ci", t1);
	token_add("bob --name ci", t2);
	token_add("--admin --name ci", t3);
	cr_expect_eq(sq(&out, NULL, "tenant token rm acme ci"), 0, "%s", out);
	free(out);
	cr_expect(!has_token(t1));
	cr_expect(has_token(t2) && has_token(t3), "the other tenant's and the admin's stay");
	cr_expect_eq(sq(&out, NULL, "tenant token rm acme ci"), 1, "gone already");
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant token rm acme nothing"), 1);
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant token rm --admin ci"), 0);
	free(out);
	cr_expect(!has_token(t3) && has_token(t2));
	/* Rotation: a new token, then the old one removed. */
	token_add("bob --name ci-2", t1);
	cr_expect_eq(sq(&out, NULL, "tenant token rm bob ci"), 0);
	free(out);
	cr_expect(has_token(t1) && !has_token(t2));
}

Test(token_cli, tenant_rm_removes_the_tenants_tokens)
{
	char t1[TOKEN_LEN + 1], t2[TOKEN_LEN + 1], t3[TOKEN_LEN + 1], t4[TOKEN_LEN + 1];
	char *out = NULL;

	tenant_add("acme");
	tenant_add("bob");
	token_add("acme --name ci", t1);
	token_add("acme --name deploy", t2);
	token_add("bob --name ci", t3);
	token_add("--admin --name ci", t4);
	cr_assert_eq(sq(&out, NULL, "tenant rm acme"), 0, "%s", out);
	cr_expect(strstr(out, "2 API tokens deleted") != NULL, "%s", out);
	free(out);
	cr_expect(!has_token(t1) && !has_token(t2));
	cr_expect(has_token(t3) && has_token(t4));
	/* A tenant without tokens is removed as before. */
	cr_assert_eq(sq(&out, NULL, "tenant rm bob"), 0, "%s", out);
	free(out);
	cr_expect(!has_token(t3) && has_token(t4));
	cr_expect_eq(sq(&out, NULL, "tenant rm bob"), 125, "no tenant");
	free(out);
}

Test(token_cli, a_damaged_entry_is_listed_as_damaged_and_escaped)
{
	char tok[TOKEN_LEN + 1], *out = NULL, *err = NULL;
	const char *hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
	redisReply *r;

	tenant_add("acme");
	token_add("acme --name ci", tok);
	r = redisCommand(raw, "HSET %s %s %s", KEY, "bad\x1b]0;owned\x07", "{}");
	freeReplyObject(r);
	r = redisCommand(raw, "HSET %s %s %s", KEY, hex, "not json \x1b[2J");
	freeReplyObject(r);
	r = redisCommand(raw, "HSET %s %s %s", KEY, "ffff",
	    "{\"tenant\":\"acme\",\"name\":\"x\x1b[31m\",\"admin\":false,\"created_at\":1}");
	freeReplyObject(r);
	cr_expect_eq(sq(&out, &err, "tenant token ls"), 125);
	cr_expect(strstr(out, "ci") != NULL, "the good one is listed: %s", out);
	cr_expect(strstr(out, "damaged") != NULL, "%s", out);
	cr_expect(strchr(out, '\x1b') == NULL && strchr(err, '\x1b') == NULL,
	    "escaped: %s %s", out, err);
	cr_expect(strstr(out, "\\x1b") != NULL, "shown escaped: %s", out);
	free(out);
	free(err);
	cr_expect_eq(sq(&out, NULL, "tenant token ls --json"), 125);
	{
		json_error_t je;
		json_t *j = json_loads(out, 0, &je);
		size_t damaged = 0, i;
		json_t *o;

		cr_assert(json_is_array(j), "%s", out);
		cr_expect_eq(json_array_size(j), 4);
		json_array_foreach(j, i, o)
			damaged += json_object_get(o, "damaged") != NULL;
		cr_expect_eq(damaged, 3);
		json_decref(j);
	}
	free(out);
	/* rm and tenant rm still work beside them, and leave them be. */
	cr_expect_eq(sq(&out, NULL, "tenant token rm acme ci"), 0);
	free(out);
	cr_expect_eq(sq(&out, NULL, "tenant rm acme"), 0);
	free(out);
	cr_expect_eq(hlen(), 3);
}

Test(token_cli, json_forms)
{
	char *out = NULL, h[TOKEN_HASH_HEX + 1];
	json_error_t je;
	json_t *j, *o;
	const char *tok;

	tenant_add("acme");
	cr_assert_eq(sq(&out, NULL, "tenant token add acme --name ci --json"), 0);
	j = json_loads(out, 0, &je);
	cr_assert(json_is_object(j), "%s", out);
	cr_expect_str_eq(json_string_value(json_object_get(j, "tenant")), "acme");
	cr_expect_str_eq(json_string_value(json_object_get(j, "name")), "ci");
	cr_expect(json_is_false(json_object_get(j, "admin")));
	tok = json_string_value(json_object_get(j, "token"));
	cr_assert(tok != NULL && token_shape_ok(tok, strlen(tok)), "%s", out);
	cr_expect(has_token(tok));
	token_hash_hex(tok, strlen(tok), h);
	cr_expect(strncmp(json_string_value(json_object_get(j, "hash_prefix")), h, 12) == 0);
	json_decref(j);
	free(out);
	cr_assert_eq(sq(&out, NULL, "--json tenant token add --admin"), 0);
	j = json_loads(out, 0, &je);
	cr_assert(json_is_object(j), "%s", out);
	cr_expect(json_is_null(json_object_get(j, "tenant")));
	cr_expect(json_is_true(json_object_get(j, "admin")));
	json_decref(j);
	free(out);
	cr_assert_eq(sq(&out, NULL, "tenant token ls --json"), 0);
	j = json_loads(out, 0, &je);
	cr_assert(json_is_array(j) && json_array_size(j) == 2, "%s", out);
	o = json_array_get(j, 1);
	cr_expect_str_eq(json_string_value(json_object_get(o, "tenant")), "acme");
	cr_expect_str_eq(json_string_value(json_object_get(o, "name")), "ci");
	cr_expect(json_is_integer(json_object_get(o, "created_at")));
	cr_expect(json_is_string(json_object_get(o, "created")));
	cr_expect_eq(strlen(json_string_value(json_object_get(o, "hash_prefix"))), 12);
	cr_expect(json_object_get(o, "token") == NULL);
	cr_expect(strstr(out, "sqt_") == NULL);
	json_decref(j);
	free(out);
}
