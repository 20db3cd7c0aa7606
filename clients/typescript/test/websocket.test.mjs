// websocket.test.mjs - GET /v1/jobs/ID/events as a WebSocket, against a
// real sandq-gateway, sandqd and redis-server (harness.mjs); needs
// globalThis.WebSocket (node --experimental-websocket on Node 20, which
// the Makefile's typescript_test passes). The client's transport
// "websocket" yields a sh job's output in order with entry ids, resumes
// with from, and ends with the job's status; the raw messages are the SSE
// data plus "event" and "id", the end message is followed by close 1000,
// and the subprotocol sandq.v1 is answered (never the bearer one); the
// Authorization header works too (a raw handshake over TCP); a wrong
// token is refused (401 before the upgrade; websocket_refused in the
// client); a message from the client closes with 1003; open WebSockets
// count in --max-streams beside SSE streams (a second gateway with
// --max-streams 1); a raw client that stops reading while a job writes
// 40 MiB leaves the gateway's memory within 16 MiB of where it was, and
// gets everything and the close once it reads again (RSS is not checked
// under ASan; the gateways this file starts are checked for sanitizer
// reports); without globalThis.WebSocket the client throws unsupported.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { connect } from "node:net";
import { closeSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Client, SandqError } from "../dist/index.js";
import { BUILD, Harness, freePort } from "./harness.mjs";

const H = new Harness();
let c;
const mine = [];    // gateways the tests started: ChildProcess

before(async () => {
  await H.start();
  c = new Client({ url: H.url, token: H.token, timeoutMs: 60000 });
}, { timeout: 120000 });

after(async () => {
  for (const p of mine) {
    if (p.exitCode === null) {
      const gone = new Promise((r) => p.once("exit", r));
      p.kill("SIGTERM");
      await Promise.race([gone, new Promise((r) => setTimeout(r, 5000))]);
      if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    }
    const text = readFileSync(p.log, "utf8");
    if (/Sanitizer|runtime error:/.test(text)) {
      console.error(text);
      assert.fail(`a sanitizer report in ${p.log}`);
    }
  }
  await H.stop();
});

/** Every event of a stream, in order. */
async function collect(s) {
  const out = [];
  for await (const ev of s) out.push(ev);
  return out;
}

/** Asserts that p rejects with a SandqError of code. */
async function rejectsWith(p, code) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof SandqError, `not a SandqError: ${e}`);
    assert.equal(e.code, code, e.message);
    return true;
  });
}

/** A raw WebSocket on base's events route: its messages (parsed) and its close. */
function rawWs(base, id, protocols, query = "") {
  const url = `${base.replace(/^http/, "ws")}/v1/jobs/${id}/events${query}`;
  const ws = new WebSocket(url, protocols);
  const msgs = [];
  let opened = false;
  ws.onmessage = (e) => msgs.push(JSON.parse(e.data));
  const open = new Promise((ok) => { ws.onopen = () => { opened = true; ok(); }; });
  const closed = new Promise((ok) => {
    ws.onclose = (e) => ok({ code: e.code, reason: e.reason, opened });
    // a refused handshake: Node 20's WebSocket reports only an error
    ws.onerror = () => { if (!opened) ok({ code: 1006, reason: "", opened }); };
  });
  return { ws, msgs, open, closed };
}

