/*
 * cli_output.c - running one op of the sandbox, fs and kv verbs and
 * printing its result: the data in words, or with --json converted from
 * msgpack to one line of JSON (bin as base64); a rejected op prints
 * "sandq: CODE: MESSAGE" and gives exit status 125. The verbs (cli_sandbox.c,
 * cli_fs.c) call these through cli_sandbox_int.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_common.h"
#include "cli_sandbox_int.h"
#include "../libsandq/sandq.h"

/*** Output ***/

/* {"sandbox","version","snapshot"} of a result, for ops without data. */
json_t *
cli__result_head_json(const struct sandq_result *r)
{
	json_t *o = json_object();

	if (r->sandbox)
		json_object_set_new(o, "sandbox", json_string(r->sandbox));
	if (r->version)
		json_object_set_new(o, "version", json_integer((json_int_t)r->version));
	if (r->snapshot)
		json_object_set_new(o, "snapshot", json_string(r->snapshot));
	return o;
}

/* "k=v,k2=v2" of a labels map into buf, each key and value escaped. */
const char *
cli__fmt_labels(char *buf, size_t size, const json_t *labels)
{
	const char *k;
	json_t *v;
	size_t n = 0;

	buf[0] = '\0';
	json_object_foreach((json_t *)(uintptr_t)labels, k, v) {
		int w = snprintf(buf + n, size - n, "%s%s=%s", n ? "," : "", cli_esc(k),
		    json_is_string(v) ? cli_escn(json_string_value(v),
		    json_string_length(v)) : "");

		if (w < 0 || (size_t)w >= size - n) {
			/* No half label (nor half a character): cut before it. */
			snprintf(buf + n, size - n, "%s...", n ? "," : "");
			break;
		}
		n += (size_t)w;
	}
	return buf;
}

/* An info map as "key: value" lines, the server's text escaped. */
void
cli__print_info(const json_t *o)
{
	char t1[32], t2[32], lb[2048];

	printf("sandbox: %s\n", cli_jesc(o, "sandbox", ""));
	printf("version: %" JSON_INTEGER_FORMAT "\n", cli_jint(o, "version"));
	printf("snapshot: %s\n", cli_jesc(o, "snapshot", ""));
	if (json_object_get(o, "size"))
		printf("size: %" JSON_INTEGER_FORMAT "\n", cli_jint(o, "size"));
	printf("created_at: %s\n", cli_fmt_time_ms(t1, sizeof(t1), cli_jint(o, "created_at")));
	printf("updated_at: %s\n", cli_fmt_time_ms(t2, sizeof(t2), cli_jint(o, "updated_at")));
	printf("labels: %s\n", cli__fmt_labels(lb, sizeof(lb), json_object_get(o, "labels")));
}

/* An fs entry as "key: value" lines, names and target escaped. */
void
cli__print_entry(const json_t *o)
{
	char t[32];

	printf("path: %s\n", cli_jesc(o, "path", ""));
	printf("type: %s\n", cli_jesc(o, "type", "?"));
	printf("size: %" JSON_INTEGER_FORMAT "\n", cli_jint(o, "size"));
	printf("mode: %04o\n", (unsigned)(cli_jint(o, "mode") & 07777));
	printf("mtime: %s\n", cli_fmt_time_ms(t, sizeof(t), cli_jint(o, "mtime") * 1000));
	if (json_object_get(o, "target"))
		printf("target: %s\n", cli_jesc(o, "target", ""));
}

/*
 * Explains a result that is not ok: "sandq: CODE: MESSAGE" for a rejected
 * or failed op. Returns the exit status.
 */
static int
result_failed(const struct sandq_result *r)
{
	if (r->error_code)
		cli_warn("%s: %s", r->error_code,
		    r->error_message && r->error_message[0] ? r->error_message :
		    r->status);
	else
		cli_warn("%s: the op did not succeed", r->status);
	return sandq_result_exit_status(r) ? sandq_result_exit_status(r) :
	    CLI_EXIT_SANDQ;
}

/*
 * Runs one op and waits for it. Returns 0 with *out an ok result (owned by
 * the caller), or the exit status with the failure explained.
 */
int
cli__call(const struct sbx *s, struct sandq *c, const char *op,
    const struct sandq_op_args *a, struct sandq_result **out)
{
	struct sandq_job_opts o = cli__job_opts(s);
	struct sandq_result *r = NULL;
	int rc, status;

	*out = NULL;
	/* An op carries only the perms of the fs verbs. */
	if (strncmp(op, "fs.", 3) != 0) {
		o.perms = NULL;
		o.nperms = 0;
		o.perm_preset = NULL;
	}
	rc = sandq_call(c, op, a, &o, s->wait_ms, &r);
	if (rc == -ETIMEDOUT)
		return cli_fail("%s: no result after the wait timeout", op);
	if (rc == -EINVAL)
		return cli__usage(s, "%s", sandq_last_error(c));
	if (rc < 0)
		return cli_fail("%s", sandq_last_error(c));
	if (strcmp(r->status, "ok") != 0) {
		status = result_failed(r);
		sandq_result_free(r);
		return status;
	}
	*out = r;
	return 0;
}

/*
 * The common tail of a verb: --json prints the data (or the head), else
 * human() if given. Frees r. Returns the exit status.
 */
int
cli__finish(const struct sbx *s, struct sandq_result *r,
    void (*human)(const json_t *))
{
	json_t *d = cli_result_data_json(r);
	int status = 0;

	if (s->json) {
		status = cli_print_json_line(d && !json_is_null(d) ? json_incref(d) :
		    cli__result_head_json(r));
	} else if (human && d) {
		human(d);
		if (fflush(stdout) == EOF)
			status = cli_fail("writing the output: %s", strerror(errno));
	}
	json_decref(d);
	sandq_result_free(r);
	return status;
}

/* The bytes of a bin (or str) result. false if it holds none. */
bool
cli__result_bytes(const struct sandq_result *r, msgpack_unpacked *u,
    const char **p, size_t *len)
{
	size_t off = 0;

	if (r->data == NULL || msgpack_unpack_next(u, (const char *)r->data,
	    r->data_len, &off) != MSGPACK_UNPACK_SUCCESS)
		return false;
	if (u->data.type == MSGPACK_OBJECT_BIN) {
		*p = u->data.via.bin.ptr;
		*len = u->data.via.bin.size;
		return true;
	}
	if (u->data.type == MSGPACK_OBJECT_STR) {
		*p = u->data.via.str.ptr;
		*len = u->data.via.str.size;
		return true;
	}
	return false;
}
