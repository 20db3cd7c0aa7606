/*
 * gateway_tar_test.c - a sandbox's folder as a tar over sandq-gateway
 * (GET and PUT /v1/sandboxes/ID/tar[/PATH], gateway/tar.c) against a real
 * redis-server, sandqd and gateway. Archives are built here with
 * libarchive's writer (and, for a size that lies, patched by hand): a
 * round trip keeps bytes, folders (empty ones too) and executable bits
 * and makes exactly one version; every hostile archive (absolute names,
 * `..`, symlinks and hard links, devices, FIFOs, a control character or
 * bytes that are not UTF-8 in a name, a claimed size past the body, too
 * many entries, not a tar) is refused with its entry named (escaped),
 * nothing enqueued and the version unchanged; a tar whose folder meets a
 * file of the sandbox commits nothing. Needs root (sandqd).
 */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/err.h"
#include "../queue/token.h"
#include "gwharness.h"
#include "harness.h"

static struct harness H;
static pid_t gw_pid = -1;

static void
setup(void)
{
	static const char *const extra[] = { "--set", "tenants=default,a", NULL };

	if (geteuid() != 0)
		cr_skip_test("sandqd needs root to map sandbox uids (running as uid %d)",
		    (int)geteuid());
	curl_global_init(CURL_GLOBAL_DEFAULT);
	harness_start(&H, 2, extra);
}

static void
teardown(void)
{
	gwh_stop(gw_pid);
	gw_pid = -1;
	harness_stop(&H);
}

TestSuite(gateway_tar, .init = setup, .fini = teardown, .timeout = 240);

/*** Building archives ***/

struct tarbuf {
	struct archive *a;
	char *buf;
	size_t cap, used;
};

static void
tb_open_as(struct tarbuf *t, size_t cap, bool ustar)
{
	t->cap = cap;
	t->buf = malloc(cap);
	t->used = 0;
	t->a = archive_write_new();
	if (ustar)
		archive_write_set_format_ustar(t->a);
	else
		archive_write_set_format_pax_restricted(t->a);
	archive_write_set_bytes_in_last_block(t->a, 1);
	cr_assert_eq(archive_write_open_memory(t->a, t->buf, t->cap, &t->used), ARCHIVE_OK);
}

static void
tb_open(struct tarbuf *t, size_t cap)
{
	tb_open_as(t, cap, false);
}

/* Adds an entry: type AE_IFREG (data, n), AE_IFDIR, AE_IFLNK (link: target), ... */
static void
tb_add(struct tarbuf *t, const char *name, unsigned type, unsigned perm,
    const void *data, size_t n, const char *link, const char *hardlink)
{
	struct archive_entry *e = archive_entry_new();

	archive_entry_copy_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_size(e, type == AE_IFREG ? (la_int64_t)n : 0);
	if (link)
		archive_entry_copy_symlink(e, link);
	if (hardlink)
		archive_entry_copy_hardlink(e, hardlink);
	cr_assert_eq(archive_write_header(t->a, e), ARCHIVE_OK, "%s: %s", name,
	    archive_error_string(t->a));
	if (type == AE_IFREG && n > 0)
		cr_assert_eq(archive_write_data(t->a, data, n), (la_ssize_t)n);
	archive_entry_free(e);
}

static void
tb_close(struct tarbuf *t)
{
	cr_assert_eq(archive_write_close(t->a), ARCHIVE_OK);
	archive_write_free(t->a);
}

/*** Requests ***/

static long
version_of(const char *tok, const char *sb)
{
	char path[128], *b;
	json_t *o;
	long st, v;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sb);
	b = gwh_http("GET", path, tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	o = json_loads(b, 0, NULL);
	v = (long)json_integer_value(json_object_get(o, "version"));
	json_decref(o);
	free(b);
	return v;
}

/* PUTs the archive; expects status, code, and want in the message. */
static void
refused(const char *tok, struct tarbuf *t, long status, const char *code, const char *want)
{
	long v = version_of(tok, "t1"), st;
	long long before = gwh_xlen(&H, "a");
	size_t n;
	char *b = gwh_http_raw("PUT", "/v1/sandboxes/t1/tar/in", tok, t->buf, t->used,
	    &st, &n);
	char *c = gwh_error_code(b);

	cr_expect_eq(st, status, "%s: %s", want, b);
	cr_expect_str_eq(c, code, "%s", b);
	cr_expect(strstr(b, want) != NULL, "'%s' not in %s", want, b);
	cr_expect_leq(gwh_xlen(&H, "a"), before, "nothing enqueued");
	cr_expect_eq(version_of(tok, "t1"), v);
	free(b), free(c), free(t->buf);
}

