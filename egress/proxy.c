/*
 * proxy.c - sandq-egress's engine: each `net: allow` job's one way out.
 *
 * A job's network namespace holds loopback only. Its spawner made a TCP
 * listener on 127.0.0.1 inside it, and sandqd handed that listener here
 * (a run with cases: one per case's sandbox, each replacing the last)
 * with the job's identity and allow list (main.c). A listening socket stays
 * in the namespace it was made in, whoever holds it, so the proxy accepts
 * the job's connections on it while it connects out from the host's own
 * namespace: no veth, no route, no NAT, no DNS inside the job.
 *
 * DESIGN. Per connection, in order:
 *   1. the request head, at most HEAD_MAX bytes within head_timeout_ms,
 *      parsed by http_parser (never by hand): CONNECT host:port, or an
 *      absolute http:// URL (plain HTTP; origin-form requests are refused);
 *   2. the target checked against the job's patterns (egress/match.c): an
 *      IP literal only if a pattern is that literal;
 *   3. resolution by the proxy alone: the operator's hosts map, else
 *      getaddrinfo on libuv's pool; every address checked
 *      (egress_addr_refused: private, loopback, link-local, multicast, the
 *      host's own...) and the connection made to the first, the address
 *      checked and no other (no second lookup, so no DNS rebinding);
 *   4. plain HTTP: the head rewritten to origin form with the URL's Host,
 *      `Connection: close` and the Proxy-* headers dropped; CONNECT: `200` to the job,
 *      the server's bytes forwarded at once, the job's held until its
 *      ClientHello's SNI (sni.c) is known and equal to the CONNECT's name
 *      (no TLS at all is let through: the address is the checked one);
 *   5. bytes both ways, counted, with back-pressure (a side's reading
 *      stops while the other's write queue is long).
 * Each refusal answers the job with an HTTP status and a one-line reason,
 * and every connection is reported once (report callback): refused, or
 * ended with its bytes. Limits per job: connections open at once
 * (conns_max), bytes both ways over all of them (bytes_max), and bytes per
 * second each way (rate): a token bucket per direction of the job, one
 * second's worth deep, charged with each read; a read that leaves it in
 * debt stops that side's reading until the job's rate timer has refilled
 * it (the back-pressure of a long write queue, driven by the clock), and
 * the time each connection was held so is reported with it.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <http_parser.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "proxy.h"

#define HEAD_MAX (16 * 1024)		/* a request's head */
#define HEADERS_MAX 100			/* header lines of one request */
#define HELLO_MAX (16 * 1024 + 5)	/* a ClientHello: one TLS record */
#define READ_CHUNK (64 * 1024)
#define QUEUE_HIGH (1024 * 1024)	/* stop reading the other side above */
#define REPORTS_MAX 1000		/* connections reported one by one per job */

/* The two directions of the rate limit, indexes of the buckets. */
#define RATE_UP 0	/* the job's bytes to the server */
#define RATE_DOWN 1	/* the server's bytes to the job */

struct job;

/*
 * One listener of a job's: the first, made in its sandbox's namespace; a
 * run with cases has one per case's sandbox, each replacing the last.
 */
struct lsn {
	uv_tcp_t h;
	struct job *job;
	struct lsn *next;	/* the job's open ones */
};

/* Where a connection is. */
enum conn_state {
	C_HEAD,		/* reading the request head */
	C_RESOLVE,	/* the name being resolved */
	C_CONNECT,	/* connecting to the checked address */
	C_HELLO,	/* CONNECT: waiting for the ClientHello */
	C_PIPE,		/* bytes both ways */
	C_CLOSING,	/* handles closing */
};

struct conn {
	struct conn *next;	/* the job's list */
	struct job *job;
	enum conn_state state;
	int refs;		/* open handles and requests in flight */
	uv_tcp_t client;	/* the job's side */
	uv_tcp_t up;		/* the server's side, once connecting */
	bool up_init;
	uv_timer_t timer;	/* head and ClientHello deadline */
	uv_getaddrinfo_t gai;
	uv_connect_t creq;
	char head[HEAD_MAX];	/* the job's first bytes */
	size_t headlen;
	/* The parsed head, as offsets into head. */
	size_t url_off, url_len;
	size_t hf_off[HEADERS_MAX], hf_len[HEADERS_MAX];
	size_t hv_off[HEADERS_MAX], hv_len[HEADERS_MAX];
	size_t nh;
	bool head_done;
	bool connect;		/* a CONNECT request */
	char host[EGRESS_HOST_MAX + 1];	/* normalised target */
	bool host_ip;
	uint16_t port;
	char addr[48];		/* the address connected to */
	char *fwd;		/* what goes up first (rewritten head + rest) */
	size_t fwdlen;
	bool client_eof, up_eof;	/* EOF read from that side */
	bool up_done, down_done;	/* that direction flushed and shut down */
	uv_shutdown_t sh_up, sh_client;
	bool client_paused, up_paused;
	uint64_t up_bytes, down_bytes;
	bool rate_held[2];	/* that direction's source stopped by the rate */
	uint64_t held_at[2];	/* since when (uv_now) */
	uint64_t throttled_ms;	/* held by the rate so far, past holds */
	bool reported;
	char reason[64];	/* how it failed, for the report */
};