/** A raw HTTP/1.1 handshake over TCP: the status line, headers and body. */
function handshake(base, path, headers) {
  const u = new URL(base);
  return new Promise((ok, fail) => {
    const s = connect(Number(u.port), u.hostname);
    let got = Buffer.alloc(0);
    s.on("error", fail);
    s.on("data", (b) => {
      got = Buffer.concat([got, b]);
      const end = got.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = got.subarray(0, end).toString("latin1");
      const len = /\r\ncontent-length: *(\d+)/i.exec(head);
      const body = got.subarray(end + 4);
      if (!/^HTTP\/1\.1 101/.test(head) && len && body.length < Number(len[1])) return;
      s.destroy();
      ok({ status: Number(head.split(" ")[1]), head, body });
    });
    s.write(`GET ${path} HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
      Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") + "\r\n");
  });
}

const SCRIPT = "echo one; sleep 0.3; echo two >&2; sleep 0.3; printf 'thr\\377ee'";

test("transport websocket: output in order with ids, resume with from, end", async () => {
  const id = await c.submit({ op: "sh", script: SCRIPT }, { stream: true });
  const s = c.stream(id, { transport: "websocket" });
  const evs = await collect(s);
  assert.deepEqual(evs.map((e) => [e.type, e.fd, e.text]),
    [["stdout", 1, "one\n"], ["stderr", 2, "two\n"], ["stdout", 1, "thr\ufffdee"]]);
  assert.deepEqual([...evs[2].data], [...Buffer.from("thr\xffee", "latin1")]);
  assert.ok(evs.every((e) => /^\d+-\d+$/.test(e.id)));
  assert.equal(s.status, "ok");

  const rest = await collect(c.stream(id, { transport: "websocket", from: evs[0].id }));
  assert.deepEqual(rest.map((e) => e.text), ["two\n", "thr\ufffdee"]);
});

test("the messages: SSE data plus event and id; end, then close 1000; sandq.v1 answered", async () => {
  const id = await c.submit({ op: "sh", script: "echo hi; sleep 0.2; echo there >&2" }, { stream: true });
  const w = rawWs(H.url, id, ["sandq.v1", `bearer.${H.token}`]);
  await w.open;
  assert.equal(w.ws.protocol, "sandq.v1");
  const cl = await w.closed;
  assert.equal(cl.code, 1000);
  assert.equal(w.msgs.length, 3);
  assert.deepEqual(Object.keys(w.msgs[0]).sort(), ["data", "event", "id"]);
  assert.equal(w.msgs[0].event, "stdout");
  assert.equal(w.msgs[0].data, "hi\n");
  assert.match(w.msgs[0].id, /^\d+-\d+$/);
  assert.equal(w.msgs[1].event, "stderr");
  assert.equal(w.msgs[1].data, "there\n");
  assert.equal(w.msgs[2].event, "end");
  assert.equal(w.msgs[2].status, "ok");
  assert.match(w.msgs[2].id, /^\d+-\d+$/);

  // ?from= on the raw route: only what came after
  const w2 = rawWs(H.url, id, ["sandq.v1", `bearer.${H.token}`], `?from=${w.msgs[0].id}`);
  assert.equal((await w2.closed).code, 1000);
  assert.deepEqual(w2.msgs.map((m) => m.event), ["stderr", "end"]);
});

test("Authorization works on a raw handshake; a wrong token is 401 before the upgrade", async () => {
  const id = await c.submit({ op: "sh", script: "echo x" }, { stream: true });
  await c.wait(id);
  const ok = await handshake(H.url, `/v1/jobs/${id}/events`, { Authorization: `Bearer ${H.token}` });
  assert.equal(ok.status, 101, ok.head);
  assert.match(ok.head, /\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/i);
  assert.doesNotMatch(ok.head, /sec-websocket-protocol/i);   // none offered, none answered

  const bad = "sqt_" + "A".repeat(43);
  const no = await handshake(H.url, `/v1/jobs/${id}/events`, { "Sec-WebSocket-Protocol": `sandq.v1, bearer.${bad}` });
  assert.equal(no.status, 401);
  assert.equal(JSON.parse(no.body.toString()).error.code, "unauthorized");
  const none = await handshake(H.url, `/v1/jobs/${id}/events`, {});
  assert.equal(none.status, 401);
  const nostream = await handshake(H.url, "/v1/jobs/nobody-has-this-id/events", { Authorization: `Bearer ${H.token}` });
  assert.equal(nostream.status, 404);

  const badc = new Client({ url: H.url, token: bad });
  await rejectsWith(collect(badc.stream(id, { transport: "websocket" })), "websocket_refused");
});

test("a message from the client closes the stream with 1003", async () => {
  const id = await c.submit({ op: "sh", script: "echo a; sleep 5" }, { stream: true });
  const w = rawWs(H.url, id, ["sandq.v1", `bearer.${H.token}`]);
  await w.open;
  w.ws.send("hello");
  const cl = await w.closed;
  assert.equal(cl.code, 1003);
  await c.cancel(id);
});

/** Starts a gateway of our own on H's Redis with args; its URL once /healthz answers. */
async function startGateway(args) {
  const port = await freePort();
  const log = join(H.dir, `gateway-ws-${mine.length}.log`);
  const fd = openSync(log, "a");
  const p = spawn(join(BUILD, "sandq-gateway"), ["--listen", `127.0.0.1:${port}`, "--redis", H.redisUrl,
    ...args], { stdio: ["ignore", fd, fd] });
  closeSync(fd);
  p.log = log;
  mine.push(p);
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/healthz`)).status === 200) break;
    } catch { /* not yet */ }
    if (i > 200) throw new Error("a gateway of the test did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url, pid: p.pid };
}

