/*
 * ops_int.h - what the files of the worker's ops share, and nothing else
 * sees: one op run's context, the result packers and the helpers of ops.c
 * that every op uses. ops.c holds the entry point and its dispatch table;
 * ops_fs.c, ops_kv.c and ops_sandbox.c the handlers the table names.
 * ops.h is the public API.
 */
#ifndef SANDQ_WORKER_OPS_INT_H
#define SANDQ_WORKER_OPS_INT_H

#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../proto/job.h"
#include "../proto/pack.h"
#include "../proto/result.h"
#include "../agentfs/agentfs.h"
#include "../workspace/perms.h"
#include "../store/store.h"


/* A handler's outcome besides 0 (ok) and -ESTALE (run again). */
#define OPS_DONE 1		/* res holds a rejection or an internal error */

/* One run of one op. Reset between attempts by ctx_reset(). */
struct ops {
	struct store *st;			/* the store (not owned) */
	const struct job *j;			/* the job (not owned) */
	struct result *res;			/* filled on rejection */
	uint64_t quota;				/* the tenant's storage quota; 0: none */
	const char *id;				/* j->sandbox, or "" */
	struct perms perms;			/* fs.* path rules */
	struct store_sandbox sb;		/* head loaded (have_sb) */
	bool have_sb;
	struct agentfs *fs;			/* loaded or new snapshot */
	void *head;				/* the loaded head's bytes, or NULL */
	size_t head_len;			/* their length */
	msgpack_sbuffer out;			/* result data */
	msgpack_packer pk;			/* packs into out */
	bool have_data;				/* out holds one object */
	uint64_t started_ms;			/* epoch ms the job began */
	bool committed;				/* new_sha is the head */
	char new_sha[STORE_SHA_HEX + 1];	/* head after a commit */
	uint64_t new_version;			/* its version */
	size_t blob_len;			/* bytes of the committed blob */
	const void *seed;			/* a seeded create's version 1
						 * (ops_run_seeded()), or NULL */
	size_t seed_len;
};

/* An array whose length is known at the end (see DESIGN). */
struct seq {
	msgpack_sbuffer buf;	/* packed elements */
	msgpack_packer pk;	/* packs into buf */
	uint32_t n;		/* elements packed */
};

/*** ops_common.c: packing results (with proto/pack.h's writers) ***/

/* msgpack's write callback: out of memory is fatal, as with xmalloc(). */
int ops__sbuf_write(void *data, const char *buf, size_t len);

/* Packs k: v, v text or nil (NULL). */
void ops__pk_kv_opt(msgpack_packer *pk, const char *k, const char *v);
/* Starts an empty sequence. */
void ops__seq_init(struct seq *s);
/* Packs the array header and the elements into pk; frees s. */
void ops__seq_finish(struct seq *s, msgpack_packer *pk);
/* Frees s without packing it. */
void ops__seq_destroy(struct seq *s);
/* The info map of a sandbox; size only when with_size. */
void ops__pk_info(msgpack_packer *pk, const struct store_sandbox *sb,
    bool with_size, uint64_t size);
/* One fs.list/fs.stat entry map. */
void ops__pk_entry(msgpack_packer *pk, const struct agentfs_entry *ent);

/*** ops_common.c: failures ***/

/* Fills res with an error; returns OPS_DONE for the handler to return. */
int ops__fail(struct ops *o, enum res_status st, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* An err message without its module prefix ("agentfs: ", "store: ",
 * "workspace: "). */
const char *ops__emsg(const struct err *e);
/* Maps an agentfs errno about a path of sandbox o->id to the spec's codes. */
int ops__fs_fail(struct ops *o, int rc, const struct err *e);
/* Maps a store error about sandbox id; -ENOENT is sandbox_not_found. */
int ops__store_fail(struct ops *o, int rc, const char *id,
    const struct err *e);

/*** ops_common.c: operands ***/

/* Sets obj[k] to v as a history string (ops_history_text()). */
void ops__jset_str(json_t *obj, const char *k, const char *v);
/*
 * The job's path, normalised into out ("/a/b", "/" the root), or "/" when
 * absent and root_ok. The root is refused unless root_ok.
 */
int ops__path_get(struct ops *o, bool root_ok, char *out, size_t outsz);
/* Refuses a path with a component sandq could not materialise. */
int ops__path_names_check(struct ops *o, const char *path);
/* True when path is dir or below it ("/" holds everything). */
bool ops__path_below(const char *path, const char *dir, size_t dlen);
/* Labels pairs as compact JSON with sorted keys into *out (NULL: none). */
int ops__labels_json(struct ops *o, char **out);

/*** ops_common.c: loading and committing ***/

/* Reads o->id's head row into o->sb. */
int ops__head_get(struct ops *o);
/* Reads the head blob; *blob is the caller's (free()). */
int ops__head_blob(struct ops *o, void **blob, size_t *len);
/* Loads the head and opens it as o->fs. */
int ops__load(struct ops *o);
/*
 * Records the op in o->fs's history (params stolen), then stores the
 * snapshot and creates sandbox o->id (create) or moves its head. 0,
 * OPS_DONE, -EEXIST (create only) or -ESTALE (run the op again).
 */
int ops__commit(struct ops *o, json_t *params, bool create,
    const char *labels);

/*
 * The handlers of ops.c's dispatch table. Each returns 0 (res->data in
 * o->out when o->have_data), OPS_DONE (res holds the error) or -ESTALE
 * (the commit lost: run again from a fresh load).
 */

/*** ops_fs.c ***/

int ops__fs_read(struct ops *o);
int ops__fs_write(struct ops *o);
int ops__fs_list(struct ops *o);
int ops__fs_stat(struct ops *o);
int ops__fs_delete(struct ops *o);

/*** ops_kv.c ***/

int ops__kv_get(struct ops *o);
int ops__kv_set(struct ops *o);
int ops__kv_delete(struct ops *o);
int ops__kv_keys(struct ops *o);

/*** ops_sandbox.c ***/

int ops__sandbox_create(struct ops *o);
int ops__sandbox_fork(struct ops *o);
int ops__sandbox_delete(struct ops *o);
int ops__sandbox_export(struct ops *o);
int ops__sandbox_import(struct ops *o);
int ops__sandbox_history(struct ops *o);
int ops__sandbox_info(struct ops *o);
int ops__sandbox_list(struct ops *o);

#endif