struct job {
	struct job *next;
	struct egress_proxy *px;
	uint32_t id;
	struct egress_pat pats[EGRESS_PATS_MAX];
	size_t npats;
	uint32_t conns_max;
	uint64_t bytes_max;
	uint64_t bytes;		/* both ways, all connections */
	uint64_t rate;		/* bytes per second each way; 0: no limit */
	int64_t tokens[2];	/* the buckets: RATE_UP, RATE_DOWN */
	uint64_t refilled_at;	/* uv_now of the last refill */
	uv_timer_t rate_timer;	/* refills and releases held connections */
	bool rate_timer_open;
	struct lsn *lsns;	/* listeners not closing */
	unsigned lsns_open;	/* listeners whose handles are not closed yet */
	bool ending;
	bool silent;		/* never started: no ended callback */
	struct conn *conns;
	unsigned nconns;	/* in the list */
	unsigned reports;
	uint64_t dropped;	/* reports past REPORTS_MAX */
};

struct egress_proxy {
	uv_loop_t *loop;
	struct egress_opts o;
	struct job *jobs;
	bool freeing;
};

/* One write of bytes to one side: the bytes live until its callback. */
struct wreq {
	uv_write_t req;
	struct conn *c;
	char *data;
};

static void conn_close(struct conn *c, const char *reason);
static void pipe_start(struct conn *c);

/*** Reports and the job's end ***/

