/*
 * job.c - a job as a plain struct, and its msgpack codec (pure, no I/O).
 *
 * Sections:
 *   - Names: ops, limit presets, rule presets.
 *   - Validation helpers: ids, sandbox ids, tenants.
 *   - Jobs: decode, field by field, then the whole map.
 *   - Encoding: the normalised job, as the worker decodes it again.
 *
 * DESIGN: decode is strict for jobs (an unknown field is a rejected job, so a
 * typo such as "limts" cannot silently run with default limits); results
 * (result.c) are read leniently. Bytes go through scan.c's bounded readers
 * and out through pack.c; paths are normalised by path.c.
 */
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "job.h"
#include "pack.h"
#include "path.h"
#include "scan.h"

/*** Names ***/

static const char *const op_names[OP__COUNT] = {
	[OP_NONE] = "none", [OP_EXEC] = "exec", [OP_SH] = "sh",
	[OP_PYTHON] = "python",
	[OP_FS_READ] = "fs.read", [OP_FS_WRITE] = "fs.write",
	[OP_FS_LIST] = "fs.list", [OP_FS_STAT] = "fs.stat",
	[OP_FS_DELETE] = "fs.delete",
	[OP_KV_GET] = "kv.get", [OP_KV_SET] = "kv.set",
	[OP_KV_DELETE] = "kv.delete", [OP_KV_KEYS] = "kv.keys",
	[OP_SANDBOX_CREATE] = "sandbox.create", [OP_SANDBOX_FORK] = "sandbox.fork",
	[OP_SANDBOX_DELETE] = "sandbox.delete", [OP_SANDBOX_EXPORT] = "sandbox.export",
	[OP_SANDBOX_IMPORT] = "sandbox.import", [OP_SANDBOX_HISTORY] = "sandbox.history",
	[OP_SANDBOX_INFO] = "sandbox.info", [OP_SANDBOX_LIST] = "sandbox.list",
	[OP_IMAGE_PULL] = "image.pull",
};

/*
 * The perm_preset names. proto/ does not link workspace/, so this copy must
 * match the preset table of workspace/perms.c (perms_preset_names()); the first
 * is the default, PERMS_PRESET_DEFAULT.
 */
static const char *const perm_preset_names[] = {
	"agent-edit", "agent-safe", "read-only", "full-access", "development",
	"view-only",
};

static const char *const preset_names[] = {
	[PRESET_DEFAULT] = "default", [PRESET_STRICT] = "strict",
	[PRESET_NORMAL] = "normal", [PRESET_PERMISSIVE] = "permissive",
};

const char *
job_op_name(enum job_op op)
{
	if ((size_t)op < sizeof(op_names) / sizeof(op_names[0]))
		return op_names[op];
	return "unknown";
}

const char *
job_preset_name(enum job_preset p)
{
	if ((size_t)p < sizeof(preset_names) / sizeof(preset_names[0]))
		return preset_names[p];
	return "unknown";
}

int
job_net_parse(const char *s, enum job_net *n)
{
	if (strcmp(s, "none") == 0)
		*n = NET_NONE;
	else if (strcmp(s, "unix") == 0)
		*n = NET_UNIX;
	else if (strcmp(s, "allow") == 0)
		*n = NET_ALLOW;
	else
		return -EINVAL;
	return 0;
}

int
job_preset_parse(const char *s, enum job_preset *p)
{
	for (size_t i = PRESET_STRICT; i < sizeof(preset_names) / sizeof(preset_names[0]); i++) {
		if (strcmp(s, preset_names[i]) == 0) {
			*p = (enum job_preset)i;
			return 0;
		}
	}
	return -EINVAL;
}

/*** Validation helpers ***/

bool
payload_id_valid(const char *s, size_t len)
{
	if (len == 0 || len > JOB_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
		    c == ':'))
			return false;
	}
	return true;
}

/* A sandbox id: 1..JOB_SANDBOX_ID_MAX of [A-Za-z0-9._:-], not "." or "..". */
static bool
sandbox_id_valid(const char *s, size_t len)
{
	if (len > JOB_SANDBOX_ID_MAX || !payload_id_valid(s, len))
		return false;
	return !(len == 1 && s[0] == '.') && !(len == 2 && s[0] == '.' && s[1] == '.');
}

