/*
 * cli_token.c - `sandq tenant token add|ls|rm`: the HTTP gateway's API
 * tokens (queue/token.h, docs/tenants.md "API tokens"), run with the admin
 * credentials of --redis like the other tenant verbs.
 *
 * DESIGN. Every token is one field of the hash PREFIX:tokens: the SHA-256
 * of the token, mapping to its JSON record {tenant, name, admin,
 * created_at}. A name is unique among one tenant's tokens (or among the
 * admin tokens); that is checked by reading the whole hash under WATCH
 * and writing with MULTI/EXEC, retried when another admin got in between.
 * add also WATCHes PREFIX:tenants, which `tenant rm` changes, so a token
 * is never added to a tenant being removed; `tenant rm` WATCHes
 * PREFIX:tokens in turn (cli_token_hashes_of, cli_token_queue_hdel).
 *
 * SECURITY. The token is printed once and never sent to Redis: only its
 * hash is. The buffers that held it are wiped; --json is written by hand
 * for that reason (every value printed there is of a checked alphabet),
 * so no copy is left in jansson's heap. What is read back from Redis is
 * untrusted: every record is decoded with token_record_decode(), a field
 * that is not a SHA-256 or a record that does not decode is listed as
 * damaged (exit 125, the others still listed), and everything printed
 * from it goes through cli_esc().
 *
 * Sections: options, Redis, the hash, verbs, entry point.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../queue/token.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_token.h"
#include "redis_sync.h"

#define TOKEN_CLI_PREFIX "sandq"	/* as cli_tenant.c's TENANT_PREFIX */
#define WATCH_TRIES 5			/* MULTI/EXEC attempts against a racing admin */
#define HASH_SHOWN 12			/* hex digits of a hash that ls prints */
#define TOKENS_MAX 100000		/* fields of PREFIX:tokens read, at most */
#define EXIT_NONE 1			/* rm: no such token */

/*** Options ***/

enum { K_REDIS = 1, K_JSON, K_HELP, K_ADMIN, K_NAME };

static const struct option token_opts[] = {
	{ "redis", required_argument, NULL, K_REDIS },
	{ "json", no_argument, NULL, K_JSON },
	{ "help", no_argument, NULL, K_HELP },
	{ "admin", no_argument, NULL, K_ADMIN },
	{ "name", required_argument, NULL, K_NAME },
	{ NULL, 0, NULL, 0 },
};

/* A parsed command line and, once connected, the connection. */
struct kcli {
	const char *redis;
	bool json;
	bool help;
	bool admin;			/* --admin */
	const char *name;		/* --name, or rm's NAME */
	const char *tenant;		/* TENANT operand, or NULL */
	redisContext *rc;
	struct redis_url url;		/* holds the admin password: wiped */
	char key[KEY_MAX];		/* PREFIX:tokens */
	char errbuf[512];		/* the last Redis failure */
};

/* One field of PREFIX:tokens, as read back. */
struct tk_entry {
	char field[TOKEN_HASH_HEX + 1];	/* its first 64 bytes, NUL-cut */
	size_t flen;			/* its whole length */
	bool ok;			/* a SHA-256 field and a record that decodes */
	struct token_record r;		/* when ok */
	char why[256];			/* when not ok: what is wrong */
};

static int __attribute__((format(printf, 1, 2)))
usage(const char *fmt, ...)
{
	va_list ap;
	int status;

	va_start(ap, fmt);
	status = cli_vfail(CLI_EXIT_SANDQ, "sandq: ", "sandq tenant --help", fmt, ap);
	va_end(ap);
	return status;
}

/*** Redis ***/

