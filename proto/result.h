/*
 * result.h - a job's result as a plain struct, and its msgpack codec.
 *
 * Pure code: no I/O, no globals. Used by the dispatcher and the worker
 * (encode results) and by libsandq and the CLI (decode them).
 * docs/protocol.md is the field-by-field reference; job.h has the job.
 *
 * Decoding runs payload_scan() (scan.h) first, as a job's does, and is
 * lenient: unknown fields are ignored, so a client keeps working when a newer
 * sandqd adds some.
 *
 * Lifecycle: result_new() -> fill -> payload_result_encode() -> result_free();
 * payload_result_decode() -> read -> result_free().
 */
#ifndef SANDQ_PROTO_RESULT_H
#define SANDQ_PROTO_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define RESULT_OUTPUT_MAX (1u << 30)	/* bytes of stdout or stderr in a result */

enum res_status {
	ST_OK = 0,
	ST_EXIT,
	ST_SIGNAL,
	ST_TIMEOUT,
	ST_CPU_LIMIT,
	ST_MEMORY_LIMIT,
	ST_PIDS_LIMIT,
	ST_OUTPUT_LIMIT,
	ST_DISK_LIMIT,
	ST_REJECTED,
	ST_CANCELLED,
	ST_EXPIRED,
	ST_INTERNAL,
	ST__COUNT,
};

#define RESULT_REFUSED_MAX 64	/* distinct refused syscalls a result lists */

/* A system call the job's seccomp filter refused, and how often. */
struct refusal {
	char *name;
	uint64_t count;
};

/*
 * A net "allow" job's connections to one host and port with one outcome
 * (sandqd fills them from the egress proxy's reports).
 */
struct result_egress {
	char *host;		/* the name (or address) the job asked for */
	uint16_t port;
	bool allowed;		/* reached (allowed by the list), or refused */
	char *reason;		/* refused: why; reached: how one failed, or NULL */
	uint64_t conns;		/* connections */
	uint64_t up, down;	/* bytes sent and received, over them all */
	uint64_t throttled_ms;	/* time the job's egress rate held them */
};

struct result {
	char *id;
	enum res_status status;
	int exit_code;		/* valid for ok/exit; -1 otherwise */
	int signal;		/* valid for signal/timeout kills; 0 otherwise */
	uint8_t *out;		/* captured stdout (owned) */
	size_t out_len;
	bool out_truncated;
	uint8_t *err;		/* captured stderr (owned) */
	size_t err_len;
	bool err_truncated;
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t max_rss_kb;
	uint64_t queued_at;	/* epoch ms */
	uint64_t started_at;	/* epoch ms, 0 if never started */
	uint64_t finished_at;	/* epoch ms */
	char *host;
	int64_t worker;		/* worker slot, -1 if none */
	int64_t attempt;
	char *error_code;	/* machine-readable, with error_message */
	char *error_message;
	struct refusal *refused;	/* syscalls refused to the job, by name */
	size_t nrefused;

	/* Persistent sandboxes. */
	char *sandbox;		/* the sandbox the job ran on, or NULL */
	uint64_t version;	/* its version after the job (0: none) */
	char *snapshot;		/* SHA-256 (hex) of that version's blob */
	char **changed;		/* paths the commit added, modified or removed */
	size_t nchanged;
	uint64_t added, modified, removed;	/* exact counts behind changed */
	bool changed_truncated;	/* more changes than RESULT_CHANGED_MAX */
	char **refused_paths;	/* changes the path rules kept out of the commit */
	size_t nrefused_paths;
	uint8_t *data;		/* fs/kv/sandbox ops: one msgpack object (owned) */
	size_t data_len;

	/* A run on an image other than host (sandqd fills them). */
	char *image;		/* the reference it ran on, canonical, or NULL */
	char *image_digest;	/* the manifest digest it took, or NULL */
	char *image_name;	/* the tenant's name it was asked by ("NAME:TAG") */

	/* net "allow": the hosts reached and refused (sandqd fills them). */
	struct result_egress *egress;
	size_t negress;
};

#define RESULT_EGRESS_MAX 64		/* host, port and outcome rows of egress */

#define RESULT_CHANGED_MAX 1024		/* paths a result lists in changed */
#define RESULT_REFUSED_PATHS_MAX 256	/* paths a result lists in refused_paths */
#define RESULT_DATA_MAX (1u << 30)	/* bytes of a result's data object */
#define RESULT_SNAPSHOT_MAX 64		/* bytes of a result's snapshot (hex SHA-256) */
#define RESULT_IMAGE_MAX 1024		/* bytes of a result's image, image_digest, image_name */

/*
 * A new result for job id (copied; NULL gives ""): status ok, exit_code and
 * worker -1, attempt 1, the rest zero. Never NULL (aborts on OOM).
 */
struct result *result_new(const char *id);
/* Frees every member; NULL is a no-op. */
void result_free(struct result *r);
/*
 * Counts one connection to host:port, allowed or refused with reason (NULL:
 * none), with its bytes and the time the egress rate held it, into the row of the same host, port, outcome and
 * reason; a new row while under RESULT_EGRESS_MAX, else false (not listed).
 */
bool result_add_egress(struct result *r, const char *host, uint16_t port, bool allowed,
    const char *reason, uint64_t up, uint64_t down, uint64_t throttled_ms);
/* Counts one refusal of syscall name (a new entry while under RESULT_REFUSED_MAX). */
void result_add_refusal(struct result *r, const char *name, uint64_t count);
/* Sets error_code/error_message (copied) and the status. */
void result_set_error(struct result *r, enum res_status st, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * Encodes r as msgpack. *out is malloc'd and owned by the caller. Returns 0,
 * -ENOMEM, or -EINVAL if r->data is set and is not exactly one msgpack
 * object of at most RESULT_DATA_MAX bytes.
 */
int payload_result_encode(const struct result *r, char **out, size_t *outlen);
/* Decodes a result; returns 0, -EBADMSG or -EINVAL with e set. */
int payload_result_decode(const void *buf, size_t len, struct result **out,
    struct err *e);

const char *res_status_name(enum res_status st);
int res_status_parse(const char *s, enum res_status *st);

#endif
