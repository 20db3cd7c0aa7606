/*
 * cli_image.h - `sandq image VERB` (cli_image.c): its entry point, which
 * the dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_IMAGE_H
#define SANDQ_CLI_IMAGE_H

#include <stdbool.h>

struct cli_conn;

/* Whether name is the image verb group ("image"). */
bool cli_image_is_group(const char *name);
/*
 * Runs `sandq image pull|ls ...`: argv[0] is "image". conn gives --redis,
 * --tenant, --wait-timeout, --json and --help as given before the group.
 * Returns the exit status: 0, 2 for a bad command line, 125 when sandq
 * failed, or a pull's result's status as `sandq run` maps it.
 */
int cli_image_main(const struct cli_conn *conn, int argc, char **argv);

#endif