/* Runs one command; the reply (never an error reply) or NULL with msg set. */
static redisReply *
kcmd(redisContext *rc, char *msg, size_t len, int argc, const char **argv,
    const size_t *lens)
{
	redisReply *r = redisCommandArgv(rc, argc, argv, lens);

	if (r == NULL) {
		snprintf(msg, len, "redis: %s", rc->errstr[0] ? rc->errstr :
		    "connection lost");
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		snprintf(msg, len, "redis: %s: %.*s", argv[0], (int)r->len, r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* kcmd() on t's connection, NUL-terminated arguments, reply dropped. 0 or -EIO. */
static int
kcmd_ok(struct kcli *t, int argc, const char **argv)
{
	size_t lens[8];
	redisReply *r;

	if (argc > 8) {
		snprintf(t->errbuf, sizeof(t->errbuf), "internal: too many arguments");
		return -EINVAL;
	}
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	if ((r = kcmd(t->rc, t->errbuf, sizeof(t->errbuf), argc, argv, lens)) == NULL)
		return -EIO;
	freeReplyObject(r);
	return 0;
}

/*
 * EXEC: 1 and the reply (the caller frees it), 0 when a WATCHed key
 * changed (nothing was done), -EIO with t->errbuf.
 */
static int
kexec(struct kcli *t, redisReply **out)
{
	redisReply *r = kcmd(t->rc, t->errbuf, sizeof(t->errbuf), 1,
	    (const char *[]){ "EXEC" }, (const size_t[]){ 4 });

	*out = NULL;
	if (r == NULL)
		return -EIO;
	if (r->type == REDIS_REPLY_NIL) {
		freeReplyObject(r);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(t->errbuf, sizeof(t->errbuf), "redis: EXEC answered with "
		    "reply type %d", r->type);
		freeReplyObject(r);
		return -EIO;
	}
	for (size_t i = 0; i < r->elements; i++)
		if (r->element[i]->type == REDIS_REPLY_ERROR) {
			snprintf(t->errbuf, sizeof(t->errbuf), "redis: in MULTI: %.*s",
			    (int)r->element[i]->len, r->element[i]->str);
			freeReplyObject(r);
			return -EIO;
		}
	*out = r;
	return 1;
}

/*** The hash ***/

/* Whether s (n bytes) is 64 lower-case hex digits, a token_hash_hex(). */
static bool
hash_shape_ok(const char *s, size_t n)
{
	return n == TOKEN_HASH_HEX && strspn(s, "0123456789abcdef") == n;
}

/*
 * HGETALL PREFIX:tokens into *out (n entries, malloc'd), each checked:
 * fields of another shape and records that do not decode are kept, not
 * ok, with why saying what is wrong. Returns 0, or -EIO with msg.
 */
static int
tokens_load(redisContext *rc, const char *key, struct tk_entry **out, size_t *n,
    char *msg, size_t len)
{
	redisReply *r;
	struct tk_entry *v = NULL;
	struct err e = { 0 };

	*out = NULL;
	*n = 0;
	r = kcmd(rc, msg, len, 2, (const char *[]){ "HGETALL", key },
	    (const size_t[]){ 7, strlen(key) });
	if (r == NULL)
		return -EIO;
	/* RESP2: a flat array of field, value, field, value... */
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0 ||
	    r->elements / 2 > TOKENS_MAX) {
		snprintf(msg, len, "%.200s: not a hash of tokens (reply type %d, %zu "
		    "elements)", key, r->type, r->elements);
		freeReplyObject(r);
		return -EIO;
	}
	if (r->elements > 0)
		v = xcalloc(r->elements / 2, sizeof(*v));
	for (size_t i = 0; i < r->elements / 2; i++) {
		redisReply *f = r->element[2 * i], *val = r->element[2 * i + 1];
		struct tk_entry *x = &v[i];

		if (f->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING) {
			snprintf(x->why, sizeof(x->why), "not a string");
			continue;
		}
		x->flen = f->len;
		memcpy(x->field, f->str, f->len < TOKEN_HASH_HEX ? f->len : TOKEN_HASH_HEX);
		if (!hash_shape_ok(f->str, f->len))
			snprintf(x->why, sizeof(x->why), "the field is not a SHA-256 in hex");
		else if (token_record_decode(val->str, val->len, &x->r, &e) < 0)
			snprintf(x->why, sizeof(x->why), "%s", e.msg);
		else
			x->ok = true;
	}
	*n = r->elements / 2;
	*out = v;
	freeReplyObject(r);
	return 0;
}

/* Whether entry x is a token of tenant (NULL: an admin token). */
static bool
entry_of(const struct tk_entry *x, const char *tenant)
{
	if (!x->ok)
		return false;
	return tenant == NULL ? x->r.admin : !x->r.admin && strcmp(x->r.tenant, tenant) == 0;
}

/* The entry of tenant's (or the admin's) token called name, or NULL. */
static const struct tk_entry *
entry_find(const struct tk_entry *v, size_t n, const char *tenant, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (entry_of(&v[i], tenant) && strcmp(v[i].r.name, name) == 0)
			return &v[i];
	return NULL;
}

int
cli_token_hashes_of(redisContext *rc, const char *prefix, const char *tenant,
    char ***out, size_t *n, char *msg, size_t len)
{
	char key[KEY_MAX];
	struct tk_entry *v = NULL;
	size_t nv = 0;

	*out = NULL;
	*n = 0;
	if (token_key(key, sizeof(key), prefix) < 0) {
		snprintf(msg, len, "the prefix '%.64s' is too long", prefix);
		return -EIO;
	}
	if (tokens_load(rc, key, &v, &nv, msg, len) < 0)
		return -EIO;
	for (size_t i = 0; i < nv; i++) {
		if (!entry_of(&v[i], tenant))
			continue;
		if (*out == NULL)
			*out = xcalloc(nv, sizeof(**out));
		(*out)[(*n)++] = xstrdup(v[i].field);
	}
	free(v);
	return 0;
}

void
cli_token_hashes_free(char **h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(h[i]);
	free(h);
}

int
cli_token_queue_hdel(redisContext *rc, const char *prefix, char **h, size_t n,
    char *msg, size_t len)
{
	char key[KEY_MAX];
	const char **argv;
	size_t *lens;
	redisReply *r;
	int rc_ = 0;

	if (n == 0 || token_key(key, sizeof(key), prefix) < 0) {
		snprintf(msg, len, "internal: HDEL of %zu tokens", n);
		return -EIO;
	}
	argv = xcalloc(n + 2, sizeof(*argv));
	lens = xcalloc(n + 2, sizeof(*lens));
	argv[0] = "HDEL";
	argv[1] = key;
	for (size_t i = 0; i < n; i++)
		argv[i + 2] = h[i];
	for (size_t i = 0; i < n + 2; i++)
		lens[i] = strlen(argv[i]);
	if ((r = kcmd(rc, msg, len, (int)(n + 2), argv, lens)) == NULL)
		rc_ = -EIO;
	else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "QUEUED") != 0) {
		snprintf(msg, len, "redis: HDEL was not queued (reply type %d)", r->type);
		rc_ = -EIO;
	}
	freeReplyObject(r);
	free(argv);
	free(lens);
	return rc_;
}

