/*
 * cli_man.c - the manual pages of the sandq command (cli_man.h): sandq
 * --help, and sandq help COMMAND or sandq COMMAND --help for each of its
 * commands. The verbs, their options, output and exit statuses are a
 * contract other scripts rely on (issue 4, "Interfaces scripts rely on");
 * these pages state it, and every change to a verb must change its page.
 *
 * DESIGN: the pages' one source is docs/man/sandq*.1.scd (issue 18). The
 * build makes the roff pages man(1) shows from them with scdoc, and the
 * text printed here from those roff pages with mandoc (docs/man/help2c.py
 * writes build/gen/cli_man_pages.c), so --help and man cannot disagree.
 * This file only finds a page by its command's name.
 *
 * A leaf: it prints text, and neither calls nor knows the verbs' code.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli_man.h"

/* The page named NAME ("" for sandq's own), or NULL. */
static const char *
man_find(const char *name)
{
	/* sandq image import shares sandq-image-build(1) with build. */
	if (strcmp(name, "image import") == 0)
		name = "image build";
	for (size_t i = 0; i < cli_man_npages; i++)
		if (strcmp(name, cli_man_pages[i].name) == 0)
			return cli_man_pages[i].text;
	return NULL;
}

void
cli_man_main(void)
{
	const char *page = man_find("");

	if (page != NULL)
		fputs(page, stdout);
}

bool
cli_man_print(const char *name)
{
	const char *page = man_find(name);

	if (page == NULL)
		return false;
	fputs(page, stdout);
	return true;
}