/* A tenant name: 1..JOB_TENANT_MAX of [A-Za-z0-9_-] (store.c, keys.c). */
static bool
tenant_valid(const char *s, size_t len)
{
	if (len == 0 || len > JOB_TENANT_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/*** Jobs ***/

struct job *
job_new(void)
{
	struct job *j = xcalloc(1, sizeof(*j));

	return j;
}

static void
strv_free(char **v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void
job_free(struct job *j)
{
	if (j == NULL)
		return;
	free(j->id);
	strv_free(j->argv, j->argc);
	free(j->script);
	free(j->code);
	free(j->stdin_data);
	strv_free(j->env, j->nenv);
	free(j->cwd);
	for (size_t i = 0; i < j->nfiles; i++) {
		free(j->files[i].path);
		free(j->files[i].data);
	}
	free(j->files);
	strv_free(j->labels, 2 * j->nlabels);
	strv_free(j->allow, j->nallow);
	free(j->net);
	free(j->image);
	free(j->image_id);
	free(j->sandbox_image);
	free(j->sandbox_workdir);
	free(j->workdir);
	free(j->from_image_dir);
	free(j->tenant);
	free(j->sandbox);
	for (size_t i = 0; i < j->ncases; i++) {
		free(j->cases[i].stdin_data);
		free(j->cases[i].expect);
		free(j->cases[i].expect_mode);
	}
	free(j->cases);
	for (size_t i = 0; i < j->nperms; i++)
		free(j->perms[i].pattern);
	free(j->perms);
	free(j->perm_preset);
	free(j->path);
	free(j->data);
	free(j->key);
	free(j->value);
	free(j->prefix);
	free(j->to);
	free(j->snapshot);
	free(j->snapshot_key);
	free(j);
}

static int
decode_argv(const msgpack_object *o, struct job *j, size_t *total, struct err *e)
{
	char field[32];

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return err_set(e, -EINVAL, "field 'argv': expected an array of strings");
	if (o->via.array.size == 0)
		return err_set(e, -EINVAL, "field 'argv': must not be empty");
	if (o->via.array.size > JOB_ARGV_MAX)
		return err_set(e, -EINVAL, "field 'argv': more than %d entries", JOB_ARGV_MAX);
	j->argv = xcalloc(o->via.array.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		snprintf(field, sizeof(field), "argv[%u]", i);
		if (scan_get_cstr(&o->via.array.ptr[i], field, JOB_ARG_MAX - 1,
		    &j->argv[i], e) < 0)
			return -EINVAL;
		j->argc++;
		*total += strlen(j->argv[i]) + 1;
	}
	if (j->argv[0][0] == '\0')
		return err_set(e, -EINVAL, "field 'argv[0]': must not be empty");
	return 0;
}

static bool
env_name_valid(const char *p, size_t n)
{
	if (n == 0 || n > JOB_ENV_NAME_MAX || (p[0] >= '0' && p[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_'))
			return false;
	}
	return true;
}

static int
decode_env(const msgpack_object *o, struct job *j, size_t *total, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'env': expected a map of strings");
	if (o->via.map.size > JOB_ENV_MAX)
		return err_set(e, -EINVAL, "field 'env': more than %d variables", JOB_ENV_MAX);
	j->env = xcalloc(o->via.map.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		const char *name;
		char *val = NULL;
		size_t nlen;

		if (!scan_peek_bytes(&kv->key, &name, &nlen) || !env_name_valid(name, nlen))
			return err_set(e, -EINVAL,
			    "field 'env': variable names must match [A-Za-z_][A-Za-z0-9_]*");
		char field[JOB_ENV_NAME_MAX + 8];
		snprintf(field, sizeof(field), "env.%.*s", (int)nlen, name);
		/* A name given twice would reach the job twice, in either order. */
		for (size_t k = 0; k < j->nenv; k++)
			if (strncmp(j->env[k], name, nlen) == 0 && j->env[k][nlen] == '=')
				return err_set(e, -EINVAL, "field '%s': given twice", field);
		if (scan_get_cstr(&kv->val, field, JOB_ARG_MAX - 2 - nlen, &val, e) < 0)
			return -EINVAL;
		xasprintf(&j->env[i], "%.*s=%s", (int)nlen, name, val);
		free(val);
		j->nenv++;
		*total += strlen(j->env[i]) + 1;
	}
	return 0;
}

static int
decode_limits(const msgpack_object *o, struct job_limits *l, struct err *e)
{
	static const struct {
		const char *name, *field;
		size_t off;
		uint64_t max;
	} tab[] = {
		{ "wall_ms", "limits.wall_ms", offsetof(struct job_limits, wall_ms), 86400000ull },
		{ "cpu_ms", "limits.cpu_ms", offsetof(struct job_limits, cpu_ms), 86400000ull },
		{ "memory_bytes", "limits.memory_bytes", offsetof(struct job_limits, memory_bytes), 1ull << 46 },
		{ "pids", "limits.pids", offsetof(struct job_limits, pids), 1u << 22 },
		{ "output_bytes", "limits.output_bytes", offsetof(struct job_limits, output_bytes), 1ull << 30 },
		{ "disk_bytes", "limits.disk_bytes", offsetof(struct job_limits, disk_bytes), 1ull << 40 },
		{ "files", "limits.files", offsetof(struct job_limits, files), 1u << 20 },
	};

	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'limits': expected a map");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		size_t t;

		for (t = 0; t < sizeof(tab) / sizeof(tab[0]); t++)
			if (scan_key_is(&kv->key, tab[t].name))
				break;
		if (t == sizeof(tab) / sizeof(tab[0])) {
			const char *p = "?";
			size_t n = 1;
			scan_peek_bytes(&kv->key, &p, &n);
			return err_set(e, -EINVAL, "field 'limits': unknown limit '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
		}
		if (scan_get_u64(&kv->val, tab[t].field, 1, tab[t].max,
		    (uint64_t *)((char *)l + tab[t].off), e) < 0)
			return -EINVAL;
	}
	return 0;
}

static int
decode_files(const msgpack_object *o, struct job *j, struct err *e)
{
	char path[JOB_PATH_MAX + 1];
	size_t total = 0;

	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'files': expected a map of path to bytes");
	if (o->via.map.size > JOB_FILES_MAX)
		return err_set(e, -EINVAL, "field 'files': more than %d files", JOB_FILES_MAX);
	j->files = xcalloc(o->via.map.size ? o->via.map.size : 1, sizeof(*j->files));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		struct job_file *f = &j->files[j->nfiles];
		const char *p;
		size_t n;

		if (!scan_peek_bytes(&kv->key, &p, &n))
			return err_set(e, -EINVAL, "field 'files': paths must be strings");
		if (memchr(p, '\0', n) != NULL)
			return err_set(e, -EINVAL, "field 'files': a path contains a NUL byte");
		/* Paths are seeded under /workspace, whatever root they name. */
		if (payload_sandbox_path_normalise(p, n, path, "files", e) < 0)
			return -EINVAL;
		if (path[0] == '\0') {
			char shown[72];
			return err_set(e, -EINVAL, "field 'files': '%s' is the workspace itself",
			    path_shown(p, n, shown));
		}
		for (size_t k = 0; k < j->nfiles; k++) {
			const char *q = j->files[k].path;
			size_t a = strlen(q), b = strlen(path);
			if (strcmp(q, path) == 0)
				return err_set(e, -EINVAL, "field 'files': '%s' given twice", path);
			if ((a < b && strncmp(q, path, a) == 0 && path[a] == '/') ||
			    (b < a && strncmp(q, path, b) == 0 && q[b] == '/'))
				return err_set(e, -EINVAL,
				    "field 'files': '%s' is both a file and a directory",
				    a < b ? q : path);
		}
		f->path = xstrdup(path);
		j->nfiles++;
		if (scan_get_bytes(&kv->val, "files", JOB_FILES_BYTES_MAX, &f->data, &f->len, e) < 0)
			return -EINVAL;
		total += f->len;
		if (total > JOB_FILES_BYTES_MAX)
			return err_set(e, -EINVAL, "field 'files': more than %u bytes in all",
			    JOB_FILES_BYTES_MAX);
	}
	return 0;
}

/*
 * allow: an array of host patterns, bounded here (count, length, printable
 * ASCII without spaces or commas, which separate them on the way to the
 * proxy); what a pattern means is checked by sandqd (egress/match.c).
 */
static int
decode_allow(const msgpack_object *o, struct job *j, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
		return err_set(e, -EINVAL, "field 'allow': expected a list of host patterns");
	if (o->via.array.size > JOB_ALLOW_MAX)
		return err_set(e, -EINVAL, "field 'allow': more than %d patterns", JOB_ALLOW_MAX);
	j->allow = xcalloc(o->via.array.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (scan_get_cstr(&o->via.array.ptr[i], "allow", JOB_ALLOW_LEN, &j->allow[i],
		    e) < 0)
			return -EINVAL;
		j->nallow++;
		for (const char *c = j->allow[i]; *c != '\0'; c++)
			if (*c <= ' ' || *c >= 0x7f || *c == ',')
				return err_set(e, -EINVAL, "field 'allow': a pattern is a host "
				    "name, '*.domain' or an address, with ':port' or not");
		if (j->allow[i][0] == '\0')
			return err_set(e, -EINVAL, "field 'allow': an empty pattern");
	}
	return 0;
}

static int
decode_labels(const msgpack_object *o, struct job *j, struct err *e)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return err_set(e, -EINVAL, "field 'labels': expected a map of strings");
	if (o->via.map.size > JOB_LABELS_MAX)
		return err_set(e, -EINVAL, "field 'labels': more than %d labels", JOB_LABELS_MAX);
	j->labels = xcalloc(2 * (size_t)o->via.map.size + 1, sizeof(char *));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (scan_get_cstr(&kv->key, "labels", JOB_LABEL_MAX, &j->labels[2 * i], e) < 0 ||
		    scan_get_cstr(&kv->val, "labels", JOB_LABEL_MAX, &j->labels[2 * i + 1], e) < 0) {
			j->nlabels = i + 1;
			return -EINVAL;
		}
		j->nlabels = i + 1;
	}
	return 0;
}

static int
decode_cwd(const msgpack_object *o, struct job *j, struct err *e)
{
	char path[JOB_PATH_MAX + 1];
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'cwd': expected a string");
	if (memchr(p, '\0', n) != NULL)
		return err_set(e, -EINVAL, "field 'cwd': contains a NUL byte");
	if (n == 1 && p[0] == '/') {
		j->cwd = xstrdup("/");
		return 0;
	}
	if (payload_path_normalise(p, n, path, "cwd", e) < 0)
		return -EINVAL;
	/* Relative directories are relative to /workspace, the default cwd. */
	if (n > 0 && p[0] == '/')
		xasprintf(&j->cwd, "/%s", path);
	else
		xasprintf(&j->cwd, "/workspace/%s", path);
	return 0;
}

/*
 * image: at most JOB_IMAGE_MAX bytes of printable ASCII without spaces.
 * The reference's grammar (images/ref.h) is sandqd's to check, which
 * names the field too; this bound keeps control bytes out of every
 * message and log line that quotes it, on every side that decodes a job.
 */
static int
decode_image(const msgpack_object *o, const char *field, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected a string", field);
	if (n == 0)
		return err_set(e, -EINVAL, "field '%s': empty", field);
	if (n > JOB_IMAGE_MAX)
		return err_set(e, -EINVAL, "field '%s': longer than %d bytes",
		    field, JOB_IMAGE_MAX);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c <= 0x20 || c >= 0x7f)
			return err_set(e, -EINVAL, "field '%s': byte 0x%02x at "
			    "offset %zu: a reference is printable ASCII without spaces",
			    field, c, i);
	}
	*out = xmemdup0(p, n);
	return 0;
}

