"""Persistent sandboxes through the real sandqd: lifecycle, files, kv, forks,
snapshots, history and path rules."""

import sqlite3
import tempfile
import os
import unittest

import sandq
from tests import harness


def setUpModule():
    global client
    client = harness.client()


def tearDownModule():
    client.close()


def gone(sid):
    try:
        client.sandbox(sid)
    except sandq.SandboxNotFound:
        return True
    return False


class Lifecycle(unittest.TestCase):
    def test_with_block_deletes_a_new_sandbox(self):
        with client.sandbox() as sb:
            self.assertTrue(sb.created)
            self.assertEqual(sb.version, 1)
            sid = sb.id
            self.assertFalse(gone(sid))
        self.assertTrue(sb.deleted)
        self.assertTrue(gone(sid))

    def test_with_block_deletes_even_after_an_error(self):
        with self.assertRaises(sandq.CommandError):
            with client.sandbox() as sb:
                sb.bash("exit 1")
        self.assertTrue(gone(sb.id))

    def test_keep_true_keeps_it_and_opening_it_keeps_it(self):
        with client.sandbox(keep=True, labels={"team": "py"}) as sb:
            sb.write_file("kept.txt", "still here")
        with client.sandbox(sb.id) as again:
            self.assertFalse(again.created)
            self.assertEqual(again.read_file("kept.txt"), "still here")
            self.assertEqual(again.labels, {"team": "py"})
        self.assertIn(sb.id, [i["sandbox"] for i in client.sandboxes()])
        again.destroy()
        again.delete()          # once only
        self.assertTrue(gone(sb.id))

    def test_opening_a_missing_sandbox_raises(self):
        with self.assertRaises(sandq.SandboxNotFound) as cm:
            client.sandbox("py-no-such-sandbox")
        self.assertEqual(cm.exception.code, "sandbox_not_found")
        self.assertIsInstance(cm.exception, sandq.Rejected)

    def test_create_under_a_chosen_id_and_refuse_a_second(self):
        with client.sandbox("py-chosen", create=True) as sb:
            self.assertEqual(sb.id, "py-chosen")
            with self.assertRaises(sandq.Rejected) as cm:
                client.sandbox("py-chosen", create=True)
            self.assertEqual(cm.exception.code, "sandbox_exists")

    def test_a_sandbox_on_the_host_image_with_a_workdir(self):
        # docs/images.md "Sandboxes on images": the files live at the workdir.
        with client.sandbox(image="host", workdir="/srv/app") as sb:
            self.assertEqual((sb.image, sb.workdir), ("host", "/srv/app"))
            self.assertEqual(sb.bash('pwd; echo "$HOME"; echo hi > f').stdout_text,
                             "/srv/app\n/srv/app\n")
            self.assertEqual(sb.read_file("/f"), "hi\n")
            self.assertEqual(sb.bash("cat /srv/app/f; ls -A /workspace | wc -l")
                             .stdout_text, "hi\n0\n")
            info = sb.info()
            self.assertEqual((info["image"], info["workdir"]), ("host", "/srv/app"))
            with sb.fork() as f:
                self.assertEqual((f.image, f.workdir), ("host", "/srv/app"))
            # A run may name the sandbox's own image.
            self.assertEqual(client.sh("pwd", sandbox=sb.id, image="host")
                             .stdout_text, "/srv/app\n")

    def test_a_folder_of_host_or_without_an_image_is_refused(self):
        with self.assertRaises(sandq.InvalidJob):
            client.sandbox(from_image_dir="/srv")
        with self.assertRaises(sandq.Rejected) as cm:
            client.sandbox(image="host", from_image_dir="/srv")
        self.assertEqual(cm.exception.code, "invalid_job")
        self.assertIn("from_image_dir", cm.exception.message)
        with self.assertRaises(sandq.Rejected) as cm:
            client.sandbox(image="host", workdir="/proc/x")
        self.assertIn("'/proc/x' is below /proc", cm.exception.message)

    def test_seeded_files(self):
        with client.sandbox(files={"src/a.py": "print('a')", "b.bin": b"\0\1"}) as sb:
            self.assertEqual(sb.execute_python("exec(open('src/a.py').read())")
                             .stdout_text, "a\n")
            self.assertEqual(sb.read_file_bytes("/workspace/b.bin"), b"\0\1")

    def test_files_from_a_local_folder(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "pkg", ".git"))
            with open(os.path.join(d, "pkg", "m.txt"), "w") as f:
                f.write("local")
            with open(os.path.join(d, "pkg", ".git", "HEAD"), "w") as f:
                f.write("ref")
            files = sandq.files_from_dir(d)
        self.assertEqual(files, {"pkg/m.txt": b"local"})
        with client.sandbox(files=files) as sb:
            self.assertEqual(sb.read_file("pkg/m.txt"), "local")


