/*
 * cli_image_tag.c - `sandq image tag|untag|tags`: a tenant's own names for
 * images (docs/images.md, "Image names").
 *
 *   sandq image tag NAME[:TAG] REF     NAME means REF for the tenant
 *   sandq image untag NAME[:TAG]       forgets it
 *   sandq image tags                   lists them
 *
 * The names live in one Redis hash per tenant (proto/keys.h key_images(),
 * the value images/names.h's JSON), read by every sandqd before a job on a
 * name is queued, so every host resolves a name the same way and a name
 * tagged again is seen by the next job. A registry's tag is pinned when
 * the name is made (images/pin.h: `skopeo inspect --raw`, the SHA-256 of
 * the manifest it serves): the name keeps meaning those bytes whatever
 * happens to the tag, until it is tagged again. --no-pin keeps the tag
 * instead (each host then takes what the tag names when it first pulls).
 * REF may be another name: its reference is copied, once.
 *
 * Nothing here checks REF against a host's image_sources (the CLI does not
 * know them): sandqd checks what a name resolves to for every job, as if
 * the job had named it.
 *
 * Runs with --redis's credentials: an admin's, or the tenant's own (its
 * ACL user may write its names hash and nothing else of the kind).
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "../images/names.h"
#include "../images/pin.h"
#include "../images/ref.h"
#include "../proto/keys.h"
#include "cli_common.h"
#include "cli_image_tag.h"
#include "cli_man.h"
#include "redis_sync.h"

#define PREFIX "sandq"
#define TAGS_MAX 100000			/* names `image tags` lists */
#define NAME_KEY_MAX (IMG_NAME_MAX + IMG_TAG_MAX + 2)

struct tagcli {
	const char *redis, *tenant;
	bool json, plain_http, no_pin;
	bool quiet;			/* print nothing on success (image build, import) */
	redisContext *rc;
	char key[KEY_MAX];
};

bool
cli_image_tag_is_verb(const char *verb)
{
	return strcmp(verb, "tag") == 0 || strcmp(verb, "untag") == 0 ||
	    strcmp(verb, "tags") == 0;
}

static int
usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage(const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = cli_vfail(2, "sandq: image: ", "sandq image --help", fmt, ap);
	va_end(ap);
	return rc;
}

static int
connect_redis(struct tagcli *t)
{
	struct err e = { 0 };

	if (key_images(t->key, PREFIX, t->tenant) < 0)
		return usage("tenant name too long");
	if ((t->rc = redis_sync_open(t->redis, 5000, 10000, NULL, &e)) == NULL)
		return cli_fail("%s", e.msg);
	return 0;
}

/* A name operand into its key ("NAME:TAG"); 0 or a usage status. */
static int
name_key(const char *s, char key[NAME_KEY_MAX])
{
	struct img_ref r;
	struct err e = { 0 };

	if (img_ref_parse(s, &r, &e) < 0)
		return usage("'%s': %s", cli_esc(s), e.msg);
	if (r.kind != IMG_NAME)
		return usage("'%s' is a reference, not a name: a name is "
		    "[a-z0-9][a-z0-9._-]* with an optional :TAG", cli_esc(s));
	if (img_name_key(&r, key, NAME_KEY_MAX) < 0)
		return usage("'%s': too long", cli_esc(s));
	return 0;
}

/* The stored value of key: 1 found (*v), 0 none, or a failure status < 0. */
static int
value_get(struct tagcli *t, const char *key, struct img_name_value *v)
{
	redisReply *r = redisCommand(t->rc, "HGET %s %s", t->key, key);
	struct err e = { 0 };
	int rc;

	if (r == NULL)
		return -cli_fail("Redis: %s", t->rc->errstr);
	if (r->type == REDIS_REPLY_NIL)
		rc = 0;
	else if (r->type != REDIS_REPLY_STRING)
		rc = -cli_fail("Redis: HGET %s: %s", t->key, r->type == REDIS_REPLY_ERROR ?
		    r->str : "unexpected reply");
	else if (img_name_value_decode(r->str, r->len, v, &e) < 0)
		rc = -cli_fail("image name '%s' is damaged in Redis: %s", key, e.msg);
	else
		rc = 1;
	freeReplyObject(r);
	return rc;
}

