/*
 * snapshot.c - what a persistent sandbox's snapshot round trip costs a job.
 *
 *   snapshot-bench [--files N] [--bytes B] [--runs R] [--dir D]
 *
 * A workspace of N files (default 1,000) holding B bytes in all (default
 * 10 MB), spread over 10 folders, in an AgentFS snapshot. Measured in one
 * run, R times each (median):
 *   floor      writing the same files into an empty folder with openat +
 *              write, and reading them back: the file-system work any
 *              materialise and capture must do at least
 *   materialise  the snapshot blob opened (as the store's verified blobs
 *              are: agentfs_open_trusted) and written out into an empty
 *              folder (workspace_materialise)
 *   capture    the folder read back after one file changed, against the
 *              snapshot it came from (workspace_capture), and the new blob
 *   store put  store_blob_put of the snapshot into an empty store (every
 *              chunk hashed and written)
 *   put delta  store_blob_put_delta of each run's captured blob against
 *              the snapshot it came from, and the chunks it added
 *   commit_blob  store_sandbox_commit_blob of those blobs in turn, each
 *              against the previous head, with keep_versions 2 so that
 *              from the second commit on each one also frees a version
 *   commit_patch  store_sandbox_commit_patch of the same blobs given as
 *              the snapshot plus a cumulative patch, as a worker holds
 *              them: each run's patch is the 4 KiB blocks where its blob
 *              differs from the snapshot, and the previous run's blocks
 *              (made before the clock starts); keep_versions 2 again
 *   fork       store_sandbox_fork of a sandbox whose head is that blob,
 *              and the store's blob count before and after
 * D (default /dev/shm, a tmpfs like a job's /workspace) holds the folders
 * and the stores. Numbers, not assertions: nothing here fails on time.
 * The full materialise + capture measured here is what a worker pays for
 * the first job on a sandbox (or on other rules, or where the kernel has
 * no overlay in a user namespace); later jobs run on an overlay of the
 * worker's kept base and read back only what they changed: sandbox-bench
 * times those, job by job, against the target of 20 ms added. A
 * commit's store work should cost a few ms, and a fork no blob.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../agentfs/agentfs.h"
#include "../agentfs/patch.h"
#include "../store/store.h"
#include "../workspace/workspace.h"
#include "timing.h"

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void
die(const char *what, const struct err *e)
{
	fprintf(stderr, "snapshot-bench: %s: %s\n", what, e ? e->msg : strerror(errno));
	exit(1);
}

/* A fresh empty folder under base; returns its fd, name in out. */
static int
fresh_dir(const char *base, char *out, size_t len)
{
	int fd;

	snprintf(out, len, "%s/sandq-snapbench-XXXXXX", base);
	if (mkdtemp(out) == NULL)
		die("mkdtemp", NULL);
	if ((fd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		die("open", NULL);
	return fd;
}

/* The floor: the same files written with openat + write, then read back. */
static double
floor_run(const char *base, int nfiles, size_t fsize, const unsigned char *data)
{
	char dir[256], name[64], *buf = malloc(fsize + 1);
	double t0 = now_ms(), t;
	int dfd = fresh_dir(base, dir, sizeof(dir));

	for (int d = 0; d < 10; d++) {
		snprintf(name, sizeof(name), "d%d", d);
		if (mkdirat(dfd, name, 0755) < 0)
			die("mkdirat", NULL);
	}
	for (int i = 0; i < nfiles; i++) {
		int fd;

		snprintf(name, sizeof(name), "d%d/f%d", i % 10, i);
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, data, fsize) != (ssize_t)fsize)
			die("write", NULL);
		close(fd);
	}
	for (int i = 0; i < nfiles; i++) {
		int fd;

		snprintf(name, sizeof(name), "d%d/f%d", i % 10, i);
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || read(fd, buf, fsize + 1) != (ssize_t)fsize)
			die("read", NULL);
		close(fd);
	}
	t = now_ms() - t0;
	close(dfd);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(buf);
	return t;
}

/* An empty store in a fresh folder under base (name in dir). */
static struct store *
store_fresh(const char *base, char *dir, size_t len)
{
	struct store *st = NULL;
	struct err e = { 0 };

	snprintf(dir, len, "%s/sandq-snapbench-store-XXXXXX", base);
	if (mkdtemp(dir) == NULL || store_open(dir, &st, &e) < 0)
		die("store_open", &e);
	return st;
}

