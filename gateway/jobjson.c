/*
 * jobjson.c - a job from the gateway's JSON, a result to it (pure).
 *
 * DESIGN: the JSON names are docs/protocol.md's, one to one, so that the
 * HTTP API and the Redis protocol cannot drift: a key this file does not
 * know is refused by name (400 unknown_field) rather than dropped, and
 * "tenant" is one of those keys, because the tenant is the token's and
 * never the body's. Each field is checked for its JSON type here; its
 * bounds are proto/job.c's: the built job is encoded and decoded once
 * more, and what payload_job_decode() refuses is answered 400 invalid_job
 * with its message naming the field. Bytes (stdin, an fs.write's data)
 * travel as a JSON string (its UTF-8 bytes) or, for any bytes, as base64
 * in "stdin_b64" / "data_b64"; a snapshot only as "snapshot_b64". A
 * result's data is rendered by proto/mpjson.c, as the CLI renders it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "../common/xmalloc.h"
#include "../proto/mpjson.h"
#include "jobjson.h"

/* Printable ASCII of s (at most 64 bytes), others as \xHH: for messages. */
static void
esc(char *out, size_t size, const char *s, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && i < 64 && o + 5 < size; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, size - o, "\\x%02x", ch);
	}
	out[o] = '\0';
}

