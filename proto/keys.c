/*
 * keys.c - builds the Redis key names of docs/protocol.md, section Keys.
 *
 * Tenant names are restricted to [A-Za-z0-9_-] so that a name can never
 * contain the braces of a hash tag or the ':' that separates key parts.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "keys.h"

static int
key_fmt(char *buf, const char *prefix, const char *tenant, const char *kind,
    const char *id)
{
	int n;

	if (id)
		n = snprintf(buf, KEY_MAX, "%s:{%s}:%s:%s", prefix, tenant, kind, id);
	else
		n = snprintf(buf, KEY_MAX, "%s:{%s}:%s", prefix, tenant, kind);
	if (n < 0 || n >= KEY_MAX)
		return -ENAMETOOLONG;
	return n;
}

int
key_jobs(char *buf, const char *prefix, const char *tenant)
{
	return key_fmt(buf, prefix, tenant, "jobs", NULL);
}

int
key_res(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "res", id);
}

int
key_done(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "done", id);
}

int
key_dead(char *buf, const char *prefix, const char *tenant)
{
	return key_fmt(buf, prefix, tenant, "dead", NULL);
}

int
key_attempts(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "attempts", id);
}

int
key_out(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "out", id);
}

int
key_cancel(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "cancel", id);
}

int
key_batch(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "batch", id);
}

int
key_results(char *buf, const char *prefix, const char *tenant)
{
	return key_fmt(buf, prefix, tenant, "results", NULL);
}

int
key_bcases(char *buf, const char *prefix, const char *tenant, const char *id)
{
	return key_fmt(buf, prefix, tenant, "bcases", id);
}

int
key_images(char *buf, const char *prefix, const char *tenant)
{
	return key_fmt(buf, prefix, tenant, "images", NULL);
}

int
key_sbxallow(char *buf, const char *prefix, const char *tenant)
{
	return key_fmt(buf, prefix, tenant, "sbxallow", NULL);
}

int
key_store(char *buf, const char *prefix, const char *tenant, const char *kind,
    const char *id)
{
	int n;

	if (kind[0] == '\0' && id == NULL) {
		n = snprintf(buf, KEY_MAX, "%s:{%s}:", prefix, tenant);
		return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : n;
	}
	return key_fmt(buf, prefix, tenant, kind, id);
}

int
key_tenant_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}
