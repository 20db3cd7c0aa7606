"""A local folder as an AgentFS snapshot, the way `sandq sandbox create
--from DIR` builds one (cli/cli_sandbox.c, cli/gitignore.c), for
Sandbox.from_local().

The folder is walked once, top down, and made into an AgentFS 0.4 SQLite
database (docs/store.md; the schema of agentfs/agentfs.c) written with the
sqlite3 module, which sandbox.create takes as its snapshot: tens of
thousands of files go in one job instead of a files map of 1024.

What is left out is what the CLI leaves out: .git, and what the .gitignore
files say (git's rules: a deeper file beats a shallower one, the last line
wins, "!" includes again, an ignored folder hides everything below it),
plus the caller's ignore_patterns, read as lines of a .gitignore at the
root that no .gitignore of the tree can undo. Unlike the CLI, which reads
the tree and then drops what is ignored, ignored folders are pruned while
walking: never opened, never read. A folder's .gitignore is read before
its entries are looked at; git never looks below an ignored folder
either, so the result is the same.

A tree is hostile input: the walk holds a directory fd and goes down with
openat(O_NOFOLLOW) only, classifies entries with lstat, stores symlinks as
symlinks (readlink, never followed), reads a file through an O_NOFOLLOW |
O_NONBLOCK fd checked to be the regular file lstat saw, and refuses, as
the CLI's capture does, naming the path: special files (FIFO, socket,
device), names and symlink targets that are not UTF-8 without control
characters (shown hex-escaped), another file system below the folder, a
file that grows while read, and more than the workspace caps (100,000
entries, 512 MiB, 128 MiB a file, 64 folders deep). Patterns are matched
with the C library's fnmatch(3), the function the CLI calls.
"""

import ctypes
import ctypes.util
import os
import sqlite3
import stat
import tempfile
from typing import Iterable, List, Optional, Tuple, Union

from .errors import Error

GITIGNORE_FILE_MAX = 1 << 20        # bytes of one .gitignore read
GITIGNORE_LINE_MAX = 4096
GITIGNORE_RULES_MAX = 65536
MAX_ENTRIES = 100000                # WORKSPACE_LIMITS_DEFAULT
MAX_BYTES = 512 << 20
MAX_FILE_BYTES = 128 << 20
MAX_DEPTH = 64
NAME_MAX = 255
PATH_MAX = 4096
CHUNK = 4096                        # fs_config chunk_size

# agentfs/agentfs.c SCHEMA_SQL: the 0.4 layout.
SCHEMA_SQL = (
    "CREATE TABLE fs_config (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE fs_inode (ino INTEGER PRIMARY KEY AUTOINCREMENT,"
    " mode INTEGER NOT NULL, nlink INTEGER NOT NULL DEFAULT 0,"
    " uid INTEGER NOT NULL DEFAULT 0, gid INTEGER NOT NULL DEFAULT 0,"
    " size INTEGER NOT NULL DEFAULT 0, atime INTEGER NOT NULL,"
    " mtime INTEGER NOT NULL, ctime INTEGER NOT NULL,"
    " rdev INTEGER NOT NULL DEFAULT 0,"
    " atime_nsec INTEGER NOT NULL DEFAULT 0,"
    " mtime_nsec INTEGER NOT NULL DEFAULT 0,"
    " ctime_nsec INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE fs_dentry (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL, parent_ino INTEGER NOT NULL,"
    " ino INTEGER NOT NULL, UNIQUE (parent_ino, name));"
    "CREATE INDEX idx_fs_dentry_parent ON fs_dentry (parent_ino, name);"
    "CREATE TABLE fs_data (ino INTEGER NOT NULL,"
    " chunk_index INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (ino, chunk_index));"
    "CREATE TABLE fs_symlink (ino INTEGER PRIMARY KEY,"
    " target TEXT NOT NULL);"
    "CREATE TABLE kv_store (key TEXT PRIMARY KEY, value TEXT NOT NULL,"
    " created_at INTEGER DEFAULT (unixepoch()),"
    " updated_at INTEGER DEFAULT (unixepoch()));"
    "CREATE INDEX idx_kv_store_created_at ON kv_store (created_at);"
    "CREATE TABLE tool_calls (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL, parameters TEXT, result TEXT, error TEXT,"
    " status TEXT NOT NULL DEFAULT 'pending',"
    " started_at INTEGER NOT NULL, completed_at INTEGER,"
    " duration_ms INTEGER);"
    "CREATE INDEX idx_tool_calls_name ON tool_calls (name);"
    "CREATE INDEX idx_tool_calls_started_at ON tool_calls (started_at);")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_fnmatch = _libc.fnmatch