Test(gateway_tar, a_folder_round_trips_as_one_version)
{
	static const unsigned char bin[] = { 0xff, 0x00, 0x82, '\n' };
	char tok[TOKEN_LEN + 1], *b;
	struct tarbuf t;
	struct archive *rd;
	struct archive_entry *e;
	bool saw_bin = false, saw_exec = false, saw_empty = false;
	long st, v;
	size_t n;

	gw_pid = gwh_start(&H, H.url, NULL);
	gwh_token_make(&H, "a", tok);
	b = gwh_http("POST", "/v1/sandboxes", tok, "{\"sandbox\":\"t1\"}", &st);
	cr_assert_eq(st, 201, "%s", b);
	free(b);
	v = version_of(tok, "t1");

	tb_open(&t, 1 << 20);
	tb_add(&t, "./", AE_IFDIR, 0755, NULL, 0, NULL, NULL);
	tb_add(&t, "./d/", AE_IFDIR, 0755, NULL, 0, NULL, NULL);
	tb_add(&t, "./d/bin.dat", AE_IFREG, 0644, bin, sizeof(bin), NULL, NULL);
	tb_add(&t, "./run.sh", AE_IFREG, 0755, "#!/bin/sh\necho ran\n", 19, NULL, NULL);
	tb_add(&t, "empty", AE_IFDIR, 0755, NULL, 0, NULL, NULL);
	tb_close(&t);
	b = gwh_http_raw("PUT", "/v1/sandboxes/t1/tar/up", tok, t.buf, t.used, &st, &n);
	cr_assert_eq(st, 200, "%s", b);
	cr_expect(strstr(b, "\"files\":2") && strstr(b, "\"folders\":2"), "%s", b);
	free(b);
	free(t.buf);
	cr_expect_eq(version_of(tok, "t1"), v + 1, "one new version");

	b = gwh_http("POST", "/v1/jobs", tok, "{\"id\":\"chk1\",\"op\":\"sh\",\"sandbox\":"
	    "\"t1\",\"script\":\"up/run.sh; test -d up/empty && echo empty; od -An -tx1 "
	    "up/d/bin.dat\"}", &st);
	cr_assert_eq(st, 202, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/jobs/chk1?wait=60", tok, NULL, &st);
	cr_assert_eq(st, 200, "%s", b);
	cr_expect(strstr(b, "\"stdout\":\"ran\\nempty\\n ff 00 82 0a\\n\"") != NULL, "%s", b);
	free(b);

	/* Back as a tar, read with libarchive. */
	b = gwh_http_raw("GET", "/v1/sandboxes/t1/tar/up", tok, NULL, 0, &st, &n);
	cr_assert_eq(st, 200, "%.200s", b);
	rd = archive_read_new();
	archive_read_support_format_tar(rd);
	cr_assert_eq(archive_read_open_memory(rd, b, n), ARCHIVE_OK);
	while (archive_read_next_header(rd, &e) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		char data[64];

		if (strcmp(name, "./d/bin.dat") == 0) {
			cr_expect_eq(archive_read_data(rd, data, sizeof(data)), (la_ssize_t)sizeof(bin));
			cr_expect(memcmp(data, bin, sizeof(bin)) == 0);
			saw_bin = true;
		}
		if (strcmp(name, "./run.sh") == 0)
			saw_exec = (archive_entry_perm(e) & 0100) != 0;
		if (strcmp(name, "./empty/") == 0)
			saw_empty = archive_entry_filetype(e) == AE_IFDIR;
	}
	archive_read_free(rd);
	free(b);
	cr_expect(saw_bin && saw_exec && saw_empty, "bin %d exec %d empty %d", saw_bin,
	    saw_exec, saw_empty);

	/* The whole sandbox, and a folder that is not there. */
	b = gwh_http_raw("GET", "/v1/sandboxes/t1/tar", tok, NULL, 0, &st, &n);
	cr_expect_eq(st, 200);
	cr_expect(memmem(b, n, "./up/run.sh", 11) != NULL);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/t1/tar/nope", tok, NULL, &st);
	cr_expect_eq(st, 404, "%s", b);
	free(b);
	b = gwh_http("GET", "/v1/sandboxes/zz/tar", tok, NULL, &st);
	cr_expect_eq(st, 404, "%s", b);
	cr_expect(strstr(b, "sandbox_not_found") != NULL, "%s", b);
	free(b);
	b = gwh_http("DELETE", "/v1/sandboxes/t1/tar", tok, NULL, &st);
	cr_expect_eq(st, 405, "%s", b);
	free(b);

	/* A folder of the tar where the sandbox has a file: nothing committed. */
	v = version_of(tok, "t1");
	tb_open(&t, 1 << 20);
	tb_add(&t, "new.txt", AE_IFREG, 0644, "new", 3, NULL, NULL);
	tb_add(&t, "run.sh/", AE_IFDIR, 0755, NULL, 0, NULL, NULL);
	tb_close(&t);
	b = gwh_http_raw("PUT", "/v1/sandboxes/t1/tar/up", tok, t.buf, t.used, &st, &n);
	cr_expect_eq(st, 409, "%s", b);
	cr_expect(strstr(b, "up/run.sh") != NULL, "%s", b);
	free(b);
	free(t.buf);
	cr_expect_eq(version_of(tok, "t1"), v, "nothing committed");
	b = gwh_http("GET", "/v1/sandboxes/t1/stat/up/new.txt", tok, NULL, &st);
	cr_expect_eq(st, 404, "%s", b);
	free(b);
}

Test(gateway_tar, hostile_archives_are_refused_naming_the_entry)
{
	static const char *const big_body[] = { "--max-body", "16777216", NULL };
	char tok[TOKEN_LEN + 1], *b, hdr_size[12];
	struct tarbuf t;
	unsigned sum = 0;
	long st;

	gw_pid = gwh_start(&H, H.url, big_body);
	gwh_token_make(&H, "a", tok);
	b = gwh_http("POST", "/v1/sandboxes", tok, "{\"sandbox\":\"t1\"}", &st);
	cr_assert_eq(st, 201, "%s", b);
	free(b);

	tb_open(&t, 1 << 16);
	tb_add(&t, "ok.txt", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_add(&t, "/etc/cron.d/x", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'/etc/cron.d/x': an absolute name");

	tb_open(&t, 1 << 16);
	tb_add(&t, "a/../../x", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'a/../../x': a '..' component");

	tb_open(&t, 1 << 16);
	tb_add(&t, "l", AE_IFLNK, 0777, NULL, 0, "/etc/passwd", NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'l': a symlink");

	tb_open(&t, 1 << 16);
	tb_add(&t, "h", AE_IFREG, 0644, NULL, 0, NULL, "../../etc/shadow");
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'h': a hard link");

	tb_open(&t, 1 << 16);
	tb_add(&t, "dev/null", AE_IFCHR, 0666, NULL, 0, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'dev/null': a device");

	tb_open(&t, 1 << 16);
	tb_add(&t, "p", AE_IFIFO, 0644, NULL, 0, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'p': a FIFO");

	tb_open(&t, 1 << 16);
	tb_add(&t, "bell\x07.txt", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'bell\\\\x07.txt': the name is not UTF-8");

	tb_open(&t, 1 << 16);
	tb_add(&t, "same", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_add(&t, "same", AE_IFREG, 0644, "y", 1, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'same': the name appears twice");

	tb_open(&t, 1 << 16);
	tb_add(&t, "f", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_add(&t, "f/g", AE_IFREG, 0644, "y", 1, NULL, NULL);
	tb_close(&t);
	refused(tok, &t, 400, "bad_tar", "'f/g': its folder is a file");

	tb_open(&t, 4 << 20);
	for (int i = 0; i < 4097; i++) {
		char name[32];

		snprintf(name, sizeof(name), "d%d/", i);
		tb_add(&t, name, AE_IFDIR, 0755, NULL, 0, NULL, NULL);
	}
	tb_close(&t);
	refused(tok, &t, 413, "too_large", "'d4096/': more than 4096 entries");

	/* A size that lies: a 5-byte file's header claims 1 GiB (checksum fixed). */
	tb_open_as(&t, 1 << 16, true);
	tb_add(&t, "big", AE_IFREG, 0644, "12345", 5, NULL, NULL);
	tb_close(&t);
	snprintf(hdr_size, sizeof(hdr_size), "%011o", 1u << 30);
	memcpy(t.buf + 124, hdr_size, 11);
	memset(t.buf + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)t.buf[i];
	snprintf(t.buf + 148, 8, "%06o", sum);
	refused(tok, &t, 400, "bad_tar", "'big': its size is larger");

	t.buf = strdup("this is not a tar at all, but it is long enough to be read as one? no.");
	t.used = strlen(t.buf);
	refused(tok, &t, 400, "bad_tar", "not a");

	/* Not UTF-8: \xff in the name, escaped in the message. */
	tb_open_as(&t, 1 << 16, true);
	tb_add(&t, "ok-name", AE_IFREG, 0644, "x", 1, NULL, NULL);
	tb_close(&t);
	t.buf[2] = (char)0xff;
	sum = 0;
	memset(t.buf + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)t.buf[i];
	snprintf(t.buf + 148, 8, "%06o", sum);
	refused(tok, &t, 400, "bad_tar", "'ok\\\\xff");
}