/* Connects to --redis and authenticates as it says. 0 or -EIO (errbuf). */
static int
conn_open(struct kcli *t)
{
	t->redis = cli_redis_or_default(t->redis);
	t->rc = cli_redis_open(t->redis, &t->url, t->errbuf, sizeof(t->errbuf));
	return t->rc != NULL ? 0 : -EIO;
}

static void
conn_close(struct kcli *t)
{
	if (t->rc)
		redisFree(t->rc);
	t->rc = NULL;
	explicit_bzero(&t->url, sizeof(t->url));
}

/*** Verbs ***/

/* What an entry is called in messages: "token ci of tenant acme", "admin token ci". */
static const char *
who(const char *tenant, const char *name)
{
	static char buf[TOKEN_NAME_MAX + 96];

	if (tenant == NULL)
		snprintf(buf, sizeof(buf), "admin token %s", name);
	else
		snprintf(buf, sizeof(buf), "token %s of tenant %s", name, tenant);
	return buf;
}

/* epoch ms now. */
static int64_t
now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/*
 * The name a new token gets without --name: "token-SECONDS", and "-2",
 * "-3" ... after it when that is taken (two adds in one second).
 */
static int
name_default(const struct tk_entry *v, size_t n, const char *tenant, char *buf,
    size_t size)
{
	long long s = (long long)time(NULL);

	snprintf(buf, size, "token-%lld", s);
	for (int k = 2; entry_find(v, n, tenant, buf) != NULL; k++) {
		if (k > 100)
			return -EEXIST;
		snprintf(buf, size, "token-%lld-%d", s, k);
	}
	return 0;
}

/*
 * add: under WATCH of PREFIX:tokens and PREFIX:tenants, checks the tenant
 * is listed and the name free, then HSETs the hash's record in MULTI.
 * The token is made only once the checks passed, and wiped on every path.
 */
