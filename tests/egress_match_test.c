/*
 * egress_match_test.c - unit tests for egress/match.c: the host patterns of
 * `net: allow` jobs and their tenants, and the addresses no job may reach
 * (docs/security.md, "Network by allowlist"). Pure: no I/O, no root.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "../egress/egress.h"

static struct egress_pat
pat(const char *s)
{
	struct egress_pat p;
	struct err e = { 0 };

	cr_assert_eq(egress_pat_parse(s, &p, &e), 0, "%s: %s", s, e.msg);
	return p;
}

static bool
matches(const char *pattern, const char *host, uint16_t port)
{
	struct egress_pat p = pat(pattern);

	return egress_pat_match(&p, host, port);
}

static bool
covers(const char *outer, const char *inner)
{
	struct egress_pat o = pat(outer), i = pat(inner);

	return egress_pat_covers(&o, &i);
}

/* The refusal reason for an address literal (no allowed ranges). */
static const char *
why(const char *addr)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(addr, ':') != NULL) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		s6->sin6_family = AF_INET6;
		cr_assert_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		s4->sin_family = AF_INET;
		cr_assert_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
	}
	return egress_addr_refused((struct sockaddr *)&ss, NULL, 0, NULL, 0);
}

Test(egress_match, exact_names_match_whole_names_and_default_ports)
{
	cr_expect(matches("pypi.example", "pypi.example", 443));
	cr_expect(matches("pypi.example", "pypi.example", 80));
	cr_expect(!matches("pypi.example", "pypi.example", 8080));
	cr_expect(!matches("pypi.example", "a.pypi.example", 443));
	cr_expect(!matches("pypi.example", "pypi.example.evil", 443));
	cr_expect(matches("PyPI.Example:8443", "pypi.example", 8443));
	cr_expect(!matches("pypi.example:443", "pypi.example", 80));
}

Test(egress_match, wildcards_match_names_below_only_on_label_boundaries)
{
	cr_expect(matches("*.github.com", "api.github.com", 443));
	cr_expect(matches("*.github.com", "a.b.github.com", 443));
	cr_expect(!matches("*.github.com", "github.com", 443));
	cr_expect(!matches("*.github.com", "evilgithub.com", 443));
	cr_expect(!matches("*.github.com", "github.com.evil", 443));
}

Test(egress_match, ip_literals_match_only_ip_patterns)
{
	cr_expect(matches("192.0.2.7:80", "192.0.2.7", 80));
	cr_expect(!matches("*.example.org", "192.0.2.7", 80));
	cr_expect(matches("[2001:db8::1]:443", "2001:db8:0::1", 443));
	cr_expect(!matches("example", "127.0.0.1", 80));
}

Test(egress_match, malformed_patterns_are_refused_with_their_text)
{
	const char *bad[] = { "", "*", "*.com", "a..b", "-a.b", "a-.b", "a b",
		"host:0", "host:65536", "host:", "host:8x", "::1", "[::1", "*.1.2.3.4",
		"a/b", "1.2.3", "0x7f.1", "2130706433", "127.1", "a.b.123", "h\001st" };
	struct egress_pat p;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct err e = { 0 };

		cr_expect_eq(egress_pat_parse(bad[i], &p, &e), -EINVAL, "%s", bad[i]);
		cr_expect(strchr(e.msg, '\001') == NULL);
	}
}

Test(egress_match, a_job_pattern_must_be_inside_its_tenants)
{
	cr_expect(covers("*.example.org", "pypi.example.org:443"));
	cr_expect(covers("*.example.org", "*.files.example.org"));
	cr_expect(covers("*.example.org", "*.example.org"));
	cr_expect(!covers("*.example.org", "example.org"));
	cr_expect(!covers("pypi.example.org", "*.example.org"));
	cr_expect(covers("pypi.example.org", "pypi.example.org:443"));
	cr_expect(!covers("pypi.example.org:443", "pypi.example.org"));
	cr_expect(!covers("pypi.example.org", "pypi.example.org:8080"));
	cr_expect(!covers("*.example.org", "10.0.0.1"));
	cr_expect(covers("10.0.0.1:80", "10.0.0.1:80"));
}

Test(egress_match, lists_parse_with_commas_and_spaces_and_are_bounded)
{
	struct egress_pat pats[4];
	struct err e = { 0 };

	cr_expect_eq(egress_pats_parse("a.example, *.b.example:8080  c.example", pats, 4, &e),
	    3);
	cr_expect_eq(egress_pats_match(pats, 3, "x.b.example", 8080), 1);
	cr_expect_eq(egress_pats_match(pats, 3, "x.b.example", 443), -1);
	cr_expect_eq(egress_pats_parse("a.x,b.x,c.x,d.x,e.x", pats, 4, &e), -E2BIG);
}

