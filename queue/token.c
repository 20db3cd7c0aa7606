/*
 * token.c - API tokens (token.h): made from OpenSSL's random bytes, kept
 * as their SHA-256, their records read and written with jansson and
 * checked both ways.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "../proto/keys.h"
#include "token.h"

#define TOKEN_RAW 32			/* random bytes of a token */

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int
token_key(char *buf, size_t size, const char *prefix)
{
	int n = snprintf(buf, size, "%s:tokens", prefix);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

int
token_new(char out[TOKEN_LEN + 1])
{
	unsigned char raw[TOKEN_RAW + 1] = { 0 };	/* one byte of padding for the last group */
	size_t o = strlen(TOKEN_PREFIX);

	if (RAND_bytes(raw, TOKEN_RAW) != 1)
		return -EIO;
	memcpy(out, TOKEN_PREFIX, o);
	/* 32 bytes: ten groups of three, then two bytes (three characters). */
	for (size_t i = 0; i < TOKEN_RAW; i += 3) {
		unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 |
		    (i + 2 < TOKEN_RAW ? raw[i + 2] : 0);

		out[o++] = b64url[(v >> 18) & 63];
		out[o++] = b64url[(v >> 12) & 63];
		out[o++] = b64url[(v >> 6) & 63];
		if (i + 2 < TOKEN_RAW)
			out[o++] = b64url[v & 63];
	}
	out[o] = '\0';
	OPENSSL_cleanse(raw, sizeof(raw));
	return o == TOKEN_LEN ? 0 : -EIO;
}

bool
token_shape_ok(const char *s, size_t len)
{
	size_t p = strlen(TOKEN_PREFIX);

	if (len != TOKEN_LEN || memcmp(s, TOKEN_PREFIX, p) != 0)
		return false;
	for (size_t i = p; i < len; i++)
		if (s[i] == '\0' || strchr(b64url, s[i]) == NULL)
			return false;
	return true;
}

void
token_hash_hex(const char *token, size_t len, char out[TOKEN_HASH_HEX + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_Digest(token, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32) {
		memset(out, '0', TOKEN_HASH_HEX);	/* matches no stored token */
		out[TOKEN_HASH_HEX] = '\0';
		return;
	}
	for (unsigned i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

bool
token_name_ok(const char *name)
{
	size_t n = strlen(name);

	return n >= 1 && n <= TOKEN_NAME_MAX &&
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789_.-") == n;
}

/* The checks encode and decode share. */
static int
record_check(const struct token_record *r, struct err *e)
{
	if (r->admin && r->tenant[0] != '\0')
		return err_set(e, -EINVAL, "an admin token names no tenant");
	if (!r->admin && !key_tenant_valid(r->tenant))
		return err_set(e, -EINVAL, "a token's tenant must be 1..64 bytes of "
		    "[A-Za-z0-9_-]");
	if (!token_name_ok(r->name))
		return err_set(e, -EINVAL, "a token's name must be 1..%d bytes of "
		    "[A-Za-z0-9_.-]", TOKEN_NAME_MAX);
	return 0;
}

int
token_record_encode(const struct token_record *r, char **out, struct err *e)
{
	json_t *o;
	int rc;

	*out = NULL;
	if ((rc = record_check(r, e)) < 0)
		return rc;
	o = json_pack("{s:s, s:s, s:b, s:I}", "tenant", r->tenant, "name", r->name,
	    "admin", r->admin, "created_at", (json_int_t)r->created_at);
	if (o != NULL)
		*out = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return *out != NULL ? 0 : err_set(e, -ENOMEM, "cannot encode a token record");
}

int
token_record_decode(const char *json, size_t len, struct token_record *r,
    struct err *e)
{
	json_error_t je;
	json_t *o, *tenant, *name, *admin, *at;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	if (len > TOKEN_RECORD_MAX)
		return err_set(e, -EINVAL, "a token record of more than %d bytes",
		    TOKEN_RECORD_MAX);
	if ((o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je)) == NULL)
		return err_set(e, -EINVAL, "a token record that is not JSON: %.100s", je.text);
	tenant = json_object_get(o, "tenant");
	name = json_object_get(o, "name");
	admin = json_object_get(o, "admin");
	at = json_object_get(o, "created_at");
	if (!json_is_object(o) || !json_is_string(tenant) || !json_is_string(name) ||
	    !json_is_boolean(admin) || !json_is_integer(at) ||
	    json_string_length(tenant) >= sizeof(r->tenant) ||
	    json_string_length(name) >= sizeof(r->name))
		rc = err_set(e, -EINVAL, "a token record needs tenant, name, admin and "
		    "created_at");
	if (rc == 0) {
		snprintf(r->tenant, sizeof(r->tenant), "%s", json_string_value(tenant));
		snprintf(r->name, sizeof(r->name), "%s", json_string_value(name));
		r->admin = json_is_true(admin);
		r->created_at = (int64_t)json_integer_value(at);
		rc = record_check(r, e);
	}
	json_decref(o);
	if (rc < 0)
		memset(r, 0, sizeof(*r));
	return rc;
}
