// pack.test.mjs - `npm pack` makes a tarball that installs and imports:
// packed into a mkdtemp folder, installed into another (no dependency,
// so no registry is asked), imported by name, and type-checked by name
// from a TypeScript file (strict, ES2022 library only: the types need
// neither the DOM's nor Node's); the tarball holds dist/*.js, dist/*.d.ts,
// package.json and README.md and nothing of src/ or test/.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const PKG = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const npmOpts = ["--no-audit", "--no-fund", "--loglevel=error"];

test("npm pack makes an installable, importable package", () => {
  const dir = mkdtempSync(join(tmpdir(), "sandq-tspack-"));
  try {
    const out = execFileSync("npm", ["pack", "--json", "--pack-destination", dir, ...npmOpts],
      { cwd: PKG, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    const [info] = JSON.parse(out);
    const files = info.files.map((f) => f.path).sort();
    assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"), files.join(" "));
    assert.ok(files.includes("package.json") && files.includes("README.md"), files.join(" "));
    assert.ok(!files.some((f) => f.startsWith("src/") || f.startsWith("test/")), files.join(" "));

    const app = join(dir, "app");
    execFileSync("mkdir", [app]);
    writeFileSync(join(app, "package.json"), '{"name":"app","private":true,"type":"module"}\n');
    execFileSync("npm", ["install", "--offline", "--ignore-scripts", ...npmOpts, join(dir, info.filename)],
      { cwd: app, encoding: "utf8" });
    assert.ok(existsSync(join(app, "node_modules", "sandq", "dist", "client.d.ts")));
    const got = execFileSync("node", ["--input-type=module", "-e",
      "import { Client, Result, SandqError } from 'sandq';" +
      "const c = new Client({ url: 'http://127.0.0.1:1/' });" +
      "const r = new Result({ status: 'ok', exit_code: 0, stdout: 'x' });" +
      "const e = new SandqError('unauthorized', 'm', 401);" +
      "console.log(c.url, r.ok, r.stdout, e instanceof Error, e.code, e.status);"],
    { cwd: app, encoding: "utf8" });
    assert.equal(got.trim(), "http://127.0.0.1:1 true x true unauthorized 401");

    writeFileSync(join(app, "main.ts"), [
      'import { Client, Result, SandqError, type RunOptions } from "sandq";',
      'const c = new Client({ url: "http://127.0.0.1:1", token: "sqt_x", timeoutMs: 1000 });',
      'const o: RunOptions = { env: { A: "1" }, limits: { wallMs: 5 }, stdin: new Uint8Array(1) };',
      'export async function f(): Promise<[number, string, boolean]> {',
      '  const r: Result = await c.sh("echo", o);',
      '  const id: string = await c.submit({ op: "exec", argv: ["true"], deadlineMs: 5 });',
      '  // @ts-expect-error: an unknown option is a type error too',
      '  await c.sh("echo", { bogus: 1 });',
      '  const e = new SandqError("x", "y", 1);',
      '  const id2: string = await c.submit({ op: "sh", script: "x" }, { stream: true });',
      '  const s = c.stream(id2, { from: "1-0" });',
      '  let n = 0;',
      '  for await (const ev of s) if (ev.type !== "progress") n += ev.fd + ev.text.length + ev.data.length;',
      '  const st: string | undefined = s.status;',
      '  const cs: "requested" | "cancelled" = await c.cancel(id2);',
      '  await c.runStreaming({ op: "sh", script: "x" }, { onEvent: (ev) => { n += ev.id.length; } });',
      '  if (n < 0) throw new SandqError(cs, st ?? "", 0);',
      '  return [r.exitCode, r.stdout + id + e.code, r.ok];',
      '}',
      ''].join("\n"));
    execFileSync(join(PKG, "node_modules", ".bin", "tsc"), ["--noEmit", "--strict", "--target", "es2022",
      "--module", "nodenext", "--moduleResolution", "nodenext", "--lib", "es2022",
      "main.ts"], { cwd: app, encoding: "utf8" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
