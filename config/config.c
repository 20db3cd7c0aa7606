/*
 * config.c - sandqd's options: one table, an INI parser over it, --set,
 * --print-config, and the resolution of a job's limits against the presets
 * and the configured ceilings.
 *
 * DESIGN. Every option is one row of options[] below: name, section, type,
 * default (written as it would be in a file), bounds, whether it can change
 * without a restart, offsetof() into struct config, and one line of help.
 * config_defaults(), the file parser, config_set() and config_print() all walk
 * that table, so adding an option is adding a row. The defaults go through
 * the same setter as file values, so a default outside its own bounds is
 * caught the first time the daemon starts (fatalx) and by the tests.
 *
 * Files are read by inih (ini_parse_stream()) through our own line reader,
 * because inih tells its handler neither the line number nor the sections it
 * skips. The reader counts lines, checks each [section] header and each line's
 * syntax before inih sees it, and stops the parse at the first error, so the
 * message names the first bad line ("sandq.conf:12: workers: must be at most
 * 1024") and nothing after it is applied. config_load_file() only reads the
 * file into memory; config_load_string() is the parser and does no I/O.
 *
 * Sections:
 *   Presets        the numbers behind strict/normal/permissive
 *   Option table   options[] and the checks its rows use
 *   Setting values opt_set() and its helpers, shared by file and --set
 *   Files          the line reader, the inih handler, load_file/load_string
 *   Public API     defaults, free, set, finish, print, job limits
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "config.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../egress/egress.h"
#include "../images/ref.h"
#include "../proto/keys.h"
#include "../store/store.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

/* A numeric macro as the text a default is written in. */
#define NUM_TEXT(x) NUM_TEXT_(x)
#define NUM_TEXT_(x) #x

/* Largest config file read into memory. */
#define CONFIG_FILE_MAX (1024 * 1024)

/*
 * Longest string value. inih reads a line into a fixed INI_MAX_LINE (200)
 * byte buffer; keeping values at 160 bytes leaves room for the longest key
 * and " = ", so whatever config_set() accepts, config_print() can write on
 * one line and a file can read back.
 */
#define CONFIG_STRING_MAX 160
_Static_assert(CONFIG_STRING_MAX + 32 + 3 < INI_MAX_LINE - 3,
    "a printed string option must fit on one inih line");

/* Patterns of image_sources, each at most CONFIG_STRING_MAX bytes. */
#define CONFIG_IMAGE_SOURCES_MAX 64

/*
 * Bounds used outside the table too: worker i's jobs run as host uid
 * sandbox_uid_base + i, which must stay a valid uid ((uid_t)-1 is not one)
 * for every worker the configuration allows.
 */
#define WORKERS_MAX 1024
#define UID_BASE_MIN 1000
#define UID_BASE_MAX INT64_C(4000000000)
_Static_assert(UID_BASE_MAX + WORKERS_MAX < INT64_C(0xffffffff),
    "sandbox uids must stay below (uid_t)-1");

/*** Presets ***/

/*
 * The numbers behind each preset. They are a contract with clients
 * (docs/protocol.md "Presets"): a job that names a preset and no limits gets
 * exactly these, so changing one is a protocol change.
 *
 *   preset      wall_ms  cpu_ms  memory  pids  output  disk  files
 *   strict        10000   10000    256M    32     64k   16M     64
 *   normal        30000   30000      1G   256      1M  256M   1024
 *   permissive   600000  600000      4G  1024     16M    2G   4096
 *
 * A preset value above a ceiling lowered in [limits] is cut to the ceiling
 * (see config_job_limits()); only values a job asked for are refused.
 */
static const struct job_limits presets[] = {
	[PRESET_STRICT] = {
		.wall_ms = 10000,
		.cpu_ms = 10000,
		.memory_bytes = 256 * MIB,
		.pids = 32,
		.output_bytes = 64 * KIB,
		.disk_bytes = 16 * MIB,
		.files = 64,
	},
	[PRESET_NORMAL] = {
		.wall_ms = 30000,
		.cpu_ms = 30000,
		.memory_bytes = 1 * GIB,
		.pids = 256,
		.output_bytes = 1 * MIB,
		.disk_bytes = 256 * MIB,
		.files = 1024,
	},
	[PRESET_PERMISSIVE] = {
		.wall_ms = 600000,
		.cpu_ms = 600000,
		.memory_bytes = 4 * GIB,
		.pids = 1024,
		.output_bytes = 16 * MIB,
		.disk_bytes = 2 * GIB,
		.files = 4096,
	},
};

/*** Option table ***/

enum opt_type {
	OPT_STRING,		/* char *, checked by check() if set */
	OPT_ENUM,		/* char *, one of choices[] */
	OPT_LIST,		/* char ** (NULL-terminated) plus a size_t count,
				 * checked by list_check() or against choices[] */
	OPT_INT,		/* decimal integer */
	OPT_SIZE,		/* integer with an optional k/M/G/T suffix */
};

struct option {
	const char *name;		/* key within its section */
	const char *section;		/* "sandqd" or "limits" */
	enum opt_type type;
	const char *def;		/* default, written as in a file */
	int64_t min;			/* OPT_INT, OPT_SIZE: smallest value */
	int64_t max;			/* OPT_INT, OPT_SIZE: largest value */
	bool reloadable;		/* may change without a restart */
	bool u64;			/* number stored as uint64_t, else int64_t */
	size_t off;			/* offsetof(struct config, field) */
	size_t count_off;		/* OPT_LIST: offset of the size_t count */
	const char *const *choices;	/* OPT_ENUM: NULL-terminated */
	/* OPT_STRING: NULL, or the problem (static, or formatted into why). */
	const char *(*check)(const char *s, char *why, size_t whylen);
	/* OPT_LIST without choices: NULL, or the problem, as check(). */
	const char *(*list_check)(char *const *items, size_t n, char *why,
	    size_t whylen);
	const char *items;		/* OPT_LIST without choices: what the items
					 * are, for --print-config */
	const char *help;		/* one line, for --print-config */
};

/*
 * offsetof() of a field that must have type T: _Generic has no other
 * association, so a row whose type does not match its field fails to
 * compile. The controlling expression is never evaluated.
 */
#define FIELD(f, T) \
	_Generic(((struct config *)0)->f, T: offsetof(struct config, f))

#define STR(n, d, chk, rel, h) { .name = #n, .section = "sandqd", \
	.type = OPT_STRING, .def = d, .reloadable = rel, \
	.off = FIELD(n, char *), .check = chk, .help = h }
#define ENUM(n, d, ch, rel, h) { .name = #n, .section = "sandqd", \
	.type = OPT_ENUM, .def = d, .reloadable = rel, \
	.off = FIELD(n, char *), .choices = ch, .help = h }
#define LIST(n, cnt, d, chk, what, rel, h) { .name = #n, .section = "sandqd", \
	.type = OPT_LIST, .def = d, .reloadable = rel, \
	.off = FIELD(n, char **), .count_off = FIELD(cnt, size_t), \
	.list_check = chk, .items = what, .help = h }
/* A list whose items must each be one of ch, once. */
#define CHOICES(n, cnt, d, ch, rel, h) { .name = #n, .section = "sandqd", \
	.type = OPT_LIST, .def = d, .reloadable = rel, \
	.off = FIELD(n, char **), .count_off = FIELD(cnt, size_t), \
	.choices = ch, .help = h }
#define NUM(n, t, d, lo, hi, rel, h) { .name = #n, .section = "sandqd", \
	.type = t, .def = d, .min = lo, .max = hi, .reloadable = rel, \
	.off = FIELD(n, int64_t), .help = h }
#define LIMIT(n, t, d, lo, hi, h) { .name = #n, .section = "limits", \
	.type = t, .def = d, .min = (int64_t)(lo), .max = (int64_t)(hi), \
	.reloadable = true, .u64 = true, \
	.off = FIELD(ceiling.n, uint64_t), .help = h }
#define GWSTR(n, d, chk, h) { .name = #n, .section = "gateway", \
	.type = OPT_STRING, .def = d, .off = FIELD(gateway.n, char *), \
	.check = chk, .help = h }
#define GWNUM(n, t, d, lo, hi, h) { .name = #n, .section = "gateway", \
	.type = t, .def = d, .min = lo, .max = hi, \
	.off = FIELD(gateway.n, int64_t), .help = h }

static const char *check_redis(const char *s, char *why, size_t whylen);
static const char *check_abs_path(const char *s, char *why, size_t whylen);
static const char *check_abs_path_or_empty(const char *s, char *why,
    size_t whylen);
static const char *check_prefix(const char *s, char *why, size_t whylen);
static const char *check_redis_or_empty(const char *s, char *why, size_t whylen);
static const char *check_prefix_or_empty(const char *s, char *why, size_t whylen);
static const char *check_listen(const char *s, char *why, size_t whylen);
static const char *check_listen_or_empty(const char *s, char *why, size_t whylen);
static const char *check_host(const char *s, char *why, size_t whylen);
static const char *check_image(const char *s, char *why, size_t whylen);
static const char *tenants_check(char *const *names, size_t n, char *why,
    size_t whylen);
