/*
 * match.c - host patterns and address ranges of the egress allowlist.
 *
 * A pattern is an exact name, `*.domain` (any name below domain, never
 * domain itself), or an IP literal, each with a port or none (80 and 443,
 * the ports of http and https). A tenant's patterns bound its jobs' (a job's
 * pattern must be covered by one of its tenant's: egress_pat_covers), and a
 * connection's target must match one of its job's. Names are compared in
 * lower case, whole labels only: `*.example.org` matches `a.example.org`
 * and `a.b.example.org`, never `badexample.org`.
 *
 * What an address may be is decided after resolution, on every address a
 * name resolves to (egress_addr_refused): loopback, private (RFC 1918,
 * fc00::/7, 100.64/10), link-local, multicast, unspecified, reserved
 * (0/8, 240/4, broadcast, documentation) and the host's own addresses are
 * refused unless the operator names a range that holds them. An IPv6
 * address carrying an IPv4 one (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::/96)
 * is judged as that IPv4 address, so no spelling of 127.0.0.1 gets through.
 *
 * Pure: no I/O, no allocation; inet_pton is the only parser of addresses.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"

/* Copies s into a message-safe form: printable ASCII, the rest as '?'. */
static void
esc(const char *s, char *out, size_t len)
{
	size_t i = 0;

	for (; s[i] != '\0' && i + 1 < len; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	out[i] = '\0';
}

/* Whether s (len bytes, lower case) is a host name of valid labels. */
static bool
name_valid(const char *s, size_t len)
{
	size_t label = 0;

	if (len == 0 || len > EGRESS_HOST_MAX || s[0] == '.' || s[len - 1] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!(islower(c) || isdigit(c) || c == '-' || c == '_'))
			return false;
		if ((label == 0 && c == '-') || ++label > 63)
			return false;
	}
	return s[len - 1] != '-';
}

int
egress_host_norm(const char *host, size_t len, char *out, bool *is_ip)
{
	unsigned char buf[16];
	char tmp[EGRESS_HOST_MAX + 1];

	if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
		host++;
		len -= 2;
		if (len == 0 || len >= sizeof(tmp))
			return -EINVAL;
		memcpy(tmp, host, len);
		tmp[len] = '\0';
		if (inet_pton(AF_INET6, tmp, buf) != 1)
			return -EINVAL;
		for (size_t i = 0; i <= len; i++)
			out[i] = (char)tolower((unsigned char)tmp[i]);
		*is_ip = true;
		return 0;
	}
	if (len == 0 || len > EGRESS_HOST_MAX)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		out[i] = (char)tolower((unsigned char)host[i]);
	out[len] = '\0';
	if (inet_pton(AF_INET, out, buf) == 1 || inet_pton(AF_INET6, out, buf) == 1) {
		*is_ip = true;
		return 0;
	}
	*is_ip = false;
	/*
	 * Other spellings of an address (0x7f.1, 2130706433, 127.1), which
	 * the resolver takes as one (inet_aton's forms), are no names; nor is
	 * a name whose last label is all digits (RFC 3696, 2).
	 */
	{
		struct in_addr ia;
		const char *last = strrchr(out, '.');

		last = last ? last + 1 : out;
		if (inet_aton(out, &ia) != 0 || strspn(last, "0123456789") == strlen(last))
			return -EINVAL;
	}
	return name_valid(out, len) ? 0 : -EINVAL;
}

