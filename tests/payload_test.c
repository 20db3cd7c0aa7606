/*
 * payload_test.c - unit tests for the job/result codecs in proto/: job.c,
 * result.c, and the scan.c and path.c they decode through.
 *
 * Inputs are built with msgpack-c's own packer (a struct jb collects a map's
 * entries and counts them, so a test lists fields and never counts by hand),
 * or written byte by byte where a test needs an encoding the packer would
 * not choose (array32 of one item, a container announcing more items than
 * there are bytes). Every rejection test checks three things: the return
 * code, that e.msg names the field, and what idbuf holds (the id when it was
 * readable and valid, "" otherwise), since that is what lets the dispatcher
 * write a `rejected` result instead of a dead letter.
 *
 * Everything allocated is freed: the suite runs under ASan with LSan.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/job.h"
#include "../proto/path.h"
#include "../proto/result.h"
#include "../proto/scan.h"

TestSuite(payload, .timeout = 120);

/*** Job builder ***/

/* A msgpack map under construction: entries go to body, n counts them. */
struct jb {
	msgpack_sbuffer body;	/* packed key/value pairs */
	msgpack_packer pk;	/* packs into body */
	uint32_t n;		/* pairs so far */
	msgpack_sbuffer out;	/* the finished map */
};

static void
jb_init(struct jb *b)
{
	memset(b, 0, sizeof(*b));
	msgpack_sbuffer_init(&b->body);
	msgpack_sbuffer_init(&b->out);
	msgpack_packer_init(&b->pk, &b->body, msgpack_sbuffer_write);
}

static void
jb_destroy(struct jb *b)
{
	msgpack_sbuffer_destroy(&b->body);
	msgpack_sbuffer_destroy(&b->out);
}

static void
pstr(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static void
pbin(msgpack_packer *pk, const void *p, size_t n)
{
	msgpack_pack_bin(pk, n);
	msgpack_pack_bin_body(pk, p, n);
}

/* Starts an entry: packs the key; the caller packs the value with b->pk. */
static msgpack_packer *
jb_key(struct jb *b, const char *k)
{
	b->n++;
	pstr(&b->pk, k);
	return &b->pk;
}

static void
jb_str(struct jb *b, const char *k, const char *v)
{
	pstr(jb_key(b, k), v);
}

static void
jb_int(struct jb *b, const char *k, int64_t v)
{
	msgpack_pack_int64(jb_key(b, k), v);
}

static void
jb_bool(struct jb *b, const char *k, bool v)
{
	if (v)
		msgpack_pack_true(jb_key(b, k));
	else
		msgpack_pack_false(jb_key(b, k));
}

/* Packs an array of n C strings. */
static void
jb_strv(struct jb *b, const char *k, const char *const *v, size_t n)
{
	msgpack_packer *pk = jb_key(b, k);

	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		pstr(pk, v[i]);
}

/* Packs a map of n string pairs kv[2i] -> kv[2i+1]. */
static void
jb_strmap(struct jb *b, const char *k, const char *const *kv, size_t n)
{
	msgpack_packer *pk = jb_key(b, k);

	msgpack_pack_map(pk, n);
	for (size_t i = 0; i < 2 * n; i++)
		pstr(pk, kv[i]);
}

/* Packs a one-entry map {k2: v}. */
static void
jb_map1_int(struct jb *b, const char *k, const char *k2, int64_t v)
{
	msgpack_packer *pk = jb_key(b, k);

	msgpack_pack_map(pk, 1);
	pstr(pk, k2);
	msgpack_pack_int64(pk, v);
}

/* The smallest valid exec job: id, op, argv ["true"]. */
static void
jb_exec(struct jb *b, const char *id)
{
	static const char *const argv[] = { "true" };

	jb_str(b, "id", id);
	jb_str(b, "op", "exec");
	jb_strv(b, "argv", argv, 1);
}

/* Finishes the map; returns its bytes (owned by b). */
static const char *
jb_finish(struct jb *b, size_t *len)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(&b->out);
	msgpack_packer_init(&pk, &b->out, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, b->n);
	msgpack_sbuffer_write(&b->out, b->body.data, b->body.size);
	*len = b->out.size;
	return b->out.data;
}

/* Decodes b's map, asserts success, and returns the job. */
static struct job *
jb_decode_ok(struct jb *b)
{
	struct job *j = NULL;
	struct err e = { 0 };
	char id[JOB_ID_MAX + 1];
	size_t len;
	const char *buf = jb_finish(b, &len);
	int rc = payload_job_decode(buf, len, &j, id, &e);

	cr_assert_eq(rc, 0, "decode failed: %d %s", rc, e.msg);
	cr_assert_not_null(j);
	cr_expect_str_eq(id, j->id);
	return j;
}

/*
 * Decodes b's map and expects rc, an e.msg containing want_msg, *out NULL,
 * and idbuf equal to want_id ("" when the id could not be read).
 */
static void
jb_expect_reject(struct jb *b, int want_rc, const char *want_msg,
    const char *want_id)
{
	struct job *j = (struct job *)(uintptr_t)1;
	struct err e = { 0 };
	char id[JOB_ID_MAX + 1];
	size_t len;
	const char *buf = jb_finish(b, &len);
	int rc;

	memset(id, 'X', sizeof(id));
	rc = payload_job_decode(buf, len, &j, id, &e);
	cr_expect_eq(rc, want_rc, "rc %d, want %d (msg: %s)", rc, want_rc, e.msg);
	cr_expect_null(j);
	cr_expect_eq(e.code, want_rc);
	cr_expect(strstr(e.msg, want_msg) != NULL, "msg '%s' lacks '%s'", e.msg,
	    want_msg);
	cr_expect_str_eq(id, want_id);
	job_free(rc == 0 ? j : NULL);
}

/* Builds {id:"j1", op:"exec", argv:["true"]} + one more field, expects reject. */
#define REJECT_EXEC_WITH(want_msg, ...)					\
	do {								\
		struct jb b_;						\
		jb_init(&b_);						\
		jb_exec(&b_, "j1");					\
		{ struct jb *b = &b_; __VA_ARGS__; }			\
		jb_expect_reject(&b_, -EINVAL, (want_msg), "j1");	\
		jb_destroy(&b_);					\
	} while (0)

/*** Decoding jobs ***/

static void
expect_no_optional_fields(const struct job *j)
{
	cr_expect_null(j->stdin_data);
	cr_expect_eq(j->stdin_len, 0);
	cr_expect_null(j->env);
	cr_expect_eq(j->nenv, 0);
	cr_expect_null(j->cwd);
	cr_expect_eq(j->limits.wall_ms, 0);
	cr_expect_eq(j->limits.cpu_ms, 0);
	cr_expect_eq(j->limits.memory_bytes, 0);
	cr_expect_eq(j->limits.pids, 0);
	cr_expect_eq(j->limits.output_bytes, 0);
	cr_expect_eq(j->limits.disk_bytes, 0);
	cr_expect_eq(j->limits.files, 0);
	cr_expect_eq(j->preset, PRESET_DEFAULT);
	cr_expect_eq(j->nfiles, 0);
	cr_expect_null(j->labels);
	cr_expect_eq(j->nlabels, 0);
	cr_expect_null(j->net);
	cr_expect_null(j->image);
	cr_expect_eq(j->priority, 0);
	cr_expect_eq(j->deadline_ms, 0);
}

Test(payload, decodes_minimal_exec_job)
{
	static const char *const argv[] = { "/bin/echo", "hello", "" };
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_str(&b, "id", "job-1");
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", argv, 3);
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->id, "job-1");
	cr_expect_eq(j->op, OP_EXEC);
	cr_assert_eq(j->argc, 3);
	cr_expect_str_eq(j->argv[0], "/bin/echo");
	cr_expect_str_eq(j->argv[1], "hello");
	cr_expect_str_eq(j->argv[2], "");
	cr_expect_null(j->argv[3]);
	cr_expect_null(j->script);
	cr_expect_null(j->code);
	expect_no_optional_fields(j);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_minimal_sh_job_as_bash_c)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_int(&b, "v", 1);
	jb_str(&b, "id", "sh.1");
	jb_str(&b, "op", "sh");
	jb_str(&b, "script", "echo hi; exit 3");
	j = jb_decode_ok(&b);
	cr_expect_eq(j->op, OP_SH);
	cr_expect_str_eq(j->script, "echo hi; exit 3");
	cr_expect_null(j->code);
	cr_assert_eq(j->argc, 3);
	cr_expect_str_eq(j->argv[0], "bash");
	cr_expect_str_eq(j->argv[1], "-c");
	cr_expect_str_eq(j->argv[2], "echo hi; exit 3");
	cr_expect_null(j->argv[3]);
	expect_no_optional_fields(j);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_minimal_python_job_as_python3_c)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_str(&b, "op", "python");
	jb_str(&b, "code", "print(1)");
	jb_str(&b, "id", "py:1");		/* the id need not come first */
	j = jb_decode_ok(&b);
	cr_expect_eq(j->op, OP_PYTHON);
	cr_expect_str_eq(j->code, "print(1)");
	cr_expect_null(j->script);
	cr_assert_eq(j->argc, 3);
	cr_expect_str_eq(j->argv[0], "python3");
	cr_expect_str_eq(j->argv[1], "-c");
	cr_expect_str_eq(j->argv[2], "print(1)");
	cr_expect_null(j->argv[3]);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, accepts_id_of_max_length)
{
	char id[JOB_ID_MAX + 1];
	struct jb b;
	struct job *j;

	memset(id, 'a', JOB_ID_MAX);
	id[JOB_ID_MAX] = '\0';
	jb_init(&b);
	jb_exec(&b, id);
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->id, id);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_stdin_as_str)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_str(&b, "stdin", "line\n");
	j = jb_decode_ok(&b);
	cr_assert_eq(j->stdin_len, 5);
	cr_expect_arr_eq(j->stdin_data, "line\n", 5);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_stdin_as_bin_with_nul_bytes)
{
	static const uint8_t in[] = { 0, 1, 0xff, 0, 'x' };
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	pbin(jb_key(&b, "stdin"), in, sizeof(in));
	j = jb_decode_ok(&b);
	cr_assert_eq(j->stdin_len, sizeof(in));
	cr_expect_arr_eq(j->stdin_data, in, sizeof(in));
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_empty_stdin_as_present)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_str(&b, "stdin", "");
	j = jb_decode_ok(&b);
	cr_expect_not_null(j->stdin_data);
	cr_expect_eq(j->stdin_len, 0);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_env_as_k_eq_v)
{
	static const char *const env[] = { "A", "1", "_B_2", "x=y", "EMPTY", "" };
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_strmap(&b, "env", env, 3);
	j = jb_decode_ok(&b);
	cr_assert_eq(j->nenv, 3);
	cr_expect_str_eq(j->env[0], "A=1");
	cr_expect_str_eq(j->env[1], "_B_2=x=y");
	cr_expect_str_eq(j->env[2], "EMPTY=");
	cr_expect_null(j->env[3]);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_empty_env_as_empty_list)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_strmap(&b, "env", NULL, 0);
	j = jb_decode_ok(&b);
	cr_assert_not_null(j->env);
	cr_expect_eq(j->nenv, 0);
	cr_expect_null(j->env[0]);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_cwd_relative_to_workspace)
{
	static const struct { const char *in, *want; } t[] = {
		{ "x", "/workspace/x" },
		{ "./x//y/", "/workspace/x/y" },
		{ "a/./b/.", "/workspace/a/b" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_exec(&b, "j1");
		jb_str(&b, "cwd", t[i].in);
		j = jb_decode_ok(&b);
		cr_expect_str_eq(j->cwd, t[i].want, "cwd '%s'", t[i].in);
		job_free(j);
		jb_destroy(&b);
	}
}

Test(payload, decodes_cwd_absolute)
{
	static const struct { const char *in, *want; } t[] = {
		{ "/", "/" },
		{ "/tmp", "/tmp" },
		{ "/workspace/x", "/workspace/x" },
		{ "//tmp//a/./", "/tmp/a" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_exec(&b, "j1");
		jb_str(&b, "cwd", t[i].in);
		j = jb_decode_ok(&b);
		cr_expect_str_eq(j->cwd, t[i].want, "cwd '%s'", t[i].in);
		job_free(j);
		jb_destroy(&b);
	}
}

/* Packs limits with every key set to base + its index. */
static void
jb_all_limits(struct jb *b, uint64_t base)
{
	static const char *const names[] = { "wall_ms", "cpu_ms", "memory_bytes",
	    "pids", "output_bytes", "disk_bytes", "files" };
	msgpack_packer *pk = jb_key(b, "limits");

	msgpack_pack_map(pk, 7);
	for (size_t i = 0; i < 7; i++) {
		pstr(pk, names[i]);
		msgpack_pack_uint64(pk, base + i);
	}
}

Test(payload, decodes_every_limit)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_all_limits(&b, 1000);
	j = jb_decode_ok(&b);
	cr_expect_eq(j->limits.wall_ms, 1000);
	cr_expect_eq(j->limits.cpu_ms, 1001);
	cr_expect_eq(j->limits.memory_bytes, 1002);
	cr_expect_eq(j->limits.pids, 1003);
	cr_expect_eq(j->limits.output_bytes, 1004);
	cr_expect_eq(j->limits.disk_bytes, 1005);
	cr_expect_eq(j->limits.files, 1006);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_limits_at_their_maxima)
{
	static const struct { const char *name; uint64_t max; } t[] = {
		{ "wall_ms", 86400000ull }, { "cpu_ms", 86400000ull },
		{ "memory_bytes", 1ull << 46 }, { "pids", 1u << 22 },
		{ "output_bytes", 1ull << 30 }, { "disk_bytes", 1ull << 40 },
		{ "files", 1u << 20 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_exec(&b, "j1");
		jb_map1_int(&b, "limits", t[i].name, (int64_t)t[i].max);
		j = jb_decode_ok(&b);
		job_free(j);
		jb_destroy(&b);

		jb_init(&b);
		jb_exec(&b, "j1");
		jb_map1_int(&b, "limits", t[i].name, (int64_t)t[i].max + 1);
		char want[64];
		snprintf(want, sizeof(want), "field 'limits.%s': must be at most", t[i].name);
		jb_expect_reject(&b, -EINVAL, want, "j1");
		jb_destroy(&b);
	}
}

Test(payload, decodes_each_preset)
{
	static const struct { const char *name; enum job_preset p; } t[] = {
		{ "strict", PRESET_STRICT }, { "normal", PRESET_NORMAL },
		{ "permissive", PRESET_PERMISSIVE },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_exec(&b, "j1");
		jb_str(&b, "preset", t[i].name);
		j = jb_decode_ok(&b);
		cr_expect_eq(j->preset, t[i].p, "preset %s", t[i].name);
		job_free(j);
		jb_destroy(&b);
	}
}

Test(payload, decodes_files_with_normalised_paths)
{
	static const uint8_t blob[] = { 0, 'b', 0 };
	struct jb b;
	struct job *j;
	msgpack_packer *pk;

	jb_init(&b);
	jb_exec(&b, "j1");
	pk = jb_key(&b, "files");
	msgpack_pack_map(pk, 4);
	pstr(pk, "/a//b/./c");
	pstr(pk, "one");
	pstr(pk, "/workspace/x");
	pbin(pk, blob, sizeof(blob));
	pstr(pk, "./d/");
	pstr(pk, "");
	pstr(pk, "workspace/sub/y");
	pstr(pk, "y");
	j = jb_decode_ok(&b);
	cr_assert_eq(j->nfiles, 4);
	cr_expect_str_eq(j->files[0].path, "a/b/c");
	cr_expect_eq(j->files[0].len, 3);
	cr_expect_arr_eq(j->files[0].data, "one", 3);
	cr_expect_str_eq(j->files[1].path, "x");
	cr_expect_eq(j->files[1].len, sizeof(blob));
	cr_expect_arr_eq(j->files[1].data, blob, sizeof(blob));
	cr_expect_str_eq(j->files[2].path, "d");
	cr_expect_eq(j->files[2].len, 0);
	cr_expect_str_eq(j->files[3].path, "sub/y");
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_labels_as_pairs)
{
	static const char *const kv[] = { "team", "infra", "run", "42" };
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_strmap(&b, "labels", kv, 2);
	j = jb_decode_ok(&b);
	cr_assert_eq(j->nlabels, 2);
	for (size_t i = 0; i < 4; i++)
		cr_expect_str_eq(j->labels[i], kv[i]);
	cr_expect_null(j->labels[4]);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, decodes_net_priority_deadline_and_false_flags)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_str(&b, "net", "none");
	jb_int(&b, "priority", -7);
	jb_int(&b, "deadline_ms", 1700000000123);
	jb_bool(&b, "stream", false);
	jb_bool(&b, "persist", false);
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->net, "none");
	cr_expect_eq(j->net_mode, NET_NONE);
	cr_expect_eq(j->priority, -7);
	cr_expect_eq(j->deadline_ms, 1700000000123);
	job_free(j);
	jb_destroy(&b);

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_int(&b, "priority", INT64_MAX);
	j = jb_decode_ok(&b);
	cr_expect_eq(j->priority, INT64_MAX);
	job_free(j);
	jb_destroy(&b);
}

/*** Encode -> decode ***/

static char *
xdup(const char *s)
{
	char *p = strdup(s);

	cr_assert_not_null(p);
	return p;
}

static char **
strv_new(const char *const *v, size_t n)
{
	char **out = calloc(n + 1, sizeof(*out));

	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++)
		out[i] = xdup(v[i]);
	return out;
}

/* Both NULL, or equal strings. */
static void
expect_opt_str_eq(const char *what, const char *a, const char *b)
{
	cr_expect_eq(a == NULL, b == NULL, "%s: %s vs %s", what, a ? a : "NULL",
	    b ? b : "NULL");
	if (a && b)
		cr_expect_str_eq(a, b, "%s", what);
}

