/*
 * gateway_sandbox_test.c - sandboxes, files and kv over sandq-gateway
 * (issue 17) against a real redis-server, sandqd and gateway: the fs.*,
 * kv.* and sandbox.* ops through POST /v1/jobs, their "data" (bytes as
 * data_b64, exact, non-UTF-8 included), a run on the sandbox that reads
 * a file written over HTTP, the errors (an unknown sandbox, another
 * tenant's sandbox, an unknown field), and the REST routes over the same
 * ops. Setup as tests/gateway_test.c: tenants default, a and b, tokens
 * written with queue/token.c, requests through libcurl. Needs root.
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
	gwh_stop(gw_pid);
	gw_pid = -1;
	harness_stop(&H);
}

TestSuite(gateway_sandbox, .init = setup, .fini = teardown, .timeout = 240);

/* Submits body as tok, waits for the result; returns it parsed (owned). */
static json_t *
op(const char *tok, const char *body)
{
	char path[256], *b;
	const char *id = NULL;
	json_t *o, *r;
	long st;

	b = gwh_http("POST", "/v1/jobs", tok, body, &st);
	cr_assert_eq(st, 202, "%s: %s", body, b);
	o = json_loads(b, 0, NULL);
	cr_assert(o && json_unpack(o, "{s:s}", "id", &id) == 0, "%s", b);
	snprintf(path, sizeof(path), "/v1/jobs/%s?wait=60", id);
	free(b);
	json_decref(o);
	b = gwh_http("GET", path, tok, NULL, &st);
	cr_assert_eq(st, 200, "%s: %s", body, b);
	r = json_loads(b, 0, NULL);
	cr_assert(r != NULL, "%s", b);
	free(b);
	return r;
}

static const char *
jstr(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "";
}

/* The result's error.code, "" when none. */
static const char *
rcode(const json_t *r)
{
	return jstr(json_object_get(r, "error"), "code");
}

