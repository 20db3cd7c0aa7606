/*
 * cli_batch.h - `sandq batch` (cli_batch.c): its entry point, which the
 * dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_BATCH_H
#define SANDQ_CLI_BATCH_H

struct cli_conn;

/* Runs `sandq batch run|status ...`: argv[0] is "batch". */
int cli_batch_main(const struct cli_conn *conn, int argc, char **argv);

#endif
