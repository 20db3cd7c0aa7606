"""Building jobs and decoding results: pure code, no Redis."""

import unittest

import msgpack

import sandq
from sandq.job import as_job


class Jobs(unittest.TestCase):
    def test_ids_are_random_and_checked(self):
        a, b = sandq.Job.sh("true"), sandq.Job.sh("true")
        self.assertRegex(a.id, r"^j-[0-9a-f]{24}$")
        self.assertNotEqual(a.id, b.id)
        self.assertEqual(sandq.Job.sh("true", id="x.y:z-1").id, "x.y:z-1")
        for bad in ("", "a/b", "x" * 129):
            with self.assertRaises(sandq.InvalidJob):
                sandq.Job.sh("true", id=bad)

    def test_wire_fields(self):
        j = sandq.Job.run(["ls", "-l"], env={"A": "1"}, cwd="d", stdin="in",
                          wall_ms=5, limits={"files": 9}, preset="strict",
                          files={"a": "t", "b": b"\0"}, net="none", priority=2,
                          deadline_ms=10, labels={"k": "v"})
        f = msgpack.unpackb(j.pack(), raw=False)
        self.assertEqual(f, {"v": 1, "id": j.id, "op": "exec", "argv": ["ls", "-l"],
                             "env": {"A": "1"}, "cwd": "d", "stdin": b"in",
                             "limits": {"files": 9, "wall_ms": 5}, "preset": "strict",
                             "files": {"a": b"t", "b": b"\0"}, "net": "none",
                             "priority": 2, "deadline_ms": 10, "labels": {"k": "v"}})

    def test_an_allow_list_is_passed_as_given_and_bounded(self):
        f = msgpack.unpackb(sandq.Job.sh("true", net="allow",
                                         allow=["pypi.example:443"]).pack(), raw=False)
        self.assertEqual((f["net"], f["allow"]), ("allow", ["pypi.example:443"]))
        for bad in ("pypi.example", [], [""], ["x" * 263], ["a"] * 65):
            with self.subTest(bad=bad), self.assertRaises(sandq.InvalidJob):
                sandq.Job.sh("true", net="allow", allow=bad)

    def test_a_sandboxs_allow_list_goes_with_its_create(self):
        f = msgpack.unpackb(sandq.Job.sandbox_op("sandbox.create", sandbox="s1",
                                                 allow=["*.github.com"]).pack(), raw=False)
        self.assertEqual((f["op"], f["allow"]), ("sandbox.create", ["*.github.com"]))
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sandbox_op("sandbox.create", sandbox="s1", allow="x")

    def test_a_results_egress_rows_are_decoded(self):
        r = sandq.Result({"id": "j", "status": "ok", "egress": [
            {"host": "pypi.example", "port": 443, "allowed": True, "conns": 2,
             "up": 10, "down": 20}]})
        self.assertEqual(r.egress, [{"host": "pypi.example", "port": 443,
                                     "allowed": True, "conns": 2, "up": 10,
                                     "down": 20}])
        self.assertEqual(sandq.Result({"id": "j"}).egress, [])

    def test_image_is_passed_as_given_and_bounded(self):
        ref = "docker://registry.example.com:5000/team/py:3.11"
        f = msgpack.unpackb(sandq.Job.sh("true", image=ref).pack(), raw=False)
        self.assertEqual(f["image"], ref)
        self.assertNotIn("image", sandq.Job.sh("true").fields)
        for bad in ("", "x" * 1025, 5):
            with self.assertRaises(sandq.InvalidJob):
                sandq.Job.sh("true", image=bad)

    def test_a_sandbox_on_an_image_names_it_its_workdir_and_folder(self):
        ref = "docker://registry.example.com:5000/swe/task:1"
        f = msgpack.unpackb(sandq.Job.sandbox_op(
            "sandbox.create", sandbox="t", image=ref, workdir="/testbed",
            from_image_dir="/testbed").pack(), raw=False)
        self.assertEqual((f["image"], f["workdir"], f["from_image_dir"]),
                         (ref, "/testbed", "/testbed"))
        self.assertNotIn("workdir", sandq.Job.sandbox_op("sandbox.create",
                                                         sandbox="t").fields)
        for bad in ({"workdir": "testbed"}, {"from_image_dir": "/testbed"},
                    {"image": ref, "from_image_dir": "rel"}, {"image": ""},
                    {"workdir": "/" + "x" * 1024}):
            with self.subTest(bad=bad), self.assertRaises(sandq.InvalidJob):
                sandq.Job.sandbox_op("sandbox.create", sandbox="t", **bad)

    def test_persist_follows_the_sandbox(self):
        self.assertNotIn("persist", sandq.Job.sh("true").fields)
        self.assertIs(sandq.Job.sh("true", sandbox="s").fields["persist"], True)
        self.assertIs(sandq.Job.sh("true", sandbox="s", persist=False)
                      .fields["persist"], False)
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", persist=True)
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", sandbox="..")

    def test_perms_in_every_accepted_form(self):
        want = [{"pattern": "/s/**", "level": "none"}]
        for form in ({"/s/**": "none"}, [("/s/**", "none")],
                     [{"pattern": "/s/**", "level": "none"}],
                     [{"pattern": "/s/**", "permission": "none"}]):
            self.assertEqual(sandq.Job.sh("true", perms=form).fields["perms"], want)
        for bad in ([("x", "rw")], [{"pattern": "x", "level": "read", "y": 1}],
                    [("", "read")], [("a\nb", "read")]):
            with self.subTest(bad=bad), self.assertRaises(sandq.InvalidJob):
                sandq.Job.sh("true", perms=bad)

    def test_limits(self):
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", wall_ms=0)
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", wall_ms=5, limits={"wall_ms": 6})
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", memory_bytes="1G")
        self.assertEqual(sandq.Job.sh("true", pids=5, limits={"pids": 5})
                         .fields["limits"], {"pids": 5})

    def test_bounds(self):
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("x" * (128 * 1024))
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.run([])
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.run("ls -l")
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", files={"../x": "y"})
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sh("true", env={"A-B": "x"})

    def test_sandbox_ops(self):
        f = sandq.Job.sandbox_op("fs.write", sandbox="s", path="a", data="x", mode=0o600).fields
        self.assertEqual((f["op"], f["data"], f["mode"]), ("fs.write", b"x", 0o600))
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sandbox_op("fs.read", path="a")           # no sandbox
        with self.assertRaises(sandq.InvalidJob):
            sandq.Job.sandbox_op("rm", sandbox="s")
        with self.assertRaises(TypeError):
            sandq.Job.sandbox_op("fs.read", sandbox="s", argv=["x"])
        self.assertNotIn("sandbox", sandq.Job.sandbox_op("sandbox.list").fields)

    def test_as_job(self):
        self.assertEqual(as_job("echo", {}).op, "sh")
        self.assertEqual(as_job(["ls"], {}).op, "exec")
        self.assertEqual(as_job({"op": "python", "code": "1"}, {}).op, "python")
        j = sandq.Job.sh("true")
        self.assertIs(as_job(j, {}), j)
        with self.assertRaises(TypeError):
            as_job(j, {"wall_ms": 1})


