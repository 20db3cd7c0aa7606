/*
 * db.c - the local audit database: one SQLite file per host, append-only.
 *
 * One table, events, with a column per field of the model (category and
 * level as their names' order: category TEXT, level INTEGER 0..3, so a
 * minimum level is a comparison), and indexes for the filters `sandq
 * audit` offers: time, (tenant, time), (job, time), (sandbox, time).
 *
 * DESIGN
 * Append-only is kept by the API and by the file. The API has no update
 * and no delete but audit_db_retain(). The file refuses an UPDATE of an
 * event with a trigger (RAISE ABORT), and a DELETE unless the one-row
 * table retention says it is open, which only audit_db_retain() does,
 * inside the transaction that deletes: no other connection ever sees it
 * open, and a ROLLBACK closes it again. ids are AUTOINCREMENT, so they are
 * never reused and a gap the retention did not make is visible. This
 * stops mistakes and a casual `sqlite3 audit.db "DELETE ..."`; whoever
 * can write the file can rewrite it whole, which is why it is 0600 and
 * why the dispatcher also streams every event to Redis.
 *
 * Retention first deletes by age (time_ms below now - max_age), then by
 * size: the bytes of the pages in use, (page_count - freelist_count) *
 * page_size, against 90% of max_bytes, so a database at its bound does
 * not delete on every run. Rows are removed oldest first in rounds sized
 * from the average row (pages in use / rows, rows estimated from the
 * rowid range, which costs two B-tree lookups instead of a count of the
 * table), re-measuring after each round. The file is created with
 * auto_vacuum=INCREMENTAL so `PRAGMA incremental_vacuum` then gives the
 * freed pages back; the WAL beside it is bounded by journal_size_limit
 * after each checkpoint.
 *
 * Every SQL text is constant fragments with bound parameters; rows read
 * back are length-checked and go through audit_event_check(), so a
 * damaged or hand-edited row is -EBADMSG naming its id, never an overflow.
 *
 * Sections: opening, appending, retention, queries.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/sql.h"
#include "../common/xmalloc.h"
#include "audit.h"

#define AUDIT_SCHEMA_VERSION 1
#define AUDIT_BUSY_MS 2000		/* wait for another writer's lock */
#define RETAIN_CHUNK 10000		/* rows deleted per transaction */
#define RETAIN_ROUNDS 64		/* size rounds before giving up */

struct audit_db {
	sqlite3 *db;
	bool readonly;
};

static const char SCHEMA_SQL[] =
	"CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" time_ms INTEGER NOT NULL, host TEXT NOT NULL, tenant TEXT NOT NULL,"
	" job TEXT NOT NULL, sandbox TEXT NOT NULL, category TEXT NOT NULL,"
	" action TEXT NOT NULL, target TEXT NOT NULL,"
	" allowed INTEGER NOT NULL CHECK (allowed IN (0, 1)),"
	" level INTEGER NOT NULL CHECK (level BETWEEN 0 AND 3),"
	" detail TEXT NOT NULL);"
	"CREATE INDEX events_time ON events (time_ms);"
	"CREATE INDEX events_tenant ON events (tenant, time_ms);"
	"CREATE INDEX events_job ON events (job, time_ms);"
	"CREATE INDEX events_sandbox ON events (sandbox, time_ms);"
	"CREATE TABLE retention (id INTEGER PRIMARY KEY CHECK (id = 1),"
	" open INTEGER NOT NULL);"
	"INSERT INTO retention (id, open) VALUES (1, 0);"
	"CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN"
	" SELECT RAISE(ABORT, 'audit events are append-only'); END;"
	"CREATE TRIGGER events_no_delete BEFORE DELETE ON events"
	" WHEN (SELECT open FROM retention WHERE id = 1) IS NOT 1 BEGIN"
	" SELECT RAISE(ABORT, 'audit events leave only by retention'); END;"
	"PRAGMA user_version = 1;";

#define EVENT_COLUMNS \
	"time_ms, host, tenant, job, sandbox, category, action, target," \
	" allowed, level, detail"

/*** Opening ***/

/*
 * Creates the schema in a new file, or checks an existing one's version.
 * auto_vacuum must be chosen before the first table exists.
 */
