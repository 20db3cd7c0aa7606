/*
 * dead.h - dead letters (docs/protocol.md "Dead letters"), read and
 * retried the same way by `sandq dead` (cli/cli_dead.c, synchronous
 * hiredis) and the gateway's /v1/admin/dead routes (gateway/admin.c,
 * async hiredis).
 *
 * The stream PREFIX:{T}:dead holds a job out of attempts (fields entry,
 * id, reason, attempts: a JSON array, payload: the job as it ran,
 * payload_truncated) or an entry no id could be read from (entry, reason,
 * payload: its first bytes). Only the first kind can be retried, by one
 * script (queue_dead_retry_lua) so that a retry is never half done and
 * never done twice.
 */
#ifndef SANDQ_QUEUE_DEAD_H
#define SANDQ_QUEUE_DEAD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct redisReply;

/* A dead letter, as read from the stream (strings point into the reply). */
struct queue_dead {
	const char *dead_id;
	const char *entry, *id, *reason, *attempts;
	size_t payload_len;
	bool truncated, has_payload;
};

/* Reads one XRANGE element; false if it is not [id, [fields]]. */
bool queue_dead_parse(const struct redisReply *e, struct queue_dead *d);
/* True if d carries a whole job with a readable id. */
bool queue_dead_retryable(const struct queue_dead *d);
/*
 * d as JSON (owned): dead_id, at (epoch ms), entry, id, reason, attempts
 * (the array as recorded), payload_bytes, payload_truncated, retryable.
 */
json_t *queue_dead_json(const struct queue_dead *d);

/*
 * KEYS: dead, jobs, res, done, attempts, cancel (of the dead letter's job
 * id); ARGV: the dead letter's stream id. Deletes the job's old result,
 * done list, attempts and cancellation, adds the payload to the job
 * stream as a new entry and deletes the dead letter. Returns {1, new
 * entry id} or {0, why} ("gone", "no job to retry").
 */
extern const char queue_dead_retry_lua[];

#endif
