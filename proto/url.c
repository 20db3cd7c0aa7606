/*
 * url.c - parses redis:// and unix:// addresses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "url.h"

static int
copy_part(char *dst, size_t size, const char *src, size_t n)
{
	if (n >= size)
		return -1;
	memcpy(dst, src, n);
	dst[n] = '\0';
	return 0;
}

/* Splits "[USER]:PASS@" off the front of *p, if present. */
static int
parse_userinfo(const char **p, struct redis_url *u, const char *url, struct err *e)
{
	const char *at = strchr(*p, '@');
	const char *colon;

	if (at == NULL)
		return 0;
	colon = memchr(*p, ':', (size_t)(at - *p));
	if (colon == NULL) {
		/* "redis://PASSWORD@host" is the old form: a password alone. */
		if (copy_part(u->pass, sizeof(u->pass), *p, (size_t)(at - *p)) < 0)
			return err_set(e, -EINVAL, "redis url %s: password too long", url);
	} else if (copy_part(u->user, sizeof(u->user), *p, (size_t)(colon - *p)) < 0 ||
	    copy_part(u->pass, sizeof(u->pass), colon + 1, (size_t)(at - colon - 1)) < 0) {
		return err_set(e, -EINVAL, "redis url: user or password too long");
	}
	*p = at + 1;
	return 0;
}

int
redis_url_parse(const char *s, struct redis_url *u, struct err *e)
{
	const char *p, *colon, *slash;
	int64_t v;

	memset(u, 0, sizeof(*u));
	u->port = 6379;
	if (strncmp(s, "unix://", 7) == 0) {
		p = s + 7;
		if (parse_userinfo(&p, u, s, e) < 0)
			return -EINVAL;
		if (p[0] != '/' || copy_part(u->path, sizeof(u->path), p, strlen(p)) < 0)
			return err_set(e, -EINVAL,
			    "redis url %s: expected unix:///absolute/path (at most %zu bytes)",
			    s, sizeof(u->path) - 1);
		return 0;
	}
	if (strncmp(s, "redis://", 8) != 0)
		return err_set(e, -EINVAL,
		    "redis url %s: expected redis://HOST:PORT or unix:///PATH", s);
	p = s + 8;
	if (parse_userinfo(&p, u, s, e) < 0)
		return -EINVAL;
	slash = strchr(p, '/');
	colon = memchr(p, ':', slash ? (size_t)(slash - p) : strlen(p));
	if (copy_part(u->host, sizeof(u->host), p,
	    colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p)) < 0 ||
	    u->host[0] == '\0')
		return err_set(e, -EINVAL, "redis url %s: missing or overlong host", s);
	if (colon) {
		char port[8];
		size_t n = slash ? (size_t)(slash - colon - 1) : strlen(colon + 1);

		if (copy_part(port, sizeof(port), colon + 1, n) < 0 ||
		    parse_i64(port, 1, 65535, &v) < 0)
			return err_set(e, -EINVAL, "redis url %s: bad port", s);
		u->port = (int)v;
	}
	if (slash && slash[1] != '\0') {
		if (parse_i64(slash + 1, 0, 1000000, &v) < 0)
			return err_set(e, -EINVAL, "redis url %s: bad database number", s);
		u->db = (int)v;
	}
	return 0;
}
