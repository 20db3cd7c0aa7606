/*
 * msg.h - the framed message protocol between sandqd and its workers.
 *
 * The channel is a socketpair(AF_UNIX, SOCK_SEQPACKET): the kernel keeps each
 * sendmsg() one record, so a frame always arrives whole and the dispatcher
 * never reassembles partial frames on its event loop. A frame is
 *
 *     struct msg_hdr (16 bytes, host byte order) + len payload bytes
 *
 * with len <= MSG_MAX. A payload larger than MSG_MAX travels as a sealed
 * memfd passed with SCM_RIGHTS: the frame then has MSG_F_MEMFD set and an
 * 8-byte payload holding the blob size, which must be <= MSG_BLOB_MAX.
 * A frame may also carry one plain file descriptor (MSG_F_FD).
 *
 * Types are numbered by direction: 1xx dispatcher -> worker, 2xx worker ->
 * dispatcher, 3xx worker log records; 4xx and 5xx stay inside a worker's
 * process family (its sandbox inits and its spawner). Changing the layout of any frame or the
 * meaning of a type means bumping MSG_VERSION; the first frame a worker sends
 * is MSG_HELLO with its version, and the dispatcher refuses a mismatch.
 *
 * Lifecycle: msg_recv() fills a struct msg that owns its payload; the caller
 * releases it with msg_clear(). A malformed or oversized frame is reported as
 * -EBADMSG: the peer is treated as compromised (workers exit; the dispatcher
 * kills and respawns the worker).
 */
#ifndef SANDQ_COMMON_MSG_H
#define SANDQ_COMMON_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MSG_VERSION 1
/* Largest inline payload: under the default socket buffer (212992 bytes). */
#define MSG_MAX (128u * 1024u)
/* Largest blob passed as a memfd (jobs, results with captured output). */
#define MSG_BLOB_MAX (256u * 1024u * 1024u)

#define MSG_F_MEMFD 0x1		/* payload is a memfd; inline part is u64 size */
#define MSG_F_FD 0x2		/* one extra descriptor rides with the frame */

enum msg_type {
	/* 1xx: dispatcher -> worker. */
	MSG_JOB_RUN = 100,	/* payload: normalised job (msgpack) */
	MSG_SHUTDOWN = 101,	/* empty: finish and exit */
	MSG_JOB_TENANT = 102,	/* struct msg_job_tenant: before each MSG_JOB_RUN */
	/* 2xx: worker -> dispatcher. */
	MSG_HELLO = 200,	/* payload: struct msg_hello */
	MSG_JOB_DONE = 201,	/* payload: result (msgpack) */
	MSG_JOB_OUTPUT = 203,	/* payload: u8 fd (1 or 2) + live output bytes */
	MSG_JOB_NET = 204,	/* empty + the listener the job's proxy variables
				 * name, made in the job's network namespace
				 * (net "allow"; egress/proxy.c accepts on it) */
	MSG_JOB_COMMITTED = 202,	/* payload: u64, the version the job's commit
				 * made: sent at once, so a worker that dies
				 * before its result is not run again */
	/* 3xx: log records from a worker. */
	MSG_LOG = 300,		/* payload: u32 level + text */
	/* 4xx: worker <-> its prepared sandbox's init process. */
	MSG_SBX_SPEC = 400,	/* worker -> init: normalised job (msgpack) */
	MSG_SBX_READY = 401,	/* init -> worker: empty, the image is built */
	MSG_SBX_EXEC = 402,	/* init -> worker: struct msg_sbx_exec */
	MSG_SBX_EXIT = 403,	/* init -> worker: struct msg_sbx_exit */
	MSG_SBX_FAIL = 404,	/* init -> worker: u8 kind + text of the step */
	MSG_SBX_GO = 405,	/* worker -> init: empty, ids mapped and cgroup joined */
	MSG_SBX_PIPE = 406,	/* init -> worker: u8 1 (stdout) or 2 (stderr), + read end */
	MSG_SBX_NOTIFY = 407,	/* init -> worker: empty, + the job filter's listener */
	MSG_SBX_COMMIT = 408,	/* worker -> init: tool call record (JSON): capture now */
	MSG_SBX_CHANGES = 409,	/* init -> worker: u64 added, modified, removed,
				 * refused; then records op byte + path + NUL */
	MSG_SBX_SNAPSHOT = 410,	/* init -> worker: u64 length + the new snapshot's
				 * patch (agentfs/patch.h), a sealed memfd */
	MSG_SBX_BASE = 411,	/* worker -> init, before SPEC: the key of the
				 * kept base the job's snapshot is (persist.c),
				 * '\n', the job's rules fingerprint (64 hex),
				 * + the patch over SPEC's image, if any */
	MSG_SBX_BASE_NEXT = 412,	/* worker -> init, after SNAPSHOT: the key
				 * it was committed as, or empty: not committed */
	MSG_SBX_IMAGE = 413,	/* worker -> init, before GO: struct msg_sbx_image
				 * + nlayers x 64 hex digits (top first): the
				 * sandbox's root is that image (sandbox/mount.c) */
	MSG_SBX_WARM = 414,	/* worker -> init, after GO: empty, start a warm
				 * python3 for the job (sandbox/warm.c) */
	/* 5xx: worker <-> its sandbox spawner. */
	MSG_SPAWN_REQ = 500,	/* worker -> spawner: empty, clone an init */
	MSG_SPAWN_DONE = 501,	/* spawner -> worker: struct msg_spawn_done (+ ctl fd) */
	MSG_SPAWN_PIDFD = 502,	/* spawner -> worker: empty, + the init's pidfd */
	MSG_SPAWN_LAYERS = 503,	/* worker -> spawner: n x 64 hex digits: have each
				 * layer of the image cache mounted, idmapped,
				 * at run_dir/layers/HEX (sandbox/layers.c) */
	MSG_SPAWN_LAYERS_DONE = 504,	/* spawner -> worker: struct msg_spawn_layers */
	MSG_SPAWN_LISTEN = 505,	/* worker -> spawner: u16 port, + an init's pidfd:
				 * listen on 127.0.0.1:port in its network
				 * namespace (net "allow") */
	MSG_SPAWN_LISTEN_DONE = 506,	/* spawner -> worker: i32 errno or 0, + the
				 * listening socket */
	/* 6xx: sandqd <-> sandq-egress, the egress proxy (egress/main.c). */
	MSG_EGRESS_JOB = 600,	/* sandqd -> egress: struct msg_egress_job + the
				 * job's listener; hdr.job_id names the job */
	MSG_EGRESS_END = 601,	/* sandqd -> egress: empty, the job ended: close
				 * its listener and connections, report them */
	MSG_EGRESS_CONN = 602,	/* egress -> sandqd: struct msg_egress_conn, one
				 * per connection, when it is refused or ends */
	MSG_EGRESS_ENDED = 603,	/* egress -> sandqd: u64, after END: every
				 * connection of the job was reported but this
				 * many (past the per-job cap) */
	MSG_EGRESS_LISTEN = 604,	/* sandqd -> egress: empty + a new listener
				 * of the job's (its next case's sandbox),
				 * replacing the ones it had */
};

