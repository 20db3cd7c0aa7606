/*
 * batchcase.h - a batch's case: its line of JSON as the job to submit, and
 * the verdict on the job's standard output against what the line expects
 * (batchcase.c). Pure: no I/O. Used by `sandq batch` (cli/cli_batch.c) and
 * the gateway's /v1/batches (gateway/batch.c), so both judge alike.
 *
 * Lifecycle: batchcase_parse() -> batchcase_pack() the job, and
 * batchcase_expect_match() its output as often as needed ->
 * batchcase_expect_free().
 */
#ifndef SANDQ_PROTO_BATCHCASE_H
#define SANDQ_PROTO_BATCHCASE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rx;

#define BATCH_ID_MAX 64			/* bytes of a batch id */
#define BATCH_CASE_LINE_MAX (64u * 1024u * 1024u)	/* bytes of one case */

/* How a case's output is compared with its expect. */
enum batch_emode {
	EXPECT_NONE = 0,		/* no expect: the case neither passes nor fails */
	EXPECT_EXACT,			/* byte for byte */
	EXPECT_TRIM,			/* ignoring trailing blanks and empty lines */
	EXPECT_REGEX,			/* the whole output, final newlines off (rx.h) */
};

/* What a case expects on its standard output. */
struct batch_expect {
	enum batch_emode mode;
	char *text;			/* exact, trim: the bytes (trim: trimmed) */
	size_t len;
	struct rx *re;			/* regex: compiled (proto/rx.h) */
};

/* True for 1 to BATCH_ID_MAX characters of [A-Za-z0-9._-]. */
bool batchcase_id_valid(const char *s);
/*
 * Parses a case's line (len bytes of text) into the job to submit, *job:
 * its JSON object without expect and expect_mode, with id set, and with
 * sandbox set to fork when fork is not NULL (--base); and into *ex. A line
 * that sets id, or sandbox with a fork, is refused. Returns 0 (the caller
 * owns *job and releases *ex with batchcase_expect_free()), or -1 with
 * why (whylen bytes) saying what is wrong, *job NULL and *ex empty.
 */
int batchcase_parse(const char *text, size_t len, const char *id,
    const char *fork, json_t **job, struct batch_expect *ex, char *why,
    size_t whylen);
/*
 * Sets *ex to n bytes of s under mode ("exact" or NULL, "trim", "regex"):
 * what a batch line's expect and expect_mode, and a run's case, expect.
 * Returns 0, or -1 with why (whylen bytes) naming the field and *ex empty.
 * One implementation for `sandq batch`, the gateway's batches and the
 * worker's cases, so all three judge an output alike.
 */
int batchcase_expect_set(struct batch_expect *ex, const char *mode, const char *s,
    size_t n, char *why, size_t whylen);
/*
 * Whether len bytes of standard output are what ex expects. A regex that
 * hits its work bound (rx.h) does not match.
 */
bool batchcase_expect_match(const struct batch_expect *ex, const uint8_t *out,
    size_t len);
/*
 * The same, telling a regex's bound apart: 1 (matches), 0 (does not), -1
 * (a regex hit RX_MATCH_LIMIT, RX_DEPTH_LIMIT or RX_HEAP_LIMIT_KIB).
 */
int batchcase_expect_check(const struct batch_expect *ex, const uint8_t *out,
    size_t len);
/* Frees what ex holds and empties it; an empty one is a no-op. */
void batchcase_expect_free(struct batch_expect *ex);
/*
 * Packs a JSON value as msgpack into *out (owned by the caller, *outlen
 * bytes): objects as maps, strings as str (sandqd takes str for its byte
 * fields), integers as ints, reals as floats.
 */
void batchcase_pack(json_t *j, char **out, size_t *outlen);

#endif
