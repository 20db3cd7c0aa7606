/*
 * cli_image.c - `sandq image pull` and `sandq image ls`: images in the
 * hosts' caches (docs/images.md).
 *
 * The cache is each sandqd's (STATE/images, root's alone), so, as `docker
 * pull` asks its daemon, `sandq image pull REF` asks a host: it submits an
 * image.pull job to the tenant's stream like any job; the host that reads
 * it pulls the image (within its image_sources, as a run's image is) or
 * finds it cached, and answers with the image. With a stream the pull's
 * progress comes as records on the job's output stream (fd 3, one JSON
 * object each): drawn as a bar on stderr when it is a terminal, one line
 * per record otherwise, nothing with --quiet. Everything the server or a
 * registry wrote is escaped before it reaches the terminal.
 *
 * `sandq image ls` reads what each host says its cache holds in its
 * status (PREFIX:hosts, written every couple of seconds by sandqd;
 * dispatcher/status.c), as `sandq status` does: an operator's view, with
 * the admin credentials of --redis.
 *
 * Sections: helpers, pull, ls, entry point.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "../common/util.h"
#include "../common/xmalloc.h"
#include "cli_common.h"
#include "cli_image.h"
#include "cli_man.h"
#include "redis_sync.h"

#define PREFIX "sandq"
#define STALE_MS 10000			/* a host whose status is older is gone */
#define SLICE_MS 1000			/* a stream read waits at most this */
#define BAR_COLS 24			/* the bar's own width */
#define BAR_MS 100			/* the bar is drawn at most this often */
#define REF_COLS 56			/* a reference in the ls table */

/*** Helpers ***/

/* The monotonic clock in ms. */
static int64_t
mono_ms(void)
{
	return mono_ns() / 1000000;
}

/* "1.5 MiB" and the like into buf. */
static const char *
fmt_bytes(char *buf, size_t n, uint64_t b)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	size_t u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%" PRIu64 " B", b);
	else
		snprintf(buf, n, "%.1f %s", v, units[u]);
	return buf;
}

/*
 * The first 19 bytes of digest ("sha256:" and 12 hex digits), or "-",
 * as the server wrote it: the caller escapes it.
 */
static const char *
short_digest(const char *digest)
{
	static char buf[32];

	snprintf(buf, sizeof(buf), "%.19s", digest != NULL ? digest : "-");
	return buf;
}

/* How long ago epoch ms t was: "12s ago", "3m ago", "5h ago", "2d ago". */
static const char *
fmt_ago(char *buf, size_t n, int64_t t)
{
	int64_t s = ((int64_t)now_ms() - t) / 1000;

	if (t <= 0)
		snprintf(buf, n, "-");
	else if (s < 60)
		snprintf(buf, n, "%llds ago", (long long)(s < 0 ? 0 : s));
	else if (s < 3600)
		snprintf(buf, n, "%lldm ago", (long long)(s / 60));
	else if (s < 86400)
		snprintf(buf, n, "%lldh ago", (long long)(s / 3600));
	else
		snprintf(buf, n, "%lldd ago", (long long)(s / 86400));
	return buf;
}

/*** pull ***/

/* How the progress is shown, and what was drawn. */
struct bar {
	bool tty;			/* stderr is a terminal: one redrawn line */
	bool quiet;			/* nothing */
	bool shown;			/* a bar is on the line */
	int64_t drawn_at;		/* mono ms of the last draw */
	unsigned spin;			/* the fetch phase's spinner */
	const char *ref;		/* as given (escaped when shown) */
};

