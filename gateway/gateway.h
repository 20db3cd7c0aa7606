/*
 * gateway.h - sandq-gateway: HTTP requests into Redis stream entries and
 * results into responses (docs/gateway.md), on one libuv loop.
 *
 * The process keeps no state of its own: every request acts as the tenant
 * its API token names (queue/token.h), becomes the entry a Redis client
 * would XADD, and is answered from the result keys sandqd writes. Any
 * number of gateways can serve the same Redis.
 *
 * Lifecycle: fill a struct gw_opts -> gw_run() (returns when the loop
 * stops, which it does only on a fatal start-up error).
 */
#ifndef SANDQ_GATEWAY_H
#define SANDQ_GATEWAY_H

#include <stddef.h>

#include "../common/err.h"

#define GW_WAIT_MAX_S 60	/* bound of GET /v1/jobs/ID?wait=SECONDS */

struct gw_opts {
	const char *listen;	/* "ADDR:PORT", IPv4 or [IPv6] */
	const char *redis;	/* redis:// or unix:// URL (proto/url.h) */
	const char *prefix;	/* key prefix, "sandq" by default */
	size_t max_body;	/* bytes of a request body */
	size_t max_streams;	/* open GET /v1/jobs/ID/events at most */
	uint64_t poll_ms;	/* a long poll's GET period when no publish wakes it */
	const char *mcp_origins;	/* Origins /v1/mcp takes besides its own: "A,B" */
	size_t max_connections;	/* open client connections at most */
	size_t max_batch_body;	/* bytes of a POST /v1/batches body */
	const char *dashboard;	/* the dashboard's folder; NULL or "": the default */
};

/*
 * Listens on o->listen and serves until the process is killed. Returns
 * only on a start-up failure: -errno with e naming what failed.
 */
int gw_run(const struct gw_opts *o, struct err *e);

#endif
