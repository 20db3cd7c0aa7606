/*
 * sandbox.c - REST routes over the sandbox ops: /v1/sandboxes and below.
 *
 * DESIGN: each route is a thin wrapper over one op of docs/protocol.md
 * "Sandboxes": it builds the same JSON object a client could POST to
 * /v1/jobs (the id from the path, the body's fields), so jobjson.c checks
 * it the same way and refuses the same unknown fields by name; the job is
 * encoded before server.c looks the token up, XADDed as the token's tenant,
 * and the request waits for its result as a long poll does (at most 60 s:
 * then 504 with the job's id, whose result GET /v1/jobs/ID has later). An
 * ok result is answered as the route says (enum sbx_answer): its data as
 * JSON, or, for files and kv values, the bytes as they are; a rejected one
 * as {"id", "error"} with an HTTP status that fits error.code.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "../common/xmalloc.h"
#include "../proto/mpjson.h"
#include "internal.h"
#include "jobjson.h"

/* The HTTP status of a result that is not ok, by its error.code. */
static int
status_of(const struct result *r)
{
	static const struct {
		const char *code;
		int status;
	} map[] = {
		{ "sandbox_not_found", 404 }, { "not_found", 404 },
		{ "sandbox_exists", 409 }, { "exists", 409 }, { "not_empty", 409 },
		{ "snapshot_not_found", 404 },
		{ "is_dir", 400 }, { "not_dir", 400 }, { "invalid", 400 },
		{ "invalid_job", 400 }, { "bad_snapshot", 400 },
		{ "permission", 403 }, { "too_large", 413 },
		{ "queue_full", 429 }, { "rate_limited", 429 },
		{ "limit", 400 }, { "net", 400 }, { "image", 400 }, { "policy", 403 },
		{ "storage_quota", 413 }, { "timeout", 504 },
	};
	const char *code = r->error_code ? r->error_code : "";

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(code, map[i].code) == 0)
			return map[i].status;
	if (r->status == ST_EXPIRED)
		return 504;
	return 500;
}

void
sandbox_answer(struct call *c, const struct result *res)
{
	msgpack_unpacked u;
	size_t off = 0;
	json_t *d = NULL;

	if ((c->answer == SBX_TAR_GET || c->answer == SBX_TAR_PUT) && tar_answer(c, res))
		return;
	if (res->status != ST_OK) {
		call_json(c, status_of(res), json_pack("{s:s, s:s, s:{s:s, s:s}}",
		    "id", c->id, "status", res_status_name(res->status), "error",
		    "code", res->error_code ? res->error_code : res_status_name(res->status),
		    "message", res->error_message ? res->error_message : ""));
		return;
	}
	msgpack_unpacked_init(&u);
	if (res->data != NULL && res->data_len > 0 &&
	    msgpack_unpack_next(&u, (const char *)res->data, res->data_len, &off) ==
	    MSGPACK_UNPACK_SUCCESS) {
		const msgpack_object *o = &u.data;

		if (c->answer == SBX_BYTES && o->type == MSGPACK_OBJECT_BIN) {
			call_bytes(c, 200, "application/octet-stream", o->via.bin.ptr,
			    o->via.bin.size);
			goto out;
		}
		if (c->answer == SBX_TEXT && o->type == MSGPACK_OBJECT_STR) {
			call_bytes(c, 200, "application/json", o->via.str.ptr,
			    o->via.str.size);
			goto out;
		}
		d = mpjson_value(o);
	}
	if (d == NULL || json_is_null(d)) {
		json_decref(d);
		call_bytes(c, 204, "application/json", "", 0);
	} else
		call_json(c, c->answer == SBX_CREATED ? 201 : 200, d);
out:
	msgpack_unpacked_destroy(&u);
}

/* The body as a JSON object (an empty body: {}); NULL having answered. */
static json_t *
body_object(h2o_req_t *req)
{
	json_error_t je;
	json_t *o;

	if (req->entity.base == NULL || req->entity.len == 0)
		return json_object();
	if (req->entity.len > gw.max_body) {
		send_error(req, 413, "body_too_large", "the body is larger than --max-body");
		return NULL;
	}
	o = json_loadb(req->entity.base, req->entity.len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(o)) {
		json_decref(o);
		send_error(req, 400, "bad_json", "the body is not one JSON object");
		return NULL;
	}
	if (json_object_get(o, "op") || json_object_get(o, "sandbox")) {
		json_decref(o);
		send_error(req, 400, "unknown_field", json_object_get(o, "op") ?
		    "field 'op': the route names the op" :
		    "field 'sandbox': the route names the sandbox");
		return NULL;
	}
	return o;
}

