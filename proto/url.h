/*
 * url.h - Redis addresses as sandq spells them (pure).
 *
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]   TCP, port 6379 by default
 *   unix://[[USER]:PASSWORD@]/PATH               a unix socket
 *
 * The credentials form is what `sandq tenant add` prints for a tenant's own
 * Redis ACL user.
 */
#ifndef SANDQ_PROTO_URL_H
#define SANDQ_PROTO_URL_H

#include "../common/err.h"

struct redis_url {
	char host[256];		/* TCP host, or "" for unix */
	int port;		/* TCP port */
	char path[108];		/* unix socket path, or "" for TCP */
	char user[128];		/* ACL user, or "" */
	char pass[256];		/* password, or "" */
	int db;			/* database number */
};

/* Parses s into u. Returns 0 or -EINVAL with e naming the problem. */
int redis_url_parse(const char *s, struct redis_url *u, struct err *e);

#endif
