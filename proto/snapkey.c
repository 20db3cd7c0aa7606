/*
 * snapkey.c - the key of a snapshot (snapkey.h), with OpenSSL's SHA-256.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "snapkey.h"

void
snapkey_hex(const unsigned char *raw, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[raw[i] >> 4];
		out[2 * i + 1] = digits[raw[i] & 0xf];
	}
	out[2 * n] = '\0';
}

int
snapkey_manifest(uint64_t size, uint32_t chunk_size, const unsigned char *hashes,
    size_t n, char hex[SNAPKEY_HEX + 1])
{
	unsigned char head[sizeof(SNAPKEY_DOMAIN) + 12];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx;
	int ok;

	memcpy(head, SNAPKEY_DOMAIN, sizeof(SNAPKEY_DOMAIN));
	for (int i = 0; i < 8; i++)
		head[sizeof(SNAPKEY_DOMAIN) + i] = (unsigned char)(size >> (8 * i));
	for (int i = 0; i < 4; i++)
		head[sizeof(SNAPKEY_DOMAIN) + 8 + i] =
		    (unsigned char)(chunk_size >> (8 * i));
	ctx = EVP_MD_CTX_new();
	ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
	    EVP_DigestUpdate(ctx, head, sizeof(head)) == 1 &&
	    (n == 0 || EVP_DigestUpdate(ctx, hashes, n * SNAPKEY_RAW) == 1) &&
	    EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == SNAPKEY_RAW;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -EIO;
	snapkey_hex(md, SNAPKEY_RAW, hex);
	return 0;
}

int
snapkey_of(const void *data, size_t len, char hex[SNAPKEY_HEX + 1])
{
	const unsigned char *p = data;
	size_t n = (len + SNAPKEY_CHUNK_BYTES - 1) / SNAPKEY_CHUNK_BYTES;
	unsigned char *hashes = malloc(n > 0 ? n * SNAPKEY_RAW : 1);
	int rc = 0;

	if (hashes == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++) {
		size_t off = i * SNAPKEY_CHUNK_BYTES;
		size_t cn = len - off < SNAPKEY_CHUNK_BYTES ? len - off :
		    SNAPKEY_CHUNK_BYTES;
		unsigned int mdlen = 0;

		if (EVP_Digest(p + off, cn, hashes + i * SNAPKEY_RAW, &mdlen,
		    EVP_sha256(), NULL) != 1 || mdlen != SNAPKEY_RAW)
			rc = -EIO;
	}
	if (rc == 0)
		rc = snapkey_manifest(len, SNAPKEY_CHUNK_BYTES, hashes, n, hex);
	free(hashes);
	return rc;
}
