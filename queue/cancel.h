/*
 * cancel.h - the one script that cancels a job (cancel.c), shared by
 * `sandq cancel` and batch's Ctrl-C (cli/cancel.c, synchronous hiredis) and
 * the gateway's POST /v1/jobs/ID/cancel (gateway/stream.c, async hiredis).
 *
 * The caller builds the keys and arguments with queue_cancel_args(), sends
 * `EVAL queue_cancel_lua 4 KEYS... ARGV...` (QUEUE_CANCEL_ARGC strings)
 * on its own connection, and
 * reads the reply with queue_cancel_outcome().
 */
#ifndef SANDQ_QUEUE_CANCEL_H
#define SANDQ_QUEUE_CANCEL_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"
#include "../proto/keys.h"

struct redisReply;

#define QUEUE_CANCEL_ARGC 13		/* the EVAL's argv: "EVAL", script, "4", ... */
#define QUEUE_CANCEL_TTL_MS 86400000	/* a cancellation waits this long for its host */

/* What the script did. */
enum queue_cancel {
	QCANCEL_FAILED = -1,	/* Redis failed or answered something else */
	QCANCEL_CANCELLED,	/* no host had read it: removed, answered */
	QCANCEL_CANCELLING,	/* a host holds it: asked to stop it */
	QCANCEL_HELD,		/* a host holds it: left alone (queued_only) */
	QCANCEL_FINISHED,	/* it has a result already */
	QCANCEL_UNKNOWN,	/* no entry of the tenant's stream has the id */
};

/* The script (see cancel.c for its KEYS, ARGV and reply). */
extern const char queue_cancel_lua[];

/* The EVAL's 12 arguments after the script, owned by the struct. */
struct queue_cancel_args {
	char jobs[KEY_MAX], res[KEY_MAX], done[KEY_MAX], can[KEY_MAX];
	char chan[KEY_MAX];	/* the tenant's results channel (key_results) */
	char ttl[24];
	char *result;		/* the `cancelled` result, msgpack; free() it */
	size_t result_len;
	/* "EVAL", script, "4", keys, id, result, ttl, group, flag, channel */
	const char *argv[QUEUE_CANCEL_ARGC];
	size_t lens[QUEUE_CANCEL_ARGC];
};

/*
 * Fills a for cancelling job id of tenant under prefix; by names who asked
 * ("sandq cancel", "the gateway") in the cancelled result's message. id
 * must stay alive while a->argv is used. queued_only leaves a held job
 * alone. -errno with e set on a bad key or no memory.
 */
int queue_cancel_args(struct queue_cancel_args *a, const char *prefix,
    const char *tenant, const char *id, const char *by, bool queued_only,
    struct err *e);

/* Frees what queue_cancel_args() allocated. */
void queue_cancel_args_free(struct queue_cancel_args *a);

/*
 * The script's reply as an outcome; host (hlen bytes) receives the holding
 * host's consumer name for QCANCEL_CANCELLING / QCANCEL_HELD, else "".
 * queued_only is what the args were built with.
 */
enum queue_cancel queue_cancel_outcome(const struct redisReply *rep,
    bool queued_only, char *host, size_t hlen);

#endif