static const char *allow_check(char *const *items, size_t n, char *why,
    size_t whylen);
static const char *egress_hosts_check(char *const *items, size_t n, char *why,
    size_t whylen);
static const char *egress_addrs_check(char *const *items, size_t n, char *why,
    size_t whylen);
static const char *sources_check(char *const *items, size_t n, char *why,
    size_t whylen);
static const char *registries_check(char *const *items, size_t n, char *why,
    size_t whylen);

static const char *const log_levels[] = {
	"error", "warn", "info", "debug", NULL,
};
/* Must match log_setformat() in common/log_json.c. */
static const char *const log_formats[] = { "text", "json", NULL };
/* Must match job_net_parse() in proto/job.c (a test checks). */
static const char *const net_choices[] = { "none", "unix", "allow", NULL };
static const char *const overlay_choices[] = { "auto", "off", NULL };
static const char *const netns_choices[] = { "shared", "fresh", NULL };
static const char *const store_choices[] = { "local", "redis", NULL };
/* Must match job_preset_parse() in proto/job.c (a test checks). */
static const char *const preset_choices[] = {
	"strict", "normal", "permissive", NULL,
};

/*
 * Every option. Rows of one section are contiguous: config_print() writes a
 * [section] header whenever the section changes. Only [limits] is read by
 * config_job_limits(). `reloadable` options are the ones config_reload()
 * changes in a running sandqd (on SIGHUP); the others need a restart.
 */
