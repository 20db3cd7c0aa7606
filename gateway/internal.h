/*
 * internal.h - what server.c shares with stream.c: the gateway's one
 * instance, the per-request struct call and its helpers. Not an API.
 */
#ifndef SANDQ_GATEWAY_INTERNAL_H
#define SANDQ_GATEWAY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <h2o.h>
#include <hiredis/async.h>
#include <jansson.h>
#include <uv.h>

#include "../proto/job.h"
#include "../proto/mcp.h"
#include "../proto/result.h"
#include "../proto/url.h"
#include "../queue/token.h"

#define STREAM_ID_MAX 41	/* "MS-SEQ": two 20-digit numbers and '-' */

struct gw {
	uv_loop_t *loop;
	struct redis_url url;
	char prefix[128];
	redisAsyncContext *rc;		/* NULL while disconnected */
	uv_timer_t reconnect;
	bool down_logged;		/* the failure to reconnect is logged once */
	h2o_globalconf_t config;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept;
	uv_tcp_t listener;
	size_t max_body;
	size_t max_streams;		/* open SSE streams and WebSockets at most */
	uint64_t poll_ms;		/* --poll-ms: a long poll's fallback period */
	const char *mcp_origins;	/* --mcp-origin: "A,B", or NULL */
	size_t max_conns;		/* open client connections at most */
	size_t nconns;			/* open client connections */
	size_t refused;			/* closed at accept in this burst */
	size_t max_batch_body;		/* bytes of a POST /v1/batches body */
};

enum route {
	R_SUBMIT,
	R_GET,
	R_EVENTS,	/* GET /v1/jobs/ID/events (stream.c) */
	R_CANCEL,	/* POST /v1/jobs/ID/cancel (stream.c) */
	R_SBX,		/* /v1/sandboxes...: an op submitted and waited for (sandbox.c) */
	R_ADMIN,	/* /v1/admin/...: an operator's view (admin.c) */
	R_MCP,		/* POST /v1/mcp: a JSON-RPC message, a tool's job waited for (mcp.c) */
	R_BATCH,	/* /v1/batches...: batch.c, its state in c->ext */
};

/* What a /v1/sandboxes route answers with an ok result (sandbox.c). */
enum sbx_answer {
	SBX_JSON,	/* 200 and the result's data as JSON (nil: 204) */
	SBX_CREATED,	/* 201 and the data */
	SBX_BYTES,	/* 200 application/octet-stream: the data's bytes */
	SBX_TEXT,	/* 200 application/json: the data's string (kv.get) */
	SBX_TAR_GET,	/* a run's stdout as application/x-tar (tar.c) */
	SBX_TAR_PUT,	/* a run that wrote a tar's files (tar.c) */
};

/* One request, possibly outliving its h2o_req_t (see DESIGN). */
struct call {
	struct gw *gw;
	h2o_req_t *req;		/* NULL once h2o has freed the request */
	int refs;
	bool answered;
	uv_timer_t timer;	/* long polls */
	enum route route;
	char tenant[JOB_TENANT_MAX + 1];
	char id[JOB_ID_MAX + 1];
	uint64_t deadline;	/* loop ms: when a long poll answers 404 */
	uint64_t delay;		/* ms before the next poll */
	char from[STREAM_ID_MAX + 1];	/* events: resume after this entry id */
	char *jobbuf;		/* R_SBX: the encoded job, XADDed once authenticated */
	size_t joblen;
	enum sbx_answer answer;	/* R_SBX: how an ok result is answered */
	bool woken;		/* wake.c: its result was published during a GET */
	char tokhash[TOKEN_HASH_HEX + 1];	/* the token's hash, while looked up */
	void *ext;		/* a route's own state, freed with the call */
	void (*ext_free)(void *);
	void (*cont)(struct call *c);	/* admin.c: what X-Sandq-Tenant continues */
	char sandbox[JOB_ID_MAX + 1];	/* R_MCP: ?sandbox=ID, "" unbound */
	json_t *mcp_id;		/* R_MCP: the tools/call's id, while its job runs */
	struct mcp_req mcp;	/* R_MCP: the call (its borrowed strings NULL) */
	uint64_t wait_ms;	/* R_MCP, R_SUBMIT ?wait=: how long its result is waited for */
	size_t tar_files;	/* SBX_TAR_PUT: the tar's files and folders */
	size_t tar_folders;
};

extern struct gw gw;

/* Sends o (taken) as the JSON body of status; a {"error"} body. */
void send_json(h2o_req_t *req, int status, json_t *o);
void send_error(h2o_req_t *req, int status, const char *code, const char *msg);
/* A call for req, one reference held by the request (freed with it). */
struct call *call_new(h2o_req_t *req);
/* Drops a reference; the last one frees the call. */
void call_unref(struct call *c);
/* Answers the call once with o (taken), if its client is still there. */
void call_json(struct call *c, int status, json_t *o);
void call_error(struct call *c, int status, const char *code, const char *msg);
/* Answers the call once with n bytes of ctype, if its client is still there. */
void call_bytes(struct call *c, int status, const char *ctype, const void *p,
    size_t n);
