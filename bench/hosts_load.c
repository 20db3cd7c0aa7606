/*
 * hosts_load.c - one batch through whatever hosts serve a Redis, timed:
 * the load bench/hosts.sh puts on 1, 2 and 3 hosts.
 *
 *   hosts-load URL [--jobs N] [--clients C]
 *
 * C threads, one libsandq connection each, submit their share of N jobs
 * (sh "echo I": a trivial job, so the figure is sandq's own cost per job)
 * and then wait for each of their results. Prints one line:
 *
 *   jobs N clients C seconds S jobs_per_s R failed F
 *
 * timed from the first submission to the last result. Exit status 0 when
 * every job ended "ok" with the right output, 1 otherwise, 2 for usage.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libsandq/sandq.h"
#include "timing.h"

#define WAIT_MS 300000			/* per result: the whole batch at worst */

struct share {
	const char *url;
	size_t first, n;		/* jobs first .. first + n - 1 */
	size_t failed;			/* out: jobs not answered ok */
	char err[256];			/* out: the first failure, if any */
};

static void *
run_share(void *arg)
{
	struct share *s = arg;
	char (*ids)[SANDQ_ID_MAX + 1] = calloc(s->n, sizeof(*ids));
	struct sandq *c = sandq_connect(s->url, NULL, s->err, sizeof(s->err));

	if (c == NULL || ids == NULL) {
		s->failed = s->n;
		free(ids);
		return NULL;
	}
	for (size_t i = 0; i < s->n; i++) {
		char script[32];

		snprintf(script, sizeof(script), "echo %zu", s->first + i);
		if (sandq_submit_sh(c, script, NULL, ids[i]) < 0) {
			snprintf(s->err, sizeof(s->err), "submit: %s", sandq_last_error(c));
			ids[i][0] = '\0';
			s->failed++;
		}
	}
	for (size_t i = 0; i < s->n; i++) {
		struct sandq_result *r = NULL;
		char want[32];

		if (ids[i][0] == '\0')
			continue;
		snprintf(want, sizeof(want), "%zu\n", s->first + i);
		if (sandq_wait(c, ids[i], WAIT_MS, &r) < 0) {
			snprintf(s->err, sizeof(s->err), "wait %s: %s", ids[i],
			    sandq_last_error(c));
			s->failed++;
		} else if (strcmp(r->status, "ok") != 0 ||
		    strcmp((const char *)r->stdout_data, want) != 0) {
			snprintf(s->err, sizeof(s->err), "job %s: %s, stdout \"%.32s\"", ids[i],
			    r->status, (const char *)r->stdout_data);
			s->failed++;
		}
		sandq_result_free(r);
	}
	free(ids);
	sandq_close(c);
	return NULL;
}

int
main(int argc, char **argv)
{
	size_t njobs = 2000, failed = 0;
	int nclients = 4;
	struct share *shares;
	pthread_t *threads;
	double t0, secs;

	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: hosts-load URL [--jobs N] [--clients C]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--jobs") == 0)
			njobs = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--clients") == 0)
			nclients = atoi(argv[i + 1]);
		else
			return fprintf(stderr, "hosts-load: unknown option %s\n", argv[i]), 2;
	}
	if (njobs == 0 || nclients <= 0 || (size_t)nclients > njobs)
		return fprintf(stderr, "hosts-load: bad --jobs or --clients\n"), 2;
	shares = calloc((size_t)nclients, sizeof(*shares));
	threads = calloc((size_t)nclients, sizeof(*threads));
	if (shares == NULL || threads == NULL)
		return 1;
	t0 = now_ms();
	for (int i = 0; i < nclients; i++) {
		shares[i].url = argv[1];
		shares[i].first = njobs * (size_t)i / (size_t)nclients;
		shares[i].n = njobs * (size_t)(i + 1) / (size_t)nclients - shares[i].first;
		if (pthread_create(&threads[i], NULL, run_share, &shares[i]) != 0)
			return fprintf(stderr, "hosts-load: pthread_create failed\n"), 1;
	}
	for (int i = 0; i < nclients; i++) {
		pthread_join(threads[i], NULL);
		failed += shares[i].failed;
		if (shares[i].failed)
			fprintf(stderr, "hosts-load: client %d: %zu failed, e.g. %s\n", i,
			    shares[i].failed, shares[i].err);
	}
	secs = (now_ms() - t0) / 1000.0;
	printf("jobs %zu clients %d seconds %.2f jobs_per_s %.1f failed %zu\n", njobs,
	    nclients, secs, (double)njobs / secs, failed);
	free(shares);
	free(threads);
	return failed ? 1 : 0;
}
