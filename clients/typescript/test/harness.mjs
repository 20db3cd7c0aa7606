// harness.mjs - a private redis-server, sandqd and sandq-gateway for the
// TypeScript client's tests (the JS twin of tests/harness.c and
// clients/python/tests/harness.py).
//
// start() makes a mkdtemp folder; starts redis-server on a free loopback
// port in it (ready when `redis-cli info server` names its own pid; another
// port if one was taken first); records the tenant "default" and a token
// of it with build/sandq (`tenant add`, `tenant token add`); starts
// build/sandqd (2 workers) and build/sandq-gateway on a free port (ready
// when /healthz answers); and is ready when a job has gone all the way
// through the gateway. stop() ends the three by their pids (SIGTERM, then
// SIGKILL), prints any sanitizer report from their logs and removes the
// folder. Should the test process end without stop() (an exception, the
// runner's SIGTERM at a timeout), its exit handler SIGKILLs whatever it
// started, by pid, so no daemon outlives the run. The build folder is
// $SANDQ_BUILD (make sets it), else build/.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, openSync, closeSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const BUILD = resolve(REPO, process.env.SANDQ_BUILD ?? "build");

/** A loopback port free now (the caller binds it at once). */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every daemon a Harness started and has not stopped yet, and its folders.
const live = new Set();
const dirs = new Set();
process.on("exit", () => {
  for (const p of live) p.kill("SIGKILL");
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM"])
  process.once(sig, () => process.exit(128 + (sig === "SIGINT" ? 2 : 15)));

/** Polls pred() until it is truthy; throws naming what after timeoutMs. */
async function waitFor(pred, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  for (let delay = 5; ; delay = Math.min(delay * 2, 100)) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(delay);
  }
}

export class Harness {
  dir = null;
  procs = {};        // name -> ChildProcess
  redisPort = 0;
  url = null;        // the gateway's base URL
  redisUrl = null;
  token = null;      // a token of tenant default

  /** Starts argv with stdout and stderr to LOG in its own process group. */
  #spawn(name, argv) {
    const fd = openSync(join(this.dir, `${name}.log`), "a");
    const p = spawn(argv[0], argv.slice(1), { stdio: ["ignore", fd, fd], detached: true });
    closeSync(fd);
    p.exited = false;
    live.add(p);
    p.once("exit", () => {
      p.exited = true;
      live.delete(p);
    });
    this.procs[name] = p;
    return p;
  }

  /** The last lines of a daemon's log. */
  tail(name, n = 20) {
    try {
      return readFileSync(join(this.dir, `${name}.log`), "utf8").split("\n").slice(-n).join("\n");
    } catch {
      return "";
    }
  }

  async #startRedis() {
    for (let i = 0; i < 10; i++) {
      const port = await freePort();
      const p = this.#spawn("redis", ["/usr/bin/redis-server", "--port", String(port), "--bind", "127.0.0.1",
        "--save", "", "--appendonly", "no", "--dir", this.dir]);
      const state = await waitFor(() => {
        if (p.exited) return "exited";
        try {
          const info = execFileSync("redis-cli", ["-p", String(port), "info", "server"],
            { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
          return info.includes(`\nprocess_id:${p.pid}\r`) ? "ok" : null;
        } catch {
          return null;
        }
      }, 10000, `redis-server on port ${port}`);
      if (state === "ok") {
        this.redisPort = port;
        this.redisUrl = `redis://127.0.0.1:${port}`;
        return;
      }
      delete this.procs.redis;   // lost the port race: another port
    }
    throw new Error(`could not start redis-server (see ${join(this.dir, "redis.log")})`);
  }

  /** build/sandq with args against our Redis; its stdout. */
  sandq(...args) {
    return execFileSync(join(BUILD, "sandq"), ["--redis", this.redisUrl, ...args],
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  }

  async #startGateway() {
    for (let i = 0; i < 10; i++) {
      const port = await freePort();
      const p = this.#spawn("gateway", [join(BUILD, "sandq-gateway"), "--listen", `127.0.0.1:${port}`,
        "--redis", this.redisUrl]);
      const url = `http://127.0.0.1:${port}`;
      const state = await waitFor(async () => {
        if (p.exited) return "exited";
        try {
          const r = await fetch(`${url}/healthz`);
          await r.text();
          return r.status === 200 ? "ok" : null;
        } catch {
          return null;
        }
      }, 10000, `sandq-gateway on port ${port}`);
      if (state === "ok") {
        this.url = url;
        return;
      }
      delete this.procs.gateway;
    }
    throw new Error(`could not start sandq-gateway:\n${this.tail("gateway")}`);
  }

  /** Ready when a job went all the way through the gateway (60 s). */
  async #firstJob() {
    const headers = { authorization: `Bearer ${this.token}` };
    const r = await fetch(`${this.url}/v1/jobs`, { method: "POST", headers, body: '{"op":"exec","argv":["true"]}' });
    const { id } = await r.json();
    if (!id) throw new Error(`first job refused: HTTP ${r.status}`);
    const end = Date.now() + 60000;
    for (;;) {
      if (this.procs.sandqd.exited)
        throw new Error(`sandqd exited:\n${this.tail("sandqd")}`);
      const g = await fetch(`${this.url}/v1/jobs/${id}?wait=1`, { headers });
      const res = await g.json();
      if (g.status === 200) {
        if (res.status !== "ok") throw new Error(`first job: ${res.status}\n${this.tail("sandqd")}`);
        return;
      }
      if (Date.now() > end) throw new Error(`sandqd never answered:\n${this.tail("sandqd")}`);
    }
  }

  async start() {
    this.dir = mkdtempSync(join(tmpdir(), "sandq-tstest-"));
    dirs.add(this.dir);
    try {
      await this.#startRedis();
      this.sandq("tenant", "add", "default");
      this.token = this.sandq("tenant", "token", "add", "default", "--name", "tstest").trim().split("\n").pop();
      this.#spawn("sandqd", [join(BUILD, "sandqd"), "--redis", this.redisUrl, "--state",
        join(this.dir, "state"), "--workers", "2"]);
      await this.#startGateway();
      await this.#firstJob();
    } catch (e) {
      await this.stop();
      throw e;
    }
    return this;
  }

  /** Ends p by its pid: SIGTERM, SIGKILL after timeoutMs. */
  static async #end(p, timeoutMs) {
    if (!p || p.exited) return;
    p.kill("SIGTERM");
    const end = Date.now() + timeoutMs;
    while (!p.exited && Date.now() < end) await sleep(20);
    if (!p.exited) {
      p.kill("SIGKILL");
      while (!p.exited) await sleep(20);
    }
  }

  /** Copies sanitizer reports from the daemons' logs to stderr (tests/run.sh fails on one). */
  #scanLogs() {
    for (const name of readdirSync(this.dir).filter((n) => n.endsWith(".log")).sort()) {
      let inReport = false;
      for (const line of readFileSync(join(this.dir, name), "utf8").split("\n")) {
        if (/ERROR: (Address|Leak)Sanitizer|runtime error: /.test(line)) {
          if (!inReport) process.stderr.write(`harness: a sanitizer report in ${name}:\n`);
          inReport = true;
        }
        if (inReport) process.stderr.write(line + "\n");
      }
    }
  }

  async stop() {
    await Harness.#end(this.procs.gateway, 10000);
    await Harness.#end(this.procs.sandqd, 30000);
    await Harness.#end(this.procs.redis, 10000);
    this.procs = {};
    if (this.dir) {
      this.#scanLogs();
      rmSync(this.dir, { recursive: true, force: true });
      dirs.delete(this.dir);
      this.dir = null;
    }
  }
}