/*
 * workdir, from_image_dir, sandbox_workdir: a folder of the sandbox's
 * root (path.h), kept normalised. A workdir of /workspace is the default
 * and decodes as none.
 */
static int
decode_root_dir(const msgpack_object *o, const char *field, bool workdir,
    char **out, struct err *e)
{
	char dir[JOB_ROOT_DIR_MAX + 1];
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected a string", field);
	if (payload_root_dir_normalise(p, n, dir, workdir, field, e) < 0)
		return -EINVAL;
	if (workdir && strcmp(dir, "/workspace") == 0)
		return 0;
	*out = xstrdup(dir);
	return 0;
}

/*
 * image_id: "sha256:" and 64 lower-case hex digits, the manifest digest
 * sandqd resolved the image to (never a client's: intake refuses it).
 */
static int
decode_image_id(const msgpack_object *o, struct job *j, struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'image_id': expected a string");
	if (n != JOB_IMAGE_ID_LEN || memcmp(p, "sha256:", 7) != 0)
		return err_set(e, -EINVAL, "field 'image_id': expected sha256: and 64 "
		    "hex digits");
	for (size_t i = 7; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return err_set(e, -EINVAL, "field 'image_id': expected sha256: "
			    "and 64 lower-case hex digits");
	j->image_id = xmemdup0(p, n);
	return 0;
}

/*
 * Every top-level field of a job, as a bit. The op table below says which
 * fields each op uses and which it requires; a field an op does not use is
 * refused rather than ignored, for the same reason unknown fields are.
 */
enum job_field {
	JF_V, JF_ID, JF_OP, JF_ARGV, JF_SCRIPT, JF_CODE, JF_STDIN, JF_ENV,
	JF_CWD, JF_LIMITS, JF_PRESET, JF_FILES, JF_LABELS, JF_NET, JF_PRIORITY,
	JF_DEADLINE, JF_STREAM, JF_PERSIST, JF_TENANT, JF_SANDBOX, JF_PERMS,
	JF_PERM_PRESET, JF_PATH, JF_DATA, JF_MODE, JF_RECURSIVE, JF_KEY,
	JF_VALUE, JF_PREFIX, JF_TO, JF_SNAPSHOT, JF_CASES, JF_IMAGE, JF_IMAGE_ID,
	JF_WORKDIR, JF_FROM_IMAGE_DIR, JF_SANDBOX_IMAGE, JF_SANDBOX_WORKDIR,
	JF_PARENTS, JF_ALLOW, JF_SNAPSHOT_KEY,
	JF__COUNT,
};

static const char *const job_field_names[JF__COUNT] = {
	[JF_V] = "v", [JF_ID] = "id", [JF_OP] = "op", [JF_ARGV] = "argv",
	[JF_SCRIPT] = "script", [JF_CODE] = "code", [JF_STDIN] = "stdin",
	[JF_ENV] = "env", [JF_CWD] = "cwd", [JF_LIMITS] = "limits",
	[JF_PRESET] = "preset", [JF_FILES] = "files", [JF_LABELS] = "labels",
	[JF_NET] = "net", [JF_PRIORITY] = "priority",
	[JF_DEADLINE] = "deadline_ms", [JF_STREAM] = "stream",
	[JF_PERSIST] = "persist", [JF_TENANT] = "tenant",
	[JF_SANDBOX] = "sandbox", [JF_PERMS] = "perms",
	[JF_PERM_PRESET] = "perm_preset", [JF_PATH] = "path", [JF_DATA] = "data",
	[JF_MODE] = "mode", [JF_RECURSIVE] = "recursive", [JF_KEY] = "key",
	[JF_VALUE] = "value", [JF_PREFIX] = "prefix", [JF_TO] = "to",
	[JF_SNAPSHOT] = "snapshot", [JF_CASES] = "cases", [JF_IMAGE] = "image",
	[JF_IMAGE_ID] = "image_id", [JF_WORKDIR] = "workdir",
	[JF_FROM_IMAGE_DIR] = "from_image_dir", [JF_SANDBOX_IMAGE] = "sandbox_image",
	[JF_SANDBOX_WORKDIR] = "sandbox_workdir", [JF_PARENTS] = "parents",
	[JF_ALLOW] = "allow", [JF_SNAPSHOT_KEY] = "snapshot_key",
};

_Static_assert(JF__COUNT <= 64, "job fields must fit in a uint64_t mask");

#define JFB(f) (UINT64_C(1) << (f))

/* Fields every op takes: the envelope and scheduling. */
#define JF_COMMON (JFB(JF_V) | JFB(JF_ID) | JFB(JF_OP) | JFB(JF_TENANT) | \
	JFB(JF_PRIORITY) | JFB(JF_DEADLINE))
/* Fields of a run, besides its command. */
#define JF_RUN (JFB(JF_STDIN) | JFB(JF_ENV) | JFB(JF_CWD) | JFB(JF_LIMITS) | \
	JFB(JF_PRESET) | JFB(JF_FILES) | JFB(JF_LABELS) | JFB(JF_NET) | JFB(JF_ALLOW) | \
	JFB(JF_STREAM) | JFB(JF_PERSIST) | JFB(JF_SANDBOX) | JFB(JF_PERMS) | \
	JFB(JF_PERM_PRESET) | JFB(JF_CASES) | JFB(JF_IMAGE) | JFB(JF_IMAGE_ID) | \
	JFB(JF_SANDBOX_IMAGE) | JFB(JF_SANDBOX_WORKDIR))
/* What a new sandbox runs on (docs/images.md "Sandboxes on images"). */
#define JF_SB_IMAGE (JFB(JF_IMAGE) | JFB(JF_IMAGE_ID) | JFB(JF_WORKDIR))
/* Fields of every fs.* op. */
#define JF_FS (JFB(JF_SANDBOX) | JFB(JF_PATH) | JFB(JF_PERMS) | JFB(JF_PERM_PRESET))
#define JF_SB JFB(JF_SANDBOX)