static int
schema_ensure(struct audit_db *db, struct err *e)
{
	int64_t version = -1;
	int rc;

	if ((rc = sql_begin(db->db, "audit db", e)) != 0)
		return rc;
	rc = sql_query_i64(db->db, "PRAGMA user_version", &version, "audit db",
	    NULL, e);
	if (rc == 0 && version == 0)
		rc = sql_exec(db->db, SCHEMA_SQL, "audit db", "schema", e);
	else if (rc == 0 && version != AUDIT_SCHEMA_VERSION)
		rc = err_set(e, -EPROTONOSUPPORT, "audit db: schema version %lld, "
		    "this build knows %d", (long long)version, AUDIT_SCHEMA_VERSION);
	return sql_tx_end(db->db, rc, "audit db", e);
}

int
audit_db_open(const char *path, struct audit_db **out, struct err *e)
{
	struct audit_db *db = NULL;
	int fd, rc;

	err_clear(e);
	*out = NULL;
	/*
	 * Create the file ourselves so it is 0600 whatever the umask (SQLite
	 * gives -wal and -shm the database's mode), and refuse a symlink.
	 */
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, -errno, "audit db: open %s: %s", path,
		    strerror(errno));
	close(fd);
	db = xcalloc(1, sizeof(*db));
	rc = sqlite3_open_v2(path, &db->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		rc = sql_fail(e, db->db, rc, "audit db", path);
		goto out_close;
	}
	sqlite3_busy_timeout(db->db, AUDIT_BUSY_MS);
	sqlite3_db_config(db->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	/* A no-op on a file that has tables; it must precede the first one. */
	if ((rc = sql_exec(db->db, "PRAGMA auto_vacuum = INCREMENTAL",
	    "audit db", "auto_vacuum", e)) != 0 ||
	    (rc = sql_wal_enable(db->db, AUDIT_BUSY_MS, "audit db", e)) != 0 ||
	    (rc = sql_exec(db->db, "PRAGMA synchronous = NORMAL", "audit db",
	    "synchronous", e)) != 0 ||
	    /* The WAL is cut back to 4 MiB after each checkpoint. */
	    (rc = sql_exec(db->db, "PRAGMA journal_size_limit = 4194304",
	    "audit db", "journal_size_limit", e)) != 0 ||
	    (rc = schema_ensure(db, e)) != 0)
		goto out_close;
	*out = db;
	return 0;

out_close:
	audit_db_close(db);
	return rc;
}

int
audit_db_open_readonly(const char *path, struct audit_db **out, struct err *e)
{
	struct audit_db *db = NULL;
	int64_t version = -1;
	int rc;

	err_clear(e);
	*out = NULL;
	if (access(path, F_OK) != 0)
		return err_set(e, -errno, "audit db: %s: %s", path, strerror(errno));
	db = xcalloc(1, sizeof(*db));
	db->readonly = true;
	rc = sqlite3_open_v2(path, &db->db, SQLITE_OPEN_READONLY |
	    SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		rc = sql_fail(e, db->db, rc, "audit db", path);
		goto out_close;
	}
	sqlite3_busy_timeout(db->db, AUDIT_BUSY_MS);
	if ((rc = sql_query_i64(db->db, "PRAGMA user_version", &version,
	    "audit db", NULL, e)) != 0)
		goto out_close;
	if (version != AUDIT_SCHEMA_VERSION) {
		rc = err_set(e, -EPROTO, "audit db: %s: not an audit database "
		    "(schema version %lld)", path, (long long)version);
		goto out_close;
	}
	*out = db;
	return 0;

out_close:
	audit_db_close(db);
	return rc;
}

void
audit_db_close(struct audit_db *db)
{
	if (db == NULL)
		return;
	sqlite3_close_v2(db->db);
	free(db);
}

/*** Appending ***/

/* Binds ev to the INSERT's parameters, in EVENT_COLUMNS order. */
static int
bind_event(sqlite3_stmt *stmt, const struct audit_event *ev, struct err *e)
{
	static const char who[] = "audit db";
	int rc;

	if ((rc = sql_bind_i64(stmt, 1, ev->time_ms, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 2, ev->host, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 3, ev->tenant, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 4, ev->job, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 5, ev->sandbox, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 6, audit_category_name(ev->category), who,
	    e)) != 0 ||
	    (rc = sql_bind_text(stmt, 7, ev->action, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 8, ev->target, who, e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 9, ev->allowed ? 1 : 0, who, e)) != 0 ||
	    (rc = sql_bind_i64(stmt, 10, (int64_t)ev->level, who, e)) != 0 ||
	    (rc = sql_bind_text(stmt, 11, ev->detail, who, e)) != 0)
		return rc;
	return 0;
}

