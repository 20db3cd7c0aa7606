"""The async twins, through the real sandqd (a new event loop per test, as
IsolatedAsyncioTestCase makes: the client opens a pool per loop)."""

import asyncio
import os
import tempfile
import unittest

import sandq
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


class AsyncRuns(unittest.IsolatedAsyncioTestCase):
    async def asyncTearDown(self):
        await client.aclose()

    async def test_arun_ash_apython(self):
        r1, r2, r3 = await asyncio.gather(client.arun(["echo", "a"]),
                                          client.ash("echo b; exit 2"),
                                          client.apython("print('c')"))
        self.assertEqual((r1.stdout_text, r2.exit_code, r3.stdout_text),
                         ("a\n", 2, "c\n"))
        with self.assertRaises(sandq.CommandError):
            await client.ash("exit 2", check=True)
        with self.assertRaises(sandq.LimitExceeded):
            await client.ash("head -c 100000 /dev/zero", output_bytes=1024)
        with self.assertRaises(sandq.Rejected):
            await client.apython("1", net="bogus")

    async def test_asubmit_await_and_wait_timeout(self):
        jid = await client.asubmit("sleep 0.3; echo done")
        with self.assertRaises(sandq.WaitTimeout):
            await client.await_(jid, timeout=0.05)
        r = await client.await_(jid)
        self.assertEqual(r.stdout_text, "done\n")
        self.assertEqual((await client.aget(jid)).id, jid)

    async def test_abatch(self):
        jobs = [sandq.Job.sh("echo %d" % i) for i in range(20)]
        want = {j.id: "%d\n" % i for i, j in enumerate(jobs)}
        got = {}
        async for r in client.abatch(jobs, concurrency=5):
            got[r.id] = r.stdout_text
        self.assertEqual(got, want)


class AsyncOperators(unittest.IsolatedAsyncioTestCase):
    async def asyncTearDown(self):
        await client.aclose()

    async def test_twins_of_the_operators_calls(self):
        r = await client.ash("echo t")
        status, events, summary = await asyncio.gather(
            client.astatus(), client.aaudit(job=r.id),
            client.abatch_run([{"op": "sh", "script": "echo 1", "expect": "1\n"}]))
        self.assertGreaterEqual(status["live_hosts"], 1)
        self.assertEqual([e.action for e in events], ["received", "started", "finished"])
        self.assertEqual((summary.passed, summary.failed), (1, 0))
        self.assertEqual((await client.abatch_status(summary.batch))["state"], "finished")
        self.assertEqual(await client.acancel(r.id), "finished")
        self.assertIsInstance(await client.adead_letters(), list)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "f.txt"), "w") as f:
                f.write("local")
            sb = await sandq.Sandbox.afrom_local(d, client=client, preset=None)
            self.assertEqual(await sb.aread_file("f.txt"), "local")
            await sb.adelete()
        if client.redis.exists("sandq:perm_presets"):
            names = await client.alist_presets()
            self.assertEqual((await client.aget_preset(names[0])).name, names[0])
            p = await client.aextend_preset(names[0], {"/x": "none"})
            self.assertEqual(p.wire()[1], [{"pattern": "/x", "level": "none"}])


class AsyncSandbox(unittest.IsolatedAsyncioTestCase):
    async def asyncTearDown(self):
        await client.aclose()

    async def test_async_with_deletes(self):
        async with client.asandbox() as sb:
            sid = sb.id
            await sb.abash("echo hi > a.txt")
            self.assertEqual(await sb.aread_file("a.txt"), "hi\n")
        with self.assertRaises(sandq.SandboxNotFound):
            await client.asandbox(sid)

    async def test_every_twin(self):
        sb = await client.asandbox(files={"seed": "s"})
        try:
            self.assertEqual((await sb.aexecute_python("print(open('seed').read())"))
                             .stdout_text, "s\n")
            self.assertEqual((await sb.arun(["cat", "seed"])).stdout_text, "s")
            with self.assertRaises(sandq.CommandError):
                await sb.abash("false")
            await sb.awrite_file("b.bin", b"\1\2")
            self.assertEqual(await sb.aread_file_bytes("b.bin"), b"\1\2")
            self.assertEqual(await sb.alist_files(), ["b.bin", "seed"])
            self.assertEqual(len(await sb.aentries(recursive=True)), 2)
            self.assertEqual((await sb.astat("seed"))["size"], 1)
            self.assertTrue(await sb.aexists("seed"))
            self.assertEqual(await sb.adelete_file("seed"), 1)
            self.assertFalse(await sb.aexists("seed"))
            await sb.kv.aset("k", {"v": 1})
            self.assertEqual(await sb.kv.aget("k"), {"v": 1})
            self.assertEqual(await sb.kv.akeys(), ["k"])
            await sb.kv.adelete("k")
            self.assertIsNone(await sb.kv.aget("k"))
            self.assertIn("fs.write", [c.name for c in await sb.ahistory()])
            self.assertEqual((await sb.aversions())[0]["version"], sb.version)
            self.assertEqual((await sb.ainfo())["sandbox"], sb.id)
            snap = await sb.aexport_snapshot()
            async with client.asandbox(snapshot=snap) as copy:
                self.assertEqual(await copy.aread_file_bytes("b.bin"), b"\1\2")
                await copy.aimport_snapshot(snap)
            fork = await sb.afork()
            async with fork:
                self.assertEqual(await fork.alist_files(), ["b.bin"])
            self.assertTrue(fork.deleted)
            self.assertIn(sb.id, [i["sandbox"] for i in await client.asandboxes()])
        finally:
            await sb.adelete()
        self.assertTrue(sb.deleted)


class Loops(unittest.TestCase):
    def test_one_client_across_event_loops(self):
        async def once(i):
            return (await client.ash("echo %d" % i)).stdout_text
        self.assertEqual(asyncio.run(once(1)), "1\n")
        self.assertEqual(asyncio.run(once(2)), "2\n")


if __name__ == "__main__":
    unittest.main()
