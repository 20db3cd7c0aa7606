/*
 * client.ts - Client: jobs over sandq's HTTP gateway (docs/gateway.md).
 *
 * Design: one Client per gateway URL and API token; every call is one or
 * more fetch() requests (Node 18+'s own; no runtime dependency). submit()
 * is POST /v1/jobs; wait() repeats the bounded long poll
 * GET /v1/jobs/ID?wait=S (S at most 60, the gateway's bound) until the
 * result exists or the caller's deadline passes, so a wait of any length
 * holds no request longer than a minute and a proxy's idle timeout never
 * cuts it. A 404 not_found during a wait means "no result yet" (the
 * gateway cannot tell an unknown id from a job still queued) and the
 * wait goes on; at the deadline it throws wait_timeout. run(), sh() and
 * python() are submit() then wait(). Every request has its own abort
 * timer: the long poll's S plus requestTimeoutMs, any other request
 * requestTimeoutMs alone.
 */
import { Batch, BatchCase, BatchOptions, batchBody } from "./batch.js";
import { SandqError } from "./errors.js";
import { Job, JobBody, JobOptions, jobBody } from "./job.js";
import { RawResult, Result } from "./result.js";
import { AbortSignalLike, JobStream, StreamEvent, StreamOptions, WebSocketLike, WsConnect } from "./stream.js";
import { Sandbox, SandboxOptions } from "./sandbox.js";

/** @internal An answer of a sandbox route: its status, content type and bytes. */
export interface HttpAnswer {
  status: number;
  contentType: string;
  bytes: Uint8Array;
}

/** What a Client is made with. */
export interface ClientOptions {
  /** The gateway's base URL, e.g. "http://127.0.0.1:8080". */
  url: string;
  /** An API token ("sqt_...") made by `sandq tenant token add`. */
  token?: string;
  /** How long wait(), run(), sh() and python() wait for a result by default (ms; 60000). */
  timeoutMs?: number;
  /** How long one request may take beyond its long poll (ms; 30000). */
  requestTimeoutMs?: number;
}

/** The options of wait(). */
export interface WaitOptions {
  /** How long to wait for the result (ms; the client's timeoutMs by default). */
  timeoutMs?: number;
}

/** The options of run(), sh() and python(): the job's and the wait's. */
export interface RunOptions extends JobOptions, WaitOptions {}

/** The options of submit(). */
export interface SubmitOptions {
  /** Publish the job's output live, for stream() (the job field "stream"). */
  stream?: boolean;
}

/** The options of runStreaming(): the job's, the wait's and the stream's. */
export interface RunStreamingOptions extends WaitOptions {
  /** Called with each piece of output (and progress record) as it comes. */
  onEvent?: (ev: StreamEvent) => void;
  /** Aborts the stream (the job goes on; cancel() stops it). */
  signal?: AbortSignalLike;
}

/** The longest long poll the gateway takes (docs/gateway.md, wait=0..60). */
const POLL_MAX_S = 60;

/** A promise resolved after ms milliseconds. */
function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Splits RunOptions into the job's options and the wait's timeout. */
function split(opts: RunOptions): [JobOptions, WaitOptions] {
  const { timeoutMs, ...job } = opts;
  return [job, timeoutMs === undefined ? {} : { timeoutMs }];
}

