"""Exceptions of the sandq client.

Every exception the client raises on purpose is a sandq.Error. Those that
come from a job's result carry it as .result (a sandq.Result), so the output
written before a limit stopped the job is never lost.

    Error
    +-- InvalidJob        the job cannot be sent as given (also a ValueError)
    +-- ConnectionError   Redis could not be reached or failed (also the builtin)
    +-- TimeoutError      (also the builtin TimeoutError)
    |   +-- JobTimeout    the job ran past its wall_ms: status "timeout"
    |   +-- WaitTimeout   no result arrived within the client's wait timeout;
    |                     the job may still be queued or running
    +-- CommandError      the command exited non-zero or was killed by a signal
    +-- LimitExceeded     memory, cpu, pids, output or disk limit
    +-- Rejected          status "rejected": .code and .message say why
    |   +-- SandboxNotFound   code "sandbox_not_found"
    |   +-- NotFound          code "not_found" (also FileNotFoundError)
    |   +-- PermissionDenied  code "permission" (also PermissionError)
    +-- JobFailed         "expired", "cancelled" or "internal": not the job's doing
"""

import builtins
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .result import Result

# Statuses that mean a limit stopped the job, and the limit's short name.
LIMIT_STATUSES = {
    "memory_limit": "memory",
    "cpu_limit": "cpu",
    "pids_limit": "pids",
    "output_limit": "output",
    "disk_limit": "disk",
}


class Error(Exception):
    """Base class of every error the sandq client raises."""

    def __init__(self, message: str, result: Optional["Result"] = None) -> None:
        super().__init__(message)
        self.result = result        # the sandq.Result behind it, if any


class InvalidJob(Error, ValueError):
    """An option the protocol cannot carry; nothing was sent."""


class ConnectionError(Error, builtins.ConnectionError):
    """Redis could not be reached, or answered with an error."""


class TimeoutError(Error, builtins.TimeoutError):
    """A job timeout (JobTimeout) or a wait timeout (WaitTimeout)."""


class JobTimeout(TimeoutError):
    """The job ran past its wall-clock limit and was killed (status "timeout")."""


class WaitTimeout(TimeoutError):
    """No result within the wait timeout. The job may still run: wait again
    with client.wait(exc.job_id)."""

    def __init__(self, message: str, job_id: Optional[str]) -> None:
        super().__init__(message)
        self.job_id = job_id


class CommandError(Error):
    """The command exited non-zero (status "exit") or was killed by a signal
    (status "signal"); raised when check=True."""

    def __init__(self, message: str, result: "Result") -> None:
        super().__init__(message, result)
        self.exit_code = result.exit_code
        self.signal = result.signal
        self.stdout = result.stdout_text
        self.stderr = result.stderr_text


class LimitExceeded(Error):
    """The job reached a memory, cpu, pids, output or disk limit.

    .limit is "memory", "cpu", "pids", "output" or "disk"; .status is the
    result's status ("memory_limit", ...)."""

    def __init__(self, message: str, result: "Result") -> None:
        super().__init__(message, result)
        self.status = result.status
        self.limit = LIMIT_STATUSES.get(result.status, result.status)


class Rejected(Error):
    """sandqd refused the job or op: .code ("invalid_job", "not_found",
    "queue_full", ...) and .message (naming the field or the reason);
    .path the path of the op (fs.*), else None."""

    path: Optional[str] = None

    def __init__(self, message: str, result: Optional["Result"] = None,
                 code: Optional[str] = None) -> None:
        super().__init__(message, result)
        self.code = code if code is not None else (result.error_code if result else None)
        self.message = result.error_message if result else message


class SandboxNotFound(Rejected):
    """No such sandbox for this tenant."""


class NotFound(Rejected, builtins.FileNotFoundError):
    """No such path (or kv key) in the sandbox, or a path at level "none".
    .path (and .filename) is the path of the op, when it had one."""


class PermissionDenied(Rejected, builtins.PermissionError):
    """A path rule forbids the operation. .path (and .filename) is the
    path of the op, when it had one."""


class JobFailed(Error):
    """sandq did not run the job to its end: "expired" (its deadline passed),
    "cancelled" (sandq cancel) or "internal" (a failure of sandq itself)."""

    def __init__(self, message: str, result: "Result") -> None:
        super().__init__(message, result)
        self.status = result.status
        self.code = result.error_code


def name_path(e: Rejected, path: Optional[str]) -> None:
    """Gives a refusal of an op the path it was about: .path, and for
    NotFound and PermissionDenied also .filename, as OSError has it."""
    if path is not None and e.path is None:
        e.path = path
        if isinstance(e, builtins.OSError):
            e.filename = path


_REJECTED_BY_CODE = {
    "sandbox_not_found": SandboxNotFound,
    "not_found": NotFound,
    "permission": PermissionDenied,
}


def error_for(result: "Result", check: bool) -> Optional[Error]:
    """The exception a result stands for, or None for a result to return.

    "ok" is never an error; "exit" and "signal" are only when check is true
    (CommandError). Every other status is one, whatever check says."""
    st = result.status
    what = "job %s" % result.id
    if st == "ok":
        return None
    if st in ("exit", "signal"):
        if not check:
            return None
        if st == "exit":
            msg = "%s: exit code %d" % (what, result.exit_code)
        else:
            msg = "%s: killed by signal %d" % (what, result.signal)
        tail = result.stderr_text.strip()
        if tail:
            msg += ": " + tail[-500:]
        return CommandError(msg, result)
    detail = result.error_message or ""
    if st == "timeout":
        return JobTimeout("%s: timeout%s" % (what, ": " + detail if detail else ""),
                          result)
    if st in LIMIT_STATUSES:
        return LimitExceeded("%s: %s%s" % (what, st, ": " + detail if detail else ""),
                             result)
    if st == "rejected":
        cls = _REJECTED_BY_CODE.get(result.error_code or "", Rejected)
        return cls("%s: rejected (%s): %s" % (what, result.error_code, detail), result)
    return JobFailed("%s: %s (%s): %s" % (what, st, result.error_code, detail), result)
