/*
 * seed.c - sandbox.create from a folder of an image (from_image_dir): a
 * task image's /testbed becomes version 1 of a persistent sandbox.
 *
 * The folder is the tenant's bytes inside an image, so it is read where
 * every tenant tree is read: in the init of a sandbox prepared on that
 * image, as the sandbox's user, through the image's overlay root. Init
 * captures the folder into an empty snapshot with the same code that
 * captures a job's workspace (persist.c, workspace_capture_inplace(): names,
 * symlinks, sparse files, the caps of a job on the sandbox), and hands the
 * patch back like a job's commit. No process of the tenant's runs. The
 * worker then stores the snapshot as the new sandbox's version 1 through
 * the ops' create (ops_run_seeded()): its history row, its image and
 * workdir, the tenant's storage quota, sandbox_exists.
 *
 * What the store keeps: version 1 holds the folder's files, chunked and
 * shared by every fork; later versions store only the chunks jobs change.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../agentfs/agentfs.h"
#include "../agentfs/patch.h"
#include "ops.h"
#include "worker.h"

/* An empty snapshot in a sealed memfd, or -errno with e. */
static int
seed_empty(struct err *e)
{
	struct agentfs *fs = NULL;
	void *blob = NULL;
	size_t len = 0;
	int fd = -1, rc;

	if ((rc = agentfs_new(&fs, e)) < 0 || (rc = agentfs_to_blob(fs, &blob, &len,
	    e)) < 0)
		goto out;
	if ((fd = memfd_create("seed", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0) {
		rc = err_set(e, -errno, "memfd: %s", strerror(errno));
		goto out;
	}
	if ((rc = write_all(fd, blob, len)) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK |
	    F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		rc = err_set(e, rc < 0 ? rc : -errno, "seal the empty snapshot: %s",
		    strerror(rc < 0 ? -rc : errno));
		close(fd);
		fd = -1;
	}
out:
	free(blob);
	agentfs_close(fs);
	return fd >= 0 ? fd : rc;
}

/*
 * The bytes of the image in imgfd with the patch in patchfd (len bytes)
 * applied, into *out (malloc'd) and *outlen. 0 or -errno with e.
 */
static int
seed_compose(int imgfd, int patchfd, size_t len, void **out, size_t *outlen,
    struct err *e)
{
	void *img = MAP_FAILED, *pt = MAP_FAILED;
	struct patch p;
	off_t img_len = lseek(imgfd, 0, SEEK_END);
	int rc = 0;

	*out = NULL;
	if (img_len <= 0)
		return err_set(e, -EIO, "the empty snapshot: %s", strerror(errno));
	img = mmap(NULL, (size_t)img_len, PROT_READ, MAP_SHARED, imgfd, 0);
	pt = mmap(NULL, len, PROT_READ, MAP_SHARED, patchfd, 0);
	if (img == MAP_FAILED || pt == MAP_FAILED)
		rc = err_set(e, -errno, "map the seeded snapshot: %s", strerror(errno));
	else if ((rc = patch_parse(pt, len, &p, e)) == 0) {
		if (p.size > AGENTFS_BLOB_MAX)
			rc = err_set(e, -EFBIG, "the seeded snapshot is %llu bytes",
			    (unsigned long long)p.size);
		else {
			*out = xmalloc(p.size > 0 ? (size_t)p.size : 1);
			patch_read(img, (size_t)img_len, &p, 0, (size_t)p.size, *out);
			*outlen = (size_t)p.size;
		}
	}
	if (img != MAP_FAILED)
		munmap(img, (size_t)img_len);
	if (pt != MAP_FAILED)
		munmap(pt, len);
	return rc;
}

void
worker_seed(struct worker *w, const struct job *j, const void *spec,
    size_t speclen, struct result *res)
{
	struct store_sandbox sb;
	struct err e = { 0 };
	void *snap = NULL;
	size_t plen = 0, slen = 0;
	int imgfd = -1, patchfd = -1, rc;

	res->started_at = now_ms();
	/* Fail fast before any capture; the create still checks (ops). */
	rc = store_sandbox_get(w->store, j->tenant, j->sandbox, &sb, &e);
	if (rc == 0) {
		result_set_error(res, ST_REJECTED, "sandbox_exists",
		    "sandbox '%s' already exists", j->sandbox);
		goto out;
	}
	if (rc != -ENOENT) {
		result_set_error(res, ST_INTERNAL, "store", "%s", e.msg);
		goto out;
	}
	if (w->next == NULL) {
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "no sandbox could be prepared on this worker");
		goto out;
	}
	if ((imgfd = seed_empty(&e)) < 0) {
		result_set_error(res, ST_INTERNAL, "store", "%s", e.msg);
		goto out;
	}
	rc = sandbox_seed(w->next, j, spec, speclen, imgfd, &patchfd, &plen, res);
	/* Spent either way; reaped after the result is out. */
	w->spent = w->next;
	w->next = NULL;
	w->spent_sandbox[0] = '\0';
	if (rc < 0)
		goto out;
	if (seed_compose(imgfd, patchfd, plen, &snap, &slen, &e) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox", "%s", e.msg);
		goto out;
	}
	log_debug("job %s: sandbox '%s' seeded from %s of %s: %zu bytes", j->id,
	    j->sandbox, j->from_image_dir, j->image, slen);
	ops_run_seeded(w->store, j, w->quota, snap, slen, res);
out:
	if (res->sandbox == NULL)
		res->sandbox = xstrdup(j->sandbox);
	if (res->finished_at == 0)
		res->finished_at = now_ms();
	free(snap);
	if (imgfd >= 0)
		close(imgfd);
	if (patchfd >= 0)
		close(patchfd);
}
