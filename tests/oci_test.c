/*
 * oci_test.c - the OCI document parsers (images/oci.c) on hostile input:
 * each refusal names what it refused, escaped, and what is accepted is
 * exactly the image manifests, indexes, configs and tar layers the spec
 * and Docker's schema 2 define.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../images/oci.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define MT_MAN "application/vnd.oci.image.manifest.v1+json"
#define MT_CFG "application/vnd.oci.image.config.v1+json"
#define MT_GZ "application/vnd.oci.image.layer.v1.tar+gzip"

static void
expect_printable(const char *msg)
{
	for (const char *p = msg; *p; p++)
		cr_expect((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
		    "a raw byte 0x%02x in: %s", (unsigned char)*p, msg);
}

/* A manifest with one layer of media type lt (and digest ld). */
static char *
manifest(const char *lt, const char *ld)
{
	static char buf[2048];

	snprintf(buf, sizeof(buf), "{\"schemaVersion\":2,\"mediaType\":\"" MT_MAN "\","
	    "\"config\":{\"mediaType\":\"" MT_CFG "\",\"digest\":\"" D1 "\",\"size\":10},"
	    "\"layers\":[{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":20}]}", lt, ld);
	return buf;
}

Test(oci, accepts_oci_and_docker_tar_layers)
{
	static const char *const ok[] = { MT_GZ, "application/vnd.oci.image.layer.v1.tar",
	    "application/vnd.oci.image.layer.v1.tar+zstd",
	    "application/vnd.docker.image.rootfs.diff.tar.gzip" };
	struct oci_manifest m;
	struct err e = { 0 };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char *s = manifest(ok[i], D2);

		cr_assert_eq(oci_manifest_parse(s, strlen(s), MT_MAN, &m, &e), 0, "%s", e.msg);
		cr_expect_eq(m.nlayers, 1);
		cr_expect_str_eq(m.layers[0].digest, D2);
		cr_expect_eq(m.layers[0].size, 20);
		cr_expect_str_eq(m.config.digest, D1);
		oci_manifest_free(&m);
	}
}

Test(oci, refuses_other_layer_types_by_name)
{
	static const char *const bad[] = {
		"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
		"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
		"application/vnd.oci.image.layer.v1.tar+bzip2",
		"application/x-evil\\u001b[2J",
	};
	struct oci_manifest m;
	struct err e = { 0 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *s = manifest(bad[i], D2);

		cr_expect_eq(oci_manifest_parse(s, strlen(s), MT_MAN, &m, &e), -ENOTSUP, "%s",
		    bad[i]);
		cr_expect_null(m.layers);
		if (i < 3)
			cr_expect(strstr(e.msg, bad[i]) != NULL, "not named: %s", e.msg);
		expect_printable(e.msg);
	}
	cr_expect(strstr(e.msg, "application/x-evil\\x1b[2J") != NULL, "%s", e.msg);
}

Test(oci, refuses_digests_other_than_sha256_and_malformed_ones)
{
	struct oci_manifest m;
	struct err e = { 0 };
	char *s;

	s = manifest(MT_GZ, "sha512:abcd");
	cr_expect_eq(oci_manifest_parse(s, strlen(s), MT_MAN, &m, &e), -ENOTSUP);
	cr_expect(strstr(e.msg, "sha512:abcd") != NULL, "%s", e.msg);
	s = manifest(MT_GZ, "sha256:../../../etc/passwd");
	cr_expect_eq(oci_manifest_parse(s, strlen(s), MT_MAN, &m, &e), -EBADMSG);
	s = manifest(MT_GZ, "sha256:1111111111111111111111111111111111111111111111111111111111111ABC");
	cr_expect_eq(oci_manifest_parse(s, strlen(s), MT_MAN, &m, &e), -EBADMSG, "upper case hex");
	cr_expect(oci_digest_ok(D1));
	cr_expect(!oci_digest_ok(D1 "0"));
	cr_expect(!oci_digest_ok(NULL));
}

Test(oci, refuses_a_manifest_that_contradicts_its_descriptor)
{
	struct oci_manifest m;
	struct err e = { 0 };
	char *s = manifest(MT_GZ, D2);

	/* Its body says OCI, the descriptor said Docker. */
	cr_expect_eq(oci_manifest_parse(s, strlen(s),
	    "application/vnd.docker.distribution.manifest.v2+json", &m, &e), -EBADMSG);
	/* An index is not a manifest; schema 1 is not supported at all. */
	cr_expect_eq(oci_manifest_parse(s, strlen(s), "application/vnd.oci.image.index.v1+json",
	    &m, &e), -ENOTSUP);
	cr_expect_eq(oci_manifest_parse(s, strlen(s),
	    "application/vnd.docker.distribution.manifest.v1+prettyjws", &m, &e), -ENOTSUP);
	cr_expect(strstr(e.msg, "v1+prettyjws") != NULL, "%s", e.msg);
}

