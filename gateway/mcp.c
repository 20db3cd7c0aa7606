/*
 * mcp.c - POST /v1/mcp: the Model Context Protocol over MCP's streamable
 * HTTP transport, the same server as `sandq mcp` (the tools, their
 * arguments and results, the JSON-RPC dispatch are proto/mcp.c's).
 *
 * DESIGN: one JSON-RPC message per POST. A request is answered with one
 * application/json response (never an SSE stream); a notification or a
 * response is 202 with no body. GET /v1/mcp (the server-initiated stream)
 * and DELETE (sessions) are 405: the gateway keeps no state between
 * requests, so it issues no Mcp-Session-Id and every request stands alone
 * (docs/decisions.md "Gateway (issue 17)").
 *
 * Before the token is looked up, with nothing read of the body: the
 * method, the Origin header (a browser's: refused with 403 unless it is
 * one of --mcp-origin, against DNS rebinding), MCP-Protocol-Version (one
 * we speak, else 400; absent is 2025-03-26 as the spec says) and the query
 * (only sandbox=ID, the bound sandbox; absent: runs in a fresh throw-away
 * sandbox per call and no fs or kv tools). The Bearer token is the tenant,
 * as on every /v1 route (admin tokens refused in server.c). Every 4xx is
 * the gateway's {"error":{"code","message"}} (the spec lets the body be
 * anything; a JSON-RPC error needs an id, and these name no request); a
 * 200 is always one JSON-RPC response.
 *
 * tools/call builds the same JSON object a client could POST to /v1/jobs
 * and checks it with jobjson.c; mcp_start() hands it back encoded, and
 * server.c XADDs it and polls its result as
 * the /v1/sandboxes routes do (never blocking the loop), bounded by the
 * tool's wait (proto/mcp.h: a run's timeout_s and a minute, 15 min without
 * one, 2 min for an op); then mcp_answer() or mcp_timeout() answers.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "internal.h"
#include "jobjson.h"

#define MCP_GW_VERSION "0.1.0"	/* serverInfo.version */

/* The value of header name (lower case) of req, or NULL with *n 0. */
static const char *
header(h2o_req_t *req, const char *name, size_t *n)
{
	ssize_t i = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);

	*n = 0;
	if (i < 0)
		return NULL;
	*n = req->headers.entries[i].value.len;
	return req->headers.entries[i].value.base;
}

/* True if origin (n bytes) is one of --mcp-origin's comma-separated list. */
static bool
origin_allowed(const char *origin, size_t n)
{
	const char *p = gw.mcp_origins;

	while (p != NULL && *p != '\0') {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		if (len == n && memcmp(p, origin, n) == 0)
			return true;
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

/* ?sandbox=ID into out ("" without a query); false if the query is bad. */
static bool
query_sandbox(h2o_req_t *req, char *out, size_t outlen)
{
	const char *q;
	size_t n;

	out[0] = '\0';
	if (req->query_at == SIZE_MAX)
		return true;
	q = req->path.base + req->query_at + 1;
	n = req->path.len - req->query_at - 1;
	if (n <= 8 || memcmp(q, "sandbox=", 8) != 0 || n - 8 >= outlen ||
	    !payload_id_valid(q + 8, n - 8) || h2o_memis(q + 8, n - 8, H2O_STRLIT(".")) ||
	    h2o_memis(q + 8, n - 8, H2O_STRLIT("..")))
		return false;
	memcpy(out, q + 8, n - 8);
	out[n - 8] = '\0';
	return true;
}

struct call *
mcp_route(h2o_req_t *req)
{
	const char *v;
	size_t n;
	char sandbox[JOB_ID_MAX + 1];
	struct call *c;

	if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"))) {
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL,
		    H2O_STRLIT("POST"));
		send_error(req, 405, "method_not_allowed", "POST /v1/mcp (no "
		    "server-initiated stream, no sessions)");
		return NULL;
	}
	if ((v = header(req, "origin", &n)) != NULL && !origin_allowed(v, n)) {
		send_error(req, 403, "forbidden_origin", "this Origin is not one of "
		    "the gateway's --mcp-origin");
		return NULL;
	}
	if ((v = header(req, "mcp-protocol-version", &n)) != NULL &&
	    !mcp_version_known(v, n)) {
		send_error(req, 400, "bad_protocol_version", "MCP-Protocol-Version: "
		    "not a version this server speaks (" MCP_LATEST ", 2025-06-18, "
		    "2025-03-26, 2024-11-05)");
		return NULL;
	}
	if (!query_sandbox(req, sandbox, sizeof(sandbox))) {
		send_error(req, 400, "bad_query", "the query takes only sandbox=ID "
		    "(1 to 128 characters of A-Z a-z 0-9 . _ : -)");
		return NULL;
	}
	c = call_new(req);
	c->route = R_MCP;
	memcpy(c->sandbox, sandbox, sizeof(sandbox));
	return c;
}

