// client.test.mjs - the TypeScript client (dist/, compiled from src/)
// against a real sandq-gateway, sandqd and redis-server (harness.mjs):
// sh, run and python return the job's real output; a failing command is
// status exit with its code; options reach the job (stdin, env, limits);
// bytes that are not UTF-8 come back exact; an id with no result waits
// until the deadline and fails as wait_timeout; a bad or missing token is
// unauthorized (401); unknown options are refused by the client before any
// request, and unknown fields of a raw body by the gateway.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, Result, SandqError } from "../dist/index.js";
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

/** Asserts that p rejects with a SandqError of code (and status when given). */
async function rejectsWith(p, code, status) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof SandqError, `not a SandqError: ${e}`);
    assert.equal(e.code, code, e.message);
    if (status !== undefined) assert.equal(e.status, status, e.message);
    assert.ok(e.message.length > 0);
    return true;
  });
}

test("health and ready answer true", async () => {
  assert.equal(await c.health(), true);
  assert.equal(await c.ready(), true);
});

test("sh, run and python return the job's real output", async () => {
  const s = await c.sh("echo hi; echo err >&2");
  assert.ok(s instanceof Result);
  assert.equal(s.status, "ok");
  assert.equal(s.ok, true);
  assert.equal(s.exitCode, 0);
  assert.equal(s.stdout, "hi\n");
  assert.equal(s.stderr, "err\n");
  assert.match(s.id, /^gw-[0-9a-f]{24}$/);

  const r = await c.run(["printf", "%s-%s", "a b", "c"]);
  assert.equal(r.stdout, "a b-c");
  assert.equal(r.ok, true);

  const p = await c.python("import sys; print(sum(range(10))); print('py', file=sys.stderr)");
  assert.equal(p.stdout, "45\n");
  assert.equal(p.stderr, "py\n");
});

test("a failing command ends as status exit with its code", async () => {
  const r = await c.sh("echo out; exit 3");
  assert.equal(r.status, "exit");
  assert.equal(r.exitCode, 3);
  assert.equal(r.ok, false);
  assert.equal(r.exitStatus, 3);
  assert.equal(r.stdout, "out\n");
});

test("options reach the job: id, stdin, env, cwd, limits", async () => {
  const id = `ts-${process.pid}-${Date.now()}`;
  const r = await c.sh('cat; printf "%s" "$GREETING"; pwd', {
    id, stdin: "in\n", env: { GREETING: "hello" }, cwd: "/tmp",
  });
  assert.equal(r.id, id);
  assert.equal(r.stdout, "in\nhello/tmp\n");

  const bin = await c.run(["cat"], { stdin: new Uint8Array([0, 1, 255, 10]) });
  assert.deepEqual([...bin.stdoutBytes], [0, 1, 255, 10]);

  const t = await c.sh("sleep 10", { limits: { wallMs: 300 } });
  assert.equal(t.status, "timeout");
  assert.equal(t.exitStatus, 124);
});

test("output that is not UTF-8 comes back as its exact bytes", async () => {
  const r = await c.sh("printf 'a\\377b'");
  assert.deepEqual([...r.stdoutBytes], [0x61, 0xff, 0x62]);
  assert.equal(r.stdout, "a\ufffdb");
  assert.equal(typeof r.raw.stdout_b64, "string");
});

test("submit then get and wait", async () => {
  const id = await c.submit({ op: "sh", script: "echo later" });
  const r = await c.wait(id, { timeoutMs: 30000 });
  assert.equal(r.stdout, "later\n");
  const g = await c.get(id);
  assert.equal(g.stdout, "later\n");
  assert.equal(await c.get("ts-never-submitted"), null);
});

test("run methods submit and wait in one request, and a job that outlasts it is waited for", async () => {
  const c = new Client({ url: H.url, token: H.token });
  const r = await c.sh("echo one-request", { timeoutMs: 30000 });
  assert.equal(r.stdout, "one-request\n");
  // POST ?wait=1 answers 202 (sleep 3 is not done); wait() then runs out.
  await rejectsWith(c.sh("sleep 3", { timeoutMs: 1300 }), "wait_timeout", 0);
});

test("an id with no result waits until the deadline, then wait_timeout", async () => {
  const t0 = Date.now();
  await rejectsWith(c.wait("ts-never-submitted", { timeoutMs: 1500 }), "wait_timeout", 0);
  const took = Date.now() - t0;
  assert.ok(took >= 1400 && took < 5000, `waited ${took} ms`);
});

test("a bad or missing token is unauthorized (401)", async () => {
  const bad = new Client({ url: H.url, token: "sqt_" + "A".repeat(43) });
  await rejectsWith(bad.sh("echo no"), "unauthorized", 401);
  await rejectsWith(bad.get("x"), "unauthorized", 401);
  const none = new Client({ url: H.url });
  await rejectsWith(none.submit({ op: "sh", script: "echo no" }), "unauthorized", 401);
  assert.equal(await none.health(), true, "/healthz needs no token");
});

test("unknown options are refused by the client, unknown fields by the gateway", async () => {
  await rejectsWith(c.sh("echo no", { bogus: 1 }), "unknown_field", 0);
  await rejectsWith(c.sh("echo no", { limits: { wall_ms: 5 } }), "unknown_field", 0);
  await rejectsWith(c.run(["true"], { script: "x" }), "unknown_field", 0);
  await rejectsWith(c.submitBody({ op: "sh", script: "echo no", bogus: 1 }), "unknown_field", 400);
  await rejectsWith(c.submitBody({ op: "sh", script: "echo no", tenant: "other" }), "unknown_field", 400);
  await rejectsWith(c.submitBody({ op: "exec", argv: "true" }), "invalid_job", 400);
  await rejectsWith(c.sh("echo no", { env: { A: 1 } }), "invalid_job", 0);
});

test("allow reaches the job: without it net allow is invalid, with it the tenant's modes judge", async () => {
  await rejectsWith(c.sh("true", { net: "allow", allow: "pypi.example" }), "invalid_job", 0);
  await rejectsWith(c.sh("true", { net: "allow" }), "invalid_job", 400);
  const r = await c.sh("true", { net: "allow", allow: ["pypi.example:443"] });
  assert.equal(r.status, "rejected");
  assert.match(r.errorMessage, /field 'net': mode 'allow' is not allowed/);
  assert.deepEqual(r.egress, []);
});

test("a gateway nobody listens on is a connection error", async () => {
  const gone = new Client({ url: "http://127.0.0.1:1", token: H.token, requestTimeoutMs: 5000 });
  await rejectsWith(gone.health(), "connection", 0);
});
