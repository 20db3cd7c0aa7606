/*
 * cli_image_build.h - `sandq image build` and `sandq image import`
 * (cli_image_build.c): their entry point, which the dispatcher (cli.c)
 * calls.
 */
#ifndef SANDQ_CLI_IMAGE_BUILD_H
#define SANDQ_CLI_IMAGE_BUILD_H

#include <stdbool.h>

struct cli_conn;

/* Whether argv (argc words from the group's name) is `image build` or `image import`. */
bool cli_image_build_is_verb(int argc, char **argv);
/* Runs `sandq image build|import ...`: argv[0] is "image". Returns the exit status. */
int cli_image_build_main(const struct cli_conn *conn, int argc, char **argv);

#endif
