#!/usr/bin/env python3
"""help2c.py - the text `sandq --help` and `sandq help VERB` print, made
from the same roff pages `man` shows (docs/man/*.scd through scdoc), so
the two never disagree (issue 18, item 4).

  python3 docs/man/help2c.py OUT.c PAGE.1...
  python3 docs/man/help2c.py --symbol NAME OUT.c PAGE

Each page is rendered by mandoc -T ascii (width 78, as man prints on an
80-column terminal), its overstrikes and tabs made plain and its footer
(the date) dropped, and written as one C string in the table cli_man.h
declares. A page's name is its file's minus "sandq-", dashes made spaces
(sandq-image-build.1 is "image build"; sandq.1 is "").

With --symbol, the one PAGE is written as `const char NAME[]`, for a
daemon's --help (sandqd(8) in sandqd, sandq-gateway(8) in the gateway),
which declares it extern where it prints it.
"""
import os
import re
import subprocess
import sys


def render(path):
    """The plain text of the roff page PATH, footer dropped."""
    out = subprocess.run(['mandoc', '-T', 'ascii', '-O', 'width=78', path],
                         check=True, capture_output=True, text=True).stdout
    out = re.sub(r'.\x08', '', out)
    lines = [l.expandtabs().rstrip() for l in out.split('\n')]
    while lines and not lines[-1]:
        lines.pop()
    lines.pop()  # the footer: source, date, title
    while lines and not lines[-1]:
        lines.pop()
    return '\n'.join(lines) + '\n'


def cstr(text):
    """TEXT as C string literals, one a line."""
    out = []
    for line in text.splitlines(keepends=True):
        s = line.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')
        out.append('"%s"' % s)
    return '\n'.join(out)


def write(dest, body):
    """BODY into DEST, whole or not at all."""
    with open(dest + '.tmp', 'w') as f:
        f.write(body)
    os.replace(dest + '.tmp', dest)


def main():
    if sys.argv[1] == '--symbol':
        symbol, dest, page = sys.argv[2:5]
        write(dest, '/* Made by docs/man/help2c.py from %s: do not edit. */\n'
              'extern const char %s[];\nconst char %s[] =\n%s;\n'
              % (os.path.basename(page), symbol, symbol, cstr(render(page))))
        return
    dest, pages = sys.argv[1], sys.argv[2:]
    rows = []
    for p in sorted(pages):
        stem = os.path.basename(p).rsplit('.', 1)[0]
        name = '' if stem == 'sandq' else stem[len('sandq-'):].replace('-', ' ')
        rows.append('\t{ "%s",\n%s },' % (name, cstr(render(p))))
    body = ('/* Made by docs/man/help2c.py from the pages of docs/man: do not edit. */\n'
            '#include <stddef.h>\n\n#include "cli_man.h"\n\n'
            'const struct cli_man_page cli_man_pages[] = {\n%s\n};\n'
            'const size_t cli_man_npages = sizeof(cli_man_pages) / sizeof(cli_man_pages[0]);\n'
            % '\n'.join(rows))
    write(dest, body)


main()
