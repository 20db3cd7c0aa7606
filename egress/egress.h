/*
 * egress.h - the egress allowlist: host patterns, and the addresses a job's
 * connection may never reach (issue 21; docs/security.md, "Network by
 * allowlist").
 *
 * Pure code (no I/O), shared by sandqd (a job's `allow` checked against its
 * tenant's `net_allow` at intake) and sandq-egress (each connection's target
 * checked against its job's list, each resolved address against the
 * forbidden ranges). Lifecycle: parse patterns and CIDRs once
 * (egress_pat_parse, egress_cidr_parse), then match as often as needed.
 */
#ifndef SANDQ_EGRESS_H
#define SANDQ_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../common/err.h"

/* Longest host name (RFC 1035) and pattern text (a name, ':' and a port). */
#define EGRESS_HOST_MAX 253
#define EGRESS_PAT_MAX 262
/* Most patterns in one list (a job's `allow`, a tenant's `net_allow`). */
#define EGRESS_PATS_MAX 64

/* One host pattern: `name`, `*.domain`, an IP literal, each with a port. */
struct egress_pat {
	char host[EGRESS_HOST_MAX + 1];	/* lower case; for *.d, the "d" */
	bool wildcard;		/* `*.host`: any name below host, not host */
	bool ip;		/* host is an IPv4 or IPv6 literal (no brackets) */
	uint16_t port;		/* 0: the default ports, 80 and 443 */
};

/*
 * Parses one pattern: `name[:port]`, `*.domain[:port]`, `a.b.c.d[:port]`,
 * `[v6][:port]`. Names are lower-cased; labels of [a-z0-9-_], at most 63
 * bytes, and at least one dot below a wildcard. Returns 0, or -EINVAL with
 * e naming the pattern (escaped).
 */
int egress_pat_parse(const char *s, struct egress_pat *p, struct err *e);

/* Writes p as text (the form egress_pat_parse reads) into buf. */
void egress_pat_format(const struct egress_pat *p, char *buf, size_t len);

/*
 * Whether outer (a tenant's pattern) admits everything inner (a job's)
 * does: a job can never widen its tenant's list. An IP literal is covered
 * only by the same literal.
 */
bool egress_pat_covers(const struct egress_pat *outer, const struct egress_pat *inner);

/*
 * Whether host (lower case, no brackets) and port match p. An IP literal
 * matches only a pattern that is that literal.
 */
bool egress_pat_match(const struct egress_pat *p, const char *host, uint16_t port);

/* Index of the first pattern of pats matching host:port, or -1. */
int egress_pats_match(const struct egress_pat *pats, size_t n, const char *host,
    uint16_t port);

/*
 * Parses a comma- or space-separated list into pats (at most max). Returns
 * the count, or -EINVAL / -E2BIG with e naming the pattern.
 */
int egress_pats_parse(const char *s, struct egress_pat *pats, size_t max,
    struct err *e);

/*
 * Lower-cases host into out (EGRESS_HOST_MAX + 1 bytes) and says whether it
 * is a name or IP literal egress_pat_match can take; brackets of an IPv6
 * literal are dropped. Returns 0, or -EINVAL.
 */
int egress_host_norm(const char *host, size_t len, char *out, bool *is_ip);

/*
 * One item of the operator's egress_hosts: NAME=ADDR (every port of NAME
 * goes to ADDR, on the port asked for), or NAME:PORT=ADDR:TO (a connection
 * to NAME on PORT goes to ADDR on port TO: a stand-in or mirror on another
 * port; an IPv6 ADDR in brackets then). The job, its allow list, the audit
 * and the result still name NAME:PORT.
 */
struct egress_host_item {
	char name[EGRESS_HOST_MAX + 1];	/* normalised */
	uint16_t port;		/* 0: any port */
	struct sockaddr_storage addr;	/* its port: TO, or 0 for the one asked for */
};

/* Parses one egress_hosts item. 0, or -EINVAL with e naming what is wrong. */
int egress_host_item_parse(const char *s, struct egress_host_item *it, struct err *e);

/* An address range, `a.b.c.d/n` or `v6/n`. */
struct egress_cidr {
	int family;		/* AF_INET or AF_INET6 */
	uint8_t addr[16];	/* network order; 4 bytes used for AF_INET */
	unsigned bits;		/* prefix length */
};

/* Parses `addr/bits` (or a bare address: all bits). 0 or -EINVAL with e. */
int egress_cidr_parse(const char *s, struct egress_cidr *c, struct err *e);

/* Whether sa (AF_INET or AF_INET6; a v4-mapped v6 as v4) is inside c. */
bool egress_cidr_has(const struct egress_cidr *c, const struct sockaddr *sa);

/*
 * Why a connection must not go to sa: "loopback", "private", "link-local",
 * "multicast", "unspecified", "reserved", "the host's own" (own, the host's
 * addresses, nown of them), or NULL when it may. A range of allow (the
 * operator's egress_allow_addrs) lifts every reason. IPv4-mapped and
 * -compatible IPv6 addresses are judged as the IPv4 address they carry.
 */
const char *egress_addr_refused(const struct sockaddr *sa,
    const struct egress_cidr *allow, size_t nallow,
    const struct egress_cidr *own, size_t nown);

#endif
