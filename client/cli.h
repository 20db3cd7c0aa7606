/*
 * cli.h - what the files of the sandq command (cli.c, and cli_sandbox.c,
 * cli_fs.c and cli_output.c for the verb groups) share: the connection
 * options parsed before a verb, and a few helpers cli.c defines. Not part
 * of libsandq; nothing here is installed.
 *
 * Flow: cli.c parses the options before the verb; for the verb groups
 * sandbox, fs and kv it hands the rest of argv to cli_sandbox_main(),
 * which parses the group's own options and runs the verb.
 */
#ifndef SANDQ_CLI_H
#define SANDQ_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandq.h"

#define CLI_EXIT_SANDQ 125		/* sandq itself failed */

/* Options given before the verb group, with their defaults filled. */
struct cli_conn {
	const char *redis;		/* --redis, $SANDQ_REDIS or the default */
	const char *tenant;		/* --tenant, $SANDQ_TENANT or "default" */
	int64_t wait_ms;		/* --wait-timeout; -1 = no limit */
	bool json;			/* --json */
	bool help;			/* --help / -h */
};

/*** In cli.c ***/

/* Parses "2", "0.5" or ".25" seconds into ms (rounding up). 0 or -EINVAL. */
int cli_parse_seconds(const char *s, uint64_t *ms);
/* Base64 of n bytes, NUL-terminated, owned by the caller. */
char *cli_base64(const uint8_t *p, size_t n);
/*
 * Reads a local file, or sandq's standard input for "-" when dash_is_stdin,
 * to its end: *out is NUL-terminated and owned by the caller. Returns 0,
 * -EFBIG past max bytes, or -errno.
 */
int cli_read_input(const char *path, bool dash_is_stdin, size_t max,
    uint8_t **out, size_t *outlen);

/*** In cli_sandbox.c ***/

/* True for "sandbox", "fs" and "kv". */
bool cli_sandbox_is_group(const char *name);
/*
 * --perm PATTERN=LEVEL: appends the rule to *perms (pattern copied), or
 * returns -1 with msg naming the problem.
 */
int cli_perm_add(struct sandq_perm **perms, size_t *n, const char *arg,
    char *msg, size_t msglen);
/* --perm-preset: the preset's static name, or NULL for an unknown one. */
const char *cli_perm_preset(const char *arg);
/*
 * Runs `sandq GROUP [OPTIONS] VERB ARGS...`: argv[0] is the group. conn
 * holds what was given before it. Returns the process's exit status.
 */
int cli_sandbox_main(const struct cli_conn *conn, int argc, char **argv);
/* Prints the manual of a group ("sandbox", "fs" or "kv"). */
void cli_sandbox_help(const char *group);

/*** In cli_tenant.c ***/

/*
 * Runs `sandq tenant VERB ...`: argv[0] is "tenant". conn gives --redis,
 * --json and --help seen before it; a --tenant there is refused. Returns
 * the process's exit status.
 */
int cli_tenant_main(const struct cli_conn *conn, int argc, char **argv);
/* Prints the manual of tenant. */
void cli_tenant_help(void);

/*** In cli_status.c ***/

/* Runs `sandq status [--json]`: argv[0] is "status". */
int cli_status_main(const struct cli_conn *conn, int argc, char **argv);
void cli_status_help(void);

/*** In cli_dead.c ***/

/* Runs `sandq dead VERB ...`: argv[0] is "dead". */
int cli_dead_main(const struct cli_conn *conn, int argc, char **argv);
void cli_dead_help(void);
/* Runs `sandq cancel ID...`: argv[0] is "cancel". */
int cli_cancel_main(const struct cli_conn *conn, int argc, char **argv);
void cli_cancel_help(void);

/*** In cli_audit.c ***/

/*
 * Runs `sandq [OPTIONS] audit [OPTIONS]`: parses all of argv itself.
 * Returns the process's exit status (0, 2 usage, 125 failure).
 */
int cli_audit_main(int argc, char **argv);
/* Prints the manual of audit. */
void cli_audit_help(void);

#endif
