/*
 * imgref_test.c - unit tests for images/ref.c: image references (every
 * valid form, every class of invalid one, word for word where the message
 * is the contract), their canonical text and skopeo source, and the
 * image_sources patterns with their boundaries. Pure: no I/O.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../images/names.h"
#include "../images/ref.h"

static struct img_ref r;
static struct img_pattern p;
static struct err e;

/* Parses s, which must pass, and returns its canonical text. */
static const char *
canon(const char *s)
{
	static char buf[IMG_REF_MAX + 1];

	cr_assert_eq(img_ref_parse(s, &r, &e), 0, "%s: %s", s, e.msg);
	cr_assert_gt(img_ref_str(&r, buf, sizeof(buf)), 0, "%s", s);
	return buf;
}

/* s must be refused with a message holding want, printable ASCII only. */
static void
refused(const char *s, const char *want)
{
	memset(&e, 0, sizeof(e));
	cr_expect_eq(img_ref_parse(s, &r, &e), -EINVAL, "accepted '%s'", s);
	cr_expect_eq(e.code, -EINVAL);
	cr_expect(strstr(e.msg, want) != NULL, "'%s': got '%s', want '%s'", s,
	    e.msg, want);
	for (const char *c = e.msg; *c; c++)
		cr_expect(*c >= 0x20 && *c < 0x7f, "raw byte 0x%02x in '%s'",
		    (unsigned char)*c, e.msg);
	cr_expect_eq(r.kind, IMG_HOST, "a refused reference leaves a zeroed struct");
	cr_expect_str_eq(r.repo, "");
}

/*** References: the valid forms ***/

Test(imgref, host_is_the_hosts_image)
{
	cr_expect_str_eq(canon("host"), "host");
	cr_expect_eq(r.kind, IMG_HOST);
}

Test(imgref, docker_references_get_their_parts_and_latest_by_default)
{
	cr_expect_str_eq(canon("docker://registry.example.com/team/app"),
	    "docker://registry.example.com/team/app:latest");
	cr_expect_eq(r.kind, IMG_DOCKER);
	cr_expect_str_eq(r.host, "registry.example.com");
	cr_expect_eq(r.port, 0);
	cr_expect_str_eq(r.repo, "team/app");
	cr_expect_str_eq(r.tag, "latest");
	cr_expect_str_eq(r.digest, "");

	cr_expect_str_eq(canon("docker://127.0.0.1:5000/a/b/c:v1.2_rc-3"),
	    "docker://127.0.0.1:5000/a/b/c:v1.2_rc-3");
	cr_expect_eq(r.port, 5000);
	cr_expect_str_eq(r.tag, "v1.2_rc-3");

	cr_expect_str_eq(canon("docker://localhost/x"), "docker://localhost/x:latest");
	cr_expect_str_eq(canon("docker://reg:65535/x"), "docker://reg:65535/x:latest");
}

Test(imgref, a_digest_replaces_the_tag)
{
	const char *d = "sha256:0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef";
	char s[200];

	snprintf(s, sizeof(s), "docker://r.io/app@%s", d);
	cr_expect_str_eq(canon(s), s);
	cr_expect_str_eq(r.digest, d);
	cr_expect_str_eq(r.tag, "", "a digest takes no default tag");
}

Test(imgref, repository_components_follow_the_distribution_grammar)
{
	/* [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* */
	static const char *const ok[] = {
		"a", "a0", "a.b", "a_b", "a__b", "a-b", "a---b", "a.b_c__d-e",
		"0", "x/y/z", "library/alpine",
	};
	char s[300];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(s, sizeof(s), "docker://r.io/%s", ok[i]);
		cr_expect_eq(img_ref_parse(s, &r, &e), 0, "%s: %s", s, e.msg);
	}
}

Test(imgref, hosts_are_made_lower_case_and_ip_addresses_canonical)
{
	cr_expect_str_eq(canon("docker://Registry.Example.COM/x"),
	    "docker://registry.example.com/x:latest");
	cr_expect_str_eq(canon("docker://[::1]:5000/x"), "docker://[::1]:5000/x:latest");
	cr_expect_str_eq(r.host, "[::1]");
	cr_expect_str_eq(canon("docker://[2001:DB8:0:0::1]/x"),
	    "docker://[2001:db8::1]/x:latest");
}

