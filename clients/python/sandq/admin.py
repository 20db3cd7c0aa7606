"""Operators' verbs from Python: cancel, dead letters and host status.

The Python twins of `sandq cancel` (cli/cancel.c), `sandq dead ls|show|
retry|purge` (cli/cli_dead.c) and `sandq status` (cli/cli_status.c), on the
keys of docs/protocol.md. Cancelling and retrying are one Lua script each,
and the scripts here are the very text of queue/cancel.c and queue/dead.c
(tests/test_admin.py compares them), so a job is cancelled or retried the
same way from the CLI, the gateway and Python: never half done, never
twice.

Everything read from Redis here is data a tenant's user may have written
(its ACL covers sandq:{T}:*): it is decoded with bounds, and a value that
does not decode is skipped rather than trusted.
"""

import json
import re
import time
from typing import Any, Dict, List, Optional, cast

import msgpack
import redis

from . import errors
from .result import unpack

# queue/cancel.c's queue_cancel_lua, byte for byte.
CANCEL_LUA = (
    "if redis.call('EXISTS', KEYS[2]) == 1 then return {0, 'finished'} end\n"
    "local found, start = nil, '-'\n"
    "while not found do\n"
    "  local batch = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 1000)\n"
    "  if #batch == 0 then break end\n"
    "  for _, e in ipairs(batch) do\n"
    "    local f = e[2]\n"
    "    for i = 1, #f, 2 do\n"
    "      if f[i] == 'job' and string.find(f[i + 1], ARGV[1], 1, true) then\n"
    "        local ok, job = pcall(cmsgpack.unpack, f[i + 1])\n"
    "        if ok and type(job) == 'table' and job['id'] == ARGV[1] then found = e[1] end\n"
    "      end\n"
    "    end\n"
    "    if found then break end\n"
    "  end\n"
    "  start = '(' .. batch[#batch][1]\n"
    "end\n"
    "if not found then return {0, 'unknown'} end\n"
    "local pend = redis.pcall('XPENDING', KEYS[1], ARGV[4], found, found, 1)\n"
    "if pend.err == nil and #pend > 0 then\n"
    "  if ARGV[5] ~= '1' then redis.call('SET', KEYS[4], '1', 'PX', ARGV[3]) end\n"
    "  return {2, pend[1][2]}\n"
    "end\n"
    "redis.call('XDEL', KEYS[1], found)\n"
    "redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "redis.call('DEL', KEYS[3])\n"
    "redis.call('RPUSH', KEYS[3], ARGV[2])\n"
    "redis.call('PEXPIRE', KEYS[3], ARGV[3])\n"
    "redis.call('PUBLISH', ARGV[6], ARGV[1])\n"
    "return {1, found}\n")

# queue/dead.c's queue_dead_retry_lua, byte for byte.
DEAD_RETRY_LUA = (
    "local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])\n"
    "if #e == 0 then return {0, 'gone'} end\n"
    "local f, payload, cut = e[1][2], nil, '0'\n"
    "for i = 1, #f, 2 do\n"
    "  if f[i] == 'payload' then payload = f[i + 1] end\n"
    "  if f[i] == 'payload_truncated' then cut = f[i + 1] end\n"
    "end\n"
    "if payload == nil or payload == '' or cut == '1' then return {0, 'no job to retry'} end\n"
    "redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])\n"
    "local id = redis.call('XADD', KEYS[2], '*', 'job', payload)\n"
    "redis.call('XDEL', KEYS[1], ARGV[1])\n"
    "return {1, id}\n")

CANCEL_TTL_MS = 86400 * 1000    # QUEUE_CANCEL_TTL_MS: the cancellation key, a day
GROUP = "sandq"                 # KEY_GROUP: sandqd's consumer group
DEAD_SCAN_MAX = 100000          # dead letters searched for a job id
STATUS_STALE_MS = 10000         # QUEUE_STATUS_STALE_MS: a quieter host is gone
HOST_STATUS_MAX = 1 << 20       # bytes of one host's status JSON read

_STREAM_ID_RE = re.compile(rb"\d+-\d+\Z")

# What cancel() answers, as `sandq cancel` words it.
CANCELLED = "cancelled"         # removed unread and answered cancelled
CANCELLING = "cancelling"       # a host holds it: it stops it and answers
HELD = "held"                   # queued_only: a host holds it, left alone
FINISHED = "finished"           # it has a result already
UNKNOWN = "unknown"             # no job of that id in the stream