/* The /v1/jobs object of the checked call q on sandbox ("" none); owned. */
static json_t *
job_object(const struct mcp_req *q, const char *sandbox)
{
	json_t *o = json_pack("{s:s}", "op", q->op);

	if (sandbox[0] != '\0')
		json_object_set_new(o, "sandbox", json_string(sandbox));
	if (q->text != NULL)
		json_object_set_new(o, q->kind == MCP_RUN_PY ? "code" : "script",
		    json_string(q->text));
	if (q->wall_ms > 0)
		json_object_set_new(o, "limits", json_pack("{s:I}", "wall_ms",
		    (json_int_t)q->wall_ms));
	if (q->path != NULL)
		json_object_set_new(o, "path", json_string(q->path));
	if (q->data != NULL)
		json_object_set_new(o, "data", json_stringn(q->data, q->data_len));
	if (q->key != NULL)
		json_object_set_new(o, "key", json_string(q->key));
	if (q->value != NULL)
		json_object_set_new(o, "value", json_string(q->value));
	return o;
}

/* The tool call of s as c->jobbuf (true), or answered (false). */
static bool
start_call(struct call *c, struct mcp_step *s)
{
	struct gw_fail f = { 0 };
	struct job *j = NULL;
	json_t *o = job_object(&s->req, c->sandbox);
	int rc = jobjson_job_json(o, &j, &f);

	json_decref(o);
	if (rc < 0) {
		call_json(c, 200, mcp_result(s->id, mcp_tool_error("%s", f.msg)));
		return false;
	}
	snprintf(c->id, sizeof(c->id), "%s", j->id);
	if (payload_job_encode(j, &c->jobbuf, &c->joblen) < 0) {
		job_free(j);
		call_json(c, 200, mcp_result(s->id, mcp_tool_error("cannot encode "
		    "the job")));
		return false;
	}
	job_free(j);
	/* Kept past the message: the kind, op and length; no borrowed text. */
	c->mcp = (struct mcp_req){ .kind = s->req.kind, .op = s->req.op,
	    .data_len = s->req.data_len, .wait_ms = s->req.wait_ms };
	c->wait_ms = (uint64_t)s->req.wait_ms;
	c->mcp_id = json_incref(s->id);
	return true;
}

bool
mcp_start(struct call *c)
{
	h2o_req_t *req = c->req;
	const struct mcp_server srv = {
		.bound = c->sandbox[0] != '\0', .version = MCP_GW_VERSION,
		.bind_hint = "POST /v1/mcp?sandbox=ID (a sandbox of POST /v1/sandboxes)",
	};
	struct mcp_step s;
	json_error_t je;
	json_t *msg;
	bool submit = false;

	if (req->entity.len > gw.max_body) {
		call_error(c, 413, "body_too_large", "the body is larger than --max-body");
		return false;
	}
	if (req->entity.base == NULL || (msg = json_loadb(req->entity.base,
	    req->entity.len, JSON_REJECT_DUPLICATES, &je)) == NULL) {
		call_error(c, 400, "bad_json", "the body is not JSON (JSON-RPC "
		    "parse error)");
		return false;
	}
	mcp_handle(&srv, msg, &s);
	json_decref(msg);
	if (s.call)
		submit = start_call(c, &s);
	else if (s.answer == NULL)
		call_bytes(c, 202, "application/json", "", 0);
	else {
		/* An error that names no request answers no request: 400. */
		json_t *e = json_object_get(s.answer, "error");

		if (e != NULL && json_is_null(json_object_get(s.answer, "id")))
			call_error(c, 400, "bad_json", json_string_value(json_object_get(e,
			    "message")));
		else {
			call_json(c, 200, s.answer);
			s.answer = NULL;
		}
	}
	mcp_step_free(&s);
	return submit;
}

void
mcp_answer(struct call *c, const struct result *res)
{
	struct mcp_res v = {
		.status = res_status_name(res->status), .exit_code = res->exit_code,
		.out = res->out, .out_len = res->out_len,
		.out_truncated = res->out_truncated,
		.err = res->err, .err_len = res->err_len,
		.err_truncated = res->err_truncated,
		.error_code = res->error_code, .error_message = res->error_message,
		.on_sandbox = res->sandbox != NULL, .version = res->version,
		.data = res->data, .data_len = res->data_len,
	};

	call_json(c, 200, mcp_result(c->mcp_id, mcp_call_answer(&c->mcp, &v)));
}

void
mcp_timeout(struct call *c)
{
	call_json(c, 200, mcp_result(c->mcp_id, mcp_tool_error("no result within "
	    "%llu s (job %s: GET /v1/jobs/%s has it when it comes)",
	    (unsigned long long)(c->wait_ms / 1000), c->id, c->id)));
}
