/*
 * worker.h - the worker process: one job at a time, from the dispatcher's
 * channel (fd 3) into a prepared sandbox and back.
 *
 * Lifecycle: main() sets the process up (worker_main.c order), then
 * worker_loop() runs until the dispatcher closes the channel or sends
 * MSG_SHUTDOWN.
 */
#ifndef SANDQ_WORKER_H
#define SANDQ_WORKER_H

#include "../images/cache.h"
#include "../sandbox/sandbox.h"
#include "../store/store.h"
#include "image.h"

#define WORKER_FD 3

struct worker {
	int fd;				/* channel to the dispatcher */
	uint32_t job_seq;		/* the job in hand's id in frames */
	struct sandbox_conf sbx_conf;	/* where and as whom jobs run */
	struct sandbox *next;		/* prepared sandbox, or NULL */
	struct img_cache *images;	/* the host's image cache (records), or NULL */
	struct worker_image img;	/* the image next is (to be) prepared for;
					 * digest "": the host's */
	struct sandbox *spent;		/* last job's sandbox, not yet reaped */
	struct sandbox *late;		/* one whose base is done, init exiting */
	char spent_sandbox[STORE_ID_MAX + 1];	/* the sandbox its job was on, or "" */
	unsigned long jobs;		/* jobs run so far */
	struct store *store;		/* the host's snapshot store */
	uint64_t quota;			/* the next job's tenant's storage quota */
	uint16_t egress_port;		/* net "allow": the proxy's port in the job */
	/*
	 * The last snapshot used, as an image (read from the store) and a
	 * patch of the blocks rewritten since (agentfs/patch.h): sealed memfds.
	 */
	int snap_fd;			/* the image, or -1 */
	size_t snap_len;		/* its size */
	int patch_fd;			/* the patch over it, or -1 (none) */
	size_t patch_len;		/* its size */
	char snap_sha[STORE_SHA_HEX + 1];	/* the key of image + patch, "" if none */
	/*
	 * A head other sandboxes share (a fork's, or a create's from a
	 * snapshot the tenant stores), kept beside the last one when a job
	 * leaves it: dups of the same sealed memfds, so each sandbox starting
	 * from it reads nothing from the store.
	 */
	int tmpl_fd, tmpl_patch_fd;	/* image and patch, or -1 */
	size_t tmpl_len, tmpl_patch_len;
	char tmpl_sha[STORE_SHA_HEX + 1];	/* their key, "" if none */
};

/* Serves jobs until the channel closes. Returns the process exit code. */
int worker_loop(struct worker *w);

/*
 * seed.c: runs j, a sandbox.create with from_image_dir (spec/speclen its
 * normalised encoding), in w->next, prepared on j's image (which it then
 * leaves spent in w->spent): its version 1 is the image's folder, and the
 * create goes on as ops_run_seeded() does. Fills res either way.
 */
void worker_seed(struct worker *w, const struct job *j, const void *spec,
    size_t speclen, struct result *res);

#endif
