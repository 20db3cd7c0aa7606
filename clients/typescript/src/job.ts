/*
 * job.ts - the options of a job and their JSON body for POST /v1/jobs.
 *
 * Design: options have camelCase names that map one to one onto
 * docs/protocol.md's job fields (deadlineMs -> deadline_ms, limits.wallMs
 * -> limits.wall_ms, ...). The client checks names and types only: a name
 * it does not know is refused here as unknown_field, before any request,
 * so a typo never runs a job without its limit. Values (ranges, id shapes,
 * image references) are the gateway's to check: it answers invalid_job
 * naming the field, and a SandqError carries that answer unchanged.
 * stdin given as a string travels as "stdin" (its UTF-8 bytes), as bytes
 * as "stdin_b64".
 */
import { SandqError } from "./errors.js";
import { toBase64 } from "./result.js";

/** Resource limits; each maps to docs/protocol.md's limits.* field. */
export interface Limits {
  wallMs?: number;
  cpuMs?: number;
  memoryBytes?: number;
  pids?: number;
  outputBytes?: number;
  diskBytes?: number;
  files?: number;
}

/** The options of a job (docs/protocol.md's fields, camelCase). */
export interface JobOptions {
  /** The job's id (default: the gateway makes "gw-" and 24 hex digits). */
  id?: string;
  env?: Record<string, string>;
  cwd?: string;
  /** A string travels as its UTF-8 bytes; a Uint8Array as any bytes. */
  stdin?: string | Uint8Array;
  limits?: Limits;
  preset?: "strict" | "normal" | "permissive";
  labels?: Record<string, string>;
  net?: "none" | "unix" | "allow";
  /**
   * net "allow": the hosts the job may reach ("pypi.example.org:443",
   * "*.github.com"), each within the tenant's net_allow; on a sandbox
   * created with a list, absent takes the sandbox's.
   */
  allow?: string[];
  /** An OCI image reference or a tenant's image name (docs/images.md). */
  image?: string;
  priority?: number;
  deadlineMs?: number;
  /** Run in this sandbox (its workspace persists unless persist is false). */
  sandbox?: string;
  persist?: boolean;
  permPreset?: string;
}

/** A job: what to run and its options. */
export type Job =
  | ({ op: "exec"; argv: string[] } & JobOptions)
  | ({ op: "sh"; script: string } & JobOptions)
  | ({ op: "python"; code: string } & JobOptions);

/** The wire body of a job, as POST /v1/jobs takes it. */
export type JobBody = Record<string, unknown>;

const FIELDS: Record<string, string> = {
  id: "id",
  env: "env",
  cwd: "cwd",
  stdin: "stdin",
  limits: "limits",
  preset: "preset",
  labels: "labels",
  net: "net",
  allow: "allow",
  image: "image",
  priority: "priority",
  deadlineMs: "deadline_ms",
  sandbox: "sandbox",
  persist: "persist",
  permPreset: "perm_preset",
};

const LIMITS: Record<string, string> = {
  wallMs: "wall_ms",
  cpuMs: "cpu_ms",
  memoryBytes: "memory_bytes",
  pids: "pids",
  outputBytes: "output_bytes",
  diskBytes: "disk_bytes",
  files: "files",
};

/** An invalid_job error naming the option and what it must be. */
function badType(name: string, want: string): SandqError {
  return new SandqError("invalid_job", `option '${name}': must be ${want}`);
}

/** Whether v is a plain object (not null, not an array). */
function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array);
}

/** An object of strings, checked. */
function strings(name: string, v: unknown): Record<string, string> {
  if (!isObject(v)) throw badType(name, "an object of strings");
  for (const [k, s] of Object.entries(v))
    if (typeof s !== "string") throw badType(`${name}.${k}`, "a string");
  return { ...(v as Record<string, string>) };
}

/** The limits object with the protocol's names. */
function limits(v: unknown): Record<string, number> {
  if (!isObject(v)) throw badType("limits", "an object");
  const out: Record<string, number> = {};
  for (const [k, n] of Object.entries(v)) {
    const wire = LIMITS[k];
    if (wire === undefined)
      throw new SandqError("unknown_field", `option 'limits.${k}': unknown (one of ${Object.keys(LIMITS).join(", ")})`);
    if (n === undefined) continue;
    if (typeof n !== "number" || !Number.isInteger(n) || n < 0)
      throw badType(`limits.${k}`, "an integer >= 0");
    out[wire] = n;
  }
  return out;
}

/** Copies the options of opts (skipping skip's keys) into body, checked. */
export function putOptions(body: JobBody, opts: Record<string, unknown>, skip: readonly string[]): void {
  for (const [k, v] of Object.entries(opts)) {
    if (skip.includes(k)) continue;
    const wire = FIELDS[k];
    if (wire === undefined)
      throw new SandqError("unknown_field", `option '${k}': unknown (one of ${Object.keys(FIELDS).join(", ")})`);
    if (v === undefined) continue;
    switch (k) {
      case "env":
      case "labels":
        body[wire] = strings(k, v);
        break;
      case "limits":
        body[wire] = limits(v);
        break;
      case "stdin":
        if (typeof v === "string") body["stdin"] = v;
        else if (v instanceof Uint8Array) body["stdin_b64"] = toBase64(v);
        else throw badType(k, "a string or a Uint8Array");
        break;
      case "priority":
      case "deadlineMs":
        if (typeof v !== "number" || !Number.isInteger(v)) throw badType(k, "an integer");
        body[wire] = v;
        break;
      case "persist":
        if (typeof v !== "boolean") throw badType(k, "true or false");
        body[wire] = v;
        break;
      case "allow":
        if (!Array.isArray(v) || v.some((p) => typeof p !== "string"))
          throw badType(k, "an array of host patterns");
        body[wire] = [...v];
        break;
      default:
        if (typeof v !== "string") throw badType(k, "a string");
        body[wire] = v;
    }
  }
}

/** The JSON body of job for POST /v1/jobs. */
export function jobBody(job: Job): JobBody {
  if (!isObject(job)) throw badType("job", "an object with op");
  const j = job as Record<string, unknown>;
  const body: JobBody = { v: 1, op: j["op"] };
  let what: string;
  switch (j["op"]) {
    case "exec": {
      const argv = j["argv"];
      if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== "string"))
        throw badType("argv", "a non-empty array of strings");
      body["argv"] = [...argv];
      what = "argv";
      break;
    }
    case "sh":
      if (typeof j["script"] !== "string") throw badType("script", "a string");
      body["script"] = j["script"];
      what = "script";
      break;
    case "python":
      if (typeof j["code"] !== "string") throw badType("code", "a string");
      body["code"] = j["code"];
      what = "code";
      break;
    default:
      throw badType("op", "exec, sh or python");
  }
  putOptions(body, j, ["op", what]);
  return body;
}
