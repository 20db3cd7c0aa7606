// stream.test.mjs - the client's live output and cancel against a real
// sandq-gateway, sandqd and redis-server (harness.mjs): a stream: true sh
// job that sleeps between writes yields its stdout and stderr pieces in
// order and ends ok; resuming from an event's id yields only what came
// after it; runStreaming hands the events over and returns the Result;
// cancel of a running `sleep 30` ends its stream cancelled (and a second
// cancel is finished, 409); stream of a job submitted without stream is
// SandqError no_stream (404), of an id nobody has not_found; a connection
// cut after the first event (by a proxy in the test) is resumed with
// Last-Event-ID and yields every piece once; the SSE parser takes CRLF,
// CR, comments and multi-line data split anywhere.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, SandqError } from "../dist/index.js";
import { SseParser } from "../dist/stream.js";
import { createServer, connect } from "node:net";
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

/** Every event of a stream, in order. */
async function collect(s) {
  const out = [];
  for await (const ev of s) out.push(ev);
  return out;
}

const SCRIPT = "echo one; sleep 0.3; echo two >&2; sleep 0.3; printf 'thr\\377ee'";

test("a stream: true sh job yields stdout and stderr in order, then ends ok", async () => {
  const id = await c.submit({ op: "sh", script: SCRIPT }, { stream: true });
  const s = c.stream(id);
  const evs = await collect(s);
  assert.deepEqual(evs.map((e) => [e.type, e.fd, e.text]),
    [["stdout", 1, "one\n"], ["stderr", 2, "two\n"], ["stdout", 1, "thr\ufffdee"]]);
  // the non-UTF-8 piece came as data_b64 and is exact
  assert.deepEqual([...evs[2].data], [...Buffer.from("thr\xffee", "latin1")]);
  assert.equal(s.status, "ok");
  assert.ok(evs.every((e) => /^\d+-\d+$/.test(e.id)));
  assert.equal(s.lastEventId !== undefined, true);

  // from an event's id: only what came after it
  const rest = await collect(c.stream(id, { from: evs[0].id }));
  assert.deepEqual(rest.map((e) => e.text), ["two\n", "thr\ufffdee"]);

  const r = await c.wait(id);
  assert.equal(r.stdout.startsWith("one\n"), true);
  assert.equal(r.stderr, "two\n");
});

test("runStreaming hands over each event and returns the Result", async () => {
  const seen = [];
  const r = await c.runStreaming({ op: "sh", script: "echo a; sleep 0.2; echo b; exit 3" },
    { onEvent: (e) => seen.push(e.text) });
  assert.deepEqual(seen, ["a\n", "b\n"]);
  assert.equal(r.status, "exit");
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout, "a\nb\n");
});

test("cancel of a running sleep 30 ends its stream cancelled", async () => {
  const id = await c.submit({ op: "sh", script: "echo started; sleep 30" }, { stream: true });
  const s = c.stream(id);
  const t0 = Date.now();
  const it = s[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(first.value.text, "started\n");
  assert.equal(await c.cancel(id), "requested");
  const last = await it.next();
  assert.equal(last.done, true);
  assert.equal(s.status, "cancelled");
  assert.ok(Date.now() - t0 < 20000, "cancel took too long");
  const r = await c.wait(id);
  assert.equal(r.status, "cancelled");
  await rejectsWith(c.cancel(id), "finished", 409);
});

test("stream of a job without stream is no_stream; of an unknown id, not_found", async () => {
  const id = await c.submit({ op: "sh", script: "echo x" });
  await c.wait(id);
  await rejectsWith(collect(c.stream(id)), "no_stream", 404);
  await rejectsWith(collect(c.stream("nobody-has-this-id")), "not_found", 404);
  await rejectsWith(c.cancel("nobody-has-this-id"), "not_found", 404);
  const bad = new Client({ url: H.url, token: "sqt_" + "A".repeat(43) });
  await rejectsWith(collect(bad.stream(id)), "unauthorized", 401);
});

test("a dropped connection is resumed with Last-Event-ID, every piece once", async () => {
  // a TCP proxy to the gateway that ends its first connection right after
  // the first stdout event, and notes each request's Last-Event-ID
  const gw = new URL(H.url);
  const seen = [];
  let conns = 0;
  const proxy = createServer((down) => {
    const first = conns++ === 0;
    const up = connect(Number(gw.port), gw.hostname);
    let req = "";
    down.on("data", (b) => {
      req += b.toString("latin1");
      const m = /\r\nlast-event-id: *([^\r]*)\r\n/i.exec(req);
      if (req.includes("\r\n\r\n")) seen.push(m ? m[1] : null);
      up.write(b);
    });
    let got = "";
    up.on("data", (b) => {
      got += b.toString("latin1");
      if (first && /event: stdout\ndata: [^\n]*\n\n/.test(got)) {
        down.end(b);
        up.destroy();
      } else {
        down.write(b);
      }
    });
    up.on("end", () => down.end());
    up.on("error", () => down.destroy());
    down.on("error", () => up.destroy());
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const pc = new Client({ url: `http://127.0.0.1:${proxy.address().port}`, token: H.token });
    const id = await c.submit({ op: "sh", script: "echo one; sleep 0.4; echo two; sleep 0.4; echo three" },
      { stream: true });
    const s = pc.stream(id);
    const evs = await collect(s);
    assert.deepEqual(evs.map((e) => e.text), ["one\n", "two\n", "three\n"]);
    assert.equal(s.status, "ok");
    assert.ok(conns >= 2, "the connection was never cut");
    assert.deepEqual(seen.slice(0, 2), [null, evs[0].id]);
  } finally {
    proxy.close();
  }
});

test("the SSE parser takes CRLF, CR, comments and data split anywhere", () => {
  const text = ": hello\r\nid: 1-0\r\nevent: stdout\r\ndata: {\"a\":\ndata: 1}\r\n\r\n" +
    "id: 2-0\revent: end\rdata: {\"status\":\"ok\"}\r\r";
  for (let cut = 0; cut <= text.length; cut++) {
    const p = new SseParser();
    const evs = [...p.feed(text.slice(0, cut)), ...p.feed(text.slice(cut))];
    assert.deepEqual(evs, [
      { id: "1-0", event: "stdout", data: "{\"a\":\n1}" },
      { id: "2-0", event: "end", data: "{\"status\":\"ok\"}" },
    ], `cut at ${cut}`);
  }
});
