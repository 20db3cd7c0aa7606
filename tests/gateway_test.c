/*
 * gateway_test.c - sandq-gateway's first slice (issue 17) against a real
 * redis-server, sandqd and gateway: health and readiness, the 401s, a job
 * submitted over HTTP that runs and whose result a long poll returns, the
 * refusals that enqueue nothing, and a tenant's token that cannot read
 * another tenant's result.
 *
 * Each test starts its own redis-server and sandqd (tests/harness.c,
 * tenants default, a and b) and one gateway on a free loopback port,
 * stopped by its pid. Tokens are made as `sandq tenant token add` will:
 * token_new(), and the hashed record written into PREFIX:tokens directly
 * (queue/token.c). Requests go through libcurl, as any HTTP client's would.
 * Needs root, like every test that runs sandqd.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/err.h"
#include "../queue/token.h"
#include "harness.h"

static struct harness H;
static pid_t gw_pid = -1;
static char gw_base[64];

/* A GET, or a POST when body is set; returns the body, *status the code. */
static char *
http(const char *method, const char *path, const char *token, const char *body,
    long *status)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hs = NULL;
	char url[512], auth[128], *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);

	cr_assert(c != NULL && f != NULL);
	snprintf(url, sizeof(url), "%s%s", gw_base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 90L);
	if (token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		hs = curl_slist_append(hs, auth);
	}
	if (body) {
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

/* The response's error code, "" when it has none. */
static char *
error_code(const char *text)
{
	json_t *o = json_loads(text, 0, NULL);
	const char *s = NULL;
	char *r;

	cr_assert(o != NULL, "not JSON: %s", text);
	json_unpack(o, "{s:{s:s}}", "error", "code", &s);
	r = strdup(s ? s : "");
	json_decref(o);
	return r;
}

/* Starts the gateway on a free port against redis_url; waits for /healthz. */
static pid_t
gateway_start(const char *redis_url, const char *const *extra)
{
	char gwbin[512], listen[64], log[400];
	const char *argv[16];
	int port = 0, lfd = harness_listen(&port), n = 0;
	pid_t parent = getpid(), pid;

	close(lfd);	/* the port is free; the gateway binds it at once */
	snprintf(gwbin, sizeof(gwbin), "%s/sandq-gateway", harness_build_dir());
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(gw_base, sizeof(gw_base), "http://127.0.0.1:%d", port);
	snprintf(log, sizeof(log), "%s/gateway.log", H.dir);
	argv[n++] = gwbin;
	argv[n++] = "--listen";
	argv[n++] = listen;
	argv[n++] = "--redis";
	argv[n++] = redis_url;
	while (extra && *extra)
		argv[n++] = *extra++;
	argv[n] = NULL;
	if ((pid = fork()) == 0) {
		FILE *lf = fopen(log, "a");

		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(1);
		if (lf)
			dup2(fileno(lf), 2);
		execv(argv[0], (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	cr_assert(pid > 0);
	for (int i = 0; i < 100; i++) {
		CURL *c = curl_easy_init();
		CURLcode rc;
		char url[128];
		FILE *null = fopen("/dev/null", "w");

		snprintf(url, sizeof(url), "%s/healthz", gw_base);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
		rc = curl_easy_perform(c);
		curl_easy_cleanup(c);
		fclose(null);
		if (rc == CURLE_OK)
			return pid;
		usleep(50 * 1000);
	}
	cr_assert_fail("the gateway did not answer /healthz (log %s)", log);
	return -1;
}

static void
gateway_stop(pid_t pid)
{
	int st;

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
}

/* A new token of tenant (admin when tenant is ""), its record in Redis. */
static void
token_make(const char *tenant, char tok[TOKEN_LEN + 1])
{
	struct token_record r = { .admin = tenant[0] == '\0', .created_at = 1 };
	char hash[TOKEN_HASH_HEX + 1], *json = NULL;
	struct err e = { 0 };
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *reply;

	snprintf(r.tenant, sizeof(r.tenant), "%s", tenant);
	snprintf(r.name, sizeof(r.name), "test");
	cr_assert_eq(token_new(tok), 0);
	token_hash_hex(tok, TOKEN_LEN, hash);
	cr_assert_eq(token_record_encode(&r, &json, &e), 0, "%s", e.msg);
	cr_assert(rc != NULL && rc->err == 0);
	reply = redisCommand(rc, "HSET sandq:tokens %s %s", hash, json);
	cr_assert(reply != NULL && reply->type == REDIS_REPLY_INTEGER);
	freeReplyObject(reply);
	redisFree(rc);
	free(json);
}

static long long
xlen(const char *tenant)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *reply = redisCommand(rc, "XLEN sandq:{%s}:jobs", tenant);
	long long n;

	cr_assert(reply != NULL && reply->type == REDIS_REPLY_INTEGER);
	n = reply->integer;
	freeReplyObject(reply);
	redisFree(rc);
	return n;
}

static void
setup(void)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	curl_global_init(CURL_GLOBAL_DEFAULT);
	harness_start(&H, 2, extra);
}

static void
teardown(void)
{
	gateway_stop(gw_pid);
	gw_pid = -1;
	harness_stop(&H);
}

TestSuite(gateway, .init = setup, .fini = teardown, .timeout = 180);

Test(gateway, health_readiness_and_every_401)
{
	static const char *const badredis[] = { NULL };
	char tok[TOKEN_LEN + 1], *b, *code;
	long st;
	pid_t other;

	gw_pid = gateway_start(H.url, NULL);
	b = http("GET", "/healthz", NULL, NULL, &st);
	cr_assert_eq(st, 200);
	cr_assert_str_eq(b, "{\"ok\":true}");
	free(b);
	b = http("GET", "/readyz", NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);

	/* No header, a header of the wrong shape, a token nobody made. */
	b = http("GET", "/v1/jobs/x1", NULL, NULL, &st);
	code = error_code(b);
	cr_assert_eq(st, 401);
	cr_assert_str_eq(code, "unauthorized");
	free(b), free(code);
	b = http("POST", "/v1/jobs", "not-a-token", "{\"op\":\"sh\",\"script\":\"true\"}", &st);
	code = error_code(b);
	cr_assert_eq(st, 401);
	cr_assert_str_eq(code, "unauthorized");
	free(b), free(code);
	cr_assert_eq(token_new(tok), 0);
	b = http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\"}", &st);
	code = error_code(b);
	cr_assert_eq(st, 401, "%s", b);
	cr_assert_str_eq(code, "unauthorized");
	free(b), free(code);
	cr_assert_eq(xlen("default"), 0);

	/* A gateway whose Redis does not answer is alive but not ready. */
	other = gateway_start("redis://127.0.0.1:1", badredis);
	b = http("GET", "/healthz", NULL, NULL, &st);
	cr_assert_eq(st, 200);
	free(b);
	b = http("GET", "/readyz", NULL, NULL, &st);
	code = error_code(b);
	cr_assert_eq(st, 503, "%s", b);
	cr_assert_str_eq(code, "unavailable");
	free(b), free(code);
	gateway_stop(other);
}

Test(gateway, a_job_submitted_runs_and_a_long_poll_returns_its_output)
{
	char tok[TOKEN_LEN + 1], *b, *code, path[256];
	const char *id = NULL, *out = NULL, *status = NULL;
	json_t *o;
	long st;
	time_t t0;

	gw_pid = gateway_start(H.url, NULL);
	token_make("a", tok);
	b = http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"id\":\"gw-1\","
	    "\"script\":\"read x; echo \\\"hello $x $GREETING\\\"\","
	    "\"stdin\":\"gateway\\n\",\"env\":{\"GREETING\":\"hi\"},"
	    "\"limits\":{\"wall_ms\":20000}}", &st);
	cr_assert_eq(st, 202, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s}", "id", &id) == 0);
	cr_assert_str_eq(id, "gw-1");
	json_decref(o);
	free(b);

	b = http("GET", "/v1/jobs/gw-1?wait=60", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s, s:s}", "status", &status, "stdout",
	    &out) == 0, "%s", b);
	cr_assert_str_eq(status, "ok");
	cr_assert_str_eq(out, "hello gateway hi\n");
	json_decref(o);
	free(b);

	/* A job with no id gets one; exec with argv runs too. */
	b = http("POST", "/v1/jobs", tok, "{\"op\":\"exec\",\"argv\":[\"printf\",\"%s\","
	    "\"x\"]}", &st);
	cr_assert_eq(st, 202, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s}", "id", &id) == 0);
	cr_assert(strncmp(id, "gw-", 3) == 0);
	snprintf(path, sizeof(path), "/v1/jobs/%s?wait=60", id);
	json_decref(o);
	free(b);
	b = http("GET", path, tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"stdout\":\"x\"") != NULL, "%s", b);
	free(b);

	/* An id with no result: 404 at once, and after the wait it asked. */
	b = http("GET", "/v1/jobs/nope", tok, NULL, &st);
	code = error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	free(b), free(code);
	t0 = time(NULL);
	b = http("GET", "/v1/jobs/nope?wait=2", tok, NULL, &st);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_geq(time(NULL) - t0, 1);
	free(b);
	b = http("GET", "/v1/jobs/nope?wait=61", tok, NULL, &st);
	code = error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "bad_query");
	free(b), free(code);
}