static void
job_maybe_ended(struct job *j)
{
	struct egress_proxy *px = j->px;
	struct job **pp;

	if (!j->ending || j->lsns_open > 0 || j->rate_timer_open || j->conns != NULL)
		return;
	for (pp = &px->jobs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	if (px->o.ended != NULL && !px->freeing && !j->silent)
		px->o.ended(px->o.arg, j->id, j->dropped);
	free(j);
	if (px->freeing && px->jobs == NULL)
		free(px);
}

/* Reports c once: refused (state REFUSED) or ended (DONE). */
static void
conn_report(struct conn *c, uint8_t state, const char *reason)
{
	struct job *j = c->job;
	struct msg_egress_conn m;
	uint64_t throttled;

	if (c->reported)
		return;
	c->reported = true;
	if (j->reports >= REPORTS_MAX) {
		j->dropped++;
		return;
	}
	j->reports++;
	memset(&m, 0, sizeof(m));
	snprintf(m.host, sizeof(m.host), "%s", c->host[0] ? c->host : "?");
	snprintf(m.addr, sizeof(m.addr), "%s", c->addr);
	snprintf(m.reason, sizeof(m.reason), "%s", reason ? reason : "");
	m.port = c->port;
	m.state = state;
	m.tls = c->connect;
	m.up = c->up_bytes;
	m.down = c->down_bytes;
	throttled = c->throttled_ms;
	for (int d = 0; d < 2; d++)
		if (c->rate_held[d])	/* held still: up to now */
			throttled += uv_now(j->px->loop) - c->held_at[d];
	m.throttled_ms = (uint32_t)(throttled > UINT32_MAX ? UINT32_MAX : throttled);
	if (j->px->o.report != NULL)
		j->px->o.report(j->px->o.arg, j->id, &m);
}

/*** Closing ***/

static void
conn_unref(struct conn *c)
{
	struct job *j = c->job;
	struct conn **pp;

	if (--c->refs > 0)
		return;
	for (pp = &j->conns; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	j->nconns--;
	free(c->fwd);
	free(c);
	job_maybe_ended(j);
}

static void
on_handle_closed(uv_handle_t *h)
{
	conn_unref(h->data);
}

/*
 * Closes every handle of c; reports it first if it was not (an allowed
 * connection as ended, with reason if it failed).
 */
static void
conn_close(struct conn *c, const char *reason)
{
	if (c->state == C_CLOSING)
		return;
	if (!c->reported && c->state >= C_HELLO)
		conn_report(c, EGRESS_CONN_DONE, reason ? reason : c->reason);
	else if (!c->reported && c->host[0] != '\0')
		conn_report(c, EGRESS_CONN_DONE, reason ? reason : "ended before connecting");
	c->reported = true;
	c->state = C_CLOSING;
	if (c->gai.data != NULL)
		uv_cancel((uv_req_t *)&c->gai);
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	uv_close((uv_handle_t *)&c->client, on_handle_closed);
	if (c->up_init)
		uv_close((uv_handle_t *)&c->up, on_handle_closed);
}

static void
on_refusal_written(uv_write_t *w, int status)
{
	struct wreq *r = (struct wreq *)w;

	(void)status;
	conn_close(r->c, NULL);
	free(r->data);
	free(r);
}

/*
 * Refuses c: reported with reason, the job answered with status and a one
 * line text, then closed.
 */
static void
conn_refuse(struct conn *c, int status, const char *reason)
{
	struct wreq *r;
	const char *text = status == 403 ? "Forbidden" : status == 400 ? "Bad Request" :
	    status == 502 ? "Bad Gateway" : status == 503 ? "Service Unavailable" :
	    status == 431 ? "Request Header Fields Too Large" : "Error";
	uv_buf_t b;
	int n;

	conn_report(c, EGRESS_CONN_REFUSED, reason);
	if (c->state == C_CLOSING)
		return;
	r = xcalloc(1, sizeof(*r));
	r->c = c;
	n = xasprintf(&r->data, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
	    "Connection: close\r\nContent-Length: %zu\r\n\r\nsandq egress: %s\n", status,
	    text, strlen("sandq egress: \n") + strlen(reason), reason);
	b = uv_buf_init(r->data, (unsigned)n);
	uv_timer_stop(&c->timer);
	uv_read_stop((uv_stream_t *)&c->client);
	if (uv_write(&r->req, (uv_stream_t *)&c->client, &b, 1, on_refusal_written) < 0) {
		free(r->data);
		free(r);
		conn_close(c, NULL);
	}
}

static void
on_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	if (c->state == C_HEAD)
		conn_refuse(c, 400, "no complete request in time");
	else if (c->state == C_HELLO)
		conn_close(c, "no ClientHello in time");
}

/*** The request head ***/

static int
on_url(http_parser *hp, const char *at, size_t len)
{
	struct conn *c = hp->data;

	c->url_off = (size_t)(at - c->head);
	c->url_len = len;
	return 0;
}

static int
on_hfield(http_parser *hp, const char *at, size_t len)
{
	struct conn *c = hp->data;

	if (c->nh == HEADERS_MAX)
		return -1;
	c->hf_off[c->nh] = (size_t)(at - c->head);
	c->hf_len[c->nh] = len;
	c->hv_off[c->nh] = 0;
	c->hv_len[c->nh] = 0;
	c->nh++;
	return 0;
}

static int
on_hvalue(http_parser *hp, const char *at, size_t len)
{
	struct conn *c = hp->data;

	if (c->nh == 0)
		return -1;
	c->hv_off[c->nh - 1] = (size_t)(at - c->head);
	c->hv_len[c->nh - 1] = len;
	return 0;
}

/* The head is complete: 2 stops the parser there (no body, no next). */
static int
on_headers_complete(http_parser *hp)
{
	struct conn *c = hp->data;

	c->head_done = true;
	return 2;
}

static const http_parser_settings head_settings = {
	.on_url = on_url,
	.on_header_field = on_hfield,
	.on_header_value = on_hvalue,
	.on_headers_complete = on_headers_complete,
};

/* Whether header i is named name (case-insensitive). */
static bool
header_is(const struct conn *c, size_t i, const char *name)
{
	return c->hf_len[i] == strlen(name) &&
	    strncasecmp(c->head + c->hf_off[i], name, c->hf_len[i]) == 0;
}

/*
 * The plain HTTP request as it goes up: origin form, our Connection, no
 * Proxy-* headers, then whatever of the body came with the head.
 */
static void
build_forward(struct conn *c, const http_parser *hp, const struct http_parser_url *u,
    size_t used)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	bool v6;

	if (f == NULL)
		fatal("open_memstream");
	fprintf(f, "%s ", http_method_str((enum http_method)hp->method));
	if (u->field_set & (1 << UF_PATH))
		fwrite(c->head + c->url_off + u->field_data[UF_PATH].off, 1,
		    u->field_data[UF_PATH].len, f);
	else
		fputc('/', f);
	if (u->field_set & (1 << UF_QUERY)) {
		fputc('?', f);
		fwrite(c->head + c->url_off + u->field_data[UF_QUERY].off, 1,
		    u->field_data[UF_QUERY].len, f);
	}
	fprintf(f, " HTTP/%u.%u\r\n", hp->http_major, hp->http_minor);
	/*
	 * The Host is the URL's, whatever the job wrote (RFC 9112, 3.2.2: a
	 * proxy replaces it): a server of many names answers for the one
	 * the list allowed, never for another the job slipped in.
	 */
	v6 = strchr(c->host, ':') != NULL;
	fprintf(f, "Host: %s%s%s", v6 ? "[" : "", c->host, v6 ? "]" : "");
	if (c->port != 80)
		fprintf(f, ":%u", (unsigned)c->port);
	fputs("\r\n", f);
	for (size_t i = 0; i < c->nh; i++) {
		if (header_is(c, i, "connection") || header_is(c, i, "proxy-connection") ||
		    header_is(c, i, "proxy-authorization") || header_is(c, i, "keep-alive") ||
		    header_is(c, i, "host"))
			continue;
		fwrite(c->head + c->hf_off[i], 1, c->hf_len[i], f);
		fputs(": ", f);
		fwrite(c->head + c->hv_off[i], 1, c->hv_len[i], f);
		fputs("\r\n", f);
	}
	fputs("Connection: close\r\n\r\n", f);
	fwrite(c->head + used, 1, c->headlen - used, f);
	fclose(f);
	c->fwd = s;
	c->fwdlen = len;
}

static void resolve(struct conn *c);

/*
 * Parses what came of the head so far; on a whole head, checks the target
 * and goes on to resolve it. Returns with c refused or moved on, or still
 * in C_HEAD waiting for more.
 */