/* Fills f; returns -EINVAL for the caller to return. */
static int __attribute__((format(printf, 4, 5)))
refuse(struct gw_fail *f, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	f->status = status;
	f->code = code;
	va_start(ap, fmt);
	vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int
bad_type(struct gw_fail *f, const char *name, const char *want)
{
	return refuse(f, 400, "invalid_job", "field '%s': must be %s", name, want);
}

/* A JSON string as a malloc'd C string; refuses NUL bytes. */
static int
take_str(json_t *v, const char *name, char **out, struct gw_fail *f)
{
	if (!json_is_string(v))
		return bad_type(f, name, "a string");
	if (strlen(json_string_value(v)) != json_string_length(v))
		return refuse(f, 400, "invalid_job", "field '%s': holds a NUL byte", name);
	*out = xstrdup(json_string_value(v));
	return 0;
}

static int
take_u64(json_t *v, const char *name, uint64_t *out, struct gw_fail *f)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return bad_type(f, name, "an integer >= 0");
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* A base64 text as bytes (OpenSSL's decoder, padding accounted for). */
static int
take_b64(json_t *v, const char *name, size_t max, uint8_t **out, size_t *outlen,
    struct gw_fail *f)
{
	const char *s;
	size_t n, pad = 0;
	uint8_t *buf;
	int got;

	if (!json_is_string(v))
		return bad_type(f, name, "a base64 string");
	s = json_string_value(v);
	n = json_string_length(v);
	if (n % 4 != 0 || n / 4 * 3 > max + 3)
		return refuse(f, 400, "invalid_job", "field '%s': not base64, or "
		    "longer than %zu bytes", name, max);
	buf = xmalloc(n / 4 * 3 + 1);
	if ((got = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n)) < 0) {
		free(buf);
		return refuse(f, 400, "invalid_job", "field '%s': not base64", name);
	}
	if (n > 0 && s[n - 1] == '=')
		pad++;
	if (n > 1 && s[n - 2] == '=')
		pad++;
	*out = buf;
	*outlen = (size_t)got - pad;
	return 0;
}

/* "argv": an array of strings. */
static int
take_argv(struct job *j, json_t *v, struct gw_fail *f)
{
	size_t i, n;

	if (!json_is_array(v))
		return bad_type(f, "argv", "an array of strings");
	if ((n = json_array_size(v)) > JOB_ARGV_MAX)
		return refuse(f, 400, "invalid_job", "field 'argv': more than %d entries",
		    JOB_ARGV_MAX);
	j->argv = xcalloc(n + 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		if (take_str(json_array_get(v, i), "argv", &j->argv[i], f) < 0)
			return -EINVAL;
		j->argc++;
	}
	return 0;
}

/*
 * "allow": an array of host patterns (net "allow", sandbox.create); their
 * grammar and bounds are proto/job.c's, the tenant's net_allow sandqd's.
 */
static int
take_allow(struct job *j, json_t *v, struct gw_fail *f)
{
	size_t i, n;

	if (!json_is_array(v))
		return bad_type(f, "allow", "an array of host patterns");
	if ((n = json_array_size(v)) > JOB_ALLOW_MAX)
		return refuse(f, 400, "invalid_job", "field 'allow': more than %d patterns",
		    JOB_ALLOW_MAX);
	j->allow = xcalloc(n + 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		if (take_str(json_array_get(v, i), "allow", &j->allow[i], f) < 0)
			return -EINVAL;
		j->nallow++;
	}
	return 0;
}

/* "env": an object of strings, kept as "K=V". */
static int
take_env(struct job *j, json_t *v, struct gw_fail *f)
{
	const char *k;
	json_t *val;
	size_t n;

	if (!json_is_object(v))
		return bad_type(f, "env", "an object of strings");
	if ((n = json_object_size(v)) > JOB_ENV_MAX)
		return refuse(f, 400, "invalid_job", "field 'env': more than %d variables",
		    JOB_ENV_MAX);
	j->env = xcalloc(n + 1, sizeof(char *));
	json_object_foreach(v, k, val) {
		char *s = NULL;

		if (take_str(val, "env", &s, f) < 0)
			return -EINVAL;
		if (xasprintf(&j->env[j->nenv], "%s=%s", k, s) < 0)
			abort();
		free(s);
		j->nenv++;
	}
	return 0;
}

/* "labels": an object of strings, kept as key, value pairs. */
static int
take_labels(struct job *j, json_t *v, struct gw_fail *f)
{
	const char *k;
	json_t *val;
	size_t n;

	if (!json_is_object(v))
		return bad_type(f, "labels", "an object of strings");
	if ((n = json_object_size(v)) > JOB_LABELS_MAX)
		return refuse(f, 400, "invalid_job", "field 'labels': more than %d",
		    JOB_LABELS_MAX);
	j->labels = xcalloc(2 * n + 1, sizeof(char *));
	json_object_foreach(v, k, val) {
		j->labels[2 * j->nlabels] = xstrdup(k);
		if (take_str(val, "labels", &j->labels[2 * j->nlabels + 1], f) < 0) {
			j->nlabels++;
			return -EINVAL;
		}
		j->nlabels++;
	}
	return 0;
}

/*
 * A path of the sandbox's tree as the decoder keeps it (docs/protocol.md
 * "Paths"): normalised, the "/workspace" alias taken off, "/a/b" (slash)
 * or "a/b". Done here, before encoding, because the encoder writes a path
 * whose first folder is "workspace" with the alias in front: given
 * "/workspace/f" as it is, it would send the folder "workspace".
 */
static int
norm_path(const char *p, size_t n, const char *name, char **out, bool slash,
    struct gw_fail *f)
{
	char norm[JOB_PATH_MAX + 1];
	struct err e = { 0 };

	if (payload_sandbox_path_normalise(p, n, norm, name, &e) < 0)
		return refuse(f, 400, "invalid_job", "%s", e.msg);
	if (slash)
		xasprintf(out, "/%s", norm);
	else
		*out = xstrdup(norm);
	return 0;
}

/* The same of a JSON value, which must be a string. */
static int
take_path(json_t *v, const char *name, char **out, bool slash, struct gw_fail *f)
{
	if (!json_is_string(v))
		return bad_type(f, name, "a string");
	return norm_path(json_string_value(v), json_string_length(v), name, out, slash, f);
}

/* Bytes of a JSON string (its UTF-8), copied, NUL-terminated. */
static uint8_t *
str_bytes(json_t *v, size_t *len)
{
	uint8_t *p;

	*len = json_string_length(v);
	p = xmalloc(*len + 1);
	memcpy(p, json_string_value(v), *len);
	p[*len] = '\0';
	return p;
}

/*
 * "files" (path -> text) or "files_b64" (path -> base64): the files a run
 * or sandbox.create seeds. Both may be given; a path in both is refused.
 * Paths are checked by the decode that follows (proto/job.c).
 */
static int
take_files(struct job *j, const char *name, json_t *v, struct gw_fail *f)
{
	bool b64 = strcmp(name, "files_b64") == 0;
	const char *k;
	json_t *val;

	if (!json_is_object(v))
		return bad_type(f, name, b64 ? "an object of base64 strings" :
		    "an object of strings (files_b64 for any bytes)");
	if (j->nfiles + json_object_size(v) > JOB_FILES_MAX)
		return refuse(f, 400, "invalid_job", "field '%s': more than %d files",
		    name, JOB_FILES_MAX);
	if (j->files == NULL)
		j->files = xcalloc(JOB_FILES_MAX, sizeof(*j->files));
	json_object_foreach(v, k, val) {
		struct job_file *jf = &j->files[j->nfiles];
		char *path;

		if (norm_path(k, strlen(k), name, &path, false, f) < 0)
			return -EINVAL;
		for (size_t i = 0; i < j->nfiles; i++)
			if (strcmp(j->files[i].path, path) == 0) {
				char e[96];

				esc(e, sizeof(e), k, strlen(k));
				free(path);
				return refuse(f, 400, "invalid_job", "field '%s': '%s' names "
				    "a file given already (in files or files_b64)", name, e);
			}
		if (b64) {
			if (take_b64(val, "files_b64", JOB_FILES_BYTES_MAX, &jf->data,
			    &jf->len, f) < 0) {
				free(path);
				return -EINVAL;
			}
		} else if (!json_is_string(val)) {
			free(path);
			return bad_type(f, "files", "an object of strings "
			    "(files_b64 for any bytes)");
		} else
			jf->data = str_bytes(val, &jf->len);
		jf->path = path;
		j->nfiles++;
	}
	return 0;
}

/* "cases": [{stdin | stdin_b64, expect | expect_b64, expect_mode}]. */
static int
take_cases(struct job *j, json_t *v, struct gw_fail *f)
{
	size_t i;
	json_t *c;

	if (!json_is_array(v))
		return bad_type(f, "cases", "an array of objects");
	if (json_array_size(v) == 0 || json_array_size(v) > JOB_CASES_MAX)
		return refuse(f, 400, "invalid_job", "field 'cases': 1 to %d cases",
		    JOB_CASES_MAX);
	j->cases = xcalloc(json_array_size(v), sizeof(*j->cases));
	json_array_foreach(v, i, c) {
		struct job_case *jc = &j->cases[i];
		const char *k;
		json_t *val;

		j->ncases = i + 1;
		if (!json_is_object(c))
			return bad_type(f, "cases", "an array of objects");
		json_object_foreach(c, k, val) {
			bool in = strncmp(k, "stdin", 5) == 0;

			if (strcmp(k, "stdin") == 0 || strcmp(k, "expect") == 0) {
				if (!json_is_string(val))
					return bad_type(f, in ? "cases.stdin" : "cases.expect",
					    "a string (the _b64 form for any bytes)");
				if ((in ? jc->stdin_data : jc->expect) != NULL)
					goto twice;
				if (in)
					jc->stdin_data = str_bytes(val, &jc->stdin_len);
				else
					jc->expect = str_bytes(val, &jc->expect_len);
			} else if (strcmp(k, "stdin_b64") == 0 || strcmp(k, "expect_b64") == 0) {
				if ((in ? jc->stdin_data : jc->expect) != NULL)
					goto twice;
				if (take_b64(val, in ? "cases.stdin_b64" : "cases.expect_b64",
				    JOB_STDIN_MAX, in ? &jc->stdin_data : &jc->expect,
				    in ? &jc->stdin_len : &jc->expect_len, f) < 0)
					return -EINVAL;
			} else if (strcmp(k, "expect_mode") == 0) {
				if (take_str(val, "cases.expect_mode", &jc->expect_mode, f) < 0)
					return -EINVAL;
			} else {
				char e[64];

				esc(e, sizeof(e), k, strlen(k));
				return refuse(f, 400, "unknown_field", "field 'cases.%s': "
				    "not a field of a case (stdin, stdin_b64, expect, "
				    "expect_b64, expect_mode)", e);
			}
			continue;
twice:
			return refuse(f, 400, "invalid_job", "case %zu: '%s' and its "
			    "_b64 form: only one of them", i + 1, in ? "stdin" : "expect");
		}
	}
	return 0;
}

/* "perms": [{pattern, level}], path rules on top of perm_preset. */
static int
take_perms(struct job *j, json_t *v, struct gw_fail *f)
{
	size_t i;
	json_t *r;

	if (!json_is_array(v))
		return bad_type(f, "perms", "an array of {pattern, level}");
	if (json_array_size(v) > JOB_PERMS_MAX)
		return refuse(f, 400, "invalid_job", "field 'perms': more than %d rules",
		    JOB_PERMS_MAX);
	j->perms = xcalloc(json_array_size(v) + 1, sizeof(*j->perms));
	json_array_foreach(v, i, r) {
		json_t *pat = json_object_get(r, "pattern"), *lev = json_object_get(r, "level");

		if (!json_is_object(r) || json_object_size(r) != 2 || !json_is_string(pat) ||
		    !json_is_string(lev))
			return bad_type(f, "perms", "an array of {pattern, level} (strings)");
		if (perm_level_parse(json_string_value(lev), json_string_length(lev),
		    &j->perms[i].level) < 0)
			return bad_type(f, "perms.level", "none, view, read or write");
		/* Only the absolute form is the alias, as the decoder reads it. */
		j->perms[i].pattern = xstrdup(payload_pattern_unalias(json_string_value(pat)));
		j->nperms = i + 1;
	}
	return 0;
}

/* "limits": an object of the seven named integers. */
static int
take_limits(struct job *j, json_t *v, struct gw_fail *f)
{
	static const struct {
		const char *name;
		size_t off;
	} names[] = {
		{ "wall_ms", offsetof(struct job_limits, wall_ms) },
		{ "cpu_ms", offsetof(struct job_limits, cpu_ms) },
		{ "memory_bytes", offsetof(struct job_limits, memory_bytes) },
		{ "pids", offsetof(struct job_limits, pids) },
		{ "output_bytes", offsetof(struct job_limits, output_bytes) },
		{ "disk_bytes", offsetof(struct job_limits, disk_bytes) },
		{ "files", offsetof(struct job_limits, files) },
	};
	const char *k;
	json_t *val;

	if (!json_is_object(v))
		return bad_type(f, "limits", "an object");
	json_object_foreach(v, k, val) {
		size_t i;
		char e[300];

		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(k, names[i].name) == 0)
				break;
		if (i == sizeof(names) / sizeof(names[0])) {
			esc(e, sizeof(e), k, strlen(k));
			return refuse(f, 400, "unknown_field", "field 'limits.%s': unknown", e);
		}
		if (take_u64(val, names[i].name,
		    (uint64_t *)((char *)&j->limits + names[i].off), f) < 0)
			return -EINVAL;
	}
	return 0;
}

