/*
 * gateway_batch_test.c - sandq-gateway's /v1/batches (issue 17): a file of
 * cases submitted at once, its progress and results judged as `sandq
 * batch` judges them, a resubmission that resumes, cancellation, and a
 * tenant's token that reaches only its own batches; against a real
 * redis-server, sandqd and gateway (tests/gwharness.c). Needs root, like
 * every test that runs sandqd.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

TestSuite(gateway_batch, .init = setup, .fini = teardown, .timeout = 240);

/* POSTs body (JSON lines) to path with Content-Type ctype; the answer. */
static json_t *
post_lines(const char *path, const char *tok, const char *ctype, const char *body,
    long *status)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hs = NULL;
	char url[512], hdr[160], *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);
	json_t *o;

	cr_assert(c != NULL && f != NULL);
	snprintf(url, sizeof(url), "%s%s", gwh_base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", tok);
	hs = curl_slist_append(hs, hdr);
	snprintf(hdr, sizeof(hdr), "Content-Type: %s", ctype);
	hs = curl_slist_append(hs, hdr);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK, "POST %s", path);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(hs);
	curl_easy_cleanup(c);
	fclose(f);
	o = json_loads(out, 0, NULL);
	cr_assert(o != NULL, "not JSON: %s", out);
	free(out);
	return o;
}

/* A GET's answer as JSON. */
static json_t *
get_json(const char *path, const char *tok, long *status)
{
	char *b = gwh_http("GET", path, tok, NULL, status);
	json_t *o = json_loads(b, 0, NULL);

	cr_assert(o != NULL, "GET %s: not JSON: %s", path, b);
	free(b);
	return o;
}

static long long
jint(const json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static const char *
jerr(const json_t *o)
{
	return json_string_value(json_object_get(json_object_get(o, "error"), "code"));
}

/* Polls GET /v1/batches/ID until every case is done; its last answer. */
static json_t *
wait_done(const char *id, const char *tok)
{
	char path[128];
	long st;

	snprintf(path, sizeof(path), "/v1/batches/%s", id);
	for (int i = 0; i < 600; i++) {
		json_t *o = get_json(path, tok, &st);

		cr_assert_eq(st, 200);
		if (jint(o, "done") == jint(o, "total"))
			return o;
		json_decref(o);
		usleep(100 * 1000);
	}
	cr_assert_fail("batch %s did not finish", id);
	return NULL;
}

static const char cases[] =
    "{\"op\":\"sh\",\"script\":\"echo hi\",\"expect\":\"hi\\n\"}\n"
    "{\"op\":\"sh\",\"script\":\"echo no\",\"expect\":\"yes\"}\n"
    "\n"
    "{\"op\":\"sh\",\"script\":\"echo free\"}\n"
    "not json at all\n"
    "{\"op\":\"sh\",\"script\":\"printf 'a  \\\\n\\\\n'\",\"expect\":\"a\","
    "\"expect_mode\":\"trim\"}\n"
    "{\"op\":\"sh\",\"script\":\"echo n42\",\"expect\":\"n[0-9]+\","
    "\"expect_mode\":\"regex\"}\n"
    "{\"op\":\"sh\",\"id\":\"mine\",\"script\":\"true\"}\n"
    "{\"op\":\"sh\",\"script\":\"echo hi; exit 3\",\"expect\":\"hi\\n\"}\n";

Test(gateway_batch, cases_are_judged_like_sandq_batch_and_a_resubmission_resumes)
{
	char ta[TOKEN_LEN + 1], tb[TOKEN_LEN + 1];
	json_t *o, *r, *bs;
	long st;
	long long len;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	gwh_token_make(&H, "b", tb);

	o = post_lines("/v1/batches?id=t1", ta, "application/x-ndjson", cases, &st);
	cr_assert_eq(st, 202, "%s", json_dumps(o, 0));
	cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "t1");
	cr_expect_eq(jint(o, "total"), 8, "blank lines are no cases");
	cr_expect_eq(jint(o, "submitted"), 6);
	r = json_object_get(o, "malformed");
	cr_assert_eq(json_array_size(r), 2);
	cr_expect_eq(jint(json_array_get(r, 0), "line"), 5);
	cr_expect_eq(jint(json_array_get(r, 1), "line"), 8);
	cr_expect(strstr(json_string_value(json_object_get(json_array_get(r, 1),
	    "error")), "field 'id'") != NULL);
	json_decref(o);
	/* (Not the stream's length: a host may have answered some already.) */

	o = wait_done("t1", ta);
	cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "finished");
	cr_expect_eq(jint(o, "passed"), 3, "exact, trim and regex pass");
	cr_expect_eq(jint(o, "failed"), 2, "a wrong output and a failed exit fail");
	cr_expect_eq(jint(o, "no_expect"), 1);
	cr_expect_eq(jint(o, "not_ok"), 0);
	cr_expect_eq(jint(o, "malformed"), 2);
	bs = json_object_get(o, "by_status");
	cr_expect_eq(jint(bs, "ok"), 5);
	cr_expect_eq(jint(bs, "exit"), 1);
	cr_expect_eq(jint(bs, "malformed"), 2);
	json_decref(o);

	/* Results, paged, each as GET /v1/jobs/ID gives it, with its verdict. */
	o = get_json("/v1/batches/t1/results?limit=2", ta, &st);
	cr_assert_eq(st, 200);
	r = json_object_get(o, "results");
	cr_assert_eq(json_array_size(r), 2);
	cr_expect_eq(jint(json_array_get(r, 0), "case"), 1);
	cr_expect(json_is_true(json_object_get(json_array_get(r, 0), "pass")));
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(
	    json_array_get(r, 0), "result"), "stdout")), "hi\n");
	cr_expect(json_is_false(json_object_get(json_array_get(r, 1), "pass")));
	cr_expect_eq(jint(o, "next"), 4);
	json_decref(o);
	o = get_json("/v1/batches/t1/results?from=4&limit=100", ta, &st);
	r = json_object_get(o, "results");
	cr_assert_eq(json_array_size(r), 4);
	cr_expect_eq(jint(json_array_get(r, 0), "case"), 4);
	cr_expect_null(json_object_get(json_array_get(r, 0), "pass"), "no expect");
	cr_expect_eq(jint(json_array_get(r, 3), "case"), 9);
	cr_expect(json_is_null(json_object_get(o, "next")));
	json_decref(o);

	/* The same file again: every case has its result, nothing runs. */
	len = gwh_xlen(&H, "a");
	o = post_lines("/v1/batches?id=t1", ta, "application/jsonl", cases, &st);
	cr_assert_eq(st, 202);
	cr_expect_eq(jint(o, "submitted"), 0);
	json_decref(o);
	cr_expect_eq(gwh_xlen(&H, "a"), len);

	/* Another tenant's token finds no batch t1. */
	o = get_json("/v1/batches/t1", tb, &st);
	cr_expect_eq(st, 404);
	json_decref(o);
	o = get_json("/v1/batches/t1/results", tb, &st);
	cr_expect_eq(st, 404);
	json_decref(o);
	o = post_lines("/v1/batches/t1/cancel", tb, "application/json", "", &st);
	cr_expect_eq(st, 404);
	json_decref(o);
	/* b's own batch of the same id is b's, apart from a's. */
	o = post_lines("/v1/batches?id=t1", tb, "application/x-ndjson",
	    "{\"op\":\"sh\",\"script\":\"echo b\",\"expect\":\"b\\n\"}\n", &st);
	cr_expect_eq(st, 202);
	cr_expect_eq(jint(o, "submitted"), 1);
	json_decref(o);
	o = wait_done("t1", tb);
	cr_expect_eq(jint(o, "total"), 1);
	cr_expect_eq(jint(o, "passed"), 1);
	json_decref(o);
}

