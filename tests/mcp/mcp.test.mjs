// mcp.test.mjs - `sandq mcp` driven by the official MCP TypeScript SDK's
// client (@modelcontextprotocol/sdk, pinned in tests/mcp/package-lock.json)
// over its StdioClientTransport, as an agent framework would drive it, plus
// the raw transport (malformed JSON, unknown methods, ping, an oversized
// line, EOF) written by hand since the SDK never sends those.
//
// The harness is the TypeScript client's (clients/typescript/test/harness.mjs):
// a private redis-server, sandqd (and sandq-gateway, unused here) on free
// loopback ports in a mkdtemp folder, stopped by pid.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Harness, BUILD } from "../../clients/typescript/test/harness.mjs";

const h = new Harness();
let client;

before(async () => {
  await h.start();
  client = new Client({ name: "sandq-mcp-test", version: "1.0.0" });
  await client.connect(new StdioClientTransport({
    command: join(BUILD, "sandq"),
    args: ["--redis", h.redisUrl, "mcp", "--sandbox", "s1"],
    stderr: "inherit",
  }));
}, { timeout: 120000 });

after(async () => {
  if (client) await client.close();
  await h.stop();
});

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");

test("initialize negotiates a version and names the server", () => {
  assert.equal(client.getServerVersion().name, "sandq");
  assert.ok(client.getServerCapabilities().tools);
});

test("tools/list names every tool with an object schema", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["kv_get", "kv_set", "list_files", "read_file", "run_python",
    "run_shell", "write_file"]);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object", t.name);
    assert.equal(t.inputSchema.additionalProperties, false, t.name);
  }
  const sh = tools.find((t) => t.name === "run_shell");
  assert.deepEqual(sh.inputSchema.required, ["command"]);
});

test("run_shell returns the command's output and exit code", async () => {
  const r = await client.callTool({ name: "run_shell", arguments: { command: "echo hello; echo oops >&2" } });
  assert.equal(r.isError, false, text(r));
  assert.match(text(r), /exit_code: 0/);
  assert.equal(r.structuredContent.stdout, "hello\n");
  assert.equal(r.structuredContent.stderr, "oops\n");
});

test("run_python runs code", async () => {
  const r = await client.callTool({ name: "run_python", arguments: { code: "print(6 * 7)" } });
  assert.equal(r.isError, false, text(r));
  assert.equal(r.structuredContent.stdout, "42\n");
});

test("write_file, then run_shell sees it, read_file and list_files return it", async () => {
  let r = await client.callTool({ name: "write_file", arguments: { path: "notes/../a.txt", content: "x" } });
  // a path with .. is refused by the server, by name
  assert.equal(r.isError, true);
  r = await client.callTool({ name: "write_file", arguments: { path: "hello.txt", content: "héllo\n" } });
  assert.equal(r.isError, false, text(r));
  r = await client.callTool({ name: "run_shell", arguments: { command: "cat hello.txt; echo more >> hello.txt" } });
  assert.equal(r.isError, false, text(r));
  assert.equal(r.structuredContent.stdout, "héllo\n");
  r = await client.callTool({ name: "read_file", arguments: { path: "hello.txt" } });
  assert.equal(r.isError, false, text(r));
  assert.equal(text(r), "héllo\nmore\n");
  r = await client.callTool({ name: "list_files", arguments: {} });
  assert.equal(r.isError, false, text(r));
  assert.match(text(r), /file 12 \/hello\.txt/);
});

test("kv_set then kv_get", async () => {
  let r = await client.callTool({ name: "kv_set", arguments: { key: "k", value: { a: [1, "two"] } } });
  assert.equal(r.isError, false, text(r));
  r = await client.callTool({ name: "kv_get", arguments: { key: "k" } });
  assert.equal(r.isError, false, text(r));
  assert.deepEqual(JSON.parse(text(r)), { a: [1, "two"] });
  r = await client.callTool({ name: "kv_get", arguments: { key: "missing" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /not_found/);
});

test("a failing command is isError with its exit code", async () => {
  const r = await client.callTool({ name: "run_shell", arguments: { command: "echo no >&2; exit 3" } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.exit_code, 3);
  assert.match(text(r), /status: exit/);
  assert.match(text(r), /no\n/);
});

test("a timeout is isError", async () => {
  const r = await client.callTool({ name: "run_shell", arguments: { command: "sleep 30", timeout_s: 0.5 } });
  assert.equal(r.isError, true);
  assert.match(text(r), /timeout/);
});

test("bad arguments are refused by name", async () => {
  let r = await client.callTool({ name: "run_shell", arguments: {} });
  assert.equal(r.isError, true);
  assert.match(text(r), /'command' is required/);
  r = await client.callTool({ name: "run_shell", arguments: { command: 7 } });
  assert.match(text(r), /'command' must be a string/);
  r = await client.callTool({ name: "run_shell", arguments: { command: "true", bogus: 1 } });
  assert.match(text(r), /unknown argument 'bogus'/);
  r = await client.callTool({ name: "run_shell", arguments: { command: "true", timeout_s: -1 } });
  assert.match(text(r), /'timeout_s'/);
  await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }),
    (e) => e.code === -32602);
});