int
egress_pat_parse(const char *s, struct egress_pat *p, struct err *e)
{
	char shown[80];
	const char *host = s, *colon;
	size_t hlen;
	bool is_ip;

	memset(p, 0, sizeof(*p));
	esc(s, shown, sizeof(shown));
	if (strlen(s) > EGRESS_PAT_MAX)
		return err_set(e, -EINVAL, "pattern '%s...': longer than %d bytes", shown,
		    EGRESS_PAT_MAX);
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (close == NULL)
			return err_set(e, -EINVAL, "pattern '%s': no ']'", shown);
		hlen = (size_t)(close - s) + 1;
		colon = close[1] == ':' ? close + 1 : NULL;
		if (close[1] != '\0' && colon == NULL)
			return err_set(e, -EINVAL, "pattern '%s': junk after ']'", shown);
	} else {
		colon = strrchr(s, ':');
		if (colon != NULL && strchr(s, ':') != colon)
			return err_set(e, -EINVAL, "pattern '%s': an IPv6 address goes in "
			    "brackets ([::1]:443)", shown);
		hlen = colon ? (size_t)(colon - s) : strlen(s);
	}
	if (colon != NULL) {
		char *end;
		long port;

		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (!isdigit((unsigned char)colon[1]) || *end != '\0' || errno != 0 ||
		    port < 1 || port > 65535)
			return err_set(e, -EINVAL, "pattern '%s': the port must be 1 to 65535",
			    shown);
		p->port = (uint16_t)port;
	}
	if (hlen > 2 && host[0] == '*' && host[1] == '.') {
		p->wildcard = true;
		host += 2;
		hlen -= 2;
	}
	if (egress_host_norm(host, hlen, p->host, &is_ip) < 0)
		return err_set(e, -EINVAL, "pattern '%s': not a host name, '*.domain' or "
		    "IP address", shown);
	if (is_ip && p->wildcard)
		return err_set(e, -EINVAL, "pattern '%s': no wildcard over an address", shown);
	if (p->wildcard && strchr(p->host, '.') == NULL)
		return err_set(e, -EINVAL, "pattern '%s': a wildcard needs a domain of two "
		    "labels at least ('*.example.org')", shown);
	p->ip = is_ip;
	return 0;
}

void
egress_pat_format(const struct egress_pat *p, char *buf, size_t len)
{
	bool v6 = p->ip && strchr(p->host, ':') != NULL;
	char port[8] = "";

	if (p->port != 0)
		snprintf(port, sizeof(port), ":%u", (unsigned)p->port);
	snprintf(buf, len, "%s%s%s%s%s", p->wildcard ? "*." : "", v6 ? "[" : "", p->host,
	    v6 ? "]" : "", port);
}

/* Whether name is strictly below domain (a whole-label suffix). */
static bool
below(const char *name, const char *domain)
{
	size_t n = strlen(name), d = strlen(domain);

	return n > d + 1 && name[n - d - 1] == '.' && strcmp(name + n - d, domain) == 0;
}

/* Whether a pattern's port admits port (0 in a pattern: 80 and 443). */
static bool
port_ok(uint16_t pat, uint16_t port)
{
	return pat == 0 ? (port == 80 || port == 443) : pat == port;
}

/* Whether two spellings of one address are equal (v6 text varies). */
static bool
same_ip(const char *a, const char *b)
{
	unsigned char x[16], y[16];
	int fa = strchr(a, ':') ? AF_INET6 : AF_INET;
	int fb = strchr(b, ':') ? AF_INET6 : AF_INET;

	if (fa != fb || inet_pton(fa, a, x) != 1 || inet_pton(fb, b, y) != 1)
		return false;
	return memcmp(x, y, fa == AF_INET ? 4 : 16) == 0;
}

bool
egress_pat_covers(const struct egress_pat *outer, const struct egress_pat *inner)
{
	bool ports = outer->port == 0 ? (inner->port == 0 || inner->port == 80 ||
	    inner->port == 443) : outer->port == inner->port;

	if (!ports || outer->ip != inner->ip)
		return false;
	if (outer->ip)
		return same_ip(outer->host, inner->host);
	if (!outer->wildcard)
		return !inner->wildcard && strcmp(outer->host, inner->host) == 0;
	if (inner->wildcard)
		return strcmp(outer->host, inner->host) == 0 ||
		    below(inner->host, outer->host);
	return below(inner->host, outer->host);
}

bool
egress_pat_match(const struct egress_pat *p, const char *host, uint16_t port)
{
	unsigned char buf[16];
	bool is_ip = inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;

	if (!port_ok(p->port, port) || p->ip != is_ip)
		return false;
	if (p->ip)
		return same_ip(p->host, host);
	return p->wildcard ? below(host, p->host) : strcmp(host, p->host) == 0;
}

int
egress_pats_match(const struct egress_pat *pats, size_t n, const char *host,
    uint16_t port)
{
	for (size_t i = 0; i < n; i++)
		if (egress_pat_match(&pats[i], host, port))
			return (int)i;
	return -1;
}

int
egress_pats_parse(const char *s, struct egress_pat *pats, size_t max, struct err *e)
{
	char one[EGRESS_PAT_MAX + 2];
	size_t n = 0;

	while (*s != '\0') {
		size_t len;

		s += strspn(s, ", \t");
		len = strcspn(s, ", \t");
		if (len == 0)
			break;
		if (len > EGRESS_PAT_MAX)
			return err_set(e, -EINVAL, "a pattern longer than %d bytes",
			    EGRESS_PAT_MAX);
		if (n == max)
			return err_set(e, -E2BIG, "more than %zu patterns", max);
		memcpy(one, s, len);
		one[len] = '\0';
		if (egress_pat_parse(one, &pats[n], e) < 0)
			return -EINVAL;
		n++;
		s += len;
	}
	return (int)n;
}