static const struct option options[] = {
	STR(redis, "redis://127.0.0.1:6379", check_redis, false,
	    "Redis server to take jobs from: redis://HOST:PORT or unix:///PATH."),
	STR(state, "/var/lib/sandq", check_abs_path, false,
	    "State folder (root image, per-job run folders); an absolute path."),
	NUM(workers, OPT_INT, "0", 0, WORKERS_MAX, false,
	    "Worker processes, each running one sandbox at a time; "
	    "0 = one per online CPU."),
	LIST(tenants, ntenants, "default", tenants_check, "names", false,
	    "Tenants served, comma-separated; each 1..64 bytes of "
	    "[A-Za-z0-9_-]; may continue on indented lines."),
	STR(prefix, "sandq", check_prefix, false,
	    "Prefix of every Redis key: 1..32 bytes of [A-Za-z0-9_-]."),
	STR(host, "", check_host, false,
	    "Host name written into results; empty = gethostname()."),
	ENUM(log_level, "info", log_levels, true,
	    "Diagnostic log level: error, warn, info or debug."),
	ENUM(log_format, "text", log_formats, false,
	    "Diagnostic log lines: text, or json (one object a line: time, level, "
	    "process, message) for log shippers."),
	NUM(drain_timeout_ms, OPT_INT, "30000", 0, 86400000, true,
	    "On SIGTERM, milliseconds running jobs get to finish before "
	    "they are killed."),
	NUM(result_ttl_s, OPT_INT, "86400", 1, 2592000, true,
	    "Seconds a job's result and done keys live in Redis."),
	NUM(read_block_ms, OPT_INT, "2000", 10, 60000, true,
	    "Milliseconds one XREADGROUP BLOCK waits for new jobs."),
	STR(worker_path, "", check_abs_path_or_empty, false,
	    "Absolute path of sandq-worker; empty = next to sandqd, "
	    "then the libexec folder."),
	NUM(sandbox_uid_base, OPT_INT, "100000", UID_BASE_MIN, UID_BASE_MAX, false,
	    "First host uid of the sandboxes: worker i runs jobs as "
	    "uid base + i (never 0)."),
	ENUM(default_preset, "normal", preset_choices, true,
	    "Preset of jobs that name none: strict, normal or permissive."),
	NUM(max_job_bytes, OPT_SIZE, "32M", 1 * KIB, 256 * MIB, true,
	    "Largest job (stream entry) accepted, in bytes; larger jobs "
	    "are rejected."),
	NUM(respawn_backoff_ms, OPT_INT, "100", 0, 60000, true,
	    "First delay before a dead worker is respawned; later ones wait longer."),
	NUM(keep_versions, OPT_INT, NUM_TEXT(STORE_KEEP_VERSIONS_DEFAULT), 0,
	    STORE_KEEP_VERSIONS_MAX, false,
	    "History rows (and their snapshots) each sandbox keeps; older ones "
	    "are deleted at each commit. 0 keeps every version."),
	NUM(worker_max_jobs, OPT_INT, "10000", 0, 1000000000, false,
	    "Jobs a worker runs before it is replaced by a fresh one; 0 = never."),
	NUM(worker_max_memory_growth, OPT_SIZE, "256M", 0, (int64_t)1 << 40, false,
	    "Bytes a worker's own resident set may grow past its size at start "
	    "before it is replaced after a job; 0 = never."),
	NUM(worker_setup_timeout_ms, OPT_INT, "30000", 100, 3600000, false,
	    "Milliseconds a new worker may take to get ready before it is killed "
	    "and started again."),
	NUM(worker_stuck_grace_ms, OPT_INT, "30000", 100, 3600000, false,
	    "Milliseconds past its job's wall limit a worker may take to answer "
	    "before it is killed as stuck and its job answered internal."),
	NUM(job_socket_bytes, OPT_SIZE, "64M", 0, 64 * TIB, false,
	    "Bound of the kernel's TCP and UDP buffers of one job's sockets, "
	    "never above its memory limit; 0 = its memory limit. cgroup v1 counts "
	    "them apart from memory (memory.kmem.tcp); v2 within it."),
	NUM(job_sockets, OPT_INT, "1024", 16, 1048576, false,
	    "Sockets a job may hold (unix ones and unaccepted TCP included) and "
	    "still make an inet socket; past it socket() fails with EMFILE."),
	NUM(lease_ms, OPT_INT, "30000", 300, 3600000, false,
	    "Milliseconds a host's hold on the jobs it has read lasts without "
	    "renewal; past it another host takes them over."),
	NUM(max_attempts, OPT_INT, "3", 1, 100, true,
	    "Runs a job gets when its worker or host fails under it; past them it "
	    "is answered internal and dead-lettered with every attempt's reason."),
	NUM(retry_backoff_ms, OPT_INT, "1000", 0, 600000, true,
	    "Delay before a job's second attempt; each later one waits twice as "
	    "long, up to 60 s."),
	NUM(audit_stream_max, OPT_INT, "100000", 100, 100000000, false,
	    "Events each tenant's Redis audit stream keeps (about: trimmed with "
	    "MAXLEN ~)."),
	NUM(audit_retention_s, OPT_INT, "2592000", 60, 315360000, false,
	    "Seconds the host's audit database keeps an event."),
	NUM(audit_max_bytes, OPT_SIZE, "1G", 1 * MIB, (int64_t)1 << 40, false,
	    "Size the host's audit database is kept under; the oldest events go "
	    "first."),
	ENUM(snapshot_store, "local", store_choices, false,
	    "Where sandboxes live: local (this host's state folder) or redis "
	    "(shared by every host on the Redis, the local store its cache)."),
	ENUM(workspace_overlay, "auto", overlay_choices, false,
	    "auto: a job on a persistent sandbox whose snapshot the worker "
	    "already holds runs on an overlay of it; off: every job writes its "
	    "whole snapshot out and reads it all back."),
	ENUM(job_netns, "shared", netns_choices, false,
	    "shared: a worker's jobs take turns in one network namespace, renewed "
	    "when a job leaves a socket in it; fresh: a new one per job."),
	CHOICES(net_modes, nnet_modes, "none, unix", net_choices, true,
	    "Network modes jobs may ask for (net): none, unix, allow (the egress proxy)."),
	LIST(net_allow, nnet_allow, "", allow_check, "host patterns", true,
	    "Hosts net allow jobs may name: name[:port], *.domain[:port], an "
	    "address; no port = 80 and 443; empty = none."),
	LIST(egress_hosts, negress_hosts, "", egress_hosts_check, "NAME[:PORT]=ADDR[:PORT]", false,
	    "Names the egress proxy resolves itself, NAME=ADDR each (NAME:PORT=ADDR:PORT: "
	    "that port elsewhere), before DNS; empty = DNS only."),
	LIST(egress_allow_addrs, negress_allow_addrs, "", egress_addrs_check,
	    "address ranges", false,
	    "Ranges (ADDR/BITS) the egress proxy may reach although private, "
	    "loopback, link-local or the host's own; empty = none."),
	NUM(egress_uid, OPT_INT, "0", 0, UID_BASE_MAX, false,
	    "Host uid of the egress proxy, sandq-egress; 0 = sandbox_uid_base - 2. "
	    "Never root, never a sandbox's uid."),
	NUM(egress_port, OPT_INT, "3128", 1, 65535, false,
	    "Port of the egress proxy's listener in each net allow job (127.0.0.1:PORT)."),
	NUM(egress_conns_max, OPT_INT, "64", 0, 100000, false,
	    "Connections a net allow job may have open through the proxy at once; "
	    "0 = no cap."),
	NUM(egress_bytes_max, OPT_SIZE, "0", 0, (int64_t)1 << 50, false,
	    "Bytes a net allow job may move through the proxy, both ways; 0 = no cap."),
	NUM(egress_rate_bytes, OPT_SIZE, "0", 0, (int64_t)1 << 50, true,
	    "Bytes per second a net allow job may move through the proxy, each "
	    "way over all its connections; 0 = no limit."),
	STR(egress_path, "", check_abs_path_or_empty, false,
	    "Absolute path of sandq-egress; empty = next to sandqd, then the "
	    "libexec folder."),
	LIST(image_sources, nimage_sources, "", sources_check,
	    "image source patterns", true,
	    "Where job images may come from: host, docker://HOST[:PORT]/REPO or "
	    "/PREFIX*, oci:/DIR/* (and oci-archive:, docker-archive:); empty = host only."),
	STR(default_image, "host", check_image, true,
	    "Image of a job that names none: host, or a reference image_sources allows."),
	NUM(image_cache_bytes, OPT_SIZE, "10G", 0, (int64_t)1 << 50, false,
	    "Bytes the image cache (STATE/images: unpacked layers and blobs) is kept "
	    "under, least recently used images that no job uses going first; 0 = no bound."),
	NUM(image_pull_timeout_ms, OPT_INT, "1800000", 1000, 86400000, false,
	    "Milliseconds one image pull (skopeo's copy) may take before it is "
	    "stopped and its jobs are rejected."),
	NUM(image_unpack_uid, OPT_INT, "0", 0, UID_BASE_MAX, false,
	    "Host uid that unpacks image layers (it owns the cache's files); "
	    "0 = sandbox_uid_base - 1. Never root, never a sandbox's uid."),
	LIST(image_plain_http, nimage_plain_http, "", registries_check,
	    "registries (HOST[:PORT])", false,
	    "Registries of image_sources reached over plain HTTP, without TLS "
	    "(a private registry on loopback); empty = TLS everywhere."),
	/* The defaults are images/cache.h's IMG_UNPACK_*_DEFAULT (config_test checks). */
	NUM(image_max_layer_bytes, OPT_SIZE, "16G", 1 * KIB, (int64_t)1 << 50, false,
	    "Bytes the files of one image layer may hold in all, unpacked; a layer "
	    "past it is refused and its jobs are rejected."),
	NUM(image_max_layer_entries, OPT_INT, "1000000", 1, 1000000000, false,
	    "Entries (files, folders, links) one image layer may hold; a layer "
	    "past it is refused."),
	NUM(image_max_layer_ratio, OPT_INT, "200", 2, 1000000, false,
	    "How many times its compressed size a layer may decompress to (checked "
	    "once 1 MiB is read); past it the layer is refused as a decompression bomb."),
	STR(metrics_listen, "127.0.0.1:9464", check_listen_or_empty, false,
	    "Where sandqd serves Prometheus metrics (GET /metrics): ADDR:PORT or "
	    "[ADDR6]:PORT; empty = off."),

	LIMIT(wall_ms, OPT_INT, "3600000", 1, 86400000,
	    "Ceiling of a job's wall-clock time, in milliseconds."),
	LIMIT(cpu_ms, OPT_INT, "3600000", 1, 86400000,
	    "Ceiling of a job's CPU time, in milliseconds."),
	LIMIT(memory_bytes, OPT_SIZE, "8G", 1 * MIB, 64 * TIB,
	    "Ceiling of a job's memory (its cgroup; without one, address space), in bytes."),
	LIMIT(pids, OPT_INT, "4096", 1, 4194304,
	    "Ceiling of a job's processes and threads."),
	LIMIT(output_bytes, OPT_SIZE, "64M", 1 * KIB, 1 * GIB,
	    "Ceiling of the bytes captured from each of a job's stdout and stderr."),
	LIMIT(disk_bytes, OPT_SIZE, "4G", 64 * KIB, 1 * TIB,
	    "Ceiling of a job's /workspace and /tmp size and of any file it writes."),
	LIMIT(files, OPT_INT, "65536", 16, 1048576,
	    "Ceiling of the inodes in each of a job's /workspace, /tmp and /dev/shm."),

	/* Bounds as sandq-gateway's options (gateway/main.c). */
	GWSTR(listen, "127.0.0.1:8080", check_listen,
	    "Where sandq-gateway serves plain HTTP: ADDR:PORT or [ADDR6]:PORT."),
	GWSTR(redis, "", check_redis_or_empty,
	    "Redis URL of sandq-gateway, with the operator's credentials; "
	    "empty = [sandqd] redis."),
	GWSTR(prefix, "", check_prefix_or_empty,
	    "Key prefix of sandq-gateway; empty = [sandqd] prefix."),
	GWNUM(max_body, OPT_SIZE, "1M", 1, 64 * MIB,
	    "Bytes of a request body sandq-gateway takes (1 to 64M)."),
	GWNUM(max_streams, OPT_INT, "1000", 1, 100000,
	    "Event streams (GET /v1/jobs/ID/events) sandq-gateway holds open at once."),
	GWNUM(max_connections, OPT_INT, "10000", 1, 1000000,
	    "Client connections sandq-gateway holds open at once; past it a new "
	    "one is closed at accept. Keep it under the process's open-file limit."),
	GWNUM(max_batch_body, OPT_SIZE, "16M", 1, 256 * MIB,
	    "Bytes of a POST /v1/batches body sandq-gateway takes (1 to 256M)."),
	GWSTR(mcp_origins, "", NULL,
	    "Browser origins POST /v1/mcp accepts, comma-separated; empty: none."),
	GWSTR(dashboard, "", NULL,
	    "Folder of the web dashboard sandq-gateway serves at /dashboard/; "
	    "empty: share/sandq/dashboard (installed) or gateway/dashboard (a "
	    "checkout) beside the binary."),
	GWNUM(poll_ms, OPT_INT, "250", 10, 60000,
	    "Milliseconds between a long poll's GETs of its result when no "
	    "publish wakes it (the fallback; published results wake it at once)."),
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static const struct option *
opt_find(const char *section, const char *name)
{
	for (size_t i = 0; i < NOPTIONS; i++) {
		if (strcmp(options[i].section, section) == 0 &&
		    strcmp(options[i].name, name) == 0)
			return &options[i];
	}
	return NULL;
}

/* "tenant.NAME" with a valid tenant name: NAME, else NULL (in buf). */
static const char *
tenant_section(const char *name, size_t len, char *buf, size_t buflen)
{
	if (len <= 7 || strncmp(name, "tenant.", 7) != 0 || len - 7 >= buflen)
		return NULL;
	memcpy(buf, name + 7, len - 7);
	buf[len - 7] = '\0';
	return key_tenant_valid(buf) ? buf : NULL;
}

static bool
section_known(const char *name, size_t len)
{
	char t[CONFIG_TENANT_NAME_MAX + 1];

	if (tenant_section(name, len, t, sizeof(t)) != NULL)
		return true;
	for (size_t i = 0; i < NOPTIONS; i++) {
		if (strlen(options[i].section) == len &&
		    memcmp(options[i].section, name, len) == 0)
			return true;
	}
	return false;
}

static bool
is_name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

/*
 * The checks below return NULL for a good value or the problem, which
 * follows "key: " in the message.
 */

/*
 * Only the scheme is checked here: the rest (credentials, port, database)
 * is proto/url.c's to parse, and this module does not link it.
 */
static const char *
check_redis(const char *s, char *why, size_t whylen)
{
	(void)why;
	(void)whylen;
	if (strncmp(s, "redis://", 8) == 0 && s[8] != '\0')
		return NULL;
	if (strncmp(s, "unix://", 7) == 0 && s[7] != '\0')
		return NULL;
	return "expected redis://HOST[:PORT] or unix:///PATH";
}

/* [gateway] redis: a URL, or "" for [sandqd]'s. */
static const char *
check_redis_or_empty(const char *s, char *why, size_t whylen)
{
	return s[0] == '\0' ? NULL : check_redis(s, why, whylen);
}

/* [gateway] prefix: a prefix, or "" for [sandqd]'s. */
static const char *
check_prefix_or_empty(const char *s, char *why, size_t whylen)
{
	return s[0] == '\0' ? NULL : check_prefix(s, why, whylen);
}

/* ADDR:PORT or [ADDR6]:PORT, the port 1..65535; the gateway parses the
 * address itself when it binds. */
static const char *
check_listen(const char *s, char *why, size_t whylen)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long port;

	(void)why;
	(void)whylen;
	if (colon == NULL || colon == s)
		return "expected ADDR:PORT or [ADDR6]:PORT";
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
		return "the port must be 1..65535";
	return NULL;
}

