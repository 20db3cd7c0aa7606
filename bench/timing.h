/*
 * timing.h - what both benchmarks (bench.c, snapshot.c) measure with: the
 * monotonic clock in milliseconds, and percentiles of a sample.
 */
#ifndef SANDQ_BENCH_TIMING_H
#define SANDQ_BENCH_TIMING_H

#include <math.h>
#include <stdlib.h>
#include <time.h>

static inline double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank) of v[0..n), which it sorts. */
static inline double
pct(double *v, size_t n, double p)
{
	size_t i;

	qsort(v, n, sizeof(*v), cmp_double);
	i = (size_t)ceil(p / 100.0 * (double)n);
	if (i > 0)
		i--;
	return v[i < n ? i : n - 1];
}

#endif
