/*
 * audit.h - audit events: the model, its encodings, the local SQLite sink
 * and the bounded queue that feeds it.
 *
 * One event model serves every sink (docs/audit.md): a fixed-size struct
 * with bounded text fields, so an event is copied, queued and dropped
 * without allocation. It has three encodings, all with the same field
 * names: a JSON object (export, `sandq audit --json`), flat field/value
 * pairs (an XADD to sandq:{T}:audit, read back with XRANGE) and a row of
 * the local database.
 *
 * Lifecycle of the local sink, as sandqd uses it:
 *   audit_writer_start(path) -> audit_writer_emit() ... (any thread, never
 *   blocks) -> audit_writer_stats() ... -> audit_writer_stop()
 * and of a reader (the CLI):
 *   audit_db_open_readonly() -> audit_db_query() / audit_db_summary() ->
 *   audit_db_close()
 * audit_db_open() + audit_db_append() + audit_db_retain() are what the
 * writer thread runs; tests call them directly.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure; those taking a struct err * fill it with a message naming the
 * field, path or SQLite failure.
 */
#ifndef SANDQ_AUDIT_H
#define SANDQ_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/err.h"

/*** The model ***/

/*
 * Bounds, in bytes without the NUL. Ids match the protocol's bounds
 * (JOB_ID_MAX, JOB_SANDBOX_ID_MAX, JOB_TENANT_MAX); a host name is a DNS
 * name. target holds a syscall name, a limit name or a path: a sandbox
 * path (JOB_PATH_MAX 4096) is cut to AUDIT_TARGET_MAX, which keeps a
 * queued event under 2.6 KiB. detail is free text or compact JSON.
 */
#define AUDIT_HOST_MAX 255
#define AUDIT_TENANT_MAX 64
#define AUDIT_JOB_MAX 128
#define AUDIT_SANDBOX_MAX 128
#define AUDIT_ACTION_MAX 32
#define AUDIT_TARGET_MAX 1023
#define AUDIT_DETAIL_MAX 1023
/* Years 1970 to 9999: what RFC 3339 with four-digit years can spell. */
#define AUDIT_TIME_MAX 253402300799999LL

#define AUDIT_NFIELDS 11		/* fields of the model and of its encodings */
#define AUDIT_TIME_LEN 24		/* "2024-05-01T12:34:56.789Z" */

/* What an event is about. Names are the lower-case words after AUDIT_CAT_. */
enum audit_category {
	AUDIT_CAT_JOB = 0,		/* received, rejected, started, finished... */
	AUDIT_CAT_SANDBOX,		/* created, forked, deleted, exported, imported */
	AUDIT_CAT_SYSCALL,		/* a refused system call; target its name */
	AUDIT_CAT_PATH,			/* a path rule refused a change; target the path */
	AUDIT_CAT_QUOTA,		/* a quota refused a job; target the limit */
	AUDIT_CAT_POLICY,		/* the server's policy refused something */
	AUDIT_CAT_TENANT,		/* a tenant was added, changed or removed */
	AUDIT_CAT_AUDIT,		/* the trail itself: events it had to drop */
	AUDIT_CAT_IMAGE,		/* a host pulled an image into its cache */
	AUDIT_CAT__COUNT,
};

/* Severity, ordered: a filter keeps events at or above a level. */
enum audit_level {
	AUDIT_LVL_INFO = 0,		/* normal operation */
	AUDIT_LVL_NOTICE,		/* normal but worth a look (a retry) */
	AUDIT_LVL_WARNING,		/* a refusal, a job that failed */
	AUDIT_LVL_ALERT,		/* someone tried what the sandbox forbids */
	AUDIT_LVL__COUNT,
};