/* A fresh id when the client gave none: "gw-" and 24 random hex digits. */
static int
make_id(char **out, struct gw_fail *f)
{
	unsigned char r[12];
	char buf[3 + 2 * sizeof(r) + 1];

	if (RAND_bytes(r, (int)sizeof(r)) != 1)
		return refuse(f, 500, "internal", "no random bytes for a job id");
	memcpy(buf, "gw-", 3);
	for (size_t i = 0; i < sizeof(r); i++)
		snprintf(buf + 3 + 2 * i, 3, "%02x", r[i]);
	*out = xstrdup(buf);
	return 0;
}

static int take_op_field(struct job *j, const char *k, json_t *v,
    struct gw_fail *f);

/* Sets one top-level field of j from v; refuses an unknown name. */
static int
take_field(struct job *j, const char *k, json_t *v, struct gw_fail *f)
{
	char e[300];

	if (strcmp(k, "v") == 0) {
		if (!json_is_integer(v) || json_integer_value(v) != PAYLOAD_VERSION)
			return bad_type(f, "v", "1");
		return 0;
	}
	if (strcmp(k, "id") == 0)
		return take_str(v, "id", &j->id, f);
	if (strcmp(k, "op") == 0) {
		const char *s = json_string_value(v);

		if (s == NULL)
			return bad_type(f, "op", "a string");
		/* Every op of docs/protocol.md. */
		for (int op = OP_NONE + 1; op < OP__COUNT; op++)
			if (job_op_name((enum job_op)op) != NULL &&
			    strcmp(s, job_op_name((enum job_op)op)) == 0) {
				j->op = (enum job_op)op;
				return 0;
			}
		esc(e, sizeof(e), s, json_string_length(v));
		return refuse(f, 400, "unsupported_op", "field 'op': '%s' is not "
		    "served by this gateway (docs/gateway.md lists the ops)", e);
	}
	if (strcmp(k, "argv") == 0)
		return take_argv(j, v, f);
	if (strcmp(k, "script") == 0)
		return take_str(v, "script", &j->script, f);
	if (strcmp(k, "code") == 0)
		return take_str(v, "code", &j->code, f);
	if (strcmp(k, "stdin") == 0 || strcmp(k, "stdin_b64") == 0) {
		if (j->stdin_data != NULL)
			return refuse(f, 400, "invalid_job", "fields 'stdin' and "
			    "'stdin_b64': only one of them");
		if (k[5] == '_')
			return take_b64(v, "stdin_b64", JOB_STDIN_MAX, &j->stdin_data, &j->stdin_len, f);
		if (!json_is_string(v))
			return bad_type(f, "stdin", "a string (stdin_b64 for any bytes)");
		j->stdin_len = json_string_length(v);
		j->stdin_data = xmalloc(j->stdin_len + 1);
		memcpy(j->stdin_data, json_string_value(v), j->stdin_len);
		return 0;
	}
	if (strcmp(k, "env") == 0)
		return take_env(j, v, f);
	if (strcmp(k, "cwd") == 0)
		return take_str(v, "cwd", &j->cwd, f);
	if (strcmp(k, "limits") == 0)
		return take_limits(j, v, f);
	if (strcmp(k, "preset") == 0) {
		if (!json_is_string(v) || job_preset_parse(json_string_value(v),
		    &j->preset) < 0)
			return bad_type(f, "preset", "strict, normal or permissive");
		return 0;
	}
	if (strcmp(k, "labels") == 0)
		return take_labels(j, v, f);
	if (strcmp(k, "net") == 0) {
		if (take_str(v, "net", &j->net, f) < 0)
			return -EINVAL;
		if (job_net_parse(j->net, &j->net_mode) < 0)
			return bad_type(f, "net", "none, unix or allow");
		return 0;
	}
	if (strcmp(k, "allow") == 0)
		return take_allow(j, v, f);
	if (strcmp(k, "image") == 0)
		return take_str(v, "image", &j->image, f);
	if (strcmp(k, "priority") == 0) {
		if (!json_is_integer(v))
			return bad_type(f, "priority", "an integer");
		j->priority = json_integer_value(v);
		return 0;
	}
	if (strcmp(k, "deadline_ms") == 0) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return bad_type(f, "deadline_ms", "an integer >= 0");
		j->deadline_ms = json_integer_value(v);
		return 0;
	}
	if (strcmp(k, "stream") == 0 || strcmp(k, "persist") == 0) {
		if (!json_is_boolean(v))
			return bad_type(f, k[0] == 's' ? "stream" : "persist", "true or false");
		if (k[0] == 's')
			j->stream = json_is_true(v);
		else
			j->persist = json_is_true(v);
		return 0;
	}
	if (strcmp(k, "sandbox") == 0)
		return take_str(v, "sandbox", &j->sandbox, f);
	if (strcmp(k, "perm_preset") == 0)
		return take_str(v, "perm_preset", &j->perm_preset, f);
	if (strcmp(k, "files") == 0 || strcmp(k, "files_b64") == 0)
		return take_files(j, k, v, f);
	if (strcmp(k, "cases") == 0)
		return take_cases(j, v, f);
	if (strcmp(k, "perms") == 0)
		return take_perms(j, v, f);
	return take_op_field(j, k, v, f);
}

