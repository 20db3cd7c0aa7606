/*
 * cancel.h - the script that cancels one job (cancel.c), shared by
 * `sandq cancel` (cli_dead.c) and batch's Ctrl-C (cli_batch.c).
 */
#ifndef SANDQ_CLI_CANCEL_H
#define SANDQ_CLI_CANCEL_H

#include <stdbool.h>
#include <stddef.h>

struct redisContext;

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

#endif