struct audit_event {
	int64_t time_ms;				/* epoch ms, UTC */
	char host[AUDIT_HOST_MAX + 1];			/* the sandqd host, or "" */
	char tenant[AUDIT_TENANT_MAX + 1];		/* or "" for the host's own */
	char job[AUDIT_JOB_MAX + 1];			/* job id, or "" */
	char sandbox[AUDIT_SANDBOX_MAX + 1];		/* sandbox id, or "" */
	enum audit_category category;
	char action[AUDIT_ACTION_MAX + 1];		/* [a-z0-9_.], 1..32 bytes */
	char target[AUDIT_TARGET_MAX + 1];		/* what it acted on, or "" */
	bool allowed;					/* false: refused or failed */
	enum audit_level level;
	char detail[AUDIT_DETAIL_MAX + 1];		/* free text or compact JSON */
};

/* The names of the fields, in the order of every encoding. */
extern const char *const audit_field_names[AUDIT_NFIELDS];

/* "job", "syscall"...; NULL for a value out of range. */
const char *audit_category_name(enum audit_category c);
/* The category named s (exact, lower case). 0 or -EINVAL. */
int audit_category_parse(const char *s, enum audit_category *out);
/* "info", "notice", "warning", "alert"; NULL out of range. */
const char *audit_level_name(enum audit_level l);
/* The level named s. 0 or -EINVAL. */
int audit_level_parse(const char *s, enum audit_level *out);

/*
 * Fills ev for an event happening now on no particular host, tenant, job
 * or sandbox: the caller then sets what applies (audit_text_set() for the
 * strings). action and target are cut to their bounds, detail is "".
 */
void audit_event_init(struct audit_event *ev, enum audit_category c,
    const char *action, const char *target, bool allowed,
    enum audit_level level);
/*
 * Copies src into dst of size bytes, cut at a UTF-8 character boundary if
 * it does not fit. Returns true if it was cut. src NULL copies "".
 */
bool audit_text_set(char *dst, size_t size, const char *src);
/*
 * Checks every field against the model: bounds, enum ranges, time range,
 * ids and action without control characters, all text valid UTF-8.
 * 0 or -EINVAL with e naming the field.
 */
int audit_event_check(const struct audit_event *ev, struct err *e);

/*** Times and durations (pure) ***/

/* Writes "YYYY-MM-DDTHH:MM:SS.mmmZ" (AUDIT_TIME_LEN + 1 bytes). 0 or -ERANGE. */
int audit_time_format(int64_t ms, char buf[AUDIT_TIME_LEN + 1]);
/*
 * Parses RFC 3339 UTC as written above, the fraction optional (1 to 3
 * digits) and only "Z" as the zone. 0 or -EINVAL.
 */
int audit_time_parse(const char *s, int64_t *ms);
/* Parses "30s", "10m", "2h", "7d", "1w" (a positive integer and a unit). */
int audit_duration_parse(const char *s, int64_t *ms);

/*** JSON ***/

/*
 * One object with exactly the fields of audit_field_names, in that order:
 * time as RFC 3339 text, allowed a boolean, the rest strings. Returns a new
 * reference, or NULL if ev fails audit_event_check() (or on OOM).
 */
json_t *audit_event_to_json(const struct audit_event *ev);
/*
 * Strict inverse: every field present once with its type, nothing else,
 * every value within the model. Does not take a reference on obj.
 * 0 or -EINVAL with e naming the field.
 */
int audit_event_from_json(const json_t *obj, struct audit_event *ev,
    struct err *e);

/*** Flat fields (Redis streams) ***/

/*
 * An event as field/value pairs for XADD: argv-style arrays for hiredis's
 * redisCommandArgv(). Field names are audit_field_names; time is the
 * decimal epoch ms, allowed "true" or "false", the rest as in JSON.
 * values[] point into the event and into time_buf: both must outlive use.
 */
struct audit_fields {
	const char *name[AUDIT_NFIELDS];	/* static field names */
	const char *value[AUDIT_NFIELDS];	/* NUL-terminated values */
	size_t name_len[AUDIT_NFIELDS];
	size_t value_len[AUDIT_NFIELDS];
	char time_buf[24];			/* the decimal time */
};

