/*
 * stream.ts - JobStream: a job's live output (GET /v1/jobs/ID/events) as
 * an async iterator.
 *
 * Design: the route is Server-Sent Events (docs/gateway.md, "Live output
 * and cancel"); the text/event-stream body is parsed here from fetch's
 * body reader (no EventSource in Node, and no dependency). The parser
 * follows the HTML spec's rules: lines end in LF, CRLF or CR; a line
 * starting with ':' is a comment; "id", "event" and "data" fields (data
 * lines joined by LF); a blank line dispatches. Untrusted bytes are
 * bounded: a line or an event's data over MAX_EVENT is bad_response.
 *
 * stdout/stderr events yield {type, fd, data (exact bytes), text}; the
 * gateway sends {"data":TEXT} for UTF-8 pieces and {"data_b64":B64}
 * otherwise. progress events yield the record parsed from its JSON text.
 * end finishes the iteration and sets .status.
 *
 * Resume: every event's id is kept; when the connection drops (a network
 * error, or the body ending before "end", or nothing at all, not even the
 * gateway's 15 s keepalive, for idleMs while the stream reads) the stream
 * reconnects with Last-Event-ID and goes on after the last event it
 * yielded, at most `reconnects` times in a row (a connection that
 * yields an event resets the count). An HTTP error answer is not
 * retried: it throws its SandqError (no_stream, not_found,
 * unauthorized, ...).
 *
 * transport "websocket" reads the same route as a WebSocket instead
 * (globalThis.WebSocket: browsers, Node 22+, Node 20 with
 * --experimental-websocket): one JSON text message per event, the SSE
 * data object with "event" and "id" added; the token travels as the
 * subprotocol "bearer.TOKEN" beside "sandq.v1" (a browser cannot set
 * Authorization), and a resume asks ?from=ID. A WebSocket client never
 * sees the HTTP answer of a refused handshake, so a refusal (unknown
 * token, no_stream, not_found, too_many_streams) is one SandqError
 * websocket_refused, not retried. The gateway's keepalives are pings,
 * which the WebSocket API does not show, so idleMs does not apply; a
 * close without the end event is a drop and is resumed as above.
 */
import { SandqError } from "./errors.js";
import { fromBase64 } from "./result.js";

/** A piece of the job's output, in the order the worker read it. */
export interface OutputEvent {
  type: "stdout" | "stderr";
  fd: 1 | 2;
  /** The exact bytes (a piece may split a line or a UTF-8 character). */
  data: Uint8Array;
  /** data decoded as UTF-8 (invalid sequences as U+FFFD). */
  text: string;
  /** The event's id (an entry id of the output stream). */
  id: string;
}

/** An image.pull's progress record. */
export interface ProgressEvent {
  type: "progress";
  record: unknown;
  id: string;
}

/** What iterating a JobStream yields. */
export type StreamEvent = OutputEvent | ProgressEvent;

/**
 * An AbortSignal as far as a stream uses it. Declared here, not taken
 * from the DOM library, so the package's types compile in a project
 * without "DOM" in lib (an AbortSignal fits it).
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: any;   // eslint-disable-line @typescript-eslint/no-explicit-any
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

/** The options of Client.stream(). */
export interface StreamOptions {
  /** Start after this event id (an earlier event's id), not at the start. */
  from?: string;
  /** Reconnections in a row after a dropped connection (default 5; 0: none). */
  reconnects?: number;
  /** A connection silent this long (ms) counts as dropped (default 45000; keepalives come every 15 s). */
  idleMs?: number;
  /** Aborts the stream (the iteration throws the signal's reason). */
  signal?: AbortSignalLike;
  /** "sse" (the default) or "websocket" (needs globalThis.WebSocket). */
  transport?: "sse" | "websocket";
}

/**
 * A WebSocket as far as a stream uses it (the WHATWG API), declared here
 * like AbortSignalLike.
 * @internal
 */
export interface WebSocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}

