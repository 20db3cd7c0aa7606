/*
 * tar.c - a sandbox's folder as a tar: GET and PUT /v1/sandboxes/ID/tar[/PATH].
 *
 * DESIGN (docs/decisions.md, "Gateway (issue 17)"): both directions are
 * turned into ONE existing job on the sandbox, so each is atomic and
 * ordered with the sandbox's other jobs, and the gateway never holds a
 * snapshot:
 *
 *  - PUT: the gateway reads the body with libarchive (tar formats only, no
 *    compression), bounded and strict, BEFORE anything is enqueued: every
 *    entry must be a regular file or a folder with a name that is a clean
 *    relative path (UTF-8, no control character, not absolute, no `..`,
 *    component <= 255 and path <= 4096 bytes), no link of either kind, no
 *    device, FIFO or socket, no name twice, no file that is also a folder,
 *    at most TAR_ENTRIES_MAX entries, JOB_FILES_MAX files and
 *    TAR_BYTES_MAX bytes, each size checked against what is left of the
 *    body before it is read. The first entry refused is answered 400
 *    bad_tar (413 too_large for the bounds) with its name escaped, and
 *    nothing is enqueued. What passes becomes a run (`exec`) on the
 *    sandbox whose `files` are the tar's files under PATH (seeded by the
 *    worker, which refuses a symlink in the way) and whose argv makes the
 *    tar's folders and sets the executable bits. That run commits once:
 *    one new version. Should the run fail (a file of the sandbox where the
 *    tar has a folder), its script writes past the run's output limit, and
 *    a run stopped by a limit commits nothing (docs/protocol.md "Runs on a
 *    sandbox"): nothing is half-written.
 *  - GET: a run (`persist: false`) of the sandbox's own `tar -c` on the
 *    folder; its stdout, bounded by the run's output limit
 *    (TAR_OUT_MAX), is the answer. The tar is made inside the sandbox, from
 *    the head the run started on; symlinks stay symlinks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "../common/xmalloc.h"
#include "internal.h"
#include "jobjson.h"

#define TAR_ENTRIES_MAX 4096		/* entries of an uploaded tar */
#define TAR_BYTES_MAX (64u << 20)	/* its files' bytes, all together */
#define TAR_PATH_MAX 4096		/* a path (docs/protocol.md "Paths") */
#define TAR_NAME_MAX 255		/* a component */
#define TAR_OUT_MAX (16u << 20)		/* a downloaded tar: the run's output_bytes */
#define TAR_GUARD_OUT 65536		/* an upload run's output_bytes */

/*
 * The upload's run. Arguments: the folders to make, "--", the files to
 * make executable, all relative to the run's working directory (the
 * sandbox's root). A failure writes twice the output limit to stdout:
 * the run is stopped by it and commits nothing.
 */
static const char upload_script[] =
    "fail() { printf 'sandq-tar: %s\\n' \"$1\" >&2; head -c 131072 /dev/zero; exit 1; }\n"
    "d=1\n"
    "for a do\n"
    "  if [ \"$a\" = -- ]; then d=0\n"
    "  elif [ $d = 1 ]; then mkdir -p -- \"$a\" 2>/dev/null || "
    "fail \"cannot make the folder '$a': something else is in the way\"\n"
    "  else chmod +x -- \"$a\" || fail \"cannot make '$a' executable\"; fi\n"
    "done\n";

/* One entry kept from the tar. */
struct tar_ent {
	char *path;		/* relative, clean: "a/b" */
	bool dir;
	bool exec;		/* a file with an x bit */
	uint8_t *data;		/* files: the bytes (owned) */
	size_t len;
};

struct tar_plan {
	struct tar_ent *v;
	size_t n, cap;
	size_t files, bytes;
};

static void
plan_free(struct tar_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].path);
		free(p->v[i].data);
	}
	free(p->v);
}