/* Fills f from ev. 0 or -EINVAL (ev fails audit_event_check()). */
int audit_event_to_fields(const struct audit_event *ev, struct audit_fields *f,
    struct err *e);
/*
 * Strict inverse from n field/value pairs as read back (binary-safe, with
 * lengths): every field once, no other, values within the model. Nothing
 * here trusts the stream: a tenant's own Redis user can write to it.
 * 0 or -EINVAL with e naming the field.
 */
int audit_event_from_fields(struct audit_event *ev, size_t n,
    const char *const *names, const size_t *name_lens,
    const char *const *values, const size_t *value_lens, struct err *e);

/* The tenant's stream: "PREFIX:{TENANT}:audit". Length, or -ENAMETOOLONG. */
int audit_stream_key(char *buf, size_t size, const char *prefix,
    const char *tenant);

/*** Filters and summaries (pure) ***/

enum audit_outcome {
	AUDIT_ANY = 0,
	AUDIT_ALLOWED_ONLY,
	AUDIT_DENIED_ONLY,
};

/* What to select; all zero selects everything. */
struct audit_filter {
	const char *tenant;		/* exact, or NULL for any */
	const char *job;		/* exact, or NULL */
	const char *sandbox;		/* exact, or NULL */
	unsigned categories;		/* bit (1u << category), or 0 for any */
	enum audit_level level_min;	/* at or above */
	enum audit_outcome outcome;
	int64_t since_ms;		/* time >= since_ms, if > 0 */
	int64_t until_ms;		/* time < until_ms, if > 0 */
};

/* True if ev passes f. */
bool audit_filter_match(const struct audit_filter *f,
    const struct audit_event *ev);

/* One group of a summary. */
struct audit_count {
	enum audit_category category;
	char action[AUDIT_ACTION_MAX + 1];
	bool allowed;
	uint64_t count;
};

/* Called per event or per group; a non-zero return stops and is returned. */
typedef int (*audit_event_cb)(const struct audit_event *ev, void *arg);
typedef int (*audit_count_cb)(const struct audit_count *c, void *arg);

/*
 * Counts events in memory by (category, action, allowed), for sources that
 * cannot group for us (a Redis stream). Bounded by AUDIT_SUMMARY_GROUPS
 * distinct groups: past it audit_summary_add() returns -ENOBUFS.
 */
#define AUDIT_SUMMARY_GROUPS 4096
struct audit_summary;

struct audit_summary *audit_summary_new(void);
/* Counts one event, or adds a group's count. 0 or -ENOBUFS. */
int audit_summary_add(struct audit_summary *s, const struct audit_event *ev);
int audit_summary_add_count(struct audit_summary *s,
    const struct audit_count *c);
/* Calls cb per group, ordered by category, action, allowed. */
int audit_summary_each(const struct audit_summary *s, audit_count_cb cb,
    void *arg);
void audit_summary_free(struct audit_summary *s);

/*** The local database (db.c) ***/

struct audit_db;

/*
 * Opens (creating it 0600 if missing, refusing a symlink) the database at
 * path for appending: WAL, synchronous=NORMAL, a busy timeout, the schema
 * and its append-only triggers. *out is the caller's to audit_db_close().
 */
int audit_db_open(const char *path, struct audit_db **out, struct err *e);
/*
 * Opens an existing database read-only (the CLI): nothing it does can
 * change the trail. -ENOENT if it is missing, -EPROTO if it is not one.
 */
int audit_db_open_readonly(const char *path, struct audit_db **out,
    struct err *e);
/* Closes; NULL is a no-op. */
void audit_db_close(struct audit_db *db);
/*
 * Appends n events in one transaction: all or none. Each is checked
 * against the model first (-EINVAL names the event and field).
 */
int audit_db_append(struct audit_db *db, const struct audit_event *evs,
    size_t n, struct err *e);
/*
 * Retention, the only way rows leave: deletes the events older than
 * max_age_ms (0: no age limit), then the oldest until the pages in use
 * are at most 90% of max_bytes (0: no size limit), and gives the freed
 * pages back to the file system. *deleted (may be NULL) gets the count.
 */
