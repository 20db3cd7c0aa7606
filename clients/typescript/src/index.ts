/*
 * index.ts - the sandq package: a client of sandq's HTTP gateway.
 *
 * Design: one entry point re-exporting the public surface (Client,
 * Batch, JobStream, Result, Sandbox, SandqError and the option types);
 * nothing runs on import.
 */
export { Client } from "./client.js";
export { Batch } from "./batch.js";
export type { BatchCase, BatchCaseResult, BatchOptions, BatchProgress, BatchResultsOptions, BatchWaitOptions,
  MalformedLine } from "./batch.js";
export type { ClientOptions, RunOptions, RunStreamingOptions, SubmitOptions, WaitOptions } from "./client.js";
export { JobStream } from "./stream.js";
export type { AbortSignalLike, OutputEvent, ProgressEvent, StreamEvent, StreamOptions } from "./stream.js";
export { Result } from "./result.js";
export { HistoryEntry, KV, Sandbox, snapshotKey } from "./sandbox.js";
export type { Entry, SandboxOptions, SandboxRunOptions } from "./sandbox.js";
export type { EgressRow, RawResult } from "./result.js";
export { SandqError } from "./errors.js";
export type { Job, JobBody, JobOptions, Limits } from "./job.js";
