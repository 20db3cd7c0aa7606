/*
 * ref.c - image references and image_sources patterns: parsing, canonical
 * text, skopeo's source string, matching. Pure (ref.h states the forms).
 *
 * DESIGN. A reference is a tenant's text that decides where sandqd fetches
 * from, so it is read strictly and made canonical before anything compares
 * it: the allowlist (img_source_allowed) must see what the fetcher will
 * fetch, never a spelling the fetcher reads otherwise. Three places where
 * skopeo (containers/image) reads a reference differently from its text are
 * closed here:
 *   - a registry host without a '.' or a port that is not localhost is read
 *     by Docker's grammar as the first folder of a Docker Hub repository
 *     ("docker://registry/x" fetches docker.io/registry/x): refused;
 *   - index.docker.io is docker.io, and docker.io's one-component
 *     repositories are under library/ (alpine is library/alpine): made so;
 *   - oci: and the archives split PATH from what follows at the first ':':
 *     a ':' in a path is refused, so PATH is the whole path.
 * Every byte must be printable ASCII without space; ',' is refused in
 * paths (image_sources lists are comma-separated, so no pattern could
 * allow one) and '*' everywhere but where a pattern ends.
 *
 * Sections: messages, the parts (host, repository, tag, digest, path,
 * name), references, patterns.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ref.h"

#define DOCKER_PREFIX "docker://"
#define OCI_PREFIX "oci:"
#define OCI_ARCHIVE_PREFIX "oci-archive:"
#define DOCKER_ARCHIVE_PREFIX "docker-archive:"

/*** Messages ***/

#define SHOWN_MAX 48			/* input bytes shown in a message */
#define SHOWN_BUF (SHOWN_MAX * 4 + 4)	/* each as \xHH at worst, "..." */

/*
 * p[0..n) for a message, in buf: printable ASCII as it is but for '\\' and
 * '\'', every other byte as \xHH, at most SHOWN_MAX bytes and "..." after.
 */
static const char *
shown(const char *p, size_t n, char buf[SHOWN_BUF])
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (size_t i = 0; i < n && i < SHOWN_MAX; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
			buf[o++] = (char)c;
			continue;
		}
		buf[o++] = '\\';
		buf[o++] = 'x';
		buf[o++] = hex[c >> 4];
		buf[o++] = hex[c & 15];
	}
	if (n > SHOWN_MAX) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
	return buf;
}

/*
 * Checks s's length and bytes: 1..IMG_REF_MAX bytes of printable ASCII
 * without space. Sets *len. what is "reference" or "pattern".
 */
static int
text_check(const char *s, const char *what, size_t *len, struct err *e)
{
	size_t n = strnlen(s, IMG_REF_MAX + 1);

	*len = n;
	if (n == 0)
		return err_set(e, -EINVAL, "empty %s", what);
	if (n > IMG_REF_MAX)
		return err_set(e, -EINVAL, "%s longer than %d bytes", what, IMG_REF_MAX);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= 0x20 || c >= 0x7f)
			return err_set(e, -EINVAL, "byte 0x%02x at offset %zu: a %s is "
			    "printable ASCII without spaces", c, i, what);
	}
	return 0;
}

/*** The parts ***/

