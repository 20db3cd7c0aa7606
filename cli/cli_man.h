/*
 * cli_man.h - the manual pages of the sandq command (cli_man.c). The
 * dispatcher (cli.c) prints them for sandq --help and sandq help COMMAND,
 * each verb group for its own --help. Not installed.
 */
#ifndef SANDQ_CLI_MAN_H
#define SANDQ_CLI_MAN_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The pages, made by the build from docs/man/sandq*.1.scd
 * (build/gen/cli_man_pages.c, docs/man/help2c.py): NAME is the command's
 * ("run", "image build"; "" for sandq's own page), TEXT the page as man
 * prints it.
 */
struct cli_man_page {
	const char *name;		/* "run", "image build", "" */
	const char *text;		/* the whole page, NUL-terminated */
};
extern const struct cli_man_page cli_man_pages[];
extern const size_t cli_man_npages;

/* Prints sandq's own page (sandq --help, sandq help) on stdout. */
void cli_man_main(void);
/*
 * Prints the page of the command name ("run", "sandbox", "kv", "batch",
 * "doctor", ...) on stdout. Returns false, having printed nothing, for a
 * name that has no page.
 */
bool cli_man_print(const char *name);

#endif
