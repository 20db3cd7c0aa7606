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
#include "gwharness.h"
#include "harness.h"

static struct harness H;
static pid_t gw_pid = -1;







static void
setup(void)
{
	static const char *const extra[] = { "--set", "tenants=default,a,b",
		"--set", "net_modes=none, unix, allow", "--set", "net_allow=pypi.example:80",
		NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	curl_global_init(CURL_GLOBAL_DEFAULT);
	harness_start(&H, 2, extra);
}

static void
teardown(void)
{
	gwh_stop(gw_pid);
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

	gw_pid = gwh_start(&H, H.url, NULL);
	b = gwh_http("GET", "/healthz", NULL, NULL, &st);
	cr_assert_eq(st, 200);
	cr_assert_str_eq(b, "{\"ok\":true}");
	free(b);
	b = gwh_http("GET", "/readyz", NULL, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);

	/* No header, a header of the wrong shape, a token nobody made. */
	b = gwh_http("GET", "/v1/jobs/x1", NULL, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 401);
	cr_assert_str_eq(code, "unauthorized");
	free(b), free(code);
	b = gwh_http("POST", "/v1/jobs", "not-a-token", "{\"op\":\"sh\",\"script\":\"true\"}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 401);
	cr_assert_str_eq(code, "unauthorized");
	free(b), free(code);
	cr_assert_eq(token_new(tok), 0);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\"}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 401, "%s", b);
	cr_assert_str_eq(code, "unauthorized");
	free(b), free(code);
	cr_assert_eq(gwh_xlen(&H, "default"), 0);

	/*
	 * A removed token is refused within the cache's second (gateway/
	 * tokcache.c): known, then deleted from Redis, then 401.
	 */
	gwh_token_make(&H, "a", tok);
	b = gwh_http("GET", "/v1/jobs/x1", tok, NULL, &st);
	cr_assert_eq(st, 404, "a known token: %s", b);
	free(b);
	{
		redisContext *rc = redisConnect("127.0.0.1", H.port);
		char hash_hex[TOKEN_HASH_HEX + 1];
		redisReply *r;

		cr_assert(rc != NULL && rc->err == 0);
		token_hash_hex(tok, strlen(tok), hash_hex);
		r = redisCommand(rc, "HDEL sandq:tokens %s", hash_hex);
		cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
		freeReplyObject(r);
		redisFree(rc);
	}
	st = 0;
	for (int i = 0; i < 50 && st != 401; i++) {
		b = gwh_http("GET", "/v1/jobs/x1", tok, NULL, &st);
		free(b);
		if (st != 401)
			usleep(100 * 1000);
	}
	cr_assert_eq(st, 401, "a removed token still served after 5 s");

	/* A gateway whose Redis does not answer is alive but not ready. */
	other = gwh_start(&H, "redis://127.0.0.1:1", badredis);
	b = gwh_http("GET", "/healthz", NULL, NULL, &st);
	cr_assert_eq(st, 200);
	free(b);
	b = gwh_http("GET", "/readyz", NULL, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 503, "%s", b);
	cr_assert_str_eq(code, "unavailable");
	free(b), free(code);
	gwh_stop(other);
}

Test(gateway, a_job_submitted_runs_and_a_long_poll_returns_its_output)
{
	char tok[TOKEN_LEN + 1], *b, *code, path[256];
	const char *id = NULL, *out = NULL, *status = NULL;
	json_t *o;
	long st;
	time_t t0;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", tok);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"id\":\"gw-1\","
	    "\"script\":\"read x; echo \\\"hello $x $GREETING\\\"\","
	    "\"stdin\":\"gateway\\n\",\"env\":{\"GREETING\":\"hi\"},"
	    "\"limits\":{\"wall_ms\":20000}}", &st);
	cr_assert_eq(st, 202, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s}", "id", &id) == 0);
	cr_assert_str_eq(id, "gw-1");
	json_decref(o);
	free(b);

	b = gwh_http("GET", "/v1/jobs/gw-1?wait=60", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s, s:s}", "status", &status, "stdout",
	    &out) == 0, "%s", b);
	cr_assert_str_eq(status, "ok");
	cr_assert_str_eq(out, "hello gateway hi\n");
	json_decref(o);
	free(b);

	/* A job with no id gets one; exec with argv runs too. */
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"exec\",\"argv\":[\"printf\",\"%s\","
	    "\"x\"]}", &st);
	cr_assert_eq(st, 202, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s}", "id", &id) == 0);
	cr_assert(strncmp(id, "gw-", 3) == 0);
	snprintf(path, sizeof(path), "/v1/jobs/%s?wait=60", id);
	json_decref(o);
	free(b);
	b = gwh_http("GET", path, tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"stdout\":\"x\"") != NULL, "%s", b);
	free(b);

	/* An id with no result: 404 at once, and after the wait it asked. */
	b = gwh_http("GET", "/v1/jobs/nope", tok, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	free(b), free(code);
	t0 = time(NULL);
	b = gwh_http("GET", "/v1/jobs/nope?wait=2", tok, NULL, &st);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_geq(time(NULL) - t0, 1);
	free(b);
	b = gwh_http("GET", "/v1/jobs/nope?wait=61", tok, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "bad_query");
	free(b), free(code);
}