/* Compares every field of two jobs. */
static void
expect_jobs_equal(const struct job *a, const struct job *b)
{
	cr_expect_str_eq(a->id, b->id);
	cr_expect_eq(a->op, b->op);
	cr_assert_eq(a->argc, b->argc);
	for (size_t i = 0; i < a->argc; i++)
		cr_expect_str_eq(a->argv[i], b->argv[i], "argv[%zu]", i);
	cr_expect_eq(a->argv == NULL, b->argv == NULL);
	if (b->argv)
		cr_expect_null(b->argv[b->argc]);
	cr_expect_eq(a->script == NULL, b->script == NULL);
	if (a->script && b->script)
		cr_expect_str_eq(a->script, b->script);
	cr_expect_eq(a->code == NULL, b->code == NULL);
	if (a->code && b->code)
		cr_expect_str_eq(a->code, b->code);
	cr_assert_eq(a->stdin_len, b->stdin_len);
	cr_expect_eq(a->stdin_data == NULL, b->stdin_data == NULL);
	if (a->stdin_len)
		cr_expect_arr_eq(a->stdin_data, b->stdin_data, a->stdin_len);
	cr_assert_eq(a->nenv, b->nenv);
	cr_expect_eq(a->env == NULL, b->env == NULL);
	for (size_t i = 0; i < a->nenv; i++)
		cr_expect_str_eq(a->env[i], b->env[i]);
	cr_expect_eq(a->cwd == NULL, b->cwd == NULL);
	if (a->cwd && b->cwd)
		cr_expect_str_eq(a->cwd, b->cwd);
	cr_expect_eq(memcmp(&a->limits, &b->limits, sizeof(a->limits)), 0);
	cr_expect_eq(a->preset, b->preset);
	cr_assert_eq(a->nfiles, b->nfiles);
	for (size_t i = 0; i < a->nfiles; i++) {
		cr_expect_str_eq(a->files[i].path, b->files[i].path);
		cr_assert_eq(a->files[i].len, b->files[i].len);
		if (a->files[i].len)
			cr_expect_arr_eq(a->files[i].data, b->files[i].data, a->files[i].len);
	}
	cr_assert_eq(a->nlabels, b->nlabels);
	for (size_t i = 0; i < 2 * a->nlabels; i++)
		cr_expect_str_eq(a->labels[i], b->labels[i]);
	cr_expect_eq(a->net == NULL, b->net == NULL);
	if (a->net && b->net)
		cr_expect_str_eq(a->net, b->net);
	cr_expect_eq(a->priority, b->priority);
	cr_expect_eq(a->deadline_ms, b->deadline_ms);
	expect_opt_str_eq("image", a->image, b->image);
	expect_opt_str_eq("image_id", a->image_id, b->image_id);
	expect_opt_str_eq("sandbox_image", a->sandbox_image, b->sandbox_image);
	expect_opt_str_eq("sandbox_workdir", a->sandbox_workdir, b->sandbox_workdir);
	expect_opt_str_eq("workdir", a->workdir, b->workdir);
	expect_opt_str_eq("from_image_dir", a->from_image_dir, b->from_image_dir);
	expect_opt_str_eq("tenant", a->tenant, b->tenant);
	expect_opt_str_eq("sandbox", a->sandbox, b->sandbox);
	cr_expect_eq(a->stream, b->stream);
	cr_expect_eq(a->persist, b->persist);
	cr_assert_eq(a->nperms, b->nperms);
	cr_expect_eq(a->perms == NULL, b->perms == NULL);
	for (size_t i = 0; i < a->nperms; i++) {
		cr_expect_str_eq(a->perms[i].pattern, b->perms[i].pattern);
		cr_expect_eq(a->perms[i].level, b->perms[i].level);
	}
	expect_opt_str_eq("perm_preset", a->perm_preset, b->perm_preset);
	expect_opt_str_eq("path", a->path, b->path);
	cr_expect_eq(a->data == NULL, b->data == NULL);
	cr_assert_eq(a->data_len, b->data_len);
	if (a->data_len)
		cr_expect_arr_eq(a->data, b->data, a->data_len);
	cr_expect_eq(a->mode, b->mode);
	cr_expect_eq(a->recursive, b->recursive);
	cr_expect_eq(a->parents, b->parents);
	expect_opt_str_eq("key", a->key, b->key);
	expect_opt_str_eq("value", a->value, b->value);
	expect_opt_str_eq("prefix", a->prefix, b->prefix);
	expect_opt_str_eq("to", a->to, b->to);
	expect_opt_str_eq("snapshot_key", a->snapshot_key, b->snapshot_key);
	cr_expect_eq(a->snapshot == NULL, b->snapshot == NULL);
	cr_assert_eq(a->snapshot_len, b->snapshot_len);
	if (a->snapshot_len)
		cr_expect_arr_eq(a->snapshot, b->snapshot, a->snapshot_len);
}

/* Encodes j, decodes the bytes, and compares. */
static void
expect_job_round_trip(const struct job *j)
{
	struct job *back = NULL;
	struct err e = { 0 };
	char id[JOB_ID_MAX + 1];
	char *buf = NULL;
	size_t len = 0;
	int rc;

	cr_assert_eq(payload_job_encode(j, &buf, &len), 0);
	cr_assert_not_null(buf);
	cr_expect_eq(payload_scan(buf, len, &e), 0, "%s", e.msg);
	rc = payload_job_decode(buf, len, &back, id, &e);
	cr_assert_eq(rc, 0, "decode of encoded job failed: %s", e.msg);
	expect_jobs_equal(j, back);
	job_free(back);
	free(buf);
}

Test(payload, round_trips_every_job_field)
{
	static const char *const argv[] = { "/usr/bin/env", "-i", "a b", "ü" };
	static const char *const env[] = { "A=1", "PATH_X=/x:/y", "E=" };
	static const char *const labels[] = { "k1", "v1", "k2", "" };
	static const uint8_t in[] = { 0, 1, 2, 0xff };
	struct job *j = job_new();

	j->id = xdup("round-trip:1");
	j->op = OP_EXEC;
	j->argv = strv_new(argv, 4);
	j->argc = 4;
	j->stdin_data = malloc(sizeof(in));
	memcpy(j->stdin_data, in, sizeof(in));
	j->stdin_len = sizeof(in);
	j->env = strv_new(env, 3);
	j->nenv = 3;
	j->cwd = xdup("/workspace/sub");
	j->limits = (struct job_limits){ .wall_ms = 5000, .cpu_ms = 4000,
	    .memory_bytes = 256u << 20, .pids = 64, .output_bytes = 1u << 20,
	    .disk_bytes = 1u << 30, .files = 256 };
	j->preset = PRESET_PERMISSIVE;
	j->files = calloc(2, sizeof(*j->files));
	j->files[0].path = xdup("a/b.txt");
	j->files[0].data = (uint8_t *)xdup("hello");
	j->files[0].len = 5;
	j->files[1].path = xdup("bin");
	j->files[1].data = malloc(sizeof(in));
	memcpy(j->files[1].data, in, sizeof(in));
	j->files[1].len = sizeof(in);
	j->nfiles = 2;
	j->labels = strv_new(labels, 4);
	j->nlabels = 2;
	j->net = xdup("none");
	j->image = xdup("docker://r.io:5000/team/app@sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	j->image_id = xdup("sha256:"
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	j->priority = -3;
	j->deadline_ms = 1700000000000;
	j->stream = true;
	expect_job_round_trip(j);
	job_free(j);
}

Test(payload, round_trips_decoded_sh_and_python_jobs)
{
	static const char *const env[] = { "X", "y" };
	static const char *const ops[][2] = { { "sh", "script" }, { "python", "code" } };

	for (size_t i = 0; i < 2; i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_str(&b, "id", "rt");
		jb_str(&b, "op", ops[i][0]);
		jb_str(&b, ops[i][1], "body\nline 2");
		jb_strmap(&b, "env", env, 1);
		jb_str(&b, "cwd", "/");
		jb_all_limits(&b, 1);
		jb_str(&b, "preset", "strict");
		jb_int(&b, "priority", 9);
		j = jb_decode_ok(&b);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
}

Test(payload, round_trips_minimal_job)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "min");
	j = jb_decode_ok(&b);
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);
}

/*** Rejected jobs: each names its field ***/

Test(payload, rejects_missing_id)
{
	static const char *const argv[] = { "true" };
	struct jb b;

	jb_init(&b);
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", argv, 1);
	jb_expect_reject(&b, -EINVAL, "field 'id': missing", "");
	jb_destroy(&b);
}

Test(payload, rejects_bad_id_with_empty_idbuf)
{
	static const char *const bad[] = { "", "a b", "a/b", "x*", "é", "{t}", "a\nb" };
	char longid[JOB_ID_MAX + 2];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct jb b;

		jb_init(&b);
		jb_exec(&b, bad[i]);
		jb_expect_reject(&b, -EINVAL, "field 'id'", "");
		jb_destroy(&b);
	}
	memset(longid, 'a', JOB_ID_MAX + 1);
	longid[JOB_ID_MAX + 1] = '\0';
	{
		struct jb b;

		jb_init(&b);
		jb_exec(&b, longid);
		jb_expect_reject(&b, -EINVAL, "field 'id'", "");
		jb_destroy(&b);
	}
}

Test(payload, rejects_id_with_nul_byte)
{
	static const char *const argv[] = { "true" };
	struct jb b;
	msgpack_packer *pk;

	jb_init(&b);
	pk = jb_key(&b, "id");
	msgpack_pack_str(pk, 3);
	msgpack_pack_str_body(pk, "a\0b", 3);
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", argv, 1);
	jb_expect_reject(&b, -EINVAL, "field 'id'", "");
	jb_destroy(&b);
}

Test(payload, rejects_id_that_is_not_a_string)
{
	static const char *const argv[] = { "true" };
	struct jb b;

	jb_init(&b);
	jb_int(&b, "id", 12);
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", argv, 1);
	jb_expect_reject(&b, -EINVAL, "field 'id'", "");
	jb_destroy(&b);
}

Test(payload, rejects_id_given_twice)
{
	struct jb b;

	jb_init(&b);
	jb_exec(&b, "first");
	jb_str(&b, "id", "second");
	jb_expect_reject(&b, -EINVAL, "field 'id': given twice", "");
	jb_destroy(&b);
}

Test(payload, rejects_missing_op)
{
	static const char *const argv[] = { "true" };
	struct jb b;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_strv(&b, "argv", argv, 1);
	jb_expect_reject(&b, -EINVAL, "field 'op': missing", "j1");
	jb_destroy(&b);
}

Test(payload, rejects_unknown_and_non_string_op)
{
	struct jb b;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "execute");
	jb_expect_reject(&b, -EINVAL, "field 'op': unknown op 'execute'", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "none");
	jb_expect_reject(&b, -EINVAL, "field 'op'", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_int(&b, "op", 1);
	jb_expect_reject(&b, -EINVAL, "field 'op': expected a string", "j1");
	jb_destroy(&b);
}

Test(payload, rejects_bad_argv)
{
	static const char *const one[] = { "x" };
	static const char *const empty0[] = { "" , "x" };
	struct jb b;
	msgpack_packer *pk;

	/* Missing. */
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	jb_expect_reject(&b, -EINVAL, "field 'argv': missing", "j1");
	jb_destroy(&b);

	/* Not an array. */
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	jb_str(&b, "argv", "true");
	jb_expect_reject(&b, -EINVAL, "field 'argv': expected an array", "j1");
	jb_destroy(&b);

	/* Empty. */
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", one, 0);
	jb_expect_reject(&b, -EINVAL, "field 'argv': must not be empty", "j1");
	jb_destroy(&b);

	/* An element that is not a string. */
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	pk = jb_key(&b, "argv");
	msgpack_pack_array(pk, 2);
	pstr(pk, "echo");
	msgpack_pack_int(pk, 5);
	jb_expect_reject(&b, -EINVAL, "field 'argv[1]': expected a string", "j1");
	jb_destroy(&b);

	/* A NUL byte inside an argument. */
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	pk = jb_key(&b, "argv");
	msgpack_pack_array(pk, 1);
	msgpack_pack_str(pk, 4);
	msgpack_pack_str_body(pk, "ab\0c", 4);
	jb_expect_reject(&b, -EINVAL, "field 'argv[0]': contains a NUL byte", "j1");
	jb_destroy(&b);

	/* An empty program name. */
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", empty0, 2);
	jb_expect_reject(&b, -EINVAL, "field 'argv[0]': must not be empty", "j1");
	jb_destroy(&b);
}

Test(payload, rejects_argv_over_exec_bytes_max)
{
	/* 9 arguments of 128 KiB - 1 exceed the 1 MiB argv + env budget. */
	size_t n = JOB_ARG_MAX - 1;
	char *big = malloc(n + 1);
	struct jb b;
	msgpack_packer *pk;

	cr_assert_not_null(big);
	memset(big, 'a', n);
	big[n] = '\0';
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	pk = jb_key(&b, "argv");
	msgpack_pack_array(pk, 9);
	for (int i = 0; i < 9; i++)
		pstr(pk, big);
	jb_expect_reject(&b, -EINVAL, "field 'argv': arguments and environment exceed",
	    "j1");
	jb_destroy(&b);

	/* One argument of JOB_ARG_MAX bytes is too long by itself. */
	big = realloc(big, JOB_ARG_MAX + 1);
	cr_assert_not_null(big);
	memset(big, 'a', JOB_ARG_MAX);
	big[JOB_ARG_MAX] = '\0';
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "exec");
	jb_strv(&b, "argv", (const char *const *)&big, 1);
	jb_expect_reject(&b, -EINVAL, "field 'argv[0]': longer than", "j1");
	jb_destroy(&b);
	free(big);
}

Test(payload, rejects_bad_env)
{
	static const char *const bad_names[] = { "1A", "A-B", "", "A=B", "A B" };

	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		const char *kv[] = { bad_names[i], "v" };

		REJECT_EXEC_WITH("field 'env': variable names must match",
		    jb_strmap(b, "env", kv, 1));
	}
	/* A value that is not a string names the variable. */
	REJECT_EXEC_WITH("field 'env.HOME': expected a string",
	    jb_map1_int(b, "env", "HOME", 1));
	/* Not a map. */
	REJECT_EXEC_WITH("field 'env': expected a map", jb_str(b, "env", "A=1"));

	/* A non-string key. */
	REJECT_EXEC_WITH("field 'env': variable names must match",
	    { msgpack_packer *pk = jb_key(b, "env");
	      msgpack_pack_map(pk, 1); msgpack_pack_int(pk, 1); pstr(pk, "v"); });
	/* The same name twice (a prefix of another name is fine). */
	REJECT_EXEC_WITH("field 'env.A': given twice",
	    { msgpack_packer *pk = jb_key(b, "env");
	      msgpack_pack_map(pk, 3); pstr(pk, "A"); pstr(pk, "1");
	      pstr(pk, "AB"); pstr(pk, "2"); pstr(pk, "A"); pstr(pk, "3"); });
}

Test(payload, rejects_bad_limits)
{
	/* Unknown key. */
	REJECT_EXEC_WITH("field 'limits': unknown limit 'walltime'",
	    jb_map1_int(b, "limits", "walltime", 5));
	/* Zero: 0 means "not set", so a client cannot send it. */
	REJECT_EXEC_WITH("field 'limits.wall_ms': must be at least 1",
	    jb_map1_int(b, "limits", "wall_ms", 0));
	/* Negative. */
	REJECT_EXEC_WITH("field 'limits.cpu_ms': must be at least 1",
	    jb_map1_int(b, "limits", "cpu_ms", -1));
	/* Wrong type. */
	REJECT_EXEC_WITH("field 'limits.pids': expected an integer",
	    { msgpack_packer *pk = jb_key(b, "limits");
	      msgpack_pack_map(pk, 1); pstr(pk, "pids"); pstr(pk, "10"); });
	REJECT_EXEC_WITH("field 'limits.memory_bytes': expected an integer",
	    { msgpack_packer *pk = jb_key(b, "limits");
	      msgpack_pack_map(pk, 1); pstr(pk, "memory_bytes");
	      msgpack_pack_double(pk, 1.5); });
	/* Not a map. */
	REJECT_EXEC_WITH("field 'limits': expected a map", jb_int(b, "limits", 5));
}

Test(payload, rejects_unknown_preset)
{
	REJECT_EXEC_WITH("field 'preset'", jb_str(b, "preset", "paranoid"));
	REJECT_EXEC_WITH("field 'preset'", jb_str(b, "preset", "default"));
	REJECT_EXEC_WITH("field 'preset'", jb_int(b, "preset", 1));
}

/* Packs files as a map of paths, each to "x". */
static void
jb_files(struct jb *b, const char *const *paths, size_t n)
{
	msgpack_packer *pk = jb_key(b, "files");

	msgpack_pack_map(pk, n);
	for (size_t i = 0; i < n; i++) {
		pstr(pk, paths[i]);
		pstr(pk, "x");
	}
}

Test(payload, rejects_bad_files)
{
	static const char *const dotdot[] = { "a/../b" };
	static const char *const dotdot2[] = { "../x" };
	static const char *const dup[] = { "a/b", "/a//b/" };
	static const char *const dup_ws[] = { "x", "/workspace/x" };
	static const char *const file_dir[] = { "a", "a/b" };
	static const char *const dir_file[] = { "a/b/c", "a/b" };
	static const char *const ws[] = { "/workspace" };
	static const char *const empty[] = { "/" };
	static const char *const ctl[] = { "a\tb" };

	REJECT_EXEC_WITH("field 'files': path 'a/../b' must not contain '..'",
	    jb_files(b, dotdot, 1));
	REJECT_EXEC_WITH("field 'files': path '../x' must not contain '..'",
	    jb_files(b, dotdot2, 1));
	REJECT_EXEC_WITH("field 'files': 'a/b' given twice", jb_files(b, dup, 2));
	REJECT_EXEC_WITH("field 'files': 'x' given twice", jb_files(b, dup_ws, 2));
	REJECT_EXEC_WITH("field 'files': 'a' is both a file and a directory",
	    jb_files(b, file_dir, 2));
	REJECT_EXEC_WITH("field 'files': 'a/b' is both a file and a directory",
	    jb_files(b, dir_file, 2));
	REJECT_EXEC_WITH("field 'files'", jb_files(b, ws, 1));
	REJECT_EXEC_WITH("field 'files': '/' is the workspace itself", jb_files(b, empty, 1));
	REJECT_EXEC_WITH("field 'files': path 'a?b' has a control character",
	    jb_files(b, ctl, 1));
	REJECT_EXEC_WITH("field 'files': expected a map", jb_str(b, "files", "a"));
	REJECT_EXEC_WITH("field 'files': expected bytes",
	    jb_map1_int(b, "files", "a", 1));
	REJECT_EXEC_WITH("field 'files': a path contains a NUL byte",
	    { msgpack_packer *pk = jb_key(b, "files");
	      msgpack_pack_map(pk, 1); msgpack_pack_str(pk, 3);
	      msgpack_pack_str_body(pk, "a\0b", 3); pstr(pk, "x"); });
}

Test(payload, rejects_bad_cwd)
{
	REJECT_EXEC_WITH("field 'cwd': path '/workspace/../etc' must not contain '..'",
	    jb_str(b, "cwd", "/workspace/../etc"));
	REJECT_EXEC_WITH("field 'cwd': path is empty", jb_str(b, "cwd", ""));
	REJECT_EXEC_WITH("field 'cwd': expected a string", jb_int(b, "cwd", 1));
}

Test(payload, rejects_bad_labels)
{
	REJECT_EXEC_WITH("field 'labels': expected a map", jb_str(b, "labels", "x"));
	REJECT_EXEC_WITH("field 'labels': expected a string",
	    jb_map1_int(b, "labels", "k", 1));
}

Test(payload, rejects_script_or_code_for_exec)
{
	REJECT_EXEC_WITH("field 'script': not used by op 'exec'",
	    jb_str(b, "script", "echo"));
	REJECT_EXEC_WITH("field 'code': not used by op 'exec'", jb_str(b, "code", "1"));
}

