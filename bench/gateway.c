/*
 * gateway.c - what sandq-gateway costs, beside the Redis path it fronts.
 *
 *   gateway-bench URL [--jobs N] [--streams N] [--reads N] [--conns N]
 *
 * Run by bench/run.sh on its private redis-server and sandqd (URL); it writes
 * its own API token into Redis (queue/token.c, removed at the end) and
 * starts build/sandq-gateway on free loopback ports ($SANDQ_BUILD, default
 * build). Measured in one run:
 *   (a) latency   N sequential exec jobs of /bin/true, alternating between
 *                 the Redis path (XADD, BLPOP: libsandq as bench.c) and
 *                 the gateway (POST /v1/jobs, GET /v1/jobs/ID?wait=10 on one
 *                 keep-alive connection): p50, p99, and the p50 difference
 *   (b) streams   N jobs submitted with stream: true, each printing three
 *                 lines with sleeps; N event streams (GET .../events) held at
 *                 once by one gateway (--max-streams above N) through libcurl's
 *                 multi interface: the most open at once, how many got their
 *                 `end` event, and the gateway's peak RSS (VmHWM)
 *   (c) reads     GET /v1/jobs/ID of an existing result from C keep-alive
 *                 connections, the gateway pinned to CPU 0 and this process
 *                 to the other CPU: reads/s, beside the same count of GETs of
 *                 the result key straight from Redis over C connections (the
 *                 floor)
 * Numbers, not assertions: the machine is shared and noisy, so nothing fails
 * on time; it fails (exit 1) only when a job, a stream or a read failed.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../libsandq/sandq.h"
#include "../proto/keys.h"
#include "../proto/url.h"
#include "../queue/token.h"
#include "timing.h"

#define TENANT "default"
#define STREAM_SCRIPT "echo one; sleep 0.01; echo two; sleep 0.01; echo three"

static const char *build_dir;
static const char *redis_url;
static char token[TOKEN_LEN + 1];
static char auth_header[160];

/*** Processes ***/

/* A free loopback port, asked of the kernel; 0 on failure. */
static int
free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* GET base/healthz until it answers (5 s); 0 or -1. */
static int
wait_healthy(const char *base)
{
	char url[128];

	snprintf(url, sizeof(url), "%s/healthz", base);
	for (int i = 0; i < 100; i++) {
		CURL *c = curl_easy_init();
		CURLcode rc;

		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		rc = curl_easy_perform(c);
		curl_easy_cleanup(c);
		if (rc == CURLE_OK)
			return 0;
		usleep(50 * 1000);
	}
	return -1;
}

/*
 * Starts sandq-gateway against redis_url on a free port (base receives its
 * http:// address), pinned to cpu when cpu >= 0, with --max-streams
 * max_streams; its stderr goes to /dev/null. Returns its pid, or -1.
 */
