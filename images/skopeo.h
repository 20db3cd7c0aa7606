/*
 * skopeo.h - running skopeo, the one program sandq fetches images with.
 *
 * skopeo_exec() runs one skopeo command from an argv (no shell), in a
 * clean environment (or the one given), in a process group of its own,
 * with a time limit;
 * it hands each line of its stdout to a callback (or keeps the stdout,
 * for `skopeo inspect --raw`) and turns its stderr into one escaped line
 * that says why it failed. images/cache.c pulls with it (clean
 * environment), `sandq image build` and `import` push with it (the
 * user's).
 */
#ifndef SANDQ_IMAGES_SKOPEO_H
#define SANDQ_IMAGES_SKOPEO_H

#include <stddef.h>

#define SKOPEO_BIN "/usr/bin/skopeo"
#define SKOPEO_WHY_MAX 200		/* bytes of the escaped reason kept */

/* One run. The caller fills the inputs; skopeo_exec() fills the outputs. */
struct skopeo_cmd {
	const char *const *argv;	/* argv[0] is the binary's path; NULL-terminated */
	const char *home;		/* HOME and TMPDIR of the run: the cache's tmp/ */
	char *const *envp;		/* NULL: the clean environment (PATH, LC_ALL,
					   HOME, TMPDIR); else exactly this one (the
					   CLI's push: the user's own, credentials and
					   proxies with it) */
	unsigned timeout_ms;		/* then the process group is killed */
	void (*line_cb)(void *arg, const char *line);	/* each stdout line, or NULL */
	void *arg;			/* line_cb's */
	char *out;			/* if not NULL, stdout is kept here instead */
	size_t out_max;			/* out's size; more is -E2BIG */
	size_t out_len;			/* out: bytes kept in out (NUL added) */
	char why[SKOPEO_WHY_MAX + 8];	/* out: why it failed, escaped */
};

/*
 * Runs c->argv and waits for it. Returns 0 if it exited 0; -ETIMEDOUT if
 * it ran past c->timeout_ms (its group is killed first); -EIO if it
 * failed (c->why: skopeo's fatal message, else its last stderr line);
 * -E2BIG if it printed more than c->out_max; -errno if it could not be
 * started. It dies with the caller (PR_SET_PDEATHSIG): an orphan copy
 * must not write into the cache after its lock is gone.
 */
int skopeo_exec(struct skopeo_cmd *c);

#endif