Test(gateway_sandbox, the_sandbox_ops_through_post_v1_jobs)
{
	char tok[TOKEN_LEN + 1], tokb[TOKEN_LEN + 1], *b, *code;
	json_t *r, *d;
	long st;
	long long n;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", tok);
	gwh_token_make(&H, "b", tokb);

	r = op(tok, "{\"op\":\"sandbox.create\",\"sandbox\":\"sb1\","
	    "\"labels\":{\"team\":\"x\"}}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	d = json_object_get(r, "data");
	cr_assert_str_eq(jstr(d, "sandbox"), "sb1");
	cr_assert_str_eq(jstr(json_object_get(d, "labels"), "team"), "x");
	json_decref(r);

	/* Bytes that are not UTF-8 go in as data_b64 and come back exact. */
	r = op(tok, "{\"op\":\"fs.write\",\"sandbox\":\"sb1\",\"path\":\"/bin.dat\","
	    "\"data_b64\":\"/wABgv8=\"}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "data"),
	    "size")), 5);
	json_decref(r);
	r = op(tok, "{\"op\":\"fs.read\",\"sandbox\":\"sb1\",\"path\":\"bin.dat\"}");
	cr_assert_str_eq(jstr(r, "data_b64"), "/wABgv8=", "%s", json_dumps(r, 0));
	cr_assert_null(json_object_get(r, "data"));
	json_decref(r);

	/* A text file as "data"; a run on the sandbox reads it. */
	r = op(tok, "{\"op\":\"fs.write\",\"sandbox\":\"sb1\",\"path\":\"/hi.txt\","
	    "\"data\":\"hello from http\\n\"}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"sh\",\"sandbox\":\"sb1\",\"script\":\"cat hi.txt; "
	    "echo made > out.txt\"}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	cr_assert_str_eq(jstr(r, "stdout"), "hello from http\n");
	json_decref(r);
	r = op(tok, "{\"op\":\"fs.stat\",\"sandbox\":\"sb1\",\"path\":\"/out.txt\"}");
	cr_assert_str_eq(jstr(json_object_get(r, "data"), "type"), "file",
	    "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"fs.list\",\"sandbox\":\"sb1\"}");
	cr_assert(json_is_array(json_object_get(r, "data")), "%s", json_dumps(r, 0));
	cr_assert_eq(json_array_size(json_object_get(r, "data")), 3);
	json_decref(r);

	/* kv: value is JSON text. */
	r = op(tok, "{\"op\":\"kv.set\",\"sandbox\":\"sb1\",\"key\":\"k1\","
	    "\"value\":\"{\\\"n\\\":1}\"}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"kv.get\",\"sandbox\":\"sb1\",\"key\":\"k1\"}");
	cr_assert_str_eq(jstr(r, "data"), "{\"n\":1}", "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"kv.keys\",\"sandbox\":\"sb1\",\"prefix\":\"k\"}");
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "data"),
	    0)), "k1", "%s", json_dumps(r, 0));
	json_decref(r);

	/* fork, history, list, info, delete. */
	r = op(tok, "{\"op\":\"sandbox.fork\",\"sandbox\":\"sb1\",\"to\":\"sb2\"}");
	cr_assert_str_eq(jstr(json_object_get(r, "data"), "sandbox"), "sb2",
	    "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"sandbox.history\",\"sandbox\":\"sb1\"}");
	cr_assert_geq(json_array_size(json_object_get(json_object_get(r, "data"),
	    "versions")), 3, "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"sandbox.list\"}");
	cr_assert_eq(json_array_size(json_object_get(r, "data")), 2,
	    "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tok, "{\"op\":\"sandbox.delete\",\"sandbox\":\"sb2\"}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	json_decref(r);

	/* Errors: an unknown sandbox; tenant b cannot see a's; unknown fields. */
	r = op(tok, "{\"op\":\"sandbox.info\",\"sandbox\":\"sb2\"}");
	cr_assert_str_eq(rcode(r), "sandbox_not_found", "%s", json_dumps(r, 0));
	json_decref(r);
	r = op(tokb, "{\"op\":\"fs.read\",\"sandbox\":\"sb1\",\"path\":\"/hi.txt\"}");
	cr_assert_str_eq(rcode(r), "sandbox_not_found", "%s", json_dumps(r, 0));
	json_decref(r);
	n = gwh_xlen(&H, "a");
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"fs.read\",\"sandbox\":\"sb1\","
	    "\"path\":\"/x\",\"bogus\":1}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "unknown_field");
	cr_assert(strstr(b, "bogus") != NULL, "%s", b);
	free(b), free(code);
	/* A field the op does not use: proto/job.c's refusal, named. */
	b = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"kv.get\",\"sandbox\":\"sb1\","
	    "\"key\":\"k\",\"path\":\"/x\"}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "invalid_job");
	cr_assert(strstr(b, "path") != NULL, "%s", b);
	free(b), free(code);
	cr_assert_eq(gwh_xlen(&H, "a"), n, "nothing refused is enqueued");
}

/* The REST routes: the same ops, bytes as they are, statuses that fit. */
Test(gateway_sandbox, the_rest_routes)
{
	static const unsigned char bin[] = { 0xff, 0x00, 0x01, 0x82, 0xfe, '\n' };
	static const char *const big_body[] = { "--max-body", "16777216", NULL };
	char tok[TOKEN_LEN + 1], tokb[TOKEN_LEN + 1], *b, *code;
	json_t *o, *r;
	size_t n;
	long st;

	gw_pid = gwh_start(&H, H.url, big_body);
	gwh_token_make(&H, "a", tok);
	gwh_token_make(&H, "b", tokb);

	b = gwh_http("POST", "/v1/sandboxes", tok, "{\"sandbox\":\"r1\",\"labels\":"
	    "{\"k\":\"v\"}}", &st);
	cr_assert_eq(st, 201, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert_str_eq(jstr(o, "sandbox"), "r1", "%s", b);
	json_decref(o);
	free(b);
	b = gwh_http("POST", "/v1/sandboxes", tok, "{\"sandbox\":\"r1\"}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 409, "%s", b);
	cr_assert_str_eq(code, "sandbox_exists");
	free(b), free(code);

	/* A file PUT as raw bytes, read by a run, and GET back exact. */
	b = gwh_http_raw("PUT", "/v1/sandboxes/r1/files/d.bin", tok, bin, sizeof(bin),
	    &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"size\":6") != NULL, "%s", b);
	free(b);
	r = op(tok, "{\"op\":\"sh\",\"sandbox\":\"r1\",\"script\":\"od -An -tx1 d.bin\"}");
	cr_assert_str_eq(jstr(r, "stdout"), " ff 00 01 82 fe 0a\n", "%s",
	    json_dumps(r, 0));
	json_decref(r);
	b = gwh_http_raw("GET", "/v1/sandboxes/r1/files/d.bin", tok, NULL, 0, &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert_eq(n, sizeof(bin));
	cr_assert(memcmp(b, bin, n) == 0);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/r1/files/nope", tok, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	free(b), free(code);
	/* A path percent-encoded in the URL is the decoded path. */
	b = gwh_http_raw("PUT", "/v1/sandboxes/r1/files/a%20b.txt", tok, "x", 1, &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	free(b);
	/* Missing folders: refused, unless ?parents=true (or "parents" in JSON). */
	b = gwh_http_raw("PUT", "/v1/sandboxes/r1/files/p/q/f.txt", tok, "y", 1, &st, &n);
	cr_assert_neq(st, 200, "a PUT under a missing folder without parents: %s", b);
	free(b);
	b = gwh_http_raw("PUT", "/v1/sandboxes/r1/files/p/q/f.txt?parents=maybe", tok, "y",
	    1, &st, &n);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "bad_query");
	free(b), free(code);
	b = gwh_http_raw("PUT", "/v1/sandboxes/r1/files/p/q/f.txt?parents=true", tok, "y",
	    1, &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	free(b);
	b = gwh_http_raw("GET", "/v1/sandboxes/r1/files/p/q/f.txt", tok, NULL, 0, &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(n == 1 && b[0] == 'y');
	free(b);
	r = op(tok, "{\"op\":\"fs.write\",\"sandbox\":\"r1\",\"path\":\"p/r/g.txt\","
	    "\"data\":\"z\",\"parents\":true}");
	cr_assert_str_eq(jstr(r, "status"), "ok", "%s", json_dumps(r, 0));
	json_decref(r);
	b = gwh_http("DELETE", "/v1/sandboxes/r1/files/p?recursive=true", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/r1/files", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"/d.bin\"") != NULL, "%s", b);
	cr_assert(strstr(b, "\"/a b.txt\"") != NULL, "%s", b);
	free(b);

	/* kv: PUT JSON text, GET it back as it is, list, delete. */
	b = gwh_http_raw("PUT", "/v1/sandboxes/r1/kv/cfg", tok, "[1,2]", 5, &st, &n);
	cr_assert_eq(st, 204, "%s", b);
	free(b);
	b = gwh_http_raw("GET", "/v1/sandboxes/r1/kv/cfg", tok, NULL, 0, &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(n == 5 && memcmp(b, "[1,2]", 5) == 0);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/r1/kv", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert_str_eq(b, "[\"cfg\"]");
	free(b);
	b = gwh_http("DELETE", "/v1/sandboxes/r1/kv/cfg", tok, NULL, &st);
	cr_assert_eq(st, 204, "%s", b);
	free(b);

	/* fork, history, list, info, delete. */
	b = gwh_http("POST", "/v1/sandboxes/r1/fork", tok, "{\"to\":\"r2\"}", &st);
	cr_assert_eq(st, 201, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/r1/history", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"versions\"") != NULL, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	cr_assert_eq(json_array_size(o), 2, "%s", b);
	json_decref(o);
	free(b);
	/* export the bytes, import them as a new sandbox; stat a file. */
	{
		char *snap;
		size_t slen;

		snap = gwh_http_raw("GET", "/v1/sandboxes/r1/export", tok, NULL, 0, &st, &slen);
		cr_assert_eq(st, 200, "%s", snap);
		cr_assert(slen > 16 && memcmp(snap, "SQLite format 3", 15) == 0);
		b = gwh_http_raw("PUT", "/v1/sandboxes/r5/import", tok, snap, slen, &st, &n);
		cr_assert_eq(st, 200, "%s", b);
		cr_assert(strstr(b, "\"sandbox\":\"r5\"") != NULL, "%s", b);
		free(b);
		free(snap);
	}
	b = gwh_http("GET", "/v1/sandboxes/r5/stat/d.bin", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"size\":6") != NULL, "%s", b);
	free(b);
	b = gwh_http_raw("GET", "/v1/sandboxes/r5/files/d.bin", tok, NULL, 0, &st, &n);
	cr_assert(st == 200 && n == sizeof(bin) && memcmp(b, bin, n) == 0);
	free(b);
	b = gwh_http("DELETE", "/v1/sandboxes/r5", tok, NULL, &st);
	cr_assert_eq(st, 204, "%s", b);
	free(b);
	b = gwh_http("DELETE", "/v1/sandboxes/r2", tok, NULL, &st);
	cr_assert_eq(st, 204, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/r2", tok, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "sandbox_not_found");
	free(b), free(code);
	b = gwh_http("GET", "/v1/sandboxes/r1", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);

	/* Tenant b sees none of a's; unknown fields and methods are refused. */
	b = gwh_http("GET", "/v1/sandboxes/r1/files/d.bin", tokb, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "sandbox_not_found");
	free(b), free(code);
	b = gwh_http("GET", "/v1/sandboxes", tokb, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert_str_eq(b, "[]");
	free(b);
	b = gwh_http("POST", "/v1/sandboxes", tok, "{\"sandbox\":\"r3\",\"bogus\":1}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "unknown_field");
	free(b), free(code);
	b = gwh_http("POST", "/v1/sandboxes/r1/fork", tok, "{\"to\":\"r4\",\"sandbox\":"
	    "\"x\"}", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "unknown_field");
	free(b), free(code);
	b = gwh_http("PATCH", "/v1/sandboxes/r1", tok, NULL, &st);
	cr_assert_eq(st, 405, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes", NULL, NULL, &st);
	cr_assert_eq(st, 401, "%s", b);
	free(b);
}