static pid_t
gateway_start(int cpu, unsigned max_streams, char base[64])
{
	char bin[512], listen[64], ms[32];
	int port = free_port();
	pid_t parent = getpid(), pid;

	if (port == 0)
		return -1;
	snprintf(bin, sizeof(bin), "%s/sandq-gateway", build_dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(ms, sizeof(ms), "%u", max_streams);
	snprintf(base, 64, "http://127.0.0.1:%d", port);
	if ((pid = fork()) == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(1);
		if (cpu >= 0) {
			cpu_set_t set;

			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set) < 0)
				_exit(1);
		}
		if (null >= 0)
			dup2(null, 2);
		execl(bin, bin, "--listen", listen, "--redis", redis_url,
		    "--max-streams", ms, (char *)NULL);
		_exit(127);
	}
	if (pid < 0)
		return -1;
	if (wait_healthy(base) < 0) {
		fprintf(stderr, "gateway-bench: %s did not answer /healthz\n", bin);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/* SIGTERM and reap. */
static void
gateway_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

/* A "Vm...:" line of /proc/PID/status in MiB, or -1. */
static double
proc_mib(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t n = strlen(field);
	double kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			kib = strtod(line + n + 1, NULL);
	fclose(f);
	return kib < 0 ? -1 : kib / 1024.0;
}

/* A connection to redis_url, authenticated; NULL on failure. */
static redisContext *
redis_open(void)
{
	struct redis_url u;
	struct err e = { 0 };
	redisContext *rc;
	redisReply *r = NULL;

	if (redis_url_parse(redis_url, &u, &e) < 0)
		return NULL;
	rc = u.path[0] ? redisConnectUnix(u.path) : redisConnect(u.host, u.port);
	if (rc == NULL || rc->err) {
		redisFree(rc);
		return NULL;
	}
	if (u.pass[0]) {
		r = u.user[0] ? redisCommand(rc, "AUTH %s %s", u.user, u.pass) :
		    redisCommand(rc, "AUTH %s", u.pass);
		if (r == NULL || r->type == REDIS_REPLY_ERROR) {
			freeReplyObject(r);
			redisFree(rc);
			return NULL;
		}
		freeReplyObject(r);
	}
	return rc;
}

static char token_hash[TOKEN_HASH_HEX + 1];

/* CPU seconds (user + system) pid has used so far, or -1. */
static double
proc_cpu_s(pid_t pid)
{
	char path[64], line[1024], *p;
	unsigned long ut, st;
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	if (fgets(line, sizeof(line), f))
		n = 1;
	fclose(f);
	/* Fields after the command's closing parenthesis: state is the 3rd
	 * field, utime and stime the 14th and 15th. */
	if (n == 0 || (p = strrchr(line, ')')) == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
	    &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A new API token of TENANT, its record written straight into Redis as
 * `sandq tenant token add` would (the tenant need not exist); 0 or -1. */
static int
token_make(void)
{
	struct token_record t = { .created_at = 1 };
	struct err e = { 0 };
	redisContext *rc = redis_open();
	redisReply *r = NULL;
	char *json = NULL;
	int ret = -1;

	snprintf(t.tenant, sizeof(t.tenant), "%s", TENANT);
	snprintf(t.name, sizeof(t.name), "bench-%d", (int)getpid());
	if (rc == NULL || token_new(token) < 0 ||
	    token_record_encode(&t, &json, &e) < 0)
		goto out;
	token_hash_hex(token, TOKEN_LEN, token_hash);
	r = redisCommand(rc, "HSET sandq:tokens %s %s", token_hash, json);
	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		ret = 0;
	snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", token);
out:
	if (ret < 0)
		fprintf(stderr, "gateway-bench: cannot write a token into %s\n", redis_url);
	freeReplyObject(r);
	redisFree(rc);
	free(json);
	return ret;
}

/* Removes the token token_make() wrote. */
static void
token_drop(void)
{
	redisContext *rc = redis_open();

	if (rc)
		freeReplyObject(redisCommand(rc, "HDEL sandq:tokens %s", token_hash));
	redisFree(rc);
}

/*** HTTP ***/

struct buf {
	char *p;
	size_t len, cap;
};

/* libcurl's write callback: appends to a struct buf, up to 64 KiB. */
static size_t
buf_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct buf *b = arg;
	size_t n = size * nmemb;

	if (b->len + n + 1 > b->cap) {
		size_t cap = b->len + n + 1 < 4096 ? 4096 : (b->len + n + 1) * 2;

		if (cap > 64 * 1024 || (b->p = realloc(b->p, cap)) == NULL)
			return 0;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return n;
}

static struct curl_slist *headers;

/* One request on the reused handle c (keep-alive): POST body when set. Fills
 * out and returns the HTTP status, or -1. */
static long
http(CURL *c, const char *url, const char *body, struct buf *out)
{
	long status = -1;

	out->len = 0;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	} else {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	}
	if (curl_easy_perform(c) != CURLE_OK)
		return -1;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

/* POST body to base/v1/jobs; id receives the job's id. 0 or -1. */
static int
gw_submit(CURL *c, const char *base, const char *body, char id[SANDQ_ID_MAX + 1],
    struct buf *out)
{
	char url[128];
	const char *s, *e;

	snprintf(url, sizeof(url), "%s/v1/jobs", base);
	if (http(c, url, body, out) != 202 || out->p == NULL ||
	    (s = strstr(out->p, "\"id\":\"")) == NULL ||
	    (e = strchr(s + 6, '"')) == NULL || e - (s + 6) > SANDQ_ID_MAX)
		return -1;
	snprintf(id, SANDQ_ID_MAX + 1, "%.*s", (int)(e - (s + 6)), s + 6);
	return 0;
}

/* A /bin/true job through the gateway: POST, then GET ?wait=10. 0 or -1. */
static int
gw_true(CURL *c, const char *base, char id[SANDQ_ID_MAX + 1], struct buf *out)
{
	char url[SANDQ_ID_MAX + 128];

	if (gw_submit(c, base, "{\"op\":\"exec\",\"argv\":[\"/bin/true\"]}", id, out) < 0)
		return -1;
	snprintf(url, sizeof(url), "%s/v1/jobs/%s?wait=10", base, id);
	if (http(c, url, NULL, out) != 200 || strstr(out->p, "\"status\":\"ok\"") == NULL)
		return -1;
	return 0;
}

/* The same in one request: POST /v1/jobs?wait=10 answers the result. 0 or -1. */
static int
gw_true_waited(CURL *c, const char *base, struct buf *out)
{
	char url[128];

	snprintf(url, sizeof(url), "%s/v1/jobs?wait=10", base);
	if (http(c, url, "{\"op\":\"exec\",\"argv\":[\"/bin/true\"]}", out) != 200 ||
	    strstr(out->p, "\"status\":\"ok\"") == NULL)
		return -1;
	return 0;
}

/* A /bin/true job through Redis (libsandq: XADD, BLPOP). 0 or -1. */
static int
redis_true(struct sandq *q)
{
	const char *tru[] = { "/bin/true", NULL };
	char id[SANDQ_ID_MAX + 1];
	struct sandq_result *r = NULL;
	int rc = -1;

	if (sandq_submit_exec(q, tru, NULL, id) == 0 && sandq_wait(q, id, 60000, &r) == 0 &&
	    strcmp(r->status, "ok") == 0)
		rc = 0;
	sandq_result_free(r);
	return rc;
}

/*** (a) latency ***/

/* n jobs each way, alternating; last_id receives a gateway job's id. */
static int
bench_latency(const char *base, size_t n, char last_id[SANDQ_ID_MAX + 1])
{
	double *gw = calloc(n, sizeof(*gw)), *rd = calloc(n, sizeof(*rd));
	double *gw1 = calloc(n, sizeof(*gw1));
	double g50, g99, r50, r99, w50, w99;
	struct buf out = { 0 };
	char err[256];
	struct sandq *q = sandq_connect(redis_url, TENANT, err, sizeof(err));
	CURL *c = curl_easy_init();
	int failures = 0;

	if (q == NULL || c == NULL || gw == NULL || rd == NULL || gw1 == NULL) {
		fprintf(stderr, "gateway-bench: %s\n", q ? "no memory" : err);
		return -1;
	}
	for (int i = 0; i < 20; i++)	/* warm-up: workers, connections */
		if (redis_true(q) < 0 || gw_true(c, base, last_id, &out) < 0 ||
		    gw_true_waited(c, base, &out) < 0) {
			fprintf(stderr, "gateway-bench: warm-up job failed\n");
			return -1;
		}
	for (size_t i = 0; i < n; i++) {
		double t0 = now_ms();

		failures += redis_true(q) < 0;
		rd[i] = now_ms() - t0;
		t0 = now_ms();
		failures += gw_true(c, base, last_id, &out) < 0;
		gw[i] = now_ms() - t0;
		t0 = now_ms();
		failures += gw_true_waited(c, base, &out) < 0;
		gw1[i] = now_ms() - t0;
	}
	r50 = pct(rd, n, 50);
	r99 = pct(rd, n, 99);
	g50 = pct(gw, n, 50);
	g99 = pct(gw, n, 99);
	w50 = pct(gw1, n, 50);
	w99 = pct(gw1, n, 99);
	printf("(a) one /bin/true job, submit to result, %zu each way, alternating\n", n);
	printf("  %-40s p50 %7.3f ms   p99 %7.3f ms\n", "Redis: XADD + BLPOP (floor)", r50, r99);
	printf("  %-40s p50 %7.3f ms   p99 %7.3f ms\n",
	    "gateway: POST + GET ?wait=10, keep-alive", g50, g99);
	printf("  %-40s p50 %7.3f ms   p99 %7.3f ms\n",
	    "gateway: POST ?wait=10 (one request)", w50, w99);
	printf("  %-40s %+.3f ms (target <= 0.5 ms); p50 ratio %.2fx\n",
	    "POST + GET - Redis at p50", g50 - r50, g50 / r50);
	printf("  %-40s %+.3f ms (target <= 0.5 ms); p50 ratio %.2fx\n",
	    "POST ?wait - Redis at p50", w50 - r50, w50 / r50);
	if (failures)
		printf("  %d job(s) failed\n", failures);
	curl_easy_cleanup(c);
	sandq_close(q);
	free(out.p);
	free(gw);
	free(gw1);
	free(rd);
	return failures ? -1 : 0;
}

/*** (b) streams ***/

struct watch {
	struct buf b;
	bool open;	/* the first bytes came, no end yet */
};

static size_t streams_open, streams_peak;

/* Write callback of one event stream: counts it open at its first bytes. */
static size_t
watch_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct watch *w = arg;

	if (!w->open && w->b.len == 0) {
		w->open = true;
		if (++streams_open > streams_peak)
			streams_peak = streams_open;
	}
	return buf_write(data, size, nmemb, &w->b);
}

/* n streamed jobs and n event streams held at once by the gateway pid. */
static int
bench_streams(const char *base, pid_t pid, size_t n)
{
	char (*ids)[SANDQ_ID_MAX + 1] = calloc(n, sizeof(*ids)), id[SANDQ_ID_MAX + 1];
	struct watch *w = calloc(n, sizeof(*w));
	CURL **h = calloc(n, sizeof(*h)), *c = curl_easy_init();
	CURLM *m = curl_multi_init();
	struct buf out = { 0 };
	size_t ended = 0, lines = 0, bad = 0;
	double rss0 = proc_mib(pid, "VmRSS"), t0, hwm;
	int running = 0;

	if (ids == NULL || w == NULL || h == NULL || c == NULL || m == NULL)
		return -1;
	/* Two jobs that hold both workers while the streams are opened, so the
	 * streamed jobs all wait: every stream is open at once. */
	for (int i = 0; i < 2; i++)
		if (gw_submit(c, base, "{\"op\":\"sh\",\"script\":\"sleep 3\"}", id, &out) < 0)
			return -1;
	t0 = now_ms();
	for (size_t i = 0; i < n; i++)
		if (gw_submit(c, base, "{\"op\":\"sh\",\"stream\":true,\"script\":\""
		    STREAM_SCRIPT "\"}", ids[i], &out) < 0) {
			fprintf(stderr, "gateway-bench: submit %zu of %zu failed\n", i, n);
			return -1;
		}
	curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
	for (size_t i = 0; i < n; i++) {
		char url[SANDQ_ID_MAX + 128];

		snprintf(url, sizeof(url), "%s/v1/jobs/%s/events", base, ids[i]);
		h[i] = curl_easy_init();
		curl_easy_setopt(h[i], CURLOPT_URL, url);
		curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, watch_write);
		curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &w[i]);
		curl_easy_setopt(h[i], CURLOPT_PRIVATE, &w[i]);
		curl_easy_setopt(h[i], CURLOPT_TIMEOUT, 300L);
		curl_easy_setopt(h[i], CURLOPT_FORBID_REUSE, 1L);
		curl_multi_add_handle(m, h[i]);
	}
	do {
		CURLMsg *msg;
		int left;

		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left)) != NULL) {
			struct watch *x = NULL;
			long status = 0;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
			if (x->open) {
				x->open = false;
				streams_open--;
			}
			if (msg->data.result != CURLE_OK || status != 200)
				bad++;
			if (x->b.p && strstr(x->b.p, "event: end\ndata: {\"status\":\"ok\"}"))
				ended++;
			/* Lines, not events: the worker may read two lines in one
			 * piece. */
			for (int k = 0; k < 3; k++) {
				static const char *const line[] = { "one\\n", "two\\n", "three\\n" };

				lines += x->b.p && strstr(x->b.p, line[k]) != NULL;
			}
		}
		if (running)
			curl_multi_poll(m, NULL, 0, 1000, NULL);
	} while (running);
	hwm = proc_mib(pid, "VmHWM");
	printf("\n(b) %zu event streams of streamed sh jobs (3 lines each), one gateway\n", n);
	printf("  %-40s %zu (of %zu)\n", "open at once, at most", streams_peak, n);
	printf("  %-40s %zu (of %zu); %zu lines (of %zu); %zu failed\n",
	    "streams that got end {status: ok}", ended, n, lines, 3 * n, bad);
	printf("  %-40s %.1f MiB (target < 100 MB); %.1f MiB before the streams\n",
	    "gateway peak RSS (VmHWM)", hwm, rss0);
	printf("  %-40s %.1f s\n", "first submit to last end", (now_ms() - t0) / 1e3);
	for (size_t i = 0; i < n; i++) {
		curl_multi_remove_handle(m, h[i]);
		curl_easy_cleanup(h[i]);
		free(w[i].b.p);
	}
	curl_multi_cleanup(m);
	curl_easy_cleanup(c);
	free(out.p);
	free(ids);
	free(w);
	free(h);
	return ended == n && lines == 3 * n && bad == 0 ? 0 : -1;
}

