"""Jobs: the msgpack map a client adds to sandq:{T}:jobs, built from options.

docs/protocol.md ("Job") is the reference. As libsandq/libsandq.c does, this
module checks what the protocol bounds (ids, env names, limit names, sizes,
path rules' levels) before anything is sent, so a mistake is told at once
and by name (InvalidJob); which fields an op accepts, path syntax and
ceilings stay the server's call, and it names the field it refuses.
No I/O here: options in, a Job out.
"""

import json
import os
import re
import secrets
from typing import Any, Dict, List, Optional, Sequence

import msgpack

from .errors import InvalidJob
from .presets import Preset

ID_MAX = 128
ARGV_MAX = 4096
ARG_MAX = 128 * 1024            # bytes of one argument, script or code
EXEC_BYTES_MAX = 1024 * 1024    # argv + env
ENV_MAX = 1024
ENV_NAME_MAX = 256
STDIN_MAX = 16 * 1024 * 1024
FILES_MAX = 1024
FILES_BYTES_MAX = 64 * 1024 * 1024
LABELS_MAX = 64
LABEL_MAX = 256
PERMS_MAX = 256
PATTERN_MAX = 4096
DATA_MAX = 64 * 1024 * 1024
KV_KEY_MAX = 1024
KV_VALUE_MAX = 1024 * 1024
CASES_MAX = 1000                # cases of one run (JOB_CASES_MAX)
EXPECT_MODES = ("exact", "trim", "regex")
SNAPSHOT_MAX = 128 * 1024 * 1024

LIMITS = ("wall_ms", "cpu_ms", "memory_bytes", "pids", "output_bytes",
          "disk_bytes", "files")
# Limits that may also be given as keyword arguments. "files" may not: that
# name is the option seeding files, so the inode limit goes in limits={}.
LIMIT_KWARGS = LIMITS[:-1]
PRESETS = ("strict", "normal", "permissive")
LEVELS = ("none", "view", "read", "write")
RUN_OPS = ("exec", "sh", "python")
SANDBOX_OPS = ("fs.read", "fs.write", "fs.list", "fs.stat", "fs.delete",
               "kv.get", "kv.set", "kv.delete", "kv.keys", "sandbox.create",
               "sandbox.fork", "sandbox.delete", "sandbox.export",
               "sandbox.import", "sandbox.history", "sandbox.info",
               "sandbox.list")

# Options of exec, sh and python (keyword arguments of run/sh/python).
RUN_OPTIONS = frozenset(("id", "env", "cwd", "stdin", "limits", "preset", "files",
                         "labels", "net", "allow", "image", "sandbox", "persist",
                         "perms", "perm_preset", "priority", "deadline_ms", "stream",
                         "cases")
                        + LIMIT_KWARGS)
# Fields of the sandbox ops that callers may give.
OP_FIELDS = frozenset(("id", "sandbox", "path", "data", "mode", "recursive", "key",
                       "value", "prefix", "to", "snapshot", "snapshot_key",
                       "labels", "files",
                       "perms", "perm_preset", "priority", "deadline_ms",
                       "image", "workdir", "from_image_dir", "parents", "allow"))
IMAGE_MAX = 1024                # bytes of an image reference
ROOT_DIR_MAX = 1024             # bytes of a workdir or from_image_dir

_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")
_KEY_RE = re.compile(r"[0-9a-f]{64}\Z")


def _allow(allow: Any) -> List[str]:
    """An allow list: 1 to 64 host patterns ("pypi.example:443", "*.github.com")."""
    if isinstance(allow, (str, bytes)) or not 1 <= len(allow) <= 64:
        raise InvalidJob("allow: expected a list of 1 to 64 host patterns")
    return [_str("allow", a, 1, 262) for a in allow]
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def new_id(prefix: str = "j") -> str:
    """A random job id: "j-" and 24 lower-case hex digits, as libsandq makes."""
    return "%s-%s" % (prefix, secrets.token_hex(12))