Test(payload, rejects_wrong_source_fields_for_sh_and_python)
{
	static const char *const argv[] = { "true" };
	struct jb b;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "sh");
	jb_expect_reject(&b, -EINVAL, "field 'script': missing (op sh)", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "sh");
	jb_str(&b, "code", "print(1)");
	jb_expect_reject(&b, -EINVAL, "field 'code': not used by op 'sh'", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "python");
	jb_expect_reject(&b, -EINVAL, "field 'code': missing (op python)", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "sh");
	jb_str(&b, "script", "true");
	jb_strv(&b, "argv", argv, 1);
	jb_expect_reject(&b, -EINVAL, "field 'argv': not used by op 'sh'", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "python");
	jb_str(&b, "code", "1");
	jb_str(&b, "script", "true");
	jb_expect_reject(&b, -EINVAL, "field 'script': not used by op 'python'", "j1");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "sh");
	jb_int(&b, "script", 3);
	jb_expect_reject(&b, -EINVAL, "field 'script': expected a string", "j1");
	jb_destroy(&b);
}

Test(payload, rejects_a_stream_not_bool_and_persist_true_without_sandbox)
{
	REJECT_EXEC_WITH("field 'stream': expected true or false",
	    jb_int(b, "stream", 1));
	REJECT_EXEC_WITH("field 'persist'", jb_bool(b, "persist", true));
}

Test(payload, image_is_kept_as_given_and_round_trips)
{
	struct jb b;
	struct job *j;
	char ref[JOB_IMAGE_MAX + 1];

	memset(ref, 'x', JOB_IMAGE_MAX);
	ref[JOB_IMAGE_MAX] = '\0';
	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "sh");
	jb_str(&b, "script", "true");
	jb_str(&b, "image", ref);
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->image, ref, "1024 bytes: the bound itself");
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, rejects_image_text_that_is_no_reference)
{
	char big[JOB_IMAGE_MAX + 2];

	memset(big, 'x', JOB_IMAGE_MAX + 1);
	big[JOB_IMAGE_MAX + 1] = '\0';
	REJECT_EXEC_WITH("field 'image': longer than 1024 bytes", jb_str(b, "image", big));
	REJECT_EXEC_WITH("field 'image': empty", jb_str(b, "image", ""));
	REJECT_EXEC_WITH("field 'image': expected a string", jb_int(b, "image", 1));
	REJECT_EXEC_WITH("field 'image': byte 0x1b at offset 4: a reference is "
	    "printable ASCII without spaces", jb_str(b, "image", "oci:\x1b[2J"));
	REJECT_EXEC_WITH("field 'image': byte 0x0a at offset 4",
	    jb_str(b, "image", "host\n"));
	REJECT_EXEC_WITH("field 'image': byte 0x20", jb_str(b, "image", "oci:/a b"));
	REJECT_EXEC_WITH("field 'image': byte 0xc3", jb_str(b, "image", "caf\xc3\xa9"));
}

Test(payload, image_id_is_a_sha256_digest_and_round_trips)
{
	static const char id[] = "sha256:0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef";
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "op", "sh");
	jb_str(&b, "script", "true");
	jb_str(&b, "image", "docker://r.io/x:1");
	jb_str(&b, "image_id", id);
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->image_id, id);
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, rejects_image_id_that_is_no_digest)
{
	REJECT_EXEC_WITH("field 'image_id': expected a string", jb_int(b, "image_id", 1));
	REJECT_EXEC_WITH("field 'image_id': expected sha256: and 64 hex digits",
	    jb_str(b, "image_id", "sha256:abc"));
	REJECT_EXEC_WITH("field 'image_id': expected sha256: and 64 hex digits",
	    jb_str(b, "image_id", "sha512:0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef"));
	REJECT_EXEC_WITH("field 'image_id': expected sha256: and 64 lower-case",
	    jb_str(b, "image_id", "sha256:0123456789ABCDEF0123456789abcdef"
	    "0123456789abcdef0123456789abcdef"));
}

Test(payload, rejects_unknown_top_level_field)
{
	REJECT_EXEC_WITH("unknown field 'limts'", jb_map1_int(b, "limts", "wall_ms", 1));
	/* A non-string key. */
	REJECT_EXEC_WITH("unknown field", { b->n++; msgpack_pack_int(&b->pk, 1);
	    msgpack_pack_int(&b->pk, 2); });
}

Test(payload, rejects_other_versions)
{
	REJECT_EXEC_WITH("field 'v'", jb_int(b, "v", 2));
	REJECT_EXEC_WITH("field 'v'", jb_int(b, "v", 0));
	REJECT_EXEC_WITH("field 'v'", jb_str(b, "v", "1"));
}

Test(payload, net_unix_is_its_own_mode)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_str(&b, "net", "unix");
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->net, "unix");
	cr_expect_eq(j->net_mode, NET_UNIX);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, rejects_bad_net_priority_deadline)
{
	REJECT_EXEC_WITH("field 'net': unknown mode 'host' (this version offers none, "
	    "unix and allow)", jb_str(b, "net", "host"));
	REJECT_EXEC_WITH("field 'priority': expected an integer",
	    jb_str(b, "priority", "high"));
	REJECT_EXEC_WITH("field 'deadline_ms'", jb_int(b, "deadline_ms", -1));
	REJECT_EXEC_WITH("field 'deadline_ms'",
	    { msgpack_pack_uint64(jb_key(b, "deadline_ms"), UINT64_MAX); });
	REJECT_EXEC_WITH("field 'stdin': expected bytes", jb_int(b, "stdin", 1));
}

/* net "allow" and its list come together, bounded; encoding keeps the list. */
Test(payload, net_allow_needs_its_list_and_round_trips)
{
	static const char *const one[] = { "pypi.example:443" };
	static const char *const bad[] = { "a.example", "with space" };
	static const char *const comma[] = { "a.example,b.example" };
	static const char *const empty[] = { "" };
	struct jb jb;
	struct job *j, *back = NULL;
	struct err e = { 0 };
	char *enc = NULL;
	size_t len = 0;

	REJECT_EXEC_WITH("field 'allow': net 'allow' needs the hosts it may reach",
	    jb_str(b, "net", "allow"));
	REJECT_EXEC_WITH("field 'allow': only with net 'allow'", jb_strv(b, "allow", one, 1));
	REJECT_EXEC_WITH("field 'allow': only with net 'allow'",
	    jb_str(b, "net", "none"); jb_strv(b, "allow", one, 1));
	REJECT_EXEC_WITH("field 'allow': a pattern is a host name",
	    jb_str(b, "net", "allow"); jb_strv(b, "allow", bad, 2));
	/* A run on a sandbox may name none: the sandbox's list (sandqd's). */
	jb_init(&jb);
	jb_exec(&jb, "j1");
	jb_str(&jb, "net", "allow");
	jb_str(&jb, "sandbox", "box");
	j = jb_decode_ok(&jb);
	cr_expect_eq(j->nallow, 0);
	job_free(j);
	jb_destroy(&jb);
	REJECT_EXEC_WITH("field 'allow': a pattern is a host name",
	    jb_str(b, "net", "allow"); jb_strv(b, "allow", comma, 1));
	REJECT_EXEC_WITH("field 'allow': an empty pattern",
	    jb_str(b, "net", "allow"); jb_strv(b, "allow", empty, 1));
	REJECT_EXEC_WITH("field 'allow': expected a list", jb_str(b, "net", "allow");
	    jb_str(b, "allow", "pypi.example"));

	jb_init(&jb);
	jb_exec(&jb, "j1");
	jb_str(&jb, "net", "allow");
	jb_strv(&jb, "allow", one, 1);
	j = jb_decode_ok(&jb);
	cr_expect_eq(j->net_mode, NET_ALLOW);
	cr_assert_eq(j->nallow, 1);
	cr_expect_str_eq(j->allow[0], "pypi.example:443");
	cr_assert_eq(payload_job_encode(j, &enc, &len), 0);
	cr_assert_eq(payload_job_decode(enc, len, &back, NULL, &e), 0, "%s", e.msg);
	cr_assert_eq(back->nallow, 1);
	cr_expect_str_eq(back->allow[0], "pypi.example:443");
	job_free(back);
	job_free(j);
	free(enc);
	jb_destroy(&jb);
}

/*
 * A repeated top-level key must be refused rather than decoded twice: the
 * second "files", "env" or "labels" would otherwise replace an array whose
 * count was kept from the first (a heap overflow), and a second "stdin",
 * "cwd" or "net" would leak the first.
 */
Test(payload, rejects_repeated_top_level_field)
{
	static const char *const two[] = { "a", "b" };
	static const char *const one[] = { "c" };
	static const char *const kv2[] = { "A", "1", "B", "2" };
	static const char *const kv1[] = { "C", "3" };

	REJECT_EXEC_WITH("field 'files': given twice",
	    jb_files(b, two, 2); jb_files(b, one, 1));
	REJECT_EXEC_WITH("field 'env': given twice",
	    jb_strmap(b, "env", kv2, 2); jb_strmap(b, "env", kv1, 1));
	REJECT_EXEC_WITH("field 'labels': given twice",
	    jb_strmap(b, "labels", kv2, 2); jb_strmap(b, "labels", NULL, 0));
	REJECT_EXEC_WITH("field 'stdin': given twice",
	    jb_str(b, "stdin", "a"); jb_str(b, "stdin", "b"));
	REJECT_EXEC_WITH("field 'cwd': given twice",
	    jb_str(b, "cwd", "a"); jb_str(b, "cwd", "b"));
	REJECT_EXEC_WITH("field 'net': given twice",
	    jb_str(b, "net", "none"); jb_str(b, "net", "none"));
	REJECT_EXEC_WITH("field 'op': given twice", jb_str(b, "op", "sh"));
	REJECT_EXEC_WITH("field 'argv': given twice", jb_strv(b, "argv", one, 1));
}

Test(payload, rejects_input_that_is_not_one_map)
{
	static const uint8_t array[] = { 0x91, 0xc0 };
	static const uint8_t str[] = { 0xa1, 'x' };
	static const uint8_t junk[] = { 0xc1 };
	static const struct { const uint8_t *p; size_t n; } t[] = {
		{ array, sizeof(array) }, { str, sizeof(str) }, { junk, sizeof(junk) },
		{ array, 1 }, { array, 0 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct job *j = NULL;
		struct err e = { 0 };
		char id[JOB_ID_MAX + 1] = "stale";

		cr_expect_eq(payload_job_decode(t[i].p, t[i].n, &j, id, &e), -EBADMSG,
		    "case %zu", i);
		cr_expect_null(j);
		cr_expect_str_eq(id, "");
		cr_expect_neq(e.msg[0], '\0');
	}
}

Test(payload, decodes_with_null_idbuf)
{
	struct jb b;
	struct job *j = NULL;
	struct err e = { 0 };
	size_t len;
	const char *buf;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	buf = jb_finish(&b, &len);
	cr_expect_eq(payload_job_decode(buf, len, &j, NULL, &e), -EINVAL);
	cr_expect(strstr(e.msg, "field 'op'") != NULL);
	jb_destroy(&b);
}

/*** Sandboxes: fields of the fs.*, kv.* and sandbox.* ops ***/

/*
 * The spec's field table (/tmp/spec4.md, docs/protocol.md "Sandboxes"),
 * written out here independently of job.c's masks: uses lists what an
 * op takes besides the fields every op takes (v, id, op, tenant, priority,
 * deadline_ms), needs what it requires.
 */
static const struct op_case {
	const char *op;
	enum job_op code;
	const char *uses;
	const char *needs;
} op_cases[] = {
	{ "exec", OP_EXEC, "argv stdin env cwd limits preset files labels net "
	    "stream persist sandbox perms perm_preset image image_id sandbox_image "
	    "sandbox_workdir", "argv" },
	{ "sh", OP_SH, "script stdin env cwd limits preset files labels net "
	    "stream persist sandbox perms perm_preset image image_id sandbox_image "
	    "sandbox_workdir", "script" },
	{ "python", OP_PYTHON, "code stdin env cwd limits preset files labels net "
	    "stream persist sandbox perms perm_preset image image_id sandbox_image "
	    "sandbox_workdir", "code" },
	{ "fs.read", OP_FS_READ, "sandbox path perms perm_preset", "sandbox path" },
	{ "fs.write", OP_FS_WRITE, "sandbox path data mode parents perms perm_preset",
	    "sandbox path data" },
	{ "fs.list", OP_FS_LIST, "sandbox path recursive perms perm_preset", "sandbox" },
	{ "fs.stat", OP_FS_STAT, "sandbox path perms perm_preset", "sandbox path" },
	{ "fs.delete", OP_FS_DELETE, "sandbox path recursive perms perm_preset",
	    "sandbox path" },
	{ "kv.get", OP_KV_GET, "sandbox key", "sandbox key" },
	{ "kv.set", OP_KV_SET, "sandbox key value", "sandbox key value" },
	{ "kv.delete", OP_KV_DELETE, "sandbox key", "sandbox key" },
	{ "kv.keys", OP_KV_KEYS, "sandbox prefix", "sandbox" },
	{ "sandbox.create", OP_SANDBOX_CREATE, "sandbox files snapshot snapshot_key labels "
	    "limits preset image image_id workdir from_image_dir allow", "sandbox" },
	{ "sandbox.fork", OP_SANDBOX_FORK, "sandbox to labels", "sandbox to" },
	{ "sandbox.delete", OP_SANDBOX_DELETE, "sandbox", "sandbox" },
	{ "sandbox.export", OP_SANDBOX_EXPORT, "sandbox", "sandbox" },
	{ "sandbox.import", OP_SANDBOX_IMPORT, "sandbox snapshot labels limits preset "
	    "image image_id workdir", "sandbox snapshot" },
	{ "sandbox.history", OP_SANDBOX_HISTORY, "sandbox", "sandbox" },
	{ "sandbox.info", OP_SANDBOX_INFO, "sandbox", "sandbox" },
	{ "sandbox.list", OP_SANDBOX_LIST, "", "" },
	{ "image.pull", OP_IMAGE_PULL, "image stream", "image" },
};

/* Every field an op may be given, other than v, id, op and the common ones. */
static const char *const all_fields[] = {
	"argv", "script", "code", "stdin", "env", "cwd", "limits", "preset",
	"files", "labels", "net", "stream", "persist", "sandbox", "perms",
	"perm_preset", "path", "data", "mode", "recursive", "key", "value",
	"prefix", "to", "snapshot", "image", "image_id", "workdir", "from_image_dir",
	"sandbox_image", "sandbox_workdir", "parents", "snapshot_key",
};

#define N_OP_CASES (sizeof(op_cases) / sizeof(op_cases[0]))
#define N_ALL_FIELDS (sizeof(all_fields) / sizeof(all_fields[0]))

static const uint8_t sample_bin[] = { 0, 1, 2, 0xff };
static const char sample_db[] = "SQLite format 3";	/* 16 bytes with the NUL */
static const char sample_key[] =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
static const char sample_json[] = "{\"a\":[1,-2.5e3,null,true,\"x\\u00e9\"]}";

/* True if the space-separated list holds word w. */
static bool
has_word(const char *list, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = list; *p != '\0'; ) {
		size_t l = strcspn(p, " ");
		if (l == n && memcmp(p, w, n) == 0)
			return true;
		p += l;
		p += strspn(p, " ");
	}
	return false;
}

/* Adds field f with a valid sample value. */
static void
jb_sample(struct jb *b, const char *f)
{
	static const char *const argv[] = { "ls", "-l" };
	static const char *const env[] = { "A", "1" };
	static const char *const kv[] = { "k", "v" };
	static const char *const files[] = { "/workspace/a.txt", "hi" };
	msgpack_packer *pk;

	if (strcmp(f, "argv") == 0) {
		jb_strv(b, f, argv, 2);
	} else if (strcmp(f, "script") == 0 || strcmp(f, "code") == 0) {
		jb_str(b, f, "true");
	} else if (strcmp(f, "stdin") == 0 || strcmp(f, "data") == 0) {
		pbin(jb_key(b, f), sample_bin, sizeof(sample_bin));
	} else if (strcmp(f, "snapshot") == 0) {
		pbin(jb_key(b, f), sample_db, sizeof(sample_db));
	} else if (strcmp(f, "snapshot_key") == 0) {
		jb_str(b, f, sample_key);
	} else if (strcmp(f, "env") == 0) {
		jb_strmap(b, f, env, 1);
	} else if (strcmp(f, "labels") == 0) {
		jb_strmap(b, f, kv, 1);
	} else if (strcmp(f, "files") == 0) {
		jb_strmap(b, f, files, 1);
	} else if (strcmp(f, "cwd") == 0) {
		jb_str(b, f, "sub");
	} else if (strcmp(f, "limits") == 0) {
		jb_map1_int(b, f, "wall_ms", 1000);
	} else if (strcmp(f, "preset") == 0) {
		jb_str(b, f, "strict");
	} else if (strcmp(f, "net") == 0) {
		jb_str(b, f, "unix");
	} else if (strcmp(f, "image") == 0 || strcmp(f, "sandbox_image") == 0) {
		jb_str(b, f, "docker://R.io/x:1");
	} else if (strcmp(f, "workdir") == 0) {
		jb_str(b, f, "/srv//app/");
	} else if (strcmp(f, "sandbox_workdir") == 0) {
		jb_str(b, f, "/srv/./app");
	} else if (strcmp(f, "from_image_dir") == 0) {
		jb_str(b, f, "/testbed");
	} else if (strcmp(f, "image_id") == 0) {
		jb_str(b, f, "sha256:00112233445566778899aabbccddeeff"
		    "00112233445566778899aabbccddeeff");
	} else if (strcmp(f, "stream") == 0) {
		jb_bool(b, f, false);
	} else if (strcmp(f, "persist") == 0 || strcmp(f, "recursive") == 0 ||
	    strcmp(f, "parents") == 0) {
		jb_bool(b, f, true);
	} else if (strcmp(f, "sandbox") == 0) {
		jb_str(b, f, "sb-1");
	} else if (strcmp(f, "to") == 0) {
		jb_str(b, f, "sb.2:x");
	} else if (strcmp(f, "perms") == 0) {
		pk = jb_key(b, f);
		msgpack_pack_array(pk, 2);
		msgpack_pack_map(pk, 2);
		pstr(pk, "pattern");
		pstr(pk, "/workspace/src/**");
		pstr(pk, "level");
		pstr(pk, "read");
		msgpack_pack_map(pk, 2);
		pstr(pk, "level");
		pstr(pk, "none");
		pstr(pk, "pattern");
		pstr(pk, "**/*.pem");
	} else if (strcmp(f, "perm_preset") == 0) {
		jb_str(b, f, "development");
	} else if (strcmp(f, "path") == 0) {
		jb_str(b, f, "/workspace/dir/f.txt");
	} else if (strcmp(f, "mode") == 0) {
		jb_int(b, f, 0600);
	} else if (strcmp(f, "key") == 0) {
		jb_str(b, f, "k/1");
	} else if (strcmp(f, "value") == 0) {
		jb_str(b, f, sample_json);
	} else if (strcmp(f, "prefix") == 0) {
		jb_str(b, f, "k/");
	} else {
		cr_assert_fail("no sample for field '%s'", f);
	}
}

/*
 * Builds a job of op c with id "j1", the common fields when common is set,
 * and every field of list except those in skip (space-separated).
 */