/**
 * How a WebSocket stream connects: opens one after lastEventId.
 * @internal
 */
export type WsConnect = (lastEventId: string | undefined) => WebSocketLike;

/** The largest line or event data taken from the gateway (bytes of text). */
const MAX_EVENT = 8 << 20;

/** One parsed server-sent event. */
interface RawEvent {
  id: string | undefined;
  event: string;
  data: string;
}

/** Incremental text/event-stream parser: feed text, take complete events. */
export class SseParser {
  #buf = "";
  #id: string | undefined = undefined;
  #event = "";
  #data: string[] = [];
  #dataLen = 0;
  #sawCR = false;

  /** Feeds decoded text; returns the events it completed. */
  feed(text: string): RawEvent[] {
    const out: RawEvent[] = [];
    let s = this.#buf + text;
    if (this.#sawCR && s.startsWith("\n")) s = s.slice(1);   // CRLF split across feeds
    this.#sawCR = false;
    let start = 0;
    for (let i = 0; i < s.length; i++) {
      const ch = s.charCodeAt(i);
      if (ch !== 10 && ch !== 13) continue;
      this.#line(s.slice(start, i), out);
      if (ch === 13) {
        if (i + 1 < s.length) {
          if (s.charCodeAt(i + 1) === 10) i++;
        } else {
          this.#sawCR = true;
        }
      }
      start = i + 1;
    }
    this.#buf = s.slice(start);
    if (this.#buf.length > MAX_EVENT)
      throw new SandqError("bad_response", `event stream: a line longer than ${MAX_EVENT} characters`);
    return out;
  }

  /** One line: a field, a comment, or the blank line that dispatches. */
  #line(line: string, out: RawEvent[]): void {
    if (line === "") {
      if (this.#data.length > 0 || this.#event !== "")
        out.push({ id: this.#id, event: this.#event || "message", data: this.#data.join("\n") });
      this.#event = "";
      this.#data = [];
      this.#dataLen = 0;
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (name) {
      case "id":
        if (!value.includes("\0")) this.#id = value;
        break;
      case "event":
        this.#event = value;
        break;
      case "data":
        this.#dataLen += value.length + 1;
        if (this.#dataLen > MAX_EVENT)
          throw new SandqError("bad_response", `event stream: an event larger than ${MAX_EVENT} characters`);
        this.#data.push(value);
        break;
      default:
        break;   // retry and unknown fields: ignored
    }
  }
}

/**
 * How a stream connects: the Client passes a function making one request.
 * @internal
 */
export type Connect = (lastEventId: string | undefined, signal: AbortSignal) => Promise<Response>;

/** A connection ended without the end event (to be resumed). */
class Dropped extends Error {}

/** The data object of an event, checked. */
function dataObject(ev: RawEvent): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(ev.data);
  } catch {
    throw new SandqError("bad_response", `event stream: the data of a '${ev.event}' event is not JSON`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v))
    throw new SandqError("bad_response", `event stream: the data of a '${ev.event}' event is not an object`);
  return v as Record<string, unknown>;
}

/** The bytes of an output event: data (UTF-8 text) or data_b64. */
function outputBytes(o: Record<string, unknown>, event: string): Uint8Array {
  if (typeof o["data"] === "string") return new TextEncoder().encode(o["data"]);
  if (typeof o["data_b64"] === "string") return fromBase64(o["data_b64"]);
  throw new SandqError("bad_response", `event stream: a '${event}' event has neither data nor data_b64`);
}

/** A job's live output; iterate it once (for await). */
export class JobStream implements AsyncIterable<StreamEvent> {
  /** The job's id. */
  readonly id: string;
  /** The job's status once the end event came (ok, failed, timeout, cancelled, ...). */
  status: string | undefined = undefined;
  /** The id of the last event seen (what a resume sends as Last-Event-ID). */
  lastEventId: string | undefined;
  readonly #connect: Connect;
  readonly #reconnects: number;
  readonly #idleMs: number;
  readonly #signal: AbortSignalLike | undefined;
  readonly #wsConnect: WsConnect | undefined;
  #started = false;

  /**
   * A stream of job id over connect (no request is made until iterated;
   * Client.stream() makes one).
   * @internal
   */
  constructor(id: string, connect: Connect, opts: StreamOptions = {}, wsConnect?: WsConnect) {
    this.id = id;
    this.#connect = connect;
    this.#wsConnect = wsConnect;
    this.lastEventId = opts.from;
    this.#reconnects = opts.reconnects ?? 5;
    this.#idleMs = opts.idleMs ?? 45000;
    this.#signal = opts.signal;
  }

  /** Iterates the events until end; throws a SandqError on an error answer. */
  async *[Symbol.asyncIterator](): AsyncGenerator<StreamEvent, void, undefined> {
    if (this.#started) throw new SandqError("bad_response", `stream of job '${this.id}': iterated twice`);
    this.#started = true;
    let failures = 0;
    for (;;) {
      let yielded = false;
      try {
        for await (const ev of this.#wsConnect ? this.#wsConnection(this.#wsConnect) : this.#connection()) {
          yielded = true;
          yield ev;
        }
        return;   // end came
      } catch (e) {
        if (!(e instanceof Dropped)) throw e;
        if (yielded) failures = 0;
        if (++failures > this.#reconnects)
          throw new SandqError("connection", `stream of job '${this.id}': ${e.message}`, 0, { cause: e.cause });
        await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** (failures - 1))));
      }
    }
  }

  /** Events until end, or Dropped when the connection goes. */
  async *#connection(): AsyncGenerator<StreamEvent, void, undefined> {
    const ac = new AbortController();
    const onAbort = () => ac.abort(this.#signal?.reason);
    if (this.#signal?.aborted) throw this.#signal.reason;
    this.#signal?.addEventListener("abort", onAbort, { once: true });
    let idle = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      if (timer !== undefined) clearTimeout(timer);
      timer = setTimeout(() => {
        idle = true;
        ac.abort(new Error(`no byte for ${this.#idleMs} ms`));
      }, this.#idleMs);
    };
    /** What a failure of the connection means: the caller's abort, or a drop. */
    const why = (e: unknown): unknown => {
      if (this.#signal?.aborted) return this.#signal.reason;
      if (e instanceof SandqError) return e;
      const msg = idle ? `no byte for ${this.#idleMs} ms`
        : e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      const d = new Dropped(msg);
      d.cause = e;
      return d;
    };
    try {
      arm();
      let res: Response;
      try {
        res = await this.#connect(this.lastEventId, ac.signal);
      } catch (e) {
        throw why(e);
      }
      if (res.status !== 200) {
        const text = await res.text().catch(() => "");
        let code = `http_${res.status}`;
        let message = `GET events of job '${this.id}': HTTP ${res.status}: ${text.slice(0, 200)}`;
        try {
          const err = JSON.parse(text)?.error;
          if (typeof err?.code === "string") code = err.code;
          if (typeof err?.message === "string") message = err.message;
        } catch {
          /* not JSON: the generic message */
        }
        throw new SandqError(code, message, res.status);
      }
      if (res.body === null) throw new Dropped("the answer has no body");
      const reader = res.body.getReader();
      const dec = new TextDecoder("utf-8");
      const parser = new SseParser();
      try {
        for (;;) {
          let chunk: ReadableStreamReadResult<Uint8Array>;
          try {
            chunk = await reader.read();
          } catch (e) {
            throw why(e);
          }
          if (chunk.done) throw new Dropped("the connection ended before the end event");
          arm();
          for (const ev of parser.feed(dec.decode(chunk.value, { stream: true }))) {
            const out = this.#event(ev);
            if (out === "end") return;
            if (out === undefined) continue;
            clearTimeout(timer);   // the caller's time with an event is not silence
            yield out;
            arm();
          }
        }
      } finally {
        reader.cancel().catch(() => undefined);
      }
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      this.#signal?.removeEventListener("abort", onAbort);
      ac.abort();
    }
  }

  /**
   * Events until end over one WebSocket, or Dropped when it closes before
   * the end message; a close before it opened is websocket_refused.
   */
  async *#wsConnection(connect: WsConnect): AsyncGenerator<StreamEvent, void, undefined> {
    type Item = { msg: unknown } | { close: number; reason: string } | { abort: unknown };
    if (this.#signal?.aborted) throw this.#signal.reason;
    const queue: Item[] = [];
    let wake: (() => void) | undefined;
    let opened = false;
    const push = (it: Item) => {
      queue.push(it);
      wake?.();
      wake = undefined;
    };
    const ws = connect(this.lastEventId);
    const onAbort = () => push({ abort: this.#signal?.reason });
    this.#signal?.addEventListener("abort", onAbort, { once: true });
    ws.onopen = () => { opened = true; };
    ws.onmessage = (e) => push({ msg: e.data });
    ws.onclose = (e) => push({ close: e.code, reason: e.reason });
    // A refused handshake: a close event follows, but not in Node 20's
    // WebSocket (undici), which only reports the error.
    ws.onerror = () => {
      if (!opened) push({ close: 1006, reason: "" });
    };
    try {
      for (;;) {
        while (queue.length === 0) await new Promise<void>((r) => { wake = r; });
        const it = queue.shift() as Item;
        if ("abort" in it) throw it.abort;
        if ("close" in it) {
          if (!opened)
            throw new SandqError("websocket_refused", `events of job '${this.id}': the gateway refused ` +
              "the WebSocket (an unknown token, no_stream, not_found or too_many_streams: a WebSocket " +
              "client is not shown the HTTP answer; the SSE transport is)");
          throw new Dropped(`the WebSocket closed (${it.close}${it.reason ? " " + it.reason : ""}) before the end event`);
        }
        if (typeof it.msg !== "string" || it.msg.length > MAX_EVENT)
          throw new SandqError("bad_response", "event WebSocket: a message that is not text, or over " +
            `${MAX_EVENT} characters`);
        const raw: RawEvent = { id: undefined, event: "", data: it.msg };
        const o = dataObject(raw);
        raw.event = typeof o["event"] === "string" ? o["event"] : "message";
        if (typeof o["id"] === "string") raw.id = o["id"];
        const out = this.#event(raw, o);
        if (out === "end") return;
        if (out !== undefined) yield out;
      }
    } finally {
      this.#signal?.removeEventListener("abort", onAbort);
      ws.onmessage = ws.onclose = ws.onopen = null;
      ws.close(1000);
    }
  }

  /**
   * One server event as what the iteration yields, "end", or undefined
   * (skipped); o is its data object if already parsed.
   */
  #event(ev: RawEvent, o?: Record<string, unknown>): StreamEvent | "end" | undefined {
    if (ev.id !== undefined) this.lastEventId = ev.id;
    const id = ev.id ?? "";
    const obj = () => o ?? dataObject(ev);
    switch (ev.event) {
      case "stdout":
      case "stderr": {
        const data = outputBytes(obj(), ev.event);
        const text = new TextDecoder("utf-8").decode(data);
        return { type: ev.event, fd: ev.event === "stdout" ? 1 : 2, data, text, id };
      }
      case "progress": {
        const data = outputBytes(obj(), ev.event);
        let record: unknown;
        try {
          record = JSON.parse(new TextDecoder("utf-8").decode(data));
        } catch {
          throw new SandqError("bad_response", "event stream: a progress record is not JSON");
        }
        return { type: "progress", record, id };
      }
      case "end": {
        const e = obj();
        this.status = typeof e["status"] === "string" ? e["status"] : "unknown";
        return "end";
      }
      default:
        return undefined;   // an event this client does not know yet
    }
  }
}
