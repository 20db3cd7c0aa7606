"""Batch runs with expected outputs, progress and resume: `sandq batch run`
from Python (cli/cli_batch.c, docs/operations.md "Batch runs").

A batch is a list of cases, each a job as a JSON object (the lines of a
CASES.jsonl file, or dicts) with an optional expect and expect_mode. Ids
are the CLI's, so a run can be resumed and watched: the batch's is given
or the first 16 hex digits of the SHA-256 of its JSONL text, case N (its
line number, blank lines skipped) is the job batch:BATCH:N, and running
the batch again skips every case whose result Redis still holds (a
`cancelled` one runs again, its result deleted first). Progress goes to
the hash sandq:{T}:batch:ID (the fields `sandq batch status ID` reads),
to a bar on stderr when it is a terminal, or to a callback.

DESIGN. The expect is judged by the server, not here: a case with expect
is sent as a run with cases=[{stdin, expect, expect_mode}] (docs/protocol.md
"Cases"), the worker compares the output, and the one case's outcome is
what the batch reports (unwrapped: its status, exit code and output). So
a regex means what it means to sandqd, whatever Python's re would say.
The price: a case with expect cannot persist or stream (cases never
commit), and sandqd refuses such a line by name (status rejected), where
the CLI would run it.

One thread, one BLPOP on the done lists of every case in flight at a time
(POLL_S at most, so the bar and Ctrl-C are served), and after STALL_S
without an answer a GET of each one's result, as the CLI does. With base,
each case runs on a fork of base named batch:BATCH:N, made just before its
run and deleted after (three jobs, as the CLI). Ctrl-C cancels the cases
no host has read (the cancel script), waits up to GRACE_S for the others,
writes the hash as interrupted and raises KeyboardInterrupt again.
"""

import hashlib
import json
import os
import secrets
import socket
import sys
import time
from typing import (Any, Callable, Dict, Iterable, List, Optional, Set, TextIO,
                    Tuple, Union)

import msgpack
import redis

from . import admin, errors
from .result import Result

POLL_S = 0.1
STALL_S = 5.0
GRACE_S = 5.0
BAR_S = 0.1
HASH_S = 0.5
HASH_TTL_MS = 7 * 86400 * 1000
CONCURRENCY_DEFAULT = 16
CONCURRENCY_MAX = 1024
LINE_MAX = 64 * 1024 * 1024     # BATCH_CASE_LINE_MAX
SLOWEST = 5
FAILED_LISTED = 100
BAR_COLS = 24
EXPECT_MODES = ("exact", "trim", "regex")


class BatchCase:
    """One case's outcome: line (its number), id (batch:BATCH:LINE),
    status ("ok", "exit", ..., or "malformed"), passed (True/False for a
    case with expect, None without), result (its Result; for a case with
    expect, the one case's outcome in a Result's shape), resumed (answered
    by an earlier run), error (why a malformed line is)."""

    __slots__ = ("line", "id", "status", "passed", "result", "resumed", "error",
                 "wall_ms")

    def __init__(self, line: int, id: str, status: str, passed: Optional[bool],
                 result: Optional[Result], resumed: bool,
                 error: Optional[str] = None) -> None:
        self.line = line
        self.id = id
        self.status = status
        self.passed = passed
        self.result = result
        self.resumed = resumed
        self.error = error
        self.wall_ms = result.wall_ms if result is not None else 0

    def __repr__(self) -> str:
        return "<sandq.BatchCase %d %s passed=%s>" % (self.line, self.status, self.passed)


class BatchProgress:
    """Where a batch stands: batch (its id), total, done, resumed, passed,
    failed, no_expect, not_ok, malformed, running (cases in flight),
    elapsed_s and rate (cases run per second by this run)."""

    __slots__ = ("batch", "total", "done", "resumed", "passed", "failed", "no_expect",
                 "not_ok", "malformed", "running", "elapsed_s", "rate")

    def __init__(self, *, batch: str, total: int, done: int, resumed: int,
                 passed: int, failed: int, no_expect: int, not_ok: int,
                 malformed: int, running: int, elapsed_s: float, rate: float) -> None:
        self.batch = batch
        self.total = total
        self.done = done
        self.resumed = resumed
        self.passed = passed
        self.failed = failed
        self.no_expect = no_expect
        self.not_ok = not_ok
        self.malformed = malformed
        self.running = running
        self.elapsed_s = elapsed_s
        self.rate = rate

    @property
    def bad(self) -> int:
        """Cases that count against the batch so far."""
        return int(self.failed + self.malformed + self.not_ok)

    def __repr__(self) -> str:
        return "<sandq.BatchProgress %s %d/%d failed=%d>" % (
            self.batch, self.done, self.total, self.bad)