Test(imgref, docker_hub_aliases_are_made_one)
{
	cr_expect_str_eq(canon("docker://docker.io/alpine"),
	    "docker://docker.io/library/alpine:latest");
	cr_expect_str_eq(canon("docker://index.docker.io/alpine:3"),
	    "docker://docker.io/library/alpine:3");
	cr_expect_str_eq(canon("docker://docker.io/team/app"),
	    "docker://docker.io/team/app:latest");
	cr_expect_str_eq(canon("docker://docker.io:5000/alpine"),
	    "docker://docker.io:5000/alpine:latest", "another port: another registry");
}

Test(imgref, file_references_are_normalised_paths)
{
	cr_expect_str_eq(canon("oci:/srv/images/py"), "oci:/srv/images/py");
	cr_expect_eq(r.kind, IMG_OCI);
	cr_expect_str_eq(r.tag, "");
	cr_expect_str_eq(canon("oci:/srv//images/./py/:3.12"), "oci:/srv/images/py:3.12");
	cr_expect_str_eq(r.path, "/srv/images/py");
	cr_expect_str_eq(r.tag, "3.12");
	cr_expect_str_eq(canon("oci-archive:/srv/a.tar"), "oci-archive:/srv/a.tar");
	cr_expect_eq(r.kind, IMG_OCI_ARCHIVE);
	cr_expect_str_eq(canon("docker-archive:/srv/b.tar.gz"),
	    "docker-archive:/srv/b.tar.gz");
	cr_expect_eq(r.kind, IMG_DOCKER_ARCHIVE);
	cr_expect_str_eq(canon("oci:/a/.../b@x+y=z"), "oci:/a/.../b@x+y=z",
	    "'...' is a name, not '..'");
}

Test(imgref, names_are_a_tenants_own)
{
	cr_expect_str_eq(canon("numpy"), "numpy");
	cr_expect_eq(r.kind, IMG_NAME);
	cr_expect_str_eq(r.name, "numpy");
	cr_expect_str_eq(r.tag, "", "a name gets no default tag");
	cr_expect_str_eq(canon("py3.12_sci-2:v2"), "py3.12_sci-2:v2");
	cr_expect_str_eq(r.tag, "v2");
	cr_expect_str_eq(canon("hostname"), "hostname");
}

Test(imgref, canonical_text_reads_back_to_the_same_reference)
{
	static const char *const refs[] = {
		"host", "docker://R.io:80/a/b", "docker://docker.io/alpine",
		"docker://[::ffff:1.2.3.4]/x@sha256:"
		    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"oci:/x//y/:t", "oci-archive:/a", "docker-archive:/b/./c", "n:t",
	};
	char first[IMG_REF_MAX + 1];
	struct img_ref a;

	for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
		snprintf(first, sizeof(first), "%s", canon(refs[i]));
		a = r;
		cr_expect_str_eq(canon(first), first, "%s", refs[i]);
		cr_expect_eq(memcmp(&a, &r, sizeof(a)), 0, "%s", refs[i]);
	}
}

Test(imgref, canonical_text_reports_a_short_buffer)
{
	char small[10];

	canon("docker://r.io/app");
	cr_expect_eq(img_ref_str(&r, small, sizeof(small)), -ENAMETOOLONG);
	cr_expect_eq(img_ref_str(&r, small, 0), -ENAMETOOLONG);
}

