/*
 * cli_batch_int.h - what the files of `sandq batch` share. cli_batch.c
 * runs a batch; cli_batch_case.c turns a line of CASES into a job and
 * checks a result's output against what the line expects (pure: no I/O,
 * like the payload codec); cli_batch_status.c reads the progress record
 * for `sandq batch status` and puts summaries into words. Not installed.
 */
#ifndef SANDQ_CLI_BATCH_INT_H
#define SANDQ_CLI_BATCH_INT_H

#include <jansson.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BATCH_ID_MAX 64			/* bytes of a batch id */
#define BATCH_CASE_LINE_MAX (64u * 1024u * 1024u)	/* bytes of one case */
#define BATCH_STALE_MS 30000		/* a running batch this quiet may be dead */

/* How a case's output is compared with its expect. */
enum batch_emode {
	EXPECT_NONE = 0,		/* no expect: the case neither passes nor fails */
	EXPECT_EXACT,			/* byte for byte */
	EXPECT_TRIM,			/* ignoring trailing blanks and empty lines */
	EXPECT_REGEX,			/* ^(EXPECT)$ (POSIX ERE), final newlines off */
};

/* What a case expects on its standard output. */
struct batch_expect {
	enum batch_emode mode;
	char *text;			/* exact, trim: the bytes (trim: trimmed) */
	size_t len;
	regex_t re;			/* regex: compiled */
};

/*** In cli_batch_case.c ***/

/* True for 1 to BATCH_ID_MAX characters of [A-Za-z0-9._-]. */
bool cli_batch__id_valid(const char *s);
/*
 * Parses a case's line (len bytes of text) into the job to submit, *job:
 * its JSON object without expect and expect_mode, with id set, and with
 * sandbox set to fork when fork is not NULL (--base); and into *ex. A line
 * that sets id, or sandbox with a fork, is refused. Returns 0 (the caller
 * owns *job and releases *ex with cli_batch__expect_free()), or -1 with
 * why (whylen bytes) saying what is wrong, *job NULL and *ex empty.
 */
int cli_batch__case_parse(const char *text, size_t len, const char *id,
    const char *fork, json_t **job, struct batch_expect *ex, char *why,
    size_t whylen);
/* Whether len bytes of standard output are what ex expects. */
bool cli_batch__expect_match(const struct batch_expect *ex, const uint8_t *out,
    size_t len);
/* Frees what ex holds and empties it; an empty one is a no-op. */
void cli_batch__expect_free(struct batch_expect *ex);
/*
 * Packs a JSON value as msgpack into *out (owned by the caller, *outlen
 * bytes): objects as maps, strings as str (sandqd takes str for its byte
 * fields), integers as ints, reals as floats.
 */
void cli_batch__pack(json_t *j, char **out, size_t *outlen);

/*** In cli_batch_status.c ***/

/* "1:02:03", "2:03", or "--" for an unknown (negative) time. */
const char *cli_batch__fmt_eta(char *buf, size_t size, double secs);
/* The summary (as `batch run --json` prints it) in words, on stdout. */
void cli_batch__summary_print(const json_t *s);
/*
 * `sandq batch status ID`: reads the progress record of batch id of
 * tenant from url's Redis and prints it. Returns the exit status: 0, 1
 * (no such batch), 125 (Redis failed).
 */
int cli_batch__status(const char *url, const char *tenant, const char *id,
    bool json);

#endif
