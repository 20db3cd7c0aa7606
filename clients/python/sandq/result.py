"""Results: the msgpack map sandqd stores at sandq:{T}:res:ID, decoded.

docs/protocol.md ("Result") is the reference. Fields this client does not
know are kept in Result.raw, as the protocol asks clients to ignore them
rather than fail. Decoding does no I/O.
"""

from typing import Any, Dict, List, Optional

import msgpack

from .errors import error_for

# The exit status the sandq CLI gives each status (sandq_result_exit_status()).
_LIMIT_OR_TIMEOUT = ("timeout", "cpu_limit", "memory_limit", "pids_limit",
                     "output_limit", "disk_limit")


def unpack(buf: bytes) -> Any:
    """Decodes one msgpack object as sandqd writes it: str as str (bytes that
    are not UTF-8 survive as surrogate escapes), bin as bytes."""
    return msgpack.unpackb(buf, raw=False, unicode_errors="surrogateescape",
                           strict_map_key=False)


def _text(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    return v


def _bytes(v: Any) -> bytes:
    if v is None:
        return b""
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return bytes(v)


class CaseResult:
    """One case of a run with cases (docs/protocol.md "Cases"): case (its
    number, from 1), status, exit_code, signal, stdout and stderr (str;
    stdout_bytes and stderr_bytes the bytes), the truncation flags,
    wall_ms, cpu_ms, passed (True or False for a case with expect, judged
    by the server; None without) and error (the run's error message, or
    None)."""

    __slots__ = ("case", "status", "exit_code", "signal", "stdout_bytes",
                 "stderr_bytes", "stdout_truncated", "stderr_truncated", "wall_ms",
                 "cpu_ms", "passed", "error")

    def __init__(self, m: Dict[str, Any]) -> None:
        g = m.get
        self.case = int(g("case", 0))
        self.status: str = _text(g("status", ""))
        self.exit_code = int(g("exit_code", -1))
        self.signal = int(g("signal", 0))
        self.stdout_bytes = _bytes(g("stdout"))
        self.stderr_bytes = _bytes(g("stderr"))
        self.stdout_truncated = bool(g("stdout_truncated", False))
        self.stderr_truncated = bool(g("stderr_truncated", False))
        self.wall_ms = int(g("wall_ms", 0))
        self.cpu_ms = int(g("cpu_ms", 0))
        self.passed: Optional[bool] = None if "pass" not in m else bool(m["pass"])
        self.error: Optional[str] = _text(g("error"))

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return "<sandq.CaseResult %d %s exit_code=%d passed=%s>" % (
            self.case, self.status, self.exit_code, self.passed)


class Result:
    """The result of one job or sandbox op.

    Runs: status, exit_code, signal, stdout and stderr (str: the output
    decoded as UTF-8, invalid bytes replaced, as LocalSandbox gives it;
    stdout_bytes and stderr_bytes keep the bytes as sent), wall_ms, cpu_ms,
    max_rss_kb, refused (the system calls the job's filter refused, by
    name); cases, passed and failed for a run with cases. Sandboxes: sandbox,
    version, snapshot, changed, changes. Images: image (the reference it ran
    on, a name resolved), image_digest, image_name (the tenant's name it
    asked for); None on host. net="allow" runs: egress (the hosts reached
    and refused: dicts of host, port, allowed, reason, conns, up, down).
    Ops: data (the answer, already decoded).
    Failures: error_code and error_message. raw holds the whole map as
    decoded.
    """

    __slots__ = ("raw", "id", "status", "exit_code", "signal", "stdout_bytes",
                 "stderr_bytes",
                 "stdout_truncated", "stderr_truncated", "wall_ms", "cpu_ms",
                 "max_rss_kb", "queued_at", "started_at", "finished_at", "host",
                 "worker", "attempt", "error_code", "error_message", "refused",
                 "sandbox", "version", "snapshot", "changed", "changed_truncated",
                 "changes", "refused_paths", "data", "has_data", "image",
                 "image_digest", "image_name", "egress")

    def __init__(self, raw: Dict[str, Any]) -> None:
        if not isinstance(raw, dict):
            raise ValueError("a result is a msgpack map, got %s" % type(raw).__name__)
        self.raw = raw
        g = raw.get
        self.id: str = _text(g("id", ""))
        self.status: str = _text(g("status", ""))
        self.exit_code = int(g("exit_code", -1))
        self.signal = int(g("signal", 0))
        self.stdout_bytes = _bytes(g("stdout"))
        self.stderr_bytes = _bytes(g("stderr"))
        self.stdout_truncated = bool(g("stdout_truncated", False))
        self.stderr_truncated = bool(g("stderr_truncated", False))
        self.wall_ms = int(g("wall_ms", 0))
        self.cpu_ms = int(g("cpu_ms", 0))
        self.max_rss_kb = int(g("max_rss_kb", 0))
        self.queued_at = int(g("queued_at", 0))
        self.started_at = int(g("started_at", 0))
        self.finished_at = int(g("finished_at", 0))
        self.host: Optional[str] = _text(g("host"))
        self.worker = int(g("worker", -1))
        self.attempt = int(g("attempt", 1))
        err = g("error") or {}
        self.error_code: Optional[str] = _text(err.get("code")) if err else None
        self.error_message: Optional[str] = (_text(err.get("message", "")) if err
                                             else None)
        self.refused: Dict[str, int] = dict(g("refused") or {})
        self.sandbox: Optional[str] = _text(g("sandbox"))
        self.version = int(g("version", 0))
        self.snapshot: Optional[str] = _text(g("snapshot"))
        self.changed: List[str] = [_text(p) for p in g("changed") or []]
        self.changed_truncated = bool(g("changed_truncated", False))
        self.changes: Dict[str, int] = dict(g("changes") or {})
        self.refused_paths: List[str] = [_text(p) for p in g("refused_paths") or []]
        self.image: Optional[str] = _text(g("image"))
        self.image_digest: Optional[str] = _text(g("image_digest"))
        self.image_name: Optional[str] = _text(g("image_name"))
        self.egress: List[Dict[str, Any]] = [
            {_text(k): (_text(v) if isinstance(v, bytes) else v) for k, v in row.items()}
            for row in g("egress") or []]
        self.has_data = "data" in raw
        self.data: Any = g("data")

    @classmethod
    def decode(cls, buf: bytes) -> "Result":
        """A Result from its msgpack bytes, as stored in Redis."""
        return cls(unpack(buf))

    @property
    def cases(self) -> List[CaseResult]:
        """The cases of a run with cases=, in order; [] for any other."""
        d = self.data
        if not isinstance(d, dict) or not isinstance(d.get("cases"), list):
            return []
        return [CaseResult(c) for c in d["cases"] if isinstance(c, dict)]

    @property
    def passed(self) -> int:
        """Cases of a run with cases= that passed their expect."""
        d = self.data
        return int(d.get("passed", 0)) if isinstance(d, dict) else 0

    @property
    def failed(self) -> int:
        """Cases of a run with cases= that failed their expect."""
        d = self.data
        return int(d.get("failed", 0)) if isinstance(d, dict) else 0

    @property
    def ok(self) -> bool:
        """True when the job exited 0 (or the op succeeded)."""
        return self.status == "ok"

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced); the bytes are
        stdout_bytes."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced); the bytes are
        stderr_bytes."""
        return self.stderr_bytes.decode("utf-8", "replace")

    # The names of the first releases, when stdout was bytes.
    @property
    def stdout_text(self) -> str:
        """stdout (the same str)."""
        return self.stdout

    @property
    def stderr_text(self) -> str:
        """stderr (the same str)."""
        return self.stderr

    # LocalSandbox and AgentFense results call it .duration_ms.
    @property
    def duration_ms(self) -> int:
        return self.wall_ms

    @property
    def exit_status(self) -> int:
        """What the sandq CLI would exit with: 0 for ok, the code for exit,
        128+N for a signal, 124 for a timeout or a limit, 125 when sandq did
        not run the job (rejected, expired, cancelled, internal)."""
        if self.status == "ok":
            return 0
        if self.status == "exit":
            return self.exit_code if 0 <= self.exit_code <= 255 else 125
        if self.status == "signal":
            return 128 + self.signal if 0 < self.signal < 128 else 125
        if self.status in _LIMIT_OR_TIMEOUT:
            return 124
        return 125

    def raise_for_status(self, check: bool = True) -> "Result":
        """Raises the sandq.Error this result stands for (see sandq.errors);
        returns self otherwise. With check=False a non-zero exit or a signal
        is not an error."""
        exc = error_for(self, check)
        if exc is not None:
            raise exc
        return self

    def __repr__(self) -> str:
        extra = ""
        if self.status in ("exit", "ok"):
            extra = " exit_code=%d" % self.exit_code
        elif self.error_code:
            extra = " error=%s" % self.error_code
        return "<sandq.Result %s %s%s wall_ms=%d>" % (self.id, self.status, extra,
                                                     self.wall_ms)