/* Per op: the fields it uses (besides JF_COMMON) and those it requires. */
static const struct {
	uint64_t uses;
	uint64_t needs;
} op_fields[OP__COUNT] = {
	[OP_EXEC] = { JF_RUN | JFB(JF_ARGV), JFB(JF_ARGV) },
	[OP_SH] = { JF_RUN | JFB(JF_SCRIPT), JFB(JF_SCRIPT) },
	[OP_PYTHON] = { JF_RUN | JFB(JF_CODE), JFB(JF_CODE) },
	[OP_FS_READ] = { JF_FS, JF_SB | JFB(JF_PATH) },
	[OP_FS_WRITE] = { JF_FS | JFB(JF_DATA) | JFB(JF_MODE) | JFB(JF_PARENTS),
	    JF_SB | JFB(JF_PATH) | JFB(JF_DATA) },
	[OP_FS_LIST] = { JF_FS | JFB(JF_RECURSIVE), JF_SB },
	[OP_FS_STAT] = { JF_FS, JF_SB | JFB(JF_PATH) },
	[OP_FS_DELETE] = { JF_FS | JFB(JF_RECURSIVE), JF_SB | JFB(JF_PATH) },
	[OP_KV_GET] = { JF_SB | JFB(JF_KEY), JF_SB | JFB(JF_KEY) },
	[OP_KV_SET] = { JF_SB | JFB(JF_KEY) | JFB(JF_VALUE),
	    JF_SB | JFB(JF_KEY) | JFB(JF_VALUE) },
	[OP_KV_DELETE] = { JF_SB | JFB(JF_KEY), JF_SB | JFB(JF_KEY) },
	[OP_KV_KEYS] = { JF_SB | JFB(JF_PREFIX), JF_SB },
	[OP_SANDBOX_CREATE] = { JF_SB | JFB(JF_FILES) | JFB(JF_SNAPSHOT) |
	    JFB(JF_SNAPSHOT_KEY) |
	    JFB(JF_LABELS) | JFB(JF_LIMITS) | JFB(JF_PRESET) | JF_SB_IMAGE |
	    JFB(JF_FROM_IMAGE_DIR) | JFB(JF_ALLOW), JF_SB },
	[OP_SANDBOX_FORK] = { JF_SB | JFB(JF_TO) | JFB(JF_LABELS), JF_SB | JFB(JF_TO) },
	[OP_SANDBOX_DELETE] = { JF_SB, JF_SB },
	[OP_SANDBOX_EXPORT] = { JF_SB, JF_SB },
	[OP_SANDBOX_IMPORT] = { JF_SB | JFB(JF_SNAPSHOT) | JFB(JF_LABELS) |
	    JFB(JF_LIMITS) | JFB(JF_PRESET) | JF_SB_IMAGE, JF_SB | JFB(JF_SNAPSHOT) },
	[OP_SANDBOX_HISTORY] = { JF_SB, JF_SB },
	[OP_SANDBOX_INFO] = { JF_SB, JF_SB },
	[OP_SANDBOX_LIST] = { 0, 0 },
	/* Progress records go to the job's output stream when it asks. */
	[OP_IMAGE_PULL] = { JFB(JF_IMAGE) | JFB(JF_STREAM), JFB(JF_IMAGE) },
};

/* The field a key names, or JF__COUNT. */
static enum job_field
job_field_lookup(const msgpack_object *k)
{
	for (int f = 0; f < JF__COUNT; f++)
		if (scan_key_is(k, job_field_names[f]))
			return (enum job_field)f;
	return JF__COUNT;
}

/* Reads a sandbox id (sandbox, to) into a new string. */
static int
decode_sandbox_id(const msgpack_object *o, const char *field, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n) || !sandbox_id_valid(p, n))
		return err_set(e, -EINVAL, "field '%s': expected 1 to %d characters "
		    "of [A-Za-z0-9._:-], not '.' or '..'", field, JOB_SANDBOX_ID_MAX);
	*out = xmemdup0(p, n);
	return 0;
}

/*
 * Reads an fs.* path into "/a/b" ("/" is the root, allowed only if root_ok),
 * normalised like files (payload_sandbox_path_normalise()).
 */
static int
decode_fs_path(const msgpack_object *o, bool root_ok, char **out, struct err *e)
{
	char path[JOB_PATH_MAX + 1];
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'path': expected a string");
	if (memchr(p, '\0', n) != NULL)
		return err_set(e, -EINVAL, "field 'path': contains a NUL byte");
	if (payload_sandbox_path_normalise(p, n, path, "path", e) < 0)
		return -EINVAL;
	if (path[0] == '\0' && !root_ok)
		return err_set(e, -EINVAL, "field 'path': must not be the sandbox root");
	xasprintf(out, "/%s", path);
	return 0;
}

/*
 * Reads one rule's pattern. Patterns stay as written (workspace/perms.c compiles
 * and checks them) except for the /workspace alias: "/workspace" is "/" and
 * "/workspace/x" is "/x". Only the absolute form is an alias, since a
 * relative pattern such as "workspace/x" may well mean a folder of that name.
 */
static int
decode_pattern(const msgpack_object *o, const char *field, char **out,
    struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field '%s': expected a string", field);
	if (n == 0)
		return err_set(e, -EINVAL, "field '%s': must not be empty", field);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c == 0x7f)
			return err_set(e, -EINVAL,
			    "field '%s': contains a NUL or control character", field);
	}
	/* Once only, so "/workspace" + a stored pattern reads back the same. */
	if (path_alias_len(p, n, true) > 0) {
		p += 10;
		n -= 10;
		if (n == 0) {
			p = "/";
			n = 1;
		}
	}
	if (n > JOB_PATTERN_MAX)
		return err_set(e, -EINVAL, "field '%s': longer than %d bytes", field,
		    JOB_PATTERN_MAX);
	*out = xmemdup0(p, n);
	return 0;
}

static int
decode_cases(const msgpack_object *o, struct job *j, struct err *e)
{
	char field[48];
	uint64_t total = 0;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
		return err_set(e, -EINVAL, "field 'cases': expected a non-empty array of "
		    "{stdin, expect, expect_mode} maps");
	if (o->via.array.size > JOB_CASES_MAX)
		return err_set(e, -EINVAL, "field 'cases': more than %d cases", JOB_CASES_MAX);
	j->cases = xcalloc(o->via.array.size, sizeof(*j->cases));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *m = &o->via.array.ptr[i];
		struct job_case *c = &j->cases[j->ncases++];

		if (m->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL,
			    "field 'cases[%u]': expected a map {stdin, expect, expect_mode}", i);
		for (uint32_t k = 0; k < m->via.map.size; k++) {
			const msgpack_object_kv *kv = &m->via.map.ptr[k];
			const char *p;
			size_t n;

			if (scan_key_is(&kv->key, "stdin") && c->stdin_data == NULL) {
				snprintf(field, sizeof(field), "cases[%u].stdin", i);
				if (scan_get_bytes(&kv->val, field, JOB_STDIN_MAX, &c->stdin_data,
				    &c->stdin_len, e) < 0)
					return -EINVAL;
				total += c->stdin_len;
			} else if (scan_key_is(&kv->key, "expect") && c->expect == NULL) {
				snprintf(field, sizeof(field), "cases[%u].expect", i);
				if (scan_get_bytes(&kv->val, field, JOB_STDIN_MAX, &c->expect,
				    &c->expect_len, e) < 0)
					return -EINVAL;
				total += c->expect_len;
			} else if (scan_key_is(&kv->key, "expect_mode") && c->expect_mode == NULL) {
				if (!scan_peek_bytes(&kv->val, &p, &n) ||
				    !((n == 5 && memcmp(p, "exact", 5) == 0) ||
				    (n == 4 && memcmp(p, "trim", 4) == 0) ||
				    (n == 5 && memcmp(p, "regex", 5) == 0)))
					return err_set(e, -EINVAL, "field 'cases[%u].expect_mode': "
					    "expected exact, trim or regex", i);
				c->expect_mode = xmemdup0(p, n);
			} else {
				p = "?";
				n = 1;
				scan_peek_bytes(&kv->key, &p, &n);
				return err_set(e, -EINVAL, "field 'cases[%u].%.*s': unknown or "
				    "given twice (expected stdin, expect, expect_mode)", i,
				    (int)(n > 32 ? 32 : n), p);
			}
		}
		if (total > JOB_STDIN_MAX)
			return err_set(e, -EINVAL, "field 'cases': stdin and expect exceed %u "
			    "bytes in all", (unsigned)JOB_STDIN_MAX);
	}
	return 0;
}

