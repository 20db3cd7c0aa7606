/*
 * gwharness.c - what the gateway's integration tests share
 * (gateway_test, gateway_stream_test, gateway_sandbox_test): a
 * sandq-gateway started on a free loopback port and stopped by its pid,
 * HTTP requests through libcurl, tokens written straight into Redis with
 * queue/token.c, and the length of a tenant's job stream.
 *
 * Asserts (Criterion) on any failure: it is test scaffolding. One gateway
 * per test process is "the" gateway: gwh_base names the last one started.
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
#include <unistd.h>

#include "../common/err.h"
#include "gwharness.h"

char gwh_base[64];

/* A GET, or a POST when body is set; returns the body, *status the code. */
char *
gwh_http(const char *method, const char *path, const char *token, const char *body,
    long *status)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hs = NULL;
	char url[512], auth[128], *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);

	cr_assert(c != NULL && f != NULL);
	snprintf(url, sizeof(url), "%s%s", gwh_base, path);
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
/* method path with n raw bytes of body (NULL: none); *outlen the answer's. */
char *
gwh_http_raw(const char *method, const char *path, const char *token,
    const void *body, size_t n, long *status, size_t *outlen)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hs = NULL;
	char url[512], auth[128], *out = NULL;
	FILE *f = open_memstream(&out, outlen);

	cr_assert(c != NULL && f != NULL);
	snprintf(url, sizeof(url), "%s%s", gwh_base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 90L);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	hs = curl_slist_append(hs, auth);
	hs = curl_slist_append(hs, "Content-Type: application/octet-stream");
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)n);
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
char *
gwh_error_code(const char *text)
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
/* Runs argv (argv[0] the gateway) logging to h's folder; waits until
 * /healthz answers on 127.0.0.1:port, which gwh_base names. */
static pid_t
gwh_spawn(const struct harness *h, const char *const *argv, int port)
{
	char log[400];
	pid_t parent = getpid(), pid;

	snprintf(gwh_base, sizeof(gwh_base), "http://127.0.0.1:%d", port);
	snprintf(log, sizeof(log), "%s/gateway.log", h->dir);
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

		snprintf(url, sizeof(url), "%s/healthz", gwh_base);
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
/* Starts the gateway on a free port against redis_url; waits for /healthz. */
pid_t
gwh_start(const struct harness *h, const char *redis_url, const char *const *extra)
{
	char gwbin[512], listen[64];
	const char *argv[16];
	int port = 0, lfd = harness_listen(&port), n = 0;

	close(lfd);	/* the port is free; the gateway binds it at once */
	snprintf(gwbin, sizeof(gwbin), "%s/sandq-gateway", harness_build_dir());
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	argv[n++] = gwbin;
	argv[n++] = "--listen";
	argv[n++] = listen;
	argv[n++] = "--redis";
	argv[n++] = redis_url;
	while (extra && *extra)
		argv[n++] = *extra++;
	argv[n] = NULL;
	return gwh_spawn(h, argv, port);
}
/* The gateway with only --config conf; it listens where the file says. */
pid_t
gwh_start_conf(const struct harness *h, const char *conf, int port)
{
	char gwbin[512];
	const char *argv[] = { gwbin, "--config", conf, NULL };

	snprintf(gwbin, sizeof(gwbin), "%s/sandq-gateway", harness_build_dir());
	return gwh_spawn(h, argv, port);
}
void
gwh_stop(pid_t pid)
{
	int st;

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
}
/* A new token of tenant (admin when tenant is ""), its record in Redis. */
void
gwh_token_make(const struct harness *h, const char *tenant, char tok[TOKEN_LEN + 1])
{
	struct token_record r = { .admin = tenant[0] == '\0', .created_at = 1 };
	char hash[TOKEN_HASH_HEX + 1], *json = NULL;
	struct err e = { 0 };
	redisContext *rc = redisConnect("127.0.0.1", h->port);
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
long long
gwh_xlen(const struct harness *h, const char *tenant)
{
	redisContext *rc = redisConnect("127.0.0.1", h->port);
	redisReply *reply = redisCommand(rc, "XLEN sandq:{%s}:jobs", tenant);
	long long n;

	cr_assert(reply != NULL && reply->type == REDIS_REPLY_INTEGER);
	n = reply->integer;
	freeReplyObject(reply);
	redisFree(rc);
	return n;
}
