/*
 * pin.c - a tag to the digest it names now (pin.h): `skopeo inspect --raw`
 * of the reference, and the SHA-256 of the bytes it printed, which are the
 * registry's manifest exactly as served (skopeo does not re-encode --raw).
 */
#define _XOPEN_SOURCE 700	/* nftw() */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "../common/xmalloc.h"
#include "oci.h"
#include "pin.h"
#include "skopeo.h"

#define PIN_TIMEOUT_MS 60000u

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(path) < 0 ? 0 : 0;	/* whatever is left stays */
}

int
img_pin(const struct img_ref *in, const struct img_pin_opts *o, struct img_ref *out,
    struct err *e)
{
	char src[IMG_REF_MAX + 1], canon[IMG_REF_MAX + 1], tmp[] = "/tmp/sandq-pin.XXXXXX";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	struct skopeo_cmd cmd = { 0 };
	const char *argv[8];
	size_t n = 0;
	int rc;

	if (in->kind == IMG_NAME)
		return err_set(e, -EINVAL, "an image name cannot be pinned");
	*out = *in;
	if (in->kind != IMG_DOCKER || in->digest[0] != '\0')
		return 0;
	if (img_ref_source(in, src, sizeof(src)) < 0 ||
	    img_ref_str(in, canon, sizeof(canon)) < 0)
		return err_set(e, -EINVAL, "an image reference outgrew its form");
	argv[n++] = o->skopeo != NULL ? o->skopeo : SKOPEO_BIN;
	argv[n++] = "inspect";
	argv[n++] = "--raw";
	argv[n++] = "--retry-times";
	argv[n++] = "1";
	if (o->plain_http)
		argv[n++] = "--tls-verify=false";
	argv[n++] = src;
	argv[n] = NULL;
	if (o->home == NULL && mkdtemp(tmp) == NULL)
		return err_set(e, -errno, "image '%s': mkdtemp: %s", canon, strerror(errno));
	cmd.argv = argv;
	cmd.home = o->home != NULL ? o->home : tmp;
	cmd.timeout_ms = o->timeout_ms != 0 ? o->timeout_ms : PIN_TIMEOUT_MS;
	cmd.out = xmalloc(OCI_JSON_MAX + 1);
	cmd.out_max = OCI_JSON_MAX + 1;
	rc = skopeo_exec(&cmd);
	if (o->home == NULL)
		nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (rc == 0 && cmd.out_len == 0)
		rc = -EIO, snprintf(cmd.why, sizeof(cmd.why), "no manifest");
	if (rc == 0 && EVP_Digest(cmd.out, cmd.out_len, md, &mdlen, EVP_sha256(),
	    NULL) != 1)
		rc = -EIO, snprintf(cmd.why, sizeof(cmd.why), "SHA-256 failed");
	free(cmd.out);
	if (rc == -ETIMEDOUT)
		return err_set(e, rc, "image '%s': skopeo inspect timed out after %u ms",
		    canon, cmd.timeout_ms);
	if (rc == -E2BIG)
		return err_set(e, rc, "image '%s': its manifest is over %u bytes", canon,
		    OCI_JSON_MAX);
	if (rc < 0)
		return err_set(e, rc, "image '%s': skopeo inspect failed: %s", canon,
		    cmd.why[0] ? cmd.why : strerror(-rc));
	memcpy(out->digest, "sha256:", 7);
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(out->digest + 7 + 2 * i, 3, "%02x", md[i]);
	out->tag[0] = '\0';
	return 0;
}
