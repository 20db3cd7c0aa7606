#!/usr/bin/env python3
"""layout_check.py - the folder rules of docs/architecture.md, checked.

Two rules, read from the sources themselves (#include lines and the house
style's function definitions, the name at the start of its line):

1. Folders: a file includes only headers of the folders its own folder may
   use (ALLOWED below, the table in docs/architecture.md). Above all, nothing
   on the confined side (worker/, sandbox/, agentfs/, store/, workspace/)
   nor libsandq/ includes queue/: the worker never talks to Redis.
2. No cycles between the files of one folder: A.c depends on B.c when A.c
   includes a header declaring a function B.c defines. A cycle means two
   files that can only be read, tested or linked together.

Prints each breach and exits 1; prints a one-line summary and exits 0
otherwise. Run from the repository root (tests/run.sh does).
"""
import fnmatch
import os
import re
import sys

# folder -> the folders it may include (besides itself). The architecture
# table in docs/architecture.md says why; keep both in step.
ALLOWED = {
    'common': set(),
    'proto': {'common'},
    'agentfs': {'common'},
    'store': {'common', 'agentfs'},
    'workspace': {'common', 'agentfs', 'proto'},
    'audit': {'common'},
    'sandbox': {'common', 'proto', 'agentfs', 'store', 'workspace'},
    'worker': {'common', 'proto', 'agentfs', 'store', 'workspace', 'sandbox'},
    'libsandq': {'common', 'proto'},
    'queue': {'common', 'proto', 'audit'},
    'config': {'common', 'proto', 'queue', 'store'},
    'dispatcher': {'common', 'proto', 'queue', 'config', 'audit', 'agentfs',
                   'store', 'workspace', 'sandbox'},
    'cli': {'common', 'proto', 'queue', 'audit', 'agentfs', 'workspace',
            'sandbox', 'libsandq'},
}
# Headers of another folder that one of these may use, each with its reason.
EXCEPTIONS = {
    # sandqd and the CLI read the cgroup mount table (status, doctor);
    # cgroup.c is the one file of sandbox/ linked outside the worker.
    ('dispatcher', 'sandbox/cgroup.h'), ('cli', 'sandbox/cgroup.h'),
}
SOURCE_DIRS = sorted(ALLOWED)
# What the files of one folder share among themselves (besides internal.h
# and *_int.h): a folder's files may all depend on each other through it.
# One module written in several files behind one header: its files depend on
# each other through it by design.
MODULES = {
    'agentfs/agentfs.h': 'agentfs/agentfs*.c',
    'store/store.h': 'store/store*.c',
    'workspace/workspace.h': 'workspace/workspace*.c',
    'dispatcher/rstore/rstore.h': 'dispatcher/rstore/rstore*.c',
}
ROOM_HEADERS = {'dispatcher/dispatcher.h', 'worker/worker.h', 'audit/audit.h'}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A declaration in a header: a prototype's name followed by '('.
DECL = re.compile(r'^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(', re.M)
# A definition in the house style: the name at the start of its line.
DEFN = re.compile(r'^([A-Za-z_]\w*)\(', re.M)


def folder_of(path):
    """The top folder of a repository path, with dispatcher/rstore/ in
    dispatcher/."""
    return path.split('/', 1)[0]


def sources():
    out = []
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(top):
            for f in files:
                if f.endswith(('.c', '.h')):
                    out.append(os.path.normpath(os.path.join(root, f)))
    return sorted(out)


def is_room_header(h):
    base = os.path.basename(h)
    return base == 'internal.h' or base.endswith('_int.h') or h in ROOM_HEADERS


def same_module(h, c):
    """True if c is one of the files of the module whose header is h."""
    return h in MODULES and fnmatch.fnmatch(c, MODULES[h])


def strip_comments(text):
    return re.sub(r'/\*.*?\*/', '', text, flags=re.S)


def main():
    files = sources()
    text = {f: open(f, encoding='utf-8').read() for f in files}
    includes = {}
    breaches = []
    for f in files:
        inc = []
        for name in INCLUDE.findall(text[f]):
            target = os.path.normpath(os.path.join(os.path.dirname(f), name))
            if not os.path.exists(target):
                breaches.append(f'{f}: includes "{name}", which does not exist')
                continue
            inc.append(target)
            src, dst = folder_of(f), folder_of(target)
            if dst == src or dst in ALLOWED[src] or (src, target) in EXCEPTIONS:
                continue
            breaches.append(f'{f}: includes {target}, but {src}/ may not '
                            f'include {dst}/ (docs/architecture.md)')
        includes[f] = inc

    # Who defines what each header declares.
    defined_in = {}
    for f in files:
        if f.endswith('.c'):
            for name in DEFN.findall(strip_comments(text[f])):
                defined_in.setdefault(name, set()).add(f)
    providers = {}
    for f in files:
        if f.endswith('.h'):
            names = DECL.findall(strip_comments(text[f]))
            providers[f] = set().union(*(defined_in.get(n, set()) for n in names)) \
                if names else set()

    # A.c -> B.c within one folder.
    deps, via = {}, {}
    for f in files:
        if not f.endswith('.c'):
            continue
        out = set()
        for h in includes[f]:
            if is_room_header(h):
                continue
            for p in providers.get(h, ()):
                if p == f or os.path.dirname(p) != os.path.dirname(f):
                    continue
                if same_module(h, f) and same_module(h, p):
                    continue
                out.add(p)
                via.setdefault((f, p), os.path.basename(h))
        deps[f] = out

    # Strongly connected components (Tarjan): each one of two files or
    # more is a knot of files that depend on each other.
    index, low, stack, on_stack, knots = {}, {}, [], set(), []

    def visit(n):
        index[n] = low[n] = len(index)
        stack.append(n)
        on_stack.add(n)
        for m in sorted(deps.get(n, ())):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in on_stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            knot = []
            while True:
                m = stack.pop()
                on_stack.discard(m)
                knot.append(m)
                if m == n:
                    break
            if len(knot) > 1:
                knots.append(sorted(knot))

    for n in sorted(deps):
        if n not in index:
            visit(n)
    for k in knots:
        why = [f'{a} -> {b} by {via[(a, b)]}' for a in k for b in sorted(deps[a])
               if b in k]
        breaches.append('cycle among ' + ', '.join(k) + ' (' + '; '.join(why) + ')')

    for b in breaches:
        print(b)
    if breaches:
        print(f'layout_check: {len(breaches)} breach(es) of docs/architecture.md')
        return 1
    print(f'layout_check: {len(files)} files in {len(SOURCE_DIRS)} folders, '
          'folder rules kept, no cycle')
    return 0


if __name__ == '__main__':
    sys.exit(main())