/* The operands of the fs.*, kv.* and sandbox.* ops; refuses an unknown name. */
static int
take_op_field(struct job *j, const char *k, json_t *v, struct gw_fail *f)
{
	char e[300];

	if (strcmp(k, "path") == 0)
		return take_path(v, "path", &j->path, true, f);
	if (strcmp(k, "data") == 0 || strcmp(k, "data_b64") == 0) {
		if (j->data != NULL)
			return refuse(f, 400, "invalid_job", "fields 'data' and "
			    "'data_b64': only one of them");
		if (k[4] == '_')
			return take_b64(v, "data_b64", JOB_DATA_MAX, &j->data,
			    &j->data_len, f);
		if (!json_is_string(v))
			return bad_type(f, "data", "a string (data_b64 for any bytes)");
		j->data_len = json_string_length(v);
		j->data = xmalloc(j->data_len + 1);
		memcpy(j->data, json_string_value(v), j->data_len);
		return 0;
	}
	if (strcmp(k, "mode") == 0) {
		uint64_t m;

		if (take_u64(v, "mode", &m, f) < 0)
			return -EINVAL;
		if (m > 07777)
			return bad_type(f, "mode", "0 to 4095 (07777)");
		j->mode = (uint32_t)m;
		return 0;
	}
	if (strcmp(k, "recursive") == 0) {
		if (!json_is_boolean(v))
			return bad_type(f, "recursive", "true or false");
		j->recursive = json_is_true(v);
		return 0;
	}
	if (strcmp(k, "parents") == 0) {
		if (!json_is_boolean(v))
			return bad_type(f, "parents", "true or false");
		j->parents = json_is_true(v);
		return 0;
	}
	if (strcmp(k, "key") == 0)
		return take_str(v, "key", &j->key, f);
	if (strcmp(k, "value") == 0)
		return take_str(v, "value", &j->value, f);
	if (strcmp(k, "prefix") == 0)
		return take_str(v, "prefix", &j->prefix, f);
	if (strcmp(k, "to") == 0)
		return take_str(v, "to", &j->to, f);
	if (strcmp(k, "snapshot_b64") == 0)
		return take_b64(v, "snapshot_b64", JOB_SNAPSHOT_MAX, &j->snapshot,
		    &j->snapshot_len, f);
	if (strcmp(k, "snapshot_key") == 0)
		return take_str(v, "snapshot_key", &j->snapshot_key, f);
	if (strcmp(k, "workdir") == 0)
		return take_str(v, "workdir", &j->workdir, f);
	if (strcmp(k, "from_image_dir") == 0)
		return take_str(v, "from_image_dir", &j->from_image_dir, f);
	esc(e, sizeof(e), k, strlen(k));
	return refuse(f, 400, "unknown_field", "field '%s': unknown (docs/gateway.md "
	    "lists the fields this gateway takes)", e);
}