/*
 * ?NAME=true (or 1, false, 0): the only query a route takes, NAME being
 * recursive (listings, deletes) or parents (a file's PUT). 1 or 0; 0
 * without a query; -1 for any other query.
 */
static int
query_flag(h2o_req_t *req, const char *name)
{
	const char *q, *eq;
	size_t n, k = strlen(name);

	if (req->query_at == SIZE_MAX)
		return 0;
	q = req->path.base + req->query_at + 1;
	n = req->path.len - req->query_at - 1;
	if (n <= k || memcmp(q, name, k) != 0 || q[k] != '=')
		return -1;
	eq = q + k + 1;
	n -= k + 1;
	if (h2o_memis(eq, n, H2O_STRLIT("true")) || h2o_memis(eq, n, H2O_STRLIT("1")))
		return 1;
	if (h2o_memis(eq, n, H2O_STRLIT("false")) || h2o_memis(eq, n, H2O_STRLIT("0")))
		return 0;
	return -1;
}

static int
query_recursive(h2o_req_t *req)
{
	return query_flag(req, "recursive");
}

static bool
is(h2o_req_t *req, const char *m)
{
	return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

/* Builds o (taken) into a job and encodes it: the call, NULL having answered. */
static struct call *
start(h2o_req_t *req, json_t *o, enum sbx_answer answer)
{
	struct gw_fail f = { 0 };
	struct job *j = NULL;
	struct call *c;
	int rc = jobjson_job_json(o, &j, &f);

	json_decref(o);
	if (rc < 0) {
		send_error(req, f.status, f.code, f.msg);
		return NULL;
	}
	c = call_new(req);
	c->route = R_SBX;
	c->answer = answer;
	snprintf(c->id, sizeof(c->id), "%s", j->id);
	if (payload_job_encode(j, &c->jobbuf, &c->joblen) < 0) {
		call_error(c, 500, "internal", "cannot encode the job");
		c = NULL;	/* the request holds it; h2o frees both */
	}
	job_free(j);
	return c;
}

static struct call *
wrong_method(h2o_req_t *req, const char *allowed)
{
	send_error(req, 405, "method_not_allowed", allowed);
	return NULL;
}

/* /v1/sandboxes/ID/files[/PATH] */
static struct call *
files_route(h2o_req_t *req, json_t *o, const char *rest, size_t n)
{
	bool put = is(req, "PUT");
	int rec = put ? query_flag(req, "parents") : query_recursive(req);
	char *b64;

	if (rec < 0) {
		json_decref(o);
		send_error(req, 400, "bad_query", put ? "the query takes only parents=true" :
		    "the query takes only recursive=true");
		return NULL;
	}
	if (n <= 1) {	/* the files themselves: a listing of / */
		if (!is(req, "GET")) {
			json_decref(o);
			return wrong_method(req, "GET /v1/sandboxes/ID/files");
		}
		json_object_set_new(o, "op", json_string("fs.list"));
		if (rec)
			json_object_set_new(o, "recursive", json_true());
		return start(req, o, SBX_JSON);
	}
	json_object_set_new(o, "path", json_stringn(rest, n));
	if (json_object_get(o, "path") == NULL) {
		json_decref(o);
		send_error(req, 400, "invalid_job", "field 'path': not UTF-8");
		return NULL;
	}
	if (is(req, "GET")) {
		json_object_set_new(o, "op", json_string("fs.read"));
		return start(req, o, SBX_BYTES);
	}
	if (is(req, "DELETE")) {
		json_object_set_new(o, "op", json_string("fs.delete"));
		if (rec)
			json_object_set_new(o, "recursive", json_true());
		return start(req, o, SBX_JSON);
	}
	if (!is(req, "PUT")) {
		json_decref(o);
		return wrong_method(req, "GET, PUT or DELETE /v1/sandboxes/ID/files/PATH");
	}
	if (req->entity.len > gw.max_body) {
		json_decref(o);
		send_error(req, 413, "body_too_large", "the body is larger than --max-body");
		return NULL;
	}
	json_object_set_new(o, "op", json_string("fs.write"));
	if (rec)	/* ?parents=true */
		json_object_set_new(o, "parents", json_true());
	b64 = mpjson_base64((const uint8_t *)(req->entity.base ? req->entity.base : ""),
	    req->entity.len);
	json_object_set_new(o, "data_b64", json_string(b64));
	free(b64);
	return start(req, o, SBX_JSON);
}

/* /v1/sandboxes/ID/kv[/KEY] */
static struct call *
kv_route(h2o_req_t *req, json_t *o, const char *rest, size_t n)
{
	json_t *v;

	if (n <= 1) {
		if (!is(req, "GET")) {
			json_decref(o);
			return wrong_method(req, "GET /v1/sandboxes/ID/kv");
		}
		json_object_set_new(o, "op", json_string("kv.keys"));
		return start(req, o, SBX_JSON);
	}
	json_object_set_new(o, "key", json_stringn(rest + 1, n - 1));
	if (json_object_get(o, "key") == NULL) {
		json_decref(o);
		send_error(req, 400, "invalid_job", "field 'key': not UTF-8");
		return NULL;
	}
	if (is(req, "GET")) {
		json_object_set_new(o, "op", json_string("kv.get"));
		return start(req, o, SBX_TEXT);
	}
	if (is(req, "DELETE")) {
		json_object_set_new(o, "op", json_string("kv.delete"));
		return start(req, o, SBX_JSON);
	}
	if (!is(req, "PUT")) {
		json_decref(o);
		return wrong_method(req, "GET, PUT or DELETE /v1/sandboxes/ID/kv/KEY");
	}
	if (req->entity.len > gw.max_body) {
		json_decref(o);
		send_error(req, 413, "body_too_large", "the body is larger than --max-body");
		return NULL;
	}
	v = json_stringn(req->entity.base ? req->entity.base : "", req->entity.len);
	if (v == NULL) {
		json_decref(o);
		send_error(req, 400, "invalid_job", "field 'value': the body is not "
		    "UTF-8 JSON text");
		return NULL;
	}
	json_object_set_new(o, "op", json_string("kv.set"));
	json_object_set_new(o, "value", v);
	return start(req, o, SBX_JSON);
}

struct call *
sandbox_route(h2o_req_t *req)
{
	h2o_iovec_t p = req->path_normalized;
	const char *id = p.base + 13, *end = p.base + p.len, *slash, *rest;
	size_t idlen, n;
	json_t *o;

	if (id == end || (id + 1 == end && *id == '/')) {	/* /v1/sandboxes */
		if (is(req, "GET"))
			return start(req, json_pack("{s:s}", "op", "sandbox.list"), SBX_JSON);
		if (!is(req, "POST"))
			return wrong_method(req, "GET or POST /v1/sandboxes");
		/* create: the body's fields, the new sandbox's id in "sandbox" */
		if (req->entity.base == NULL || req->entity.len == 0) {
			send_error(req, 400, "bad_json", "the body is empty: "
			    "{\"sandbox\":\"ID\",...}");
			return NULL;
		}
		{
			json_error_t je;

			o = json_loadb(req->entity.base, req->entity.len,
			    JSON_REJECT_DUPLICATES, &je);
		}
		if (!json_is_object(o)) {
			json_decref(o);
			send_error(req, 400, "bad_json", "the body is not one JSON object");
			return NULL;
		}
		if (json_object_get(o, "op")) {
			json_decref(o);
			send_error(req, 400, "unknown_field", "field 'op': the route "
			    "names the op");
			return NULL;
		}
		json_object_set_new(o, "op", json_string("sandbox.create"));
		return start(req, o, SBX_CREATED);
	}
	id++;	/* past '/' */
	slash = memchr(id, '/', (size_t)(end - id));
	idlen = (size_t)((slash ? slash : end) - id);
	rest = slash ? slash : end;
	n = (size_t)(end - rest);
	if (!payload_id_valid(id, idlen)) {
		send_error(req, 404, "not_found", "not a sandbox id");
		return NULL;
	}
	if (n == 0 || (n == 1 && *rest == '/')) {
		o = json_pack("{s:s%}", "sandbox", id, idlen);
		if (is(req, "GET")) {
			json_object_set_new(o, "op", json_string("sandbox.info"));
			return start(req, o, SBX_JSON);
		}
		if (is(req, "DELETE")) {
			json_object_set_new(o, "op", json_string("sandbox.delete"));
			return start(req, o, SBX_JSON);
		}
		json_decref(o);
		return wrong_method(req, "GET or DELETE /v1/sandboxes/ID");
	}
	rest++;
	n--;
#define SEG(s) (n >= sizeof(s) - 1 && memcmp(rest, s, sizeof(s) - 1) == 0 && \
	(n == sizeof(s) - 1 || rest[sizeof(s) - 1] == '/'))
	if (SEG("files") || SEG("kv")) {
		bool files = rest[0] == 'f';
		size_t skip = files ? 5 : 2;

		o = json_pack("{s:s%}", "sandbox", id, idlen);
		return files ? files_route(req, o, rest + skip, n - skip) :
		    kv_route(req, o, rest + skip, n - skip);
	}
	if (h2o_memis(rest, n, H2O_STRLIT("fork"))) {
		if (!is(req, "POST"))
			return wrong_method(req, "POST /v1/sandboxes/ID/fork");
		if ((o = body_object(req)) == NULL)
			return NULL;
		json_object_set_new(o, "sandbox", json_stringn(id, idlen));
		json_object_set_new(o, "op", json_string("sandbox.fork"));
		return start(req, o, SBX_CREATED);
	}
	if (h2o_memis(rest, n, H2O_STRLIT("export"))) {
		if (!is(req, "GET"))
			return wrong_method(req, "GET /v1/sandboxes/ID/export");
		return start(req, json_pack("{s:s, s:s%}", "op", "sandbox.export",
		    "sandbox", id, idlen), SBX_BYTES);
	}
	if (h2o_memis(rest, n, H2O_STRLIT("import"))) {
		char *b64;

		if (!is(req, "PUT"))
			return wrong_method(req, "PUT /v1/sandboxes/ID/import");
		if (req->entity.len > gw.max_body) {
			send_error(req, 413, "body_too_large", "the body is larger than "
			    "--max-body");
			return NULL;
		}
		b64 = mpjson_base64((const uint8_t *)(req->entity.base ?
		    req->entity.base : ""), req->entity.len);
		o = json_pack("{s:s, s:s%, s:s}", "op", "sandbox.import", "sandbox", id,
		    idlen, "snapshot_b64", b64);
		free(b64);
		return start(req, o, SBX_JSON);
	}
	if (SEG("stat")) {
		if (!is(req, "GET"))
			return wrong_method(req, "GET /v1/sandboxes/ID/stat/PATH");
		if (n <= 5) {
			send_error(req, 404, "not_found", "GET /v1/sandboxes/ID/stat/PATH");
			return NULL;
		}
		o = json_pack("{s:s, s:s%, s:s%}", "op", "fs.stat", "sandbox", id, idlen,
		    "path", rest + 4, n - 4);
		if (o == NULL) {
			send_error(req, 400, "invalid_job", "field 'path': not UTF-8");
			return NULL;
		}
		return start(req, o, SBX_JSON);
	}
	if (SEG("list")) {	/* fs.list of PATH (files lists only the root) */
		int rec = query_recursive(req);

		if (!is(req, "GET"))
			return wrong_method(req, "GET /v1/sandboxes/ID/list[/PATH]");
		if (rec < 0) {
			send_error(req, 400, "bad_query", "the query takes only recursive=true");
			return NULL;
		}
		o = json_pack("{s:s, s:s%, s:s%, s:b}", "op", "fs.list", "sandbox", id,
		    idlen, "path", n > 5 ? rest + 4 : "/", n > 5 ? n - 4 : (size_t)1,
		    "recursive", rec);
		if (o == NULL) {
			send_error(req, 400, "invalid_job", "field 'path': not UTF-8");
			return NULL;
		}
		return start(req, o, SBX_JSON);
	}
	if (SEG("tar"))
		return tar_route(req, id, idlen, rest + 3, n - 3);
	if (h2o_memis(rest, n, H2O_STRLIT("history"))) {
		if (!is(req, "GET"))
			return wrong_method(req, "GET /v1/sandboxes/ID/history");
		return start(req, json_pack("{s:s, s:s%}", "op", "sandbox.history",
		    "sandbox", id, idlen), SBX_JSON);
	}
#undef SEG
	send_error(req, 404, "not_found", "no such route");
	return NULL;
}