static int
cmd_add(struct kcli *t)
{
	char tok[TOKEN_LEN + 1] = "", hash[TOKEN_HASH_HEX + 1] = "", name[TOKEN_NAME_MAX + 1];
	char set[KEY_MAX];
	struct token_record rec = { 0 };
	struct tk_entry *v = NULL;
	struct err e = { 0 };
	redisReply *r = NULL;
	char *json = NULL;
	size_t n = 0;
	int rc = 0, status = 0;

	if (t->name != NULL && !token_name_ok(t->name))
		return usage("token name '%.64s': expected 1 to %d characters of "
		    "A-Z a-z 0-9 _ . -", t->name, TOKEN_NAME_MAX);
	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	snprintf(set, sizeof(set), "%s:tenants", TOKEN_CLI_PREFIX);
	for (int tries = 0; rc == 0 && tries < WATCH_TRIES; tries++) {
		free(v);
		v = NULL;
		if (kcmd_ok(t, 3, (const char *[]){ "WATCH", t->key, set }) < 0)
			goto out_redis;
		if (t->tenant != NULL) {
			r = kcmd(t->rc, t->errbuf, sizeof(t->errbuf), 3, (const char *[]){
			    "SISMEMBER", set, t->tenant }, (const size_t[]){ 9, strlen(set),
			    strlen(t->tenant) });
			if (r == NULL)
				goto out_redis;
			rc = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
			freeReplyObject(r);
			if (!rc) {
				status = cli_fail("no tenant '%s' in %s ('sandq tenant add %s' "
				    "adds it)", t->tenant, set, t->tenant);
				goto out;
			}
			rc = 0;
		}
		if (tokens_load(t->rc, t->key, &v, &n, t->errbuf, sizeof(t->errbuf)) < 0)
			goto out_redis;
		if (t->name != NULL) {
			if (entry_find(v, n, t->tenant, t->name) != NULL) {
				status = cli_fail("%s exists; 'sandq tenant token rm' it first, "
				    "or choose another --name", who(t->tenant, t->name));
				goto out;
			}
			snprintf(name, sizeof(name), "%s", t->name);
		} else if (name_default(v, n, t->tenant, name, sizeof(name)) < 0) {
			status = cli_fail("no free default name; give --name");
			goto out;
		}
		snprintf(rec.tenant, sizeof(rec.tenant), "%s", t->tenant ? t->tenant : "");
		snprintf(rec.name, sizeof(rec.name), "%s", name);
		rec.admin = t->tenant == NULL;
		rec.created_at = now_ms();
		free(json);
		json = NULL;
		if (token_record_encode(&rec, &json, &e) < 0) {
			status = usage("%s", e.msg);
			goto out;
		}
		if (token_new(tok) < 0) {
			status = cli_fail("no random bytes for a token");
			goto out;
		}
		token_hash_hex(tok, TOKEN_LEN, hash);
		if (kcmd_ok(t, 1, (const char *[]){ "MULTI" }) < 0 ||
		    kcmd_ok(t, 4, (const char *[]){ "HSET", t->key, hash, json }) < 0 ||
		    (rc = kexec(t, &r)) < 0)
			goto out_redis;
		freeReplyObject(r);
		r = NULL;
	}
	if (rc == 0) {
		status = cli_fail("the tokens or tenants kept changing under us; "
		    "nothing done");
		goto out;
	}
	fprintf(stderr, "sandq: the token is shown only now: Redis keeps only its "
	    "SHA-256, so it cannot be shown again (lost: add another, rm this one)\n");
	if (t->json) {
		/* By hand: every value is of a checked alphabet, and no copy of tok stays. */
		if (t->tenant != NULL)
			printf("{\"tenant\":\"%s\",", t->tenant);
		else
			printf("{\"tenant\":null,");
		printf("\"name\":\"%s\",\"admin\":%s,\"token\":\"%s\",\"hash_prefix\":"
		    "\"%.*s\"}\n", name, rec.admin ? "true" : "false", tok, HASH_SHOWN, hash);
	} else {
		printf("added %s (hash %.*s)\n", who(t->tenant, name), HASH_SHOWN, hash);
		printf("%s\n", tok);
	}
	goto out;
out_redis:
	status = cli_fail("%s", t->errbuf);
out:
	explicit_bzero(tok, sizeof(tok));
	free(json);
	free(v);
	return status;
}

