#!/usr/bin/env python3
"""layout_check.py - the folder rules of docs/architecture.md, checked.

Three rules, read from the sources as the house style writes them
(/work/shared/STYLE.md: a definition's name starts its line, its return
type on the line above):

1. Folders: a file includes only headers of the folders its own folder may
   use (ALLOWED below, the table in docs/architecture.md). Above all, nothing
   on the confined side (worker/, sandbox/, agentfs/, store/, workspace/)
   nor libsandq/ includes queue/: the worker never talks to Redis. A
   folder's internal headers (internal.h, *_int.h) are its own: another
   folder uses its public header.
2. No cycles between the files of one folder: A.c -> B.c when A.c names a
   function B.c defines (a call, or a table or callback holding it). Types
   and macros make no edge, so the files of a module may all include its
   headers. The graph of each folder must be acyclic: callers above,
   callees below, and a leaf (a file of shared helpers) calls none of the
   files that use it. A subfolder is a lower room: dispatcher/core/ (the
   decisions, unit-tested without Redis) calls nothing dispatcher/'s own
   files define.
3. Include guards name the folders: SANDQ_<FOLDER>_<NAME>_H, the folder
   left out when the header's name starts with it (sandbox/sandbox.h is
   SANDQ_SANDBOX_H, cli/cli_esc.h SANDQ_CLI_ESC_H, dispatcher/core/core.h
   SANDQ_DISPATCHER_CORE_H).

Prints each breach and exits 1; prints a one-line summary and exits 0
otherwise. Run from the repository root (tests/run.sh does).
"""
import os
import re
import sys

# folder -> the folders it may include (besides itself). docs/architecture.md
# says why; keep both in step.
ALLOWED = {
    'common': set(),
    'proto': {'common'},
    'agentfs': {'common'},
    'store': {'common', 'agentfs'},
    'workspace': {'common', 'agentfs', 'proto'},
    'audit': {'common'},
    'sandbox': {'common', 'proto', 'agentfs', 'store', 'workspace', 'images'},
    'worker': {'common', 'proto', 'agentfs', 'store', 'workspace', 'sandbox',
               'images'},
    'images': {'common', 'proto'},
    # sandq-egress (issue 21): the allowlist (pure) and the proxy.
    'egress': {'common'},
    'libsandq': {'common', 'proto'},
    'queue': {'common', 'proto', 'audit'},
    'config': {'common', 'proto', 'queue', 'store', 'egress'},
    'dispatcher': {'common', 'proto', 'queue', 'config', 'audit', 'agentfs',
                   'store', 'workspace', 'sandbox', 'images', 'egress'},
    'cli': {'common', 'proto', 'queue', 'audit', 'agentfs', 'workspace',
            'sandbox', 'libsandq', 'images'},
    'gateway': {'common', 'proto', 'queue', 'config', 'audit'},
}
# The one header of a folder that another may use beyond the table.
EXCEPTIONS = {
    # sandqd and the CLI read the cgroup mount table (status, doctor);
    # cgroup.c is the one file of sandbox/ linked outside the worker.
    ('dispatcher', 'sandbox/cgroup.h'), ('cli', 'sandbox/cgroup.h'),
    # The config and the tenant records check image_sources patterns when
    # they are set; images/ref.c is pure (common/ only) and the one file of
    # images/ they link.
    ('config', 'images/ref.h'), ('queue', 'images/ref.h'),
    # A snapshot's key is the wire's (results, snapshot_key) and the
    # store's blob key: one definition, proto/snapkey.c, pure.
    ('store', 'proto/snapkey.h'),
}
# Folders whose files may call each other both ways, each with its reason.
ROOMS = {
    # sandqd's files are one event loop around struct sandqd: intake,
    # scheduling, the pool and publishing call each other as events come.
    'dispatcher': 'one event loop',
}
# Public headers whose guard keeps the installed name.
GUARDS = {'libsandq/sandq.h': 'SANDQ_H'}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DEFINITION = re.compile(r'^([A-Za-z_]\w*)\(', re.M)
NAME = re.compile(r'(?<!\.)(?<!->)\b([A-Za-z_]\w*)\b')
GUARD = re.compile(r'^#ifndef\s+(SANDQ_\w+)', re.M)