static void
jb_op(struct jb *b, const struct op_case *c, const char *list, const char *skip,
    bool common)
{
	jb_str(b, "id", "j1");
	jb_str(b, "op", c->op);
	if (common) {
		jb_int(b, "v", 1);
		jb_str(b, "tenant", "acme");
		jb_int(b, "priority", 5);
		jb_int(b, "deadline_ms", 1700000000000);
	}
	for (size_t i = 0; i < N_ALL_FIELDS; i++)
		if (has_word(list, all_fields[i]) && !has_word(skip, all_fields[i]))
			jb_sample(b, all_fields[i]);
}

static const struct op_case *
op_case(const char *op)
{
	for (size_t i = 0; i < N_OP_CASES; i++)
		if (strcmp(op_cases[i].op, op) == 0)
			return &op_cases[i];
	cr_assert_fail("no op case '%s'", op);
	return NULL;
}

/* Decodes a job of op with the fields of list; asserts success. */
static struct job *
decode_op(const char *op, const char *list)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_op(&b, op_case(op), list, "", false);
	j = jb_decode_ok(&b);
	jb_destroy(&b);
	return j;
}

/* Expects a job of op with the fields of list plus the one added by add. */
#define REJECT_OP_WITH(opname, list, want_msg, ...)			\
	do {								\
		struct jb b_;						\
		jb_init(&b_);						\
		jb_op(&b_, op_case(opname), (list), "", false);		\
		_Pragma("GCC diagnostic push")				\
		_Pragma("GCC diagnostic ignored \"-Wshadow\"")		\
		{ struct jb *b = &b_; (void)b; __VA_ARGS__; }		\
		_Pragma("GCC diagnostic pop")				\
		jb_expect_reject(&b_, -EINVAL, (want_msg), "j1");	\
		jb_destroy(&b_);					\
	} while (0)

Test(payload, every_op_decodes_with_all_its_fields_and_round_trips)
{
	for (size_t i = 0; i < N_OP_CASES; i++) {
		const struct op_case *c = &op_cases[i];
		/* sandbox.create takes files, a snapshot (with its limits), an
		 * image's folder (with its limits) or a stored snapshot's key:
		 * four variants. */
		const char *skips[4] = {
		    "snapshot snapshot_key limits preset from_image_dir",
		    "files snapshot_key from_image_dir", "files snapshot snapshot_key",
		    "files snapshot limits preset from_image_dir" };
		int nvariants = c->code == OP_SANDBOX_CREATE ? 4 : 1;

		for (int v = 0; v < nvariants; v++) {
			struct jb b;
			struct job *j;

			jb_init(&b);
			jb_op(&b, c, c->uses, nvariants > 1 ? skips[v] : "", true);
			j = jb_decode_ok(&b);
			cr_expect_eq(j->op, c->code, "%s", c->op);
			cr_expect_str_eq(job_op_name(j->op), c->op);
			cr_expect_str_eq(j->tenant, "acme", "%s", c->op);
			cr_expect_eq(j->priority, 5);
			cr_expect_eq(j->deadline_ms, 1700000000000);
			cr_expect_eq(j->sandbox != NULL, has_word(c->uses, "sandbox"),
			    "%s", c->op);
			if (j->sandbox)
				cr_expect_str_eq(j->sandbox, "sb-1");
			cr_expect_eq(j->path != NULL, has_word(c->uses, "path"), "%s", c->op);
			if (j->path)
				cr_expect_str_eq(j->path, "/dir/f.txt", "%s", c->op);
			cr_expect_eq(j->nperms, has_word(c->uses, "perms") ? 2u : 0u);
			if (j->nperms == 2) {
				cr_expect_str_eq(j->perms[0].pattern, "/src/**");
				cr_expect_eq(j->perms[0].level, PERM_READ);
				cr_expect_str_eq(j->perms[1].pattern, "**/*.pem");
				cr_expect_eq(j->perms[1].level, PERM_NONE);
				cr_expect_str_eq(j->perm_preset, "development");
			}
			cr_expect_eq(j->image != NULL, has_word(c->uses, "image"));
			cr_expect_eq(j->image_id != NULL, has_word(c->uses, "image_id"));
			if (j->image)
				cr_expect_str_eq(j->image, "docker://R.io/x:1", "as given");
			cr_expect_eq(j->sandbox_image != NULL,
			    has_word(c->uses, "sandbox_image"));
			if (j->sandbox_workdir)
				cr_expect_str_eq(j->sandbox_workdir, "/srv/app");
			cr_expect_eq(j->workdir != NULL, has_word(c->uses, "workdir"));
			if (j->workdir)
				cr_expect_str_eq(j->workdir, "/srv/app", "normalised");
			cr_expect_eq(j->from_image_dir != NULL,
			    has_word(c->uses, "from_image_dir") && v == 2);
			cr_expect_eq(j->recursive, has_word(c->uses, "recursive"));
			cr_expect_eq(j->parents, has_word(c->uses, "parents"));
			cr_expect_eq(j->key != NULL, has_word(c->uses, "key"));
			if (j->key)
				cr_expect_str_eq(j->key, "k/1");
			cr_expect_eq(j->value != NULL, has_word(c->uses, "value"));
			if (j->value)
				cr_expect_str_eq(j->value, sample_json);
			cr_expect_eq(j->prefix != NULL, has_word(c->uses, "prefix"));
			if (j->prefix)
				cr_expect_str_eq(j->prefix, "k/");
			cr_expect_eq(j->to != NULL, has_word(c->uses, "to"));
			if (j->to)
				cr_expect_str_eq(j->to, "sb.2:x");
			cr_expect_eq(j->data != NULL, has_word(c->uses, "data"));
			if (j->data) {
				cr_assert_eq(j->data_len, sizeof(sample_bin));
				cr_expect_arr_eq(j->data, sample_bin, sizeof(sample_bin));
				cr_expect_eq(j->mode, 0600);
			}
			cr_expect_eq(j->snapshot_key != NULL,
			    has_word(c->uses, "snapshot_key") && v == 3);
			if (j->snapshot_key)
				cr_expect_str_eq(j->snapshot_key, sample_key);
			if (j->snapshot) {
				cr_assert_eq(j->snapshot_len, sizeof(sample_db));
				cr_expect_arr_eq(j->snapshot, sample_db, sizeof(sample_db));
			}
			if (JOB_OP_RUNS(j->op))
				cr_expect(j->persist, "%s", c->op);
			expect_job_round_trip(j);
			job_free(j);
			jb_destroy(&b);
		}
	}
}

Test(payload, minimal_job_of_every_op_round_trips)
{
	for (size_t i = 0; i < N_OP_CASES; i++) {
		struct job *j = decode_op(op_cases[i].op, op_cases[i].needs);

		cr_expect_eq(j->op, op_cases[i].code);
		cr_expect_null(j->tenant);
		cr_expect_null(j->perms);
		cr_expect_null(j->perm_preset);
		expect_job_round_trip(j);
		job_free(j);
	}
}

Test(payload, rejects_each_missing_required_field)
{
	for (size_t i = 0; i < N_OP_CASES; i++) {
		const struct op_case *c = &op_cases[i];

		for (size_t f = 0; f < N_ALL_FIELDS; f++) {
			struct jb b;
			char skip[64], want[96];

			if (!has_word(c->needs, all_fields[f]))
				continue;
			/* Everything else the op takes, but not this field. */
			snprintf(skip, sizeof(skip), "%s%s", all_fields[f],
			    c->code == OP_SANDBOX_CREATE ? " snapshot from_image_dir" : "");
			snprintf(want, sizeof(want), "field '%s': missing (op %s)",
			    all_fields[f], c->op);
			jb_init(&b);
			jb_op(&b, c, c->uses, skip, true);
			jb_expect_reject(&b, -EINVAL, want, "j1");
			jb_destroy(&b);
		}
	}
}

Test(payload, rejects_every_field_an_op_does_not_use)
{
	size_t tried = 0;

	for (size_t i = 0; i < N_OP_CASES; i++) {
		const struct op_case *c = &op_cases[i];

		for (size_t f = 0; f < N_ALL_FIELDS; f++) {
			struct jb b;
			char want[96];

			if (has_word(c->uses, all_fields[f]))
				continue;
			snprintf(want, sizeof(want), "field '%s': not used by op '%s'",
			    all_fields[f], c->op);
			jb_init(&b);
			jb_op(&b, c, c->needs, "", true);
			jb_sample(&b, all_fields[f]);
			jb_expect_reject(&b, -EINVAL, want, "j1");
			jb_destroy(&b);
			tried++;
		}
	}
	/* 3 runs x 10 + fs 5 ops x 20-21 + kv 4 x 22-23 + sandbox 8 x 21-25. */
	cr_expect_gt(tried, 300);
}

Test(payload, rejects_unknown_op_and_image_off_runs)
{
	REJECT_OP_WITH("sandbox.list", "", "field 'image': not used by op 'sandbox.list'",
	    jb_str(b, "image", "alpine"));
	{
		struct jb b;

		jb_init(&b);
		jb_str(&b, "id", "j1");
		jb_str(&b, "op", "fs.move");
		jb_expect_reject(&b, -EINVAL, "field 'op': unknown op 'fs.move'", "j1");
		jb_destroy(&b);
	}
}

/*
 * An import's limits bound the tree it may store (docs/protocol.md
 * "Sandboxes"): sandbox.import and sandbox.create with a snapshot take
 * them; a create without one has nothing they could bound.
 */
Test(payload, imports_take_limits_and_a_create_only_with_a_snapshot)
{
	struct job *j = decode_op("sandbox.import", "sandbox snapshot limits preset");

	cr_expect(JOB_HAS_LIMITS(j));
	cr_expect_gt(j->limits.wall_ms, 0);
	cr_expect_neq(j->preset, PRESET_DEFAULT);
	job_free(j);
	j = decode_op("sandbox.create", "sandbox snapshot limits");
	cr_expect(JOB_HAS_LIMITS(j));
	job_free(j);
	j = decode_op("sandbox.create", "sandbox files");
	cr_expect_not(JOB_HAS_LIMITS(j), "nothing imported, nothing bounded");
	job_free(j);
	REJECT_OP_WITH("sandbox.create", "sandbox files limits",
	    "field 'limits': used only with 'snapshot' or 'from_image_dir' (op "
	    "sandbox.create)", (void)0);
	REJECT_OP_WITH("sandbox.create", "sandbox preset",
	    "field 'preset': used only with 'snapshot' or 'from_image_dir' (op "
	    "sandbox.create)", (void)0);
	j = decode_op("sandbox.create", "sandbox image from_image_dir limits");
	cr_expect(JOB_HAS_LIMITS(j), "a seed is bounded as an import");
	job_free(j);
}

/*** Sandboxes on images (docs/images.md) ***/

/*
 * A create names its image, where the files are (workdir) and the image's
 * folder that becomes version 1; workdir defaults to that folder, and a
 * workdir of /workspace is the default itself.
 */
Test(payload, sandbox_create_takes_image_workdir_and_from_image_dir)
{
	struct job *j = decode_op("sandbox.create", "sandbox image from_image_dir");

	cr_expect_str_eq(j->from_image_dir, "/testbed");
	cr_expect_str_eq(j->workdir, "/testbed", "defaults to the folder");
	cr_expect(JOB_HAS_IMAGE(j));
	expect_job_round_trip(j);
	job_free(j);
	j = decode_op("sandbox.create", "sandbox image workdir");
	cr_expect_str_eq(j->workdir, "/srv/app");
	cr_expect_null(j->from_image_dir);
	expect_job_round_trip(j);
	job_free(j);
	j = decode_op("sandbox.create", "sandbox files");
	cr_expect_not(JOB_HAS_IMAGE(j), "no image: none recorded");
	job_free(j);
	{
		struct jb b;

		/* --workdir /workspace with a folder: the files stay at /workspace. */
		jb_init(&b);
		jb_op(&b, op_case("sandbox.create"), "sandbox image from_image_dir", "",
		    false);
		jb_str(&b, "workdir", "/workspace/");
		j = jb_decode_ok(&b);
		cr_expect_null(j->workdir);
		cr_expect_str_eq(j->from_image_dir, "/testbed");
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
}

/* The folders' rules, each refusal naming the field and the path. */
Test(payload, rejects_workdirs_and_image_dirs_sandq_cannot_use)
{
	static const struct { const char *path, *msg; } bad[] = {
		{ "testbed", "field 'workdir': 'testbed' is not an absolute path" },
		{ "", "field 'workdir': '' is not an absolute path" },
		{ "/", "field 'workdir': must not be the root '/'" },
		{ "//./", "field 'workdir': must not be the root '/'" },
		{ "/a/../etc", "field 'workdir': path '/a/../etc' must not contain '..'" },
		{ "/proc", "field 'workdir': '/proc' is /proc, which sandq mounts itself" },
		{ "/tmp/x", "field 'workdir': '/tmp/x' is below /tmp, which sandq mounts "
		    "itself" },
		{ "/etc/app", "field 'workdir': '/etc/app' is below /etc" },
		{ "/dev", "field 'workdir': '/dev' is /dev" },
		{ "/sys/x", "field 'workdir': '/sys/x' is below /sys" },
		{ "/workspace/sub", "field 'workdir': '/workspace/sub' is below "
		    "/workspace" },
		{ "/a\nb", "field 'workdir': byte 0x0a at offset 2: a folder is "
		    "printable ASCII" },
		{ "/caf\xc3\xa9", "field 'workdir': byte 0xc3 at offset 4" },
		{ "/a,b", "field 'workdir': ',' at offset 2: a folder may not hold ',', "
		    "':' or '\\'" },
		{ "/a:b", "field 'workdir': ':' at offset 2" },
	};
	char big[JOB_ROOT_DIR_MAX + 2], deep[200];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		REJECT_OP_WITH("sandbox.create", "sandbox image", bad[i].msg,
		    jb_str(b, "workdir", bad[i].path));
	REJECT_OP_WITH("sandbox.create", "sandbox image", "field 'workdir': expected "
	    "a string", jb_int(b, "workdir", 1));
	memset(big, 'a', sizeof(big) - 1);
	big[0] = '/';
	big[sizeof(big) - 1] = '\0';
	REJECT_OP_WITH("sandbox.create", "sandbox image", "field 'workdir': longer "
	    "than 1024 bytes", jb_str(b, "workdir", big));
	deep[0] = '\0';
	for (int k = 0; k < 33; k++)
		strcat(deep, "/d");
	REJECT_OP_WITH("sandbox.create", "sandbox image", "field 'workdir': more "
	    "than 32 components", jb_str(b, "workdir", deep));
	/* from_image_dir: the same rules, and /workspace is no folder of an image. */
	REJECT_OP_WITH("sandbox.create", "sandbox image", "field 'from_image_dir': "
	    "'/workspace' is /workspace, which sandq mounts itself",
	    jb_str(b, "from_image_dir", "/workspace"));
	REJECT_OP_WITH("sandbox.create", "sandbox image", "field 'from_image_dir': "
	    "'/proc/1' is below /proc", jb_str(b, "from_image_dir", "/proc/1"));
	REJECT_OP_WITH("sandbox.create", "sandbox image", "field 'from_image_dir': "
	    "must not be the root", jb_str(b, "from_image_dir", "/"));
}

/* Version 1 comes from one place, and an image's folder needs an image. */
Test(payload, rejects_from_image_dir_without_an_image_or_with_other_seeds)
{
	REJECT_OP_WITH("sandbox.create", "sandbox from_image_dir",
	    "field 'from_image_dir': needs 'image' (the image whose folder seeds the "
	    "sandbox)", (void)0);
	REJECT_OP_WITH("sandbox.create", "sandbox from_image_dir",
	    "field 'from_image_dir': needs an OCI image, not 'host'",
	    jb_str(b, "image", "host"));
	REJECT_OP_WITH("sandbox.create", "sandbox image from_image_dir files",
	    "field 'from_image_dir': not together with 'files' (op sandbox.create)",
	    (void)0);
	REJECT_OP_WITH("sandbox.create", "sandbox image from_image_dir snapshot",
	    "field 'from_image_dir': not together with 'snapshot' (op sandbox.create)",
	    (void)0);
	REJECT_OP_WITH("sandbox.import", "sandbox snapshot",
	    "field 'from_image_dir': not used by op 'sandbox.import'",
	    jb_str(b, "from_image_dir", "/testbed"));
	REJECT_OP_WITH("sandbox.fork", "sandbox to", "field 'workdir': not used by "
	    "op 'sandbox.fork'", jb_str(b, "workdir", "/testbed"));
	REJECT_EXEC_WITH("field 'workdir': not used by op 'exec'",
	    jb_str(b, "workdir", "/testbed"));
}

/* What sandqd tells the worker about a run's sandbox round-trips. */
Test(payload, sandbox_image_and_workdir_of_a_run_round_trip)
{
	struct job *j = decode_op("sh", "script sandbox sandbox_image sandbox_workdir");

	cr_expect_str_eq(j->sandbox_image, "docker://R.io/x:1");
	cr_expect_str_eq(j->sandbox_workdir, "/srv/app");
	expect_job_round_trip(j);
	job_free(j);
	REJECT_EXEC_WITH("field 'sandbox_image': byte 0x20",
	    jb_str(b, "sandbox_image", "a b"));
	REJECT_EXEC_WITH("field 'sandbox_workdir': '/tmp' is /tmp",
	    jb_str(b, "sandbox_workdir", "/tmp"));
}

Test(payload, sandbox_id_rules_for_sandbox_and_to)
{
	static const char *const good[] = { "a", "sb-1", "A.b_c:d-9", "...", ".a", "a.." };
	static const char *const bad[] = { "", ".", "..", "a/b", "a b", "é", "{x}", "a\n" };
	char longid[JOB_SANDBOX_ID_MAX + 2];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("sandbox.fork"), "", "", false);
		jb_str(&b, "sandbox", good[i]);
		jb_str(&b, "to", good[i]);
		j = jb_decode_ok(&b);
		cr_expect_str_eq(j->sandbox, good[i]);
		cr_expect_str_eq(j->to, good[i]);
		job_free(j);
		jb_destroy(&b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		REJECT_OP_WITH("sandbox.info", "", "field 'sandbox': expected 1 to 128",
		    jb_str(b, "sandbox", bad[i]));
		REJECT_OP_WITH("sandbox.fork", "sandbox", "field 'to': expected 1 to 128",
		    jb_str(b, "to", bad[i]));
		REJECT_OP_WITH("exec", "argv", "field 'sandbox': expected",
		    jb_str(b, "sandbox", bad[i]));
	}
	memset(longid, 'x', sizeof(longid));
	longid[JOB_SANDBOX_ID_MAX] = '\0';
	{
		struct job *j;
		struct jb b;

		jb_init(&b);
		jb_op(&b, op_case("sandbox.info"), "", "", false);
		jb_str(&b, "sandbox", longid);
		j = jb_decode_ok(&b);
		cr_expect_eq(strlen(j->sandbox), JOB_SANDBOX_ID_MAX);
		job_free(j);
		jb_destroy(&b);
	}
	longid[JOB_SANDBOX_ID_MAX] = 'x';
	longid[JOB_SANDBOX_ID_MAX + 1] = '\0';
	REJECT_OP_WITH("sandbox.info", "", "field 'sandbox'",
	    jb_str(b, "sandbox", longid));
	REJECT_OP_WITH("sandbox.info", "", "field 'sandbox': expected",
	    jb_int(b, "sandbox", 7));
}