Test(imgref, references_at_their_bounds_are_accepted)
{
	char s[IMG_REF_MAX + 2];
	char repo[IMG_REPO_MAX + 1], tag[IMG_TAG_MAX + 1], name[IMG_NAME_MAX + 1];

	memset(repo, 'a', IMG_REPO_MAX);
	repo[IMG_REPO_MAX] = '\0';
	memset(tag, 'T', IMG_TAG_MAX);
	tag[IMG_TAG_MAX] = '\0';
	snprintf(s, sizeof(s), "docker://r.io/%s:%s", repo, tag);
	cr_expect_eq(img_ref_parse(s, &r, &e), 0, "%s", e.msg);
	memset(name, 'n', IMG_NAME_MAX);
	name[IMG_NAME_MAX] = '\0';
	cr_expect_eq(img_ref_parse(name, &r, &e), 0, "%s", e.msg);
	/* A path to the whole 1024 bytes. */
	memset(s, 'p', IMG_REF_MAX);
	memcpy(s, "oci:/", 5);
	for (size_t i = 200; i < IMG_REF_MAX; i += 200)
		s[i] = '/';
	s[IMG_REF_MAX] = '\0';
	cr_expect_eq(img_ref_parse(s, &r, &e), 0, "%s", e.msg);
}

/*** References: every class of invalid one ***/

Test(imgref, refuses_empty_oversized_and_unprintable_text)
{
	char big[IMG_REF_MAX + 2];

	refused("", "empty reference");
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	refused(big, "reference longer than 1024 bytes");
	refused("docker://r.io/a\x1b[31m", "byte 0x1b at offset 15: a reference is "
	    "printable ASCII without spaces");
	refused("oci:/a b", "byte 0x20 at offset 6");
	refused("oci:/caf\xc3\xa9", "byte 0xc3 at offset 8");
	refused("oci:/a\x7f", "byte 0x7f");
	refused("host\n", "byte 0x0a at offset 4");
}

Test(imgref, refuses_bad_registry_hosts)
{
	refused("docker://alpine", "expected docker://HOST[:PORT]/REPO: no repository "
	    "after the host");
	refused("docker:///x", "no registry host");
	refused("docker://registry/x", "registry host 'registry': needs a '.', a port "
	    "or to be localhost (skopeo would read it as a folder of Docker Hub)");
	refused("docker://-r.io/x", "registry host '-r.io': expected a DNS name");
	refused("docker://r-.io/x", "registry host 'r-.io'");
	refused("docker://r..io/x", "registry host 'r..io'");
	refused("docker://r_x.io/x", "registry host 'r_x.io'");
	refused("docker://999.1.1.1/x", "registry host '999.1.1.1': not an IPv4 address");
	refused("docker://1.2.3/x", "not an IPv4 address");
	refused("docker://[::g]/x", "registry host '[::g]': not an IPv6 address");
	refused("docker://[fe80::1%eth0]/x", "not an IPv6 address");
	refused("docker://[::1/x", "registry host '[::1': expected [an IPv6 address]");
	refused("docker://[]/x", "expected [an IPv6 address]");
	refused("docker://[::1]5000/x", "'5000' after the registry host: expected "
	    ":PORT or /");
}

Test(imgref, refuses_labels_and_hosts_past_their_bounds)
{
	char s[400], label[70];

	memset(label, 'a', 64);
	label[64] = '\0';
	snprintf(s, sizeof(s), "docker://%s.io/x", label);
	refused(s, "expected a DNS name");
	memset(s, 0, sizeof(s));
	strcpy(s, "docker://");
	for (int i = 0; i < 51; i++)
		strcat(s, "abcd.");
	strcat(s, "io/x");
	refused(s, "registry host longer than 253 bytes");
}

Test(imgref, refuses_bad_ports)
{
	refused("docker://r.io:0/x", "port '0': expected 1..65535");
	refused("docker://r.io:65536/x", "port '65536'");
	refused("docker://r.io:080/x", "port '080'");
	refused("docker://r.io:/x", "port '': expected 1..65535");
	refused("docker://r.io:12a/x", "port '12a'");
	refused("docker://r.io:123456/x", "port '123456'");
}

