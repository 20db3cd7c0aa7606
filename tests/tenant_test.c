/*
 * tenant_test.c - unit tests for queue/tenant.c: defaults, the hash and
 * JSON round trips of every field, strict refusals naming the field, key
 * names and the ACL rules. Pure: no Redis.
 *
 * The fixture's record `t` is freed in the fixture, so ASan/LSan see every
 * allocation released even when an assertion ends a test early.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/keys.h"
#include "../queue/tenant.h"

static struct tenant_conf t, u;
static struct tenant_hash h;
static struct err e;

static void
setup(void)
{
	memset(&t, 0, sizeof(t));
	memset(&u, 0, sizeof(u));
	memset(&h, 0, sizeof(h));
	err_clear(&e);
}

static void
teardown(void)
{
	tenant_conf_free(&t);
	tenant_conf_free(&u);
	tenant_hash_free(&h);
}

TestSuite(tenant, .init = setup, .fini = teardown);

/* Sets a field by its hash name; asserts success. */
static void
set(struct tenant_conf *r, const char *f, const char *v)
{
	struct err x = { 0 };

	cr_assert_eq(tenant_conf_set(r, f, strlen(f), v, strlen(v), &x), 0,
	    "%s=%s: %s", f, v, x.msg);
}

/* Sets a field expecting a refusal; returns the message. */
static const char *
refuse(struct tenant_conf *r, const char *f, const char *v)
{
	cr_assert_eq(tenant_conf_set(r, f, strlen(f), v, strlen(v), &e), -EINVAL,
	    "%s=%s was accepted", f, v);
	return e.msg;
}

/* Every field away from its default. */
static void
fill(struct tenant_conf *r)
{
	cr_assert_eq(tenant_conf_init(r, "acme_1-x", &e), 0);
	set(r, "weight", "7");
	set(r, "max_running", "8");
	set(r, "max_queued", "900");
	set(r, "rate", "2.5");
	set(r, "burst", "11");
	set(r, "ceiling.wall_ms", "60000");
	set(r, "ceiling.cpu_ms", "30000");
	set(r, "ceiling.memory_bytes", "2G");
	set(r, "ceiling.pids", "64");
	set(r, "ceiling.output_bytes", "1M");
	set(r, "ceiling.disk_bytes", "512M");
	set(r, "ceiling.files", "2048");
	set(r, "net", "unix");
	set(r, "storage_quota_bytes", "10G");
	set(r, "deny", "*curl *\nrm -rf /*\n*wget*");
	set(r, "image_sources", " docker://r.io/team/*, oci:/srv/img/* ");
}

static void
expect_same(const struct tenant_conf *a, const struct tenant_conf *b)
{
	cr_expect_str_eq(a->name, b->name);
	cr_expect_eq(a->weight, b->weight);
	cr_expect_eq(a->max_running, b->max_running);
	cr_expect_eq(a->max_queued, b->max_queued);
	cr_expect(a->rate == b->rate, "rate %.17g != %.17g", a->rate, b->rate);
	cr_expect_eq(a->burst, b->burst);
	cr_expect_eq(memcmp(&a->ceiling, &b->ceiling, sizeof(a->ceiling)), 0);
	cr_expect_eq(a->net_mask, b->net_mask);
	cr_expect_eq(a->storage_quota_bytes, b->storage_quota_bytes);
	cr_assert_eq(a->ndeny, b->ndeny);
	for (size_t i = 0; i < a->ndeny; i++)
		cr_expect_str_eq(a->deny[i], b->deny[i]);
	cr_assert_eq(a->nimage_sources, b->nimage_sources);
	for (size_t i = 0; i < a->nimage_sources; i++)
		cr_expect_str_eq(a->image_sources[i], b->image_sources[i]);
}

