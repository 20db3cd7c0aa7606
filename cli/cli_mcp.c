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
 * The methods, the tools, their arguments and their results are
 * proto/mcp.c's, shared with the gateway's POST /v1/mcp: this file is the
 * transport and the way a tool call runs (libsandq, synchronously). The
 * bound sandbox (--sandbox ID) is created if missing, each run committed.
 *
 * Sections: output, tool calls, the loop.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
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
#include "../proto/mcp.h"
#include "cli_common.h"
#include "cli_man.h"
#include "cli_mcp.h"

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

/*** Tool calls ***/

/* r as the shared code sees a result. */
static void
mcp_res_of(const struct sandq_result *r, struct mcp_res *v)
{
	*v = (struct mcp_res){
		.status = r->status, .exit_code = r->exit_code,
		.out = r->stdout_data, .out_len = r->stdout_len,
		.out_truncated = r->stdout_truncated,
		.err = r->stderr_data, .err_len = r->stderr_len,
		.err_truncated = r->stderr_truncated,
		.error_code = r->error_code, .error_message = r->error_message,
		.on_sandbox = r->sandbox != NULL, .version = r->version,
		.data = r->data, .data_len = r->data_len,
	};
}

/*
 * Runs the checked call q on the connection and waits for its result: the
 * tool result (the failure to submit or to wait is an isError one).
 */
static json_t *
mcp_run_call(struct mcp *m, const struct mcp_req *q)
{
	struct sandq_job_opts o = { 0 };
	struct sandq_op_args a = { 0 };
	struct sandq_result *r = NULL;
	char id[SANDQ_ID_MAX + 1];
	struct mcp_res v;
	json_t *out;
	int rc;

	if (q->kind == MCP_RUN_SH || q->kind == MCP_RUN_PY) {
		o.limits.wall_ms = q->wall_ms;
		o.sandbox = m->sandbox;
		rc = q->kind == MCP_RUN_PY ? sandq_submit_python(m->c, q->text, &o, id) :
		    sandq_submit_sh(m->c, q->text, &o, id);
		if (rc == 0)
			rc = sandq_wait(m->c, id, q->wait_ms, &r);
		if (rc == -ETIMEDOUT)
			return mcp_tool_error("no result within %lld s (job %s)",
			    (long long)(q->wait_ms / 1000), id);
	} else {
		a.sandbox = m->sandbox;
		a.path = q->path;
		a.data = q->data;
		a.data_len = q->data_len;
		a.key = q->key;
		a.value = q->value;
		rc = sandq_call(m->c, q->op, &a, NULL, q->wait_ms, &r);
	}
	if (rc != 0) {
		const char *e = sandq_last_error(m->c);

		return mcp_tool_error("%s", e);
	}
	mcp_res_of(r, &v);
	out = mcp_call_answer(q, &v);
	sandq_result_free(r);
	return out;
}

/* Answers one parsed message. 0, or -EIO when stdout failed. */
static int
mcp_handle_line(struct mcp *m, json_t *msg)
{
	const struct mcp_server srv = {
		.bound = m->sandbox != NULL, .version = CLI_VERSION,
		.bind_hint = "start the server as `sandq mcp --sandbox ID`",
	};
	struct mcp_step s;
	int rc = 0;

	mcp_handle(&srv, msg, &s);
	if (s.call)
		rc = mcp_send(mcp_result(s.id, mcp_run_call(m, &s.req)));
	else if (s.answer != NULL) {
		rc = mcp_send(s.answer);
		s.answer = NULL;
	}
	mcp_step_free(&s);
	return rc;
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
			rc = mcp_send(mcp_error(NULL, -32600, "message too large (8 MiB at most)"));
		} else if (n == 0) {
			continue;
		} else if ((msg = json_loadb((const char *)buf, (size_t)n,
		    JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je)) == NULL) {
			rc = mcp_send(mcp_error(NULL, -32700, "parse error"));
		} else {
			rc = mcp_handle_line(&m, msg);
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
