/*
 * main.c - sandq-gateway's start-up: options, then gw_run() (server.c).
 *
 *   sandq-gateway [--listen ADDR:PORT] [--redis URL] [--prefix P]
 *                 [--max-body BYTES] [--max-streams N]
 *                 [--max-batch-body BYTES]
 *
 * The Redis URL carries the operator's (admin) credentials: the gateway
 * reads the token hash and writes every tenant's stream, and acts for one
 * tenant per request, the one its token names. docs/gateway.md.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/err.h"
#include "../common/log.h"
#include "gateway.h"

#define GW_MAX_BODY_LIMIT (64u * 1024u * 1024u)	/* bound of --max-body */
#define GW_MAX_STREAMS_LIMIT 100000u		/* bound of --max-streams */
#define GW_MAX_BATCH_BODY_LIMIT (256u * 1024u * 1024u)	/* bound of --max-batch-body */

static void
usage(FILE *f)
{
	fprintf(f, "usage: sandq-gateway [--listen ADDR:PORT] [--redis URL] "
	    "[--prefix PREFIX] [--max-body BYTES] [--max-streams N]\n"
	    "                     [--max-batch-body BYTES]\n"
	    "  --listen    address to serve HTTP on (default 127.0.0.1:8080)\n"
	    "  --redis     Redis URL with the operator's credentials "
	    "(default redis://127.0.0.1:6379)\n"
	    "  --prefix    key prefix (default sandq)\n"
	    "  --max-body  bytes of a request body (default 1048576)\n"
	    "  --max-streams  open event streams at most (default 1000)\n"
	    "  --max-batch-body  bytes of a POST /v1/batches body "
	    "(default 16777216)\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "redis", required_argument, NULL, 'r' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "max-body", required_argument, NULL, 'm' },
		{ "max-streams", required_argument, NULL, 's' },
		{ "max-batch-body", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct gw_opts o = {
		.listen = "127.0.0.1:8080",
		.redis = "redis://127.0.0.1:6379",
		.prefix = "sandq",
		.max_body = 1024 * 1024,
		.max_streams = 1000,
		.max_batch_body = 16 * 1024 * 1024,
	};
	struct err e = { 0 };
	char *end;
	int c;

	log_procinit("gateway");
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
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	gw_run(&o, &e);
	fprintf(stderr, "sandq-gateway: %s\n", e.msg);
	return 1;
}
