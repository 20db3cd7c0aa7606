/*
 * metrics_test.c - unit tests for dispatcher/metrics.c: the exposition
 * text it writes (HELP and TYPE lines, escaped label values, cumulative
 * histogram buckets with _sum and _count) and its bound on series.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dispatcher/metrics.h"

static const char *const tenant_status[] = { "tenant", "status", NULL };
static const char *const tenant[] = { "tenant", NULL };

/* Renders m, checks the length render reported, and frees m. */
static char *
render_free(struct metrics *m)
{
	size_t len = 0;
	char *text = metrics_render(m, &len);

	cr_assert_eq(strlen(text), len);
	metrics_free(m);
	return text;
}

Test(metrics, counter_has_help_type_and_one_line_per_series)
{
	struct metrics *m = metrics_new();
	struct metric *c = metrics_counter(m, "sandq_jobs_total", "Jobs finished.",
	    tenant_status);
	char *text;

	metrics_add(c, (const char *const[]){ "acme", "ok" }, 1);
	metrics_add(c, (const char *const[]){ "acme", "ok" }, 2);
	metrics_add(c, (const char *const[]){ "acme", "exit" }, 1);
	text = render_free(m);
	cr_expect_str_eq(text,
	    "# HELP sandq_jobs_total Jobs finished.\n"
	    "# TYPE sandq_jobs_total counter\n"
	    "sandq_jobs_total{tenant=\"acme\",status=\"ok\"} 3\n"
	    "sandq_jobs_total{tenant=\"acme\",status=\"exit\"} 1\n");
	free(text);
}

Test(metrics, label_values_and_help_are_escaped)
{
	struct metrics *m = metrics_new();
	struct metric *g = metrics_gauge(m, "sandq_x", "A \\ help\nline \"q\".", tenant);
	char *text;

	metrics_set(g, (const char *const[]){ "a\"b\\c\nd" }, 0.5);
	text = render_free(m);
	cr_expect_str_eq(text,
	    "# HELP sandq_x A \\\\ help\\nline \"q\".\n"
	    "# TYPE sandq_x gauge\n"
	    "sandq_x{tenant=\"a\\\"b\\\\c\\nd\"} 0.5\n");
	free(text);
}

Test(metrics, histogram_buckets_are_cumulative_with_sum_and_count)
{
	static const double bounds[] = { 0.1, 1, 10 };
	struct metrics *m = metrics_new();
	struct metric *h = metrics_histogram(m, "sandq_run_seconds", "Run time.", tenant,
	    bounds, 3);
	const char *const acme[] = { "acme" };
	char *text;

	metrics_observe(h, acme, 0.05);
	metrics_observe(h, acme, 0.1);		/* le is inclusive */
	metrics_observe(h, acme, 2);
	metrics_observe(h, acme, 100);
	text = render_free(m);
	cr_expect_str_eq(text,
	    "# HELP sandq_run_seconds Run time.\n"
	    "# TYPE sandq_run_seconds histogram\n"
	    "sandq_run_seconds_bucket{tenant=\"acme\",le=\"0.1\"} 2\n"
	    "sandq_run_seconds_bucket{tenant=\"acme\",le=\"1\"} 2\n"
	    "sandq_run_seconds_bucket{tenant=\"acme\",le=\"10\"} 3\n"
	    "sandq_run_seconds_bucket{tenant=\"acme\",le=\"+Inf\"} 4\n"
	    "sandq_run_seconds_sum{tenant=\"acme\"} 102.15\n"
	    "sandq_run_seconds_count{tenant=\"acme\"} 4\n");
	free(text);
}

Test(metrics, unlabelled_family_and_empty_family)
{
	struct metrics *m = metrics_new();
	struct metric *g = metrics_gauge(m, "sandq_workers", "Workers.", NULL);
	char *text;

	(void)metrics_counter(m, "sandq_none_total", "Nothing yet.", NULL);
	metrics_set(g, NULL, 4);
	text = render_free(m);
	cr_expect_str_eq(text,
	    "# HELP sandq_workers Workers.\n"
	    "# TYPE sandq_workers gauge\n"
	    "sandq_workers 4\n"
	    "# HELP sandq_none_total Nothing yet.\n"
	    "# TYPE sandq_none_total counter\n");
	free(text);
}

Test(metrics, a_full_family_drops_new_series_and_keeps_old_ones)
{
	struct metrics *m = metrics_new();
	struct metric *c = metrics_counter(m, "sandq_c_total", "C.", tenant);
	char name[32];

	for (int i = 0; i < METRICS_SERIES_MAX + 10; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		metrics_add(c, (const char *const[]){ name }, 1);
	}
	metrics_add(c, (const char *const[]){ "t0" }, 1);
	cr_expect_eq(metrics_dropped(m), 10);
	char *text = render_free(m);
	cr_expect_not_null(strstr(text, "sandq_c_total{tenant=\"t0\"} 2\n"));
	cr_expect_null(strstr(text, "t4096\""));
	free(text);
}

Test(metrics, cleared_gauge_renders_only_what_was_set_after)
{
	struct metrics *m = metrics_new();
	struct metric *g = metrics_gauge(m, "sandq_q", "Q.", tenant);
	char *text;

	metrics_set(g, (const char *const[]){ "old" }, 1);
	metrics_clear(g);
	metrics_set(g, (const char *const[]){ "new" }, 2);
	text = render_free(m);
	cr_expect_null(strstr(text, "old"));
	cr_expect_not_null(strstr(text, "sandq_q{tenant=\"new\"} 2\n"));
	free(text);
}