Test(imgref, refuses_bad_repositories)
{
	char s[400], repo[IMG_REPO_MAX + 2];

	refused("docker://r.io/", "no repository after the host");
	refused("docker://r.io/Alpine", "repository component 'Alpine': expected "
	    "lower-case letters and digits, separated by '.', '_', '__' or '-'");
	refused("docker://r.io/a//b", "repository 'a//b': an empty component");
	refused("docker://r.io/a/", "repository 'a/': an empty component");
	refused("docker://r.io/a..b", "repository component 'a..b'");
	refused("docker://r.io/a___b", "repository component 'a___b'");
	refused("docker://r.io/a._b", "repository component 'a._b'");
	refused("docker://r.io/-a", "repository component '-a'");
	refused("docker://r.io/a-", "repository component 'a-'");
	refused("docker://r.io/.a", "repository component '.a'");
	refused("docker://r.io/a*", "repository component 'a*'");
	memset(repo, 'a', IMG_REPO_MAX + 1);
	repo[IMG_REPO_MAX + 1] = '\0';
	snprintf(s, sizeof(s), "docker://r.io/%s", repo);
	refused(s, "repository longer than 255 bytes");
	repo[IMG_REPO_MAX - 3] = '\0';
	snprintf(s, sizeof(s), "docker://docker.io/%s", repo);
	refused(s, "repository longer than 255 bytes as library/...");
}

Test(imgref, refuses_bad_tags_and_digests)
{
	char s[300], tag[IMG_TAG_MAX + 2];

	refused("docker://r.io/a:", "tag '': expected 1..128 bytes of [A-Za-z0-9._-], "
	    "not starting with '.' or '-'");
	refused("docker://r.io/a:-x", "tag '-x'");
	refused("docker://r.io/a:.x", "tag '.x'");
	refused("docker://r.io/a:x/y", "tag 'x/y'");
	refused("docker://r.io/a:x'y", "tag 'x\\x27y'");
	memset(tag, 't', IMG_TAG_MAX + 1);
	tag[IMG_TAG_MAX + 1] = '\0';
	snprintf(s, sizeof(s), "docker://r.io/a:%s", tag);
	refused(s, "tag 'tttttttttttttttttttttttttttttttttttttttttttttttt...'");
	refused("docker://r.io/a:v1@sha256:0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef", "a tag and a digest: give one of them");
	refused("docker://r.io/a@sha256:0123", "digest 'sha256:0123': expected "
	    "sha256: and 64 lower-case hex digits");
	refused("docker://r.io/a@sha256:0123456789ABCDEF0123456789abcdef"
	    "0123456789abcdef0123456789abcdef", "expected sha256: and 64");
	refused("docker://r.io/a@sha512:0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef", "expected sha256: and 64");
	refused("docker://r.io/a@", "digest ''");
}

Test(imgref, refuses_bad_paths)
{
	char s[400], comp[IMG_COMPONENT_MAX + 2];

	refused("oci:srv/img", "path 'srv/img': must be absolute");
	refused("oci:", "path '': must be absolute");
	refused("oci:/srv/../etc", "path '/srv/../etc': a '..' component");
	refused("oci-archive:/..", "a '..' component");
	refused("oci:/", "path '/': names the root folder");
	refused("docker-archive://./", "names the root folder");
	refused("oci:/srv/a,b", "path '/srv/a,b': a ',' (image_sources lists are "
	    "comma-separated)");
	refused("oci:/srv/*", "path '/srv/*': a '*' in a reference");
	refused("oci-archive:/a.tar:x", "a ':' after the path: oci-archive takes no "
	    "tag, and a path holds no ':'");
	refused("docker-archive:/a.tar:r.io/x:1", "docker-archive takes no tag");
	refused("oci:/a:b:c", "tag 'b:c'");
	refused("oci:/a:", "tag ''");
	memset(comp, 'c', IMG_COMPONENT_MAX + 1);
	comp[IMG_COMPONENT_MAX + 1] = '\0';
	snprintf(s, sizeof(s), "oci:/%s", comp);
	refused(s, "a component longer than 255 bytes");
}

