/*
 * path.c - sandbox paths as jobs name them (pure, no I/O).
 *
 * A job names paths of its sandbox's tree (files, fs.* path, cwd, rule
 * patterns). Each is normalised once, when the job is decoded, so every
 * later reader (the dispatcher, the worker, the sandbox) sees one spelling:
 * relative, no "." or "..", no empty component. The sandbox's root is
 * /workspace inside the job, so "/workspace/x" is an alias of "x"
 * (docs/paths.md); the encoder writes a path whose own first folder is
 * "workspace" with the alias in front, so decoding it again gives it back.
 * A path rule's level is parsed here too, into an enum perm_level.
 */
#include <errno.h>
#include <string.h>

#include "path.h"

/*** Path rule levels ***/

static const char *const level_names[] = {
	[PERM_NONE] = "none", [PERM_VIEW] = "view",
	[PERM_READ] = "read", [PERM_WRITE] = "write",
};

int
perm_level_parse(const char *s, size_t len, enum perm_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strlen(level_names[i]) == len && memcmp(s, level_names[i], len) == 0) {
			*out = (enum perm_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *
perm_level_name(enum perm_level level)
{
	if ((unsigned)level > PERM_WRITE)
		return "?";
	return level_names[level];
}

/*** Paths ***/

/* A path as it may appear in a message: at most 64 bytes, control bytes as '?'. */
const char *
path_shown(const char *in, size_t len, char buf[72])
{
	size_t n = len < 64 ? len : 64;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		buf[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	memcpy(buf + n, len > 64 ? "..." : "", len > 64 ? 4 : 1);
	return buf;
}

int
payload_path_normalise(const char *in, size_t len, char *out,
    const char *field, struct err *e)
{
	char shown[72];

	size_t o = 0, i = 0;

	if (len > JOB_PATH_MAX)
		return err_set(e, -EINVAL, "field '%s': path longer than %d bytes",
		    field, JOB_PATH_MAX);
	while (i < len) {
		size_t start, n;

		while (i < len && in[i] == '/')
			i++;
		start = i;
		while (i < len && in[i] != '/') {
			unsigned char c = (unsigned char)in[i];
			if (c < 0x20 || c == 0x7f)
				return err_set(e, -EINVAL,
				    "field '%s': path '%s' has a control character", field,
				    path_shown(in, len, shown));
			i++;
		}
		n = i - start;
		if (n == 0 || (n == 1 && in[start] == '.'))
			continue;
		if (n == 2 && in[start] == '.' && in[start + 1] == '.')
			return err_set(e, -EINVAL, "field '%s': path '%s' must not contain '..'",
			    field, path_shown(in, len, shown));
		if (n > JOB_NAME_MAX)
			return err_set(e, -EINVAL,
			    "field '%s': path component longer than %d bytes", field,
			    JOB_NAME_MAX);
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, in + start, n);
		o += n;
	}
	out[o] = '\0';
	if (o == 0)
		return err_set(e, -EINVAL, "field '%s': path is empty", field);
	return 0;
}

/* True if every component of the path is empty or ".": "/", ".", "/./". */
static bool
path_is_root(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '/')
			continue;
		if (p[i] != '.' || (i + 1 < n && p[i + 1] != '/'))
			return false;
	}
	return true;
}

/*
 * Length of a leading "/workspace" (or, unless absolute_only, "workspace")
 * component of p: the sandbox root as a job sees it. 0 if there is none.
 */
size_t
path_alias_len(const char *p, size_t n, bool absolute_only)
{
	size_t a = n > 0 && p[0] == '/' ? 1 : 0;

	if (a == 0 && absolute_only)
		return 0;
	if (n - a < 9 || memcmp(p + a, "workspace", 9) != 0)
		return 0;
	if (n - a > 9 && p[a + 9] != '/')
		return 0;
	return a + 9;
}

/*
 * Normalises a path of the sandbox's tree (files, fs.* path) into out
 * (JOB_PATH_MAX + 1 bytes) as payload_path_normalise() does, relative, with
 * "" for the root, and drops one leading "workspace" component: "a/b",
 * "/a/b", "/workspace/a/b" and "./workspace/a/b" are all "a/b". The alias is
 * taken from the raw text when it starts there, and then only once, so the
 * encoder can write a path whose own first folder is "workspace" back as
 * "/workspace/workspace/..." and get the same path again.
 */