static int
decode_perms(const msgpack_object *o, struct job *j, struct err *e)
{
	char field[48];

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return err_set(e, -EINVAL,
		    "field 'perms': expected an array of {pattern, level} maps");
	if (o->via.array.size > JOB_PERMS_MAX)
		return err_set(e, -EINVAL, "field 'perms': more than %d rules", JOB_PERMS_MAX);
	j->perms = xcalloc(o->via.array.size ? o->via.array.size : 1, sizeof(*j->perms));
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *m = &o->via.array.ptr[i];
		struct job_perm *r = &j->perms[j->nperms++];
		bool level_given = false;

		if (m->type != MSGPACK_OBJECT_MAP)
			return err_set(e, -EINVAL,
			    "field 'perms[%u]': expected a map {pattern, level}", i);
		for (uint32_t k = 0; k < m->via.map.size; k++) {
			const msgpack_object_kv *kv = &m->via.map.ptr[k];

			if (scan_key_is(&kv->key, "pattern")) {
				snprintf(field, sizeof(field), "perms[%u].pattern", i);
				if (r->pattern != NULL)
					return err_set(e, -EINVAL, "field '%s': given twice", field);
				if (decode_pattern(&kv->val, field, &r->pattern, e) < 0)
					return -EINVAL;
			} else if (scan_key_is(&kv->key, "level")) {
				const char *p;
				size_t n;

				snprintf(field, sizeof(field), "perms[%u].level", i);
				if (level_given)
					return err_set(e, -EINVAL, "field '%s': given twice", field);
				if (!scan_peek_bytes(&kv->val, &p, &n))
					return err_set(e, -EINVAL, "field '%s': expected a string",
					    field);
				/* Parsed once, here: no later reader sees the string. */
				if (perm_level_parse(p, n, &r->level) < 0)
					return err_set(e, -EINVAL,
					    "field '%s': expected none, view, read or write", field);
				level_given = true;
			} else {
				const char *p = "?";
				size_t n = 1;
				scan_peek_bytes(&kv->key, &p, &n);
				return err_set(e, -EINVAL, "field 'perms[%u]': unknown key '%.*s'",
				    i, (int)(n > 64 ? 64 : n), p);
			}
		}
		if (r->pattern == NULL || !level_given)
			return err_set(e, -EINVAL, "field 'perms[%u].%s': missing", i,
			    r->pattern == NULL ? "pattern" : "level");
	}
	return 0;
}

static int
decode_perm_preset(const msgpack_object *o, struct job *j, struct err *e)
{
	const char *p;
	size_t n;

	if (!scan_peek_bytes(o, &p, &n))
		return err_set(e, -EINVAL, "field 'perm_preset': expected a string");
	for (size_t i = 0; i < sizeof(perm_preset_names) / sizeof(perm_preset_names[0]); i++) {
		if (strlen(perm_preset_names[i]) == n &&
		    memcmp(p, perm_preset_names[i], n) == 0) {
			j->perm_preset = xstrdup(perm_preset_names[i]);
			return 0;
		}
	}
	return err_set(e, -EINVAL, "field 'perm_preset': expected agent-edit, "
	    "agent-safe, read-only, full-access, development or view-only");
}

static int
decode_kv_value(const msgpack_object *o, struct job *j, struct err *e)
{
	size_t at;

	if (scan_get_cstr(o, "value", JOB_KV_VALUE_MAX, &j->value, e) < 0)
		return -EINVAL;
	if (!scan_json_valid(j->value, strlen(j->value), &at))
		return err_set(e, -EINVAL, "field 'value': not JSON text (at byte %zu)", at);
	return 0;
}

/* Decodes the command of a run: argv, or the script/code run by -c. */
static int
decode_command(const msgpack_object *o, struct job *j, size_t *exec_bytes,
    struct err *e)
{
	const char *name = j->op == OP_SH ? "script" : "code";
	char **dst = j->op == OP_SH ? &j->script : &j->code;

	if (j->op == OP_EXEC)
		return decode_argv(o, j, exec_bytes, e);
	if (scan_get_cstr(o, name, JOB_ARG_MAX - 1, dst, e) < 0)
		return -EINVAL;
	j->argv = xcalloc(4, sizeof(char *));
	j->argv[0] = xstrdup(j->op == OP_SH ? "bash" : "python3");
	j->argv[1] = xstrdup("-c");
	j->argv[2] = xstrdup(*dst);
	j->argc = 3;
	*exec_bytes += strlen(*dst) + 12;
	return 0;
}

/* Decodes one field's value into j; f is a field the op uses. */
static int
decode_job_field(enum job_field f, const msgpack_object *v, struct job *j,
    size_t *exec_bytes, bool *persist_given, struct err *e)
{
	uint64_t u = 0;
	int rc = 0;

	switch (f) {
	case JF_V:
		return scan_get_u64(v, "v", PAYLOAD_VERSION, PAYLOAD_VERSION, &u, e);
	case JF_ID:
	case JF_OP:
		return 0;	/* Read before. */
	case JF_ARGV:
	case JF_SCRIPT:
	case JF_CODE:
		return decode_command(v, j, exec_bytes, e);
	case JF_STDIN:
		return scan_get_bytes(v, "stdin", JOB_STDIN_MAX, &j->stdin_data,
		    &j->stdin_len, e);
	case JF_ENV:
		return decode_env(v, j, exec_bytes, e);
	case JF_CWD:
		return decode_cwd(v, j, e);
	case JF_LIMITS:
		return decode_limits(v, &j->limits, e);
	case JF_PRESET: {
		char *s = NULL;
		if ((rc = scan_get_cstr(v, "preset", 32, &s, e)) == 0 &&
		    job_preset_parse(s, &j->preset) < 0)
			rc = err_set(e, -EINVAL,
			    "field 'preset': expected strict, normal or permissive");
		free(s);
		return rc;
	}
	case JF_FILES:
		return decode_files(v, j, e);
	case JF_LABELS:
		return decode_labels(v, j, e);
	case JF_NET:
		if ((rc = scan_get_cstr(v, "net", 32, &j->net, e)) == 0 &&
		    job_net_parse(j->net, &j->net_mode) < 0)
			rc = err_set(e, -EINVAL, "field 'net': unknown mode '%s' "
			    "(this version offers none, unix and allow)", j->net);
		return rc;
	case JF_ALLOW:
		return decode_allow(v, j, e);
	case JF_PRIORITY:
		return scan_get_i64(v, "priority", &j->priority, e);
	case JF_DEADLINE:
		rc = scan_get_u64(v, "deadline_ms", 0, INT64_MAX, &u, e);
		j->deadline_ms = (int64_t)u;
		return rc;
	case JF_STREAM:
		return scan_get_bool(v, "stream", &j->stream, e);
	case JF_PERSIST:
		*persist_given = true;
		return scan_get_bool(v, "persist", &j->persist, e);
	case JF_TENANT: {
		const char *p;
		size_t n;

		if (!scan_peek_bytes(v, &p, &n) || !tenant_valid(p, n))
			return err_set(e, -EINVAL, "field 'tenant': expected 1 to %d "
			    "characters of [A-Za-z0-9_-]", JOB_TENANT_MAX);
		j->tenant = xmemdup0(p, n);
		return 0;
	}
	case JF_SANDBOX:
		return decode_sandbox_id(v, "sandbox", &j->sandbox, e);
	case JF_TO:
		return decode_sandbox_id(v, "to", &j->to, e);
	case JF_SNAPSHOT_KEY:
		if ((rc = scan_get_cstr(v, "snapshot_key", 64, &j->snapshot_key,
		    e)) == 0 && (strlen(j->snapshot_key) != 64 ||
		    strspn(j->snapshot_key, "0123456789abcdef") != 64))
			rc = err_set(e, -EINVAL, "field 'snapshot_key': not a snapshot's "
			    "key (64 lower-case hex digits, as results give 'snapshot')");
		return rc;
	case JF_PERMS:
		return decode_perms(v, j, e);
	case JF_CASES:
		return decode_cases(v, j, e);
	case JF_PERM_PRESET:
		return decode_perm_preset(v, j, e);
	case JF_IMAGE:
		return decode_image(v, "image", &j->image, e);
	case JF_SANDBOX_IMAGE:
		return decode_image(v, "sandbox_image", &j->sandbox_image, e);
	case JF_WORKDIR:
		return decode_root_dir(v, "workdir", true, &j->workdir, e);
	case JF_SANDBOX_WORKDIR:
		return decode_root_dir(v, "sandbox_workdir", true, &j->sandbox_workdir, e);
	case JF_FROM_IMAGE_DIR:
		return decode_root_dir(v, "from_image_dir", false, &j->from_image_dir, e);
	case JF_IMAGE_ID:
		return decode_image_id(v, j, e);
	case JF_PATH:
		return decode_fs_path(v, j->op == OP_FS_LIST, &j->path, e);
	case JF_DATA:
		return scan_get_bytes(v, "data", JOB_DATA_MAX, &j->data, &j->data_len, e);
	case JF_MODE:
		rc = scan_get_u64(v, "mode", 0, 07777, &u, e);
		j->mode = (uint32_t)u;
		return rc;
	case JF_RECURSIVE:
		return scan_get_bool(v, "recursive", &j->recursive, e);
	case JF_PARENTS:
		return scan_get_bool(v, "parents", &j->parents, e);
	case JF_KEY:
		if ((rc = scan_get_cstr(v, "key", JOB_KV_KEY_MAX, &j->key, e)) == 0 &&
		    j->key[0] == '\0')
			rc = err_set(e, -EINVAL, "field 'key': must not be empty");
		return rc;
	case JF_VALUE:
		return decode_kv_value(v, j, e);
	case JF_PREFIX:
		return scan_get_cstr(v, "prefix", JOB_KV_KEY_MAX, &j->prefix, e);
	case JF_SNAPSHOT:
		if ((rc = scan_get_bytes(v, "snapshot", JOB_SNAPSHOT_MAX, &j->snapshot,
		    &j->snapshot_len, e)) == 0 && j->snapshot_len == 0)
			rc = err_set(e, -EINVAL, "field 'snapshot': empty (expected "
			    "an AgentFS SQLite database)");
		return rc;
	case JF__COUNT:
		break;
	}
	return err_set(e, -EINVAL, "field %d: not decodable", (int)f);
}