/* A port of 1-65535 in decimal, the whole of s[0..n). */
static int
port_parse(const char *s, size_t n, uint16_t *port)
{
	unsigned long v = 0;

	if (n == 0 || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

int
egress_host_item_parse(const char *s, struct egress_host_item *it, struct err *e)
{
	const char *eq = strchr(s, '='), *colon, *addr, *aend;
	char abuf[INET6_ADDRSTRLEN + 1];
	uint16_t to = 0;
	bool ip;
	size_t nl;

	memset(it, 0, sizeof(*it));
	if (eq == NULL)
		return err_set(e, -EINVAL, "'%.64s' is not NAME=ADDR", s);
	/* The name, and the port it applies to. */
	colon = memchr(s, ':', (size_t)(eq - s));
	nl = colon != NULL ? (size_t)(colon - s) : (size_t)(eq - s);
	if (egress_host_norm(s, nl, it->name, &ip) < 0 || ip)
		return err_set(e, -EINVAL, "'%.64s': not a host name before '='", s);
	if (colon != NULL && port_parse(colon + 1, (size_t)(eq - colon - 1), &it->port) < 0)
		return err_set(e, -EINVAL, "'%.64s': not a port (1-65535) after the name", s);
	/* The address, with the port to use when the name has one. */
	addr = eq + 1;
	aend = addr + strlen(addr);
	if (*addr == '[') {
		const char *rb = strchr(addr, ']');

		if (rb == NULL)
			return err_set(e, -EINVAL, "'%.64s': no ']' after the IPv6 address", s);
		if (rb[1] == ':' && port_parse(rb + 2, strlen(rb + 2), &to) < 0)
			return err_set(e, -EINVAL, "'%.64s': not a port (1-65535) after ']'", s);
		if (rb[1] != '\0' && rb[1] != ':')
			return err_set(e, -EINVAL, "'%.64s': ':PORT' or nothing after ']'", s);
		addr++;
		aend = rb;
	} else if ((colon = strchr(addr, ':')) != NULL && strchr(colon + 1, ':') == NULL) {
		/* a.b.c.d:PORT (a bare IPv6 address has more than one ':') */
		if (port_parse(colon + 1, strlen(colon + 1), &to) < 0)
			return err_set(e, -EINVAL, "'%.64s': not a port (1-65535) after the address", s);
		aend = colon;
	}
	if ((it->port != 0) != (to != 0))
		return err_set(e, -EINVAL, "'%.64s': a port on both sides or on neither "
		    "(NAME=ADDR, NAME:PORT=ADDR:PORT)", s);
	if ((size_t)(aend - addr) >= sizeof(abuf))
		return err_set(e, -EINVAL, "'%.64s': not an address", s);
	memcpy(abuf, addr, (size_t)(aend - addr));
	abuf[aend - addr] = '\0';
	if (inet_pton(AF_INET, abuf, &((struct sockaddr_in *)&it->addr)->sin_addr) == 1) {
		it->addr.ss_family = AF_INET;
		((struct sockaddr_in *)&it->addr)->sin_port = htons(to);
	} else if (inet_pton(AF_INET6, abuf, &((struct sockaddr_in6 *)&it->addr)->sin6_addr) == 1) {
		it->addr.ss_family = AF_INET6;
		((struct sockaddr_in6 *)&it->addr)->sin6_port = htons(to);
	} else {
		return err_set(e, -EINVAL, "'%.64s': '%s' is not an address", s, abuf);
	}
	return 0;
}

int
egress_cidr_parse(const char *s, struct egress_cidr *c, struct err *e)
{
	char buf[64], shown[64];
	const char *slash = strchr(s, '/');
	size_t len = slash ? (size_t)(slash - s) : strlen(s);
	unsigned max;

	memset(c, 0, sizeof(*c));
	esc(s, shown, sizeof(shown));
	if (len == 0 || len >= sizeof(buf))
		return err_set(e, -EINVAL, "address range '%s': no address", shown);
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, c->addr) == 1)
		c->family = AF_INET, max = 32;
	else if (inet_pton(AF_INET6, buf, c->addr) == 1)
		c->family = AF_INET6, max = 128;
	else
		return err_set(e, -EINVAL, "address range '%s': not an address", shown);
	c->bits = max;
	if (slash != NULL) {
		char *end;
		long bits;

		errno = 0;
		bits = strtol(slash + 1, &end, 10);
		if (!isdigit((unsigned char)slash[1]) || *end != '\0' || errno != 0 ||
		    bits < 0 || bits > (long)max)
			return err_set(e, -EINVAL, "address range '%s': a prefix of 0 to %u "
			    "bits", shown, max);
		c->bits = (unsigned)bits;
	}
	return 0;
}

