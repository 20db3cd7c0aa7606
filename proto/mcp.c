/*
 * mcp.c - the pure part of sandq's MCP server (contract in mcp.h): the
 * tools, their arguments, their results, and the JSON-RPC dispatch.
 *
 * DESIGN: methods: initialize (version negotiation: the client's version
 * if we speak it, else our latest), ping, tools/list, tools/call; every
 * other method is -32601; notifications (no id) and responses are no step.
 *
 * Tools: run_shell and run_python run in the bound sandbox or, unbound,
 * in a fresh throw-away sandbox per call. read_file, write_file,
 * list_files, kv_get and kv_set need the bound sandbox: unbound they are
 * not listed, and a call to one is an isError result saying how to bind.
 * A bad argument (missing, wrong type, unknown) is an isError result
 * naming it (the MCP 2025-11-25 advice: the model sees it and can correct
 * itself); an unknown tool is the JSON-RPC error -32602.
 *
 * Sections: output, arguments, results, tools, methods.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "mcp.h"
#include "mpjson.h"

const char *const mcp_versions[] = {
	MCP_LATEST, "2025-06-18", "2025-03-26", "2024-11-05",
};
const size_t mcp_nversions = sizeof(mcp_versions) / sizeof(mcp_versions[0]);

/*** Output ***/

bool
mcp_version_known(const char *v, size_t n)
{
	for (size_t i = 0; i < mcp_nversions; i++)
		if (strlen(mcp_versions[i]) == n && memcmp(v, mcp_versions[i], n) == 0)
			return true;
	return false;
}

json_t *
mcp_error(json_t *id, int code, const char *msg)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
	    "id", id ? id : json_null(), "error", "code", code, "message", msg);
}

json_t *
mcp_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
	    "result", result);
}

/*
 * Valid UTF-8 as it is, each byte of an invalid sequence replaced by
 * U+FFFD, so a command's binary output never breaks the answer.
 */
