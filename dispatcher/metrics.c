/*
 * metrics.c - the registry of sandqd's Prometheus metrics and the text
 * exposition format's writer (version 0.0.4).
 *
 * DESIGN: Debian packages no C library that writes the exposition text
 * (prometheus-client-c is not in Debian), and the format is a few lines of
 * formatting, so it is written here; serving it over HTTP is libh2o's
 * (scrape.c). A family is a list of series, each its label values and
 * either a value or a histogram's bucket counts. Lookups are linear: a
 * family holds tens of series (tenants times statuses), bounded by
 * METRICS_SERIES_MAX, and is looked up once per event on the loop.
 * Buckets are counted per bucket and summed into cumulative counts when
 * rendered.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "metrics.h"

enum mtype { M_COUNTER, M_GAUGE, M_HISTOGRAM };

struct series {
	char *values[METRICS_LABELS_MAX];	/* label values (owned) */
	double value;				/* counter or gauge */
	uint64_t *buckets;			/* histogram: per bucket, +Inf last */
	double sum;				/* histogram: sum of observations */
	uint64_t count;				/* histogram: observations */
	struct series *next;
};

struct metric {
	const char *name;			/* static */
	const char *help;			/* static */
	enum mtype type;
	const char *labels[METRICS_LABELS_MAX];	/* static names */
	size_t nlabels;
	double *bounds;				/* histogram upper bounds (owned) */
	size_t nbounds;
	struct series *head, **tail;		/* in order of creation */
	size_t nseries;
	struct metrics *m;			/* owner */
	struct metric *next;
};

struct metrics {
	struct metric *head, **tail;
	uint64_t dropped;
};

struct metrics *
metrics_new(void)
{
	struct metrics *m = xcalloc(1, sizeof(*m));

	m->tail = &m->head;
	return m;
}

static void
series_free(struct series *s)
{
	for (size_t i = 0; i < METRICS_LABELS_MAX; i++)
		free(s->values[i]);
	free(s->buckets);
	free(s);
}

void
metrics_clear(struct metric *f)
{
	struct series *s, *next;

	for (s = f->head; s != NULL; s = next) {
		next = s->next;
		series_free(s);
	}
	f->head = NULL;
	f->tail = &f->head;
	f->nseries = 0;
}

void
metrics_free(struct metrics *m)
{
	struct metric *f, *next;

	if (m == NULL)
		return;
	for (f = m->head; f != NULL; f = next) {
		next = f->next;
		metrics_clear(f);
		free(f->bounds);
		free(f);
	}
	free(m);
}

/* A new family of type t; labels past METRICS_LABELS_MAX are a bug. */
static struct metric *
family_new(struct metrics *m, enum mtype t, const char *name, const char *help,
    const char *const *labels)
{
	struct metric *f = xcalloc(1, sizeof(*f));

	f->name = name;
	f->help = help;
	f->type = t;
	for (; labels != NULL && labels[f->nlabels] != NULL; f->nlabels++) {
		if (f->nlabels == METRICS_LABELS_MAX)
			fatalx("metric %s: more than %d labels", name, METRICS_LABELS_MAX);
		f->labels[f->nlabels] = labels[f->nlabels];
	}
	f->tail = &f->head;
	f->m = m;
	*m->tail = f;
	m->tail = &f->next;
	return f;
}

struct metric *
metrics_counter(struct metrics *m, const char *name, const char *help,
    const char *const *labels)
{
	return family_new(m, M_COUNTER, name, help, labels);
}

struct metric *
metrics_gauge(struct metrics *m, const char *name, const char *help,
    const char *const *labels)
{
	return family_new(m, M_GAUGE, name, help, labels);
}

struct metric *
metrics_histogram(struct metrics *m, const char *name, const char *help,
    const char *const *labels, const double *bounds, size_t nbounds)
{
	struct metric *f = family_new(m, M_HISTOGRAM, name, help, labels);

	f->bounds = xreallocarray(NULL, nbounds ? nbounds : 1, sizeof(*f->bounds));
	memcpy(f->bounds, bounds, nbounds * sizeof(*bounds));
	f->nbounds = nbounds;
	return f;
}

