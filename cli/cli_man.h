/*
 * cli_man.h - the manual pages of the sandq command (cli_man.c). The
 * dispatcher (cli.c) prints them for sandq --help and sandq help COMMAND,
 * each verb group for its own --help. Not installed.
 */
#ifndef SANDQ_CLI_MAN_H
#define SANDQ_CLI_MAN_H

#include <stdbool.h>

/* Prints sandq's own page (sandq --help, sandq help) on stdout. */
void cli_man_main(void);
/*
 * Prints the page of the command name ("run", "sandbox", "kv", "batch",
 * "doctor", ...) on stdout. Returns false, having printed nothing, for a
 * name that has no page.
 */
bool cli_man_print(const char *name);

#endif
