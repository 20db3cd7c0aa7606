/*
 * redis.h - sandqd's two Redis connections, on its libuv loop.
 *
 * One connection only ever carries the blocking XREADGROUP (so a read that
 * waits for jobs never delays a result), the other carries everything else:
 * consumer-group creation, results, acks, dead letters. Both reconnect on
 * their own with backoff (100 ms doubling to 5 s); while either is down,
 * commands fail with -ENOTCONN and the caller keeps what it must retry.
 *
 * Lifecycle: rq_new(loop, url, tenants, callbacks) -> rq_start() ->
 * rq_read()/rq_publish()/rq_dead() as needed -> rq_close() -> rq_free()
 * after the loop has run the close callbacks.
 */
#ifndef SANDQ_QUEUE_REDIS_H
#define SANDQ_QUEUE_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../common/err.h"

struct rq;

struct rq_callbacks {
	/* Both connections are up and every group exists. */
	void (*ready)(void *arg);
	/* A connection was lost; reads and publishes in flight have failed. */
	void (*lost)(void *arg);
	/*
	 * One stream entry from rq_read() or rq_reclaim(). tenant indexes the
	 * tenant list; job/joblen is the entry's `job` field, or NULL when
	 * the entry has none (or was deleted); nfields counts the entry's
	 * field-value pairs; redelivered: read before by some host (our
	 * history, or taken over from another), so it may have run already.
	 */
	void (*entry)(void *arg, size_t tenant, const char *entry_id,
	    const char *job, size_t joblen, size_t nfields, bool redelivered);
	/* A new entry seen by rq_watch() (job as for entry). */
	void (*watched)(void *arg, size_t tenant, const char *entry_id,
	    const char *job, size_t joblen);
	/* rq_watch() finished: 0 or -errno. */
	void (*watch_done)(void *arg, int status);
	/* rq_read() finished: status 0 (n entries delivered) or -errno. */
	void (*read_done)(void *arg, int status, size_t n);
};

struct audit_event;

/* Completion of rq_publish()/rq_dead(): status 0 or -errno. */
typedef void rq_done_cb(void *arg, int status);

/*
 * Creates the connection pair (not yet connected). Copies url, prefix,
 * consumer and tenant names. Returns NULL with e set on a bad url.
 */
struct rq *rq_new(uv_loop_t *loop, const char *url, const char *prefix,
    const char *consumer, char *const *tenants, size_t ntenants,
    const struct rq_callbacks *cb, void *arg, struct err *e);
/* Connects both; ready() fires once the groups exist. */
void rq_start(struct rq *q);
bool rq_is_ready(const struct rq *q);

/*
 * XREADGROUP over the tenant streams i with want[i] (want NULL: all of
 * them): history (our own pending entries, after a restart) when history
 * is true, else new entries; up to count per stream; blocks up to block_ms
 * (0: does not block). One read at a time: -EBUSY otherwise.
 */
int rq_read(struct rq *q, bool history, size_t count, int64_t block_ms,
    const bool *want);
bool rq_read_pending(const struct rq *q);
/* Wakes a blocked read at once (CLIENT UNBLOCK), e.g. to drain. */
void rq_unblock(struct rq *q);

/*
 * A job that ran out of attempts: with its result, an entry on the
 * tenant's dead-letter stream with fields entry, id, reason (the last
 * failure), attempts (JSON array, one object per failed attempt),
 * payload (the job as it ran, msgpack; cut at 1 MiB) and
 * payload_truncated ("1" when cut). docs/protocol.md describes them.
 */
struct rq_dead_rec {
	const char *reason;
	const char *attempts;
	const void *payload;
	size_t payload_len;
};

/*
 * Stores a result and acknowledges its entry in one transaction: a script
 * that SETs res (TTL) only if the job has no result yet and then DEL +
 * RPUSH + PEXPIRE its done list (the first result wins: a job that ran
 * twice shows once), and in every case XACKs and deletes the entry and its
 * attempts record; dead, when set, adds the dead-letter entry;
 * eof_status, when set (a job with live output), ends its output stream
 * with {eof: 1, status}; ev the audit events. The ack never precedes the store.
 */
