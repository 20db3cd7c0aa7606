"""sandq.tools: definitions in both shapes, and dispatching calls to a sandbox."""

import asyncio
import json
import os
import subprocess
import sys
import unittest

import sandq
from sandq import tools
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


class Definitions(unittest.TestCase):
    def test_anthropic_shape(self):
        defs = tools.anthropic_tools()
        self.assertEqual([d["name"] for d in defs],
                         ["bash", "python", "read_file", "write_file"])
        for d in defs:
            self.assertEqual(set(d), {"name", "description", "input_schema"})
            self.assertEqual(d["input_schema"]["type"], "object")
            self.assertTrue(d["input_schema"]["required"])
        json.dumps(defs)

    def test_openai_shape_and_a_subset(self):
        defs = tools.openai_tools(["bash", "read_file"])
        self.assertEqual([d["function"]["name"] for d in defs], ["bash", "read_file"])
        self.assertEqual(defs[0]["type"], "function")
        self.assertEqual(defs[0]["function"]["parameters"]["required"], ["command"])
        with self.assertRaises(ValueError):
            tools.openai_tools(["rm_rf"])


class Dispatch(unittest.TestCase):
    def test_each_tool_on_a_sandbox(self):
        with client.sandbox() as sb:
            out = tools.dispatch(sb, "write_file", {"path": "hello.py",
                                                    "content": "print('hi')\n"})
            self.assertEqual(out, "wrote 12 bytes to hello.py")
            self.assertEqual(tools.dispatch(sb, "read_file", '{"path": "hello.py"}'),
                             "print('hi')\n")
            out = tools.dispatch(sb, "bash", {"command": "python3 hello.py; ls"})
            self.assertEqual(out, "exit code 0\nstdout:\nhi\nhello.py\n")
            out = tools.dispatch(sb, "python", json.dumps({"code": "import sys\n"
                                 "print('x'); sys.exit('boom')"}))
            self.assertEqual(out, "exit code 1\nstdout:\nx\n\nstderr:\nboom\n")

    def test_errors_come_back_as_text(self):
        with client.sandbox() as sb:
            self.assertTrue(tools.dispatch(sb, "read_file", {"path": "nope"})
                            .startswith("error: "))
            self.assertIn("missing string argument 'command'",
                          tools.dispatch(sb, "bash", {}))
            self.assertIn("unknown tool", tools.dispatch(sb, "rm_rf", {}))
            self.assertIn("not JSON", tools.dispatch(sb, "bash", "{"))
            self.assertIn("output_limit", tools.dispatch(
                sb, "bash", {"command": "head -c 3000000 /dev/zero"}))
            with self.assertRaises(sandq.NotFound):
                tools.dispatch(sb, "read_file", {"path": "nope"}, raise_errors=True)

    def test_output_is_clipped(self):
        with client.sandbox() as sb:
            out = tools.dispatch(sb, "bash", {"command": "seq 1 100000"}, max_output=100)
            self.assertIn("more characters cut]", out)
            self.assertLess(len(out), 300)

    def test_adispatch(self):
        async def go():
            async with client.asandbox() as sb:
                await tools.adispatch(sb, "write_file", {"path": "a", "content": "b"})
                r = await tools.adispatch(sb, "bash", {"command": "cat a"})
                await client.aclose()
                return r
        self.assertEqual(asyncio.run(go()), "exit code 0\nstdout:\nb")


class Example(unittest.TestCase):
    def test_agent_loop_example_runs(self):
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=here, PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.run([sys.executable, os.path.join(here, "examples", "agent_loop.py"),
                            harness.url()], env=env, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("FINAL: the tests pass", p.stdout)


if __name__ == "__main__":
    unittest.main()