_fnmatch.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int)
_fnmatch.restype = ctypes.c_int


class LocalTreeError(Error):
    """The folder cannot be uploaded as it is: .path names the entry
    (hex-escaped when its name is not clean text)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def escape(b: bytes) -> str:
    """Every byte outside printable ASCII, and '\\', as \\xNN
    (workspace__str_escape), so a hostile name cannot forge a message."""
    return "".join(chr(c) if 0x20 <= c < 0x7f and c != 0x5c else "\\x%02x" % c
                   for c in b)


def _clean(b: bytes) -> bool:
    """UTF-8 without control characters (C0, DEL, C1)."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in s)


class _Rule:
    """One .gitignore line: its folder, components and flags."""

    __slots__ = ("base", "segs", "negate", "dir_only", "anchored")

    def __init__(self, base: bytes, segs: List[bytes], negate: bool, dir_only: bool,
                 anchored: bool) -> None:
        self.base = base
        self.segs = segs
        self.negate = negate
        self.dir_only = dir_only
        self.anchored = anchored


def _seg_match(seg: bytes, comp: bytes) -> bool:
    """fnmatch(3) of one component, flags 0, as the CLI matches it."""
    if len(comp) > GITIGNORE_LINE_MAX:
        return False
    return bool(_fnmatch(seg, comp, 0) == 0)


class GitIgnore:
    """cli/gitignore.c in Python: rules in the order added, the last that
    applies deciding, "**" matched by a table over (pattern component,
    path component) pairs so no pattern backtracks exponentially."""

    def __init__(self) -> None:
        self.rules: List[_Rule] = []

    def add(self, base: str, text: bytes) -> None:
        """Adds the lines of a .gitignore in folder base ("" for the root,
        "a/b" otherwise)."""
        b = base.strip("/").encode("utf-8")
        for line in text.split(b"\n"):
            self._line(b, line)

    def _line(self, base: bytes, s: bytes) -> None:
        """Parses one line into a rule (add_line() of gitignore.c)."""
        if s.endswith(b"\r"):
            s = s[:-1]
        if not s or s.startswith(b"#") or len(s) > GITIGNORE_LINE_MAX or b"\0" in s:
            return
        # Trailing spaces go, unless an odd number of backslashes escapes one.
        n = len(s)
        while n > 0 and s[n - 1:n] == b" ":
            bs = 0
            while bs < n - 1 and s[n - 2 - bs:n - 1 - bs] == b"\\":
                bs += 1
            if bs % 2 == 1:
                break
            n -= 1
        s = s[:n]
        negate = s.startswith(b"!")
        if negate:
            s = s[1:]
        dir_only = s.endswith(b"/")
        if dir_only:
            s = s[:-1]
        if not s:
            return
        anchored = b"/" in s
        if s.startswith(b"/"):
            s = s[1:]
            if not s:
                return
        if len(self.rules) >= GITIGNORE_RULES_MAX:
            raise Error(".gitignore in '/%s': more than %d rules in all"
                        % (escape(base), GITIGNORE_RULES_MAX))
        segs: List[bytes] = []
        for p in s.split(b"/"):
            if p and not (p == b"**" and segs and segs[-1] == b"**"):
                segs.append(p)
        if segs:
            self.rules.append(_Rule(base, segs, negate, dir_only, anchored))

    @staticmethod
    def _segs_match(r: _Rule, comps: List[bytes]) -> bool:
        """The anchored pattern r against comps, by a table over (segment,
        component)."""
        n, m = len(comps), len(r.segs)
        dp = [[False] * (n + 1) for _ in range(m + 1)]
        dp[m][n] = True
        for i in range(m - 1, -1, -1):
            star = r.segs[i] == b"**"
            for j in range(n, -1, -1):
                if star and i == m - 1:
                    v = j < n                   # trailing "**": one or more
                elif star:
                    v = dp[i + 1][j] or (j < n and dp[i][j + 1])
                else:
                    v = j < n and dp[i + 1][j + 1] and _seg_match(r.segs[i], comps[j])
                dp[i][j] = v
        return dp[0][0]

    def _rule_match(self, r: _Rule, path: bytes, is_dir: bool) -> bool:
        """Whether rule r matches path (from the root)."""
        if r.dir_only and not is_dir:
            return False
        rel = path
        if r.base:
            if not path.startswith(r.base + b"/"):
                return False
            rel = path[len(r.base) + 1:]
        if not rel:
            return False
        if not r.anchored:
            return _seg_match(r.segs[0], rel.rsplit(b"/", 1)[-1])
        return self._segs_match(r, [c for c in rel.split(b"/") if c])

    def match(self, path: bytes, is_dir: bool) -> bool:
        """Whether path itself is ignored (gitignore_match)."""
        for r in reversed(self.rules):
            if self._rule_match(r, path, is_dir):
                return not r.negate
        return False

    def is_ignored(self, path: str, is_dir: bool) -> bool:
        """Whether path ("a/b", from the root) is left out: itself, or a
        folder above it (gitignore_is_ignored)."""
        if not self.rules:
            return False
        b = path.encode("utf-8")
        parts = b.split(b"/")
        for k in range(1, len(parts)):
            if self.match(b"/".join(parts[:k]), True):
                return True
        return self.match(b, is_dir)


