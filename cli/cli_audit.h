/*
 * cli_audit.h - `sandq audit` (cli_audit.c): its entry point, which the
 * dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_AUDIT_H
#define SANDQ_CLI_AUDIT_H

/*
 * Runs `sandq [OPTIONS] audit [OPTIONS]`: parses all of argv itself.
 * Returns the process's exit status (0, 2 usage, 125 failure).
 */
int cli_audit_main(int argc, char **argv);

#endif