def check_id(what: str, v: Any) -> str:
    """v if it is a valid job id; InvalidJob naming what otherwise."""
    if not isinstance(v, str) or not _ID_RE.match(v):
        raise InvalidJob("%s %r: expected 1..%d bytes of [A-Za-z0-9._:-]"
                         % (what, v, ID_MAX))
    return v


def check_sandbox_id(what: str, v: Any) -> str:
    """The id of a sandbox given as a string or a Sandbox object."""
    if not isinstance(v, str):
        v = getattr(v, "id", v)
    sid = check_id(what, v)
    if sid in (".", ".."):
        raise InvalidJob("%s %r: not . or .." % (what, sid))
    return sid


def _bytes(what: str, v: Any) -> bytes:
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, os.PathLike):
        # As LocalSandbox: a local path seeds that file's content.
        with open(v, "rb") as f:
            return f.read()
    raise InvalidJob("%s: expected bytes or str, got %s" % (what, type(v).__name__))


def _str(what: str, v: Any, lo: int = 0, hi: Optional[int] = None) -> str:
    if not isinstance(v, str):
        raise InvalidJob("%s: expected a string, got %s" % (what, type(v).__name__))
    n = len(v.encode("utf-8", "surrogateescape"))
    if n < lo or (hi is not None and n > hi):
        raise InvalidJob("%s: expected %d..%s bytes, got %d"
                         % (what, lo, hi if hi is not None else "", n))
    return v


