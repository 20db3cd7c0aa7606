/*
 * cli_image_tag.h - `sandq image tag|untag|tags` (cli_image_tag.c): its
 * entry point, which the dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_IMAGE_TAG_H
#define SANDQ_CLI_IMAGE_TAG_H

#include <stdbool.h>

struct cli_conn;

/* Whether verb is one of tag, untag and tags. */
bool cli_image_tag_is_verb(const char *verb);
/*
 * Runs `sandq image tag|untag|tags ...`: argv[0] is "image", argv[1] the
 * verb. Returns the process's exit status.
 */
int cli_image_tag_main(const struct cli_conn *conn, int argc, char **argv);

/*
 * Names ref NAME[:TAG] (name) for conn's tenant exactly as `sandq image tag
 * NAME REF` does (a registry's tag pinned; stored in the tenant's names
 * hash), printing nothing when it works: `sandq image build` and `import`
 * name what they push with it. Returns 0, or the exit status of the
 * failure, its message printed (1 the reference could not be pinned, 2 a
 * bad name, 125 Redis failed).
 */
int cli_image_tag_record(const struct cli_conn *conn, const char *name, const char *ref);

#endif