int
jobjson_job(const char *body, size_t len, struct job **out, struct gw_fail *f)
{
	json_error_t je;
	json_t *root;
	int rc;

	*out = NULL;
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL) {
		char m[200];

		esc(m, sizeof(m), je.text, strlen(je.text));
		return refuse(f, 400, "bad_json", "the body is not JSON: %s (at byte %d)",
		    m, je.position);
	}
	rc = jobjson_job_json(root, out, f);
	json_decref(root);
	return rc;
}

int
jobjson_job_json(json_t *root, struct job **out, struct gw_fail *f)
{
	struct job *j = NULL, *check = NULL;
	json_t *v;
	const char *k;
	char *buf = NULL;
	size_t buflen = 0;
	struct err e = { 0 };
	bool persist_given;
	int rc = -EINVAL;

	*out = NULL;
	if (!json_is_object(root))
		return refuse(f, 400, "bad_json", "the body is not one JSON object");
	j = job_new();
	persist_given = json_object_get(root, "persist") != NULL;
	json_object_foreach(root, k, v)
		if (take_field(j, k, v, f) < 0)
			goto out_job;
	if (j->op == OP_NONE) {
		refuse(f, 400, "invalid_job", "field 'op': required");
		goto out_job;
	}
	/* docs/protocol.md: a run's persist defaults to true on a sandbox. */
	if (!persist_given && j->sandbox != NULL && JOB_OP_RUNS(j->op))
		j->persist = true;
	/* ... and fs.write's mode to 0644 (the encoder writes it always). */
	if (j->op == OP_FS_WRITE && json_object_get(root, "mode") == NULL)
		j->mode = 0644;
	if (j->id == NULL && make_id(&j->id, f) < 0)
		goto out_job;
	if (payload_job_encode(j, &buf, &buflen) < 0) {
		refuse(f, 500, "internal", "cannot encode the job");
		goto out_job;
	}
	/* Refused here, not at sandqd's intake: nothing malformed is enqueued. */
	if (payload_job_decode(buf, buflen, &check, NULL, &e) < 0) {
		refuse(f, 400, "invalid_job", "%s", e.msg);
		goto out_buf;
	}
	job_free(check);
	*out = j;
	j = NULL;
	rc = 0;
out_buf:
	free(buf);
out_job:
	job_free(j);
	return rc;
}

/*
 * The op's answer (docs/protocol.md "Results of the sandbox ops") as
 * "data": JSON as proto/mpjson.c renders it for the CLI; a top-level bin
 * (fs.read, sandbox.export) as "data_b64" instead, so bytes are never
 * mistaken for text. Absent when the result has none.
 */
static void
set_data(json_t *o, const struct result *r)
{
	msgpack_unpacked u;
	size_t off = 0;

	if (r->data == NULL || r->data_len == 0)
		return;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)r->data, r->data_len, &off) ==
	    MSGPACK_UNPACK_SUCCESS) {
		if (u.data.type == MSGPACK_OBJECT_BIN) {
			char *b64 = mpjson_base64((const uint8_t *)u.data.via.bin.ptr,
			    u.data.via.bin.size);

			json_object_set_new(o, "data_b64", json_string(b64));
			free(b64);
		} else
			json_object_set_new(o, "data", mpjson_value(&u.data));
	}
	msgpack_unpacked_destroy(&u);
}

json_t *
jobjson_result(const struct result *r)
{
	json_t *o = mpjson_result(r);

	set_data(o, r);
	return o;
}

json_t *
jobjson_error(const char *code, const char *msg)
{
	return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message",
	    msg ? msg : "");
}
