/*
 * sandbox.ts - Sandbox: a tenant's persistent workspace, as one object,
 * over the gateway's REST routes (docs/gateway.md "Sandboxes, files and
 * kv").
 *
 * Design: the surface is the Python client's Sandbox (clients/python/
 * sandq/sandbox.py) in camelCase: bash, executePython and run are jobs on
 * the sandbox (submit, then the bounded long poll of Client.wait); files,
 * kv, history, info, export, import, fork, delete and the tar routes are
 * one REST request each, which the gateway turns into one op and answers
 * when the op is done (at most 60 s). A failed op throws SandqError with
 * the op's error.code (sandbox_not_found, not_found, exists, ...) and the
 * HTTP status the gateway gave it. Paths are the sandbox's own: "/" is its
 * root, which a job sees as /workspace; "a/b", "/a/b" and "/workspace/a/b"
 * are the same file. A Sandbox is disposable: `await using sb = await
 * client.sandbox()` deletes it when the block ends if this object created
 * it (unless keep: true), as the Python client's with block does.
 */
import type { Client, HttpAnswer, RunOptions } from "./client.js";
import { SandqError } from "./errors.js";
import { Result, toBase64 } from "./result.js";

/*
 * Symbol.asyncDispose for consumers compiling without TypeScript's lib
 * esnext.disposable (it exists at run time in Node 18.18+ and 20.4+); the
 * same declaration as @types/node's, which merges with the lib's.
 */
declare global {
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol;
  }
}

const text = new TextDecoder("utf-8");
const utf8 = new TextEncoder();

/** How a Sandbox is opened or made (Client.sandbox, Sandbox.create). */
export interface SandboxOptions {
  /** Create it even though an id is given (it must not exist yet). */
  create?: boolean;
  /** Dispose keeps it (default: keep one opened, delete one created). */
  keep?: boolean;
  /** Its first version: an exported snapshot (an AgentFS database). */
  snapshot?: Uint8Array;
  labels?: Record<string, string>;
  /** The image every run on it uses (docs/images.md). */
  image?: string;
  /** Where its files are in its runs (default /workspace). */
  workdir?: string;
  /** The folder of image that becomes its first version. */
  fromImageDir?: string;
  /** The path-rule preset of every run made through this object. */
  permPreset?: string;
}

/** The options of bash, executePython and run: the job's, the wait's, and check. */
export interface SandboxRunOptions extends Omit<RunOptions, "sandbox"> {
  /** Throw SandqError command_failed unless the run's status is ok (default true). */
  check?: boolean;
}

/** An entry of a folder (fs.list, fs.stat). */
export interface Entry {
  path: string;
  name: string;
  type: string;
  size: number;
  mode: number;
  mtime: number;
  target?: string;
}

/** One recorded call (a tool_calls row) of the sandbox's history. */
export class HistoryEntry {
  readonly id: number;
  /** The op: "sh", "python", "fs.write", ... */
  readonly name: string;
  /** The recorded JSON, decoded (the text itself if it is not JSON). */
  readonly parameters: unknown;
  readonly result: unknown;
  readonly error: string | null;
  /** "success" or "error". */
  readonly status: string;
  readonly startedAt: number;
  readonly completedAt: number;
  readonly durationMs: number;

  /** An entry from the row the gateway answered. */
  constructor(row: Record<string, unknown>) {
    this.id = typeof row["id"] === "number" ? row["id"] : 0;
    this.name = typeof row["name"] === "string" ? row["name"] : "";
    this.parameters = jsonOrText(row["parameters"]);
    this.result = jsonOrText(row["result"]);
    this.error = typeof row["error"] === "string" && row["error"] !== "" ? row["error"] : null;
    this.status = typeof row["status"] === "string" ? row["status"] : "";
    this.startedAt = typeof row["started_at"] === "number" ? row["started_at"] : 0;
    this.completedAt = typeof row["completed_at"] === "number" ? row["completed_at"] : 0;
    this.durationMs = typeof row["duration_ms"] === "number" ? row["duration_ms"] : 0;
  }
}