/* [sandqd] metrics_listen: as [gateway] listen, or "" for no endpoint. */
static const char *
check_listen_or_empty(const char *s, char *why, size_t whylen)
{
	return s[0] == '\0' ? NULL : check_listen(s, why, whylen);
}

/* A relative path would depend on the folder sandqd was started from. */
static const char *
check_abs_path(const char *s, char *why, size_t whylen)
{
	(void)why;
	(void)whylen;
	return s[0] == '/' ? NULL : "must be an absolute path";
}

/*
 * The worker binary is exec'd by a root daemon: a relative path would be
 * resolved against whatever the working folder happens to be.
 */
static const char *
check_abs_path_or_empty(const char *s, char *why, size_t whylen)
{
	(void)why;
	(void)whylen;
	return s[0] == '\0' || s[0] == '/' ? NULL :
	    "must be empty or an absolute path";
}

/* The prefix starts every Redis key; keep it free of ':' and braces. */
static const char *
check_prefix(const char *s, char *why, size_t whylen)
{
	size_t n = strlen(s);

	(void)why;
	(void)whylen;
	if (n == 0 || n > 32)
		return "must be 1..32 bytes of [A-Za-z0-9_-]";
	for (size_t i = 0; i < n; i++) {
		if (!is_name_char(s[i]))
			return "must be 1..32 bytes of [A-Za-z0-9_-]";
	}
	return NULL;
}

/* The host name goes into results and consumer names: DNS characters only. */
static const char *
check_host(const char *s, char *why, size_t whylen)
{
	size_t n = strlen(s);

	(void)why;
	(void)whylen;
	if (n > 253)
		return "must be at most 253 bytes";
	for (size_t i = 0; i < n; i++) {
		if (!is_name_char(s[i]) && s[i] != '.')
			return "must be empty or a host name of [A-Za-z0-9._-]";
	}
	return NULL;
}

/*
 * An image reference (images/ref.h) the whole host may default to: a
 * tenant's own name for an image means nothing outside that tenant.
 * config_finish() checks it against image_sources.
 */
static const char *
check_image(const char *s, char *why, size_t whylen)
{
	struct img_ref r;
	struct err e;

	if (img_ref_parse(s, &r, &e) < 0) {
		snprintf(why, whylen, "%s", e.msg);
		return why;
	}
	if (r.kind == IMG_NAME)
		return "a tenant's image name cannot be the host's default";
	return NULL;
}

/*** Setting values ***/

/* Writes v as "16M" when a binary suffix is exact, else as decimal bytes. */
static void
fmt_size(char *buf, size_t len, uint64_t v)
{
	static const struct {
		uint64_t unit;
		char suffix;
	} units[] = { { TIB, 'T' }, { GIB, 'G' }, { MIB, 'M' }, { KIB, 'k' } };

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (v != 0 && v % units[i].unit == 0) {
			snprintf(buf, len, "%" PRIu64 "%c", v / units[i].unit,
			    units[i].suffix);
			return;
		}
	}
	snprintf(buf, len, "%" PRIu64, v);
}

/* Writes a bound or value of o as it would appear in a file. */
static void
fmt_number(char *buf, size_t len, const struct option *o, int64_t v)
{
	if (o->type == OPT_SIZE)
		fmt_size(buf, len, (uint64_t)v);
	else
		snprintf(buf, len, "%" PRId64, v);
}

static void
list_free(char **list)
{
	if (list == NULL)
		return;
	for (char **p = list; *p != NULL; p++)
		free(*p);
	free(list);
}

/*
 * Checks a tenant list: valid names, no duplicates, not too many. Returns
 * NULL or the problem, formatted into why. Used by the parser and again by
 * config_finish() for lists a caller built by hand.
 */
static const char *
tenants_check(char *const *names, size_t n, char *why, size_t whylen)
{
	if (n > CONFIG_TENANTS_MAX) {
		snprintf(why, whylen, "at most %d tenants", CONFIG_TENANTS_MAX);
		return why;
	}
	for (size_t i = 0; i < n; i++) {
		/* key_tenant_valid() allows 1..CONFIG_TENANT_NAME_MAX bytes. */
		if (!key_tenant_valid(names[i])) {
			snprintf(why, whylen, "'%.64s' is not a tenant name "
			    "(1..%d bytes of [A-Za-z0-9_-])", names[i],
			    CONFIG_TENANT_NAME_MAX);
			return why;
		}
		for (size_t k = 0; k < i; k++) {
			if (strcmp(names[k], names[i]) == 0) {
				snprintf(why, whylen, "tenant '%s' is listed twice",
				    names[i]);
				return why;
			}
		}
	}
	return NULL;
}

/*
 * Checks image_sources: at most CONFIG_IMAGE_SOURCES_MAX patterns, each
 * one images/ref.h reads (its message escapes what it shows) and short
 * enough to be printed back on one line, none twice. None is fine: only
 * host.
 */
/* net_allow: host patterns of egress/match.c, none twice. */
static const char *
allow_check(char *const *items, size_t n, char *why, size_t whylen)
{
	struct egress_pat p;
	struct err e;

	if (n > EGRESS_PATS_MAX) {
		snprintf(why, whylen, "at most %d patterns", EGRESS_PATS_MAX);
		return why;
	}
	for (size_t i = 0; i < n; i++) {
		if (egress_pat_parse(items[i], &p, &e) < 0) {
			snprintf(why, whylen, "%s", e.msg);
			return why;
		}
		for (size_t k = 0; k < i; k++)
			if (strcmp(items[k], items[i]) == 0) {
				snprintf(why, whylen, "'%s' is listed twice", items[i]);
				return why;
			}
	}
	return NULL;
}

/*
 * egress_hosts: NAME=ADDR, or NAME:PORT=ADDR:PORT ([ADDR]:PORT for IPv6):
 * egress_host_item_parse() (egress/match.c), which sandq-egress uses too.
 */
static const char *
egress_hosts_check(char *const *items, size_t n, char *why, size_t whylen)
{
	for (size_t i = 0; i < n; i++) {
		struct egress_host_item it;
		struct err e;

		if (egress_host_item_parse(items[i], &it, &e) < 0) {
			snprintf(why, whylen, "item %zu: %s", i + 1, e.msg);
			return why;
		}
	}
	return NULL;
}

/* egress_allow_addrs: ADDR[/BITS] ranges. */
static const char *
egress_addrs_check(char *const *items, size_t n, char *why, size_t whylen)
{
	for (size_t i = 0; i < n; i++) {
		struct egress_cidr c;
		struct err e;

		if (egress_cidr_parse(items[i], &c, &e) < 0) {
			snprintf(why, whylen, "%s", e.msg);
			return why;
		}
	}
	return NULL;
}

static const char *
sources_check(char *const *items, size_t n, char *why, size_t whylen)
{
	struct img_pattern p;
	struct err e;

	if (n > CONFIG_IMAGE_SOURCES_MAX) {
		snprintf(why, whylen, "at most %d patterns", CONFIG_IMAGE_SOURCES_MAX);
		return why;
	}
	for (size_t i = 0; i < n; i++) {
		if (strlen(items[i]) > CONFIG_STRING_MAX) {
			snprintf(why, whylen, "pattern %zu: longer than %d bytes", i + 1,
			    CONFIG_STRING_MAX);
			return why;
		}
		if (img_pattern_parse(items[i], &p, &e) < 0) {
			snprintf(why, whylen, "pattern %zu: %s", i + 1, e.msg);
			return why;
		}
		for (size_t k = 0; k < i; k++) {
			if (strcmp(items[k], items[i]) == 0) {
				snprintf(why, whylen, "'%s' is listed twice", items[i]);
				return why;
			}
		}
	}
	return NULL;
}

/*
 * Checks image_plain_http: each item a registry as a docker:// reference
 * names it (HOST[:PORT], images/ref.h's grammar, canonical), none twice.
 */
static const char *
registries_check(char *const *items, size_t n, char *why, size_t whylen)
{
	char ref[CONFIG_STRING_MAX + 32];
	struct img_ref r;
	struct err e;

	if (n > CONFIG_IMAGE_SOURCES_MAX) {
		snprintf(why, whylen, "at most %d registries", CONFIG_IMAGE_SOURCES_MAX);
		return why;
	}
	for (size_t i = 0; i < n; i++) {
		if (strlen(items[i]) > CONFIG_STRING_MAX || strchr(items[i], '/') != NULL) {
			snprintf(why, whylen, "registry %zu: expected HOST[:PORT]", i + 1);
			return why;
		}
		snprintf(ref, sizeof(ref), "docker://%s/x", items[i]);
		if (img_ref_parse(ref, &r, &e) < 0) {
			snprintf(why, whylen, "registry %zu: %s", i + 1, e.msg);
			return why;
		}
		for (size_t k = 0; k < i; k++) {
			if (strcmp(items[k], items[i]) == 0) {
				snprintf(why, whylen, "'%s' is listed twice", items[i]);
				return why;
			}
		}
	}
	return NULL;
}

