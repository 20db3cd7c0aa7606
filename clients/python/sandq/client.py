"""Client: submit jobs to a tenant's Redis stream and wait for their results.

The wire contract is docs/protocol.md; this is the Python twin of
libsandq/libsandq.c and behaves as it does:

- A job is an XADD of its msgpack map to sandq:{T}:jobs under a client-made
  id ("j-" and 24 random hex digits unless one is given).
- Waiting GETs sandq:{T}:res:ID first (the job may be done already), then
  BLPOPs sandq:{T}:done:ID in slices of at most WAIT_SLICE seconds with a GET
  between slices: the done list holds one copy of the result, so a second
  waiter on the same id only ever sees it through GET.
- Reads (GET, BLPOP, XREAD) are repeated once after a broken connection;
  redis-py opens a new one for the next command. An XADD is not repeated,
  since it may have landed: the caller decides whether to submit again under
  the same id (sandqd keeps the first result of an id).

Every blocking call has an async twin named with an "a" in front (arun, ash,
apython, asubmit, await_ for wait, astream, abatch, asandbox...). The twins
use redis.asyncio, one connection pool per event loop.

Sections: connection, submitting and waiting, runs, streaming, batches,
sandboxes.
"""

import asyncio
import math
import os
import re
import time
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterable,
                    Iterator, List, Optional, Sequence, Tuple, Union, cast)

if TYPE_CHECKING:
    from .sandbox import Sandbox, _Opening

import redis
import redis.asyncio

from . import errors
from .errors import ConnectionError, WaitTimeout
from . import admin, audit, batchrun
from .audit import Audit, AuditEvent, Filter
from .admin import DeadLetter
from .job import Job, as_job, check_id, new_id
from .job import _perms as check_perms
from .presets import Preset, Rule, parse_presets
from .presets import unknown as presets_unknown
from .result import Result
from .util import snapshot_key

WAIT_SLICE = 10.0          # longest single BLPOP, seconds (libsandq WAIT_SLICE_MS)
STREAM_SLICE_MS = 1000     # longest single XREAD BLOCK, then a GET of the result
CONNECT_TIMEOUT = 5.0      # seconds (libsandq CONNECT_TIMEOUT_MS)
COMMAND_TIMEOUT = 30.0     # socket timeout; outlasts a BLPOP slice plus grace
WAIT_MARGIN = 30.0         # a run's wait beyond its timeout= (queueing, set-up)
MIN_BLOCK = 0.01           # shortest BLPOP: Redis reads 0 as "forever"

_TENANT_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_DEFAULT = object()        # "the client's default timeout"


class Chunk(Tuple[int, bytes]):
    """A piece of a streamed job's output: (fd, data), fd 1 for stdout and 2
    for stderr, data bytes (at most 64 KiB)."""

    __slots__ = ()

    def __new__(cls, fd: int, data: bytes) -> "Chunk":
        return tuple.__new__(cls, (fd, data))

    @property
    def fd(self) -> int:
        return self[0]

    @property
    def data(self) -> bytes:
        return self[1]

    def __repr__(self) -> str:
        return "Chunk(fd=%d, data=%r)" % self


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _redis_error(e: Exception) -> ConnectionError:
    return ConnectionError("redis: %s" % (e,))


def _repeatable(e: Exception) -> bool:
    """True for failures after which the same read may simply be sent again."""
    return isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))


async def _keeper(aredis: Any) -> AsyncIterator[None]:
    """Closes aredis's pool when its event loop finalises async generators."""
    try:
        yield
    finally:
        await aredis.connection_pool.disconnect()


def with_timeout(job: Job, timeout: Any) -> Job:
    """job with limits.wall_ms set from timeout (seconds), as AgentFense's
    run(cmd, timeout=30) means it: the job's own wall-clock limit. A Job
    that already names another wall_ms is refused rather than guessed at.
    timeout None or unset leaves the job as it is (its preset's limit)."""
    if timeout is _DEFAULT or timeout is None:
        return job
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not timeout > 0:
        raise errors.InvalidJob("timeout: expected seconds > 0, got %r" % (timeout,))
    ms = max(1, int(math.ceil(timeout * 1000)))
    limits = dict(job.fields.get("limits") or {})
    if limits.get("wall_ms", ms) != ms:
        raise errors.InvalidJob("timeout=%s s and wall_ms=%d: give one of them"
                                % (timeout, limits["wall_ms"]))
    limits["wall_ms"] = ms
    return Job(dict(job.fields, limits=limits))


