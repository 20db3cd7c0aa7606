#!/usr/bin/env python3
"""conf2scd.py - sandq.conf(5) in scdoc, made from config/sandq.conf.example,
the one documented source of every option (tests/config_test.c checks it
against config.c's table), so the page and the file cannot disagree
(issue 18, item 4).

  python3 docs/man/conf2scd.py config/sandq.conf.example OUT.5.scd

The example is read as blocks separated by blank lines:
  - comments before the first [section]: the page's DESCRIPTION (its
    first line, the file's own title, dropped);
  - comments ending in a "[section]" line: that section's introduction;
  - comments ending in a "key = value" line, opening "; key - text": one
    definition of that section, headed by the key and its value in the
    example (the default), its "Type: ..." sentence a paragraph of its own;
  - comments alone after the first section: a section of the page of their
    own, named by their first line up to its ':' ("Tenant sections").
Inside a comment, ';' alone breaks a paragraph, "; name - text" in free
text is a definition too, and a line indented past its paragraph (an
example, a table) is kept as a literal block. Every other character that
scdoc would read as markup is escaped.
"""
import os
import re
import sys

KEY_LINE = re.compile(r'^([a-z_.]+) *=(.*)$')
SECTION_LINE = re.compile(r'^\[([a-z_.]+)\]$')
DEF_LINE = re.compile(r'^([a-z_.]+) - (.*)$')


def esc(text):
    """TEXT as scdoc prose: its markup characters escaped."""
    text = re.sub(r'([\\*_])', r'\\\1', text)
    if text[:1] in ('[', '|', ':', '-', '#', '+', ']'):
        text = '\\' + text
    return text


def blocks(lines):
    """The file's blank-line separated blocks, each a list of lines."""
    out, cur = [], []
    for line in lines:
        if line.strip() == '':
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(line.rstrip('\n'))
    if cur:
        out.append(cur)
    return out


def uncomment(line):
    """A comment line's text, its ';' and one space removed."""
    assert line.startswith(';'), line
    return line[2:] if line.startswith('; ') else line[1:]


def prose(comments, base=0):
    """
    Comment lines as scdoc: paragraphs joined, definitions ("name - text")
    tab-indented under their name in bold, lines indented past their
    paragraph as literal blocks. BASE is the indent of continuation lines.
    """
    out, para, lit, indent = [], [], [], None

    def flush():
        nonlocal para, lit
        if para:
            text = esc(' '.join(para))
            out.append(('\t' + text) if indent is not None else text)
            out.append('\t' if indent is not None else '')
            para = []
        if lit:
            pre = '\t' if indent is not None else ''
            out.append(pre + '```')
            out.extend(pre + l for l in lit)
            out.append(pre + '```')
            out.append('')
            lit = []

    for raw in comments:
        text = uncomment(raw)
        stripped = text.lstrip(' ')
        ind = len(text) - len(stripped)
        if stripped == '':
            flush()
            indent = None
            continue
        m = DEF_LINE.match(text)
        if m and ind == 0:
            flush()
            out.append('*%s*' % esc(m.group(1)))
            indent = 2
            para.append(m.group(2)[:1].upper() + m.group(2)[1:])
            continue
        limit = indent if indent is not None else base
        if ind > limit or (lit and ind > base):
            if para:
                flush()
            lit.append(text[limit:] if indent is not None else text)
            continue
        if lit:
            flush()
        para.append(stripped)
    flush()
    while out and out[-1].strip() == '':
        out.pop()
    return out


def key_def(comments, key, value):
    """One option: its name and default, its text, its Type paragraph."""
    first = uncomment(comments[0])
    m = DEF_LINE.match(first)
    if not m or m.group(1) != key:
        sys.exit('conf2scd: the comment above "%s" does not open "; %s - "'
                 % (key, key))
    text = m.group(2)[:1].upper() + m.group(2)[1:]
    # Continuation lines are indented by two: made flush, as prose() reads.
    lines = ['; ' + text] + ['; ' + uncomment(c)[2:] if uncomment(c).startswith('  ')
                             else c for c in comments[1:]]
    body = prose(lines)
    # The "Type: ..." sentence, where it starts a paragraph's sentence, on its own.
    split = []
    for l in body:
        i = l.find(' Type: ')
        if i >= 0 and not l.startswith('```'):
            split += [l[:i], '', l[i + 1:]]
        else:
            split.append(l)
    value = value.strip()
    head = '*%s* = %s' % (esc(key), esc(value)) if value else '*%s* =' % esc(key)
    return [head] + ['\t' + l if l and not l.startswith('\t') else l for l in split]


def main():
    src, dest = sys.argv[1], sys.argv[2]
    with open(src) as f:
        bl = blocks(f.readlines())
    desc, sections, extra = [], [], []
    for b in bl:
        comments = [l for l in b if l.startswith(';')]
        rest = [l for l in b if not l.startswith(';')]
        if not rest:
            if not sections:
                desc = comments[1:] if not desc else desc + [';'] + comments
            else:
                extra.append(comments)
            continue
        last = rest[0]
        m = SECTION_LINE.match(last)
        if m:
            sections.append((m.group(1), comments, []))
            continue
        m = KEY_LINE.match(last)
        if not m or not sections:
            sys.exit('conf2scd: %s: cannot read "%s"' % (src, last))
        sections[-1][2].append((m.group(1), m.group(2), comments))

    out = ['SANDQ.CONF(5) "sandq @VERSION@" "File Formats Manual"', '',
           '# NAME', '', 'sandq.conf - the configuration of sandqd and sandq-gateway', '',
           '# SYNOPSIS', '', '_/etc/sandq/sandq.conf_', '',
           '# DESCRIPTION', '']
    out += prose(desc) + ['']
    out += ['*sandqd*(8) reads the file of its *--config* (and again on SIGHUP); '
            '*sandq-gateway*(8) reads its section *gateway*. This page is made from '
            '_sandq.conf.example_, installed beside the file, which sets every '
            'option to its default.', '']
    for name, intro, keys in sections:
        out += ['# [%s]' % name, '']
        if intro:
            out += prose(intro) + ['']
        for key, value, comments in keys:
            out += key_def(comments, key, value) + ['']
    for comments in extra:
        title = uncomment(comments[0]).split(':', 1)[0].upper()
        out += ['# %s' % esc(title), ''] + prose(comments) + ['']
    out += ['# FILES', '',
            '_/etc/sandq/sandq.conf_', '\tThe file the systemd units pass to *--config*.', '',
            '_/etc/sandq/sandq.conf.example_',
            '\tEvery option at its default, with the text of this page.', '',
            '# SEE ALSO', '', '*sandqd*(8), *sandq-gateway*(8), *sandq*(1)', '']
    text = '\n'.join(out)
    text = re.sub(r'\n{3,}', '\n\n', text)
    with open(dest + '.tmp', 'w') as f:
        f.write(text)
    os.replace(dest + '.tmp', dest)


main()