json_t *
mcp_text(const uint8_t *p, size_t n)
{
	json_t *s = json_stringn((const char *)p, n);
	char *buf, *o;

	if (s != NULL)
		return s;
	buf = xmalloc(n * 3 + 1);
	o = buf;
	for (size_t i = 0; i < n;) {
		size_t len = p[i] < 0x80 ? 1 : (p[i] & 0xe0) == 0xc0 ? 2 :
		    (p[i] & 0xf0) == 0xe0 ? 3 : (p[i] & 0xf8) == 0xf0 ? 4 : 0;
		json_t *t = len > 0 && i + len <= n ?
		    json_stringn((const char *)p + i, len) : NULL;

		if (t != NULL) {
			memcpy(o, p + i, len);
			o += len;
			i += len;
			json_decref(t);
		} else {
			memcpy(o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	s = json_stringn(buf, (size_t)(o - buf));
	free(buf);
	return s;
}

/* A tool result: one text content and isError; takes text and structured (may be NULL). */
static json_t *
tool_result(json_t *text, bool is_error, json_t *structured)
{
	json_t *r = json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text",
	    "text", text, "isError", is_error);

	if (structured != NULL)
		json_object_set_new(r, "structuredContent", structured);
	return r;
}

json_t *
mcp_tool_error(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return tool_result(mcp_text((const uint8_t *)msg, strlen(msg)), true, NULL);
}

/*** Arguments ***/

/*
 * Checks args against the names and kinds a tool takes: spec is
 * "name:kind[?]" items, kind s (a string without NUL), t (any string),
 * n (number > 0) or a (any). Returns
 * NULL, or an isError result naming the first bad argument.
 */
static json_t *
args_check(json_t *args, const char *const *spec, size_t n)
{
	const char *k;
	json_t *v;

	json_object_foreach(args, k, v) {
		bool known = false;

		for (size_t i = 0; i < n && !known; i++)
			known = strncmp(spec[i], k, strlen(k)) == 0 &&
			    spec[i][strlen(k)] == ':';
		if (!known) {
			json_t *name = mcp_text((const uint8_t *)k, strlen(k));
			json_t *r = mcp_tool_error("unknown argument '%s'",
			    json_string_value(name));

			json_decref(name);
			return r;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const char *colon = strchr(spec[i], ':');
		char name[64];
		bool optional = colon[2] == '?';

		snprintf(name, sizeof(name), "%.*s", (int)(colon - spec[i]), spec[i]);
		v = json_object_get(args, name);
		if (v == NULL) {
			if (!optional)
				return mcp_tool_error("argument '%s' is required", name);
			continue;
		}
		if ((colon[1] == 's' || colon[1] == 't') && !json_is_string(v))
			return mcp_tool_error("argument '%s' must be a string", name);
		/* A NUL would cut a C string short: only content may hold one. */
		if (colon[1] == 's' && strlen(json_string_value(v)) != json_string_length(v))
			return mcp_tool_error("argument '%s' must not contain NUL", name);
		if (colon[1] == 'n' && (!json_is_number(v) || json_number_value(v) <= 0 ||
		    json_number_value(v) > MCP_TIMEOUT_MAX_S))
			return mcp_tool_error("argument '%s' must be a number of seconds "
			    "above 0 and at most %d", name, MCP_TIMEOUT_MAX_S);
	}
	return NULL;
}

/* The string argument name, or NULL. */
static const char *
arg(json_t *args, const char *name)
{
	return json_string_value(json_object_get(args, name));
}

/* args (checked by spec) into q for kind; NULL or an isError result. */
static json_t *
args_take(enum mcp_kind kind, json_t *args, struct mcp_req *q)
{
	static const struct {
		const char *op;
		const char *spec[2];
		size_t n;
	} k[] = {
		[MCP_RUN_SH] = { "sh", { "command:s", "timeout_s:n?" }, 2 },
		[MCP_RUN_PY] = { "python", { "code:s", "timeout_s:n?" }, 2 },
		[MCP_FS_READ] = { "fs.read", { "path:s" }, 1 },
		[MCP_FS_WRITE] = { "fs.write", { "path:s", "content:t" }, 2 },
		[MCP_FS_LIST] = { "fs.list", { "path:s?" }, 1 },
		[MCP_KV_GET] = { "kv.get", { "key:s" }, 1 },
		[MCP_KV_SET] = { "kv.set", { "key:s", "value:a" }, 2 },
	};
	json_t *bad, *v;

	if ((bad = args_check(args, k[kind].spec, k[kind].n)) != NULL)
		return bad;
	memset(q, 0, sizeof(*q));
	q->kind = kind;
	q->op = k[kind].op;
	q->wait_ms = MCP_OP_WAIT_MS;
	q->path = arg(args, "path");
	q->key = arg(args, "key");
	if (kind == MCP_RUN_SH || kind == MCP_RUN_PY) {
		q->text = arg(args, kind == MCP_RUN_PY ? "code" : "command");
		q->wait_ms = MCP_WAIT_DEFAULT_MS;
		if ((v = json_object_get(args, "timeout_s")) != NULL) {
			/* Rounded up: 0 would mean the preset's limit, not none. */
			q->wall_ms = (uint64_t)(json_number_value(v) * 1000.0 + 0.999);
			if (q->wall_ms == 0)
				q->wall_ms = 1;
			q->wait_ms = (int64_t)q->wall_ms + MCP_WAIT_SLACK_MS;
		}
	}
	if (kind == MCP_FS_WRITE) {
		v = json_object_get(args, "content");
		q->data = json_string_value(v);
		q->data_len = json_string_length(v);
	}
	if (kind == MCP_KV_SET && (q->value = json_dumps(json_object_get(args,
	    "value"), JSON_COMPACT | JSON_ENCODE_ANY)) == NULL)
		fatalx("mcp: out of memory");
	return NULL;
}

/*** Results ***/

/*
 * The isError result for a result that is not ok: its status, and its
 * error code and message (the server's words, made valid JSON text).
 */
static json_t *
op_failed(const char *what, const struct mcp_res *r)
{
	char head[256];
	json_t *t;
	size_t hl;
	char *buf;
	const char *m = r->error_message ? r->error_message : "";

	snprintf(head, sizeof(head), "%s failed: %s%s%s: ", what, r->status,
	    r->error_code ? " " : "", r->error_code ? r->error_code : "");
	hl = strlen(head);
	buf = xmalloc(hl + strlen(m) + 1);
	memcpy(buf, head, hl);
	memcpy(buf + hl, m, strlen(m) + 1);
	t = mcp_text((const uint8_t *)buf, strlen(buf));
	free(buf);
	return tool_result(t, true, json_pack("{s:s, s:s?, s:s?}", "status",
	    r->status, "error_code", r->error_code, "error_message", r->error_message));
}

/* The text of a run's result: status, exit code, stdout and stderr. */
static json_t *
run_result(const struct mcp_res *r)
{
	bool ok = strcmp(r->status, "ok") == 0;
	char head[512];
	size_t hl, n;
	uint8_t *buf;
	json_t *t, *sc;

	if (strcmp(r->status, "ok") != 0 && strcmp(r->status, "exit") != 0 &&
	    r->out_len == 0 && r->err_len == 0 && r->error_code != NULL)
		return op_failed("the run", r);
	snprintf(head, sizeof(head), "status: %s\nexit_code: %d\n%s%s%s--- stdout%s ---\n",
	    r->status, r->exit_code, r->error_code ? "error: " : "",
	    r->error_code ? r->error_code : "", r->error_code ? "\n" : "",
	    r->out_truncated ? " (truncated)" : "");
	hl = strlen(head);
	n = hl + r->out_len + r->err_len + 64;
	buf = xmalloc(n);
	memcpy(buf, head, hl);
	if (r->out_len > 0)
		memcpy(buf + hl, r->out, r->out_len);
	hl += r->out_len;
	hl += (size_t)snprintf((char *)buf + hl, n - hl, "\n--- stderr%s ---\n",
	    r->err_truncated ? " (truncated)" : "");
	if (r->err_len > 0)
		memcpy(buf + hl, r->err, r->err_len);
	hl += r->err_len;
	t = mcp_text(buf, hl);
	free(buf);
	sc = json_pack("{s:s, s:i, s:o, s:o}", "status", r->status, "exit_code",
	    r->exit_code, "stdout", mcp_text(r->out, r->out_len),
	    "stderr", mcp_text(r->err, r->err_len));
	if (r->on_sandbox)
		json_object_set_new(sc, "version", json_integer((json_int_t)r->version));
	return tool_result(t, !ok, sc);
}

/* read_file: the file's bytes as text, or as base64 when not UTF-8. */
static json_t *
read_result(const msgpack_object *o)
{
	const uint8_t *p;
	size_t n;
	json_t *t, *out;
	char *b64, *msg;

	if (o == NULL || o->type != MSGPACK_OBJECT_BIN)
		return mcp_tool_error("fs.read answered without the file's bytes");
	p = (const uint8_t *)o->via.bin.ptr;
	n = o->via.bin.size;
	if ((t = json_stringn((const char *)p, n)) != NULL)
		return tool_result(t, false, NULL);
	b64 = mpjson_base64(p, n);
	msg = xmalloc(strlen(b64) + 96);
	snprintf(msg, strlen(b64) + 96, "binary file of %zu bytes, base64:\n%s", n, b64);
	out = tool_result(json_string(msg), false, NULL);
	free(msg);
	free(b64);
	return out;
}

/* list_files: one line per entry, "TYPE SIZE PATH", and the entries as JSON. */
static json_t *
list_result(const msgpack_object *o)
{
	json_t *list = o ? mpjson_value(o) : NULL, *e, *text;
	char *buf = NULL;
	size_t i, len = 0;
	FILE *f;

	if (!json_is_array(list)) {
		json_decref(list);
		return mcp_tool_error("fs.list answered without a listing");
	}
	if ((f = open_memstream(&buf, &len)) == NULL)
		fatalx("mcp: out of memory");
	json_array_foreach(list, i, e) {
		const char *type = json_string_value(json_object_get(e, "type"));
		const char *path = json_string_value(json_object_get(e, "path"));
		json_t *size = json_object_get(e, "size");

		fprintf(f, "%s %lld %s\n", type ? type : "?", json_is_integer(size) ?
		    (long long)json_integer_value(size) : 0LL, path ? path : "?");
	}
	fclose(f);
	text = mcp_text((const uint8_t *)buf, len);
	free(buf);
	return tool_result(text, false, json_pack("{s:o}", "entries", list));
}

json_t *
mcp_call_answer(const struct mcp_req *q, const struct mcp_res *r)
{
	msgpack_unpacked u;
	const msgpack_object *o = NULL;
	size_t off = 0;
	char msg[128];
	json_t *out;

	if (q->kind == MCP_RUN_SH || q->kind == MCP_RUN_PY)
		return run_result(r);
	if (strcmp(r->status, "ok") != 0)
		return op_failed(q->op, r);
	msgpack_unpacked_init(&u);
	if (r->data != NULL && msgpack_unpack_next(&u, (const char *)r->data,
	    r->data_len, &off) == MSGPACK_UNPACK_SUCCESS)
		o = &u.data;
	switch (q->kind) {
	case MCP_FS_READ:
		out = read_result(o);
		break;
	case MCP_FS_LIST:
		out = list_result(o);
		break;
	case MCP_KV_GET:
		out = o && o->type == MSGPACK_OBJECT_STR ? tool_result(mcp_text(
		    (const uint8_t *)o->via.str.ptr, o->via.str.size), false, NULL) :
		    mcp_tool_error("kv.get answered without a value");
		break;
	case MCP_FS_WRITE:
		snprintf(msg, sizeof(msg), "wrote %zu bytes (sandbox version %llu)",
		    q->data_len, (unsigned long long)r->version);
		out = tool_result(json_string(msg), false, NULL);
		break;
	default:
		snprintf(msg, sizeof(msg), "stored (sandbox version %llu)",
		    (unsigned long long)r->version);
		out = tool_result(json_string(msg), false, NULL);
		break;
	}
	msgpack_unpacked_destroy(&u);
	return out;
}

/*** Tools ***/

/* A tool's name, kind, description, schema and whether it needs a bound sandbox. */
struct mcp_tool {
	const char *name;
	enum mcp_kind kind;
	const char *description;
	const char *schema;		/* JSON text of inputSchema */
	bool needs_sandbox;
};

/* The tools in the order tools/list gives them; schemas as JSON text. */
#define TIMEOUT_PROP "\"timeout_s\": {\"type\": \"number\", \"exclusiveMinimum\": 0, " \
	"\"maximum\": 3600, \"description\": \"wall-clock limit in seconds " \
	"(default: the server's preset)\"}"

static const struct mcp_tool mcp_tools[] = {
	{ "run_shell", MCP_RUN_SH, "Runs a shell command (bash -c) in the sandbox, in "
	  "/workspace. Returns its status, exit code, stdout and stderr; isError "
	  "when it did not exit 0. In a bound sandbox its file changes are kept.",
	  "{\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\", "
	  "\"description\": \"the command line\"}, " TIMEOUT_PROP "}, "
	  "\"required\": [\"command\"], \"additionalProperties\": false}", false },
	{ "run_python", MCP_RUN_PY, "Runs Python code (python3 -c) in the sandbox, in "
	  "/workspace. Returns its status, exit code, stdout and stderr; isError "
	  "when it did not exit 0.",
	  "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\", "
	  "\"description\": \"the program\"}, " TIMEOUT_PROP "}, "
	  "\"required\": [\"code\"], \"additionalProperties\": false}", false },
	{ "read_file", MCP_FS_READ, "Reads a file of the sandbox (path relative to "
	  "/workspace). Text as it is; a file that is not UTF-8 as base64.",
	  "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, "
	  "\"required\": [\"path\"], \"additionalProperties\": false}", true },
	{ "write_file", MCP_FS_WRITE, "Writes a text file of the sandbox (path "
	  "relative to /workspace; its folder must exist), replacing it.",
	  "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, "
	  "\"content\": {\"type\": \"string\"}}, \"required\": [\"path\", \"content\"], "
	  "\"additionalProperties\": false}", true },
	{ "list_files", MCP_FS_LIST, "Lists a folder of the sandbox (default: "
	  "/workspace's root): one line per entry, TYPE SIZE PATH.",
	  "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, "
	  "\"additionalProperties\": false}", true },
	{ "kv_get", MCP_KV_GET, "Reads a key of the sandbox's key-value store: its "
	  "JSON value.",
	  "{\"type\": \"object\", \"properties\": {\"key\": {\"type\": \"string\"}}, "
	  "\"required\": [\"key\"], \"additionalProperties\": false}", true },
	{ "kv_set", MCP_KV_SET, "Stores a JSON value under a key of the sandbox's "
	  "key-value store.",
	  "{\"type\": \"object\", \"properties\": {\"key\": {\"type\": \"string\"}, "
	  "\"value\": {\"description\": \"any JSON value\"}}, "
	  "\"required\": [\"key\", \"value\"], \"additionalProperties\": false}", true },
};
#define MCP_NTOOLS (sizeof(mcp_tools) / sizeof(mcp_tools[0]))

/*** Methods ***/

/* params' string member name, or dflt. */
static const char *
pstr(json_t *params, const char *name, const char *dflt)
{
	const char *s = json_string_value(json_object_get(params, name));

	return s ? s : dflt;
}

/* initialize: the client's version if we speak it, else our latest. */
static json_t *
initialize(const struct mcp_server *srv, json_t *params)
{
	const char *want = pstr(params, "protocolVersion", "");
	const char *v = MCP_LATEST;

	for (size_t i = 0; i < mcp_nversions; i++)
		if (strcmp(want, mcp_versions[i]) == 0)
			v = mcp_versions[i];
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}",
	    "protocolVersion", v, "capabilities", "tools", "listChanged", false,
	    "serverInfo", "name", "sandq", "version", srv->version,
	    "instructions", "Tools run in a sandq sandbox: an isolated Linux "
	    "workspace at /workspace.");
}

/* tools/list: every tool, less the sandbox ones when unbound. */
static json_t *
tools_list(const struct mcp_server *srv)
{
	json_t *tools = json_array();

	for (size_t i = 0; i < MCP_NTOOLS; i++) {
		const struct mcp_tool *t = &mcp_tools[i];
		json_t *schema;

		if (t->needs_sandbox && !srv->bound)
			continue;
		if ((schema = json_loads(t->schema, 0, NULL)) == NULL)
			fatalx("mcp: the schema of %s is not JSON", t->name);
		json_array_append_new(tools, json_pack("{s:s, s:s, s:o}", "name",
		    t->name, "description", t->description, "inputSchema", schema));
	}
	return json_pack("{s:o}", "tools", tools);
}

/* tools/call: s->call with the checked request, or s->answer. */
static void
tools_call(const struct mcp_server *srv, json_t *id, json_t *params,
    struct mcp_step *s)
{
	const char *name = pstr(params, "name", NULL);
	json_t *args = json_object_get(params, "arguments");

	if (name == NULL) {
		s->answer = mcp_error(id, -32602, "params.name: expected a tool name");
		return;
	}
	if (args != NULL && !json_is_object(args)) {
		s->answer = mcp_error(id, -32602, "params.arguments: expected an object");
		return;
	}
	for (size_t i = 0; i < MCP_NTOOLS; i++) {
		const struct mcp_tool *t = &mcp_tools[i];
		json_t *empty = NULL, *bad;

		if (strcmp(name, t->name) != 0)
			continue;
		if (t->needs_sandbox && !srv->bound) {
			s->answer = mcp_result(id, mcp_tool_error("%s needs a bound "
			    "sandbox: %s", t->name, srv->bind_hint));
			return;
		}
		if (args == NULL)
			args = empty = json_object();
		bad = args_take(t->kind, args, &s->req);
		json_decref(empty);
		if (bad != NULL)
			s->answer = mcp_result(id, bad);
		else
			s->call = true;
		return;
	}
	s->answer = mcp_error(id, -32602, "unknown tool");
}

void
mcp_handle(const struct mcp_server *srv, json_t *msg, struct mcp_step *s)
{
	json_t *id, *params;
	const char *method;

	memset(s, 0, sizeof(*s));
	if (!json_is_object(msg)) {
		s->answer = mcp_error(NULL, -32600, "expected a JSON-RPC object "
		    "(batches are not part of MCP)");
		return;
	}
	id = json_object_get(msg, "id");
	method = pstr(msg, "method", NULL);
	if (id != NULL && !json_is_string(id) && !json_is_integer(id)) {
		s->answer = mcp_error(NULL, -32600, "id: expected a string or an integer");
		return;
	}
	if (strcmp(pstr(msg, "jsonrpc", ""), "2.0") != 0) {
		s->answer = mcp_error(id, -32600, "jsonrpc: expected \"2.0\"");
		return;
	}
	if (method == NULL) {
		if (id == NULL || json_object_get(msg, "method") != NULL)
			s->answer = mcp_error(id, -32600, "method: expected a string");
		return;	/* else a response to a request we never send */
	}
	if (id == NULL)
		return;	/* notifications: initialized, cancelled, ... */
	params = json_object_get(msg, "params");
	if (params != NULL && !json_is_object(params)) {
		s->answer = mcp_error(id, -32602, "params: expected an object");
		return;
	}
	if (strcmp(method, "initialize") == 0)
		s->answer = mcp_result(id, initialize(srv, params));
	else if (strcmp(method, "ping") == 0)
		s->answer = mcp_result(id, json_object());
	else if (strcmp(method, "tools/list") == 0)
		s->answer = mcp_result(id, tools_list(srv));
	else if (strcmp(method, "tools/call") == 0)
		tools_call(srv, id, params, s);
	else
		s->answer = mcp_error(id, -32601, "method not found");
	if (s->call) {
		s->id = json_incref(id);
		s->msg = json_incref(msg);
	}
}

void
mcp_step_free(struct mcp_step *s)
{
	json_decref(s->answer);
	json_decref(s->id);
	json_decref(s->msg);
	free(s->req.value);
	memset(s, 0, sizeof(*s));
}