static void
head_feed(struct conn *c)
{
	struct http_parser_url u;
	http_parser hp;
	size_t used, hlen;
	const char *h;
	int port;

	http_parser_init(&hp, HTTP_REQUEST);
	hp.data = c;
	c->nh = 0;
	c->head_done = false;
	c->url_len = 0;
	used = http_parser_execute(&hp, &head_settings, c->head, c->headlen);
	if (!c->head_done) {
		if (HTTP_PARSER_ERRNO(&hp) != HPE_OK && HTTP_PARSER_ERRNO(&hp) != HPE_PAUSED)
			conn_refuse(c, 400, "not an HTTP request");
		else if (c->headlen == sizeof(c->head))
			conn_refuse(c, 431, "request head too long");
		return;
	}
	c->connect = hp.method == HTTP_CONNECT;
	http_parser_url_init(&u);
	if (c->url_len == 0 || http_parser_parse_url(c->head + c->url_off, c->url_len,
	    c->connect, &u) != 0 || !(u.field_set & (1 << UF_HOST))) {
		conn_refuse(c, 400, "the request names no host (use the proxy: an absolute "
		    "http:// URL, or CONNECT host:port)");
		return;
	}
	if (!c->connect && (!(u.field_set & (1 << UF_SCHEMA)) ||
	    u.field_data[UF_SCHEMA].len != 4 ||
	    strncasecmp(c->head + c->url_off + u.field_data[UF_SCHEMA].off, "http", 4) != 0)) {
		conn_refuse(c, 400, "only http:// URLs, and https through CONNECT");
		return;
	}
	h = c->head + c->url_off + u.field_data[UF_HOST].off;
	hlen = u.field_data[UF_HOST].len;
	/* http_parser gives an IPv6 host without its brackets: put them back. */
	if (hlen > 0 && memchr(h, ':', hlen) != NULL && hlen + 2 <= EGRESS_HOST_MAX) {
		char br[EGRESS_HOST_MAX + 1];

		snprintf(br, sizeof(br), "[%.*s]", (int)hlen, h);
		if (egress_host_norm(br, hlen + 2, c->host, &c->host_ip) < 0) {
			conn_refuse(c, 400, "not a host name");
			return;
		}
	} else if (egress_host_norm(h, hlen, c->host, &c->host_ip) < 0) {
		snprintf(c->host, sizeof(c->host), "%.*s", (int)(hlen < 64 ? hlen : 64), h);
		for (char *p = c->host; *p; p++)
			if (*p < 0x20 || *p >= 0x7f)
				*p = '?';
		conn_refuse(c, 400, "not a host name");
		return;
	}
	port = (u.field_set & (1 << UF_PORT)) ? u.port : 80;
	if (c->connect && !(u.field_set & (1 << UF_PORT))) {
		conn_refuse(c, 400, "CONNECT needs host:port");
		return;
	}
	c->port = (uint16_t)port;
	if (egress_pats_match(c->job->pats, c->job->npats, c->host, c->port) < 0) {
		conn_refuse(c, 403, c->host_ip ? "not in the job's allow list (an address "
		    "is reached only if a pattern names it)" : "not in the job's allow list");
		return;
	}
	if (c->job->bytes_max > 0 && c->job->bytes >= c->job->bytes_max) {
		conn_refuse(c, 403, "the job's egress byte limit is reached");
		return;
	}
	if (c->connect) {
		/* Bytes the job sent after the head: the start of its ClientHello. */
		c->fwdlen = c->headlen - used;
		c->fwd = xmemdup0(c->head + used, c->fwdlen);
	} else {
		build_forward(c, &hp, &u, used);
	}
	uv_read_stop((uv_stream_t *)&c->client);
	uv_timer_stop(&c->timer);
	resolve(c);
}

/*** Resolving and connecting ***/

static void
on_connected(uv_connect_t *req, int status)
{
	struct conn *c = req->data;

	if (c->state == C_CLOSING) {
		conn_unref(c);
		return;
	}
	if (status < 0) {
		char why[64];

		snprintf(why, sizeof(why), "connect: %s", uv_strerror(status));
		conn_report(c, EGRESS_CONN_DONE, why);
		conn_refuse(c, 502, why);
		conn_unref(c);
		return;
	}
	if (c->connect) {
		static char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
		uv_buf_t b = uv_buf_init(ok, sizeof(ok) - 1);

		/* A short fixed reply to a fresh socket: written at once. */
		if (uv_try_write((uv_stream_t *)&c->client, &b, 1) != (int)b.len) {
			conn_close(c, "could not answer the job");
			conn_unref(c);
			return;
		}
		c->state = C_HELLO;
		uv_timer_start(&c->timer, on_timeout, c->job->px->o.head_timeout_ms, 0);
	} else {
		c->state = C_PIPE;
	}
	pipe_start(c);
	conn_unref(c);
}

/* Connects to the first address of addrs, every one of them checked. */
static void
connect_checked(struct conn *c, const struct sockaddr *const *addrs, size_t n)
{
	const struct egress_opts *o = &c->job->px->o;
	char why[64];
	int rc;

	if (n == 0) {
		conn_refuse(c, 502, "the name has no address");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const char *r = egress_addr_refused(addrs[i], o->allow, o->nallow, o->own,
		    o->nown);

		if (r != NULL) {
			snprintf(why, sizeof(why), "resolves to a %s address", r);
			if (strcmp(r, "the host's own") == 0)
				snprintf(why, sizeof(why), "resolves to one of the host's addresses");
			conn_refuse(c, 403, why);
			return;
		}
	}
	if (addrs[0]->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)addrs[0])->sin_addr,
		    c->addr, sizeof(c->addr));
	else
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)addrs[0])->sin6_addr,
		    c->addr, sizeof(c->addr));
	uv_tcp_init(c->job->px->loop, &c->up);
	c->up.data = c;
	c->up_init = true;
	c->refs++;
	c->state = C_CONNECT;
	c->creq.data = c;
	c->refs++;
	{
		struct sockaddr_storage ss;

		memcpy(&ss, addrs[0], addrs[0]->sa_family == AF_INET ?
		    sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
		/* An operator's NAME:PORT=ADDR:PORT gives the port; else the one asked for
		 * (sin_port and sin6_port are at the same offset). */
		if (((struct sockaddr_in *)&ss)->sin_port == 0)
			((struct sockaddr_in *)&ss)->sin_port = htons(c->port);
		rc = uv_tcp_connect(&c->creq, &c->up, (struct sockaddr *)&ss, on_connected);
	}
	if (rc < 0) {
		c->refs--;
		snprintf(why, sizeof(why), "connect: %s", uv_strerror(rc));
		conn_refuse(c, 502, why);
	}
}

