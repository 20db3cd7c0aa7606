/*
 * status.h - the operator's view of the hosts and tenants on one Redis,
 * shared by `sandq status` (cli/cli_status.c, synchronous hiredis) and the
 * gateway's GET /v1/admin/status (gateway/admin.c, async hiredis).
 *
 * The caller reads three things on its own connection and hands over the
 * replies: HGETALL PREFIX:hosts (each sandqd's JSON status,
 * dispatcher/status.c), SMEMBERS PREFIX:tenants, then XLEN of each
 * tenant's job stream (whose length is its jobs not yet finished). The
 * figures are then one JSON object, the object `sandq status --json`
 * prints: {"workers", "live_hosts", "hosts": [...], "tenants": [...]}.
 * Its schema is stable (docs/operations.md "Health"): members may be
 * added, never renamed or removed.
 */
#ifndef SANDQ_QUEUE_STATUS_H
#define SANDQ_QUEUE_STATUS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct redisReply;

#define QUEUE_STATUS_STALE_MS 10000	/* a host quieter than this is gone */
#define QUEUE_STATUS_TENANTS_MAX 4096	/* tenants a view lists */

struct queue_status;

/* An empty view as of now_ms (epoch ms). */
struct queue_status *queue_status_new(uint64_t now_ms);
void queue_status_free(struct queue_status *s);
/*
 * The HGETALL of PREFIX:hosts: each host, and what each live one says of
 * each tenant. A value that is not a JSON object is skipped; a name that
 * is not UTF-8 is listed escaped.
 */
void queue_status_hosts(struct queue_status *s, const struct redisReply *r);
/* The SMEMBERS of PREFIX:tenants: tenants no live host reports on yet. */
void queue_status_tenants(struct queue_status *s, const struct redisReply *r);
/* The tenants whose streams' XLEN the caller reads next, in order. */
size_t queue_status_count(const struct queue_status *s);
const char *queue_status_name(const struct queue_status *s, size_t i);
/* Tenant i's XLEN (its unfinished jobs); the rest of running are queued. */
void queue_status_backlog(struct queue_status *s, size_t i, long long xlen);
/*
 * Host i's name as its sandqd wrote it (the JSON holds it escaped when it
 * is not UTF-8), for a terminal that escapes it itself; NULL past the end.
 */
const char *queue_status_host(const struct queue_status *s, size_t i, size_t *len);
/* Hosts that reported within QUEUE_STATUS_STALE_MS (`sandq status` exits 1 at 0). */
size_t queue_status_live_hosts(const struct queue_status *s);
/* The view as JSON (owned): {"workers", "live_hosts", "hosts", "tenants"}. */
json_t *queue_status_json(const struct queue_status *s);

#endif