/*** (c) result reads ***/

/* nreads GETs of base/v1/jobs/id over nconn keep-alive connections: reads/s
 * (NAN if one failed). */
static double
gw_reads(const char *base, const char *id, size_t nreads, int nconn)
{
	CURLM *m = curl_multi_init();
	CURL **h = calloc((size_t)nconn, sizeof(*h));
	struct buf *b = calloc((size_t)nconn, sizeof(*b));
	size_t started = 0, done = 0, bad = 0;
	char url[SANDQ_ID_MAX + 128];
	double t0;
	int running = 0;

	snprintf(url, sizeof(url), "%s/v1/jobs/%s", base, id);
	for (int i = 0; i < nconn && started < nreads; i++, started++) {
		h[i] = curl_easy_init();
		curl_easy_setopt(h[i], CURLOPT_URL, url);
		curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, buf_write);
		curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &b[i]);
		curl_easy_setopt(h[i], CURLOPT_PRIVATE, &b[i]);
		curl_multi_add_handle(m, h[i]);
	}
	t0 = now_ms();
	do {
		CURLMsg *msg;
		int left;

		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left)) != NULL) {
			CURL *e = msg->easy_handle;
			struct buf *x = NULL;
			long status = 0;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
			if (msg->data.result != CURLE_OK || status != 200)
				bad++;
			done++;
			x->len = 0;
			curl_multi_remove_handle(m, e);
			if (started < nreads) {	/* again, on the same connection */
				started++;
				curl_multi_add_handle(m, e);
				running = 1;
			}
		}
		if (running)
			curl_multi_poll(m, NULL, 0, 1000, NULL);
	} while (running || done < started);
	t0 = now_ms() - t0;
	for (int i = 0; i < nconn; i++) {
		curl_easy_cleanup(h[i]);
		free(b[i].p);
	}
	curl_multi_cleanup(m);
	free(h);
	free(b);
	return bad ? NAN : (double)nreads / (t0 / 1e3);
}