test("ping answers", async () => {
  assert.deepEqual(await client.ping(), {});
});

// The raw transport: one line in, one line out, nothing else on stdout.
test("raw stdio: parse errors, unknown methods, oversized lines, unbound tools, EOF", async () => {
  const p = spawn(join(BUILD, "sandq"), ["--redis", h.redisUrl, "mcp"], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  p.stderr.on("data", (d) => (stderr += d));
  const lines = createInterface({ input: p.stdout })[Symbol.asyncIterator]();
  const ask = async (line) => {
    p.stdin.write(line + "\n");
    const { value } = await lines.next();
    return JSON.parse(value);
  };
  let m = await ask('{"jsonrpc":"2.0","id":1,"method":"initialize","params":' +
    '{"protocolVersion":"1999-01-01","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}');
  assert.equal(m.result.protocolVersion, "2025-11-25");
  p.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
  m = await ask("{not json");
  assert.equal(m.error.code, -32700);
  assert.equal(m.id, null);
  m = await ask('{"jsonrpc":"2.0","id":"x","method":"resources/list"}');
  assert.equal(m.error.code, -32601);
  assert.equal(m.id, "x");
  m = await ask('[{"jsonrpc":"2.0","id":3,"method":"ping"}]');
  assert.equal(m.error.code, -32600);
  m = await ask('{"jsonrpc":"2.0","id":9,"method":5}');
  assert.equal(m.error.code, -32600);
  assert.equal(m.id, 9);
  m = await ask('{"jsonrpc":"1.0","id":10,"method":"ping"}');
  assert.equal(m.error.code, -32600);
  m = await ask('{"jsonrpc":"2.0","id":4,"method":"ping"}');
  assert.deepEqual(m, { jsonrpc: "2.0", id: 4, result: {} });
  m = await ask('{"jsonrpc":"2.0","id":5,"method":"x","pad":"' + "a".repeat(9 << 20) + '"}');
  assert.equal(m.error.code, -32600);
  // Unbound: no file or kv tools listed, and a call to one says why.
  m = await ask('{"jsonrpc":"2.0","id":6,"method":"tools/list"}');
  assert.deepEqual(m.result.tools.map((t) => t.name).sort(), ["run_python", "run_shell"]);
  m = await ask('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"}}}');
  assert.equal(m.result.isError, true);
  assert.match(m.result.content[0].text, /needs a bound sandbox/);
  // A fresh sandbox per run: nothing carries over. Output that is not UTF-8
  // arrives as valid JSON with U+FFFD.
  m = await ask('{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"run_shell",' +
    '"arguments":{"command":"ls; printf \'\\\\377ok\'"}}}');
  assert.equal(m.result.isError, false, JSON.stringify(m));
  assert.equal(m.result.structuredContent.stdout, "\ufffdok");
  const code = await new Promise((ok) => {
    p.once("exit", ok);
    p.stdin.end();
  });
  assert.equal(code, 0, stderr);
});

test("a second server bound to the same sandbox finds its files", async () => {
  const c2 = new Client({ name: "sandq-mcp-test-2", version: "1.0.0" });
  await c2.connect(new StdioClientTransport({
    command: join(BUILD, "sandq"),
    args: ["--redis", h.redisUrl, "--sandbox", "s1", "mcp"],
    stderr: "inherit",
  }));
  try {
    const r = await c2.callTool({ name: "run_shell", arguments: { command: "cat hello.txt" } });
    assert.equal(r.isError, false, text(r));
    assert.equal(r.structuredContent.stdout, "héllo\nmore\n");
    const n = await c2.callTool({ name: "read_file", arguments: { path: "a\u0000b" } });
    assert.equal(n.isError, true);
    assert.match(text(n), /'path' must not contain NUL/);
  } finally {
    await c2.close();
  }
});

// The tenant's own confined credentials (`tenant add` prints its URL): the
// server acts as that tenant, whose sandbox "s1" is its own, not default's.
test("a tenant's credentials reach only its own sandboxes", async () => {
  const url = h.sandq("tenant", "add", "acme").trim().split("\n").pop();
  const c3 = new Client({ name: "sandq-mcp-test-acme", version: "1.0.0" });
  await c3.connect(new StdioClientTransport({
    command: join(BUILD, "sandq"),
    args: ["--redis", url, "--tenant", "acme", "mcp", "--sandbox", "s1"],
    stderr: "inherit",
  }));
  try {
    let r = await c3.callTool({ name: "run_shell", arguments: { command: "echo acme > mine.txt; ls" } });
    assert.equal(r.isError, false, text(r));
    assert.equal(r.structuredContent.stdout, "mine.txt\n");
    r = await c3.callTool({ name: "read_file", arguments: { path: "hello.txt" } });
    assert.equal(r.isError, true);
    assert.match(text(r), /not_found/);
  } finally {
    await c3.close();
  }
  // And its URL cannot act as another tenant: the server refuses to start.
  const p = spawn(join(BUILD, "sandq"), ["--redis", url, "--tenant", "default", "mcp", "--sandbox", "s1"],
    { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  p.stdout.on("data", (d) => (out += d));
  const code = await new Promise((ok) => p.once("exit", ok));
  assert.equal(code, 125);
  assert.equal(out, "");
});
