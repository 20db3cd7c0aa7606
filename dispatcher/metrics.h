/*
 * metrics.h - a small registry of Prometheus metrics and its text writer.
 *
 * Lifecycle: metrics_new() → metrics_counter() / metrics_gauge() /
 * metrics_histogram() once per family at start-up → metrics_add(),
 * metrics_set() and metrics_observe() as events happen → metrics_render()
 * on each scrape → metrics_free().
 *
 * The writer follows the text exposition format 0.0.4: "# HELP" and
 * "# TYPE" once per family, one line per series, label values escaped
 * (\\, \", \n), a histogram as cumulative _bucket{le="..."} lines ending
 * with le="+Inf", then _sum and _count. No I/O: render gives bytes.
 *
 * Labels are bounded by the caller (tenants, statuses, the filter's
 * syscalls); the registry bounds them again: a family keeps at most
 * METRICS_SERIES_MAX series, and a value past it is not recorded (counted
 * in metrics_dropped()), so a flood of names cannot grow sandqd's memory.
 */
#ifndef SANDQ_DISPATCHER_METRICS_H
#define SANDQ_DISPATCHER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_LABELS_MAX 4		/* labels one family has at most */
#define METRICS_SERIES_MAX 4096		/* series one family keeps at most */
#define METRICS_LABEL_VALUE_MAX 256	/* bytes of one label value kept */

struct metrics;
struct metric;

/* An empty registry; never NULL (aborts on OOM). */
struct metrics *metrics_new(void);
/* Frees the registry, its families and series; NULL is a no-op. */
void metrics_free(struct metrics *m);

/*
 * Registers a family. name and help are static strings the registry does
 * not copy; labels is a NULL-terminated array of static names (or NULL for
 * none), at most METRICS_LABELS_MAX. A histogram takes its upper bounds,
 * nbounds of them in increasing order (copied); +Inf is implied. Returns
 * the family, owned by the registry. Families render in this order.
 */
struct metric *metrics_counter(struct metrics *m, const char *name, const char *help,
    const char *const *labels);
struct metric *metrics_gauge(struct metrics *m, const char *name, const char *help,
    const char *const *labels);
struct metric *metrics_histogram(struct metrics *m, const char *name, const char *help,
    const char *const *labels, const double *bounds, size_t nbounds);

/*
 * The series of f with these label values (as many as f has labels; each
 * cut at METRICS_LABEL_VALUE_MAX - 1 bytes): a counter grows by v (v >= 0),
 * a gauge is set to v, a histogram observes v. A new series past
 * METRICS_SERIES_MAX is not made; the call then only counts a drop.
 */
void metrics_add(struct metric *f, const char *const *values, double v);
void metrics_set(struct metric *f, const char *const *values, double v);
void metrics_observe(struct metric *f, const char *const *values, double v);
/* Forgets every series of f (a gauge filled anew at each scrape). */
void metrics_clear(struct metric *f);

/*
 * The exposition text of every family; *len its length. The caller owns
 * the NUL-terminated buffer (free()).
 */
char *metrics_render(const struct metrics *m, size_t *len);
/* Values not recorded because a family was full. */
uint64_t metrics_dropped(const struct metrics *m);

#endif