/* nreads GETs of the result key of id straight from Redis over nconn
 * connections, one outstanding per connection: reads/s (NAN on failure). */
static double
redis_reads(const char *id, size_t nreads, int nconn)
{
	redisContext **rc = calloc((size_t)nconn, sizeof(*rc));
	char key[KEY_MAX];
	size_t done = 0, bad = 0;
	double t0;

	if (rc == NULL || key_res(key, "sandq", TENANT, id) < 0)
		return NAN;
	for (int i = 0; i < nconn; i++)
		if ((rc[i] = redis_open()) == NULL)
			return NAN;
	t0 = now_ms();
	while (done < nreads) {
		int k = (int)(nreads - done < (size_t)nconn ? nreads - done : (size_t)nconn);

		for (int i = 0; i < k; i++)
			redisAppendCommand(rc[i], "GET %s", key);
		for (int i = 0; i < k; i++) {
			redisReply *r = NULL;

			if (redisGetReply(rc[i], (void **)&r) != REDIS_OK ||
			    r->type != REDIS_REPLY_STRING)
				bad++;
			freeReplyObject(r);
		}
		done += (size_t)k;
	}
	t0 = now_ms() - t0;
	for (int i = 0; i < nconn; i++)
		redisFree(rc[i]);
	free(rc);
	return bad ? NAN : (double)nreads / (t0 / 1e3);
}