/* s (n bytes, untrusted) for a message: printable ASCII kept, the rest \xHH, cut to fit. */
static void
esc(char *out, size_t outlen, const char *s, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 5 < outlen; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (o + 9 >= outlen) {
			o += (size_t)snprintf(out + o, outlen - o, "...");
			break;
		}
		if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", ch);
	}
	out[o < outlen ? o : outlen - 1] = '\0';
}

static int
refuse(struct gw_fail *f, int status, const char *code, const char *name,
    const char *why)
{
	char e[128];

	esc(e, sizeof(e), name, strlen(name));
	f->status = status;
	f->code = code;
	snprintf(f->msg, sizeof(f->msg), "tar entry '%s': %s", e, why);
	return -EINVAL;
}

/* True if s (n bytes) is UTF-8 without control characters. */
static bool
clean_text(const char *s, size_t n)
{
	json_t *v;

	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	v = json_stringn(s, n);	/* NULL when not UTF-8 */
	json_decref(v);
	return v != NULL;
}

/*
 * The entry's name as a clean relative path into out ("" for the root),
 * or an error naming it. "./" and "." components and a trailing "/" go;
 * absolute names, ".." and empty components inside are refused.
 */
static int
clean_name(const char *name, char *out, struct gw_fail *f)
{
	size_t n = strlen(name), o = 0;
	const char *p = name, *end = name + n;

	if (n == 0)
		return refuse(f, 400, "bad_tar", name, "an empty name");
	if (!clean_text(name, n))
		return refuse(f, 400, "bad_tar", name, "the name is not UTF-8 text "
		    "without control characters");
	if (name[0] == '/')
		return refuse(f, 400, "bad_tar", name, "an absolute name");
	if (n > TAR_PATH_MAX)
		return refuse(f, 413, "too_large", name, "the name is longer than 4096 bytes");
	while (p < end) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		size_t len = (size_t)((slash ? slash : end) - p);

		if (len == 2 && p[0] == '.' && p[1] == '.')
			return refuse(f, 400, "bad_tar", name, "a '..' component");
		if (len > TAR_NAME_MAX)
			return refuse(f, 413, "too_large", name, "a component is longer "
			    "than 255 bytes");
		if (len > 0 && !(len == 1 && p[0] == '.')) {
			if (o > 0)
				out[o++] = '/';
			memcpy(out + o, p, len);
			o += len;
		}
		p = slash ? slash + 1 : end;
	}
	out[o] = '\0';
	return 0;
}

static int
cmp_path(const void *a, const void *b)
{
	return strcmp(((const struct tar_ent *)a)->path, ((const struct tar_ent *)b)->path);
}

static int
cmp_key(const void *key, const void *ent)
{
	return strcmp(key, ((const struct tar_ent *)ent)->path);
}

/* The entry of path in the sorted plan, or NULL. */
static struct tar_ent *
find(struct tar_plan *p, const char *path)
{
	return bsearch(path, p->v, p->n, sizeof(*p->v), cmp_key);
}

/* Refuses a name twice and a file that is also a folder (p sorted). */
static int
check_tree(struct tar_plan *p, struct gw_fail *f)
{
	char buf[TAR_PATH_MAX + 1];

	for (size_t i = 0; i < p->n; i++) {
		if (i + 1 < p->n && strcmp(p->v[i].path, p->v[i + 1].path) == 0)
			return refuse(f, 400, "bad_tar", p->v[i].path, "the name appears twice");
		snprintf(buf, sizeof(buf), "%s", p->v[i].path);
		for (char *s = strrchr(buf, '/'); s != NULL; s = strrchr(buf, '/')) {
			struct tar_ent *parent;

			*s = '\0';
			if ((parent = find(p, buf)) != NULL && !parent->dir)
				return refuse(f, 400, "bad_tar", p->v[i].path, "its folder is "
				    "a file of the tar");
		}
	}
	return 0;
}

