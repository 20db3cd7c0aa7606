"""Sandbox: a tenant's persistent workspace, as one object.

A sandbox is a /workspace that lasts across jobs (docs/protocol.md,
"Sandboxes"): runs on it start from its head and commit what they changed as
the next version; the fs.*, kv.* and sandbox.* ops read and change it
without starting a process. Get one from Client.sandbox(), or from a local
folder with Sandbox.from_local() (AgentFense's name; sandq.local builds the
snapshot). The method names follow LocalSandbox (bash, execute_python,
read_file, write_file, list_files, exists, delete_file, kv, history,
export_snapshot), and agent-sandbox's commands.run, files.read/write and
terminate are there too, so code written for any of them ports by changing
how the sandbox is made (README.md, "Porting guide").

Paths are the sandbox's own: "/" is its root, which a job sees as
/workspace (or its workdir); "a/b", "/a/b" and "/workspace/a/b" are the
same file.

Each method has an async twin named with an "a" in front.
"""

import asyncio
import json
import shlex

import os
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, Dict, Generator, Iterable,
                    List, Optional, Sequence, Union)

if TYPE_CHECKING:
    from .client import Client

from .client import _DEFAULT, with_timeout
from .errors import NotFound
from .job import check_sandbox_id, json_text, new_id, Job
from .presets import Preset
from .result import Result


# LocalSandbox's names of the run ops in its history.
_LOCAL_NAMES = {"sh": "bash", "python": "python"}


class HistoryEntry:
    """One recorded call (a tool_calls row): a job or op that committed.

    As in LocalSandbox's history: name is "bash" for a shell run and
    "python" for python code (else sandq's op: "exec", "fs.write", ...),
    parameters["command"] the script (parameters["code"] the code) and
    result["exitCode"] the exit code. Beside them, sandq's own: op (the
    wire op, "sh" for bash), parameters["script"], result["exit_code"],
    "status", "stdout" and "stderr" for runs; status is "success" or
    "error"; times in epoch ms."""

    __slots__ = ("id", "op", "name", "parameters", "result", "error", "status",
                 "started_at", "completed_at", "duration_ms")

    def __init__(self, row: Dict[str, Any]) -> None:
        self.id = row.get("id")
        self.op: str = row.get("name", "")
        self.name: str = _LOCAL_NAMES.get(self.op, self.op)
        self.parameters: Any = _json_or_text(row.get("parameters"))
        self.result: Any = _json_or_text(row.get("result"))
        if isinstance(self.parameters, dict):
            if "script" in self.parameters:
                self.parameters.setdefault("command", self.parameters["script"])
            elif isinstance(self.parameters.get("argv"), list):
                self.parameters.setdefault(
                    "command", shlex.join(str(a) for a in self.parameters["argv"]))
        if isinstance(self.result, dict) and "exit_code" in self.result:
            self.result.setdefault("exitCode", self.result["exit_code"])
        self.error = row.get("error") or None
        self.status = row.get("status", "")
        self.started_at = row.get("started_at", 0)
        self.completed_at = row.get("completed_at", 0)
        self.duration_ms = row.get("duration_ms", 0)

    def __repr__(self) -> str:
        return "<sandq.HistoryEntry %s %s %s>" % (self.id, self.name, self.status)


def _has_parent(path: str) -> bool:
    """True when path names a file below a folder of the sandbox rather
    than at its root ("a/b", not "a", "/a" or "/workspace/a")."""
    parts = [c for c in path.split("/") if c not in ("", ".")]
    if len(parts) > 1 and parts[0] == "workspace":
        parts = parts[1:]
    return len(parts) > 1


def _json_or_text(s: Any) -> Any:
    if not s:
        return None
    try:
        return json.loads(s)
    except ValueError:
        return s


