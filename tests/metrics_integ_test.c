/*
 * metrics_integ_test.c - sandqd's GET /metrics end to end (issue 18):
 * redis-server and sandqd from tests/harness.c, sandqd's metrics_listen on
 * a free loopback port, jobs that end ok, exit and with a refused system
 * call; then the exposition read plainly, and Debian's prometheus started
 * as a child (its own prometheus.yml scraping sandqd every second, its
 * storage in the test's folder), waited for until its target is "up", and
 * asked for the counts the jobs caused. Everything is stopped by PID.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define OK_LINE "sandq_jobs_total{tenant=\"default\",status=\"ok\"}"
#define RUNS_LINE "sandq_job_run_seconds_count{tenant=\"default\"}"

static struct harness H;
static pid_t prom_pid;

/* A free loopback port (closed again: whoever binds it next gets it). */
static int
free_port(void)
{
	int port = 0, fd = harness_listen(&port);

	close(fd);
	return port;
}

/* GET url: the body (owned), *status and, if ctype, the Content-Type. */
static char *
http_get(const char *url, long *status, char *ctype, size_t ctlen)
{
	CURL *c = curl_easy_init();
	char *buf = NULL, *ct = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	CURLcode rc;

	cr_assert(c != NULL && f != NULL);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	rc = curl_easy_perform(c);
	*status = 0;
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
		curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
		if (ctype != NULL)
			snprintf(ctype, ctlen, "%s", ct != NULL ? ct : "");
	}
	curl_easy_cleanup(c);
	fclose(f);
	return buf;
}

static void
teardown(void)
{
	if (prom_pid > 0) {
		kill(prom_pid, SIGTERM);
		waitpid(prom_pid, NULL, 0);
	}
	harness_stop(&H);
}

/* The jobs whose counts the metrics must show: two ok, one exit, one refusal. */
static void
run_jobs(void)
{
	struct sandq *c = harness_client(&H);
	struct sandq_result *r;

	r = harness_sh(c, "true", NULL);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	r = harness_sh(c, "echo hi", NULL);
	cr_assert_str_eq(r->status, "ok");
	sandq_result_free(r);
	r = harness_sh(c, "unshare -U true 2>/dev/null; exit 4", NULL);
	cr_assert_str_eq(r->status, "exit");
	sandq_result_free(r);
	sandq_close(c);
}

/* The one sample named line (e.g. "sandq_x{a=\"b\"}") in text, or -1. */
static double
sample(const char *text, const char *line)
{
	char want[256];
	const char *p;

	snprintf(want, sizeof(want), "\n%s ", line);
	p = strstr(text, want);
	return p != NULL ? strtod(p + strlen(want), NULL) : -1;
}

/* The sample line of sandqd's /metrics at port now (-1: none). */
static double
scrape_sample(int port, const char *line)
{
	char url[128], *text;
	long status;
	double v;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
	text = http_get(url, &status, NULL, 0);
	cr_assert_eq(status, 200);
	v = sample(text, line);
	free(text);
	return v < 0 ? 0 : v;
}

