// http.test.mjs - sandq-gateway's POST /v1/mcp (MCP's streamable HTTP
// transport) driven by the official MCP TypeScript SDK's client over its
// StreamableHTTPClientTransport, as a remote agent framework would drive
// it, plus the transport's edges written by hand with fetch (GET 405, an
// Origin refused, an unknown MCP-Protocol-Version, a notification 202).
//
// The harness is the TypeScript client's (clients/typescript/test/harness.mjs):
// a private redis-server, sandqd and sandq-gateway on free loopback ports in
// a mkdtemp folder, stopped by pid; tenant "default" and its token h.token.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Harness } from "../../clients/typescript/test/harness.mjs";

const h = new Harness();
const clients = [];

before(async () => {
  await h.start();
}, { timeout: 120000 });

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await h.stop();
});

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");

/** An SDK client connected to /v1/mcp with token (and ?sandbox=). */
async function connect(token, sandbox) {
  const url = new URL(`${h.url}/v1/mcp${sandbox ? `?sandbox=${sandbox}` : ""}`);
  const client = new Client({ name: "sandq-mcp-http-test", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  }));
  clients.push(client);
  return client;
}

/** A sandbox of the token's tenant, made through the REST route. */
async function sandbox(token, id) {
  const r = await fetch(`${h.url}/v1/sandboxes`, {
    method: "POST", headers: { authorization: `Bearer ${token}` }, body: JSON.stringify({ sandbox: id }),
  });
  assert.ok(r.status === 201 || r.status === 200, `create ${id}: HTTP ${r.status} ${await r.text()}`);
}

test("unbound: initialize, tools/list has only the runs, run_shell runs", async () => {
  const c = await connect(h.token);
  assert.equal(c.getServerVersion().name, "sandq");
  assert.ok(c.getServerCapabilities().tools);
  const { tools } = await c.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["run_python", "run_shell"]);
  const r = await c.callTool({ name: "run_shell", arguments: { command: "echo hello; echo oops >&2; exit 3" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /exit_code: 3/);
  assert.equal(r.structuredContent.stdout, "hello\n");
  assert.equal(r.structuredContent.stderr, "oops\n");
  const p = await c.callTool({ name: "run_python", arguments: { code: "print(6 * 7)" } });
  assert.equal(p.isError, false, text(p));
  assert.equal(p.structuredContent.stdout, "42\n");
  // a sandbox tool unbound: an isError result saying how to bind
  const f = await c.callTool({ name: "read_file", arguments: { path: "x" } });
  assert.equal(f.isError, true);
  assert.match(text(f), /sandbox=ID/);
  await assert.rejects(c.callTool({ name: "nope", arguments: {} }), /unknown tool/);
}, { timeout: 60000 });

test("bound: a file round trip and kv in ?sandbox=ID", async () => {
  await sandbox(h.token, "m1");
  const c = await connect(h.token, "m1");
  const { tools } = await c.listTools();
  assert.equal(tools.length, 7);
  let r = await c.callTool({ name: "write_file", arguments: { path: "hello.txt", content: "héllo\n" } });
  assert.equal(r.isError, false, text(r));
  r = await c.callTool({ name: "run_shell", arguments: { command: "cat hello.txt; echo more >> hello.txt" } });
  assert.equal(r.isError, false, text(r));
  assert.equal(r.structuredContent.stdout, "héllo\n");
  r = await c.callTool({ name: "read_file", arguments: { path: "hello.txt" } });
  assert.equal(text(r), "héllo\nmore\n");
  r = await c.callTool({ name: "list_files", arguments: {} });
  assert.match(text(r), /hello\.txt/);
  r = await c.callTool({ name: "kv_set", arguments: { key: "k", value: { a: [1, 2] } } });
  assert.equal(r.isError, false, text(r));
  r = await c.callTool({ name: "kv_get", arguments: { key: "k" } });
  assert.deepEqual(JSON.parse(text(r)), { a: [1, 2] });
  r = await c.callTool({ name: "write_file", arguments: { path: "a.txt" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /'content' is required/);
  // a second client of the same sandbox sees the same files: no session state
  const c2 = await connect(h.token, "m1");
  r = await c2.callTool({ name: "read_file", arguments: { path: "hello.txt" } });
  assert.equal(text(r), "héllo\nmore\n");
}, { timeout: 60000 });

test("a wrong token, and an admin token, are refused", async () => {
  await assert.rejects(connect("sqt_" + "0".repeat(43)), /401|nauthorized/);
  const admin = h.sandq("tenant", "token", "add", "--admin", "--name", "mcpadmin").trim().split("\n").pop();
  await assert.rejects(connect(admin), /403|admin/);
  const r = await fetch(`${h.url}/v1/mcp`, { method: "POST", body: "{}" });
  assert.equal(r.status, 401);
});

test("tenant isolation: another tenant's token cannot reach default's sandbox", async () => {
  h.sandq("tenant", "add", "acme");
  const acme = h.sandq("tenant", "token", "add", "acme", "--name", "mcp").trim().split("\n").pop();
  await sandbox(h.token, "secret");
  const d = await connect(h.token, "secret");
  let r = await d.callTool({ name: "write_file", arguments: { path: "s.txt", content: "default's" } });
  assert.equal(r.isError, false, text(r));
  const a = await connect(acme, "secret");
  r = await a.callTool({ name: "read_file", arguments: { path: "s.txt" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /sandbox_not_found/);
  r = await a.callTool({ name: "run_shell", arguments: { command: "cat s.txt" } });
  assert.equal(r.isError, true);
  assert.doesNotMatch(text(r), /default's/);
}, { timeout: 60000 });

test("the transport's edges: GET 405, Origin 403, bad version 400, notification 202", async () => {
  const auth = { authorization: `Bearer ${h.token}`, "content-type": "application/json",
    accept: "application/json, text/event-stream" };
  let r = await fetch(`${h.url}/v1/mcp`, { headers: auth });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get("allow"), "POST");
  await r.text();
  const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
  r = await fetch(`${h.url}/v1/mcp`, { method: "POST", headers: { ...auth, origin: "http://evil.example" }, body: ping });
  assert.equal(r.status, 403);
  await r.text();
  r = await fetch(`${h.url}/v1/mcp`, { method: "POST", headers: { ...auth, "mcp-protocol-version": "1900-01-01" }, body: ping });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, "bad_protocol_version");
  r = await fetch(`${h.url}/v1/mcp`, { method: "POST", headers: { ...auth, "mcp-protocol-version": "2025-06-18" }, body: ping });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /application\/json/);
  assert.deepEqual(await r.json(), { jsonrpc: "2.0", id: 1, result: {} });
  r = await fetch(`${h.url}/v1/mcp`, { method: "POST", headers: auth,
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) });
  assert.equal(r.status, 202);
  assert.equal(await r.text(), "");
  r = await fetch(`${h.url}/v1/mcp`, { method: "POST", headers: auth, body: "{not json" });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, "bad_json");
  r = await fetch(`${h.url}/v1/mcp`, { method: "POST", headers: auth, body: "[1]" });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, "bad_json");
  r = await fetch(`${h.url}/v1/mcp?sandbox=..`, { method: "POST", headers: auth, body: ping });
  assert.equal(r.status, 400);
  await r.text();
});