def _s(v: Any) -> Optional[str]:
    """A reply's bytes as text (None stays None)."""
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def cancelled_result(job_id: str, by: str) -> bytes:
    """The msgpack result the cancel script stores for a job no host read,
    as queue_cancel_args() encodes it."""
    now = int(time.time() * 1000)
    out: bytes = msgpack.packb({
        "v": 1, "id": job_id, "status": "cancelled", "exit_code": -1, "signal": 0,
        "stdout": b"", "stderr": b"", "stdout_truncated": False,
        "stderr_truncated": False, "wall_ms": 0, "cpu_ms": 0, "max_rss_kb": 0,
        "queued_at": 0, "started_at": 0, "finished_at": now, "worker": -1,
        "attempt": 1, "error": {"code": "cancelled",
                                "message": "cancelled (%s) before any host read it" % by},
    }, use_bin_type=True)
    return out


def cancel(r: "redis.Redis[bytes]", key: Any, tenant_channel: str, job_id: str,
           queued_only: bool = False, by: str = "sandq python") -> Dict[str, Any]:
    """Runs the cancel script for job_id. key(kind, id) makes the tenant's
    keys. Returns {"outcome": CANCELLED|CANCELLING|HELD|FINISHED|UNKNOWN,
    "entry" (the stream entry removed) or "host" (the consumer holding it)}."""
    rep = cast(Any, r).eval(CANCEL_LUA, 4, key("jobs"), key("res", job_id),
                            key("done", job_id), key("cancel", job_id), job_id,
                            cancelled_result(job_id, by), str(CANCEL_TTL_MS), GROUP,
                            "1" if queued_only else "0", tenant_channel)
    if not isinstance(rep, list) or len(rep) != 2:
        raise errors.ConnectionError("cancel %s: unexpected reply %r" % (job_id, rep))
    code, what = rep[0], _s(rep[1]) or ""
    if code == 1:
        return {"outcome": CANCELLED, "entry": what}
    if code == 2:
        return {"outcome": HELD if queued_only else CANCELLING, "host": what}
    return {"outcome": FINISHED if what == "finished" else UNKNOWN}


class DeadLetter:
    """One entry of the tenant's dead-letter stream (docs/protocol.md "Dead
    letters"): dead_id (its stream id), at (epoch ms), entry (the job's
    stream entry), id (the job id, None for an entry no id could be read
    from), reason, attempts (a list of {attempt, host, worker, at, reason}),
    payload (the job as it ran, msgpack bytes), payload_truncated."""

    __slots__ = ("dead_id", "at", "entry", "id", "reason", "attempts", "payload",
                 "payload_truncated")

    def __init__(self, dead_id: str, fields: Dict[bytes, bytes]) -> None:
        self.dead_id = dead_id
        self.at = int(dead_id.split("-", 1)[0]) if "-" in dead_id else 0
        self.entry = _s(fields.get(b"entry"))
        self.id = _s(fields.get(b"id"))
        self.reason = _s(fields.get(b"reason"))
        try:
            att = json.loads(fields.get(b"attempts") or b"[]")
        except ValueError:
            att = []
        self.attempts: List[Any] = att if isinstance(att, list) else []
        self.payload: bytes = fields.get(b"payload") or b""
        self.payload_truncated = fields.get(b"payload_truncated") == b"1"

    @property
    def retryable(self) -> bool:
        """Whether dead_retry() can submit it again (queue_dead_retryable)."""
        return self.id is not None and len(self.payload) > 0 and not self.payload_truncated

    def job(self) -> Optional[Dict[str, Any]]:
        """The payload decoded (the job map), or None when it is not one."""
        if not self.retryable:
            return None
        try:
            j = unpack(self.payload)
        except Exception:           # a tenant may have written anything here
            return None
        return j if isinstance(j, dict) else None

    def as_dict(self) -> Dict[str, Any]:
        """What `sandq dead ls --json` prints for it."""
        return {"dead_id": self.dead_id, "at": self.at, "entry": self.entry,
                "id": self.id, "reason": self.reason, "attempts": self.attempts,
                "payload_bytes": len(self.payload),
                "payload_truncated": self.payload_truncated,
                "retryable": self.retryable}

    def __repr__(self) -> str:
        return "<sandq.DeadLetter %s job=%s %r>" % (self.dead_id, self.id, self.reason)