/* Orders entries: the damaged last, then admin first, tenant, name. */
static int
entry_cmp(const void *pa, const void *pb)
{
	const struct tk_entry *a = pa, *b = pb;
	int c;

	if (a->ok != b->ok)
		return a->ok ? -1 : 1;
	if (!a->ok)
		return strcmp(a->field, b->field);
	if (a->r.admin != b->r.admin)
		return a->r.admin ? -1 : 1;
	if ((c = strcmp(a->r.tenant, b->r.tenant)) != 0)
		return c;
	return strcmp(a->r.name, b->r.name);
}

/*
 * ls: every token, or TENANT's, or (--admin) the admin ones, sorted; never
 * a token, only the first HASH_SHOWN digits of its hash. A damaged entry
 * is listed (in the listing of all) and reported; it makes the status 125.
 */
static int
cmd_ls(struct kcli *t)
{
	struct tk_entry *v = NULL;
	json_t *arr = NULL;
	size_t n = 0;
	char when[40];
	int status = 0;
	bool all = t->tenant == NULL && !t->admin;

	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	if (tokens_load(t->rc, t->key, &v, &n, t->errbuf, sizeof(t->errbuf)) < 0)
		return cli_fail("%s", t->errbuf);
	if (n > 1)
		qsort(v, n, sizeof(*v), entry_cmp);
	if (t->json)
		arr = json_array();
	else
		printf("%-24s %-20s %-20s %s\n", "NAME", "TENANT", "CREATED", "HASH");
	for (size_t i = 0; i < n; i++) {
		const struct tk_entry *x = &v[i];
		const char *shown = cli_escn(x->field, x->flen < HASH_SHOWN ? x->flen :
		    HASH_SHOWN);

		if (!x->ok) {
			/* cli_fail escapes the whole message: the raw field here. */
			status = cli_fail("%s field %.12s...: damaged: %s", t->key, x->field,
			    x->why);
			if (!all)
				continue;
			if (t->json)
				json_array_append_new(arr, json_pack("{s:s, s:s}", "hash_prefix",
				    shown, "damaged", x->why));
			else
				printf("%-24s %-20s %-20s %s  (damaged: %s)\n", "?", "?", "-",
				    shown, cli_esc(x->why));
			continue;
		}
		if (!all && !entry_of(x, t->admin ? NULL : t->tenant))
			continue;
		cli_fmt_time_ms(when, sizeof(when), x->r.created_at);
		if (t->json) {
			json_array_append_new(arr, json_pack("{s:o, s:s, s:b, s:I, s:s, s:s}",
			    "tenant", x->r.admin ? json_null() : json_string(x->r.tenant),
			    "name", x->r.name, "admin", x->r.admin,
			    "created_at", (json_int_t)x->r.created_at, "created", when,
			    "hash_prefix", shown));
		} else {
			printf("%-24s %-20s %-20s %s\n", cli_esc(x->r.name),
			    x->r.admin ? "(admin)" : cli_esc(x->r.tenant), when, shown);
		}
	}
	if (t->json && cli_print_json_line(arr) != 0)
		status = CLI_EXIT_SANDQ;
	free(v);
	return status;
}

/*
 * rm: finds TENANT's (or the admin's) token NAME and HDELs its hash. No
 * WATCH: the field names that one token, and HDEL of a field already gone
 * answers 0, which is reported as not found.
 */