/** s decoded as JSON, or s itself; null when empty or absent. */
function jsonOrText(s: unknown): unknown {
  if (typeof s !== "string" || s === "") return null;
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

/** A path of the sandbox as the URL's rest: each component percent-encoded. */
function urlPath(path: string): string {
  if (typeof path !== "string") throw new SandqError("invalid_job", "path: must be a string");
  return path.split("/").filter((c) => c !== "").map(encodeURIComponent).join("/");
}

/** The answer's bytes as JSON (null for 204). */
function json(a: HttpAnswer): unknown {
  if (a.status === 204 || a.bytes.length === 0) return null;
  return JSON.parse(text.decode(a.bytes));
}

/** A fresh sandbox id, "sbx-" and 16 hex digits. */
function newId(): string {
  const b = crypto.getRandomValues(new Uint8Array(8));
  return "sbx-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** The sandbox's key-value store; values are JSON (set any, get it back decoded). */
export class KV {
  readonly #sb: Sandbox;

  /** The store of sb. */
  constructor(sb: Sandbox) {
    this.#sb = sb;
  }

  /** The value of key, or def if there is none. */
  async get<T = unknown>(key: string, def?: T): Promise<T | undefined> {
    try {
      return JSON.parse(text.decode((await this.#sb._http("GET", `/kv/${encodeURIComponent(key)}`)).bytes)) as T;
    } catch (e) {
      if (e instanceof SandqError && e.code === "not_found") return def;
      throw e;
    }
  }

  /** Sets key to value (any JSON-serialisable value): a new version. */
  async set(key: string, value: unknown): Promise<void> {
    const t = JSON.stringify(value);
    if (t === undefined) throw new SandqError("invalid_job", `kv.set '${key}': the value is not JSON-serialisable`);
    await this.#sb._http("PUT", `/kv/${encodeURIComponent(key)}`, t, "application/json");
  }

  /** Deletes key; a key that is not there is not an error. */
  async delete(key: string): Promise<void> {
    try {
      await this.#sb._http("DELETE", `/kv/${encodeURIComponent(key)}`);
    } catch (e) {
      if (!(e instanceof SandqError && e.code === "not_found")) throw e;
    }
  }

  /** The keys starting with prefix, in byte order. */
  async keys(prefix = ""): Promise<string[]> {
    const all = (json(await this.#sb._http("GET", "/kv")) ?? []) as string[];
    return all.filter((k) => k.startsWith(prefix));
  }
}

/** A persistent sandbox of the client's tenant. Made by Client.sandbox() or Sandbox.create(). */
/**
 * The key of a snapshot's bytes, as results give `snapshot` (docs/store.md
 * "Chunks and keys"): SHA-256 of "sandq-snapshot-1" NUL, the size (u64
 * LE), the chunk size (u32 LE) and the SHA-256 of each 64 KiB chunk.
 */
export async function snapshotKey(snapshot: Uint8Array): Promise<string> {
  const chunk = 64 * 1024;
  const n = Math.ceil(snapshot.length / chunk);
  const head = new Uint8Array(17 + 12);
  head.set(new TextEncoder().encode("sandq-snapshot-1"), 0);
  const dv = new DataView(head.buffer);
  dv.setBigUint64(17, BigInt(snapshot.length), true);
  dv.setUint32(25, chunk, true);
  const all = new Uint8Array(head.length + 32 * n);
  all.set(head, 0);
  for (let i = 0; i < n; i++) {
    // Views of the caller's bytes, not copies (a snapshot is not shared memory).
    const part = snapshot.subarray(i * chunk, Math.min(snapshot.length, (i + 1) * chunk)) as Uint8Array<ArrayBuffer>;
    all.set(new Uint8Array(await crypto.subtle.digest("SHA-256", part)), head.length + 32 * i);
  }
  const md = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return Array.from(md, (b) => b.toString(16).padStart(2, "0")).join("");
}

export class Sandbox {
  readonly client: Client;
  readonly id: string;
  /** Whether this object created it. */
  readonly created: boolean;
  /** Whether disposing of it leaves it in place. */
  keep: boolean;
  readonly permPreset: string | undefined;
  /**
   * Its version as last seen: after a run, info(), importSnapshot(),
   * uploadTar() or creation (the REST answers of files and kv ops do not
   * carry it; info() reads it).
   */
  version = 0;
  labels: Record<string, string> = {};
  image: string | null = null;
  workdir = "/workspace";
  deleted = false;
  readonly kv: KV;

  /** A handle on sandbox id (no request; use Sandbox.create or Client.sandbox). */
  constructor(client: Client, id: string, created: boolean, keep?: boolean, permPreset?: string) {
    this.client = client;
    this.id = id;
    this.created = created;
    this.keep = keep ?? !created;
    this.permPreset = permPreset;
    this.kv = new KV(this);
  }

  /**
   * Opens or creates a sandbox (see Client.sandbox): POST /v1/sandboxes
   * to create, GET /v1/sandboxes/ID to open.
   */
  static async create(client: Client, id?: string, opts: SandboxOptions = {}): Promise<Sandbox> {
    const want = id === undefined || opts.snapshot !== undefined || opts.labels !== undefined ||
      opts.image !== undefined || opts.workdir !== undefined || opts.fromImageDir !== undefined;
    if (opts.create === false && want)
      throw new SandqError("invalid_job", "sandbox: create: false needs an id and no snapshot, labels, image, workdir or fromImageDir");
    const sb = new Sandbox(client, id ?? newId(), want || opts.create === true, opts.keep, opts.permPreset);
    if (sb.created) {
      const body: Record<string, unknown> = { sandbox: sb.id };
      if (opts.labels !== undefined) body["labels"] = opts.labels;
      if (opts.image !== undefined) body["image"] = opts.image;
      if (opts.workdir !== undefined) body["workdir"] = opts.workdir;
      if (opts.fromImageDir !== undefined) body["from_image_dir"] = opts.fromImageDir;
      if (opts.snapshot !== undefined) {
        // By key first: a snapshot the tenant stores is not sent again.
        try {
          sb.#info(json(await client._http("POST", "/v1/sandboxes",
            { ...body, snapshot_key: await snapshotKey(opts.snapshot) })));
          return sb;
        } catch (e) {
          if (!(e instanceof SandqError) || e.code !== "snapshot_not_found") throw e;
        }
        body["snapshot_b64"] = toBase64(opts.snapshot);
      }
      sb.#info(json(await client._http("POST", "/v1/sandboxes", body)));
    } else {
      sb.#info(json(await client._http("GET", `/v1/sandboxes/${encodeURIComponent(sb.id)}`)));
    }
    return sb;
  }

  /** @internal A request to /v1/sandboxes/ID + rest. */
  _http(method: string, rest: string, body?: unknown, contentType?: string): Promise<HttpAnswer> {
    return this.client._http(method, `/v1/sandboxes/${encodeURIComponent(this.id)}${rest}`, body, contentType);
  }

  /** Keeps what an info map says; returns it. */
  #info(d: unknown): Record<string, unknown> {
    const o = (d !== null && typeof d === "object" ? d : {}) as Record<string, unknown>;
    if (typeof o["version"] === "number") this.version = o["version"];
    this.labels = (o["labels"] as Record<string, string>) ?? {};
    this.image = typeof o["image"] === "string" ? o["image"] : null;
    this.workdir = typeof o["workdir"] === "string" ? o["workdir"] : "/workspace";
    return o;
  }

  /*** Runs ***/

  async #run(job: Record<string, unknown>, opts: SandboxRunOptions): Promise<Result> {
    const { check = true, timeoutMs, ...rest } = opts;
    const o: Record<string, unknown> = { ...rest, sandbox: this.id };
    if (this.permPreset !== undefined && o["permPreset"] === undefined) o["permPreset"] = this.permPreset;
    const id = await this.client.submit({ ...o, ...job } as never);
    const r = await this.client.wait(id, timeoutMs === undefined ? {} : { timeoutMs });
    if (r.version) this.version = r.version;
    if (check && !r.ok)
      throw new SandqError(r.errorCode ?? "command_failed", r.errorMessage ??
        `sandbox '${this.id}': job '${r.id}' ended ${r.status}` +
        (r.status === "exit" ? ` (exit code ${r.exitCode})` : "") +
        (r.stderr ? `: ${r.stderr.slice(0, 500)}` : ""));
    return r;
  }

  /**
   * Runs command with bash in the sandbox and returns its Result. The
   * workspace, working directory and exported variables carry over to the
   * next bash call. With check (default true) a status other than ok
   * throws SandqError (command_failed, or the refusal's code).
   */
  bash(command: string, opts: SandboxRunOptions = {}): Promise<Result> {
    return this.#run({ op: "sh", script: command }, opts);
  }

  /** Runs code with python3 in the sandbox; as bash(). */
  executePython(code: string, opts: SandboxRunOptions = {}): Promise<Result> {
    return this.#run({ op: "python", code }, opts);
  }

  /** Runs argv in the sandbox; as bash(). */
  run(argv: string[], opts: SandboxRunOptions = {}): Promise<Result> {
    return this.#run({ op: "exec", argv }, opts);
  }

  /*** Files ***/

  /** The file's content as text (UTF-8). SandqError not_found (404) if there is none. */
  async readFile(path: string): Promise<string> {
    return text.decode(await this.readFileBytes(path));
  }

  /** The file's content as bytes. */
  async readFileBytes(path: string): Promise<Uint8Array> {
    return (await this._http("GET", `/files/${urlPath(path)}`)).bytes;
  }

  /**
   * Writes content (a string as UTF-8, or bytes) to path as a new
   * version; the parent folder must exist unless it is the root. Returns
   * {path, size}.
   */
  async writeFile(path: string, content: string | Uint8Array): Promise<{ path: string; size: number }> {
    const b = typeof content === "string" ? utf8.encode(content) : content;
    return json(await this._http("PUT", `/files/${urlPath(path)}`, b)) as { path: string; size: number };
  }

  /** The names in the folder path. */
  async listFiles(path = "/"): Promise<string[]> {
    return (await this.entries(path)).map((e) => e.name);
  }

  /** The entries of the folder path (with recursive, its whole subtree). */
  async entries(path = "/", opts: { recursive?: boolean } = {}): Promise<Entry[]> {
    const q = opts.recursive ? "?recursive=true" : "";
    const p = urlPath(path);
    return (json(await this._http("GET", `${p ? "/list/" + p : "/files"}${q}`)) ?? []) as Entry[];
  }

  /** The entry of path. */
  async stat(path: string): Promise<Entry> {
    return json(await this._http("GET", `/stat/${urlPath(path)}`)) as Entry;
  }

  /** Whether path exists. */
  async exists(path: string): Promise<boolean> {
    if (urlPath(path) === "" || ["workspace", "."].includes(path.replace(/^\/+|\/+$/g, ""))) return true;
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof SandqError && e.code === "not_found") return false;
      throw e;
    }
  }

  /** Deletes path (a folder only if empty, unless recursive); the number of entries removed. */
  async deleteFile(path: string, opts: { recursive?: boolean } = {}): Promise<number> {
    const q = opts.recursive ? "?recursive=true" : "";
    const d = json(await this._http("DELETE", `/files/${urlPath(path)}${q}`)) as { removed?: number };
    return d?.removed ?? 0;
  }

  /**
   * Writes the files and folders of a tar (bytes) under the folder path,
   * as ONE new version (PUT /v1/sandboxes/ID/tar/PATH). Regular files and
   * folders only: a link, a device, an absolute name or `..` is refused
   * (SandqError bad_tar, 400, naming the entry) and nothing is written.
   */
  async uploadTar(tar: Uint8Array, path = "/"): Promise<{ files: number; folders: number; version: number }> {
    const p = urlPath(path);
    const d = json(await this._http("PUT", `/tar${p ? "/" + p : ""}`, tar, "application/x-tar")) as
      { files: number; folders: number; version: number };
    if (typeof d?.version === "number") this.version = d.version;
    return d;
  }

  /** The folder path as a tar (bytes); SandqError not_found if it is not there. */
  async downloadTar(path = "/"): Promise<Uint8Array> {
    const p = urlPath(path);
    return (await this._http("GET", `/tar${p ? "/" + p : ""}`)).bytes;
  }

  /*** History, snapshots, forks ***/

  /** The recorded calls, oldest first (the last limit of them). */
  async history(limit?: number): Promise<HistoryEntry[]> {
    const d = json(await this._http("GET", "/history")) as { calls?: Record<string, unknown>[] };
    const calls = (d?.calls ?? []).map((c) => new HistoryEntry(c));
    return limit ? calls.slice(-limit) : calls;
  }

  /** The versions, newest first: {version, snapshot, created_at}. */
  async versions(): Promise<Record<string, unknown>[]> {
    const d = json(await this._http("GET", "/history")) as { versions?: Record<string, unknown>[] };
    return d?.versions ?? [];
  }

  /** The info map: {sandbox, version, snapshot, size, created_at, updated_at, labels, ...}. */
  async info(): Promise<Record<string, unknown>> {
    return this.#info(json(await this._http("GET", "")));
  }

  /** The head as an AgentFS SQLite database (bytes). */
  async exportSnapshot(): Promise<Uint8Array> {
    return (await this._http("GET", "/export")).bytes;
  }

  /** Commits an AgentFS database (bytes) as the next version; the info map. */
  async importSnapshot(snapshot: Uint8Array): Promise<Record<string, unknown>> {
    return this.#info(json(await this._http("PUT", "/import", snapshot)));
  }

  /**
   * A new sandbox sharing this one's head (no copy). Like any sandbox
   * created here, disposing of it deletes it unless keep is true.
   */
  async fork(newId_?: string, opts: { keep?: boolean; labels?: Record<string, string> } = {}): Promise<Sandbox> {
    const to = newId_ ?? newId();
    const fork = new Sandbox(this.client, to, true, opts.keep, this.permPreset);
    const body: Record<string, unknown> = { to };
    if (opts.labels !== undefined) body["labels"] = opts.labels;
    fork.#info(json(await this._http("POST", "/fork", body)));
    return fork;
  }

  /** Deletes the sandbox and every version of it (once). */
  async delete(): Promise<void> {
    if (this.deleted) return;
    await this._http("DELETE", "");
    this.deleted = true;
  }

  /** delete() under the Python client's other name. */
  destroy(): Promise<void> {
    return this.delete();
  }

  /** `await using`: deletes the sandbox unless keep (or already deleted). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.keep || this.deleted) return;
    await this.delete();
  }
}