/* POSTs body and checks the status and code, and that nothing was enqueued. */
static void
refused(const char *tok, const char *body, long want, const char *want_code,
    const char *in_msg)
{
	long long before = gwh_xlen(&H, "a");
	char *b, *code;
	long st;

	b = gwh_http("POST", "/v1/jobs", tok, body, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, want, "%s", b);
	cr_assert_str_eq(code, want_code, "%s", b);
	if (in_msg)
		cr_assert(strstr(b, in_msg) != NULL, "%s", b);
	cr_assert_eq(gwh_xlen(&H, "a"), before);
	free(b), free(code);
}

Test(gateway, refusals_enqueue_nothing)
{
	static const char *const small[] = { "--max-body", "4096", NULL };
	char tok[TOKEN_LEN + 1], admin[TOKEN_LEN + 1], *big;

	gw_pid = gwh_start(&H, H.url, small);
	gwh_token_make(&H, "a", tok);
	gwh_token_make(&H, "", admin);
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
	refused(tok, "{\"op\":\"image.push\",\"image\":\"host\"}", 400,
	    "unsupported_op", NULL);
	refused(admin, "{\"op\":\"sh\",\"script\":\"true\"}", 403, "admin_token", NULL);
	big = malloc(8192);
	snprintf(big, 8192, "{\"op\":\"sh\",\"script\":\"%0*d\"}", 6000, 0);
	refused(tok, big, 413, "body_too_large", NULL);
	free(big);
	cr_assert_eq(gwh_xlen(&H, "a"), 0);
}

/*
 * image.pull goes through as any op: sandqd checks the image as for a run
 * (`host` is "nothing to pull": rejected, code image; a registry's pulls
 * are tests/images_*_test.c's), and the result says so.
 */
Test(gateway, an_image_pull_is_submitted_and_answered_by_sandqd)
{
	char tok[TOKEN_LEN + 1], *b;
	const char *status = NULL, *code = NULL;
	json_t *o;
	long st;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", tok);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"image.pull\",\"id\":\"pull-1\","
	    "\"image\":\"host\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/jobs/pull-1?wait=60", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s, s:{s:s}}", "status", &status, "error",
	    "code", &code) == 0, "%s", b);
	cr_assert_str_eq(status, "rejected");
	cr_assert_str_eq(code, "image");
	json_decref(o);
	free(b);
}

/* The result of a job submitted with ?wait=60, parsed (the caller frees it). */
static json_t *
run_waited(const char *tok, const char *body)
{
	long st;
	char *b = gwh_http("POST", "/v1/jobs?wait=60", tok, body, &st);
	json_t *o = json_loads(b, 0, NULL);

	cr_assert_eq(st, 200, "%s -> %s", body, b);
	cr_assert(o != NULL, "%s", b);
	free(b);
	return o;
}

/*
 * "allow" reaches the job: a net "allow" run within the tenant's list runs
 * with the proxy's variables; a pattern outside it is rejected by name.
 */