def _letters(reply: Any) -> List[DeadLetter]:
    """The dead letters of an XRANGE/XREVRANGE reply; other shapes skipped."""
    out = []
    for item in reply or []:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            continue
        sid, fields = item
        if isinstance(fields, dict):
            out.append(DeadLetter(_s(sid) or "", fields))
    return out


def dead_find(r: "redis.Redis[bytes]", key: str, ref: str) -> Optional[DeadLetter]:
    """The dead letter ref names: a stream id, or the newest whose job id
    is ref (among the newest DEAD_SCAN_MAX); None if there is none."""
    if _STREAM_ID_RE.match(ref.encode()):
        got = _letters(r.xrange(key, ref, ref))
        return got[0] if got else None
    for d in _letters(r.xrevrange(key, "+", "-", count=DEAD_SCAN_MAX)):
        if d.id == ref:
            return d
    return None


def dead_retry(r: "redis.Redis[bytes]", key: Any, d: DeadLetter) -> str:
    """Submits d's job again (one script: its old result, done list,
    attempts and cancellation deleted, the payload added as a new entry,
    the letter deleted). Returns the new stream entry id; Error naming the
    letter when it cannot be retried or is gone."""
    if not d.retryable or d.id is None:
        raise errors.Error("dead letter %s cannot be retried: %s" % (
            d.dead_id, "its entry had no readable job id" if d.id is None else
            "its job was cut at 1 MiB when it was recorded"))
    rep = cast(Any, r).eval(DEAD_RETRY_LUA, 6, key("dead"), key("jobs"),
                            key("res", d.id), key("done", d.id),
                            key("attempts", d.id), key("cancel", d.id), d.dead_id)
    if not isinstance(rep, list) or len(rep) != 2 or rep[0] != 1:
        raise errors.Error("dead letter %s: %s" % (
            d.dead_id, _s(rep[1]) if isinstance(rep, list) and len(rep) == 2 else rep))
    return _s(rep[1]) or ""


def _int(v: Any) -> int:
    """An integer member of a host's status, or 0 for anything else."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    return 0


def status(hosts: Dict[bytes, bytes], tenants: List[str], backlog: Dict[str, int],
           now_ms: int) -> Dict[str, Any]:
    """`sandq status --json`'s object from the hosts hash, the tenants and
    each one's job stream length, as queue/status.c computes it: hosts
    quieter than STATUS_STALE_MS are listed as not live and not counted;
    a tenant's running and last-minute figures are sums over live hosts,
    its queued jobs its stream's length less those running."""
    out_hosts = []
    figs: Dict[str, Dict[str, int]] = {}
    workers = live_n = 0

    def fig(name: str) -> Dict[str, int]:
        """The running sums of tenant name, made on first use."""
        return figs.setdefault(name, {"running": 0, "pulling": 0, "done": 0,
                                      "refused": 0})
    for name in tenants:
        fig(name)
    for k in sorted(hosts):
        v = hosts[k]
        if len(v) > HOST_STATUS_MAX:
            continue
        try:
            h = json.loads(v)
        except ValueError:
            continue
        if not isinstance(h, dict):
            continue
        age = now_ms - _int(h.get("time"))
        live = age < STATUS_STALE_MS
        out_hosts.append({"host": k.decode("utf-8", "backslashreplace"),
                          "workers": _int(h.get("workers")), "busy": _int(h.get("busy")),
                          "age_ms": age,
                          "audit_lost": _int(h.get("audit_db_dropped")) +
                          _int(h.get("audit_stream_lost")),
                          "live": live})
        if not live:
            continue
        live_n += 1
        workers += _int(h.get("workers"))
        ts = h.get("tenants")
        for tname, t in (ts.items() if isinstance(ts, dict) else ()):
            if not isinstance(t, dict):
                continue
            f = fig(tname)
            f["running"] += _int(t.get("running"))
            f["pulling"] += _int(t.get("pulling"))
            f["done"] += _int(t.get("done_1m"))
            f["refused"] += _int(t.get("refused_1m"))
    out_tenants = []
    for tname, f in figs.items():
        b = backlog.get(tname, 0)
        out_tenants.append({"name": tname,
                            "queued": b - f["running"] if b > f["running"] else 0,
                            "pulling": f["pulling"], "running": f["running"],
                            "done_1m": f["done"], "refused_1m": f["refused"],
                            "share": f["running"] / workers if workers > 0 else 0.0})
    return {"workers": workers, "live_hosts": live_n, "hosts": out_hosts,
            "tenants": out_tenants}