/* Decodes h (as HGETALL would return it) into out. */
static int
decode_hash(const struct tenant_hash *hh, const char *name, struct tenant_conf *out)
{
	const char *f[TENANT_FIELDS_MAX], *v[TENANT_FIELDS_MAX];
	size_t fl[TENANT_FIELDS_MAX], vl[TENANT_FIELDS_MAX];

	for (size_t i = 0; i < hh->n; i++) {
		f[i] = hh->field[i];
		fl[i] = strlen(hh->field[i]);
		v[i] = hh->value[i];
		vl[i] = strlen(hh->value[i]);
	}
	return tenant_hash_decode(out, name, f, fl, v, vl, hh->n, &e);
}

static const char *
hash_get(const struct tenant_hash *hh, const char *field)
{
	for (size_t i = 0; i < hh->n; i++)
		if (strcmp(hh->field[i], field) == 0)
			return hh->value[i];
	return NULL;
}

Test(tenant, defaults_are_weight_one_and_no_caps)
{
	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	cr_expect_str_eq(t.name, "a");
	cr_expect_eq(t.weight, 1);
	cr_expect_eq(t.max_running, 0);
	cr_expect_eq(t.max_queued, 0);
	cr_expect(t.rate == 0);
	cr_expect_eq(t.burst, 0);
	cr_expect_eq(t.ceiling.memory_bytes, 0);
	cr_expect_eq(t.net_mask, 0);
	cr_expect_eq(t.storage_quota_bytes, 0);
	cr_expect_eq(t.ndeny, 0);
	cr_expect(tenant_net_allowed(&t, NET_NONE));
	cr_expect(tenant_net_allowed(&t, NET_UNIX));
	cr_expect_eq(tenant_burst(&t), 1);
	cr_expect_eq(tenant_deny_match(&t, "anything"), -1);
	cr_expect_eq(tenant_conf_check(&t, &e), 0);
}

Test(tenant, hash_round_trips_every_field)
{
	fill(&t);
	tenant_hash_encode(&t, &h);
	cr_expect_str_eq(hash_get(&h, "v"), "1");
	cr_expect_str_eq(hash_get(&h, "rate"), "2.5");
	cr_expect_str_eq(hash_get(&h, "ceiling.memory_bytes"), "2147483648");
	cr_expect_str_eq(hash_get(&h, "net"), "unix");
	cr_expect_str_eq(hash_get(&h, "deny"), "*curl *\nrm -rf /*\n*wget*");
	cr_expect_str_eq(hash_get(&h, "image_sources"),
	    "docker://r.io/team/*,oci:/srv/img/*");
	cr_assert_eq(decode_hash(&h, "acme_1-x", &u), 0, "%s", e.msg);
	expect_same(&t, &u);
}

Test(tenant, hash_of_defaults_round_trips_and_lists_every_field)
{
	cr_assert_eq(tenant_conf_init(&t, "b", &e), 0);
	tenant_hash_encode(&t, &h);
	cr_expect_eq(h.n, 17);
	cr_expect_str_eq(hash_get(&h, "net"), "");
	cr_expect_str_eq(hash_get(&h, "deny"), "");
	cr_expect_str_eq(hash_get(&h, "image_sources"), "", "none: the host's");
	cr_assert_eq(decode_hash(&h, "b", &u), 0, "%s", e.msg);
	expect_same(&t, &u);
}

Test(tenant, missing_hash_fields_keep_their_defaults)
{
	const char *f[] = { "weight" }, *v[] = { "4" };
	size_t fl[] = { 6 }, vl[] = { 1 };

	cr_assert_eq(tenant_hash_decode(&t, "c", f, fl, v, vl, 1, &e), 0, "%s", e.msg);
	cr_expect_eq(t.weight, 4);
	cr_expect_eq(t.max_running, 0);
	cr_expect_eq(t.ndeny, 0);
}

