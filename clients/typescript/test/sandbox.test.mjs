// sandbox.test.mjs - the TypeScript client's Sandbox (dist/, compiled from
// src/sandbox.ts) against a real sandq-gateway, sandqd and redis-server
// (harness.mjs): one session (create, bash writes a file, executePython
// reads it, files, kv, history), a fork's isolation, an export imported
// as a new sandbox, a folder through downloadTar/uploadTar (and a hostile
// tar refused naming its entry), errors as SandqError with the op's code
// and HTTP status, and disposal: Symbol.asyncDispose deletes a sandbox the
// object created and keeps one it opened, and `await using` in TypeScript
// compiled by the package's own tsc does the same.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, HistoryEntry, Sandbox, SandqError, snapshotKey } from "../dist/index.js";
import { Harness } from "./harness.mjs";

const TS = resolve(dirname(fileURLToPath(import.meta.url)), "..");
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
    if (status !== undefined) assert.equal(e.status, status, e.message);
    assert.ok(e.message.length > 0);
    return true;
  });
}

/** A one-entry ustar archive (name as given, untouched), for hostile input. */
function ustar(name, data) {
  const h = new Uint8Array(512);
  const put = (off, s) => h.set(new TextEncoder().encode(s), off);
  put(0, name);
  put(100, "0000644\0");
  put(108, "0000000\0");
  put(116, "0000000\0");
  put(124, data.length.toString(8).padStart(11, "0") + "\0");
  put(136, "00000000000\0");
  put(148, "        ");
  put(156, "0");
  put(257, "ustar\0");
  put(263, "00");
  let sum = 0;
  for (const b of h) sum += b;
  put(148, sum.toString(8).padStart(6, "0") + "\0 ");
  const body = new Uint8Array(Math.ceil(data.length / 512) * 512);
  body.set(data);
  const out = new Uint8Array(512 + body.length + 1024);
  out.set(h);
  out.set(body, 512);
  return out;
}

test("a sandbox session: bash writes, executePython reads, files, kv, history", { timeout: 180000 }, async () => {
  const sb = await c.sandbox();
  assert.ok(sb instanceof Sandbox);
  assert.match(sb.id, /^sbx-[0-9a-f]{16}$/);
  assert.equal(sb.created, true);
  assert.equal(sb.keep, false);

  await sb.bash("mkdir -p data && echo hello > data/greet.txt");
  const p = await sb.executePython("print(open('data/greet.txt').read().strip().upper())");
  assert.equal(p.stdout, "HELLO\n");
  assert.ok(sb.version >= 1);

  // Files: text and bytes exact, listing, stat, exists, delete.
  assert.equal(await sb.readFile("/data/greet.txt"), "hello\n");
  const bin = new Uint8Array([0xff, 0x00, 0x82, 0x0a]);
  assert.deepEqual(await sb.writeFile("data/b.bin", bin), { path: "/data/b.bin", size: 4 });
  assert.deepEqual(await sb.readFileBytes("/data/b.bin"), bin);
  await sb.writeFile("a b.txt", "spaced");
  assert.equal(await sb.readFile("a b.txt"), "spaced");
  assert.deepEqual((await sb.listFiles()).sort(), ["a b.txt", "data"]);
  assert.deepEqual((await sb.listFiles("data")).sort(), ["b.bin", "greet.txt"]);
  const all = await sb.entries("/", { recursive: true });
  assert.ok(all.some((e) => e.path === "/data/greet.txt" && e.type === "file"));
  const st = await sb.stat("data/b.bin");
  assert.equal(st.size, 4);
  assert.equal(st.type, "file");
  assert.equal(await sb.exists("data"), true);
  assert.equal(await sb.exists("nope"), false);
  assert.equal(await sb.deleteFile("a b.txt"), 1);
  await rejectsWith(sb.readFile("a b.txt"), "not_found", 404);
  await rejectsWith(sb.deleteFile("data"), "not_empty", 409);

  // A failing command: SandqError with check, the Result without.
  await rejectsWith(sb.bash("echo bad >&2; exit 3"), "command_failed", 0);
  const r = await sb.bash("exit 3", { check: false });
  assert.equal(r.status, "exit");
  assert.equal(r.exitCode, 3);

  // kv: JSON values round trip, keys by prefix, delete, default.
  await sb.kv.set("cfg", { n: 1, s: "x" });
  await sb.kv.set("count", 7);
  assert.deepEqual(await sb.kv.get("cfg"), { n: 1, s: "x" });
  assert.equal(await sb.kv.get("count"), 7);
  assert.deepEqual(await sb.kv.keys(), ["cfg", "count"]);
  assert.deepEqual(await sb.kv.keys("co"), ["count"]);
  await sb.kv.delete("count");
  await sb.kv.delete("count");
  assert.equal(await sb.kv.get("count", "none"), "none");

  // History: every committing call, oldest first.
  const h = await sb.history();
  assert.ok(h.every((e) => e instanceof HistoryEntry));
  const names = h.map((e) => e.name);
  for (const n of ["sh", "python", "fs.write", "fs.delete", "kv.set", "kv.delete"])
    assert.ok(names.includes(n), `${n} in ${names}`);
  assert.equal(h[0].name, "sandbox.create");
  assert.equal((await sb.history(2)).length, 2);
  const info = await sb.info();
  assert.equal(info.sandbox, sb.id);
  assert.equal(sb.version, info.version);
  assert.equal((await sb.versions())[0].version, info.version);

  await sb[Symbol.asyncDispose]();
  assert.equal(sb.deleted, true);
  await rejectsWith(c.sandbox(sb.id), "sandbox_not_found", 404);
});

