/*
 * cli_tenant.c - `sandq tenant add|set|rm|ls|show`: an admin's verbs on the
 * tenants kept in Redis (docs/tenants.md), run with the admin credentials
 * of --redis.
 *
 * Each change rewrites the tenant's settings hash, its membership of
 * PREFIX:tenants and an INCR of PREFIX:tenants:gen in one MULTI/EXEC,
 * guarded by WATCH, so a dispatcher that polls the counter never reads a
 * half-written record and two admins cannot interleave. The tenant's Redis
 * ACL user (sandq-NAME, rules from tenant_acl_rules()) is created by add,
 * refreshed by set and deleted by rm.
 *
 * SECURITY. The password is 32 bytes from RAND_bytes, printed once (in the
 * URL of add's last line, or of set --rotate-password) and sent to Redis
 * only as its SHA-256 ("#HEX"), so it appears in no Redis log, SLOWLOG or
 * ACL LIST. Buffers that held it are wiped. Rotating or removing also
 * drops the connections the user has open: ACL changes do not end
 * sessions that authenticated earlier.
 *
 * Sections: options, Redis, output, verbs, entry point.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../common/err.h"
#include "../common/xmalloc.h"
#include "../proto/keys.h"
#include "../proto/url.h"
#include "../queue/tenant.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_tenant.h"
#include "cli_token.h"
#include "redis_sync.h"

/*
 * libsandq and sandqd's default: the ACL rules name it, so a deployment
 * with another prefix needs clients built for it anyway.
 */
#define TENANT_PREFIX "sandq"
#define PASSWORD_BYTES 32		/* random bytes; printed as 64 hex digits */
#define WATCH_TRIES 5			/* MULTI/EXEC attempts against a racing admin */
#define URL_MAX 512

/*** Options ***/

enum {
	T_REDIS = 1,
	T_JSON,
	T_HELP,
	T_WEIGHT,
	T_MAX_RUNNING,
	T_MAX_QUEUED,
	T_RATE,
	T_BURST,
	T_CEILING,
	T_NET,
	T_QUOTA,
	T_DENY,
	T_NO_DENY,
	T_ROTATE,
	T_IMAGE_SOURCES,
};

#define TB(o) (1u << (o))
#define TOPTS_CONN (TB(T_REDIS) | TB(T_HELP))
#define TOPTS_SETTINGS (TB(T_WEIGHT) | TB(T_MAX_RUNNING) | TB(T_MAX_QUEUED) | \
	TB(T_RATE) | TB(T_BURST) | TB(T_CEILING) | TB(T_NET) | TB(T_QUOTA) | \
	TB(T_DENY) | TB(T_IMAGE_SOURCES))

static const struct option tenant_opts[] = {
	{ "redis", required_argument, NULL, T_REDIS },
	{ "json", no_argument, NULL, T_JSON },
	{ "help", no_argument, NULL, T_HELP },
	{ "weight", required_argument, NULL, T_WEIGHT },
	{ "max-running", required_argument, NULL, T_MAX_RUNNING },
	{ "max-queued", required_argument, NULL, T_MAX_QUEUED },
	{ "rate", required_argument, NULL, T_RATE },
	{ "burst", required_argument, NULL, T_BURST },
	{ "ceiling", required_argument, NULL, T_CEILING },
	{ "net", required_argument, NULL, T_NET },
	{ "storage-quota", required_argument, NULL, T_QUOTA },
	{ "deny", required_argument, NULL, T_DENY },
	{ "no-deny", no_argument, NULL, T_NO_DENY },
	{ "rotate-password", no_argument, NULL, T_ROTATE },
	{ "image-sources", required_argument, NULL, T_IMAGE_SOURCES },
	{ NULL, 0, NULL, 0 },
};

/* One SETTINGS option, applied once the stored record has been read. */
struct change {
	char field[48];			/* hash field: "weight", "ceiling.pids" */
	const char *value;		/* argv text */
	const char *opt;		/* "--weight", for messages */
};

struct tcli;
typedef int (*tenant_verb_cb)(struct tcli *t);

struct tenant_verb {
	const char *name;
	int nargs;			/* operands after the verb: 0 or 1 (NAME) */
	unsigned opts;			/* TB() of the options it takes */
	tenant_verb_cb run;
};