/* Checks a list of choices: each item one of ch, none twice, at least one. */
static const char *
choices_check(char *const *items, size_t n, const char *const *ch, char *why,
    size_t whylen)
{
	if (n == 0) {
		snprintf(why, whylen, "at least one item is required");
		return why;
	}
	for (size_t i = 0; i < n; i++) {
		bool known = false;

		for (size_t k = 0; ch[k] != NULL; k++)
			known |= strcmp(items[i], ch[k]) == 0;
		if (!known) {
			size_t off = (size_t)snprintf(why, whylen, "'%.64s' is not one of",
			    items[i]);
			for (size_t k = 0; ch[k] != NULL && off < whylen; k++)
				off += (size_t)snprintf(why + off, whylen - off, "%s %s",
				    k ? "," : "", ch[k]);
			return why;
		}
		for (size_t k = 0; k < i; k++) {
			if (strcmp(items[k], items[i]) == 0) {
				snprintf(why, whylen, "'%s' is listed twice", items[i]);
				return why;
			}
		}
	}
	return NULL;
}

/*
 * Sets a list from "a, b,c". Empty items are skipped, so a trailing comma and
 * a list that starts on the next (indented) line both work; config_finish()
 * insists on at least one tenant. With append, the items are added to the
 * current list (an indented continuation line). The old list is replaced only
 * if the new one is valid.
 */
static int
set_list(struct config *c, const struct option *o, const char *v, bool append,
    const char *ctx, struct err *e)
{
	char ***slot = (char ***)(void *)((char *)c + o->off);
	size_t *count = (size_t *)(void *)((char *)c + o->count_off);
	char **list = NULL;
	size_t n = 0, cap = 0;
	char why[160];
	const char *p = v;

	if (append) {
		cap = *count + 8;
		list = xcalloc(cap + 1, sizeof(*list));
		for (size_t i = 0; i < *count; i++)
			list[n++] = xstrdup((*slot)[i]);
	}
	while (*p != '\0') {
		const char *end = strchr(p, ',');
		const char *a = p, *b;

		if (end == NULL)
			end = p + strlen(p);
		b = end;
		while (a < b && isspace((unsigned char)*a))
			a++;
		while (b > a && isspace((unsigned char)b[-1]))
			b--;
		if (b > a) {
			if (n > CONFIG_TENANTS_MAX) {
				/* Stop copying; the list's check reports it. */
				break;
			}
			if (n == cap) {
				cap = cap ? cap * 2 : 8;
				list = xreallocarray(list, cap + 1, sizeof(*list));
			}
			list[n++] = xmemdup0(a, (size_t)(b - a));
			list[n] = NULL;
		}
		p = *end == ',' ? end + 1 : end;
	}
	if (list == NULL)
		list = xcalloc(1, sizeof(*list));
	list[n] = NULL;
	if ((o->choices ? choices_check(list, n, o->choices, why, sizeof(why)) :
	    o->list_check(list, n, why, sizeof(why))) != NULL) {
		list_free(list);
		return err_set(e, -EINVAL, "%s: %s", ctx, why);
	}
	list_free(*slot);
	*slot = list;
	*count = n;
	return 0;
}

/*
 * Sets a string. Control characters never belong in these values, and
 * " ;" would start an inline comment when config_print()'s output is read
 * back, so both are refused here rather than silently lost later.
 */
static int
set_string(struct config *c, const struct option *o, const char *v,
    const char *ctx, struct err *e)
{
	char **slot = (char **)(void *)((char *)c + o->off);
	size_t n = strlen(v);
	char buf[256];
	const char *why;

	if (n > CONFIG_STRING_MAX)
		return err_set(e, -EINVAL, "%s: longer than %d bytes", ctx,
		    CONFIG_STRING_MAX);
	for (size_t i = 0; i < n; i++) {
		if (iscntrl((unsigned char)v[i]))
			return err_set(e, -EINVAL,
			    "%s: contains a control character", ctx);
		if (v[i] == ';' && i > 0 && isspace((unsigned char)v[i - 1]))
			return err_set(e, -EINVAL,
			    "%s: ' ;' would start a comment", ctx);
	}
	if (o->type == OPT_ENUM) {
		size_t k;

		for (k = 0; o->choices[k] != NULL; k++) {
			if (strcmp(o->choices[k], v) == 0)
				break;
		}
		if (o->choices[k] == NULL) {
			char list[128] = "";

			for (k = 0; o->choices[k] != NULL; k++) {
				if (k > 0)
					strncat(list, ", ", sizeof(list) - strlen(list) - 1);
				strncat(list, o->choices[k], sizeof(list) - strlen(list) - 1);
			}
			return err_set(e, -EINVAL, "%s: expected one of %s, got '%.64s'",
			    ctx, list, v);
		}
	}
	if (o->check != NULL && (why = o->check(v, buf, sizeof(buf))) != NULL)
		return err_set(e, -EINVAL, "%s: %s", ctx, why);
	free(*slot);
	*slot = xstrdup(v);
	return 0;
}

/* Sets an integer or a size, checking its syntax and then its bounds. */
static int
set_number(struct config *c, const struct option *o, const char *v,
    const char *ctx, struct err *e)
{
	void *field = (char *)c + o->off;
	char bound[32];
	int64_t n;

	if (o->type == OPT_INT) {
		if (parse_i64(v, INT64_MIN, INT64_MAX, &n) < 0)
			return err_set(e, -EINVAL,
			    "%s: expected an integer, got '%.64s'", ctx, v);
	} else {
		uint64_t u;

		if (parse_size(v, &u) < 0 || u > INT64_MAX)
			return err_set(e, -EINVAL, "%s: expected a size such as "
			    "512, 64k, 16M or 2G, got '%.64s'", ctx, v);
		n = (int64_t)u;
	}
	if (n < o->min) {
		fmt_number(bound, sizeof(bound), o, o->min);
		return err_set(e, -EINVAL, "%s: must be at least %s", ctx, bound);
	}
	if (n > o->max) {
		fmt_number(bound, sizeof(bound), o, o->max);
		return err_set(e, -EINVAL, "%s: must be at most %s", ctx, bound);
	}
	if (o->u64)
		*(uint64_t *)field = (uint64_t)n;
	else
		*(int64_t *)field = n;
	return 0;
}

/*
 * Sets option o from its text form. ctx starts every message ("FILE:LINE:
 * key" or "--set key"). On error the option keeps its old value.
 */
static int
opt_set(struct config *c, const struct option *o, const char *v, bool append,
    const char *ctx, struct err *e)
{
	switch (o->type) {
	case OPT_STRING:
	case OPT_ENUM:
		return set_string(c, o, v, ctx, e);
	case OPT_LIST:
		return set_list(c, o, v, append, ctx, e);
	case OPT_INT:
	case OPT_SIZE:
		return set_number(c, o, v, ctx, e);
	}
	return err_set(e, -EINVAL, "%s: option of unknown type", ctx);
}

/*** Tenant sections ***/

static struct tenant_config *
tenant_cfg_get(struct config *c, const char *name)
{
	for (size_t i = 0; i < c->ntenant_cfg; i++)
		if (strcmp(c->tenant_cfg[i].name, name) == 0)
			return &c->tenant_cfg[i];
	c->tenant_cfg = xreallocarray(c->tenant_cfg, c->ntenant_cfg + 1,
	    sizeof(*c->tenant_cfg));
	c->tenant_cfg[c->ntenant_cfg] = (struct tenant_config){ .name = xstrdup(name) };
	return &c->tenant_cfg[c->ntenant_cfg++];
}

/*
 * Sets key of [tenant.NAME] from v (append: an indented continuation line):
 * net_modes, with the host option's rules, or any field of the tenant's
 * Redis record (queue/tenant.h, with its rules and messages).
 */
