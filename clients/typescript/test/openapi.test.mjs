// openapi.test.mjs - docs/openapi.yaml against a running gateway.
//
// Against the harness's redis-server, sandqd and sandq-gateway (and two
// more gateways of our own: one with --max-streams 1 on the same Redis, one
// with no Redis behind it), it makes
// requests covering every documented operation and checks each answer:
// its status is one the operation documents, its media type is the one
// documented for that status, a JSON body has the schema's required keys
// and types, and an error's code is in the response's x-error-codes (so
// also in the Error schema's enum). A request with another method on a
// documented path must be the path's documented 405. At the end: every
// operation was called, and every code of the enum was produced by some
// request but those UNPRODUCIBLE lists with the reason (today: internal).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { readFileSync, openSync, closeSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { Harness, REPO, BUILD, freePort } from "./harness.mjs";

const SPEC = parse(readFileSync(join(REPO, "docs", "openapi.yaml"), "utf8"));
// code -> why this test cannot produce it
const UNPRODUCIBLE = {
  internal: "only a bug or no memory answers it: the one input that reached it, a --prefix " +
    "too long for a key, is refused at start-up (1 to 64 characters)",
};

const H = new Harness();
const extra = [];          // gateways this file started: ChildProcess
let G2 = null;             // --max-streams 1, same Redis
let G3 = null;             // no Redis behind it
let admin = null;          // an admin token

const called = new Set();  // "METHOD /template" of every documented operation called
const codes = new Set();   // every error code the gateway answered

