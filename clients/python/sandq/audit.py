"""The audit trail from Python: what `sandq audit` reads (docs/audit.md).

The tenant's stream sandq:{T}:audit holds one event per entry, its fields
time (epoch ms), host, tenant, job, sandbox, category, action, target,
allowed ("true"/"false"), level and detail. Entries are decoded as
strictly as audit_event_from_fields() does (every field once, no other,
each within its bound), because a tenant's user may write to its stream:
one that is not an event is skipped and counted, never trusted.

Filters are cli/cli_audit.c's (audit_filter_match): job, sandbox,
categories, a minimum level, allowed or denied only, since (inclusive) and
until (exclusive) on the events' own times; the stream is read from since
minus CLOCK_SLACK_MS to until plus it, in pages of PAGE_COUNT, so a host's
clock skew up to five minutes does not hide an event. No I/O here but
through the redis client given.
"""

import datetime
import json
import os
import re
import tempfile
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

CATEGORIES = ("job", "sandbox", "syscall", "path", "quota", "policy", "tenant",
              "audit", "image")
LEVELS = ("info", "notice", "warning", "alert")
FIELDS = ("time", "host", "tenant", "job", "sandbox", "category", "action",
          "target", "allowed", "level", "detail")
PAGE_COUNT = 1000
CLOCK_SLACK_MS = 5 * 60 * 1000
TIME_MAX = 253402300799999        # 9999-12-31T23:59:59.999Z
# Bounds of the text fields (audit.h): bytes, and the characters allowed.
_TEXT = {"host": 255, "tenant": 64, "job": 128, "sandbox": 128, "action": 32,
         "target": 1023, "detail": 1023}
_ID_RE = re.compile(r"[A-Za-z0-9._:-]*\Z")
_TENANT_RE = re.compile(r"[A-Za-z0-9_-]*\Z")
_ACTION_RE = re.compile(r"[a-z0-9_.]+\Z")
_WHEN_RE = re.compile(r"([0-9]+)(ms|s|m|h|d|w)\Z")
_UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000, "w": 604800000}


class AuditEvent:
    """One audit event: time_ms (epoch ms; time is the RFC 3339 text),
    host, tenant, job, sandbox, category, action, target, allowed (bool),
    level and detail (str, compact JSON for some actions; detail_json()
    decodes it)."""

    __slots__ = ("stream_id", "time_ms", "host", "tenant", "job", "sandbox",
                 "category", "action", "target", "allowed", "level", "detail")

    def __init__(self, stream_id: str, time_ms: int, f: Dict[str, str],
                 allowed: bool) -> None:
        self.stream_id = stream_id
        self.time_ms = time_ms
        self.host = f["host"]
        self.tenant = f["tenant"]
        self.job = f["job"]
        self.sandbox = f["sandbox"]
        self.category = f["category"]
        self.action = f["action"]
        self.target = f["target"]
        self.allowed = allowed
        self.level = f["level"]
        self.detail = f["detail"]

    @property
    def time(self) -> str:
        """time_ms as RFC 3339 UTC with milliseconds (audit_time_format)."""
        return format_time(self.time_ms)

    def detail_json(self) -> Any:
        """detail decoded as JSON, or None when it is free text."""
        try:
            return json.loads(self.detail)
        except ValueError:
            return None

    def as_dict(self) -> Dict[str, Any]:
        """The event as `sandq audit --json` prints it, fields in order."""
        return {"time": self.time, "host": self.host, "tenant": self.tenant,
                "job": self.job, "sandbox": self.sandbox, "category": self.category,
                "action": self.action, "target": self.target, "allowed": self.allowed,
                "level": self.level, "detail": self.detail}

    def __repr__(self) -> str:
        return "<sandq.AuditEvent %s %s/%s %s %s>" % (
            self.time, self.category, self.action,
            "allowed" if self.allowed else "denied", self.target)


def format_time(ms: int) -> str:
    """Epoch ms as 2024-05-01T12:34:56.789Z."""
    d = datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ".%03dZ" % (ms % 1000)


