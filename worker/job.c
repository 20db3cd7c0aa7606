/*
 * job.c - the worker's loop: receive a job, run it in the prepared sandbox,
 * send the result, prepare the next sandbox.
 *
 * A job on a persistent sandbox reads the sandbox's head from the store,
 * hands the snapshot to the sandbox as a sealed memfd, and after the job
 * commits what the sandbox captured (another sealed memfd): in one store
 * transaction the chunks that differ from the head are put and the head
 * moves from the version the job started on (compare-and-set), so a commit
 * racing another is refused, never merged. The last snapshot used stays in
 * its memfd: the next job on the same head reuses it without reading or
 * hashing the blob again. The sandbox's init keeps the snapshot
 * materialised in the worker's kept base too (sandbox/persist.c), named by
 * base_key(): a job whose head, rules and image match (on whichever
 * sandbox: a fork shares its source's head) runs on an overlay of it. The
 * fs.*, kv.* and sandbox.* ops run here, on the store, without a sandbox
 * (ops.c).
 *
 * The next sandbox is prepared right after a result is sent (and the spent
 * one reaped, whose network namespace it may share: sandbox/spawn.c),
 * while the dispatcher publishes it and the queue hands over the next job,
 * so a job arriving at an idle worker finds its namespaces and image
 * already built.
 * It is prepared for the image the last job ran on (image.c): a job on
 * another image (its image_id, or none for the host's) drops it and has
 * one prepared for its own.
 *
 * The dispatcher validated and normalised the job, so a job that fails to
 * decode here means the peer is broken: the worker exits (STYLE 4), and the
 * dispatcher fails the job and respawns it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>
#include <msgpack.h>
#include <openssl/evp.h>

#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "../common/xmalloc.h"
#include "../proto/job.h"
#include "../proto/result.h"
#include "../proto/batchcase.h"
#include "../agentfs/patch.h"
#include "../workspace/perms.h"
#include "../store/store.h"
#include "ops.h"
#include "worker.h"


/* How long a spent sandbox waits for the next job to be reaped (see worker_loop()). */
#define SPENT_LINGER_MS 20

/*
 * How long the worker waits without a message before it folds the store's
 * WAL into its file (store_checkpoint_idle()): a checkpoint left to a
 * commit (every STORE_WAL_AUTOCHECKPOINT frames, about ten big jobs) is
 * the p95 of a persistent job. A client that sends its next job sooner
 * (back to back) does not wait for one.
 */
#define CHECKPOINT_IDLE_MS 5
/*
 * ... and only once the WAL holds this many frames (about four commits of a
 * big sandbox, a tenth of the backstop): the commit after a checkpoint
 * restarts the WAL and costs about 0.3 ms more (docs/decisions.md).
 */
#define CHECKPOINT_IDLE_FRAMES 400

/* Prepares the next sandbox, for the image of the last job (w->img). */
static void
prepare_next(struct worker *w)
{
	struct err e = { 0 };

	if (w->next != NULL)
		return;
	if (sandbox_prepare(&w->sbx_conf, w->img.digest[0] ? &w->img.sbx : NULL,
	    &w->next, &e) < 0)
		log_warnx("cannot prepare a sandbox: %s", e.msg);
}

/*
 * Makes w->next a sandbox of the job's image (its image_id; none: the
 * host's). A sandbox prepared for another image is dropped; one prepared
 * for this image is kept if its layers are still the cache's (a layer
 * evicted and pulled again is a new folder: mounted anew, and the
 * sandbox rebuilt on it). Returns 0, or -1 with res filled: rejected
 * (code image) for an image whose user cannot be resolved, internal for
 * one missing from the cache or layers that cannot be mounted.
 */
static int
image_for(struct worker *w, const struct job *j, struct result *res)
{
	struct err e = { 0 };
	int rc;

	if (worker_image_is(&w->img, j->image_id)) {
		if (j->image_id == NULL)
			return 0;
		if ((rc = sandbox_image_layers(&w->sbx_conf, &w->img.sbx, &e)) == 0)
			return 0;
	} else {
		rc = j->image_id == NULL ? 0 :
		    worker_image_load(w->images, &w->sbx_conf, j->image_id, &w->img, &e);
		if (j->image_id == NULL)
			worker_image_clear(&w->img);
	}
	sandbox_free(w->next);
	w->next = NULL;
	if (rc < 0) {
		worker_image_clear(&w->img);
		result_set_error(res, rc == -EINVAL ? ST_REJECTED : ST_INTERNAL, "image",
		    "%s", e.msg);
		res->started_at = res->finished_at = now_ms();
		return -1;
	}
	return 0;
}

/* Live output frames: 64 KiB of output at most, well under MSG_MAX. */
#define OUTPUT_FRAME_MAX (64 * 1024)

/* Live output (a job with stream): to sandqd as it comes, in frames. */
static void
send_output(void *arg, int fd, const void *buf, size_t len)
{
	struct worker *w = arg;
	unsigned char frame[1 + OUTPUT_FRAME_MAX];

	while (len > 0) {
		size_t n = len < OUTPUT_FRAME_MAX ? len : OUTPUT_FRAME_MAX;

		frame[0] = (unsigned char)fd;
		memcpy(frame + 1, buf, n);
		if (msg_send(w->fd, MSG_JOB_OUTPUT, w->job_seq, frame, n + 1, -1) < 0) {
			log_warnx("cannot send live output");
			return;
		}
		buf = (const unsigned char *)buf + n;
		len -= n;
	}
}

