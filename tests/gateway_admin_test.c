/*
 * gateway_admin_test.c - what an admin token reaches through sandq-gateway
 * (issue 17): the operator's views under /v1/admin (status, dead letters
 * and their retry, the audit trail) and a tenant's routes named with
 * X-Sandq-Tenant; and that a tenant's token reaches none of it.
 *
 * One redis-server, one sandqd (tenants default, a and b, 2 workers) and
 * one gateway per test (tests/harness.c, tests/gwharness.c). Dead letters
 * are written into the stream as sandqd writes them, with a payload
 * encoded by the gateway's own JSON reader and proto's encoder. Needs
 * root, like every test that runs sandqd.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gateway/jobjson.h"
#include "../proto/job.h"
#include "../queue/token.h"
#include "gwharness.h"
#include "harness.h"

static struct harness H;
static pid_t gw_pid = -1;

static void
setup(void)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	curl_global_init(CURL_GLOBAL_DEFAULT);
	harness_start(&H, 2, extra);
	gw_pid = gwh_start(&H, H.url, NULL);
}

static void
teardown(void)
{
	gwh_stop(gw_pid);
	gw_pid = -1;
	harness_stop(&H);
}

TestSuite(gateway_admin, .init = setup, .fini = teardown, .timeout = 180);

static size_t
sink(char *p, size_t size, size_t n, void *arg)
{
	FILE *f = arg;

	return fwrite(p, size, n, f);
}

/* A request with an X-Sandq-Tenant header (tenant NULL: none); the body, owned. */
static char *
http_as(const char *method, const char *path, const char *token, const char *tenant,
    const char *body, long *status)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hs = NULL;
	char url[512], auth[128], th[160], *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);

	snprintf(url, sizeof(url), "%s%s", gwh_base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 90L);
	if (token != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		hs = curl_slist_append(hs, auth);
	}
	if (tenant != NULL) {
		snprintf(th, sizeof(th), "X-Sandq-Tenant: %s", tenant);
		hs = curl_slist_append(hs, th);
	}
	if (body != NULL) {
		hs = curl_slist_append(hs, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK, "%s %s", method, path);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(hs);
	curl_easy_cleanup(c);
	fclose(f);
	return out;
}

/* The answer's error code, or "" (static). */
static const char *
code_of(const char *text)
{
	static char code[64];
	char *c = gwh_error_code(text);

	snprintf(code, sizeof(code), "%s", c);
	free(c);
	return code;
}

static redisContext *
redis(void)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);

	cr_assert(rc != NULL && rc->err == 0);
	return rc;
}

Test(gateway_admin, status_shows_hosts_and_tenants_to_an_admin_only)
{
	char admin[TOKEN_LEN + 1], tok[TOKEN_LEN + 1], *b;
	json_t *o, *hosts, *tenants, *t;
	bool saw_a = false;
	long st;
	size_t i;

	gwh_token_make(&H, "", admin);
	gwh_token_make(&H, "a", tok);
	b = http_as("GET", "/v1/admin/status", NULL, NULL, NULL, &st);
	cr_assert_eq(st, 401, "%s", b);
	free(b);
	b = http_as("GET", "/v1/admin/status", tok, NULL, NULL, &st);
	cr_assert_eq(st, 403, "%s", b);
	cr_assert_str_eq(code_of(b), "not_admin");
	free(b);
	/* A tenant's token naming another tenant is still its own tenant's. */
	b = http_as("GET", "/v1/admin/status", tok, "b", NULL, &st);
	cr_assert_eq(st, 403, "%s", b);
	free(b);

	/* sandqd writes its status every 2 s: wait for the first. */
	for (int n = 0;; n++) {
		b = http_as("GET", "/v1/admin/status", admin, NULL, NULL, &st);
		cr_assert_eq(st, 200, "%s", b);
		o = json_loads(b, 0, NULL);
		cr_assert(o != NULL, "%s", b);
		free(b);
		hosts = json_object_get(o, "hosts");
		if (json_array_size(hosts) == 1 || n == 100)
			break;
		json_decref(o);
		usleep(100 * 1000);
	}
	cr_assert_eq(json_array_size(hosts), 1);
	cr_expect_eq(json_integer_value(json_object_get(json_array_get(hosts, 0),
	    "workers")), 2);
	cr_expect(json_is_true(json_object_get(json_array_get(hosts, 0), "live")));
	cr_expect_eq(json_integer_value(json_object_get(o, "workers")), 2);
	tenants = json_object_get(o, "tenants");
	json_array_foreach(tenants, i, t)
		if (strcmp(json_string_value(json_object_get(t, "name")), "a") == 0)
			saw_a = json_is_integer(json_object_get(t, "queued"));
	cr_expect(saw_a, "tenant a in the status with its queue");
	json_decref(o);

	b = http_as("GET", "/v1/admin/status?x=1", admin, NULL, NULL, &st);
	cr_expect_eq(st, 400, "%s", b);
	cr_expect_str_eq(code_of(b), "bad_query");
	free(b);
	b = http_as("POST", "/v1/admin/status", admin, NULL, "{}", &st);
	cr_expect_eq(st, 405, "%s", b);
	free(b);
	b = http_as("GET", "/v1/admin/nothing", admin, NULL, NULL, &st);
	cr_expect_eq(st, 404, "%s", b);
	free(b);
}

