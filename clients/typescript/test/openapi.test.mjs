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
  const media = doc.content?.[type];
  assert.ok(media, `${method} ${path}: HTTP ${res.status} as '${type}', documented: ${Object.keys(doc.content ?? {})}`);
  if (type === "text/event-stream") {
    if (keepOpen) return { status: res.status, res };
    const text = await res.text();
    return { status: res.status, text };
  }
  const text = await res.text();
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