static int
send_result(struct worker *w, uint32_t job_id, const struct result *res)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	if (payload_result_encode(res, &buf, &len) < 0)
		fatalx("cannot encode a result");
	rc = msg_send(w->fd, MSG_JOB_DONE, job_id, buf, len, -1);
	free(buf);
	return rc;
}

static void
pk_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
}

/*** History ***/

/*
 * The tool_calls row of a run (docs/protocol.md "History"): the op, what it
 * ran, and how it ended. Never file contents; long texts cut.
 */
static char *
call_record(const struct job *j, const struct result *res)
{
	json_t *o = json_object(), *params = json_object(), *r = json_object();
	char *text;

	if (j->op == OP_SH)
		json_object_set_new(params, "script", ops_history_text(j->script, strlen(j->script)));
	else if (j->op == OP_PYTHON)
		json_object_set_new(params, "code", ops_history_text(j->code, strlen(j->code)));
	else {
		json_t *argv = json_array();

		for (size_t i = 0; i < j->argc; i++)
			json_array_append_new(argv, ops_history_text(j->argv[i], strlen(j->argv[i])));
		json_object_set_new(params, "argv", argv);
	}
	if (j->cwd != NULL)
		json_object_set_new(params, "cwd", ops_history_text(j->cwd, strlen(j->cwd)));
	json_object_set_new(params, "job", json_string(j->id));
	json_object_set_new(r, "status", json_string(res_status_name(res->status)));
	json_object_set_new(r, "exit_code", json_integer(res->exit_code));
	if (res->signal != 0)
		json_object_set_new(r, "signal", json_integer(res->signal));
	json_object_set_new(r, "stdout", ops_history_text(res->out, res->out_len));
	json_object_set_new(r, "stderr", ops_history_text(res->err, res->err_len));
	json_object_set_new(o, "name", json_string(job_op_name(j->op)));
	json_object_set_new(o, "parameters", params);
	json_object_set_new(o, "result", r);
	json_object_set_new(o, "status", json_string(res->status == ST_OK ? "success" : "error"));
	if (res->status != ST_OK) {
		char buf[160];

		if (res->error_message != NULL)
			json_object_set_new(o, "error", ops_history_text(res->error_message,
			    strlen(res->error_message)));
		else {
			snprintf(buf, sizeof(buf), res->status == ST_SIGNAL ?
			    "killed by signal %d" : "exit code %d",
			    res->status == ST_SIGNAL ? res->signal : res->exit_code);
			json_object_set_new(o, "error", json_string(buf));
		}
	}
	json_object_set_new(o, "started_ms", json_integer((json_int_t)res->started_at));
	json_object_set_new(o, "completed_ms", json_integer((json_int_t)res->finished_at));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (text == NULL)
		fatalx("cannot encode a tool call record");
	return text;
}

/*** Snapshots ***/

static void
snap_forget(struct worker *w)
{
	if (w->snap_fd >= 0)
		close(w->snap_fd);
	if (w->patch_fd >= 0)
		close(w->patch_fd);
	w->snap_fd = w->patch_fd = -1;
	w->snap_len = w->patch_len = 0;
	w->snap_sha[0] = '\0';
}

#define SNAP_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* A new memfd holding len bytes from fill(arg, off, n, out), sealed. */
static int
memfd_sealed(size_t len, void (*fill)(void *, uint64_t, size_t, unsigned char *),
    void *arg)
{
	unsigned char *buf = xmalloc(1 << 20);
	int fd = memfd_create("snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0) {
		free(buf);
		return -errno;
	}
	for (size_t off = 0; off < len;) {
		size_t n = len - off < (1 << 20) ? len - off : (1 << 20);

		fill(arg, off, n, buf);
		if (write_all(fd, buf, n) < 0)
			goto fail;
		off += n;
	}
	if (fcntl(fd, F_ADD_SEALS, SNAP_SEALS) < 0)
		goto fail;
	free(buf);
	return fd;
fail:
	free(buf);
	close(fd);
	return -EIO;
}

static void
fill_copy(void *arg, uint64_t off, size_t n, unsigned char *out)
{
	memcpy(out, (const unsigned char *)arg + off, n);
}

/* Keeps blob (sha) as the cached snapshot: an image, no patch. */
static int
snap_keep(struct worker *w, const char *sha, const void *blob, size_t len)
{
	int fd;

	snap_forget(w);
	if ((fd = memfd_sealed(len, fill_copy, (void *)(uintptr_t)blob)) < 0)
		return fd;
	w->snap_fd = fd;
	w->snap_len = len;
	snprintf(w->snap_sha, sizeof(w->snap_sha), "%s", sha);
	return 0;
}

struct composed {
	const unsigned char *img;
	size_t img_len;
	struct patch p;
};

static void
fill_patched(void *arg, uint64_t off, size_t n, unsigned char *out)
{
	struct composed *c = arg;

	patch_read(c->img, c->img_len, &c->p, off, n, out);
}

/*
 * Folds a patch grown past a quarter of its image into a new image: every
 * job's sandbox maps the patch and the store re-hashes the chunks it
 * touches, so it must stay small. About what one copy of the image costs;
 * done after the result is out.
 */
