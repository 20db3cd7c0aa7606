/*
 * cancel.c - the one script that cancels a job (cancel.h), for `sandq
 * cancel` (cli_dead.c) and for batch's Ctrl-C (cli_batch.c), run with the
 * credentials the caller connected with. The script itself is
 * queue/cancel.c's, shared with the gateway.
 *
 * A job no host has read yet is deleted from its stream and answered
 * `cancelled` in the same step, so no host can read it in between; a job a
 * host holds gets a cancellation key that the host polls
 * (dispatcher/cancel.c) and answers.
 */
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../queue/cancel.h"
#include "cancel.h"
#include "cli_esc.h"

#define PREFIX "sandq"

enum cli_cancel
cli_cancel_job(redisContext *rc, const char *tenant, const char *id,
    bool queued_only, char *host, size_t hlen)
{
	struct queue_cancel_args a;
	struct err e = { 0 };
	enum queue_cancel got;
	redisReply *rep;

	host[0] = '\0';
	if (queue_cancel_args(&a, PREFIX, tenant, id, "sandq cancel", queued_only, &e) < 0) {
		cli_warn("cancel %s: %s", id, e.msg);
		return CLI_CANCEL_FAILED;
	}
	rep = redisCommandArgv(rc, QUEUE_CANCEL_ARGC, a.argv, a.lens);
	queue_cancel_args_free(&a);
	got = queue_cancel_outcome(rep, queued_only, host, hlen);
	if (got == QCANCEL_FAILED)
		cli_warn("cancel %s: %s", id,
		    rep && rep->type == REDIS_REPLY_ERROR ? rep->str : rc->errstr);
	freeReplyObject(rep);
	switch (got) {
	case QCANCEL_CANCELLED: return CLI_CANCELLED;
	case QCANCEL_CANCELLING: return CLI_CANCELLING;
	case QCANCEL_HELD: return CLI_CANCEL_HELD;
	case QCANCEL_FINISHED: return CLI_CANCEL_FINISHED;
	case QCANCEL_UNKNOWN: return CLI_CANCEL_UNKNOWN;
	default: return CLI_CANCEL_FAILED;
	}
}