Test(gateway_admin, an_admin_acts_as_the_tenant_it_names_and_no_other)
{
	char admin[TOKEN_LEN + 1], ta[TOKEN_LEN + 1], tb[TOKEN_LEN + 1], *b;
	long st;

	gwh_token_make(&H, "", admin);
	gwh_token_make(&H, "a", ta);
	gwh_token_make(&H, "b", tb);

	/* Without a tenant, as before: refused, nothing enqueued. */
	b = http_as("POST", "/v1/jobs", admin, NULL, "{\"op\":\"sh\",\"script\":\"true\"}",
	    &st);
	cr_assert_eq(st, 403, "%s", b);
	cr_assert_str_eq(code_of(b), "admin_token");
	free(b);
	b = http_as("POST", "/v1/jobs", admin, "nobody", "{\"op\":\"sh\",\"script\":\"true\"}",
	    &st);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code_of(b), "unknown_tenant");
	free(b);
	b = http_as("POST", "/v1/jobs", admin, "a/../b", "{\"op\":\"sh\",\"script\":\"true\"}",
	    &st);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code_of(b), "bad_tenant");
	free(b);
	cr_assert_eq(gwh_xlen(&H, "a"), 0);
	cr_assert_eq(gwh_xlen(&H, "b"), 0);

	/* As a (a tenant of sandqd's config, known from its host's status). */
	for (int n = 0;; n++) {
		b = http_as("POST", "/v1/jobs", admin, "a",
		    "{\"op\":\"sh\",\"script\":\"echo as-a\",\"id\":\"adm-1\"}", &st);
		if (st != 404 || n == 100)
			break;
		free(b);
		usleep(100 * 1000);
	}
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/adm-1?wait=30", ta, NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"stdout\":\"as-a\\n\"") != NULL, "%s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/adm-1", admin, "a", NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/adm-1", tb, NULL, NULL, &st);
	cr_assert_eq(st, 404, "b reads a's result: %s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/adm-1", admin, "b", NULL, &st);
	cr_assert_eq(st, 404, "the admin as b reads a's result: %s", b);
	free(b);
	/* A tenant's token with the header: the header changes nothing. */
	b = http_as("POST", "/v1/jobs", tb, "a",
	    "{\"op\":\"sh\",\"script\":\"true\",\"id\":\"adm-2\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/adm-2?wait=30", tb, NULL, NULL, &st);
	cr_assert_eq(st, 200, "the job is b's: %s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/adm-2", ta, NULL, NULL, &st);
	cr_assert_eq(st, 404, "%s", b);
	free(b);
}

/* XADDs a dead letter for tenant a; payload is a job's JSON or NULL (cut). */
static void
dead_letter(redisContext *rc, const char *id, const char *json)
{
	struct gw_fail f = { 0 };
	struct job *j = NULL;
	char *buf = NULL;
	size_t len = 0;
	redisReply *r;

	if (json != NULL) {
		cr_assert_eq(jobjson_job(json, strlen(json), &j, &f), 0, "%s", f.msg);
		cr_assert_eq(payload_job_encode(j, &buf, &len), 0);
		job_free(j);
	}
	r = redisCommand(rc, "XADD sandq:{a}:dead * entry 1-1 id %s reason %s "
	    "attempts %s payload %b payload_truncated %s", id, "worker lost",
	    "[{\"attempt\":1,\"host\":\"h\",\"reason\":\"worker lost\"}]",
	    buf ? buf : "x", buf ? len : (size_t)1, buf ? "0" : "1");
	cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
	freeReplyObject(r);
	free(buf);
}