/* The gateway pinned to CPU 0, this process to the last CPU. */
static int
bench_reads(const char *id, size_t nreads, int nconn)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t all, mine;
	char base[64];
	double g, r, cpu;
	pid_t pid;

	sched_getaffinity(0, sizeof(all), &all);
	if ((pid = gateway_start(0, 1000, base)) < 0)
		return -1;
	CPU_ZERO(&mine);
	CPU_SET(ncpu > 1 ? ncpu - 1 : 0, &mine);
	sched_setaffinity(0, sizeof(mine), &mine);
	gw_reads(base, id, nreads / 10, nconn);	/* warm-up */
	cpu = proc_cpu_s(pid);
	g = gw_reads(base, id, nreads, nconn);
	cpu = proc_cpu_s(pid) - cpu;
	r = redis_reads(id, nreads, nconn);
	sched_setaffinity(0, sizeof(all), &all);
	gateway_stop(pid);
	printf("\n(c) GET of one existing result, %zu reads over %d keep-alive connections\n",
	    nreads, nconn);
	printf("  %-40s %8.0f reads/s\n", "Redis: GET of the result key (floor)", r);
	printf("  %-40s %8.0f reads/s (%.2fx the floor)\n",
	    "gateway on one CPU: GET /v1/jobs/ID", g, g / r);
	printf("  %-40s %8.0f reads per CPU second (its CPU %.0f%% busy)\n",
	    "gateway, per second of its own CPU", (double)nreads / cpu,
	    100.0 * cpu / ((double)nreads / g));
	return isnan(g) || isnan(r) ? -1 : 0;
}

