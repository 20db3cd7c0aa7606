/*
 * gateway_stream_test.c - sandq-gateway's live output over Server-Sent
 * Events (GET /v1/jobs/ID/events) and its cancel route
 * (POST /v1/jobs/ID/cancel), issue 17, against a real redis-server,
 * sandqd and gateway.
 *
 * Output is read as any SSE client would, with libcurl's write callback;
 * each chunk's arrival time is kept, so that the test can tell output
 * that arrived while the job ran from output that came with its end.
 * Concurrent streams use libcurl's multi interface; with three open, the
 * gateway holds no more Redis connections than with none (one reader
 * connection serves them all). The helpers that
 * start the gateway and make tokens are gateway_test.c's. Needs root,
 * like every test that runs sandqd.
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







/*** SSE reading ***/

#define CHUNKS_MAX 4096

/* One event stream being read: its bytes and when each chunk came. */
struct sse {
	CURL *c;
	struct curl_slist *hs;
	char *buf;
	size_t len, cap;
	size_t ends[CHUNKS_MAX];	/* offset after each chunk */
	double at[CHUNKS_MAX];		/* its arrival, seconds */
	int n;
	long status;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t
sse_write(char *p, size_t size, size_t nmemb, void *ud)
{
	struct sse *s = ud;
	size_t n = size * nmemb;

	if (s->len + n + 1 > s->cap) {
		s->cap = (s->len + n + 1) * 2;
		s->buf = realloc(s->buf, s->cap);
		cr_assert(s->buf != NULL);
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	s->buf[s->len] = '\0';
	if (s->n < CHUNKS_MAX) {
		s->ends[s->n] = s->len;
		s->at[s->n++] = now_s();
	}
	return n;
}

/* When the text containing needle had arrived; -1 if it has not. */
static double
arrived(const struct sse *s, const char *needle)
{
	const char *p = s->buf ? strstr(s->buf, needle) : NULL;
	size_t end;

	if (p == NULL)
		return -1;
	end = (size_t)(p - s->buf) + strlen(needle);
	for (int i = 0; i < s->n; i++)
		if (s->ends[i] >= end)
			return s->at[i];
	return -1;
}

/* An easy handle for GET path with token and an optional extra header. */
static void
sse_init(struct sse *s, const char *path, const char *token, const char *header)
{
	char url[512], auth[128];

	memset(s, 0, sizeof(*s));
	s->c = curl_easy_init();
	cr_assert(s->c != NULL);
	snprintf(url, sizeof(url), "%s%s", gwh_base, path);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	s->hs = curl_slist_append(s->hs, auth);
	if (header)
		s->hs = curl_slist_append(s->hs, header);
	curl_easy_setopt(s->c, CURLOPT_URL, url);
	curl_easy_setopt(s->c, CURLOPT_HTTPHEADER, s->hs);
	curl_easy_setopt(s->c, CURLOPT_WRITEFUNCTION, sse_write);
	curl_easy_setopt(s->c, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->c, CURLOPT_TIMEOUT, 90L);
}

static void
sse_free(struct sse *s)
{
	curl_slist_free_all(s->hs);
	curl_easy_cleanup(s->c);
	free(s->buf);
}

/* Reads the whole stream (it ends with the job). */
static void
sse_read_all(struct sse *s, const char *path, const char *token, const char *header)
{
	sse_init(s, path, token, header);
	cr_assert_eq(curl_easy_perform(s->c), CURLE_OK, "GET %s", path);
	curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &s->status);
}

/* Drives m until needle has arrived on s or the transfer ended; true if it arrived. */
static bool
pump_until(CURLM *m, struct sse *s, const char *needle, double secs)
{
	double stop = now_s() + secs;
	int running = 1;

	while (now_s() < stop) {
		cr_assert_eq(curl_multi_perform(m, &running), CURLM_OK);
		if (needle && arrived(s, needle) >= 0)
			return true;
		if (running == 0)
			return needle == NULL;
		curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	return false;
}

/* The event names of text in order, joined by ',' (into out). */
static void
event_names(const char *text, char *out, size_t outlen)
{
	const char *p = text;

	out[0] = '\0';
	while ((p = strstr(p, "event: ")) != NULL) {
		const char *nl = strchr(p, '\n');
		size_t used = strlen(out);

		cr_assert(nl != NULL);
		snprintf(out + used, outlen - used, "%s%.*s", used ? "," : "",
		    (int)(nl - p - 7), p + 7);
		p = nl;
	}
}

/* The id: line of the first event named event (into out). */
static void
first_id(const char *text, const char *event, char *out, size_t outlen)
{
	char want[64];
	const char *p, *id;

	snprintf(want, sizeof(want), "\nevent: %s\n", event);
	p = strstr(text, want);
	cr_assert(p != NULL, "no %s event in %s", event, text);
	/* the id line is just before */
	id = p;
	while (id > text && !(id[-1] == '\n' && strncmp(id, "id: ", 4) == 0))
		id--;
	cr_assert(strncmp(id, "id: ", 4) == 0, "no id before %s in %s", event, text);
	snprintf(out, outlen, "%.*s", (int)(p - id - 4), id + 4);
}

static void
submit(const char *token, const char *body)
{
	long st;
	char *b = gwh_http("POST", "/v1/jobs", token, body, &st);

	cr_assert_eq(st, 202, "%s", b);
	free(b);
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
	gwh_stop(gw_pid);
	gw_pid = -1;
	harness_stop(&H);
}


TestSuite(gwstream, .init = setup, .fini = teardown, .timeout = 180);

Test(gwstream, output_arrives_live_in_order_then_end_and_resumes_from_an_id)
{
	char ta[TOKEN_LEN + 1], tb[TOKEN_LEN + 1], names[512], id1[64], id2[64];
	char path[256], hdr[128], *b, *code;
	struct sse s, r;
	double t_one, t_end;
	long st;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	gwh_token_make(&H, "b", tb);
	submit(ta, "{\"op\":\"sh\",\"id\":\"live-1\",\"stream\":true,\"script\":"
	    "\"echo one; sleep 1; echo two >&2; sleep 1; echo three\"}");
	sse_read_all(&s, "/v1/jobs/live-1/events", ta, NULL);
	cr_assert_eq(s.status, 200, "%s", s.buf);
	event_names(s.buf, names, sizeof(names));
	cr_assert_str_eq(names, "stdout,stderr,stdout,end", "%s", s.buf);
	cr_assert(strstr(s.buf, "data: {\"data\":\"one\\n\"}") != NULL, "%s", s.buf);
	cr_assert(strstr(s.buf, "event: stderr\ndata: {\"data\":\"two\\n\"}") != NULL,
	    "%s", s.buf);
	cr_assert(strstr(s.buf, "event: end\ndata: {\"status\":\"ok\"}") != NULL, "%s",
	    s.buf);
	t_one = arrived(&s, "one");
	t_end = arrived(&s, "event: end");
	cr_assert(t_one > 0 && t_end - t_one > 1.5, "'one' came %.2f s before the end: "
	    "not live", t_end - t_one);

	/* Resume after the first event: ?from= and Last-Event-ID. */
	first_id(s.buf, "stdout", id1, sizeof(id1));
	first_id(s.buf, "stderr", id2, sizeof(id2));
	snprintf(path, sizeof(path), "/v1/jobs/live-1/events?from=%s", id1);
	sse_read_all(&r, path, ta, NULL);
	cr_assert_eq(r.status, 200, "%s", r.buf);
	event_names(r.buf, names, sizeof(names));
	cr_assert_str_eq(names, "stderr,stdout,end", "%s", r.buf);
	sse_free(&r);
	snprintf(hdr, sizeof(hdr), "Last-Event-ID: %s", id2);
	sse_read_all(&r, "/v1/jobs/live-1/events", ta, hdr);
	event_names(r.buf, names, sizeof(names));
	cr_assert_str_eq(names, "stdout,end", "%s", r.buf);
	cr_assert(strstr(r.buf, "three") != NULL, "%s", r.buf);
	sse_free(&r);
	sse_free(&s);
	b = gwh_http("GET", "/v1/jobs/live-1/events?from=nope", ta, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 400, "%s", b);
	cr_assert_str_eq(code, "bad_query");
	free(b), free(code);

	/* Tenant b cannot open tenant a's stream. */
	b = gwh_http("GET", "/v1/jobs/live-1/events", tb, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	free(b), free(code);
}

Test(gwstream, a_job_without_stream_answers_no_stream_and_an_unknown_id_not_found)
{
	char ta[TOKEN_LEN + 1], *b, *code;
	long st;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	submit(ta, "{\"op\":\"sh\",\"id\":\"plain-1\",\"script\":\"echo hi\"}");
	b = gwh_http("GET", "/v1/jobs/plain-1?wait=60", ta, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/jobs/plain-1/events", ta, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "no_stream");
	free(b), free(code);
	b = gwh_http("GET", "/v1/jobs/nobody-1/events", ta, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	free(b), free(code);
	b = gwh_http("POST", "/v1/jobs/plain-1/events", ta, "{}", &st);
	cr_assert_eq(st, 405, "%s", b);
	free(b);
}

Test(gwstream, the_stream_bound_refuses_a_second_and_a_gone_client_frees_its_slot)
{
	static const char *const one[] = { "--max-streams", "1", NULL };
	char ta[TOKEN_LEN + 1], names[256], *b, *code;
	CURLM *m = curl_multi_init();
	struct sse s, r;
	long st;

	gw_pid = gwh_start(&H, H.url, one);
	gwh_token_make(&H, "a", ta);
	submit(ta, "{\"op\":\"sh\",\"id\":\"slow-1\",\"stream\":true,\"script\":"
	    "\"echo started; sleep 4; echo done\"}");
	sse_init(&s, "/v1/jobs/slow-1/events", ta, NULL);
	curl_multi_add_handle(m, s.c);
	cr_assert(pump_until(m, &s, "started", 30), "%s", s.buf ? s.buf : "");
	b = gwh_http("GET", "/v1/jobs/slow-1/events", ta, NULL, &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 503, "%s", b);
	cr_assert_str_eq(code, "too_many_streams");
	free(b), free(code);
	/*
	 * The first client goes away mid-stream: the gateway notices at its
	 * next write to it (the job's next output here) and frees its slot.
	 */
	curl_multi_remove_handle(m, s.c);
	sse_free(&s);
	curl_multi_cleanup(m);
	for (int i = 0; i < 100; i++) {
		sse_read_all(&r, "/v1/jobs/slow-1/events", ta, NULL);
		if (r.status != 503)
			break;
		sse_free(&r);
		usleep(200 * 1000);
	}
	cr_assert_eq(r.status, 200, "%s", r.buf);
	event_names(r.buf, names, sizeof(names));
	cr_assert_str_eq(names, "stdout,stdout,end", "%s", r.buf);
	sse_free(&r);
}

Test(gwstream, cancel_ends_a_running_job_and_its_stream_and_refuses_unknown_and_finished)
{
	char ta[TOKEN_LEN + 1], *b, *code;
	CURLM *m = curl_multi_init();
	struct sse s;
	double t0;
	long st;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	submit(ta, "{\"op\":\"sh\",\"id\":\"long-1\",\"stream\":true,\"script\":"
	    "\"echo started; sleep 30\"}");
	sse_init(&s, "/v1/jobs/long-1/events", ta, NULL);
	curl_multi_add_handle(m, s.c);
	cr_assert(pump_until(m, &s, "started", 30), "%s", s.buf ? s.buf : "");
	t0 = now_s();
	b = gwh_http("POST", "/v1/jobs/long-1/cancel", ta, "", &st);
	cr_assert_eq(st, 202, "%s", b);
	cr_assert_str_eq(b, "{\"id\":\"long-1\",\"cancel\":\"requested\"}");
	free(b);
	cr_assert(pump_until(m, &s, "event: end", 20), "%s", s.buf);
	cr_assert(now_s() - t0 < 10, "the cancelled job took %.1f s", now_s() - t0);
	cr_assert(strstr(s.buf, "event: end\ndata: {\"status\":\"cancelled\"}") != NULL,
	    "%s", s.buf);
	curl_multi_remove_handle(m, s.c);
	sse_free(&s);
	curl_multi_cleanup(m);
	b = gwh_http("GET", "/v1/jobs/long-1?wait=30", ta, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_assert(strstr(b, "\"status\":\"cancelled\"") != NULL, "%s", b);
	free(b);

	b = gwh_http("POST", "/v1/jobs/long-1/cancel", ta, "", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 409, "%s", b);
	cr_assert_str_eq(code, "finished");
	free(b), free(code);
	b = gwh_http("POST", "/v1/jobs/nobody-2/cancel", ta, "", &st);
	code = gwh_error_code(b);
	cr_assert_eq(st, 404, "%s", b);
	cr_assert_str_eq(code, "not_found");
	free(b), free(code);
	b = gwh_http("GET", "/v1/jobs/long-1/cancel", ta, NULL, &st);
	cr_assert_eq(st, 405, "%s", b);
	free(b);
}

/* Redis's connected_clients now. */
static long
redis_clients(void)
{
	redisContext *rc = redisConnect("127.0.0.1", H.port);
	redisReply *reply = redisCommand(rc, "INFO clients");
	const char *p;
	long n;

	cr_assert(reply != NULL && reply->type == REDIS_REPLY_STRING);
	p = strstr(reply->str, "connected_clients:");
	cr_assert(p != NULL);
	n = strtol(p + 18, NULL, 10);
	freeReplyObject(reply);
	redisFree(rc);
	return n;
}

Test(gwstream, concurrent_streams_share_one_reader_connection_and_each_gets_its_own)
{
	char ta[TOKEN_LEN + 1], body[256], path[64], names[256];
	CURLM *m = curl_multi_init();
	struct sse s[3];
	long before, during;
	int running = 1;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", ta);
	usleep(300 * 1000);	/* the reader connection is up */
	before = redis_clients();
	for (int i = 0; i < 3; i++) {
		snprintf(body, sizeof(body), "{\"op\":\"sh\",\"id\":\"many-%d\",\"stream\":true,"
		    "\"script\":\"echo first-%d; sleep 2; echo second-%d\"}", i, i, i);
		submit(ta, body);
		snprintf(path, sizeof(path), "/v1/jobs/many-%d/events", i);
		sse_init(&s[i], path, ta, NULL);
		curl_multi_add_handle(m, s[i].c);
	}
	for (int i = 0; i < 3; i++) {
		snprintf(body, sizeof(body), "first-%d", i);
		cr_assert(pump_until(m, &s[i], body, 30), "stream %d: %s", i,
		    s[i].buf ? s[i].buf : "");
	}
	/* Three streams open: the gateway holds no more Redis connections. */
	during = redis_clients();
	cr_assert_eq(during, before, "Redis clients %ld with 3 streams, %ld without",
	    during, before);
	while (running) {
		cr_assert_eq(curl_multi_perform(m, &running), CURLM_OK);
		curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	for (int i = 0; i < 3; i++) {
		char want[64];

		event_names(s[i].buf, names, sizeof(names));
		cr_assert_str_eq(names, "stdout,stdout,end", "%s", s[i].buf);
		snprintf(want, sizeof(want), "second-%d", i);
		cr_assert(strstr(s[i].buf, want) != NULL, "%s", s[i].buf);
		for (int j = 0; j < 3; j++) {
			snprintf(want, sizeof(want), "first-%d", j);
			cr_assert((strstr(s[i].buf, want) != NULL) == (i == j), "%s", s[i].buf);
		}
		curl_multi_remove_handle(m, s[i].c);
		sse_free(&s[i]);
	}
	curl_multi_cleanup(m);
}
