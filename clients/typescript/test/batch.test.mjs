// batch.test.mjs - client.batch() against a real sandq-gateway, sandqd and
// redis-server (harness.mjs): cases given as objects are submitted as JSON
// lines; the malformed one is reported by line; wait() resolves with the
// counts once every case is answered (pass, fail, no expect, trim and
// regex judged as `sandq batch` judges them); results() yields every
// answered case in line order across pages, each with its Result and
// verdict; submitting the same cases again under the same id adds none;
// batchOf(id) follows a batch by id; cancel() of a batch of sleeps
// cancels the cases no host has read; a batch of another tenant, or none,
// is SandqError not_found (404); a bad id is bad_query (400).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, Batch, SandqError, Result } from "../dist/index.js";
import { Harness } from "./harness.mjs";

const H = new Harness();
let c;

before(async () => {
  await H.start();
  c = new Client({ url: H.url, token: H.token, timeoutMs: 60000 });
}, { timeout: 120000 });

after(async () => {
  await H.stop();
});

/** Asserts that p rejects with a SandqError of code and status. */
async function rejectsWith(p, code, status) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof SandqError, `not a SandqError: ${e}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.status, status, e.message);
    return true;
  });
}

const CASES = [
  { op: "sh", script: "echo hi", expect: "hi\n" },
  { op: "sh", script: "echo no", expect: "yes" },
  { op: "sh", script: "echo free" },
  { op: "sh", script: "printf 'a  \\n\\n'", expect: "a", expect_mode: "trim" },
  { op: "sh", script: "echo n42", expect: "n[0-9]+", expect_mode: "regex" },
  { op: "sh", script: "x", expect: "(", expect_mode: "regex" },
];

test("a batch runs, is judged as sandq batch judges, and resumes", async () => {
  const b = await c.batch(CASES, { id: "ts1" });
  assert.ok(b instanceof Batch);
  assert.equal(b.id, "ts1");
  assert.equal(b.total, 6);
  assert.equal(b.submitted, 5);
  assert.equal(b.malformed.length, 1);
  assert.equal(b.malformed[0].line, 6);
  assert.match(b.malformed[0].error, /regex/);

  const p = await b.wait({ timeoutMs: 60000, intervalMs: 100 });
  assert.equal(p.state, "finished");
  assert.equal(p.done, 6);
  assert.equal(p.passed, 3);
  assert.equal(p.failed, 1);
  assert.equal(p.no_expect, 1);
  assert.equal(p.malformed, 1);
  assert.equal(p.by_status.ok, 5);

  const seen = [];
  for await (const r of b.results({ pageSize: 2 })) seen.push(r);
  assert.deepEqual(seen.map((r) => r.case), [1, 2, 3, 4, 5]);
  assert.deepEqual(seen.map((r) => r.pass), [true, false, undefined, true, true]);
  assert.ok(seen[0].result instanceof Result);
  assert.equal(seen[0].result.stdout, "hi\n");

  const again = await c.batch(CASES, { id: "ts1" });
  assert.equal(again.submitted, 0);
  const follow = c.batchOf("ts1");
  assert.equal((await follow.status()).passed, 3);
});

test("without an id, the same cases are the same batch", async () => {
  const lines = '{"op":"sh","script":"echo same","expect":"same\\n"}\n';
  const a = await c.batch(lines);
  const b = await c.batch(lines);
  assert.equal(a.id, b.id);
  assert.equal(b.submitted, 0, "the case was submitted once");
  assert.equal((await a.wait({ intervalMs: 100 })).passed, 1);
});

test("cancel leaves only the cases a host holds", async () => {
  const cases = Array.from({ length: 10 }, () => ({ op: "sh", script: "sleep 2", expect: "" }));
  const b = await c.batch(cases, { id: "ts-cancel" });
  assert.equal(b.submitted, 10);
  const r = await b.cancel();
  assert.ok(r.cancelled >= 4, JSON.stringify(r));
  assert.equal(r.cancelled + r.running + r.finished, 10);
  const p = await b.wait({ intervalMs: 200 });
  assert.equal(p.by_status.cancelled, r.cancelled);
  assert.equal(p.state, "finished");
});

test("errors: unknown batch, bad id, and another tenant's batch", async () => {
  await rejectsWith(c.batchOf("nobody-has-it").status(), "not_found", 404);
  await rejectsWith(c.batch(CASES, { id: "no/pe" }), "bad_query", 400);
  await rejectsWith(c.batch([]), "bad_request", 400);
  H.sandq("tenant", "add", "other");
  const tok = H.sandq("tenant", "token", "add", "other").trim().split("\n").pop();
  const oc = new Client({ url: H.url, token: tok });
  await rejectsWith(oc.batchOf("ts1").status(), "not_found", 404);
});