Test(tenant, rate_that_is_not_short_in_decimal_round_trips_exactly)
{
	cr_assert_eq(tenant_conf_init(&t, "r", &e), 0);
	t.rate = 1.0 / 3.0;
	tenant_hash_encode(&t, &h);
	cr_assert_eq(decode_hash(&h, "r", &u), 0, "%s", e.msg);
	cr_expect(u.rate == t.rate);
}

Test(tenant, json_round_trips_every_field)
{
	json_t *j;

	fill(&t);
	j = tenant_json_encode(&t);
	cr_expect_eq(json_integer_value(json_object_get(j, "weight")), 7);
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(j, "net"), 0)),
	    "unix");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "ceiling"),
	    "pids")), 64);
	cr_expect_eq(json_array_size(json_object_get(j, "deny")), 3);
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(j,
	    "image_sources"), 1)), "oci:/srv/img/*");
	cr_assert_eq(tenant_json_decode(&u, j, &e), 0, "%s", e.msg);
	json_decref(j);
	expect_same(&t, &u);
}

Test(tenant, json_of_defaults_has_null_net_and_round_trips)
{
	json_t *j;

	cr_assert_eq(tenant_conf_init(&t, "d", &e), 0);
	j = tenant_json_encode(&t);
	cr_expect(json_is_null(json_object_get(j, "net")));
	cr_assert_eq(tenant_json_decode(&u, j, &e), 0, "%s", e.msg);
	json_decref(j);
	expect_same(&t, &u);
}

Test(tenant, json_decode_refuses_unknown_and_mistyped_members)
{
	static const char *const bad[] = {
		"{\"name\":\"a\",\"colour\":1}",
		"{\"name\":\"a\",\"v\":1}",
		"{\"name\":\"a\",\"ceiling.pids\":1}",
		"{\"name\":\"a\",\"ceiling\":{\"gpus\":1}}",
		"{\"name\":\"a\",\"weight\":\"3\"}",
		"{\"name\":\"a\",\"weight\":-1}",
		"{\"name\":\"a\",\"weight\":2.5}",
		"{\"name\":\"a\",\"net\":[]}",
		"{\"name\":\"a\",\"net\":[\"inet\"]}",
		"{\"name\":\"a\",\"deny\":[1]}",
		"{\"name\":\"a\",\"image_sources\":\"host\"}",
		"{\"name\":\"a\",\"image_sources\":[1]}",
		"{\"name\":\"a\",\"image_sources\":[\"docker://registry/*\"]}",
		"{\"name\":\"a\",\"image_sources\":[\"host\",\"host\"]}",
		"{\"name\":\"a b\"}",
		"{\"weight\":1}",
		"[]",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *j = json_loads(bad[i], 0, NULL);

		cr_assert(j != NULL, "%s", bad[i]);
		cr_expect_eq(tenant_json_decode(&t, j, &e), -EINVAL, "%s accepted", bad[i]);
		json_decref(j);
	}
}

Test(tenant, refuses_bad_weights_naming_the_field)
{
	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	cr_expect_str_eq(refuse(&t, "weight", "0"),
	    "field 'weight': must be 1..1000, got '0'");
	refuse(&t, "weight", "1001");
	refuse(&t, "weight", "-1");
	refuse(&t, "weight", "3x");
	refuse(&t, "weight", "");
	refuse(&t, "weight", " 3");
	cr_expect_eq(t.weight, 1, "a refused value changed the record");
}

Test(tenant, refuses_bad_numbers_rates_and_modes)
{
	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	refuse(&t, "max_running", "1000000001");
	refuse(&t, "rate", "-1");
	refuse(&t, "rate", "inf");
	refuse(&t, "rate", "nan");
	refuse(&t, "rate", "0x10");
	refuse(&t, "rate", "2000000");
	refuse(&t, "burst", "1000001");
	refuse(&t, "ceiling.memory_bytes", "1k");
	refuse(&t, "ceiling.pids", "5M");
	refuse(&t, "storage_quota_bytes", "2000T");
	cr_expect_str_eq(refuse(&t, "net", "inet"), "field 'net': expected a "
	    "comma-separated list of none, unix, allow (each once), or empty for the "
	    "host's, got 'inet'");
	refuse(&t, "net", "none,none");
	refuse(&t, "net", "none,");
	refuse(&t, "v", "2");
	set(&t, "net", " none , unix ");
	cr_expect_eq(t.net_mask, 3);
	set(&t, "ceiling.memory_bytes", "0");
	cr_expect_eq(t.ceiling.memory_bytes, 0);
}

