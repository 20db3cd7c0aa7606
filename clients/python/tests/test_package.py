"""The client is a real package: it installs offline with Debian's pip and
setuptools, with its type information (py.typed), and imports from where
it was installed."""

import os
import subprocess
import sys
import tempfile
import unittest

from tests import harness

SRC = os.path.join(harness.REPO, "clients", "python")


class Package(unittest.TestCase):
    def test_pip_installs_offline_into_a_target(self):
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "site")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                       PIP_NO_CACHE_DIR="1", HOME=d, PYTHONDONTWRITEBYTECODE="1")
            # The source folder is copied: a build leaves build/ and
            # *.egg-info beside its sources.
            src = os.path.join(d, "src")
            subprocess.run(["cp", "-r", SRC, src], check=True)
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index",
                                "--no-build-isolation", "--no-deps", "--target", target,
                                src], env=env, capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertTrue(os.path.isfile(os.path.join(target, "sandq", "py.typed")))
            code = ("import sandq, sandq.local, sandq.batchrun; "
                    "print(sandq.__file__, sandq.__version__, "
                    "sorted(set(sandq.__all__) - set(dir(sandq))))")
            p = subprocess.run([sys.executable, "-c", code], cwd=d,
                               env=dict(env, PYTHONPATH=target), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            path, version, missing = p.stdout.split(" ", 2)
            self.assertTrue(path.startswith(target), path)
            self.assertEqual(missing.strip(), "[]")


if __name__ == "__main__":
    unittest.main()