Test(payload, persist_defaults_to_true_on_a_sandbox_and_needs_one)
{
	struct job *j;
	struct jb b;

	/* No sandbox: a throw-away sandbox, nothing to commit. */
	j = decode_op("sh", "script");
	cr_expect_null(j->sandbox);
	cr_expect_not(j->persist);
	job_free(j);

	/* A sandbox: persist unless told otherwise. */
	j = decode_op("exec", "argv sandbox");
	cr_expect_str_eq(j->sandbox, "sb-1");
	cr_expect(j->persist);
	expect_job_round_trip(j);
	job_free(j);

	jb_init(&b);
	jb_op(&b, op_case("python"), "code sandbox", "", false);
	jb_bool(&b, "persist", false);
	j = jb_decode_ok(&b);
	cr_expect_not(j->persist);
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);

	/* persist false without a sandbox is the old meaning: fine. */
	jb_init(&b);
	jb_op(&b, op_case("exec"), "argv", "", false);
	jb_bool(&b, "persist", false);
	j = jb_decode_ok(&b);
	cr_expect_not(j->persist);
	job_free(j);
	jb_destroy(&b);

	REJECT_OP_WITH("exec", "argv", "field 'persist': needs 'sandbox'",
	    jb_bool(b, "persist", true));
	REJECT_OP_WITH("sh", "script", "field 'persist': expected true or false",
	    jb_str(b, "persist", "yes"));
	REJECT_OP_WITH("fs.read", "sandbox path", "field 'persist': not used by op 'fs.read'",
	    jb_bool(b, "persist", false));
}

Test(payload, tenant_follows_the_tenant_name_rules)
{
	static const char *const good[] = { "a", "acme_1-X", "default" };
	static const char *const bad[] = { "", "a.b", "a:b", "a b", "{t}", "é", "a/b" };
	char name[JOB_TENANT_MAX + 2];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("kv.keys"), "sandbox", "", false);
		jb_str(&b, "tenant", good[i]);
		j = jb_decode_ok(&b);
		cr_expect_str_eq(j->tenant, good[i]);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		REJECT_OP_WITH("kv.keys", "sandbox", "field 'tenant': expected 1 to 64",
		    jb_str(b, "tenant", bad[i]));
	memset(name, 't', sizeof(name));
	name[JOB_TENANT_MAX] = '\0';
	{
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("sandbox.list"), "", "", false);
		jb_str(&b, "tenant", name);
		j = jb_decode_ok(&b);
		cr_expect_eq(strlen(j->tenant), JOB_TENANT_MAX);
		job_free(j);
		jb_destroy(&b);
	}
	name[JOB_TENANT_MAX] = 't';
	name[JOB_TENANT_MAX + 1] = '\0';
	REJECT_OP_WITH("sandbox.list", "", "field 'tenant'", jb_str(b, "tenant", name));
	REJECT_OP_WITH("sandbox.list", "", "field 'tenant'", jb_int(b, "tenant", 1));
}

/* Decodes op with path given as in; returns the normalised path (caller frees). */
static char *
decoded_path(const char *op, const char *in)
{
	struct jb b;
	struct job *j;
	char *out;

	jb_init(&b);
	jb_op(&b, op_case(op), "sandbox", "", false);
	if (strcmp(op, "fs.write") == 0)
		jb_sample(&b, "data");
	if (in != NULL)
		jb_str(&b, "path", in);
	j = jb_decode_ok(&b);
	out = j->path ? xdup(j->path) : NULL;
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);
	return out;
}

Test(payload, fs_paths_are_absolute_without_the_workspace_alias)
{
	static const struct { const char *op, *in, *want; } t[] = {
		{ "fs.read", "/workspace/a/b", "/a/b" },
		{ "fs.read", "workspace/a", "/a" },
		{ "fs.read", "a//b/./", "/a/b" },
		{ "fs.stat", "/a/b", "/a/b" },
		{ "fs.write", "x.txt", "/x.txt" },
		{ "fs.delete", "/workspace/workspace", "/workspace" },
		{ "fs.read", "/workspacefoo/x", "/workspacefoo/x" },
		{ "fs.list", "/", "/" },
		{ "fs.list", "/workspace", "/" },
		{ "fs.list", "/workspace/", "/" },
		{ "fs.list", ".", "/" },
		{ "fs.list", "//./", "/" },
		{ "fs.list", "/workspace/src", "/src" },
		{ "fs.list", "/workspace/workspace/src", "/workspace/src" },
		{ "fs.read", "./workspace/a", "/a" },
		{ "fs.read", "workspace/workspace/a", "/workspace/a" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char *p = decoded_path(t[i].op, t[i].in);

		cr_expect_str_eq(p, t[i].want, "%s '%s'", t[i].op, t[i].in);
		free(p);
	}
	/* fs.list lists the root by default. */
	{
		char *p = decoded_path("fs.list", NULL);

		cr_expect_str_eq(p, "/");
		free(p);
	}
}

Test(payload, rejects_bad_fs_paths)
{
	static const char *const root[] = { "/", "/workspace", "/workspace/", ".", "workspace" };
	static const char *const bad[][2] = {
		{ "", "path is empty" }, { "../x", "'..'" }, { "/a/../b", "'..'" },
		{ "a\nb", "control" },
	};
	static const char *const ops[] = { "fs.read", "fs.stat", "fs.delete" };

	for (size_t o = 0; o < 3; o++) {
		for (size_t i = 0; i < sizeof(root) / sizeof(root[0]); i++)
			REJECT_OP_WITH(ops[o], "sandbox", "field 'path': must not be the sandbox root",
			    jb_str(b, "path", root[i]));
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			REJECT_OP_WITH(ops[o], "sandbox", bad[i][1],
			    jb_str(b, "path", bad[i][0]));
	}
	REJECT_OP_WITH("fs.write", "sandbox data", "field 'path': must not be the sandbox root",
	    jb_str(b, "path", "/"));
	REJECT_OP_WITH("fs.list", "sandbox", "field 'path': path '..' must not contain '..'",
	    jb_str(b, "path", ".."));
	REJECT_OP_WITH("fs.list", "sandbox", "field 'path': contains a NUL", {
	    msgpack_packer *pk = jb_key(b, "path");
	    msgpack_pack_str(pk, 3);
	    msgpack_pack_str_body(pk, "a\0b", 3); });
	REJECT_OP_WITH("fs.list", "sandbox", "field 'path': expected a string",
	    jb_int(b, "path", 1));
	{
		char *longp = malloc(JOB_PATH_MAX + 2);

		cr_assert_not_null(longp);
		for (size_t i = 0; i < JOB_PATH_MAX + 1; i++)
			longp[i] = (i % 2) ? '/' : 'a';
		longp[JOB_PATH_MAX + 1] = '\0';
		REJECT_OP_WITH("fs.read", "sandbox", "field 'path': path longer than",
		    jb_str(b, "path", longp));
		free(longp);
	}
}

/* Packs perms: a single rule {pattern, level}. */
static void
jb_rule(struct jb *b, const char *pattern, const char *level)
{
	msgpack_packer *pk = jb_key(b, "perms");

	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 2);
	pstr(pk, "pattern");
	pstr(pk, pattern);
	pstr(pk, "level");
	pstr(pk, level);
}

Test(payload, perms_patterns_drop_only_the_absolute_workspace_alias)
{
	static const struct { const char *in, *want; } t[] = {
		{ "/workspace/src/**", "/src/**" }, { "/workspace", "/" },
		{ "/workspace/", "/" }, { "/workspacefoo/x", "/workspacefoo/x" },
		{ "workspace/x", "workspace/x" }, { "**/secrets/**", "**/secrets/**" },
		{ "*.pem", "*.pem" }, { "/a/b", "/a/b" }, { "src", "src" },
		/* One alias only: a folder named workspace stays addressable. */
		{ "/workspace/workspace/x", "/workspace/x" },
		{ "/workspace/workspace", "/workspace" },
	};
	static const char *const levels[] = { "none", "view", "read", "write" };

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("fs.list"), "sandbox", "", false);
		jb_rule(&b, t[i].in, levels[i % 4]);
		j = jb_decode_ok(&b);
		cr_assert_eq(j->nperms, 1);
		cr_expect_str_eq(j->perms[0].pattern, t[i].want, "'%s'", t[i].in);
		cr_expect_str_eq(perm_level_name(j->perms[0].level), levels[i % 4]);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
}

/*
 * The wire keeps the level's name: each of the four decodes to its enum and
 * encodes back as the same str, so docs/protocol.md and older readers see
 * what they saw when the struct held the string.
 */
Test(payload, perm_levels_decode_to_the_enum_and_encode_as_their_names)
{
	static const struct { const char *name; enum perm_level level; } t[] = {
		{ "none", PERM_NONE }, { "view", PERM_VIEW },
		{ "read", PERM_READ }, { "write", PERM_WRITE },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct jb b;
		struct job *j;
		msgpack_unpacked up;
		const msgpack_object *perms = NULL, *lv = NULL;
		char *enc = NULL;
		size_t enclen = 0, off = 0;

		jb_init(&b);
		jb_op(&b, op_case("fs.list"), "sandbox", "", false);
		jb_rule(&b, "/src", t[i].name);
		j = jb_decode_ok(&b);
		cr_assert_eq(j->nperms, 1);
		cr_expect_eq(j->perms[0].level, t[i].level, "%s", t[i].name);
		cr_expect_str_eq(perm_level_name(j->perms[0].level), t[i].name);
		cr_assert_eq(payload_job_encode(j, &enc, &enclen), 0);
		msgpack_unpacked_init(&up);
		cr_assert_eq(msgpack_unpack_next(&up, enc, enclen, &off),
		    MSGPACK_UNPACK_SUCCESS);
		cr_assert_eq(up.data.type, MSGPACK_OBJECT_MAP);
		for (uint32_t k = 0; k < up.data.via.map.size; k++) {
			const msgpack_object_kv *kv = &up.data.via.map.ptr[k];
			if (kv->key.via.str.size == 5 &&
			    memcmp(kv->key.via.str.ptr, "perms", 5) == 0)
				perms = &kv->val;
		}
		cr_assert_not_null(perms);
		cr_assert_eq(perms->type, MSGPACK_OBJECT_ARRAY);
		cr_assert_eq(perms->via.array.size, 1);
		cr_assert_eq(perms->via.array.ptr[0].type, MSGPACK_OBJECT_MAP);
		for (uint32_t k = 0; k < perms->via.array.ptr[0].via.map.size; k++) {
			const msgpack_object_kv *kv = &perms->via.array.ptr[0].via.map.ptr[k];
			if (kv->key.via.str.size == 5 &&
			    memcmp(kv->key.via.str.ptr, "level", 5) == 0)
				lv = &kv->val;
		}
		cr_assert_not_null(lv);
		cr_expect_eq(lv->type, MSGPACK_OBJECT_STR, "%s", t[i].name);
		cr_expect_eq(lv->via.str.size, strlen(t[i].name));
		cr_expect_eq(memcmp(lv->via.str.ptr, t[i].name, strlen(t[i].name)), 0,
		    "%s", t[i].name);
		msgpack_unpacked_destroy(&up);
		free(enc);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
}

/*
 * An unknown level is the decoder's to refuse, naming the rule, so no job
 * with one reaches the dispatcher's checks, the worker or the sandbox.
 */
Test(payload, unknown_perm_level_is_refused_at_decode_naming_the_rule)
{
	static const char *const bad[] = {
		"admin", "Read", "WRITE", "", "writ", "write ", " none", "viewer", "rw",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		REJECT_OP_WITH("sh", "script", "field 'perms[1].level': expected none, "
		    "view, read or write", {
		    msgpack_packer *pk = jb_key(b, "perms");
		    msgpack_pack_array(pk, 2);
		    msgpack_pack_map(pk, 2);
		    pstr(pk, "pattern");
		    pstr(pk, "/ok");
		    pstr(pk, "level");
		    pstr(pk, "read");
		    msgpack_pack_map(pk, 2);
		    pstr(pk, "pattern");
		    pstr(pk, "/bad");
		    pstr(pk, "level");
		    pstr(pk, bad[i]); });
	/* A NUL inside the name is not a shorter name. */
	REJECT_OP_WITH("fs.list", "sandbox", "field 'perms[0].level': expected none, "
	    "view, read or write", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 2);
	    pstr(pk, "pattern");
	    pstr(pk, "/a");
	    pstr(pk, "level");
	    msgpack_pack_str(pk, 6);
	    msgpack_pack_str_body(pk, "read\0x", 6); });
	REJECT_OP_WITH("fs.list", "sandbox", "field 'perms[0].level': expected a string",
	    {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 2);
	    pstr(pk, "pattern");
	    pstr(pk, "/a");
	    pstr(pk, "level");
	    msgpack_pack_int(pk, PERM_WRITE); });
}

Test(payload, perm_preset_takes_the_six_presets)
{
	static const char *const good[] = {
		"agent-edit", "agent-safe", "read-only", "full-access",
		"development", "view-only",
	};
	static const char *const bad[] = { "strict", "default", "Agent-safe", "", "agent-safe " };

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("sh"), "script sandbox", "", false);
		jb_str(&b, "perm_preset", good[i]);
		j = jb_decode_ok(&b);
		cr_expect_str_eq(j->perm_preset, good[i]);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		REJECT_OP_WITH("fs.read", "sandbox path",
		    "field 'perm_preset': expected agent-edit, agent-safe, read-only",
		    jb_str(b, "perm_preset", bad[i]));
	REJECT_OP_WITH("fs.read", "sandbox path", "field 'perm_preset': expected a string",
	    jb_int(b, "perm_preset", 1));
}

Test(payload, rejects_bad_perms)
{
	char *longpat = malloc(JOB_PATTERN_MAX + 2);

	cr_assert_not_null(longpat);
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].level': expected none, view, read or write",
	    jb_rule(b, "/a", "admin"));
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].level'",
	    jb_rule(b, "/a", "Read"));
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].pattern': must not be empty",
	    jb_rule(b, "", "read"));
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].pattern': contains a NUL or control",
	    jb_rule(b, "a\tb", "read"));
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].pattern': contains a NUL or control",
	    jb_rule(b, "a\x7f", "read"));
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].pattern': contains a NUL", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 2);
	    pstr(pk, "pattern");
	    msgpack_pack_str(pk, 3);
	    msgpack_pack_str_body(pk, "a\0b", 3);
	    pstr(pk, "level");
	    pstr(pk, "read"); });
	/* JOB_PATTERN_MAX bytes are fine, one more is not. */
	memset(longpat, 'p', JOB_PATTERN_MAX + 1);
	longpat[JOB_PATTERN_MAX] = '\0';
	{
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("fs.stat"), "sandbox path", "", false);
		jb_rule(&b, longpat, "view");
		j = jb_decode_ok(&b);
		cr_expect_eq(strlen(j->perms[0].pattern), JOB_PATTERN_MAX);
		job_free(j);
		jb_destroy(&b);
	}
	longpat[JOB_PATTERN_MAX] = 'p';
	longpat[JOB_PATTERN_MAX + 1] = '\0';
	REJECT_OP_WITH("fs.stat", "sandbox path", "field 'perms[0].pattern': longer than 4096",
	    jb_rule(b, longpat, "view"));
	free(longpat);
	REJECT_OP_WITH("exec", "argv", "field 'perms': expected an array",
	    jb_str(b, "perms", "/a=read"));
	REJECT_OP_WITH("exec", "argv", "field 'perms[0]': expected a map", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    pstr(pk, "/a=read"); });
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].level': missing", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 1);
	    pstr(pk, "pattern");
	    pstr(pk, "/a"); });
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].pattern': missing", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 1);
	    pstr(pk, "level");
	    pstr(pk, "read"); });
	REJECT_OP_WITH("exec", "argv", "field 'perms[0]': unknown key 'glob'", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 3);
	    pstr(pk, "pattern");
	    pstr(pk, "/a");
	    pstr(pk, "level");
	    pstr(pk, "read");
	    pstr(pk, "glob");
	    pstr(pk, "x"); });
	REJECT_OP_WITH("exec", "argv", "field 'perms[0].level': given twice", {
	    msgpack_packer *pk = jb_key(b, "perms");
	    msgpack_pack_array(pk, 1);
	    msgpack_pack_map(pk, 3);
	    pstr(pk, "pattern");
	    pstr(pk, "/a");
	    pstr(pk, "level");
	    pstr(pk, "read");
	    pstr(pk, "level");
	    pstr(pk, "write"); });
	/* JOB_PERMS_MAX rules are fine, one more is not. */
	for (int extra = 0; extra <= 1; extra++) {
		struct jb b;
		msgpack_packer *pk;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("exec"), "argv", "", false);
		pk = jb_key(&b, "perms");
		msgpack_pack_array(pk, JOB_PERMS_MAX + extra);
		for (int i = 0; i < JOB_PERMS_MAX + extra; i++) {
			msgpack_pack_map(pk, 2);
			pstr(pk, "pattern");
			pstr(pk, "/x/**");
			pstr(pk, "level");
			pstr(pk, "write");
		}
		if (extra) {
			jb_expect_reject(&b, -EINVAL, "field 'perms': more than 256 rules", "j1");
		} else {
			j = jb_decode_ok(&b);
			cr_expect_eq(j->nperms, JOB_PERMS_MAX);
			expect_job_round_trip(j);
			job_free(j);
		}
		jb_destroy(&b);
	}
	/* An empty list is a list: given, and kept. */
	{
		struct jb b;
		struct job *j;

		jb_init(&b);
		jb_op(&b, op_case("exec"), "argv", "", false);
		msgpack_pack_array(jb_key(&b, "perms"), 0);
		j = jb_decode_ok(&b);
		cr_expect_not_null(j->perms);
		cr_expect_eq(j->nperms, 0);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
}

/* A str or bin of n bytes of c. */
static void
jb_big(struct jb *b, const char *k, size_t n, bool bin, char c)
{
	char *p = malloc(n ? n : 1);
	msgpack_packer *pk = jb_key(b, k);

	cr_assert_not_null(p);
	memset(p, c, n);
	if (bin) {
		msgpack_pack_bin(pk, n);
		msgpack_pack_bin_body(pk, p, n);
	} else {
		msgpack_pack_str(pk, n);
		msgpack_pack_str_body(pk, p, n);
	}
	free(p);
}

Test(payload, rejects_values_just_over_their_limits)
{
	REJECT_OP_WITH("fs.write", "sandbox path", "field 'data': longer than 67108864",
	    jb_big(b, "data", JOB_DATA_MAX + 1, true, 'd'));
	REJECT_OP_WITH("sandbox.import", "sandbox", "field 'snapshot': longer than 134217728",
	    jb_big(b, "snapshot", JOB_SNAPSHOT_MAX + 1, true, 's'));
	REJECT_OP_WITH("sandbox.create", "sandbox", "field 'snapshot': longer than",
	    jb_big(b, "snapshot", JOB_SNAPSHOT_MAX + 1, true, 's'));
	REJECT_OP_WITH("kv.get", "sandbox", "field 'key': longer than 1024",
	    jb_big(b, "key", JOB_KV_KEY_MAX + 1, false, 'k'));
	REJECT_OP_WITH("kv.keys", "sandbox", "field 'prefix': longer than 1024",
	    jb_big(b, "prefix", JOB_KV_KEY_MAX + 1, false, 'k'));
	/* A JSON number one byte too long. */
	REJECT_OP_WITH("kv.set", "sandbox key", "field 'value': longer than 1048576",
	    jb_big(b, "value", JOB_KV_VALUE_MAX + 1, false, '7'));
}