int audit_db_retain(struct audit_db *db, int64_t max_age_ms,
    uint64_t max_bytes, uint64_t *deleted, struct err *e);
/* Bytes of the database's pages in use (page_count - freelist_count). */
int audit_db_size(struct audit_db *db, uint64_t *bytes, struct err *e);
/* Calls cb for each event passing f, ordered by time then arrival. */
int audit_db_query(struct audit_db *db, const struct audit_filter *f,
    audit_event_cb cb, void *arg, struct err *e);
/* Calls cb per (category, action, allowed) group of the events passing f. */
int audit_db_summary(struct audit_db *db, const struct audit_filter *f,
    audit_count_cb cb, void *arg, struct err *e);

/*** The bounded queue (queue.c) ***/

/*
 * A fixed ring of events with no locking of its own, for any sink that
 * drains in batches: the writer below wraps it in a mutex; a single-
 * threaded libuv loop can use it bare. Slots handed out by peek stay
 * owned by the ring until consumed, so a failed write loses nothing.
 */
struct audit_ring {
	struct audit_event *slot;	/* cap events */
	size_t cap;
	size_t head;			/* oldest queued */
	size_t count;			/* queued */
	uint64_t dropped;		/* pushes refused because full */
};

/* Allocates cap slots (untouched pages cost nothing). 0 or -EINVAL. */
int audit_ring_init(struct audit_ring *r, size_t cap);
void audit_ring_free(struct audit_ring *r);
/* Copies ev in; -ENOBUFS (and dropped + 1) when full. O(1). */
int audit_ring_push(struct audit_ring *r, const struct audit_event *ev);
/*
 * Points *first at the oldest queued event and returns how many follow it
 * contiguously (at most max): a batch that needs no copy.
 */
size_t audit_ring_peek(const struct audit_ring *r, size_t max,
    const struct audit_event **first);
/* Frees the n oldest slots (n <= count). */
void audit_ring_consume(struct audit_ring *r, size_t n);

#define AUDIT_QUEUE_DEFAULT 4096	/* events queued at most, by default */
#define AUDIT_QUEUE_MAX 1000000		/* largest bound accepted */
#define AUDIT_BATCH_MAX 256		/* events per transaction */

struct audit_writer;

/* Retention the writer applies now and then; zeros keep everything. */
struct audit_retention {
	int64_t max_age_ms;
	uint64_t max_bytes;
	int64_t every_ms;		/* between two runs; 0: AUDIT_RETAIN_EVERY_MS */
};
#define AUDIT_RETAIN_EVERY_MS 60000

/*
 * Starts the writer thread for the database at path, queueing at most
 * max_queued events (0: AUDIT_QUEUE_DEFAULT). A database that cannot be
 * opened yet is not an error: the thread retries with backoff while
 * events queue. ret may be NULL (no retention). Fails only on bad
 * arguments or when no thread can be made.
 */
int audit_writer_start(struct audit_writer **out, const char *path,
    size_t max_queued, const struct audit_retention *ret, struct err *e);
/*
 * Queues a copy of ev (time_ms 0 means now). Never blocks on I/O: takes a
 * mutex held only by other pushes and the writer's bookkeeping, copies
 * one event, and returns. -ENOBUFS when the queue is full: the event is
 * dropped and counted, and the writer records the loss as an event of
 * category "audit" once it can write again.
 */
int audit_writer_emit(struct audit_writer *w, const struct audit_event *ev);
/* Counters since start; any pointer may be NULL. */
void audit_writer_stats(struct audit_writer *w, uint64_t *queued,
    uint64_t *written, uint64_t *dropped, uint64_t *failed_writes);
/*
 * Stops the thread after it has written what it can within timeout_ms,
 * then frees w (NULL is a no-op). Returns the events still queued, which
 * are lost.
 */
size_t audit_writer_stop(struct audit_writer *w, int timeout_ms);

#endif
