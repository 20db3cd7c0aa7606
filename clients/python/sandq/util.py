"""Helpers that touch the local machine, not Redis."""

import os
from typing import Dict, Iterable, Union

DEFAULT_IGNORE = (".git", "__pycache__", ".venv", "node_modules")


def files_from_dir(path: Union[str, "os.PathLike[str]"],
                   ignore: Iterable[str] = DEFAULT_IGNORE) -> Dict[str, bytes]:
    """The regular files under the local folder path, as the files= option
    takes them: {"relative/path": bytes}. Folders named in ignore are
    skipped, and so are symlinks and special files (files= seeds regular
    files only). Bounds (1024 files, 64 MiB) are checked when the job is
    built. For a whole folder (the CLI's .gitignore rules, no bound of
    1024 files), Sandbox.from_local(path) sends it as one snapshot.
    """
    out: Dict[str, bytes] = {}
    root = os.fspath(path)
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ignore)
        for name in sorted(names):
            full = os.path.join(top, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            with open(full, "rb") as f:
                out[rel] = f.read()
    return out