int
audit_db_append(struct audit_db *db, const struct audit_event *evs, size_t n,
    struct err *e)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	if (db->readonly)
		return err_set(e, -EROFS, "audit db: opened read-only");
	for (size_t i = 0; i < n; i++) {
		struct err fe = { 0 };

		if (audit_event_check(&evs[i], &fe) != 0)
			return err_set(e, -EINVAL, "audit db: event %zu: %s", i, fe.msg);
	}
	if (n == 0)
		return 0;
	if ((rc = sql_begin(db->db, "audit db", e)) != 0)
		return rc;
	if ((rc = sql_prepare(db->db, "INSERT INTO events (" EVENT_COLUMNS ")"
	    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", &stmt, "audit db",
	    e)) != 0)
		return sql_tx_end(db->db, rc, "audit db", e);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if ((rc = bind_event(stmt, &evs[i], e)) == 0)
			rc = sql_step_reset(stmt, "audit db", "insert", e);
	}
	sqlite3_finalize(stmt);
	return sql_tx_end(db->db, rc, "audit db", e);
}

/*** Retention ***/

int
audit_db_size(struct audit_db *db, uint64_t *bytes, struct err *e)
{
	int64_t pages, free_pages, page_size;
	int rc;

	if ((rc = sql_query_i64(db->db, "PRAGMA page_count", &pages,
	    "audit db", NULL, e)) != 0 ||
	    (rc = sql_query_i64(db->db, "PRAGMA freelist_count", &free_pages,
	    "audit db", NULL, e)) != 0 ||
	    (rc = sql_query_i64(db->db, "PRAGMA page_size", &page_size,
	    "audit db", NULL, e)) != 0)
		return rc;
	*bytes = (uint64_t)(pages - free_pages) * (uint64_t)page_size;
	return 0;
}

/*
 * Deletes, in one transaction with the retention flag open, up to limit
 * rows chosen by sel (a SELECT of ids taking ?1 and ?2). *n gets the count.
 */
static int
retain_delete(struct audit_db *db, const char *sel, int64_t a1, int64_t a2,
    uint64_t *n, struct err *e)
{
	char sql[256];
	sqlite3_stmt *stmt = NULL;
	int rc, src;

	snprintf(sql, sizeof(sql), "DELETE FROM events WHERE id IN (%s)", sel);
	*n = 0;
	if ((rc = sql_begin(db->db, "audit db", e)) != 0)
		return rc;
	if ((rc = sql_exec(db->db, "UPDATE retention SET open = 1"
	    " WHERE id = 1", "audit db", "retention", e)) != 0 ||
	    (rc = sql_prepare(db->db, sql, &stmt, "audit db", e)) != 0)
		return sql_tx_end(db->db, rc, "audit db", e);
	sqlite3_bind_int64(stmt, 1, a1);
	sqlite3_bind_int64(stmt, 2, a2);
	if ((src = sqlite3_step(stmt)) != SQLITE_DONE)
		rc = sql_fail(e, db->db, src, "audit db", "retention delete");
	else
		*n = (uint64_t)sqlite3_changes(db->db);
	sqlite3_finalize(stmt);
	if (rc == 0)
		rc = sql_exec(db->db, "UPDATE retention SET open = 0"
		    " WHERE id = 1", "audit db", "retention", e);
	return sql_tx_end(db->db, rc, "audit db", e);
}