/* A parsed command line and, once connected, the connection. */
struct tcli {
	const struct tenant_verb *v;
	const char *redis;
	bool json;
	bool help;
	bool rotate;
	bool no_deny;
	unsigned given;			/* TB() of every option seen */
	struct change *changes;		/* SETTINGS but --deny, in order */
	size_t nchanges;
	const char **deny;		/* --deny patterns */
	size_t ndeny;
	const char *name;		/* NAME operand */
	redisContext *rc;
	struct redis_url url;		/* holds the admin password: wiped */
	char where[300];		/* "HOST:PORT" or the socket path */
	char errbuf[512];		/* the last Redis failure */
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

static const char *
opt_name(int o)
{
	for (const struct option *lo = tenant_opts; lo->name; lo++)
		if (lo->val == o)
			return lo->name;
	return "?";
}

/* Maps a SETTINGS option to its hash field; --ceiling takes LIMIT=VALUE. */
static int
change_add(struct tcli *t, int o, const char *arg)
{
	static const struct {
		int o;
		const char *field;
	} tab[] = {
		{ T_WEIGHT, "weight" }, { T_MAX_RUNNING, "max_running" },
		{ T_MAX_QUEUED, "max_queued" }, { T_RATE, "rate" },
		{ T_BURST, "burst" }, { T_NET, "net" },
		{ T_QUOTA, "storage_quota_bytes" },
		{ T_IMAGE_SOURCES, "image_sources" },
	};
	struct change *c;

	t->changes = xreallocarray(t->changes, t->nchanges + 1, sizeof(*t->changes));
	c = &t->changes[t->nchanges];
	memset(c, 0, sizeof(*c));
	c->opt = opt_name(o);
	if (o == T_CEILING) {
		const char *eq = strchr(arg, '=');

		if (eq == NULL || eq == arg || (size_t)(eq - arg) > 32)
			return usage("--ceiling '%.64s': expected LIMIT=VALUE, e.g. "
			    "memory_bytes=2G", arg);
		snprintf(c->field, sizeof(c->field), "ceiling.%.*s", (int)(eq - arg), arg);
		c->value = eq + 1;
	} else {
		for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
			if (tab[i].o == o)
				snprintf(c->field, sizeof(c->field), "%s", tab[i].field);
		c->value = arg;
	}
	t->nchanges++;
	return 0;
}

static int
opt_apply(struct tcli *t, int o, const char *arg)
{
	t->given |= TB(o);
	switch (o) {
	case T_REDIS:
		t->redis = arg;
		return 0;
	case T_JSON:
		t->json = true;
		return 0;
	case T_HELP:
		t->help = true;
		return 0;
	case T_DENY:
		t->deny = xreallocarray(t->deny, t->ndeny + 1, sizeof(*t->deny));
		t->deny[t->ndeny++] = arg;
		return 0;
	case T_NO_DENY:
		t->no_deny = true;
		return 0;
	case T_ROTATE:
		t->rotate = true;
		return 0;
	default:
		return change_add(t, o, arg);
	}
}

/*
 * Applies the SETTINGS options to r (defaults for add, the stored record
 * for set). Messages name the option, then the field's own complaint.
 */
static int
changes_apply(const struct tcli *t, struct tenant_conf *r)
{
	struct err e = { 0 };

	for (size_t i = 0; i < t->nchanges; i++) {
		const struct change *c = &t->changes[i];

		if (tenant_conf_set(r, c->field, strlen(c->field), c->value,
		    strlen(c->value), &e) < 0)
			return usage("--%s: %s", c->opt, e.msg);
	}
	if (t->no_deny || t->ndeny > 0)
		tenant_deny_clear(r);
	for (size_t i = 0; i < t->ndeny; i++)
		if (tenant_deny_add(r, t->deny[i], &e) < 0)
			return usage("--deny: %s", e.msg);
	if (tenant_conf_check(r, &e) < 0)
		return usage("%s", e.msg);
	return 0;
}

/*** Redis ***/

/*
 * Runs one command (NUL-terminated arguments). Returns the reply, which is
 * never an error reply, or NULL with t->errbuf set.
 */
static redisReply *
rcmd(struct tcli *t, int argc, const char **argv)
{
	size_t lens[64];
	redisReply *r;

	if (argc > 64) {
		snprintf(t->errbuf, sizeof(t->errbuf), "internal: too many arguments");
		return NULL;
	}
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(t->rc, argc, argv, lens);
	if (r == NULL) {
		snprintf(t->errbuf, sizeof(t->errbuf), "redis %s: %s", t->where,
		    t->rc->errstr[0] ? t->rc->errstr : "connection lost");
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		snprintf(t->errbuf, sizeof(t->errbuf), "redis: %s: %.*s", argv[0],
		    (int)r->len, r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* Runs a command whose reply is not needed. 0 or -EIO. */
static int
rcmd_ok(struct tcli *t, int argc, const char **argv)
{
	redisReply *r = rcmd(t, argc, argv);

	if (r == NULL)
		return -EIO;
	freeReplyObject(r);
	return 0;
}

/* Connects to --redis and authenticates as it says. 0, -EINVAL or -EIO. */
static int
conn_open(struct tcli *t)
{
	t->redis = cli_redis_or_default(t->redis);
	t->rc = cli_redis_open(t->redis, &t->url, t->errbuf, sizeof(t->errbuf));
	if (t->rc == NULL)
		return -EIO;
	if (t->url.path[0])
		snprintf(t->where, sizeof(t->where), "%s", t->url.path);
	else
		snprintf(t->where, sizeof(t->where), "%s:%d", t->url.host, t->url.port);
	return 0;
}

static void
conn_close(struct tcli *t)
{
	if (t->rc)
		redisFree(t->rc);
	t->rc = NULL;
	explicit_bzero(&t->url, sizeof(t->url));
}

/*
 * Reads NAME's settings hash into r. Returns 1 (found), 0 (no hash: r holds
 * the defaults) or -1 with t->errbuf set (Redis failed, or the stored
 * record is refused, naming the field).
 */
static int
record_load(struct tcli *t, const char *name, struct tenant_conf *r)
{
	const char *argv[2], *f[TENANT_FIELDS_MAX], *v[TENANT_FIELDS_MAX];
	size_t fl[TENANT_FIELDS_MAX], vl[TENANT_FIELDS_MAX], n;
	char key[KEY_MAX];
	struct err e = { 0 };
	redisReply *rep;

	if (tenant_key_conf(key, TENANT_PREFIX, name) < 0) {
		snprintf(t->errbuf, sizeof(t->errbuf), "bad tenant name");
		return -1;
	}
	argv[0] = "HGETALL";
	argv[1] = key;
	if ((rep = rcmd(t, 2, argv)) == NULL)
		return -1;
	/* RESP2: a flat array of field, value, field, value... */
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2 != 0 ||
	    rep->elements > 2 * TENANT_FIELDS_MAX) {
		snprintf(t->errbuf, sizeof(t->errbuf), "%.200s: not a tenant record "
		    "(%zu elements)", key, rep->elements);
		freeReplyObject(rep);
		return -1;
	}
	n = rep->elements / 2;
	for (size_t i = 0; i < n; i++) {
		f[i] = rep->element[2 * i]->str;
		fl[i] = rep->element[2 * i]->len;
		v[i] = rep->element[2 * i + 1]->str;
		vl[i] = rep->element[2 * i + 1]->len;
	}
	if (tenant_hash_decode(r, name, f, fl, v, vl, n, &e) < 0) {
		snprintf(t->errbuf, sizeof(t->errbuf), "stored settings of %s", e.msg);
		freeReplyObject(rep);
		return -1;
	}
	freeReplyObject(rep);
	return n > 0 ? 1 : 0;
}

/*
 * Queues, inside the caller's MULTI, the rewrite of r's record: DEL, HSET
 * of every field, SADD to the set, INCR of the counter. 0 or -EIO.
 */
static int
record_queue_write(struct tcli *t, const struct tenant_conf *r)
{
	char key[KEY_MAX], set[KEY_MAX], gen[KEY_MAX];
	const char *argv[2 + 2 * TENANT_FIELDS_MAX];
	struct tenant_hash h;
	int argc = 0, rc = 0;

	tenant_key_conf(key, TENANT_PREFIX, r->name);
	tenant_key_set(set, TENANT_PREFIX);
	tenant_key_gen(gen, TENANT_PREFIX);
	tenant_hash_encode(r, &h);
	argv[argc++] = "HSET";
	argv[argc++] = key;
	for (size_t i = 0; i < h.n; i++) {
		argv[argc++] = h.field[i];
		argv[argc++] = h.value[i];
	}
	if (rcmd_ok(t, 2, (const char *[]){ "DEL", key }) < 0 ||
	    rcmd_ok(t, argc, argv) < 0 ||
	    rcmd_ok(t, 3, (const char *[]){ "SADD", set, r->name }) < 0 ||
	    rcmd_ok(t, 2, (const char *[]){ "INCR", gen }) < 0)
		rc = -EIO;
	tenant_hash_free(&h);
	return rc;
}

/*
 * Runs EXEC. Returns 1 and the counter's new value (the last reply) in
 * *gen, 0 when a WATCHed key changed (nothing was done), or -EIO.
 */
static int
exec_run(struct tcli *t, long long *gen)
{
	redisReply *r = rcmd(t, 1, (const char *[]){ "EXEC" });
	int rc = 1;

	if (r == NULL)
		return -EIO;
	if (r->type == REDIS_REPLY_NIL) {
		freeReplyObject(r);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
		snprintf(t->errbuf, sizeof(t->errbuf), "redis: EXEC answered with "
		    "reply type %d", r->type);
		rc = -EIO;
	}
	for (size_t i = 0; rc == 1 && i < r->elements; i++) {
		if (r->element[i]->type == REDIS_REPLY_ERROR) {
			snprintf(t->errbuf, sizeof(t->errbuf), "redis: in MULTI: %.*s",
			    (int)r->element[i]->len, r->element[i]->str);
			rc = -EIO;
		}
	}
	if (rc == 1 && gen != NULL)
		*gen = r->element[r->elements - 1]->integer;
	freeReplyObject(r);
	return rc;
}

/* 1 if the tenant's ACL user exists, 0 if not, -1 on failure. *on: its flag. */
static int
acl_user_get(struct tcli *t, const char *name, bool *on)
{
	char user[TENANT_NAME_MAX + 16];
	redisReply *r;

	*on = false;
	tenant_acl_user(user, sizeof(user), name);
	if ((r = rcmd(t, 3, (const char *[]){ "ACL", "GETUSER", user })) == NULL)
		return -1;
	if (r->type == REDIS_REPLY_NIL) {
		freeReplyObject(r);
		return 0;
	}
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		redisReply *k = r->element[i], *v = r->element[i + 1];

		if (k->type != REDIS_REPLY_STRING || strcmp(k->str, "flags") != 0 ||
		    v->type != REDIS_REPLY_ARRAY)
			continue;
		for (size_t j = 0; j < v->elements; j++)
			if (v->element[j]->type == REDIS_REPLY_STRING &&
			    strcmp(v->element[j]->str, "on") == 0)
				*on = true;
	}
	freeReplyObject(r);
	return 1;
}

/*
 * ACL SETUSER sandq-NAME with tenant_acl_rules(). pass_sha256 NULL keeps
 * the passwords; reset rebuilds the user from nothing (and turns it on).
 */
static int
acl_user_apply(struct tcli *t, const char *name, const char *pass_sha256,
    bool reset)
{
	const char *argv[3 + TENANT_ACL_ARGS_MAX];
	char user[TENANT_NAME_MAX + 16], buf[4096];
	int n;

	tenant_acl_user(user, sizeof(user), name);
	argv[0] = "ACL";
	argv[1] = "SETUSER";
	argv[2] = user;
	n = tenant_acl_rules(TENANT_PREFIX, name, pass_sha256, reset, t->url.db != 0,
	    argv + 3, TENANT_ACL_ARGS_MAX, buf, sizeof(buf));
	if (n < 0) {
		snprintf(t->errbuf, sizeof(t->errbuf), "cannot build the ACL rules: %s",
		    strerror(-n));
		return -EINVAL;
	}
	return rcmd_ok(t, 3 + n, argv);
}

/*
 * Ends the sessions of the tenant's user: a session authenticated before a
 * password change or a DELUSER would otherwise keep its rights.
 */
static int
acl_user_kill(struct tcli *t, const char *name)
{
	char user[TENANT_NAME_MAX + 16];

	tenant_acl_user(user, sizeof(user), name);
	return rcmd_ok(t, 4, (const char *[]){ "CLIENT", "KILL", "USER", user });
}

/*
 * A fresh password (64 hex digits from 32 random bytes) and its SHA-256 in
 * hex, the form ACL SETUSER takes after '#'.
 */
static int
password_new(char pass[2 * PASSWORD_BYTES + 1], char sha[65])
{
	unsigned char raw[PASSWORD_BYTES], md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	static const char hex[] = "0123456789abcdef";

	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -EIO;
	for (size_t i = 0; i < sizeof(raw); i++) {
		pass[2 * i] = hex[raw[i] >> 4];
		pass[2 * i + 1] = hex[raw[i] & 15];
	}
	pass[2 * PASSWORD_BYTES] = '\0';
	explicit_bzero(raw, sizeof(raw));
	if (EVP_Digest(pass, 2 * PASSWORD_BYTES, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != 32)
		return -EIO;
	for (size_t i = 0; i < 32; i++) {
		sha[2 * i] = hex[md[i] >> 4];
		sha[2 * i + 1] = hex[md[i] & 15];
	}
	sha[64] = '\0';
	return 0;
}

/*
 * The URL of the tenant's user at the --redis server: the admin URL's host
 * and port (or socket) and database, the tenant's user and password.
 */
static void
tenant_url(const struct tcli *t, const char *name, const char *pass, char *buf,
    size_t size)
{
	char user[TENANT_NAME_MAX + 16], db[16] = "";

	tenant_acl_user(user, sizeof(user), name);
	if (t->url.db != 0)
		snprintf(db, sizeof(db), "/%d", t->url.db);
	if (t->url.path[0])
		snprintf(buf, size, "unix://%s:%s@%s", user, pass, t->url.path);
	else
		snprintf(buf, size, "redis://%s:%s@%s:%d%s", user, pass, t->url.host,
		    t->url.port, db);
}

/*** Output ***/

static void
print_limit(const char *label, uint64_t v, const char *zero)
{
	if (v == 0)
		printf("%-28s 0 (%s)\n", label, zero);
	else
		printf("%-28s %" PRIu64 "\n", label, v);
}

/* "key: value" lines, one per setting; deny patterns one per line. */
static void
print_conf(const struct tenant_conf *r)
{
	json_t *j = tenant_json_encode(r), *ceil = json_object_get(j, "ceiling"), *v;
	const char *k;

	printf("%-28s %s\n", "name:", cli_esc(r->name));
	printf("%-28s %" PRIu32 "\n", "weight:", r->weight);
	print_limit("max_running:", r->max_running, "no cap");
	print_limit("max_queued:", r->max_queued, "no cap");
	if (r->rate == 0)
		printf("%-28s 0 (no cap)\n", "rate:");
	else
		printf("%-28s %g jobs/s, burst %" PRIu32 "\n", "rate:", r->rate,
		    tenant_burst(r));
	json_object_foreach(ceil, k, v) {
		char label[64];

		snprintf(label, sizeof(label), "ceiling.%s:", k);
		print_limit(label, (uint64_t)json_integer_value(v), "the host's");
	}
	if (r->net_mask == 0) {
		printf("%-28s (the host's)\n", "net:");
	} else {
		json_t *a = json_object_get(j, "net");
		size_t i;

		printf("%-28s", "net:");
		json_array_foreach(a, i, v)
			printf("%s%s", i ? "," : " ", json_string_value(v));
		putchar('\n');
	}
	print_limit("storage_quota_bytes:", r->storage_quota_bytes, "none");
	if (r->nimage_sources == 0)
		printf("%-28s (the host's)\n", "image_sources:");
	for (size_t i = 0; i < r->nimage_sources; i++)
		printf("%-28s %s\n", "image_sources:", cli_esc(r->image_sources[i]));
	if (r->ndeny == 0)
		printf("%-28s (none)\n", "deny:");
	for (size_t i = 0; i < r->ndeny; i++)
		printf("%-28s %s\n", "deny:", cli_esc(r->deny[i]));
	json_decref(j);
}

static int
print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15));
	int rc = 0;

