"""Path-rule presets from Python: list_presets, get_preset, extend_preset.

The table comes from the Redis key sandq:perm_presets, which sandqd writes
at start. A sandqd that does not write it yet gets the key written here, in
the same format, with the rows of docs/paths.md; the golden test of each
preset against sandqd's own enforcement lives in the C tests of the server
side. Once both are in one tree, the key found here is sandqd's own and
these tests read the real table (nothing is written then).
"""

import json
import unittest

import redis

import sandq
from tests import harness

# The key's format, with rows like docs/paths.md's: used only when sandqd
# has not written the key itself (then its own table is read instead).
_SECRETS = ["**/.env", "**/.env.*", "**/*.pem", "**/*.key", "**/secrets/**",
            "**/.ssh/**", "**/.aws/**"]
TABLE = {"presets": [
    {"name": "agent-safe", "description": "secrets hidden, .git read-only",
     "default": "write",
     "rules": [{"pattern": "**/.git/**", "level": "read"}] +
              [{"pattern": p, "level": "none"} for p in _SECRETS]},
    {"name": "development", "description": "secrets hidden", "default": "write",
     "rules": [{"pattern": p, "level": "none"} for p in _SECRETS]},
    {"name": "read-only", "description": "read everything", "default": "read",
     "rules": []},
    {"name": "full-access", "description": "everything", "default": "write",
     "rules": []},
    {"name": "view-only", "description": "names only", "default": "view",
     "rules": []},
]}


def setUpModule():
    global client
    client = harness.client()
    r = redis.Redis.from_url(harness.url())
    # NX: never over sandqd's own table.
    r.set("sandq:perm_presets", json.dumps(TABLE), nx=True)
    r.close()


def tearDownModule():
    client.close()


class Presets(unittest.TestCase):
    def test_list_and_get(self):
        names = client.list_presets()
        self.assertIn("agent-safe", names)
        self.assertIn("full-access", names)
        p = client.get_preset("agent-safe")
        self.assertIsInstance(p, sandq.Preset)
        self.assertEqual(p.name, "agent-safe")
        self.assertIn(p.default, ("none", "view", "read", "write"))
        self.assertTrue(all(isinstance(r, sandq.Rule) for r in p.rules))
        # Secrets are hidden: a none rule on .env files, whatever its form.
        self.assertTrue(any(r.level == "none" and ".env" in r.pattern for r in p.rules),
                        p.rules)
        self.assertEqual(p.wire(), ("agent-safe", []))

    def test_an_unknown_name_is_an_error_naming_it(self):
        for call in (client.get_preset, client.extend_preset):
            with self.subTest(call=call.__name__), \
                    self.assertRaises(sandq.InvalidJob) as cm:
                call("agent-unsafe")
            self.assertIn("'agent-unsafe'", str(cm.exception))
            self.assertIn("agent-safe", str(cm.exception))    # the known ones

    def test_extend_sends_the_base_and_the_additions(self):
        p = client.extend_preset("agent-safe",
                                 [{"pattern": "/secrets/ok.txt", "permission": "read"}])
        self.assertEqual(p.base, "agent-safe")
        self.assertEqual(p.additions, (sandq.Rule("/secrets/ok.txt", "read"),))
        self.assertEqual(p.rules[-1], sandq.Rule("/secrets/ok.txt", "read"))
        for opt in ("perm_preset", "preset"):
            f = sandq.Job.sh("true", **{opt: p}, perms={"/x": "none"}).fields
            self.assertEqual(f["perm_preset"], "agent-safe")
            # The additions, then the caller's own rules (which win a tie).
            self.assertEqual(f["perms"], [{"pattern": "/secrets/ok.txt", "level": "read"},
                                          {"pattern": "/x", "level": "none"}])
            self.assertNotIn("preset", f)
        with self.assertRaises(sandq.InvalidJob):
            client.extend_preset("agent-safe", [("/x", "everything")])
        with self.assertRaises(sandq.InvalidJob) as cm:
            sandq.Job.sh("true", preset="agent-safe")
        self.assertIn("perm_preset", str(cm.exception))

    def test_an_extended_preset_is_enforced(self):
        hide = client.extend_preset("full-access", {"/hidden/**": "none"})
        with client.sandbox(files={"hidden/k": "secret", "open/o": "open"}) as sb:
            self.assertEqual(sb.bash("cat hidden/k", perm_preset="full-access").stdout,
                             "secret")
            r = sb.bash("cat open/o; cat hidden/k", check=False, preset=hide)
            self.assertNotEqual(r.exit_code, 0)
            self.assertEqual(r.stdout, "open")
            with client.sandbox(sb.id, perm_preset=hide) as view:
                self.assertFalse(view.exists("hidden/k"))
                self.assertEqual(view.read_file("open/o"), "open")
                with self.assertRaises(sandq.NotFound) as cm:
                    view.read_file("hidden/k")
                self.assertEqual(cm.exception.path, "hidden/k")


if __name__ == "__main__":
    unittest.main()