Test(gateway, a_jobs_allow_list_arrives_and_is_held_to_the_tenants)
{
	char tok[TOKEN_LEN + 1];
	const char *msg;
	json_t *o, *row;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", tok);

	o = run_waited(tok, "{\"op\":\"sh\",\"script\":\"echo $HTTP_PROXY; "
	    "curl -s -o /dev/null http://other.example/\","
	    "\"net\":\"allow\",\"allow\":[\"pypi.example:80\"]}");
	cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "ok", "%s",
	    json_dumps(o, 0));
	cr_expect_str_eq(json_string_value(json_object_get(o, "stdout")),
	    "http://127.0.0.1:3128\n");
	/* The proxy's row for the refused name, in the result's JSON. */
	row = json_array_get(json_object_get(o, "egress"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(row, "host")), "other.example",
	    "%s", json_dumps(o, 0));
	cr_expect(json_is_false(json_object_get(row, "allowed")));
	json_decref(o);
	o = run_waited(tok, "{\"op\":\"sh\",\"script\":\"true\",\"net\":\"allow\","
	    "\"allow\":[\"pypi.example:80\",\"other.example\"]}");
	cr_expect_str_eq(json_string_value(json_object_get(o, "status")), "rejected");
	msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
	cr_expect(msg != NULL && strcmp(msg, "field 'allow': 'other.example' is not "
	    "within tenant 'a''s net_allow") == 0, "%s", json_dumps(o, 0));
	json_decref(o);
}

/* files and files_b64, cases and perms: every field of a job over HTTP. */
Test(gateway, files_cases_and_perms_reach_the_job)
{
	char tok[TOKEN_LEN + 1], *b;
	json_t *o, *cs;
	long st;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", tok);
	o = run_waited(tok, "{\"op\":\"sh\",\"script\":\"cat a.txt; wc -c < d/b.bin\","
	    "\"files\":{\"/workspace/a.txt\":\"hello\"},\"files_b64\":{\"d/b.bin\":\"AP8=\"}}");
	cr_assert_str_eq(json_string_value(json_object_get(o, "stdout")), "hello2\n");
	json_decref(o);

	o = run_waited(tok, "{\"op\":\"sh\",\"script\":\"read x; echo $((x*2))\","
	    "\"cases\":[{\"stdin\":\"2\\n\",\"expect\":\"4\\n\"},"
	    "{\"stdin_b64\":\"Mwo=\",\"expect\":\"7\",\"expect_mode\":\"trim\"}]}");
	cs = json_object_get(json_object_get(o, "data"), "cases");
	cr_assert_eq(json_array_size(cs), 2, "%s", json_dumps(o, 0));
	cr_assert(json_is_true(json_object_get(json_array_get(cs, 0), "pass")),
	    "case 1 passes");
	cr_assert(json_is_false(json_object_get(json_array_get(cs, 1), "pass")),
	    "case 2 (6, not 7) fails");
	json_decref(o);

	/* perms on a sandbox's file: an fs.read under a 'none' rule is refused. */
	o = run_waited(tok, "{\"op\":\"sandbox.create\",\"sandbox\":\"pf\","
	    "\"files\":{\"s/secret\":\"hidden\"}}");
	cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "ok");
	json_decref(o);
	o = run_waited(tok, "{\"op\":\"fs.read\",\"sandbox\":\"pf\",\"path\":\"s/secret\"}");
	cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "ok");
	json_decref(o);
	/* The /workspace alias names the sandbox's root (docs/protocol.md "Paths"). */
	o = run_waited(tok, "{\"op\":\"fs.read\",\"sandbox\":\"pf\","
	    "\"path\":\"/workspace/s/secret\"}");
	cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "ok", "%s",
	    json_dumps(o, 0));
	cr_assert_str_eq(json_string_value(json_object_get(o, "data_b64")), "aGlkZGVu");
	json_decref(o);
	o = run_waited(tok, "{\"op\":\"fs.read\",\"sandbox\":\"pf\",\"path\":\"s/secret\","
	    "\"perms\":[{\"pattern\":\"s/**\",\"level\":\"none\"}]}");
	cr_assert(strcmp(json_string_value(json_object_get(o, "status")), "ok") != 0 &&
	    json_object_get(o, "data_b64") == NULL,
	    "a file under a 'none' rule was read: %s", json_dumps(o, 0));
	json_decref(o);

	/* Bad shapes: a clear 400 naming the field, nothing enqueued. */
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\","
	    "\"files\":{\"a\":1}}", &st);
	cr_assert(st == 400 && strstr(b, "files") != NULL, "%s", b);
	free(b);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\","
	    "\"files\":{\"a\":\"x\"},\"files_b64\":{\"a\":\"eA==\"}}", &st);
	cr_assert(st == 400 && strstr(b, "given already") != NULL, "%s", b);
	free(b);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\","
	    "\"files\":{\"../x\":\"x\"}}", &st);
	cr_assert_eq(st, 400, "a path out of /workspace: %s", b);
	free(b);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\","
	    "\"cases\":[{\"colour\":\"red\"}]}", &st);
	cr_assert(st == 400 && strstr(b, "cases.colour") != NULL, "%s", b);
	free(b);
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\","
	    "\"perms\":[{\"pattern\":\"a\",\"level\":\"godmode\"}]}", &st);
	cr_assert(st == 400 && strstr(b, "perms.level") != NULL, "%s", b);
	free(b);
}