class KV:
    """The sandbox's key-value store. Values are JSON: set() stores any
    JSON-serialisable value and get() returns it decoded, so strings round
    trip as strings, as with LocalSandbox. Each change is a new version."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def get(self, key: str, default: Any = None) -> Any:
        """The value of key, or default if there is none."""
        try:
            r = self._sb._op("kv.get", key=key)
        except NotFound:
            return default
        return json.loads(r.data)

    def set(self, key: str, value: Any) -> None:
        self._sb._op("kv.set", key=key, value=json_text(value))

    def delete(self, key: str) -> None:
        """Deletes key; a key that is not there is not an error."""
        try:
            self._sb._op("kv.delete", key=key)
        except NotFound:
            pass

    def keys(self, prefix: str = "") -> List[str]:
        """Keys starting with prefix, in byte order."""
        return list(self._sb._op("kv.keys", prefix=prefix).data or [])

    async def aget(self, key: str, default: Any = None) -> Any:
        try:
            r = await self._sb._aop("kv.get", key=key)
        except NotFound:
            return default
        return json.loads(r.data)

    async def aset(self, key: str, value: Any) -> None:
        await self._sb._aop("kv.set", key=key, value=json_text(value))

    async def adelete(self, key: str) -> None:
        try:
            await self._sb._aop("kv.delete", key=key)
        except NotFound:
            pass

    async def akeys(self, prefix: str = "") -> List[str]:
        return list((await self._sb._aop("kv.keys", prefix=prefix)).data or [])


class Commands:
    """sandbox.commands, as agent-sandbox's: run(command) is bash(command,
    check=False): the result comes back whatever the exit code."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def run(self, command: str, timeout: Optional[float] = None,
            **opts: Any) -> Result:
        """Runs command with bash; timeout is its wall-clock limit (s)."""
        return self._sb.bash(command, check=False, timeout=timeout, **opts)


class Files:
    """sandbox.files, as agent-sandbox's: write(path, content) and
    read(path) -> bytes. Paths are the sandbox's own ("/" its root)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def write(self, path: str, content: Union[str, bytes]) -> None:
        """Writes content (str as UTF-8), creating missing folders."""
        self._sb.write_file(path, content)

    def read(self, path: str) -> bytes:
        """The file's content."""
        return self._sb.read_file_bytes(path)