/** Starts a gateway of our own with args; resolves to its URL once /healthz answers. */
async function startGateway(name, args) {
  for (let i = 0; i < 10; i++) {
    const port = await freePort();
    const fd = openSync(join(H.dir, `${name}.log`), "a");
    const p = spawn(join(BUILD, "sandq-gateway"), ["--listen", `127.0.0.1:${port}`, ...args],
      { stdio: ["ignore", fd, fd] });
    closeSync(fd);
    let exited = false;
    p.once("exit", () => { exited = true; });
    extra.push(p);
    const url = `http://127.0.0.1:${port}`;
    for (let t = 0; t < 200 && !exited; t++) {
      try {
        const r = await fetch(`${url}/healthz`);
        await r.text();
        if (r.status === 200) return url;
      } catch {
        /* not yet */
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    p.kill("SIGKILL");
  }
  throw new Error(`could not start gateway ${name}`);
}

before(async () => {
  await H.start();
  admin = H.sandq("tenant", "token", "add", "--admin", "--name", "opsadmin").trim().split("\n").pop();
  G2 = await startGateway("gateway2", ["--redis", H.redisUrl, "--max-streams", "1"]);
  const dead = await freePort();   // nothing listens there
  G3 = await startGateway("gateway3", ["--redis", `redis://127.0.0.1:${dead}`]);
}, { timeout: 120000 });

after(async () => {
  for (const p of extra) {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill("SIGTERM");
      await new Promise((r) => { p.once("exit", r); setTimeout(r, 5000); });
    }
  }
  await H.stop();
});

/** Follows a local $ref ("#/components/..."). */
function deref(o) {
  while (o && o.$ref) {
    let v = SPEC;
    for (const part of o.$ref.replace(/^#\//, "").split("/")) v = v[part];
    assert.ok(v !== undefined, `unresolved ${o.$ref}`);
    o = v;
  }
  return o;
}

/** Checks value against a schema (types, required, enum, nested); path names the place. */
function check(schema, value, path) {
  schema = deref(schema);
  if (value === null) {
    assert.ok(schema.nullable, `${path}: null, not nullable`);
    return;
  }
  if (schema.enum) assert.ok(schema.enum.includes(value), `${path}: ${JSON.stringify(value)} not in ${schema.enum}`);
  switch (schema.type) {
    case "object":
      assert.ok(typeof value === "object" && !Array.isArray(value), `${path}: not an object`);
      for (const k of schema.required ?? []) assert.ok(k in value, `${path}: no '${k}'`);
      for (const [k, v] of Object.entries(value)) {
        const sub = schema.properties?.[k] ?? (typeof schema.additionalProperties === "object"
          ? schema.additionalProperties : undefined);
        if (sub) check(sub, v, `${path}.${k}`);
        else assert.ok(schema.additionalProperties !== false && !schema.properties,
          `${path}: '${k}' is not documented`);
      }
      break;
    case "array":
      assert.ok(Array.isArray(value), `${path}: not an array`);
      value.forEach((v, i) => check(schema.items, v, `${path}[${i}]`));
      break;
    case "integer":
      assert.ok(Number.isInteger(value), `${path}: not an integer`);
      break;
    case "string":
      assert.equal(typeof value, "string", `${path}: not a string`);
      break;
    case "boolean":
      assert.equal(typeof value, "boolean", `${path}: not a boolean`);
      break;
    default:
      break;
  }
}

/**
 * One request: method on the gateway at base, path (its documented
 * template: tmpl). Checks the answer against the document; returns
 * { status, body, text, res }. For text/event-stream reads the whole body.
 */
async function call(base, method, tmpl, path, { token, body, headers = {}, keepOpen = false } = {}) {
  const item = SPEC.paths[tmpl];
  assert.ok(item, `${tmpl} is not in docs/openapi.yaml`);
  const h = { ...headers };
  if (token) h.authorization = `Bearer ${token}`;
  const init = { method, headers: h };
  if (body !== undefined) init.body = body;
  const res = await fetch(base + path, init);
  const op = item[method.toLowerCase()];
  let responses;
  if (op) {
    called.add(`${method} ${tmpl}`);
    responses = op.responses;
  } else {
    // another method on a documented path: the path's documented 405
    const any = Object.values(item).find((o) => o && o.responses && o.responses["405"]);
    assert.ok(any, `${method} ${tmpl}: no operation documents a 405`);
    responses = { "405": any.responses["405"] };
  }
  const doc = deref(responses[String(res.status)]);
  assert.ok(doc, `${method} ${path}: HTTP ${res.status} is not documented for ${method} ${tmpl}`);
  const type = (res.headers.get("content-type") ?? "").split(";")[0].trim();
  if (res.status === 204) {
    assert.ok(!doc.content, `${method} ${path}: 204 documented with content`);
    assert.equal(await res.text(), "", `${method} ${path}: 204 with a body`);
    return { status: 204 };
  }
  const media = doc.content?.[type];
  assert.ok(media, `${method} ${path}: HTTP ${res.status} as '${type}', documented: ${Object.keys(doc.content ?? {})}`);
  if (type === "text/event-stream") {
    if (keepOpen) return { status: res.status, res };
    const text = await res.text();
    return { status: res.status, text };
  }
  if (type === "application/octet-stream" || type === "application/x-tar")
    return { status: res.status, bytes: new Uint8Array(await res.arrayBuffer()) };
  const text = await res.text();
  if (res.status === 204) {
    assert.equal(text, "", `${method} ${path}: 204 with a body`);
    return { status: res.status };
  }
  const json = JSON.parse(text);
  check(media.schema, json, `${method} ${path} ${res.status}`);
  if (res.status >= 400) {
    const code = json.error.code;
    assert.ok((doc["x-error-codes"] ?? []).includes(code),
      `${method} ${path}: HTTP ${res.status} code '${code}' is not in its x-error-codes ${doc["x-error-codes"]}`);
    codes.add(code);
  }
  return { status: res.status, body: json };
}

const json = (o) => JSON.stringify(o);

test("every documented operation answers as documented", async () => {
  const U = H.url;
  const T = H.token;
  const jobs = "/v1/jobs";

  // /healthz, /readyz
  assert.equal((await call(U, "GET", "/healthz", "/healthz")).status, 200);
  assert.equal((await call(U, "POST", "/healthz", "/healthz")).status, 405);
  assert.equal((await call(U, "GET", "/readyz", "/readyz")).status, 200);
  assert.equal((await call(U, "DELETE", "/readyz", "/readyz")).status, 405);
  assert.equal((await call(G3, "GET", "/readyz", "/readyz")).status, 503);   // unavailable

  // POST /v1/jobs
  const ok = await call(U, "POST", jobs, jobs, { token: T, body: json({ op: "sh", script: "echo hi" }) });
  assert.equal(ok.status, 202);
  const id = ok.body.id;
  const bad = async (b, code) => {
    const r = await call(U, "POST", jobs, jobs, { token: T, body: b });
    assert.equal(r.body.error.code, code, r.body.error.message);
  };
  await bad("", "bad_json");
  await bad("[1]", "bad_json");
  await bad(json({ op: "sh", script: "x", tenant: "other" }), "unknown_field");
  await bad(json({ op: "sh", script: 5 }), "invalid_job");
  await bad(json({ op: "image.push", image: "host" }), "unsupported_op");
  assert.equal((await call(U, "POST", jobs, jobs, { body: json({ op: "sh", script: "x" }) })).status, 401);
  assert.equal((await call(U, "POST", jobs, jobs, { token: "sqt_" + "A".repeat(43), body: "{}" })).status, 401);
  assert.equal((await call(U, "POST", jobs, jobs, { token: admin, body: json({ op: "sh", script: "x" }) })).status, 403);
  const big = json({ op: "sh", script: "x".repeat(1536 * 1024) });
  assert.equal((await call(U, "POST", jobs, jobs, { token: T, body: big })).status, 413);
  assert.equal((await call(U, "GET", jobs, jobs, { token: T })).status, 405);
  const down = await call(G3, "POST", jobs, jobs, { token: T, body: json({ op: "sh", script: "x" }) });
  assert.equal(down.body.error.code, "unavailable");

  // GET /v1/jobs/{id}
  const one = "/v1/jobs/{id}";
  const res = await call(U, "GET", one, `${jobs}/${id}?wait=30`, { token: T });
  assert.equal(res.status, 200);
  assert.equal(res.body.stdout, "hi\n");
  assert.equal((await call(U, "GET", one, `${jobs}/nobody-has-it?wait=0`, { token: T })).status, 404);
  assert.equal((await call(U, "GET", one, `${jobs}/${id}?wait=61`, { token: T })).status, 400);
  assert.equal((await call(U, "GET", one, `${jobs}/${id}?nope=1`, { token: T })).status, 400);
  assert.equal((await call(U, "POST", one, `${jobs}/${id}`, { token: T })).status, 405);
  assert.equal((await call(U, "GET", one, `${jobs}/${id}`, { token: admin })).status, 403);
  execFileSync("redis-cli", ["-p", String(H.redisPort), "SET", "sandq:{default}:res:broken-1", "not msgpack"],
    { stdio: "ignore" });
  assert.equal((await call(U, "GET", one, `${jobs}/broken-1`, { token: T })).status, 502);

  // GET /v1/jobs/{id}/events
  const ev = "/v1/jobs/{id}/events";
  const sid = (await call(U, "POST", jobs, jobs, { token: T,
    body: json({ op: "sh", script: "echo a; sleep 0.2; echo b >&2", stream: true }) })).body.id;
  const s = await call(U, "GET", ev, `${jobs}/${sid}/events`, { token: T });
  assert.equal(s.status, 200);
  assert.match(s.text, /event: stdout\ndata: \{"data":"a\\n"\}/);
  assert.match(s.text, /event: end\ndata: \{"status":"ok"\}\n\n$/);
  const firstId = /id: (\S+)/.exec(s.text)[1];
  const resumed = await call(U, "GET", ev, `${jobs}/${sid}/events`, { token: T, headers: { "last-event-id": firstId } });
  assert.ok(!resumed.text.includes('"a\\n"') && resumed.text.includes('"b\\n"'));
  assert.equal((await call(U, "GET", ev, `${jobs}/${sid}/events?from=${firstId}`, { token: T })).status, 200);
  assert.equal((await call(U, "GET", ev, `${jobs}/${sid}/events?from=zzz`, { token: T })).status, 400);
  const ns = await call(U, "GET", ev, `${jobs}/${id}/events`, { token: T });
  assert.equal(ns.body.error.code, "no_stream");
  const nf = await call(U, "GET", ev, `${jobs}/nobody-has-it/events`, { token: T });
  assert.equal(nf.body.error.code, "not_found");
  assert.equal((await call(U, "POST", ev, `${jobs}/${sid}/events`, { token: T })).status, 405);
  assert.equal((await call(U, "GET", ev, `${jobs}/${sid}/events`, {})).status, 401);

  // --max-streams 1: a second stream while one is open
  const lid = (await call(G2, "POST", jobs, jobs, { token: T,
    body: json({ op: "sh", script: "echo go; sleep 30", stream: true }) })).body.id;
  const held = await call(G2, "GET", ev, `${jobs}/${lid}/events`, { token: T, keepOpen: true });
  assert.equal(held.status, 200);
  const tm = await call(G2, "GET", ev, `${jobs}/${lid}/events`, { token: T });
  assert.equal(tm.status, 503);
  assert.equal(tm.body.error.code, "too_many_streams");

  // POST /v1/jobs/{id}/cancel
  const cn = "/v1/jobs/{id}/cancel";
  const c1 = await call(G2, "POST", cn, `${jobs}/${lid}/cancel`, { token: T });
  assert.equal(c1.status, 202);
  assert.equal(c1.body.cancel, "requested");
  const rest = await held.res.text();
  assert.match(rest, /event: end\ndata: \{"status":"cancelled"\}/);
  assert.equal((await call(U, "POST", cn, `${jobs}/${id}/cancel`, { token: T })).status, 409);
  assert.equal((await call(U, "POST", cn, `${jobs}/nobody-has-it/cancel`, { token: T })).status, 404);
  assert.equal((await call(U, "GET", cn, `${jobs}/${id}/cancel`, { token: T })).status, 405);
  assert.equal((await call(U, "POST", cn, `${jobs}/${id}/cancel`, { token: admin })).status, 403);

  // POST /v1/mcp (tests/mcp/http.test.mjs drives it with the MCP SDK)
  const mcp = "/v1/mcp";
  const ping = json({ jsonrpc: "2.0", id: 1, method: "ping" });
  const pong = await call(U, "POST", mcp, mcp, { token: T, body: ping });
  assert.deepEqual(pong.body, { jsonrpc: "2.0", id: 1, result: {} });
  const run = await call(U, "POST", mcp, mcp, { token: T, body: json({ jsonrpc: "2.0", id: 2,
    method: "tools/call", params: { name: "run_shell", arguments: { command: "echo mcp" } } }) });
  assert.equal(run.body.result.structuredContent.stdout, "mcp\n");
  const note = await fetch(U + mcp, { method: "POST", headers: { authorization: `Bearer ${T}` },
    body: json({ jsonrpc: "2.0", method: "notifications/initialized" }) });
  assert.equal(note.status, 202);   // no body: call() would parse one
  assert.equal(await note.text(), "");
  assert.ok(SPEC.paths[mcp].post.responses["202"]);
  assert.equal((await call(U, "POST", mcp, mcp, { token: T, body: "{" })).body.error.code, "bad_json");
  assert.equal((await call(U, "POST", mcp, mcp, { token: T, body: ping,
    headers: { "mcp-protocol-version": "1900-01-01" } })).body.error.code, "bad_protocol_version");
  assert.equal((await call(U, "POST", mcp, `${mcp}?sandbox=..`, { token: T, body: ping })).body.error.code, "bad_query");
  assert.equal((await call(U, "POST", mcp, mcp, { token: T, body: ping,
    headers: { origin: "http://evil.example" } })).body.error.code, "forbidden_origin");
  assert.equal((await call(U, "POST", mcp, mcp, { token: admin, body: ping })).status, 403);
  assert.equal((await call(U, "POST", mcp, mcp, { body: ping })).status, 401);
  assert.equal((await call(U, "GET", mcp, mcp, { token: T })).status, 405);
  assert.equal((await call(U, "POST", mcp, mcp, { token: T, body: "x".repeat(1536 * 1024) })).status, 413);
  assert.equal((await call(G3, "POST", mcp, mcp, { token: T, body: ping })).status, 503);
});

test("the batch routes answer as documented", async () => {
  const U = H.url;
  const T = H.token;
  const B = "/v1/batches";
  const nd = { "content-type": "application/x-ndjson" };
  const lines = [json({ op: "sh", script: "echo hi", expect: "hi\n" }), "not json"].join("\n");
  const sub = await call(U, "POST", B, `${B}?id=oa1`, { token: T, body: lines, headers: nd });
  assert.equal(sub.status, 202);
  assert.equal(sub.body.submitted, 1);
  assert.equal(sub.body.malformed[0].line, 2);
  const post = (path, body, headers = nd, token = T) => call(U, "POST", B, path, { token, body, headers });
  assert.equal((await post(B, "\n")).body.error.code, "bad_request");
  assert.equal((await post(`${B}?nope=1`, lines)).body.error.code, "bad_query");
  assert.equal((await post(B, lines, { "content-type": "text/plain" })).body.error.code,
    "unsupported_media_type");
  assert.equal((await post(B, "{}\n".repeat(10001))).body.error.code, "too_many_cases");
  assert.equal((await post(B, lines, nd, null)).status, 401);
  assert.equal((await post(B, lines, nd, admin)).status, 403);
  execFileSync("redis-cli", ["-p", String(H.redisPort), "HSET", "sandq:{default}:batch:cli1", "state", "finished"],
    { stdio: "ignore" });
  assert.equal((await post(`${B}?id=cli1`, lines)).body.error.code, "batch_exists");
  assert.equal((await call(U, "GET", B, B, { token: T })).status, 405);

  const one = "/v1/batches/{batch}";
  let p;
  for (let i = 0; i < 300; i++) {
    p = await call(U, "GET", one, `${B}/oa1`, { token: T });
    assert.equal(p.status, 200);
    if (p.body.done === p.body.total) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(p.body.state, "finished");
  assert.equal(p.body.passed, 1);
  assert.equal(p.body.malformed, 1);
  assert.equal((await call(U, "GET", one, `${B}/cli1`, { token: T })).status, 404);
  assert.equal((await call(U, "GET", one, `${B}/oa1`, { token: admin })).status, 403);
  assert.equal((await call(U, "DELETE", one, `${B}/oa1`, { token: T })).status, 405);

  const rs = "/v1/batches/{batch}/results";
  const r = await call(U, "GET", rs, `${B}/oa1/results?from=1&limit=10`, { token: T });
  assert.equal(r.status, 200);
  assert.equal(r.body.results[0].case, 1);
  assert.equal(r.body.results[0].pass, true);
  assert.equal(r.body.next, null);
  assert.equal((await call(U, "GET", rs, `${B}/oa1/results?limit=0`, { token: T })).status, 400);
  assert.equal((await call(U, "GET", rs, `${B}/none/results`, { token: T })).status, 404);
  assert.equal((await call(U, "POST", rs, `${B}/oa1/results`, { token: T })).status, 405);

  const cn = "/v1/batches/{batch}/cancel";
  const c = await call(U, "POST", cn, `${B}/oa1/cancel`, { token: T });
  assert.equal(c.status, 202);
  assert.equal(c.body.finished, 1);
  assert.equal((await call(U, "POST", cn, `${B}/none/cancel`, { token: T })).status, 404);
  assert.equal((await call(U, "GET", cn, `${B}/oa1/cancel`, { token: T })).status, 405);
});

/** A ustar archive of entries [name, type ("0" file, "5" folder), data?]. */
function ustar(entries) {
  const parts = [];
  for (const [name, type, data = new Uint8Array(0)] of entries) {
    const h = new Uint8Array(512);
    const put = (off, s) => h.set(new TextEncoder().encode(s), off);
    put(0, name);
    put(100, type === "5" ? "0000755\0" : "0000644\0");
    put(108, "0000000\0");
    put(116, "0000000\0");
    put(124, data.length.toString(8).padStart(11, "0") + "\0");
    put(136, "00000000000\0");
    put(148, "        ");
    put(156, type);
    put(257, "ustar\0");
    put(263, "00");
    let sum = 0;
    for (const b of h) sum += b;
    put(148, sum.toString(8).padStart(6, "0") + "\0 ");
    parts.push(h);
    const body = new Uint8Array(Math.ceil(data.length / 512) * 512);
    body.set(data);
    parts.push(body);
  }
  parts.push(new Uint8Array(1024));
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** A new tenant with settings (sandq tenant add), and a token of it. */
function tenantToken(name, ...settings) {
  H.sandq("tenant", "add", name, ...settings);
  return H.sandq("tenant", "token", "add", name, "--name", "t").trim().split("\n").pop();
}

test("every documented sandbox route answers as documented", { timeout: 300000 }, async () => {
  const U = H.url;
  const T = H.token;
  const S = "/v1/sandboxes";
  const one = "/v1/sandboxes/{sandbox}";
  const req = (m, tmpl, path, o = {}) => call(U, m, tmpl, path, { token: T, ...o });
  const is = async (p, status, code) => {
    const r = await p;
    assert.equal(r.status, status, JSON.stringify(r.body));
    if (code !== undefined) assert.equal(r.body.error.code, code, r.body.error.message);
    return r;
  };

  // A sandbox busy for 65 s: an op behind it has no answer within 60 s (awaited last).
  await is(req("POST", S, S, { body: json({ sandbox: "busy" }) }), 201);
  await is(call(U, "POST", "/v1/jobs", "/v1/jobs", { token: T,
    body: json({ op: "sh", sandbox: "busy", script: "sleep 65", limits: { wall_ms: 90000 } }) }), 202);
  await new Promise((r) => setTimeout(r, 500));
  const late = req("GET", one, `${S}/busy`);

  // /v1/sandboxes and /v1/sandboxes/{sandbox}
  await is(req("POST", S, S, { body: json({ sandbox: "s1", labels: { k: "v" } }) }), 201);
  await is(req("POST", S, S, { body: json({ sandbox: "s1" }) }), 409, "sandbox_exists");
  await is(req("POST", S, S, { body: "" }), 400, "bad_json");
  await is(req("POST", S, S, { body: json({ sandbox: "s9", bogus: 1 }) }), 400, "unknown_field");
  await is(req("POST", S, S, { body: json({ sandbox: 5 }) }), 400, "invalid_job");
  await is(req("POST", S, S, { body: json({ sandbox: "s9", snapshot_b64: "AAAAAAAA" }) }), 400, "bad_snapshot");
  await is(req("POST", S, S, { body: json({ sandbox: "s9", snapshot_key: "0".repeat(64) }) }), 404, "snapshot_not_found");
  await is(req("POST", S, S, { body: json({ sandbox: "s9", image: "docker://nowhere.invalid/x:1" }) }), 400, "image");
  await is(req("GET", S, S), 200);
  await is(req("PATCH", S, S), 405, "method_not_allowed");
  await is(call(U, "GET", S, S, {}), 401, "unauthorized");
  await is(call(U, "GET", S, S, { token: admin }), 403, "admin_token");
  await is(req("GET", one, `${S}/s1`), 200);
  await is(req("GET", one, `${S}/nope`), 404, "sandbox_not_found");
  await is(req("GET", one, `${S}/a%20b`), 404, "not_found");
  await is(req("PUT", one, `${S}/s1`), 405);

  // files, stat, list
  const F = `${one}/files/{path}`;
  const sh = async (script) => {
    const id = (await call(U, "POST", "/v1/jobs", "/v1/jobs", { token: T,
      body: json({ op: "sh", sandbox: "s1", script }) })).body.id;
    assert.equal((await call(U, "GET", "/v1/jobs/{id}", `/v1/jobs/${id}?wait=60`, { token: T })).body.status, "ok");
  };
  await sh("mkdir -p dir/sub locked && echo f > dir/f && echo s > locked/secret && chmod 000 locked/secret");
  await is(req("PUT", F, `${S}/s1/files/x.bin`, { body: new Uint8Array([0xff, 0]) }), 200);
  const got = await is(req("GET", F, `${S}/s1/files/x.bin`), 200);
  assert.deepEqual([...got.bytes], [0xff, 0]);
  await is(req("GET", F, `${S}/s1/files/dir`), 400, "is_dir");
  await is(req("PUT", F, `${S}/s1/files/dir`, { body: "x" }), 400, "is_dir");
  await is(req("GET", F, `${S}/s1/files/nope`), 404, "not_found");
  await is(req("DELETE", F, `${S}/s1/files/dir`), 409, "not_empty");
  await is(req("DELETE", F, `${S}/s1/files/x.bin`), 200);
  await is(req("PUT", F, `${S}/s1/files/big`, { body: new Uint8Array(1536 * 1024) }), 413, "body_too_large");
  await is(req("POST", F, `${S}/s1/files/x`), 405);
  await is(req("GET", `${one}/files`, `${S}/s1/files?recursive=true`), 200);
  await is(req("GET", `${one}/files`, `${S}/s1/files?x=1`), 400, "bad_query");
  await is(req("PUT", `${one}/files`, `${S}/s1/files`), 405);
  await is(req("GET", `${one}/stat/{path}`, `${S}/s1/stat/dir/f`), 200);
  await is(req("GET", `${one}/stat/{path}`, `${S}/s1/stat/nope`), 404, "not_found");
  await is(req("PUT", `${one}/stat/{path}`, `${S}/s1/stat/dir`), 405);
  await is(req("GET", `${one}/list/{path}`, `${S}/s1/list/dir`), 200);
  await is(req("GET", `${one}/list/{path}`, `${S}/s1/list/dir/f`), 400, "not_dir");
  await is(req("DELETE", `${one}/list/{path}`, `${S}/s1/list/dir`), 405);

  // kv
  const K = `${one}/kv/{key}`;
  await is(req("PUT", K, `${S}/s1/kv/k`, { body: '{"a":1}' }), 204);
  assert.deepEqual((await is(req("GET", K, `${S}/s1/kv/k`), 200)).body, { a: 1 });
  await is(req("GET", `${one}/kv`, `${S}/s1/kv`), 200);
  await is(req("DELETE", `${one}/kv`, `${S}/s1/kv`), 405);
  await is(req("DELETE", K, `${S}/s1/kv/k`), 204);
  await is(req("GET", K, `${S}/s1/kv/k`), 404, "not_found");
  await is(req("POST", K, `${S}/s1/kv/k`), 405);

  // history, export, import, fork, delete
  await is(req("GET", `${one}/history`, `${S}/s1/history`), 200);
  await is(req("POST", `${one}/history`, `${S}/s1/history`), 405);
  const snap = (await is(req("GET", `${one}/export`, `${S}/s1/export`), 200)).bytes;
  await is(req("PUT", `${one}/export`, `${S}/s1/export`), 405);
  await is(req("PUT", `${one}/import`, `${S}/s2/import`, { body: snap }), 200);
  await is(req("PUT", `${one}/import`, `${S}/s2/import`, { body: new Uint8Array(100) }), 400, "bad_snapshot");
  await is(req("GET", `${one}/import`, `${S}/s2/import`), 405);
  await is(req("POST", `${one}/fork`, `${S}/s1/fork`, { body: json({ to: "f1" }) }), 201);
  await is(req("POST", `${one}/fork`, `${S}/s1/fork`, { body: json({ to: "f1" }) }), 409, "sandbox_exists");
  await is(req("POST", `${one}/fork`, `${S}/s1/fork`, { body: json({ to: "f2", deadline_ms: 1 }) }), 504, "deadline");
  await is(req("GET", `${one}/fork`, `${S}/s1/fork`), 405);
  await is(req("DELETE", one, `${S}/f1`), 204);

  // tar
  const TP = `${one}/tar/{path}`;
  const tar = (await is(req("GET", TP, `${S}/s1/tar/dir`), 200)).bytes;
  await is(req("GET", `${one}/tar`, `${S}/s1/tar`), 400, "tar_failed");   // locked/secret: mode 000
  await is(req("GET", TP, `${S}/s1/tar/nope`), 404, "not_found");
  await is(req("DELETE", TP, `${S}/s1/tar/dir`), 405);
  await is(req("PUT", TP, `${S}/s2/tar/in`, { body: tar }), 200);
  await is(req("PUT", `${one}/tar`, `${S}/s2/tar`, { body: ustar([["a", "0", new Uint8Array(1)]]) }), 200);
  await is(req("PUT", TP, `${S}/s2/tar/in`, { body: ustar([["../x", "0"]]) }), 400, "bad_tar");
  await is(req("PUT", TP, `${S}/s2/tar/in`, { body: ustar([["f/", "5"]]) }), 409, "conflict");
  const many = ustar(Array.from({ length: 1025 }, (_, i) => [`f${i}`, "0"]));
  await is(req("PUT", TP, `${S}/s2/tar/in`, { body: many }), 413, "too_large");
  await is(req("DELETE", `${one}/tar`, `${S}/s2/tar`), 405);
  await sh("chmod 644 locked/secret");
  await is(req("GET", `${one}/tar`, `${S}/s1/tar`), 200);

  // The tenant's settings: ceilings, deny list, storage quota, rate, queue.
  const lim = tenantToken("lim", "--ceiling", "output_bytes=1M");
  await is(call(U, "POST", S, S, { token: lim, body: json({ sandbox: "l1" }) }), 201);
  await is(call(U, "GET", `${one}/tar`, `${S}/l1/tar`, { token: lim }), 400, "limit");
  const pol = tenantToken("pol", "--deny", "*tar -c*");
  await is(call(U, "POST", S, S, { token: pol, body: json({ sandbox: "p1" }) }), 201);
  await is(call(U, "GET", `${one}/tar`, `${S}/p1/tar`, { token: pol }), 403, "policy");
  const quota = tenantToken("quota", "--storage-quota", "1");
  const q = await call(U, "POST", S, S, { token: quota, body: json({ sandbox: "q1" }) });
  if (q.status === 201)
    await is(call(U, "PUT", F, `${S}/q1/files/x`, { token: quota, body: "x" }), 413, "storage_quota");
  else
    await is(q, 413, "storage_quota");
  const slow = tenantToken("slow", "--rate", "0.01", "--burst", "1");
  await is(call(U, "GET", S, S, { token: slow }), 200);
  await is(call(U, "GET", S, S, { token: slow }), 429, "rate_limited");
  const full = tenantToken("full", "--max-queued", "1");
  await is(call(U, "POST", "/v1/jobs", "/v1/jobs", { token: full, body: json({ op: "sh", script: "sleep 3" }) }), 202);
  await is(call(U, "GET", S, S, { token: full }), 429, "queue_full");

  // The busy sandbox's op: no result within 60 s.
  await is(late, 504, "timeout");
  await is(req("DELETE", one, `${S}/s2`), 204);
});

test("waited submits, X-Sandq-Tenant and the admin routes answer as documented", async () => {
  const U = H.url;
  const T = H.token;
  const jobs = "/v1/jobs";

  // POST /v1/jobs?wait=S: the result, or 202 and the id
  const w = await call(U, "POST", jobs, `${jobs}?wait=30`, { token: T, body: json({ op: "sh", script: "echo w" }) });
  assert.equal(w.status, 200);
  assert.equal(w.body.stdout, "w\n");
  const slow = await call(U, "POST", jobs, `${jobs}?wait=1`, { token: T, body: json({ op: "sh", script: "sleep 3" }) });
  assert.equal(slow.status, 202);
  const bq = await call(U, "POST", jobs, `${jobs}?wait=99`, { token: T, body: json({ op: "sh", script: "x" }) });
  assert.equal(bq.body.error.code, "bad_query");

  // An admin token acting as a tenant it names
  const as = await call(U, "POST", jobs, `${jobs}?wait=30`,
    { token: admin, headers: { "x-sandq-tenant": "default" }, body: json({ op: "sh", script: "echo adm" }) });
  assert.equal(as.status, 200);
  assert.equal(as.body.stdout, "adm\n");
  const bt = await call(U, "POST", jobs, jobs,
    { token: admin, headers: { "x-sandq-tenant": "no/pe" }, body: json({ op: "sh", script: "x" }) });
  assert.equal(bt.body.error.code, "bad_tenant");
  const ut = await call(U, "POST", jobs, jobs,
    { token: admin, headers: { "x-sandq-tenant": "nobody" }, body: json({ op: "sh", script: "x" }) });
  assert.equal(ut.body.error.code, "unknown_tenant");

  // GET /v1/admin/status
  const st = "/v1/admin/status";
  const view = await call(U, "GET", st, st, { token: admin });
  assert.equal(view.status, 200);
  assert.ok(view.body.hosts.length >= 1 && view.body.tenants.some((t) => t.name === "default"));
  const na = await call(U, "GET", st, st, { token: T });
  assert.equal(na.body.error.code, "not_admin");
  assert.equal((await call(U, "GET", st, `${st}?x=1`, { token: admin })).status, 400);
  assert.equal((await call(U, "POST", st, st, { token: admin })).status, 405);
  assert.equal((await call(U, "GET", st, st, {})).status, 401);

  // GET /v1/admin/dead and POST .../retry
  const dl = "/v1/admin/dead";
  const cut = execFileSync("redis-cli", ["-p", String(H.redisPort), "XADD", "sandq:{default}:dead", "*",
    "entry", "1-1", "id", "cut-1", "reason", "test", "attempts", "[]", "payload", "x",
    "payload_truncated", "1"], { encoding: "utf8" }).trim();
  const dead = await call(U, "GET", dl, `${dl}?tenant=default&limit=10`, { token: admin });
  assert.equal(dead.status, 200);
  assert.ok(dead.body.dead.some((d) => d.dead_id === cut && d.retryable === false));
  assert.equal((await call(U, "GET", dl, dl, { token: admin })).status, 400);
  const rt = "/v1/admin/dead/{tenant}/{dead_id}/retry";
  const nr = await call(U, "POST", rt, `${dl}/default/${cut}/retry`, { token: admin });
  assert.equal(nr.body.error.code, "not_retryable");
  const gone = await call(U, "POST", rt, `${dl}/default/1-1/retry`, { token: admin });
  assert.equal(gone.status, 404);
  assert.equal((await call(U, "GET", rt, `${dl}/default/1-1/retry`, { token: admin })).status, 405);

  // GET /v1/admin/audit
  const au = "/v1/admin/audit";
  const ev = await call(U, "GET", au, `${au}?tenant=default&limit=5`, { token: admin });
  assert.equal(ev.status, 200);
  assert.ok(ev.body.events.length >= 1);
  assert.equal((await call(U, "GET", au, `${au}?tenant=default&category=job`, { token: admin })).status, 200);
  assert.equal((await call(U, "GET", au, `${au}?tenant=default&before=x`, { token: admin })).status, 400);
});

test("every documented operation was called and every error code produced", () => {
  for (const [tmpl, item] of Object.entries(SPEC.paths))
    for (const m of ["get", "post", "put", "delete", "patch"])
      if (item[m]) assert.ok(called.has(`${m.toUpperCase()} ${tmpl}`), `${m.toUpperCase()} ${tmpl} was never called`);
  const all = deref({ $ref: "#/components/schemas/Error" }).properties.error.properties.code.enum;
  const missing = all.filter((c) => !codes.has(c) && !(c in UNPRODUCIBLE));
  assert.deepEqual(missing, [], `codes no request produced: ${missing}`);
  // and every code any response lists is in the enum
  const listed = new Set();
  const walk = (o) => {
    if (o && typeof o === "object") {
      if (Array.isArray(o["x-error-codes"])) o["x-error-codes"].forEach((c) => listed.add(c));
      Object.values(o).forEach(walk);
    }
  };
  walk(SPEC);
  for (const c of listed) assert.ok(all.includes(c), `x-error-codes has '${c}', not in the Error enum`);
});