int rq_publish(struct rq *q, size_t tenant, const char *id, const char *entry_id,
    const void *res, size_t reslen, int64_t ttl_ms, const struct rq_dead_rec *dead,
    const char *eof_status, const struct audit_event *ev, size_t nev,
    rq_done_cb *cb, void *arg);

/*
 * Live output of a job with stream: true: XADD of {fd, data} to
 * PREFIX:{T}:out:ID and PEXPIRE ttl_ms, pipelined on the command
 * connection (so chunks and the result's eof entry keep their order).
 * Fire and forget: -ENOTCONN while down (the chunk is lost; the result
 * still carries the whole output).
 */
int rq_output(struct rq *q, size_t tenant, const char *id, int fd, const void *data,
    size_t len, int64_t ttl_ms);

/*
 * Appends a failed attempt's record (JSON text) to the job's attempts list
 * (PREFIX:{T}:attempts:ID, TTL ttl_ms), so the host that runs it next, or
 * takes it over, knows its past. Fire and forget: -ENOTCONN while down.
 */
int rq_attempt_add(struct rq *q, size_t tenant, const char *id, const char *record,
    int64_t ttl_ms);

/*
 * Records an entry that cannot be answered (no readable id) on the tenant's
 * dead-letter stream with the reason, and acknowledges it, in one MULTI/EXEC.
 */
int rq_dead(struct rq *q, size_t tenant, const char *entry_id,
    const char *reason, const void *raw, size_t rawlen,
    const struct audit_event *ev, size_t nev, rq_done_cb *cb, void *arg);

/*
 * Audit events ride with results and dead letters: rq_publish() and
 * rq_dead() add each of ev[0..nev) to its tenant's audit stream
 * (PREFIX:{T}:audit) in the same transaction, trimmed with MAXLEN ~ max,
 * set here once (the default is 100000).
 */
void rq_audit_max(struct rq *q, int64_t max);
/* Adds events that belong to no job (a tenant change) to their tenants'
 * audit streams, outside any transaction. -ENOTCONN while Redis is down. */
int rq_audit(struct rq *q, const struct audit_event *ev, size_t nev);

/*
 * Adds a tenant stream at run time: its consumer group is created, and
 * rq_read() takes its stream once the group exists. The tenant's index is
 * the old tenant count. 0 or -errno with e.
 */
int rq_add_tenant(struct rq *q, const char *name, struct err *e);

/*
 * The tenants kept in Redis (queue/tenant.h): status 1 when the change
 * counter is still known_gen (nothing else read), 0 with the n tenants of
 * the set (confs[i] valid only where ok[i]: a record that does not decode
 * is logged and left out), or -errno. confs and ok live only during the
 * call.
 */
struct tenant_conf;
typedef void rq_tenants_cb(void *arg, int status, const struct tenant_conf *confs,
    const bool *ok, size_t n, uint64_t gen);
/* Starts one load; -EBUSY while one is in flight, -ENOTCONN when down. */
int rq_tenants_load(struct rq *q, uint64_t known_gen, rq_tenants_cb *cb, void *arg);

/*
 * Admission of new entries (max_queued and rate, docs/tenants.md), on a
 * connection of its own: rq_watch() XREADs the new entries of the streams
 * of tenants with want[i] (every host sees every entry), and rq_admit()
 * decides one atomically for all hosts: the verdict is 0 admitted, 1 queue
 * full or 2 over the rate (the entry was deleted: the caller answers it),
 * 3 refused earlier (whoever refused it answered it), or -errno; before is
 * the number of unfinished jobs ahead of it (-1 when not counted). The
 * reader of a capped tenant asks too, before it queues an entry, so a job
 * is never run unless admitted.
 */
int rq_watch(struct rq *q, const bool *want, int64_t block_ms);
typedef void rq_admit_cb(void *arg, int verdict, long long before);
int rq_admit(struct rq *q, size_t tenant, const char *entry_id, uint32_t max_queued,
    double rate, uint32_t burst, rq_admit_cb *cb, void *arg);