static void
snap_compact(struct worker *w)
{
	struct composed c;
	struct err e = { 0 };
	void *img = MAP_FAILED, *pt = MAP_FAILED;
	size_t img_len = w->snap_len, pt_len = w->patch_len;
	int fd = -1;

	if (w->patch_fd < 0 || pt_len < img_len / 4)
		return;
	img = mmap(NULL, img_len, PROT_READ, MAP_SHARED, w->snap_fd, 0);
	pt = mmap(NULL, pt_len, PROT_READ, MAP_SHARED, w->patch_fd, 0);
	if (img != MAP_FAILED && pt != MAP_FAILED &&
	    patch_parse(pt, pt_len, &c.p, &e) == 0) {
		c.img = img;
		c.img_len = img_len;
		fd = memfd_sealed((size_t)c.p.size, fill_patched, &c);
	}
	if (fd >= 0) {
		close(w->snap_fd);
		close(w->patch_fd);
		w->snap_fd = fd;
		w->snap_len = (size_t)c.p.size;
		w->patch_fd = -1;
		w->patch_len = 0;
	} else
		snap_forget(w);		/* read back from the store next time */
	if (img != MAP_FAILED)
		munmap(img, img_len);
	if (pt != MAP_FAILED)
		munmap(pt, pt_len);
}

/* Forgets the template snapshot. */
static void
snap_tmpl_forget(struct worker *w)
{
	if (w->tmpl_fd >= 0)
		close(w->tmpl_fd);
	if (w->tmpl_patch_fd >= 0)
		close(w->tmpl_patch_fd);
	w->tmpl_fd = w->tmpl_patch_fd = -1;
	w->tmpl_len = w->tmpl_patch_len = 0;
	w->tmpl_sha[0] = '\0';
}

/*
 * Keeps the cached snapshot (the head a job is about to leave, which other
 * sandboxes share) as the template too, unless it is already: the same
 * sealed memfds, dup'd.
 */
static void
snap_tmpl_keep(struct worker *w)
{
	if (w->snap_fd < 0 || strcmp(w->tmpl_sha, w->snap_sha) == 0)
		return;
	snap_tmpl_forget(w);
	w->tmpl_fd = fcntl(w->snap_fd, F_DUPFD_CLOEXEC, 0);
	w->tmpl_patch_fd = w->patch_fd < 0 ? -1 :
	    fcntl(w->patch_fd, F_DUPFD_CLOEXEC, 0);
	if (w->tmpl_fd < 0 || (w->patch_fd >= 0 && w->tmpl_patch_fd < 0)) {
		snap_tmpl_forget(w);
		return;
	}
	w->tmpl_len = w->snap_len;
	w->tmpl_patch_len = w->patch_len;
	snprintf(w->tmpl_sha, sizeof(w->tmpl_sha), "%s", w->snap_sha);
}

/*
 * The row of the job's sandbox into *sb. Returns 0, or -1 with res filled
 * (no such sandbox, or a store error).
 */
static int
snap_row(struct worker *w, const struct job *j, struct store_sandbox *sb,
    struct result *res)
{
	struct err e = { 0 };
	int rc;

	rc = store_sandbox_get(w->store, j->tenant, j->sandbox, sb, &e);
	if (rc == -ENOENT) {
		result_set_error(res, ST_REJECTED, "sandbox_not_found",
		    "no sandbox '%s' (create it with sandbox.create)", j->sandbox);
		return -1;
	}
	if (rc < 0) {
		result_set_error(res, ST_INTERNAL, "store", "%s", e.msg);
		return -1;
	}
	return 0;
}

/*
 * Whether run j may go on the sandbox whose row is sb (docs/images.md
 * "Sandboxes on images"): what sandqd held the sandbox runs on
 * (j->sandbox_image, j->sandbox_workdir; NULL for none) must be what the
 * row records, and a sandbox that records an image runs on that image
 * alone. Otherwise nothing runs: res is rejected with code image_stale
 * and data {"image", "workdir"}, the row's ("" for none), which sandqd
 * reads to admit the job again on them, or to refuse it for naming
 * another image (dispatcher/sbximage.c). Returns 0 or -1.
 */
static int
runs_on(const struct job *j, const struct store_sandbox *sb, struct result *res)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;

	if (strcmp(j->sandbox_image != NULL ? j->sandbox_image : "", sb->image) == 0 &&
	    strcmp(j->sandbox_workdir != NULL ? j->sandbox_workdir : "",
	    sb->workdir) == 0 && (sb->image[0] == '\0' ||
	    (j->image != NULL && strcmp(j->image, sb->image) == 0)))
		return 0;
	result_set_error(res, ST_REJECTED, "image_stale", "sandbox '%s' runs on %.200s "
	    "with its files at %.200s", j->sandbox, sb->image[0] ? sb->image :
	    "the job's own image", sb->workdir[0] ? sb->workdir : "/workspace");
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	pk_key(&pk, "image");
	msgpack_pack_str_with_body(&pk, sb->image, strlen(sb->image));
	pk_key(&pk, "workdir");
	msgpack_pack_str_with_body(&pk, sb->workdir, strlen(sb->workdir));
	res->data_len = buf.size;
	res->data = (uint8_t *)msgpack_sbuffer_release(&buf);
	res->started_at = res->finished_at = now_ms();
	return -1;
}

/*
 * The head of row sb into w's snapshot memfd (kept: the next job on the
 * same head reads nothing). Returns 0, or -1 with res filled.
 */