static int
tenant_set(struct config *c, const char *tenant, const char *key, const char *v,
    bool append, const char *ctx, struct err *e)
{
	const struct option *o = opt_find("sandqd", "net_modes");
	struct tenant_config *t;
	struct config tmp;
	int rc;

	if (strcmp(key, "net_allow") == 0) {
		/* The host option's rules, into a scratch config, as below. */
		o = opt_find("sandqd", "net_allow");
		t = tenant_cfg_get(c, tenant);
		memset(&tmp, 0, sizeof(tmp));
		tmp.net_allow = t->net_allow;
		tmp.nnet_allow = t->nnet_allow;
		if ((rc = opt_set(&tmp, o, v, append && t->net_allow != NULL, ctx, e)) < 0)
			return rc;
		t->net_allow = tmp.net_allow;
		t->nnet_allow = tmp.nnet_allow;
		/* An empty list is the tenant's own: none, not the host's. */
		if (t->net_allow == NULL)
			t->net_allow = xcalloc(1, sizeof(char *));
		return 0;
	}
	if (strcmp(key, "egress_rate_bytes") == 0) {
		/* The host option's rules, into a scratch config. */
		o = opt_find("sandqd", "egress_rate_bytes");
		t = tenant_cfg_get(c, tenant);
		memset(&tmp, 0, sizeof(tmp));
		if (append)
			return err_set(e, -EINVAL, "%s: [tenant.%s] %s takes one line", ctx,
			    tenant, key);
		if ((rc = opt_set(&tmp, o, v, false, ctx, e)) < 0)
			return rc;
		t->egress_rate_bytes = tmp.egress_rate_bytes;
		t->has_egress_rate = true;
		return 0;
	}
	if (strcmp(key, "net_modes") != 0) {
		struct err te = { 0 };

		t = tenant_cfg_get(c, tenant);
		if (!t->has_conf && tenant_conf_init(&t->conf, tenant, &te) < 0)
			return err_set(e, -EINVAL, "%s: %s", ctx, te.msg);
		t->has_conf = true;
		if (append)
			return err_set(e, -EINVAL, "%s: [tenant.%s] %s takes one line", ctx,
			    tenant, key);
		/* config_print() writes it back on one line (deny it does not). */
		if (strcmp(key, "image_sources") == 0 && strlen(v) > CONFIG_STRING_MAX)
			return err_set(e, -EINVAL, "%s: [tenant.%s] %s: longer than %d "
			    "bytes", ctx, tenant, key, CONFIG_STRING_MAX);
		if (tenant_conf_set(&t->conf, key, strlen(key), v, strlen(v), &te) < 0)
			return err_set(e, -EINVAL, "%s: [tenant.%s] %s", ctx, tenant, te.msg);
		return 0;
	}
	/* Parse with the host option's own rules, into a scratch config. */
	t = tenant_cfg_get(c, tenant);
	memset(&tmp, 0, sizeof(tmp));
	tmp.net_modes = t->net_modes;
	tmp.nnet_modes = t->nnet_modes;
	/* On success set_list() has freed the old list and made a new one. */
	if ((rc = opt_set(&tmp, o, v, append && t->net_modes != NULL, ctx, e)) < 0)
		return rc;
	t->net_modes = tmp.net_modes;
	t->nnet_modes = tmp.nnet_modes;
	return 0;
}

char *const *
config_net_modes(const struct config *c, const char *tenant, size_t *n)
{
	for (size_t i = 0; tenant != NULL && i < c->ntenant_cfg; i++) {
		if (strcmp(c->tenant_cfg[i].name, tenant) == 0 &&
		    c->tenant_cfg[i].net_modes != NULL) {
			*n = c->tenant_cfg[i].nnet_modes;
			return c->tenant_cfg[i].net_modes;
		}
	}
	*n = c->nnet_modes;
	return c->net_modes;
}

char *const *
config_net_allow(const struct config *c, const char *tenant, size_t *n)
{
	for (size_t i = 0; tenant != NULL && i < c->ntenant_cfg; i++) {
		if (strcmp(c->tenant_cfg[i].name, tenant) == 0 &&
		    c->tenant_cfg[i].net_allow != NULL) {
			*n = c->tenant_cfg[i].nnet_allow;
			return c->tenant_cfg[i].net_allow;
		}
	}
	*n = c->nnet_allow;
	return c->net_allow;
}

int64_t
config_egress_rate(const struct config *c, const char *tenant)
{
	for (size_t i = 0; tenant != NULL && i < c->ntenant_cfg; i++)
		if (strcmp(c->tenant_cfg[i].name, tenant) == 0 &&
		    c->tenant_cfg[i].has_egress_rate)
			return c->tenant_cfg[i].egress_rate_bytes;
	return c->egress_rate_bytes;
}

/*** Files ***/

/* State shared by the line reader and the inih handler during one parse. */
struct parse {
	struct config *c;
	const char *name;	/* file name used in messages */
	const char *next;	/* first byte not yet handed to inih */
	int line;		/* number of the line inih is working on */
	bool cont;		/* that line continues the previous value */
	bool have_key;		/* a key was read since the last [section] */
	bool failed;		/* an error was recorded; stop reading */
	struct err *e;
};

static void parse_fail(struct parse *ps, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Records the first error of a parse as "FILE:LINE: ...". */
static void
parse_fail(struct parse *ps, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (ps->failed)
		return;
	ps->failed = true;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	err_set(ps->e, -EINVAL, "%s:%d: %s", ps->name, ps->line, msg);
}

/*
 * Classifies a line the way inih (with libinih's default options) will,
 * before inih sees it: blank or comment, continuation (indented, after a key
 * in the same section), [section], or key = value. inih skips empty unknown sections and only
 * reports syntax errors as a line number, so both are caught here with a
 * message. Returns false after recording an error.
 */
static bool
parse_check_line(struct parse *ps, const char *line)
{
	const char *s = line;

	if (ps->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;		/* inih skips a UTF-8 BOM */
	while (isspace((unsigned char)*s))
		s++;
	ps->cont = false;
	if (*s == '\0' || *s == ';' || *s == '#')
		return true;
	if (ps->have_key && s > line) {
		ps->cont = true;
		return true;
	}
	if (*s == '[') {
		const char *end = strchr(s + 1, ']');

		if (end == NULL) {
			parse_fail(ps, "expected ']' after the section name");
			return false;
		}
		if (!section_known(s + 1, (size_t)(end - s - 1))) {
			parse_fail(ps, "unknown section [%.*s]",
			    (int)(end - s - 1 > 64 ? 64 : end - s - 1), s + 1);
			return false;
		}
		ps->have_key = false;
		return true;
	}
	/* inih splits at the first '=' or ':' before any inline comment. */
	for (const char *p = s; *p != '\0'; p++) {
		if (*p == '=' || *p == ':')
			return true;
		if (*p == ';' && isspace((unsigned char)p[-1]))
			break;
	}
	parse_fail(ps, "expected 'key = value', '[section]' or a comment");
	return false;
}

/*
 * inih's fgets(): hands over one line of the text (without its newline) and
 * counts it. Returning NULL ends the parse, which is how the first error
 * stops it.
 */
static char *
parse_read_line(char *buf, int size, void *stream)
{
	struct parse *ps = stream;
	const char *p = ps->next;
	const char *nl;
	size_t len;

	if (ps->failed || *p == '\0')
		return NULL;
	nl = strchr(p, '\n');
	len = nl != NULL ? (size_t)(nl - p) : strlen(p);
	ps->next = nl != NULL ? nl + 1 : p + len;
	ps->line++;
	if (size < 1 || len > (size_t)size - 1) {
		parse_fail(ps, "line is longer than %d bytes", size - 1);
		return NULL;
	}
	memcpy(buf, p, len);
	buf[len] = '\0';
	if (!parse_check_line(ps, buf))
		return NULL;
	return buf;
}

/* inih's handler: one key = value, or one continuation line of a key. */
static int
parse_handler(void *user, const char *section, const char *name,
    const char *value)
{
	struct parse *ps = user;
	const struct option *o;
	char ctx[320];

	if (name == NULL)
		return 1;	/* a new [section], already checked */
	ps->have_key = true;
	if (value == NULL) {
		parse_fail(ps, "%s: expected 'key = value'", name);
		return 0;
	}
	if (section[0] == '\0') {
		parse_fail(ps, "option '%.64s' is outside a section", name);
		return 0;
	}
	{
		char t[CONFIG_TENANT_NAME_MAX + 1];

		if (tenant_section(section, strlen(section), t, sizeof(t)) != NULL) {
			snprintf(ctx, sizeof(ctx), "%s:%d: %s", ps->name, ps->line, name);
			if (tenant_set(ps->c, t, name, value, ps->cont, ctx, ps->e) < 0) {
				ps->failed = true;
				return 0;
			}
			return 1;
		}
	}
	if ((o = opt_find(section, name)) == NULL) {
		if (!section_known(section, strlen(section)))
			parse_fail(ps, "unknown section [%.64s]", section);
		else
			parse_fail(ps, "unknown option '%.64s' in section [%s]",
			    name, section);
		return 0;
	}
	if (ps->cont && o->type != OPT_LIST) {
		parse_fail(ps, "%s: an indented line continues this value, "
		    "which takes one line", name);
		return 0;
	}
	snprintf(ctx, sizeof(ctx), "%s:%d: %s", ps->name, ps->line, name);
	if (opt_set(ps->c, o, value, ps->cont, ctx, ps->e) < 0) {
		ps->failed = true;
		return 0;
	}
	return 1;
}

int
config_load_string(struct config *c, const char *text, const char *name,
    struct err *e)
{
	struct parse ps = {
		.c = c,
		.name = name,
		.next = text,
		.e = e,
	};
	int rc;

	err_clear(e);
	rc = ini_parse_stream(parse_read_line, &ps, parse_handler, &ps);
	if (ps.failed)
		return -EINVAL;
	/* The reader catches every syntax error inih knows; belt and braces. */
	if (rc > 0)
		return err_set(e, -EINVAL, "%s:%d: syntax error", name, rc);
	if (rc < 0)
		return err_set(e, -ENOMEM, "%s: out of memory", name);
	return 0;
}

/*
 * Reads the whole file (at most CONFIG_FILE_MAX bytes) and hands it to the
 * parser, which does no I/O.
 */
int
config_load_file(struct config *c, const char *path, struct err *e)
{
	char *buf = NULL;
	size_t len = 0;
	const char *nul;
	int fd = -1;
	int rc;

	err_clear(e);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		rc = -errno;
		return err_set(e, rc, "%s: %s", path, strerror(-rc));
	}
	buf = xmalloc(CONFIG_FILE_MAX + 1);
	for (;;) {
		ssize_t n = read(fd, buf + len, CONFIG_FILE_MAX + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			err_set(e, rc, "%s: %s", path, strerror(-rc));
			goto out_free_buf;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > CONFIG_FILE_MAX) {
			rc = err_set(e, -EFBIG, "%s: larger than %d bytes", path,
			    CONFIG_FILE_MAX);
			goto out_free_buf;
		}
	}
	buf[len] = '\0';
	if ((nul = memchr(buf, '\0', len)) != NULL) {
		int line = 1;

		for (const char *p = buf; p < nul; p++)
			line += *p == '\n';
		rc = err_set(e, -EINVAL, "%s:%d: contains a NUL byte", path, line);
		goto out_free_buf;
	}
	rc = config_load_string(c, buf, path, e);
out_free_buf:
	free(buf);
	close(fd);
	return rc;
}

/*** Public API ***/

void
config_defaults(struct config *c)
{
	struct err e;

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NOPTIONS; i++) {
		/* A default outside its own bounds is a bug in the table. */
		if (opt_set(c, &options[i], options[i].def, false,
		    options[i].name, &e) < 0)
			fatalx("config: bad default: %s", e.msg);
	}
}