struct msg_hdr {
	uint32_t type;		/* enum msg_type */
	uint32_t len;		/* payload bytes that follow */
	uint32_t job_id;	/* dispatcher's job sequence number, or 0 */
	uint16_t version;	/* MSG_VERSION */
	uint16_t flags;		/* MSG_F_* */
};
_Static_assert(sizeof(struct msg_hdr) == 16, "msg_hdr is a wire struct");

/* What the worker needs of the job's tenant besides the job. */
struct msg_job_tenant {
	uint64_t storage_quota;	/* bytes its sandboxes' heads may hold; 0: no cap */
};
_Static_assert(sizeof(struct msg_job_tenant) == 8, "msg_job_tenant is a wire struct");

struct msg_hello {
	uint32_t pid;		/* the worker's pid */
	uint32_t index;		/* the worker's slot in the pool */
};
_Static_assert(sizeof(struct msg_hello) == 8, "msg_hello is a wire struct");

struct msg_sbx_exec {
	int64_t started_ns;	/* CLOCK_MONOTONIC when the job was exec'd */
	int64_t pre_cpu_ns;	/* CPU time in the cgroup before the job (a warm
				 * interpreter's start-up): not the job's */
	uint32_t flags;		/* SBX_EXEC_* */
	uint32_t pad;
};
_Static_assert(sizeof(struct msg_sbx_exec) == 24, "wire struct");

/* msg_sbx_exec.flags */
#define SBX_EXEC_WARM 0x1	/* the job ran in the warm python3 (sandbox/warm.c) */

/* msg_sbx_exit.flags */
#define SBX_EXIT_DISK_FULL 0x1	/* /workspace, /tmp or /dev/shm was full at the end */

struct msg_sbx_exit {
	int32_t status;		/* wait status of the job's main process */
	int32_t flags;		/* SBX_EXIT_* */
	int64_t cpu_us;		/* user + system CPU of every reaped process */
	int64_t max_rss_kb;	/* largest peak RSS among them */
};
_Static_assert(sizeof(struct msg_sbx_exit) == 24, "wire struct");

struct msg_spawn_done {
	int32_t pid;		/* the new init's pid, or -1 */
	int32_t error;		/* errno of the failed clone, or 0 */
};
_Static_assert(sizeof(struct msg_spawn_done) == 8, "wire struct");