Test(imgref, refuses_bad_names_and_unknown_transports)
{
	char name[IMG_NAME_MAX + 2];

	refused("Numpy", "image name 'Numpy': expected 1..64 bytes of [a-z0-9._-] "
	    "starting with a letter or digit");
	refused("_x", "image name '_x'");
	refused(".x", "image name '.x'");
	refused("team/app", "'team/app' is not an image name; an image of a registry "
	    "is docker://HOST[:PORT]/REPO");
	memset(name, 'n', IMG_NAME_MAX + 1);
	name[IMG_NAME_MAX + 1] = '\0';
	refused(name, "image name 'nnnn");
	refused("numpy:", "tag ''");
	refused("numpy:a:b", "tag 'a:b'");
	refused("docker", "'docker' names a transport, not an image");
	refused("oci", "'oci' names a transport");
	refused("oci-archive", "'oci-archive' names a transport");
	refused("docker-archive", "'docker-archive' names a transport");
	refused("host:latest", "'host' takes no tag");
	refused("docker:alpine", "expected docker://HOST[:PORT]/REPO");
	refused("dir:/srv/x", "unknown transport 'dir:' (expected host, docker://, "
	    "oci:, oci-archive:, docker-archive: or an image name)");
	refused("https://r.io/x", "unknown transport 'https:'");
	refused("DOCKER://r.io/x", "unknown transport 'DOCKER:'");
}

Test(imgref, messages_show_at_most_48_bytes_escaped)
{
	char s[300], tag[200];

	memset(tag, '\'', 150);
	tag[150] = '\0';
	snprintf(s, sizeof(s), "docker://r.io/a:%s", tag);
	memset(&e, 0, sizeof(e));
	cr_assert_eq(img_ref_parse(s, &r, &e), -EINVAL);
	cr_expect(strstr(e.msg, "\\x27\\x27") != NULL, "%s", e.msg);
	cr_expect(strstr(e.msg, "'") == e.msg + 4, "the only raw quotes are the "
	    "message's own: %s", e.msg);
	cr_expect(strlen(e.msg) < sizeof(e.msg) - 1 || strstr(e.msg, "...") != NULL);
}

/*** Sources for skopeo ***/

