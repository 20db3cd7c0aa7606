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
import re
import time
from typing import Dict, Optional

import redis
import redis.asyncio

from . import errors
from .errors import ConnectionError, WaitTimeout
from .job import Job, as_job, new_id
from .result import Result

WAIT_SLICE = 10.0          # longest single BLPOP, seconds (libsandq WAIT_SLICE_MS)
STREAM_SLICE_MS = 1000     # longest single XREAD BLOCK, then a GET of the result
CONNECT_TIMEOUT = 5.0      # seconds (libsandq CONNECT_TIMEOUT_MS)
COMMAND_TIMEOUT = 30.0     # socket timeout; outlasts a BLPOP slice plus grace
MIN_BLOCK = 0.01           # shortest BLPOP: Redis reads 0 as "forever"

_TENANT_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_DEFAULT = object()        # "the client's default timeout"


class Chunk(tuple):
    """A piece of a streamed job's output: (fd, data), fd 1 for stdout and 2
    for stderr, data bytes (at most 64 KiB)."""

    __slots__ = ()

    def __new__(cls, fd, data):
        return tuple.__new__(cls, (fd, data))

    @property
    def fd(self):
        return self[0]

    @property
    def data(self):
        return self[1]

    def __repr__(self):
        return "Chunk(fd=%d, data=%r)" % self


def _redis_error(e):
    return ConnectionError("redis: %s" % (e,))


def _repeatable(e):
    """True for failures after which the same read may simply be sent again."""
    return isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))


async def _keeper(aredis):
    """Closes aredis's pool when its event loop finalises async generators."""
    try:
        yield
    finally:
        await aredis.connection_pool.disconnect()