Test(payload, accepts_values_at_their_limits)
{
	struct jb b;
	struct job *j;

	jb_init(&b);
	jb_op(&b, op_case("fs.write"), "sandbox path", "", false);
	jb_big(&b, "data", JOB_DATA_MAX, true, 'd');
	j = jb_decode_ok(&b);
	cr_expect_eq(j->data_len, JOB_DATA_MAX);
	job_free(j);
	jb_destroy(&b);

	jb_init(&b);
	jb_op(&b, op_case("sandbox.import"), "sandbox", "", false);
	jb_big(&b, "snapshot", JOB_SNAPSHOT_MAX, true, 's');
	j = jb_decode_ok(&b);
	cr_expect_eq(j->snapshot_len, JOB_SNAPSHOT_MAX);
	job_free(j);
	jb_destroy(&b);

	jb_init(&b);
	jb_op(&b, op_case("kv.set"), "sandbox", "", false);
	jb_big(&b, "key", JOB_KV_KEY_MAX, false, 'k');
	jb_big(&b, "value", JOB_KV_VALUE_MAX, false, '7');
	j = jb_decode_ok(&b);
	cr_expect_eq(strlen(j->key), JOB_KV_KEY_MAX);
	cr_expect_eq(strlen(j->value), JOB_KV_VALUE_MAX);
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, fs_write_data_and_mode)
{
	struct job *j;
	struct jb b;

	/* Empty content is content; an absent mode is 0644. */
	jb_init(&b);
	jb_op(&b, op_case("fs.write"), "sandbox path", "", false);
	jb_str(&b, "data", "");
	j = jb_decode_ok(&b);
	cr_expect_not_null(j->data);
	cr_expect_eq(j->data_len, 0);
	cr_expect_eq(j->mode, 0644);
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);

	/* Every mode bit from 0 to 07777 is kept as given. */
	static const int64_t modes[] = { 0, 0755, 04755, 07777 };
	for (size_t i = 0; i < 4; i++) {
		jb_init(&b);
		jb_op(&b, op_case("fs.write"), "sandbox path data", "", false);
		jb_int(&b, "mode", modes[i]);
		j = jb_decode_ok(&b);
		cr_expect_eq(j->mode, (uint32_t)modes[i]);
		expect_job_round_trip(j);
		job_free(j);
		jb_destroy(&b);
	}
	REJECT_OP_WITH("fs.write", "sandbox path data", "field 'mode': must be at most 4095",
	    jb_int(b, "mode", 010000));
	REJECT_OP_WITH("fs.write", "sandbox path data", "field 'mode'",
	    jb_int(b, "mode", -1));
	REJECT_OP_WITH("fs.write", "sandbox path data", "field 'mode': expected an integer",
	    jb_str(b, "mode", "0644"));
	REJECT_OP_WITH("fs.write", "sandbox path", "field 'data': expected bytes",
	    jb_int(b, "data", 1));
	REJECT_OP_WITH("fs.list", "sandbox", "field 'recursive': expected true or false",
	    jb_int(b, "recursive", 1));
}

Test(payload, kv_fields)
{
	static const char *const good_json[] = {
		"0", "-0.5e-3", "1E+9", "\"\"", "\"a\\\"b\\\\\\/\\b\\f\\n\\r\\t\\u12aF\"",
		"true", "false", "null", " [ ] ", "{}", "{\"a\":{\"b\":[1,[2,[]]]}}",
		"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\t\r\n[1,2]\n",
	};
	static const char *const bad_json[] = {
		"", " ", "x", "'a'", "01", "1.", ".5", "-", "1e", "+1", "[1,]", "{\"a\"}",
		"{a:1}", "[1 2]", "\"abc", "\"\\x\"", "\"\\u12g4\"", "\"a\tb\"", "nul",
		"true false", "{\"a\":1,}", "[", "\"\xc0\xaf\"", "\"\xf5\x80\x80\x80\"",
		"\"\xe2\x82\"", "NaN",
	};
	char deep[2 * 200 + 1];
	struct job *j;
	struct jb b;

	for (size_t i = 0; i < sizeof(good_json) / sizeof(good_json[0]); i++) {
		jb_init(&b);
		jb_op(&b, op_case("kv.set"), "sandbox key", "", false);
		jb_str(&b, "value", good_json[i]);
		j = jb_decode_ok(&b);
		cr_expect_str_eq(j->value, good_json[i]);
		job_free(j);
		jb_destroy(&b);
	}
	for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++)
		REJECT_OP_WITH("kv.set", "sandbox key", "field 'value': not JSON text",
		    jb_str(b, "value", bad_json[i]));
	/* Nesting is bounded: 200 levels of [] are refused, not recursed into. */
	memset(deep, '[', 200);
	memset(deep + 200, ']', 200);
	deep[400] = '\0';
	REJECT_OP_WITH("kv.set", "sandbox key", "field 'value': not JSON text",
	    jb_str(b, "value", deep));
	REJECT_OP_WITH("kv.set", "sandbox key", "field 'value': contains a NUL", {
	    msgpack_packer *pk = jb_key(b, "value");
	    msgpack_pack_str(pk, 3);
	    msgpack_pack_str_body(pk, "\"\0\"", 3); });
	REJECT_OP_WITH("kv.get", "sandbox", "field 'key': must not be empty",
	    jb_str(b, "key", ""));
	REJECT_OP_WITH("kv.delete", "sandbox", "field 'key': contains a NUL", {
	    msgpack_packer *pk = jb_key(b, "key");
	    msgpack_pack_str(pk, 2);
	    msgpack_pack_str_body(pk, "a\0", 2); });
	/* An empty prefix is every key, and stays given. */
	jb_init(&b);
	jb_op(&b, op_case("kv.keys"), "sandbox", "", false);
	jb_str(&b, "prefix", "");
	j = jb_decode_ok(&b);
	cr_expect_str_eq(j->prefix, "");
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);
}

Test(payload, sandbox_create_takes_files_or_a_snapshot_not_both)
{
	struct job *j;

	j = decode_op("sandbox.create", "sandbox files labels");
	cr_assert_eq(j->nfiles, 1);
	cr_expect_str_eq(j->files[0].path, "a.txt");
	cr_expect_null(j->snapshot);
	cr_assert_eq(j->nlabels, 1);
	job_free(j);
	j = decode_op("sandbox.create", "sandbox snapshot");
	cr_expect_eq(j->snapshot_len, sizeof(sample_db));
	cr_expect_eq(j->nfiles, 0);
	job_free(j);
	REJECT_OP_WITH("sandbox.create", "sandbox files",
	    "field 'snapshot': not together with 'files'", jb_sample(b, "snapshot"));
	REJECT_OP_WITH("sandbox.import", "sandbox", "field 'snapshot': empty",
	    jb_big(b, "snapshot", 0, true, 0));
	REJECT_OP_WITH("sandbox.import", "sandbox", "field 'snapshot': expected bytes",
	    jb_int(b, "snapshot", 0));
}

/*
 * A create may name a stored snapshot by its key instead of sending it:
 * the key alone (the snapshot as it is, so no limits), exactly as results
 * write it, and not on sandbox.import.
 */
Test(payload, sandbox_create_takes_a_snapshot_key_alone)
{
	struct job *j = decode_op("sandbox.create", "sandbox snapshot_key labels");

	cr_expect_str_eq(j->snapshot_key, sample_key);
	cr_expect_null(j->snapshot);
	cr_expect_not(JOB_HAS_LIMITS(j), "a stored snapshot is not imported");
	job_free(j);
	REJECT_OP_WITH("sandbox.create", "sandbox snapshot",
	    "field 'snapshot_key': not together with 'snapshot'",
	    jb_str(b, "snapshot_key", sample_key));
	REJECT_OP_WITH("sandbox.create", "sandbox files",
	    "field 'snapshot_key': not together with 'files'",
	    jb_str(b, "snapshot_key", sample_key));
	REJECT_OP_WITH("sandbox.create", "sandbox snapshot_key limits",
	    "field 'limits': used only with 'snapshot' or 'from_image_dir'", (void)0);
	REJECT_OP_WITH("sandbox.create", "sandbox",
	    "field 'snapshot_key': not a snapshot's key (64 lower-case hex digits",
	    jb_str(b, "snapshot_key", "00112233445566778899AABBCCDDEEFF"
	    "00112233445566778899aabbccddeeff"));
	REJECT_OP_WITH("sandbox.create", "sandbox",
	    "field 'snapshot_key': not a snapshot's key",
	    jb_str(b, "snapshot_key", "0011"));
	REJECT_OP_WITH("sandbox.create", "sandbox", "field 'snapshot_key': longer than 64 bytes",
	    jb_str(b, "snapshot_key", "00112233445566778899aabbccddeeff"
	    "00112233445566778899aabbccddeeff0"));
	REJECT_OP_WITH("sandbox.import", "sandbox snapshot",
	    "field 'snapshot_key': not used by op 'sandbox.import'",
	    jb_str(b, "snapshot_key", sample_key));
}

/*** payload_scan ***/

static int
scan(const uint8_t *p, size_t n, struct err *e)
{
	memset(e, 0, sizeof(*e));
	return payload_scan(p, n, e);
}

Test(payload, scan_rejects_empty_input)
{
	struct err e;

	cr_expect_eq(scan((const uint8_t *)"", 0, &e), -EBADMSG);
	cr_expect(strstr(e.msg, "empty") != NULL, "%s", e.msg);
}

Test(payload, scan_rejects_every_truncation_of_a_job)
{
	struct jb b;
	size_t len;
	const uint8_t *buf;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_str(&b, "stdin", "some input");
	jb_all_limits(&b, 100000);
	jb_int(&b, "deadline_ms", 1700000000000);
	buf = (const uint8_t *)jb_finish(&b, &len);
	cr_assert_eq(payload_scan(buf, len, NULL), 0);
	for (size_t n = 1; n < len; n++) {
		struct err e;
		struct job *j = NULL;
		struct result *r = NULL;

		cr_expect_eq(scan(buf, n, &e), -EBADMSG, "prefix of %zu bytes", n);
		cr_expect_eq(payload_job_decode(buf, n, &j, NULL, &e), -EBADMSG);
		cr_expect_eq(payload_result_decode(buf, n, &r, &e), -EBADMSG);
	}
	jb_destroy(&b);
}

/*
 * Each input announces far more items or bytes than it holds. msgpack-c
 * would allocate the announced count before noticing (32 GiB for the
 * first), so decode must stop at the scan; the test would die of OOM or
 * ASan's allocation limit if it did not.
 */
Test(payload, scan_rejects_counts_beyond_the_input)
{
	static const uint8_t a32[] = { 0xdd, 0x7f, 0xff, 0xff, 0xff };
	static const uint8_t a32b[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0 };
	static const uint8_t a16[] = { 0xdc, 0xff, 0xff, 0xc0 };
	static const uint8_t m32[] = { 0xdf, 0x7f, 0xff, 0xff, 0xff, 0xc0 };
	static const uint8_t m16[] = { 0xde, 0x00, 0x02, 0xc0, 0xc0, 0xc0 };
	static const uint8_t fixa[] = { 0x93, 0xc0, 0xc0 };
	static const uint8_t fixm[] = { 0x81, 0xc0 };
	static const uint8_t nested[] = { 0x91, 0xdd, 0x7f, 0xff, 0xff, 0xff };
	static const uint8_t s32[] = { 0xdb, 0x00, 0x00, 0x01, 0x00, 'a' };
	static const uint8_t s32max[] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 'a' };
	static const uint8_t s8[] = { 0xd9, 0x02, 'a' };
	static const uint8_t s16[] = { 0xda, 0x01, 0x00, 'a' };
	static const uint8_t fixs[] = { 0xa3, 'a', 'b' };
	static const uint8_t b32[] = { 0xc6, 0x7f, 0xff, 0xff, 0xff };
	static const uint8_t e32[] = { 0xc9, 0x00, 0x00, 0x00, 0x01, 0x05 };
	static const uint8_t e8[] = { 0xc7, 0x00 };
	static const uint8_t fe16[] = { 0xd8, 0x01, 0x02 };
	static const uint8_t u16[] = { 0xcd, 0x01 };
	static const uint8_t u64[] = { 0xcf, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t f64[] = { 0xcb, 0, 0 };
	static const uint8_t hdr32[] = { 0xdd, 0x00, 0x00 };
	static const uint8_t key_no_val[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b' };
	static const struct { const char *name; const uint8_t *p; size_t n; } t[] = {
#define C(x) { #x, x, sizeof(x) }
		C(a32), C(a32b), C(a16), C(m32), C(m16), C(fixa), C(fixm), C(nested),
		C(s32), C(s32max), C(s8), C(s16), C(fixs), C(b32), C(e32), C(e8),
		C(fe16), C(u16), C(u64), C(f64), C(hdr32), C(key_no_val),
#undef C
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct err e;
		struct job *j = NULL;
		struct result *r = NULL;

		cr_expect_eq(scan(t[i].p, t[i].n, &e), -EBADMSG, "case %s", t[i].name);
		cr_expect_neq(e.msg[0], '\0', "case %s", t[i].name);
		cr_expect_eq(payload_job_decode(t[i].p, t[i].n, &j, NULL, &e), -EBADMSG,
		    "case %s", t[i].name);
		cr_expect_eq(payload_result_decode(t[i].p, t[i].n, &r, &e), -EBADMSG,
		    "case %s", t[i].name);
	}
}

/* n nested one-element containers (array or map) around a nil. */
static uint8_t *
nest_new(size_t depth, bool maps, size_t *len)
{
	uint8_t *p = malloc(2 * depth + 1);
	size_t o = 0;

	cr_assert_not_null(p);
	for (size_t i = 0; i < depth; i++) {
		if (maps) {
			p[o++] = 0x81;	/* {nil: ...} */
			p[o++] = 0xc0;
		} else {
			p[o++] = 0x91;	/* [...] */
		}
	}
	p[o++] = 0xc0;
	*len = o;
	return p;
}

Test(payload, scan_bounds_nesting_depth)
{
	for (int maps = 0; maps < 2; maps++) {
		struct err e;
		size_t len;
		uint8_t *p = nest_new(PAYLOAD_MAX_DEPTH, maps, &len);

		cr_expect_eq(scan(p, len, &e), 0, "depth %d: %s", PAYLOAD_MAX_DEPTH, e.msg);
		free(p);
		p = nest_new(PAYLOAD_MAX_DEPTH + 1, maps, &len);
		cr_expect_eq(scan(p, len, &e), -EBADMSG);
		cr_expect(strstr(e.msg, "nested deeper") != NULL, "%s", e.msg);
		free(p);
		p = nest_new(10000, maps, &len);
		cr_expect_eq(scan(p, len, &e), -EBADMSG);
		free(p);
	}
}

Test(payload, scan_rejects_trailing_bytes_and_0xc1)
{
	static const uint8_t trailing[] = { 0xc0, 0xc0 };
	static const uint8_t trailing_map[] = { 0x80, 0x00 };
	static const uint8_t c1[] = { 0xc1 };
	static const uint8_t c1_inside[] = { 0x92, 0xc0, 0xc1 };
	struct err e;

	cr_expect_eq(scan(trailing, sizeof(trailing), &e), -EBADMSG);
	cr_expect(strstr(e.msg, "trailing") != NULL, "%s", e.msg);
	cr_expect_eq(scan(trailing_map, sizeof(trailing_map), &e), -EBADMSG);
	cr_expect_eq(scan(c1, sizeof(c1), &e), -EBADMSG);
	cr_expect(strstr(e.msg, "0xc1") != NULL, "%s", e.msg);
	cr_expect_eq(scan(c1_inside, sizeof(c1_inside), &e), -EBADMSG);
}

/* Asserts that scan and msgpack-c both accept p as exactly one object. */
static void
expect_scan_accepts(const char *name, const void *p, size_t n)
{
	msgpack_unpacked up;
	struct err e;
	size_t off = 0;

	cr_expect_eq(scan(p, n, &e), 0, "case %s: %s", name, e.msg);
	msgpack_unpacked_init(&up);
	cr_expect_eq(msgpack_unpack_next(&up, p, n, &off), MSGPACK_UNPACK_SUCCESS,
	    "case %s: msgpack-c disagrees", name);
	cr_expect_eq(off, n, "case %s", name);
	msgpack_unpacked_destroy(&up);
}

Test(payload, scan_accepts_every_msgpack_type)
{
	static const uint8_t fixext16[18] = { 0xd8, 0x05 };
	static const uint8_t enc[][12] = {
		{ 0xc0 }, { 0xc2 }, { 0xc3 }, { 0x00 }, { 0x7f }, { 0xe0 }, { 0xff },
		{ 0xcc, 0xff }, { 0xcd, 0xff, 0xff }, { 0xce, 1, 2, 3, 4 },
		{ 0xcf, 1, 2, 3, 4, 5, 6, 7, 8 },
		{ 0xd0, 0x80 }, { 0xd1, 0x80, 0x00 }, { 0xd2, 0x80, 0, 0, 0 },
		{ 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0 },
		{ 0xca, 0x3f, 0xc0, 0, 0 }, { 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0 },
		{ 0xa0 }, { 0xa2, 'h', 'i' }, { 0xd9, 0x00 }, { 0xd9, 0x01, 'x' },
		{ 0xda, 0x00, 0x01, 'x' }, { 0xdb, 0x00, 0x00, 0x00, 0x01, 'x' },
		{ 0xc4, 0x00 }, { 0xc4, 0x01, 0x00 }, { 0xc5, 0x00, 0x01, 0x00 },
		{ 0xc6, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01 },
		{ 0xd4, 0x01, 0xaa }, { 0xd5, 0x01, 0xaa, 0xbb },
		{ 0xd6, 0xff, 1, 2, 3, 4 }, { 0xd7, 0x80, 1, 2, 3, 4, 5, 6, 7, 8 },
		{ 0xc7, 0x00, 0x05 }, { 0xc7, 0x02, 0x05, 1, 2 },
		{ 0xc8, 0x00, 0x01, 0x05, 1 }, { 0xc9, 0x00, 0x00, 0x00, 0x01, 0x05, 1 },
		{ 0x90 }, { 0x80 }, { 0x92, 0xc0, 0xc3 }, { 0x81, 0xa1, 'k', 0x01 },
		{ 0xdc, 0x00, 0x00 }, { 0xdc, 0x00, 0x01, 0xc0 },
		{ 0xdd, 0x00, 0x00, 0x00, 0x01, 0xc0 },
		{ 0xde, 0x00, 0x01, 0xc0, 0xc0 }, { 0xdf, 0x00, 0x00, 0x00, 0x01, 0xc0, 0xc0 },
	};
	static const uint8_t lens[] = {
		1, 1, 1, 1, 1, 1, 1, 2, 3, 5, 9, 2, 3, 5, 9, 5, 9, 1, 3, 2, 3, 4, 6,
		2, 3, 4, 7, 3, 4, 6, 10, 3, 5, 5, 7, 1, 1, 3, 4, 3, 4, 6, 5, 7,
	};

	_Static_assert(sizeof(lens) == sizeof(enc) / sizeof(enc[0]), "table");
	for (size_t i = 0; i < sizeof(lens); i++) {
		char name[16];

		snprintf(name, sizeof(name), "0x%02x#%zu", enc[i][0], i);
		expect_scan_accepts(name, enc[i], lens[i]);
	}
	expect_scan_accepts("fixext16", fixext16, sizeof(fixext16));
}

/* Packs one of everything with msgpack-c, each size class of str/bin/ext. */
Test(payload, scan_accepts_what_msgpack_c_packs)
{
	static const size_t sizes[] = { 0, 1, 31, 32, 255, 256, 65535, 65536, 70000 };
	static const size_t ext_sizes[] = { 1, 2, 3, 4, 8, 16, 17, 300, 70000 };
	char *blob = calloc(1, 70000);
	msgpack_sbuffer sb;
	msgpack_packer pk;

	cr_assert_not_null(blob);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 17 + 3 * 9 + 3);
	msgpack_pack_nil(&pk);
	msgpack_pack_true(&pk);
	msgpack_pack_false(&pk);
	msgpack_pack_int(&pk, 5);
	msgpack_pack_int(&pk, -5);
	msgpack_pack_uint8(&pk, 200);
	msgpack_pack_uint16(&pk, 60000);
	msgpack_pack_uint32(&pk, 4000000000u);
	msgpack_pack_uint64(&pk, UINT64_MAX);
	msgpack_pack_int8(&pk, -100);
	msgpack_pack_int16(&pk, -30000);
	msgpack_pack_int32(&pk, INT32_MIN);
	msgpack_pack_int64(&pk, INT64_MIN);
	msgpack_pack_float(&pk, 1.5f);
	msgpack_pack_double(&pk, -2.25);
	msgpack_pack_array(&pk, 0);
	msgpack_pack_map(&pk, 0);
	for (size_t i = 0; i < 9; i++) {
		msgpack_pack_str(&pk, sizes[i]);
		msgpack_pack_str_body(&pk, blob, sizes[i]);
		msgpack_pack_bin(&pk, sizes[i]);
		msgpack_pack_bin_body(&pk, blob, sizes[i]);
		msgpack_pack_ext(&pk, ext_sizes[i], 7);
		msgpack_pack_ext_body(&pk, blob, ext_sizes[i]);
	}
	/* array16, map16 and array32 by count. */
	msgpack_pack_array(&pk, 20);
	for (int i = 0; i < 20; i++)
		msgpack_pack_int(&pk, i);
	msgpack_pack_map(&pk, 20);
	for (int i = 0; i < 40; i++)
		msgpack_pack_int(&pk, i);
	msgpack_pack_array(&pk, 70000);
	for (int i = 0; i < 70000; i++)
		msgpack_pack_nil(&pk);
	expect_scan_accepts("packed", sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	free(blob);
}

Test(payload, scan_accepts_nested_maps_and_arrays_at_max_depth)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* Alternate maps and arrays, each with siblings around the child. */
	for (int d = 0; d < PAYLOAD_MAX_DEPTH; d++) {
		if (d % 2 == 0) {
			msgpack_pack_map(&pk, 2);
			pstr(&pk, "a");
			msgpack_pack_int(&pk, d);
			pstr(&pk, "child");
		} else {
			msgpack_pack_array(&pk, 3);
			msgpack_pack_true(&pk);
		}
	}
	msgpack_pack_nil(&pk);
	/* Close the arrays' trailing siblings, innermost first. */
	for (int d = PAYLOAD_MAX_DEPTH - 1; d >= 0; d--)
		if (d % 2 == 1)
			msgpack_pack_array(&pk, 0);
	expect_scan_accepts("alternating", sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

/*** payload_path_normalise ***/

Test(payload, path_normalise_cases)
{
	static const struct { const char *in, *want; } ok[] = {
		{ "a", "a" }, { "a/b", "a/b" }, { "/a/b", "a/b" }, { "./a//b/", "a/b" },
		{ "/a//b/./c", "a/b/c" }, { "a/./b/.", "a/b" }, { "///x///", "x" },
		{ "...", "..." }, { "..a/b..", "..a/b.." }, { ".hidden", ".hidden" },
		{ "/workspace/x", "workspace/x" }, { "sp ace/ü", "sp ace/ü" },
	};
	static const struct { const char *in; size_t len; const char *why; } bad[] = {
		{ "", 0, "empty" }, { "/", 1, "empty" }, { ".", 1, "empty" },
		{ "./", 2, "empty" }, { "//./", 4, "empty" },
		{ "..", 2, "'..'" }, { "a/../b", 6, "'..'" }, { "../a", 4, "'..'" },
		{ "a/..", 4, "'..'" }, { "/a/b/../../..", 13, "'..'" },
		{ "a\nb", 3, "control" }, { "a\x7f", 2, "control" }, { "a\0b", 3, "control" },
		{ "\x1b[0m", 4, "control" },
	};
	char out[JOB_PATH_MAX + 1];
	struct err e;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		memset(&e, 0, sizeof(e));
		cr_expect_eq(payload_path_normalise(ok[i].in, strlen(ok[i].in), out,
		    "files", &e), 0, "'%s': %s", ok[i].in, e.msg);
		cr_expect_str_eq(out, ok[i].want, "'%s'", ok[i].in);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&e, 0, sizeof(e));
		cr_expect_eq(payload_path_normalise(bad[i].in, bad[i].len, out, "cwd", &e),
		    -EINVAL, "case %zu", i);
		cr_expect(strstr(e.msg, "field 'cwd'") != NULL, "case %zu: %s", i, e.msg);
		cr_expect(strstr(e.msg, bad[i].why) != NULL, "case %zu: %s", i, e.msg);
	}
}

