#!/usr/bin/env python3
"""An agent loop on a sandq sandbox, with a STUB in place of the model.

    python3 agent_loop.py [REDIS_URL]      (default: $SANDQ_URL or redis://127.0.0.1:6379)

The loop is the usual one: send the conversation and the tool definitions
to the model; run every tool call it asks for in the sandbox with
sandq.tools.dispatch(); send the results back; stop when it answers with
text only. Messages use the Anthropic Messages API's shape (tool_use and
tool_result blocks).

THE MODEL HERE IS A STUB. stub_model() calls no network service: it plays
a fixed script (write a module and its test, run the test, answer). To use
a real model, replace stub_model() with a call to your provider, passing
tools=sandq.tools.anthropic_tools() (or openai_tools() for OpenAI's shape),
and keep the rest.
"""

import os
import sys

import sandq
from sandq import tools


def stub_model(messages, tool_defs):
    """STUB, not a model: returns the next scripted assistant turn, chosen by
    how many turns there have been. A real model decides from messages."""
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        return [
            {"type": "text", "text": "I will write the function and a test."},
            {"type": "tool_use", "id": "call-1", "name": "write_file",
             "input": {"path": "calc.py",
                       "content": "def add(a, b):\n    return a + b\n"}},
            {"type": "tool_use", "id": "call-2", "name": "write_file",
             "input": {"path": "test_calc.py",
                       "content": "import unittest\nfrom calc import add\n\n"
                                  "class T(unittest.TestCase):\n"
                                  "    def test_add(self):\n"
                                  "        self.assertEqual(add(2, 3), 5)\n"}},
        ]
    if turn == 1:
        return [{"type": "tool_use", "id": "call-3", "name": "bash",
                 "input": {"command": "python3 -m unittest -q test_calc 2>&1"}}]
    # The last tool result decides the answer, as a model would read it.
    last = messages[-1]["content"][-1]["content"]
    verdict = "the tests pass" if "exit code 0" in last else "the tests fail"
    return [{"type": "text", "text": "FINAL: " + verdict}]


def agent(sandbox, task, model=stub_model, max_turns=10):
    """Runs the loop until the model answers without tool calls; returns
    that answer's text."""
    messages = [{"role": "user", "content": task}]
    defs = tools.anthropic_tools()
    for _ in range(max_turns):
        blocks = model(messages, defs)
        messages.append({"role": "assistant", "content": blocks})
        calls = [b for b in blocks if b["type"] == "tool_use"]
        if not calls:
            return "".join(b["text"] for b in blocks if b["type"] == "text")
        results = []
        for call in calls:
            out = tools.dispatch(sandbox, call["name"], call["input"])
            print("[%s] %s" % (call["name"], out.splitlines()[0] if out else ""))
            results.append({"type": "tool_result", "tool_use_id": call["id"],
                            "content": out})
        messages.append({"role": "user", "content": results})
    raise RuntimeError("no answer after %d turns" % max_turns)


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "SANDQ_URL", "redis://127.0.0.1:6379")
    client = sandq.Client(url, timeout=120)
    # A fresh sandbox for this conversation, deleted when the block ends.
    with client.sandbox() as sb:
        print(agent(sb, "Write add(a, b) in calc.py with a unittest, and run it."))
        print("sandbox %s: %d versions, %d recorded calls"
              % (sb.id, sb.version, len(sb.history())))
    client.close()


if __name__ == "__main__":
    main()
