/*
 * oci.c - the OCI image documents, parsed with bounds (see oci.h).
 *
 * The media types accepted are the ones the OCI image spec and Docker's
 * image manifest v2 schema 2 define for images: manifests, indexes,
 * configs, and layers that are tar streams, plain or compressed with gzip
 * or zstd. Anything else (schema 1, non-distributable "foreign" layers,
 * artifacts, encrypted layers) is refused by name: sandq would not know
 * how to unpack it, and a layer it cannot read is an image it cannot run.
 *
 * Sections: Escaping and small checks, Descriptors, Layout and index,
 * Manifest, Config.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "../common/xmalloc.h"
#include "oci.h"

#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"

static const char *const LAYER_TYPES[] = {
	"application/vnd.oci.image.layer.v1.tar",
	"application/vnd.oci.image.layer.v1.tar+gzip",
	"application/vnd.oci.image.layer.v1.tar+zstd",
	"application/vnd.docker.image.rootfs.diff.tar",
	"application/vnd.docker.image.rootfs.diff.tar.gzip",
	"application/vnd.docker.image.rootfs.diff.tar.zstd",
};

/*** Escaping and small checks ***/

const char *
oci_shown(const char *s, size_t n, char *buf, size_t size)
{
	size_t o = 0, i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		size_t need = c >= 0x20 && c < 0x7f && c != '\'' && c != '\\' ? 1 : 4;

		/* Room for this unit and, if more follows, the "..." mark. */
		if (o + need + (i + 1 < n ? 3 : 0) + 1 > size) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (need == 1)
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
	}
	buf[o] = '\0';
	return buf;
}

bool
oci_digest_ok(const char *d)
{
	if (d == NULL || strncmp(d, "sha256:", 7) != 0 || strlen(d) != OCI_DIGEST_MAX)
		return false;
	for (size_t i = 7; i < OCI_DIGEST_MAX; i++)
		if (!((d[i] >= '0' && d[i] <= '9') || (d[i] >= 'a' && d[i] <= 'f')))
			return false;
	return true;
}

enum oci_kind
oci_kind_of(const char *mt)
{
	if (mt == NULL)
		return OCI_KIND_OTHER;
	if (strcmp(mt, MT_OCI_INDEX) == 0 || strcmp(mt, MT_DOCKER_LIST) == 0)
		return OCI_KIND_INDEX;
	if (strcmp(mt, MT_OCI_MANIFEST) == 0 || strcmp(mt, MT_DOCKER_MANIFEST) == 0)
		return OCI_KIND_MANIFEST;
	return OCI_KIND_OTHER;
}

bool
oci_layer_type_ok(const char *mt)
{
	for (size_t i = 0; mt != NULL && i < sizeof(LAYER_TYPES) / sizeof(LAYER_TYPES[0]); i++)
		if (strcmp(mt, LAYER_TYPES[i]) == 0)
			return true;
	return false;
}

bool
oci_config_type_ok(const char *mt)
{
	return mt != NULL && (strcmp(mt, MT_OCI_CONFIG) == 0 ||
	    strcmp(mt, MT_DOCKER_CONFIG) == 0);
}

const char *
oci_host_arch(void)
{
	static const struct { const char *uname, *oci; } map[] = {
		{ "x86_64", "amd64" }, { "aarch64", "arm64" }, { "armv7l", "arm" },
		{ "armv6l", "arm" }, { "i686", "386" }, { "i386", "386" },
		{ "ppc64le", "ppc64le" }, { "s390x", "s390x" }, { "riscv64", "riscv64" },
	};
	static struct utsname u;

	if (u.machine[0] == '\0' && uname(&u) < 0)
		return "amd64";
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(u.machine, map[i].uname) == 0)
			return map[i].oci;
	return u.machine;
}

/* Parses buf[0..len) as one JSON object; NULL with e (-EBADMSG) otherwise. */
static json_t *
load(const char *buf, size_t len, const char *what, struct err *e)
{
	json_error_t je;
	json_t *j;

	if (len > OCI_LAYOUT_INDEX_MAX) {
		err_set(e, -EBADMSG, "%s: larger than %u bytes", what, OCI_LAYOUT_INDEX_MAX);
		return NULL;
	}
	/* Duplicate keys refused: two readers must never see two documents. */
	j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (j == NULL) {
		char shown[96];

		err_set(e, -EBADMSG, "%s: not JSON (%s)", what,
		    oci_shown(je.text, strlen(je.text), shown, sizeof(shown)));
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		err_set(e, -EBADMSG, "%s: not a JSON object", what);
		return NULL;
	}
	return j;
}

/*** Descriptors ***/

/*
 * The descriptor object j (named where, e.g. "layers[2]") into d. A digest
 * of another algorithm is -ENOTSUP, a malformed one -EBADMSG.
 */
