/*
 * cli.h - what the files of the sandq command (cli.c, and cli_sandbox.c,
 * cli_fs.c and cli_output.c for the verb groups) share: the connection
 * options parsed before a verb, and a few helpers cli.c defines. Not part
 * of libsandq; nothing here is installed.
 *
 * Flow: cli.c parses the options before the verb; for the verb groups
 * sandbox, fs and kv it hands the rest of argv to cli_sandbox_main(),
 * which parses the group's own options and runs the verb (and so on for
 * tenant, status, dead, cancel and batch).
 */
#ifndef SANDQ_CLI_H
#define SANDQ_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cli_esc.h"
#include "../libsandq/sandq.h"

struct redisContext;

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

/* The tenant a verb works on: given (--tenant), else $SANDQ_TENANT, else "default". */
const char *cli_tenant_or_default(const char *given);

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
/*
 * r as the one JSON object `sandq --json` prints for a result (id, status,
 * exit_code, ..., error; the sandbox fields for a job on one). Owned by
 * the caller.
 */
json_t *cli_result_json(const struct sandq_result *r);

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

/* What cli_cancel_job() did. */
enum cli_cancel {
	CLI_CANCEL_FAILED = -1,		/* Redis failed; said on stderr */
	CLI_CANCELLED,			/* no host had read it: removed, answered */
	CLI_CANCELLING,			/* a host holds it: asked to stop it */
	CLI_CANCEL_HELD,		/* a host holds it: left alone (queued_only) */
	CLI_CANCEL_FINISHED,		/* it has a result already */
	CLI_CANCEL_UNKNOWN,		/* no entry of the tenant's stream has the id */
};

/*
 * The cancel script of `sandq cancel` for one job id of tenant, on rc
 * (admin or the tenant's own credentials). A job no host has read yet is
 * deleted from the stream and answered `cancelled` in one step. A job a
 * host holds gets a cancellation key, unless queued_only: then it is left
 * to run (sandq batch's Ctrl-C). host (hlen bytes) receives the holding
 * host's consumer name, or "". Does not take rc.
 */
enum cli_cancel cli_cancel_job(struct redisContext *rc, const char *tenant,
    const char *id, bool queued_only, char *host, size_t hlen);

/*** In cli_batch.c ***/

/* Runs `sandq batch run|status ...`: argv[0] is "batch". */
int cli_batch_main(const struct cli_conn *conn, int argc, char **argv);
void cli_batch_help(void);

/*** In cli_audit.c ***/

/*
 * Runs `sandq [OPTIONS] audit [OPTIONS]`: parses all of argv itself.
 * Returns the process's exit status (0, 2 usage, 125 failure).
 */
int cli_audit_main(int argc, char **argv);
/* Prints the manual of audit. */
void cli_audit_help(void);

#endif
