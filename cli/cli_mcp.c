/*
 * cli_mcp.c - `sandq mcp`: a Model Context Protocol server over stdio, so an
 * agent framework's MCP client can run commands and use files and kv in a
 * sandq sandbox as the tenant whose Redis credentials it was started with.
 *
 * Transport (MCP "stdio"): one JSON-RPC 2.0 message per line on stdin, one
 * per line on stdout; stdout carries nothing else (jansson's compact dump
 * has no newline in it), logs go to stderr. A line is bounded (MCP_LINE_MAX):
 * past it the rest of the line is dropped and the answer is -32600. EOF
 * ends the server with status 0.
 *
 * DESIGN: one thread, one synchronous libsandq connection, one request at a
 * time: a tool call submits a job and waits for its result before the next
 * line is read. So notifications/cancelled is read only after the call it
 * names has finished and is ignored (the job's own time limit bounds it).
 * Methods: initialize (version negotiation: the client's version if we
 * speak it, else our latest), ping, tools/list, tools/call; every other
 * method is -32601; notifications (no id) and responses are ignored.
 *
 * Tools: run_shell and run_python run in the bound sandbox (--sandbox ID,
 * created if missing, each run committed) or, unbound, in a fresh
 * throw-away sandbox per call. read_file, write_file, list_files, kv_get
 * and kv_set need the bound sandbox: unbound they are not listed, and a
 * call to one is an isError result saying so. A bad argument (missing,
 * wrong type, unknown) is an isError result naming it (the MCP 2025-11-25
 * advice: the model sees it and can correct itself); an unknown tool is
 * the JSON-RPC error -32602.
 *
 * Sections: output, tools, methods, the loop.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <msgpack.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/xmalloc.h"
#include "../libsandq/sandq.h"
#include "../proto/job.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_mcp.h"

#define MCP_LINE_MAX (8u << 20)		/* bytes of one message */
#define MCP_TIMEOUT_MAX_S 3600		/* timeout_s at most */
#define MCP_WAIT_SLACK_MS 60000		/* waited past a run's wall limit */
#define MCP_WAIT_DEFAULT_MS 900000	/* a run without timeout_s */
#define MCP_OP_WAIT_MS 120000		/* an fs/kv/sandbox op */
#define MCP_LATEST "2025-11-25"

/* The protocol versions we speak, newest first. */
static const char *const mcp_versions[] = {
	MCP_LATEST, "2025-06-18", "2025-03-26", "2024-11-05",
};

/* The server: its connection and the sandbox it is bound to. */
struct mcp {
	struct sandq *c;
	const char *sandbox;		/* NULL: a fresh sandbox per run */
};

/*** Output ***/

/* Writes j as one line on stdout and drops it. 0 or -EIO. */
static int
mcp_send(json_t *j)
{
	int rc = 0;

	if (json_dumpf(j, stdout, JSON_COMPACT) < 0 || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF)
		rc = -EIO;
	json_decref(j);
	return rc;
}

/* A JSON-RPC error answer to id (NULL: null). */
static int
mcp_send_error(json_t *id, int code, const char *msg)
{
	return mcp_send(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
	    "id", id ? id : json_null(), "error", "code", code, "message", msg));
}

/* A JSON-RPC result answer to id; takes result. */
static int
mcp_send_result(json_t *id, json_t *result)
{
	return mcp_send(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
	    "result", result));
}

/*
 * n bytes as a JSON string: valid UTF-8 as it is, each byte of an invalid
 * sequence replaced by U+FFFD, so a command's binary output never breaks
 * the answer. A new reference.
 */
static json_t *
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
mcp_tool_result(json_t *text, bool is_error, json_t *structured)
{
	json_t *r = json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text",
	    "text", text, "isError", is_error);

	if (structured != NULL)
		json_object_set_new(r, "structuredContent", structured);
	return r;
}

