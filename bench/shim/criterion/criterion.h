/*
 * bench/shim/criterion/criterion.h - the three Criterion asserts that
 * tests/harness.c and tests/imgbuild.c use, for a benchmark that links
 * them without Criterion (build/image-bench): a failed assert prints where
 * and why on stderr and exits 1. The Makefile compiles those two files
 * with -Ibench/shim, so their <criterion/criterion.h> is this file; no
 * test binary ever sees it.
 */
#ifndef SANDQ_BENCH_SHIM_CRITERION_H
#define SANDQ_BENCH_SHIM_CRITERION_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints "file:line: what: message" (fmt may be "") and exits 1. */
static inline void
shim_die(const char *file, int line, const char *what, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "image-bench: %s:%d: %s", file, line, what);
	if (fmt[0] != '\0') {
		fputs(": ", stderr);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
	exit(1);
}

#define cr_assert(cond, ...) \
	((cond) ? (void)0 : shim_die(__FILE__, __LINE__, #cond, "" __VA_ARGS__))
#define cr_assert_fail(...) shim_die(__FILE__, __LINE__, "failed", "" __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)

#endif
