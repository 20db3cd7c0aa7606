"""client.audit(): the CLI's filters, a summary, JSONL export and a live
tail, on the tenant's audit stream as sandqd writes it (and forged entries,
which are skipped)."""

import json
import os
import secrets
import stat
import subprocess
import tempfile
import time
import unittest

import sandq
from sandq import audit
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


def event(**kw):
    ev = {"time": str(int(time.time() * 1000)), "host": "h", "tenant": "t", "job": "",
          "sandbox": "", "category": "job", "action": "received", "target": "sh",
          "allowed": "true", "level": "info", "detail": ""}
    ev.update(kw)
    return ev


class Audit(unittest.TestCase):
    def test_filters_summary_and_export(self):
        ok = client.sh("echo fine")
        evs = client.audit(job=ok.id)
        self.assertEqual([e.action for e in evs], ["received", "started", "finished"])
        self.assertTrue(all(isinstance(e, sandq.AuditEvent) for e in evs))
        self.assertEqual(evs.events[0].target, "sh")
        self.assertRegex(evs.events[0].time, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        fin = client.audit(job=ok.id, category="job", level="info").events[-1]
        self.assertEqual((fin.action, fin.target), ("finished", "ok"))
        self.assertIsInstance(fin.detail_json(), dict)
        self.assertEqual(len(client.audit(job=ok.id, denied=True)), 0)
        self.assertEqual(len(client.audit(job=ok.id, since="1h")), 3)
        self.assertEqual(len(client.audit(job=ok.id, until="1h")), 0)
        self.assertEqual(len(client.audit(job=ok.id, category="syscall,path")), 0)
        s = client.audit(job=ok.id).summary()
        self.assertEqual((s["total"], s["allowed"], s["denied"]), (3, 3, 0))
        self.assertEqual(s["categories"]["job"]["actions"]["finished"],
                         {"allowed": 1, "denied": 0})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.jsonl")
            self.assertEqual(client.audit(job=ok.id).export(path), 3)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            with open(path) as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual(list(rows[0]), list(audit.FIELDS))
            self.assertEqual(rows[2]["action"], "finished")
            with self.assertRaises(FileExistsError):
                client.audit(job=ok.id).export(path)
            self.assertEqual(client.audit(job=ok.id).export(path, force=True), 3)
        with self.assertRaises(sandq.InvalidJob):
            client.audit(category="network")
        with self.assertRaises(sandq.InvalidJob):
            client.audit(since="yesterday")
        with self.assertRaises(sandq.InvalidJob):
            client.audit(denied=True, allowed=True)

    def test_forged_entries_are_skipped_and_named(self):
        c = sandq.Client(harness.url(), "pyfake-" + secrets.token_hex(4))
        key = c.key("audit")
        c.redis.xadd(key, event(job="j-1"))
        c.redis.xadd(key, event(category="network"))
        c.redis.xadd(key, dict(event(), extra="x"))
        c.redis.xadd(key, event(job="bad id!"))
        c.redis.xadd(key, event(allowed="false", category="syscall", action="refused",
                                target="ptrace", level="alert"))
        a = c.audit()
        self.assertEqual([e.job for e in a], ["j-1", ""])
        self.assertEqual(len(a.skipped), 3)
        self.assertIn("category", a.skipped[0])
        self.assertEqual([e.target for e in c.audit(denied=True)], ["ptrace"])
        self.assertEqual([e.target for e in c.audit(level="warning")], ["ptrace"])
        c.close()

    def test_pages(self):
        c = sandq.Client(harness.url(), "pyfake-" + secrets.token_hex(4))
        p = c.redis.pipeline(transaction=False)
        for i in range(audit.PAGE_COUNT * 2 + 5):
            p.xadd(c.key("audit"), event(job="j-%d" % i))
        p.execute()
        self.assertEqual(len(c.audit()), audit.PAGE_COUNT * 2 + 5)
        c.close()

    def test_tail_sees_new_events(self):
        tail = client.audit_tail(category="job", timeout=60)
        jid = client.submit("true")
        got = []
        for ev in tail:
            if ev.job == jid:
                got.append(ev.action)
                if ev.action == "finished":
                    break
        self.assertEqual(got, ["received", "started", "finished"])
        self.assertEqual(list(client.audit_tail(job="py-none", timeout=0.2)), [])


if __name__ == "__main__":
    unittest.main()


class SameAsTheCli(unittest.TestCase):
    def test_the_same_events_as_sandq_audit(self):
        r = client.sh("echo cli")
        p = subprocess.run([os.path.join(harness.build_dir(), "sandq"), "--redis",
                            harness.url(), "audit", "--job", r.id, "--json"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        theirs = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([e.as_dict() for e in client.audit(job=r.id)], theirs)
        p = subprocess.run([os.path.join(harness.build_dir(), "sandq"), "--redis",
                            harness.url(), "audit", "--job", r.id, "--summary", "--json"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(json.loads(p.stdout), client.audit(job=r.id).summary())