static void
on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct conn *c = req->data;
	const struct sockaddr *addrs[16];
	size_t n = 0;

	c->gai.data = NULL;
	if (c->state == C_CLOSING || status < 0) {
		if (c->state != C_CLOSING)
			conn_refuse(c, 502, "the name does not resolve");
		uv_freeaddrinfo(res);
		conn_unref(c);
		return;
	}
	for (struct addrinfo *a = res; a != NULL && n < 16; a = a->ai_next)
		if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
			addrs[n++] = a->ai_addr;
	connect_checked(c, addrs, n);
	uv_freeaddrinfo(res);
	conn_unref(c);
}

/* The target's addresses: a literal, the operator's map, or getaddrinfo. */
static void
resolve(struct conn *c)
{
	const struct egress_opts *o = &c->job->px->o;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP };
	int rc;

	c->state = C_RESOLVE;
	if (c->host_ip) {
		struct sockaddr_storage ss;
		const struct sockaddr *one = (struct sockaddr *)&ss;

		memset(&ss, 0, sizeof(ss));
		if (strchr(c->host, ':') != NULL) {
			((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
			inet_pton(AF_INET6, c->host, &((struct sockaddr_in6 *)&ss)->sin6_addr);
		} else {
			((struct sockaddr_in *)&ss)->sin_family = AF_INET;
			inet_pton(AF_INET, c->host, &((struct sockaddr_in *)&ss)->sin_addr);
		}
		connect_checked(c, &one, 1);
		return;
	}
	{
		/* The operator's names: an entry for this port first, then one for every port. */
		const struct egress_host *h = NULL;

		for (size_t i = 0; i < o->nhosts; i++)
			if (strcmp(o->hosts[i].name, c->host) == 0 &&
			    (o->hosts[i].port == c->port || (o->hosts[i].port == 0 && h == NULL)))
				h = &o->hosts[i];
		if (h != NULL) {
			const struct sockaddr *addrs[EGRESS_HOST_ADDRS_MAX];

			for (size_t k = 0; k < h->naddr; k++)
				addrs[k] = (const struct sockaddr *)&h->addr[k];
			connect_checked(c, addrs, h->naddr);
			return;
		}
	}
	c->gai.data = c;
	c->refs++;
	rc = uv_getaddrinfo(c->job->px->loop, &c->gai, on_resolved, c->host, NULL, &hints);
	if (rc < 0) {
		c->gai.data = NULL;
		c->refs--;
		conn_refuse(c, 502, "the name does not resolve");
	}
}

/*** Bytes both ways ***/

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)h;
	(void)suggested;
	b->base = xmalloc(READ_CHUNK);
	b->len = READ_CHUNK;
}

/* Whether both directions are finished: then c closes. */
static void
maybe_done(struct conn *c)
{
	if (c->up_done && c->down_done)
		conn_close(c, NULL);
}

/* A direction's writes are flushed and its write side shut down. */
static void
on_shutdown(uv_shutdown_t *req, int status)
{
	struct conn *c = req->data;

	(void)status;
	if (req == &c->sh_up)
		c->up_done = true;
	else
		c->down_done = true;
	if (c->state != C_CLOSING)
		maybe_done(c);
}

/* Shuts dst's write side once its queued writes are out. */
static void
shut(struct conn *c, uv_shutdown_t *req, uv_stream_t *dst)
{
	req->data = c;
	if (uv_shutdown(req, dst, on_shutdown) < 0)
		on_shutdown(req, -1);
}

static void
on_written(uv_write_t *w, int status)
{
	struct wreq *r = (struct wreq *)w;
	struct conn *c = r->c;
	uv_stream_t *dst = w->handle;

	free(r->data);
	free(r);
	if (c->state == C_CLOSING)
		return;
	if (status < 0) {
		conn_close(c, NULL);
		return;
	}
	/* Resume the side that was paused for this one's queue. */
	if (dst == (uv_stream_t *)&c->up && c->client_paused &&
	    uv_stream_get_write_queue_size(dst) < QUEUE_HIGH / 4) {
		c->client_paused = false;
		pipe_start(c);
	} else if (dst == (uv_stream_t *)&c->client && c->up_paused &&
	    uv_stream_get_write_queue_size(dst) < QUEUE_HIGH / 4) {
		c->up_paused = false;
		pipe_start(c);
	}
}

/* Writes len bytes of data (owned from here) to dst. */
static int
send_to(struct conn *c, uv_stream_t *dst, char *data, size_t len)
{
	struct wreq *r = xcalloc(1, sizeof(*r));
	uv_buf_t b = uv_buf_init(data, (unsigned)len);
	int rc;

	r->c = c;
	r->data = data;
	if ((rc = uv_write(&r->req, dst, &b, 1, on_written)) < 0) {
		free(data);
		free(r);
	}
	return rc;
}

