/*
 * cli_sandbox_int.h - what the files of sandq's sandbox, fs and kv verbs
 * share, and nothing else sees: the parsed command line and the helpers
 * each verb calls. cli_sandbox.c parses the options and runs the verb
 * (cli_sandbox.h declares its entry point); cli_fs.c holds the fs and kv
 * verbs; cli_output.c, below both, runs an op and prints its result.
 */
#ifndef SANDQ_CLI_SANDBOX_INT_H
#define SANDQ_CLI_SANDBOX_INT_H

#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../libsandq/sandq.h"

struct sbx;
typedef int (*sbx_verb_cb)(struct sbx *s, struct sandq *c);

/* One verb: where it lives, its operands and the options it takes. */
struct sbx_verb {
	const char *group;		/* "sandbox", "fs", "kv" */
	const char *name;		/* "create" */
	int min, max;			/* operands after the verb */
	unsigned opts;			/* SB() of its own options (cli_sandbox.c's) */
	sbx_verb_cb run;
	const char *usage;		/* operands, for messages */
};

/* A parsed command line. */
struct sbx {
	const struct sbx_verb *v;
	const char *group;		/* as typed */
	const char *redis;
	const char *tenant;
	int64_t wait_ms;
	bool json;
	bool help;
	bool recursive;
	bool keep_symlinks;		/* fs get --keep-symlinks */
	const char *from;		/* --from DIR */
	const char *image;		/* --image REF: what the new sandbox runs on */
	const char *workdir;		/* --workdir PATH: where its files are */
	const char *from_image_dir;	/* --from-image-dir PATH: its version 1 */
	const char **allow;		/* --allow PATTERN: its runs' hosts,
					 * NULL-terminated */
	size_t nallow;
	const char *id;			/* --id: the job id */
	struct sandq_label *labels;	/* --label K=V; keys owned */
	size_t nlabels;
	struct sandq_perm *perms;	/* --perm; patterns owned */
	size_t nperms;
	const char *perm_preset;
	unsigned given;			/* SB() of every option seen */
	char **args;			/* operands after the verb */
	int nargs;
};

/*** cli_output.c ***/

/* Prints "sandq: MESSAGE" and the verb's usage; returns CLI_EXIT_SANDQ. */
int cli__usage(const struct sbx *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The job options every op of s sends. */
struct sandq_job_opts cli__job_opts(const struct sbx *s);
/* Writes len bytes to file ("-": stdout), replacing it. 0 or an exit status. */
int cli__write_local(const char *file, const void *p, size_t len);
/*
 * Runs one op and waits for it. Returns 0 with *out an ok result (owned by
 * the caller), or the exit status with the failure explained.
 */
int cli__call(const struct sbx *s, struct sandq *c, const char *op,
    const struct sandq_op_args *a, struct sandq_result **out);
/*
 * The common tail of a verb: --json prints the data (or the head), else
 * human() if given. Frees r. Returns the exit status.
 */
int cli__finish(const struct sbx *s, struct sandq_result *r,
    void (*human)(const json_t *));
/* The bytes of a bin (or str) result. false if it holds none. */
bool cli__result_bytes(const struct sandq_result *r, msgpack_unpacked *u,
    const char **p, size_t *len);
/* {sandbox, version, snapshot} of r (those it has), for --json. */
json_t *cli__result_head_json(const struct sandq_result *r);
/* A labels object as "k=v,k=v" into buf ("" when empty). */
const char *cli__fmt_labels(char *buf, size_t size, const json_t *labels);
/* "key: value" lines of a sandbox info map. */
void cli__print_info(const json_t *o);
/* "key: value" lines of an fs.stat entry. */
void cli__print_entry(const json_t *o);

/*** cli_fs.c: the fs and kv verbs of cli_sandbox.c's table ***/

int cli__fs_ls(struct sbx *s, struct sandq *c);
int cli__fs_cat(struct sbx *s, struct sandq *c);
int cli__fs_put(struct sbx *s, struct sandq *c);
int cli__fs_get(struct sbx *s, struct sandq *c);
int cli__fs_rm(struct sbx *s, struct sandq *c);
int cli__fs_stat(struct sbx *s, struct sandq *c);
int cli__kv_get(struct sbx *s, struct sandq *c);
int cli__kv_set(struct sbx *s, struct sandq *c);
int cli__kv_del(struct sbx *s, struct sandq *c);
int cli__kv_keys(struct sbx *s, struct sandq *c);

#endif