def _int(what: str, v: Any, lo: Optional[int] = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidJob("%s: expected an integer, got %r" % (what, v))
    if lo is not None and v < lo:
        raise InvalidJob("%s: must be at least %d, got %d" % (what, lo, v))
    return v


def _bool(what: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise InvalidJob("%s: expected True or False, got %r" % (what, v))
    return v


def _env(v: Any) -> Dict[str, str]:
    if not isinstance(v, dict):
        raise InvalidJob("env: expected a dict of name -> value")
    if len(v) > ENV_MAX:
        raise InvalidJob("env: more than %d variables" % ENV_MAX)
    out = {}
    for k, val in v.items():
        if not isinstance(k, str) or len(k) > ENV_NAME_MAX or not _ENV_RE.match(k):
            raise InvalidJob("env: %r is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
                             % (k,))
        out[k] = _str("env %s" % k, val)
    return out


def _limits(given: Any, kwargs: Dict[str, Any]) -> Dict[str, int]:
    out = {}
    if given is not None:
        if not isinstance(given, dict):
            raise InvalidJob("limits: expected a dict")
        for k, v in given.items():
            if k not in LIMITS:
                raise InvalidJob("limits: unknown limit %r (one of %s)"
                                 % (k, ", ".join(LIMITS)))
            out[k] = _int("limits.%s" % k, v, 1)
    for k, v in kwargs.items():
        v = _int(k, v, 1)
        if k in out and out[k] != v:
            raise InvalidJob("%s: given twice, %d and %d" % (k, out[k], v))
        out[k] = v
    return out


def _files(v: Any) -> Dict[str, bytes]:
    if not isinstance(v, dict):
        raise InvalidJob("files: expected a dict of path -> bytes")
    if len(v) > FILES_MAX:
        raise InvalidJob("files: more than %d files" % FILES_MAX)
    out, total = {}, 0
    for path, data in v.items():
        _str("files", path, 1, 4096)
        if ".." in path.split("/"):
            raise InvalidJob("files: %r has a '..' component" % path)
        b = _bytes("files %s" % path, data)
        total += len(b)
        if total > FILES_BYTES_MAX:
            raise InvalidJob("files: more than %d bytes in all" % FILES_BYTES_MAX)
        out[path] = b
    return out


def _cases(v: Any) -> List[Dict[str, Any]]:
    """cases as the protocol takes them: a list of {stdin, expect,
    expect_mode} (each optional; a str or bytes is a case's stdin)."""
    if isinstance(v, (str, bytes, dict)) or not isinstance(v, (list, tuple)):
        raise InvalidJob("cases: expected a list of {stdin, expect, expect_mode}")
    if not 1 <= len(v) <= CASES_MAX:
        raise InvalidJob("cases: expected 1..%d cases, got %d" % (CASES_MAX, len(v)))
    out = []
    for i, c in enumerate(v):
        if isinstance(c, (str, bytes)):
            c = {"stdin": c}
        if not isinstance(c, dict):
            raise InvalidJob("cases[%d]: expected {stdin, expect, expect_mode}" % i)
        extra = set(c) - {"stdin", "expect", "expect_mode"}
        if extra:
            raise InvalidJob("cases[%d]: unknown key %r" % (i, sorted(extra)[0]))
        m = {}
        if c.get("stdin") is not None:
            m["stdin"] = _bytes("cases[%d].stdin" % i, c["stdin"])
        if c.get("expect") is not None:
            m["expect"] = _bytes("cases[%d].expect" % i, c["expect"])
        if c.get("expect_mode") is not None:
            if c["expect_mode"] not in EXPECT_MODES:
                raise InvalidJob("cases[%d].expect_mode %r: expected exact, trim or regex"
                                 % (i, c["expect_mode"]))
            if "expect" not in m:
                raise InvalidJob("cases[%d]: expect_mode without expect" % i)
            m["expect_mode"] = c["expect_mode"]
        out.append(m)
    return out


def _labels(v: Any) -> Dict[str, str]:
    if not isinstance(v, dict):
        raise InvalidJob("labels: expected a dict of str -> str")
    if len(v) > LABELS_MAX:
        raise InvalidJob("labels: more than %d labels" % LABELS_MAX)
    return {_str("labels key", k, 1, LABEL_MAX): _str("labels %s" % k, val, 0, LABEL_MAX)
            for k, val in v.items()}


def _perms(v: Any) -> List[Dict[str, str]]:
    """Path rules as a list of {pattern, level}. Takes that list, (pattern,
    level) pairs, a dict pattern -> level, and AgentFense's key
    "permission" for "level"."""
    if isinstance(v, dict):
        v = list(v.items())
    if not isinstance(v, (list, tuple)):
        raise InvalidJob("perms: expected a list of {pattern, level}")
    if len(v) > PERMS_MAX:
        raise InvalidJob("perms: more than %d rules" % PERMS_MAX)
    out = []
    for i, rule in enumerate(v):
        if isinstance(rule, dict):
            extra = set(rule) - {"pattern", "level", "permission"}
            if extra:
                raise InvalidJob("perms[%d]: unknown key %r" % (i, sorted(extra)[0]))
            pattern = rule.get("pattern")
            level = rule.get("level", rule.get("permission"))
        elif isinstance(rule, (list, tuple)) and len(rule) == 2:
            pattern, level = rule
        else:
            raise InvalidJob("perms[%d]: expected {pattern, level} or (pattern, level)" % i)
        pattern = _str("perms[%d] pattern" % i, pattern, 1, PATTERN_MAX)
        if any(ord(c) < 0x20 or ord(c) == 0x7f for c in pattern):
            raise InvalidJob("perms[%d]: pattern has a control character" % i)
        if level not in LEVELS:
            raise InvalidJob("perms[%d] %r: level %r: expected none, view, read or write"
                             % (i, pattern, level))
        out.append({"pattern": pattern, "level": level})
    return out


class Job:
    """One job, ready to be packed and added to the tenant's stream.

    Build one with Job.sh(script), Job.run(argv), Job.python(code) (the same
    keyword options as Client.sh) or Job.sandbox_op(name, ...) for a sandbox
    op (fs.*, kv.*, sandbox.*).
    .id is known before submission; .fields is the wire map.
    """

    __slots__ = ("fields",)

    def __init__(self, fields: Dict[str, Any]) -> None:
        self.fields = fields

    @property
    def id(self) -> str:
        return str(self.fields["id"])

    @property
    def op(self) -> str:
        return str(self.fields["op"])

    @classmethod
    def sh(cls, script: str, **opts: Any) -> "Job":
        """bash -c SCRIPT."""
        return cls._run("sh", _text_arg("script", script), opts)

    @classmethod
    def python(cls, code: str, **opts: Any) -> "Job":
        """python3 -c CODE."""
        return cls._run("python", _text_arg("code", code), opts)

    @classmethod
    def run(cls, argv: Sequence[str], **opts: Any) -> "Job":
        """argv run directly (PATH is searched)."""
        if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
            raise InvalidJob("argv: expected a list of strings (use sh() for a "
                             "command line)")
        if not argv or not argv[0]:
            raise InvalidJob("argv: empty, or an empty program name")
        if len(argv) > ARGV_MAX:
            raise InvalidJob("argv: more than %d entries" % ARGV_MAX)
        argv = [_str("argv[%d]" % i, a, 0, ARG_MAX - 1) for i, a in enumerate(argv)]
        return cls._run("exec", argv, opts)

    @classmethod
    def _run(cls, op: str, body: Any, opts: Dict[str, Any]) -> "Job":
        unknown = set(opts) - RUN_OPTIONS
        if unknown:
            raise TypeError("unknown option %r (see help(sandq.Client.sh))"
                            % sorted(unknown)[0])
        f: Dict[str, Any] = {"v": 1, "id": _job_id(opts.get("id")), "op": op}
        exec_bytes = 0
        if op == "exec":
            f["argv"] = body
            exec_bytes = sum(len(a.encode("utf-8", "surrogateescape")) + 1 for a in body)
        else:
            f["script" if op == "sh" else "code"] = body
            exec_bytes = len(body.encode("utf-8", "surrogateescape")) + 12
        if opts.get("env") is not None:
            f["env"] = _env(opts["env"])
            exec_bytes += sum(len(k) + len(v.encode("utf-8", "surrogateescape")) + 2
                              for k, v in f["env"].items())
        if exec_bytes > EXEC_BYTES_MAX:
            raise InvalidJob("arguments and environment exceed %d bytes" % EXEC_BYTES_MAX)
        if opts.get("cwd") is not None:
            f["cwd"] = _str("cwd", opts["cwd"], 1, 4096)
        if opts.get("stdin") is not None:
            f["stdin"] = _bytes("stdin", opts["stdin"])
            if len(f["stdin"]) > STDIN_MAX:
                raise InvalidJob("stdin: more than %d bytes" % STDIN_MAX)
        lim = _limits(opts.get("limits"),
                      {k: opts[k] for k in LIMIT_KWARGS if opts.get(k) is not None})
        if lim:
            f["limits"] = lim
        perm_preset = opts.get("perm_preset")
        if isinstance(opts.get("preset"), Preset):
            # AgentFense's preset= is a path preset: a Preset goes there too.
            if perm_preset is not None:
                raise InvalidJob("preset and perm_preset: both name a path preset")
            perm_preset = opts["preset"]
        elif opts.get("preset") is not None:
            if opts["preset"] not in PRESETS:
                raise InvalidJob("preset %r: expected strict, normal or permissive "
                                 "(path presets go in perm_preset=)" % (opts["preset"],))
            f["preset"] = opts["preset"]
        if opts.get("files"):
            f["files"] = _files(opts["files"])
        if opts.get("labels"):
            f["labels"] = _labels(opts["labels"])
        if opts.get("net") is not None:
            f["net"] = _str("net", opts["net"], 1, 32)
        if opts.get("allow") is not None:
            # net="allow": host patterns, each inside the tenant's net_allow
            f["allow"] = _allow(opts["allow"])
        if opts.get("image") is not None:
            # The server checks the reference and its sources (docs/images.md).
            f["image"] = _str("image", opts["image"], 1, 1024)
        _common(f, opts)
        if opts.get("stream"):
            f["stream"] = _bool("stream", opts["stream"])
        sandbox = opts.get("sandbox")
        persist = opts.get("persist")
        if sandbox is not None:
            f["sandbox"] = check_sandbox_id("sandbox", sandbox)
        if persist is not None:
            _bool("persist", persist)
            if persist and sandbox is None:
                raise InvalidJob("persist: needs a sandbox")
        if opts.get("cases") is not None:
            f["cases"] = _cases(opts["cases"])
            if "stdin" in f:
                raise InvalidJob("cases: each case has its own stdin; not with stdin")
            if persist:
                raise InvalidJob("cases: cases never commit; not with persist=True")
            if sandbox is not None and persist is None:
                persist = False
        if sandbox is not None:
            # As libsandq: a run on a sandbox always says persist.
            f["persist"] = True if persist is None else persist
        _path_rules(f, perm_preset, opts.get("perms"))
        return cls(f)

    @classmethod
    def sandbox_op(cls, name: str, **fields: Any) -> "Job":
        """A sandbox op (fs.*, kv.*, sandbox.*) with its operands."""
        if name not in SANDBOX_OPS:
            raise InvalidJob("op %r: not an op on a sandbox (fs.*, kv.*, sandbox.*)"
                             % (name,))
        unknown = set(fields) - OP_FIELDS
        if unknown:
            raise TypeError("unknown field %r for op %s" % (sorted(unknown)[0], name))
        fields = {k: v for k, v in fields.items() if v is not None}
        f: Dict[str, Any] = {"v": 1, "id": _job_id(fields.get("id")), "op": name}
        if "sandbox" in fields:
            f["sandbox"] = check_sandbox_id("sandbox", fields["sandbox"])
        elif name != "sandbox.list":
            raise InvalidJob("sandbox: op %s needs one" % name)
        if "path" in fields:
            f["path"] = _str("path", fields["path"], 1, 4096)
        if "data" in fields:
            f["data"] = _bytes("data", fields["data"])
            if len(f["data"]) > DATA_MAX:
                raise InvalidJob("data: more than %d bytes" % DATA_MAX)
        if "mode" in fields:
            f["mode"] = _int("mode", fields["mode"], 0)
            if f["mode"] > 0o7777:
                raise InvalidJob("mode: %#o is more than 07777" % f["mode"])
        if fields.get("recursive"):
            f["recursive"] = _bool("recursive", fields["recursive"])
        if fields.get("parents"):
            # fs.write: missing folders of path are created (mkdir -p).
            f["parents"] = _bool("parents", fields["parents"])
        if "key" in fields:
            f["key"] = _str("key", fields["key"], 1, KV_KEY_MAX)
        if "value" in fields:
            f["value"] = _str("value", fields["value"], 0, KV_VALUE_MAX)
        if "prefix" in fields:
            f["prefix"] = _str("prefix", fields["prefix"], 0, KV_KEY_MAX)
        if "to" in fields:
            f["to"] = check_sandbox_id("to", fields["to"])
        if "snapshot" in fields:
            f["snapshot"] = _bytes("snapshot", fields["snapshot"])
            if not 1 <= len(f["snapshot"]) <= SNAPSHOT_MAX:
                raise InvalidJob("snapshot: expected 1..%d bytes" % SNAPSHOT_MAX)
        if "snapshot_key" in fields:
            k = fields["snapshot_key"]
            if not isinstance(k, str) or not _KEY_RE.match(k):
                raise InvalidJob("snapshot_key: not a snapshot's key (64 lower-case "
                                 "hex digits, as results give snapshot)")
            f["snapshot_key"] = k
        if fields.get("labels"):
            f["labels"] = _labels(fields["labels"])
        if fields.get("allow") is not None:
            # sandbox.create: the list its net="allow" runs use when they
            # name none, held to the tenant's net_allow by the server.
            f["allow"] = _allow(fields["allow"])
        if fields.get("files"):
            f["files"] = _files(fields["files"])
        _path_rules(f, fields.get("perm_preset"), fields.get("perms"))
        # A sandbox on an image (docs/images.md): the server checks the
        # reference, its sources and the folders' rules, naming the field.
        if "image" in fields:
            f["image"] = _str("image", fields["image"], 1, IMAGE_MAX)
        for k in ("workdir", "from_image_dir"):
            if k in fields:
                f[k] = _str(k, fields[k], 1, ROOT_DIR_MAX)
                if not f[k].startswith("/"):
                    raise InvalidJob("%s %r: expected an absolute path" % (k, f[k]))
        if "from_image_dir" in f and "image" not in f:
            raise InvalidJob("from_image_dir: needs image (the image whose folder "
                             "seeds the sandbox)")
        _common(f, fields)
        return cls(f)

    def pack(self) -> bytes:
        """The msgpack bytes of the job (str as str, bytes as bin)."""
        out: bytes = msgpack.packb(self.fields, use_bin_type=True)
        return out

    def __repr__(self) -> str:
        return "<sandq.Job %s %s>" % (self.fields["id"], self.fields["op"])


def _path_rules(f: Dict[str, Any], preset: Any, perms: Any) -> None:
    """Sets perm_preset and perms: a Preset (Client.extend_preset()) gives
    its base name and its additions, which come before the caller's own
    perms (so on a tie the caller's rule wins, as the job's rules win over
    the preset's: docs/paths.md "Precedence")."""
    rules: List[Dict[str, str]] = []
    if isinstance(preset, Preset):
        name, rules = preset.wire()
        f["perm_preset"] = _str("perm_preset", name, 1, 64)
    elif preset is not None:
        f["perm_preset"] = _str("perm_preset", preset, 1, 64)
    if perms is not None:
        rules = rules + _perms(perms)
    if rules:
        f["perms"] = _perms(rules)


def _job_id(v: Any) -> str:
    return new_id() if v is None else check_id("id", v)


def _common(f: Dict[str, Any], opts: Dict[str, Any]) -> None:
    if opts.get("priority") is not None:
        f["priority"] = _int("priority", opts["priority"])
    if opts.get("deadline_ms") is not None:
        f["deadline_ms"] = _int("deadline_ms", opts["deadline_ms"], 0)


def _text_arg(what: str, v: Any) -> str:
    text = _str(what, v)
    if len(text.encode("utf-8", "surrogateescape")) > ARG_MAX - 1:
        raise InvalidJob("%s: longer than %d bytes, the kernel's limit on one "
                         "argument; seed it as a file instead" % (what, ARG_MAX - 1))
    return text


def as_job(x: Any, opts: Dict[str, Any]) -> "Job":
    """A Job from what callers pass to submit, stream and batch: a Job (no
    options then), a str (a shell script), a list (an argv) or a dict
    {"op": "sh"|"exec"|"python", "script"|"argv"|"code": ..., options...}."""
    if isinstance(x, Job):
        if opts:
            raise TypeError("options go into Job.sh()/run()/python(), not next to a Job")
        return x
    if isinstance(x, str):
        return Job.sh(x, **opts)
    if isinstance(x, (list, tuple)):
        return Job.run(list(x), **opts)
    if isinstance(x, dict):
        d = dict(x)
        d.update(opts)
        op = d.pop("op", None)
        if op == "sh":
            return Job.sh(d.pop("script", None), **d)
        if op == "python":
            return Job.python(d.pop("code", None), **d)
        if op in ("exec", "run"):
            return Job.run(d.pop("argv", None), **d)
        raise InvalidJob("op %r: expected sh, exec or python" % (op,))
    raise TypeError("expected a Job, a script, an argv list or a dict, got %s"
                    % type(x).__name__)


def json_text(value: Any) -> str:
    """The JSON text kv.set stores for a Python value."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidJob("value: not JSON: %s" % e) from None
