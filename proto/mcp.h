/*
 * mcp.h - the Model Context Protocol server's pure part, shared by `sandq
 * mcp` (cli/cli_mcp.c, stdio) and sandq-gateway's POST /v1/mcp
 * (gateway/mcp.c, streamable HTTP): the tools and their input schemas,
 * a tool call's arguments checked into a struct mcp_req, a job's result
 * made into a tool result, and the JSON-RPC dispatch of initialize, ping,
 * tools/list and tools/call with the protocol version negotiation.
 *
 * DESIGN: no I/O. mcp_handle() turns one parsed message into a step: an
 * answer to send, nothing (a notification or a response), or a tool call
 * for the transport to run its own way (the CLI waits synchronously through
 * libsandq; the gateway submits on its event loop and answers later); the
 * transport then makes the answer with mcp_call_answer(). A result is seen
 * through struct mcp_res, which either side fills from its own result type.
 * Not in PROTO_SRCS: linked only by the programs that have jansson.
 */
#ifndef SANDQ_PROTO_MCP_H
#define SANDQ_PROTO_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MCP_LINE_MAX (8u << 20)		/* bytes of one message */
#define MCP_TIMEOUT_MAX_S 3600		/* timeout_s at most */
#define MCP_WAIT_SLACK_MS 60000		/* waited past a run's wall limit */
#define MCP_WAIT_DEFAULT_MS 900000	/* a run without timeout_s */
#define MCP_OP_WAIT_MS 120000		/* an fs/kv/sandbox op */
#define MCP_LATEST "2025-11-25"

/* What a tool does. */
enum mcp_kind {
	MCP_RUN_SH, MCP_RUN_PY, MCP_FS_READ, MCP_FS_WRITE, MCP_FS_LIST,
	MCP_KV_GET, MCP_KV_SET,
};

/* A tool call, checked: what to submit. Strings borrow the message's. */
struct mcp_req {
	enum mcp_kind kind;
	const char *op;		/* "sh", "python", "fs.read", ... */
	const char *text;	/* run: the command or the code */
	uint64_t wall_ms;	/* run: timeout_s in ms; 0: the preset's */
	int64_t wait_ms;	/* how long to wait for the result */
	const char *path;	/* fs: NULL for list_files' default */
	const char *data;	/* write_file: the content */
	size_t data_len;
	const char *key;	/* kv */
	char *value;		/* kv_set: the value's compact JSON text (owned) */
};

/* A job's result as the transport holds it (borrowed, NULLs allowed). */
struct mcp_res {
	const char *status;	/* "ok", "exit", "timeout", ... */
	int exit_code;
	const uint8_t *out, *err;
	size_t out_len, err_len;
	bool out_truncated, err_truncated;
	const char *error_code, *error_message;
	bool on_sandbox;	/* ran on a sandbox: version is its new one */
	uint64_t version;
	const uint8_t *data;	/* an op's msgpack answer */
	size_t data_len;
};

/* The transport's side of the server. */
struct mcp_server {
	bool bound;		/* a sandbox is bound: the fs and kv tools */
	const char *version;	/* serverInfo.version */
	const char *bind_hint;	/* how to bind, said when an unbound call needs it */
};

/* One message handled: what the transport does next. */
struct mcp_step {
	json_t *answer;		/* a message to send (owned), or NULL */
	bool call;		/* else a tool call: id and req */
	json_t *id;		/* the request's id (a reference) */
	json_t *msg;		/* the message, kept while req borrows it */
	struct mcp_req req;
};

/* The protocol versions we speak, newest first, and their count. */
extern const char *const mcp_versions[];
extern const size_t mcp_nversions;

/* True if v (n bytes) is a version we speak. */
bool mcp_version_known(const char *v, size_t n);
/* Handles msg (a reference taken while s lives); fills s. */
void mcp_handle(const struct mcp_server *srv, json_t *msg, struct mcp_step *s);
/* Drops what s holds. */
void mcp_step_free(struct mcp_step *s);
/* A JSON-RPC error message to id (NULL: null); owned. */
json_t *mcp_error(json_t *id, int code, const char *msg);
/* A JSON-RPC result message to id; takes result; owned. */
json_t *mcp_result(json_t *id, json_t *result);
/* The tool result of req's job whose result is r; owned. */
json_t *mcp_call_answer(const struct mcp_req *req, const struct mcp_res *r);
/* A tool error result with a printf message (made valid UTF-8); owned. */
json_t *mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* n bytes as a JSON string, invalid UTF-8 bytes as U+FFFD; owned. */
json_t *mcp_text(const uint8_t *p, size_t n);

#endif