/* The terminal's width, or 80. */
static int
term_cols(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

static void
bar_clear(struct bar *b)
{
	if (b->shown) {
		fputs("\r\033[K", stderr);
		b->shown = false;
	}
}

/*
 * One progress record (JSON text from the server): a bar on a terminal
 * (at most every BAR_MS, but always for a phase's last step), or a line.
 * The line is made of the record's raw values and escaped once, whole.
 */
static void
bar_record(struct bar *b, const char *data, size_t len)
{
	json_t *o = json_loadb(data, len, 0, NULL);
	char phase[16];
	json_int_t index, count;
	char line[512], bytes[32], cells[BAR_COLS + 1];
	size_t fill = 0;
	int64_t now = mono_ms();
	int cols;

	if (b->quiet || o == NULL || !json_is_object(o)) {
		json_decref(o);
		return;
	}
	snprintf(phase, sizeof(phase), "%s", cli_jstr(o, "phase", "?"));
	index = cli_jint(o, "index");
	count = cli_jint(o, "count");
	fmt_bytes(bytes, sizeof(bytes), (uint64_t)cli_jint(o, "verified"));
	if (strcmp(phase, "fetch") == 0)
		snprintf(line, sizeof(line), "fetching  %lld blob%s  %s",
		    (long long)cli_jint(o, "blobs"), cli_jint(o, "blobs") == 1 ? "" : "s",
		    short_digest(cli_jstr(o, "digest", NULL)));
	else if (strcmp(phase, "verify") == 0)
		snprintf(line, sizeof(line), "verifying %lld/%lld  %s  %s verified",
		    (long long)index, (long long)count,
		    short_digest(cli_jstr(o, "digest", NULL)), bytes);
	else if (strcmp(phase, "unpack") == 0)
		snprintf(line, sizeof(line), "unpacking layer %lld/%lld  %s",
		    (long long)index, (long long)count,
		    short_digest(cli_jstr(o, "digest", NULL)));
	else if (strcmp(phase, "done") == 0)
		snprintf(line, sizeof(line), "done  %s", short_digest(cli_jstr(o, "digest",
		    NULL)));
	else
		snprintf(line, sizeof(line), "%s", phase);
	if (!b->tty) {
		fprintf(stderr, "pull %s: %s\n", cli_esc(b->ref), cli_esc(line));
		json_decref(o);
		return;
	}
	if (now - b->drawn_at < BAR_MS && index != count && strcmp(phase, "done") != 0) {
		json_decref(o);
		return;
	}
	if (strcmp(phase, "fetch") == 0) {
		/* No count yet: skopeo names each blob as it starts it. */
		memset(cells, ' ', BAR_COLS);
		for (size_t i = 0; i < 3; i++)
			cells[(b->spin + i) % BAR_COLS] = '=';
		b->spin++;
	} else {
		fill = strcmp(phase, "done") == 0 ? BAR_COLS : count > 0 && index >= 0 &&
		    index <= count ? (size_t)(index * BAR_COLS / count) : 0;
		memset(cells, '#', fill);
		memset(cells + fill, '.', BAR_COLS - fill);
	}
	cells[BAR_COLS] = '\0';
	cols = term_cols();
	fprintf(stderr, "\r\033[K%s", cli_esc_cut(line, cols > BAR_COLS + 24 ?
	    (size_t)(cols - BAR_COLS - 4) : 20));
	fprintf(stderr, "  [%s]", cells);
	fflush(stderr);
	b->shown = true;
	b->drawn_at = now;
	json_decref(o);
}

/* The result of a pull, for people: the image and where it is. */
static void
pull_print(const struct sandq_result *r)
{
	json_t *d = cli_result_data_json(r);
	char b1[32], b2[32];

	if (d == NULL) {
		printf("%s\n", cli_esc(r->status));
		return;
	}
	if (json_is_true(json_object_get(d, "pulled")))
		printf("pulled %s on %s in %lld ms\n", cli_jesc(d, "reference", "?"),
		    cli_esc(r->host ? r->host : "?"), (long long)cli_jint(d, "duration_ms"));
	else
		printf("%s is in the cache of %s\n", cli_jesc(d, "reference", "?"),
		    cli_esc(r->host ? r->host : "?"));
	printf("digest    %s\n", cli_jesc(d, "digest", "-"));
	printf("platform  %s/%s\n", cli_jesc(d, "os", "?"), cli_jesc(d, "arch", "?"));
	printf("layers    %zu, %s (%s unpacked)\n", json_array_size(json_object_get(d,
	    "layers")), fmt_bytes(b1, sizeof(b1), (uint64_t)cli_jint(d, "bytes")),
	    fmt_bytes(b2, sizeof(b2), (uint64_t)cli_jint(d, "unpacked_bytes")));
	json_decref(d);
}

/*
 * Follows the pull's stream until it ends (its eof, or its result) or the
 * deadline (mono ms; < 0: none) passes. Returns 0, -ETIMEDOUT, or -EIO.
 */
static int
pull_follow(struct sandq *c, const char *id, struct bar *b, int64_t deadline)
{
	struct sandq_stream *s = NULL;
	const void *data;
	size_t len;
	int fd, rc;

	if ((rc = sandq_stream_open(c, id, &s)) < 0)
		return rc;
	for (;;) {
		int64_t left = deadline < 0 ? SLICE_MS : deadline - mono_ms();

		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		rc = sandq_stream_next(s, left < SLICE_MS ? left : SLICE_MS, &fd, &data, &len);
		if (rc == 1) {
			if (fd == 3)
				bar_record(b, data, len);
			continue;
		}
		if (rc == -ETIMEDOUT)
			continue;
		break;
	}
	sandq_stream_close(s);
	return rc;
}

static int
image_pull(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quiet", no_argument, NULL, 'q' },
		{ "json", no_argument, NULL, 'j' },
		{ "id", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sandq_job_opts o = { 0 };
	struct bar b = { .tty = isatty(STDERR_FILENO) == 1 };
	struct sandq_result *r = NULL;
	struct sandq *c = NULL;
	bool json = conn->json;
	char id[SANDQ_ID_MAX + 1], err[512];
	int64_t deadline = conn->wait_ms >= 0 ? mono_ms() + conn->wait_ms : -1;
	int ch, rc, status = CLI_EXIT_SANDQ;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "+qh", opts, NULL)) != -1) {
		switch (ch) {
		case 'q':
			b.quiet = true;
			break;
		case 'j':
			json = true;
			break;
		case 'i':
			o.id = optarg;
			break;
		case 'h':
			cli_man_print("image");
			return 0;
		default:
			fputs("Try 'sandq help image'.\n", stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		cli_warn("image pull: expected one image reference, got %d", argc - optind);
		fputs("Try 'sandq help image'.\n", stderr);
		return 2;
	}
	b.ref = argv[optind];
	o.image = argv[optind];
	o.stream = !b.quiet;
	if ((c = sandq_connect(conn->redis, cli_tenant_or_default(conn->tenant), err,
	    sizeof(err))) == NULL)
		return cli_fail("%s", err);
	if ((rc = sandq_submit_image_pull(c, argv[optind], &o, id)) < 0) {
		status = rc == -EINVAL ? 2 : CLI_EXIT_SANDQ;
		cli_warn("image pull: %s", sandq_last_error(c));
		goto out;
	}
	if (o.stream && (rc = pull_follow(c, id, &b, deadline)) < 0 && rc != -ETIMEDOUT) {
		bar_clear(&b);
		cli_warn("image pull: %s", sandq_last_error(c));
		goto out;
	}
	rc = sandq_wait(c, id, deadline < 0 ? -1 : (deadline > mono_ms() ?
	    deadline - mono_ms() : 0), &r);
	bar_clear(&b);
	if (rc == -ETIMEDOUT) {
		cli_warn("image pull: no answer within --wait-timeout; the pull goes on "
		    "(sandq result %s)", id);
		goto out;
	}
	if (rc < 0) {
		cli_warn("image pull: %s", sandq_last_error(c));
		goto out;
	}
	if (json) {
		json_t *j = cli_result_json(r), *d = cli_result_data_json(r);

		json_object_set_new(j, "image", d != NULL ? d : json_null());
		status = cli_print_json_line(j);
		if (status == 0)
			status = sandq_result_exit_status(r);
		goto out;
	}
	if (strcmp(r->status, "ok") == 0)
		pull_print(r);
	else
		cli_warn("image pull: %s: %s", r->status, r->error_message ?
		    r->error_message : "(no message)");
	status = sandq_result_exit_status(r);
out:
	sandq_result_free(r);
	sandq_close(c);
	return status;
}

/*** ls ***/

static int
image_ls(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "host", required_argument, NULL, 'H' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	json_t *out = json_array();
	redisContext *rc = NULL;
	redisReply *r = NULL;
	const char *only = NULL;
	char **shown = NULL;		/* each listed host's name, escaped once */
	size_t nshown = 0;
	bool json = conn->json, all = false;
	long long now = (long long)now_ms();
	char msg[512];
	int ch, status = CLI_EXIT_SANDQ;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "+ah", opts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			json = true;
			break;
		case 'H':
			only = optarg;
			break;
		case 'a':
			all = true;
			break;
		case 'h':
			cli_man_print("image");
			json_decref(out);
			return 0;
		default:
			fputs("Try 'sandq help image'.\n", stderr);
			json_decref(out);
			return 2;
		}
	}
	if (optind != argc) {
		cli_warn("image ls takes no argument");
		json_decref(out);
		return 2;
	}
	if ((rc = cli_redis_open(conn->redis, NULL, msg, sizeof(msg))) == NULL) {
		cli_warn("%s", msg);
		goto out;
	}
	r = redisCommand(rc, "HGETALL %s:hosts", PREFIX);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		cli_warn("%s:hosts: %s", PREFIX,
		    r ? (r->type == REDIS_REPLY_ERROR ? r->str : "not a hash") : rc->errstr);
		goto out;
	}
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const redisReply *name = r->element[i], *val = r->element[i + 1];
		json_t *h = json_loadb(val->str, val->len, 0, NULL), *e, *name_j;
		long long age;

		if (h == NULL || !json_is_object(h) ||
		    (only != NULL && (strlen(only) != name->len ||
		    memcmp(only, name->str, name->len) != 0))) {
			json_decref(h);
			continue;
		}
		age = now - (long long)cli_jint(h, "time");
		if (age >= STALE_MS && !all) {
			json_decref(h);
			continue;
		}
		/* A name that is not UTF-8 goes into JSON as the table shows it. */
		if ((name_j = json_stringn(name->str, name->len)) == NULL)
			name_j = json_string(cli_escn(name->str, name->len));
		shown = xreallocarray(shown, nshown + 1, sizeof(*shown));
		shown[nshown++] = xstrdup(cli_escn_cut(name->str, name->len, 20));
		e = json_pack("{s:o, s:b, s:I, s:I, s:I, s:I}", "host", name_j,
		    "live", age < STALE_MS, "age_ms", (json_int_t)age,
		    "images_total", cli_jint(h, "images_total"),
		    "image_cache_bytes", cli_jint(h, "image_cache_bytes"),
		    "image_cache_max", cli_jint(h, "image_cache_max"));
		json_object_set_new(e, "images", json_is_array(json_object_get(h, "images")) ?
		    json_incref(json_object_get(h, "images")) : json_array());
		json_array_append_new(out, e);
		json_decref(h);
	}
	if (json) {
		json_t *o = json_pack("{s:O}", "hosts", out);

		status = cli_print_json_line(o);
		goto out;
	}
	{
		size_t i, k;
		json_t *e, *img;
		char b1[32], b2[32], ago[32];

		printf("%-20s %-*s %-19s %10s %10s %6s\n", "HOST", REF_COLS, "REFERENCE",
		    "DIGEST", "SIZE", "LAST USED", "IN USE");
		json_array_foreach(out, i, e) {
			json_t *imgs = json_object_get(e, "images");
			char hostcol[64];

			snprintf(hostcol, sizeof(hostcol), "%s%s", shown[i],
			    json_is_true(json_object_get(e, "live")) ? "" : " (gone)");
			if (json_array_size(imgs) == 0)
				printf("%-20s %-*s\n", hostcol, REF_COLS, "(no image)");
			json_array_foreach(imgs, k, img)
				printf("%-20s %-*s %-19s %10s %10s %6lld\n", hostcol, REF_COLS,
				    cli_jesc_cut(img, "reference", REF_COLS),
				    cli_esc(short_digest(cli_jstr(img, "digest", NULL))),
				    fmt_bytes(b1, sizeof(b1), (uint64_t)cli_jint(img, "bytes")),
				    fmt_ago(ago, sizeof(ago), cli_jint(img, "last_used")),
				    (long long)cli_jint(img, "in_use"));
			if ((json_int_t)json_array_size(imgs) < cli_jint(e, "images_total"))
				printf("%-20s (%lld more, least recently used)\n", hostcol,
				    (long long)(cli_jint(e, "images_total") -
				    (json_int_t)json_array_size(imgs)));
			if (cli_jint(e, "image_cache_max") > 0)
				printf("%-20s cache %s of %s\n", hostcol, fmt_bytes(b1, sizeof(b1),
				    (uint64_t)cli_jint(e, "image_cache_bytes")), fmt_bytes(b2,
				    sizeof(b2), (uint64_t)cli_jint(e, "image_cache_max")));
		}
	}
	status = 0;
out:
	freeReplyObject(r);
	if (rc != NULL)
		redisFree(rc);
	json_decref(out);
	for (size_t i = 0; i < nshown; i++)
		free(shown[i]);
	free(shown);
	return status;
}

/*** Entry point ***/

static const struct {
	const char *name;
	int (*run)(const struct cli_conn *conn, int argc, char **argv);
} verbs[] = {
	{ "pull", image_pull },
	{ "ls", image_ls },
};

bool
cli_image_is_group(const char *name)
{
	return strcmp(name, "image") == 0;
}

int
cli_image_main(const struct cli_conn *conn, int argc, char **argv)
{
	int status;

	if (conn->help || argc < 2 || strcmp(argv[1], "help") == 0) {
		cli_man_print("image");
		return argc < 2 && !conn->help ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(argv[1], verbs[i].name) == 0) {
			status = verbs[i].run(conn, argc - 1, argv + 1);
			if (fflush(stdout) == EOF && status == 0)
				status = cli_fail("writing standard output: %s", strerror(errno));
			return status;
		}
	cli_warn("image: unknown verb '%s' (tag, untag, tags, pull or ls)", argv[1]);
	fputs("Try 'sandq help image'.\n", stderr);
	return 2;
}
