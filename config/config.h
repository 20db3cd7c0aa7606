/*
 * config.h - sandqd's configuration: one table of every option.
 *
 * Only the dispatcher parses configuration; workers receive validated,
 * fully resolved per-job limits in each job message. The option table in
 * config.c (name, section, type, default, bounds, reloadable, offsetof) drives
 * the INI parser, `sandqd --print-config` and docs/operations.md, so an option
 * exists in exactly one place.
 *
 * Lifecycle: config_defaults() -> config_load_file() (optional) ->
 * config_set() for each command-line override -> config_finish() (derives
 * values such as the worker count and host name and checks cross-field
 * rules) -> use -> config_free().
 *
 * Errors name their origin: "sandq.conf:12: workers: must be at most 1024",
 * or "--set workers: ..." for command-line overrides.
 */
#ifndef SANDQ_CONFIG_H
#define SANDQ_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/err.h"
#include "../proto/job.h"
#include "../queue/tenant.h"

#define CONFIG_TENANTS_MAX 256
#define CONFIG_TENANT_NAME_MAX 64

/* A [tenant.NAME] section: what one tenant has of its own. */
struct tenant_config {
	char *name;
	char **net_modes;		/* NULL: the host's net_modes */
	size_t nnet_modes;
	char **net_allow;		/* NULL: the host's net_allow */
	size_t nnet_allow;
	int64_t egress_rate_bytes;	/* when has_egress_rate: its own rate */
	bool has_egress_rate;
	struct tenant_conf conf;	/* the settings of queue/tenant.h */
	bool has_conf;			/* the section set one of them */
};

struct config {
	/* [sandqd] */
	char *redis;			/* redis://HOST:PORT or unix:///PATH */
	char *state;			/* state folder (image, run dirs) */
	int64_t workers;		/* 0 = number of CPUs */
	char **tenants;			/* names, NULL-terminated */
	size_t ntenants;
	char *prefix;			/* key prefix, default "sandq" */
	char *host;			/* host name in results; "" = gethostname */
	char *log_level;		/* error|warn|info|debug */
	char *log_format;		/* text|json (common/log.h) */
	int64_t drain_timeout_ms;	/* SIGTERM: time running jobs get */
	int64_t result_ttl_s;		/* TTL of res and done keys */
	int64_t read_block_ms;		/* XREADGROUP BLOCK */
	char *worker_path;		/* "" = next to sandqd, then libexec */
	int64_t sandbox_uid_base;	/* host uid of worker i's jobs: base + i */
	char *default_preset;		/* strict|normal|permissive */
	char *workspace_overlay;	/* auto|off */
	char *job_netns;		/* shared|fresh */
	char *snapshot_store;		/* local|redis */
	int64_t lease_ms;		/* a host's hold on what it read, unrenewed */
	int64_t worker_max_jobs;	/* jobs before a worker is replaced; 0 never */
	int64_t max_attempts;		/* runs a job gets across infrastructure failures */
	int64_t retry_backoff_ms;	/* delay before the second attempt, doubling */
	int64_t worker_max_memory_growth;	/* own RSS growth that replaces it; 0 never */
	int64_t worker_setup_timeout_ms;	/* fork to HELLO at most, or killed */
	int64_t worker_stuck_grace_ms;	/* past a job's wall limit, or killed */
	int64_t job_socket_bytes;	/* a job's TCP and UDP buffers (v1); 0 = its memory */
	int64_t job_sockets;		/* sockets a job may hold to make an inet one */
	int64_t audit_stream_max;	/* events per tenant audit stream */
	int64_t audit_retention_s;	/* age limit of the audit database */
	int64_t audit_max_bytes;	/* size limit of the audit database */
	int64_t max_job_bytes;		/* largest stream entry accepted */
	int64_t respawn_backoff_ms;	/* first delay before respawning a worker */
	int64_t keep_versions;		/* history rows per sandbox; 0 = all */
	char **net_modes;		/* network modes jobs may ask for */
	size_t nnet_modes;
	/* Network by allowlist (issue 21; docs/security.md). */
	char **net_allow;		/* host patterns net "allow" jobs may name,
					 * a tenant's own in [tenant.NAME] */
	size_t nnet_allow;
	char **egress_hosts;		/* NAME=ADDR the proxy resolves itself */
	size_t negress_hosts;
	char **egress_allow_addrs;	/* CIDRs a connection may reach anyway */
	size_t negress_allow_addrs;
	int64_t egress_uid;		/* the proxy's uid; 0 in a file: set by
					 * config_finish() to sandbox_uid_base - 2 */
	int64_t egress_port;		/* its listener in each job: 127.0.0.1:PORT */
	int64_t egress_conns_max;	/* a job's connections at once; 0: no cap */
	int64_t egress_bytes_max;	/* a job's bytes both ways; 0: no cap */
	int64_t egress_rate_bytes;	/* a job's bytes per second each way; 0: none,
					 * a tenant's own in [tenant.NAME] */
	char *egress_path;		/* "" = next to sandqd, then libexec */
	char **image_sources;		/* image_sources patterns (images/ref.h);
					 * none = only host */
	size_t nimage_sources;
	char *default_image;		/* the image of a job that names none */
	int64_t image_cache_bytes;	/* STATE/images kept under it; 0: no bound */
	int64_t image_pull_timeout_ms;	/* one pull (skopeo's copy) at most */
	int64_t image_unpack_uid;	/* who unpacks layers; 0 in a file: set
					 * by config_finish() to sandbox_uid_base - 1 */
	char **image_plain_http;	/* registries (HOST[:PORT]) reached over
					 * plain HTTP, without TLS */
	size_t nimage_plain_http;
	int64_t image_max_layer_bytes;	/* the unpacker's bounds per layer: */
	int64_t image_max_layer_entries;	/* files' bytes, tar entries and */
	int64_t image_max_layer_ratio;	/* uncompressed / compressed bytes */
	char *metrics_listen;		/* GET /metrics: ADDR:PORT, "" = off */
	/* [limits]: ceilings a job may ask for. */
	struct job_limits ceiling;
	/* [gateway]: sandq-gateway's own (sandqd reads and ignores them). */
	struct {
		char *listen;		/* ADDR:PORT or [ADDR6]:PORT */
		char *redis;		/* "" = [sandqd] redis */
		char *prefix;		/* "" = [sandqd] prefix */
		int64_t max_body;	/* bytes of a request body */
		int64_t max_streams;	/* open event streams at most */
		int64_t max_connections;	/* open connections at most */
		int64_t poll_ms;	/* a long poll's fallback GET period */
		int64_t max_batch_body;	/* bytes of a POST /v1/batches body */
		char *mcp_origins;	/* "A,B" or "" */
		char *dashboard;	/* the dashboard's folder; "" = beside the binary */
	} gateway;
	/* [tenant.NAME] sections, in the order they were first given. */
	struct tenant_config *tenant_cfg;
	size_t ntenant_cfg;
};