static void
store_gone(struct store *st, const char *dir)
{
	store_close(st);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * The cumulative patch that makes snap (snap_len bytes) from img, as a
 * worker would hold it: every 4 KiB block where snap differs from img
 * (zeros past img's end), and every block in[] already names, each with
 * snap's bytes; in[] gains the new blocks. Returns the patch (malloc'd),
 * its length in *len and its block count in *count.
 */
static unsigned char *
patch_make(const unsigned char *img, size_t img_len, const unsigned char *snap,
    size_t snap_len, bool *in, size_t *len, uint32_t *count)
{
	size_t nb = (snap_len + PATCH_BLOCK - 1) / PATCH_BLOCK, k = 0;
	unsigned char want[PATCH_BLOCK], have[PATCH_BLOCK], *out, *ent;

	*count = 0;
	for (size_t b = 0; b < nb; b++) {
		size_t off = b * PATCH_BLOCK;
		size_t sn = snap_len - off < PATCH_BLOCK ? snap_len - off : PATCH_BLOCK;
		size_t in_img = off < img_len ? img_len - off : 0;

		memset(want, 0, sizeof(want));
		memcpy(want, snap + off, sn);
		memset(have, 0, sizeof(have));
		memcpy(have, img + off, in_img < sn ? in_img : sn);
		if (memcmp(want, have, sn) != 0)
			in[b] = true;
		*count += in[b];
	}
	*len = patch_bytes(*count);
	if ((out = malloc(*len)) == NULL)
		die("malloc", NULL);
	patch_header(out, snap_len, *count);
	for (size_t b = 0; b < nb; b++) {
		size_t off = b * PATCH_BLOCK;
		size_t sn = snap_len - off < PATCH_BLOCK ? snap_len - off : PATCH_BLOCK;

		if (!in[b])
			continue;
		ent = out + PATCH_HEADER + k++ * PATCH_ENTRY;
		for (int i = 0; i < 4; i++)
			ent[i] = (unsigned char)(b >> (8 * i));
		memset(ent + 4, 0, PATCH_BLOCK);
		memcpy(ent + 4, snap + off, sn);
	}
	return out;
}

int
main(int argc, char **argv)
{
	int nfiles = 1000, runs = 5;
	size_t total = 10u * 1000 * 1000, fsize, bloblen, newlen;
	const char *base = "/dev/shm";
	double *fl, *mat, *cap, *frk, *put, *dput, *cmt, *cpt;
	long hashed_patch, blocks_patch = 0;
	size_t max_len;
	bool *in;
	double m_fl, m_mat, m_cap, m_frk;
	void **nbs;
	size_t *nbl;
	char prev[65];
	long chunks_before, chunks_delta, chunks_commit;
	struct err e = { 0 };
	struct agentfs *fs = NULL;
	unsigned char *data;
	void *blob = NULL;
	char name[64], sdir[256], sha[65];
	struct store *st = NULL;
	long blobs_before = 0, blobs_after = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--files") == 0)
			nfiles = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--bytes") == 0)
			total = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--runs") == 0)
			runs = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--dir") == 0)
			base = argv[i + 1];
	}
	if (nfiles < 10 || runs < 1)
		return 2;
	fsize = total / (size_t)nfiles;
	data = malloc(fsize);
	for (size_t i = 0; i < fsize; i++)
		data[i] = (unsigned char)(i * 7);

	/* The snapshot. */
	if (agentfs_new(&fs, &e) < 0)
		die("agentfs_new", &e);
	for (int d = 0; d < 10; d++) {
		snprintf(name, sizeof(name), "/d%d", d);
		if (agentfs_mkdir(fs, name, 0755, &e) < 0)
			die("agentfs_mkdir", &e);
	}
	for (int i = 0; i < nfiles; i++) {
		snprintf(name, sizeof(name), "/d%d/f%d", i % 10, i);
		if (agentfs_write(fs, name, data, fsize, 0644, &e) < 0)
			die("agentfs_write", &e);
	}
	if (agentfs_to_blob(fs, &blob, &bloblen, &e) < 0)
		die("agentfs_to_blob", &e);
	agentfs_close(fs);

	fl = calloc((size_t)runs, sizeof(double));
	mat = calloc((size_t)runs, sizeof(double));
	cap = calloc((size_t)runs, sizeof(double));
	frk = calloc((size_t)runs, sizeof(double));
	put = calloc((size_t)runs, sizeof(double));
	dput = calloc((size_t)runs, sizeof(double));
	cmt = calloc((size_t)runs, sizeof(double));
	cpt = calloc((size_t)runs, sizeof(double));
	nbs = calloc((size_t)runs, sizeof(void *));
	nbl = calloc((size_t)runs, sizeof(size_t));
	for (int r = 0; r < runs; r++) {
		struct workspace_changes ch = { 0 };
		struct agentfs *base_fs = NULL, *out = NULL;
		char dir[256], text[32];
		void *nb = NULL;
		double t0;
		int dfd, fd, tn;

		fl[r] = floor_run(base, nfiles, fsize, data);

		dfd = fresh_dir(base, dir, sizeof(dir));
		t0 = now_ms();
		/* As a worker would: the store hands out blobs it verified by hash. */
		if (agentfs_open_trusted(blob, bloblen, &base_fs, &e) < 0 ||
		    workspace_materialise(base_fs, dfd, NULL, &e) < 0)
			die("materialise", &e);
		mat[r] = now_ms() - t0;

		/* The job changes one file (differently each run). */
		tn = snprintf(text, sizeof(text), "changed in run %d\n", r);
		fd = openat(dfd, "d3/f3", O_WRONLY | O_TRUNC | O_CLOEXEC);
		if (fd < 0 || write(fd, text, (size_t)tn) != tn)
			die("change a file", NULL);
		close(fd);

		t0 = now_ms();
		if (workspace_capture(dfd, base_fs, NULL, &out, &ch, &e) < 0 ||
		    agentfs_to_blob(out, &nb, &newlen, &e) < 0)
			die("capture", &e);
		cap[r] = now_ms() - t0;
		if (ch.modified != 1 || ch.added != 0 || ch.removed != 0) {
			fprintf(stderr, "snapshot-bench: capture saw %zu/%zu/%zu changes, "
			    "expected 0/1/0\n", (size_t)ch.added, (size_t)ch.modified,
			    (size_t)ch.removed);
			return 1;
		}
		workspace_changes_free(&ch);
		agentfs_close(out);
		agentfs_close(base_fs);
		nbs[r] = nb;
		nbl[r] = newlen;
		close(dfd);
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	}

	/* A full put: every chunk hashed and written, into an empty store. */
	for (int r = 0; r < runs; r++) {
		double t0;

		st = store_fresh(base, sdir, sizeof(sdir));
		t0 = now_ms();
		if (store_blob_put(st, blob, bloblen, sha, &e) < 0)
			die("store_blob_put", &e);
		put[r] = now_ms() - t0;
		store_gone(st, sdir);
	}

	/* Delta puts: each run's blob against the snapshot it was made from. */
	st = store_fresh(base, sdir, sizeof(sdir));
	if (store_blob_put(st, blob, bloblen, sha, &e) < 0)
		die("store_blob_put", &e);
	chunks_before = store_chunk_count(st, &e);
	for (int r = 0; r < runs; r++) {
		char dsha[65];
		double t0 = now_ms();

		if (store_blob_put_delta(st, nbs[r], nbl[r], sha, blob, bloblen,
		    dsha, &e) < 0)
			die("store_blob_put_delta", &e);
		dput[r] = now_ms() - t0;
	}
	chunks_delta = store_chunk_count(st, &e) - chunks_before;
	store_gone(st, sdir);

	/*
	 * Commits in a row, as a sandbox's jobs make them: each against the
	 * previous head, keeping 2 versions, so each commit from the second
	 * on also deletes a version and the chunks only it had.
	 */
	st = store_fresh(base, sdir, sizeof(sdir));
	store_set_keep_versions(st, 2);
	if (store_sandbox_create_blob(st, "bench", "run", blob, bloblen, NULL,
	    prev, &e) < 0)
		die("store_sandbox_create_blob", &e);
	chunks_before = store_chunk_count(st, &e);
	for (int r = 0; r < runs; r++) {
		const void *pb = r == 0 ? blob : nbs[r - 1];
		size_t pl = r == 0 ? bloblen : nbl[r - 1];
		char csha[65];
		double t0 = now_ms();

		if (store_sandbox_commit_blob(st, "bench", "run", (uint64_t)r + 1,
		    nbs[r], nbl[r], prev, pb, pl, csha, &e) < 0)
			die("store_sandbox_commit_blob", &e);
		cmt[r] = now_ms() - t0;
		memcpy(prev, csha, sizeof(prev));
	}
	chunks_commit = store_chunk_count(st, &e) - chunks_before;
	store_gone(st, sdir);

	/*
	 * The same commits from the snapshot and a cumulative patch over it,
	 * as a worker that keeps the image it read and the blocks its jobs
	 * rewrote would make them. Making the patch is the worker's work and
	 * is not timed; the last head is read back and compared.
	 */
	max_len = bloblen;
	for (int r = 0; r < runs; r++)
		max_len = nbl[r] > max_len ? nbl[r] : max_len;
	in = calloc(max_len / PATCH_BLOCK + 1, sizeof(bool));
	st = store_fresh(base, sdir, sizeof(sdir));
	store_set_keep_versions(st, 2);
	if (store_sandbox_create_blob(st, "bench", "run", blob, bloblen, NULL,
	    prev, &e) < 0)
		die("store_sandbox_create_blob", &e);
	hashed_patch = store_debug_chunks_hashed(st);
	for (int r = 0; r < runs; r++) {
		unsigned char *pb;
		uint32_t count;
		size_t plen;
		double t0;

		pb = patch_make(blob, bloblen, nbs[r], nbl[r], in, &plen, &count);
		blocks_patch += count;
		t0 = now_ms();
		if (store_sandbox_commit_patch(st, "bench", "run", (uint64_t)r + 1,
		    blob, bloblen, pb, plen, prev, &e) < 0)
			die("store_sandbox_commit_patch", &e);
		cpt[r] = now_ms() - t0;
		free(pb);
	}
	hashed_patch = store_debug_chunks_hashed(st) - hashed_patch;
	{
		void *got = NULL;
		size_t gl = 0;

		if (store_blob_get(st, prev, &got, &gl, &e) < 0)
			die("store_blob_get", &e);
		if (gl != nbl[runs - 1] || memcmp(got, nbs[runs - 1], gl) != 0) {
			fprintf(stderr, "snapshot-bench: commit_patch stored other "
			    "bytes than the captured blob\n");
			return 1;
		}
		free(got);
	}
	free(in);
	store_gone(st, sdir);

	/* A fork: the store's blob count before and after. */
	st = store_fresh(base, sdir, sizeof(sdir));
	if (store_sandbox_create_blob(st, "bench", "base", blob, bloblen, NULL,
	    sha, &e) < 0)
		die("store", &e);
	blobs_before = store_blob_count(st, &e);
	for (int r = 0; r < runs; r++) {
		char dst[32];
		double t0 = now_ms();

		snprintf(dst, sizeof(dst), "fork-%d", r);
		if (store_sandbox_fork(st, "bench", "base", dst, &e) < 0)
			die("fork", &e);
		frk[r] = now_ms() - t0;
	}
	blobs_after = store_blob_count(st, &e);
	store_gone(st, sdir);

	m_fl = pct(fl, (size_t)runs, 50);
	m_mat = pct(mat, (size_t)runs, 50);
	m_cap = pct(cap, (size_t)runs, 50);
	m_frk = pct(frk, (size_t)runs, 50);
	printf("snapshot: %d files, %zu bytes in all, blob %zu bytes, %d runs (medians), in %s\n",
	    nfiles, fsize * (size_t)nfiles, bloblen, runs, base);
	printf("floor: write + read the files          %8.2f ms\n", m_fl);
	printf("materialise the snapshot                %8.2f ms\n", m_mat);
	printf("capture after one change, new blob      %8.2f ms\n", m_cap);
	printf("round trip (materialise + capture)      %8.2f ms   (a first job; see sandbox-bench)\n",
	    m_mat + m_cap);
	printf("store put (full)                        %8.2f ms\n",
	    pct(put, (size_t)runs, 50));
	printf("store put delta (one file changed)      %8.2f ms   %.1f chunks added per put\n",
	    pct(dput, (size_t)runs, 50), (double)chunks_delta / runs);
	printf("commit_blob (delta)                     %8.2f ms   chunks %+ld over %d commits, "
	    "keep_versions 2\n", pct(cmt, (size_t)runs, 50), chunks_commit, runs);
	printf("commit_patch (one file changed)         %8.2f ms   %.1f blocks in the patch, "
	    "%.1f chunks hashed per commit\n", pct(cpt, (size_t)runs, 50),
	    (double)blocks_patch / runs, (double)hashed_patch / runs);
	printf("fork                                    %8.3f ms   blobs %ld -> %ld (target: no copy)\n",
	    m_frk, blobs_before, blobs_after);
	printf("ratio: round trip / floor               %8.2fx\n", (m_mat + m_cap) / m_fl);
	free(fl);
	free(mat);
	free(cap);
	free(frk);
	free(put);
	free(dput);
	free(cmt);
	free(cpt);
	for (int r = 0; r < runs; r++)
		free(nbs[r]);
	free(nbs);
	free(nbl);
	free(blob);
	free(data);
	return 0;
}
