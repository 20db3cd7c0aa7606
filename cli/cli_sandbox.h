/*
 * cli_sandbox.h - `sandq sandbox`, `sandq fs` and `sandq kv`
 * (cli_sandbox.c): their entry point, which the dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_SANDBOX_H
#define SANDQ_CLI_SANDBOX_H

#include <stdbool.h>

struct cli_conn;

/* True for "sandbox", "fs" and "kv". */
bool cli_sandbox_is_group(const char *name);
/*
 * Runs `sandq GROUP [OPTIONS] VERB ARGS...`: argv[0] is the group. conn
 * holds what was given before it. Returns the process's exit status.
 */
int cli_sandbox_main(const struct cli_conn *conn, int argc, char **argv);

#endif