/*
 * Decodes the fields of one job map; on failure e names the field.
 *
 * In four passes, so the first error reported is the most useful one:
 * names (an unknown or repeated key), the op, the fields the op does not use
 * or needs and lacks, and only then the values, in map order.
 */
static int
decode_job_map(const msgpack_object *root, struct job *j, struct err *e)
{
	const msgpack_object *fields[JF__COUNT] = { NULL };
	uint64_t given = 0;
	size_t exec_bytes = 0;
	bool persist_given = false;
	const char *opname;

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		const msgpack_object *k = &root->via.map.ptr[i].key;
		enum job_field f = job_field_lookup(k);

		if (f == JF__COUNT) {
			const char *p = "?";
			size_t n = 1;

			scan_peek_bytes(k, &p, &n);
			return err_set(e, -EINVAL, "unknown field '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
		}
		/*
		 * A repeated key would decode its field twice and replace an
		 * array whose count was kept (files, env, labels: a heap
		 * overflow).
		 */
		if (given & JFB(f))
			return err_set(e, -EINVAL, "field '%s': given twice",
			    job_field_names[f]);
		given |= JFB(f);
		fields[f] = &root->via.map.ptr[i].val;
	}

	if (fields[JF_OP] == NULL)
		return err_set(e, -EINVAL, "field 'op': missing");
	{
		const char *p;
		size_t n;

		if (!scan_peek_bytes(fields[JF_OP], &p, &n))
			return err_set(e, -EINVAL, "field 'op': expected a string");
		for (size_t i = 1; i < OP__COUNT; i++)
			if (strlen(op_names[i]) == n && memcmp(p, op_names[i], n) == 0)
				j->op = (enum job_op)i;
		if (j->op == OP_NONE)
			return err_set(e, -EINVAL, "field 'op': unknown op '%.*s'",
			    (int)(n > 64 ? 64 : n), p);
	}
	opname = op_names[j->op];

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		enum job_field f = job_field_lookup(&root->via.map.ptr[i].key);

		if (!((JF_COMMON | op_fields[j->op].uses) & JFB(f)))
			return err_set(e, -EINVAL, "field '%s': not used by op '%s'",
			    job_field_names[f], opname);
	}
	for (int f = 0; f < JF__COUNT; f++)
		if ((op_fields[j->op].needs & JFB(f)) && fields[f] == NULL)
			return err_set(e, -EINVAL, "field '%s': missing (op %s)",
			    job_field_names[f], opname);
	if (fields[JF_SNAPSHOT] && fields[JF_FILES])
		return err_set(e, -EINVAL,
		    "field 'snapshot': not together with 'files' (op %s)", opname);
	/* A stored snapshot is taken as it is, as sandbox.fork takes one. */
	if (fields[JF_SNAPSHOT_KEY] && (fields[JF_SNAPSHOT] || fields[JF_FILES] ||
	    fields[JF_FROM_IMAGE_DIR]))
		return err_set(e, -EINVAL, "field 'snapshot_key': not together with "
		    "'%s' (op %s)", fields[JF_SNAPSHOT] ? "snapshot" : fields[JF_FILES] ?
		    "files" : "from_image_dir", opname);
	/* Version 1 comes from one place: files, a snapshot or the image. */
	if (fields[JF_FROM_IMAGE_DIR] && (fields[JF_FILES] || fields[JF_SNAPSHOT]))
		return err_set(e, -EINVAL, "field 'from_image_dir': not together with "
		    "'%s' (op %s)", fields[JF_FILES] ? "files" : "snapshot", opname);
	if (fields[JF_FROM_IMAGE_DIR] && fields[JF_IMAGE] == NULL)
		return err_set(e, -EINVAL, "field 'from_image_dir': needs 'image' (the "
		    "image whose folder seeds the sandbox)");
	if (fields[JF_FROM_IMAGE_DIR] && scan_key_is(fields[JF_IMAGE], "host"))
		return err_set(e, -EINVAL, "field 'from_image_dir': needs an OCI image, "
		    "not 'host'");
	/* Limits bound what a create imports or seeds: otherwise, nothing. */
	if (j->op == OP_SANDBOX_CREATE && fields[JF_SNAPSHOT] == NULL &&
	    fields[JF_FROM_IMAGE_DIR] == NULL && (fields[JF_LIMITS] || fields[JF_PRESET]))
		return err_set(e, -EINVAL, "field '%s': used only with 'snapshot' or "
		    "'from_image_dir' (op %s)", fields[JF_LIMITS] ? "limits" : "preset",
		    opname);

	for (uint32_t i = 0; i < root->via.map.size; i++) {
		enum job_field f = job_field_lookup(&root->via.map.ptr[i].key);

		if (decode_job_field(f, &root->via.map.ptr[i].val, j, &exec_bytes,
		    &persist_given, e) < 0)
			return -EINVAL;
	}

	if (exec_bytes > JOB_EXEC_BYTES_MAX)
		return err_set(e, -EINVAL,
		    "field 'argv': arguments and environment exceed %u bytes",
		    JOB_EXEC_BYTES_MAX);
	/*
	 * An allow list is the net "allow" mode's (or a new sandbox's, for its
	 * runs), and that mode needs one: the job's, or for a run on a sandbox
	 * the sandbox's, which sandqd reads before queueing it.
	 */
	if (j->nallow > 0 && j->net_mode != NET_ALLOW && j->op != OP_SANDBOX_CREATE)
		return err_set(e, -EINVAL, "field 'allow': only with net 'allow' (or on "
		    "sandbox.create)");
	if (j->net_mode == NET_ALLOW && j->nallow == 0 && j->sandbox == NULL)
		return err_set(e, -EINVAL, "field 'allow': net 'allow' needs the hosts it "
		    "may reach (allow, or a sandbox created with one)");
	/* A run on a named sandbox commits back unless it says otherwise. */
	if (j->persist && j->sandbox == NULL)
		return err_set(e, -EINVAL, "field 'persist': needs 'sandbox'");
	if (j->ncases > 0) {
		/* Every case starts from the same files: nothing is committed. */
		if (j->persist)
			return err_set(e, -EINVAL, "field 'cases': cases never commit; not "
			    "with persist: true");
		if (j->stream)
			return err_set(e, -EINVAL, "field 'cases': not with stream");
		if (fields[JF_STDIN] != NULL)
			return err_set(e, -EINVAL, "field 'cases': each case has its own "
			    "stdin; not with stdin");
	} else if (!persist_given && j->sandbox != NULL && JOB_OP_RUNS(j->op))
		j->persist = true;
	if (j->op == OP_FS_LIST && j->path == NULL)
		j->path = xstrdup("/");
	/* A sandbox seeded from an image's folder keeps its files there. */
	if (j->from_image_dir != NULL && fields[JF_WORKDIR] == NULL)
		j->workdir = xstrdup(j->from_image_dir);
	if (j->op == OP_FS_WRITE && fields[JF_MODE] == NULL)
		j->mode = 0644;
	return 0;
}

