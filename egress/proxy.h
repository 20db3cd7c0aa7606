/*
 * proxy.h - sandq-egress's proxy engine: jobs' listeners, their HTTP and
 * CONNECT requests, the checks, and the bytes each way (egress/proxy.c).
 *
 * Lifecycle: egress_proxy_new() on a libuv loop with the operator's
 * settings; for each `net: allow` job, egress_proxy_job_add() with the
 * listener made in the job's network namespace and sandqd's word on the
 * job; egress_proxy_job_end() when it ends, after which the report
 * callback has been called for every connection of the job and then the
 * ended callback once; egress_proxy_free() at exit.
 */
#ifndef SANDQ_EGRESS_PROXY_H
#define SANDQ_EGRESS_PROXY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/err.h"
#include "../common/msg.h"
#include "egress.h"

/* Most names of the operator's hosts map, and addresses of one name. */
#define EGRESS_HOSTS_MAX 256
#define EGRESS_HOST_ADDRS_MAX 8
/* Highest rate a job may have, bytes per second each way (2^50). */
#define EGRESS_RATE_MAX ((uint64_t)1 << 50)
/* Most address ranges of egress_allow_addrs and of the host's own. */
#define EGRESS_CIDRS_MAX 256

/* A name the operator resolves for the proxy (egress_hosts). */
struct egress_host {
	char name[EGRESS_HOST_MAX + 1];	/* lower case */
	uint16_t port;		/* the port it applies to; 0: every port */
	struct sockaddr_storage addr[EGRESS_HOST_ADDRS_MAX];	/* port 0: the one asked for */
	size_t naddr;
};

/* Called for each connection of a job: refused, or ended with its bytes. */
typedef void egress_report_cb(void *arg, uint32_t job, const struct msg_egress_conn *c);
/* Called once after egress_proxy_job_end(), every report made; dropped: how
 * many connections went unreported past the per-job cap. */
typedef void egress_ended_cb(void *arg, uint32_t job, uint64_t dropped);

struct egress_opts {
	struct egress_host *hosts;	/* the operator's names (owned by caller) */
	size_t nhosts;
	struct egress_cidr *allow;	/* egress_allow_addrs */
	size_t nallow;
	struct egress_cidr *own;	/* the host's own addresses */
	size_t nown;
	unsigned head_timeout_ms;	/* a request's head, a ClientHello: at most */
	egress_report_cb *report;
	egress_ended_cb *ended;
	void *arg;
};

struct egress_proxy;

/* A proxy on loop; opts is copied (its arrays are not). Never NULL. */
struct egress_proxy *egress_proxy_new(uv_loop_t *loop, const struct egress_opts *opts);

/*
 * Starts accepting on lfd (a listening TCP socket, owned from here) for job
 * id, under j's allow list and limits. Returns 0, or -errno with e (lfd is
 * closed either way on failure).
 */
int egress_proxy_job_add(struct egress_proxy *p, uint32_t id,
    const struct msg_egress_job *j, int lfd, struct err *e);

/*
 * Gives job id a new listener, lfd (owned from here), closing the ones it
 * had (their connections go on): a run with cases, whose next case runs in
 * a new sandbox. Returns 0, or -errno with e (lfd closed either way).
 */
int egress_proxy_job_listen(struct egress_proxy *p, uint32_t id, int lfd, struct err *e);

/*
 * Ends job id: its listeners closed, its connections cut. The ended callback
 * follows once every handle is closed (an unknown id: at once).
 */
void egress_proxy_job_end(struct egress_proxy *p, uint32_t id);

/* Jobs known (the ones not ended). */
size_t egress_proxy_jobs(const struct egress_proxy *p);

/* Ends every job and frees p once the loop has run its close callbacks. */
void egress_proxy_free(struct egress_proxy *p);

/*
 * The ClientHello's server name (sni.c). egress_sni_init() once first.
 * Returns 1 with name filled, 0: no TLS handshake or no server name,
 * -EAGAIN: more bytes needed, -EPROTO: a handshake record OpenSSL refuses.
 */
int egress_sni_init(void);
void egress_sni_done(void);
int egress_sni(const uint8_t *buf, size_t len, char *name, size_t namelen);

#endif