static int
do_tag(struct tagcli *t, const char *name, const char *target)
{
	char key[NAME_KEY_MAX], *json = NULL;
	struct img_name_value v = { 0 };
	struct img_ref ref, pinned;
	struct err e = { 0 };
	redisReply *r;
	int rc;

	if ((rc = name_key(name, key)) != 0)
		return rc;
	if (img_ref_parse(target, &ref, &e) < 0)
		return usage("'%s': %s", cli_esc(target), e.msg);
	if ((rc = connect_redis(t)) != 0)
		return rc;
	if (ref.kind == IMG_NAME) {
		char other[NAME_KEY_MAX];

		if (img_name_key(&ref, other, sizeof(other)) < 0)
			return usage("'%s': too long", cli_esc(target));
		if ((rc = value_get(t, other, &v)) < 0)
			return -rc;
		if (rc == 0) {
			cli_warn("image: tenant '%s' has no image named '%s'", t->tenant,
			    other);
			return 1;
		}
	} else {
		if (img_ref_str(&ref, v.given, sizeof(v.given)) < 0)
			return usage("'%s': too long", cli_esc(target));
		pinned = ref;
		if (!t->no_pin) {
			struct img_pin_opts o = { .plain_http = t->plain_http };

			if (img_pin(&ref, &o, &pinned, &e) < 0) {
				cli_warn("image: %s", e.msg);
				return 1;
			}
		}
		if (img_ref_str(&pinned, v.ref, sizeof(v.ref)) < 0)
			return usage("'%s': too long", cli_esc(target));
	}
	v.at_ms = (int64_t)now_ms();
	if (img_name_value_encode(&v, &json, &e) < 0)
		return cli_fail("%s", e.msg);
	r = redisCommand(t->rc, "HSET %s %s %s", t->key, key, json);
	rc = r != NULL && r->type == REDIS_REPLY_INTEGER ? 0 :
	    cli_fail("Redis: HSET %s: %s", t->key, r == NULL ? t->rc->errstr :
	    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	freeReplyObject(r);
	if (rc == 0 && t->quiet) {
		/* The caller reports. */
	} else if (rc == 0 && t->json) {
		json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "tenant", t->tenant,
		    "name", key, "ref", v.ref, "given", v.given);

		json_dumpf(o, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(o);
	} else if (rc == 0) {
		printf("%s -> %s\n", key, v.ref);
	}
	free(json);
	return rc;
}

static int
do_untag(struct tagcli *t, const char *name)
{
	char key[NAME_KEY_MAX];
	redisReply *r;
	int rc;

	if ((rc = name_key(name, key)) != 0 || (rc = connect_redis(t)) != 0)
		return rc;
	r = redisCommand(t->rc, "HDEL %s %s", t->key, key);
	if (r == NULL || r->type != REDIS_REPLY_INTEGER)
		rc = cli_fail("Redis: HDEL %s: %s", t->key, r == NULL ? t->rc->errstr :
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	else if (r->integer == 0) {
		cli_warn("image: tenant '%s' has no image named '%s'", t->tenant, key);
		rc = 1;
	}
	freeReplyObject(r);
	return rc;
}

/* A name and its stored value, as HGETALL gave them. */
struct pair {
	const redisReply *name, *val;
};

static int
pair_cmp(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	return strcmp(x->name->str, y->name->str);
}

static int
do_tags(struct tagcli *t)
{
	struct pair *names;
	json_t *arr = json_array();
	redisReply *r;
	size_t n = 0;
	int rc;

	if ((rc = connect_redis(t)) != 0)
		return rc;
	r = redisCommand(t->rc, "HGETALL %s", t->key);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		rc = cli_fail("Redis: HGETALL %s: %s", t->key, r == NULL ? t->rc->errstr :
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		freeReplyObject(r);
		json_decref(arr);
		return rc;
	}
	/* Field and value pairs; the fields sorted (each value follows its field). */
	names = calloc(r->elements / 2 + 1, sizeof(*names));
	for (size_t i = 0; names != NULL && i + 1 < r->elements && n < TAGS_MAX; i += 2)
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING)
			names[n++] = (struct pair){ r->element[i], r->element[i + 1] };
	if (names == NULL)
		n = 0;
	qsort(names, n, sizeof(*names), pair_cmp);
	if (!t->json && n > 0)
		printf("%-32s %-20s %s\n", "NAME", "TAGGED", "REFERENCE");
	for (size_t i = 0; i < n; i++) {
		const redisReply *val = names[i].val;
		struct img_name_value v;
		struct err e = { 0 };
		bool ok;
		char when[32] = "-";

		ok = img_name_value_decode(val->str, val->len, &v, &e) == 0;
		if (ok && v.at_ms > 0) {
			time_t s = (time_t)(v.at_ms / 1000);
			struct tm tm;

			if (gmtime_r(&s, &tm) != NULL)
				strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		}
		if (t->json) {
			json_t *o = json_pack("{s:s%}", "name", names[i].name->str, names[i].name->len);

			if (ok) {
				json_object_set_new(o, "ref", json_string(v.ref));
				json_object_set_new(o, "given", json_string(v.given));
				json_object_set_new(o, "at", json_integer((json_int_t)v.at_ms));
			} else {
				json_object_set_new(o, "error", json_string(e.msg));
			}
			json_array_append_new(arr, o);
		} else if (ok) {
			printf("%-32s %-20s %s\n", cli_escn(names[i].name->str, names[i].name->len),
			    when, v.ref);
			if (strcmp(v.given, v.ref) != 0)
				printf("%-32s %-20s   (tagged as %s)\n", "", "", v.given);
		} else {
			printf("%-32s %-20s (damaged: %s)\n", cli_escn(names[i].name->str,
			    names[i].name->len), when, cli_esc(e.msg));
		}
	}
	if (t->json) {
		json_dumpf(arr, stdout, JSON_COMPACT);
		putchar('\n');
	}
	json_decref(arr);
	free(names);
	freeReplyObject(r);
	return 0;
}

int
cli_image_tag_record(const struct cli_conn *conn, const char *name, const char *ref)
{
	struct tagcli t = { .redis = conn->redis, .quiet = true,
	    .tenant = cli_tenant_or_default(conn->tenant) };
	int status = do_tag(&t, name, ref);

	if (t.rc != NULL)
		redisFree(t.rc);
	return status;
}

int
cli_image_tag_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "plain-http", no_argument, NULL, 'p' },
		{ "no-pin", no_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct tagcli t = { .redis = conn->redis, .json = conn->json,
	    .tenant = cli_tenant_or_default(conn->tenant) };
	const char *verb = argv[1];
	int c, status;

	if (conn->help) {
		cli_man_print("image");
		return 0;
	}
	optind = 0;	/* a full restart: the dispatcher's scan stopped at the verb */
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			t.plain_http = true;
			break;
		case 'n':
			t.no_pin = true;
			break;
		case 'j':
			t.json = true;
			break;
		case 'h':
			cli_man_print("image");
			return 0;
		default:
			fputs("Try 'sandq image --help'.\n", stderr);
			return 2;
		}
	}
	argc -= optind + 1;
	argv += optind + 1;
	if (strcmp(verb, "tag") != 0 && (t.plain_http || t.no_pin))
		return usage("--plain-http and --no-pin apply to 'image tag' only");
	if (strcmp(verb, "tag") == 0) {
		if (argc != 2)
			return usage("tag takes NAME[:TAG] and a reference");
		status = do_tag(&t, argv[0], argv[1]);
	} else if (strcmp(verb, "untag") == 0) {
		if (argc != 1)
			return usage("untag takes NAME[:TAG]");
		status = do_untag(&t, argv[0]);
	} else {
		if (argc != 0)
			return usage("tags takes no operand");
		status = do_tags(&t);
	}
	if (t.rc != NULL)
		redisFree(t.rc);
	if (fflush(stdout) == EOF && status == 0)
		status = cli_fail("writing standard output: %s", strerror(errno));
	return status;
}
