/*
 * xmalloc.h - allocation wrappers that abort on exhaustion.
 *
 * Used for sizes the program controls. A size that comes from a peer is
 * checked against its bound before it reaches these (every buffer has a
 * maximum); running out of memory after that is not a recoverable state.
 */
#ifndef SANDQ_COMMON_XMALLOC_H
#define SANDQ_COMMON_XMALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t nmemb, size_t size);
void *xreallocarray(void *ptr, size_t nmemb, size_t size);
char *xstrdup(const char *s);
/* Copies len bytes and adds a NUL. */
char *xmemdup0(const void *p, size_t len);
int xasprintf(char **ret, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