	if (s == NULL || printf("%s\n", s) < 0)
		rc = cli_fail("writing JSON: %s", s ? strerror(errno) : "cannot encode");
	free(s);
	return rc;
}

/*** Verbs ***/

/*
 * add: the record first, then the user. A racing add of the same name is
 * stopped by WATCH before it touches anything; if ACL SETUSER fails (say
 * the admin may not run it) the record is taken back, so no tenant is
 * left that nobody can log in as.
 */
static int
cmd_add(struct tcli *t)
{
	char key[KEY_MAX], set[KEY_MAX], gen[KEY_MAX], pass[2 * PASSWORD_BYTES + 1];
	char sha[65], url[URL_MAX], user[TENANT_NAME_MAX + 16];
	struct tenant_conf r, old;
	struct err e = { 0 };
	long long g = 0;
	int rc, status;

	if (tenant_conf_init(&r, t->name, &e) < 0)
		return usage("%s", e.msg);
	if ((status = changes_apply(t, &r)) != 0)
		goto out_free;
	if (conn_open(t) < 0) {
		status = cli_fail("%s", t->errbuf);
		goto out_free;
	}
	tenant_key_conf(key, TENANT_PREFIX, t->name);
	tenant_key_set(set, TENANT_PREFIX);
	tenant_key_gen(gen, TENANT_PREFIX);
	if (rcmd_ok(t, 2, (const char *[]){ "WATCH", key }) < 0) {
		status = cli_fail("%s", t->errbuf);
		goto out_free;
	}
	/* "Exists" means has settings: sandqd's config may list it in the set. */
	if ((rc = record_load(t, t->name, &old)) != 0) {
		if (rc > 0)
			tenant_conf_free(&old);
		status = rc > 0 ? cli_fail("tenant '%s' exists; 'sandq tenant set %s ...' "
		    "changes it", t->name, t->name) : cli_fail("%s", t->errbuf);
		goto out_free;
	}
	if (rcmd_ok(t, 1, (const char *[]){ "MULTI" }) < 0 ||
	    record_queue_write(t, &r) < 0 || (rc = exec_run(t, &g)) < 0) {
		status = cli_fail("%s", t->errbuf);
		goto out_free;
	}
	if (rc == 0) {
		status = cli_fail("tenant '%s' was added or changed meanwhile; nothing done",
		    t->name);
		goto out_free;
	}
	if (password_new(pass, sha) < 0 || acl_user_apply(t, t->name, sha, true) < 0) {
		status = cli_fail("creating the ACL user: %s; the tenant was not added",
		    t->errbuf[0] ? t->errbuf : "no random bytes");
		/* Take the record back (best effort: the message says why). */
		if (rcmd_ok(t, 1, (const char *[]){ "MULTI" }) == 0 &&
		    rcmd_ok(t, 2, (const char *[]){ "DEL", key }) == 0 &&
		    rcmd_ok(t, 3, (const char *[]){ "SREM", set, t->name }) == 0 &&
		    rcmd_ok(t, 2, (const char *[]){ "INCR", gen }) == 0)
			exec_run(t, NULL);
		goto out_wipe;
	}
	tenant_url(t, t->name, pass, url, sizeof(url));
	tenant_acl_user(user, sizeof(user), t->name);
	if (t->url.path[0] && t->url.db != 0)
		cli_warn("a unix:// URL cannot name a database: clients "
		    "of this URL use database 0, not %d", t->url.db);
	printf("added tenant %s (settings generation %lld)\n", t->name, g);
	print_conf(&r);
	printf("Redis ACL user %s may submit to and read only %s:{%s}:* keys.\n"
	    "The password is shown only here; 'sandq tenant set %s "
	    "--rotate-password' makes a new one.\n"
	    "Connect with: sandq --redis URL --tenant %s sh 'echo hi', URL being:\n",
	    user, TENANT_PREFIX, t->name, t->name, t->name);
	printf("%s\n", url);
	status = 0;
out_wipe:
	explicit_bzero(pass, sizeof(pass));
	explicit_bzero(url, sizeof(url));
out_free:
	tenant_conf_free(&r);
	return status;
}

