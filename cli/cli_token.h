/*
 * cli_token.h - `sandq tenant token add|ls|rm` (cli_token.c): the HTTP
 * gateway's API tokens (queue/token.h), kept as their SHA-256 in
 * PREFIX:tokens. cli_tenant.c hands `tenant token ...` over to
 * cli_token_main(), and `tenant rm` uses the two helpers below to delete
 * the tenant's tokens in its own MULTI.
 */
#ifndef SANDQ_CLI_TOKEN_H
#define SANDQ_CLI_TOKEN_H

#include <hiredis/hiredis.h>
#include <stddef.h>

struct cli_conn;

/*
 * Runs `sandq tenant ... token VERB ...`: argv[0] is "tenant", options may
 * come anywhere, the operands are "token", VERB and VERB's own. redis,
 * json and help are what was given before "tenant" (conn). Returns the
 * process's exit status: 0, 1 (rm found no such token) or 125.
 */
int cli_token_main(const struct cli_conn *conn, int argc, char **argv);

/*
 * The hashes (fields of PREFIX:tokens) of tenant's tokens, read with the
 * admin connection rc: *out (n of them, malloc'd, owned by the caller,
 * freed with cli_token_hashes_free) may be NULL for none. Records that do
 * not decode are not counted: they name no tenant one can trust. Returns
 * 0, or -EIO with msg (len bytes) saying why.
 */
int cli_token_hashes_of(redisContext *rc, const char *prefix, const char *tenant,
    char ***out, size_t *n, char *msg, size_t len);
/* Frees what cli_token_hashes_of() returned. */
void cli_token_hashes_free(char **h, size_t n);
/*
 * Sends, inside the caller's MULTI, HDEL PREFIX:tokens HASH... (n >= 1)
 * and checks it was QUEUED. Returns 0, or -EIO with msg.
 */
int cli_token_queue_hdel(redisContext *rc, const char *prefix, char **h, size_t n,
    char *msg, size_t len);

#endif