def parse_when(v: Union[None, int, float, str, datetime.datetime],
               now_ms: int) -> Optional[int]:
    """A --since/--until value as epoch ms: None; a datetime; a number of
    seconds back from now (int or float); "30s", "10m", "2h", "7d", "1w"
    back from now; or a UTC time "2024-05-01T12:00:00Z"."""
    if v is None:
        return None
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            raise ValueError("audit: a datetime needs a time zone (UTC)")
        return int(v.timestamp() * 1000)
    if isinstance(v, bool):
        raise ValueError("audit: time %r" % (v,))
    if isinstance(v, (int, float)):
        return now_ms - int(v * 1000)
    m = _WHEN_RE.match(v)
    if m and int(m.group(1)) > 0:
        return now_ms - int(m.group(1)) * _UNITS[m.group(2)]
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            d = datetime.datetime.strptime(v, fmt)
        except ValueError:
            continue
        return int(d.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
    raise ValueError("audit: time %r: expected 30s, 10m, 2h, 7d, 1w or "
                     "YYYY-MM-DDTHH:MM:SS[.mmm]Z" % (v,))


def _text_ok(name: str, s: str) -> bool:
    """Whether s is within the bound and the characters of text field name."""
    if len(s.encode("utf-8")) > _TEXT[name] or "\0" in s:
        return False
    if name in ("job", "sandbox"):
        return bool(_ID_RE.match(s))
    if name == "tenant":
        return bool(_TENANT_RE.match(s))
    if name == "action":
        return bool(_ACTION_RE.match(s))
    if name == "host":
        return not any(ord(c) < 0x20 or ord(c) == 0x7f for c in s)
    return True


def decode(stream_id: str, fields: Dict[bytes, bytes]) -> AuditEvent:
    """An event from a stream entry's fields; ValueError naming the field
    when they are not exactly an event's."""
    if len(fields) != len(FIELDS):
        raise ValueError("entry: %d fields, the model has %d" % (len(fields), len(FIELDS)))
    f: Dict[str, str] = {}
    for k, v in fields.items():
        try:
            name, text = k.decode("utf-8"), v.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("entry: a field is not UTF-8") from None
        if name not in FIELDS:
            raise ValueError("%.64s: unknown field" % name)
        f[name] = text
    t = f["time"]
    if not t.isdigit() or int(t) > TIME_MAX:
        raise ValueError("time: %r is not epoch milliseconds" % t[:32])
    if f["category"] not in CATEGORIES:
        raise ValueError("category: %r is not a category" % f["category"][:32])
    if f["level"] not in LEVELS:
        raise ValueError("level: %r is not info, notice, warning or alert"
                         % f["level"][:32])
    if f["allowed"] not in ("true", "false"):
        raise ValueError("allowed: %r is not true or false" % f["allowed"][:32])
    for name in _TEXT:
        if not _text_ok(name, f[name]):
            raise ValueError("%s: not a valid value" % name)
    return AuditEvent(stream_id, int(t), f, f["allowed"] == "true")


class Filter:
    """cli_audit.c's filters: job, sandbox, categories (a name, a
    comma-separated list or a list), level (a minimum), allowed (True:
    allowed only; False: denied only; None: both), since (inclusive) and
    until (exclusive) in epoch ms."""

    def __init__(self, *, job: Optional[str] = None, sandbox: Optional[str] = None,
                 category: Union[None, str, Sequence[str]] = None,
                 level: Optional[str] = None, allowed: Optional[bool] = None,
                 since_ms: Optional[int] = None, until_ms: Optional[int] = None) -> None:
        cats: List[str] = []
        if isinstance(category, str):
            cats = [c for c in category.split(",") if c]
        elif category is not None:
            cats = [c for part in category for c in part.split(",") if c]
        for c in cats:
            if c not in CATEGORIES:
                raise ValueError("audit: category %r: one of %s"
                                 % (c, ", ".join(CATEGORIES)))
        if level is not None and level not in LEVELS:
            raise ValueError("audit: level %r: info, notice, warning or alert" % (level,))
        self.job = job
        self.sandbox = sandbox
        self.categories = frozenset(cats)
        self.level_min = LEVELS.index(level) if level is not None else 0
        self.allowed = allowed
        self.since_ms = since_ms
        self.until_ms = until_ms

    def match(self, ev: AuditEvent) -> bool:
        """audit_filter_match()."""
        if self.job is not None and ev.job != self.job:
            return False
        if self.sandbox is not None and ev.sandbox != self.sandbox:
            return False
        if self.categories and ev.category not in self.categories:
            return False
        if LEVELS.index(ev.level) < self.level_min:
            return False
        if self.allowed is not None and ev.allowed != self.allowed:
            return False
        if self.since_ms is not None and ev.time_ms < self.since_ms:
            return False
        if self.until_ms is not None and ev.time_ms >= self.until_ms:
            return False
        return True


class Audit:
    """The events of one read: events (those the filters kept, oldest
    first) and skipped (entries that were not events, with why)."""

    def __init__(self) -> None:
        self.events: List[AuditEvent] = []
        self.skipped: List[str] = []

    def __iter__(self) -> Iterator[AuditEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def summary(self) -> Dict[str, Any]:
        """`sandq audit --summary --json`: {"total", "allowed", "denied",
        "categories": {C: {"allowed", "denied", "actions": {A: {"allowed",
        "denied"}}}}}."""
        return summarize(self.events)

    def export(self, path: Union[str, "os.PathLike[str]"], force: bool = False) -> int:
        """Writes the events as JSON lines to path (0600), beside it first
        and renamed, so it appears whole or not at all; an existing path is
        refused (FileExistsError) unless force. Returns the count."""
        return export(self.events, path, force)


def summarize(events: Iterable[AuditEvent]) -> Dict[str, Any]:
    """Counts per category and action, allowed and denied, with totals."""
    out: Dict[str, Any] = {"total": 0, "allowed": 0, "denied": 0, "categories": {}}
    for ev in events:
        side = "allowed" if ev.allowed else "denied"
        c = out["categories"].setdefault(ev.category, {"allowed": 0, "denied": 0,
                                                      "actions": {}})
        a = c["actions"].setdefault(ev.action, {"allowed": 0, "denied": 0})
        for o in (out, c, a):
            o[side] += 1
        out["total"] += 1
    return out


def export(events: Iterable[AuditEvent], path: Union[str, "os.PathLike[str]"],
           force: bool = False) -> int:
    """As Audit.export()."""
    path = os.fspath(path)
    if not force and os.path.lexists(path):
        raise FileExistsError("audit export: %s exists (force=True replaces it)" % path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".audit-", dir=folder)   # 0600
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for ev in events:
                f.write(json.dumps(ev.as_dict(), ensure_ascii=False,
                                   separators=(",", ":")) + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return n


def _sid(v: Any) -> str:
    """A stream id as text."""
    return v.decode() if isinstance(v, bytes) else str(v)


def read(xrange: Callable[..., Any], key: str, flt: Filter) -> Audit:
    """Reads key with xrange(key, min, max, count) in pages, keeping what
    flt matches; entries that are not events are counted in skipped."""
    out = Audit()
    lo = "-" if flt.since_ms is None else "%d-0" % max(0, flt.since_ms - CLOCK_SLACK_MS)
    hi = "+" if flt.until_ms is None else "%d-0" % (flt.until_ms + CLOCK_SLACK_MS)
    while True:
        page = xrange(key, lo, hi, PAGE_COUNT)
        for sid, fields in page or []:
            _keep(out, _sid(sid), fields, flt)
        if not page or len(page) < PAGE_COUNT:
            return out
        lo = "(" + _sid(page[-1][0])


def _keep(out: Audit, sid: str, fields: Any, flt: Filter) -> Optional[AuditEvent]:
    """Decodes one entry into out: kept if flt matches, else skipped and named."""
    try:
        ev = decode(sid, fields if isinstance(fields, dict) else {})
    except ValueError as e:
        out.skipped.append("%s: %s" % (sid, e))
        return None
    if flt.match(ev):
        out.events.append(ev)
        return ev
    return None