class Runs(unittest.TestCase):
    def test_bash_state_carries_over_and_commits(self):
        with client.sandbox() as sb:
            r = sb.bash("mkdir -p work && cd work && export MODE=fast && echo 1 > n")
            self.assertEqual(r.sandbox, sb.id)
            self.assertEqual(sb.version, 2)
            self.assertIn("/work/n", r.changed)
            self.assertEqual(sb.bash('pwd; echo "$MODE"; cat n').stdout_text,
                             "/workspace/work\nfast\n1\n")

    def test_check_false_returns_the_failure(self):
        with client.sandbox() as sb:
            r = sb.bash("echo no >&2; exit 2", check=False)
            self.assertEqual((r.status, r.exit_code, r.stderr_text), ("exit", 2, "no\n"))
            with self.assertRaises(sandq.CommandError) as cm:
                sb.execute_python("raise SystemExit(5)")
            self.assertEqual(cm.exception.exit_code, 5)
            self.assertEqual(sb.run(["true"]).status, "ok")

    def test_persist_false_commits_nothing(self):
        with client.sandbox() as sb:
            before = sb.version
            sb.bash("echo x > scratch", persist=False)
            self.assertEqual(sb.info()["version"], before)
            self.assertFalse(sb.exists("scratch"))


class Files(unittest.TestCase):
    def test_write_read_list_exists_delete(self):
        with client.sandbox() as sb:
            sb.write_file("notes.txt", "héllo\n")
            sb.write_file_bytes("/bin.dat", b"\x00\xff", mode=0o600)
            sb.bash("mkdir -p d/e && touch d/e/f")
            self.assertEqual(sb.read_file("notes.txt"), "héllo\n")
            self.assertEqual(sb.read_file_bytes("bin.dat"), b"\x00\xff")
            self.assertEqual(sb.list_files(), ["bin.dat", "d", "notes.txt"])
            self.assertEqual(sb.stat("bin.dat")["mode"] & 0o777, 0o600)
            self.assertEqual([e["path"] for e in sb.entries("d", recursive=True)],
                             ["/d/e", "/d/e/f"])
            self.assertTrue(sb.exists("/workspace/notes.txt"))
            self.assertTrue(sb.exists("/"))
            self.assertFalse(sb.exists("missing"))
            sb.delete_file("notes.txt")
            self.assertFalse(sb.exists("notes.txt"))
            self.assertEqual(sb.delete_file("d", recursive=True), 3)
            with self.assertRaises(sandq.NotFound) as cm:
                sb.read_file("notes.txt")
            self.assertIsInstance(cm.exception, FileNotFoundError)
            self.assertEqual((cm.exception.path, cm.exception.filename),
                             ("notes.txt", "notes.txt"))
            with self.assertRaises(sandq.Rejected) as cm:
                sb.write_file("no/such/dir/x", "y", parents=False)
            self.assertEqual((cm.exception.code, cm.exception.path),
                             ("not_found", "no/such/dir/x"))

    def test_write_file_creates_parent_folders(self):
        # The fs.write field parents (sandqd's side of issue 20).
        with client.sandbox() as sb:
            try:
                sb.write_file("deep/er/x.txt", "made")
            except sandq.Rejected as e:
                if "'parents'" in (e.message or ""):
                    self.skipTest("this sandqd has no fs.write parents yet")
                raise
            self.assertEqual(sb.read_file("deep/er/x.txt"), "made")
            self.assertEqual(sb.entries("deep")[0]["type"], "dir")
            self.assertEqual(sb.bash("cat deep/er/x.txt").stdout, "made")

    def test_path_rules_of_the_sandbox_object(self):
        with client.sandbox() as setup:
            setup.bash("mkdir secret view && echo s > secret/k && echo v > view/y")
            with client.sandbox(setup.id, perms={"/secret/**": "none",
                                                 "/view/**": "view"}) as sb:
                self.assertFalse(sb.exists("secret/k"))
                self.assertEqual(sb.list_files("view"), ["y"])
                with self.assertRaises(sandq.PermissionDenied) as cm:
                    sb.read_file("view/y")
                self.assertIsInstance(cm.exception, PermissionError)
                self.assertEqual(cm.exception.path, "view/y")
                r = sb.bash("cat secret/k", check=False)
                self.assertNotEqual(r.exit_code, 0)


