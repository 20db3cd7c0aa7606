/*
 * xmalloc.c - allocation wrappers that log and abort on exhaustion (tmux).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xmalloc.h"

void *
xmalloc(size_t size)
{
	void *p;

	if (size == 0)
		size = 1;
	if ((p = malloc(size)) == NULL)
		fatalx("xmalloc: out of memory allocating %zu bytes", size);
	return p;
}

void *
xcalloc(size_t nmemb, size_t size)
{
	void *p;

	if (nmemb == 0 || size == 0)
		nmemb = size = 1;
	if ((p = calloc(nmemb, size)) == NULL)
		fatalx("xcalloc: out of memory allocating %zu x %zu bytes",
		    nmemb, size);
	return p;
}

void *
xreallocarray(void *ptr, size_t nmemb, size_t size)
{
	void *p;

	if (nmemb == 0 || size == 0)
		nmemb = size = 1;
	if (size != 0 && nmemb > SIZE_MAX / size)
		fatalx("xreallocarray: %zu x %zu overflows", nmemb, size);
	if ((p = realloc(ptr, nmemb * size)) == NULL)
		fatalx("xreallocarray: out of memory allocating %zu x %zu bytes",
		    nmemb, size);
	return p;
}

char *
xstrdup(const char *s)
{
	return xmemdup0(s, strlen(s));
}

char *
xmemdup0(const void *p, size_t len)
{
	char *s;

	if (len == SIZE_MAX)
		fatalx("xmemdup0: length overflows");
	s = xmalloc(len + 1);
	if (len)
		memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

int
xasprintf(char **ret, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(ret, fmt, ap);
	va_end(ap);
	if (n < 0)
		fatalx("xasprintf: out of memory");
	return n;
}
