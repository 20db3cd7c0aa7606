/*
 * cli_dead.h - `sandq dead` and `sandq cancel` (cli_dead.c): their entry
 * points, which the dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_DEAD_H
#define SANDQ_CLI_DEAD_H

struct cli_conn;

/* Runs `sandq dead VERB ...`: argv[0] is "dead". */
int cli_dead_main(const struct cli_conn *conn, int argc, char **argv);
/* Runs `sandq cancel ID...`: argv[0] is "cancel". */
int cli_cancel_main(const struct cli_conn *conn, int argc, char **argv);

#endif