Test(gateway_admin, dead_letters_are_listed_and_retried)
{
	char admin[TOKEN_LEN + 1], ta[TOKEN_LEN + 1], *b, path[256];
	redisContext *rc = redis();
	json_t *o, *dead, *cut, *whole;
	long st;

	gwh_token_make(&H, "", admin);
	gwh_token_make(&H, "a", ta);
	dead_letter(rc, "dl-1", "{\"op\":\"sh\",\"script\":\"echo again\",\"id\":\"dl-1\"}");
	dead_letter(rc, "dl-2", NULL);

	b = http_as("GET", "/v1/admin/dead?tenant=a", ta, NULL, NULL, &st);
	cr_assert_eq(st, 403, "%s", b);
	free(b);
	b = http_as("GET", "/v1/admin/dead", admin, NULL, NULL, &st);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code_of(b), "bad_query");
	free(b);
	b = http_as("GET", "/v1/admin/dead?tenant=a&limit=0", admin, NULL, NULL, &st);
	cr_assert_eq(st, 400, "%s", b);
	free(b);

	b = http_as("GET", "/v1/admin/dead?tenant=a", admin, NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	free(b);
	dead = json_object_get(o, "dead");
	cr_assert_eq(json_array_size(dead), 2);
	cut = json_array_get(dead, 0);		/* newest first */
	whole = json_array_get(dead, 1);
	cr_assert_str_eq(json_string_value(json_object_get(cut, "id")), "dl-2");
	cr_assert(json_is_false(json_object_get(cut, "retryable")));
	cr_assert_str_eq(json_string_value(json_object_get(whole, "id")), "dl-1");
	cr_assert(json_is_true(json_object_get(whole, "retryable")));
	cr_assert_eq(json_array_size(json_object_get(whole, "attempts")), 1);

	/* The cut one cannot be retried; the whole one runs again. */
	snprintf(path, sizeof(path), "/v1/admin/dead/a/%s/retry",
	    json_string_value(json_object_get(cut, "dead_id")));
	b = http_as("POST", path, admin, NULL, NULL, &st);
	cr_assert_eq(st, 409, "%s", b);
	cr_assert_str_eq(code_of(b), "not_retryable");
	free(b);
	snprintf(path, sizeof(path), "/v1/admin/dead/a/%s/retry",
	    json_string_value(json_object_get(whole, "dead_id")));
	b = http_as("POST", path, ta, NULL, NULL, &st);
	cr_assert_eq(st, 403, "a tenant retries: %s", b);
	free(b);
	b = http_as("POST", path, admin, NULL, NULL, &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/dl-1?wait=30", ta, NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"stdout\":\"again\\n\"") != NULL, "%s", b);
	free(b);
	b = http_as("POST", path, admin, NULL, NULL, &st);
	cr_assert_eq(st, 404, "retried twice: %s", b);
	free(b);
	b = http_as("GET", "/v1/admin/dead?tenant=a", admin, NULL, NULL, &st);
	cr_assert(strstr(b, "dl-1") == NULL, "the retried letter stays: %s", b);
	free(b);
	b = http_as("POST", "/v1/admin/dead/a/12-x/retry", admin, NULL, NULL, &st);
	cr_assert_eq(st, 404, "%s", b);
	free(b);
	json_decref(o);
	redisFree(rc);
}

Test(gateway_admin, the_audit_trail_pages_filters_and_names_a_damaged_entry)
{
	char admin[TOKEN_LEN + 1], ta[TOKEN_LEN + 1], *b, path[256];
	redisContext *rc = redis();
	redisReply *r;
	json_t *o, *ev, *e;
	const char *next;
	size_t i;
	long st;

	gwh_token_make(&H, "", admin);
	gwh_token_make(&H, "a", ta);
	b = http_as("POST", "/v1/jobs", ta, NULL,
	    "{\"op\":\"sh\",\"script\":\"true\",\"id\":\"aud-1\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	b = http_as("GET", "/v1/jobs/aud-1?wait=30", ta, NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);
	/* Something a tenant's own Redis user could write into its stream. */
	r = redisCommand(rc, "XADD sandq:{a}:audit * time 1 category \x1b[2J");
	cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
	freeReplyObject(r);

	b = http_as("GET", "/v1/admin/audit?tenant=a&limit=1", admin, NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	free(b);
	ev = json_object_get(o, "events");
	cr_assert_eq(json_array_size(ev), 1);
	e = json_array_get(ev, 0);
	cr_assert(json_is_string(json_object_get(e, "error")), "the damaged entry");
	next = json_string_value(json_object_get(o, "next"));
	cr_assert(next != NULL);

	/* The next page: the job's events (received, started, finished). */
	snprintf(path, sizeof(path), "/v1/admin/audit?tenant=a&limit=100&before=%s", next);
	json_decref(o);
	b = http_as("GET", path, admin, NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	free(b);
	ev = json_object_get(o, "events");
	cr_assert_geq(json_array_size(ev), 2);
	json_array_foreach(ev, i, e) {
		cr_assert(json_object_get(e, "error") == NULL, "a good event as damaged");
		cr_assert(json_is_string(json_object_get(e, "category")));
	}
	cr_assert(json_is_null(json_object_get(o, "next")), "a page not full has no next");
	json_decref(o);

	/* category: only those. */
	b = http_as("GET", "/v1/admin/audit?tenant=a&category=sandbox", admin, NULL, NULL,
	    &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	free(b);
	cr_assert_eq(json_array_size(json_object_get(o, "events")), 0);
	cr_assert_geq(json_integer_value(json_object_get(o, "scanned")), 3);
	json_decref(o);
	b = http_as("GET", "/v1/admin/audit?tenant=a&before=x", admin, NULL, NULL, &st);
	cr_assert_eq(st, 400, "%s", b);
	free(b);
	redisFree(rc);
}
