/*
 * config_test.c - unit tests for config/config.c.
 *
 * Every test starts from config_defaults() in the fixture and frees in the
 * fixture, so ASan/LSan see every allocation released. Files are parsed from
 * strings named "sandq.conf" unless the test is about the file itself, so
 * expected messages read like what an operator would see. The example file
 * is read from config/sandq.conf.example: tests run from the repository root.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config/config.h"
#include "../images/cache.h"
#include "../store/store.h"

#define EXAMPLE "config/sandq.conf.example"
#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

static struct config c;
static struct err e;

static void
setup(void)
{
	config_defaults(&c);
	err_clear(&e);
}

static void
teardown(void)
{
	config_free(&c);
}

TestSuite(config, .init = setup, .fini = teardown, .timeout = 10);

/*** Helpers ***/

static int
load(const char *text)
{
	return config_load_string(&c, text, "sandq.conf", &e);
}

/* Asserts that text fails to load with exactly msg. */
static void
expect_load_error(const char *text, const char *msg)
{
	int rc = load(text);

	cr_expect_eq(rc, -EINVAL, "rc %d for:\n%s", rc, text);
	cr_expect_str_eq(e.msg, msg);
}

static void
set_ok(struct config *cf, const char *assignment)
{
	struct err err;

	cr_assert_eq(config_set(cf, assignment, &err), 0, "%s: %s", assignment,
	    err.msg);
}

/* The effective configuration as config_print() writes it (malloc'd). */
static char *
print_to_string(const struct config *cf)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	config_print(cf, f);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