class BatchSummary:
    """The end of a batch run: the CLI's summary (`sandq batch run --json`)
    as attributes and as_dict(), and cases (every answered BatchCase, in
    line order). ok is True when every case passed or, without expect,
    ended ok."""

    def __init__(self, d: Dict[str, Any], cases: List[BatchCase]) -> None:
        self._d = d
        self.cases = cases

    def __getattr__(self, name: str) -> Any:
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def ok(self) -> bool:
        """True when every case passed or, without expect, ended ok."""
        d = self._d
        return bool(d["failed"] + d["malformed"] + d["not_ok"] == 0 and
                    d["done"] == d["total"])

    def as_dict(self) -> Dict[str, Any]:
        """The summary as `sandq batch run --json` prints it."""
        return dict(self._d)

    def __repr__(self) -> str:
        return "<sandq.BatchSummary %s %d/%d passed=%d failed=%d>" % (
            self._d["batch"], self._d["done"], self._d["total"], self._d["passed"],
            self._d["failed"])


def _no_dups(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    """json's object_pairs_hook refusing a key given twice (JSON_REJECT_DUPLICATES)."""
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError("field %r given twice" % k)
        out[k] = v
    return out


def load_cases(cases: Union[str, "os.PathLike[str]", Iterable[Any]]
               ) -> Tuple[List[Tuple[int, str]], bytes, str]:
    """The cases as (line number, JSON text) and the JSONL bytes they hash
    to, and a label for the hash's file field: a path is read as the CLI
    reads CASES (blank lines skipped but counted); an iterable of dicts
    (or JSON texts) is numbered from 1, each a line of compact JSON."""
    if isinstance(cases, (str, os.PathLike)):
        path = os.fspath(cases)
        with open(path, "rb") as f:
            data = f.read()
        label = path
    else:
        lines = []
        for c in cases:
            if isinstance(c, str):
                lines.append(c)
            else:
                try:
                    lines.append(json.dumps(c, ensure_ascii=False, separators=(",", ":")))
                except (TypeError, ValueError) as why:
                    raise errors.InvalidJob("batch case %d: not JSON: %s"
                                            % (len(lines) + 1, why)) from None
        data = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
        label = "<python>"
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if raw.strip(b" \t\r"):
            out.append((n, raw.decode("utf-8", "surrogateescape")))
    return out, data, label


def parse_case(text: str, case_id: str, fork: Optional[str]
               ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """The job of one case line and its expect ({expect, expect_mode}) or
    None, as batchcase_parse() checks it; ValueError saying why a line is
    malformed."""
    if len(text.encode("utf-8", "surrogateescape")) > LINE_MAX:
        raise ValueError("longer than %d bytes" % LINE_MAX)
    try:
        o = json.loads(text, object_pairs_hook=_no_dups)
    except ValueError as e:
        raise ValueError("not JSON: %s" % e) from None
    if not isinstance(o, dict):
        raise ValueError("expected a JSON object (a job)")
    if "id" in o:
        raise ValueError("field 'id': set by the batch (%s)" % case_id)
    if fork is not None and "sandbox" in o:
        raise ValueError("field 'sandbox': not with base (each case runs on its "
                         "own fork)")
    want, m = o.pop("expect", None), o.pop("expect_mode", None)
    if want is not None and not isinstance(want, str):
        raise ValueError("field 'expect': expected a string")
    if m is not None and (want is None or not isinstance(m, str)):
        raise ValueError("field 'expect_mode': %s" % (
            "needs 'expect'" if want is None else "expected exact, trim or regex"))
    if m is not None and m not in EXPECT_MODES:
        raise ValueError("field 'expect_mode': expected exact, trim or regex, not %r"
                         % m[:32])
    o["id"] = case_id
    if fork is not None:
        o["sandbox"] = fork
    if want is None:
        return o, None
    case: Dict[str, Any] = {"expect": want, "expect_mode": m or "exact"}
    # The server judges: one case, the line's stdin its stdin.
    if "stdin" in o:
        case["stdin"] = o.pop("stdin")
    o["cases"] = [case]
    return o, case


def unwrap(r: Result, expect: Optional[Dict[str, Any]]) -> Tuple[Result, Optional[bool]]:
    """A case's outcome: without expect, its result; with, the one case of
    its cases run in a Result's shape, and whether it passed (False when
    the run itself did not end ok)."""
    if expect is None:
        return r, None
    cs = r.cases
    if r.status != "ok" or len(cs) != 1:
        return r, False
    c = cs[0]
    raw = dict(r.raw)
    raw.pop("data", None)
    raw.update(status=c.status, exit_code=c.exit_code, signal=c.signal,
               stdout=c.stdout_bytes, stderr=c.stderr_bytes,
               stdout_truncated=c.stdout_truncated, stderr_truncated=c.stderr_truncated,
               wall_ms=c.wall_ms, cpu_ms=c.cpu_ms)
    if c.error is not None:
        raw["error"] = {"code": c.status, "message": c.error}
    else:
        raw.pop("error", None)
    return Result(raw), bool(c.passed) and c.status == "ok"


class _Flight:
    """A case in flight: which of its jobs (fork, run, delete) it waits for."""

    __slots__ = ("line", "id", "job", "expect", "step", "jid")

    def __init__(self, line: int, cid: str, job: Dict[str, Any],
                 expect: Optional[Dict[str, Any]]) -> None:
        self.line = line
        self.id = cid
        self.job = job
        self.expect = expect
        self.step = "run"
        self.jid = cid


def _fmt_eta(s: float) -> str:
    """Seconds as the bar's ETA: 42s, 3m05s, 2h10m; ? when unknown."""
    if s < 0:
        return "?"
    s = int(s + 0.5)
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, s % 3600 // 60)


class BatchRun:
    """One run of a batch; Client.batch_run() makes and runs it."""

    def __init__(self, client: Any, cases: Any, batch_id: Optional[str],
                 concurrency: int, base: Optional[str], progress: Any,
                 on_result: Optional[Callable[[BatchCase], None]]) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or \
                not 1 <= concurrency <= CONCURRENCY_MAX:
            raise errors.InvalidJob("concurrency: expected 1..%d" % CONCURRENCY_MAX)
        self.c = client
        self.r = client.redis
        self.lines, data, self.label = load_cases(cases)
        self.id = batch_id or hashlib.sha256(data).hexdigest()[:16]
        # batch:ID:LINE:delete:XXXXXXXX must still be a job id.
        if not isinstance(self.id, str) or not 1 <= len(self.id) <= 64 or \
                any(ch not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                    "0123456789._-" for ch in self.id):
            raise errors.InvalidJob("batch id %r: expected 1..64 of [A-Za-z0-9._-]"
                                    % (self.id,))
        self.base = base
        self.concurrency = concurrency
        self.on_result = on_result
        self.callback: Optional[Callable[[BatchProgress], None]] = None
        self.bar: Optional[TextIO] = None
        if callable(progress):
            self.callback = progress
        elif progress is True or (progress is None and sys.stderr is not None and
                                  sys.stderr.isatty()):
            self.bar = sys.stderr
        self.hash_key = client.key("batch", self.id)
        self.done_cases: Dict[int, BatchCase] = {}
        self.stale: Set[int] = set()
        self.by_status: Dict[str, int] = {}
        self.n = dict(done=0, resumed=0, ran=0, passed=0, failed=0, no_expect=0,
                      not_ok=0, malformed=0, cancelled=0)
        self.flights: Dict[str, _Flight] = {}    # done key -> flight
        self.stopping = False
        self.t0 = time.monotonic()
        self.started_at = int(time.time() * 1000)
        self.hash_at = self.drawn_at = 0.0
        self.bar_shown = False

    def cid(self, line: int) -> str:
        """Case line's job id, batch:BATCH:LINE."""
        return "batch:%s:%d" % (self.id, line)

    ### Counting

    def tally(self, bc: BatchCase) -> None:
        """Counts an answered case (cli_batch.c's tally()) and tells on_result."""
        self.done_cases[bc.line] = bc
        self.by_status[bc.status] = self.by_status.get(bc.status, 0) + 1
        n = self.n
        n["done"] += 1
        n["resumed" if bc.resumed else "ran"] += 1
        if bc.status == "malformed":
            n["malformed"] += 1
        elif bc.passed is True:
            n["passed"] += 1
        elif bc.passed is False:
            n["failed"] += 1
        else:
            n["no_expect"] += 1
            if bc.status != "ok":
                n["not_ok"] += 1
        if self.on_result is not None:
            self.on_result(bc)

    def record(self, line: int, r: Result, expect: Optional[Dict[str, Any]],
               resumed: bool) -> None:
        """Counts case line's result r, judged by the server when it had expect."""
        shown, passed = unwrap(r, expect)
        self.tally(BatchCase(line, self.cid(line), shown.status, passed, shown, resumed))

    def malformed(self, line: int, why: str) -> None:
        """Counts a line that is not a case, with why."""
        self.tally(BatchCase(line, self.cid(line), "malformed", None, None, False, why))

    ### Redis

    def submit(self, job: Dict[str, Any]) -> None:
        """Adds job (a dict, packed as msgpack as it is) to the tenant's stream."""
        try:
            self.r.xadd(self.c.key("jobs"), {"job": msgpack.packb(job, use_bin_type=True)})
        except redis.exceptions.RedisError as e:
            raise errors.ConnectionError("redis: %s" % e) from None

    def resume(self, parsed: Dict[int, Any]) -> None:
        """Counts the cases Redis already holds a result of."""
        lines = [ln for ln, _ in self.lines]
        for i in range(0, len(lines), 128):
            chunk = lines[i:i + 128]
            bufs = self.c._read(self.r.mget, [self.c.key("res", self.cid(ln))
                                              for ln in chunk])
            for ln, buf in zip(chunk, bufs):
                if buf is None:
                    continue
                res = Result.decode(buf)
                if res.status == "cancelled":
                    self.stale.add(ln)
                elif isinstance(parsed[ln], str):
                    self.malformed(ln, parsed[ln])
                else:
                    self.record(ln, res, parsed[ln][1], True)

    def prepare_base(self) -> None:
        """Checks that base exists and deletes the forks an interrupted run
        of this batch left (batch:BATCH:N)."""
        pre = "batch:%s:" % self.id
        found = False
        for info in self.c.sandboxes():
            name = info.get("sandbox", "")
            if name == self.base:
                found = True
            if name.startswith(pre) and name[len(pre):].isdigit():
                try:
                    self.c.call("sandbox.delete", sandbox=name)
                except errors.SandboxNotFound:
                    pass
        if not found:
            raise errors.SandboxNotFound("base %s: no such sandbox for tenant %s"
                                         % (self.base, self.c.tenant))

    def hash_update(self, state: str, summary: Optional[Dict[str, Any]] = None) -> None:
        """Rewrites the progress hash and its TTL; a failure leaves the run going."""
        n = self.n
        m: Dict[str, Any] = {
            "state": state, "file": self.label, "host": socket.gethostname(),
            "pid": os.getpid(), "total": len(self.lines), "done": n["done"],
            "resumed": n["resumed"], "passed": n["passed"], "failed": n["failed"],
            "no_expect": n["no_expect"], "not_ok": n["not_ok"],
            "malformed": n["malformed"], "running": len(self.flights),
            "concurrency": self.concurrency, "started_at": self.started_at,
            "updated_at": int(time.time() * 1000),
            "by_status": json.dumps(self.by_status, separators=(",", ":"))}
        if self.base:
            m["base"] = self.base
        if summary is not None:
            m["finished_at"] = int(time.time() * 1000)
            m["summary"] = json.dumps(summary, separators=(",", ":"))
        try:
            p = self.r.pipeline(transaction=False)
            p.hset(self.hash_key, mapping=m)
            p.pexpire(self.hash_key, HASH_TTL_MS)
            p.execute()
        except redis.exceptions.RedisError:
            pass        # as the CLI: the run goes on without its record
        self.hash_at = time.monotonic()

    ### Progress

    def snapshot(self) -> BatchProgress:
        """The progress so far, as a BatchProgress."""
        el = time.monotonic() - self.t0
        n = self.n
        return BatchProgress(batch=self.id, total=len(self.lines), done=n["done"],
                             resumed=n["resumed"], passed=n["passed"],
                             failed=n["failed"], no_expect=n["no_expect"],
                             not_ok=n["not_ok"], malformed=n["malformed"],
                             running=len(self.flights), elapsed_s=el,
                             rate=n["ran"] / el if el > 0 else 0.0)

    def progress(self, force: bool = False) -> None:
        """The hash (every HASH_S), the callback, and the bar (every BAR_S)."""
        now = time.monotonic()
        if now - self.hash_at >= HASH_S:
            self.hash_update("stopping" if self.stopping else "running")
        if self.callback is not None:
            self.callback(self.snapshot())
        if self.bar is None or (not force and now - self.drawn_at < BAR_S):
            return
        p = self.snapshot()
        left = p.total - p.done
        eta = left / p.rate if p.rate > 0 else (0 if left == 0 else -1)
        fill = p.done * BAR_COLS // p.total if p.total else BAR_COLS
        self.bar.write("\r\033[K[%s%s] %d/%d %3d%%  %.1f/s  ETA %s  failed %d" % (
            "#" * fill, "." * (BAR_COLS - fill), p.done, p.total,
            p.done * 100 // p.total if p.total else 100, p.rate, _fmt_eta(eta), p.bad))
        self.bar.flush()
        self.bar_shown = True
        self.drawn_at = now

    def summary(self) -> Dict[str, Any]:
        """summary_json() of cli_batch.c."""
        done = [self.done_cases[k] for k in sorted(self.done_cases)]
        walls = sorted((c for c in done if c.status != "malformed"),
                       key=lambda c: (-c.wall_ms, c.line))

        def pct(q: int) -> int:
            """The nearest-rank percentile q of the walls, sorted descending."""
            k = len(walls)
            rank = (k * q + 99) // 100
            return walls[k - (rank or 1)].wall_ms if k else 0
        failed = [c.line for c in done
                  if c.passed is False or (c.passed is None and c.status != "ok")]
        el = int((time.monotonic() - self.t0) * 1000)
        n = self.n
        return {"batch": self.id, "total": len(self.lines), "done": n["done"],
                "resumed": n["resumed"], "passed": n["passed"], "failed": n["failed"],
                "no_expect": n["no_expect"], "not_ok": n["not_ok"],
                "malformed": n["malformed"], "cancelled": n["cancelled"],
                "by_status": dict(self.by_status),
                "wall_ms": {"p50": pct(50), "p95": pct(95),
                            "max": walls[0].wall_ms if walls else 0},
                "slowest": [{"case": c.line, "id": c.id, "status": c.status,
                             "wall_ms": c.wall_ms} for c in walls[:SLOWEST]],
                "failed_cases": failed[:FAILED_LISTED], "elapsed_ms": el,
                "cases_per_s": n["ran"] * 1000 / el if el > 0 else 0.0,
                "interrupted": self.stopping}

    ### Flights

    def flight_submit(self, f: _Flight) -> None:
        """Submits the job of f's step and waits on its done list."""
        if f.step == "run":
            f.jid = f.id
            self.submit(f.job)
        else:
            f.jid = "%s:%s:%s" % (f.id, f.step, secrets.token_hex(4))
            if f.step == "fork":
                self.submit({"v": 1, "op": "sandbox.fork", "id": f.jid,
                             "sandbox": self.base, "to": f.id})
            else:
                self.submit({"v": 1, "op": "sandbox.delete", "id": f.jid,
                             "sandbox": f.id})
        self.flights[self.c.key("done", f.jid)] = f

    def flight_start(self, line: int, parsed: Any) -> None:
        """Starts a case: malformed lines are counted at once; a stale cancelled
        result is deleted first."""
        if isinstance(parsed, str):
            self.malformed(line, parsed)
            return
        job, expect = parsed
        f = _Flight(line, self.cid(line), job, expect)
        if line in self.stale:
            self.c._read(self.r.delete, self.c.key("res", f.id), self.c.key("done", f.id))
        f.step = "fork" if self.base else "run"
        self.flight_submit(f)

    def answer(self, key: str, r: Result) -> None:
        """Moves the flight waiting on key on with its job's result r."""
        f = self.flights.pop(key, None)
        if f is None:
            return
        if f.step == "fork":
            if r.status != "ok":
                # The fork's failure answers for the case, as the CLI's.
                raw = dict(r.raw, id=f.id)
                raw["error"] = {"code": r.error_code or r.status,
                                "message": "base %s: the fork failed: %s" % (
                                    self.base, r.error_message or r.status)}
                shown = Result(raw)
                self.tally(BatchCase(f.line, f.id, shown.status,
                                     None if f.expect is None else False, shown, False))
                return
            f.step = "delete" if self.stopping else "run"
            self.flight_submit(f)
        elif f.step == "run":
            self.record(f.line, r, f.expect, False)
            if self.base:
                f.step = "delete"
                self.flight_submit(f)
        # "delete": the fork is gone (or was already): the case is over.

    def poll_stored(self) -> None:
        """The results stored for the flights: the safety net of a long wait."""
        keys = list(self.flights)
        ids = [self.flights[k].jid for k in keys]
        bufs = self.c._read(self.r.mget, [self.c.key("res", i) for i in ids])
        for k, buf in zip(keys, bufs):
            if buf is not None:
                self.answer(k, Result.decode(buf))

    def stop(self) -> None:
        """Ctrl-C: cancel what no host has read; the rest may finish."""
        self.stopping = True
        for key, f in list(self.flights.items()):
            if f.step == "delete":
                continue
            got = admin.cancel(self.r, self.c.key, self.c.key("results"), f.jid,
                               queued_only=True, by="sandq batch")
            if got["outcome"] != admin.CANCELLED:
                continue
            del self.flights[key]
            if f.step == "run":
                self.n["cancelled"] += 1
                if self.base:
                    f.step = "delete"
                    self.flight_submit(f)

    def wait_one(self, quiet_since: float) -> float:
        """Waits up to POLL_S for one answer; returns when the last answer came."""
        try:
            got = self.r.blpop(list(self.flights), timeout=POLL_S)
        except redis.exceptions.RedisError as e:
            if not isinstance(e, (redis.exceptions.ConnectionError,
                                  redis.exceptions.TimeoutError)):
                raise errors.ConnectionError("redis: %s" % e) from None
            got = None
        now = time.monotonic()
        if got is not None:
            k = got[0].decode() if isinstance(got[0], bytes) else got[0]
            self.answer(k, Result.decode(got[1]))
            return now
        if now - quiet_since >= STALL_S:
            self.poll_stored()
            return now
        return quiet_since

    def run(self) -> BatchSummary:
        """Runs the batch to its end (or Ctrl-C) and returns its summary."""
        parsed: Dict[int, Any] = {}
        for ln, text in self.lines:
            try:
                parsed[ln] = parse_case(text, self.cid(ln), self.cid(ln) if self.base
                                        else None)
            except ValueError as e:
                parsed[ln] = str(e)
        if self.base:
            self.prepare_base()
        self.resume(parsed)
        self.hash_update("running")
        todo = [ln for ln, _ in self.lines if ln not in self.done_cases]
        todo.reverse()
        quiet = time.monotonic()
        stop_at = None
        try:
            while True:
                try:
                    while not self.stopping and todo and \
                            len(self.flights) < self.concurrency:
                        ln = todo.pop()
                        self.flight_start(ln, parsed[ln])
                    if not self.flights and (self.stopping or not todo):
                        break
                    if stop_at is not None and time.monotonic() >= stop_at:
                        break
                    if self.flights:
                        quiet = self.wait_one(quiet)
                    self.progress()
                except KeyboardInterrupt:
                    if self.stopping:
                        break
                    self.stop()
                    stop_at = time.monotonic() + GRACE_S
        finally:
            self.progress(force=True)
            if self.bar is not None and self.bar_shown:
                self.bar.write("\n")
                self.bar.flush()
            s = self.summary()
            self.hash_update("interrupted" if self.stopping else "finished", s)
        if self.stopping:
            raise KeyboardInterrupt("batch %s interrupted: %d of %d cases answered"
                                    % (self.id, s["done"], s["total"]))
        return BatchSummary(s, [self.done_cases[k] for k in sorted(self.done_cases)])


def status(client: Any, batch_id: str) -> Optional[Dict[str, Any]]:
    """The progress hash of batch_id, decoded (numbers as ints, by_status
    and summary as JSON), or None when there is none (`sandq batch status`)."""
    h = client._read(client.redis.hgetall, client.key("batch", batch_id))
    if not h:
        return None
    out: Dict[str, Any] = {}
    for k, v in h.items():
        name, text = k.decode("utf-8", "replace"), v.decode("utf-8", "replace")
        if name in ("by_status", "summary", "malformed_lines"):
            try:
                out[name] = json.loads(text)
            except ValueError:
                out[name] = text
        elif text.isdigit():
            out[name] = int(text)
        else:
            out[name] = text
    return out