static int
snap_load(struct worker *w, const struct store_sandbox *sb, struct result *res)
{
	struct err e = { 0 };
	void *blob = NULL;
	size_t len = 0;
	int rc;

	if (w->snap_fd >= 0 && strcmp(w->snap_sha, sb->head) == 0)
		return 0;
	if (w->tmpl_fd >= 0 && strcmp(w->tmpl_sha, sb->head) == 0) {
		snap_forget(w);
		w->snap_fd = fcntl(w->tmpl_fd, F_DUPFD_CLOEXEC, 0);
		w->patch_fd = w->tmpl_patch_fd < 0 ? -1 :
		    fcntl(w->tmpl_patch_fd, F_DUPFD_CLOEXEC, 0);
		if (w->snap_fd >= 0 && (w->tmpl_patch_fd < 0 || w->patch_fd >= 0)) {
			w->snap_len = w->tmpl_len;
			w->patch_len = w->tmpl_patch_len;
			snprintf(w->snap_sha, sizeof(w->snap_sha), "%s", sb->head);
			return 0;
		}
		snap_forget(w);
	}
	if ((rc = store_blob_get(w->store, sb->head, &blob, &len, &e)) < 0 ||
	    (rc = snap_keep(w, sb->head, blob, len)) < 0) {
		result_set_error(res, ST_INTERNAL, "store", "snapshot %.12s: %s", sb->head,
		    e.msg[0] ? e.msg : strerror(-rc));
		free(blob);
		return -1;
	}
	free(blob);
	return 0;
}

/*
 * The fingerprint of j's path rules into fp: SHA-256 of their compiled
 * canonical text (perms_canonical(): the preset expanded, patterns
 * normalised), as SANDBOX_RULES_FP_LEN hex digits. Jobs with equal
 * fingerprints get the same level for every path, so they share a kept
 * base, and a shell session one saved may start the other (persist.c).
 * The rules alone decide what a job may read or write: its limits preset
 * bounds how much, either network mode reaches only its own loopback.
 * Hashed here, where the digest is warm, rather than in each sandbox's
 * fresh init, where OpenSSL's first digest costs about a millisecond.
 */