int
audit_db_retain(struct audit_db *db, int64_t max_age_ms, uint64_t max_bytes,
    uint64_t *deleted, struct err *e)
{
	uint64_t total = 0, n;
	int rc;

	if (deleted != NULL)
		*deleted = 0;
	if (db->readonly)
		return err_set(e, -EROFS, "audit db: opened read-only");
	if (max_age_ms > 0) {
		struct timespec ts;
		int64_t now, cutoff;

		clock_gettime(CLOCK_REALTIME, &ts);
		now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
		cutoff = now - max_age_ms;
		do {
			if ((rc = retain_delete(db, "SELECT id FROM events WHERE "
			    "time_ms < ?1 ORDER BY time_ms LIMIT ?2", cutoff,
			    RETAIN_CHUNK, &n, e)) != 0)
				return rc;
			total += n;
		} while (n == RETAIN_CHUNK);
	}
	for (int round = 0; max_bytes > 0 && round < RETAIN_ROUNDS; round++) {
		uint64_t used, target = max_bytes / 10 * 9, per_row, want;
		int64_t lo = 0, hi = 0;

		if ((rc = audit_db_size(db, &used, e)) != 0)
			return rc;
		if (used <= max_bytes && round == 0)
			break;
		if (used <= target)
			break;
		if ((rc = sql_query_i64(db->db, "SELECT coalesce(min(id), 0) "
		    "FROM events", &lo, "audit db", NULL, e)) != 0 ||
		    (rc = sql_query_i64(db->db, "SELECT coalesce(max(id), 0) "
		    "FROM events", &hi, "audit db", NULL, e)) != 0)
			return rc;
		if (hi == 0)
			break;		/* empty: the schema alone is past the bound */
		per_row = used / (uint64_t)(hi - lo + 1);
		if (per_row == 0)
			per_row = 1;
		want = (used - target + per_row - 1) / per_row;
		if (want > RETAIN_CHUNK)
			want = RETAIN_CHUNK;
		if ((rc = retain_delete(db, "SELECT id FROM events ORDER BY id "
		    "LIMIT ?2", 0, (int64_t)want, &n, e)) != 0)
			return rc;
		total += n;
		if (n == 0)
			break;
	}
	if (total > 0) {
		/* Give the freed pages back, then fold the WAL into the file. */
		if ((rc = sql_exec(db->db, "PRAGMA incremental_vacuum",
		    "audit db", "incremental_vacuum", e)) != 0)
			return rc;
		sqlite3_wal_checkpoint_v2(db->db, NULL, SQLITE_CHECKPOINT_PASSIVE,
		    NULL, NULL);
	}
	if (deleted != NULL)
		*deleted = total;
	return 0;
}

/*** Queries ***/

/* A WHERE clause built from constant fragments, and what to bind. */
struct where {
	char sql[512];
	size_t len;
	int nbind;
	struct {
		bool is_text;
		const char *text;
		int64_t i;
	} bind[8 + AUDIT_CAT__COUNT];
};

static void
where_add(struct where *w, const char *frag)
{
	size_t n = strlen(frag);

	/* The fragments are constant and few: the buffer holds them all. */
	if (w->len + n + 1 > sizeof(w->sql))
		abort();
	memcpy(w->sql + w->len, frag, n + 1);
	w->len += n;
}

static void
where_text(struct where *w, const char *frag, const char *v)
{
	where_add(w, frag);
	w->bind[w->nbind].is_text = true;
	w->bind[w->nbind++].text = v;
}

static void
where_int(struct where *w, const char *frag, int64_t v)
{
	where_add(w, frag);
	w->bind[w->nbind].is_text = false;
	w->bind[w->nbind++].i = v;
}

static void
where_build(struct where *w, const struct audit_filter *f)
{
	memset(w, 0, sizeof(*w));
	where_add(w, " WHERE 1");
	if (f->tenant != NULL)
		where_text(w, " AND tenant = ?", f->tenant);
	if (f->job != NULL)
		where_text(w, " AND job = ?", f->job);
	if (f->sandbox != NULL)
		where_text(w, " AND sandbox = ?", f->sandbox);
	if (f->categories != 0) {
		bool first = true;

		where_add(w, " AND category IN (");
		for (unsigned c = 0; c < AUDIT_CAT__COUNT; c++) {
			if ((f->categories & (1u << c)) == 0)
				continue;
			where_text(w, first ? "?" : ", ?",
			    audit_category_name((enum audit_category)c));
			first = false;
		}
		where_add(w, ")");
	}
	if (f->level_min > AUDIT_LVL_INFO)
		where_int(w, " AND level >= ?", (int64_t)f->level_min);
	if (f->outcome != AUDIT_ANY)
		where_int(w, " AND allowed = ?", f->outcome == AUDIT_ALLOWED_ONLY);
	if (f->since_ms > 0)
		where_int(w, " AND time_ms >= ?", f->since_ms);
	if (f->until_ms > 0)
		where_int(w, " AND time_ms < ?", f->until_ms);
}

static int
where_prepare(struct audit_db *db, const char *head, const struct where *w,
    const char *tail, sqlite3_stmt **stmt, struct err *e)
{
	char sql[1024];
	int rc;

	snprintf(sql, sizeof(sql), "%s%s%s", head, w->sql, tail);
	if ((rc = sql_prepare(db->db, sql, stmt, "audit db", e)) != 0)
		return rc;
	for (int i = 0; i < w->nbind; i++) {
		if (w->bind[i].is_text)
			rc = sql_bind_text(*stmt, i + 1, w->bind[i].text,
			    "audit db", e);
		else
			rc = sql_bind_i64(*stmt, i + 1, w->bind[i].i,
			    "audit db", e);
		if (rc != 0) {
			sqlite3_finalize(*stmt);
			*stmt = NULL;
			return rc;
		}
	}
	return 0;
}