/* A tool error result with a printf message. */
static json_t * __attribute__((format(printf, 1, 2)))
mcp_tool_error(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return mcp_tool_result(mcp_text((const uint8_t *)msg, strlen(msg)), true, NULL);
}

/*
 * The isError result for an op's result that is not ok: its status, and
 * its error code and message (the server's words, made valid JSON text).
 */
static json_t *
mcp_op_failed(const char *what, const struct sandq_result *r)
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
	return mcp_tool_result(t, true, json_pack("{s:s, s:s?, s:s?}", "status",
	    r->status, "error_code", r->error_code, "error_message", r->error_message));
}

/*** Tools ***/

/* A tool's name, description, schema and whether it needs a bound sandbox. */
struct mcp_tool {
	const char *name;
	const char *description;
	const char *schema;		/* JSON text of inputSchema */
	bool needs_sandbox;
	json_t *(*call)(struct mcp *, json_t *args);
};

/*
 * Checks args against the names and kinds a tool takes: spec is
 * "name:kind[?]" items, kind s (a string without NUL), t (any string),
 * n (number > 0) or a (any). Returns
 * NULL, or an isError result naming the first bad argument.
 */
static json_t *
mcp_args_check(json_t *args, const char *const *spec, size_t n)
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

/* The text of a run's result: status, exit code, stdout and stderr. */
static json_t *
mcp_run_result(const struct sandq_result *r)
{
	bool ok = strcmp(r->status, "ok") == 0;
	char head[512];
	size_t hl, n;
	uint8_t *buf;
	json_t *t, *sc;

	if (strcmp(r->status, "ok") != 0 && strcmp(r->status, "exit") != 0 &&
	    r->stdout_len == 0 && r->stderr_len == 0 && r->error_code != NULL)
		return mcp_op_failed("the run", r);
	snprintf(head, sizeof(head), "status: %s\nexit_code: %d\n%s%s%s--- stdout%s ---\n",
	    r->status, r->exit_code, r->error_code ? "error: " : "",
	    r->error_code ? r->error_code : "", r->error_code ? "\n" : "",
	    r->stdout_truncated ? " (truncated)" : "");
	hl = strlen(head);
	n = hl + r->stdout_len + r->stderr_len + 64;
	buf = xmalloc(n);
	memcpy(buf, head, hl);
	if (r->stdout_len > 0)
		memcpy(buf + hl, r->stdout_data, r->stdout_len);
	hl += r->stdout_len;
	hl += (size_t)snprintf((char *)buf + hl, n - hl, "\n--- stderr%s ---\n",
	    r->stderr_truncated ? " (truncated)" : "");
	if (r->stderr_len > 0)
		memcpy(buf + hl, r->stderr_data, r->stderr_len);
	hl += r->stderr_len;
	t = mcp_text(buf, hl);
	free(buf);
	sc = json_pack("{s:s, s:i, s:o, s:o}", "status", r->status, "exit_code",
	    r->exit_code, "stdout", mcp_text(r->stdout_data, r->stdout_len),
	    "stderr", mcp_text(r->stderr_data, r->stderr_len));
	if (r->sandbox != NULL)
		json_object_set_new(sc, "version", json_integer((json_int_t)r->version));
	return mcp_tool_result(t, !ok, sc);
}