/*
 * The query of req as the parameters names (n of them): vals[i] the value
 * of names[i], as sent (no percent-decoding: every value a route takes is
 * made of unreserved characters), base NULL when absent. False with *why
 * (static text; the client's bytes are never quoted) for a parameter
 * without '=', one not in names, or one given twice.
 */
bool gw_query(h2o_req_t *req, const char *const *names, size_t n, h2o_iovec_t *vals,
    const char **why);
/* v as a decimal in [lo, hi] into *out; false if it is not one. */
bool gw_query_uint(h2o_iovec_t v, unsigned long lo, unsigned long hi, unsigned long *out);

/*
 * Opens an async connection to --redis on the gateway's loop with these
 * callbacks, its AUTH (and SELECT, when select_db) queued first; a refused
 * AUTH or SELECT is logged under what and the connection dropped (its
 * disconnect callback runs). NULL with *why set if it cannot start.
 */
redisAsyncContext *gw_redis_open(const char *what, redisConnectCallback *on_connect,
    redisDisconnectCallback *on_disconnect, bool select_db, const char **why);
/* Sends argv on the shared connection; cb gets c (a reference taken). */
bool call_redis(struct call *c, redisCallbackFn *cb, int argc, const char **argv,
    const size_t *lens);

/*
 * sandbox.c: /v1/sandboxes and below: the call whose encoded job server.c
 * authenticates and XADDs (c->jobbuf), or NULL having answered; and the
 * answer of its op's result.
 */
/*
 * dashboard.c: registers /dashboard on host as the static files of dir
 * (NULL or "": the folder beside the binary, if any). Returns 0, or
 * -ENOENT with e naming a given folder without index.html.
 */
int dashboard_register(h2o_hostconf_t *host, const char *dir, struct err *e);

struct call *sandbox_route(h2o_req_t *req);
void sandbox_answer(struct call *c, const struct result *res);

/*
 * admin.c: /v1/admin and below (the call, or NULL having answered), its
 * answer once an admin token is checked; and X-Sandq-Tenant: true if the
 * admin's request names a tenant (then answered, or continued by cont as
 * that tenant's once it is known), false if it names none.
 */
struct call *admin_route(h2o_req_t *req);
void admin_answer(struct call *c);
bool admin_as_tenant(struct call *c, void (*cont)(struct call *c));

/*
 * mcp.c: POST /v1/mcp: the call to authenticate, or NULL having answered
 * (method, Origin, MCP-Protocol-Version, query); once authenticated, the
 * message answered (false) or its tool's job encoded in c->jobbuf for
 * server.c to XADD and wait for (true); then the job's result or the end
 * of the wait answered as the tool's result.
 */
struct call *mcp_route(h2o_req_t *req);
bool mcp_start(struct call *c);
void mcp_answer(struct call *c, const struct result *res);
void mcp_timeout(struct call *c);

/*
 * tokcache.c: a token record known for TOKCACHE_TTL_MS after Redis gave it
 * (hash: TOKEN_HASH_HEX hex digits; now: loop ms). get copies it into out.
 */
#define TOKCACHE_TTL_MS 1000
bool tokcache_get(const char *hash, uint64_t now, struct token_record *out);
void tokcache_put(const char *hash, const struct token_record *rec, uint64_t now);

/*
 * wake.c: a long poll woken when its job's id is published on its
 * tenant's results channel. wake_watch() registers c (once; taking a
 * reference) to run poll(c) at once in place of its pending poll timer,
 * or to set c->woken while its GET is in flight; wake_forget() drops it
 * once answered; wake_init() opens the subscriber connection.
 */
void wake_watch(struct call *c, void (*poll)(struct call *c));
void wake_forget(struct call *c);
void wake_init(void);
/* True while the subscriber listens: polls may then start slower. */
bool wake_ready(void);

/*
 * batch.c: /v1/batches and below: the call to authenticate, or NULL
 * having answered; and the route once the call acts as its tenant.
 */
struct call *batch_request(h2o_req_t *req);
void batch_authed(struct call *c);

/*
 * tar.c: GET and PUT /v1/sandboxes/ID/tar[/PATH] (rest: "" or "/PATH",
 * n bytes): the call, its run encoded, or NULL having answered; and the
 * answer of the run's result: false when it is a failure the other
 * routes answer alike (sandbox_answer() then answers it).
 */
struct call *tar_route(h2o_req_t *req, const char *id, size_t idlen, const char *rest,
    size_t n);
bool tar_answer(struct call *c, const struct result *res);

/* stream.c: the routes after authentication, and the reader's start. */
void stream_events(struct call *c);
void stream_cancel(struct call *c);
void stream_init(void);
/* stream.c: "from" of ?from=ID or Last-Event-ID, checked; false if bad. */
bool stream_from(h2o_req_t *req, char *out, size_t outlen);
/*
 * stream.c: 1 if req asks for a WebSocket (HTTP/1.1 GET with Upgrade:
 * websocket and a key), 0 if not, -1 if its handshake is malformed.
 */
int stream_ws_handshake(h2o_req_t *req);
/*
 * stream.c: the token of a "bearer.TOKEN" subprotocol the client offered
 * (browsers cannot set Authorization on a WebSocket); points into req.
 */
bool stream_ws_bearer(h2o_req_t *req, h2o_iovec_t *token);

#endif