class Results(unittest.TestCase):
    def result(self, **kw):
        m = {"v": 1, "id": "j-1", "status": "ok", "exit_code": 0, "signal": 0,
             "stdout": b"o", "stderr": b"", "future_field": [1]}
        m.update(kw)
        return sandq.Result.decode(msgpack.packb(m, use_bin_type=True))

    def test_decode_keeps_unknown_fields(self):
        r = self.result(sandbox="s", version=3, changed=["/a"], data={"k": 1})
        self.assertEqual((r.id, r.status, r.stdout, r.sandbox, r.version, r.changed),
                         ("j-1", "ok", "o", "s", 3, ["/a"]))
        self.assertEqual(r.data, {"k": 1})
        self.assertEqual(r.raw["future_field"], [1])
        self.assertIsNone(r.error_code)

    def test_raise_for_status_by_status(self):
        cases = {"timeout": sandq.JobTimeout, "memory_limit": sandq.LimitExceeded,
                 "disk_limit": sandq.LimitExceeded, "rejected": sandq.Rejected,
                 "expired": sandq.JobFailed, "internal": sandq.JobFailed,
                 "cancelled": sandq.JobFailed}
        for st, exc in cases.items():
            with self.subTest(status=st), self.assertRaises(exc) as cm:
                self.result(status=st, exit_code=-1,
                            error={"code": st, "message": "m"}).raise_for_status(False)
            self.assertIsInstance(cm.exception, sandq.Error)
            self.assertEqual(cm.exception.result.status, st)
        r = self.result(status="exit", exit_code=2)
        self.assertIs(r.raise_for_status(check=False), r)
        with self.assertRaises(sandq.CommandError):
            r.raise_for_status()
        with self.assertRaises(sandq.SandboxNotFound):
            self.result(status="rejected", error={"code": "sandbox_not_found",
                                                  "message": "m"}).raise_for_status()

    def test_exit_status_as_the_cli(self):
        self.assertEqual(self.result(status="signal", signal=9).exit_status, 137)
        self.assertEqual(self.result(status="pids_limit").exit_status, 124)
        self.assertEqual(self.result(status="expired").exit_status, 125)


if __name__ == "__main__":
    unittest.main()
