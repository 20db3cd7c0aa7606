/*
 * fuzz_payload.c - libFuzzer target for the job and result decoders.
 *
 * Feeds the input to payload_job_decode(), payload_result_decode() and
 * payload_peek_id(), the parsers that see bytes from Redis (untrusted
 * tenants) and from workers. Besides "no crash, no leak" (ASan/LSan), it
 * checks two properties: whatever decodes must re-encode into bytes that
 * decode again to the same id and command, since the dispatcher re-encodes
 * every job before a worker sees it; and payload_peek_id() must find the id
 * whenever the full decoder could read one, and only ever return valid ids.
 * A broken property aborts, so the fuzzer reports it like a crash.
 *
 * Build: see README.md (clang -fsanitize=fuzzer,address, or gcc with
 * run_corpus.c as the main()).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../proto/job.h"
#include "../../proto/result.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_payload: property failed: %s\n", what);
		abort();
	}
}

static void
job_round_trip(const struct job *j)
{
	struct job *back = NULL;
	struct err e;
	char id[JOB_ID_MAX + 1];
	char *buf = NULL;
	size_t len = 0;

	check(payload_job_encode(j, &buf, &len) == 0, "job encodes");
	check(payload_job_decode(buf, len, &back, id, &e) == 0,
	    "re-encoded job decodes");
	check(strcmp(back->id, j->id) == 0, "id survives");
	check(strcmp(id, j->id) == 0, "idbuf holds the id");
	check(back->op == j->op, "op survives");
	check(back->argc == j->argc, "argc survives");
	for (size_t i = 0; i < j->argc; i++)
		check(strcmp(back->argv[i], j->argv[i]) == 0, "argv survives");
	check(back->nenv == j->nenv && back->nfiles == j->nfiles &&
	    back->nlabels == j->nlabels, "counts survive");
	check(memcmp(&back->limits, &j->limits, sizeof(j->limits)) == 0,
	    "limits survive");
	job_free(back);
	free(buf);
}

static void
result_round_trip(const struct result *r)
{
	struct result *back = NULL;
	struct err e;
	char *buf = NULL;
	size_t len = 0;

	check(payload_result_encode(r, &buf, &len) == 0, "result encodes");
	check(payload_result_decode(buf, len, &back, &e) == 0,
	    "re-encoded result decodes");
	check(strcmp(back->id, r->id) == 0, "result id survives");
	check(back->status == r->status, "status survives");
	check(back->out_len == r->out_len && back->err_len == r->err_len,
	    "output lengths survive");
	result_free(back);
	free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct job *j = NULL;
	struct result *r = NULL;
	struct err e;
	char id[JOB_ID_MAX + 1], peek[JOB_ID_MAX + 1];
	bool peeked;
	int rc;

	peeked = payload_peek_id(data, size, peek);
	check(peeked ? payload_id_valid(peek, strlen(peek)) : peek[0] == '\0',
	    "peek_id returns a valid id or nothing");
	rc = payload_job_decode(data, size, &j, id, &e);
	if (id[0] != '\0')
		check(peeked && strcmp(peek, id) == 0,
		    "peek_id finds the id the decoder read");
	if (rc == 0) {
		job_round_trip(j);
		job_free(j);
	} else {
		check(j == NULL, "failed decode leaves *out NULL");
		check(strlen(id) <= JOB_ID_MAX, "idbuf is terminated");
		check(id[0] == '\0' || payload_id_valid(id, strlen(id)),
		    "idbuf holds a valid id or nothing");
	}

	rc = payload_result_decode(data, size, &r, &e);
	if (rc == 0) {
		result_round_trip(r);
		result_free(r);
	} else {
		check(r == NULL, "failed result decode leaves *out NULL");
	}
	return 0;
}