/* run_shell and run_python: code by bash -c or python3 -c. */
static json_t *
mcp_run(struct mcp *m, json_t *args, bool python)
{
	static const char *const shell[] = { "command:s", "timeout_s:n?" };
	static const char *const py[] = { "code:s", "timeout_s:n?" };
	struct sandq_job_opts o = { 0 };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];
	int64_t wait_ms = MCP_WAIT_DEFAULT_MS;
	json_t *bad, *v, *out;
	const char *text;
	int rc;

	if ((bad = mcp_args_check(args, python ? py : shell, 2)) != NULL)
		return bad;
	text = json_string_value(json_object_get(args, python ? "code" : "command"));
	if ((v = json_object_get(args, "timeout_s")) != NULL) {
		/* Rounded up: 0 would mean the preset's limit, not none. */
		o.limits.wall_ms = (uint64_t)(json_number_value(v) * 1000.0 + 0.999);
		if (o.limits.wall_ms == 0)
			o.limits.wall_ms = 1;
		wait_ms = (int64_t)o.limits.wall_ms + MCP_WAIT_SLACK_MS;
	}
	o.sandbox = m->sandbox;
	rc = python ? sandq_submit_python(m->c, text, &o, id) :
	    sandq_submit_sh(m->c, text, &o, id);
	if (rc == 0)
		rc = sandq_wait(m->c, id, wait_ms, &r);
	if (rc == -ETIMEDOUT)
		return mcp_tool_error("no result within %lld s (job %s)",
		    (long long)(wait_ms / 1000), id);
	if (rc != 0) {
		const char *e = sandq_last_error(m->c);

		return mcp_tool_result(mcp_text((const uint8_t *)e, strlen(e)), true, NULL);
	}
	out = mcp_run_result(r);
	sandq_result_free(r);
	return out;
}

/* run_shell {command, timeout_s?}: bash -c COMMAND. */
static json_t *
mcp_run_shell(struct mcp *m, json_t *args)
{
	return mcp_run(m, args, false);
}

/* run_python {code, timeout_s?}: python3 -c CODE. */
static json_t *
mcp_run_python(struct mcp *m, json_t *args)
{
	return mcp_run(m, args, true);
}

/*
 * Runs op on the bound sandbox with a. Returns NULL with *out the result
 * (ok), or an isError result (the call failed, or the op was refused).
 */
static json_t *
mcp_op(struct mcp *m, const char *op, struct sandq_op_args *a,
    struct sandq_result **out)
{
	struct sandq_result *r = NULL;
	json_t *err;

	*out = NULL;
	a->sandbox = m->sandbox;
	if (sandq_call(m->c, op, a, NULL, MCP_OP_WAIT_MS, &r) != 0) {
		const char *e = sandq_last_error(m->c);

		return mcp_tool_result(mcp_text((const uint8_t *)e, strlen(e)), true, NULL);
	}
	if (strcmp(r->status, "ok") != 0) {
		err = mcp_op_failed(op, r);
		sandq_result_free(r);
		return err;
	}
	*out = r;
	return NULL;
}

