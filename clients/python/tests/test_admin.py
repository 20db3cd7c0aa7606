"""cancel, dead letters and status from Python, against the real sandqd
and tenants no sandqd serves (whose jobs stay unread)."""

import json
import os
import re
import secrets
import subprocess
import time
import unittest

import msgpack

import sandq
from sandq import admin
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


def c_string(path, name):
    """The C string literal NAME[] = "..." of path, as its bytes."""
    with open(os.path.join(harness.REPO, path), encoding="utf-8") as f:
        src = f.read()
    m = re.search(r"const char %s\[\] =\n((?:\"(?:[^\"\\]|\\.)*\"\s*)+);" % name, src)
    if m is None:
        raise AssertionError("%s: no %s" % (path, name))
    parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))
    return "".join(parts).encode().decode("unicode_escape")


def fake():
    return sandq.Client(harness.url(), "pyfake-" + secrets.token_hex(4), timeout=30)


class Scripts(unittest.TestCase):
    def test_the_scripts_are_the_servers(self):
        # One text for the CLI, the gateway and Python: they cannot drift.
        self.assertEqual(admin.CANCEL_LUA, c_string("queue/cancel.c", "queue_cancel_lua"))
        self.assertEqual(admin.DEAD_RETRY_LUA,
                         c_string("queue/dead.c", "queue_dead_retry_lua"))


class Cancel(unittest.TestCase):
    def test_a_queued_job_is_answered_cancelled_at_once(self):
        c = fake()
        jid = c.submit("echo never")
        self.assertEqual(c.cancel(jid), "cancelled")
        r = c.wait(jid, timeout=5)
        self.assertEqual((r.status, r.error_code), ("cancelled", "cancelled"))
        with self.assertRaises(sandq.JobFailed):
            r.raise_for_status()
        self.assertEqual(c.redis.xlen(c.key("jobs")), 0)
        self.assertEqual(c.cancel(jid), "finished")
        self.assertEqual(c.cancel("py-never-was"), "unknown")
        c.close()

    def test_a_running_job_is_stopped_by_its_host(self):
        jid = client.submit("echo started; sleep 60", stream=True)
        out = client.key("out", jid)        # output: a host holds it, running
        harness.wait_for(lambda: client.redis.xlen(out) > 0, 60, "the job's output")
        self.assertEqual(client.cancel(jid, queued_only=True), "held")
        self.assertEqual(client.cancel(jid), "cancelling")
        r = client.wait(jid, timeout=60)
        self.assertEqual(r.status, "cancelled")


class DeadLetters(unittest.TestCase):
    def test_list_show_retry_purge(self):
        c = fake()
        job = {"v": 1, "id": "py-dead-1", "op": "sh", "script": "echo back"}
        dead = c.key("dead")
        c.redis.xadd(dead, {"entry": "1-1", "id": "py-dead-1", "reason": "worker died",
                            "attempts": json.dumps([{"attempt": 1, "host": "h",
                                                     "worker": 0, "at": 1,
                                                     "reason": "worker died"}]),
                            "payload": msgpack.packb(job, use_bin_type=True),
                            "payload_truncated": "0"})
        c.redis.xadd(dead, {"entry": "2-1", "reason": "invalid msgpack byte 0xc1 at 0",
                            "payload": b"\xc1"})
        letters = c.dead_letters()
        self.assertEqual([d.id for d in letters], [None, "py-dead-1"])
        self.assertFalse(letters[0].retryable)
        d = c.dead_letter("py-dead-1")
        self.assertTrue(d.retryable)
        self.assertEqual(d.job()["script"], "echo back")
        self.assertEqual(d.attempts[0]["reason"], "worker died")
        self.assertEqual(d.as_dict()["payload_bytes"], len(d.payload))
        c.redis.set(c.key("res", "py-dead-1"), b"old")
        entry = c.dead_retry("py-dead-1")
        self.assertRegex(entry, r"^\d+-\d+$")
        self.assertIsNone(c.redis.get(c.key("res", "py-dead-1")))
        got = c.redis.xrange(c.key("jobs"))
        self.assertEqual(msgpack.unpackb(got[0][1][b"job"])["id"], "py-dead-1")
        with self.assertRaises(sandq.Error):
            c.dead_retry(letters[0])
        with self.assertRaises(sandq.Error):
            c.dead_letter("py-dead-1")          # retried: gone
        self.assertEqual(c.dead_purge(letters[0].dead_id), 1)
        self.assertEqual(c.dead_letters(), [])
        c.redis.xadd(dead, {"entry": "3-1", "reason": "x"})
        self.assertEqual(c.dead_purge(all=True), 1)
        c.close()


class Status(unittest.TestCase):
    def test_status_lists_the_live_host(self):
        st = client.status()
        self.assertGreaterEqual(st["live_hosts"], 1)
        self.assertGreaterEqual(st["workers"], 1)
        self.assertTrue(any(h["live"] for h in st["hosts"]))
        self.assertIn("default", [t["name"] for t in st["tenants"]])

    def test_a_quiet_host_is_not_counted(self):
        now = int(time.time() * 1000)
        st = admin.status({b"old": json.dumps({"time": now - 60000, "workers": 4}).encode(),
                           b"new": json.dumps({"time": now, "workers": 2, "tenants": {
                               "t": {"running": 1, "done_1m": 5}}}).encode(),
                           b"bad": b"not json"},
                          ["t"], {"t": 3}, now)
        self.assertEqual((st["workers"], st["live_hosts"]), (2, 1))
        self.assertEqual([h["live"] for h in st["hosts"]], [True, False])
        self.assertEqual(st["tenants"], [{"name": "t", "queued": 2, "pulling": 0,
                                          "running": 1, "done_1m": 5, "refused_1m": 0,
                                          "share": 0.5}])


if __name__ == "__main__":
    unittest.main()


def cli(*args, tenant="default"):
    """The sandq command's JSON output for args, against the harness."""
    p = subprocess.run([os.path.join(harness.build_dir(), "sandq"), "--redis",
                        harness.url(), "--tenant", tenant] + list(args),
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


class SameAsTheCli(unittest.TestCase):
    def test_status(self):
        rc, out, err = cli("status", "--json")
        self.assertEqual(rc, 0, err)
        theirs, mine = json.loads(out), client.status()

        # What cannot move between the two reads (a host rewrites its
        # status every 2 s, with its busy and last-minute counts).
        def fixed(doc):
            return (doc["workers"], doc["live_hosts"],
                    [(h["host"], h["workers"], h["live"]) for h in doc["hosts"]],
                    sorted(t["name"] for t in doc["tenants"]),
                    sorted(doc["tenants"][0]))
        self.assertEqual(fixed(mine), fixed(theirs))

    def test_dead_letters(self):
        c = fake()
        c.redis.xadd(c.key("dead"), {"entry": "1-1", "id": "py-dead-cli", "reason": "r",
                                     "attempts": "[]", "payload": b"\x81\xa1a\x01",
                                     "payload_truncated": "0"})
        c.redis.xadd(c.key("dead"), {"entry": "2-1", "reason": "bad"})
        rc, out, err = cli("dead", "ls", "--json", tenant=c.tenant)
        self.assertEqual(rc, 0, err)
        self.assertEqual([d.as_dict() for d in c.dead_letters()], json.loads(out))
        c.close()