Test(payload, path_normalise_bounds)
{
	char in[JOB_PATH_MAX + 2];
	char out[JOB_PATH_MAX + 1];
	struct err e;

	/* A component of JOB_NAME_MAX bytes is fine; one more is not. */
	memset(in, 'n', JOB_NAME_MAX + 1);
	cr_expect_eq(payload_path_normalise(in, JOB_NAME_MAX, out, "files", &e), 0);
	cr_expect_eq(strlen(out), JOB_NAME_MAX);
	cr_expect_eq(payload_path_normalise(in, JOB_NAME_MAX + 1, out, "files", &e),
	    -EINVAL);
	cr_expect(strstr(e.msg, "component longer") != NULL, "%s", e.msg);

	/* A path of JOB_PATH_MAX bytes fills out exactly; one more is refused. */
	for (size_t i = 0; i < JOB_PATH_MAX + 1; i++)
		in[i] = (i % 2) ? '/' : 'a';
	cr_expect_eq(payload_path_normalise(in, JOB_PATH_MAX, out, "files", &e), 0,
	    "%s", e.msg);
	cr_expect_eq(strlen(out), JOB_PATH_MAX - 1);
	in[JOB_PATH_MAX - 1] = 'b';
	cr_expect_eq(payload_path_normalise(in, JOB_PATH_MAX, out, "files", &e), 0);
	cr_expect_eq(strlen(out), JOB_PATH_MAX);
	cr_expect_eq(payload_path_normalise(in, JOB_PATH_MAX + 1, out, "files", &e),
	    -EINVAL);
	cr_expect(strstr(e.msg, "longer than") != NULL, "%s", e.msg);
}

/*** payload_id_valid ***/

Test(payload, id_valid_cases)
{
	static const char *const good[] = {
		"a", "Z", "0", "job-1", "A.b_c:d-9", "...", "tenant:job:123",
	};
	static const char *const bad[] = {
		"a b", "a/b", "a*", "{x}", "é", "a\tb", "a,b", "a\"b", "a@b",
	};
	char s[JOB_ID_MAX + 2];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		cr_expect(payload_id_valid(good[i], strlen(good[i])), "'%s'", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_not(payload_id_valid(bad[i], strlen(bad[i])), "'%s'", bad[i]);
	cr_expect_not(payload_id_valid("", 0));
	cr_expect_not(payload_id_valid("a\0b", 3));
	/* The length is what counts, not a NUL. */
	cr_expect(payload_id_valid("ab\0", 2));
	memset(s, 'x', sizeof(s));
	cr_expect(payload_id_valid(s, JOB_ID_MAX));
	cr_expect_not(payload_id_valid(s, JOB_ID_MAX + 1));
}

/*** Names ***/

Test(payload, op_and_preset_names)
{
	enum job_preset p = PRESET_DEFAULT;

	cr_expect_str_eq(job_op_name(OP_EXEC), "exec");
	cr_expect_str_eq(job_op_name(OP_SH), "sh");
	cr_expect_str_eq(job_op_name(OP_PYTHON), "python");
	cr_expect_str_eq(job_op_name((enum job_op)99), "unknown");
	for (int i = PRESET_STRICT; i <= PRESET_PERMISSIVE; i++) {
		cr_expect_eq(job_preset_parse(job_preset_name((enum job_preset)i), &p), 0);
		cr_expect_eq(p, (enum job_preset)i);
	}
	cr_expect_eq(job_preset_parse("default", &p), -EINVAL);
	cr_expect_eq(job_preset_parse("", &p), -EINVAL);
	cr_expect_str_eq(job_preset_name((enum job_preset)42), "unknown");
}

Test(payload, res_status_name_parse_round_trip)
{
	static const char *const names[ST__COUNT] = {
		"ok", "exit", "signal", "timeout", "cpu_limit", "memory_limit",
		"pids_limit", "output_limit", "disk_limit", "rejected", "cancelled",
		"expired", "internal",
	};
	enum res_status st;

	for (int i = 0; i < ST__COUNT; i++) {
		cr_expect_str_eq(res_status_name((enum res_status)i), names[i]);
		st = ST__COUNT;
		cr_expect_eq(res_status_parse(names[i], &st), 0);
		cr_expect_eq(st, (enum res_status)i);
	}
	cr_expect_str_eq(res_status_name(ST__COUNT), "unknown");
	cr_expect_str_eq(res_status_name((enum res_status)-1), "unknown");
	cr_expect_eq(res_status_parse("unknown", &st), -EINVAL);
	cr_expect_eq(res_status_parse("OK", &st), -EINVAL);
	cr_expect_eq(res_status_parse("", &st), -EINVAL);
}

/*** Results ***/

static void
expect_results_equal(const struct result *a, const struct result *b)
{
	cr_expect_str_eq(a->id, b->id);
	cr_expect_eq(a->status, b->status);
	cr_expect_eq(a->exit_code, b->exit_code);
	cr_expect_eq(a->signal, b->signal);
	cr_assert_eq(a->out_len, b->out_len);
	if (a->out_len)
		cr_expect_arr_eq(a->out, b->out, a->out_len);
	cr_expect_eq(a->out_truncated, b->out_truncated);
	cr_assert_eq(a->err_len, b->err_len);
	if (a->err_len)
		cr_expect_arr_eq(a->err, b->err, a->err_len);
	cr_expect_eq(a->err_truncated, b->err_truncated);
	cr_expect_eq(a->wall_ms, b->wall_ms);
	cr_expect_eq(a->cpu_ms, b->cpu_ms);
	cr_expect_eq(a->max_rss_kb, b->max_rss_kb);
	cr_expect_eq(a->queued_at, b->queued_at);
	cr_expect_eq(a->started_at, b->started_at);
	cr_expect_eq(a->finished_at, b->finished_at);
	cr_expect_eq(a->host == NULL, b->host == NULL);
	if (a->host && b->host)
		cr_expect_str_eq(a->host, b->host);
	cr_expect_eq(a->worker, b->worker);
	cr_expect_eq(a->attempt, b->attempt);
	cr_expect_eq(a->error_code == NULL, b->error_code == NULL);
	if (a->error_code && b->error_code)
		cr_expect_str_eq(a->error_code, b->error_code);
	cr_expect_eq(a->error_message == NULL, b->error_message == NULL);
	if (a->error_message && b->error_message)
		cr_expect_str_eq(a->error_message, b->error_message);
}

static struct result *
result_round_trip(const struct result *r)
{
	struct result *back = NULL;
	struct err e = { 0 };
	char *buf = NULL;
	size_t len = 0;

	cr_assert_eq(payload_result_encode(r, &buf, &len), 0);
	cr_assert_eq(payload_scan(buf, len, &e), 0, "encoded result: %s", e.msg);
	cr_assert_eq(payload_result_decode(buf, len, &back, &e), 0, "%s", e.msg);
	free(buf);
	return back;
}

Test(payload, result_round_trips_every_field)
{
	static const uint8_t out[] = { 'o', 0, 'u', 0xff, 0, 't' };
	static const uint8_t err[] = { 0, 0, 0 };
	struct result *r = result_new("job-7");
	struct result *back;

	r->status = ST_SIGNAL;
	r->exit_code = -1;
	r->signal = 9;
	r->out = malloc(sizeof(out));
	memcpy(r->out, out, sizeof(out));
	r->out_len = sizeof(out);
	r->out_truncated = true;
	r->err = malloc(sizeof(err));
	memcpy(r->err, err, sizeof(err));
	r->err_len = sizeof(err);
	r->err_truncated = true;
	r->wall_ms = 1234;
	r->cpu_ms = 567;
	r->max_rss_kb = UINT64_MAX;
	r->queued_at = 1700000000000;
	r->started_at = 1700000000100;
	r->finished_at = 1700000001334;
	r->host = xdup("host-a");
	r->worker = 3;
	r->attempt = 2;
	result_set_error(r, ST_SIGNAL, "killed", "killed by signal %d", 9);
	back = result_round_trip(r);
	expect_results_equal(r, back);
	cr_expect_str_eq(back->error_code, "killed");
	cr_expect_str_eq(back->error_message, "killed by signal 9");
	result_free(back);
	result_free(r);
}

Test(payload, result_round_trips_the_image_it_ran_on)
{
	struct result *r = result_new("job-8");
	struct result *back;

	r->image = xdup("docker://r.io/team/py@sha256:0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef");
	r->image_digest = xdup("sha256:fedcba9876543210fedcba9876543210fedcba9876543210"
	    "fedcba9876543210");
	r->image_name = xdup("py:latest");
	back = result_round_trip(r);
	cr_expect_str_eq(back->image, r->image);
	cr_expect_str_eq(back->image_digest, r->image_digest);
	cr_expect_str_eq(back->image_name, "py:latest");
	result_free(back);
	/* A job on host names none: nothing is written, nothing read back. */
	free(r->image);
	free(r->image_digest);
	free(r->image_name);
	r->image = r->image_digest = r->image_name = NULL;
	back = result_round_trip(r);
	cr_expect_null(back->image);
	cr_expect_null(back->image_name);
	result_free(back);
	result_free(r);
}

Test(payload, result_round_trips_refused_syscalls_and_merges_repeats)
{
	struct result *r = result_new("j");
	struct result *back;
	char name[32];

	result_add_refusal(r, "mount", 1);
	result_add_refusal(r, "ptrace", 2);
	result_add_refusal(r, "mount", 3);
	cr_assert_eq(r->nrefused, 2);
	back = result_round_trip(r);
	cr_assert_eq(back->nrefused, 2);
	cr_expect_str_eq(back->refused[0].name, "mount");
	cr_expect_eq(back->refused[0].count, 4);
	cr_expect_str_eq(back->refused[1].name, "ptrace");
	cr_expect_eq(back->refused[1].count, 2);
	result_free(back);
	/* Bounded: a flood of distinct names cannot grow a result without end. */
	for (int i = 0; i < 3 * RESULT_REFUSED_MAX; i++) {
		snprintf(name, sizeof(name), "sys%d", i);
		result_add_refusal(r, name, 1);
	}
	cr_expect_eq(r->nrefused, RESULT_REFUSED_MAX);
	result_free(r);
}

Test(payload, result_round_trips_defaults)
{
	struct result *r = result_new("j");
	struct result *back = result_round_trip(r);

	expect_results_equal(r, back);
	cr_expect_eq(back->exit_code, -1);
	cr_expect_eq(back->worker, -1);
	cr_expect_eq(back->attempt, 1);
	cr_expect_null(back->host);
	cr_expect_null(back->error_code);
	result_free(back);
	result_free(r);
}

Test(payload, result_round_trips_every_status)
{
	for (int i = 0; i < ST__COUNT; i++) {
		struct result *r = result_new("s");
		struct result *back;

		r->status = (enum res_status)i;
		r->exit_code = i;
		back = result_round_trip(r);
		cr_expect_eq(back->status, (enum res_status)i, "%s",
		    res_status_name((enum res_status)i));
		cr_expect_eq(back->exit_code, i);
		result_free(back);
		result_free(r);
	}
}

Test(payload, result_decode_ignores_unknown_fields)
{
	struct jb b;
	struct result *r = NULL;
	struct err e = { 0 };
	msgpack_packer *pk;
	size_t len;
	const char *buf;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_str(&b, "status", "exit");
	jb_int(&b, "exit_code", 2);
	pk = jb_key(&b, "provenance");
	msgpack_pack_map(pk, 1);
	pstr(pk, "parts");
	msgpack_pack_array(pk, 2);
	msgpack_pack_int(pk, 1);
	msgpack_pack_nil(pk);
	jb_str(&b, "mount", "sb-1");
	jb_int(&b, "v", 2);
	pk = jb_key(&b, "error");
	msgpack_pack_map(pk, 3);
	pstr(pk, "code");
	pstr(pk, "E1");
	pstr(pk, "detail");
	msgpack_pack_int(pk, 5);
	pstr(pk, "message");
	pstr(pk, "m");
	buf = jb_finish(&b, &len);
	cr_assert_eq(payload_result_decode(buf, len, &r, &e), 0, "%s", e.msg);
	cr_expect_str_eq(r->id, "j1");
	cr_expect_eq(r->status, ST_EXIT);
	cr_expect_eq(r->exit_code, 2);
	cr_expect_str_eq(r->error_code, "E1");
	cr_expect_str_eq(r->error_message, "m");
	result_free(r);
	jb_destroy(&b);
}

/* Decodes b as a result and expects -EINVAL naming want. */
static void
jb_expect_result_reject(struct jb *b, const char *want)
{
	struct result *r = (struct result *)(uintptr_t)1;
	struct err e = { 0 };
	size_t len;
	const char *buf = jb_finish(b, &len);

	cr_expect_eq(payload_result_decode(buf, len, &r, &e), -EINVAL, "%s", e.msg);
	cr_expect_null(r);
	cr_expect(strstr(e.msg, want) != NULL, "msg '%s' lacks '%s'", e.msg, want);
}

Test(payload, result_decode_rejects_bad_fields)
{
	struct jb b;

	jb_init(&b);
	jb_str(&b, "status", "done");
	jb_expect_result_reject(&b, "field 'status': unknown status 'done'");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "exit_code", "1");
	jb_expect_result_reject(&b, "field 'exit_code'");
	jb_destroy(&b);

	jb_init(&b);
	jb_int(&b, "wall_ms", -1);
	jb_expect_result_reject(&b, "field 'wall_ms'");
	jb_destroy(&b);

	jb_init(&b);
	jb_int(&b, "stdout_truncated", 1);
	jb_expect_result_reject(&b, "field 'stdout_truncated'");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "error", "boom");
	jb_expect_result_reject(&b, "field 'error'");
	jb_destroy(&b);
}