/* Fills c with every option's default (allocates strings). */
void config_defaults(struct config *c);
/* Frees every member; c can be defaulted again. */
void config_free(struct config *c);

/*
 * Parses an INI file over the current values. Returns 0, -errno if the file
 * cannot be read, or -EINVAL with e->msg = "FILE:LINE: key: problem".
 * Unknown sections or keys are errors.
 */
int config_load_file(struct config *c, const char *path, struct err *e);
/* Same, from a string (for tests); name is used in messages. */
int config_load_string(struct config *c, const char *text, const char *name,
    struct err *e);

/*
 * Sets one option from "key=value" or "section.key=value" (command line).
 * Returns 0 or -EINVAL with e->msg naming the key and the problem.
 */
int config_set(struct config *c, const char *assignment, struct err *e);

/* Derives defaults that depend on the machine and checks cross-field rules. */
int config_finish(struct config *c, struct err *e);

/*
 * What config_reload() reports of each option whose value differs: its
 * name ("log_level", "limits.wall_ms"), the value in use and the new one
 * (as a file writes them), and whether it was applied (reloadable) or
 * kept until a restart.
 */
typedef void (*config_reload_cb)(void *arg, const char *name, const char *was,
    const char *now, bool applied);
/*
 * SIGHUP: moves into live each reloadable option whose value in fresh (a
 * configuration read again and finished) differs, and calls cb for every
 * option that differs, applied or not. [gateway] and [tenant.NAME]
 * sections are not reloaded. fresh keeps the replaced values: the caller
 * frees it. Returns how many options changed.
 */
int config_reload(struct config *live, struct config *fresh, config_reload_cb cb,
    void *arg);

/* Writes the effective configuration as a valid INI file. */
void config_print(const struct config *c, FILE *f);
/*
 * The network modes tenant may use: its own [tenant.NAME] net_modes, else
 * the host's. Sets *n.
 */
char *const *config_net_modes(const struct config *c, const char *tenant, size_t *n);
/*
 * The host patterns tenant's net "allow" jobs may name: its own [tenant.NAME]
 * net_allow, else the host's (possibly none: then no job of it may use net
 * "allow"). *n is the count.
 */
char *const *config_net_allow(const struct config *c, const char *tenant, size_t *n);

/*
 * The egress rate of tenant's net "allow" jobs, bytes per second each way
 * (0: no limit): its [tenant.NAME] egress_rate_bytes, else the host's.
 */
int64_t config_egress_rate(const struct config *c, const char *tenant);
/*
 * The settings a [tenant.NAME] section gives (weight, max_running, ...: the
 * fields of the tenant's Redis record, docs/tenants.md), or NULL when it
 * sets none. Settings kept in Redis for the tenant take precedence.
 */
const struct tenant_conf *config_tenant_conf(const struct config *c, const char *tenant);

/*
 * Resolves a job's limits: the preset's numbers (the job's preset, else the
 * config's default_preset), overridden by each limit the job set. Fills out
 * with all seven limits. Returns 0, or -EINVAL if one exceeds the ceiling,
 * with e->msg = "field 'limits.memory_bytes': 9000000000 is above the
 * ceiling of 8589934592".
 */
int config_job_limits(const struct config *c, const struct job *j,
    struct job_limits *out, struct err *e);

/* The numbers of a preset (documented in docs/protocol.md). */
const struct job_limits *config_preset_limits(enum job_preset p);

#endif