/* Reads one entry's bytes (size claimed, checked against the bounds first). */
static int
read_data(struct archive *a, struct tar_plan *p, struct tar_ent *t, int64_t size,
    size_t left, const char *name, struct gw_fail *f)
{
	la_ssize_t got;

	if (size < 0 || (uint64_t)size > left)
		return refuse(f, 400, "bad_tar", name, "its size is larger than what "
		    "is left of the body");
	if ((uint64_t)size > TAR_BYTES_MAX - p->bytes)
		return refuse(f, 413, "too_large", name, "the files pass 64 MiB in all");
	t->len = (size_t)size;
	t->data = xmalloc(t->len ? t->len : 1);
	got = archive_read_data(a, t->data, t->len);
	if (got < 0 || (size_t)got != t->len)
		return refuse(f, 400, "bad_tar", name, "its data is cut short");
	p->bytes += t->len;
	return 0;
}

/*
 * Reads the tar (buf, len: untrusted) into p: see DESIGN. Returns 0, or
 * -EINVAL with f naming the first entry refused.
 */
static int
tar_read(const void *buf, size_t len, struct tar_plan *p, struct gw_fail *f)
{
	struct archive *a = archive_read_new();
	struct archive_entry *ae;
	char clean[TAR_PATH_MAX + 1];
	int rc = 0, r;

	archive_read_support_format_tar(a);
	archive_read_support_filter_none(a);
	if (archive_read_open_memory(a, buf, len) != ARCHIVE_OK) {
		rc = refuse(f, 400, "bad_tar", "", "the body is not a tar");
		goto out;
	}
	while ((r = archive_read_next_header(a, &ae)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(ae);
		mode_t type = archive_entry_filetype(ae);
		struct tar_ent *t;

		if (name == NULL) {
			rc = refuse(f, 400, "bad_tar", "", "an entry has no name");
			goto out;
		}
		if (p->n >= TAR_ENTRIES_MAX) {
			rc = refuse(f, 413, "too_large", name, "more than 4096 entries");
			goto out;
		}
		if (archive_entry_hardlink(ae) != NULL) {
			rc = refuse(f, 400, "bad_tar", name, "a hard link (links are not taken)");
			goto out;
		}
		if (type == AE_IFLNK) {
			rc = refuse(f, 400, "bad_tar", name, "a symlink (links are not taken)");
			goto out;
		}
		if (type != AE_IFREG && type != AE_IFDIR) {
			rc = refuse(f, 400, "bad_tar", name, type == AE_IFIFO ? "a FIFO" :
			    type == AE_IFCHR || type == AE_IFBLK ? "a device" :
			    type == AE_IFSOCK ? "a socket" : "not a file nor a folder");
			goto out;
		}
		if ((rc = clean_name(name, clean, f)) < 0)
			goto out;
		if (clean[0] == '\0') {
			if (type == AE_IFDIR)
				continue;	/* "./": the folder itself */
			rc = refuse(f, 400, "bad_tar", name, "a file named as the folder itself");
			goto out;
		}
		if (p->n == p->cap) {
			p->cap = p->cap ? 2 * p->cap : 64;
			p->v = xreallocarray(p->v, p->cap, sizeof(*p->v));
		}
		t = &p->v[p->n++];
		memset(t, 0, sizeof(*t));
		t->path = xstrdup(clean);
		t->dir = type == AE_IFDIR;
		if (t->dir)
			continue;
		t->exec = (archive_entry_perm(ae) & 0111) != 0;
		if (++p->files > JOB_FILES_MAX) {
			rc = refuse(f, 413, "too_large", name, "more than 1024 files");
			goto out;
		}
		if ((rc = read_data(a, p, t, archive_entry_size(ae), len, name, f)) < 0)
			goto out;
	}
	if (r != ARCHIVE_EOF) {
		rc = refuse(f, 400, "bad_tar", "", archive_error_string(a) ?
		    archive_error_string(a) : "the tar does not read to its end");
		/* The message is libarchive's; say it is the tar's, not an entry's. */
		snprintf(f->msg, sizeof(f->msg), "the body is not a whole tar");
		goto out;
	}
	qsort(p->v, p->n, sizeof(*p->v), cmp_path);
	rc = check_tree(p, f);
out:
	archive_read_free(a);
	return rc;
}

/* "PATH" of the URL (after tar, "" or "/a/b") joined with rel, relative: "./a/b/rel". */
static char *
join(const char *base, size_t blen, const char *rel)
{
	char *s = NULL;

	while (blen > 0 && base[0] == '/') {
		base++;
		blen--;
	}
	while (blen > 0 && base[blen - 1] == '/')
		blen--;
	xasprintf(&s, "./%.*s%s%s", (int)blen, base, blen && rel[0] ? "/" : "", rel);
	return s;
}

/* Builds, checks and encodes j as c's job; false having answered. */
static bool
encode_checked(struct call *c, struct job *j)
{
	struct job *back = NULL;
	struct err e = { 0 };
	char *buf = NULL;
	size_t len = 0;

	if (payload_job_encode(j, &buf, &len) < 0) {
		call_error(c, 500, "internal", "cannot encode the job");
		return false;
	}
	/* sandqd's intake decodes it so: refuse here what it would refuse. */
	if (payload_job_decode(buf, len, &back, NULL, &e) < 0) {
		free(buf);
		call_error(c, 400, "invalid_job", e.msg);
		return false;
	}
	job_free(back);
	c->jobbuf = buf;
	c->joblen = len;
	return true;
}

/* The job of the route, without files: a run on the sandbox. */
static struct job *
base_job(const char *id, size_t idlen, struct gw_fail *f, bool persist,
    uint64_t output)
{
	struct job *j = NULL;
	json_t *o = json_pack("{s:s, s:[s], s:s%, s:b, s:{s:I}}", "op", "exec", "argv",
	    "true", "sandbox", id, idlen, "persist", persist, "limits", "output_bytes",
	    (json_int_t)output);

	if (jobjson_job_json(o, &j, f) < 0)
		j = NULL;
	json_decref(o);
	return j;
}

/* Replaces j's argv by v (n strings, copied). */
static void
set_argv(struct job *j, char **v, size_t n)
{
	for (size_t i = 0; i < j->argc; i++)
		free(j->argv[i]);
	free(j->argv);
	j->argv = xcalloc(n + 1, sizeof(*j->argv));
	for (size_t i = 0; i < n; i++)
		j->argv[i] = xstrdup(v[i]);
	j->argc = n;
}

struct call *
tar_route(h2o_req_t *req, const char *id, size_t idlen, const char *rest, size_t n)
{
	bool put = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("PUT"));
	struct tar_plan p = { 0 };
	struct gw_fail f = { 0 };
	struct job *j = NULL;
	struct call *c = NULL;
	char **argv = NULL;
	size_t argc = 0;

	if (!put && !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET"))) {
		send_error(req, 405, "method_not_allowed", "GET or PUT /v1/sandboxes/ID/tar[/PATH]");
		return NULL;
	}
	if (!clean_text(rest, n)) {
		send_error(req, 400, "invalid_job", "field 'path': not UTF-8 text");
		return NULL;
	}
	if (!put) {
		char *dir = join(rest, n, "");
		char *v[] = { "tar", "-c", "-f", "-", "-C", dir, "." };

		if ((j = base_job(id, idlen, &f, false, TAR_OUT_MAX)) == NULL) {
			free(dir);
			send_error(req, f.status, f.code, f.msg);
			return NULL;
		}
		set_argv(j, v, 7);
		free(dir);
		goto submit;
	}
	if (req->entity.len > gw.max_body) {
		send_error(req, 413, "body_too_large", "the body is larger than --max-body");
		return NULL;
	}
	if (tar_read(req->entity.base ? req->entity.base : "", req->entity.len, &p, &f) < 0) {
		send_error(req, f.status, f.code, f.msg);
		goto out;
	}
	if ((j = base_job(id, idlen, &f, true, TAR_GUARD_OUT)) == NULL) {
		send_error(req, f.status, f.code, f.msg);
		goto out;
	}
	/* argv: sh -c SCRIPT sandq-tar FOLDERS... -- EXECUTABLES... */
	argv = xcalloc(p.n + 5, sizeof(*argv));
	argv[argc++] = xstrdup("/bin/sh");
	argv[argc++] = xstrdup("-c");
	argv[argc++] = xstrdup(upload_script);
	argv[argc++] = xstrdup("sandq-tar");
	for (size_t i = 0; i < p.n; i++)
		if (p.v[i].dir)
			argv[argc++] = join(rest, n, p.v[i].path);
	argv[argc++] = xstrdup("--");
	for (size_t i = 0; i < p.n; i++)
		if (!p.v[i].dir && p.v[i].exec)
			argv[argc++] = join(rest, n, p.v[i].path);
	set_argv(j, argv, argc);
	j->files = xcalloc(p.files ? p.files : 1, sizeof(*j->files));
	for (size_t i = 0; i < p.n; i++) {
		struct job_file *jf;

		if (p.v[i].dir)
			continue;
		jf = &j->files[j->nfiles++];
		jf->path = join(rest, n, p.v[i].path);
		memmove(jf->path, jf->path + 2, strlen(jf->path + 2) + 1);	/* no "./" */
		jf->data = p.v[i].data;
		jf->len = p.v[i].len;
		p.v[i].data = NULL;
	}
submit:
	c = call_new(req);
	c->route = R_SBX;
	c->answer = put ? SBX_TAR_PUT : SBX_TAR_GET;
	snprintf(c->id, sizeof(c->id), "%s", j->id);
	c->tar_files = p.files;
	c->tar_folders = p.n - p.files;
	if (!encode_checked(c, j))
		c = NULL;	/* answered; the request holds it */
out:
	for (size_t i = 0; i < argc; i++)
		free(argv[i]);
	free(argv);
	job_free(j);
	plan_free(&p);
	return c;
}