test("open WebSockets count in --max-streams like SSE streams", async () => {
  const { url } = await startGateway(["--max-streams", "1"]);
  const id = await c.submit({ op: "sh", script: "echo started; sleep 30" }, { stream: true });
  const w = rawWs(url, id, ["sandq.v1", `bearer.${H.token}`]);
  await w.open;
  const auth = { authorization: `Bearer ${H.token}` };
  const r = await fetch(`${url}/v1/jobs/${id}/events`, { headers: auth });
  assert.equal(r.status, 503);
  assert.equal((await r.json()).error.code, "too_many_streams");
  const w2 = rawWs(url, id, ["sandq.v1", `bearer.${H.token}`]);
  assert.equal((await w2.closed).opened, false);
  w.ws.close(1000);
  await w.closed;
  // the slot is free again once the gateway saw the close
  let status = 0;
  for (let i = 0; i < 50 && status !== 200; i++) {
    const again = await fetch(`${url}/v1/jobs/${id}/events`, { headers: auth });
    status = again.status;
    await again.body?.cancel();
    if (status !== 200) await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(status, 200);
  await c.cancel(id);
});

/** The gateway's resident memory in bytes (/proc). */
function rss(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m[1]) * 1024;
}

test("a client that stops reading does not grow the gateway's memory, and gets all once it reads", async () => {
  const MB = 1 << 20;
  const id = await c.submit({ op: "sh", script: "head -c 41943040 /dev/zero | tr '\\0' a",
    limits: { outputBytes: 48 * MB } }, { stream: true });
  // A gateway of its own, so that only the paused client is measured (the
  // 40 MiB result is fetched through H's).
  const g = await startGateway([]);
  const u = new URL(g.url);
  const s = connect(Number(u.port), u.hostname);
  let got = 0;
  let tail = Buffer.alloc(0);
  s.on("data", (b) => {
    got += b.length;
    tail = Buffer.concat([tail, b]).subarray(-256);
  });
  s.write(`GET /v1/jobs/${id}/events HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\n` +
    "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
    `Authorization: Bearer ${H.token}\r\n\r\n`);
  const pid = g.pid;
  const before = rss(pid);
  await new Promise((r) => setTimeout(r, 300));
  s.pause();   // reads nothing more: the kernel's buffers fill, then the gateway's
  const r = await c.wait(id, { timeoutMs: 120000 });
  assert.equal(r.status, "ok");
  await new Promise((res) => setTimeout(res, 2000));   // the reader's XREADs go on
  const grown = rss(pid) - before;
  // ASan keeps freed memory in quarantine: RSS says nothing under it
  if (!readFileSync(join(BUILD, "sandq-gateway")).includes("__asan_init"))
    assert.ok(grown < 16 * MB, `the gateway grew by ${grown} bytes for 40 MiB nobody read`);
  assert.ok(got < 40 * MB, "the client read everything before it paused: the test proves nothing");
  s.resume();   // drains: the tick puts the stream back, and it ends
  const t0 = Date.now();
  while (!tail.includes("end of the job's output") && Date.now() - t0 < 120000)
    await new Promise((res) => setTimeout(res, 100));
  s.destroy();
  assert.ok(tail.includes("end of the job's output"), `no close after ${got} bytes`);
  assert.ok(got > 40 * MB, `only ${got} bytes`);
});

test("without globalThis.WebSocket the transport is SandqError unsupported", () => {
  const saved = globalThis.WebSocket;
  try {
    delete globalThis.WebSocket;
    assert.throws(() => c.stream("x", { transport: "websocket" }),
      (e) => e instanceof SandqError && e.code === "unsupported");
  } finally {
    globalThis.WebSocket = saved;
  }
});
