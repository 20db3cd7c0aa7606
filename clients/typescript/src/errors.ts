/*
 * errors.ts - SandqError, the one error class the client throws.
 *
 * Design: the gateway answers every failure as {"error":{"code","message"}}
 * with an HTTP status (docs/gateway.md, "Errors"); a SandqError carries the
 * three as they came. Failures found before or without an HTTP answer use
 * the same class with status 0 and the client's own codes:
 *
 *   unknown_field  an option or job field this client does not take
 *   invalid_job    an option of the wrong type
 *   wait_timeout   wait() reached its deadline with no result
 *   connection     the gateway could not be reached (fetch failed)
 *   bad_response   an answer that is not the JSON the gateway sends
 *
 * so callers switch on .code alone. A job that ran and failed is not an
 * error: it is a Result whose status says how it ended.
 */

/** An error of the gateway (status: its HTTP status) or of the client (status 0). */
export class SandqError extends Error {
  /** The gateway's error code (unauthorized, unknown_field, ...) or the client's. */
  readonly code: string;
  /** The HTTP status of the answer; 0 when there was none. */
  readonly status: number;

  /** An error with its code, message and HTTP status (0: no answer). */
  constructor(code: string, message: string, status = 0, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandqError";
    this.code = code;
    this.status = status;
  }
}