/* The run's stderr as one line (newlines as "; "), if it is text; else fallback. */
static void
stderr_message(const struct result *res, const char *fallback, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < res->err_len && o + 3 < outlen; i++) {
		char ch = (char)res->err[i];

		if (ch == '\n' && i + 1 < res->err_len) {
			out[o++] = ';';
			out[o++] = ' ';
		} else if (ch != '\n')
			out[o++] = ch;
	}
	out[o] = '\0';
	if (o == 0 || !clean_text(out, o))
		snprintf(out, outlen, "%s", fallback);
}

bool
tar_answer(struct call *c, const struct result *res)
{
	char msg[256];

	if (c->answer == SBX_TAR_GET) {
		if (res->status == ST_OK) {
			call_bytes(c, 200, "application/x-tar", res->out, res->out_len);
			return true;
		}
		if (res->status == ST_OUTPUT_LIMIT) {
			call_error(c, 413, "too_large", "the folder's tar is larger than "
			    "16 MiB (the run's output limit)");
			return true;
		}
		if (res->status == ST_EXIT) {
			stderr_message(res, "tar failed", msg, sizeof(msg));
			call_error(c, strstr(msg, "No such file") || strstr(msg, "Not a directory")
			    ? 404 : 400, strstr(msg, "No such file") ||
			    strstr(msg, "Not a directory") ? "not_found" : "tar_failed", msg);
			return true;
		}
	} else {
		if (res->status == ST_OK) {
			call_json(c, 200, json_pack("{s:s, s:I, s:I, s:I}", "sandbox",
			    res->sandbox ? res->sandbox : "", "files",
			    (json_int_t)c->tar_files, "folders", (json_int_t)c->tar_folders,
			    "version", (json_int_t)res->version));
			return true;
		}
		if (res->status == ST_OUTPUT_LIMIT || res->status == ST_EXIT) {
			stderr_message(res, "the upload's run failed; nothing was written",
			    msg, sizeof(msg));
			call_error(c, 409, "conflict", msg);
			return true;
		}
	}
	return false;
}
