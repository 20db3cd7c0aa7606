"""sandq: run code in sandq's Linux sandboxes from Python.

    import sandq

    client = sandq.Client("redis://127.0.0.1:6379", "default")
    print(client.sh("echo hi").stdout)

    with client.sandbox() as sb:            # a persistent sandbox, deleted after
        sb.write_file("data.txt", "1 2 3")
        print(sb.bash("wc -w data.txt").stdout)

    with sandq.Sandbox.from_local("./proj", preset="agent-safe") as sb:
        print(sb.bash("python3 main.py", check=False, timeout=30).stdout)

A client of the wire protocol in docs/protocol.md, needing only redis-py and
msgpack. Result.stdout is str (stdout_bytes the bytes); a run's timeout= is
its wall-clock limit. Beyond runs and sandboxes: cases=, batch_run() (the
CLI's batches), cancel, dead letters, status, audit() and audit_tail(),
list_presets() / get_preset() / extend_preset(). Typed (py.typed).

Client submits jobs and waits for results (and has async twins of every
call: arun, ash, apython, asubmit, await_, astream, abatch, asandbox);
Sandbox is a persistent workspace; sandq.tools has agent tool definitions;
sandq.errors the exceptions, all subclasses of sandq.Error.
"""

from . import tools
from .client import Chunk, Client
from .errors import (CommandError, ConnectionError, Error, InvalidJob, JobFailed,
                     JobTimeout, LimitExceeded, NotFound, PermissionDenied, Rejected,
                     SandboxNotFound, TimeoutError, WaitTimeout)
from .admin import DeadLetter
from .audit import Audit, AuditEvent
from .batchrun import BatchCase, BatchProgress, BatchSummary
from .job import Job
from .local import LocalTreeError
from .presets import Preset, Rule
from .result import CaseResult, Result
from .sandbox import HistoryEntry, KV, Sandbox
from .util import files_from_dir, snapshot_key

__version__ = "0.2.0"

__all__ = [
    "Client", "Sandbox", "KV", "HistoryEntry", "Job", "Result", "Chunk",
    "Preset", "Rule", "CaseResult", "DeadLetter", "Audit", "AuditEvent",
    "BatchCase", "BatchProgress", "BatchSummary", "LocalTreeError",
    "files_from_dir", "snapshot_key", "tools",
    "Error", "InvalidJob", "ConnectionError", "TimeoutError", "JobTimeout",
    "WaitTimeout", "CommandError", "LimitExceeded", "Rejected", "SandboxNotFound",
    "NotFound", "PermissionDenied", "JobFailed",
]