/* Counts n bytes against the job's limit; false once it is passed. */
static bool
count(struct conn *c, size_t n, bool up)
{
	struct job *j = c->job;

	if (up)
		c->up_bytes += n;
	else
		c->down_bytes += n;
	j->bytes += n;
	return j->bytes_max == 0 || j->bytes <= j->bytes_max;
}

/*** The rate limit ***/

/* Tops up both of j's buckets for the time since the last refill. */
static void
rate_refill(struct job *j)
{
	uint64_t now = uv_now(j->px->loop), ms = now - j->refilled_at;

	j->refilled_at = now;
	for (int d = 0; d < 2; d++) {
		/* Past a second the bucket is full whatever it owed (ms * rate
		 * stays below 2^60: rate is at most 2^50). */
		if (ms >= 1000)
			j->tokens[d] = (int64_t)j->rate;
		else
			j->tokens[d] += (int64_t)(ms * j->rate / 1000);
		if (j->tokens[d] > (int64_t)j->rate)
			j->tokens[d] = (int64_t)j->rate;
	}
}

/* Milliseconds until direction d's debt is paid (0: none owed). */
static uint64_t
rate_wait(const struct job *j, int d)
{
	if (j->tokens[d] >= 0)
		return 0;
	return ((uint64_t)-j->tokens[d] * 1000 + j->rate - 1) / j->rate;
}

static void on_rate(uv_timer_t *t);

/* Arms j's rate timer for the sooner debt of a held direction. */
static void
rate_arm(struct job *j)
{
	uint64_t wait = 0;
	bool held[2] = { false, false };

	for (struct conn *c = j->conns; c != NULL; c = c->next)
		for (int d = 0; d < 2; d++)
			held[d] |= c->rate_held[d];
	for (int d = 0; d < 2; d++) {
		uint64_t w = held[d] ? rate_wait(j, d) : 0;

		if (w > 0 && (wait == 0 || w < wait))
			wait = w;
	}
	if (wait == 0)
		return;
	if (uv_is_active((uv_handle_t *)&j->rate_timer) &&
	    uv_timer_get_due_in(&j->rate_timer) <= wait)
		return;
	uv_timer_start(&j->rate_timer, on_rate, wait, 0);
}

/*
 * Charges n bytes of direction d to c's job; when that leaves the bucket in
 * debt and c pipes bytes, c's source side (the job's for RATE_UP, the
 * server's for RATE_DOWN) stops reading until the rate timer releases it.
 */
static void
rate_charge(struct conn *c, int d, size_t n)
{
	struct job *j = c->job;

	if (j->rate == 0)
		return;
	rate_refill(j);
	j->tokens[d] -= (int64_t)n;
	if (j->tokens[d] >= 0 || c->state != C_PIPE || c->rate_held[d])
		return;
	c->rate_held[d] = true;
	c->held_at[d] = uv_now(j->px->loop);
	uv_read_stop(d == RATE_UP ? (uv_stream_t *)&c->client : (uv_stream_t *)&c->up);
	rate_arm(j);
}

/* The rate timer: releases the connections of each direction out of debt. */
static void
on_rate(uv_timer_t *t)
{
	struct job *j = t->data;
	uint64_t now = uv_now(j->px->loop);
	struct conn *c, *next;

	rate_refill(j);
	for (c = j->conns; c != NULL; c = next) {
		bool freed = false;

		next = c->next;
		if (c->state == C_CLOSING)
			continue;
		for (int d = 0; d < 2; d++)
			if (c->rate_held[d] && j->tokens[d] >= 0) {
				c->rate_held[d] = false;
				c->throttled_ms += now - c->held_at[d];
				freed = true;
			}
		if (freed)
			pipe_start(c);
	}
	rate_arm(j);
}

/* The ClientHello is in (or not TLS): its name checked, then sent up. */
static void
hello_check(struct conn *c)
{
	char name[EGRESS_HOST_MAX + 2], norm[EGRESS_HOST_MAX + 1];
	bool ip;
	int rc = egress_sni(c->fwd ? (const uint8_t *)c->fwd : (const uint8_t *)"", c->fwdlen,
	    name, sizeof(name));

	if (rc == -EAGAIN && c->fwdlen < HELLO_MAX)
		return;
	if (rc == -EAGAIN || rc == -EPROTO || rc == -ENOMEM) {
		conn_close(c, "a TLS handshake the proxy cannot read");
		return;
	}
	if (rc == 1 && (egress_host_norm(name, strlen(name), norm, &ip) < 0 ||
	    strcmp(norm, c->host) != 0)) {
		conn_report(c, EGRESS_CONN_REFUSED, "the TLS server name differs from "
		    "the CONNECT's");
		conn_close(c, NULL);
		return;
	}
	uv_timer_stop(&c->timer);
	c->state = C_PIPE;
	if (c->fwdlen > 0) {
		char *d = c->fwd;

		c->fwd = NULL;
		if (send_to(c, (uv_stream_t *)&c->up, d, c->fwdlen) < 0) {
			conn_close(c, NULL);
			return;
		}
	}
}

