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
#include "../proto/result.h"
#include "../proto/url.h"

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
};

enum route {
	R_SUBMIT,
	R_GET,
	R_EVENTS,	/* GET /v1/jobs/ID/events (stream.c) */
	R_CANCEL,	/* POST /v1/jobs/ID/cancel (stream.c) */
	R_SBX,		/* /v1/sandboxes...: an op submitted and waited for (sandbox.c) */
};

/* What a /v1/sandboxes route answers with an ok result (sandbox.c). */
enum sbx_answer {
	SBX_JSON,	/* 200 and the result's data as JSON (nil: 204) */
	SBX_CREATED,	/* 201 and the data */
	SBX_BYTES,	/* 200 application/octet-stream: the data's bytes */
	SBX_TEXT,	/* 200 application/json: the data's string (kv.get) */
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
/* Sends argv on the shared connection; cb gets c (a reference taken). */
bool call_redis(struct call *c, redisCallbackFn *cb, int argc, const char **argv,
    const size_t *lens);

/*
 * sandbox.c: /v1/sandboxes and below: the call whose encoded job server.c
 * authenticates and XADDs (c->jobbuf), or NULL having answered; and the
 * answer of its op's result.
 */
struct call *sandbox_route(h2o_req_t *req);
void sandbox_answer(struct call *c, const struct result *res);

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
