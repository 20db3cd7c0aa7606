/*
 * cli_tenant.h - `sandq tenant` (cli_tenant.c): its entry point, which the
 * dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_TENANT_H
#define SANDQ_CLI_TENANT_H

struct cli_conn;

/*
 * Runs `sandq tenant VERB ...`: argv[0] is "tenant". conn gives --redis,
 * --json and --help seen before it; a --tenant there is refused. Returns
 * the process's exit status.
 */
int cli_tenant_main(const struct cli_conn *conn, int argc, char **argv);

#endif