/* read_file: the file's bytes as text, or as base64 when not UTF-8. */
static json_t *
mcp_read_file(struct mcp *m, json_t *args)
{
	static const char *const spec[] = { "path:s" };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r;
	msgpack_unpacked u;
	size_t off = 0;
	json_t *bad, *out;

	if ((bad = mcp_args_check(args, spec, 1)) != NULL)
		return bad;
	a.path = json_string_value(json_object_get(args, "path"));
	if ((bad = mcp_op(m, "fs.read", &a, &r)) != NULL)
		return bad;
	msgpack_unpacked_init(&u);
	if (r->data == NULL || msgpack_unpack_next(&u, (const char *)r->data,
	    r->data_len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    u.data.type != MSGPACK_OBJECT_BIN) {
		out = mcp_tool_error("fs.read answered without the file's bytes");
	} else {
		const uint8_t *p = (const uint8_t *)u.data.via.bin.ptr;
		size_t n = u.data.via.bin.size;
		json_t *t = json_stringn((const char *)p, n);

		if (t != NULL) {
			out = mcp_tool_result(t, false, NULL);
		} else {
			char *b64 = cli_base64(p, n);
			char *msg = xmalloc(strlen(b64) + 96);

			snprintf(msg, strlen(b64) + 96, "binary file of %zu bytes, "
			    "base64:\n%s", n, b64);
			out = mcp_tool_result(json_string(msg), false, NULL);
			free(msg);
			free(b64);
		}
	}
	msgpack_unpacked_destroy(&u);
	sandq_result_free(r);
	return out;
}

/* write_file: content (text) to path, a new version of the sandbox. */
static json_t *
mcp_write_file(struct mcp *m, json_t *args)
{
	static const char *const spec[] = { "path:s", "content:t" };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r;
	json_t *bad, *c, *out;
	char msg[128];

	if ((bad = mcp_args_check(args, spec, 2)) != NULL)
		return bad;
	c = json_object_get(args, "content");
	a.path = json_string_value(json_object_get(args, "path"));
	a.data = json_string_value(c);
	a.data_len = json_string_length(c);
	if ((bad = mcp_op(m, "fs.write", &a, &r)) != NULL)
		return bad;
	snprintf(msg, sizeof(msg), "wrote %zu bytes (sandbox version %llu)",
	    a.data_len, (unsigned long long)r->version);
	out = mcp_tool_result(json_string(msg), false, NULL);
	sandq_result_free(r);
	return out;
}

/* list_files: one line per entry, "TYPE SIZE PATH", and the entries as JSON. */
static json_t *
mcp_list_files(struct mcp *m, json_t *args)
{
	static const char *const spec[] = { "path:s?" };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r;
	json_t *bad, *list, *e, *out, *text;
	size_t i;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if ((bad = mcp_args_check(args, spec, 1)) != NULL)
		return bad;
	a.path = json_string_value(json_object_get(args, "path"));
	if ((bad = mcp_op(m, "fs.list", &a, &r)) != NULL)
		return bad;
	list = cli_result_data_json(r);
	sandq_result_free(r);
	if (!json_is_array(list)) {
		json_decref(list);
		return mcp_tool_error("fs.list answered without a listing");
	}
	if ((f = open_memstream(&buf, &len)) == NULL)
		fatalx("cli_mcp: out of memory");
	json_array_foreach(list, i, e)
		fprintf(f, "%s %lld %s\n", cli_jstr(e, "type", "?"),
		    (long long)cli_jint(e, "size"), cli_jstr(e, "path", "?"));
	fclose(f);
	text = mcp_text((const uint8_t *)buf, len);
	free(buf);
	out = mcp_tool_result(text, false, json_pack("{s:o}", "entries", list));
	return out;
}

/* kv_get: the value's JSON text as stored. */
static json_t *
mcp_kv_get(struct mcp *m, json_t *args)
{
	static const char *const spec[] = { "key:s" };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r;
	json_t *bad, *v, *out;

	if ((bad = mcp_args_check(args, spec, 1)) != NULL)
		return bad;
	a.key = json_string_value(json_object_get(args, "key"));
	if ((bad = mcp_op(m, "kv.get", &a, &r)) != NULL)
		return bad;
	v = cli_result_data_json(r);
	out = json_is_string(v) ? mcp_tool_result(json_incref(v), false, NULL) :
	    mcp_tool_error("kv.get answered without a value");
	json_decref(v);
	sandq_result_free(r);
	return out;
}

/* kv_set: value (any JSON) stored as its compact JSON text. */
static json_t *
mcp_kv_set(struct mcp *m, json_t *args)
{
	static const char *const spec[] = { "key:s", "value:a" };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r;
	json_t *bad, *out;
	char *text;
	char msg[96];

	if ((bad = mcp_args_check(args, spec, 2)) != NULL)
		return bad;
	if ((text = json_dumps(json_object_get(args, "value"),
	    JSON_COMPACT | JSON_ENCODE_ANY)) == NULL)
		fatalx("cli_mcp: out of memory");
	a.key = json_string_value(json_object_get(args, "key"));
	a.value = text;
	bad = mcp_op(m, "kv.set", &a, &r);
	free(text);
	if (bad != NULL)
		return bad;
	snprintf(msg, sizeof(msg), "stored (sandbox version %llu)",
	    (unsigned long long)r->version);
	out = mcp_tool_result(json_string(msg), false, NULL);
	sandq_result_free(r);
	return out;
}

/* The tools in the order tools/list gives them; schemas as JSON text. */
#define TIMEOUT_PROP "\"timeout_s\": {\"type\": \"number\", \"exclusiveMinimum\": 0, " \
	"\"maximum\": 3600, \"description\": \"wall-clock limit in seconds " \
	"(default: the server's preset)\"}"

static const struct mcp_tool mcp_tools[] = {
	{ "run_shell", "Runs a shell command (bash -c) in the sandbox, in "
	  "/workspace. Returns its status, exit code, stdout and stderr; isError "
	  "when it did not exit 0. In a bound sandbox its file changes are kept.",
	  "{\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\", "
	  "\"description\": \"the command line\"}, " TIMEOUT_PROP "}, "
	  "\"required\": [\"command\"], \"additionalProperties\": false}",
	  false, mcp_run_shell },
	{ "run_python", "Runs Python code (python3 -c) in the sandbox, in "
	  "/workspace. Returns its status, exit code, stdout and stderr; isError "
	  "when it did not exit 0.",
	  "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\", "
	  "\"description\": \"the program\"}, " TIMEOUT_PROP "}, "
	  "\"required\": [\"code\"], \"additionalProperties\": false}",
	  false, mcp_run_python },
	{ "read_file", "Reads a file of the sandbox (path relative to /workspace). "
	  "Text as it is; a file that is not UTF-8 as base64.",
	  "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, "
	  "\"required\": [\"path\"], \"additionalProperties\": false}",
	  true, mcp_read_file },
	{ "write_file", "Writes a text file of the sandbox (path relative to "
	  "/workspace; its folder must exist), replacing it.",
	  "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, "
	  "\"content\": {\"type\": \"string\"}}, \"required\": [\"path\", \"content\"], "
	  "\"additionalProperties\": false}",
	  true, mcp_write_file },
	{ "list_files", "Lists a folder of the sandbox (default: /workspace's root): "
	  "one line per entry, TYPE SIZE PATH.",
	  "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, "
	  "\"additionalProperties\": false}",
	  true, mcp_list_files },
	{ "kv_get", "Reads a key of the sandbox's key-value store: its JSON value.",
	  "{\"type\": \"object\", \"properties\": {\"key\": {\"type\": \"string\"}}, "
	  "\"required\": [\"key\"], \"additionalProperties\": false}",
	  true, mcp_kv_get },
	{ "kv_set", "Stores a JSON value under a key of the sandbox's key-value store.",
	  "{\"type\": \"object\", \"properties\": {\"key\": {\"type\": \"string\"}, "
	  "\"value\": {\"description\": \"any JSON value\"}}, "
	  "\"required\": [\"key\", \"value\"], \"additionalProperties\": false}",
	  true, mcp_kv_set },
};
#define MCP_NTOOLS (sizeof(mcp_tools) / sizeof(mcp_tools[0]))

/*** Methods ***/

/* initialize: the client's version if we speak it, else our latest. */
static json_t *
mcp_initialize(json_t *params)
{
	const char *want = cli_jstr(params, "protocolVersion", "");
	const char *v = MCP_LATEST;

	for (size_t i = 0; i < sizeof(mcp_versions) / sizeof(mcp_versions[0]); i++)
		if (strcmp(want, mcp_versions[i]) == 0)
			v = mcp_versions[i];
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}",
	    "protocolVersion", v, "capabilities", "tools", "listChanged", false,
	    "serverInfo", "name", "sandq", "version", CLI_VERSION,
	    "instructions", "Tools run in a sandq sandbox: an isolated Linux "
	    "workspace at /workspace.");
}

