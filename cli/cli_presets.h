/*
 * cli_presets.h - `sandq presets` (cli_presets.c): its entry point, which
 * the dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_PRESETS_H
#define SANDQ_CLI_PRESETS_H

struct cli_conn;

/* Runs `sandq presets [NAME] [--json]`: argv[0] is "presets". */
int cli_presets_main(const struct cli_conn *conn, int argc, char **argv);

#endif