/*
 * Leases: rq_lease() renews this host's hold on entries it has read
 * (XCLAIM ... JUSTID, min idle 0: their idle time restarts); rq_reclaim()
 * takes over up to count entries of the tenant idle for min_idle_ms, held
 * by a host that stopped renewing them (XAUTOCLAIM), and hands them to the
 * entry callback as redelivered, then read_done.
 */
int rq_lease(struct rq *q, size_t tenant, const char *const *ids, size_t n);
int rq_reclaim(struct rq *q, size_t tenant, int64_t min_idle_ms, size_t count);
/*
 * A tenant's image name (key_images(), field key: "NAME:TAG"): status 1
 * with its stored value (JSON text, living only during the call), 0 when
 * the tenant has no such name, or -errno.
 */
typedef void rq_image_name_cb(void *arg, int status, const char *val, size_t len);
int rq_image_name_get(struct rq *q, size_t tenant, const char *name,
    rq_image_name_cb *cb, void *arg);
/*
 * A sandbox's allow list (key_sbxallow(), field sandbox): as
 * rq_image_name_get(), the value the patterns comma-separated.
 */
int rq_sbxallow_get(struct rq *q, size_t tenant, const char *sandbox,
    rq_image_name_cb *cb, void *arg);
/*
 * Sets sandbox's allow list to value, or forgets it (value NULL). No
 * answer: a failure is logged. Returns 0, or -errno.
 */
int rq_sbxallow_set(struct rq *q, size_t tenant, const char *sandbox, const char *value);
/*
 * Gives sandbox `to` the list of `from` (or none), in one step on the
 * connection results go out on, so a run on `to` after the fork's result
 * reads it. No answer. Returns 0, or -errno.
 */
int rq_sbxallow_copy(struct rq *q, size_t tenant, const char *from, const char *to);

/*
 * What a redelivered entry's job left behind, in one round trip: status 1
 * with its stored result, 0 with none, or -errno; and either way the
 * records of its failed attempts (JSON texts, oldest first). Everything
 * lives only during the call.
 */
typedef void rq_redelivery_cb(void *arg, int status, const char *res, size_t reslen,
    const char *const *attempts, size_t nattempts);
int rq_redelivery_get(struct rq *q, size_t tenant, const char *id,
    rq_redelivery_cb *cb, void *arg);

/*
 * Which of the given jobs (tenant index and id, pairwise) a `sandq cancel`
 * asked to stop: one MGET of their PREFIX:{T}:cancel:ID keys; cb runs for
 * each one that has a key. The ids are copied.
 */
typedef void rq_cancels_cb(void *arg, size_t tenant, const char *id);
int rq_cancels(struct rq *q, const size_t *tenants, const char *const *ids, size_t n,
    rq_cancels_cb *cb, void *arg);

/*
 * One tenant's job stream, cluster-wide, for the metrics (one EVAL on the
 * command connection, reads only): entries (XLEN: every job not yet
 * answered), taken (handed to a host by the consumer group and not yet
 * acknowledged: queued or running there), waiting (entries - taken: read
 * by no host yet), and the ages in ms by Redis's clock of the oldest entry
 * and of the oldest waiting one (-1: none). cb gets status 0 with s (valid
 * only during the call), or -errno with s NULL (-ENOTCONN: Redis down).
 */
struct rq_qstats {
	uint64_t entries, taken, waiting;
	int64_t oldest_ms, oldest_waiting_ms;
};
typedef void rq_qstats_cb(void *arg, int status, size_t tenant,
    const struct rq_qstats *s);
int rq_qstats(struct rq *q, size_t tenant, rq_qstats_cb *cb, void *arg);

/* HSET PREFIX:hosts host json (fire and forget; -ENOTCONN when down). */
int rq_host_status(struct rq *q, const char *host, const char *json);
/* SET PREFIX:perm_presets json (likewise): the path presets, for clients. */
int rq_perm_presets(struct rq *q, const char *json);

/* Disconnects both connections; rq_free() after the loop has run. */
void rq_close(struct rq *q);
void rq_free(struct rq *q);

#endif