/* Milliseconds of CLOCK_MONOTONIC. */
static long long
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until the gateway's subscriber listens (PUBSUB NUMPAT). */
static void
wait_subscribed(void)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	long long n = 0;

	cr_assert(rc != NULL && rc->err == 0);
	for (int i = 0; i < 200 && n < 1; i++) {
		redisReply *r = redisCommand(rc, "PUBSUB NUMPAT");

		n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
		freeReplyObject(r);
		if (n < 1)
			usleep(50 * 1000);
	}
	redisFree(rc);
	cr_assert_geq(n, 1, "the gateway never subscribed to the results channels");
}

/*
 * POST /v1/jobs?wait=S answers the result, or 202 and the id when the job
 * is not done within S; and a waiter is woken by the result's publish,
 * not by a poll: with --poll-ms 60000, a GET would come only at the
 * deadline (20 s), so an answer within half of it came from the wake-up.
 */
Test(gateway, a_waited_submit_answers_its_result_as_soon_as_it_is_published)
{
	static const char *const slow[] = { "--poll-ms", "60000", NULL };
	char tok[TOKEN_LEN + 1], *b;
	long long t0;
	long st;

	gw_pid = gwh_start(&H, H.url, slow);
	gwh_token_make(&H, "a", tok);
	wait_subscribed();

	t0 = mono_ms();
	b = gwh_http("POST", "/v1/jobs?wait=20", tok, "{\"op\":\"sh\",\"id\":\"w-1\","
	    "\"script\":\"echo woke\"}", &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"stdout\":\"woke\\n\"") != NULL, "%s", b);
	cr_assert_lt(mono_ms() - t0, 10000, "answered by the fallback poll, not the publish");
	free(b);

	/* Not done within the wait: 202 and the id; a long poll then has it. */
	b = gwh_http("POST", "/v1/jobs?wait=1", tok, "{\"op\":\"sh\",\"id\":\"w-2\","
	    "\"script\":\"sleep 3; echo late\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	cr_assert_str_eq(b, "{\"id\":\"w-2\"}");
	free(b);
	t0 = mono_ms();
	b = gwh_http("GET", "/v1/jobs/w-2?wait=20", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"stdout\":\"late\\n\"") != NULL, "%s", b);
	cr_assert_lt(mono_ms() - t0, 10000, "a GET long poll not woken by the publish");
	free(b);

	/* A bad wait enqueues nothing. */
	b = gwh_http("POST", "/v1/jobs?wait=61", tok, "{\"op\":\"sh\",\"script\":\"true\"}",
	    &st);
	cr_assert_eq(st, 400, "%s", b);
	free(b);
	b = gwh_http("POST", "/v1/jobs?colour=red", tok, "{\"op\":\"sh\",\"script\":\"true\"}",
	    &st);
	cr_assert_eq(st, 400, "%s", b);
	free(b);
	cr_assert_eq(gwh_xlen(&H, "a"), 0);
}

Test(gateway, a_tenants_token_reaches_only_its_tenant)
{
	char ta[TOKEN_LEN + 1], tb[TOKEN_LEN + 1], *b, *code;
	long st;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	gwh_token_make(&H, "b", tb);
	b = gwh_http("POST", "/v1/jobs", ta, "{\"op\":\"sh\",\"id\":\"secret-1\","
	    "\"script\":\"echo only-a\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	/* In a's stream (or already run from it: its result is a's below). */
	cr_assert_eq(gwh_xlen(&H, "b"), 0);
	b = gwh_http("GET", "/v1/jobs/secret-1?wait=60", ta, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "only-a") != NULL, "%s", b);
	free(b);
	/* b asks for a's id: b's keys hold no such result. */
	b = gwh_http("GET", "/v1/jobs/secret-1", tb, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	cr_assert(strstr(b, "only-a") == NULL);
	free(b), free(code);
}