/* tools/list: every tool, less the sandbox ones when unbound. */
static json_t *
mcp_tools_list(const struct mcp *m)
{
	json_t *tools = json_array();

	for (size_t i = 0; i < MCP_NTOOLS; i++) {
		const struct mcp_tool *t = &mcp_tools[i];
		json_t *schema;

		if (t->needs_sandbox && m->sandbox == NULL)
			continue;
		if ((schema = json_loads(t->schema, 0, NULL)) == NULL)
			fatalx("cli_mcp: the schema of %s is not JSON", t->name);
		json_array_append_new(tools, json_pack("{s:s, s:s, s:o}", "name",
		    t->name, "description", t->description, "inputSchema", schema));
	}
	return json_pack("{s:o}", "tools", tools);
}

/*
 * tools/call: answers id with the tool's result, or a JSON-RPC error for a
 * call that names no tool we have. 0 or -EIO.
 */
static int
mcp_tools_call(struct mcp *m, json_t *id, json_t *params)
{
	const char *name = cli_jstr(params, "name", NULL);
	json_t *args = json_object_get(params, "arguments");

	if (name == NULL)
		return mcp_send_error(id, -32602, "params.name: expected a tool name");
	if (args != NULL && !json_is_object(args))
		return mcp_send_error(id, -32602, "params.arguments: expected an object");
	for (size_t i = 0; i < MCP_NTOOLS; i++) {
		const struct mcp_tool *t = &mcp_tools[i];
		json_t *empty = NULL, *r;

		if (strcmp(name, t->name) != 0)
			continue;
		if (t->needs_sandbox && m->sandbox == NULL)
			return mcp_send_result(id, mcp_tool_error("%s needs a bound sandbox: "
			    "start the server as `sandq mcp --sandbox ID`", t->name));
		if (args == NULL)
			args = empty = json_object();
		r = t->call(m, args);
		json_decref(empty);
		return mcp_send_result(id, r);
	}
	return mcp_send_error(id, -32602, "unknown tool");
}