Test(metrics_integ, get_metrics_is_the_exposition_format_with_the_jobs_counted,
    .fini = teardown, .timeout = 120)
{
	char set[64], url[128], ctype[128];
	int port = free_port();
	double ok0, runs0;
	long status;
	char *text;

	snprintf(set, sizeof(set), "metrics_listen=127.0.0.1:%d", port);
	harness_start(&H, 1, (const char *const[]){ "--set", set, NULL });
	/* harness_start() ran a job of its own: counts are from here on. */
	ok0 = scrape_sample(port, OK_LINE);
	runs0 = scrape_sample(port, RUNS_LINE);
	run_jobs();
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
	text = http_get(url, &status, ctype, sizeof(ctype));
	cr_assert_eq(status, 200, "%s", text);
	cr_expect(strncmp(ctype, "text/plain; version=0.0.4", 25) == 0, "%s", ctype);
	cr_expect_not_null(strstr(text, "# TYPE sandq_jobs_total counter\n"));
	cr_expect_not_null(strstr(text, "# TYPE sandq_job_run_seconds histogram\n"));
	cr_expect_eq(sample(text, OK_LINE), ok0 + 2, "%s", text);
	cr_expect_eq(sample(text, "sandq_jobs_total{tenant=\"default\",status=\"exit\"}"), 1);
	cr_expect_geq(sample(text, "sandq_seccomp_refusals_total{syscall=\"unshare\"}"), 1);
	cr_expect_eq(sample(text, RUNS_LINE), runs0 + 3);
	cr_expect_eq(sample(text,
	    "sandq_job_run_seconds_bucket{tenant=\"default\",le=\"+Inf\"}"), runs0 + 3);
	cr_expect_eq(sample(text, "sandq_workers{state=\"idle\"}"), 1);
	cr_expect_eq(sample(text, "sandq_queue_depth{tenant=\"default\"}"), 0);
	free(text);
	/* Only /metrics, only GET. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/other", port);
	free(http_get(url, &status, NULL, 0));
	cr_expect_eq(status, 404);
}

/* Prometheus's answer to PromQL q: the first sample's value, or -1. */
static double
prom_query(int pport, const char *q)
{
	CURL *c = curl_easy_init();
	char *esc = curl_easy_escape(c, q, 0), url[512], *body;
	json_t *o, *v;
	double out = -1;
	long status;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/query?query=%s", pport, esc);
	curl_free(esc);
	curl_easy_cleanup(c);
	body = http_get(url, &status, NULL, 0);
	o = json_loads(body, 0, NULL);
	v = json_array_get(json_object_get(json_object_get(o, "data"), "result"), 0);
	v = json_array_get(json_object_get(v, "value"), 1);
	if (json_is_string(v))
		out = strtod(json_string_value(v), NULL);
	json_decref(o);
	free(body);
	return out;
}

/* Whether prometheus reports its target up (arg: its port). */
static bool
target_up(void *arg)
{
	char url[128], *body;
	long status;
	bool up;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/targets", *(int *)arg);
	body = http_get(url, &status, NULL, 0);
	up = status == 200 && body != NULL && strstr(body, "\"health\":\"up\"") != NULL;
	free(body);
	if (!up)
		usleep(200000);
	return up;
}

/* Whether a query answers (arg: its port): the first scrape is stored. */
static bool
scraped(void *arg)
{
	bool ok = prom_query(*(int *)arg, "sum(sandq_jobs_total{status=\"exit\"})") >= 1;

	if (!ok)
		usleep(200000);
	return ok;
}

/* Whether the Prometheus on port (arg) is ours: it names our config file. */
struct prom_probe {
	int port;
	const char *conf;
	pid_t pid;
};

static bool
prom_ours(void *arg)
{
	struct prom_probe *p = arg;
	char url[128], *body;
	long status;
	bool ours;

	/* Gone: it could not bind its port (another process took it). */
	if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
		p->pid = -1;
		return true;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/status/flags", p->port);
	body = http_get(url, &status, NULL, 0);
	ours = status == 200 && body != NULL && strstr(body, p->conf) != NULL;
	free(body);
	if (!ours)
		usleep(100000);
	return ours;
}

/*
 * Starts prometheus with conf and data on a free loopback port other than
 * avoid, into prom_pid and *pport. A port picked free can be taken before
 * prometheus binds it (by anything on the machine): then it exits, or
 * another server answers there, and it is started again on another.
 */
static void
prom_start(const char *dir, const char *conf, const char *data, int avoid,
    int *pport)
{
	char cfgarg[600], dataarg[600], web[64], log[600];

	snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", conf);
	snprintf(dataarg, sizeof(dataarg), "--storage.tsdb.path=%s", data);
	snprintf(log, sizeof(log), "%s/prometheus.log", dir);
	for (int attempt = 0; attempt < 5; attempt++) {
		struct prom_probe p;

		if ((*pport = free_port()) == avoid)
			continue;
		snprintf(web, sizeof(web), "--web.listen-address=127.0.0.1:%d", *pport);
		if ((prom_pid = fork()) == 0) {
			if (freopen(log, "a", stdout) == NULL ||
			    freopen(log, "a", stderr) == NULL)
				_exit(126);
			execl("/usr/bin/prometheus", "prometheus", cfgarg, dataarg, web,
			    (char *)NULL);
			_exit(127);
		}
		cr_assert(prom_pid > 0);
		p = (struct prom_probe){ .port = *pport, .conf = conf, .pid = prom_pid };
		if (harness_wait_for(prom_ours, &p, 60000) && p.pid > 0)
			return;
		if (p.pid > 0) {
			kill(prom_pid, SIGTERM);
			waitpid(prom_pid, NULL, 0);
		}
		prom_pid = 0;
	}
	cr_assert_fail("prometheus did not start on a port of its own (see %s)", log);
}

Test(metrics_integ, prometheus_scrapes_sandqd_and_sums_what_the_jobs_did,
    .fini = teardown, .timeout = 180)
{
	char set[64], conf[512], data[512];
	int port = free_port(), pport;
	double ok0, runs0;
	FILE *f;

	if (access("/usr/bin/prometheus", X_OK) != 0)
		cr_skip_test("no /usr/bin/prometheus (deploy/install-deps.sh installs it)");
	snprintf(set, sizeof(set), "metrics_listen=127.0.0.1:%d", port);
	harness_start(&H, 1, (const char *const[]){ "--set", set, NULL });
	ok0 = scrape_sample(port, OK_LINE);
	runs0 = scrape_sample(port, RUNS_LINE);
	run_jobs();

	snprintf(conf, sizeof(conf), "%s/prometheus.yml", H.dir);
	snprintf(data, sizeof(data), "%s/tsdb", H.dir);
	cr_assert_not_null(f = fopen(conf, "w"));
	fprintf(f, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
	    "scrape_configs:\n  - job_name: sandqd\n    static_configs:\n"
	    "      - targets: ['127.0.0.1:%d']\n", port);
	fclose(f);
	prom_start(H.dir, conf, data, port, &pport);
	cr_assert(harness_wait_for(target_up, &pport, 90000), "prometheus never scraped "
	    "sandqd (see %s/prometheus.log)", H.dir);
	cr_assert(harness_wait_for(scraped, &pport, 60000));
	cr_expect_eq(prom_query(pport, "sum(sandq_jobs_total{status=\"ok\"})"), ok0 + 2);
	cr_expect_eq(prom_query(pport, "sum(sandq_jobs_total{status=\"exit\"})"), 1);
	cr_expect_geq(prom_query(pport,
	    "sum(sandq_seccomp_refusals_total{syscall=\"unshare\"})"), 1);
	cr_expect_eq(prom_query(pport, "sum(sandq_job_run_seconds_count)"), runs0 + 3);
}
