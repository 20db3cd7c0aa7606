/*
 * cli_batch_int.h - what the files of `sandq batch` share. cli_batch.c
 * runs a batch; proto/batchcase.c (shared with the gateway) turns a line
 * of CASES into a job and checks a result's output against what the line
 * expects; cli_batch_status.c reads the progress record
 * for `sandq batch status` and puts summaries into words. Not installed.
 */
#ifndef SANDQ_CLI_BATCH_INT_H
#define SANDQ_CLI_BATCH_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../proto/batchcase.h"

#define BATCH_STALE_MS 30000		/* a running batch this quiet may be dead */

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