int
main(int argc, char **argv)
{
	size_t njobs = 500, nstreams = 1000, nreads = 50000;
	int nconn = 16, rc = 0;
	struct rlimit rl;
	char base[64], id[SANDQ_ID_MAX + 1] = "";
	pid_t gw;

	if (argc < 2) {
		fprintf(stderr, "usage: gateway-bench URL [--jobs N] [--streams N] "
		    "[--reads N] [--conns N]\n");
		return 2;
	}
	redis_url = argv[1];
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--jobs") == 0)
			njobs = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--streams") == 0)
			nstreams = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--reads") == 0)
			nreads = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--conns") == 0)
			nconn = atoi(argv[i + 1]);
	}
	if (njobs == 0 || nstreams == 0 || nreads == 0 || nconn <= 0)
		return 2;
	build_dir = getenv("SANDQ_BUILD") ? getenv("SANDQ_BUILD") : "build";
	/* Each stream is a descriptor here and one in the gateway (which
	 * inherits this limit): room for both, and for curl's spares. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2 * nstreams + 256) {
		rl.rlim_cur = rl.rlim_max < 2 * nstreams + 256 ? rl.rlim_max : 2 * nstreams + 256;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || token_make() < 0)
		return 1;
	headers = curl_slist_append(NULL, auth_header);
	headers = curl_slist_append(headers, "Content-Type: application/json");
	if ((gw = gateway_start(-1, (unsigned)nstreams + 100, base)) < 0)
		return 1;
	printf("sandq gateway bench on %ld CPUs\n\n", sysconf(_SC_NPROCESSORS_ONLN));
	fflush(stdout);
	if (bench_latency(base, njobs, id) < 0)
		rc = 1;
	fflush(stdout);
	if (bench_streams(base, gw, nstreams) < 0)
		rc = 1;
	fflush(stdout);
	gateway_stop(gw);
	if (id[0] == '\0' || bench_reads(id, nreads, nconn) < 0)
		rc = 1;
	token_drop();
	curl_slist_free_all(headers);
	curl_global_cleanup();
	return rc;
}
