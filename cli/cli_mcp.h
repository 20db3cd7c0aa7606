/*
 * cli_mcp.h - `sandq mcp` (cli_mcp.c): a Model Context Protocol server over
 * stdio. Its entry point, which the dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_MCP_H
#define SANDQ_CLI_MCP_H

struct cli_conn;

/*
 * Runs `sandq mcp [--sandbox ID]`: argv[0] is "mcp". conn gives --redis,
 * --tenant and --help seen before it; sandbox is a --sandbox seen before
 * the verb, or NULL. Serves newline-delimited JSON-RPC on stdin/stdout
 * until EOF. Returns the process's exit status: 0 at EOF, 2 usage, 125
 * when Redis could not be reached or stdout failed.
 */
int cli_mcp_main(const struct cli_conn *conn, const char *sandbox, int argc,
    char **argv);

#endif