void
config_free(struct config *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option *o = &options[i];
		char *base = (char *)c;

		if (o->type == OPT_STRING || o->type == OPT_ENUM)
			free(*(char **)(void *)(base + o->off));
		else if (o->type == OPT_LIST)
			list_free(*(char ***)(void *)(base + o->off));
	}
	for (size_t i = 0; i < c->ntenant_cfg; i++) {
		free(c->tenant_cfg[i].name);
		list_free(c->tenant_cfg[i].net_modes);
		list_free(c->tenant_cfg[i].net_allow);
		if (c->tenant_cfg[i].has_conf)
			tenant_conf_free(&c->tenant_cfg[i].conf);
	}
	free(c->tenant_cfg);
	/* Every pointer is NULL again, so a second call frees nothing. */
	memset(c, 0, sizeof(*c));
}

int
config_set(struct config *c, const char *assignment, struct err *e)
{
	const struct option *o = NULL;
	const char *eq = strchr(assignment, '=');
	const char *ks = assignment, *ke, *vs, *ve, *dot;
	char key[96], ctx[128];
	char *value;
	int rc;

	err_clear(e);
	if (eq == NULL)
		return err_set(e, -EINVAL, "--set %.64s: expected KEY=VALUE",
		    assignment);
	/* Spaces around the key and value are dropped, as in a file. */
	ke = eq;
	while (ks < ke && isspace((unsigned char)*ks))
		ks++;
	while (ke > ks && isspace((unsigned char)ke[-1]))
		ke--;
	vs = eq + 1;
	ve = vs + strlen(vs);
	while (vs < ve && isspace((unsigned char)*vs))
		vs++;
	while (ve > vs && isspace((unsigned char)ve[-1]))
		ve--;
	if ((size_t)(ke - ks) >= sizeof(key))
		return err_set(e, -EINVAL, "--set %.64s: unknown option", ks);
	memcpy(key, ks, (size_t)(ke - ks));
	key[ke - ks] = '\0';
	snprintf(ctx, sizeof(ctx), "--set %s", key);

	/* tenant.NAME.KEY: names hold no dot, keys may (ceiling.wall_ms). */
	if (strncmp(key, "tenant.", 7) == 0 && (dot = strchr(key + 7, '.')) != NULL) {
		char t[CONFIG_TENANT_NAME_MAX + 1];

		if (tenant_section(key, (size_t)(dot - key), t, sizeof(t)) == NULL)
			return err_set(e, -EINVAL, "%s: unknown section [%.*s]", ctx,
			    (int)(dot - key), key);
		value = xmemdup0(vs, (size_t)(ve - vs));
		rc = tenant_set(c, t, dot + 1, value, false, ctx, e);
		free(value);
		return rc;
	}
	if ((dot = strchr(key, '.')) != NULL) {
		char section[96];

		memcpy(section, key, (size_t)(dot - key));
		section[dot - key] = '\0';
		if (!section_known(section, strlen(section)))
			return err_set(e, -EINVAL, "%s: unknown section [%s]",
			    ctx, section);
		o = opt_find(section, dot + 1);
	} else if ((o = opt_find("sandqd", key)) == NULL) {
		o = opt_find("limits", key);
	}
	if (o == NULL)
		return err_set(e, -EINVAL, "%s: unknown option", ctx);
	value = xmemdup0(vs, (size_t)(ve - vs));
	rc = opt_set(c, o, value, false, ctx, e);
	free(value);
	return rc;
}

int
config_finish(struct config *c, struct err *e)
{
	char why[160];

	err_clear(e);
	if (c->workers == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		c->workers = n < 1 ? 1 : n > WORKERS_MAX ? WORKERS_MAX : n;
	}
	if (c->host == NULL || c->host[0] == '\0') {
		char name[HOST_NAME_MAX + 1];

		if (gethostname(name, sizeof(name)) < 0) {
			int rc = -errno;

			return err_set(e, rc, "host: gethostname: %s", strerror(-rc));
		}
		name[sizeof(name) - 1] = '\0';
		if (name[0] == '\0' || check_host(name, why, sizeof(why)) != NULL)
			return err_set(e, -EINVAL, "host: the system host name "
			    "'%.64s' is not usable; set host", name);
		free(c->host);
		c->host = xstrdup(name);
	}
	if (c->ntenants == 0 || c->tenants == NULL)
		return err_set(e, -EINVAL, "tenants: at least one tenant is required");
	if (tenants_check(c->tenants, c->ntenants, why, sizeof(why)) != NULL)
		return err_set(e, -EINVAL, "tenants: %s", why);
	for (size_t i = 0; i < c->ntenant_cfg; i++) {
		bool listed = false;

		for (size_t k = 0; k < c->ntenants; k++)
			listed |= strcmp(c->tenants[k], c->tenant_cfg[i].name) == 0;
		if (!listed)
			return err_set(e, -EINVAL, "[tenant.%s]: '%s' is not one of tenants",
			    c->tenant_cfg[i].name, c->tenant_cfg[i].name);
	}
	/*
	 * Layers are unpacked as one unprivileged uid that owns the cache:
	 * never root, and never one a sandbox runs as (its jobs could then
	 * change the cache's files).
	 */
	if (c->image_unpack_uid == 0)
		c->image_unpack_uid = c->sandbox_uid_base - 1;
	if (c->egress_uid == 0)
		c->egress_uid = c->sandbox_uid_base - 2;
	if (c->image_unpack_uid >= c->sandbox_uid_base &&
	    c->image_unpack_uid < c->sandbox_uid_base + c->workers)
		return err_set(e, -EINVAL, "image_unpack_uid: %lld is the uid of worker "
		    "%lld's sandboxes (sandbox_uid_base %lld)",
		    (long long)c->image_unpack_uid,
		    (long long)(c->image_unpack_uid - c->sandbox_uid_base),
		    (long long)c->sandbox_uid_base);
	if ((c->egress_uid >= c->sandbox_uid_base &&
	    c->egress_uid < c->sandbox_uid_base + c->workers) ||
	    c->egress_uid == c->image_unpack_uid)
		return err_set(e, -EINVAL, "egress_uid: %lld is a sandbox's uid or the "
		    "unpacking uid: the proxy has a uid of its own",
		    (long long)c->egress_uid);
	/* Every job naming no image would be refused: say so at start. */
	{
		struct img_ref r;
		struct err ie;

		if (img_ref_parse(c->default_image, &r, &ie) < 0)
			return err_set(e, -EINVAL, "default_image: %s", ie.msg);
		if (!img_source_allowed(c->image_sources, c->nimage_sources, &r))
			return err_set(e, -EINVAL, "default_image: '%s' is not within "
			    "image_sources%s", c->default_image, c->nimage_sources == 0 ?
			    " (empty: host only)" : "");
	}
	return 0;
}

