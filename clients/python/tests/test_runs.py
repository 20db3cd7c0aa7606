"""Runs through the real sandqd: results, options, and each typed exception."""

import unittest

import sandq
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


class Results(unittest.TestCase):
    def test_sh_gives_output_exit_code_and_times(self):
        r = client.sh("echo out; echo err >&2")
        self.assertIsInstance(r, sandq.Result)
        self.assertEqual(r.status, "ok")
        self.assertTrue(r.ok)
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.stdout, "out\n")               # str, as LocalSandbox
        self.assertEqual(r.stdout_bytes, b"out\n")
        self.assertEqual(r.stderr_text, "err\n")
        self.assertGreaterEqual(r.wall_ms, 0)
        self.assertGreater(r.finished_at, 0)
        self.assertEqual(r.exit_status, 0)
        self.assertTrue(r.id.startswith("j-"))

    def test_run_takes_an_argv_without_a_shell(self):
        r = client.run(["printf", "%s|", "a b", "$HOME"])
        self.assertEqual(r.stdout_text, "a b|$HOME|")

    def test_python_runs_code(self):
        r = client.python("import sys; print(sum(range(10))); sys.exit(0)")
        self.assertEqual(r.stdout_text, "45\n")

    def test_options_reach_the_job(self):
        r = client.sh('echo "$GREETING"; pwd; cat; cat seed/x.txt',
                      env={"GREETING": "hej"}, cwd="sub", stdin="from stdin\n",
                      files={"sub/seed/x.txt": b"seeded"}, preset="strict",
                      limits={"wall_ms": 20000}, pids=64, labels={"who": "test"})
        self.assertEqual(r.stdout_text, "hej\n/workspace/sub\nfrom stdin\nseeded")

    def test_text_helpers_replace_invalid_utf8(self):
        r = client.sh(r"printf '\377ok'")
        self.assertEqual(r.stdout_bytes, b"\xffok")
        self.assertEqual(r.stdout, "\ufffdok")
        self.assertEqual(r.stdout_text, "\ufffdok")


class NonZeroExit(unittest.TestCase):
    def test_client_returns_a_non_zero_exit_by_default(self):
        r = client.sh("echo partial; exit 3")
        self.assertEqual((r.status, r.exit_code, r.exit_status), ("exit", 3, 3))
        self.assertEqual(r.stdout_text, "partial\n")

    def test_check_raises_command_error(self):
        with self.assertRaises(sandq.CommandError) as cm:
            client.sh("echo out; echo bad >&2; exit 4", check=True)
        e = cm.exception
        self.assertEqual((e.exit_code, e.stdout, e.stderr), (4, "out\n", "bad\n"))
        self.assertEqual(e.result.status, "exit")
        self.assertIsInstance(e, sandq.Error)

    def test_a_signal_is_a_command_error_with_check(self):
        with self.assertRaises(sandq.CommandError) as cm:
            client.sh("kill -9 $$", check=True)
        self.assertEqual(cm.exception.signal, 9)
        self.assertEqual(cm.exception.result.exit_status, 137)


class Limits(unittest.TestCase):
    def test_output_limit(self):
        with self.assertRaises(sandq.LimitExceeded) as cm:
            client.sh("head -c 200000 /dev/zero", output_bytes=1024)
        e = cm.exception
        self.assertEqual((e.limit, e.status), ("output", "output_limit"))
        self.assertTrue(e.result.stdout_truncated)
        self.assertLessEqual(len(e.result.stdout_bytes), 1024)
        self.assertEqual(e.result.exit_status, 124)

    def test_cpu_limit(self):
        with self.assertRaises(sandq.LimitExceeded) as cm:
            client.sh("while :; do :; done", cpu_ms=300, wall_ms=30000)
        self.assertEqual(cm.exception.limit, "cpu")

    def test_memory_limit(self):
        with self.assertRaises(sandq.LimitExceeded) as cm:
            client.python("x = bytearray(400 << 20)", memory_bytes=64 << 20)
        self.assertEqual(cm.exception.limit, "memory")

    def test_limits_are_raised_even_without_check(self):
        with self.assertRaises(sandq.LimitExceeded):
            client.sh("head -c 200000 /dev/zero", output_bytes=1024, check=False)


