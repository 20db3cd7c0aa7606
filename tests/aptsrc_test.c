/*
 * aptsrc_test.c - apt's sources for `sandq image build` (images/aptsrc.c,
 * images/debian.c): both forms parsed, the entries a suite needs written
 * back as deb822 with nothing else (no other suite, no deb-src, nothing
 * disabled), an inline key kept as written, a suite the machine does not
 * offer refused naming the ones it does; the machine's files read from a
 * test's folder as apt reads them (sources.list, then sources.list.d's
 * .list and .sources in order, other names ignored); package names; and
 * a missing mmdebstrap named. No network, no mmdebstrap run.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../images/aptsrc.h"
#include "../images/debian.h"

static char base[64];

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void
setup(void)
{
	snprintf(base, sizeof(base), "/tmp/aptsrc_test.XXXXXX");
	cr_assert_not_null(mkdtemp(base));
}

static void
teardown(void)
{
	if (base[0])
		nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(aptsrc, .init = setup, .fini = teardown, .timeout = 30);

/* The text apt_sources_for_suite() writes for suite from one file's text. */
static char *
for_suite(const char *text, bool deb822, const char *suite, struct err *e, int *rc)
{
	struct apt_sources all = { 0 };
	char *out = NULL;

	*rc = apt_sources_parse(text, strlen(text), "test.sources", deb822, &all, e);
	if (*rc == 0)
		*rc = apt_sources_for_suite(&all, suite, &out, e);
	apt_sources_free(&all);
	return out;
}

static void
write_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

#define DEBIAN_SOURCES \
	"Types: deb deb-src\n" \
	"# http://snapshot.debian.org/archive/debian/20250520T000000Z\n" \
	"URIs: http://deb.debian.org/debian\n" \
	"Suites: bookworm bookworm-updates bookworm-backports\n" \
	"Components: main contrib\n" \
	"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" \
	"\n" \
	"Types: deb\n" \
	"URIs: http://deb.debian.org/debian-security\n" \
	"Suites: bookworm-security\n" \
	"Components: main\n" \
	"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" \
	"\n" \
	"Types: deb\n" \
	"URIs: http://deb.debian.org/debian\n" \
	"Suites: trixie\n" \
	"Components: main\n" \
	"\n" \
	"Types: deb\n" \
	"URIs: http://disabled.example/debian\n" \
	"Suites: bookworm\n" \
	"Components: main\n" \
	"Enabled: no\n" \
	"\n" \
	"Types: deb-src\n" \
	"URIs: http://source.example/debian\n" \
	"Suites: bookworm\n"