static int
desc_parse(const json_t *j, const char *where, struct oci_desc *d, struct err *e)
{
	const json_t *mt = json_object_get(j, "mediaType");
	const json_t *dg = json_object_get(j, "digest");
	const json_t *sz = json_object_get(j, "size");
	char shown[96];

	memset(d, 0, sizeof(*d));
	if (!json_is_object(j))
		return err_set(e, -EBADMSG, "%s: not an object", where);
	if (!json_is_string(mt) || json_string_length(mt) > OCI_MEDIA_TYPE_MAX ||
	    json_string_length(mt) == 0)
		return err_set(e, -EBADMSG, "%s: no mediaType", where);
	if (!json_is_string(dg))
		return err_set(e, -EBADMSG, "%s: no digest", where);
	if (!oci_digest_ok(json_string_value(dg))) {
		const char *s = json_string_value(dg);
		const char *colon = strchr(s, ':');

		oci_shown(s, json_string_length(dg), shown, sizeof(shown));
		if (colon != NULL && strncmp(s, "sha256:", 7) != 0)
			return err_set(e, -ENOTSUP, "%s: digest '%s': only sha256 is supported",
			    where, shown);
		return err_set(e, -EBADMSG, "%s: malformed digest '%s'", where, shown);
	}
	if (!json_is_integer(sz) || json_integer_value(sz) < 0 ||
	    (uint64_t)json_integer_value(sz) > OCI_BLOB_SIZE_MAX)
		return err_set(e, -EBADMSG, "%s: no size, or out of range", where);
	memcpy(d->media_type, json_string_value(mt), json_string_length(mt) + 1);
	memcpy(d->digest, json_string_value(dg), OCI_DIGEST_MAX + 1);
	d->size = (uint64_t)json_integer_value(sz);
	return 0;
}

/* The "manifests" array of an index or layout index.json, or NULL with e. */
static const json_t *
manifests_of(const json_t *j, const char *what, struct err *e)
{
	const json_t *v = json_object_get(j, "schemaVersion");
	const json_t *ms = json_object_get(j, "manifests");

	if (!json_is_integer(v) || json_integer_value(v) != 2) {
		err_set(e, -EBADMSG, "%s: schemaVersion is not 2", what);
		return NULL;
	}
	if (!json_is_array(ms)) {
		err_set(e, -EBADMSG, "%s: no manifests array", what);
		return NULL;
	}
	return ms;
}

/*** Layout and index ***/

int
oci_layout_find(const char *buf, size_t len, const char *name, struct oci_desc *d,
    struct err *e)
{
	json_t *j = load(buf, len, "index.json", e);
	const json_t *ms, *m;
	size_t i;
	int rc = -ENOENT, found = 0;

	if (j == NULL)
		return -EBADMSG;
	if ((ms = manifests_of(j, "index.json", e)) == NULL) {
		json_decref(j);
		return -EBADMSG;
	}
	json_array_foreach(ms, i, m) {
		const json_t *ref = json_object_get(json_object_get(m, "annotations"),
		    OCI_REF_NAME);
		char where[48];

		if (!json_is_string(ref) || strcmp(json_string_value(ref), name) != 0)
			continue;
		snprintf(where, sizeof(where), "index.json manifests[%zu]", i);
		if ((rc = desc_parse(m, where, d, e)) < 0)
			break;
		found = 1;
	}
	json_decref(j);
	if (rc == -ENOENT && !found)
		return err_set(e, -ENOENT, "index.json names no image '%s'", name);
	return found && rc >= 0 ? 0 : rc;
}

int
oci_index_pick(const char *buf, size_t len, const char *os, const char *arch,
    struct oci_desc *d, struct err *e)
{
	json_t *j = load(buf, len, "image index", e);
	const json_t *ms, *m;
	char have[160] = "";
	size_t i, o = 0;
	int rc = -ENOENT;