class Timeouts(unittest.TestCase):
    def test_job_timeout_is_a_timeout_error_with_the_result(self):
        with self.assertRaises(sandq.JobTimeout) as cm:
            client.sh("echo started; sleep 10", wall_ms=300)
        e = cm.exception
        self.assertIsInstance(e, sandq.TimeoutError)
        self.assertIsInstance(e, TimeoutError)      # the builtin too
        self.assertEqual(e.result.status, "timeout")

    def test_timeout_is_the_jobs_wall_clock_limit(self):
        # As AgentFense's run(cmd, timeout=30): the job is killed at it.
        with self.assertRaises(sandq.JobTimeout) as cm:
            client.sh("echo started; sleep 30", timeout=0.3)
        self.assertEqual(cm.exception.result.stdout, "started\n")
        self.assertIn("wall-clock limit of 300 ms", cm.exception.result.error_message)
        job = sandq.client.with_timeout(sandq.Job.sh("true"), 2.5)
        self.assertEqual(job.fields["limits"], {"wall_ms": 2500})
        with self.assertRaises(sandq.InvalidJob):
            client.sh("true", timeout=2, wall_ms=5000)
        self.assertEqual(client.sh("echo ok", timeout=20, wall_ms=20000).stdout, "ok\n")

    def test_the_wait_of_a_timeout_outlasts_it(self):
        c = sandq.Client(harness.url(), timeout=100)
        self.assertEqual(c._wait_for(200, sandq.client._DEFAULT),
                         200 + sandq.client.WAIT_MARGIN)
        self.assertEqual(c._wait_for(1, sandq.client._DEFAULT), 100)
        self.assertEqual(c._wait_for(200, 0.5), 0.5)
        c.close()

    def test_wait_timeout_is_the_old_timeout(self):
        with self.assertRaises(sandq.WaitTimeout) as cm:
            client.sh("sleep 0.5; echo late", wait_timeout=0.05)
        r = client.wait(cm.exception.job_id, timeout=30)
        self.assertEqual(r.stdout, "late\n")

    def test_wait_timeout_leaves_the_job_running(self):
        jid = client.submit("sleep 0.5; echo late")
        with self.assertRaises(sandq.WaitTimeout) as cm:
            client.wait(jid, timeout=0.05)
        self.assertEqual(cm.exception.job_id, jid)
        self.assertIsNone(cm.exception.result)
        r = client.wait(jid, timeout=30)
        self.assertEqual(r.stdout_text, "late\n")


class Rejections(unittest.TestCase):
    def test_server_rejection_names_the_field(self):
        with self.assertRaises(sandq.Rejected) as cm:
            client.sh("echo", net="bogus")
        e = cm.exception
        self.assertEqual(e.code, "invalid_job")
        self.assertIn("'net'", e.message)
        self.assertEqual(e.result.exit_status, 125)

    def test_an_image_outside_image_sources_is_rejected_naming_the_field(self):
        with self.assertRaises(sandq.Rejected) as cm:
            client.sh("echo", image="docker://registry.example.com/team/py:1")
        self.assertEqual(cm.exception.code, "image")
        self.assertIn("'image'", cm.exception.message)
        self.assertEqual(client.sh("echo ok", image="host").stdout_text, "ok\n")

    def test_a_limit_above_the_ceiling_is_rejected(self):
        with self.assertRaises(sandq.Rejected) as cm:
            client.sh("echo", wall_ms=10 ** 10)
        self.assertIn("limits.wall_ms", cm.exception.message)

    def test_client_side_checks_send_nothing(self):
        for bad in (dict(preset="huge"), dict(env={"1X": "y"}), dict(id="a b"),
                    dict(limits={"walltime": 3}), dict(persist=True),
                    dict(perms=[("x", "everything")])):
            with self.subTest(bad=bad), self.assertRaises(sandq.InvalidJob):
                client.sh("echo", **bad)
        with self.assertRaises(TypeError):
            client.sh("echo", no_such_option=1)


class SubmitAndWait(unittest.TestCase):
    def test_submit_then_wait_and_get(self):
        job = sandq.Job.sh("echo $0 ok", id="py-submit-1")
        self.assertEqual(client.submit(job), "py-submit-1")
        r = client.wait("py-submit-1")
        self.assertEqual(r.id, "py-submit-1")
        self.assertEqual(r.stdout_text, "bash ok\n")
        # The done list is empty now; the stored result is still there.
        self.assertEqual(client.get("py-submit-1").stdout_text, "bash ok\n")
        self.assertEqual(client.wait("py-submit-1", timeout=1).status, "ok")
        self.assertIsNone(client.get("py-never-submitted"))

    def test_wait_returns_any_status_without_raising(self):
        r = client.wait(client.submit("exit 7"))
        self.assertEqual((r.status, r.exit_code), ("exit", 7))
        r = client.wait(client.submit(sandq.Job.sh("echo", net="bogus")))
        self.assertEqual(r.status, "rejected")
        with self.assertRaises(sandq.Rejected):
            r.raise_for_status()

    def test_submit_takes_argv_lists_and_dicts(self):
        r1 = client.wait(client.submit(["echo", "list"]))
        r2 = client.wait(client.submit({"op": "python", "code": "print('dict')"}))
        self.assertEqual((r1.stdout_text, r2.stdout_text), ("list\n", "dict\n"))


if __name__ == "__main__":
    unittest.main()