/*
 * set: read, change, write back under WATCH (retried when another admin
 * got in between), then refresh the ACL rules so a user made by an older
 * sandq gets today's. On, off and the password are left alone unless
 * --rotate-password: re-enabling a user an admin turned off is not set's
 * business.
 */
static int
cmd_set(struct tcli *t)
{
	char key[KEY_MAX], pass[2 * PASSWORD_BYTES + 1] = "", sha[65], url[URL_MAX];
	struct tenant_conf r = { 0 };
	long long g = 0;
	bool on = false;
	int rc = 0, status = 0, exists;

	if (t->nchanges == 0 && t->ndeny == 0 && !t->no_deny && !t->rotate)
		return usage("set: nothing to change (give SETTINGS or "
		    "--rotate-password)");
	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	tenant_key_conf(key, TENANT_PREFIX, t->name);
	for (int tries = 0; rc == 0 && tries < WATCH_TRIES; tries++) {
		if (rcmd_ok(t, 2, (const char *[]){ "WATCH", key }) < 0)
			return cli_fail("%s", t->errbuf);
		if ((rc = record_load(t, t->name, &r)) < 0)
			return cli_fail("%s", t->errbuf);
		if (rc == 0) {
			tenant_conf_free(&r);
			return cli_fail("no tenant '%s' ('sandq tenant add %s' adds it)",
			    t->name, t->name);
		}
		if ((status = changes_apply(t, &r)) != 0)
			goto out_free;
		if (rcmd_ok(t, 1, (const char *[]){ "MULTI" }) < 0 ||
		    record_queue_write(t, &r) < 0 || (rc = exec_run(t, &g)) < 0) {
			status = cli_fail("%s", t->errbuf);
			goto out_free;
		}
		if (rc == 0)
			tenant_conf_free(&r);
	}
	if (rc == 0)
		return cli_fail("tenant '%s' kept changing under us; nothing done", t->name);
	if ((exists = acl_user_get(t, t->name, &on)) < 0) {
		status = cli_fail("%s", t->errbuf);
		goto out_free;
	}
	if (t->rotate) {
		if (password_new(pass, sha) < 0 ||
		    acl_user_apply(t, t->name, sha, !exists) < 0 ||
		    acl_user_kill(t, t->name) < 0) {
			status = cli_fail("rotating the password: %s", t->errbuf[0] ?
			    t->errbuf : "no random bytes");
			goto out_wipe;
		}
	} else if (exists) {
		if (acl_user_apply(t, t->name, NULL, false) < 0) {
			status = cli_fail("updating the ACL user: %s", t->errbuf);
			goto out_free;
		}
	} else {
		cli_warn("tenant %s has no ACL user; 'sandq tenant set "
		    "%s --rotate-password' creates one", t->name, t->name);
	}
	printf("changed tenant %s (settings generation %lld)\n", t->name, g);
	print_conf(&r);
	if (t->rotate) {
		tenant_url(t, t->name, pass, url, sizeof(url));
		printf("New password set; sessions of the old one were closed. "
		    "URL:\n%s\n", url);
		explicit_bzero(url, sizeof(url));
	}
out_wipe:
	explicit_bzero(pass, sizeof(pass));
out_free:
	tenant_conf_free(&r);
	return status;
}

