/*
 * store_names.c - what every file of the store checks and derives names
 * with: a blob key's hex and SHA-256, the forms of tenants, sandbox ids,
 * blob keys and labels, and a TEXT column read with its bound. A leaf of
 * store/: it calls nothing else of the store, so store.c, the chunk layer
 * (store_chunks.c), migration and import use it without using each other.
 */
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "../common/err.h"
#include "../common/sql.h"
#include "store.h"
#include "store_int.h"

/*
 * Copies a TEXT column into dst[size]. A NULL or over-long value can only
 * come from a damaged file: -EBADMSG naming the column.
 */
int
store__col_text(sqlite3_stmt *stmt, int col, char *dst, size_t size,
    const char *what, struct err *e)
{
	if (!sql_col_text(stmt, col, dst, size))
		return err_set(e, -EBADMSG, "store: %s: damaged row", what);
	return 0;
}

/* Lower-case hex of n raw bytes: 2 * n digits and a NUL. */
void
store__hex_of(const unsigned char *raw, size_t n, char *out)
{
	snapkey_hex(raw, n, out);
}

/* Raw SHA-256 of data through OpenSSL's EVP interface. */
int
store__sha256_raw(const void *data, size_t len, unsigned char out[SHA_RAW],
    struct err *e)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_Digest(len > 0 ? data : "", len, md, &mdlen, EVP_sha256(),
	    NULL) != 1 || mdlen != SHA_RAW)
		return err_set(e, -EIO, "store: SHA-256 failed");
	memcpy(out, md, SHA_RAW);
	return 0;
}

/* A blob key is exactly 64 lower-case hex digits (the form we write). */
int
store_sha_check(const char *field, const char *s, struct err *e)
{
	size_t i;

	for (i = 0; s != NULL && i < STORE_SHA_HEX; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			break;
	}
	if (s == NULL || i != STORE_SHA_HEX || s[i] != '\0')
		return err_set(e, -EINVAL,
		    "store: %s: must be 64 lower-case hex digits", field);
	return 0;
}

/* Tenant: 1..STORE_TENANT_MAX of [A-Za-z0-9_-]. */
int
store_tenant_check(const char *s, struct err *e)
{
	size_t n = s != NULL ? strnlen(s, STORE_TENANT_MAX + 1) : 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			n = 0;
	}
	if (n == 0 || n > STORE_TENANT_MAX)
		return err_set(e, -EINVAL, "store: tenant: must be 1 to %d "
		    "characters of A-Z a-z 0-9 _ -", STORE_TENANT_MAX);
	return 0;
}

/*
 * Sandbox id: 1..STORE_ID_MAX of [A-Za-z0-9._:-]. "." and ".." are refused
 * too: ids are keys here, but a later caller may well use one as a path
 * component, and those two would name another directory.
 */
int
store_id_check(const char *field, const char *s, struct err *e)
{
	size_t n = s != NULL ? strnlen(s, STORE_ID_MAX + 1) : 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		    c == ':' || c == '-'))
			n = 0;
	}
	if (n == 0 || n > STORE_ID_MAX)
		return err_set(e, -EINVAL, "store: %s: must be 1 to %d "
		    "characters of A-Z a-z 0-9 . _ : -", field, STORE_ID_MAX);
	if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return err_set(e, -EINVAL, "store: %s: must not be \".\" or "
		    "\"..\"", field);
	return 0;
}

/*
 * Validates labels (NULL means {}) as one JSON object without duplicate
 * keys and writes its compact, key-sorted form to out.
 */
int
store_labels_canon(const char *text, char out[STORE_LABELS_MAX + 1],
    struct err *e)
{
	json_error_t jerr;
	json_t *j = NULL;
	char *dump = NULL;
	int ret = 0;

	if (text == NULL) {
		strcpy(out, "{}");
		return 0;
	}
	if (strnlen(text, STORE_LABELS_MAX + 1) > STORE_LABELS_MAX)
		return err_set(e, -EINVAL, "store: labels: longer than %d "
		    "bytes", STORE_LABELS_MAX);
	j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (j == NULL)
		return err_set(e, -EINVAL, "store: labels: %s", jerr.text);
	if (!json_is_object(j)) {
		ret = err_set(e, -EINVAL, "store: labels: not a JSON object");
		goto out_decref;
	}
	dump = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	if (dump == NULL) {
		ret = err_set(e, -ENOMEM, "store: labels: out of memory");
		goto out_decref;
	}
	/* Compact is never longer than the input, but do not rely on it. */
	if (strlen(dump) > STORE_LABELS_MAX)
		ret = err_set(e, -EINVAL, "store: labels: longer than %d "
		    "bytes", STORE_LABELS_MAX);
	else
		strcpy(out, dump);
	free(dump);
out_decref:
	json_decref(j);
	return ret;
}

int
store_image_check(const char *image, const char *workdir, struct err *e)
{
	size_t n;

	if (image != NULL && (n = strlen(image)) > 0) {
		if (n > STORE_IMAGE_MAX)
			return err_set(e, -EINVAL, "store: image: longer than %d bytes",
			    STORE_IMAGE_MAX);
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)image[i] <= 0x20 || (unsigned char)image[i] >= 0x7f)
				return err_set(e, -EINVAL, "store: image: byte 0x%02x at "
				    "offset %zu", (unsigned char)image[i], i);
	}
	if (workdir == NULL || (n = strlen(workdir)) == 0)
		return 0;
	if (n > STORE_WORKDIR_MAX)
		return err_set(e, -EINVAL, "store: workdir: longer than %d bytes",
		    STORE_WORKDIR_MAX);
	if (workdir[0] != '/' || n == 1 || workdir[n - 1] == '/')
		return err_set(e, -EINVAL, "store: workdir: not a normalised absolute "
		    "path other than /");
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)workdir[i] < 0x20 || (unsigned char)workdir[i] > 0x7e ||
		    workdir[i] == ',' || workdir[i] == ':' || workdir[i] == '\\')
			return err_set(e, -EINVAL, "store: workdir: byte 0x%02x at "
			    "offset %zu", (unsigned char)workdir[i], i);
		/* Each component: not empty, not "." nor "..". */
		if (workdir[i] == '/' && (workdir[i + 1] == '/' ||
		    (workdir[i + 1] == '.' && (workdir[i + 2] == '/' ||
		    workdir[i + 2] == '\0' || (workdir[i + 2] == '.' &&
		    (workdir[i + 3] == '/' || workdir[i + 3] == '\0'))))))
			return err_set(e, -EINVAL, "store: workdir: not a normalised "
			    "absolute path");
	}
	return 0;
}