static void
on_client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct conn *c = s->data;

	if (n == 0 || c->state == C_CLOSING) {
		free(b->base);
		return;
	}
	if (n < 0) {
		free(b->base);
		if (n != UV_EOF || c->state == C_HEAD || c->state == C_HELLO) {
			conn_close(c, n == UV_EOF ? NULL : "the job's side failed");
			return;
		}
		c->client_eof = true;
		uv_read_stop(s);
		shut(c, &c->sh_up, (uv_stream_t *)&c->up);
		return;
	}
	if (c->state == C_HEAD) {
		size_t room = sizeof(c->head) - c->headlen, take = (size_t)n < room ? (size_t)n : room;

		memcpy(c->head + c->headlen, b->base, take);
		c->headlen += take;
		free(b->base);
		head_feed(c);
		return;
	}
	if (!count(c, (size_t)n, true)) {
		free(b->base);
		conn_close(c, "the job's egress byte limit");
		return;
	}
	if (c->state == C_HELLO) {
		rate_charge(c, RATE_UP, (size_t)n);	/* charged, never held here */
		c->fwd = xreallocarray(c->fwd, c->fwdlen + (size_t)n + 1, 1);
		memcpy(c->fwd + c->fwdlen, b->base, (size_t)n);
		c->fwdlen += (size_t)n;
		free(b->base);
		hello_check(c);
		return;
	}
	if (send_to(c, (uv_stream_t *)&c->up, b->base, (size_t)n) < 0) {
		conn_close(c, NULL);
		return;
	}
	rate_charge(c, RATE_UP, (size_t)n);
	if (uv_stream_get_write_queue_size((uv_stream_t *)&c->up) > QUEUE_HIGH) {
		c->client_paused = true;
		uv_read_stop(s);
	}
}

static void
on_up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct conn *c = s->data;

	if (n == 0 || c->state == C_CLOSING) {
		free(b->base);
		return;
	}
	if (n < 0) {
		free(b->base);
		if (n != UV_EOF) {
			conn_close(c, "the server's side failed");
			return;
		}
		c->up_eof = true;
		uv_read_stop(s);
		shut(c, &c->sh_client, (uv_stream_t *)&c->client);
		return;
	}
	if (!count(c, (size_t)n, false)) {
		free(b->base);
		conn_close(c, "the job's egress byte limit");
		return;
	}
	if (send_to(c, (uv_stream_t *)&c->client, b->base, (size_t)n) < 0) {
		conn_close(c, NULL);
		return;
	}
	rate_charge(c, RATE_DOWN, (size_t)n);
	if (uv_stream_get_write_queue_size((uv_stream_t *)&c->client) > QUEUE_HIGH) {
		c->up_paused = true;
		uv_read_stop(s);
	}
}

/*
 * Starts (or resumes) reading both sides: the server's at once; the job's
 * too, in C_HELLO into the held bytes. Plain HTTP sends the rewritten head
 * first.
 */
static void
pipe_start(struct conn *c)
{
	if (c->state == C_PIPE && !c->connect && c->fwd != NULL) {
		char *d = c->fwd;

		c->fwd = NULL;
		count(c, c->fwdlen, true);
		if (send_to(c, (uv_stream_t *)&c->up, d, c->fwdlen) < 0) {
			conn_close(c, NULL);
			return;
		}
		rate_charge(c, RATE_UP, c->fwdlen);
	}
	if (c->state == C_HELLO && c->fwdlen > 0) {
		hello_check(c);
		if (c->state == C_CLOSING)
			return;
	}
	if (!c->up_eof && !c->up_paused && !c->rate_held[RATE_DOWN])
		uv_read_start((uv_stream_t *)&c->up, on_alloc, on_up_read);
	if (!c->client_eof && !c->client_paused && !c->rate_held[RATE_UP])
		uv_read_start((uv_stream_t *)&c->client, on_alloc, on_client_read);
}

/*** Jobs ***/

static void
on_accept(uv_stream_t *l, int status)
{
	struct job *j = ((struct lsn *)l->data)->job;
	struct conn *c;

	if (status < 0 || j->ending)
		return;
	c = xcalloc(1, sizeof(*c));
	c->job = j;
	c->state = C_HEAD;
	uv_tcp_init(j->px->loop, &c->client);
	c->client.data = c;
	uv_timer_init(j->px->loop, &c->timer);
	c->timer.data = c;
	c->refs = 2;
	c->next = j->conns;
	j->conns = c;
	j->nconns++;
	if (uv_accept(l, (uv_stream_t *)&c->client) < 0) {
		conn_close(c, NULL);
		return;
	}
	if (j->conns_max > 0 && j->nconns > j->conns_max) {
		snprintf(c->host, sizeof(c->host), "?");
		conn_refuse(c, 503, "the job's connection limit is reached");
		return;
	}
	uv_timer_start(&c->timer, on_timeout, j->px->o.head_timeout_ms, 0);
	uv_read_start((uv_stream_t *)&c->client, on_alloc, on_client_read);
}

struct egress_proxy *
egress_proxy_new(uv_loop_t *loop, const struct egress_opts *opts)
{
	struct egress_proxy *p = xcalloc(1, sizeof(*p));

	p->loop = loop;
	p->o = *opts;
	if (p->o.head_timeout_ms == 0)
		p->o.head_timeout_ms = 10000;
	return p;
}