/* Whether the first bits of a and b are equal. */
static bool
prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;

	if (memcmp(a, b, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[whole] ^ b[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

/*
 * The address of sa as family and bytes; an IPv6 address that carries an
 * IPv4 one (mapped, compatible, NAT64 well-known prefix) as that IPv4.
 */
static int
addr_of(const struct sockaddr *sa, uint8_t out[16])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t compat[12] = { 0 };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	const uint8_t *a6;

	if (sa->sa_family == AF_INET) {
		memcpy(out, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
		return AF_INET;
	}
	if (sa->sa_family != AF_INET6)
		return -1;
	a6 = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
	if (memcmp(a6, mapped, 12) == 0 || memcmp(a6, nat64, 12) == 0 ||
	    (memcmp(a6, compat, 12) == 0 && (a6[12] | a6[13] | a6[14]) != 0)) {
		memcpy(out, a6 + 12, 4);
		return AF_INET;
	}
	memcpy(out, a6, 16);
	return AF_INET6;
}

bool
egress_cidr_has(const struct egress_cidr *c, const struct sockaddr *sa)
{
	uint8_t a[16];
	int fam = addr_of(sa, a);

	return fam == c->family && prefix_eq(a, c->addr, c->bits);
}

/* The ranges no job reaches unless the operator names them. */
static const struct {
	int family;
	uint8_t addr[16];
	unsigned bits;
	const char *why;
} refused[] = {
	{ AF_INET, { 0 }, 8, "unspecified" },
	{ AF_INET, { 10 }, 8, "private" },
	{ AF_INET, { 100, 64 }, 10, "private" },
	{ AF_INET, { 127 }, 8, "loopback" },
	{ AF_INET, { 169, 254 }, 16, "link-local" },
	{ AF_INET, { 172, 16 }, 12, "private" },
	{ AF_INET, { 192, 0, 0 }, 24, "reserved" },
	{ AF_INET, { 192, 0, 2 }, 24, "reserved" },
	{ AF_INET, { 192, 168 }, 16, "private" },
	{ AF_INET, { 198, 18 }, 15, "reserved" },
	{ AF_INET, { 198, 51, 100 }, 24, "reserved" },
	{ AF_INET, { 203, 0, 113 }, 24, "reserved" },
	{ AF_INET, { 224 }, 4, "multicast" },
	{ AF_INET, { 240 }, 4, "reserved" },
	{ AF_INET6, { 0 }, 128, "unspecified" },
	{ AF_INET6, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128, "loopback" },
	{ AF_INET6, { 0 }, 96, "reserved" },	/* the rest of ::/96 */
	{ AF_INET6, { 0x01 }, 64, "reserved" },	/* discard-only 100::/64 */
	{ AF_INET6, { 0x20, 0x01, 0x0d, 0xb8 }, 32, "reserved" },
	{ AF_INET6, { 0xfc }, 7, "private" },
	{ AF_INET6, { 0xfe, 0x80 }, 10, "link-local" },
	{ AF_INET6, { 0xfe, 0xc0 }, 10, "private" },	/* site-local, deprecated */
	{ AF_INET6, { 0xff }, 8, "multicast" },
};

const char *
egress_addr_refused(const struct sockaddr *sa, const struct egress_cidr *allow,
    size_t nallow, const struct egress_cidr *own, size_t nown)
{
	uint8_t a[16];
	int fam = addr_of(sa, a);

	if (fam < 0)
		return "unspecified";
	for (size_t i = 0; i < nallow; i++)
		if (egress_cidr_has(&allow[i], sa))
			return NULL;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (refused[i].family == fam && prefix_eq(a, refused[i].addr, refused[i].bits))
			return refused[i].why;
	if (fam == AF_INET && memcmp(a, "\xff\xff\xff\xff", 4) == 0)
		return "reserved";
	for (size_t i = 0; i < nown; i++)
		if (egress_cidr_has(&own[i], sa))
			return "the host's own";
	return NULL;
}