/* Answers one parsed message. 0, or -EIO when stdout failed. */
static int
mcp_handle(struct mcp *m, json_t *msg)
{
	json_t *id, *params;
	const char *method;

	if (!json_is_object(msg))
		return mcp_send_error(NULL, -32600, "expected a JSON-RPC object "
		    "(batches are not part of MCP)");
	id = json_object_get(msg, "id");
	method = cli_jstr(msg, "method", NULL);
	if (id != NULL && !json_is_string(id) && !json_is_integer(id))
		return mcp_send_error(NULL, -32600, "id: expected a string or an integer");
	if (strcmp(cli_jstr(msg, "jsonrpc", ""), "2.0") != 0)
		return mcp_send_error(id, -32600, "jsonrpc: expected \"2.0\"");
	if (method == NULL) {
		if (id == NULL || json_object_get(msg, "method") != NULL)
			return mcp_send_error(id, -32600, "method: expected a string");
		return 0;	/* a response to a request we never send */
	}
	if (id == NULL)
		return 0;	/* notifications: initialized, cancelled, ... */
	params = json_object_get(msg, "params");
	if (params != NULL && !json_is_object(params))
		return mcp_send_error(id, -32602, "params: expected an object");
	if (strcmp(method, "initialize") == 0)
		return mcp_send_result(id, mcp_initialize(params));
	if (strcmp(method, "ping") == 0)
		return mcp_send_result(id, json_object());
	if (strcmp(method, "tools/list") == 0)
		return mcp_send_result(id, mcp_tools_list(m));
	if (strcmp(method, "tools/call") == 0)
		return mcp_tools_call(m, id, params);
	return mcp_send_error(id, -32601, "method not found");
}

/*** The loop ***/

/*
 * Reads one line of stdin into *buf (without its newline), at most
 * MCP_LINE_MAX bytes: returns its length, -EMSGSIZE for a longer line
 * (read to its end and dropped), or -1 at EOF with nothing read.
 */
static long
mcp_read_line(uint8_t **buf, size_t *cap)
{
	size_t n = 0;
	bool over = false;
	int ch;

	while ((ch = getc_unlocked(stdin)) != EOF && ch != '\n') {
		if (n >= MCP_LINE_MAX) {
			over = true;
			continue;
		}
		if (n + 1 >= *cap) {
			*cap = *cap ? *cap * 2 : 4096;
			*buf = xreallocarray(*buf, *cap, 1);
		}
		(*buf)[n++] = (uint8_t)ch;
	}
	if (ch == EOF && n == 0 && !over)
		return -1;
	if (over)
		return -EMSGSIZE;
	if (n > 0 && (*buf)[n - 1] == '\r')
		n--;
	return (long)n;
}

