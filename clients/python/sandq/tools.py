"""Tool definitions for LLM agents, and a dispatcher onto a Sandbox.

Four tools, bash, python, read_file and write_file, as JSON-schema
definitions in the two common shapes:

    sandq.tools.anthropic_tools()  [{"name", "description", "input_schema"}]
    sandq.tools.openai_tools()     [{"type": "function", "function":
                                     {"name", "description", "parameters"}}]

and dispatch(sandbox, name, arguments), which runs one tool call on a
Sandbox and returns the text to hand back to the model. arguments may be a
dict (Anthropic's tool_use input) or a JSON string (OpenAI's
function.arguments). A failing command is a normal answer here, not an
exception: the model reads the exit code and stderr and tries again.
"""

import json

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .errors import Error
from .result import Result

MAX_OUTPUT = 16 * 1024      # characters of each output stream given back

TOOLS: List[Dict[str, Any]] = [
    {
        "name": "bash",
        "description": (
            "Run a bash command in the persistent sandbox. The working "
            "directory is /workspace; files, the current directory and "
            "exported variables persist between calls. Returns the exit code, "
            "stdout and stderr. No network access."),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string",
                            "description": "The command line, run with bash -c."},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "name": "python",
        "description": (
            "Run a Python 3 program in the same sandbox (python3 -c). Print "
            "what you want to see; files written under /workspace persist. "
            "Returns the exit code, stdout and stderr."),
        "input_schema": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The program's source."},
            },
            "required": ["code"],
            "additionalProperties": False,
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file of the sandbox's workspace.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string",
                         "description": "Path in the workspace, e.g. src/main.py."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "write_file",
        "description": (
            "Create or replace a file of the sandbox's workspace with the given "
            "text. Its folder must exist (create folders with bash mkdir -p)."),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string",
                         "description": "Path in the workspace, e.g. notes/plan.md."},
                "content": {"type": "string", "description": "The whole new content."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    },
]

TOOL_NAMES = tuple(str(t["name"]) for t in TOOLS)


def _pick(names: Optional[Iterable[str]]) -> List[Dict[str, Any]]:
    if names is None:
        return [dict(t) for t in TOOLS]
    unknown = set(names) - set(TOOL_NAMES)
    if unknown:
        raise ValueError("unknown tool %r (one of %s)" % (sorted(unknown)[0],
                                                          ", ".join(TOOL_NAMES)))
    return [dict(t) for t in TOOLS if t["name"] in names]


def anthropic_tools(names: Optional[Iterable[str]] = None) -> List[Dict[str, Any]]:
    """Definitions in the Anthropic Messages API's shape (tools=...)."""
    return _pick(names)


def openai_tools(names: Optional[Iterable[str]] = None) -> List[Dict[str, Any]]:
    """Definitions in the OpenAI Chat Completions shape (tools=...)."""
    return [{"type": "function",
             "function": {"name": t["name"], "description": t["description"],
                          "parameters": t["input_schema"]}}
            for t in _pick(names)]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + "\n[... %d more characters cut]" % (len(text) - limit)


def format_result(result: Result, max_output: int = MAX_OUTPUT) -> str:
    """A run's Result as the text a model reads."""
    if result.status == "ok" or result.status == "exit":
        head = "exit code %d" % result.exit_code
    elif result.status == "signal":
        head = "killed by signal %d" % result.signal
    else:
        head = "%s: %s" % (result.status, result.error_message or "")
    parts = [head]
    if result.stdout:
        parts.append("stdout:\n" + _clip(result.stdout_text, max_output))
    if result.stderr:
        parts.append("stderr:\n" + _clip(result.stderr_text, max_output))
    return "\n".join(parts)


def _args(name: str, arguments: Any, required: Sequence[str]) -> Dict[str, Any]:
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError as e:
            raise ValueError("arguments of %s are not JSON: %s" % (name, e)) from None
    if not isinstance(arguments, dict):
        raise ValueError("arguments of %s: expected an object" % name)
    for k in required:
        if not isinstance(arguments.get(k), str):
            raise ValueError("%s: missing string argument %r" % (name, k))
    return arguments


def _plan(name: str, arguments: Any) -> Tuple[str, Tuple[Any, ...], str]:
    """(method name, positional args, how to format its answer)."""
    if name == "bash":
        a = _args(name, arguments, ("command",))
        return "bash", (a["command"],), "run"
    if name == "python":
        a = _args(name, arguments, ("code",))
        return "execute_python", (a["code"],), "run"
    if name == "read_file":
        a = _args(name, arguments, ("path",))
        return "read_file", (a["path"],), "text"
    if name == "write_file":
        a = _args(name, arguments, ("path", "content"))
        return "write_file", (a["path"], a["content"]), "wrote"
    raise ValueError("unknown tool %r (one of %s)" % (name, ", ".join(TOOL_NAMES)))


def _answer(how: str, args: Tuple[Any, ...], value: Any, max_output: int) -> str:
    if how == "run":
        return format_result(value, max_output)
    if how == "text":
        return _clip(value, max_output)
    return "wrote %d bytes to %s" % (len(args[1].encode("utf-8")), args[0])


def dispatch(sandbox: Any, name: str, arguments: Any, *, max_output: int = MAX_OUTPUT,
             raise_errors: bool = False) -> str:
    """Runs the tool call name(arguments) on sandbox; returns the text for
    the model. Errors (bad arguments, a missing file, a limit, a refusal)
    come back as "error: ..." text unless raise_errors=True."""
    try:
        method, args, how = _plan(name, arguments)
        kw = {"check": False} if how == "run" else {}
        return _answer(how, args, getattr(sandbox, method)(*args, **kw), max_output)
    except (Error, ValueError) as e:
        if raise_errors:
            raise
        return "error: %s" % e


async def adispatch(sandbox: Any, name: str, arguments: Any, *,
                    max_output: int = MAX_OUTPUT, raise_errors: bool = False) -> str:
    """Async dispatch()."""
    try:
        method, args, how = _plan(name, arguments)
        kw = {"check": False} if how == "run" else {}
        value = await getattr(sandbox, "a" + method)(*args, **kw)
        return _answer(how, args, value, max_output)
    except (Error, ValueError) as e:
        if raise_errors:
            raise
        return "error: %s" % e