/* The answer to MSG_SPAWN_LAYERS. */
struct msg_spawn_layers {
	int32_t error;		/* errno of the layer that failed, or 0 */
	int32_t index;		/* which layer failed (0-based), or -1 */
	uint32_t mounted;	/* layers mounted (anew) by this request */
	uint32_t pad;
};
_Static_assert(sizeof(struct msg_spawn_layers) == 16, "wire struct");

/* Head of MSG_SBX_IMAGE. */
struct msg_sbx_image {
	uint32_t uid;		/* the job's uid and gid inside (the image's User) */
	uint32_t gid;
	uint32_t nlayers;	/* 64 hex digits each follow, top layer first */
	uint32_t pad;
};
_Static_assert(sizeof(struct msg_sbx_image) == 16, "wire struct");

/* Bytes of a job's allow list as text (egress/egress.h's patterns). */
#define MSG_EGRESS_ALLOW_MAX 17024

/* What sandq-egress needs of a job: sandqd's word, never the worker's. */
struct msg_egress_job {
	char job[129];		/* the job's id, NUL-terminated */
	char tenant[65];	/* its tenant, NUL-terminated */
	uint16_t pad;
	uint32_t conns_max;	/* connections open at once; 0: no cap */
	uint64_t bytes_max;	/* bytes both ways over all its connections; 0: none */
	uint64_t rate;		/* bytes per second each way, over all of them; 0: none */
	char allow[MSG_EGRESS_ALLOW_MAX];	/* patterns, comma-separated, NUL-terminated */
};
_Static_assert(sizeof(struct msg_egress_job) == 17240, "wire struct");

/* msg_egress_conn.state */
#define EGRESS_CONN_DONE 1	/* allowed, and ended: bytes are final; reason
				 * says how it failed, if it did */
#define EGRESS_CONN_REFUSED 2	/* refused by the allowlist or a limit: reason */

/* One connection of a job's, as the audit trail and the result list it. */
struct msg_egress_conn {
	char host[256];		/* the name (or literal) the job asked for, escaped */
	char addr[48];		/* the address connected to, or "" */
	char reason[64];	/* refused: why; closed: how, or "" */
	uint16_t port;
	uint8_t state;		/* EGRESS_CONN_* */
	uint8_t tls;		/* CONNECT: 1 */
	uint32_t throttled_ms;	/* time the job's rate held it (either way) */
	uint64_t up;		/* bytes the job sent on it */
	uint64_t down;		/* bytes it received */
};
_Static_assert(sizeof(struct msg_egress_conn) == 392, "wire struct");

/* First byte of a MSG_SBX_FAIL payload. */
enum msg_sbx_fail_kind {
	SBX_FAIL_INTERNAL = 0,	/* the sandbox could not be built */
	SBX_FAIL_INPUT = 1,	/* the job's own input cannot be set up */
	SBX_FAIL_DISK = 2,	/* the capture passed the job's disk limit */
};

/* A received frame. Owns data and fd. */
struct msg {
	struct msg_hdr hdr;	/* header as received */
	uint8_t *data;		/* payload (heap; NULL when len is 0) */
	size_t len;		/* payload length (blob size for memfd frames) */
	int fd;			/* descriptor passed with MSG_F_FD, or -1 */
};

/*
 * Sends one frame. If len > MSG_MAX the payload is copied into a sealed
 * memfd and sent by descriptor. fd, if >= 0, is passed along (not closed).
 * Blocks until sent (workers) unless the socket is non-blocking, in which
 * case -EAGAIN may be returned and nothing was sent.
 * Returns 0 or -errno (-EMSGSIZE if len > MSG_BLOB_MAX).
 */
int msg_send(int sock, uint32_t type, uint32_t job_id, const void *data,
    size_t len, int fd);

/*
 * Receives one frame into m (which must be msg_init'ed or cleared).
 * Returns 1 on a frame, 0 on orderly EOF, -EAGAIN if non-blocking and
 * nothing is ready, -EBADMSG if the frame is malformed (bad size, version,
 * flags, unexpected descriptors, oversized blob), other -errno on I/O errors.
 * max_blob bounds memfd payloads (<= MSG_BLOB_MAX).
 */
int msg_recv(int sock, struct msg *m, size_t max_blob);

/* Validates a frame header against the protocol's bounds (pure). */
int msg_check_hdr(const struct msg_hdr *h, size_t got, bool have_fd);

void msg_init(struct msg *m);
/* Frees the payload and closes the descriptor; m can be reused. */
void msg_clear(struct msg *m);

/* Returns a static name for a type, or "unknown". */
const char *msg_type_name(uint32_t type);

#endif
