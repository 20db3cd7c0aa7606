/*
 * cli_output.c - running one op of the sandbox, fs and kv verbs and
 * printing its result: the data in words, or with --json converted from
 * msgpack to one line of JSON (bin as base64); a rejected op prints
 * "sandq: CODE: MESSAGE" and gives exit status 125. Also what the verbs
 * share besides: their usage error, the job options of an op, writing a
 * local file. The verbs (cli_sandbox.c, cli_fs.c) call these through
 * cli_sandbox_int.h; this file calls none of theirs.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"
#include "../libsandq/sandq.h"
#include "cli_common.h"
#include "cli_sandbox_int.h"

/*** What the verbs share ***/

int __attribute__((format(printf, 2, 3)))
cli__usage(const struct sbx *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vwarn("sandq: ", fmt, ap);
	va_end(ap);
	if (s->v != NULL)
		fprintf(stderr, "Usage: sandq %s %s %s\n", s->v->group, s->v->name,
		    s->v->usage);
	fprintf(stderr, "Try 'sandq help %s'.\n", s->group);
	return CLI_EXIT_SANDQ;
}

/* The job options every op of s sends. */
struct sandq_job_opts
cli__job_opts(const struct sbx *s)
{
	struct sandq_job_opts o = { 0 };

	o.id = s->id;
	o.image = s->image;
	o.allow = s->allow;
	o.perms = s->perms;
	o.nperms = s->nperms;
	o.perm_preset = s->perm_preset;
	return o;
}

/* Writes len bytes to FILE ("-": stdout), replacing it. 0 or an exit status. */
int
cli__write_local(const char *file, const void *p, size_t len)
{
	int fd, rc;

	if (strcmp(file, "-") == 0) {
		if (fwrite(p, 1, len, stdout) != len || fflush(stdout) == EOF)
			return cli_fail("writing standard output: %s", strerror(errno));
		return 0;
	}
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return cli_fail("%s: %s", file, strerror(errno));
	rc = write_all(fd, p, len);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		return cli_fail("%s: %s", file, strerror(-rc));
	return 0;
}

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
	/* What it runs on (docs/images.md): none means each job's own image. */
	printf("image: %s\n", json_object_get(o, "image") ? cli_jesc(o, "image", "") :
	    "(none: each job's own)");
	printf("workdir: %s\n", json_object_get(o, "workdir") ? cli_jesc(o, "workdir", "") :
	    "/workspace");
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