class Client:
    """A connection to sandq for one tenant.

    url is a redis-py URL: redis://[[USER]:PASS@]HOST:PORT[/DB], rediss://...
    or unix:///PATH. timeout is the default number of seconds every wait
    lasts (None: no limit; a job's own limit is its wall_ms). The client is
    safe to share between threads; its async twins share it between tasks of
    one event loop.

        with sandq.Client("redis://127.0.0.1:6379") as client:
            print(client.sh("echo hi").stdout_text)
    """

    def __init__(self, url="redis://127.0.0.1:6379", tenant="default", *,
                 prefix="sandq", timeout=None):
        if not isinstance(tenant, str) or not _TENANT_RE.match(tenant):
            raise errors.InvalidJob("tenant %r: expected 1..64 bytes of [A-Za-z0-9_-]"
                                    % (tenant,))
        self.url = url
        self.tenant = tenant
        self.prefix = prefix
        self.timeout = timeout
        self._kw = dict(socket_connect_timeout=CONNECT_TIMEOUT,
                        socket_timeout=COMMAND_TIMEOUT)
        try:
            self.redis = redis.Redis.from_url(url, **self._kw)
        except (ValueError, redis.exceptions.RedisError) as e:
            raise ConnectionError("redis url %r: %s" % (url, e)) from None
        self._aredis = None
        self._aloop = None
        self._akeeper = None

    ### Connection

    def key(self, kind, job_id=None):
        """The Redis key sandq:{TENANT}:KIND[:ID] (jobs, res, done, out...)."""
        k = "%s:{%s}:%s" % (self.prefix, self.tenant, kind)
        return k if job_id is None else "%s:%s" % (k, job_id)

    async def _ar(self):
        """The redis.asyncio client of the running event loop.

        Its sockets belong to the loop that opened them, so each loop (each
        asyncio.run(), say) gets a pool of its own. A keeper async generator
        closes that pool when its loop ends: asyncio.run() finalises async
        generators (their finally blocks run) before it closes the loop, so
        the sockets are closed on the loop that owns them rather than left
        to redis-py's __del__, which cannot once the loop is closed."""
        loop = asyncio.get_running_loop()
        if self._aredis is None or self._aloop is not loop:
            r = redis.asyncio.Redis.from_url(self.url, **self._kw)
            keeper = _keeper(r)
            await keeper.__anext__()
            self._aredis, self._aloop, self._akeeper = r, loop, keeper
        return self._aredis

    def close(self):
        """Closes the connections of the blocking calls."""
        self.redis.connection_pool.disconnect()

    async def aclose(self):
        """Closes the connections of the async calls (and of the blocking ones)."""
        keeper, loop = self._akeeper, self._aloop
        self._aredis = self._aloop = self._akeeper = None
        if keeper is not None and loop is asyncio.get_running_loop():
            await keeper.aclose()
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    def _read(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except redis.exceptions.RedisError as e:
            if not _repeatable(e):
                raise _redis_error(e) from None
        try:
            return fn(*args, **kw)
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None

    async def _aread(self, command, *args, **kw):
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

    def submit(self, job, **opts):
        """Adds a job and returns its id at once. job is a Job, a shell script
        (str), an argv (list) or a dict; opts as for sh()."""
        job = as_job(job, opts)
        try:
            self.redis.xadd(self.key("jobs"), {"job": job.pack()})
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None
        return job.id

    async def asubmit(self, job, **opts):
        """Async submit()."""
        job = as_job(job, opts)
        try:
            await (await self._ar()).xadd(self.key("jobs"), {"job": job.pack()})
        except redis.exceptions.RedisError as e:
            raise _redis_error(e) from None
        return job.id

    def get(self, job_id):
        """The stored result of a job, or None if there is none (yet, or any
        longer: results expire after result_ttl_s, a day by default)."""
        buf = self._read(self.redis.get, self.key("res", job_id))
        return None if buf is None else Result.decode(buf)

    async def aget(self, job_id):
        """Async get()."""
        buf = await self._aread("get", self.key("res", job_id))
        return None if buf is None else Result.decode(buf)

    def _deadline(self, timeout):
        if timeout is _DEFAULT:
            timeout = self.timeout
        return timeout, (None if timeout is None else time.monotonic() + timeout)

    @staticmethod
    def _slice(deadline):
        """Seconds of the next BLPOP, or None when the wait is over."""
        if deadline is None:
            return WAIT_SLICE
        left = deadline - time.monotonic()
        return None if left < MIN_BLOCK else min(WAIT_SLICE, left)

    def wait(self, job_id, timeout=_DEFAULT):
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
                got = self.redis.blpop([done], timeout="%.3f" % s)
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

    async def await_(self, job_id, timeout=_DEFAULT):
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
                got = await (await self._ar()).blpop([done], timeout="%.3f" % s)
            except redis.exceptions.RedisError as e:
                if _repeatable(e) and not retried:
                    retried = True
                    continue
                raise _redis_error(e) from None
            retried = False
            if got is not None:
                return Result.decode(got[1])

    ### Runs

    def run(self, argv, *, timeout=_DEFAULT, check=False, **opts):
        """Runs argv (a list; PATH is searched) and returns its Result.

        Options are the job's fields (docs/protocol.md): id, env (dict), cwd,
        stdin (bytes or str), limits (dict) or the limits one by one
        (wall_ms, cpu_ms, memory_bytes, pids, output_bytes, disk_bytes; the
        inode limit only as limits={"files": N}), preset, files (path ->
        bytes, str or a local pathlib.Path), perms, perm_preset, net and
        allow (net="allow", allow=["pypi.example.org:443"]: the egress
        proxy to those hosts, within the tenant's net_allow), image
        (an image reference: "host", "docker://HOST/REPO:TAG", ...; see
        docs/images.md), sandbox (id or Sandbox), persist, deadline_ms, priority, labels.

        Returns the Result when the job ended on its own: status "ok", and
        "exit" or "signal" unless check=True (then CommandError). Raises
        JobTimeout, LimitExceeded, Rejected (SandboxNotFound...) or JobFailed
        for the other statuses, each with .result; WaitTimeout when timeout
        seconds pass without a result.
        """
        return self._finish(self.wait(self.submit(Job.run(argv, **opts)), timeout), check)

    def sh(self, script, *, timeout=_DEFAULT, check=False, **opts):
        """Runs script with bash -c; as run()."""
        return self._finish(self.wait(self.submit(Job.sh(script, **opts)), timeout), check)

    def python(self, code, *, timeout=_DEFAULT, check=False, **opts):
        """Runs code with python3 -c; as run()."""
        return self._finish(self.wait(self.submit(Job.python(code, **opts)), timeout),
                            check)

    async def arun(self, argv, *, timeout=_DEFAULT, check=False, **opts):
        """Async run()."""
        jid = await self.asubmit(Job.run(argv, **opts))
        return self._finish(await self.await_(jid, timeout), check)

    async def ash(self, script, *, timeout=_DEFAULT, check=False, **opts):
        """Async sh()."""
        jid = await self.asubmit(Job.sh(script, **opts))
        return self._finish(await self.await_(jid, timeout), check)

    async def apython(self, code, *, timeout=_DEFAULT, check=False, **opts):
        """Async python()."""
        jid = await self.asubmit(Job.python(code, **opts))
        return self._finish(await self.await_(jid, timeout), check)

    @staticmethod
    def _finish(result, check):
        return result.raise_for_status(check)

    ### Sandbox ops

    def call(self, op, *, timeout=_DEFAULT, **fields):
        """Runs one sandbox op (fs.*, kv.*, sandbox.*) and returns its Result;
        a refusal raises Rejected (SandboxNotFound, NotFound, ...)."""
        job = Job.sandbox_op(op, **fields)
        return self.wait(self.submit(job), timeout).raise_for_status()

    async def acall(self, op, *, timeout=_DEFAULT, **fields):
        """Async call()."""
        job = Job.sandbox_op(op, **fields)
        return (await self.await_(await self.asubmit(job), timeout)).raise_for_status()

    ### Streaming

    @staticmethod
    def _stream_job(job, opts):
        """The job with stream=True, leaving a caller's Job as it was."""
        job = as_job(job, opts)
        return Job(dict(job.fields, stream=True))

    @staticmethod
    def _chunks(reply, state):
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

    def stream(self, job, *, timeout=_DEFAULT, check=False, **opts):
        """Runs a job with stream=True and yields its output as it is written,
        Chunk(fd, data) tuples (fd 1 stdout, 2 stderr), then its Result last
        (raising as run() does instead, after every chunk).

        The output comes from the Redis stream sandq:{T}:out:ID (XREAD BLOCK
        from 0-0); its last entry has eof=1. Between reads the result is
        looked up too, so a job refused before it ran (no stream at all)
        ends the wait at once."""
        job = self._stream_job(job, opts)
        timeout, deadline = self._deadline(timeout)
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

    async def astream(self, job, *, timeout=_DEFAULT, check=False, **opts):
        """Async stream(): an async generator."""
        job = self._stream_job(job, opts)
        timeout, deadline = self._deadline(timeout)
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
    def _batch_jobs(jobs):
        out, seen = [], set()
        for j in jobs:
            j = as_job(j, {})
            if j.id in seen:
                raise errors.InvalidJob("batch: job id %s given twice" % j.id)
            seen.add(j.id)
            out.append(j)
        return out

    def batch(self, jobs, concurrency=32, timeout=_DEFAULT):
        """Submits many jobs, keeping at most concurrency of them unfinished,
        and yields each Result as it arrives (completion order; match them
        to jobs by .id, which a Job knows before it is sent).

        jobs: Jobs, scripts (str), argv lists or dicts, all checked before
        the first is sent. Results are yielded whatever their status (use
        result.raise_for_status()). timeout bounds the whole batch. Jobs
        already submitted keep running if the loop stops early.

        One BLPOP waits on every unfinished job's done list at once; after a
        slice without a result, their res keys are read (MGET), as wait()
        does for one."""
        todo = self._batch_jobs(jobs)
        timeout, deadline = self._deadline(timeout)
        todo.reverse()
        flying = {}                 # done key -> job id
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
                                  % (len(flying) + len(todo), timeout),
                                  next(iter(flying.values()), None))
            try:
                got = self.redis.blpop(list(flying), timeout="%.3f" % s)
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

    async def abatch(self, jobs, concurrency=32, timeout=_DEFAULT):
        """Async batch(): an async generator."""
        todo = self._batch_jobs(jobs)
        timeout, deadline = self._deadline(timeout)
        todo.reverse()
        flying = {}
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
                                  % (len(flying) + len(todo), timeout),
                                  next(iter(flying.values()), None))
            try:
                got = await r.blpop(list(flying), timeout="%.3f" % s)
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
                files: Optional[dict] = None, labels: Optional[Dict[str, str]] = None,
                keep: Optional[bool] = None, create: Optional[bool] = None,
                perms=None, perm_preset: Optional[str] = None,
                image: Optional[str] = None, workdir: Optional[str] = None,
                from_image_dir: Optional[str] = None) -> "Sandbox":
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
        from_image_dir: the folder of image that becomes its first version.
        Each of them makes a new sandbox. A sandbox this call created is
        deleted when its with block ends, unless keep=True; one it opened is
        kept unless keep=False. perms and perm_preset apply to every run and
        fs op made through the object."""
        from .sandbox import Sandbox
        sb, created = self._sandbox_plan(id, snapshot, files, create, image, workdir,
                                         from_image_dir)
        s = Sandbox(self, sb, created=created, keep=keep, perms=perms,
                    perm_preset=perm_preset)
        if created:
            s._info(self.call("sandbox.create", sandbox=sb, snapshot=snapshot,
                              files=files, labels=labels, image=image,
                              workdir=workdir, from_image_dir=from_image_dir).data)
        else:
            s._info(self.call("sandbox.info", sandbox=sb).data)
        return s

    def asandbox(self, id: Optional[str] = None, *, snapshot: Optional[bytes] = None,
                 files: Optional[dict] = None, labels: Optional[Dict[str, str]] = None,
                 keep: Optional[bool] = None, create: Optional[bool] = None,
                 perms=None, perm_preset: Optional[str] = None,
                 image: Optional[str] = None, workdir: Optional[str] = None,
                 from_image_dir: Optional[str] = None):
        """Async sandbox(): await it, or use it as "async with
        client.asandbox() as sb"."""
        from .sandbox import Sandbox, _Opening
        sb, created = self._sandbox_plan(id, snapshot, files, create, image, workdir,
                                         from_image_dir)
        s = Sandbox(self, sb, created=created, keep=keep, perms=perms,
                    perm_preset=perm_preset)

        async def open_it():
            if created:
                r = await self.acall("sandbox.create", sandbox=sb, snapshot=snapshot,
                                     files=files, labels=labels, image=image,
                                     workdir=workdir, from_image_dir=from_image_dir)
            else:
                r = await self.acall("sandbox.info", sandbox=sb)
            s._info(r.data)
            return s
        return _Opening(open_it)

    @staticmethod
    def _sandbox_plan(sb, snapshot, files, create, image=None, workdir=None,
                      from_image_dir=None):
        if snapshot is not None and files is not None:
            raise errors.InvalidJob("sandbox: files or snapshot, not both")
        if from_image_dir is not None and (snapshot is not None or files is not None):
            raise errors.InvalidJob("sandbox: from_image_dir, files or snapshot: "
                                    "one of them")
        want = (sb is None or snapshot is not None or files is not None or
                image is not None or workdir is not None or from_image_dir is not None)
        if create is False and want:
            raise errors.InvalidJob("sandbox: create=False needs an id and no "
                                    "files, snapshot, image, workdir or "
                                    "from_image_dir")
        return (sb if sb is not None else new_id("sbx")), bool(want or create)

    def sandboxes(self):
        """Info maps of every sandbox of the tenant (sandbox.list)."""
        return self.call("sandbox.list").data or []

    async def asandboxes(self):
        """Async sandboxes()."""
        return (await self.acall("sandbox.list")).data or []

    def __repr__(self):
        return "<sandq.Client %s tenant=%s>" % (self.url, self.tenant)