static int
sandbox_path_normalise(const char *p, size_t n, char *out, const char *field,
    struct err *e)
{
	size_t a = path_alias_len(p, n, false);
	const char *p0 = p;
	size_t n0 = n;

	if (n == 0)
		return payload_path_normalise(p, n, out, field, e);
	p += a;
	n -= a;
	while (n > 0 && p[0] == '/') {
		p++;
		n--;
	}
	if (path_is_root(p, n)) {
		out[0] = '\0';
		return 0;
	}
	if (payload_path_normalise(p, n, out, field, e) < 0) {
		/* The same refusal, naming the path as the client wrote it. */
		(void)payload_path_normalise(p0, n0, out, field, e);
		return -EINVAL;
	}
	if (a == 0 && path_alias_len(out, strlen(out), false) > 0) {
		size_t l = strlen(out);
		memmove(out, out + (l > 9 ? 10 : 9), l - (l > 9 ? 10 : 9) + 1);
	}
	return 0;
}

int
payload_sandbox_path_normalise(const char *in, size_t len, char *out,
    const char *field, struct err *e)
{
	if (memchr(in, '\0', len) != NULL)
		return err_set(e, -EINVAL, "field '%s': contains a NUL byte", field);
	return sandbox_path_normalise(in, len, out, field, e);
}

const char *
payload_pattern_unalias(const char *p)
{
	if (path_alias_len(p, strlen(p), true) == 0)
		return p;
	return p[10] != '\0' ? p + 10 : "/";
}

/* True if the sandbox path s would lose its first component to the alias. */
bool
path_needs_alias(const char *s)
{
	return path_alias_len(s, strlen(s), false) > 0;
}

/*** Folders of a sandbox's root ***/

/*
 * Where sandq mounts its own files in every sandbox (sandbox/mount.c):
 * a sandbox's files there would be hidden by sandq's mounts, or, for
 * /workspace, sit on the worker's kept base under it.
 */
static const char *const root_dir_reserved[] = {
	"/proc", "/dev", "/tmp", "/etc", "/sys", "/workspace",
};

int
payload_root_dir_normalise(const char *in, size_t len, char *out,
    bool workspace_ok, const char *field, struct err *e)
{
	char rel[JOB_PATH_MAX + 1], shown[72];
	size_t n, depth = 1;

	if (len == 0 || in[0] != '/')
		return err_set(e, -EINVAL, "field '%s': '%s' is not an absolute path",
		    field, path_shown(in, len, shown));
	if (len > JOB_ROOT_DIR_MAX)
		return err_set(e, -EINVAL, "field '%s': longer than %d bytes", field,
		    JOB_ROOT_DIR_MAX);
	/*
	 * Printable ASCII: it is a mount point and it appears in messages;
	 * without ',', ':' and '\', which overlayfs's options would read as
	 * separators or escapes (sandbox/persist.c mounts one there).
	 */
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c < 0x20 || c > 0x7e)
			return err_set(e, -EINVAL, "field '%s': byte 0x%02x at offset %zu: "
			    "a folder is printable ASCII", field, c, i);
		if (c == ',' || c == ':' || c == '\\')
			return err_set(e, -EINVAL, "field '%s': '%c' at offset %zu: a "
			    "folder may not hold ',', ':' or '\\'", field, c, i);
	}
	if (path_is_root(in, len))
		return err_set(e, -EINVAL, "field '%s': must not be the root '/'", field);
	if (payload_path_normalise(in, len, rel, field, e) < 0)
		return -EINVAL;
	n = strlen(rel);
	for (size_t i = 0; i < n; i++)
		depth += rel[i] == '/';
	if (depth > JOB_ROOT_DIR_DEPTH)
		return err_set(e, -EINVAL, "field '%s': more than %d components", field,
		    JOB_ROOT_DIR_DEPTH);
	out[0] = '/';
	memcpy(out + 1, rel, n + 1);
	for (size_t i = 0; i < sizeof(root_dir_reserved) / sizeof(root_dir_reserved[0]); i++) {
		const char *r = root_dir_reserved[i];
		size_t rl = strlen(r);

		if (strncmp(out, r, rl) != 0 || (out[rl] != '\0' && out[rl] != '/'))
			continue;
		if (workspace_ok && out[rl] == '\0' && strcmp(r, "/workspace") == 0)
			return 0;
		return err_set(e, -EINVAL, "field '%s': '%s' is %s%s, which sandq mounts "
		    "itself", field, path_shown(out, n + 1, shown),
		    out[rl] == '\0' ? "" : "below ", r);
	}
	return 0;
}