class _Writer:
    """The snapshot database, written row by row."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = OFF")
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute("BEGIN")
        for stmt in SCHEMA_SQL.split(";"):
            if stmt.strip():
                self.db.execute(stmt)
        self.db.execute("INSERT INTO fs_config (key, value) VALUES"
                        " ('chunk_size', ?), ('schema_version', '0.4')", (str(CHUNK),))

    def inode(self, mode: int, size: int, st: Optional[os.stat_result],
              ino: Optional[int] = None) -> int:
        """Inserts an inode (ino given only for the root) and returns its number."""
        t = st if st is not None else os.stat_result((0,) * 10)
        cur = self.db.execute(
            "INSERT INTO fs_inode (ino, mode, nlink, uid, gid, size, atime, mtime, ctime,"
            " rdev, atime_nsec, mtime_nsec, ctime_nsec)"
            " VALUES (?, ?, 1, 0, 0, ?, ?, ?, ?, 0, ?, ?, ?)",
            (ino, mode, size, int(t.st_atime), int(t.st_mtime), int(t.st_ctime),
             t.st_atime_ns % 10**9 if st else 0, t.st_mtime_ns % 10**9 if st else 0,
             t.st_ctime_ns % 10**9 if st else 0))
        return int(cur.lastrowid or 0)

    def dentry(self, parent: int, name: str, ino: int) -> None:
        """Inserts the name of ino in folder parent."""
        self.db.execute("INSERT INTO fs_dentry (name, parent_ino, ino) VALUES (?, ?, ?)",
                        (name, parent, ino))

    def data(self, ino: int, b: bytes) -> None:
        """Inserts b as CHUNK-byte BLOB chunks of ino."""
        self.db.executemany("INSERT INTO fs_data (ino, chunk_index, data) VALUES (?, ?, ?)",
                            ((ino, i // CHUNK, b[i:i + CHUNK])
                             for i in range(0, len(b), CHUNK)))

    def symlink(self, ino: int, target: str) -> None:
        """Inserts the target of symlink inode ino."""
        self.db.execute("INSERT INTO fs_symlink (ino, target) VALUES (?, ?)", (ino, target))

    def close(self) -> None:
        """Commits and closes the database."""
        self.db.execute("COMMIT")
        self.db.close()


class Walk:
    """One walk of a folder into a snapshot; snapshot_from_dir() runs it."""

    def __init__(self, extra: GitIgnore, w: _Writer) -> None:
        self.tree = GitIgnore()
        self.extra = extra
        self.w = w
        self.entries = 0
        self.bytes = 0
        self.dev = 0
        self.pruned = 0

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether rel is left out, by the caller's patterns or the tree's files."""
        return self.extra.is_ignored(rel, is_dir) or self.tree.is_ignored(rel, is_dir)

    def count(self, rel: str, size: int) -> None:
        """Counts an entry and its bytes against the workspace caps."""
        self.entries += 1
        self.bytes += size
        if self.entries > MAX_ENTRIES:
            raise LocalTreeError("%s: more than %d entries" % (rel, MAX_ENTRIES), rel)
        if self.bytes > MAX_BYTES:
            raise LocalTreeError("%s: the files pass %d bytes in all" % (rel, MAX_BYTES),
                                 rel)

    @staticmethod
    def read_file(dfd: int, name: bytes, st: os.stat_result, rel: str) -> bytes:
        """The content of the regular file name that lstat saw as st."""
        if st.st_size > MAX_FILE_BYTES:
            raise LocalTreeError("%s: %d bytes, more than the %d of one file"
                                 % (rel, st.st_size, MAX_FILE_BYTES), rel)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dfd)
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != \
                    (st.st_dev, st.st_ino):
                raise LocalTreeError("%s: changed while read" % rel, rel)
            chunks, left = [], fst.st_size + 1
            while left > 0:
                b = os.read(fd, min(left, 1 << 20))
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
            data = b"".join(chunks)
            if len(data) != fst.st_size:
                raise LocalTreeError("%s: changed while read" % rel, rel)
            return data
        finally:
            os.close(fd)

    def gitignore_of(self, dfd: int, rel_dir: str) -> None:
        """Loads the folder's .gitignore (a regular file of at most
        GITIGNORE_FILE_MAX bytes; a bigger one is not read, as the CLI)."""
        try:
            st = os.lstat(b".gitignore", dir_fd=dfd)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_size > GITIGNORE_FILE_MAX:
            return
        rel = (rel_dir + "/.gitignore").lstrip("/")
        self.tree.add(rel_dir, self.read_file(dfd, b".gitignore", st, rel))

    def walk(self, dfd: int, parent_ino: int, rel_dir: str, depth: int) -> None:
        """Adds the entries of folder dfd (rel_dir) under parent_ino, pruning what
        is ignored."""
        if depth > MAX_DEPTH:
            raise LocalTreeError("%s: more than %d folders deep" % (rel_dir, MAX_DEPTH),
                                 rel_dir)
        self.gitignore_of(dfd, rel_dir)
        for name in sorted(os.listdir(dfd)):
            bname = os.fsencode(name)
            rel = (rel_dir + "/" + name).lstrip("/") if rel_dir else name
            if not _clean(bname):
                shown = escape(os.fsencode(rel))
                raise LocalTreeError("%s: the name is not valid UTF-8 without control "
                                     "characters" % shown, shown)
            if len(bname) > NAME_MAX or len(rel.encode()) + 1 > PATH_MAX:
                raise LocalTreeError("%s: name or path too long" % rel, rel)
            st = os.lstat(bname, dir_fd=dfd)
            is_dir = stat.S_ISDIR(st.st_mode)
            if name == ".git" or self.ignored(rel, is_dir):
                self.pruned += 1
                continue
            if is_dir:
                if st.st_dev != self.dev:
                    raise LocalTreeError("%s: another file system" % rel, rel)
                self.count(rel, 0)
                ino = self.w.inode(stat.S_IFDIR | (st.st_mode & 0o777), 0, st)
                self.w.dentry(parent_ino, name, ino)
                sub = os.open(bname, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                              os.O_CLOEXEC, dir_fd=dfd)
                try:
                    if (os.fstat(sub).st_dev, os.fstat(sub).st_ino) != \
                            (st.st_dev, st.st_ino):
                        raise LocalTreeError("%s: changed while read" % rel, rel)
                    self.walk(sub, ino, rel, depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                data = self.read_file(dfd, bname, st, rel)
                self.count(rel, len(data))
                ino = self.w.inode(stat.S_IFREG | (st.st_mode & 0o777), len(data), st)
                self.w.dentry(parent_ino, name, ino)
                self.w.data(ino, data)
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(bname, dir_fd=dfd)
                if not target or not _clean(target):
                    raise LocalTreeError("%s: the symlink target is not valid UTF-8 "
                                         "without control characters" % rel, rel)
                self.count(rel, 0)
                t = target.decode("utf-8")
                ino = self.w.inode(stat.S_IFLNK | 0o777, len(target), st)
                self.w.dentry(parent_ino, name, ino)
                self.w.symlink(ino, t)
            else:
                raise LocalTreeError("%s: a special file (FIFO, socket or device) "
                                     "cannot be uploaded" % rel, rel)


def snapshot_from_dir(path: Union[str, "os.PathLike[str]"],
                      ignore_patterns: Iterable[str] = ()) -> Tuple[bytes, int, int]:
    """The AgentFS snapshot of the folder path (bytes), the entries in it
    and the entries left out at the top of what was pruned. ignore_patterns:
    .gitignore lines applied at the root, beyond the reach of the tree's
    own .gitignore files. LocalTreeError naming the entry when the tree
    cannot be uploaded as it is."""
    extra = GitIgnore()
    if isinstance(ignore_patterns, str):
        ignore_patterns = [ignore_patterns]
    extra.add("", "\n".join(ignore_patterns).encode("utf-8"))
    # The folder named may itself be a symlink the caller chose; nothing
    # below it is followed.
    dfd = os.open(os.fspath(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with tempfile.TemporaryDirectory(prefix="sandq-local-") as tmp:
        db = os.path.join(tmp, "snapshot.db")
        w = _Writer(db)
        try:
            root = os.fstat(dfd)
            w.inode(stat.S_IFDIR | 0o755, 0, root, ino=1)
            walk = Walk(extra, w)
            walk.dev = root.st_dev
            walk.walk(dfd, 1, "", 1)
        finally:
            os.close(dfd)
            w.close()
        with open(db, "rb") as f:
            return f.read(), walk.entries, walk.pruned
