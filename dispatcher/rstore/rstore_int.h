/*
 * rstore_int.h - what the files of the Redis store share, and nothing else
 * sees: the handle, the pipeline helpers and the scripts. rstore.c holds
 * the handle and the sandboxes; rstore_blob.c moves blobs (push and
 * pull); rstore_lua.c the scripts.
 */
#ifndef SANDQ_DISPATCHER_RSTORE_INT_H
#define SANDQ_DISPATCHER_RSTORE_INT_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "../../common/err.h"
#include "rstore.h"

/* The scripts, by index into struct rstore's loaded SHA-1s. */
enum rstore_script {
	RS_COMMIT,		/* rstore_commit_lua */
	RS_FORK,		/* rstore__fork_lua */
	RS_DELETE,		/* rstore__delete_lua */
	RS_NSCRIPTS
};

struct rstore {
	redisContext *c;			/* NULL once broken: reopened */
	char *url;				/* to reopen; wiped at close */
	char prefix[RSTORE_PREFIX_MAX + 1];	/* P of P:{T}:... */
	char sha[RS_NSCRIPTS][41];		/* SCRIPT LOAD's answers */
	long chunks_fetched;			/* test hook */
	long chunks_pushed;			/* test hook */
};

extern const char rstore__fork_lua[];
extern const char rstore__delete_lua[];

/*** rstore.c ***/

/*
 * The connection, opened again if an earlier I/O error broke it (the
 * scripts are loaded again too). 0 or -EIO with e.
 */
int rstore__conn(struct rstore *rs, struct err *e);
/*
 * Queues one command (argv, len: argc arguments, binary-safe). 0, or -EIO
 * with e (the connection is dropped: replies already queued are lost).
 */
int rstore__append(struct rstore *rs, int argc, const char **argv,
    const size_t *len, struct err *e);
/*
 * The next reply of the pipeline into *r (the caller frees it), sending
 * what is queued first. An I/O error or timeout drops the connection:
 * -EIO with e. An error reply is a reply: the caller looks at r->type.
 */
int rstore__reply(struct rstore *rs, redisReply **r, struct err *e);
/*
 * Reads and frees n replies still queued, so the connection is in step
 * for the next call; drops it if that fails.
 */
void rstore__drain(struct rstore *rs, size_t n);
/* One command and its reply: rstore__append() then rstore__reply(). */
int rstore__command(struct rstore *rs, int argc, const char **argv,
    const size_t *len, redisReply **r, struct err *e);
/* Checks a tenant and a sandbox id as store.c does (field names id). */
int rstore__names_check(const char *tenant, const char *field,
    const char *id, struct err *e);
/* Builds key_store(); -ENAMETOOLONG naming it (never, for checked names). */
int rstore__key(struct rstore *rs, char *buf, const char *tenant,
    const char *kind, const char *id, struct err *e);

#endif