/** A client of one gateway, acting as the tenant its token names. */
export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly #token: string | undefined;

  /** A client of the gateway at url (no request is made yet). */
  constructor(opts: ClientOptions) {
    if (opts === null || typeof opts !== "object" || typeof opts.url !== "string" || opts.url === "")
      throw new SandqError("invalid_job", "Client: option 'url' must be the gateway's URL");
    this.url = opts.url.replace(/\/+$/, "");
    this.#token = opts.token;
    this.timeoutMs = opts.timeoutMs ?? 60000;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 30000;
  }

  /**
   * One request; resolves to [HTTP status, parsed JSON body]. A non-2xx
   * answer throws its SandqError (but a 404 when notFoundOk); a network
   * failure or an answer that is not JSON throws connection / bad_response.
   * With rawType, body is a string sent as it is, of that media type.
   */
  async #request(method: string, path: string, body: unknown, timeoutMs: number,
    notFoundOk = false, rawType?: string): Promise<[number, Record<string, unknown>]> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    const init: RequestInit = { method, headers, signal: AbortSignal.timeout(timeoutMs) };
    if (body !== undefined && rawType !== undefined) {
      headers["content-type"] = rawType;
      init.body = body as string;
    } else if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res: Response;
    let text: string;
    try {
      res = await fetch(this.url + path, init);
      text = await res.text();
    } catch (e) {
      const why = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      throw new SandqError("connection", `${method} ${this.url}${path}: ${why}`, 0, { cause: e });
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const obj = parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>) : undefined;
    if (res.status >= 200 && res.status < 300) {
      if (obj === undefined)
        throw new SandqError("bad_response", `${method} ${path}: HTTP ${res.status} and not a JSON object`, res.status);
      return [res.status, obj];
    }
    const err = obj?.["error"];
    const e = err !== null && typeof err === "object" ? (err as Record<string, unknown>) : undefined;
    const code = typeof e?.["code"] === "string" ? (e["code"] as string) : `http_${res.status}`;
    const message = typeof e?.["message"] === "string" ? (e["message"] as string)
      : `${method} ${path}: HTTP ${res.status}: ${text.slice(0, 200)}`;
    if (notFoundOk && res.status === 404 && code === "not_found") return [404, obj ?? {}];
    throw new SandqError(code, message, res.status);
  }

  /**
   * @internal One request of the sandbox routes (sandbox.ts): body as
   * bytes, text or a JSON value (then content-type application/json
   * unless contentType says otherwise). The gateway waits up to 60 s for
   * the op, so the request may take that plus requestTimeoutMs. A non-2xx
   * answer throws its SandqError (code and HTTP status as answered).
   */
  async _http(method: string, path: string, body?: unknown, contentType?: string): Promise<HttpAnswer> {
    const headers: Record<string, string> = {};
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    const init: RequestInit = {
      method, headers, signal: AbortSignal.timeout(POLL_MAX_S * 1000 + this.requestTimeoutMs),
    };
    if (body instanceof Uint8Array) {
      headers["content-type"] = contentType ?? "application/octet-stream";
      init.body = body as unknown as BodyInit;
    } else if (typeof body === "string") {
      headers["content-type"] = contentType ?? "text/plain; charset=utf-8";
      init.body = body;
    } else if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res: Response;
    let bytes: Uint8Array;
    try {
      res = await fetch(this.url + path, init);
      bytes = new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      const why = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      throw new SandqError("connection", `${method} ${this.url}${path}: ${why}`, 0, { cause: e });
    }
    const ctype = res.headers.get("content-type") ?? "";
    if (res.status >= 200 && res.status < 300) return { status: res.status, contentType: ctype, bytes };
    const text = new TextDecoder().decode(bytes);
    let err: Record<string, unknown> | undefined;
    try {
      const o = JSON.parse(text) as Record<string, unknown>;
      const e = o?.["error"];
      if (e !== null && typeof e === "object") err = e as Record<string, unknown>;
    } catch {
      err = undefined;
    }
    const code = typeof err?.["code"] === "string" ? (err["code"] as string) : `http_${res.status}`;
    const message = typeof err?.["message"] === "string" && err["message"] !== "" ? (err["message"] as string)
      : `${method} ${path}: HTTP ${res.status}: ${text.slice(0, 200)}`;
    throw new SandqError(code, message, res.status);
  }

  /**
   * A persistent sandbox (Sandbox): with no id a new one is created at
   * once ("sbx-..."); with an id, that one is opened (SandqError
   * sandbox_not_found, 404, if there is none), or created under it with
   * { create: true } (or any of snapshot, labels, image, workdir,
   * fromImageDir). Disposing of it (await using) deletes a sandbox this
   * call created, unless keep is true, and keeps one it opened, unless
   * keep is false.
   */
  async sandbox(id?: string, opts: SandboxOptions = {}): Promise<Sandbox> {
    return Sandbox.create(this, id, opts);
  }

  /** The info maps of every sandbox of the tenant (GET /v1/sandboxes). */
  async sandboxes(): Promise<Record<string, unknown>[]> {
    const a = await this._http("GET", "/v1/sandboxes");
    return a.status === 204 ? [] : JSON.parse(new TextDecoder().decode(a.bytes)) as Record<string, unknown>[];
  }

  /** Whether the gateway process answers (GET /healthz). */
  async health(): Promise<boolean> {
    const [, o] = await this.#request("GET", "/healthz", undefined, this.requestTimeoutMs);
    return o["ok"] === true;
  }

  /** Whether the gateway can reach Redis (GET /readyz; false on 503). */
  async ready(): Promise<boolean> {
    try {
      const [, o] = await this.#request("GET", "/readyz", undefined, this.requestTimeoutMs);
      return o["ok"] === true;
    } catch (e) {
      if (e instanceof SandqError && e.status === 503) return false;
      throw e;
    }
  }

  /**
   * Submits job; resolves to its id once it is in the tenant's stream.
   * With { stream: true } its output is published live for stream().
   */
  async submit(job: Job, opts: SubmitOptions = {}): Promise<string> {
    const body = jobBody(job);
    if (opts.stream !== undefined) {
      if (typeof opts.stream !== "boolean")
        throw new SandqError("invalid_job", "option 'stream': must be true or false");
      body["stream"] = opts.stream;
    }
    return this.submitBody(body);
  }

  /**
   * Asks for job id's cancellation (POST /v1/jobs/ID/cancel): "requested"
   * when a host runs it (its result says cancelled within about a second),
   * "cancelled" when no host had read it. A job with a result already is
   * SandqError finished (409); an id no job of the tenant has, not_found.
   */
  async cancel(id: string): Promise<"requested" | "cancelled"> {
    const [, o] = await this.#request("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`, undefined,
      this.requestTimeoutMs);
    if (o["cancel"] !== "requested" && o["cancel"] !== "cancelled")
      throw new SandqError("bad_response", `cancel of job '${id}': the answer has no cancel state`, 202);
    return o["cancel"];
  }

  /**
   * Submits cases (jobs as the protocol writes them, with expect and
   * expect_mode; or JSON lines as `sandq batch run` reads) as one batch
   * (POST /v1/batches); resolves to its handle once every well-formed case
   * is queued. The same id again resumes: only cases never submitted and
   * without a result are added.
   */
  async batch(cases: BatchCase[] | string, opts: BatchOptions = {}): Promise<Batch> {
    const q = opts.id === undefined ? "" : `?id=${encodeURIComponent(opts.id)}`;
    const [, o] = await this.#request("POST", `/v1/batches${q}`, batchBody(cases), this.requestTimeoutMs,
      false, "application/x-ndjson");
    if (typeof o["id"] !== "string")
      throw new SandqError("bad_response", "POST /v1/batches: the answer has no id", 202);
    return new Batch(this.#batchRequest(), o["id"], o);
  }

  /** The handle of a batch submitted earlier (by any client of the tenant). */
  batchOf(id: string): Batch {
    return new Batch(this.#batchRequest(), id);
  }

  /** What a Batch asks the gateway through: this client's requests. */
  #batchRequest(): (method: string, path: string) => Promise<Record<string, unknown>> {
    return async (method, path) => (await this.#request(method, path, undefined, this.requestTimeoutMs))[1];
  }

  /**
   * Job id's live output (GET /v1/jobs/ID/events) as an async iterator of
   * stdout/stderr/progress events; the iteration ends with the job, and
   * the stream's .status then holds its status. The job must have been
   * submitted with { stream: true } (else SandqError no_stream, 404).
   * A dropped connection is resumed after the last event (stream.ts).
   * { transport: "websocket" } reads it over a WebSocket instead (needs
   * globalThis.WebSocket, else SandqError unsupported at once).
   */
  stream(id: string, opts: StreamOptions = {}): JobStream {
    const url = `${this.url}/v1/jobs/${encodeURIComponent(id)}/events`;
    const token = this.#token;
    let ws: WsConnect | undefined;
    const transport = opts.transport ?? "sse";
    if (transport !== "sse" && transport !== "websocket")
      throw new SandqError("invalid_job", "option 'transport': must be \"sse\" or \"websocket\"");
    if (transport === "websocket") {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const WS = (globalThis as any).WebSocket as (new (url: string, protocols: string[]) => WebSocketLike) | undefined;
      if (typeof WS !== "function")
        throw new SandqError("unsupported", "transport 'websocket' needs globalThis.WebSocket (a browser, " +
          "Node 22+, or Node 20 with --experimental-websocket)");
      const wsUrl = url.replace(/^http/, "ws");
      // The token as a subprotocol, never in the URL (it would be logged).
      const protocols = token !== undefined ? ["sandq.v1", `bearer.${token}`] : ["sandq.v1"];
      ws = (last) => new WS(last !== undefined ? `${wsUrl}?from=${encodeURIComponent(last)}` : wsUrl, protocols);
    }
    return new JobStream(id, (last, signal) => {
      const headers: Record<string, string> = { accept: "text/event-stream" };
      if (token !== undefined) headers["authorization"] = `Bearer ${token}`;
      if (last !== undefined) headers["last-event-id"] = last;
      return fetch(url, { headers, signal });
    }, opts, ws);
  }

  /**
   * Submits job with stream: true, hands each event to onEvent as it
   * comes, and resolves to the job's whole Result once it ends.
   */
  async runStreaming(job: Job, opts: RunStreamingOptions = {}): Promise<Result> {
    const id = await this.submit(job, { stream: true });
    const so: StreamOptions = {};
    if (opts.signal !== undefined) so.signal = opts.signal;
    for await (const ev of this.stream(id, so)) opts.onEvent?.(ev);
    return this.wait(id, opts.timeoutMs === undefined ? {} : { timeoutMs: opts.timeoutMs });
  }

  /**
   * Submits a job body exactly as given: docs/protocol.md's snake_case
   * fields, for a field this client does not know yet. The gateway checks
   * it (unknown_field, invalid_job).
   */
  async submitBody(body: JobBody): Promise<string> {
    const [, o] = await this.#request("POST", "/v1/jobs", body, this.requestTimeoutMs);
    if (typeof o["id"] !== "string")
      throw new SandqError("bad_response", "POST /v1/jobs: the answer has no id", 202);
    return o["id"];
  }

  /** The result of job id if there is one yet, else null (no waiting). */
  async get(id: string): Promise<Result | null> {
    const [st, o] = await this.#request("GET", `/v1/jobs/${encodeURIComponent(id)}`, undefined,
      this.requestTimeoutMs, true);
    return st === 404 ? null : new Result(o as RawResult);
  }

  /**
   * Waits for job id's result: long polls of at most 60 s until it exists
   * or timeoutMs passes (then throws SandqError wait_timeout).
   */
  async wait(id: string, opts: WaitOptions = {}): Promise<Result> {
    const limit = opts.timeoutMs ?? this.timeoutMs;
    const deadline = Date.now() + limit;
    const path = `/v1/jobs/${encodeURIComponent(id)}`;
    for (;;) {
      const left = deadline - Date.now();
      const s = Math.max(0, Math.min(POLL_MAX_S, Math.floor(left / 1000)));
      const [st, o] = await this.#request("GET", `${path}?wait=${s}`, undefined,
        s * 1000 + this.requestTimeoutMs, true);
      if (st !== 404) return new Result(o as RawResult);
      const now = Date.now();
      if (now >= deadline)
        throw new SandqError("wait_timeout", `job '${id}': no result within ${limit} ms`);
      if (s === 0) await sleep(Math.min(100, deadline - now));
    }
  }

  /**
   * Submits job and waits for its result in one request where it can
   * (POST /v1/jobs?wait=S answers the result when it comes within S
   * seconds, woken by its publish); a job that outlasts S is waited for
   * with wait() for the rest of the time.
   */
  async #submitAndWait(job: Job, w: WaitOptions): Promise<Result> {
    const limit = w.timeoutMs ?? this.timeoutMs;
    const deadline = Date.now() + limit;
    const s = Math.max(0, Math.min(POLL_MAX_S, Math.floor(limit / 1000)));
    const [st, o] = await this.#request("POST", `/v1/jobs?wait=${s}`, jobBody(job),
      s * 1000 + this.requestTimeoutMs);
    if (st === 200) return new Result(o as RawResult);
    if (typeof o["id"] !== "string")
      throw new SandqError("bad_response", "POST /v1/jobs: the answer has no id", st);
    return this.wait(o["id"], { timeoutMs: Math.max(0, deadline - Date.now()) });
  }

  /** Runs argv (PATH searched) and waits for its result. */
  async run(argv: string[], opts: RunOptions = {}): Promise<Result> {
    const [job, w] = split(opts);
    return this.#submitAndWait({ ...job, op: "exec", argv }, w);
  }

  /** Runs script with /bin/sh -c and waits for its result. */
  async sh(script: string, opts: RunOptions = {}): Promise<Result> {
    const [job, w] = split(opts);
    return this.#submitAndWait({ ...job, op: "sh", script }, w);
  }

  /** Runs code with python3 and waits for its result. */
  async python(code: string, opts: RunOptions = {}): Promise<Result> {
    const [job, w] = split(opts);
    return this.#submitAndWait({ ...job, op: "python", code }, w);
  }
}