class Client:
    """A connection to sandq for one tenant.

    url is a redis-py URL: redis://[[USER]:PASS@]HOST:PORT[/DB], rediss://...
    or unix:///PATH (default: $SANDQ_REDIS, else redis://127.0.0.1:6379, as
    the CLI); tenant defaults to $SANDQ_TENANT, else "default". timeout
    is the default number of seconds every wait lasts (None: no limit); a
    run's own timeout= is its wall-clock limit (see run()). The client is
    safe to share between threads; its async twins share it between tasks
    of one event loop.

        with sandq.Client("redis://127.0.0.1:6379") as client:
            print(client.sh("echo hi").stdout)
    """

    def __init__(self, url: Optional[str] = None, tenant: Optional[str] = None, *,
                 prefix: str = "sandq", timeout: Optional[float] = None) -> None:
        if url is None:
            url = os.environ.get("SANDQ_REDIS") or "redis://127.0.0.1:6379"
        if tenant is None:
            tenant = os.environ.get("SANDQ_TENANT") or "default"
        if not isinstance(tenant, str) or not _TENANT_RE.match(tenant):
            raise errors.InvalidJob("tenant %r: expected 1..64 bytes of [A-Za-z0-9_-]"
                                    % (tenant,))
        self.url = url
        self.tenant = tenant
        self.prefix = prefix
        self.timeout = timeout
        try:
            self.redis: "redis.Redis[bytes]" = redis.Redis.from_url(
                url, socket_connect_timeout=CONNECT_TIMEOUT,
                socket_timeout=COMMAND_TIMEOUT)
        except (ValueError, redis.exceptions.RedisError) as e:
            raise ConnectionError("redis url %r: %s" % (url, e)) from None
        self._aredis: Any = None
        self._aloop: Optional[asyncio.AbstractEventLoop] = None
        self._akeeper: Any = None

    ### Connection

    def key(self, kind: str, job_id: Optional[str] = None) -> str:
        """The Redis key sandq:{TENANT}:KIND[:ID] (jobs, res, done, out...)."""
        k = "%s:{%s}:%s" % (self.prefix, self.tenant, kind)
        return k if job_id is None else "%s:%s" % (k, job_id)

    async def _ar(self) -> Any:
        """The redis.asyncio client of the running event loop.

        Its sockets belong to the loop that opened them, so each loop (each
        asyncio.run(), say) gets a pool of its own. A keeper async generator
        closes that pool when its loop ends: asyncio.run() finalises async
        generators (their finally blocks run) before it closes the loop, so
        the sockets are closed on the loop that owns them rather than left
        to redis-py's __del__, which cannot once the loop is closed."""
        loop = asyncio.get_running_loop()
        if self._aredis is None or self._aloop is not loop:
            r = redis.asyncio.Redis.from_url(self.url,
                                             socket_connect_timeout=CONNECT_TIMEOUT,
                                             socket_timeout=COMMAND_TIMEOUT)
            keeper = _keeper(r)
            await keeper.__anext__()
            self._aredis, self._aloop, self._akeeper = r, loop, keeper
        return self._aredis

    def close(self) -> None:
        """Closes the connections of the blocking calls."""
        self.redis.connection_pool.disconnect()

    async def aclose(self) -> None:
        """Closes the connections of the async calls (and of the blocking ones)."""
        keeper, loop = self._akeeper, self._aloop
        self._aredis = self._aloop = self._akeeper = None
        if keeper is not None and loop is asyncio.get_running_loop():
            await keeper.aclose()
        self.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def _read(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except redis.exceptions.RedisError as e:
            if not _repeatable(e):
                raise _redis_error(e) from None
        try:
            return fn(*args, **kw)
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None

    async def _aread(self, command: str, *args: Any, **kw: Any) -> Any:
        try:
            return await getattr(await self._ar(), command)(*args, **kw)
        except redis.exceptions.RedisError as e:
            if not _repeatable(e):
                raise _redis_error(e) from None
        try:
            return await getattr(await self._ar(), command)(*args, **kw)
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None

    ### Submitting and waiting

    def submit(self, job: Any, **opts: Any) -> str:
        """Adds a job and returns its id at once. job is a Job, a shell script
        (str), an argv (list) or a dict; opts as for sh()."""
        j = as_job(job, opts)
        try:
            self.redis.xadd(self.key("jobs"), {"job": j.pack()})
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None
        return j.id

    async def asubmit(self, job: Any, **opts: Any) -> str:
        """Async submit()."""
        j = as_job(job, opts)
        try:
            await (await self._ar()).xadd(self.key("jobs"), {"job": j.pack()})
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None
        return j.id

    def get(self, job_id: str) -> Optional[Result]:
        """The stored result of a job, or None if there is none (yet, or any
        longer: results expire after result_ttl_s, a day by default)."""
        buf = self._read(self.redis.get, self.key("res", job_id))
        return None if buf is None else Result.decode(buf)

    async def aget(self, job_id: str) -> Optional[Result]:
        """Async get()."""
        buf = await self._aread("get", self.key("res", job_id))
        return None if buf is None else Result.decode(buf)

    def _wait_for(self, timeout: Any, wait_timeout: Any) -> Any:
        """How long a run given timeout= (its wall-clock limit) and
        wait_timeout= is waited for: wait_timeout when given; else, with a
        timeout, that plus WAIT_MARGIN, or the client's default when that
        is longer (None: no limit); else the client's default."""
        if wait_timeout is not _DEFAULT:
            return wait_timeout
        if timeout is _DEFAULT or timeout is None or self.timeout is None:
            return _DEFAULT
        return max(self.timeout, timeout + WAIT_MARGIN)

    def _deadline(self, timeout: Any) -> Tuple[Optional[float], Optional[float]]:
        if timeout is _DEFAULT:
            timeout = self.timeout
        return timeout, (None if timeout is None else time.monotonic() + timeout)

    @staticmethod
    def _slice(deadline: Optional[float]) -> Optional[float]:
        """Seconds of the next BLPOP, or None when the wait is over."""
        if deadline is None:
            return WAIT_SLICE
        left = deadline - time.monotonic()
        return None if left < MIN_BLOCK else min(WAIT_SLICE, left)

    def wait(self, job_id: str, timeout: Any = _DEFAULT) -> Result:
        """Waits for a job's result and returns it, whatever its status.

        timeout in seconds (default: the client's; None: no limit). Raises
        WaitTimeout (a sandq.TimeoutError) when it passes: the job may still
        be queued or running, and waiting again later will find its result."""
        timeout, deadline = self._deadline(timeout)
        done = self.key("done", job_id)
        retried = False
        while True:
            r = self.get(job_id)
            if r is not None:
                return r
            s = self._slice(deadline)
            if s is None:
                raise WaitTimeout("no result for %s after %s s" % (job_id, timeout), job_id)
            try:
                got = self.redis.blpop([done], timeout=round(s, 3))
            except redis.exceptions.RedisError as e:
                # The next GET opens a new connection; the result is still
                # in res:ID even if the popped element went with the socket.
                if _repeatable(e) and not retried:
                    retried = True
                    continue
                raise _redis_error(e) from None
            retried = False
            if got is not None:
                return Result.decode(got[1])

    async def await_(self, job_id: str, timeout: Any = _DEFAULT) -> Result:
        """Async wait() ("await" is a keyword)."""
        timeout, deadline = self._deadline(timeout)
        done = self.key("done", job_id)
        retried = False
        while True:
            r = await self.aget(job_id)
            if r is not None:
                return r
            s = self._slice(deadline)
            if s is None:
                raise WaitTimeout("no result for %s after %s s" % (job_id, timeout), job_id)
            try:
                got = await (await self._ar()).blpop([done], timeout=round(s, 3))
            except redis.exceptions.RedisError as e:
                if _repeatable(e) and not retried:
                    retried = True
                    continue
                raise _redis_error(e) from None
            retried = False
            if got is not None:
                return Result.decode(got[1])

    ### Runs

    def run(self, argv: Sequence[str], *, timeout: Optional[float] = None,
            wait_timeout: Any = _DEFAULT, check: bool = False, **opts: Any) -> Result:
        """Runs argv (a list; PATH is searched) and returns its Result.

        timeout: seconds the job may run, its wall-clock limit
        (limits.wall_ms; None: the preset's), as AgentFense's run(cmd,
        timeout=30); the client waits that long plus WAIT_MARGIN for the
        result (or the client's default wait when that is longer).
        wait_timeout: seconds to wait for the result instead, whatever the
        job's limit (None: no limit); the job is left running when it passes.

        Options are the job's fields (docs/protocol.md): id, env (dict), cwd,
        stdin (bytes or str), limits (dict) or the limits one by one
        (wall_ms, cpu_ms, memory_bytes, pids, output_bytes, disk_bytes; the
        inode limit only as limits={"files": N}), preset, files (path ->
        bytes, str or a local pathlib.Path), perms, perm_preset (a name or
        a Preset from extend_preset()), net and allow (net="allow",
        allow=["pypi.example.org:443"]: the egress proxy to those hosts,
        within the tenant's net_allow), image (an image reference: "host",
        "docker://HOST/REPO:TAG", ...; see docs/images.md), sandbox (id or
        Sandbox), persist, deadline_ms, priority, labels, cases (see
        docs/protocol.md "Cases" and Result.cases).

        Returns the Result when the job ended on its own: status "ok", and
        "exit" or "signal" unless check=True (then CommandError). Raises
        JobTimeout, LimitExceeded, Rejected (SandboxNotFound...) or JobFailed
        for the other statuses, each with .result; WaitTimeout when the wait
        passes without a result.
        """
        job = with_timeout(Job.run(argv, **opts), timeout)
        return self._finish(self.wait(self.submit(job),
                                      self._wait_for(timeout, wait_timeout)), check)

    def sh(self, script: str, *, timeout: Optional[float] = None,
           wait_timeout: Any = _DEFAULT, check: bool = False, **opts: Any) -> Result:
        """Runs script with bash -c; as run()."""
        job = with_timeout(Job.sh(script, **opts), timeout)
        return self._finish(self.wait(self.submit(job),
                                      self._wait_for(timeout, wait_timeout)), check)

    def python(self, code: str, *, timeout: Optional[float] = None,
               wait_timeout: Any = _DEFAULT, check: bool = False,
               **opts: Any) -> Result:
        """Runs code with python3 -c; as run()."""
        job = with_timeout(Job.python(code, **opts), timeout)
        return self._finish(self.wait(self.submit(job),
                                      self._wait_for(timeout, wait_timeout)), check)

    async def arun(self, argv: Sequence[str], *, timeout: Optional[float] = None,
                   wait_timeout: Any = _DEFAULT, check: bool = False,
                   **opts: Any) -> Result:
        """Async run()."""
        jid = await self.asubmit(with_timeout(Job.run(argv, **opts), timeout))
        return self._finish(await self.await_(jid, self._wait_for(timeout, wait_timeout)),
                            check)

    async def ash(self, script: str, *, timeout: Optional[float] = None,
                  wait_timeout: Any = _DEFAULT, check: bool = False,
                  **opts: Any) -> Result:
        """Async sh()."""
        jid = await self.asubmit(with_timeout(Job.sh(script, **opts), timeout))
        return self._finish(await self.await_(jid, self._wait_for(timeout, wait_timeout)),
                            check)

    async def apython(self, code: str, *, timeout: Optional[float] = None,
                      wait_timeout: Any = _DEFAULT, check: bool = False,
                      **opts: Any) -> Result:
        """Async python()."""
        jid = await self.asubmit(with_timeout(Job.python(code, **opts), timeout))
        return self._finish(await self.await_(jid, self._wait_for(timeout, wait_timeout)),
                            check)

    @staticmethod
    def _finish(result: Result, check: bool) -> Result:
        return result.raise_for_status(check)

    ### Sandbox ops

    def call(self, op: str, *, wait_timeout: Any = _DEFAULT, **fields: Any) -> Result:
        """Runs one sandbox op (fs.*, kv.*, sandbox.*) and returns its Result;
        a refusal raises Rejected (SandboxNotFound, NotFound, ...).
        wait_timeout: seconds to wait (default: the client's); an op has
        no wall-clock limit of its own."""
        job = Job.sandbox_op(op, **fields)
        try:
            return self.wait(self.submit(job), wait_timeout).raise_for_status()
        except errors.Rejected as e:
            errors.name_path(e, fields.get("path"))
            raise

    async def acall(self, op: str, *, wait_timeout: Any = _DEFAULT,
                    **fields: Any) -> Result:
        """Async call()."""
        job = Job.sandbox_op(op, **fields)
        try:
            r = await self.await_(await self.asubmit(job), wait_timeout)
            return r.raise_for_status()
        except errors.Rejected as e:
            errors.name_path(e, fields.get("path"))
            raise

    ### Streaming

    @staticmethod
    def _stream_job(job: Any, opts: Dict[str, Any], timeout: Any) -> Job:
        """The job with stream=True (and timeout as its wall_ms), leaving a
        caller's Job as it was."""
        job = with_timeout(as_job(job, opts), timeout)
        return Job(dict(job.fields, stream=True))

    @staticmethod
    def _chunks(reply: Any, state: Dict[str, Any]) -> List[Chunk]:
        """Chunks of one XREAD reply; sets state["eof"] at the last entry."""
        out = []
        for _key, entries in reply or []:
            for entry_id, fields in entries:
                state["last"] = entry_id
                if fields.get(b"eof") == b"1":
                    state["eof"] = True
                    continue
                data = fields.get(b"data", b"")
                out.append(Chunk(int(fields.get(b"fd", b"1")), data))
        return out

    def stream(self, job: Any, *, timeout: Optional[float] = None,
               wait_timeout: Any = _DEFAULT, check: bool = False,
               **opts: Any) -> Iterator[Union[Chunk, Result]]:
        """Runs a job with stream=True and yields its output as it is written,
        Chunk(fd, data) tuples (fd 1 stdout, 2 stderr), then its Result last
        (raising as run() does instead, after every chunk).

        The output comes from the Redis stream sandq:{T}:out:ID (XREAD BLOCK
        from 0-0); its last entry has eof=1. Between reads the result is
        looked up too, so a job refused before it ran (no stream at all)
        ends the wait at once. timeout and wait_timeout as for run()."""
        job = self._stream_job(job, opts, timeout)
        timeout, deadline = self._deadline(self._wait_for(timeout, wait_timeout))
        self.submit(job)
        out = self.key("out", job.id)
        state = {"last": b"0-0", "eof": False}
        result = None
        while True:
            if not state["eof"]:
                s = self._slice(deadline)
                if s is None:
                    raise WaitTimeout("no result for %s after %s s" % (job.id, timeout),
                                      job.id)
                ms = max(1, min(STREAM_SLICE_MS, int(s * 1000)))
                reply = self._read(self.redis.xread, {out: state["last"]}, block=ms)
                for c in self._chunks(reply, state):
                    yield c
                if reply and not state["eof"]:
                    continue
            result = self.get(job.id)
            if result is not None or state["eof"]:
                break
        if result is None:
            result = self.wait(job.id, None if deadline is None
                               else max(0.0, deadline - time.monotonic()))
        # Entries written before the result that the last read missed.
        while not state["eof"]:
            reply = self._read(self.redis.xread, {out: state["last"]})
            if not reply:
                break
            for c in self._chunks(reply, state):
                yield c
        yield self._finish(result, check)

    async def astream(self, job: Any, *, timeout: Optional[float] = None,
                      wait_timeout: Any = _DEFAULT, check: bool = False,
                      **opts: Any) -> AsyncIterator[Union[Chunk, Result]]:
        """Async stream(): an async generator."""
        job = self._stream_job(job, opts, timeout)
        timeout, deadline = self._deadline(self._wait_for(timeout, wait_timeout))
        await self.asubmit(job)
        out = self.key("out", job.id)
        state = {"last": b"0-0", "eof": False}
        result = None
        while True:
            if not state["eof"]:
                s = self._slice(deadline)
                if s is None:
                    raise WaitTimeout("no result for %s after %s s" % (job.id, timeout),
                                      job.id)
                ms = max(1, min(STREAM_SLICE_MS, int(s * 1000)))
                reply = await self._aread("xread", {out: state["last"]}, block=ms)
                for c in self._chunks(reply, state):
                    yield c
                if reply and not state["eof"]:
                    continue
            result = await self.aget(job.id)
            if result is not None or state["eof"]:
                break
        if result is None:
            result = await self.await_(job.id, None if deadline is None
                                       else max(0.0, deadline - time.monotonic()))
        while not state["eof"]:
            reply = await self._aread("xread", {out: state["last"]})
            if not reply:
                break
            for c in self._chunks(reply, state):
                yield c
        yield self._finish(result, check)

    ### Batches

    @staticmethod
    def _batch_jobs(jobs: Iterable[Any], timeout: Any) -> List[Job]:
        """The jobs as Jobs, each with timeout as its wall_ms when given;
        InvalidJob before anything is sent when an id comes twice."""
        out, seen = [], set()
        for x in jobs:
            j = with_timeout(as_job(x, {}), timeout)
            if j.id in seen:
                raise errors.InvalidJob("batch: job id %s given twice" % j.id)
            seen.add(j.id)
            out.append(j)
        return out

    def batch(self, jobs: Iterable[Any], concurrency: int = 32, *,
              timeout: Optional[float] = None,
              wait_timeout: Any = _DEFAULT) -> Iterator[Result]:
        """Submits many jobs, keeping at most concurrency of them unfinished,
        and yields each Result as it arrives (completion order; match them
        to jobs by .id, which a Job knows before it is sent).

        jobs: Jobs, scripts (str), argv lists or dicts, all checked before
        the first is sent. Results are yielded whatever their status (use
        result.raise_for_status()). timeout: each job's wall-clock limit in
        seconds, as for run(); wait_timeout bounds the wait for the whole
        batch (default: the client's; WaitTimeout when it passes). Jobs
        already submitted keep running if the loop stops early.

        One BLPOP waits on every unfinished job's done list at once; after a
        slice without a result, their res keys are read (MGET), as wait()
        does for one."""
        todo = self._batch_jobs(jobs, timeout)
        waited, deadline = self._deadline(wait_timeout)
        todo.reverse()
        flying: Dict[str, str] = {}     # done key -> job id
        look = False
        while todo or flying:
            if todo and len(flying) < concurrency:
                pipe = self.redis.pipeline(transaction=False)
                while todo and len(flying) < concurrency:
                    j = todo.pop()
                    pipe.xadd(self.key("jobs"), {"job": j.pack()})
                    flying[self.key("done", j.id)] = j.id
                try:
                    pipe.execute()
                except redis.exceptions.RedisError as e:
                    raise _redis_error(e) from None
            if look:
                ids = list(flying.values())
                bufs = self._read(self.redis.mget, [self.key("res", i) for i in ids])
                look = False
                found = False
                for i, buf in zip(ids, bufs):
                    if buf is not None:
                        del flying[self.key("done", i)]
                        found = True
                        yield Result.decode(buf)
                if found:
                    continue
            s = self._slice(deadline)
            if s is None:
                raise WaitTimeout("batch: %d jobs without a result after %s s"
                                  % (len(flying) + len(todo), waited),
                                  next(iter(flying.values()), None))
            try:
                got = self.redis.blpop(list(flying), timeout=round(s, 3))
            except redis.exceptions.RedisError as e:
                if not _repeatable(e):
                    raise _redis_error(e) from None
                got = None
            if got is None:
                look = True
                continue
            key = got[0].decode() if isinstance(got[0], bytes) else got[0]
            flying.pop(key, None)
            yield Result.decode(got[1])

    async def abatch(self, jobs: Iterable[Any], concurrency: int = 32, *,
                     timeout: Optional[float] = None,
                     wait_timeout: Any = _DEFAULT) -> AsyncIterator[Result]:
        """Async batch(): an async generator."""
        todo = self._batch_jobs(jobs, timeout)
        waited, deadline = self._deadline(wait_timeout)
        todo.reverse()
        flying: Dict[str, str] = {}
        look = False
        r = await self._ar()
        while todo or flying:
            if todo and len(flying) < concurrency:
                pipe = r.pipeline(transaction=False)
                while todo and len(flying) < concurrency:
                    j = todo.pop()
                    pipe.xadd(self.key("jobs"), {"job": j.pack()})
                    flying[self.key("done", j.id)] = j.id
                try:
                    await pipe.execute()
                except redis.exceptions.RedisError as e:
                    raise _redis_error(e) from None
            if look:
                ids = list(flying.values())
                bufs = await self._aread("mget", [self.key("res", i) for i in ids])
                look = False
                found = False
                for i, buf in zip(ids, bufs):
                    if buf is not None:
                        del flying[self.key("done", i)]
                        found = True
                        yield Result.decode(buf)
                if found:
                    continue
            s = self._slice(deadline)
            if s is None:
                raise WaitTimeout("batch: %d jobs without a result after %s s"
                                  % (len(flying) + len(todo), waited),
                                  next(iter(flying.values()), None))
            try:
                got = await r.blpop(list(flying), timeout=round(s, 3))
            except redis.exceptions.RedisError as e:
                if not _repeatable(e):
                    raise _redis_error(e) from None
                got = None
            if got is None:
                look = True
                continue
            key = got[0].decode() if isinstance(got[0], bytes) else got[0]
            flying.pop(key, None)
            yield Result.decode(got[1])

    ### Sandboxes

    def sandbox(self, id: Optional[str] = None, *, snapshot: Optional[bytes] = None,
                files: Optional[Dict[str, Any]] = None,
                labels: Optional[Dict[str, str]] = None,
                keep: Optional[bool] = None, create: Optional[bool] = None,
                perms: Any = None, perm_preset: Union[None, str, Preset] = None,
                image: Optional[str] = None, workdir: Optional[str] = None,
                from_image_dir: Optional[str] = None,
                allow: Optional[List[str]] = None) -> "Sandbox":
        """A persistent sandbox (see sandq.Sandbox).

        sandbox()                   creates a new one at once (id "sbx-...")
        sandbox(files={...})        the same, seeded with files
        sandbox(snapshot=bytes)     created from an exported snapshot
        sandbox(image=REF, from_image_dir="/testbed")
                                    on an image, its first version that folder
                                    of the image, its files there in its runs
        sandbox("proj")             opens an existing one (SandboxNotFound if none)
        sandbox("proj", create=True)  creates it under that id

        image (docs/images.md "Sandboxes on images"): the image every run on
        the sandbox uses ("host" or a reference within the server's
        image_sources; a run naming another is rejected); workdir: where its
        files are in its runs (default /workspace, or from_image_dir);
        from_image_dir: the folder of image that becomes its first version;
        allow: the host patterns its net="allow" runs reach when they name
        none (within the tenant's net_allow; docs/security.md). Each of them
        makes a new sandbox. A sandbox this call created is
        deleted when its with block ends, unless keep=True; one it opened is
        kept unless keep=False. perms and perm_preset apply to every run and
        fs op made through the object."""
        from .sandbox import Sandbox
        sb, created = self._sandbox_plan(id, snapshot, files, create, image, workdir,
                                         from_image_dir, allow)
        s = Sandbox(self, sb, created=created, keep=keep, perms=perms,
                    perm_preset=perm_preset)
        if created and snapshot is not None:
            # By key first: a snapshot the tenant stores is not sent again.
            try:
                s._info(self.call("sandbox.create", sandbox=sb,
                                  snapshot_key=snapshot_key(snapshot), labels=labels,
                                  image=image, workdir=workdir, allow=allow).data)
                return s
            except errors.Rejected as e:
                if e.code != "snapshot_not_found":
                    raise
        if created:
            s._info(self.call("sandbox.create", sandbox=sb, snapshot=snapshot,
                              files=files, labels=labels, image=image,
                              workdir=workdir, from_image_dir=from_image_dir,
                              allow=allow).data)
        else:
            s._info(self.call("sandbox.info", sandbox=sb).data)
        return s

    def asandbox(self, id: Optional[str] = None, *, snapshot: Optional[bytes] = None,
                 files: Optional[Dict[str, Any]] = None,
                 labels: Optional[Dict[str, str]] = None,
                 keep: Optional[bool] = None, create: Optional[bool] = None,
                 perms: Any = None, perm_preset: Union[None, str, Preset] = None,
                 image: Optional[str] = None, workdir: Optional[str] = None,
                 from_image_dir: Optional[str] = None,
                 allow: Optional[List[str]] = None) -> "_Opening":
        """Async sandbox(): await it, or use it as "async with
        client.asandbox() as sb"."""
        from .sandbox import Sandbox, _Opening
        sb, created = self._sandbox_plan(id, snapshot, files, create, image, workdir,
                                         from_image_dir, allow)
        s = Sandbox(self, sb, created=created, keep=keep, perms=perms,
                    perm_preset=perm_preset)

        async def open_it() -> "Sandbox":
            if created and snapshot is not None:
                try:
                    r = await self.acall("sandbox.create", sandbox=sb,
                                         snapshot_key=snapshot_key(snapshot),
                                         labels=labels, image=image, workdir=workdir,
                                         allow=allow)
                    s._info(r.data)
                    return s
                except errors.Rejected as e:
                    if e.code != "snapshot_not_found":
                        raise
            if created:
                r = await self.acall("sandbox.create", sandbox=sb, snapshot=snapshot,
                                     files=files, labels=labels, image=image,
                                     workdir=workdir, from_image_dir=from_image_dir,
                                     allow=allow)
            else:
                r = await self.acall("sandbox.info", sandbox=sb)
            s._info(r.data)
            return s
        return _Opening(open_it)

    @staticmethod
    def _sandbox_plan(sb: Optional[str], snapshot: Optional[bytes], files: Any,
                      create: Optional[bool], image: Optional[str] = None,
                      workdir: Optional[str] = None,
                      from_image_dir: Optional[str] = None,
                      allow: Optional[List[str]] = None) -> Tuple[str, bool]:
        if snapshot is not None and files is not None:
            raise errors.InvalidJob("sandbox: files or snapshot, not both")
        if from_image_dir is not None and (snapshot is not None or files is not None):
            raise errors.InvalidJob("sandbox: from_image_dir, files or snapshot: "
                                    "one of them")
        want = (sb is None or snapshot is not None or files is not None or
                image is not None or workdir is not None or from_image_dir is not None or
                allow is not None)
        if create is False and want:
            raise errors.InvalidJob("sandbox: create=False needs an id and no "
                                    "files, snapshot, image, workdir or "
                                    "from_image_dir")
        return (sb if sb is not None else new_id("sbx")), bool(want or create)

    ### Batch runs with expect, progress and resume

    def batch_run(self, cases: Any, *, id: Optional[str] = None,
                  concurrency: int = batchrun.CONCURRENCY_DEFAULT,
                  base: Optional[str] = None, progress: Any = None,
                  on_result: Optional[Callable[["batchrun.BatchCase"], None]] = None
                  ) -> "batchrun.BatchSummary":
        """Runs a batch as `sandq batch run` does (docs/operations.md "Batch
        runs"): cases is a CASES.jsonl path or a list of jobs as dicts
        ({"op": "sh", "script": "echo 42", "expect": "42\n"}), each with
        an optional expect and expect_mode (exact, trim, regex), judged by
        the server. At most concurrency in flight; with base, each case on
        its own fork of that sandbox.

        Resumable: the batch id is id or a hash of the cases, case N is the
        job batch:ID:N, and running the same batch again skips every case
        whose result Redis holds. Progress goes to sandq:{T}:batch:ID (what
        `sandq batch status` and batch_status() read) and to a bar on
        stderr when it is a terminal (progress=True forces it, False
        silences it), or to progress(BatchProgress) when a callable.
        on_result(BatchCase) is called as each case is answered.

        Returns the BatchSummary (the CLI's --json summary, and .cases).
        Ctrl-C cancels the cases no host has read, waits up to 5 s for the
        rest, records the batch as interrupted and raises KeyboardInterrupt."""
        return batchrun.BatchRun(self, cases, id, concurrency, base, progress,
                                 on_result).run()

    def batch_status(self, batch_id: str) -> Optional[Dict[str, Any]]:
        """The progress record of a batch (`sandq batch status ID`), from
        this process, another, the CLI or the gateway; None if none."""
        return batchrun.status(self, batch_id)

    ### Operators: cancel, dead letters, status

    def cancel(self, job_id: str, *, queued_only: bool = False) -> str:
        """Cancels a job as `sandq cancel` does (one script, shared with the
        CLI and the gateway): a job no host has read is removed and
        answered "cancelled" at once ("cancelled"); one a host holds gets a
        cancellation the host acts on within a second ("cancelling"; with
        queued_only it is left alone: "held"). "finished" when it has a
        result already, "unknown" when no queued job has that id."""
        check_id("job id", job_id)
        try:
            return str(admin.cancel(self.redis, self.key, self.key("results"), job_id,
                                    queued_only)["outcome"])
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None

    def dead_letters(self, limit: int = 50) -> List[DeadLetter]:
        """The tenant's newest dead letters, newest first (`sandq dead ls`):
        jobs out of attempts and entries no id could be read from."""
        reply = self._read(self.redis.xrevrange, self.key("dead"), "+", "-",
                           count=limit)
        return admin._letters(reply)

    def dead_letter(self, ref: str) -> DeadLetter:
        """The dead letter ref names (its stream id, or the newest of a job
        id), as `sandq dead show`; Error naming ref if there is none."""
        d: Optional[DeadLetter] = self._read(admin.dead_find, self.redis,
                                             self.key("dead"), ref)
        if d is None:
            raise errors.Error("no dead letter '%s' in %s" % (ref, self.key("dead")))
        return d

    def dead_retry(self, ref: Union[str, DeadLetter]) -> str:
        """Submits a dead letter's job again under its own id (`sandq dead
        retry`): its old result, done list, attempts and the letter go in
        the same step. Returns the new stream entry's id."""
        d = ref if isinstance(ref, DeadLetter) else self.dead_letter(ref)
        try:
            return admin.dead_retry(self.redis, self.key, d)
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None

    def dead_purge(self, ref: Optional[Union[str, DeadLetter]] = None, *,
                   all: bool = False, older_than_s: Optional[float] = None) -> int:
        """Deletes dead letters (`sandq dead purge`): the one ref names,
        every one (all=True), or those older than older_than_s seconds.
        Returns how many went."""
        key = self.key("dead")
        try:
            if all:
                n = int(self.redis.xlen(key))
                self.redis.delete(key)
                return n
            if older_than_s is not None:
                cut = int(time.time() * 1000 - older_than_s * 1000)
                return int(self.redis.xtrim(key, minid="%d-0" % max(cut, 0)))
            if ref is None:
                raise errors.InvalidJob("dead_purge: a letter, all=True or older_than_s")
            d = ref if isinstance(ref, DeadLetter) else self.dead_letter(ref)
            return int(cast(Any, self.redis).xdel(key, d.dead_id))
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None

    def status(self) -> Dict[str, Any]:
        """What `sandq status --json` shows: {"workers", "live_hosts",
        "hosts": [{host, workers, busy, age_ms, audit_lost, live}],
        "tenants": [{name, queued, pulling, running, done_1m, refused_1m,
        share}]}, from the hosts hash sandq:hosts. Every tenant with the
        admin user's rights; this client's tenant only with a tenant's
        user (which may not read the tenant set)."""
        hosts = self._read(self.redis.hgetall, "%s:hosts" % self.prefix) or {}
        try:
            tenants = sorted(_text(t) for t in
                             self.redis.smembers("%s:tenants" % self.prefix))
        except redis.exceptions.ResponseError:
            tenants = []
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None
        if self.tenant not in tenants:
            tenants.append(self.tenant)
        backlog = {}
        for t in tenants:
            try:
                backlog[t] = int(self.redis.xlen("%s:{%s}:jobs" % (self.prefix, t)))
            except redis.exceptions.ResponseError:
                backlog[t] = 0
            except redis.exceptions.RedisError as e:
                raise _redis_error(e) from None
        return admin.status(hosts, tenants, backlog, int(time.time() * 1000))

    ### The audit trail

    def _audit_filter(self, job: Optional[str], sandbox: Optional[str], category: Any,
                      level: Optional[str], denied: bool, allowed: bool, since: Any,
                      until: Any) -> Filter:
        if denied and allowed:
            raise errors.InvalidJob("audit: denied or allowed, not both")
        now = int(time.time() * 1000)
        try:
            return audit.Filter(job=job, sandbox=sandbox, category=category,
                                level=level,
                                allowed=True if allowed else False if denied else None,
                                since_ms=audit.parse_when(since, now),
                                until_ms=audit.parse_when(until, now))
        except ValueError as e:
            raise errors.InvalidJob(str(e)) from None

    def audit(self, *, job: Optional[str] = None, sandbox: Optional[str] = None,
              category: Union[None, str, Sequence[str]] = None,
              level: Optional[str] = None, denied: bool = False, allowed: bool = False,
              since: Any = None, until: Any = None) -> Audit:
        """The tenant's audit events (docs/audit.md), oldest first, with
        `sandq audit`'s filters: job, sandbox, category (a name, "a,b" or a
        list), level (a minimum: info, notice, warning, alert), denied or
        allowed only, since (inclusive) and until (exclusive): "30s",
        "10m", "2h", "7d", "1w" back from now, seconds back (a number), a
        UTC time "2024-05-01T12:00:00Z" or an aware datetime.

        Returns an Audit: iterate it for AuditEvents; .summary() counts
        them per category and action; .export(path) writes them as JSON
        lines; .skipped names entries that were not events."""
        flt = self._audit_filter(job, sandbox, category, level, denied, allowed,
                                 since, until)

        def xrange(key: str, lo: str, hi: str, count: int) -> Any:
            return self._read(self.redis.xrange, key, lo, hi, count=count)
        return audit.read(xrange, self.key("audit"), flt)

    def audit_tail(self, *, job: Optional[str] = None, sandbox: Optional[str] = None,
                   category: Union[None, str, Sequence[str]] = None,
                   level: Optional[str] = None, denied: bool = False,
                   allowed: bool = False, since: Any = None,
                   timeout: Optional[float] = None) -> Iterator[AuditEvent]:
        """Yields the tenant's audit events as they are written (XREAD
        BLOCK), with audit()'s filters: from the moment of this call on
        (the position is taken here, not at the first next()), or from
        since. Ends after timeout seconds (None: never; break out of the
        loop to stop). Entries that are not events are skipped."""
        flt = self._audit_filter(job, sandbox, category, level, denied, allowed,
                                 since, None)
        key = self.key("audit")
        if flt.since_ms is None:
            last = self._read(self.redis.xrevrange, key, "+", "-", count=1)
            pos = audit._sid(last[0][0]) if last else "0-0"
        else:
            pos = "%d-0" % max(0, flt.since_ms - audit.CLOCK_SLACK_MS)
        end = None if timeout is None else time.monotonic() + timeout
        return self._audit_follow(key, pos, end, flt)

    def _audit_follow(self, key: str, pos: str, end: Optional[float],
                      flt: Filter) -> Iterator[AuditEvent]:
        while True:
            ms = STREAM_SLICE_MS
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return
                ms = max(1, min(ms, int(left * 1000)))
            reply = self._read(self.redis.xread, {key: pos}, count=audit.PAGE_COUNT,
                               block=ms)
            sink = audit.Audit()
            for _k, entries in reply or []:
                for sid, fields in entries:
                    pos = audit._sid(sid)
                    ev = audit._keep(sink, pos, fields, flt)
                    if ev is not None:
                        yield ev

    ### Presets

    def _presets(self) -> Dict[str, Preset]:
        buf = self._read(self.redis.get, "%s:perm_presets" % self.prefix)
        if buf is None:
            raise errors.Error("%s:perm_presets: not set: this sandqd does not "
                               "publish its presets (it writes them at start)"
                               % self.prefix)
        return parse_presets(buf)

    def list_presets(self) -> List[str]:
        """The names of the server's path-rule presets (docs/paths.md
        "Presets"), in its order: what perm_preset= may name."""
        return list(self._presets())

    def get_preset(self, name: str) -> Preset:
        """The server's preset name: its description, default level and
        rules, exactly what sandqd enforces. InvalidJob naming it if the
        server has no such preset."""
        table = self._presets()
        if name not in table:
            raise presets_unknown(name, list(table))
        return table[name]

    def extend_preset(self, name: str, additions: Any = ()) -> Preset:
        """The preset name with additions (path rules: {pattern, level}
        dicts, AgentFense's {pattern, permission}, (pattern, level) pairs
        or {pattern: level}) on top. Give it as perm_preset= (or preset=)
        to a run, a sandbox or an fs op: it is sent as perm_preset=name and
        perms=additions, and the additions win on a tie, as a job's rules
        always do. InvalidJob naming it if the server has no such preset."""
        base = self.get_preset(name)
        added = [Rule(r["pattern"], r["level"]) for r in check_perms(additions)]
        return Preset(base.name, base.description, base.default,
                      list(base.rules) + added, base=base.name, additions=added)

    ### Async twins of the calls above, in the default executor

    async def _in_thread(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """fn(*args, **kw) on the event loop's default executor: these calls
        are a few Redis round trips (or a local walk) whose blocking client
        is safe to share between threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: fn(*args, **kw))

    async def abatch_run(self, cases: Any, **kw: Any) -> "batchrun.BatchSummary":
        """Async batch_run() (Ctrl-C handling is the thread's, not the loop's)."""
        out: batchrun.BatchSummary = await self._in_thread(self.batch_run, cases, **kw)
        return out

    async def abatch_status(self, batch_id: str) -> Optional[Dict[str, Any]]:
        """Async batch_status()."""
        out: Optional[Dict[str, Any]] = await self._in_thread(self.batch_status,
                                                             batch_id)
        return out

    async def acancel(self, job_id: str, *, queued_only: bool = False) -> str:
        """Async cancel()."""
        return str(await self._in_thread(self.cancel, job_id, queued_only=queued_only))

    async def adead_letters(self, limit: int = 50) -> List[DeadLetter]:
        """Async dead_letters()."""
        return list(await self._in_thread(self.dead_letters, limit))

    async def adead_retry(self, ref: Union[str, DeadLetter]) -> str:
        """Async dead_retry()."""
        return str(await self._in_thread(self.dead_retry, ref))

    async def astatus(self) -> Dict[str, Any]:
        """Async status()."""
        return dict(await self._in_thread(self.status))

    async def aaudit(self, **filters: Any) -> Audit:
        """Async audit(), with its filters."""
        out: Audit = await self._in_thread(self.audit, **filters)
        return out

    async def alist_presets(self) -> List[str]:
        """Async list_presets()."""
        return list(await self._in_thread(self.list_presets))

    async def aget_preset(self, name: str) -> Preset:
        """Async get_preset()."""
        out: Preset = await self._in_thread(self.get_preset, name)
        return out

    async def aextend_preset(self, name: str, additions: Any = ()) -> Preset:
        """Async extend_preset()."""
        out: Preset = await self._in_thread(self.extend_preset, name, additions)
        return out

    def sandboxes(self) -> List[Dict[str, Any]]:
        """Info maps of every sandbox of the tenant (sandbox.list)."""
        return self.call("sandbox.list").data or []

    async def asandboxes(self) -> List[Dict[str, Any]]:
        """Async sandboxes()."""
        return (await self.acall("sandbox.list")).data or []

    def __repr__(self) -> str:
        return "<sandq.Client %s tenant=%s>" % (self.url, self.tenant)
