/*
 * keys.h - Redis key names (docs/protocol.md, Keys), in one place.
 *
 * Every per-tenant key carries the tenant in a {hash tag}, so all of one
 * tenant's keys share a Redis Cluster slot and one MULTI can touch them.
 * Functions write a NUL-terminated name into buf (KEY_MAX bytes) and return
 * its length, or -ENAMETOOLONG. Pure.
 */
#ifndef SANDQ_PROTO_KEYS_H
#define SANDQ_PROTO_KEYS_H

#include <stddef.h>

#define KEY_MAX 512
#define KEY_GROUP "sandq"	/* the consumer group of every job stream */

int key_jobs(char *buf, const char *prefix, const char *tenant);
int key_res(char *buf, const char *prefix, const char *tenant, const char *id);
int key_done(char *buf, const char *prefix, const char *tenant, const char *id);
int key_dead(char *buf, const char *prefix, const char *tenant);
/* A job's failed attempts so far: a list of JSON records, until its result. */
int key_attempts(char *buf, const char *prefix, const char *tenant, const char *id);
/* A job's live output (stream: true): a stream of chunks, then eof. */
int key_out(char *buf, const char *prefix, const char *tenant, const char *id);
/* A cancellation asked for a job that some host holds (sandq cancel). */
int key_cancel(char *buf, const char *prefix, const char *tenant, const char *id);
/* The progress of a `sandq batch` run (a hash, with a TTL). */
int key_batch(char *buf, const char *prefix, const char *tenant, const char *id);
/*
 * The pub/sub channel a job's id is published on when its result is
 * stored (sandqd's publish, the cancel script): "PREFIX:{T}:results". A
 * waiter that polls may listen to it to look again at once.
 */
int key_results(char *buf, const char *prefix, const char *tenant);
/* A gateway batch's cases: a hash, LINE -> what the case expects (JSON). */
int key_bcases(char *buf, const char *prefix, const char *tenant, const char *id);
/* A tenant's image names (sandq image tag): a hash, NAME:TAG -> JSON. */
int key_images(char *buf, const char *prefix, const char *tenant);
/*
 * The allow lists sandboxes were created with (sandbox.create's allow): a
 * hash, SANDBOX -> patterns, comma-separated. sandqd's alone.
 */
int key_sbxallow(char *buf, const char *prefix, const char *tenant);
/*
 * The Redis snapshot store's keys (docs/store.md, "The Redis store"):
 * "prefix:{tenant}:kind:id", or "prefix:{tenant}:kind" when id is NULL.
 * kind is one of sbx, sbxv, sbxj, blob, chunk (with an id) or sbxs, refs,
 * crefs (without); kind "" with no id gives the keys' common start,
 * "prefix:{tenant}:".
 */
int key_store(char *buf, const char *prefix, const char *tenant,
    const char *kind, const char *id);
/* True if name is a valid tenant name: 1..64 bytes of [A-Za-z0-9_-]. */
int key_tenant_valid(const char *name);

#endif