int
payload_job_decode(const void *buf, size_t len, struct job **out, char *idbuf,
    struct err *e)
{
	msgpack_unpacked up;
	const msgpack_object *root;
	struct job *j = NULL;
	size_t off = 0;
	int rc;

	*out = NULL;
	if (idbuf)
		idbuf[0] = '\0';
	if ((rc = payload_scan(buf, len, e)) < 0)
		return rc;
	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
		rc = err_set(e, -EBADMSG, "payload is not valid msgpack");
		goto out_unpacked;
	}
	root = &up.data;
	if (root->type != MSGPACK_OBJECT_MAP) {
		rc = err_set(e, -EBADMSG, "payload is not a msgpack map");
		goto out_unpacked;
	}
	j = job_new();
	/* The id comes first so a later error can still be reported under it. */
	for (uint32_t i = 0; i < root->via.map.size; i++) {
		const msgpack_object_kv *kv = &root->via.map.ptr[i];
		const char *p;
		size_t n;

		if (!scan_key_is(&kv->key, "id"))
			continue;
		if (!scan_peek_bytes(&kv->val, &p, &n) || !payload_id_valid(p, n)) {
			rc = err_set(e, -EINVAL,
			    "field 'id': expected 1 to %d characters of [A-Za-z0-9._:-]",
			    JOB_ID_MAX);
			goto out_job;
		}
		if (j->id != NULL) {
			rc = err_set(e, -EINVAL, "field 'id': given twice");
			goto out_job;
		}
		j->id = xmemdup0(p, n);
	}
	if (j->id == NULL) {
		rc = err_set(e, -EINVAL, "field 'id': missing");
		goto out_job;
	}
	if (idbuf)
		memcpy(idbuf, j->id, strlen(j->id) + 1);
	if ((rc = decode_job_map(root, j, e)) < 0)
		goto out_job;
	msgpack_unpacked_destroy(&up);
	*out = j;
	return 0;

out_job:
	job_free(j);
out_unpacked:
	msgpack_unpacked_destroy(&up);
	return rc;
}

bool
payload_peek_id(const void *buf, size_t len, char *idbuf)
{
	const uint8_t *p = buf;
	size_t off = 0, pairs, n;
	struct err e;

	idbuf[0] = '\0';
	if (!scan_map_header(p, len, &off, &pairs))
		return false;
	for (size_t i = 0; i < pairs; i++) {
		size_t koff = off;

		if (scan_str_header(p, len, &koff, &n) && n == 2 && memcmp(p + koff, "id", 2) == 0) {
			off = koff + 2;
			if (!scan_str_header(p, len, &off, &n) || !payload_id_valid((const char *)p + off, n))
				return false;
			memcpy(idbuf, p + off, n);
			idbuf[n] = '\0';
			return true;
		}
		if (scan_object(p, len, &off, &e) < 0 || scan_object(p, len, &off, &e) < 0)
			return false;
	}
	return false;
}

/*** Encoding ***/

/*
 * Packs a sandbox path; one whose first folder is itself named "workspace"
 * gets the alias prefix (decode drops exactly one), so it reads back as is.
 */
static void
pk_path(msgpack_packer *pk, const char *prefix, const char *path)
{
	size_t pl = strlen(prefix), n = strlen(path);
	const char *rel = path[0] == '/' ? path + 1 : path;

	if (!path_needs_alias(rel)) {
		pack_str(pk, path);
		return;
	}
	msgpack_pack_str(pk, pl + n);
	msgpack_pack_str_body(pk, prefix, pl);
	msgpack_pack_str_body(pk, path, n);
}

/*
 * Counts an entry when cond holds; true if it should also be packed (pk is
 * NULL on the counting pass). job_pack() runs twice with the same
 * conditions, so the map's count and its entries cannot disagree.
 */
static bool
pk_want(bool cond, uint32_t *n, const msgpack_packer *pk)
{
	if (!cond)
		return false;
	(*n)++;
	return pk != NULL;
}