/* The series of f with these values, made if need be; NULL when f is full. */
static struct series *
series_get(struct metric *f, const char *const *values)
{
	struct series *s;
	size_t i;

	for (s = f->head; s != NULL; s = s->next) {
		for (i = 0; i < f->nlabels; i++)
			if (strncmp(s->values[i], values[i], METRICS_LABEL_VALUE_MAX - 1) != 0)
				break;
		if (i == f->nlabels)
			return s;
	}
	if (f->nseries >= METRICS_SERIES_MAX) {
		f->m->dropped++;
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	for (i = 0; i < f->nlabels; i++)
		s->values[i] = xmemdup0(values[i],
		    strnlen(values[i], METRICS_LABEL_VALUE_MAX - 1));
	if (f->type == M_HISTOGRAM)
		s->buckets = xcalloc(f->nbounds + 1, sizeof(*s->buckets));
	*f->tail = s;
	f->tail = &s->next;
	f->nseries++;
	return s;
}

void
metrics_add(struct metric *f, const char *const *values, double v)
{
	struct series *s = series_get(f, values);

	if (s != NULL && v >= 0)
		s->value += v;
}

void
metrics_set(struct metric *f, const char *const *values, double v)
{
	struct series *s = series_get(f, values);

	if (s != NULL)
		s->value = v;
}

void
metrics_observe(struct metric *f, const char *const *values, double v)
{
	struct series *s = series_get(f, values);
	size_t i;

	if (s == NULL || isnan(v))
		return;
	for (i = 0; i < f->nbounds && v > f->bounds[i]; i++)
		;
	s->buckets[i]++;
	s->sum += v;
	s->count++;
}

uint64_t
metrics_dropped(const struct metrics *m)
{
	return m->dropped;
}

/*** Writing ***/

/* A label value: \ " and newline escaped, as the format requires. */
static void
put_escaped(FILE *o, const char *s, bool quote)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\')
			fputs("\\\\", o);
		else if (*s == '\n')
			fputs("\\n", o);
		else if (*s == '"' && quote)
			fputs("\\\"", o);
		else
			fputc(*s, o);
	}
}

/* v in the fewest digits (up to 17) that read back as v: 0.1, not 0.10000000000000001. */
static void
fmt_double(char *buf, size_t size, double v)
{
	if (isinf(v)) {
		snprintf(buf, size, "%s", v > 0 ? "+Inf" : "-Inf");
		return;
	}
	if (isnan(v)) {
		snprintf(buf, size, "NaN");
		return;
	}
	for (int digits = 15; digits <= 17; digits++) {
		snprintf(buf, size, "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* A sample value, as fmt_double() writes it. */
static void
put_value(FILE *o, double v)
{
	char buf[64];

	fmt_double(buf, sizeof(buf), v);
	fputs(buf, o);
}

/* {a="x",b="y"[,le="B"]}, or nothing for no labels and no le. */
static void
put_labels(FILE *o, const struct metric *f, const struct series *s, const char *le)
{
	if (f->nlabels == 0 && le == NULL)
		return;
	fputc('{', o);
	for (size_t i = 0; i < f->nlabels; i++) {
		fprintf(o, "%s%s=\"", i ? "," : "", f->labels[i]);
		put_escaped(o, s->values[i], true);
		fputc('"', o);
	}
	if (le != NULL)
		fprintf(o, "%sle=\"%s\"", f->nlabels ? "," : "", le);
	fputc('}', o);
}

static void
put_histogram(FILE *o, const struct metric *f, const struct series *s)
{
	uint64_t cum = 0;
	char le[64];

	for (size_t i = 0; i <= f->nbounds; i++) {
		cum += s->buckets[i];
		fmt_double(le, sizeof(le), i < f->nbounds ? f->bounds[i] : INFINITY);
		fprintf(o, "%s_bucket", f->name);
		put_labels(o, f, s, le);
		fprintf(o, " %llu\n", (unsigned long long)cum);
	}
	fprintf(o, "%s_sum", f->name);
	put_labels(o, f, s, NULL);
	fputc(' ', o);
	put_value(o, s->sum);
	fprintf(o, "\n%s_count", f->name);
	put_labels(o, f, s, NULL);
	fprintf(o, " %llu\n", (unsigned long long)s->count);
}

char *
metrics_render(const struct metrics *m, size_t *len)
{
	static const char *const types[] = { "counter", "gauge", "histogram" };
	char *buf = NULL;
	FILE *o = open_memstream(&buf, len);

	if (o == NULL)
		fatal("open_memstream");
	for (const struct metric *f = m->head; f != NULL; f = f->next) {
		fprintf(o, "# HELP %s ", f->name);
		put_escaped(o, f->help, false);
		fprintf(o, "\n# TYPE %s %s\n", f->name, types[f->type]);
		for (const struct series *s = f->head; s != NULL; s = s->next) {
			if (f->type == M_HISTOGRAM) {
				put_histogram(o, f, s);
				continue;
			}
			fputs(f->name, o);
			put_labels(o, f, s, NULL);
			fputc(' ', o);
			put_value(o, s->value);
			fputc('\n', o);
		}
	}
	if (fclose(o) != 0)
		fatal("metrics: cannot write the exposition");
	return buf;
}