static struct job *
job_find(struct egress_proxy *p, uint32_t id)
{
	for (struct job *j = p->jobs; j != NULL; j = j->next)
		if (j->id == id && !j->ending)
			return j;
	return NULL;
}

static void
on_lsn_closed(uv_handle_t *h)
{
	struct lsn *l = h->data;
	struct job *j = l->job;

	free(l);
	j->lsns_open--;
	job_maybe_ended(j);
}

/* Closes every listener of j (their accepted connections go on). */
static void
lsns_close(struct job *j)
{
	struct lsn *l, *next;

	for (l = j->lsns; l != NULL; l = next) {
		next = l->next;
		uv_close((uv_handle_t *)&l->h, on_lsn_closed);
	}
	j->lsns = NULL;
}

/* Accepts on lfd (owned from here) for j. 0, or -errno with e (lfd closed). */
static int
lsn_add(struct job *j, int lfd, struct err *e)
{
	struct lsn *l = xcalloc(1, sizeof(*l));
	int rc;

	l->job = j;
	uv_tcp_init(j->px->loop, &l->h);
	l->h.data = l;
	j->lsns_open++;
	if ((rc = uv_tcp_open(&l->h, lfd)) < 0)
		close(lfd);	/* not the handle's: ours to close */
	else
		rc = uv_listen((uv_stream_t *)&l->h, 128, on_accept);
	if (rc < 0) {
		uv_close((uv_handle_t *)&l->h, on_lsn_closed);
		return err_set(e, rc, "listen for job %u: %s", (unsigned)j->id,
		    uv_strerror(rc));
	}
	l->next = j->lsns;
	j->lsns = l;
	return 0;
}

int
egress_proxy_job_add(struct egress_proxy *p, uint32_t id,
    const struct msg_egress_job *m, int lfd, struct err *e)
{
	struct job *j;
	char allow[MSG_EGRESS_ALLOW_MAX];
	int rc, n;

	if (job_find(p, id) != NULL) {
		close(lfd);
		return err_set(e, -EEXIST, "job %u has a listener already", (unsigned)id);
	}
	memcpy(allow, m->allow, sizeof(allow));
	allow[sizeof(allow) - 1] = '\0';
	j = xcalloc(1, sizeof(*j));
	if ((n = egress_pats_parse(allow, j->pats, EGRESS_PATS_MAX, e)) < 0) {
		free(j);
		close(lfd);
		return n;
	}
	j->npats = (size_t)n;
	j->px = p;
	j->id = id;
	j->conns_max = m->conns_max;
	j->bytes_max = m->bytes_max;
	j->rate = m->rate > EGRESS_RATE_MAX ? EGRESS_RATE_MAX : m->rate;
	j->tokens[RATE_UP] = j->tokens[RATE_DOWN] = (int64_t)j->rate;
	j->refilled_at = uv_now(p->loop);
	uv_timer_init(p->loop, &j->rate_timer);
	j->rate_timer.data = j;
	j->rate_timer_open = true;
	j->next = p->jobs;
	p->jobs = j;
	if ((rc = lsn_add(j, lfd, e)) < 0) {
		j->silent = true;
		egress_proxy_job_end(p, id);
		return rc;
	}
	return 0;
}

int
egress_proxy_job_listen(struct egress_proxy *p, uint32_t id, int lfd, struct err *e)
{
	struct job *j = job_find(p, id);

	if (j == NULL) {
		close(lfd);
		return err_set(e, -ENOENT, "job %u: no such job for a listener", (unsigned)id);
	}
	/* The last case's sandbox is gone: its listener goes, its conns stay. */
	lsns_close(j);
	return lsn_add(j, lfd, e);
}

static void
on_rate_timer_closed(uv_handle_t *h)
{
	struct job *j = h->data;

	j->rate_timer_open = false;
	job_maybe_ended(j);
}

/*
 * Whether the job's side of c is closed already, its EOF (or reset) waiting
 * unread: a connection the job finished, not one its end cut.
 */
static bool
job_side_closed(struct conn *c)
{
	uv_os_fd_t fd;
	char byte;
	ssize_t n;

	if (c->client_eof)
		return true;
	if (uv_fileno((uv_handle_t *)&c->client, &fd) < 0)
		return true;
	n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

void
egress_proxy_job_end(struct egress_proxy *p, uint32_t id)
{
	struct job *j = job_find(p, id);
	struct conn *c, *next;

	if (j == NULL) {
		if (p->o.ended != NULL && !p->freeing)
			p->o.ended(p->o.arg, id, 0);
		return;
	}
	j->ending = true;
	uv_close((uv_handle_t *)&j->rate_timer, on_rate_timer_closed);
	lsns_close(j);
	for (c = j->conns; c != NULL; c = next) {
		next = c->next;
		conn_close(c, job_side_closed(c) ? NULL : "the job ended");
	}
}

size_t
egress_proxy_jobs(const struct egress_proxy *p)
{
	size_t n = 0;

	for (const struct job *j = p->jobs; j != NULL; j = j->next)
		n += !j->ending;
	return n;
}

void
egress_proxy_free(struct egress_proxy *p)
{
	if (p == NULL)
		return;
	p->freeing = true;
	if (p->jobs == NULL) {
		free(p);
		return;
	}
	for (struct job *j = p->jobs, *next; j != NULL; j = next) {
		next = j->next;
		if (!j->ending)
			egress_proxy_job_end(p, j->id);
	}
}