static bool
lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool
is_alnum(char c)
{
	return lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/*
 * Whether p[0..n) is a repository component of the distribution spec,
 * [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*, or with partial a prefix of one (it
 * may then be empty or end with a separator).
 */
static bool
component_ok(const char *p, size_t n, bool partial)
{
	size_t i = 0;

	if (n == 0)
		return partial;
	if (!lower_alnum(p[0]))
		return false;
	while (i < n) {
		while (i < n && lower_alnum(p[i]))
			i++;
		if (i == n)
			return true;
		if (p[i] == '.') {
			i++;
		} else if (p[i] == '_') {
			i++;
			if (i < n && p[i] == '_')
				i++;
		} else if (p[i] == '-') {
			while (i < n && p[i] == '-')
				i++;
		} else {
			return false;
		}
		if (i == n)
			return partial;
		if (!lower_alnum(p[i]))
			return false;
	}
	return true;
}

/*
 * Checks a repository path p[0..n) and copies it to out: one or more
 * components joined by '/'. With wild, p is the part of a pattern before
 * its '*': it may be empty, and its last component may be a prefix of one
 * (empty when p ends with '/').
 */
static int
repo_parse(const char *p, size_t n, bool wild, char out[IMG_REPO_MAX + 1],
    struct err *e)
{
	char b[SHOWN_BUF];
	size_t start = 0;

	if (n == 0 && !wild)
		return err_set(e, -EINVAL, "no repository after the host");
	if (n > IMG_REPO_MAX)
		return err_set(e, -EINVAL, "repository longer than %d bytes",
		    IMG_REPO_MAX);
	for (size_t i = 0; i <= n; i++) {
		bool last;

		if (i < n && p[i] != '/')
			continue;
		last = i == n;
		if (i == start && !(wild && last))
			return err_set(e, -EINVAL, "repository '%s': an empty component",
			    shown(p, n, b));
		if (!component_ok(p + start, i - start, wild && last))
			return err_set(e, -EINVAL, "repository component '%s': expected "
			    "lower-case letters and digits, separated by '.', '_', '__' "
			    "or '-'", shown(p + start, i - start, b));
		start = i + 1;
	}
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* Whether p[0..n) is a tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}. */
static int
tag_parse(const char *p, size_t n, char out[IMG_TAG_MAX + 1], struct err *e)
{
	char b[SHOWN_BUF];
	bool ok = n >= 1 && n <= IMG_TAG_MAX && (is_alnum(p[0]) || p[0] == '_');

	for (size_t i = 1; ok && i < n; i++)
		ok = is_alnum(p[i]) || p[i] == '_' || p[i] == '.' || p[i] == '-';
	if (!ok)
		return err_set(e, -EINVAL, "tag '%s': expected 1..%d bytes of "
		    "[A-Za-z0-9._-], not starting with '.' or '-'", shown(p, n, b),
		    IMG_TAG_MAX);
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* Whether p[0..n) is "sha256:" and 64 lower-case hex digits. */
static int
digest_parse(const char *p, size_t n, char out[IMG_DIGEST_LEN + 1], struct err *e)
{
	char b[SHOWN_BUF];
	bool ok = n == IMG_DIGEST_LEN && memcmp(p, "sha256:", 7) == 0;

	for (size_t i = 7; ok && i < n; i++)
		ok = (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
	if (!ok)
		return err_set(e, -EINVAL, "digest '%s': expected sha256: and 64 "
		    "lower-case hex digits", shown(p, n, b));
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* A port: 1..65535, decimal, no leading zero. */
static int
port_parse(const char *p, size_t n, uint16_t *port, struct err *e)
{
	char b[SHOWN_BUF];
	unsigned long v = 0;
	bool ok = n >= 1 && n <= 5 && p[0] != '0';

	for (size_t i = 0; ok && i < n; i++) {
		ok = p[i] >= '0' && p[i] <= '9';
		v = v * 10 + (unsigned long)(p[i] - '0');
	}
	if (!ok || v > 65535)
		return err_set(e, -EINVAL, "port '%s': expected 1..65535",
		    shown(p, n, b));
	*port = (uint16_t)v;
	return 0;
}

/*
 * Whether p[0..n) is a DNS name (labels of 1..63 bytes of [A-Za-z0-9-],
 * not starting or ending with '-'), written lower-case into out; a name
 * made of digits and dots only must be an IPv4 address.
 */
static int
dns_parse(const char *p, size_t n, char out[IMG_HOST_MAX + 1], struct err *e)
{
	char b[SHOWN_BUF];
	size_t start = 0;
	bool digits = true;

	if (n == 0)
		return err_set(e, -EINVAL, "no registry host");
	if (n > IMG_HOST_MAX)
		return err_set(e, -EINVAL, "registry host longer than %d bytes",
		    IMG_HOST_MAX);
	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '.') {
			if (!is_alnum(p[i]) && p[i] != '-')
				goto bad;
			digits &= p[i] >= '0' && p[i] <= '9';
			continue;
		}
		if (i == start || i - start > 63 || p[start] == '-' || p[i - 1] == '-')
			goto bad;
		start = i + 1;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = p[i] >= 'A' && p[i] <= 'Z' ? (char)(p[i] - 'A' + 'a') : p[i];
	out[n] = '\0';
	if (digits) {
		struct in_addr a;

		if (inet_pton(AF_INET, out, &a) != 1)
			return err_set(e, -EINVAL, "registry host '%s': not an IPv4 "
			    "address", shown(p, n, b));
	}
	return 0;
bad:
	return err_set(e, -EINVAL, "registry host '%s': expected a DNS name, an "
	    "IPv4 address or [an IPv6 address]", shown(p, n, b));
}

/*
 * Parses "HOST[:PORT]" (p[0..n)) into host and *port (0: none). An IPv6
 * address keeps its brackets and takes inet_ntop()'s spelling.
 */
static int
hostport_parse(const char *p, size_t n, char host[IMG_HOST_MAX + 1],
    uint16_t *port, struct err *e)
{
	char b[SHOWN_BUF];
	const char *rest;
	int rc;

	*port = 0;
	if (n > 0 && p[0] == '[') {
		const char *close = memchr(p, ']', n);
		char in[INET6_ADDRSTRLEN], canon[INET6_ADDRSTRLEN];
		struct in6_addr a;
		size_t len;

		len = close != NULL ? (size_t)(close - p - 1) : 0;
		if (close == NULL || len == 0 || len >= sizeof(in))
			return err_set(e, -EINVAL, "registry host '%s': expected "
			    "[an IPv6 address]", shown(p, n, b));
		memcpy(in, p + 1, len);
		in[len] = '\0';
		if (inet_pton(AF_INET6, in, &a) != 1 ||
		    inet_ntop(AF_INET6, &a, canon, sizeof(canon)) == NULL)
			return err_set(e, -EINVAL, "registry host '%s': not an IPv6 "
			    "address", shown(p, n, b));
		snprintf(host, IMG_HOST_MAX + 1, "[%s]", canon);
		rest = close + 1;
	} else {
		const char *colon = memchr(p, ':', n);

		rest = colon != NULL ? colon : p + n;
		if ((rc = dns_parse(p, (size_t)(rest - p), host, e)) < 0)
			return rc;
	}
	if (rest < p + n) {
		if (*rest != ':')
			return err_set(e, -EINVAL, "'%s' after the registry host: "
			    "expected :PORT or /", shown(rest, (size_t)(p + n - rest), b));
		if ((rc = port_parse(rest + 1, (size_t)(p + n - rest - 1), port, e)) < 0)
			return rc;
	}
	/*
	 * Docker's grammar, which skopeo follows, reads a first component
	 * with no '.' or ':' that is not localhost as a Docker Hub path.
	 */
	if (*port == 0 && host[0] != '[' && strchr(host, '.') == NULL &&
	    strcmp(host, "localhost") != 0)
		return err_set(e, -EINVAL, "registry host '%s': needs a '.', a port "
		    "or to be localhost (skopeo would read it as a folder of Docker "
		    "Hub)", shown(host, strlen(host), b));
	return 0;
}

/*
 * Docker's own aliases: index.docker.io is docker.io, and a repository of
 * docker.io with one component is under library/ (a wild prefix too,
 * unless it is empty: "*" is every repository).
 */
static int
docker_canon(char host[IMG_HOST_MAX + 1], uint16_t port, char repo[IMG_REPO_MAX + 1],
    struct err *e)
{
	size_t n = strlen(repo);

	if (strcmp(host, "index.docker.io") == 0)
		snprintf(host, IMG_HOST_MAX + 1, "docker.io");
	if (strcmp(host, "docker.io") != 0 || port != 0 || n == 0 ||
	    strchr(repo, '/') != NULL)
		return 0;
	if (n + 8 > IMG_REPO_MAX)
		return err_set(e, -EINVAL, "repository longer than %d bytes as "
		    "library/...", IMG_REPO_MAX);
	memmove(repo + 8, repo, n + 1);
	memcpy(repo, "library/", 8);
	return 0;
}

/*
 * Checks an absolute path p[0..n) and writes it normalised into out: empty
 * and "." components dropped, ".." refused. With wild_ok a last component
 * "*" sets *wild and is left out (out is then the folder, "" for the root).
 */
static int
path_parse(const char *p, size_t n, bool wild_ok, char out[IMG_REF_MAX + 1],
    bool *wild, struct err *e)
{
	char b[SHOWN_BUF];
	size_t o = 0, start;

	if (wild != NULL)
		*wild = false;
	if (n == 0 || p[0] != '/')
		return err_set(e, -EINVAL, "path '%s': must be absolute", shown(p, n, b));
	for (size_t i = 1; i <= n; i = start + 1) {
		const char *c = p + i;
		size_t len;

		start = i;
		while (start < n && p[start] != '/')
			start++;
		len = (size_t)(p + start - c);
		if (len == 0 || (len == 1 && c[0] == '.'))
			continue;
		if (len == 2 && c[0] == '.' && c[1] == '.')
			return err_set(e, -EINVAL, "path '%s': a '..' component",
			    shown(p, n, b));
		if (wild_ok && len == 1 && c[0] == '*' && start == n) {
			*wild = true;
			break;
		}
		if (memchr(c, '*', len) != NULL)
			return err_set(e, -EINVAL, "path '%s': a '*' %s", shown(p, n, b),
			    wild_ok ? "may only be the last component" : "in a reference");
		if (memchr(c, ',', len) != NULL)
			return err_set(e, -EINVAL, "path '%s': a ',' (image_sources "
			    "lists are comma-separated)", shown(p, n, b));
		if (len > IMG_COMPONENT_MAX)
			return err_set(e, -EINVAL, "path '%s': a component longer than "
			    "%d bytes", shown(p, n, b), IMG_COMPONENT_MAX);
		out[o++] = '/';
		memcpy(out + o, c, len);
		o += len;
	}
	out[o] = '\0';
	if (o == 0 && (wild == NULL || !*wild))
		return err_set(e, -EINVAL, "path '%s': names the root folder",
		    shown(p, n, b));
	return 0;
}

/* Names a reference or a pattern cannot take: the transports' own. */
static const char *const reserved[] = {
	"host", "docker", "oci", "oci-archive", "docker-archive",
};

/* NAME[:TAG]: NAME is [a-z0-9][a-z0-9._-]{0,63}. */
static int
name_parse(const char *s, size_t n, struct img_ref *r, struct err *e)
{
	char b[SHOWN_BUF];
	size_t len = strcspn(s, ":");
	bool ok = len >= 1 && len <= IMG_NAME_MAX && lower_alnum(s[0]);

	for (size_t i = 1; ok && i < len; i++)
		ok = lower_alnum(s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-';
	if (!ok && memchr(s, '/', len) != NULL)
		return err_set(e, -EINVAL, "'%s' is not an image name; an image of a "
		    "registry is docker://HOST[:PORT]/REPO", shown(s, len, b));
	if (!ok)
		return err_set(e, -EINVAL, "image name '%s': expected 1..%d bytes of "
		    "[a-z0-9._-] starting with a letter or digit", shown(s, len, b),
		    IMG_NAME_MAX);
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		if (strlen(reserved[i]) == len && memcmp(reserved[i], s, len) == 0)
			return err_set(e, -EINVAL, "'%s' names a transport, not an image",
			    reserved[i]);
	memcpy(r->name, s, len);
	r->name[len] = '\0';
	if (len < n)
		return tag_parse(s + len + 1, n - len - 1, r->tag, e);
	return 0;
}

/*** References ***/

/* After "docker://": HOST[:PORT]/REPO[:TAG|@DIGEST]. */
static int
docker_parse(const char *p, struct img_ref *r, struct err *e)
{
	const char *slash = strchr(p, '/'), *rest, *t;
	size_t rl;
	int rc;

	if (slash == NULL)
		return err_set(e, -EINVAL, "expected docker://HOST[:PORT]/REPO: no "
		    "repository after the host");
	if ((rc = hostport_parse(p, (size_t)(slash - p), r->host, &r->port, e)) < 0)
		return rc;
	rest = slash + 1;
	rl = strcspn(rest, ":@");
	if ((rc = repo_parse(rest, rl, false, r->repo, e)) < 0 ||
	    (rc = docker_canon(r->host, r->port, r->repo, e)) < 0)
		return rc;
	t = rest + rl;
	if (*t == ':' && strchr(t, '@') != NULL)
		return err_set(e, -EINVAL, "a tag and a digest: give one of them");
	if (*t == ':')
		return tag_parse(t + 1, strlen(t + 1), r->tag, e);
	if (*t == '@')
		return digest_parse(t + 1, strlen(t + 1), r->digest, e);
	memcpy(r->tag, IMG_DEFAULT_TAG, sizeof(IMG_DEFAULT_TAG));
	return 0;
}

/*
 * After "oci:" and the archives' prefixes: PATH, and for oci ":TAG".
 * containers/image splits at the first ':', so PATH holds none.
 */
static int
file_parse(const char *p, struct img_ref *r, struct err *e)
{
	const char *colon = strchr(p, ':');
	size_t n = colon != NULL ? (size_t)(colon - p) : strlen(p);
	int rc;

	if ((rc = path_parse(p, n, false, r->path, NULL, e)) < 0)
		return rc;
	if (colon == NULL)
		return 0;
	if (r->kind != IMG_OCI)
		return err_set(e, -EINVAL, "a ':' after the path: %s takes no tag, "
		    "and a path holds no ':'", img_kind_name(r->kind));
	return tag_parse(colon + 1, strlen(colon + 1), r->tag, e);
}

static bool
has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

int
img_ref_parse(const char *s, struct img_ref *r, struct err *e)
{
	char canon[IMG_REF_MAX + 1], b[SHOWN_BUF];
	const char *colon;
	size_t n;
	int rc;

	memset(r, 0, sizeof(*r));
	if ((rc = text_check(s, "reference", &n, e)) < 0)
		goto out_zero;
	if (strcmp(s, "host") == 0) {
		r->kind = IMG_HOST;
		return 0;
	}
	if (has_prefix(s, DOCKER_PREFIX)) {
		r->kind = IMG_DOCKER;
		rc = docker_parse(s + strlen(DOCKER_PREFIX), r, e);
	} else if (has_prefix(s, OCI_PREFIX)) {
		r->kind = IMG_OCI;
		rc = file_parse(s + strlen(OCI_PREFIX), r, e);
	} else if (has_prefix(s, OCI_ARCHIVE_PREFIX)) {
		r->kind = IMG_OCI_ARCHIVE;
		rc = file_parse(s + strlen(OCI_ARCHIVE_PREFIX), r, e);
	} else if (has_prefix(s, DOCKER_ARCHIVE_PREFIX)) {
		r->kind = IMG_DOCKER_ARCHIVE;
		rc = file_parse(s + strlen(DOCKER_ARCHIVE_PREFIX), r, e);
	} else if (has_prefix(s, "docker:")) {
		rc = err_set(e, -EINVAL, "expected docker://HOST[:PORT]/REPO");
	} else if (has_prefix(s, "host:")) {
		rc = err_set(e, -EINVAL, "'host' takes no tag");
	} else if ((colon = strchr(s, ':')) != NULL && colon[1] == '/') {
		rc = err_set(e, -EINVAL, "unknown transport '%s:' (expected host, "
		    "docker://, oci:, oci-archive:, docker-archive: or an image "
		    "name)", shown(s, (size_t)(colon - s), b));
	} else {
		r->kind = IMG_NAME;
		rc = name_parse(s, n, r, e);
	}
	if (rc < 0)
		goto out_zero;
	/* Made canonical, it must still be a reference (library/, latest). */
	if (img_ref_str(r, canon, sizeof(canon)) < 0) {
		rc = err_set(e, -EINVAL, "longer than %d bytes in canonical form",
		    IMG_REF_MAX);
		goto out_zero;
	}
	return 0;

out_zero:
	memset(r, 0, sizeof(*r));
	return rc;
}

const char *
img_kind_name(enum img_kind k)
{
	switch (k) {
	case IMG_HOST:
		return "host";
	case IMG_DOCKER:
		return "docker";
	case IMG_OCI:
		return "oci";
	case IMG_OCI_ARCHIVE:
		return "oci-archive";
	case IMG_DOCKER_ARCHIVE:
		return "docker-archive";
	case IMG_NAME:
		return "name";
	}
	return "?";
}

/* snprintf()'s count as ref.h's contract: the length or -ENAMETOOLONG. */
static int
fitted(int n, size_t size)
{
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

int
img_ref_str(const struct img_ref *r, char *buf, size_t size)
{
	char port[8] = "";

	switch (r->kind) {
	case IMG_HOST:
		return fitted(snprintf(buf, size, "host"), size);
	case IMG_DOCKER:
		if (r->port != 0)
			snprintf(port, sizeof(port), ":%u", (unsigned)r->port);
		return fitted(snprintf(buf, size, DOCKER_PREFIX "%s%s/%s%s%s", r->host,
		    port, r->repo, r->digest[0] ? "@" : ":",
		    r->digest[0] ? r->digest : r->tag), size);
	case IMG_OCI:
		return fitted(snprintf(buf, size, OCI_PREFIX "%s%s%s", r->path,
		    r->tag[0] ? ":" : "", r->tag), size);
	case IMG_OCI_ARCHIVE:
		return fitted(snprintf(buf, size, OCI_ARCHIVE_PREFIX "%s", r->path), size);
	case IMG_DOCKER_ARCHIVE:
		return fitted(snprintf(buf, size, DOCKER_ARCHIVE_PREFIX "%s", r->path),
		    size);
	case IMG_NAME:
		return fitted(snprintf(buf, size, "%s%s%s", r->name, r->tag[0] ? ":" : "",
		    r->tag), size);
	}
	return -EINVAL;
}

/*
 * skopeo's transports take the canonical text as it is: docker:// with an
 * explicit host (never Docker's defaults, which img_ref_parse() closed),
 * oci: with its tag, the archives with their path alone.
 */
int
img_name_key(const struct img_ref *r, char *buf, size_t size)
{
	if (r->kind != IMG_NAME)
		return -EINVAL;
	return fitted(snprintf(buf, size, "%s:%s", r->name, r->tag[0] ? r->tag :
	    "latest"), size);
}

int
img_ref_source(const struct img_ref *r, char *buf, size_t size)
{
	if (r->kind == IMG_HOST || r->kind == IMG_NAME)
		return -EINVAL;
	return img_ref_str(r, buf, size);
}

/*** Patterns ***/

int
img_pattern_parse(const char *s, struct img_pattern *p, struct err *e)
{
	static const struct {
		const char *prefix;
		enum img_kind kind;
	} files[] = {
		{ OCI_PREFIX, IMG_OCI },
		{ OCI_ARCHIVE_PREFIX, IMG_OCI_ARCHIVE },
		{ DOCKER_ARCHIVE_PREFIX, IMG_DOCKER_ARCHIVE },
	};
	size_t n;
	int rc;

	memset(p, 0, sizeof(*p));
	if ((rc = text_check(s, "pattern", &n, e)) < 0)
		return rc;
	if (strcmp(s, "host") == 0) {
		p->kind = IMG_HOST;
		return 0;
	}
	if (has_prefix(s, DOCKER_PREFIX)) {
		const char *h = s + strlen(DOCKER_PREFIX);
		const char *slash = strchr(h, '/'), *star;
		size_t rl;

		p->kind = IMG_DOCKER;
		if (slash == NULL)
			return err_set(e, -EINVAL, "expected docker://HOST[:PORT]/REPO "
			    "or docker://HOST[:PORT]/PREFIX*");
		if ((rc = hostport_parse(h, (size_t)(slash - h), p->host, &p->port, e)) < 0)
			return rc;
		if (strpbrk(slash + 1, ":@") != NULL)
			return err_set(e, -EINVAL, "a pattern names no tag or digest");
		star = strchr(slash + 1, '*');
		if (star != NULL && star[1] != '\0')
			return err_set(e, -EINVAL, "a '*' may only end a pattern");
		p->wild = star != NULL;
		rl = p->wild ? (size_t)(star - slash - 1) : strlen(slash + 1);
		if ((rc = repo_parse(slash + 1, rl, p->wild, p->repo, e)) < 0)
			return rc;
		return docker_canon(p->host, p->port, p->repo, e);
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const char *path = s + strlen(files[i].prefix);

		if (!has_prefix(s, files[i].prefix))
			continue;
		p->kind = files[i].kind;
		if (strchr(path, ':') != NULL)
			return err_set(e, -EINVAL, "a pattern names no tag, and a path "
			    "holds no ':'");
		return path_parse(path, strlen(path), true, p->path, &p->wild, e);
	}
	return err_set(e, -EINVAL, "expected host, docker://HOST[:PORT]/REPO, "
	    "docker://HOST[:PORT]/PREFIX*, or oci:, oci-archive: or "
	    "docker-archive: and /DIR/* or /PATH");
}

bool
img_pattern_match(const struct img_pattern *p, const struct img_ref *r)
{
	size_t n;

	if (p->kind != r->kind)
		return false;
	switch (p->kind) {
	case IMG_HOST:
		return true;
	case IMG_DOCKER:
		if (strcmp(p->host, r->host) != 0 || p->port != r->port)
			return false;
		if (!p->wild)
			return strcmp(p->repo, r->repo) == 0;
		return strncmp(p->repo, r->repo, strlen(p->repo)) == 0;
	case IMG_OCI:
	case IMG_OCI_ARCHIVE:
	case IMG_DOCKER_ARCHIVE:
		if (!p->wild)
			return strcmp(p->path, r->path) == 0;
		/* Below the folder: its path, then a '/' and at least a byte. */
		n = strlen(p->path);
		return strncmp(p->path, r->path, n) == 0 && r->path[n] == '/' &&
		    r->path[n + 1] != '\0';
	case IMG_NAME:
		break;
	}
	return false;
}

bool
img_source_allowed(char *const *patterns, size_t n, const struct img_ref *r)
{
	struct img_pattern p;
	struct err e;

	if (n == 0)
		return r->kind == IMG_HOST;
	for (size_t i = 0; i < n; i++)
		if (img_pattern_parse(patterns[i], &p, &e) == 0 &&
		    img_pattern_match(&p, r))
			return true;
	return false;
}