Test(gateway_batch, refusals)
{
	static const char *const small[] = { "--max-batch-body", "200", NULL };
	char ta[TOKEN_LEN + 1], big[512];
	json_t *o;
	long st;

	gw_pid = gwh_start(&H, H.url, small);
	gwh_token_make(&H, "a", ta);
	o = post_lines("/v1/batches", ta, "application/json", "{}\n", &st);
	cr_expect_eq(st, 415);
	cr_expect_str_eq(jerr(o), "unsupported_media_type");
	json_decref(o);
	o = post_lines("/v1/batches?id=no/pe", ta, "application/x-ndjson", "{}\n", &st);
	cr_expect_eq(st, 400);
	json_decref(o);
	o = post_lines("/v1/batches?nope=1", ta, "application/x-ndjson", "{}\n", &st);
	cr_expect_eq(st, 400);
	cr_expect_str_eq(jerr(o), "bad_query");
	json_decref(o);
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	big[0] = '{';
	big[sizeof(big) - 2] = '}';
	o = post_lines("/v1/batches", ta, "application/x-ndjson", big, &st);
	cr_expect_eq(st, 413);
	cr_expect_str_eq(jerr(o), "body_too_large");
	json_decref(o);
	o = post_lines("/v1/batches", ta, "application/x-ndjson", "\n\n", &st);
	cr_expect_eq(st, 400);
	json_decref(o);
	o = get_json("/v1/batches/none", ta, &st);
	cr_expect_eq(st, 404);
	json_decref(o);
	o = get_json("/v1/batches/none/results?limit=1000", ta, &st);
	cr_expect_eq(st, 400);
	json_decref(o);
	o = get_json("/v1/batches", ta, &st);
	cr_expect_eq(st, 405);
	json_decref(o);
	o = get_json("/v1/batches/x", NULL, &st);
	cr_expect_eq(st, 401);
	json_decref(o);
	cr_expect_eq(gwh_xlen(&H, "a"), 0);
}

Test(gateway_batch, cancel_removes_the_cases_no_host_has_read)
{
	char ta[TOKEN_LEN + 1], m[64], *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	json_t *o, *bs;
	long st;
	long long cancelled;

	harness_marker(m, sizeof(m), "sleep 2");
	for (int i = 0; i < 12; i++)
		fprintf(f, "{\"op\":\"sh\",\"script\":\"%s\",\"expect\":\"\"}\n", m);
	fclose(f);
	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	o = post_lines("/v1/batches?id=slow", ta, "application/x-ndjson", text, &st);
	cr_assert_eq(st, 202);
	cr_expect_eq(jint(o, "submitted"), 12);
	json_decref(o);
	free(text);
	o = post_lines("/v1/batches/slow/cancel", ta, "application/json", "", &st);
	cr_assert_eq(st, 202, "%s", json_dumps(o, 0));
	cancelled = jint(o, "cancelled");
	cr_expect_geq(cancelled, 6, "sandqd holds a few; the rest are cancelled");
	cr_expect_eq(cancelled + jint(o, "running") + jint(o, "finished"), 12);
	json_decref(o);
	o = wait_done("slow", ta);
	bs = json_object_get(o, "by_status");
	cr_expect_eq(jint(bs, "cancelled"), cancelled);
	cr_expect_eq(jint(o, "failed"), 12 - jint(o, "passed"));
	json_decref(o);
}