	if (j == NULL)
		return -EBADMSG;
	if ((ms = manifests_of(j, "image index", e)) == NULL) {
		json_decref(j);
		return -EBADMSG;
	}
	json_array_foreach(ms, i, m) {
		const json_t *p = json_object_get(m, "platform");
		const char *pos = json_string_value(json_object_get(p, "os"));
		const char *parch = json_string_value(json_object_get(p, "architecture"));
		const char *pvar = json_string_value(json_object_get(p, "variant"));
		char where[48], s1[40], s2[40], s3[40];

		if (pos == NULL || parch == NULL)
			continue;	/* not an image for any platform (an attestation) */
		if (strcmp(pos, os) == 0 && strcmp(parch, arch) == 0) {
			const json_t *mt = json_object_get(m, "mediaType");

			if (oci_kind_of(json_string_value(mt)) != OCI_KIND_MANIFEST)
				continue;	/* a nested index: not followed */
			snprintf(where, sizeof(where), "image index manifests[%zu]", i);
			rc = desc_parse(m, where, d, e);
			break;
		}
		/* Each platform it has, for the error; cut when the buffer is full. */
		if (o + 1 < sizeof(have))
			o += (size_t)snprintf(have + o, sizeof(have) - o, "%s%s/%s%s%s",
			    o ? ", " : "", oci_shown(pos, strlen(pos), s1, sizeof(s1)),
			    oci_shown(parch, strlen(parch), s2, sizeof(s2)), pvar ? "/" : "",
			    pvar ? oci_shown(pvar, strlen(pvar), s3, sizeof(s3)) : "");
	}
	json_decref(j);
	if (rc == -ENOENT) {
		if (o >= sizeof(have))
			memcpy(have + sizeof(have) - 4, "...", 4);
		return err_set(e, -ENOENT, "no %s/%s image in its index; it has: %s", os,
		    arch, have[0] ? have : "no platforms");
	}
	return rc;
}

/*** Manifest ***/

void
oci_manifest_free(struct oci_manifest *m)
{
	if (m == NULL)
		return;
	free(m->layers);
	m->layers = NULL;
	m->nlayers = 0;
}

int
oci_manifest_parse(const char *buf, size_t len, const char *media_type,
    struct oci_manifest *m, struct err *e)
{
	json_t *j;
	const json_t *v, *mt, *layers, *l;
	char shown[96];
	size_t i;
	int rc;

	memset(m, 0, sizeof(*m));
	if (oci_kind_of(media_type) != OCI_KIND_MANIFEST)
		return err_set(e, -ENOTSUP, "manifest media type '%s' is not an image manifest",
		    oci_shown(media_type, strlen(media_type), shown, sizeof(shown)));
	if ((j = load(buf, len, "manifest", e)) == NULL)
		return -EBADMSG;
	v = json_object_get(j, "schemaVersion");
	mt = json_object_get(j, "mediaType");
	layers = json_object_get(j, "layers");
	rc = -EBADMSG;
	if (!json_is_integer(v) || json_integer_value(v) != 2) {
		err_set(e, rc, "manifest: schemaVersion is not 2");
		goto out;
	}
	/* The document must not claim another type than its descriptor did. */
	if (mt != NULL && (!json_is_string(mt) ||
	    strcmp(json_string_value(mt), media_type) != 0)) {
		err_set(e, rc, "manifest: its mediaType is not the one its descriptor gives");
		goto out;
	}
	if ((rc = desc_parse(json_object_get(j, "config"), "manifest config", &m->config, e)) < 0)
		goto out;
	rc = -ENOTSUP;
	if (!oci_config_type_ok(m->config.media_type)) {
		err_set(e, rc, "config media type '%s' is not an image config",
		    oci_shown(m->config.media_type, strlen(m->config.media_type), shown,
		    sizeof(shown)));
		goto out;
	}
	if (m->config.size > OCI_JSON_MAX) {
		err_set(e, rc = -EFBIG, "config larger than %u bytes", OCI_JSON_MAX);
		goto out;
	}
	rc = -EBADMSG;
	if (!json_is_array(layers) || json_array_size(layers) == 0) {
		err_set(e, rc, "manifest: no layers");
		goto out;
	}
	if (json_array_size(layers) > OCI_LAYERS_MAX) {
		err_set(e, rc = -E2BIG, "manifest: more than %d layers", OCI_LAYERS_MAX);
		goto out;
	}
	m->layers = xcalloc(json_array_size(layers), sizeof(*m->layers));
	json_array_foreach(layers, i, l) {
		char where[32];

		snprintf(where, sizeof(where), "layers[%zu]", i);
		if ((rc = desc_parse(l, where, &m->layers[i], e)) < 0)
			goto out;
		m->nlayers = i + 1;
		if (!oci_layer_type_ok(m->layers[i].media_type)) {
			err_set(e, rc = -ENOTSUP, "layer %zu: media type '%s' is not a tar layer sandq unpacks",
			    i + 1, oci_shown(m->layers[i].media_type,
			    strlen(m->layers[i].media_type), shown, sizeof(shown)));
			goto out;
		}
	}
	rc = 0;
out:
	json_decref(j);
	if (rc < 0)
		oci_manifest_free(m);
	return rc;
}

/*** Config ***/

static void
strings_free(char **v, size_t n)
{
	for (size_t i = 0; v != NULL && i < n; i++)
		free(v[i]);
	free(v);
}

void
oci_config_free(struct oci_config *c)
{
	if (c == NULL)
		return;
	strings_free(c->env, c->nenv);
	strings_free(c->entrypoint, c->nentrypoint);
	strings_free(c->cmd, c->ncmd);
	free(c->working_dir);
	free(c->user);
	free(c->diff_ids);
	memset(c, 0, sizeof(*c));
}