Test(tenant, refuses_unknown_fields_and_nul_bytes)
{
	const char *f[] = { "weight", "colour" }, *v[] = { "2", "red" };
	size_t fl[] = { 6, 6 }, vl[] = { 1, 3 };

	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	cr_expect_str_eq(refuse(&t, "colour", "red"), "unknown field 'colour'");
	cr_expect_eq(tenant_conf_set(&t, "weight", 6, "2\0" "0", 3, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'weight': holds a NUL byte");
	tenant_conf_free(&t);
	cr_expect_eq(tenant_hash_decode(&t, "a", f, fl, v, vl, 2, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "tenant 'a': unknown field 'colour'");
}

Test(tenant, refuses_bad_names)
{
	char big[80];

	memset(big, 'a', 65);
	big[65] = '\0';
	cr_expect_eq(tenant_conf_init(&t, "", &e), -EINVAL);
	cr_expect_eq(tenant_conf_init(&t, "a b", &e), -EINVAL);
	cr_expect_eq(tenant_conf_init(&t, "a:b", &e), -EINVAL);
	cr_expect_eq(tenant_conf_init(&t, "a}", &e), -EINVAL);
	cr_expect_eq(tenant_conf_init(&t, "a*", &e), -EINVAL);
	cr_expect_eq(tenant_conf_init(&t, big, &e), -EINVAL);
	big[64] = '\0';
	cr_expect_eq(tenant_conf_init(&t, big, &e), 0);
}

Test(tenant, bounds_the_deny_list)
{
	char pat[TENANT_DENY_LEN_MAX + 2], *text;
	size_t len = 0;

	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	for (int i = 0; i < TENANT_DENY_MAX; i++) {
		snprintf(pat, sizeof(pat), "*bad%d*", i);
		cr_assert_eq(tenant_deny_add(&t, pat, &e), 0, "%s", e.msg);
	}
	cr_expect_eq(tenant_deny_add(&t, "*one-too-many*", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'deny': more than 64 patterns");
	tenant_deny_clear(&t);
	memset(pat, 'x', TENANT_DENY_LEN_MAX + 1);
	pat[TENANT_DENY_LEN_MAX + 1] = '\0';
	cr_expect_eq(tenant_deny_add(&t, pat, &e), -EINVAL);
	pat[TENANT_DENY_LEN_MAX] = '\0';
	cr_expect_eq(tenant_deny_add(&t, pat, &e), 0);
	cr_expect_eq(tenant_deny_add(&t, "", &e), -EINVAL);
	cr_expect_eq(tenant_deny_add(&t, "a\tb", &e), -EINVAL);
	cr_expect_eq(tenant_deny_add(&t, "\xff\xfe", &e), -EINVAL);
	/* The hash form: 65 patterns, empty ones and trailing newlines. */
	text = calloc(1, 65 * 8 + 1);
	for (int i = 0; i < 65; i++)
		len += (size_t)sprintf(text + len, "%s*p%02d*", i ? "\n" : "", i);
	refuse(&t, "deny", text);
	free(text);
	cr_expect_str_eq(refuse(&t, "deny", "a\n\nb"), "field 'deny': pattern 2: "
	    "empty pattern");
	refuse(&t, "deny", "a\n");
	cr_expect_eq(t.ndeny, 1, "a refused deny list changed the record");
	set(&t, "deny", "");
	cr_expect_eq(t.ndeny, 0);
}

Test(tenant, deny_patterns_match_the_whole_command_text)
{
	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	set(&t, "deny", "*curl *\nrm -rf /*");
	cr_expect_eq(tenant_deny_match(&t, "curl http://x"), 0);
	cr_expect_eq(tenant_deny_match(&t, "echo; curl x"), 0);
	cr_expect_eq(tenant_deny_match(&t, "rm -rf /tmp/x"), 1);
	cr_expect_eq(tenant_deny_match(&t, "sudo rm -rf /"), -1);
	cr_expect_eq(tenant_deny_match(&t, "echo curly"), -1);
}

Test(tenant, burst_and_net_helpers)
{
	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	t.rate = 2.5;
	cr_expect_eq(tenant_burst(&t), 3);
	t.rate = 0.2;
	cr_expect_eq(tenant_burst(&t), 1);
	t.burst = 9;
	cr_expect_eq(tenant_burst(&t), 9);
	set(&t, "net", "none");
	cr_expect(tenant_net_allowed(&t, NET_NONE));
	cr_expect_not(tenant_net_allowed(&t, NET_UNIX));
}

Test(tenant, check_catches_a_struct_filled_by_hand)
{
	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	t.weight = 0;
	cr_expect_eq(tenant_conf_check(&t, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'weight': must be 1..1000, got 0");
	t.weight = 1;
	t.ceiling.files = 3;
	cr_expect_eq(tenant_conf_check(&t, &e), -EINVAL);
	t.ceiling.files = 0;
	t.net_mask = 1u << 7;
	cr_expect_eq(tenant_conf_check(&t, &e), -EINVAL);
}

Test(tenant, key_names_stay_outside_the_tenants_own_pattern)
{
	char k[KEY_MAX], user[80];

	cr_expect_eq(tenant_key_set(k, "sandq"), 13);
	cr_expect_str_eq(k, "sandq:tenants");
	tenant_key_gen(k, "sandq");
	cr_expect_str_eq(k, "sandq:tenants:gen");
	cr_expect_gt(tenant_key_conf(k, "sandq", "a"), 0);
	cr_expect_str_eq(k, "sandq:tenant:a");
	cr_expect_eq(tenant_key_conf(k, "sandq", "a}"), -EINVAL);
	cr_expect_gt(tenant_acl_user(user, sizeof(user), "a"), 0);
	cr_expect_str_eq(user, "sandq-a");
}

Test(tenant, acl_rules_grant_only_the_clients_commands)
{
	static const char *const want_new[] = {
		"reset", "on", "resetpass",
		"#0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"resetkeys", "%R~sandq:{a}:*", "~sandq:{a}:done:*",
		"resetchannels", "&sandq:{a}:*", "clearselectors", "-@all",
		"+get", "+blpop", "+xrange", "+xrevrange", "+xread", "+xlen", "+ping",
		"(+xadd %W~sandq:{a}:jobs)",
		"(+hget +hset +hdel +hgetall ~sandq:{a}:images)",
	};
	const char *argv[TENANT_ACL_ARGS_MAX];
	char buf[4096];
	int n;

	n = tenant_acl_rules("sandq", "a",
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	    true, false, argv, TENANT_ACL_ARGS_MAX, buf, sizeof(buf));
	cr_assert_eq(n, (int)(sizeof(want_new) / sizeof(want_new[0])));
	for (int i = 0; i < n; i++)
		cr_expect_str_eq(argv[i], want_new[i]);
	/* A refresh keeps on/off and the password; SELECT only with a db. */
	n = tenant_acl_rules("sandq", "a", NULL, false, true, argv,
	    TENANT_ACL_ARGS_MAX, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_expect_str_eq(argv[0], "resetkeys");
	cr_expect_str_eq(argv[n - 3], "+select");
	for (int i = 0; i < n; i++) {
		cr_expect_neq(strcmp(argv[i], "on"), 0);
		cr_expect_neq(strcmp(argv[i], "reset"), 0);
		cr_expect_neq(strcmp(argv[i], "resetpass"), 0);
	}
	cr_expect_eq(tenant_acl_rules("sandq", "a*", NULL, true, false, argv,
	    TENANT_ACL_ARGS_MAX, buf, sizeof(buf)), -EINVAL);
	cr_expect_eq(tenant_acl_rules("sandq", "a", "short", true, false, argv,
	    TENANT_ACL_ARGS_MAX, buf, sizeof(buf)), -EINVAL);
	cr_expect_eq(tenant_acl_rules("sandq", "a", NULL, true, false, argv, 3,
	    buf, sizeof(buf)), -ENAMETOOLONG);
	cr_expect_eq(tenant_acl_rules("sandq", "a", NULL, true, false, argv,
	    TENANT_ACL_ARGS_MAX, buf, 40), -ENAMETOOLONG);
}

Test(tenant, image_sources_are_checked_patterns_listed_once)
{
	char *text, pat[40];
	size_t len = 0;

	cr_assert_eq(tenant_conf_init(&t, "a", &e), 0);
	set(&t, "image_sources", "host,docker://r.io:5000/*");
	cr_assert_eq(t.nimage_sources, 2);
	cr_expect_str_eq(t.image_sources[0], "host");
	cr_expect_str_eq(t.image_sources[1], "docker://r.io:5000/*");
	cr_expect_str_eq(refuse(&t, "image_sources", "host, docker://registry/*"),
	    "field 'image_sources': pattern 2: registry host 'registry': needs a "
	    "'.', a port or to be localhost (skopeo would read it as a folder of "
	    "Docker Hub)");
	cr_expect_str_eq(refuse(&t, "image_sources", "oci:/a/*,oci:/a/*"),
	    "field 'image_sources': pattern 2 is listed twice");
	cr_expect_str_eq(refuse(&t, "image_sources", "host,,oci:/a/*"),
	    "field 'image_sources': an empty pattern");
	cr_expect_str_eq(refuse(&t, "image_sources", "host,"),
	    "field 'image_sources': an empty pattern");
	cr_expect_str_eq(refuse(&t, "image_sources", "oci:/a\x1b[2J/*"),
	    "field 'image_sources': pattern 1: byte 0x1b at offset 6: a pattern is "
	    "printable ASCII without spaces");
	cr_expect_str_eq(refuse(&t, "image_sources", "docker://r.io/a:v1"),
	    "field 'image_sources': pattern 1: a pattern names no tag or digest");
	/* 33 patterns. */
	text = calloc(1, 33 * sizeof(pat));
	for (int i = 0; i < 33; i++)
		len += (size_t)sprintf(text + len, "%soci:/p%02d/*", i ? "," : "", i);
	cr_expect_str_eq(refuse(&t, "image_sources", text),
	    "field 'image_sources': more than 32 patterns");
	free(text);
	cr_expect_eq(t.nimage_sources, 2, "a refused list changed the record");
	set(&t, "image_sources", "  ");
	cr_expect_eq(t.nimage_sources, 0, "blank: the host's list");
	cr_expect_null(t.image_sources);
	t.image_sources = calloc(1, sizeof(char *));
	t.image_sources[0] = strdup("oci:relative/*");
	t.nimage_sources = 1;
	cr_expect_eq(tenant_conf_check(&t, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'image_sources': pattern 1: path 'relative/*': "
	    "must be absolute");
}

Test(tenant, copy_is_deep)
{
	fill(&t);
	tenant_conf_copy(&u, &t);
	expect_same(&t, &u);
	cr_expect_neq(u.deny, t.deny);
	cr_expect_neq(u.image_sources, t.image_sources);
	cr_expect_neq(u.image_sources[0], t.image_sources[0]);
	tenant_conf_free(&t);
	cr_expect_str_eq(u.image_sources[1], "oci:/srv/img/*", "u outlives t's lists");
}
