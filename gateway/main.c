/*
 * main.c - sandq-gateway's start-up: options, then gw_run() (server.c).
 *
 *   sandq-gateway [--config FILE] [--listen ADDR:PORT] [--redis URL]
 *                 [--prefix P] [--max-body BYTES] [--max-streams N]
 *                 [--max-connections N] [--mcp-origin LIST]
 *                 [--max-batch-body BYTES] [--poll-ms MS]
 *                 [--dashboard DIR]
 *
 * --config reads the [gateway] section of a sandq.conf (config/config.c,
 * the parser and option table sandqd uses, so one file serves both and
 * is checked whole); its empty redis and prefix take [sandqd]'s. The
 * command line overrides the file, wherever --config appears.
 *
 * The Redis URL carries the operator's (admin) credentials: the gateway
 * reads the token hash and writes every tenant's stream, and acts for one
 * tenant per request, the one its token names. docs/gateway.md.
 *
 * --help prints sandq-gateway(8), the page man shows
 * (docs/man/sandq-gateway.8.scd): a new option goes into the page too.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/err.h"
#include "../common/log.h"
#include "../config/config.h"
#include "gateway.h"

#define GW_MAX_BODY_LIMIT (64u * 1024u * 1024u)	/* bound of --max-body */
#define GW_MAX_STREAMS_LIMIT 100000u		/* bound of --max-streams */
#define GW_MAX_CONNS_LIMIT 1000000u		/* bound of --max-connections */
#define GW_POLL_MS_LIMIT 60000u			/* bound of --poll-ms */
#define GW_MAX_BATCH_BODY_LIMIT (256u * 1024u * 1024u)	/* bound of --max-batch-body */

/* sandq-gateway(8) as mandoc renders it: docs/man/sandq-gateway.8.scd,
 * made into C at build time by docs/man/help2c.py (build/gen/gateway_man.c). */
extern const char gateway_man[];

/* The one-line usage of a usage error, on stderr. */
static void
usage(void)
{
	fputs("usage: sandq-gateway [--config FILE] [--listen ADDR:PORT] [--redis URL] "
	    "[options] (see --help)\n", stderr);
}

/*
 * The [gateway] section of the file named by the first --config in argv
 * (config_load_file() checks the whole file, as sandqd does) into o; its
 * strings stay in c. Returns 0, or -errno with e naming the file and line.
 */
static int
load_config(int argc, char **argv, struct config *c, struct gw_opts *o, struct err *e)
{
	const char *file = NULL;
	int rc;

	for (int i = 1; i < argc && file == NULL; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			file = argv[i + 1];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			file = argv[i] + 9;
	}
	if (file == NULL)
		return 0;
	config_defaults(c);
	if ((rc = config_load_file(c, file, e)) < 0)
		return rc;
	o->listen = c->gateway.listen;
	o->redis = c->gateway.redis[0] ? c->gateway.redis : c->redis;
	o->prefix = c->gateway.prefix[0] ? c->gateway.prefix : c->prefix;
	o->max_body = (size_t)c->gateway.max_body;
	o->max_streams = (size_t)c->gateway.max_streams;
	o->max_connections = (size_t)c->gateway.max_connections;
	o->poll_ms = (uint64_t)c->gateway.poll_ms;
	o->max_batch_body = (size_t)c->gateway.max_batch_body;
	o->mcp_origins = c->gateway.mcp_origins[0] ? c->gateway.mcp_origins : NULL;
	o->dashboard = c->gateway.dashboard;
	return 0;
}

/*
 * The options (the file's, then the command line's) into a server that
 * runs until it fails: 2 for a usage error, 1 when the server stops. cfg
 * holds the file's strings; the caller frees it.
 */
static int
gateway_main(int argc, char **argv, struct config *cfg)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "redis", required_argument, NULL, 'r' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "max-body", required_argument, NULL, 'm' },
		{ "max-streams", required_argument, NULL, 's' },
		{ "mcp-origin", required_argument, NULL, 'o' },
		{ "max-connections", required_argument, NULL, 'n' },
		{ "config", required_argument, NULL, 'c' },
		{ "max-batch-body", required_argument, NULL, 'B' },
		{ "poll-ms", required_argument, NULL, 'P' },
		{ "dashboard", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct gw_opts o = {
		.listen = "127.0.0.1:8080",
		.redis = "redis://127.0.0.1:6379",
		.prefix = "sandq",
		.max_body = 1024 * 1024,
		.max_streams = 1000,
		.max_connections = 10000,
		.poll_ms = 250,
		.max_batch_body = 16 * 1024 * 1024,
	};
	struct err e = { 0 };
	char *end;
	int c;

	if (load_config(argc, argv, cfg, &o, &e) < 0) {
		fprintf(stderr, "sandq-gateway: --config: %s\n", e.msg);
		return 2;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			o.listen = optarg;
			break;
		case 'r':
			o.redis = optarg;
			break;
		case 'p':
			o.prefix = optarg;
			break;
		case 'm':
			errno = 0;
			o.max_body = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || o.max_body == 0 ||
			    o.max_body > GW_MAX_BODY_LIMIT) {
				fprintf(stderr, "sandq-gateway: --max-body: 1 to %u bytes\n",
				    GW_MAX_BODY_LIMIT);
				return 2;
			}
			break;
		case 's':
			errno = 0;
			o.max_streams = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || o.max_streams == 0 ||
			    o.max_streams > GW_MAX_STREAMS_LIMIT) {
				fprintf(stderr, "sandq-gateway: --max-streams: 1 to %u\n",
				    GW_MAX_STREAMS_LIMIT);
				return 2;
			}
			break;
		case 'o':
			o.mcp_origins = optarg;
			break;
		case 'n':
			errno = 0;
			o.max_connections = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || o.max_connections == 0 ||
			    o.max_connections > GW_MAX_CONNS_LIMIT) {
				fprintf(stderr, "sandq-gateway: --max-connections: 1 to %u\n",
				    GW_MAX_CONNS_LIMIT);
				return 2;
			}
			break;
		case 'P':
			errno = 0;
			o.poll_ms = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || o.poll_ms < 10 ||
			    o.poll_ms > GW_POLL_MS_LIMIT) {
				fprintf(stderr, "sandq-gateway: --poll-ms: 10 to %u\n",
				    GW_POLL_MS_LIMIT);
				return 2;
			}
			break;
		case 'c':
			break;	/* read by load_config() */
		case 'D':
			o.dashboard = optarg;
			break;
		case 'B':
			errno = 0;
			o.max_batch_body = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || o.max_batch_body == 0 ||
			    o.max_batch_body > GW_MAX_BATCH_BODY_LIMIT) {
				fprintf(stderr, "sandq-gateway: --max-batch-body: 1 to %u "
				    "bytes\n", GW_MAX_BATCH_BODY_LIMIT);
				return 2;
			}
			break;
		case 'h':
			fputs(gateway_man, stdout);
			return 0;
		default:
			usage();
			return 2;
		}
	}
	if (optind != argc) {
		usage();
		return 2;
	}
	gw_run(&o, &e);
	fprintf(stderr, "sandq-gateway: %s\n", e.msg);
	return 1;
}

int
main(int argc, char **argv)
{
	struct config cfg = { 0 };
	int rc;

	log_procinit("gateway");
	rc = gateway_main(argc, argv, &cfg);
	config_free(&cfg);
	return rc;
}