/* Reads the event of the current row (EVENT_COLUMNS, then id). */
static int
row_event(sqlite3_stmt *stmt, struct audit_event *ev, struct err *e)
{
	char cat[16];
	int64_t id = sqlite3_column_int64(stmt, 11), level;
	struct err fe = { 0 };

	memset(ev, 0, sizeof(*ev));
	ev->time_ms = sqlite3_column_int64(stmt, 0);
	level = sqlite3_column_int64(stmt, 9);
	if (!sql_col_text(stmt, 1, ev->host, sizeof(ev->host)) ||
	    !sql_col_text(stmt, 2, ev->tenant, sizeof(ev->tenant)) ||
	    !sql_col_text(stmt, 3, ev->job, sizeof(ev->job)) ||
	    !sql_col_text(stmt, 4, ev->sandbox, sizeof(ev->sandbox)) ||
	    !sql_col_text(stmt, 5, cat, sizeof(cat)) ||
	    !sql_col_text(stmt, 6, ev->action, sizeof(ev->action)) ||
	    !sql_col_text(stmt, 7, ev->target, sizeof(ev->target)) ||
	    !sql_col_text(stmt, 10, ev->detail, sizeof(ev->detail)))
		return err_set(e, -EBADMSG, "audit db: event %lld: a field is "
		    "missing or too long", (long long)id);
	if (audit_category_parse(cat, &ev->category) != 0)
		return err_set(e, -EBADMSG, "audit db: event %lld: category: "
		    "'%.15s' is not a category", (long long)id, cat);
	if (level < 0 || level >= AUDIT_LVL__COUNT)
		return err_set(e, -EBADMSG, "audit db: event %lld: level: %lld",
		    (long long)id, (long long)level);
	ev->level = (enum audit_level)level;
	ev->allowed = sqlite3_column_int64(stmt, 8) != 0;
	if (audit_event_check(ev, &fe) != 0)
		return err_set(e, -EBADMSG, "audit db: event %lld: %s",
		    (long long)id, fe.msg);
	return 0;
}

int
audit_db_query(struct audit_db *db, const struct audit_filter *f,
    audit_event_cb cb, void *arg, struct err *e)
{
	struct where w;
	struct audit_event *ev;
	sqlite3_stmt *stmt = NULL;
	int rc, src;

	where_build(&w, f);
	if ((rc = where_prepare(db, "SELECT " EVENT_COLUMNS ", id FROM events",
	    &w, " ORDER BY time_ms, id", &stmt, e)) != 0)
		return rc;
	ev = xmalloc(sizeof(*ev));
	while ((src = sqlite3_step(stmt)) == SQLITE_ROW) {
		if ((rc = row_event(stmt, ev, e)) != 0 || (rc = cb(ev, arg)) != 0)
			break;
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = sql_fail(e, db->db, src, "audit db", "query");
	free(ev);
	sqlite3_finalize(stmt);
	return rc;
}

int
audit_db_summary(struct audit_db *db, const struct audit_filter *f,
    audit_count_cb cb, void *arg, struct err *e)
{
	struct where w;
	struct audit_count c;
	sqlite3_stmt *stmt = NULL;
	int rc, src;
	char cat[16];

	where_build(&w, f);
	if ((rc = where_prepare(db, "SELECT category, action, allowed, count(*)"
	    " FROM events", &w, " GROUP BY category, action, allowed"
	    " ORDER BY category, action, allowed", &stmt, e)) != 0)
		return rc;
	while ((src = sqlite3_step(stmt)) == SQLITE_ROW) {
		memset(&c, 0, sizeof(c));
		if (!sql_col_text(stmt, 0, cat, sizeof(cat)) ||
		    audit_category_parse(cat, &c.category) != 0 ||
		    !sql_col_text(stmt, 1, c.action, sizeof(c.action))) {
			rc = err_set(e, -EBADMSG, "audit db: a category or action "
			    "is not one of the model's");
			break;
		}
		c.allowed = sqlite3_column_int64(stmt, 2) != 0;
		c.count = (uint64_t)sqlite3_column_int64(stmt, 3);
		if ((rc = cb(&c, arg)) != 0)
			break;
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = sql_fail(e, db->db, src, "audit db", "summary");
	sqlite3_finalize(stmt);
	return rc;
}