/* POSTs body and checks the status and code, and that nothing was enqueued. */
static void
refused(const char *tok, const char *body, long want, const char *want_code,
    const char *in_msg)
{
	long long before = xlen("a");
	char *b, *code;
	long st;

	b = http("POST", "/v1/jobs", tok, body, &st);
	code = error_code(b);
	cr_assert_eq(st, want, "%s", b);
	cr_assert_str_eq(code, want_code, "%s", b);
	if (in_msg)
		cr_assert(strstr(b, in_msg) != NULL, "%s", b);
	cr_assert_eq(xlen("a"), before);
	free(b), free(code);
}

Test(gateway, refusals_enqueue_nothing)
{
	static const char *const small[] = { "--max-body", "4096", NULL };
	char tok[TOKEN_LEN + 1], admin[TOKEN_LEN + 1], *big;

	gw_pid = gateway_start(H.url, small);
	token_make("a", tok);
	token_make("", admin);
	refused(tok, "{\"op\":\"sh\",", 400, "bad_json", NULL);
	refused(tok, "[1,2]", 400, "bad_json", NULL);
	refused(tok, "{\"op\":\"sh\",\"script\":\"true\",\"colour\":\"red\"}", 400,
	    "unknown_field", "colour");
	refused(tok, "{\"op\":\"sh\",\"script\":\"true\",\"limits\":{\"wall\":1}}", 400,
	    "unknown_field", "limits.wall");
	refused(tok, "{\"op\":\"sh\",\"script\":\"true\",\"tenant\":\"b\"}", 400,
	    "unknown_field", "tenant");
	refused(tok, "{\"op\":\"sh\",\"script\":42}", 400, "invalid_job", "script");
	refused(tok, "{\"op\":\"exec\",\"argv\":[]}", 400, "invalid_job", "argv");
	refused(tok, "{\"op\":\"sh\",\"script\":\"true\",\"id\":\"a b\"}", 400,
	    "invalid_job", "id");
	refused(tok, "{\"op\":\"image.pull\",\"image\":\"host\"}", 400,
	    "unsupported_op", NULL);
	refused(admin, "{\"op\":\"sh\",\"script\":\"true\"}", 403, "admin_token", NULL);
	big = malloc(8192);
	snprintf(big, 8192, "{\"op\":\"sh\",\"script\":\"%0*d\"}", 6000, 0);
	refused(tok, big, 413, "body_too_large", NULL);
	free(big);
	cr_assert_eq(xlen("a"), 0);
}

Test(gateway, a_tenants_token_reaches_only_its_tenant)
{
	char ta[TOKEN_LEN + 1], tb[TOKEN_LEN + 1], *b, *code;
	long st;

	gw_pid = gateway_start(H.url, NULL);
	token_make("a", ta);
	token_make("b", tb);
	b = http("POST", "/v1/jobs", ta, "{\"op\":\"sh\",\"id\":\"secret-1\","
	    "\"script\":\"echo only-a\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	cr_assert_eq(xlen("a"), 1);
	cr_assert_eq(xlen("b"), 0);
	b = http("GET", "/v1/jobs/secret-1?wait=60", ta, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "only-a") != NULL, "%s", b);
	free(b);
	/* b asks for a's id: b's keys hold no such result. */
	b = http("GET", "/v1/jobs/secret-1", tb, NULL, &st);
	code = error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	cr_assert(strstr(b, "only-a") == NULL);
	free(b), free(code);
}
