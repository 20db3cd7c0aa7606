/*
 * gateway_conf_test.c - sandq-gateway --config: the [gateway] section of a
 * sandq.conf applies (listen, max_body; redis taken from [sandqd] when the
 * section leaves it empty), command-line options override it, a bad value
 * stops start-up naming the file and line, and max_connections is enforced
 * at accept (and logged once per burst).
 *
 * Only redis-server runs (harness_redis_start()): the jobs submitted here
 * are only added to their stream, never run.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gwharness.h"
#include "harness.h"

static struct harness H;
static pid_t gw_pid = -1;

static void
setup(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	harness_redis_start(&H);
}

static void
teardown(void)
{
	gwh_stop(gw_pid);
	gw_pid = -1;
	harness_stop(&H);
}

TestSuite(gateway_conf, .init = setup, .fini = teardown, .timeout = 60);

/* Writes text into h's folder as name; path receives its path. */
static void
conf_write(const char *name, const char *text, char path[400])
{
	FILE *f;

	snprintf(path, 400, "%s/%s", H.dir, name);
	cr_assert((f = fopen(path, "w")) != NULL);
	fputs(text, f);
	fclose(f);
}

/* The whole of file path (owned), "" when it cannot be read. */
static char *
slurp(const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = fopen(path, "r"), *m = open_memstream(&buf, &len);
	int ch;

	cr_assert(m != NULL);
	while (f && (ch = fgetc(f)) != EOF)
		fputc(ch, m);
	if (f)
		fclose(f);
	fclose(m);
	return buf;
}

/* A free loopback port. */
static int
port_free(void)
{
	int port = 0, fd = harness_listen(&port);

	close(fd);
	return port;
}

/* A JSON job body of more than 100 bytes. */
static const char big_job[] = "{\"op\":\"sh\",\"script\":\"echo "
    "0123456789012345678901234567890123456789012345678901234567890123456789"
    "0123456789\"}";

Test(gateway_conf, file_values_apply_and_options_override)
{
	char conf[400], text[1024], tok[TOKEN_LEN + 1];
	const char *extra[] = { "--config", conf, "--max-body", "1000000", NULL };
	int port = port_free();
	long status = 0;
	char *out;

	gwh_token_make(&H, "default", tok);
	/* [gateway] sets no redis: [sandqd]'s applies. */
	snprintf(text, sizeof(text), "[sandqd]\nredis = %s\n\n[gateway]\n"
	    "listen = 127.0.0.1:%d\nmax_body = 100\nmax_streams = 5\n", H.url, port);
	conf_write("sandq.conf", text, conf);
	gw_pid = gwh_start_conf(&H, conf, port);	/* listens where the file says */
	free(gwh_http("GET", "/readyz", NULL, NULL, &status));
	cr_assert_eq(status, 200, "the gateway reaches [sandqd] redis");
	out = gwh_http("POST", "/v1/jobs", tok, big_job, &status);
	cr_assert_eq(status, 413, "max_body = 100 applies: %s", out);
	free(out);
	out = gwh_http("POST", "/v1/jobs", tok, "{\"op\":\"sh\",\"script\":\"true\"}", &status);
	cr_assert_eq(status, 202, "%s", out);
	free(out);
	gwh_stop(gw_pid);

	/* --max-body on the command line overrides the file. */
	gw_pid = gwh_start(&H, H.url, extra);
	out = gwh_http("POST", "/v1/jobs", tok, big_job, &status);
	cr_assert_eq(status, 202, "--max-body overrides the file: %s", out);
	free(out);
	cr_assert_eq(gwh_xlen(&H, "default"), 2);
}

Test(gateway_conf, bad_value_names_file_and_line)
{
	char conf[400], cmd[1400], log[500], *text;
	int st;

	conf_write("bad.conf", "[gateway]\nlisten = 127.0.0.1:1\nmax_connections = 0\n", conf);
	snprintf(log, sizeof(log), "%s/bad.log", H.dir);
	snprintf(cmd, sizeof(cmd), "'%s/sandq-gateway' --config '%s' 2>'%s'",
	    harness_build_dir(), conf, log);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d", st);
	text = slurp(log);
	cr_assert(strstr(text, "bad.conf:3") && strstr(text, "max_connections"),
	    "stderr: %s", text);
	free(text);
}

/* A TCP connection to the gateway on port, or -1. */
static int
tcp_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fd >= 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
	return fd;
}

/* True if the peer closed fd within ms (EOF or reset), false if it is open. */
static bool
closed_within(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, ms) <= 0)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

Test(gateway_conf, max_connections_closes_new_ones_at_accept)
{
	char conf[400], text[1024], logpath[400], *log;
	int port = port_free(), held[2], extra;
	long status = 0;
	const char *s;

	snprintf(text, sizeof(text), "[gateway]\nlisten = 127.0.0.1:%d\nredis = %s\n"
	    "max_connections = 2\n", port, H.url);
	conf_write("sandq.conf", text, conf);
	gw_pid = gwh_start_conf(&H, conf, port);
	usleep(200 * 1000);	/* the /healthz probes' connections are gone */
	held[0] = tcp_connect(port);
	held[1] = tcp_connect(port);
	cr_assert(!closed_within(held[0], 300) && !closed_within(held[1], 0),
	    "two connections are held");
	/* The third, and a fourth in the same burst, are closed at once. */
	extra = tcp_connect(port);
	cr_assert(closed_within(extra, 3000), "a third connection is closed");
	close(extra);
	extra = tcp_connect(port);
	cr_assert(closed_within(extra, 3000), "a fourth connection is closed");
	close(extra);
	/* One held connection goes: a new one is served. */
	close(held[0]);
	usleep(300 * 1000);
	free(gwh_http("GET", "/healthz", NULL, NULL, &status));
	cr_assert_eq(status, 200);
	close(held[1]);
	snprintf(logpath, sizeof(logpath), "%s/gateway.log", H.dir);
	log = slurp(logpath);
	s = strstr(log, "closing new ones at accept");
	cr_assert(s != NULL, "log: %s", log);
	cr_assert(strstr(s + 1, "closing new ones at accept") == NULL,
	    "logged once per burst: %s", log);
	cr_assert(strstr(log, "2 were closed at accept") != NULL, "log: %s", log);
	free(log);
}