/*
 * j (absent or null: *out stays NULL) as an array of strings into *out,
 * *n. Returns 0 or -EBADMSG with e naming field.
 */
static int
strings_get(const json_t *j, const char *field, char ***out, size_t *n, struct err *e)
{
	const json_t *s;
	size_t i;

	if (j == NULL || json_is_null(j))
		return 0;
	if (!json_is_array(j) || json_array_size(j) > OCI_STRINGS_MAX)
		return err_set(e, -EBADMSG, "config %s: not an array of at most %d strings",
		    field, OCI_STRINGS_MAX);
	*out = xcalloc(json_array_size(j) + 1, sizeof(**out));
	json_array_foreach(j, i, s) {
		if (!json_is_string(s))
			return err_set(e, -EBADMSG, "config %s[%zu]: not a string", field, i);
		(*out)[i] = xmemdup0(json_string_value(s), json_string_length(s));
		*n = i + 1;
	}
	return 0;
}

/* j (absent or null: NULL) as a string into *out; -EBADMSG naming field. */
static int
string_get(const json_t *j, const char *field, char **out, struct err *e)
{
	if (j == NULL || json_is_null(j))
		return 0;
	if (!json_is_string(j))
		return err_set(e, -EBADMSG, "config %s: not a string", field);
	*out = xmemdup0(json_string_value(j), json_string_length(j));
	return 0;
}

/* A platform name (os, architecture) into out; -EBADMSG naming field. */
static int
platform_get(const json_t *j, const char *field, char out[OCI_PLATFORM_MAX + 1],
    struct err *e)
{
	if (!json_is_string(j) || json_string_length(j) == 0 ||
	    json_string_length(j) > OCI_PLATFORM_MAX)
		return err_set(e, -EBADMSG, "config: no %s", field);
	memcpy(out, json_string_value(j), json_string_length(j) + 1);
	return 0;
}

int
oci_config_parse(const char *buf, size_t len, struct oci_config *c, struct err *e)
{
	json_t *j;
	const json_t *cfg, *rootfs, *ids, *id;
	size_t i;
	int rc;

	memset(c, 0, sizeof(*c));
	if (len > OCI_JSON_MAX)
		return err_set(e, -EFBIG, "config larger than %u bytes", OCI_JSON_MAX);
	if ((j = load(buf, len, "config", e)) == NULL)
		return -EBADMSG;
	cfg = json_object_get(j, "config");
	rootfs = json_object_get(j, "rootfs");
	ids = json_object_get(rootfs, "diff_ids");
	if ((rc = platform_get(json_object_get(j, "os"), "os", c->os, e)) < 0 ||
	    (rc = platform_get(json_object_get(j, "architecture"), "architecture",
	    c->arch, e)) < 0)
		goto out;
	rc = -EBADMSG;
	if (cfg != NULL && !json_is_null(cfg) && !json_is_object(cfg)) {
		err_set(e, rc, "config: 'config' is not an object");
		goto out;
	}
	if ((rc = strings_get(json_object_get(cfg, "Env"), "Env", &c->env, &c->nenv, e)) < 0 ||
	    (rc = strings_get(json_object_get(cfg, "Entrypoint"), "Entrypoint",
	    &c->entrypoint, &c->nentrypoint, e)) < 0 ||
	    (rc = strings_get(json_object_get(cfg, "Cmd"), "Cmd", &c->cmd, &c->ncmd, e)) < 0 ||
	    (rc = string_get(json_object_get(cfg, "WorkingDir"), "WorkingDir",
	    &c->working_dir, e)) < 0 ||
	    (rc = string_get(json_object_get(cfg, "User"), "User", &c->user, e)) < 0)
		goto out;
	rc = -EBADMSG;
	if (!json_is_object(rootfs) || !json_is_string(json_object_get(rootfs, "type")) ||
	    strcmp(json_string_value(json_object_get(rootfs, "type")), "layers") != 0 ||
	    !json_is_array(ids) || json_array_size(ids) > OCI_LAYERS_MAX) {
		err_set(e, rc, "config: rootfs is not {type: layers, diff_ids: [...]}");
		goto out;
	}
	c->diff_ids = xcalloc(json_array_size(ids) + 1, sizeof(*c->diff_ids));
	json_array_foreach(ids, i, id) {
		if (!oci_digest_ok(json_string_value(id))) {
			err_set(e, rc, "config: rootfs.diff_ids[%zu] is not a sha256 digest", i);
			goto out;
		}
		memcpy(c->diff_ids[i], json_string_value(id), OCI_DIGEST_MAX + 1);
		c->ndiff_ids = i + 1;
	}
	rc = 0;
out:
	json_decref(j);
	if (rc < 0)
		oci_config_free(c);
	return rc;
}
