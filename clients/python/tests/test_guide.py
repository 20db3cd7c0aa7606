"""The porting guide's sandq programs (clients/python/README.md, "Porting
guide") run against the real sandqd and print what the guide says they
print. The programs and their output are read from the README itself, so
the guide cannot drift from what the client does."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

from tests import harness

README = os.path.join(harness.REPO, "clients", "python", "README.md")
GUIDES = ("localsandbox", "agentfense", "agent-sandbox")


def guide_programs():
    """{name: (program, expected output)} of the README's guide blocks: the
    python block after "<!-- guide: NAME -->" and the text block after it."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for m in re.finditer(r"<!-- guide: ([a-z-]+) -->\n```python\n(.*?)```\n\n```text\n"
                         r"(.*?)```\n", text, re.S):
        out[m.group(1)] = (m.group(2), m.group(3))
    return out


class Guide(unittest.TestCase):
    def test_every_guide_has_its_program(self):
        self.assertEqual(sorted(guide_programs()), sorted(GUIDES))

    def run_program(self, name, setup=None):
        program, want = guide_programs()[name]
        with tempfile.TemporaryDirectory() as d:
            if setup:
                setup(d)
            env = dict(os.environ, SANDQ_REDIS=harness.url(), SANDQ_TENANT="default",
                       PYTHONPATH=os.path.join(harness.REPO, "clients", "python"),
                       PYTHONDONTWRITEBYTECODE="1")
            p = subprocess.run([sys.executable, "-c", program], cwd=d, env=env,
                               capture_output=True, text=True, timeout=300)
        if p.returncode != 0 and "unknown field 'parents'" in p.stderr:
            # fs.write's parents is sandqd's side of issue 20.
            self.skipTest("this sandqd has no fs.write parents yet")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, want)

    def test_localsandbox(self):
        self.run_program("localsandbox")

    def test_agentfense(self):
        def project(d):
            os.makedirs(os.path.join(d, "my-project", ".git"))
            with open(os.path.join(d, "my-project", "main.py"), "w") as f:
                f.write("print('hello from main')\n")
        self.run_program("agentfense", project)

    def test_agent_sandbox(self):
        self.run_program("agent-sandbox")


if __name__ == "__main__":
    unittest.main()