/* Packs j's entries (or, with pk NULL, only counts them); returns the count. */
static uint32_t
job_pack(const struct job *j, msgpack_packer *pk)
{
	const struct job_limits *l = &j->limits;
	uint32_t nl = !!l->wall_ms + !!l->cpu_ms + !!l->memory_bytes + !!l->pids +
	    !!l->output_bytes + !!l->disk_bytes + !!l->files;
	uint32_t n = 0;

	if (pk_want(true, &n, pk))
		pack_kv_u64(pk, "v", PAYLOAD_VERSION);
	if (pk_want(true, &n, pk))
		pack_kv_str(pk, "id", j->id ? j->id : "");
	if (pk_want(true, &n, pk))
		pack_kv_str(pk, "op", job_op_name(j->op));
	if (pk_want(j->op == OP_SH, &n, pk))
		pack_kv_str(pk, "script", j->script ? j->script : "");
	if (pk_want(j->op == OP_PYTHON, &n, pk))
		pack_kv_str(pk, "code", j->code ? j->code : "");
	if (pk_want(j->op == OP_EXEC, &n, pk)) {
		pack_str(pk, "argv");
		msgpack_pack_array(pk, j->argc);
		for (size_t i = 0; i < j->argc; i++)
			pack_str(pk, j->argv[i]);
	}
	if (pk_want(j->stdin_data != NULL, &n, pk)) {
		pack_str(pk, "stdin");
		pack_bin(pk, j->stdin_data, j->stdin_len);
	}
	if (pk_want(j->env != NULL, &n, pk)) {
		pack_str(pk, "env");
		msgpack_pack_map(pk, j->nenv);
		for (size_t i = 0; i < j->nenv; i++) {
			const char *eq = strchr(j->env[i], '=');
			size_t kl = eq ? (size_t)(eq - j->env[i]) : strlen(j->env[i]);
			msgpack_pack_str(pk, kl);
			msgpack_pack_str_body(pk, j->env[i], kl);
			pack_str(pk, eq ? eq + 1 : "");
		}
	}
	if (pk_want(j->cwd != NULL, &n, pk))
		pack_kv_str(pk, "cwd", j->cwd);
	if (pk_want(nl != 0, &n, pk)) {
		pack_str(pk, "limits");
		msgpack_pack_map(pk, nl);
		if (l->wall_ms) pack_kv_u64(pk, "wall_ms", l->wall_ms);
		if (l->cpu_ms) pack_kv_u64(pk, "cpu_ms", l->cpu_ms);
		if (l->memory_bytes) pack_kv_u64(pk, "memory_bytes", l->memory_bytes);
		if (l->pids) pack_kv_u64(pk, "pids", l->pids);
		if (l->output_bytes) pack_kv_u64(pk, "output_bytes", l->output_bytes);
		if (l->disk_bytes) pack_kv_u64(pk, "disk_bytes", l->disk_bytes);
		if (l->files) pack_kv_u64(pk, "files", l->files);
	}
	if (pk_want(j->preset != PRESET_DEFAULT, &n, pk))
		pack_kv_str(pk, "preset", job_preset_name(j->preset));
	if (pk_want(j->nfiles != 0, &n, pk)) {
		pack_str(pk, "files");
		msgpack_pack_map(pk, j->nfiles);
		for (size_t i = 0; i < j->nfiles; i++) {
			pk_path(pk, "/workspace/", j->files[i].path);
			pack_bin(pk, j->files[i].data, j->files[i].len);
		}
	}
	if (pk_want(j->nlabels != 0, &n, pk)) {
		pack_str(pk, "labels");
		msgpack_pack_map(pk, j->nlabels);
		for (size_t i = 0; i < 2 * j->nlabels; i++)
			pack_str(pk, j->labels[i]);
	}
	if (pk_want(j->net != NULL, &n, pk))
		pack_kv_str(pk, "net", j->net);
	if (pk_want(j->nallow != 0, &n, pk)) {
		pack_str(pk, "allow");
		msgpack_pack_array(pk, j->nallow);
		for (size_t i = 0; i < j->nallow; i++)
			pack_str(pk, j->allow[i]);
	}
	if (pk_want(j->image != NULL, &n, pk))
		pack_kv_str(pk, "image", j->image);
	if (pk_want(j->image_id != NULL, &n, pk))
		pack_kv_str(pk, "image_id", j->image_id);
	if (pk_want(j->sandbox_image != NULL, &n, pk))
		pack_kv_str(pk, "sandbox_image", j->sandbox_image);
	if (pk_want(j->sandbox_workdir != NULL, &n, pk))
		pack_kv_str(pk, "sandbox_workdir", j->sandbox_workdir);
	/* Written when seeded too: an absent one would default to the folder. */
	if (pk_want(j->workdir != NULL || j->from_image_dir != NULL, &n, pk))
		pack_kv_str(pk, "workdir", j->workdir != NULL ? j->workdir : "/workspace");
	if (pk_want(j->from_image_dir != NULL, &n, pk))
		pack_kv_str(pk, "from_image_dir", j->from_image_dir);
	if (pk_want(j->priority != 0, &n, pk))
		pack_kv_i64(pk, "priority", j->priority);
	if (pk_want(j->deadline_ms != 0, &n, pk))
		pack_kv_i64(pk, "deadline_ms", j->deadline_ms);
	if (pk_want(j->tenant != NULL, &n, pk))
		pack_kv_str(pk, "tenant", j->tenant);
	if (pk_want(j->sandbox != NULL, &n, pk))
		pack_kv_str(pk, "sandbox", j->sandbox);
	if (pk_want(j->stream, &n, pk))
		pack_kv_bool(pk, "stream", j->stream);
	if (pk_want(j->ncases > 0, &n, pk)) {
		pack_str(pk, "cases");
		msgpack_pack_array(pk, j->ncases);
		for (size_t i = 0; i < j->ncases; i++) {
			const struct job_case *c = &j->cases[i];

			msgpack_pack_map(pk, (c->stdin_data != NULL) + (c->expect != NULL) +
			    (c->expect_mode != NULL));
			if (c->stdin_data != NULL)
				pack_str(pk, "stdin"), pack_bin(pk, c->stdin_data, c->stdin_len);
			if (c->expect != NULL)
				pack_str(pk, "expect"), pack_bin(pk, c->expect, c->expect_len);
			if (c->expect_mode != NULL)
				pack_kv_str(pk, "expect_mode", c->expect_mode);
		}
	}
	/*
	 * A run on a sandbox says persist either way, so the default cannot
	 * drift; a persist without a sandbox is written so decode refuses it.
	 */
	if (pk_want((JOB_OP_RUNS(j->op) && j->sandbox != NULL) || j->persist, &n, pk))
		pack_kv_bool(pk, "persist", j->persist);
	if (pk_want(j->perms != NULL, &n, pk)) {
		pack_str(pk, "perms");
		msgpack_pack_array(pk, j->nperms);
		for (size_t i = 0; i < j->nperms; i++) {
			msgpack_pack_map(pk, 2);
			pack_str(pk, "pattern");
			if (path_alias_len(j->perms[i].pattern, strlen(j->perms[i].pattern), true))
				pk_path(pk, "/workspace", j->perms[i].pattern);
			else
				pack_str(pk, j->perms[i].pattern);
			pack_kv_str(pk, "level", perm_level_name(j->perms[i].level));
		}
	}
	if (pk_want(j->perm_preset != NULL, &n, pk))
		pack_kv_str(pk, "perm_preset", j->perm_preset);
	if (pk_want(j->path != NULL, &n, pk)) {
		pack_str(pk, "path");
		pk_path(pk, "/workspace", j->path);
	}
	if (pk_want(j->data != NULL, &n, pk)) {
		pack_str(pk, "data");
		pack_bin(pk, j->data, j->data_len);
	}
	/* fs.write always carries its mode: decode made an absent one 0644. */
	if (pk_want(j->op == OP_FS_WRITE || j->mode != 0, &n, pk))
		pack_kv_u64(pk, "mode", j->mode);
	if (pk_want(j->recursive, &n, pk))
		pack_kv_bool(pk, "recursive", true);
	if (pk_want(j->parents, &n, pk))
		pack_kv_bool(pk, "parents", true);
	if (pk_want(j->key != NULL, &n, pk))
		pack_kv_str(pk, "key", j->key);
	if (pk_want(j->value != NULL, &n, pk))
		pack_kv_str(pk, "value", j->value);
	if (pk_want(j->prefix != NULL, &n, pk))
		pack_kv_str(pk, "prefix", j->prefix);
	if (pk_want(j->to != NULL, &n, pk))
		pack_kv_str(pk, "to", j->to);
	if (pk_want(j->snapshot_key != NULL, &n, pk))
		pack_kv_str(pk, "snapshot_key", j->snapshot_key);
	if (pk_want(j->snapshot != NULL, &n, pk)) {
		pack_str(pk, "snapshot");
		pack_bin(pk, j->snapshot, j->snapshot_len);
	}
	return n;
}

/*
 * Every field the decoder filled is written back, so the worker decodes the
 * job the dispatcher validated (defaults included: fs.list's "/", a
 * sandbox run's persist, fs.write's mode).
 */
int
payload_job_encode(const struct job *j, char **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, job_pack(j, NULL));
	job_pack(j, &pk);
	return pack_release(&sb, out, outlen);
}
