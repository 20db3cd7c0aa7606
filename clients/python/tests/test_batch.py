"""batch(): many jobs, a bounded number in flight, results as they complete."""

import unittest

import sandq
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


class Batch(unittest.TestCase):
    def test_fifty_jobs(self):
        jobs = [sandq.Job.sh("echo $((%d * 2))" % i) for i in range(25)]
        jobs += [sandq.Job.python("print(%d * 2)" % i) for i in range(25, 45)]
        jobs += [sandq.Job.run(["echo", str(i * 2)]) for i in range(45, 50)]
        want = {j.id: "%d\n" % (i * 2) for i, j in enumerate(jobs)}
        got = {}
        for r in client.batch(jobs, concurrency=8):
            self.assertEqual(r.status, "ok", r.error_message)
            got[r.id] = r.stdout_text
        self.assertEqual(got, want)

    def test_results_of_any_status_and_plain_scripts(self):
        results = list(client.batch(["exit 3", "echo ok", ["false"]], concurrency=2))
        self.assertEqual(sorted(r.status for r in results), ["exit", "exit", "ok"])

    def test_checks_every_job_before_sending_any(self):
        dup = sandq.Job.sh("true", id="py-batch-dup")
        with self.assertRaises(sandq.InvalidJob):
            list(client.batch([dup, sandq.Job.sh("true", id="py-batch-dup")]))
        with self.assertRaises(sandq.InvalidJob):
            list(client.batch(["true", {"op": "sh", "script": "true", "preset": "x"}]))
        self.assertIsNone(client.get("py-batch-dup"))

    def test_a_batch_wait_timeout_is_a_wait_timeout(self):
        with self.assertRaises(sandq.WaitTimeout):
            list(client.batch([sandq.Job.sh("sleep 5", wall_ms=500)], wait_timeout=0.05))

    def test_timeout_is_each_jobs_wall_clock_limit(self):
        results = list(client.batch(["sleep 30", "echo quick"], timeout=0.3))
        self.assertEqual(sorted(r.status for r in results), ["ok", "timeout"])
        with self.assertRaises(sandq.InvalidJob):
            list(client.batch([sandq.Job.sh("true", wall_ms=500)], timeout=2))


if __name__ == "__main__":
    unittest.main()
