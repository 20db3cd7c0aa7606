/*
 * sandq.h - libsandq: submit sandq jobs to Redis and wait for their results.
 *
 * A C client of the wire protocol in docs/protocol.md: a job is an XADD of a
 * msgpack map to sandq:{TENANT}:jobs; its result is BLPOPed from
 * sandq:{TENANT}:done:ID and kept at sandq:{TENANT}:res:ID until its TTL.
 * This header is self-contained and is the library's only public header.
 *
 * Lifecycle:
 *   sandq_connect(url, tenant) -> sandq_submit_*() -> sandq_wait() ->
 *   sandq_result_free() ... -> sandq_close()
 *
 * A connection is a synchronous hiredis context: use one per thread. Every
 * function returns 0 or a negative errno; sandq_last_error() explains the
 * most recent failure on a connection in words.
 */
#ifndef SANDQ_CLIENT_H
#define SANDQ_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SANDQ_ID_MAX 128		/* bytes of a job id */

struct sandq;

/* Limits a job asks for; 0 leaves one to the preset. */
struct sandq_limits {
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t memory_bytes;
	uint64_t pids;
	uint64_t output_bytes;
	uint64_t disk_bytes;
	uint64_t files;
};

/* A file seeded into /workspace before the job runs. */
struct sandq_file {
	const char *path;		/* "a/b.txt" or "/a/b.txt": /workspace/a/b.txt */
	const void *data;
	size_t len;
};

/* Options common to every op. Zero-initialise, then set what you need. */
struct sandq_job_opts {
	const char *id;			/* NULL: a random id is made */
	const char *const *env;		/* "K=V" strings, NULL-terminated, or NULL */
	const char *cwd;		/* NULL: /workspace */
	const void *stdin_data;		/* with has_stdin */
	size_t stdin_len;
	bool has_stdin;
	struct sandq_limits limits;
	const char *preset;		/* "strict", "normal", "permissive" or NULL */
	const struct sandq_file *files;
	size_t nfiles;
	int64_t priority;		/* higher first within the tenant */
	int64_t deadline_ms;		/* epoch ms; 0 = none */
	const char *net;		/* network mode; NULL = "none" */
};

/* A system call the job's seccomp filter refused, and how many times. */
struct sandq_refusal {
	char *syscall;			/* its name, e.g. "mount" */
	uint64_t count;
};

/* A result (docs/protocol.md "Result"). Owned by the caller. */
struct sandq_result {
	char *id;
	char *status;			/* "ok", "exit", "timeout", "rejected", ... */
	int exit_code;			/* ok/exit; -1 otherwise */
	int signal;			/* signal that ended the job, or 0 */
	uint8_t *stdout_data;		/* NUL-terminated for convenience */
	size_t stdout_len;
	bool stdout_truncated;
	uint8_t *stderr_data;		/* NUL-terminated for convenience */
	size_t stderr_len;
	bool stderr_truncated;
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t max_rss_kb;
	uint64_t queued_at;		/* epoch ms */
	uint64_t started_at;
	uint64_t finished_at;
	char *host;			/* NULL if absent */
	int64_t worker;
	int64_t attempt;
	char *error_code;		/* NULL unless the result carries an error */
	char *error_message;
	struct sandq_refusal *refused;	/* syscalls refused to the job, by name */
	size_t nrefused;
};

/*
 * Connects to Redis (redis://HOST:PORT or unix:///PATH, with optional
 * USER:PASS@) for the given tenant. Returns NULL and, if err is not NULL,
 * writes a message into err (errlen bytes) on failure.
 */
struct sandq *sandq_connect(const char *url, const char *tenant, char *err,
    size_t errlen);
void sandq_close(struct sandq *c);

/* The message of the last failure on c. */
const char *sandq_last_error(const struct sandq *c);

/*
 * Submits a job; idbuf (SANDQ_ID_MAX + 1 bytes) receives its id. The _exec
 * form runs argv directly, _sh runs script with bash -c, _python runs code
 * with python3 -c. Returns 0 or -errno (-EINVAL for options the protocol
 * cannot carry, -EIO for Redis errors).
 */
int sandq_submit_exec(struct sandq *c, const char *const *argv,
    const struct sandq_job_opts *o, char *idbuf);
int sandq_submit_sh(struct sandq *c, const char *script,
    const struct sandq_job_opts *o, char *idbuf);
int sandq_submit_python(struct sandq *c, const char *code,
    const struct sandq_job_opts *o, char *idbuf);
/* Submits raw bytes as the entry's `job` field, unchecked (for tests). */
int sandq_submit_raw(struct sandq *c, const void *job, size_t len);

/*
 * Waits for a job's result: returns it at once if it is already stored,
 * else blocks until it arrives or timeout_ms passes (< 0: no limit), then
 * -ETIMEDOUT. *out owns the result.
 */
int sandq_wait(struct sandq *c, const char *id, int64_t timeout_ms,
    struct sandq_result **out);
/* The stored result, or -ENOENT if there is none (yet, or any longer). */
int sandq_result_get(struct sandq *c, const char *id, struct sandq_result **out);
/* Decodes a result from its msgpack bytes (as stored in Redis). */
int sandq_result_decode(const void *buf, size_t len, struct sandq_result **out);
void sandq_result_free(struct sandq_result *r);

/*
 * The exit status the sandq CLI gives a result: 0 for ok, the job's code for
 * exit, 128+N for a signal, 124 for a timeout or any *_limit, 125 when sandq
 * could not run the job (rejected, expired, cancelled, internal).
 */
int sandq_result_exit_status(const struct sandq_result *r);

#ifdef __cplusplus
}
#endif

#endif