class Sandbox:
    """A persistent sandbox of client's tenant. Made by Client.sandbox().

    .id is its id, .version its version after the last call made through
    this object, .created whether this object created it, .keep whether the
    end of a with block leaves it in place.
    """

    def __init__(self, client: "Client", id: str, *, created: bool,
                 keep: Optional[bool] = None, perms: Any = None,
                 perm_preset: Union[None, str, Preset] = None) -> None:
        self.client = client
        self.id = check_sandbox_id("sandbox", id)
        self.created = created
        self.keep = (not created) if keep is None else keep
        self.perms = perms
        self.perm_preset = perm_preset
        self.version = 0
        self.labels: Dict[str, str] = {}
        self.image = None           # the image its runs use, or None: theirs
        self.workdir = "/workspace"  # where its files are in its runs
        self.deleted = False
        self.kv = KV(self)
        self.commands = Commands(self)
        self.files = Files(self)

    def _info(self, data: Any) -> Any:
        if isinstance(data, dict):
            self.version = data.get("version", self.version)
            self.labels = data.get("labels") or {}
            self.image = data.get("image")
            self.workdir = data.get("workdir") or "/workspace"
        return data

    def _track(self, result: Result) -> Result:
        if result.version:
            self.version = result.version
        return result

    def _fields(self, op: str, fields: Dict[str, Any]) -> Dict[str, Any]:
        fields["sandbox"] = self.id
        # Path rules go with fs ops only: kv and sandbox ops refuse them.
        if op.startswith("fs."):
            if self.perms is not None:
                fields.setdefault("perms", self.perms)
            if self.perm_preset is not None:
                fields.setdefault("perm_preset", self.perm_preset)
        return fields

    def _op(self, op: str, **fields: Any) -> Result:
        return self._track(self.client.call(op, **self._fields(op, fields)))

    async def _aop(self, op: str, **fields: Any) -> Result:
        return self._track(await self.client.acall(op, **self._fields(op, fields)))

    def _job(self, kind: str, body: Any, opts: Dict[str, Any]) -> Job:
        opts["sandbox"] = self.id
        if self.perms is not None:
            opts.setdefault("perms", self.perms)
        if self.perm_preset is not None and not isinstance(opts.get("preset"), Preset):
            opts.setdefault("perm_preset", self.perm_preset)
        job: Job = getattr(Job, kind)(body, **opts)
        return job

    def _run(self, job: Job, timeout: Any, wait_timeout: Any, check: bool) -> Result:
        job = with_timeout(job, timeout)
        wait = self.client._wait_for(timeout, wait_timeout)
        r = self._track(self.client.wait(self.client.submit(job), wait))
        return r.raise_for_status(check)

    async def _arun(self, job: Job, timeout: Any, wait_timeout: Any,
                    check: bool) -> Result:
        job = with_timeout(job, timeout)
        wait = self.client._wait_for(timeout, wait_timeout)
        r = self._track(await self.client.await_(await self.client.asubmit(job), wait))
        return r.raise_for_status(check)

    ### Runs

    def bash(self, command: str, check: bool = True, *,
             timeout: Optional[float] = None, wait_timeout: Any = _DEFAULT,
             **opts: Any) -> Result:
        """Runs command with bash in the sandbox and returns its Result.
        The workspace, the working directory and exported variables carry
        over to the next bash call. With check=True (the default, as
        LocalSandbox) a non-zero exit raises CommandError; limits and
        refusals raise whatever check says. timeout is the job's wall-clock
        limit in seconds, wait_timeout how long to wait instead (see
        Client.run())."""
        return self._run(self._job("sh", command, opts), timeout, wait_timeout, check)

    def execute_python(self, code: str, check: bool = True, *,
                       timeout: Optional[float] = None, wait_timeout: Any = _DEFAULT,
                       **opts: Any) -> Result:
        """Runs code with python3 -c in the sandbox; as bash()."""
        return self._run(self._job("python", code, opts), timeout, wait_timeout, check)

    def run(self, argv: Sequence[str], check: bool = True, *,
            timeout: Optional[float] = None, wait_timeout: Any = _DEFAULT,
            **opts: Any) -> Result:
        """Runs argv in the sandbox; as bash()."""
        return self._run(self._job("run", argv, opts), timeout, wait_timeout, check)

    async def abash(self, command: str, check: bool = True, *,
                    timeout: Optional[float] = None, wait_timeout: Any = _DEFAULT,
                    **opts: Any) -> Result:
        return await self._arun(self._job("sh", command, opts), timeout, wait_timeout,
                                check)

    async def aexecute_python(self, code: str, check: bool = True, *,
                              timeout: Optional[float] = None, wait_timeout: Any = _DEFAULT,
                              **opts: Any) -> Result:
        return await self._arun(self._job("python", code, opts), timeout, wait_timeout,
                                check)

    async def arun(self, argv: Sequence[str], check: bool = True, *,
                   timeout: Optional[float] = None, wait_timeout: Any = _DEFAULT,
                   **opts: Any) -> Result:
        return await self._arun(self._job("run", argv, opts), timeout, wait_timeout, check)

    ### Files

    def read_file(self, path: str) -> str:
        """The file's content as text (UTF-8; invalid bytes replaced).
        NotFound (a FileNotFoundError) if there is no such file."""
        return bytes(self._op("fs.read", path=path).data).decode("utf-8", "replace")

    def read_file_bytes(self, path: str) -> bytes:
        """The file's content as bytes."""
        return bytes(self._op("fs.read", path=path).data)

    def write_file(self, path: str, content: Any, mode: Optional[int] = None,
                   parents: bool = True) -> None:
        """Writes content (str as UTF-8, or bytes) to path, as a new version.
        Missing parent folders are created, as LocalSandbox does (mkdir -p,
        each checked by the path rules); parents=False refuses a path whose
        folder does not exist (NotFound)."""
        self._op("fs.write", path=path, data=content, mode=mode,
                 parents=True if parents and _has_parent(path) else None)

    def write_file_bytes(self, path: str, data: bytes, mode: Optional[int] = None,
                         parents: bool = True) -> None:
        """write_file() under LocalSandbox's name for bytes."""
        self.write_file(path, data, mode, parents)

    def list_files(self, path: str = "/") -> List[str]:
        """The names in the folder path."""
        return [e["name"] for e in self._op("fs.list", path=path).data or []]

    def entries(self, path: str = "/", recursive: bool = False) -> List[Dict[str, Any]]:
        """Entries of the folder path (with recursive, its whole subtree):
        dicts {path, name, type, size, mode, mtime[, target]}."""
        return list(self._op("fs.list", path=path, recursive=recursive).data or [])

    def stat(self, path: str) -> Dict[str, Any]:
        """The entry of path (as entries() gives)."""
        return dict(self._op("fs.stat", path=path).data)

    def exists(self, path: str) -> bool:
        """True if path exists (and is visible to this object's path rules)."""
        if path.strip("/") in ("", ".", "workspace"):
            return True
        try:
            self._op("fs.stat", path=path)
        except NotFound:
            return False
        return True

    def delete_file(self, path: str, recursive: bool = False) -> int:
        """Deletes path (a folder only if empty, unless recursive). Returns
        the number of entries removed."""
        return int(self._op("fs.delete", path=path, recursive=recursive).data["removed"])

    async def aread_file(self, path: str) -> str:
        return bytes((await self._aop("fs.read", path=path)).data).decode("utf-8",
                                                                         "replace")

    async def aread_file_bytes(self, path: str) -> bytes:
        return bytes((await self._aop("fs.read", path=path)).data)

    async def awrite_file(self, path: str, content: Any, mode: Optional[int] = None,
                          parents: bool = True) -> None:
        await self._aop("fs.write", path=path, data=content, mode=mode,
                        parents=True if parents and _has_parent(path) else None)

    async def awrite_file_bytes(self, path: str, data: bytes, mode: Optional[int] = None,
                                parents: bool = True) -> None:
        await self.awrite_file(path, data, mode, parents)

    async def alist_files(self, path: str = "/") -> List[str]:
        return [e["name"] for e in (await self._aop("fs.list", path=path)).data or []]

    async def aentries(self, path: str = "/",
                       recursive: bool = False) -> List[Dict[str, Any]]:
        return list((await self._aop("fs.list", path=path,
                                     recursive=recursive)).data or [])

    async def astat(self, path: str) -> Dict[str, Any]:
        return dict((await self._aop("fs.stat", path=path)).data)

    async def aexists(self, path: str) -> bool:
        if path.strip("/") in ("", ".", "workspace"):
            return True
        try:
            await self._aop("fs.stat", path=path)
        except NotFound:
            return False
        return True

    async def adelete_file(self, path: str, recursive: bool = False) -> int:
        r = await self._aop("fs.delete", path=path, recursive=recursive)
        return int(r.data["removed"])

    ### History, snapshots, forks

    def history(self, limit: Optional[int] = None) -> List[HistoryEntry]:
        """The recorded calls, oldest first (the last limit of them)."""
        calls = [HistoryEntry(c) for c in self._op("sandbox.history").data["calls"]]
        return calls[-limit:] if limit else calls

    def versions(self) -> List[Dict[str, Any]]:
        """The versions, newest first: dicts {version, snapshot, created_at}."""
        return list(self._op("sandbox.history").data["versions"])

    def info(self) -> Dict[str, Any]:
        """The info map: {sandbox, version, snapshot, size, created_at,
        updated_at, labels}, and image and workdir when it records them."""
        return dict(self._info(self._op("sandbox.info").data))

    def export_snapshot(self) -> bytes:
        """The head as an AgentFS SQLite database (bytes): give it to
        Client.sandbox(snapshot=...) or open it with sqlite3."""
        return bytes(self._op("sandbox.export").data)

    def import_snapshot(self, snapshot: bytes) -> Dict[str, Any]:
        """Commits an AgentFS database (bytes; a LocalSandbox export too) as
        the next version. Returns the info map."""
        return dict(self._info(self._op("sandbox.import", snapshot=snapshot).data))

    def fork(self, new_id: Optional[str] = None, *, keep: Optional[bool] = None,
             labels: Optional[Dict[str, str]] = None) -> "Sandbox":
        """A new sandbox sharing this one's head (no copy). Like any sandbox
        created here, its with block deletes it unless keep=True."""
        to = new_id or _new_sandbox_id()
        fork = Sandbox(self.client, to, created=True, keep=keep, perms=self.perms,
                       perm_preset=self.perm_preset)
        fork._info(self.client.call("sandbox.fork", sandbox=self.id, to=to,
                                    labels=labels).data)
        return fork

    @classmethod
    def from_local(cls, path: Union[str, "os.PathLike[str]"], *,
                   client: Optional[Any] = None, preset: Optional[Any] = "agent-safe",
                   permissions: Any = None, ignore_patterns: Iterable[str] = (),
                   id: Optional[str] = None, labels: Optional[Dict[str, str]] = None,
                   keep: Optional[bool] = None) -> "Sandbox":
        """A new sandbox holding the local folder path, as AgentFense's
        Sandbox.from_local() and `sandq sandbox create --from` make one:
        .git and what the .gitignore files ignore are left out (ignored
        folders are never read), plus ignore_patterns (.gitignore lines at
        the root that the tree's files cannot undo). The folder goes up as
        one AgentFS snapshot (sandbox.create with snapshot), so a whole
        repository is one job; sandqd holds it to the tenant's ceilings.

        client: the sandq.Client (default: one for $SANDQ_REDIS and
        $SANDQ_TENANT). preset: the path preset of every run and fs op made
        through the object (a name or a Preset, as AgentFense's preset=),
        agent-safe unless given, as AgentFense's from_local (None: the
        server's default for jobs, agent-edit);
        permissions: path rules on top (AgentFense's permissions=, perms=
        here). Special files, names that are not clean UTF-8 and another
        file system inside the folder raise LocalTreeError naming the
        entry, as the CLI refuses them. A with block deletes the sandbox
        unless keep=True."""
        from .client import Client
        from .local import snapshot_from_dir
        if client is None:
            client = Client()
        snap, _entries, _pruned = snapshot_from_dir(path, ignore_patterns)
        return client.sandbox(id, snapshot=snap, create=True, labels=labels, keep=keep,
                              perms=permissions, perm_preset=preset)

    @classmethod
    async def afrom_local(cls, path: Union[str, "os.PathLike[str]"],
                          **kw: Any) -> "Sandbox":
        """Async from_local(), on the event loop's default executor (the walk
        and the upload block)."""
        loop = asyncio.get_running_loop()
        out: Sandbox = await loop.run_in_executor(None,
                                                  lambda: cls.from_local(path, **kw))
        return out

    def delete(self) -> None:
        """Deletes the sandbox and every version of it (once)."""
        if not self.deleted:
            self.client.call("sandbox.delete", sandbox=self.id)
            self.deleted = True

    def destroy(self) -> None:
        """delete() under LocalSandbox's and AgentFense's name."""
        self.delete()

    def terminate(self) -> None:
        """delete() under agent-sandbox's name."""
        self.delete()

    async def ahistory(self, limit: Optional[int] = None) -> List[HistoryEntry]:
        calls = [HistoryEntry(c)
                 for c in (await self._aop("sandbox.history")).data["calls"]]
        return calls[-limit:] if limit else calls

    async def aversions(self) -> List[Dict[str, Any]]:
        return list((await self._aop("sandbox.history")).data["versions"])

    async def ainfo(self) -> Dict[str, Any]:
        return dict(self._info((await self._aop("sandbox.info")).data))

    async def aexport_snapshot(self) -> bytes:
        return bytes((await self._aop("sandbox.export")).data)

    async def aimport_snapshot(self, snapshot: bytes) -> Dict[str, Any]:
        r = await self._aop("sandbox.import", snapshot=snapshot)
        return dict(self._info(r.data))

    async def afork(self, new_id: Optional[str] = None, *, keep: Optional[bool] = None,
                    labels: Optional[Dict[str, str]] = None) -> "Sandbox":
        to = new_id or _new_sandbox_id()
        fork = Sandbox(self.client, to, created=True, keep=keep, perms=self.perms,
                       perm_preset=self.perm_preset)
        r = await self.client.acall("sandbox.fork", sandbox=self.id, to=to, labels=labels)
        fork._info(r.data)
        return fork

    async def adelete(self) -> None:
        if not self.deleted:
            await self.client.acall("sandbox.delete", sandbox=self.id)
            self.deleted = True

    async def adestroy(self) -> None:
        await self.adelete()

    ### with blocks

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.keep or self.deleted:
            return
        try:
            self.delete()
        except Exception:
            # Do not hide the error that ended the block behind this one.
            if exc_type is None:
                raise

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.keep or self.deleted:
            return
        try:
            await self.adelete()
        except Exception:
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        return "<sandq.Sandbox %s version=%d>" % (self.id, self.version)


def _new_sandbox_id() -> str:
    return new_id("sbx")


class _Opening:
    """What Client.asandbox() returns: awaitable (the Sandbox) and usable as
    "async with", which also deletes it at the end as a with block does."""

    def __init__(self, opener: Callable[[], Awaitable["Sandbox"]]) -> None:
        self._opener = opener
        self._sandbox: Optional[Sandbox] = None

    def __await__(self) -> Generator[Any, None, "Sandbox"]:
        async def opened() -> "Sandbox":
            return await self._opener()
        return opened().__await__()

    async def __aenter__(self) -> "Sandbox":
        self._sandbox = await self._opener()
        return self._sandbox

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(exc_type, exc, tb)