test("fork isolation, export and import, a folder as a tar", { timeout: 180000 }, async () => {
  const sb = await c.sandbox(undefined, { labels: { team: "x" } });
  assert.deepEqual(sb.labels, { team: "x" });
  await sb.writeFile("shared.txt", "v1");

  const f = await sb.fork();
  assert.equal(f.created, true);
  await f.writeFile("only-fork.txt", "f");
  await sb.writeFile("shared.txt", "v2");
  assert.equal(await f.readFile("shared.txt"), "v1");
  assert.equal(await sb.exists("only-fork.txt"), false);
  await f[Symbol.asyncDispose]();
  await rejectsWith(c.sandbox(f.id), "sandbox_not_found", 404);

  // Export, then a new sandbox from it, then an import as its next version.
  const snap = await sb.exportSnapshot();
  assert.equal(new TextDecoder().decode(snap.subarray(0, 15)), "SQLite format 3");
  // The key the client computes is the server's: a stored snapshot is
  // created from by key (the same blob, no upload).
  const head = (await sb.info()).snapshot;
  assert.equal(await snapshotKey(snap), head);
  const copy = await c.sandbox(undefined, { snapshot: snap });
  assert.equal((await copy.info()).snapshot, head);
  assert.equal(await copy.readFile("shared.txt"), "v2");
  await copy.writeFile("shared.txt", "changed");
  const v = (await copy.info()).version;
  const info = await copy.importSnapshot(snap);
  assert.equal(info.version, v + 1);
  assert.equal(await copy.readFile("shared.txt"), "v2");

  // A folder down as a tar and up into another sandbox, one version.
  await sb.bash("mkdir -p tree/sub tree/empty && echo deep > tree/sub/f.txt && printf '#!/bin/sh\\necho ran\\n' > tree/run.sh && chmod +x tree/run.sh");
  const tar = await sb.downloadTar("tree");
  assert.ok(tar.length >= 1024 && tar.length % 512 === 0);
  const before = copy.version;
  const up = await copy.uploadTar(tar, "/in");
  assert.equal(up.files, 2);
  assert.equal(up.folders, 2);
  assert.equal(up.version, before + 1);
  assert.equal(copy.version, before + 1);
  const ran = await copy.bash("in/run.sh; cat in/sub/f.txt; test -d in/empty && echo empty");
  assert.equal(ran.stdout, "ran\ndeep\nempty\n");
  await rejectsWith(sb.downloadTar("nope"), "not_found", 404);
  const now = (await copy.info()).version;

  // Hostile: the entry is named, nothing is written.
  await rejectsWith(copy.uploadTar(ustar("../escape", new TextEncoder().encode("x"))), "bad_tar", 400);
  await assert.rejects(copy.uploadTar(ustar("/etc/x", new Uint8Array(1))), /tar entry '\/etc\/x': an absolute name/);
  assert.equal((await copy.info()).version, now);

  // Opened, not created: disposal keeps it (unless keep: false).
  const again = await c.sandbox(copy.id);
  assert.equal(again.created, false);
  assert.equal(again.keep, true);
  await again[Symbol.asyncDispose]();
  assert.equal((await copy.info()).sandbox, copy.id);
  await rejectsWith(c.sandbox(copy.id, { create: true }), "sandbox_exists", 409);
  await rejectsWith(c.sandbox("no-such-sandbox"), "sandbox_not_found", 404);
  const closing = await c.sandbox(copy.id, { keep: false });
  await closing[Symbol.asyncDispose]();
  await rejectsWith(copy.info(), "sandbox_not_found", 404);
  await sb.delete();
  await sb.delete();   // once
});

test("await using in TypeScript deletes the sandbox at the end of the block", { timeout: 180000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "sandq-using-"));
  try {
    const index = join(TS, "dist", "index.js");
    writeFileSync(join(dir, "using.ts"), `
import { Client } from ${JSON.stringify(index)};
declare const process: { argv: string[] };
const c = new Client({ url: process.argv[2], token: process.argv[3] });
let id = "";
{
  await using sb = await c.sandbox();
  id = sb.id;
  await sb.bash("echo in > f.txt");
  console.log(await sb.readFile("f.txt"));
}
try {
  await c.sandbox(id);
  console.log("still there");
} catch (e) {
  console.log((e as { code: string }).code);
}
`);
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
      compilerOptions: {
        target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true,
        lib: ["ES2022", "DOM", "ESNext.Disposable"], types: [], skipLibCheck: true, outDir: dir,
      },
      files: ["using.ts"],
    }));
    writeFileSync(join(dir, "package.json"), '{"type":"module"}');
    execFileSync(join(TS, "node_modules", ".bin", "tsc"), ["-p", dir], { stdio: "pipe" });
    const out = execFileSync(process.execPath, [join(dir, "using.js"), H.url, H.token], { encoding: "utf8" });
    assert.equal(out, "in\n\nsandbox_not_found\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