static int
cmd_rm(struct kcli *t)
{
	const struct tk_entry *x;
	struct tk_entry *v = NULL;
	redisReply *r;
	size_t n = 0;
	int status = 0;

	if (!token_name_ok(t->name))
		return usage("token name '%.64s': expected 1 to %d characters of "
		    "A-Z a-z 0-9 _ . -", t->name, TOKEN_NAME_MAX);
	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	if (tokens_load(t->rc, t->key, &v, &n, t->errbuf, sizeof(t->errbuf)) < 0)
		return cli_fail("%s", t->errbuf);
	if ((x = entry_find(v, n, t->tenant, t->name)) == NULL) {
		cli_warn("no %s", who(t->tenant, t->name));
		free(v);
		return EXIT_NONE;
	}
	r = kcmd(t->rc, t->errbuf, sizeof(t->errbuf), 3, (const char *[]){ "HDEL",
	    t->key, x->field }, (const size_t[]){ 4, strlen(t->key), strlen(x->field) });
	if (r == NULL)
		status = cli_fail("%s", t->errbuf);
	else if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
		cli_warn("no %s (removed meanwhile)", who(t->tenant, t->name));
		status = EXIT_NONE;
	} else {
		printf("removed %s (hash %.*s)\n", who(t->tenant, t->name), HASH_SHOWN,
		    x->field);
	}
	freeReplyObject(r);
	free(v);
	return status;
}

/*** Entry point ***/

/* Parses argv; ops (operands after "token") into t, then runs the verb. */
static int
token_run(struct kcli *t, int argc, char **argv)
{
	int o, nops;
	char **ops;

	optind = 0;
	opterr = 0;
	while ((o = getopt_long(argc, argv, ":h", token_opts, NULL)) != -1) {
		const char *bad = argv[optind - 1];

		switch (o) {
		case K_REDIS:
			t->redis = optarg;
			break;
		case K_JSON:
			t->json = true;
			break;
		case 'h':
		case K_HELP:
			t->help = true;
			break;
		case K_ADMIN:
			t->admin = true;
			break;
		case K_NAME:
			t->name = optarg;
			break;
		case ':':
			return usage("option '%s' needs a value", bad);
		default:
			return optopt ? usage("unknown option '-%c' for 'sandq tenant "
			    "token'", optopt) : usage("unknown option '%.*s' for 'sandq "
			    "tenant token'", (int)strcspn(bad, "="), bad);
		}
	}
	if (t->help) {
		cli_man_print("tenant");
		return 0;
	}
	ops = argv + optind;
	nops = argc - optind;
	/* ops[0] is "token" (cli_tenant.c found it there). */
	if (nops < 2)
		return usage("missing token command (add, ls or rm)");
	if (token_key(t->key, sizeof(t->key), TOKEN_CLI_PREFIX) < 0)
		return cli_fail("internal: the key of the tokens");
	if (strcmp(ops[1], "add") == 0 || strcmp(ops[1], "rm") == 0) {
		bool add = ops[1][0] == 'a';
		int want = (t->admin ? 0 : 1) + (add ? 0 : 1);

		if (!add && t->name != NULL)
			return usage("'sandq tenant token rm' takes the NAME as an operand, "
			    "not --name");
		if (t->json && !add)
			return usage("option '--json' does not apply to 'sandq tenant token rm'");
		if (nops - 2 != want)
			return usage("'sandq tenant token %s' takes %s", ops[1], add ?
			    "TENANT, or --admin" : "TENANT NAME, or --admin NAME");
		if (!t->admin)
			t->tenant = ops[2];
		if (!add)
			t->name = ops[nops - 1];
	} else if (strcmp(ops[1], "ls") == 0) {
		if (t->name != NULL)
			return usage("option '--name' does not apply to 'sandq tenant token ls'");
		if (nops > 3 || (t->admin && nops > 2))
			return usage("'sandq tenant token ls' takes at most one TENANT, "
			    "or --admin");
		t->tenant = nops == 3 ? ops[2] : NULL;
	} else {
		return usage("unknown token command '%.64s' (expected add, ls or rm)",
		    ops[1]);
	}
	if (t->tenant != NULL && !key_tenant_valid(t->tenant))
		return usage("tenant name '%.64s': expected 1 to 64 characters of "
		    "A-Z a-z 0-9 _ -", t->tenant);
	if (ops[1][0] == 'a')
		return cmd_add(t);
	if (ops[1][0] == 'r')
		return cmd_rm(t);
	return cmd_ls(t);
}

int
cli_token_main(const struct cli_conn *conn, int argc, char **argv)
{
	struct kcli t = { 0 };
	int status;

	t.redis = conn->redis;
	t.json = conn->json;
	t.help = conn->help;
	status = token_run(&t, argc, argv);
	conn_close(&t);
	return status;
}
