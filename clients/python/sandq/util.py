"""Helpers that touch the local machine, not Redis."""

import hashlib
import os
import struct
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


SNAPSHOT_CHUNK = 64 * 1024      # the chunking a snapshot's key is over


def snapshot_key(snapshot: bytes) -> str:
    """The key of a snapshot's bytes, as results give "snapshot" (64 hex
    digits): SHA-256 of "sandq-snapshot-1" NUL, the size (u64 LE), the chunk
    size (u32 LE) and the SHA-256 of each 64 KiB chunk in order
    (docs/store.md "Chunks and keys"). Same bytes, same key."""
    view = memoryview(snapshot)
    h = hashlib.sha256()
    h.update(b"sandq-snapshot-1\0" + struct.pack("<QI", len(view), SNAPSHOT_CHUNK))
    for off in range(0, len(view), SNAPSHOT_CHUNK):
        h.update(hashlib.sha256(view[off:off + SNAPSHOT_CHUNK]).digest())
    return h.hexdigest()