Test(egress_match, private_loopback_and_special_addresses_are_refused)
{
	cr_expect_str_eq(why("127.0.0.1"), "loopback");
	cr_expect_str_eq(why("10.1.2.3"), "private");
	cr_expect_str_eq(why("172.31.0.1"), "private");
	cr_expect_str_eq(why("192.168.1.1"), "private");
	cr_expect_str_eq(why("100.64.0.1"), "private");
	cr_expect_str_eq(why("169.254.169.254"), "link-local");
	cr_expect_str_eq(why("0.0.0.0"), "unspecified");
	cr_expect_str_eq(why("224.0.0.1"), "multicast");
	cr_expect_str_eq(why("255.255.255.255"), "reserved");
	cr_expect_str_eq(why("::1"), "loopback");
	cr_expect_str_eq(why("::"), "unspecified");
	cr_expect_str_eq(why("fd00::1"), "private");
	cr_expect_str_eq(why("fe80::1"), "link-local");
	cr_expect_str_eq(why("ff02::1"), "multicast");
	cr_expect(why("93.184.216.34") == NULL);
	cr_expect(why("2606:2800:220:1::") == NULL);
	cr_expect(why("172.32.0.1") == NULL);
}

Test(egress_match, an_ipv4_address_inside_ipv6_is_judged_as_ipv4)
{
	cr_expect_str_eq(why("::ffff:127.0.0.1"), "loopback");
	cr_expect_str_eq(why("::ffff:10.0.0.1"), "private");
	cr_expect_str_eq(why("::127.0.0.1"), "loopback");
	cr_expect_str_eq(why("64:ff9b::a9fe:a9fe"), "link-local");
	cr_expect(why("::ffff:93.184.216.34") == NULL);
}

Test(egress_match, operator_ranges_lift_refusals_and_own_addresses_are_refused)
{
	struct egress_cidr allow, own;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct err e = { 0 };

	cr_assert_eq(egress_cidr_parse("127.0.0.0/30", &allow, &e), 0, "%s", e.msg);
	cr_assert_eq(egress_cidr_parse("93.184.216.34", &own, &e), 0, "%s", e.msg);
	inet_pton(AF_INET, "127.0.0.2", &sa.sin_addr);
	cr_expect(egress_addr_refused((struct sockaddr *)&sa, &allow, 1, &own, 1) == NULL);
	inet_pton(AF_INET, "127.0.0.4", &sa.sin_addr);
	cr_expect_str_eq(egress_addr_refused((struct sockaddr *)&sa, &allow, 1, &own, 1),
	    "loopback");
	inet_pton(AF_INET, "93.184.216.34", &sa.sin_addr);
	cr_expect_str_eq(egress_addr_refused((struct sockaddr *)&sa, &allow, 1, &own, 1),
	    "the host's own");
	cr_expect_eq(egress_cidr_parse("10.0.0.0/33", &allow, &e), -EINVAL);
	cr_expect_eq(egress_cidr_parse("nope/8", &allow, &e), -EINVAL);
}

/* egress_hosts items: NAME=ADDR, NAME:PORT=ADDR:PORT, [v6]:PORT; each fault named. */
Test(egress_match, operator_host_items_parse_with_and_without_ports)
{
	struct egress_host_item it;
	struct err e = { 0 };

	cr_assert_eq(egress_host_item_parse("PyPI.Example=127.0.0.1", &it, &e), 0, "%s", e.msg);
	cr_expect_str_eq(it.name, "pypi.example");
	cr_expect_eq(it.port, 0);
	cr_expect_eq(it.addr.ss_family, AF_INET);
	cr_expect_eq(((struct sockaddr_in *)&it.addr)->sin_port, 0);
	cr_assert_eq(egress_host_item_parse("pypi.example:443=127.0.0.1:8443", &it, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(it.port, 443);
	cr_expect_eq(ntohs(((struct sockaddr_in *)&it.addr)->sin_port), 8443);
	cr_assert_eq(egress_host_item_parse("mirror.example:443=[::1]:8443", &it, &e), 0,
	    "%s", e.msg);
	cr_expect_eq(it.addr.ss_family, AF_INET6);
	cr_expect_eq(ntohs(((struct sockaddr_in6 *)&it.addr)->sin6_port), 8443);
	cr_assert_eq(egress_host_item_parse("v6.example=fd00::1", &it, &e), 0, "%s", e.msg);
	cr_expect_eq(it.addr.ss_family, AF_INET6);
	cr_expect_eq(((struct sockaddr_in6 *)&it.addr)->sin6_port, 0);
	static const char *const bad[] = {
		"pypi.example", "pypi.example=nope", "127.0.0.1=10.0.0.1",
		"pypi.example:443=127.0.0.1", "pypi.example=127.0.0.1:8443",
		"pypi.example:0=127.0.0.1:1", "pypi.example:70000=127.0.0.1:1",
		"pypi.example:443=[::1", "pypi.example:443=[::1]x", "a b=127.0.0.1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		e.msg[0] = '\0';
		cr_expect_eq(egress_host_item_parse(bad[i], &it, &e), -EINVAL, "%s accepted", bad[i]);
		cr_expect(strstr(e.msg, bad[i]) != NULL || strstr(e.msg, "'") != NULL,
		    "%s: %s", bad[i], e.msg);
	}
}