/*
 * A repeated "stdout" whose second value is bad: decode frees the first
 * buffer before reading the second, and must not leave the freed pointer
 * for result_free() to free again (ASan reports a double free).
 */
Test(payload, result_decode_survives_repeated_bad_output_field)
{
	static const char *const keys[] = { "stdout", "stderr", "host" };

	for (size_t i = 0; i < 3; i++) {
		struct jb b;

		jb_init(&b);
		jb_str(&b, "id", "j1");
		jb_str(&b, keys[i], "first");
		jb_int(&b, keys[i], 5);
		jb_expect_result_reject(&b, keys[i]);
		jb_destroy(&b);
	}
}

Test(payload, result_decode_keeps_the_last_repeated_field)
{
	struct jb b;
	struct result *r = NULL;
	struct err e = { 0 };
	size_t len;
	const char *buf;

	jb_init(&b);
	jb_str(&b, "id", "a");
	jb_str(&b, "id", "b");
	jb_str(&b, "stdout", "one");
	jb_str(&b, "stdout", "two!");
	jb_str(&b, "host", "h1");
	jb_str(&b, "host", "h2");
	buf = jb_finish(&b, &len);
	cr_assert_eq(payload_result_decode(buf, len, &r, &e), 0, "%s", e.msg);
	cr_expect_str_eq(r->id, "b");
	cr_expect_eq(r->out_len, 4);
	cr_expect_arr_eq(r->out, "two!", 4);
	cr_expect_str_eq(r->host, "h2");
	result_free(r);
	jb_destroy(&b);
}

Test(payload, result_decode_rejects_non_map)
{
	static const uint8_t arr[] = { 0x90 };
	struct result *r = NULL;
	struct err e = { 0 };

	cr_expect_eq(payload_result_decode(arr, sizeof(arr), &r, &e), -EBADMSG);
	cr_expect_null(r);
	cr_expect_eq(payload_result_decode(arr, 0, &r, &e), -EBADMSG);
}

Test(payload, free_functions_accept_null)
{
	job_free(NULL);
	result_free(NULL);
}

/*** Results: sandbox fields ***/

static void
expect_strv_eq(const char *what, char *const *a, size_t na, char *const *b, size_t nb)
{
	cr_assert_eq(na, nb, "%s: %zu vs %zu", what, na, nb);
	for (size_t i = 0; i < na; i++)
		cr_expect_str_eq(a[i], b[i], "%s[%zu]", what, i);
}

static void
expect_result_sandbox_fields_equal(const struct result *a, const struct result *b)
{
	expect_opt_str_eq("sandbox", a->sandbox, b->sandbox);
	cr_expect_eq(a->version, b->version);
	expect_opt_str_eq("snapshot", a->snapshot, b->snapshot);
	expect_strv_eq("changed", a->changed, a->nchanged, b->changed, b->nchanged);
	cr_expect_eq(a->changed_truncated, b->changed_truncated);
	cr_expect_eq(a->added, b->added);
	cr_expect_eq(a->modified, b->modified);
	cr_expect_eq(a->removed, b->removed);
	expect_strv_eq("refused_paths", a->refused_paths, a->nrefused_paths,
	    b->refused_paths, b->nrefused_paths);
	cr_expect_eq(a->data == NULL, b->data == NULL);
	cr_assert_eq(a->data_len, b->data_len);
	if (a->data_len)
		cr_expect_arr_eq(a->data, b->data, a->data_len);
}

/* Hands sb's bytes to r->data. */
static void
result_take_data(struct result *r, msgpack_sbuffer *sb)
{
	r->data = (uint8_t *)sb->data;
	r->data_len = sb->size;
	sb->data = NULL;
	sb->size = sb->alloc = 0;
}

Test(payload, result_round_trips_every_sandbox_field_with_nested_data)
{
	static const char *const changed[] = { "/a.txt", "/dir/b", "/dir/c d" };
	static const char *const refused[] = { "/.git/hooks/pre-commit" };
	static const uint8_t blob[] = { 0, 0xc1, 0xff, 'x' };
	struct result *r = result_new("sb-job");
	struct result *back;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	r->status = ST_OK;
	r->exit_code = 0;
	r->sandbox = xdup("sb-1");
	r->version = 42;
	r->snapshot = xdup("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
	r->changed = strv_new(changed, 3);
	r->nchanged = 3;
	r->changed_truncated = true;
	r->added = 1;
	r->modified = 2;
	r->removed = 3000;
	r->refused_paths = strv_new(refused, 1);
	r->nrefused_paths = 1;
	/* An fs.list-like answer: a map holding arrays, maps, bin and scalars. */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	pstr(&pk, "entries");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_map(&pk, 3);
	pstr(&pk, "path");
	pstr(&pk, "/a.txt");
	pstr(&pk, "size");
	msgpack_pack_uint64(&pk, UINT64_MAX);
	pstr(&pk, "mtime");
	msgpack_pack_int64(&pk, -1);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_nil(&pk);
	msgpack_pack_true(&pk);
	msgpack_pack_double(&pk, 2.5);
	pstr(&pk, "blob");
	pbin(&pk, blob, sizeof(blob));
	pstr(&pk, "empty");
	msgpack_pack_array(&pk, 0);
	pstr(&pk, "ext");
	msgpack_pack_ext(&pk, 3, 7);
	msgpack_pack_ext_body(&pk, "abc", 3);
	result_take_data(r, &sb);
	back = result_round_trip(r);
	expect_results_equal(r, back);
	expect_result_sandbox_fields_equal(r, back);
	result_free(back);
	result_free(r);
}

Test(payload, result_data_of_every_shape_round_trips_byte_for_byte)
{
	static const uint8_t nil[] = { 0xc0 };
	static const uint8_t bin[] = { 0xc4, 0x03, 0, 1, 2 };
	static const uint8_t str[] = { 0xa2, '{', '}' };
	static const uint8_t arr[] = { 0x92, 0xa1, 'a', 0xa1, 'b' };
	static const uint8_t big[] = { 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const struct { const uint8_t *p; size_t n; } t[] = {
		{ nil, sizeof(nil) }, { bin, sizeof(bin) }, { str, sizeof(str) },
		{ arr, sizeof(arr) }, { big, sizeof(big) },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct result *r = result_new("d");
		struct result *back;

		r->data = malloc(t[i].n);
		memcpy(r->data, t[i].p, t[i].n);
		r->data_len = t[i].n;
		back = result_round_trip(r);
		cr_assert_eq(back->data_len, t[i].n, "case %zu", i);
		cr_expect_arr_eq(back->data, t[i].p, t[i].n, "case %zu", i);
		result_free(back);
		result_free(r);
	}
}

Test(payload, result_without_sandbox_fields_has_none)
{
	struct result *r = result_new("j");
	struct result *back;
	char *buf = NULL;
	size_t len = 0;

	back = result_round_trip(r);
	cr_expect_null(back->sandbox);
	cr_expect_eq(back->version, 0);
	cr_expect_null(back->snapshot);
	cr_expect_null(back->changed);
	cr_expect_eq(back->nchanged, 0);
	cr_expect_not(back->changed_truncated);
	cr_expect_eq(back->added + back->modified + back->removed, 0);
	cr_expect_null(back->refused_paths);
	cr_expect_null(back->data);
	result_free(back);
	/* Omitted when empty: the map has exactly the 17 base fields. */
	cr_assert_eq(payload_result_encode(r, &buf, &len), 0);
	cr_expect_eq((uint8_t)buf[0], 0xde);
	cr_expect_eq((uint8_t)buf[2], 17);
	free(buf);
	result_free(r);
}

Test(payload, result_encode_refuses_data_that_is_not_one_object)
{
	static const uint8_t trunc[] = { 0x92, 0x01 };
	static const uint8_t two[] = { 0x01, 0x02 };
	static const uint8_t bad[] = { 0xc1 };
	static const struct { const uint8_t *p; size_t n; } t[] = {
		{ trunc, sizeof(trunc) }, { two, sizeof(two) }, { bad, sizeof(bad) },
		{ two, 0 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct result *r = result_new("d");
		char *buf = NULL;
		size_t len = 0;

		r->data = malloc(2);
		memcpy(r->data, t[i].p, t[i].n);
		r->data_len = t[i].n;
		cr_expect_eq(payload_result_encode(r, &buf, &len), -EINVAL, "case %zu", i);
		cr_expect_null(buf);
		result_free(r);
	}
}

/* A result map {id, key: array of n strings of len bytes}. */
static void
jb_path_array(struct jb *b, const char *key, size_t n, size_t len)
{
	char *p = malloc(len + 1);
	msgpack_packer *pk;

	cr_assert_not_null(p);
	memset(p, 'p', len);
	p[0] = '/';
	p[len] = '\0';
	jb_str(b, "id", "j1");
	pk = jb_key(b, key);
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		pstr(pk, p);
	free(p);
}

/* Decodes b as a result and expects success. */
static struct result *
jb_result_ok(struct jb *b)
{
	struct result *r = NULL;
	struct err e = { 0 };
	size_t len;
	const char *buf = jb_finish(b, &len);

	cr_assert_eq(payload_result_decode(buf, len, &r, &e), 0, "%s", e.msg);
	return r;
}

Test(payload, result_decode_bounds_changed_and_refused_paths)
{
	struct result *r;
	struct jb b;

	jb_init(&b);
	jb_path_array(&b, "changed", RESULT_CHANGED_MAX, JOB_PATH_MAX + 1);
	r = jb_result_ok(&b);
	cr_expect_eq(r->nchanged, RESULT_CHANGED_MAX);
	cr_expect_eq(strlen(r->changed[0]), JOB_PATH_MAX + 1);
	result_free(r);
	jb_destroy(&b);

	jb_init(&b);
	jb_path_array(&b, "changed", RESULT_CHANGED_MAX + 1, 2);
	jb_expect_result_reject(&b, "field 'changed': more than 1024 paths");
	jb_destroy(&b);

	jb_init(&b);
	jb_path_array(&b, "changed", 1, JOB_PATH_MAX + 2);
	jb_expect_result_reject(&b, "field 'changed[0]': longer than 4097 bytes");
	jb_destroy(&b);

	jb_init(&b);
	jb_path_array(&b, "refused_paths", RESULT_REFUSED_PATHS_MAX, 8);
	r = jb_result_ok(&b);
	cr_expect_eq(r->nrefused_paths, RESULT_REFUSED_PATHS_MAX);
	result_free(r);
	jb_destroy(&b);

	jb_init(&b);
	jb_path_array(&b, "refused_paths", RESULT_REFUSED_PATHS_MAX + 1, 8);
	jb_expect_result_reject(&b, "field 'refused_paths': more than 256 paths");
	jb_destroy(&b);

	jb_init(&b);
	jb_path_array(&b, "refused_paths", 1, JOB_PATH_MAX + 2);
	jb_expect_result_reject(&b, "field 'refused_paths[0]': longer than");
	jb_destroy(&b);
}

Test(payload, result_decode_rejects_bad_sandbox_fields)
{
	static const char *const str_fields[] = { "changed", "refused_paths" };
	char hex[RESULT_SNAPSHOT_MAX + 2];
	struct jb b;

	for (size_t i = 0; i < 2; i++) {
		jb_init(&b);
		jb_str(&b, str_fields[i], "/a");
		jb_expect_result_reject(&b, "expected an array of paths");
		jb_destroy(&b);
	}
	jb_init(&b);
	jb_int(&b, "version", -1);
	jb_expect_result_reject(&b, "field 'version'");
	jb_destroy(&b);

	jb_init(&b);
	jb_str(&b, "changes", "1");
	jb_expect_result_reject(&b, "field 'changes': expected a map");
	jb_destroy(&b);

	jb_init(&b);
	jb_map1_int(&b, "changes", "added", -2);
	jb_expect_result_reject(&b, "field 'changes'");
	jb_destroy(&b);

	jb_init(&b);
	jb_int(&b, "changed_truncated", 1);
	jb_expect_result_reject(&b, "field 'changed_truncated'");
	jb_destroy(&b);

	jb_init(&b);
	jb_int(&b, "sandbox", 1);
	jb_expect_result_reject(&b, "field 'sandbox'");
	jb_destroy(&b);

	memset(hex, 'a', sizeof(hex));
	hex[RESULT_SNAPSHOT_MAX + 1] = '\0';
	jb_init(&b);
	jb_str(&b, "snapshot", hex);
	jb_expect_result_reject(&b, "field 'snapshot': longer than 64");
	jb_destroy(&b);
}

/* Repeated list fields replace, never leak or double free (ASan). */
Test(payload, result_decode_keeps_the_last_repeated_sandbox_field)
{
	static const char *const one[] = { "/x" };
	struct result *r;
	msgpack_packer *pk;
	struct jb b;

	jb_init(&b);
	jb_str(&b, "id", "j1");
	jb_strv(&b, "changed", one, 1);
	jb_strv(&b, "changed", NULL, 0);
	jb_strv(&b, "refused_paths", one, 1);
	jb_str(&b, "data", "first");
	pk = jb_key(&b, "data");
	msgpack_pack_array(pk, 1);
	msgpack_pack_int(pk, 5);
	jb_str(&b, "sandbox", "a");
	jb_str(&b, "sandbox", "b");
	r = jb_result_ok(&b);
	cr_expect_eq(r->nchanged, 0);
	cr_expect_eq(r->nrefused_paths, 1);
	cr_expect_str_eq(r->sandbox, "b");
	cr_assert_eq(r->data_len, 2);
	cr_expect_eq(r->data[0], 0x91);
	cr_expect_eq(r->data[1], 0x05);
	result_free(r);
	jb_destroy(&b);

	/* A bad second value after a good first one. */
	jb_init(&b);
	jb_strv(&b, "changed", one, 1);
	jb_int(&b, "changed", 3);
	jb_expect_result_reject(&b, "field 'changed'");
	jb_destroy(&b);
}

Test(payload, files_and_long_paths_keep_a_folder_named_workspace)
{
	static const char *const files[] = {
		"/workspace/workspace/x", "1", "workspace/y", "2", "/z/workspace", "3",
	};
	char *longp = malloc(JOB_PATTERN_MAX + 12);
	struct jb b;
	struct job *j;

	cr_assert_not_null(longp);
	jb_init(&b);
	jb_op(&b, op_case("sandbox.create"), "sandbox", "", false);
	jb_strmap(&b, "files", files, 3);
	j = jb_decode_ok(&b);
	cr_assert_eq(j->nfiles, 3);
	cr_expect_str_eq(j->files[0].path, "workspace/x");
	cr_expect_str_eq(j->files[1].path, "y");
	cr_expect_str_eq(j->files[2].path, "z/workspace");
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);

	/* A path of JOB_PATH_MAX bytes, stored with its '/', reads back. */
	for (size_t i = 0; i < JOB_PATH_MAX; i++)
		longp[i] = (i % 2) ? '/' : 'a';
	longp[JOB_PATH_MAX - 1] = 'b';
	longp[JOB_PATH_MAX] = '\0';
	jb_init(&b);
	jb_op(&b, op_case("fs.read"), "sandbox", "", false);
	jb_str(&b, "path", longp);
	j = jb_decode_ok(&b);
	cr_expect_eq(strlen(j->path), JOB_PATH_MAX + 1);
	expect_job_round_trip(j);
	job_free(j);
	jb_destroy(&b);

	/* The pattern bound applies after the alias. */
	memcpy(longp, "/workspace/", 11);
	memset(longp + 11, 'p', JOB_PATTERN_MAX - 1);
	longp[10 + JOB_PATTERN_MAX] = '\0';
	jb_init(&b);
	jb_op(&b, op_case("fs.read"), "sandbox path", "", false);
	jb_rule(&b, longp, "read");
	j = jb_decode_ok(&b);
	cr_expect_eq(strlen(j->perms[0].pattern), JOB_PATTERN_MAX);
	job_free(j);
	jb_destroy(&b);
	free(longp);
}

/*** Cases ***/

/* cases: n maps {stdin, expect[, expect_mode]} (mode NULL: none). */
static void
jb_cases(struct jb *b, size_t n, const char *mode)
{
	msgpack_packer *pk = jb_key(b, "cases");

	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++) {
		msgpack_pack_map(pk, 2 + (mode != NULL));
		pstr(pk, "stdin");
		pbin(pk, "in\n", 3);
		pstr(pk, "expect");
		pstr(pk, "out\n");
		if (mode != NULL) {
			pstr(pk, "expect_mode");
			pstr(pk, mode);
		}
	}
}

Test(payload, cases_decode_round_trip_and_never_persist)
{
	struct jb b;
	struct job *j = NULL, *back = NULL;
	struct err e = { 0 };
	char id[JOB_ID_MAX + 1], *buf = NULL;
	size_t len = 0, n = 0;
	const char *bytes;

	jb_init(&b);
	jb_exec(&b, "j1");
	jb_str(&b, "sandbox", "sb");
	jb_cases(&b, 3, "trim");
	bytes = jb_finish(&b, &n);
	cr_assert_eq(payload_job_decode(bytes, n, &j, id, &e), 0, "%s", e.msg);
	cr_expect_eq(j->ncases, 3);
	cr_expect_not(j->persist, "a run with cases on a sandbox commits nothing");
	cr_expect_str_eq(j->cases[2].expect_mode, "trim");
	cr_expect_eq(j->cases[1].stdin_len, 3);
	cr_assert_eq(payload_job_encode(j, &buf, &len), 0);
	cr_assert_eq(payload_job_decode(buf, len, &back, id, &e), 0, "%s", e.msg);
	cr_expect_eq(back->ncases, 3);
	cr_expect_eq(back->cases[0].expect_len, 4);
	cr_expect(memcmp(back->cases[0].expect, "out\n", 4) == 0);
	job_free(back);
	job_free(j);
	free(buf);
	jb_destroy(&b);
}

Test(payload, rejects_bad_cases)
{
	REJECT_EXEC_WITH("field 'cases[0].expect_mode': expected exact, trim or regex",
	    jb_cases(b, 1, "fuzzy"));
	REJECT_EXEC_WITH("field 'cases': more than 1000 cases", jb_cases(b, 1001, NULL));
	REJECT_EXEC_WITH("field 'cases': not with stream", jb_cases(b, 1, NULL);
	    jb_bool(b, "stream", true));
	REJECT_EXEC_WITH("field 'cases': each case has its own stdin", jb_cases(b, 1, NULL);
	    jb_str(b, "stdin", "x"));
	REJECT_EXEC_WITH("field 'cases': cases never commit", jb_cases(b, 1, NULL);
	    jb_str(b, "sandbox", "sb"); jb_bool(b, "persist", true));
	REJECT_EXEC_WITH("field 'cases': expected a non-empty array",
	    jb_key(b, "cases"); msgpack_pack_array(&b->pk, 0));
}