static void
rules_fingerprint(const struct job *j, char fp[SANDBOX_RULES_FP_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	struct perms p = { 0 };
	struct err e = { 0 };
	char *text;
	size_t len = 0;

	if (perms_compile_job(&p, j, &e) < 0)
		fatalx("dispatcher sent path rules that do not compile: %s", e.msg);
	text = perms_canonical(&p, &len);
	perms_free(&p);
	if (EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen * 2 != SANDBOX_RULES_FP_LEN)
		fatalx("cannot hash path rules");
	free(text);
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(fp + 2 * i, 3, "%02x", md[i]);
}

/*
 * The kept base's key for snapshot head under the path rules whose
 * fingerprint is fp (persist.c): the tenant, the head, the rules, and the
 * image and workdir the sandbox runs on (the image decides whose files the
 * base's are). The base holds one snapshot under one rule set; a job with
 * other rules rebuilds it. The sandbox is not part of it: the base is what
 * the snapshot's bytes and the rules make, whichever sandbox names them,
 * so a fork, or a sandbox created from the same snapshot, starts on the
 * base its source left (docs/decisions.md "Performance (issue 19)").
 */
static char *
base_key(const struct job *j, const char *head, const char *fp)
{
	char *key = NULL;

	xasprintf(&key, "3 %s %s %s %s %s", j->tenant, head, fp,
	    j->image_id != NULL ? j->image_id : "-",
	    j->sandbox_workdir != NULL ? j->sandbox_workdir : "-");
	return key;
}

/*
 * Called while a persistent run's job runs, once it has run IDLE_AFTER_MS
 * (sandbox_set_idle()): the next job's sandbox is prepared now, while the
 * worker would only wait, instead of after the result. A shorter job has
 * its result first: the sandbox made beside it took a CPU from it
 * (docs/decisions.md "Warm interpreters and persistent jobs, another
 * round"). The sandbox before this
 * job's was reaped already (worker_loop()).
 */
#define IDLE_AFTER_MS 10

static void
job_idle(void *arg)
{
	prepare_next(arg);
}

/* Whether a run's workspace is committed: only when it ended on its own. */
static bool
run_commits(const struct result *res)
{
	return res->status == ST_OK || res->status == ST_EXIT || res->status == ST_SIGNAL;
}

/* Captures and commits a persistent run; fills res's sandbox fields. */
static void
run_commit(struct worker *w, struct sandbox *sbx, const struct job *j,
    const struct store_sandbox *sb, const char *fp, bool shared,
    struct result *res)
{
	char sha[STORE_SHA_HEX + 1];
	struct err e = { 0 };
	void *img = MAP_FAILED, *pt = MAP_FAILED, *prev = NULL;
	size_t len = 0;
	char *rec, *key;
	int rc, fd = -1;
	int64_t t0 = mono_ns(), t1;

	rec = call_record(j, res);
	rc = sandbox_capture(sbx, j, rec, w->snap_len, &fd, &len, res);
	free(rec);
	if (rc < 0)
		return;
	t1 = mono_ns();
	/*
	 * The new head is the image the job started from with the patch it
	 * handed back (sealed: it cannot change under the store's reads).
	 * Only the chunks holding blocks that patch adds to the head's (the
	 * cached one, prev) are hashed and stored.
	 */
	img = mmap(NULL, w->snap_len, PROT_READ, MAP_SHARED, w->snap_fd, 0);
	pt = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (w->patch_fd >= 0 && w->patch_len > 0 && (prev = mmap(NULL, w->patch_len,
	    PROT_READ, MAP_SHARED, w->patch_fd, 0)) == MAP_FAILED)
		prev = NULL;	/* every block it re-sends is hashed then */
	if (img == MAP_FAILED || pt == MAP_FAILED) {
		rc = err_set(&e, -errno, "map the snapshot: %s", strerror(errno));
	} else {
		/* The tenant's storage quota, kept history included, is
		 * checked in the commit's own transaction (store.h). */
		store_set_quota(w->store, w->quota);
		rc = store_sandbox_commit_patch_from(w->store, j->tenant, j->sandbox,
		    sb->version, img, w->snap_len, prev, prev != NULL ? w->patch_len : 0,
		    pt, len, sha, &e);
		store_set_quota(w->store, 0);
	}
	if (img != MAP_FAILED)
		munmap(img, w->snap_len);
	if (pt != MAP_FAILED)
		munmap(pt, len);
	if (prev != NULL)
		munmap(prev, w->patch_len);
	if (rc < 0) {
		sandbox_commit_done(sbx, NULL, false);
		close(fd);
		if (rc == -EDQUOT)
			result_set_error(res, ST_REJECTED, "storage_quota", "the job ran, "
			    "but its workspace was not committed: %s", e.msg);
		else if (rc == -ESTALE)
			result_set_error(res, ST_INTERNAL, "conflict", "sandbox '%s' moved "
			    "on while the job ran; its changes were not committed: %s",
			    j->sandbox, e.msg);
		else if (rc == -ENOENT)
			result_set_error(res, ST_REJECTED, "sandbox_not_found", "sandbox '%s' "
			    "was deleted while the job ran; its changes were not committed",
			    j->sandbox);
		else
			result_set_error(res, ST_INTERNAL, "store", "commit: %s", e.msg);
		return;
	}
	key = base_key(j, sha, fp);
	sandbox_commit_done(sbx, key, shared);
	free(key);
	res->version = sb->version + 1;
	free(res->snapshot);
	res->snapshot = xstrdup(sha);
	/* Told at once: if this worker dies before its result, the job is
	 * not run again (its changes would be applied twice). */
	{
		uint64_t v = res->version;

		if (msg_send(w->fd, MSG_JOB_COMMITTED, w->job_seq, &v, sizeof(v), -1) < 0)
			log_warnx("cannot report the commit of job %s", j->id);
	}
	/* The same image, the new patch: the cached head is the new one. */
	if (w->patch_fd >= 0)
		close(w->patch_fd);
	w->patch_fd = fd;
	w->patch_len = len;
	snprintf(w->snap_sha, sizeof(w->snap_sha), "%s", sha);
	log_debug("job %s: capture %.1f ms, store %.1f ms (patch of %zu bytes)",
	    j->id, (t1 - t0) / 1e6, (mono_ns() - t1) / 1e6, len);
}

/*** Cases: one command, many inputs ***/

/*
 * Whether a case's stdout matches its expect, judged as `sandq batch` and
 * the gateway's batches judge (proto/batchcase.h): exact bytes; trim
 * (trailing blanks of each line and trailing empty lines ignored on both
 * sides); regex (PCRE2, proto/rx.h: the whole output without its final
 * newlines; a match that hits rx.h's work bound does not pass).
 * cases_check() has compiled every regex once before any case ran.
 */
static bool
case_passes(const struct job_case *c, const struct result *r)
{
	struct batch_expect ex;
	char why[320];
	int rc;

	if (batchcase_expect_set(&ex, c->expect_mode, (const char *)c->expect,
	    c->expect_len, why, sizeof(why)) < 0)
		return false;
	rc = batchcase_expect_check(&ex, r->out, r->out_len);
	batchcase_expect_free(&ex);
	return rc == 1;
}

/* One case's outcome, in the run's data. */
static void
pack_case(msgpack_packer *pk, size_t i, const struct job_case *c,
    const struct result *r, bool pass)
{
	const char *st = res_status_name(r->status);

	msgpack_pack_map(pk, 10 + (c->expect != NULL) + (r->error_message != NULL));
	pk_key(pk, "case");
	msgpack_pack_uint64(pk, i + 1);
	pk_key(pk, "status");
	msgpack_pack_str_with_body(pk, st, strlen(st));
	pk_key(pk, "exit_code");
	msgpack_pack_int(pk, r->exit_code);
	pk_key(pk, "signal");
	msgpack_pack_int(pk, r->signal);
	pk_key(pk, "stdout");
	msgpack_pack_bin_with_body(pk, r->out, r->out_len);
	pk_key(pk, "stderr");
	msgpack_pack_bin_with_body(pk, r->err, r->err_len);
	pk_key(pk, "stdout_truncated");
	r->out_truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	pk_key(pk, "stderr_truncated");
	r->err_truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	pk_key(pk, "wall_ms");
	msgpack_pack_uint64(pk, r->wall_ms);
	pk_key(pk, "cpu_ms");
	msgpack_pack_uint64(pk, r->cpu_ms);
	if (c->expect != NULL) {
		pk_key(pk, "pass");
		pass ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	}
	if (r->error_message != NULL) {
		pk_key(pk, "error");
		msgpack_pack_str_with_body(pk, r->error_message, strlen(r->error_message));
	}
}

/*
 * Refuses a run whose cases hold a regex that does not compile, before any
 * case runs: rejected, invalid_job, naming the case by its index and
 * giving PCRE2's message and offset. Returns 0 or -EINVAL (res set).
 */
static int
cases_check(const struct job *j, struct result *res)
{
	for (size_t i = 0; i < j->ncases; i++) {
		const struct job_case *c = &j->cases[i];
		struct batch_expect ex;
		char why[320];

		if (c->expect == NULL || c->expect_mode == NULL ||
		    strcmp(c->expect_mode, "regex") != 0)
			continue;
		if (batchcase_expect_set(&ex, c->expect_mode, (const char *)c->expect,
		    c->expect_len, why, sizeof(why)) < 0) {
			/* why names "field 'expect'": the case's own name instead. */
			const char *msg = strncmp(why, "field 'expect': ", 16) == 0 ?
			    why + 16 : why;

			result_set_error(res, ST_REJECTED, "invalid_job",
			    "field 'cases[%zu].expect': %s", i, msg);
			return -EINVAL;
		}
		batchcase_expect_free(&ex);
	}
	return 0;
}

static int net_allow_setup(struct worker *w, struct sandbox *sbx, struct job *j,
    char **spec, size_t *speclen, struct result *res);

/*
 * A run with cases: the command once per case, each in a fresh sandbox
 * from the same files (snap: the sandbox's head, or NULL) with its own
 * stdin and limits; nothing is committed. res: status ok once every case
 * ran (each has its own status), exit code 1 if a case failed its expect,
 * data {cases: [...], passed, failed}; wall and CPU time summed.
 */
static void
run_cases(struct worker *w, struct job *j, const struct sandbox_snapshot *snap,
    struct result *res)
{
	struct job_case *cases = j->cases;
	size_t n = j->ncases, passed = 0, failed = 0;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	res->started_at = now_ms();
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	pk_key(&pk, "cases");
	msgpack_pack_array(&pk, n);
	/* Each case's spec is the job with that case's stdin and no cases. */
	j->cases = NULL;
	j->ncases = 0;
	for (size_t i = 0; i < n; i++) {
		struct result *cr = result_new(j->id);
		char *spec = NULL;
		size_t speclen = 0;
		bool pass = false;

		j->stdin_data = cases[i].stdin_data;
		j->stdin_len = cases[i].stdin_len;
		prepare_next(w);
		if (w->next == NULL) {
			result_set_error(cr, ST_INTERNAL, "sandbox",
			    "no sandbox could be prepared on this worker");
		} else {
			int rc = 0;

			/* net "allow": each case's sandbox its own listener. */
			if (j->net_mode == NET_ALLOW)
				rc = net_allow_setup(w, w->next, j, &spec, &speclen, cr);
			else if (payload_job_encode(j, &spec, &speclen) < 0)
				fatalx("cannot encode a case's job");
			sandbox_set_output(w->next, NULL, NULL);
			if (rc == 0)
				sandbox_run(w->next, j, spec, speclen, snap, cr);
			free(spec);
			sandbox_free(w->next);
			w->next = NULL;
		}
		if (cases[i].expect != NULL) {
			pass = cr->status == ST_OK && case_passes(&cases[i], cr);
			pass ? passed++ : failed++;
		}
		pack_case(&pk, i, &cases[i], cr, pass);
		res->wall_ms += cr->wall_ms;
		res->cpu_ms += cr->cpu_ms;
		if (cr->max_rss_kb > res->max_rss_kb)
			res->max_rss_kb = cr->max_rss_kb;
		result_free(cr);
	}
	j->stdin_data = NULL;
	j->stdin_len = 0;
	j->cases = cases;
	j->ncases = n;
	pk_key(&pk, "passed");
	msgpack_pack_uint64(&pk, passed);
	pk_key(&pk, "failed");
	msgpack_pack_uint64(&pk, failed);
	res->status = ST_OK;
	res->exit_code = failed > 0 ? 1 : 0;
	res->data_len = sb.size;
	res->data = (uint8_t *)msgpack_sbuffer_release(&sb);
	res->finished_at = now_ms();
}

/* The proxy variables a net "allow" job gets, over any of its own. */
static const char *const proxy_vars[] = {
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
	"all_proxy", "NO_PROXY", "no_proxy",
};

/*
 * A net "allow" job's way out (docs/security.md, "Network by allowlist"):
 * a listener on 127.0.0.1:egress_port in its sandbox's namespace, made by
 * the spawner, handed to sandqd (MSG_JOB_NET), which hands it to the
 * egress proxy with its own word on the job; and the proxy variables in
 * the job's environment, which *spec (owned, re-encoded) then carries.
 * The variables are a convenience, not the bound: the namespace has no
 * other route, whatever a job sets. Returns 0, or -1 with res filled.
 */
static int
net_allow_setup(struct worker *w, struct sandbox *sbx, struct job *j, char **spec,
    size_t *speclen, struct result *res)
{
	struct err e = { 0 };
	char *url = NULL;
	size_t n = 0;
	int fd = -1, rc;

	if (w->egress_port == 0 ||
	    sandbox_net_listen(sbx, w->egress_port, &fd, &e) < 0) {
		result_set_error(res, ST_INTERNAL, "sandbox", "egress listener: %s",
		    w->egress_port ? e.msg : "no egress port");
		return -1;
	}
	rc = msg_send(w->fd, MSG_JOB_NET, w->job_seq, NULL, 0, fd);
	close(fd);
	if (rc < 0)
		fatalx("dispatcher channel: %s", strerror(-rc));
	xasprintf(&url, "http://127.0.0.1:%u", (unsigned)w->egress_port);
	/* The job's own values of these names go: ours are the ones set. */
	for (size_t i = 0; i < j->nenv; i++) {
		bool ours = false;

		for (size_t k = 0; k < sizeof(proxy_vars) / sizeof(proxy_vars[0]); k++) {
			size_t len = strlen(proxy_vars[k]);

			ours |= strncmp(j->env[i], proxy_vars[k], len) == 0 &&
			    j->env[i][len] == '=';
		}
		if (ours)
			free(j->env[i]);
		else
			j->env[n++] = j->env[i];
	}
	j->env = xreallocarray(j->env, n + sizeof(proxy_vars) / sizeof(proxy_vars[0]) + 1,
	    sizeof(char *));
	for (size_t k = 0; k < sizeof(proxy_vars) / sizeof(proxy_vars[0]); k++)
		xasprintf(&j->env[n++], "%s=%s", proxy_vars[k],
		    strcasecmp(proxy_vars[k], "no_proxy") == 0 ? "" : url);
	j->env[n] = NULL;
	j->nenv = n;
	free(url);
	if (payload_job_encode(j, spec, speclen) < 0)
		fatalx("cannot encode a net allow job");
	return 0;
}

/*
 * Reaps the last job's sandbox before job j. Its init may still be
 * bringing the kept base up to its commit, which from the template is a
 * copy of the whole tree (sandbox/persist.c, "The kept base"): an op on
 * the store alone leaves it at that; a job on the same sandbox, the one
 * that base is for, waits for it, but not for init's exit after it (the
 * teardown of its namespaces): that sandbox is reaped after this job's
 * result (w->late); any other job, which would not use the base, does not
 * wait: the update is given up (the base is rebuilt when wanted).
 */
static void
spent_reap(struct worker *w, const struct job *j)
{
	sandbox_free(w->late);
	w->late = NULL;
	if (sandbox_updating(w->spent)) {
		if (!JOB_OP_RUNS(j->op) && j->from_image_dir == NULL)
			return;
		if (!JOB_OP_RUNS(j->op) || j->sandbox == NULL ||
		    strcmp(j->sandbox, w->spent_sandbox) != 0) {
			sandbox_update_abandon(w->spent);
		} else if (sandbox_update_wait(w->spent)) {
			w->late = w->spent;
			w->spent = NULL;
			return;
		}
	}
	sandbox_free(w->spent);
	w->spent = NULL;
}

static int
run_job(struct worker *w, const struct msg *m)
{
	struct err e = { 0 };
	struct store_sandbox sb;
	struct result *res;
	struct job *j = NULL;
	int rc;

	if (payload_job_decode(m->data, m->len, &j, NULL, &e) < 0)
		fatalx("dispatcher sent a job that does not decode: %s", e.msg);
	/* Left by a job whose successor's sandbox was made during it. */
	spent_reap(w, j);
	w->job_seq = m->hdr.job_id;
	res = result_new(j->id);
	/* A sandbox made from an image's folder: seeded in a sandbox on it. */
	if (j->op == OP_SANDBOX_CREATE && j->from_image_dir != NULL) {
		if (image_for(w, j, res) == 0) {
			prepare_next(w);
			worker_seed(w, j, m->data, m->len, res);
		}
		goto out_send;
	}
	if (!JOB_OP_RUNS(j->op)) {
		ops_run_quota(w->store, j, w->quota, res);
		goto out_send;
	}
	/* The sandbox's row first: it says which image the job runs on. */
	if (j->sandbox != NULL && (snap_row(w, j, &sb, res) < 0 ||
	    runs_on(j, &sb, res) < 0)) {
		res->started_at = res->finished_at = now_ms();
		goto out_send;
	}
	if (image_for(w, j, res) < 0)
		goto out_send;
	prepare_next(w);
	if (j->sandbox != NULL && snap_load(w, &sb, res) < 0) {
		res->started_at = res->finished_at = now_ms();
	} else if (w->next == NULL) {
		result_set_error(res, ST_INTERNAL, "sandbox",
		    "no sandbox could be prepared on this worker");
		res->started_at = res->finished_at = now_ms();
	} else {
		char fp[SANDBOX_RULES_FP_LEN + 1] = "", *key = NULL;
		bool shared = false;
		struct sandbox_snapshot snap = { .img_fd = w->snap_fd,
		    .patch_fd = w->patch_fd, .rules_fp = fp };

		if (j->sandbox != NULL) {
			struct err se = { 0 };

			rules_fingerprint(j, fp);
			snap.base_key = key = base_key(j, sb.head, fp);
			/* Other sandboxes start from this head: keep it, as the
			 * snapshot here and as the kept base's template. */
			shared = j->persist && store_head_shared(w->store, j->tenant,
			    sb.head, j->sandbox, &se) == 1;
			if (shared)
				snap_tmpl_keep(w);
		}

		if (j->ncases > 0) {
			if (cases_check(j, res) != 0)
				res->started_at = res->finished_at = now_ms();
			else
				run_cases(w, j, j->sandbox != NULL ? &snap : NULL, res);
			free(key);
			if (j->sandbox != NULL) {
				res->sandbox = xstrdup(j->sandbox);
				res->version = sb.version;
				res->snapshot = xstrdup(sb.head);
			}
			goto out_send;
		}
		/* Reaped after the result is out. */
		w->spent = w->next;
		w->next = NULL;
		snprintf(w->spent_sandbox, sizeof(w->spent_sandbox), "%s",
		    j->sandbox != NULL ? j->sandbox : "");
		sandbox_set_output(w->spent, j->stream ? send_output : NULL, w);
		/*
		 * The next job on a persistent sandbox comes to this worker:
		 * its sandbox is made while this job runs (job_idle()), in the
		 * other network namespace and cgroup slot.
		 */
		if (j->sandbox != NULL && j->persist)
			sandbox_set_idle(w->spent, job_idle, w, IDLE_AFTER_MS);
		if (j->net_mode != NET_ALLOW) {
			sandbox_run(w->spent, j, m->data, m->len,
			    j->sandbox != NULL ? &snap : NULL, res);
		} else {
			char *spec = NULL;
			size_t speclen = 0;

			if (net_allow_setup(w, w->spent, j, &spec, &speclen, res) == 0)
				sandbox_run(w->spent, j, spec, speclen,
				    j->sandbox != NULL ? &snap : NULL, res);
			else
				res->started_at = res->finished_at = now_ms();
			free(spec);
		}
		free(key);
		if (j->sandbox != NULL) {
			res->sandbox = xstrdup(j->sandbox);
			res->version = sb.version;
			res->snapshot = xstrdup(sb.head);
			if (j->persist && run_commits(res))
				run_commit(w, w->spent, j, &sb, fp, shared, res);
		}
	}
out_send:
	w->jobs++;
	log_debug("job %s: %s in %llu ms", j->id, res_status_name(res->status),
	    (unsigned long long)res->wall_ms);
	rc = send_result(w, m->hdr.job_id, res);
	result_free(res);
	job_free(j);
	return rc;
}

/* The store's WAL folded in once the worker has had CHECKPOINT_IDLE_MS idle. */
static void
checkpoint_idle(struct worker *w)
{
	struct pollfd p = { .fd = w->fd, .events = POLLIN };
	struct err e = { 0 };
	int64_t t0;
	int n;

	if (poll(&p, 1, CHECKPOINT_IDLE_MS) != 0)
		return;
	t0 = mono_ns();
	if ((n = store_checkpoint_idle(w->store, &e)) < 0)
		log_warnx("store: checkpoint: %s", e.msg);
	else if (n > 0)
		log_debug("store: %d WAL frames checkpointed while idle in %.1f ms",
		    n, (double)(mono_ns() - t0) / 1e6);
}

int
worker_loop(struct worker *w)
{
	struct msg m;
	int rc;

	msg_init(&m);
	prepare_next(w);
	for (;;) {
		if (w->store != NULL &&
		    store_wal_pending(w->store) >= CHECKPOINT_IDLE_FRAMES)
			checkpoint_idle(w);
		rc = msg_recv(w->fd, &m, MSG_BLOB_MAX);
		if (rc == 0)
			break;		/* dispatcher closed the channel */
		if (rc < 0)
			fatalx("bad frame from the dispatcher: %s", strerror(-rc));
		switch (m.hdr.type) {
		case MSG_JOB_TENANT: {
			struct msg_job_tenant jt;

			if (m.len != sizeof(jt))
				fatalx("bad JOB_TENANT frame from the dispatcher");
			memcpy(&jt, m.data, sizeof(jt));
			w->quota = jt.storage_quota;
			break;
		}
		case MSG_JOB_RUN:
			if (run_job(w, &m) < 0)
				fatalx("cannot send a result to the dispatcher");
			/*
			 * The result woke the dispatcher, often onto this CPU:
			 * let it publish before the next sandbox's clone, about
			 * a millisecond of kernel work, delays it.
			 */
			sched_yield();
			/*
			 * A next sandbox made during the job (job_idle()): the
			 * spent one is reaped when the next job comes, or after
			 * SPENT_LINGER_MS without one, so that the next job on a
			 * persistent sandbox does not wait after the result for
			 * its kept base's update and init's end (run_job() reaps
			 * it before that job touches the base).
			 */
			snap_compact(w);
			if (w->next != NULL && w->spent != NULL) {
				struct pollfd p = { .fd = w->fd, .events = POLLIN };

				if (poll(&p, 1, SPENT_LINGER_MS) != 0)
					break;
			}
			/*
			 * Otherwise the spent sandbox first (its init has usually
			 * exited by now): the next one shares its network
			 * namespace only once it has ended (sandbox/spawn.c,
			 * net_enter()).
			 */
			sandbox_free(w->late);
			w->late = NULL;
			if (!sandbox_updating(w->spent)) {
				sandbox_free(w->spent);
				w->spent = NULL;
			}
			prepare_next(w);
			break;
		case MSG_SHUTDOWN:
			goto out;
		default:
			fatalx("unexpected %s frame from the dispatcher",
			    msg_type_name(m.hdr.type));
		}
		msg_clear(&m);
	}
out:
	msg_clear(&m);
	sandbox_free(w->late);
	w->late = NULL;
	sandbox_free(w->spent);
	sandbox_free(w->next);
	w->next = NULL;
	worker_image_clear(&w->img);
	return 0;
}