/*
 * rm: the user first, so credentials die before the record does; a failure
 * halfway leaves settings without a user, never a user without settings.
 * The tenant's API tokens (cli_token.c) go in the same MULTI as its
 * settings, under WATCH of PREFIX:tokens so that one added meanwhile is
 * not left behind (the EXEC is retried).
 */
static int
cmd_rm(struct tcli *t)
{
	char key[KEY_MAX], set[KEY_MAX], gen[KEY_MAX], tokens[KEY_MAX];
	char user[TENANT_NAME_MAX + 16];
	char **hashes = NULL;
	size_t nh = 0;
	redisReply *r = NULL;
	long long g = 0, deleted, member = 0, had = 0, toks = 0;
	int rc = 0, ok = 0;

	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	tenant_key_conf(key, TENANT_PREFIX, t->name);
	tenant_key_set(set, TENANT_PREFIX);
	tenant_key_gen(gen, TENANT_PREFIX);
	snprintf(tokens, sizeof(tokens), "%s:tokens", TENANT_PREFIX);
	tenant_acl_user(user, sizeof(user), t->name);
	if ((r = rcmd(t, 3, (const char *[]){ "ACL", "DELUSER", user })) == NULL)
		return cli_fail("%s", t->errbuf);
	/* DELUSER also disconnects the user's sessions. */
	deleted = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
	freeReplyObject(r);
	for (int tries = 0; rc == 0 && tries < WATCH_TRIES; tries++) {
		cli_token_hashes_free(hashes, nh);
		hashes = NULL;
		nh = 0;
		if (rcmd_ok(t, 2, (const char *[]){ "WATCH", tokens }) < 0 ||
		    cli_token_hashes_of(t->rc, TENANT_PREFIX, t->name, &hashes, &nh,
		    t->errbuf, sizeof(t->errbuf)) < 0 ||
		    rcmd_ok(t, 1, (const char *[]){ "MULTI" }) < 0 ||
		    rcmd_ok(t, 2, (const char *[]){ "DEL", key }) < 0 ||
		    rcmd_ok(t, 3, (const char *[]){ "SREM", set, t->name }) < 0 ||
		    rcmd_ok(t, 2, (const char *[]){ "INCR", gen }) < 0 ||
		    (nh > 0 && cli_token_queue_hdel(t->rc, TENANT_PREFIX, hashes, nh,
		    t->errbuf, sizeof(t->errbuf)) < 0)) {
			cli_token_hashes_free(hashes, nh);
			return cli_fail("%s", t->errbuf);
		}
		if ((r = rcmd(t, 1, (const char *[]){ "EXEC" })) == NULL) {
			cli_token_hashes_free(hashes, nh);
			return cli_fail("%s", t->errbuf);
		}
		rc = r->type != REDIS_REPLY_NIL;
		ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 + (nh > 0);
		for (size_t i = 0; ok && i < r->elements; i++)
			ok = r->element[i]->type == REDIS_REPLY_INTEGER;
		had = ok ? r->element[0]->integer : 0;
		member = ok ? r->element[1]->integer : 0;
		g = ok ? r->element[2]->integer : 0;
		toks = ok && nh > 0 ? r->element[3]->integer : 0;
		freeReplyObject(r);
	}
	cli_token_hashes_free(hashes, nh);
	if (rc == 0)
		return cli_fail("the tokens kept changing under us; tenant '%s' was "
		    "not removed (its ACL user was)", t->name);
	if (!ok)
		return cli_fail("redis: EXEC of rm failed");
	if (deleted == 0 && had == 0 && member == 0 && toks == 0)
		return cli_fail("no tenant '%s'", t->name);
	printf("removed tenant %s (settings generation %lld): ACL user %s %s, "
	    "settings %s, %lld API token%s deleted\n", t->name, g, user,
	    deleted ? "deleted" : "was absent", had ? "deleted" : "were absent",
	    toks, toks == 1 ? "" : "s");
	printf("Its keys %s:{%s}:* (queue, results, audit) were left in place.\n",
	    TENANT_PREFIX, t->name);
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The current value of the counter (0 when it was never set). */
static int
gen_get(struct tcli *t, long long *g)
{
	char gen[KEY_MAX];
	redisReply *r;

	tenant_key_gen(gen, TENANT_PREFIX);
	if ((r = rcmd(t, 2, (const char *[]){ "GET", gen })) == NULL)
		return -EIO;
	*g = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
	freeReplyObject(r);
	return 0;
}

/*
 * ls: every member of the set, sorted. A member without settings (listed
 * by a sandqd's config only) runs with the defaults; --json lists it under
 * "without_settings". A record that does not decode is reported and makes
 * the exit status 125, the others are still listed.
 */
static int
cmd_ls(struct tcli *t)
{
	char set[KEY_MAX];
	char **names = NULL;
	size_t n = 0;
	redisReply *r;
	json_t *out = NULL, *list = NULL, *bare = NULL;
	long long g = 0;
	int status = 0;

	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	tenant_key_set(set, TENANT_PREFIX);
	if (gen_get(t, &g) < 0 ||
	    (r = rcmd(t, 2, (const char *[]){ "SMEMBERS", set })) == NULL)
		return cli_fail("%s", t->errbuf);
	if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
		names = xcalloc(r->elements, sizeof(*names));
		for (size_t i = 0; i < r->elements; i++) {
			redisReply *m = r->element[i];

			/* A name that is not one cannot be a key: skip it, loudly. */
			if (m->type != REDIS_REPLY_STRING || strlen(m->str) != m->len ||
			    !key_tenant_valid(m->str)) {
				status = cli_fail("%s holds a member that is not a tenant name", set);
				continue;
			}
			names[n++] = xstrdup(m->str);
		}
	}
	freeReplyObject(r);
	if (n > 1)
		qsort(names, n, sizeof(*names), name_cmp);
	if (t->json) {
		out = json_object();
		list = json_array();
		bare = json_array();
	} else {
		printf("%-20s %6s %11s %10s %8s %-9s %12s %4s\n", "NAME", "WEIGHT",
		    "MAX_RUNNING", "MAX_QUEUED", "RATE", "NET", "QUOTA", "DENY");
	}
	for (size_t i = 0; i < n; i++) {
		struct tenant_conf c;
		char net[32] = "host", rate[32];
		int rc = record_load(t, names[i], &c);

		if (rc < 0) {
			status = cli_fail("%s", t->errbuf);
			if (t->rc->err)
				break;
			continue;
		}
		if (t->json) {
			json_array_append_new(rc > 0 ? list : bare, rc > 0 ?
			    tenant_json_encode(&c) : json_string(c.name));
		} else {
			if (c.net_mask) {
				json_t *j = tenant_json_encode(&c), *v;
				size_t k, off = 0;

				json_array_foreach(json_object_get(j, "net"), k, v)
					off += (size_t)snprintf(net + off, sizeof(net) - off, "%s%s",
					    k ? "," : "", json_string_value(v));
				json_decref(j);
			}
			snprintf(rate, sizeof(rate), "%g", c.rate);
			printf("%-20s %6" PRIu32 " %11" PRIu32 " %10" PRIu32 " %8s %-9s %12"
			    PRIu64 " %4zu%s\n", cli_esc(c.name), c.weight, c.max_running, c.max_queued,
			    rate, net, c.storage_quota_bytes, c.ndeny,
			    rc > 0 ? "" : "  (no settings: defaults)");
		}
		tenant_conf_free(&c);
	}
	if (t->json) {
		json_object_set_new(out, "gen", json_integer(g));
		json_object_set_new(out, "tenants", list);
		json_object_set_new(out, "without_settings", bare);
		if (print_json(out) != 0)
			status = CLI_EXIT_SANDQ;
		json_decref(out);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return status;
}

/* show: the settings and the state of the ACL user. */
static int
cmd_show(struct tcli *t)
{
	char set[KEY_MAX], user[TENANT_NAME_MAX + 16];
	struct tenant_conf c;
	redisReply *r;
	bool on = false, member;
	int rc, exists, status = 0;

	if (conn_open(t) < 0)
		return cli_fail("%s", t->errbuf);
	tenant_key_set(set, TENANT_PREFIX);
	if ((r = rcmd(t, 3, (const char *[]){ "SISMEMBER", set, t->name })) == NULL)
		return cli_fail("%s", t->errbuf);
	member = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	if ((rc = record_load(t, t->name, &c)) < 0)
		return cli_fail("%s", t->errbuf);
	if ((exists = acl_user_get(t, t->name, &on)) < 0) {
		tenant_conf_free(&c);
		return cli_fail("%s", t->errbuf);
	}
	if (rc == 0 && !member && !exists) {
		tenant_conf_free(&c);
		return cli_fail("no tenant '%s'", t->name);
	}
	tenant_acl_user(user, sizeof(user), t->name);
	if (t->json) {
		json_t *j = tenant_json_encode(&c);

		status = print_json(j) ? CLI_EXIT_SANDQ : 0;
		json_decref(j);
	} else {
		print_conf(&c);
		printf("%-28s %s\n", "settings:", rc > 0 ? "stored" :
		    "none stored (defaults apply)");
		printf("%-28s %s\n", "listed:", member ? "yes" : "no");
		printf("%-28s %s (%s)\n", "acl user:", user, !exists ? "missing" :
		    on ? "on" : "off");
	}
	tenant_conf_free(&c);
	return status;
}

static const struct tenant_verb verbs[] = {
	{ "add", 1, TOPTS_SETTINGS, cmd_add },
	{ "set", 1, TOPTS_SETTINGS | TB(T_NO_DENY) | TB(T_ROTATE), cmd_set },
	{ "rm", 1, 0, cmd_rm },
	{ "ls", 0, TB(T_JSON), cmd_ls },
	{ "show", 1, TB(T_JSON), cmd_show },
};

/*** Entry point ***/

static int
tenant_run(struct tcli *t, int argc, char **argv)
{
	int o, rc, nops;
	char **ops;

	optind = 0;
	opterr = 0;
	while ((o = getopt_long(argc, argv, ":h", tenant_opts, NULL)) != -1) {
		const char *bad = argv[optind - 1];

		if (o == 'h')
			o = T_HELP;
		else if (o == ':')
			return usage("option '%s' needs a value", bad);
		else if (o == '?')
			return optopt ? usage("unknown option '-%c'", optopt) :
			    usage("unknown option '%.*s'", (int)strcspn(bad, "="), bad);
		if ((rc = opt_apply(t, o, optarg)) != 0)
			return rc;
	}
	ops = argv + optind;
	nops = argc - optind;
	if (t->help) {
		cli_man_print("tenant");
		return 0;
	}
	if (nops == 0)
		return usage("missing tenant command (add, set, rm, ls, show or token)");
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(verbs[i].name, ops[0]) == 0)
			t->v = &verbs[i];
	if (t->v == NULL)
		return usage("unknown tenant command '%s' (expected add, set, rm, ls, "
		    "show or token)", ops[0]);
	{
		unsigned extra = t->given & ~(TOPTS_CONN | t->v->opts);

		if (extra != 0) {
			int bit = 0;

			while ((extra & TB(bit)) == 0)
				bit++;
			return usage("option '--%s' does not apply to 'sandq tenant %s'",
			    opt_name(bit), t->v->name);
		}
	}
	if (nops - 1 != t->v->nargs)
		return usage("'sandq tenant %s' takes %s", t->v->name,
		    t->v->nargs ? "one NAME" : "no operands");
	if (t->v->nargs) {
		t->name = ops[1];
		if (!key_tenant_valid(t->name))
			return usage("tenant name '%.64s': expected 1 to %d characters "
			    "of A-Z a-z 0-9 _ -", t->name, TENANT_NAME_MAX);
	}
	return t->v->run(t);
}