Test(oci, refuses_duplicate_keys_and_too_many_layers)
{
	struct oci_manifest m;
	struct err e = { 0 };
	const char *dup = "{\"schemaVersion\":2,\"schemaVersion\":2}";
	size_t cap = 256 * 150 + 512, n;
	char *big = malloc(cap);

	cr_expect_eq(oci_manifest_parse(dup, strlen(dup), MT_MAN, &m, &e), -EBADMSG);
	n = (size_t)snprintf(big, cap, "{\"schemaVersion\":2,\"config\":{\"mediaType\":\""
	    MT_CFG "\",\"digest\":\"" D1 "\",\"size\":1},\"layers\":[");
	for (int i = 0; i <= OCI_LAYERS_MAX; i++)
		n += (size_t)snprintf(big + n, cap - n, "%s{\"mediaType\":\"" MT_GZ
		    "\",\"digest\":\"" D2 "\",\"size\":1}", i ? "," : "");
	snprintf(big + n, cap - n, "]}");
	cr_expect_eq(oci_manifest_parse(big, strlen(big), MT_MAN, &m, &e), -E2BIG, "%s", e.msg);
	free(big);
}

Test(oci, index_pick_names_the_platforms_it_has)
{
	const char *idx = "{\"schemaVersion\":2,\"manifests\":["
	    "{\"mediaType\":\"" MT_MAN "\",\"digest\":\"" D1 "\",\"size\":5,"
	    "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
	    "{\"mediaType\":\"" MT_MAN "\",\"digest\":\"" D2 "\",\"size\":6,"
	    "\"platform\":{\"os\":\"linux\",\"architecture\":\"s390x\"}},"
	    "{\"mediaType\":\"" MT_MAN "\",\"digest\":\"" D3 "\",\"size\":7,"
	    "\"platform\":{\"os\":\"windows\",\"architecture\":\"amd64\"}}]}";
	struct oci_desc d;
	struct err e = { 0 };

	cr_expect_eq(oci_index_pick(idx, strlen(idx), "linux", "amd64", &d, &e), -ENOENT);
	cr_expect(strstr(e.msg, "linux/arm64/v8, linux/s390x, windows/amd64") != NULL, "%s",
	    e.msg);
	cr_assert_eq(oci_index_pick(idx, strlen(idx), "linux", "s390x", &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D2);
	cr_expect_eq(d.size, 6);
}

Test(oci, layout_find_takes_the_named_entry)
{
	const char *idx = "{\"schemaVersion\":2,\"manifests\":["
	    "{\"mediaType\":\"" MT_MAN "\",\"digest\":\"" D1 "\",\"size\":5,"
	    "\"annotations\":{\"" OCI_REF_NAME "\":\"a\"}},"
	    "{\"mediaType\":\"" MT_MAN "\",\"digest\":\"" D2 "\",\"size\":6,"
	    "\"annotations\":{\"" OCI_REF_NAME "\":\"b\"}}]}";
	struct oci_desc d;
	struct err e = { 0 };

	cr_assert_eq(oci_layout_find(idx, strlen(idx), "b", &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D2);
	cr_expect_eq(oci_layout_find(idx, strlen(idx), "c", &d, &e), -ENOENT);
	cr_expect_eq(oci_layout_find("[]", 2, "a", &d, &e), -EBADMSG);
}

Test(oci, config_keeps_env_workdir_user_and_checks_diff_ids)
{
	const char *cfg = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
	    "\"Env\":[\"A=1\",\"B=2\"],\"WorkingDir\":\"/testbed\",\"User\":\"1000:1000\","
	    "\"Entrypoint\":null,\"Cmd\":[\"/bin/sh\",\"-c\",\"true\"]},"
	    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D1 "\",\"" D2 "\"]}}";
	const char *bad_env = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
	    "\"Env\":[\"A=1\",7]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	const char *no_os = "{\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\","
	    "\"diff_ids\":[]}}";
	const char *nul = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
	    "\"Env\":[\"A=\\u0000\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	struct oci_config c;
	struct err e = { 0 };

	cr_assert_eq(oci_config_parse(cfg, strlen(cfg), &c, &e), 0, "%s", e.msg);
	cr_expect_eq(c.nenv, 2);
	cr_expect_str_eq(c.env[1], "B=2");
	cr_expect_str_eq(c.working_dir, "/testbed");
	cr_expect_str_eq(c.user, "1000:1000");
	cr_expect_null(c.entrypoint);
	cr_expect_eq(c.ncmd, 3);
	cr_expect_eq(c.ndiff_ids, 2);
	cr_expect_str_eq(c.diff_ids[1], D2);
	oci_config_free(&c);
	oci_config_free(&c);

	cr_expect_eq(oci_config_parse(bad_env, strlen(bad_env), &c, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "Env[1]") != NULL, "%s", e.msg);
	cr_expect_null(c.env);
	cr_expect_eq(oci_config_parse(no_os, strlen(no_os), &c, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "os") != NULL, "%s", e.msg);
	cr_expect_eq(oci_config_parse(nul, strlen(nul), &c, &e), -EBADMSG, "a NUL in Env");
}

Test(oci, shown_escapes_and_cuts)
{
	char buf[16];

	cr_expect_str_eq(oci_shown("a\x1b[b", 4, buf, sizeof(buf)), "a\\x1b[b");
	cr_expect_str_eq(oci_shown("it's", 4, buf, sizeof(buf)), "it\\x27s");
	cr_expect_str_eq(oci_shown("\xc2\x9b", 2, buf, sizeof(buf)), "\\xc2\\x9b");
	oci_shown("abcdefghijklmnopqrstuvwxyz", 26, buf, sizeof(buf));
	cr_expect_str_eq(buf, "abcdefghijkl...");
	cr_expect_eq(strlen(buf), sizeof(buf) - 1);
}