class KV(unittest.TestCase):
    def test_get_set_delete_keys(self):
        with client.sandbox() as sb:
            sb.kv.set("session", "abc")
            sb.kv.set("step", 3)
            sb.kv.set("cfg", {"debug": True, "list": [1, 2]})
            self.assertEqual(sb.kv.get("session"), "abc")
            self.assertEqual(sb.kv.get("step"), 3)
            self.assertEqual(sb.kv.get("cfg"), {"debug": True, "list": [1, 2]})
            self.assertIsNone(sb.kv.get("nope"))
            self.assertEqual(sb.kv.get("nope", 0), 0)
            self.assertEqual(sb.kv.keys(), ["cfg", "session", "step"])
            self.assertEqual(sb.kv.keys("s"), ["session", "step"])
            sb.kv.delete("step")
            sb.kv.delete("step")
            self.assertEqual(sb.kv.keys(), ["cfg", "session"])
            with self.assertRaises(sandq.InvalidJob):
                sb.kv.set("bad", float("nan"))


class ForksSnapshotsHistory(unittest.TestCase):
    def test_fork_is_independent(self):
        with client.sandbox(files={"a.txt": "base"}) as sb:
            with sb.fork() as f:
                self.assertTrue(f.created)
                self.assertEqual(f.version, 1)
                self.assertEqual(f.read_file("a.txt"), "base")
                f.write_file("a.txt", "changed")
                self.assertEqual(sb.read_file("a.txt"), "base")
            self.assertTrue(gone(f.id))
            with sb.fork("py-named-fork", keep=True) as g:
                pass
            self.assertFalse(gone("py-named-fork"))
            g.delete()

    def test_export_and_create_from_snapshot(self):
        with client.sandbox() as sb:
            sb.write_file("f.txt", "data")
            sb.kv.set("k", [1])
            snap = sb.export_snapshot()
        self.assertEqual(snap[:16], b"SQLite format 3\x00")
        with tempfile.NamedTemporaryFile(suffix=".db") as t:
            t.write(snap)
            t.flush()
            db = sqlite3.connect(t.name)
            self.assertEqual(db.execute("select value from kv_store where key='k'")
                             .fetchone()[0], "[1]")
            db.close()
        with client.sandbox(snapshot=snap) as copy:
            self.assertEqual(copy.read_file("f.txt"), "data")
            self.assertEqual(copy.kv.get("k"), [1])
            copy.write_file("f.txt", "newer")
            info = copy.import_snapshot(snap)
            self.assertEqual(info["version"], copy.version)
            self.assertEqual(copy.read_file("f.txt"), "data")

    def test_a_stored_snapshot_is_created_from_by_its_key(self):
        # The key the client computes is the server's; a create from bytes
        # the tenant stores is a fork of them (the same snapshot, by key,
        # no upload); from bytes it does not store, an import as before.
        with client.sandbox() as sb:
            sb.write_file("f.txt", "data")
            snap = sb.export_snapshot()
            head = sb.info()["snapshot"]
            self.assertEqual(sandq.snapshot_key(snap), head)
            with client.sandbox(snapshot=snap) as copy:
                self.assertEqual(copy.info()["snapshot"], head)
                self.assertEqual(copy.version, 1)
                copy.write_file("f.txt", "mine")
                self.assertEqual(sb.read_file("f.txt"), "data")
            r = client.call("sandbox.create", sandbox="py-by-key", snapshot_key=head)
            self.assertEqual(r.data["snapshot"], head)
            client.call("sandbox.delete", sandbox="py-by-key")
        # Its sandbox gone, the tenant stores those bytes no more.
        with self.assertRaises(sandq.Rejected) as cm:
            client.call("sandbox.create", sandbox="py-by-key", snapshot_key=head)
        self.assertEqual(cm.exception.code, "snapshot_not_found")
        with client.sandbox(snapshot=snap) as again:
            self.assertEqual(again.read_file("f.txt"), "data")
            self.assertNotEqual(again.info()["snapshot"], head)
        with self.assertRaises(sandq.InvalidJob):
            client.call("sandbox.create", sandbox="x", snapshot_key="ABC")

    def test_a_localsandbox_export_opens_as_a_sandbox(self):
        # tests/data/localsandbox-export.db: LocalSandbox 0.3's layout (its
        # /data is the root; symlinks stored as JSON files; ms call times).
        with open(os.path.join(harness.REPO, "tests", "data",
                               "localsandbox-export.db"), "rb") as f:
            snap = f.read()
        with client.sandbox(snapshot=snap) as sb:
            self.assertEqual(sb.list_files("project"),
                             ["README.md", "blob.bin", "build", "empty.txt", "latest",
                              "notes é.txt", "src"])
            self.assertEqual(sb.stat("project/latest")["target"], "src/main.py")
            self.assertEqual(sb.read_file_bytes("project/blob.bin"),
                             bytes(i * 7 % 256 for i in range(9000)))
            self.assertEqual((sb.kv.get("session"), sb.kv.get("step")), ("abc", 3))
            calls = sb.history()
            self.assertEqual(calls[0].name, "seed")
            self.assertEqual(calls[1].parameters["command"], "mkdir /data/project/build")
            self.assertEqual(sb.bash("readlink project/latest").stdout_text,
                             "src/main.py\n")

    def test_history_records_calls(self):
        with client.sandbox() as sb:
            sb.bash("echo one")
            sb.write_file("x", "1")
            sb.bash("exit 3", check=False)
            calls = sb.history()
            sb.execute_python("print(2)")
            calls = sb.history()
            # LocalSandbox's names and fields, beside sandq's own.
            self.assertEqual([c.name for c in calls],
                             ["sandbox.create", "bash", "fs.write", "bash", "python"])
            self.assertEqual([c.op for c in calls],
                             ["sandbox.create", "sh", "fs.write", "sh", "python"])
            self.assertEqual(calls[1].parameters["command"], "echo one")
            self.assertEqual(calls[1].parameters["script"], "echo one")
            self.assertEqual(calls[4].parameters["code"], "print(2)")
            self.assertEqual((calls[3].result["exitCode"], calls[3].result["exit_code"]),
                             (3, 3))
            self.assertEqual(calls[1].result["stdout"], "one\n")
            self.assertEqual(calls[1].status, "success")
            self.assertEqual(calls[3].status, "error")
            self.assertEqual([c.name for c in sb.history(limit=2)], ["bash", "python"])
            versions = sb.versions()
            self.assertEqual([v["version"] for v in versions], [5, 4, 3, 2, 1])


if __name__ == "__main__":
    unittest.main()