/* Binds the server to sandbox: creates it unless it exists. 0 or 125. */
static int
mcp_bind(struct mcp *m, const char *sandbox)
{
	struct sandq_op_args a = { .sandbox = sandbox };
	struct sandq_result *r = NULL;
	int status = 0;

	if (sandq_call(m->c, "sandbox.create", &a, NULL, MCP_OP_WAIT_MS, &r) != 0)
		return cli_fail("mcp: creating sandbox %s: %s", sandbox,
		    cli_esc(sandq_last_error(m->c)));
	if (strcmp(r->status, "ok") != 0 && (r->error_code == NULL ||
	    strcmp(r->error_code, "sandbox_exists") != 0))
		status = cli_fail("mcp: creating sandbox %s: %s %s", sandbox,
		    cli_esc(r->status), cli_esc(r->error_message));
	sandq_result_free(r);
	m->sandbox = sandbox;
	return status;
}

/*
 * The verb (contract in cli_mcp.h): its options, the connection, the bound
 * sandbox, then one answer per line read until EOF. Only the answers go to
 * stdout; every failure of the server itself goes to stderr.
 */
int
cli_mcp_main(const struct cli_conn *conn, const char *sandbox, int argc,
    char **argv)
{
	static const struct option opts[] = {
		{ "sandbox", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mcp m = { 0 };
	uint8_t *buf = NULL;
	size_t cap = 0;
	char err[256];
	int ch, status = 0;
	long n;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (ch) {
		case 's':
			sandbox = optarg;
			break;
		case 'h':
			cli_man_print("mcp");
			return 0;
		default:
			cli_warn("mcp: unknown option or missing argument '%s'",
			    cli_esc(argv[optind - 1]));
			fputs("Try 'sandq help mcp'.\n", stderr);
			return 2;
		}
	}
	if (conn->help) {
		cli_man_print("mcp");
		return 0;
	}
	if (optind < argc) {
		cli_warn("mcp: unexpected operand '%s'", cli_esc(argv[optind]));
		fputs("Try 'sandq help mcp'.\n", stderr);
		return 2;
	}
	if (sandbox != NULL && (!payload_id_valid(sandbox, strlen(sandbox)) ||
	    strcmp(sandbox, ".") == 0 || strcmp(sandbox, "..") == 0)) {
		cli_warn("mcp: --sandbox '%s': expected 1 to 128 characters of "
		    "A-Z a-z 0-9 . _ -", cli_esc(sandbox));
		return 2;
	}
	/* A client gone: writes fail with EPIPE and the loop ends. */
	signal(SIGPIPE, SIG_IGN);
	if ((m.c = sandq_connect(conn->redis, cli_tenant_or_default(conn->tenant),
	    err, sizeof(err))) == NULL)
		return cli_fail("mcp: %s", cli_esc(err));
	if (sandbox != NULL && (status = mcp_bind(&m, sandbox)) != 0)
		goto out_close;
	while ((n = mcp_read_line(&buf, &cap)) != -1) {
		json_t *msg;
		json_error_t je;
		int rc;

		if (n == -EMSGSIZE) {
			rc = mcp_send_error(NULL, -32600, "message too large (8 MiB at most)");
		} else if (n == 0) {
			continue;
		} else if ((msg = json_loadb((const char *)buf, (size_t)n,
		    JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je)) == NULL) {
			rc = mcp_send_error(NULL, -32700, "parse error");
		} else {
			rc = mcp_handle(&m, msg);
			json_decref(msg);
		}
		if (rc != 0) {
			status = cli_fail("mcp: writing standard output: %s", strerror(errno));
			break;
		}
	}
out_close:
	free(buf);
	sandq_close(m.c);
	return status;
}