/*
 * The first operand of argv (argv[0] being "tenant"), skipping options and
 * the values of those that take one (as getopt_long would: "--opt VALUE",
 * "--opt=VALUE", an unambiguous abbreviation), or NULL. Decides whether
 * the command is `tenant token ...`, whose options are cli_token.c's.
 */
static const char *
first_operand(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		size_t n;

		if (strcmp(a, "--") == 0)
			return i + 1 < argc ? argv[i + 1] : NULL;
		if (a[0] != '-' || a[1] == '\0')
			return a;
		if (a[1] != '-' || strchr(a, '=') != NULL)
			continue;
		n = strlen(a + 2);
		/* cli_token.c's own option with a value. */
		if (strncmp("name", a + 2, n) == 0) {
			i++;
			continue;
		}
		for (const struct option *lo = tenant_opts; lo->name; lo++)
			if (strncmp(lo->name, a + 2, n) == 0) {
				if (lo->has_arg == required_argument)
					i++;
				break;
			}
	}
	return NULL;
}

int
cli_tenant_main(const struct cli_conn *conn, int argc, char **argv)
{
	struct tcli t = { 0 };
	const char *op;
	int status;

	if (conn->tenant != NULL)
		return usage("--tenant does not apply to 'sandq tenant': name the "
		    "tenant after the command");
	/* `tenant token ...`: the gateway's API tokens (cli_token.c). */
	if ((op = first_operand(argc, argv)) != NULL && strcmp(op, "token") == 0) {
		status = cli_token_main(conn, argc, argv);
		if (fflush(stdout) == EOF && status == 0)
			status = cli_fail("writing standard output: %s", strerror(errno));
		return status;
	}
	t.redis = conn->redis;
	t.json = conn->json;
	t.help = conn->help;
	status = tenant_run(&t, argc, argv);
	conn_close(&t);
	free(t.changes);
	free(t.deny);
	if (fflush(stdout) == EOF && status == 0)
		status = cli_fail("writing standard output: %s", strerror(errno));
	return status;
}
