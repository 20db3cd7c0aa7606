/*
 * result.ts - Result: a job's result as the gateway returns it.
 *
 * Design: the gateway's result object (docs/gateway.md, "The result"; the
 * object `sandq result --json` prints) uses the protocol's snake_case keys;
 * Result gives them camelCase names and keeps the object itself as .raw.
 * Output comes as "stdout" when it is valid UTF-8 and as "stdout_b64"
 * otherwise; Result decodes either into bytes (stdoutBytes) and a string
 * (stdout, invalid UTF-8 replaced by U+FFFD), so a caller never looks at
 * which form travelled.
 */

/** The result object as the gateway sends it (snake_case, docs/gateway.md). */
export type RawResult = Record<string, unknown>;

const utf8 = new TextEncoder();
const text = new TextDecoder("utf-8");

/** The bytes of a base64 string (atob: Node 18+ and browsers). */
export function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The base64 string of bytes (btoa, in slices to bound the argument list). */
export function toBase64(b: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < b.length; i += 0x8000)
    bin += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** raw[key] as a number, def when absent or of another type. */
function num(raw: RawResult, key: string, def: number): number {
  const v = raw[key];
  return typeof v === "number" ? v : def;
}

/** raw[key] as a string, null when absent or of another type. */
function str(raw: RawResult, key: string): string | null {
  const v = raw[key];
  return typeof v === "string" ? v : null;
}

/** The bytes of an output stream: KEY as UTF-8, or KEY_b64 decoded. */
function output(raw: RawResult, key: string): Uint8Array {
  const s = raw[key];
  if (typeof s === "string") return utf8.encode(s);
  const b = raw[key + "_b64"];
  if (typeof b === "string") return fromBase64(b);
  return new Uint8Array(0);
}

/**
 * The result of one job. status is ok (exit code 0), exit (another exit
 * code), signal, timeout, a limit (cpu_limit, memory_limit, ...), rejected,
 * expired, cancelled or internal (docs/protocol.md, Results).
 */
/** One row of a result's egress list (docs/protocol.md). */
export interface EgressRow {
  host: string;
  port: number;
  allowed: boolean;
  /** Refused: why; reached: how a connection failed; else null. */
  reason: string | null;
  conns: number;
  up: number;
  down: number;
  /** Time the tenant's egress_rate_bytes held the connections (0: none). */
  throttledMs: number;
}

export class Result {
  /** The gateway's object as it came. */
  readonly raw: RawResult;
  readonly id: string;
  readonly status: string;
  readonly exitCode: number;
  readonly signal: number;
  /** stdout decoded as UTF-8 (invalid bytes replaced by U+FFFD). */
  readonly stdout: string;
  readonly stderr: string;
  /** stdout exactly as the job wrote it. */
  readonly stdoutBytes: Uint8Array;
  readonly stderrBytes: Uint8Array;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly wallMs: number;
  readonly cpuMs: number;
  readonly maxRssKb: number;
  readonly queuedAt: number;
  readonly startedAt: number;
  readonly finishedAt: number;
  readonly host: string | null;
  readonly worker: number;
  readonly attempt: number;
  /** Why sandq did not run the job, or how it failed (null when it ran). */
  readonly errorCode: string | null;
  readonly errorMessage: string | null;
  /** System calls the job's filter refused, by name: how many times. */
  readonly refused: Record<string, number>;
  /** The image it ran on (null on the host), its digest, the tenant's name. */
  readonly image: string | null;
  readonly imageDigest: string | null;
  readonly imageName: string | null;
  /** The sandbox it ran in and the version it left (null, 0 without one). */
  readonly sandbox: string | null;
  readonly version: number;
  /**
   * net "allow" runs: the hosts reached or refused through the egress
   * proxy, one row per host, port and outcome (docs/protocol.md); [] else.
   */
  readonly egress: EgressRow[];

  /** A Result from the gateway's result object. */
  constructor(raw: RawResult) {
    this.raw = raw;
    this.id = str(raw, "id") ?? "";
    this.status = str(raw, "status") ?? "";
    this.exitCode = num(raw, "exit_code", -1);
    this.signal = num(raw, "signal", 0);
    this.stdoutBytes = output(raw, "stdout");
    this.stderrBytes = output(raw, "stderr");
    this.stdout = text.decode(this.stdoutBytes);
    this.stderr = text.decode(this.stderrBytes);
    this.stdoutTruncated = raw["stdout_truncated"] === true;
    this.stderrTruncated = raw["stderr_truncated"] === true;
    this.wallMs = num(raw, "wall_ms", 0);
    this.cpuMs = num(raw, "cpu_ms", 0);
    this.maxRssKb = num(raw, "max_rss_kb", 0);
    this.queuedAt = num(raw, "queued_at", 0);
    this.startedAt = num(raw, "started_at", 0);
    this.finishedAt = num(raw, "finished_at", 0);
    this.host = str(raw, "host");
    this.worker = num(raw, "worker", -1);
    this.attempt = num(raw, "attempt", 1);
    const err = raw["error"];
    if (err !== null && typeof err === "object") {
      const e = err as Record<string, unknown>;
      this.errorCode = typeof e["code"] === "string" ? e["code"] : "";
      this.errorMessage = typeof e["message"] === "string" ? e["message"] : "";
    } else {
      this.errorCode = null;
      this.errorMessage = null;
    }
    const ref = raw["refused"];
    this.refused = ref !== null && typeof ref === "object" ? { ...(ref as Record<string, number>) } : {};
    this.image = str(raw, "image");
    this.imageDigest = str(raw, "image_digest");
    this.imageName = str(raw, "image_name");
    this.sandbox = str(raw, "sandbox");
    this.version = num(raw, "version", 0);
    const eg = raw["egress"];
    this.egress = Array.isArray(eg)
      ? eg.filter((g) => g !== null && typeof g === "object").map((g) => {
          const r = g as Record<string, unknown>;
          return {
            host: typeof r["host"] === "string" ? r["host"] : "",
            port: typeof r["port"] === "number" ? r["port"] : 0,
            allowed: r["allowed"] === true,
            reason: typeof r["reason"] === "string" ? r["reason"] : null,
            conns: typeof r["conns"] === "number" ? r["conns"] : 0,
            up: typeof r["up"] === "number" ? r["up"] : 0,
            down: typeof r["down"] === "number" ? r["down"] : 0,
            throttledMs: typeof r["throttled_ms"] === "number" ? r["throttled_ms"] : 0,
          };
        })
      : [];
  }

  /** True when the job exited 0. */
  get ok(): boolean {
    return this.status === "ok";
  }

  /**
   * What the sandq CLI would exit with: 0 for ok, the code for exit,
   * 128+N for a signal, 124 for a timeout or a *_limit, 125 when sandq did
   * not run the job.
   */
  get exitStatus(): number {
    switch (this.status) {
      case "ok":
        return 0;
      case "exit":
        return this.exitCode >= 0 && this.exitCode <= 255 ? this.exitCode : 125;
      case "signal":
        return this.signal > 0 && this.signal < 128 ? 128 + this.signal : 125;
      case "timeout":
      case "cpu_limit":
      case "memory_limit":
      case "pids_limit":
      case "output_limit":
      case "disk_limit":
        return 124;
      default:
        return 125;
    }
  }
}