def strip(text):
    """text with comments, literals and preprocessor lines blanked
    (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] not in (c, '\n'):
                j += 2 if text[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    keep, cont = [], False
    for line in ''.join(out).split('\n'):
        directive = cont or line.lstrip().startswith('#')
        cont = directive and line.rstrip().endswith('\\')
        keep.append('' if directive else line)
    return '\n'.join(keep)


def body_follows(code, start):
    """Whether the parameter list opening at code[start] is followed by a
    function body's '{' (a definition, not a prototype)."""
    depth, i = 0, start
    while i < len(code):
        if code[i] == '(':
            depth += 1
        elif code[i] == ')':
            depth -= 1
            if depth == 0:
                break
        i += 1
    return code[i + 1:].lstrip().startswith('{')


class Source:
    def __init__(self, path):
        with open(path, encoding='utf-8', errors='replace') as f:
            self.raw = f.read()
        base = os.path.dirname(path)
        self.include_names = INCLUDE.findall(self.raw)
        self.includes = [os.path.normpath(os.path.join(base, h))
                         for h in self.include_names]
        code = strip(self.raw)
        self.defined, self.static = set(), set()
        if path.endswith('.c'):
            for m in DEFINITION.finditer(code):
                if not body_follows(code, m.end() - 1):
                    continue
                head = code[:m.start()].rstrip().rsplit('\n', 1)[-1]
                (self.static if head.startswith('static') else
                 self.defined).add(m.group(1))
        self.names = set(NAME.findall(code))


def folder_of(path):
    """The top folder: dispatcher/rstore/x.c is in dispatcher/."""
    return path.split('/', 1)[0]


def load():
    files = {}
    for top in sorted(ALLOWED):
        if not os.path.isdir(top):
            continue
        for root, _, names in os.walk(top):
            for name in names:
                if name.endswith(('.c', '.h')):
                    p = os.path.normpath(os.path.join(root, name))
                    files[p] = Source(p)
    return files


def check_includes(files, breaches):
    for f, src in sorted(files.items()):
        for name, target in zip(src.include_names, src.includes):
            if not os.path.exists(target):
                breaches.append(f'{f}: includes "{name}", which does not exist')
                continue
            base = os.path.basename(target)
            if ((base == 'internal.h' or base.endswith('_int.h')) and
                    os.path.dirname(target) != os.path.dirname(f)):
                breaches.append(f'{f}: includes {target}, the internal header '
                                f'of {os.path.dirname(target)}/')
                continue
            a, b = folder_of(f), folder_of(target)
            if a == b or b in ALLOWED[a] or (a, target) in EXCEPTIONS:
                continue
            breaches.append(f'{f}: includes {target}, but {a}/ may not '
                            f'include {b}/ (docs/architecture.md)')


def reach(files, src):
    """The headers src includes, directly or through other headers."""
    seen, todo = set(), list(files[src].includes)
    while todo:
        h = todo.pop()
        if h in seen or h not in files:
            continue
        seen.add(h)
        todo.extend(files[h].includes)
    return seen


def graph(files, folder):
    """{A.c: {B.c: [names]}} over the .c files of one directory."""
    cs = sorted(p for p in files
                if p.endswith('.c') and os.path.dirname(p) == folder)
    definer = {}
    for c in cs:
        for name in files[c].defined:
            definer.setdefault(name, set()).add(c)
    g = {c: {} for c in cs}
    for a in cs:
        used = files[a].names - files[a].static - files[a].defined
        for name in sorted(used):
            for b in definer.get(name, ()):
                g[a].setdefault(b, []).append(name)
    return g


def knots(g):
    """Strongly connected components of two files or more (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def check_cycles(files, breaches):
    for folder in sorted({os.path.dirname(p) for p in files}):
        if folder in ROOMS:
            continue
        g = graph(files, folder)
        for k in knots(g):
            why = []
            for a in k:
                for b in k:
                    if b in g[a]:
                        names = g[a][b]
                        why.append('%s -> %s (%s%s)' % (
                            os.path.basename(a), os.path.basename(b),
                            ', '.join(names[:3]),
                            ', ...' if len(names) > 3 else ''))
            breaches.append(f'cycle in {folder}/: ' + '; '.join(why))


def check_lower_rooms(files, breaches):
    """A subfolder (dispatcher/core/, dispatcher/rstore/) is below its
    folder: its files call nothing its folder's own files define."""
    for sub in sorted({os.path.dirname(p) for p in files if p.count('/') > 1}):
        parent = os.path.dirname(sub)
        above = {}
        for p, src in files.items():
            if p.endswith('.c') and os.path.dirname(p) == parent:
                for name in src.defined:
                    above[name] = p
        for p, src in sorted(files.items()):
            if os.path.dirname(p) != sub:
                continue
            for name in sorted(src.names - src.defined - src.static):
                if name in above:
                    breaches.append(f'{p}: calls {name}() of {above[name]}, '
                                    f'but {sub}/ is below {parent}/')


def check_guards(files, breaches):
    for f, src in sorted(files.items()):
        if not f.endswith('.h'):
            continue
        dirs = os.path.dirname(f).upper().split('/')
        n = os.path.basename(f)[:-2].upper()
        if n == dirs[-1] or n.startswith(dirs[-1] + '_'):
            dirs = dirs[:-1]
        want = 'SANDQ_' + '_'.join(dirs + [n]) + '_H'
        want = GUARDS.get(f, want)
        m = GUARD.search(src.raw)
        if m is None or m.group(1) != want:
            breaches.append(f'{f}: include guard {m.group(1) if m else "missing"}, '
                            f'expected {want}')


def main():
    sys.setrecursionlimit(10000)
    files = load()
    breaches = []
    check_includes(files, breaches)
    check_cycles(files, breaches)
    check_lower_rooms(files, breaches)
    check_guards(files, breaches)
    for b in breaches:
        print(b)
    if breaches:
        print(f'layout_check: {len(breaches)} breach(es) of docs/architecture.md')
        return 1
    print(f'layout_check: {len(files)} files in {len(ALLOWED)} folders: '
          'folder rules kept, no cycle, guards named')
    return 0


if __name__ == '__main__':
    sys.exit(main())