Test(imgref, sources_are_skopeos_transport_strings)
{
	char buf[IMG_REF_MAX + 1];

	canon("docker://R.io:5000/a/b");
	cr_expect_eq(img_ref_source(&r, buf, sizeof(buf)), 29);
	cr_expect_str_eq(buf, "docker://r.io:5000/a/b:latest");
	canon("docker://docker.io/alpine@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	img_ref_source(&r, buf, sizeof(buf));
	cr_expect_str_eq(buf, "docker://docker.io/library/alpine@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	canon("oci:/srv/img:v1");
	img_ref_source(&r, buf, sizeof(buf));
	cr_expect_str_eq(buf, "oci:/srv/img:v1");
	canon("oci-archive:/srv/a.tar");
	img_ref_source(&r, buf, sizeof(buf));
	cr_expect_str_eq(buf, "oci-archive:/srv/a.tar");
	canon("docker-archive:/srv/b.tar");
	img_ref_source(&r, buf, sizeof(buf));
	cr_expect_str_eq(buf, "docker-archive:/srv/b.tar");
	canon("host");
	cr_expect_eq(img_ref_source(&r, buf, sizeof(buf)), -EINVAL);
	canon("numpy");
	cr_expect_eq(img_ref_source(&r, buf, sizeof(buf)), -EINVAL);
	cr_expect_str_eq(img_kind_name(IMG_OCI_ARCHIVE), "oci-archive");
}

/*** Patterns ***/

/* Whether pattern pat allows reference ref (both must parse). */
static bool
allows(const char *pat, const char *ref)
{
	cr_assert_eq(img_pattern_parse(pat, &p, &e), 0, "%s: %s", pat, e.msg);
	cr_assert_eq(img_ref_parse(ref, &r, &e), 0, "%s: %s", ref, e.msg);
	return img_pattern_match(&p, &r);
}

static void
pattern_refused(const char *pat, const char *want)
{
	memset(&e, 0, sizeof(e));
	cr_expect_eq(img_pattern_parse(pat, &p, &e), -EINVAL, "accepted '%s'", pat);
	cr_expect(strstr(e.msg, want) != NULL, "'%s': got '%s', want '%s'", pat,
	    e.msg, want);
}

Test(imgref, patterns_parse_into_their_parts)
{
	cr_assert_eq(img_pattern_parse("docker://R.io:5000/team/*", &p, &e), 0, "%s", e.msg);
	cr_expect_eq(p.kind, IMG_DOCKER);
	cr_expect_str_eq(p.host, "r.io");
	cr_expect_eq(p.port, 5000);
	cr_expect_str_eq(p.repo, "team/");
	cr_expect(p.wild);
	cr_assert_eq(img_pattern_parse("oci:/srv//img/*", &p, &e), 0, "%s", e.msg);
	cr_expect_eq(p.kind, IMG_OCI);
	cr_expect_str_eq(p.path, "/srv/img");
	cr_expect(p.wild);
	cr_assert_eq(img_pattern_parse("docker-archive:/srv/a.tar", &p, &e), 0);
	cr_expect_not(p.wild);
	cr_assert_eq(img_pattern_parse("host", &p, &e), 0);
	cr_expect_eq(p.kind, IMG_HOST);
	cr_assert_eq(img_pattern_parse("docker://r.io/*", &p, &e), 0);
	cr_expect_str_eq(p.repo, "");
	cr_assert_eq(img_pattern_parse("oci:/*", &p, &e), 0);
	cr_expect_str_eq(p.path, "");
	cr_expect(p.wild);
	cr_assert_eq(img_pattern_parse("docker://r.io/te-*", &p, &e), 0, "%s", e.msg);
	cr_assert_eq(img_pattern_parse("docker://r.io/a__*", &p, &e), 0, "%s", e.msg);
	cr_assert_eq(img_pattern_parse("docker://r.io/a.*", &p, &e), 0, "%s", e.msg);
	cr_assert_eq(img_pattern_parse("docker://r.io/a", &p, &e), 0, "%s", e.msg);
	cr_expect_not(p.wild);
}

Test(imgref, refuses_bad_patterns)
{
	pattern_refused("", "empty pattern");
	pattern_refused("numpy", "expected host, docker://HOST[:PORT]/REPO, "
	    "docker://HOST[:PORT]/PREFIX*, or oci:, oci-archive: or docker-archive: "
	    "and /DIR/* or /PATH");
	pattern_refused("*", "expected host");
	pattern_refused("docker://r.io", "expected docker://HOST[:PORT]/REPO or "
	    "docker://HOST[:PORT]/PREFIX*");
	pattern_refused("docker://r.io/a*b", "a '*' may only end a pattern");
	pattern_refused("docker://r.io/**", "a '*' may only end a pattern");
	pattern_refused("docker://r.io/a:v1", "a pattern names no tag or digest");
	pattern_refused("docker://r.io/a@sha256:00", "no tag or digest");
	pattern_refused("docker://r.io/A*", "repository component 'A'");
	pattern_refused("docker://r.io//*", "an empty component");
	pattern_refused("docker://registry/*", "needs a '.', a port or to be localhost");
	pattern_refused("oci:/srv/img*", "path '/srv/img*': a '*' may only be the "
	    "last component");
	pattern_refused("oci:/srv/*/x", "a '*' may only be the last component");
	pattern_refused("oci:/srv/img/*:t", "a pattern names no tag, and a path holds "
	    "no ':'");
	pattern_refused("oci:srv/*", "must be absolute");
	pattern_refused("oci:/srv/../*", "a '..' component");
	pattern_refused("oci:/", "names the root folder");
	pattern_refused("docker-archive:/a\tb", "byte 0x09");
}

Test(imgref, a_trailing_star_matches_any_rest_of_the_repository_path)
{
	cr_expect(allows("docker://h.io/team*", "docker://h.io/team"));
	cr_expect(allows("docker://h.io/team*", "docker://h.io/teamx"),
	    "team* is a string prefix: teamx is under it");
	cr_expect(allows("docker://h.io/team*", "docker://h.io/team/app:v1"));
	cr_expect_not(allows("docker://h.io/team*", "docker://h.io/tea"));
	cr_expect_not(allows("docker://h.io/team*", "docker://h.io/x/team"));
	cr_expect(allows("docker://h.io/*", "docker://h.io/any/thing"));
}

Test(imgref, a_star_after_a_slash_matches_only_below_the_folder)
{
	cr_expect(allows("docker://h.io/team/*", "docker://h.io/team/app"));
	cr_expect(allows("docker://h.io/team/*", "docker://h.io/team/a/b@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	cr_expect_not(allows("docker://h.io/team/*", "docker://h.io/teamx"));
	cr_expect_not(allows("docker://h.io/team/*", "docker://h.io/teamx/app"));
	cr_expect_not(allows("docker://h.io/team/*", "docker://h.io/team"));
}

Test(imgref, a_pattern_without_star_is_one_repository_with_any_tag)
{
	cr_expect(allows("docker://h.io/team", "docker://h.io/team"));
	cr_expect(allows("docker://h.io/team", "docker://h.io/team:v2"));
	cr_expect_not(allows("docker://h.io/team", "docker://h.io/teamx"));
	cr_expect_not(allows("docker://h.io/team", "docker://h.io/team/app"));
}

Test(imgref, host_and_port_must_be_the_patterns)
{
	cr_expect_not(allows("docker://h.io/*", "docker://g.io/x"));
	cr_expect_not(allows("docker://h.io/*", "docker://h.io:5000/x"));
	cr_expect_not(allows("docker://h.io:5000/*", "docker://h.io/x"));
	cr_expect_not(allows("docker://h.io:5000/*", "docker://h.io:5001/x"));
	cr_expect(allows("docker://H.IO:5000/*", "docker://h.io:5000/x"));
	cr_expect_not(allows("docker://h.io/*", "docker://h.io.evil.com/x"));
	cr_expect(allows("docker://[::1]:5000/*", "docker://[0:0::1]:5000/x"));
}

Test(imgref, docker_hub_aliases_match_what_is_fetched)
{
	cr_expect(allows("docker://docker.io/alpine", "docker://docker.io/library/alpine"));
	cr_expect(allows("docker://docker.io/library/*", "docker://index.docker.io/alpine"));
	cr_expect(allows("docker://docker.io/alp*", "docker://docker.io/alpine:3"));
	cr_expect_not(allows("docker://docker.io/alp*", "docker://docker.io/alpx/y"),
	    "alp* on docker.io is library/alp*");
	cr_expect(allows("docker://docker.io/*", "docker://docker.io/someone/x"));
}

Test(imgref, a_path_pattern_matches_below_its_folder_at_a_component_boundary)
{
	cr_expect(allows("oci:/srv/img/*", "oci:/srv/img/py"));
	cr_expect(allows("oci:/srv/img/*", "oci:/srv/img/a/b:tag"));
	cr_expect(allows("oci:/srv//img/./*", "oci:/srv/img/py"));
	cr_expect_not(allows("oci:/srv/img/*", "oci:/srv/imgx"));
	cr_expect_not(allows("oci:/srv/img/*", "oci:/srv/imgx/py"));
	cr_expect_not(allows("oci:/srv/img/*", "oci:/srv/img"));
	cr_expect_not(allows("oci:/srv/img/*", "oci:/srv"));
	cr_expect_not(allows("oci:/srv/img/*", "oci-archive:/srv/img/a.tar"),
	    "the transport is part of the source");
	cr_expect(allows("oci-archive:/srv/img/*", "oci-archive:/srv/img/a.tar"));
	cr_expect(allows("docker-archive:/srv/*", "docker-archive:/srv/a.tar"));
	cr_expect(allows("oci:/*", "oci:/anything/at/all"));
	cr_expect(allows("oci:/srv/img/py", "oci:/srv/img/py:v1"));
	cr_expect_not(allows("oci:/srv/img/py", "oci:/srv/img/py/x"));
}

Test(imgref, host_is_its_own_pattern)
{
	cr_expect(allows("host", "host"));
	cr_expect_not(allows("host", "docker://h.io/x"));
	cr_expect_not(allows("docker://h.io/*", "host"));
	cr_expect_not(allows("oci:/*", "host"));
}

Test(imgref, an_empty_list_allows_only_host_and_names_are_never_allowed)
{
	char *list[] = { "docker://h.io/*", "bad pattern", "oci:/srv/*" };

	canon("host");
	cr_expect(img_source_allowed(NULL, 0, &r));
	cr_expect_not(img_source_allowed(list, 3, &r), "a list without host");
	canon("docker://h.io/x");
	cr_expect_not(img_source_allowed(NULL, 0, &r));
	cr_expect(img_source_allowed(list, 3, &r));
	canon("oci:/srv/x");
	cr_expect(img_source_allowed(list, 3, &r), "past a pattern that does not parse");
	canon("oci:/etc/x");
	cr_expect_not(img_source_allowed(list, 3, &r));
	canon("numpy");
	cr_expect_not(img_source_allowed(NULL, 0, &r));
	cr_expect_not(img_source_allowed((char *[]){ "host" }, 1, &r));
}

/*** A tenant's names (names.c) ***/

Test(imgref, a_names_key_spells_out_its_tag)
{
	struct img_ref nr;
	char key[200];

	cr_assert_eq(img_ref_parse("numpy", &nr, &e), 0, "%s", e.msg);
	cr_expect_gt(img_name_key(&nr, key, sizeof(key)), 0);
	cr_expect_str_eq(key, "numpy:latest");
	cr_assert_eq(img_ref_parse("numpy:1.26", &nr, &e), 0, "%s", e.msg);
	cr_expect_gt(img_name_key(&nr, key, sizeof(key)), 0);
	cr_expect_str_eq(key, "numpy:1.26");
	cr_expect_eq(img_name_key(&nr, key, 5), -ENAMETOOLONG);
	cr_assert_eq(img_ref_parse("docker://r.io/a", &nr, &e), 0, "%s", e.msg);
	cr_expect_eq(img_name_key(&nr, key, sizeof(key)), -EINVAL, "not a name");
}

Test(imgref, a_names_value_reads_back_canonical_and_refuses_what_is_not_a_reference)
{
	struct img_name_value v = { .at_ms = 1764115200000 }, back;
	char *json = NULL;

	snprintf(v.ref, sizeof(v.ref), "docker://Index.Docker.IO/alpine@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	snprintf(v.given, sizeof(v.given), "docker://docker.io/alpine");
	cr_assert_eq(img_name_value_encode(&v, &json, &e), 0, "%s", e.msg);
	cr_assert_eq(img_name_value_decode(json, strlen(json), &back, &e), 0, "%s", e.msg);
	cr_expect_str_eq(back.ref, "docker://docker.io/library/alpine@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	cr_expect_str_eq(back.given, "docker://docker.io/library/alpine:latest");
	cr_expect_eq(back.at_ms, 1764115200000);
	free(json);
	/* A name never names a name; what is stored is read as untrusted. */
	snprintf(v.ref, sizeof(v.ref), "other");
	cr_expect_eq(img_name_value_encode(&v, &json, &e), -EINVAL);
	cr_expect_null(json);
#define VALUE_REFUSED(t_, m_) do { \
		cr_expect_eq(img_name_value_decode(t_, strlen(t_), &back, &e), -EINVAL, \
		    "%s", t_); \
		cr_expect_str_eq(e.msg, m_); \
		cr_expect_str_eq(back.ref, "", "nothing half-read"); \
	} while (0)
	VALUE_REFUSED("[1]", "expected an object with a string 'ref'");
	VALUE_REFUSED("{\"ref\":1}", "expected an object with a string 'ref'");
	VALUE_REFUSED("{\"ref\":\"host\",\"at\":\"x\"}", "'given' must be a string and 'at' an integer");
	VALUE_REFUSED("{\"ref\":\"other\"}", "'ref': names an image name, not an image");
	VALUE_REFUSED("{\"ref\":\"host\",\"ref\":\"host\"}", "not JSON: duplicate object key near '\"ref\"'");
	VALUE_REFUSED("{\"ref\":\"docker://x/\\u001b\"}", "'ref': byte 0x1b at offset 11: a reference "
	    "is printable ASCII without spaces");
#undef VALUE_REFUSED
	{
		char big[IMG_NAME_VALUE_MAX + 2];

		memset(big, ' ', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		cr_expect_eq(img_name_value_decode(big, strlen(big), &back, &e), -EINVAL);
		cr_expect_str_eq(e.msg, "more than 4096 bytes");
	}
}