static char *
read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long len;

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	cr_assert_geq(len, 0);
	rewind(f);
	buf = malloc((size_t)len + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

static void
expect_limits_eq(const struct job_limits *a, const struct job_limits *b)
{
	cr_expect_eq(a->wall_ms, b->wall_ms);
	cr_expect_eq(a->cpu_ms, b->cpu_ms);
	cr_expect_eq(a->memory_bytes, b->memory_bytes);
	cr_expect_eq(a->pids, b->pids);
	cr_expect_eq(a->output_bytes, b->output_bytes);
	cr_expect_eq(a->disk_bytes, b->disk_bytes);
	cr_expect_eq(a->files, b->files);
}

static void
expect_config_eq(const struct config *a, const struct config *b)
{
	cr_expect_str_eq(a->redis, b->redis);
	cr_expect_str_eq(a->state, b->state);
	cr_expect_eq(a->workers, b->workers);
	cr_assert_eq(a->ntenants, b->ntenants);
	for (size_t i = 0; i < a->ntenants; i++)
		cr_expect_str_eq(a->tenants[i], b->tenants[i]);
	cr_expect_null(a->tenants[a->ntenants]);
	cr_expect_null(b->tenants[b->ntenants]);
	cr_expect_str_eq(a->prefix, b->prefix);
	cr_expect_str_eq(a->host, b->host);
	cr_expect_str_eq(a->log_level, b->log_level);
	cr_expect_eq(a->drain_timeout_ms, b->drain_timeout_ms);
	cr_expect_eq(a->result_ttl_s, b->result_ttl_s);
	cr_expect_eq(a->read_block_ms, b->read_block_ms);
	cr_expect_str_eq(a->worker_path, b->worker_path);
	cr_expect_eq(a->sandbox_uid_base, b->sandbox_uid_base);
	cr_expect_str_eq(a->default_preset, b->default_preset);
	cr_expect_eq(a->max_job_bytes, b->max_job_bytes);
	cr_expect_eq(a->respawn_backoff_ms, b->respawn_backoff_ms);
	cr_expect_eq(a->keep_versions, b->keep_versions);
	cr_expect_str_eq(a->workspace_overlay, b->workspace_overlay);
	cr_expect_str_eq(a->snapshot_store, b->snapshot_store);
	cr_expect_eq(a->audit_stream_max, b->audit_stream_max);
	cr_expect_eq(a->lease_ms, b->lease_ms);
	cr_expect_eq(a->worker_max_jobs, b->worker_max_jobs);
	cr_expect_eq(a->max_attempts, b->max_attempts);
	cr_expect_eq(a->retry_backoff_ms, b->retry_backoff_ms);
	cr_expect_eq(a->worker_max_memory_growth, b->worker_max_memory_growth);
	cr_expect_eq(a->worker_setup_timeout_ms, b->worker_setup_timeout_ms);
	cr_expect_eq(a->worker_stuck_grace_ms, b->worker_stuck_grace_ms);
	cr_expect_eq(a->job_socket_bytes, b->job_socket_bytes);
	cr_expect_eq(a->job_sockets, b->job_sockets);
	cr_expect_eq(a->audit_retention_s, b->audit_retention_s);
	cr_expect_eq(a->audit_max_bytes, b->audit_max_bytes);
	cr_assert_eq(a->nimage_sources, b->nimage_sources);
	for (size_t i = 0; i < a->nimage_sources; i++)
		cr_expect_str_eq(a->image_sources[i], b->image_sources[i]);
	cr_expect_str_eq(a->default_image, b->default_image);
	cr_expect_eq(a->image_cache_bytes, b->image_cache_bytes);
	cr_expect_eq(a->image_pull_timeout_ms, b->image_pull_timeout_ms);
	cr_expect_eq(a->image_unpack_uid, b->image_unpack_uid);
	cr_assert_eq(a->nimage_plain_http, b->nimage_plain_http);
	for (size_t i = 0; i < a->nimage_plain_http; i++)
		cr_expect_str_eq(a->image_plain_http[i], b->image_plain_http[i]);
	cr_expect_eq(a->image_max_layer_bytes, b->image_max_layer_bytes);
	cr_expect_eq(a->image_max_layer_entries, b->image_max_layer_entries);
	cr_expect_eq(a->image_max_layer_ratio, b->image_max_layer_ratio);
	expect_limits_eq(&a->ceiling, &b->ceiling);
}

/*
 * Gives every option a value other than its default, including sizes that
 * no suffix divides and the extremes of some bounds.
 */
static const char *const non_defaults[] = {
	"redis=unix:///run/redis/redis.sock",
	"state=/srv/sandq state",
	"workers=7",
	"tenants=alpha,beta-2,gamma_3",
	"prefix=sq2",
	"host=node-1.example.org",
	"log_level=debug",
	"drain_timeout_ms=0",
	"result_ttl_s=2592000",
	"read_block_ms=10",
	"worker_path=/opt/sandq/sandq-worker",
	"sandbox_uid_base=4000000000",
	"default_preset=permissive",
	"max_job_bytes=1025",
	"respawn_backoff_ms=60000",
	"keep_versions=1000000",
	"workspace_overlay=off",
	"snapshot_store=redis",
	"audit_stream_max=100",
	"lease_ms=300",
	"worker_max_jobs=0",
	"max_attempts=100",
	"retry_backoff_ms=0",
	"worker_max_memory_growth=1025",
	"worker_setup_timeout_ms=100",
	"worker_stuck_grace_ms=3600000",
	"job_socket_bytes=0",
	"job_sockets=16",
	"audit_retention_s=315360000",
	"audit_max_bytes=3M",
	"image_sources=host, docker://r.io:5000/team/*,oci:/srv/img/*",
	"default_image=docker://r.io:5000/team/app:v1",
	"image_cache_bytes=0",
	"image_pull_timeout_ms=86400000",
	"image_unpack_uid=3999999000",
	"image_plain_http=r.io:5000, 127.0.0.1:5001",
	"image_max_layer_bytes=1025",
	"image_max_layer_entries=1",
	"image_max_layer_ratio=1000000",
	"limits.wall_ms=1",
	"limits.cpu_ms=86400000",
	"limits.memory_bytes=3000000",
	"limits.pids=1",
	"limits.output_bytes=1G",
	"limits.disk_bytes=65537",
	"limits.files=16",
};

static void
set_non_defaults(struct config *cf)
{
	for (size_t i = 0; i < sizeof(non_defaults) / sizeof(non_defaults[0]); i++)
		set_ok(cf, non_defaults[i]);
}

/*** Defaults ***/

Test(config, defaults_match_the_documented_values)
{
	cr_expect_str_eq(c.redis, "redis://127.0.0.1:6379");
	cr_expect_str_eq(c.state, "/var/lib/sandq");
	cr_expect_eq(c.workers, 0);
	cr_assert_eq(c.ntenants, 1);
	cr_expect_str_eq(c.tenants[0], "default");
	cr_expect_null(c.tenants[1]);
	cr_expect_str_eq(c.prefix, "sandq");
	cr_expect_str_eq(c.host, "");
	cr_expect_str_eq(c.log_level, "info");
	cr_expect_eq(c.drain_timeout_ms, 30000);
	cr_expect_eq(c.result_ttl_s, 86400);
	cr_expect_eq(c.read_block_ms, 2000);
	cr_expect_str_eq(c.worker_path, "");
	cr_expect_eq(c.sandbox_uid_base, 100000);
	cr_expect_str_eq(c.default_preset, "normal");
	cr_expect_eq(c.max_job_bytes, 32 * MIB);
	cr_expect_eq(c.respawn_backoff_ms, 100);
	cr_expect_eq(c.keep_versions, 16);
	cr_expect_eq(c.keep_versions, STORE_KEEP_VERSIONS_DEFAULT);
	cr_expect_str_eq(c.workspace_overlay, "auto");
	cr_expect_str_eq(c.snapshot_store, "local");
	cr_expect_eq(c.audit_stream_max, 100000);
	cr_expect_eq(c.lease_ms, 30000);
	cr_expect_eq(c.worker_max_jobs, 10000);
	cr_expect_eq(c.max_attempts, 3);
	cr_expect_eq(c.retry_backoff_ms, 1000);
	cr_expect_eq(c.worker_max_memory_growth, 256 * MIB);
	cr_expect_eq(c.worker_setup_timeout_ms, 30000);
	cr_expect_eq(c.worker_stuck_grace_ms, 30000);
	cr_expect_eq(c.job_socket_bytes, 64 * MIB);
	cr_expect_eq(c.job_sockets, 1024);
	cr_expect_eq(c.audit_retention_s, 2592000);
	cr_expect_eq(c.audit_max_bytes, GIB);
	cr_expect_eq(c.nimage_sources, 0, "empty: host only");
	cr_expect_str_eq(c.default_image, "host");
	cr_expect_eq(c.image_cache_bytes, 10 * GIB);
	cr_expect_eq(c.image_pull_timeout_ms, 1800000);
	cr_expect_eq(c.image_unpack_uid, 0, "sandbox_uid_base - 1 once finished");
	cr_expect_eq(c.nimage_plain_http, 0, "TLS everywhere");
	/* The unpacker's bounds are the cache's own defaults. */
	cr_expect_eq(c.image_max_layer_bytes, 16 * GIB);
	cr_expect_eq((uint64_t)c.image_max_layer_bytes, IMG_UNPACK_BYTES_DEFAULT);
	cr_expect_eq((uint64_t)c.image_max_layer_entries, IMG_UNPACK_ENTRIES_DEFAULT);
	cr_expect_eq((uint64_t)c.image_max_layer_ratio, IMG_UNPACK_RATIO_DEFAULT);
	cr_expect_eq(c.ceiling.wall_ms, 3600000);
	cr_expect_eq(c.ceiling.cpu_ms, 3600000);
	cr_expect_eq(c.ceiling.memory_bytes, 8 * GIB);
	cr_expect_eq(c.ceiling.pids, 4096);
	cr_expect_eq(c.ceiling.output_bytes, 64 * MIB);
	cr_expect_eq(c.ceiling.disk_bytes, 4 * GIB);
	cr_expect_eq(c.ceiling.files, 65536);
}

Test(config, free_twice_after_defaults_is_safe)
{
	config_free(&c);
	config_free(&c);
	config_free(NULL);
	cr_expect_null(c.redis);
	cr_expect_null(c.tenants);
	cr_expect_eq(c.ntenants, 0);
	config_defaults(&c);
	cr_expect_str_eq(c.prefix, "sandq");
}

Test(config, empty_text_changes_nothing)
{
	struct config d;

	cr_assert_eq(load(""), 0, "%s", e.msg);
	config_defaults(&d);
	expect_config_eq(&c, &d);
	config_free(&d);
}

/*** The example file ***/

Test(config, example_file_sets_every_option_to_its_default)
{
	struct config d;

	/* Start from all non-defaults so that an option missing from the
	 * example would keep a wrong value. */
	set_non_defaults(&c);
	cr_assert_eq(config_load_file(&c, EXAMPLE, &e), 0, "%s", e.msg);
	config_defaults(&d);
	expect_config_eq(&c, &d);
	config_free(&d);
}

Test(config, example_file_documents_every_option)
{
	char *printed = print_to_string(&c);
	char *example = read_text(EXAMPLE);
	char *save = NULL;
	int nkeys = 0;

	for (char *line = strtok_r(printed, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		char *eq = strstr(line, " =");
		char want[128];

		/* Key lines are "key = value", or "key =" for an empty value. */
		if (line[0] == ';' || line[0] == '[' || eq == NULL ||
		    (eq[2] != ' ' && eq[2] != '\0'))
			continue;
		*eq = '\0';
		nkeys++;
		snprintf(want, sizeof(want), "\n%s = ", line);
		if (strstr(example, want) == NULL)
			snprintf(want, sizeof(want), "\n%s =\n", line);
		cr_expect_not_null(strstr(example, want), "no '%s =' line", line);
		snprintf(want, sizeof(want), "\n; %s - ", line);
		cr_expect_not_null(strstr(example, want), "no comment block for %s",
		    line);
	}
	cr_expect_eq(nkeys, 69);
	free(printed);
	free(example);
}

/*** File syntax and errors ***/

Test(config, rejects_unknown_key_with_file_and_line)
{
	expect_load_error("[sandqd]\nworkers = 2\n\nwrokers = 3\n",
	    "sandq.conf:4: unknown option 'wrokers' in section [sandqd]");
}

Test(config, rejects_key_of_the_other_section)
{
	expect_load_error("[limits]\nworkers = 2\n",
	    "sandq.conf:2: unknown option 'workers' in section [limits]");
}

Test(config, rejects_unknown_section_with_file_and_line)
{
	expect_load_error("[sandqd]\nworkers = 2\n[sandq]\nprefix = x\n",
	    "sandq.conf:3: unknown section [sandq]");
}

Test(config, rejects_unknown_section_even_when_empty)
{
	expect_load_error("; nothing\n[bogus]\n",
	    "sandq.conf:2: unknown section [bogus]");
}

Test(config, rejects_key_outside_a_section)
{
	expect_load_error("workers = 2\n",
	    "sandq.conf:1: option 'workers' is outside a section");
}

Test(config, rejects_line_that_is_not_a_key_value_pair)
{
	expect_load_error("[sandqd]\nworkers 4\n",
	    "sandq.conf:2: expected 'key = value', '[section]' or a comment");
}

Test(config, rejects_unterminated_section_header)
{
	expect_load_error("[sandqd\nworkers = 4\n",
	    "sandq.conf:1: expected ']' after the section name");
}

Test(config, rejects_line_longer_than_the_parser_buffer)
{
	char text[400];

	snprintf(text, sizeof(text), "[sandqd]\nstate = /%0250d\n", 0);
	expect_load_error(text, "sandq.conf:2: line is longer than 199 bytes");
}

Test(config, stops_at_the_first_error)
{
	expect_load_error("[sandqd]\nworkers = 2\nworkers = x\nprefix = other\n"
	    "wrokers = 1\n", "sandq.conf:3: workers: expected an integer, got 'x'");
	/* Lines before the error were applied, lines after were not. */
	cr_expect_eq(c.workers, 2);
	cr_expect_str_eq(c.prefix, "sandq");
}

Test(config, accepts_comments_blank_lines_and_crlf)
{
	cr_assert_eq(load("\xEF\xBB\xBF; a comment\r\n# another\r\n\r\n"
	    "[sandqd] ; trailing\r\n  workers = 4 ; four workers\r\n"
	    "state = /a;b\r\n[limits]\r\npids: 7\r\n"), 0, "%s", e.msg);
	cr_expect_eq(c.workers, 4);
	/* ';' starts a comment only after whitespace. */
	cr_expect_str_eq(c.state, "/a;b");
	cr_expect_eq(c.ceiling.pids, 7);
}

Test(config, later_lines_override_earlier_ones)
{
	cr_assert_eq(load("[sandqd]\nworkers = 2\nworkers = 3\n"), 0, "%s", e.msg);
	cr_expect_eq(c.workers, 3);
}

Test(config, missing_file_returns_errno_and_names_the_path)
{
	int rc = config_load_file(&c, "/nonexistent/sandq.conf", &e);

	cr_expect_eq(rc, -ENOENT);
	cr_expect_eq(e.code, -ENOENT);
	cr_expect_str_eq(e.msg, "/nonexistent/sandq.conf: No such file or directory");
}

Test(config, file_errors_name_the_file_path_and_line)
{
	char path[] = "/tmp/config_test.XXXXXX";
	const char text[] = "[sandqd]\n\nworkers = 2000\n";
	char want[128];
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	cr_expect_eq(config_load_file(&c, path, &e), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: workers: must be at most 1024", path);
	cr_expect_str_eq(e.msg, want);
	unlink(path);
}

Test(config, file_with_a_nul_byte_is_rejected)
{
	char path[] = "/tmp/config_test.XXXXXX";
	const char text[] = "[sandqd]\nworkers = 2\0\n";
	char want[128];
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	cr_expect_eq(config_load_file(&c, path, &e), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: contains a NUL byte", path);
	cr_expect_str_eq(e.msg, want);
	unlink(path);
}

/*** Integers and bounds ***/

Test(config, rejects_integer_syntax_errors)
{
	expect_load_error("[sandqd]\nworkers = abc\n",
	    "sandq.conf:2: workers: expected an integer, got 'abc'");
	expect_load_error("[sandqd]\nworkers = 4x\n",
	    "sandq.conf:2: workers: expected an integer, got '4x'");
	expect_load_error("[sandqd]\nworkers =\n",
	    "sandq.conf:2: workers: expected an integer, got ''");
	expect_load_error("[sandqd]\nworkers = 99999999999999999999\n",
	    "sandq.conf:2: workers: expected an integer, got '99999999999999999999'");
	/* An integer option takes no size suffix. */
	expect_load_error("[limits]\nwall_ms = 1k\n",
	    "sandq.conf:2: wall_ms: expected an integer, got '1k'");
}

Test(config, rejects_integers_outside_their_bounds)
{
	expect_load_error("[sandqd]\nworkers = 1025\n",
	    "sandq.conf:2: workers: must be at most 1024");
	expect_load_error("[sandqd]\nworkers = -1\n",
	    "sandq.conf:2: workers: must be at least 0");
	expect_load_error("[sandqd]\nresult_ttl_s = 0\n",
	    "sandq.conf:2: result_ttl_s: must be at least 1");
	expect_load_error("[sandqd]\nread_block_ms = 9\n",
	    "sandq.conf:2: read_block_ms: must be at least 10");
	expect_load_error("[limits]\nfiles = 15\n",
	    "sandq.conf:2: files: must be at least 16");
	expect_load_error("[limits]\npids = 4194305\n",
	    "sandq.conf:2: pids: must be at most 4194304");
}

Test(config, sandbox_uid_base_can_never_be_zero)
{
	expect_load_error("[sandqd]\nsandbox_uid_base = 0\n",
	    "sandq.conf:2: sandbox_uid_base: must be at least 1000");
	expect_load_error("[sandqd]\nsandbox_uid_base = 4000000001\n",
	    "sandq.conf:2: sandbox_uid_base: must be at most 4000000000");
	cr_expect_eq(c.sandbox_uid_base, 100000);
}

Test(config, keep_versions_bounds_and_zero_keeping_everything)
{
	expect_load_error("[sandqd]\nkeep_versions = -1\n",
	    "sandq.conf:2: keep_versions: must be at least 0");
	expect_load_error("[sandqd]\nkeep_versions = 1000001\n",
	    "sandq.conf:2: keep_versions: must be at most 1000000");
	cr_assert_eq(load("[sandqd]\nkeep_versions = 0\n"), 0, "%s", e.msg);
	cr_expect_eq(c.keep_versions, 0);
	set_ok(&c, "keep_versions=3");
	cr_expect_eq(c.keep_versions, 3);
}

/*
 * Worker hygiene: memory growth is off at 0 and takes test-sized values;
 * the two timeouts cannot be so short that a healthy worker is killed in
 * a loop, nor longer than an hour.
 */
Test(config, worker_hygiene_keys_have_their_bounds)
{
	expect_load_error("[sandqd]\nworker_max_memory_growth = 2T\n",
	    "sandq.conf:2: worker_max_memory_growth: must be at most 1T");
	expect_load_error("[sandqd]\nworker_setup_timeout_ms = 99\n",
	    "sandq.conf:2: worker_setup_timeout_ms: must be at least 100");
	expect_load_error("[sandqd]\nworker_setup_timeout_ms = 3600001\n",
	    "sandq.conf:2: worker_setup_timeout_ms: must be at most 3600000");
	expect_load_error("[sandqd]\nworker_stuck_grace_ms = 99\n",
	    "sandq.conf:2: worker_stuck_grace_ms: must be at least 100");
	expect_load_error("[sandqd]\nworker_stuck_grace_ms = 3600001\n",
	    "sandq.conf:2: worker_stuck_grace_ms: must be at most 3600000");
	expect_load_error("[sandqd]\nworker_max_memory_growth = -1\n",
	    "sandq.conf:2: worker_max_memory_growth: expected a size such as 512, "
	    "64k, 16M or 2G, got '-1'");
	cr_assert_eq(load("[sandqd]\nworker_max_memory_growth = 0\n"
	    "worker_setup_timeout_ms = 100\nworker_stuck_grace_ms = 3600000\n"),
	    0, "%s", e.msg);
	cr_expect_eq(c.worker_max_memory_growth, 0);
	cr_expect_eq(c.worker_setup_timeout_ms, 100);
	cr_expect_eq(c.worker_stuck_grace_ms, 3600000);
	set_ok(&c, "worker_max_memory_growth=1T");
	cr_expect_eq(c.worker_max_memory_growth, (int64_t)TIB);
	set_ok(&c, "worker_max_memory_growth=1M");
	cr_expect_eq(c.worker_max_memory_growth, (int64_t)MIB);
}

Test(config, accepts_integers_at_their_bounds)
{
	cr_assert_eq(load("[sandqd]\nworkers = 1024\ndrain_timeout_ms = 0\n"
	    "[limits]\nwall_ms = 86400000\nfiles = 16\n"), 0, "%s", e.msg);
	cr_expect_eq(c.workers, 1024);
	cr_expect_eq(c.drain_timeout_ms, 0);
	cr_expect_eq(c.ceiling.wall_ms, 86400000);
	cr_expect_eq(c.ceiling.files, 16);
}

/*** Sizes ***/

Test(config, accepts_size_suffixes)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} cases[] = {
		{ "2048", 2048 },
		{ "64k", 64 * KIB },
		{ "64K", 64 * KIB },
		{ "16M", 16 * MIB },
		{ "16MiB", 16 * MIB },
		{ "16MB", 16 * MIB },
		{ "2G", 2 * GIB },
		{ "1T", 1 * TIB },
		{ "64T", 64 * TIB },
	};
	char text[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(text, sizeof(text), "[limits]\nmemory_bytes = %s\n",
		    cases[i].text);
		if (cases[i].bytes < MIB)
			snprintf(text, sizeof(text), "[sandqd]\nmax_job_bytes = %s\n",
			    cases[i].text);
		cr_assert_eq(load(text), 0, "%s: %s", cases[i].text, e.msg);
		if (cases[i].bytes < MIB)
			cr_expect_eq((uint64_t)c.max_job_bytes, cases[i].bytes,
			    "%s", cases[i].text);
		else
			cr_expect_eq(c.ceiling.memory_bytes, cases[i].bytes, "%s",
			    cases[i].text);
	}
}

Test(config, rejects_size_syntax_errors)
{
	expect_load_error("[sandqd]\nmax_job_bytes = 16Q\n",
	    "sandq.conf:2: max_job_bytes: expected a size such as 512, 64k, 16M "
	    "or 2G, got '16Q'");
	expect_load_error("[sandqd]\nmax_job_bytes = -1M\n",
	    "sandq.conf:2: max_job_bytes: expected a size such as 512, 64k, 16M "
	    "or 2G, got '-1M'");
	expect_load_error("[sandqd]\nmax_job_bytes = M\n",
	    "sandq.conf:2: max_job_bytes: expected a size such as 512, 64k, 16M "
	    "or 2G, got 'M'");
	expect_load_error("[limits]\nmemory_bytes = 99999999999T\n",
	    "sandq.conf:2: memory_bytes: expected a size such as 512, 64k, 16M "
	    "or 2G, got '99999999999T'");
}

Test(config, rejects_sizes_outside_their_bounds_in_their_own_units)
{
	expect_load_error("[sandqd]\nmax_job_bytes = 257M\n",
	    "sandq.conf:2: max_job_bytes: must be at most 256M");
	expect_load_error("[sandqd]\nmax_job_bytes = 1023\n",
	    "sandq.conf:2: max_job_bytes: must be at least 1k");
	expect_load_error("[limits]\nmemory_bytes = 65T\n",
	    "sandq.conf:2: memory_bytes: must be at most 64T");
	expect_load_error("[limits]\ndisk_bytes = 1k\n",
	    "sandq.conf:2: disk_bytes: must be at least 64k");
	cr_expect_eq(c.max_job_bytes, 32 * MIB);
}

/*** Strings and enums ***/

Test(config, rejects_unknown_enum_values)
{
	expect_load_error("[sandqd]\nlog_level = verbose\n",
	    "sandq.conf:2: log_level: expected one of error, warn, info, debug, "
	    "got 'verbose'");
	expect_load_error("[sandqd]\ndefault_preset = lax\n",
	    "sandq.conf:2: default_preset: expected one of strict, normal, "
	    "permissive, got 'lax'");
	/* Values are case-sensitive, like the protocol's preset names. */
	expect_load_error("[sandqd]\nlog_level = INFO\n",
	    "sandq.conf:2: log_level: expected one of error, warn, info, debug, "
	    "got 'INFO'");
}

Test(config, accepts_every_enum_value)
{
	static const char *const levels[] = { "error", "warn", "info", "debug" };
	static const char *const presets[] = { "strict", "normal", "permissive" };
	char text[64];

	for (size_t i = 0; i < 4; i++) {
		snprintf(text, sizeof(text), "[sandqd]\nlog_level = %s\n", levels[i]);
		cr_expect_eq(load(text), 0, "%s", e.msg);
		cr_expect_str_eq(c.log_level, levels[i]);
	}
	for (size_t i = 0; i < 3; i++) {
		enum job_preset p;

		snprintf(text, sizeof(text), "[sandqd]\ndefault_preset = %s\n",
		    presets[i]);
		cr_expect_eq(load(text), 0, "%s", e.msg);
		cr_expect_str_eq(c.default_preset, presets[i]);
		/* Every accepted name is one the job codec knows. */
		cr_expect_eq(job_preset_parse(presets[i], &p), 0);
	}
}

Test(config, net_modes_are_known_modes_once)
{
	enum job_net n;

	cr_expect_eq(load("[sandqd]\nnet_modes = unix\n"), 0, "%s", e.msg);
	cr_assert_eq(c.nnet_modes, 1);
	cr_expect_str_eq(c.net_modes[0], "unix");
	/* Every accepted name is one the job codec knows. */
	cr_expect_eq(job_net_parse(c.net_modes[0], &n), 0);
	cr_expect_eq(load("[sandqd]\nnet_modes = none, unix\n"), 0, "%s", e.msg);
	cr_expect_eq(c.nnet_modes, 2);
	cr_expect_eq(job_net_parse("none", &n), 0);
	expect_load_error("[sandqd]\nnet_modes = none, egress\n",
	    "sandq.conf:2: net_modes: 'egress' is not one of none, unix, allow");
	expect_load_error("[sandqd]\nnet_modes = none, none\n",
	    "sandq.conf:2: net_modes: 'none' is listed twice");
	expect_load_error("[sandqd]\nnet_modes =\n",
	    "sandq.conf:2: net_modes: at least one item is required");
}

Test(config, image_sources_are_checked_patterns)
{
	cr_expect_eq(load("[sandqd]\nimage_sources = host,\n  docker://r.io/team/*, "
	    "oci:/srv/img/*\n"), 0, "%s", e.msg);
	cr_assert_eq(c.nimage_sources, 3);
	cr_expect_str_eq(c.image_sources[1], "docker://r.io/team/*");
	cr_expect_eq(load("[sandqd]\nimage_sources =\n"), 0, "%s", e.msg);
	cr_expect_eq(c.nimage_sources, 0, "empty is allowed: host only");
	expect_load_error("[sandqd]\nimage_sources = host, docker://registry/*\n",
	    "sandq.conf:2: image_sources: pattern 2: registry host 'registry': needs "
	    "a '.', a port or to be localhost (skopeo would read it as a folder of "
	    "Docker Hub)");
	expect_load_error("[sandqd]\nimage_sources = oci:/srv/img*\n",
	    "sandq.conf:2: image_sources: pattern 1: path '/srv/img*': a '*' may "
	    "only be the last component");
	expect_load_error("[sandqd]\nimage_sources = host, host\n",
	    "sandq.conf:2: image_sources: 'host' is listed twice");
	expect_load_error("[sandqd]\nimage_sources = numpy\n",
	    "sandq.conf:2: image_sources: pattern 1: expected host, "
	    "docker://HOST[:PORT]/REPO, docker://HOST[:PORT]/PREFIX*, or oci:, "
	    "oci-archive: or docker-archive: and /DIR/* or /PATH");
	cr_expect_eq(c.nimage_sources, 0, "a refused list changed nothing");
}

Test(config, the_image_cache_options_are_checked)
{
	cr_expect_eq(load("[sandqd]\nimage_plain_http = 127.0.0.1:5000, R.io\n"), 0,
	    "%s", e.msg);
	cr_assert_eq(c.nimage_plain_http, 2);
	cr_expect_str_eq(c.image_plain_http[1], "R.io");
	expect_load_error("[sandqd]\nimage_plain_http = r.io/team\n",
	    "sandq.conf:2: image_plain_http: registry 1: expected HOST[:PORT]");
	expect_load_error("[sandqd]\nimage_plain_http = registry\n",
	    "sandq.conf:2: image_plain_http: registry 1: registry host 'registry': "
	    "needs a '.', a port or to be localhost (skopeo would read it as a "
	    "folder of Docker Hub)");
	/* The unpacking uid: sandbox_uid_base - 1 unless set, never a sandbox's. */
	cr_expect_eq(load("[sandqd]\nsandbox_uid_base = 5000\nworkers = 2\n"), 0,
	    "%s", e.msg);
	cr_expect_eq(config_finish(&c, &e), 0, "%s", e.msg);
	cr_expect_eq(c.image_unpack_uid, 4999);
	cr_expect_eq(load("[sandqd]\nsandbox_uid_base = 5000\nworkers = 2\n"
	    "image_unpack_uid = 5001\n"), 0, "%s", e.msg);
	cr_expect_eq(config_finish(&c, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "image_unpack_uid: 5001 is the uid of worker 1's "
	    "sandboxes (sandbox_uid_base 5000)");
}

/*
 * The unpacker's bounds per layer: never 0 (which the cache would read as
 * its default, not as "no bound"), a ratio of at least 2 (at 1 almost no
 * compressed layer passes), sizes with suffixes.
 */
Test(config, the_image_layer_bounds_are_checked)
{
	expect_load_error("[sandqd]\nimage_max_layer_bytes = 0\n",
	    "sandq.conf:2: image_max_layer_bytes: must be at least 1k");
	expect_load_error("[sandqd]\nimage_max_layer_entries = 0\n",
	    "sandq.conf:2: image_max_layer_entries: must be at least 1");
	expect_load_error("[sandqd]\nimage_max_layer_entries = 1000000001\n",
	    "sandq.conf:2: image_max_layer_entries: must be at most 1000000000");
	expect_load_error("[sandqd]\nimage_max_layer_ratio = 1\n",
	    "sandq.conf:2: image_max_layer_ratio: must be at least 2");
	expect_load_error("[sandqd]\nimage_max_layer_ratio = 1000001\n",
	    "sandq.conf:2: image_max_layer_ratio: must be at most 1000000");
	cr_assert_eq(load("[sandqd]\nimage_max_layer_bytes = 8M\n"
	    "image_max_layer_entries = 100\nimage_max_layer_ratio = 50\n"), 0, "%s", e.msg);
	cr_expect_eq(c.image_max_layer_bytes, 8 * MIB);
	cr_expect_eq(c.image_max_layer_entries, 100);
	cr_expect_eq(c.image_max_layer_ratio, 50);
	set_ok(&c, "image_max_layer_bytes=1024T");
	cr_expect_eq(c.image_max_layer_bytes, (int64_t)1 << 50);
}

Test(config, default_image_is_a_reference_within_image_sources)
{
	cr_expect_eq(load("[sandqd]\ndefault_image = docker://r.io/app\n"
	    "image_sources = docker://r.io/*\n"), 0, "%s", e.msg);
	cr_expect_eq(config_finish(&c, &e), 0, "%s", e.msg);
	expect_load_error("[sandqd]\ndefault_image = docker://r.io/App\n",
	    "sandq.conf:2: default_image: repository component 'App': expected "
	    "lower-case letters and digits, separated by '.', '_', '__' or '-'");
	expect_load_error("[sandqd]\ndefault_image = numpy\n",
	    "sandq.conf:2: default_image: a tenant's image name cannot be the host's "
	    "default");
	/* Allowed by the list: checked once everything is read. */
	set_ok(&c, "image_sources=");
	cr_expect_eq(config_finish(&c, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "default_image: 'docker://r.io/app' is not within "
	    "image_sources (empty: host only)");
	set_ok(&c, "image_sources=oci:/srv/*");
	set_ok(&c, "default_image=host");
	cr_expect_eq(config_finish(&c, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "default_image: 'host' is not within image_sources");
	set_ok(&c, "image_sources=oci:/srv/*,host");
	cr_expect_eq(config_finish(&c, &e), 0, "%s", e.msg);
}

Test(config, a_tenant_section_narrows_image_sources_on_one_line)
{
	char long_list[300];

	cr_assert_eq(load("[sandqd]\ntenants = a\nimage_sources = host, oci:/srv/*\n"
	    "[tenant.a]\nimage_sources = oci:/srv/a/*\n"), 0, "%s", e.msg);
	cr_assert_eq(config_finish(&c, &e), 0, "%s", e.msg);
	cr_assert_not_null(config_tenant_conf(&c, "a"));
	cr_assert_eq(config_tenant_conf(&c, "a")->nimage_sources, 1);
	cr_expect_str_eq(config_tenant_conf(&c, "a")->image_sources[0], "oci:/srv/a/*");
	expect_load_error("[tenant.a]\nimage_sources = docker://r.io/a:v1\n",
	    "sandq.conf:2: image_sources: [tenant.a] field 'image_sources': pattern 1: "
	    "a pattern names no tag or digest");
	snprintf(long_list, sizeof(long_list), "tenant.a.image_sources=oci:/%0170d/*", 0);
	cr_expect_eq(config_set(&c, long_list, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set tenant.a.image_sources: [tenant.a] "
	    "image_sources: longer than 160 bytes");
}

Test(config, tenant_sections_give_a_tenant_its_own_net_modes)
{
	char *const *m;
	size_t n;

	cr_assert_eq(load("[sandqd]\ntenants = a, b\nnet_modes = none\n"
	    "[tenant.b]\nnet_modes = unix,\n  none\n"), 0, "%s", e.msg);
	cr_assert_eq(config_finish(&c, &e), 0, "%s", e.msg);
	m = config_net_modes(&c, "a", &n);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(m[0], "none", "a has no section: the host's list");
	m = config_net_modes(&c, "b", &n);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(m[0], "unix");
	cr_expect_str_eq(m[1], "none");
	cr_expect_eq(config_set(&c, "tenant.a.net_modes=unix", &e), 0, "%s", e.msg);
	m = config_net_modes(&c, "a", &n);
	cr_expect(n == 1 && strcmp(m[0], "unix") == 0);

	cr_assert_eq(config_set(&c, "tenant.a.weight=3", &e), 0, "%s", e.msg);
	cr_assert_eq(config_set(&c, "tenant.a.max_running=2", &e), 0, "%s", e.msg);
	cr_assert_eq(config_set(&c, "tenant.a.ceiling.memory_bytes=1048576", &e), 0, "%s",
	    e.msg);
	cr_assert_not_null(config_tenant_conf(&c, "a"));
	cr_expect_eq(config_tenant_conf(&c, "a")->weight, 3);
	cr_expect_eq(config_tenant_conf(&c, "a")->max_running, 2);
	cr_expect_eq(config_tenant_conf(&c, "a")->ceiling.memory_bytes, 1048576);
	cr_expect_null(config_tenant_conf(&c, "b"), "b sets only net_modes");
	cr_expect_neq(config_set(&c, "tenant.a.weight=0", &e), 0);
	cr_expect_not_null(strstr(e.msg, "weight"), "%s", e.msg);
	cr_expect_neq(config_set(&c, "tenant.a.colour=red", &e), 0);
	cr_expect_not_null(strstr(e.msg, "colour"), "%s", e.msg);
	expect_load_error("[tenant.a]\nnet_modes = egress\n",
	    "sandq.conf:2: net_modes: 'egress' is not one of none, unix, allow");
	expect_load_error("[tenant.bad name]\nnet_modes = unix\n",
	    "sandq.conf:1: unknown section [tenant.bad name]");
	/* A section must name a configured tenant, checked once all is read. */
	config_free(&c);
	config_defaults(&c);
	cr_assert_eq(load("[sandqd]\ntenants = a\n[tenant.z]\nnet_modes = unix\n"), 0,
	    "%s", e.msg);
	cr_expect_eq(config_finish(&c, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "[tenant.z]: 'z' is not one of tenants");
}

Test(config, rejects_malformed_strings)
{
	expect_load_error("[sandqd]\nredis = http://localhost\n",
	    "sandq.conf:2: redis: expected redis://HOST[:PORT] or unix:///PATH");
	expect_load_error("[sandqd]\nredis = unix://\n",
	    "sandq.conf:2: redis: expected redis://HOST[:PORT] or unix:///PATH");
	expect_load_error("[sandqd]\nstate = var/lib/sandq\n",
	    "sandq.conf:2: state: must be an absolute path");
	expect_load_error("[sandqd]\nstate =\n",
	    "sandq.conf:2: state: must be an absolute path");
	expect_load_error("[sandqd]\nworker_path = sandq-worker\n",
	    "sandq.conf:2: worker_path: must be empty or an absolute path");
	expect_load_error("[sandqd]\nprefix = a:b\n",
	    "sandq.conf:2: prefix: must be 1..32 bytes of [A-Za-z0-9_-]");
	expect_load_error("[sandqd]\nprefix =\n",
	    "sandq.conf:2: prefix: must be 1..32 bytes of [A-Za-z0-9_-]");
	expect_load_error("[sandqd]\nprefix = abcdefghijabcdefghijabcdefghijabc\n",
	    "sandq.conf:2: prefix: must be 1..32 bytes of [A-Za-z0-9_-]");
	expect_load_error("[sandqd]\nhost = bad host\n",
	    "sandq.conf:2: host: must be empty or a host name of [A-Za-z0-9._-]");
	cr_expect_str_eq(c.redis, "redis://127.0.0.1:6379");
	cr_expect_str_eq(c.prefix, "sandq");
}

Test(config, accepts_well_formed_strings)
{
	cr_assert_eq(load("[sandqd]\nredis = unix:///run/redis.sock\n"
	    "prefix = abcdefghijabcdefghijabcdefghijab\nhost = a-1.b_c\n"
	    "worker_path = /usr/libexec/sandq/sandq-worker\n"), 0, "%s", e.msg);
	cr_expect_str_eq(c.redis, "unix:///run/redis.sock");
	/* Credentials are proto/url.c's to check. */
	cr_assert_eq(load("[sandqd]\nredis = unix://u:p@/run/redis.sock\n"), 0,
	    "%s", e.msg);
	cr_expect_str_eq(c.redis, "unix://u:p@/run/redis.sock");
	cr_expect_str_eq(c.prefix, "abcdefghijabcdefghijabcdefghijab");
	cr_expect_str_eq(c.host, "a-1.b_c");
	cr_expect_str_eq(c.worker_path, "/usr/libexec/sandq/sandq-worker");
}

Test(config, indented_line_cannot_continue_a_single_line_value)
{
	expect_load_error("[sandqd]\nstate = /srv\n  /more\n",
	    "sandq.conf:3: state: an indented line continues this value, which "
	    "takes one line");
}

/*** Tenants ***/

Test(config, tenant_list_is_split_on_commas_and_trimmed)
{
	cr_assert_eq(load("[sandqd]\ntenants = a, b-2 ,c_3,\n"), 0, "%s", e.msg);
	cr_assert_eq(c.ntenants, 3);
	cr_expect_str_eq(c.tenants[0], "a");
	cr_expect_str_eq(c.tenants[1], "b-2");
	cr_expect_str_eq(c.tenants[2], "c_3");
	cr_expect_null(c.tenants[3]);
}

Test(config, tenant_list_continues_on_indented_lines)
{
	cr_assert_eq(load("[sandqd]\ntenants =\n    alpha, beta,\n\n"
	    "    ; a comment between\n\tgamma\nworkers = 2\n"), 0, "%s", e.msg);
	cr_assert_eq(c.ntenants, 3);
	cr_expect_str_eq(c.tenants[0], "alpha");
	cr_expect_str_eq(c.tenants[1], "beta");
	cr_expect_str_eq(c.tenants[2], "gamma");
	cr_expect_null(c.tenants[3]);
	cr_expect_eq(c.workers, 2);
}

Test(config, rejects_invalid_tenant_names)
{
	expect_load_error("[sandqd]\ntenants = good, bad name\n",
	    "sandq.conf:2: tenants: 'bad name' is not a tenant name "
	    "(1..64 bytes of [A-Za-z0-9_-])");
	expect_load_error("[sandqd]\ntenants = a{b}\n",
	    "sandq.conf:2: tenants: 'a{b}' is not a tenant name "
	    "(1..64 bytes of [A-Za-z0-9_-])");
	/* 65 bytes is one too many. */
	expect_load_error("[sandqd]\ntenants = "
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	    "sandq.conf:2: tenants: "
	    "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' "
	    "is not a tenant name (1..64 bytes of [A-Za-z0-9_-])");
	/* The old list is kept. */
	cr_assert_eq(c.ntenants, 1);
	cr_expect_str_eq(c.tenants[0], "default");
}

Test(config, rejects_duplicate_tenants_with_file_and_line)
{
	expect_load_error("[sandqd]\ntenants = a, b, a\n",
	    "sandq.conf:2: tenants: tenant 'a' is listed twice");
	expect_load_error("[sandqd]\ntenants = a, b\n  c, b\n",
	    "sandq.conf:3: tenants: tenant 'b' is listed twice");
}

Test(config, rejects_more_than_the_maximum_number_of_tenants)
{
	size_t cap = 64 + (CONFIG_TENANTS_MAX + 1) * 8;
	char *text = malloc(cap);
	size_t len;

	cr_assert_not_null(text);
	len = (size_t)snprintf(text, cap, "[sandqd]\ntenants =\n");
	for (int i = 0; i <= CONFIG_TENANTS_MAX; i++)
		len += (size_t)snprintf(text + len, cap - len, "  t%d,\n", i);
	expect_load_error(text, "sandq.conf:259: tenants: at most 256 tenants");
	free(text);

	text = malloc(cap);
	cr_assert_not_null(text);
	len = (size_t)snprintf(text, cap, "[sandqd]\ntenants =\n");
	for (int i = 0; i < CONFIG_TENANTS_MAX; i++)
		len += (size_t)snprintf(text + len, cap - len, "  t%d,\n", i);
	cr_expect_eq(load(text), 0, "%s", e.msg);
	cr_expect_eq(c.ntenants, CONFIG_TENANTS_MAX);
	free(text);
}

/*** config_set ***/

Test(config, set_accepts_key_and_section_key_forms)
{
	cr_assert_eq(config_set(&c, "workers=8", &e), 0, "%s", e.msg);
	cr_expect_eq(c.workers, 8);
	cr_assert_eq(config_set(&c, "sandqd.workers=9", &e), 0, "%s", e.msg);
	cr_expect_eq(c.workers, 9);
	/* A bare key is looked up in [sandqd], then in [limits]. */
	cr_assert_eq(config_set(&c, "memory_bytes=2G", &e), 0, "%s", e.msg);
	cr_expect_eq(c.ceiling.memory_bytes, 2 * GIB);
	cr_assert_eq(config_set(&c, "limits.memory_bytes=3G", &e), 0, "%s", e.msg);
	cr_expect_eq(c.ceiling.memory_bytes, 3 * GIB);
	cr_assert_eq(config_set(&c, " tenants = x, y ", &e), 0, "%s", e.msg);
	cr_assert_eq(c.ntenants, 2);
	cr_expect_str_eq(c.tenants[1], "y");
	cr_assert_eq(config_set(&c, "host=", &e), 0, "%s", e.msg);
	cr_expect_str_eq(c.host, "");
	/* Only the first '=' splits. */
	cr_assert_eq(config_set(&c, "redis=redis://h:1/?a=b", &e), 0, "%s", e.msg);
	cr_expect_str_eq(c.redis, "redis://h:1/?a=b");
}

Test(config, set_errors_name_the_key)
{
	cr_expect_eq(config_set(&c, "workers=5000", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set workers: must be at most 1024");
	cr_expect_eq(config_set(&c, "limits.memory_bytes=1k", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set limits.memory_bytes: must be at least 1M");
	cr_expect_eq(config_set(&c, "wrokers=1", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set wrokers: unknown option");
	cr_expect_eq(config_set(&c, "limits.workers=1", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set limits.workers: unknown option");
	cr_expect_eq(config_set(&c, "nosuch.workers=1", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set nosuch.workers: unknown section [nosuch]");
	cr_expect_eq(config_set(&c, "workers", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set workers: expected KEY=VALUE");
	cr_expect_eq(config_set(&c, "tenants=a,a", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set tenants: tenant 'a' is listed twice");
	/* Nothing changed. */
	cr_expect_eq(c.workers, 0);
	cr_expect_eq(c.ceiling.memory_bytes, 8 * GIB);
	cr_expect_str_eq(c.tenants[0], "default");
}

Test(config, set_refuses_values_a_file_could_not_hold)
{
	cr_expect_eq(config_set(&c, "state=/a\nb", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set state: contains a control character");
	cr_expect_eq(config_set(&c, "state=/a ;b", &e), -EINVAL);
	cr_expect_str_eq(e.msg, "--set state: ' ;' would start a comment");
	cr_expect_str_eq(c.state, "/var/lib/sandq");
}

/*** config_finish ***/

Test(config, finish_derives_workers_and_host)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char host[256];

	cr_assert_eq(config_finish(&c, &e), 0, "%s", e.msg);
	cr_expect_eq(c.workers, ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : ncpu);
	cr_assert_eq(gethostname(host, sizeof(host)), 0);
	cr_expect_str_eq(c.host, host);
}

Test(config, finish_keeps_explicit_workers_and_host)
{
	set_ok(&c, "workers=3");
	set_ok(&c, "host=builder");
	cr_assert_eq(config_finish(&c, &e), 0, "%s", e.msg);
	cr_expect_eq(c.workers, 3);
	cr_expect_str_eq(c.host, "builder");
}

Test(config, finish_requires_a_tenant)
{
	cr_assert_eq(load("[sandqd]\ntenants =\n"), 0, "%s", e.msg);
	cr_expect_eq(c.ntenants, 0);
	cr_expect_eq(config_finish(&c, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "tenants: at least one tenant is required");
}

Test(config, finish_rejects_duplicate_tenants_naming_the_tenant)
{
	/* A list built by hand never went through the parser. */
	char **list = calloc(4, sizeof(*list));

	cr_assert_not_null(list);
	list[0] = strdup("red");
	list[1] = strdup("blue");
	list[2] = strdup("red");
	for (size_t i = 0; i < c.ntenants; i++)
		free(c.tenants[i]);
	free(c.tenants);
	c.tenants = list;
	c.ntenants = 3;
	cr_expect_eq(config_finish(&c, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "tenants: tenant 'red' is listed twice");
}

/*** config_print ***/

Test(config, print_then_load_gives_the_same_defaults)
{
	char *text = print_to_string(&c);
	struct config d;
	struct err err;

	config_defaults(&d);
	set_non_defaults(&d);
	cr_assert_eq(config_load_string(&d, text, "printed", &err), 0, "%s\n%s",
	    err.msg, text);
	expect_config_eq(&c, &d);
	config_free(&d);
	free(text);
}

Test(config, print_then_load_gives_the_same_values)
{
	char *text, *again;
	struct config d;
	struct err err;

	set_non_defaults(&c);
	text = print_to_string(&c);
	config_defaults(&d);
	cr_assert_eq(config_load_string(&d, text, "printed", &err), 0, "%s\n%s",
	    err.msg, text);
	expect_config_eq(&c, &d);
	/* And printing the reloaded configuration gives the same text. */
	again = print_to_string(&d);
	cr_expect_str_eq(again, text);
	config_free(&d);
	free(again);
	free(text);
}

Test(config, print_wraps_a_long_tenant_list_so_it_loads_back)
{
	char name[CONFIG_TENANT_NAME_MAX + 1];
	char assignment[64 * 1024] = "tenants=";
	struct config d;
	struct err err;
	char *text;

	for (int i = 0; i < CONFIG_TENANTS_MAX; i++) {
		/* 64-byte names, the longest allowed. */
		snprintf(name, sizeof(name), "%064d", i);
		strcat(assignment, name);
		strcat(assignment, i + 1 < CONFIG_TENANTS_MAX ? "," : "");
	}
	set_ok(&c, assignment);
	cr_assert_eq(c.ntenants, CONFIG_TENANTS_MAX);
	text = print_to_string(&c);
	config_defaults(&d);
	cr_assert_eq(config_load_string(&d, text, "printed", &err), 0, "%s",
	    err.msg);
	expect_config_eq(&c, &d);
	config_free(&d);
	free(text);
}

Test(config, print_writes_help_above_each_option_and_both_sections)
{
	char *text = print_to_string(&c);

	cr_expect_not_null(strstr(text, "\n[sandqd]\n"));
	cr_expect_not_null(strstr(text, "\n[limits]\n"));
	cr_expect_not_null(strstr(text, "; integer 0..1024; default 0; "
	    "needs a restart\nworkers = 0\n"));
	cr_expect_not_null(strstr(text, "; size 1M..64T; default 8G; "
	    "reloadable\nmemory_bytes = 8G\n"));
	cr_expect_not_null(strstr(text, "\nhost =\n"));
	free(text);
}

/*** Presets and job limits ***/

Test(config, preset_numbers_are_the_documented_contract)
{
	static const struct job_limits strict = {
		10000, 10000, 256 * MIB, 32, 64 * KIB, 16 * MIB, 64,
	};
	static const struct job_limits normal = {
		30000, 30000, 1 * GIB, 256, 1 * MIB, 256 * MIB, 1024,
	};
	static const struct job_limits permissive = {
		600000, 600000, 4 * GIB, 1024, 16 * MIB, 2 * GIB, 4096,
	};

	cr_assert_not_null(config_preset_limits(PRESET_STRICT));
	cr_assert_not_null(config_preset_limits(PRESET_NORMAL));
	cr_assert_not_null(config_preset_limits(PRESET_PERMISSIVE));
	expect_limits_eq(config_preset_limits(PRESET_STRICT), &strict);
	expect_limits_eq(config_preset_limits(PRESET_NORMAL), &normal);
	expect_limits_eq(config_preset_limits(PRESET_PERMISSIVE), &permissive);
	cr_expect_null(config_preset_limits(PRESET_DEFAULT));
	cr_expect_null(config_preset_limits((enum job_preset)42));
}

Test(config, job_without_preset_gets_the_default_preset)
{
	struct job j = { .preset = PRESET_DEFAULT };
	struct job_limits out;

	cr_assert_eq(config_job_limits(&c, &j, &out, &e), 0, "%s", e.msg);
	expect_limits_eq(&out, config_preset_limits(PRESET_NORMAL));

	set_ok(&c, "default_preset=strict");
	cr_assert_eq(config_job_limits(&c, &j, &out, &e), 0, "%s", e.msg);
	expect_limits_eq(&out, config_preset_limits(PRESET_STRICT));
}

Test(config, job_preset_wins_over_the_default_preset)
{
	struct job j = { .preset = PRESET_PERMISSIVE };
	struct job_limits out;

	set_ok(&c, "default_preset=strict");
	cr_assert_eq(config_job_limits(&c, &j, &out, &e), 0, "%s", e.msg);
	expect_limits_eq(&out, config_preset_limits(PRESET_PERMISSIVE));
}

Test(config, job_limits_override_the_preset_one_by_one)
{
	struct job j = {
		.preset = PRESET_STRICT,
		.limits = { .memory_bytes = 2 * GIB, .files = 16 },
	};
	struct job_limits want = *config_preset_limits(PRESET_STRICT);
	struct job_limits out;

	want.memory_bytes = 2 * GIB;
	want.files = 16;
	cr_assert_eq(config_job_limits(&c, &j, &out, &e), 0, "%s", e.msg);
	expect_limits_eq(&out, &want);
}

Test(config, job_limit_equal_to_the_ceiling_is_accepted)
{
	struct job j = { .limits = { .memory_bytes = 8 * GIB, .wall_ms = 3600000 } };
	struct job_limits out;

	cr_assert_eq(config_job_limits(&c, &j, &out, &e), 0, "%s", e.msg);
	cr_expect_eq(out.memory_bytes, 8 * GIB);
	cr_expect_eq(out.wall_ms, 3600000);
}

Test(config, rejects_job_limit_above_the_ceiling_naming_the_field)
{
	struct job j = { .limits = { .memory_bytes = 9000000000u } };
	struct job_limits out = { .wall_ms = 12345 };

	cr_expect_eq(config_job_limits(&c, &j, &out, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'limits.memory_bytes': 9000000000 is above "
	    "the ceiling of 8589934592");
	/* out is left alone on failure. */
	cr_expect_eq(out.wall_ms, 12345);

	j.limits.memory_bytes = 0;
	j.limits.files = 65537;
	cr_expect_eq(config_job_limits(&c, &j, &out, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'limits.files': 65537 is above the ceiling "
	    "of 65536");
}

Test(config, preset_value_above_a_lowered_ceiling_is_clamped)
{
	struct job j = { .preset = PRESET_STRICT };
	struct job_limits out;

	set_ok(&c, "limits.memory_bytes=128M");
	set_ok(&c, "limits.pids=10");
	cr_assert_eq(config_job_limits(&c, &j, &out, &e), 0, "%s", e.msg);
	cr_expect_eq(out.memory_bytes, 128 * MIB);
	cr_expect_eq(out.pids, 10);
	cr_expect_eq(out.wall_ms, 10000);

	/* The same number asked for by the job is refused, not clamped. */
	j.limits.memory_bytes = 256 * MIB;
	cr_expect_eq(config_job_limits(&c, &j, &out, &e), -EINVAL);
	cr_expect_str_eq(e.msg, "field 'limits.memory_bytes': 268435456 is above "
	    "the ceiling of 134217728");
}

/* What config_reload() reported, as "name=was>now applied|kept" lines. */
static void
reload_note(void *arg, const char *name, const char *was, const char *now,
    bool applied)
{
	char *buf = arg;

	snprintf(buf + strlen(buf), 1024 - strlen(buf), "%s=%s>%s %s\n", name, was,
	    now, applied ? "applied" : "kept");
}

Test(config, reload_applies_reloadable_options_and_keeps_the_others)
{
	struct config fresh;
	char notes[1024] = "";

	config_defaults(&fresh);
	cr_assert(config_load_string(&fresh, "[sandqd]\nlog_level = debug\n"
	    "workers = 7\nimage_sources = host, oci:/srv/*\n"
	    "[limits]\nwall_ms = 5000\n", "sandq.conf", &e) == 0, "%s", e.msg);
	cr_expect_eq(config_reload(&c, &fresh, reload_note, notes), 3);
	cr_expect_str_eq(c.log_level, "debug");
	cr_expect_eq(c.ceiling.wall_ms, 5000);
	cr_expect_eq(c.nimage_sources, 2);
	cr_expect_str_eq(c.image_sources[1], "oci:/srv/*");
	/* workers needs a restart: reported, and kept. */
	cr_expect_eq(c.workers, 0);
	cr_expect_str_eq(notes, "workers=0>7 kept\nlog_level=info>debug applied\n"
	    "image_sources=>host,oci:/srv/* applied\nlimits.wall_ms=3600000>5000 applied\n");
	/* fresh holds the old values now; freeing both leaks nothing. */
	config_free(&fresh);
}

/*** metrics_listen (issue 18) ***/

Test(config, metrics_listen_defaults_to_loopback_and_may_be_empty)
{
	cr_expect_str_eq(c.metrics_listen, "127.0.0.1:9464");
	cr_expect_eq(load("[sandqd]\nmetrics_listen =\n"), 0, "%s", e.msg);
	cr_expect_str_eq(c.metrics_listen, "");
	cr_expect_eq(load("[sandqd]\nmetrics_listen = [::1]:9100\n"), 0, "%s", e.msg);
}

Test(config, metrics_listen_rejects_a_bad_port)
{
	cr_expect_eq(load("[sandqd]\nmetrics_listen = 127.0.0.1:0\n"), -EINVAL);
	cr_expect_not_null(strstr(e.msg, "1..65535"), "%s", e.msg);
	cr_expect_eq(load("[sandqd]\nmetrics_listen = localhost\n"), -EINVAL);
}
