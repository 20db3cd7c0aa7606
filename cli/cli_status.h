/*
 * cli_status.h - `sandq status` (cli_status.c): its entry point, which the
 * dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_STATUS_H
#define SANDQ_CLI_STATUS_H

struct cli_conn;

/* Runs `sandq status [--json]`: argv[0] is "status". */
int cli_status_main(const struct cli_conn *conn, int argc, char **argv);

#endif
