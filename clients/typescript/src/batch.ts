/*
 * batch.ts - Batch: a file of cases run through the gateway's
 * /v1/batches (docs/gateway.md, "Batches").
 *
 * Design: Client.batch() sends the cases as JSON lines (the format of
 * `sandq batch run`: each a job as docs/protocol.md writes it, plus
 * "expect" and "expect_mode") in one POST; the gateway submits them all
 * and keeps nothing, so a Batch is only its id and the submission's
 * answer. status() is GET /v1/batches/ID (the progress, counted from the
 * results in Redis, each case judged by the CLI's own code); results()
 * pages through GET /v1/batches/ID/results; wait() polls status() until
 * every case is answered. Any Client of the same tenant can follow a
 * batch by id: client.batchOf(id).
 */
import { SandqError } from "./errors.js";
import { RawResult, Result } from "./result.js";

/** A case: a job as the protocol writes it (op, script, ...), and what it expects. */
export interface BatchCase {
  /** The case's standard output, compared as expect_mode says. */
  expect?: string;
  /** exact (default), trim (trailing blanks and empty lines ignored) or regex (^(EXPECT)$). */
  expect_mode?: "exact" | "trim" | "regex";
  [field: string]: unknown;
}

/** The options of Client.batch(). */
export interface BatchOptions {
  /** The batch id (1 to 64 of [A-Za-z0-9._-]); absent: derived from the cases. */
  id?: string;
}

/** The options of Batch.wait(). */
export interface BatchWaitOptions {
  /** How long to wait (ms; 600000). */
  timeoutMs?: number;
  /** How often to ask (ms; 500). */
  intervalMs?: number;
}

/** The options of Batch.results(). */
export interface BatchResultsOptions {
  /** The first line (1 by default). */
  from?: number;
  /** Cases per request (1 to 100; 100). */
  pageSize?: number;
}

/** A malformed line: its number in the file and why. */
export interface MalformedLine {
  line: number;
  error: string;
}

/** GET /v1/batches/ID. */
export interface BatchProgress {
  id: string;
  /** submitted, cancelled, or finished once every case is answered. */
  state: string;
  /** Lines that are not blank. */
  total: number;
  /** Answered cases and malformed lines. */
  done: number;
  passed: number;
  failed: number;
  no_expect: number;
  /** No expect, and a status other than ok. */
  not_ok: number;
  malformed: number;
  /** Submitted, not answered. */
  pending: number;
  by_status: Record<string, number>;
  malformed_lines: MalformedLine[];
  created_at: number;
}

/** One answered case. */
export interface BatchCaseResult {
  /** Its line in the file. */
  case: number;
  result: Result;
  /** Whether its output was what it expected; absent without expect. */
  pass?: boolean;
}

/** One request to the gateway: the answer's JSON object (errors thrown as SandqError). */
export type BatchRequest = (method: string, path: string, body?: string) =>
  Promise<Record<string, unknown>>;

/** The cases as the body POST /v1/batches takes: one JSON object per line. */
export function batchBody(cases: BatchCase[] | string): string {
  if (typeof cases === "string") return cases;
  if (!Array.isArray(cases))
    throw new SandqError("invalid_job", "batch: the cases must be an array of jobs or JSON lines");
  return cases.map((c, i) => {
    if (c === null || typeof c !== "object" || Array.isArray(c))
      throw new SandqError("invalid_job", `batch: case ${i + 1} is not an object`);
    return JSON.stringify(c);
  }).join("\n") + "\n";
}

/** A batch submitted through the gateway. */
export class Batch {
  readonly id: string;
  /** The submission's lines that are not blank (0 for batchOf()). */
  readonly total: number;
  /** The cases this submission added (a resubmission adds only the new ones). */
  readonly submitted: number;
  /** The submission's malformed lines (the first 100). */
  readonly malformed: MalformedLine[];
  readonly #req: BatchRequest;
  readonly #path: string;

  /** A handle of batch id; answer is the submission's (or {} for an existing batch). */
  constructor(req: BatchRequest, id: string, answer: Record<string, unknown> = {}) {
    this.#req = req;
    this.id = id;
    this.#path = `/v1/batches/${encodeURIComponent(id)}`;
    this.total = typeof answer["total"] === "number" ? answer["total"] : 0;
    this.submitted = typeof answer["submitted"] === "number" ? answer["submitted"] : 0;
    this.malformed = Array.isArray(answer["malformed"]) ? (answer["malformed"] as MalformedLine[]) : [];
  }

  /** The progress now. */
  async status(): Promise<BatchProgress> {
    const o = await this.#req("GET", this.#path);
    if (typeof o["done"] !== "number" || typeof o["total"] !== "number")
      throw new SandqError("bad_response", `batch '${this.id}': the progress has no counts`, 200);
    return o as unknown as BatchProgress;
  }

  /**
   * The answered cases in line order, a page at a time. A case not yet
   * answered is skipped: after wait(), every case is there.
   */
  async *results(opts: BatchResultsOptions = {}): AsyncGenerator<BatchCaseResult> {
    let from: number | null = opts.from ?? 1;
    const size = opts.pageSize ?? 100;
    while (from !== null) {
      const o = await this.#req("GET", `${this.#path}/results?from=${from}&limit=${size}`);
      const list = o["results"];
      if (!Array.isArray(list))
        throw new SandqError("bad_response", `batch '${this.id}': a results page has no list`, 200);
      for (const r of list as Record<string, unknown>[]) {
        const item: BatchCaseResult = { case: r["case"] as number, result: new Result(r["result"] as RawResult) };
        if (typeof r["pass"] === "boolean") item.pass = r["pass"];
        yield item;
      }
      from = typeof o["next"] === "number" ? o["next"] : null;
    }
  }

  /** Resolves to the progress once every case is answered; wait_timeout at the deadline. */
  async wait(opts: BatchWaitOptions = {}): Promise<BatchProgress> {
    const deadline = Date.now() + (opts.timeoutMs ?? 600000);
    const every = opts.intervalMs ?? 500;
    for (;;) {
      const p = await this.status();
      if (p.done >= p.total) return p;
      if (Date.now() + every > deadline)
        throw new SandqError("wait_timeout", `batch '${this.id}': ${p.done} of ${p.total} cases done`);
      await new Promise((r) => setTimeout(r, every));
    }
  }

  /**
   * Cancels the cases no host has read (POST /v1/batches/ID/cancel): how
   * many were cancelled, are running (left to finish) and were finished.
   */
  async cancel(): Promise<{ cancelled: number; running: number; finished: number }> {
    const o = await this.#req("POST", `${this.#path}/cancel`);
    return { cancelled: o["cancelled"] as number, running: o["running"] as number,
      finished: o["finished"] as number };
  }
}
