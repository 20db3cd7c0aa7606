/*
 * cli_common.h - what every file of the sandq command shares (cli_common.c):
 * the connection options given before a verb and their defaults, the
 * failure and usage printers, durations, local input, base64, the JSON of
 * a result and of its data, the path-rule options, and (cli_esc.h) the
 * escaping printer. Not part of libsandq; nothing here is installed.
 *
 * A leaf: cli_common.c calls no verb and prints no manual. The verb files
 * (cli_sandbox.c, cli_tenant.c, ...) and the dispatcher (cli.c) call it;
 * only cli.c sees the verbs' entry points, through their own headers.
 */
#ifndef SANDQ_CLI_COMMON_H
#define SANDQ_CLI_COMMON_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../libsandq/sandq.h"
#include "cli_esc.h"

#define CLI_VERSION "0.1.0"		/* sandq --version */
#define CLI_EXIT_SANDQ 125		/* sandq itself failed */
#define CLI_DEFAULT_REDIS "redis://127.0.0.1:6379"
#define CLI_DEFAULT_TENANT "default"

/* Options given before the verb group, with their defaults filled. */
struct cli_conn {
	const char *redis;		/* --redis, $SANDQ_REDIS or the default */
	const char *tenant;		/* --tenant, $SANDQ_TENANT or "default" */
	int64_t wait_ms;		/* --wait-timeout; -1 = no limit */
	bool json;			/* --json */
	bool help;			/* --help / -h */
};

/*** Connection ***/

/* The Redis URL a verb uses: given (--redis), else $SANDQ_REDIS, else the default. */
const char *cli_redis_or_default(const char *given);
/* The tenant a verb works on: given (--tenant), else $SANDQ_TENANT, else "default". */
const char *cli_tenant_or_default(const char *given);

/*** Failures ***/

/*
 * prefix and the message on stderr, as cli_vwarn() writes them, then
 * "Try 'HINT'." on a line of its own when hint is not NULL. Returns
 * status: what a verb's usage and failure printers end in.
 */
int cli_vfail(int status, const char *prefix, const char *hint, const char *fmt,
    va_list ap) __attribute__((format(printf, 4, 0)));
/* "sandq: MESSAGE" on stderr: a failure of sandq itself. Returns CLI_EXIT_SANDQ. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*** Durations and input ***/

/* Parses "2", "0.5" or ".25" seconds into ms (rounding up). 0 or -EINVAL. */
int cli_parse_seconds(const char *s, uint64_t *ms);
/*
 * Reads a local file, or sandq's standard input for "-" when dash_is_stdin,
 * to its end: *out is NUL-terminated and owned by the caller. Returns 0,
 * -EFBIG past max bytes, or -errno.
 */
int cli_read_input(const char *path, bool dash_is_stdin, size_t max,
    uint8_t **out, size_t *outlen);

/*** JSON ***/

/* Base64 of n bytes, NUL-terminated, owned by the caller. */
char *cli_base64(const uint8_t *p, size_t n);
/*
 * r as the one JSON object `sandq --json` prints for a result (id, status,
 * exit_code, ..., error; the sandbox fields for a job on one). Owned by
 * the caller.
 */
json_t *cli_result_json(const struct sandq_result *r);
/*
 * r's data (msgpack) as JSON, a new reference, or NULL: no data, or not
 * msgpack. bin, ext and str that is not UTF-8 become base64 strings.
 */
json_t *cli_result_data_json(const struct sandq_result *r);
/* Prints j as one compact line and drops the reference. 0 or CLI_EXIT_SANDQ. */
int cli_print_json_line(json_t *j);
/* o[k] as a string, or def. */
const char *cli_jstr(const json_t *o, const char *k, const char *def);
/* o[k] as an integer (a real truncated), or 0. */
json_int_t cli_jint(const json_t *o, const char *k);
/*
 * o[k] (a string, NUL bytes and all) or def, escaped for a terminal with
 * cli_escn(): what every human listing prints of the server's text.
 */
const char *cli_jesc(const json_t *o, const char *k, const char *def);
/* cli_jesc() cut to at most width bytes ("..." marking a cut); "" for none. */
const char *cli_jesc_cut(const json_t *o, const char *k, size_t width);
/* ms since the epoch as UTC "YYYY-MM-DDTHH:MM:SSZ" into buf; "-" if <= 0. */
const char *cli_fmt_time_ms(char *buf, size_t size, json_int_t ms);

/*** Path rules ***/

/*
 * --perm PATTERN=LEVEL: appends the rule to *perms (pattern copied), or
 * returns -1 with msg naming the problem.
 */
int cli_perm_add(struct sandq_perm **perms, size_t *n, const char *arg,
    char *msg, size_t msglen);
/* --perm-preset: the preset's static name, or NULL for an unknown one. */
const char *cli_perm_preset(const char *arg);

#endif
