"""Sandbox.from_local(): a folder up as one snapshot, with the .gitignore
rules of `sandq sandbox create --from` (the CLI and git itself are the
oracles), ignored folders never read, hostile trees refused as the CLI
refuses them, and 20,000 files in one step."""

import os
import secrets
import shutil
import subprocess
import tempfile
import unittest

import sandq
from sandq.local import GitIgnore, snapshot_from_dir
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


def write(root, rel, text="x"):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


# A tree exercising git's rules: negation, anchoring, "**", folders only,
# a deeper .gitignore beating a shallower one, escapes.
RULES_TREE = {
    ".gitignore": "*.log\n!keep.log\n/top.txt\nbuild/\ndocs/**/*.tmp\n**/cache\n"
                  "a/**/b\n*.md\n!README.md\n\\#hash\nspace\\ \nout/*\n!out/kept\n",
    "keep.log": "", "drop.log": "", "top.txt": "", "sub/top.txt": "",
    "build/x.o": "", "src/build/y.o": "", "docs/a/b/c.tmp": "", "docs/c.tmp": "",
    "docs/x.txt": "", "deep/cache/z": "", "a/b": "", "a/q/r/b": "", "a/c": "",
    "README.md": "", "NOTES.md": "", "sub/README.md": "", "#hash": "", "space ": "",
    "out/gone": "", "out/kept": "", "sub/.gitignore": "!drop.log\nlocal/\n",
    "sub/drop.log": "", "sub/local/l": "", "sub/deeper/.gitignore": "*\n!*.txt\n",
    "sub/deeper/a.txt": "", "sub/deeper/a.bin": "", "normal/file.txt": "",
}


def make_rules_tree(root):
    for rel, text in RULES_TREE.items():
        write(root, rel, text)
    os.symlink("normal/file.txt", os.path.join(root, "link"))


def snapshot_files(snap):
    with client.sandbox(snapshot=snap) as sb:
        return sorted(e["path"].lstrip("/") for e in sb.entries("/", recursive=True)
                      if e["type"] != "dir")


class Rules(unittest.TestCase):
    def test_the_same_files_as_git_and_the_cli(self):
        with tempfile.TemporaryDirectory() as d:
            make_rules_tree(d)
            snap, _n, _p = snapshot_from_dir(d)
            mine = snapshot_files(snap)
            env = dict(os.environ, HOME=d, GIT_CONFIG_GLOBAL="/dev/null",
                       GIT_CONFIG_NOSYSTEM="1")
            subprocess.run(["git", "init", "-q", d], check=True, env=env)
            git = subprocess.run(["git", "-C", d, "ls-files", "-o", "--exclude-standard"],
                                 check=True, env=env, capture_output=True,
                                 text=True).stdout.split("\n")
            self.assertEqual(mine, sorted(p for p in git if p))
            self.assertIn("keep.log", mine)
            self.assertNotIn("drop.log", mine)
            self.assertIn("sub/drop.log", mine)       # the deeper file wins
            self.assertIn("link", mine)
            # The CLI on the same folder (its .git now, left out as ever).
            sid = "py-from-" + secrets.token_hex(4)
            out = subprocess.run([os.path.join(harness.build_dir(), "sandq"), "--redis",
                                  harness.url(), "sandbox", "create", sid, "--from", d],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            with client.sandbox(sid, keep=False) as cli_sb:
                cli = sorted(e["path"].lstrip("/")
                             for e in cli_sb.entries("/", recursive=True)
                             if e["type"] != "dir")
            self.assertEqual(mine, cli)

    def test_ignore_patterns_cannot_be_undone_by_the_tree(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, ".gitignore", "!secret.env\n")
            write(d, "secret.env")
            write(d, "ok.txt")
            write(d, "tmp/t")
            snap, _n, _p = snapshot_from_dir(d, ["*.env", "tmp/"])
            self.assertEqual(snapshot_files(snap), [".gitignore", "ok.txt"])

    def test_many_double_stars_stay_fast(self):
        g = GitIgnore()
        g.add("", b"/" + b"**/" * 40 + b"x\n")
        self.assertFalse(g.is_ignored("/".join(["a"] * 60) + "/y", False))
        self.assertTrue(g.is_ignored("/".join(["a"] * 60) + "/x", False))


class HostileTrees(unittest.TestCase):
    def test_special_files_and_bad_names_are_refused_naming_them(self):
        with tempfile.TemporaryDirectory() as d:
            os.mkfifo(os.path.join(d, "pipe"))
            with self.assertRaises(sandq.LocalTreeError) as cm:
                snapshot_from_dir(d)
            self.assertEqual(cm.exception.path, "pipe")
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d.encode(), b"bad\xffname\x1b"), "w").close()
            with self.assertRaises(sandq.LocalTreeError) as cm:
                snapshot_from_dir(d)
            self.assertEqual(cm.exception.path, "bad\\xffname\\x1b")
        with tempfile.TemporaryDirectory() as d:
            os.symlink("/etc/passwd", os.path.join(d, "abs"))
            snap, _n, _p = snapshot_from_dir(d)
            with client.sandbox(snapshot=snap) as sb:     # kept, never followed
                self.assertEqual(sb.stat("abs")["target"], "/etc/passwd")


class Upload(unittest.TestCase):
    def test_twenty_thousand_files_and_ignored_folders_never_read(self):
        d = tempfile.mkdtemp(prefix="sandq-pytest-local-")
        try:
            for i in range(200):
                for j in range(100):
                    write(d, "src/d%03d/f%03d.txt" % (i, j), "%d-%d\n" % (i, j))
            write(d, ".gitignore", "node_modules/\n/build\n")
            # Ignored folders that would fail the upload if they were read:
            # a FIFO (refused), a name that is not UTF-8 (refused), and no
            # permission at all (unreadable but to root).
            write(d, "node_modules/pkg/index.js")
            os.mkfifo(os.path.join(d, "node_modules", "pkg", "fifo"))
            os.makedirs(os.path.join(d, "build"))
            open(os.path.join(d.encode(), b"build", b"\xff"), "w").close()
            os.chmod(os.path.join(d, "node_modules"), 0)
            write(d, ".git/HEAD", "ref: refs/heads/main\n")
            os.mkfifo(os.path.join(d, ".git", "fifo"))
            with sandq.Sandbox.from_local(d, client=client, preset="full-access",
                                          ignore_patterns=["*.bak"]) as sb:
                self.assertEqual(sb.list_files(), [".gitignore", "src"])
                self.assertEqual(sb.read_file("src/d199/f099.txt"), "199-99\n")
                self.assertEqual(sb.perm_preset, "full-access")
                self.assertEqual(sb.info()["version"], 1)      # one step
                # Read back with fs ops: a run on 20,000 files would leave
                # its worker's memory cgroup charged (see the report of
                # issue 20), failing a later job with a low memory limit.
                files = [e for e in sb.entries("src", recursive=True)
                         if e["type"] == "file"]
                self.assertEqual(len(files), 20000)
                self.assertEqual(sb.read_file("src/d000/f000.txt"), "0-0\n")
        finally:
            os.chmod(os.path.join(d, "node_modules"), 0o755)
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