/* Writes "type, bounds; default D; reloadable or not" for o. */
static void
print_describe(const struct option *o, FILE *f)
{
	char lo[32], hi[32];

	switch (o->type) {
	case OPT_STRING:
		fprintf(f, "; string; default \"%s\"", o->def);
		break;
	case OPT_ENUM:
		fputs("; one of", f);
		for (size_t k = 0; o->choices[k] != NULL; k++)
			fprintf(f, "%s %s", k ? "," : "", o->choices[k]);
		fprintf(f, "; default %s", o->def);
		break;
	case OPT_LIST:
		if (o->choices) {
			fputs("; list of", f);
			for (size_t k = 0; o->choices[k] != NULL; k++)
				fprintf(f, "%s %s", k ? "," : "", o->choices[k]);
		} else {
			fprintf(f, "; list of %s", o->items);
		}
		fprintf(f, "; default %s", o->def[0] ? o->def : "empty");
		break;
	case OPT_INT:
	case OPT_SIZE:
		fmt_number(lo, sizeof(lo), o, o->min);
		fmt_number(hi, sizeof(hi), o, o->max);
		fprintf(f, "; %s %s..%s; default %s",
		    o->type == OPT_SIZE ? "size" : "integer", lo, hi, o->def);
		break;
	}
	fprintf(f, "; %s\n", o->reloadable ? "reloadable" : "needs a restart");
}

/*
 * Writes a list as "a,b,c", continuing on indented lines so that no line
 * outgrows inih's buffer however many tenants there are.
 */
static void
print_list(char *const *list, size_t n, FILE *f)
{
	size_t col = 0;

	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(list[i]);

		if (col > 0 && col + len + 1 > 72) {
			fputs("\n\t", f);
			col = 0;
		}
		fprintf(f, "%s%s", list[i], i + 1 < n ? "," : "");
		col += len + 1;
	}
}

/* Writes option o's value in c as a file would hold it (no newline). */
static void
print_value(const struct config *c, const struct option *o, FILE *f)
{
	const char *field = (const char *)c + o->off;
	char num[32];

	switch (o->type) {
	case OPT_STRING:
	case OPT_ENUM: {
		const char *s = *(char *const *)(const void *)field;

		if (s != NULL && s[0] != '\0')
			fprintf(f, " %s", s);
		break;
	}
	case OPT_LIST: {
		size_t n = *(const size_t *)(const void *)
		    ((const char *)c + o->count_off);

		if (n > 0)
			fputc(' ', f);
		print_list(*(char **const *)(const void *)field, n, f);
		break;
	}
	case OPT_INT:
	case OPT_SIZE:
		fmt_number(num, sizeof(num), o, o->u64 ?
		    (int64_t)*(const uint64_t *)(const void *)field :
		    *(const int64_t *)(const void *)field);
		fprintf(f, " %s", num);
		break;
	}
}

void
config_print(const struct config *c, FILE *f)
{
	const char *section = NULL;

	fputs("; sandqd configuration, as written by sandqd --print-config.\n", f);
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option *o = &options[i];

		if (section == NULL || strcmp(section, o->section) != 0) {
			section = o->section;
			fprintf(f, "\n[%s]\n", section);
		}
		fprintf(f, "\n; %s\n", o->help);
		print_describe(o, f);
		fprintf(f, "%s =", o->name);
		print_value(c, o, f);
		fputc('\n', f);
	}
	for (size_t i = 0; i < c->ntenant_cfg; i++) {
		const struct tenant_config *t = &c->tenant_cfg[i];

		fprintf(f, "\n[tenant.%s]\n", t->name);
		if (t->net_modes != NULL) {
			fputs("net_modes = ", f);
			print_list(t->net_modes, t->nnet_modes, f);
			fputc('\n', f);
		}
		if (t->net_allow != NULL) {
			fputs("net_allow =", f);
			if (t->nnet_allow > 0)
				fputc(' ', f);
			print_list(t->net_allow, t->nnet_allow, f);
			fputc('\n', f);
		}
		if (t->has_egress_rate)
			fprintf(f, "egress_rate_bytes = %lld\n", (long long)t->egress_rate_bytes);
		if (t->has_conf) {
			struct tenant_hash h;

			tenant_hash_encode(&t->conf, &h);
			for (size_t k = 0; k < h.n; k++)
				if (strcmp(h.field[k], "v") != 0 && strcmp(h.field[k], "deny") != 0)
					fprintf(f, "%s = %s\n", h.field[k], h.value[k]);
			tenant_hash_free(&h);
		}
	}
}

/* Option o's value in c as text (owned), to compare two configurations. */
static char *
value_text(const struct config *c, const struct option *o)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		fatal("open_memstream");
	print_value(c, o, f);
	if (fclose(f) != 0)
		fatal("open_memstream");
	return buf;
}

int
config_reload(struct config *live, struct config *fresh, config_reload_cb cb,
    void *arg)
{
	int changed = 0;

	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option *o = &options[i];
		char *was = value_text(live, o), *now = value_text(fresh, o);
		char *lf = (char *)live + o->off, *ff = (char *)fresh + o->off;
		char name[64];

		snprintf(name, sizeof(name), "%s%s%s", strcmp(o->section, "sandqd") ?
		    o->section : "", strcmp(o->section, "sandqd") ? "." : "", o->name);
		if (strcmp(was, now) == 0 || strcmp(o->section, "gateway") == 0) {
			/* Unchanged, or sandq-gateway's: nothing to do here. */
		} else if (!o->reloadable) {
			cb(arg, name, was[0] == ' ' ? was + 1 : was,
			    now[0] == ' ' ? now + 1 : now, false);
		} else {
			/* Swapped, so that freeing fresh frees the old value. */
			switch (o->type) {
			case OPT_STRING:
			case OPT_ENUM: {
				char *t = *(char **)(void *)lf;

				*(char **)(void *)lf = *(char **)(void *)ff;
				*(char **)(void *)ff = t;
				break;
			}
			case OPT_LIST: {
				char **t = *(char ***)(void *)lf;
				size_t *ln = (size_t *)(void *)((char *)live + o->count_off);
				size_t *fn = (size_t *)(void *)((char *)fresh + o->count_off);
				size_t tn = *ln;

				*(char ***)(void *)lf = *(char ***)(void *)ff;
				*(char ***)(void *)ff = t;
				*ln = *fn;
				*fn = tn;
				break;
			}
			case OPT_INT:
			case OPT_SIZE:
				if (o->u64)
					*(uint64_t *)(void *)lf = *(uint64_t *)(void *)ff;
				else
					*(int64_t *)(void *)lf = *(int64_t *)(void *)ff;
				break;
			}
			cb(arg, name, was[0] == ' ' ? was + 1 : was,
			    now[0] == ' ' ? now + 1 : now, true);
			changed++;
		}
		free(was);
		free(now);
	}
	return changed;
}

const struct tenant_conf *
config_tenant_conf(const struct config *c, const char *tenant)
{
	for (size_t i = 0; tenant != NULL && i < c->ntenant_cfg; i++)
		if (c->tenant_cfg[i].has_conf && strcmp(c->tenant_cfg[i].name, tenant) == 0)
			return &c->tenant_cfg[i].conf;
	return NULL;
}

const struct job_limits *
config_preset_limits(enum job_preset p)
{
	switch (p) {
	case PRESET_STRICT:
	case PRESET_NORMAL:
	case PRESET_PERMISSIVE:
		return &presets[p];
	case PRESET_DEFAULT:
		break;
	}
	return NULL;
}

/* The field of struct job_limits whose ceiling [limits] option o is. */
static uint64_t *
limit_field(struct job_limits *l, const struct option *o)
{
	return (uint64_t *)(void *)((char *)l + (o->off -
	    offsetof(struct config, ceiling)));
}

int
config_job_limits(const struct config *c, const struct job *j,
    struct job_limits *out, struct err *e)
{
	enum job_preset p = j->preset;
	const struct job_limits *preset;
	struct job_limits want = j->limits;
	struct job_limits ceiling = c->ceiling;
	struct job_limits res;

	err_clear(e);
	if (p == PRESET_DEFAULT && job_preset_parse(c->default_preset, &p) < 0)
		return err_set(e, -EINVAL, "default_preset: unknown preset '%s'",
		    c->default_preset);
	if ((preset = config_preset_limits(p)) == NULL)
		return err_set(e, -EINVAL, "field 'preset': unknown preset %d", (int)p);
	res = *preset;
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option *o = &options[i];
		uint64_t *v, asked, max;

		if (strcmp(o->section, "limits") != 0)
			continue;
		v = limit_field(&res, o);
		asked = *limit_field(&want, o);
		max = *limit_field(&ceiling, o);
		if (asked != 0) {
			/* The job asked for this value: refuse, never shrink. */
			if (asked > max)
				return err_set(e, -EINVAL, "field 'limits.%s': %"
				    PRIu64 " is above the ceiling of %" PRIu64,
				    o->name, asked, max);
			*v = asked;
		} else if (*v > max) {
			/* The operator lowered a ceiling below the preset. */
			*v = max;
		}
	}
	*out = res;
	return 0;
}