Test(aptsrc, writes_what_a_suite_needs_from_deb822_and_nothing_else)
{
	struct err e = { 0 };
	int rc;
	char *t = for_suite(DEBIAN_SOURCES, true, "bookworm", &e, &rc);

	cr_assert_eq(rc, 0, "%s", e.msg);
	cr_expect_str_eq(t,
	    "Types: deb\n"
	    "URIs: http://deb.debian.org/debian\n"
	    "Suites: bookworm bookworm-updates\n"
	    "Components: main contrib\n"
	    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
	    "\n"
	    "Types: deb\n"
	    "URIs: http://deb.debian.org/debian-security\n"
	    "Suites: bookworm-security\n"
	    "Components: main\n"
	    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n");
	free(t);
}

Test(aptsrc, refuses_a_suite_the_machine_does_not_offer_naming_those_it_does)
{
	struct err e = { 0 };
	int rc;
	char *t = for_suite(DEBIAN_SOURCES, true, "sid", &e, &rc);

	cr_expect_null(t);
	cr_expect_eq(rc, -ENOENT);
	cr_expect_str_eq(e.msg, "the machine's apt sources have no suite 'sid' (they "
	    "have: bookworm, bookworm-updates, bookworm-backports, bookworm-security, "
	    "trixie)");
	/* An update suite alone is not the suite. */
	t = for_suite("deb http://a.example/d bookworm-security main\n", false,
	    "bookworm", &e, &rc);
	cr_expect_eq(rc, -ENOENT, "%s", e.msg);
	free(t);
}

Test(aptsrc, reads_the_one_line_form_with_its_options)
{
	struct err e = { 0 };
	int rc;
	char *t = for_suite(
	    "# the machine's list\n"
	    "deb [arch=amd64 signed-by=/etc/apt/keys/x.gpg] http://m.example/debian "
	    "bookworm main non-free  # a comment\n"
	    "deb-src http://m.example/debian bookworm main\n"
	    "deb [ trusted=yes ] http://local.example/repo bookworm/updates main\n"
	    "deb http://m.example/debian bullseye main\n", false, "bookworm", &e, &rc);

	cr_assert_eq(rc, 0, "%s", e.msg);
	cr_expect_str_eq(t,
	    "Types: deb\n"
	    "URIs: http://m.example/debian\n"
	    "Suites: bookworm\n"
	    "Components: main non-free\n"
	    "Signed-By: /etc/apt/keys/x.gpg\n"
	    "\n"
	    "Types: deb\n"
	    "URIs: http://local.example/repo\n"
	    "Suites: bookworm/updates\n"
	    "Components: main\n"
	    "Trusted: yes\n");
	free(t);
}

Test(aptsrc, keeps_an_inline_key_as_written)
{
	struct err e = { 0 };
	int rc;
	char *t = for_suite(
	    "Types: deb\n"
	    "URIs: http://k.example/debian\n"
	    "Suites: bookworm\n"
	    "Components: main\n"
	    "Signed-By:\n"
	    " -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
	    " .\n"
	    " mQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD3K87ZM18gzyQZJD+w\n"
	    " -----END PGP PUBLIC KEY BLOCK-----\n", true, "bookworm", &e, &rc);

	cr_assert_eq(rc, 0, "%s", e.msg);
	cr_expect_str_eq(t,
	    "Types: deb\n"
	    "URIs: http://k.example/debian\n"
	    "Suites: bookworm\n"
	    "Components: main\n"
	    "Signed-By: \n"
	    " -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
	    " .\n"
	    " mQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD3K87ZM18gzyQZJD+w\n"
	    " -----END PGP PUBLIC KEY BLOCK-----\n");
	free(t);
}

Test(aptsrc, refuses_malformed_text_naming_file_and_line)
{
	struct err e = { 0 };
	int rc;

	free(for_suite("Types: deb\nURIs http://x\n", true, "bookworm", &e, &rc));
	cr_expect_eq(rc, -EINVAL);
	cr_expect_str_eq(e.msg, "test.sources:2: expected 'Field: value'");
	free(for_suite("Types: deb\nSuites: bookworm\n", true, "bookworm", &e, &rc));
	cr_expect_eq(rc, -EINVAL);
	cr_expect_str_eq(e.msg, "test.sources:1: an entry without URIs");
	free(for_suite("deb [signed-by=/k http://x bookworm main\n", false, "bookworm",
	    &e, &rc));
	cr_expect_eq(rc, -EINVAL);
	cr_expect_str_eq(e.msg, "test.sources:1: '[' without ']'");
	free(for_suite("deb http://x\n", false, "bookworm", &e, &rc));
	cr_expect_eq(rc, -EINVAL, "%s", e.msg);
	{
		struct apt_sources all = { 0 };

		cr_expect_eq(apt_sources_parse("deb http://x b\0c\n", 16, "f", false, &all,
		    &e), -EINVAL);
		cr_expect_str_eq(e.msg, "f: a NUL byte");
		apt_sources_free(&all);
	}
}

Test(aptsrc, reads_the_machines_files_as_apt_does)
{
	char etc[128], d[160], files[512], *t = NULL;
	struct err e = { 0 };

	snprintf(etc, sizeof(etc), "%s/etc-apt", base);
	snprintf(d, sizeof(d), "%s/sources.list.d", etc);
	cr_assert_eq(mkdir(etc, 0755), 0);
	cr_assert_eq(mkdir(d, 0755), 0);
	write_file(etc, "sources.list", "deb http://list.example/debian bookworm main\n");
	write_file(d, "b.sources", "Types: deb\nURIs: http://b.example/debian\n"
	    "Suites: bookworm\nComponents: main\n");
	write_file(d, "a.list", "deb http://a.example/debian bookworm-updates main\n");
	write_file(d, "c.list.disabled-by-farm", "deb http://ignored.example/ bookworm main\n");
	write_file(d, "d.list.save", "deb http://ignored.example/ bookworm main\n");
	write_file(d, "other.sources", "Types: deb\nURIs: http://o.example/\n"
	    "Suites: nodistro\nComponents: main\n");
	cr_assert_eq(img_debian_sources(etc, "bookworm", &t, files, sizeof(files), &e),
	    0, "%s", e.msg);
	cr_expect_str_eq(t,
	    "Types: deb\nURIs: http://list.example/debian\nSuites: bookworm\n"
	    "Components: main\n\n"
	    "Types: deb\nURIs: http://a.example/debian\nSuites: bookworm-updates\n"
	    "Components: main\n\n"
	    "Types: deb\nURIs: http://b.example/debian\nSuites: bookworm\n"
	    "Components: main\n");
	cr_expect(strstr(t, "ignored") == NULL, "%s", t);
	cr_expect(strstr(files, "/sources.list, ") != NULL, "%s", files);
	cr_expect(strstr(files, "/sources.list.d/a.list, ") != NULL, "%s", files);
	cr_expect(strstr(files, "disabled") == NULL, "%s", files);
	free(t);

	cr_expect_eq(img_debian_sources(etc, "trixie", &t, files, sizeof(files), &e),
	    -ENOENT);
	cr_expect(strstr(e.msg, "no suite 'trixie'") != NULL, "%s", e.msg);
	cr_expect_null(t);
}

Test(aptsrc, checks_suites_and_package_names)
{
	cr_expect(apt_suite_ok("bookworm"));
	cr_expect(apt_suite_ok("stable-backports"));
	cr_expect_not(apt_suite_ok(""));
	cr_expect_not(apt_suite_ok("-x"));
	cr_expect_not(apt_suite_ok("../etc"));
	cr_expect_not(apt_suite_ok("book worm"));

	cr_expect(img_debian_package_ok("python3-numpy"));
	cr_expect(img_debian_package_ok("g++"));
	cr_expect(img_debian_package_ok("libc6=2.36-9+deb12u10"));
	cr_expect(img_debian_package_ok("git/bookworm-backports"));
	cr_expect_not(img_debian_package_ok("x"));
	cr_expect_not(img_debian_package_ok("-oAPT::Get=1"));
	cr_expect_not(img_debian_package_ok("Python3"));
	cr_expect_not(img_debian_package_ok("a b"));
	cr_expect_not(img_debian_package_ok("git="));
	cr_expect_not(img_debian_package_ok("git;rm"));
}

Test(aptsrc, names_a_missing_mmdebstrap)
{
	struct img_debian_build b = { .suite = "bookworm", .sources = "/x.sources",
	    .out = "/nonexistent/out.tar", .mmdebstrap = "/nonexistent/mmdebstrap" };
	struct err e = { 0 };

	cr_expect_eq(img_debian_build(&b, &e), -ENOENT);
	cr_expect_str_eq(e.msg, "/nonexistent/mmdebstrap is not installed (Debian's "
	    "package mmdebstrap)");
}

Test(aptsrc, says_why_mmdebstrap_failed_from_its_last_error_line)
{
	char tool[160];
	struct img_debian_build b = { .suite = "bookworm", .sources = "/x.sources",
	    .out = "/nonexistent/out.tar", .mmdebstrap = tool };
	struct err e = { 0 };

	/* A stand-in that prints as mmdebstrap does and fails. */
	snprintf(tool, sizeof(tool), "%s/fake-mmdebstrap", base);
	write_file(base, "fake-mmdebstrap", "#!/bin/sh\necho 'I: running apt-get update...'\n"
	    "echo 'E: Unable to locate package \033[2Jnope' >&2\necho 'I: done'\nexit 1\n");
	cr_assert_eq(chmod(tool, 0755), 0);
	cr_expect_eq(img_debian_build(&b, &e), -EIO);
	cr_expect_str_eq(e.msg, "mmdebstrap failed (exit status 1): E: Unable to locate "
	    "package \\x1b[2Jnope");
}
